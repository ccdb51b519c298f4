/*
llmc/cpu/nanochat_inference.h: nanochat inference on the CPU, batch 1: the weights of a model file, the rotary
tables (shared with train_nanochat.c) and the forward pass with a key/value cache (llmc/cpu/kv_cache.h) holding the
NKV key/value heads (GQA), keys after RoPE and QK-norm. generate.c runs it; the math is train_nanochat.c's forward
pass, one position at a time.

    nanochat_rope_tables(cfg, cos, sin)            the rotary tables (maxT, HS/2) of a config (llmc/cpu/layers_llama_cpu.h)
    NanoChatInference                              the config, the named weights of one flat buffer (llmc/nanochat.h), the tables
    nanochat_inference_init(m, cfg)                the buffers for cfg (weights zeroed)
    nanochat_inference_load(m, path)               from a model file (llmc/nanochat.h's nanochat_model_open)
    nanochat_inference_cache(m, kv)                a cache of the model's shapes, its whole context
    nanochat_forward_cached(model, kv, tokens, n)  a KVForwardFn: tokens in at kv->pos, the last position's logits out
    nanochat_inference_free(m)
*/
#ifndef LLMC_NANOCHAT_INFERENCE_H
#define LLMC_NANOCHAT_INFERENCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../nanochat.h"
#include "layers_cpu.h"
#include "layers_llama_cpu.h"
#include "layers_nanochat_cpu.h"
#include "kv_cache.h"

// the rotary tables of cfg into *cos_table, *sin_table (each (maxT, HS/2), malloc'd): angle t * theta^(-2i/HS)
static void nanochat_rope_tables(const NanoChatConfig* cfg, float** cos_table, float** sin_table) {
    int HS = cfg->channels / cfg->num_heads;
    *cos_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    *sin_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    rope_init(*cos_table, *sin_table, cfg->max_seq_len, HS, cfg->rope_theta, 0.0f, 0.0f, 0.0f, 0.0f);
}

typedef struct {
    NanoChatConfig config;
    NanoChatParams params;   // named pointers into memory
    float* memory;           // nanochat_num_parameters(&config) floats, the model file's order
    float* rope_cos;         // (maxT, HS/2)
    float* rope_sin;
} NanoChatInference;

static void nanochat_inference_init(NanoChatInference* m, const NanoChatConfig* cfg) {
    m->config = *cfg;
    m->memory = (float*)callocCheck(nanochat_num_parameters(cfg), sizeof(float));
    nanochat_point_parameters(&m->params, m->memory, cfg);
    nanochat_rope_tables(cfg, &m->rope_cos, &m->rope_sin);
}

static void nanochat_inference_load(NanoChatInference* m, const char* path) {
    int version;
    NanoChatConfig cfg;
    FILE* f = nanochat_model_open(path, &cfg, &version);
    nanochat_inference_init(m, &cfg);
    model_file_read_params(f, path, version, m->memory, nanochat_num_parameters(&cfg));
    fcloseCheck(f, path);
}

static void nanochat_inference_cache(const NanoChatInference* m, KVCache* kv) {
    const NanoChatConfig* cfg = &m->config;
    kvcache_init(kv, cfg->max_seq_len, cfg->channels, cfg->num_layers, cfg->num_heads, cfg->num_kv_heads, cfg->ffn_hidden,
                 cfg->vocab_size);
}

static void nanochat_inference_free(NanoChatInference* m) {
    free(m->memory);
    free(m->rope_cos);
    free(m->rope_sin);
}

// feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1; kv->logits gets the last position's logits
static void nanochat_forward_cached(const void* model, KVCache* kv, const int* tokens, int n) {
    const NanoChatInference* m = (const NanoChatInference*)model;
    const NanoChatConfig* cfg = &m->config;
    int C = kv->C, NH = kv->NH, NKV = kv->NKV, HS = kv->HS, QKV = kv->QKV, FFN = kv->FFN, maxT = kv->maxT;
    int KVC = NKV * HS, half = HS / 2;
    float eps = cfg->norm_eps;
    kvcache_check_room(kv, n);
    NanoChatParams p = m->params;
    size_t nC = (size_t)n * C;
    embedding_forward(kv->ln, tokens, p.wte, 1, n, C);          // (n, C)
    rmsnorm_plain_forward(kv->x, NULL, kv->ln, eps, n, C, 1, C); // the residual stream starts normalised
    for (int l = 0; l < kv->L; l++) {
        NanoChatLayerParams w = nanochat_layer_params(&m->params, cfg, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * KVC;
        float* l_vc = kv->value_cache + (size_t)l * maxT * KVC;
        // attention block: q and k rotated at their absolute positions and normalised, k and v appended to the cache
        rmsnorm_plain_forward(kv->ln, NULL, kv->x, eps, n, C, 1, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, NULL, n, C, QKV);                                        // (n, QKV)
        nanochat_rope_forward(kv->qkv, m->rope_cos + (size_t)kv->pos * half, m->rope_sin + (size_t)kv->pos * half, 1, n,
                              QKV, NH + NKV, HS);
        qk_norm_forward(kv->qkv, NULL, eps, 1, n, NH, NKV, HS);
        kvcache_store(kv, l_kc, l_vc, n);
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, QKV, l_kc, l_vc, kv->pos, n, C, NH, NKV, maxT); // (n, C)
        linear_forward(kv->proj, kv->atty, w.attprojw, NULL, n, C, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // ReLU^2 MLP block
        rmsnorm_plain_forward(kv->ln, NULL, kv->x, eps, n, C, 1, C);
        linear_forward(kv->fch, kv->ln, w.fcw, NULL, n, C, FFN);                                         // (n, FFN)
        relu2_forward(kv->fch2, kv->fch, (size_t)n * FFN);
        linear_forward(kv->proj, kv->fch2, w.fcprojw, NULL, n, FFN, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final RMSNorm, the lm_head and the softcap, for the last position only
    rmsnorm_plain_forward(kv->ln, NULL, kv->x + (size_t)(n - 1) * C, eps, 1, C, 1, C);
    matvec_forward(kv->logits, kv->ln, p.lm_head, NULL, C, kv->V);
    if (cfg->softcap > 0.0f) { softcap_forward(kv->logits, cfg->softcap, (size_t)kv->V); }
    kv->pos += n;
}

#endif // LLMC_NANOCHAT_INFERENCE_H
