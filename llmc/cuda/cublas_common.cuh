/*
llmc/cuda/cublas_common.cuh: the cuBLAS / cuBLASLt handles, workspace and error checking.

    CublasContext ctx;  cublas_context_init(&ctx, stream);  ...  cublas_context_free(&ctx);

The context is a struct passed to whoever calls a GEMM (no globals). Compute is fp32
accumulation in every precision; TF32 tensor cores are allowed in FP32 builds.
*/
#ifndef LLMC_CUBLAS_COMMON_CUH
#define LLMC_CUBLAS_COMMON_CUH

#include <cublas_v2.h>
#include <cublasLt.h>
#include "cuda_common.cuh"

static inline void cublas_check(cublasStatus_t status, const char* what, const char* file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        llmc_die("cuBLAS: %s failed with status %d (%s:%d)", what, (int)status, file, line);
    }
}
#define cublasCheck(call) cublas_check((call), #call, __FILE__, __LINE__)

#if PRECISION_IS_BF16
#define CUBLAS_LOWP CUDA_R_16BF
#else
#define CUBLAS_LOWP CUDA_R_32F
#endif

typedef struct {
    cublasHandle_t handle;        // batched GEMMs of attention
    cublasLtHandle_t lt_handle;   // GEMMs with bias / GELU epilogues
    void* workspace;
    size_t workspace_size;
    cublasComputeType_t compute_type;
    cudaStream_t stream;
} CublasContext;

static inline void cublas_context_init(CublasContext* ctx, cudaStream_t stream) {
    // 32 MiB: what Hopper's cuBLASLt kernels ask for; enough for Ampere too
    ctx->workspace_size = 32 * 1024 * 1024;
    ctx->workspace = cudaMallocCheck(ctx->workspace_size);
    cublasCheck(cublasCreate(&ctx->handle));
    cublasCheck(cublasLtCreate(&ctx->lt_handle));
    cublasCheck(cublasSetStream(ctx->handle, stream));
    cublasCheck(cublasSetWorkspace(ctx->handle, ctx->workspace, ctx->workspace_size));
    ctx->stream = stream;
#if PRECISION_IS_BF16
    ctx->compute_type = CUBLAS_COMPUTE_32F;
    cublasCheck(cublasSetMathMode(ctx->handle, CUBLAS_DEFAULT_MATH));
#else
    ctx->compute_type = CUBLAS_COMPUTE_32F_FAST_TF32;
    cublasCheck(cublasSetMathMode(ctx->handle, CUBLAS_TF32_TENSOR_OP_MATH));
#endif
}

static inline void cublas_context_free(CublasContext* ctx) {
    cublasCheck(cublasLtDestroy(ctx->lt_handle));
    cublasCheck(cublasDestroy(ctx->handle));
    cudaCheck(cudaFree(ctx->workspace));
    ctx->workspace = NULL;
}

#endif // LLMC_CUBLAS_COMMON_CUH
