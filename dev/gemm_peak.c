/*
dev/gemm_peak.c: the GEMM rates of llmc/cpu/matmul.h on this machine, at a large square size and at the trainer's
shapes.

    build/gemm_peak [-n 2048] [-r 3] [-s BT,C,Vp,L [-l OCxIC,...]]   (make build/gemm_peak, or build/gemm_peak_<blas>)

Times C(n,n) = A(n,n) . B(n,n)^T (the trainer's forward layout, beta 0) -r times after one untimed
call and prints the median rate of each GEMM the build has, one line each:

    gemm <kernel> <precision> <GFLOP/s>

    kernel openblas | openblas-system | mkl | onednn   matmul_gemm(MATMUL_FP32): the build's fp32 GEMM, called
                                              the way the trainer calls it (OpenMP slabs, BLAS 1 thread; oneDNN
                                              on the trainer's threads)
    kernel onednn | amx, bf16                 matmul_gemm(MATMUL_BF16) in a build with oneDNN: its bf16 kernel, or
                                              llmc's AMX kernel where that runs the bf16 GEMMs (an AMX CPU, unless
                                              LLMC_BF16_GEMM=onednn), B read from a bf16 mirror as the trainer reads
                                              a weight, A rounded per call as the trainer's activations are
    kernel blocked, fp32                      matmul_gemm_blocked: the built-in kernel
    kernel blocked, bf16                      the built-in bf16 kernel (AVX512-BF16 where the CPU has it,
                                              else bf16-rounded inputs multiplied in fp32)

With -s BT,C,Vp,L it also times the GEMMs of one GPT-2 training step with B*T = BT tokens, width C, padded
vocabulary Vp and L layers: per layer the qkv, attention projection, fc and fc projection GEMMs forward, their
input gradients and their weight gradients, and the lm_head's three, each the median of -r timed calls, the
layers' counted L times; it prints the step's GEMM FLOPs over their summed time for each GEMM of the build:

    gemm-step <kernel> <precision> <GFLOP/s>

-l OCxIC,... gives another family's layer (up to 8 linear layers, out x in features, in their order), e.g. Llama 3
d6: -l 768x384,384x384,1024x384,1024x384,384x1024 (qkv with 3 of 6 kv heads, attention projection, the two
SwiGLU inputs, its output); without it a layer is GPT-2's (3C x C, C x C, 4C x C, C x 4C).

-k KERNEL:PRECISION,... times only those (e.g. -k onednn:bf16, the oneDNN bf16 GEMM alone, to compare two oneDNN builds
back to back without the minutes of the fp32 kernels between them).

Threads: OMP_NUM_THREADS, as for the trainer. FLOPs = 2 M N K per call. dev/bench.py runs it
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

static void gemm_backend_bf16(int n, const float* A, const float* B, float* C) {
    matmul_gemm(MATMUL_BF16, 0, 1, n, n, n, A, n, B, n, 0.0f, C, n);
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

// ----------------------------------------------------------------------------
// the GEMMs of a training step

typedef struct { int M, N, K, transA, transB, weight_is_B, times; } StepGemm;

// which code a step's GEMMs run on: the build's matmul_gemm in a precision, or the built-in kernel
typedef struct { const char* kernel; MatmulPrecision prec; int builtin; } StepPath;

static double median_seconds(double* secs, int reps) {
    qsort(secs, (size_t)reps, sizeof(double), compare_doubles);
    return reps % 2 ? secs[reps / 2] : 0.5 * (secs[reps / 2 - 1] + secs[reps / 2]);
}

// GFLOP/s of the step's GEMMs on `path`: sum of FLOPs over the sum of each GEMM's median time x its count
static double step_rate(const StepGemm* g, int ng, StepPath path, int reps) {
    double flops = 0.0, seconds = 0.0;
    double* secs = malloc(sizeof(double) * (size_t)reps);
    for (int i = 0; i < ng; i++) {
        int M = g[i].M, N = g[i].N, K = g[i].K, ta = g[i].transA, tb = g[i].transB;
        int lda = ta ? M : K, ldb = tb ? K : N;
        size_t asz = (size_t)M * K, bsz = (size_t)K * N;
        float* A = malloc(asz * sizeof(float));
        float* B = malloc(bsz * sizeof(float));
        float* C = malloc((size_t)M * N * sizeof(float));
        uint16_t* B16 = malloc(bsz * sizeof(uint16_t));
        if (A == NULL || B == NULL || C == NULL || B16 == NULL || secs == NULL) { fprintf(stderr, "error: out of memory\n"); exit(1); }
        for (size_t k = 0; k < asz; k++) { A[k] = (float)((k * 7919u) % 1000u) * 1e-3f - 0.5f; }
        for (size_t k = 0; k < bsz; k++) { B[k] = (float)((k * 104729u) % 1000u) * 1e-3f - 0.5f; }
        if (g[i].weight_is_B) { // a weight: rounded to bf16 once per optimizer step, as the trainer's are
            matmul_round_bf16(B16, B, 1, bsz, bsz);
            matmul_bf16_mirror_add(B, bsz, B16);
        }
        for (int r = -1; r < reps; r++) { // one untimed call first
            double t0 = wall_seconds();
            if (path.builtin) { matmul_gemm_blocked(path.prec, ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C, N); }
            else { matmul_gemm(path.prec, ta, tb, M, N, K, A, lda, B, ldb, 0.0f, C, N); }
            if (r >= 0) { secs[r] = wall_seconds() - t0; }
        }
        if (g[i].weight_is_B) { matmul_bf16_mirror_remove(B); }
        seconds += median_seconds(secs, reps) * g[i].times;
        flops += 2.0 * M * N * K * g[i].times;
        free(A); free(B); free(C); free(B16);
    }
    free(secs);
    return flops / seconds / 1e9;
}

#define MAX_LAYER_GEMMS 8

// a layer's linear layers, (out features, in features) each
typedef struct { int n; int out[MAX_LAYER_GEMMS], in[MAX_LAYER_GEMMS]; } LayerShapes;

// GPT-2's layer: qkv, attproj, fc, fcproj
static LayerShapes gpt2_layer(int C) {
    return (LayerShapes){4, {3 * C, C, 4 * C, C}, {C, C, C, 4 * C}};
}

// the GEMMs of one training step (forward, input gradients, weight gradients) of L layers and the lm_head (Vp x C);
// returns how many
static int step_gemms(StepGemm* g, int BT, int C, int Vp, int L, LayerShapes layer) {
    int n = 0;
    for (int i = 0; i <= layer.n; i++) {
        int last = i == layer.n;
        int OC = last ? Vp : layer.out[i], IC = last ? C : layer.in[i], times = last ? 1 : L;
        g[n++] = (StepGemm){BT, OC, IC, 0, 1, 1, times};   // out (BT,OC) = inp (BT,IC) . W (OC,IC)^T
        g[n++] = (StepGemm){BT, IC, OC, 0, 0, 1, times};   // dinp (BT,IC) += dout (BT,OC) . W (OC,IC)
        g[n++] = (StepGemm){OC, IC, BT, 1, 0, 0, times};   // dW (OC,IC) += dout^T (OC,BT) . inp (BT,IC)
    }
    return n;
}

static void parse_shape(const char* value, int* BT, int* C, int* Vp, int* L) {
    char end = 0;
    if (value == NULL || sscanf(value, "%d,%d,%d,%d%c", BT, C, Vp, L, &end) != 4 || *BT < 1 || *C < 1 || *Vp < 1 ||
        *L < 1 || *BT > 1 << 20 || *C > 1 << 15 || *Vp > 1 << 20 || *L > 1024) {
        fprintf(stderr, "error: -s wants BT,C,Vp,L (four positive whole numbers, e.g. 256,768,50304,12), got '%s'\n",
                value ? value : "");
        exit(1);
    }
}

// -l OCxIC,OCxIC,...: 1 to MAX_LAYER_GEMMS linear layers
static LayerShapes parse_layer(const char* value) {
    LayerShapes layer = {0, {0}, {0}};
    const char* s = value ? value : "";
    while (*s != '\0') {
        int out = 0, in = 0, used = 0;
        if (layer.n == MAX_LAYER_GEMMS || sscanf(s, "%dx%d%n", &out, &in, &used) != 2 || out < 1 || in < 1 ||
            out > 1 << 20 || in > 1 << 20 || (s[used] != ',' && s[used] != '\0')) {
            layer.n = 0;
            break;
        }
        layer.out[layer.n] = out;
        layer.in[layer.n++] = in;
        s += used + (s[used] == ',');
    }
    if (layer.n == 0 || (value != NULL && value[strlen(value) - 1] == ',')) {
        fprintf(stderr, "error: -l wants 1 to %d linear layers OUTxIN, comma-separated (e.g. 2304x768,768x768), got '%s'\n",
                MAX_LAYER_GEMMS, value ? value : "");
        exit(1);
    }
    return layer;
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

// -k: the kernel:precision names to time ("openblas:fp32,onednn:bf16"); NULL = all of this build's
static const char* only_kernels = NULL;

// whether `name` is one of the comma-separated names of `list`
static int name_listed(const char* list, const char* name) {
    size_t len = strlen(name);
    for (const char* p = list; (p = strstr(p, name)) != NULL; p += len) {
        if ((p == list || p[-1] == ',') && (p[len] == '\0' || p[len] == ',')) { return 1; }
    }
    return 0;
}

// whether -k asked for kernel:precision, which this build has; recorded in `have` (a comma-separated list)
static int kernel_wanted(const char* kernel, const char* precision, char* have, size_t have_size) {
    char name[64];
    snprintf(name, sizeof(name), "%s:%s", kernel, precision);
    size_t used = strlen(have);
    snprintf(have + used, have_size - used, "%s%s", used > 0 ? "," : "", name);
    return only_kernels == NULL || name_listed(only_kernels, name);
}

// every name given to -k must be one of this build's GEMMs: one error line otherwise
static void check_wanted_kernels(const char* have) {
    if (only_kernels == NULL) { return; }
    char name[64];
    for (const char* p = only_kernels;; p++) {
        size_t len = strcspn(p, ",");
        snprintf(name, sizeof(name), "%.*s", (int)(len < sizeof(name) ? len : sizeof(name) - 1), p);
        if (len == 0 || len >= sizeof(name) || !name_listed(have, name)) {
            fprintf(stderr, "error: -k %s: '%s' is not a GEMM of this build (its GEMMs: %s)\n", only_kernels, name, have);
            exit(1);
        }
        p += len;
        if (*p == '\0') { break; }
    }
}

int main(int argc, char** argv) {
    int n = 2048, reps = 3, BT = 0, C_ = 0, Vp = 0, L = 0;
    LayerShapes layer = {0, {0}, {0}};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-n") == 0) { n = parse_positive("-n", i + 1 < argc ? argv[++i] : NULL); }
        else if (strcmp(argv[i], "-r") == 0) { reps = parse_positive("-r", i + 1 < argc ? argv[++i] : NULL); }
        else if (strcmp(argv[i], "-s") == 0) { parse_shape(i + 1 < argc ? argv[++i] : NULL, &BT, &C_, &Vp, &L); }
        else if (strcmp(argv[i], "-l") == 0) { layer = parse_layer(i + 1 < argc ? argv[++i] : NULL); }
        else if (strcmp(argv[i], "-k") == 0) { only_kernels = i + 1 < argc ? argv[++i] : ""; }
        else {
            printf("usage: %s [-n size (default 2048)] [-r timed repeats (default 3)] [-s BT,C,Vp,L (a GPT-2 step's GEMMs)]\n"
                   "       [-l OCxIC,... (with -s: a layer's linear layers, out x in features; default GPT-2's)]\n"
                   "       [-k KERNEL:PRECISION,... (only those, e.g. onednn:bf16)]\n"
                   "prints 'gemm <kernel> <precision> <GFLOP/s>' per GEMM of this build, and with -s\n"
                   "'gemm-step <kernel> <precision> <GFLOP/s>'; threads: OMP_NUM_THREADS\n",
                   argv[0]);
            return strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0 ? 0 : 1;
        }
    }
    const char* onednn_bf16 = matmul_bf16_onednn_kernel();
    char have[256] = "";
    int has_backend = strcmp(matmul_backend_name(), "blocked") != 0 &&
                      kernel_wanted(matmul_backend_name(), "fp32", have, sizeof(have));
    // the bf16 GEMM on bf16 operands: oneDNN's, or llmc's AMX kernel where that runs them (LLMC_BF16_GEMM)
    const char* bf16_kernel = matmul_bf16_gemm() == MATMUL_BF16_AMX ? "amx" : "onednn";
    int has_onednn_bf16 = onednn_bf16[0] != '\0' && matmul_bf16_takes_bf16() &&
                          kernel_wanted(bf16_kernel, "bf16", have, sizeof(have));
    int has_blocked_f32 = kernel_wanted("blocked", "fp32", have, sizeof(have));
    int has_blocked_bf16 = kernel_wanted("blocked", "bf16", have, sizeof(have));
    check_wanted_kernels(have);
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
    // the kernels OpenBLAS runs: its pick for this CPU, or the environment's OPENBLAS_CORETYPE
    const char* openblas_core = "";
#if defined(LLMC_BLAS_OPENBLAS)
    openblas_core = scipy_openblas_get_corename();
#endif
    printf("gemm_peak: backend %s%s%s%s, blocked fp32 kernel %s, bf16 %s%s%s, %d thread(s), n=%d, median of %d\n",
           matmul_backend_name(), openblas_core[0] != '\0' ? " (core " : "", openblas_core,
           openblas_core[0] != '\0' ? ")" : "", matmul_isa_name(matmul_isa()),
           matmul_bf16_native() ? "native (AVX512-BF16)" : "emulated in fp32",
           onednn_bf16[0] != '\0' ? ", oneDNN bf16 " : "", onednn_bf16, threads, n, reps);
    if (has_backend) { printf("gemm %s fp32 %.3f\n", matmul_backend_name(), gemm_rate(gemm_backend_f32, n, reps, A, B, C)); }
    if (has_onednn_bf16) {
        uint16_t* B16 = malloc(elems * sizeof(uint16_t));
        if (B16 == NULL) { fprintf(stderr, "error: out of memory for n=%d\n", n); return 1; }
        matmul_round_bf16(B16, B, 1, elems, elems);
        matmul_bf16_mirror_add(B, elems, B16);
        printf("gemm %s bf16 %.3f\n", bf16_kernel, gemm_rate(gemm_backend_bf16, n, reps, A, B, C));
        matmul_bf16_mirror_remove(B);
        free(B16);
    }
    if (has_blocked_f32) { printf("gemm blocked fp32 %.3f\n", gemm_rate(gemm_blocked_f32, n, reps, A, B, C)); }
    if (has_blocked_bf16) { printf("gemm blocked bf16 %.3f\n", gemm_rate(gemm_blocked_bf16, n, reps, A, B, C)); }
    if (BT > 0) {
        StepGemm g[3 * (MAX_LAYER_GEMMS + 1)];
        int ng = step_gemms(g, BT, C_, Vp, L, layer.n > 0 ? layer : gpt2_layer(C_));
        StepPath paths[] = {{matmul_backend_name(), MATMUL_FP32, 0}, {bf16_kernel, MATMUL_BF16, 0},
                            {"blocked", MATMUL_FP32, 1}, {"blocked", MATMUL_BF16, 1}};
        for (int p = 0; p < 4; p++) {
            if ((p == 0 && !has_backend) || (p == 1 && !has_onednn_bf16) || (p == 2 && !has_blocked_f32) ||
                (p == 3 && !has_blocked_bf16)) { continue; }
            printf("gemm-step %s %s %.3f\n", paths[p].kernel, paths[p].prec == MATMUL_BF16 ? "bf16" : "fp32",
                   step_rate(g, ng, paths[p], reps));
        }
    }
    free(A);
    free(B);
    free(C);
    return 0;
}
