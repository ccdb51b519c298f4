/*
train_llama3.cu: Llama 3 training on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The model is llmc/cuda/decoder_gpu.cuh's, the pre-norm decoder every decoder family shares (llmc/decoder.h), with Llama
3's switches (llmc/llama3.h's decoder_config): token embedding -> L x (RMSNorm, qkv projection, RoPE on q and k,
grouped-query attention, projection, residual, RMSNorm, SwiGLU MLP, residual) -> final RMSNorm -> lm_head (or wte when
tied) -> fused classifier. Its update: global gradient norm, clipping, AdamW (fp32 master weights, stochastic rounding
to bf16) on this rank's ZeRO-1 shard, or with -op muon Muon on each layer's qkvw, attprojw, fcw, fcw2, fcprojw
(llmc/cuda/muon.cuh, as ./train_llama3 -op muon). The training loop is llmc/trainer.h's trainer_run, the host side
around the model llmc/cuda/gpu_trainer.cuh's. It reads and writes the model files of train_llama3.c and
train_llama3.py, so a checkpoint of either trainer continues in the other.
Precision is chosen at build time: make train_llama3cu PRECISION=BF16 (default) or FP32; make train_llama3cu
USE_CUDNN=1 (BF16) runs attention as cuDNN flash attention (llmc/cuda/cudnn_att.h).
*/
#include "llmc/llama3.h"
#include "llmc/cuda/decoder_gpu.cuh"

int main(int argc, char** argv) {
    return decoder_gpu_main(argc, argv, &LLAMA3_FAMILY, "train_llama3cu",
                            "train_llama3cu: Llama 3 training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)");
}
