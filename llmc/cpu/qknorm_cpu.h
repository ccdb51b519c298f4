/*
llmc/cpu/qknorm_cpu.h: QK-norm on the CPU, a weightless RMSNorm of every query and key head, in place, fp32 with
OpenMP; the CPU side of llmc/cuda/qknorm.cuh (same arguments, less the stream). nanochat normalises its q and k
heads after RoPE.

    qknorm_forward(x, rstd, N, row, nheads, HS, eps)   the first nheads heads of HS values of each of the N rows of
        x (N, row) normalised in place: x <- x * rstd, rstd = 1 / sqrt(mean(x^2) + eps) per head, kept in
        rstd (N, nheads) (NULL: not kept)
    qknorm_backward(dx, y, rstd, N, row, nheads, HS)   in place: dx <- rstd * (dx - y * mean(dx * y)) on the same
        heads, y (N, row) the normalised heads the forward left (a weightless norm's gradient needs only its output,
        so the input is not kept)

N = B*T tokens, row = QKV = (NH + 2 NKV) HS, nheads = NH + NKV (the q heads, then the k heads, at the start of
each row). The rows are llmc/cpu/rmsnorm_cpu.h's weightless ones.
*/
#ifndef LLMC_QKNORM_CPU_H
#define LLMC_QKNORM_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "matmul.h"
#include "phase_time.h"
#include "rmsnorm_cpu.h"

static void qknorm_forward(float* x, float* rstd, int N, int row, int nheads, int HS, float eps) {
    // x is (N, row), nheads * HS <= row; rstd is (N, nheads) or NULL
    double t_phase = phase_begin();
    uint16_t* x16 = matmul_bf16_shadow(x, (size_t)N * row);
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < nheads; h++) {
            size_t at = (size_t)n * row + (size_t)h * HS;
            float s = rmsnorm_row_rstd(x + at, eps, HS);
            rmsnorm_apply_row(x + at, x16 != NULL ? x16 + at : NULL, x + at, s, NULL, HS);
            if (rstd != NULL) { rstd[(size_t)n * nheads + h] = s; }
        }
    }
    double heads = (double)N * nheads, values = heads * HS;
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * values + heads), 3.0 * values);
}

static void qknorm_backward(float* dx, const float* y, const float* rstd, int N, int row, int nheads, int HS) {
    // dx, y (the forward's output) are (N, row); rstd is (N, nheads)
    double t_phase = phase_begin();
    uint16_t* dx16 = matmul_bf16_shadow(dx, (size_t)N * row); // the qkv GEMMs' dout: its bf16 copy too
    #pragma omp parallel for
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < nheads; h++) {
            size_t at = (size_t)n * row + (size_t)h * HS;
            rmsnorm_weightless_backward_row(dx + at, dx + at, y + at, rstd[(size_t)n * nheads + h], HS, 0);
        }
        if (dx16 != NULL) { bf16_copy_row(dx16 + (size_t)n * row, dx + (size_t)n * row, (size_t)nheads * HS); }
    }
    double heads = (double)N * nheads, values = heads * HS;
    phase_end(PHASE_NORM, t_phase, 4.0 * (3.0 * values + heads), 5.0 * values); // in place: dx, y read
}

#endif // LLMC_QKNORM_CPU_H
