/*
dev/cuda/repeat_kv.cu: grouped-query attention's key/value repetition, (B,T,QKV) -> the packed (B,T,3C)
q|k|v layout the attention kernels take, and its backward (each key/value head the sum of its copies'
gradients), against llmc/cpu/repeat_kv_cpu.h's repeat_kv_forward / repeat_kv_backward.

    version 1: one thread per value, forward and backward
    version 2: the production kernels (llmc/cuda/repeat_kv.cuh): one thread per 128-bit packet

usage: ./repeat_kv [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C, 4 key/value heads)
*/
#include "common.h"
#include "../../llmc/cpu/repeat_kv_cpu.h"
#include "../../llmc/cuda/repeat_kv.cuh"

// out (B,T,3C), inp (B,T,QKV); query head h reads key/value head h / (NH/NKV)
__global__ static void repeat_kv_forward_v1(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HS) {
    int C = NH * HS, QKV = (NH + 2 * NKV) * HS;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * 3 * C) { return; }
    size_t bt = idx / (3 * C);
    int j = (int)(idx % (3 * C)), part = j / C, h = (j % C) / HS, d = j % HS;
    int src = part == 0 ? j : C + (part - 1) * NKV * HS + (h / (NH / NKV)) * HS + d;
    out[idx] = inp[bt * QKV + src];
}

// dinp (B,T,QKV) = the gradient of repeat_kv_forward_v1, dout (B,T,3C)
__global__ static void repeat_kv_backward_v1(float* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HS) {
    int C = NH * HS, QKV = (NH + 2 * NKV) * HS, rep = NH / NKV;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * QKV) { return; }
    size_t bt = idx / QKV;
    int j = (int)(idx % QKV);
    const floatX* g = dout + bt * 3 * C;
    if (j < C) {
        dinp[idx] = to_float(g[j]);
        return;
    }
    int part = j < C + NKV * HS ? 1 : 2, rel = j - C - (part - 1) * NKV * HS, kv = rel / HS, d = rel % HS;
    float sum = 0.0f;
    for (int r = 0; r < rep; r++) { sum += to_float(g[part * C + (kv * rep + r) * HS + d]); }
    dinp[idx] = sum;
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "repeat_kv", 8, 1024);
    const int B = pg.shape.B, T = pg.shape.T, NH = pg.shape.NH, NKV = pg.shape.NKV, HS = pg.shape.C / pg.shape.NH;
    printf("  NKV=%d: query heads in groups of %d share a key/value head\n", NKV, NH / NKV);
    size_t n_in = (size_t)B * T * (NH + 2 * NKV) * HS, n_out = (size_t)B * T * 3 * pg.shape.C;
    float *inp, *dout;
    floatX* d_inp = random_input(&inp, n_in, 1);
    floatX* d_dout = random_input(&dout, n_out, 2);
    float* ref_out = (float*)mallocCheck(n_out * sizeof(float));
    repeat_kv_forward(ref_out, inp, B, T, NH, NKV, HS);
    float* ref_dinp = (float*)callocCheck(n_in, sizeof(float));
    repeat_kv_backward(ref_dinp, dout, B, T, NH, NKV, HS);
    floatX* d_out = device_alloc<floatX>(n_out);
    const float copy_tol = 0.0f;  // the forward copies values: exact
    const float sum_tol = precision_tol(1e-6f, 1e-2f);
    if (version_selected(&pg, 1)) {
        float* d_dinp = device_alloc<float>(n_in);
        auto forward = [&]() {
            repeat_kv_forward_v1<<<ceil_div(n_out, 256), 256>>>(d_out, d_inp, B, T, NH, NKV, HS);
            cudaCheckLaunch();
        };
        auto backward = [&]() {
            repeat_kv_backward_v1<<<ceil_div(n_in, 256), 256>>>(d_dinp, d_dout, B, T, NH, NKV, HS);
            cudaCheckLaunch();
        };
        check_and_time(&pg, "version 1 forward", forward, d_out, ref_out, n_out, copy_tol, 100);
        check_and_time(&pg, "version 1 backward", backward, d_dinp, ref_dinp, n_in, 1e-6f, 100);
        cudaCheck(cudaFree(d_dinp));
    }
    if (version_selected(&pg, 2)) {
        floatX* d_dinp = device_alloc<floatX>(n_in);
        auto forward = [&]() { repeat_kv_forward(d_out, d_inp, B, T, NH, NKV, HS, 0); };
        auto backward = [&]() { repeat_kv_backward(d_dinp, d_dout, B, T, NH, NKV, HS, 0); };
        check_and_time(&pg, "version 2 (llmc) forward", forward, d_out, ref_out, n_out, copy_tol, 100);
        check_and_time(&pg, "version 2 (llmc) backward", backward, d_dinp, ref_dinp, n_in, sum_tol, 100);
        cudaCheck(cudaFree(d_dinp));
    }
    free(inp); free(dout); free(ref_out); free(ref_dinp);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out));
    printf("repeat_kv: all versions match the CPU reference\n");
    return 0;
}
