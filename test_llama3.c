/*
test_llama3.c: the CPU Llama 3 trainer against the PyTorch reference.

python train_llama3.py --model <dN | model.bin> --write_tensors 1 writes a model file and a debug
state: one batch (x, y), the reference logits, loss and every parameter gradient for it, the losses
and gradient norms of `nsteps` AdamW steps on that batch, and the float32 noise of each step loss.
This program loads both, runs our forward and backward on the batch, prints a table of every
tensor's difference, then runs the same AdamW steps and compares every loss and gradient norm.
Exit status 0 only if everything is within tolerance.

Debug state, little-endian: int32 header[256]: [0]=20240803 [1]=3 [2]=B [3]=T [4]=nsteps
[5..10]=float32 bits of lr, beta1, beta2, eps, weight_decay, grad_clip [11]=nnoise (0 or nsteps)
[12]=optimizer (0 AdamW, 1 Muon: refused here, the CPU trainer has AdamW only) [13..17] Muon
settings. Body: x int32[B*T], y int32[B*T], logits fp32[B*T*V], loss fp32, every gradient fp32 in
model-file order, losses fp32[nsteps], grad_norms fp32[nsteps], loss_noise fp32[nnoise].

Tolerances: test_gpt2's table (llmc/tensor_check.h, cpu_tolerances): logits max abs diff 1e-4,
loss 1e-5, each gradient tensor max abs diff <= 1e-3 x max|reference| and relative L2 error
<= 3e-5, step losses by the reference's measured float32 noise (step_loss_tolerance); gradient
norms relative 1e-4 (fp32). With -p bf16 the BF16 table applies (and norms relative 5e-2).
*/
#define LLMC_NO_MAIN
#include "train_llama3.c"
#include "llmc/args.h"
#include "llmc/debug_state.h"
#include "llmc/tensor_check.h"
#include "llmc/trainer.h"

#define LLAMA3_STATE_MAGIC 20240803
#define LLAMA3_STATE_VERSION 3

typedef struct {
    DebugState d;        // what llmc/tensor_check.h's step rule reads (x, y, logits, loss, grads, losses, noise)
    float* grad_norms;   // (nsteps) the reference's global gradient norm before clipping, per step
} Llama3DebugState;

// reads and validates a Llama 3 debug state against the model's V, maxT and parameter count
static void llama3_debug_state_read(Llama3DebugState* s, const char* path, const Llama3Config* cfg, size_t num_parameters) {
    DebugState* d = &s->d;
    FILE* f = fopenCheck(path, "rb");
    size_t file_size = file_size_check(f, path);
    int h[256];
    if (file_size < sizeof(h)) { llmc_die("%s: not a Llama 3 debug state (%zu bytes, shorter than the header)", path, file_size); }
    read_header_check(f, path, h, LLAMA3_STATE_MAGIC, LLAMA3_STATE_VERSION, LLAMA3_STATE_VERSION, "Llama 3 debug state");
    d->B = h[2];
    d->T = h[3];
    d->nsteps = h[4];
    if (d->B < 1 || d->B > 65536) { llmc_die("%s: bad debug state header: B = %d", path, d->B); }
    if (d->T < 1 || d->T > cfg->max_seq_len) {
        llmc_die("%s: bad debug state header: T = %d (the model's block size is %d)", path, d->T, cfg->max_seq_len);
    }
    if (d->nsteps < 0 || d->nsteps > 100000) { llmc_die("%s: bad debug state header: nsteps = %d", path, d->nsteps); }
    float hp[6];
    for (int i = 0; i < 6; i++) {
        hp[i] = debug_state_float_bits(h[5 + i]);
        if (!isfinite(hp[i]) || hp[i] < 0.0f) { llmc_die("%s: bad debug state header: optimizer setting header[%d] = %g", path, 5 + i, hp[i]); }
    }
    d->lr = hp[0];
    d->beta1 = hp[1];
    d->beta2 = hp[2];
    d->eps = hp[3];
    d->weight_decay = hp[4];
    d->grad_clip = hp[5];
    int nnoise = h[11];
    if (nnoise != 0 && nnoise != d->nsteps) {
        llmc_die("%s: bad debug state header: %d loss noises for %d steps (header[11] must be 0 or nsteps)", path, nnoise, d->nsteps);
    }
    if (h[12] != 0) {
        llmc_die("%s: the reference steps use optimizer %d (1 = Muon); test_llama3 checks AdamW (0) only", path, h[12]);
    }
    d->has_loss_noise = nnoise > 0;
    size_t BT = (size_t)d->B * d->T, V = (size_t)cfg->vocab_size, nsteps = (size_t)d->nsteps;
    size_t expected = sizeof(h) + 2 * BT * sizeof(int) + (BT * V + 1 + num_parameters + 2 * nsteps + (size_t)nnoise) * sizeof(float);
    if (file_size != expected) {
        llmc_die("%s: debug state size mismatch: B=%d T=%d V=%zu nsteps=%d nnoise=%d and %zu parameters need %zu bytes, the file has %zu (wrong model?)",
                 path, d->B, d->T, V, d->nsteps, nnoise, num_parameters, expected, file_size);
    }
    d->x = (int*)mallocCheck(BT * sizeof(int));
    d->y = (int*)mallocCheck(BT * sizeof(int));
    d->logits = (float*)mallocCheck(BT * V * sizeof(float));
    d->grads = (float*)mallocCheck(num_parameters * sizeof(float));
    d->losses = (float*)mallocCheck((nsteps + 1) * sizeof(float));
    s->grad_norms = (float*)mallocCheck((nsteps + 1) * sizeof(float));
    d->loss_noise = (float*)callocCheck(nsteps + 1, sizeof(float));
    freadCheck(d->x, sizeof(int), BT, f, path);
    freadCheck(d->y, sizeof(int), BT, f, path);
    freadCheck(d->logits, sizeof(float), BT * V, f, path);
    freadCheck(&d->loss, sizeof(float), 1, f, path);
    freadCheck(d->grads, sizeof(float), num_parameters, f, path);
    freadCheck(d->losses, sizeof(float), nsteps, f, path);
    freadCheck(s->grad_norms, sizeof(float), nsteps, f, path);
    freadCheck(d->loss_noise, sizeof(float), (size_t)nnoise, f, path);
    fcloseCheck(f, path);
    for (int i = 0; i < nnoise; i++) {
        if (!isfinite(d->loss_noise[i]) || d->loss_noise[i] < 0.0f) {
            llmc_die("%s: loss noise of step %d is %g (must be finite and >= 0)", path, i, d->loss_noise[i]);
        }
    }
    for (size_t i = 0; i < BT; i++) {
        if (d->x[i] < 0 || (size_t)d->x[i] >= V || d->y[i] < 0 || (size_t)d->y[i] >= V) {
            llmc_die("%s: token id at position %zu is outside [0, %zu) (x %d, y %d)", path, i, V, d->x[i], d->y[i]);
        }
    }
}

typedef struct {
    const char* model_path;
    const char* state_path;
    const char* precision;
} TestArgs;

static const ArgSpec TEST_ARG_TABLE[] = {
    {"-e", ARG_STRING, offsetof(TestArgs, model_path), "llama3_d2.bin", 0, 0, "Llama 3 model file written by train_llama3.py"},
    {"-s", ARG_STRING, offsetof(TestArgs, state_path), "llama3_d2_debug_state.bin", 0, 0, "debug state written by train_llama3.py"},
    {"-p", ARG_STRING, offsetof(TestArgs, precision), "fp32", 0, 0, "GEMM precision: fp32 | bf16 (bf16-rounded inputs, fp32 sums)"},
};

int main(int argc, char** argv) {
    TestArgs args;
    args_parse(TEST_ARG_TABLE, (int)(sizeof(TEST_ARG_TABLE) / sizeof(TEST_ARG_TABLE[0])), &args, argc, argv,
               "Checks the CPU Llama 3 trainer against the reference tensors written by python train_llama3.py --write_tensors 1.");
    if (matmul_precision_parse(args.precision, &matmul_precision) != 0) {
        llmc_die("flag -p: bad value \"%s\": use fp32 or bf16 (run %s --help to list the flags)", args.precision, argv[0]);
    }
    if (!file_exists(args.model_path)) {
        llmc_die("%s: no such Llama 3 model file (python train_llama3.py --write_tensors 1 writes it)", args.model_path);
    }
    if (!file_exists(args.state_path)) {
        llmc_die("%s: no such debug state (python train_llama3.py --write_tensors 1 writes it)", args.state_path);
    }
    Llama3 model;
    llama3_build_from_file(&model, args.model_path);
    Llama3Config cfg = model.config;
    Llama3DebugState s;
    llama3_debug_state_read(&s, args.state_path, &cfg, model.num_parameters);
    DebugState* d = &s.d;
    int B = d->B, T = d->T, V = cfg.vocab_size;
    printf("model %s: Llama 3 L=%d NH=%d NKV=%d C=%d FFN=%d maxT=%d V=%d%s%s, %zu parameters\n", args.model_path,
           cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.channels, cfg.ffn_hidden, cfg.max_seq_len, V,
           cfg.tied_embeddings ? ", tied lm_head" : "", cfg.use_scaled_rope ? ", scaled RoPE" : "", model.num_parameters);
    printf("debug state %s: B=%d T=%d, %d steps of AdamW (lr %g, betas %g %g, eps %g, wd %g, clip %g)\n", args.state_path,
           B, T, d->nsteps, d->lr, d->beta1, d->beta2, d->eps, d->weight_decay, d->grad_clip);
    int bf16 = matmul_precision == MATMUL_BF16;
    TestTolerances tol = cpu_tolerances(bf16);
    double norm_rtol = bf16 ? 5e-2 : 1e-4;
    printf("precision %s\n", bf16 ? "bf16 (GEMM inputs rounded to bf16)" : "fp32");
    step_loss_rule_print(stdout, d, &tol);
    llama3_allocate_activations(&model, B, T);
    llama3_allocate_optimizer(&model, 0, model.num_parameters);

    llama3_forward(&model, d->x, d->y, B, T);
    llama3_zero_grad(&model);
    llama3_backward(&model, 1.0f);

    CheckReport report = {0, 0};
    check_table_header_l2(stdout);
    TensorCheck c = tensor_check_l2(model.acts.logits, d->logits, (size_t)B * T * V, tol.logits_rtol, tol.logits_atol, tol.logits_l2);
    check_table_row_l2(stdout, &report, "logits", &c);
    check_scalar_l2(stdout, &report, "loss", model.mean_loss, d->loss, tol.loss_atol);
    size_t off = 0;
    for (int k = 0; k < LLAMA3_NUM_PARAMETER_TENSORS; k++) {
        size_t n = model.param_sizes[k];
        if (n == 0) { continue; } // lm_head when tied
        char name[32];
        snprintf(name, sizeof(name), "d%s", LLAMA3_PARAMETER_NAMES[k]);
        c = tensor_check_l2(model.grads_memory + off, d->grads + off, n, tol.grad_rtol, 0.0, tol.grad_l2);
        check_table_row_l2(stdout, &report, name, &c);
        off += n;
    }

    // nsteps of AdamW on the same batch; losses[i] is the loss before update i+1, grad_norms[i] its norm
    for (int step = 0; step < d->nsteps; step++) {
        llama3_forward(&model, d->x, d->y, B, T);
        char name[32];
        snprintf(name, sizeof(name), "loss step %d", step);
        check_scalar_l2(stdout, &report, name, model.mean_loss, d->losses[step], step_loss_tolerance(d, step, &tol));
        llama3_zero_grad(&model);
        llama3_backward(&model, 1.0f);
        float norm = llama3_grad_norm(&model);
        snprintf(name, sizeof(name), "norm step %d", step);
        check_scalar_l2(stdout, &report, name, norm, s.grad_norms[step], norm_rtol * fabs((double)s.grad_norms[step]));
        llama3_update(&model, d->lr, d->beta1, d->beta2, d->eps, d->weight_decay, grad_clip_scale(norm, d->grad_clip), step + 1);
    }

    printf("\n");
    check_report_summary(stdout, &report);
    debug_state_free(d);
    free(s.grad_norms);
    llama3_free(&model);
    return check_report_exit_code(&report);
}
