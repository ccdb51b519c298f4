/*
llmc/cuda/swiglu.cuh: Llama's SwiGLU, forward and backward each one fused kernel, the GPU side of
llmc/cpu/swiglu_cpu.h's swiglu_forward / swiglu_backward.

    swiglu_forward(out, gate, up, N)                   out = silu(gate) * up, silu(g) = g * sigmoid(g)
    swiglu_backward(dgate, dup, dout, gate, up, N)     dgate = dout * up * sig * (1 + g (1 - sig)),
                                                       dup = dout * silu(gate) (written, where the CPU
                                                       adds into zeroed buffers)

All (N) = (B,T,FFN), one thread per 128-bit packet: N must be a multiple of the packet (8 in BF16, 4 in FP32).
*/
#ifndef LLMC_SWIGLU_CUH
#define LLMC_SWIGLU_CUH

#include "cuda_common.cuh"

__device__ static inline float swiglu_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ static void swiglu_forward_kernel(floatX* out, const floatX* gate, const floatX* up, size_t N) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= N) { return; }
    x128 g = load128cs(gate + idx);
    x128 u = load128cs(up + idx);
    x128 o;
    for (int k = 0; k < x128::size; k++) {
        float gk = to_float(g[k]);
        o[k] = (floatX)(gk * swiglu_sigmoid(gk) * to_float(u[k]));
    }
    store128(out + idx, o);
}

__global__ static void swiglu_backward_kernel(floatX* dgate, floatX* dup, const floatX* dout, const floatX* gate,
                                              const floatX* up, size_t N) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= N) { return; }
    x128 d = load128cs(dout + idx);
    x128 g = load128cs(gate + idx);
    x128 u = load128cs(up + idx);
    x128 dg, du;
    for (int k = 0; k < x128::size; k++) {
        float gk = to_float(g[k]), dk = to_float(d[k]);
        float sig = swiglu_sigmoid(gk);
        dg[k] = (floatX)(dk * to_float(u[k]) * sig * (1.0f + gk * (1.0f - sig)));
        du[k] = (floatX)(dk * gk * sig);
    }
    store128(dgate + idx, dg);
    store128(dup + idx, du);
}

static inline void swiglu_check(size_t N) {
    if (N % x128::size != 0) { llmc_die("swiglu: %zu values are not a multiple of %d (128-bit packets)", N, x128::size); }
}

static inline void swiglu_forward(floatX* out, const floatX* gate, const floatX* up, size_t N, cudaStream_t stream) {
    swiglu_check(N);
    const int block_size = 256;
    swiglu_forward_kernel<<<ceil_div(N / x128::size, block_size), block_size, 0, stream>>>(out, gate, up, N);
    cudaCheckLaunch();
}

static inline void swiglu_backward(floatX* dgate, floatX* dup, const floatX* dout, const floatX* gate, const floatX* up,
                                   size_t N, cudaStream_t stream) {
    swiglu_check(N);
    const int block_size = 256;
    swiglu_backward_kernel<<<ceil_div(N / x128::size, block_size), block_size, 0, stream>>>(dgate, dup, dout, gate, up, N);
    cudaCheckLaunch();
}

#endif // LLMC_SWIGLU_CUH
