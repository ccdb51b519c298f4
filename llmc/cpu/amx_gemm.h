/*
llmc/cpu/amx_gemm.h: bf16 GEMMs on AMX tiles (Intel's Advanced Matrix Extensions, llmc/cpu/amx.h), fp32 sums: the
-p bf16 path's GEMMs on a CPU with AMX (llmc/cpu/matmul.h chooses it there; LLMC_BF16_GEMM=onednn keeps oneDNN's).
On the AMX Xeon it was written on, oneDNN 3.2's AMX kernel ran GPT-2 d12's T=64 step GEMMs at 360-590 GFLOP/s inside
the step, and this one took their summed time down by 13-30 % (doc/cpu-speed.md, "llmc's AMX bf16 GEMM").

    amx_gemm_bf16(transA, transB, M, N, K, A, lda, B, ldb, beta, bias, C, ldc)
        C (M,N) = beta * C + op(A)(M,K) . op(B)(K,N), plus bias (N) on every row where bias is not NULL (beta 0
        then); A and B are bf16 bit patterns stored row-major with row strides lda, ldb (A is (M,K) or, with transA,
        (K,M); likewise B), C is fp32. beta is 0 or 1. Returns -1, having done nothing, where this process may not
        run AMX (amx_usable) or beta is another number; 0 when done.

How (GotoBLAS's three levels of blocking, the register tile a 32 x 32 block of C in four 16 x 16 tiles):
    each thread takes a rectangle of C (a grid over rows and columns: gemm_thread_grid), and in it
    for each block of columns (op(B)'s packed block at most AMX_NC_BYTES):
      for each K block (K cut into equal blocks of at most AMX_KC, multiples of 32: the same blocks whatever the
      thread count):
        pack op(B)'s block as panels of 32 columns, each a column's k pairs side by side (the B tile's layout)
        for each block of AMX_MC rows:
          pack op(A)'s block as strips of 32 rows of k pairs (the A tile's layout), or read A where it lies
          (not transposed, K a multiple of 32: its rows are the layout already; a ragged last strip is packed)
          for each strip, for each panel: C block (+)= strip . panel over the K block, in tiles (C's old values
          and the bias added to the first K block's sums when they are done, as oneDNN adds them)
Each element of C sums its K blocks in order, each block's pairs in order (the tiles' own order within a pair and
16 pairs: tdpbf16ps), so the result does not depend on the thread count. The tiles read a pair as two bf16 and
their products sum in fp32; denormal bf16 inputs and outputs are flushed to zero by the instruction (the numbers a
trainer's GEMMs see are far from them).
Threads: the caller's OpenMP team size (omp_get_max_threads) from serial code, the calling thread alone inside a
parallel region. Each thread loads the tile shapes first (amx_configure_16x64: oneDNN's AMX kernels load their own).
*/
#ifndef LLMC_CPU_AMX_GEMM_H
#define LLMC_CPU_AMX_GEMM_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../utils.h"
#include "amx.h"
#include "transpose.h"
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef AMX_KC
#define AMX_KC 768   // k per K block: a strip (32 rows) 48 KB, in L1; a panel (32 columns) as much, from L2
#endif
#ifndef AMX_MC
#define AMX_MC 128   // rows of op(A) packed at a time: 4 strips
#endif
#ifndef AMX_NC_BYTES
#define AMX_NC_BYTES (1 << 20) // op(B)'s packed block at most this (L2): 672 columns at AMX_KC
#endif

#if AMX_X86
// K cut into equal blocks of at most AMX_KC, each a multiple of 32 (the last one shorter): the block length
static inline int amx_kc(int K) {
    int nk = (K + AMX_KC - 1) / AMX_KC;
    int kc = (K + nk - 1) / nk;
    return (kc + 31) / 32 * 32;
}

static inline uint32_t amx_pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

// the packing's AVX-512 loops run where the CPU has AVX-512 BW (every AMX CPU; the emulated tiles of the tests may
// run elsewhere), else its scalar loops: the same numbers. amx_pack_scalar (tests) takes the scalar loops anyway.
static int amx_pack_scalar = 0;
static inline int amx_pack_simd(void) {
    static int simd = -1;
    if (simd < 0) { simd = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw"); }
    return simd && !amx_pack_scalar;
}

// dst[0:32] = the pairs (r0[n], r1[n]) of 32 columns (two rows of bf16 interleaved), in AVX-512 registers. The
// packing's other loops are compiled for the build's target, not AVX-512: on a CPU without it (the emulated tiles of
// the tests) the compiler may not have vectorised them with instructions the CPU lacks.
__attribute__((target("avx512f,avx512bw")))
static void amx_interleave32_avx512(uint32_t* dst, const uint16_t* r0, const uint16_t* r1) {
    for (int h = 0; h < 32; h += 16) {
        __m512i lo = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)(r0 + h)));
        __m512i hi = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(const void*)(r1 + h)));
        _mm512_storeu_si512((void*)(dst + h), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
    }
}

// op(B)[k0:k0+kc, j0:j0+nc] as panels of 32 columns: panel q, pair row p, column n at dst[(q * kp + p) * 32 + n]
// holds op(B)[k0+2p][j0+32q+n] (low half) and op(B)[k0+2p+1][...] (high half); kp = kc / 2 (kc a multiple of 32),
// zero past K and past N
static void amx_pack_b(uint32_t* dst, const uint16_t* B, int ldb, int transB, int K, int N, int k0, int kc, int j0, int nc) {
    int kp = kc / 2, panels = (nc + 31) / 32;
    for (int q = 0; q < panels; q++) {
        uint32_t* panel = dst + (size_t)q * kp * 32;
        int n0 = j0 + 32 * q, width = N - n0 < 32 ? N - n0 : 32;
        int pairs = (K - k0) / 2 < kp ? (K - k0) / 2 : kp; // whole pairs inside K
        if (transB) { // stored (N,K): a column's k pairs lie side by side in its row
            int fast = amx_pack_simd() && width == 32 && ldb % 2 == 0 && ((uintptr_t)B & 3) == 0;
            int p = 0;
            if (fast) {
                const uint32_t* src = (const uint32_t*)(const void*)B + ((size_t)n0 * ldb + k0) / 2;
                for (; p + 16 <= pairs; p += 16) {
                    transpose32_avx512(panel + (size_t)p * 32, 32, src + p, (size_t)ldb / 2, 32, 16);
                }
            }
            for (; p < kp; p++) {
                for (int n = 0; n < 32; n++) {
                    int k = k0 + 2 * p;
                    const uint16_t* row = B + (size_t)(n0 + n) * ldb;
                    uint16_t lo = n < width && k < K ? row[k] : 0, hi = n < width && k + 1 < K ? row[k + 1] : 0;
                    panel[(size_t)p * 32 + n] = amx_pair(lo, hi);
                }
            }
        } else { // stored (K,N): pair p is rows k0+2p and k0+2p+1, interleaved
            int p = 0;
            if (amx_pack_simd() && width == 32) {
                for (; p < pairs; p++) {
                    const uint16_t* r0 = B + (size_t)(k0 + 2 * p) * ldb + n0;
                    amx_interleave32_avx512(panel + (size_t)p * 32, r0, r0 + ldb);
                }
            }
            for (; p < kp; p++) {
                int k = k0 + 2 * p;
                for (int n = 0; n < 32; n++) {
                    uint16_t lo = n < width && k < K ? B[(size_t)k * ldb + n0 + n] : 0;
                    uint16_t hi = n < width && k + 1 < K ? B[(size_t)(k + 1) * ldb + n0 + n] : 0;
                    panel[(size_t)p * 32 + n] = amx_pair(lo, hi);
                }
            }
        }
    }
}

// op(A)[i0:i0+mc, k0:k0+kc] as strips of 32 rows: strip s, row i, pair p at dst[(s * 32 + i) * kp + p] holds
// op(A)[i0+32s+i][k0+2p] (low half) and [k0+2p+1] (high half); zero past M and past K; mc at most AMX_MC
static void amx_pack_a(uint32_t* dst, const uint16_t* A, int lda, int transA, int M, int K, int i0, int mc, int k0, int kc) {
    int kp = kc / 2, strips = (mc + 31) / 32;
    int pairs = (K - k0) / 2 < kp ? (K - k0) / 2 : kp;
    if (!transA) { // stored (M,K): a row's pairs side by side
        for (int s = 0; s < strips; s++) {
            uint32_t* strip = dst + (size_t)s * 32 * kp;
            int r0 = i0 + 32 * s, height = M - r0 < 32 ? M - r0 : 32;
            for (int i = 0; i < 32; i++) {
                uint32_t* out = strip + (size_t)i * kp;
                if (i >= height) { memset(out, 0, (size_t)kp * sizeof(uint32_t)); continue; }
                const uint16_t* row = A + (size_t)(r0 + i) * lda + k0;
                int p = 0;
                if (lda % 2 == 0 && ((uintptr_t)row & 3) == 0) {
                    memcpy(out, row, (size_t)pairs * sizeof(uint32_t));
                    p = pairs;
                }
                for (; p < kp; p++) {
                    int k = k0 + 2 * p;
                    out[p] = amx_pair(k < K ? row[2 * p] : 0, k + 1 < K ? row[2 * p + 1] : 0);
                }
            }
        }
        return;
    }
    // stored (K,M): pair p is rows k0+2p, k0+2p+1 interleaved, then 16 x 16 blocks transposed. The strips of 32 rows
    // inside M, 16 pairs at a time, all of them from each row before the next: a row's mc values are read in one
    // go, where a strip at a time read one line of each row and came back for the next (by then often evicted)
    int whole = amx_pack_simd() ? (M - i0 < mc ? M - i0 : mc) / 32 : 0, p_whole = 0;
    if (whole > 0) {
        uint32_t block[AMX_MC / 32][16 * 32] __attribute__((aligned(64)));
        for (; p_whole + 16 <= pairs; p_whole += 16) {
            for (int q = 0; q < 16; q++) { // block s (16 pairs, 32 rows of strip s)
                const uint16_t* a0 = A + (size_t)(k0 + 2 * (p_whole + q)) * lda + i0;
                for (int s = 0; s < whole; s++) { amx_interleave32_avx512(block[s] + q * 32, a0 + 32 * s, a0 + 32 * s + lda); }
            }
            for (int s = 0; s < whole; s++) {
                transpose32_avx512(dst + (size_t)s * 32 * kp + p_whole, (size_t)kp, block[s], 32, 16, 32);
            }
        }
    }
    for (int s = 0; s < strips; s++) { // what is left: the pairs past the last 16, a strip past M
        uint32_t* strip = dst + (size_t)s * 32 * kp;
        int r0 = i0 + 32 * s, height = M - r0 < 32 ? M - r0 : 32;
        for (int i = 0; i < 32; i++) {
            for (int q = s < whole ? p_whole : 0; q < kp; q++) {
                int k = k0 + 2 * q;
                uint16_t lo = i < height && k < K ? A[(size_t)k * lda + r0 + i] : 0;
                uint16_t hi = i < height && k + 1 < K ? A[(size_t)(k + 1) * lda + r0 + i] : 0;
                strip[(size_t)i * kp + q] = amx_pair(lo, hi);
            }
        }
    }
}

// Test scaffolding: amx_gemm_test_mode(1, scalar) runs the blocking and packing above with this plain-C stand-in for
// the tiles (each pair's two products added to the fp32 sum in turn), on any CPU and without asking for AMX, so that
// dev/test/test_amx_gemm checks them where the CPU has no AMX too; scalar 1 packs with the scalar loops on a CPU with
// AVX-512 too. Never set by a trainer.
static int amx_gemm_emulated = 0;
static inline float amx_bf16_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static void amx_block_32x32_emulated(float* c, int ldc, const char* a, size_t sa, const char* b, int kp, int accumulate) {
    for (int i = 0; i < 32; i++) {
        for (int j = 0; j < 32; j++) {
            float sum = accumulate ? c[(size_t)i * ldc + j] : 0.0f;
            for (int p = 0; p < kp; p++) {
                uint32_t x, y; // (a row of A read where it lies may start on any 2-byte boundary)
                memcpy(&x, a + (size_t)i * sa + 4 * (size_t)p, sizeof(x));
                memcpy(&y, b + 4 * ((size_t)p * 32 + j), sizeof(y));
                sum += amx_bf16_float((uint16_t)(x & 0xffffu)) * amx_bf16_float((uint16_t)(y & 0xffffu));
                sum += amx_bf16_float((uint16_t)(x >> 16)) * amx_bf16_float((uint16_t)(y >> 16));
            }
            c[(size_t)i * ldc + j] = sum;
        }
    }
}

static void amx_gemm_test_mode(int emulated_tiles, int scalar_packing) {
    amx_gemm_emulated = emulated_tiles;
    amx_pack_scalar = scalar_packing;
}

static inline void amx_block(float* c, int ldc, const char* a, size_t sa, const char* b, int kp, int accumulate,
                             const float* c_next, int ld_next) {
    if (amx_gemm_emulated) { amx_block_32x32_emulated(c, ldc, a, sa, b, kp, accumulate); }
    else { amx_block_32x32(c, ldc, a, sa, b, 128, kp, accumulate, c_next, (size_t)ld_next); }
}

// What the first K block's sums start from, and what is added to them after: C's old values (beta 1) and the bias
// are added to the block's sums once they are done, as oneDNN's sum post-op and bias do (the same bits as oneDNN's
// kernel wherever K is one block); later K blocks add onto C in the tiles
enum { AMX_ADD_NONE = 0, AMX_ADD_C = 1, AMX_ADD_BIAS = 2 };

// a block of C at the matrix's edge (rows x cols inside it), or one that adds C or the bias after its sums: through a
// 32 x 32 buffer (c_next, the next block to prefetch, at C's stride ldc)
static void amx_block_via_buffer(float* c, int ldc, int rows, int cols, const char* a, size_t sa, const char* b,
                                 int kp, int accumulate, int add, const float* bias, const float* c_next) {
    float tmp[32 * 32] __attribute__((aligned(64)));
    if (accumulate || rows < 32 || cols < 32) {
        for (int i = 0; i < 32; i++) {
            for (int j = 0; j < 32; j++) { tmp[i * 32 + j] = accumulate && i < rows && j < cols ? c[(size_t)i * ldc + j] : 0.0f; }
        }
    }
    amx_block(tmp, 32, a, sa, b, kp, accumulate || rows < 32 || cols < 32, c_next, ldc);
    for (int i = 0; i < rows; i++) {
        float* row = c + (size_t)i * ldc;
        const float* sums = tmp + i * 32;
        if (add == AMX_ADD_C) {
            for (int j = 0; j < cols; j++) { row[j] = row[j] + sums[j]; }
        } else if (add == AMX_ADD_BIAS) {
            for (int j = 0; j < cols; j++) { row[j] = bias[j] + sums[j]; }
        } else {
            memcpy(row, sums, (size_t)cols * sizeof(float));
        }
    }
}

// per-thread packing buffers (op(B)'s block, op(A)'s block), grown as needed and freed with the thread
typedef struct { uint32_t* buf[2]; size_t cap[2]; } AmxPack;
static pthread_key_t amx_pack_key;
static pthread_once_t amx_pack_key_once = PTHREAD_ONCE_INIT;
static void amx_pack_free(void* p) {
    AmxPack* b = (AmxPack*)p;
    free(b->buf[0]);
    free(b->buf[1]);
    free(b);
}
static void amx_pack_key_create(void) {
    if (pthread_key_create(&amx_pack_key, amx_pack_free) != 0) { llmc_die("pthread_key_create failed (AMX GEMM buffers)"); }
}
static uint32_t* amx_pack_buffer(int which, size_t n) {
    pthread_once(&amx_pack_key_once, amx_pack_key_create);
    AmxPack* b = (AmxPack*)pthread_getspecific(amx_pack_key);
    if (b == NULL) {
        b = (AmxPack*)calloc(1, sizeof(AmxPack));
        if (b == NULL || pthread_setspecific(amx_pack_key, b) != 0) { llmc_die("out of memory (AMX GEMM buffers)"); }
    }
    if (n > b->cap[which]) {
        free(b->buf[which]);
        b->buf[which] = (uint32_t*)aligned_alloc(64, (n * sizeof(uint32_t) + 63) & ~(size_t)63);
        if (b->buf[which] == NULL) { llmc_die("out of memory (AMX GEMM buffers: %zu bytes)", n * sizeof(uint32_t)); }
        b->cap[which] = n;
    }
    return b->buf[which];
}

// one thread's rectangle [m0, m1) x [n0, n1) of C
static void amx_gemm_rect(int transA, int transB, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                          int ldb, int beta_one, const float* bias, float* C, int ldc, int m0, int m1, int n0, int n1) {
    if (!amx_gemm_emulated) { amx_configure_16x64(); }
    int kcb = amx_kc(K), a_in_place = !transA && K % 32 == 0;
    // the thread's columns in equal blocks of at most AMX_NC_BYTES packed (a ragged last block would repack all of
    // op(A) for a few columns)
    int nc_max = AMX_NC_BYTES / (2 * kcb) / 32 * 32;
    nc_max = nc_max < 32 ? 32 : nc_max;
    int nblocks = (n1 - n0 + nc_max - 1) / nc_max;
    nc_max = ((n1 - n0 + nblocks - 1) / nblocks + 31) / 32 * 32;
    uint32_t* bpack = amx_pack_buffer(0, (size_t)(kcb / 2) * nc_max);
    uint32_t* apack = amx_pack_buffer(1, (size_t)(kcb / 2) * AMX_MC);
    for (int jc = n0; jc < n1; jc += nc_max) {
        int nc = n1 - jc < nc_max ? n1 - jc : nc_max;
        for (int k0 = 0; k0 < K; k0 += kcb) {
            int kc = K - k0 < kcb ? (K - k0 + 31) / 32 * 32 : kcb, kp = kc / 2;
            int accumulate = k0 > 0, add = k0 > 0 ? AMX_ADD_NONE : beta_one ? AMX_ADD_C : bias != NULL ? AMX_ADD_BIAS : AMX_ADD_NONE;
            amx_pack_b(bpack, B, ldb, transB, K, N, k0, kc, jc, nc);
            for (int ic = m0; ic < m1; ic += AMX_MC) {
                int mc = m1 - ic < AMX_MC ? m1 - ic : AMX_MC;
                int full_strips = mc / 32;
                if (!a_in_place) { amx_pack_a(apack, A, lda, transA, M, K, ic, mc, k0, kc); }
                else if (mc % 32 != 0) { // the ragged last strip, packed with zero rows
                    amx_pack_a(apack + (size_t)full_strips * 32 * kp, A, lda, 0, M, K, ic + 32 * full_strips, mc % 32, k0, kc);
                }
                // a strip stays in L1 while the panels stream past it from L2 (the other way round, panel by panel,
                // ran the T=64 step's GEMMs 1.2-2x slower on the AMX Xeon)
                int strips = (mc + 31) / 32, panels = (nc + 31) / 32;
                for (int s = 0; s < strips; s++) {
                    for (int q = 0; q < panels; q++) {
                        int j = jc + 32 * q, cols = N - j < 32 ? N - j : 32;
                        const char* panel = (const char*)(bpack + (size_t)q * kp * 32);
                        int i = ic + 32 * s, rows = M - i < 32 ? M - i : 32;
                        const char* strip;
                        size_t sa;
                        if (a_in_place && s < full_strips) {
                            strip = (const char*)(A + (size_t)i * lda + k0);
                            sa = 2 * (size_t)lda;
                        } else {
                            strip = (const char*)(apack + (size_t)s * 32 * kp);
                            sa = 4 * (size_t)kp;
                        }
                        float* c = C + (size_t)i * ldc + j;
                        const float* bias_j = bias != NULL ? bias + j : NULL;
                        // the block after this one, prefetched while this one runs where it is a whole 32 x 32
                        int next_i = q + 1 < panels ? i : i + 32, next_j = q + 1 < panels ? j + 32 : jc;
                        int next_whole = (q + 1 < panels || s + 1 < strips) && next_i + 32 <= m1 && next_j + 32 <= N;
                        const float* c_next = next_whole ? C + (size_t)next_i * ldc + next_j : NULL;
                        if (rows == 32 && cols == 32 && add == AMX_ADD_NONE) { amx_block(c, ldc, strip, sa, panel, kp, accumulate, c_next, ldc); }
                        else { amx_block_via_buffer(c, ldc, rows, cols, strip, sa, panel, kp, accumulate, add, bias_j, c_next); }
                    }
                }
            }
        }
    }
}
#endif

static int amx_gemm_bf16(int transA, int transB, int M, int N, int K, const uint16_t* A, int lda, const uint16_t* B,
                         int ldb, float beta, const float* bias, float* C, int ldc) {
#if AMX_X86
    if (!(amx_gemm_emulated || amx_usable()) || !(beta == 0.0f || beta == 1.0f) || (bias != NULL && beta != 0.0f)) { return -1; }
    if (M <= 0 || N <= 0) { return 0; }
    if (K <= 0) {
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                float* c = C + (size_t)i * ldc + j;
                *c = bias != NULL ? bias[j] : beta == 0.0f ? 0.0f : *c;
            }
        }
        return 0;
    }
    int nthreads = 1;
#ifdef _OPENMP
    if (!omp_in_parallel()) { nthreads = omp_get_max_threads(); }
#endif
    int pr, pc;
    gemm_thread_grid(M, N, nthreads, 32, 32, !transA && K % 32 == 0 ? 0.0 : 1.0, &pr, &pc); // A read in place: no packing
    int beta_one = beta == 1.0f;
    #pragma omp parallel num_threads(pr * pc) if (pr * pc > 1)
    {
        int t = 0;
#ifdef _OPENMP
        t = omp_get_thread_num();
#endif
        int m0, m1, n0, n1;
        split_units(M, pr, t / pc, 32, &m0, &m1);
        split_units(N, pc, t % pc, 32, &n0, &n1);
        if (m0 < m1 && n0 < n1) { amx_gemm_rect(transA, transB, M, N, K, A, lda, B, ldb, beta_one, bias, C, ldc, m0, m1, n0, n1); }
    }
    return 0;
#else
    (void)transA; (void)transB; (void)M; (void)N; (void)K; (void)A; (void)lda; (void)B; (void)ldb; (void)beta;
    (void)bias; (void)C; (void)ldc;
    return -1;
#endif
}

#endif // LLMC_CPU_AMX_GEMM_H
