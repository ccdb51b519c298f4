/*
dev/cuda/rope.cu: rotary position embeddings with Llama 3.1's frequency scaling: the tables, the forward
rotation of the q and k heads in place, and its backward, against llmc/cpu/rope_cpu.h's rope_tables /
rope_forward / rope_backward. The problem is the qkv projection's output (B,T,QKV), QKV = (NH + 2 NKV) HS,
whose first NH + NKV heads rotate and whose v heads must come out untouched.

    version 1: one thread per position rotating all its heads, with the CPU's tables (rope_tables) copied over
    version 2: the production kernels (llmc/cuda/rope.cuh): the tables computed on the device, one thread
               per rotated pair

usage: ./rope [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C, 4 key/value heads)
*/
#include "common.h"
#include "../../llmc/cpu/rope_cpu.h"
#include "../../llmc/cuda/rope.cuh"

// Llama 3.1's rope: theta 500000, scaling factor 8, low/high frequency factors 1 and 4, original context
// 8192. With HS = 64 the 32 frequencies span all three regimes (kept, interpolated, divided by 8).
static const float THETA = 500000.0f, FACTOR = 8.0f, LOW_FREQ = 1.0f, HIGH_FREQ = 4.0f, ORIGINAL_MAX_POS = 8192.0f;

__global__ static void rope_v1(floatX* x, const float* cos_table, const float* sin_table, int B, int T, int row,
                               int nheads, int HS, float sign) {
    int bt = blockIdx.x * blockDim.x + threadIdx.x;
    if (bt >= B * T) { return; }
    int half = HS / 2, t = bt % T;
    for (int h = 0; h < nheads; h++) {
        floatX* v = x + (size_t)bt * row + (size_t)h * HS;
        for (int i = 0; i < half; i++) {
            float c = cos_table[t * half + i], s = sign * sin_table[t * half + i];
            float a = to_float(v[i]), b = to_float(v[i + half]);
            v[i] = (floatX)(a * c - b * s);
            v[i + half] = (floatX)(b * c + a * s);
        }
    }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "rope", 8, 1024);
    const Shape s = pg.shape;
    const int B = s.B, T = s.T, HS = s.C / s.NH, nheads = s.NH + s.NKV, row = (s.NH + 2 * s.NKV) * HS;
    printf("  NKV=%d HS=%d: %d heads of %d rotate in rows of %d\n", s.NKV, HS, nheads, HS, row);
    size_t n = (size_t)B * T * row, ntab = (size_t)T * (HS / 2);
    float* x = make_random_float(n, 1);
    float *dx;
    floatX* d_x = to_device(x, n);    // the inputs, kept; each run rotates a copy
    floatX* d_dx = random_input(&dx, n, 2);
    floatX* d_work = device_alloc<floatX>(n);
    float* ref_cos = (float*)mallocCheck(ntab * sizeof(float));
    float* ref_sin = (float*)mallocCheck(ntab * sizeof(float));
    rope_tables(ref_cos, ref_sin, T, HS, THETA, FACTOR, LOW_FREQ, HIGH_FREQ, ORIGINAL_MAX_POS);
    float* ref_out = (float*)mallocCheck(n * sizeof(float));
    float* ref_dinp = (float*)mallocCheck(n * sizeof(float));
    memcpy(ref_out, x, n * sizeof(float));
    rope_forward(ref_out, ref_cos, ref_sin, B, T, row, nheads, HS);
    memcpy(ref_dinp, dx, n * sizeof(float));
    rope_backward(ref_dinp, ref_cos, ref_sin, B, T, row, nheads, HS);
    const float tol = precision_tol(1e-4f, 1e-2f);
    // one rotation of a fresh copy of src (sign +1 forward, -1 backward) with the given tables
    auto rotate = [&](int version, const floatX* src, const float* d_cos, const float* d_sin, float sign) {
        cudaCheck(cudaMemcpy(d_work, src, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        if (version == 1) {
            rope_v1<<<ceil_div((size_t)B * T, 128), 128>>>(d_work, d_cos, d_sin, B, T, row, nheads, HS, sign);
            cudaCheckLaunch();
        } else if (sign > 0.0f) {
            rope_forward(d_work, d_cos, d_sin, B, T, row, nheads, HS, 0);
        } else {
            rope_backward(d_work, d_cos, d_sin, B, T, row, nheads, HS, 0);
        }
    };
    if (version_selected(&pg, 1)) {
        float* d_cos = to_device_float(ref_cos, ntab);
        float* d_sin = to_device_float(ref_sin, ntab);
        auto forward = [&]() { rotate(1, d_x, d_cos, d_sin, 1.0f); };
        auto backward = [&]() { rotate(1, d_dx, d_cos, d_sin, -1.0f); };
        check_and_time(&pg, "version 1 forward", forward, d_work, ref_out, n, tol, 10, " (including a copy)");
        check_and_time(&pg, "version 1 backward", backward, d_work, ref_dinp, n, tol, 10, " (including a copy)");
        cudaCheck(cudaFree(d_cos)); cudaCheck(cudaFree(d_sin));
    }
    if (version_selected(&pg, 2)) {
        float* d_cos = device_alloc<float>(ntab);
        float* d_sin = device_alloc<float>(ntab);
        auto tables = [&]() { rope_tables(d_cos, d_sin, T, HS, THETA, FACTOR, LOW_FREQ, HIGH_FREQ, ORIGINAL_MAX_POS, 0); };
        tables();
        validate_result(d_cos, ref_cos, "version 2 (llmc) cos table", ntab, 1e-4f);
        validate_result(d_sin, ref_sin, "version 2 (llmc) sin table", ntab, 1e-4f);
        auto forward = [&]() { rotate(2, d_x, d_cos, d_sin, 1.0f); };
        auto backward = [&]() { rotate(2, d_dx, d_cos, d_sin, -1.0f); };
        check_and_time(&pg, "version 2 (llmc) forward", forward, d_work, ref_out, n, tol, 100, " (including a copy)");
        check_and_time(&pg, "version 2 (llmc) backward", backward, d_work, ref_dinp, n, tol, 100, " (including a copy)");
        cudaCheck(cudaFree(d_cos)); cudaCheck(cudaFree(d_sin));
    }
    free(x); free(dx); free(ref_cos); free(ref_sin); free(ref_out); free(ref_dinp);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_dx)); cudaCheck(cudaFree(d_work));
    printf("rope: all versions match the CPU reference\n");
    return 0;
}
