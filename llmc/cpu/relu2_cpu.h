/*
llmc/cpu/relu2_cpu.h: ReLU^2 on the CPU, elementwise, fp32 with OpenMP; the CPU side of llmc/cuda/relu2.cuh.
nanochat's MLP activation, run by llmc/cpu/activation_cpu.h's driver (relu2_value, relu2_grad: one element).

    relu2_forward(out, inp, N)                     out = relu(inp)^2
    relu2_backward(dinp, inp, dout, N)             dinp += 2 relu(inp) * dout
    relu2_backward_into(dinp, inp, dout, N, acc)   the same, added (acc 1) or written (acc 0)
    relu2_recompute_backward(out, dinp, inp, dout, N)   relu2_forward (out) and relu2_backward_into (written) in one
                                                   pass
    relu2_forward_bf16(out16, inp16, inp, N)       -p bf16's layout (llmc/cpu/decoder_cpu.h): inp rounded into inp16
                                                   (what the backward reads), out16 = relu(inp16)^2 rounded
    relu2_recompute_backward_bf16(out16, dinp, inp16, dout, N)   relu2_recompute_backward on inp16

(N) = (B,T,FFN). (The GPU's relu2_backward takes (dinp, dout, inp) and writes; the CPU's argument order is
gelu_backward's.) A function whose output a GEMM reads writes that output's bf16 copy too when it has one (-p bf16
on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow, bf16_copy_row).
*/
#ifndef LLMC_RELU2_CPU_H
#define LLMC_RELU2_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "activation_cpu.h"

static void relu2_forward(float* out, const float* inp, size_t N) { activation_forward(ACTIVATION_RELU2, out, inp, N); }

static void relu2_backward_into(float* dinp, const float* inp, const float* dout, size_t N, int accumulate) {
    activation_backward_into(ACTIVATION_RELU2, dinp, inp, dout, N, accumulate);
}

static void relu2_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    activation_backward_into(ACTIVATION_RELU2, dinp, inp, dout, N, 1);
}

// [i0, i1) of relu2_recompute_backward's bf16 case: out16 = relu(x)^2 and dinp16 = 2 relu(x) dout, both alone
static inline void relu2_recompute_backward_span(uint16_t* __restrict__ out16, uint16_t* __restrict__ dinp16,
                                                 const float* __restrict__ inp, const float* __restrict__ dout,
                                                 size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        out16[i] = matmul_bf16_round_value(relu2_value(inp[i]));
        dinp16[i] = matmul_bf16_round_value(relu2_grad(inp[i]) * dout[i]);
    }
}

// the same in fp32 (no copies)
static inline void relu2_recompute_backward_span_fp32(float* __restrict__ out, float* __restrict__ dinp,
                                                      const float* __restrict__ inp, const float* __restrict__ dout,
                                                      size_t i0, size_t i1) {
    for (size_t i = i0; i < i1; i++) {
        out[i] = relu2_value(inp[i]);
        dinp[i] = relu2_grad(inp[i]) * dout[i];
    }
}

// The backward's ReLU^2 in one pass: out (N) = relu2_forward's output again (the projection's weight GEMM reads it
// next) and dinp = relu2_backward_into's (written): inp read once where the two calls read it twice; their bits. In
// the trainers' two cases (-p bf16 with both held in bf16 alone, fp32 without copies); any other, and
// LLMC_ELEMENTWISE_FUSED=0, runs the two calls.
static void relu2_recompute_backward(float* out, float* dinp, const float* inp, const float* dout, size_t N) {
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    int alone = out16 != NULL && dinp16 != NULL && !matmul_bf16_fp32_kept(out, N) && !matmul_bf16_fp32_kept(dinp, N);
    int plain = out16 == NULL && dinp16 == NULL;
    if (!elementwise_fused() || !(alone || plain)) {
        relu2_forward(out, inp, N);
        relu2_backward_into(dinp, inp, dout, N, 0);
        return;
    }
    double t_phase = phase_begin();
    #pragma omp parallel
    {
        size_t i0, i1;
        parallel_span(N, &i0, &i1); // (contiguous spans, 64-byte aligned ones where N allows)
        if (alone) { relu2_recompute_backward_span(out16, dinp16, inp, dout, i0, i1); }
        else { relu2_recompute_backward_span_fp32(out, dinp, inp, dout, i0, i1); }
    }
    if (alone) {
        matmul_bf16_alone_written(out, N);
        matmul_bf16_alone_written(dinp, N);
    }
    // inp, dout read; out, dinp written (in bf16 alone, or fp32)
    phase_end(PHASE_ELEMENTWISE, t_phase, (8.0 + (alone ? 4.0 : 8.0)) * N, 5.0 * N);
}

#if MATMUL_X86
// [i0, i1) of relu2_forward_bf16 with the roundings on AVX512-BF16's conversion (llmc/cpu/matmul.h's mm_bf16_cvt_on):
// inp rounded a row of 256 at a time, out's floats computed from it into a row, then rounded; the same bits.
// (Functions of their own, as llmc/cpu/swiglu_cpu.h's, so that the loops beside them stay as they were compiled.)
__attribute__((noinline))
static void relu2_forward_bf16_span_cvt(uint16_t* out16, uint16_t* inp16, const float* inp, size_t i0, size_t i1) {
    float y[256];
    for (size_t c0 = i0; c0 < i1; c0 += 256) {
        size_t n = i1 - c0 < 256 ? i1 - c0 : 256;
        mm_round_bf16_row(inp16 + c0, inp + c0, n);
        for (size_t j = 0; j < n; j++) { y[j] = relu2_value(mm_bf16_to_float(inp16[c0 + j])); }
        mm_round_bf16_row(out16 + c0, y, n);
    }
}

// [i0, i1) of relu2_recompute_backward_bf16 with dinp in bf16 alone, rounded as above
__attribute__((noinline))
static void relu2_recompute_backward_bf16_span_cvt(uint16_t* out16, uint16_t* dinp16, const uint16_t* inp16,
                                                   const float* dout, size_t i0, size_t i1) {
    float y[256], d[256];
    for (size_t c0 = i0; c0 < i1; c0 += 256) {
        size_t n = i1 - c0 < 256 ? i1 - c0 : 256;
        for (size_t j = 0; j < n; j++) {
            float x = mm_bf16_to_float(inp16[c0 + j]);
            y[j] = relu2_value(x);
            d[j] = relu2_grad(x) * dout[c0 + j];
        }
        mm_round_bf16_row(out16 + c0, y, n);
        mm_round_bf16_row(dinp16 + c0, d, n);
    }
}
#endif

// -p bf16's layout (llmc/cpu/decoder_cpu.h's DECODER_CPU_BF16_ACTIVATION_TENSORS), forward: inp as the GEMM wrote it
// (fp32, one layer's slice) rounded into inp16, the layer's, which the backward reads; out16 = relu(inp16)^2 rounded
static void relu2_forward_bf16(uint16_t* out16, uint16_t* inp16, const float* inp, size_t N) {
    double t_phase = phase_begin();
#if MATMUL_X86
    if (mm_bf16_cvt_on()) {
        #pragma omp parallel
        {
            size_t i0, i1;
            parallel_span(N, &i0, &i1);
            relu2_forward_bf16_span_cvt(out16, inp16, inp, i0, i1);
        }
        phase_end(PHASE_ELEMENTWISE, t_phase, (4.0 + 4.0) * N, 2.0 * N);
        return;
    }
#endif
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        uint16_t x16 = matmul_bf16_round_value(inp[i]);
        inp16[i] = x16;
        out16[i] = matmul_bf16_round_value(relu2_value(mm_bf16_to_float(x16)));
    }
    // inp read in fp32, written in bf16 with out
    phase_end(PHASE_ELEMENTWISE, t_phase, (4.0 + 4.0) * N, 2.0 * N);
}

// -p bf16's layout, backward: relu2_recompute_backward on relu2_forward_bf16's rounded inp16; out16 written in bf16,
// dinp written (in bf16 alone where it is held so, llmc/cpu/matmul.h's mirrors, else in fp32 with its copy when it has
// one)
static void relu2_recompute_backward_bf16(uint16_t* out16, float* dinp, const uint16_t* inp16, const float* dout,
                                          size_t N) {
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    int alone = dinp16 != NULL && !matmul_bf16_fp32_kept(dinp, N);
    double t_phase = phase_begin();
    #pragma omp parallel
    {
        size_t i0, i1;
        parallel_span(N, &i0, &i1);
#if MATMUL_X86
        if (alone && mm_bf16_cvt_on()) {
            relu2_recompute_backward_bf16_span_cvt(out16, dinp16, inp16, dout, i0, i1);
        } else
#endif
        if (alone) {
            for (size_t i = i0; i < i1; i++) {
                float x = mm_bf16_to_float(inp16[i]);
                out16[i] = matmul_bf16_round_value(relu2_value(x));
                dinp16[i] = matmul_bf16_round_value(relu2_grad(x) * dout[i]);
            }
        } else {
            for (size_t i = i0; i < i1; i++) {
                float x = mm_bf16_to_float(inp16[i]);
                out16[i] = matmul_bf16_round_value(relu2_value(x));
                dinp[i] = relu2_grad(x) * dout[i];
            }
            if (dinp16 != NULL) { bf16_copy_row(dinp16 + i0, dinp + i0, i1 - i0); }
        }
    }
    if (alone) { matmul_bf16_alone_written(dinp, N); }
    // inp read in bf16, dout in fp32; out written in bf16, dinp in bf16 alone or fp32 (+ its copy)
    phase_end(PHASE_ELEMENTWISE, t_phase, (2.0 + 4.0 + 2.0 + (alone ? 2.0 : dinp16 != NULL ? 6.0 : 4.0)) * N, 5.0 * N);
}

#endif // LLMC_RELU2_CPU_H
