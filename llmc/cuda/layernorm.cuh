/*
llmc/cuda/layernorm.cuh: layernorm forward/backward and the fused residual + layernorm forward.

    layernorm_forward(out, mean, rstd, inp, weight, bias, N, C)       one warp per row, N = B*T
    fused_residual_forward(residual, out, mean, rstd, inp1, inp2, weight, bias, N, C)
        residual = inp1 + inp2, then out = layernorm(residual): one pass over the row instead of two kernels
    layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, N, C)
        dinp += ..., dweight += ..., dbias += ... (deterministic column sums, no atomics)

Statistics are float32 whatever the activation type; the variance is the two-pass (x - mean)^2
form, the same as the CPU trainer's; eps is layer_math.h's LAYERNORM_EPS (1e-5, as in GPT-2).
*/
#ifndef LLMC_LAYERNORM_CUH
#define LLMC_LAYERNORM_CUH

#include "cuda_common.cuh"
#include "matmul.cuh"

#define LAYERNORM_ROW_CHUNKS 32

// one warp normalises one row of `row` (C values) and writes out/mean/rstd
__device__ static inline void layernorm_row(floatX* out, float* mean_out, float* rstd_out, const floatX* row,
                                            const floatX* weight, const floatX* bias, int C, int lane) {
    float sum = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) { sum += to_float(row[c]); }
    float m = warp_reduce_sum(sum) / C;
    float var_sum = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        float d = to_float(row[c]) - m;
        var_sum += d * d;
    }
    float var = warp_reduce_sum(var_sum) / C;
    float s = rsqrtf(var + LAYERNORM_EPS);
    for (int c = lane; c < C; c += WARP_SIZE) {
        float n = (to_float(row[c]) - m) * s;
        out[c] = (floatX)(n * to_float(weight[c]) + to_float(bias[c]));
    }
    if (lane == 0) {
        if (mean_out != NULL) { *mean_out = m; }
        if (rstd_out != NULL) { *rstd_out = s; }
    }
}

// out (N, C), mean (N), rstd (N), inp (N, C)
__global__ static void layernorm_forward_kernel(floatX* out, float* mean, float* rstd, const floatX* inp,
                                                const floatX* weight, const floatX* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) { return; }
    layernorm_row(out + (size_t)row * C, mean != NULL ? mean + row : NULL, rstd != NULL ? rstd + row : NULL,
                  inp + (size_t)row * C, weight, bias, C, lane);
}

static inline void layernorm_forward(floatX* out, float* mean, float* rstd, const floatX* inp,
                                     const floatX* weight, const floatX* bias, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int rows_per_block = block_size / WARP_SIZE;
    layernorm_forward_kernel<<<ceil_div(N, rows_per_block), block_size, 0, stream>>>(out, mean, rstd, inp, weight, bias, N, C);
    cudaCheckLaunch();
}

// residual (N, C) = inp1 + inp2; out = layernorm(residual)
__global__ static void fused_residual_forward_kernel(floatX* residual, floatX* out, float* mean, float* rstd,
                                                     const floatX* inp1, const floatX* inp2,
                                                     const floatX* weight, const floatX* bias, int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) { return; }
    size_t off = (size_t)row * C;
    residual_add_row(residual + off, inp1 + off, inp2 + off, C, lane);
    layernorm_row(out + off, mean + row, rstd + row, residual + off, weight, bias, C, lane);
}

static inline void fused_residual_forward(floatX* residual, floatX* out, float* mean, float* rstd,
                                          const floatX* inp1, const floatX* inp2, const floatX* weight, const floatX* bias,
                                          int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int rows_per_block = block_size / WARP_SIZE;
    fused_residual_forward_kernel<<<ceil_div(N, rows_per_block), block_size, 0, stream>>>(
        residual, out, mean, rstd, inp1, inp2, weight, bias, N, C);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// backward

// dinp (N, C) += layernorm input gradient; one warp per row
__global__ static void layernorm_backward_dinp_kernel(floatX* dinp, const floatX* dout, const floatX* inp,
                                                      const floatX* weight, const float* mean, const float* rstd,
                                                      int N, int C) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= N) { return; }
    size_t off = (size_t)row * C;
    float m = mean[row];
    float s = rstd[row];
    float dnorm_sum = 0.0f;
    float dnorm_norm_sum = 0.0f;
    for (int c = lane; c < C; c += WARP_SIZE) {
        float n = (to_float(inp[off + c]) - m) * s;
        float dnorm = to_float(weight[c]) * to_float(dout[off + c]);
        dnorm_sum += dnorm;
        dnorm_norm_sum += dnorm * n;
    }
    float dnorm_mean = warp_reduce_sum(dnorm_sum) / C;
    float dnorm_norm_mean = warp_reduce_sum(dnorm_norm_sum) / C;
    for (int c = lane; c < C; c += WARP_SIZE) {
        float n = (to_float(inp[off + c]) - m) * s;
        float dnorm = to_float(weight[c]) * to_float(dout[off + c]);
        float dval = (dnorm - dnorm_mean - n * dnorm_norm_mean) * s;
        dinp[off + c] = (floatX)(to_float(dinp[off + c]) + dval);
    }
}

// partial column sums of dout * norm (-> dweight) and dout (-> dbias) over a chunk of rows
// block (32 columns, 8 row lanes), grid (C/32, LAYERNORM_ROW_CHUNKS); partial: (2, chunks, C)
__global__ static void layernorm_backward_partial_kernel(float* partial, const floatX* dout, const floatX* inp,
                                                         const float* mean, const float* rstd, int N, int C) {
    __shared__ float acc_w[8][32];
    __shared__ float acc_b[8][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    int row_start, row_end;
    row_chunk(N, (int)gridDim.y, (int)blockIdx.y, &row_start, &row_end);
    float sw = 0.0f, sb = 0.0f;
    if (c < C) {
        for (int n = row_start + threadIdx.y; n < row_end; n += blockDim.y) {
            float d = to_float(dout[(size_t)n * C + c]);
            float norm = (to_float(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
            sw += d * norm;
            sb += d;
        }
    }
    acc_w[threadIdx.y][threadIdx.x] = sw;
    acc_b[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int k = 0; k < 8; k++) {
            tw += acc_w[k][threadIdx.x];
            tb += acc_b[k][threadIdx.x];
        }
        partial[(size_t)blockIdx.y * C + c] = tw;
        partial[(size_t)(gridDim.y + blockIdx.y) * C + c] = tb;
    }
}

__global__ static void layernorm_backward_final_kernel(floatX* dweight, floatX* dbias, const float* partial, int C, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float tw = to_float(dweight[c]);
    float tb = to_float(dbias[c]);
    for (int k = 0; k < chunks; k++) {
        tw += partial[(size_t)k * C + c];
        tb += partial[(size_t)(chunks + k) * C + c];
    }
    dweight[c] = (floatX)tw;
    dbias[c] = (floatX)tb;
}

// scratch: at least 2 * LAYERNORM_ROW_CHUNKS * C floats
static inline void layernorm_backward(floatX* dinp, floatX* dweight, floatX* dbias, float* scratch,
                                      const floatX* dout, const floatX* inp, const floatX* weight,
                                      const float* mean, const float* rstd, int N, int C, cudaStream_t stream) {
    const int block_size = 256;
    const int rows_per_block = block_size / WARP_SIZE;
    layernorm_backward_dinp_kernel<<<ceil_div(N, rows_per_block), block_size, 0, stream>>>(dinp, dout, inp, weight, mean, rstd, N, C);
    cudaCheckLaunch();
    dim3 block(32, 8);
    dim3 grid(ceil_div(C, 32), LAYERNORM_ROW_CHUNKS);
    layernorm_backward_partial_kernel<<<grid, block, 0, stream>>>(scratch, dout, inp, mean, rstd, N, C);
    cudaCheckLaunch();
    layernorm_backward_final_kernel<<<ceil_div(C, 256), 256, 0, stream>>>(dweight, dbias, scratch, C, LAYERNORM_ROW_CHUNKS);
    cudaCheckLaunch();
}

#endif // LLMC_LAYERNORM_CUH
