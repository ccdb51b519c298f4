/*
llmc/cuda/rope.cuh: rotary position embeddings with Llama 3.1's frequency scaling, the GPU side of
llmc/cpu/rope_cpu.h's rope_tables / rope_forward / rope_backward / rope_reverse_* (same tables, same conventions).

    rope_tables(cos, sin, maxT, HS, theta, factor, low_freq_factor, high_freq_factor, original_max_pos)
        the tables (maxT, HS/2), float32: angle[t,i] = t * inv_freq[i], inv_freq[i] = 1 / theta^(2i/HS),
        scaled when factor > 0 (wavelengths above original_max/low_freq_factor divided by factor, below
        original_max/high_freq_factor kept, smoothly interpolated between); no scaling when factor is 0
    rope_forward(x, cos, sin, B, T, row, nheads, HS)    in place: the first nheads heads of each row of
        x (B,T,row) rotated, (x[i], x[i+HS/2]) <- (x[i] cos - x[i+HS/2] sin, x[i+HS/2] cos + x[i] sin)
    rope_backward(dx, cos, sin, B, T, row, nheads, HS)  in place: the transpose (a rotation by -angle)
    rope_reverse_forward / rope_reverse_backward (same arguments)   nanochat's convention: its rotate_half is
        cat(x2, -x1) where Llama's is cat(-x2, x1), so its pairs turn by -angle, (x[i], x[i+HS/2]) <-
        (x[i] cos + x[i+HS/2] sin, x[i+HS/2] cos - x[i] sin): Llama's rotation in the other direction

One thread per rotated pair. The tables are computed once on the device: inv_freq in double rounded to
float32 (the CPU's rope_tables computes it in float32 and can be an ulp off), the angle t * inv_freq in float32 as
the CPU's does, cos and sin in double. An ulp of inv_freq moves the angle by up to t ulps, so the tables
agree with the CPU's to 7.6e-6 at T = 128 and 6.1e-5 at T = 1024 (dev/cuda/rope.cu).
*/
#ifndef LLMC_ROPE_CUH
#define LLMC_ROPE_CUH

#include "cuda_common.cuh"

// inv_freq[i] for pair i of a head of HS, with Llama 3.1's scaling when factor > 0
__device__ static inline float rope_inv_freq(int i, int HS, float theta, float factor, float low_freq_factor,
                                             float high_freq_factor, float original_max_pos) {
    double f = 1.0 / pow((double)theta, (double)(2 * i) / (double)HS);
    if (factor > 0.0f) {
        double low_wavelen = (double)original_max_pos / low_freq_factor;
        double high_wavelen = (double)original_max_pos / high_freq_factor;
        double wavelen = 2.0 * M_PI / f;
        double scaled = wavelen > low_wavelen ? f / factor : f;
        if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
            double smooth = ((double)original_max_pos / wavelen - low_freq_factor) / (double)(high_freq_factor - low_freq_factor);
            scaled = (1.0 - smooth) * scaled / factor + smooth * scaled;
        }
        f = scaled;
    }
    return (float)f;
}

// cos, sin (maxT, HS/2); one thread per entry
__global__ static void rope_tables_kernel(float* cos_table, float* sin_table, int maxT, int HS, float theta,
                                          float factor, float low_freq_factor, float high_freq_factor,
                                          float original_max_pos) {
    int half = HS / 2;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= maxT * half) { return; }
    int t = idx / half, i = idx % half;
    float angle = (float)t * rope_inv_freq(i, HS, theta, factor, low_freq_factor, high_freq_factor, original_max_pos);
    cos_table[idx] = (float)cos((double)angle);
    sin_table[idx] = (float)sin((double)angle);
}

static inline void rope_tables(float* cos_table, float* sin_table, int maxT, int HS, float theta, float factor,
                               float low_freq_factor, float high_freq_factor, float original_max_pos, cudaStream_t stream) {
    const int block_size = 256;
    rope_tables_kernel<<<ceil_div((size_t)maxT * (HS / 2), block_size), block_size, 0, stream>>>(
        cos_table, sin_table, maxT, HS, theta, factor, low_freq_factor, high_freq_factor, original_max_pos);
    cudaCheckLaunch();
}

// x (B,T,row) in place; sign +1 rotates by +angle (forward), -1 by -angle (backward: the transpose)
__global__ static void rope_rotate_kernel(floatX* x, const float* cos_table, const float* sin_table, int B, int T,
                                          int row, int nheads, int HS, float sign) {
    int half = HS / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * nheads * half) { return; }
    int i = (int)(idx % half);
    int h = (int)((idx / half) % nheads);
    size_t bt = idx / ((size_t)half * nheads);
    int t = (int)(bt % T);
    float c = cos_table[(size_t)t * half + i];
    float s = sign * sin_table[(size_t)t * half + i];
    floatX* v = x + bt * row + (size_t)h * HS;
    float a = to_float(v[i]), b = to_float(v[i + half]);
    v[i] = (floatX)(a * c - b * s);
    v[i + half] = (floatX)(b * c + a * s);
}

static inline void rope_rotate(floatX* x, const float* cos_table, const float* sin_table, int B, int T, int row,
                               int nheads, int HS, float sign, cudaStream_t stream) {
    const int block_size = 256;
    rope_rotate_kernel<<<ceil_div((size_t)B * T * nheads * (HS / 2), block_size), block_size, 0, stream>>>(
        x, cos_table, sin_table, B, T, row, nheads, HS, sign);
    cudaCheckLaunch();
}

// x (B,T,row): the first nheads heads of HS rotated in place, tables (maxT >= T, HS/2)
static inline void rope_forward(floatX* x, const float* cos_table, const float* sin_table, int B, int T, int row,
                                int nheads, int HS, cudaStream_t stream) {
    rope_rotate(x, cos_table, sin_table, B, T, row, nheads, HS, 1.0f, stream);
}

// dx (B,T,row) in place, as rope_forward's x
static inline void rope_backward(floatX* dx, const float* cos_table, const float* sin_table, int B, int T, int row,
                                 int nheads, int HS, cudaStream_t stream) {
    rope_rotate(dx, cos_table, sin_table, B, T, row, nheads, HS, -1.0f, stream);
}

// nanochat's rotate-half convention (a rotation by -angle): x (B,T,row) in place, as rope_forward's x
static inline void rope_reverse_forward(floatX* x, const float* cos_table, const float* sin_table, int B, int T, int row,
                                        int nheads, int HS, cudaStream_t stream) {
    rope_rotate(x, cos_table, sin_table, B, T, row, nheads, HS, -1.0f, stream);
}

// its transpose (a rotation by +angle), dx in place
static inline void rope_reverse_backward(floatX* dx, const float* cos_table, const float* sin_table, int B, int T, int row,
                                         int nheads, int HS, cudaStream_t stream) {
    rope_rotate(dx, cos_table, sin_table, B, T, row, nheads, HS, 1.0f, stream);
}

#endif // LLMC_ROPE_CUH
