/*
llmc/cpu/qknorm_cpu.h: QK-norm on the CPU, an RMSNorm of every query and key head, in place, fp32 with OpenMP; the
CPU side of llmc/cuda/qknorm.cuh, with rmsnorm's rule: a NULL weight is the weightless norm (nanochat's, after
RoPE), a weight (HS) scales every head it normalises (Qwen3's q_norm on its q heads, k_norm on its k heads, before
RoPE: one call for each).

    qknorm_forward(x, rstd, inp, weight, N, row, nheads, HS, eps)   the first nheads heads of HS values of each of
        the N rows of x (N, row) normalised in place: x <- weight * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) per
        head, kept in rstd (N, nheads) (NULL: not kept); with a weight, inp (N, nheads HS) receives the heads as they
        were (NULL: not kept), which the weighted backward reads
    qknorm_backward(dx, dweight, y, inp, weight, rstd, N, row, nheads, HS)   in place on the same heads: dx, the
        gradient of the normalised heads, becomes that of their input. Weightless (weight NULL): rstd * (dx - y *
        mean(dx * y)) from y (N, row), the normalised heads the forward left (so the input is not kept). Weighted:
        rmsnorm_backward's row from the kept input inp, and dweight (HS) += the weight's gradient, summed over the
        rows and heads in order (the same bits for any thread count)

N = B*T tokens, row = QKV = (NH + 2 NKV) HS; nanochat passes nheads = NH + NKV (the q heads, then the k heads, at the
start of each row), Qwen3 x at the q heads with nheads = NH, then x + NH HS with nheads = NKV. The weightless rows are
llmc/cpu/rmsnorm_cpu.h's.
*/
#ifndef LLMC_QKNORM_CPU_H
#define LLMC_QKNORM_CPU_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "matmul.h"
#include "phase_time.h"
#include "rmsnorm_cpu.h"

static void qknorm_forward(float* x, float* rstd, float* inp, const float* weight, int N, int row, int nheads, int HS,
                           float eps) {
    // x is (N, row), nheads * HS <= row; rstd is (N, nheads) or NULL; inp is (N, nheads * HS) or NULL; weight (HS)
    double t_phase = phase_begin();
    // the span the heads cover ((N - 1) rows and the last one's heads: x may start inside a row, Qwen3's k heads)
    uint16_t* x16 = matmul_bf16_shadow(x, (size_t)(N - 1) * row + (size_t)nheads * HS);
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        if (weight != NULL && inp != NULL) {
            memcpy(inp + (size_t)n * nheads * HS, x + (size_t)n * row, (size_t)nheads * HS * sizeof(float));
        }
        for (int h = 0; h < nheads; h++) {
            size_t at = (size_t)n * row + (size_t)h * HS;
            float s = rmsnorm_row_rstd(x + at, eps, HS);
            rmsnorm_apply_row(x + at, x16 != NULL ? x16 + at : NULL, x + at, s, weight, HS);
            if (rstd != NULL) { rstd[(size_t)n * nheads + h] = s; }
        }
    }
    double heads = (double)N * nheads, values = heads * HS;
    // x read and written (and copied to inp for the backward), rstd written; x's bf16 copy when it has one
    phase_end(PHASE_NORM, t_phase, 4.0 * ((weight != NULL && inp != NULL ? 3.0 : 2.0) * values + heads) +
              (x16 != NULL ? 2.0 * values : 0.0), 3.0 * values);
}

static void qknorm_backward(float* dx, float* dweight, const float* y, const float* inp, const float* weight,
                            const float* rstd, int N, int row, int nheads, int HS) {
    // dx, y (the forward's output) are (N, row); inp is (N, nheads * HS); rstd is (N, nheads); weight, dweight (HS)
    double t_phase = phase_begin();
    // the qkv GEMMs' dout: its bf16 copy too, over the span the heads cover (as the forward's)
    uint16_t* dx16 = matmul_bf16_shadow(dx, (size_t)(N - 1) * row + (size_t)nheads * HS);
    if (weight != NULL) {
        // the weight's gradient first, from dx as it came: dweight[i] += dy[i] * (x[i] * rstd), threads own columns
        #pragma omp parallel for schedule(static)
        for (int i0 = 0; i0 < HS; i0 += 16) {
            int i1 = i0 + 16 < HS ? i0 + 16 : HS;
            for (int n = 0; n < N; n++) {
                for (int h = 0; h < nheads; h++) {
                    const float* xh = inp + ((size_t)n * nheads + h) * HS;
                    const float* dy = dx + (size_t)n * row + (size_t)h * HS;
                    float s = rstd[(size_t)n * nheads + h];
                    for (int i = i0; i < i1; i++) { dweight[i] += dy[i] * (xh[i] * s); }
                }
            }
        }
    }
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < nheads; h++) {
            size_t at = (size_t)n * row + (size_t)h * HS;
            float s = rstd[(size_t)n * nheads + h];
            if (weight == NULL) {
                rmsnorm_weightless_backward_row(dx + at, dx + at, y + at, s, HS, 0);
                continue;
            }
            // rmsnorm_backward's row, in place (dx written over dy: its dot product is taken first)
            rmsnorm_backward_row(dx + at, dx + at, inp + ((size_t)n * nheads + h) * HS, weight, 0.0f, s, HS, 0, NULL);
        }
        if (dx16 != NULL) { bf16_copy_row(dx16 + (size_t)n * row, dx + (size_t)n * row, (size_t)nheads * HS); }
    }
    double heads = (double)N * nheads, values = heads * HS;
    // in place: dx and y (or inp) read, dx written, and its bf16 copy when it has one (the compulsory traffic: the
    // weight's pass reads dx and inp once more, which a single pass would not)
    phase_end(PHASE_NORM, t_phase, 4.0 * (3.0 * values + heads) + (dx16 != NULL ? 2.0 * values : 0.0),
              (weight != NULL ? 8.0 : 5.0) * values);
}

#endif // LLMC_QKNORM_CPU_H
