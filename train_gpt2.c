/*
train_gpt2.c: GPT-2 training on the CPU, in plain C with OpenMP.

Read it top to bottom (the layers, each a forward and a backward function with its shapes in a
comment, are in llmc/cpu/layers_cpu.h, shared with every CPU model):
  1. the GPT-2 model: flat parameter / gradient / activation buffers with named pointers
  2. forward, backward, gradient norm, the update: AdamW, or Muon on the blocks' matrices (llmc/cpu/muon.h)
  3. the training program: what the CPU brings (its layers, MPI) to the training loop that
     llmc/trainer.h runs for every trainer (data, validation, sampling, checkpoints and resume,
     signals), and main()

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
#include "llmc/model_config.h"
#include "llmc/rand.h"
#include "llmc/init.h"
#include "llmc/checkpoint.h"
#include "llmc/cpu/matmul.h"
#include "llmc/cpu/vecmath.h"
#include "llmc/cpu/layers_cpu.h"
#include "llmc/trainer.h"
#include "llmc/cpu/cpu_trainer.h"

// ----------------------------------------------------------------------------
// GPT-2 model definition

// the 16 parameter tensors in checkpoint order, and LayerParams: one layer's 12 of them
// (llmc/model_config.h has the table: wte (Vp,C), wpe (maxT,C), ln1w (L,C), qkvw (L,3C,C), ...)
GPT2_DECLARE_PARAMETER_TENSORS(ParameterTensors, LayerParams, float)

// The activations of a forward pass, in buffer order (llmc/model_config.h has the table: encoded,
// then per layer ln1, ln1_mean, ln1_rstd, qkv, atty, attproj, residual2, ln2, ..., fch, fch_gelu,
// fcproj, residual3, then lnf, logits, probs, losses; each (B, T, ...) or (L, B, T, ...)).
// The attention weights are not kept: attention_backward recomputes them.
#define CPU_ACTIVATION_TENSORS(X) GPT2_ACTIVATION_TENSORS(X, GPT2_NO_ATT)
#define CPU_LAYER_ACTIVATION_TENSORS(X) GPT2_LAYER_ACTIVATION_TENSORS(X, GPT2_NO_ATT)

#define CPU_ACT_FIELD_(name, per_layer, per_token, has_grad) float* name;
typedef struct { CPU_ACTIVATION_TENSORS(CPU_ACT_FIELD_) } ActivationTensors;

// one layer's activations (or their gradients): residual is the layer's input (encoded, or
// the previous layer's residual3), the others are layer l's slices, each (B,T,...)
typedef struct { float* residual; CPU_LAYER_ACTIVATION_TENSORS(CPU_ACT_FIELD_) } LayerActs;

#define CPU_ACT_POINT_(name, per_layer, per_token, has_grad) { \
        size_t size = (grads && !(has_grad)) ? 0 : ((per_layer) ? L : 1) * BT * (per_token); \
        a->name = memory != NULL && size > 0 ? memory + n : NULL; \
        n += size; \
    }
// Points the activations for B x T tokens into memory and returns how many floats they take
// (memory NULL: only counts). With grads = 1 they are the activations' gradients: only the
// has_grad tensors get memory, the others are NULL.
size_t point_activations(ActivationTensors* a, float* memory, const GPT2Config* cfg, int B, int T, int grads) {
    size_t C = cfg->channels, L = cfg->num_layers, Vp = cfg->padded_vocab_size;
    size_t BT = (size_t)B * T, n = 0;
    CPU_ACTIVATION_TENSORS(CPU_ACT_POINT_)
    return n;
}

#define CPU_ACT_LAYER_(name, per_layer, per_token, has_grad) \
    v.name = a->name != NULL ? a->name + (size_t)l * BT * (per_token) : NULL;
// layer l's view of the activations (or of their gradients) of the current B x T tokens
LayerActs gpt2_layer_acts(const ActivationTensors* a, const GPT2Config* cfg, int B, int T, int l) {
    size_t C = cfg->channels, BT = (size_t)B * T;
    LayerActs v;
    v.residual = l == 0 ? a->encoded : a->residual3 + (size_t)(l - 1) * BT * C;
    CPU_LAYER_ACTIVATION_TENSORS(CPU_ACT_LAYER_)
    return v;
}

typedef struct {
    GPT2Config config;
    // weights and their gradients: one flat buffer each, with named pointers into it
    ParameterTensors params;
    size_t param_sizes[GPT2_NUM_PARAMETER_TENSORS];
    float* params_memory;
    size_t num_parameters;
    ParameterTensors grads;
    float* grads_memory;
    // AdamW moments for this process's slice [opt_offset, opt_offset + opt_size) of the
    // flat parameters: everything, or with ZeRO-1 one shard (llmc/zero.h)
    float* m_memory;
    float* v_memory;
    size_t opt_offset;
    size_t opt_size;
    // -op muon (gpt2_allocate_muon): Muon on each layer's qkvw, attprojw, fcw, fcprojw, AdamW on the rest
    // (llmc/cpu/cpu_trainer.h's plan); m and v hold this process's segments back to back, m is a Muon
    // matrix's momentum buffer (v is unused there)
    int optimizer;                 // OPTIMIZER_ADAMW or OPTIMIZER_MUON
    CpuMuon muon;
    // activations for batches up to batch_size x seq_len, and their gradients
    ActivationTensors acts;
    float* acts_memory;
    size_t num_activations;
    ActivationTensors grads_acts; // only the has_grad tensors (the others are NULL)
    float* grads_acts_memory;
    size_t num_grad_activations;
    int batch_size;   // B the activations were allocated for
    int seq_len;      // T the activations were allocated for
    // the current batch (set by gpt2_forward)
    int* inputs;      // (B, T)
    int* targets;     // (B, T)
    int cur_B, cur_T; // sizes of the last forward pass
    float mean_loss;  // mean loss of the last forward pass with targets, -1 without
} GPT2;

// allocates parameters (zeroed) and gradients for model->config
void gpt2_allocate_parameters(GPT2* model) {
    gpt2_parameter_sizes(model->param_sizes, &model->config);
    model->num_parameters = gpt2_num_parameters(&model->config);
    model->params_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    model->grads_memory = (float*)callocCheck(model->num_parameters, sizeof(float));
    gpt2_point_parameters(&model->params, model->params_memory, &model->config);
    gpt2_point_parameters(&model->grads, model->grads_memory, &model->config);
    model->m_memory = NULL;
    model->v_memory = NULL;
    model->opt_offset = 0;
    model->opt_size = 0;
    model->optimizer = OPTIMIZER_ADAMW;
    cpu_muon_init(&model->muon);
    model->acts_memory = NULL;
    model->grads_acts_memory = NULL;
    model->inputs = NULL;
    model->targets = NULL;
    model->batch_size = 0;
    model->seq_len = 0;
    model->cur_B = model->cur_T = 0;
    model->mean_loss = -1.0f;
}

void gpt2_build_from_checkpoint(GPT2* model, const char* path) {
    int version;
    FILE* f = checkpoint_open(path, &model->config, &version);
    gpt2_allocate_parameters(model);
    model_file_read_params(f, path, version, model->params_memory, model->num_parameters);
    fcloseCheck(f, path);
}

// init from scratch exactly like train_gpt2.py (llmc/init.h, shared with the GPU trainer)
void gpt2_build_from_scratch(GPT2* model, const GPT2Config* cfg, unsigned int seed) {
    model->config = *cfg;
    gpt2_allocate_parameters(model);
    gpt2_init_params_from_scratch(model->params_memory, cfg, seed);
}

// activations and their gradients for batches of up to B x T tokens
void gpt2_allocate_activations(GPT2* model, int B, int T) {
    model->batch_size = B;
    model->seq_len = T;
    model->num_activations = point_activations(&model->acts, NULL, &model->config, B, T, 0);
    model->num_grad_activations = point_activations(&model->grads_acts, NULL, &model->config, B, T, 1);
    model->acts_memory = (float*)callocCheck(model->num_activations, sizeof(float));
    model->grads_acts_memory = (float*)callocCheck(model->num_grad_activations, sizeof(float));
    point_activations(&model->acts, model->acts_memory, &model->config, B, T, 0);
    point_activations(&model->grads_acts, model->grads_acts_memory, &model->config, B, T, 1);
    model->inputs = (int*)mallocCheck((size_t)B * T * sizeof(int));
    model->targets = (int*)mallocCheck((size_t)B * T * sizeof(int));
}

// frees the activations (pyllmc reallocates them for a bigger batch; the optimizer state stays)
void gpt2_free_activations(GPT2* model) {
    free(model->acts_memory);
    free(model->grads_acts_memory);
    free(model->inputs);
    free(model->targets);
    model->acts_memory = model->grads_acts_memory = NULL;
    model->inputs = model->targets = NULL;
    model->batch_size = model->seq_len = 0;
}

// the AdamW moments of the parameter slice [opt_offset, opt_offset + opt_size): all of it, or
// with ZeRO-1 this process's shard (llmc/zero.h)
void gpt2_allocate_optimizer(GPT2* model, size_t opt_offset, size_t opt_size) {
    model->opt_offset = opt_offset;
    model->opt_size = opt_size;
    model->m_memory = (float*)callocCheck(opt_size, sizeof(float));
    model->v_memory = (float*)callocCheck(opt_size, sizeof(float));
}

// Muon on the block matrices (the per-layer 2-D weights), AdamW on the rest: the optimizer units and, with
// ZeRO-1 over nproc processes, the segments each owns (Muon matrices whole, balanced by size); this
// process (rank) allocates the state of its own segments.
void gpt2_allocate_muon(GPT2* model, const MuonConfig* muon, int zero_stage, int nproc, int rank) {
    size_t dims[GPT2_NUM_PARAMETER_TENSORS][3];
    gpt2_parameter_dims(dims, &model->config);
    model->optimizer = OPTIMIZER_MUON;
    size_t owned = cpu_muon_plan(&model->muon, muon, (const size_t(*)[3])dims, GPT2_PARAMETER_PER_LAYER, GPT2_PARAMETER_IS_MATRIX,
                                 GPT2_NUM_PARAMETER_TENSORS, zero_stage, nproc, rank);
    gpt2_allocate_optimizer(model, 0, owned);
}

// Forward pass on inputs (B,T). With targets (B,T) also the per-token losses and their mean
// (model->mean_loss); targets may be NULL (inference: logits only). B x T may be smaller
// than what the activations were allocated for (sampling uses B=1 and a growing T).
void gpt2_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    if (model->acts_memory == NULL) { llmc_die("internal: gpt2_allocate_activations was not called"); }
    if ((size_t)B * T > (size_t)model->batch_size * model->seq_len || T > model->seq_len) {
        llmc_die("internal: forward of %dx%d tokens exceeds the %dx%d allocated", B, T, model->batch_size, model->seq_len);
    }
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int L = model->config.num_layers, NH = model->config.num_heads, C = model->config.channels;
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) { llmc_die("input token id %d at position %d is outside [0, %d)", inputs[i], i, V); }
        if (targets != NULL && (targets[i] < 0 || targets[i] >= V)) {
            llmc_die("target token id %d at position %d is outside [0, %d)", targets[i], i, V);
        }
    }
    memcpy(model->inputs, inputs, (size_t)B * T * sizeof(int));
    if (targets != NULL) { memcpy(model->targets, targets, (size_t)B * T * sizeof(int)); }
    model->cur_B = B;
    model->cur_T = T;

    const GPT2Config* cfg = &model->config;
    ParameterTensors p = model->params;
    ActivationTensors acts = model->acts;
    encoder_forward(acts.encoded, inputs, p.wte, p.wpe, B, T, C); // (B,T,C)
    // each layer ends with the next layernorm fused into its last residual add, so the first
    // layernorm runs on its own
    layernorm_forward(acts.ln1, acts.ln1_mean, acts.ln1_rstd, acts.encoded, p.ln1w, p.ln1b, B, T, C);
    for (int l = 0; l < L; l++) {
        LayerParams w = gpt2_layer_params(&model->params, cfg, l);
        LayerActs a = gpt2_layer_acts(&model->acts, cfg, B, T, l);
        // attention block (its layernorm ran already)
        matmul_forward(a.qkv, a.ln1, w.qkvw, w.qkvb, B, T, C, 3 * C);          // (B,T,3C)
        attention_forward(a.atty, NULL, a.qkv, B, T, C, NH);                   // (B,T,C)
        matmul_forward(a.attproj, a.atty, w.attprojw, w.attprojb, B, T, C, C); // (B,T,C)
        // MLP block: residual2 = residual + attproj, ln2 = layernorm(residual2) in one pass
        residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, a.residual, a.attproj, w.ln2w, w.ln2b, B, T, C);
        matmul_forward(a.fch, a.ln2, w.fcw, NULL, B, T, C, 4 * C);                      // (B,T,4C)
        bias_gelu_forward(a.fch_gelu, a.fch, w.fcb, B, T, 4 * C);                       // (B,T,4C)
        matmul_forward(a.fcproj, a.fch_gelu, w.fcprojw, w.fcprojb, B, T, 4 * C, C);     // (B,T,C)
        // residual3 = residual2 + fcproj, and in the same pass the layernorm after this layer:
        // the next layer's ln1, or lnf after the last
        if (l + 1 < L) {
            LayerParams wn = gpt2_layer_params(&model->params, cfg, l + 1);
            LayerActs an = gpt2_layer_acts(&model->acts, cfg, B, T, l + 1);
            residual_layernorm_forward(a.residual3, an.ln1, an.ln1_mean, an.ln1_rstd, a.residual2, a.fcproj, wn.ln1w, wn.ln1b, B, T, C);
        } else {
            residual_layernorm_forward(a.residual3, acts.lnf, acts.lnf_mean, acts.lnf_rstd, a.residual2, a.fcproj, p.lnfw, p.lnfb, B, T, C);
        }
    }
    matmul_forward(acts.logits, acts.lnf, p.wte, NULL, B, T, C, Vp); // (B,T,Vp), lm_head tied to wte
    if (targets == NULL) {
        model->mean_loss = -1.0f;
        return;
    }
    crossentropy_softmax_forward(acts.losses, acts.probs, acts.logits, targets, B, T, V, Vp);
    double sum = 0.0;
    for (int i = 0; i < B * T; i++) { sum += acts.losses[i]; }
    model->mean_loss = (float)(sum / (B * T));
}

void gpt2_zero_grad(GPT2* model) {
    memset(model->grads_memory, 0, model->num_parameters * sizeof(float));
}

// Backward pass of the last forward (which must have had targets). Gradients are ADDED to
// model->grads (call gpt2_zero_grad first); loss_scale multiplies the mean loss, e.g.
// 1/grad_accum_steps when gradients of several micro-batches are accumulated.
void gpt2_backward(GPT2* model, float loss_scale) {
    if (model->mean_loss < 0.0f) { llmc_die("internal: gpt2_backward needs a forward pass with targets"); }
    int B = model->cur_B, T = model->cur_T;
    int V = model->config.vocab_size, Vp = model->config.padded_vocab_size;
    int L = model->config.num_layers, NH = model->config.num_heads, C = model->config.channels;
    size_t BTC = (size_t)B * T * C;
    const GPT2Config* cfg = &model->config;
    ParameterTensors p = model->params, g = model->grads;
    ActivationTensors acts = model->acts, gacts = model->grads_acts;
    memset(model->grads_acts_memory, 0, model->num_grad_activations * sizeof(float));

    // the loss is the mean over B*T positions: each position's dloss is loss_scale / (B*T)
    float dloss_mean = loss_scale / (float)(B * T);
    for (int i = 0; i < B * T; i++) { gacts.losses[i] = dloss_mean; }
    crossentropy_softmax_backward(gacts.logits, gacts.losses, acts.probs, model->targets, B, T, V, Vp);
    matmul_backward(gacts.lnf, g.wte, NULL, gacts.logits, acts.lnf, p.wte, B, T, C, Vp);
    // lnf is the layernorm of the last layer's output
    LayerActs last = gpt2_layer_acts(&model->acts, cfg, B, T, L - 1);
    LayerActs dlast = gpt2_layer_acts(&model->grads_acts, cfg, B, T, L - 1);
    layernorm_backward(dlast.residual3, g.lnfw, g.lnfb, gacts.lnf, last.residual3, p.lnfw, acts.lnf_mean, acts.lnf_rstd, B, T, C);

    for (int l = L - 1; l >= 0; l--) {
        LayerParams w = gpt2_layer_params(&model->params, cfg, l);
        LayerParams dw = gpt2_layer_params(&model->grads, cfg, l);
        LayerActs a = gpt2_layer_acts(&model->acts, cfg, B, T, l);
        LayerActs da = gpt2_layer_acts(&model->grads_acts, cfg, B, T, l);
        // MLP block, in reverse (da.residual3 holds the gradient of the layer's output)
        residual_backward(da.residual2, da.fcproj, da.residual3, BTC);
        matmul_backward(da.fch_gelu, dw.fcprojw, dw.fcprojb, da.fcproj, a.fch_gelu, w.fcprojw, B, T, 4 * C, C);
        gelu_backward(da.fch, a.fch, da.fch_gelu, BTC * 4);
        matmul_backward(da.ln2, dw.fcw, dw.fcb, da.fch, a.ln2, w.fcw, B, T, C, 4 * C);
        layernorm_backward(da.residual2, dw.ln2w, dw.ln2b, da.ln2, a.residual2, w.ln2w, a.ln2_mean, a.ln2_rstd, B, T, C);
        // attention block, in reverse; the layer's input gradient is the previous layer's output's
        residual_backward(da.residual, da.attproj, da.residual2, BTC);
        matmul_backward(da.atty, dw.attprojw, dw.attprojb, da.attproj, a.atty, w.attprojw, B, T, C, C);
        attention_backward(da.qkv, da.atty, a.qkv, NULL, B, T, C, NH);
        matmul_backward(da.ln1, dw.qkvw, dw.qkvb, da.qkv, a.ln1, w.qkvw, B, T, C, 3 * C);
        layernorm_backward(da.residual, dw.ln1w, dw.ln1b, da.ln1, a.residual, w.ln1w, a.ln1_mean, a.ln1_rstd, B, T, C);
    }
    encoder_backward(g.wte, g.wpe, gacts.encoded, model->inputs, B, T, C);
}

// Global L2 norm of the gradients (llmc/cpu/cpu_trainer.h: fixed chunks, does not depend on the thread count)
float gpt2_grad_norm(const GPT2* model) { return cpu_grad_norm(model->grads_memory, model->num_parameters); }

// One AdamW step (llmc/adamw.h, PyTorch semantics) on this process's parameter slice.
// Gradients are first scaled by grad_scale (global-norm clipping; 1 = none). Weight decay
// applies to the 2-D weight matrices only. t is the 1-based step number.
void gpt2_update(GPT2* model, float learning_rate, float beta1, float beta2, float eps,
                 float weight_decay, float grad_scale, int t) {
    cpu_adamw_update(model->params_memory, model->grads_memory, model->m_memory, model->v_memory, model->opt_offset,
                     model->opt_size, model->param_sizes, GPT2_PARAMETER_IS_MATRIX, GPT2_NUM_PARAMETER_TENSORS,
                     learning_rate, beta1, beta2, eps, weight_decay, grad_scale, t);
}

// One step of Muon mode on this process's segments: Muon (llmc/cpu/muon.h) with muon_lr on each owned
// block matrix, AdamW (llmc/adamw.h, weight decay on 2-D tensors) with learning_rate on the other
// owned parameters; gradients are first scaled by grad_scale. t is the 1-based step number. With
// ZeRO-1 the caller then sends every segment from its owner to the others.
void gpt2_update_muon(GPT2* model, float learning_rate, float muon_lr, float beta1, float beta2, float eps,
                      float weight_decay, float grad_scale, int t) {
    cpu_muon_update(&model->muon, model->params_memory, model->grads_memory, model->m_memory, model->v_memory,
                    GPT2_PARAMETER_IS_MATRIX, learning_rate, muon_lr, beta1, beta2, eps, weight_decay, grad_scale, t);
}

void gpt2_free(GPT2* model) {
    cpu_muon_free(&model->muon);
    free(model->params_memory);
    free(model->grads_memory);
    free(model->m_memory);
    free(model->v_memory);
    gpt2_free_activations(model);
}

// ----------------------------------------------------------------------------
// the training program: everything below is only for ./train_gpt2. The loop, checkpoints, signals
// and every rule of training live in llmc/trainer.h (shared with train_gpt2.cu); what every CPU
// trainer adds (gradient norm, training state, threads, MPI) in llmc/cpu/cpu_trainer.h; this file brings
// its layers (TrainerOps).

#ifndef LLMC_NO_MAIN
#include "llmc/args.h"
#include "llmc/zero.h"
#include "llmc/mpi_utils.h"

// builds the model from a descriptor (dN, gpt2:dN, gpt3:cN) or a checkpoint path
void gpt2_build(GPT2* model, const char* load) {
    GPT2Config cfg;
    const char* why;
    int kind = model_config_from_descriptor(load, &cfg, &why);
    if (kind < 0) { llmc_die("-e %s: bad model descriptor: %s", load, why); }
    if (kind == 1) {
        gpt2_build_from_scratch(model, &cfg, TRAINER_INIT_SEED);
        return;
    }
    if (!file_exists(load)) {
        llmc_die("%s: no such checkpoint (flag -e; python train_gpt2.py writes gpt2_124M.bin, or use -e d12 to init from scratch)", load);
    }
    gpt2_build_from_checkpoint(model, load);
}

typedef struct {
    CpuTrainerCore core; // first: the generic TrainerOps of llmc/cpu/cpu_trainer.h take this struct as theirs
    GPT2* model;
} CpuTrainer;

static void cpu_zero_grad(void* ctx) { gpt2_zero_grad(((CpuTrainer*)ctx)->model); }

static float cpu_forward_backward(void* ctx, const int* inputs, const int* targets, float loss_scale, int last) {
    CpuTrainer* c = (CpuTrainer*)ctx;
    gpt2_forward(c->model, inputs, targets, c->core.B, c->core.T);
    gpt2_backward(c->model, loss_scale);
    (void)last;
    return c->model->mean_loss;
}

static const float* cpu_forward_losses(void* ctx, const int* inputs, const int* targets) {
    CpuTrainer* c = (CpuTrainer*)ctx;
    gpt2_forward(c->model, inputs, targets, c->core.B, c->core.T);
    return c->model->acts.losses;
}

static const float* cpu_next_token_logits(void* ctx, const int* tokens, int len) {
    GPT2* model = ((CpuTrainer*)ctx)->model;
    gpt2_forward(model, tokens, NULL, 1, len);
    return model->acts.logits + (size_t)(len - 1) * model->config.padded_vocab_size;
}

static void cpu_save_model(void* ctx, const char* path) {
    GPT2* model = ((CpuTrainer*)ctx)->model;
    checkpoint_write(path, &model->config, model->params_memory, model->num_parameters);
}

int main(int argc, char** argv) {
    ProcessGroup pg = process_group_init(&argc, &argv);
    TrainArgs args;
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &args, argc, argv,
               "Trains GPT-2 on the CPU. With no flags: the tinyshakespeare demo on gpt2_124M.bin.");
    cpu_parse_precision(args.precision, argv[0]);
    MuonConfig muon;
    int optimizer = cpu_parse_optimizer(&args, argv[0], &muon);
    int rank = pg.process_rank, nproc = pg.num_processes;
    CpuTrainerRun run;
    GPT2 model;
    if (cpu_trainer_prepare(&run, &args, &pg) >= 0) {
        gpt2_build_from_checkpoint(&model, run.model_path);
    } else {
        gpt2_build(&model, args.load_filename);
    }
    GPT2Config cfg = model.config;
    Trainer trainer;
    ZeroShard shard = cpu_trainer_start(&run, &trainer, cfg.vocab_size, cfg.max_seq_len, "max sequence length", model.num_parameters);
    gpt2_allocate_activations(&model, args.B, args.T);
    if (optimizer == OPTIMIZER_MUON) {
        gpt2_allocate_muon(&model, &muon, args.zero_stage, nproc, rank);
    } else {
        gpt2_allocate_optimizer(&model, shard.offset, shard.size);
    }
    cpu_choose_precision(&pg);
    CpuTrainerCore core = {&pg, args.B, args.T, args.zero_stage, model.params_memory, model.grads_memory, model.num_parameters,
                           model.m_memory, model.v_memory, model.opt_offset, model.opt_size, model.optimizer,
                           model.param_sizes, GPT2_PARAMETER_IS_MATRIX, GPT2_NUM_PARAMETER_TENSORS, &model.muon, {0}};
    cpu_trainer_schedule_muon(&core, &args, trainer.max_steps);

    // what this run does
    if (rank == 0) {
        cpu_trainer_print_flags(TRAIN_ARG_TABLE, &args);
        printf("model: %s L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %zu parameters\n", run.model_path, cfg.num_layers,
               cfg.num_heads, cfg.channels, cfg.max_seq_len, cfg.vocab_size, cfg.padded_vocab_size, model.num_parameters);
        cpu_trainer_print_optimizer(&core, &args);
        cpu_trainer_print_threads(&run);
    }

    CpuTrainer cpu = {core, &model};
    TrainerOps ops = {&cpu, cpu_zero_grad, cpu_forward_backward, cpu_trainer_grad_norm, cpu_trainer_update, cpu_forward_losses,
                      cpu_next_token_logits, cpu_save_model, cpu_trainer_save_state, cpu_trainer_load_state};
    int status = trainer_run(&trainer, &ops);

    trainer_free(&trainer);
    gpt2_free(&model);
    process_group_finalize();
    return status;
}
#endif
