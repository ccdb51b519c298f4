/*
llmc/sampler.h: picks the next token from logits: temperature, top-k, top-p (nucleus), seeded.

    temperature <= 0          argmax (the first maximum on ties)
    otherwise                 probs = softmax(logits / temperature), computed stably: the maximum
                              is subtracted before exp, so logits like 1e4 never overflow
    top_k > 0 (and < vocab)   keep only the k most probable tokens, renormalise
    0 < top_p < 1             keep the smallest set of most probable tokens whose cumulative
                              probability is >= top_p, renormalise
Ties in probability are ordered by token id, so a given seed always gives the same tokens.
The random numbers come from a 64-bit xorshift* generator (state in the Sampler), independent
of the training RNG. No memory is allocated per sample.
*/
#ifndef LLMC_SAMPLER_H
#define LLMC_SAMPLER_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "utils.h"

// xorshift* (Marsaglia / Vigna): 32 random bits per call
static inline uint32_t random_u32(uint64_t* state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1DULL) >> 32);
}

// float in [0, 1) with 24 random bits
static inline float random_f32(uint64_t* state) {
    return (float)(random_u32(state) >> 8) / 16777216.0f;
}

// a candidate token while sorting: its probability and id
typedef struct {
    float prob;
    int index;
} SamplerCandidate;

typedef struct {
    int vocab_size;
    float temperature;
    int top_k;        // 0 = off
    float top_p;      // >= 1 = off
    uint64_t rng_state;
    float* probs;     // (vocab_size,) scratch: probabilities
    int* indices;     // (vocab_size,) scratch: the kept candidate ids of the last sample, most probable first
    SamplerCandidate* candidates;  // (vocab_size,) scratch for sorting
} Sampler;

static inline void sampler_init(Sampler* s, int vocab_size, float temperature, int top_k, float top_p, uint64_t seed) {
    if (vocab_size <= 0) {
        llmc_die("sampler: vocab size must be positive (got %d)", vocab_size);
    }
    if (top_k < 0) {
        llmc_die("sampler: top_k must be >= 0 (0 = off), got %d", top_k);
    }
    if (!(top_p > 0.0f)) {
        llmc_die("sampler: top_p must be in (0, 1] (1 = off), got %g", (double)top_p);
    }
    s->vocab_size = vocab_size;
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    // xorshift must not start at 0; mix the seed so small seeds are fine too
    s->rng_state = seed * 0x9E3779B97F4A7C15ULL + 0x2545F4914F6CDD1DULL;
    if (s->rng_state == 0) { s->rng_state = 0x853C49E6748FEA9BULL; }
    s->probs = (float*)mallocCheck((size_t)vocab_size * sizeof(float));
    s->indices = (int*)mallocCheck((size_t)vocab_size * sizeof(int));
    s->candidates = (SamplerCandidate*)mallocCheck((size_t)vocab_size * sizeof(SamplerCandidate));
}

// index of the largest value (the first one on ties; NaN never wins)
static inline int sampler_argmax(const float* x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++) {
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) { best = i; }
    }
    return best;
}

// probs = softmax(logits / temperature), stable (the maximum is subtracted); temperature > 0
static inline void sampler_softmax(const float* logits, float* probs, int n, float temperature) {
    float max_logit = logits[sampler_argmax(logits, n)];
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        float z = (logits[i] - max_logit) / temperature;  // <= 0, so exp never overflows
        probs[i] = isnan(z) ? 0.0f : expf(z);
        sum += probs[i];
    }
    float inv = (float)(1.0 / sum);  // sum >= 1: the maximum contributes exp(0)
    for (int i = 0; i < n; i++) { probs[i] *= inv; }
}

// ordering for candidates: larger probability first, then smaller token id
static inline int sampler_compare_(const void* a, const void* b) {
    const SamplerCandidate* ca = (const SamplerCandidate*)a;
    const SamplerCandidate* cb = (const SamplerCandidate*)b;
    if (ca->prob > cb->prob) { return -1; }
    if (ca->prob < cb->prob) { return 1; }
    return (ca->index > cb->index) - (ca->index < cb->index);
}

// draws an index of cand[0..n) with probability proportional to probs[cand[i]]
static inline int sampler_draw_(Sampler* s, const int* cand, int n) {
    double total = 0.0;
    for (int i = 0; i < n; i++) { total += s->probs[cand[i]]; }
    double r = (double)random_f32(&s->rng_state) * total;
    double cdf = 0.0;
    for (int i = 0; i < n; i++) {
        cdf += s->probs[cand[i]];
        if (r < cdf) { return cand[i]; }
    }
    return cand[n - 1];  // rounding: r landed exactly on the total
}

static inline int sampler_sample(Sampler* s, const float* logits) {
    int V = s->vocab_size;
    if (!(s->temperature > 0.0f) || !isfinite(logits[sampler_argmax(logits, V)])) {
        return sampler_argmax(logits, V);  // temperature 0, or an infinite / all-NaN logit row
    }
    sampler_softmax(logits, s->probs, V, s->temperature);
    int use_top_k = s->top_k > 0 && s->top_k < V;
    int use_top_p = s->top_p < 1.0f;
    if (!use_top_k && !use_top_p) {
        // plain multinomial over the whole vocabulary, in token order
        double r = (double)random_f32(&s->rng_state);
        double cdf = 0.0;
        for (int i = 0; i < V; i++) {
            cdf += s->probs[i];
            if (r < cdf) { return i; }
        }
        return sampler_argmax(s->probs, V);
    }
    int n = 0;
    if (use_top_k && s->top_k <= 256) {
        // keep the k best in a sorted array: a token enters only if it beats the current k-th
        int k = s->top_k;
        for (int i = 0; i < V; i++) {
            float pi = s->probs[i];
            if (n == k && !(pi > s->candidates[k - 1].prob)) { continue; }
            int j = n < k ? n : k - 1;  // slot to fill, then bubble towards the front
            while (j > 0 && s->candidates[j - 1].prob < pi) {
                s->candidates[j] = s->candidates[j - 1];
                j--;
            }
            s->candidates[j].prob = pi;
            s->candidates[j].index = i;
            if (n < k) { n++; }
        }
    } else {
        // for top-p alone, tokens below (1 - top_p) / (V - 1) cannot be in the nucleus
        // (together they hold less than 1 - top_p), so they are dropped before sorting
        float cutoff = (!use_top_k && V > 1) ? (1.0f - s->top_p) / (float)(V - 1) : 0.0f;
        for (int i = 0; i < V; i++) {
            if (s->probs[i] >= cutoff) {
                s->candidates[n].prob = s->probs[i];
                s->candidates[n].index = i;
                n++;
            }
        }
        if (n == 0) { return sampler_argmax(s->probs, V); }
        qsort(s->candidates, (size_t)n, sizeof(SamplerCandidate), sampler_compare_);
        if (use_top_k && n > s->top_k) { n = s->top_k; }
    }
    for (int i = 0; i < n; i++) { s->indices[i] = s->candidates[i].index; }
    if (use_top_p) {
        double mass = 0.0;
        for (int i = 0; i < n; i++) { mass += s->probs[s->indices[i]]; }
        double target = (double)s->top_p * mass;  // top_p of the (top-k renormalised) distribution
        double cum = 0.0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += s->probs[s->indices[i]];
            if (cum >= target) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    return sampler_draw_(s, s->indices, n);
}

// releases the scratch buffers and leaves the struct zeroed, as before init (a second free is harmless)
static inline void sampler_free(Sampler* s) {
    void* buffers[] = {s->probs, s->indices, s->candidates};
    FREE_ALL(buffers);
    memset(s, 0, sizeof(*s));
}

#endif // LLMC_SAMPLER_H
