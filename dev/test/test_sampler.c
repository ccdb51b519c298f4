// dev/test/test_sampler.c: unit tests of llmc/sampler.h (stable softmax, argmax cases, frequencies).
#include <math.h>
#include "llmc/sampler.h"
#include "dev/test/test_common.h"

#define DRAWS 20000

// empirical frequencies of DRAWS samples
static void frequencies(Sampler* s, const float* logits, int V, double* freq) {
    for (int i = 0; i < V; i++) { freq[i] = 0.0; }
    for (int d = 0; d < DRAWS; d++) {
        int tok = sampler_sample(s, logits);
        if (tok >= 0 && tok < V) { freq[tok] += 1.0 / DRAWS; }
    }
}

// every |freq - p| within 5 standard deviations of a binomial proportion (plus a tiny slack)
static int matches(const double* freq, const double* p, int V) {
    for (int i = 0; i < V; i++) {
        double sd = sqrt(p[i] * (1.0 - p[i]) / DRAWS);
        if (fabs(freq[i] - p[i]) > 5.0 * sd + 1e-9) { return 0; }
    }
    return 1;
}

static void log_probs(const float* x, int V, double* p, double T) {
    double m = x[0], z = 0.0;
    for (int i = 1; i < V; i++) { if (x[i] > m) { m = x[i]; } }
    for (int i = 0; i < V; i++) { p[i] = exp((x[i] - m) / T); z += p[i]; }
    for (int i = 0; i < V; i++) { p[i] /= z; }
}

// 1 when `draws` samples with these settings all give token `want`
static int always_samples(int want, const float* logits, int V, float temperature, int top_k, float top_p,
                          uint64_t seed, int draws) {
    Sampler s;
    sampler_init(&s, V, temperature, top_k, top_p, seed);
    int ok = 1;
    for (int i = 0; i < draws; i++) { if (sampler_sample(&s, logits) != want) { ok = 0; } }
    sampler_free(&s);
    return ok;
}

static void bad_top_p(void* arg) {
    (void)arg;
    Sampler s;
    sampler_init(&s, 10, 1.0f, 0, 0.0f, 1);
}

int main(void) {
    // xorshift*: deterministic, in range
    {
        uint64_t a = 7, b = 7;
        int same = 1, in_range = 1;
        for (int i = 0; i < 1000; i++) {
            if (random_u32(&a) != random_u32(&b)) { same = 0; }
            float f = random_f32(&a);
            random_f32(&b);
            if (!(f >= 0.0f && f < 1.0f)) { in_range = 0; }
        }
        CHECK(same && in_range, "random_u32 deterministic, random_f32 in [0, 1)");
    }

    // stable softmax: logits that overflow a naive exp
    {
        float logits[4] = {1e4f, 1e4f - 1.0f, -1e4f, 1e4f - 2.0f};
        float probs[4];
        sampler_softmax(logits, probs, 4, 1.0f);
        double z = 1.0 + exp(-1.0) + exp(-2.0);
        int ok = 1;
        for (int i = 0; i < 4; i++) { if (!isfinite(probs[i])) { ok = 0; } }
        CHECK(ok && fabs(probs[0] - 1.0 / z) < 1e-6 && fabs(probs[1] - exp(-1.0) / z) < 1e-6 && probs[2] == 0.0f
              && fabs(probs[3] - exp(-2.0) / z) < 1e-6, "softmax of 1e4 / -1e4 logits is finite and right");
        Sampler s;
        sampler_init(&s, 4, 1.0f, 0, 1.0f, 42);
        double freq[4], p[4] = {1.0 / z, exp(-1.0) / z, 0.0, exp(-2.0) / z};
        frequencies(&s, logits, 4, freq);
        CHECK(matches(freq, p, 4), "frequencies with huge logits: %.4f %.4f %.4f %.4f", freq[0], freq[1], freq[2], freq[3]);
        sampler_free(&s);
    }

    float logits[6] = {1.0f, 2.5f, 0.3f, 2.0f, -1.0f, 0.0f};  // argmax 1
    const int V = 6;
    double freq[6], p[6];

    // temperature 0, top_k = 1 and a tiny top_p = argmax
    CHECK(always_samples(1, logits, V, 0.0f, 0, 1.0f, 1, 100), "temperature 0 always gives the argmax");
    CHECK(always_samples(1, logits, V, 1.0f, 1, 1.0f, 2, 200), "top_k = 1 gives the argmax");
    CHECK(always_samples(1, logits, V, 1.0f, 0, 1e-6f, 3, 200), "tiny top_p gives the argmax");
    // full distribution, with temperature
    {
        Sampler s;
        sampler_init(&s, V, 1.0f, 0, 1.0f, 4);
        log_probs(logits, V, p, 1.0);
        frequencies(&s, logits, V, freq);
        CHECK(matches(freq, p, V), "frequencies match softmax (T=1)");
        sampler_free(&s);
        sampler_init(&s, V, 0.5f, 0, 1.0f, 5);
        log_probs(logits, V, p, 0.5);
        frequencies(&s, logits, V, freq);
        CHECK(matches(freq, p, V), "frequencies match softmax (T=0.5)");
        sampler_free(&s);
    }
    // top-k = 3: tokens 1, 3, 0 renormalised
    {
        Sampler s;
        sampler_init(&s, V, 1.0f, 3, 1.0f, 6);
        log_probs(logits, V, p, 1.0);
        double mass = p[1] + p[3] + p[0];
        double want[6] = {p[0] / mass, p[1] / mass, 0, p[3] / mass, 0, 0};
        frequencies(&s, logits, V, freq);
        CHECK(matches(freq, want, V), "top_k=3 frequencies: %.4f %.4f %.4f %.4f", freq[0], freq[1], freq[2], freq[3]);
        sampler_free(&s);
    }
    // top-p: probabilities 0.5, 0.3, 0.15, 0.05 -> top_p 0.7 keeps {0, 1}; 0.8 keeps {0, 1} exactly; 0.81 keeps 3
    {
        float lg[4] = {logf(0.5f), logf(0.3f), logf(0.15f), logf(0.05f)};
        Sampler s;
        sampler_init(&s, 4, 1.0f, 0, 0.7f, 7);
        double want[4] = {0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0};
        frequencies(&s, lg, 4, freq);
        CHECK(matches(freq, want, 4), "top_p=0.7 frequencies: %.4f %.4f %.4f %.4f", freq[0], freq[1], freq[2], freq[3]);
        sampler_free(&s);
        sampler_init(&s, 4, 1.0f, 0, 0.9f, 8);
        double want3[4] = {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0};
        frequencies(&s, lg, 4, freq);
        CHECK(matches(freq, want3, 4), "top_p=0.9 keeps three tokens: %.4f %.4f %.4f %.4f", freq[0], freq[1], freq[2], freq[3]);
        sampler_free(&s);
        // top-k and top-p together: top_k=3 renormalises to 0.5/0.95.., then top_p 0.6 -> {0, 1}
        sampler_init(&s, 4, 1.0f, 3, 0.6f, 9);
        frequencies(&s, lg, 4, freq);
        CHECK(matches(freq, want, 4), "top_k=3 then top_p=0.6: %.4f %.4f %.4f %.4f", freq[0], freq[1], freq[2], freq[3]);
        sampler_free(&s);
    }
    // determinism for a seed, on a GPT-2 sized vocabulary
    {
        int Vb = 50257;
        float* big = (float*)malloc((size_t)Vb * sizeof(float));
        uint64_t st = 123;
        for (int i = 0; i < Vb; i++) { big[i] = 4.0f * random_f32(&st); }
        Sampler a, b, c;
        sampler_init(&a, Vb, 0.9f, 40, 0.95f, 1337);
        sampler_init(&b, Vb, 0.9f, 40, 0.95f, 1337);
        sampler_init(&c, Vb, 0.9f, 40, 0.95f, 1338);
        int same = 1, differ = 0;
        for (int i = 0; i < 50; i++) {
            int ta = sampler_sample(&a, big), tb = sampler_sample(&b, big), tc = sampler_sample(&c, big);
            if (ta != tb) { same = 0; }
            if (ta != tc) { differ = 1; }
        }
        CHECK(same, "the same seed gives the same tokens");
        CHECK(differ, "another seed gives other tokens");
        sampler_free(&a);
        sampler_free(&b);
        sampler_free(&c);
        free(big);
    }
    // top-k keeps exactly the k best (ties by lower id), for the small-k and the sorting paths
    {
        int Vt = 1000;
        float* lg = (float*)malloc((size_t)Vt * sizeof(float));
        uint64_t st = 99;
        for (int i = 0; i < Vt; i++) { lg[i] = (float)(random_u32(&st) % 50) * 0.1f; }  // many ties
        int ks[2] = {40, 300};
        for (int c = 0; c < 2; c++) {
            int k = ks[c];
            // the k-th best logit and how many of the k are ties at that value
            int rank_ok = 1;
            Sampler s;
            sampler_init(&s, Vt, 1.0f, k, 1.0f, 10 + (uint64_t)c);
            for (int d = 0; d < 2000; d++) {
                int tok = sampler_sample(&s, lg);
                int better = 0;  // tokens ordered before tok: larger logit, or equal logit and lower id
                for (int i = 0; i < Vt; i++) {
                    if (lg[i] > lg[tok] || (lg[i] == lg[tok] && i < tok)) { better++; }
                }
                if (better >= k) { rank_ok = 0; }
            }
            CHECK(rank_ok, "top_k=%d samples only among the k best (ties by id)", k);
            sampler_free(&s);
        }
        free(lg);
    }
    expect_die("top_p 0", bad_top_p, NULL, "top_p", "(0, 1]");
    return test_summary();
}
