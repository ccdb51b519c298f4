/*
llmc/cpu/relu2_cpu.h: ReLU^2 on the CPU, elementwise, fp32 with OpenMP; the CPU side of llmc/cuda/relu2.cuh.
nanochat's MLP activation, run by llmc/cpu/activation_cpu.h's driver (relu2_value, relu2_grad: one element).

    relu2_forward(out, inp, N)                     out = relu(inp)^2
    relu2_backward(dinp, inp, dout, N)             dinp += 2 relu(inp) * dout
    relu2_backward_into(dinp, inp, dout, N, acc)   the same, added (acc 1) or written (acc 0)
    relu2_recompute_backward(out, dinp, inp, dout, N)   relu2_forward (out) and relu2_backward_into (written) in one
                                                   pass

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

#endif // LLMC_RELU2_CPU_H
