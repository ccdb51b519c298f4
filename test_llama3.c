/*
test_llama3.c: the CPU Llama 3 trainer against the PyTorch reference.

python train_llama3.py --model <dN | model.bin> --write_tensors 1 writes a model file and a debug
state: one batch (x, y), the reference logits, loss and every parameter gradient for it, the losses
and gradient norms of `nsteps` optimizer steps on that batch, and the float32 noise of each step loss.
The steps are AdamW, or (train_llama3.py --optimizer muon, header[12] = 1) Muon on the blocks' matrices
(qkvw, attprojw, fcw, fcw2, fcprojw) with AdamW on the rest, as the header's settings say (llmc/cpu/muon.h).
This program loads both, runs our forward and backward on the batch, prints a table of every
tensor's difference, then runs the same optimizer steps and compares every loss and gradient norm.
Exit status 0 only if everything is within tolerance.

Debug state, little-endian: int32 header[256]: [0]=20240803 [1]=3 [2]=B [3]=T [4]=nsteps
[5..10]=float32 bits of lr, beta1, beta2, eps, weight_decay, grad_clip [11]=nnoise (0 or nsteps)
[12]=optimizer (0 AdamW, 1 Muon) [13..17] Muon settings (llmc/debug_state.h). Body: x int32[B*T],
y int32[B*T], logits fp32[B*T*V], loss fp32, every gradient fp32 in model-file order, losses fp32[nsteps],
grad_norms fp32[nsteps], loss_noise fp32[nnoise].

Tolerances: test_gpt2's table (llmc/tensor_check.h, cpu_tolerances): logits max abs diff 1e-4,
loss 1e-5, each gradient tensor max abs diff <= 1e-3 x max|reference| and relative L2 error
<= 3e-5, step losses by the reference's measured float32 noise (step_loss_tolerance); gradient
norms relative 1e-4 (fp32). With -p bf16 the BF16 table applies (and norms relative 5e-2).
*/
#define LLMC_NO_MAIN
#include "train_llama3.c"
#include "llmc/cpu/cpu_test.h"

#define LLAMA3_STATE_MAGIC 20240803
#define LLAMA3_STATE_VERSION 3

static const DebugStateFormat LLAMA3_DEBUG_STATE = {LLAMA3_STATE_MAGIC, LLAMA3_STATE_VERSION, "Llama 3 debug state", "block size", 1};

static const CpuTestProgram TEST_LLAMA3 = {
    "Checks the CPU Llama 3 trainer against the reference tensors written by python train_llama3.py --write_tensors 1.",
    "train_llama3.py", "Llama 3 model file", "llama3_d2.bin", "llama3_d2_debug_state.bin",
};

int main(int argc, char** argv) {
    CpuTestArgs args;
    cpu_test_args_parse(&args, argc, argv, &TEST_LLAMA3);
    Llama3 model;
    llama3_build_from_file(&model, args.model_path);
    Llama3Config cfg = model.config;
    DebugState d;
    debug_state_read_format(&d, args.state_path, &LLAMA3_DEBUG_STATE, cfg.max_seq_len, cfg.vocab_size, model.num_parameters);
    int B = d.B, T = d.T, V = cfg.vocab_size;
    printf("model %s: Llama 3 L=%d NH=%d NKV=%d C=%d FFN=%d maxT=%d V=%d%s%s, %zu parameters\n", args.model_path,
           cfg.num_layers, cfg.num_heads, cfg.num_kv_heads, cfg.channels, cfg.ffn_hidden, cfg.max_seq_len, V,
           cfg.tied_embeddings ? ", tied lm_head" : "", cfg.use_scaled_rope ? ", scaled RoPE" : "", model.num_parameters);
    CpuTest t;
    cpu_test_begin(&t, args.state_path, &d, 1);
    double norm_rtol = t.tol.is_bf16 ? 5e-2 : 1e-4;
    llama3_allocate_activations(&model, B, T);
    if (d.optimizer == OPTIMIZER_MUON) {
        MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
        llama3_allocate_muon(&model, &muon, 0, 1, 0);
    } else {
        llama3_allocate_optimizer(&model, 0, model.num_parameters);
    }

    llama3_forward(&model, d.x, d.y, B, T);
    llama3_zero_grad(&model);
    llama3_backward(&model, 1.0f);

    cpu_test_table_header(&t);
    cpu_test_tensor(&t, "logits", model.acts.logits, d.logits, (size_t)B * T * V, t.tol.logits_rtol, t.tol.logits_atol, t.tol.logits_l2);
    cpu_test_scalar(&t, "loss", model.mean_loss, d.loss, t.tol.loss_atol);
    cpu_test_grads(&t, model.grads_memory, model.param_sizes, LLAMA3_PARAMETER_NAMES, LLAMA3_NUM_PARAMETER_TENSORS);

    // nsteps of the optimizer on the same batch; losses[i] is the loss before update i+1, grad_norms[i] its norm
    for (int step = 0; step < d.nsteps; step++) {
        llama3_forward(&model, d.x, d.y, B, T);
        cpu_test_step_loss(&t, step, model.mean_loss);
        llama3_zero_grad(&model);
        llama3_backward(&model, 1.0f);
        float norm = llama3_grad_norm(&model);
        char name[32];
        snprintf(name, sizeof(name), "norm step %d", step);
        cpu_test_scalar(&t, name, norm, d.grad_norms[step], norm_rtol * fabs((double)d.grad_norms[step]));
        float scale = grad_clip_scale(norm, d.grad_clip);
        if (d.optimizer == OPTIMIZER_MUON) {
            llama3_update_muon(&model, d.lr, d.muon_lr, d.beta1, d.beta2, d.eps, d.weight_decay, scale, step + 1);
        } else {
            llama3_update(&model, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, scale, step + 1);
        }
    }

    int status = cpu_test_finish(&t);
    debug_state_free(&d);
    llama3_free(&model);
    return status;
}
