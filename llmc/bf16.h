/*
llmc/bf16.h: bfloat16 as bits, for the GPU trainer's kernels and the CPU's bf16 GEMM operands, tested
on the CPU (dev/test/test_bf16.c): round to nearest even, stochastic rounding, and the stateless
hash that gives stochastic rounding its random bits. bf16 is the top 16 bits of an IEEE float32.

Every function is HD (llmc/host_device.h): plain C on the CPU, __host__ __device__ under nvcc.
*/
#ifndef LLMC_BF16_H
#define LLMC_BF16_H

#include <stdint.h>
#include <string.h>

#include "host_device.h"

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

#endif // LLMC_BF16_H
