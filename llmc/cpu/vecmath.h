/*
llmc/cpu/vecmath.h: branch-free float math that compilers vectorise, for the CPU trainer's
element-wise layers (glibc's expf/tanhf are scalar calls and kept GELU at ~10% of a step).

    vec_expf(x)   e^x, relative error < 2e-7 for x in [-87, 88] (clamped outside)
    vec_tanhf(x)  tanh(x) = sign(x) (1 - e^-2|x|) / (1 + e^-2|x|), absolute error < 3e-7
    vec_gelu_forward(x), vec_gelu_grad(x)   GPT-2's tanh GELU and its derivative, the
                  formulas of llmc/layer_math.h with vec_tanhf in place of tanhf
    vec_dot3(a, b, c, n)   sum of a[i] b[i] c[i] (b NULL: of a[i] c[i]) in 16 interleaved partial
                  sums, added up in a fixed order (one running sum would not vectorise)

No lookup tables, no branches, no calls: a loop over these with -O3 -fno-trapping-math becomes
AVX-512 / AVX2 code (GCC keeps the clamps as branches, and the loop scalar, unless it may assume
that comparisons do not trap; the Makefile's CPU_SPEED_CFLAGS has the flag). No -ffast-math: it
would break the rounding trick in vec_expf. dev/test/test_matmul.c checks
the error bounds against libm over the whole range.
*/
#ifndef LLMC_VECMATH_H
#define LLMC_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "../layer_math.h"

static inline float vec_expf(float x) {
    x = x < -87.0f ? -87.0f : x; // (NaN passes both tests and stays NaN through p)
    x = x > 88.0f ? 88.0f : x;
    // x = n ln2 + r, |r| <= ln2 / 2; ln2 split in two so n * ln2_hi is exact
    // n = round(x / ln2) by the 1.5 * 2^23 trick (exact for |x / ln2| < 2^22; vectorises, unlike floorf)
    float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723e-6f;
    // e^r: Taylor polynomial of degree 7 (error < 1e-8 on |r| <= 0.347)
    float p = 1.98412698e-4f;
    p = p * r + 1.38888889e-3f;
    p = p * r + 8.33333333e-3f;
    p = p * r + 4.16666667e-2f;
    p = p * r + 1.66666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    // times 2^n, built from the exponent bits (n in [-126, 127] after the clamp)
    // (a NaN x gives a NaN p: use n = 0 then, as converting NaN to int is undefined behaviour)
    int32_t bits = (int32_t)((uint32_t)((int32_t)(n == n ? n : 0.0f) + 127) << 23);
    float scale;
    memcpy(&scale, &bits, sizeof(scale));
    return p * scale;
}

static inline float vec_tanhf(float x) {
    float e = vec_expf(-2.0f * fabsf(x));
    return copysignf((1.0f - e) / (1.0f + e), x);
}

static inline float vec_gelu_forward(float x) {
    float cube = GELU_CUBE_COEFF * x * x * x;
    return 0.5f * x * (1.0f + vec_tanhf(GELU_SCALING_FACTOR * (x + cube)));
}

static inline float vec_gelu_grad(float x) {
    float cube = GELU_CUBE_COEFF * x * x * x;
    float th = vec_tanhf(GELU_SCALING_FACTOR * (x + cube));
    float sech2 = 1.0f - th * th;
    float du_dx = GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBE_COEFF * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
}

static inline float vec_dot3(const float* a, const float* b, const float* c, int n) {
    float part[16] = {0.0f};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) { part[j] += a[i + j] * (b != NULL ? b[i + j] : 1.0f) * c[i + j]; }
    }
    float sum = 0.0f;
    for (; i < n; i++) { sum += a[i] * (b != NULL ? b[i] : 1.0f) * c[i]; }
    for (int j = 0; j < 16; j++) { sum += part[j]; }
    return sum;
}

#endif // LLMC_VECMATH_H
