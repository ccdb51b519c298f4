/*
llmc/cuda/rmsnorm.cuh: Llama's RMSNorm forward/backward and the fused residual + RMSNorm forward,
the GPU side of llmc/cpu/rmsnorm_cpu.h's rmsnorm_forward / rmsnorm_backward.

    rmsnorm_forward(out, rstd, inp, weight, eps, N, C)        one warp per row, N = B*T
        out = inp * rstd * weight, rstd = 1 / sqrt(mean(inp^2) + eps) (float32, kept for the backward)
    fused_residual_rmsnorm_forward(residual, out, rstd, inp1, inp2, weight, eps, N, C)
        residual = inp1 + inp2, then out = rmsnorm(residual): one pass over the row instead of two kernels
    rmsnorm_backward(dinp, dweight, scratch, dout, inp, weight, rstd, N, C)
        dinp += rstd * (dnorm - norm * mean(dnorm * norm)), dnorm = dout * weight, norm = inp * rstd;
        dweight += column sums of dout * norm (deterministic: a thread per row chunk and column, then the
        chunks added in order by matmul.cuh's add_partial_sums_kernel; no atomics, no shared memory)

Weightless mode (nanochat's norms): weight NULL scales by 1; the backward then takes dweight and scratch NULL.
Statistics are float32 whatever the activation type; eps is the model's norm_eps (Llama 3: 1e-5).
*/
#ifndef LLMC_RMSNORM_CUH
#define LLMC_RMSNORM_CUH

#include "cuda_common.cuh"
#include "matmul.cuh"

#define RMSNORM_ROW_CHUNKS 32

// the weight of column c, 1 in the weightless mode
__device__ static inline float rmsnorm_weight(const floatX* weight, int c) { return weight != NULL ? to_float(weight[c]) : 1.0f; }

// one warp normalises one row of C values and writes out and rstd
__device__ static inline void rmsnorm_row(floatX* out, float* rstd_out, const floatX* row, const floatX* weight,
                                          float eps, int C, int lane) {
    float ss = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        float x = to_float(row[c]);
        ss += x * x;
    }
    float s = rsqrtf(warp_reduce_sum(ss) / C + eps);
    for (int c = lane; c < C; c += WARP_SIZE) { out[c] = (floatX)(rmsnorm_weight(weight, c) * (to_float(row[c]) * s)); }
    if (lane == 0 && rstd_out != NULL) { *rstd_out = s; }
}

// out (N, C), rstd (N), inp (N, C), weight (C)
__global__ static void rmsnorm_forward_kernel(floatX* out, float* rstd, const floatX* inp, const floatX* weight,
                                              float eps, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) { return; }
    rmsnorm_row(out + (size_t)row * C, rstd != NULL ? rstd + row : NULL, inp + (size_t)row * C, weight, eps, C, lane);
}

static inline void rmsnorm_forward(floatX* out, float* rstd, const floatX* inp, const floatX* weight, float eps,
                                   int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int rows_per_block = block_size / WARP_SIZE;
    rmsnorm_forward_kernel<<<ceil_div(N, rows_per_block), block_size, 0, stream>>>(out, rstd, inp, weight, eps, N, C);
    cudaCheckLaunch();
}

// residual (N, C) = inp1 + inp2; out = rmsnorm(residual), computed from residual as stored (floatX)
__global__ static void fused_residual_rmsnorm_forward_kernel(floatX* residual, floatX* out, float* rstd,
                                                             const floatX* inp1, const floatX* inp2,
                                                             const floatX* weight, float eps, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) { return; }
    size_t off = (size_t)row * C;
    residual_add_row(residual + off, inp1 + off, inp2 + off, C, lane);
    rmsnorm_row(out + off, rstd + row, residual + off, weight, eps, C, lane);
}

static inline void fused_residual_rmsnorm_forward(floatX* residual, floatX* out, float* rstd, const floatX* inp1,
                                                  const floatX* inp2, const floatX* weight, float eps, int N, int C,
                                                  cudaStream_t stream) {
    const int block_size = 256;
    const int rows_per_block = block_size / WARP_SIZE;
    fused_residual_rmsnorm_forward_kernel<<<ceil_div(N, rows_per_block), block_size, 0, stream>>>(
        residual, out, rstd, inp1, inp2, weight, eps, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// backward

// dinp (N, C) += RMSNorm input gradient; one warp per row
__global__ static void rmsnorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                    const floatX* weight, const float* rstd, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) { return; }
    size_t off = (size_t)row * C;
    float s = rstd[row];
    float dot = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        dot += rmsnorm_weight(weight, c) * to_float(dout[off + c]) * (to_float(inp[off + c]) * s);
    }
    dot = warp_reduce_sum(dot) / C;
    for (int c = lane; c < C; c += WARP_SIZE) {
        float dnorm = rmsnorm_weight(weight, c) * to_float(dout[off + c]);
        float dval = s * (dnorm - to_float(inp[off + c]) * s * dot);
        dinp[off + c] = (floatX)(to_float(dinp[off + c]) + dval);
    }
}

// partial column sums of dout * norm: one thread per (row chunk, column) adds its chunk's rows in order
// (a warp reads 32 neighbouring columns of a row; no shared memory); partial (chunks, C)
__global__ static void rmsnorm_backward_partial_kernel(float* partial, const floatX* dout, const floatX* inp,
                                                       const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    int row_start, row_end;
    row_chunk(N, (int)gridDim.y, (int)blockIdx.y, &row_start, &row_end);
    float sum = 0.0f;
    for (int n = row_start; n < row_end; n++) {
        sum += to_float(dout[(size_t)n * C + c]) * (to_float(inp[(size_t)n * C + c]) * rstd[n]);
    }
    partial[(size_t)blockIdx.y * C + c] = sum;
}

// scratch: at least RMSNORM_ROW_CHUNKS * C floats; weight NULL (weightless): no dweight, dweight and scratch NULL
static inline void rmsnorm_backward(floatX* dinp, floatX* dweight, float* scratch, const floatX* dout,
                                    const floatX* inp, const floatX* weight, const float* rstd, int N, int C,
                                    cudaStream_t stream) {
    const int block_size = 256;
    const int rows_per_block = block_size / WARP_SIZE;
    rmsnorm_backward_dinp_kernel<<<ceil_div(N, rows_per_block), block_size, 0, stream>>>(dinp, dout, inp, weight, rstd, N, C);
    cudaCheckLaunch();
    if (weight == NULL) { return; }
    dim3 grid(ceil_div(C, 128), RMSNORM_ROW_CHUNKS);
    rmsnorm_backward_partial_kernel<<<grid, 128, 0, stream>>>(scratch, dout, inp, rstd, N, C);
    cudaCheckLaunch();
    add_partial_sums_kernel<<<ceil_div(C, 256), 256, 0, stream>>>(dweight, scratch, C, RMSNORM_ROW_CHUNKS);
    cudaCheckLaunch();
}

#endif // LLMC_RMSNORM_CUH
