/*
dev/cuda/gelu_forward.cu: GELU (tanh approximation), elementwise.

    version 1: one thread per element
    version 2: the production kernel (llmc/cuda/gelu.cuh): one thread per 128-bit packet
The CPU reference is layer_math.h's gelu_tanh_forward, the function the CPU trainer uses.

usage: ./gelu_forward [version] [--quick]   (full: the MLP's B*T*4C at B=8, T=1024, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/gelu.cuh"

__global__ static void gelu_forward_v1(floatX* out, const floatX* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { out[i] = (floatX)gelu_tanh_forward(to_float(inp[i])); }
}

int main(int argc, char** argv) {
    Playground pg;
    Shape s = playground_start(&pg, argc, argv, 2, "gelu_forward", 8, 1024);
    const size_t N = (size_t)s.B * s.T * 4 * s.C;  // the MLP's hidden activations
    float* inp = make_random_float(N, 1);
    for (size_t i = 0; i < N; i++) { inp[i] *= 6.0f; }
    floatX* d_inp = to_device(inp, N);
    floatX* d_out = (floatX*)cudaMallocCheck(N * sizeof(floatX));
    float* ref = (float*)mallocCheck(N * sizeof(float));
    for (size_t i = 0; i < N; i++) { ref[i] = gelu_tanh_forward(inp[i]); }
    const float tol = precision_tol(1e-5f, 1e-2f);
    auto v1 = [&]() { gelu_forward_v1<<<ceil_div(N, 256), 256>>>(d_out, d_inp, N); cudaCheckLaunch(); };
    auto v2 = [&]() { gelu_forward(d_out, d_inp, N, 0); };
    if (version_selected(&pg, 1)) { check_and_time(&pg, "version 1", v1, d_out, ref, N, tol, 100); }
    if (version_selected(&pg, 2)) { check_and_time(&pg, "version 2 (llmc)", v2, d_out, ref, N, tol, 100); }
    free(inp); free(ref);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_out));
    printf("gelu_forward: all versions match the CPU reference\n");
    return 0;
}
