/*
llmc/cpu/decoder_inference.h: batch-1 inference on the CPU of every pre-norm decoder family (llmc/decoder.h: Llama 3,
nanochat's GPT, Qwen3), and generate's hooks for them. It reads only the family's description (llmc/model_family.h: its
model file, tensor table, decoder_config) and the DecoderConfig / DecoderLayout it gives: one forward pass with a
key/value cache (llmc/cpu/kv_cache.h) that holds the NKV key/value heads, head_dim wide, keys as attention reads them
(after RoPE and QK-norm). The math is the trainers' forward pass (llmc/cpu/'s layers), one position at a time.

    DecoderInference                                the family, its DecoderConfig and DecoderLayout, the flat weights,
                                                    the rotary tables
    decoder_inference_init(m, family, config)       the buffers for a config of the family (weights zeroed)
    decoder_inference_load(m, family, path)         from a model file of the family (llmc/model_file.h)
    decoder_inference_cache(m, kv)                  a cache of the model's shapes, its whole context
    decoder_forward_cached(model, kv, tokens, n)    a KVForwardFn: tokens in at kv->pos, the last position's logits out
    decoder_inference_free(m)
    DECODER_GENERATE(FAMILY)                        generate's hooks of a decoder family (llmc/cpu/generator.h); the
                                                    registry (llmc/families.h) names one per family

In generate, the family's tokenizer file (-t, default its tokenizer_path; llmc/tokenizer.h) decodes the samples and,
for text prompts, gives the BPE ranks that encode them (llmc/bpe.h), split with the family's tokenizer_pattern. What
differs between the families follows from the file and that pattern:
  - a tokenizer file in Llama 3's layout (version 3, with a BOS: Llama 3's, Qwen3's) is required by the families whose
    pattern is Llama 3's or Qwen's; a text prompt starts with BOS when the file's BOS is not its end-of-text (Llama 3;
    Qwen3's tokenizer has no BOS), and text that looks like a special token stays text;
  - with GPT-2's pattern (nanochat) the file is GPT-2's format and text prompts need GPT-2's vocabulary (the ids below
    <|endoftext|> = 50256 are the BPE ranks; "<|endoftext|>" in a prompt is the token);
  - without the file, only --ids prompts run, and the tokens print as ids;
  - the file may have fewer tokens than the model's V (a padded vocabulary), never more;
  - no prompt is the file's start token (BOS, else end-of-text; id 0 without a file).
*/
#ifndef LLMC_DECODER_INFERENCE_H
#define LLMC_DECODER_INFERENCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../model_family.h"
#include "../model_file.h"
#include "../decoder.h"
#include "../tokenizer.h"
#include "../bpe.h"
#include "encoder_cpu.h"
#include "rmsnorm_cpu.h"
#include "qknorm_cpu.h"
#include "rope_cpu.h"
#include "swiglu_cpu.h"
#include "relu2_cpu.h"
#include "classifier_cpu.h"  // softcap_forward
#include "kv_cache.h"
#include "generator.h"

typedef struct {
    const ModelFamily* family;
    DecoderConfig config;
    DecoderLayout layout;  // where each tensor lies in memory
    float* memory;         // the parameters, the model file's order
    float* rope_cos;       // (maxT, HS/2)
    float* rope_sin;
} DecoderInference;

// config: the family's config struct (family->model_file->config_size bytes)
static void decoder_inference_init(DecoderInference* m, const ModelFamily* family, const void* config) {
    m->family = family;
    decoder_config(family, config, &m->config);
    decoder_layout(family, config, &m->layout);
    size_t n = tensor_table_sizes(family->tensor_dims, config, family->num_tensors, NULL);
    m->memory = (float*)callocCheck(n, sizeof(float));
    decoder_rope_tables(&m->config, &m->rope_cos, &m->rope_sin);
}

static void decoder_inference_load(DecoderInference* m, const ModelFamily* family, const char* path) {
    int version;
    void* config = mallocCheck(family->model_file->config_size);
    FILE* f = model_file_open(path, family->model_file, config, &version);
    decoder_inference_init(m, family, config);
    size_t n = tensor_table_sizes(family->tensor_dims, config, family->num_tensors, NULL);
    model_file_read_params(f, path, version, m->memory, n);
    fcloseCheck(f, path);
    free(config);
}

static void decoder_inference_cache(const DecoderInference* m, KVCache* kv) {
    const DecoderConfig* d = &m->config;
    kvcache_init_heads(kv, d->max_seq_len, d->channels, d->num_layers, d->num_heads, d->num_kv_heads, d->head_dim,
                       d->ffn_hidden, d->vocab_size);
}

static void decoder_inference_free(DecoderInference* m) {
    free(m->memory);
    free(m->rope_cos);
    free(m->rope_sin);
}

// feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1; kv->logits gets the last position's logits
static void decoder_forward_cached(const void* model, KVCache* kv, const int* tokens, int n) {
    const DecoderInference* m = (const DecoderInference*)model;
    const DecoderConfig* d = &m->config;
    int C = kv->C, NH = kv->NH, NKV = kv->NKV, HS = kv->HS, QKV = kv->QKV, FFN = kv->FFN, maxT = kv->maxT;
    int AW = NH * HS, KVC = NKV * HS, half = HS / 2;
    float eps = d->norm_eps;
    const float* cos_t = m->rope_cos + (size_t)kv->pos * half;  // the tables from the first new position on
    const float* sin_t = m->rope_sin + (size_t)kv->pos * half;
    kvcache_check_room(kv, n);
    DecoderWeights p = decoder_weights(m->memory, &m->layout, 0);
    size_t nC = (size_t)n * C;
    if (d->embed_norm) {  // the residual stream starts normalised
        encoder_forward(kv->ln, tokens, p.wte, NULL, 1, n, C);                 // (n, C)
        rmsnorm_forward(kv->x, NULL, kv->ln, NULL, eps, 1, n, C);
    } else {
        encoder_forward(kv->x, tokens, p.wte, NULL, 1, n, C);                  // (n, C)
    }
    for (int l = 0; l < kv->L; l++) {
        DecoderWeights w = decoder_weights(m->memory, &m->layout, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * KVC;
        float* l_vc = kv->value_cache + (size_t)l * maxT * KVC;
        // attention block: q and k rotated at their absolute positions (and normalised), k and v appended to the cache
        rmsnorm_forward(kv->ln, NULL, kv->x, w.ln1w, eps, 1, n, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, NULL, n, C, QKV);                                  // (n, QKV)
        if (d->qk_norm == DECODER_QKNORM_WEIGHTED) {  // before RoPE, a weight per head dimension
            qknorm_forward(kv->qkv, NULL, NULL, w.qnormw, n, QKV, NH, HS, eps);                   // q heads
            qknorm_forward(kv->qkv + AW, NULL, NULL, w.knormw, n, QKV, NKV, HS, eps);             // k heads
        }
        if (d->rope == DECODER_ROPE_REVERSE) { rope_reverse_forward(kv->qkv, cos_t, sin_t, 1, n, QKV, NH + NKV, HS); }
        else { rope_forward(kv->qkv, cos_t, sin_t, 1, n, QKV, NH + NKV, HS); }
        if (d->qk_norm == DECODER_QKNORM_PLAIN) { qknorm_forward(kv->qkv, NULL, NULL, NULL, n, QKV, NH + NKV, HS, eps); }
        kvcache_store(kv, l_kc, l_vc, n);
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, QKV, l_kc, l_vc, kv->pos, n, AW, NH, NKV, maxT); // (n, AW)
        linear_forward(kv->proj, kv->atty, w.attprojw, NULL, n, AW, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // MLP block
        rmsnorm_forward(kv->ln, NULL, kv->x, w.ln2w, eps, 1, n, C);
        linear_forward(kv->fch, kv->ln, w.fcw, NULL, n, C, FFN);                                   // (n, FFN)
        const float* hidden = kv->fch;
        if (d->mlp == DECODER_MLP_SWIGLU) {  // silu(gate) * up, in place of the gate
            linear_forward(kv->fch2, kv->ln, w.fcw2, NULL, n, C, FFN);
            swiglu_forward(kv->fch, kv->fch, kv->fch2, (size_t)n * FFN);
        } else {
            relu2_forward(kv->fch2, kv->fch, (size_t)n * FFN);
            hidden = kv->fch2;
        }
        linear_forward(kv->proj, hidden, w.fcprojw, NULL, n, FFN, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final RMSNorm, the lm_head (wte when tied) and the softcap, for the last position only
    rmsnorm_forward(kv->ln, NULL, kv->x + (size_t)(n - 1) * C, p.lnfw, eps, 1, 1, C);
    matvec_forward(kv->logits, kv->ln, p.lm_head, NULL, C, kv->V);
    if (d->softcap > 0.0f) { softcap_forward(kv->logits, d->softcap, (size_t)kv->V); }
    kv->pos += n;
}

// ----------------------------------------------------------------------------
// generate (llmc/cpu/generator.h): the family's model file and its tokenizer file, as the comment at the top says

typedef struct {
    DecoderInference model;
    GenerateTokenizer tokenizer;  // tok.init_ok = 0 when the file is missing (--ids prompts)
    int bos_prompt;               // a text prompt starts with BOS
} DecoderGenerator;

// a text prompt in ids (BOS first when the tokenizer has one of its own); dies when it leaves no room to generate
static int decoder_encode_prompt(const void* tokenizer, const char* text, int* seq, int maxT) {
    const DecoderGenerator* s = (const DecoderGenerator*)tokenizer;
    const GenerateTokenizer* t = &s->tokenizer;
    size_t len = strlen(text);
    int* ids = (int*)mallocCheck((len + 1) * sizeof(int));
    int allow_special = t->bpe.pattern == BPE_PATTERN_GPT2;  // GPT-2's "<|endoftext|>" text is its token
    size_t n = bpe_encode(&t->bpe, (const unsigned char*)text, len, allow_special, ids);
    size_t first = s->bos_prompt ? 1 : 0;
    if (s->bos_prompt && n + 1 >= (size_t)maxT) {
        llmc_die("-p: the prompt is %zu tokens with BOS, the model's context is %d (it must leave room to generate)", n + 1, maxT);
    }
    if (s->bos_prompt) { seq[0] = t->tok.bos_token; }
    memcpy(seq + first, ids, n * sizeof(int));
    free(ids);
    return (int)(n + first);
}

static void decoder_write_token(const void* tokenizer, int id) {
    generate_tokenizer_write_token(&((const DecoderGenerator*)tokenizer)->tokenizer, id);
}

static void decoder_generator_close(void* state) {
    DecoderGenerator* s = (DecoderGenerator*)state;
    generate_tokenizer_free(&s->tokenizer);
    decoder_inference_free(&s->model);
    free(s);
}

// the tokenizer file at path for a model of V tokens into s->tokenizer (none when it is missing and the prompt is
// --ids), and the BPE ranks of text prompts when text
static void decoder_generator_tokenizer(DecoderGenerator* s, const ModelFamily* family, const GenerateArgs* args,
                                        const char* path, int V, int text) {
    Tokenizer* tok = &s->tokenizer.tok;
    int pattern = family->tokenizer_pattern;
    if (!file_exists(path)) {
        if (args->ids != NULL) { return; }
        llmc_die("%s: no such %s tokenizer file (flag -t; python %s writes %s): without it, give the prompt as --ids",
                 path, family->name, family->reference, family->tokenizer_path);
    }
    tokenizer_init(tok, path);
    if (pattern != BPE_PATTERN_GPT2 && tok->bos_token < 0) {
        llmc_die("%s: a GPT-2 tokenizer file, not a %s one (version 3)", path, family->name);
    }
    if ((int)tok->vocab_size > V) { // the model's V may pad the tokenizer's vocabulary
        llmc_die("%s: %u tokens, more than the model %s has (V = %d)", path, tok->vocab_size, args->model_path, V);
    }
    s->bos_prompt = tok->bos_token >= 0 && tok->bos_token != tok->eot_token;
    if (!text) { return; }
    generate_tokenizer_encoder(&s->tokenizer, path, pattern, "give the prompt as --ids, or encode it with the "
                               "checkpoint's tokenizer.json: python dev/eval/generate_text.py --help");
}

static void decoder_generator_open(Generator* g, const GenerateArgs* args, int text) {
    const ModelFamily* family = g->family->family;
    DecoderGenerator* s = (DecoderGenerator*)callocCheck(1, sizeof(DecoderGenerator));
    decoder_inference_load(&s->model, family, args->model_path);
    int V = s->model.config.vocab_size;
    if (args->chat) {  // the chat tokenizer file, its chat tokens checked against V
        generate_tokenizer_open_chat(&s->tokenizer, family, generate_chat_tokenizer_path(family, args), args->model_path, V);
    } else {
        const char* tok_path = args->tokenizer_path != NULL ? args->tokenizer_path : family->tokenizer_path;
        decoder_generator_tokenizer(s, family, args, tok_path, V, text);
    }
    decoder_inference_cache(&s->model, &g->kv);
    const Tokenizer* tok = &s->tokenizer.tok;
    int start = tok->init_ok ? tokenizer_start_token(tok) : 0;
    generator_set(g, &s->model, V, start, tok->init_ok ? tok->eot_token : -1, s, s);
    if (args->chat) { g->chat = &s->tokenizer; }
}

// the GenerateFamily of the decoder family FAMILY (a ModelFamily)
#define DECODER_GENERATE(FAMILY) \
    {.family = &(FAMILY), .no_ids = NULL, .echo_prompt_tokens = 1, .open = decoder_generator_open, \
     .forward_cached = decoder_forward_cached, .encode = decoder_encode_prompt, .write_token = decoder_write_token, \
     .close = decoder_generator_close}

#endif // LLMC_DECODER_INFERENCE_H
