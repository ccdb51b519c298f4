/*
llmc/cpu/layernorm_cpu.h: LayerNorm on the CPU, fp32 with OpenMP; the CPU side of llmc/cuda/layernorm.cuh. GPT-2's
norm, and the backward every norm shares (llmc/cpu/rmsnorm_cpu.h's too): the rows' input gradients by a row rule,
the weight gradient, the kernels that run them.

    layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C)
        out (B,T,C) = (inp - mean) * rstd * weight + bias; mean, rstd (B,T) kept for the backward
    layernorm_recompute(out, inp, mean, rstd, weight, bias, B, T, C)
        layernorm_forward's output again from its input and kept statistics (the same bits)
    fused_residual_forward(residual, out, mean, rstd, inp1, inp2, weight, bias, B, T, C)
        residual = inp1 + inp2, then out = layernorm(residual): one pass over each row instead of two
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C)
        dinp, dweight, dbias += their gradients
    layernorm_backward_into(..., accumulate)   the same, dinp added (1) or written (0: its old contents never read)
    norm_backward(row, layernorm_means, dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C, accumulate)
        every norm's backward: dinp by the norm's row rule (layernorm_backward_row, RMSNorm's), dweight += column
        sums of (inp - mean) * rstd * dout (mean NULL: 0, RMSNorm's; dweight NULL: none), dbias += those of dout
        (NULL: none)
    norm_weight_backward(dweight, dbias, dout, inp, mean, rstd, BT, C)   the weight gradients alone

weight, bias (C). eps is llmc/layer_math.h's LAYERNORM_EPS. A function whose output a GEMM reads writes that
output's bf16 copy too when it has one (-p bf16 on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow).

The kernels (LLMC_NORM, read once; doc/cpu-speed.md). A row's sums are fp32 adds in the row's order, each term
rounded (NORM_SUMS_UNFUSED), so the bits are fixed by the inputs and never depend on the thread count.
    fused (the default)    grouped, with the weight gradient summed in the input gradients' pass (dout and inp read
                           once): by chunks of NORM_CHUNK rows, then the chunks in order, which changes the weight
                           gradients' bits (not their thread-count independence); the rest is grouped's
    grouped                16 rows' sums side by side (8 on an AVX2 build, 4 below), one per lane of a vector
                           (norm_columns turns a 16 x 16 block);
                           the weight gradient in one pass over the rows per thread: the bits of rows (the default
                           until 2026-11-29 evening, kept to time against beyond the Zen 5)
    rows                   a row at a time (its sums run at the latency of an add), the weight gradient in one pass
                           over the rows per 64 columns: the kernels before 2026-11-29, kept to time against
*/
#ifndef LLMC_LAYERNORM_CPU_H
#define LLMC_LAYERNORM_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "matmul.h"
#include "phase_time.h"
#include "vecmath.h"

// ----------------------------------------------------------------------------
// The grouped kernels (LLMC_NORM=grouped, and fused, the default): NORM_GROUP rows at once. A row's sum over its C
// values is a chain of dependent fp32 adds (no reassociation: the bits are fixed by the order), so one row at a time
// runs at the add's latency. Here NORM_GROUP rows' chains run side by side, one per lane of a vector: a square block of the rows
// is turned (norm_columns) so that vector j holds column i + j of every row, and each lane adds its row's values in
// the row's own order, the same bits as the row-at-a-time sums (LLMC_NORM=rows, kept selectable). Rows left over
// (BT not a multiple of NORM_GROUP) and columns left over (C not a multiple of it) take the scalar code, in order.

// rows per group: a vector register's floats (the square blocks the shuffles turn fit the registers; 16-float vectors
// split in two on an AVX2 build made the grouped kernel 1.6x slower than the rows one)
#if defined(__AVX512F__)
#define NORM_GROUP 16
#elif defined(__AVX__)
#define NORM_GROUP 8
#else
#define NORM_GROUP 4
#endif
typedef float NormLanes __attribute__((vector_size(NORM_GROUP * sizeof(float))));  // lane r: row r of a group
typedef int32_t NormIndex __attribute__((vector_size(NORM_GROUP * sizeof(int32_t))));

#if defined(__clang__)
#define NORM_SHUFFLE(a, b, ...) __builtin_shufflevector(a, b, __VA_ARGS__)
#else
#define NORM_SHUFFLE(a, b, ...) __builtin_shuffle(a, b, (NormIndex){__VA_ARGS__})
#endif

typedef enum { NORM_ROWS, NORM_GROUPED, NORM_FUSED } NormKernel;

static int norm_kernel_state = -1;  // -1: LLMC_NORM not read yet

// the norms' kernel: LLMC_NORM=rows|grouped|fused (read once; anything else is one error line), fused by default
static NormKernel norm_kernel(void) {
    static const char* const names[] = {"rows", "grouped", "fused"}; // (NormKernel's order)
    if (norm_kernel_state < 0) { norm_kernel_state = env_choice("LLMC_NORM", names, 3, NORM_FUSED); }
    return (NormKernel)norm_kernel_state;
}

// the kernel the next calls run, whatever LLMC_NORM says (dev/test/test_norm_cpu runs both)
static inline void norm_kernel_use(NormKernel k) { norm_kernel_state = (int)k; }

// Whether LayerNorm's grouped backward asks for the next group's rows (dout, inp, and dinp when it is added to) at
// the start of a group, in address order: its two means read a group's rows a cache line of each at a time, 32
// streams, which the hardware prefetcher does not follow, and the rows asked for ahead stream in while this group's
// sums and rows run on data in the cache. LLMC_NORM_AHEAD=1 asks, 0 does not (the same bits either way); unset, the
// CPU's vendor chooses (norm_ahead_default). RMSNorm's backward reads its rows one after another and does not ask.
// Read once; norm_ahead_use sets it (tests).
static int norm_ahead_state = -1;

// 1 on an Intel CPU (GCC's reading of the CPU's vendor string)
static int norm_cpu_is_intel(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") ? 1 : 0;
#else
    return 0;
#endif
}

// LLMC_NORM_AHEAD's default on an Intel CPU (intel 1) or another: off on Intel's, whose own prefetchers follow the
// 32 streams (the AMX Xeon, family 6 model 207: LayerNorm's fused backward 0.68-0.95x with the rows asked for, in
// four runs over two sessions; the -p bf16 step's norm phase 143.2 against 131.4 ms), on elsewhere (the Zen 4 1.10x, the Zen 5
// 1.24x; doc/cpu-speed.md). An AVX-512 Xeon without AMX and the Zen 3 are not timed yet.
static inline int norm_ahead_default(int intel) { return intel ? 0 : 1; }

static inline int norm_ahead(void) {
    static const char* const names[] = {"0", "1"};
    if (norm_ahead_state < 0) {
        norm_ahead_state = env_choice("LLMC_NORM_AHEAD", names, 2, norm_ahead_default(norm_cpu_is_intel()));
    }
    return norm_ahead_state;
}
static inline void norm_ahead_use(int on) { norm_ahead_state = on; }

// asks for the n floats at p, one cache line at a time (a prefetch: no fault past the end of anything)
static inline void norm_prefetch_span(const float* p, size_t n) {
    for (size_t i = 0; i < n; i += 64 / sizeof(float)) { __builtin_prefetch(p + i); }
}

// The row sums add each term rounded to fp32 (a product is never fused into the add): GCC contracts a * b + c into
// one FMA where it can (-ffp-contract=fast, its default), and where that happens in a row's sum depends on how it
// vectorised the loop (the terms its vector loop multiplies were rounded, its scalar tail's were fused), which no
// other kernel could follow. Off in the functions that hold the sums, every term is rounded, in both kernels and
// on every compiler: the bits GCC gave before whenever C is a multiple of the vector width (GPT-2's 768).
// (clang contracts only within an expression, the same way in both kernels.)
#if defined(__GNUC__) && !defined(__clang__)
#define NORM_SUMS_UNFUSED __attribute__((optimize("fp-contract=off")))
#else
#define NORM_SUMS_UNFUSED
#endif

// the mean of one row x (C), its values added in order (llmc/layer_math.h's layernorm_mean)
static float layernorm_row_mean(const float* x, int C) {
    float sum = 0.0f;
    for (int i = 0; i < C; i++) { sum += x[i]; }
    return sum / (float)C;
}

// 1 / std of one row x (C) about its mean m: the squared deviations added in order, each rounded (layer_math.h's
// layernorm_rstd, unfused)
NORM_SUMS_UNFUSED static float layernorm_row_rstd(const float* x, float m, int C) {
    float sum = 0.0f;
    for (int i = 0; i < C; i++) {
        float d = x[i] - m;
        sum += d * d;
    }
    return 1.0f / sqrtf(sum / (float)C + LAYERNORM_EPS);
}

// swaps bit d of the row index with bit d of the column index: the off-diagonal d x d blocks of every 2d x 2d block
// of the NORM_GROUP x NORM_GROUP tile v trade places; the swaps for d = NORM_GROUP / 2, ..., 2, 1 transpose it. Lane l of
// the new v[k] is v[k][l] where bit d of l is clear, else v[k + d][l - d]; of the new v[k + d], v[k][l + d] where it is
// clear, else v[k + d][l] (index W + l: lane l of the second vector)
#define NORM_SWAP(v, a, b, lo, hi)                                                                            \
    do {                                                                                                      \
        NormLanes x_ = v[a], y_ = v[b];                                                                       \
        v[a] = NORM_SHUFFLE(x_, y_, lo);                                                                      \
        v[b] = NORM_SHUFFLE(x_, y_, hi);                                                                      \
    } while (0)
// (masks: NORM_SWAPd, whose _LO and _HI lists the swap takes; pasted, so they reach NORM_SWAP unexpanded)
#define NORM_STAGE(v, d, masks)                                                                               \
    for (int a_ = 0; a_ < NORM_GROUP; a_ += 2 * (d)) {                                                        \
        for (int k_ = a_; k_ < a_ + (d); k_++) { NORM_SWAP(v, k_, k_ + (d), masks##_LO, masks##_HI); }        \
    }
#if NORM_GROUP == 16
#define NORM_SWAP8_LO 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23
#define NORM_SWAP8_HI 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31
#define NORM_SWAP4_LO 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27
#define NORM_SWAP4_HI 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31
#define NORM_SWAP2_LO 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29
#define NORM_SWAP2_HI 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31
#define NORM_SWAP1_LO 0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30
#define NORM_SWAP1_HI 1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31
#elif NORM_GROUP == 8
#define NORM_SWAP4_LO 0, 1, 2, 3, 8, 9, 10, 11
#define NORM_SWAP4_HI 4, 5, 6, 7, 12, 13, 14, 15
#define NORM_SWAP2_LO 0, 1, 8, 9, 4, 5, 12, 13
#define NORM_SWAP2_HI 2, 3, 10, 11, 6, 7, 14, 15
#define NORM_SWAP1_LO 0, 8, 2, 10, 4, 12, 6, 14
#define NORM_SWAP1_HI 1, 9, 3, 11, 5, 13, 7, 15
#else
#define NORM_SWAP2_LO 0, 1, 4, 5
#define NORM_SWAP2_HI 2, 3, 6, 7
#define NORM_SWAP1_LO 0, 4, 2, 6
#define NORM_SWAP1_HI 1, 5, 3, 7
#endif

#ifndef NORM_PREFETCH
#define NORM_PREFETCH 64
#endif

// t[j] (lane r) = x[r * stride + i + j] for j, r < NORM_GROUP: the columns i.. of NORM_GROUP rows of x, one vector per
// column
static inline __attribute__((always_inline)) void norm_columns(NormLanes t[NORM_GROUP], const float* x, size_t stride,
                                                               int i) {
    for (int r = 0; r < NORM_GROUP; r++) {
        const float* row = x + (size_t)r * stride + i;
        memcpy(&t[r], row, sizeof(NormLanes));
        // the same row NORM_PREFETCH floats on: a group's rows are NORM_GROUP streams at once, more than the
        // hardware prefetcher follows (the Zen 5's LayerNorm backward, 1 thread, CPU time: 3.74 -> 3.15 ms for 4096
        // rows of 768; the address may lie past the row, which a prefetch may)
        __builtin_prefetch(row + NORM_PREFETCH);
    }
#if NORM_GROUP == 16
    NORM_STAGE(t, 8, NORM_SWAP8);
#endif
#if NORM_GROUP >= 8
    NORM_STAGE(t, 4, NORM_SWAP4);
#endif
    NORM_STAGE(t, 2, NORM_SWAP2);
    NORM_STAGE(t, 1, NORM_SWAP1);
}

// the mean and 1/std of NORM_GROUP rows x (rows of C, stride apart), each row's sums in layernorm_row_mean's and
// layernorm_row_rstd's order: the same bits as those, NORM_GROUP chains at once
NORM_SUMS_UNFUSED static void layernorm_stats_group(float mean[NORM_GROUP], float rstd[NORM_GROUP], const float* x, size_t stride,
                                  int C) {
    NormLanes t[NORM_GROUP];
    NormLanes sum = {0};
    int CG = C / NORM_GROUP * NORM_GROUP;  // the columns the vectors take; the rest in scalar code, in order
    for (int i = 0; i < CG; i += NORM_GROUP) {
        norm_columns(t, x, stride, i);
        for (int j = 0; j < NORM_GROUP; j++) { sum += t[j]; }
    }
    float s[NORM_GROUP], m[NORM_GROUP];
    memcpy(s, &sum, sizeof(s));
    for (int r = 0; r < NORM_GROUP; r++) {
        for (int i = CG; i < C; i++) { s[r] += x[(size_t)r * stride + i]; }
        m[r] = s[r] / (float)C;
        mean[r] = m[r];
    }
    NormLanes mv, sq = {0};
    memcpy(&mv, m, sizeof(mv));
    for (int i = 0; i < CG; i += NORM_GROUP) {
        norm_columns(t, x, stride, i);
        for (int j = 0; j < NORM_GROUP; j++) {
            NormLanes d = t[j] - mv;
            sq += d * d;
        }
    }
    memcpy(s, &sq, sizeof(s));
    for (int r = 0; r < NORM_GROUP; r++) {
        for (int i = CG; i < C; i++) {
            float d = x[(size_t)r * stride + i] - m[r];
            s[r] += d * d;
        }
        rstd[r] = 1.0f / sqrtf(s[r] / (float)C + LAYERNORM_EPS);
    }
}

// one row of a layernorm from its mean m and 1/std s: o (C) = (x - m) * s * weight + bias, and o16 (C) its bf16
// copy (NULL: none; o NULL: the copy alone). The forward pass and the backward's recompute share it, so both give
// the same bits.
static inline void layernorm_apply_row(float* o, uint16_t* o16, const float* x, float m, float s, const float* weight,
                                       const float* bias, int C) {
    if (o == NULL) {
#if MATMUL_X86
        if (mm_bf16_cvt_on()) { // (the row as floats, 256 at a time, then rounded by AVX512-BF16's conversion: the same bits)
            float y[256];
            for (int i0 = 0; i0 < C; i0 += 256) {
                int n = C - i0 < 256 ? C - i0 : 256;
                for (int i = 0; i < n; i++) { y[i] = (x[i0 + i] - m) * s * weight[i0 + i] + bias[i0 + i]; }
                mm_round_bf16_row(o16 + i0, y, (size_t)n);
            }
            return;
        }
#endif
        for (int i = 0; i < C; i++) { o16[i] = matmul_bf16_round_value((x[i] - m) * s * weight[i] + bias[i]); }
        return;
    }
    for (int i = 0; i < C; i++) { o[i] = (x[i] - m) * s * weight[i] + bias[i]; }
    bf16_copy_row(o16, o, (size_t)C);
}

// the bytes a norm's output takes as it is written: fp32 (out32 not NULL) and its bf16 copy (out16 not NULL)
static inline double norm_output_bytes(const float* out32, const uint16_t* out16) {
    return (out32 != NULL ? 4.0 : 0.0) + (out16 != NULL ? 2.0 : 0.0);
}

// the bytes of the bf16 copy of x's first n values that a norm's backward writes beside them (0 without a copy)
static inline double norm_copy_bytes(const float* x, double n) {
    return matmul_bf16_shadow(x, (size_t)n) != NULL ? 2.0 * n : 0.0;
}

// the mean and 1/std of rows r0 .. r0 + n - 1 of x (C each) into mean, rstd (indexed by row): all at once with the
// grouped kernel when n is a whole group, else a row at a time (the same bits either way)
static inline void layernorm_stats_rows(NormKernel kernel, float* mean, float* rstd, const float* x, int r0, int n,
                                        int C) {
    if (n == NORM_GROUP && kernel != NORM_ROWS) {
        layernorm_stats_group(mean + r0, rstd + r0, x + (size_t)r0 * C, (size_t)C, C);
        return;
    }
    for (int r = r0; r < r0 + n; r++) {
        mean[r] = layernorm_row_mean(x + (size_t)r * C, C);
        rstd[r] = layernorm_row_rstd(x + (size_t)r * C, mean[r], C);
    }
}

static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int B, int T, int C) {
    // out and inp are (B,T,C), mean and rstd are (B,T) (kept for the backward pass),
    // weight and bias are (C)
    double t_phase = phase_begin();
    size_t N = (size_t)B * T * C;
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    float* out32 = matmul_bf16_fp32_kept(out, N) ? out : NULL; // (NULL: the bf16 copy alone)
    NormKernel kernel = norm_kernel();  // (read here: never inside a parallel region, where each thread would)
    int BT = B * T;
    #pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < BT; r0 += NORM_GROUP) {
        int n = BT - r0 < NORM_GROUP ? BT - r0 : NORM_GROUP;
        layernorm_stats_rows(kernel, mean, rstd, inp, r0, n, C);
        for (int bt = r0; bt < r0 + n; bt++) {
            size_t at = (size_t)bt * C;
            layernorm_apply_row(out32 != NULL ? out32 + at : NULL, out16 != NULL ? out16 + at : NULL, inp + at,
                                mean[bt], rstd[bt], weight, bias, C);
        }
    }
    matmul_bf16_alone_written(out, N);
    double BTC = (double)N;
    // inp read, out (fp32, its bf16 copy, or the copy alone), mean, rstd written
    phase_end(PHASE_NORM, t_phase, (4.0 + norm_output_bytes(out32, out16)) * BTC + 8.0 * B * T, 7.0 * BTC);
}

// out (B,T,C) = layernorm_forward's output again, from its input and the mean and rstd it kept (the same bits): the
// backward's, where only a GEMM reads the output and the forward did not keep it
static void layernorm_recompute(float* out, const float* inp, const float* mean, const float* rstd,
                                const float* weight, const float* bias, int B, int T, int C) {
    double t_phase = phase_begin();
    size_t N = (size_t)B * T * C;
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    float* out32 = matmul_bf16_fp32_kept(out, N) ? out : NULL; // (NULL: the bf16 copy alone)
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        size_t at = (size_t)bt * C;
        layernorm_apply_row(out32 != NULL ? out32 + at : NULL, out16 != NULL ? out16 + at : NULL, inp + at, mean[bt],
                            rstd[bt], weight, bias, C);
    }
    matmul_bf16_alone_written(out, N);
    double BTC = (double)N;
    phase_end(PHASE_NORM, t_phase, (4.0 + norm_output_bytes(out32, out16)) * BTC + 8.0 * B * T, 4.0 * BTC);
}

// the residual add fused with the layernorm that reads it: one pass over each row instead of two
// (the same arithmetic as residual_forward then layernorm_forward, so the same bits)
static void fused_residual_forward(float* res_out, float* ln_out, float* mean, float* rstd, const float* inp1,
                                   const float* inp2, const float* weight, const float* bias, int B, int T, int C) {
    // res_out, ln_out, inp1, inp2 are (B,T,C); mean, rstd are (B,T); weight, bias are (C)
    double t_phase = phase_begin();
    size_t N = (size_t)B * T * C;
    uint16_t* ln16 = matmul_bf16_shadow(ln_out, N);
    float* ln32 = matmul_bf16_fp32_kept(ln_out, N) ? ln_out : NULL; // (NULL: the bf16 copy alone)
    NormKernel kernel = norm_kernel();
    int BT = B * T;
    #pragma omp parallel for schedule(static)
    for (int r0 = 0; r0 < BT; r0 += NORM_GROUP) {
        int n = BT - r0 < NORM_GROUP ? BT - r0 : NORM_GROUP;
        for (int bt = r0; bt < r0 + n; bt++) {
            const float* a = inp1 + (size_t)bt * C;
            const float* b = inp2 + (size_t)bt * C;
            float* x = res_out + (size_t)bt * C;
            for (int i = 0; i < C; i++) { x[i] = a[i] + b[i]; }
        }
        layernorm_stats_rows(kernel, mean, rstd, res_out, r0, n, C);
        for (int bt = r0; bt < r0 + n; bt++) {
            size_t at = (size_t)bt * C;
            layernorm_apply_row(ln32 != NULL ? ln32 + at : NULL, ln16 != NULL ? ln16 + at : NULL, res_out + at,
                                mean[bt], rstd[bt], weight, bias, C);
        }
    }
    matmul_bf16_alone_written(ln_out, N);
    double BTC = (double)N;
    // inp1, inp2 read; the residual and the norm's output (fp32, its bf16 copy, or the copy alone), mean, rstd written
    phase_end(PHASE_NORM, t_phase, (12.0 + norm_output_bytes(ln32, ln16)) * BTC + 8.0 * B * T, 8.0 * BTC);
}

// The weight (and bias) gradients of a normalisation layer (LayerNorm here, RMSNorm in
// llmc/cpu/rmsnorm_cpu.h): dweight[i] += sum over rows of norm * dout, norm = (inp - mean) * rstd
// (mean NULL: 0, RMSNorm's), dbias[i] += sum of dout (dbias NULL: none). Each thread owns a slice
// of the channels and sums the rows in order (each channel's order is the same for any thread count). The rows
// kernel walks the rows once per 64 channels; the grouped one once per thread, over its whole slice of them.
static void norm_weight_backward(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                                 const float* rstd, int BT, int C) {
    // dweight, dbias are (C); dout, inp are (BT,C); mean, rstd are (BT)
    // (its callers count it in their phase: the norm's backward reads dout and inp once, compulsorily)
    int slice = 64;  // channels a pass over the rows covers
    if (norm_kernel() != NORM_ROWS) {
#ifdef _OPENMP
        int threads = omp_get_max_threads();
#else
        int threads = 1;
#endif
        slice = ((C + threads - 1) / threads + 15) / 16 * 16;  // a thread's share, in whole 16-float vectors
    }
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += slice) {
        int c1 = c0 + slice < C ? c0 + slice : C;
        for (int bt = 0; bt < BT; bt++) {
            const float* x = inp + (size_t)bt * C;
            const float* d = dout + (size_t)bt * C;
            float m = mean != NULL ? mean[bt] : 0.0f, s = rstd[bt];
            for (int i = c0; i < c1; i++) { dweight[i] += (x[i] - m) * s * d[i]; }
            if (dbias != NULL) {
                for (int i = c0; i < c1; i++) { dbias[i] += d[i]; }
            }
        }
    }
}

// One row's input gradient of a normalisation layer: dx (C) from the output's gradient d (C), the row's input x (C),
// the weight (C), the row's mean m (0 for RMSNorm) and 1/std s, added to dx (accumulate) or written over it; scratch
// is a row (C) of work space the rule may use. LayerNorm's, RMSNorm's and the weightless RMSNorm's are each one.
typedef void (*NormBackwardRow)(float* dx, const float* d, const float* x, const float* weight, float m, float s, int C,
                                int accumulate, float* scratch);

// The input gradients of a normalisation layer's BT rows, one row rule (row) per row: dinp (BT,C) from dout and
// inp (BT,C), the weight (C) and each row's mean (NULL: 0) and rstd (BT), added or written, with dinp's bf16 copy
// when it has one (the GEMMs before the norm read it). Its weight gradients are norm_weight_backward's.
static void norm_backward_rows(NormBackwardRow row, float* dinp, const float* dout, const float* inp,
                               const float* weight, const float* mean, const float* rstd, int BT, int C,
                               int accumulate) {
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, (size_t)BT * C);
    #pragma omp parallel
    {
        float* scratch = (float*)mallocCheck((size_t)C * sizeof(float)); // this thread's row of work space
        #pragma omp for
        for (int bt = 0; bt < BT; bt++) {
            size_t at = (size_t)bt * C;
            row(dinp + at, dout + at, inp + at, weight, mean != NULL ? mean[bt] : 0.0f, rstd[bt], C, accumulate,
                scratch);
            if (dinp16 != NULL) { bf16_copy_row(dinp16 + at, dinp + at, (size_t)C); }
        }
        free(scratch);
    }
}

// LayerNorm's input gradient of one row from its two means: dx = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s,
// dnorm = d * weight, norm = (x - m) * s; added to dx (accumulate) or written over it
static inline void layernorm_backward_apply_row(float* dx, const float* d, const float* x, const float* weight, float m,
                                                float s, float dnorm_mean, float dnorm_norm_mean, int C,
                                                int accumulate) {
    if (accumulate) {
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    } else {
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dx[i] = (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
}

// dnorm = d * weight (d, x: one row of C, its mean m and 1/std s): the mean of dnorm and the mean of dnorm * norm,
// norm = (x - m) * s, the terms added in order, each rounded
NORM_SUMS_UNFUSED static void layernorm_backward_means_row(float* dnorm_mean, float* dnorm_norm_mean, const float* d,
                                                           const float* x, const float* weight, float m, float s,
                                                           int C) {
    float sum_dnorm = 0.0f, sum_dnorm_norm = 0.0f;
    for (int i = 0; i < C; i++) {
        float norm = (x[i] - m) * s;
        float dnorm = weight[i] * d[i];
        sum_dnorm += dnorm;
        sum_dnorm_norm += dnorm * norm;
    }
    *dnorm_mean = sum_dnorm / C;
    *dnorm_norm_mean = sum_dnorm_norm / C;
}

// LayerNorm's row rule (a NormBackwardRow): dx = (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * s,
// dnorm = d * weight, norm = (x - m) * s
static void layernorm_backward_row(float* dx, const float* d, const float* x, const float* weight, float m, float s,
                                   int C, int accumulate, float* scratch) {
    float dnorm_mean, dnorm_norm_mean;
    layernorm_backward_means_row(&dnorm_mean, &dnorm_norm_mean, d, x, weight, m, s, C);
    layernorm_backward_apply_row(dx, d, x, weight, m, s, dnorm_mean, dnorm_norm_mean, C, accumulate);
}

// layernorm_backward_row's two means for NORM_GROUP rows at once, each row's sums in its order (the same bits): for
// row r of d and x (rows of C, stride apart, their mean m and 1/std s), dnorm_mean[r] = mean of dnorm, dnorm_norm_mean[r]
// = mean of dnorm * norm
NORM_SUMS_UNFUSED static void layernorm_backward_means_group(float dnorm_mean[NORM_GROUP], float dnorm_norm_mean[NORM_GROUP],
                                           const float* d, const float* x, const float* weight, const float* m,
                                           const float* s, size_t stride, int C) {
    NormLanes td[NORM_GROUP], tx[NORM_GROUP];
    NormLanes mv, sv, sum_dnorm = {0}, sum_dnorm_norm = {0};
    memcpy(&mv, m, sizeof(mv));
    memcpy(&sv, s, sizeof(sv));
    int CG = C / NORM_GROUP * NORM_GROUP;
    for (int i = 0; i < CG; i += NORM_GROUP) {
        norm_columns(td, d, stride, i);
        norm_columns(tx, x, stride, i);
        for (int j = 0; j < NORM_GROUP; j++) {
            NormLanes norm = (tx[j] - mv) * sv;
            NormLanes dnorm = weight[i + j] * td[j];
            sum_dnorm += dnorm;
            sum_dnorm_norm += dnorm * norm;
        }
    }
    float a[NORM_GROUP], b[NORM_GROUP];
    memcpy(a, &sum_dnorm, sizeof(a));
    memcpy(b, &sum_dnorm_norm, sizeof(b));
    for (int r = 0; r < NORM_GROUP; r++) {
        const float* dr = d + (size_t)r * stride;
        const float* xr = x + (size_t)r * stride;
        for (int i = CG; i < C; i++) {
            float norm = (xr[i] - m[r]) * s[r];
            float dnorm = weight[i] * dr[i];
            a[r] += dnorm;
            b[r] += dnorm * norm;
        }
        dnorm_mean[r] = a[r] / C;
        dnorm_norm_mean[r] = b[r] / C;
    }
}

#define NORM_CHUNK SUM_CHUNK_ROWS  // rows per partial weight-gradient sum of the fused kernel (llmc/cpu/matmul.h)

// A normalisation layer's backward with the grouped kernel, rows split over threads, NORM_GROUP at a time: dinp (BT,C) from
// dout and inp (BT,C), the weight (C), each row's mean (NULL: 0) and rstd (BT), added or written, with dinp's bf16
// copy when it has one; the rows by the row rule, or by LayerNorm's NORM_GROUP-row means (layernorm_means: row is then
// layernorm_backward_row, which the rows left over take): the same bits as norm_backward_rows. With dweight (fused:
// LLMC_NORM=fused) the weight's gradients in the same pass (dout and inp are read once instead of twice): each chunk
// of NORM_CHUNK rows sums its terms (inp - mean) * rstd * dout and dout in row order into a partial sum of its own,
// and dweight, dbias (NULL: none) += the partial sums in chunk order, columns split over threads. The order depends
// on BT only, so the bits are the same for any thread count; they are not norm_weight_backward's (one running sum
// over all rows). dweight NULL: the input gradients alone.
static void norm_backward_grouped(NormBackwardRow row, int layernorm_means, float* dinp, float* dweight, float* dbias,
                                  const float* dout, const float* inp, const float* weight, const float* mean,
                                  const float* rstd, int BT, int C, int accumulate) {
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, (size_t)BT * C);
    int chunks = sum_chunks(BT);
    int sums = dbias != NULL ? 2 : 1;  // partial sums per chunk: dweight's, then dbias's
    float* partial = dweight != NULL ? (float*)mallocCheck((size_t)chunks * sums * C * sizeof(float)) : NULL;
    int ahead = layernorm_means && norm_ahead(); // (read here: never inside the parallel region)
    #pragma omp parallel
    {
        float* scratch = (float*)mallocCheck((size_t)C * sizeof(float)); // this thread's row of work space
        #pragma omp for schedule(static)
        for (int k = 0; k < chunks; k++) {
            int r_end = (k + 1) * NORM_CHUNK < BT ? (k + 1) * NORM_CHUNK : BT;
            float* pw = partial != NULL ? partial + (size_t)k * sums * C : NULL;  // (C) this chunk's dweight sum
            float* pb = pw != NULL && dbias != NULL ? pw + C : NULL;               // (C) its dbias sum
            if (pw != NULL) { memset(pw, 0, (size_t)sums * C * sizeof(float)); }
            for (int r0 = k * NORM_CHUNK; r0 < r_end; r0 += NORM_GROUP) {
                int n = r_end - r0 < NORM_GROUP ? r_end - r0 : NORM_GROUP;
                if (ahead && r0 + 2 * NORM_GROUP <= BT) { // the next group's rows, while this one's run in the cache
                    size_t next = (size_t)(r0 + NORM_GROUP) * C, span = (size_t)NORM_GROUP * C;
                    norm_prefetch_span(dout + next, span);
                    norm_prefetch_span(inp + next, span);
                    if (accumulate) { norm_prefetch_span(dinp + next, span); }
                }
                float dnorm_mean[NORM_GROUP], dnorm_norm_mean[NORM_GROUP];
                int grouped = layernorm_means && n == NORM_GROUP;
                if (grouped) {
                    layernorm_backward_means_group(dnorm_mean, dnorm_norm_mean, dout + (size_t)r0 * C,
                                                   inp + (size_t)r0 * C, weight, mean + r0, rstd + r0, (size_t)C, C);
                }
                for (int r = 0; r < n; r++) {
                    int bt = r0 + r;
                    size_t at = (size_t)bt * C;
                    float m = mean != NULL ? mean[bt] : 0.0f, s = rstd[bt];
                    if (grouped) {
                        layernorm_backward_apply_row(dinp + at, dout + at, inp + at, weight, m, s, dnorm_mean[r],
                                                     dnorm_norm_mean[r], C, accumulate);
                    } else {
                        row(dinp + at, dout + at, inp + at, weight, m, s, C, accumulate, scratch);
                    }
                    if (dinp16 != NULL) { bf16_copy_row(dinp16 + at, dinp + at, (size_t)C); }
                    if (pw == NULL) { continue; }
                    // the row's weight-gradient terms, while its dout and inp are in the cache
                    const float* x = inp + at;
                    const float* d = dout + at;
                    for (int i = 0; i < C; i++) { pw[i] += (x[i] - m) * s * d[i]; }
                    if (pb != NULL) {
                        for (int i = 0; i < C; i++) { pb[i] += d[i]; }
                    }
                }
            }
        }
        free(scratch);
    }
    if (partial == NULL) { return; }
    partial_sums_add(dweight, partial, chunks, (size_t)sums * C, C);
    if (dbias != NULL) { partial_sums_add(dbias, partial + C, chunks, (size_t)sums * C, C); }
    free(partial);
}

// A normalisation layer's input and weight gradients by the kernel LLMC_NORM chose (the rule above the rows kernel's
// norm_backward_rows, then norm_weight_backward; the grouped kernel's norm_backward_grouped, then the same; the fused
// kernel's norm_backward_grouped with the weight): dinp added or written, dweight (NULL: no weight) and dbias (NULL:
// no bias) added. layernorm_means: LayerNorm's (row is layernorm_backward_row).
static void norm_backward(NormBackwardRow row, int layernorm_means, float* dinp, float* dweight, float* dbias,
                          const float* dout, const float* inp, const float* weight, const float* mean,
                          const float* rstd, int BT, int C, int accumulate) {
    NormKernel kernel = norm_kernel();
    if (kernel == NORM_FUSED) {
        norm_backward_grouped(row, layernorm_means, dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C,
                              accumulate);
        return;
    }
    if (kernel == NORM_GROUPED) {
        norm_backward_grouped(row, layernorm_means, dinp, NULL, NULL, dout, inp, weight, mean, rstd, BT, C,
                              accumulate);
    } else {
        norm_backward_rows(row, dinp, dout, inp, weight, mean, rstd, BT, C, accumulate);
    }
    if (dweight != NULL) { norm_weight_backward(dweight, dbias, dout, inp, mean, rstd, BT, C); }
}

// dinp (B,T,C) = the input gradient, added to dinp when accumulate, else written; dweight, dbias += theirs
static void layernorm_backward_into(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                    const float* weight, const float* mean, const float* rstd, int B, int T, int C,
                                    int accumulate) {
    // dinp, dout, inp are (B,T,C); dweight, dbias, weight are (C); mean, rstd are (B,T)
    int BT = B * T;
    double t_phase = phase_begin();
    norm_backward(layernorm_backward_row, 1, dinp, dweight, dbias, dout, inp, weight, mean, rstd, BT, C, accumulate);
    double BTC = (double)BT * C;
    // dout, inp read; dinp updated (or written), and its bf16 copy written when it has one
    phase_end(PHASE_NORM, t_phase, 4.0 * ((accumulate ? 4.0 : 3.0) * BTC + 2.0 * BT) + norm_copy_bytes(dinp, BTC),
              10.0 * BTC);
}

static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C) {
    layernorm_backward_into(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C, 1);
}

#endif // LLMC_LAYERNORM_CPU_H
