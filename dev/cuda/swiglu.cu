/*
dev/cuda/swiglu.cu: Llama's SwiGLU, out = silu(gate) * up, and its backward (dgate, dup) fused, against
llmc/cpu/swiglu_cpu.h's swiglu_forward / swiglu_backward, over (B,T,FFN) values.

    version 1: one thread per value, forward and backward
    version 2: the production kernels (llmc/cuda/swiglu.cuh): one thread per 128-bit packet

usage: ./swiglu [version] [--quick]   (full: B*T*FFN at B=8, T=1024 and FFN = 2048, 16.8M values)
*/
#include "common.h"
#include "../../llmc/cpu/swiglu_cpu.h"
#include "../../llmc/cuda/swiglu.cuh"

__global__ static void swiglu_forward_v1(floatX* out, const floatX* gate, const floatX* up, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float g = to_float(gate[i]);
    out[i] = (floatX)(g / (1.0f + expf(-g)) * to_float(up[i]));
}

__global__ static void swiglu_backward_v1(floatX* dgate, floatX* dup, const floatX* dout, const floatX* gate,
                                          const floatX* up, size_t N) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) { return; }
    float g = to_float(gate[i]), d = to_float(dout[i]);
    float sig = 1.0f / (1.0f + expf(-g));
    dgate[i] = (floatX)(d * to_float(up[i]) * (sig + g * sig * (1.0f - sig)));
    dup[i] = (floatX)(d * g * sig);
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "swiglu", 8, 1024);
    const size_t N = (size_t)pg.shape.B * pg.shape.T * pg.shape.FFN;
    printf("  FFN=%d: %zu values\n", pg.shape.FFN, N);
    // gate in [-4, 4): silu's curved part and both tails
    float* gate = make_random_float(N, 1);
    for (size_t i = 0; i < N; i++) { gate[i] *= 4.0f; }
    float *up, *dout;
    floatX* d_gate = to_device(gate, N);
    floatX* d_up = random_input(&up, N, 2);
    floatX* d_dout = random_input(&dout, N, 3);
    float* ref_out = (float*)mallocCheck(N * sizeof(float));
    swiglu_forward(ref_out, gate, up, N);
    float* ref_dgate = (float*)callocCheck(N, sizeof(float));
    float* ref_dup = (float*)callocCheck(N, sizeof(float));
    swiglu_backward(ref_dgate, ref_dup, dout, gate, up, N);
    floatX* d_out = device_alloc<floatX>(N);
    floatX* d_dgate = device_alloc<floatX>(N);
    floatX* d_dup = device_alloc<floatX>(N);
    const float tol = precision_tol(1e-4f, 1e-2f);
    for (int version = 1; version <= 2; version++) {
        if (!version_selected(&pg, version)) { continue; }
        auto forward = [&]() {
            if (version == 1) {
                swiglu_forward_v1<<<ceil_div(N, 256), 256>>>(d_out, d_gate, d_up, N);
                cudaCheckLaunch();
            } else {
                swiglu_forward(d_out, d_gate, d_up, N, 0);
            }
        };
        auto backward = [&]() {
            if (version == 1) {
                swiglu_backward_v1<<<ceil_div(N, 256), 256>>>(d_dgate, d_dup, d_dout, d_gate, d_up, N);
                cudaCheckLaunch();
            } else {
                swiglu_backward(d_dgate, d_dup, d_dout, d_gate, d_up, N, 0);
            }
        };
        const char* name = version == 1 ? "version 1" : "version 2 (llmc)";
        char label[64];
        snprintf(label, sizeof(label), "%s forward", name);
        check_and_time(&pg, label, forward, d_out, ref_out, N, tol, 100);
        backward();
        snprintf(label, sizeof(label), "%s backward dgate", name);
        validate_result(d_dgate, ref_dgate, label, N, tol);
        snprintf(label, sizeof(label), "%s backward dup", name);
        validate_result(d_dup, ref_dup, label, N, tol);
        printf("%s backward: %.3f ms%s\n", name, benchmark_kernel(&pg, 100, backward), timing_note(&pg));
    }
    free(gate); free(up); free(dout); free(ref_out); free(ref_dgate); free(ref_dup);
    cudaCheck(cudaFree(d_gate)); cudaCheck(cudaFree(d_up)); cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dgate)); cudaCheck(cudaFree(d_dup));
    printf("swiglu: all versions match the CPU reference\n");
    return 0;
}
