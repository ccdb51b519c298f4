/*
llmc/cpu/swiglu_cpu.h: SwiGLU on the CPU, elementwise, fp32 with OpenMP; the CPU side of llmc/cuda/swiglu.cuh.
Llama 3's MLP activation.

    swiglu_forward(out, gate, up, N)                    out = silu(gate) * up, silu(g) = g * sigmoid(g)
    swiglu_backward(dgate, dup, dout, gate, up, N)      dgate += dout * up * sig * (1 + g (1 - sig)),
                                                        dup += dout * silu(gate)
    swiglu_backward_into(..., N, acc)                   the same, added (acc 1) or written (acc 0)
    swiglu_recompute_backward(out, dgate, dup, dout, gate, up, N)   swiglu_forward (out) and swiglu_backward_into
                                                        (written) in one pass, one e^-g a value
    swiglu_forward_bf16(out16, gate16, up16, gate, up, N)   -p bf16's layout (llmc/cpu/decoder_cpu.h): gate and up
                                                        rounded into gate16, up16 (what the backward reads) and out16
                                                        = the SwiGLU of the rounded values, rounded
    swiglu_recompute_backward_bf16(out16, dgate, dup, dout, gate16, up16, N)   swiglu_recompute_backward on them

(N) = (B,T,FFN). A function whose output a GEMM reads writes that output's bf16 copy too when it has one (-p bf16
on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow, bf16_copy_row).
*/
#ifndef LLMC_SWIGLU_CPU_H
#define LLMC_SWIGLU_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "matmul.h"
#include "phase_time.h"
#include "vecmath.h"

// out = silu(gate) * up, silu(x) = x * sigmoid(x) = x / (1 + e^-x) (as torch's silu), with llmc/cpu/vecmath.h's
// branch-free e^x so the loops vectorise (glibc's expf is a scalar call)
static void swiglu_forward(float* out, const float* gate, const float* up, size_t N) {
    // out, gate, up are (N) = (B,T,FFN)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    int out_kept = matmul_bf16_fp32_kept(out, N); // (0: the bf16 copy alone)
    if (out16 != NULL && !out_kept) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float g = gate[i];
            float silu = g / (1.0f + vec_expf(-g));
            out16[i] = matmul_bf16_round_value(silu * up[i]);
        }
        matmul_bf16_alone_written(out, N);
    } else if (out16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float g = gate[i];
            float silu = g / (1.0f + vec_expf(-g));
            out[i] = silu * up[i];
            out16[i] = matmul_bf16_round_value(out[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float g = gate[i];
            float silu = g / (1.0f + vec_expf(-g));
            out[i] = silu * up[i];
        }
    }
    // gate and up read, out written (fp32, its bf16 copy when it has one, or the copy alone)
    phase_end(PHASE_ELEMENTWISE, t_phase, (8.0 + (out_kept ? 4.0 : 0.0) + (out16 != NULL ? 2.0 : 0.0)) * N, 8.0 * N);
}

// dgate, dup (N) = their gradients, added to them when accumulate, else written (and their bf16 copies when they
// have them: the fc GEMMs read both)
// one element of swiglu's backward: the gradients of gate and up for dout, d silu(g)/dg = sig (1 + g (1 - sig))
static inline void swiglu_grad(float dout, float g, float up, float* dgate, float* dup) {
    float sig = 1.0f / (1.0f + vec_expf(-g));
    float silu = g * sig;
    *dgate = dout * up * sig * (1.0f + g * (1.0f - sig));
    *dup = dout * silu;
}

// [i0, i1) of swiglu_backward_into's written case with both bf16 copies. restrict: seven pointers are more run-time
// overlap checks than GCC makes before it vectorises a loop, and without them this loop ran scalar (5x the forward's
// time in a Llama 3 step); the trainers' buffers never overlap.
// (__restrict__, not restrict: the CUDA CPU target's programs include this header as C++)
static inline void swiglu_backward_copies_span(float* __restrict__ dgate, float* __restrict__ dup,
                                               uint16_t* __restrict__ dgate16, uint16_t* __restrict__ dup16,
                                               const float* __restrict__ dout, const float* __restrict__ gate,
                                               const float* __restrict__ up, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        float dg, du;
        swiglu_grad(dout[i], gate[i], up[i], &dg, &du);
        dgate[i] = dg;
        dup[i] = du;
        dgate16[i] = matmul_bf16_round_value(dg);
        dup16[i] = matmul_bf16_round_value(du);
    }
}

// the same, the bf16 copies alone (dgate's and dup's mirrors hold them in bf16 alone: only the fc GEMMs read them)
static inline void swiglu_backward_alone_span(uint16_t* __restrict__ dgate16, uint16_t* __restrict__ dup16,
                                              const float* __restrict__ dout, const float* __restrict__ gate,
                                              const float* __restrict__ up, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        float dg, du;
        swiglu_grad(dout[i], gate[i], up[i], &dg, &du);
        dgate16[i] = matmul_bf16_round_value(dg);
        dup16[i] = matmul_bf16_round_value(du);
    }
}

// the same loop as it was before 2026-11-29 (LLMC_ELEMENTWISE_FUSED=0), which GCC leaves scalar: the same bits
static void swiglu_backward_copies_scalar(float* dgate, float* dup, uint16_t* dgate16, uint16_t* dup16, const float* dout,
                                          const float* gate, const float* up, size_t N) {
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        swiglu_grad(dout[i], gate[i], up[i], &dgate[i], &dup[i]);
        dgate16[i] = matmul_bf16_round_value(dgate[i]);
        dup16[i] = matmul_bf16_round_value(dup[i]);
    }
}

static void swiglu_backward_into(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t N,
                                 int accumulate) {
    // dgate, dup, dout, gate, up are (N) = (B,T,FFN)
    double t_phase = phase_begin();
    uint16_t* dgate16 = matmul_bf16_shadow(dgate, N);
    uint16_t* dup16 = matmul_bf16_shadow(dup, N);
    // (0: the bf16 copies alone; the fused path's, as both or neither are held alone)
    int kept = matmul_bf16_fp32_kept(dgate, N) || matmul_bf16_fp32_kept(dup, N);
    if (!accumulate && dgate16 != NULL && dup16 != NULL && elementwise_fused()) { // the trainers' case, vectorised
        #pragma omp parallel
        {
            size_t i0, i1;
            parallel_span(N, &i0, &i1); // (contiguous spans, 64-byte aligned ones where N allows)
            if (kept) {
                swiglu_backward_copies_span(dgate, dup, dgate16, dup16, dout, gate, up, i0, i1);
            } else {
                swiglu_backward_alone_span(dgate16, dup16, dout, gate, up, i0, i1);
            }
        }
        if (!kept) {
            matmul_bf16_alone_written(dgate, N);
            matmul_bf16_alone_written(dup, N);
        }
    } else if (!accumulate && dgate16 != NULL && dup16 != NULL) { // LLMC_ELEMENTWISE_FUSED=0: the loop as it was
        swiglu_backward_copies_scalar(dgate, dup, dgate16, dup16, dout, gate, up, N);
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float dg, du;
            swiglu_grad(dout[i], gate[i], up[i], &dg, &du);
            dgate[i] = accumulate ? dgate[i] + dg : dg;
            dup[i] = accumulate ? dup[i] + du : du;
        }
        bf16_copy_row(dgate16, dgate, N); // (a copy that only one of them has, or after accumulating)
        bf16_copy_row(dup16, dup, N);
    }
    // dout, gate, up read; dgate, dup updated (or written), and their bf16 copies when they have them (or the copies
    // alone)
    double copies = (dgate16 != NULL ? 2.0 : 0.0) + (dup16 != NULL ? 2.0 : 0.0);
    int alone = !accumulate && dgate16 != NULL && dup16 != NULL && elementwise_fused() && !kept;
    phase_end(PHASE_ELEMENTWISE, t_phase, ((accumulate ? 28.0 : alone ? 12.0 : 20.0) + copies) * N, 16.0 * N);
}

// one element of swiglu_recompute_backward: out = swiglu_forward's value, dg and du = swiglu_grad's (written), from
// one e^-g (the arithmetic of both, so their bits); returned by value (through pointers GCC left the loops scalar)
typedef struct { float out, dg, du; } SwigluRecompute;

static inline SwigluRecompute swiglu_recompute_value(float g, float u, float d) {
    SwigluRecompute r;
    float e = vec_expf(-g);
    r.out = g / (1.0f + e) * u;
    float sig = 1.0f / (1.0f + e);
    float silu = g * sig;
    r.dg = d * u * sig * (1.0f + g * (1.0f - sig));
    r.du = d * silu;
    return r;
}

// [i0, i1) of swiglu_recompute_backward's bf16 case: the forward's output out16 and the gradients' copies dgate16,
// dup16, all alone
static inline void swiglu_recompute_backward_span(uint16_t* __restrict__ out16, uint16_t* __restrict__ dgate16,
                                                  uint16_t* __restrict__ dup16, const float* __restrict__ dout,
                                                  const float* __restrict__ gate, const float* __restrict__ up,
                                                  size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        SwigluRecompute r = swiglu_recompute_value(gate[i], up[i], dout[i]);
        out16[i] = matmul_bf16_round_value(r.out);
        dgate16[i] = matmul_bf16_round_value(r.dg);
        dup16[i] = matmul_bf16_round_value(r.du);
    }
}

// the same in fp32 (no copies): out, dgate, dup written
static inline void swiglu_recompute_backward_span_fp32(float* __restrict__ out, float* __restrict__ dgate,
                                                       float* __restrict__ dup, const float* __restrict__ dout,
                                                       const float* __restrict__ gate, const float* __restrict__ up,
                                                       size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        SwigluRecompute r = swiglu_recompute_value(gate[i], up[i], dout[i]);
        out[i] = r.out;
        dgate[i] = r.dg;
        dup[i] = r.du;
    }
}

// The backward's SwiGLU in one pass: out (N) = swiglu_forward's output again (the projection's weight GEMM reads it
// next) and dgate, dup = swiglu_backward_into's (written), one e^-g a value where the two calls take two; their bits.
// In the trainers' two cases: -p bf16 with all three held in bf16 alone (llmc/cpu/matmul.h's mirrors), and fp32
// without copies; any other (and LLMC_ELEMENTWISE_FUSED=0) runs the two calls.
static void swiglu_recompute_backward(float* out, float* dgate, float* dup, const float* dout, const float* gate,
                                      const float* up, size_t N) {
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    uint16_t* dgate16 = matmul_bf16_shadow(dgate, N);
    uint16_t* dup16 = matmul_bf16_shadow(dup, N);
    int alone = out16 != NULL && dgate16 != NULL && dup16 != NULL && !matmul_bf16_fp32_kept(out, N) &&
                !matmul_bf16_fp32_kept(dgate, N) && !matmul_bf16_fp32_kept(dup, N);
    int plain = out16 == NULL && dgate16 == NULL && dup16 == NULL;
    if (!elementwise_fused() || !(alone || plain)) {
        swiglu_forward(out, gate, up, N);
        swiglu_backward_into(dgate, dup, dout, gate, up, N, 0);
        return;
    }
    double t_phase = phase_begin();
    #pragma omp parallel
    {
        size_t i0, i1;
        parallel_span(N, &i0, &i1); // (contiguous spans, 64-byte aligned ones where N allows)
        if (alone) { swiglu_recompute_backward_span(out16, dgate16, dup16, dout, gate, up, i0, i1); }
        else { swiglu_recompute_backward_span_fp32(out, dgate, dup, dout, gate, up, i0, i1); }
    }
    if (alone) {
        matmul_bf16_alone_written(out, N);
        matmul_bf16_alone_written(dgate, N);
        matmul_bf16_alone_written(dup, N);
    }
    // dout, gate, up read; out, dgate, dup written (in bf16 alone, or fp32)
    phase_end(PHASE_ELEMENTWISE, t_phase, (12.0 + (alone ? 6.0 : 12.0)) * N, 24.0 * N);
}

// -p bf16's layout (llmc/cpu/decoder_cpu.h's DECODER_CPU_BF16_ACTIVATION_TENSORS), forward: gate and up as the GEMMs
// wrote them (fp32, one layer's slice) rounded into gate16 and up16, the layer's, which the backward reads; out16 =
// swiglu_forward's arithmetic on the rounded values, rounded (so the backward recomputes it bit for bit)
#if MATMUL_X86
// [i0, i1) of swiglu_forward_bf16 with the roundings on AVX512-BF16's conversion (llmc/cpu/matmul.h's
// mm_bf16_cvt_on): gate and up rounded a row of 256 at a time, out's floats computed from them into a row, then
// rounded; the same bits. (Functions of their own, here and below: a loop added beside the old one made GCC stop
// inlining vec_expf into it, 4x slower.)
__attribute__((noinline))
static void swiglu_forward_bf16_span_cvt(uint16_t* out16, uint16_t* gate16, uint16_t* up16, const float* gate,
                                         const float* up, size_t i0, size_t i1) {
    float y[256];
    for (size_t c0 = i0; c0 < i1; c0 += 256) {
        size_t n = i1 - c0 < 256 ? i1 - c0 : 256;
        mm_round_bf16_row(gate16 + c0, gate + c0, n);
        mm_round_bf16_row(up16 + c0, up + c0, n);
        for (size_t j = 0; j < n; j++) {
            float g = mm_bf16_to_float(gate16[c0 + j]);
            y[j] = g / (1.0f + vec_expf(-g)) * mm_bf16_to_float(up16[c0 + j]);
        }
        mm_round_bf16_row(out16 + c0, y, n);
    }
}

// [i0, i1) of swiglu_recompute_backward_bf16 with all three in bf16 alone, rounded as above
__attribute__((noinline))
static void swiglu_recompute_backward_bf16_span_cvt(uint16_t* out16, uint16_t* dgate16, uint16_t* dup16,
                                                    const float* dout, const uint16_t* gate16, const uint16_t* up16,
                                                    size_t i0, size_t i1) {
    float o[256], dg[256], du[256];
    for (size_t c0 = i0; c0 < i1; c0 += 256) {
        size_t n = i1 - c0 < 256 ? i1 - c0 : 256;
        for (size_t j = 0; j < n; j++) {
            size_t i = c0 + j;
            SwigluRecompute r = swiglu_recompute_value(mm_bf16_to_float(gate16[i]), mm_bf16_to_float(up16[i]), dout[i]);
            o[j] = r.out;
            dg[j] = r.dg;
            du[j] = r.du;
        }
        mm_round_bf16_row(out16 + c0, o, n);
        mm_round_bf16_row(dgate16 + c0, dg, n);
        mm_round_bf16_row(dup16 + c0, du, n);
    }
}

// The two spans above in AVX-512 (vec16_enabled; LLMC_VEC16=0: the compiled loops), 16 values a step on the same
// numbers with the same operations (vec16_expf is vec_expf's bits; the one product the compiled backward fuses, in
// 1 + g (1 - sig), fused here by hand; fp-contract off: nothing else), so their bits (dev/test/test_elementwise
// checks every bf16 gate against the compiled loops).
// -x as the compiled loops' e^-x takes it (folded into a product, which keeps a NaN's sign): 0 - x, not a sign flip
// (the two differ only for a zero, whose e^x is 1 either way)
__attribute__((target(MM_BF16_TARGET), always_inline))
static inline __m512 vec16_neg(__m512 x) { return _mm512_sub_ps(_mm512_setzero_ps(), x); }

// silu(g) u on 16 lanes: g / (1 + e^-g) u, the compiled forward's operations
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline __m512 swiglu_value16(__m512 g, __m512 u) {
    return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), vec16_expf(vec16_neg(g)))), u);
}

// 16 values of SwiGLU's forward from i (n <= 16 of them): gate and up rounded and stored, out = silu(gate) up from
// the rounded registers (a store and its reload would wait on each other). Called with n = 16 in the loop, so that
// only the tail takes the masked loads and stores: a masked store then a load of its bytes is not forwarded.
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline void swiglu_forward_bf16_16(uint16_t* out16, uint16_t* gate16, uint16_t* up16, const float* gate,
                                          const float* up, size_t i, int n) {
    __mmask16 k = n == 16 ? (__mmask16)0xffff : vec16_first(n);
    __m256i gh = mm16_round_bf16(_mm512_maskz_loadu_ps(k, gate + i)), uh = mm16_round_bf16(_mm512_maskz_loadu_ps(k, up + i));
    mm16_store_bf16_bits(gate16 + i, gh, n);
    mm16_store_bf16_bits(up16 + i, uh, n);
    __m512 g = mm16_bf16_to_float(gh), u = mm16_bf16_to_float(uh);
    __m512 y = swiglu_value16(g, u);
    mm16_store_bf16(out16 + i, y, n);
}

// 32 values of the forward from i: gate, up and out rounded and stored 32 at a time
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline void swiglu_forward_bf16_32(uint16_t* out16, uint16_t* gate16, uint16_t* up16, const float* gate,
                                          const float* up, size_t i) {
    __m512i gh = mm32_round_bf16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(gate + i + 16));
    __m512i uh = mm32_round_bf16(_mm512_loadu_ps(up + i), _mm512_loadu_ps(up + i + 16));
    _mm512_storeu_si512((void*)(gate16 + i), gh);
    _mm512_storeu_si512((void*)(up16 + i), uh);
    __m512 y[2];
    for (int h = 0; h < 2; h++) {
        __m256i gh16 = h == 0 ? _mm512_castsi512_si256(gh) : _mm512_extracti64x4_epi64(gh, 1);
        __m256i uh16 = h == 0 ? _mm512_castsi512_si256(uh) : _mm512_extracti64x4_epi64(uh, 1);
        __m512 g = mm16_bf16_to_float(gh16), u = mm16_bf16_to_float(uh16);
        y[h] = swiglu_value16(g, u);
    }
    _mm512_storeu_si512((void*)(out16 + i), mm32_round_bf16(y[0], y[1]));
}

__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void swiglu_forward_bf16_span16(uint16_t* out16, uint16_t* gate16, uint16_t* up16, const float* gate,
                                       const float* up, size_t i0, size_t i1) {
    size_t i = i0;
    for (; i + 32 <= i1; i += 32) { swiglu_forward_bf16_32(out16, gate16, up16, gate, up, i); }
    for (; i + 16 <= i1; i += 16) { swiglu_forward_bf16_16(out16, gate16, up16, gate, up, i, 16); }
    if (i < i1) { swiglu_forward_bf16_16(out16, gate16, up16, gate, up, i, (int)(i1 - i)); }
}

// the backward's one pass on 16 lanes: out = silu(g) u again, dg, du (swiglu_recompute_value's operations)
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline void swiglu_recompute_value16(__m512 g, __m512 u, __m512 d, __m512* out, __m512* dg, __m512* du) {
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 den = _mm512_add_ps(one, vec16_expf(vec16_neg(g)));  // 1 + e^-g
    *out = _mm512_mul_ps(_mm512_div_ps(g, den), u);
    __m512 sig = _mm512_div_ps(one, den);
    __m512 silu = _mm512_mul_ps(sig, g);
    __m512 slope = _mm512_fmadd_ps(_mm512_sub_ps(one, sig), g, one);  // 1 + g (1 - sig)
    *dg = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(u, d), sig), slope);
    *du = _mm512_mul_ps(silu, d);
}

// 32 values of the backward's one pass from i, each output rounded and stored 32 at a time
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline void swiglu_recompute_backward_bf16_32(uint16_t* out16, uint16_t* dgate16, uint16_t* dup16,
                                                     const float* dout, const uint16_t* gate16, const uint16_t* up16,
                                                     size_t i) {
    __m512 out[2], dg[2], du[2];
    for (int h = 0; h < 2; h++) {
        swiglu_recompute_value16(mm16_load_bf16(gate16 + i + 16 * h, 16), mm16_load_bf16(up16 + i + 16 * h, 16),
                                 _mm512_loadu_ps(dout + i + 16 * h), &out[h], &dg[h], &du[h]);
    }
    _mm512_storeu_si512((void*)(out16 + i), mm32_round_bf16(out[0], out[1]));
    _mm512_storeu_si512((void*)(dgate16 + i), mm32_round_bf16(dg[0], dg[1]));
    _mm512_storeu_si512((void*)(dup16 + i), mm32_round_bf16(du[0], du[1]));
}

// 16 values of the backward's one pass from i (n <= 16 of them: the tail)
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off"), always_inline))
static inline void swiglu_recompute_backward_bf16_16(uint16_t* out16, uint16_t* dgate16, uint16_t* dup16,
                                                     const float* dout, const uint16_t* gate16, const uint16_t* up16,
                                                     size_t i, int n) {
    __mmask16 k = n == 16 ? (__mmask16)0xffff : vec16_first(n);
    __m512 out, dg, du;
    swiglu_recompute_value16(mm16_load_bf16(gate16 + i, n), mm16_load_bf16(up16 + i, n),
                             _mm512_maskz_loadu_ps(k, dout + i), &out, &dg, &du);
    mm16_store_bf16(out16 + i, out, n);
    mm16_store_bf16(dgate16 + i, dg, n);
    mm16_store_bf16(dup16 + i, du, n);
}

__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void swiglu_recompute_backward_bf16_span16(uint16_t* out16, uint16_t* dgate16, uint16_t* dup16,
                                                  const float* dout, const uint16_t* gate16, const uint16_t* up16,
                                                  size_t i0, size_t i1) {
    size_t i = i0;
    for (; i + 32 <= i1; i += 32) { swiglu_recompute_backward_bf16_32(out16, dgate16, dup16, dout, gate16, up16, i); }
    for (; i + 16 <= i1; i += 16) { swiglu_recompute_backward_bf16_16(out16, dgate16, dup16, dout, gate16, up16, i, 16); }
    if (i < i1) { swiglu_recompute_backward_bf16_16(out16, dgate16, dup16, dout, gate16, up16, i, (int)(i1 - i)); }
}

// LLMC_SWIGLU_WIDE=0 (swiglu_wide, below): the loops above as they were before 2026-12-05, 16 values a step, gate
// and up stored then loaded back, a row's tail through a copy on the stack (the same bits). GCC turns their run-time
// n == 16 tests into masked stores and loads, whose bytes a load waits for: 1.1x (forward) and 1.7x (backward) slower
// on the Zen 5, 1.06x and 1.08x on the AMX Xeon. Kept selectable until the wide loops are timed on a Zen 4.

__attribute__((target(MM_BF16_TARGET), always_inline))
static inline __m512 swiglu_load16_bf16_copied(const uint16_t* p, int n) {
    if (n == 16) { return mm16_bf16_to_float(_mm256_loadu_si256((const __m256i*)(const void*)p)); }
    uint16_t h[16] = {0};
    memcpy(h, p, (size_t)n * sizeof(uint16_t));
    return mm16_bf16_to_float(_mm256_loadu_si256((const __m256i*)(const void*)h));
}

__attribute__((target(MM_BF16_TARGET), always_inline))
static inline void swiglu_store16_bf16_copied(uint16_t* dst, __m512 x, int n) {
    if (n == 16) {
        _mm256_storeu_si256((__m256i*)(void*)dst, mm16_round_bf16(x));
    } else {
        uint16_t r[16];
        _mm256_storeu_si256((__m256i*)(void*)r, mm16_round_bf16(x));
        memcpy(dst, r, (size_t)n * sizeof(uint16_t));
    }
}

__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void swiglu_forward_bf16_span16_narrow(uint16_t* out16, uint16_t* gate16, uint16_t* up16, const float* gate,
                                              const float* up, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i += 16) {
        int n = i1 - i < 16 ? (int)(i1 - i) : 16;
        __mmask16 k = n == 16 ? (__mmask16)0xffff : vec16_first(n);
        swiglu_store16_bf16_copied(gate16 + i, _mm512_maskz_loadu_ps(k, gate + i), n);
        swiglu_store16_bf16_copied(up16 + i, _mm512_maskz_loadu_ps(k, up + i), n);
        __m512 g = swiglu_load16_bf16_copied(gate16 + i, n), u = swiglu_load16_bf16_copied(up16 + i, n);
        __m512 y = swiglu_value16(g, u);
        swiglu_store16_bf16_copied(out16 + i, y, n);
    }
}

__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void swiglu_recompute_backward_bf16_span16_narrow(uint16_t* out16, uint16_t* dgate16, uint16_t* dup16,
                                                         const float* dout, const uint16_t* gate16,
                                                         const uint16_t* up16, size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i += 16) {
        int n = i1 - i < 16 ? (int)(i1 - i) : 16;
        __mmask16 k = n == 16 ? (__mmask16)0xffff : vec16_first(n);
        __m512 out, dg, du;
        swiglu_recompute_value16(swiglu_load16_bf16_copied(gate16 + i, n), swiglu_load16_bf16_copied(up16 + i, n),
                                 _mm512_maskz_loadu_ps(k, dout + i), &out, &dg, &du);
        swiglu_store16_bf16_copied(out16 + i, out, n);
        swiglu_store16_bf16_copied(dgate16 + i, dg, n);
        swiglu_store16_bf16_copied(dup16 + i, du, n);
    }
}
#endif

// whether SwiGLU's AVX-512 loops are the wide ones (LLMC_SWIGLU_WIDE=1, the default) or the narrow ones of before (0)
static inline int swiglu_wide(void) { return env_switch_on("LLMC_SWIGLU_WIDE"); }

static void swiglu_forward_bf16(uint16_t* out16, uint16_t* gate16, uint16_t* up16, const float* gate, const float* up,
                                size_t N) {
    // out16, gate16, up16, gate, up are (N) = (B,T,FFN)
    double t_phase = phase_begin();
#if MATMUL_X86
    if (mm_bf16_cvt_on()) {
        int vec16 = vec16_enabled(), wide = swiglu_wide(); // (read here: never inside the parallel region)
        #pragma omp parallel
        {
            size_t i0, i1;
            parallel_span(N, &i0, &i1);
            if (vec16 && wide) { swiglu_forward_bf16_span16(out16, gate16, up16, gate, up, i0, i1); }
            else if (vec16) { swiglu_forward_bf16_span16_narrow(out16, gate16, up16, gate, up, i0, i1); }
            else { swiglu_forward_bf16_span_cvt(out16, gate16, up16, gate, up, i0, i1); }
        }
        phase_end(PHASE_ELEMENTWISE, t_phase, (8.0 + 6.0) * N, 8.0 * N);
        return;
    }
#endif
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        uint16_t g16 = matmul_bf16_round_value(gate[i]), u16 = matmul_bf16_round_value(up[i]);
        gate16[i] = g16;
        up16[i] = u16;
        float g = mm_bf16_to_float(g16);
        out16[i] = matmul_bf16_round_value(g / (1.0f + vec_expf(-g)) * mm_bf16_to_float(u16));
    }
    // gate and up read in fp32, written in bf16 with out
    phase_end(PHASE_ELEMENTWISE, t_phase, (8.0 + 6.0) * N, 8.0 * N);
}

// [i0, i1) of swiglu_recompute_backward_bf16: out16 and the gradients, in bf16 alone (dgate16, dup16) or in fp32
static inline void swiglu_recompute_backward_bf16_span(uint16_t* __restrict__ out16, float* __restrict__ dgate,
                                                       float* __restrict__ dup, uint16_t* __restrict__ dgate16,
                                                       uint16_t* __restrict__ dup16, const float* __restrict__ dout,
                                                       const uint16_t* __restrict__ gate16,
                                                       const uint16_t* __restrict__ up16, int alone, int vec16,
                                                       size_t i0, size_t i1) {
#if MATMUL_X86
    if (alone && mm_bf16_cvt_on()) {
        if (vec16 == 1) { swiglu_recompute_backward_bf16_span16(out16, dgate16, dup16, dout, gate16, up16, i0, i1); }
        else if (vec16 == 2) {
            swiglu_recompute_backward_bf16_span16_narrow(out16, dgate16, dup16, dout, gate16, up16, i0, i1);
        } else { swiglu_recompute_backward_bf16_span_cvt(out16, dgate16, dup16, dout, gate16, up16, i0, i1); }
        return;
    }
#endif
    if (alone) {
        for (size_t i = i0; i < i1; i++) {
            SwigluRecompute r = swiglu_recompute_value(mm_bf16_to_float(gate16[i]), mm_bf16_to_float(up16[i]), dout[i]);
            out16[i] = matmul_bf16_round_value(r.out);
            dgate16[i] = matmul_bf16_round_value(r.dg);
            dup16[i] = matmul_bf16_round_value(r.du);
        }
        return;
    }
    for (size_t i = i0; i < i1; i++) {
        SwigluRecompute r = swiglu_recompute_value(mm_bf16_to_float(gate16[i]), mm_bf16_to_float(up16[i]), dout[i]);
        out16[i] = matmul_bf16_round_value(r.out);
        dgate[i] = r.dg;
        dup[i] = r.du;
    }
    if (dgate16 != NULL) { bf16_copy_row(dgate16 + i0, dgate + i0, i1 - i0); } // (copies kept beside the fp32)
    if (dup16 != NULL) { bf16_copy_row(dup16 + i0, dup + i0, i1 - i0); }
}

// -p bf16's layout, backward: swiglu_recompute_backward on swiglu_forward_bf16's rounded gate16 and up16; out16 (the
// projection's weight GEMM reads it next) written in bf16, dgate and dup written (in bf16 alone where they are held
// so, llmc/cpu/matmul.h's mirrors, else in fp32 with their copies when they have them)
static void swiglu_recompute_backward_bf16(uint16_t* out16, float* dgate, float* dup, const float* dout,
                                           const uint16_t* gate16, const uint16_t* up16, size_t N) {
    uint16_t* dgate16 = matmul_bf16_shadow(dgate, N);
    uint16_t* dup16 = matmul_bf16_shadow(dup, N);
    int alone = dgate16 != NULL && dup16 != NULL && !matmul_bf16_fp32_kept(dgate, N) && !matmul_bf16_fp32_kept(dup, N);
    // 1: the wide AVX-512 loops, 2: the narrow ones (LLMC_SWIGLU_WIDE=0), 0: compiled (read here: never inside the
    // parallel region)
    int vec16 = !vec16_enabled() ? 0 : swiglu_wide() ? 1 : 2;
    double t_phase = phase_begin();
    #pragma omp parallel
    {
        size_t i0, i1;
        parallel_span(N, &i0, &i1);
        swiglu_recompute_backward_bf16_span(out16, dgate, dup, dgate16, dup16, dout, gate16, up16, alone, vec16, i0,
                                            i1);
    }
    if (alone) {
        matmul_bf16_alone_written(dgate, N);
        matmul_bf16_alone_written(dup, N);
    }
    // dout read in fp32, gate and up in bf16; out written in bf16, dgate and dup in bf16 alone or fp32 (+ copies)
    double grads = alone ? 4.0 : 8.0 + (dgate16 != NULL ? 2.0 : 0.0) + (dup16 != NULL ? 2.0 : 0.0);
    phase_end(PHASE_ELEMENTWISE, t_phase, (4.0 + 4.0 + 2.0 + grads) * N, 24.0 * N);
}

static void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t N) {
    swiglu_backward_into(dgate, dup, dout, gate, up, N, 1);
}

#endif // LLMC_SWIGLU_CPU_H
