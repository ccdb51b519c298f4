/*
dev/triad.c: this machine's memory bandwidth and its SIMD fp32 FMA rate, on the trainer's threads: the two
limits that make bench (dev/bench.py) holds every pass of the training step against that is not a GEMM.

    build/triad [-m 256] [-r 5]        (make build/triad)

Memory bandwidth: STREAM's triad a[i] = b[i] + s * c[i] over three arrays of -m MB each (far larger than the
last-level cache, so every pass streams from DRAM), first touched in parallel by the threads that later read
them (each thread's pages sit on its own memory node), one untimed pass, then -r timed passes. Bytes per
element: 3 x 4 (b and c read, a written; the cache's read of a before the write is not counted, as STREAM does
not). It prints the best pass (STREAM's convention: noise only slows a pass, so the fastest is the closest to
what the memory can do):

    triad: <GB/s> GB/s (<N> threads)

SIMD rate: each thread runs a register-resident loop of independent fused multiply-adds (16 zmm accumulators
with AVX-512, 12 ymm with AVX2, chosen at run time with target attributes as llmc/cpu/matmul.h chooses its
kernels; enough to cover the FMA latency times the FMA ports), all threads at once, best of -r:

    simd: <GFLOP/s> GFLOP/s (<N> threads)

(an FMA counts as 2 FLOPs). Threads: OMP_NUM_THREADS, as for the trainer. A first line names the sizes and the
ISA. Memory: 3 x -m MB.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "../llmc/cpu/matmul.h"  // MatmulIsa: the SIMD instructions this CPU runs

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int thread_count(void) {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

// ----------------------------------------------------------------------------
// memory bandwidth: the triad

// best GB/s of `reps` timed triads over n elements (after one untimed one)
static double triad_rate(float* a, const float* b, const float* c, size_t n, int reps) {
    const float s = 3.0f;
    double best = 0.0;
    for (int r = -1; r < reps; r++) {
        double t0 = now_seconds();
#pragma omp parallel for schedule(static)
        for (size_t i = 0; i < n; i++) { a[i] = b[i] + s * c[i]; }
        double secs = now_seconds() - t0;
        double rate = 3.0 * sizeof(float) * (double)n / secs / 1e9;
        if (r >= 0 && rate > best) { best = rate; }
    }
    return best;
}

// ----------------------------------------------------------------------------
// SIMD FMA rate: a loop of independent FMAs on registers, one per ISA (llmc/cpu/matmul.h's MatmulIsa, detected as
// its kernels are)

#define FMA_ITERS 20000000L // per thread per pass: 0.05-0.2 s on a core of 20-200 GFLOP/s

// CHAINS independent chains of FMAs on vectors of LANES floats (GCC's vector extension, contracted to one FMA per
// multiply-add), compiled for the instructions ATTR names: FLOPs = iters x CHAINS x LANES x 2
#define FMA_LOOP(name, ATTR, LANES, CHAINS) \
    typedef float name##_vec __attribute__((vector_size(4 * (LANES)))); \
    ATTR static float name(long iters, float seed) { \
        name##_vec acc[CHAINS], x, y; \
        for (int j = 0; j < (LANES); j++) { x[j] = 0.999999f; y[j] = 1e-7f; } \
        for (int k = 0; k < (CHAINS); k++) { for (int j = 0; j < (LANES); j++) { acc[k][j] = seed + (float)k; } } \
        for (long i = 0; i < iters; i++) { \
            for (int k = 0; k < (CHAINS); k++) { acc[k] = acc[k] * x + y; } \
        } \
        float total = 0.0f; \
        for (int k = 0; k < (CHAINS); k++) { for (int j = 0; j < (LANES); j++) { total += acc[k][j]; } } \
        return total; \
    }

#if MATMUL_X86
FMA_LOOP(fma_loop_avx512, __attribute__((target("avx512f,fma"))), 16, 16)  // 16 zmm chains
FMA_LOOP(fma_loop_avx2, __attribute__((target("avx2,fma"))), 8, 12)        // 12 of the 16 ymm, the rest for x, y
#endif
FMA_LOOP(fma_loop_generic, , 8, 8)                                        // the build's own instructions

// FLOPs of one call of the loop of `isa` with `iters` iterations
static double fma_loop_flops(MatmulIsa isa, long iters) {
    double per_iter = isa == MATMUL_ISA_AVX512 ? 16.0 * 16.0 : isa == MATMUL_ISA_AVX2 ? 12.0 * 8.0 : 8.0 * 8.0;
    return 2.0 * per_iter * (double)iters;
}

static float fma_loop(MatmulIsa isa, long iters, float seed) {
#if MATMUL_X86
    if (isa == MATMUL_ISA_AVX512) { return fma_loop_avx512(iters, seed); }
    if (isa == MATMUL_ISA_AVX2) { return fma_loop_avx2(iters, seed); }
#endif
    return fma_loop_generic(iters, seed);
}

// best GFLOP/s of `reps` passes with every thread running the loop at once (after one untimed pass)
static double simd_rate(MatmulIsa isa, int threads, int reps, float* sink) {
    double best = 0.0;
    for (int r = -1; r < reps; r++) {
        float total = 0.0f;
        double t0 = now_seconds();
#pragma omp parallel reduction(+ : total)
        { total += fma_loop(isa, FMA_ITERS, (float)r); }
        double secs = now_seconds() - t0;
        *sink += total;
        double rate = fma_loop_flops(isa, FMA_ITERS) * threads / secs / 1e9;
        if (r >= 0 && rate > best) { best = rate; }
    }
    return best;
}

// ----------------------------------------------------------------------------

static int parse_int(const char* flag, const char* value, int lo, int hi) {
    char* end = NULL;
    long v = value ? strtol(value, &end, 10) : 0;
    if (value == NULL || *end != '\0' || v < lo || v > hi) {
        fprintf(stderr, "error: %s wants a whole number from %d to %d, got '%s'\n", flag, lo, hi, value ? value : "");
        exit(1);
    }
    return (int)v;
}

int main(int argc, char** argv) {
    int mb = 256, reps = 5;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-m") == 0) { mb = parse_int("-m", i + 1 < argc ? argv[++i] : NULL, 1, 65536); }
        else if (strcmp(argv[i], "-r") == 0) { reps = parse_int("-r", i + 1 < argc ? argv[++i] : NULL, 1, 1000); }
        else {
            if (strcmp(argv[i], "-h") != 0 && strcmp(argv[i], "--help") != 0) {
                fprintf(stderr, "error: unknown flag '%s' (run %s --help)\n", argv[i], argv[0]);
                return 1;
            }
            printf("usage: %s [-m MB per array (default 256)] [-r timed passes, best taken (default 5)]\n"
                   "prints 'triad: <GB/s> GB/s (<N> threads)' and 'simd: <GFLOP/s> GFLOP/s (<N> threads)'; "
                   "threads: OMP_NUM_THREADS\n", argv[0]);
            return 0;
        }
    }
    size_t n = (size_t)mb * 1024 * 1024 / sizeof(float);
    float* a = malloc(n * sizeof(float));
    float* b = malloc(n * sizeof(float));
    float* c = malloc(n * sizeof(float));
    if (a == NULL || b == NULL || c == NULL) {
        fprintf(stderr, "error: out of memory for 3 arrays of %d MB\n", mb);
        return 1;
    }
    // first touch by the threads (same static schedule as the triad): each page lands near the thread using it
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        a[i] = 0.0f;
        b[i] = 1.0f;
        c[i] = 2.0f;
    }
    int threads = thread_count();
    MatmulIsa isa = matmul_isa_supported();
    printf("triad.c: 3 arrays of %d MB, best of %d passes; SIMD %s FMA loop, %d thread(s)\n", mb, reps,
           matmul_isa_name(isa), threads);
    printf("triad: %.2f GB/s (%d threads)\n", triad_rate(a, b, c, n, reps), threads);
    float sink = a[n / 2];
    printf("simd: %.2f GFLOP/s (%d threads)\n", simd_rate(isa, threads, reps, &sink), threads);
    if (sink == 12345.678f) { printf("(%g)\n", (double)sink); } // the loops' results are used
    free(a);
    free(b);
    free(c);
    return 0;
}
