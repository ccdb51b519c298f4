/*
train_llama3.c: Llama 3 training on the CPU, in plain C with OpenMP.

Read it top to bottom, like train_gpt2.c (the layers are llmc/cpu/'s, one file per operation as llmc/cuda/'s:
the token embedding (encoder_cpu.h), RMSNorm (rmsnorm_cpu.h), RoPE (rope_cpu.h), SwiGLU (swiglu_cpu.h),
attention with shared key/value heads (attention_cpu.h), the linear layer (matmul.h)):
  1. the Llama 3 model: flat parameter / gradient / activation buffers with named pointers
     (the family: the file format and the parameter table, in llmc/llama3.h)
  2. forward, backward, gradient norm, the update: AdamW, or Muon on the blocks' matrices (llmc/cpu/muon.h,
     planned and stepped by llmc/cpu/cpu_trainer.h as for GPT-2)
  3. the training program: the same training loop (llmc/trainer.h), command line (llmc/args.h),
     checkpoints, resume, MPI data parallel and ZeRO-1 as ./train_gpt2, and main()

Shapes: B batch, T time, C channels, V vocab (not padded), L layers, NH query heads, NKV key/value
heads, HS = C / NH, QKV = (NH + 2 NKV) HS, FFN the SwiGLU hidden size.

The model matches train_llama3.py and transformers' LlamaForCausalLM: pre-RMSNorm blocks,
rotary positions on q and k (rotate_half), causal attention with NH/NKV query heads per key/value
head scaled by 1/sqrt(HS), SwiGLU MLP down(silu(gate(x)) * up(x)), no biases, final RMSNorm, an
lm_head (or wte when tied), loss = mean cross-entropy over B*T tokens.

Usage (./train_llama3 --help lists every flag with its default):
  ./train_llama3 -e d2 -i <llama-3 train shards> -j <val shards>   d2 from scratch
  ./train_llama3 -e llama3_d2.bin ...                    a model file written by train_llama3.py
  mpirun -np 2 ./train_llama3 -b 2 -z 1 ...              2 processes, each half the batch, ZeRO-1
  ./train_llama3 -op muon -ol 0.02 ...                   Muon on qkvw, attprojw, fcw, fcw2, fcprojw, AdamW on the rest
-e dN takes V from the Llama 3 tokenizer file (llama3_tokenizer.bin), which also decodes samples.
test_llama3.c includes this file with LLMC_NO_MAIN defined.
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
#include "llmc/cpu/rope_cpu.h"
#include "llmc/cpu/attention_cpu.h"
#include "llmc/cpu/residual_cpu.h"
#include "llmc/cpu/swiglu_cpu.h"
#include "llmc/cpu/classifier_cpu.h"
#include "llmc/llama3.h"
#include "llmc/tokenizer.h"

#include "llmc/cpu/cpu_trainer.h"

// ----------------------------------------------------------------------------
// Llama 3 model definition

// The activations of a forward pass, in buffer order: X(type, name, per_layer, per_token, has_grad),
// each (B, T, per_token), (L, B, T, per_token) when per_layer; has_grad: the backward keeps its
// gradient, of one layer only for per_layer tensors (the backward needs one layer's at a time, so
// every layer reuses the same slice, which stays in cache). The residual adds copy their output's
// gradient to both inputs, so the residual stream has one gradient, updated in place from the last
// layer's output back to the embeddings: encoded's. The attention weights are not kept
// (attention_gqa_backward recomputes them; the blocked kernel from each row's log-sum-exp, att_lse). Only GEMMs
// read ln1, ln2 and fch_swiglu: each is one slice that every layer reuses, and the backward recomputes a layer's
// from what is kept (its input and rstd; fch, fch2) right before the GEMMs that read it.
#define LLAMA3_ACTIVATION_TENSORS(X) \
    X(float, encoded,  0, C,   1) /* token embeddings, the first layer's input */ \
    LLAMA3_LAYER_ACTIVATION_TENSORS(X) \
    X(float, lnf,      0, C,   1) /* final RMSNorm */ \
    X(float, lnf_rstd, 0, 1,   0) \
    X(float, losses,   0, 1,   0) /* (the logits: llmc/cpu/classifier_cpu.h, a chunk of rows at a time) */

#define LLAMA3_LAYER_ACTIVATION_TENSORS(X) \
    X(float, ln1,        0, C,     1) /* RMSNorm of the layer's input (one slice: recomputed) */ \
    X(float, ln1_rstd,   1, 1,     0) \
    X(float, qkv,        1, QKV,   1) /* q, k, v heads, q and k rotated (RoPE) */ \
    X(float, att_lse,    1, NH,    0) /* each query head's log-sum-exp of its scores (blocked attention) */ \
    X(float, atty,       1, C,     1) /* attention output, before its projection */ \
    X(float, attproj,    0, C,     0) /* (one slice: only the residual add right after reads it) */ \
    X(float, residual2,  1, C,     0) /* input + attproj */ \
    X(float, ln2,        0, C,     1) /* (one slice: recomputed) */ \
    X(float, ln2_rstd,   1, 1,     0) \
    X(float, fch,        1, FFN,   1) /* gate projection */ \
    X(float, fch2,       1, FFN,   1) /* up projection */ \
    X(float, fch_swiglu, 0, FFN,   1) /* silu(gate) * up (one slice: recomputed) */ \
    X(float, fcproj,     0, C,     0) /* (one slice, as attproj) */ \
    X(float, residual3,  1, C,     0) /* residual2 + fcproj, the layer's output */

typedef struct { LLAMA3_ACTIVATION_TENSORS(CPU_ACT_FIELD) } Llama3Acts;
// one layer's activations (or gradients): residual is the layer's input
typedef struct { float* residual; LLAMA3_LAYER_ACTIVATION_TENSORS(CPU_ACT_FIELD) } Llama3LayerActs;

typedef struct {
    Llama3Config config;
    Llama3Params params;      // named pointers into cpu's flat buffers: weights, gradients,
    Llama3Params grads;
    Llama3Acts acts;          // activations and their gradients (has_grad tensors only)
    Llama3Acts grads_acts;
    float* rope_cos;          // (maxT, HS/2)
    float* rope_sin;
    // the flat buffers, the optimizer state (AdamW, or -op muon: Muon on each layer's qkvw, attprojw, fcw,
    // fcw2, fcprojw, AdamW on wte, lm_head and the norms) and the current batch (llmc/cpu/cpu_model.h)
    CpuModel cpu;
} Llama3;

// layer l's view of the activations (or of their gradients) of the current B x T tokens
static Llama3LayerActs llama3_layer_acts(const Llama3Acts* a, const Llama3Config* cfg, int B, int T, int l) {
    const size_t C = (size_t)cfg->channels, NH = (size_t)cfg->num_heads, QKV = (NH + 2 * (size_t)cfg->num_kv_heads) * (C / NH);
    const size_t FFN = (size_t)cfg->ffn_hidden;
    size_t BT = (size_t)B * T;
    Llama3LayerActs v;
    v.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
    LLAMA3_LAYER_ACTIVATION_TENSORS(CPU_ACT_LAYER)
    return v;
}

// the model of this config: its parameters (zeroed) and gradients, the rotary tables (llmc/cpu/cpu_trainer.h's
// cpu_model_build fills the parameters: -e's model file, or the init from scratch of llmc/llama3.h)
static void llama3_allocate(void* m, const void* config) {
    Llama3* model = (Llama3*)m;
    model->config = *(const Llama3Config*)config;
    const Llama3Config* cfg = &model->config;
    cpu_model_init(&model->cpu, &LLAMA3_FAMILY, cfg, cfg->vocab_size, cfg->max_seq_len);
    llama3_point_parameters(&model->params, model->cpu.params_memory, cfg);
    llama3_point_parameters(&model->grads, model->cpu.grads_memory, cfg);
    model->cpu.lazy_zero_grad = 1; // llama3_backward overwrites stale gradients (llmc/cpu/cpu_model.h)
    DecoderConfig decoder; // the rotary tables, as generate's (llmc/cpu/rope_cpu.h)
    decoder_config(&LLAMA3_FAMILY, cfg, &decoder);
    decoder_rope_tables(&decoder, &model->rope_cos, &model->rope_sin);
}

// points the activations (grads = 1: their gradients, has_grad tensors only, one layer's of the
// per-layer ones) for B x T tokens into memory; returns how many floats they take (memory NULL: only counts)
static size_t llama3_point_activations(void* m, float* memory, int B, int T, int grads) {
    Llama3* model = (Llama3*)m;
    Llama3Acts* a = grads ? &model->grads_acts : &model->acts;
    const Llama3Config* cfg = &model->config;
    const size_t C = (size_t)cfg->channels, L = grads ? 1 : (size_t)cfg->num_layers;
    const size_t NH = (size_t)cfg->num_heads, QKV = (NH + 2 * (size_t)cfg->num_kv_heads) * (C / NH);
    const size_t FFN = (size_t)cfg->ffn_hidden;
    size_t BT = (size_t)B * T, n = 0;
    LLAMA3_ACTIVATION_TENSORS(CPU_ACT_POINT)
    return n;
}

// activations and their gradients for batches of up to B x T tokens; the logits, when a forward pass keeps them,
// are (B,T,V)
static void llama3_allocate_activations(void* m, int B, int T) {
    Llama3* model = (Llama3*)m;
    cpu_model_allocate_activations(&model->cpu, B, T, llama3_point_activations, model);
    // what the GEMMs read besides the weights: -p bf16 keeps a bf16 copy of each, written by the layer that writes it
    const Llama3Config* cfg = &model->config;
    size_t C = (size_t)cfg->channels, L = (size_t)cfg->num_layers, FFN = (size_t)cfg->ffn_hidden, BT = (size_t)B * T;
    size_t QKV = ((size_t)cfg->num_heads + 2 * (size_t)cfg->num_kv_heads) * (C / (size_t)cfg->num_heads);
    const Llama3Acts* a = &model->acts;
    const Llama3Acts* d = &model->grads_acts;
    const float* shadowed[] = {a->ln1, a->atty, a->ln2, a->fch_swiglu, a->lnf, d->encoded, d->qkv, d->fch, d->fch2};
    const size_t sizes[] = {BT * C, L * BT * C, BT * C, BT * FFN, BT * C, BT * C, BT * QKV, BT * FFN, BT * FFN};
    for (int i = 0; i < 9; i++) { cpu_model_shadow_activation(&model->cpu, shadowed[i], sizes[i]); }
    cpu_model_set_output(&model->cpu, model->config.vocab_size, model->acts.losses);
}

// the classifier (llmc/cpu/classifier_cpu.h): lnf through the lm_head (wte when tied) into the losses; its
// gradients into lnf's and the lm_head's
static CpuClassifier llama3_classifier(Llama3* model) {
    const Llama3Config* cfg = &model->config;
    CpuClassifier k = {model->acts.lnf, llama3_lm_head(&model->params, cfg), model->grads_acts.lnf,
                       llama3_lm_head(&model->grads, cfg), model->acts.losses, 0.0f, cfg->channels, cfg->vocab_size};
    return k;
}

// Forward pass on inputs (B,T); with targets (B,T) also the per-token losses and their mean (and the classifier's
// gradients when a backward pass follows, cpu_model_expect_backward); without, the logits (model->cpu.logits).
// B x T may be smaller than what the activations were allocated for.
static void llama3_forward(void* m, const int* inputs, const int* targets, int B, int T) {
    Llama3* model = (Llama3*)m;
    cpu_model_begin_forward(&model->cpu, inputs, targets, B, T); // ids checked, the batch kept for the backward
    const Llama3Config* cfg = &model->config;
    int L = cfg->num_layers, NH = cfg->num_heads, NKV = cfg->num_kv_heads, C = cfg->channels;
    int HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden;
    float eps = cfg->norm_eps;

    Llama3Params p = model->params;
    Llama3Acts acts = model->acts;
    size_t BTC = (size_t)B * T * C;
    encoder_forward(acts.encoded, inputs, p.wte, NULL, B, T, C); // (B,T,C)
    for (int l = 0; l < L; l++) {
        Llama3LayerParams w = llama3_layer_params(&model->params, cfg, l);
        Llama3LayerActs a = llama3_layer_acts(&model->acts, cfg, B, T, l);
        // attention block
        rmsnorm_forward(a.ln1, a.ln1_rstd, a.residual, w.ln1w, eps, B, T, C);            // (B,T,C)
        matmul_forward(a.qkv, a.ln1, w.qkvw, NULL, B, T, C, QKV);                         // (B,T,QKV)
        rope_forward(a.qkv, model->rope_cos, model->rope_sin, B, T, QKV, NH + NKV, HS);   // q and k heads
        attention_gqa_forward(a.atty, a.att_lse, a.qkv, B, T, NH, NKV, HS);               // (B,T,C)
        matmul_forward(a.attproj, a.atty, w.attprojw, NULL, B, T, C, C);                  // (B,T,C)
        residual_forward(a.residual2, a.residual, a.attproj, BTC);                        // (B,T,C)
        // MLP block
        rmsnorm_forward(a.ln2, a.ln2_rstd, a.residual2, w.ln2w, eps, B, T, C);           // (B,T,C)
        matmul_forward(a.fch, a.ln2, w.fcw, NULL, B, T, C, FFN);                          // (B,T,FFN)
        matmul_forward(a.fch2, a.ln2, w.fcw2, NULL, B, T, C, FFN);                        // (B,T,FFN)
        swiglu_forward(a.fch_swiglu, a.fch, a.fch2, (size_t)B * T * FFN);                 // (B,T,FFN)
        matmul_forward(a.fcproj, a.fch_swiglu, w.fcprojw, NULL, B, T, FFN, C);            // (B,T,C)
        residual_forward(a.residual3, a.residual2, a.fcproj, BTC);                        // (B,T,C)
    }
    Llama3LayerActs last = llama3_layer_acts(&model->acts, cfg, B, T, L - 1);
    rmsnorm_forward(acts.lnf, acts.lnf_rstd, last.residual3, p.lnfw, eps, B, T, C);           // (B,T,C)
    CpuClassifier k = llama3_classifier(model);
    cpu_classifier_forward(&model->cpu, &k, targets); // the logits (B,T,V) a chunk of rows at a time, the losses (B,T)
    cpu_model_end_forward(&model->cpu, targets != NULL);
}

// Backward pass of the last forward (with targets); gradients of loss_scale * mean loss are ADDED
// to model->grads, or written over them when they are stale (cpu_model_zero_grad). dres, the residual stream's
// gradient, is each residual add's output gradient and so also its branch's (attproj's, fcproj's); the RMSNorms add
// their input gradients to it. Each activation gradient is written before it is read.
static void llama3_backward(void* m, float loss_scale) {
    Llama3* model = (Llama3*)m;
    Llama3Params p = model->params, g = model->grads;
    Llama3Acts acts = model->acts, gacts = model->grads_acts;
    cpu_model_begin_backward(&model->cpu);
    const Llama3Config* cfg = &model->config;
    int B = model->cpu.cur_B, T = model->cpu.cur_T;
    int L = cfg->num_layers, NH = cfg->num_heads, NKV = cfg->num_kv_heads, C = cfg->channels;
    int HS = C / NH, QKV = (NH + 2 * NKV) * HS, FFN = cfg->ffn_hidden;
    // stale gradients: the weight GEMMs overwrite theirs (every matrix, each layer's slice, once; the lm_head's the
    // classifier's), the RMSNorm weights and the untied wte only add, so they start from zero
    int fresh = model->cpu.grads_stale;
    if (fresh) {
        const size_t* n = model->cpu.param_sizes;
        cpu_zero_floats(g.ln1w, n[LLAMA3_PARAM_ln1w]);
        cpu_zero_floats(g.ln2w, n[LLAMA3_PARAM_ln2w]);
        cpu_zero_floats(g.lnfw, n[LLAMA3_PARAM_lnfw]);
        if (!cfg->tied_embeddings) { cpu_zero_floats(g.wte, n[LLAMA3_PARAM_wte]); }
    }
    float beta = fresh ? 0.0f : 1.0f; // the weight gradients'
    // the classifier: dlnf and the lm_head's gradient (in the forward pass already when it knew this backward follows)
    CpuClassifier k = llama3_classifier(model);
    cpu_classifier_backward(&model->cpu, &k, loss_scale);
    model->cpu.grads_stale = 0;
    Llama3LayerActs last = llama3_layer_acts(&model->acts, cfg, B, T, L - 1);
    float* dres = gacts.encoded; // (B,T,C): the last layer's output gradient first
    rmsnorm_backward_into(dres, g.lnfw, gacts.lnf, last.residual3, p.lnfw, acts.lnf_rstd, B, T, C, 0);

    Llama3LayerActs da = llama3_layer_acts(&model->grads_acts, cfg, B, T, 0); // every layer's slice
    for (int l = L - 1; l >= 0; l--) {
        Llama3LayerParams w = llama3_layer_params(&model->params, cfg, l), dw = llama3_layer_params(&model->grads, cfg, l);
        Llama3LayerActs a = llama3_layer_acts(&model->acts, cfg, B, T, l);
        // MLP block, in reverse: dres is residual3's gradient, and fcproj's
        swiglu_forward(a.fch_swiglu, a.fch, a.fch2, (size_t)B * T * FFN); // the forward's, again         (B,T,FFN)
        matmul_backward_into(da.fch_swiglu, dw.fcprojw, NULL, dres, a.fch_swiglu, w.fcprojw, B, T, FFN, C, 0.0f, beta);
        swiglu_backward_into(da.fch, da.fch2, da.fch_swiglu, a.fch, a.fch2, (size_t)B * T * FFN, 0);
        rmsnorm_recompute(a.ln2, a.residual2, a.ln2_rstd, w.ln2w, B, T, C);                               // (B,T,C)
        matmul_backward_into(da.ln2, dw.fcw, NULL, da.fch, a.ln2, w.fcw, B, T, C, FFN, 0.0f, beta);
        matmul_backward_into(da.ln2, dw.fcw2, NULL, da.fch2, a.ln2, w.fcw2, B, T, C, FFN, 1.0f, beta);
        rmsnorm_backward(dres, dw.ln2w, da.ln2, a.residual2, w.ln2w, a.ln2_rstd, B, T, C);
        // attention block, in reverse: dres is residual2's gradient, and attproj's
        matmul_backward_into(da.atty, dw.attprojw, NULL, dres, a.atty, w.attprojw, B, T, C, C, 0.0f, beta);
        cpu_zero_floats(da.qkv, (size_t)B * T * QKV); // attention_gqa_backward adds to it
        attention_gqa_backward(da.qkv, da.atty, a.qkv, a.atty, a.att_lse, B, T, NH, NKV, HS);
        rope_backward(da.qkv, model->rope_cos, model->rope_sin, B, T, QKV, NH + NKV, HS);
        rmsnorm_recompute(a.ln1, a.residual, a.ln1_rstd, w.ln1w, B, T, C);                                // (B,T,C)
        matmul_backward_into(da.ln1, dw.qkvw, NULL, da.qkv, a.ln1, w.qkvw, B, T, C, QKV, 0.0f, beta);
        rmsnorm_backward(dres, dw.ln1w, da.ln1, a.residual, w.ln1w, a.ln1_rstd, B, T, C); // the layer input's gradient
    }
    encoder_backward(g.wte, NULL, dres, model->cpu.inputs, B, T, C);
}

static void llama3_free(void* m) {
    Llama3* model = (Llama3*)m;
    free(model->rope_cos);
    free(model->rope_sin);
    cpu_model_free(&model->cpu);
}

// ----------------------------------------------------------------------------
// the training program: llmc/trainer.h runs the loop, llmc/cpu/cpu_trainer.h brings what every CPU
// trainer adds (its main(), gradient norm, optimizer, training state, threads, MPI), this file brings its
// model's calls

// the model's calls for the programs around it (llmc/cpu/cpu_model.h's CpuModelCalls: each takes the Llama3 as void*)
static const CpuModelCalls llama3_calls = {
    .allocate = llama3_allocate, .allocate_activations = llama3_allocate_activations, .forward = llama3_forward,
    .backward = llama3_backward, .free = llama3_free,
};

#ifndef LLMC_NO_MAIN

int main(int argc, char** argv) {
    Llama3 model;
    return cpu_trainer_main(argc, argv, "Trains Llama 3 on the CPU.", &LLAMA3_FAMILY, &model, &llama3_calls, &model.cpu);
}
#endif
