/*
test_nanochat.cu: the nanochat GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_nanochat.py --model d2 --write_tensors 1   (nanochat_d2.bin and nanochat_d2_debug_state.bin)
    make test_nanochatcu && ./test_nanochatcu               (PRECISION=FP32 for the tight tolerances)

What test_llama3.cu checks for Llama 3, with the same driver (llmc/cuda/decoder_gpu_test.cuh) and tolerances: the
logits after the softcap; the loss, every parameter gradient per tensor (wte, per layer qkvw attprojw fcw fcprojw,
lm_head), "dwte unseen" (exactly zero, the head being untied) and the global gradient norm; every loss of the
reference's optimizer steps (AdamW, or Muon for a debug state of train_nanochat.py --optimizer muon); bit-exact resume.
Variants: -r 1|2 (the backward recomputes ReLU^2, and the RMSNorms too), -a N, mpirun -np P ./test_nanochatcu -z 0|1.
Exit status 0 only if every check passed.
*/
#include "llmc/nanochat.h"
#include "llmc/cuda/decoder_gpu_test.cuh"

int main(int argc, char** argv) { return decoder_gpu_test_main(argc, argv, &NANOCHAT_FAMILY, "ReLU^2"); }
