/*
llmc/gpt2.h: the GPT-2 family, described once for every backend: its config and the model descriptors of `-e`,
the table of its 16 parameter tensors and of its activations, its model file (read, validated and written by
llmc/model_file.h), its parameters from scratch, and GPT2_FAMILY, the description the programs around a model
read (llmc/model_family.h). train_gpt2.py describes the same family in Python (gpt2 in its model files).

Model file (llm.c-compatible), the checkpoint: 256 int32 header
  [0]=20240326 [1]=3 (fp32) or 5 (bf16) [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp
then the 16 parameter tensors in checkpoint order (GPT2_PARAMETER_TENSORS below), wte with Vp rows.
We write fp32 (version 3); we read 3 and 5 (bf16 is widened to fp32 on load).

Descriptors (identical in train_gpt2.py):
  dN or gpt2:dN   depth N; d6 -> C=384 NH=6, d12 -> 768/12, d24 -> 1024/16, d36 -> 1280/20,
                  d48 -> 1600/25, any other N -> C=64*N, NH=N; maxT 1024
  gpt3:cN         GPT-3 style, channels N (a multiple of 64), head size 64, depth from the
                  GPT-3 paper's table for that width; maxT 2048
Vocabulary: V = 50257, padded to Vp = 50304 (a multiple of 128).

From scratch (`-e dN`), bit for bit what train_gpt2.py does: one torch-compatible generator seeded with `seed`,
normal_ draws in the order wte (V unpadded rows), wpe, then for each layer qkvw, attprojw, fcw, fcprojw. std 0.02,
residual projections (attprojw, fcprojw) 0.02/sqrt(2L), both Python doubles (normal_d). Biases 0, layernorm
weights 1 and biases 0, wte pad rows (V..Vp-1) 0.

    gpt2_config_from_descriptor(desc, cfg, why)   -e dN / gpt2:dN / gpt3:cN
    gpt2_parameter_dims, gpt2_parameter_sizes, gpt2_num_parameters   the table's shapes for a config
    GPT2Params, GPT2LayerParams, gpt2_point_parameters, gpt2_layer_params   named fp32 pointers, layer views
    gpt2_model_open(path, cfg, version) / gpt2_model_write(path, cfg, params, n)   the model file
    gpt2_init_params_from_scratch(params, cfg, seed)
    gpt2_debug_state_read(d, path, cfg, n)   the reference's debug state (llmc/debug_state.h)
    GPT2_FAMILY
*/
#ifndef LLMC_GPT2_H
#define LLMC_GPT2_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#include "rand.h"
#include "model_file.h"
#include "model_family.h"

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

// the enum GPT2_PARAM_wte = 0 ... GPT2_PARAM_lnfb = 15, its count, one layer's 12 tensors and the arrays of names
// and flags (llmc/model_file.h)
TENSOR_TABLE_INDEX(GPT2_PARAMETER_TENSORS, GPT2, ln1w, fcprojb)

// (slices, rows, cols) of each parameter tensor, checkpoint order: slices is L for the per-layer ones
static inline void gpt2_parameter_dims(size_t (*dims)[3], const void* config) {
    const GPT2Config* cfg = (const GPT2Config*)config;
    // the dimension names the table is written in
    const size_t Vp = (size_t)cfg->padded_vocab_size, C = (size_t)cfg->channels;
    const size_t maxT = (size_t)cfg->max_seq_len, L = (size_t)cfg->num_layers;
    const size_t table[GPT2_NUM_PARAMETER_TENSORS][3] = {GPT2_PARAMETER_TENSORS(TENSOR_DIMS, _)};
    memcpy(dims, table, sizeof(table));
}

// GPT2Params, GPT2LayerParams (named fp32 pointers to the 16 tensors, and one layer's 12), gpt2_parameter_sizes,
// gpt2_num_parameters, gpt2_point_parameters, gpt2_layer_params (llmc/model_file.h)
TENSOR_TABLE_VIEWS(GPT2_PARAMETER_TENSORS, GPT2_LAYER_PARAMETER_TENSORS, gpt2, GPT2, ln1w, GPT2Config, GPT2Params, GPT2LayerParams)

// ----------------------------------------------------------------------------
// The activations of a forward pass, in buffer order: X(type, name, per_layer, per_token, has_grad),
// every backend's table (the CPU and OpenCL trainers expand it into their structs and pointers).
// Each tensor is (B, T, per_token), (L, B, T, per_token) when per_layer, written in C, Vp, NH
// and T. has_grad: the backward pass keeps its gradient (the layernorm statistics and the
// probabilities need none). Four arguments say where backends differ:
//   ATT(X) stands for what attention keeps for its backward: GPT2_KEEP_ATT, the weights (B, NH, T, T) (OpenCL),
//     GPT2_ATT_LSE, each query row's log-sum-exp (B, T, NH) (the CPU trainer: its backward recomputes the weights
//     from it);
//   CLS(X) stands for the classifier's output: GPT2_KEEP_LOGITS, the (B, T, Vp) logits and probabilities and the
//     losses, each with a gradient but the probabilities (OpenCL), or GPT2_CHUNKED_LOGITS, the losses only (the CPU
//     trainer: llmc/cpu/classifier_cpu.h runs the classifier a chunk of rows at a time, its backward in the same
//     pass, and keeps the logits elsewhere when asked);
//   RS says how the residual stream's tensors (attproj, residual2, fcproj, residual3) are kept: 1, each per layer
//     with a gradient of its own, the residual adds copying their output's gradient into both inputs' (OpenCL); 0,
//     without gradients: the backward keeps one gradient of the residual stream, encoded's, and updates it in place
//     from the last layer's output back, and as it never reads a branch's output (attproj, fcproj: only the
//     residual add right after it does) every layer reuses one slice of those (the CPU trainer). With RS 0 the
//     layernorms' outputs and the GELU's (ln1, ln2, fch_gelu: only GEMMs read them) are one slice too: the
//     backward recomputes a layer's from what is kept (its input, mean and rstd; fch) right before its GEMMs, and
//     fch_gelu's gradient is fch's memory (the GELU's backward runs in place);
//   F32 says whether qkv, atty and fch are kept per layer in fp32: 1 (OpenCL, and the CPU trainer but on -p bf16),
//     or 0 where the CPU trainer keeps them per layer in bf16 alone (train_gpt2.c's GPT2_BF16_ACTIVATION_TENSORS, -p
//     bf16 on oneDNN): these rows are then one slice, the fp32 output of qkv's and fc's GEMMs before it is rounded
//     (atty's goes unused: the attention writes its output in bf16).
#define GPT2_ACTIVATION_TENSORS(X, ATT, CLS, RS, F32) \
    X(float, encoded,  0, C,  1) /* token + position embeddings, the first layer's input */ \
    GPT2_LAYER_ACTIVATION_TENSORS(X, ATT, RS, F32) \
    X(float, lnf,      0, C,  1) /* final layernorm */ \
    X(float, lnf_mean, 0, 1,  0) \
    X(float, lnf_rstd, 0, 1,  0) \
    CLS(X)

#define GPT2_LAYER_ACTIVATION_TENSORS(X, ATT, RS, F32) \
    X(float, ln1,       RS, C,    1) /* layernorm of the layer's input */ \
    X(float, ln1_mean,  1, 1,     0) \
    X(float, ln1_rstd,  1, 1,     0) \
    X(float, qkv,       F32, 3 * C, 1) \
    ATT(X) \
    X(float, atty,      F32, C,   1) /* attention output, before its projection */ \
    X(float, attproj,   RS, C,    RS) \
    X(float, residual2, 1, C,     RS) /* input + attproj */ \
    X(float, ln2,       RS, C,    1) \
    X(float, ln2_mean,  1, 1,     0) \
    X(float, ln2_rstd,  1, 1,     0) \
    X(float, fch,       F32, 4 * C, 1) /* MLP hidden layer, before the GELU */ \
    X(float, fch_gelu,  RS, 4 * C, RS) \
    X(float, fcproj,    RS, C,    RS) \
    X(float, residual3, 1, C,     RS) /* residual2 + fcproj, the layer's output */

#define GPT2_KEEP_ATT(X) X(float, att, 1, NH * T, 0) /* attention weights (B, NH, T, T) */
#define GPT2_ATT_LSE(X) X(float, att_lse, 1, NH, 0) /* attention's log-sum-exp per query row and head */
#define GPT2_KEEP_LOGITS(X) \
    X(float, logits,   0, Vp, 1) \
    X(float, probs,    0, Vp, 0) \
    X(float, losses,   0, 1,  1)
#define GPT2_CHUNKED_LOGITS(X) X(float, losses, 0, 1, 0)

// parses a positive decimal integer filling the whole string; -1 if it is not one
static inline int gpt2_parse_int(const char* s) {
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
static inline int gpt2_config_from_descriptor(const char* desc, GPT2Config* cfg, const char** why) {
    *why = "";
    const char* depth_str = NULL;
    if (strncmp(desc, "gpt2:d", 6) == 0) { depth_str = desc + 6; }
    else if (desc[0] == 'd' && desc[1] >= '0' && desc[1] <= '9') { depth_str = desc + 1; }
    cfg->vocab_size = GPT2_VOCAB_SIZE;
    cfg->padded_vocab_size = GPT2_PADDED_VOCAB_SIZE;
    if (depth_str != NULL) {
        int depth = gpt2_parse_int(depth_str);
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
        int C = gpt2_parse_int(desc + 6);
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

// ----------------------------------------------------------------------------
// the model file

#define GPT2_MODEL_MAGIC 20240326

// what only GPT-2 knows about its header (model_file_open calls it, then gpt2_model_file_parameters)
static inline void gpt2_model_file_check(const char* path, const void* config) {
    const GPT2Config* cfg = (const GPT2Config*)config;
    if (cfg->padded_vocab_size < cfg->vocab_size) {
        llmc_die("%s: bad model checkpoint header: padded vocab Vp = %d is smaller than V = %d", path, cfg->padded_vocab_size, cfg->vocab_size);
    }
    if (cfg->channels % cfg->num_heads != 0) {
        llmc_die("%s: bad model checkpoint header: channels C = %d is not a multiple of heads NH = %d", path, cfg->channels, cfg->num_heads);
    }
}

static inline size_t gpt2_model_file_parameters(const void* config, char* shape, size_t shape_size) {
    const GPT2Config* cfg = (const GPT2Config*)config;
    snprintf(shape, shape_size, "L=%d C=%d Vp=%d maxT=%d", cfg->num_layers, cfg->channels, cfg->padded_vocab_size,
             cfg->max_seq_len);
    return gpt2_num_parameters(cfg);
}

// header[2..7]: maxT, V, L, NH, C, Vp, each within its range
#define GPT2_FIELD_(name, index, hi, member) {name, MODEL_FIELD_INT, index, 1, hi, offsetof(GPT2Config, member)}
static const ModelHeaderField GPT2_HEADER_FIELDS[] = {
    GPT2_FIELD_("maxT (header[2])", 2, 1 << 20, max_seq_len), GPT2_FIELD_("vocab size V (header[3])", 3, 1 << 24, vocab_size),
    GPT2_FIELD_("layers L (header[4])", 4, 4096, num_layers), GPT2_FIELD_("heads NH (header[5])", 5, 1 << 16, num_heads),
    GPT2_FIELD_("channels C (header[6])", 6, 1 << 17, channels),
    GPT2_FIELD_("padded vocab Vp (header[7])", 7, 1 << 24, padded_vocab_size),
};
static const ModelFileFormat GPT2_MODEL_FILE = MODEL_FILE_FORMAT(
    "model checkpoint", "%s: not a model checkpoint (file is %zu bytes, shorter than the 1024-byte header)",
    GPT2_MODEL_MAGIC, 0, GPT2_HEADER_FIELDS, GPT2Config, gpt2_model_file_check, gpt2_model_file_parameters);

// gpt2_model_open(path, cfg, version) opens a checkpoint, validates its header against its real size and returns
// the open file positioned at the first parameter; *version is 3 (fp32) or 5 (bf16).
static inline FILE* gpt2_model_open(const char* path, GPT2Config* cfg, int* version) {
    return model_file_open(path, &GPT2_MODEL_FILE, cfg, version);
}

// writes cfg and n fp32 parameters atomically (temporary file, then rename)
static inline void gpt2_model_write(const char* path, const GPT2Config* cfg, const float* params, size_t n) {
    model_file_write(path, &GPT2_MODEL_FILE, cfg, params, n);
}

// ----------------------------------------------------------------------------
// from scratch

// params: gpt2_num_parameters(cfg) floats, the 16 tensors in checkpoint order
static inline void gpt2_init_params_from_scratch(float* params, const GPT2Config* cfg, unsigned int seed) {
    size_t sizes[GPT2_NUM_PARAMETER_TENSORS];
    float* t[GPT2_NUM_PARAMETER_TENSORS];  // start of each tensor
    gpt2_parameter_sizes(sizes, cfg);
    size_t total = 0;
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        t[k] = params + total;
        total += sizes[k];
    }
    memset(params, 0, total * sizeof(float));
    int L = cfg->num_layers;
    size_t C = (size_t)cfg->channels;
    mt19937_state rng;
    manual_seed(&rng, seed);
    double std = 0.02;
    double proj_std = 0.02 / sqrt(2.0 * L);
    normal_d(t[GPT2_PARAM_wte], (size_t)cfg->vocab_size * C, 0.0, std, &rng);   // (V, C), pad rows stay 0
    normal_d(t[GPT2_PARAM_wpe], (size_t)cfg->max_seq_len * C, 0.0, std, &rng);  // (maxT, C)
    for (int l = 0; l < L; l++) {
        normal_d(t[GPT2_PARAM_qkvw] + (size_t)l * 3 * C * C, 3 * C * C, 0.0, std, &rng);           // (3C, C)
        normal_d(t[GPT2_PARAM_attprojw] + (size_t)l * C * C, C * C, 0.0, proj_std, &rng);         // (C, C)
        normal_d(t[GPT2_PARAM_fcw] + (size_t)l * 4 * C * C, 4 * C * C, 0.0, std, &rng);           // (4C, C)
        normal_d(t[GPT2_PARAM_fcprojw] + (size_t)l * 4 * C * C, 4 * C * C, 0.0, proj_std, &rng);  // (C, 4C)
    }
    for (size_t i = 0; i < (size_t)L * C; i++) {
        t[GPT2_PARAM_ln1w][i] = 1.0f;
        t[GPT2_PARAM_ln2w][i] = 1.0f;
    }
    for (size_t i = 0; i < C; i++) { t[GPT2_PARAM_lnfw][i] = 1.0f; }
}

// ----------------------------------------------------------------------------
// the description

// the GPT-2 debug state train_gpt2.py --write_tensors 1 writes (llmc/debug_state.h)
static const DebugStateFormat GPT2_DEBUG_STATE = {DEBUG_STATE_MAGIC, DEBUG_STATE_VERSION, "debug state", "max", 0};

// the GPT-2 debug state, checked against the model's config and parameter count
static inline void gpt2_debug_state_read(DebugState* d, const char* path, const GPT2Config* cfg, size_t num_parameters) {
    debug_state_read_format(d, path, &GPT2_DEBUG_STATE, cfg->max_seq_len, cfg->vocab_size, num_parameters);
}


// the behaviour every program shares (llmc/model_family.h), over GPT2Config
static inline int gpt2_family_config_from_descriptor(const char* desc, void* config, const char** why) {
    return gpt2_config_from_descriptor(desc, (GPT2Config*)config, why);
}

static inline void gpt2_family_init_params(float* params, const void* config, unsigned int seed) {
    gpt2_init_params_from_scratch(params, (const GPT2Config*)config, seed);
}

static inline void gpt2_describe_config(const void* config, char* line, size_t size) {
    const GPT2Config* cfg = (const GPT2Config*)config;
    snprintf(line, size, "L=%d NH=%d C=%d maxT=%d V=%d Vp=%d", cfg->num_layers, cfg->num_heads, cfg->channels,
             cfg->max_seq_len, cfg->vocab_size, cfg->padded_vocab_size);
}

// nanochat's chat tokens in the GPT-2 vocabulary: <|user_start|> <|user_end|> <|assistant_start|> <|assistant_end|>
// (<|bos|> is <|endoftext|>, 50256)
#define GPT2_CHAT_VOCAB_SIZE 50261

// A model of GPT-2's V = 50257 that trains on chat shards gets nanochat's four chat tokens, ids 50257..50260 (pad
// rows of wte, inside Vp): V becomes 50261 and their rows of wte (the tied lm_head too) start as the mean of the
// 50257 rows before them, an embedding near every token's and logits near the average logit, rather than the
// pad rows' zeros. Returns 50261, or 0 (no growth) for any other V.
static inline int gpt2_grow_vocab_for_chat(void* config, float* params, char* line, size_t size) {
    GPT2Config* cfg = (GPT2Config*)config;
    if (cfg->vocab_size != GPT2_VOCAB_SIZE || cfg->padded_vocab_size < GPT2_CHAT_VOCAB_SIZE) { return 0; }
    size_t C = (size_t)cfg->channels, V = (size_t)cfg->vocab_size;
    float* wte = params; // (Vp, C), the first tensor
    for (size_t c = 0; c < C; c++) {
        double sum = 0.0;
        for (size_t v = 0; v < V; v++) { sum += wte[v * C + c]; }
        for (size_t v = V; v < GPT2_CHAT_VOCAB_SIZE; v++) { wte[v * C + c] = (float)(sum / (double)V); }
    }
    cfg->vocab_size = GPT2_CHAT_VOCAB_SIZE;
    snprintf(line, size, "chat shards: vocab size V grows from %d to %d for nanochat's chat tokens (ids %d..%d, inside "
             "Vp %d); their rows of wte (the tied lm_head) start as the mean of the first %d rows", GPT2_VOCAB_SIZE,
             GPT2_CHAT_VOCAB_SIZE, GPT2_VOCAB_SIZE, GPT2_CHAT_VOCAB_SIZE - 1, cfg->padded_vocab_size, GPT2_VOCAB_SIZE);
    return GPT2_CHAT_VOCAB_SIZE;
}

static const ModelFamily GPT2_FAMILY = {
    .name = "gpt2",
    .model_file = &GPT2_MODEL_FILE,
    .shard_format = SHARD_FORMAT_GPT2,
    .tokenizer_path = "gpt2_tokenizer.bin",
    .load_default = "gpt2_124M.bin",
    .load_help = "checkpoint to load, or dN / gpt2:dN / gpt3:cN to init from scratch (seed 42)",
    .missing_model = "%s: no such checkpoint (flag -e; python train_gpt2.py writes gpt2_124M.bin, or use -e d12 to init from scratch)",
    .max_T_name = "max sequence length",
    .debug_state = &GPT2_DEBUG_STATE,
    .reference = "train_gpt2.py",
    .reference_model = "gpt2_124M.bin",
    .reference_state = "gpt2_124M_debug_state.bin",
    .chat_format = "nanochat",
    .chat_tokenizer_path = GPT2_CHAT_TOKENIZER_PATH,
    MODEL_FAMILY_TENSOR_TABLE(GPT2, gpt2, ln1w),
    MODEL_FAMILY_BEHAVIOUR(gpt2),
    .grow_vocab_for_chat = gpt2_grow_vocab_for_chat,
};

#endif // LLMC_GPT2_H
