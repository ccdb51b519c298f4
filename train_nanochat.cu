/*
train_nanochat.cu: nanochat's GPT trained on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The story of one training step, top to bottom (the model of train_nanochat.c and train_nanochat.py):
    nanochat_forward    token embedding -> weightless RMSNorm -> L x (RMSNorm, qkv projection, RoPE on q and k
                        with nanochat's rotate-half, QK-norm, causal attention (grouped-query), projection,
                        residual, RMSNorm, fc, ReLU^2, fcproj, residual) -> final RMSNorm -> lm_head -> logit
                        softcap -> fused classifier (loss and dlogits, through the cap)
    nanochat_backward   the same layers in reverse; each finished layer's gradients start their NCCL reduction
                        while the next layer's backward runs
    gpu_model_update    global gradient norm, clipping, AdamW (fp32 master weights, stochastic rounding to bf16) on
                        this rank's ZeRO-1 shard; with -op muon, Muon on each layer's qkvw, attprojw, fcw, fcprojw
                        instead and AdamW on wte and lm_head (llmc/cuda/muon.cuh); then the all-gather

The kernels nanochat adds: llmc/cuda/qknorm.cuh (QK-norm), relu2.cuh (ReLU^2), rope.cuh's reverse rotation,
rmsnorm.cuh's weightless mode, fused_classifier.cuh's softcap; the rest is shared with GPT-2 and Llama 3
(matmul, attention, repeat_kv, encoder, adamw, muon). The training loop is llmc/trainer.h's trainer_run and the
host side around the model is llmc/cuda/gpu_trainer.cuh's, as for train_llama3.cu. This file brings nanochat to
them: its tensor table (llmc/nanochat.h), activations, forward and backward, and its calls (nanochat_calls, at the
end). It reads and writes the model files of train_nanochat.c and train_nanochat.py.
Precision is chosen at build time: make train_nanochatcu PRECISION=BF16 (default) or FP32.
make train_nanochatcu USE_CUDNN=1 (BF16) runs attention as cuDNN flash attention (llmc/cuda/cudnn_att.h): QK-norm
comes before it, so the attention itself is plain causal SDPA with the 1/sqrt(HS) scale; q, k, v are read in place
from each layer's rotated and normalised projection, grouped-query attention done by cuDNN.
Shapes: B batch, T time, C channels, V vocab (not padded), L layers, NH query heads, NKV key/value heads,
HS = C / NH, QKV = (NH + 2 NKV) HS, FFN the MLP's hidden size.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/nanochat.h"
#include "llmc/mfu.h"
#include "llmc/tokenizer.h"
#include "llmc/trainer.h"  // the training loop, its flags (args.h), data, tokenizer, sampler, schedules, logs
#include "llmc/cuda/cuda_common.cuh"
#include "llmc/cuda/cublas_common.cuh"
#include "llmc/cuda/encoder.cuh"
#include "llmc/cuda/rmsnorm.cuh"
#include "llmc/cuda/rope.cuh"
#include "llmc/cuda/qknorm.cuh"
#include "llmc/cuda/repeat_kv.cuh"
#include "llmc/cuda/relu2.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/fused_classifier.cuh"
#include "llmc/cuda/muon.cuh"
#include "llmc/cuda/multi_gpu.cuh"
#include "llmc/cuda/gpu_trainer.cuh"  // the flat buffers, ZeRO-1, the update, NCCL, the training state, start-up

// ----------------------------------------------------------------------------
// nanochat model definition

// the parameter tensors in file order (llmc/nanochat.h: wte, per layer qkvw attprojw fcw fcprojw, lm_head) as
// floatX views, and one layer's view
typedef struct { NANOCHAT_PARAMETER_TENSORS(TENSOR_FIELD, floatX) } NanoChatGpuParams;
typedef struct { NANOCHAT_LAYER_PARAMETER_TENSORS(TENSOR_FIELD, floatX) } NanoChatGpuLayerParams;

// The activations, in buffer order: rows X(type, name, per_layer, per_token, has_grad) as train_llama3.cu's
// (llmc/cuda/gpu_trainer.cuh GPU_ACT_*): a tensor is (B, T, per_token), or (L, B, T, per_token) when per_layer;
// keep_norms and keep_relu2 are 0 when the backward recomputes those (-r 2: ln1, ln2; -r 1: fch_relu2), so all
// layers share one slice. No norm has a weight, so no gradient of one. Sizes in C, NH, NKV, T, V, QKV, FFN. The
// work buffers that do not grow with B x T (the rotary tables) follow the table (nanochat_point_activations).
#define NANOCHAT_GPU_ACTIVATIONS(X) \
    X(floatX, encoded,      0, C,     1) /* token embeddings */ \
    X(floatX, x0,           0, C,     1) /* their RMSNorm: the residual stream's start */ \
    X(float,  x0_rstd,      0, 1,     0) \
    NANOCHAT_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, lnf,          0, C,     1) /* final RMSNorm */ \
    X(float,  lnf_rstd,     0, 1,     0) \
    X(float,  losses,       0, 1,     1) \
    X(floatX, output,       0, V,     1) /* logits (capped), then dlogits (before the cap) */ \
    X(floatX, scratch_qkv,  0, QKV,   1) /* the gradient of qkv */ \
    NANOCHAT_GPU_REPEAT_KV_BUFFER(X) \
    X(floatX, scratch_btc,  0, C,     1) \
    /* backward only */ \
    X(floatX, dresidual,    0, C,     0) /* gradient of the residual stream */ \
    X(floatX, dfch,         0, FFN,   0) /* gradient of fch_relu2, then of fch */ \
    NANOCHAT_GPU_ATTENTION_BACKWARD_BUFFERS(X)

#define NANOCHAT_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, ln1,        keep_norms,  C,        1) /* RMSNorm of the layer's input */ \
    X(float,  ln1_rstd,   1,           1,        0) \
    X(floatX, qkv,        1,           QKV,      1) /* q|k|v per token, q and k rotated and normalised per head */ \
    X(float,  qk_rstd,    1,           NH + NKV, 0) /* QK-norm's statistics, per head */ \
    NANOCHAT_GPU_ATTENTION_ACTIVATIONS(X) \
    X(floatX, atty,       1,           C,        1) /* attention output, before its projection */ \
    X(floatX, residual2,  1,           C,        1) /* input + attention projection */ \
    X(floatX, ln2,        keep_norms,  C,        1) \
    X(float,  ln2_rstd,   1,           1,        0) \
    X(floatX, fch,        1,           FFN,      1) /* fc projection */ \
    X(floatX, fch_relu2,  keep_relu2,  FFN,      1) /* relu(fch)^2 */ \
    X(floatX, residual3,  1,           C,        1) /* residual2 + MLP output, the layer's output */

#ifdef ENABLE_CUDNN
// cuDNN reads q, k, v from each layer's qkv and keeps (B, NH, T) fp32 softmax statistics instead of the attention
// matrix; nothing repeated, no backward buffers of ours
#define NANOCHAT_GPU_ATTENTION_ACTIVATIONS(X) \
    X(float,  att_stats,  1,           NH,     0) /* (B, NH, T) */
#define NANOCHAT_GPU_REPEAT_KV_BUFFER(X)
#define NANOCHAT_GPU_ATTENTION_BACKWARD_BUFFERS(X)
#else
// llmc/cuda/repeat_kv.cuh's rows: q, k, v head-major with k and v repeated, the attention matrix, work buffers
#define NANOCHAT_GPU_ATTENTION_ACTIVATIONS(X) REPEAT_KV_ATTENTION_LAYER_ACTIVATIONS(X)
#define NANOCHAT_GPU_REPEAT_KV_BUFFER(X) REPEAT_KV_ATTENTION_BUFFER(X)
#define NANOCHAT_GPU_ATTENTION_BACKWARD_BUFFERS(X) REPEAT_KV_ATTENTION_BACKWARD_BUFFERS(X)
#endif

typedef struct {
    NANOCHAT_GPU_ACTIVATIONS(GPU_ACT_FIELD)
    float* rope_cos;  // (maxT, HS/2) the rotary tables
    float* rope_sin;
    float* norm;      // (1 + GLOBAL_NORM_BLOCKS) the squared gradient norm and its partial sums
} NanoChatActs;
// one layer's activations: residual is its input (x0, or the previous layer's residual3)
typedef struct { floatX* residual; NANOCHAT_GPU_LAYER_ACTIVATIONS(GPU_ACT_FIELD) } NanoChatLayerActs;

// Points the activations for micro-batches of B x T at recompute level -r into memory (NULL: only counts), each
// slice 256-byte aligned, then the work buffers; returns the bytes they take.
static size_t nanochat_point_activations(NanoChatActs* a, char* memory, const NanoChatConfig* cfg, int B, int T, int recompute) {
    const size_t BT = (size_t)B * T, C = cfg->channels, NH = cfg->num_heads, NKV = cfg->num_kv_heads;
    const size_t L = cfg->num_layers, V = cfg->vocab_size, HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden;
    const int keep_norms = recompute < 2, keep_relu2 = recompute < 1;
    size_t offset = 0;
    NANOCHAT_GPU_ACTIVATIONS(GPU_ACT_POINT)
    const size_t rope_bytes = (size_t)cfg->max_seq_len * (HS / 2) * sizeof(float);
    a->rope_cos = (float*)gpu_act_point(memory, &offset, 1, rope_bytes);
    a->rope_sin = (float*)gpu_act_point(memory, &offset, 1, rope_bytes);
    a->norm = (float*)gpu_act_point(memory, &offset, 1, (1 + GLOBAL_NORM_BLOCKS) * sizeof(float));
    return offset;
}

// nanochat on the GPU: its config, named views of the parameters and gradients, activations (recomputed at -r 1:
// ReLU^2, -r 2: ReLU^2 + the block's RMSNorms), and its GpuModel (llmc/cuda/gpu_trainer.cuh)
typedef struct {
    NanoChatConfig config;
    NanoChatGpuParams params;  // views into gpu.params_memory
    NanoChatGpuParams grads;   // views into gpu.grads_memory
    NanoChatActs acts;         // in gpu.acts_memory
    GpuModel gpu;
} NanoChat;

// the model of this config: its GpuModel (gpu_model_init) with the views of its parameters and gradients, the
// softcap its classifier takes back (llmc/cuda/gpu_trainer.cuh's gpu_model_build fills the parameters: -e's model
// file, or llmc/nanochat.h's init)
static void nanochat_init(void* m, const void* config) {
    NanoChat* model = (NanoChat*)m;
    memset(model, 0, sizeof(*model));
    model->config = *(const NanoChatConfig*)config;
    const NanoChatConfig* cfg = &model->config;
    gpu_model_init(&model->gpu, &NANOCHAT_FAMILY, cfg, &model->params, &model->grads, cfg->num_layers, cfg->channels,
                   cfg->vocab_size, cfg->max_seq_len);
    model->gpu.logit_softcap = cfg->softcap;
}

// activations for micro-batches of B x T (T at most the model's maxT: the callers check it), the rotary tables,
// optimizer state for the shard, cuBLAS
static void nanochat_allocate_state(void* m, int B, int T, int recompute, ZeroShard shard, int use_master_weights,
                                    cudaStream_t stream) {
    NanoChat* model = (NanoChat*)m;
    const NanoChatConfig* cfg = &model->config;
    const int HS = cfg->channels / cfg->num_heads;
    // the kernels move heads and MLP rows in 128-bit packets: 4 values in FP32, 8 in BF16
    if (HS % x128::size != 0 || cfg->ffn_hidden % x128::size != 0) {
        llmc_die("model: the head size C/NH = %d/%d and the FFN size %d must be multiples of %d in this build (%s)", cfg->channels,
                 cfg->num_heads, cfg->ffn_hidden, x128::size, PRECISION_NAME);
    }
    gpu_model_check_attention(B, T, cfg->num_heads, cfg->num_kv_heads, HS);
    size_t bytes = nanochat_point_activations(&model->acts, NULL, cfg, B, T, recompute);
    char* memory = gpu_model_allocate_activations(&model->gpu, bytes, recompute, B * T, cfg->vocab_size);
    nanochat_point_activations(&model->acts, memory, cfg, B, T, recompute);
    rope_tables(model->acts.rope_cos, model->acts.rope_sin, cfg->max_seq_len, HS, cfg->rope_theta, 0.0f, 0.0f, 0.0f, 0.0f, stream);
    model->gpu.logits = model->acts.output;  // (B, T, V)
    model->gpu.logits_stride = (size_t)cfg->vocab_size;
    model->gpu.norm_scratch = model->acts.norm;
    gpu_model_allocate_state(&model->gpu, B, T, shard, use_master_weights, stream);
    gpu_model_prepare_attention(&model->gpu, B, T, cfg->num_heads, cfg->num_kv_heads, HS, stream);
}

// ----------------------------------------------------------------------------
// forward, backward

// layer l's view of the activations
static NanoChatLayerActs nanochat_layer_acts(const NanoChat* model, int l) {
    const NanoChatActs* a = &model->acts;
    const NanoChatConfig* cfg = &model->config;
    const int T = model->gpu.T;
    const size_t BT = (size_t)model->gpu.B * T, C = cfg->channels, NH = cfg->num_heads, NKV = cfg->num_kv_heads;
    const size_t HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden;
    const int keep_norms = model->gpu.recompute < 2, keep_relu2 = model->gpu.recompute < 1;
    NanoChatLayerActs v;
    v.residual = l == 0 ? a->x0 : (floatX*)gpu_act_slice(a->residual3, l - 1, BT * C * sizeof(floatX));
    NANOCHAT_GPU_LAYER_ACTIVATIONS(GPU_ACT_LAYER)
    return v;
}

// the sizes forward and backward are written in (ints, as the kernels take them), the stream, cuBLAS and the
// activations
#define NANOCHAT_STEP_SIZES_(model) \
    const NanoChatConfig* cfg = &(model)->config; \
    const int B = (model)->gpu.B, T = (model)->gpu.T, BT = B * T; \
    const int L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, NKV = cfg->num_kv_heads, V = cfg->vocab_size; \
    const int HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden; \
    const float eps = cfg->norm_eps; \
    cudaStream_t stream = (model)->gpu.stream; \
    CublasContext* ctx = &(model)->gpu.cublas; \
    NanoChatActs acts = (model)->acts; \
    (void)L; (void)V; (void)HS; (void)QKV; (void)FFN; (void)eps;

// inputs, targets: host (B, T) token ids; targets may be NULL (logits only, capped, in acts.output).
// With targets: per-token losses, their mean in model->gpu.mean_loss, and with write_dlogits the dlogits
// (scaled by dloss, taken back through the cap) in acts.output.
static void nanochat_forward(void* m, const int* inputs, const int* targets, float dloss, int write_dlogits) {
    NanoChat* model = (NanoChat*)m;
    NANOCHAT_STEP_SIZES_(model)
    NanoChatGpuParams p = model->params;
    gpu_model_upload_batch(&model->gpu, inputs, targets);
    encoder_forward(acts.encoded, model->gpu.inputs, p.wte, NULL, B, T, C, stream);          // (B,T,C)
    rmsnorm_forward(acts.x0, acts.x0_rstd, acts.encoded, NULL, eps, BT, C, stream);           // (B,T,C)
    // each layer ends with the next RMSNorm fused into its last residual add, so the first runs on its own
    rmsnorm_forward(nanochat_layer_acts(model, 0).ln1, acts.ln1_rstd, acts.x0, NULL, eps, BT, C, stream);
    for (int l = 0; l < L; l++) {
        NanoChatGpuLayerParams w = gpu_model_layer<NanoChatGpuLayerParams>(&model->gpu, &model->params, l);
        NanoChatLayerActs a = nanochat_layer_acts(model, l);
        // attention block: q|k|v, q and k rotated then normalised per head (in place, in the layer's qkv)
        matmul_forward(ctx, a.qkv, a.ln1, w.qkvw, NULL, BT, C, QKV, NULL);                              // (B,T,QKV)
        rope_reverse_forward(a.qkv, acts.rope_cos, acts.rope_sin, B, T, QKV, NH + NKV, HS, stream);     // q and k heads
        qknorm_forward(a.qkv, a.qk_rstd, BT, QKV, NH + NKV, HS, eps, stream);
#ifdef ENABLE_CUDNN
        // no backward follows when !write_dlogits
        cudnn_attention_forward(model->gpu.cudnn, a.atty, a.att_stats, a.qkv, B, T, NH, NKV, HS, !write_dlogits); // (B,T,C)
#else
        repeat_kv_forward(acts.scratch_bt3c, a.qkv, B, T, NH, NKV, HS, stream);                         // (B,T,3C)
        attention_forward(ctx, a.atty, a.qkvr, a.att, acts.scratch_bt3c, acts.scratch_btc, B, T, C, NH); // (B,T,C)
#endif
        matmul_forward(ctx, acts.scratch_btc, a.atty, w.attprojw, NULL, BT, C, C, NULL);                 // (B,T,C)
        // residual2 = residual + attproj, ln2 = rmsnorm(residual2) in one pass
        fused_residual_rmsnorm_forward(a.residual2, a.ln2, a.ln2_rstd, a.residual, acts.scratch_btc, NULL, eps, BT, C, stream);
        // MLP block
        matmul_forward(ctx, a.fch, a.ln2, w.fcw, NULL, BT, C, FFN, NULL);                                // (B,T,FFN)
        relu2_forward(a.fch_relu2, a.fch, (size_t)BT * FFN, stream);                                     // (B,T,FFN)
        matmul_forward(ctx, acts.scratch_btc, a.fch_relu2, w.fcprojw, NULL, BT, FFN, C, NULL);           // (B,T,C)
        // residual3 = residual2 + fcproj, then the next RMSNorm (the next layer's ln1, or the final one)
        floatX* next = l + 1 < L ? nanochat_layer_acts(model, l + 1).ln1 : acts.lnf;
        float* next_rstd = l + 1 < L ? nanochat_layer_acts(model, l + 1).ln1_rstd : acts.lnf_rstd;
        fused_residual_rmsnorm_forward(a.residual3, next, next_rstd, a.residual2, acts.scratch_btc, NULL, eps, BT, C, stream);
    }
    matmul_forward(ctx, acts.output, acts.lnf, p.lm_head, NULL, BT, C, V, NULL);                        // (B,T,V)
    if (cfg->softcap > 0.0f) { softcap_forward(acts.output, BT, V, V, cfg->softcap, stream); }
    gpu_model_loss(&model->gpu, targets, acts.losses, dloss, V, write_dlogits);
}

// starts the reduction over the processes of layer l's gradients (-1: wte and lm_head)
static void nanochat_reduce_layer(NanoChat* model, MultiGpu* mg, int l) {
    GradRange ranges[NANOCHAT_NUM_PARAMETER_TENSORS];
    int n = gpu_model_layer_ranges(&model->gpu, l, ranges);
    gpu_model_reduce_ranges(&model->gpu, mg, ranges, n);
}

// Gradients of the last forward (called with write_dlogits = 1) are ADDED to model->grads.
// reduce: the step's last micro-batch, so each finished layer's gradients start their reduction
// over the processes (overlapped with the rest of the backward pass).
static void nanochat_backward(void* m, const int* inputs, MultiGpu* mg, int reduce) {
    NanoChat* model = (NanoChat*)m;
    NANOCHAT_STEP_SIZES_(model)
    NanoChatGpuParams p = model->params, g = model->grads;

    cudaCheck(cudaMemsetAsync(acts.dresidual, 0, (size_t)BT * C * sizeof(floatX), stream));
    // lm head: dlogits (B, T, V) in acts.output are already taken back through the softcap by the classifier
    matmul_backward(ctx, acts.scratch_btc, g.lm_head, NULL, acts.output, acts.lnf, p.lm_head, NULL, BT, C, V, NULL);
    rmsnorm_backward(acts.dresidual, NULL, NULL, acts.scratch_btc, nanochat_layer_acts(model, L - 1).residual3, NULL,
                     acts.lnf_rstd, BT, C, stream);
    for (int l = L - 1; l >= 0; l--) {
        NanoChatGpuLayerParams w = gpu_model_layer<NanoChatGpuLayerParams>(&model->gpu, &model->params, l);
        NanoChatGpuLayerParams dw = gpu_model_layer<NanoChatGpuLayerParams>(&model->gpu, &model->grads, l);
        NanoChatLayerActs a = nanochat_layer_acts(model, l);
        // recompute what the forward pass did not keep
        if (model->gpu.recompute >= 2) {
            rmsnorm_forward(a.ln1, a.ln1_rstd, a.residual, NULL, eps, BT, C, stream);
            rmsnorm_forward(a.ln2, a.ln2_rstd, a.residual2, NULL, eps, BT, C, stream);
        }
        if (model->gpu.recompute >= 1) { relu2_forward(a.fch_relu2, a.fch, (size_t)BT * FFN, stream); }
        // MLP block: dresidual is the gradient of this layer's output
        matmul_backward(ctx, acts.dfch, dw.fcprojw, NULL, acts.dresidual, a.fch_relu2, w.fcprojw, NULL, BT, FFN, C, NULL);
        relu2_backward(acts.dfch, acts.dfch, a.fch, (size_t)BT * FFN, stream);  // in place
        matmul_backward(ctx, acts.scratch_btc, dw.fcw, NULL, acts.dfch, a.ln2, w.fcw, NULL, BT, C, FFN, NULL);
        rmsnorm_backward(acts.dresidual, NULL, NULL, acts.scratch_btc, a.residual2, NULL, a.ln2_rstd, BT, C, stream);
        // attention block: dresidual is now the gradient of residual2
        matmul_backward(ctx, acts.scratch_btc, dw.attprojw, NULL, acts.dresidual, a.atty, w.attprojw, NULL, BT, C, C, NULL);
#ifdef ENABLE_CUDNN
        // scratch_btc holds d(atty); dq|dk|dv (B, T, QKV) goes straight into scratch_qkv, dk and dv summed by cuDNN
        // over each group's query heads
        cudnn_attention_backward(model->gpu.cudnn, acts.scratch_qkv, acts.scratch_btc, a.qkv, a.atty, a.att_stats, B, T, NH, NKV, HS);
#else
        attention_backward(ctx, acts.scratch_bt3c, acts.dqkvr, acts.datt, acts.dy, acts.scratch_btc, a.qkvr, a.att, B, T, C, NH);
        repeat_kv_backward(acts.scratch_qkv, acts.scratch_bt3c, B, T, NH, NKV, HS, stream);              // (B,T,QKV)
#endif
        qknorm_backward(acts.scratch_qkv, a.qkv, a.qk_rstd, BT, QKV, NH + NKV, HS, stream);
        rope_reverse_backward(acts.scratch_qkv, acts.rope_cos, acts.rope_sin, B, T, QKV, NH + NKV, HS, stream);
        matmul_backward(ctx, acts.scratch_btc, dw.qkvw, NULL, acts.scratch_qkv, a.ln1, w.qkvw, NULL, BT, C, QKV, NULL);
        rmsnorm_backward(acts.dresidual, NULL, NULL, acts.scratch_btc, a.residual, NULL, a.ln1_rstd, BT, C, stream);
        if (reduce) { nanochat_reduce_layer(model, mg, l); }
    }
    // dresidual is the gradient of x0 = rmsnorm(encoded): into d(encoded), then the embedding rows
    cudaCheck(cudaMemsetAsync(acts.scratch_btc, 0, (size_t)BT * C * sizeof(floatX), stream));
    rmsnorm_backward(acts.scratch_btc, NULL, NULL, acts.dresidual, acts.encoded, NULL, acts.x0_rstd, BT, C, stream);
    token_groups_build(&model->gpu.token_groups, inputs);
    encoder_backward(g.wte, NULL, acts.scratch_btc, &model->gpu.token_groups, &model->gpu.token_groups_device, B, T, C, stream);
    if (reduce) { nanochat_reduce_layer(model, mg, -1); }
}

// ----------------------------------------------------------------------------
// what nanochat brings to llmc/cuda/gpu_trainer.cuh's GpuTrainer (and through it to llmc/trainer.h's loop): its
// calls, each taking the NanoChat struct, as one table

// no -ge: ReLU^2 has no cuBLASLt epilogue here; -op muon: every layer's qkvw (q, k and v as one matrix), attprojw, fcw,
// fcprojw (use_muon NULL: gpu_model_use_muon_on_layers)
static const GpuModelCalls nanochat_calls = {
    .init = nanochat_init, .use_muon = NULL, .allocate_state = nanochat_allocate_state,
    .set_gelu_fusion = NULL, .forward = nanochat_forward, .backward = nanochat_backward,
};

// ----------------------------------------------------------------------------
// main

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    NanoChat model;
    return gpu_trainer_main(argc, argv, "train_nanochatcu",
                            "train_nanochatcu: nanochat training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)",
                            &NANOCHAT_FAMILY, &model, &nanochat_calls, &model.gpu);
}
#endif // LLMC_NO_MAIN
