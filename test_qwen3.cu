/*
test_qwen3.cu: the Qwen3 GPU trainer against the PyTorch reference, then bit-exact resume.

    python dev/qwen3_refs.py   (build/qwen3: qwen3_d2, qwen3_mha, qwen3_mqa and their debug states)
    make test_qwen3cu && ./test_qwen3cu -e build/qwen3/qwen3_d2.bin -s build/qwen3/qwen3_d2_debug_state.bin

What test_llama3.cu checks for Llama 3, with the same driver (llmc/cuda/decoder_gpu_test.cuh) and tolerances: the
logits; the loss, every parameter gradient per tensor (wte, per layer ln1w qkvw qnormw knormw attprojw ln2w fcw fcw2
fcprojw, lnfw, lm_head when not tied), "dwte unseen" and the global gradient norm; every loss of the reference's
optimizer steps (AdamW, or Muon for a debug state of train_qwen3.py --optimizer muon); bit-exact resume.
Variants: -r 1|2 (the backward recomputes SwiGLU, and the RMSNorms too), -a N, mpirun -np P ./test_qwen3cu -z 0|1.
Exit status 0 only if every check passed.
*/
#include "llmc/qwen3.h"
#include "llmc/cuda/decoder_gpu_test.cuh"

int main(int argc, char** argv) { return decoder_gpu_test_main(argc, argv, &QWEN3_FAMILY, "SwiGLU"); }
