/*
llmc/decoder.h: the pre-norm decoder with RMSNorm and rotary positions that Llama 3, nanochat's GPT and Qwen3 all are
(GPT-2 is not: LayerNorm with biases, learned positions), described once for every backend. What differs between
those families is data: a DecoderConfig, which each fills from its own config (ModelFamily.decoder_config), and where
each tensor lies in the flat parameters, which decoder_layout finds in the family's tensor table by name. The
backends' models read only these two (llmc/cpu/decoder_cpu.h, llmc/cuda/decoder_gpu.cuh, generate's forward pass).

The model, with its switches (shapes: C channels, NH query heads, NKV key/value heads, HS head_dim, AW = NH HS the
attention width, QKV = (NH + 2 NKV) HS, FFN the MLP's hidden size):
    x = wte[ids]                                              (B, T, C)
    x = rmsnorm(x)                                            embed_norm only (nanochat)
    per layer:
        h = rmsnorm(x) * ln1w                                 ln1w when norm_weights, else no weight
        q, k, v = h qkvw^T                                    (B, T, QKV): q heads, k heads, v heads
        QKNORM_WEIGHTED: q, k = rmsnorm per head * qnormw, knormw, then RoPE          (Qwen3)
        QKNORM_PLAIN:    RoPE, then q, k = rmsnorm per head, no weight                (nanochat)
        QKNORM_NONE:     RoPE                                                         (Llama 3)
        RoPE pairs dimension i with i + HS/2 (rotate_half); ROPE_REVERSE flips the sign of the rotation (nanochat)
        y = softmax(q k^T / sqrt(HS), causal) v               GQA: NH / NKV query heads a key/value head; (B, T, AW)
        x = x + y attprojw^T
        h = rmsnorm(x) * ln2w
        MLP_SWIGLU: x = x + (silu(h fcw^T) * (h fcw2^T)) fcprojw^T
        MLP_RELU2:  x = x + relu(h fcw^T)^2 fcprojw^T
    logits = (rmsnorm(x) * lnfw) lm_head^T                    lm_head is wte when tied
    logits = softcap * tanh(logits / softcap)                 softcap > 0 only

    DecoderConfig                               the shapes and the switches
    DECODER_TENSORS(X)                          X(name) for each tensor a decoder may have, in the order of the enum
    decoder_layout(family, config, layout)      where each tensor lies: offsets (elements) into the flat parameters,
                                                the per-layer stride, present or not (a tied lm_head is wte)
    DECODER_POINT_FIELD(name)                   one field of a backend's struct of typed views (see its comment)
    decoder_muon_row_blocks(family, config, dims, blocks)   Muon's matrices in one layer's slice of each tensor: whole,
                                                or qkvw's q, k and v rows where the family sets muon_splits_qkv
*/
#ifndef LLMC_DECODER_H
#define LLMC_DECODER_H

#include <stddef.h>
#include <string.h>
#include "utils.h"
#include "model_family.h"
#include "muon_config.h"

typedef enum { DECODER_QKNORM_NONE = 0, DECODER_QKNORM_WEIGHTED = 1, DECODER_QKNORM_PLAIN = 2 } DecoderQkNorm;
typedef enum { DECODER_ROPE_HALF = 0, DECODER_ROPE_REVERSE = 1 } DecoderRope;
typedef enum { DECODER_MLP_SWIGLU = 0, DECODER_MLP_RELU2 = 1 } DecoderMlp;

struct DecoderConfig {
    int max_seq_len;      // maxT, the block size
    int vocab_size;       // V (no padding)
    int num_layers;       // L
    int num_heads;        // NH
    int num_kv_heads;     // NKV
    int channels;         // C
    int head_dim;         // HS (C / NH for Llama 3 and nanochat, the model's own for Qwen3)
    int ffn_hidden;       // FFN
    int tied_embeddings;  // lm_head is wte
    int norm_weights;     // ln1, ln2 and the final RMSNorm have weights (ln1w, ln2w, lnfw)
    int embed_norm;       // the embeddings are RMS-normalised before the first layer
    DecoderQkNorm qk_norm;
    DecoderRope rope;
    DecoderMlp mlp;
    float norm_eps;       // every RMSNorm's, QK-norm's included
    float softcap;        // 0: none
    // the rotary tables (llmc/cpu/rope_cpu.h rope_tables): theta, and Llama 3.1's frequency scaling (factor 0: none)
    float rope_theta, rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos;
};
typedef struct DecoderConfig DecoderConfig;

// the attention width AW = NH HS and the width of the qkv projection QKV = (NH + 2 NKV) HS
static inline int decoder_attention_width(const DecoderConfig* d) { return d->num_heads * d->head_dim; }
static inline int decoder_qkv_width(const DecoderConfig* d) { return (d->num_heads + 2 * d->num_kv_heads) * d->head_dim; }

// In a family's decoder_config: the fields its config names as the decoder does (every decoder family's config has
// them), copied into the DecoderConfig d
#define DECODER_CONFIG_COMMON_FIELDS(d, cfg) \
    do { \
        (d)->max_seq_len = (cfg)->max_seq_len, (d)->vocab_size = (cfg)->vocab_size, (d)->num_layers = (cfg)->num_layers; \
        (d)->num_heads = (cfg)->num_heads, (d)->num_kv_heads = (cfg)->num_kv_heads, (d)->channels = (cfg)->channels; \
        (d)->ffn_hidden = (cfg)->ffn_hidden, (d)->norm_eps = (cfg)->norm_eps, (d)->rope_theta = (cfg)->rope_theta; \
    } while (0)

// a family's config as a decoder's, by the family's decoder_config function (fill), before its ModelFamily exists:
// its tensor table's dimensions are written in the decoder's names (DECODER_DIM_NAMES)
static inline DecoderConfig decoder_config_of(void (*fill)(const void* config, DecoderConfig* d), const void* config) {
    DecoderConfig d;
    memset(&d, 0, sizeof(d));
    fill(config, &d);
    return d;
}

// the dimension names a decoder family's tensor table is written in, from a DecoderConfig d: V, C, L, HS, AW = NH HS,
// QKV = (NH + 2 NKV) HS, FFN, and VH (V, or 0 when the lm_head is tied to wte)
#define DECODER_DIM_NAMES(d) \
    const size_t V = (size_t)(d).vocab_size, C = (size_t)(d).channels, L = (size_t)(d).num_layers; \
    const size_t HS = (size_t)(d).head_dim, AW = (size_t)(d).num_heads * HS; \
    const size_t QKV = ((size_t)(d).num_heads + 2 * (size_t)(d).num_kv_heads) * HS, FFN = (size_t)(d).ffn_hidden; \
    const size_t VH = (d).tied_embeddings ? 0 : V; \
    (void)V; (void)C; (void)L; (void)AW; (void)QKV; (void)FFN; (void)VH

// prefix_parameter_dims, a decoder family's (slices, rows, cols) of each parameter tensor in file order (slices is L
// for the per-layer ones): its table PREFIX_PARAMETER_TENSORS, written in DECODER_DIM_NAMES, at the DecoderConfig its
// prefix_decoder_config gives
#define DECODER_PARAMETER_DIMS(prefix, PREFIX) \
    static inline void prefix##_parameter_dims(size_t (*dims)[3], const void* config) { \
        DecoderConfig d = decoder_config_of(prefix##_decoder_config, config); \
        DECODER_DIM_NAMES(d); \
        const size_t table[PREFIX##_NUM_PARAMETER_TENSORS][3] = {PREFIX##_PARAMETER_TENSORS(TENSOR_DIMS, _)}; \
        memcpy(dims, table, sizeof(table)); \
    }

// The rows of a decoder family's tensor table (X(D, name, per_layer, rows, cols, is_matrix), llmc/model_file.h) that
// the families with weighted RMSNorms write alike: the embedding, then the family's layer, the final RMSNorm and the
// lm_head, absent when tied (VH 0)
#define DECODER_WEIGHTED_NORM_TENSORS(X, D, LAYER_TENSORS) \
    X(D, wte,      0, V,   C,   1) /* token embedding */ \
    LAYER_TENSORS(X, D) \
    X(D, lnfw,     0, C,   1,   0) /* final RMSNorm */ \
    X(D, lm_head,  0, VH,  C,   1) /* output projection, absent when tied */

// and a layer's SwiGLU MLP after its RMSNorm: silu(h fcw^T) * (h fcw2^T), projected down by fcprojw
#define DECODER_SWIGLU_MLP_TENSORS(X, D) \
    X(D, ln2w,     1, C,   1,   0) /* RMSNorm before the MLP */ \
    X(D, fcw,      1, FFN, C,   1) /* gate projection (Llama's w1) */ \
    X(D, fcw2,     1, FFN, C,   1) /* up projection (w3) */ \
    X(D, fcprojw,  1, C,   FFN, 1) /* down projection (w2) */

// prefix_family_init_params (llmc/model_family.h) for a decoder family that starts as GPT-2 does, bit for bit what its
// reference does at this seed (llmc/model_file.h's tensor_table_init_normal): N(0, 0.02) over the 2-D weights, the
// residual projections (attprojw, fcprojw) 0.02/sqrt(2L); every RMSNorm weight 1
#define DECODER_FAMILY_INIT_NORMAL(prefix, PREFIX) \
    static inline void prefix##_family_init_params(float* params, const void* config, unsigned int seed) { \
        DecoderConfig d = decoder_config_of(prefix##_decoder_config, config); \
        tensor_table_init_normal(params, prefix##_parameter_dims, config, PREFIX##_NUM_PARAMETER_TENSORS, \
                                 PREFIX##_PARAMETER_IS_MATRIX, PREFIX##_PARAM_attprojw, PREFIX##_PARAM_fcprojw, \
                                 d.num_layers, seed); \
    }

// The fields of a decoder family's ModelFamily that follow from its names (llmc/model_family.h): its tensor table
// (first: its layer's first tensor), its behaviour's functions and prefix_decoder_config
#define DECODER_FAMILY_FIELDS(PREFIX, prefix, first) \
    MODEL_FAMILY_TENSOR_TABLE(PREFIX, prefix, first), MODEL_FAMILY_BEHAVIOUR(prefix), \
    .decoder_config = prefix##_decoder_config

// A dN descriptor's shapes every decoder family shares, into a zeroed config cfg of any family: maxT 1024, V, L = N,
// C = 64 N; the heads and the rest are the family's
#define DECODER_DESCRIPTOR_SHAPE(cfg, N, V) \
    do { \
        memset((cfg), 0, sizeof(*(cfg))); \
        (cfg)->max_seq_len = 1024, (cfg)->vocab_size = (V), (cfg)->num_layers = (N), (cfg)->channels = 64 * (N); \
    } while (0)

// A model file's heads, checked once its header fields are in range (the family's model_file_check): HS even (RoPE
// pairs i with i + HS/2), and C = NH HS when the family's head size is C / NH (HS 0 here); NH a multiple of NKV. One
// error line naming the file and what it is ("Llama 3 model").
static inline void decoder_check_heads(const char* path, const char* what, int C, int NH, int NKV, int HS) {
    if (HS == 0 && (C % NH != 0 || (C / NH) % 2 != 0)) {
        llmc_die("%s: bad %s header: C = %d must be NH = %d times an even head size", path, what, C, NH);
    }
    if (HS != 0 && HS % 2 != 0) { llmc_die("%s: bad %s header: head_dim %d must be even for RoPE", path, what, HS); }
    if (NKV > NH || NH % NKV != 0) {
        llmc_die("%s: bad %s header: NH = %d is not a multiple of NKV = %d", path, what, NH, NKV);
    }
}

// the family's config as a decoder's (ModelFamily.decoder_config, NULL for a family that is not a decoder)
static inline void decoder_config(const ModelFamily* family, const void* config, DecoderConfig* d) {
    if (family->decoder_config == NULL) { llmc_die("%s: not a pre-norm decoder family", family->name); }
    *d = decoder_config_of(family->decoder_config, config);
}

// ----------------------------------------------------------------------------
// the tensors, by the names the families' tables use: X(name). A family has a subset of them (nanochat: no norm
// weights, no fcw2; Llama 3: no QK-norm weights); its table's order is its file's, whatever the order here.
#define DECODER_TENSORS(X) \
    X(wte) X(ln1w) X(qkvw) X(qnormw) X(knormw) X(attprojw) X(ln2w) X(fcw) X(fcw2) X(fcprojw) X(lnfw) X(lm_head)

#define DECODER_TENSOR_ENUM_(name) DECODER_TENSOR_##name,
typedef enum { DECODER_TENSORS(DECODER_TENSOR_ENUM_) DECODER_NUM_TENSORS } DecoderTensor;
#undef DECODER_TENSOR_ENUM_

typedef struct {
    int present[DECODER_NUM_TENSORS];        // the family has it (lm_head: also when tied, as wte)
    size_t offset[DECODER_NUM_TENSORS];      // its first element in the flat parameters
    size_t layer_stride[DECODER_NUM_TENSORS]; // elements from one layer's slice to the next (0 outside the layers)
} DecoderLayout;

// where each tensor lies in the flat parameters of a model of this family and config (file order, as
// llmc/model_file.h lays them out); dies on a tensor the decoder does not know (a family's table and this file disagree)
static inline void decoder_layout(const ModelFamily* family, const void* config, DecoderLayout* layout) {
    static const char* const names[DECODER_NUM_TENSORS] = {
#define DECODER_TENSOR_NAME_(name) #name,
        DECODER_TENSORS(DECODER_TENSOR_NAME_)
#undef DECODER_TENSOR_NAME_
    };
    size_t dims[64][3];
    if (family->num_tensors > 64) { llmc_die("%s: %d parameter tensors, more than a decoder has", family->name, family->num_tensors); }
    family->tensor_dims(dims, config);
    memset(layout, 0, sizeof(*layout));
    size_t offset = 0;
    for (int i = 0; i < family->num_tensors; i++) {
        int k = 0;
        while (k < DECODER_NUM_TENSORS && strcmp(names[k], family->tensor_names[i]) != 0) { k++; }
        if (k == DECODER_NUM_TENSORS) { llmc_die("%s: tensor %s is not one a decoder has", family->name, family->tensor_names[i]); }
        size_t slice = dims[i][1] * dims[i][2];
        if (slice > 0) {
            layout->present[k] = 1;
            layout->offset[k] = offset;
            layout->layer_stride[k] = family->tensor_per_layer[i] ? slice : 0;
        }
        offset += dims[i][0] * slice;
    }
    if (!layout->present[DECODER_TENSOR_lm_head]) { // tied: the output projection is the embedding
        layout->present[DECODER_TENSOR_lm_head] = 1;
        layout->offset[DECODER_TENSOR_lm_head] = layout->offset[DECODER_TENSOR_wte];
    }
}

// One field of a backend's struct of typed views, for the body of a function that has in scope: view (the struct, a
// field per DECODER_TENSORS name), memory (the flat parameters or gradients, any element type), layout and l (a
// layer, or 0 for the whole tensors); an absent tensor's view is NULL:
//     DECODER_TENSORS(DECODER_POINT_FIELD)
#define DECODER_POINT_FIELD(name) \
    view.name = layout->present[DECODER_TENSOR_##name] \
        ? memory + layout->offset[DECODER_TENSOR_##name] + (size_t)l * layout->layer_stride[DECODER_TENSOR_##name] \
        : NULL;

// Muon's matrices in one layer's slice of each tensor of any family's table (dims: its tensor_dims at config):
// blocks[k] = their rows top to bottom, 0 after the last (llmc/muon_config.h muon_block_rows). Each tensor is one block
// of all its rows, except qkvw where the family's description sets muon_splits_qkv (a decoder's switch): its q, k and
// v rows, NH HS, NKV HS and NKV HS, as three matrices.
static inline void decoder_muon_row_blocks(const ModelFamily* family, const void* config, const size_t (*dims)[3],
                                           size_t (*blocks)[MUON_MAX_ROW_BLOCKS]) {
    for (int k = 0; k < family->num_tensors; k++) {
        blocks[k][0] = dims[k][1];
        for (int b = 1; b < MUON_MAX_ROW_BLOCKS; b++) { blocks[k][b] = 0; }
    }
    if (!family->muon_splits_qkv) { return; }
    DecoderConfig d;
    decoder_config(family, config, &d);
    size_t q_rows = (size_t)d.num_heads * d.head_dim, kv_rows = (size_t)d.num_kv_heads * d.head_dim;
    for (int k = 0; k < family->num_tensors; k++) {
        if (strcmp(family->tensor_names[k], "qkvw") != 0) { continue; }
        if (q_rows + 2 * kv_rows != dims[k][1]) {
            llmc_die("internal: %s's qkvw has %zu rows, not q, k and v's %zu", family->name, dims[k][1], q_rows + 2 * kv_rows);
        }
        blocks[k][0] = q_rows;
        blocks[k][1] = kv_rows;
        blocks[k][2] = kv_rows;
    }
}

// fp32 views of the tensors (the CPU model's, llmc/cpu/decoder_cpu.h, and generate's, llmc/cpu/decoder_inference.h):
// layer l's slice of the per-layer ones, the whole of the others (l = 0 for the whole tensors); NULL for a tensor the
// family does not have (lm_head is wte when tied). memory: the flat parameters or gradients, laid out as layout says
#define DECODER_FP32_VIEW_FIELD_(name) float* name;
typedef struct { DECODER_TENSORS(DECODER_FP32_VIEW_FIELD_) } DecoderWeights;
#undef DECODER_FP32_VIEW_FIELD_
static inline DecoderWeights decoder_weights(float* memory, const DecoderLayout* layout, int l) {
    DecoderWeights view;
    DECODER_TENSORS(DECODER_POINT_FIELD)
    return view;
}

#endif // LLMC_DECODER_H
