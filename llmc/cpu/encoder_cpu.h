/*
llmc/cpu/encoder_cpu.h: the token (+ position) embedding on the CPU, fp32 with OpenMP; the CPU side of
llmc/cuda/encoder.cuh, with its rule: a NULL position table is the token embedding alone (Llama 3, nanochat).

    encoder_forward(out, inp, wte, wpe, B, T, C)      out (B,T,C) = wte[inp[b,t]] + wpe[t] (wpe NULL: wte[inp[b,t]])
    encoder_backward(dwte, dwpe, dout, inp, B, T, C)  dwte[inp[b,t]] += dout[b,t], dwpe[t] += dout[b,t] (dwpe NULL:
                                                      the token rows only)

inp (B,T) token ids, wte (Vp,C), wpe (maxT,C). The backward is deterministic: each thread owns a slice of the
channels, so rows hit by the same token never race, and every element sums over (b,t) in the same order.
*/
#ifndef LLMC_ENCODER_CPU_H
#define LLMC_ENCODER_CPU_H

#include <stddef.h>
#include <string.h>

#include "phase_time.h"

static void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    // out is (B,T,C), inp is (B,T) token ids, wte is (Vp,C), wpe is (maxT,C) or NULL
    double t_phase = phase_begin();
    if (wpe == NULL) { // the token rows copied
        #pragma omp parallel for
        for (int bt = 0; bt < B * T; bt++) {
            memcpy(out + (size_t)bt * C, wte + (size_t)inp[bt] * C, (size_t)C * sizeof(float));
        }
        phase_end(PHASE_EMBEDDING, t_phase, 8.0 * B * T * C, 0.0);
        return;
    }
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
    // dwte is (Vp,C), dwpe is (maxT,C) or NULL, dout is (B,T,C)
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float* d = dout + (size_t)bt * C;
            float* dwte_ix = dwte + (size_t)inp[bt] * C;
            for (int i = c0; i < c1; i++) { dwte_ix[i] += d[i]; }
            if (dwpe != NULL) {
                float* dwpe_t = dwpe + (size_t)(bt % T) * C;
                for (int i = c0; i < c1; i++) { dwpe_t[i] += d[i]; }
            }
        }
    }
    double BTC = (double)B * T * C;
    if (dwpe == NULL) {
        phase_end(PHASE_EMBEDDING, t_phase, 12.0 * BTC, BTC); // dout read, rows updated
    } else {
        phase_end(PHASE_EMBEDDING, t_phase, 4.0 * (3.0 * BTC + 2.0 * T * C), 2.0 * BTC);
    }
}

#endif // LLMC_ENCODER_CPU_H
