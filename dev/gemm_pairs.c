/*
dev/gemm_pairs.c: llmc/cpu/matmul.h's GEMMs as a shared library, for dev/gemm_pairs.py, which calls them and torch's
in one process, one call after the other (make build/gemm_pairs.so; the default BLAS, as build/gemm_peak).

    llmc_pairs_gemm(bf16, transA, transB, M, N, K, A, lda, B, ldb, C)   C (M,N) = op(A) . op(B), beta 0: matmul_gemm
                                   in MATMUL_BF16 (bf16) or MATMUL_FP32; A and B fp32, row-major, row strides lda, ldb
    llmc_pairs_mirror(X, n, X16)   X16 (n) = X rounded to bf16, registered as X's bf16 copy (as the trainer keeps its
                                   weights' and its bf16 activations'): a bf16 GEMM then reads X16 and rounds nothing
    llmc_pairs_unmirror(X)         the copy forgotten
    llmc_pairs_describe(buf, n)    which kernels run: "<fp32 backend>; <bf16 GEMM>"

Threads: OMP_NUM_THREADS, read when the library is loaded, as for the trainers.
*/
#include <stdio.h>
#include "llmc/cpu/matmul.h"

void llmc_pairs_gemm(int bf16, int transA, int transB, int M, int N, int K, const float* A, int lda, const float* B,
                     int ldb, float* C) {
    matmul_gemm(bf16 ? MATMUL_BF16 : MATMUL_FP32, transA, transB, M, N, K, A, lda, B, ldb, 0.0f, C, N);
}

void llmc_pairs_mirror(const float* X, size_t n, uint16_t* X16) {
    matmul_round_bf16(X16, X, 1, n, n);
    matmul_bf16_mirror_add(X, n, X16);
}

void llmc_pairs_unmirror(const float* X) { matmul_bf16_mirror_remove(X); }

void llmc_pairs_describe(char* buf, int n) {
    char bf16[160];
    matmul_bf16_gemm_describe(bf16, sizeof(bf16));
    snprintf(buf, (size_t)n, "%s; %s", matmul_backend_name(), bf16);
}
