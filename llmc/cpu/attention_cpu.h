/*
llmc/cpu/attention_cpu.h: causal self-attention on the CPU, forward and backward, for every CPU model (included by
the trainers). Two kernels behind one set of calls:

    attention_forward(out, att, inp, B, T, C, NH)             GPT-2's: inp (B,T,3C) = [q | k | v], out (B,T,C)
    attention_backward(dinp, dout, inp, att, B, T, C, NH)     dinp (B,T,3C) += the gradient for dout (B,T,C)
    attention_gqa_forward(out, lse, qkv, B, T, NH, NKV, HS)   grouped-query attention on Llama 3's and nanochat's
    attention_gqa_backward(dqkv, dout, qkv, out, lse,         packed heads: qkv (B,T,(NH + 2 NKV) HS) is NH q heads,
                           B, T, NH, NKV, HS)                 then NKV k heads, then NKV v heads; query head h reads
                                                              k/v head h / (NH/NKV); out (B,T,NH HS); dqkv += the
                                                              gradient, a k/v head's summed over its query heads
    attention_gqa_backward_into(..., accumulate)              the same, added (1) or written (0: dqkv's old contents
                                                              never read; the trainers' call, no zeroing pass)
    attention_gqa_forward_bf16(out16, lse, qkv, qkv16, ...)   the blocked kernel keeping q, k, v and its output in bf16
    attention_gqa_backward_bf16(dqkv, dbias, beta, dout,      (the -p bf16 activation layouts): the forward writes qkv
                                qkv16, out16, lse, ...,       rounded and the output rounded, the backward reads them;
                                accumulate)                   dbias (QKV floats, or NULL) = beta dbias + dqkv's rows
                                                              summed (GPT-2's qkv bias gradient)
    attention_kernel_chosen()                                 ATTENTION_TILED or ATTENTION_BLOCKED (below)

Scores are scaled by 1/sqrt(HS); query t sees keys 0..t. HS is any size (the blocked kernel pads it to 16).

The tiled kernel (fp32; the fp32 path's): a head's queries ATT_TILE rows at a time, each tile's scores against every
key it may see at once (ATT_TILE x (t0 + ATT_TILE) floats per thread, never (T,T)), the causal softmax, the weighted
sum of V; the products are fp32 GEMMs of llmc/cpu/matmul.h, one thread each (the heads and tiles run in parallel).
Work above the diagonal is skipped a tile at a time. The backward recomputes each tile's weights with the same calls
on the same numbers, so they are the forward's bit for bit. A call with att (B,NH,T,T) keeps the weights there
instead (and the backward reads them): pyllmc and the tests; such a call always runs tiled.

The blocked kernel (bf16 products; the -p bf16 path's): per query tile of one head the keys come in blocks of
ATT_TILE with an online softmax (each row's running max m and sum l; the output so far is rescaled by e^(m_old -
m_new) when the max grows), so a thread holds one tile x block of scores. S = Q K^T and O += P V take bf16 operands
(Q, K, V and P rounded to nearest even, as llmc/cpu/matmul.h rounds) and sum in fp32, on AMX tiles where the CPU
and OS allow them (llmc/cpu/amx.h; LLMC_ATTENTION_AMX=0 keeps vdpbf16ps there), else on a micro-kernel of vdpbf16ps
(AVX512-BF16, asked at run time) or, on a CPU without it, the same bf16 numbers multiplied in fp32. lse
(B,T,NH) receives each row's log-sum-exp of its scaled scores (NULL: not kept). The backward is flash attention's:
per (query tile, key block) it recomputes S and P = e^(scale S - lse), then dP = dO V^T, dS = P (dP - D) scale with
D = rowsum(dO o O), dQ += dS K, dK += dS^T Q, dV += P^T dO, all in bf16 with fp32 sums. Given out and lse (the Llama
3 and nanochat trainers keep lse as an activation, GPT-2's too) it reads them; with either NULL
(attention_backward's calls) it first runs each tile's forward again, the same code on the same numbers, so the
gradient is the same bits at two products more per tile and block. Why a dedicated micro-kernel and not matmul_gemm(MATMUL_BF16, ...) per tile: at
ATT_TILE = 64, HS = 64 that GEMM's rounding and packing per call cost more than the products (one tile's S and
P V on one Zen 5 thread: 3.5-6.5 us on the micro-kernel, operands packed once per tile and block, against 13-19 us
on oneDNN's or the built-in bf16 GEMM; dev/test/test_attention_cpu.c --time measures both).

Determinism: no atomics; each sum runs in one fixed order on one thread. Both backwards give a k/v head, with all
its query heads, to one thread, which sums dK and dV over the group's query heads, then their tiles, in order; a
query head's dQ is that thread's too. Results do not depend on the thread count. (So a backward has B NKV tasks:
fewer than the threads only for a small batch of few k/v heads.)

Choosing: LLMC_ATTENTION=tiled|blocked, else blocked when the model's GEMMs run in bf16 (matmul_precision ==
MATMUL_BF16: -p bf16 where llmc/cpu/cpu_trainer.h found that it pays, LLMC_BF16=force, test drivers' -p bf16) and
tiled in fp32. Any other LLMC_ATTENTION is one error line. Each call adds its time, its compulsory bytes (q, k, v,
out, lse, dout, dqkv once each at the dtypes they are stored in: fp32, or bf16 in the -p bf16 layouts, dqkv's bf16
copy beside or instead of its fp32) and its causal FLOPs without recomputation (2 products of 2 HS flops per
query-key pair forward, 4 backward; one add per dqkv element more where the backward sums the bias) to PHASE_ATTENTION (llmc/cpu/phase_time.h). An output or input
gradient that has a bf16 copy (llmc/cpu/matmul.h's mirrors: a GEMM reads it in bf16) gets its copy written: by the
blocked kernel in the same stores as the fp32 values. A backward that writes dqkv (accumulate 0) on the blocked
kernel stores each element once, with its copy, where it would add to a zeroed dqkv (0 + x: the same bits);
LLMC_ATTENTION_OVERWRITE=0 zeroes, adds and rounds each copy in a pass of its own instead, as before 2026-11-29
(GPT-2 d12's -p bf16 step at B=4 T=1024 1.05x faster without those passes on the AMX Xeon, 2026-12-06).
GPT-2's -p bf16 backward (attention_gqa_backward_bf16 given dbias) also sums the qkv bias gradient from the rows it
writes, a 64-row tile at a time, so that dqkv's bf16 copy can hold it alone (no fp32 dqkv written, no pass of the
bias over it): GPT-2 d12's attention phase 503 -> 473 ms a step, element-wise 90 -> 78, B=4 T=1024 on a Zen 5
(LLMC_ATTENTION_BIAS=0: the fp32 dqkv and matmul_backward_bias's sum, as before 2026-12-05; on the AMX Xeon the step
1.03x faster with the fused sum, attention 500 -> 453 ms, element-wise 182 -> 168). On the diagonal
block the micro-kernel skips the products of masked zeros (ATT_TRI_*: whole 16-column vectors and pairs; the same
bits; LLMC_ATTENTION_TRIANGLE=0 computes the full block, kept until timed beyond the Zen 5).
The blocked kernel rounds P^T and dS^T a 64 x 64 block at a time, and dQ^T for dqkv's bf16 copy a tile at a time;
LLMC_ATTENTION_BLOCK_ROUND=0 rounds a row at a time and reads dQ's rows back for the copy, as before 2026-11-30 (the
same bits; kept until timed beyond the Zen 5). On a CPU with AVX-512 the online softmax and the backward's
element-wise part (P^T, dS^T and their roundings) run as hand-written AVX-512 loops on llmc/cpu/vecmath.h's
vec16_expf, two rows of a block a step (the same bits as the compiled loops, which LLMC_VEC16=0 keeps): GPT-2 d12's
attention phase 7% faster on a Zen 5, B=4 T=1024. So does the tiled kernel's softmax (attention_softmax_rows16):
its forward 40.4 -> 38.4 ms, forward and backward 150 -> 147 ms at that shape (dev/test/test_attention_cpu --time);
on a CPU with AVX2 and no AVX-512, the same softmax in AVX2 (attention_softmax_rows8; LLMC_VEC8=0 keeps the compiled
loops).
With them (LLMC_VEC16) the blocked kernel's transposes (the dmajor and colpair layouts, O^T from O, O and dQ back from
O^T and dQ^T) run in 16 x 16 blocks of registers (att_transpose32) instead of one element at a time: at B=4 T=64 its
forward and backward took 0.64-0.96 + 0.89-1.34 ms a layer before, 0.51-0.57 + 0.70-0.80 after (the AMX Xeon). The
forward rounds and lays out K and V with a block of rows' heads one after another, the next one's rows asked for
ahead (LLMC_ATTENTION_PREFETCH): its forward at B=4 T=1024 32.5-35.2 ms against 36.8-45.9 before, in a noisy hour.
Where q, k, v are kept in bf16 (qkv16: the trainers' -p bf16) the forward rounds all of qkv into qkv16 in one pass over
the rows first and copies each block from there (LLMC_ATTENTION_ROUND_ROWS=0: each block rounded as it is loaded, the
same bits; the forward 1.13x in the kernel's timer on a Zen 4, kept selectable until timed on the AMX Xeon).
*/
#ifndef LLMC_ATTENTION_CPU_H
#define LLMC_ATTENTION_CPU_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "amx.h"
#include "matmul.h"
#include "phase_time.h"
#include "transpose.h"
#include "vecmath.h"

// query rows per tile, and (blocked kernel) keys per block: the diagonal block is the tile's own rows
#define ATT_TILE 64

// per-thread work buffers for the attention layers, kept between calls (grown when needed):
// `floats` per thread, 64-byte aligned
static float* attention_scratch(size_t floats, int* nthreads) {
    static void* scratch = NULL;
    static size_t capacity = 0;
    *nthreads = 1;
#ifdef _OPENMP
    *nthreads = omp_get_max_threads();
#endif
    size_t per = (floats + 15) & ~(size_t)15;
    float* base = (float*)scratch_reserve(&scratch, &capacity, ((size_t)*nthreads * per + 16) * sizeof(float));
    return base + ((16 - ((uintptr_t)base / sizeof(float)) % 16) % 16);
}

static inline int attention_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// ----------------------------------------------------------------------------
// the tiled kernel (fp32). Q, K, V of a head are (T,HS) with rows strided by ld (3C for GPT-2's inp) inside the
// packed input; its output rows are strided by C, its input gradients like the input.

// rows t0 .. t0+rows-1 of a head's causal softmax, in place: s (rows, ld) holds the raw scores
// q.k for keys 0 .. t0+rows-1 on entry; on return row r holds softmax(scale * s) over keys
// 0 .. t0+r and 0 after them (up to column `cols`)
static void attention_softmax_rows(float* s, int ld, int t0, int rows, int cols, float scale) {
    for (int r = 0; r < rows; r++) {
        int t = t0 + r;
        float* row = s + (size_t)r * ld;
        // softmax of scale * scores over the past (max subtracted for stability); 16 interleaved
        // partial sums in a fixed order, so the loops vectorise and the result is reproducible
        float pmax[16];
        for (int j = 0; j < 16; j++) { pmax[j] = -INFINITY; }
        int t2 = 0;
        for (; t2 + 16 <= t + 1; t2 += 16) {
            for (int j = 0; j < 16; j++) {
                row[t2 + j] *= scale;
                pmax[j] = row[t2 + j] > pmax[j] ? row[t2 + j] : pmax[j];
            }
        }
        float maxval = -INFINITY;
        for (; t2 <= t; t2++) {
            row[t2] *= scale;
            maxval = row[t2] > maxval ? row[t2] : maxval;
        }
        for (int j = 0; j < 16; j++) { maxval = pmax[j] > maxval ? pmax[j] : maxval; }
        float part[16] = {0.0f};
        t2 = 0;
        for (; t2 + 16 <= t + 1; t2 += 16) {
            for (int j = 0; j < 16; j++) {
                float e = vec_expf(row[t2 + j] - maxval);
                row[t2 + j] = e;
                part[j] += e;
            }
        }
        float sum = 0.0f;
        for (; t2 <= t; t2++) {
            row[t2] = vec_expf(row[t2] - maxval);
            sum += row[t2];
        }
        for (int j = 0; j < 16; j++) { sum += part[j]; }
        float inv = 1.0f / sum;
        for (t2 = 0; t2 < cols; t2++) { row[t2] = t2 <= t ? row[t2] * inv : 0.0f; }
    }
}

#if MATMUL_X86
// attention_softmax_rows in AVX-512 (llmc/cpu/vecmath.h's vec16_enabled): the same operations in the same order, so
// the same bits (the 16 lane maxima and sums, the tail after them one by one, then the lanes), the exponentials on
// vec16_expf (the tail's in one masked vector)
__attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off")))
static void attention_softmax_rows16(float* s, int ld, int t0, int rows, int cols, float scale) {
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int r = 0; r < rows; r++) {
        int t = t0 + r, n = t + 1; // (keys 0 .. t)
        float* row = s + (size_t)r * ld;
        __m512 pmax = _mm512_set1_ps(-INFINITY);
        int t2 = 0;
        for (; t2 + 16 <= n; t2 += 16) {
            __m512 x = _mm512_mul_ps(_mm512_loadu_ps(row + t2), vscale);
            _mm512_storeu_ps(row + t2, x);
            pmax = _mm512_max_ps(x, pmax);
        }
        float maxval = -INFINITY;
        for (int i = t2; i < n; i++) {
            row[i] *= scale;
            maxval = row[i] > maxval ? row[i] : maxval;
        }
        float lanes[16];
        _mm512_storeu_ps(lanes, pmax);
        for (int j = 0; j < 16; j++) { maxval = lanes[j] > maxval ? lanes[j] : maxval; }
        __m512 part = vec16_exp_sub(row, row, n, maxval, NULL, NULL);
        float sum = 0.0f;
        for (int i = n - n % 16; i < n; i++) { sum += row[i]; }
        _mm512_storeu_ps(lanes, part);
        for (int j = 0; j < 16; j++) { sum += lanes[j]; }
        const __m512 vinv = _mm512_set1_ps(1.0f / sum);
        for (t2 = 0; t2 < cols; t2 += 16) { // row * inv up to key t, 0 after it
            int m = cols - t2 < 16 ? cols - t2 : 16;
            __mmask16 k = m == 16 ? (__mmask16)0xffff : vec16_first(m);
            __mmask16 seen = t - t2 >= 15 ? (__mmask16)0xffff : t < t2 ? (__mmask16)0 : vec16_first(t - t2 + 1);
            __m512 p = _mm512_maskz_mul_ps(seen, _mm512_maskz_loadu_ps(k & seen, row + t2), vinv);
            _mm512_mask_storeu_ps(row + t2, k, p);
        }
    }
}
#endif

#if MATMUL_X86
// attention_softmax_rows16 on two vectors of 8 (vec8_enabled: a CPU with AVX2 and no AVX-512), the same operations
// in the same order, so the same bits (lanes 0-7 and 8-15 of the 16 lane maxima and sums)
__attribute__((target("avx2,fma"), optimize("fp-contract=off")))
static void attention_softmax_rows8(float* s, int ld, int t0, int rows, int cols, float scale) {
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int r = 0; r < rows; r++) {
        int t = t0 + r, n = t + 1; // (keys 0 .. t)
        float* row = s + (size_t)r * ld;
        __m256 pmax[2] = {_mm256_set1_ps(-INFINITY), _mm256_set1_ps(-INFINITY)};
        int t2 = 0;
        for (; t2 + 16 <= n; t2 += 16) {
            for (int h = 0; h < 2; h++) {
                __m256 x = _mm256_mul_ps(_mm256_loadu_ps(row + t2 + 8 * h), vscale);
                _mm256_storeu_ps(row + t2 + 8 * h, x);
                pmax[h] = _mm256_max_ps(x, pmax[h]);
            }
        }
        float maxval = -INFINITY;
        for (int i = t2; i < n; i++) {
            row[i] *= scale;
            maxval = row[i] > maxval ? row[i] : maxval;
        }
        float lanes[16];
        _mm256_storeu_ps(lanes, pmax[0]);
        _mm256_storeu_ps(lanes + 8, pmax[1]);
        for (int j = 0; j < 16; j++) { maxval = lanes[j] > maxval ? lanes[j] : maxval; }
        __m256 part[2];
        vec8_exp_sub(row, row, n, maxval, NULL, part);
        float sum = 0.0f;
        for (int i = n - n % 16; i < n; i++) { sum += row[i]; }
        _mm256_storeu_ps(lanes, part[0]);
        _mm256_storeu_ps(lanes + 8, part[1]);
        for (int j = 0; j < 16; j++) { sum += lanes[j]; }
        const __m256 vinv = _mm256_set1_ps(1.0f / sum);
        // row * inv up to key t, +0 after it (the lanes past t cleared); whole vectors stored plainly: a masked
        // store (vmaskmovps) is slow on AMD's cores, and this loop ran at half the function's time with one a vector
        for (t2 = 0; t2 + 8 <= cols; t2 += 8) {
            __m256 p = _mm256_mul_ps(_mm256_loadu_ps(row + t2), vinv);
            _mm256_storeu_ps(row + t2, _mm256_and_ps(p, _mm256_castsi256_ps(vec8_first(t - t2 + 1))));
        }
        if (t2 < cols) {
            __m256i seen = vec8_first(t - t2 + 1);
            __m256 p = _mm256_mul_ps(_mm256_maskload_ps(row + t2, seen), vinv);
            _mm256_maskstore_ps(row + t2, vec8_first(cols - t2), _mm256_and_ps(p, _mm256_castsi256_ps(seen)));
        }
    }
}
#endif

// which hand-written softmax the tiled kernel runs: 16 (AVX-512, LLMC_VEC16), 8 (AVX2, LLMC_VEC8) or 0 (the compiled
// loops); asked outside the threads
static int attention_softmax_lanes(void) { return vec16_enabled() ? 16 : vec8_enabled() ? 8 : 0; }

// p (rows, ld) = the attention weights of query rows t0 .. t0+rows-1 of one head over keys
// 0 .. t0+rows-1 (0 above the diagonal); q, k point at row 0 of the head's Q and K (row stride ldqkv); lanes: the
// softmax's loops (attention_softmax_lanes())
static void attention_tile_weights(float* p, int ld, const float* q, const float* k, int t0, int rows, int ldqkv, int HS,
                                   int lanes) {
    int keys = t0 + rows;
    matmul_gemm(MATMUL_FP32, 0, 1, rows, keys, HS, q + (size_t)t0 * ldqkv, ldqkv, k, ldqkv, 0.0f, p, ld);
#if MATMUL_X86
    if (lanes == 16) {
        attention_softmax_rows16(p, ld, t0, rows, keys, 1.0f / sqrtf((float)HS));
        return;
    }
    if (lanes == 8) {
        attention_softmax_rows8(p, ld, t0, rows, keys, 1.0f / sqrtf((float)HS));
        return;
    }
#endif
    attention_softmax_rows(p, ld, t0, rows, keys, 1.0f / sqrtf((float)HS));
}

// given the weights p (rows, ld) of query rows t0 .. t0+rows-1 and their output gradient d
// (rows, HS; row stride ldd): dQ rows t0.. and dK, dV rows 0 .. t0+rows-1 += their gradients (q, k, v
// and dq, dk, dv: row 0 of the head, row stride ldqkv); dp is (rows, ld) scratch
static void attention_tile_backward(float* dq, float* dk, float* dv, float* dp, const float* p, int ld,
                                    const float* d, const float* q, const float* k, const float* v,
                                    int t0, int rows, int ldqkv, int ldd, int HS) {
    int keys = t0 + rows;
    float scale = 1.0f / sqrtf((float)HS);
    // out = p V: dp (rows,keys) = dout (rows,HS) . V^T; dV (keys,HS) += p^T . dout
    matmul_gemm(MATMUL_FP32, 0, 1, rows, keys, HS, d, ldd, v, ldqkv, 0.0f, dp, ld);
    matmul_gemm(MATMUL_FP32, 1, 0, keys, HS, rows, p, ld, d, ldd, 1.0f, dv, ldqkv);
    // softmax backward, in place: dpre[t2] = scale * p[t2] * (dp[t2] - sum_t3 p[t3] dp[t3])
    for (int r = 0; r < rows; r++) {
        const float* a = p + (size_t)r * ld;
        float* g = dp + (size_t)r * ld;
        int t = t0 + r;
        float dot = 0.0f;
        for (int t2 = 0; t2 <= t; t2++) { dot += a[t2] * g[t2]; }
        for (int t2 = 0; t2 < keys; t2++) { g[t2] = t2 <= t ? scale * a[t2] * (g[t2] - dot) : 0.0f; }
    }
    // pre = scale * Q K^T: dQ (rows,HS) += dpre . K; dK (keys,HS) += dpre^T . Q
    matmul_gemm(MATMUL_FP32, 0, 0, rows, HS, keys, dp, ld, k, ldqkv, 1.0f, dq + (size_t)t0 * ldqkv, ldqkv);
    matmul_gemm(MATMUL_FP32, 1, 0, keys, HS, rows, dp, ld, q + (size_t)t0 * ldqkv, ldqkv, 1.0f, dk, ldqkv);
}

// out (B,T,NH HS) = attention of qkv (B,T,(NH + 2 NKV) HS), tiled. att (B,NH,T,T) receives the
// attention weights, or is NULL (the trainers' case: nothing kept)
static void attention_tiled_forward(float* out, float* att, const float* qkv, int B, int T, int NH, int NKV, int HS) {
    int C = NH * HS, QKV = (NH + 2 * NKV) * HS, rep = NH / NKV;
    int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    int nthreads;
    size_t ld = att != NULL ? (size_t)T : (size_t)((T + 15) & ~15);
    float* scratch = attention_scratch(att != NULL ? 0 : (size_t)ATT_TILE * ld, &nthreads);
    size_t per = ((size_t)ATT_TILE * ld + 15) & ~(size_t)15;
    int lanes = attention_softmax_lanes();
    // tiles further down a head see more keys: handed out as threads free up
    #pragma omp parallel for collapse(3) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int tile = 0; tile < ntiles; tile++) {
                const float* q = qkv + (size_t)b * T * QKV + h * HS;
                const float* k = qkv + (size_t)b * T * QKV + C + (h / rep) * HS;
                int t0 = tile * ATT_TILE, rows = T - t0 < ATT_TILE ? T - t0 : ATT_TILE;
                float* p;
                if (att != NULL) {
                    p = att + (((size_t)b * NH + h) * T + t0) * T;
                    for (int r = 0; r < rows; r++) {
                        memset(p + (size_t)r * T + t0 + rows, 0, (size_t)(T - t0 - rows) * sizeof(float));
                    }
                } else {
                    p = scratch + (size_t)attention_thread_id() * per;
                }
                attention_tile_weights(p, (int)ld, q, k, t0, rows, QKV, HS, lanes);
                // out rows t0.. (rows,HS) = p (rows,keys) . V (keys,HS), out rows strided by C
                matmul_gemm(MATMUL_FP32, 0, 0, rows, HS, t0 + rows, p, (int)ld, k + (size_t)NKV * HS, QKV, 0.0f,
                            out + ((size_t)b * T + t0) * C + h * HS, C);
            }
        }
    }
}

// dqkv (B,T,(NH + 2 NKV) HS) += the gradient of attention_tiled_forward for dout (B,T,NH HS). att (B,NH,T,T)
// holds the forward's attention weights, or is NULL: then each tile's are recomputed from qkv (same bits)
static void attention_tiled_backward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                     int B, int T, int NH, int NKV, int HS) {
    int C = NH * HS, QKV = (NH + 2 * NKV) * HS, rep = NH / NKV;
    int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    int nthreads;
    size_t ld = att != NULL ? (size_t)T : (size_t)((T + 15) & ~15);
    size_t per = ((size_t)ATT_TILE * ld + 15) & ~(size_t)15;
    float* scratch = attention_scratch(2 * per, &nthreads);
    int lanes = attention_softmax_lanes();
    // dK and dV of a k/v head collect from all its query heads' tiles: one thread's, heads and tiles in order
    #pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            float* dp = scratch + (size_t)attention_thread_id() * 2 * per; // dp, then p if recomputed
            size_t head_k = (size_t)b * T * QKV + C + (size_t)g * HS, head_v = head_k + (size_t)NKV * HS;
            for (int h = g * rep; h < (g + 1) * rep; h++) {
                const float* q = qkv + (size_t)b * T * QKV + h * HS;
                float* dq = dqkv + (size_t)b * T * QKV + h * HS;
                for (int tile = 0; tile < ntiles; tile++) {
                    int t0 = tile * ATT_TILE, rows = T - t0 < ATT_TILE ? T - t0 : ATT_TILE;
                    const float* p;
                    if (att != NULL) {
                        p = att + (((size_t)b * NH + h) * T + t0) * T;
                    } else {
                        attention_tile_weights(dp + per, (int)ld, q, qkv + head_k, t0, rows, QKV, HS, lanes);
                        p = dp + per;
                    }
                    attention_tile_backward(dq, dqkv + head_k, dqkv + head_v, dp, p, (int)ld,
                                            dout + ((size_t)b * T + t0) * C + h * HS, q, qkv + head_k,
                                            qkv + head_v, t0, rows, QKV, C, HS);
                }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// the blocked kernel (bf16 products, fp32 sums)
//
// Score tiles are held transposed, keys by queries: S^T = K Q^T is (ATT_TILE keys, ATT_TILE queries), so a query's
// running max and sum, its lse and D are a column, every step over them is a vertical vector operation (no
// reduction across a row), and P^T and dS^T enter the products in the layout they are computed in:
//     forward    S^T = K Q^T,   O^T += V^T P^T
//     backward   S^T = K Q^T,   dP^T = V dO^T,   dV += P^T dO,   dK += dS^T Q,   dQ^T += K^T dS^T
// Operands are uint32 pairs of bf16, the lower index in the low half (vdpbf16ps's layout: one instruction adds
// a0 b0 + a1 b1 to each of 16 fp32 sums); a product sums over pairs of its inner index. ATT_TILE rows of a head,
// (ATT_TILE, HS), are rounded to x16, an (ATT_TILE, HSP) uint16 array (HSP = HS rounded up to 16; zero past HS and
// past the last row, so that padding adds 0), and taken as:
//   rows     [r][p] = (x[r][2p], x[r][2p+1])   x16 itself: an A operand over d (K, V) or over queries (P^T, dS^T)
//   dmajor   [p][r] = (x[r][2p], x[r][2p+1])   a B operand over d (Q in S^T, dO in dP^T)
//   rowpair  [q][d] = (x[2q][d], x[2q+1][d])   a B operand over rows (dO in dV, Q in dK; P^T in O^T, dS^T in dQ^T)
//   colpair  [d][q] = (x[2q][d], x[2q+1][d])   an A operand over rows (V in O^T, K in dQ^T)

#define ATT_PAIRS (ATT_TILE / 2)

typedef struct {
    int T, NH, NKV, HS, HSP, C, QKV, ntiles, native, amx, prefetch, round_block, round_rows, softmax16, triangle;
    int pairs_fused;
    float scale;
} AttShape;

static AttShape att_shape(int T, int NH, int NKV, int HS) {
    AttShape s;
    s.T = T; s.NH = NH; s.NKV = NKV; s.HS = HS;
    s.HSP = (HS + 15) & ~15;
    s.C = NH * HS;
    s.QKV = (NH + 2 * NKV) * HS;
    s.ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    s.native = matmul_bf16_native(); // asked here, before the threads start
    // the products on AMX tiles where the process may use them; LLMC_ATTENTION_AMX=0 keeps vdpbf16ps
    s.amx = env_switch_on("LLMC_ATTENTION_AMX") && s.native && amx_usable();
    s.prefetch = env_switch_on("LLMC_ATTENTION_PREFETCH");
    s.round_block = env_switch_on("LLMC_ATTENTION_BLOCK_ROUND");
    s.round_rows = env_switch_on("LLMC_ATTENTION_ROUND_ROWS");
    s.triangle = env_switch_on("LLMC_ATTENTION_TRIANGLE");
    s.softmax16 = vec16_enabled();
    // the forward's AVX-512 softmax writes P^T as the O^T product takes it (rowpair) instead of a pass of its own
    // after each block (the same bits; LLMC_ATTENTION_PAIRS_FUSED=0: that pass, as before 2026-12-06, kept until
    // timed on the CPU kinds beyond the AMX Xeon). The AMX Xeon (family 6 model 207, 2 threads, B=4 NH=12 HS=64, q k
    // v in bf16, the forward alone, the switch alternated call by call, medians of 40): T=1024 1.023x and 1.027x,
    // T=256 1.025x (doc/cpu-speed.md). dS^T written so too (beside its rows, which dK's product takes) made the
    // backward 2 % slower: not kept.
    s.pairs_fused = env_switch_on("LLMC_ATTENTION_PAIRS_FUSED");
    s.scale = 1.0f / sqrtf((float)HS);
    return s;
}

static inline uint32_t att_pair_at(const void* a, size_t i) { // pair i of a (any storage: no aliasing questions)
    uint32_t u;
    memcpy(&u, (const char*)a + 4 * i, sizeof(u));
    return u;
}

// Which of a product's sums may skip products of the diagonal block's masked zeros (AttShape's triangle; ATT_FULL off
// it): ATT_TRI_ROWS, c (keys, queries) = S^T or dP^T, written: row k needs the columns q >= k alone (the others are
// left as they were: the softmax and the gradient mask them); ATT_TRI_PAIRS, c (keys, N) += P^T or dS^T (rows of
// keys, pairs of queries) times B: row k's pairs of queries both < k are zero; ATT_TRI_COLS, c (M, queries) += A times
// P^T or dS^T (pairs of keys, queries): column q's pairs of keys both > q are zero. Each sum still takes its other
// products in order, and adding a product of zero changes no sum (it never holds -0: it starts at +0 or a zeroed
// c), so the bits are the full products'. The micro-kernel below skips them; AMX and the emulation do not.
enum { ATT_FULL = 0, ATT_TRI_ROWS = 1, ATT_TRI_PAIRS = 2, ATT_TRI_COLS = 3 };

// c (M,N) = (accumulate ? c : 0) + a (M, kp pairs; row stride lda pairs) . b (kp pairs, N; row stride ldb), each
// element summed over the pairs in order; M a multiple of 4, N of 16. c's row stride is ldc.
#if MATMUL_X86
// R rows by nv vectors of 16 columns, pairs p0 .. kp-1 (R nv sums in registers: the full blocks and the triangle's
// bands keep at least 12, or the sums' latency and not the products bounds them; only a ragged edge has fewer)
__attribute__((target("avx512f,avx512bf16"), always_inline))
static inline void att_gemm_native_block(float* c, int ldc, const void* a, int lda, const uint32_t* b, int ldb,
                                         int p0, int kp, int accumulate, const int R, const int nv) {
    __m512 acc[16][4];
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < nv; v++) {
            acc[i][v] = accumulate ? _mm512_loadu_ps(c + (size_t)i * ldc + 16 * v) : _mm512_setzero_ps();
        }
    }
    for (int p = p0; p < kp; p++) {
        __m512bh bv[4];
        for (int v = 0; v < nv; v++) { bv[v] = (__m512bh)_mm512_loadu_si512((const void*)(b + (size_t)p * ldb + 16 * v)); }
        for (int i = 0; i < R; i++) {
            __m512bh ai = (__m512bh)_mm512_set1_epi32((int)att_pair_at(a, (size_t)i * lda + p));
            for (int v = 0; v < nv; v++) { acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]); }
        }
    }
    for (int i = 0; i < R; i++) {
        for (int v = 0; v < nv; v++) { _mm512_storeu_ps(c + (size_t)i * ldc + 16 * v, acc[i][v]); }
    }
}

// ATT_TRI_ROWS's band `band` (0-3) of the diagonal block: rows 16 band .. 16 band + 15, R at a time, from the
// vector that holds their first column to the block's last (4 - band vectors)
__attribute__((target("avx512f,avx512bf16"), always_inline))
static inline void att_gemm_native_band(float* c, int ldc, const char* a8, int lda, const uint32_t* b, int ldb, int kp,
                                        int accumulate, const int band, const int R) {
    for (int i0 = 16 * band; i0 < 16 * band + 16; i0 += R) {
        att_gemm_native_block(c + (size_t)i0 * ldc + 16 * band, ldc, a8 + 4 * (size_t)i0 * lda, lda, b + 16 * band, ldb,
                              0, kp, accumulate, R, 4 - band);
    }
}

// the diagonal block's products that skip masked zeros (ATT_TRI_*, above): ATT_TRI_ROWS (M = N = ATT_TILE) row k
// from the vector that holds column k: rows 0-15 all four vectors, 16-31 three, 32-47 two (8 rows at a time), 48-63
// one (16 rows at once); ATT_TRI_COLS (N = ATT_TILE, kp = ATT_PAIRS, accumulating) columns 0-31 over pairs 0-15 (the
// keys they see), 32-63 over all, 8 rows at a time (a quarter of the products left out, at the full rate)
__attribute__((target("avx512f,avx512bf16")))
static void att_gemm_native_tri(float* c, int ldc, const void* a, int lda, const uint32_t* b, int ldb, int M, int kp,
                                int accumulate, int tri) {
    const char* a8 = (const char*)a;
    if (tri == ATT_TRI_COLS) {
        for (int i0 = 0; i0 < M; i0 += 8) {
            float* ci = c + (size_t)i0 * ldc;
            const void* ai = a8 + 4 * (size_t)i0 * lda;
            att_gemm_native_block(ci, ldc, ai, lda, b, ldb, 0, kp / 2, accumulate, 8, 2);
            att_gemm_native_block(ci + 32, ldc, ai, lda, b + 32, ldb, 0, kp, accumulate, 8, 2);
        }
        return;
    }
    att_gemm_native_band(c, ldc, a8, lda, b, ldb, kp, accumulate, 0, 4);
    att_gemm_native_band(c, ldc, a8, lda, b, ldb, kp, accumulate, 1, 4);
    att_gemm_native_band(c, ldc, a8, lda, b, ldb, kp, accumulate, 2, 8);
    att_gemm_native_band(c, ldc, a8, lda, b, ldb, kp, accumulate, 3, 16);
}

// 4 rows at a time, 64 columns (16 zmm sums) at a time, then 32 and 16; tri: which products it may skip (above)
__attribute__((target("avx512f,avx512bf16")))
static void att_gemm_native(float* c, int ldc, const void* a, int lda, const uint32_t* b, int ldb,
                            int M, int N, int kp, int accumulate, int tri) {
    if (tri == ATT_TRI_ROWS || tri == ATT_TRI_COLS) {
        att_gemm_native_tri(c, ldc, a, lda, b, ldb, M, kp, accumulate, tri);
        return;
    }
    for (int i0 = 0; i0 < M; i0 += 4) {
        float* ci = c + (size_t)i0 * ldc;
        const void* ai = (const char*)a + 4 * (size_t)i0 * lda;
        int p0 = tri == ATT_TRI_PAIRS ? i0 / 2 : 0; // (rows i0 .. i0 + 3 see queries i0 on: pairs i0 / 2 on)
        int j0 = 0;
        for (; j0 + 64 <= N; j0 += 64) { att_gemm_native_block(ci + j0, ldc, ai, lda, b + j0, ldb, p0, kp, accumulate, 4, 4); }
        if (N - j0 >= 32) {
            att_gemm_native_block(ci + j0, ldc, ai, lda, b + j0, ldb, p0, kp, accumulate, 4, 2);
            j0 += 32;
        }
        if (N - j0 >= 16) { att_gemm_native_block(ci + j0, ldc, ai, lda, b + j0, ldb, p0, kp, accumulate, 4, 1); }
    }
}
#endif

// The same product on AMX tiles (amx.h: 16 x 16 fp32 sums, operands 16 pairs deep): c in 32 x 32 blocks of four
// tiles where it can, 16 x 16 tiles at the edges; kp a multiple of 16, M and N of 16. Each sum takes its pairs in
// order, a pair's two products one after the other (not vdpbf16ps's order: other bits in the last place).
#if AMX_X86
__attribute__((target("amx-tile,amx-bf16")))
static void att_gemm_amx_32x32(float* c, int ldc, const char* a, int lda, const char* b, int ldb, int kp, int accumulate) {
    amx_block_32x32(c, ldc, a, 4 * (size_t)lda, b, 4 * (size_t)ldb, kp, accumulate, NULL, 0);
}

__attribute__((target("amx-tile,amx-bf16")))
static void att_gemm_amx_16x16(float* c, int ldc, const char* a, int lda, const char* b, int ldb, int kp, int accumulate) {
    size_t sc = 4 * (size_t)ldc, sa = 4 * (size_t)lda, sb = 4 * (size_t)ldb;
    if (accumulate) { _tile_loadd(0, c, sc); }
    else { _tile_zero(0); }
    for (int p = 0; p < kp; p += 16) {
        _tile_loadd(4, a + 4 * (size_t)p, sa);
        _tile_loadd(6, b + (size_t)p * sb, sb);
        _tile_dpbf16ps(0, 4, 6);
    }
    _tile_stored(0, c, sc);
}

static void att_gemm_amx(float* c, int ldc, const void* a, int lda, const uint32_t* b, int ldb, int M, int N, int kp,
                         int accumulate) {
    const char* a8 = (const char*)a;
    const char* b8 = (const char*)(const void*)b;
    int i0 = 0;
    for (; i0 + 32 <= M; i0 += 32) {
        int j0 = 0;
        for (; j0 + 32 <= N; j0 += 32) {
            att_gemm_amx_32x32(c + (size_t)i0 * ldc + j0, ldc, a8 + 4 * (size_t)i0 * lda, lda, b8 + 4 * (size_t)j0, ldb,
                               kp, accumulate);
        }
        for (; j0 < N; j0 += 16) {
            for (int i = i0; i < i0 + 32; i += 16) {
                att_gemm_amx_16x16(c + (size_t)i * ldc + j0, ldc, a8 + 4 * (size_t)i * lda, lda, b8 + 4 * (size_t)j0,
                                   ldb, kp, accumulate);
            }
        }
    }
    for (; i0 < M; i0 += 16) {
        for (int j0 = 0; j0 < N; j0 += 16) {
            att_gemm_amx_16x16(c + (size_t)i0 * ldc + j0, ldc, a8 + 4 * (size_t)i0 * lda, lda, b8 + 4 * (size_t)j0, ldb,
                               kp, accumulate);
        }
    }
}
#endif

// this thread's tiles shaped for att_gemm_amx, at the start of each piece of work (a GEMM library between two may
// have loaded its own shapes)
static inline void att_tiles_ready(const AttShape* sh) {
#if AMX_X86
    if (sh->amx) { amx_configure_16x64(); }
#else
    (void)sh;
#endif
}

static inline float att_bf16_lo(uint32_t u) { return mm_bf16_to_float((uint16_t)(u & 0xffffu)); }
static inline float att_bf16_hi(uint32_t u) { return mm_bf16_to_float((uint16_t)(u >> 16)); }

// the same bf16 numbers multiplied in fp32, (even product + odd product) per pair
static void att_gemm_emulated(float* c, int ldc, const void* a, int lda, const uint32_t* b, int ldb,
                              int M, int N, int kp, int accumulate) {
    for (int i = 0; i < M; i++) {
        float* ci = c + (size_t)i * ldc;
        if (!accumulate) { memset(ci, 0, (size_t)N * sizeof(float)); }
        for (int p = 0; p < kp; p++) {
            uint32_t ap = att_pair_at(a, (size_t)i * lda + p);
            float a0 = att_bf16_lo(ap), a1 = att_bf16_hi(ap);
            const uint32_t* bp = b + (size_t)p * ldb;
            for (int j = 0; j < N; j++) { ci[j] += a0 * att_bf16_lo(bp[j]) + a1 * att_bf16_hi(bp[j]); }
        }
    }
}

static inline void att_gemm(const AttShape* sh, float* c, int ldc, const void* a, int lda, const uint32_t* b, int ldb,
                            int M, int N, int kp, int accumulate, int tri) {
#if AMX_X86
    if (sh->amx && kp % 16 == 0) {
        att_gemm_amx(c, ldc, a, lda, b, ldb, M, N, kp, accumulate);
        return;
    }
#endif
#if MATMUL_X86
    if (sh->native) {
        att_gemm_native(c, ldc, a, lda, b, ldb, M, N, kp, accumulate, sh->triangle ? tri : ATT_FULL);
        return;
    }
#endif
    att_gemm_emulated(c, ldc, a, lda, b, ldb, M, N, kp, accumulate);
}

// x16 (ATT_TILE, HSP) = rows 0 .. rows-1 of x (row stride ld, HS columns) rounded to bf16, zero past them
static void att_round_block(uint16_t* x16, const float* x, size_t ld, int rows, int HS, int HSP) {
    for (int r = 0; r < ATT_TILE; r++) {
        uint16_t* dst = x16 + (size_t)r * HSP;
        int n = 0;
        if (r < rows) {
            mm_round_bf16_row(dst, x + (size_t)r * ld, (size_t)HS);
            n = HS;
        }
        memset(dst + n, 0, (size_t)(HSP - n) * sizeof(uint16_t));
    }
}

// the same block from the packed input stored in fp32 (x, rounded as above; keep, when not NULL, receives the rounded
// rows at the same place: the bf16 activation layouts, for the backward) or in bf16 (xb, copied: the same numbers); `at`
// is the block's first element in each
static void att_load_block(uint16_t* x16, const float* x, const uint16_t* xb, uint16_t* keep, size_t at, size_t ld,
                           int rows, int HS, int HSP) {
    if (xb == NULL) {
        att_round_block(x16, x + at, ld, rows, HS, HSP);
        for (int r = 0; keep != NULL && r < rows; r++) {
            uint16_t* dst = keep + at + (size_t)r * ld;
            const uint16_t* src = x16 + (size_t)r * HSP;
            for (int d = 0; d < HS; d++) { dst[d] = src[d]; }
        }
        return;
    }
    for (int r = 0; r < ATT_TILE; r++) { // (a loop, not memcpy and memset: a call per 128-byte row cost 8 % at T=64)
        uint16_t* dst = x16 + (size_t)r * HSP;
        const uint16_t* src = xb + at + (size_t)r * ld;
        int n = r < rows ? HS : 0;
        for (int d = 0; d < n; d++) { dst[d] = src[d]; }
        for (int d = n; d < HSP; d++) { dst[d] = 0; }
    }
}

static inline uint32_t att_pair(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

// dst (cols, rows) = src (rows, cols) transposed, 32-bit elements (bf16 pairs or floats, moved as bits), row strides in
// elements. fast (AttShape's softmax16: LLMC_VEC16 on a CPU with AVX-512) with rows and cols multiples of 16: 16 x 16
// blocks in registers; the loops gathered one element at a time, and these copies cost the blocked kernel about a
// third of its time at T=64 (the AMX Xeon). Either way the same bits.
static void att_transpose32(uint32_t* dst, size_t ld_dst, const uint32_t* src, size_t ld_src, int rows, int cols,
                            int fast) {
#if MATMUL_X86
    if (fast && rows % 16 == 0 && cols % 16 == 0) {
        transpose32_avx512(dst, ld_dst, src, ld_src, rows, cols);
        return;
    }
#endif
    (void)fast;
    for (int c = 0; c < cols; c++) {
        for (int r = 0; r < rows; r++) { dst[(size_t)c * ld_dst + r] = src[(size_t)r * ld_src + c]; }
    }
}

// the layouts of a rounded block x16 (ATT_TILE rows of `width` columns), see above
static void att_layout_dmajor(uint32_t* dst, const uint16_t* x16, int width, int fast) {
#if MATMUL_X86
    if (fast && (width / 2) % 16 == 0) { // (a row's pairs are its 32-bit words: the transpose of those)
        transpose32_avx512(dst, ATT_TILE, (const uint32_t*)(const void*)x16, (size_t)width / 2, ATT_TILE, width / 2);
        return;
    }
#endif
    (void)fast;
    for (int p = 0; p < width / 2; p++) {
        for (int r = 0; r < ATT_TILE; r++) { dst[p * ATT_TILE + r] = att_pair(x16[r * width + 2 * p], x16[r * width + 2 * p + 1]); }
    }
}

static void att_layout_rowpair(uint32_t* dst, const uint16_t* x16, int width) {
    for (int q = 0; q < ATT_PAIRS; q++) {
        const uint16_t* lo = x16 + (size_t)(2 * q) * width;
        const uint16_t* hi = lo + width;
        for (int d = 0; d < width; d++) { dst[q * width + d] = att_pair(lo[d], hi[d]); }
    }
}

static void att_layout_colpair(uint32_t* dst, const uint16_t* x16, int width, int fast) {
    if (fast && width <= 256) { // (the transpose of the rowpair layout)
        uint32_t rowpair[ATT_PAIRS * 256];
        att_layout_rowpair(rowpair, x16, width);
        att_transpose32(dst, ATT_PAIRS, rowpair, (size_t)width, ATT_PAIRS, width, fast);
        return;
    }
    for (int d = 0; d < width; d++) {
        for (int q = 0; q < ATT_PAIRS; q++) { dst[d * ATT_PAIRS + q] = att_pair(x16[2 * q * width + d], x16[(2 * q + 1) * width + d]); }
    }
}

// D (ATT_TILE) = for each query q, the sum over d < HS of its rounded dO[q][d] times O[q][d], in order of d: one
// running sum per query, the queries side by side in the vector lanes (a sum of its own, row by row, waited on each
// add). do_dm: the tile's rounded dO (dmajor pairs); oT (HSP, ATT_TILE): its O transposed, fp32. Every caller (O
// from the forward in fp32 or bf16, or recomputed) goes through it, so all give D the same bits. Each product is
// rounded before it is added (no fused multiply-add), as in the one-row-at-a-time sums this replaced (the same bits).
__attribute__((optimize("fp-contract=off")))
static void att_tile_D(float* D, const uint32_t* do_dm, const float* oT, int HS) {
    for (int q = 0; q < ATT_TILE; q++) { D[q] = 0.0f; }
    for (int d = 0; d < HS; d++) {
        const uint32_t* pairs = do_dm + (size_t)(d / 2) * ATT_TILE;
        const float* o = oT + (size_t)d * ATT_TILE;
        uint32_t mask = d % 2 == 0 ? 0x0000ffffu : 0xffff0000u, shift = d % 2 == 0 ? 16 : 0;
        for (int q = 0; q < ATT_TILE; q++) {
            uint32_t u = (pairs[q] & mask) << shift; // dO[q][d], a bf16 in the high half
            float x;
            memcpy(&x, &u, sizeof(x));
            D[q] += x * o[q];
        }
    }
}

// oT (HSP, ATT_TILE) = rows 0 .. rows-1 of O (fp32 o or bf16 o16, row stride ld), transposed; 0 for the queries past
// them. fast: through rows_buf (ATT_TILE, HSP), row by row and then att_transpose32 (rows HS .. HSP-1 of oT 0 too)
static void att_transpose_O(float* oT, const float* o, const uint16_t* o16, size_t ld, int rows, int HS, int HSP,
                            float* rows_buf, int fast) {
    if (fast) {
        for (int q = 0; q < ATT_TILE; q++) {
            float* row = rows_buf + (size_t)q * HSP;
            int n = q < rows ? HS : 0;
            if (o16 != NULL) {
                for (int d = 0; d < n; d++) { row[d] = mm_bf16_to_float(o16[(size_t)q * ld + d]); }
            } else {
                for (int d = 0; d < n; d++) { row[d] = o[(size_t)q * ld + d]; }
            }
            for (int d = n; d < HSP; d++) { row[d] = 0.0f; }
        }
        att_transpose32((uint32_t*)(void*)oT, ATT_TILE, (const uint32_t*)(const void*)rows_buf, (size_t)HSP, ATT_TILE,
                        HSP, fast);
        return;
    }
    for (int q = 0; q < ATT_TILE; q++) {
        for (int d = 0; d < HS; d++) {
            float x = 0.0f;
            if (q < rows) { x = o16 != NULL ? mm_bf16_to_float(o16[(size_t)q * ld + d]) : o[(size_t)q * ld + d]; }
            oT[(size_t)d * ATT_TILE + q] = x;
        }
    }
}

// Asks for `rows` rows of `bytes` bytes each, `stride` bytes apart, to be brought into the cache (L2) ahead of use
// (write: for a store). A tile's rows of the packed tensors are short pieces of long rows, so the hardware
// prefetcher does not see them coming, and the scalar loops that read or add to them (D, dQ's add) stalled on each
// miss: asked for one tile ahead, they arrive while the tile before computes. LLMC_ATTENTION_PREFETCH=0 leaves them
// out (AttShape's prefetch; the same bits), until they are timed on a Zen 4 (the AMX Xeon: 1.13-1.19x with them).
static inline void att_prefetch_rows(const void* base, size_t bytes, size_t stride, int rows, int write) {
    for (int r = 0; r < rows; r++) {
        const char* row = (const char*)base + (size_t)r * stride;
        for (size_t off = 0; off < bytes; off += 64) {
            if (write) { __builtin_prefetch(row + off, 1, 2); }
            else { __builtin_prefetch(row + off, 0, 2); }
        }
    }
}

// a thread's work buffers (the forward uses the first group only)
typedef struct {
    uint16_t *x16, *q16, *p16;              // rounded blocks: packing scratch, the query tile, P^T
    uint32_t *q_dm, *p_rp;                  // Q (dmajor), P^T (rowpair)
    float *sT, *oT;                         // S^T (ATT_TILE, ATT_TILE), O^T (HSP, ATT_TILE)
    float* rows;                            // a tile's rows (ATT_TILE, HSP): O or dQ, on their way to or from O^T, dQ^T
    float *m, *l, *alpha, *lse, *D;         // per query: running max and sum, rescale, log-sum-exp, rowsum(dO o O)
    uint16_t *do16, *ds16;                  // backward: dO tile, dS^T
    uint32_t *q_rp, *do_dm, *do_rp, *ds_rp;
    float *dpT, *dqT;                       // dP^T (ATT_TILE, ATT_TILE), dQ^T (HSP, ATT_TILE)
    uint16_t* dq16T;                        // dQ^T rounded, for dqkv's bf16 copy
    uint32_t *k_rows, *v_rows, *k_cp, *v_cp; // the k/v head's blocks (K, V rows; K, V colpair), block j at j * blk
    float *dk, *dv;                         // its dK, dV (ntiles ATT_TILE, HSP)
} AttWork;

// points w into base (NULL: only counts); returns the bytes one thread needs, a multiple of 64
static size_t att_work_layout(AttWork* w, char* base, const AttShape* sh, int backward) {
    size_t off = 0, tile = (size_t)ATT_TILE * sh->HSP, sq = (size_t)ATT_TILE * ATT_TILE;
    size_t head = backward ? (size_t)sh->ntiles * tile : 0, bw = backward ? 1 : 0;
#define ATT_TAKE(field, type, n) do { \
        w->field = base != NULL ? (type*)(void*)(base + off) : NULL; \
        off += ((size_t)(n) * sizeof(type) + 63) & ~(size_t)63; \
    } while (0)
    ATT_TAKE(x16, uint16_t, tile);
    ATT_TAKE(q16, uint16_t, tile);
    ATT_TAKE(p16, uint16_t, sq);
    ATT_TAKE(q_dm, uint32_t, tile / 2);
    ATT_TAKE(p_rp, uint32_t, sq / 2);
    ATT_TAKE(sT, float, sq);
    ATT_TAKE(oT, float, tile);
    ATT_TAKE(rows, float, tile);
    ATT_TAKE(m, float, ATT_TILE);
    ATT_TAKE(l, float, ATT_TILE);
    ATT_TAKE(alpha, float, ATT_TILE);
    ATT_TAKE(lse, float, ATT_TILE);
    ATT_TAKE(D, float, ATT_TILE);
    ATT_TAKE(do16, uint16_t, bw * tile);
    ATT_TAKE(ds16, uint16_t, bw * sq);
    ATT_TAKE(q_rp, uint32_t, bw * tile / 2);
    ATT_TAKE(do_dm, uint32_t, bw * tile / 2);
    ATT_TAKE(do_rp, uint32_t, bw * tile / 2);
    ATT_TAKE(ds_rp, uint32_t, bw * sq / 2);
    ATT_TAKE(dpT, float, bw * sq);
    ATT_TAKE(dqT, float, bw * tile);
    ATT_TAKE(dq16T, uint16_t, bw * tile);
    ATT_TAKE(k_rows, uint32_t, head / 2);
    ATT_TAKE(v_rows, uint32_t, head / 2);
    ATT_TAKE(k_cp, uint32_t, head / 2);
    ATT_TAKE(v_cp, uint32_t, head / 2);
    ATT_TAKE(dk, float, head);
    ATT_TAKE(dv, float, head);
#undef ATT_TAKE
    return off;
}

// this thread's work buffers inside the per-thread scratch (`per` bytes each)
static inline AttWork att_work(char* scratch, size_t per, const AttShape* sh, int backward) {
    AttWork w;
    att_work_layout(&w, scratch + (size_t)attention_thread_id() * per, sh, backward);
    return w;
}

// One block of S^T (w->sT: keys of block j by the tile's queries) in the forward: each query's running max and sum
// (w->m, w->l) take the block in, w->alpha = e^(m_old - m_new) (what the output so far shrinks by), w->p16 = P^T
// = e^(scale S^T - m_new) rounded. diag: the tile's own block, where query q sees keys k <= q only. (Padded rows
// need no mask: zero q and k give finite scores, and what they add is multiplied by zero rows of V or dO, or not
// written.)
static void att_block_softmax(AttWork* w, int diag, float scale, int round_block) {
    float mx[ATT_TILE];
    for (int q = 0; q < ATT_TILE; q++) { mx[q] = -INFINITY; }
    for (int k = 0; k < ATT_TILE; k++) {
        float* row = w->sT + (size_t)k * ATT_TILE;
        for (int q = 0; q < ATT_TILE; q++) {
            float x = diag && q < k ? -INFINITY : row[q] * scale;
            row[q] = x;
            mx[q] = x > mx[q] ? x : mx[q];
        }
    }
    for (int q = 0; q < ATT_TILE; q++) {
        float m_new = mx[q] > w->m[q] ? mx[q] : w->m[q];
        w->alpha[q] = vec_expf(w->m[q] - m_new); // (the first block: e^-inf, times a sum and output of 0)
        w->l[q] *= w->alpha[q];
        w->m[q] = m_new;
    }
    for (int k = 0; k < ATT_TILE; k++) {
        float* row = w->sT + (size_t)k * ATT_TILE;
        for (int q = 0; q < ATT_TILE; q++) {
            float e = vec_expf(row[q] - w->m[q]);
            e = diag && q < k ? 0.0f : e;
            row[q] = e;
            w->l[q] += e;
        }
        if (!round_block) { mm_round_bf16_row(w->p16 + (size_t)k * ATT_TILE, row, ATT_TILE); }
    }
    if (round_block) { mm_round_bf16_row(w->p16, w->sT, (size_t)ATT_TILE * ATT_TILE); } // (as in the backward)
}

#if MATMUL_X86
// the lanes of queries 16 v .. 16 v + 15 that do not see key k (q < k), on the diagonal block
__attribute__((target("avx512f"), always_inline))
static inline __mmask16 att_hidden16(int k, int v) {
    __m512i q = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                 _mm512_set1_epi32(16 * v));
    return _mm512_cmplt_epi32_mask(q, _mm512_set1_epi32(k));
}

// 16 pairs of the rowpair layout from two rows' 16 values: (lo[i], hi[i]) rounded to bf16, lo in the low half
__attribute__((target(MM_BF16_TARGET), always_inline))
static inline __m512i att_pairs16(__m512 lo, __m512 hi) {
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                                21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    return _mm512_permutexvar_epi16(interleave, mm32_round_bf16(lo, hi));
}

// att_block_softmax in AVX-512 (AttShape's softmax16: llmc/cpu/vecmath.h's vec16_enabled): the same operations on the same numbers, 16 queries a
// vector, so the same bits (vec16_expf is vec_expf's, mm16_round_bf16 the rounding's); P^T is rounded as each row
// is made and never stored in fp32. The compiled loops spent half their time in the exponential's conversions
// and masks, and P^T took a pass of its own. (fp-contract off: every fused multiply-add here is written out, as
// GCC would otherwise fuse the intrinsics' products into the adds that follow them, as it fuses C's)
// p_rp (or NULL: w->p16 as rows): P^T written straight in the rowpair layout the O^T product takes (rows k and k + 1
// side by side in each pair, as att_layout_rowpair lays w->p16 out), without the pass through w->p16
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void att_block_softmax16(AttWork* w, int diag, float scale, uint32_t* p_rp) {
    const __m512 vscale = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-INFINITY);
    float* restrict sT = w->sT;
    uint16_t* restrict p16 = w->p16;
    __m512 mx[ATT_TILE / 16], m[ATT_TILE / 16], l[ATT_TILE / 16];
    for (int v = 0; v < ATT_TILE / 16; v++) { mx[v] = ninf; }
    for (int k = 0; k < ATT_TILE; k++) {
        float* row = sT + (size_t)k * ATT_TILE;
        for (int v = 0; v < ATT_TILE / 16; v++) {
            __m512 x = _mm512_mul_ps(_mm512_loadu_ps(row + 16 * v), vscale);
            if (diag) { x = _mm512_mask_mov_ps(x, att_hidden16(k, v), ninf); }
            _mm512_storeu_ps(row + 16 * v, x);
            mx[v] = _mm512_max_ps(x, mx[v]); // (x > mx ? x : mx)
        }
    }
    for (int v = 0; v < ATT_TILE / 16; v++) {
        __m512 m_old = _mm512_loadu_ps(w->m + 16 * v), m_new = _mm512_max_ps(mx[v], m_old);
        __m512 alpha = vec16_expf(_mm512_sub_ps(m_old, m_new));
        _mm512_storeu_ps(w->alpha + 16 * v, alpha);
        l[v] = _mm512_mul_ps(_mm512_loadu_ps(w->l + 16 * v), alpha);
        m[v] = m_new;
        _mm512_storeu_ps(w->m + 16 * v, m_new);
    }
    for (int k = 0; k < ATT_TILE; k += 2) { // (two rows a step: eight exponentials side by side; one row a step
                                            // left the block's softmax 13% slower)
        const float* row = sT + (size_t)k * ATT_TILE;
        __m512 e[2 * ATT_TILE / 16];
        for (int v = 0; v < 2 * ATT_TILE / 16; v++) { e[v] = vec16_expf(_mm512_sub_ps(_mm512_loadu_ps(row + 16 * v), m[v % 4])); }
        if (diag) {
            for (int v = 0; v < 2 * ATT_TILE / 16; v++) { e[v] = _mm512_mask_mov_ps(e[v], att_hidden16(k + v / 4, v % 4), _mm512_setzero_ps()); }
        }
        for (int v = 0; v < ATT_TILE / 16; v++) { l[v] = _mm512_add_ps(l[v], e[v]); }
        for (int v = 0; v < ATT_TILE / 16; v++) { l[v] = _mm512_add_ps(l[v], e[4 + v]); }
        if (p_rp != NULL) {
            for (int v = 0; v < ATT_TILE / 16; v++) {
                _mm512_storeu_si512((void*)(p_rp + (size_t)(k / 2) * ATT_TILE + 16 * v), att_pairs16(e[v], e[4 + v]));
            }
        } else {
            for (int v = 0; v < 2 * ATT_TILE / 16; v += 2) {
                _mm512_storeu_si512((void*)(p16 + (size_t)k * ATT_TILE + 16 * v), mm32_round_bf16(e[v], e[v + 1]));
            }
        }
    }
    for (int v = 0; v < ATT_TILE / 16; v++) { _mm512_storeu_ps(w->l + 16 * v, l[v]); }
}
#endif

// One query tile of one head, forward: w->oT (HSP, ATT_TILE) = O^T, the normalised output of its queries,
// w->lse = each query's log-sum-exp of its scaled scores. q_dm: the tile's Q (dmajor); k_rows, v_cp: block 0 of the
// head's rounded K rows and V (colpair), block j kv_stride pairs further.
static void att_tile_forward(AttWork* w, const uint32_t* q_dm, const uint32_t* k_rows, const uint32_t* v_cp,
                             size_t kv_stride, int tile, const AttShape* sh) {
    int HSP = sh->HSP;
    att_tiles_ready(sh);
    for (int q = 0; q < ATT_TILE; q++) {
        w->m[q] = -INFINITY;
        w->l[q] = 0.0f;
    }
    memset(w->oT, 0, (size_t)HSP * ATT_TILE * sizeof(float));
    for (int j = 0; j <= tile; j++) {
        // S^T (keys, queries) = K_j Q^T
        att_gemm(sh, w->sT, ATT_TILE, k_rows + j * kv_stride, HSP / 2, q_dm, ATT_TILE, ATT_TILE, ATT_TILE, HSP / 2, 0,
                 j == tile ? ATT_TRI_ROWS : ATT_FULL);
        int fused = 0;
#if MATMUL_X86
        if (sh->softmax16) {
            fused = sh->pairs_fused;
            att_block_softmax16(w, j == tile, sh->scale, fused ? w->p_rp : NULL);
        } else
#endif
        { att_block_softmax(w, j == tile, sh->scale, sh->round_block); }
        if (j > 0) {
            for (int d = 0; d < HSP; d++) {
                float* row = w->oT + (size_t)d * ATT_TILE;
                for (int q = 0; q < ATT_TILE; q++) { row[q] *= w->alpha[q]; }
            }
        }
        // O^T (HSP, queries) += V_j^T P^T
        if (!fused) { att_layout_rowpair(w->p_rp, w->p16, ATT_TILE); }
        att_gemm(sh, w->oT, ATT_TILE, v_cp + j * kv_stride, ATT_PAIRS, w->p_rp, ATT_TILE, HSP, ATT_TILE, ATT_PAIRS, 1,
                 j == tile ? ATT_TRI_COLS : ATT_FULL);
    }
    float inv[ATT_TILE];
    for (int q = 0; q < ATT_TILE; q++) {
        inv[q] = 1.0f / w->l[q];
        w->lse[q] = w->m[q] + logf(w->l[q]);
    }
    for (int d = 0; d < HSP; d++) {
        float* row = w->oT + (size_t)d * ATT_TILE;
        for (int q = 0; q < ATT_TILE; q++) { row[q] *= inv[q]; }
    }
}

// the forward's i-th K/V block to round: batch b, k/v head g, block of rows j (the order: see its loop)
static inline void att_kv_block_at(size_t i, const AttShape* sh, int* b, int* g, int* j) {
    size_t per_b = (size_t)sh->NKV * sh->ntiles, r = i % per_b;
    *b = (int)(i / per_b);
    if (sh->prefetch) {
        *j = (int)(r / sh->NKV);
        *g = (int)(r % sh->NKV);
    } else {
        *g = (int)(r / sh->ntiles);
        *j = (int)(r % sh->ntiles);
    }
}

// the per-call buffer of the forward's rounded K and V: (B, NKV, ntiles) blocks of K rows, then V colpair
static uint32_t* attention_kv_buffer(size_t n) {
    static void* buf = NULL;
    static size_t capacity = 0;
    return (uint32_t*)scratch_reserve(&buf, &capacity, n * sizeof(uint32_t));
}

// out (B,T,NH HS) = attention of qkv (B,T,(NH + 2 NKV) HS), blocked; lse (B,T,NH) = each row's log-sum-exp, or NULL.
// qkv16 (or NULL) receives qkv rounded to bf16, as the kernel reads it; out16 (or NULL) the output rounded, beside out
// or instead of it (out NULL)
static void attention_blocked_forward(float* out, uint16_t* out16, float* lse, const float* qkv, uint16_t* qkv16,
                                      int B, int T, int NH, int NKV, int HS) {
    AttShape sh = att_shape(T, NH, NKV, HS);
    int HSP = sh.HSP, ntiles = sh.ntiles, C = sh.C, QKV = sh.QKV, rep = NH / NKV;
    size_t blk = (size_t)ATT_PAIRS * HSP; // pairs in one layout of one block
    uint32_t* kv = attention_kv_buffer((size_t)B * NKV * ntiles * 2 * blk);
    AttWork sizes_only;
    memset(&sizes_only, 0, sizeof(sizes_only));
    size_t per = att_work_layout(&sizes_only, NULL, &sh, 0);
    int nthreads;
    char* scratch = (char*)attention_scratch(per / sizeof(float), &nthreads);
    // Where q, k and v are kept in bf16 (qkv16), all of qkv rounded into it first, row after row: one pass that
    // streams (a block's rows are short pieces of long rows), then the blocks copied from the rounded rows at half the
    // bytes. LLMC_ATTENTION_ROUND_ROWS=0 rounds each block as it is loaded, as before (the same bits)
    const uint16_t* from16 = NULL;
    if (qkv16 != NULL && sh.round_rows) {
        size_t rows_all = (size_t)B * T;
        #pragma omp parallel for schedule(static) num_threads(nthreads)
        for (size_t bt = 0; bt < rows_all; bt++) { mm_round_bf16_row(qkv16 + bt * QKV, qkv + bt * QKV, (size_t)QKV); }
        from16 = qkv16;
    }
    uint16_t* keep16 = from16 != NULL ? NULL : qkv16;
    // every k/v head's blocks, rounded and laid out once. With LLMC_ATTENTION_PREFETCH the heads of a block of rows
    // one after another (their pieces of a row lie side by side) and the next one's rows asked for ahead (a block's
    // rows are short pieces of long rows, which the hardware prefetcher does not see coming); without, each head's
    // blocks in turn, as before (the same bits either way)
    size_t nblocks = (size_t)B * NKV * ntiles;
    #pragma omp parallel for schedule(static) num_threads(nthreads)
    for (size_t i = 0; i < nblocks; i++) {
        AttWork w = att_work(scratch, per, &sh, 0);
        int b, g, j;
        att_kv_block_at(i, &sh, &b, &g, &j);
        if (sh.prefetch && i + 1 < nblocks) {
            int nb, ng, nj;
            att_kv_block_at(i + 1, &sh, &nb, &ng, &nj);
            int n = T - nj * ATT_TILE < ATT_TILE ? T - nj * ATT_TILE : ATT_TILE;
            size_t at = ((size_t)nb * T + (size_t)nj * ATT_TILE) * QKV + C + (size_t)ng * HS;
            if (from16 != NULL) {
                att_prefetch_rows(from16 + at, 2 * (size_t)HS, 2 * (size_t)QKV, n, 0);
                att_prefetch_rows(from16 + at + (size_t)NKV * HS, 2 * (size_t)HS, 2 * (size_t)QKV, n, 0);
            } else {
                att_prefetch_rows(qkv + at, 4 * (size_t)HS, 4 * (size_t)QKV, n, 0);
                att_prefetch_rows(qkv + at + (size_t)NKV * HS, 4 * (size_t)HS, 4 * (size_t)QKV, n, 0);
            }
        }
        uint32_t* k_rows = kv + (((size_t)b * NKV + g) * ntiles + j) * 2 * blk;
        size_t k = ((size_t)b * T + (size_t)j * ATT_TILE) * QKV + C + (size_t)g * HS;
        int rows = T - j * ATT_TILE < ATT_TILE ? T - j * ATT_TILE : ATT_TILE;
        att_load_block((uint16_t*)(void*)k_rows, qkv, from16, keep16, k, (size_t)QKV, rows, HS, HSP);
        att_load_block(w.x16, qkv, from16, keep16, k + (size_t)NKV * HS, (size_t)QKV, rows, HS, HSP);
        att_layout_colpair(k_rows + blk, w.x16, HSP, sh.softmax16);
    }
    // the query tiles, the longest (furthest down a head) handed out first
    #pragma omp parallel for collapse(3) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int it = 0; it < ntiles; it++) {
                AttWork w = att_work(scratch, per, &sh, 0);
                int tile = ntiles - 1 - it, t0 = tile * ATT_TILE;
                int rows = T - t0 < ATT_TILE ? T - t0 : ATT_TILE;
                att_load_block(w.q16, qkv, from16, keep16, ((size_t)b * T + t0) * QKV + (size_t)h * HS, (size_t)QKV,
                               rows, HS, HSP);
                att_layout_dmajor(w.q_dm, w.q16, HSP, sh.softmax16);
                const uint32_t* k_rows = kv + ((size_t)b * NKV + h / rep) * ntiles * 2 * blk;
                att_tile_forward(&w, w.q_dm, k_rows, k_rows + blk, 2 * blk, tile, &sh);
                if (sh.softmax16) { // (O^T back to rows in registers, then each row at once: the same numbers)
                    att_transpose32((uint32_t*)(void*)w.rows, (size_t)HSP, (const uint32_t*)(const void*)w.oT, ATT_TILE,
                                    HSP, ATT_TILE, 1);
                    for (int q = 0; q < rows; q++) {
                        size_t bt = (size_t)b * T + t0 + q;
                        const float* row = w.rows + (size_t)q * HSP;
                        if (out != NULL) { memcpy(out + bt * C + (size_t)h * HS, row, (size_t)HS * sizeof(float)); }
                        if (out16 != NULL) { mm_round_bf16_row(out16 + bt * C + (size_t)h * HS, row, (size_t)HS); }
                        if (lse != NULL) { lse[bt * NH + h] = w.lse[q]; }
                    }
                    continue;
                }
                for (int q = 0; q < rows; q++) {
                    size_t bt = (size_t)b * T + t0 + q;
                    if (out != NULL) {
                        float* o = out + bt * C + (size_t)h * HS;
                        for (int d = 0; d < HS; d++) { o[d] = w.oT[(size_t)d * ATT_TILE + q]; }
                    }
                    if (out16 != NULL) {
                        uint16_t* o16 = out16 + bt * C + (size_t)h * HS;
                        for (int d = 0; d < HS; d++) { o16[d] = matmul_bf16_round_value(w.oT[(size_t)d * ATT_TILE + q]); }
                    }
                    if (lse != NULL) { lse[bt * NH + h] = w.lse[q]; }
                }
            }
        }
    }
}

// One block of the backward's element-wise part: w->p16 = P^T = e^(scale S^T - lse) and w->ds16 = dS^T = P^T (dP^T -
// D) scale, rounded (w->sT, w->dpT: S^T and dP^T, overwritten), 0 where a query does not see the key (diag: the tile's
// own block)
static void att_block_grad(AttWork* w, int diag, float scale, int round_block) {
    for (int kk = 0; kk < ATT_TILE; kk++) {
        float* srow = w->sT + (size_t)kk * ATT_TILE;
        float* dprow = w->dpT + (size_t)kk * ATT_TILE;
        for (int q = 0; q < ATT_TILE; q++) {
            float p = vec_expf(srow[q] * scale - w->lse[q]);
            p = diag && q < kk ? 0.0f : p;
            srow[q] = p;
            dprow[q] = diag && q < kk ? 0.0f : p * (dprow[q] - w->D[q]) * scale;
        }
        if (!round_block) {
            mm_round_bf16_row(w->p16 + (size_t)kk * ATT_TILE, srow, ATT_TILE);
            mm_round_bf16_row(w->ds16 + (size_t)kk * ATT_TILE, dprow, ATT_TILE);
        }
    }
    // (rounded after the block, as one run of ATT_TILE^2: a call per row of 64 left the loops too short to overlap;
    // 16% of this part's time. LLMC_ATTENTION_BLOCK_ROUND=0: a row at a time, as before)
    if (round_block) {
        mm_round_bf16_row(w->p16, w->sT, (size_t)ATT_TILE * ATT_TILE);
        mm_round_bf16_row(w->ds16, w->dpT, (size_t)ATT_TILE * ATT_TILE);
    }
}

#if MATMUL_X86
// att_block_grad in AVX-512 (AttShape's softmax16), the same bits: the compiled loop fuses scale S^T - lse into
// one multiply-subtract, written out here; P^T and dS^T are rounded as they are made, never stored in fp32
__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void att_block_grad16(AttWork* w, int diag, float scale) {
    const __m512 vscale = _mm512_set1_ps(scale);
    const float* restrict sT = w->sT;
    const float* restrict dpT = w->dpT;
    uint16_t* restrict p16 = w->p16;
    uint16_t* restrict ds16 = w->ds16;
    __m512 lse[ATT_TILE / 16], D[ATT_TILE / 16];
    for (int v = 0; v < ATT_TILE / 16; v++) {
        lse[v] = _mm512_loadu_ps(w->lse + 16 * v);
        D[v] = _mm512_loadu_ps(w->D + 16 * v);
    }
    for (int kk = 0; kk < ATT_TILE; kk += 2) { // (two rows a step: eight exponentials side by side)
        const float* srow = sT + (size_t)kk * ATT_TILE;
        const float* dprow = dpT + (size_t)kk * ATT_TILE;
        __m512 p[2 * ATT_TILE / 16], ds[2 * ATT_TILE / 16];
        for (int v = 0; v < 2 * ATT_TILE / 16; v++) {
            p[v] = vec16_expf(_mm512_fmsub_ps(_mm512_loadu_ps(srow + 16 * v), vscale, lse[v % 4]));
        }
        if (diag) {
            for (int v = 0; v < 2 * ATT_TILE / 16; v++) {
                p[v] = _mm512_mask_mov_ps(p[v], att_hidden16(kk + v / 4, v % 4), _mm512_setzero_ps());
            }
        }
        for (int v = 0; v < 2 * ATT_TILE / 16; v++) {
            ds[v] = _mm512_mul_ps(_mm512_mul_ps(p[v], _mm512_sub_ps(_mm512_loadu_ps(dprow + 16 * v), D[v % 4])), vscale);
        }
        if (diag) { // (+0 where hidden: dP^T is not computed there with LLMC_ATTENTION_TRIANGLE)
            for (int v = 0; v < 2 * ATT_TILE / 16; v++) {
                ds[v] = _mm512_mask_mov_ps(ds[v], att_hidden16(kk + v / 4, v % 4), _mm512_setzero_ps());
            }
        }
        for (int v = 0; v < 2 * ATT_TILE / 16; v += 2) {
            _mm512_storeu_si512((void*)(p16 + (size_t)kk * ATT_TILE + 16 * v), mm32_round_bf16(p[v], p[v + 1]));
            _mm512_storeu_si512((void*)(ds16 + (size_t)kk * ATT_TILE + 16 * v), mm32_round_bf16(ds[v], ds[v + 1]));
        }
    }
}
#endif

// The backward of k/v head g of batch row b and its query heads: dqkv += their gradients. out (or out16, stored in
// bf16), lse: the forward's (both given, or each tile's forward run again). qkv16 instead of qkv: stored in bf16.
static void att_group_backward(float* dqkv, const float* dout, const float* qkv, const uint16_t* qkv16, const float* out,
                               const uint16_t* out16, const float* lse, int b, int g, AttWork* w, const AttShape* sh,
                               int accumulate, uint16_t* dqkv16, float* bias_part) {
    int T = sh->T, HS = sh->HS, HSP = sh->HSP, C = sh->C, QKV = sh->QKV, NH = sh->NH, NKV = sh->NKV;
    int ntiles = sh->ntiles, rep = NH / NKV, kept = (out != NULL || out16 != NULL) && lse != NULL;
    float scale = sh->scale;
    size_t blk = (size_t)ATT_PAIRS * HSP, tile_n = (size_t)ATT_TILE * HSP, bt0 = (size_t)b * T;
    size_t k = bt0 * QKV + C + (size_t)g * HS, v = k + (size_t)NKV * HS; // the head's first K and V elements
    att_tiles_ready(sh);
    // the head's K and V, every block, in the layouts the products take
    for (int j = 0; j < ntiles; j++) {
        int rows = T - j * ATT_TILE < ATT_TILE ? T - j * ATT_TILE : ATT_TILE;
        uint16_t* k16 = (uint16_t*)(void*)(w->k_rows + j * blk);
        att_load_block(k16, qkv, qkv16, NULL, k + (size_t)j * ATT_TILE * QKV, (size_t)QKV, rows, HS, HSP);
        att_layout_colpair(w->k_cp + j * blk, k16, HSP, sh->softmax16);
        uint16_t* v16 = (uint16_t*)(void*)(w->v_rows + j * blk);
        att_load_block(v16, qkv, qkv16, NULL, v + (size_t)j * ATT_TILE * QKV, (size_t)QKV, rows, HS, HSP);
        if (!kept) { att_layout_colpair(w->v_cp + j * blk, v16, HSP, sh->softmax16); } // (for the tiles' forwards)
    }
    memset(w->dk, 0, (size_t)ntiles * tile_n * sizeof(float));
    memset(w->dv, 0, (size_t)ntiles * tile_n * sizeof(float));
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int tile = 0; tile < ntiles; tile++) {
            int t0 = tile * ATT_TILE, rows = T - t0 < ATT_TILE ? T - t0 : ATT_TILE;
            // the next tile's rows (the next head's first at the end of a head)
            int next_h = tile + 1 < ntiles ? h : h + 1, next_t0 = tile + 1 < ntiles ? t0 + ATT_TILE : 0;
            if (sh->prefetch && next_h < (g + 1) * rep) {
                int n = T - next_t0 < ATT_TILE ? T - next_t0 : ATT_TILE;
                size_t at_qkv = (bt0 + next_t0) * QKV + (size_t)next_h * HS, at_c = (bt0 + next_t0) * C + (size_t)next_h * HS;
                if (qkv16 != NULL) { att_prefetch_rows(qkv16 + at_qkv, 2 * (size_t)HS, 2 * (size_t)QKV, n, 0); }
                else { att_prefetch_rows(qkv + at_qkv, 4 * (size_t)HS, 4 * (size_t)QKV, n, 0); }
                att_prefetch_rows(dout + at_c, 4 * (size_t)HS, 4 * (size_t)C, n, 0);
                if (out16 != NULL) { att_prefetch_rows(out16 + at_c, 2 * (size_t)HS, 2 * (size_t)C, n, 0); }
                else if (out != NULL) { att_prefetch_rows(out + at_c, 4 * (size_t)HS, 4 * (size_t)C, n, 0); }
                if (lse != NULL) { att_prefetch_rows(lse + (bt0 + next_t0) * NH + next_h, 4, 4 * (size_t)NH, n, 0); }
                if (dqkv != NULL) { att_prefetch_rows(dqkv + at_qkv, 4 * (size_t)HS, 4 * (size_t)QKV, n, 1); }
                else { att_prefetch_rows(dqkv16 + at_qkv, 2 * (size_t)HS, 2 * (size_t)QKV, n, 1); }
            }
            att_load_block(w->q16, qkv, qkv16, NULL, (bt0 + t0) * QKV + (size_t)h * HS, (size_t)QKV, rows, HS, HSP);
            att_layout_dmajor(w->q_dm, w->q16, HSP, sh->softmax16);
            att_layout_rowpair(w->q_rp, w->q16, HSP);
            att_round_block(w->do16, dout + (bt0 + t0) * C + (size_t)h * HS, (size_t)C, rows, HS, HSP);
            att_layout_dmajor(w->do_dm, w->do16, HSP, sh->softmax16);
            att_layout_rowpair(w->do_rp, w->do16, HSP);
            // each query's lse and D = rowsum(dO o O): the forward's, or its tile run again (the same bits). dO is
            // the rounded one dP^T = V dO^T takes, so that D = sum of P dP up to P's rounding (a query that sees one
            // key gets dS = 0, as it should); padded queries get 0 (their dO is 0)
            if (kept) {
                size_t o = (bt0 + t0) * C + (size_t)h * HS;
                att_transpose_O(w->oT, out16 != NULL ? NULL : out + o, out16 != NULL ? out16 + o : NULL, (size_t)C, rows,
                                HS, HSP, w->rows, sh->softmax16);
                for (int q = 0; q < ATT_TILE; q++) { w->lse[q] = q < rows ? lse[(bt0 + t0 + q) * NH + h] : 0.0f; }
            } else {
                att_tile_forward(w, w->q_dm, w->k_rows, w->v_cp, blk, tile, sh);
                for (int q = rows; q < ATT_TILE; q++) { w->lse[q] = 0.0f; }
            }
            att_tile_D(w->D, w->do_dm, w->oT, HS); // (0 for the padded queries: their dO is 0)
            memset(w->dqT, 0, tile_n * sizeof(float));
            for (int j = 0; j <= tile; j++) {
                const uint32_t* k_rows = w->k_rows + j * blk;
                // S^T = K_j Q^T, dP^T = V_j dO^T (keys, queries)
                int rows_tri = j == tile ? ATT_TRI_ROWS : ATT_FULL, pairs_tri = j == tile ? ATT_TRI_PAIRS : ATT_FULL;
                int cols_tri = j == tile ? ATT_TRI_COLS : ATT_FULL;
                att_gemm(sh, w->sT, ATT_TILE, k_rows, HSP / 2, w->q_dm, ATT_TILE, ATT_TILE, ATT_TILE, HSP / 2, 0, rows_tri);
                att_gemm(sh, w->dpT, ATT_TILE, w->v_rows + j * blk, HSP / 2, w->do_dm, ATT_TILE, ATT_TILE, ATT_TILE,
                         HSP / 2, 0, rows_tri);
                // P^T = e^(scale S^T - lse), dS^T = P^T (dP^T - D) scale, 0 where a query does not see the key
#if MATMUL_X86
                if (sh->softmax16) { att_block_grad16(w, j == tile, scale); }
                else
#endif
                { att_block_grad(w, j == tile, scale, sh->round_block); }
                // dV_j += P^T dO, dK_j += dS^T Q (keys, HSP); dQ^T (HSP, queries) += K_j^T dS^T
                att_gemm(sh, w->dv + j * tile_n, HSP, w->p16, ATT_PAIRS, w->do_rp, HSP, ATT_TILE, HSP, ATT_PAIRS, 1, pairs_tri);
                att_gemm(sh, w->dk + j * tile_n, HSP, w->ds16, ATT_PAIRS, w->q_rp, HSP, ATT_TILE, HSP, ATT_PAIRS, 1, pairs_tri);
                att_layout_rowpair(w->ds_rp, w->ds16, ATT_TILE);
                att_gemm(sh, w->dqT, ATT_TILE, w->k_cp + j * blk, ATT_PAIRS, w->ds_rp, ATT_TILE, HSP, ATT_TILE, ATT_PAIRS, 1,
                         cols_tri);
            }
            // (written: 0 + x, the bits of adding to a zeroed dqkv, -0 included). The bf16 copy is dQ^T rounded as
            // it lies, in one vector loop, then taken a column at a time like the fp32 rows: rounding each row's
            // values on their own way out (strided loads), or reading the row back from its element-by-element
            // stores, cost 3-5% of the backward's time on a Zen 5
            // (dqkv NULL: its bf16 copy alone, rounded from the values; bias_part: the tile's column sums of them)
            int copy16 = !accumulate && dqkv16 != NULL, copy_tile = copy16 && (sh->round_block || dqkv == NULL);
            float* bsum = bias_part != NULL ? bias_part + ((size_t)b * ntiles + tile) * QKV + (size_t)h * HS : NULL;
            if (bsum != NULL) { memset(bsum, 0, (size_t)HS * sizeof(float)); }
            if (sh->softmax16) { // (dQ^T back to rows in registers, then each row at once: the same numbers)
                att_transpose32((uint32_t*)(void*)w->rows, (size_t)HSP, (const uint32_t*)(const void*)w->dqT, ATT_TILE,
                                HSP, ATT_TILE, 1);
                for (int q = 0; q < rows; q++) {
                    size_t at = (bt0 + t0 + q) * QKV + (size_t)h * HS;
                    const float* row = w->rows + (size_t)q * HSP;
                    if (bsum != NULL) {
                        for (int d = 0; d < HS; d++) { bsum[d] += row[d]; }
                    }
                    if (dqkv != NULL) {
                        float* dst = dqkv + at;
                        if (accumulate) {
                            for (int d = 0; d < HS; d++) { dst[d] += row[d]; }
                        } else {
                            for (int d = 0; d < HS; d++) { dst[d] = 0.0f + row[d]; }
                        }
                    }
                    if (copy_tile) { // (always when dqkv is NULL)
                        for (int d = 0; d < HS; d++) { dqkv16[at + d] = matmul_bf16_round_value(0.0f + row[d]); }
                    } else if (copy16) {
                        bf16_copy_row(dqkv16 + at, dqkv + at, (size_t)HS);
                    }
                }
                continue;
            }
            if (copy_tile) {
                for (size_t i = 0; i < tile_n; i++) { w->dq16T[i] = matmul_bf16_round_value(0.0f + w->dqT[i]); }
            }
            for (int q = 0; q < rows; q++) {
                size_t at = (bt0 + t0 + q) * QKV + (size_t)h * HS;
                if (bsum != NULL) {
                    for (int d = 0; d < HS; d++) { bsum[d] += w->dqT[(size_t)d * ATT_TILE + q]; }
                }
                if (dqkv != NULL) {
                    float* dst = dqkv + at;
                    if (accumulate) {
                        for (int d = 0; d < HS; d++) { dst[d] += w->dqT[(size_t)d * ATT_TILE + q]; }
                    } else {
                        for (int d = 0; d < HS; d++) { dst[d] = 0.0f + w->dqT[(size_t)d * ATT_TILE + q]; }
                    }
                }
                if (copy_tile) { // (always when dqkv is NULL)
                    for (int d = 0; d < HS; d++) { dqkv16[at + d] = w->dq16T[(size_t)d * ATT_TILE + q]; }
                } else if (copy16) { // (LLMC_ATTENTION_BLOCK_ROUND=0: the row read back, as before)
                    bf16_copy_row(dqkv16 + at, dqkv + at, (size_t)HS);
                }
            }
        }
    }
    for (int t = 0; t < T; t++) {
        const float* sk = w->dk + (size_t)t * HSP;
        const float* sv = w->dv + (size_t)t * HSP;
        if (bias_part != NULL) { // (the tile's column sums of the values written, row after row)
            float* bk = bias_part + ((size_t)b * ntiles + t / ATT_TILE) * QKV + C + (size_t)g * HS;
            float* bv = bk + (size_t)NKV * HS;
            if (t % ATT_TILE == 0) {
                memset(bk, 0, (size_t)HS * sizeof(float));
                memset(bv, 0, (size_t)HS * sizeof(float));
            }
            for (int d = 0; d < HS; d++) {
                bk[d] += sk[d];
                bv[d] += sv[d];
            }
        }
        size_t at_k = (bt0 + t) * QKV + C + (size_t)g * HS, at_v = at_k + (size_t)NKV * HS;
        if (dqkv == NULL) {
            for (int d = 0; d < HS; d++) {
                dqkv16[at_k + d] = matmul_bf16_round_value(0.0f + sk[d]);
                dqkv16[at_v + d] = matmul_bf16_round_value(0.0f + sv[d]);
            }
            continue;
        }
        float* dk = dqkv + at_k;
        float* dv = dqkv + at_v;
        if (sh->prefetch && t + 16 < T) { // (16 rows ahead: their misses overlap these rows' adds)
            att_prefetch_rows(dk + (size_t)16 * QKV, 4 * (size_t)HS, 0, 1, 1);
            att_prefetch_rows(dv + (size_t)16 * QKV, 4 * (size_t)HS, 0, 1, 1);
        }
        if (accumulate) {
            for (int d = 0; d < HS; d++) {
                dk[d] += sk[d];
                dv[d] += sv[d];
            }
        } else {
            for (int d = 0; d < HS; d++) {
                dk[d] = 0.0f + sk[d];
                dv[d] = 0.0f + sv[d];
            }
            if (dqkv16 != NULL) {
                bf16_copy_row(dqkv16 + (dk - dqkv), dk, (size_t)HS);
                bf16_copy_row(dqkv16 + (dv - dqkv), dv, (size_t)HS);
            }
        }
    }
}

// the per-call buffer of the backward's bias sums: (B, ntiles, QKV) floats
static float* attention_bias_buffer(size_t n) {
    static void* buf = NULL;
    static size_t capacity = 0;
    return (float*)scratch_reserve(&buf, &capacity, n * sizeof(float));
}

// dqkv (B,T,(NH + 2 NKV) HS) += the gradient of attention_blocked_forward for dout (B,T,NH HS), or = when not
// accumulate (each element is written once: its old contents are never read), and then its bf16 copy dqkv16 too in
// the same stores (NULL: none), or the copy alone (dqkv NULL, not accumulate); out and lse are the forward's (both,
// or either NULL: recomputed); qkv16, out16 instead of qkv, out: stored in bf16. dbias (QKV, or NULL; not
// accumulate) = beta * dbias + the sum of the rows written (a linear layer's bias gradient): each 64-row tile of a
// batch row summed in row order, then the tiles' sums added in order (batch row, tile), the same bits for any thread
// count (not one running sum's: matmul_backward_bias's)
static void attention_blocked_backward(float* dqkv, const float* dout, const float* qkv, const uint16_t* qkv16,
                                       const float* out, const uint16_t* out16, const float* lse, int B, int T, int NH,
                                       int NKV, int HS, int accumulate, uint16_t* dqkv16, float* dbias, float beta) {
    AttShape sh = att_shape(T, NH, NKV, HS);
    AttWork sizes_only;
    memset(&sizes_only, 0, sizeof(sizes_only));
    size_t per = att_work_layout(&sizes_only, NULL, &sh, 1);
    int nthreads;
    char* scratch = (char*)attention_scratch(per / sizeof(float), &nthreads);
    float* bias_part = dbias != NULL ? attention_bias_buffer((size_t)B * sh.ntiles * sh.QKV) : NULL;
    #pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int g = 0; g < NKV; g++) {
            AttWork w = att_work(scratch, per, &sh, 1);
            att_group_backward(dqkv, dout, qkv, qkv16, out, out16, lse, b, g, &w, &sh, accumulate, dqkv16, bias_part);
        }
    }
    if (dbias != NULL) {
        if (beta == 0.0f) { memset(dbias, 0, (size_t)sh.QKV * sizeof(float)); }
        partial_sums_add(dbias, bias_part, B * sh.ntiles, (size_t)sh.QKV, sh.QKV);
    }
}

// ----------------------------------------------------------------------------
// choosing the kernel, and the calls

typedef enum { ATTENTION_TILED = 0, ATTENTION_BLOCKED = 1 } AttentionKernel;

// the kernel the trainers' calls run: LLMC_ATTENTION=tiled|blocked, else blocked with bf16 GEMMs and tiled with fp32
// ones
static AttentionKernel attention_kernel_chosen(void) {
    static const char* const names[] = {"tiled", "blocked"}; // (AttentionKernel's order)
    int k = env_choice("LLMC_ATTENTION", names, 2, -1);
    if (k >= 0) { return (AttentionKernel)k; }
    return matmul_precision == MATMUL_BF16 ? ATTENTION_BLOCKED : ATTENTION_TILED;
}

// the FLOPs of `products` (T,T)-causal products of 2 HS flops per query-key pair, every head
static inline double attention_flops(int B, int T, int NH, int HS, int products) {
    return (double)B * NH * ((double)T * (T + 1) / 2.0) * 2.0 * HS * products;
}

// x (n floats), just written: its bf16 copy too when a GEMM reads it from one (llmc/cpu/matmul.h's mirrors of
// activations, -p bf16 on oneDNN)
static inline void attention_write_shadow(const float* x, size_t n) {
    uint16_t* x16 = matmul_bf16_shadow(x, n);
    if (x16 != NULL) { matmul_round_bf16(x16, x, 1, n, n); }
}

static inline void attention_check_heads(int NH, int NKV) {
    if (NKV < 1 || NH % NKV != 0) { llmc_die("internal: attention with %d query heads and %d k/v heads", NH, NKV); }
}

// Whether the blocked kernel writes the bf16 copies of its output and of the input gradient in the stores of the
// fp32 values, and a backward that writes dqkv (accumulate 0) writes it in the stores that add to it otherwise
// (LLMC_ATTENTION_OVERWRITE, read at each call; the default), or zeroes dqkv, adds to it and rounds each copy in a
// pass of its own (0: as before 2026-11-29; the same bits), until timed beyond the Zen 5.
static int attention_overwrite(void) { return env_switch_on("LLMC_ATTENTION_OVERWRITE"); }

// out (B,T,NH HS) = causal attention of qkv (B,T,(NH + 2 NKV) HS); lse (B,T,NH) receives each row's log-sum-exp
// for the backward (blocked kernel; NULL: not kept; the tiled kernel leaves it alone)
static void attention_gqa_forward(float* out, float* lse, const float* qkv, int B, int T, int NH, int NKV, int HS) {
    attention_check_heads(NH, NKV);
    double t_phase = phase_begin();
    int blocked = attention_kernel_chosen() == ATTENTION_BLOCKED;
    size_t n = (size_t)B * T * NH * HS;
    if (blocked && attention_overwrite()) { // (the output's bf16 copy in the same stores)
        attention_blocked_forward(out, matmul_bf16_shadow(out, n), lse, qkv, NULL, B, T, NH, NKV, HS);
    } else {
        if (blocked) { attention_blocked_forward(out, NULL, lse, qkv, NULL, B, T, NH, NKV, HS); }
        else { attention_tiled_forward(out, NULL, qkv, B, T, NH, NKV, HS); }
        attention_write_shadow(out, n);
    }
    double BT = (double)B * T;
    double floats = BT * ((double)(NH + 2 * NKV) * HS + (double)NH * HS + (blocked && lse != NULL ? NH : 0));
    // (written with out: its bf16 copy, when it has one; a pass of its own counts as bf16 otherwise)
    double copy = blocked && attention_overwrite() && matmul_bf16_shadow(out, n) != NULL ? 2.0 * (double)n : 0.0;
    phase_end(PHASE_ATTENTION, t_phase, 4.0 * floats + copy, attention_flops(B, T, NH, HS, 2));
}


// whether a backward into dqkv adds to it: 1 when asked to (accumulate), and when asked to write it but the kernel
// adds (the tiled one, or LLMC_ATTENTION_OVERWRITE=0), after zeroing dqkv (n floats; a zeroing phase of its own)
static int attention_backward_adds(float* dqkv, size_t n, int blocked, int accumulate) {
    if (accumulate) { return 1; }
    if (blocked && attention_overwrite()) { return 0; }
    zero_floats(dqkv, n);
    return 1;
}

// the backward of either kernel into dqkv (n floats): added to it (adds: see attention_backward_adds) or written,
// and its bf16 copy. Written (blocked): its fp32 values go to dqkv32, dqkv or NULL (the copy holds it alone), and
// dbias (or NULL) = beta * dbias + the sum of its rows, in the same tiles
static void attention_backward_any(float* dqkv, float* dqkv32, float* dbias, float beta, const float* dout,
                                   const float* qkv, const uint16_t* qkv16, const float* out, const uint16_t* out16,
                                   const float* lse, int B, int T, int NH, int NKV, int HS, int blocked, int adds) {
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    if (!adds) { // (blocked)
        attention_blocked_backward(dqkv32, dout, qkv, qkv16, out, out16, lse, B, T, NH, NKV, HS, 0,
                                   matmul_bf16_shadow(dqkv, n), dbias, beta);
        if (dqkv32 == NULL) { matmul_bf16_alone_written(dqkv, n); }
        return;
    }
    if (blocked) { attention_blocked_backward(dqkv, dout, qkv, qkv16, out, out16, lse, B, T, NH, NKV, HS, 1, NULL, NULL, 0.0f); }
    else { attention_tiled_backward(dqkv, dout, qkv, NULL, B, T, NH, NKV, HS); }
    attention_write_shadow(dqkv, n);
}

// dqkv (B,T,(NH + 2 NKV) HS) += the gradient of attention_gqa_forward for dout (B,T,NH HS), or = when not accumulate
// (its old contents never read); out and lse are the forward's (the blocked kernel reads them when both are given,
// else recomputes them; the tiled one needs neither)
static void attention_gqa_backward_into(float* dqkv, const float* dout, const float* qkv, const float* out,
                                        const float* lse, int B, int T, int NH, int NKV, int HS, int accumulate) {
    attention_check_heads(NH, NKV);
    int blocked = attention_kernel_chosen() == ATTENTION_BLOCKED;
    int adds = attention_backward_adds(dqkv, (size_t)B * T * (NH + 2 * NKV) * HS, blocked, accumulate);
    double t_phase = phase_begin();
    attention_backward_any(dqkv, dqkv, NULL, 0.0f, dout, qkv, NULL, out, NULL, lse, B, T, NH, NKV, HS, blocked, adds);
    double BT = (double)B * T, nqkv = BT * (NH + 2 * NKV) * HS;
    double floats = (adds ? 2.0 : 1.0) * nqkv + BT * NH * HS;
    if (blocked && out != NULL && lse != NULL) { floats += BT * ((double)NH * HS + NH); }
    // (written with dqkv: its bf16 copy, when it has one; a pass of its own counts as bf16 otherwise)
    double copy = !adds && matmul_bf16_shadow(dqkv, (size_t)nqkv) != NULL ? 2.0 * nqkv : 0.0;
    phase_end(PHASE_ATTENTION, t_phase, 4.0 * floats + copy, attention_flops(B, T, NH, HS, 4));
}

static void attention_gqa_backward(float* dqkv, const float* dout, const float* qkv, const float* out,
                                   const float* lse, int B, int T, int NH, int NKV, int HS) {
    attention_gqa_backward_into(dqkv, dout, qkv, out, lse, B, T, NH, NKV, HS, 1);
}

// The blocked kernel keeping its input and output in bf16 (the -p bf16 layouts, llmc/cpu/cpu_model.h's
// cpu_model_bf16_activations): the forward reads qkv (B,T,(NH + 2 NKV) HS, fp32) and writes qkv16, the same shape, as
// it rounds it (what the backward reads), and out16 (B,T,NH HS), the output rounded: the bits attention_gqa_forward's
// blocked kernel gives, then rounded; lse as there; always the blocked kernel. The backward reads qkv16, out16 and lse
// (D = rowsum(dO o O) then takes the rounded O) and writes dqkv's bf16 copy when it has one.
static void attention_gqa_forward_bf16(uint16_t* out16, float* lse, const float* qkv, uint16_t* qkv16, int B, int T,
                                       int NH, int NKV, int HS) {
    attention_check_heads(NH, NKV);
    double t_phase = phase_begin();
    attention_blocked_forward(NULL, out16, lse, qkv, qkv16, B, T, NH, NKV, HS);
    double BT = (double)B * T; // q, k, v read in fp32 and written in bf16, out in bf16, lse in fp32
    phase_end(PHASE_ATTENTION, t_phase, BT * (6.0 * (NH + 2 * NKV) * HS + 2.0 * NH * HS + 4.0 * NH),
              attention_flops(B, T, NH, HS, 2));
}

// Whether GPT-2's -p bf16 backward sums the qkv bias gradient in the pass that writes dqkv (1, the default) or leaves
// it to matmul_backward_bias over the fp32 dqkv afterwards (LLMC_ATTENTION_BIAS=0 or LLMC_ELEMENTWISE_FUSED=0: one
// running sum per column, as before 2026-12-05; other bits). The trainer holds dqkv in bf16 alone when it is 1. Read
// once.
static int attention_bias_fused(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_ATTENTION_BIAS") && elementwise_fused(); }
    return on;
}

// dbias (QKV floats, or NULL: none) = beta * dbias + the sum of dqkv's rows (GPT-2's qkv bias gradient): summed in
// the pass that writes dqkv (attention_blocked_backward's tiles), which then leaves dqkv's fp32 values out where its
// bf16 copy holds it alone (matmul_bf16_fp32_kept); else (attention_bias_fused 0, or added to) from the fp32 rows
// afterwards
static void attention_gqa_backward_bf16(float* dqkv, float* dbias, float beta, const float* dout,
                                        const uint16_t* qkv16, const uint16_t* out16, const float* lse, int B, int T,
                                        int NH, int NKV, int HS, int accumulate) {
    attention_check_heads(NH, NKV);
    size_t n = (size_t)B * T * (NH + 2 * NKV) * HS;
    int adds = attention_backward_adds(dqkv, n, 1, accumulate);
    int bias_here = dbias != NULL && !adds && attention_bias_fused();
    float* dqkv32 = !bias_here || matmul_bf16_fp32_kept(dqkv, n) ? dqkv : NULL; // (bias_here: not adds)
    double t_phase = phase_begin();
    attention_backward_any(dqkv, dqkv32, bias_here ? dbias : NULL, beta, dout, NULL, qkv16, NULL, out16, lse, B, T, NH,
                           NKV, HS, 1, adds);
    // q, k, v, out in bf16; lse, dout in fp32, dqkv written (and read first when added to) in fp32, or its copy alone
    double BT = (double)B * T;
    double nqkv = BT * (NH + 2 * NKV) * HS;
    double bytes = BT * (2.0 * ((double)(NH + 2 * NKV) * HS + (double)NH * HS) + 4.0 * NH + 4.0 * (double)NH * HS);
    bytes += dqkv32 != NULL ? 4.0 * (adds ? 2.0 : 1.0) * nqkv : 0.0;
    bytes += !adds && matmul_bf16_shadow(dqkv, (size_t)nqkv) != NULL ? 2.0 * nqkv : 0.0; // (its copy, with it)
    phase_end(PHASE_ATTENTION, t_phase, bytes, attention_flops(B, T, NH, HS, 4) + (bias_here ? nqkv : 0.0));
    if (dbias != NULL && !bias_here) { matmul_backward_bias(dbias, dqkv, B * T, (NH + 2 * NKV) * HS, beta); }
}

// GPT-2's: out (B,T,C) = attention of inp (B,T,3C) = [Q | K | V], heads side by side. att (B,NH,T,T)
// receives the attention weights (tiled kernel), or is NULL (the trainer's case: nothing kept)
static void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH) {
    if (att == NULL) {
        attention_gqa_forward(out, NULL, inp, B, T, NH, NH, C / NH);
        return;
    }
    double t_phase = phase_begin();
    attention_tiled_forward(out, att, inp, B, T, NH, NH, C / NH);
    attention_write_shadow(out, (size_t)B * T * C);
    double BT = (double)B * T;
    phase_end(PHASE_ATTENTION, t_phase, 4.0 * (4.0 * BT * C + (double)B * NH * T * T), attention_flops(B, T, NH, C / NH, 2));
}

// dinp (B,T,3C) += the gradient of attention_forward for dout (B,T,C). att (B,NH,T,T) holds the
// forward's attention weights, or is NULL: then they are recomputed from inp
static void attention_backward(float* dinp, const float* dout, const float* inp, const float* att,
                               int B, int T, int C, int NH) {
    if (att == NULL) {
        attention_gqa_backward(dinp, dout, inp, NULL, NULL, B, T, NH, NH, C / NH);
        return;
    }
    double t_phase = phase_begin();
    attention_tiled_backward(dinp, dout, inp, att, B, T, NH, NH, C / NH);
    attention_write_shadow(dinp, (size_t)B * T * 3 * C);
    double BT = (double)B * T;
    phase_end(PHASE_ATTENTION, t_phase, 4.0 * (7.0 * BT * C + (double)B * NH * T * T), attention_flops(B, T, NH, C / NH, 4));
}

#endif // LLMC_ATTENTION_CPU_H
