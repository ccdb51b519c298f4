/*
test_gpt2.c: the CPU trainer against the PyTorch reference.

train_gpt2.py --write_tensors 1 writes a checkpoint and a debug state: one batch (x, y), the
reference logits, loss and all 16 parameter gradients for it, and the losses of `nsteps`
optimizer steps on that batch: AdamW, or (train_gpt2.py --optimizer muon, header[12] = 1) Muon on the
blocks' matrices with AdamW on the rest, as the header's settings say (llmc/cpu/muon.h). This program loads both, runs our forward and backward on the
batch, prints a table of every tensor's difference, then runs the same optimizer steps
and compares every loss. Exit status 0 only if everything is within tolerance. The reader
(llmc/debug_state.h) and the comparison and table (llmc/tensor_check.h) are test_gpt2.cu's too; the
program around the model's calls (llmc/cpu/cpu_test.h) test_llama3.c's.

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

CPU_TEST_MAIN(GPT2, {0}, &GPT2_FAMILY, &gpt2_calls,
              "Checks the CPU trainer against the reference tensors written by python train_gpt2.py --write_tensors 1.",
              "model checkpoint", 0)
