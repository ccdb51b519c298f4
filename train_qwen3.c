/*
train_qwen3.c: Qwen3 training on the CPU, in plain C with OpenMP.

The model matches train_qwen3.py and transformers' Qwen3ForCausalLM: pre-RMSNorm blocks, q and k heads
RMS-normalised with learned weights (QK-norm) then rotated (RoPE, rotate_half, the config's theta), causal attention
with NH/NKV query heads per key/value head scaled by 1/sqrt(HS), HS the model's own head_dim (not C / NH), its
AW = NH HS wide output projected back to C, SwiGLU MLP down(silu(gate(x)) * up(x)), no biases, final RMSNorm, an
lm_head (or wte when tied), loss = mean cross-entropy over B*T tokens.

Qwen3 is a pre-norm decoder as llmc/decoder.h describes them (its switches: llmc/qwen3.h's qwen3_decoder_config), and
trains on their one CPU model, llmc/cpu/decoder_cpu.h (one forward, one backward, read like train_gpt2.c). Its file
format, parameter table and init from scratch are llmc/qwen3.h's; the loop, flags, optimizers, checkpoints, MPI and
ZeRO-1 around the model are llmc/cpu/cpu_trainer.h's, as for every CPU trainer.
test_qwen3.c includes this file with LLMC_NO_MAIN defined.

Usage (./train_qwen3 --help lists every flag with its default):
  ./train_qwen3 -e d2 -i <llama-3 train shards> -j <val shards>   d2 from scratch (V from qwen3_tokenizer.bin)
  ./train_qwen3 -e qwen3_d2.bin ...                              a model file written by train_qwen3.py
  ./train_qwen3 -op muon -ol 0.02 ...                            Muon on qkvw, attprojw, fcw, fcw2, fcprojw, AdamW on the rest
  mpirun -np 2 ./train_qwen3 -b 2 -z 1 ...                       2 processes, each half the batch, ZeRO-1
*/
#include "llmc/qwen3.h"
#include "llmc/cpu/decoder_cpu.h"
#include "llmc/cpu/cpu_trainer.h"

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    DecoderCpu model = {.family = &QWEN3_FAMILY};
    return cpu_trainer_main(argc, argv, "Trains Qwen3 on the CPU.", &QWEN3_FAMILY, &model, &decoder_cpu_calls, &model.cpu);
}
#endif
