/*
train_gpt2.c: GPT-2 training on the CPU, in plain C with OpenMP.

Read it top to bottom (the layers, each a forward and a backward function with its shapes in a
comment, are llmc/cpu/'s, one file per operation as llmc/cuda/'s: encoder_cpu.h, layernorm_cpu.h, matmul.h's
linear layer, attention_cpu.h, gelu_cpu.h, residual_cpu.h; the classifier, run a chunk of rows at a time, is
llmc/cpu/classifier_cpu.h's; all shared with every CPU model):
  1. the GPT-2 model: flat parameter / gradient / activation buffers with named pointers
  2. forward and backward (the gradient norm and the update, AdamW or Muon on the blocks' matrices, work
     on the flat buffers of every CPU model: llmc/cpu/cpu_model.h)
  3. the training program: the model's calls that the CPU trainer (llmc/cpu/cpu_trainer.h: threads, MPI,
     the optimizer) brings to the training loop that llmc/trainer.h runs for every trainer (data,
     validation, sampling, checkpoints and resume, signals), and main()

Shapes: B batch, T time (sequence length), C channels, V vocab (50257), Vp padded vocab
(50304), L layers, NH heads, HS = C / NH head size, OC output channels of a matmul.
Parameters, gradients and optimizer state are fp32. The same seed, data and thread count
give bit-identical results (every reduction here runs in a fixed order), and a run resumed
from a checkpoint continues bit-identically.

Usage (./train_gpt2 --help lists every flag with its default):
  ./train_gpt2                                  the CPU demo: gpt2_124M.bin on tinyshakespeare
  ./train_gpt2 -e d12 -x 100 -o out -n 50       GPT-2 124M from scratch, checkpoints in out/
  ./train_gpt2 -e d12 -x 100 -o out -n 50 -y 1  ...resumed from the newest checkpoint in out/
  mpirun -np 2 ./train_gpt2 -b 2 -z 1           2 processes, each half the batch, ZeRO-1 AdamW

The model matches train_gpt2.py (PyTorch): tanh GELU, LayerNorm eps 1e-5, lm_head tied to
wte, causal attention scaled by 1/sqrt(HS), loss = mean cross-entropy over B*T tokens.
test_gpt2.c includes this file with LLMC_NO_MAIN defined (then main() is left out).
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
#include "llmc/layer_math.h"
#include "llmc/adamw.h"
#include "llmc/cpu/muon.h"
#include "llmc/zero.h"
#include "llmc/gpt2.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/vecmath.h"
#include "llmc/cpu/encoder_cpu.h"
#include "llmc/cpu/layernorm_cpu.h"
#include "llmc/cpu/attention_cpu.h"
#include "llmc/cpu/gelu_cpu.h"
#include "llmc/cpu/residual_cpu.h"
#include "llmc/cpu/classifier_cpu.h"
#include "llmc/trainer.h"
#include "llmc/cpu/cpu_trainer.h"

// ----------------------------------------------------------------------------
// GPT-2 model definition

// the 16 parameter tensors in checkpoint order (GPT2Params), and one layer's 12 of them (GPT2LayerParams):
// llmc/gpt2.h has the table (wte (Vp,C), wpe (maxT,C), ln1w (L,C), qkvw (L,3C,C), ...), gpt2_point_parameters
// and gpt2_layer_params

// The activations of a forward pass, in buffer order (llmc/gpt2.h has the table: encoded,
// then per layer ln1, ln1_mean, ln1_rstd, qkv, atty, attproj, residual2, ln2, ..., fch, fch_gelu,
// fcproj, residual3, then lnf, losses; each (B, T, ...) or (L, B, T, ...)).
// The attention weights are not kept: the backward recomputes them (from each row's log-sum-exp, att_lse, on the
// bf16 path). Only GEMMs read ln1, ln2 and fch_gelu: each is one slice that every layer reuses, and the backward
// recomputes a layer's from its input, mean and rstd (fch) right before its GEMMs. Nor are the (B, T, Vp) logits:
// the classifier runs a chunk of rows at a time (llmc/cpu/classifier_cpu.h). The backward keeps the gradients of
// one layer (every layer reuses the same slice) and one of the residual stream, encoded's, updated in place from
// the last layer's output back to the embeddings: a residual add copies its output's gradient to both inputs, so
// the stream's gradient is also each branch's (attproj's, fcproj's).
// keep_fp32 (a variable where the tables expand): qkv, atty and fch per layer in fp32, or in bf16 alone (below)
#define CPU_ACTIVATION_TENSORS(X) GPT2_ACTIVATION_TENSORS(X, GPT2_ATT_LSE, GPT2_CHUNKED_LOGITS, 0, keep_fp32)
#define CPU_LAYER_ACTIVATION_TENSORS(X) GPT2_LAYER_ACTIVATION_TENSORS(X, GPT2_ATT_LSE, 0, keep_fp32)

// -p bf16 on oneDNN (llmc/cpu/cpu_model.h's cpu_model_bf16_activations) keeps what only bf16 readers read in bf16
// alone, after the fp32 tensors in the same buffer: rows X(name, per_layer, per_token), uint16 (B, T, per_token), or
// (L, B, T, per_token) when per_layer (llmc/cpu/cpu_model.h's CPU_ACT16_POINT). qkv16 is qkv rounded, written by
// the attention's forward as it rounds q, k, v (which it does anyway: the same bits); atty16 the attention's output,
// written in bf16 (the GEMMs read it rounded anyway; the attention's backward then takes D = rowsum(dO o O) from the
// rounded O); fch16 is fch + bias rounded, the GELU's input in the forward and in the backward (a change: the fp32
// layout's GELU reads fch unrounded); fch_gelu16 the GELU's output rounded, one slice (the backward recomputes a
// layer's from fch16). The fp32 qkv, atty and fch are then one slice each (llmc/gpt2.h).
// At d12, B=4, T=1024 the peak is 0.64 GB lower: qkv, atty and fch take 0.69 GB instead of 1.21 GB, atty's and
// fch_gelu's bf16 copies go (0.10 GB), and fch_gelu's fp32 slice is never written (0.05 GB).
#define GPT2_BF16_ACTIVATION_TENSORS(X) \
    X(qkv16,      1, 3 * C) \
    X(atty16,     1, C) \
    X(fch16,      1, 4 * C) \
    X(fch_gelu16, 0, 4 * C)

typedef struct {
    int bf16;   // the bf16 layout: qkv, atty and fch kept per layer in bf16 alone (GPT2_BF16_ACTIVATION_TENSORS)
    CPU_ACTIVATION_TENSORS(CPU_ACT_FIELD)
    GPT2_BF16_ACTIVATION_TENSORS(CPU_ACT16_FIELD)
} ActivationTensors;

// one layer's activations (or their gradients): residual is the layer's input (encoded, or
// the previous layer's residual3), the others are layer l's slices, each (B,T,...)
typedef struct { float* residual; CPU_LAYER_ACTIVATION_TENSORS(CPU_ACT_FIELD) GPT2_BF16_ACTIVATION_TENSORS(CPU_ACT16_FIELD) } LayerActs;

// layer l's view of the activations (or, with l = 0, of their gradients: residual is then the residual stream's)
// of the current B x T tokens
LayerActs gpt2_layer_acts(const ActivationTensors* a, const GPT2Config* cfg, int B, int T, int l) {
    size_t C = cfg->channels, NH = cfg->num_heads, BT = (size_t)B * T;
    int keep_fp32 = !a->bf16;
    LayerActs v;
    v.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
    CPU_LAYER_ACTIVATION_TENSORS(CPU_ACT_LAYER)
    GPT2_BF16_ACTIVATION_TENSORS(CPU_ACT16_LAYER)
    return v;
}

typedef struct {
    GPT2Config config;
    // named pointers into the flat buffers of cpu: the weights and their gradients, the activations for
    // batches up to cpu.batch_size x cpu.seq_len and their gradients (only the has_grad tensors)
    GPT2Params params;
    GPT2Params grads;
    ActivationTensors acts;
    ActivationTensors grads_acts;
    // the flat buffers, the optimizer state (AdamW, or -op muon: Muon on each layer's qkvw, attprojw, fcw,
    // fcprojw, AdamW on the rest) and the current batch (llmc/cpu/cpu_model.h)
    CpuModel cpu;
} GPT2;

// the model of this config: its parameters (zeroed) and gradients (llmc/cpu/cpu_trainer.h's cpu_model_build fills
// the parameters: -e's checkpoint, or the init from scratch of llmc/gpt2.h)
void gpt2_allocate(void* m, const void* config) {
    GPT2* model = (GPT2*)m;
    model->config = *(const GPT2Config*)config;
    cpu_model_init(&model->cpu, &GPT2_FAMILY, &model->config, model->config.vocab_size, model->config.max_seq_len);
    gpt2_point_parameters(&model->params, model->cpu.params_memory, &model->config);
    gpt2_point_parameters(&model->grads, model->cpu.grads_memory, &model->config);
    model->cpu.lazy_zero_grad = 1; // gpt2_backward overwrites stale gradients (llmc/cpu/cpu_model.h)
}

// pyllmc's two builds (pyllmc/_capi.h): a checkpoint, or from scratch exactly like train_gpt2.py (llmc/gpt2.h)
void gpt2_build_from_checkpoint(GPT2* model, const char* path) {
    int version;
    GPT2Config cfg;
    FILE* f = gpt2_model_open(path, &cfg, &version);
    gpt2_allocate(model, &cfg);
    model_file_read_params(f, path, version, model->cpu.params_memory, model->cpu.num_parameters);
    fcloseCheck(f, path);
}

void gpt2_build_from_scratch(GPT2* model, const GPT2Config* cfg, unsigned int seed) {
    gpt2_allocate(model, cfg);
    gpt2_init_params_from_scratch(model->cpu.params_memory, cfg, seed);
}

// Points the activations for B x T tokens into memory and returns how many floats they take
// (memory NULL: only counts). With grads = 1 they are the activations' gradients: only the
// has_grad tensors get memory (one layer's of the per-layer ones), the others are NULL.
size_t gpt2_point_activations(void* m, float* memory, int B, int T, int grads) {
    GPT2* model = (GPT2*)m;
    ActivationTensors* a = grads ? &model->grads_acts : &model->acts;
    size_t C = model->config.channels, L = grads ? 1 : (size_t)model->config.num_layers;
    size_t NH = model->config.num_heads, BT = (size_t)B * T, n = 0;
    a->bf16 = model->acts.bf16;
    int keep_fp32 = !a->bf16;
    CPU_ACTIVATION_TENSORS(CPU_ACT_POINT)
    GPT2_BF16_ACTIVATION_TENSORS(CPU_ACT16_POINT)
    return n;
}

// activations and their gradients for batches of up to B x T tokens, in the layout of the precision set now (the
// forward pass allocates them again if it changes); the logits, when a forward pass keeps them, are (B,T,Vp)
void gpt2_allocate_activations(void* m, int B, int T) {
    GPT2* model = (GPT2*)m;
    model->acts.bf16 = cpu_model_bf16_layout();
    cpu_model_allocate_activations(&model->cpu, B, T, gpt2_point_activations, model);
    // what the GEMMs read besides the weights: -p bf16 keeps a bf16 copy of each, written by the layer that writes it
    // (the bf16 layout's atty16 and fch_gelu16 are the GEMMs' operands themselves)
    size_t C = model->config.channels, L = model->config.num_layers, BT = (size_t)B * T;
    const ActivationTensors* a = &model->acts;
    const ActivationTensors* d = &model->grads_acts;
    // GEMMs alone read the norms' outputs, fch's gradient (fcb's comes with the GELU's backward unless
    // LLMC_ELEMENTWISE_FUSED=0 sums it from the fp32 rows) and, in the bf16 layout, qkv's (qkvb's comes with the
    // attention's backward unless LLMC_ATTENTION_BIAS=0): with the bf16 activations those are written in bf16 alone
    const float* shadowed[] = {a->ln1, a->ln2, a->lnf, d->encoded, d->qkv, d->fch, a->atty, a->fch_gelu};
    const size_t sizes[] = {BT * C, BT * C, BT * C, BT * C, BT * 3 * C, BT * 4 * C, L * BT * C, BT * 4 * C};
    const int alone[] = {1, 1, 1, 0, a->bf16 && attention_bias_fused(), elementwise_fused(), 0, 0};
    for (int i = 0; i < (a->bf16 ? 6 : 8); i++) {
        cpu_model_shadow_activation(&model->cpu, shadowed[i], sizes[i], alone[i]);
    }
    cpu_model_set_output(&model->cpu, model->config.padded_vocab_size, model->acts.losses);
}

// the classifier (llmc/cpu/classifier_cpu.h): lnf through the lm_head, tied to wte, into the losses; its gradients
// into lnf's and wte's
static CpuClassifier gpt2_classifier(GPT2* model) {
    CpuClassifier k = {model->acts.lnf, model->params.wte, model->grads_acts.lnf, model->grads.wte, model->acts.losses,
                       0.0f, model->config.channels, model->config.padded_vocab_size};
    return k;
}

// Forward pass on inputs (B,T). With targets (B,T) also the per-token losses and their mean
// (model->cpu.mean_loss), and the classifier's gradients when a backward pass follows (cpu_model_expect_backward);
// targets may be NULL (inference: the logits, model->cpu.logits). B x T may be smaller than what the activations
// were allocated for (sampling uses B=1 and a growing T).
void gpt2_forward(void* m, const int* inputs, const int* targets, int B, int T) {
    GPT2* model = (GPT2*)m;
    if (model->cpu.acts_memory != NULL && model->acts.bf16 != cpu_model_bf16_layout()) {
        // the precision changed since the activations were allocated (the trainer's -p bf16 calibration, pyllmc)
        int B_max = model->cpu.batch_size, T_max = model->cpu.seq_len;
        cpu_model_free_activations(&model->cpu);
        gpt2_allocate_activations(model, B_max, T_max);
    }
    cpu_model_begin_forward(&model->cpu, inputs, targets, B, T); // ids checked, the batch kept for the backward
    int L = model->config.num_layers, NH = model->config.num_heads, C = model->config.channels;
    const GPT2Config* cfg = &model->config;
    GPT2Params p = model->params;
    ActivationTensors acts = model->acts;
    encoder_forward(acts.encoded, inputs, p.wte, p.wpe, B, T, C); // (B,T,C)
    // each layer ends with the next layernorm fused into its last residual add, so the first
    // layernorm runs on its own
    layernorm_forward(acts.ln1, acts.ln1_mean, acts.ln1_rstd, acts.encoded, p.ln1w, p.ln1b, B, T, C);
    for (int l = 0; l < L; l++) {
        GPT2LayerParams w = gpt2_layer_params(&model->params, cfg, l);
        LayerActs a = gpt2_layer_acts(&model->acts, cfg, B, T, l);
        // attention block (its layernorm ran already)
        matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * C);          // (B,T,3C)
        if (acts.bf16) { // qkv rounded into the layer's bf16 slice as the attention reads it; its output in bf16 alone
            attention_gqa_forward_bf16(a.atty16, a.att_lse, a.qkv, a.qkv16, B, T, NH, NH, C / NH);
            matmul_forward_bf16_input(a.attproj, a.atty16, w.attprojw, w.attprojb, B, T, C, C);
        } else {
            attention_gqa_forward(a.atty, a.att_lse, a.qkv, B, T, NH, NH, C / NH); // (B,T,C)
            matmul_forward(a.attproj, a.atty, w.attprojw, w.attprojb, B, T, C, C); // (B,T,C)
        }
        // MLP block: residual2 = residual + attproj, ln2 = layernorm(residual2) in one pass
        fused_residual_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual, a.attproj, w.ln2w, w.ln2b, B, T, C);
        matmul_forward(a.fch, a.ln2, w.fcw, NULL, B, T, C, 4 * C);                      // (B,T,4C)
        if (acts.bf16) { // fch + bias kept in bf16 alone, the GELU's input; its output rounded for the GEMM
            bias_gelu_forward_bf16(a.fch_gelu16, a.fch16, a.fch, w.fcb, B, T, 4 * C);
            matmul_forward_bf16_input(a.fcproj, a.fch_gelu16, w.fcprojw, w.fcprojb, B, T, 4 * C, C);
        } else {
            bias_gelu_forward(a.fch_gelu, a.fch, w.fcb, B, T, 4 * C);                   // (B,T,4C)
            matmul_forward(a.fcproj, a.fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * C, C); // (B,T,C)
        }
        // residual3 = residual2 + fcproj, and in the same pass the layernorm after this layer:
        // the next layer's ln1, or lnf after the last
        if (l + 1 < L) {
            GPT2LayerParams wn = gpt2_layer_params(&model->params, cfg, l + 1);
            LayerActs an = gpt2_layer_acts(&model->acts, cfg, B, T, l + 1);
            fused_residual_forward(a.residual3, an.ln1, an.ln1_mean, an.ln1_rstd, a.residual2, a.fcproj, wn.ln1w, wn.ln1b, B, T, C);
        } else {
            fused_residual_forward(a.residual3, acts.lnf, acts.lnf_mean, acts.lnf_rstd, a.residual2, a.fcproj, p.lnfw, p.lnfb, B, T, C);
        }
    }
    // the logits (B,T,Vp) = lnf . wte^T a chunk of rows at a time, the losses (B,T), and their gradients when a
    // backward pass follows
    CpuClassifier k = gpt2_classifier(model);
    cpu_classifier_forward(&model->cpu, &k, targets);
    cpu_model_end_forward(&model->cpu, targets != NULL); // mean_loss
}

// Backward pass of the last forward (which must have had targets). Gradients are ADDED to model->grads, or written
// over them when they are stale (cpu_model_zero_grad); loss_scale multiplies the mean loss, e.g.
// 1/grad_accum_steps when gradients of several micro-batches are accumulated. dres, the residual stream's
// gradient, is each residual add's output gradient and so also its branch's (fcproj's, attproj's); the
// layernorms add their input gradients to it. Each activation gradient is written before it is read.
void gpt2_backward(void* m, float loss_scale) {
    GPT2* model = (GPT2*)m;
    const GPT2Config* cfg = &model->config;
    GPT2Params p = model->params, g = model->grads;
    ActivationTensors acts = model->acts, gacts = model->grads_acts;
    cpu_model_begin_backward(&model->cpu);
    int B = model->cpu.cur_B, T = model->cpu.cur_T;
    int L = cfg->num_layers, NH = cfg->num_heads, C = cfg->channels;
    // stale gradients: the GEMMs below overwrite theirs (the matrices, each layer's slice once, and the biases
    // with them; wte by the classifier's, the encoder then adding to it); the layernorms' and wpe's only add, so
    // they start from zero
    int fresh = model->cpu.grads_stale;
    if (fresh) {
        const size_t* n = model->cpu.param_sizes;
        float* zeroed[] = {g.wpe, g.ln1w, g.ln1b, g.ln2w, g.ln2b, g.lnfw, g.lnfb};
        const size_t sizes[] = {n[GPT2_PARAM_wpe], n[GPT2_PARAM_ln1w], n[GPT2_PARAM_ln1b], n[GPT2_PARAM_ln2w],
                                n[GPT2_PARAM_ln2b], n[GPT2_PARAM_lnfw], n[GPT2_PARAM_lnfb]};
        for (int k = 0; k < 7; k++) { zero_floats(zeroed[k], sizes[k]); }
    }
    float beta = fresh ? 0.0f : 1.0f; // the weight gradients' (the input gradients' is always 0: written)
    // the classifier: dlnf and dwte's lm_head part (in the forward pass already when it knew this backward follows)
    CpuClassifier k = gpt2_classifier(model);
    cpu_classifier_backward(&model->cpu, &k, loss_scale);
    model->cpu.grads_stale = 0;
    // lnf is the layernorm of the last layer's output: its input gradient starts the residual stream's
    LayerActs last = gpt2_layer_acts(&model->acts, cfg, B, T, L - 1);
    float* dres = gacts.encoded; // (B,T,C)
    layernorm_backward_into(dres, g.lnfw, g.lnfb, gacts.lnf, last.residual3, p.lnfw, acts.lnf_mean, acts.lnf_rstd, B, T, C, 0);

    LayerActs da = gpt2_layer_acts(&model->grads_acts, cfg, B, T, 0); // every layer's slice
    float* dfch_gelu = da.fch; // fch_gelu's gradient is fch's memory: the GELU's backward runs in place  (B,T,4C)
    for (int l = L - 1; l >= 0; l--) {
        GPT2LayerParams w = gpt2_layer_params(&model->params, cfg, l), dw = gpt2_layer_params(&model->grads, cfg, l);
        LayerActs a = gpt2_layer_acts(&model->acts, cfg, B, T, l);
        // MLP block, in reverse: dres is residual3's gradient, and fcproj's
        if (acts.bf16) { // from the GELU's bf16 input: dfch_gelu first, then the GELU's output again (what fcprojw's
            // gradient reads) in the GELU backward's pass, then fcprojw's and fcprojb's gradients
            matmul_backward_input(dfch_gelu, dres, w.fcprojw, B, T, 4 * C, C, 0.0f);
            gelu_recompute_backward_bias_bf16(a.fch_gelu16, da.fch, dw.fcb, a.fch16, dfch_gelu, B * T, 4 * C, beta);
            matmul_backward_weight_bf16_input(dw.fcprojw, dw.fcprojb, dres, a.fch_gelu16, B, T, 4 * C, C, beta);
        } else {
            // the same order: dfch_gelu, then the GELU's output again (the forward's, not kept) in its backward's pass
            matmul_backward_input(dfch_gelu, dres, w.fcprojw, B, T, 4 * C, C, 0.0f);                      // (B,T,4C)
            gelu_recompute_backward_bias(a.fch_gelu, da.fch, dw.fcb, a.fch, dfch_gelu, B * T, 4 * C, beta);
            matmul_backward_weight(dw.fcprojw, dres, a.fch_gelu, B, T, 4 * C, C, beta);
            matmul_backward_bias(dw.fcprojb, dres, B * T, C, beta);
        }
        // (fcb's gradient came with the GELU's backward, the sum of the rows it wrote)
        layernorm_recompute(a.ln2, a.residual2, a.ln2_mean, a.ln2_rstd, w.ln2w, w.ln2b, B, T, C);        // (B,T,C)
        matmul_backward_into(da.ln2, dw.fcw, NULL, da.fch, a.ln2, w.fcw, B, T, C, 4 * C, 0.0f, beta);
        layernorm_backward(dres, dw.ln2w, dw.ln2b, da.ln2, a.residual2, w.ln2w, a.ln2_mean, a.ln2_rstd, B, T, C);
        // attention block, in reverse: dres is residual2's gradient, and attproj's
        if (acts.bf16) { // from qkv and the attention's output in bf16; dqkv written (never added to)
            matmul_backward_into_bf16_input(da.atty, dw.attprojw, dw.attprojb, dres, a.atty16, w.attprojw, B, T, C, C,
                                            0.0f, beta);
            // (qkvb's gradient summed as dqkv is written, which its bf16 copy then holds alone)
            attention_gqa_backward_bf16(da.qkv, dw.qkvb, beta, da.atty, a.qkv16, a.atty16, a.att_lse, B, T, NH, NH,
                                        C / NH, 0);
        } else {
            matmul_backward_into(da.atty, dw.attprojw, dw.attprojb, dres, a.atty, w.attprojw, B, T, C, C, 0.0f, beta);
            attention_gqa_backward_into(da.qkv, da.atty, a.qkv, a.atty, a.att_lse, B, T, NH, NH, C / NH, 0);
        }
        layernorm_recompute(a.ln1, a.residual, a.ln1_mean, a.ln1_rstd, w.ln1w, w.ln1b, B, T, C);         // (B,T,C)
        matmul_backward_into(da.ln1, dw.qkvw, acts.bf16 ? NULL : dw.qkvb, da.qkv, a.ln1, w.qkvw, B, T, C, 3 * C, 0.0f,
                             beta);
        layernorm_backward(dres, dw.ln1w, dw.ln1b, da.ln1, a.residual, w.ln1w, a.ln1_mean, a.ln1_rstd, B, T, C); // the input's gradient
    }
    encoder_backward(g.wte, g.wpe, dres, model->cpu.inputs, B, T, C);
}

void gpt2_free(void* m) { cpu_model_free(&((GPT2*)m)->cpu); }

// ----------------------------------------------------------------------------
// the training program: the model's calls (test_gpt2.c runs them too), then main(). The loop, checkpoints,
// signals and every rule of training live in llmc/trainer.h (shared with train_gpt2.cu); what every CPU
// trainer adds (its main(), gradient norm, optimizer, training state, threads, MPI) in
// llmc/cpu/cpu_trainer.h.

// the model's calls for the programs around it (llmc/cpu/cpu_model.h's CpuModelCalls: each takes the GPT2 as void*)
static const CpuModelCalls gpt2_calls = {
    .allocate = gpt2_allocate, .allocate_activations = gpt2_allocate_activations, .forward = gpt2_forward,
    .backward = gpt2_backward, .free = NULL,  // the CpuModel holds everything (gpt2_free: pyllmc's)
};

#ifndef LLMC_NO_MAIN
int main(int argc, char** argv) {
    GPT2 model;
    return cpu_trainer_main(argc, argv, "Trains GPT-2 on the CPU. With no flags: the tinyshakespeare demo on gpt2_124M.bin.",
                            &GPT2_FAMILY, &model, &gpt2_calls, &model.cpu);
}
#endif
