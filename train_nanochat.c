/*
train_nanochat.c: nanochat's GPT trained on the CPU, in plain C with OpenMP.

The model matches train_nanochat.py and transformers' NanoChatForCausalLM: the embeddings normalised (weightless
RMSNorm), pre-norm blocks (weightless), q and k rotated (NanoChat's rotate_half, the reverse of Llama's sign) then
normalised per head (QK-norm, no weight), causal attention with NH/NKV query heads per key/value head scaled by
1/sqrt(HS), HS = C / NH, MLP fcproj(relu(fc(x))^2), no biases, a final weightless RMSNorm, an lm_head untied from wte,
logits capped as cap * tanh(logits / cap) when the model file's softcap is not 0, loss = mean cross-entropy over B*T
tokens.

A pre-norm decoder of llmc/decoder.h (llmc/nanochat.h's nanochat_decoder_config says which switches it turns), so its
model is the one in llmc/cpu/decoder_cpu.h, which reads top to bottom as train_gpt2.c does; llmc/nanochat.h holds the
family (file format, parameter table, init from scratch), llmc/cpu/cpu_trainer.h the program every CPU trainer shares
(the loop and command line of ./train_gpt2, AdamW or Muon, gradient norm, training state, MPI and ZeRO-1).
test_nanochat.c includes this file with LLMC_NO_MAIN defined.

Usage (./train_nanochat --help lists every flag with its default):
  ./train_nanochat -e d2 -i <gpt-2 train shards> -j <val shards>   d2 from scratch (V = 50304)
  ./train_nanochat -e nanochat_d2.bin ...                           a model file written by train_nanochat.py
  ./train_nanochat -op muon -ol 0.02 ...                            Muon on qkvw, attprojw, fcw, fcprojw, AdamW on wte, lm_head
  mpirun -np 2 ./train_nanochat -b 2 -z 1 ...                       2 processes, each half the batch, ZeRO-1
*/
#include "llmc/nanochat.h"
#include "llmc/cpu/decoder_cpu.h"
#include "llmc/cpu/cpu_trainer.h"

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    DecoderCpu model = {.family = &NANOCHAT_FAMILY};
    return cpu_trainer_main(argc, argv, "Trains nanochat's GPT on the CPU.", &NANOCHAT_FAMILY, &model, &decoder_cpu_calls,
                            &model.cpu);
}
#endif
