/*
train_llama3.c: Llama 3 training on the CPU, in plain C with OpenMP.

The model matches train_llama3.py and transformers' LlamaForCausalLM: pre-RMSNorm blocks with weights, rotary
positions on q and k (rotate_half, Llama 3.1's frequency scaling when the model file asks for it), causal attention
with NH/NKV query heads per key/value head scaled by 1/sqrt(HS), HS = C / NH, SwiGLU MLP down(silu(gate(x)) * up(x)),
no biases, final RMSNorm, an lm_head (or wte when tied), loss = mean cross-entropy over B*T tokens.

It is one of the pre-norm decoders of llmc/decoder.h (llmc/llama3.h's llama3_decoder_config gives its switches), and
its model is theirs: llmc/cpu/decoder_cpu.h, read top to bottom like train_gpt2.c. The family itself (the file format,
the parameter table, the init from scratch) is llmc/llama3.h; the training program around the model (the loop, the
command line, checkpoints, resume, AdamW or Muon, MPI data parallel and ZeRO-1) is ./train_gpt2's, llmc/cpu/cpu_trainer.h.
test_llama3.c includes this file with LLMC_NO_MAIN defined.

Usage (./train_llama3 --help lists every flag with its default):
  ./train_llama3 -e d2 -i <llama-3 train shards> -j <val shards>   d2 from scratch
  ./train_llama3 -e llama3_d2.bin ...                    a model file written by train_llama3.py
  mpirun -np 2 ./train_llama3 -b 2 -z 1 ...              2 processes, each half the batch, ZeRO-1
  ./train_llama3 -op muon -ol 0.02 ...                   Muon on qkvw, attprojw, fcw, fcw2, fcprojw, AdamW on the rest
-e dN takes V from the Llama 3 tokenizer file (llama3_tokenizer.bin), which also decodes samples.
*/
#include "llmc/llama3.h"
#include "llmc/cpu/decoder_cpu.h"
#include "llmc/cpu/cpu_trainer.h"

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    DecoderCpu model = {.family = &LLAMA3_FAMILY};
    return cpu_trainer_main(argc, argv, "Trains Llama 3 on the CPU.", &LLAMA3_FAMILY, &model, &decoder_cpu_calls, &model.cpu);
}
#endif
