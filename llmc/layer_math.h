/*
llmc/layer_math.h: the scalar math of the layers, shared by the CPU trainer (train_gpt2.c) and the
GPU kernels (the llmc .cuh files), so both compute the same GELU and layernorm statistics. The optimizer's
rule is llmc/adamw.h, bf16 rounding llmc/bf16.h.

Every function is HD (llmc/host_device.h): plain C on the CPU, __host__ __device__ under nvcc.
*/
#ifndef LLMC_LAYER_MATH_H
#define LLMC_LAYER_MATH_H

#include <math.h>

#include "host_device.h"

// ----------------------------------------------------------------------------
// GELU, tanh approximation (GPT-2's "gelu_new", torch's approximate="tanh")
//   gelu(x) = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))

#define GELU_SCALING_FACTOR 0.7978845608028654f // sqrt(2 / pi)
#define GELU_CUBE_COEFF 0.044715f

static inline HD float gelu_tanh_forward(float x) {
    float cube = GELU_CUBE_COEFF * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALING_FACTOR * (x + cube)));
}

// d gelu(x) / dx
static inline HD float gelu_tanh_grad(float x) {
    float cube = GELU_CUBE_COEFF * x * x * x;
    float u = GELU_SCALING_FACTOR * (x + cube);
    float th = tanhf(u);
    float sech2 = 1.0f - th * th;
    float du_dx = GELU_SCALING_FACTOR * (1.0f + 3.0f * GELU_CUBE_COEFF * x * x);
    return 0.5f * (1.0f + th) + 0.5f * x * sech2 * du_dx;
}

// ----------------------------------------------------------------------------
// LayerNorm statistics of one row x[0..C-1]: mean and 1/sqrt(var + eps), biased variance.
// Two passes (mean first, then squared deviations) keep the variance accurate.

#define LAYERNORM_EPS 1e-5f

static inline HD float layernorm_mean(const float* x, int C) {
    float sum = 0.0f;
    for (int i = 0; i < C; i++) { sum += x[i]; }
    return sum / (float)C;
}

static inline HD float layernorm_rstd(const float* x, float mean, int C) {
    float sum = 0.0f;
    for (int i = 0; i < C; i++) {
        float d = x[i] - mean;
        sum += d * d;
    }
    return 1.0f / sqrtf(sum / (float)C + LAYERNORM_EPS);
}

#endif // LLMC_LAYER_MATH_H
