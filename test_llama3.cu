/*
test_llama3.cu: the Llama 3 GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_llama3.py --model d2 --write_tensors 1   (llama3_d2.bin and llama3_d2_debug_state.bin)
    make test_llama3cu && ./test_llama3cu                 (PRECISION=FP32 for the tight tolerances)

What test_gpt2.cu checks for GPT-2, with the same driver (llmc/cuda/gpu_test.cuh: the model driven through the
GpuTrainer ops as trainer_run drives it, each process's rows of the batch, the gathers, the resume check and
the verdict) and the same tolerances (llmc/tensor_check.h gpu_tolerances):
1. forward on the recorded batch: logits (B, T, V)
2. backward: the loss, every parameter gradient per tensor (wte, per layer ln1w qkvw attprojw ln2w fcw fcw2
   fcprojw, lnfw, lm_head when not tied), the rows of dwte whose token is not in the batch on their own
   ("dwte unseen": exactly zero with an untied head, the classifier's contribution alone with a tied one),
   and the global gradient norm
3. the reference's optimizer steps on that batch: AdamW, or for a debug state of train_llama3.py --optimizer muon,
   Muon on each layer's qkvw, attprojw, fcw, fcw2, fcprojw and AdamW on the rest; every step's loss
   (step_loss_tolerance, the rule of test_gpt2cu)
4. resume: checkpoint, 2 steps, reload, the same 2 steps: losses and parameters bit for bit
Variants: -r 1|2 (the backward recomputes SwiGLU, and the RMSNorms too), -a N (gradient accumulation),
mpirun -np P ./test_llama3cu -z 0|1 (each process its rows, all-reduce or ZeRO-1).
Exit status 0 only if every check passed.
*/
#define LLMC_NO_MAIN
#include "train_llama3.cu"
#include "llmc/cuda/gpu_test.cuh"  // the flags, the debug state's batch per process, the checks, resume, verdict

// no -ge (llama3_calls has none), no exact zeros (no padded rows, no position table)
static const GpuTestProgram TEST_LLAMA3CU = {
    .about = "test_llama3cu: checks the Llama 3 GPU trainer against python train_llama3.py --write_tensors 1, then "
             "bit-exact resume.\nRun it as several processes with mpirun -np 2 ./test_llama3cu [-z 1].",
    .family = &LLAMA3_FAMILY, .model_kind = "Llama 3 model file", .model_help = "Llama 3 model file written by train_llama3.py",
    .tmp_default = "test_llama3cu_resume", .recompute_help = "activation recompute: 0 none, 1 SwiGLU, 2 SwiGLU and RMSNorms",
    .zeros_note = "", .calls = &llama3_calls, .exact_zeros = NULL,
};

int main(int argc, char** argv) {
    Llama3 model;
    return gpu_test_main(argc, argv, &TEST_LLAMA3CU, &model, &model.gpu);
}
