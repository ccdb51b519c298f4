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
forward and backward (GPT2_CALLS, at the end).
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
#include "llmc/cuda/gpu_trainer.cuh"  // the flat buffers, ZeRO-1, the update, NCCL, the training state, start-up

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

typedef struct { GPU_ACTIVATIONS(GPU_ACT_FIELD) } ActivationTensors;

// one layer's activations: residual is its input (encoded, or the previous layer's residual3),
// the others are layer l's slices (without the L)
typedef struct { floatX* residual; GPU_LAYER_ACTIVATIONS(GPU_ACT_FIELD) } LayerActs;

// Points the activations for micro-batches of B x T at recompute level -r into memory (NULL:
// only counts), each tensor 256-byte aligned; returns the bytes they take.
static size_t point_activations(ActivationTensors* a, char* memory, const GPT2Config* cfg, int B, int T, int recompute) {
    size_t BT = (size_t)B * T, C = cfg->channels, NH = cfg->num_heads, L = cfg->num_layers, Vp = cfg->padded_vocab_size;
    size_t ln_layers = recompute >= 2 ? 1 : L, gelu_layers = recompute >= 1 ? 1 : L;
    size_t offset = 0;
    GPU_ACTIVATIONS(GPU_ACT_POINT)
    return offset;
}

// a GPU model (llmc/cuda/gpu_trainer.cuh: the tensor table, the flat parameters and gradients, the optimizer
// state, the batch buffers, cuBLAS, the stream) with GPT-2's shape, named views and activations (recomputed
// at -r 1: GELU, -r 2: GELU + layernorms)
struct GPT2 : GpuModelOf<GPT2Config, ParameterTensors, ActivationTensors> {
    int gelu_fusion;           // -ge 1: GELU fused into the cuBLASLt epilogues (forward and backward)
};

// the table (llmc/model_config.h) as gpu_trainer.cuh reads it
static void gpt2_init_common(GPT2* model, const GPT2Config* cfg) {
    memset(model, 0, sizeof(*model));
    size_t sizes[GPT2_NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(sizes, cfg);
    gpu_model_init(model, sizes, GPT2_NUM_PARAMETER_TENSORS, GPT2_PARAMETER_NAMES, GPT2_PARAMETER_IS_MATRIX,
                   GPT2_PARAMETER_PER_LAYER, cfg->num_layers, cfg->vocab_size);
    model->config = *cfg;
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
    gpu_model_allocate_parameters(model, zero_stage, nproc);
    gpt2_point_parameters(&model->params, model->params_memory, &model->config);
    gpt2_point_parameters(&model->grads, model->grads_memory, &model->config);
    float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
    if (kind == 1) {
        gpt2_init_params_from_scratch(host, &model->config, TRAINER_INIT_SEED);  // llmc/init.h, as train_gpt2.c
    } else {
        model_file_read_params(f, load, version, host, model->num_parameters);
        fcloseCheck(f, load);
    }
    gpu_model_set_init_params(model, host);
}

// -op muon: Muon on the blocks' 2-D weights (the 4 L matrices of muon_plan) with these settings; owners = the
// number of processes under ZeRO-1 (each rank updates whole matrices, balanced by size), else 1. Call before
// gpt2_allocate_state.
static void gpt2_use_muon(GPT2* model, const MuonConfig* settings, int owners, int rank) {
    MuonMatrix* mats = (MuonMatrix*)mallocCheck(4 * (size_t)model->config.num_layers * sizeof(MuonMatrix));
    size_t state_size = 0;
    int count = muon_plan(&model->config, owners, rank, mats, &state_size);
    gpu_model_use_muon(model, settings, mats, count, state_size);
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
    const char* why = cudnn_att_shape_error(B, T, cfg->num_heads, cfg->num_heads, cfg->channels / cfg->num_heads);
    if (why != NULL) { llmc_die("-b %d -t %d with %d heads of size %d: cuDNN attention cannot run it: %s", B, T,
                                cfg->num_heads, cfg->channels / cfg->num_heads, why); }
#endif
    model->gelu_fusion = 0;
    size_t bytes = point_activations(&model->acts, NULL, cfg, B, T, recompute);
    char* memory = gpu_model_allocate_activations(model, bytes, recompute, B * T, cfg->padded_vocab_size);
    point_activations(&model->acts, memory, cfg, B, T, recompute);
    model->logits = model->acts.output;  // (B, T, Vp)
    model->logits_stride = (size_t)cfg->padded_vocab_size;
    model->norm_scratch = model->acts.norm;
    gpu_model_allocate_state(model, B, T, shard, use_master_weights, stream);
    gpu_model_prepare_attention(model, B, T, cfg->num_heads, cfg->num_heads, cfg->channels / cfg->num_heads, stream);
}

static void gpt2_free(GPT2* model) { gpu_model_free(model); }

// ----------------------------------------------------------------------------
// forward, backward, update

// layer l's view of the activations
static LayerActs gpt2_layer_acts(const GPT2* model, int l) {
    const ActivationTensors* a = &model->acts;
    int B = model->B, T = model->T;
    size_t BT = (size_t)B * T, C = model->config.channels, NH = model->config.num_heads, L = model->config.num_layers;
    size_t ln_layers = model->recompute >= 2 ? 1 : L, gelu_layers = model->recompute >= 1 ? 1 : L;
    LayerActs v;
    v.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
    GPU_LAYER_ACTIVATIONS(GPU_ACT_LAYER)
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
    gpu_model_upload_batch(model, inputs, targets);
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
        cudnn_attention_forward(model->cudnn, a.atty, a.att_stats, a.qkvr, B, T, NH, NH, C / NH, !write_dlogits);
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
    gpu_model_loss(model, targets, acts.losses, dloss, V, write_dlogits);
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
        cudnn_attention_backward(model->cudnn, acts.scratch_bt4c, acts.scratch_btc, a.qkvr, a.atty, a.att_stats, B, T, NH, NH, C / NH);
#else
        attention_backward(ctx, acts.scratch_bt4c, acts.dqkvr, acts.datt, acts.dy, acts.scratch_btc, a.qkvr, a.att, B, T, C, NH);
#endif
        matmul_backward(ctx, acts.scratch_btc, dw.qkvw, dw.qkvb, acts.scratch_bt4c, a.ln1, w.qkvw, acts.fscratch, BT, C, 3 * C, NULL);
        layernorm_backward(acts.dresidual, dw.ln1w, dw.ln1b, acts.fscratch, acts.scratch_btc, a.residual, w.ln1w,
                           a.ln1_mean, a.ln1_rstd, BT, C, stream);
        if (reduce) {
            int n = gpu_model_layer_ranges(model, l, ranges);
            gpu_model_reduce_ranges(model, mg, ranges, n);
        }
    }
    token_groups_build(&model->token_groups, inputs);
    encoder_backward(g.wte, g.wpe, acts.dresidual, &model->token_groups, &model->token_groups_device, B, T, C, stream);
    if (reduce) {
        int n = gpu_model_layer_ranges(model, -1, ranges);
        gpu_model_reduce_ranges(model, mg, ranges, n);
    }
}

// ----------------------------------------------------------------------------
// what GPT-2 brings to llmc/cuda/gpu_trainer.cuh's GpuTrainer (and through it to llmc/trainer.h's loop)

static void gpt2_write_model(const GPT2* model, const char* path, const float* params) {
    checkpoint_write(path, &model->config, params, model->num_parameters);
}

GPU_MODEL_CALLS(GPT2_CALLS, GPT2, gpt2)

// ----------------------------------------------------------------------------
// main

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    // the flags, -op, the processes, the GPU, the banner, the data; the model to load in run.model_path
    TrainArgs args;
    GpuTrainerRun run;
    gpu_trainer_prepare(&run, &args, TRAIN_ARG_TABLE, &argc, &argv, "train_gpt2cu",
                        "train_gpt2cu: GPT-2 training on NVIDIA GPUs (bf16 mixed precision, multi-GPU with NCCL)");
    GPT2Config probe;
    const char* why = "";
    if (!file_exists(run.model_path) && model_config_from_descriptor(run.model_path, &probe, &why) == 0) {
        llmc_die("-e %s: no such checkpoint (python train_gpt2.py writes gpt2_124M.bin; or use -e d12 to start from scratch)",
                 run.model_path);
    }
    GPT2 model;
    gpt2_build(&model, run.model_path, run.mg.zero_stage, run.mg.num_processes);
    gpu_trainer_allocate(&run, &model, GPT2_CALLS);  // the shard, -op muon, the state
    model.gelu_fusion = args.gelu_fusion;  // -ge
    const GPT2Config* cfg = &model.config;
    if (run.mg.process_rank == 0) {
        printf("model: %s L=%d C=%d NH=%d maxT=%d V=%d Vp=%d, %zu parameters, %.2f GiB of activations\n", run.model_path,
               cfg->num_layers, cfg->channels, cfg->num_heads, cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size,
               model.num_parameters, (double)model.acts_bytes / (1024.0 * 1024.0 * 1024.0));
#ifdef ENABLE_CUDNN
        printf("attention: cuDNN flash attention, %.2f GiB of cuDNN workspace\n",
               (double)cudnn_attention_workspace_bytes(model.cudnn) / (1024.0 * 1024.0 * 1024.0));
#endif
    }

    return gpu_trainer_train(&run, &model, GPT2_CALLS, cfg->channels);
}
#endif // LLMC_NO_MAIN
