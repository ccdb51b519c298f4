/*
llmc/cpu/rmsnorm_cpu.h: RMSNorm on the CPU, fp32 with OpenMP; the CPU side of llmc/cuda/rmsnorm.cuh, with its rule:
a NULL weight is the weightless norm (nanochat's), scaled by 1. The math is transformers' LlamaRMSNorm's.

    rmsnorm_forward(out, rstd, inp, weight, eps, B, T, C)
        out (B,T,C) = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) per row (B,T) (NULL: not kept);
        out may be inp
    fused_residual_rmsnorm_forward(res_out, out, rstd, inp1, inp2, weight, eps, B, T, C)
        res_out = inp1 + inp2, then out = rmsnorm(res_out): one pass over each row instead of two (the same bits)
    rmsnorm_recompute(out, inp, rstd, weight, B, T, C)
        rmsnorm_forward's output again from its input and kept rstd (the same bits): the backward's, for a norm
        whose output only GEMMs read and the forward did not keep
    rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, B, T, C)
        dinp += rstd * (dnorm - norm * mean(dnorm * norm)), dnorm = dout * weight, norm = inp * rstd;
        dweight += column sums of dout * norm (weight NULL: dweight NULL, none)
    rmsnorm_backward_into(..., accumulate)   the same, dinp added (1) or written (0: its old contents never read)

weight, dweight (C). The weightless backward takes the gradient from the normalised row y = inp * rstd, rebuilt
with the forward's arithmetic: rstd (dy - y mean(dy y)) (rmsnorm_weightless_backward_row, which QK-norm,
llmc/cpu/qknorm_cpu.h, runs on the heads in place). Reductions run in a fixed order (the same bits for the same
inputs and thread count). A function whose output a GEMM reads writes that output's bf16 copy too when it has one
(-p bf16 on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow).
*/
#ifndef LLMC_RMSNORM_CPU_H
#define LLMC_RMSNORM_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../utils.h"
#include "layernorm_cpu.h"  // norm_backward
#include "matmul.h"
#include "phase_time.h"
#include "residual_cpu.h"
#include "vecmath.h"

// 1 / rms of one row x (C): 1 / sqrt(mean(x^2) + eps)
static inline float rmsnorm_row_rstd(const float* x, float eps, int C) {
    return 1.0f / sqrtf(vec_dot3(x, NULL, x, C) / C + eps);
}

// one row of an RMSNorm from its 1/rms s: o (C) = weight * (x * s) (weight NULL: x * s), and o16 (C) its bf16 copy
// (NULL: none; o NULL: the copy alone). The forward pass and the backward's recompute share it, so both give the same bits; o may be x.
static inline void rmsnorm_apply_row(float* o, uint16_t* o16, const float* x, float s, const float* weight, int C) {
    if (o == NULL) { // the bf16 copy alone
#if MATMUL_X86
        if (mm_bf16_cvt_on()) { // (the row as floats, 256 at a time, then rounded by AVX512-BF16's conversion: the same bits)
            float y[256];
            for (int i0 = 0; i0 < C; i0 += 256) {
                int n = C - i0 < 256 ? C - i0 : 256;
                if (weight != NULL) {
                    for (int i = 0; i < n; i++) { y[i] = weight[i0 + i] * (x[i0 + i] * s); }
                } else {
                    for (int i = 0; i < n; i++) { y[i] = x[i0 + i] * s; }
                }
                mm_round_bf16_row(o16 + i0, y, (size_t)n);
            }
            return;
        }
#endif
        if (weight != NULL) {
            for (int i = 0; i < C; i++) { o16[i] = matmul_bf16_round_value(weight[i] * (x[i] * s)); }
        } else {
            for (int i = 0; i < C; i++) { o16[i] = matmul_bf16_round_value(x[i] * s); }
        }
        return;
    }
    if (weight != NULL) {
        for (int i = 0; i < C; i++) { o[i] = weight[i] * (x[i] * s); }
    } else {
        for (int i = 0; i < C; i++) { o[i] = x[i] * s; }
    }
    bf16_copy_row(o16, o, (size_t)C);
}

// out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) per row (kept for the backward when not NULL)
static void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float eps, int B, int T, int C) {
    // out, inp are (B,T,C); rstd is (B,T) or NULL; weight is (C) or NULL
    double t_phase = phase_begin();
    size_t N = (size_t)B * T * C;
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    float* out32 = matmul_bf16_fp32_kept(out, N) ? out : NULL; // (NULL: the bf16 copy alone)
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        float s = rmsnorm_row_rstd(x, eps, C);
        size_t at = (size_t)bt * C;
        rmsnorm_apply_row(out32 != NULL ? out32 + at : NULL, out16 != NULL ? out16 + at : NULL, x, s, weight, C);
        if (rstd != NULL) { rstd[bt] = s; }
    }
    matmul_bf16_alone_written(out, N);
    double BTC = (double)N;
    // inp read; out (fp32, its bf16 copy, or the copy alone) and rstd written
    phase_end(PHASE_NORM, t_phase, (4.0 + norm_output_bytes(out32, out16)) * BTC + 4.0 * B * T,
              (weight != NULL ? 4.0 : 3.0) * BTC);
}

// out (B,T,C) = rmsnorm_forward's output again, from its input and the rstd it kept (the same bits)
static void rmsnorm_recompute(float* out, const float* inp, const float* rstd, const float* weight, int B, int T, int C) {
    double t_phase = phase_begin();
    size_t N = (size_t)B * T * C;
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    float* out32 = matmul_bf16_fp32_kept(out, N) ? out : NULL; // (NULL: the bf16 copy alone)
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        size_t at = (size_t)bt * C;
        rmsnorm_apply_row(out32 != NULL ? out32 + at : NULL, out16 != NULL ? out16 + at : NULL, inp + at, rstd[bt],
                          weight, C);
    }
    matmul_bf16_alone_written(out, N);
    double BTC = (double)N;
    phase_end(PHASE_NORM, t_phase, (4.0 + norm_output_bytes(out32, out16)) * BTC + 4.0 * B * T,
              (weight != NULL ? 2.0 : 1.0) * BTC);
}

// The residual add fused with the RMSNorm that reads it (the decoder's residual stream into its next norm): res_out =
// inp1 + inp2, then out = rmsnorm(res_out), one pass over each row where residual_forward then rmsnorm_forward take
// two (the same arithmetic on the same stored values, so their bits). LLMC_NORM=rows: those two calls.
static void fused_residual_rmsnorm_forward(float* res_out, float* out, float* rstd, const float* inp1, const float* inp2,
                                           const float* weight, float eps, int B, int T, int C) {
    // res_out, out, inp1, inp2 are (B,T,C); rstd is (B,T); weight is (C) or NULL
    size_t N = (size_t)B * T * C;
    if (norm_kernel() == NORM_ROWS) {
        residual_forward(res_out, inp1, inp2, N);
        rmsnorm_forward(out, rstd, res_out, weight, eps, B, T, C);
        return;
    }
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    float* out32 = matmul_bf16_fp32_kept(out, N) ? out : NULL; // (NULL: the bf16 copy alone)
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        size_t at = (size_t)bt * C;
        const float* a = inp1 + at;
        const float* b = inp2 + at;
        float* x = res_out + at;
        for (int i = 0; i < C; i++) { x[i] = a[i] + b[i]; }
        float s = rmsnorm_row_rstd(x, eps, C);
        rmsnorm_apply_row(out32 != NULL ? out32 + at : NULL, out16 != NULL ? out16 + at : NULL, x, s, weight, C);
        rstd[bt] = s;
    }
    matmul_bf16_alone_written(out, N);
    // inp1, inp2 read; the residual, out (fp32, its bf16 copy, or the copy alone) and rstd written
    phase_end(PHASE_NORM, t_phase, (12.0 + norm_output_bytes(out32, out16)) * N + 4.0 * B * T,
              (weight != NULL ? 5.0 : 4.0) * N);
}

// one weightless row's input gradient from its output y and rstd s: rstd (dy - y mean(dy y)), added to dx
// (accumulate) or written over it (dx may be dy then: the dot product is taken first)
static inline void rmsnorm_weightless_backward_row(float* dx, const float* dy, const float* y, float s, int D,
                                                   int accumulate) {
    float dot = vec_dot3(dy, NULL, y, D) / D;
    for (int i = 0; i < D; i++) {
        float g = s * (dy[i] - y[i] * dot);
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

// the weightless norm's row rule (a NormBackwardRow, llmc/cpu/layernorm_cpu.h): the row's output y rebuilt from x
// and s into scratch (rmsnorm_apply_row, the forward's bits), then rmsnorm_weightless_backward_row
static void rmsnorm_weightless_backward_from_input(float* dx, const float* d, const float* x, const float* weight,
                                                   float m, float s, int C, int accumulate, float* scratch) {
    rmsnorm_apply_row(scratch, NULL, x, s, NULL, C);
    if (accumulate) {
        rmsnorm_weightless_backward_row(dx, d, scratch, s, C, 1);
    } else {
        rmsnorm_weightless_backward_row(dx, d, scratch, s, C, 0);
    }
}

// RMSNorm's row rule with a weight (a NormBackwardRow): dx = s * (dnorm - norm * mean(dnorm * norm)),
// dnorm = d * weight, norm = x * s
static void rmsnorm_backward_row(float* dx, const float* d, const float* x, const float* weight, float m, float s,
                                 int C, int accumulate, float* scratch) {
    float dot = vec_dot3(weight, d, x, C) * s / C;
    if (accumulate) {
        for (int i = 0; i < C; i++) { dx[i] += s * (weight[i] * d[i] - x[i] * s * dot); }
    } else {
        for (int i = 0; i < C; i++) { dx[i] = s * (weight[i] * d[i] - x[i] * s * dot); }
    }
}

// dinp (B,T,C) = the input gradient, added to dinp when accumulate, else written; dweight += its gradient (weight
// NULL: the weightless norm, dweight NULL)
static void rmsnorm_backward_into(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                  const float* rstd, int B, int T, int C, int accumulate) {
    // dinp, dout, inp are (B,T,C); dweight, weight are (C) or NULL; rstd is (B,T)
    int BT = B * T;
    double t_phase = phase_begin();
    // (llmc/cpu/layernorm_cpu.h's norm_backward: the row rule over the rows, and dweight[i] += sum over rows of
    // dout * norm, with no mean and no bias, by the kernel LLMC_NORM chose)
    if (weight == NULL) {
        norm_backward(rmsnorm_weightless_backward_from_input, 0, dinp, NULL, NULL, dout, inp, NULL, NULL, rstd, BT, C,
                      accumulate);
    } else {
        norm_backward(rmsnorm_backward_row, 0, dinp, dweight, NULL, dout, inp, weight, NULL, rstd, BT, C, accumulate);
    }
    // dout, inp read; dinp updated (or written), and its bf16 copy written when it has one
    double n = (double)BT * C;
    phase_end(PHASE_NORM, t_phase, 4.0 * ((accumulate ? 4.0 : 3.0) * n + BT) + norm_copy_bytes(dinp, n),
              (weight != NULL ? 10.0 : 6.0) * n);
}

static void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                             const float* rstd, int B, int T, int C) {
    rmsnorm_backward_into(dinp, dweight, dout, inp, weight, rstd, B, T, C, 1);
}

#endif // LLMC_RMSNORM_CPU_H
