/*
llmc/cpu/layers_cpu.h: the transformer layers on the CPU, fp32 with OpenMP, one forward and one
backward function per layer, each with its shapes in a comment. Every CPU model (train_gpt2.c,
and the trainers that include it) calls these; backward functions accumulate (+=) into their
gradients, and their _into forms (layernorm_backward_into, matmul_backward_into, gelu_backward_into)
may write a gradient instead (=, its old contents never read: the trainers' backward writes each
activation gradient first and zeroes none). Reductions run in a fixed order, so the same inputs and
thread count give the same bits.

    encoder_forward / encoder_backward           token + position embeddings
    layernorm_forward / layernorm_backward       (and residual_layernorm_forward: add, then norm)
    norm_weight_backward                         the weight and bias gradients of LayerNorm and RMSNorm
    matmul_forward / matmul_backward             llmc/cpu/matmul.h's GEMM (BLAS or built-in, fp32 or bf16)
    matmul_backward_input / _weight              its two halves (each may overwrite instead of add)
    matmul_backward_into                         all three gradients (dbias NULL: none), each added to or written
    attention_forward / attention_backward       causal self-attention: llmc/cpu/attention_cpu.h (included here)
    gelu_forward / bias_gelu_forward / gelu_backward
    matmul_forward_bf16_input, matmul_backward_into_bf16_input, bias_gelu_forward_bf16, gelu_forward_bf16,
    gelu_backward_bf16_input                     the same layers on activations stored in bf16 alone (GPT-2's -p bf16)
    residual_forward / residual_backward
The classifier (lm_head, softmax, cross-entropy, their gradients) is llmc/cpu/classifier_cpu.h's.

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
#include "attention_cpu.h"
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

// bf16 copies: a layer whose output a GEMM reads writes the output's bf16 copy in the same pass when it has one
// (-p bf16 on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow; NULL otherwise), so that no GEMM rounds it again
static inline void bf16_copy_row(uint16_t* o16, const float* o, size_t n) {
    if (o16 == NULL) { return; }
    for (size_t i = 0; i < n; i++) { o16[i] = matmul_bf16_round_value(o[i]); }
}

// one row of a layernorm from its mean m and 1/std s: o (C) = (x - m) * s * weight + bias, and o16 (C) its bf16
// copy (NULL: none). The forward pass and the backward's recompute share it, so both give the same bits.
static inline void layernorm_apply_row(float* o, uint16_t* o16, const float* x, float m, float s, const float* weight,
                                       const float* bias, int C) {
    for (int i = 0; i < C; i++) { o[i] = (x[i] - m) * s * weight[i] + bias[i]; }
    bf16_copy_row(o16, o, (size_t)C);
}

// one row: o (C) = layernorm(x (C)) * weight + bias (o16: its bf16 copy, or NULL), its mean and 1/std into *mean, *rstd
static inline void layernorm_row(float* o, uint16_t* o16, float* mean, float* rstd, const float* x,
                                 const float* weight, const float* bias, int C) {
    float m = layernorm_mean(x, C);
    float s = layernorm_rstd(x, m, C);
    layernorm_apply_row(o, o16, x, m, s, weight, bias, C);
    *mean = m;
    *rstd = s;
}

static void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int B, int T, int C) {
    // out and inp are (B,T,C), mean and rstd are (B,T) (kept for the backward pass),
    // weight and bias are (C)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)B * T * C);
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        layernorm_row(out + (size_t)bt * C, out16 != NULL ? out16 + (size_t)bt * C : NULL, &mean[bt], &rstd[bt],
                      inp + (size_t)bt * C, weight, bias, C);
    }
    double BTC = (double)B * T * C;
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * BTC + 2.0 * B * T), 7.0 * BTC); // inp read, out, mean, rstd written
}

// out (B,T,C) = layernorm_forward's output again, from its input and the mean and rstd it kept (the same bits): the
// backward's, where only a GEMM reads the output and the forward did not keep it
static void layernorm_recompute(float* out, const float* inp, const float* mean, const float* rstd,
                                const float* weight, const float* bias, int B, int T, int C) {
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)B * T * C);
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        layernorm_apply_row(out + (size_t)bt * C, out16 != NULL ? out16 + (size_t)bt * C : NULL, inp + (size_t)bt * C,
                            mean[bt], rstd[bt], weight, bias, C);
    }
    double BTC = (double)B * T * C;
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * BTC + 2.0 * B * T), 4.0 * BTC);
}

// the residual add fused with the layernorm that reads it: one pass over each row instead of two
// (the same arithmetic as residual_forward then layernorm_forward, so the same bits)
static void residual_layernorm_forward(float* res_out, float* ln_out, float* mean, float* rstd, const float* inp1,
                                const float* inp2, const float* weight, const float* bias, int B, int T, int C) {
    // res_out, ln_out, inp1, inp2 are (B,T,C); mean, rstd are (B,T); weight, bias are (C)
    double t_phase = phase_begin();
    uint16_t* ln16 = matmul_bf16_shadow(ln_out, (size_t)B * T * C);
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* a = inp1 + (size_t)bt * C;
        const float* b = inp2 + (size_t)bt * C;
        float* x = res_out + (size_t)bt * C;
        for (int i = 0; i < C; i++) { x[i] = a[i] + b[i]; }
        layernorm_row(ln_out + (size_t)bt * C, ln16 != NULL ? ln16 + (size_t)bt * C : NULL, &mean[bt], &rstd[bt], x,
                      weight, bias, C);
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

// dinp (B,T,C) = the input gradient, added to dinp when accumulate, else written; dweight, dbias += theirs
static void layernorm_backward_into(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                    const float* weight, const float* mean, const float* rstd, int B, int T, int C,
                                    int accumulate) {
    // dinp, dout, inp are (B,T,C); dweight, dbias, weight are (C); mean, rstd are (B,T)
    int BT = B * T;
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, (size_t)BT * C);
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
        if (dinp16 != NULL) { bf16_copy_row(dinp16 + (size_t)bt * C, dx, (size_t)C); }
    }
    // 2) weight and bias gradients
    norm_weight_backward(dweight, dbias, dout, inp, mean, rstd, BT, C);
    double BTC = (double)BT * C;
    // dout, inp read; dinp updated (or written)
    phase_end(PHASE_NORM, t_phase, 4.0 * ((accumulate ? 4.0 : 3.0) * BTC + 2.0 * BT), 10.0 * BTC);
}

static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C) {
    layernorm_backward_into(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C, 1);
}

// ---- matmul: the hot spot. Both functions call llmc/cpu/matmul.h, which runs the GEMM on the
// BLAS chosen at build time (make BLAS=mkl|openblas) or on its own blocked OpenMP kernel
// (BLAS=none), in fp32 or, with -p bf16, on bf16-rounded inputs with fp32 sums.

// out (BT,OC) = the bias in every row (bias NULL: nothing), for the GEMM to add onto
static void matmul_bias_rows(float* out, const float* bias, int BT, int OC) {
    if (bias == NULL) { return; }
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < BT; r++) { memcpy(out + (size_t)r * OC, bias, (size_t)OC * sizeof(float)); }
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * BT * OC, 0.0);
}

// out[r,o] = bias[o] + sum_c inp[r,c] * weight[o,c]
static void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC) {
    // out is (B,T,OC), inp is (B,T,C), weight is (OC,C), bias is (OC) or NULL
    int BT = B * T;
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

// dbias (OC) = beta * dbias + the sum of dout's (BT,OC) rows (dbias NULL: nothing; beta 0: its old contents never read):
// each thread owns a slice of columns, rows in order
static void matmul_backward_bias(float* dbias, const float* dout, int BT, int OC, float beta) {
    if (dbias == NULL) { return; }
    if (beta == 0.0f) { memset(dbias, 0, (size_t)OC * sizeof(float)); }
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

// ---- inputs stored in bf16 alone: GPT-2's bf16 activations (llmc/cpu/cpu_model.h's cpu_model_bf16_activations)
// keep the attention's output and the MLP's hidden layer in bf16 only, as their GEMMs read them. These run the same
// GEMMs as matmul_forward / matmul_backward_into on the same bf16 numbers (llmc/cpu/matmul.h's
// matmul_gemm_bf16_stored), so they give the bits the fp32 forms give -p bf16 on an input that rounds to inp16.

// matmul_forward of the bf16 input inp16 (B,T,C): out (B,T,OC) = bias + inp16 . weight^T
static void matmul_forward_bf16_input(float* out, const uint16_t* inp16, const float* weight, const float* bias,
                                      int B, int T, int C, int OC) {
    int BT = B * T;
    matmul_bias_rows(out, bias, BT, OC);
    matmul_gemm_bf16_stored(0, 1, BT, OC, C, NULL, inp16, C, weight, NULL, C, bias != NULL ? 1.0f : 0.0f, out, OC);
}

// matmul_backward_into of the bf16 input inp16 (B,T,C): dinp (fp32) and dbias as there, dweight from inp16
static void matmul_backward_into_bf16_input(float* dinp, float* dweight, float* dbias, const float* dout,
                                            const uint16_t* inp16, const float* weight, int B, int T, int C, int OC,
                                            float beta_inp, float beta_weight) {
    matmul_backward_input(dinp, dout, weight, B, T, C, OC, beta_inp);
    matmul_gemm_bf16_stored(1, 0, OC, C, B * T, dout, NULL, OC, NULL, inp16, C, beta_weight, dweight, C);
    matmul_backward_bias(dbias, dout, B * T, OC, beta_weight);
}

// GELU with llmc/cpu/vecmath.h's branch-free tanh, so these loops vectorise (glibc's tanhf does not)
static void gelu_forward(float* out, const float* inp, size_t N) {
    // out and inp are (N) = (B,T,4C)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    if (out16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            out[i] = vec_gelu_forward(inp[i]);
            out16[i] = matmul_bf16_round_value(out[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) { out[i] = vec_gelu_forward(inp[i]); }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 8.0 * N, 8.0 * N);
}

// the fc layer's bias add fused with the GELU that follows: pre (B,T,OC) holds the matmul
// without its bias on entry and with it on return (kept for the backward); out = gelu(pre)
static void bias_gelu_forward(float* out, float* pre, const float* bias, int B, int T, int OC) {
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)B * T * OC);
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < B * T; r++) {
        float* x = pre + (size_t)r * OC;
        float* y = out + (size_t)r * OC;
        for (int o = 0; o < OC; o++) {
            x[o] += bias[o];
            y[o] = vec_gelu_forward(x[o]);
        }
        if (out16 != NULL) { bf16_copy_row(out16 + (size_t)r * OC, y, (size_t)OC); }
    }
    double N = (double)B * T * OC;
    phase_end(PHASE_ELEMENTWISE, t_phase, 12.0 * N, 9.0 * N); // pre read and written back, out written
}

// dinp (N) = the gradient of gelu_forward for dout (N), added to dinp when accumulate, else written
static void gelu_backward_into(float* dinp, const float* inp, const float* dout, size_t N, int accumulate) {
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    if (accumulate) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) { dinp[i] += vec_gelu_grad(inp[i]) * dout[i]; }
    } else if (dinp16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            dinp[i] = vec_gelu_grad(inp[i]) * dout[i];
            dinp16[i] = matmul_bf16_round_value(dinp[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) { dinp[i] = vec_gelu_grad(inp[i]) * dout[i]; }
    }
    if (accumulate && dinp16 != NULL) { bf16_copy_row(dinp16, dinp, N); }
    phase_end(PHASE_ELEMENTWISE, t_phase, (accumulate ? 16.0 : 12.0) * N, 14.0 * N);
}

static void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    gelu_backward_into(dinp, inp, dout, N, 1);
}

// GPT-2's bf16 activations (above): the fc layer's bias add and GELU with the GELU's input kept in bf16. pre (B,T,OC)
// holds the GEMM's output without its bias; pre16 (B,T,OC) = pre + bias rounded to bf16 (kept for the backward), out16
// (B,T,OC) = gelu of that rounded input, rounded (what the projection's GEMM reads). The forward and the backward
// both start from pre16, so the backward's recompute (gelu_forward_bf16) gives out16's bits again.
static void bias_gelu_forward_bf16(uint16_t* out16, uint16_t* pre16, const float* pre, const float* bias, int B, int T,
                                   int OC) {
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < B * T; r++) {
        const float* x = pre + (size_t)r * OC;
        uint16_t* x16 = pre16 + (size_t)r * OC;
        uint16_t* y16 = out16 + (size_t)r * OC;
        for (int o = 0; o < OC; o++) {
            x16[o] = matmul_bf16_round_value(x[o] + bias[o]);
            y16[o] = matmul_bf16_round_value(vec_gelu_forward(mm_bf16_to_float(x16[o])));
        }
    }
    double N = (double)B * T * OC;
    phase_end(PHASE_ELEMENTWISE, t_phase, 8.0 * N, 9.0 * N); // pre read, pre16 and out16 written
}

// out16 (N) = gelu of the bf16 input inp16 (N), rounded: bias_gelu_forward_bf16's out16 again (the backward's recompute)
static void gelu_forward_bf16(uint16_t* out16, const uint16_t* inp16, size_t N) {
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) { out16[i] = matmul_bf16_round_value(vec_gelu_forward(mm_bf16_to_float(inp16[i]))); }
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * N, 8.0 * N);
}

// dinp (N) = the gradient of the GELU at the bf16 input inp16 (N) for dout (N), written (never added to), and dinp's
// bf16 copy when a GEMM reads it from one
static void gelu_backward_bf16_input(float* dinp, const uint16_t* inp16, const float* dout, size_t N) {
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    if (dinp16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            dinp[i] = vec_gelu_grad(mm_bf16_to_float(inp16[i])) * dout[i];
            dinp16[i] = matmul_bf16_round_value(dinp[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) { dinp[i] = vec_gelu_grad(mm_bf16_to_float(inp16[i])) * dout[i]; }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, (dinp16 != NULL ? 12.0 : 10.0) * N, 14.0 * N);
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

#endif // LLMC_LAYERS_CPU_H
