/*
llmc/cpu/repeat_kv_cpu.h: grouped-query attention's key/value repetition on the CPU, fp32 with OpenMP; the CPU side
of llmc/cuda/repeat_kv.cuh. The trainers call llmc/cpu/attention_cpu.h's attention_gqa_* instead, which read the
key/value heads where they are; dev/test/test_attention_cpu.c checks those against these.

    repeat_kv_forward(out, inp, B, T, NH, NKV, HS)     out (B,T,3C) = [q | k repeated | v repeated] from
                                                       inp (B,T,QKV): query head h reads key/value head h / (NH/NKV)
    repeat_kv_backward(dinp, dout, B, T, NH, NKV, HS)  dinp (B,T,QKV) += the gradient: each key/value head the sum
                                                       of its NH/NKV copies' gradients, in head order

C = NH HS, QKV = (NH + 2 NKV) HS (q heads, then k heads, then v heads).
*/
#ifndef LLMC_REPEAT_KV_CPU_H
#define LLMC_REPEAT_KV_CPU_H

#include <stddef.h>
#include <string.h>

#include "phase_time.h"

// n floats of one head (or of q): rep = grouped (forward), or grouped += rep (backward, rep holding gradients)
static inline void repeat_kv_move(float* rep, float* grouped, size_t n, int backward) {
    if (backward) {
        for (size_t i = 0; i < n; i++) { grouped[i] += rep[i]; }
    } else {
        memcpy(rep, grouped, n * sizeof(float));
    }
}

// The walk both directions take: at each position, rep (B,T,3C) holds q, then per query head h the k and the v of
// key/value head h / (NH/NKV) of grouped (B,T,QKV), as transformers' repeat_kv. Forward copies grouped (only read)
// into rep; backward adds rep's gradients into grouped's, each key/value head's copies in head order.
static void repeat_kv_walk(float* rep, float* grouped, int B, int T, int NH, int NKV, int HS, int backward) {
    size_t C = (size_t)NH * HS, QKV = (size_t)(NH + 2 * NKV) * HS;
    int group = NH / NKV;
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float* g = grouped + (size_t)bt * QKV;
        float* r = rep + (size_t)bt * 3 * C;
        repeat_kv_move(r, g, C, backward);
        for (int h = 0; h < NH; h++) {
            size_t kv = (size_t)(h / group) * HS;
            repeat_kv_move(r + C + (size_t)h * HS, g + C + kv, (size_t)HS, backward);
            repeat_kv_move(r + 2 * C + (size_t)h * HS, g + C + (size_t)NKV * HS + kv, (size_t)HS, backward);
        }
    }
}

// out (B,T,3C) = [q | k repeated | v repeated] from inp (B,T,QKV), QKV = (NH + 2 NKV) HS, C = NH*HS
static void repeat_kv_forward(float* out, const float* inp, int B, int T, int NH, int NKV, int HS) {
    double t_phase = phase_begin();
    repeat_kv_walk(out, (float*)inp, B, T, NH, NKV, HS, 0);  // the forward only reads inp
    double C = (double)NH * HS, QKV = (double)(NH + 2 * NKV) * HS;
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * B * T * (QKV + 3 * C), 0.0);
}

// dinp (B,T,QKV) += the gradient of repeat_kv_forward for dout (B,T,3C): each key/value head gets the sum of the
// gradients of its NH/NKV copies, in head order
static void repeat_kv_backward(float* dinp, const float* dout, int B, int T, int NH, int NKV, int HS) {
    double t_phase = phase_begin();
    repeat_kv_walk((float*)dout, dinp, B, T, NH, NKV, HS, 1);  // the backward only reads dout
    double C = (double)NH * HS, QKV = (double)(NH + 2 * NKV) * HS;
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * B * T * (2 * QKV + 3 * C), (double)B * T * 3 * C);
}

#endif // LLMC_REPEAT_KV_CPU_H
