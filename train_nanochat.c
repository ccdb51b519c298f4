/*
train_nanochat.c: nanochat's GPT trained on the CPU, in plain C with OpenMP.

Read it top to bottom, like train_llama3.c (the layers are llmc/cpu/'s, one file per operation as llmc/cuda/'s:
the token embedding (encoder_cpu.h), weightless RMSNorm (rmsnorm_cpu.h, a NULL weight), QK-norm (qknorm_cpu.h),
NanoChat's RoPE sign (rope_cpu.h's rope_reverse_*), ReLU^2 (relu2_cpu.h), attention with shared key/value heads
(attention_cpu.h), the logit softcap in the classifier (classifier_cpu.h)):
  1. the model: flat parameter / gradient / activation buffers with named pointers (the family: the file
     format and the parameter table, in llmc/nanochat.h)
  2. forward, backward; the update (AdamW, or Muon on the blocks' matrices), gradient norm, training state,
     MPI and ZeRO-1 are llmc/cpu/cpu_trainer.h's, as for GPT-2 and Llama 3
  3. the training program: the same loop (llmc/trainer.h) and command line (llmc/args.h) as ./train_gpt2

Shapes: B batch, T time, C channels, V vocab (not padded), L layers, NH query heads, NKV key/value heads,
HS = C / NH, QKV = (NH + 2 NKV) HS, FFN the MLP's hidden size.

The model matches train_nanochat.py and transformers' NanoChatForCausalLM: the embeddings normalised
(weightless RMSNorm), pre-norm blocks (weightless), q and k rotated (NanoChat's rotate_half) then normalised
per head (QK-norm), causal attention with NH/NKV query heads per key/value head scaled by 1/sqrt(HS), MLP
fcproj(relu(fc(x))^2), no biases, a final weightless RMSNorm, an lm_head untied from wte, logits capped as
cap * tanh(logits / cap) when the model file's softcap is not 0, loss = mean cross-entropy over B*T tokens.

Usage (./train_nanochat --help lists every flag with its default):
  ./train_nanochat -e d2 -i <gpt-2 train shards> -j <val shards>   d2 from scratch (V = 50304)
  ./train_nanochat -e nanochat_d2.bin ...                           a model file written by train_nanochat.py
  ./train_nanochat -op muon -ol 0.02 ...                            Muon on qkvw, attprojw, fcw, fcprojw, AdamW on wte, lm_head
  mpirun -np 2 ./train_nanochat -b 2 -z 1 ...                       2 processes, each half the batch, ZeRO-1
test_nanochat.c includes this file with LLMC_NO_MAIN defined.
*/
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "llmc/utils.h"
#include "llmc/adamw.h"
#include "llmc/rand.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/encoder_cpu.h"
#include "llmc/cpu/rmsnorm_cpu.h"
#include "llmc/cpu/qknorm_cpu.h"
#include "llmc/cpu/rope_cpu.h"
#include "llmc/cpu/attention_cpu.h"
#include "llmc/cpu/residual_cpu.h"
#include "llmc/cpu/relu2_cpu.h"
#include "llmc/cpu/classifier_cpu.h"
#include "llmc/nanochat.h"
#include "llmc/tokenizer.h"

#include "llmc/cpu/cpu_trainer.h"

// ----------------------------------------------------------------------------
// nanochat model definition

// The activations of a forward pass, in buffer order: X(type, name, per_layer, per_token, has_grad),
// each (B, T, per_token), (L, B, T, per_token) when per_layer; has_grad: the backward keeps its gradient,
// of one layer only for per_layer tensors (every layer reuses the same slice). The residual stream has one
// gradient, updated in place from the last layer's output back to the first layer's input: x0's. The
// weightless norms keep their rstd (their backward rebuilds the output from the input); the attention weights are not
// kept (attention_gqa_backward recomputes them; the blocked kernel from each row's log-sum-exp, att_lse). ln1, ln2
// and fch_relu2 are read only by GEMMs and, for the norms, by their own backward right after those GEMMs: each is
// one slice that every layer reuses, and the backward recomputes a layer's from what is kept (its input and rstd;
// fch) right before the GEMMs that read it.
#define NANOCHAT_ACTIVATION_TENSORS(X) \
    X(float, encoded,      0, C,   1) /* token embeddings */ \
    X(float, x0,           0, C,   1) /* their RMSNorm, the first layer's input */ \
    X(float, x0_rstd,      0, 1,   0) \
    NANOCHAT_LAYER_ACTIVATION_TENSORS(X) \
    X(float, lnf,          0, C,   1) /* final RMSNorm */ \
    X(float, lnf_rstd,     0, 1,   0) \
    X(float, losses,       0, 1,   0) /* (the logits: llmc/cpu/classifier_cpu.h, a chunk of rows at a time) */

#define NANOCHAT_LAYER_ACTIVATION_TENSORS(X) \
    X(float, ln1,          0, C,        1) /* RMSNorm of the layer's input (one slice: recomputed) */ \
    X(float, ln1_rstd,     1, 1,        0) \
    X(float, qkv,          1, QKV,      1) /* q, k, v heads: q and k rotated (RoPE), then normalised (QK-norm) */ \
    X(float, qk_rstd,      1, NH + NKV, 0) /* QK-norm's, per q and k head */ \
    X(float, att_lse,      1, NH,       0) /* each query head's log-sum-exp of its scores (blocked attention) */ \
    X(float, atty,         1, C,        1) /* attention output, before its projection */ \
    X(float, attproj,      0, C,        0) /* (one slice: only the residual add right after reads it) */ \
    X(float, residual2,    1, C,        0) /* input + attproj */ \
    X(float, ln2,          0, C,        1) /* (one slice: recomputed) */ \
    X(float, ln2_rstd,     1, 1,        0) \
    X(float, fch,          1, FFN,      1) /* fc */ \
    X(float, fch_relu2,    0, FFN,      1) /* relu(fc)^2 (one slice: recomputed) */ \
    X(float, fcproj,       0, C,        0) /* (one slice, as attproj) */ \
    X(float, residual3,    1, C,        0) /* residual2 + fcproj, the layer's output */

typedef struct { NANOCHAT_ACTIVATION_TENSORS(CPU_ACT_FIELD) } NanoChatActs;
// one layer's activations (or gradients): residual is the layer's input
typedef struct { float* residual; NANOCHAT_LAYER_ACTIVATION_TENSORS(CPU_ACT_FIELD) } NanoChatLayerActs;

typedef struct {
    NanoChatConfig config;
    NanoChatParams params;    // named pointers into cpu's flat buffers: weights, gradients,
    NanoChatParams grads;
    NanoChatActs acts;        // activations and their gradients (has_grad tensors only)
    NanoChatActs grads_acts;
    float* rope_cos;          // (maxT, HS/2)
    float* rope_sin;
    // the flat buffers, the optimizer state (AdamW, or -op muon: Muon on each layer's qkvw, attprojw, fcw,
    // fcprojw, AdamW on wte and lm_head) and the current batch (llmc/cpu/cpu_model.h)
    CpuModel cpu;
} NanoChat;

// the dimension names the activation table is written in
#define NANOCHAT_ACT_DIMS(cfg) \
    const size_t C = (size_t)(cfg)->channels, NH = (size_t)(cfg)->num_heads, NKV = (size_t)(cfg)->num_kv_heads; \
    const size_t QKV = (NH + 2 * NKV) * (C / NH), FFN = (size_t)(cfg)->ffn_hidden; \
    (void)NH; (void)NKV; (void)QKV; (void)FFN

// layer l's view of the activations (or of their gradients) of the current B x T tokens
static NanoChatLayerActs nanochat_layer_acts(const NanoChatActs* a, const NanoChatConfig* cfg, int B, int T, int l) {
    NANOCHAT_ACT_DIMS(cfg);
    size_t BT = (size_t)B * T;
    NanoChatLayerActs v;
    v.residual = l == 0 ? a->x0 : a->residual3 + (size_t)(l - 1) * BT * C;
    NANOCHAT_LAYER_ACTIVATION_TENSORS(CPU_ACT_LAYER)
    return v;
}

// the model of this config: its parameters (zeroed) and gradients, the rotary tables (llmc/cpu/cpu_trainer.h's
// cpu_model_build fills the parameters: -e's model file, or the init from scratch of llmc/nanochat.h)
static void nanochat_allocate(void* m, const void* config) {
    NanoChat* model = (NanoChat*)m;
    model->config = *(const NanoChatConfig*)config;
    const NanoChatConfig* cfg = &model->config;
    cpu_model_init(&model->cpu, &NANOCHAT_FAMILY, cfg, cfg->vocab_size, cfg->max_seq_len);
    nanochat_point_parameters(&model->params, model->cpu.params_memory, cfg);
    nanochat_point_parameters(&model->grads, model->cpu.grads_memory, cfg);
    model->cpu.lazy_zero_grad = 1; // nanochat_backward overwrites stale gradients (llmc/cpu/cpu_model.h)
    DecoderConfig decoder; // the rotary tables, as generate's (llmc/cpu/rope_cpu.h)
    decoder_config(&NANOCHAT_FAMILY, cfg, &decoder);
    decoder_rope_tables(&decoder, &model->rope_cos, &model->rope_sin);
}

// points the activations (grads = 1: their gradients, has_grad tensors only, one layer's of the
// per-layer ones) for B x T tokens into memory; returns how many floats they take (memory NULL: only counts)
static size_t nanochat_point_activations(void* m, float* memory, int B, int T, int grads) {
    NanoChat* model = (NanoChat*)m;
    NanoChatActs* a = grads ? &model->grads_acts : &model->acts;
    const NanoChatConfig* cfg = &model->config;
    NANOCHAT_ACT_DIMS(cfg);
    const size_t L = grads ? 1 : (size_t)cfg->num_layers;
    size_t BT = (size_t)B * T, n = 0;
    NANOCHAT_ACTIVATION_TENSORS(CPU_ACT_POINT)
    return n;
}

// activations and their gradients for batches of up to B x T tokens; the logits, when a forward pass keeps them,
// are (B,T,V), capped when the softcap is on
static void nanochat_allocate_activations(void* m, int B, int T) {
    NanoChat* model = (NanoChat*)m;
    cpu_model_allocate_activations(&model->cpu, B, T, nanochat_point_activations, model);
    // what the GEMMs read besides the weights: -p bf16 keeps a bf16 copy of each, written by the layer that writes it
    const NanoChatConfig* cfg = &model->config;
    NANOCHAT_ACT_DIMS(cfg);
    size_t L = (size_t)cfg->num_layers, BT = (size_t)B * T;
    const NanoChatActs* a = &model->acts;
    const NanoChatActs* d = &model->grads_acts;
    const float* shadowed[] = {a->ln1, a->atty, a->ln2, a->fch_relu2, a->lnf, d->x0, d->qkv, d->fch};
    const size_t sizes[] = {BT * C, L * BT * C, BT * C, BT * FFN, BT * C, BT * C, BT * QKV, BT * FFN};
    for (int i = 0; i < 8; i++) { cpu_model_shadow_activation(&model->cpu, shadowed[i], sizes[i]); }
    cpu_model_set_output(&model->cpu, model->config.vocab_size, model->acts.losses);
}

// the classifier (llmc/cpu/classifier_cpu.h): lnf through the lm_head and the softcap into the losses; its gradients
// into lnf's and the lm_head's
static CpuClassifier nanochat_classifier(NanoChat* model) {
    const NanoChatConfig* cfg = &model->config;
    CpuClassifier k = {model->acts.lnf, model->params.lm_head, model->grads_acts.lnf, model->grads.lm_head,
                       model->acts.losses, cfg->softcap, cfg->channels, cfg->vocab_size};
    return k;
}

// Forward pass on inputs (B,T); with targets (B,T) also the per-token losses and their mean.
// B x T may be smaller than what the activations were allocated for.
static void nanochat_forward(void* m, const int* inputs, const int* targets, int B, int T) {
    NanoChat* model = (NanoChat*)m;
    cpu_model_begin_forward(&model->cpu, inputs, targets, B, T); // ids checked, the batch kept for the backward
    const NanoChatConfig* cfg = &model->config;
    int L = cfg->num_layers, NH = cfg->num_heads, NKV = cfg->num_kv_heads, C = cfg->channels;
    int HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden, BT = B * T;
    float eps = cfg->norm_eps;

    NanoChatParams p = model->params;
    NanoChatActs acts = model->acts;
    size_t BTC = (size_t)BT * C;
    encoder_forward(acts.encoded, inputs, p.wte, NULL, B, T, C);                            // (B,T,C)
    rmsnorm_forward(acts.x0, acts.x0_rstd, acts.encoded, NULL, eps, B, T, C);               // (B,T,C)
    for (int l = 0; l < L; l++) {
        NanoChatLayerParams w = nanochat_layer_params(&model->params, cfg, l);
        NanoChatLayerActs a = nanochat_layer_acts(&model->acts, cfg, B, T, l);
        // attention block
        rmsnorm_forward(a.ln1, a.ln1_rstd, a.residual, NULL, eps, B, T, C);                       // (B,T,C)
        matmul_forward(a.qkv, a.ln1, w.qkvw, NULL, B, T, C, QKV);                                 // (B,T,QKV)
        rope_reverse_forward(a.qkv, model->rope_cos, model->rope_sin, B, T, QKV, NH + NKV, HS);   // q and k heads
        qknorm_forward(a.qkv, a.qk_rstd, NULL, NULL, BT, QKV, NH + NKV, HS, eps);                 // q and k heads
        attention_gqa_forward(a.atty, a.att_lse, a.qkv, B, T, NH, NKV, HS);                       // (B,T,C)
        matmul_forward(a.attproj, a.atty, w.attprojw, NULL, B, T, C, C);                          // (B,T,C)
        residual_forward(a.residual2, a.residual, a.attproj, BTC);                                // (B,T,C)
        // MLP block
        rmsnorm_forward(a.ln2, a.ln2_rstd, a.residual2, NULL, eps, B, T, C);                      // (B,T,C)
        matmul_forward(a.fch, a.ln2, w.fcw, NULL, B, T, C, FFN);                                  // (B,T,FFN)
        relu2_forward(a.fch_relu2, a.fch, (size_t)BT * FFN);                                      // (B,T,FFN)
        matmul_forward(a.fcproj, a.fch_relu2, w.fcprojw, NULL, B, T, FFN, C);                     // (B,T,C)
        residual_forward(a.residual3, a.residual2, a.fcproj, BTC);                                // (B,T,C)
    }
    NanoChatLayerActs last = nanochat_layer_acts(&model->acts, cfg, B, T, L - 1);
    rmsnorm_forward(acts.lnf, acts.lnf_rstd, last.residual3, NULL, eps, B, T, C);               // (B,T,C)
    // the (capped) logits (B,T,V) a chunk of rows at a time, the losses (B,T), and their gradients when a backward
    // pass follows (cpu_model_expect_backward)
    CpuClassifier k = nanochat_classifier(model);
    cpu_classifier_forward(&model->cpu, &k, targets);
    cpu_model_end_forward(&model->cpu, targets != NULL);
}

// Backward pass of the last forward (with targets); gradients of loss_scale * mean loss are ADDED to
// model->grads, or written over them when they are stale (cpu_model_zero_grad). dres, the residual stream's
// gradient, is each residual add's output gradient and so also its branch's (attproj's, fcproj's); the
// RMSNorms add their input gradients to it. Each activation gradient is written before it is read.
static void nanochat_backward(void* m, float loss_scale) {
    NanoChat* model = (NanoChat*)m;
    NanoChatParams g = model->grads;
    NanoChatActs acts = model->acts, gacts = model->grads_acts;
    cpu_model_begin_backward(&model->cpu);
    const NanoChatConfig* cfg = &model->config;
    int B = model->cpu.cur_B, T = model->cpu.cur_T, BT = B * T;
    int L = cfg->num_layers, NH = cfg->num_heads, NKV = cfg->num_kv_heads, C = cfg->channels;
    int HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden;
    // stale gradients: the weight GEMMs overwrite theirs (every matrix, each layer's slice, once; the lm_head's the
    // classifier's), the embedding's only adds, so it starts from zero
    int fresh = model->cpu.grads_stale;
    if (fresh) { cpu_zero_floats(g.wte, model->cpu.param_sizes[NANOCHAT_PARAM_wte]); }
    float beta = fresh ? 0.0f : 1.0f; // the weight gradients'
    // the classifier: dlnf and the lm_head's gradient (in the forward pass already when it knew this backward follows)
    CpuClassifier k = nanochat_classifier(model);
    cpu_classifier_backward(&model->cpu, &k, loss_scale);
    model->cpu.grads_stale = 0;
    const float* last_out = nanochat_layer_acts(&model->acts, cfg, B, T, L - 1).residual3; // lnf's input
    float* dres = gacts.x0; // (B,T,C): the last layer's output gradient first
    rmsnorm_backward_into(dres, NULL, gacts.lnf, last_out, NULL, acts.lnf_rstd, B, T, C, 0);

    NanoChatLayerActs da = nanochat_layer_acts(&model->grads_acts, cfg, B, T, 0); // every layer's slice
    for (int l = L - 1; l >= 0; l--) {
        NanoChatLayerParams w = nanochat_layer_params(&model->params, cfg, l), dw = nanochat_layer_params(&model->grads, cfg, l);
        NanoChatLayerActs a = nanochat_layer_acts(&model->acts, cfg, B, T, l);
        // MLP block, in reverse: dres is residual3's gradient, and fcproj's
        relu2_forward(a.fch_relu2, a.fch, (size_t)BT * FFN); // the forward's, again                     (B,T,FFN)
        matmul_backward_into(da.fch_relu2, dw.fcprojw, NULL, dres, a.fch_relu2, w.fcprojw, B, T, FFN, C, 0.0f, beta);
        relu2_backward_into(da.fch, a.fch, da.fch_relu2, (size_t)BT * FFN, 0);
        rmsnorm_recompute(a.ln2, a.residual2, a.ln2_rstd, NULL, B, T, C);                                // (B,T,C)
        matmul_backward_into(da.ln2, dw.fcw, NULL, da.fch, a.ln2, w.fcw, B, T, C, FFN, 0.0f, beta);
        rmsnorm_backward(dres, NULL, da.ln2, a.residual2, NULL, a.ln2_rstd, B, T, C);
        // attention block, in reverse: dres is residual2's gradient, and attproj's
        matmul_backward_into(da.atty, dw.attprojw, NULL, dres, a.atty, w.attprojw, B, T, C, C, 0.0f, beta);
        cpu_zero_floats(da.qkv, (size_t)BT * QKV); // attention_gqa_backward adds to it
        attention_gqa_backward(da.qkv, da.atty, a.qkv, a.atty, a.att_lse, B, T, NH, NKV, HS);
        qknorm_backward(da.qkv, NULL, a.qkv, NULL, NULL, a.qk_rstd, BT, QKV, NH + NKV, HS);
        rope_reverse_backward(da.qkv, model->rope_cos, model->rope_sin, B, T, QKV, NH + NKV, HS);
        rmsnorm_recompute(a.ln1, a.residual, a.ln1_rstd, NULL, B, T, C);                                 // (B,T,C)
        matmul_backward_into(da.ln1, dw.qkvw, NULL, da.qkv, a.ln1, w.qkvw, B, T, C, QKV, 0.0f, beta);
        rmsnorm_backward(dres, NULL, da.ln1, a.residual, NULL, a.ln1_rstd, B, T, C); // the layer input's gradient
    }
    rmsnorm_backward_into(gacts.encoded, NULL, dres, acts.encoded, NULL, acts.x0_rstd, B, T, C, 0);
    encoder_backward(g.wte, NULL, gacts.encoded, model->cpu.inputs, B, T, C);
}

static void nanochat_free(void* m) {
    NanoChat* model = (NanoChat*)m;
    free(model->rope_cos);
    free(model->rope_sin);
    cpu_model_free(&model->cpu);
}

// ----------------------------------------------------------------------------
// the training program: llmc/trainer.h runs the loop, llmc/cpu/cpu_trainer.h brings what every CPU
// trainer adds (its main(), gradient norm, optimizer, training state, threads, MPI), this file brings its
// model's calls

// the model's calls for the programs around it (llmc/cpu/cpu_model.h's CpuModelCalls: each takes the NanoChat as void*)
static const CpuModelCalls nanochat_calls = {
    .allocate = nanochat_allocate, .allocate_activations = nanochat_allocate_activations, .forward = nanochat_forward,
    .backward = nanochat_backward, .free = nanochat_free,
};

#ifndef LLMC_NO_MAIN

int main(int argc, char** argv) {
    NanoChat model;
    return cpu_trainer_main(argc, argv, "Trains nanochat's GPT on the CPU.", &NANOCHAT_FAMILY, &model, &nanochat_calls,
                            &model.cpu);
}
#endif
