/*
test_gpt2.cu: the GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_gpt2.py --write_tensors 1     (writes gpt2_124M.bin and gpt2_124M_debug_state.bin)
    make test_gpt2cu && ./test_gpt2cu          (PRECISION=FP32 for the tight tolerances)
    python dev/cuda_cpu_refs.py                (a d2 model and debug state in build/cuda_cpu_refs: -e, -s)

The model is driven the way train_gpt2.cu's training loop drives it (llmc/trainer.h trainer_run, through
the GpuTrainer ops; llmc/cuda/gpu_test.cuh does it, the flags, the gathers, the checks, the resume check
and the verdict, for every GPU test program; this file brings GPT-2's calls (train_gpt2.cu's gpt2_calls) and lines): per optimizer step zero_grad, forward_backward of each micro-batch with loss scale
1/N (the last one starting the gradient reduction over the processes), the loss averaged over the
processes, the global gradient norm, clipping, gpu_model_update. Variants, each checked against the same
debug state and the same tolerances:
    -ge 1     GELU fused into the cuBLASLt epilogues (GELU_AUX_BIAS forward, DGELU backward)
    -r 1|2    the backward recomputes the GELU (1), and the layernorms too (2)
    -a N      gradient accumulation: each process's rows as N micro-batches (loss scale 1/N each, the
              gradients summed in floatX over the micro-batches)
A masked debug state (python train_gpt2.py --write_tensors 1 --mask_half 1: targets -1 where not supervised, header[18]
= 1) is checked with every variant too: each micro-batch at loss scale P x its B x T / N (N the batch's supervised
positions, P the processes), so the gradients, the loss and the step losses are those of the mean over the N.
    mpirun -np P ./test_gpt2cu -z 0|1
              process p takes rows [p B/P, (p+1) B/P) of the batch (then split by -a); the gradients are
              averaged over NCCL (-z 0: all-reduce; -z 1 ZeRO-1: reduce to each shard's owner, AdamW on
              the shard, all-gather of the parameters). Rank 0 prints the table; every rank's exit
              status is non-zero if any rank failed a check.
The debug state's B must split evenly: B = 4 covers -a 2, -a 4, two processes, two processes with -a 2.

1. forward on the recorded batch: logits (B, T, V) (every process's rows, gathered)
2. backward: the loss, each of the 16 parameter gradients per tensor (with ZeRO-1 each process reduces
   only its shard, so the shards are all-gathered before the comparison), the exact zeros a correct
   gradient has (wte's padded rows V..Vp-1, wpe's rows T..maxT-1), the rows of wte whose token is not
   in the batch on their own ("dwte unseen": the classifier's contribution alone, a heavy tail that
   holds 1e-4..1.6e-3 of dwte's energy and would hide inside the whole tensor's norm), and the global
   gradient norm the update clips with
3. the reference's optimizer steps on that batch (AdamW with the debug state's settings, or, for a
   debug state written with --optimizer muon, Muon on the blocks' 2-D weights and AdamW on the rest;
   gradient clipping, constant LR): every step's loss, within the tolerance derived from the float32 noise
   the reference measured for that step (step_loss_tolerance in llmc/tensor_check.h, the same
   rule as test_gpt2.c's)
4. resume: checkpoint after those steps (model by rank 0, optimizer state by every rank, Muon's momentum
   included), run 2 more
   steps, reload the checkpoint and run the same 2 steps again; the losses and the final parameters
   must match bit for bit
Exit status 0 only if every check passed. The comparison logic and the tolerances are
llmc/tensor_check.h's (gpu_tolerances: max-abs, relative L2 error, exact zeros; tested on the CPU with
corrupted inputs). FP32 builds use true fp32 GEMMs here (TF32 off).
*/
#define LLMC_NO_MAIN
#include "train_gpt2.cu"
#include "llmc/cuda/gpu_test.cuh"  // the flags, the debug state's batch per process, the checks, resume, verdict

// the exact zeros a correct gradient has: wte's padded rows V..Vp-1, wpe's rows T..maxT-1
static void gpt2_test_exact_zeros(TensorCheck* c, const void* model, int k, const float* grad, int T) {
    const GPT2* m = (const GPT2*)model;
    const int V = m->config.vocab_size, Vp = m->config.padded_vocab_size, C = m->config.channels;
    if (k == GPT2_PARAM_wte) { tensor_check_zero(c, grad, (size_t)V * C, (size_t)Vp * C); }
    if (k == GPT2_PARAM_wpe) { tensor_check_zero(c, grad, (size_t)T * C, m->gpu.param_sizes[k]); }
}

static const GpuTestProgram TEST_GPT2CU = {
    .about = "test_gpt2cu: checks the GPU trainer against python train_gpt2.py --write_tensors 1, then bit-exact resume.\n"
             "Run it as several processes with mpirun -np 2 ./test_gpt2cu [-z 1].",
    .family = &GPT2_FAMILY, .model_kind = "checkpoint", .model_help = "model checkpoint written by train_gpt2.py",
    .tmp_default = "test_gpt2cu_resume", .recompute_help = "activation recompute: 0 none, 1 GELU, 2 GELU and layernorms",
    .zeros_note = "exact zeros in dwte's padded rows and dwpe's rows past T; ",
    .calls = &gpt2_calls, .exact_zeros = gpt2_test_exact_zeros,
};

int main(int argc, char** argv) {
    GPT2 model;
    return gpu_test_main(argc, argv, &TEST_GPT2CU, &model, &model.gpu);
}
