/*
llmc/rand.h: a Mersenne Twister that reproduces torch's CPU generator bit for bit.

What is reproduced (checked by tests/test_c_headers.py against torch 2.13 for sizes
1..40, 1000, 4097 and for sequences of calls on one generator, seeds 42 and 1337):

    g = torch.Generator().manual_seed(seed)          manual_seed(&s, seed)
    torch.empty(n).uniform_(a, b, generator=g)        uniform_(data, n, a, b, &s)
    torch.empty(n).normal_(m, sd, generator=g)        normal_(data, n, m, sd, &s)   (float32, contiguous)

torch's generator is the standard MT19937 (32-bit, seeded with the low 32 bits of the seed)
plus a cached second Box-Muller sample for double-precision normals. Its kernels:

  uniform_ (float32): one 32-bit draw per element, u = (r & 0xFFFFFF) * 2^-24 in float,
      value = u * (b - a) + a, in float, multiply and add rounded separately (no FMA).

  normal_, n >= 16 (float32, contiguous): fill all n elements with uniform [0,1) floats as above;
      then for each complete block of 16, Box-Muller in float with the pairs (j, j+8):
          u1 = 1 - x[j], u2 = x[j+8], radius = sqrtf(-2 * logf(u1)),
          theta = (float)(2 * pi * (double)u2),
          x[j] = fmaf(radius * cosf(theta), sd, m),   x[j+8] = fmaf(radius * sinf(theta), sd, m)
      (torch's compiled kernel fuses the final multiply-add: verified against torch with
      arbitrary mean/std, where fused and unfused results differ in the last bit)
      and if n % 16 != 0, draw 16 fresh uniforms over the LAST 16 elements and transform them
      again as one block (so those elements overlap the previous block and are overwritten).
      mean and std are cast to float first.

  normal_, n < 16: per element a double-precision Box-Muller sample:
      u1, u2 = two 53-bit uniforms in [0,1) (each from one 64-bit draw = (r1 << 32) | r2),
      r = sqrt(-2 * log1p(-u2)), theta = 2 * pi * u1, value = r * cos(theta), and
      r * sin(theta) is cached in the generator and returned by the next such sample
      (the cache survives across calls, is cleared by manual_seed).
      value * sd + m is computed in double (mean and std are the caller's doubles: use normal_d
      to pass Python's double 0.02 exactly; normal_ widens its float arguments) then cast to float.

The CPU capability matters. torch 2.13 dispatches by CPU capability, and under both AVX2 and
AVX512 (torch.backends.cpu.get_cpu_capability(), the default on any modern x86 CPU) its n >= 16
float normal_ takes a vectorised path whose log/sin/cos (Sleef) differ in the last bit from
libm's; AVX2 and AVX512 give the same values as each other, but not these. Only the scalar
("default") capability computes what is written above. So torch matches this file bit for bit
only when ATEN_CPU_CAPABILITY=default is in the environment before torch is imported; the tests
set it, and a Python reference that wants bit-identical init with the C trainers must too.
uniform_ and n < 16 normal_ match under every capability. The float transcendental functions
are glibc's logf/sinf/cosf (torch's scalar kernel calls the same libm).
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define MT19937_N 624
#define MT19937_M 397
#define MT19937_MATRIX_A 0x9908b0dfU
#define MT19937_UMASK 0x80000000U
#define MT19937_LMASK 0x7fffffffU

typedef struct {
    uint64_t seed;
    int left;
    uint32_t next;
    uint32_t state[MT19937_N];
    // torch's CPU generator caches the second sample of a double-precision Box-Muller pair
    int has_next_double_normal;
    double next_double_normal;
} mt19937_state;

static inline void manual_seed(mt19937_state* s, unsigned int seed) {
    s->seed = seed;
    s->state[0] = (uint32_t)seed;
    for (uint32_t j = 1; j < MT19937_N; j++) {
        uint32_t prev = s->state[j - 1];
        s->state[j] = 1812433253U * (prev ^ (prev >> 30)) + j;
    }
    s->left = 1;
    s->next = 0;
    s->has_next_double_normal = 0;
    s->next_double_normal = 0.0;
}

static inline uint32_t mt19937_twist(uint32_t u, uint32_t v) {
    uint32_t mixed = (u & MT19937_UMASK) | (v & MT19937_LMASK);
    return (mixed >> 1) ^ ((v & 1U) ? MT19937_MATRIX_A : 0U);
}

// regenerates the 624 words of state
static inline void mt19937_next_state(mt19937_state* s) {
    uint32_t* st = s->state;
    s->left = MT19937_N;
    s->next = 0;
    int k = 0;
    for (; k < MT19937_N - MT19937_M; k++) {
        st[k] = st[k + MT19937_M] ^ mt19937_twist(st[k], st[k + 1]);
    }
    for (; k < MT19937_N - 1; k++) {
        st[k] = st[k + MT19937_M - MT19937_N] ^ mt19937_twist(st[k], st[k + 1]);
    }
    st[MT19937_N - 1] = st[MT19937_M - 1] ^ mt19937_twist(st[MT19937_N - 1], st[0]);
}

static inline uint32_t randint32(mt19937_state* s) {
    if (--(s->left) <= 0) {
        mt19937_next_state(s);
    }
    uint32_t y = s->state[s->next++];
    y ^= (y >> 11);
    y ^= (y << 7) & 0x9d2c5680U;
    y ^= (y << 15) & 0xefc60000U;
    y ^= (y >> 18);
    return y;
}

// two draws, the first one in the high 32 bits (torch's random64)
static inline uint64_t randint64(mt19937_state* s) {
    uint64_t hi = randint32(s);
    uint64_t lo = randint32(s);
    return (hi << 32) | lo;
}

// float in [0, 1) with 24 random bits (torch's uniform_real_distribution<float>)
static inline float randfloat32(mt19937_state* s) {
    return (float)(randint32(s) & ((1U << 24) - 1)) * (1.0f / 16777216.0f);
}

// double in [0, 1) with 53 random bits (torch's uniform_real_distribution<double>)
static inline double randfloat64(mt19937_state* s) {
    return (double)(randint64(s) & ((1ULL << 53) - 1)) * (1.0 / 9007199254740992.0);
}

// a * b + c with the product rounded to float before the add: never contracted to an FMA,
// whatever -ffp-contract the including file is built with (torch does not fuse here)
static inline float rand_mul_add_f32(float a, float b, float c) {
    volatile float product = a * b;
    return product + c;
}
// a * b + c in double, never contracted to an FMA (torch's double normal transform is unfused)
static inline double rand_mul_add_f64(double a, double b, double c) {
    volatile double product = a * b;
    return product + c;
}

// == torch.empty(n).uniform_(from, to, generator=g)
static inline void uniform_(float* data, size_t n, float from, float to, mt19937_state* s) {
    float range = to - from;
    for (size_t i = 0; i < n; i++) {
        data[i] = rand_mul_add_f32(randfloat32(s), range, from);
    }
}

// Box-Muller over one block of 16 uniforms, pairs (j, j + 8), in float
static inline void normal_fill_16(float* data, float mean, float std) {
    const double two_pi = 6.283185307179586476925286766559;
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - data[j];  // [0, 1) -> (0, 1] for the log
        float u2 = data[j + 8];
        float radius = sqrtf(-2.0f * logf(u1));
        float theta = (float)(two_pi * (double)u2);
        float c = radius * cosf(theta);
        float sn = radius * sinf(theta);
        data[j] = fmaf(c, std, mean);
        data[j + 8] = fmaf(sn, std, mean);
    }
}

// one double-precision Box-Muller sample, using and refilling the generator's cache
static inline double normal_sample_f64(mt19937_state* s) {
    if (s->has_next_double_normal) {
        s->has_next_double_normal = 0;
        return s->next_double_normal;
    }
    const double two_pi = 6.283185307179586476925286766559;
    double u1 = randfloat64(s);
    double u2 = randfloat64(s);
    double r = sqrt(-2.0 * log1p(-u2));
    double theta = two_pi * u1;
    s->next_double_normal = r * sin(theta);
    s->has_next_double_normal = 1;
    return r * cos(theta);
}

// == torch.empty(n).normal_(mean, std, generator=g) with Python floats (doubles) mean and std
static inline void normal_d(float* data, size_t n, double mean, double std, mt19937_state* s) {
    if (n >= 16) {
        float meanf = (float)mean;
        float stdf = (float)std;
        for (size_t i = 0; i < n; i++) {
            data[i] = randfloat32(s);
        }
        for (size_t i = 0; i + 16 <= n; i += 16) {
            normal_fill_16(data + i, meanf, stdf);
        }
        if (n % 16 != 0) {
            // torch redoes the last 16 elements with fresh uniforms
            float* tail = data + n - 16;
            for (int i = 0; i < 16; i++) {
                tail[i] = randfloat32(s);
            }
            normal_fill_16(tail, meanf, stdf);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            data[i] = (float)rand_mul_add_f64(normal_sample_f64(s), std, mean);
        }
    }
}

// == torch.empty(n).normal_(mean, std, generator=g), float32, contiguous
static inline void normal_(float* data, size_t n, float mean, float std, mt19937_state* s) {
    normal_d(data, n, (double)mean, (double)std, s);
}

#endif // LLMC_RAND_H
