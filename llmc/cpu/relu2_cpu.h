/*
llmc/cpu/relu2_cpu.h: ReLU^2 on the CPU, elementwise, fp32 with OpenMP; the CPU side of llmc/cuda/relu2.cuh.
nanochat's MLP activation.

    relu2_forward(out, inp, N)                     out = relu(inp)^2
    relu2_backward(dinp, inp, dout, N)             dinp += 2 relu(inp) * dout
    relu2_backward_into(dinp, inp, dout, N, acc)   the same, added (acc 1) or written (acc 0)

(N) = (B,T,FFN). (The GPU's relu2_backward takes (dinp, dout, inp) and writes; the CPU's argument order is
gelu_backward's.) A function whose output a GEMM reads writes that output's bf16 copy too when it has one (-p bf16
on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow, bf16_copy_row).
*/
#ifndef LLMC_RELU2_CPU_H
#define LLMC_RELU2_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "matmul.h"
#include "phase_time.h"

// out = relu(inp)^2
static void relu2_forward(float* out, const float* inp, size_t N) {
    // out, inp are (N) = (B,T,FFN)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    if (out16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            out[i] = r * r;
            out16[i] = matmul_bf16_round_value(out[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            out[i] = r * r;
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 8.0 * N, 2.0 * N);
}

// dinp (N) = the gradient of relu2_forward for dout (N), added to dinp when accumulate, else written
static void relu2_backward_into(float* dinp, const float* inp, const float* dout, size_t N, int accumulate) {
    // dinp, inp, dout are (N) = (B,T,FFN); d relu(x)^2 / dx = 2 relu(x)
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    if (accumulate) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            dinp[i] += 2.0f * r * dout[i];
        }
        bf16_copy_row(dinp16, dinp, N);
    } else if (dinp16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            dinp[i] = 2.0f * r * dout[i];
            dinp16[i] = matmul_bf16_round_value(dinp[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            dinp[i] = 2.0f * r * dout[i];
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, (accumulate ? 16.0 : 12.0) * N, 4.0 * N);
}

static void relu2_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    relu2_backward_into(dinp, inp, dout, N, 1);
}

#endif // LLMC_RELU2_CPU_H
