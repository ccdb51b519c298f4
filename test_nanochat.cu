/*
test_nanochat.cu: the nanochat GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_nanochat.py --model d2 --write_tensors 1   (nanochat_d2.bin and nanochat_d2_debug_state.bin)
    make test_nanochatcu && ./test_nanochatcu               (PRECISION=FP32 for the tight tolerances)

What test_llama3.cu checks for Llama 3, with the same driver (llmc/cuda/gpu_test.cuh) and tolerances
(llmc/tensor_check.h gpu_tolerances):
1. forward on the recorded batch: the logits (B, T, V), after the softcap
2. backward: the loss, every parameter gradient per tensor (wte, per layer qkvw attprojw fcw fcprojw, lm_head), the
   rows of dwte whose token is not in the batch on their own ("dwte unseen": exactly zero, the head being untied),
   and the global gradient norm
3. the reference's optimizer steps on that batch: AdamW, or for a debug state of train_nanochat.py --optimizer
   muon, Muon on each layer's qkvw, attprojw, fcw, fcprojw and AdamW on wte and lm_head; every step's loss
4. resume: checkpoint, 2 steps, reload, the same 2 steps: losses and parameters bit for bit
Variants: -r 1|2 (the backward recomputes ReLU^2, and the RMSNorms too), -a N (gradient accumulation),
mpirun -np P ./test_nanochatcu -z 0|1 (each process its rows, all-reduce or ZeRO-1).
Exit status 0 only if every check passed.
*/
#define LLMC_NO_MAIN
#include "train_nanochat.cu"
#include "llmc/cuda/gpu_test.cuh"  // the flags, the debug state's batch per process, the checks, resume, verdict

// no -ge (nanochat_calls has none), no exact zeros (no padded rows, no position table)
static const GpuTestProgram TEST_NANOCHATCU = {
    .about = "test_nanochatcu: checks the nanochat GPU trainer against python train_nanochat.py --write_tensors 1, "
             "then bit-exact resume.\nRun it as several processes with mpirun -np 2 ./test_nanochatcu [-z 1].",
    .family = &NANOCHAT_FAMILY, .model_kind = "nanochat model file", .model_help = "nanochat model file written by train_nanochat.py",
    .tmp_default = "test_nanochatcu_resume", .recompute_help = "activation recompute: 0 none, 1 ReLU^2, 2 ReLU^2 and RMSNorms",
    .zeros_note = "", .calls = &nanochat_calls, .exact_zeros = NULL,
};

int main(int argc, char** argv) {
    NanoChat model;
    return gpu_test_main(argc, argv, &TEST_NANOCHATCU, &model, &model.gpu);
}
