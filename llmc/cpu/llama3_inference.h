/*
llmc/cpu/llama3_inference.h: Llama 3 inference on the CPU, batch 1: the weights of a model file, the rotary tables
(shared with train_llama3.c) and the forward pass with a key/value cache (llmc/cpu/kv_cache.h) that holds the NKV
key/value heads only (GQA: NH/NKV query heads read each cached head), keys after RoPE. generate.c runs it; the math
is train_llama3.c's forward pass, one position at a time.

    llama3_rope_tables(cfg, cos, sin)             the rotary tables (maxT, HS/2) of a config (llmc/cpu/layers_llama_cpu.h)
    Llama3Inference                               the config, the named weights of one flat buffer (llmc/llama3.h), the tables
    llama3_inference_init(m, cfg)                 the buffers for cfg (weights zeroed)
    llama3_inference_load(m, path)                from a model file (llmc/llama3.h's llama3_model_open)
    llama3_inference_cache(m, kv)                 a cache of the model's shapes, its whole context
    llama3_forward_cached(model, kv, tokens, n)   a KVForwardFn: tokens in at kv->pos, the last position's logits out
    llama3_inference_free(m)
*/
#ifndef LLMC_LLAMA3_INFERENCE_H
#define LLMC_LLAMA3_INFERENCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../llama3.h"
#include "layers_cpu.h"
#include "layers_llama_cpu.h"
#include "kv_cache.h"

// the rotary tables of cfg into *cos_table, *sin_table (each (maxT, HS/2), malloc'd), Llama 3.1's scaling when the
// model file asks for it
static void llama3_rope_tables(const Llama3Config* cfg, float** cos_table, float** sin_table) {
    int HS = cfg->channels / cfg->num_heads;
    *cos_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    *sin_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    float factor = cfg->use_scaled_rope ? cfg->rope_factor : 0.0f;
    rope_init(*cos_table, *sin_table, cfg->max_seq_len, HS, cfg->rope_theta, factor, cfg->rope_low_freq_factor,
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
    embedding_forward(kv->x, tokens, p.wte, 1, n, C); // (n, C)
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

#endif // LLMC_LLAMA3_INFERENCE_H
