/*
llmc/cpu/decoder_cpu.h: the CPU model of every pre-norm decoder family (Llama 3, nanochat's GPT, Qwen3), in plain C
with OpenMP. The model is llmc/decoder.h's: what differs between the families is data, the DecoderConfig their
decoder_config hook fills and the DecoderLayout of their tensor table, so one forward and one backward serve them all,
with the switches as plain ifs around the layer calls. Read it top to bottom like train_gpt2.c; the layers are
llmc/cpu/'s, one file per operation as llmc/cuda/'s: the token embedding (encoder_cpu.h), RMSNorm with or without a
weight (rmsnorm_cpu.h), QK-norm (qknorm_cpu.h), RoPE (rope_cpu.h, rotate_half or nanochat's reversed sign), attention
with shared key/value heads (attention_cpu.h), SwiGLU (swiglu_cpu.h) or ReLU^2 (relu2_cpu.h), the linear layer
(matmul.h), the classifier with its softcap (classifier_cpu.h).

Shapes: B batch, T time, C channels, V vocab (not padded), L layers, NH query heads, NKV key/value heads, HS head_dim,
AW = NH HS the attention width, QKV = (NH + 2 NKV) HS, FFN the MLP's hidden size.

    DecoderCpu                    the model: its family (set before allocate), the family's config, the DecoderConfig
                                  and DecoderLayout, views of the parameters and gradients, the activations, the
                                  rotary tables and its CpuModel (llmc/cpu/cpu_model.h: the flat buffers, the optimizer)
    decoder_cpu_calls             its CpuModelCalls, for llmc/cpu/cpu_trainer.h's and llmc/cpu/cpu_test.h's mains:
        allocate(model, config)   the model of the family's config: zeroed parameters and gradients, the tables
        allocate_activations(model, B, T)   for batches of up to B x T tokens (-p bf16: the GEMM inputs' bf16 copies, the
                                  bf16 layout, DECODER_CPU_BF16_ACTIVATION_TENSORS)
        forward(model, inputs, targets, B, T)   the losses (B,T) and their mean, or without targets the logits (B,T,V)
        backward(model, loss_scale)   the gradients of loss_scale x the mean loss, added (or written over stale ones)
        free(model)

A trainer is then its family's description and a main() of two lines:
    DecoderCpu model = {.family = &LLAMA3_FAMILY};
    return cpu_trainer_main(argc, argv, about, &LLAMA3_FAMILY, &model, &decoder_cpu_calls, &model.cpu);
*/
#ifndef LLMC_DECODER_CPU_H
#define LLMC_DECODER_CPU_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../model_family.h"
#include "../decoder.h"
#include "cpu_model.h"
#include "matmul.h"
#include "encoder_cpu.h"
#include "rmsnorm_cpu.h"
#include "qknorm_cpu.h"
#include "rope_cpu.h"
#include "attention_cpu.h"
#include "residual_cpu.h"
#include "swiglu_cpu.h"
#include "relu2_cpu.h"
#include "classifier_cpu.h"

// ----------------------------------------------------------------------------
// the model's tensors

// the parameters' and gradients' named views: llmc/decoder.h's DecoderWeights (decoder_weights)

// The activations of a forward pass, in buffer order: X(type, name, per_layer, per_token, has_grad), each
// (B, T, per_token), (L, B, T, per_token) when per_layer; a per_token of 0 is a tensor this config does not use
// (DECODER_CPU_ACT_DIMS: EMBED_NORM, QK_WEIGHTED, QK_PLAIN, SWIGLU are 1 or 0), and it gets no memory. has_grad: the
// backward keeps its gradient, of one layer only for per_layer tensors (the backward needs one layer's at a time, so
// every layer reuses the same slice, which stays in cache). The residual adds copy their output's gradient to both
// inputs, so the residual stream has one gradient, updated in place from the last layer's output back to the first
// layer's input (encoded's, or x0's with the embed norm). The attention weights are not kept (attention_gqa_backward
// recomputes them from each row's log-sum-exp, att_lse). ln1, ln2 and fch_act are read only by GEMMs (and the norms
// by their own backward right after): each is one slice that every layer reuses, and the backward recomputes a
// layer's from what is kept (its input and rstd; fch, fch2) right before the GEMMs that read it. keep_fp32 (a variable
// where the tables expand): qkv, atty, fch and fch2 per layer in fp32, or the bf16 layout's (below) one slice each,
// with qkv per layer still where the plain QK-norm's backward reads it.
#define DECODER_CPU_ACTIVATION_TENSORS(X) \
    X(float, encoded,    0, C,              1) /* token embeddings */ \
    X(float, x0,         0, EMBED_NORM * C, 1) /* their RMSNorm, the first layer's input (embed_norm) */ \
    X(float, x0_rstd,    0, EMBED_NORM,     0) \
    DECODER_CPU_LAYER_ACTIVATION_TENSORS(X) \
    X(float, lnf,        0, C,              1) /* final RMSNorm */ \
    X(float, lnf_rstd,   0, 1,              0) \
    X(float, losses,     0, 1,              0) /* (the logits: llmc/cpu/classifier_cpu.h, a chunk of rows at a time) */

#define DECODER_CPU_LAYER_ACTIVATION_TENSORS(X) \
    X(float, ln1,        0, C,                       1) /* RMSNorm of the layer's input (one slice: recomputed) */ \
    X(float, ln1_rstd,   1, 1,                       0) \
    X(float, q_in,       1, QK_WEIGHTED * NH * HS,   0) /* the q heads as projected: weighted QK-norm's input */ \
    X(float, k_in,       1, QK_WEIGHTED * NKV * HS,  0) /* the k heads as projected */ \
    X(float, q_rstd,     1, QK_WEIGHTED * NH,        0) /* weighted QK-norm's, per q head */ \
    X(float, k_rstd,     1, QK_WEIGHTED * NKV,       0) /* and per k head */ \
    X(float, qkv,        keep_fp32 || QK_PLAIN, QKV, 1) /* q, k, v heads: q and k rotated and normalised */ \
    X(float, qk_rstd,    1, QK_PLAIN * (NH + NKV),   0) /* plain QK-norm's, per q and k head */ \
    X(float, att_lse,    1, NH,                      0) /* each query head's log-sum-exp of its scores */ \
    X(float, atty,       keep_fp32, AW,              1) /* attention output, before its projection */ \
    X(float, attproj,    0, C,                       0) /* (one slice: only the residual add right after reads it) */ \
    X(float, residual2,  1, C,                       0) /* input + attproj */ \
    X(float, ln2,        0, C,                       1) /* (one slice: recomputed) */ \
    X(float, ln2_rstd,   1, 1,                       0) \
    X(float, fch,        keep_fp32, FFN,             1) /* fc: SwiGLU's gate projection */ \
    X(float, fch2,       keep_fp32, SWIGLU * FFN,    1) /* SwiGLU's up projection */ \
    X(float, fch_act,    0, FFN,                     1) /* silu(gate) * up, or relu(fc)^2 (one slice: recomputed) */ \
    X(float, fcproj,     0, C,                       0) /* (one slice, as attproj) */ \
    X(float, residual3,  1, C,                       0) /* residual2 + fcproj, the layer's output */

// -p bf16 on oneDNN with the blocked attention (llmc/cpu/cpu_model.h's cpu_model_bf16_layout) keeps what only bf16
// readers read in bf16 alone, after the fp32 tensors in the same buffer (llmc/cpu/cpu_model.h's CPU_ACT16_POINT): rows
// X(name, per_layer, per_token), uint16 (B, T, per_token), or (L, B, T, per_token) when per_layer. qkv16 is qkv
// rounded, written by the attention's forward as it rounds q, k, v (which it does anyway: the same bits); atty16 the
// attention's output, written in bf16 (the GEMMs read it rounded anyway; the attention's backward then takes
// D = rowsum(dO o O) from the rounded O); fch16 and fch2_16 are the MLP's projections rounded, the activation's
// input in the forward and in the backward (a change: the fp32 layout's activation reads them unrounded); fch_act16
// the activation's output rounded, one slice (the backward recomputes a layer's from fch16, fch2_16). At Llama 3 d12,
// B=4, T=1024 the peak is 0.58 GB lower.
#define DECODER_CPU_BF16_ACTIVATION_TENSORS(X) \
    X(qkv16,     1, QKV) \
    X(atty16,    1, AW) \
    X(fch16,     1, FFN) \
    X(fch2_16,   1, SWIGLU * FFN) \
    X(fch_act16, 0, FFN)

// the dimension names the activation table is written in, for the DecoderConfig d
#define DECODER_CPU_ACT_DIMS(d) \
    const size_t C = (size_t)(d)->channels, NH = (size_t)(d)->num_heads, NKV = (size_t)(d)->num_kv_heads; \
    const size_t HS = (size_t)(d)->head_dim, AW = NH * HS, QKV = (NH + 2 * NKV) * HS, FFN = (size_t)(d)->ffn_hidden; \
    const size_t EMBED_NORM = (d)->embed_norm != 0, SWIGLU = (d)->mlp == DECODER_MLP_SWIGLU; \
    const size_t QK_WEIGHTED = (d)->qk_norm == DECODER_QKNORM_WEIGHTED, QK_PLAIN = (d)->qk_norm == DECODER_QKNORM_PLAIN; \
    (void)C; (void)NH; (void)NKV; (void)HS; (void)AW; (void)QKV; (void)FFN; \
    (void)EMBED_NORM; (void)SWIGLU; (void)QK_WEIGHTED; (void)QK_PLAIN

typedef struct {
    int bf16; // the bf16 layout: qkv, atty, fch and fch2 kept per layer in bf16 alone (DECODER_CPU_BF16_ACTIVATION_TENSORS)
    DECODER_CPU_ACTIVATION_TENSORS(CPU_ACT_FIELD)
    DECODER_CPU_BF16_ACTIVATION_TENSORS(CPU_ACT16_FIELD)
} DecoderCpuActs;
// one layer's activations (or gradients): residual is the layer's input
typedef struct {
    float* residual;
    DECODER_CPU_LAYER_ACTIVATION_TENSORS(CPU_ACT_FIELD)
    DECODER_CPU_BF16_ACTIVATION_TENSORS(CPU_ACT16_FIELD)
} DecoderCpuLayerActs;

#define DECODER_CPU_CONFIG_BYTES 256

typedef struct {
    const ModelFamily* family;   // whose decoder (llmc/llama3.h's LLAMA3_FAMILY, ...): set before allocate
    _Alignas(max_align_t) unsigned char config[DECODER_CPU_CONFIG_BYTES]; // the family's config (its struct), a copy
    DecoderConfig d;             // the shapes and switches (llmc/decoder.h), from the family's decoder_config
    DecoderLayout layout;        // where each tensor lies in the flat parameters (and gradients)
    DecoderWeights params;    // the whole tensors' views of cpu's flat buffers: weights, gradients,
    DecoderWeights grads;
    DecoderCpuActs acts;         // activations and their gradients (has_grad tensors only)
    DecoderCpuActs grads_acts;
    float* rope_cos;             // (maxT, HS/2)
    float* rope_sin;
    // the flat buffers, the optimizer state (AdamW, or -op muon: Muon on each layer's matrices, AdamW on wte, lm_head
    // and the norms' weights) and the current batch (llmc/cpu/cpu_model.h)
    CpuModel cpu;
} DecoderCpu;

// layer l's view of the activations (or of their gradients) of the current B x T tokens
static DecoderCpuLayerActs decoder_cpu_layer_acts(const DecoderCpuActs* a, const DecoderConfig* d, int B, int T, int l) {
    DECODER_CPU_ACT_DIMS(d);
    size_t BT = (size_t)B * T;
    int keep_fp32 = !a->bf16;
    DecoderCpuLayerActs v;
    float* first_input = d->embed_norm ? a->x0 : a->encoded;
    v.residual = l == 0 ? first_input : a->residual3 + (size_t)(l - 1) * BT * C;
    DECODER_CPU_LAYER_ACTIVATION_TENSORS(CPU_ACT_LAYER)
    DECODER_CPU_BF16_ACTIVATION_TENSORS(CPU_ACT16_LAYER)
    return v;
}

// the model of this config (the family's struct): its parameters (zeroed) and gradients, the rotary tables
// (llmc/cpu/cpu_trainer.h's cpu_model_build fills the parameters: -e's model file, or the family's init from scratch)
static void decoder_cpu_allocate(void* m, const void* config) {
    DecoderCpu* model = (DecoderCpu*)m;
    const ModelFamily* family = model->family;
    if (family == NULL) { llmc_die("internal: a DecoderCpu needs its family before decoder_cpu_allocate"); }
    if (family->model_file->config_size > sizeof(model->config)) {
        llmc_die("internal: %s's config of %zu bytes is larger than DecoderCpu's %d", family->name,
                 (size_t)family->model_file->config_size, DECODER_CPU_CONFIG_BYTES);
    }
    memcpy(model->config, config, family->model_file->config_size);
    decoder_config(family, model->config, &model->d);
    decoder_layout(family, model->config, &model->layout);
    cpu_model_init(&model->cpu, family, model->config, model->d.vocab_size, model->d.max_seq_len);
    model->params = decoder_weights(model->cpu.params_memory, &model->layout, 0);
    model->grads = decoder_weights(model->cpu.grads_memory, &model->layout, 0);
    model->cpu.lazy_zero_grad = 1; // decoder_cpu_backward overwrites stale gradients (llmc/cpu/cpu_model.h)
    decoder_rope_tables(&model->d, &model->rope_cos, &model->rope_sin); // llmc/cpu/rope_cpu.h
}

// points the activations (grads = 1: their gradients, has_grad tensors only, one layer's of the per-layer ones) for
// B x T tokens into memory; returns how many floats they take (memory NULL: only counts)
static size_t decoder_cpu_point_activations(void* m, float* memory, int B, int T, int grads) {
    DecoderCpu* model = (DecoderCpu*)m;
    DecoderCpuActs* a = grads ? &model->grads_acts : &model->acts;
    DECODER_CPU_ACT_DIMS(&model->d);
    const size_t L = grads ? 1 : (size_t)model->d.num_layers;
    size_t BT = (size_t)B * T, n = 0;
    a->bf16 = model->acts.bf16;
    int keep_fp32 = !a->bf16;
    DECODER_CPU_ACTIVATION_TENSORS(CPU_ACT_POINT)
    DECODER_CPU_BF16_ACTIVATION_TENSORS(CPU_ACT16_POINT)
    return n;
}

// activations and their gradients for batches of up to B x T tokens, in the layout of the precision set now (the
// forward pass allocates them again if it changes); the logits, when a forward pass keeps them, are (B,T,V), capped
// when the softcap is on
static void decoder_cpu_allocate_activations(void* m, int B, int T) {
    DecoderCpu* model = (DecoderCpu*)m;
    model->acts.bf16 = cpu_model_bf16_layout();
    cpu_model_allocate_activations(&model->cpu, B, T, decoder_cpu_point_activations, model);
    // what the GEMMs read besides the weights: -p bf16 keeps a bf16 copy of each, written by the layer that writes it
    // (the residual stream's gradient is the first layer input's: x0's with the embed norm, else encoded's)
    DECODER_CPU_ACT_DIMS(&model->d);
    size_t L = (size_t)model->d.num_layers, BT = (size_t)B * T;
    const DecoderCpuActs* a = &model->acts;
    const DecoderCpuActs* g = &model->grads_acts;
    const float* dres = model->d.embed_norm ? g->x0 : g->encoded;
    // (GEMMs alone read the norms' outputs, the MLP's activation and the gradients of its fc layers: with the bf16
    // activations those are written in bf16 alone; the bf16 layout's atty16 and fch_act16 are the GEMMs' operands
    // themselves)
    const float* shadowed[] = {a->ln1, a->ln2, a->lnf, dres, g->qkv, g->fch, g->fch2, a->atty, a->fch_act};
    const size_t sizes[] = {BT * C, BT * C, BT * C, BT * C, BT * QKV, BT * FFN, BT * FFN, L * BT * AW, BT * FFN};
    const int alone[] = {1, 1, 1, 0, 0, 1, 1, 0, 1};
    for (int i = 0; i < (model->acts.bf16 ? 7 : 9); i++) {
        if (shadowed[i] == NULL) { continue; } // (ReLU^2 has no up projection)
        cpu_model_shadow_activation(&model->cpu, shadowed[i], sizes[i], alone[i]);
    }
    cpu_model_set_output(&model->cpu, model->d.vocab_size, model->acts.losses);
}

// the classifier (llmc/cpu/classifier_cpu.h): lnf through the lm_head (wte when tied) and the softcap (when not 0)
// into the losses; its gradients into lnf's and the lm_head's
static CpuClassifier decoder_cpu_classifier(DecoderCpu* model) {
    const DecoderConfig* d = &model->d;
    CpuClassifier k = {model->acts.lnf, model->params.lm_head, model->grads_acts.lnf, model->grads.lm_head,
                       model->acts.losses, d->softcap, d->channels, d->vocab_size};
    return k;
}

// ----------------------------------------------------------------------------
// forward and backward

// Forward pass on inputs (B,T); with targets (B,T) also the per-token losses and their mean (and the classifier's
// gradients when a backward pass follows, cpu_model_expect_backward); without, the logits (model->cpu.logits).
// B x T may be smaller than what the activations were allocated for.
static void decoder_cpu_forward(void* m, const int* inputs, const int* targets, int B, int T) {
    DecoderCpu* model = (DecoderCpu*)m;
    if (model->cpu.acts_memory != NULL && model->acts.bf16 != cpu_model_bf16_layout()) {
        // the precision changed since the activations were allocated (the trainer's -p bf16 calibration, pyllmc)
        int B_max = model->cpu.batch_size, T_max = model->cpu.seq_len;
        cpu_model_free_activations(&model->cpu);
        decoder_cpu_allocate_activations(model, B_max, T_max);
    }
    cpu_model_begin_forward(&model->cpu, inputs, targets, B, T); // ids checked, the batch kept for the backward
    const DecoderConfig* d = &model->d;
    int L = d->num_layers, NH = d->num_heads, NKV = d->num_kv_heads, C = d->channels;
    int HS = d->head_dim, AW = NH * HS, QKV = (NH + 2 * NKV) * HS, FFN = d->ffn_hidden, BT = B * T;
    float eps = d->norm_eps;
    const float* cos = model->rope_cos;
    const float* sin = model->rope_sin;

    DecoderWeights p = model->params;
    DecoderCpuActs acts = model->acts;
    encoder_forward(acts.encoded, inputs, p.wte, NULL, B, T, C);                                // (B,T,C)
    if (d->embed_norm) { rmsnorm_forward(acts.x0, acts.x0_rstd, acts.encoded, NULL, eps, B, T, C); } // (B,T,C)
    DecoderWeights w0 = decoder_weights(model->cpu.params_memory, &model->layout, 0);
    DecoderCpuLayerActs a0 = decoder_cpu_layer_acts(&model->acts, d, B, T, 0);
    rmsnorm_forward(a0.ln1, a0.ln1_rstd, a0.residual, w0.ln1w, eps, B, T, C); // the first layer's ln1 (B,T,C)
    for (int l = 0; l < L; l++) {
        DecoderWeights w = decoder_weights(model->cpu.params_memory, &model->layout, l); // norm weights: NULL when none
        DecoderCpuLayerActs a = decoder_cpu_layer_acts(&model->acts, d, B, T, l);
        // attention block (ln1: the previous layer's residual pass wrote it)
        matmul_forward(a.qkv, a.ln1, w.qkvw, NULL, B, T, C, QKV);                                   // (B,T,QKV)
        if (d->qk_norm == DECODER_QKNORM_WEIGHTED) { // before RoPE, each with its weight (Qwen3)
            qknorm_forward(a.qkv, a.q_rstd, a.q_in, w.qnormw, BT, QKV, NH, HS, eps);               // q heads
            qknorm_forward(a.qkv + AW, a.k_rstd, a.k_in, w.knormw, BT, QKV, NKV, HS, eps);         // k heads
        }
        if (d->rope == DECODER_ROPE_HALF) {
            rope_forward(a.qkv, cos, sin, B, T, QKV, NH + NKV, HS);                                 // q and k heads
        } else {
            rope_reverse_forward(a.qkv, cos, sin, B, T, QKV, NH + NKV, HS);                         // q and k heads
        }
        if (d->qk_norm == DECODER_QKNORM_PLAIN) { // after RoPE, no weight (nanochat)
            qknorm_forward(a.qkv, a.qk_rstd, NULL, NULL, BT, QKV, NH + NKV, HS, eps);               // q and k heads
        }
        if (acts.bf16) { // qkv rounded into the layer's bf16 slice as the attention reads it; its output in bf16 alone
            attention_gqa_forward_bf16(a.atty16, a.att_lse, a.qkv, a.qkv16, B, T, NH, NKV, HS);
            matmul_forward_bf16_input(a.attproj, a.atty16, w.attprojw, NULL, B, T, AW, C);
        } else {
            attention_gqa_forward(a.atty, a.att_lse, a.qkv, B, T, NH, NKV, HS);                     // (B,T,AW)
            matmul_forward(a.attproj, a.atty, w.attprojw, NULL, B, T, AW, C);                       // (B,T,C)
        }
        // MLP block: residual2 = residual + attproj, ln2 = rmsnorm(residual2) in one pass
        fused_residual_rmsnorm_forward(a.residual2, a.ln2, a.ln2_rstd, a.residual, a.attproj, w.ln2w, eps, B, T, C);
        matmul_forward(a.fch, a.ln2, w.fcw, NULL, B, T, C, FFN);                                    // (B,T,FFN)
        if (d->mlp == DECODER_MLP_SWIGLU) {
            matmul_forward(a.fch2, a.ln2, w.fcw2, NULL, B, T, C, FFN);                              // (B,T,FFN)
        }
        if (acts.bf16) { // the projections kept in bf16 alone, the activation's input; its output rounded for the GEMM
            if (d->mlp == DECODER_MLP_SWIGLU) {
                swiglu_forward_bf16(a.fch_act16, a.fch16, a.fch2_16, a.fch, a.fch2, (size_t)BT * FFN);
            } else {
                relu2_forward_bf16(a.fch_act16, a.fch16, a.fch, (size_t)BT * FFN);
            }
            matmul_forward_bf16_input(a.fcproj, a.fch_act16, w.fcprojw, NULL, B, T, FFN, C);
        } else {
            if (d->mlp == DECODER_MLP_SWIGLU) {
                swiglu_forward(a.fch_act, a.fch, a.fch2, (size_t)BT * FFN);                         // (B,T,FFN)
            } else {
                relu2_forward(a.fch_act, a.fch, (size_t)BT * FFN);                                  // (B,T,FFN)
            }
            matmul_forward(a.fcproj, a.fch_act, w.fcprojw, NULL, B, T, FFN, C);                     // (B,T,C)
        }
        // residual3 = residual2 + fcproj, and the next layer's ln1 (lnf after the last) in one pass
        if (l + 1 < L) {
            DecoderWeights wn = decoder_weights(model->cpu.params_memory, &model->layout, l + 1);
            DecoderCpuLayerActs an = decoder_cpu_layer_acts(&model->acts, d, B, T, l + 1);
            fused_residual_rmsnorm_forward(a.residual3, an.ln1, an.ln1_rstd, a.residual2, a.fcproj, wn.ln1w, eps, B, T, C);
        } else {
            fused_residual_rmsnorm_forward(a.residual3, acts.lnf, acts.lnf_rstd, a.residual2, a.fcproj, p.lnfw, eps, B, T,
                                           C);
        }
    }
    CpuClassifier k = decoder_cpu_classifier(model);
    cpu_classifier_forward(&model->cpu, &k, targets); // the logits (B,T,V) a chunk of rows at a time, the losses (B,T)
    cpu_model_end_forward(&model->cpu, targets != NULL);
}

// the floats of the family's tensor called name (its gradient's size)
static size_t decoder_cpu_tensor_floats(const DecoderCpu* model, const char* name) {
    for (int i = 0; i < model->family->num_tensors; i++) {
        if (strcmp(model->family->tensor_names[i], name) == 0) { return model->cpu.param_sizes[i]; }
    }
    llmc_die("internal: %s has no tensor %s", model->family->name, name);
    return 0;
}

// Backward pass of the last forward (with targets); gradients of loss_scale * mean loss are ADDED to model->grads, or
// written over them when they are stale (cpu_model_zero_grad). dres, the residual stream's gradient, is each residual
// add's output gradient and so also its branch's (attproj's, fcproj's); the RMSNorms add their input gradients to it.
// Each activation gradient is written before it is read.
static void decoder_cpu_backward(void* m, float loss_scale) {
    DecoderCpu* model = (DecoderCpu*)m;
    DecoderWeights p = model->params, g = model->grads;
    DecoderCpuActs acts = model->acts, gacts = model->grads_acts;
    cpu_model_begin_backward(&model->cpu);
    const DecoderConfig* d = &model->d;
    int B = model->cpu.cur_B, T = model->cpu.cur_T, BT = B * T;
    int L = d->num_layers, NH = d->num_heads, NKV = d->num_kv_heads, C = d->channels;
    int HS = d->head_dim, AW = NH * HS, QKV = (NH + 2 * NKV) * HS, FFN = d->ffn_hidden;
    const float* cos = model->rope_cos;
    const float* sin = model->rope_sin;
    // stale gradients: the weight GEMMs overwrite theirs (every matrix, each layer's slice, once; the lm_head's the
    // classifier's), the norms' weights and the untied wte only add, so they start from zero
    int fresh = model->cpu.grads_stale;
    if (fresh) {
        float* const norm_weights[] = {g.ln1w, g.qnormw, g.knormw, g.ln2w, g.lnfw};
        const char* const names[] = {"ln1w", "qnormw", "knormw", "ln2w", "lnfw"};
        for (int i = 0; i < 5; i++) {
            if (norm_weights[i] != NULL) { zero_floats(norm_weights[i], decoder_cpu_tensor_floats(model, names[i])); }
        }
        if (!d->tied_embeddings) { zero_floats(g.wte, decoder_cpu_tensor_floats(model, "wte")); }
    }
    float beta = fresh ? 0.0f : 1.0f; // the weight gradients'
    // the classifier: dlnf and the lm_head's gradient (in the forward pass already when it knew this backward follows)
    CpuClassifier k = decoder_cpu_classifier(model);
    cpu_classifier_backward(&model->cpu, &k, loss_scale);
    model->cpu.grads_stale = 0;
    DecoderCpuLayerActs last = decoder_cpu_layer_acts(&model->acts, d, B, T, L - 1);
    float* dres = d->embed_norm ? gacts.x0 : gacts.encoded; // (B,T,C): the last layer's output gradient first
    rmsnorm_backward_into(dres, g.lnfw, gacts.lnf, last.residual3, p.lnfw, acts.lnf_rstd, B, T, C, 0);

    DecoderCpuLayerActs da = decoder_cpu_layer_acts(&model->grads_acts, d, B, T, 0); // every layer's slice
    for (int l = L - 1; l >= 0; l--) {
        DecoderWeights w = decoder_weights(model->cpu.params_memory, &model->layout, l);
        DecoderWeights dw = decoder_weights(model->cpu.grads_memory, &model->layout, l);
        DecoderCpuLayerActs a = decoder_cpu_layer_acts(&model->acts, d, B, T, l);
        // MLP block, in reverse: dres is residual3's gradient, and fcproj's. fch_act's gradient first, then the
        // forward's fch_act again (what fcprojw's gradient reads) in the pass of the activation's backward, then
        // fcprojw's gradient
        matmul_backward_input(da.fch_act, dres, w.fcprojw, B, T, FFN, C, 0.0f);
        size_t nh = (size_t)BT * FFN;
        if (acts.bf16) { // from the projections in bf16
            if (d->mlp == DECODER_MLP_SWIGLU) {
                swiglu_recompute_backward_bf16(a.fch_act16, da.fch, da.fch2, da.fch_act, a.fch16, a.fch2_16, nh);
            } else {
                relu2_recompute_backward_bf16(a.fch_act16, da.fch, a.fch16, da.fch_act, nh);
            }
            matmul_backward_weight_bf16_input(dw.fcprojw, NULL, dres, a.fch_act16, B, T, FFN, C, beta);
        } else {
            if (d->mlp == DECODER_MLP_SWIGLU) {
                swiglu_recompute_backward(a.fch_act, da.fch, da.fch2, da.fch_act, a.fch, a.fch2, nh);
            } else {
                relu2_recompute_backward(a.fch_act, da.fch, a.fch, da.fch_act, nh);
            }
            matmul_backward_weight(dw.fcprojw, dres, a.fch_act, B, T, FFN, C, beta);
        }
        rmsnorm_recompute(a.ln2, a.residual2, a.ln2_rstd, w.ln2w, B, T, C);                                // (B,T,C)
        matmul_backward_into(da.ln2, dw.fcw, NULL, da.fch, a.ln2, w.fcw, B, T, C, FFN, 0.0f, beta);
        if (d->mlp == DECODER_MLP_SWIGLU) {
            matmul_backward_into(da.ln2, dw.fcw2, NULL, da.fch2, a.ln2, w.fcw2, B, T, C, FFN, 1.0f, beta);
        }
        rmsnorm_backward(dres, dw.ln2w, da.ln2, a.residual2, w.ln2w, a.ln2_rstd, B, T, C);
        // attention block, in reverse: dres is residual2's gradient, and attproj's
        if (acts.bf16) { // from qkv and the attention's output in bf16; dqkv written (never added to)
            matmul_backward_into_bf16_input(da.atty, dw.attprojw, NULL, dres, a.atty16, w.attprojw, B, T, AW, C, 0.0f,
                                            beta);
            attention_gqa_backward_bf16(da.qkv, NULL, 0.0f, da.atty, a.qkv16, a.atty16, a.att_lse, B, T, NH, NKV, HS, 0);
        } else {
            matmul_backward_into(da.atty, dw.attprojw, NULL, dres, a.atty, w.attprojw, B, T, AW, C, 0.0f, beta);
            attention_gqa_backward_into(da.qkv, da.atty, a.qkv, a.atty, a.att_lse, B, T, NH, NKV, HS, 0); // (written)
        }
        if (d->qk_norm == DECODER_QKNORM_PLAIN) { // from its output (qkv) and rstd
            qknorm_backward(da.qkv, NULL, a.qkv, NULL, NULL, a.qk_rstd, BT, QKV, NH + NKV, HS);
        }
        if (d->rope == DECODER_ROPE_HALF) {
            rope_backward(da.qkv, cos, sin, B, T, QKV, NH + NKV, HS);
        } else {
            rope_reverse_backward(da.qkv, cos, sin, B, T, QKV, NH + NKV, HS);
        }
        if (d->qk_norm == DECODER_QKNORM_WEIGHTED) { // from its inputs, rstd and weights
            qknorm_backward(da.qkv, dw.qnormw, NULL, a.q_in, w.qnormw, a.q_rstd, BT, QKV, NH, HS);
            qknorm_backward(da.qkv + AW, dw.knormw, NULL, a.k_in, w.knormw, a.k_rstd, BT, QKV, NKV, HS);
        }
        rmsnorm_recompute(a.ln1, a.residual, a.ln1_rstd, w.ln1w, B, T, C);                                 // (B,T,C)
        matmul_backward_into(da.ln1, dw.qkvw, NULL, da.qkv, a.ln1, w.qkvw, B, T, C, QKV, 0.0f, beta);
        rmsnorm_backward(dres, dw.ln1w, da.ln1, a.residual, w.ln1w, a.ln1_rstd, B, T, C); // the layer input's gradient
    }
    if (d->embed_norm) { // through the embeddings' RMSNorm
        rmsnorm_backward_into(gacts.encoded, NULL, dres, acts.encoded, NULL, acts.x0_rstd, B, T, C, 0);
        dres = gacts.encoded;
    }
    encoder_backward(g.wte, NULL, dres, model->cpu.inputs, B, T, C);
}

static void decoder_cpu_free(void* m) {
    DecoderCpu* model = (DecoderCpu*)m;
    free(model->rope_cos);
    free(model->rope_sin);
    cpu_model_free(&model->cpu);
}

// the model's calls for the programs around it (llmc/cpu/cpu_model.h's CpuModelCalls: each takes the DecoderCpu as
// void*)
static const CpuModelCalls decoder_cpu_calls = {
    .allocate = decoder_cpu_allocate, .allocate_activations = decoder_cpu_allocate_activations,
    .forward = decoder_cpu_forward, .backward = decoder_cpu_backward, .free = decoder_cpu_free,
};

#endif // LLMC_DECODER_CPU_H
