/*
train_gpt2.cu: GPT-2 training on NVIDIA GPUs, one process per GPU, over many GPUs and nodes.

The story of one training step, top to bottom:
    gpt2_forward      encoder -> L x (layernorm, attention, residual, layernorm, MLP, residual) -> logits
                      -> fused classifier (loss and dlogits in one pass, no probabilities stored)
    gpt2_backward     the same layers in reverse; each finished layer's gradients start their
                      NCCL reduction on a second stream while the next layer's backward runs
    gpt2_update       global gradient norm, clipping, AdamW (fp32 master weights, stochastic
                      rounding to bf16), then the ZeRO-1 all-gather of the updated parameters

The kernels live in the llmc .cuh headers, one concern per file; the host-side pieces (command line, data,
tokenizer, sampler, schedules, logs, checkpoints) are the same headers the CPU trainer uses.
Precision is chosen at build time: make train_gpt2cu PRECISION=BF16 (default) or FP32.
make train_gpt2cu USE_CUDNN=1 (BF16) runs attention as cuDNN flash attention (llmc/cudnn_att.h): no
(B, NH, T, T) matrix is stored, only (B, NH, T) softmax statistics per layer (never run on a GPU yet).
Activations and parameters are floatX (bf16 or fp32); statistics, losses, optimizer state fp32.
*/
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "llmc/utils.h"
#include "llmc/args.h"
#include "llmc/model_config.h"
#include "llmc/checkpoint.h"
#include "llmc/zero.h"
#include "llmc/rand.h"
#include "llmc/init.h"
#include "llmc/dataloader.h"
#include "llmc/tokenizer.h"
#include "llmc/sampler.h"
#include "llmc/schedulers.h"
#include "llmc/logger.h"
#include "llmc/outlier_detector.h"
#include "llmc/mfu.h"
#include "llmc/trainer_host.cuh"
#include "llmc/cuda_common.cuh"
#include "llmc/cublas_common.cuh"
#include "llmc/encoder.cuh"
#include "llmc/layernorm.cuh"
#include "llmc/matmul.cuh"
#include "llmc/attention.cuh"
#include "llmc/gelu.cuh"
#include "llmc/fused_classifier.cuh"
#include "llmc/global_norm.cuh"
#include "llmc/adamw.cuh"
#include "llmc/multi_gpu.cuh"

// ----------------------------------------------------------------------------
// GPT-2 model definition

typedef struct {
    floatX* wte;      // (Vp, C)
    floatX* wpe;      // (maxT, C)
    floatX* ln1w;     // (L, C)
    floatX* ln1b;     // (L, C)
    floatX* qkvw;     // (L, 3*C, C)
    floatX* qkvb;     // (L, 3*C)
    floatX* attprojw; // (L, C, C)
    floatX* attprojb; // (L, C)
    floatX* ln2w;     // (L, C)
    floatX* ln2b;     // (L, C)
    floatX* fcw;      // (L, 4*C, C)
    floatX* fcb;      // (L, 4*C)
    floatX* fcprojw;  // (L, C, 4*C)
    floatX* fcprojb;  // (L, C)
    floatX* lnfw;     // (C)
    floatX* lnfb;     // (C)
} ParameterTensors;

// points the 16 tensors into one allocation, checkpoint order
static void point_parameters(ParameterTensors* p, floatX* memory, const size_t sizes[GPT2_NUM_PARAMETER_TENSORS]) {
    floatX** ptrs[GPT2_NUM_PARAMETER_TENSORS] = {
        &p->wte, &p->wpe, &p->ln1w, &p->ln1b, &p->qkvw, &p->qkvb, &p->attprojw, &p->attprojb,
        &p->ln2w, &p->ln2b, &p->fcw, &p->fcb, &p->fcprojw, &p->fcprojb, &p->lnfw, &p->lnfb};
    floatX* it = memory;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) {
        *(ptrs[i]) = it;
        it += sizes[i];
    }
}

typedef struct {
    floatX* encoded;    // (B, T, C)
    floatX* ln1;        // (L, B, T, C), one layer's worth with recompute >= 2
    float* ln1_mean;    // (L, B, T)
    float* ln1_rstd;    // (L, B, T)
    floatX* atty;       // (L, B, T, C)
#ifdef ENABLE_CUDNN
    float* att_stats;   // (L, B, NH, T) log-sum-exp of each softmax row, for cuDNN's backward (layers 256-byte aligned)
#else
    floatX* att;        // (L, B, NH, T, T)
#endif
    floatX* residual2;  // (L, B, T, C)
    floatX* ln2;        // (L, B, T, C), one layer's worth with recompute >= 2
    float* ln2_mean;    // (L, B, T)
    float* ln2_rstd;    // (L, B, T)
    floatX* fch;        // (L, B, T, 4C) input of the GELU
    floatX* fch_gelu;   // (L, B, T, 4C), one layer's worth with recompute >= 1
    floatX* residual3;  // (L, B, T, C)
    floatX* lnf;        // (B, T, C)
    float* lnf_mean;    // (B, T)
    float* lnf_rstd;    // (B, T)
    float* losses;      // (B, T)
    floatX* qkvr;       // (L, 3, B, NH, T, HS) q, k, v head-major; with cuDNN (L, B, T, 3C), the qkv matmul output
    floatX* output;     // (B, T, Vp) logits, then dlogits
    floatX* scratch_bt4c;  // (B, T, 4C) qkv / dfch
    floatX* scratch_btc;   // (B, T, C)
    // backward only
    floatX* dresidual;  // (B, T, C) gradient of the residual stream
    floatX* dqkvr;      // (3, B, NH, T, HS); NULL with cuDNN (it writes dqkv straight into scratch_bt4c)
    floatX* datt;       // (B, NH, T, T); NULL with cuDNN
    floatX* dy;         // (B, NH, T, HS); NULL with cuDNN
    float* fscratch;    // column-sum partials of bias and layernorm gradients
    float* norm;        // (1 + GLOBAL_NORM_BLOCKS) squared norm and its partial sums
} ActivationTensors;

// one row of the activation table: where the pointer goes, how many elements, element size (0 elements: NULL)
typedef struct {
    void** ptr;
    size_t count;
    size_t elem;
} ActivationSpec;

#define NUM_ACTIVATION_TENSORS 26

static void activation_table(ActivationSpec t[NUM_ACTIVATION_TENSORS], ActivationTensors* a, const GPT2Config* cfg,
                             int B, int T, int recompute) {
    size_t L = cfg->num_layers, C = cfg->channels, NH = cfg->num_heads, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * T;
    size_t fx = sizeof(floatX), f = sizeof(float);
    size_t layers_ln = recompute >= 2 ? 1 : L;
    size_t layers_gelu = recompute >= 1 ? 1 : L;
    size_t fscratch = 4 * C * (BIAS_GRAD_ROW_CHUNKS > LAYERNORM_ROW_CHUNKS ? BIAS_GRAD_ROW_CHUNKS : LAYERNORM_ROW_CHUNKS);
#ifdef ENABLE_CUDNN
    // cuDNN keeps fp32 softmax statistics instead of the attention matrix and needs no backward buffers
    ActivationSpec att_row = {(void**)&a->att_stats, L * cudnn_att_stats_layer_stride(B, T, (int)NH), f};
    size_t bwd_att = 0, bwd_qkvr = 0, bwd_dy = 0;
#else
    ActivationSpec att_row = {(void**)&a->att, L * B * NH * T * T, fx};
    size_t bwd_att = B * NH * T * T, bwd_qkvr = BT * 3 * C, bwd_dy = BT * C;
#endif
    ActivationSpec rows[NUM_ACTIVATION_TENSORS] = {
        {(void**)&a->encoded, BT * C, fx},
        {(void**)&a->ln1, layers_ln * BT * C, fx},
        {(void**)&a->ln1_mean, L * BT, f},
        {(void**)&a->ln1_rstd, L * BT, f},
        {(void**)&a->atty, L * BT * C, fx},
        att_row,
        {(void**)&a->residual2, L * BT * C, fx},
        {(void**)&a->ln2, layers_ln * BT * C, fx},
        {(void**)&a->ln2_mean, L * BT, f},
        {(void**)&a->ln2_rstd, L * BT, f},
        {(void**)&a->fch, L * BT * 4 * C, fx},
        {(void**)&a->fch_gelu, layers_gelu * BT * 4 * C, fx},
        {(void**)&a->residual3, L * BT * C, fx},
        {(void**)&a->lnf, BT * C, fx},
        {(void**)&a->lnf_mean, BT, f},
        {(void**)&a->lnf_rstd, BT, f},
        {(void**)&a->losses, BT, f},
        {(void**)&a->qkvr, L * BT * 3 * C, fx},
        {(void**)&a->output, BT * Vp, fx},
        {(void**)&a->scratch_bt4c, BT * 4 * C, fx},
        {(void**)&a->scratch_btc, BT * C, fx},
        {(void**)&a->dresidual, BT * C, fx},
        {(void**)&a->dqkvr, bwd_qkvr, fx},
        {(void**)&a->datt, bwd_att, fx},
        {(void**)&a->dy, bwd_dy, fx},
        {(void**)&a->fscratch, fscratch, f},
    };
    memcpy(t, rows, sizeof(rows));
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
    float* m_memory;           // AdamW moments of this rank's shard
    float* v_memory;
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
    point_parameters(&model->params, model->params_memory, model->param_sizes);
    point_parameters(&model->grads, model->grads_memory, model->param_sizes);
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
static void gpt2_build(GPT2* model, const char* load, int zero_stage, int nproc) {
    GPT2Config cfg;
    const char* why = "";
    int kind = model_config_from_descriptor(load, &cfg, &why);
    if (kind < 0) { llmc_die("-e %s: %s", load, why); }
    if (kind == 1) {
        gpt2_init_common(model, &cfg);
        gpt2_allocate_parameters(model, zero_padded_size(model->num_parameters, zero_stage, nproc));
        float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
        gpt2_init_params_from_scratch(host, &model->config, 42);  // llmc/init.h, as train_gpt2.c
        gpt2_upload_parameters(model, host);
        free(host);
        return;
    }
    int version = 0;
    FILE* f = checkpoint_open(load, &cfg, &version);
    gpt2_init_common(model, &cfg);
    gpt2_allocate_parameters(model, zero_padded_size(model->num_parameters, zero_stage, nproc));
    float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
    checkpoint_read_params(f, load, version, host, model->num_parameters);
    fcloseCheck(f, load);
    gpt2_upload_parameters(model, host);
    free(host);
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
    ActivationSpec table[NUM_ACTIVATION_TENSORS];
    activation_table(table, &model->acts, cfg, B, T, recompute);
    size_t total = 0;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        total += (table[i].count * table[i].elem + 255) / 256 * 256;  // 256-byte aligned tensors
    }
    total += (1 + GLOBAL_NORM_BLOCKS) * sizeof(float);
    model->acts_bytes = total;
    model->acts_memory = cudaMallocCheck(total);
    char* it = (char*)model->acts_memory;
    for (int i = 0; i < NUM_ACTIVATION_TENSORS; i++) {
        *(table[i].ptr) = table[i].count > 0 ? it : NULL;
        it += (table[i].count * table[i].elem + 255) / 256 * 256;
    }
    model->acts.norm = (float*)it;
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
        model->master_weights = (float*)cudaMallocCheck(shard.size * sizeof(float));
        adamw_init_master(model->master_weights, model->params_memory, shard.offset, shard.size, stream);
    }
    cublas_context_init(&model->cublas, stream);
#ifdef ENABLE_CUDNN
    model->cudnn = cudnn_attention_create(stream);
    cudnn_attention_prepare(model->cudnn, B, T, cfg->num_heads, cfg->channels / cfg->num_heads);
#endif
}

static void gpt2_free(GPT2* model) {
    cublas_context_free(&model->cublas);
#ifdef ENABLE_CUDNN
    cudnn_attention_free(model->cudnn);
#endif
    cudaCheck(cudaFree(model->params_memory));
    cudaCheck(cudaFree(model->grads_memory));
    cudaCheck(cudaFree(model->m_memory));
    cudaCheck(cudaFree(model->v_memory));
    if (model->master_weights != NULL) { cudaCheck(cudaFree(model->master_weights)); }
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

// per-layer views of the activations
static floatX* layer_ln1(const GPT2* m, int l) { return m->acts.ln1 + (m->recompute >= 2 ? 0 : (size_t)l * m->B * m->T * m->config.channels); }
static floatX* layer_ln2(const GPT2* m, int l) { return m->acts.ln2 + (m->recompute >= 2 ? 0 : (size_t)l * m->B * m->T * m->config.channels); }
static floatX* layer_fch_gelu(const GPT2* m, int l) { return m->acts.fch_gelu + (m->recompute >= 1 ? 0 : (size_t)l * m->B * m->T * 4 * m->config.channels); }

// inputs, targets: host (B, T) token ids; targets may be NULL (logits only, in acts.output).
// With targets: per-token losses, their mean in model->mean_loss, and dlogits (scaled by dloss) in acts.output.
static void gpt2_forward(GPT2* model, const int* inputs, const int* targets, float dloss, int write_dlogits) {
    const int B = model->B, T = model->T;
    const int L = model->config.num_layers, C = model->config.channels, NH = model->config.num_heads;
    const int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    const int BT = B * T;
    cudaStream_t stream = model->stream;
    CublasContext* ctx = &model->cublas;
    ParameterTensors p = model->params;
    ActivationTensors a = model->acts;
    cudaCheck(cudaMemcpyAsync(model->inputs, inputs, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    if (targets != NULL) {
        cudaCheck(cudaMemcpyAsync(model->targets, targets, (size_t)BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    }
    encoder_forward(a.encoded, model->inputs, p.wte, p.wpe, B, T, C, stream);
    layernorm_forward(layer_ln1(model, 0), a.ln1_mean, a.ln1_rstd, a.encoded, p.ln1w, p.ln1b, BT, C, stream);
    for (int l = 0; l < L; l++) {
        size_t btc = (size_t)BT * C;
        floatX* residual = l == 0 ? a.encoded : a.residual3 + (size_t)(l - 1) * btc;
        floatX* l_ln1 = layer_ln1(model, l);
        floatX* l_qkvr = a.qkvr + (size_t)l * 3 * btc;
        floatX* l_atty = a.atty + (size_t)l * btc;
        floatX* l_residual2 = a.residual2 + (size_t)l * btc;
        floatX* l_ln2 = layer_ln2(model, l);
        floatX* l_fch = a.fch + (size_t)l * 4 * btc;
        floatX* l_fch_gelu = layer_fch_gelu(model, l);
        floatX* l_residual3 = a.residual3 + (size_t)l * btc;
        // attention block
#ifdef ENABLE_CUDNN
        // qkv (B, T, 3, NH, HS) stays where the matmul writes it; no backward follows when !write_dlogits
        float* l_stats = a.att_stats + (size_t)l * cudnn_att_stats_layer_stride(B, T, NH);
        matmul_forward(ctx, l_qkvr, l_ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + (size_t)l * 3 * C, BT, C, 3 * C, NULL);
        cudnn_attention_forward(model->cudnn, l_atty, l_stats, l_qkvr, B, T, NH, C / NH, !write_dlogits);
#else
        floatX* l_att = a.att + (size_t)l * B * NH * T * T;
        matmul_forward(ctx, a.scratch_bt4c, l_ln1, p.qkvw + (size_t)l * 3 * C * C, p.qkvb + (size_t)l * 3 * C, BT, C, 3 * C, NULL);
        attention_forward(ctx, l_atty, l_qkvr, l_att, a.scratch_bt4c, a.scratch_btc, B, T, C, NH);
#endif
        matmul_forward(ctx, a.scratch_btc, l_atty, p.attprojw + (size_t)l * C * C, p.attprojb + (size_t)l * C, BT, C, C, NULL);
        fused_residual_forward(l_residual2, l_ln2, a.ln2_mean + (size_t)l * BT, a.ln2_rstd + (size_t)l * BT,
                               residual, a.scratch_btc, p.ln2w + (size_t)l * C, p.ln2b + (size_t)l * C, BT, C, stream);
        // MLP block
        if (model->gelu_fusion) {
            matmul_forward(ctx, l_fch_gelu, l_ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + (size_t)l * 4 * C, BT, C, 4 * C, l_fch);
        } else {
            matmul_forward(ctx, l_fch, l_ln2, p.fcw + (size_t)l * 4 * C * C, p.fcb + (size_t)l * 4 * C, BT, C, 4 * C, NULL);
            gelu_forward(l_fch_gelu, l_fch, (size_t)BT * 4 * C, stream);
        }
        matmul_forward(ctx, a.scratch_btc, l_fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, p.fcprojb + (size_t)l * C, BT, 4 * C, C, NULL);
        // residual, then the next layernorm (the next layer's ln1, or the final one)
        if (l + 1 < L) {
            fused_residual_forward(l_residual3, layer_ln1(model, l + 1), a.ln1_mean + (size_t)(l + 1) * BT,
                                   a.ln1_rstd + (size_t)(l + 1) * BT, l_residual2, a.scratch_btc,
                                   p.ln1w + (size_t)(l + 1) * C, p.ln1b + (size_t)(l + 1) * C, BT, C, stream);
        } else {
            fused_residual_forward(l_residual3, a.lnf, a.lnf_mean, a.lnf_rstd, l_residual2, a.scratch_btc,
                                   p.lnfw, p.lnfb, BT, C, stream);
        }
    }
    matmul_forward(ctx, a.output, a.lnf, p.wte, NULL, BT, C, Vp, NULL);
    if (targets == NULL) {
        model->mean_loss = -1.0f;
        return;
    }
    fused_classifier(a.output, a.losses, model->targets, dloss, BT, V, Vp, write_dlogits, stream);
    cudaCheck(cudaMemcpyAsync(model->losses_host, a.losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) { sum += model->losses_host[i]; }
    model->mean_loss = (float)(sum / BT);
}

// Gradients of the last forward (called with write_dlogits = 1) are ADDED to model->grads.
// reduce: this is the last micro-batch of the step, so each finished layer's gradients start
// their reduction over the processes (overlapped with the rest of the backward pass).
static void gpt2_backward(GPT2* model, const int* inputs, MultiGpu* mg, int reduce) {
    const int B = model->B, T = model->T;
    const int L = model->config.num_layers, C = model->config.channels, NH = model->config.num_heads;
    const int Vp = model->config.padded_vocab_size;
    const int BT = B * T;
    const size_t btc = (size_t)BT * C;
    cudaStream_t stream = model->stream;
    CublasContext* ctx = &model->cublas;
    ParameterTensors p = model->params;
    ParameterTensors g = model->grads;
    ActivationTensors a = model->acts;
    GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];

    cudaCheck(cudaMemsetAsync(a.dresidual, 0, btc * sizeof(floatX), stream));
    // lm head (weights tied with wte): dlogits (B, T, Vp) are in a.output
    matmul_backward(ctx, a.scratch_btc, g.wte, NULL, a.output, a.lnf, p.wte, a.fscratch, BT, C, Vp, NULL);
    floatX* last_residual = a.residual3 + (size_t)(L - 1) * btc;
    layernorm_backward(a.dresidual, g.lnfw, g.lnfb, a.fscratch, a.scratch_btc, last_residual, p.lnfw,
                       a.lnf_mean, a.lnf_rstd, BT, C, stream);
    for (int l = L - 1; l >= 0; l--) {
        floatX* residual = l == 0 ? a.encoded : a.residual3 + (size_t)(l - 1) * btc;
        floatX* l_ln1 = layer_ln1(model, l);
        floatX* l_qkvr = a.qkvr + (size_t)l * 3 * btc;
        floatX* l_atty = a.atty + (size_t)l * btc;
        floatX* l_residual2 = a.residual2 + (size_t)l * btc;
        floatX* l_ln2 = layer_ln2(model, l);
        floatX* l_fch = a.fch + (size_t)l * 4 * btc;
        floatX* l_fch_gelu = layer_fch_gelu(model, l);
        float* l_ln1_mean = a.ln1_mean + (size_t)l * BT;
        float* l_ln1_rstd = a.ln1_rstd + (size_t)l * BT;
        float* l_ln2_mean = a.ln2_mean + (size_t)l * BT;
        float* l_ln2_rstd = a.ln2_rstd + (size_t)l * BT;
        // recompute what the forward pass did not keep
        if (model->recompute >= 2) {
            layernorm_forward(l_ln1, l_ln1_mean, l_ln1_rstd, residual, p.ln1w + (size_t)l * C, p.ln1b + (size_t)l * C, BT, C, stream);
            layernorm_forward(l_ln2, l_ln2_mean, l_ln2_rstd, l_residual2, p.ln2w + (size_t)l * C, p.ln2b + (size_t)l * C, BT, C, stream);
        }
        if (model->recompute >= 1) {
            gelu_forward(l_fch_gelu, l_fch, (size_t)BT * 4 * C, stream);
        }
        // MLP block: dresidual is the gradient of this layer's output
        matmul_backward(ctx, a.scratch_bt4c, g.fcprojw + (size_t)l * 4 * C * C, g.fcprojb + (size_t)l * C, a.dresidual,
                        l_fch_gelu, p.fcprojw + (size_t)l * 4 * C * C, a.fscratch, BT, 4 * C, C,
                        model->gelu_fusion ? l_fch : NULL);
        if (!model->gelu_fusion) {
            gelu_backward_inplace(a.scratch_bt4c, l_fch, (size_t)BT * 4 * C, stream);
        }
        matmul_backward(ctx, a.scratch_btc, g.fcw + (size_t)l * 4 * C * C, g.fcb + (size_t)l * 4 * C, a.scratch_bt4c,
                        l_ln2, p.fcw + (size_t)l * 4 * C * C, a.fscratch, BT, C, 4 * C, NULL);
        layernorm_backward(a.dresidual, g.ln2w + (size_t)l * C, g.ln2b + (size_t)l * C, a.fscratch, a.scratch_btc,
                           l_residual2, p.ln2w + (size_t)l * C, l_ln2_mean, l_ln2_rstd, BT, C, stream);
        // attention block: dresidual is now the gradient of residual2
        matmul_backward(ctx, a.scratch_btc, g.attprojw + (size_t)l * C * C, g.attprojb + (size_t)l * C, a.dresidual,
                        l_atty, p.attprojw + (size_t)l * C * C, a.fscratch, BT, C, C, NULL);
#ifdef ENABLE_CUDNN
        // scratch_btc holds d(atty); dqkv (B, T, 3, NH, HS) goes straight into scratch_bt4c
        float* l_stats = a.att_stats + (size_t)l * cudnn_att_stats_layer_stride(B, T, NH);
        cudnn_attention_backward(model->cudnn, a.scratch_bt4c, a.scratch_btc, l_qkvr, l_atty, l_stats, B, T, NH, C / NH);
#else
        floatX* l_att = a.att + (size_t)l * B * NH * T * T;
        attention_backward(ctx, a.scratch_bt4c, a.dqkvr, a.datt, a.dy, a.scratch_btc, l_qkvr, l_att, B, T, C, NH);
#endif
        matmul_backward(ctx, a.scratch_btc, g.qkvw + (size_t)l * 3 * C * C, g.qkvb + (size_t)l * 3 * C, a.scratch_bt4c,
                        l_ln1, p.qkvw + (size_t)l * 3 * C * C, a.fscratch, BT, C, 3 * C, NULL);
        layernorm_backward(a.dresidual, g.ln1w + (size_t)l * C, g.ln1b + (size_t)l * C, a.fscratch, a.scratch_btc,
                           residual, p.ln1w + (size_t)l * C, l_ln1_mean, l_ln1_rstd, BT, C, stream);
        if (reduce) {
            int n = grad_layer_ranges(&model->config, l, ranges);
            multi_gpu_reduce_ranges(mg, model->grads_memory, ranges, n, stream);
        }
    }
    token_groups_build(&model->token_groups, inputs);
    encoder_backward(g.wte, g.wpe, a.dresidual, &model->token_groups, &model->token_groups_device, B, T, C, stream);
    if (reduce) {
        int n = grad_layer_ranges(&model->config, -1, ranges);
        multi_gpu_reduce_ranges(mg, model->grads_memory, ranges, n, stream);
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
// the 2-D weights only), then the ZeRO-1 all-gather
static void gpt2_update(GPT2* model, MultiGpu* mg, float lr, float beta1, float beta2, float eps, float weight_decay,
                        float grad_scale, int t) {
    AdamWScalars scalars = adamw_step_scalars(lr, beta1, beta2, eps, t);
    uint32_t seed = llmc_hash_u32((uint32_t)t, 0x5EEDu);
    size_t s0 = mg->shard.offset, s1 = mg->shard.offset + mg->shard.size;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) {
        size_t t0 = model->param_offsets[i], t1 = t0 + model->param_sizes[i];
        size_t lo = t0 > s0 ? t0 : s0, hi = t1 < s1 ? t1 : s1;
        if (hi <= lo) { continue; }
        float wd = GPT2_PARAMETER_IS_MATRIX[i] ? weight_decay : 0.0f;
        adamw_update(model->params_memory, model->master_weights, model->grads_memory, model->m_memory, model->v_memory,
                     lo, hi - lo, lo - s0, wd, grad_scale, scalars, seed, model->stream);
    }
    multi_gpu_gather_params(mg, model->params_memory, model->stream);
}

// ----------------------------------------------------------------------------
// checkpoints: model_%08d.bin (rank 0, fp32 values of the parameters) and state_%08d_%05d.bin per
// rank (AdamW m, v of the shard; extra blob = the outlier detectors, then the fp32 master weights)

static void checkpoint_paths(char* model_path, char* state_path, size_t cap, const char* dir, int step, int rank) {
    snprintf(model_path, cap, "%s/model_%08d.bin", dir, step);
    snprintf(state_path, cap, "%s/state_%08d_%05d.bin", dir, step, rank);
}

// loader may be NULL (test_gpt2cu): the data position is then saved as 0
static void gpt2_save(GPT2* model, MultiGpu* mg, const char* dir, int step, const DataLoader* loader, uint64_t rng_state,
                      const TrainerDetectors* detectors) {
    char model_path[4096], state_path[4096];
    checkpoint_paths(model_path, state_path, sizeof(model_path), dir, step, mg->process_rank);
    cudaCheck(cudaStreamSynchronize(model->stream));
    if (mg->process_rank == 0) {
        float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
        gpt2_download_parameters(model, host);
        checkpoint_write(model_path, &model->config, host, model->num_parameters);
        free(host);
    }
    size_t shard = mg->shard.size;
    size_t extra_bytes = state_extra_bytes(shard, model->master_weights != NULL);
    if (!state_extra_fits(extra_bytes)) {
        llmc_die("%s: the fp32 master weights of this rank (%zu bytes) do not fit a training state; use -z 1 over more GPUs or -w 0",
                 state_path, extra_bytes);
    }
    float* m = (float*)mallocCheck(shard * sizeof(float) + 1);
    float* v = (float*)mallocCheck(shard * sizeof(float) + 1);
    char* extra = (char*)mallocCheck(extra_bytes);
    float* master = model->master_weights != NULL ? (float*)mallocCheck(shard * sizeof(float) + 1) : NULL;
    cudaCheck(cudaMemcpy(m, model->m_memory, shard * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(v, model->v_memory, shard * sizeof(float), cudaMemcpyDeviceToHost));
    if (master != NULL) { cudaCheck(cudaMemcpy(master, model->master_weights, shard * sizeof(float), cudaMemcpyDeviceToHost)); }
    state_extra_pack(extra, detectors, master, shard);
    TrainState s = train_state_describe(mg->num_processes, mg->process_rank, mg->zero_stage,
                                        loader != NULL ? loader->should_shuffle : 0, step, rng_state,
                                        loader != NULL ? loader->current_shard_idx : 0,
                                        loader != NULL ? loader->current_sample_idx : 0,
                                        model->num_parameters, mg->shard, extra_bytes);
    train_state_write(state_path, &s, m, v, extra);
    free(master);
    free(m);
    free(v);
    free(extra);
    multi_gpu_barrier(mg);
}

// restores optimizer state, data position (loader may be NULL), RNG and detectors from state_<step>_<rank>.bin
static void gpt2_load_state(GPT2* model, MultiGpu* mg, const char* dir, int step, DataLoader* loader, uint64_t* rng_state,
                            TrainerDetectors* detectors) {
    char model_path[4096], state_path[4096];
    checkpoint_paths(model_path, state_path, sizeof(model_path), dir, step, mg->process_rank);
    size_t shard = mg->shard.size;
    size_t extra_bytes = state_extra_bytes(shard, model->master_weights != NULL);
    TrainState got;
    TrainState expect = train_state_describe(mg->num_processes, mg->process_rank, mg->zero_stage,
                                             loader != NULL ? loader->should_shuffle : 0, step, 0, 0, 0,
                                             model->num_parameters, mg->shard, extra_bytes);
    float* m = (float*)mallocCheck(shard * sizeof(float) + 1);
    float* v = (float*)mallocCheck(shard * sizeof(float) + 1);
    char* extra = (char*)mallocCheck(extra_bytes);
    train_state_read(state_path, &expect, &got, m, v, extra);
    if (got.step != step) { llmc_die("%s: holds step %d, expected %d", state_path, got.step, step); }
    cudaCheck(cudaMemcpy(model->m_memory, m, shard * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(model->v_memory, v, shard * sizeof(float), cudaMemcpyHostToDevice));
    float* master = model->master_weights != NULL ? (float*)mallocCheck(shard * sizeof(float) + 1) : NULL;
    state_extra_unpack(extra, detectors, master, shard);
    if (master != NULL) {
        cudaCheck(cudaMemcpy(model->master_weights, master, shard * sizeof(float), cudaMemcpyHostToDevice));
        free(master);
    }
    if (loader != NULL) { dataloader_resume(loader, (size_t)got.shard_idx, (size_t)got.sample_idx); }
    *rng_state = got.rng_state;
    free(m);
    free(v);
    free(extra);
}

// replaces the parameters with those of a checkpoint of the same shape (resume)
static void gpt2_reload_parameters(GPT2* model, const char* path) {
    int version = 0;
    GPT2Config ckpt_cfg;
    FILE* f = checkpoint_open(path, &ckpt_cfg, &version);
    if (memcmp(&ckpt_cfg, &model->config, sizeof(GPT2Config)) != 0) { llmc_die("%s: a different model shape than this run's model", path); }
    float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
    checkpoint_read_params(f, path, version, host, model->num_parameters);
    fcloseCheck(f, path);
    gpt2_upload_parameters(model, host);
    free(host);
}

// the latest step with a model checkpoint in dir, or -1
static int find_latest_checkpoint(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) { return -1; }
    int latest = -1;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step = -1;
        char tail[8];
        if (sscanf(e->d_name, "model_%8d.bi%1s", &step, tail) == 2 && strlen(e->d_name) == 18 && step > latest) {
            latest = step;
        }
    }
    closedir(d);
    return latest;
}

// -nk: keep only the newest `keep` checkpoints (rank 0 removes model files, each rank its state);
// -nm: never remove a major one (step a multiple of major_every)
static void remove_old_checkpoints(const char* dir, int current_step, int every, int keep, int major_every, int rank) {
    if (keep <= 0 || every <= 0) { return; }
    for (int step = current_step - keep * every; step >= 0; step -= every) {
        if (major_every > 0 && step % major_every == 0) { continue; }
        char model_path[4096], state_path[4096];
        checkpoint_paths(model_path, state_path, sizeof(model_path), dir, step, rank);
        if (rank == 0) { unlink(model_path); }
        unlink(state_path);
    }
}

// ----------------------------------------------------------------------------
// evaluation and sampling

static float gpt2_validate(GPT2* model, DataLoader* loader, int num_batches, MultiGpu* mg) {
    dataloader_reset(loader);
    double sum = 0.0;
    for (int i = 0; i < num_batches; i++) {
        dataloader_next_batch(loader);
        gpt2_forward(model, loader->inputs, loader->targets, 0.0f, 0);
        sum += model->mean_loss;
    }
    float mean = num_batches > 0 ? (float)(sum / num_batches) : 0.0f;
    // average over ranks
    if (mg->num_processes > 1) {
        cudaCheck(cudaMemcpy(model->acts.norm, &mean, sizeof(float), cudaMemcpyHostToDevice));
        multi_gpu_sum_floats(mg, model->acts.norm, 1, model->stream);
        cudaCheck(cudaMemcpyAsync(&mean, model->acts.norm, sizeof(float), cudaMemcpyDeviceToHost, model->stream));
        cudaCheck(cudaStreamSynchronize(model->stream));
        mean /= (float)mg->num_processes;
    }
    return mean;
}

// HellaSwag accuracy over this rank's examples, summed over ranks
static float gpt2_hellaswag(GPT2* model, EvalLoader* eval, MultiGpu* mg) {
    evalloader_reset(eval);
    float counts[2] = {0.0f, 0.0f};  // correct, total
    for (int i = 0; i < eval->num_batches; i++) {
        evalloader_next_batch(eval);
        gpt2_forward(model, eval->inputs, eval->targets, 0.0f, 0);
        counts[0] += (float)evalloader_stat_losses(eval, model->losses_host);
        counts[1] += (float)eval->num_examples_in_batch;
    }
    if (mg->num_processes > 1) {
        cudaCheck(cudaMemcpy(model->acts.norm, counts, sizeof(counts), cudaMemcpyHostToDevice));
        multi_gpu_sum_floats(mg, model->acts.norm, 2, model->stream);
        cudaCheck(cudaMemcpyAsync(counts, model->acts.norm, sizeof(counts), cudaMemcpyDeviceToHost, model->stream));
        cudaCheck(cudaStreamSynchronize(model->stream));
    }
    return counts[1] > 0.0f ? counts[0] / counts[1] : 0.0f;
}

// prints gen_tokens sampled tokens after <|endoftext|> (full B x T forwards, so no KV cache needed)
static void gpt2_sample(GPT2* model, Tokenizer* tokenizer, Sampler* sampler, int gen_tokens, int* gen_buffer, float* logits_row,
                        floatX* logits_staging) {
    const int B = model->B, T = model->T, V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int eot = tokenizer->init_ok ? tokenizer->eot_token : GPT2_VOCAB_SIZE - 1;
    for (int i = 0; i < B * T; i++) { gen_buffer[i] = eot; }
    int n = gen_tokens < T ? gen_tokens : T - 1;
    printf("generating:\n---\n");
    for (int t = 1; t <= n; t++) {
        gpt2_forward(model, gen_buffer, NULL, 0.0f, 0);
        cudaCheck(cudaMemcpy(logits_staging, model->acts.output + (size_t)(t - 1) * Vp, (size_t)V * sizeof(floatX), cudaMemcpyDeviceToHost));
        float_from_floatX_host(logits_row, logits_staging, (size_t)V);
        int next = sampler_sample(sampler, logits_row);
        gen_buffer[t] = next;
        if (tokenizer->init_ok) {
            const char* piece = tokenizer_decode(tokenizer, (uint32_t)next);
            if (piece != NULL) { safe_printf(piece); }
        } else {
            printf("%d ", next);
        }
        fflush(stdout);
    }
    printf("\n---\n");
}

static double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// ----------------------------------------------------------------------------
// main training loop

#ifndef TESTING
int main(int argc, char** argv) {
    TrainArgs args;
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &args, argc, argv,
               "train_gpt2cu: GPT-2 training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)");
    MultiGpu mg;
    multi_gpu_init(&mg, &argc, &argv, args.num_processes, args.process_rank, args.gpus_per_node, args.nccl_init_method,
                   args.server_ip, args.fs_path, args.zero_stage, 0);
    const int rank = mg.process_rank, nproc = mg.num_processes;
    const int B = args.B, T = args.T;
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

    // the model
    GPT2 model;
    if (!file_exists(args.load_filename)) {
        GPT2Config probe;
        const char* why = "";
        if (model_config_from_descriptor(args.load_filename, &probe, &why) == 0) {
            llmc_die("-e %s: no such checkpoint (python train_gpt2.py writes gpt2_124M.bin; or use -e d12 to start from scratch)",
                     args.load_filename);
        }
    }
    gpt2_build(&model, args.load_filename, mg.zero_stage, nproc);
    mg.num_parameters = model.num_parameters;
    mg.shard = zero_shard(model.num_parameters, mg.zero_stage, nproc, rank);
    gpt2_allocate_state(&model, B, T, args.recompute, mg.shard, args.use_master_weights, stream);
    model.gelu_fusion = args.gelu_fusion;  // -ge
    const GPT2Config* cfg = &model.config;
    if (rank == 0) {
        printf("model: L=%d C=%d NH=%d maxT=%d V=%d Vp=%d, %zu parameters, %.2f GiB of activations\n", cfg->num_layers,
               cfg->channels, cfg->num_heads, cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size,
               model.num_parameters, (double)model.acts_bytes / (1024.0 * 1024.0 * 1024.0));
#ifdef ENABLE_CUDNN
        printf("attention: cuDNN flash attention, %.2f GiB of cuDNN workspace\n",
               (double)cudnn_attention_workspace_bytes(model.cudnn) / (1024.0 * 1024.0 * 1024.0));
#endif
    }

    // data
    DataLoader train_loader, val_loader;
    dataloader_init(&train_loader, args.train_data_pattern, B, T, rank, nproc, args.shuffle, cfg->vocab_size);
    int have_val = args.val_data_pattern[0] != '\0' && args.val_loss_every > 0;
    if (have_val) { dataloader_init(&val_loader, args.val_data_pattern, B, T, rank, nproc, 0, cfg->vocab_size); }
    EvalLoader eval_loader;
    int have_eval = args.hellaswag_eval;
    if (have_eval) {
        if (B % 4 != 0) { llmc_die("-h 1: HellaSwag needs -b to be a multiple of 4 (got %d)", B); }
        evalloader_init(&eval_loader, args.hellaswag_path, B, T, rank, nproc);
    }
    const int tokens_per_fwdbwd = B * T * nproc;
    const char* why = "";
    const int grad_accum_steps = grad_accum_steps_for(args.total_batch_size, B, T, nproc, &why);
    if (grad_accum_steps < 0) { llmc_die("-d %d: %s (B*T*processes = %d)", args.total_batch_size, why, tokens_per_fwdbwd); }
    const int total_batch_size = grad_accum_steps * tokens_per_fwdbwd;
    int max_steps = args.max_steps;
    if (max_steps == -1) {
        max_steps = (int)(train_loader.num_tokens / (size_t)total_batch_size);
        if (max_steps < 1) { max_steps = 1; }
    }
    if (rank == 0) {
        printf("batch: %d tokens per step = %d micro-batches of %d x %d on %d process(es); %d steps\n",
               total_batch_size, grad_accum_steps, B, T, nproc, max_steps);
    }

    // schedule, logging, sampling, outliers
    LearningRateScheduler lr_scheduler;
    lr_scheduler_init(&lr_scheduler, args.lr_scheduler_type, args.learning_rate, args.warmup_iterations, max_steps,
                      args.final_learning_rate_frac);
    Logger logger;
    const char* out_dir = args.output_log_dir[0] != '\0' ? args.output_log_dir : NULL;
    if (out_dir != NULL && rank == 0) { mkdir_p_check(out_dir); }
    multi_gpu_barrier(&mg);
    int resume_step = -1;
    if (args.resume) {
        if (out_dir == NULL) { llmc_die("-y 1 needs -o (the directory holding the checkpoints)"); }
        resume_step = find_latest_checkpoint(out_dir);
        if (resume_step < 0 && rank == 0) { printf("resume: no checkpoint in %s, starting from step 0\n", out_dir); }
    }
    logger_init(&logger, out_dir, rank, resume_step >= 0);
    Tokenizer tokenizer;
    tokenizer_init(&tokenizer, "gpt2_tokenizer.bin");
    Sampler sampler;
    sampler_init(&sampler, cfg->vocab_size, 1.0f, 0, 1.0f, 1337);
    TrainerDetectors detectors;
    init_detector(&detectors.loss);
    init_detector(&detectors.grad_norm);
    int start_step = 0;
    if (resume_step >= 0) {
        char model_path[4096], state_path[4096];
        checkpoint_paths(model_path, state_path, sizeof(model_path), out_dir, resume_step, rank);
        gpt2_reload_parameters(&model, model_path);
        gpt2_load_state(&model, &mg, out_dir, resume_step, &train_loader, &sampler.rng_state, &detectors);
        start_step = resume_step;
        if (rank == 0) { printf("resumed from %s at step %d\n", model_path, start_step); }
    }

    int* gen_buffer = (int*)mallocCheck((size_t)B * T * sizeof(int));
    float* logits_row = (float*)mallocCheck((size_t)cfg->vocab_size * sizeof(float));
    floatX* logits_staging = (floatX*)mallocCheck((size_t)cfg->vocab_size * sizeof(floatX));
    const double peak = gpu_peak_flops(dev.name, PRECISION_IS_BF16 ? MFU_BF16 : MFU_TF32);
    const double flops_per_step = gpt2_flops_per_step(model.num_parameters, cfg->num_layers, cfg->channels, T, (size_t)total_batch_size);
    const float dloss = 1.0f / (float)(B * T * grad_accum_steps);
    double total_time = 0.0;
    int timed_steps = 0;

    for (int step = start_step; step <= max_steps; step++) {
        int last_step = step == max_steps;
        if (have_val && step_is_due(step, args.val_loss_every, last_step)) {
            float val_loss = gpt2_validate(&model, &val_loader, args.val_max_steps, &mg);
            if (rank == 0) { printf("step %d: val loss %f\n", step, val_loss); }
            logger_log_val(&logger, step, val_loss);
        }
        if (have_eval && step_is_due(step, args.val_loss_every > 0 ? args.val_loss_every : max_steps, last_step)) {
            float acc = gpt2_hellaswag(&model, &eval_loader, &mg);
            if (rank == 0) { printf("step %d: HellaSwag accuracy %.4f\n", step, acc); }
            logger_log_eval(&logger, step, acc);
        }
        if (rank == 0 && step > 0 && step_is_due(step, args.sample_every, last_step)) {
            gpt2_sample(&model, &tokenizer, &sampler, args.gen_tokens, gen_buffer, logits_row, logits_staging);
        }
        if (out_dir != NULL && step > start_step && step_is_due(step, args.checkpoint_every, last_step)) {
            gpt2_save(&model, &mg, out_dir, step, &train_loader, sampler.rng_state, &detectors);
            remove_old_checkpoints(out_dir, step, args.checkpoint_every, args.checkpoints_keep,
                                   args.checkpoints_major_every, rank);
            if (rank == 0) { printf("wrote checkpoint for step %d to %s\n", step, out_dir); }
        }
        if (last_step) { break; }

        // one optimizer step: grad_accum_steps micro-batches, then the update
        double t0 = wall_seconds();
        cudaCheck(cudaMemsetAsync(model.grads_memory, 0, model.num_parameters * sizeof(floatX), stream));
        double loss_sum = 0.0;
        for (int micro = 0; micro < grad_accum_steps; micro++) {
            if (!(args.overfit_single_batch && (step > 0 || micro > 0))) { dataloader_next_batch(&train_loader); }
            gpt2_forward(&model, train_loader.inputs, train_loader.targets, dloss, 1);
            loss_sum += model.mean_loss;
            gpt2_backward(&model, train_loader.inputs, &mg, micro == grad_accum_steps - 1);
        }
        float step_loss = (float)(loss_sum / grad_accum_steps);
        if (nproc > 1) {
            cudaCheck(cudaMemcpy(model.acts.norm, &step_loss, sizeof(float), cudaMemcpyHostToDevice));
            multi_gpu_sum_floats(&mg, model.acts.norm, 1, stream);
            cudaCheck(cudaMemcpyAsync(&step_loss, model.acts.norm, sizeof(float), cudaMemcpyDeviceToHost, stream));
            cudaCheck(cudaStreamSynchronize(stream));
            step_loss /= (float)nproc;
        }
        float grad_norm = gpt2_grad_norm(&model, &mg);
        double loss_z = update_detector(&detectors.loss, (double)step_loss);
        double norm_z = update_detector(&detectors.grad_norm, (double)grad_norm);
        int skip = update_should_skip(loss_z, norm_z, args.skip_update_lossz, args.skip_update_gradz, grad_norm);
        float lr = get_learning_rate(&lr_scheduler, step);
        if (!skip) {
            float grad_scale = grad_clip_scale(grad_norm, 1.0f);
            gpt2_update(&model, &mg, lr, 0.9f, 0.95f, 1e-8f, args.weight_decay, grad_scale, step + 1);
        }
        cudaCheck(cudaStreamSynchronize(stream));
        double dt = wall_seconds() - t0;
        if (step > start_step) { total_time += dt; timed_steps++; }  // the first step warms up
        char mfu[32];
        mfu_format(mfu, sizeof(mfu), flops_per_step, dt, peak);
        if (rank == 0) {
            printf("step %4d/%d | loss %.6f | norm %6.4f | lr %.2e | %.2f ms | %.0f tok/s | MFU %s%s\n", step + 1, max_steps,
                   step_loss, grad_norm, lr, 1000.0 * dt, total_batch_size / dt, mfu, skip ? " | update skipped (outlier)" : "");
        }
        logger_log_train(&logger, step, step_loss, lr, grad_norm);
    }
    if (rank == 0 && timed_steps > 0) {
        printf("average step time %.3f ms over %d steps\n", 1000.0 * total_time / timed_steps, timed_steps);
    }

    free(gen_buffer);
    free(logits_row);
    free(logits_staging);
    dataloader_free(&train_loader);
    if (have_val) { dataloader_free(&val_loader); }
    if (have_eval) { evalloader_free(&eval_loader); }
    tokenizer_free(&tokenizer);
    sampler_free(&sampler);
    gpt2_free(&model);
    cudaCheck(cudaStreamDestroy(stream));
    multi_gpu_free(&mg);
    return 0;
}
#endif // TESTING
