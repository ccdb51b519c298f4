/*
llmc/cpu/relu2_cpu.h: ReLU^2 on the CPU, elementwise, fp32 with OpenMP; the CPU side of llmc/cuda/relu2.cuh.
nanochat's MLP activation, run by llmc/cpu/activation_cpu.h's driver (relu2_value, relu2_grad: one element).

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

#include "activation_cpu.h"

static void relu2_forward(float* out, const float* inp, size_t N) { activation_forward(ACTIVATION_RELU2, out, inp, N); }

static void relu2_backward_into(float* dinp, const float* inp, const float* dout, size_t N, int accumulate) {
    activation_backward_into(ACTIVATION_RELU2, dinp, inp, dout, N, accumulate);
}

static void relu2_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    activation_backward_into(ACTIVATION_RELU2, dinp, inp, dout, N, 1);
}

#endif // LLMC_RELU2_CPU_H
