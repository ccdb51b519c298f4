/*
dev/cuda_cpu/include/cuda_bf16.h: __nv_bfloat16 on the CPU, bit-exact to CUDA's conversions.

    float -> bf16   round to nearest, ties to even (__float2bfloat16, __float2bfloat16_rn, the
                    constructor); NaN becomes the canonical 0x7FFF, as cvt.rn.bf16.f32 gives
    bf16 -> float   exact (the bits shifted up)
    arithmetic      in float, rounded once to bf16 (what sm_80's bf16 instructions give)
*/
#ifndef CUDA_CPU_CUDA_BF16_H
#define CUDA_CPU_CUDA_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t cuda_cpu_float_to_bf16_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) { return 0x7FFFu; }
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
static inline float cuda_cpu_bf16_bits_to_float(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

struct __nv_bfloat16_raw {
    unsigned short x;
};

struct __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(const __nv_bfloat16_raw& raw) : __x(raw.x) {}
    __nv_bfloat16(float f) : __x(cuda_cpu_float_to_bf16_bits(f)) {}
    __nv_bfloat16(double f) : __x(cuda_cpu_float_to_bf16_bits((float)f)) {}
    __nv_bfloat16(int i) : __x(cuda_cpu_float_to_bf16_bits((float)i)) {}
    __nv_bfloat16(unsigned int i) : __x(cuda_cpu_float_to_bf16_bits((float)i)) {}
    __nv_bfloat16(long long i) : __x(cuda_cpu_float_to_bf16_bits((float)i)) {}
    __nv_bfloat16(unsigned long long i) : __x(cuda_cpu_float_to_bf16_bits((float)i)) {}
    __nv_bfloat16& operator=(const __nv_bfloat16_raw& raw) { __x = raw.x; return *this; }
    __nv_bfloat16& operator=(float f) { __x = cuda_cpu_float_to_bf16_bits(f); return *this; }
    __nv_bfloat16& operator=(double f) { __x = cuda_cpu_float_to_bf16_bits((float)f); return *this; }
    operator __nv_bfloat16_raw() const { __nv_bfloat16_raw r; r.x = __x; return r; }
    operator float() const { return cuda_cpu_bf16_bits_to_float(__x); }
};
typedef __nv_bfloat16 nv_bfloat16;

struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __nv_bfloat162 nv_bfloat162;

static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return (float)h; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short bits) { __nv_bfloat16_raw r; r.x = bits; return __nv_bfloat16(r); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }

#define CUDA_CPU_BF16_BINARY(op)                                                                         \
    static inline __nv_bfloat16 operator op(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat16((float)a op (float)b); } \
    static inline __nv_bfloat16& operator op##=(__nv_bfloat16& a, __nv_bfloat16 b) { a = __nv_bfloat16((float)a op (float)b); return a; }
CUDA_CPU_BF16_BINARY(+)
CUDA_CPU_BF16_BINARY(-)
CUDA_CPU_BF16_BINARY(*)
CUDA_CPU_BF16_BINARY(/)
#undef CUDA_CPU_BF16_BINARY
static inline __nv_bfloat16 operator-(__nv_bfloat16 a) { __nv_bfloat16_raw r; r.x = (unsigned short)(a.__x ^ 0x8000u); return __nv_bfloat16(r); }
#define CUDA_CPU_BF16_COMPARE(op) \
    static inline bool operator op(__nv_bfloat16 a, __nv_bfloat16 b) { return (float)a op (float)b; }
CUDA_CPU_BF16_COMPARE(==)
CUDA_CPU_BF16_COMPARE(!=)
CUDA_CPU_BF16_COMPARE(<)
CUDA_CPU_BF16_COMPARE(<=)
CUDA_CPU_BF16_COMPARE(>)
CUDA_CPU_BF16_COMPARE(>=)
#undef CUDA_CPU_BF16_COMPARE

static inline __nv_bfloat16 __hadd(__nv_bfloat16 a, __nv_bfloat16 b) { return a + b; }
static inline __nv_bfloat16 __hmul(__nv_bfloat16 a, __nv_bfloat16 b) { return a * b; }
static inline __nv_bfloat16 __hsub(__nv_bfloat16 a, __nv_bfloat16 b) { return a - b; }
static inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) {
    return __nv_bfloat16((float)((double)(float)a * (double)(float)b + (double)(float)c));
}

// atomicAdd on bf16 (sm_80+): a compare-and-swap on the enclosing 32-bit word
static inline __nv_bfloat16 atomicAdd(__nv_bfloat16* address, __nv_bfloat16 val) {
    uintptr_t addr = (uintptr_t)address;
    uint32_t* word = (uint32_t*)(addr & ~(uintptr_t)3);
    const int shift = (addr & 2) ? 16 : 0;
    uint32_t old = __atomic_load_n(word, __ATOMIC_RELAXED);
    for (;;) {
        uint16_t cur = (uint16_t)(old >> shift);
        uint16_t sum = cuda_cpu_float_to_bf16_bits(cuda_cpu_bf16_bits_to_float(cur) + (float)val);
        uint32_t next = (old & ~(0xFFFFu << shift)) | ((uint32_t)sum << shift);
        if (__atomic_compare_exchange_n(word, &old, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
            return __ushort_as_bfloat16(cur);
        }
    }
}

#endif // CUDA_CPU_CUDA_BF16_H
