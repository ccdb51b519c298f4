/*
llmc/cpu/qwen3_inference.h: Qwen3 inference on the CPU, batch 1: the weights of a model file, the rotary tables
(shared with train_qwen3.c) and the forward pass with a key/value cache (llmc/cpu/kv_cache.h) of the NKV key/value
heads, head_dim wide (the attention width NH HS need not be C), keys after QK-norm and RoPE. generate.c runs it; the
math is train_qwen3.c's forward pass, one position at a time.

    qwen3_rope_tables(cfg, cos, sin)             the rotary tables (maxT, HS/2) of a config: plain RoPE at the
                                                 config's theta (llmc/cpu/rope_cpu.h's rope_tables)
    Qwen3Inference                               the config, the named weights of one flat buffer (llmc/qwen3.h), the tables
    qwen3_inference_load(m, path)                from a model file (llmc/qwen3.h's qwen3_model_open)
    qwen3_forward_cached(model, kv, tokens, n)   a KVForwardFn: tokens in at kv->pos, the last position's logits out
    qwen3_inference_free(m)
    qwen3_generate                               generate's hooks (llmc/cpu/generator.h): the model, its tokenizer file
                                                 (-t, default qwen3_tokenizer.bin) that decodes; prompts as token ids
*/
#ifndef LLMC_QWEN3_INFERENCE_H
#define LLMC_QWEN3_INFERENCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../qwen3.h"
#include "encoder_cpu.h"
#include "rmsnorm_cpu.h"
#include "qknorm_cpu.h"
#include "rope_cpu.h"
#include "swiglu_cpu.h"
#include "kv_cache.h"
#include "generator.h"

// the rotary tables of cfg into *cos_table, *sin_table (each (maxT, HS/2), malloc'd): theta^(-2i/HS), no scaling
static void qwen3_rope_tables(const Qwen3Config* cfg, float** cos_table, float** sin_table) {
    int HS = cfg->head_dim;
    *cos_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    *sin_table = (float*)mallocCheck((size_t)cfg->max_seq_len * (HS / 2) * sizeof(float));
    rope_tables(*cos_table, *sin_table, cfg->max_seq_len, HS, cfg->rope_theta, 0.0f, 0.0f, 0.0f, 0.0f);
}

typedef struct {
    Qwen3Config config;
    Qwen3Params params;    // named pointers into memory
    float* memory;         // qwen3_num_parameters(&config) floats, the model file's order
    float* rope_cos;       // (maxT, HS/2)
    float* rope_sin;
} Qwen3Inference;

static void qwen3_inference_load(Qwen3Inference* m, const char* path) {
    int version;
    Qwen3Config cfg;
    FILE* f = qwen3_model_open(path, &cfg, &version);
    m->config = cfg;
    m->memory = (float*)mallocCheck(qwen3_num_parameters(&cfg) * sizeof(float));
    qwen3_point_parameters(&m->params, m->memory, &cfg);
    qwen3_rope_tables(&cfg, &m->rope_cos, &m->rope_sin);
    model_file_read_params(f, path, version, m->memory, qwen3_num_parameters(&cfg));
    fcloseCheck(f, path);
}

static void qwen3_inference_free(Qwen3Inference* m) {
    free(m->memory);
    free(m->rope_cos);
    free(m->rope_sin);
}

// feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1; kv->logits gets the last position's logits
static void qwen3_forward_cached(const void* model, KVCache* kv, const int* tokens, int n) {
    const Qwen3Inference* m = (const Qwen3Inference*)model;
    const Qwen3Config* cfg = &m->config;
    int C = kv->C, NH = kv->NH, NKV = kv->NKV, HS = kv->HS, QKV = kv->QKV, FFN = kv->FFN, maxT = kv->maxT;
    int AW = NH * HS, KVC = NKV * HS, half = HS / 2;
    float eps = cfg->norm_eps;
    kvcache_check_room(kv, n);
    Qwen3Params p = m->params;
    size_t nC = (size_t)n * C;
    encoder_forward(kv->x, tokens, p.wte, NULL, 1, n, C); // (n, C)
    for (int l = 0; l < kv->L; l++) {
        Qwen3LayerParams w = qwen3_layer_params(&m->params, cfg, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * KVC;
        float* l_vc = kv->value_cache + (size_t)l * maxT * KVC;
        // attention block: q and k normalised (QK-norm) and rotated at their absolute positions, k and v cached
        rmsnorm_forward(kv->ln, kv->rstd, kv->x, w.ln1w, eps, 1, n, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, NULL, n, C, QKV);                                        // (n, QKV)
        qknorm_forward(kv->qkv, NULL, NULL, w.qnormw, n, QKV, NH, HS, eps);              // q heads
        qknorm_forward(kv->qkv + AW, NULL, NULL, w.knormw, n, QKV, NKV, HS, eps);        // k heads
        rope_forward(kv->qkv, m->rope_cos + (size_t)kv->pos * half, m->rope_sin + (size_t)kv->pos * half, 1, n, QKV,
                     NH + NKV, HS);
        kvcache_store(kv, l_kc, l_vc, n);
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, QKV, l_kc, l_vc, kv->pos, n, AW, NH, NKV, maxT); // (n, AW)
        linear_forward(kv->proj, kv->atty, w.attprojw, NULL, n, AW, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // SwiGLU MLP block
        rmsnorm_forward(kv->ln, kv->rstd, kv->x, w.ln2w, eps, 1, n, C);
        linear_forward(kv->fch, kv->ln, w.fcw, NULL, n, C, FFN);                                         // (n, FFN)
        linear_forward(kv->fch2, kv->ln, w.fcw2, NULL, n, C, FFN);
        swiglu_forward(kv->fch, kv->fch, kv->fch2, (size_t)n * FFN);
        linear_forward(kv->proj, kv->fch, w.fcprojw, NULL, n, FFN, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final RMSNorm and the lm_head (or wte when tied), for the last position only
    rmsnorm_forward(kv->ln, kv->rstd, kv->x + (size_t)(n - 1) * C, p.lnfw, eps, 1, 1, C);
    matvec_forward(kv->logits, kv->ln, qwen3_lm_head(&p, cfg), NULL, C, kv->V);
    kv->pos += n;
}

// ----------------------------------------------------------------------------
// generate (llmc/cpu/generator.h): a Qwen3 model file and its tokenizer file (-t), which decodes; samples start from
// the tokenizer's start token (<|endoftext|> for Qwen3's, which has no BOS). Text prompts are refused: Qwen3's
// pre-tokenizer splits digits one by one, where llmc/bpe.h's Llama 3 encoder takes up to three.

typedef struct {
    Qwen3Inference model;
    GenerateTokenizer tokenizer;
} Qwen3Generator;

static int qwen3_encode_prompt(const void* tokenizer, const char* text, int* seq, int maxT) {
    (void)tokenizer; (void)text; (void)seq; (void)maxT;
    llmc_die("-p: text prompts are not supported for Qwen3 models (its pre-tokenizer is not llmc/bpe.h's); give the "
             "prompt as token ids (--ids)");
    return 0;
}

static void qwen3_generator_close(void* state) {
    Qwen3Generator* s = (Qwen3Generator*)state;
    tokenizer_free(&s->tokenizer.tok);
    qwen3_inference_free(&s->model);
    free(s);
}

static void qwen3_generator_open(Generator* g, const GenerateArgs* args, int text) {
    if (text) { qwen3_encode_prompt(NULL, NULL, NULL, 0); } // before the model is read: one line, at once
    Qwen3Generator* s = (Qwen3Generator*)callocCheck(1, sizeof(Qwen3Generator));
    qwen3_inference_load(&s->model, args->model_path);
    const Qwen3Config* cfg = &s->model.config;
    int V = cfg->vocab_size;
    const char* tok_path = args->tokenizer_path != NULL ? args->tokenizer_path : QWEN3_FAMILY.tokenizer_path;
    if (!file_exists(tok_path)) {
        llmc_die("%s: no such Qwen3 tokenizer file (flag -t; python train_qwen3.py writes qwen3_tokenizer.bin)", tok_path);
    }
    Tokenizer* tok = &s->tokenizer.tok;
    tokenizer_init(tok, tok_path);
    if (tok->bos_token < 0) { llmc_die("%s: a GPT-2 tokenizer file, not a Qwen3 one (version 3)", tok_path); }
    if ((int)tok->vocab_size > V) { // the model's V may pad the tokenizer's vocabulary (the hub's 151,936 > 151,669)
        llmc_die("%s: %u tokens, more than the model %s has (V = %d)", tok_path, tok->vocab_size, args->model_path, V);
    }
    s->tokenizer.has_bpe = 0;
    kvcache_init_heads(&g->kv, cfg->max_seq_len, cfg->channels, cfg->num_layers, cfg->num_heads, cfg->num_kv_heads,
                       cfg->head_dim, cfg->ffn_hidden, V);
    generator_set(g, &s->model, V, tokenizer_start_token(tok), tok->eot_token, &s->tokenizer, s);
}

static const GenerateFamily qwen3_generate = {
    .family = &QWEN3_FAMILY, .no_ids = NULL, .echo_prompt_tokens = 1,
    .open = qwen3_generator_open, .forward_cached = qwen3_forward_cached, .encode = qwen3_encode_prompt,
    .write_token = generate_tokenizer_write_token, .close = qwen3_generator_close,
};

#endif // LLMC_QWEN3_INFERENCE_H
