/*
dev/cuda_cpu/include/cublas_v2.h: the cuBLAS API on the CPU (the part llmc calls), with cuBLAS's
enum values. Test scaffolding for the CPU execution target (dev/cuda_cpu/README.md), not the product.

    cublasCreate / cublasDestroy / cublasSetStream / cublasSetWorkspace / cublasSetMathMode
    cublasGemmStridedBatchedEx    C[b] = alpha op(A[b]) op(B[b]) + beta C[b], column-major, b < batchCount

Types: A and B both CUDA_R_32F or both CUDA_R_16BF; C CUDA_R_32F, or CUDA_R_16BF with bf16 inputs;
alpha and beta are floats (host pointers). Accumulation is fp32 (our BLAS, dev/cuda_cpu/cublas_cpu.cpp),
rounded once to C's type. CUBLAS_COMPUTE_32F_FAST_TF32 (and CUBLAS_COMPUTE_32F with fp32 inputs under
CUBLAS_TF32_TENSOR_OP_MATH) first round A and B to TF32 (10 mantissa bits, nearest even), as the
tensor cores read them. Anything else returns CUBLAS_STATUS_NOT_SUPPORTED (INVALID_VALUE for bad
sizes), with one line on stderr saying why, never a wrong answer. Every matrix is checked against the
device-memory registry over the extent its shape implies (ld * (cols - 1) + rows elements, times the
batches): a host pointer or a too-small buffer ends the program with one line.
The stream is ignored: the call runs at once (everything in this target is synchronous).
*/
#ifndef CUDA_CPU_CUBLAS_V2_H
#define CUDA_CPU_CUBLAS_V2_H

#include <stddef.h>
#include <stdint.h>
#include "cuda_runtime.h"
#include "library_types.h"

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
    CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

typedef enum {
    CUBLAS_OP_N = 0,
    CUBLAS_OP_T = 1,
    CUBLAS_OP_C = 2,
} cublasOperation_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_16F_PEDANTIC = 65,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_64F_PEDANTIC = 71,
    CUBLAS_COMPUTE_32I = 72,
    CUBLAS_COMPUTE_32I_PEDANTIC = 73,
} cublasComputeType_t;

typedef enum {
    CUBLAS_GEMM_DEFAULT = -1,
    CUBLAS_GEMM_DFALT = -1,
    CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
    CUBLAS_GEMM_DFALT_TENSOR_OP = 99,
} cublasGemmAlgo_t;

typedef struct cublasContext* cublasHandle_t;

#ifdef __cplusplus
extern "C" {
#endif

cublasStatus_t cublasCreate(cublasHandle_t* handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t workspace_bytes);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode);

// cublasGemmStridedBatchedEx's parameters, written once for its declaration below and its definition
// in dev/cuda_cpu/cublas_cpu.cpp
#define CUBLAS_GEMM_STRIDED_BATCHED_EX_PARAMS \
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, \
    const void* alpha, const void* A, cudaDataType_t Atype, int lda, long long strideA, \
    const void* B, cudaDataType_t Btype, int ldb, long long strideB, const void* beta, \
    void* C, cudaDataType_t Ctype, int ldc, long long strideC, \
    int batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo
cublasStatus_t cublasGemmStridedBatchedEx(CUBLAS_GEMM_STRIDED_BATCHED_EX_PARAMS);

#ifdef __cplusplus
}
#endif

#endif // CUDA_CPU_CUBLAS_V2_H
