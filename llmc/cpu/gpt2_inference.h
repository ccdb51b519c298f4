/*
llmc/cpu/gpt2_inference.h: GPT-2 inference on the CPU, batch 1: the weights (from a model file, or -e dN from
scratch) and the forward pass with a key/value cache (llmc/cpu/kv_cache.h). generate.c runs it; the math is
train_gpt2.c's forward pass (tanh GELU, LayerNorm eps 1e-5, lm_head tied to wte), one position at a time.

    GPT2Inference                              the config and the named weights of one flat buffer (llmc/gpt2.h)
    gpt2_inference_load(m, path)               from a model file (llmc/gpt2.h's gpt2_model_open)
    gpt2_inference_from_scratch(m, cfg, seed)  what train_gpt2.py's init draws (llmc/gpt2.h)
    gpt2_inference_cache(m, kv)                a cache of the model's shapes, its whole context
    gpt2_forward_cached(model, kv, tokens, n)  a KVForwardFn: tokens in at kv->pos, the last position's logits out
    gpt2_inference_free(m)
    gpt2_generate                              generate's hooks (llmc/cpu/generator.h): the model, the BPE ranks file
*/
#ifndef LLMC_GPT2_INFERENCE_H
#define LLMC_GPT2_INFERENCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "../gpt2.h"
#include "encoder_cpu.h"
#include "kv_cache.h"
#include "generator.h"

typedef struct {
    GPT2Config config;
    GPT2Params params;   // named pointers into memory
    float* memory;       // gpt2_num_parameters(&config) floats, the model file's order
} GPT2Inference;

// the weights' buffer for m->config, the named pointers into it
static void gpt2_inference_allocate(GPT2Inference* m) {
    m->memory = (float*)callocCheck(gpt2_num_parameters(&m->config), sizeof(float));
    gpt2_point_parameters(&m->params, m->memory, &m->config);
}

static void gpt2_inference_load(GPT2Inference* m, const char* path) {
    int version;
    FILE* f = gpt2_model_open(path, &m->config, &version);
    gpt2_inference_allocate(m);
    model_file_read_params(f, path, version, m->memory, gpt2_num_parameters(&m->config));
    fcloseCheck(f, path);
}

static void gpt2_inference_from_scratch(GPT2Inference* m, const GPT2Config* cfg, unsigned int seed) {
    m->config = *cfg;
    gpt2_inference_allocate(m);
    gpt2_init_params_from_scratch(m->memory, cfg, seed);
}

static void gpt2_inference_cache(const GPT2Inference* m, KVCache* kv) {
    const GPT2Config* cfg = &m->config;
    kvcache_init(kv, cfg->max_seq_len, cfg->channels, cfg->num_layers, cfg->num_heads, cfg->num_heads, 4 * cfg->channels,
                 cfg->vocab_size);
}

static void gpt2_inference_free(GPT2Inference* m) { free(m->memory); }

// feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1; kv->logits gets the last position's logits
static void gpt2_forward_cached(const void* model, KVCache* kv, const int* tokens, int n) {
    const GPT2Inference* m = (const GPT2Inference*)model;
    int C = kv->C, NH = kv->NH, maxT = kv->maxT;
    kvcache_check_room(kv, n);
    GPT2Params p = m->params;
    size_t nC = (size_t)n * C;
    encoder_forward(kv->x, tokens, p.wte, p.wpe + (size_t)kv->pos * C, 1, n, C); // (n, C)
    for (int l = 0; l < kv->L; l++) {
        GPT2LayerParams w = gpt2_layer_params(&m->params, &m->config, l);
        float* l_kc = kv->key_cache + (size_t)l * maxT * C;
        float* l_vc = kv->value_cache + (size_t)l * maxT * C;
        // attention block
        layernorm_rows(kv, kv->ln, kv->x, w.ln1w, w.ln1b, n, C);
        linear_forward(kv->qkv, kv->ln, w.qkvw, w.qkvb, n, C, 3 * C);                                  // (n, 3C)
        kvcache_store(kv, l_kc, l_vc, n);
        attention_forward_cached(kv->atty, kv->scores, kv->qkv, 3 * C, l_kc, l_vc, kv->pos, n, C, NH, NH, maxT); // (n, C)
        linear_forward(kv->proj, kv->atty, w.attprojw, w.attprojb, n, C, C);
        residual_rows(kv->x, kv->proj, n, nC);
        // MLP block
        layernorm_rows(kv, kv->ln, kv->x, w.ln2w, w.ln2b, n, C);
        linear_forward(kv->fch, kv->ln, w.fcw, w.fcb, n, C, 4 * C);                                    // (n, 4C)
        gelu_rows(kv->fch2, kv->fch, n, nC * 4);
        linear_forward(kv->proj, kv->fch2, w.fcprojw, w.fcprojb, n, 4 * C, C);
        residual_rows(kv->x, kv->proj, n, nC);
    }
    // final layernorm and the tied lm_head, for the last position only
    layernorm_rows(kv, kv->ln, kv->x + (size_t)(n - 1) * C, p.lnfw, p.lnfb, 1, C);
    matvec_forward(kv->logits, kv->ln, p.wte, NULL, C, kv->V);
    kv->pos += n;
}

// ----------------------------------------------------------------------------
// generate (llmc/cpu/generator.h): a GPT-2 model file or a descriptor (dN, gpt2:dN, gpt3:cN) from scratch, the BPE
// ranks file (-b) that encodes and decodes; with --chat instead the chat tokenizer file (-t, default
// gpt2_chat_tokenizer.bin), whose ranks encode and whose pieces decode

typedef struct {
    GPT2Inference model;
    BPE bpe;                     // -b's; unread with --chat
    GenerateTokenizer chat;      // --chat's tokenizer file
} GPT2Generator;

static int gpt2_encode_prompt(const void* tokenizer, const char* text, int* seq, int maxT) {
    return (int)bpe_encode((const BPE*)tokenizer, (const unsigned char*)text, strlen(text), 1, seq);
}

static void gpt2_write_token(const void* tokenizer, int id) {
    size_t len;
    const unsigned char* bytes = bpe_token_bytes((const BPE*)tokenizer, id, &len);
    if (bytes != NULL) { fwriteCheck(bytes, 1, len, stdout, "stdout"); }
}

static void gpt2_generator_close(void* state) {
    GPT2Generator* s = (GPT2Generator*)state;
    bpe_free(&s->bpe);
    generate_tokenizer_free(&s->chat);
    gpt2_inference_free(&s->model);
    free(s);
}

static void gpt2_generator_open(Generator* g, const GenerateArgs* args, int text) {
    GPT2Generator* s = (GPT2Generator*)callocCheck(1, sizeof(GPT2Generator));
    GPT2Config cfg;
    const char* why;
    int desc = gpt2_config_from_descriptor(args->model_path, &cfg, &why);
    if (desc < 0) { llmc_die("-e %s: %s", args->model_path, why); }
    if (desc == 1) {
        gpt2_inference_from_scratch(&s->model, &cfg, 42);
        fprintf(stderr, "note: %s is initialised from scratch (seed 42): expect random text\n", args->model_path);
    } else {
        if (!file_exists(args->model_path)) {
            llmc_die("%s: checkpoint not found (`make model` writes gpt2_124M.bin; or pass -e dN for a random model)", args->model_path);
        }
        gpt2_inference_load(&s->model, args->model_path);
    }
    int V = s->model.config.vocab_size;
    if (args->chat) {
        generate_tokenizer_open_chat(&s->chat, &GPT2_FAMILY, generate_chat_tokenizer_path(&GPT2_FAMILY, args),
                                     args->model_path, V);
        gpt2_inference_cache(&s->model, &g->kv);
        generator_set(g, &s->model, V, s->chat.bpe.eot_token, s->chat.bpe.eot_token, &s->chat.bpe, s);
        g->chat = &s->chat;
        return;
    }
    bpe_init(&s->bpe, args->bpe_path);
    if (s->bpe.eot_token >= V) {
        llmc_die("%s: vocabulary of %d tokens does not fit the model's %d", args->bpe_path, s->bpe.eot_token + 1, V);
    }
    gpt2_inference_cache(&s->model, &g->kv);
    generator_set(g, &s->model, V, s->bpe.eot_token, s->bpe.eot_token, &s->bpe, s);
}

static const GenerateFamily gpt2_generate = {
    .family = &GPT2_FAMILY,
    .no_ids = "--ids: token-id prompts are for Llama 3 models; %s is GPT-2 (use -p \"text\")", .echo_prompt_tokens = 0,
    .open = gpt2_generator_open, .forward_cached = gpt2_forward_cached, .encode = gpt2_encode_prompt,
    .write_token = gpt2_write_token, .close = gpt2_generator_close,
};

#endif // LLMC_GPT2_INFERENCE_H
