/*
llmc/nanochat.h: nanochat's GPT, described once for every backend: the model file (read, validated, written), its
shapes, the dN descriptors, the table of its parameter tensors, the parameters from scratch, and NANOCHAT_FAMILY,
the description the programs around a model read (llmc/model_family.h). train_nanochat.py writes the same file.

The model (transformers' NanoChatForCausalLM): token embedding, untied from the head; weightless RMSNorm on the
embeddings, before attention and before the MLP in every block, and at the end; attention with q, k, v and output
projections without bias, grouped-query heads, RoPE with NanoChat's rotate-half (dimension i with i + HS/2, the
second half's sign flipped), then weightless RMSNorm on q and on k per head (QK-norm, after RoPE), causal softmax
scaled by 1/sqrt(HS); MLP fc -> ReLU^2 -> fcproj, no bias; lm_head; logits capped as cap * tanh(logits / cap)
when the softcap is not 0.

Model file, little-endian: int32 header[256]
    [0]=20251013 [1]=3 (fp32 params) or 5 (bf16) [2]=block size maxT [3]=V [4]=L [5]=NH [6]=NKV [7]=C
    [8]=FFN, the MLP's hidden size
then float32 header[256]
    [0]=norm_eps [1]=rope_theta [2]=softcap (0 = none)
then the parameters (fp32, or bf16 widened on load), no vocab padding, in the order of NANOCHAT_PARAMETER_TENSORS
below. Every reader error is one line naming the file (llmc/model_file.h reads, checks and writes atomically).

Descriptors for -e: dN (from scratch, N in 1..64), nanochat's depth rule: L=N, C=64N, heads of 128 (NH =
ceil(C/128), one head of C below 128), NKV=NH, FFN=4C, maxT 1024, V=50304 (GPT-2's 50257 padded to a multiple
of 64: it trains on GPT-2 token shards), norm_eps 1e-6, rope_theta 10000, softcap 15.
*/
#ifndef LLMC_NANOCHAT_H
#define LLMC_NANOCHAT_H

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

#define NANOCHAT_MAGIC 20251013
#define NANOCHAT_TOKENIZER_PATH "nanochat_tokenizer.bin"  // train_nanochat.py writes it (GPT-2's, or the checkpoint's)
#define NANOCHAT_SCRATCH_VOCAB 50304                       // -e dN: GPT-2's vocabulary padded to a multiple of 64

typedef struct {
    int max_seq_len, vocab_size, num_layers;  // maxT the block size, V (no padding), L
    int num_heads, num_kv_heads, channels;    // NH, NKV (NH / NKV query heads a key/value head), C
    int ffn_hidden;    // FFN, the ReLU^2 MLP's hidden size
    float norm_eps;    // every RMSNorm's (none has a weight)
    float rope_theta;
    float softcap;     // logits = softcap * tanh(logits / softcap); 0 = none
} NanoChatConfig;

// ----------------------------------------------------------------------------
// the parameter tensors, in file order: X(D, name, per_layer, rows, cols, is_matrix), sizes in V, C,
// QKV = (NH + 2 NKV) HS and FFN. All are matrices: Muon trains the per-layer ones, AdamW wte and lm_head.
#define NANOCHAT_PARAMETER_TENSORS(X, D) \
    X(D, wte,      0, V,   C,   1) /* token embedding */ \
    NANOCHAT_LAYER_PARAMETER_TENSORS(X, D) \
    X(D, lm_head,  0, V,   C,   1) /* output projection, never tied */

#define NANOCHAT_LAYER_PARAMETER_TENSORS(X, D) \
    X(D, qkvw,     1, QKV, C,   1) /* q rows (NH HS), then k rows (NKV HS), then v rows */ \
    X(D, attprojw, 1, C,   C,   1) /* attention output projection */ \
    X(D, fcw,      1, FFN, C,   1) /* MLP in (before ReLU^2) */ \
    X(D, fcprojw,  1, C,   FFN, 1) /* MLP out */

// the enum NANOCHAT_PARAM_wte = 0 ..., its count, one layer's 4 tensors and the arrays of names and flags
// (llmc/model_file.h)
TENSOR_TABLE_INDEX(NANOCHAT_PARAMETER_TENSORS, NANOCHAT, qkvw, fcprojw)

// nanochat's GPT as a pre-norm decoder (llmc/decoder.h): weightless RMSNorms, the embeddings normalised too, RoPE
// with the reversed sign then weightless QK-norm, ReLU^2, the logits' softcap, never tied
static inline void nanochat_decoder_config(const void* config, DecoderConfig* d) {
    const NanoChatConfig* cfg = (const NanoChatConfig*)config;
    DECODER_CONFIG_COMMON_FIELDS(d, cfg);  // maxT, V, L, NH, NKV, C, FFN, eps, theta
    d->head_dim = cfg->channels / cfg->num_heads;
    d->embed_norm = 1;
    d->qk_norm = DECODER_QKNORM_PLAIN;
    d->rope = DECODER_ROPE_REVERSE;
    d->mlp = DECODER_MLP_RELU2;
    d->softcap = cfg->softcap;
}

DECODER_PARAMETER_DIMS(nanochat, NANOCHAT)  // defines nanochat_parameter_dims: (slices, rows, cols) of each, file order

// ----------------------------------------------------------------------------
// descriptors

// "dN" (N in 1..64): the depth rule above; 1 if desc is one, else 0; dies on a depth whose heads do not divide C
static inline int nanochat_config_from_descriptor(const char* desc, NanoChatConfig* cfg) {
    int N = model_descriptor_depth(desc);
    if (N == 0) { return 0; }
    DECODER_DESCRIPTOR_SHAPE(cfg, N, NANOCHAT_SCRATCH_VOCAB);
    cfg->num_heads = (cfg->channels + 127) / 128;  // heads of 128 (d1: one head of 64)
    cfg->num_kv_heads = cfg->num_heads;
    cfg->ffn_hidden = 4 * cfg->channels;
    cfg->norm_eps = 1e-6f;
    cfg->rope_theta = 10000.0f;
    cfg->softcap = 15.0f;
    if (cfg->channels % cfg->num_heads != 0) {  // the reference refuses the same depths
        llmc_die("-e %s: bad nanochat config: channels C %d is not a multiple of heads NH %d "
                 "(the depth rule gives whole heads for even N and for N = 1, 3, 7, 15, 31, 63)",
                 desc, cfg->channels, cfg->num_heads);
    }
    return 1;
}

// ----------------------------------------------------------------------------
// the file

// what only nanochat knows about its headers (model_file_open calls it, then nanochat_model_file_parameters)
static inline void nanochat_model_file_check(const char* path, const void* config) {
    const NanoChatConfig* cfg = (const NanoChatConfig*)config;
    decoder_check_heads(path, "nanochat model", cfg->channels, cfg->num_heads, cfg->num_kv_heads, 0);
    float eps = cfg->norm_eps, theta = cfg->rope_theta, cap = cfg->softcap;
    if (!(eps > 0.0f && eps < 1.0f) || !(theta > 1.0f && isfinite(theta))) {
        llmc_die("%s: bad nanochat model header: norm_eps %g, rope_theta %g", path, eps, theta);
    }
    if (!(cap >= 0.0f && isfinite(cap))) {
        llmc_die("%s: bad nanochat model header: softcap %g (0 for none, else a finite cap > 0)", path, cap);
    }
}

static inline size_t nanochat_model_file_parameters(const void* config, char* shape, size_t shape_size) {
    const NanoChatConfig* cfg = (const NanoChatConfig*)config;
    snprintf(shape, shape_size, "L=%d C=%d NH=%d NKV=%d V=%d FFN=%d softcap=%g", cfg->num_layers, cfg->channels,
             cfg->num_heads, cfg->num_kv_heads, cfg->vocab_size, cfg->ffn_hidden, cfg->softcap);
    return tensor_table_sizes(nanochat_parameter_dims, cfg, NANOCHAT_NUM_PARAMETER_TENSORS, NULL);
}

// where each member of NanoChatConfig stands: int header[2..8], float header[0..2]
#define NANOCHAT_FLOAT_(index, member) MODEL_FLOAT_FIELD(NanoChatConfig, MODEL_FIELD_FLOAT, index, member)
static const ModelHeaderField NANOCHAT_HEADER_FIELDS[] = {
    MODEL_DECODER_SHAPE_FIELDS(NanoChatConfig),
    MODEL_INT_FIELD(NanoChatConfig, "FFN hidden size (header[8])", 8, 1, 1 << 22, ffn_hidden),
    NANOCHAT_FLOAT_(0, norm_eps), NANOCHAT_FLOAT_(1, rope_theta), NANOCHAT_FLOAT_(2, softcap),
};
static const ModelFileFormat NANOCHAT_MODEL_FILE = MODEL_FILE_FORMAT(
    "nanochat model", "%s: not a nanochat model file (%zu bytes, shorter than the 2048-byte header)",
    NANOCHAT_MAGIC, 1, NANOCHAT_HEADER_FIELDS, NanoChatConfig, nanochat_model_file_check, nanochat_model_file_parameters);

// ----------------------------------------------------------------------------
// from scratch

// params: the model's floats, file order; bit for bit train_nanochat.py's init at this seed: one mt19937 drawing
// wte ~ N(0, 1), then per layer qkvw and fcw ~ U(-b, b) with b = sqrt(3 / C) (the spread of N(0, 1/C) at a bounded
// range), then lm_head ~ N(0, 0.001); the output projections start at zero, so every block starts as the identity on
// the residual stream
static inline void nanochat_init_params_from_scratch(float* params, const NanoChatConfig* cfg, unsigned int seed) {
    size_t n[NANOCHAT_NUM_PARAMETER_TENSORS];
    float* t[NANOCHAT_NUM_PARAMETER_TENSORS]; // each tensor's start, file order
    memset(params, 0, tensor_table_sizes(nanochat_parameter_dims, cfg, NANOCHAT_NUM_PARAMETER_TENSORS, n) * sizeof(float));
    t[0] = params;
    for (int k = 1; k < NANOCHAT_NUM_PARAMETER_TENSORS; k++) { t[k] = t[k - 1] + n[k - 1]; }
    size_t V = (size_t)cfg->vocab_size, C = (size_t)cfg->channels, FFN = (size_t)cfg->ffn_hidden;
    size_t QKV = ((size_t)cfg->num_heads + 2 * (size_t)cfg->num_kv_heads) * (C / (size_t)cfg->num_heads);
    float b = (float)(pow(3.0, 0.5) * pow((double)C, -0.5));
    mt19937_state rng;
    manual_seed(&rng, seed);
    normal_d(t[NANOCHAT_PARAM_wte], V * C, 0.0, 1.0, &rng);  // (V, C)
    for (size_t l = 0; l < (size_t)cfg->num_layers; l++) {
        uniform_(t[NANOCHAT_PARAM_qkvw] + l * QKV * C, QKV * C, -b, b, &rng);  // (QKV, C)
        uniform_(t[NANOCHAT_PARAM_fcw] + l * FFN * C, FFN * C, -b, b, &rng);   // (FFN, C)
    }
    normal_d(t[NANOCHAT_PARAM_lm_head], V * C, 0.0, 0.001, &rng);  // (V, C)
}

// ----------------------------------------------------------------------------
// the description

// the nanochat debug state train_nanochat.py writes (llmc/debug_state.h: the Llama 3 layout, with gradient norms)
static const DebugStateFormat NANOCHAT_DEBUG_STATE = {NANOCHAT_MAGIC, 3, "nanochat debug state", "block size", 1};

// the behaviour every program shares (llmc/model_family.h), over NanoChatConfig
static inline int nanochat_family_config_from_descriptor(const char* desc, void* config, const char** why) {
    return nanochat_config_from_descriptor(desc, (NanoChatConfig*)config);
}

static inline void nanochat_family_init_params(float* params, const void* config, unsigned int seed) {
    nanochat_init_params_from_scratch(params, (const NanoChatConfig*)config, seed);
}

static inline void nanochat_describe_config(const void* config, char* line, size_t size) {
    const NanoChatConfig* cfg = (const NanoChatConfig*)config;
    snprintf(line, size, "nanochat L=%d NH=%d NKV=%d C=%d FFN=%d maxT=%d V=%d softcap %g", cfg->num_layers,
             cfg->num_heads, cfg->num_kv_heads, cfg->channels, cfg->ffn_hidden, cfg->max_seq_len, cfg->vocab_size,
             cfg->softcap);
}

static const ModelFamily NANOCHAT_FAMILY = {
    // GPT-2's shards and its tokenizer's split (text prompts need it)
    MODEL_FAMILY_D2_REFERENCE(NANOCHAT, "nanochat", "nanochat", SHARD_FORMAT_GPT2, BPE_PATTERN_GPT2,
                              "nanochat model file (train_nanochat.py writes one) or dN to init from scratch (V = 50304, GPT-2 tokens)"),
    .chat_format = "nanochat", // its tokens, after GPT-2's (an imported NanoChat's tokenizer file has its own)
    .chat_tokenizer_path = GPT2_CHAT_TOKENIZER_PATH,
    DECODER_FAMILY_FIELDS(NANOCHAT, nanochat, qkvw),
    .muon_splits_qkv = 1, // as nanochat's own Muon: q, k and v are three matrices
};

#endif // LLMC_NANOCHAT_H
