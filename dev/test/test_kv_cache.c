/*
dev/test/test_kv_cache.c: unit tests of llmc/cpu/kv_cache.h and the cached forward passes (llmc/cpu/gpt2_inference.h,
and llmc/cpu/decoder_inference.h's of every pre-norm decoder family) on tiny random models:
  - the cache fed one token at a time, or in chunks of several, gives the logits of a fresh cache fed the whole
    sequence at once (kv_check_step, the check of generate --check-kv, passes at every step)
  - the check fails, with generate's one error line, when the cache is corrupted (a changed value, a NaN key)
  - a cached forward past the context is refused in one line
GPT-2 runs with C = 40 (not a multiple of matvec_forward's 16 lanes), Llama 3 with GQA (NH = 4, NKV = 2), RoPE
scaling, and tied and untied lm_heads, nanochat with MQA (NH = 4, NKV = 1), QK-norm and the logit softcap, Qwen3
with a head_dim that is not C / NH (an attention width of 48 over C = 32), QK-norm with weights, tied.
*/
#include "llmc/cpu/gpt2_inference.h"
#include "llmc/cpu/decoder_inference.h"
#include "llmc/llama3.h"
#include "llmc/nanochat.h"
#include "llmc/qwen3.h"
#include "dev/test/test_common.h"

#define SEQ 14   // tokens fed: a 3-token prompt, then one at a time
#define MAXT 16

// a model of either family as the tests see it: its weights, its cached forward, its cache
typedef struct {
    const void* model;
    KVForwardFn forward;
    KVCache kv;
    KVCache full;
    int seq[SEQ];
} Case;

// n floats of random_array(n, seed) into memory (weights in [-0.5, 0.5): logits far from flat)
static void fill_random(float* memory, size_t n, unsigned seed) {
    float* w = random_array(n, seed);
    memcpy(memory, w, n * sizeof(float));
    free(w);
}

static void gpt2_tiny(GPT2Inference* m) {
    GPT2Config cfg = {MAXT, 50, 64, 2, 2, 40};  // maxT, V, Vp, L, NH, C
    m->config = cfg;
    gpt2_inference_allocate(m);
    fill_random(m->memory, gpt2_num_parameters(&cfg), 1);
}

// a decoder model of family with config cfg, its weights random (seed)
static void decoder_tiny(DecoderInference* m, const ModelFamily* family, const void* cfg, unsigned seed) {
    decoder_inference_init(m, family, cfg);
    fill_random(m->memory, tensor_table_sizes(family->tensor_dims, cfg, family->num_tensors, NULL), seed);
}

static void llama3_tiny(DecoderInference* m, int tied) {
    // GQA, Llama 3.1's rope scaling with a short original context (so its interpolated band is used)
    Llama3Config cfg = {.max_seq_len = MAXT, .vocab_size = 50, .num_layers = 2, .num_heads = 4, .num_kv_heads = 2,
                        .channels = 32, .multiple_of = 16, .ffn_hidden = llama3_ffn_hidden(32, 0.0f, 16),
                        .use_scaled_rope = 1, .tied_embeddings = tied, .norm_eps = 1e-5f, .rope_theta = 10000.0f,
                        .rope_factor = 8.0f, .rope_low_freq_factor = 1.0f, .rope_high_freq_factor = 4.0f,
                        .rope_original_max_pos = 8.0f};
    decoder_tiny(m, &LLAMA3_FAMILY, &cfg, 2 + tied);
}

static void nanochat_tiny(DecoderInference* m) {
    // MQA, a head size of 6 (RoPE's halves of 3), a softcap low enough to bend the logits
    NanoChatConfig cfg = {.max_seq_len = MAXT, .vocab_size = 50, .num_layers = 2, .num_heads = 4, .num_kv_heads = 1,
                          .channels = 24, .ffn_hidden = 40, .norm_eps = 1e-6f, .rope_theta = 100.0f, .softcap = 2.0f};
    decoder_tiny(m, &NANOCHAT_FAMILY, &cfg, 4);
}

static void qwen3_tiny(DecoderInference* m) {
    // GQA with heads of 12 (NH HS = 48, not C = 32), tied
    Qwen3Config cfg = {.max_seq_len = MAXT, .vocab_size = 50, .num_layers = 2, .num_heads = 4, .num_kv_heads = 2,
                       .channels = 32, .head_dim = 12, .ffn_hidden = 40, .tied_embeddings = 1, .norm_eps = 1e-6f,
                       .rope_theta = 1000.0f};
    decoder_tiny(m, &QWEN3_FAMILY, &cfg, 5);
}

static void case_init(Case* c, const void* model, KVForwardFn forward, const KVCache* kv) {
    c->model = model;
    c->forward = forward;
    c->kv = *kv;
    kvcache_init_like(&c->full, kv);
    for (int i = 0; i < SEQ; i++) { c->seq[i] = (7 * i + 3) % kv->V; }
}

static void case_free(Case* c) {
    kvcache_free(&c->kv);
    kvcache_free(&c->full);
}

// feeds c->seq[0..SEQ) in chunks of `chunk` after a 3-token prompt, checking every step; returns the checks' result
static KVCheck feed_and_check(Case* c, int chunk) {
    KVCheck chk = {0.0, 0};
    c->kv.pos = 0;
    c->forward(c->model, &c->kv, c->seq, 3);
    kv_check_step(&chk, &c->full, c->forward, c->model, &c->kv, c->seq, 3);
    for (int t = 3; t < SEQ; t += chunk) {
        int n = t + chunk <= SEQ ? chunk : SEQ - t;
        c->forward(c->model, &c->kv, c->seq + t, n);
        kv_check_step(&chk, &c->full, c->forward, c->model, &c->kv, c->seq, t + n);
    }
    return chk;
}

// The death tests run in forked children (expect_die) before the parent starts any OpenMP thread: a child forked
// from a process with a thread pool would hang in its first parallel region, or leave LeakSanitizer a thread it
// cannot stop. Each child feeds the cache itself.

// the cache fed seq[0..SEQ-1) one token at a time, then layer 1's cached value of position 2 changed, one more token
// and the check (dies)
static void corrupted_value(void* arg) {
    Case* c = (Case*)arg;
    feed_and_check(c, 1);
    c->kv.pos = SEQ - 1;
    c->kv.value_cache[((size_t)1 * MAXT + 2) * c->kv.NKV * c->kv.HS] += 1.0f;
    KVCheck chk = {0.0, 0};
    c->forward(c->model, &c->kv, c->seq + SEQ - 1, 1);
    kv_check_step(&chk, &c->full, c->forward, c->model, &c->kv, c->seq, SEQ);
}

// the same with a NaN key of layer 0 at position 1: a NaN difference must fail, not pass as "not above the limit"
static void nan_key(void* arg) {
    Case* c = (Case*)arg;
    feed_and_check(c, 1);
    c->kv.pos = SEQ - 1;
    c->kv.key_cache[(size_t)1 * c->kv.NKV * c->kv.HS] = NAN;
    KVCheck chk = {0.0, 0};
    c->forward(c->model, &c->kv, c->seq + SEQ - 1, 1);
    kv_check_step(&chk, &c->full, c->forward, c->model, &c->kv, c->seq, SEQ);
}

static void past_the_context(void* arg) {
    Case* c = (Case*)arg;
    c->kv.pos = MAXT - 1;
    c->forward(c->model, &c->kv, c->seq, 2);
}

static void test_check_fails(const char* name, Case* c) {
    expect_die(name, corrupted_value, c, "--check-kv: cached logits differ from a full recompute by", "at position 13 (limit 1e-4)");
    expect_die(name, nan_key, c, "--check-kv: cached logits differ from a full recompute by nan", NULL);
    expect_die(name, past_the_context, c, "cached forward of 2 tokens at position 15 exceeds the context 16", NULL);
}

// fed one token at a time, two or three, the cache gives the full recompute's logits at every step
static void test_cached_equals_full(const char* name, Case* c) {
    for (int chunk = 1; chunk <= 3; chunk++) {
        KVCheck chk = feed_and_check(c, chunk);
        int steps = 1 + (SEQ - 3 + chunk - 1) / chunk;
        CHECK(chk.checks == steps && chk.max_diff < 1e-5, "%s, chunks of %d: %d checks (want %d), max difference %g",
              name, chunk, chk.checks, steps, chk.max_diff);
    }
}

int main(void) {
    GPT2Inference gpt2;
    gpt2_tiny(&gpt2);
    DecoderInference decoders[4];   // Llama 3 untied, tied, nanochat, Qwen3
    llama3_tiny(&decoders[0], 0);
    llama3_tiny(&decoders[1], 1);
    nanochat_tiny(&decoders[2]);
    qwen3_tiny(&decoders[3]);
    const char* names[5] = {"gpt2", "llama3", "llama3 tied", "nanochat", "qwen3"};
    const int want_nkv[4] = {2, 2, 1, 2}, want_qkv[4] = {(4 + 2 * 2) * 8, (4 + 2 * 2) * 8, (4 + 2 * 1) * 6, (4 + 2 * 2) * 12};
    Case cases[5];
    KVCache kv;
    gpt2_inference_cache(&gpt2, &kv);
    case_init(&cases[0], &gpt2, gpt2_forward_cached, &kv);
    for (int k = 0; k < 4; k++) {
        decoder_inference_cache(&decoders[k], &kv);
        CHECK(kv.NKV == want_nkv[k] && kv.QKV == want_qkv[k], "%s cache: NKV %d, QKV %d", names[1 + k], kv.NKV, kv.QKV);
        case_init(&cases[1 + k], &decoders[k], decoder_forward_cached, &kv);
    }
    for (int k = 0; k < 5; k++) { test_check_fails(names[k], &cases[k]); }  // first: no OpenMP thread started yet
    for (int k = 0; k < 5; k++) {
        test_cached_equals_full(names[k], &cases[k]);
        case_free(&cases[k]);
    }
    gpt2_inference_free(&gpt2);
    for (int k = 0; k < 4; k++) { decoder_inference_free(&decoders[k]); }
    return test_summary();
}
