/*
llmc/cpu/nanochat_inference.h: nanochat inference on the CPU, batch 1: the weights of a model file, the rotary
tables (shared with train_nanochat.c) and the forward pass with a key/value cache (llmc/cpu/kv_cache.h) holding the
NKV key/value heads (GQA), keys after RoPE and QK-norm. generate.c runs it; the math is train_nanochat.c's forward
pass, one position at a time.

    nanochat_rope_tables(cfg, cos, sin)            the rotary tables (maxT, HS/2) of a config (llmc/cpu/rope_cpu.h)
    NanoChatInference                              the config, the named weights of one flat buffer (llmc/nanochat.h), the tables
    nanochat_inference_init(m, cfg)                the buffers for cfg (weights zeroed)
    nanochat_inference_load(m, path)               from a model file (llmc/nanochat.h's nanochat_model_open)
    nanochat_inference_cache(m, kv)                a cache of the model's shapes, its whole context
    nanochat_forward_cached(model, kv, tokens, n)  a KVForwardFn: tokens in at kv->pos, the last position's logits out
    nanochat_inference_free(m)
    nanochat_generate                              generate's hooks (llmc/cpu/generator.h): the model, its tokenizer file
*/
#ifndef LLMC_NANOCHAT_INFERENCE_H
#define LLMC_NANOCHAT_INFERENCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../nanochat.h"
#include "encoder_cpu.h"
#include "rmsnorm_cpu.h"
#include "qknorm_cpu.h"
#include "rope_cpu.h"
#include "relu2_cpu.h"
#include "classifier_cpu.h"  // softcap_forward
#include "kv_cache.h"
#include "generator.h"

// the rotary tables of cfg into *cos_table, *sin_table (each (maxT, HS/2), malloc'd): angle t * theta^(-2i/HS)
static void nanochat_rope_tables(const NanoChatConfig* cfg, float** cos_table, float** sin_table) {
    int HS = cfg->channels / cfg->num_heads;
    *cos_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    *sin_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    rope_tables(*cos_table, *sin_table, cfg->max_seq_len, HS, cfg->rope_theta, 0.0f, 0.0f, 0.0f, 0.0f);
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
    encoder_forward(kv->ln, tokens, p.wte, NULL, 1, n, C);     // (n, C)
    rmsnorm_forward(kv->x, NULL, kv->ln, NULL, eps, 1, n, C);    // the residual stream starts normalised
    for (int l = 0; l < kv->L; l++) {
        NanoChatLayerParams w = nanochat_layer_params(&m->params, cfg, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * KVC;
        float* l_vc = kv->value_cache + (size_t)l * maxT * KVC;
        // attention block: q and k rotated at their absolute positions and normalised, k and v appended to the cache
        rmsnorm_forward(kv->ln, NULL, kv->x, NULL, eps, 1, n, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, NULL, n, C, QKV);                                        // (n, QKV)
        rope_reverse_forward(kv->qkv, m->rope_cos + (size_t)kv->pos * half, m->rope_sin + (size_t)kv->pos * half, 1, n,
                             QKV, NH + NKV, HS);
        qknorm_forward(kv->qkv, NULL, NULL, NULL, n, QKV, NH + NKV, HS, eps);
        kvcache_store(kv, l_kc, l_vc, n);
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, QKV, l_kc, l_vc, kv->pos, n, C, NH, NKV, maxT); // (n, C)
        linear_forward(kv->proj, kv->atty, w.attprojw, NULL, n, C, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // ReLU^2 MLP block
        rmsnorm_forward(kv->ln, NULL, kv->x, NULL, eps, 1, n, C);
        linear_forward(kv->fch, kv->ln, w.fcw, NULL, n, C, FFN);                                         // (n, FFN)
        relu2_forward(kv->fch2, kv->fch, (size_t)n * FFN);
        linear_forward(kv->proj, kv->fch2, w.fcprojw, NULL, n, FFN, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final RMSNorm, the lm_head and the softcap, for the last position only
    rmsnorm_forward(kv->ln, NULL, kv->x + (size_t)(n - 1) * C, NULL, eps, 1, 1, C);
    matvec_forward(kv->logits, kv->ln, p.lm_head, NULL, C, kv->V);
    if (cfg->softcap > 0.0f) { softcap_forward(kv->logits, cfg->softcap, (size_t)kv->V); }
    kv->pos += n;
}

// ----------------------------------------------------------------------------
// generate (llmc/cpu/generator.h): a nanochat model file; its tokenizer file (-t, default nanochat_tokenizer.bin, the
// GPT-2 file format) decodes and, for GPT-2's vocabulary (the ids below <|endoftext|> = 50256 are the BPE ranks),
// encodes text prompts with GPT-2's pre-tokenisation. Without the file, --ids prompts still run and the tokens are
// printed as ids.

typedef struct {
    NanoChatInference model;
    GenerateTokenizer tokenizer;  // tok.init_ok = 0 when the file is missing
} NanoChatGenerator;

static int nanochat_encode_prompt(const void* tokenizer, const char* text, int* seq, int maxT) {
    const GenerateTokenizer* t = (const GenerateTokenizer*)tokenizer;
    return (int)bpe_encode(&t->bpe, (const unsigned char*)text, strlen(text), 1, seq);
}

static void nanochat_generator_close(void* state) {
    NanoChatGenerator* s = (NanoChatGenerator*)state;
    generate_tokenizer_free(&s->tokenizer);
    nanochat_inference_free(&s->model);
    free(s);
}

static void nanochat_generator_open(Generator* g, const GenerateArgs* args, int text) {
    NanoChatGenerator* s = (NanoChatGenerator*)callocCheck(1, sizeof(NanoChatGenerator));
    nanochat_inference_load(&s->model, args->model_path);
    int V = s->model.config.vocab_size;
    const char* tok_path = args->tokenizer_path != NULL ? args->tokenizer_path : NANOCHAT_FAMILY.tokenizer_path;
    Tokenizer* tok = &s->tokenizer.tok;
    if (file_exists(tok_path)) {
        tokenizer_init(tok, tok_path);
        if ((int)tok->vocab_size > V) {
            llmc_die("%s: %u tokens, more than the model %s's V = %d", tok_path, tok->vocab_size, args->model_path, V);
        }
    } else if (args->ids == NULL) {
        llmc_die("%s: no such nanochat tokenizer file (flag -t; python train_nanochat.py writes nanochat_tokenizer.bin): "
                 "without it, give the prompt as --ids", tok_path);
    }
    if (text) {
        if (tok->eot_token != TOKENIZER_V1_EOT || tok->bos_token >= 0) {
            llmc_die("%s: text prompts need GPT-2's vocabulary (<|endoftext|> = 50256); give the prompt as --ids, or "
                     "encode it with the checkpoint's tokenizer.json: python dev/eval/generate_text.py --help", tok_path);
        }
        bpe_init_from_tokenizer(&s->tokenizer.bpe, tok, tok_path, tok->eot_token, BPE_PATTERN_GPT2);
        s->tokenizer.has_bpe = 1;
    }
    nanochat_inference_cache(&s->model, &g->kv);
    int start = tok->init_ok ? tokenizer_start_token(tok) : 0;
    generator_set(g, &s->model, V, start, tok->init_ok ? tok->eot_token : -1, &s->tokenizer, s);
}

static const GenerateFamily nanochat_generate = {
    .family = &NANOCHAT_FAMILY, .no_ids = NULL, .echo_prompt_tokens = 1,
    .open = nanochat_generator_open, .forward_cached = nanochat_forward_cached, .encode = nanochat_encode_prompt,
    .write_token = generate_tokenizer_write_token, .close = nanochat_generator_close,
};

#endif // LLMC_NANOCHAT_INFERENCE_H
