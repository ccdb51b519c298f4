/*
llmc/cpu/vecmath.h: branch-free float math that compilers vectorise, for the CPU trainer's
element-wise layers (glibc's expf/tanhf are scalar calls and kept GELU at ~10% of a step).

    vec_expf(x)   e^x, relative error < 2e-7 for x in [-87, 88] (clamped outside)
    vec_tanhf(x)  tanh(x) = sign(x) (1 - e^-2|x|) / (1 + e^-2|x|), absolute error < 3e-7
    vec_gelu_forward(x), vec_gelu_grad(x)   GPT-2's tanh GELU and its derivative, the
                  formulas of llmc/layer_math.h with vec_tanhf in place of tanhf
    vec_gelu_forward_sigmoid(x), vec_gelu_grad_sigmoid(x)   the same GELU as x s, s = 1 / (1 + e^-2u)
                  (0.5 x (1 + tanh u) = x s, u = sqrt(2/pi) (x + 0.044715 x^3)): one exponential and one
                  division as before, fewer operations around them, and no cancellation in 1 + tanh u
    gelu_sigmoid()   which form the trainers' GELU takes: LLMC_GELU_SIGMOID=1 (the default) the sigmoid
                  one, 0 the tanh one as before 2026-12-06 (gelu_sigmoid_use: tests); vec_gelu_grad_as(x,
                  sigmoid) picks a derivative (a constant sigmoid: no branch left)
    vec_dot3(a, b, c, n)   sum of a[i] b[i] c[i] (b NULL: of a[i] c[i]) in 16 interleaved partial
                  sums, added up in a fixed order (one running sum would not vectorise)

No lookup tables, no branches, no calls: a loop over these with -O3 -fno-trapping-math becomes
AVX-512 / AVX2 code (GCC keeps the clamps as branches, and the loop scalar, unless it may assume
that comparisons do not trap; the Makefile's CPU_SPEED_CFLAGS has the flag). No -ffast-math: it
would break the rounding trick in vec_expf. dev/test/test_matmul.c checks
the error bounds against libm over the whole range.

    vec16_expf(x) vec_expf on 16 lanes of an AVX-512 register (x86), the same bits for every input
                  (dev/test/test_matmul.c checks all 2^32): the same operations, but p 2^n in one
                  vscalefps where the compiled loop converts n to an integer, shifts it into an exponent,
                  selects around NaN and multiplies (and keeps the clamps as masks): 1.7 ns against 2.9
                  per 16 values on a Zen 5 thread
    vec16_tanhf(x)  vec_tanhf on 16 lanes, the same bits (checked as vec16_expf)
    vec16_gelu_forward(x)  vec_gelu_forward on 16 lanes, its bits (vec16_gelu_tanh(x): its tanh alone)
    vec16_gelu_forward_as(x, sigmoid)   vec_gelu_forward_sigmoid (sigmoid) or vec_gelu_forward on 16 lanes,
                  its bits (vec16_gelu_sigmoid_e(x), vec16_gelu_sigmoid_s(e): the sigmoid form's e and s alone)
    vec16_exp_sub(e, x, n, max, ahead, ahead_w)   e = vec16_expf(x - max) over a row, and its 16 lanes' sums
    vec16_enabled()  whether the hand-written AVX-512 loops built on it run (the attention's softmax and
                  transposes, the classifier's row pass, GPT-2's -p bf16 GELU forward and its backward's
                  recompute, SwiGLU's -p bf16 forward and backward): this CPU has AVX-512 F and BW, the build
                  has FMA (as every
                  -march=native build on such a CPU: the compiled vec_expf then fuses as vec16_expf does),
                  and LLMC_VEC16 is not 0
                  (LLMC_VEC16=0: the compiled loops, the same bits; kept until the two are timed on
                  every CPU kind; any other value than 0 or 1 is one error line)
    vec8_expf(x), vec8_tanhf(x)   the same on 8 lanes of an AVX2 register, the same bits (checked as vec16_expf)
    vec8_exp_sub(e, x, n, max, ahead, part)   vec16_exp_sub on two vectors of 8
    vec8_enabled()   whether the AVX2 loops built on them run where the AVX-512 ones do not (the classifier's row
                  pass, the tiled attention's softmax): this CPU has AVX2 and FMA, the build has FMA, and LLMC_VEC8 is
                  not 0 (LLMC_VEC8=0: the compiled loops, the same bits)
*/
#ifndef LLMC_VECMATH_H
#define LLMC_VECMATH_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "../layer_math.h"
#include "../utils.h"

// the GELU's sigmoid form (vec_gelu_sigmoid_e below): a = -2u = GELU_SIGMOID_SCALE (x + c x^3), capped at
// GELU_SIGMOID_CAP; 2u' = GELU_SIGMOID_SLOPE (1 + 3c x^2) (each constant twice sqrt(2/pi), exact)
#define GELU_SIGMOID_SCALE (-2.0f * GELU_SCALING_FACTOR)
#define GELU_SIGMOID_SLOPE (2.0f * GELU_SCALING_FACTOR)
#define GELU_SIGMOID_CAP 80.0f

__attribute__((always_inline)) static inline float vec_expf(float x) {
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

#if defined(__x86_64__)
#include <immintrin.h>

// (a build without FMA, such as the sanitizers' with no -march, compiles vec_expf's multiply-adds unfused, and
// vec16_expf would not be its bits: there the compiled loops run)
static inline int vec16_supported(void) {
#if defined(__FMA__)
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    }
    return has;
#else
    return 0;
#endif
}

static inline int vec16_enabled(void) {
    return env_switch_on("LLMC_VEC16") && vec16_supported(); // (the environment read at each call: tests switch it)
}

// (each line is the compiled vec_expf's: its clamps, the fused multiply-adds -ffp-contract makes of n's rounding
// sum, r and the polynomial, then p 2^n, exact before its one rounding in both)
__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_expf(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x); // (max(a, b) is a > b ? a : b: a NaN x stays)
    x = _mm512_min_ps(_mm512_set1_ps(88.0f), x);
    __m512 n = _mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(12582912.0f));
    n = _mm512_sub_ps(n, _mm512_set1_ps(12582912.0f));
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723e-6f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.98412698e-4f), r, _mm512_set1_ps(1.38888889e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33333333e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16666667e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666667e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

// vec_tanhf on 16 lanes, its operations (so its bits): sign(x) (1 - e) / (1 + e), e = e^-2|x|
__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_tanhf(__m512 x) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(x)));
    __m512 e = vec16_expf(_mm512_mul_ps(_mm512_set1_ps(-2.0f), ax));
    __m512 t = _mm512_div_ps(_mm512_sub_ps(_mm512_set1_ps(1.0f), e), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_andnot_si512(sign, _mm512_castps_si512(t)),
                                               _mm512_and_si512(sign, _mm512_castps_si512(x))));
}

// vec_gelu_forward on 16 lanes: its operations, with the product GCC fuses into the add after it (x + c x^3) fused here
// by hand, so its bits (dev/test/test_elementwise checks all 2^16 bf16 inputs) in a caller compiled with fp-contract
// off, as every caller of these helpers is (so that no other product is fused).
// (vec16_gelu_tanh: its tanh, the one the backward's derivative reuses)
__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_gelu_tanh(__m512 x) {
    __m512 cx2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_CUBE_COEFF), x), x);
    return vec16_tanhf(_mm512_mul_ps(_mm512_set1_ps(GELU_SCALING_FACTOR), _mm512_fmadd_ps(cx2, x, x)));
}

__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_gelu_forward(__m512 x) {
    __m512 th = vec16_gelu_tanh(x);
    return _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.5f), x), _mm512_add_ps(_mm512_set1_ps(1.0f), th));
}

// vec_gelu_sigmoid_e on 16 lanes, its operations (x + c x^3 fused as the compiled loop fuses it), so its bits
__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_gelu_sigmoid_e(__m512 x) {
    __m512 cx2 = _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(GELU_CUBE_COEFF), x), x);
    __m512 a = _mm512_mul_ps(_mm512_set1_ps(GELU_SIGMOID_SCALE), _mm512_fmadd_ps(cx2, x, x));
    a = _mm512_min_ps(_mm512_set1_ps(GELU_SIGMOID_CAP), a); // (a > cap ? cap : a: a NaN a stays)
    return vec16_expf(a);
}

// s = 1 / (1 + e) on 16 lanes
__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_gelu_sigmoid_s(__m512 e) {
    return _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_gelu_forward_as(__m512 x, int sigmoid) {
    return sigmoid ? _mm512_mul_ps(x, vec16_gelu_sigmoid_s(vec16_gelu_sigmoid_e(x))) : vec16_gelu_forward(x);
}

// the lanes of a last, partial vector of n < 16 values
static inline __mmask16 vec16_first(int n) { return (__mmask16)((1u << n) - 1u); }

// e (n) = vec16_expf(x - maxval) for x (n) (e may be x), asking for one cache line of `ahead` (NULL: none) per 16
// values, and for writing one of `ahead_w` (n bf16, or NULL: none) per 32; returns the 16 lanes' sums of the whole
// vectors, each in order. The last n % 16 values are written, not summed: the callers add them one by one and then
// the lanes, as their compiled loops do
__attribute__((target("avx512f"), always_inline))
static inline __m512 vec16_exp_sub(float* e, const float* x, int n, float maxval, const float* ahead,
                                   const uint16_t* ahead_w) {
    const __m512 vmax = _mm512_set1_ps(maxval);
    __m512 part = _mm512_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        if (ahead != NULL) { __builtin_prefetch(ahead + i, 0, 3); }
        if (ahead_w != NULL && i % 32 == 0) { __builtin_prefetch(ahead_w + i, 1, 3); }
        __m512 ex = vec16_expf(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
        _mm512_storeu_ps(e + i, ex);
        part = _mm512_add_ps(part, ex);
    }
    if (i < n) {
        __mmask16 k = vec16_first(n - i);
        _mm512_mask_storeu_ps(e + i, k, vec16_expf(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + i), vmax)));
    }
    return part;
}

// ----------------------------------------------------------------------------
// the same on 8 lanes of an AVX2 register, for CPUs without AVX-512 (where GCC's AVX2 loops over vec_expf spilled
// the 16 partial sums and moved each vector through the stack in 8-byte pieces)

// this CPU has AVX2 and FMA, and the build fuses vec_expf's multiply-adds as these do (as vec16_supported)
static inline int vec8_supported(void) {
#if defined(__FMA__)
    static int has = -1;
    if (has < 0) {
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    }
    return has;
#else
    return 0;
#endif
}

static inline int vec8_enabled(void) {
    return env_switch_on("LLMC_VEC8") && vec8_supported(); // (read at each call, as LLMC_VEC16)
}

// vec_expf on 8 lanes: vec16_expf's operations, p 2^n as the compiled loop builds 2^n (n + 127 shifted into the
// exponent; a NaN n converts to 0x80000000, whose shifted sum is 1.0f, the compiled loop's 2^0 for a NaN)
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 vec8_expf(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x); // (a NaN x stays, as in vec16_expf)
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
    __m256 n = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(12582912.0f));
    n = _mm256_sub_ps(n, _mm256_set1_ps(12582912.0f));
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.42860682030941723e-6f), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.98412698e-4f), r, _mm256_set1_ps(1.38888889e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.33333333e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.16666667e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.66666667e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// vec_tanhf on 8 lanes (vec16_tanhf's operations)
__attribute__((target("avx2,fma"), always_inline))
static inline __m256 vec8_tanhf(__m256 x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 e = vec8_expf(_mm256_mul_ps(_mm256_set1_ps(-2.0f), ax));
    __m256 t = _mm256_div_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), e), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
    return _mm256_or_ps(_mm256_andnot_ps(sign, t), _mm256_and_ps(sign, x));
}

// the lanes of a last, partial vector of n values (all 8 for n >= 8), as a mask for _mm256_maskload_ps and
// _mm256_maskstore_ps
__attribute__((target("avx2"), always_inline))
static inline __m256i vec8_first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// vec16_exp_sub on two vectors of 8: e (n) = vec8_expf(x - maxval) (e may be x), asking for one cache line of `ahead`
// (NULL: none) per 16 values; part[0] and part[1] receive lanes 0-7 and 8-15 of the 16 lanes' sums of the whole
// blocks of 16, each in order. The last n % 16 values are written, not summed (the callers add them one by one)
__attribute__((target("avx2,fma"), always_inline))
static inline void vec8_exp_sub(float* e, const float* x, int n, float maxval, const float* ahead, __m256 part[2]) {
    const __m256 vmax = _mm256_set1_ps(maxval);
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        if (ahead != NULL) { __builtin_prefetch(ahead + i, 0, 3); }
        __m256 e0 = vec8_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
        __m256 e1 = vec8_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vmax));
        _mm256_storeu_ps(e + i, e0);
        _mm256_storeu_ps(e + i + 8, e1);
        lo = _mm256_add_ps(lo, e0);
        hi = _mm256_add_ps(hi, e1);
    }
    if (i + 8 <= n) { // (a whole vector stored plainly: a masked store is slow on AMD's cores)
        _mm256_storeu_ps(e + i, vec8_expf(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax)));
        i += 8;
    }
    if (i < n) {
        __m256i k = vec8_first(n - i);
        _mm256_maskstore_ps(e + i, k, vec8_expf(_mm256_sub_ps(_mm256_maskload_ps(x + i, k), vmax)));
    }
    part[0] = lo;
    part[1] = hi;
}
#else
static inline int vec16_supported(void) { return 0; }
static inline int vec16_enabled(void) { return env_switch_on("LLMC_VEC16") && 0; }
static inline int vec8_supported(void) { return 0; }
static inline int vec8_enabled(void) { return env_switch_on("LLMC_VEC8") && 0; }
#endif

__attribute__((always_inline)) static inline float vec_tanhf(float x) {
    float e = vec_expf(-2.0f * fabsf(x));
    return copysignf((1.0f - e) / (1.0f + e), x);
}

__attribute__((always_inline)) static inline float vec_gelu_forward(float x) {
    float cube = GELU_CUBE_COEFF * x * x * x;
    return 0.5f * x * (1.0f + vec_tanhf(GELU_SCALING_FACTOR * (x + cube)));
}

__attribute__((always_inline)) static inline float vec_gelu_grad(float x) {
    float cube = GELU_CUBE_COEFF * x * x * x;
    float th = vec_tanhf(GELU_SCALING_FACTOR * (x + cube));
    float sech2 = 1.0f - th * th;
    float du_dx = GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBE_COEFF * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
}

// The sigmoid form: e = e^a, a = -2u, s = 1 / (1 + e); the GELU x s and its derivative s + x s (e s) 2u' (from 1 + tanh
// u = 2s and 1 - tanh^2 u = 4 s (1 - s), with 1 - s = e s: taken as 1 - s, its rounding near s = 1 cost the derivative
// 2.0e-6 where e s keeps it to 1.9e-7, against libm in double). a is capped at 80 so that s stays a normal float (e^80
// = 5.5e34): where it would not, the GELU is below 2e-34 in magnitude, and a subnormal s would slow every operation on
// it. The products that the compiled loops fuse (x + c x^3, 1 + 3c x^2 and the derivative's last add) are fused by the
// 16-lane forms; 1 + e (e a product p 2^n inside vec_expf) is exact either way.
__attribute__((always_inline)) static inline float vec_gelu_sigmoid_e(float x) {
    float cube = GELU_CUBE_COEFF * x * x * x;
    float a = GELU_SIGMOID_SCALE * (x + cube);
    a = a > GELU_SIGMOID_CAP ? GELU_SIGMOID_CAP : a;
    return vec_expf(a);
}

__attribute__((always_inline)) static inline float vec_gelu_forward_sigmoid(float x) {
    return x * (1.0f / (1.0f + vec_gelu_sigmoid_e(x)));
}

__attribute__((always_inline)) static inline float vec_gelu_grad_sigmoid(float x) {
    float e = vec_gelu_sigmoid_e(x);
    float s = 1.0f / (1.0f + e);
    float y = x * s;
    float du2 = GELU_SIGMOID_SLOPE * (1.0f + 3.0f * GELU_CUBE_COEFF * x * x); // 2u'
    return s + y * (e * s) * du2;
}

// LLMC_GELU_SIGMOID=0: GPT-2's GELU in the tanh form, as before 2026-12-06; the default (1) the sigmoid form, other
// bits (within 1e-6 of each other): on the AMX Xeon the forward 1.4x and the backward's output and derivative 1.28x
// faster in cache (doc/cpu-speed.md); kept selectable until timed on the Zen 4 and Zen 5. Read once, before any
// parallel region; gelu_sigmoid_use sets it (tests).
static int gelu_sigmoid_state = -1;
static inline int gelu_sigmoid(void) {
    if (gelu_sigmoid_state < 0) { gelu_sigmoid_state = env_switch_on("LLMC_GELU_SIGMOID"); }
    return gelu_sigmoid_state;
}
static inline void gelu_sigmoid_use(int on) { gelu_sigmoid_state = on; }

__attribute__((always_inline)) static inline float vec_gelu_grad_as(float x, int sigmoid) {
    return sigmoid ? vec_gelu_grad_sigmoid(x) : vec_gelu_grad(x);
}

// (a loop for each b: with the choice inside one loop GCC kept the 16 sums scalar whenever b was not NULL, 590 ns
// for a row of 768 on a Zen 4 core where the vectorised loop takes 66: RMSNorm's backward; the same operations, so
// the same bits)
static inline float vec_dot3(const float* a, const float* b, const float* c, int n) {
    float part[16] = {0.0f};
    int i = 0;
    if (b != NULL) {
        for (; i + 16 <= n; i += 16) {
            for (int j = 0; j < 16; j++) { part[j] += a[i + j] * b[i + j] * c[i + j]; }
        }
    } else {
        for (; i + 16 <= n; i += 16) {
            for (int j = 0; j < 16; j++) { part[j] += a[i + j] * 1.0f * c[i + j]; }
        }
    }
    float sum = 0.0f;
    for (; i < n; i++) { sum += a[i] * (b != NULL ? b[i] : 1.0f) * c[i]; }
    for (int j = 0; j < 16; j++) { sum += part[j]; }
    return sum;
}

#endif // LLMC_VECMATH_H
