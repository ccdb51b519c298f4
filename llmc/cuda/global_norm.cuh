/*
llmc/cuda/global_norm.cuh: the squared L2 norm of (a slice of) the flat gradient vector.

    global_norm_squared(out, partial, grads, n, stream)   out[0] = sum of grads[i]^2 over i < n
    global_norm_block_sum(grads, n)                        device: one block's grid-stride share of that sum

Deterministic: a fixed number of blocks (independent of the GPU) each sums a fixed grid-stride
subset in fp32, then one block adds the per-block sums in order. With ZeRO-1 each rank calls it
on its own shard and the trainer all-reduces the scalar (sum) before taking the square root.
*/
#ifndef LLMC_GLOBAL_NORM_CUH
#define LLMC_GLOBAL_NORM_CUH

#include "cuda_common.cuh"

#define GLOBAL_NORM_BLOCKS 512

// the block's sum of grads[i]^2 over its grid-stride subset of i < n (valid in every thread)
__device__ static inline float global_norm_block_sum(const floatX* grads, size_t n) {
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = to_float(grads[i]);
        sum += g * g;
    }
    return block_reduce_sum(sum);
}

__global__ static void global_norm_partial_kernel(float* partial, const floatX* grads, size_t n) {
    float block_sum = global_norm_block_sum(grads, n);
    if (threadIdx.x == 0) { partial[blockIdx.x] = block_sum; }
}

__global__ static void global_norm_final_kernel(float* out, const float* partial, int num_partial) {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < num_partial; i += blockDim.x) { sum += partial[i]; }
    float total = block_reduce_sum(sum);
    if (threadIdx.x == 0) { out[0] = total; }
}

// partial: GLOBAL_NORM_BLOCKS floats of scratch
static inline void global_norm_squared(float* out, float* partial, const floatX* grads, size_t n, cudaStream_t stream) {
    const int block_size = 512;
    global_norm_partial_kernel<<<GLOBAL_NORM_BLOCKS, block_size, 0, stream>>>(partial, grads, n);
    cudaCheckLaunch();
    global_norm_final_kernel<<<1, 1024, 0, stream>>>(out, partial, GLOBAL_NORM_BLOCKS);
    cudaCheckLaunch();
}

#endif // LLMC_GLOBAL_NORM_CUH
