/*
llmc/cpu/layers_cpu.h: the transformer layers on the CPU, fp32 with OpenMP, one forward and one
backward function per layer, each with its shapes in a comment. Every CPU model (train_gpt2.c,
and the trainers that include it) calls these; backward functions accumulate (+=) into their
gradients. Reductions run in a fixed order, so the same inputs and thread count give the same bits.

    encoder_forward / encoder_backward           token + position embeddings
    layernorm_forward / layernorm_backward       (and residual_layernorm_forward: add, then norm)
    norm_weight_backward                         the weight and bias gradients of LayerNorm and RMSNorm
    matmul_forward / matmul_backward             llmc/cpu/matmul.h's GEMM (BLAS or built-in, fp32 or bf16)
    matmul_backward_input / _weight              its two halves (the weight's may overwrite instead of add)
    matmul_backward_nobias                       both halves of a layer without bias (Llama 3's, nanochat's)
    attention_forward / attention_backward       causal self-attention in query tiles, weights recomputed per tile in backward
    gelu_forward / bias_gelu_forward / gelu_backward
    residual_forward / residual_backward
    crossentropy_softmax_forward / _backward     softmax over the first V of Vp logits, fused backward

Shapes: B batch, T time, C channels, NH heads, HS = C / NH, OC output channels, V vocab, Vp padded.
*/
#ifndef LLMC_LAYERS_CPU_H
#define LLMC_LAYERS_CPU_H

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "matmul.h"
#include "phase_time.h"
#include "vecmath.h"

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
static void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    // out is (B,T,C), inp is (B,T) token ids, wte is (Vp,C), wpe is (maxT,C)
    double t_phase = phase_begin();
    #pragma omp parallel for collapse(2)
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float* out_bt = out + ((size_t)b * T + t) * C;
            const float* wte_ix = wte + (size_t)inp[b * T + t] * C;
            const float* wpe_t = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) { out_bt[i] = wte_ix[i] + wpe_t[i]; }
        }
    }
    double BTC = (double)B * T * C;
    phase_end(PHASE_EMBEDDING, t_phase, 4.0 * (2.0 * BTC + (double)T * C), BTC); // rows of wte, wpe read; out written
}

static void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    // dwte is (Vp,C), dwpe is (maxT,C), dout is (B,T,C)
    // each thread owns a slice of the channels, so rows hit by the same token never race
    // and every element sums over (b,t) in the same order
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int b = 0; b < B; b++) {
            for (int t = 0; t < T; t++) {
                const float* dout_bt = dout + ((size_t)b * T + t) * C;
                float* dwte_ix = dwte + (size_t)inp[b * T + t] * C;
                float* dwpe_t = dwpe + (size_t)t * C;
                for (int i = c0; i < c1; i++) {
                    dwte_ix[i] += dout_bt[i];
                    dwpe_t[i] += dout_bt[i];
                }
            }
        }
    }
    double BTC = (double)B * T * C;
    phase_end(PHASE_EMBEDDING, t_phase, 4.0 * (3.0 * BTC + 2.0 * T * C), 2.0 * BTC); // dout read; rows updated
}

// one row: o (C) = layernorm(x (C)) * weight + bias, its mean and 1/std into *mean, *rstd
static inline void layernorm_row(float* o, float* mean, float* rstd, const float* x,
                                 const float* weight, const float* bias, int C) {
    float m = layernorm_mean(x, C);
    float s = layernorm_rstd(x, m, C);
    for (int i = 0; i < C; i++) { o[i] = (x[i] - m) * s * weight[i] + bias[i]; }
    *mean = m;
    *rstd = s;
}

static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int B, int T, int C) {
    // out and inp are (B,T,C), mean and rstd are (B,T) (kept for the backward pass),
    // weight and bias are (C)
    double t_phase = phase_begin();
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        layernorm_row(out + (size_t)bt * C, &mean[bt], &rstd[bt], inp + (size_t)bt * C, weight, bias, C);
    }
    double BTC = (double)B * T * C;
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * BTC + 2.0 * B * T), 7.0 * BTC); // inp read, out, mean, rstd written
}

// the residual add fused with the layernorm that reads it: one pass over each row instead of two
// (the same arithmetic as residual_forward then layernorm_forward, so the same bits)
static void residual_layernorm_forward(float* res_out, float* ln_out, float* mean, float* rstd, const float* inp1,
                                const float* inp2, const float* weight, const float* bias, int B, int T, int C) {
    // res_out, ln_out, inp1, inp2 are (B,T,C); mean, rstd are (B,T); weight, bias are (C)
    double t_phase = phase_begin();
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* a = inp1 + (size_t)bt * C;
        const float* b = inp2 + (size_t)bt * C;
        float* x = res_out + (size_t)bt * C;
        for (int i = 0; i < C; i++) { x[i] = a[i] + b[i]; }
        layernorm_row(ln_out + (size_t)bt * C, &mean[bt], &rstd[bt], x, weight, bias, C);
    }
    double BTC = (double)B * T * C;
    phase_end(PHASE_NORM, t_phase, 4.0 * (4.0 * BTC + 2.0 * B * T), 8.0 * BTC); // 2 read, 2 written (+ mean, rstd)
}

// The weight (and bias) gradients of a normalisation layer (LayerNorm here, RMSNorm in
// llmc/cpu/layers_llama_cpu.h): dweight[i] += sum over rows of norm * dout, norm = (inp - mean) * rstd
// (mean NULL: 0, RMSNorm's), dbias[i] += sum of dout (dbias NULL: none). Each thread owns a slice
// of the channels and sums the rows in order.
static void norm_weight_backward(float* dweight, float* dbias, const float* dout, const float* inp, const float* mean,
                                 const float* rstd, int BT, int C) {
    // dweight, dbias are (C); dout, inp are (BT,C); mean, rstd are (BT)
    // (its callers count it in their phase: the norm's backward reads dout and inp once, compulsorily)
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
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

static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C) {
    // dinp, dout, inp are (B,T,C); dweight, dbias, weight are (C); mean, rstd are (B,T)
    int BT = B * T;
    double t_phase = phase_begin();
    // 1) the input gradient, one row per iteration
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        const float* x = inp + (size_t)bt * C;
        const float* d = dout + (size_t)bt * C;
        float m = mean[bt], s = rstd[bt];
        // dnorm = dout * weight; we need its mean and the mean of dnorm * norm
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        float* dx = dinp + (size_t)bt * C;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * s;
            float dnorm = weight[i] * d[i];
            dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
        }
    }
    // 2) weight and bias gradients
    norm_weight_backward(dweight, dbias, dout, inp, mean, rstd, BT, C);
    double BTC = (double)BT * C;
    phase_end(PHASE_NORM, t_phase, 4.0 * (4.0 * BTC + 2.0 * BT), 10.0 * BTC); // dout, inp read; dinp updated
}

// ---- matmul: the hot spot. Both functions call llmc/cpu/matmul.h, which runs the GEMM on the
// BLAS chosen at build time (make BLAS=mkl|openblas) or on its own blocked OpenMP kernel
// (BLAS=none), in fp32 or, with -p bf16, on bf16-rounded inputs with fp32 sums.

// out[r,o] = bias[o] + sum_c inp[r,c] * weight[o,c]
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    // out is (B,T,OC), inp is (B,T,C), weight is (OC,C), bias is (OC) or NULL
    int BT = B * T;
    if (bias != NULL) { // the bias copied into every row, then the GEMM adds onto it
        double t_phase = phase_begin();
        #pragma omp parallel for schedule(static)
        for (int r = 0; r < BT; r++) { memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof(float)); }
        phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * BT * OC, 0.0);
    }
    matmul_gemm(matmul_precision, 0, 1, BT, OC, C, inp, C, weight, C, bias != NULL ? 1.0f : 0.0f, out, OC);
}

// matmul_backward's input gradient: dinp (B,T,C) += dout (B,T,OC) . weight (OC,C)
static void matmul_backward_input(float* dinp, const float* dout, const float* weight, int B, int T, int C, int OC) {
    matmul_gemm(matmul_precision, 0, 0, B * T, C, OC, dout, OC, weight, C, 1.0f, dinp, C);
}

// matmul_backward's weight gradient: dweight (OC,C) = beta * dweight + dout^T (OC,B*T) . inp (B*T,C);
// beta 1 accumulates, beta 0 overwrites (dweight's old contents are then never read)
static void matmul_backward_weight(float* dweight, const float* dout, const float* inp, int B, int T, int C, int OC,
                                   float beta) {
    matmul_gemm(matmul_precision, 1, 0, OC, C, B * T, dout, OC, inp, C, beta, dweight, C);
}

// a linear layer's backward without bias (Llama 3's, nanochat's): dinp += its gradient; dweight += its gradient,
// or = when overwrite (the gradients are stale, llmc/cpu/cpu_model.h's cpu_model_zero_grad)
static void matmul_backward_nobias(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                   int B, int T, int C, int OC, int overwrite) {
    matmul_backward_input(dinp, dout, weight, B, T, C, OC);
    matmul_backward_weight(dweight, dout, inp, B, T, C, OC, overwrite ? 0.0f : 1.0f);
}

static void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int T, int C, int OC) {
    // dinp, inp are (B,T,C); dout is (B,T,OC); dweight, weight are (OC,C); dbias is (OC) or NULL
    // all three gradients are accumulated (+=)
    int BT = B * T;
    matmul_backward_input(dinp, dout, weight, B, T, C, OC);
    matmul_backward_weight(dweight, dout, inp, B, T, C, OC, 1.0f);
    // dbias[o] += sum_r dout[r,o]: each thread owns a slice of columns, rows in order
    if (dbias != NULL) {
        double t_phase = phase_begin();
        #pragma omp parallel for schedule(static)
        for (int o0 = 0; o0 < OC; o0 += 64) {
            int o1 = o0 + 64 < OC ? o0 + 64 : OC;
            for (int r = 0; r < BT; r++) {
                const float* d = dout + (size_t)r * OC;
                for (int o = o0; o < o1; o++) { dbias[o] += d[o]; }
            }
        }
        phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * BT * OC, (double)BT * OC);
    }
}

// ---- attention. Q, K, V of head h are (T,HS) with rows strided by 3C inside inp (B,T,3C); its
// output and input gradients are strided likewise. The products are GEMMs (llmc/cpu/matmul.h, always
// fp32, one thread each: the heads and query tiles run in parallel).
// The trainer's path (att == NULL) is blocked: a head's queries are taken ATT_TILE rows at a time,
// and only that tile's scores against the keys it may see (ATT_TILE x (t0 + ATT_TILE), at most
// ATT_TILE x T) exist at once, per thread: scores, causal softmax and the weighted sum of V per
// tile, never a (T,T) matrix (0.5 MB per thread at T=1024 instead of 8 MB; none kept between the
// passes). Work above the diagonal is skipped a tile at a time. The backward recomputes each
// tile's scores and softmax with the same calls on the same numbers, so its weights are the
// forward's bit for bit. A caller that passes att (B,NH,T,T) gets the weights written there
// (and the backward reads them) instead.

#define ATT_TILE 64

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

// p (rows, ld) = the attention weights of query rows t0 .. t0+rows-1 of one head over keys
// 0 .. t0+rows-1 (0 above the diagonal); q, k point at row 0 of the head's Q and K (stride C3)
static void attention_tile_weights(float* p, int ld, const float* q, const float* k, int t0, int rows, int C3, int HS) {
    int keys = t0 + rows;
    matmul_gemm(MATMUL_FP32, 0, 1, rows, keys, HS, q + (size_t)t0 * C3, C3, k, C3, 0.0f, p, ld);
    attention_softmax_rows(p, ld, t0, rows, keys, 1.0f / sqrtf((float)HS));
}

// given the weights p (rows, ld) of query rows t0 .. t0+rows-1 and their output gradient d
// (rows, HS; stride C): dQ rows t0.. and dK, dV rows 0 .. t0+rows-1 += their gradients; dp is
// (rows, ld) scratch
static void attention_tile_backward(float* dq, float* dk, float* dv, float* dp, const float* p, int ld,
                                    const float* d, const float* q, const float* k, const float* v,
                                    int t0, int rows, int C, int HS) {
    int C3 = 3 * C, keys = t0 + rows;
    float scale = 1.0f / sqrtf((float)HS);
    // out = p V: dp (rows,keys) = dout (rows,HS) . V^T; dV (keys,HS) += p^T . dout
    matmul_gemm(MATMUL_FP32, 0, 1, rows, keys, HS, d, C, v, C3, 0.0f, dp, ld);
    matmul_gemm(MATMUL_FP32, 1, 0, keys, HS, rows, p, ld, d, C, 1.0f, dv, C3);
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
    matmul_gemm(MATMUL_FP32, 0, 0, rows, HS, keys, dp, ld, k, C3, 1.0f, dq + (size_t)t0 * C3, C3);
    matmul_gemm(MATMUL_FP32, 1, 0, keys, HS, rows, dp, ld, q + (size_t)t0 * C3, C3, 1.0f, dk, C3);
}

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

// out (B,T,C) = attention of inp (B,T,3C) = [Q | K | V], heads side by side. att (B,NH,T,T)
// receives the attention weights, or is NULL (the trainer's case: blocked, nothing kept)
static void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH) {
    int C3 = 3 * C;
    int HS = C / NH;
    int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    int nthreads;
    size_t ld = att != NULL ? (size_t)T : (size_t)((T + 15) & ~15);
    float* scratch = attention_scratch(att != NULL ? 0 : (size_t)ATT_TILE * ld, &nthreads);
    size_t per = ((size_t)ATT_TILE * ld + 15) & ~(size_t)15;
    // tiles further down a head see more keys: handed out as threads free up
    #pragma omp parallel for collapse(3) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            for (int tile = 0; tile < ntiles; tile++) {
                const float* q = inp + (size_t)b * T * C3 + h * HS;
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
                attention_tile_weights(p, (int)ld, q, q + C, t0, rows, C3, HS);
                // out rows t0.. (rows,HS) = p (rows,keys) . V (keys,HS), out rows strided by C
                matmul_gemm(MATMUL_FP32, 0, 0, rows, HS, t0 + rows, p, (int)ld, q + 2 * C, C3, 0.0f,
                            out + ((size_t)b * T + t0) * C + h * HS, C);
            }
        }
    }
}

// dinp (B,T,3C) += the gradient of attention_forward for dout (B,T,C). att (B,NH,T,T) holds the
// forward's attention weights, or is NULL: then each tile's are recomputed from inp (same bits)
static void attention_backward(float* dinp, const float* dout, const float* inp, const float* att,
                        int B, int T, int C, int NH) {
    int C3 = 3 * C;
    int HS = C / NH;
    int ntiles = (T + ATT_TILE - 1) / ATT_TILE;
    int nthreads;
    size_t ld = att != NULL ? (size_t)T : (size_t)((T + 15) & ~15);
    size_t per = ((size_t)ATT_TILE * ld + 15) & ~(size_t)15;
    float* scratch = attention_scratch(2 * per, &nthreads);
    // dK and dV of a head collect from all its tiles: a head is one thread's, tiles in order
    #pragma omp parallel for collapse(2) schedule(dynamic, 1) num_threads(nthreads)
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            float* dp = scratch + (size_t)attention_thread_id() * 2 * per; // dp, then p if recomputed
            const float* q = inp + (size_t)b * T * C3 + h * HS;
            float* dq = dinp + (size_t)b * T * C3 + h * HS;
            for (int tile = 0; tile < ntiles; tile++) {
                int t0 = tile * ATT_TILE, rows = T - t0 < ATT_TILE ? T - t0 : ATT_TILE;
                const float* p;
                if (att != NULL) {
                    p = att + (((size_t)b * NH + h) * T + t0) * T;
                } else {
                    attention_tile_weights(dp + per, (int)ld, q, q + C, t0, rows, C3, HS);
                    p = dp + per;
                }
                attention_tile_backward(dq, dq + C, dq + 2 * C, dp, p, (int)ld, dout + ((size_t)b * T + t0) * C + h * HS,
                                        q, q + C, q + 2 * C, t0, rows, C, HS);
            }
        }
    }
}

// GELU with llmc/cpu/vecmath.h's branch-free tanh, so these loops vectorise (glibc's tanhf does not)
static void gelu_forward(float* out, const float* inp, size_t N) {
    // out and inp are (N) = (B,T,4C)
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) { out[i] = vec_gelu_forward(inp[i]); }
    phase_end(PHASE_ELEMENTWISE, t_phase, 8.0 * N, 8.0 * N);
}

// the fc layer's bias add fused with the GELU that follows: pre (B,T,OC) holds the matmul
// without its bias on entry and with it on return (kept for the backward); out = gelu(pre)
static void bias_gelu_forward(float* out, float* pre, const float* bias, int B, int T, int OC) {
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < B * T; r++) {
        float* x = pre + (size_t)r * OC;
        float* y = out + (size_t)r * OC;
        for (int o = 0; o < OC; o++) {
            x[o] += bias[o];
            y[o] = vec_gelu_forward(x[o]);
        }
    }
    double N = (double)B * T * OC;
    phase_end(PHASE_ELEMENTWISE, t_phase, 12.0 * N, 9.0 * N); // pre read and written back, out written
}

static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) { dinp[i] += vec_gelu_grad(inp[i]) * dout[i]; }
    phase_end(PHASE_ELEMENTWISE, t_phase, 16.0 * N, 14.0 * N);
}

static void residual_forward(float* out, const float* inp1, const float* inp2, size_t N) {
    // out, inp1, inp2 are (N) = (B,T,C)
    double t_phase = phase_begin();
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) { out[i] = inp1[i] + inp2[i]; }
    phase_end(PHASE_ELEMENTWISE, t_phase, 12.0 * N, (double)N);
}

static void residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N) {
    double t_phase = phase_begin();
    #pragma omp parallel for
    for (size_t i = 0; i < N; i++) {
        dinp1[i] += dout[i];
        dinp2[i] += dout[i];
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 20.0 * N, 2.0 * N);
}

// softmax over the first V logits and the cross-entropy of the target token, per position
static void crossentropy_softmax_forward(float* losses, float* probs, const float* logits, const int* targets,
                                  int B, int T, int V, int Vp) {
    // logits, probs are (B,T,Vp) (the Vp-V padded columns are ignored, their prob is 0);
    // targets are (B,T) ids in [0,V); losses are (B,T)
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = logits + (size_t)bt * Vp;
        float* p = probs + (size_t)bt * Vp;
        float lane_max[16];
        for (int j = 0; j < 16; j++) { lane_max[j] = -INFINITY; }
        int i = 0;
        for (; i + 16 <= V; i += 16) {
            for (int j = 0; j < 16; j++) { lane_max[j] = x[i + j] > lane_max[j] ? x[i + j] : lane_max[j]; }
        }
        float maxval = -INFINITY;
        for (; i < V; i++) { maxval = x[i] > maxval ? x[i] : maxval; }
        for (int j = 0; j < 16; j++) { maxval = lane_max[j] > maxval ? lane_max[j] : maxval; }
        // 16 interleaved float partial sums (vectorises; a fixed order), added up in double
        float part[16] = {0.0f};
        for (i = 0; i + 16 <= V; i += 16) {
            for (int j = 0; j < 16; j++) {
                float e = vec_expf(x[i + j] - maxval);
                p[i + j] = e;
                part[j] += e;
            }
        }
        double sum = 0.0;
        for (; i < V; i++) {
            p[i] = vec_expf(x[i] - maxval);
            sum += p[i];
        }
        for (int j = 0; j < 16; j++) { sum += part[j]; }
        float inv = (float)(1.0 / sum);
        for (i = 0; i < V; i++) { p[i] *= inv; }
        for (; i < Vp; i++) { p[i] = 0.0f; }
        // -log softmax computed from the logits directly (no log of a rounded probability)
        losses[bt] = (float)(log(sum) - (double)(x[targets[bt]] - maxval));
    }
}

// the fused backward of softmax + cross-entropy: dlogits = (probs - onehot(target)) * dloss
static void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets,
                                   int B, int T, int V, int Vp) {
    // dlogits, probs are (B,T,Vp); dlosses, targets are (B,T). dlogits is accumulated (+=).
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float* dl = dlogits + (size_t)bt * Vp;
        const float* p = probs + (size_t)bt * Vp;
        float dloss = dlosses[bt];
        int ix = targets[bt];
        for (int i = 0; i < V; i++) {
            float indicator = i == ix ? 1.0f : 0.0f;
            dl[i] += (p[i] - indicator) * dloss;
        }
    }
}

#endif // LLMC_LAYERS_CPU_H
