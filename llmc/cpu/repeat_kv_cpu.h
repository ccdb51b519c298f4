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

// out (B,T,3C) = [q | k repeated | v repeated]: query head h reads key/value head h / (NH/NKV),
// as transformers' repeat_kv
static void repeat_kv_forward(float* out, const float* inp, int B, int T, int NH, int NKV, int HS) {
    // out is (B,T,3C) with C = NH*HS; inp is (B,T,QKV), QKV = (NH + 2 NKV) HS
    size_t C = (size_t)NH * HS, QKV = (size_t)(NH + 2 * NKV) * HS;
    int rep = NH / NKV;
    double t_phase = phase_begin();
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* in = inp + (size_t)bt * QKV;
        float* o = out + (size_t)bt * 3 * C;
        memcpy(o, in, C * sizeof(float));
        for (int h = 0; h < NH; h++) {
            size_t kv = (size_t)(h / rep) * HS;
            memcpy(o + C + (size_t)h * HS, in + C + kv, (size_t)HS * sizeof(float));
            memcpy(o + 2 * C + (size_t)h * HS, in + C + (size_t)NKV * HS + kv, (size_t)HS * sizeof(float));
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * B * T * (double)(QKV + 3 * C), 0.0);
}

// dinp (B,T,QKV) += the gradient of repeat_kv_forward: each key/value head gets the sum of the
// gradients of its NH/NKV copies, in head order
static void repeat_kv_backward(float* dinp, const float* dout, int B, int T, int NH, int NKV, int HS) {
    // dinp is (B,T,QKV), dout is (B,T,3C)
    size_t C = (size_t)NH * HS, QKV = (size_t)(NH + 2 * NKV) * HS;
    int rep = NH / NKV;
    double t_phase = phase_begin();
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        float* d = dinp + (size_t)bt * QKV;
        const float* g = dout + (size_t)bt * 3 * C;
        for (size_t i = 0; i < C; i++) { d[i] += g[i]; }
        for (int j = 0; j < NKV; j++) {
            float* dk = d + C + (size_t)j * HS;
            float* dv = d + C + (size_t)NKV * HS + (size_t)j * HS;
            for (int r = 0; r < rep; r++) {
                const float* gk = g + C + (size_t)(j * rep + r) * HS;
                const float* gv = g + 2 * C + (size_t)(j * rep + r) * HS;
                for (int i = 0; i < HS; i++) {
                    dk[i] += gk[i];
                    dv[i] += gv[i];
                }
            }
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 4.0 * B * T * (double)(2 * QKV + 3 * C), (double)B * T * 3 * C);
}

#endif // LLMC_REPEAT_KV_CPU_H
