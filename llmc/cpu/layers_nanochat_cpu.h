/*
llmc/cpu/layers_nanochat_cpu.h: the layers nanochat's GPT adds to llmc/cpu/layers_cpu.h and
llmc/cpu/layers_llama_cpu.h, fp32 with OpenMP, one forward and one backward function each with its shapes in
a comment. The math is transformers' NanoChatForCausalLM's:

    rmsnorm_plain_forward / rmsnorm_plain_backward   x * rsqrt(mean(x^2) + eps), no weight, over groups of D
                                                     values at the start of each row (a whole row: the
                                                     residual stream's norms; the heads: QK-norm);
                                                     rmsnorm_plain_recompute: the forward's output again
                                                     from its input and kept rstd
    qk_norm_forward / qk_norm_backward               the weightless RMSNorm of every q and k head, in place
    nanochat_rope_forward / nanochat_rope_backward   RoPE with NanoChat's rotate_half, cat(x2, -x1): Llama's
                                                     rotation by the opposite angle (layers_llama_cpu.h's rope_rotate)
    relu2_forward / relu2_backward                   relu(x)^2
    softcap_forward / softcap_backward               cap * tanh(z / cap), in place on the logits (generate's; the
                                                     trainer's classifier caps each chunk of logits in its own pass,
                                                     llmc/cpu/classifier_cpu.h, the same arithmetic)

The weightless norms keep their output and rstd only: with y = x * rstd, dx = rstd (dy - y mean(dy y)) needs
no x, so QK-norm runs in place on the qkv activation. Backward functions accumulate (+=) into their
gradients (their _into forms, rmsnorm_plain_backward_into and relu2_backward_into, may write them instead), except
the in-place ones (QK-norm, RoPE, softcap), which turn the output's gradient into the input's where it stands.

Shapes: B batch, T time, C channels, NH query heads, NKV key/value heads, HS = C / NH,
QKV = (NH + 2 NKV) HS (q heads, then k heads, then v heads), FFN, V vocab.

A function that writes a tensor with a bf16 copy (-p bf16 on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow)
writes the copy too, in the same pass (llmc/cpu/layers_cpu.h's bf16_copy_row).
*/
#ifndef LLMC_LAYERS_NANOCHAT_CPU_H
#define LLMC_LAYERS_NANOCHAT_CPU_H

#include <math.h>
#include <stddef.h>

#include "../utils.h"
#include "layers_cpu.h"        // llmc/cpu/vecmath.h
#include "layers_llama_cpu.h"  // rope_init, rope_rotate
#include "phase_time.h"

// one group of a weightless RMSNorm from its 1/rms s: o (D) = x * s, and o16 (D) its bf16 copy (NULL: none). The
// forward pass and the backward's recompute share it, so both give the same bits; o may be x.
static inline void rmsnorm_plain_apply(float* o, uint16_t* o16, const float* x, float s, int D) {
    for (int i = 0; i < D; i++) { o[i] = x[i] * s; }
    bf16_copy_row(o16, o, (size_t)D);
}

// out = inp * rstd in each of the first `groups` groups of D values of every row, rstd = 1 / sqrt(mean(x^2) + eps)
// per group (kept in rstd when it is not NULL); out may be inp
static void rmsnorm_plain_forward(float* out, float* rstd, const float* inp, float eps, int BT, int row, int groups, int D) {
    // out, inp are (BT, row), row >= groups * D; rstd is (BT, groups)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)BT * row);
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        for (int g = 0; g < groups; g++) {
            size_t at = (size_t)bt * row + (size_t)g * D;
            const float* x = inp + at;
            float s = 1.0f / sqrtf(vec_dot3(x, NULL, x, D) / D + eps);
            rmsnorm_plain_apply(out + at, out16 != NULL ? out16 + at : NULL, x, s, D);
            if (rstd != NULL) { rstd[(size_t)bt * groups + g] = s; }
        }
    }
    double n = (double)BT * groups * D;
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * n + (double)BT * groups), 3.0 * n);
}

// out = rmsnorm_plain_forward's output again, from its input and the rstd it kept (the same bits): the backward's,
// for a norm whose output the forward did not keep (out is not inp)
static void rmsnorm_plain_recompute(float* out, const float* inp, const float* rstd, int BT, int row, int groups, int D) {
    // out, inp are (BT, row); rstd is (BT, groups)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)BT * row);
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        for (int g = 0; g < groups; g++) {
            size_t at = (size_t)bt * row + (size_t)g * D;
            rmsnorm_plain_apply(out + at, out16 != NULL ? out16 + at : NULL, inp + at, rstd[(size_t)bt * groups + g], D);
        }
    }
    double n = (double)BT * groups * D;
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * n + (double)BT * groups), n);
}

// one group's input gradient from its output y and rstd s: rstd (dy - y mean(dy y)), added to dx (accumulate)
// or written over it (dx may be dy then: the dot product is taken first)
static inline void rmsnorm_plain_group_backward(float* dx, const float* dy, const float* y, float s, int D, int accumulate) {
    float dot = vec_dot3(dy, NULL, y, D) / D;
    for (int i = 0; i < D; i++) {
        float g = s * (dy[i] - y[i] * dot);
        dx[i] = accumulate ? dx[i] + g : g;
    }
}

// dinp = the gradient of rmsnorm_plain_forward from its output out and rstd, added to dinp when accumulate, else
// written
static void rmsnorm_plain_backward_into(float* dinp, const float* dout, const float* out, const float* rstd, int BT,
                                        int row, int groups, int D, int accumulate) {
    // dinp, dout, out are (BT, row); rstd is (BT, groups)
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, (size_t)BT * row);
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        for (int g = 0; g < groups; g++) {
            size_t at = (size_t)bt * row + (size_t)g * D;
            if (accumulate) {
                rmsnorm_plain_group_backward(dinp + at, dout + at, out + at, rstd[(size_t)bt * groups + g], D, 1);
            } else {
                rmsnorm_plain_group_backward(dinp + at, dout + at, out + at, rstd[(size_t)bt * groups + g], D, 0);
            }
            if (dinp16 != NULL) { bf16_copy_row(dinp16 + at, dinp + at, (size_t)D); }
        }
    }
    double n = (double)BT * groups * D;
    // dout, out read; dinp updated (or written)
    phase_end(PHASE_NORM, t_phase, 4.0 * ((accumulate ? 4.0 : 3.0) * n + (double)BT * groups), 5.0 * n);
}

// dinp += the gradient of rmsnorm_plain_forward from its output out and rstd
static void rmsnorm_plain_backward(float* dinp, const float* dout, const float* out, const float* rstd, int BT, int row,
                                   int groups, int D) {
    rmsnorm_plain_backward_into(dinp, dout, out, rstd, BT, row, groups, D, 1);
}

// QK-norm: the NH query and NKV key heads of qkv normalised in place (after RoPE), their rstd kept (NULL: not kept)
static void qk_norm_forward(float* qkv, float* rstd, float eps, int B, int T, int NH, int NKV, int HS) {
    // qkv is (B,T,QKV); rstd is (B,T,NH+NKV)
    rmsnorm_plain_forward(qkv, rstd, qkv, eps, B * T, (NH + 2 * NKV) * HS, NH + NKV, HS);
}

// in place: dqkv's q and k heads, the gradient of the normalised heads, become that of their inputs
static void qk_norm_backward(float* dqkv, const float* qkv, const float* rstd, int B, int T, int NH, int NKV, int HS) {
    // dqkv, qkv (the forward's output) are (B,T,QKV); rstd is (B,T,NH+NKV)
    int row = (NH + 2 * NKV) * HS, groups = NH + NKV;
    double t_phase = phase_begin();
    uint16_t* dqkv16 = matmul_bf16_shadow(dqkv, (size_t)B * T * row); // the qkv GEMMs' dout: its bf16 copy too
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        for (int g = 0; g < groups; g++) {
            size_t at = (size_t)bt * row + (size_t)g * HS;
            rmsnorm_plain_group_backward(dqkv + at, dqkv + at, qkv + at, rstd[(size_t)bt * groups + g], HS, 0);
        }
        if (dqkv16 != NULL) { bf16_copy_row(dqkv16 + (size_t)bt * row, dqkv + (size_t)bt * row, (size_t)groups * HS); }
    }
    double n = (double)B * T * groups * HS;
    phase_end(PHASE_NORM, t_phase, 4.0 * (3.0 * n + (double)B * T * groups), 5.0 * n); // in place: dqkv, qkv read
}

// NanoChat's RoPE on the first nheads heads of every row, in place: x' = x cos + rot(x) sin with rot(x) =
// cat(x2, -x1), i.e. (x1, x2) <- (x1 cos + x2 sin, x2 cos - x1 sin): Llama's rotation by -angle
static void nanochat_rope_forward(float* x, const float* cos_table, const float* sin_table, int B, int T, int row,
                                  int nheads, int HS) {
    // x is (B,T,row), heads HS wide at the start of each row; tables (maxT, HS/2) (layers_llama_cpu.h's rope_init)
    rope_rotate(x, cos_table, sin_table, B, T, row, nheads, HS, -1.0f);
}

// the transpose of nanochat_rope_forward (the rotation by +angle), in place on the gradient dx (B,T,row)
static void nanochat_rope_backward(float* dx, const float* cos_table, const float* sin_table, int B, int T, int row,
                                   int nheads, int HS) {
    rope_rotate(dx, cos_table, sin_table, B, T, row, nheads, HS, 1.0f);
}

// out = relu(inp)^2
static void relu2_forward(float* out, const float* inp, size_t N) {
    // out, inp are (N) = (B,T,FFN)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    if (out16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            out[i] = r * r;
            out16[i] = matmul_bf16_round_value(out[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            out[i] = r * r;
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 8.0 * N, 2.0 * N);
}

// dinp (N) = the gradient of relu2_forward for dout (N), added to dinp when accumulate, else written
static void relu2_backward_into(float* dinp, const float* inp, const float* dout, size_t N, int accumulate) {
    // dinp, inp, dout are (N) = (B,T,FFN); d relu(x)^2 / dx = 2 relu(x)
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, N);
    if (accumulate) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            dinp[i] += 2.0f * r * dout[i];
        }
        bf16_copy_row(dinp16, dinp, N);
    } else if (dinp16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            dinp[i] = 2.0f * r * dout[i];
            dinp16[i] = matmul_bf16_round_value(dinp[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float r = inp[i] > 0.0f ? inp[i] : 0.0f;
            dinp[i] = 2.0f * r * dout[i];
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, (accumulate ? 16.0 : 12.0) * N, 4.0 * N);
}

static void relu2_backward(float* dinp, const float* inp, const float* dout, size_t N) {
    relu2_backward_into(dinp, inp, dout, N, 1);
}

// the logit softcap in place: z <- cap * tanh(z / cap) (cap > 0; the caller skips it for cap 0 = none)
static void softcap_forward(float* logits, float cap, size_t N) {
    // logits are (N) = (B,T,V)
    float inv = 1.0f / cap;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) { logits[i] = cap * vec_tanhf(logits[i] * inv); }
}

// in place: dlogits, the gradient of the capped logits, becomes that of the raw ones, from the capped logits
static void softcap_backward(float* dlogits, const float* capped, float cap, size_t N) {
    // dlogits, capped are (N) = (B,T,V); d cap tanh(z / cap) / dz = 1 - tanh^2, tanh = capped / cap
    float inv = 1.0f / cap;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        float t = capped[i] * inv;
        dlogits[i] *= 1.0f - t * t;
    }
}

#endif // LLMC_LAYERS_NANOCHAT_CPU_H
