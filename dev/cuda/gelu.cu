/*
dev/cuda/gelu.cu: GELU (tanh approximation) elementwise, forward out = gelu(x) and backward in place,
d = d * gelu'(x).

    version 1: one thread per element
    version 2: the production kernels (llmc/cuda/gelu.cuh): one thread per 128-bit packet
The CPU references are layer_math.h's gelu_tanh_forward and gelu_tanh_grad, the functions the CPU trainer uses.

usage: ./gelu [version] [--quick]   (full: the MLP's B*T*4C at B=8, T=1024, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/gelu.cuh"

__global__ static void gelu_forward_v1(floatX* out, const floatX* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { out[i] = (floatX)gelu_tanh_forward(to_float(inp[i])); }
}

__global__ static void gelu_backward_v1(floatX* d, const floatX* inp, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) { d[i] = (floatX)(to_float(d[i]) * gelu_tanh_grad(to_float(inp[i]))); }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "gelu", 8, 1024);
    const size_t N = (size_t)pg.shape.B * pg.shape.T * 4 * pg.shape.C;  // the MLP's hidden activations
    float* inp = make_random_float(N, 1);
    for (size_t i = 0; i < N; i++) { inp[i] *= 6.0f; }
    floatX* d_inp = to_device(inp, N);
    float* dout;
    floatX* d_dout = random_input(&dout, N, 2);
    floatX* d_out = device_alloc<floatX>(N);
    float* ref_out = (float*)mallocCheck(N * sizeof(float));
    float* ref_dinp = (float*)mallocCheck(N * sizeof(float));
    for (size_t i = 0; i < N; i++) {
        ref_out[i] = gelu_tanh_forward(inp[i]);
        ref_dinp[i] = dout[i] * gelu_tanh_grad(inp[i]);
    }
    const float tol = precision_tol(1e-5f, 1e-2f);
    // the backward works in place: every run starts from a fresh copy of dout in d_out
    auto reset = [&]() { cudaCheck(cudaMemcpy(d_out, d_dout, N * sizeof(floatX), cudaMemcpyDeviceToDevice)); };
    const char* note = " (including a copy)";
    if (version_selected(&pg, 1)) {
        auto forward = [&]() { gelu_forward_v1<<<ceil_div(N, 256), 256>>>(d_out, d_inp, N); cudaCheckLaunch(); };
        auto backward = [&]() { reset(); gelu_backward_v1<<<ceil_div(N, 256), 256>>>(d_out, d_inp, N); cudaCheckLaunch(); };
        check_and_time(&pg, "version 1 forward", forward, d_out, ref_out, N, tol, 100);
        check_and_time(&pg, "version 1 backward", backward, d_out, ref_dinp, N, tol, 100, note);
    }
    if (version_selected(&pg, 2)) {
        auto forward = [&]() { gelu_forward(d_out, d_inp, N, 0); };
        auto backward = [&]() { reset(); gelu_backward_inplace(d_out, d_inp, N, 0); };
        check_and_time(&pg, "version 2 (llmc) forward", forward, d_out, ref_out, N, tol, 100);
        check_and_time(&pg, "version 2 (llmc) backward", backward, d_out, ref_dinp, N, tol, 100, note);
    }
    free(inp); free(dout); free(ref_out); free(ref_dinp);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out));
    printf("gelu: all versions match the CPU reference\n");
    return 0;
}
