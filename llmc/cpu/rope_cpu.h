/*
llmc/cpu/rope_cpu.h: rotary position embeddings on the CPU, fp32 with OpenMP; the CPU side of llmc/cuda/rope.cuh
(the same tables, conventions and names, less the stream).

    rope_tables(cos, sin, maxT, HS, theta, factor, low_freq_factor, high_freq_factor, original_max_pos)
        the tables (maxT, HS/2), float32: angle[t,i] = t * inv_freq[i], inv_freq[i] = 1 / theta^(2i/HS), with
        Llama 3.1's scaling when factor > 0; none when factor is 0 (nanochat)
    decoder_rope_tables(d, &cos, &sin)                  a decoder's tables (llmc/decoder.h), malloc'd
    rope_forward(x, cos, sin, B, T, row, nheads, HS)    in place: the first nheads heads of each row of
        x (B,T,row) rotated, (x[i], x[i+HS/2]) <- (x[i] cos - x[i+HS/2] sin, x[i+HS/2] cos + x[i] sin): the
        rotate_half convention, dimension i paired with i + HS/2 (Llama's)
    rope_backward(dx, cos, sin, B, T, row, nheads, HS)  in place: the transpose (a rotation by -angle)
    rope_reverse_forward / rope_reverse_backward (same arguments)   nanochat's convention: its rotate_half is
        cat(x2, -x1) where Llama's is cat(-x2, x1), so its pairs turn by -angle (and back by +angle)

A rotation rewrites the bf16 copy of what it rotates too when x has one (the backward's dqkv, which the qkv GEMMs
read: -p bf16 on oneDNN, llmc/cpu/matmul.h's matmul_bf16_shadow).
*/
#ifndef LLMC_ROPE_CPU_H
#define LLMC_ROPE_CPU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "../utils.h"
#include "../decoder.h"
#include "matmul.h"
#include "phase_time.h"

// The rotary tables cos, sin (maxT, HS/2): angle[t,i] = t * inv_freq[i], inv_freq[i] =
// 1 / theta^(2i/HS), with Llama 3.1's scaling when factor > 0 (transformers' "llama3" rope type:
// wavelengths above original_max/low_freq_factor divided by factor, below original_max/
// high_freq_factor kept, smoothly interpolated between). float32 like transformers.
static void rope_tables(float* cos_table, float* sin_table, int maxT, int HS, float theta, float factor,
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

// the rotary tables of a decoder (llmc/decoder.h) into *cos_table, *sin_table, each (maxT, HS/2), malloc'd: its
// theta, with Llama 3.1's scaling when rope_factor > 0
static void decoder_rope_tables(const DecoderConfig* d, float** cos_table, float** sin_table) {
    size_t n = (size_t)d->max_seq_len * (size_t)(d->head_dim / 2);
    *cos_table = (float*)mallocCheck(n * sizeof(float));
    *sin_table = (float*)mallocCheck(n * sizeof(float));
    rope_tables(*cos_table, *sin_table, d->max_seq_len, d->head_dim, d->rope_theta, d->rope_factor,
                d->rope_low_freq_factor, d->rope_high_freq_factor, d->rope_original_max_pos);
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
    // the heads read and written in place, and their bf16 copy when x has one
    phase_end(PHASE_ELEMENTWISE, t_phase, (x16 != NULL ? 10.0 : 8.0) * n, 3.0 * n);
}

// rotates the first nheads heads of x (B,T,row) at their positions (RoPE)
static void rope_forward(float* x, const float* cos_table, const float* sin_table, int B, int T, int row, int nheads, int HS) {
    rope_rotate(x, cos_table, sin_table, B, T, row, nheads, HS, 1.0f);
}

// the transpose of rope_forward (a rotation by -angle), in place on the gradient dx (B,T,row)
static void rope_backward(float* dx, const float* cos_table, const float* sin_table, int B, int T, int row, int nheads, int HS) {
    rope_rotate(dx, cos_table, sin_table, B, T, row, nheads, HS, -1.0f);
}

// nanochat's RoPE on the first nheads heads of every row, in place: x' = x cos + rot(x) sin with rot(x) =
// cat(x2, -x1), i.e. (x1, x2) <- (x1 cos + x2 sin, x2 cos - x1 sin): rope_forward's rotation by -angle
static void rope_reverse_forward(float* x, const float* cos_table, const float* sin_table, int B, int T, int row,
                                 int nheads, int HS) {
    // x is (B,T,row), heads HS wide at the start of each row; tables (maxT, HS/2) (rope_tables)
    rope_rotate(x, cos_table, sin_table, B, T, row, nheads, HS, -1.0f);
}

// the transpose of rope_reverse_forward (the rotation by +angle), in place on the gradient dx (B,T,row)
static void rope_reverse_backward(float* dx, const float* cos_table, const float* sin_table, int B, int T, int row,
                                  int nheads, int HS) {
    rope_rotate(dx, cos_table, sin_table, B, T, row, nheads, HS, 1.0f);
}

#endif // LLMC_ROPE_CPU_H
