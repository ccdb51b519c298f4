/*
dev/cuda/gelu_backward.cu: GELU backward in place, d = d * gelu'(x).

    version 1: one thread per element
    version 2: the production kernel (llmc/cuda/gelu.cuh): one thread per 128-bit packet
The CPU reference is layer_math.h's gelu_tanh_grad, the function the CPU trainer uses.

usage: ./gelu_backward [version] [--quick]   (full: the MLP's B*T*4C at B=8, T=1024, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/gelu.cuh"

__global__ static void gelu_backward_v1(floatX* d, const floatX* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { d[i] = (floatX)(to_float(d[i]) * gelu_tanh_grad(to_float(inp[i]))); }
}

int main(int argc, char** argv) {
    Playground pg;
    Shape s = playground_start(&pg, argc, argv, 2, "gelu_backward", 8, 1024);
    const size_t N = (size_t)s.B * s.T * 4 * s.C;  // the MLP's hidden activations
    float* inp = make_random_float(N, 1);
    float *dout;
    for (size_t i = 0; i < N; i++) { inp[i] *= 6.0f; }
    floatX* d_inp = to_device(inp, N);
    floatX* d_dout = random_input(&dout, N, 2);
    floatX* d_work = (floatX*)cudaMallocCheck(N * sizeof(floatX));
    float* ref = (float*)mallocCheck(N * sizeof(float));
    for (size_t i = 0; i < N; i++) { ref[i] = dout[i] * gelu_tanh_grad(inp[i]); }
    const float tol = precision_tol(1e-5f, 1e-2f);
    // in place: every run starts from a fresh copy of dout
    auto reset = [&]() { cudaCheck(cudaMemcpy(d_work, d_dout, N * sizeof(floatX), cudaMemcpyDeviceToDevice)); };
    auto v1 = [&]() { reset(); gelu_backward_v1<<<ceil_div(N, 256), 256>>>(d_work, d_inp, N); cudaCheckLaunch(); };
    auto v2 = [&]() { reset(); gelu_backward_inplace(d_work, d_inp, N, 0); };
    const char* note = " (including a copy)";
    if (version_selected(&pg, 1)) { check_and_time(&pg, "version 1", v1, d_work, ref, N, tol, 100, note); }
    if (version_selected(&pg, 2)) { check_and_time(&pg, "version 2 (llmc)", v2, d_work, ref, N, tol, 100, note); }
    free(inp); free(dout); free(ref);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_work));
    printf("gelu_backward: all versions match the CPU reference\n");
    return 0;
}
