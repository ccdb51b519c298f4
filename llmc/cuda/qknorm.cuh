/*
llmc/cuda/qknorm.cuh: QK-norm, an RMSNorm of every query and key head, forward and backward, in place in the (B, T, row)
projection; the GPU side of llmc/cpu/qknorm_cpu.h, with its names and its rule: a NULL weight is the weightless norm
(nanochat's, after RoPE), a weight (HS) scales every head it normalises (Qwen3's q_norm on its q heads and k_norm on
its k heads, before RoPE: one call for each).

    qknorm_forward(x, rstd, inp, weight, N, row, nheads, HS, eps)   one warp per head: the first nheads heads of HS
        values of each of the N rows of x (N, row) normalised in place, x <- weight * (x * rstd),
        rstd = 1 / sqrt(mean(x^2) + eps) kept in rstd (N, nheads) float32; with a weight, inp (N, nheads HS) receives
        the heads as they were, which the weighted backward reads
    qknorm_backward(dx, dweight, scratch, y, inp, weight, rstd, N, row, nheads, HS)   in place on the same heads: dx,
        the gradient of the normalised heads, becomes that of their input. Weightless (weight, dweight, scratch, inp
        NULL): dx <- rstd * (dx - y * mean(dx * y)) from y (N, row), the normalised heads the forward left (so the input
        is not kept). Weighted: dx <- rstd * (w dx - norm * mean(w dx * norm)), norm = inp * rstd, and
        dweight (HS) += the column sums of dx * norm over every row and head, taken first (deterministic: a thread per
        row chunk and column, the chunks added in order; scratch RMSNORM_ROW_CHUNKS * HS floats)

N = B*T tokens, row = QKV = (NH + 2 NKV) HS: nanochat passes nheads = NH + NKV (the q heads, then the k heads, at the
start of each row), Qwen3 x at the q heads with nheads = NH, then x + NH HS with nheads = NKV. A head's row is
rmsnorm.cuh's.
*/
#ifndef LLMC_QKNORM_CUH
#define LLMC_QKNORM_CUH

#include "cuda_common.cuh"
#include "rmsnorm.cuh"
#include "matmul.cuh"

// head h of token n: its HS values in x (N, row)
__device__ static inline size_t qknorm_head_offset(int head, int nheads, int row, int HS) {
    return (size_t)(head / nheads) * row + (size_t)(head % nheads) * HS;
}

// x (N, row) in place, rstd (N, nheads), inp (N, nheads HS) or NULL, weight (HS) or NULL; one warp per head of one token
__global__ static void qknorm_forward_kernel(floatX* x, float* rstd, floatX* inp, const floatX* weight, int N, int row,
                                             int nheads, int HS, float eps) {
    int head = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (head >= N * nheads) { return; }
    floatX* v = x + qknorm_head_offset(head, nheads, row, HS);
    if (inp != NULL) {  // the head as it was, for the weighted backward (each lane copies the values it reads after)
        for (int c = lane; c < HS; c += WARP_SIZE) { inp[(size_t)head * HS + c] = v[c]; }
    }
    rmsnorm_row(v, rstd + head, v, weight, eps, HS, lane);
}

// weightless: dx (N, row) in place from y (N, row) and rstd (N, nheads); one warp per head of one token
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

// weighted: dx (N, row) in place from the kept input inp (N, nheads HS), weight (HS) and rstd (N, nheads); one warp
// per head of one token (rmsnorm.cuh's backward row)
__global__ static void qknorm_weighted_backward_kernel(floatX* dx, const floatX* inp, const floatX* weight, const float* rstd,
                                                       int N, int row, int nheads, int HS) {
    int head = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (head >= N * nheads) { return; }
    size_t off = qknorm_head_offset(head, nheads, row, HS);
    const floatX* x = inp + (size_t)head * HS;
    float s = rstd[head];
    float dot = 0.0f;
    for (int c = lane; c < HS; c += WARP_SIZE) { dot += to_float(weight[c]) * to_float(dx[off + c]) * (to_float(x[c]) * s); }
    dot = warp_reduce_sum(dot) / HS;
    for (int c = lane; c < HS; c += WARP_SIZE) {
        float dnorm = to_float(weight[c]) * to_float(dx[off + c]);
        dx[off + c] = (floatX)(s * (dnorm - to_float(x[c]) * s * dot));
    }
}

// partial column sums of dy * norm over the N * nheads heads: one thread per (head chunk, column) adds its chunk's
// heads in order; partial (chunks, HS)
__global__ static void qknorm_dweight_partial_kernel(float* partial, const floatX* dy, const floatX* inp, const float* rstd,
                                                     int N, int row, int nheads, int HS) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= HS) { return; }
    int head_start, head_end;
    row_chunk(N * nheads, (int)gridDim.y, (int)blockIdx.y, &head_start, &head_end);
    float sum = 0.0f;
    for (int head = head_start; head < head_end; head++) {
        sum += to_float(dy[qknorm_head_offset(head, nheads, row, HS) + c]) * (to_float(inp[(size_t)head * HS + c]) * rstd[head]);
    }
    partial[(size_t)blockIdx.y * HS + c] = sum;
}

static inline void qknorm_forward(floatX* x, float* rstd, floatX* inp, const floatX* weight, int N, int row, int nheads, int HS,
                                  float eps, cudaStream_t stream) {
    const int block_size = 256;
    const int heads_per_block = block_size / WARP_SIZE;
    qknorm_forward_kernel<<<ceil_div((size_t)N * nheads, heads_per_block), block_size, 0, stream>>>(
        x, rstd, weight != NULL ? inp : NULL, weight, N, row, nheads, HS, eps);
    cudaCheckLaunch();
}

static inline void qknorm_backward(floatX* dx, floatX* dweight, float* scratch, const floatX* y, const floatX* inp,
                                   const floatX* weight, const float* rstd, int N, int row, int nheads, int HS,
                                   cudaStream_t stream) {
    const int block_size = 256;
    const int heads_per_block = block_size / WARP_SIZE;
    if (weight == NULL) {
        qknorm_backward_kernel<<<ceil_div((size_t)N * nheads, heads_per_block), block_size, 0, stream>>>(dx, y, rstd, N, row,
                                                                                                          nheads, HS);
        cudaCheckLaunch();
        return;
    }
    // the weight's gradient first, from dx as it came
    dim3 grid(ceil_div(HS, 128), RMSNORM_ROW_CHUNKS);
    qknorm_dweight_partial_kernel<<<grid, 128, 0, stream>>>(scratch, dx, inp, rstd, N, row, nheads, HS);
    cudaCheckLaunch();
    add_partial_sums_kernel<<<ceil_div(HS, 256), 256, 0, stream>>>(dweight, scratch, HS, RMSNORM_ROW_CHUNKS);
    cudaCheckLaunch();
    qknorm_weighted_backward_kernel<<<ceil_div((size_t)N * nheads, heads_per_block), block_size, 0, stream>>>(
        dx, inp, weight, rstd, N, row, nheads, HS);
    cudaCheckLaunch();
}

#endif // LLMC_QKNORM_CUH
