/*
llmc/cpu/layernorm_cpu.h: LayerNorm on the CPU, fp32 with OpenMP; the CPU side of llmc/cuda/layernorm.cuh. GPT-2's
norm, and the weight-gradient sum every norm with a weight shares (llmc/cpu/rmsnorm_cpu.h's too).

    layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C)
        out (B,T,C) = (inp - mean) * rstd * weight + bias; mean, rstd (B,T) kept for the backward
    layernorm_recompute(out, inp, mean, rstd, weight, bias, B, T, C)
        layernorm_forward's output again from its input and kept statistics (the same bits)
    fused_residual_forward(residual, out, mean, rstd, inp1, inp2, weight, bias, B, T, C)
        residual = inp1 + inp2, then out = layernorm(residual): one pass over each row instead of two
    layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C)
        dinp, dweight, dbias += their gradients
    layernorm_backward_into(..., accumulate)   the same, dinp added (1) or written (0: its old contents never read)
    norm_weight_backward(dweight, dbias, dout, inp, mean, rstd, BT, C)
        dweight += column sums of (inp - mean) * rstd * dout (mean NULL: 0, RMSNorm's), dbias += those of dout
        (dbias NULL: none)
    norm_backward_rows(row, dinp, dout, inp, weight, mean, rstd, BT, C, accumulate)
        every norm's input gradient, a row at a time by the norm's row rule (layernorm_backward_row, RMSNorm's)

weight, bias (C). Reductions run in a fixed order (the same bits for the same inputs and thread count); eps is
llmc/layer_math.h's LAYERNORM_EPS (layernorm_mean, layernorm_rstd). A function whose output a GEMM reads writes
that output's bf16 copy too when it has one (-p bf16 on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow).
*/
#ifndef LLMC_LAYERNORM_CPU_H
#define LLMC_LAYERNORM_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../utils.h"
#include "matmul.h"
#include "phase_time.h"
#include "vecmath.h"

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
static void fused_residual_forward(float* res_out, float* ln_out, float* mean, float* rstd, const float* inp1,
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
// llmc/cpu/rmsnorm_cpu.h): dweight[i] += sum over rows of norm * dout, norm = (inp - mean) * rstd
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

// LayerNorm's row rule (a NormBackwardRow): dx = (dnorm - mean(dnorm) - norm * mean(dnorm * norm)) * s,
// dnorm = d * weight, norm = (x - m) * s
static void layernorm_backward_row(float* dx, const float* d, const float* x, const float* weight, float m, float s,
                                   int C, int accumulate, float* scratch) {
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

// dinp (B,T,C) = the input gradient, added to dinp when accumulate, else written; dweight, dbias += theirs
static void layernorm_backward_into(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                                    const float* weight, const float* mean, const float* rstd, int B, int T, int C,
                                    int accumulate) {
    // dinp, dout, inp are (B,T,C); dweight, dbias, weight are (C); mean, rstd are (B,T)
    int BT = B * T;
    double t_phase = phase_begin();
    norm_backward_rows(layernorm_backward_row, dinp, dout, inp, weight, mean, rstd, BT, C, accumulate);
    norm_weight_backward(dweight, dbias, dout, inp, mean, rstd, BT, C);
    double BTC = (double)BT * C;
    // dout, inp read; dinp updated (or written)
    phase_end(PHASE_NORM, t_phase, 4.0 * ((accumulate ? 4.0 : 3.0) * BTC + 2.0 * BT), 10.0 * BTC);
}

static void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C) {
    layernorm_backward_into(dinp, dweight, dbias, dout, inp, weight, mean, rstd, B, T, C, 1);
}

#endif // LLMC_LAYERNORM_CPU_H
