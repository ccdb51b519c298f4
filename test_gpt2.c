/*
test_gpt2.c: the CPU trainer against the PyTorch reference.

train_gpt2.py --write_tensors 1 writes a checkpoint and a debug state: one batch (x, y), the
reference logits, loss and all 16 parameter gradients for it, and the losses of `nsteps`
optimizer steps on that batch: AdamW, or (train_gpt2.py --optimizer muon, header[12] = 1) Muon on the
blocks' matrices with AdamW on the rest, as the header's settings say (llmc/cpu/muon.h). This program loads both, runs our forward and backward on the
batch, prints a table of every tensor's difference, then runs the same optimizer steps
and compares every loss. Exit status 0 only if everything is within tolerance. The reader
(llmc/debug_state.h) and the comparison and table (llmc/tensor_check.h) are test_gpt2.cu's too; the
flags, the table rows and the verdict (llmc/cpu/cpu_test.h) test_llama3.c's.

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
#include "llmc/cpu/cpu_test.h"

static const CpuTestProgram TEST_GPT2 = {
    "Checks the CPU trainer against the reference tensors written by python train_gpt2.py --write_tensors 1.",
    "train_gpt2.py", "model checkpoint", "gpt2_124M.bin", "gpt2_124M_debug_state.bin",
};

int main(int argc, char** argv) {
    CpuTestArgs args;
    cpu_test_args_parse(&args, argc, argv, &TEST_GPT2);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, args.model_path);
    GPT2Config cfg = model.config;
    DebugState d;
    debug_state_read(&d, args.state_path, &cfg, model.num_parameters);
    int B = d.B, T = d.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    printf("model %s: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %zu parameters\n", args.model_path, cfg.num_layers,
           cfg.num_heads, cfg.channels, cfg.max_seq_len, V, Vp, model.num_parameters);
    CpuTest t;
    cpu_test_begin(&t, args.state_path, &d, 0);
    gpt2_allocate_activations(&model, B, T);
    if (d.optimizer == OPTIMIZER_MUON) {
        MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
        gpt2_allocate_muon(&model, &muon, 0, 1, 0);
    } else {
        gpt2_allocate_optimizer(&model, 0, model.num_parameters);
    }

    // forward and backward on the recorded batch
    gpt2_forward(&model, d.x, d.y, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);

    cpu_test_table_header(&t);
    // logits: ours are (B,T,Vp), the reference's (B,T,V)
    float* logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        memcpy(logits + bt * V, model.acts.logits + bt * Vp, (size_t)V * sizeof(float));
    }
    cpu_test_tensor(&t, "logits", logits, d.logits, (size_t)B * T * V, t.tol.logits_rtol, t.tol.logits_atol, t.tol.logits_l2);
    free(logits);
    cpu_test_scalar(&t, "loss", model.mean_loss, d.loss, t.tol.loss_atol);
    cpu_test_grads(&t, model.grads_memory, model.param_sizes, GPT2_PARAMETER_NAMES, GPT2_NUM_PARAMETER_TENSORS);

    // nsteps of the optimizer on the same batch; losses[i] is the loss before update i+1
    for (int step = 0; step < d.nsteps; step++) {
        gpt2_forward(&model, d.x, d.y, B, T);
        cpu_test_step_loss(&t, step, model.mean_loss);
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

    int status = cpu_test_finish(&t);
    debug_state_free(&d);
    gpt2_free(&model);
    return status;
}
