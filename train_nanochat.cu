/*
train_nanochat.cu: nanochat's GPT trained on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The model is llmc/cuda/decoder_gpu.cuh's, the pre-norm decoder every decoder family shares (llmc/decoder.h), with
nanochat's switches (llmc/nanochat.h's decoder_config): token embedding -> weightless RMSNorm -> L x (RMSNorm, qkv
projection, RoPE on q and k with nanochat's rotate-half, QK-norm, grouped-query attention, projection, residual,
RMSNorm, fc, ReLU^2, fcproj, residual) -> final RMSNorm -> lm_head -> logit softcap -> fused classifier (through the
cap); no norm has a weight. Its update: AdamW on this rank's ZeRO-1 shard, or with -op muon Muon on each layer's qkvw,
attprojw, fcw, fcprojw and AdamW on wte and lm_head (llmc/cuda/muon.cuh). The training loop is llmc/trainer.h's
trainer_run, the host side around the model llmc/cuda/gpu_trainer.cuh's. It reads and writes the model files of
train_nanochat.c and train_nanochat.py.
Precision is chosen at build time: make train_nanochatcu PRECISION=BF16 (default) or FP32; make train_nanochatcu
USE_CUDNN=1 (BF16) runs attention as cuDNN flash attention (QK-norm comes before it, so it is plain causal SDPA).
*/
#include "llmc/nanochat.h"
#include "llmc/cuda/decoder_gpu.cuh"

int main(int argc, char** argv) {
    return decoder_gpu_main(argc, argv, &NANOCHAT_FAMILY, "train_nanochatcu",
                            "train_nanochatcu: nanochat training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)");
}
