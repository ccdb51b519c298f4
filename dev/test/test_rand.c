// dev/test/test_rand.c: unit tests of llmc/rand.h (MT19937 reference values, torch values, properties).
// The full bit-for-bit comparison with torch lives in tests/test_c_headers.py.
#include <math.h>
#include <string.h>
#include "llmc/rand.h"
#include "dev/test/test_common.h"

int main(void) {
    mt19937_state rng;

    // the C++ standard's check value: the 10000th output of mt19937 seeded with 5489
    manual_seed(&rng, 5489);
    uint32_t r = 0;
    for (int i = 0; i < 10000; i++) { r = randint32(&rng); }
    CHECK(r == 4123659995U, "mt19937(5489) 10000th output is 4123659995 (got %u)", r);

    // randint64 = first draw in the high half
    manual_seed(&rng, 42);
    uint32_t a = randint32(&rng), b = randint32(&rng);
    manual_seed(&rng, 42);
    uint64_t ab = randint64(&rng);
    CHECK(ab == (((uint64_t)a << 32) | b), "randint64 is (first << 32) | second");

    // values produced by torch 2.13, seed 42, as float bit patterns, for both of torch's kernels
    {
        float x[20];
        // scalar kernel (ATEN_CPU_CAPABILITY=default)
        manual_seed(&rng, 42);
        rng.torch_avx2_or_above = 0;
        normal_d(x, 20, 0.0, 0.02, &rng);
        const uint32_t expect_head[4] = {0x3d1dda56U, 0x3cf3ad38U, 0x3c9392d1U, 0xbd2c7bfcU};
        const uint32_t expect_tail[4] = {0xbbcafb8eU, 0xbc01aa9aU, 0x3c83a16eU, 0xbc4baf33U};
        int ok = 1;
        for (int i = 0; i < 4; i++) {
            if (float_bits(x[i]) != expect_head[i] || float_bits(x[16 + i]) != expect_tail[i]) { ok = 0; }
        }
        CHECK(ok, "normal_d(20, 0, 0.02) seed 42 matches torch's scalar kernel bit for bit");
        // vectorised kernel (AVX2 / AVX512)
        manual_seed(&rng, 42);
        rng.torch_avx2_or_above = 1;
        normal_d(x, 20, 0.0, 0.02, &rng);
        const uint32_t vexpect_head[4] = {0x3d1dda57U, 0x3cf3ad37U, 0x3c9392d1U, 0xbd2c7bf9U};
        const uint32_t vexpect_tail[4] = {0xbbcafb87U, 0xbc01aa9aU, 0x3c83a16eU, 0xbc4baf33U};
        ok = 1;
        for (int i = 0; i < 4; i++) {
            if (float_bits(x[i]) != vexpect_head[i] || float_bits(x[16 + i]) != vexpect_tail[i]) { ok = 0; }
        }
        CHECK(ok, "normal_d(20, 0, 0.02) seed 42 matches torch's AVX2/AVX512 kernel bit for bit");

        for (int vec = 0; vec < 2; vec++) {
            manual_seed(&rng, 42);
            rng.torch_avx2_or_above = vec;
            normal_(x, 3, 0.0f, 1.0f, &rng);
            const uint32_t expect_small[3] = {0x3eac62aeU, 0x3e03e69dU, 0x3e7016e7U};
            ok = 1;
            for (int i = 0; i < 3; i++) { if (float_bits(x[i]) != expect_small[i]) { ok = 0; } }
            CHECK(ok, "normal_(3, 0, 1) seed 42 (double path) matches torch's bits (vectorised=%d)", vec);

            manual_seed(&rng, 42);
            rng.torch_avx2_or_above = vec;
            uniform_(x, 3, -0.3f, 0.7f, &rng);
            const uint32_t expect_uniform[3] = {0x3f150f99U, 0x3f1d70e6U, 0x3da9b478U};
            ok = 1;
            for (int i = 0; i < 3; i++) { if (float_bits(x[i]) != expect_uniform[i]) { ok = 0; } }
            CHECK(ok, "uniform_(3, -0.3, 0.7) seed 42 matches torch's bits (vectorised=%d)", vec);
        }
    }

    // the vectorised log and sincos stay close to libm (they are approximations, within a few ulp)
    {
        int ok = 1;
        for (int i = 1; i <= 100000; i++) {
            float u = (float)i / 100000.0f;
            float lv = rand_vec_logf(u), ll = logf(u);
            if (fabsf(lv - ll) > 4e-7f * fmaxf(1.0f, fabsf(ll))) { ok = 0; }
            float t = 6.2831855f * u, sv, cv;
            rand_vec_sincosf(t, &sv, &cv);
            if (fabsf(sv - sinf(t)) > 1e-6f || fabsf(cv - cosf(t)) > 1e-6f) { ok = 0; }
        }
        CHECK(ok, "vectorised log/sin/cos agree with libm to a few ulp on (0, 1] and [0, 2pi]");
    }

    // manual_seed follows ATEN_CPU_CAPABILITY like torch does
    {
        setenv("ATEN_CPU_CAPABILITY", "default", 1);
        manual_seed(&rng, 1);
        CHECK(rng.torch_avx2_or_above == 0, "ATEN_CPU_CAPABILITY=default selects the scalar kernel");
        unsetenv("ATEN_CPU_CAPABILITY");
    }

    // determinism and reseeding
    {
        float x[100], y[100];
        manual_seed(&rng, 1337);
        normal_(x, 5, 0.0f, 1.0f, &rng);   // leaves a cached double sample behind
        manual_seed(&rng, 1337);           // which manual_seed must clear
        normal_(y, 5, 0.0f, 1.0f, &rng);
        CHECK(memcmp(x, y, sizeof(float) * 5) == 0, "manual_seed resets the generator and its normal cache");
        manual_seed(&rng, 1337);
        normal_(x, 100, 0.0f, 1.0f, &rng);
        manual_seed(&rng, 1338);
        normal_(y, 100, 0.0f, 1.0f, &rng);
        CHECK(memcmp(x, y, sizeof(x)) != 0, "different seeds give different values");
    }

    // n % 16 != 0: the first block is the same as for n = 16, the last 16 are redrawn
    {
        float x16[16], x17[17];
        manual_seed(&rng, 42);
        normal_(x16, 16, 0.0f, 1.0f, &rng);
        manual_seed(&rng, 42);
        normal_(x17, 17, 0.0f, 1.0f, &rng);
        CHECK(x17[0] == x16[0], "normal_(17)[0] == normal_(16)[0]");
        CHECK(x17[8] != x16[8], "normal_(17)[8] is redrawn by the tail block");
    }

    // uniform_ range and normal_ moments over many samples
    {
        size_t n = 200000;
        float* x = (float*)malloc(n * sizeof(float));
        manual_seed(&rng, 7);
        uniform_(x, n, -0.5f, 2.0f, &rng);
        int in_range = 1;
        double sum = 0.0;
        for (size_t i = 0; i < n; i++) {
            if (!(x[i] >= -0.5f && x[i] < 2.0f)) { in_range = 0; }
            sum += x[i];
        }
        CHECK(in_range, "uniform_ values lie in [from, to)");
        CHECK(fabs(sum / n - 0.75) < 0.01, "uniform_ mean %f close to 0.75", sum / n);

        for (int vec = 0; vec < 2; vec++) {
            manual_seed(&rng, 7);
            rng.torch_avx2_or_above = vec;
            normal_(x, n, 1.0f, 2.0f, &rng);
            double s1 = 0.0, s2 = 0.0;
            int finite = 1;
            for (size_t i = 0; i < n; i++) {
                if (!isfinite(x[i])) { finite = 0; }
                s1 += x[i];
                s2 += (double)x[i] * x[i];
            }
            double mean = s1 / n, var = s2 / n - mean * mean;
            CHECK(finite, "normal_ values are finite (vectorised=%d)", vec);
            CHECK(fabs(mean - 1.0) < 0.02, "normal_ mean %f close to 1 (vectorised=%d)", mean, vec);
            CHECK(fabs(sqrt(var) - 2.0) < 0.02, "normal_ std %f close to 2 (vectorised=%d)", sqrt(var), vec);
        }
        free(x);
    }
    return test_summary();
}
