/*
llmc/qwen3.h: the Qwen3 family (transformers' Qwen3ForCausalLM), described once for every backend: the model file
(read, validated, written), its shapes, the dN descriptors, the table of its parameter tensors, the init from
scratch, and QWEN3_FAMILY, the description the programs around a model read (llmc/model_family.h). train_qwen3.py
writes the same file (pyllmc/families/qwen3.py, doc/qwen3.md).

Model file, little-endian: int32 header[256]
    [0]=20250429 [1]=3 (fp32 params) or 5 (bf16) [2]=block size maxT [3]=V [4]=L [5]=NH [6]=NKV [7]=C
    [8]=head_dim HS (even, independent of C/NH) [9]=FFN hidden size [10]=tied embeddings (1: lm_head is wte and is
    not stored) [11..255]=0
then float32 header[256]
    [0]=norm_eps (every RMSNorm, QK-norm included) [1]=rope_theta [2..255]=0
then the parameters (fp32, or bf16 widened on load), no vocab padding, in the order of QWEN3_PARAMETER_TENSORS below.

Shapes: V vocab, C channels, L layers, NH query heads, NKV key/value heads, HS head_dim, AW = NH HS the attention
width (may differ from C), QKV = (NH + 2 NKV) HS, FFN the SwiGLU hidden size.

Descriptors for -e: dN (from scratch) = L=N, C=64N, NH=N, NKV=max(1, N/2), HS=128 (attention width 128N, twice C),
FFN=3C, norm_eps 1e-6, rope_theta 1e6, untied, maxT 1024; V is the tokenizer's (llmc/tokenizer.h's tokenizer_vocab_size_for
reads it from QWEN3_TOKENIZER_PATH). Every reader error is one line naming the file (llmc/model_file.h's reader; QWEN3_MODEL_FILE
describes this file).
*/
#ifndef LLMC_QWEN3_H
#define LLMC_QWEN3_H

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

#define QWEN3_MAGIC 20250429
#define QWEN3_TOKENIZER_PATH "qwen3_tokenizer.bin"  // the tokenizer file the trainers read (train_qwen3.py writes it)

typedef struct {
    int max_seq_len;      // maxT, the block size
    int vocab_size;       // V (no padding; may exceed the tokenizer's vocabulary)
    int num_layers;       // L
    int num_heads;        // NH
    int num_kv_heads;     // NKV (GQA: NH / NKV query heads share one key/value head)
    int channels;         // C
    int head_dim;         // HS, not C / NH in general
    int ffn_hidden;       // FFN, the SwiGLU hidden size
    int tied_embeddings;  // lm_head is wte
    float norm_eps;
    float rope_theta;
} Qwen3Config;

// ----------------------------------------------------------------------------
// Qwen3's tensors, file order, in the sizes of llmc/decoder.h (HS and AW its own): as Llama 3's but for the QK-norm
// weights and an o_proj of AW columns. is_matrix: the 2-D weights (AdamW decays them, as the reference's optimizer
// groups, and Muon trains them).
#define QWEN3_PARAMETER_TENSORS(X, D) DECODER_WEIGHTED_NORM_TENSORS(X, D, QWEN3_LAYER_PARAMETER_TENSORS)

#define QWEN3_LAYER_PARAMETER_TENSORS(X, D) \
    X(D, ln1w,     1, C,   1,   0) /* RMSNorm before attention */ \
    X(D, qkvw,     1, QKV, C,   1) /* q heads' rows, k heads', v heads' (NH HS, NKV HS, NKV HS) */ \
    X(D, qnormw,   1, HS,  1,   0) /* QK-norm's weight of the q heads (q_norm) */ \
    X(D, knormw,   1, HS,  1,   0) /* and of the k heads (k_norm) */ \
    X(D, attprojw, 1, C,   AW,  1) /* attention output projection (o_proj) */ \
    DECODER_SWIGLU_MLP_TENSORS(X, D)

// the enum QWEN3_PARAM_wte = 0 ..., its count, one layer's 9 tensors and the arrays of names and flags
// (llmc/model_file.h)
TENSOR_TABLE_INDEX(QWEN3_PARAMETER_TENSORS, QWEN3, ln1w, fcprojw)

// Qwen3 as a pre-norm decoder (llmc/decoder.h): weighted RMSNorms, QK-norm with a weight before rotate_half RoPE,
// its own head_dim, SwiGLU
static inline void qwen3_decoder_config(const void* config, DecoderConfig* d) {
    const Qwen3Config* cfg = (const Qwen3Config*)config;
    DECODER_CONFIG_COMMON_FIELDS(d, cfg);  // maxT, V, L, NH, NKV, C, FFN, eps, theta
    d->head_dim = cfg->head_dim;
    d->tied_embeddings = cfg->tied_embeddings;
    d->norm_weights = 1;
    d->qk_norm = DECODER_QKNORM_WEIGHTED;
    d->rope = DECODER_ROPE_HALF;
    d->mlp = DECODER_MLP_SWIGLU;
}

DECODER_PARAMETER_DIMS(qwen3, QWEN3)  // defines qwen3_parameter_dims, from the table above

// ----------------------------------------------------------------------------
// descriptors

// the behaviour every program shares (llmc/model_family.h), over Qwen3Config: "dN" (N in 1..64), the from-scratch
// shapes above, V from the tokenizer file; 1 if desc is one, else 0
static inline int qwen3_family_config_from_descriptor(const char* desc, void* config, const char** why) {
    (void)why;
    Qwen3Config* cfg = (Qwen3Config*)config;
    int N = model_descriptor_depth(desc);
    if (N == 0) { return 0; }
    int V = tokenizer_vocab_size_for(QWEN3_TOKENIZER_PATH, "Qwen3", "train_qwen3.py", desc);
    DECODER_DESCRIPTOR_SHAPE(cfg, N, V);  // untied
    cfg->num_heads = N, cfg->num_kv_heads = N / 2 > 1 ? N / 2 : 1;  // as Llama 3's
    cfg->head_dim = 128;                  // Qwen3's head size at every published size
    cfg->ffn_hidden = 3 * cfg->channels;  // 3C: Qwen3-0.6B's ratio
    cfg->norm_eps = 1e-6f, cfg->rope_theta = 1000000.0f;
    return 1;
}

// ----------------------------------------------------------------------------
// the file

// what only Qwen3 knows about its headers (model_file_open calls it once the fields are in range)
static inline void qwen3_model_file_check(const char* path, const void* config) {
    const Qwen3Config* cfg = (const Qwen3Config*)config;
    decoder_check_heads(path, "Qwen3 model", cfg->channels, cfg->num_heads, cfg->num_kv_heads, cfg->head_dim);
    float eps = cfg->norm_eps, theta = cfg->rope_theta;
    if (!(eps > 0.0f && eps < 1.0f) || !(theta > 1.0f && isfinite(theta))) {
        llmc_die("%s: bad Qwen3 model header: norm_eps %g must be in (0, 1) and rope_theta %g finite and > 1", path, eps,
                 theta);
    }
}

static inline size_t qwen3_model_file_parameters(const void* config, char* shape, size_t shape_size) {
    const Qwen3Config* cfg = (const Qwen3Config*)config;
    snprintf(shape, shape_size, "L=%d C=%d NH=%d NKV=%d HS=%d V=%d FFN=%d%s", cfg->num_layers, cfg->channels,
             cfg->num_heads, cfg->num_kv_heads, cfg->head_dim, cfg->vocab_size, cfg->ffn_hidden,
             cfg->tied_embeddings ? ", tied" : "");
    return tensor_table_sizes(qwen3_parameter_dims, cfg, QWEN3_NUM_PARAMETER_TENSORS, NULL);
}

// Where each member of Qwen3Config stands: int header[2..10] within their ranges, float header[0..1]
static const ModelHeaderField QWEN3_HEADER_FIELDS[] = {
    MODEL_DECODER_SHAPE_FIELDS(Qwen3Config),
    MODEL_INT_FIELD(Qwen3Config, "head_dim HS (header[8])", 8, 2, 1 << 12, head_dim),
    MODEL_INT_FIELD(Qwen3Config, "FFN hidden size (header[9])", 9, 1, 1 << 22, ffn_hidden),
    MODEL_INT_FIELD(Qwen3Config, "tied embeddings (header[10])", 10, 0, 1, tied_embeddings),
    {"unused header[11]", MODEL_FIELD_CONST, 11, 0, 0, 0},
    MODEL_FLOAT_FIELD(Qwen3Config, MODEL_FIELD_FLOAT, 0, norm_eps), MODEL_FLOAT_FIELD(Qwen3Config, MODEL_FIELD_FLOAT, 1, rope_theta),
};
static const ModelFileFormat QWEN3_MODEL_FILE = MODEL_FILE_FORMAT(
    "Qwen3 model", "%s: not a Qwen3 model file (%zu bytes, shorter than the 2048-byte header)",
    QWEN3_MAGIC, 1, QWEN3_HEADER_FIELDS, Qwen3Config, qwen3_model_file_check, qwen3_model_file_parameters);

// ----------------------------------------------------------------------------
// the description

// the parameters from scratch, bit for bit train_qwen3.py's: the matrices N(0, 0.02), o_proj and down_proj
// 0.02/sqrt(2L), every RMSNorm weight (ln1w, qnormw, knormw, ln2w, lnfw) 1
DECODER_FAMILY_INIT_NORMAL(qwen3, QWEN3)  // defines qwen3_family_init_params

static inline void qwen3_describe_config(const void* config, char* line, size_t size) {
    const Qwen3Config* cfg = (const Qwen3Config*)config;
    snprintf(line, size, "Qwen3 L=%d NH=%d NKV=%d HS=%d C=%d FFN=%d maxT=%d V=%d%s", cfg->num_layers, cfg->num_heads,
             cfg->num_kv_heads, cfg->head_dim, cfg->channels, cfg->ffn_hidden, cfg->max_seq_len, cfg->vocab_size,
             cfg->tied_embeddings ? ", tied lm_head" : "");
}

// the Qwen3 debug state train_qwen3.py writes (llmc/debug_state.h: the Llama 3 layout, with gradient norms)
static const DebugStateFormat QWEN3_DEBUG_STATE = {QWEN3_MAGIC, 3, "Qwen3 debug state", "block size", 1};

static const ModelFamily QWEN3_FAMILY = {
    // Llama 3's shards (uint32 ids, bounded by the model's V); its tokenizer splits numbers one digit a piece
    MODEL_FAMILY_D2_REFERENCE(QWEN3, "qwen3", "Qwen3", SHARD_FORMAT_LLAMA3, BPE_PATTERN_QWEN,
                              "Qwen3 model file (train_qwen3.py writes one) or dN to init from scratch (V from " QWEN3_TOKENIZER_PATH ")"),
    .chat_format = "chatml",
    DECODER_FAMILY_FIELDS(QWEN3, qwen3, ln1w),
};

#endif // LLMC_QWEN3_H
