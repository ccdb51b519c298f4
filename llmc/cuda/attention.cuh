/*
llmc/cuda/attention.cuh: causal multi-head self-attention, forward and backward, our own kernels
around cuBLAS strided-batched GEMMs.

    attention_forward(ctx, out, qkvr, att, inp, scratch, B, T, C, NH)
        inp (B, T, 3C) = [q | k | v]; qkvr (3, B, NH, T, HS) keeps q, k, v head-major for the backward
        att (B, NH, T, T) = softmax(q k^T / sqrt(HS)) with the causal mask (kept for the backward)
        out (B, T, C) = att @ v, heads concatenated; scratch: B*T*C elements
    attention_backward(ctx, dinp, dqkvr, datt, scratch, dout, qkvr, att, B, T, C, NH)
        dinp (B, T, 3C) overwritten; dqkvr (3*B*T*C), datt (B*NH*T*T), scratch (B*T*C) are work buffers

The softmax keeps its running max and sum in fp32 and subtracts the max before exponentiating.
Row-major (T, T) and (T, HS) matrices are handed to column-major cuBLAS as their transposes.

cuDNN flash attention (make USE_CUDNN=1, BF16 only): train_gpt2.cu and train_llama3.cu then call
cudnn_attention_forward / cudnn_attention_backward (llmc/cuda/cudnn_att.h, code in llmc/cuda/cudnn_att.cpp)
instead of the two functions here. q, k, v are read in place from the qkv matmul output (B, T, 3, NH, HS)
through strides (Llama 3: (B, T, NH + 2 NKV, HS), k and v with their NKV heads, no repeat_kv), the output is
(B, T, NH, HS), and each layer keeps only its (B, NH, T) fp32 softmax statistics instead of the
(B, NH, T, T) attention matrix. That path compiles and links in CI (make test-cuda-build), its
layouts are checked on the CPU against the index maps below (dev/test/test_attention_host.c) and its graphs
pass the cuDNN frontend's validation for sm_80 and sm_90 (dev/test/cudnn_graph_check.cpp); it has
never been executed on a GPU.
*/
#ifndef LLMC_ATTENTION_CUH
#define LLMC_ATTENTION_CUH

#include "matmul.cuh"
#include "cudnn_att.h"

// ----------------------------------------------------------------------------
// host half: the six batched GEMMs of attention as GemmSpecs (plain C, checked on the CPU against
// row-major loops in dev/test/test_attention_host.c). Per head: q, k, v, y, dy (T, HS) and att (T, T),
// row-major; a batch of B*NH heads laid out one after another.

enum { ATT_Q = 0, ATT_K, ATT_V, ATT_ATT, ATT_Y, ATT_DY, ATT_DATT, ATT_DQ, ATT_DK, ATT_DV, ATT_NUM_OPERANDS };
enum { ATT_GEMM_SCORES = 0, ATT_GEMM_Y, ATT_GEMM_DATT, ATT_GEMM_DV, ATT_GEMM_DQ, ATT_GEMM_DK, ATT_NUM_GEMMS };

static inline GemmSpec attention_gemm_spec(int which, int T, int HS, int batch) {
    GemmSpec s;
    switch (which) {
        case ATT_GEMM_SCORES: s = gemm_spec(T, T, HS, 1, 0, ATT_K, ATT_Q, ATT_ATT); break;    // att^T = k q^T
        case ATT_GEMM_Y: s = gemm_spec(HS, T, T, 0, 0, ATT_V, ATT_ATT, ATT_Y); break;         // y^T = v^T att^T
        case ATT_GEMM_DATT: s = gemm_spec(T, T, HS, 1, 0, ATT_V, ATT_DY, ATT_DATT); break;    // datt^T = v dy^T
        case ATT_GEMM_DV: s = gemm_spec(HS, T, T, 0, 1, ATT_DY, ATT_ATT, ATT_DV); break;      // dv^T = dy^T att
        case ATT_GEMM_DQ: s = gemm_spec(HS, T, T, 0, 0, ATT_K, ATT_DATT, ATT_DQ); break;      // dq^T = k^T dpre^T
        default: s = gemm_spec(HS, T, T, 0, 1, ATT_Q, ATT_DATT, ATT_DK); break;               // dk^T = q^T dpre
    }
    s.batch = batch;
    return s;
}

// index maps of the layout changes: idx runs over a head-major (B, NH, T, HS) tensor
// offset of the q element for idx in the qkv matmul output (B, T, 3, NH, HS); k is at +C, v at +2C
static inline HD size_t attention_qkv_offset(size_t idx, int T, int NH, int HS) {
    size_t hs = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    size_t C = (size_t)NH * HS;
    return b * T * 3 * C + t * 3 * C + h * HS + hs;
}
// offset for idx in the heads-concatenated output (B, T, NH, HS)
static inline HD size_t attention_concat_offset(size_t idx, int T, int NH, int HS) {
    size_t hs = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
    return b * T * NH * HS + t * NH * HS + h * HS + hs;
}

// ----------------------------------------------------------------------------
// device half

#ifdef __CUDACC__
#include "cublas_common.cuh"

#if defined(ENABLE_CUDNN) && !PRECISION_IS_BF16
#error "llmc: USE_CUDNN=1 needs PRECISION=BF16 (cuDNN flash attention is bf16 only)"
#endif

// ----------------------------------------------------------------------------
// layout changes

// inp (B, T, 3, NH, HS) -> q, k, v each (B, NH, T, HS)
__global__ static void attention_permute_kernel(floatX* q, floatX* k, floatX* v, const floatX* inp,
                                                int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) { return; }
    const floatX* src = inp + attention_qkv_offset(idx, T, NH, HS);
    size_t C = (size_t)NH * HS;
    q[idx] = src[0]; k[idx] = src[C]; v[idx] = src[2 * C];
}

// the reverse: dq, dk, dv (B, NH, T, HS) -> dinp (B, T, 3, NH, HS)
__global__ static void attention_permute_backward_kernel(floatX* dinp, const floatX* dq, const floatX* dk, const floatX* dv,
                                                         int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) { return; }
    floatX* dst = dinp + attention_qkv_offset(idx, T, NH, HS);
    size_t C = (size_t)NH * HS;
    dst[0] = dq[idx]; dst[C] = dk[idx]; dst[2 * C] = dv[idx];
}

// y (B, NH, T, HS) -> out (B, T, NH, HS)
__global__ static void attention_unpermute_kernel(floatX* out, const floatX* y, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) { return; }
    out[attention_concat_offset(idx, T, NH, HS)] = y[idx];
}

// dout (B, T, NH, HS) -> dy (B, NH, T, HS)
__global__ static void attention_unpermute_backward_kernel(floatX* dy, const floatX* dout, int B, int T, int NH, int HS) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * NH * T * HS) { return; }
    dy[idx] = dout[attention_concat_offset(idx, T, NH, HS)];
}

// ----------------------------------------------------------------------------
// causal softmax: one warp per row (b, h, t); in place on att (B*NH*T rows of T)

__global__ static void softmax_causal_forward_kernel(floatX* att, float scale, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= rows) { return; }
    int t = row % T;
    floatX* x = att + (size_t)row * T;
    float maxval = -INFINITY;
    for (int j = lane; j <= t; j += WARP_SIZE) { maxval = fmaxf(maxval, scale * to_float(x[j])); }
    maxval = warp_reduce_max(maxval);
    float sum = 0.0f;
    for (int j = lane; j <= t; j += WARP_SIZE) { sum += expf(scale * to_float(x[j]) - maxval); }
    sum = warp_reduce_sum(sum);
    float inv = 1.0f / sum;
    for (int j = lane; j < T; j += WARP_SIZE) {
        float p = j <= t ? expf(scale * to_float(x[j]) - maxval) * inv : 0.0f;
        x[j] = (floatX)p;
    }
}

// datt -> dpreatt in place: dpre[j] = scale * att[j] * (datt[j] - sum_k att[k] datt[k]) for j <= t, else 0
__global__ static void softmax_causal_backward_kernel(floatX* d, const floatX* att, float scale, int rows, int T) {
    int row = blockIdx.x * (blockDim.x / WARP_SIZE) + threadIdx.x / WARP_SIZE;
    int lane = threadIdx.x % WARP_SIZE;
    if (row >= rows) { return; }
    int t = row % T;
    floatX* drow = d + (size_t)row * T;
    const floatX* arow = att + (size_t)row * T;
    float dot = 0.0f;
    for (int j = lane; j <= t; j += WARP_SIZE) { dot += to_float(arow[j]) * to_float(drow[j]); }
    dot = warp_reduce_sum(dot);
    for (int j = lane; j < T; j += WARP_SIZE) {
        float g = j <= t ? scale * to_float(arow[j]) * (to_float(drow[j]) - dot) : 0.0f;
        drow[j] = (floatX)g;
    }
}

// ----------------------------------------------------------------------------
// one of the six batched GEMMs; ops: the device pointers of the ATT_* operands

static inline void attention_gemm(CublasContext* ctx, int which, floatX* const ops[ATT_NUM_OPERANDS], int T, int HS, int batch) {
    GemmSpec s = attention_gemm_spec(which, T, HS, batch);
    const float alpha = 1.0f, beta = 0.0f;
    cublasCheck(cublasGemmStridedBatchedEx(ctx->handle, s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           s.m, s.n, s.k, &alpha, ops[s.a], CUBLAS_LOWP, s.lda, s.stride_a,
                                           ops[s.b], CUBLAS_LOWP, s.ldb, s.stride_b, &beta, ops[s.d], CUBLAS_LOWP, s.ldd, s.stride_d,
                                           s.batch, ctx->compute_type, CUBLAS_GEMM_DEFAULT));
}

// ----------------------------------------------------------------------------
// the layer

static inline void attention_forward(CublasContext* ctx, floatX* out, floatX* qkvr, floatX* att, const floatX* inp,
                                     floatX* scratch, int B, int T, int C, int NH) {
    cudaStream_t stream = ctx->stream;
    const int HS = C / NH;
    const int block_size = 256;
    size_t N = (size_t)B * T * C;
    floatX* q = qkvr;
    floatX* k = qkvr + N;
    floatX* v = qkvr + 2 * N;
    attention_permute_kernel<<<ceil_div(N, block_size), block_size, 0, stream>>>(q, k, v, inp, B, T, NH, HS);
    cudaCheckLaunch();
    floatX* y = scratch;
    floatX* const ops[ATT_NUM_OPERANDS] = {q, k, v, att, y, NULL, NULL, NULL, NULL, NULL};
    // scores q k^T per head into att, then the causal softmax in place
    attention_gemm(ctx, ATT_GEMM_SCORES, ops, T, HS, B * NH);
    const float scale = 1.0f / sqrtf((float)HS);
    int rows = B * NH * T;
    softmax_causal_forward_kernel<<<ceil_div(rows, block_size / WARP_SIZE), block_size, 0, stream>>>(att, scale, rows, T);
    cudaCheckLaunch();
    // y (T, HS) = att (T, T) @ v (T, HS)
    attention_gemm(ctx, ATT_GEMM_Y, ops, T, HS, B * NH);
    attention_unpermute_kernel<<<ceil_div(N, block_size), block_size, 0, stream>>>(out, y, B, T, NH, HS);
    cudaCheckLaunch();
}

static inline void attention_backward(CublasContext* ctx, floatX* dinp, floatX* dqkvr, floatX* datt, floatX* scratch,
                                      const floatX* dout, const floatX* qkvr, const floatX* att,
                                      int B, int T, int C, int NH) {
    cudaStream_t stream = ctx->stream;
    const int HS = C / NH;
    const int block_size = 256;
    size_t N = (size_t)B * T * C;
    floatX* q = (floatX*)qkvr;
    floatX* k = (floatX*)qkvr + N;
    floatX* v = (floatX*)qkvr + 2 * N;
    floatX* dq = dqkvr;
    floatX* dk = dqkvr + N;
    floatX* dv = dqkvr + 2 * N;
    floatX* dy = scratch;
    floatX* const ops[ATT_NUM_OPERANDS] = {q, k, v, (floatX*)att, NULL, dy, datt, dq, dk, dv};
    attention_unpermute_backward_kernel<<<ceil_div(N, block_size), block_size, 0, stream>>>(dy, dout, B, T, NH, HS);
    cudaCheckLaunch();
    // datt (T, T) = dy (T, HS) @ v^T;  dv (T, HS) = att^T @ dy
    attention_gemm(ctx, ATT_GEMM_DATT, ops, T, HS, B * NH);
    attention_gemm(ctx, ATT_GEMM_DV, ops, T, HS, B * NH);
    const float scale = 1.0f / sqrtf((float)HS);
    int rows = B * NH * T;
    softmax_causal_backward_kernel<<<ceil_div(rows, block_size / WARP_SIZE), block_size, 0, stream>>>(datt, att, scale, rows, T);
    cudaCheckLaunch();
    // dq (T, HS) = dpreatt (T, T) @ k;  dk (T, HS) = dpreatt^T @ q   (dpreatt is in datt)
    attention_gemm(ctx, ATT_GEMM_DQ, ops, T, HS, B * NH);
    attention_gemm(ctx, ATT_GEMM_DK, ops, T, HS, B * NH);
    attention_permute_backward_kernel<<<ceil_div(N, block_size), block_size, 0, stream>>>(dinp, dq, dk, dv, B, T, NH, HS);
    cudaCheckLaunch();
}

#endif // __CUDACC__

#endif // LLMC_ATTENTION_CUH
