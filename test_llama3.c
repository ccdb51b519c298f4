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

// the wide table: relative L2 columns, and every step's gradient norm
CPU_TEST_MAIN(DecoderCpu, {.family = &LLAMA3_FAMILY}, &LLAMA3_FAMILY, &decoder_cpu_calls,
              "Checks the CPU Llama 3 trainer against the reference tensors written by python train_llama3.py --write_tensors 1.",
              "Llama 3 model file", 1)
