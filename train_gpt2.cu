/*
train_gpt2.cu: GPT-2 training on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The story of one training step, top to bottom:
    gpt2_forward      encoder -> L x (layernorm, attention, residual, layernorm, MLP, residual) -> logits
                      -> fused classifier (loss and dlogits in one pass, no probabilities stored)
    gpt2_backward     the same layers in reverse; each finished layer's gradients start their
                      NCCL reduction on a second stream while the next layer's backward runs
    gpt2_update       global gradient norm, clipping, AdamW (fp32 master weights, stochastic
                      rounding to bf16); with -op muon, Muon on the blocks' 2-D weights instead
                      (llmc/cuda/muon.cuh; under ZeRO-1 each rank updates whole matrices and broadcasts
                      them); then the ZeRO-1 all-gather of the updated parameters

The kernels live in the llmc .cuh headers, one concern per file. The training loop around them (command
line, data, evaluation, sampling, checkpoints and resume, signals, clipping and the skip rule) is
llmc/trainer.h's trainer_run, the same loop the CPU trainer runs; this file brings its kernels, device
memory and NCCL to it (GpuTrainer, at the end).
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
#include "llmc/model_config.h"
#include "llmc/checkpoint.h"
#include "llmc/zero.h"
#include "llmc/init.h"
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

// ----------------------------------------------------------------------------
// GPT-2 model definition

// the 16 parameter tensors in checkpoint order, and LayerParams: one layer's 12 of them
// (llmc/model_config.h has the table: wte (Vp,C), wpe (maxT,C), ln1w (L,C), qkvw (L,3C,C), ...)
GPT2_DECLARE_PARAMETER_TENSORS(ParameterTensors, LayerParams, floatX)

// The activations, in buffer order: X(type, name, layers, count). A tensor is `layers` slices of
// `count` elements, layer l's slice at (l % layers) * count: layers = 1 for the tensors outside
// the layers and for a buffer that all layers share because it is recomputed (-r 1: fch_gelu;
// -r 2: also ln1, ln2). A tensor of 0 elements is not used by this build (its pointer is NULL).
// Sizes are written in B, T, BT = B*T, C, NH, L, Vp and ln_layers, gelu_layers.
#define GPU_ACTIVATIONS(X) \
    X(floatX, encoded,      1, BT * C)      /* (B, T, C) */ \
    GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, lnf,          1, BT * C)      /* (B, T, C) */ \
    X(float,  lnf_mean,     1, BT) \
    X(float,  lnf_rstd,     1, BT) \
    X(float,  losses,       1, BT) \
    X(floatX, output,       1, BT * Vp)     /* (B, T, Vp) logits, then dlogits */ \
    X(floatX, scratch_bt4c, 1, BT * 4 * C)  /* (B, T, 4C) qkv / dfch */ \
    X(floatX, scratch_btc,  1, BT * C)      /* (B, T, C) */ \
    /* backward only */ \
    X(floatX, dresidual,    1, BT * C)      /* (B, T, C) gradient of the residual stream */ \
    GPU_ATTENTION_BACKWARD_BUFFERS(X) \
    /* column-sum partials of bias and layernorm gradients */ \
    X(float,  fscratch,     1, 4 * C * (BIAS_GRAD_ROW_CHUNKS > LAYERNORM_ROW_CHUNKS ? BIAS_GRAD_ROW_CHUNKS : LAYERNORM_ROW_CHUNKS)) \
    X(float,  norm,         1, 1 + GLOBAL_NORM_BLOCKS) /* squared gradient norm and its partial sums */

#define GPU_LAYER_ACTIVATIONS(X) \
    X(floatX, ln1,       ln_layers,   BT * C)      /* (L, B, T, C) layernorm of the layer's input */ \
    X(float,  ln1_mean,  L,           BT)          /* (L, B, T) */ \
    X(float,  ln1_rstd,  L,           BT) \
    X(floatX, qkvr,      L,           BT * 3 * C)  /* (L, 3, B, NH, T, HS) q, k, v head-major; with cuDNN (L, B, T, 3C) */ \
    GPU_ATTENTION_ACTIVATIONS(X) \
    X(floatX, atty,      L,           BT * C)      /* (L, B, T, C) attention output, before its projection */ \
    X(floatX, residual2, L,           BT * C)      /* (L, B, T, C) input + attention projection */ \
    X(floatX, ln2,       ln_layers,   BT * C) \
    X(float,  ln2_mean,  L,           BT) \
    X(float,  ln2_rstd,  L,           BT) \
    X(floatX, fch,       L,           BT * 4 * C)  /* (L, B, T, 4C) input of the GELU */ \
    X(floatX, fch_gelu,  gelu_layers, BT * 4 * C) \
    X(floatX, residual3, L,           BT * C)      /* (L, B, T, C) residual2 + MLP output, the layer's output */

#ifdef ENABLE_CUDNN
// cuDNN keeps (B, NH, T) fp32 softmax statistics (log-sum-exp of each row) per layer instead of
// the attention matrix (layers 256-byte aligned), and its backward needs no buffers of ours
#define GPU_ATTENTION_ACTIVATIONS(X) X(float, att_stats, L, cudnn_att_stats_layer_stride(B, T, (int)NH))
#define GPU_ATTENTION_BACKWARD_BUFFERS(X)
#else
#define GPU_ATTENTION_ACTIVATIONS(X) X(floatX, att, L, B * NH * T * T) /* (L, B, NH, T, T) */
#define GPU_ATTENTION_BACKWARD_BUFFERS(X) \
    X(floatX, dqkvr, 1, BT * 3 * C)     /* (3, B, NH, T, HS) */ \
    X(floatX, datt,  1, B * NH * T * T) /* (B, NH, T, T) */ \
    X(floatX, dy,    1, BT * C)         /* (B, NH, T, HS) */
#endif

#define GPU_ACT_FIELD_(type, name, layers, count) type* name;
typedef struct { GPU_ACTIVATIONS(GPU_ACT_FIELD_) } ActivationTensors;

// one layer's activations: residual is its input (encoded, or the previous layer's residual3),
// the others are layer l's slices (without the L)
typedef struct { floatX* residual; GPU_LAYER_ACTIVATIONS(GPU_ACT_FIELD_) } LayerActs;

#define GPU_ACT_POINT_(type, name, layers, count) { \
        size_t bytes = (size_t)(layers) * (count) * sizeof(type); \
        a->name = memory != NULL && bytes > 0 ? (type*)(memory + offset) : NULL; \
        offset += (bytes + 255) / 256 * 256; \
    }
// Points the activations for micro-batches of B x T at recompute level -r into memory (NULL:
// only counts), each tensor 256-byte aligned; returns the bytes they take.
static size_t point_activations(ActivationTensors* a, char* memory, const GPT2Config* cfg, int B, int T, int recompute) {
    size_t BT = (size_t)B * T, C = cfg->channels, NH = cfg->num_heads, L = cfg->num_layers, Vp = cfg->padded_vocab_size;
    size_t ln_layers = recompute >= 2 ? 1 : L, gelu_layers = recompute >= 1 ? 1 : L;
    size_t offset = 0;
    GPU_ACTIVATIONS(GPU_ACT_POINT_)
    return offset;
}

typedef struct {
    GPT2Config config;
    size_t param_sizes[GPT2_NUM_PARAMETER_TENSORS];
    size_t param_offsets[GPT2_NUM_PARAMETER_TENSORS];
    size_t num_parameters;
    ParameterTensors params;
    floatX* params_memory;     // padded for the ZeRO-1 all-gather (zero_padded_size)
    ParameterTensors grads;
    floatX* grads_memory;
    float* master_weights;     // fp32 copy of this rank's shard (bf16 builds with -w 1), else NULL
    float* init_params;        // host fp32 parameters as gpt2_build read or initialised them, until
                               // gpt2_allocate_state has made the master weights from them (then NULL)
    float* m_memory;           // AdamW moments of this rank's shard
    float* v_memory;
    // -op muon: the blocks' 2-D weights are Muon's (llmc/cuda/muon.cuh); AdamW's m, v, master there go unused
    int use_muon;
    MuonConfig muon;
    float peak_lr;             // -l: the Muon lr of a step is muon.lr * (the step's lr / peak_lr)
    MuonMatrix* muon_mats;     // the 4 L matrices and their owners
    int muon_count;
    size_t muon_state_size;    // elements of Muon state this rank holds (the matrices it owns)
    float* muon_buf;           // momentum of the matrices this rank owns
    float* muon_master;        // their fp32 master weights (bf16 builds with -w 1), else NULL
    MuonWorkspace muon_ws;
    ActivationTensors acts;
    void* acts_memory;
    size_t acts_bytes;
    int B, T;                  // the activations' batch size and sequence length
    int recompute;             // -r: 0 none, 1 GELU, 2 GELU + layernorms
    int gelu_fusion;           // -ge 1: GELU fused into the cuBLASLt epilogues (forward and backward)
    int* inputs;               // (B, T) device
    int* targets;              // (B, T) device
    TokenGroups token_groups;  // host bookkeeping of the encoder backward
    TokenGroupsDevice token_groups_device;
    float* losses_host;        // (B, T) pinned
    float mean_loss;
    float* norm_host;          // pinned scalar
    CublasContext cublas;
#ifdef ENABLE_CUDNN
    CudnnAttention* cudnn;     // cuDNN handle, workspace and the cached attention graphs
#endif
    cudaStream_t stream;
} GPT2;

static void gpt2_init_common(GPT2* model, const GPT2Config* cfg) {
    memset(model, 0, sizeof(*model));
    model->config = *cfg;
    gpt2_parameter_sizes(model->param_sizes, cfg);
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) {
        model->param_offsets[i] = off;
        off += model->param_sizes[i];
    }
    model->num_parameters = off;
    model->mean_loss = -1.0f;
}

// parameters and gradients on the device; padded so that the ZeRO-1 all-gather stays in bounds
static void gpt2_allocate_parameters(GPT2* model, size_t padded) {
    size_t bytes = padded * sizeof(floatX);
    model->params_memory = (floatX*)cudaMallocCheck(bytes);
    model->grads_memory = (floatX*)cudaMallocCheck(bytes);
    cudaCheck(cudaMemset(model->params_memory, 0, bytes));
    cudaCheck(cudaMemset(model->grads_memory, 0, bytes));
    gpt2_point_parameters(&model->params, model->params_memory, &model->config);
    gpt2_point_parameters(&model->grads, model->grads_memory, &model->config);
}

// host fp32 parameters -> device floatX (round to nearest)
static void gpt2_upload_parameters(GPT2* model, const float* host_params) {
    size_t n = model->num_parameters;
    floatX* staging = (floatX*)mallocCheck(n * sizeof(floatX));
    floatX_from_float_host(staging, host_params, n);
    cudaCheck(cudaMemcpy(model->params_memory, staging, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(staging);
}

// device floatX parameters -> host fp32 (exact)
static void gpt2_download_parameters(const GPT2* model, float* host_params) {
    size_t n = model->num_parameters;
    floatX* staging = (floatX*)mallocCheck(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(staging, model->params_memory, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float_from_floatX_host(host_params, staging, n);
    free(staging);
}

// -e: a checkpoint path or a model descriptor (dN, gpt2:dN, gpt3:cN)
// zero_stage, nproc: the parameters are padded for the ZeRO-1 all-gather
// The device gets the parameters rounded to floatX; the fp32 values stay in model->init_params
// for the master weights (gpt2_allocate_state).
static void gpt2_build(GPT2* model, const char* load, int zero_stage, int nproc) {
    GPT2Config cfg;
    const char* why = "";
    int kind = model_config_from_descriptor(load, &cfg, &why);
    if (kind < 0) { llmc_die("-e %s: %s", load, why); }
    FILE* f = NULL;
    int version = 0;
    if (kind != 1) { f = checkpoint_open(load, &cfg, &version); }
    gpt2_init_common(model, &cfg);
    gpt2_allocate_parameters(model, zero_padded_size(model->num_parameters, zero_stage, nproc));
    float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
    if (kind == 1) {
        gpt2_init_params_from_scratch(host, &model->config, TRAINER_INIT_SEED);  // llmc/init.h, as train_gpt2.c
    } else {
        model_file_read_params(f, load, version, host, model->num_parameters);
        fcloseCheck(f, load);
    }
    gpt2_upload_parameters(model, host);
    model->init_params = host;
}

// The fp32 master weights of this rank's shard, from the fp32 parameters on the host (a checkpoint's
// values, or the from-scratch init), not from the floatX copy on the device: in bf16 builds that copy
// is rounded, and training would start from the rounded weights instead of the checkpoint's.
static void gpt2_init_master_weights(GPT2* model, const float* host_params, ZeroShard shard) {
    if (shard.size == 0) { return; }
    if (shard.offset + shard.size > model->num_parameters) {
        llmc_die("internal: shard [%zu, +%zu) outside the %zu parameters", shard.offset, shard.size, model->num_parameters);
    }
    cudaCheck(cudaMemcpy(model->master_weights, host_params + shard.offset, shard.size * sizeof(float), cudaMemcpyHostToDevice));
}

// -op muon: Muon on the blocks' 2-D weights with these settings; owners = the number of processes under
// ZeRO-1 (each rank updates whole matrices, balanced by size), else 1. Call before gpt2_allocate_state.
static void gpt2_use_muon(GPT2* model, const MuonConfig* settings, float peak_lr, int owners, int rank) {
    if (model->init_params == NULL) { llmc_die("internal: gpt2_use_muon after gpt2_allocate_state"); }
    model->use_muon = 1;
    model->muon = *settings;
    model->peak_lr = peak_lr;
    model->muon_mats = (MuonMatrix*)mallocCheck(4 * (size_t)model->config.num_layers * sizeof(MuonMatrix));
    model->muon_count = muon_plan(&model->config, owners, rank, model->muon_mats, &model->muon_state_size);
}

// the Muon state of the matrices this rank owns: zero momentum, master weights from the fp32 parameters
static void gpt2_allocate_muon(GPT2* model, int use_master_weights) {
    size_t n = model->muon_state_size, max_elems = 1, max_r = 1;
    model->muon_buf = (float*)cudaMallocCheck(n * sizeof(float) + 1);
    cudaCheck(cudaMemset(model->muon_buf, 0, n * sizeof(float) + 1));
    model->muon_master = use_master_weights ? (float*)cudaMallocCheck(n * sizeof(float) + 1) : NULL;
    for (int k = 0; k < model->muon_count; k++) {
        const MuonMatrix* m = &model->muon_mats[k];
        size_t r = m->rows < m->cols ? m->rows : m->cols;
        if (m->rows * m->cols > max_elems) { max_elems = m->rows * m->cols; }
        if (r > max_r) { max_r = r; }
        if (m->state_offset != SIZE_MAX && model->muon_master != NULL) {
            cudaCheck(cudaMemcpy(model->muon_master + m->state_offset, model->init_params + m->offset,
                                 m->rows * m->cols * sizeof(float), cudaMemcpyHostToDevice));
        }
    }
    muon_workspace_init(&model->muon_ws, max_elems, max_r);
}

// activations for micro-batches of B x T, optimizer state for the shard, streams and handles
static void gpt2_allocate_state(GPT2* model, int B, int T, int recompute, ZeroShard shard, int use_master_weights,
                                cudaStream_t stream) {
    const GPT2Config* cfg = &model->config;
    if (T > cfg->max_seq_len) { llmc_die("-t %d: longer than the model's maximum sequence length %d", T, cfg->max_seq_len); }
    if (cfg->channels % cfg->num_heads != 0 || cfg->channels % 8 != 0) {
        llmc_die("model: channels C = %d must be a multiple of 8 and of the head count %d", cfg->channels, cfg->num_heads);
    }
#ifdef ENABLE_CUDNN
    const char* why = cudnn_att_shape_error(B, T, cfg->num_heads, cfg->channels / cfg->num_heads);
    if (why != NULL) { llmc_die("-b %d -t %d with %d heads of size %d: cuDNN attention cannot run it: %s", B, T,
                                cfg->num_heads, cfg->channels / cfg->num_heads, why); }
#endif
    model->B = B;
    model->T = T;
    model->recompute = recompute;
    model->gelu_fusion = 0;
    model->stream = stream;
    model->acts_bytes = point_activations(&model->acts, NULL, cfg, B, T, recompute);
    model->acts_memory = cudaMallocCheck(model->acts_bytes);
    point_activations(&model->acts, (char*)model->acts_memory, cfg, B, T, recompute);
    model->inputs = (int*)cudaMallocCheck((size_t)B * T * sizeof(int));
    model->targets = (int*)cudaMallocCheck((size_t)B * T * sizeof(int));
    cudaCheck(cudaMallocHost((void**)&model->losses_host, (size_t)B * T * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&model->norm_host, sizeof(float)));
    token_groups_init(&model->token_groups, B * T, cfg->padded_vocab_size);
    token_groups_device_init(&model->token_groups_device, B * T);
    // optimizer state of this rank's shard
    model->m_memory = (float*)cudaMallocCheck(shard.size * sizeof(float));
    model->v_memory = (float*)cudaMallocCheck(shard.size * sizeof(float));
    cudaCheck(cudaMemset(model->m_memory, 0, shard.size * sizeof(float)));
    cudaCheck(cudaMemset(model->v_memory, 0, shard.size * sizeof(float)));
    model->master_weights = NULL;
    if (use_master_weights && PRECISION_IS_BF16) {
        if (model->init_params == NULL) { llmc_die("internal: gpt2_allocate_state without the fp32 parameters of gpt2_build"); }
        model->master_weights = (float*)cudaMallocCheck(shard.size * sizeof(float));
        gpt2_init_master_weights(model, model->init_params, shard);
    }
    if (model->use_muon) { gpt2_allocate_muon(model, use_master_weights && PRECISION_IS_BF16); }
    free(model->init_params);  // the device has the parameters, the master weights their fp32 values
    model->init_params = NULL;
    cublas_context_init(&model->cublas, stream);
#ifdef ENABLE_CUDNN
    model->cudnn = cudnn_attention_create(stream);
    cudnn_attention_prepare(model->cudnn, B, T, cfg->num_heads, cfg->channels / cfg->num_heads);
#endif
}

static void gpt2_free(GPT2* model) {
    free(model->init_params);
    cublas_context_free(&model->cublas);
#ifdef ENABLE_CUDNN
    cudnn_attention_free(model->cudnn);
#endif
    cudaCheck(cudaFree(model->params_memory));
    cudaCheck(cudaFree(model->grads_memory));
    cudaCheck(cudaFree(model->m_memory));
    cudaCheck(cudaFree(model->v_memory));
    if (model->master_weights != NULL) { cudaCheck(cudaFree(model->master_weights)); }
    if (model->use_muon) {
        free(model->muon_mats);
        cudaCheck(cudaFree(model->muon_buf));
        if (model->muon_master != NULL) { cudaCheck(cudaFree(model->muon_master)); }
        muon_workspace_free(&model->muon_ws);
    }
    cudaCheck(cudaFree(model->acts_memory));
    cudaCheck(cudaFree(model->inputs));
    cudaCheck(cudaFree(model->targets));
    cudaCheck(cudaFreeHost(model->losses_host));
    cudaCheck(cudaFreeHost(model->norm_host));
    token_groups_free(&model->token_groups);
    token_groups_device_free(&model->token_groups_device);
}

// ----------------------------------------------------------------------------
// forward, backward, update

#define GPU_ACT_LAYER_(type, name, layers, count) v.name = a->name + (size_t)l % (layers) * (count);
// layer l's view of the activations
static LayerActs gpt2_layer_acts(const GPT2* model, int l) {
    const ActivationTensors* a = &model->acts;
    int B = model->B, T = model->T;
    size_t BT = (size_t)B * T, C = model->config.channels, NH = model->config.num_heads, L = model->config.num_layers;
    size_t ln_layers = model->recompute >= 2 ? 1 : L, gelu_layers = model->recompute >= 1 ? 1 : L;
    LayerActs v;
    v.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
    GPU_LAYER_ACTIVATIONS(GPU_ACT_LAYER_)
    return v;
}

// inputs, targets: host (B, T) token ids; targets may be NULL (logits only, in acts.output).
// With targets: per-token losses, their mean in model->mean_loss, and dlogits (scaled by dloss) in acts.output.
static void gpt2_forward(GPT2* model, const int* inputs, const int* targets, float dloss, int write_dlogits) {
    const int B = model->B, T = model->T;
    const int L = model->config.num_layers, C = model->config.channels, NH = model->config.num_heads;
    const int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    const int BT = B * T;
    const GPT2Config* cfg = &model->config;
    cudaStream_t stream = model->stream;
    CublasContext* ctx = &model->cublas;
    ParameterTensors p = model->params;
    ActivationTensors acts = model->acts;
    cudaCheck(cudaMemcpyAsync(model->inputs, inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    if (targets != NULL) {
        cudaCheck(cudaMemcpyAsync(model->targets, targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    }
    encoder_forward(acts.encoded, model->inputs, p.wte, p.wpe, B, T, C, stream); // (B,T,C)
    // each layer ends with the next layernorm fused into its last residual add, so the first
    // layernorm runs on its own
    layernorm_forward(gpt2_layer_acts(model, 0).ln1, acts.ln1_mean, acts.ln1_rstd, acts.encoded, p.ln1w, p.ln1b, BT, C, stream);
    for (int l = 0; l < L; l++) {
        LayerParams w = gpt2_layer_params(&model->params, cfg, l);
        LayerActs a = gpt2_layer_acts(model, l);
        // attention block
#ifdef ENABLE_CUDNN
        // qkv (B, T, 3, NH, HS) stays where the matmul writes it; no backward follows when !write_dlogits
        matmul_forward(ctx, a.qkvr, a.ln1, w.qkvw, w.qkvb, BT, C, 3 * C, NULL);
        cudnn_attention_forward(model->cudnn, a.atty, a.att_stats, a.qkvr, B, T, NH, C / NH, !write_dlogits);
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
            LayerParams wn = gpt2_layer_params(&model->params, cfg, l + 1);
            LayerActs an = gpt2_layer_acts(model, l + 1);
            fused_residual_forward(a.residual3, an.ln1, an.ln1_mean, an.ln1_rstd, a.residual2, acts.scratch_btc,
                                   wn.ln1w, wn.ln1b, BT, C, stream);
        } else {
            fused_residual_forward(a.residual3, acts.lnf, acts.lnf_mean, acts.lnf_rstd, a.residual2, acts.scratch_btc,
                                   p.lnfw, p.lnfb, BT, C, stream);
        }
    }
    matmul_forward(ctx, acts.output, acts.lnf, p.wte, NULL, BT, C, Vp, NULL); // (B,T,Vp)
    if (targets == NULL) {
        model->mean_loss = -1.0f;
        return;
    }
    fused_classifier(acts.output, acts.losses, model->targets, dloss, BT, V, Vp, write_dlogits, stream);
    cudaCheck(cudaMemcpyAsync(model->losses_host, acts.losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) { sum += model->losses_host[i]; }
    model->mean_loss = (float)(sum / BT);
}

// 1 when the flat index i lies in a tensor Muon updates (with -op muon)
static int gpt2_in_muon_tensor(const GPT2* model, size_t i) {
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        if (i >= model->param_offsets[k] && i < model->param_offsets[k] + model->param_sizes[k]) {
            return model->use_muon && muon_tensor(k);
        }
    }
    return 0;
}

// starts the reduction of gradient ranges over the processes: Muon's matrices under ZeRO-1 are
// all-reduced (their owner needs the whole matrix), the rest as the ZeRO stage says
static void gpt2_reduce_ranges(GPT2* model, MultiGpu* mg, const GradRange* ranges, int n) {
    GradRange muon[GPT2_NUM_PARAMETER_TENSORS], rest[GPT2_NUM_PARAMETER_TENSORS];
    int n_muon = 0, n_rest = 0;
    for (int r = 0; r < n; r++) {
        if (mg->zero_stage == 1 && gpt2_in_muon_tensor(model, ranges[r].lo)) { muon[n_muon++] = ranges[r]; }
        else { rest[n_rest++] = ranges[r]; }
    }
    multi_gpu_reduce_ranges_stage(mg, model->grads_memory, muon, n_muon, 0, model->stream);
    multi_gpu_reduce_ranges(mg, model->grads_memory, rest, n_rest, model->stream);
}

// Gradients of the last forward (called with write_dlogits = 1) are ADDED to model->grads.
// reduce: this is the last micro-batch of the step, so each finished layer's gradients start
// their reduction over the processes (overlapped with the rest of the backward pass).
static void gpt2_backward(GPT2* model, const int* inputs, MultiGpu* mg, int reduce) {
    const int B = model->B, T = model->T;
    const int L = model->config.num_layers, C = model->config.channels, NH = model->config.num_heads;
    const int Vp = model->config.padded_vocab_size;
    const int BT = B * T;
    const GPT2Config* cfg = &model->config;
    cudaStream_t stream = model->stream;
    CublasContext* ctx = &model->cublas;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors acts = model->acts;
    GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];

    cudaCheck(cudaMemsetAsync(acts.dresidual, 0, (size_t)BT * C * sizeof(floatX), stream));
    // lm head (weights tied with wte): dlogits (B, T, Vp) are in acts.output
    matmul_backward(ctx, acts.scratch_btc, g.wte, NULL, acts.output, acts.lnf, p.wte, acts.fscratch, BT, C, Vp, NULL);
    layernorm_backward(acts.dresidual, g.lnfw, g.lnfb, acts.fscratch, acts.scratch_btc, gpt2_layer_acts(model, L - 1).residual3,
                       p.lnfw, acts.lnf_mean, acts.lnf_rstd, BT, C, stream);
    for (int l = L - 1; l >= 0; l--) {
        LayerParams w = gpt2_layer_params(&model->params, cfg, l);
        LayerParams dw = gpt2_layer_params(&model->grads, cfg, l);
        LayerActs a = gpt2_layer_acts(model, l);
        // recompute what the forward pass did not keep
        if (model->recompute >= 2) {
            layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, w.ln1w, w.ln1b, BT, C, stream);
            layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, w.ln2w, w.ln2b, BT, C, stream);
        }
        if (model->recompute >= 1) {
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
        cudnn_attention_backward(model->cudnn, acts.scratch_bt4c, acts.scratch_btc, a.qkvr, a.atty, a.att_stats, B, T, NH, C / NH);
#else
        attention_backward(ctx, acts.scratch_bt4c, acts.dqkvr, acts.datt, acts.dy, acts.scratch_btc, a.qkvr, a.att, B, T, C, NH);
#endif
        matmul_backward(ctx, acts.scratch_btc, dw.qkvw, dw.qkvb, acts.scratch_bt4c, a.ln1, w.qkvw, acts.fscratch, BT, C, 3 * C, NULL);
        layernorm_backward(acts.dresidual, dw.ln1w, dw.ln1b, acts.fscratch, acts.scratch_btc, a.residual, w.ln1w,
                           a.ln1_mean, a.ln1_rstd, BT, C, stream);
        if (reduce) {
            int n = grad_layer_ranges(&model->config, l, ranges);
            gpt2_reduce_ranges(model, mg, ranges, n);
        }
    }
    token_groups_build(&model->token_groups, inputs);
    encoder_backward(g.wte, g.wpe, acts.dresidual, &model->token_groups, &model->token_groups_device, B, T, C, stream);
    if (reduce) {
        int n = grad_layer_ranges(&model->config, -1, ranges);
        gpt2_reduce_ranges(model, mg, ranges, n);
    }
}

// the squared norm of the (reduced) gradients this rank owns, summed over ranks; waits for the reductions
static float gpt2_grad_norm(GPT2* model, MultiGpu* mg) {
    cudaStream_t stream = model->stream;
    multi_gpu_sync(mg, stream);
    global_norm_squared(model->acts.norm, model->acts.norm + 1, model->grads_memory + mg->shard.offset, mg->shard.size, stream);
    if (mg->zero_stage == 1) { multi_gpu_sum_floats(mg, model->acts.norm, 1, stream); }
    cudaCheck(cudaMemcpyAsync(model->norm_host, model->acts.norm, sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    return sqrtf(*model->norm_host);
}

// AdamW on this rank's shard, one launch per parameter tensor it overlaps (weight decay on
// the 2-D weights only); with -op muon the blocks' 2-D weights get Muon at muon_lr instead, each
// matrix from the rank that owns it (every rank under ZeRO-0), broadcast from there under ZeRO-1;
// then the ZeRO-1 all-gather
static void gpt2_update(GPT2* model, MultiGpu* mg, float lr, float muon_lr, float beta1, float beta2, float eps,
                        float weight_decay, float grad_scale, int t) {
    AdamWScalars scalars = adamw_step_scalars(lr, beta1, beta2, eps, t);
    uint32_t seed = llmc_hash_u32((uint32_t)t, 0x5EEDu);
    size_t s0 = mg->shard.offset, s1 = mg->shard.offset + mg->shard.size;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) {
        size_t t0 = model->param_offsets[i], t1 = t0 + model->param_sizes[i];
        size_t lo = t0 > s0 ? t0 : s0, hi = t1 < s1 ? t1 : s1;
        if (hi <= lo || (model->use_muon && muon_tensor(i))) { continue; }
        float wd = GPT2_PARAMETER_IS_MATRIX[i] ? weight_decay : 0.0f;
        adamw_update(model->params_memory, model->master_weights, model->grads_memory, model->m_memory, model->v_memory,
                     lo, hi - lo, lo - s0, wd, grad_scale, scalars, seed, model->stream);
    }
    if (model->use_muon) {
        GradReduceOp* owners = (GradReduceOp*)mallocCheck((size_t)model->muon_count * sizeof(GradReduceOp));
        for (int k = 0; k < model->muon_count; k++) {
            const MuonMatrix* m = &model->muon_mats[k];
            if (m->state_offset != SIZE_MAX) {
                muon_update_matrix(&model->cublas, &model->muon_ws, model->params_memory, model->muon_master,
                                   model->grads_memory, model->muon_buf, m, muon_lr, weight_decay, grad_scale, &model->muon,
                                   seed, model->stream);
            }
            owners[k].offset = m->offset;
            owners[k].count = m->rows * m->cols;
            owners[k].root = m->owner;
        }
        if (mg->zero_stage == 1) { multi_gpu_broadcast_ranges(mg, model->params_memory, owners, model->muon_count, model->stream); }
        free(owners);
    }
    multi_gpu_gather_params(mg, model->params_memory, model->stream);
}

// ----------------------------------------------------------------------------
// what the GPU trainer brings to llmc/trainer.h's loop (the loop, checkpoints, signals and every rule
// of training are shared with train_gpt2.c there): its kernels, device memory and NCCL

typedef struct {
    GPT2* model;
    MultiGpu* mg;
    int* tokens;             // (B, T) host staging for next_token_logits
    float* logits_row;       // (V) host
    floatX* logits_staging;  // (V) host
} GpuTrainer;

static void gpu_trainer_init(GpuTrainer* g, GPT2* model, MultiGpu* mg) {
    g->model = model;
    g->mg = mg;
    g->tokens = (int*)mallocCheck((size_t)model->B * model->T * sizeof(int));
    g->logits_row = (float*)mallocCheck((size_t)model->config.vocab_size * sizeof(float));
    g->logits_staging = (floatX*)mallocCheck((size_t)model->config.vocab_size * sizeof(floatX));
}

static void gpu_trainer_free(GpuTrainer* g) {
    free(g->tokens);
    free(g->logits_row);
    free(g->logits_staging);
}

static void gpu_zero_grad(void* ctx) {
    GPT2* m = ((GpuTrainer*)ctx)->model;
    cudaCheck(cudaMemsetAsync(m->grads_memory, 0, m->num_parameters * sizeof(floatX), m->stream));
}

// the last micro-batch's backward starts each finished layer's gradient reduction over the processes
static float gpu_forward_backward(void* ctx, const int* inputs, const int* targets, float loss_scale, int last) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GPT2* m = g->model;
    gpt2_forward(m, inputs, targets, loss_scale / (float)(m->B * m->T), 1);
    gpt2_backward(m, inputs, g->mg, last);
    return m->mean_loss;
}

static float gpu_grad_norm(void* ctx) { return gpt2_grad_norm(((GpuTrainer*)ctx)->model, ((GpuTrainer*)ctx)->mg); }

// the Muon lr of a step: -ol scaled by the schedule as -l is (the step's lr / -l)
static float gpt2_muon_lr(const GPT2* model, float lr) {
    return model->peak_lr > 0.0f ? (float)((double)model->muon.lr * (double)lr / (double)model->peak_lr) : 0.0f;
}

static void gpu_update(void* ctx, float lr, float weight_decay, float grad_scale, int t) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    gpt2_update(g->model, g->mg, lr, gpt2_muon_lr(g->model, lr), TRAINER_ADAMW_BETA1, TRAINER_ADAMW_BETA2, TRAINER_ADAMW_EPS,
                weight_decay, grad_scale, t);
    cudaCheck(cudaStreamSynchronize(g->model->stream)); // the step's time includes the update
}

static const float* gpu_forward_losses(void* ctx, const int* inputs, const int* targets) {
    GPT2* m = ((GpuTrainer*)ctx)->model;
    gpt2_forward(m, inputs, targets, 0.0f, 0);
    return m->losses_host;
}

// a full (B, T) forward with tokens[0..len) in the first row (the rest is padding the causal
// attention never lets position len - 1 see), then that position's logits
static const float* gpu_next_token_logits(void* ctx, const int* tokens, int len) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GPT2* m = g->model;
    const int BT = m->B * m->T, V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    for (int i = 0; i < BT; i++) { g->tokens[i] = i < len ? tokens[i] : tokens[0]; }
    gpt2_forward(m, g->tokens, NULL, 0.0f, 0);
    cudaCheck(cudaMemcpy(g->logits_staging, m->acts.output + (size_t)(len - 1) * Vp, (size_t)V * sizeof(floatX),
                         cudaMemcpyDeviceToHost));
    float_from_floatX_host(g->logits_row, g->logits_staging, (size_t)V);
    return g->logits_row;
}

// rank 0: fp32 values of the parameters
static void gpu_save_model(void* ctx, const char* path) {
    GPT2* m = ((GpuTrainer*)ctx)->model;
    cudaCheck(cudaStreamSynchronize(m->stream));
    float* host = (float*)mallocCheck(m->num_parameters * sizeof(float));
    gpt2_download_parameters(m, host);
    checkpoint_write(path, &m->config, host, m->num_parameters);
    free(host);
}

// The training state holds this rank's ZeRO shard: AdamW m, v, and after the detectors its fp32
// master weights (bf16 builds with -w 1); with -op muon then the Muon momentum of the matrices this
// rank owns and their fp32 master weights (when the shard has them). Host copies of them, on the way
// to or from the file.
typedef struct {
    size_t shard, master;  // element counts (master 0: none)
    size_t muon, muon_master;
    float* m;
    float* v;
    float* w;
    char* extra;
    size_t muon_at;        // where the Muon state starts in extra
} GpuStateStaging;

// fills the optimizer fields of s and allocates the host copies
static GpuStateStaging gpu_state_staging(const GpuTrainer* g, TrainState* s, const char* path) {
    GpuStateStaging st;
    st.shard = g->mg->shard.size;
    st.master = g->model->master_weights != NULL ? st.shard : 0;
    st.muon = g->model->use_muon ? g->model->muon_state_size : 0;
    st.muon_master = g->model->muon_master != NULL ? st.muon : 0;
    st.muon_at = trainer_state_extra_bytes(st.master);
    // 64-bit in the file: 6.2 GB for 1558M on one GPU
    size_t extra = st.muon_at + (st.muon + st.muon_master) * sizeof(float);
    if (!trainer_state_fits(st.shard, extra)) {
        llmc_die("%s: the optimizer state of this rank (%zu values, %zu extra bytes) does not fit in one file", path, st.shard, extra);
    }
    s->num_parameters = g->model->num_parameters;
    s->optimizer = g->model->use_muon;  // a resume with the other -op is refused (llmc/checkpoint.h)
    s->opt_offset = g->mg->shard.offset;
    s->opt_size = st.shard;
    s->extra_bytes = extra;
    st.m = (float*)mallocCheck(st.shard * sizeof(float) + 1);
    st.v = (float*)mallocCheck(st.shard * sizeof(float) + 1);
    st.w = (float*)mallocCheck(st.master * sizeof(float) + 1);
    st.extra = (char*)mallocCheck(extra);
    return st;
}

static void gpu_state_staging_free(GpuStateStaging* st) {
    free(st->m);
    free(st->v);
    free(st->w);
    free(st->extra);
}

static void gpu_save_state(void* ctx, const char* path, TrainState* s, const TrainerDetectors* d) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GPT2* model = g->model;
    GpuStateStaging st = gpu_state_staging(g, s, path);
    cudaCheck(cudaStreamSynchronize(model->stream));
    cudaCheck(cudaMemcpy(st.m, model->m_memory, st.shard * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(st.v, model->v_memory, st.shard * sizeof(float), cudaMemcpyDeviceToHost));
    if (st.master > 0) { cudaCheck(cudaMemcpy(st.w, model->master_weights, st.master * sizeof(float), cudaMemcpyDeviceToHost)); }
    trainer_state_extra_pack(st.extra, d, st.w, st.master);
    if (st.muon > 0) {
        float* muon = (float*)(st.extra + st.muon_at);
        cudaCheck(cudaMemcpy(muon, model->muon_buf, st.muon * sizeof(float), cudaMemcpyDeviceToHost));
        if (st.muon_master > 0) {
            cudaCheck(cudaMemcpy(muon + st.muon, model->muon_master, st.muon_master * sizeof(float), cudaMemcpyDeviceToHost));
        }
    }
    train_state_write(path, s, st.m, st.v, st.extra);
    gpu_state_staging_free(&st);
}

static void gpu_load_state(void* ctx, const char* path, TrainState* expect, TrainState* got, TrainerDetectors* d) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GPT2* model = g->model;
    GpuStateStaging st = gpu_state_staging(g, expect, path);
    train_state_read(path, expect, got, st.m, st.v, st.extra);
    trainer_state_extra_unpack(st.extra, d, st.w, st.master);
    if (st.muon > 0) {
        const float* muon = (const float*)(st.extra + st.muon_at);
        cudaCheck(cudaMemcpy(model->muon_buf, muon, st.muon * sizeof(float), cudaMemcpyHostToDevice));
        if (st.muon_master > 0) {
            cudaCheck(cudaMemcpy(model->muon_master, muon + st.muon, st.muon_master * sizeof(float), cudaMemcpyHostToDevice));
        }
    }
    cudaCheck(cudaMemcpy(model->m_memory, st.m, st.shard * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(model->v_memory, st.v, st.shard * sizeof(float), cudaMemcpyHostToDevice));
    if (st.master > 0) { cudaCheck(cudaMemcpy(model->master_weights, st.w, st.master * sizeof(float), cudaMemcpyHostToDevice)); }
    gpu_state_staging_free(&st);
}

static TrainerOps gpu_trainer_ops(GpuTrainer* g) {
    TrainerOps ops = {g, gpu_zero_grad, gpu_forward_backward, gpu_grad_norm, gpu_update, gpu_forward_losses,
                      gpu_next_token_logits, gpu_save_model, gpu_save_state, gpu_load_state};
    return ops;
}

static void gpu_barrier_op(void* ctx) { multi_gpu_barrier((MultiGpu*)ctx); }

static void gpu_sum_floats_op(void* ctx, float* values, int n) { multi_gpu_sum_host_floats((MultiGpu*)ctx, values, n); }

// -op and the Muon flags; returns 1 for muon, 0 for adamw (one error line for anything else)
static int gpt2_optimizer_from_args(const TrainArgs* args, MuonConfig* muon) {
    int optimizer = optimizer_parse(args->optimizer);
    if (optimizer < 0) { llmc_die("-op %s: unknown optimizer (adamw|muon)", args->optimizer); }
    muon->lr = args->muon_lr;
    muon->momentum = args->muon_momentum;
    muon->nesterov = args->muon_nesterov;
    muon->ns_steps = args->muon_ns_steps;
    muon->adjust_lr = muon_adjust_parse(args->muon_adjust_lr);
    if (muon->adjust_lr < 0) { llmc_die("-oa %s: unknown Muon lr adjustment (original|match_rms_adamw)", args->muon_adjust_lr); }
    return optimizer == OPTIMIZER_MUON;
}

// ----------------------------------------------------------------------------
// main

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    TrainArgs args;
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &args, argc, argv,
               "train_gpt2cu: GPT-2 training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)");
    MuonConfig muon;
    const int use_muon = gpt2_optimizer_from_args(&args, &muon);
    MultiGpu mg;
    multi_gpu_init(&mg, &argc, &argv, args.num_processes, args.process_rank, args.gpus_per_node, args.nccl_init_method,
                   args.server_ip, args.fs_path, args.zero_stage, 0);
    const int rank = mg.process_rank, nproc = mg.num_processes;
    DeviceInfo dev;
    device_info_query(&dev, mg.local_device_idx);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    if (rank == 0) {
        printf("+-------------------------------------------------------------+\n");
        printf("| train_gpt2cu: %s, precision %s, %d process(es), ZeRO-%d\n", dev.name, PRECISION_NAME, nproc, mg.zero_stage);
        printf("+-------------------------------------------------------------+\n");
        args_print_values(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &args, stdout);
    }

    // data and flags first (a missing file says so before the model is loaded), then the model:
    // the newest complete checkpoint in -o when resuming, else -e
    int resume_step = trainer_prepare(&args, rank);
    char model_path[4200];
    snprintf(model_path, sizeof(model_path), "%s", args.load_filename);
    if (resume_step >= 0) { trainer_checkpoint_path(model_path, sizeof(model_path), args.output_log_dir, "model", resume_step, -1); }
    GPT2Config probe;
    const char* why = "";
    if (!file_exists(model_path) && model_config_from_descriptor(model_path, &probe, &why) == 0) {
        llmc_die("-e %s: no such checkpoint (python train_gpt2.py writes gpt2_124M.bin; or use -e d12 to start from scratch)", model_path);
    }
    GPT2 model;
    gpt2_build(&model, model_path, mg.zero_stage, nproc);
    mg.num_parameters = model.num_parameters;
    mg.shard = zero_shard(model.num_parameters, mg.zero_stage, nproc, rank);
    if (use_muon) { gpt2_use_muon(&model, &muon, args.learning_rate, mg.zero_stage == 1 ? nproc : 1, rank); }
    gpt2_allocate_state(&model, args.B, args.T, args.recompute, mg.shard, args.use_master_weights, stream);
    model.gelu_fusion = args.gelu_fusion;  // -ge
    const GPT2Config* cfg = &model.config;
    if (rank == 0) {
        printf("model: %s L=%d C=%d NH=%d maxT=%d V=%d Vp=%d, %zu parameters, %.2f GiB of activations\n", model_path,
               cfg->num_layers, cfg->channels, cfg->num_heads, cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size,
               model.num_parameters, (double)model.acts_bytes / (1024.0 * 1024.0 * 1024.0));
#ifdef ENABLE_CUDNN
        printf("attention: cuDNN flash attention, %.2f GiB of cuDNN workspace\n",
               (double)cudnn_attention_workspace_bytes(model.cudnn) / (1024.0 * 1024.0 * 1024.0));
#endif
    }

    TrainerComm comm = {rank, nproc, &mg, gpu_barrier_op, gpu_sum_floats_op};
    Trainer trainer;
    trainer_init(&trainer, &args, comm, cfg->vocab_size, resume_step);
    trainer.peak_flops = gpu_peak_flops(dev.name, PRECISION_IS_BF16 ? MFU_BF16 : MFU_TF32);
    trainer.flops_per_step = gpt2_flops_per_step(model.num_parameters, cfg->num_layers, cfg->channels, args.T,
                                                 (size_t)trainer.total_batch);
    GpuTrainer gpu;
    gpu_trainer_init(&gpu, &model, &mg);
    TrainerOps ops = gpu_trainer_ops(&gpu);
    int status = trainer_run(&trainer, &ops);

    gpu_trainer_free(&gpu);
    trainer_free(&trainer);
    gpt2_free(&model);
    cudaCheck(cudaStreamDestroy(stream));
    multi_gpu_free(&mg);
    return status;
}
#endif // LLMC_NO_MAIN
