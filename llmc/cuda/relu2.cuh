/*
llmc/cuda/relu2.cuh: nanochat's MLP activation ReLU^2, forward and backward each one kernel.

    relu2_forward(out, inp, N)             out = relu(inp)^2
    relu2_backward(dinp, dout, inp, N)     dinp = dout * 2 relu(inp) (written; dinp may be dout: in place)

All (N) = (B,T,FFN), one thread per 128-bit packet: N must be a multiple of the packet (8 in BF16, 4 in FP32).
The scalar rule is the host half (plain C, dev/test/test_nanochat_kernels_host.c checks it on the CPU).
*/
#ifndef LLMC_RELU2_CUH
#define LLMC_RELU2_CUH

#include "../host_device.h"

// ----------------------------------------------------------------------------
// host half

static inline HD float relu2_value(float x) { return x > 0.0f ? x * x : 0.0f; }

// d relu(x)^2 / dx
static inline HD float relu2_grad(float x) { return x > 0.0f ? 2.0f * x : 0.0f; }

// ----------------------------------------------------------------------------
// device half

#ifdef __CUDACC__
#include "cuda_common.cuh"

__global__ static void relu2_forward_kernel(floatX* out, const floatX* inp, size_t N) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= N) { return; }
    x128 x = load128cs(inp + idx);
    x128 o;
    for (int k = 0; k < x128::size; k++) { o[k] = (floatX)relu2_value(to_float(x[k])); }
    store128(out + idx, o);
}

__global__ static void relu2_backward_kernel(floatX* dinp, const floatX* dout, const floatX* inp, size_t N) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= N) { return; }
    x128 d = load128(dout + idx);
    x128 x = load128cs(inp + idx);
    x128 di;
    for (int k = 0; k < x128::size; k++) { di[k] = (floatX)(to_float(d[k]) * relu2_grad(to_float(x[k]))); }
    store128(dinp + idx, di);
}

static inline void relu2_check(size_t N) {
    if (N % x128::size != 0) { llmc_die("relu2: %zu values are not a multiple of %d (128-bit packets)", N, x128::size); }
}

static inline void relu2_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {
    relu2_check(N);
    const int block_size = 256;
    relu2_forward_kernel<<<ceil_div(N / x128::size, block_size), block_size, 0, stream>>>(out, inp, N);
    cudaCheckLaunch();
}

static inline void relu2_backward(floatX* dinp, const floatX* dout, const floatX* inp, size_t N, cudaStream_t stream) {
    relu2_check(N);
    const int block_size = 256;
    relu2_backward_kernel<<<ceil_div(N / x128::size, block_size), block_size, 0, stream>>>(dinp, dout, inp, N);
    cudaCheckLaunch();
}

#endif // __CUDACC__

#endif // LLMC_RELU2_CUH
