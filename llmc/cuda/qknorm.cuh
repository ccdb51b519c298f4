/*
llmc/cuda/qknorm.cuh: nanochat's QK-norm, a weightless RMSNorm of every query and key head (after RoPE), forward
and backward, in place in the (B, T, row) projection whose first nheads heads of HS are q's and k's.

    qknorm_forward(x, rstd, N, row, nheads, HS, eps)   one warp per head: x <- x * rstd,
        rstd = 1 / sqrt(mean(x^2) + eps) (N = B*T tokens; rstd (N, nheads) float32, kept for the backward)
    qknorm_backward(dx, y, rstd, N, row, nheads, HS)   dx <- rstd * (dx - y * mean(dx * y)), in place in the
        gradient, y the normalised heads the forward left (a weightless norm's output is its normalised input,
        so the input itself is not kept)

The head's row is rmsnorm.cuh's (weightless mode).
*/
#ifndef LLMC_QKNORM_CUH
#define LLMC_QKNORM_CUH

#include "cuda_common.cuh"
#include "rmsnorm.cuh"

// head h of token n: its HS values in x (N, row)
__device__ static inline size_t qknorm_head_offset(int head, int nheads, int row, int HS) {
    return (size_t)(head / nheads) * row + (size_t)(head % nheads) * HS;
}

// x (N, row) in place, rstd (N, nheads); one warp per head of one token
__global__ static void qknorm_forward_kernel(floatX* x, float* rstd, int N, int row, int nheads, int HS, float eps) {
    int head = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (head >= N * nheads) { return; }
    floatX* v = x + qknorm_head_offset(head, nheads, row, HS);
    rmsnorm_row(v, rstd + head, v, NULL, eps, HS, lane);
}

// dx (N, row) in place from y (N, row) and rstd (N, nheads); one warp per head of one token
__global__ static void qknorm_backward_kernel(floatX* dx, const floatX* y, const float* rstd, int N, int row, int nheads,
                                              int HS) {
    int head = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (head >= N * nheads) { return; }
    size_t off = qknorm_head_offset(head, nheads, row, HS);
    float s = rstd[head];
    float dot = 0.0f;
    for (int c = lane; c < HS; c += WARP_SIZE) { dot += to_float(dx[off + c]) * to_float(y[off + c]); }
    dot = warp_reduce_sum(dot) / HS;
    for (int c = lane; c < HS; c += WARP_SIZE) {
        dx[off + c] = (floatX)(s * (to_float(dx[off + c]) - to_float(y[off + c]) * dot));
    }
}

static inline void qknorm_forward(floatX* x, float* rstd, int N, int row, int nheads, int HS, float eps, cudaStream_t stream) {
    const int block_size = 256;
    const int heads_per_block = block_size / WARP_SIZE;
    qknorm_forward_kernel<<<ceil_div((size_t)N * nheads, heads_per_block), block_size, 0, stream>>>(x, rstd, N, row, nheads, HS, eps);
    cudaCheckLaunch();
}

static inline void qknorm_backward(floatX* dx, const floatX* y, const float* rstd, int N, int row, int nheads, int HS,
                                   cudaStream_t stream) {
    const int block_size = 256;
    const int heads_per_block = block_size / WARP_SIZE;
    qknorm_backward_kernel<<<ceil_div((size_t)N * nheads, heads_per_block), block_size, 0, stream>>>(dx, y, rstd, N, row, nheads, HS);
    cudaCheckLaunch();
}

#endif // LLMC_QKNORM_CUH
