/*
llmc/cuda/decoder_gpu.cuh: the pre-norm decoder of llmc/decoder.h on NVIDIA GPUs, one model for every decoder family
(Llama 3, nanochat's GPT, Qwen3). It reads only the family's description (llmc/model_family.h) and, through it, the
DecoderConfig (shapes and switches) and DecoderLayout (where each tensor lies in the flat parameters); the host side
around it (flat buffers, ZeRO-1, the update, NCCL, the training state, the start-up) is llmc/cuda/gpu_trainer.cuh's.

    DecoderGpu                    the model: its family and config, the decoder's view of them, the activations, and
                                  its GpuModel
    decoder_gpu_calls             its GpuModelCalls (init, allocate_state, forward, backward; no -ge; -op muon: every
                                  per-layer 2-D weight of the family's table)
    decoder_gpu_main(argc, argv, family, program, about)   a GPU trainer's main() (train_<name>.cu)
    (decoder_gpu_test_main, a GPU test program's main(), is llmc/cuda/decoder_gpu_test.cuh's)

One training step (shapes: B batch, T time, C channels, V vocab (not padded), L layers, NH query heads, NKV key/value
heads, HS head_dim, AW = NH HS the attention width (C for Llama 3 and nanochat, the model's own for Qwen3),
QKV = (NH + 2 NKV) HS, FFN the MLP's hidden size):
    decoder_gpu_forward    token embedding (-> weightless RMSNorm: embed_norm) -> L x (RMSNorm, qkv projection,
                           QK-norm with weights then RoPE / RoPE then weightless QK-norm / RoPE alone, causal
                           grouped-query attention, projection, residual, RMSNorm, SwiGLU or ReLU^2 MLP, residual)
                           -> final RMSNorm -> lm_head (wte when tied) (-> logit softcap) -> fused classifier (loss and
                           dlogits, through the cap)
    decoder_gpu_backward   the same layers in reverse; each finished layer's gradients start their NCCL reduction while
                           the next layer's backward runs
The norms have weights where the family's do (norm_weights; a missing weight is rmsnorm.cuh's weightless mode).
Attention without cuDNN: the (B, T, QKV) projection repeated into the (B, T, 3 AW) q|k|v of attention.cuh
(llmc/cuda/repeat_kv.cuh); with USE_CUDNN=1 (BF16), cuDNN flash attention reads q, k, v in place from each layer's
(B, T, QKV) projection, does the grouped-query attention itself and keeps (B, NH, T) fp32 softmax statistics instead of
the attention matrix.
*/
#ifndef LLMC_DECODER_GPU_CUH
#define LLMC_DECODER_GPU_CUH

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../decoder.h"
#include "../model_family.h"
#include "../trainer.h"  // the training loop, its flags (args.h), data, tokenizer, sampler, schedules, logs
#include "cuda_common.cuh"
#include "cublas_common.cuh"
#include "encoder.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "qknorm.cuh"
#include "repeat_kv.cuh"
#include "swiglu.cuh"
#include "relu2.cuh"
#include "matmul.cuh"
#include "attention.cuh"
#include "fused_classifier.cuh"
#include "muon.cuh"
#include "multi_gpu.cuh"
#include "gpu_trainer.cuh"  // the flat buffers, ZeRO-1, the update, NCCL, the training state, start-up

// ----------------------------------------------------------------------------
// the parameters: one field per tensor a decoder may have (llmc/decoder.h DECODER_TENSORS), NULL where the family has
// none; lm_head is wte when tied

#define DECODER_GPU_VIEW_FIELD_(name) floatX* name;
typedef struct { DECODER_TENSORS(DECODER_GPU_VIEW_FIELD_) } DecoderGpuWeights;
#undef DECODER_GPU_VIEW_FIELD_

// The activations, in buffer order: rows X(type, name, per_layer, per_token, has_grad) as train_gpt2.cu's
// (llmc/cuda/gpu_trainer.cuh GPU_ACT_*): a tensor is (B, T, per_token), or (L, B, T, per_token) when per_layer;
// keep_norms and keep_act are 0 when the backward recomputes those (-r 2: ln1, ln2; -r 1: fch_act), so all layers share
// one slice; a row of 0 per token is absent (NULL) for this model. Sizes in C, NH, NKV, T, V, AW, QKV, FFN and the
// switches: QKV_KEPT (each layer's projection kept: for cuDNN and nanochat's QK-norm, whose backward reads it),
// QK_NORM (the QK-norm's statistics), QK_INPUT (the weighted QK-norm's input, which its backward reads), EMBED_NORM,
// GATED (SwiGLU's second projection), DRESIDUAL_EMBED (the embeddings' gradient apart from the residual's). The work
// buffers that do not grow with B x T (the rotary tables among them) follow the table (decoder_gpu_point_activations).
#define DECODER_GPU_ACTIVATIONS(X) \
    X(floatX, encoded,      0, C,                   1) /* token embeddings */ \
    X(floatX, x0,           0, EMBED_NORM * C,      1) /* their RMSNorm: the residual stream's start (embed_norm) */ \
    X(float,  x0_rstd,      0, EMBED_NORM,          0) \
    DECODER_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, lnf,          0, C,                   1) /* final RMSNorm */ \
    X(float,  lnf_rstd,     0, 1,                   0) \
    X(float,  losses,       0, 1,                   1) \
    X(floatX, output,       0, V,                   1) /* logits (capped), then dlogits (before the cap) */ \
    X(floatX, scratch_qkv,  0, QKV,                 1) /* the qkv projection (not kept: rotated here); its gradient */ \
    DECODER_GPU_REPEAT_KV_BUFFER(X) \
    X(floatX, scratch_btc,  0, C > AW ? C : AW,     1) /* the projections' (B,T,C) outputs; attention's (B,T,AW) */ \
    /* backward only */ \
    X(floatX, dresidual,    0, C,                   0) /* gradient of the residual stream */ \
    X(floatX, dact,         0, GATED * FFN,         0) /* gradient of fch_act (SwiGLU; ReLU^2 works in dfch) */ \
    X(floatX, dfch,         0, FFN,                 0) /* gradient of fch (and of ReLU^2's output first) */ \
    X(floatX, dfch2,        0, GATED * FFN,         0) /* gradient of the up projection */ \
    DECODER_GPU_ATTENTION_BACKWARD_BUFFERS(X)

#define DECODER_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, ln1,        keep_norms,  C,                      1) /* RMSNorm of the layer's input */ \
    X(float,  ln1_rstd,   1,           1,                      0) \
    X(floatX, qkv,        1,           QKV_KEPT * QKV,         1) /* q|k|v per token, q and k normalised and rotated */ \
    X(float,  qk_rstd,    1,           QK_NORM * (NH + NKV),   0) /* QK-norm's statistics: (B,T,NH) q's, (B,T,NKV) k's */ \
    X(floatX, qk_in,      1,           QK_INPUT * (NH + NKV) * HS, 0) /* the weighted QK-norm's input: q heads, k heads */ \
    DECODER_GPU_ATTENTION_ACTIVATIONS(X) \
    X(floatX, atty,       1,           AW,                     1) /* attention output, before its projection */ \
    X(floatX, residual2,  1,           C,                      1) /* input + attention projection */ \
    X(floatX, ln2,        keep_norms,  C,                      1) \
    X(float,  ln2_rstd,   1,           1,                      0) \
    X(floatX, fch,        1,           FFN,                    1) /* fc projection (SwiGLU: the gate) */ \
    X(floatX, fch2,       1,           GATED * FFN,            1) /* SwiGLU's up projection */ \
    X(floatX, fch_act,    keep_act,    FFN,                    1) /* silu(gate) * up, or relu(fch)^2 */ \
    X(floatX, residual3,  1,           C,                      1) /* residual2 + MLP output, the layer's output */

#ifdef ENABLE_CUDNN
// (B, NH, T) fp32 softmax statistics (log-sum-exp of each row) instead of the attention matrix; nothing repeated, no
// backward buffers of ours
#define DECODER_GPU_ATTENTION_ACTIVATIONS(X) \
    X(float,  att_stats,  1,           NH,     0) /* (B, NH, T) */
#define DECODER_GPU_REPEAT_KV_BUFFER(X)
#define DECODER_GPU_ATTENTION_BACKWARD_BUFFERS(X)
#define DECODER_GPU_CUDNN 1
#else
// llmc/cuda/repeat_kv.cuh's rows: q, k, v head-major with k and v repeated, the attention matrix, work buffers
#define DECODER_GPU_ATTENTION_ACTIVATIONS(X) REPEAT_KV_ATTENTION_LAYER_ACTIVATIONS(X)
#define DECODER_GPU_REPEAT_KV_BUFFER(X) REPEAT_KV_ATTENTION_BUFFER(X)
#define DECODER_GPU_ATTENTION_BACKWARD_BUFFERS(X) REPEAT_KV_ATTENTION_BACKWARD_BUFFERS(X)
#define DECODER_GPU_CUDNN 0
#endif

typedef struct {
    DECODER_GPU_ACTIVATIONS(GPU_ACT_FIELD)
    float* rope_cos;  // (maxT, HS/2) the rotary tables
    float* rope_sin;
    float* fscratch;  // column-sum partials of the norm weights' gradients (RMSNorm's C columns, QK-norm's HS)
    float* norm;      // (1 + GLOBAL_NORM_BLOCKS) the squared gradient norm and its partial sums
} DecoderGpuActs;
// one layer's activations: residual is its input (encoded or x0, or the previous layer's residual3)
typedef struct { floatX* residual; DECODER_GPU_LAYER_ACTIVATIONS(GPU_ACT_FIELD) } DecoderGpuLayerActs;

// the most bytes of a family's config the model keeps (the family's struct, model_file->config_size)
#define DECODER_GPU_CONFIG_BYTES 256

// A decoder family's model on the GPU: its family and config (what its model file holds), the decoder's shapes,
// switches and tensor layout, the activations (recomputed at -r 1: the MLP activation, -r 2: also the block's
// RMSNorms), and its GpuModel (llmc/cuda/gpu_trainer.cuh). family is set before init (decoder_gpu_main).
typedef struct {
    const ModelFamily* family;
    alignas(16) unsigned char config[DECODER_GPU_CONFIG_BYTES];
    DecoderConfig d;
    DecoderLayout layout;
    floatX* param_table[GPU_MODEL_MAX_TENSORS];  // the family's table order, as gpu_model_build points them (the
    floatX* grad_table[GPU_MODEL_MAX_TENSORS];   // model reads the layout's views instead: decoder_gpu_weights)
    DecoderGpuActs acts;  // in gpu.acts_memory
    GpuModel gpu;
} DecoderGpu;

// layer l's views (l = 0 for the tensors outside the layers too) of the parameters or the gradients (memory)
static DecoderGpuWeights decoder_gpu_weights(const DecoderGpu* model, floatX* memory, int l) {
    const DecoderLayout* layout = &model->layout;
    DecoderGpuWeights view;
    DECODER_TENSORS(DECODER_POINT_FIELD)
    return view;
}

// the sizes and switches the activation table is written in, for a model at B x T and -r recompute
#define DECODER_GPU_TABLE_SIZES_(d, batch, seq_len, recompute) \
    const size_t T = (size_t)(seq_len), BT = (size_t)(batch) * T, C = (d)->channels, NH = (d)->num_heads, NKV = (d)->num_kv_heads; \
    const size_t L = (d)->num_layers, V = (d)->vocab_size, HS = (d)->head_dim, FFN = (d)->ffn_hidden; \
    const size_t AW = NH * HS, QKV = (NH + 2 * NKV) * HS; \
    const size_t QK_NORM = (d)->qk_norm != DECODER_QKNORM_NONE, QK_INPUT = (d)->qk_norm == DECODER_QKNORM_WEIGHTED; \
    const size_t QKV_KEPT = DECODER_GPU_CUDNN || (d)->qk_norm == DECODER_QKNORM_PLAIN, EMBED_NORM = (d)->embed_norm != 0; \
    const size_t GATED = (d)->mlp == DECODER_MLP_SWIGLU; \
    const int keep_norms = (recompute) < 2, keep_act = (recompute) < 1; \
    (void)L; (void)V; (void)T; (void)QK_NORM; (void)QK_INPUT; (void)QKV_KEPT; (void)EMBED_NORM; (void)GATED;

// Points the activations for micro-batches of B x T at recompute level -r into memory (NULL: only counts), each slice
// 256-byte aligned, then the work buffers; returns the bytes they take.
static size_t decoder_gpu_point_activations(DecoderGpuActs* a, char* memory, const DecoderConfig* d, int batch, int seq_len,
                                            int recompute) {
    DECODER_GPU_TABLE_SIZES_(d, batch, seq_len, recompute)
    size_t offset = 0;
    DECODER_GPU_ACTIVATIONS(GPU_ACT_POINT)
    const size_t rope_bytes = (size_t)d->max_seq_len * (HS / 2) * sizeof(float);
    a->rope_cos = (float*)gpu_act_point(memory, &offset, 1, rope_bytes);
    a->rope_sin = (float*)gpu_act_point(memory, &offset, 1, rope_bytes);
    // the norm weights' gradients: RMSNorm's C columns, QK-norm's HS (none without weights)
    const size_t weight_columns = (d->norm_weights ? C : 0) > (QK_INPUT ? HS : 0) ? (d->norm_weights ? C : 0) : (QK_INPUT ? HS : 0);
    a->fscratch = (float*)gpu_act_point(memory, &offset, 1, RMSNORM_ROW_CHUNKS * weight_columns * sizeof(float));
    a->norm = (float*)gpu_act_point(memory, &offset, 1, (1 + GLOBAL_NORM_BLOCKS) * sizeof(float));
    return offset;
}

// the model of this config of model->family: its GpuModel (gpu_model_init) with the family's table, the decoder's
// shapes, switches and layout, the softcap its classifier takes back (llmc/cuda/gpu_trainer.cuh's gpu_model_build
// fills the parameters: -e's model file, or the family's init)
static void decoder_gpu_init(void* m, const void* config) {
    DecoderGpu* model = (DecoderGpu*)m;
    const ModelFamily* family = model->family;
    if (family == NULL) { llmc_die("internal: a DecoderGpu without its family"); }
    memset(model, 0, sizeof(*model));
    model->family = family;
    if (family->model_file->config_size > sizeof(model->config)) {
        llmc_die("internal: %s's config of %zu bytes, more than a DecoderGpu keeps", family->name, family->model_file->config_size);
    }
    memcpy(model->config, config, family->model_file->config_size);
    decoder_config(family, model->config, &model->d);
    decoder_layout(family, model->config, &model->layout);
    const DecoderConfig* d = &model->d;
    gpu_model_init(&model->gpu, family, model->config, model->param_table, model->grad_table, d->num_layers, d->channels,
                   d->vocab_size, d->max_seq_len);
    model->gpu.logit_softcap = d->softcap;
}

// activations for micro-batches of B x T (T at most the model's maxT: the callers check it), the rotary tables,
// optimizer state for the shard, cuBLAS
static void decoder_gpu_allocate_state(void* m, int B, int T, int recompute, ZeroShard shard, int use_master_weights,
                                       cudaStream_t stream) {
    DecoderGpu* model = (DecoderGpu*)m;
    const DecoderConfig* d = &model->d;
    const int HS = d->head_dim;
    // the kernels move heads and MLP rows in 128-bit packets: 4 values in FP32, 8 in BF16
    if (HS % x128::size != 0 || d->ffn_hidden % x128::size != 0) {
        char head[64];
        if (HS * d->num_heads == d->channels) { snprintf(head, sizeof(head), "C/NH = %d/%d", d->channels, d->num_heads); }
        else { snprintf(head, sizeof(head), "HS = %d", HS); }
        llmc_die("model: the head size %s and the FFN size %d must be multiples of %d in this build (%s)", head, d->ffn_hidden,
                 x128::size, PRECISION_NAME);
    }
    if (d->num_kv_heads <= 0 || d->num_heads % d->num_kv_heads != 0) {
        llmc_die("model: NH = %d query heads do not split into groups of the NKV = %d key/value heads", d->num_heads,
                 d->num_kv_heads);
    }
    gpu_model_check_attention(B, T, d->num_heads, d->num_kv_heads, HS);
    size_t bytes = decoder_gpu_point_activations(&model->acts, NULL, d, B, T, recompute);
    char* memory = gpu_model_allocate_activations(&model->gpu, bytes, recompute, B * T, d->vocab_size);
    decoder_gpu_point_activations(&model->acts, memory, d, B, T, recompute);
    rope_tables(model->acts.rope_cos, model->acts.rope_sin, d->max_seq_len, HS, d->rope_theta, d->rope_factor,
                d->rope_low_freq_factor, d->rope_high_freq_factor, d->rope_original_max_pos, stream);
    model->gpu.logits = model->acts.output;  // (B, T, V)
    model->gpu.logits_stride = (size_t)d->vocab_size;
    model->gpu.norm_scratch = model->acts.norm;
    gpu_model_allocate_state(&model->gpu, B, T, shard, use_master_weights, stream);
    gpu_model_prepare_attention(&model->gpu, B, T, d->num_heads, d->num_kv_heads, HS, stream);
}

// ----------------------------------------------------------------------------
// forward, backward

// layer l's view of the activations
static DecoderGpuLayerActs decoder_gpu_layer_acts(const DecoderGpu* model, int l) {
    const DecoderGpuActs* a = &model->acts;
    DECODER_GPU_TABLE_SIZES_(&model->d, model->gpu.B, model->gpu.T, model->gpu.recompute)
    (void)keep_norms; (void)keep_act;
    DecoderGpuLayerActs v;
    floatX* first = model->d.embed_norm ? a->x0 : a->encoded;
    v.residual = l == 0 ? first : (floatX*)gpu_act_slice(a->residual3, l - 1, BT * C * sizeof(floatX));
    DECODER_GPU_LAYER_ACTIVATIONS(GPU_ACT_LAYER)
    return v;
}

// the sizes forward and backward are written in (ints, as the kernels take them), the stream, cuBLAS and the
// activations
#define DECODER_GPU_STEP_SIZES_(model) \
    const DecoderConfig* d = &(model)->d; \
    const int B = (model)->gpu.B, T = (model)->gpu.T, BT = B * T; \
    const int L = d->num_layers, C = d->channels, NH = d->num_heads, NKV = d->num_kv_heads, V = d->vocab_size; \
    const int HS = d->head_dim, AW = NH * HS, QKV = (NH + 2 * NKV) * HS, FFN = d->ffn_hidden; \
    const float eps = d->norm_eps; \
    cudaStream_t stream = (model)->gpu.stream; \
    CublasContext* ctx = &(model)->gpu.cublas; \
    DecoderGpuActs acts = (model)->acts; \
    (void)d; (void)B; (void)T; (void)BT; (void)L; (void)C; (void)NH; (void)NKV; (void)V; (void)HS; (void)AW; (void)QKV; \
    (void)FFN; (void)eps; (void)stream; (void)ctx; (void)acts;

// the MLP's input projections: fch = ln2 @ fcw^T (SwiGLU: the gate), fch2 = ln2 @ fcw2^T (SwiGLU's up)
static void decoder_gpu_mlp_in_forward(DecoderGpu* model, const DecoderGpuWeights* w, const DecoderGpuLayerActs* a) {
    const DecoderConfig* d = &model->d;
    const int BT = model->gpu.B * model->gpu.T, C = d->channels, FFN = d->ffn_hidden;
    CublasContext* ctx = &model->gpu.cublas;
    matmul_forward(ctx, a->fch, a->ln2, w->fcw, NULL, BT, C, FFN, NULL);                            // (B,T,FFN)
    if (d->mlp == DECODER_MLP_SWIGLU) { matmul_forward(ctx, a->fch2, a->ln2, w->fcw2, NULL, BT, C, FFN, NULL); } // (B,T,FFN)
}

// the MLP's activation: fch_act = silu(fch) * fch2 or relu(fch)^2
static void decoder_gpu_mlp_act_forward(DecoderGpu* model, const DecoderGpuLayerActs* a) {
    const size_t N = (size_t)model->gpu.B * model->gpu.T * model->d.ffn_hidden;
    cudaStream_t stream = model->gpu.stream;
    if (model->d.mlp == DECODER_MLP_SWIGLU) { swiglu_forward(a->fch_act, a->fch, a->fch2, N, stream); }
    else { relu2_forward(a->fch_act, a->fch, N, stream); }
}

// the MLP's backward from dresidual (the gradient of the layer's output) to dln2 (B,T,C), written; the weights'
// gradients added to dw
static void decoder_gpu_mlp_backward(DecoderGpu* model, floatX* dln2, const DecoderGpuWeights* dw, const DecoderGpuWeights* w,
                                     const DecoderGpuLayerActs* a) {
    const DecoderConfig* d = &model->d;
    const int BT = model->gpu.B * model->gpu.T, C = d->channels, FFN = d->ffn_hidden;
    cudaStream_t stream = model->gpu.stream;
    CublasContext* ctx = &model->gpu.cublas;
    const DecoderGpuActs* acts = &model->acts;
    if (d->mlp == DECODER_MLP_RELU2) {
        matmul_backward(ctx, acts->dfch, dw->fcprojw, NULL, acts->dresidual, a->fch_act, w->fcprojw, NULL, BT, FFN, C, NULL);
        relu2_backward(acts->dfch, acts->dfch, a->fch, (size_t)BT * FFN, stream);  // in place
        matmul_backward(ctx, dln2, dw->fcw, NULL, acts->dfch, a->ln2, w->fcw, NULL, BT, C, FFN, NULL);
        return;
    }
    matmul_backward(ctx, acts->dact, dw->fcprojw, NULL, acts->dresidual, a->fch_act, w->fcprojw, NULL, BT, FFN, C, NULL);
    swiglu_backward(acts->dfch, acts->dfch2, acts->dact, a->fch, a->fch2, (size_t)BT * FFN, stream);
    // dln2 = dfch @ fcw + dfch2 @ fcw2: the up projection's dinp is added to the gate's (accumulate = 1), as its dweight is
    matmul_backward(ctx, dln2, dw->fcw, NULL, acts->dfch, a->ln2, w->fcw, NULL, BT, C, FFN, NULL);
    const floatX* ops[LIN_NUM_OPERANDS] = {a->ln2, w->fcw2, NULL, dln2, dw->fcw2, acts->dfch2};
    GemmSpec dwspec = linear_dweight_spec(BT, C, FFN);
    gemm_lt(ctx, (floatX*)ops[dwspec.d], ops[dwspec.a], ops[dwspec.b], NULL, &dwspec, 1, GEMM_EPI_NONE, NULL);
    GemmSpec dispec = linear_dinp_spec(BT, C, FFN);
    gemm_lt(ctx, (floatX*)ops[dispec.d], ops[dispec.a], ops[dispec.b], NULL, &dispec, 1, GEMM_EPI_NONE, NULL);
}

// the sizes of the q and k heads' passes (every one is used by both: each switch has a pass that reads it)
#define DECODER_GPU_QK_SIZES_(model) \
    const DecoderConfig* d = &(model)->d; \
    const int B = (model)->gpu.B, T = (model)->gpu.T, BT = B * T, NH = d->num_heads, NKV = d->num_kv_heads; \
    const int HS = d->head_dim, QKV = (NH + 2 * NKV) * HS; \
    cudaStream_t stream = (model)->gpu.stream; \
    const DecoderGpuActs* acts = &(model)->acts;

// q and k of the (B, T, QKV) projection qkv, in place: Qwen3's weighted QK-norm then RoPE, or RoPE then nanochat's
// weightless QK-norm (rotated the other way), or RoPE alone (Llama 3)
static void decoder_gpu_qk_forward(DecoderGpu* model, floatX* qkv, const DecoderGpuWeights* w, const DecoderGpuLayerActs* a) {
    DECODER_GPU_QK_SIZES_(model)
    const float eps = d->norm_eps;
    if (d->qk_norm == DECODER_QKNORM_WEIGHTED) {
        qknorm_forward(qkv, a->qk_rstd, a->qk_in, w->qnormw, BT, QKV, NH, HS, eps, stream);  // the q heads
        qknorm_forward(qkv + (size_t)NH * HS, a->qk_rstd + (size_t)BT * NH, a->qk_in + (size_t)BT * NH * HS, w->knormw, BT, QKV,
                       NKV, HS, eps, stream);                                                // the k heads
    }
    if (d->rope == DECODER_ROPE_REVERSE) { rope_reverse_forward(qkv, acts->rope_cos, acts->rope_sin, B, T, QKV, NH + NKV, HS, stream); }
    else { rope_forward(qkv, acts->rope_cos, acts->rope_sin, B, T, QKV, NH + NKV, HS, stream); }
    if (d->qk_norm == DECODER_QKNORM_PLAIN) { qknorm_forward(qkv, a->qk_rstd, NULL, NULL, BT, QKV, NH + NKV, HS, eps, stream); }
}

// its backward: dqkv (B, T, QKV) in place, from the gradient of the rotated (and normalised) q and k to that of the
// projection's; the QK-norm weights' gradients added to dw
static void decoder_gpu_qk_backward(DecoderGpu* model, floatX* dqkv, const DecoderGpuWeights* dw, const DecoderGpuWeights* w,
                                    const DecoderGpuLayerActs* a) {
    DECODER_GPU_QK_SIZES_(model)
    if (d->qk_norm == DECODER_QKNORM_PLAIN) {
        qknorm_backward(dqkv, NULL, NULL, a->qkv, NULL, NULL, a->qk_rstd, BT, QKV, NH + NKV, HS, stream);
    }
    if (d->rope == DECODER_ROPE_REVERSE) { rope_reverse_backward(dqkv, acts->rope_cos, acts->rope_sin, B, T, QKV, NH + NKV, HS, stream); }
    else { rope_backward(dqkv, acts->rope_cos, acts->rope_sin, B, T, QKV, NH + NKV, HS, stream); }
    if (d->qk_norm == DECODER_QKNORM_WEIGHTED) {
        qknorm_backward(dqkv, dw->qnormw, acts->fscratch, NULL, a->qk_in, w->qnormw, a->qk_rstd, BT, QKV, NH, HS, stream);
        qknorm_backward(dqkv + (size_t)NH * HS, dw->knormw, acts->fscratch, NULL, a->qk_in + (size_t)BT * NH * HS, w->knormw,
                        a->qk_rstd + (size_t)BT * NH, BT, QKV, NKV, HS, stream);
    }
}

// inputs, targets: host (B, T) token ids; targets may be NULL (logits only, capped, in acts.output).
// With targets: per-token losses, their mean in model->gpu.mean_loss, and with write_dlogits the dlogits
// (scaled by dloss, taken back through the cap) in acts.output.
static void decoder_gpu_forward(void* m, const int* inputs, const int* targets, float dloss, int write_dlogits) {
    DecoderGpu* model = (DecoderGpu*)m;
    DECODER_GPU_STEP_SIZES_(model)
    DecoderGpuWeights p = decoder_gpu_weights(model, model->gpu.params_memory, 0);
    gpu_model_upload_batch(&model->gpu, inputs, targets);
    encoder_forward(acts.encoded, model->gpu.inputs, p.wte, NULL, B, T, C, stream);  // (B,T,C), no position table
    if (d->embed_norm) { rmsnorm_forward(acts.x0, acts.x0_rstd, acts.encoded, NULL, eps, BT, C, stream); }  // (B,T,C)
    // each layer ends with the next RMSNorm fused into its last residual add, so the first runs on its own
    DecoderGpuLayerActs first = decoder_gpu_layer_acts(model, 0);
    rmsnorm_forward(first.ln1, first.ln1_rstd, first.residual, p.ln1w, eps, BT, C, stream);
    for (int l = 0; l < L; l++) {
        DecoderGpuWeights w = decoder_gpu_weights(model, model->gpu.params_memory, l);
        DecoderGpuLayerActs a = decoder_gpu_layer_acts(model, l);
        // attention block: q|k|v (kept in the layer's qkv where the backward or cuDNN reads it), q and k normalised
        // and rotated in place
        floatX* qkv = a.qkv != NULL ? a.qkv : acts.scratch_qkv;
        matmul_forward(ctx, qkv, a.ln1, w.qkvw, NULL, BT, C, QKV, NULL);                                 // (B,T,QKV)
        decoder_gpu_qk_forward(model, qkv, &w, &a);
#ifdef ENABLE_CUDNN
        // cuDNN's grouped-query attention reads the NKV key/value heads for the NH query heads; no backward follows
        // when !write_dlogits
        cudnn_attention_forward(model->gpu.cudnn, a.atty, a.att_stats, qkv, B, T, NH, NKV, HS, !write_dlogits); // (B,T,AW)
#else
        repeat_kv_forward(acts.scratch_bt3c, qkv, B, T, NH, NKV, HS, stream);                              // (B,T,3AW)
        attention_forward(ctx, a.atty, a.qkvr, a.att, acts.scratch_bt3c, acts.scratch_btc, B, T, AW, NH);  // (B,T,AW)
#endif
        matmul_forward(ctx, acts.scratch_btc, a.atty, w.attprojw, NULL, BT, AW, C, NULL);                  // (B,T,C)
        // residual2 = residual + attproj, ln2 = rmsnorm(residual2) in one pass
        fused_residual_rmsnorm_forward(a.residual2, a.ln2, a.ln2_rstd, a.residual, acts.scratch_btc, w.ln2w, eps, BT, C, stream);
        // MLP block
        decoder_gpu_mlp_in_forward(model, &w, &a);
        decoder_gpu_mlp_act_forward(model, &a);                                                            // (B,T,FFN)
        matmul_forward(ctx, acts.scratch_btc, a.fch_act, w.fcprojw, NULL, BT, FFN, C, NULL);               // (B,T,C)
        // residual3 = residual2 + fcproj, then the next RMSNorm (the next layer's ln1, or the final one)
        if (l + 1 < L) {
            DecoderGpuWeights wn = decoder_gpu_weights(model, model->gpu.params_memory, l + 1);
            DecoderGpuLayerActs an = decoder_gpu_layer_acts(model, l + 1);
            fused_residual_rmsnorm_forward(a.residual3, an.ln1, an.ln1_rstd, a.residual2, acts.scratch_btc, wn.ln1w, eps, BT, C,
                                           stream);
        } else {
            fused_residual_rmsnorm_forward(a.residual3, acts.lnf, acts.lnf_rstd, a.residual2, acts.scratch_btc, p.lnfw, eps, BT, C,
                                           stream);
        }
    }
    matmul_forward(ctx, acts.output, acts.lnf, p.lm_head, NULL, BT, C, V, NULL);                           // (B,T,V)
    if (d->softcap > 0.0f) { softcap_forward(acts.output, BT, V, V, d->softcap, stream); }
    gpu_model_loss(&model->gpu, targets, acts.losses, dloss, V, write_dlogits);
}

// starts the reduction over the processes of layer l's gradients (-1: the tensors outside the layers), the
// empty lm_head of a tied model left out
static void decoder_gpu_reduce_layer(DecoderGpu* model, MultiGpu* mg, int l) {
    GradRange ranges[GPU_MODEL_MAX_TENSORS];
    int n = gpu_model_layer_ranges(&model->gpu, l, ranges), kept = 0;
    for (int i = 0; i < n; i++) {
        if (ranges[i].hi > ranges[i].lo) { ranges[kept++] = ranges[i]; }
    }
    gpu_model_reduce_ranges(&model->gpu, mg, ranges, kept);
}

// Gradients of the last forward (called with write_dlogits = 1) are ADDED to the model's gradients.
// reduce: the step's last micro-batch, so each finished layer's gradients start their reduction
// over the processes (overlapped with the rest of the backward pass).
static void decoder_gpu_backward(void* m, const int* inputs, MultiGpu* mg, int reduce) {
    DecoderGpu* model = (DecoderGpu*)m;
    DECODER_GPU_STEP_SIZES_(model)
    DecoderGpuWeights p = decoder_gpu_weights(model, model->gpu.params_memory, 0);
    DecoderGpuWeights g = decoder_gpu_weights(model, model->gpu.grads_memory, 0);

    cudaCheck(cudaMemsetAsync(acts.dresidual, 0, (size_t)BT * C * sizeof(floatX), stream));
    // lm head (or wte when tied): dlogits (B, T, V) in acts.output, already taken back through the softcap
    matmul_backward(ctx, acts.scratch_btc, g.lm_head, NULL, acts.output, acts.lnf, p.lm_head, NULL, BT, C, V, NULL);
    rmsnorm_backward(acts.dresidual, g.lnfw, acts.fscratch, acts.scratch_btc, decoder_gpu_layer_acts(model, L - 1).residual3,
                     p.lnfw, acts.lnf_rstd, BT, C, stream);
    for (int l = L - 1; l >= 0; l--) {
        DecoderGpuWeights w = decoder_gpu_weights(model, model->gpu.params_memory, l);
        DecoderGpuWeights dw = decoder_gpu_weights(model, model->gpu.grads_memory, l);
        DecoderGpuLayerActs a = decoder_gpu_layer_acts(model, l);
        // recompute what the forward pass did not keep
        if (model->gpu.recompute >= 2) {
            rmsnorm_forward(a.ln1, a.ln1_rstd, a.residual, w.ln1w, eps, BT, C, stream);
            rmsnorm_forward(a.ln2, a.ln2_rstd, a.residual2, w.ln2w, eps, BT, C, stream);
        }
        if (model->gpu.recompute >= 1) { decoder_gpu_mlp_act_forward(model, &a); }
        // MLP block: dresidual is the gradient of this layer's output
        decoder_gpu_mlp_backward(model, acts.scratch_btc, &dw, &w, &a);
        rmsnorm_backward(acts.dresidual, dw.ln2w, acts.fscratch, acts.scratch_btc, a.residual2, w.ln2w, a.ln2_rstd, BT, C, stream);
        // attention block: dresidual is now the gradient of residual2
        matmul_backward(ctx, acts.scratch_btc, dw.attprojw, NULL, acts.dresidual, a.atty, w.attprojw, NULL, BT, AW, C, NULL);
#ifdef ENABLE_CUDNN
        // scratch_btc holds d(atty); dq|dk|dv (B, T, QKV) goes straight into scratch_qkv, dk and dv summed by cuDNN
        // over each group's query heads
        cudnn_attention_backward(model->gpu.cudnn, acts.scratch_qkv, acts.scratch_btc, a.qkv, a.atty, a.att_stats, B, T, NH, NKV, HS);
#else
        attention_backward(ctx, acts.scratch_bt3c, acts.dqkvr, acts.datt, acts.dy, acts.scratch_btc, a.qkvr, a.att, B, T, AW, NH);
        repeat_kv_backward(acts.scratch_qkv, acts.scratch_bt3c, B, T, NH, NKV, HS, stream);                // (B,T,QKV)
#endif
        decoder_gpu_qk_backward(model, acts.scratch_qkv, &dw, &w, &a);
        matmul_backward(ctx, acts.scratch_btc, dw.qkvw, NULL, acts.scratch_qkv, a.ln1, w.qkvw, NULL, BT, C, QKV, NULL);
        rmsnorm_backward(acts.dresidual, dw.ln1w, acts.fscratch, acts.scratch_btc, a.residual, w.ln1w, a.ln1_rstd, BT, C, stream);
        if (reduce) { decoder_gpu_reduce_layer(model, mg, l); }
    }
    floatX* dencoded = acts.dresidual;
    if (d->embed_norm) {  // dresidual is the gradient of x0 = rmsnorm(encoded): into d(encoded), then the embedding rows
        cudaCheck(cudaMemsetAsync(acts.scratch_btc, 0, (size_t)BT * C * sizeof(floatX), stream));
        rmsnorm_backward(acts.scratch_btc, NULL, NULL, acts.dresidual, acts.encoded, NULL, acts.x0_rstd, BT, C, stream);
        dencoded = acts.scratch_btc;
    }
    token_groups_build(&model->gpu.token_groups, inputs);
    encoder_backward(g.wte, NULL, dencoded, &model->gpu.token_groups, &model->gpu.token_groups_device, B, T, C, stream);
    if (reduce) { decoder_gpu_reduce_layer(model, mg, -1); }
}

// ----------------------------------------------------------------------------
// what a decoder family brings to llmc/cuda/gpu_trainer.cuh's GpuTrainer (and through it to llmc/trainer.h's loop):
// the calls, each taking the DecoderGpu struct, as one table. No -ge: neither SwiGLU nor ReLU^2 has a cuBLASLt epilogue
// here; -op muon: every per-layer 2-D weight of the family's table (use_muon NULL: gpu_model_use_muon_on_layers)
static const GpuModelCalls decoder_gpu_calls = {
    .init = decoder_gpu_init, .use_muon = NULL, .allocate_state = decoder_gpu_allocate_state,
    .set_gelu_fusion = NULL, .forward = decoder_gpu_forward, .backward = decoder_gpu_backward,
};

// a decoder family's GPU trainer: main() of train_<name>.cu (program: "train_<name>cu", about: its --help line)
static int decoder_gpu_main(int argc, char** argv, const ModelFamily* family, const char* program, const char* about) {
    static DecoderGpu model;  // static: a GpuModel and the tables are large for a stack
    model.family = family;
    return gpu_trainer_main(argc, argv, program, about, family, &model, &decoder_gpu_calls, &model.gpu);
}

#endif // LLMC_DECODER_GPU_CUH
