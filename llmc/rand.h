/*
llmc/rand.h: a Mersenne Twister that reproduces torch's CPU generator bit for bit.

What is reproduced (checked by tests/test_c_headers.py against torch 2.13 for sizes
1..40, 1000, 4097 and for sequences of calls on one generator, seeds 42 and 1337, under
both of torch's code paths described below):

    g = torch.Generator().manual_seed(seed)          manual_seed(&s, seed)
    torch.empty(n).uniform_(a, b, generator=g)        uniform_(data, n, a, b, &s)
    torch.empty(n).normal_(m, sd, generator=g)        normal_(data, n, m, sd, &s)   (float32, contiguous)

torch's generator is the standard MT19937 (32-bit, seeded with the low 32 bits of the seed)
plus a cached second Box-Muller sample for double-precision normals. Its kernels:

  uniform_ (float32): one 32-bit draw per element, u = (r & 0xFFFFFF) * 2^-24 in float,
      value = u * (b - a) + a, in float, multiply and add rounded separately (no FMA).

  normal_, n >= 16 (float32, contiguous): fill all n elements with uniform [0,1) floats as above;
      then for each complete block of 16, Box-Muller in float with the pairs (j, j+8):
          u1 = 1 - x[j], u2 = x[j+8], radius = sqrt(-2 * log(u1)), theta = 2 pi u2,
          x[j] = fmaf(radius * cos(theta), sd, m),   x[j+8] = fmaf(radius * sin(theta), sd, m)
      and if n % 16 != 0, draw 16 fresh uniforms over the LAST 16 elements and transform them
      again as one block (so those elements overlap the previous block and are overwritten).
      mean and std are cast to float first. How log, sin, cos and theta are computed depends on
      torch's CPU capability (see below).

  normal_, n < 16: per element a double-precision Box-Muller sample:
      u1, u2 = two 53-bit uniforms in [0,1) (each from one 64-bit draw = (r1 << 32) | r2),
      r = sqrt(-2 * log1p(-u2)), theta = 2 * pi * u1, value = r * cos(theta), and
      r * sin(theta) is cached in the generator and returned by the next such sample
      (the cache survives across calls, is cleared by manual_seed).
      value * sd + m is computed in double (mean and std are the caller's doubles: use normal_d
      to pass Python's double 0.02 exactly; normal_ widens its float arguments) then cast to float.

The CPU capability (torch.backends.cpu.get_cpu_capability()). torch picks its n >= 16 float
normal_ kernel by the capability it dispatches to:
  - "AVX2" or "AVX512" (any x86 CPU with AVX2 and FMA, i.e. nearly every machine today):
    a vectorised kernel with Cephes-style float polynomials for log and sincos, theta = 2pi*u2
    in float, and particular multiply-adds fused. normal_fill_16_vectorized below computes the
    same thing one lane at a time (verified bit for bit on millions of samples; AVX2 and AVX512
    give identical values).
  - "DEFAULT" (ATEN_CPU_CAPABILITY=default, CPUs without AVX2, non-x86): a scalar kernel with
    libm's logf/cosf/sinf and theta = (float)(2pi * (double)u2). normal_fill_16_scalar below.
manual_seed mirrors torch's choice: it reads ATEN_CPU_CAPABILITY ("default" selects the
scalar kernel) and otherwise checks whether this CPU has AVX2 and FMA, and stores the result in
s->torch_avx2_or_above (which a caller may override after manual_seed). So a C program and
a Python run in the same environment on the same machine draw identical numbers.
uniform_ and n < 16 normal_ are the same under every capability.
*/
#ifndef LLMC_RAND_H
#define LLMC_RAND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

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
    // 1: reproduce torch's AVX2/AVX512 normal_ kernel, 0: its scalar ("default") one; set by manual_seed
    int torch_avx2_or_above;
} mt19937_state;

// does torch (in this environment, on this CPU) use its vectorised float normal_ kernel?
static inline int rand_torch_cpu_avx2_or_above(void) {
    const char* cap = getenv("ATEN_CPU_CAPABILITY");
    if (cap != NULL && strcasecmp(cap, "default") == 0) {
        return 0;
    }
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return 0;
#endif
}

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
    s->torch_avx2_or_above = rand_torch_cpu_avx2_or_above();
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
    if (s->torch_avx2_or_above) {
        for (size_t i = 0; i < n; i++) { data[i] = fmaf(randfloat32(s), range, from); }
    } else {
        for (size_t i = 0; i < n; i++) { data[i] = rand_mul_add_f32(randfloat32(s), range, from); }
    }
}

// Box-Muller over one block of 16 uniforms, pairs (j, j + 8), in float: torch's scalar kernel
static inline void normal_fill_16_scalar(float* data, float mean, float std) {
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

static inline uint32_t rand_float_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    return u;
}
static inline float rand_bits_float(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// natural log of x > 0 as torch's vectorised kernel computes it, one lane: x = m * 2^e with
// m in [sqrt(1/2), sqrt(2)), then a degree-8 Cephes polynomial in (m - 1) plus e * ln 2 in two parts.
// Every fmaf below is a multiply-add the vectorised kernel performs fused; the other products round.
static inline float rand_vec_logf(float x) {
    const float min_normal = 1.17549435e-38f;
    if (x < min_normal) { x = min_normal; }
    uint32_t bits = rand_float_bits(x);
    int32_t exponent = (int32_t)(bits >> 23) - 0x7f;
    float m = rand_bits_float((bits & ~0x7f800000u) | 0x3f000000u);  // mantissa scaled to [0.5, 1)
    float e = (float)exponent + 1.0f;
    float below = m < 0.707106781186547524f ? m : 0.0f;  // m < sqrt(1/2): use 2m instead, e - 1
    e = e - (m < 0.707106781186547524f ? 1.0f : 0.0f);
    m = m - 1.0f;
    m = m + below;
    float z = m * m;
    float y = fmaf(7.0376836292e-2f, m, -1.1514610310e-1f);
    y = fmaf(y, m, 1.1676998740e-1f);
    y = fmaf(y, m, -1.2420140846e-1f);
    y = fmaf(y, m, 1.4249322787e-1f);
    y = fmaf(y, m, -1.6668057665e-1f);
    y = fmaf(y, m, 2.0000714765e-1f);
    y = fmaf(y, m, -2.4999993993e-1f);
    y = fmaf(y, m, 3.3333331174e-1f);
    y = y * m;
    float e_q1 = e * -2.12194440e-4f;
    y = fmaf(y, z, e_q1);
    y = fmaf(z, -0.5f, y);
    float r = m + y;
    return fmaf(e, 0.693359375f, r);
}

// sin and cos of x as torch's vectorised kernel computes them, one lane: reduce by multiples of
// pi/4 (in three parts), then Cephes polynomials for sin and cos on [-pi/4, pi/4], and pick and
// sign them by the octant.
static inline void rand_vec_sincosf(float x, float* sin_out, float* cos_out) {
    uint32_t sign_sin = rand_float_bits(x) & 0x80000000u;
    x = fabsf(x);
    int32_t j = (int32_t)(x * 1.27323954473516f);  // x * 4/pi, truncated
    j = (j + 1) & ~1;
    float y = (float)j;
    uint32_t swap_sign_sin = ((uint32_t)(j & 4)) << 29;
    int use_sin_poly = (j & 2) == 0;
    uint32_t sign_cos = ((uint32_t)(~(j - 2) & 4)) << 29;
    sign_sin ^= swap_sign_sin;
    x = fmaf(y, -0.78515625f, x);
    x = fmaf(y, -2.4187564849853515625e-4f, x);
    x = fmaf(y, -3.77489497744594108e-8f, x);
    float z = x * x;
    float pc = fmaf(2.443315711809948e-5f, z, -1.388731625493765e-3f);
    pc = fmaf(pc, z, 4.166664568298827e-2f);
    pc = pc * z;
    float half_z = z * 0.5f;
    pc = fmaf(pc, z, -half_z);
    pc = pc + 1.0f;
    float ps = fmaf(-1.9515295891e-4f, z, 8.3321608736e-3f);
    ps = fmaf(ps, z, -1.6666654611e-1f);
    ps = ps * z;
    ps = fmaf(ps, x, x);
    float s = use_sin_poly ? ps : pc;
    float c = use_sin_poly ? pc : ps;
    *sin_out = rand_bits_float(rand_float_bits(s) ^ sign_sin);
    *cos_out = rand_bits_float(rand_float_bits(c) ^ sign_cos);
}

// Box-Muller over one block of 16 uniforms, pairs (j, j + 8): torch's AVX2/AVX512 kernel, one lane at a time
static inline void normal_fill_16_vectorized(float* data, float mean, float std) {
    const float two_pi = 6.28318530717958647692f;
    for (int j = 0; j < 8; j++) {
        float u1 = 1.0f - data[j];
        float u2 = data[j + 8];
        float radius = sqrtf(-2.0f * rand_vec_logf(u1));
        float theta = two_pi * u2;
        float sn, cs;
        rand_vec_sincosf(theta, &sn, &cs);
        float c = radius * cs;
        float s = radius * sn;
        data[j] = fmaf(c, std, mean);
        data[j + 8] = fmaf(s, std, mean);
    }
}

static inline void normal_fill_16(float* data, float mean, float std, const mt19937_state* s) {
    if (s->torch_avx2_or_above) {
        normal_fill_16_vectorized(data, mean, std);
    } else {
        normal_fill_16_scalar(data, mean, std);
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
            normal_fill_16(data + i, meanf, stdf, s);
        }
        if (n % 16 != 0) {
            // torch redoes the last 16 elements with fresh uniforms
            float* tail = data + n - 16;
            for (int i = 0; i < 16; i++) {
                tail[i] = randfloat32(s);
            }
            normal_fill_16(tail, meanf, stdf, s);
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
