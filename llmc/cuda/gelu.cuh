/*
llmc/cuda/gelu.cuh: GELU (tanh approximation), forward and backward, elementwise.

    gelu_forward(out, inp, N)            out = gelu(inp)
    gelu_backward_inplace(d_in_out, inp, N)   d = d * gelu'(inp)

The math is layer_math.h's gelu_tanh_forward / gelu_tanh_grad, the same functions the CPU trainer
calls, so the CPU tests check the formula the GPU runs. When cuBLASLt's GELU epilogues are used
(the trainer's default), these kernels serve recompute and the dev/cuda reference.
*/
#ifndef LLMC_GELU_CUH
#define LLMC_GELU_CUH

#include "cuda_common.cuh"

// N a multiple of x128::size (always true: N = B*T*4C)
__global__ static void gelu_forward_kernel(floatX* out, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) { return; }
    x128 packed_out;
    x128 packed_inp = load128cs(inp + i);
    for (int k = 0; k < x128::size; k++) {
        packed_out[k] = (floatX)gelu_tanh_forward(to_float(packed_inp[k]));
    }
    store128(out + i, packed_out);
}

__global__ static void gelu_backward_inplace_kernel(floatX* d_in_out, const floatX* inp, size_t N) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (i >= N) { return; }
    x128 packed_d = load128(d_in_out + i);
    x128 packed_inp = load128cs(inp + i);
    for (int k = 0; k < x128::size; k++) {
        packed_d[k] = (floatX)(to_float(packed_d[k]) * gelu_tanh_grad(to_float(packed_inp[k])));
    }
    store128(d_in_out + i, packed_d);
}

static inline void gelu_forward(floatX* out, const floatX* inp, size_t N, cudaStream_t stream) {
    const int block_size = 256;
    if (N % x128::size != 0) { llmc_die("gelu_forward: %zu elements is not a multiple of %d", N, x128::size); }
    gelu_forward_kernel<<<ceil_div(N, (size_t)block_size * x128::size), block_size, 0, stream>>>(out, inp, N);
    cudaCheckLaunch();
}

static inline void gelu_backward_inplace(floatX* d_in_out, const floatX* inp, size_t N, cudaStream_t stream) {
    const int block_size = 256;
    if (N % x128::size != 0) { llmc_die("gelu_backward: %zu elements is not a multiple of %d", N, x128::size); }
    gelu_backward_inplace_kernel<<<ceil_div(N, (size_t)block_size * x128::size), block_size, 0, stream>>>(d_in_out, inp, N);
    cudaCheckLaunch();
}

#endif // LLMC_GELU_CUH
