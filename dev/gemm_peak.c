/*
dev/gemm_peak.c: the GEMM rate of llmc/cpu/matmul.h on this machine, at a large square size.

    build/gemm_peak [-n 2048] [-r 3]        (make build/gemm_peak, or build/gemm_peak_<blas>)

Times C(n,n) = A(n,n) . B(n,n)^T (the trainer's forward layout, beta 0) -r times after one untimed
call and prints the median rate of each GEMM the build has, one line each:

    gemm <kernel> <precision> <GFLOP/s>

    kernel openblas | openblas-system | mkl   matmul_gemm(MATMUL_FP32): the build's BLAS, called the
                                              way the trainer calls it (OpenMP slabs, BLAS 1 thread)
    kernel blocked, fp32                      matmul_gemm_blocked: the built-in kernel
    kernel blocked, bf16                      the bf16 kernel (AVX512-BF16 where the build has it,
                                              else bf16-rounded inputs multiplied in fp32)

Threads: OMP_NUM_THREADS, as for the trainer. FLOPs = 2 n^3 per call. dev/bench.py runs it
before the trainers and reports their step rate as a fraction of the best of these (and torch's).
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "llmc/cpu/matmul.h"

typedef void (*GemmFn)(int n, const float* A, const float* B, float* C);

static void gemm_backend_f32(int n, const float* A, const float* B, float* C) {
    matmul_gemm(MATMUL_FP32, 0, 1, n, n, n, A, n, B, n, 0.0f, C, n);
}

static void gemm_blocked_f32(int n, const float* A, const float* B, float* C) {
    matmul_gemm_blocked(MATMUL_FP32, 0, 1, n, n, n, A, n, B, n, 0.0f, C, n);
}

static void gemm_blocked_bf16(int n, const float* A, const float* B, float* C) {
    matmul_gemm_blocked(MATMUL_BF16, 0, 1, n, n, n, A, n, B, n, 0.0f, C, n);
}

// median GFLOP/s of `reps` timed calls after one untimed one
static double gemm_rate(GemmFn fn, int n, int reps, const float* A, const float* B, float* C) {
    double* secs = malloc(sizeof(double) * (size_t)reps);
    if (secs == NULL) { fprintf(stderr, "error: out of memory\n"); exit(1); }
    fn(n, A, B, C);
    for (int r = 0; r < reps; r++) {
        double t0 = wall_seconds();
        fn(n, A, B, C);
        secs[r] = wall_seconds() - t0;
    }
    qsort(secs, (size_t)reps, sizeof(double), compare_doubles);
    double median = reps % 2 ? secs[reps / 2] : 0.5 * (secs[reps / 2 - 1] + secs[reps / 2]);
    free(secs);
    return 2.0 * (double)n * n * n / median / 1e9;
}

static int parse_positive(const char* flag, const char* value) {
    char* end = NULL;
    long v = value ? strtol(value, &end, 10) : 0;
    if (value == NULL || *end != '\0' || v < 1 || v > 1 << 15) {
        fprintf(stderr, "error: %s wants a whole number from 1 to 32768, got '%s'\n", flag, value ? value : "");
        exit(1);
    }
    return (int)v;
}

int main(int argc, char** argv) {
    int n = 2048, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0) { n = parse_positive("-n", i + 1 < argc ? argv[++i] : NULL); }
        else if (strcmp(argv[i], "-r") == 0) { reps = parse_positive("-r", i + 1 < argc ? argv[++i] : NULL); }
        else {
            printf("usage: %s [-n size (default 2048)] [-r timed repeats (default 3)]\n"
                   "prints 'gemm <kernel> <precision> <GFLOP/s>' per GEMM of this build; threads: OMP_NUM_THREADS\n",
                   argv[0]);
            return strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0 ? 0 : 1;
        }
    }
    size_t elems = (size_t)n * n;
    float* A = malloc(elems * sizeof(float));
    float* B = malloc(elems * sizeof(float));
    float* C = malloc(elems * sizeof(float));
    if (A == NULL || B == NULL || C == NULL) { fprintf(stderr, "error: out of memory for n=%d\n", n); return 1; }
    unsigned int state = 12345u;
    for (size_t i = 0; i < elems; i++) {
        state = state * 1664525u + 1013904223u;
        A[i] = (float)(state >> 8) / (float)(1u << 24) - 0.5f;
        state = state * 1664525u + 1013904223u;
        B[i] = (float)(state >> 8) / (float)(1u << 24) - 0.5f;
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("gemm_peak: backend %s, blocked fp32 kernel %s, bf16 %s, %d thread(s), n=%d, median of %d\n",
           matmul_backend_name(), matmul_isa_name(matmul_isa()), matmul_bf16_native() ? "native (AVX512-BF16)" : "emulated in fp32", threads, n, reps);
    if (strcmp(matmul_backend_name(), "blocked") != 0) {
        printf("gemm %s fp32 %.3f\n", matmul_backend_name(), gemm_rate(gemm_backend_f32, n, reps, A, B, C));
    }
    printf("gemm blocked fp32 %.3f\n", gemm_rate(gemm_blocked_f32, n, reps, A, B, C));
    printf("gemm blocked bf16 %.3f\n", gemm_rate(gemm_blocked_bf16, n, reps, A, B, C));
    free(A);
    free(B);
    free(C);
    return 0;
}
