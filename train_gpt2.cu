/*
train_gpt2.cu: GPT-2 training on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The story of one training step, top to bottom:
    gpt2_forward      encoder -> L x (layernorm, attention, residual, layernorm, MLP, residual) -> logits
                      -> fused classifier (loss and dlogits in one pass, no probabilities stored)
    gpt2_backward     the same layers in reverse; each finished layer's gradients start their
                      NCCL reduction on a second stream while the next layer's backward runs
    gpu_model_update  global gradient norm, clipping, AdamW (fp32 master weights, stochastic
                      rounding to bf16); with -op muon, Muon on the blocks' 2-D weights instead
                      (llmc/cuda/muon.cuh; under ZeRO-1 each rank updates whole matrices and broadcasts
                      them); then the ZeRO-1 all-gather of the updated parameters

The kernels live in the llmc .cuh headers, one concern per file. The training loop around them (command
line, data, evaluation, sampling, checkpoints and resume, signals, clipping and the skip rule) is
llmc/trainer.h's trainer_run, the same loop the CPU trainer runs. What every GPU trainer does on the host
(the flat parameter, gradient and optimizer buffers, ZeRO-1, AdamW and Muon, NCCL, the training state, the
start-up) is llmc/cuda/gpu_trainer.cuh's; this file brings GPT-2 to it: its tensor table, activations,
forward and backward, and its calls (gpt2_calls, at the end).
Precision is chosen at build time: make train_gpt2cu PRECISION=BF16 (default) or FP32.
make train_gpt2cu USE_CUDNN=1 (BF16) runs attention as cuDNN flash attention (llmc/cuda/cudnn_att.h): no
(B, NH, T, T) matrix is stored, only (B, NH, T) softmax statistics per layer (never run on a GPU yet).
Activations and parameters are floatX (bf16 or fp32); statistics, losses, optimizer state fp32.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmc/utils.h"
#include "llmc/gpt2.h"
#include "llmc/checkpoint.h"
#include "llmc/zero.h"
#include "llmc/mfu.h"
#include "llmc/trainer.h"  // the training loop, its flags (args.h), data, tokenizer, sampler, schedules, logs
#include "llmc/cuda/cuda_common.cuh"
#include "llmc/cuda/cublas_common.cuh"
#include "llmc/cuda/encoder.cuh"
#include "llmc/cuda/layernorm.cuh"
#include "llmc/cuda/matmul.cuh"
#include "llmc/cuda/attention.cuh"
#include "llmc/cuda/gelu.cuh"
#include "llmc/cuda/fused_classifier.cuh"
#include "llmc/cuda/global_norm.cuh"
#include "llmc/cuda/adamw.cuh"
#include "llmc/cuda/muon.cuh"
#include "llmc/cuda/multi_gpu.cuh"
#include "llmc/cuda/gpu_trainer.cuh"  // the flat buffers, ZeRO-1, the update, NCCL, the training state, start-up

// ----------------------------------------------------------------------------
// GPT-2 model definition

// the 16 parameter tensors in checkpoint order as floatX views, and LayerParams: one layer's 12 of them
// (llmc/gpt2.h has the table: wte (Vp,C), wpe (maxT,C), ln1w (L,C), qkvw (L,3C,C), ...), pointed into the device
// buffers by gpu_model_point, a layer's view made by gpu_model_layer (llmc/cuda/gpu_trainer.cuh)
typedef struct { GPT2_PARAMETER_TENSORS(TENSOR_FIELD, floatX) } ParameterTensors;
typedef struct { GPT2_LAYER_PARAMETER_TENSORS(TENSOR_FIELD, floatX) } LayerParams;

// The activations, in buffer order: rows X(type, name, per_layer, per_token, has_grad), the CPU's rows
// (llmc/gpt2.h GPT2_ACTIVATION_TENSORS) with the element type in front (llmc/cuda/gpu_trainer.cuh GPU_ACT_*).
// A tensor is (B, T, per_token), or (L, B, T, per_token) when per_layer; keep_ln and keep_gelu are 0 when the
// backward recomputes those (-r 2: ln1, ln2; -r 1: fch_gelu), so all layers share one slice. has_grad: the backward
// needs the tensor's gradient (the GPU writes gradients into the scratch rows; 1 where it does not distinguish).
// Sizes in C, NH, T, Vp. The work buffers that do not grow with B x T follow the table (gpt2_point_activations).
#define GPT2_GPU_ACTIVATIONS(X) \
    X(floatX, encoded,      0, C,     1) /* token + position embeddings, the first layer's input */ \
    GPT2_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, lnf,          0, C,     1) /* final layernorm */ \
    X(float,  lnf_mean,     0, 1,     0) \
    X(float,  lnf_rstd,     0, 1,     0) \
    X(float,  losses,       0, 1,     1) \
    X(floatX, output,       0, Vp,    1) /* logits, then dlogits */ \
    X(floatX, scratch_bt4c, 0, 4 * C, 1) /* qkv / dfch */ \
    X(floatX, scratch_btc,  0, C,     1) \
    /* backward only */ \
    X(floatX, dresidual,    0, C,     0) /* gradient of the residual stream */ \
    GPT2_GPU_ATTENTION_BACKWARD_BUFFERS(X)

#define GPT2_GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, ln1,       keep_ln,   C,     1) /* layernorm of the layer's input */ \
    X(float,  ln1_mean,  1,         1,     0) \
    X(float,  ln1_rstd,  1,         1,     0) \
    X(floatX, qkvr,      1,         3 * C, 1) /* (3, B, NH, T, HS) q, k, v head-major; with cuDNN (B, T, 3C) */ \
    GPT2_GPU_ATTENTION_ACTIVATIONS(X) \
    X(floatX, atty,      1,         C,     1) /* attention output, before its projection */ \
    X(floatX, residual2, 1,         C,     1) /* input + attention projection */ \
    X(floatX, ln2,       keep_ln,   C,     1) \
    X(float,  ln2_mean,  1,         1,     0) \
    X(float,  ln2_rstd,  1,         1,     0) \
    X(floatX, fch,       1,         4 * C, 1) /* input of the GELU */ \
    X(floatX, fch_gelu,  keep_gelu, 4 * C, 1) \
    X(floatX, residual3, 1,         C,     1) /* residual2 + MLP output, the layer's output */

#ifdef ENABLE_CUDNN
// cuDNN keeps (B, NH, T) fp32 softmax statistics (log-sum-exp of each row) per layer instead of
// the attention matrix, and its backward needs no buffers of ours
#define GPT2_GPU_ATTENTION_ACTIVATIONS(X) X(float, att_stats, 1, NH, 0)
#define GPT2_GPU_ATTENTION_BACKWARD_BUFFERS(X)
#else
#define GPT2_GPU_ATTENTION_ACTIVATIONS(X) X(floatX, att, 1, NH * T, 1) /* (B, NH, T, T) */
#define GPT2_GPU_ATTENTION_BACKWARD_BUFFERS(X) \
    X(floatX, dqkvr, 0, 3 * C,  0) /* (3, B, NH, T, HS) */ \
    X(floatX, datt,  0, NH * T, 0) /* (B, NH, T, T) */ \
    X(floatX, dy,    0, C,      0) /* (B, NH, T, HS) */
#endif

typedef struct {
    GPT2_GPU_ACTIVATIONS(GPU_ACT_FIELD)
    float* fscratch;  // column-sum partials of the bias and layernorm gradients
    float* norm;      // (1 + GLOBAL_NORM_BLOCKS) the squared gradient norm and its partial sums
} ActivationTensors;

// one layer's activations: residual is its input (encoded, or the previous layer's residual3),
// the others are layer l's slices (without the L)
typedef struct { floatX* residual; GPT2_GPU_LAYER_ACTIVATIONS(GPU_ACT_FIELD) } LayerActs;

// Points the activations for micro-batches of B x T at recompute level -r into memory (NULL:
// only counts), each slice 256-byte aligned, then the work buffers; returns the bytes they take.
static size_t gpt2_point_activations(ActivationTensors* a, char* memory, const GPT2Config* cfg, int B, int T, int recompute) {
    const size_t BT = (size_t)B * T, C = cfg->channels, NH = cfg->num_heads, L = cfg->num_layers, Vp = cfg->padded_vocab_size;
    const int keep_ln = recompute < 2, keep_gelu = recompute < 1;
    size_t offset = 0;
    GPT2_GPU_ACTIVATIONS(GPU_ACT_POINT)
    const size_t chunks = BIAS_GRAD_ROW_CHUNKS > LAYERNORM_ROW_CHUNKS ? BIAS_GRAD_ROW_CHUNKS : LAYERNORM_ROW_CHUNKS;
    a->fscratch = (float*)gpu_act_point(memory, &offset, 1, 4 * C * chunks * sizeof(float));
    a->norm = (float*)gpu_act_point(memory, &offset, 1, (1 + GLOBAL_NORM_BLOCKS) * sizeof(float));
    return offset;
}

// GPT-2 on the GPU: its config, named views of the parameters and gradients, activations (recomputed at -r 1: GELU,
// -r 2: GELU + layernorms), and its GpuModel (llmc/cuda/gpu_trainer.cuh: the tensor table, the flat parameters and
// gradients, the optimizer state, the batch buffers, cuBLAS, the stream)
typedef struct {
    GPT2Config config;
    ParameterTensors params;   // views into gpu.params_memory
    ParameterTensors grads;    // views into gpu.grads_memory
    ActivationTensors acts;    // in gpu.acts_memory
    int gelu_fusion;           // -ge 1: GELU fused into the cuBLASLt epilogues (forward and backward)
    GpuModel gpu;
} GPT2;

// the model of this config: its GpuModel (gpu_model_init) with the views of its parameters and gradients
// (llmc/cuda/gpu_trainer.cuh's gpu_model_build fills the parameters: -e's checkpoint, or llmc/gpt2.h's init)
static void gpt2_init(void* m, const void* config) {
    GPT2* model = (GPT2*)m;
    memset(model, 0, sizeof(*model));
    model->config = *(const GPT2Config*)config;
    const GPT2Config* cfg = &model->config;
    gpu_model_init(&model->gpu, &GPT2_FAMILY, cfg, &model->params, &model->grads, cfg->num_layers, cfg->channels,
                   cfg->vocab_size, cfg->max_seq_len);
}

// -op muon: Muon on the blocks' 2-D weights (the 4 L matrices of muon_plan) with these settings; owners = the
// number of processes under ZeRO-1 (each rank updates whole matrices, balanced by size), else 1. Call before
// gpt2_allocate_state.
static void gpt2_use_muon(void* m, const MuonConfig* settings, int owners, int rank) {
    GPT2* model = (GPT2*)m;
    MuonMatrix* mats = (MuonMatrix*)mallocCheck(4 * (size_t)model->config.num_layers * sizeof(MuonMatrix));
    size_t state_size = 0;
    int count = muon_plan(&model->config, owners, rank, mats, &state_size);
    gpu_model_use_muon(&model->gpu, settings, mats, count, state_size);
}

// activations for micro-batches of B x T (T at most the model's maxT: the callers check it), optimizer state for
// the shard, streams and handles
static void gpt2_allocate_state(void* m, int B, int T, int recompute, ZeroShard shard, int use_master_weights,
                                cudaStream_t stream) {
    GPT2* model = (GPT2*)m;
    const GPT2Config* cfg = &model->config;
    if (cfg->channels % cfg->num_heads != 0 || cfg->channels % 8 != 0) {
        llmc_die("model: channels C = %d must be a multiple of 8 and of the head count %d", cfg->channels, cfg->num_heads);
    }
#ifdef ENABLE_CUDNN
    const char* why = cudnn_att_shape_error(B, T, cfg->num_heads, cfg->num_heads, cfg->channels / cfg->num_heads);
    if (why != NULL) { llmc_die("-b %d -t %d with %d heads of size %d: cuDNN attention cannot run it: %s", B, T,
                                cfg->num_heads, cfg->channels / cfg->num_heads, why); }
#endif
    size_t bytes = gpt2_point_activations(&model->acts, NULL, cfg, B, T, recompute);
    char* memory = gpu_model_allocate_activations(&model->gpu, bytes, recompute, B * T, cfg->padded_vocab_size);
    gpt2_point_activations(&model->acts, memory, cfg, B, T, recompute);
    model->gpu.logits = model->acts.output;  // (B, T, Vp)
    model->gpu.logits_stride = (size_t)cfg->padded_vocab_size;
    model->gpu.norm_scratch = model->acts.norm;
    gpu_model_allocate_state(&model->gpu, B, T, shard, use_master_weights, stream);
    gpu_model_prepare_attention(&model->gpu, B, T, cfg->num_heads, cfg->num_heads, cfg->channels / cfg->num_heads, stream);
}

// ----------------------------------------------------------------------------
// forward, backward, update

// layer l's view of the activations
static LayerActs gpt2_layer_acts(const GPT2* model, int l) {
    const ActivationTensors* a = &model->acts;
    const int T = model->gpu.T;
    const size_t BT = (size_t)model->gpu.B * T, C = model->config.channels, NH = model->config.num_heads;
    const int keep_ln = model->gpu.recompute < 2, keep_gelu = model->gpu.recompute < 1;
    (void)T;  // the explicit attention's rows only
    LayerActs v;
    v.residual = l == 0 ? a->encoded : (floatX*)gpu_act_slice(a->residual3, l - 1, BT * C * sizeof(floatX));
    GPT2_GPU_LAYER_ACTIVATIONS(GPU_ACT_LAYER)
    return v;
}

// inputs, targets: host (B, T) token ids; targets may be NULL (logits only, in acts.output).
// With targets: per-token losses, their mean in model->gpu.mean_loss, and dlogits (scaled by dloss) in acts.output.
static void gpt2_forward(void* m, const int* inputs, const int* targets, float dloss, int write_dlogits) {
    GPT2* model = (GPT2*)m;
    const int B = model->gpu.B, T = model->gpu.T;
    const int L = model->config.num_layers, C = model->config.channels, NH = model->config.num_heads;
    const int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    const int BT = B * T;
    cudaStream_t stream = model->gpu.stream;
    CublasContext* ctx = &model->gpu.cublas;
    ParameterTensors p = model->params;
    ActivationTensors acts = model->acts;
    gpu_model_upload_batch(&model->gpu, inputs, targets);
    encoder_forward(acts.encoded, model->gpu.inputs, p.wte, p.wpe, B, T, C, stream); // (B,T,C)
    // each layer ends with the next layernorm fused into its last residual add, so the first
    // layernorm runs on its own
    layernorm_forward(gpt2_layer_acts(model, 0).ln1, acts.ln1_mean, acts.ln1_rstd, acts.encoded, p.ln1w, p.ln1b, BT, C, stream);
    for (int l = 0; l < L; l++) {
        LayerParams w = gpu_model_layer<LayerParams>(&model->gpu, &model->params, l);
        LayerActs a = gpt2_layer_acts(model, l);
        // attention block
#ifdef ENABLE_CUDNN
        // qkv (B, T, 3, NH, HS) stays where the matmul writes it; no backward follows when !write_dlogits
        matmul_forward(ctx, a.qkvr, a.ln1, w.qkvw, w.qkvb, BT, C, 3 * C, NULL);
        cudnn_attention_forward(model->gpu.cudnn, a.atty, a.att_stats, a.qkvr, B, T, NH, NH, C / NH, !write_dlogits);
#else
        matmul_forward(ctx, acts.scratch_bt4c, a.ln1, w.qkvw, w.qkvb, BT, C, 3 * C, NULL); // (B,T,3C)
        attention_forward(ctx, a.atty, a.qkvr, a.att, acts.scratch_bt4c, acts.scratch_btc, B, T, C, NH);
#endif
        matmul_forward(ctx, acts.scratch_btc, a.atty, w.attprojw, w.attprojb, BT, C, C, NULL); // (B,T,C)
        // residual2 = residual + attproj, ln2 = layernorm(residual2) in one pass
        fused_residual_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual, acts.scratch_btc, w.ln2w, w.ln2b,
                               BT, C, stream);
        // MLP block
        if (model->gelu_fusion) {
            matmul_forward(ctx, a.fch_gelu, a.ln2, w.fcw, w.fcb, BT, C, 4 * C, a.fch); // (B,T,4C)
        } else {
            matmul_forward(ctx, a.fch, a.ln2, w.fcw, w.fcb, BT, C, 4 * C, NULL);
            gelu_forward(a.fch_gelu, a.fch, (size_t)BT * 4 * C, stream);
        }
        matmul_forward(ctx, acts.scratch_btc, a.fch_gelu, w.fcprojw, w.fcprojb, BT, 4 * C, C, NULL); // (B,T,C)
        // residual3 = residual2 + fcproj, then the next layernorm (the next layer's ln1, or the final one)
        if (l + 1 < L) {
            LayerParams wn = gpu_model_layer<LayerParams>(&model->gpu, &model->params, l + 1);
            LayerActs an = gpt2_layer_acts(model, l + 1);
            fused_residual_forward(a.residual3, an.ln1, an.ln1_mean, an.ln1_rstd, a.residual2, acts.scratch_btc,
                                   wn.ln1w, wn.ln1b, BT, C, stream);
        } else {
            fused_residual_forward(a.residual3, acts.lnf, acts.lnf_mean, acts.lnf_rstd, a.residual2, acts.scratch_btc,
                                   p.lnfw, p.lnfb, BT, C, stream);
        }
    }
    matmul_forward(ctx, acts.output, acts.lnf, p.wte, NULL, BT, C, Vp, NULL); // (B,T,Vp)
    gpu_model_loss(&model->gpu, targets, acts.losses, dloss, V, write_dlogits);
}

// Gradients of the last forward (called with write_dlogits = 1) are ADDED to model->grads.
// reduce: this is the last micro-batch of the step, so each finished layer's gradients start
// their reduction over the processes (overlapped with the rest of the backward pass).
static void gpt2_backward(void* m, const int* inputs, MultiGpu* mg, int reduce) {
    GPT2* model = (GPT2*)m;
    const int B = model->gpu.B, T = model->gpu.T;
    const int L = model->config.num_layers, C = model->config.channels, NH = model->config.num_heads;
    const int Vp = model->config.padded_vocab_size;
    const int BT = B * T;
    cudaStream_t stream = model->gpu.stream;
    CublasContext* ctx = &model->gpu.cublas;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors acts = model->acts;
    GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];

    cudaCheck(cudaMemsetAsync(acts.dresidual, 0, (size_t)BT * C * sizeof(floatX), stream));
    // lm head (weights tied with wte): dlogits (B, T, Vp) are in acts.output
    matmul_backward(ctx, acts.scratch_btc, g.wte, NULL, acts.output, acts.lnf, p.wte, acts.fscratch, BT, C, Vp, NULL);
    layernorm_backward(acts.dresidual, g.lnfw, g.lnfb, acts.fscratch, acts.scratch_btc, gpt2_layer_acts(model, L - 1).residual3,
                       p.lnfw, acts.lnf_mean, acts.lnf_rstd, BT, C, stream);
    for (int l = L - 1; l >= 0; l--) {
        LayerParams w = gpu_model_layer<LayerParams>(&model->gpu, &model->params, l);
        LayerParams dw = gpu_model_layer<LayerParams>(&model->gpu, &model->grads, l);
        LayerActs a = gpt2_layer_acts(model, l);
        // recompute what the forward pass did not keep
        if (model->gpu.recompute >= 2) {
            layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, w.ln1w, w.ln1b, BT, C, stream);
            layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, BT, C, stream);
        }
        if (model->gpu.recompute >= 1) {
            gelu_forward(a.fch_gelu, a.fch, (size_t)BT * 4 * C, stream);
        }
        // MLP block: dresidual is the gradient of this layer's output
        matmul_backward(ctx, acts.scratch_bt4c, dw.fcprojw, dw.fcprojb, acts.dresidual, a.fch_gelu, w.fcprojw, acts.fscratch,
                        BT, 4 * C, C, model->gelu_fusion ? a.fch : NULL);
        if (!model->gelu_fusion) {
            gelu_backward_inplace(acts.scratch_bt4c, a.fch, (size_t)BT * 4 * C, stream);
        }
        matmul_backward(ctx, acts.scratch_btc, dw.fcw, dw.fcb, acts.scratch_bt4c, a.ln2, w.fcw, acts.fscratch, BT, C, 4 * C, NULL);
        layernorm_backward(acts.dresidual, dw.ln2w, dw.ln2b, acts.fscratch, acts.scratch_btc, a.residual2, w.ln2w,
                           a.ln2_mean, a.ln2_rstd, BT, C, stream);
        // attention block: dresidual is now the gradient of residual2
        matmul_backward(ctx, acts.scratch_btc, dw.attprojw, dw.attprojb, acts.dresidual, a.atty, w.attprojw, acts.fscratch,
                        BT, C, C, NULL);
#ifdef ENABLE_CUDNN
        // scratch_btc holds d(atty); dqkv (B, T, 3, NH, HS) goes straight into scratch_bt4c
        cudnn_attention_backward(model->gpu.cudnn, acts.scratch_bt4c, acts.scratch_btc, a.qkvr, a.atty, a.att_stats, B, T, NH, NH, C / NH);
#else
        attention_backward(ctx, acts.scratch_bt4c, acts.dqkvr, acts.datt, acts.dy, acts.scratch_btc, a.qkvr, a.att, B, T, C, NH);
#endif
        matmul_backward(ctx, acts.scratch_btc, dw.qkvw, dw.qkvb, acts.scratch_bt4c, a.ln1, w.qkvw, acts.fscratch, BT, C, 3 * C, NULL);
        layernorm_backward(acts.dresidual, dw.ln1w, dw.ln1b, acts.fscratch, acts.scratch_btc, a.residual, w.ln1w,
                           a.ln1_mean, a.ln1_rstd, BT, C, stream);
        if (reduce) {
            int n = gpu_model_layer_ranges(&model->gpu, l, ranges);
            gpu_model_reduce_ranges(&model->gpu, mg, ranges, n);
        }
    }
    token_groups_build(&model->gpu.token_groups, inputs);
    encoder_backward(g.wte, g.wpe, acts.dresidual, &model->gpu.token_groups, &model->gpu.token_groups_device, B, T, C, stream);
    if (reduce) {
        int n = gpu_model_layer_ranges(&model->gpu, -1, ranges);
        gpu_model_reduce_ranges(&model->gpu, mg, ranges, n);
    }
}

// ----------------------------------------------------------------------------
// what GPT-2 brings to llmc/cuda/gpu_trainer.cuh's GpuTrainer (and through it to llmc/trainer.h's loop): its
// calls, each taking the GPT2 struct, as one table

static void gpt2_set_gelu_fusion(void* model, int on) { ((GPT2*)model)->gelu_fusion = on; }

static const GpuModelCalls gpt2_calls = {
    .init = gpt2_init, .use_muon = gpt2_use_muon, .allocate_state = gpt2_allocate_state,
    .set_gelu_fusion = gpt2_set_gelu_fusion, .forward = gpt2_forward, .backward = gpt2_backward,
};

// ----------------------------------------------------------------------------
// main

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    GPT2 model;
    return gpu_trainer_main(argc, argv, "train_gpt2cu",
                            "train_gpt2cu: GPT-2 training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)",
                            &GPT2_FAMILY, &model, &gpt2_calls, &model.gpu);
}
#endif // LLMC_NO_MAIN
