/*
llmc/cpu/layers_llama_cpu.h: the layers Llama 3 adds to llmc/cpu/layers_cpu.h, fp32 with OpenMP, one
forward and one backward function each with its shapes in a comment. Backward functions
accumulate (+=) into their gradients, and their _into forms (rmsnorm_backward_into,
swiglu_backward_into) may write the input gradients instead (=, the old contents never read);
reductions run in a fixed order (same bits for the same inputs and thread count). The math is
transformers' LlamaForCausalLM's:

    embedding_forward / embedding_backward     token embedding only (no positions)
    rmsnorm_forward / rmsnorm_backward         x / sqrt(mean(x^2) + eps) * weight (rmsnorm_recompute: the
                                               forward's output again from its input and kept rstd)
    rope_init / rope_forward / rope_backward   rotary positions, rotate_half convention (dimension i
                                               pairs with i + HS/2), Llama 3.1 frequency scaling
    repeat_kv_forward / repeat_kv_backward     GQA: the NKV key/value heads repeated into the packed
                                               (B,T,3C) q|k|v layout attention_forward takes (the trainers
                                               call attention_gqa_* instead, which reads the k/v heads where
                                               they are; dev/test/test_attention_cpu.c checks it against this)
    swiglu_forward / swiglu_backward           silu(gate) * up

Shapes: B batch, T time, C channels, NH query heads, NKV key/value heads, HS = C / NH head size,
QKV = (NH + 2 NKV) HS (the qkv projection's output: q heads, then k heads, then v heads), FFN.

A function that writes a tensor with a bf16 copy (-p bf16 on oneDNN: llmc/cpu/matmul.h's matmul_bf16_shadow)
writes the copy too, in the same pass (llmc/cpu/layers_cpu.h's bf16_copy_row).
*/
#ifndef LLMC_LAYERS_LLAMA_CPU_H
#define LLMC_LAYERS_LLAMA_CPU_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../utils.h"
#include "layers_cpu.h"   // norm_weight_backward, and llmc/cpu/vecmath.h
#include "phase_time.h"

// out[b,t,:] = wte[inp[b,t],:]
static void embedding_forward(float* out, const int* inp, const float* wte, int B, int T, int C) {
    // out is (B,T,C), inp is (B,T), wte is (V,C)
    double t_phase = phase_begin();
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        memcpy(out + (size_t)bt * C, wte + (size_t)inp[bt] * C, (size_t)C * sizeof(float));
    }
    phase_end(PHASE_EMBEDDING, t_phase, 8.0 * B * T * C, 0.0);
}

static void embedding_backward(float* dwte, const float* dout, const int* inp, int B, int T, int C) {
    // dwte is (V,C), dout is (B,T,C); threads own channel slices, rows are summed in (b,t) order
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (int c0 = 0; c0 < C; c0 += 64) {
        int c1 = c0 + 64 < C ? c0 + 64 : C;
        for (int bt = 0; bt < B * T; bt++) {
            const float* d = dout + (size_t)bt * C;
            float* w = dwte + (size_t)inp[bt] * C;
            for (int i = c0; i < c1; i++) { w[i] += d[i]; }
        }
    }
    phase_end(PHASE_EMBEDDING, t_phase, 12.0 * B * T * C, (double)B * T * C); // dout read, rows updated
}

// one row of an RMSNorm from its 1/rms s: o (C) = weight * (x * s), and o16 (C) its bf16 copy (NULL: none). The
// forward pass and the backward's recompute share it, so both give the same bits.
static inline void rmsnorm_apply_row(float* o, uint16_t* o16, const float* x, float s, const float* weight, int C) {
    for (int i = 0; i < C; i++) { o[i] = weight[i] * (x[i] * s); }
    bf16_copy_row(o16, o, (size_t)C);
}

// out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) per row (kept for the backward)
static void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, float eps, int B, int T, int C) {
    // out, inp are (B,T,C); rstd is (B,T); weight is (C)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)B * T * C);
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = inp + (size_t)bt * C;
        float s = 1.0f / sqrtf(vec_dot3(x, NULL, x, C) / C + eps);
        rmsnorm_apply_row(out + (size_t)bt * C, out16 != NULL ? out16 + (size_t)bt * C : NULL, x, s, weight, C);
        rstd[bt] = s;
    }
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * B * T * C + B * T), 4.0 * B * T * C);
}

// out (B,T,C) = rmsnorm_forward's output again, from its input and the rstd it kept (the same bits): the backward's,
// where only GEMMs read the output and the forward did not keep it
static void rmsnorm_recompute(float* out, const float* inp, const float* rstd, const float* weight, int B, int T, int C) {
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, (size_t)B * T * C);
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        rmsnorm_apply_row(out + (size_t)bt * C, out16 != NULL ? out16 + (size_t)bt * C : NULL, inp + (size_t)bt * C,
                          rstd[bt], weight, C);
    }
    phase_end(PHASE_NORM, t_phase, 4.0 * (2.0 * B * T * C + B * T), 2.0 * B * T * C);
}

// dinp (B,T,C) = the input gradient, added to dinp when accumulate, else written; dweight += its gradient
static void rmsnorm_backward_into(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                                  const float* rstd, int B, int T, int C, int accumulate) {
    // dinp, dout, inp are (B,T,C); dweight, weight are (C); rstd is (B,T)
    int BT = B * T;
    double t_phase = phase_begin();
    uint16_t* dinp16 = matmul_bf16_shadow(dinp, (size_t)BT * C);
    // dinp = rstd * (dnorm - norm * mean(dnorm * norm)), dnorm = dout * weight, norm = inp * rstd
    #pragma omp parallel for
    for (int bt = 0; bt < BT; bt++) {
        const float* x = inp + (size_t)bt * C;
        const float* d = dout + (size_t)bt * C;
        float* dx = dinp + (size_t)bt * C;
        float s = rstd[bt];
        float dot = vec_dot3(weight, d, x, C) * s / C;
        if (accumulate) {
            for (int i = 0; i < C; i++) { dx[i] += s * (weight[i] * d[i] - x[i] * s * dot); }
        } else {
            for (int i = 0; i < C; i++) { dx[i] = s * (weight[i] * d[i] - x[i] * s * dot); }
        }
        if (dinp16 != NULL) { bf16_copy_row(dinp16 + (size_t)bt * C, dx, (size_t)C); }
    }
    // dweight[i] += sum over rows of dout * norm (llmc/cpu/layers_cpu.h's, with no mean and no bias)
    norm_weight_backward(dweight, NULL, dout, inp, NULL, rstd, BT, C);
    // dout, inp read; dinp updated (or written)
    phase_end(PHASE_NORM, t_phase, 4.0 * ((accumulate ? 4.0 : 3.0) * BT * C + BT), 10.0 * BT * C);
}

static void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                             const float* rstd, int B, int T, int C) {
    rmsnorm_backward_into(dinp, dweight, dout, inp, weight, rstd, B, T, C, 1);
}

// The rotary tables cos, sin (maxT, HS/2): angle[t,i] = t * inv_freq[i], inv_freq[i] =
// 1 / theta^(2i/HS), with Llama 3.1's scaling when factor > 0 (transformers' "llama3" rope type:
// wavelengths above original_max/low_freq_factor divided by factor, below original_max/
// high_freq_factor kept, smoothly interpolated between). float32 like transformers.
static void rope_init(float* cos_table, float* sin_table, int maxT, int HS, float theta, float factor,
                      float low_freq_factor, float high_freq_factor, float original_max_pos) {
    int half = HS / 2;
    float* inv_freq = (float*)mallocCheck((size_t)half * sizeof(float));
    for (int i = 0; i < half; i++) {
        float f = 1.0f / powf(theta, (float)(2 * i) / (float)HS);
        if (factor > 0.0f) {
            float low_wavelen = original_max_pos / low_freq_factor;
            float high_wavelen = original_max_pos / high_freq_factor;
            float wavelen = 2.0f * (float)M_PI / f;
            float scaled = wavelen > low_wavelen ? f / factor : f;
            if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
                float smooth = (original_max_pos / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
            }
            f = scaled;
        }
        inv_freq[i] = f;
    }
    for (int t = 0; t < maxT; t++) {
        for (int i = 0; i < half; i++) {
            float angle = (float)t * inv_freq[i];
            cos_table[(size_t)t * half + i] = (float)cos((double)angle);
            sin_table[(size_t)t * half + i] = (float)sin((double)angle);
        }
    }
    free(inv_freq);
}

// Rotates the first nheads heads of every position in place by sign * angle[t,i]: for i < HS/2,
// (x[i], x[i+HS/2]) <- (x[i] cos - x[i+HS/2] sin, x[i+HS/2] cos + x[i] sin) with sin of sign * angle; the bf16 copy of
// what it rewrites too when x has one (the backward's dqkv, which the qkv GEMMs read)
static void rope_rotate(float* x, const float* cos_table, const float* sin_table, int B, int T, int row, int nheads, int HS,
                        float sign) {
    // x is (B,T,row) with the heads to rotate at the start of each row, each HS wide; tables (maxT, HS/2)
    int half = HS / 2;
    double t_phase = phase_begin();
    uint16_t* x16 = matmul_bf16_shadow(x, (size_t)B * T * row);
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        int t = bt % T;
        const float* c = cos_table + (size_t)t * half;
        const float* s = sin_table + (size_t)t * half;
        for (int h = 0; h < nheads; h++) {
            float* v = x + (size_t)bt * row + (size_t)h * HS;
            for (int i = 0; i < half; i++) {
                float a = v[i], b = v[i + half], si = sign * s[i];
                v[i] = a * c[i] - b * si;
                v[i + half] = b * c[i] + a * si;
            }
        }
        if (x16 != NULL) { bf16_copy_row(x16 + (size_t)bt * row, x + (size_t)bt * row, (size_t)nheads * HS); }
    }
    double n = (double)B * T * nheads * HS;
    phase_end(PHASE_ELEMENTWISE, t_phase, 8.0 * n, 3.0 * n); // the heads read and written in place
}

// rotates the first nheads heads of x (B,T,row) at their positions (RoPE)
static void rope_forward(float* x, const float* cos_table, const float* sin_table, int B, int T, int row, int nheads, int HS) {
    rope_rotate(x, cos_table, sin_table, B, T, row, nheads, HS, 1.0f);
}

// the transpose of rope_forward (a rotation by -angle), in place on the gradient dx (B,T,row)
static void rope_backward(float* dx, const float* cos_table, const float* sin_table, int B, int T, int row, int nheads, int HS) {
    rope_rotate(dx, cos_table, sin_table, B, T, row, nheads, HS, -1.0f);
}

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

// out = silu(gate) * up, silu(x) = x * sigmoid(x) = x / (1 + e^-x) (as torch's silu), with llmc/cpu/vecmath.h's
// branch-free e^x so the loops vectorise (glibc's expf is a scalar call)
static void swiglu_forward(float* out, const float* gate, const float* up, size_t N) {
    // out, gate, up are (N) = (B,T,FFN)
    double t_phase = phase_begin();
    uint16_t* out16 = matmul_bf16_shadow(out, N);
    if (out16 != NULL) {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float g = gate[i];
            float silu = g / (1.0f + vec_expf(-g));
            out[i] = silu * up[i];
            out16[i] = matmul_bf16_round_value(out[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float g = gate[i];
            float silu = g / (1.0f + vec_expf(-g));
            out[i] = silu * up[i];
        }
    }
    phase_end(PHASE_ELEMENTWISE, t_phase, 12.0 * N, 8.0 * N);
}

// dgate, dup (N) = their gradients, added to them when accumulate, else written (and their bf16 copies when they
// have them: the fc GEMMs read both)
// one element of swiglu's backward: the gradients of gate and up for dout, d silu(g)/dg = sig (1 + g (1 - sig))
static inline void swiglu_grad(float dout, float g, float up, float* dgate, float* dup) {
    float sig = 1.0f / (1.0f + vec_expf(-g));
    float silu = g * sig;
    *dgate = dout * up * sig * (1.0f + g * (1.0f - sig));
    *dup = dout * silu;
}

static void swiglu_backward_into(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t N,
                                 int accumulate) {
    // dgate, dup, dout, gate, up are (N) = (B,T,FFN)
    double t_phase = phase_begin();
    uint16_t* dgate16 = matmul_bf16_shadow(dgate, N);
    uint16_t* dup16 = matmul_bf16_shadow(dup, N);
    if (!accumulate && dgate16 != NULL && dup16 != NULL) { // the copies in the same loop (the trainers' case)
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            swiglu_grad(dout[i], gate[i], up[i], &dgate[i], &dup[i]);
            dgate16[i] = matmul_bf16_round_value(dgate[i]);
            dup16[i] = matmul_bf16_round_value(dup[i]);
        }
    } else {
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < N; i++) {
            float dg, du;
            swiglu_grad(dout[i], gate[i], up[i], &dg, &du);
            dgate[i] = accumulate ? dgate[i] + dg : dg;
            dup[i] = accumulate ? dup[i] + du : du;
        }
        bf16_copy_row(dgate16, dgate, N); // (a copy that only one of them has, or after accumulating)
        bf16_copy_row(dup16, dup, N);
    }
    // dout, gate, up read; dgate, dup updated (or written)
    phase_end(PHASE_ELEMENTWISE, t_phase, (accumulate ? 28.0 : 20.0) * N, 16.0 * N);
}

static void swiglu_backward(float* dgate, float* dup, const float* dout, const float* gate, const float* up, size_t N) {
    swiglu_backward_into(dgate, dup, dout, gate, up, N, 1);
}

#endif // LLMC_LAYERS_LLAMA_CPU_H
