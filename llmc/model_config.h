/*
llmc/model_config.h: GPT-2 shapes, the model descriptors accepted by `-e`, and the table of
the 16 parameter tensors in checkpoint order (names, shapes, weight-decay flags), from which
the trainers declare their parameter structs and per-layer views.

Descriptors (identical in train_gpt2.py):
  dN or gpt2:dN   depth N; d6 -> C=384 NH=6, d12 -> 768/12, d24 -> 1024/16, d36 -> 1280/20,
                  d48 -> 1600/25, any other N -> C=64*N, NH=N; maxT 1024
  gpt3:cN         GPT-3 style, channels N (a multiple of 64), head size 64, depth from the
                  GPT-3 paper's table for that width; maxT 2048
Vocabulary: V = 50257, padded to Vp = 50304 (a multiple of 128).
*/
#ifndef LLMC_MODEL_CONFIG_H
#define LLMC_MODEL_CONFIG_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "model_file.h"

#define GPT2_VOCAB_SIZE 50257
#define GPT2_PADDED_VOCAB_SIZE 50304

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V
    int padded_vocab_size;  // Vp, V rounded up so the lm_head rows stay aligned
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// ----------------------------------------------------------------------------
// The parameter tensors: the one table everything else is expanded from (the trainers'
// structs and per-layer views, names, sizes, weight-decay flags, pyllmc's shapes).
//
// X(D, name, per_layer, rows, cols, is_matrix), in checkpoint order. A tensor is one
// (rows, cols) slice, or with per_layer L slices stacked (layer l's starts at l * rows * cols);
// vectors have cols = 1. is_matrix marks the 2-D weights (AdamW decays only these). The sizes
// are written in Vp, maxT, C (and L): an expansion declares them as size_t. D is passed
// through untouched (the element type when a struct is declared).
#define GPT2_PARAMETER_TENSORS(X, D) \
    X(D, wte,  0, Vp,   C, 1) /* token embedding, also the lm_head */ \
    X(D, wpe,  0, maxT, C, 1) /* position embedding */ \
    GPT2_LAYER_PARAMETER_TENSORS(X, D) \
    X(D, lnfw, 0, C,    1, 0) /* final layernorm */ \
    X(D, lnfb, 0, C,    1, 0)

// the 12 tensors of one transformer block, contiguous in checkpoint order
#define GPT2_LAYER_PARAMETER_TENSORS(X, D) \
    X(D, ln1w,     1, C,     1,     0) /* layernorm before attention */ \
    X(D, ln1b,     1, C,     1,     0) \
    X(D, qkvw,     1, 3 * C, C,     1) /* q, k, v projections */ \
    X(D, qkvb,     1, 3 * C, 1,     0) \
    X(D, attprojw, 1, C,     C,     1) /* attention output projection */ \
    X(D, attprojb, 1, C,     1,     0) \
    X(D, ln2w,     1, C,     1,     0) /* layernorm before the MLP */ \
    X(D, ln2b,     1, C,     1,     0) \
    X(D, fcw,      1, 4 * C, C,     1) /* MLP up-projection */ \
    X(D, fcb,      1, 4 * C, 1,     0) \
    X(D, fcprojw,  1, C,     4 * C, 1) /* MLP down-projection */ \
    X(D, fcprojb,  1, C,     1,     0)

// expanded with llmc/model_file.h's TENSOR_* (GPT2_PARAM_wte = 0 ... GPT2_PARAM_lnfb = 15, and the count)
enum { GPT2_PARAMETER_TENSORS(TENSOR_INDEX, GPT2_PARAM_) GPT2_NUM_PARAMETER_TENSORS };

static const char* const GPT2_PARAMETER_NAMES[GPT2_NUM_PARAMETER_TENSORS] = {GPT2_PARAMETER_TENSORS(TENSOR_NAME, _)};
static const int GPT2_PARAMETER_IS_MATRIX[GPT2_NUM_PARAMETER_TENSORS] = {GPT2_PARAMETER_TENSORS(TENSOR_IS_MATRIX, _)};
static const int GPT2_PARAMETER_PER_LAYER[GPT2_NUM_PARAMETER_TENSORS] = {GPT2_PARAMETER_TENSORS(TENSOR_PER_LAYER, _)};

// the dimension names the table is written in
#define GPT2_DIMS_(cfg) \
    const size_t Vp = (size_t)(cfg)->padded_vocab_size, C = (size_t)(cfg)->channels; \
    const size_t maxT = (size_t)(cfg)->max_seq_len, L = (size_t)(cfg)->num_layers; \
    (void)Vp; (void)C; (void)maxT; (void)L;

// gpt2_parameter_dims, gpt2_parameter_sizes, gpt2_num_parameters (llmc/model_file.h's TENSOR_TABLE_SIZES),
// checkpoint order
TENSOR_TABLE_SIZES(gpt2, GPT2Config, GPT2_PARAMETER_TENSORS, GPT2_NUM_PARAMETER_TENSORS, GPT2_DIMS_)

// GPT2_DECLARE_PARAMETER_TENSORS(Params, LayerParams, Elem): the struct of named pointers (weights or
// gradients, element type Elem), one layer's view (the 12 tensors ln1w ... fcprojb), gpt2_point_parameters
// and gpt2_layer_params (llmc/model_file.h's TENSOR_TABLE_POINTERS)
#define GPT2_DECLARE_PARAMETER_TENSORS(Params, LayerParams, Elem) \
    TENSOR_TABLE_POINTERS(gpt2, GPT2Config, GPT2_PARAMETER_TENSORS, GPT2_LAYER_PARAMETER_TENSORS, GPT2_DIMS_, \
                          Params, LayerParams, Elem)

// ----------------------------------------------------------------------------
// The activations of a forward pass, in buffer order: X(name, per_layer, per_token, has_grad),
// every backend's table (the CPU and OpenCL trainers expand it into their structs and pointers).
// Each tensor is (B, T, per_token), (L, B, T, per_token) when per_layer, written in C, Vp, NH
// and T. has_grad: the backward pass keeps its gradient (the layernorm statistics and the
// probabilities need none). ATT(X) stands where the attention weights (B, NH, T, T) go:
// GPT2_KEEP_ATT for a backend that keeps them for the backward (OpenCL), GPT2_NO_ATT for one
// whose attention backward recomputes them (the CPU trainer).
#define GPT2_ACTIVATION_TENSORS(X, ATT) \
    X(encoded,  0, C,  1) /* token + position embeddings, the first layer's input */ \
    GPT2_LAYER_ACTIVATION_TENSORS(X, ATT) \
    X(lnf,      0, C,  1) /* final layernorm */ \
    X(lnf_mean, 0, 1,  0) \
    X(lnf_rstd, 0, 1,  0) \
    X(logits,   0, Vp, 1) \
    X(probs,    0, Vp, 0) \
    X(losses,   0, 1,  1)

#define GPT2_LAYER_ACTIVATION_TENSORS(X, ATT) \
    X(ln1,       1, C,     1) /* layernorm of the layer's input */ \
    X(ln1_mean,  1, 1,     0) \
    X(ln1_rstd,  1, 1,     0) \
    X(qkv,       1, 3 * C, 1) \
    ATT(X) \
    X(atty,      1, C,     1) /* attention output, before its projection */ \
    X(attproj,   1, C,     1) \
    X(residual2, 1, C,     1) /* input + attproj */ \
    X(ln2,       1, C,     1) \
    X(ln2_mean,  1, 1,     0) \
    X(ln2_rstd,  1, 1,     0) \
    X(fch,       1, 4 * C, 1) /* MLP hidden layer, before the GELU */ \
    X(fch_gelu,  1, 4 * C, 1) \
    X(fcproj,    1, C,     1) \
    X(residual3, 1, C,     1) /* residual2 + fcproj, the layer's output */

#define GPT2_KEEP_ATT(X) X(att, 1, NH * T, 0) /* attention weights (B, NH, T, T) */
#define GPT2_NO_ATT(X)

// parses a positive decimal integer filling the whole string; -1 if it is not one
static inline int model_config_parse_int(const char* s) {
    if (s == NULL || *s == '\0') { return -1; }
    long v = 0;
    for (const char* p = s; *p; p++) {
        if (*p < '0' || *p > '9') { return -1; }
        v = v * 10 + (*p - '0');
        if (v > 1000000) { return -1; }
    }
    return (int)v;
}

// GPT-3 depth for a given width (Brown et al. 2020, table 2.1); 0 if not a listed width
static inline int gpt3_depth_for_channels(int C) {
    static const int widths[] = {384, 768, 1024, 1536, 2048, 2560, 4096, 5120, 12288};
    static const int depths[] = {6, 12, 24, 24, 24, 32, 32, 40, 96};
    for (int i = 0; i < (int)(sizeof(widths) / sizeof(widths[0])); i++) {
        if (widths[i] == C) { return depths[i]; }
    }
    return 0;
}

// Fills cfg from a descriptor ("d12", "gpt2:d12", "gpt3:c768"). Returns 1 on success,
// 0 if `desc` is not a descriptor (then it is a checkpoint path), -1 if it looks like one
// but is invalid (e.g. "d0", "gpt3:c100"); *why then says what is wrong.
static inline int model_config_from_descriptor(const char* desc, GPT2Config* cfg, const char** why) {
    *why = "";
    const char* depth_str = NULL;
    if (strncmp(desc, "gpt2:d", 6) == 0) { depth_str = desc + 6; }
    else if (desc[0] == 'd' && desc[1] >= '0' && desc[1] <= '9') { depth_str = desc + 1; }
    cfg->vocab_size = GPT2_VOCAB_SIZE;
    cfg->padded_vocab_size = GPT2_PADDED_VOCAB_SIZE;
    if (depth_str != NULL) {
        int depth = model_config_parse_int(depth_str);
        if (depth < 1 || depth > 1000) {
            if (strncmp(desc, "gpt2:", 5) != 0 && depth < 0) { return 0; } // e.g. a file named "d1.bin"
            *why = "depth must be an integer in 1..1000 (e.g. d12)";
            return -1;
        }
        int C, NH;
        switch (depth) {
            case 6: C = 384; NH = 6; break;
            case 12: C = 768; NH = 12; break;
            case 24: C = 1024; NH = 16; break;
            case 36: C = 1280; NH = 20; break;
            case 48: C = 1600; NH = 25; break;
            default: C = 64 * depth; NH = depth; break;
        }
        cfg->max_seq_len = 1024;
        cfg->num_layers = depth;
        cfg->num_heads = NH;
        cfg->channels = C;
        return 1;
    }
    if (strncmp(desc, "gpt3:c", 6) == 0) {
        int C = model_config_parse_int(desc + 6);
        int depth = (C > 0 && C % 64 == 0) ? gpt3_depth_for_channels(C) : 0;
        if (depth == 0) {
            *why = "gpt3 width must be one of 384 768 1024 1536 2048 2560 4096 5120 12288 (e.g. gpt3:c768)";
            return -1;
        }
        cfg->max_seq_len = 2048;
        cfg->num_layers = depth;
        cfg->num_heads = C / 64;
        cfg->channels = C;
        return 1;
    }
    if (strncmp(desc, "gpt2:", 5) == 0 || strncmp(desc, "gpt3:", 5) == 0) {
        *why = "expected gpt2:dN or gpt3:cN";
        return -1;
    }
    return 0;
}

#endif // LLMC_MODEL_CONFIG_H
