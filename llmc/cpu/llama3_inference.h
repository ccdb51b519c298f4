/*
llmc/cpu/llama3_inference.h: Llama 3 inference on the CPU, batch 1: the weights of a model file, the rotary tables
(shared with train_llama3.c) and the forward pass with a key/value cache (llmc/cpu/kv_cache.h) that holds the NKV
key/value heads only (GQA: NH/NKV query heads read each cached head), keys after RoPE. generate.c runs it; the math
is train_llama3.c's forward pass, one position at a time.

    llama3_rope_tables(cfg, cos, sin)             the rotary tables (maxT, HS/2) of a config (llmc/cpu/rope_cpu.h)
    Llama3Inference                               the config, the named weights of one flat buffer (llmc/llama3.h), the tables
    llama3_inference_init(m, cfg)                 the buffers for cfg (weights zeroed)
    llama3_inference_load(m, path)                from a model file (llmc/llama3.h's llama3_model_open)
    llama3_inference_cache(m, kv)                 a cache of the model's shapes, its whole context
    llama3_forward_cached(model, kv, tokens, n)   a KVForwardFn: tokens in at kv->pos, the last position's logits out
    llama3_inference_free(m)
    llama3_generate                               generate's hooks (llmc/cpu/generator.h): the model, its tokenizer file
*/
#ifndef LLMC_LLAMA3_INFERENCE_H
#define LLMC_LLAMA3_INFERENCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../llama3.h"
#include "encoder_cpu.h"
#include "rmsnorm_cpu.h"
#include "rope_cpu.h"
#include "swiglu_cpu.h"
#include "kv_cache.h"
#include "generator.h"

// the rotary tables of cfg into *cos_table, *sin_table (each (maxT, HS/2), malloc'd), Llama 3.1's scaling when the
// model file asks for it
static void llama3_rope_tables(const Llama3Config* cfg, float** cos_table, float** sin_table) {
    int HS = cfg->channels / cfg->num_heads;
    *cos_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    *sin_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    float factor = cfg->use_scaled_rope ? cfg->rope_factor : 0.0f;
    rope_tables(*cos_table, *sin_table, cfg->max_seq_len, HS, cfg->rope_theta, factor, cfg->rope_low_freq_factor,
              cfg->rope_high_freq_factor, cfg->rope_original_max_pos);
}

typedef struct {
    Llama3Config config;
    Llama3Params params;   // named pointers into memory
    float* memory;         // llama3_num_parameters(&config) floats, the model file's order
    float* rope_cos;       // (maxT, HS/2)
    float* rope_sin;
} Llama3Inference;

static void llama3_inference_init(Llama3Inference* m, const Llama3Config* cfg) {
    m->config = *cfg;
    m->memory = (float*)callocCheck(llama3_num_parameters(cfg), sizeof(float));
    llama3_point_parameters(&m->params, m->memory, cfg);
    llama3_rope_tables(cfg, &m->rope_cos, &m->rope_sin);
}

static void llama3_inference_load(Llama3Inference* m, const char* path) {
    int version;
    Llama3Config cfg;
    FILE* f = llama3_model_open(path, &cfg, &version);
    llama3_inference_init(m, &cfg);
    model_file_read_params(f, path, version, m->memory, llama3_num_parameters(&cfg));
    fcloseCheck(f, path);
}

static void llama3_inference_cache(const Llama3Inference* m, KVCache* kv) {
    const Llama3Config* cfg = &m->config;
    kvcache_init(kv, cfg->max_seq_len, cfg->channels, cfg->num_layers, cfg->num_heads, cfg->num_kv_heads, cfg->ffn_hidden,
                 cfg->vocab_size);
}

static void llama3_inference_free(Llama3Inference* m) {
    free(m->memory);
    free(m->rope_cos);
    free(m->rope_sin);
}

// feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1; kv->logits gets the last position's logits
static void llama3_forward_cached(const void* model, KVCache* kv, const int* tokens, int n) {
    const Llama3Inference* m = (const Llama3Inference*)model;
    const Llama3Config* cfg = &m->config;
    int C = kv->C, NH = kv->NH, NKV = kv->NKV, HS = kv->HS, QKV = kv->QKV, FFN = kv->FFN, maxT = kv->maxT;
    int KVC = NKV * HS, half = HS / 2;
    kvcache_check_room(kv, n);
    Llama3Params p = m->params;
    size_t nC = (size_t)n * C;
    encoder_forward(kv->x, tokens, p.wte, NULL, 1, n, C); // (n, C)
    for (int l = 0; l < kv->L; l++) {
        Llama3LayerParams w = llama3_layer_params(&m->params, cfg, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * KVC;
        float* l_vc = kv->value_cache + (size_t)l * maxT * KVC;
        // attention block: q and k rotated at their absolute positions, k and v appended to the cache
        rmsnorm_forward(kv->ln, kv->rstd, kv->x, w.ln1w, cfg->norm_eps, 1, n, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, NULL, n, C, QKV);                                        // (n, QKV)
        rope_forward(kv->qkv, m->rope_cos + (size_t)kv->pos * half, m->rope_sin + (size_t)kv->pos * half, 1, n, QKV,
                     NH + NKV, HS);
        kvcache_store(kv, l_kc, l_vc, n);
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, QKV, l_kc, l_vc, kv->pos, n, C, NH, NKV, maxT); // (n, C)
        linear_forward(kv->proj, kv->atty, w.attprojw, NULL, n, C, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // SwiGLU MLP block
        rmsnorm_forward(kv->ln, kv->rstd, kv->x, w.ln2w, cfg->norm_eps, 1, n, C);
        linear_forward(kv->fch, kv->ln, w.fcw, NULL, n, C, FFN);                                         // (n, FFN)
        linear_forward(kv->fch2, kv->ln, w.fcw2, NULL, n, C, FFN);
        swiglu_forward(kv->fch, kv->fch, kv->fch2, (size_t)n * FFN);
        linear_forward(kv->proj, kv->fch, w.fcprojw, NULL, n, FFN, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final RMSNorm and the lm_head (or wte when tied), for the last position only
    rmsnorm_forward(kv->ln, kv->rstd, kv->x + (size_t)(n - 1) * C, p.lnfw, cfg->norm_eps, 1, 1, C);
    matvec_forward(kv->logits, kv->ln, llama3_lm_head(&p, cfg), NULL, C, kv->V);
    kv->pos += n;
}

// ----------------------------------------------------------------------------
// generate (llmc/cpu/generator.h): a Llama 3 model file, the Llama 3 tokenizer file (-t) that decodes and, for text
// prompts, encodes

typedef struct {
    Llama3Inference model;
    GenerateTokenizer tokenizer;
} Llama3Generator;

// a text prompt in ids: BOS, then the text encoded with Llama 3's BPE (special-token text stays text);
// dies when it leaves no room to generate in the context maxT
static int llama3_encode_prompt(const void* tokenizer, const char* text, int* seq, int maxT) {
    const GenerateTokenizer* t = (const GenerateTokenizer*)tokenizer;
    size_t len = strlen(text);
    int* ids = (int*)mallocCheck((len + 1) * sizeof(int));
    size_t n = bpe_encode(&t->bpe, (const unsigned char*)text, len, 0, ids);
    if (n + 1 >= (size_t)maxT) {
        llmc_die("-p: the prompt is %zu tokens with BOS, the model's context is %d (it must leave room to generate)", n + 1, maxT);
    }
    seq[0] = t->tok.bos_token;
    memcpy(seq + 1, ids, n * sizeof(int));
    free(ids);
    return (int)n + 1;
}

static void llama3_generator_close(void* state) {
    Llama3Generator* s = (Llama3Generator*)state;
    generate_tokenizer_free(&s->tokenizer);
    llama3_inference_free(&s->model);
    free(s);
}

static void llama3_generator_open(Generator* g, const GenerateArgs* args, int text) {
    Llama3Generator* s = (Llama3Generator*)callocCheck(1, sizeof(Llama3Generator));
    llama3_inference_load(&s->model, args->model_path);
    int V = s->model.config.vocab_size;
    const char* tok_path = args->tokenizer_path != NULL ? args->tokenizer_path : LLAMA3_FAMILY.tokenizer_path;
    if (!file_exists(tok_path)) {
        llmc_die("%s: no such Llama 3 tokenizer file (flag -t; python train_llama3.py writes llama3_tokenizer.bin)", tok_path);
    }
    Tokenizer* tok = &s->tokenizer.tok;
    tokenizer_init(tok, tok_path);
    if (tok->bos_token < 0) { llmc_die("%s: a GPT-2 tokenizer file, not a Llama 3 one (version 3)", tok_path); }
    if ((int)tok->vocab_size != V) {
        llmc_die("%s: %u tokens, but the model %s has V = %d", tok_path, tok->vocab_size, args->model_path, V);
    }
    s->tokenizer.has_bpe = text;
    if (text) { bpe_init_llama3(&s->tokenizer.bpe, tok, tok_path); }
    llama3_inference_cache(&s->model, &g->kv);
    generator_set(g, &s->model, V, tok->bos_token, tok->eot_token, &s->tokenizer, s);
}

static const GenerateFamily llama3_generate = {
    .family = &LLAMA3_FAMILY, .no_ids = NULL, .echo_prompt_tokens = 1,
    .open = llama3_generator_open, .forward_cached = llama3_forward_cached, .encode = llama3_encode_prompt,
    .write_token = generate_tokenizer_write_token, .close = llama3_generator_close,
};

#endif // LLMC_LLAMA3_INFERENCE_H
