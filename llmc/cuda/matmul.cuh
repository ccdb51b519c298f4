/*
llmc/cuda/matmul.cuh: the linear layers, on cuBLASLt.

    matmul_forward(ctx, out, inp, weight, bias, B*T, C, OC, pre_gelu)
        out = inp @ weight^T + bias         // inp (BT, C), weight (OC, C), out (BT, OC)
        pre_gelu != NULL: GELU fused into the epilogue, pre_gelu gets the input of the GELU
    matmul_backward(ctx, dinp, dweight, dbias, dout, inp, weight, scratch, BT, C, OC, pre_gelu)
        dinp = dout @ weight (overwritten); dweight += dout^T @ inp; dbias += column sums of dout
        pre_gelu != NULL: dout is the gradient of GELU's output; the GELU backward is fused (dGELU epilogue)

All matrices are row-major in llmc; cuBLAS is column-major, so each GEMM describes the transposed
problem (row-major X is column-major X^T). Those descriptions are GemmSpec values built by small
plain-C functions (the host half of this file), which name the operands playing A, B and D; the CPU
test (dev/test/test_gemm_host.c) runs every spec through gemm_reference, a CPU implementation of
cuBLAS's column-major semantics, and compares with row-major loops. Bias gradients use our own
deterministic column sum (fixed reduction order) rather than atomics.
cuBLASLt's heuristic is told each operand's real alignment (gemm_pointer_alignment: the largest power
of two up to 256 dividing the address; our tensors are at least 16-byte aligned), so it may pick the
kernels that need it instead of assuming the worst case.
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include <stddef.h>
#include <stdint.h>
#include "../layer_math.h"

// ----------------------------------------------------------------------------
// host half: GEMM descriptions and the row partition of the column sums (plain C)

// rows [start, end) of N handled by chunk `chunk` of `chunks` (deterministic column sums); empty past N
static inline HD void row_chunk(int N, int chunks, int chunk, int* start, int* end) {
    int per = (N + chunks - 1) / chunks;
    int s = chunk * per;
    int e = s + per;
    *start = s < N ? s : N;
    *end = e < N ? e : N;
}

// the largest power of two, up to 256, that divides the address p (NULL: 256), in bytes: what
// CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES promise cuBLASLt about an operand
static inline uint32_t gemm_pointer_alignment(const void* p) {
    const uintptr_t address = (uintptr_t)p;
    uint32_t align = 256;
    while (align > 1 && address % align != 0) { align >>= 1; }
    return align;
}

typedef struct {
    int m, n, k;               // column-major D (m, n) = op(A) (m, k) * op(B) (k, n)
    int trans_a, trans_b;
    int lda, ldb, ldd;
    long long stride_a, stride_b, stride_d;  // between the matrices of a batch
    int batch;
    int a, b, d;               // which of the caller's operands are A, B and D
} GemmSpec;

static inline GemmSpec gemm_spec(int m, int n, int k, int trans_a, int trans_b, int a, int b, int d) {
    GemmSpec s;
    s.m = m; s.n = n; s.k = k;
    s.trans_a = trans_a; s.trans_b = trans_b;
    s.lda = trans_a ? k : m;
    s.ldb = trans_b ? n : k;
    s.ldd = m;
    s.stride_a = (long long)m * k;
    s.stride_b = (long long)k * n;
    s.stride_d = (long long)m * n;
    s.batch = 1;
    s.a = a; s.b = b; s.d = d;
    return s;
}

// the operands of a linear layer out (BT, OC) = inp (BT, C) @ weight (OC, C)^T
enum { LIN_INP = 0, LIN_WEIGHT, LIN_OUT, LIN_DINP, LIN_DWEIGHT, LIN_DOUT, LIN_NUM_OPERANDS };

// out^T (OC, BT) = (weight as stored, column-major (C, OC))^T times inp^T (C, BT)
static inline GemmSpec linear_forward_spec(int BT, int C, int OC) { return gemm_spec(OC, BT, C, 1, 0, LIN_WEIGHT, LIN_INP, LIN_OUT); }
// dinp^T (C, BT) = weight as stored (C, OC) times dout^T (OC, BT)
static inline GemmSpec linear_dinp_spec(int BT, int C, int OC) { return gemm_spec(C, BT, OC, 0, 0, LIN_WEIGHT, LIN_DOUT, LIN_DINP); }
// dweight^T (C, OC) += inp^T (C, BT) times (dout^T (OC, BT))^T
static inline GemmSpec linear_dweight_spec(int BT, int C, int OC) { return gemm_spec(C, OC, BT, 0, 1, LIN_INP, LIN_DOUT, LIN_DWEIGHT); }

// CPU reference of what cuBLAS computes for a spec: D = alpha op(A) op(B) + beta D, column-major, per batch
static inline void gemm_reference(const GemmSpec* s, const float* A, const float* B, float* D, float alpha, float beta) {
    for (int batch = 0; batch < s->batch; batch++) {
        const float* a = A + batch * s->stride_a;
        const float* b = B + batch * s->stride_b;
        float* d = D + batch * s->stride_d;
        for (int j = 0; j < s->n; j++) {
            for (int i = 0; i < s->m; i++) {
                double sum = 0.0;
                for (int p = 0; p < s->k; p++) {
                    float av = s->trans_a ? a[p + (size_t)i * s->lda] : a[i + (size_t)p * s->lda];
                    float bv = s->trans_b ? b[j + (size_t)p * s->ldb] : b[p + (size_t)j * s->ldb];
                    sum += (double)av * (double)bv;
                }
                float* out = &d[i + (size_t)j * s->ldd];
                *out = (float)(alpha * sum + (beta != 0.0f ? beta * (double)*out : 0.0));
            }
        }
    }
}

// ----------------------------------------------------------------------------
// device half

#ifdef __CUDACC__
#include "cublas_common.cuh"

// ----------------------------------------------------------------------------
// bias gradient: dbias[c] += sum_n dout[n, c]   // dout (N, OC)

#define BIAS_GRAD_ROW_CHUNKS 32

// partial sums: block (x: 32 columns, y: 8 row lanes), grid (OC/32, BIAS_GRAD_ROW_CHUNKS)
__global__ static void bias_grad_partial_kernel(float* partial, const floatX* dout, int N, int OC) {
    __shared__ float acc[8][32];
    int c = blockIdx.x * 32 + threadIdx.x;
    int row_start, row_end;
    row_chunk(N, (int)gridDim.y, (int)blockIdx.y, &row_start, &row_end);
    float sum = 0.0f;
    if (c < OC) {
        for (int n = row_start + threadIdx.y; n < row_end; n += blockDim.y) {
            sum += to_float(dout[(size_t)n * OC + c]);
        }
    }
    acc[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < OC) {
        float total = 0.0f;
        for (int k = 0; k < 8; k++) { total += acc[k][threadIdx.x]; }
        partial[(size_t)blockIdx.y * OC + c] = total;
    }
}

// out (OC) += the row chunks' partial column sums, partial (chunks, OC), added in chunk order: the second
// half of the deterministic column sums (the bias gradient here, RMSNorm's weight gradient in rmsnorm.cuh)
__global__ static void add_partial_sums_kernel(floatX* out, const float* partial, int OC, int chunks) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= OC) { return; }
    float total = to_float(out[c]);
    for (int k = 0; k < chunks; k++) { total += partial[(size_t)k * OC + c]; }
    out[c] = (floatX)total;
}

// scratch: at least BIAS_GRAD_ROW_CHUNKS * OC floats
static inline void bias_backward(floatX* dbias, const floatX* dout, float* scratch, int N, int OC, cudaStream_t stream) {
    dim3 block(32, 8);
    dim3 grid(ceil_div(OC, 32), BIAS_GRAD_ROW_CHUNKS);
    bias_grad_partial_kernel<<<grid, block, 0, stream>>>(scratch, dout, N, OC);
    cudaCheckLaunch();
    add_partial_sums_kernel<<<ceil_div(OC, 256), 256, 0, stream>>>(dbias, scratch, OC, BIAS_GRAD_ROW_CHUNKS);
    cudaCheckLaunch();
}

// ----------------------------------------------------------------------------
// one cuBLASLt GEMM described by a GemmSpec: D (m, n) = alpha op(A) (m, k) * op(B) (k, n) + beta D
// epilogue: bias (length m) added, GELU with aux output, or dGELU using aux as the GELU input

typedef enum { GEMM_EPI_NONE = 0, GEMM_EPI_BIAS, GEMM_EPI_GELU_AUX, GEMM_EPI_GELU_AUX_BIAS, GEMM_EPI_DGELU } GemmEpilogue;

// the general form: operands of element type `type` (CUDA_R_32F or CUDA_R_16BF, bias and aux too), fp32 scalars,
// D = alpha op(A) op(B) + beta D; compute_type as the context's, or CUBLAS_COMPUTE_32F for bf16 operands
static inline void gemm_lt_typed(CublasContext* ctx, cudaDataType_t type, cublasComputeType_t compute_type, void* d,
                                 const void* a, const void* b, const void* bias, const GemmSpec* spec, float alpha, float beta,
                                 GemmEpilogue epi, void* aux) {
    const int m = spec->m, n = spec->n, k = spec->k, trans_a = spec->trans_a, trans_b = spec->trans_b;
    if (((uintptr_t)a % 16) != 0 || ((uintptr_t)b % 16) != 0 || ((uintptr_t)d % 16) != 0 ||
        (bias != NULL && ((uintptr_t)bias % 16) != 0)) {
        llmc_die("matmul: cuBLASLt operands must be 16-byte aligned (m=%d n=%d k=%d)", m, n, k);
    }
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, compute_type, CUDA_R_32F));
    cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));

    cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    switch (epi) {
        case GEMM_EPI_NONE: epilogue = CUBLASLT_EPILOGUE_DEFAULT; break;
        case GEMM_EPI_BIAS: epilogue = CUBLASLT_EPILOGUE_BIAS; break;
        case GEMM_EPI_GELU_AUX: epilogue = CUBLASLT_EPILOGUE_GELU_AUX; break;
        case GEMM_EPI_GELU_AUX_BIAS: epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; break;
        case GEMM_EPI_DGELU: epilogue = CUBLASLT_EPILOGUE_DGELU; break;
    }
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    if (epi == GEMM_EPI_BIAS || epi == GEMM_EPI_GELU_AUX_BIAS) {
        cudaDataType_t bias_type = type;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
    }
    if (epi == GEMM_EPI_GELU_AUX || epi == GEMM_EPI_GELU_AUX_BIAS || epi == GEMM_EPI_DGELU) {
        int64_t aux_ld = m;  // the aux matrix has the shape of D
        cudaDataType_t aux_type = type;
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
        cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &aux_type, sizeof(aux_type)));
    }

    // layouts of the stored matrices (before op)
    cublasLtMatrixLayout_t layout_a, layout_b, layout_d;
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_a, type, trans_a ? k : m, trans_a ? m : k, spec->lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_b, type, trans_b ? n : k, trans_b ? k : n, spec->ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&layout_d, type, m, n, spec->ldd));

    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx->workspace_size, sizeof(ctx->workspace_size)));
    // the operands' real alignments (C is D: the accumulation reads and writes d)
    const uint32_t align_a = gemm_pointer_alignment(a), align_b = gemm_pointer_alignment(b);
    const uint32_t align_cd = gemm_pointer_alignment(d);
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_cd, sizeof(align_cd)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_cd, sizeof(align_cd)));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx->lt_handle, desc, layout_a, layout_b, layout_d, layout_d,
                                               pref, 1, &heuristic, &found));
    if (found == 0) {
        llmc_die("matmul: cuBLASLt has no algorithm for m=%d n=%d k=%d transA=%d transB=%d epilogue=%d",
                 m, n, k, trans_a, trans_b, (int)epi);
    }
    cublasCheck(cublasLtMatmul(ctx->lt_handle, desc, &alpha, a, layout_a, b, layout_b, &beta, d, layout_d, d, layout_d,
                               &heuristic.algo, ctx->workspace, ctx->workspace_size, ctx->stream));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    cublasCheck(cublasLtMatrixLayoutDestroy(layout_a));
    cublasCheck(cublasLtMatrixLayoutDestroy(layout_b));
    cublasCheck(cublasLtMatrixLayoutDestroy(layout_d));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
}

// the trainer's GEMM: floatX operands, the context's compute type, D = op(A) op(B) [+ D if accumulate]
static inline void gemm_lt(CublasContext* ctx, floatX* d, const floatX* a, const floatX* b, const floatX* bias,
                           const GemmSpec* spec, int accumulate, GemmEpilogue epi, floatX* aux) {
    gemm_lt_typed(ctx, CUBLAS_LOWP, ctx->compute_type, d, a, b, bias, spec, 1.0f, accumulate ? 1.0f : 0.0f, epi, aux);
}

// ----------------------------------------------------------------------------
// the layer

// out (BT, OC) = inp (BT, C) @ weight (OC, C)^T + bias (OC); with pre_gelu: out = gelu(pre_gelu), pre_gelu = inp @ weight^T + bias
static inline void matmul_forward(CublasContext* ctx, floatX* out, const floatX* inp, const floatX* weight, const floatX* bias,
                                  int BT, int C, int OC, floatX* pre_gelu) {
    GemmEpilogue epi;
    if (pre_gelu != NULL) {
        epi = bias != NULL ? GEMM_EPI_GELU_AUX_BIAS : GEMM_EPI_GELU_AUX;
    } else {
        epi = bias != NULL ? GEMM_EPI_BIAS : GEMM_EPI_NONE;
    }
    GemmSpec spec = linear_forward_spec(BT, C, OC);
    const floatX* ops[LIN_NUM_OPERANDS] = {inp, weight, out, NULL, NULL, NULL};
    gemm_lt(ctx, (floatX*)ops[spec.d], ops[spec.a], ops[spec.b], bias, &spec, 0, epi, pre_gelu);
}

// dinp (BT, C) = dout (BT, OC) @ weight (OC, C)   [times gelu'(pre_gelu) when pre_gelu != NULL]
// dweight (OC, C) += dout^T @ inp;  dbias (OC) += sum over BT of dout (dbias may be NULL)
// scratch: BIAS_GRAD_ROW_CHUNKS * OC floats
static inline void matmul_backward(CublasContext* ctx, floatX* dinp, floatX* dweight, floatX* dbias,
                                   const floatX* dout, const floatX* inp, const floatX* weight, float* scratch,
                                   int BT, int C, int OC, floatX* pre_gelu) {
    if (dbias != NULL) {
        bias_backward(dbias, dout, scratch, BT, OC, ctx->stream);
    }
    const floatX* ops[LIN_NUM_OPERANDS] = {inp, weight, NULL, dinp, dweight, dout};
    GemmSpec dw = linear_dweight_spec(BT, C, OC);
    gemm_lt(ctx, (floatX*)ops[dw.d], ops[dw.a], ops[dw.b], NULL, &dw, 1, GEMM_EPI_NONE, NULL);
    GemmSpec di = linear_dinp_spec(BT, C, OC);
    gemm_lt(ctx, (floatX*)ops[di.d], ops[di.a], ops[di.b], NULL, &di, 0, pre_gelu != NULL ? GEMM_EPI_DGELU : GEMM_EPI_NONE, pre_gelu);
}

#endif // __CUDACC__

#endif // LLMC_MATMUL_CUH
