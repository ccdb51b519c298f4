/*
dev/cuda/common.h: helpers for the kernel playground (one file per kernel in dev/cuda).

Each playground file has a CPU reference, numbered kernel versions (the last one is the
production kernel, #included from llmc/, never copied), validation of every version against
the reference, and a benchmark. Run a file's binary with a version number to run just that one.
*/
#ifndef LLMC_DEV_CUDA_COMMON_H
#define LLMC_DEV_CUDA_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/cuda_common.cuh"

// deterministic host random numbers in [-1, 1) (xorshift; the playground needs no torch parity)
static inline float* make_random_float(size_t n, uint64_t seed) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (size_t i = 0; i < n; i++) {
        s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
        x[i] = (float)((s * 0x2545F4914F6CDD1DULL) >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
    }
    return x;
}

static inline int* make_random_int(size_t n, int max, uint64_t seed) {
    int* x = (int*)mallocCheck(n * sizeof(int));
    float* r = make_random_float(n, seed);
    for (size_t i = 0; i < n; i++) { x[i] = (int)((r[i] * 0.5f + 0.5f) * (float)max) % max; }
    free(r);
    return x;
}

// host fp32 -> new device floatX buffer (and the host floats rounded the same way, for the reference)
static inline floatX* to_device(float* h, size_t n) {
    floatX* staging = (floatX*)mallocCheck(n * sizeof(floatX));
    floatX_from_float_host(staging, h, n);
    float_from_floatX_host(h, staging, n);  // the reference sees exactly the device's inputs
    floatX* d = (floatX*)cudaMallocCheck(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(d, staging, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(staging);
    return d;
}

static inline float* to_device_float(const float* h, size_t n) {
    float* d = (float*)cudaMallocCheck(n * sizeof(float));
    cudaCheck(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static inline int* to_device_int(const int* h, size_t n) {
    int* d = (int*)cudaMallocCheck(n * sizeof(int));
    cudaCheck(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

// tolerance for the build's precision: tol_fp32 in FP32 builds, tol_bf16 in BF16 builds
static inline float precision_tol(float tol_fp32, float tol_bf16) { return PRECISION_IS_BF16 ? tol_bf16 : tol_fp32; }

// compares a device result with the CPU reference: |got - ref| <= tol * (1 + |ref|); exits 1 on failure
template <class T>
static void validate_result(const T* d_got, const float* ref, const char* name, size_t n, float tol) {
    T* staging = (T*)mallocCheck(n * sizeof(T));
    cudaCheck(cudaMemcpy(staging, d_got, n * sizeof(T), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    double max_diff = 0.0;
    for (size_t i = 0; i < n; i++) {
        float g = to_float(staging[i]);
        double diff = fabs((double)g - (double)ref[i]);
        if (diff > max_diff || !isfinite(g)) { max_diff = isfinite(g) ? diff : INFINITY; }
        if (!(diff <= tol * (1.0 + fabs((double)ref[i])))) {
            if (bad < 5) { printf("  %s[%zu]: got %.6g, reference %.6g\n", name, i, g, ref[i]); }
            bad++;
        }
    }
    free(staging);
    printf("  %s: max abs diff %.3e over %zu values, %zu outside tolerance %.1e\n", name, max_diff, n, bad, tol);
    if (bad > 0) {
        printf("FAIL: %s does not match the CPU reference\n", name);
        exit(1);
    }
}

// average milliseconds of `repeats` calls of f (after one warm-up call)
template <class F>
static float benchmark_kernel(int repeats, F f) {
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    f();
    cudaCheck(cudaEventRecord(start));
    for (int i = 0; i < repeats; i++) { f(); }
    cudaCheck(cudaEventRecord(stop));
    cudaCheck(cudaEventSynchronize(stop));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, start, stop));
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return ms / repeats;
}

// which versions to run: all, or the one given as argv[1]
static inline int version_selected(int argc, char** argv, int version) {
    return argc < 2 || atoi(argv[1]) == version;
}

// a version with one output: a first call of run checked against the CPU reference, then the average
// time of `repeats` calls printed as "<name>: <ms> ms<note>" (note: e.g. " (including a copy)")
template <class T, class F>
static void check_and_time(const char* name, F run, const T* d_out, const float* ref, size_t n, float tol, int repeats,
                           const char* note = "") {
    run();
    validate_result(d_out, ref, name, n, tol);
    printf("%s: %.3f ms%s\n", name, benchmark_kernel(repeats, run), note);
}

#endif // LLMC_DEV_CUDA_COMMON_H
