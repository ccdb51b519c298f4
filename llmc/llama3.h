/*
llmc/llama3.h: the Llama 3 family, described once for every backend: the model file (read, validated, written),
its shapes, the dN descriptors, the table of its parameter tensors, and LLAMA3_FAMILY, the description the
programs around a model read (llmc/model_family.h). train_llama3.py writes the same file.

Model file, little-endian: int32 header[256]
    [0]=20240803 [1]=3 (fp32 params) or 5 (bf16) [2]=block size maxT [3]=V [4]=L [5]=NH [6]=NKV
    [7]=C [8]=ffn_dim_multiplier truncated [9]=multiple_of [10]=norm_eps truncated
    [11]=rope_theta truncated (8, 10, 11: llm.c compatibility only, ignored on read)
    [12]=use_scaled_rope (0/1) [13]=max_gen_batch_size [14]=version major (3) [15]=version minor
    [16]=tied_embeddings (1: lm_head is wte and is not stored) [17]=FFN hidden size
then float32 header[256]
    [0]=ffn_dim_multiplier (0 = none) [1]=norm_eps [2]=rope_theta [3]=rope scaling factor
    [4]=low_freq_factor [5]=high_freq_factor [6]=original_max_position_embeddings
    (3..6 are 0 when use_scaled_rope = 0)
then the parameters (fp32, or bf16 widened on load), no vocab padding, in the order of
LLAMA3_PARAMETER_TENSORS below. FFN follows Llama's rule (llama3_ffn_hidden) and must match [17].

Descriptors for -e: dN (from scratch) = L=N, C=64N, NH=N, NKV=max(1, N/2), multiple_of 32, no
ffn multiplier, norm_eps 1e-5, rope_theta 500000, no rope scaling, untied, maxT 1024; V is the
tokenizer's (llmc/tokenizer.h's tokenizer_vocab_size_for reads it from LLAMA3_TOKENIZER_PATH). Every reader error is one
line naming the file; the reading, checking and atomic writing common to every family are llmc/model_file.h's
(LLAMA3_MODEL_FILE describes this file).
*/
#ifndef LLMC_LLAMA3_H
#define LLMC_LLAMA3_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"
#include "rand.h"
#include "model_file.h"
#include "model_family.h"
#include "decoder.h"
#include "tokenizer.h"

#define LLAMA3_MAGIC 20240803
#define LLAMA3_TOKENIZER_PATH "llama3_tokenizer.bin"  // the Llama 3 tokenizer file the trainers read

typedef struct {
    int max_seq_len;      // maxT, the block size
    int vocab_size;       // V (no padding)
    int num_layers;       // L
    int num_heads;        // NH
    int num_kv_heads;     // NKV (GQA: NH / NKV query heads share one key/value head)
    int channels;         // C
    int ffn_hidden;       // FFN, the SwiGLU hidden size
    int multiple_of;
    int use_scaled_rope;  // Llama 3.1 frequency scaling
    int tied_embeddings;  // lm_head is wte
    int version_minor;
    float ffn_dim_multiplier;  // 0 = none
    float norm_eps;
    float rope_theta;
    float rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_pos;
} Llama3Config;

// Llama's FFN hidden size: h = 4C; h = int(2h/3); with a multiplier h = int(m * h); rounded up to
// a multiple of multiple_of (the float product as Python computes it, in double)
static inline int llama3_ffn_hidden(int C, float ffn_dim_multiplier, int multiple_of) {
    long long h = 4LL * C;
    h = (2 * h) / 3;
    if (ffn_dim_multiplier > 0.0f) { h = (long long)((double)ffn_dim_multiplier * (double)h); }
    return (int)(multiple_of * ((h + multiple_of - 1) / multiple_of));
}

// ----------------------------------------------------------------------------
// Llama 3's parameter tensors in file order, in llmc/decoder.h's names (is_matrix marks the 2-D weights AdamW
// decays, as the reference's optimizer groups): wte, a layer, lnfw, lm_head unless tied; the layer is
#define LLAMA3_PARAMETER_TENSORS(X, D) DECODER_WEIGHTED_NORM_TENSORS(X, D, LLAMA3_LAYER_PARAMETER_TENSORS)

#define LLAMA3_LAYER_PARAMETER_TENSORS(X, D) \
    X(D, ln1w,     1, C,   1,   0) /* RMSNorm before attention */ \
    X(D, qkvw,     1, QKV, C,   1) /* q rows (NH HS), then k rows (NKV HS), then v rows */ \
    X(D, attprojw, 1, C,   C,   1) /* attention output projection (AW = C) */ \
    DECODER_SWIGLU_MLP_TENSORS(X, D)

// the enum LLAMA3_PARAM_wte = 0 ..., its count, one layer's 7 tensors and the arrays of names and flags
// (llmc/model_file.h)
TENSOR_TABLE_INDEX(LLAMA3_PARAMETER_TENSORS, LLAMA3, ln1w, fcprojw)

// Llama 3 as a pre-norm decoder (llmc/decoder.h): weighted RMSNorms, no QK-norm, rotate_half RoPE with Llama 3.1's
// scaling when the file asks for it, SwiGLU
static inline void llama3_decoder_config(const void* config, DecoderConfig* d) {
    const Llama3Config* cfg = (const Llama3Config*)config;
    DECODER_CONFIG_COMMON_FIELDS(d, cfg);  // maxT, V, L, NH, NKV, C, FFN, eps, theta
    d->head_dim = cfg->channels / cfg->num_heads;
    d->tied_embeddings = cfg->tied_embeddings;
    d->norm_weights = 1;
    d->qk_norm = DECODER_QKNORM_NONE;
    d->rope = DECODER_ROPE_HALF;
    d->mlp = DECODER_MLP_SWIGLU;
    if (cfg->use_scaled_rope) {
        d->rope_factor = cfg->rope_factor;
        d->rope_low_freq_factor = cfg->rope_low_freq_factor;
        d->rope_high_freq_factor = cfg->rope_high_freq_factor;
        d->rope_original_max_pos = cfg->rope_original_max_pos;
    }
}

DECODER_PARAMETER_DIMS(llama3, LLAMA3)  // defines llama3_parameter_dims: the table's (slices, rows, cols) at a config

// ----------------------------------------------------------------------------
// descriptors

// "dN" (N in 1..64): the from-scratch shapes above with vocab size V; 1 if desc is one, else 0
static inline int llama3_config_from_descriptor(const char* desc, int V, Llama3Config* cfg) {
    int N = model_descriptor_depth(desc);
    if (N == 0) { return 0; }
    DECODER_DESCRIPTOR_SHAPE(cfg, N, V);
    cfg->num_heads = N, cfg->num_kv_heads = N / 2 > 1 ? N / 2 : 1;
    cfg->multiple_of = 32;  // no ffn_dim_multiplier, untied, no rope scaling, version minor 0: all zero
    cfg->ffn_hidden = llama3_ffn_hidden(cfg->channels, 0.0f, 32);
    cfg->norm_eps = 1e-5f, cfg->rope_theta = 500000.0f;
    return 1;
}

// ----------------------------------------------------------------------------
// the file

// what only Llama 3 knows about its headers (model_file_open calls it, then llama3_model_file_parameters)
static inline void llama3_model_file_check(const char* path, const void* config) {
    const Llama3Config* cfg = (const Llama3Config*)config;
    decoder_check_heads(path, "Llama 3 model", cfg->channels, cfg->num_heads, cfg->num_kv_heads, 0);
    float m = cfg->ffn_dim_multiplier, eps = cfg->norm_eps, theta = cfg->rope_theta;
    if (!isfinite(m) || m < 0.0f || !(eps > 0.0f && eps < 1.0f) || !(theta > 1.0f && isfinite(theta))) {
        llmc_die("%s: bad Llama 3 model header: ffn_dim_multiplier %g, norm_eps %g, rope_theta %g", path, m, eps, theta);
    }
    if (cfg->use_scaled_rope) {
        float factor = cfg->rope_factor, low = cfg->rope_low_freq_factor, high = cfg->rope_high_freq_factor;
        float max_pos = cfg->rope_original_max_pos;
        int ok = factor > 0.0f && low > 0.0f && high > low && max_pos > 0.0f && isfinite(factor + low + high + max_pos);
        if (!ok) {
            llmc_die("%s: bad Llama 3 model header: rope scaling factor %g, low/high freq factors %g/%g, original max positions %g",
                     path, factor, low, high, max_pos);
        }
    }
    int C = cfg->channels, want = llama3_ffn_hidden(C, m, cfg->multiple_of);
    if (cfg->ffn_hidden != want) {
        llmc_die("%s: bad Llama 3 model header: FFN hidden size %d, Llama's rule gives %d (C %d, multiplier %g, multiple_of %d)",
                 path, cfg->ffn_hidden, want, C, m, cfg->multiple_of);
    }
}

static inline size_t llama3_model_file_parameters(const void* config, char* shape, size_t shape_size) {
    const Llama3Config* cfg = (const Llama3Config*)config;
    snprintf(shape, shape_size, "L=%d C=%d NH=%d NKV=%d V=%d FFN=%d%s", cfg->num_layers, cfg->channels, cfg->num_heads,
             cfg->num_kv_heads, cfg->vocab_size, cfg->ffn_hidden, cfg->tied_embeddings ? ", tied" : "");
    return tensor_table_sizes(llama3_parameter_dims, cfg, LLAMA3_NUM_PARAMETER_TENSORS, NULL);
}

// Where each member of Llama3Config stands: int header[2..7], [9], [12], [15..17] (the named ones within their
// ranges), float header[0..6]; for llm.c's readers also the truncated floats in header[8], [10] and [11], its
// max_gen_batch_size 4 in [13] and the major version 3 in [14]
#define LLAMA3_INT_(name, index, lo, hi, member) MODEL_INT_FIELD(Llama3Config, name, index, lo, hi, member)
#define LLAMA3_FLOAT_(kind, index, member) MODEL_FLOAT_FIELD(Llama3Config, kind, index, member)
static const ModelHeaderField LLAMA3_HEADER_FIELDS[] = {
    MODEL_DECODER_SHAPE_FIELDS(Llama3Config),
    LLAMA3_FLOAT_(MODEL_FIELD_INT_OF_FLOAT, 8, ffn_dim_multiplier),
    LLAMA3_INT_("multiple_of (header[9])", 9, 1, 1 << 20, multiple_of),
    LLAMA3_FLOAT_(MODEL_FIELD_INT_OF_FLOAT, 10, norm_eps), LLAMA3_FLOAT_(MODEL_FIELD_INT_OF_FLOAT, 11, rope_theta),
    LLAMA3_INT_("use_scaled_rope (header[12])", 12, 0, 1, use_scaled_rope),
    {NULL, MODEL_FIELD_CONST, 13, 4, 4, 0},
    {"version major (header[14])", MODEL_FIELD_CONST, 14, 3, 3, 0},
    LLAMA3_INT_(NULL, 15, 0, 0, version_minor),
    LLAMA3_INT_("tied_embeddings (header[16])", 16, 0, 1, tied_embeddings),
    LLAMA3_INT_("FFN hidden size (header[17])", 17, 1, 1 << 22, ffn_hidden),
    LLAMA3_FLOAT_(MODEL_FIELD_FLOAT, 0, ffn_dim_multiplier), LLAMA3_FLOAT_(MODEL_FIELD_FLOAT, 1, norm_eps),
    LLAMA3_FLOAT_(MODEL_FIELD_FLOAT, 2, rope_theta), LLAMA3_FLOAT_(MODEL_FIELD_FLOAT, 3, rope_factor),
    LLAMA3_FLOAT_(MODEL_FIELD_FLOAT, 4, rope_low_freq_factor), LLAMA3_FLOAT_(MODEL_FIELD_FLOAT, 5, rope_high_freq_factor),
    LLAMA3_FLOAT_(MODEL_FIELD_FLOAT, 6, rope_original_max_pos),
};
static const ModelFileFormat LLAMA3_MODEL_FILE = MODEL_FILE_FORMAT(
    "Llama 3 model", "%s: not a Llama 3 model file (%zu bytes, shorter than the 2048-byte header)",
    LLAMA3_MAGIC, 1, LLAMA3_HEADER_FIELDS, Llama3Config, llama3_model_file_check, llama3_model_file_parameters);

// ----------------------------------------------------------------------------
// the description

// the behaviour every program shares (llmc/model_family.h), over Llama3Config: -e dN takes V from the tokenizer file
static inline int llama3_family_config_from_descriptor(const char* desc, void* config, const char** why) {
    Llama3Config* cfg = (Llama3Config*)config;
    if (!llama3_config_from_descriptor(desc, 1, cfg)) { return 0; }
    cfg->vocab_size = tokenizer_vocab_size_for(LLAMA3_TOKENIZER_PATH, "Llama 3", "train_llama3.py", desc);
    return 1;
}

// from scratch, as train_llama3.py: std 0.02 over wte, qkvw, attprojw, fcw, fcw2, fcprojw and lm_head when untied,
// attprojw and fcprojw 0.02/sqrt(2L), the RMSNorm weights 1
DECODER_FAMILY_INIT_NORMAL(llama3, LLAMA3)  // defines llama3_family_init_params

static inline void llama3_describe_config(const void* config, char* line, size_t size) {
    const Llama3Config* cfg = (const Llama3Config*)config;
    snprintf(line, size, "Llama 3 L=%d NH=%d NKV=%d C=%d FFN=%d maxT=%d V=%d%s%s", cfg->num_layers, cfg->num_heads,
             cfg->num_kv_heads, cfg->channels, cfg->ffn_hidden, cfg->max_seq_len, cfg->vocab_size,
             cfg->tied_embeddings ? ", tied lm_head" : "", cfg->use_scaled_rope ? ", scaled RoPE" : "");
}

// the Llama 3 debug state train_llama3.py writes (llmc/debug_state.h)
static const DebugStateFormat LLAMA3_DEBUG_STATE = {20240803, 3, "Llama 3 debug state", "block size", 1};

static const ModelFamily LLAMA3_FAMILY = {
    MODEL_FAMILY_D2_REFERENCE(LLAMA3, "llama3", "Llama 3", SHARD_FORMAT_LLAMA3, BPE_PATTERN_LLAMA3,
                              "Llama 3 model file (train_llama3.py writes one) or dN to init from scratch (V from " LLAMA3_TOKENIZER_PATH ")"),
    .chat_format = "llama3",
    DECODER_FAMILY_FIELDS(LLAMA3, llama3, ln1w),
};

#endif // LLMC_LLAMA3_H
