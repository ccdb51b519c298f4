/*
llmc/cpu/kv_cache.h: the key/value cache of batch-1 inference on the CPU, and what every family's cached forward
pass is made of (llmc/cpu/gpt2_inference.h, llmc/cpu/decoder_inference.h; generate.c runs them). The cache holds
every layer's keys and values of the positions seen so far: a prompt goes through the model once (n positions at a
time, llmc/cpu/matmul.h's GEMMs), then each new token costs the forward pass of ONE position (a
matrix-vector product per weight matrix and attention over the cached positions), not a recompute of the whole
sequence.

    KVCache, kvcache_init(_like), kvcache_free   the cache (NKV key/value heads per layer) and the work buffers of up to maxT positions
                                            (kvcache_init_heads: a head size HS of the model's own, not C / NH)
    KVForwardFn                             a family's cached forward: tokens in at kv->pos, the last position's logits out
    matvec_forward                          one position's linear layer, in a fixed summation order
    linear_forward, layernorm_rows, gelu_rows, residual_rows   n positions: the layers' functions, or a plain loop for one
    kvcache_store                           appends the n new positions' keys and values of one layer
    attention_forward_cached                causal attention of the new positions over the cache (GQA: NH / NKV query heads a head)
    KVCheck, kv_check_step                  --check-kv: the cached logits against a fresh cache fed the whole sequence at once

Shapes: C channels, L layers, NH query heads, NKV key/value heads (GPT-2: NKV = NH), HS the head size (C / NH, or
the model's own: Qwen3's), AW = NH HS the attention width (C unless HS is the model's own), QKV = (NH + 2 NKV) HS the
qkv projection's output (q heads, then k heads, then v heads), FFN the MLP's hidden size.
*/
#ifndef LLMC_KV_CACHE_H
#define LLMC_KV_CACHE_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "../layer_math.h"
#include "matmul.h"
#include "layernorm_cpu.h"
#include "gelu_cpu.h"
#include "residual_cpu.h"

typedef struct {
    int maxT, C, L, NH, NKV, HS, QKV, FFN, V;
    int pos;               // positions already in the cache
    float* key_cache;      // (L, maxT, NKV*HS), Llama 3's after RoPE
    float* value_cache;    // (L, maxT, NKV*HS)
    float* x;              // (maxT, C) the residual stream
    float* ln;             // (maxT, C)
    float* mean;           // (maxT)
    float* rstd;           // (maxT)
    float* qkv;            // (maxT, QKV) the NH query heads, then the NKV key and value heads
    float* atty;           // (maxT, AW) the attention output, NH HS wide
    float* proj;           // (maxT, C)
    float* fch;            // (maxT, FFN) the MLP's first hidden layer (GPT-2: fc, Llama 3: the gate)
    float* fch2;           // (maxT, FFN) its second (GPT-2: gelu(fc), Llama 3: the up projection)
    float* scores;         // (threads, maxT) attention scores scratch
    float* logits;         // (V) logits of the last position
} KVCache;

// a family's cached forward pass: feeds tokens[0..n) at positions kv->pos .. kv->pos+n-1 of the model (the family's
// inference struct), kv->logits gets the last position's logits
typedef void (*KVForwardFn)(const void* model, KVCache* kv, const int* tokens, int n);

// a cache of heads HS wide (the attention width NH HS need not be C)
static void kvcache_init_heads(KVCache* kv, int maxT, int C, int L, int NH, int NKV, int HS, int FFN, int V) {
    // the shapes, an empty cache (every buffer below is set)
    *kv = (KVCache){.maxT = maxT, .C = C, .L = L, .NH = NH, .NKV = NKV, .HS = HS, .QKV = (NH + 2 * NKV) * HS, .FFN = FFN,
                    .V = V, .pos = 0};
    size_t T = (size_t)maxT, KVC = (size_t)NKV * kv->HS;
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    kv->key_cache = (float*)mallocCheck((size_t)L * T * KVC * sizeof(float));
    kv->value_cache = (float*)mallocCheck((size_t)L * T * KVC * sizeof(float));
    kv->x = (float*)mallocCheck(T * C * sizeof(float));
    kv->ln = (float*)mallocCheck(T * C * sizeof(float));
    kv->mean = (float*)mallocCheck(T * sizeof(float));
    kv->rstd = (float*)mallocCheck(T * sizeof(float));
    kv->qkv = (float*)mallocCheck(T * kv->QKV * sizeof(float));
    kv->atty = (float*)mallocCheck(T * NH * HS * sizeof(float));
    kv->proj = (float*)mallocCheck(T * C * sizeof(float));
    kv->fch = (float*)mallocCheck(T * FFN * sizeof(float));
    kv->fch2 = (float*)mallocCheck(T * FFN * sizeof(float));
    kv->scores = (float*)mallocCheck((size_t)nthreads * T * sizeof(float));
    kv->logits = (float*)mallocCheck((size_t)V * sizeof(float));
}

// a cache of heads C / NH wide
static void kvcache_init(KVCache* kv, int maxT, int C, int L, int NH, int NKV, int FFN, int V) {
    kvcache_init_heads(kv, maxT, C, L, NH, NKV, C / NH, FFN, V);
}

// a second, empty cache of like's shapes
static void kvcache_init_like(KVCache* kv, const KVCache* like) {
    kvcache_init_heads(kv, like->maxT, like->C, like->L, like->NH, like->NKV, like->HS, like->FFN, like->V);
}

static void kvcache_free(KVCache* kv) {
    free(kv->key_cache); free(kv->value_cache); free(kv->x); free(kv->ln); free(kv->mean); free(kv->rstd);
    free(kv->qkv); free(kv->atty); free(kv->proj); free(kv->fch); free(kv->fch2); free(kv->scores); free(kv->logits);
}

// the start of a cached forward pass of n tokens: one error line when they do not fit the context
static void kvcache_check_room(const KVCache* kv, int n) {
    if (n < 1 || kv->pos + n > kv->maxT) {
        llmc_die("internal: cached forward of %d tokens at position %d exceeds the context %d", n, kv->pos, kv->maxT);
    }
}

// out[o] = bias[o] + weight[o,:] . inp, for one position. Each dot product keeps MV_LANES
// independent partial sums (so the compiler can use SIMD without reordering float math) and
// adds them in a fixed order: the result does not depend on the thread count.
#define MV_LANES 16
static void matvec_forward(float* out, const float* inp, const float* weight, const float* bias, int C, int OC) {
    // out is (OC), inp is (C), weight is (OC, C), bias is (OC) or NULL
    int Cv = C - C % MV_LANES;
    #pragma omp parallel for schedule(static) if ((size_t)OC * C >= (1u << 16))
    for (int o = 0; o < OC; o++) {
        const float* w = weight + (size_t)o * C;
        float acc[MV_LANES] = {0.0f};
        for (int c = 0; c < Cv; c += MV_LANES) {
            for (int j = 0; j < MV_LANES; j++) { acc[j] += w[c + j] * inp[c + j]; }
        }
        float s = 0.0f;
        for (int j = 0; j < MV_LANES; j++) { s += acc[j]; }
        for (int c = Cv; c < C; c++) { s += w[c] * inp[c]; }
        out[o] = s + (bias != NULL ? bias[o] : 0.0f);
    }
}

// a linear layer over n positions: one position is a matrix-vector product
static void linear_forward(float* out, const float* inp, const float* weight, const float* bias, int n, int C, int OC) {
    // out is (n, OC), inp is (n, C)
    if (n == 1) { matvec_forward(out, inp, weight, bias, C, OC); }
    else { matmul_forward(out, inp, weight, bias, 1, n, C, OC); }
}

// The element-wise layers over n positions: llmc/cpu/'s layer functions for a prompt, a plain loop
// for one position (the same math; a parallel region would cost more than the work).
static void layernorm_rows(KVCache* kv, float* out, const float* inp, const float* weight, const float* bias, int n, int C) {
    // out and inp are (n, C), weight and bias are (C)
    if (n > 1) { layernorm_forward(out, kv->mean, kv->rstd, inp, weight, bias, 1, n, C); return; }
    float m = layernorm_row_mean(inp, C);  // llmc/cpu/layernorm_cpu.h's: layernorm_forward's bits
    float s = layernorm_row_rstd(inp, m, C);
    for (int i = 0; i < C; i++) { out[i] = (inp[i] - m) * s * weight[i] + bias[i]; }
}

static void gelu_rows(float* out, const float* inp, int n, size_t N) {
    // out and inp are (N) = (n, 4C)
    if (n > 1) { gelu_forward(out, inp, N); return; }
    for (size_t i = 0; i < N; i++) { out[i] = gelu_tanh_forward(inp[i]); }
}

static void residual_rows(float* x, const float* y, int n, size_t N) {
    // x += y, both (N) = (n, C)
    if (n > 1) { residual_forward(x, x, y, N); return; }
    for (size_t i = 0; i < N; i++) { x[i] += y[i]; }
}

// appends the keys and values of the n new positions (kv->pos ..) of kv->qkv to one layer's cache
static void kvcache_store(const KVCache* kv, float* layer_keys, float* layer_values, int n) {
    // kv->qkv is (n, QKV), its keys at column AW = NH*HS and its values at AW + NKV*HS; layer_keys/values are
    // (maxT, NKV*HS)
    size_t KVC = (size_t)kv->NKV * kv->HS, AW = (size_t)kv->NH * kv->HS;
    for (int t = 0; t < n; t++) {
        const float* row = kv->qkv + (size_t)t * kv->QKV;
        memcpy(layer_keys + (size_t)(kv->pos + t) * KVC, row + AW, KVC * sizeof(float));
        memcpy(layer_values + (size_t)(kv->pos + t) * KVC, row + AW + KVC, KVC * sizeof(float));
    }
}

// causal attention of n new positions (pos0 .. pos0+n-1) over the cached keys/values 0 .. pos0+n-1;
// query head h reads cached head h / (NH/NKV) (GPT-2: NKV = NH). C is the attention width NH HS (the channels
// unless the head size is the model's own)
static void attention_forward_cached(float* out, float* scores, const float* q_rows, int q_stride, const float* key_cache,
                                     const float* value_cache, int pos0, int n, int C, int NH, int NKV, int maxT) {
    // out is (n, C); q_rows is (n, q_stride) with the NH query heads first; key/value_cache are
    // (maxT, NKV*HS); scores is (threads, maxT) scratch
    int HS = C / NH, KVC = NKV * HS, rep = NH / NKV;
    float scale = 1.0f / sqrtf((float)HS);
    #pragma omp parallel for collapse(2) if ((size_t)n * (pos0 + n) * C >= (1u << 16))
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < NH; h++) {
#ifdef _OPENMP
            float* s = scores + (size_t)omp_get_thread_num() * maxT;
#else
            float* s = scores;
#endif
            const float* q = q_rows + (size_t)t * q_stride + h * HS;
            int kvh = (h / rep) * HS;
            int last = pos0 + t;   // attends to positions 0..last
            float maxval = -INFINITY;
            for (int t2 = 0; t2 <= last; t2++) {
                const float* k = key_cache + (size_t)t2 * KVC + kvh;
                float dot = 0.0f;
                for (int i = 0; i < HS; i++) { dot += q[i] * k[i]; }
                dot *= scale;
                s[t2] = dot;
                if (dot > maxval) { maxval = dot; }
            }
            float sum = 0.0f;
            for (int t2 = 0; t2 <= last; t2++) {
                s[t2] = expf(s[t2] - maxval);
                sum += s[t2];
            }
            float inv = 1.0f / sum;
            float* o = out + (size_t)t * C + h * HS;
            for (int i = 0; i < HS; i++) { o[i] = 0.0f; }
            for (int t2 = 0; t2 <= last; t2++) {
                const float* v = value_cache + (size_t)t2 * KVC + kvh;
                float a = s[t2] * inv;
                for (int i = 0; i < HS; i++) { o[i] += a * v[i]; }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// --check-kv: the test of the cache. The full recompute shares no incremental state with the cache under test:
// `full` is a second cache, emptied and fed the whole sequence in one pass (the n > 1 path: GEMMs, the layers
// over n rows, keys and values of every position computed at once), where the cache under test met the tokens
// one at a time (matrix-vector products, one row each).

#define KV_CHECK_LIMIT 1e-4

typedef struct {
    double max_diff;   // largest |cached - full| logit difference seen
    int checks;
} KVCheck;

// Compares kv's logits (of seq[0..T) fed to kv, its last position) with a full recompute of seq[0..T) in `full`
// (a cache of kv's shapes); dies with one line above KV_CHECK_LIMIT.
static void kv_check_step(KVCheck* chk, KVCache* full, KVForwardFn forward, const void* model, const KVCache* kv,
                          const int* seq, int T) {
    full->pos = 0;
    forward(model, full, seq, T);
    double d = 0.0;
    for (int i = 0; i < kv->V; i++) {
        double e = fabs((double)full->logits[i] - (double)kv->logits[i]);
        if (e > d || e != e) { d = e; }
    }
    if (d > chk->max_diff || d != d) { chk->max_diff = d; }
    chk->checks++;
    if (!(d <= KV_CHECK_LIMIT)) {
        llmc_die("--check-kv: cached logits differ from a full recompute by %.3g at position %d (limit 1e-4)", d, T - 1);
    }
}

#endif // LLMC_KV_CACHE_H
