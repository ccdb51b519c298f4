/*
test_nanochat.c: the CPU nanochat trainer against the PyTorch reference.

python train_nanochat.py --model <dN | HF NanoChat dir> --write_tensors 1 writes a model file and a debug state
(llmc/debug_state.h, the Llama 3 layout with magic 20251013): one batch (x, y), the reference logits (after the
softcap), loss and every parameter gradient for it, the losses and gradient norms of `nsteps` optimizer steps on
that batch, and the float32 noise of each step loss. The steps are AdamW, or Muon on the blocks' matrices (qkvw,
attprojw, fcw, fcprojw) with AdamW on wte and lm_head, as the state's header says (llmc/cpu/muon.h).
This program loads both, runs our forward and backward on the batch, prints a table of every tensor's difference,
then runs the same optimizer steps and compares every loss and gradient norm. Exit status 0 only if everything is
within tolerance (llmc/tensor_check.h's cpu_tolerances, as test_llama3: logits 1e-4, loss 1e-5, gradients 1e-3 of
their largest and relative L2 3e-5, step losses by the reference's float32 noise, gradient norms relative 1e-4;
-p bf16 the BF16 table).
*/
#define LLMC_NO_MAIN
#include "train_nanochat.c"
#include "llmc/cpu/cpu_test.h"

// the wide table: relative L2 columns, and every step's gradient norm
CPU_TEST_MAIN(DecoderCpu, {.family = &NANOCHAT_FAMILY}, &NANOCHAT_FAMILY, &decoder_cpu_calls,
              "Checks the CPU nanochat trainer against the reference tensors written by python train_nanochat.py --write_tensors 1.",
              "nanochat model file", 1)
