/*
train_qwen3.cu: Qwen3 training on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The model is llmc/cuda/decoder_gpu.cuh's, the pre-norm decoder every decoder family shares (llmc/decoder.h), with
Qwen3's switches (llmc/qwen3.h's decoder_config): token embedding -> L x (RMSNorm, qkv projection, QK-norm with a
learned per-head weight for the q heads and one for the k heads, then RoPE, grouped-query attention of width
AW = NH head_dim (which may differ from C), projection back to C, residual, RMSNorm, SwiGLU MLP, residual) -> final
RMSNorm -> lm_head (or wte when tied) -> fused classifier. Its update: AdamW on this rank's ZeRO-1 shard, or with
-op muon Muon on each layer's qkvw, attprojw, fcw, fcw2, fcprojw (llmc/cuda/muon.cuh). The training loop is
llmc/trainer.h's trainer_run, the host side around the model llmc/cuda/gpu_trainer.cuh's. It reads and writes the
model files of train_qwen3.c and train_qwen3.py.
Precision is chosen at build time: make train_qwen3cu PRECISION=BF16 (default) or FP32; make train_qwen3cu
USE_CUDNN=1 (BF16) runs attention as cuDNN flash attention (llmc/cuda/cudnn_att.h).
*/
#include "llmc/qwen3.h"
#include "llmc/cuda/decoder_gpu.cuh"

int main(int argc, char** argv) {
    return decoder_gpu_main(argc, argv, &QWEN3_FAMILY, "train_qwen3cu",
                            "train_qwen3cu: Qwen3 training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)");
}
