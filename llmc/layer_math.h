/*
llmc/layer_math.h: the scalar math shared by the CPU trainer (train_gpt2.c) and the
GPU trainer (train_gpt2.cu), so both compute the same GELU, AdamW and layernorm rules.

Every function is HD: a plain static inline function in C, __host__ __device__ under nvcc.
*/
#ifndef LLMC_LAYER_MATH_H
#define LLMC_LAYER_MATH_H

#include <math.h>

#ifdef __CUDACC__
#define HD __host__ __device__
#else
#define HD
#endif

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

// ----------------------------------------------------------------------------
// AdamW, PyTorch semantics (torch.optim.AdamW, single-tensor path):
//   p -= lr * wd * p
//   m  = m + (1 - beta1) * (g - m)
//   v  = beta2 * v + (1 - beta2) * g * g
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// The per-step scalars come from adamw_step_scalars (computed once per step in double,
// like Python floats); adamw_update_one then updates one element. Returns the new param.

typedef struct {
    float lr;              // learning rate of this step
    float beta1, beta2;
    float eps;
    float step_size;       // lr / (1 - beta1^t)
    float bc2_sqrt;        // sqrt(1 - beta2^t)
} AdamWScalars;

static inline HD AdamWScalars adamw_step_scalars(float lr, float beta1, float beta2, float eps, int t) {
    AdamWScalars s;
    double bc1 = 1.0 - pow((double)beta1, (double)t);
    double bc2 = 1.0 - pow((double)beta2, (double)t);
    s.lr = lr;
    s.beta1 = beta1;
    s.beta2 = beta2;
    s.eps = eps;
    s.step_size = (float)((double)lr / bc1);
    s.bc2_sqrt = (float)sqrt(bc2);
    return s;
}

static inline HD float adamw_update_one(float param, float grad, float* m, float* v,
                                        float weight_decay, AdamWScalars s) {
    param = param * (1.0f - s.lr * weight_decay);
    float mt = *m + (1.0f - s.beta1) * (grad - *m);
    float vt = s.beta2 * *v + (1.0f - s.beta2) * grad * grad;
    *m = mt;
    *v = vt;
    float denom = sqrtf(vt) / s.bc2_sqrt + s.eps;
    return param - s.step_size * (mt / denom);
}

#include <stdint.h>
#include <string.h>

// ----------------------------------------------------------------------------
// bf16 rounding (added for the GPU trainer): shared by the CUDA kernels and tested on the CPU
// (dev/test/test_cuda_host.c). Needs <stdint.h> and <string.h> (memcpy works in device code).
// bf16 is the top 16 bits of an IEEE float32.

static inline HD float bf16_bits_to_float(uint16_t bits) {
    uint32_t u = ((uint32_t)bits) << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

// round to nearest, ties to even; NaN stays a (quiet) NaN
static inline HD uint16_t bf16_bits_round_nearest(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
        return (uint16_t)((u >> 16) | 0x0040u);
    }
    uint32_t bias = 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)((u + bias) >> 16);
}

// 32 well-mixed random bits from (index, seed): an integer hash, no state, same on CPU and GPU
static inline HD uint32_t llmc_hash_u32(uint32_t index, uint32_t seed) {
    uint32_t x = index ^ (seed * 0x9E3779B9u + 0x7F4A7C15u);
    x ^= x >> 16; x *= 0x7FEB352Du;
    x ^= x >> 15; x *= 0x846CA68Bu;
    x ^= x >> 16;
    x += seed;
    x ^= x >> 16; x *= 0x7FEB352Du;
    x ^= x >> 15; x *= 0x846CA68Bu;
    x ^= x >> 16;
    return x;
}

// stochastic rounding to bf16: rounds away from zero with probability (dropped bits) / 2^16, so the
// expected value of the result equals x; exactly representable values never change. inf stays inf,
// NaN stays a quiet NaN. random: 32 random bits (only the low 16 are used).
static inline HD uint16_t bf16_bits_stochastic_round(float x, uint32_t random) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7F800000u) == 0x7F800000u) {
        return (u & 0x007FFFFFu) != 0 ? (uint16_t)((u >> 16) | 0x0040u) : (uint16_t)(u >> 16);
    }
    uint32_t dropped = u & 0xFFFFu;
    uint32_t threshold = random & 0xFFFFu;
    uint32_t truncated = u & 0xFFFF0000u;
    uint32_t rounded = dropped > threshold ? truncated + 0x10000u : truncated;
    return (uint16_t)(rounded >> 16);
}

#endif // LLMC_LAYER_MATH_H
