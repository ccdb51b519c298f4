/*
test_gpt2.c: the CPU trainer against the PyTorch reference.

train_gpt2.py --write_tensors 1 writes a checkpoint and a debug state: one batch (x, y), the
reference logits, loss and all 16 parameter gradients for it, and the losses of `nsteps`
optimizer steps on that batch: AdamW, or (train_gpt2.py --optimizer muon, header[12] = 1) Muon on the
blocks' matrices with AdamW on the rest, as the header's settings say (llmc/muon.h). This program loads both, runs our forward and backward on the
batch, prints a table of every tensor's difference, then runs the same optimizer steps
and compares every loss. Exit status 0 only if everything is within tolerance. The reader
(llmc/debug_state.h) and the comparison and table (llmc/tensor_check.h) are test_gpt2.cu's too.

Tolerances (llmc/tensor_check.h, cpu_tolerances): logits max abs diff 1e-4, loss 1e-5, each
gradient tensor max abs diff <= 1e-3 x max|reference| of that tensor. Each optimizer-step loss:
1e-5 + 10 x the running max of the float32 noise the reference measured for its steps (stored
in the debug state), at most 0.1 % of the loss (step_loss_tolerance; a debug state without the
noise section gets the old fixed 1e-4). With -p bf16 the GEMMs run on bf16-rounded inputs and
the BF16 table applies (logits 2e-2 x max|ref|, loss 2e-2, gradients 1e-1 x max|ref|, step
losses at least 5e-2).
*/
#define LLMC_NO_MAIN
#include "train_gpt2.c"
#include "llmc/args.h"
#include "llmc/debug_state.h"
#include "llmc/tensor_check.h"

typedef struct {
    const char* model_path;
    const char* state_path;
    const char* precision;
} TestArgs;

static const ArgSpec TEST_ARG_TABLE[] = {
    {"-e", ARG_STRING, offsetof(TestArgs, model_path), "gpt2_124M.bin", 0, 0, "model checkpoint written by train_gpt2.py"},
    {"-s", ARG_STRING, offsetof(TestArgs, state_path), "gpt2_124M_debug_state.bin", 0, 0, "debug state written by train_gpt2.py"},
    {"-p", ARG_STRING, offsetof(TestArgs, precision), "fp32", 0, 0, "GEMM precision: fp32 | bf16 (bf16-rounded inputs, fp32 sums)"},
};

int main(int argc, char** argv) {
    TestArgs args;
    args_parse(TEST_ARG_TABLE, (int)(sizeof(TEST_ARG_TABLE) / sizeof(TEST_ARG_TABLE[0])), &args, argc, argv,
               "Checks the CPU trainer against the reference tensors written by python train_gpt2.py --write_tensors 1.");
    if (matmul_precision_parse(args.precision, &matmul_precision) != 0) {
        llmc_die("flag -p: bad value \"%s\": use fp32 or bf16 (run %s --help to list the flags)", args.precision, argv[0]);
    }
    if (!file_exists(args.model_path)) {
        llmc_die("%s: no such model checkpoint (python train_gpt2.py --write_tensors 1 writes it)", args.model_path);
    }
    if (!file_exists(args.state_path)) {
        llmc_die("%s: no such debug state (python train_gpt2.py --write_tensors 1 writes it)", args.state_path);
    }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, args.model_path);
    GPT2Config cfg = model.config;
    DebugState d;
    debug_state_read(&d, args.state_path, &cfg, model.num_parameters);
    int B = d.B, T = d.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    printf("model %s: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %zu parameters\n", args.model_path, cfg.num_layers,
           cfg.num_heads, cfg.channels, cfg.max_seq_len, V, Vp, model.num_parameters);
    printf("debug state %s: B=%d T=%d, %d steps of AdamW (lr %g, betas %g %g, eps %g, wd %g, clip %g)\n",
           args.state_path, B, T, d.nsteps, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, d.grad_clip);
    MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
    if (d.optimizer == OPTIMIZER_MUON) {
        printf("  with Muon on the block matrices (lr %g, momentum %g, nesterov %d, %d Newton-Schulz steps, lr adjustment %s)\n",
               muon.lr, muon.momentum, muon.nesterov, muon.ns_steps, muon.adjust_lr == MUON_ADJUST_ORIGINAL ? "original" : "match_rms_adamw");
    }
    TestTolerances tol = cpu_tolerances(matmul_precision == MATMUL_BF16);
    printf("precision %s\n", matmul_precision == MATMUL_BF16 ? "bf16 (GEMM inputs rounded to bf16)" : "fp32");
    step_loss_rule_print(stdout, &d, &tol);
    gpt2_allocate_activations(&model, B, T);
    if (d.optimizer == OPTIMIZER_MUON) {
        gpt2_allocate_muon(&model, &muon, 0, 1, 0);
    } else {
        gpt2_allocate_optimizer(&model, 0, model.num_parameters);
    }

    // forward and backward on the recorded batch
    gpt2_forward(&model, d.x, d.y, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);

    CheckReport report = {0, 0};
    check_table_header(stdout);
    // logits: ours are (B,T,Vp), the reference's (B,T,V)
    float* logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        memcpy(logits + bt * V, model.acts.logits + bt * Vp, (size_t)V * sizeof(float));
    }
    TensorCheck c = tensor_check(logits, d.logits, (size_t)B * T * V, tol.logits_rtol, tol.logits_atol);
    check_table_row(stdout, &report, "logits", &c);
    free(logits);
    check_scalar(stdout, &report, "loss", model.mean_loss, d.loss, tol.loss_atol);
    size_t off = 0;
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        size_t n = model.param_sizes[k];
        char name[32];
        snprintf(name, sizeof(name), "d%s", GPT2_PARAMETER_NAMES[k]);
        c = tensor_check(model.grads_memory + off, d.grads + off, n, tol.grad_rtol, 0.0);
        check_table_row(stdout, &report, name, &c);
        off += n;
    }

    // nsteps of the optimizer on the same batch; losses[i] is the loss before update i+1
    for (int step = 0; step < d.nsteps; step++) {
        gpt2_forward(&model, d.x, d.y, B, T);
        char name[32];
        snprintf(name, sizeof(name), "loss step %d", step);
        check_scalar(stdout, &report, name, model.mean_loss, d.losses[step], step_loss_tolerance(&d, step, &tol));
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        float scale = grad_clip_scale(norm, d.grad_clip);
        if (d.optimizer == OPTIMIZER_MUON) {
            gpt2_update_muon(&model, d.lr, d.muon_lr, d.beta1, d.beta2, d.eps, d.weight_decay, scale, step + 1);
        } else {
            gpt2_update(&model, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, scale, step + 1);
        }
    }

    printf("\n");
    check_report_summary(stdout, &report);
    debug_state_free(&d);
    gpt2_free(&model);
    return check_report_exit_code(&report);
}
