/*
dev/cuda/common.h: helpers for the kernel playground (one file per kernel in dev/cuda).

Each playground file has a CPU reference, numbered kernel versions (the last one is the
production kernel, #included from llmc/, never copied), validation of every version against
the reference, and a benchmark. Every binary takes the same command line (playground_init):

    ./<kernel> [version] [--quick]
        version   run just this version (1..N); default: every version
        --quick   (or -q) the small problem QUICK_SHAPE instead of the full one, every selected version
                  validated exactly as in a full run (same tolerances), and one timed call per version
                  without warm-up instead of the benchmark; the time line says so

The problem is a Shape: GPT-2 124M's layer dimensions at the file's own batch size and sequence
length (playground_shape), or with --quick one small shape for every file, chosen to keep each
kernel's constraints and still run its loops past one warp and one block.
*/
#ifndef LLMC_DEV_CUDA_COMMON_H
#define LLMC_DEV_CUDA_COMMON_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../llmc/cuda/cuda_common.cuh"
#include "../../llmc/cuda/cublas_common.cuh"
#include "../../llmc/gpt2.h"

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

// a new device array of n T (uninitialised)
template <class T>
static T* device_alloc(size_t n) {
    return (T*)cudaMallocCheck(n * sizeof(T));
}

// host fp32 -> new device floatX buffer (and the host floats rounded the same way, for the reference)
static inline floatX* to_device(float* h, size_t n) {
    floatX* staging = (floatX*)mallocCheck(n * sizeof(floatX));
    floatX_from_float_host(staging, h, n);
    float_from_floatX_host(h, staging, n);  // the reference sees exactly the device's inputs
    floatX* d = device_alloc<floatX>(n);
    cudaCheck(cudaMemcpy(d, staging, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(staging);
    return d;
}

// host floats rounded to floatX in place, as a kernel that stores them rounds them (nothing in FP32 builds)
static inline void floatX_round_host(float* h, size_t n) {
    floatX* staging = (floatX*)mallocCheck(n * sizeof(floatX));
    floatX_from_float_host(staging, h, n);
    float_from_floatX_host(h, staging, n);
    free(staging);
}

// a kernel's random input: *host gets values in [-1, 1) rounded as the device holds them (what the CPU
// reference reads), the result is their device copy
static inline floatX* random_input(float** host, size_t n, uint64_t seed) {
    *host = make_random_float(n, seed);
    return to_device(*host, n);
}

// a kernel's random input as one object: host (values in [-1, 1) rounded as the device holds them, what the
// CPU reference reads) and dev (their device copy), both freed when it goes out of scope. A file declares
// its inputs in one line, each with its count and seed: Input inp((size_t)N * C, 1), w(C, 2);
struct Input {
    float* host;
    floatX* dev;
    Input(size_t n, uint64_t seed) { dev = random_input(&host, n, seed); }
    ~Input() {
        free(host);
        cudaCheck(cudaFree(dev));
    }
    Input(const Input&) = delete;
    Input& operator=(const Input&) = delete;
};

static inline float* to_device_float(const float* h, size_t n) {
    float* d = device_alloc<float>(n);
    cudaCheck(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

static inline int* to_device_int(const int* h, size_t n) {
    int* d = device_alloc<int>(n);
    cudaCheck(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

// tolerance for the build's precision: tol_fp32 in FP32 builds, tol_bf16 in BF16 builds
static inline float precision_tol(float tol_fp32, float tol_bf16) { return PRECISION_IS_BF16 ? tol_bf16 : tol_fp32; }

// bf16 results: a tolerance cannot see a conversion that truncates instead of rounding to nearest (its
// error, under one bf16 ulp, is far inside any useful tolerance), but the direction of the errors can.
// Against the reference rounded to nearest even, an honest kernel's fp32 noise moves as many values
// toward zero as away from it; truncation moves about half of all values toward zero and none away.
template <class T>
static void check_bf16_rounding(const T* d_got, const float* ref, const char* name, size_t n) {
    uint16_t* bits = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(bits, d_got, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    size_t toward = 0, away = 0;
    for (size_t i = 0; i < n; i++) {
        float got = bf16_bits_to_float(bits[i]);
        float nearest = bf16_bits_to_float(bf16_bits_round_nearest(ref[i]));
        if (!isfinite(got) || got == nearest) { continue; }
        if (fabsf(got) < fabsf(nearest)) { toward++; } else { away++; }
    }
    free(bits);
    printf("  %s: %zu values differ from the reference rounded to nearest even (%zu toward zero, %zu away)\n", name,
           toward + away, toward, away);
    if (toward + away > n / 20 && (toward > 4 * away || away > 4 * toward)) {
        printf("FAIL: %s is rounded in one direction (a truncating or biased bf16 conversion?)\n", name);
        exit(1);
    }
}

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
    if (sizeof(T) == 2) { check_bf16_rounding(d_got, ref, name, n); }
}

// ----------------------------------------------------------------------------
// the command line and the problem shape

typedef struct {
    int B, T;   // batch size, sequence length
    int C, NH;  // channels and heads (head size C / NH)
    int L;      // layers (the files that need a whole model's parameter vector)
    int V, Vp;  // vocabulary, padded to a multiple of 128
    int NKV;    // Llama 3's key/value heads (grouped-query attention: NH / NKV query heads share one)
    int FFN;    // Llama 3's SwiGLU hidden size
} Shape;

typedef struct {
    int version;  // the one version to run, or 0: every version
    int quick;    // --quick: QUICK_SHAPE, one timed call per version
    Shape shape;  // the problem (playground_start fills it; zero after playground_init alone)
} Playground;

static inline void playground_usage(FILE* f, const char* prog, int num_versions) {
    fprintf(f, "usage: %s [version] [--quick]\n"
               "  version   run just this version (1..%d); default: every version\n"
               "  --quick   (or -q) a small problem, every selected version validated against the CPU reference\n"
               "            with the usual tolerances, one timed call per version instead of the benchmark\n",
            prog, num_versions);
}

// parses the command line; a bad argument prints one error line and the usage, and exits 1
static inline Playground playground_init(int argc, char** argv, int num_versions) {
    Playground pg = {};
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        if (strcmp(arg, "--quick") == 0 || strcmp(arg, "-q") == 0) { pg.quick = 1; continue; }
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) { playground_usage(stdout, argv[0], num_versions); exit(0); }
        char* end = NULL;
        long v = strtol(arg, &end, 10);
        if (pg.version == 0 && end != arg && *end == '\0' && v >= 1 && v <= num_versions) { pg.version = (int)v; continue; }
        fprintf(stderr, "%s: unexpected argument '%s' (a version is 1..%d, given at most once)\n", argv[0], arg, num_versions);
        playground_usage(stderr, argv[0], num_versions);
        exit(1);
    }
    return pg;
}

// whether to run `version`: all of them, or the one named on the command line
static inline int version_selected(const Playground* pg, int version) { return pg->version == 0 || pg->version == version; }

// The --quick problem, shared by every file: GPT-2 d6's width (C = 384, 6 heads of 64) at B = 4, T = 128.
// C: twelve values per lane in the warp-per-row kernels, two passes of the 256-thread blocks that loop
// over a row's columns, a multiple of the 128-bit packet and of cuBLASLt's 16-byte alignment. B*T = 512
// rows: each of the 32 row chunks of the deterministic column sums gets 16, two per row lane. T: causal
// rows from 1 to 4 warps long. V = 1999 > 1024: the classifier's 1024-thread blocks make two passes over
// a row, and Vp (a multiple of 128, as the trainer pads) adds 49 padded columns. Two layers: the whole
// model (global_norm, nccl_all_reduce) has 4.4M parameters. Llama 3's kernels: 2 key/value heads, each
// shared by 3 query heads (h / 3 and h % 2 differ, so a head mapped to the wrong group shows), and the
// SwiGLU hidden size of a Llama 3 of this width (llama3_ffn_hidden(384, none, 32)).
static const Shape QUICK_SHAPE = {4, 128, 384, 6, 2, 1999, 2048, 2, 1024};

// GPT-2 124M (d12: C = 768, 12 heads, 12 layers, its vocabulary) at the given B and T, or QUICK_SHAPE;
// Llama 3's kernels at that width: 4 key/value heads (groups of 3), FFN = llama3_ffn_hidden(768, none, 32)
static inline Shape playground_shape(const Playground* pg, int B, int T) {
    if (pg->quick) { return QUICK_SHAPE; }
    Shape s = {B, T, 768, 12, 12, GPT2_VOCAB_SIZE, GPT2_PADDED_VOCAB_SIZE, 4, 2048};
    return s;
}

// the model of a shape, maxT = T (for the files that work on the whole parameter vector)
static inline GPT2Config shape_model(const Shape* s) {
    GPT2Config cfg = {s->T, s->V, s->Vp, s->L, s->NH, s->C};
    return cfg;
}

// "full size", or what --quick changes (for the line that says what runs)
static inline const char* playground_mode(const Playground* pg) {
    return pg->quick ? "--quick (small problem, one timed call per version)" : "full size";
}

// one line saying what runs, before the first version
static inline void playground_announce(const Playground* pg, const char* name, const Shape* s) {
    printf("%s: B=%d T=%d C=%d NH=%d L=%d V=%d Vp=%d, %s, %s\n", name, s->B, s->T, s->C, s->NH, s->L, s->V, s->Vp,
           PRECISION_NAME, playground_mode(pg));
}

// every file's start: the command line, the problem in pg.shape (full size at B and T, or QUICK_SHAPE)
// and its line
static inline Playground playground_start(int argc, char** argv, int num_versions, const char* name, int B, int T) {
    Playground pg = playground_init(argc, argv, num_versions);
    pg.shape = playground_shape(&pg, B, T);
    playground_announce(&pg, name, &pg.shape);
    return pg;
}

// the cuBLAS files' set-up: a stream of their own with llmc's CublasContext on it; playground_cublas_free
// undoes both
static inline cudaStream_t playground_cublas_init(CublasContext* ctx) {
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    cublas_context_init(ctx, stream);
    return stream;
}

static inline void playground_cublas_free(CublasContext* ctx, cudaStream_t stream) {
    cublas_context_free(ctx);
    cudaCheck(cudaStreamDestroy(stream));
}

// ----------------------------------------------------------------------------
// timing

// milliseconds per call of f: the average of `repeats` calls after one warm-up call. With --quick a
// single call without warm-up: it checks that the timed path runs, it measures nothing (timing_note).
template <class F>
static float benchmark_kernel(const Playground* pg, int repeats, F f) {
    if (pg->quick) {
        repeats = 1;
    } else {
        f();
    }
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
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

// appended to every time line: empty in a full run
static inline const char* timing_note(const Playground* pg) { return pg->quick ? " (--quick: one call, not a benchmark)" : ""; }

// a version with one output: a first call of run checked against the CPU reference, then the average
// time of `repeats` calls printed as "<name>: <ms> ms<note>" (note: e.g. " (including a copy)")
template <class T, class F>
static void check_and_time(const Playground* pg, const char* name, F run, const T* d_out, const float* ref, size_t n,
                           float tol, int repeats, const char* note = "") {
    run();
    validate_result(d_out, ref, name, n, tol);
    printf("%s: %.3f ms%s%s\n", name, benchmark_kernel(pg, repeats, run), note, timing_note(pg));
}

#endif // LLMC_DEV_CUDA_COMMON_H
