/*
llmc/cpu/gelu_cpu.h: GELU (tanh approximation) on the CPU, elementwise, fp32 with OpenMP; the CPU side of
llmc/cuda/gelu.cuh. GPT-2's MLP activation.

    gelu_forward(out, inp, N)                     out = gelu(inp)
    bias_gelu_forward(out, pre, bias, B, T, OC)   pre += bias (kept for the backward), out = gelu(pre)
    gelu_backward(dinp, inp, dout, N)             dinp += gelu'(inp) * dout
    gelu_backward_into(dinp, inp, dout, N, acc)   the same, added (acc 1) or written (acc 0: dinp's old contents
                                                  never read)
    bias_gelu_forward_bf16, gelu_forward_bf16, gelu_backward_bf16_input   the same with the GELU's input stored in
                                                  bf16 alone (GPT-2's -p bf16 activations)
    gelu_backward_bias(dinp, dbias, inp, dout, BT, OC, beta)   gelu_backward_into (written) and, in the same pass,
                                                  the fc layer's bias gradient dbias = beta * dbias + the sum of dinp's
                                                  rows (by chunks of rows; LLMC_GELU_BIAS=columns:
                                                  matmul_backward_bias's bits)
    gelu_backward_bias_bf16_input(dinp, dbias, inp16, dout, BT, OC, beta)   the same from the bf16 input
    gelu_recompute_backward_bias_bf16(out16, dinp, dbias, inp16, dout, BT, OC, beta)   gelu_forward_bf16 (out16)
                                                  and gelu_backward_bias_bf16_input in one pass, one tanh a value
    gelu_recompute_backward_bias(out, dinp, dbias, inp, dout, BT, OC, beta)   the fp32 form: gelu_forward (out)
                                                  and gelu_backward_bias in one pass, one tanh a value, their bits
                                                  (LLMC_GELU_RECOMPUTE_FUSED=0, or a bf16 copy of out or dinp: the
                                                  two calls)

(N) = (B,T,4C). Every function computes the GELU in the form llmc/cpu/vecmath.h's gelu_sigmoid() names: x s with
s = 1 / (1 + e^-2u) (the default), or 0.5 x (1 + tanh u) (LLMC_GELU_SIGMOID=0, as before 2026-12-06); the same bits
in every path of one form (a loop per form, the form a constant in each). The plain forward and backward run
llmc/cpu/activation_cpu.h's driver. On a CPU with AVX-512 the -p
bf16 forward (bias_gelu_forward_bf16) runs a hand-written AVX-512 loop on llmc/cpu/vecmath.h's vec16_gelu_forward (the
same bits; LLMC_VEC16=0 keeps the compiled loop): 3.3 -> 3.1 ms a d12 layer at B=4 T=1024 on a Zen 5. So does the
backward's recompute (gelu_recompute_backward_row16, the same bits): 7.97 -> 6.75 ms a d12 layer on a Zen 5
(2026-12-02, medians of 8 rounds; a first try on 2026-11-29 saw nothing, 4.7-4.9 ms either way, and was not kept). A
function whose output a GEMM reads writes that output's bf16 copy too when it has one (-p bf16 on oneDNN:
llmc/cpu/matmul.h's matmul_bf16_shadow, bf16_copy_row).
*/
#ifndef LLMC_GELU_CPU_H
#define LLMC_GELU_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "activation_cpu.h"
#include "matmul.h"
#include "phase_time.h"
#include "vecmath.h"

// GELU with llmc/cpu/vecmath.h's branch-free tanh, so these loops vectorise (glibc's tanhf does not); the plain
// forward and backward are llmc/cpu/activation_cpu.h's, over (N) = (B,T,4C)
static void gelu_forward(float* out, const float* inp, size_t N) { activation_forward(ACTIVATION_GELU, out, inp, N); }

// the fc layer's bias add fused with the GELU that follows: pre (B,T,OC) holds the matmul
// without its bias on entry and with it on return (kept for the backward); out = gelu(pre)
static void bias_gelu_forward(float* out, float* pre, const float* bias, int B, int T, int OC) {
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)B * T * OC);
    int sigmoid = gelu_sigmoid();
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < B * T; r++) {
        float* x = pre + (size_t)r * OC;
        float* y = out + (size_t)r * OC;
        if (sigmoid) { // (a loop per form, so that each vectorises)
            for (int o = 0; o < OC; o++) {
                x[o] += bias[o];
                y[o] = vec_gelu_forward_sigmoid(x[o]);
            }
        } else {
            for (int o = 0; o < OC; o++) {
                x[o] += bias[o];
                y[o] = vec_gelu_forward(x[o]);
            }
        }
        if (out16 != NULL) { bf16_copy_row(out16 + (size_t)r * OC, y, (size_t)OC); }
    }
    double N = (double)B * T * OC;
    // pre read and written back, out written, and out's bf16 copy when it has one
    phase_end(PHASE_ELEMENTWISE, t_phase, (out16 != NULL ? 14.0 : 12.0) * N, 9.0 * N);
}

// dinp (N) = the gradient of gelu_forward for dout (N), added to dinp when accumulate, else written
static void gelu_backward_into(float* dinp, const float* inp, const float* dout, size_t N, int accumulate) {
    activation_backward_into(ACTIVATION_GELU, dinp, inp, dout, N, accumulate);
}

static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    activation_backward_into(ACTIVATION_GELU, dinp, inp, dout, N, 1);
}

// GPT-2's bf16 activations (llmc/cpu/matmul.h's matmul_forward_bf16_input): the fc layer's bias add and GELU with the
// GELU's input kept in bf16. pre (B,T,OC)
// holds the GEMM's output without its bias; pre16 (B,T,OC) = pre + bias rounded to bf16 (kept for the backward), out16
// (B,T,OC) = gelu of that rounded input, rounded (what the projection's GEMM reads). The forward and the backward
// both start from pre16, so the backward's recompute (gelu_forward_bf16) gives out16's bits again.
#if MATMUL_X86
// one row of bias_gelu_forward_bf16 in AVX-512 (vec16_enabled): the same bits, 32 values a step (fp-contract off:
// vec16_gelu_forward_as fuses what the compiled loop fuses, and nothing else); sigmoid: the GELU's form (a constant
// in each of bias_gelu_row16's two calls)
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline void bias_gelu_row16_as(uint16_t* y16, uint16_t* x16, const float* x, const float* bias, int n,
                                      int sigmoid) {
    int o = 0;
    for (; o + 32 <= n; o += 32) {
        __m256i h0 = mm16_round_bf16(_mm512_add_ps(_mm512_loadu_ps(x + o), _mm512_loadu_ps(bias + o)));
        __m256i h1 = mm16_round_bf16(_mm512_add_ps(_mm512_loadu_ps(x + o + 16), _mm512_loadu_ps(bias + o + 16)));
        _mm256_storeu_si256((__m256i*)(void*)(x16 + o), h0);
        _mm256_storeu_si256((__m256i*)(void*)(x16 + o + 16), h1);
        __m512 g0 = vec16_gelu_forward_as(mm16_bf16_to_float(h0), sigmoid);
        __m512 g1 = vec16_gelu_forward_as(mm16_bf16_to_float(h1), sigmoid);
        _mm512_storeu_si512((void*)(y16 + o), mm32_round_bf16(g0, g1));
    }
    for (; o < n; o += 16) {
        int m = n - o < 16 ? n - o : 16;
        __mmask16 k = m == 16 ? (__mmask16)0xffff : vec16_first(m);
        __m512 pre = _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + o), _mm512_maskz_loadu_ps(k, bias + o));
        mm16_store_bf16(x16 + o, pre, m);
        mm16_store_bf16(y16 + o, vec16_gelu_forward_as(mm16_bf16_to_float(mm16_round_bf16(pre)), sigmoid), m);
    }
}

__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void bias_gelu_row16(uint16_t* y16, uint16_t* x16, const float* x, const float* bias, int n, int sigmoid) {
    if (sigmoid) {
        bias_gelu_row16_as(y16, x16, x, bias, n, 1);
    } else {
        bias_gelu_row16_as(y16, x16, x, bias, n, 0);
    }
}
#endif

static void bias_gelu_forward_bf16(uint16_t* out16, uint16_t* pre16, const float* pre, const float* bias, int B, int T,
                                   int OC) {
    double t_phase = phase_begin();
    int vec16 = vec16_enabled(), sigmoid = gelu_sigmoid();
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < B * T; r++) {
        const float* x = pre + (size_t)r * OC;
        uint16_t* x16 = pre16 + (size_t)r * OC;
        uint16_t* y16 = out16 + (size_t)r * OC;
#if MATMUL_X86
        if (vec16) {
            bias_gelu_row16(y16, x16, x, bias, OC, sigmoid);
            continue;
        }
#endif
        if (sigmoid) {
            for (int o = 0; o < OC; o++) {
                x16[o] = matmul_bf16_round_value(x[o] + bias[o]);
                y16[o] = matmul_bf16_round_value(vec_gelu_forward_sigmoid(mm_bf16_to_float(x16[o])));
            }
        } else {
            for (int o = 0; o < OC; o++) {
                x16[o] = matmul_bf16_round_value(x[o] + bias[o]);
                y16[o] = matmul_bf16_round_value(vec_gelu_forward(mm_bf16_to_float(x16[o])));
            }
        }
    }
    double N = (double)B * T * OC;
    phase_end(PHASE_ELEMENTWISE, t_phase, 8.0 * N, 9.0 * N); // pre read, pre16 and out16 written
}

// out16 (N) = gelu of the bf16 input inp16 (N), rounded: bias_gelu_forward_bf16's out16 again (the backward's
// recompute)
static void gelu_forward_bf16(uint16_t* out16, const uint16_t* inp16, size_t N) {
    double t_phase = phase_begin();
    if (gelu_sigmoid()) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            out16[i] = matmul_bf16_round_value(vec_gelu_forward_sigmoid(mm_bf16_to_float(inp16[i])));
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            out16[i] = matmul_bf16_round_value(vec_gelu_forward(mm_bf16_to_float(inp16[i])));
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * N, 8.0 * N);
}

// dinp (N) = the gradient of the GELU at the bf16 input inp16 (N) for dout (N), written (never added to), and dinp's
// bf16 copy when a GEMM reads it from one
static void gelu_backward_bf16_input(float* dinp, const uint16_t* inp16, const float* dout, size_t N) {
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    if (gelu_sigmoid()) {
        ACTIVATION_STORE(dinp, dinp16, N, 0, vec_gelu_grad_sigmoid(mm_bf16_to_float(inp16[i])) * dout[i]);
    } else {
        ACTIVATION_STORE(dinp, dinp16, N, 0, vec_gelu_grad(mm_bf16_to_float(inp16[i])) * dout[i]);
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, (dinp16 != NULL ? 12.0 : 10.0) * N, 14.0 * N);
}

// the GELU's arithmetic at x (one exponential): its output y and its derivative grad, as vec_gelu_forward(_sigmoid)
// and vec_gelu_grad_as (llmc/cpu/vecmath.h) compute them in the form sigmoid names (a constant where it is used), so
// their bits
#define GELU_BOTH(x, y, grad, sigmoid) \
    float grad; \
    if (sigmoid) { \
        float e_ = vec_gelu_sigmoid_e(x); \
        float s_ = 1.0f / (1.0f + e_); \
        y = x * s_; \
        float du2_ = GELU_SIGMOID_SLOPE * (1.0f + 3.0f * GELU_CUBE_COEFF * x * x); \
        grad = s_ + y * (e_ * s_) * du2_; \
    } else { \
        float cube_ = GELU_CUBE_COEFF * x * x * x; \
        float th_ = vec_tanhf(GELU_SCALING_FACTOR * (x + cube_)); \
        y = 0.5f * x * (1.0f + th_); \
        float sech2_ = 1.0f - th_ * th_; \
        float du_dx_ = GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBE_COEFF * x * x); \
        grad = 0.5f * (1.0f + th_) + 0.5f * x * sech2_ * du_dx_; \
    }

#if MATMUL_X86
// gelu_recompute_backward_row with the bf16 copies alone (dinp NULL) on a CPU with AVX512-BF16's conversion
// (mm_bf16_cvt_on): the two results as floats, 256 at a time, then each such row rounded by the conversion; the same
// bits. (A function of its own: grown by this loop, the caller's loops stopped inlining vec_expf and ran 4x slower)
// (sigmoid: the GELU's form, a constant in each of the two calls below)
__attribute__((always_inline))
static inline void gelu_recompute_backward_row_cvt_as(uint16_t* out16, uint16_t* dinp16, float* sum,
                                                      const uint16_t* inp16, const float* dout, int n, int sigmoid) {
    float y[256], g[256];
    for (int j0 = 0; j0 < n; j0 += 256) {
        int m = n - j0 < 256 ? n - j0 : 256;
        for (int j = 0; j < m; j++) {
            float x = mm_bf16_to_float(inp16[j0 + j]);
            GELU_BOTH(x, y[j], grad, sigmoid);
            float v = grad * dout[j0 + j];
            g[j] = v;
            sum[j0 + j] += v;
        }
        mm_round_bf16_row(out16 + j0, y, (size_t)m);
        mm_round_bf16_row(dinp16 + j0, g, (size_t)m);
    }
}

__attribute__((noinline))
static void gelu_recompute_backward_row_cvt(uint16_t* out16, uint16_t* dinp16, float* sum, const uint16_t* inp16,
                                            const float* dout, int n, int sigmoid) {
    if (sigmoid) {
        gelu_recompute_backward_row_cvt_as(out16, dinp16, sum, inp16, dout, n, 1);
    } else {
        gelu_recompute_backward_row_cvt_as(out16, dinp16, sum, inp16, dout, n, 0);
    }
}
#endif

#if MATMUL_X86
// GELU_BOTH on 16 lanes, each product fused where the compiled macro's is (fp-contract off in the caller): y = the
// GELU's output, v = gelu'(x) dout, in the form sigmoid names
__attribute__((target("avx512f"), always_inline))
static inline void vec16_gelu_both(__m512 x, __m512 dout, __m512* y, __m512* v, int sigmoid) {
    const __m512 half = _mm512_set1_ps(0.5f), one = _mm512_set1_ps(1.0f), scale = _mm512_set1_ps(GELU_SCALING_FACTOR);
    if (sigmoid) {
        __m512 e = vec16_gelu_sigmoid_e(x), s = vec16_gelu_sigmoid_s(e);
        *y = _mm512_mul_ps(x, s);
        __m512 c3x = _mm512_mul_ps(_mm512_set1_ps(3.0f * GELU_CUBE_COEFF), x);
        __m512 du2 = _mm512_mul_ps(_mm512_set1_ps(GELU_SIGMOID_SLOPE), _mm512_fmadd_ps(c3x, x, one));
        *v = _mm512_mul_ps(_mm512_fmadd_ps(_mm512_mul_ps(*y, _mm512_mul_ps(e, s)), du2, s), dout);
        return;
    }
    __m512 th = vec16_gelu_tanh(x);
    __m512 one_th = _mm512_add_ps(one, th);
    __m512 half_x = _mm512_mul_ps(half, x);
    *y = _mm512_mul_ps(half_x, one_th);
    __m512 sech2 = _mm512_fnmadd_ps(th, th, one);
    __m512 c3x = _mm512_mul_ps(_mm512_set1_ps(3.0f * GELU_CUBE_COEFF), x);
    __m512 du_dx = _mm512_mul_ps(scale, _mm512_fmadd_ps(c3x, x, one));
    __m512 grad = _mm512_fmadd_ps(half, one_th, _mm512_mul_ps(_mm512_mul_ps(half_x, sech2), du_dx));
    *v = _mm512_mul_ps(grad, dout);
}

// gelu_recompute_backward_row in AVX-512 (vec16_enabled): the same bits, 32 values a step (dev/test/test_elementwise
// checks all 2^16 bf16 inputs against the compiled loops)
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline void gelu_recompute_backward_row16_as(uint16_t* out16, float* dinp, uint16_t* dinp16, float* sum,
                                                    const uint16_t* inp16, const float* dout, int n, int sigmoid) {
    int j = 0;
    for (; j + 32 <= n; j += 32) {
        __m512 y[2], v[2];
        for (int h = 0; h < 2; h++) {
            int at = j + 16 * h;
            __m512 x = mm16_bf16_to_float(_mm256_loadu_si256((const __m256i*)(const void*)(inp16 + at)));
            vec16_gelu_both(x, _mm512_loadu_ps(dout + at), &y[h], &v[h], sigmoid);
            _mm512_storeu_ps(sum + at, _mm512_add_ps(_mm512_loadu_ps(sum + at), v[h]));
            if (dinp != NULL) { _mm512_storeu_ps(dinp + at, v[h]); }
        }
        _mm512_storeu_si512((void*)(out16 + j), mm32_round_bf16(y[0], y[1]));
        if (dinp16 != NULL) { _mm512_storeu_si512((void*)(dinp16 + j), mm32_round_bf16(v[0], v[1])); }
    }
    for (; j < n; j += 16) {
        int m = n - j < 16 ? n - j : 16;
        __mmask16 k = m == 16 ? (__mmask16)0xffff : vec16_first(m);
        __m512 y, v;
        vec16_gelu_both(mm16_load_bf16(inp16 + j, m), _mm512_maskz_loadu_ps(k, dout + j), &y, &v, sigmoid);
        _mm512_mask_storeu_ps(sum + j, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, sum + j), v));
        if (dinp != NULL) { _mm512_mask_storeu_ps(dinp + j, k, v); }
        mm16_store_bf16(out16 + j, y, m);
        if (dinp16 != NULL) { mm16_store_bf16(dinp16 + j, v, m); }
    }
}

__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void gelu_recompute_backward_row16(uint16_t* out16, float* dinp, uint16_t* dinp16, float* sum,
                                          const uint16_t* inp16, const float* dout, int n, int sigmoid) {
    if (sigmoid) {
        gelu_recompute_backward_row16_as(out16, dinp, dinp16, sum, inp16, dout, n, 1);
    } else {
        gelu_recompute_backward_row16_as(out16, dinp, dinp16, sum, inp16, dout, n, 0);
    }
}
#endif

// one row's slice [0, n) of gelu_recompute_backward_bias_bf16: out16 = gelu(x) rounded, v = gelu'(x) dout into dinp
// (NULL: none) and its bf16 copy dinp16 (NULL: none), sum += v; x from inp16. The tanh once: the arithmetic of
// vec_gelu_forward and vec_gelu_grad (llmc/cpu/vecmath.h) on the one value, so their bits. vec16: the AVX-512 loop
// (vec16_enabled, asked once by the caller). sigmoid: the GELU's form (a constant here: gelu_backward_bias_row's).
static inline void gelu_recompute_backward_row(uint16_t* out16, float* dinp, uint16_t* dinp16, float* sum,
                                               const uint16_t* inp16, const float* dout, int n, int vec16,
                                               int sigmoid) {
#if MATMUL_X86
    if (vec16) {
        gelu_recompute_backward_row16(out16, dinp, dinp16, sum, inp16, dout, n, sigmoid);
        return;
    }
    if (dinp == NULL && mm_bf16_cvt_on()) {
        gelu_recompute_backward_row_cvt(out16, dinp16, sum, inp16, dout, n, sigmoid);
        return;
    }
#endif
    if (dinp == NULL) {
        for (int j = 0; j < n; j++) {
            float x = mm_bf16_to_float(inp16[j]);
            float y;
            GELU_BOTH(x, y, grad, sigmoid);
            out16[j] = matmul_bf16_round_value(y);
            float v = grad * dout[j];
            dinp16[j] = matmul_bf16_round_value(v);
            sum[j] += v;
        }
    } else if (dinp16 != NULL) {
        for (int j = 0; j < n; j++) {
            float x = mm_bf16_to_float(inp16[j]);
            float y;
            GELU_BOTH(x, y, grad, sigmoid);
            out16[j] = matmul_bf16_round_value(y);
            float v = grad * dout[j];
            dinp[j] = v;
            dinp16[j] = matmul_bf16_round_value(v);
            sum[j] += v;
        }
    } else {
        for (int j = 0; j < n; j++) {
            float x = mm_bf16_to_float(inp16[j]);
            float y;
            GELU_BOTH(x, y, grad, sigmoid);
            out16[j] = matmul_bf16_round_value(y);
            float v = grad * dout[j];
            dinp[j] = v;
            sum[j] += v;
        }
    }
}

// one row's slice [0, n) of the GELU backward with the bias gradient: dinp = gelu'(x) dout (and its bf16 copy when
// dinp16 is not NULL; dinp NULL: the copy alone), sum += dinp; x from inp16 (bf16) or else inp (fp32); with out16
// (x from inp16) the GELU's output again too (gelu_recompute_backward_row); with out (x from inp, dinp in fp32 alone)
// the GELU's output again in fp32. A loop per case, so that each vectorises.
// A function of its own with everything it calls inlined (flatten): inlined into the two passes below, GCC called
// vec_gelu_grad out of line, a scalar call a value, and the fp32 step's element-wise phase ran 3.5x slower.
// sigmoid: the GELU's form, a constant in each of gelu_backward_bias_row's two calls.
__attribute__((always_inline))
static inline void gelu_backward_bias_row_as(float* dinp, uint16_t* dinp16, uint16_t* out16, float* out, float* sum,
                                             const uint16_t* inp16, const float* inp, const float* dout, int n,
                                             int vec16, int sigmoid) {
    if (out16 != NULL) { // (the GELU's output again too)
        gelu_recompute_backward_row(out16, dinp, dinp16, sum, inp16, dout, n, vec16, sigmoid);
        return;
    }
    if (out != NULL) { // (the GELU's output again, fp32; dout may be dinp: each value read before it is written)
        for (int j = 0; j < n; j++) {
            float x = inp[j];
            float y;
            GELU_BOTH(x, y, grad, sigmoid);
            out[j] = y;
            float v = grad * dout[j];
            dinp[j] = v;
            sum[j] += v;
        }
        return;
    }
    if (dinp == NULL && inp16 != NULL) {
        for (int j = 0; j < n; j++) {
            float v = vec_gelu_grad_as(mm_bf16_to_float(inp16[j]), sigmoid) * dout[j];
            dinp16[j] = matmul_bf16_round_value(v);
            sum[j] += v;
        }
    } else if (dinp == NULL) {
        for (int j = 0; j < n; j++) {
            float v = vec_gelu_grad_as(inp[j], sigmoid) * dout[j];
            dinp16[j] = matmul_bf16_round_value(v);
            sum[j] += v;
        }
    } else if (inp16 != NULL && dinp16 != NULL) {
        for (int j = 0; j < n; j++) {
            float v = vec_gelu_grad_as(mm_bf16_to_float(inp16[j]), sigmoid) * dout[j];
            dinp[j] = v;
            dinp16[j] = matmul_bf16_round_value(v);
            sum[j] += v;
        }
    } else if (inp16 != NULL) {
        for (int j = 0; j < n; j++) {
            float v = vec_gelu_grad_as(mm_bf16_to_float(inp16[j]), sigmoid) * dout[j];
            dinp[j] = v;
            sum[j] += v;
        }
    } else if (dinp16 != NULL) {
        for (int j = 0; j < n; j++) {
            float v = vec_gelu_grad_as(inp[j], sigmoid) * dout[j];
            dinp[j] = v;
            dinp16[j] = matmul_bf16_round_value(v);
            sum[j] += v;
        }
    } else {
        for (int j = 0; j < n; j++) {
            float v = vec_gelu_grad_as(inp[j], sigmoid) * dout[j];
            dinp[j] = v;
            sum[j] += v;
        }
    }
}

__attribute__((noinline, flatten))
static void gelu_backward_bias_row(float* dinp, uint16_t* dinp16, uint16_t* out16, float* out, float* sum,
                                   const uint16_t* inp16, const float* inp, const float* dout, int n, int vec16,
                                   int sigmoid) {
    if (sigmoid) {
        gelu_backward_bias_row_as(dinp, dinp16, out16, out, sum, inp16, inp, dout, n, vec16, 1);
    } else {
        gelu_backward_bias_row_as(dinp, dinp16, out16, out, sum, inp16, inp, dout, n, vec16, 0);
    }
}

#undef GELU_BOTH

// The order of the fused pass's bias gradient: LLMC_GELU_BIAS=chunks (the default) splits the rows over the threads
// and sums them by chunks of SUM_CHUNK_ROWS rows (llmc/cpu/matmul.h's partial_sums_add: other bits than one running
// sum, the same for any thread count); columns: each thread a slice of columns down every row, matmul_backward_bias's
// bits. Each thread streaming whole rows instead of half of every row (6 KB pieces 12 KB apart, where the hardware
// prefetcher stops at each page) took GPT-2 d12's pass (B=4 T=1024, -p bf16) from 10.1 to 7.0 ms on a Zen 4, the
// step's element-wise phase from 204-215 to 175-180 ms (doc/cpu-speed.md). Read once; gelu_bias_sum_use sets it
// (tests).
typedef enum { GELU_BIAS_COLUMNS, GELU_BIAS_CHUNKS } GeluBiasSum;
static int gelu_bias_sum_state = -1;
static inline GeluBiasSum gelu_bias_sum(void) {
    static const char* const names[] = {"columns", "chunks"}; // (GeluBiasSum's order)
    if (gelu_bias_sum_state < 0) { gelu_bias_sum_state = env_choice("LLMC_GELU_BIAS", names, 2, GELU_BIAS_CHUNKS); }
    return (GeluBiasSum)gelu_bias_sum_state;
}
static inline void gelu_bias_sum_use(GeluBiasSum order) { gelu_bias_sum_state = (int)order; }

// gelu_backward_bias_any's pass, each thread a slice of columns down every row (LLMC_GELU_BIAS=columns)
static void gelu_backward_bias_columns(float* dinp32, uint16_t* dinp16, float* dbias, uint16_t* out16, float* out,
                                       const uint16_t* inp16, const float* inp, const float* dout, int BT, int OC,
                                       float beta, int vec16, int sigmoid) {
    #pragma omp parallel
    {
        int nt, t;
        parallel_team(&nt, &t);
        int o0, o1;
        bias_grad_column_slice(OC, nt, t, &o0, &o1);
        float sum[BIAS_GRAD_BLOCK];
        for (int b0 = o0; b0 < o1; b0 += BIAS_GRAD_BLOCK) {
            int n = o1 - b0 < BIAS_GRAD_BLOCK ? o1 - b0 : BIAS_GRAD_BLOCK;
            for (int j = 0; j < n; j++) { sum[j] = beta == 0.0f ? 0.0f : dbias[b0 + j]; }
            for (int r = 0; r < BT; r++) {
                size_t at = (size_t)r * OC + b0;
                gelu_backward_bias_row(dinp32 != NULL ? dinp32 + at : NULL, dinp16 != NULL ? dinp16 + at : NULL,
                                       out16 != NULL ? out16 + at : NULL, out != NULL ? out + at : NULL, sum,
                                       inp16 != NULL ? inp16 + at : NULL, inp != NULL ? inp + at : NULL, dout + at, n,
                                       vec16, sigmoid);
            }
            for (int j = 0; j < n; j++) { dbias[b0 + j] = sum[j]; }
        }
    }
}

// gelu_backward_bias_any's pass, the rows split over threads by chunks of SUM_CHUNK_ROWS, each chunk's bias sum a
// partial one, then dbias = beta * dbias + the partial sums in chunk order (LLMC_GELU_BIAS=chunks)
static void gelu_backward_bias_chunks(float* dinp32, uint16_t* dinp16, float* dbias, uint16_t* out16, float* out,
                                      const uint16_t* inp16, const float* inp, const float* dout, int BT, int OC,
                                      float beta, int vec16, int sigmoid) {
    int chunks = sum_chunks(BT);
    float* partial = (float*)mallocCheck((size_t)chunks * OC * sizeof(float)); // (chunks, OC)
    #pragma omp parallel for schedule(static)
    for (int k = 0; k < chunks; k++) {
        float* sum = partial + (size_t)k * OC;
        memset(sum, 0, (size_t)OC * sizeof(float));
        int r1 = (k + 1) * SUM_CHUNK_ROWS < BT ? (k + 1) * SUM_CHUNK_ROWS : BT;
        for (int r = k * SUM_CHUNK_ROWS; r < r1; r++) {
            size_t at = (size_t)r * OC;
            gelu_backward_bias_row(dinp32 != NULL ? dinp32 + at : NULL, dinp16 != NULL ? dinp16 + at : NULL,
                                   out16 != NULL ? out16 + at : NULL, out != NULL ? out + at : NULL, sum,
                                   inp16 != NULL ? inp16 + at : NULL, inp != NULL ? inp + at : NULL, dout + at, OC,
                                   vec16, sigmoid);
        }
    }
    if (beta == 0.0f) { memset(dbias, 0, (size_t)OC * sizeof(float)); }
    partial_sums_add(dbias, partial, chunks, (size_t)OC, OC);
    free(partial);
}

// LLMC_GELU_RECOMPUTE_FUSED=0: GPT-2's fp32 backward recomputes the GELU's output in a pass of its own before the
// GELU's backward (gelu_forward, then gelu_backward_bias), as before 2026-12-04; the default (1) in the backward's pass
// (gelu_recompute_backward_bias). The same bits; kept selectable until the fused pass is timed beyond the Zen 3. Read
// once.
static int gelu_recompute_fused(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_GELU_RECOMPUTE_FUSED"); }
    return on;
}

// the GELU's backward and the fc layer's bias gradient in one pass (the bias gradient is the sum of the rows of
// exactly what the GELU's backward writes): dinp (BT,OC) = gelu'(x) * dout, written, with its bf16 copy when a GEMM
// reads it from one; dbias (OC) = beta * dbias + the sum of dinp's rows (beta 0: its old contents never read), in
// the order LLMC_GELU_BIAS chooses (above); the same for any thread count either way. x is inp16 (bf16, GPT-2's -p
// bf16 activations) or else inp (fp32). out16 (NULL: none) receives the GELU's output again (from inp16), out (NULL:
// none) the same in fp32 (from inp; in the same pass where neither out nor dinp has a bf16 copy, else in its own
// pass first, as with LLMC_GELU_RECOMPUTE_FUSED=0).
// LLMC_ELEMENTWISE_FUSED=0: the passes (the bias gradient matmul_backward_bias's, as LLMC_GELU_BIAS=columns).
static void gelu_backward_bias_any(float* dinp, float* dbias, uint16_t* out16, float* out, const uint16_t* inp16,
                                   const float* inp, const float* dout, int BT, int OC, float beta) {
    size_t N = (size_t)BT * OC;
    if (out != NULL && (!gelu_recompute_fused() || !elementwise_fused() || dbias == NULL ||
                        matmul_bf16_shadow(out, N) != NULL || matmul_bf16_shadow(dinp, N) != NULL)) {
        gelu_forward(out, inp, N);
        out = NULL;
    }
    if (!elementwise_fused() || dbias == NULL) {
        if (out16 != NULL) { gelu_forward_bf16(out16, inp16, N); }
        if (inp16 != NULL) {
            gelu_backward_bf16_input(dinp, inp16, dout, N);
        } else {
            gelu_backward_into(dinp, inp, dout, N, 0);
        }
        matmul_backward_bias(dbias, dinp, BT, OC, beta);
        return;
    }
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    float* dinp32 = matmul_bf16_fp32_kept(dinp, N) ? dinp : NULL; // (NULL: the bf16 copy alone)
    int vec16 = out16 != NULL && vec16_enabled(), sigmoid = gelu_sigmoid();
    if (gelu_bias_sum() == GELU_BIAS_CHUNKS) {
        gelu_backward_bias_chunks(dinp32, dinp16, dbias, out16, out, inp16, inp, dout, BT, OC, beta, vec16, sigmoid);
    } else {
        gelu_backward_bias_columns(dinp32, dinp16, dbias, out16, out, inp16, inp, dout, BT, OC, beta, vec16, sigmoid);
    }
    matmul_bf16_alone_written(dinp, N);
    // x (bf16 or fp32) and dout read, dinp written (fp32, its copy when it has one, or the copy alone), and the GELU's
    // output again; dbias's OC floats left out
    double dinp_bytes = (dinp32 != NULL ? 4.0 : 0.0) + (dinp16 != NULL ? 2.0 : 0.0) + (out16 != NULL ? 2.0 : 0.0) +
                        (out != NULL ? 4.0 : 0.0);
    phase_end(PHASE_ELEMENTWISE, t_phase, ((inp16 != NULL ? 2.0 : 4.0) + 4.0 + dinp_bytes) * N,
              (out16 != NULL || out != NULL ? 23.0 : 15.0) * N);
}

static void gelu_backward_bias(float* dinp, float* dbias, const float* inp, const float* dout, int BT, int OC,
                               float beta) {
    gelu_backward_bias_any(dinp, dbias, NULL, NULL, NULL, inp, dout, BT, OC, beta);
}

static void gelu_backward_bias_bf16_input(float* dinp, float* dbias, const uint16_t* inp16, const float* dout, int BT,
                                          int OC, float beta) {
    gelu_backward_bias_any(dinp, dbias, NULL, NULL, inp16, NULL, dout, BT, OC, beta);
}

// GPT-2's -p bf16 backward through its GELU, in one pass with one tanh a value: out16 (BT,OC) = gelu of the bf16 input
// inp16, rounded (gelu_forward_bf16's output again, which the projection's weight GEMM reads next), and dinp, dbias as
// gelu_backward_bias_bf16_input writes them; the bits of those two calls, which evaluate the tanh twice.
// LLMC_ELEMENTWISE_FUSED=0: those two calls.
static void gelu_recompute_backward_bias_bf16(uint16_t* out16, float* dinp, float* dbias, const uint16_t* inp16,
                                              const float* dout, int BT, int OC, float beta) {
    gelu_backward_bias_any(dinp, dbias, out16, NULL, inp16, NULL, dout, BT, OC, beta);
}

// GPT-2's fp32 backward through its GELU, in one pass with one tanh a value: out (BT,OC) = gelu(inp) again (what the
// projection's weight GEMM reads next: the forward's output is not kept) and dinp, dbias as gelu_backward_bias writes
// them (dout may be dinp: the GELU's backward in place); the bits of gelu_forward then gelu_backward_bias, which read
// inp twice and evaluate the tanh twice, and those two calls where out or dinp has a bf16 copy or with
// LLMC_GELU_RECOMPUTE_FUSED=0 or LLMC_ELEMENTWISE_FUSED=0.
static void gelu_recompute_backward_bias(float* out, float* dinp, float* dbias, const float* inp, const float* dout,
                                         int BT, int OC, float beta) {
    gelu_backward_bias_any(dinp, dbias, NULL, out, NULL, inp, dout, BT, OC, beta);
}

#endif // LLMC_GELU_CPU_H
