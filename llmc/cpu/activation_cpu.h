/*
llmc/cpu/activation_cpu.h: the MLP's elementwise activations on the CPU, one driver for all, fp32 with OpenMP
(gelu_cpu.h and relu2_cpu.h name them as llmc/cuda/ does):

    activation_forward(act, out, inp, N)                    out = act(inp)
    activation_backward_into(act, dinp, inp, dout, N, acc)  dinp = act'(inp) * dout, added (acc 1) or written (acc 0:
                                                            dinp's old contents never read)
    ACTIVATION_STORE(y, y16, N, acc, VALUE)                 the loop under both, for any VALUE of the index i

act is ACTIVATION_GELU (GPT-2's tanh GELU, llmc/cpu/vecmath.h's branch-free one, in the form gelu_sigmoid() names) or
ACTIVATION_RELU2 (relu(x)^2, nanochat's). (N) is the MLP's hidden activation, (B,T,4C) or (B,T,FFN). An output a GEMM
reads gets its bf16 copy too when it has one (-p bf16 on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow, bf16_copy_row).
The loop is a macro expanded once per activation, not a function over a function pointer: each activation's arithmetic
stays inline in its OpenMP loop, so it vectorises.
*/
#ifndef LLMC_ACTIVATION_CPU_H
#define LLMC_ACTIVATION_CPU_H

#include <stddef.h>
#include <stdint.h>

#include "matmul.h"
#include "phase_time.h"
#include "vecmath.h"

typedef enum { ACTIVATION_GELU, ACTIVATION_RELU2 } Activation;

// relu(x)^2 and its derivative 2 relu(x)
static inline float relu2_value(float x) {
    float r = x > 0.0f ? x : 0.0f;
    return r * r;
}

static inline float relu2_grad(float x) {
    float r = x > 0.0f ? x : 0.0f;
    return 2.0f * r;
}

// y[i] (N) = VALUE, an expression of i, or y[i] += VALUE when accumulate; y16, when not NULL, y's bf16 copy after
// (written alone, y left unwritten, where y's mirror holds it in bf16 alone: llmc/cpu/matmul.h's matmul_bf16_fp32_kept)
#define ACTIVATION_STORE(y, y16, N, accumulate, VALUE) \
    do { \
        if (accumulate) { \
            _Pragma("omp parallel for schedule(static)") \
            for (size_t i = 0; i < (N); i++) { (y)[i] += (VALUE); } \
            bf16_copy_row((y16), (y), (N)); \
        } else if ((y16) != NULL && !matmul_bf16_fp32_kept((y), (N))) { \
            _Pragma("omp parallel for schedule(static)") \
            for (size_t i = 0; i < (N); i++) { (y16)[i] = matmul_bf16_round_value(VALUE); } \
            matmul_bf16_alone_written((y), (N)); \
        } else if ((y16) != NULL) { \
            _Pragma("omp parallel for schedule(static)") \
            for (size_t i = 0; i < (N); i++) { \
                (y)[i] = (VALUE); \
                (y16)[i] = matmul_bf16_round_value((y)[i]); \
            } \
        } else { \
            _Pragma("omp parallel for schedule(static)") \
            for (size_t i = 0; i < (N); i++) { (y)[i] = (VALUE); } \
        } \
    } while (0)

static void activation_forward(Activation act, float* out, const float* inp, size_t N) {
    // out and inp are (N)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    if (act == ACTIVATION_GELU && gelu_sigmoid()) {
        ACTIVATION_STORE(out, out16, N, 0, vec_gelu_forward_sigmoid(inp[i]));
    } else if (act == ACTIVATION_GELU) {
        ACTIVATION_STORE(out, out16, N, 0, vec_gelu_forward(inp[i]));
    } else {
        ACTIVATION_STORE(out, out16, N, 0, relu2_value(inp[i]));
    }
    // inp read, out written (fp32, its bf16 copy when it has one, or the copy alone)
    double out_bytes = (matmul_bf16_fp32_kept(out, N) ? 4.0 : 0.0) + (out16 != NULL ? 2.0 : 0.0);
    phase_end(PHASE_ELEMENTWISE, t_phase, (4.0 + out_bytes) * N, (act == ACTIVATION_GELU ? 8.0 : 2.0) * N);
}

static void activation_backward_into(Activation act, float* dinp, const float* inp, const float* dout, size_t N,
                                     int accumulate) {
    // dinp, inp and dout are (N)
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    if (act == ACTIVATION_GELU && gelu_sigmoid()) {
        ACTIVATION_STORE(dinp, dinp16, N, accumulate, vec_gelu_grad_sigmoid(inp[i]) * dout[i]);
    } else if (act == ACTIVATION_GELU) {
        ACTIVATION_STORE(dinp, dinp16, N, accumulate, vec_gelu_grad(inp[i]) * dout[i]);
    } else {
        ACTIVATION_STORE(dinp, dinp16, N, accumulate, relu2_grad(inp[i]) * dout[i]);
    }
    // inp and dout read, dinp written (read first when accumulated; fp32, its bf16 copy when it has one, or the copy
    // alone)
    double dinp_bytes = (accumulate ? 8.0 : matmul_bf16_fp32_kept(dinp, N) ? 4.0 : 0.0) + (dinp16 != NULL ? 2.0 : 0.0);
    phase_end(PHASE_ELEMENTWISE, t_phase, (8.0 + dinp_bytes) * N, (act == ACTIVATION_GELU ? 14.0 : 4.0) * N);
}

#endif // LLMC_ACTIVATION_CPU_H
