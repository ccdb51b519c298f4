/*
test_llama3.cu: the Llama 3 GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_llama3.py --model d2 --write_tensors 1   (llama3_d2.bin and llama3_d2_debug_state.bin)
    make test_llama3cu && ./test_llama3cu                 (PRECISION=FP32 for the tight tolerances)

What test_gpt2.cu checks for GPT-2, with the same driver (llmc/cuda/decoder_gpu_test.cuh, llmc/cuda/gpu_test.cuh) and
tolerances (llmc/tensor_check.h gpu_tolerances): the logits (B, T, V); the loss, every parameter gradient per tensor
(wte, per layer ln1w qkvw attprojw ln2w fcw fcw2 fcprojw, lnfw, lm_head when not tied), the rows of dwte whose token is
not in the batch ("dwte unseen") and the global gradient norm; every loss of the reference's optimizer steps (AdamW, or
Muon for a debug state of train_llama3.py --optimizer muon); bit-exact resume.
Variants: -r 1|2 (the backward recomputes SwiGLU, and the RMSNorms too), -a N (gradient accumulation),
mpirun -np P ./test_llama3cu -z 0|1 (each process its rows, all-reduce or ZeRO-1).
Exit status 0 only if every check passed.
*/
#include "llmc/llama3.h"
#include "llmc/cuda/decoder_gpu_test.cuh"

int main(int argc, char** argv) { return decoder_gpu_test_main(argc, argv, &LLAMA3_FAMILY, "SwiGLU"); }
