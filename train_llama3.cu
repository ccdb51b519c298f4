/*
train_llama3.cu: Llama 3 training on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The story of one training step, top to bottom (the model of train_llama3.c and train_llama3.py):
    llama3_forward    token embedding -> L x (RMSNorm, qkv projection, RoPE on q and k, GQA key/value
                      repetition, causal attention, projection, residual, RMSNorm, SwiGLU MLP, residual)
                      -> final RMSNorm -> lm_head (or wte when tied) -> fused classifier (loss and dlogits)
    llama3_backward   the same layers in reverse; each finished layer's gradients start their NCCL
                      reduction while the next layer's backward runs
    gpu_model_update  global gradient norm, clipping, AdamW (fp32 master weights, stochastic rounding to
                      bf16) on this rank's ZeRO-1 shard; with -op muon, Muon on each layer's qkvw, attprojw, fcw,
                      fcw2, fcprojw instead (llmc/cuda/muon.cuh, as ./train_llama3 -op muon); then the all-gather

The kernels live in the llmc/cuda .cuh headers (rmsnorm, rope, repeat_kv, swiglu are Llama's; matmul,
attention, fused_classifier, encoder, adamw are shared with GPT-2). The training loop (flags, data,
evaluation, sampling, checkpoints and resume, signals) is llmc/trainer.h's trainer_run, and everything a GPU
trainer does on the host around its model (flat buffers, ZeRO-1, the update, NCCL, the training state, the
start-up) is llmc/cuda/gpu_trainer.cuh's, as for train_gpt2.cu. This file brings Llama 3 to them: its tensor
table (llmc/llama3.h), activations, forward and backward, and its calls (llama3_calls, at the end). It reads and
writes the model files of train_llama3.c and train_llama3.py, so a checkpoint of either trainer continues in
the other.
Precision is chosen at build time: make train_llama3cu PRECISION=BF16 (default) or FP32.
make train_llama3cu USE_CUDNN=1 (BF16) runs attention as cuDNN flash attention (llmc/cuda/cudnn_att.h): q, k, v
read in place from the rotated (B, T, QKV) projection, grouped-query attention done by cuDNN (no repetition of k
and v), fp32 softmax statistics per layer instead of the (B, NH, T, T) attention matrix; dq, dk, dv written back
in the projection's layout.
Shapes: B batch, T time, C channels, V vocab (not padded), L layers, NH query heads, NKV key/value heads,
HS = C / NH, QKV = (NH + 2 NKV) HS, FFN the SwiGLU hidden size.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/llama3.h"
#include "llmc/rand.h"
#include "llmc/mfu.h"
#include "llmc/tokenizer.h"
#include "llmc/trainer.h"  // the training loop, its flags (args.h), data, tokenizer, sampler, schedules, logs
#include "llmc/cuda/cuda_common.cuh"
#include "llmc/cuda/cublas_common.cuh"
#include "llmc/cuda/encoder.cuh"
#include "llmc/cuda/rmsnorm.cuh"
#include "llmc/cuda/rope.cuh"
#include "llmc/cuda/repeat_kv.cuh"
#include "llmc/cuda/swiglu.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/fused_classifier.cuh"
#include "llmc/cuda/muon.cuh"
#include "llmc/cuda/multi_gpu.cuh"
#include "llmc/cuda/gpu_trainer.cuh"  // the flat buffers, ZeRO-1, the update, NCCL, the training state, start-up

// ----------------------------------------------------------------------------
// Llama 3 model definition

// the parameter tensors in file order (llmc/llama3.h: wte, per layer ln1w qkvw attprojw ln2w fcw fcw2
// fcprojw, lnfw, lm_head) as floatX views, and one layer's view
typedef struct { LLAMA3_PARAMETER_TENSORS(TENSOR_FIELD, floatX) } Llama3GpuParams;
typedef struct { LLAMA3_LAYER_PARAMETER_TENSORS(TENSOR_FIELD, floatX) } Llama3GpuLayerParams;

// The activations, in buffer order: rows X(type, name, per_layer, per_token, has_grad), the CPU's rows
// (llmc/llama3.h) with the element type in front, as train_gpt2.cu's (llmc/cuda/gpu_trainer.cuh GPU_ACT_*):
// a tensor is (B, T, per_token), or (L, B, T, per_token) when per_layer; keep_norms and keep_swiglu are 0 when the
// backward recomputes those (-r 2: ln1, ln2; -r 1: fch_swiglu), so all layers share one slice. has_grad: the
// backward needs the tensor's gradient (1 where the GPU does not distinguish). Sizes in C, NH, T, V, QKV, FFN. The
// work buffers that do not grow with B x T (the rotary tables among them) follow the table (llama3_point_activations).
#define LLAMA3_GPU_ACTIVATIONS(X) \
    X(floatX, encoded,      0, C,     1) /* token embeddings */ \
    LLAMA3_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, lnf,          0, C,     1) /* final RMSNorm */ \
    X(float,  lnf_rstd,     0, 1,     0) \
    X(float,  losses,       0, 1,     1) \
    X(floatX, output,       0, V,     1) /* logits, then dlogits */ \
    X(floatX, scratch_qkv,  0, QKV,   1) /* the qkv projection, rotated; its gradient */ \
    LLAMA3_GPU_REPEAT_KV_BUFFER(X) \
    X(floatX, scratch_btc,  0, C,     1) \
    /* backward only */ \
    X(floatX, dresidual,    0, C,     0) /* gradient of the residual stream */ \
    X(floatX, dswiglu,      0, FFN,   0) /* gradient of fch_swiglu */ \
    X(floatX, dfch,         0, FFN,   0) /* gradient of the gate projection */ \
    X(floatX, dfch2,        0, FFN,   0) /* gradient of the up projection */ \
    LLAMA3_GPU_ATTENTION_BACKWARD_BUFFERS(X)

#define LLAMA3_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, ln1,        keep_norms,  C,   1) /* RMSNorm of the layer's input */ \
    X(float,  ln1_rstd,   1,           1,   0) \
    LLAMA3_GPU_ATTENTION_ACTIVATIONS(X) \
    X(floatX, atty,       1,           C,   1) /* attention output, before its projection */ \
    X(floatX, residual2,  1,           C,   1) /* input + attention projection */ \
    X(floatX, ln2,        keep_norms,  C,   1) \
    X(float,  ln2_rstd,   1,           1,   0) \
    X(floatX, fch,        1,           FFN, 1) /* gate projection */ \
    X(floatX, fch2,       1,           FFN, 1) /* up projection */ \
    X(floatX, fch_swiglu, keep_swiglu, FFN, 1) /* silu(gate) * up */ \
    X(floatX, residual3,  1,           C,   1) /* residual2 + MLP output, the layer's output */

#ifdef ENABLE_CUDNN
// cuDNN reads q, k, v from each layer's rotated projection and keeps (B, NH, T) fp32 softmax statistics (log-sum-exp
// of each row) instead of the attention matrix; nothing repeated, no backward buffers of ours
#define LLAMA3_GPU_ATTENTION_ACTIVATIONS(X) \
    X(floatX, qkvr,       1,           QKV, 1) /* q|k|v per token, rotated */ \
    X(float,  att_stats,  1,           NH,  0) /* (B, NH, T) */
#define LLAMA3_GPU_REPEAT_KV_BUFFER(X)
#define LLAMA3_GPU_ATTENTION_BACKWARD_BUFFERS(X)
#else
// llmc/cuda/repeat_kv.cuh's rows: q, k, v head-major with k and v repeated, the attention matrix, work buffers
#define LLAMA3_GPU_ATTENTION_ACTIVATIONS(X) REPEAT_KV_ATTENTION_LAYER_ACTIVATIONS(X)
#define LLAMA3_GPU_REPEAT_KV_BUFFER(X) REPEAT_KV_ATTENTION_BUFFER(X)
#define LLAMA3_GPU_ATTENTION_BACKWARD_BUFFERS(X) REPEAT_KV_ATTENTION_BACKWARD_BUFFERS(X)
#endif

typedef struct {
    LLAMA3_GPU_ACTIVATIONS(GPU_ACT_FIELD)
    float* rope_cos;  // (maxT, HS/2) the rotary tables
    float* rope_sin;
    float* fscratch;  // column-sum partials of the RMSNorm weight gradients
    float* norm;      // (1 + GLOBAL_NORM_BLOCKS) the squared gradient norm and its partial sums
} Llama3Acts;
// one layer's activations: residual is its input (encoded, or the previous layer's residual3)
typedef struct { floatX* residual; LLAMA3_GPU_LAYER_ACTIVATIONS(GPU_ACT_FIELD) } Llama3LayerActs;

// Points the activations for micro-batches of B x T at recompute level -r into memory (NULL: only
// counts), each slice 256-byte aligned, then the work buffers; returns the bytes they take.
static size_t llama3_point_activations(Llama3Acts* a, char* memory, const Llama3Config* cfg, int B, int T, int recompute) {
    const size_t BT = (size_t)B * T, C = cfg->channels, NH = cfg->num_heads, L = cfg->num_layers, V = cfg->vocab_size;
    const size_t HS = C / NH, QKV = (NH + 2 * (size_t)cfg->num_kv_heads) * HS, FFN = cfg->ffn_hidden;
    const int keep_norms = recompute < 2, keep_swiglu = recompute < 1;
    size_t offset = 0;
    LLAMA3_GPU_ACTIVATIONS(GPU_ACT_POINT)
    const size_t rope_bytes = (size_t)cfg->max_seq_len * (HS / 2) * sizeof(float);
    a->rope_cos = (float*)gpu_act_point(memory, &offset, 1, rope_bytes);
    a->rope_sin = (float*)gpu_act_point(memory, &offset, 1, rope_bytes);
    a->fscratch = (float*)gpu_act_point(memory, &offset, 1, RMSNORM_ROW_CHUNKS * C * sizeof(float));
    a->norm = (float*)gpu_act_point(memory, &offset, 1, (1 + GLOBAL_NORM_BLOCKS) * sizeof(float));
    return offset;
}

// Llama 3 on the GPU: its config, named views of the parameters and gradients, activations (recomputed at -r 1:
// SwiGLU, -r 2: SwiGLU + RMSNorms), and its GpuModel (llmc/cuda/gpu_trainer.cuh)
typedef struct {
    Llama3Config config;
    Llama3GpuParams params;   // views into gpu.params_memory
    Llama3GpuParams grads;    // views into gpu.grads_memory
    Llama3Acts acts;       // in gpu.acts_memory
    GpuModel gpu;
} Llama3;

// the model of this config: its GpuModel (gpu_model_init) with the views of its parameters and gradients
// (llmc/cuda/gpu_trainer.cuh's gpu_model_build fills the parameters: -e's model file, or llmc/llama3.h's init)
static void llama3_init(void* m, const void* config) {
    Llama3* model = (Llama3*)m;
    memset(model, 0, sizeof(*model));
    model->config = *(const Llama3Config*)config;
    const Llama3Config* cfg = &model->config;
    gpu_model_init(&model->gpu, &LLAMA3_FAMILY, cfg, &model->params, &model->grads, cfg->num_layers, cfg->channels,
                   cfg->vocab_size, cfg->max_seq_len);
}

// activations for micro-batches of B x T (T at most the model's maxT: the callers check it), the rotary tables,
// optimizer state for the shard, cuBLAS
static void llama3_allocate_state(void* m, int B, int T, int recompute, ZeroShard shard, int use_master_weights,
                                  cudaStream_t stream) {
    Llama3* model = (Llama3*)m;
    const Llama3Config* cfg = &model->config;
    const int HS = cfg->channels / cfg->num_heads;
    if (cfg->channels % cfg->num_heads != 0 || HS % 8 != 0 || cfg->ffn_hidden % 8 != 0) {
        llmc_die("model: the head size C/NH = %d/%d and the FFN size %d must be multiples of 8", cfg->channels, cfg->num_heads,
                 cfg->ffn_hidden);
    }
    if (cfg->num_heads % cfg->num_kv_heads != 0) {
        llmc_die("model: NH = %d query heads do not split into groups of the NKV = %d key/value heads", cfg->num_heads,
                 cfg->num_kv_heads);
    }
    gpu_model_check_attention(B, T, cfg->num_heads, cfg->num_kv_heads, HS);
    size_t bytes = llama3_point_activations(&model->acts, NULL, cfg, B, T, recompute);
    char* memory = gpu_model_allocate_activations(&model->gpu, bytes, recompute, B * T, cfg->vocab_size);
    llama3_point_activations(&model->acts, memory, cfg, B, T, recompute);
    float factor = cfg->use_scaled_rope ? cfg->rope_factor : 0.0f;
    rope_tables(model->acts.rope_cos, model->acts.rope_sin, cfg->max_seq_len, HS, cfg->rope_theta, factor,
                cfg->rope_low_freq_factor, cfg->rope_high_freq_factor, cfg->rope_original_max_pos, stream);
    model->gpu.logits = model->acts.output;  // (B, T, V)
    model->gpu.logits_stride = (size_t)cfg->vocab_size;
    model->gpu.norm_scratch = model->acts.norm;
    gpu_model_allocate_state(&model->gpu, B, T, shard, use_master_weights, stream);
    gpu_model_prepare_attention(&model->gpu, B, T, cfg->num_heads, cfg->num_kv_heads, HS, stream);
}

// ----------------------------------------------------------------------------
// forward, backward

// layer l's view of the activations
static Llama3LayerActs llama3_layer_acts(const Llama3* model, int l) {
    const Llama3Acts* a = &model->acts;
    const Llama3Config* cfg = &model->config;
    const int T = model->gpu.T;
    const size_t BT = (size_t)model->gpu.B * T, C = cfg->channels, NH = cfg->num_heads, HS = C / NH;
    const size_t QKV = (NH + 2 * (size_t)cfg->num_kv_heads) * HS, FFN = cfg->ffn_hidden;
    const int keep_norms = model->gpu.recompute < 2, keep_swiglu = model->gpu.recompute < 1;
    (void)T; (void)QKV;  // the rows of one attention build only
    Llama3LayerActs v;
    v.residual = l == 0 ? a->encoded : (floatX*)gpu_act_slice(a->residual3, l - 1, BT * C * sizeof(floatX));
    LLAMA3_GPU_LAYER_ACTIVATIONS(GPU_ACT_LAYER)
    return v;
}

// the sizes forward and backward are written in (ints, as the kernels take them), the settings, the stream, cuBLAS
// and the activations
#define LLAMA3_STEP_SIZES_(model) \
    const Llama3Config* cfg = &(model)->config; \
    const int B = (model)->gpu.B, T = (model)->gpu.T, BT = B * T; \
    const int L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, NKV = cfg->num_kv_heads, V = cfg->vocab_size; \
    const int HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden; \
    const float eps = cfg->norm_eps; \
    cudaStream_t stream = (model)->gpu.stream; \
    CublasContext* ctx = &(model)->gpu.cublas; \
    Llama3Acts acts = (model)->acts; \
    (void)L; (void)V; (void)HS; (void)QKV; (void)FFN; (void)eps;

// the output projection: lm_head, or wte when tied (and their gradients alike)
static floatX* llama3_lm_head(const Llama3GpuParams* p, const Llama3Config* cfg) { return cfg->tied_embeddings ? p->wte : p->lm_head; }

// the SwiGLU MLP's two input projections: fch = ln2 @ fcw^T (gate), fch2 = ln2 @ fcw2^T (up)
static void llama3_mlp_in_forward(CublasContext* ctx, const Llama3GpuLayerParams* w, const Llama3LayerActs* a, int BT, int C, int FFN) {
    matmul_forward(ctx, a->fch, a->ln2, w->fcw, NULL, BT, C, FFN, NULL);   // (B,T,FFN)
    matmul_forward(ctx, a->fch2, a->ln2, w->fcw2, NULL, BT, C, FFN, NULL); // (B,T,FFN)
}

// their backward: dln2 (B,T,C) = dfch @ fcw + dfch2 @ fcw2 (written), dfcw += dfch^T ln2, dfcw2 += dfch2^T ln2
static void llama3_mlp_in_backward(CublasContext* ctx, floatX* dln2, const Llama3GpuLayerParams* dw, const Llama3GpuLayerParams* w,
                                   const Llama3LayerActs* a, const floatX* dfch, const floatX* dfch2, int BT, int C, int FFN) {
    matmul_backward(ctx, dln2, dw->fcw, NULL, dfch, a->ln2, w->fcw, NULL, BT, C, FFN, NULL);
    // the up projection's dinp is added to the gate's (accumulate = 1), as its dweight is
    const floatX* ops[LIN_NUM_OPERANDS] = {a->ln2, w->fcw2, NULL, dln2, dw->fcw2, dfch2};
    GemmSpec dwspec = linear_dweight_spec(BT, C, FFN);
    gemm_lt(ctx, (floatX*)ops[dwspec.d], ops[dwspec.a], ops[dwspec.b], NULL, &dwspec, 1, GEMM_EPI_NONE, NULL);
    GemmSpec dispec = linear_dinp_spec(BT, C, FFN);
    gemm_lt(ctx, (floatX*)ops[dispec.d], ops[dispec.a], ops[dispec.b], NULL, &dispec, 1, GEMM_EPI_NONE, NULL);
}

// inputs, targets: host (B, T) token ids; targets may be NULL (logits only, in acts.output).
// With targets: per-token losses, their mean in model->gpu.mean_loss, and with write_dlogits the dlogits
// (scaled by dloss) in acts.output.
static void llama3_forward(void* m, const int* inputs, const int* targets, float dloss, int write_dlogits) {
    Llama3* model = (Llama3*)m;
    LLAMA3_STEP_SIZES_(model)
    Llama3GpuParams p = model->params;
    gpu_model_upload_batch(&model->gpu, inputs, targets);
    encoder_forward(acts.encoded, model->gpu.inputs, p.wte, NULL, B, T, C, stream); // (B,T,C), no position table
    // each layer ends with the next RMSNorm fused into its last residual add, so the first runs on its own
    rmsnorm_forward(llama3_layer_acts(model, 0).ln1, acts.ln1_rstd, acts.encoded, p.ln1w, eps, BT, C, stream);
    for (int l = 0; l < L; l++) {
        Llama3GpuLayerParams w = gpu_model_layer<Llama3GpuLayerParams>(&model->gpu, &model->params, l);
        Llama3LayerActs a = llama3_layer_acts(model, l);
        // attention block
#ifdef ENABLE_CUDNN
        // q|k|v (B, T, QKV) stays where the matmul writes it, rotated in place; cuDNN's grouped-query attention
        // reads the NKV key/value heads for the NH query heads; no backward follows when !write_dlogits
        matmul_forward(ctx, a.qkvr, a.ln1, w.qkvw, NULL, BT, C, QKV, NULL);                             // (B,T,QKV)
        rope_forward(a.qkvr, acts.rope_cos, acts.rope_sin, B, T, QKV, NH + NKV, HS, stream);            // q and k heads
        cudnn_attention_forward(model->gpu.cudnn, a.atty, a.att_stats, a.qkvr, B, T, NH, NKV, HS, !write_dlogits); // (B,T,C)
#else
        matmul_forward(ctx, acts.scratch_qkv, a.ln1, w.qkvw, NULL, BT, C, QKV, NULL);                   // (B,T,QKV)
        rope_forward(acts.scratch_qkv, acts.rope_cos, acts.rope_sin, B, T, QKV, NH + NKV, HS, stream);  // q and k heads
        repeat_kv_forward(acts.scratch_bt3c, acts.scratch_qkv, B, T, NH, NKV, HS, stream);              // (B,T,3C)
        attention_forward(ctx, a.atty, a.qkvr, a.att, acts.scratch_bt3c, acts.scratch_btc, B, T, C, NH); // (B,T,C)
#endif
        matmul_forward(ctx, acts.scratch_btc, a.atty, w.attprojw, NULL, BT, C, C, NULL);                 // (B,T,C)
        // residual2 = residual + attproj, ln2 = rmsnorm(residual2) in one pass
        fused_residual_rmsnorm_forward(a.residual2, a.ln2, a.ln2_rstd, a.residual, acts.scratch_btc, w.ln2w, eps, BT, C, stream);
        // MLP block
        llama3_mlp_in_forward(ctx, &w, &a, BT, C, FFN);
        swiglu_forward(a.fch_swiglu, a.fch, a.fch2, (size_t)BT * FFN, stream);                           // (B,T,FFN)
        matmul_forward(ctx, acts.scratch_btc, a.fch_swiglu, w.fcprojw, NULL, BT, FFN, C, NULL);          // (B,T,C)
        // residual3 = residual2 + fcproj, then the next RMSNorm (the next layer's ln1, or the final one)
        if (l + 1 < L) {
            Llama3GpuLayerParams wn = gpu_model_layer<Llama3GpuLayerParams>(&model->gpu, &model->params, l + 1);
            Llama3LayerActs an = llama3_layer_acts(model, l + 1);
            fused_residual_rmsnorm_forward(a.residual3, an.ln1, an.ln1_rstd, a.residual2, acts.scratch_btc, wn.ln1w, eps, BT, C,
                                           stream);
        } else {
            fused_residual_rmsnorm_forward(a.residual3, acts.lnf, acts.lnf_rstd, a.residual2, acts.scratch_btc, p.lnfw, eps, BT, C,
                                           stream);
        }
    }
    matmul_forward(ctx, acts.output, acts.lnf, llama3_lm_head(&p, cfg), NULL, BT, C, V, NULL); // (B,T,V)
    gpu_model_loss(&model->gpu, targets, acts.losses, dloss, V, write_dlogits);
}

// starts the reduction over the processes of layer l's gradients (-1: the tensors outside the layers), the
// empty lm_head of a tied model left out
static void llama3_reduce_layer(Llama3* model, MultiGpu* mg, int l) {
    GradRange ranges[LLAMA3_NUM_PARAMETER_TENSORS];
    int n = gpu_model_layer_ranges(&model->gpu, l, ranges), kept = 0;
    for (int i = 0; i < n; i++) {
        if (ranges[i].hi > ranges[i].lo) { ranges[kept++] = ranges[i]; }
    }
    gpu_model_reduce_ranges(&model->gpu, mg, ranges, kept);
}

// Gradients of the last forward (called with write_dlogits = 1) are ADDED to model->grads.
// reduce: the step's last micro-batch, so each finished layer's gradients start their reduction
// over the processes (overlapped with the rest of the backward pass).
static void llama3_backward(void* m, const int* inputs, MultiGpu* mg, int reduce) {
    Llama3* model = (Llama3*)m;
    LLAMA3_STEP_SIZES_(model)
    Llama3GpuParams p = model->params, g = model->grads;

    cudaCheck(cudaMemsetAsync(acts.dresidual, 0, (size_t)BT * C * sizeof(floatX), stream));
    // lm head (or wte when tied): dlogits (B, T, V) are in acts.output
    matmul_backward(ctx, acts.scratch_btc, llama3_lm_head(&g, cfg), NULL, acts.output, acts.lnf, llama3_lm_head(&p, cfg), NULL,
                    BT, C, V, NULL);
    rmsnorm_backward(acts.dresidual, g.lnfw, acts.fscratch, acts.scratch_btc, llama3_layer_acts(model, L - 1).residual3, p.lnfw,
                     acts.lnf_rstd, BT, C, stream);
    for (int l = L - 1; l >= 0; l--) {
        Llama3GpuLayerParams w = gpu_model_layer<Llama3GpuLayerParams>(&model->gpu, &model->params, l);
        Llama3GpuLayerParams dw = gpu_model_layer<Llama3GpuLayerParams>(&model->gpu, &model->grads, l);
        Llama3LayerActs a = llama3_layer_acts(model, l);
        // recompute what the forward pass did not keep
        if (model->gpu.recompute >= 2) {
            rmsnorm_forward(a.ln1, a.ln1_rstd, a.residual, w.ln1w, eps, BT, C, stream);
            rmsnorm_forward(a.ln2, a.ln2_rstd, a.residual2, w.ln2w, eps, BT, C, stream);
        }
        if (model->gpu.recompute >= 1) {
            swiglu_forward(a.fch_swiglu, a.fch, a.fch2, (size_t)BT * FFN, stream);
        }
        // MLP block: dresidual is the gradient of this layer's output
        matmul_backward(ctx, acts.dswiglu, dw.fcprojw, NULL, acts.dresidual, a.fch_swiglu, w.fcprojw, NULL, BT, FFN, C, NULL);
        swiglu_backward(acts.dfch, acts.dfch2, acts.dswiglu, a.fch, a.fch2, (size_t)BT * FFN, stream);
        llama3_mlp_in_backward(ctx, acts.scratch_btc, &dw, &w, &a, acts.dfch, acts.dfch2, BT, C, FFN);
        rmsnorm_backward(acts.dresidual, dw.ln2w, acts.fscratch, acts.scratch_btc, a.residual2, w.ln2w, a.ln2_rstd, BT, C, stream);
        // attention block: dresidual is now the gradient of residual2
        matmul_backward(ctx, acts.scratch_btc, dw.attprojw, NULL, acts.dresidual, a.atty, w.attprojw, NULL, BT, C, C, NULL);
#ifdef ENABLE_CUDNN
        // scratch_btc holds d(atty); dq|dk|dv (B, T, QKV) goes straight into scratch_qkv, dk and dv summed by cuDNN
        // over each group's query heads
        cudnn_attention_backward(model->gpu.cudnn, acts.scratch_qkv, acts.scratch_btc, a.qkvr, a.atty, a.att_stats, B, T, NH, NKV, HS);
#else
        attention_backward(ctx, acts.scratch_bt3c, acts.dqkvr, acts.datt, acts.dy, acts.scratch_btc, a.qkvr, a.att, B, T, C, NH);
        repeat_kv_backward(acts.scratch_qkv, acts.scratch_bt3c, B, T, NH, NKV, HS, stream);              // (B,T,QKV)
#endif
        rope_backward(acts.scratch_qkv, acts.rope_cos, acts.rope_sin, B, T, QKV, NH + NKV, HS, stream);
        matmul_backward(ctx, acts.scratch_btc, dw.qkvw, NULL, acts.scratch_qkv, a.ln1, w.qkvw, NULL, BT, C, QKV, NULL);
        rmsnorm_backward(acts.dresidual, dw.ln1w, acts.fscratch, acts.scratch_btc, a.residual, w.ln1w, a.ln1_rstd, BT, C, stream);
        if (reduce) { llama3_reduce_layer(model, mg, l); }
    }
    token_groups_build(&model->gpu.token_groups, inputs);
    encoder_backward(g.wte, NULL, acts.dresidual, &model->gpu.token_groups, &model->gpu.token_groups_device, B, T, C, stream);
    if (reduce) { llama3_reduce_layer(model, mg, -1); }
}

// ----------------------------------------------------------------------------
// what Llama 3 brings to llmc/cuda/gpu_trainer.cuh's GpuTrainer (and through it to llmc/trainer.h's loop): its
// calls, each taking the Llama3 struct, as one table

// no -ge: SwiGLU has no cuBLASLt epilogue here; -op muon: every layer's qkvw, attprojw, fcw, fcw2, fcprojw (use_muon
// NULL: gpu_model_use_muon_on_layers)
static const GpuModelCalls llama3_calls = {
    .init = llama3_init, .use_muon = NULL, .allocate_state = llama3_allocate_state,
    .set_gelu_fusion = NULL, .forward = llama3_forward, .backward = llama3_backward,
};

// ----------------------------------------------------------------------------
// main

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    Llama3 model;
    return gpu_trainer_main(argc, argv, "train_llama3cu",
                            "train_llama3cu: Llama 3 training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)",
                            &LLAMA3_FAMILY, &model, &llama3_calls, &model.gpu);
}
#endif // LLMC_NO_MAIN
