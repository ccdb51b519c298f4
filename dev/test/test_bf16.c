/*
dev/test/test_bf16.c: llmc/bf16.h on the CPU -- the bf16 round-to-nearest-even and
stochastic rounding the GPU kernels use, and the hash that drives the stochastic rounding.
*/
#include "../../llmc/bf16.h"
#include "test_common.h"

// ----------------------------------------------------------------------------
// bf16 rounding

static void test_bf16_round_nearest(void) {
    CHECK(bf16_bits_round_nearest(1.0f) == 0x3F80, "1.0 -> 0x3F80");
    CHECK(bf16_bits_round_nearest(-2.0f) == 0xC000, "-2.0 -> 0xC000");
    CHECK(bf16_bits_round_nearest(bits_float(0x3F808000u)) == 0x3F80, "tie rounds to even (down)");
    CHECK(bf16_bits_round_nearest(bits_float(0x3F818000u)) == 0x3F82, "tie rounds to even (up)");
    CHECK(bf16_bits_round_nearest(bits_float(0x3F808001u)) == 0x3F81, "above the tie rounds up");
    uint16_t nan_bits = bf16_bits_round_nearest(bits_float(0x7F800001u));
    CHECK((nan_bits & 0x7F80) == 0x7F80 && (nan_bits & 0x007F) != 0, "a NaN with low payload bits stays NaN (0x%04x)", nan_bits);
    CHECK(bf16_bits_round_nearest(INFINITY) == 0x7F80, "inf stays inf");
    CHECK(bf16_bits_to_float(0x3F80) == 1.0f, "0x3F80 -> 1.0");
}

static void test_bf16_stochastic_round(void) {
    // exactly representable values never change
    int changed = 0;
    const float exact[] = {0.0f, 1.0f, -3.5f, 0.15625f, 65536.0f, -1e-20f};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
        float x = bf16_bits_to_float(bf16_bits_round_nearest(exact[i]));
        for (uint32_t r = 0; r < 70000; r += 7) {
            if (bf16_bits_to_float(bf16_bits_stochastic_round(x, llmc_hash_u32(r, 1))) != x) { changed++; }
        }
    }
    CHECK(changed == 0, "bf16-representable values are unchanged by stochastic rounding (%d changed)", changed);

    // every result is one of the two neighbours, and the mean is the input (unbiased)
    const float values[] = {1.0f + 1.0f / 3.0f, -0.7f, 3.14159265f, 1e-3f, -12345.678f};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        float x = values[i];
        uint32_t u = float_bits(x);
        float lo = bits_float(u & 0xFFFF0000u);
        float hi = bits_float((u & 0xFFFF0000u) + 0x10000u);
        int outside = 0;
        double sum = 0.0;
        const int n = 200000;
        for (int k = 0; k < n; k++) {
            float y = bf16_bits_to_float(bf16_bits_stochastic_round(x, llmc_hash_u32((uint32_t)k, 12345u)));
            if (y != lo && y != hi) { outside++; }
            sum += y;
        }
        double mean = sum / n;
        double ulp = fabs((double)hi - (double)lo);
        CHECK(outside == 0, "%g: every result is a bf16 neighbour (%d were not)", x, outside);
        CHECK(fabs(mean - x) < 0.01 * ulp, "%g: mean of stochastic rounding %.9g is within 1%% of an ulp", x, mean);
    }
    // the random bits decide: threshold 0 rounds away unless exact, threshold 0xFFFF truncates
    float x = bits_float(0x3F800001u);
    CHECK(bf16_bits_stochastic_round(x, 0) == 0x3F81, "random 0: any dropped bits round away from zero");
    CHECK(bf16_bits_stochastic_round(x, 0xFFFF) == 0x3F80, "random 0xFFFF: truncates");
    CHECK(bf16_bits_stochastic_round(INFINITY, 0) == 0x7F80, "inf stays inf");
    uint16_t nan_bits = bf16_bits_stochastic_round(bits_float(0x7F800001u), 0xFFFF);
    CHECK((nan_bits & 0x7F80) == 0x7F80 && (nan_bits & 0x007F) != 0, "NaN stays NaN (0x%04x)", nan_bits);
}

static void test_hash(void) {
    CHECK(llmc_hash_u32(5, 7) == llmc_hash_u32(5, 7), "the hash is deterministic");
    int same = 0;
    double mean = 0.0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        if (llmc_hash_u32((uint32_t)i, 1) == llmc_hash_u32((uint32_t)i, 2)) { same++; }
        mean += (double)(llmc_hash_u32((uint32_t)i, 99) & 0xFFFFu);
    }
    mean /= n;
    CHECK(same < 5, "different seeds give different streams (%d equal)", same);
    CHECK(fabs(mean - 32767.5) < 400.0, "low 16 bits are uniform on average (mean %.1f)", mean);
}

int main(void) {
    test_bf16_round_nearest();
    test_bf16_stochastic_round();
    test_hash();
    return test_summary();
}
