/*
dev/cuda/attention_common.h: the CPU reference of causal self-attention (forward and backward),
shared by attention_forward.cu and attention_backward.cu. inp (B, T, 3C) = [q | k | v].
*/
#ifndef LLMC_DEV_CUDA_ATTENTION_COMMON_H
#define LLMC_DEV_CUDA_ATTENTION_COMMON_H

#include <math.h>
#include <stddef.h>
#include "../../llmc/host_device.h"
#include "../../llmc/cuda/cuda_common.cuh"

// offsets into the tensors of one head h at position t of sequence b (HS = C / NH), for the references
// and the naive kernels: q (part 0), k (1) or v (2) in the packed (B, T, 3C) input, the head's slice of
// a (B, T, C) output, its attention row in (B, NH, T, T)
static inline HD size_t qkv_offset(int b, int t, int part, int h, int T, int C, int HS) {
    return ((size_t)b * T + t) * 3 * C + (size_t)part * C + (size_t)h * HS;
}
static inline HD size_t head_offset(int b, int t, int h, int T, int C, int HS) { return ((size_t)b * T + t) * C + (size_t)h * HS; }
static inline HD size_t att_offset(int b, int h, int t, int NH, int T) { return (((size_t)b * NH + h) * T + t) * T; }

// the gradient of one attention weight, (b, h, t) looking at t2: the head's output gradient d (HS values)
// dotted with v at t2 (float or floatX inputs, summed in float)
template <class X>
static inline HD float attention_datt(const X* d, const X* inp, int b, int t2, int h, int T, int C, int HS) {
    const X* v = inp + qkv_offset(b, t2, 2, h, T, C, HS);
    float sum = 0.0f;
    for (int i = 0; i < HS; i++) { sum += to_float(d[i]) * to_float(v[i]); }
    return sum;
}

// out (B, T, C), att (B, NH, T, T) softmax weights (0 above the diagonal)
static void attention_forward_cpu(float* out, float* att, const float* inp, int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float* q = inp + qkv_offset(b, t, 0, h, T, C, HS);
                float* a = att + att_offset(b, h, t, NH, T);
                float maxval = -INFINITY;
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* k = inp + qkv_offset(b, t2, 1, h, T, C, HS);
                    float dot = 0.0f;
                    for (int i = 0; i < HS; i++) { dot += q[i] * k[i]; }
                    a[t2] = dot * scale;
                    if (a[t2] > maxval) { maxval = a[t2]; }
                }
                float sum = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) { a[t2] = expf(a[t2] - maxval); sum += a[t2]; }
                for (int t2 = 0; t2 < T; t2++) { a[t2] = t2 <= t ? a[t2] / sum : 0.0f; }
                float* o = out + head_offset(b, t, h, T, C, HS);
                for (int i = 0; i < HS; i++) { o[i] = 0.0f; }
                for (int t2 = 0; t2 <= t; t2++) {
                    const float* v = inp + qkv_offset(b, t2, 2, h, T, C, HS);
                    for (int i = 0; i < HS; i++) { o[i] += a[t2] * v[i]; }
                }
            }
        }
    }
}

// dinp (B, T, 3C) += gradient given dout (B, T, C) and the forward's att
static void attention_backward_cpu(float* dinp, const float* dout, const float* inp, const float* att, int B, int T, int C, int NH) {
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    float* datt = (float*)malloc((size_t)T * sizeof(float));
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            for (int h = 0; h < NH; h++) {
                const float* a = att + att_offset(b, h, t, NH, T);
                const float* d = dout + head_offset(b, t, h, T, C, HS);
                const float* q = inp + qkv_offset(b, t, 0, h, T, C, HS);
                float* dq = dinp + qkv_offset(b, t, 0, h, T, C, HS);
                float dot = 0.0f;
                for (int t2 = 0; t2 <= t; t2++) {
                    float* dv = dinp + qkv_offset(b, t2, 2, h, T, C, HS);
                    for (int i = 0; i < HS; i++) { dv[i] += a[t2] * d[i]; }
                    datt[t2] = attention_datt(d, inp, b, t2, h, T, C, HS);
                    dot += a[t2] * datt[t2];
                }
                for (int t2 = 0; t2 <= t; t2++) {
                    float dpre = a[t2] * (datt[t2] - dot) * scale;
                    const float* k = inp + qkv_offset(b, t2, 1, h, T, C, HS);
                    float* dk = dinp + qkv_offset(b, t2, 1, h, T, C, HS);
                    for (int i = 0; i < HS; i++) { dq[i] += dpre * k[i]; dk[i] += dpre * q[i]; }
                }
            }
        }
    }
    free(datt);
}

#endif // LLMC_DEV_CUDA_ATTENTION_COMMON_H
