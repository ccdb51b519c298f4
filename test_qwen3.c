/*
test_qwen3.c: the CPU Qwen3 trainer against the PyTorch reference.

python train_qwen3.py --model <dN | model.bin | HF dir> --write_tensors 1 writes a model file and a debug state
(doc/qwen3.md: the Qwen3 layout, magic 20250429): one batch (x, y), the reference logits, loss and every parameter
gradient for it (qnormw and knormw among them), the losses and gradient norms of `nsteps` optimizer steps on that
batch (AdamW, or with header[12] = 1 Muon on the blocks' matrices and AdamW on the rest, as the header's settings
say), and the float32 noise of each step loss. This program loads both, runs our forward and backward on the batch,
prints a table of every tensor's difference, then runs the same optimizer steps and compares every loss and gradient
norm. Exit status 0 only if everything is within tolerance.

Tolerances: test_llama3's (llmc/tensor_check.h, cpu_tolerances): logits max abs diff 1e-4, loss 1e-5, each gradient
tensor max abs diff <= 1e-3 x max|reference| and relative L2 error <= 3e-5, step losses by the reference's measured
float32 noise; gradient norms relative 1e-4 (fp32). With -p bf16 the BF16 table applies (and norms relative 5e-2).
*/
#define LLMC_NO_MAIN
#include "train_qwen3.c"
#include "llmc/cpu/cpu_test.h"

// the wide table: relative L2 columns, and every step's gradient norm
CPU_TEST_MAIN(DecoderCpu, {.family = &QWEN3_FAMILY}, &QWEN3_FAMILY, &decoder_cpu_calls,
              "Checks the CPU Qwen3 trainer against the reference tensors written by python train_qwen3.py --write_tensors 1.",
              "Qwen3 model file", 1)
