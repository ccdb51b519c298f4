/*
llmc/cpu/residual_cpu.h: the residual add on the CPU, elementwise, fp32 with OpenMP. (The GPU has no kernel of its
own for it: llmc/cuda/layernorm.cuh and rmsnorm.cuh fuse it into the norm that follows, as
llmc/cpu/layernorm_cpu.h's fused_residual_forward does for GPT-2.)

    residual_forward(out, inp1, inp2, N)     out = inp1 + inp2
    residual_backward(dinp1, dinp2, dout, N) dinp1 += dout, dinp2 += dout

(N) = (B,T,C).
*/
#ifndef LLMC_RESIDUAL_CPU_H
#define LLMC_RESIDUAL_CPU_H

#include <stddef.h>

#include "phase_time.h"

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

#endif // LLMC_RESIDUAL_CPU_H
