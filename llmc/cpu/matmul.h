/*
llmc/cpu/matmul.h: the CPU GEMMs, and the linear layer on them (the CPU side of llmc/cuda/matmul.cuh).

One entry point, row-major like the rest of llmc:

    matmul_gemm(prec, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc)
        C(M,N) = beta * C + op(A)(M,K) . op(B)(K,N),   op(X) = X or X^T (trans flag 1)

and the linear layer, fp32 with OpenMP (at the end of this file):

    matmul_forward(out, inp, weight, bias, B, T, C, OC)          out (B,T,OC) = inp (B,T,C) . weight^T (OC,C) + bias
                                                                 (bias (OC) or NULL)
    matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC)   all three gradients added (dbias NULL:
                                                                 none)
    matmul_backward_into(..., beta_inp, beta_weight)             each added (beta 1) or written (beta 0)
    matmul_backward_input / matmul_backward_weight / matmul_backward_bias   its three parts
    matmul_forward_bf16_input, matmul_backward_into_bf16_input   the same on an input stored in bf16 alone (the
                                                                 -p bf16 activations), and _weight_bf16_input its
                                                                 weight and bias gradients alone
    bf16_copy_row(o16, o, n)                                     a layer's bf16 copy of what it wrote (-p bf16 on
                                                                 oneDNN: matmul_bf16_shadow), for the GEMMs that read it

prec is MATMUL_FP32 or MATMUL_BF16. Which code does the fp32 work is chosen at build time:

    -DLLMC_BLAS_MKL        Intel MKL (pip wheels mkl + mkl-devel + mkl-include), cblas_sgemm
    -DLLMC_BLAS_OPENBLAS   OpenBLAS (pip wheel scipy-openblas32), scipy_cblas_sgemm
    -DLLMC_BLAS_OPENBLAS_SYSTEM  an OpenBLAS installed on the machine (Debian's libopenblas-dev,
                           pkg-config openblas), plain cblas_sgemm
    -DLLMC_BLAS_ONEDNN     oneDNN's matmul primitive (llmc/cpu/onednn_gemm.h; pip wheels onednn-cpu-gomp +
                           onednn-devel-cpu-gomp)
    none of them           matmul_gemm_blocked: the dependency-free kernel below

The blocked kernel gives each thread a rectangle of C, packs a K block of op(B) into panels of
NR columns and a block of op(A) into strips of MM_MR = 6 rows, both zero-padded, and runs a
6 x NR register tile over them (mm_gemm_blocked has the loop order). The fp32 micro-kernel is
chosen at run time from the CPU's features (matmul_isa; LLMC_MATMUL_ISA=avx512|avx2|generic
forces one the CPU supports): AVX-512 (NR = 32, 12 zmm accumulators), else AVX2 + FMA (NR = 16,
12 ymm accumulators), else the same 6 x 16 code for the build's target. Kernels are compiled with
target attributes, so one binary built for any x86-64 runs the best of them. Each element of C is
summed over k in ascending order by one thread, so results do not depend on the thread count (and
the AVX2 and AVX-512 kernels sum in the same order).

The bf16 path (MATMUL_BF16) is always this blocked driver (mm_gemm_blocked, one loop order for
both precisions) with a bf16 packing and micro-kernel: while a K block is packed, A and B are
rounded to bf16 (round to nearest even) and stored as pairs of consecutive k; products are summed
in fp32. On a CPU with AVX512-BF16 (Zen 4, Sapphire Rapids; asked at run time,
matmul_bf16_native) the inner loop is vdpbf16ps, two k per instruction; without it the same
bf16-rounded numbers are multiplied in fp32, which gives the same result up to the order of
two-term sums. C, beta and the accumulation stay fp32 (mixed precision: fp32 master weights, bf16
GEMM inputs).
Why not MKL's cblas_gemm_bf16bf16f32: on the AMD EPYC (Zen 4) this was written on it ran at
0.8x MKL's own sgemm (no bf16 fast path on AMD), while this kernel runs at ~1.5x sgemm.

With oneDNN in the build (-DLLMC_ONEDNN: every build whose BLAS is not none, when the wheels are there) the bf16
GEMMs run on oneDNN's bf16 kernels instead (brgemm on AVX512-BF16, AMX tiles on Intel CPUs that have them), on bf16
operands: an operand inside a registered mirror (matmul_bf16_mirror_add: a model's parameters, rounded to bf16 once
per optimizer step by llmc/cpu/cpu_model.h) is read from its bf16 copy; any other is rounded once per call into a
per-thread buffer (matmul_round_bf16, the same rounding as above). Where oneDNN has no bf16 kernel (AVX2-only CPUs,
or ONEDNN_MAX_CPU_ISA=AVX2) the built-in kernel runs them. On a CPU with AMX the same bf16 operands go to llmc's own
AMX kernel instead (llmc/cpu/amx_gemm.h; oneDNN 3.2's AMX kernel is slower: doc/cpu-speed.md).
LLMC_BF16_GEMM=builtin|onednn|amx chooses by hand (matmul_bf16_gemm), so every path stays selectable and timeable.
On oneDNN and the AMX kernel the linear layer's bias is the GEMM's own argument (no pass that copies it into the
rows, no read of them; the same bits; LLMC_ONEDNN_BIAS=0 copies it in and has the GEMM add onto it, as the fp32 and
built-in paths do).
*/
#ifndef LLMC_MATMUL_H
#define LLMC_MATMUL_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../utils.h"
#include "phase_time.h"
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#define MATMUL_X86 1   // the AVX-512 / AVX2 / AVX512-BF16 kernels exist (chosen at run time)
#else
#define MATMUL_X86 0
#endif

#if defined(LLMC_BLAS_MKL)
#include <mkl_cblas.h>
#include <mkl_service.h>
#define MATMUL_BACKEND "mkl"
#define MATMUL_CBLAS_SGEMM cblas_sgemm
#elif defined(LLMC_BLAS_OPENBLAS)
#include <cblas.h>          // scipy_openblas32's header: symbols carry a scipy_ prefix
#define MATMUL_BACKEND "openblas"
#define MATMUL_CBLAS_SGEMM scipy_cblas_sgemm
#elif defined(LLMC_BLAS_OPENBLAS_SYSTEM)
#include <cblas.h>          // a system OpenBLAS's header (or any cblas.h; the library is libopenblas)
#define MATMUL_BACKEND "openblas-system"
#define MATMUL_CBLAS_SGEMM cblas_sgemm
void openblas_set_num_threads(int num_threads);
int openblas_get_parallel(void); // 0 single-threaded build, 1 pthreads, 2 OpenMP
#elif defined(LLMC_BLAS_ONEDNN)
#ifndef LLMC_ONEDNN
#define LLMC_ONEDNN 1
#endif
#define MATMUL_BACKEND "onednn"
#else
#define MATMUL_BACKEND "blocked"
#endif
#if defined(LLMC_ONEDNN)
#include "onednn_gemm.h"
#endif
#include "amx_gemm.h"

// this thread's place in the OpenMP team it runs in: *nthreads threads, this one *thread (1 and 0 outside a parallel
// region, or without OpenMP)
static inline void parallel_team(int* nthreads, int* thread) {
    *nthreads = 1;
    *thread = 0;
#ifdef _OPENMP
    *nthreads = omp_get_num_threads();
    *thread = omp_get_thread_num();
#endif
}

// inside a parallel region: this thread's contiguous span [i0, i1) of N elements split over its team, each span a
// multiple of 16 elements long (64-byte aligned ones for floats where the buffer is)
static inline void parallel_span(size_t N, size_t* i0, size_t* i1) {
    int nt, t;
    parallel_team(&nt, &t);
    size_t per = (N + (size_t)nt - 1) / (size_t)nt;
    per = (per + 15) / 16 * 16;
    *i0 = (size_t)t * per < N ? (size_t)t * per : N;
    *i1 = *i0 + per < N ? *i0 + per : N;
}

typedef enum { MATMUL_FP32 = 0, MATMUL_BF16 = 1 } MatmulPrecision;

// The precision train_gpt2.c's matmul layers run in: set once at start-up (the trainer's -p
// flag), before any forward pass; fp32 unless set.
static MatmulPrecision matmul_precision __attribute__((unused)) = MATMUL_FP32;

// parses "fp32" / "bf16"; returns 0 on success, -1 for anything else
static inline int matmul_precision_parse(const char* s, MatmulPrecision* out) {
    if (strcmp(s, "fp32") == 0) { *out = MATMUL_FP32; return 0; }
    if (strcmp(s, "bf16") == 0) { *out = MATMUL_BF16; return 0; }
    return -1;
}

// register tile rows; k block (even: a block's bf16 pairs start on an even k); rows of op(A)
// packed at a time; columns of op(B) packed per k block (fp32: kc x 512 floats, 512 KB at kc 256;
// bf16 half that); how many rows ahead the row-by-row packing of op(B) prefetches. (Measured on a
// Zen 3 at the trainer's shapes: MM_MC 48-144 and MM_NCB 256-1024 all within a few per cent of
// each other.)
#define MM_MR 6
#define MM_KC 256
#define MM_MC 72
#define MM_NCB 512
#define MM_PREFETCH_ROWS 8

// The fp32 micro-kernel is chosen at run time from what the CPU reports (not from the build's
// -march, so one binary runs right on every x86-64):
//   MATMUL_ISA_AVX512   6 x 32 register tile of 16-float vectors (12 zmm accumulators)
//   MATMUL_ISA_AVX2     6 x 16 register tile of 8-float vectors (12 ymm accumulators, AVX2 + FMA)
//   MATMUL_ISA_GENERIC  the 6 x 16 code for whatever the build targets (no AVX2: correct, slow)
// LLMC_MATMUL_ISA=avx512|avx2|generic picks one by hand (tests run every path the CPU can);
// asking for one the CPU lacks is an error.
typedef enum { MATMUL_ISA_GENERIC = 0, MATMUL_ISA_AVX2 = 1, MATMUL_ISA_AVX512 = 2 } MatmulIsa;

static inline const char* matmul_isa_name(MatmulIsa isa) {
    return isa == MATMUL_ISA_AVX512 ? "avx512" : isa == MATMUL_ISA_AVX2 ? "avx2" : "generic";
}

// what this CPU can run: AVX-512 (F) with FMA, else AVX2 with FMA, else generic
static inline MatmulIsa matmul_isa_supported(void) {
#if MATMUL_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) { return MATMUL_ISA_AVX512; }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) { return MATMUL_ISA_AVX2; }
#endif
    return MATMUL_ISA_GENERIC;
}

// the fp32 micro-kernel in use: decided on the first call (LLMC_MATMUL_ISA, else the best supported)
static MatmulIsa matmul_isa(void) {
    static int chosen = -1;
    if (chosen >= 0) { return (MatmulIsa)chosen; }
    MatmulIsa best = matmul_isa_supported(), isa = best;
    const char* env = getenv("LLMC_MATMUL_ISA");
    if (env != NULL && env[0] != '\0') {
        if (strcmp(env, "avx512") == 0) { isa = MATMUL_ISA_AVX512; }
        else if (strcmp(env, "avx2") == 0) { isa = MATMUL_ISA_AVX2; }
        else if (strcmp(env, "generic") == 0) { isa = MATMUL_ISA_GENERIC; }
        else {
            fprintf(stderr, "error: LLMC_MATMUL_ISA=%s: use avx512, avx2 or generic\n", env);
            exit(1);
        }
        if (isa > best) {
            fprintf(stderr, "error: LLMC_MATMUL_ISA=%s: this CPU supports only %s\n", env, matmul_isa_name(best));
            exit(1);
        }
    }
    chosen = (int)isa;
    return isa;
}

// panel width (columns of op(B) per register tile) of a micro-kernel
static inline int mm_nr(MatmulIsa isa) { return isa == MATMUL_ISA_AVX512 ? 32 : 16; }

// 16 / 8 floats as GCC vectors; passed by pointer only (no vector-ABI questions)
typedef float mm_v16 __attribute__((vector_size(64)));
typedef float mm_v8 __attribute__((vector_size(32)));

static inline void mm_load16(mm_v16* v, const float* p) { memcpy(v, p, sizeof(*v)); }

// fp32 -> bf16 bits, round to nearest even (NaN kept quiet); the top 16 bits of a float
static inline uint16_t mm_bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) { return (uint16_t)((u >> 16) | 0x40u); }
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

// the same rounding without branches, so that loops that call it vectorise
static inline uint16_t matmul_bf16_round_value(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t quiet_nan = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

#if MATMUL_X86
// matmul_bf16_round_value on 16 lanes (AVX-512 F; asked at run time by the caller), each bf16 in the low half of its
// 32-bit lane: the same integer rounding, so denormals round as they are (AVX512-BF16's vcvtneps2bf16 would flush them
// to zero)
// (each 32-bit lane shifted right by 16 under an all-ones mask: GCC 12's unmasked form passes an undefined register,
// which -Wmaybe-uninitialized reports under -Werror where this is inlined into a function of its own without -march,
// as in the nvcc check's host code)
__attribute__((target("avx512f"), always_inline))
static inline __m512i mm16_shift16(__m512i u) { return _mm512_maskz_srli_epi32((__mmask16)0xffff, u, 16); }

__attribute__((target("avx512f"), always_inline))
static inline __m512i mm16_round_bf16_lanes(__m512 x) {
    __m512i u = _mm512_castps_si512(x);
    __m512i odd = _mm512_and_si512(mm16_shift16(u), _mm512_set1_epi32(1));
    __m512i rounded = mm16_shift16(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7fff))));
    __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    __m512i quiet_nan = _mm512_or_si512(mm16_shift16(u), _mm512_set1_epi32(0x40));
    return _mm512_mask_mov_epi32(rounded, nan, quiet_nan);
}

// AVX512-BF16's conversion (vcvtneps2bf16) rounds as matmul_bf16_round_value does (nearest even, a NaN made quiet)
// but flushes denormals to zero: a vector that holds one takes the integer rounding, so the bits are
// matmul_bf16_round_value's for every input (dev/test/test_matmul checks all 2^32), in a third of the integer
// rounding's time (3.7-3.9 against 8.7-9.6 cycles for 32 values on the AMX Xeon). Used where the CPU has AVX512-BF16
// (asked once); LLMC_BF16_CVT=0 keeps the integer rounding everywhere (the tests compare the two).
static int mm_bf16_cvt_state = -1;
static inline int mm_bf16_cvt_on(void) {
    if (mm_bf16_cvt_state < 0) {
        int has = 0;
#if MATMUL_X86
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
              __builtin_cpu_supports("avx512bf16");
#endif
        int on = env_switch_on("LLMC_BF16_CVT"); // (a bad value is an error on any CPU)
        mm_bf16_cvt_state = has && on;
    }
    return mm_bf16_cvt_state;
}

// (the callers of the helpers below carry MM_BF16_TARGET too, so that they inline; nothing in them runs an
// AVX512-BF16 or DQ instruction unless mm_bf16_cvt_on says the CPU has it)
#define MM_BF16_TARGET "avx512f,avx512bw,avx512dq,avx512bf16"

// the integer rounding of 16 lanes narrowed to 16 bf16
__attribute__((target("avx512f"), always_inline))
static inline __m256i mm16_round_bf16_int(__m512 x) { return _mm512_cvtepi32_epi16(mm16_round_bf16_lanes(x)); }

// 16 lanes rounded to bf16: the conversion where it gives the same bits
__attribute__((target(MM_BF16_TARGET), always_inline))
static inline __m256i mm16_round_bf16(__m512 x) {
    if (mm_bf16_cvt_on() && _mm512_fpclass_ps_mask(x, 0x20) == 0) { return (__m256i)_mm512_cvtneps_pbh(x); } // (0x20: denormal)
    return mm16_round_bf16_int(x);
}

// the integer rounding of 32 lanes, a then b, packed into one register of bf16 (one permute instead of two narrowings)
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline __m512i mm32_round_bf16_int(__m512 a, __m512 b) {
    const __m512i low_halves = _mm512_set_epi16(62, 60, 58, 56, 54, 52, 50, 48, 46, 44, 42, 40, 38, 36, 34, 32, 30, 28,
                                                26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    return _mm512_permutex2var_epi16(mm16_round_bf16_lanes(a), low_halves, mm16_round_bf16_lanes(b));
}

// 32 lanes rounded to bf16, a then b: the conversion where it gives the same bits
__attribute__((target(MM_BF16_TARGET), always_inline))
static inline __m512i mm32_round_bf16(__m512 a, __m512 b) {
    if (mm_bf16_cvt_on() && (_mm512_fpclass_ps_mask(a, 0x20) | _mm512_fpclass_ps_mask(b, 0x20)) == 0) {
        return (__m512i)_mm512_cvtne2ps_pbh(b, a); // (its second operand fills the low half)
    }
    return mm32_round_bf16_int(a, b);
}

// dst[0:n] = src[0:n] rounded (matmul_bf16_round_value's bits), 32 at a time (mm_bf16_cvt_on's CPU)
__attribute__((target(MM_BF16_TARGET)))
static void mm_round_bf16_row_cvt(uint16_t* dst, const float* src, size_t n) {
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        _mm512_storeu_si512((void*)(dst + i), mm32_round_bf16(_mm512_loadu_ps(src + i), _mm512_loadu_ps(src + i + 16)));
    }
    for (; i < n; i++) { dst[i] = matmul_bf16_round_value(src[i]); }
}

// the first n <= 16 bf16 of h stored at dst (n < 16: a row's tail, a masked store that touches nothing past
// dst[n - 1]). Call it with a constant 16 in a loop and the rest after it: GCC may turn a run-time test of n == 16
// into masked stores and loads everywhere, and a load of a masked store's bytes is not forwarded from the store
__attribute__((target("avx512f,avx512bw"), always_inline))
static inline void mm16_store_bf16_bits(uint16_t* dst, __m256i h, int n) {
    if (n == 16) {
        _mm256_storeu_si256((__m256i*)(void*)dst, h);
    } else {
        _mm512_mask_storeu_epi16((void*)dst, (__mmask32)((1u << n) - 1u), _mm512_castsi256_si512(h));
    }
}

// the first n <= 16 lanes of x rounded to bf16, stored at dst (as mm16_store_bf16_bits)
__attribute__((target(MM_BF16_TARGET), always_inline))
static inline void mm16_store_bf16(uint16_t* dst, __m512 x, int n) { mm16_store_bf16_bits(dst, mm16_round_bf16(x), n); }

// 16 bf16 as floats (mm_bf16_to_float on 16 lanes)
__attribute__((target("avx512f"), always_inline))
static inline __m512 mm16_bf16_to_float(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// the n <= 16 bf16 at p as floats, 0 past n (n < 16: a masked load that reads nothing past p[n - 1])
__attribute__((target(MM_BF16_TARGET), always_inline))
static inline __m512 mm16_load_bf16(const uint16_t* p, int n) {
    if (n == 16) { return mm16_bf16_to_float(_mm256_loadu_si256((const __m256i*)(const void*)p)); }
    __m512i h = _mm512_maskz_loadu_epi16((__mmask32)((1u << n) - 1u), (const void*)p);
    return mm16_bf16_to_float(_mm512_castsi512_si256(h));
}
#endif

static inline float mm_bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float x;
    memcpy(&x, &u, sizeof(x));
    return x;
}

// ----------------------------------------------------------------------------
// fp32 blocked kernel

// packs op(A)[i0:i0+mr, k0:k0+kc] as (kc, MM_MR) floats, rows past mr zero
static void mm_pack_a(void* dstv, const float* A, int lda, int transA, int i0, int mr, int k0, int kc) {
    float* dst = (float*)dstv;
    if (transA) { // row k of the stored A holds column k of op(A): MM_MR consecutive floats
        for (int k = 0; k < kc; k++) {
            const float* src = A + (size_t)(k0 + k) * lda + i0;
            for (int i = 0; i < MM_MR; i++) { dst[k * MM_MR + i] = i < mr ? src[i] : 0.0f; }
        }
    } else {
        for (int i = 0; i < MM_MR; i++) {
            const float* src = A + (size_t)(i0 + i) * lda + k0;
            for (int k = 0; k < kc; k++) { dst[k * MM_MR + i] = i < mr ? src[k] : 0.0f; }
        }
    }
}

// C[i0:i0+mc, j0:j0+nc] *= beta before a tile accumulates into it (beta 0 clears, so NaNs in C do not leak)
static inline void mm_scale_tile(float* C, int ldc, int i0, int j0, int mc, int nc, float beta) {
    for (int i = 0; i < mc; i++) {
        float* c = C + (size_t)(i0 + i) * ldc + j0;
        if (beta == 0.0f) { memset(c, 0, (size_t)nc * sizeof(float)); }
        else if (beta != 1.0f) { for (int j = 0; j < nc; j++) { c[j] *= beta; } }
    }
}

// asks early for the n floats at row (a row of a tall operand read row by row, MM_PREFETCH_ROWS ahead)
static inline void mm_prefetch_row(const float* row, int n) {
    const char* bytes = (const char*)row;
    for (int b = 0; b < n * (int)sizeof(float); b += 64) { __builtin_prefetch(bytes + b, 0, 0); }
}

// packs op(B)[k0:k0+kc, j0:j0+nc] as panels of (kc, nr) floats, columns past nc zero
static void mm_pack_b(void* dstv, const float* B, int ldb, int transB, int k0, int kc, int j0, int nc, int nr) {
    float* dst = (float*)dstv;
    int npanels = (nc + nr - 1) / nr;
    if (!transB) {
        // row by row: each row's nc floats are one contiguous read, and the row MM_PREFETCH_ROWS
        // ahead is asked for early (rows are ldb apart: a tall op(B), such as the lm_head's
        // (50304, 768) weight in the backward, otherwise waits on memory for every cache line)
        for (int k = 0; k < kc; k++) {
            const float* row = B + (size_t)(k0 + k) * ldb + j0;
            if (k + MM_PREFETCH_ROWS < kc) { mm_prefetch_row(row + (size_t)MM_PREFETCH_ROWS * ldb, nc); }
            for (int p = 0; p < npanels; p++) {
                float* dst_row = dst + (size_t)p * kc * nr + (size_t)k * nr;
                int jn = nc - p * nr < nr ? nc - p * nr : nr;
                if (jn == nr) { memcpy(dst_row, row + p * nr, (size_t)nr * sizeof(float)); }
                else { for (int j = 0; j < nr; j++) { dst_row[j] = j < jn ? row[p * nr + j] : 0.0f; } }
            }
        }
        return;
    }
    // op(B) = B^T: a panel's nr columns are nr rows of B, read side by side (nr sequential
    // streams) so each packed row of the panel is written whole
    for (int p = 0; p < npanels; p++) {
        float* panel = dst + (size_t)p * kc * nr;
        int jn = nc - p * nr < nr ? nc - p * nr : nr;
        const float* rows = B + (size_t)(j0 + p * nr) * ldb + k0;
        if (jn == nr) {
            for (int k = 0; k < kc; k++) {
                for (int j = 0; j < nr; j++) { panel[(size_t)k * nr + j] = rows[(size_t)j * ldb + k]; }
            }
        } else {
            for (int k = 0; k < kc; k++) {
                for (int j = 0; j < nr; j++) { panel[(size_t)k * nr + j] = j < jn ? rows[(size_t)j * ldb + k] : 0.0f; }
            }
        }
    }
}

// adds the register tile out (MM_MR, nrw) to C[0:mr, 0:nr]
static inline void mm_add_tile(float* C, int ldc, int mr, int nr, const float* out, int nrw) {
    for (int i = 0; i < mr; i++) {
        float* c = C + (size_t)i * ldc;
        for (int j = 0; j < nr; j++) { c[j] += out[i * nrw + j]; }
    }
}

// C[0:mr, 0:nr] += acc, the fp32 micro-kernels' register tile: MM_MR rows of two vectors of type VT
// (W floats each, so 2 * W columns). A full-width tile is added row by row in vectors; a narrower one
// is stored to memory and added by mm_add_tile. A macro, so that each kernel adds its own vector type
// inside its own target attribute.
#define MM_ADD_REGISTER_TILE(VT, C, ldc, mr, nr, acc)                                  \
    do {                                                                              \
        enum { W = sizeof(VT) / sizeof(float) };                                      \
        if ((nr) == 2 * W) {                                                          \
            for (int i = 0; i < (mr); i++) {                                          \
                float* c = (C) + (size_t)i * (ldc);                                   \
                VT c0, c1;                                                            \
                memcpy(&c0, c, sizeof(c0));                                           \
                memcpy(&c1, c + W, sizeof(c1));                                       \
                c0 += (acc)[i][0];                                                    \
                c1 += (acc)[i][1];                                                    \
                memcpy(c, &c0, sizeof(c0));                                           \
                memcpy(c + W, &c1, sizeof(c1));                                       \
            }                                                                         \
        } else {                                                                      \
            float out[MM_MR * 2 * W];                                                 \
            for (int i = 0; i < MM_MR; i++) {                                         \
                memcpy(out + i * 2 * W, &(acc)[i][0], sizeof(VT));                    \
                memcpy(out + i * 2 * W + W, &(acc)[i][1], sizeof(VT));                \
            }                                                                         \
            mm_add_tile(C, ldc, mr, nr, out, 2 * W);                                  \
        }                                                                             \
    } while (0)

#if MATMUL_X86
// C[0:mr, 0:nr] += Apack (kc, MM_MR) . Bpanel (kc, 32): AVX-512, one zmm pair per row
__attribute__((target("avx512f,fma")))
static void mm_kernel_f32_avx512(float* C, int ldc, int mr, int nr, const void* apack, const void* bpanel, int kc) {
    const float* a = (const float*)apack;
    const float* b = (const float*)bpanel;
    mm_v16 acc[MM_MR][2];
    for (int i = 0; i < MM_MR; i++) { acc[i][0] = (mm_v16){0}; acc[i][1] = (mm_v16){0}; }
    for (int k = 0; k < kc; k++) {
        mm_v16 b0, b1;
        mm_load16(&b0, b + k * 32);
        mm_load16(&b1, b + k * 32 + 16);
        for (int i = 0; i < MM_MR; i++) {
            float x = a[k * MM_MR + i];
            mm_v16 ai = {x, x, x, x, x, x, x, x, x, x, x, x, x, x, x, x}; // one broadcast
            acc[i][0] += ai * b0;
            acc[i][1] += ai * b1;
        }
    }
    MM_ADD_REGISTER_TILE(mm_v16, C, ldc, mr, nr, acc);
}
#endif

// the 6 x 16 tile over 8-float vectors: the body of the AVX2 and the generic kernel
__attribute__((always_inline))
static inline void mm_kernel_f32_6x16(float* C, int ldc, int mr, int nr, const float* a, const float* b, int kc) {
    mm_v8 acc[MM_MR][2];
    for (int i = 0; i < MM_MR; i++) { acc[i][0] = (mm_v8){0}; acc[i][1] = (mm_v8){0}; }
    for (int k = 0; k < kc; k++) {
        mm_v8 b0, b1;
        memcpy(&b0, b + k * 16, sizeof(b0));
        memcpy(&b1, b + k * 16 + 8, sizeof(b1));
        for (int i = 0; i < MM_MR; i++) {
            float x = a[k * MM_MR + i];
            mm_v8 ai = {x, x, x, x, x, x, x, x}; // one broadcast
            acc[i][0] += ai * b0;
            acc[i][1] += ai * b1;
        }
    }
    MM_ADD_REGISTER_TILE(mm_v8, C, ldc, mr, nr, acc);
}

#if MATMUL_X86
__attribute__((target("avx2,fma")))
static void mm_kernel_f32_avx2(float* C, int ldc, int mr, int nr, const void* apack, const void* bpanel, int kc) {
    mm_kernel_f32_6x16(C, ldc, mr, nr, (const float*)apack, (const float*)bpanel, kc);
}
#endif

static void mm_kernel_f32_generic(float* C, int ldc, int mr, int nr, const void* apack, const void* bpanel, int kc) {
    mm_kernel_f32_6x16(C, ldc, mr, nr, (const float*)apack, (const float*)bpanel, kc);
}

// ----------------------------------------------------------------------------
// the blocked driver (fp32 and bf16)

// What the driver needs of an element type: how op(A) and op(B) are packed and the micro-kernel
// over the packed blocks. A packed element is 4 bytes and holds k_per_elem consecutive k (a float,
// or two bf16 in a uint32), so a K block of kc is packed depth = ceil(kc / k_per_elem) deep:
//   pack_a   op(A)[i0:i0+mr, k0:k0+kc] as one strip (depth, MM_MR), rows past mr zero
//   pack_b   op(B)[k0:k0+kc, j0:j0+nc] as panels of (depth, nr), columns past nc zero
//   kernel   C[0:mr, 0:nr] += strip . panel, summed over the block from zero, then added to C
typedef void (*MmPackA)(void* dst, const float* A, int lda, int transA, int i0, int mr, int k0, int kc);
typedef void (*MmPackB)(void* dst, const float* B, int ldb, int transB, int k0, int kc, int j0, int nc, int nr);
typedef void (*MmKernel)(float* C, int ldc, int mr, int nr, const void* apack, const void* bpanel, int depth);

typedef struct {
    int nr;          // panel width: columns of op(B) per register tile
    int k_per_elem;  // 1 (fp32) or 2 (bf16 pairs)
    MmPackA pack_a;
    MmPackB pack_b;
    MmKernel kernel;
} MmGemmKind;

// per-thread packing buffers for op(B) and op(A) (4-byte elements), grown as needed and kept for
// the life of the thread. They hang on a pthread key whose destructor frees them when the thread
// ends: OpenMP ends threads when a team shrinks (omp_set_num_threads), and a __thread pointer would
// leak them then.
typedef struct {
    uint32_t* buf[2];
    size_t cap[2];
} MmPackBuffers;

static pthread_key_t mm_pack_key;
static pthread_once_t mm_pack_key_once = PTHREAD_ONCE_INIT;

static void mm_pack_buffers_free(void* p) {
    MmPackBuffers* b = (MmPackBuffers*)p;
    free(b->buf[0]);
    free(b->buf[1]);
    free(b);
}

static void mm_pack_key_create(void) {
    if (pthread_key_create(&mm_pack_key, mm_pack_buffers_free) != 0) {
        fprintf(stderr, "error: pthread_key_create failed (GEMM packing buffers)\n");
        exit(1);
    }
}

// this thread's buffer `which` (0: op(B), 1: op(A)), at least n 4-byte elements
static uint32_t* mm_pack_buffer(int which, size_t n) {
    pthread_once(&mm_pack_key_once, mm_pack_key_create);
    MmPackBuffers* b = (MmPackBuffers*)pthread_getspecific(mm_pack_key);
    if (b == NULL) {
        b = (MmPackBuffers*)calloc(1, sizeof(MmPackBuffers));
        if (b == NULL || pthread_setspecific(mm_pack_key, b) != 0) {
            fprintf(stderr, "error: out of memory (GEMM packing buffers)\n");
            exit(1);
        }
    }
    if (n > b->cap[which]) {
        free(b->buf[which]);
        b->buf[which] = (uint32_t*)aligned_alloc(64, (n * sizeof(uint32_t) + 63) & ~(size_t)63);
        if (b->buf[which] == NULL) {
            fprintf(stderr, "error: out of memory (%zu bytes for GEMM packing)\n", n * sizeof(uint32_t));
            exit(1);
        }
        b->cap[which] = n;
    }
    return b->buf[which];
}

// C(M,N) = beta * C + op(A) . op(B) with the packing and micro-kernel of `g`.
// Each thread computes its rectangle of C (gemm_thread_grid) in the usual cache-blocked order:
//   for each block of MM_NCB columns:
//     for each K block of MM_KC:    pack op(B) (kc, ncb) as panels of nr columns       (L2/L3)
//       for each block of MM_MC rows: pack op(A) (mc, kc) as strips of MM_MR rows    (L2)
//         for each panel:           one (kc, nr) panel stays in L1 ...
//           for each strip:         ... while the strips stream past it: C += strip . panel
// so op(A) and op(B) are each read from memory about once per call, whatever their shapes (the
// trainer's run from (256, 50304) . (50304, 768) to (50304, 256) . (256, 768)). Every element of C
// adds its K blocks in ascending order: results do not depend on the thread count.
static void mm_gemm_blocked(const MmGemmKind* g, int transA, int transB, int M, int N, int K,
                            const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    int nr = g->nr;
    // a small product runs on the calling thread (waking a team costs more than it saves)
    int parallel = (M > MM_MR || N > nr) && (double)M * N * K >= 2e6;
    #pragma omp parallel if (parallel)
    {
        int nthreads, thread;
        parallel_team(&nthreads, &thread);
        int pr, pc, r0, r1, c0, c1;
        gemm_thread_grid(M, N, nthreads, MM_MR, nr, 1.0, &pr, &pc);
        split_units(M, pr, thread / pc, MM_MR, &r0, &r1);
        split_units(N, pc, thread % pc, nr, &c0, &c1);
        if (r0 < r1 && c0 < c1) {
            mm_scale_tile(C, ldc, r0, c0, r1 - r0, c1 - c0, beta);
            uint32_t* bpack = mm_pack_buffer(0, (size_t)MM_KC * MM_NCB);
            uint32_t* apack = mm_pack_buffer(1, (size_t)MM_KC * MM_MC);
            for (int j0 = c0; j0 < c1; j0 += MM_NCB) {
                int nc = c1 - j0 < MM_NCB ? c1 - j0 : MM_NCB;
                for (int k0 = 0; k0 < K; k0 += MM_KC) {
                    int kc = K - k0 < MM_KC ? K - k0 : MM_KC;
                    int depth = (kc + g->k_per_elem - 1) / g->k_per_elem;
                    g->pack_b(bpack, B, ldb, transB, k0, kc, j0, nc, nr);
                    for (int i0 = r0; i0 < r1; i0 += MM_MC) {
                        int mc = r1 - i0 < MM_MC ? r1 - i0 : MM_MC;
                        for (int ii = 0; ii < mc; ii += MM_MR) {
                            int mr = mc - ii < MM_MR ? mc - ii : MM_MR;
                            g->pack_a(apack + (size_t)ii * depth, A, lda, transA, i0 + ii, mr, k0, kc);
                        }
                        for (int jj = 0; jj < nc; jj += nr) {
                            int nrr = nc - jj < nr ? nc - jj : nr;
                            const uint32_t* panel = bpack + (size_t)jj * depth;
                            for (int ii = 0; ii < mc; ii += MM_MR) {
                                int mr = mc - ii < MM_MR ? mc - ii : MM_MR;
                                g->kernel(C + (size_t)(i0 + ii) * ldc + j0 + jj, ldc, mr, nrr, apack + (size_t)ii * depth, panel, depth);
                            }
                        }
                    }
                }
            }
        }
    }
}

// C(M,N) = beta * C + op(A) . op(B) with the fp32 blocked kernel of this CPU (matmul_isa)
static void matmul_gemm_blocked_f32(int transA, int transB, int M, int N, int K,
                                    const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    MatmulIsa isa = matmul_isa();
    MmGemmKind g = {mm_nr(isa), 1, mm_pack_a, mm_pack_b, mm_kernel_f32_generic}; // (generic: the only one off x86)
#if MATMUL_X86
    if (isa == MATMUL_ISA_AVX512) { g.kernel = mm_kernel_f32_avx512; }
    if (isa == MATMUL_ISA_AVX2) { g.kernel = mm_kernel_f32_avx2; }
#endif
    mm_gemm_blocked(&g, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

// ----------------------------------------------------------------------------
// bf16: the same driver; while a K block is packed its elements are rounded to bf16 and stored
// as pairs (two consecutive k in one uint32, even k in the low half: the operand layout of
// vdpbf16ps), op(A) as strips of MM_MR rows, op(B) as panels of MM_NR columns, each
// (ceil(kc/2), width); padding (and the odd k of an odd K) is zero. The MM_MR x MM_NR register
// tile sums a K block's pairs from zero in fp32 and adds the block to C.

#define MM_NR 32   // bf16 panel width: the two zmm of vdpbf16ps (the emulation keeps the layout)

static inline uint32_t mm_bf16_pair(float lo, float hi) {
    return (uint32_t)mm_bf16_round(lo) | ((uint32_t)mm_bf16_round(hi) << 16);
}

// 1 when this CPU has AVX512-BF16 (vdpbf16ps, vcvtne2ps2bf16), asked once; LLMC_BF16_NATIVE=0
// runs the emulation on such a CPU (tests)
static int matmul_bf16_native(void) {
    static int native = -1;
    if (native < 0) {
        int has = 0;
#if MATMUL_X86
        __builtin_cpu_init();
        has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bf16");
#endif
        const char* env = getenv("LLMC_BF16_NATIVE");
        if (env != NULL && strcmp(env, "0") == 0) { has = 0; }
        native = has;
    }
    return native;
}

#if MATMUL_X86
__attribute__((target("avx512f,avx512bf16")))
static int mm_bf16_pairs_native(uint32_t* out, const float* x, int n) {
    int p = 0;
    for (; 2 * p + 32 <= n; p += 16) {
        __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + 2 * p + 16), _mm512_loadu_ps(x + 2 * p));
        _mm512_storeu_si512((void*)(out + p), (__m512i)v);
    }
    return p;
}
#endif

// out[p] = pair(x[2p], x[2p+1]) for p < n/2 (n even): contiguous k pairs
static inline void mm_bf16_pairs_contiguous(uint32_t* out, const float* x, int n) {
    int p = 0;
#if MATMUL_X86
    if (matmul_bf16_native()) { p = mm_bf16_pairs_native(out, x, n); }
#endif
    for (; 2 * p < n; p++) { out[p] = mm_bf16_pair(x[2 * p], x[2 * p + 1]); }
}

// Packs rows [r0, r0+rn) of X = op(stored X), k in [k0, k0+kc), as bf16 pairs in blocks of W rows
// (W = MM_MR or MM_NR): block b is (kp, W), kp = ceil(kc/2), its [p][w] = pair(X(r0+b*W+w, k0+2p),
// X(r0+b*W+w, k0+2p+1)); rows past rn and the k past an odd kc are zero.
// pairs_contiguous: X(r, k) is stored at X[r*ld + k] (a row's pairs side by side);
// otherwise at X[k*ld + r] (rows k and k+1 of the stored matrix hold a pair's two halves).
static void mm_pack_bf16(uint32_t* dst, const float* X, int ld, int pairs_contiguous, int r0, int rn, int k0, int kc, int W) {
    int kp = (kc + 1) / 2;
    int nblk = (rn + W - 1) / W;
    if (pairs_contiguous) {
        // row by row: a row's kc floats are one contiguous read, converted, then spread over the
        // row's column w of its block
        uint32_t pairs[MM_KC / 2];
        for (int r = 0; r < nblk * W; r++) {
            uint32_t* d = dst + (size_t)(r / W) * kp * W + r % W;
            if (r >= rn) {
                for (int p = 0; p < kp; p++) { d[(size_t)p * W] = 0u; }
                continue;
            }
            const float* x = X + (size_t)(r0 + r) * ld + k0;
            mm_bf16_pairs_contiguous(pairs, x, kc & ~1);
            if (kc & 1) { pairs[kp - 1] = mm_bf16_pair(x[kc - 1], 0.0f); }
            for (int p = 0; p < kp; p++) { d[(size_t)p * W] = pairs[p]; }
        }
        return;
    }
    // pair by pair: rows k0+2p and k0+2p+1 of the stored matrix hold pair p of every row of X;
    // they are read front to back (the rows MM_PREFETCH_ROWS ahead asked for early, as for fp32's
    // op(B)) and each block gets its W pairs in turn
    for (int p = 0; p < kp; p++) {
        const float* lo = X + (size_t)(k0 + 2 * p) * ld + r0;
        const float* hi = 2 * p + 1 < kc ? lo + ld : NULL;
        for (int k = 2 * p + MM_PREFETCH_ROWS; k < 2 * p + MM_PREFETCH_ROWS + 2 && k < kc; k++) {
            mm_prefetch_row(lo + (size_t)(k - 2 * p) * ld, rn);
        }
        for (int blk = 0; blk < nblk; blk++) {
            int w0 = blk * W, wn = rn - w0 < W ? rn - w0 : W;
            uint32_t* dp = dst + ((size_t)blk * kp + p) * W;
            if (wn == W && hi != NULL) {
                for (int w = 0; w < W; w++) { dp[w] = mm_bf16_pair(lo[w0 + w], hi[w0 + w]); }
            } else {
                for (int w = 0; w < W; w++) {
                    float a = w < wn ? lo[w0 + w] : 0.0f;
                    float b = (w < wn && hi != NULL) ? hi[w0 + w] : 0.0f;
                    dp[w] = mm_bf16_pair(a, b);
                }
            }
        }
    }
}

// one strip of op(A) and the panels of op(B) of a K block, as bf16 pairs (MmGemmKind's pack_a, pack_b)
static void mm_pack_a_bf16(void* dst, const float* A, int lda, int transA, int i0, int mr, int k0, int kc) {
    mm_pack_bf16((uint32_t*)dst, A, lda, !transA, i0, mr, k0, kc, MM_MR);
}

static void mm_pack_b_bf16(void* dst, const float* B, int ldb, int transB, int k0, int kc, int j0, int nc, int nr) {
    mm_pack_bf16((uint32_t*)dst, B, ldb, transB, j0, nc, k0, kc, nr);
}

#if MATMUL_X86
// out (MM_MR, MM_NR) = Astrip (kp, MM_MR) . Bpanel (kp, MM_NR) over kp k pairs, with vdpbf16ps
__attribute__((target("avx512f,avx512bf16")))
static void mm_kernel_bf16_native(float* out, const uint32_t* a, const uint32_t* b, int kp) {
    __m512 acc[MM_MR][2];
    for (int i = 0; i < MM_MR; i++) { acc[i][0] = _mm512_setzero_ps(); acc[i][1] = _mm512_setzero_ps(); }
    for (int k = 0; k < kp; k++) {
        __m512bh b0 = (__m512bh)_mm512_loadu_si512((const void*)(b + k * MM_NR));
        __m512bh b1 = (__m512bh)_mm512_loadu_si512((const void*)(b + k * MM_NR + 16));
        for (int i = 0; i < MM_MR; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)a[k * MM_MR + i]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], ai, b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], ai, b1);
        }
    }
    for (int i = 0; i < MM_MR; i++) {
        _mm512_storeu_ps(out + i * MM_NR, acc[i][0]);
        _mm512_storeu_ps(out + i * MM_NR + 16, acc[i][1]);
    }
}
#endif

// the same bf16 numbers, multiplied in fp32: (even k product + odd k product) per step
static void mm_kernel_bf16_emulated(float* out, const uint32_t* a, const uint32_t* b, int kp) {
    for (int i = 0; i < MM_MR * MM_NR; i++) { out[i] = 0.0f; }
    for (int k = 0; k < kp; k++) {
        for (int i = 0; i < MM_MR; i++) {
            uint32_t ap = a[k * MM_MR + i];
            float a0 = mm_bf16_to_float((uint16_t)(ap & 0xffffu)), a1 = mm_bf16_to_float((uint16_t)(ap >> 16));
            for (int j = 0; j < MM_NR; j++) {
                uint32_t bp = b[k * MM_NR + j];
                out[i * MM_NR + j] += a0 * mm_bf16_to_float((uint16_t)(bp & 0xffffu)) + a1 * mm_bf16_to_float((uint16_t)(bp >> 16));
            }
        }
    }
}

// C[0:mr, 0:nr] += Astrip (kp, MM_MR) . Bpanel (kp, MM_NR) over kp k pairs (MmGemmKind's kernel)
static void mm_kernel_bf16(float* C, int ldc, int mr, int nr, const void* apack, const void* bpanel, int kp) {
    const uint32_t* a = (const uint32_t*)apack;
    const uint32_t* b = (const uint32_t*)bpanel;
    float out[MM_MR * MM_NR];
#if MATMUL_X86
    if (matmul_bf16_native()) { mm_kernel_bf16_native(out, a, b, kp); }
    else { mm_kernel_bf16_emulated(out, a, b, kp); }
#else
    mm_kernel_bf16_emulated(out, a, b, kp);
#endif
    mm_add_tile(C, ldc, mr, nr, out, MM_NR);
}

// C(M,N) = beta * C + bf16(op(A)) . bf16(op(B)), fp32 sums
static void matmul_gemm_blocked_bf16(int transA, int transB, int M, int N, int K,
                                     const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    (void)matmul_bf16_native(); // asked here, before the threads start
    MmGemmKind g = {MM_NR, 2, mm_pack_a_bf16, mm_pack_b_bf16, mm_kernel_bf16};
    mm_gemm_blocked(&g, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

// C(M,N) = beta * C + op(A) . op(B) with the dependency-free kernels (fp32 or bf16 inputs)
static void matmul_gemm_blocked(MatmulPrecision prec, int transA, int transB, int M, int N, int K,
                                const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) { return; }
    if (prec == MATMUL_BF16) { matmul_gemm_blocked_bf16(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc); }
    else { matmul_gemm_blocked_f32(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc); }
}

// ----------------------------------------------------------------------------
// The GEMMs' own time, for make bench's "outside the GEMMs" column: with LLMC_GEMM_TIME=1 every matmul_gemm called
// outside an OpenMP parallel region (the matmul layers, the lm_head, Muon; not the attention's per-head products,
// which run inside one) adds the seconds of its BLAS / oneDNN / built-in kernel call to matmul_gemm_seconds, the
// bf16 roundings of its operands left out. A trainer calls matmul_gemm_clock_step() as each optimizer step begins:
// the clock counts from the second step on (the first warms up: first touches of the buffers, oneDNN's primitives;
// llmc/trainer.h leaves it out of the average step time too), and the program prints at exit
//     gemm time: 3012.5 ms in 1176 calls over 4 steps (LLMC_GEMM_TIME=1, the first step left out)
static double matmul_gemm_seconds = 0.0;
static long matmul_gemm_calls = 0;
static long matmul_gemm_steps = 0;  // steps counted: those begun after the first
static long mm_gemm_steps_begun = 0;

static void mm_gemm_clock_report(void) {
    printf("gemm time: %.1f ms in %ld calls over %ld steps (LLMC_GEMM_TIME=1, the first step left out)\n",
           1000.0 * matmul_gemm_seconds, matmul_gemm_calls, matmul_gemm_steps);
}

static int mm_gemm_clock_on(void) {
    static int on = -1;
    if (on < 0) {
        const char* env = getenv("LLMC_GEMM_TIME");
        on = env != NULL && strcmp(env, "1") == 0;
        if (on) { atexit(mm_gemm_clock_report); }
    }
#ifdef _OPENMP
    if (omp_in_parallel()) { return 0; }
#endif
    return on;
}

// the clock starts again from zero (after the start-up calibration, which is not training)
static void matmul_gemm_clock_reset(void) {
    matmul_gemm_seconds = 0.0;
    matmul_gemm_calls = 0;
}

// an optimizer step begins: the first and the second start the clock from zero (the second ends the warm-up step)
static void matmul_gemm_clock_step(void) {
    mm_gemm_steps_begun++;
    if (mm_gemm_steps_begun <= 2) { matmul_gemm_clock_reset(); }
    matmul_gemm_steps = mm_gemm_steps_begun - 1;
}

static inline double mm_clock_start(void) { return mm_gemm_clock_on() ? wall_seconds() : 0.0; }

static inline void mm_clock_stop(double t0) {
    if (t0 != 0.0) {
        matmul_gemm_seconds += wall_seconds() - t0;
        matmul_gemm_calls++;
    }
}

// ----------------------------------------------------------------------------
// bf16 on oneDNN: bf16 operands, a weight read from its mirror, anything else rounded once per call

// dst[0:n] = src[0:n] rounded to bf16 as mm_bf16_round does (nearest even, NaN kept quiet), without branches so
// that the compiler vectorises it
static void mm_round_bf16_row(uint16_t* dst, const float* src, size_t n) {
#if MATMUL_X86
    if (mm_bf16_cvt_on()) {
        mm_round_bf16_row_cvt(dst, src, n);
        return;
    }
#endif
    for (size_t i = 0; i < n; i++) { dst[i] = matmul_bf16_round_value(src[i]); }
}

// dst (rows, cols) = the (rows, cols) matrix X (row stride ld) rounded to bf16, rows shared by the threads
static void matmul_round_bf16(uint16_t* dst, const float* X, size_t rows, size_t cols, size_t ld) {
    double t = phase_begin();
    #pragma omp parallel for schedule(static) if (rows * cols >= ((size_t)1 << 16))
    for (size_t r = 0; r < rows; r++) { mm_round_bf16_row(dst + r * cols, X + r * ld, cols); }
    phase_end(PHASE_BF16, t, 6.0 * rows * cols, 0.0); // fp32 read, bf16 written
}

// Mirrors: bf16 copies of fp32 buffers that bf16 GEMMs read again and again (a model's parameters, and the
// activations and activation gradients that GEMMs read). An operand that lies wholly inside a registered
// [base, base + n) is read from the copy at the same offset, not rounded again. The owner keeps the copy equal to the
// rounded buffer before a bf16 GEMM reads it: llmc/cpu/cpu_model.h refreshes its parameters' copy at the first
// forward pass after they changed (or the optimizer writes it as it updates), and every layer that writes an
// activation with a mirror writes its copy in the same pass (matmul_bf16_shadow gives it the copy). Registered and
// removed outside any GEMM. LLMC_BF16_CHECK_MIRRORS=1 compares every mirrored operand with its fp32 buffer before
// the GEMM reads it and stops at the first stale element (the tests run every family's -p bf16 step so).
// A mirror may hold its buffer in bf16 alone (matmul_bf16_mirror_set_alone): when the bf16 GEMMs are the only
// readers of an activation, its layers write the copy and leave the fp32 buffer unwritten (matmul_bf16_fp32_kept
// says which); under LLMC_BF16_CHECK_MIRRORS=1 they fill the fp32 buffer with NaN instead (matmul_bf16_alone_written),
// so that a reader of it that was missed turns the loss into NaN.
#define MATMUL_MAX_MIRRORS 32
typedef struct {
    const float* base;
    size_t n;
    const uint16_t* bf16;
    int alone;  // the fp32 buffer is not written on the bf16 path: the copy is the tensor
} MatmulBf16Mirror;
static MatmulBf16Mirror mm_mirrors[MATMUL_MAX_MIRRORS];
static int mm_num_mirrors = 0;

static void matmul_bf16_mirror_add(const float* base, size_t n, const uint16_t* bf16) {
    if (mm_num_mirrors == MATMUL_MAX_MIRRORS) { llmc_die("internal: more than %d bf16 mirrors", MATMUL_MAX_MIRRORS); }
    mm_mirrors[mm_num_mirrors++] = (MatmulBf16Mirror){base, n, bf16, 0};
}

// whether the mirror of base (registered) holds its buffer in bf16 alone from now on (1) or beside the fp32 (0)
static void matmul_bf16_mirror_set_alone(const float* base, int alone) {
    for (int i = 0; i < mm_num_mirrors; i++) {
        if (mm_mirrors[i].base == base) { mm_mirrors[i].alone = alone; }
    }
}

static void matmul_bf16_mirror_remove(const float* base) {
    for (int i = 0; i < mm_num_mirrors; i++) {
        if (mm_mirrors[i].base == base) {
            mm_mirrors[i] = mm_mirrors[--mm_num_mirrors];
            return;
        }
    }
}

// the mirror that holds all of the stored (rows, cols) operand X (row stride ld), or NULL
static const MatmulBf16Mirror* mm_bf16_mirror_holding(const float* X, size_t rows, size_t cols, size_t ld) {
    uintptr_t x = (uintptr_t)X;
    size_t extent = (rows - 1) * ld + cols;
    for (int i = 0; i < mm_num_mirrors; i++) {
        const MatmulBf16Mirror* m = &mm_mirrors[i];
        uintptr_t base = (uintptr_t)m->base;
        if (x >= base && (x - base) % sizeof(float) == 0 && (x - base) / sizeof(float) + extent <= m->n) { return m; }
    }
    return NULL;
}

// the bf16 copy of the stored (rows, cols) operand X (row stride ld) when one mirror holds all of it, else NULL
static const uint16_t* mm_bf16_mirror_of(const float* X, size_t rows, size_t cols, size_t ld) {
    const MatmulBf16Mirror* m = mm_bf16_mirror_holding(X, rows, cols, ld);
    return m != NULL ? m->bf16 + ((uintptr_t)X - (uintptr_t)m->base) / sizeof(float) : NULL;
}

// 1 when the operand lies in a mirror that holds it in bf16 alone on this run's bf16 path (its fp32 is not written)
static int mm_bf16_mirror_alone(const float* X, size_t rows, size_t cols, size_t ld) {
    if (mm_num_mirrors == 0 || X == NULL || matmul_precision != MATMUL_BF16) { return 0; }
    const MatmulBf16Mirror* m = mm_bf16_mirror_holding(X, rows, cols, ld);
    return m != NULL && m->alone;
}

// whether a layer that writes [X, X + n) writes its fp32 values (1), or only the bf16 copy that matmul_bf16_shadow
// gives it (0: X's mirror holds it in bf16 alone, and the GEMMs that read X run in bf16)
static inline int matmul_bf16_fp32_kept(const float* X, size_t n) {
    return n == 0 || !mm_bf16_mirror_alone(X, 1, n, n);
}

static int matmul_bf16_check_mirrors(void) {
    static int check = -1;
    if (check < 0) {
        const char* env = getenv("LLMC_BF16_CHECK_MIRRORS");
        check = env != NULL && strcmp(env, "1") == 0;
    }
    return check;
}

// a layer that wrote [X, X + n) in bf16 alone calls this: under LLMC_BF16_CHECK_MIRRORS=1 X's fp32 values become NaN,
// so that any reader of them shows (the fp32 may hold an older tensor's values, which would pass unnoticed)
static void matmul_bf16_alone_written(float* X, size_t n) {
    if (X == NULL || matmul_bf16_fp32_kept(X, n) || !matmul_bf16_check_mirrors()) { return; }
    for (size_t i = 0; i < n; i++) { X[i] = NAN; }
}

// the writable bf16 copy of [X, X + n) when a registered mirror covers it, else NULL: a layer that writes X writes
// the copy too (dst16[i] = matmul_bf16_round_value(dst[i])), so that the GEMMs that read X do not round it
static inline uint16_t* matmul_bf16_shadow(const float* X, size_t n) {
    if (mm_num_mirrors == 0 || X == NULL || n == 0) { return NULL; }
    return (uint16_t*)mm_bf16_mirror_of(X, 1, n, n);
}

// bf16 copies: a layer whose output a GEMM reads writes the output's bf16 copy in the same pass when it has one
// (matmul_bf16_shadow's; NULL otherwise), so that no GEMM rounds it again: o16 (n) = o (n) rounded
static inline void bf16_copy_row(uint16_t* o16, const float* o, size_t n) {
    if (o16 != NULL) { mm_round_bf16_row(o16, o, n); }
}

// the first element (r * ld + c) of the (rows, cols) operand X whose bf16 copy in mirror is not X rounded, or -1
static long matmul_bf16_mirror_stale_at(const uint16_t* mirror, const float* X, size_t rows, size_t cols, size_t ld) {
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            if (mirror[r * ld + c] != matmul_bf16_round_value(X[r * ld + c])) { return (long)(r * ld + c); }
        }
    }
    return -1;
}

// LLMC_BF16_CHECK_MIRRORS=1: a mirrored operand's copy must equal its fp32 buffer rounded, element for element
static void mm_check_mirror(const uint16_t* mirror, const float* X, size_t rows, size_t cols, size_t ld) {
    if (!matmul_bf16_check_mirrors() || mm_bf16_mirror_alone(X, rows, cols, ld)) { return; } // (alone: no fp32)
    long at = matmul_bf16_mirror_stale_at(mirror, X, rows, cols, ld);
    if (at >= 0) {
        llmc_die("internal: the bf16 copy of a %zu x %zu GEMM operand is stale at element %ld: 0x%04x, its fp32 value "
                 "%g rounds to 0x%04x (LLMC_BF16_CHECK_MIRRORS=1)", rows, cols, at, mirror[at], X[at],
                 matmul_bf16_round_value(X[at]));
    }
}

// a stored operand (rows, cols, row stride ld) as bf16: its mirror, or rounded into this thread's packing buffer
// `which` (dense: its row stride, *ld_out, is then cols)
static const uint16_t* mm_bf16_operand(const float* X, int rows, int cols, int ld, int which, int* ld_out) {
    const uint16_t* mirror = mm_bf16_mirror_of(X, (size_t)rows, (size_t)cols, (size_t)ld);
    *ld_out = ld;
    if (mirror != NULL) {
        mm_check_mirror(mirror, X, (size_t)rows, (size_t)cols, (size_t)ld);
        return mirror;
    }
    uint16_t* buf = (uint16_t*)mm_pack_buffer(which, ((size_t)rows * cols + 1) / 2);
    matmul_round_bf16(buf, X, (size_t)rows, (size_t)cols, (size_t)ld);
    *ld_out = cols;
    return buf;
}

// Which code runs the bf16 GEMMs, decided once: on a CPU with AMX (and the OS letting this process use it) llmc's own
// AMX kernel (llmc/cpu/amx_gemm.h) in a build that has oneDNN (it shares oneDNN's bf16 operands: the weights' mirrors,
// the activations stored in bf16); else oneDNN in a build that has it; else the built-in kernel above. Where oneDNN
// has no bf16 kernel on this CPU (only its reference code, or nothing) -p bf16 trains in fp32, and a bf16 GEMM that
// is run anyway (LLMC_BF16=force) falls back to the built-in kernel. LLMC_BF16_GEMM=builtin|onednn|amx chooses by
// hand (onednn keeps oneDNN's brg:avx512_core_amx on an AMX CPU); onednn where oneDNN has no bf16 kernel, or amx
// where this process may not use AMX, is an error.
typedef enum { MATMUL_BF16_BUILTIN = 0, MATMUL_BF16_ONEDNN = 1, MATMUL_BF16_AMX = 2 } MatmulBf16Gemm;
static MatmulBf16Gemm mm_bf16_gemm_chosen = MATMUL_BF16_BUILTIN;
static char mm_bf16_onednn_kernel[96] = ""; // the kernel oneDNN picks for a trainer-sized bf16 GEMM, "" for none
static pthread_once_t mm_bf16_gemm_once = PTHREAD_ONCE_INIT;

static void mm_bf16_gemm_decide(void) {
#if defined(LLMC_ONEDNN)
    const char* kernel = onednn_gemm_kernel(ONEDNN_BF16, 256, 768, 768);
    snprintf(mm_bf16_onednn_kernel, sizeof(mm_bf16_onednn_kernel), "%s", kernel != NULL ? kernel : "");
#endif
    int onednn_has = mm_bf16_onednn_kernel[0] != '\0';
    const char* env = getenv("LLMC_BF16_GEMM");
    if (env == NULL || env[0] == '\0') {
#if defined(LLMC_ONEDNN)
        // (oneDNN also where it has no bf16 kernel: -p bf16 then trains fp32)
        mm_bf16_gemm_chosen = onednn_has && amx_usable() ? MATMUL_BF16_AMX : MATMUL_BF16_ONEDNN;
#else
        mm_bf16_gemm_chosen = MATMUL_BF16_BUILTIN;
#endif
    } else if (strcmp(env, "builtin") == 0) {
        mm_bf16_gemm_chosen = MATMUL_BF16_BUILTIN;
    } else if (strcmp(env, "onednn") == 0 || strcmp(env, "amx") == 0) {
#if !defined(LLMC_ONEDNN)
        llmc_die("LLMC_BF16_GEMM=%s: this build has no oneDNN (build with BLAS=onednn, or a BLAS other than none "
                 "with the onednn-cpu-gomp wheels: make setup)", env);
#endif
        if (strcmp(env, "amx") == 0) {
            if (!amx_usable()) { llmc_die("LLMC_BF16_GEMM=amx: this CPU has no AMX (amx_bf16), or the OS does not let this process use it"); }
            mm_bf16_gemm_chosen = MATMUL_BF16_AMX;
        } else {
            if (!onednn_has) { llmc_die("LLMC_BF16_GEMM=onednn: oneDNN has no bf16 GEMM kernel on this CPU"); }
            mm_bf16_gemm_chosen = MATMUL_BF16_ONEDNN;
        }
    } else {
        llmc_die("LLMC_BF16_GEMM=%s: use builtin, onednn or amx", env);
    }
}

static MatmulBf16Gemm matmul_bf16_gemm(void) {
    pthread_once(&mm_bf16_gemm_once, mm_bf16_gemm_decide);
    return mm_bf16_gemm_chosen;
}

// 1 when the bf16 GEMMs take bf16 operands (oneDNN's and the AMX kernel): the mirrors and the activations stored in
// bf16 serve them; the built-in kernel rounds fp32 operands as it packs them
static int matmul_bf16_takes_bf16(void) {
    MatmulBf16Gemm g = matmul_bf16_gemm();
    return g == MATMUL_BF16_ONEDNN || g == MATMUL_BF16_AMX;
}

// the kernel oneDNN picks for bf16 GEMMs here ("brg:avx512_core_bf16"), or "" where it has none (or no oneDNN)
static const char* matmul_bf16_onednn_kernel(void) {
    pthread_once(&mm_bf16_gemm_once, mm_bf16_gemm_decide);
    return mm_bf16_onednn_kernel;
}

#if defined(LLMC_ONEDNN)
// C = beta * C + op(A16) . op(B16) (+ bias on every row, beta 0) on bf16 operands: on the AMX kernel where it was
// chosen, else on oneDNN; -1 where neither has a kernel for it (nothing done)
static int mm_gemm_bf16_operands(int transA, int transB, int M, int N, int K, const uint16_t* A16, int lda,
                                 const uint16_t* B16, int ldb, float beta, const float* bias, float* C, int ldc) {
    if (matmul_bf16_gemm() == MATMUL_BF16_AMX &&
        amx_gemm_bf16(transA, transB, M, N, K, A16, lda, B16, ldb, beta, bias, C, ldc) == 0) {
        return 0;
    }
    if (bias != NULL) { return onednn_gemm_bias(ONEDNN_BF16, transA, transB, M, N, K, A16, lda, B16, ldb, bias, C, ldc); }
    return onednn_gemm(ONEDNN_BF16, transA, transB, M, N, K, A16, lda, B16, ldb, beta, C, ldc);
}
#endif

#if defined(LLMC_ONEDNN)
// C(M,N) = beta * C + bf16(op(A)) . bf16(op(B)) on oneDNN, fp32 sums; -1 when oneDNN has no kernel for it
static int matmul_gemm_onednn_bf16(int transA, int transB, int M, int N, int K, const float* A, int lda,
                                   const float* B, int ldb, float beta, float* C, int ldc) {
    if (M <= 0 || N <= 0) { return 0; }
    if (K <= 0) { return onednn_gemm(ONEDNN_BF16, transA, transB, M, N, K, NULL, lda, NULL, ldb, beta, C, ldc); }
    int lda16, ldb16;
    const uint16_t* A16 = mm_bf16_operand(A, transA ? K : M, transA ? M : K, lda, 1, &lda16);
    const uint16_t* B16 = mm_bf16_operand(B, transB ? N : K, transB ? K : N, ldb, 0, &ldb16);
    double t0 = mm_clock_start();
    int rc = mm_gemm_bf16_operands(transA, transB, M, N, K, A16, lda16, B16, ldb16, beta, NULL, C, ldc);
    mm_clock_stop(t0);
    return rc;
}
#endif

// ----------------------------------------------------------------------------
// fp32 through the BLAS: the trainer's OpenMP threads each run a single-threaded cblas call on
// one slab of C (a range of its columns or of its rows). The BLAS's own threading is
// not used: OpenBLAS's pthreads pool competes with the OpenMP threads for the cores (the
// trainer ran 1.8x slower with it). Slab edges fall on multiples of 16 and depend only on the
// thread count; every element of C is one BLAS call's dot product over all of K.

#if defined(MATMUL_CBLAS_SGEMM)
#if defined(LLMC_BLAS_OPENBLAS)
__attribute__((constructor)) static void matmul_blas_init(void) { scipy_openblas_set_num_threads(1); }
#elif defined(LLMC_BLAS_OPENBLAS_SYSTEM)
// A pthreads build gets one thread. An OpenMP build is left alone: inside the trainer's parallel
// regions it runs single-threaded by itself, and its set_num_threads would also set the trainer's
// OpenMP thread count (it calls omp_set_num_threads).
__attribute__((constructor)) static void matmul_blas_init(void) {
    if (openblas_get_parallel() == 1) { openblas_set_num_threads(1); }
}
#else
__attribute__((constructor)) static void matmul_blas_init(void) { mkl_set_num_threads(1); }
#endif

static inline void matmul_cblas_call(int transA, int transB, int M, int N, int K, const float* A, int lda,
                                     const float* B, int ldb, float beta, float* C, int ldc) {
    MATMUL_CBLAS_SGEMM(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
                       M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

static void matmul_cblas_slabs(int transA, int transB, int M, int N, int K, const float* A, int lda,
                               const float* B, int ldb, float beta, float* C, int ldc) {
    int nthreads = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) { nthreads = omp_get_max_threads(); }
#endif
    // Every slab packs all of the operand that is not split, so split the other one: columns
    // (op(B)) when op(A) is the smaller, else rows. Slabs are handed out as threads free up, two
    // per thread when the repacked operand is small (a core slowed by another process then does
    // fewer of them), one per thread when it is large (e.g. the lm_head's (B*T, Vp) gradient).
    size_t a_elems = (size_t)M * K, b_elems = (size_t)K * N;
    int by_cols = a_elems <= b_elems;
    int extent = by_cols ? N : M;
    int nslabs = (by_cols ? a_elems : b_elems) <= ((size_t)1 << 18) ? 2 * nthreads : nthreads;
    if (nslabs > extent / 64) { nslabs = extent / 64; } // slabs at least 64 wide
    if (nthreads == 1 || nslabs < 2) {
        matmul_cblas_call(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    #pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
    for (int slab = 0; slab < nslabs; slab++) {
        int lo = (int)((long)extent * slab / nslabs) & ~15;
        int hi = slab == nslabs - 1 ? extent : (int)((long)extent * (slab + 1) / nslabs) & ~15;
        if (by_cols) { // columns [lo, hi) of C and of op(B)
            const float* Bs = transB ? B + (size_t)lo * ldb : B + lo;
            matmul_cblas_call(transA, transB, M, hi - lo, K, A, lda, Bs, ldb, beta, C + lo, ldc);
        } else {       // rows [lo, hi) of C and of op(A)
            const float* As = transA ? A + lo : A + (size_t)lo * lda;
            matmul_cblas_call(transA, transB, hi - lo, N, K, As, lda, B, ldb, beta, C + (size_t)lo * ldc, ldc);
        }
    }
}
#endif

// ----------------------------------------------------------------------------
// the entry point

// "mkl", "openblas", "openblas-system", "onednn" or "blocked": what does the fp32 GEMMs in this build
static inline const char* matmul_backend_name(void) { return MATMUL_BACKEND; }


// Which code runs the fp32 GEMMs in a build with a BLAS (or BLAS=onednn): the BLAS, or with LLMC_FP32_GEMM=builtin
// the built-in kernel (read once, at the first GEMM). Which is faster depends on the CPU: on a Zen 5 the built-in
// AVX-512 kernel ran 1.6x OpenBLAS's sgemm at the d12 step's shapes, on a Zen 4 0.8x (doc/cpu-speed.md). Not measured
// at start-up: a choice made from timings could differ between two runs on a busy machine, and with it their bits.
// A build without a BLAS always runs the built-in kernel.
typedef enum { MATMUL_FP32_BLAS = 0, MATMUL_FP32_BUILTIN = 1 } MatmulFp32Gemm;

static MatmulFp32Gemm mm_fp32_gemm_chosen = MATMUL_FP32_BLAS;
static pthread_once_t mm_fp32_gemm_once = PTHREAD_ONCE_INIT;

static void mm_fp32_gemm_decide(void) {
    const char* env = getenv("LLMC_FP32_GEMM");
    if (env == NULL || env[0] == '\0' || strcmp(env, "blas") == 0) { return; }
    if (strcmp(env, "builtin") != 0) { llmc_die("LLMC_FP32_GEMM=%s: use blas or builtin", env); }
    mm_fp32_gemm_chosen = MATMUL_FP32_BUILTIN;
}

static MatmulFp32Gemm matmul_fp32_gemm(void) {
    pthread_once(&mm_fp32_gemm_once, mm_fp32_gemm_decide);
    return mm_fp32_gemm_chosen;
}

// the stored (rows, cols) operand X widened from its bf16 copy into a dense fp32 buffer (the caller frees it) when its
// mirror holds it in bf16 alone, else NULL: every bf16 number is a float, so the widened operand rounds to the copy
static float* mm_bf16_widen_alone(const float* X, int rows, int cols, int ld) {
    if (rows <= 0 || cols <= 0 || !mm_bf16_mirror_alone(X, (size_t)rows, (size_t)cols, (size_t)ld)) { return NULL; }
    const uint16_t* x16 = mm_bf16_mirror_of(X, (size_t)rows, (size_t)cols, (size_t)ld);
    float* wide = (float*)mallocCheck((size_t)rows * cols * sizeof(float));
    for (size_t r = 0; r < (size_t)rows; r++) {
        for (size_t c = 0; c < (size_t)cols; c++) { wide[r * cols + c] = mm_bf16_to_float(x16[r * ld + c]); }
    }
    return wide;
}

// the GEMM on the code this build and precision choose (matmul_gemm below)
static inline void mm_gemm_dispatch(MatmulPrecision prec, int transA, int transB, int M, int N, int K,
                                    const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
#if defined(LLMC_ONEDNN)
    if (prec == MATMUL_BF16 && matmul_bf16_takes_bf16() &&
        matmul_gemm_onednn_bf16(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc) == 0) {
        return;
    }
#endif
#if defined(LLMC_BLAS_ONEDNN)
    // (a shape oneDNN has only its reference code for falls through to the blocked kernel)
    if (prec == MATMUL_FP32 && matmul_fp32_gemm() == MATMUL_FP32_BLAS) {
        double t0 = mm_clock_start();
        int rc = onednn_gemm(ONEDNN_F32, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
        mm_clock_stop(t0);
        if (rc == 0) { return; }
    }
#elif defined(MATMUL_CBLAS_SGEMM)
    if (prec == MATMUL_FP32 && matmul_fp32_gemm() == MATMUL_FP32_BLAS) {
        double t0 = mm_clock_start();
        matmul_cblas_slabs(transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
        mm_clock_stop(t0);
        return;
    }
#endif
    // (the built-in kernel rounds its operands from fp32 as it packs them: an operand held in bf16 alone is widened
    // first, exactly, so that it rounds back to its copy)
    float* A_wide = prec == MATMUL_BF16 ? mm_bf16_widen_alone(A, transA ? K : M, transA ? M : K, lda) : NULL;
    float* B_wide = prec == MATMUL_BF16 ? mm_bf16_widen_alone(B, transB ? N : K, transB ? K : N, ldb) : NULL;
    double t0 = mm_clock_start();
    matmul_gemm_blocked(prec, transA, transB, M, N, K, A_wide != NULL ? A_wide : A, A_wide != NULL ? (transA ? M : K) : lda,
                        B_wide != NULL ? B_wide : B, B_wide != NULL ? (transB ? K : N) : ldb, beta, C, ldc);
    mm_clock_stop(t0);
    free(A_wide);
    free(B_wide);
}

// C(M,N) = beta * C + op(A)(M,K) . op(B)(K,N), row-major; lda/ldb/ldc are row strides of the
// stored matrices (A is (M,K) or, with transA, (K,M); likewise B). With LLMC_PHASE_TIME=1 a call made outside a
// parallel region counts as a GEMM (llmc/cpu/phase_time.h): its operands read once at the precision it reads them
// in (bf16 on oneDNN's bf16 path, whose roundings count as bf16), C written (and read when beta is not 0).
static inline void matmul_gemm(MatmulPrecision prec, int transA, int transB, int M, int N, int K,
                               const float* A, int lda, const float* B, int ldb, float beta, float* C, int ldc) {
    double t = phase_begin();
    mm_gemm_dispatch(prec, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc);
    if (t != 0.0) {
        double operand_bytes = 4.0;
#if defined(LLMC_ONEDNN)
        if (prec == MATMUL_BF16 && matmul_bf16_takes_bf16()) { operand_bytes = 2.0; }
#endif
        double bytes = operand_bytes * ((double)M * K + (double)K * N) + (beta != 0.0f ? 8.0 : 4.0) * M * N;
        phase_end(PHASE_GEMM, t, bytes, 2.0 * M * N * K);
    }
}

// C(M,N) = beta * C + op(A)(M,K) . op(B)(K,N) in bf16 where one operand is stored in bf16 alone: A16 (with A NULL)
// or B16 (with B NULL) holds it, row stride lda / ldb as for the fp32 form (the bf16 activation layouts,
// llmc/cpu/cpu_model.h's cpu_model_bf16_activations). The other operand is read as matmul_gemm reads it (its mirror,
// or rounded), so the result is matmul_gemm(MATMUL_BF16, ...)'s on any fp32 operand that rounds to the stored one.
// On oneDNN's bf16 GEMM; where it has no kernel for the shape, the stored operand is widened to fp32 (exactly) and
// the built-in bf16 kernel runs. Counted as PHASE_GEMM like matmul_gemm.
static void matmul_gemm_bf16_stored(int transA, int transB, int M, int N, int K, const float* A, const uint16_t* A16,
                                    int lda, const float* B, const uint16_t* B16, int ldb, float beta, float* C, int ldc) {
    if ((A == NULL) == (A16 == NULL) || (B == NULL) == (B16 == NULL) || (A16 != NULL && B16 != NULL)) {
        llmc_die("internal: matmul_gemm_bf16_stored takes one operand in bf16 and the other in fp32");
    }
    if (M <= 0 || N <= 0) { return; }
    double t = phase_begin();
    int done = 0;
#if defined(LLMC_ONEDNN)
    if (matmul_bf16_takes_bf16() && K > 0) {
        int lda16 = lda, ldb16 = ldb;
        if (A16 == NULL) { A16 = mm_bf16_operand(A, transA ? K : M, transA ? M : K, lda, 1, &lda16); }
        if (B16 == NULL) { B16 = mm_bf16_operand(B, transB ? N : K, transB ? K : N, ldb, 0, &ldb16); }
        double t0 = mm_clock_start();
        done = mm_gemm_bf16_operands(transA, transB, M, N, K, A16, lda16, B16, ldb16, beta, NULL, C, ldc) == 0;
        mm_clock_stop(t0);
        if (!done) { // (the fp32 operand, rounded, is left as it was: the built-in kernel reads it in fp32)
            A16 = A != NULL ? NULL : A16;
            B16 = B != NULL ? NULL : B16;
        }
    }
#endif
    if (!done) { // the stored operand widened (every bf16 number is a float), then the built-in bf16 kernel
        const uint16_t* x16 = A16 != NULL ? A16 : B16;
        int rows = A16 != NULL ? (transA ? K : M) : (transB ? N : K);
        int cols = A16 != NULL ? (transA ? M : K) : (transB ? K : N);
        int ld = A16 != NULL ? lda : ldb;
        float* wide = (float*)mallocCheck(((size_t)rows * cols + 1) * sizeof(float));
        for (size_t r = 0; r < (size_t)rows; r++) {
            for (size_t c = 0; c < (size_t)cols; c++) { wide[r * cols + c] = mm_bf16_to_float(x16[r * ld + c]); }
        }
        // (and the fp32 operand from its copy when that holds it alone)
        float* A_wide = A16 == NULL ? mm_bf16_widen_alone(A, transA ? K : M, transA ? M : K, lda) : NULL;
        float* B_wide = B16 == NULL ? mm_bf16_widen_alone(B, transB ? N : K, transB ? K : N, ldb) : NULL;
        double t0 = mm_clock_start();
        if (A16 != NULL) {
            matmul_gemm_blocked(MATMUL_BF16, transA, transB, M, N, K, wide, cols, B_wide != NULL ? B_wide : B,
                                B_wide != NULL ? (transB ? K : N) : ldb, beta, C, ldc);
        } else {
            matmul_gemm_blocked(MATMUL_BF16, transA, transB, M, N, K, A_wide != NULL ? A_wide : A,
                                A_wide != NULL ? (transA ? M : K) : lda, wide, cols, beta, C, ldc);
        }
        mm_clock_stop(t0);
        free(wide);
        free(A_wide);
        free(B_wide);
    }
    if (t != 0.0) { // both operands read in bf16 (the fp32 one's rounding counts as bf16)
        double bytes = 2.0 * ((double)M * K + (double)K * N) + (beta != 0.0f ? 8.0 : 4.0) * M * N;
        phase_end(PHASE_GEMM, t, bytes, 2.0 * M * N * K);
    }
}

// ----------------------------------------------------------------------------
// bf16 where it pays: the trainer's -p bf16 asks once at start-up whether this CPU's bf16 GEMM
// beats its fp32 GEMM. The bf16 GEMM is oneDNN's in a build with oneDNN (matmul_bf16_gemm), else
// the built-in kernel. Where it has no bf16 kernel (oneDNN on an AVX2-only CPU, or under
// ONEDNN_MAX_CPU_ISA=AVX2), or the built-in one would be emulated in fp32 (no AVX512-BF16: measured
// 0.65x the fp32 step on Zen 3), it cannot. Otherwise a short calibration decides: the bf16 GEMM and
// the fp32 path (the build's BLAS, oneDNN or the blocked kernel) each run a trainer-sized GEMM
// (256 x 768 x 768, 0.3 GFLOP, its B read as the trainer reads a weight: from a mirror) a few times,
// best of each; bf16 is used when its rate is at least MATMUL_BF16_MIN_GAIN times the fp32 rate
// (AVX512-BF16 at half the FMA rate, as on some Xeons, may not pass; Zen 4 does).
// LLMC_BF16=force skips the question (the bf16 path stays testable on every CPU), and
// LLMC_BF16_RATES=BF16,FP32 (GFLOP/s) supplies the two rates instead of measuring them, as if this
// CPU had a bf16 kernel, so tests steer the decision both ways on any CPU.
// Returns 1 to run bf16; `reason` (n bytes) says why, in a few words, either way.

#define MATMUL_BF16_MIN_GAIN 1.15

// best of `reps` seconds for C (M,N) = A (M,K) . B (N,K)^T in precision prec
static double mm_time_gemm(MatmulPrecision prec, int M, int N, int K, const float* A, const float* B, float* C, int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = wall_seconds();
        matmul_gemm(prec, 0, 1, M, N, K, A, K, B, K, 0.0f, C, N);
        double t = wall_seconds() - t0;
        best = t < best ? t : best;
    }
    return best;
}

// the calibration itself: the bf16 and fp32 rates of a trainer-sized GEMM, in GFLOP/s
static void mm_measure_bf16_fp32_rates(double* bf16_gflops, double* fp32_gflops) {
    int M = 256, N = 768, K = 768;
    float* A = (float*)mallocCheck((size_t)M * K * sizeof(float));
    float* B = (float*)mallocCheck((size_t)N * K * sizeof(float));
    float* C = (float*)mallocCheck((size_t)M * N * sizeof(float));
    uint16_t* B16 = (uint16_t*)mallocCheck((size_t)N * K * sizeof(uint16_t));
    for (size_t i = 0; i < (size_t)M * K; i++) { A[i] = (float)((i * 7919u) % 1000u) * 1e-3f - 0.5f; }
    for (size_t i = 0; i < (size_t)N * K; i++) { B[i] = (float)((i * 104729u) % 1000u) * 1e-3f - 0.5f; }
    matmul_round_bf16(B16, B, (size_t)N, (size_t)K, (size_t)K); // B is a weight: rounded once, as the trainer's are
    matmul_bf16_mirror_add(B, (size_t)N * K, B16);
    (void)mm_time_gemm(MATMUL_FP32, M, N, K, A, B, C, 1); // warm-up: packing buffers, thread pool, primitives
    (void)mm_time_gemm(MATMUL_BF16, M, N, K, A, B, C, 1);
    double t32 = mm_time_gemm(MATMUL_FP32, M, N, K, A, B, C, 5);
    double t16 = mm_time_gemm(MATMUL_BF16, M, N, K, A, B, C, 5);
    matmul_bf16_mirror_remove(B);
    matmul_gemm_clock_reset(); // the calibration is not training
    free(A);
    free(B);
    free(C);
    free(B16);
    double gflop = 2.0 * M * N * K * 1e-9;
    *bf16_gflops = gflop / t16;
    *fp32_gflops = gflop / t32;
}

// what runs the bf16 GEMMs, in words: "oneDNN's bf16 GEMM (brg:avx512_core_bf16)", "the built-in bf16 GEMM (AVX512-BF16)"
static void matmul_bf16_gemm_describe(char* buf, size_t n) {
    if (matmul_bf16_gemm() == MATMUL_BF16_AMX) {
        snprintf(buf, n, "llmc's AMX bf16 GEMM (amx_bf16 tiles)");
    } else if (matmul_bf16_gemm() == MATMUL_BF16_ONEDNN) {
        const char* kernel = matmul_bf16_onednn_kernel();
        snprintf(buf, n, "oneDNN's bf16 GEMM (%s)", kernel[0] != '\0' ? kernel : "no kernel on this CPU");
    } else {
        snprintf(buf, n, "the built-in bf16 GEMM (%s)", matmul_bf16_native() ? "AVX512-BF16" : "emulated in fp32");
    }
}

// the decision from the two rates: bf16 when it is at least MATMUL_BF16_MIN_GAIN times as fast
static int matmul_bf16_decide(double bf16_gflops, double fp32_gflops, char* reason, size_t n) {
    int pays = bf16_gflops >= MATMUL_BF16_MIN_GAIN * fp32_gflops;
    char gemm[128];
    matmul_bf16_gemm_describe(gemm, sizeof(gemm));
    snprintf(reason, n, "%s ran at %.0f GFLOP/s, the fp32 GEMM (%s) at %.0f: %s %.2fx", gemm, bf16_gflops,
             matmul_backend_name(), fp32_gflops, pays ? "at least" : "less than", MATMUL_BF16_MIN_GAIN);
    return pays;
}

static int matmul_bf16_pays(char* reason, size_t n) {
    (void)mm_bf16_cvt_on(); // (asked here, before the threads start)
    const char* env = getenv("LLMC_BF16");
    if (env != NULL && strcmp(env, "force") == 0) {
        snprintf(reason, n, "LLMC_BF16=force");
        return 1;
    }
    double bf16_gflops, fp32_gflops;
    const char* rates = getenv("LLMC_BF16_RATES");
    if (rates != NULL && rates[0] != '\0') {
        char end = 0;
        if (sscanf(rates, "%lf,%lf%c", &bf16_gflops, &fp32_gflops, &end) != 2 || !(bf16_gflops > 0.0) || !(fp32_gflops > 0.0)) {
            llmc_die("LLMC_BF16_RATES=%s: use BF16,FP32 (two positive GFLOP/s rates, e.g. 180,100)", rates);
        }
        return matmul_bf16_decide(bf16_gflops, fp32_gflops, reason, n);
    }
    if (matmul_bf16_gemm() == MATMUL_BF16_ONEDNN && matmul_bf16_onednn_kernel()[0] == '\0') {
        char version[96] = "";
#if defined(LLMC_ONEDNN)
        onednn_version(version, sizeof(version));
#endif
        snprintf(reason, n, "oneDNN has no bf16 GEMM kernel on this CPU (%s)", version);
        return 0;
    }
    if (matmul_bf16_gemm() == MATMUL_BF16_BUILTIN && !matmul_bf16_native()) {
        snprintf(reason, n, "this CPU has no AVX512-BF16, so bf16 GEMMs would be emulated in fp32 and run slower");
        return 0;
    }
    mm_measure_bf16_fp32_rates(&bf16_gflops, &fp32_gflops);
    return matmul_bf16_decide(bf16_gflops, fp32_gflops, reason, n);
}

// ---- the linear layer (llmc/cuda/matmul.cuh's matmul_forward / matmul_backward on the GPU): the GEMMs above,
// with the bias copied in first (forward) or summed out of dout (backward), in fp32 or, with -p bf16, on
// bf16-rounded inputs with fp32 sums.

// out (BT,OC) = the bias in every row (bias NULL: nothing), for the GEMM to add onto
static void matmul_bias_rows(float* out, const float* bias, int BT, int OC) {
    if (bias == NULL) { return; }
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) { memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof(float)); }
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * BT * OC, 0.0);
}

// out[r,o] = bias[o] + sum_c inp[r,c] * weight[o,c]
// Whether a bf16 GEMM on oneDNN takes the bias as its own argument (onednn_gemm_bias: each sum stored with its bias
// added, the same bits as the bias rows and the sum post-op that read them back, with neither pass):
// LLMC_ONEDNN_BIAS=0 copies the bias into the rows first, as before 2026-11-29, until the change is timed beyond the
// Zen 5. Read once.
static int matmul_onednn_bias(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_ONEDNN_BIAS"); }
    return on;
}

// out (BT,OC) = inp (BT,C) . weight^T + bias on oneDNN's bf16 GEMM with the bias as its argument, inp in fp32 (its
// mirror, or rounded) or stored in bf16 (inp16); returns 0 when the call is not for it (no bias, the fp32 path,
// another bf16 GEMM, LLMC_ONEDNN_BIAS=0, a shape oneDNN has no kernel for), having written nothing
static int matmul_forward_onednn_bias(float* out, const float* inp, const uint16_t* inp16, const float* weight,
                                      const float* bias, int BT, int C, int OC) {
#if defined(LLMC_ONEDNN)
    if (bias == NULL || BT <= 0 || C <= 0 || matmul_precision != MATMUL_BF16 ||
        !matmul_bf16_takes_bf16() || !matmul_onednn_bias()) {
        return 0;
    }
    double t = phase_begin();
    int lda16 = C, ldb16;
    const uint16_t* A16 = inp16 != NULL ? inp16 : mm_bf16_operand(inp, BT, C, C, 1, &lda16);
    const uint16_t* B16 = mm_bf16_operand(weight, OC, C, C, 0, &ldb16);
    double t0 = mm_clock_start();
    int rc = mm_gemm_bf16_operands(0, 1, BT, OC, C, A16, lda16, B16, ldb16, 0.0f, bias, out, OC);
    mm_clock_stop(t0);
    // operands read in bf16, the bias read and out written in fp32 (a refused shape: its roundings' time alone)
    double bytes = 2.0 * ((double)BT * C + (double)C * OC) + 4.0 * (OC + (double)BT * OC);
    phase_end(PHASE_GEMM, t, rc == 0 ? bytes : 0.0, rc == 0 ? 2.0 * BT * OC * C : 0.0);
    return rc == 0;
#else
    (void)out; (void)inp; (void)inp16; (void)weight; (void)bias; (void)BT; (void)C; (void)OC;
    return 0;
#endif
}

static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    // out is (B,T,OC), inp is (B,T,C), weight is (OC,C), bias is (OC) or NULL
    int BT = B * T;
    if (matmul_forward_onednn_bias(out, inp, NULL, weight, bias, BT, C, OC)) { return; }
    matmul_bias_rows(out, bias, BT, OC);
    matmul_gemm(matmul_precision, 0, 1, BT, OC, C, inp, C, weight, C, bias != NULL ? 1.0f : 0.0f, out, OC);
}

// matmul_backward's input gradient: dinp (B,T,C) = beta * dinp + dout (B,T,OC) . weight (OC,C);
// beta 1 accumulates, beta 0 overwrites (dinp's old contents are then never read)
static void matmul_backward_input(float* dinp, const float* dout, const float* weight, int B, int T, int C, int OC,
                                  float beta) {
    matmul_gemm(matmul_precision, 0, 0, B * T, C, OC, dout, OC, weight, C, beta, dinp, C);
}

// matmul_backward's weight gradient: dweight (OC,C) = beta * dweight + dout^T (OC,B*T) . inp (B*T,C);
// beta 1 accumulates, beta 0 overwrites (dweight's old contents are then never read)
static void matmul_backward_weight(float* dweight, const float* dout, const float* inp, int B, int T, int C, int OC,
                                   float beta) {
    matmul_gemm(matmul_precision, 1, 0, OC, C, B * T, dout, OC, inp, C, beta, dweight, C);
}

// LLMC_ELEMENTWISE_FUSED=0: the element-wise passes as they were before 2026-11-29 (the bias gradient in 64-column
// chunks and its own pass after GPT-2's GELU backward); the default (1) runs the kernels below. Same bits either way;
// kept selectable because the new loops were timed on one CPU kind only. Read once.
static int elementwise_fused(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_ELEMENTWISE_FUSED"); }
    return on;
}

// the columns [*o0, *o1) of (rows, OC) that thread t of nt owns in a column-split pass: contiguous slices, a
// multiple of 16 floats wide (whole 64-byte lines), the last one shorter or empty
static inline void bias_grad_column_slice(int OC, int nt, int t, int* o0, int* o1) {
    int width = ((OC + nt - 1) / nt + 15) / 16 * 16;
    *o0 = t * width < OC ? t * width : OC;
    *o1 = *o0 + width < OC ? *o0 + width : OC;
}

// the widest slice of columns one pass over the rows sums at once: its running sums (up to 32 KB, on the stack) stay
// in L1. A wider slice is summed in blocks, one pass over the rows each, but every row read in pieces ran 1.4x slower
// (GPT-2 d12's 3072-wide GELU gradient on one thread, Zen 5), so a block covers every slice of the models trained here
#define BIAS_GRAD_BLOCK 8192

// A column sum over rows split into fixed chunks (a pass that streams whole rows, each thread its own rows, instead
// of a column slice of every row): chunk k of SUM_CHUNK_ROWS rows sums its rows in order into partial + k * stride
// (C floats), then dst (C) += the chunks' partial sums in chunk order (the columns split over threads). The order
// depends on the row count only, so the bits are the same for any thread count; they are not one running sum's.
#define SUM_CHUNK_ROWS 64
static inline int sum_chunks(int rows) { return (rows + SUM_CHUNK_ROWS - 1) / SUM_CHUNK_ROWS; }

static void partial_sums_add(float* dst, const float* partial, int chunks, size_t stride, int C) {
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int k = 0; k < chunks; k++) {
            const float* p = partial + (size_t)k * stride;
            for (int i = c0; i < c1; i++) { dst[i] += p[i]; }
        }
    }
}

// the old bias gradient (LLMC_ELEMENTWISE_FUSED=0): 64-column chunks over threads, each read down all rows (dout's
// rows are partial sums of one row each, added in row order: the same loops)
static void matmul_backward_bias_chunked(float* dbias, const float* dout, int BT, int OC) {
    partial_sums_add(dbias, dout, BT, (size_t)OC, OC);
}

// dbias[o0, o1) += the sum of dout's rows over those columns, rows in order (the same sums, bit for bit, as one
// running sum per column): four rows per step into running sums on the stack, so each row of the slice is one
// contiguous read and dbias is written once per block (no cache line of it shared with another thread's slice)
static inline void bias_grad_columns(float* dbias, const float* dout, int BT, int OC, int o0, int o1) {
    float sum[BIAS_GRAD_BLOCK];
    for (int b0 = o0; b0 < o1; b0 += BIAS_GRAD_BLOCK) {
        int n = o1 - b0 < BIAS_GRAD_BLOCK ? o1 - b0 : BIAS_GRAD_BLOCK;
        for (int j = 0; j < n; j++) { sum[j] = dbias[b0 + j]; }
        int r = 0;
        for (; r + 4 <= BT; r += 4) {
            const float* d0 = dout + (size_t)r * OC + b0;
            const float* d1 = d0 + OC;
            const float* d2 = d1 + OC;
            const float* d3 = d2 + OC;
            for (int j = 0; j < n; j++) { sum[j] = (((sum[j] + d0[j]) + d1[j]) + d2[j]) + d3[j]; }
        }
        for (; r < BT; r++) {
            const float* d = dout + (size_t)r * OC + b0;
            for (int j = 0; j < n; j++) { sum[j] += d[j]; }
        }
        for (int j = 0; j < n; j++) { dbias[b0 + j] = sum[j]; }
    }
}

// dbias (OC) = beta * dbias + the sum of dout's (BT,OC) rows (dbias NULL: nothing; beta 0: its old contents never
// read), each column summed over the rows in order: each thread owns a slice of columns (bias_grad_column_slice)
// and streams down the rows, vectorised across its columns
static void matmul_backward_bias(float* dbias, const float* dout, int BT, int OC, float beta) {
    if (dbias == NULL) { return; }
    if (beta == 0.0f) { memset(dbias, 0, (size_t)OC * sizeof(float)); }
    double t_phase = phase_begin();
    if (!elementwise_fused()) {
        matmul_backward_bias_chunked(dbias, dout, BT, OC);
    } else {
        #pragma omp parallel
        {
            int nt, t;
            parallel_team(&nt, &t);
            int o0, o1;
            bias_grad_column_slice(OC, nt, t, &o0, &o1);
            bias_grad_columns(dbias, dout, BT, OC, o0, o1);
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * BT * OC, (double)BT * OC);
}

// a linear layer's backward, each gradient added to (beta 1) or written (beta 0: its old contents are never read):
// dinp = beta_inp * dinp + dout . weight, dweight = beta_weight * dweight + dout^T . inp, and the same for dbias,
// the sum of dout's rows. The trainers write each activation gradient (beta_inp 0) and their weight gradients when
// they are stale (beta_weight 0, llmc/cpu/cpu_model.h's cpu_model_zero_grad).
static void matmul_backward_into(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                 const float* weight, int B, int T, int C, int OC, float beta_inp, float beta_weight) {
    // dinp, inp are (B,T,C); dout is (B,T,OC); dweight, weight are (OC,C); dbias is (OC) or NULL
    matmul_backward_input(dinp, dout, weight, B, T, C, OC, beta_inp);
    matmul_backward_weight(dweight, dout, inp, B, T, C, OC, beta_weight);
    matmul_backward_bias(dbias, dout, B * T, OC, beta_weight);
}

// all three gradients accumulated (+=)
static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int T, int C, int OC) {
    matmul_backward_into(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, 1.0f, 1.0f);
}

// ---- inputs stored in bf16 alone: the bf16 activation layouts (llmc/cpu/cpu_model.h's cpu_model_bf16_layout)
// keep the attention's output and the MLP's hidden layer in bf16 only, as their GEMMs read them. These run the same
// GEMMs as matmul_forward / matmul_backward_into on the same bf16 numbers (llmc/cpu/matmul.h's
// matmul_gemm_bf16_stored), so they give the bits the fp32 forms give -p bf16 on an input that rounds to inp16.

// matmul_forward of the bf16 input inp16 (B,T,C): out (B,T,OC) = bias + inp16 . weight^T
static void matmul_forward_bf16_input(float* out, const uint16_t* inp16, const float* weight, const float* bias,
                                      int B, int T, int C, int OC) {
    int BT = B * T;
    if (matmul_forward_onednn_bias(out, NULL, inp16, weight, bias, BT, C, OC)) { return; }
    matmul_bias_rows(out, bias, BT, OC);
    matmul_gemm_bf16_stored(0, 1, BT, OC, C, NULL, inp16, C, weight, NULL, C, bias != NULL ? 1.0f : 0.0f, out, OC);
}

// matmul_backward_into of the bf16 input inp16 (B,T,C): dinp (fp32) and dbias as there, dweight from inp16
// its weight and bias gradients alone (dweight (OC,C), dbias (OC) = beta_weight * theirs + the gradient)
static void matmul_backward_weight_bf16_input(float* dweight, float* dbias, const float* dout, const uint16_t* inp16,
                                              int B, int T, int C, int OC, float beta_weight) {
    matmul_gemm_bf16_stored(1, 0, OC, C, B * T, dout, NULL, OC, NULL, inp16, C, beta_weight, dweight, C);
    matmul_backward_bias(dbias, dout, B * T, OC, beta_weight);
}

static void matmul_backward_into_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                            const uint16_t* inp16, const float* weight, int B, int T, int C, int OC,
                                            float beta_inp, float beta_weight) {
    matmul_backward_input(dinp, dout, weight, B, T, C, OC, beta_inp);
    matmul_backward_weight_bf16_input(dweight, dbias, dout, inp16, B, T, C, OC, beta_weight);
}

#endif // LLMC_MATMUL_H
