/*
llmc/cuda/muon.cuh: Muon (torch.optim.Muon) on the GPU, for the blocks' 2-D weights (qkvw, attprojw, fcw,
fcprojw of every layer, qkvw as its q, k and v rows where the family splits it; AdamW keeps everything else). The GPU counterpart of llmc/cpu/muon.h (the CPU
trainer's update of one matrix): the same rules and the same settings (llmc/muon_config.h: MuonConfig, the codes, the
Newton-Schulz coefficients, muon_adjusted_lr, the -op / -oa parsers).

Host half (plain C):
    muon_plan_table(dims, blocks, per_layer, is_matrix, n, owners, rank, out, state_size)   the same for any
                                        model's tensor table (dims[k] = slices, rows, cols): the per-layer 2-D
                                        weights, each layer's slice whole or cut into the row blocks of blocks[k]
                                        (llmc/decoder.h decoder_muon_row_blocks: nanochat's q, k, v; NULL: whole)
    muon_plan(cfg, owners, rank, out)   the 4 L Muon matrices (MuonMatrix: flat offset, rows, cols), in
                                        checkpoint order, each given to one owner: with owners = 1 every
                                        matrix is this rank's; with owners = P (ZeRO-1) largest first to
                                        the least loaded rank (ties: the lower rank; zero.h zero_assign_whole,
                                        as train_gpt2.c and train_gpt2.py), so each rank updates
                                        whole matrices and the ranks' element counts are balanced. Returns
                                        the count; state_offset is the matrix's place in this rank's Muon
                                        state (momentum, master weights), SIZE_MAX when another rank owns it.

Device half:
    muon_workspace_init(ws, max_rows_cols_product, max_min_dim) / muon_workspace_free(ws)
    muon_update_matrix(ctx, ws, params, master, grads, buf, m, lr, weight_decay, grad_scale, settings, seed, stream)
        one matrix m: params[m.offset ..] (floatX, rows x cols row-major) from grads (floatX, same place)
        times grad_scale; buf and master (fp32, or NULL) are this rank's state at m.state_offset

Per matrix it computes what torch's _single_tensor_muon computes, with g the clipped fp32 gradient:
    buf = buf.lerp(g, 1 - momentum)                       // buf + (1 - momentum) (g - buf)
    u   = nesterov ? g.lerp(buf, momentum) : buf          // buf - (1 - momentum) (buf - g)
    X   = floatX(u), transposed when rows > cols          // X is (r, n) with r <= n
    X   = X / max(||X||_F, 1e-7)                          // norm summed in fp32, then rounded to floatX
    ns_steps times (torch's quintic coefficients a, b, c):
        A = X X^T            // (r, r)
        B = b A + c A A      // (r, r)
        X = a X + B X        // (r, n)
    each a cuBLASLt GEMM (the trainer's, llmc/cuda/matmul.cuh gemm_lt_typed) on floatX operands with fp32
    accumulation and one rounding of the result to floatX, as torch's matmul / addmm in that dtype
    param = param (1 - lr weight_decay) - muon_adjusted_lr(lr) X (transposed back)
The iteration runs in the build's precision: bf16 in BF16 builds, as torch.optim.Muon (which always
uses bf16); fp32 in FP32 builds, as the debug state's reference (train_gpt2.py MuonNS in float32).
bf16 parameters are written from the fp32 result with the stochastic rounding of the AdamW path (a hash of
seed and the flat index), so the result does not depend on which rank updated the matrix.
*/
#ifndef LLMC_MUON_CUH
#define LLMC_MUON_CUH

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "../utils.h"
#include "../zero.h"
#include "../gpt2.h"
#include "../muon_config.h"

// ----------------------------------------------------------------------------
// host half

typedef struct {
    size_t offset;        // first element in the flat parameter vector
    size_t rows, cols;    // the weight's shape, row-major
    int owner;            // the rank that updates it
    size_t state_offset;  // where its momentum (and master weights) start in the owner's Muon state; SIZE_MAX elsewhere
} MuonMatrix;

// A model's Muon matrices: every slice of the tensors that are per layer and 2-D (the blocks' weights), from its
// table in file order (dims[k] = slices, rows, cols), each slice cut into the row blocks of blocks[k] (NULL: whole).
// Fills out (capacity: the slices of those tensors times MUON_MAX_ROW_BLOCKS) and returns the number of matrices;
// *state_size: this rank's Muon state in elements.
static inline int muon_plan_table(const size_t (*dims)[3], const size_t (*blocks)[MUON_MAX_ROW_BLOCKS],
                                  const int* per_layer, const int* is_matrix, int num_tensors, int owners, int rank,
                                  MuonMatrix* out, size_t* state_size) {
    size_t offset = 0;
    int n = 0;
    for (int i = 0; i < num_tensors; i++) {
        size_t per = dims[i][1] * dims[i][2];
        for (size_t l = 0; l < dims[i][0] && per_layer[i] && is_matrix[i]; l++) {
            size_t row = 0, block_rows;
            for (int b = 0; (block_rows = muon_block_rows(blocks, i, b, dims[i][1])) > 0; b++) {
                out[n].offset = offset + l * per + row * dims[i][2];
                out[n].rows = block_rows;
                out[n].cols = dims[i][2];
                out[n].owner = 0;
                out[n].state_offset = SIZE_MAX;
                n++;
                row += block_rows;
            }
        }
        offset += dims[i][0] * per;
    }
    // zero.h's rule (train_gpt2.c and train_gpt2.py assign the same way): largest first, each to the least loaded rank
    if (owners < 1) { owners = 1; }
    size_t* sizes = (size_t*)mallocCheck(((size_t)n + 1) * sizeof(size_t));
    size_t* load = (size_t*)mallocCheck((size_t)owners * sizeof(size_t));
    int* owner = (int*)mallocCheck(((size_t)n + 1) * sizeof(int));
    for (int j = 0; j < n; j++) { sizes[j] = out[j].rows * out[j].cols; }
    zero_assign_whole(sizes, n, owners, owner, load);
    for (int j = 0; j < n; j++) { out[j].owner = owner[j]; }
    free(sizes);
    free(load);
    free(owner);
    size_t state = 0;
    for (int j = 0; j < n; j++) {
        if (owners == 1 || out[j].owner == rank) {
            if (owners == 1) { out[j].owner = rank; }
            out[j].state_offset = state;
            state += out[j].rows * out[j].cols;
        }
    }
    *state_size = state;
    return n;
}

// GPT-2's: the 4 L matrices of qkvw, attprojw, fcw, fcprojw (out: capacity 4 L)
static inline int muon_plan(const GPT2Config* cfg, int owners, int rank, MuonMatrix* out, size_t* state_size) {
    size_t dims[GPT2_NUM_PARAMETER_TENSORS][3];
    gpt2_parameter_dims(dims, cfg);
    return muon_plan_table((const size_t(*)[3])dims, NULL, GPT2_PARAMETER_PER_LAYER, GPT2_PARAMETER_IS_MATRIX,
                           GPT2_NUM_PARAMETER_TENSORS, owners, rank, out, state_size);
}

// ----------------------------------------------------------------------------
// device half

#ifdef __CUDACC__
#include "cuda_common.cuh"
#include "cublas_common.cuh"
#include "matmul.cuh"

#define MUON_NORM_BLOCKS 256

typedef struct {
    floatX* x;    // (r, n) the iterate
    floatX* y;    // (r, n) the next iterate
    floatX* a;    // (r, r) X X^T
    floatX* b;    // (r, r) b A + c A A
    float* norm;  // [0]: max(||X||, eps) rounded to floatX; then MUON_NORM_BLOCKS partial sums
} MuonWorkspace;

// max_elems: the largest rows * cols; max_r: the largest min(rows, cols)
static inline void muon_workspace_init(MuonWorkspace* ws, size_t max_elems, size_t max_r) {
    ws->x = (floatX*)cudaMallocCheck(max_elems * sizeof(floatX));
    ws->y = (floatX*)cudaMallocCheck(max_elems * sizeof(floatX));
    ws->a = (floatX*)cudaMallocCheck(max_r * max_r * sizeof(floatX));
    ws->b = (floatX*)cudaMallocCheck(max_r * max_r * sizeof(floatX));
    ws->norm = (float*)cudaMallocCheck((1 + MUON_NORM_BLOCKS) * sizeof(float));
}

static inline void muon_workspace_free(MuonWorkspace* ws) {
    cudaCheck(cudaFree(ws->x));
    cudaCheck(cudaFree(ws->y));
    cudaCheck(cudaFree(ws->a));
    cudaCheck(cudaFree(ws->b));
    cudaCheck(cudaFree(ws->norm));
}

// buf = buf.lerp(g, w1); x = floatX(nesterov ? g.lerp(buf, momentum) : buf), transposed when rows > cols
// grads (rows, cols) at the matrix's flat place, buf (rows, cols) this rank's momentum, x (r, n)
__global__ static void muon_momentum_kernel(floatX* x, float* buf, const floatX* grads, size_t rows, size_t cols,
                                            float grad_scale, float w1, float momentum, int nesterov) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) { return; }
    size_t i = idx / cols, j = idx % cols;
    float g = to_float(grads[idx]) * grad_scale;
    float b = buf[idx];
    b = fmaf(w1, g - b, b);  // torch's lerp for a weight below 0.5: self + w (end - self)
    buf[idx] = b;
    // torch's lerp for a weight of 0.5 or more: end - (end - self) (1 - w)
    float u = nesterov ? fmaf(-(b - g), 1.0f - momentum, b) : b;
    x[rows > cols ? j * rows + i : idx] = (floatX)u;
}

// ||x||^2 in MUON_NORM_BLOCKS grid-stride partial sums (fp32), then norm[0] = floatX(max(sqrt(sum), eps))
__global__ static void muon_norm_partial_kernel(float* partial, const floatX* x, size_t n) {
    float sum = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = to_float(x[i]);
        sum += v * v;
    }
    float block_sum = block_reduce_sum(sum);
    if (threadIdx.x == 0) { partial[blockIdx.x] = block_sum; }
}

__global__ static void muon_norm_final_kernel(float* norm, const float* partial, int num_partial) {
    float sum = 0.0f;
    for (int i = threadIdx.x; i < num_partial; i += blockDim.x) { sum += partial[i]; }
    float total = block_reduce_sum(sum);
    if (threadIdx.x == 0) {
        float nrm = to_float((floatX)sqrtf(total));        // the floatX tensor's norm()
        norm[0] = to_float((floatX)fmaxf(nrm, MUON_NS_EPS));  // .clamp(min=eps) in floatX
    }
}

// x = floatX(x / norm[0])
__global__ static void muon_scale_kernel(floatX* x, const float* norm, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    x[i] = (floatX)(to_float(x[i]) / norm[0]);
}

// param = param decay + alpha X (X transposed back when rows > cols); master (fp32, this rank's state) or NULL
__global__ static void muon_apply_kernel(floatX* params, float* master, const floatX* x, size_t global_offset,
                                         size_t rows, size_t cols, float decay, float alpha, uint32_t seed) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= rows * cols) { return; }
    size_t i = idx / cols, j = idx % cols;
    float u = to_float(x[rows > cols ? j * rows + i : idx]);
    size_t gi = global_offset + idx;
    float p = master != NULL ? master[idx] : to_float(params[gi]);
    p = p * decay;          // param.mul_(1 - lr weight_decay)
    p = fmaf(alpha, u, p);  // param.add_(update, alpha=-adjusted_lr)
    if (master != NULL) { master[idx] = p; }
    stochastic_round(p, &params[gi], seed, (uint32_t)gi);
}

// The Newton-Schulz iteration on ws->x (r, n) row-major, r <= n; the result in ws->x. Row-major (r, n) is
// column-major (n, r), so in cuBLAS's terms: A^T = X X^T is Xc^T Xc, (A A)^T = Ac Ac, (B X)^T = Xc Bc.
static inline void muon_newton_schulz(CublasContext* ctx, MuonWorkspace* ws, int r, int n, int steps, cudaStream_t stream) {
    const size_t rr = (size_t)r * r, rn = (size_t)r * n;
    GemmSpec gram = gemm_spec(r, r, n, 1, 0, 0, 0, 0);    // A = X X^T
    GemmSpec square = gemm_spec(r, r, r, 0, 0, 0, 0, 0);  // B = b A + c A A
    GemmSpec apply = gemm_spec(n, r, r, 0, 0, 0, 0, 0);   // Y = a X + B X
    for (int s = 0; s < steps; s++) {
        gemm_lt_typed(ctx, CUBLAS_LOWP, ctx->compute_type, ws->a, ws->x, ws->x, NULL, &gram, 1.0f, 0.0f, GEMM_EPI_NONE, NULL);
        cudaCheck(cudaMemcpyAsync(ws->b, ws->a, rr * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        gemm_lt_typed(ctx, CUBLAS_LOWP, ctx->compute_type, ws->b, ws->a, ws->a, NULL, &square, MUON_NS_C, MUON_NS_B,
                      GEMM_EPI_NONE, NULL);
        cudaCheck(cudaMemcpyAsync(ws->y, ws->x, rn * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        gemm_lt_typed(ctx, CUBLAS_LOWP, ctx->compute_type, ws->y, ws->x, ws->b, NULL, &apply, 1.0f, MUON_NS_A,
                      GEMM_EPI_NONE, NULL);
        floatX* t = ws->x;
        ws->x = ws->y;
        ws->y = t;
    }
}

// one Muon step of matrix m (this rank must own it); lr is the step's Muon learning rate (schedule applied)
static inline void muon_update_matrix(CublasContext* ctx, MuonWorkspace* ws, floatX* params, float* master, const floatX* grads,
                                      float* buf, const MuonMatrix* m, float lr, float weight_decay, float grad_scale,
                                      const MuonConfig* settings, uint32_t seed, cudaStream_t stream) {
    const size_t n_elem = m->rows * m->cols;
    const int r = (int)(m->rows < m->cols ? m->rows : m->cols), n = (int)(m->rows < m->cols ? m->cols : m->rows);
    const int block = 512, grid = ceil_div(n_elem, block);
    const float w1 = (float)(1.0 - (double)settings->momentum);
    float* state_buf = buf + m->state_offset;
    muon_momentum_kernel<<<grid, block, 0, stream>>>(ws->x, state_buf, grads + m->offset, m->rows, m->cols, grad_scale, w1,
                                                     settings->momentum, settings->nesterov);
    cudaCheckLaunch();
    muon_norm_partial_kernel<<<MUON_NORM_BLOCKS, 512, 0, stream>>>(ws->norm + 1, ws->x, n_elem);
    cudaCheckLaunch();
    muon_norm_final_kernel<<<1, 256, 0, stream>>>(ws->norm, ws->norm + 1, MUON_NORM_BLOCKS);
    cudaCheckLaunch();
    muon_scale_kernel<<<grid, block, 0, stream>>>(ws->x, ws->norm, n_elem);
    cudaCheckLaunch();
    muon_newton_schulz(ctx, ws, r, n, settings->ns_steps, stream);
    const float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    const float alpha = -(float)muon_adjusted_lr((double)lr, settings->adjust_lr, m->rows, m->cols);
    muon_apply_kernel<<<grid, block, 0, stream>>>(params, master != NULL ? master + m->state_offset : NULL, ws->x, m->offset,
                                                  m->rows, m->cols, decay, alpha, seed);
    cudaCheckLaunch();
}

#endif // __CUDACC__

#endif // LLMC_MUON_CUH
