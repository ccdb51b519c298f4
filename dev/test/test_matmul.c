/*
dev/test/test_matmul.c: llmc/cpu/matmul.h's GEMMs against a naive double-precision reference.

For odd shapes (1, 5, 7, 33, 67, 130, 257, 300, ...), all four transpose combinations, row
strides larger than the matrix (sub-matrices) and beta in {0, 1, 0.5}, it checks
  - matmul_gemm(MATMUL_FP32): the build's BLAS (make BLAS=mkl|openblas) or the blocked kernel
  - matmul_gemm_blocked(MATMUL_FP32): the dependency-free kernel, always
  - matmul_gemm(MATMUL_BF16): against the double reference of the bf16-rounded inputs, and
    against the exact fp32 inputs with bf16's rounding error budget
Tolerances: fp32 |err| <= 1e-5 * (|beta*C| + sum_k |a||b|) per element (K * 2^-24 rounding
with margin); bf16 vs rounded inputs 1e-5 of the same scale; bf16 vs exact inputs 2^-7 of it.
Also: bf16 rounding matches llmc/bf16.h; the bf16 GEMM on shapes spanning several K, column
and row blocks (tall thin C included) equals, bit for bit on 1 to 4 threads, a reference that
rounds the inputs to bf16 and sums in fp32 in the kernel's order (gemm_bf16_kernel_order; with
AVX512-BF16 the threads agree bit for bit and the error is checked instead); the blocked kernel
gives bit-identical results on 1 to 4 threads (the blocked fp32 kernel is the one matmul_isa() picks: LLMC_MATMUL_ISA
forces avx512, avx2 or generic, so a test can run each one the CPU has); llmc/cpu/vecmath.h's expf / tanhf / GELU (the trainer's vectorised
element-wise math) against libm in double: exp relative 2e-7, tanh absolute 3e-7, GELU 1e-6
(absolute, relative above |x| = 1), its derivative absolute 2e-6, over [-90, 90] by 1e-3; on a CPU with AVX-512,
vec16_expf, mm16_round_bf16 and mm32_round_bf16 (the hand-written loops' exp and bf16 roundings) against vec_expf and
matmul_bf16_round_value, bit for bit on all 2^32 floats (8 of the program's 9 s here), and on a CPU with AVX2 and FMA
vec8_expf and vec8_tanhf against vec_expf and vec_tanhf the same way (LLMC_TEST_VECMATH=0 leaves them
out: they check neither the BLAS nor the blocked kernel's ISA, so tests/test_cpu_kernels.py and test_cpu_variants.py
run them in one of their runs of each build, not in all of them).
In a build with oneDNN (-DLLMC_ONEDNN: BLAS=onednn, or any BLAS but none with the wheels): its fp32 GEMM against the
built-in kernel and the reference on 1-3 threads (check_onednn_fp32), and its bf16 path, the one the environment
says to expect (LLMC_TEST_ONEDNN_BF16=kernel|refused; check_onednn_bf16), with the weight mirrors; a failing oneDNN
status is one error line naming the GEMM (check_onednn_error_line); the linear layer's bias as oneDNN's argument
against the bias rows and the GEMM adding onto them, bit for bit (check_onednn_bias).
*/
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "llmc/cpu/matmul.h"
#include "llmc/bf16.h"
#include "llmc/cpu/vecmath.h"
#include "test_common.h"

static unsigned long long rng_state = 88172645463325252ULL;

static float rand_uniform(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((rng_state >> 40) / (double)(1ULL << 24)) * 2.0f - 1.0f;
}

static float round_bf16(float x) { return mm_bf16_to_float(mm_bf16_round(x)); }

// a copy of the n floats of X rounded to bf16 (rounded once, not in every product of the references)
static float* rounded_copy(const float* X, size_t n) {
    float* r = (float*)malloc((n + 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) { r[i] = round_bf16(X[i]); }
    return r;
}

// C = beta*C + op(A) op(B) in double; scale[i] = |beta*C| + sum |a||b| (the error scale)
static void gemm_reference(int ta, int tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                           float beta, const float* C0, int ldc, int bf16_inputs, double* out, double* scale) {
    float* Ar = bf16_inputs ? rounded_copy(A, (size_t)(ta ? K : M) * lda) : NULL;
    float* Br = bf16_inputs ? rounded_copy(B, (size_t)(tb ? N : K) * ldb) : NULL;
    if (bf16_inputs) { A = Ar; B = Br; }
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double c = (double)beta * C0[(size_t)i * ldc + j], s = fabs(c);
            for (int k = 0; k < K; k++) {
                float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                float b = tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j];
                c += (double)a * b;
                s += fabs((double)a * b);
            }
            out[(size_t)i * N + j] = c;
            scale[(size_t)i * N + j] = s;
        }
    }
    free(Ar); free(Br);
}

typedef void (*gemm_fn)(MatmulPrecision, int, int, int, int, int, const float*, int, const float*, int, float, float*, int);

static void gemm_entry(MatmulPrecision p, int ta, int tb, int M, int N, int K, const float* A, int lda,
                       const float* B, int ldb, float beta, float* C, int ldc) {
    matmul_gemm(p, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

// max over elements of |C - ref| / (tol * scale); <= 1 passes
static double worst_error(const float* C, int ldc, int M, int N, const double* ref, const double* scale, double tol) {
    double worst = 0.0;
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double err = fabs((double)C[(size_t)i * ldc + j] - ref[(size_t)i * N + j]);
            double r = err / (tol * scale[(size_t)i * N + j] + 1e-30);
            if (!(r <= worst)) { worst = r; }   // NaN counts as worst
        }
    }
    return worst;
}

static void check_shape(int M, int N, int K, int ta, int tb, float beta, int pad) {
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    size_t asz = (size_t)(ta ? K : M) * lda, bsz = (size_t)(tb ? N : K) * ldb, csz = (size_t)M * ldc;
    float* A = (float*)malloc((asz + 1) * sizeof(float));
    float* B = (float*)malloc((bsz + 1) * sizeof(float));
    float* C0 = (float*)malloc((csz + 1) * sizeof(float));
    float* C = (float*)malloc((csz + 1) * sizeof(float));
    double* ref[2], * scale[2];  // the double references of the fp32 inputs [0] and of their bf16 roundings [1]
    for (size_t i = 0; i < asz; i++) { A[i] = rand_uniform(); }
    for (size_t i = 0; i < bsz; i++) { B[i] = rand_uniform(); }
    for (size_t i = 0; i < csz; i++) { C0[i] = rand_uniform(); }
    for (int r = 0; r < 2; r++) {
        ref[r] = (double*)malloc(((size_t)M * N + 1) * sizeof(double));
        scale[r] = (double*)malloc(((size_t)M * N + 1) * sizeof(double));
        gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, C0, ldc, r, ref[r], scale[r]);
    }

    struct { const char* name; gemm_fn fn; MatmulPrecision p; int bf16_ref; double tol; } cases[] = {
        {"matmul_gemm fp32 (" MATMUL_BACKEND ")", gemm_entry, MATMUL_FP32, 0, 1e-5},
        {"blocked fp32", matmul_gemm_blocked, MATMUL_FP32, 0, 1e-5},
        {"matmul_gemm bf16 vs rounded inputs", gemm_entry, MATMUL_BF16, 1, 1e-5},
        {"matmul_gemm bf16 vs fp32 inputs", gemm_entry, MATMUL_BF16, 0, 1.0 / 128.0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        memcpy(C, C0, csz * sizeof(float));
        cases[c].fn(cases[c].p, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
        double w = worst_error(C, ldc, M, N, ref[cases[c].bf16_ref], scale[cases[c].bf16_ref], cases[c].tol);
        CHECK(w <= 1.0, "%s M=%d N=%d K=%d transA=%d transB=%d beta=%g pad=%d: error %.3g x tolerance",
              cases[c].name, M, N, K, ta, tb, beta, pad, w);
        // the padding columns of C (beyond N in each row) are never written
        int untouched = 1;
        for (int i = 0; i < M && pad > 0; i++) {
            for (int j = N; j < ldc; j++) { if (C[(size_t)i * ldc + j] != C0[(size_t)i * ldc + j]) { untouched = 0; } }
        }
        CHECK(untouched, "%s M=%d N=%d K=%d: wrote outside the N columns", cases[c].name, M, N, K);
    }
    free(A); free(B); free(C0); free(C);
    for (int r = 0; r < 2; r++) { free(ref[r]); free(scale[r]); }
}

// the blocked kernel sums each element in one fixed order: 1, 2, 3 and 4 threads agree bit for bit
// (they share C out as different grids of rectangles)
static void check_thread_determinism(MatmulPrecision p) {
#ifdef _OPENMP
    int M = 131, N = 1100, K = 515;
    float* A = (float*)malloc((size_t)M * K * sizeof(float));
    float* B = (float*)malloc((size_t)N * K * sizeof(float));
    float* C1 = (float*)calloc((size_t)M * N, sizeof(float));
    float* Cn = (float*)calloc((size_t)M * N, sizeof(float));
    for (size_t i = 0; i < (size_t)M * K; i++) { A[i] = rand_uniform(); }
    for (size_t i = 0; i < (size_t)N * K; i++) { B[i] = rand_uniform(); }
    int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    matmul_gemm_blocked(p, 0, 1, M, N, K, A, K, B, K, 0.0f, C1, N);
    for (int threads = 2; threads <= 4; threads++) {
        omp_set_num_threads(threads);
        matmul_gemm_blocked(p, 0, 1, M, N, K, A, K, B, K, 0.0f, Cn, N);
        CHECK(memcmp(C1, Cn, (size_t)M * N * sizeof(float)) == 0, "blocked %s: 1 and %d threads differ",
              p == MATMUL_BF16 ? "bf16" : "fp32", threads);
    }
    omp_set_num_threads(saved);
    free(A); free(B); free(C1); free(Cn);
#else
    CHECK(1, "no OpenMP: single-threaded");
#endif
}

// bf16(op(A)) . bf16(op(B)) summed the way the emulated bf16 kernel sums: C scaled by beta (0
// clears it), then for each K block of MM_KC a sum from zero over the block's k pairs,
// s += a(k) b(k) + a(k+1) b(k+1) (the k past an odd K counts as 0 . 0), added to C
static void gemm_bf16_kernel_order(int ta, int tb, int M, int N, int K, const float* A, int lda, const float* B, int ldb,
                                   float beta, float* C, int ldc) {
    float* Ar = rounded_copy(A, (size_t)(ta ? K : M) * lda), * Br = rounded_copy(B, (size_t)(tb ? N : K) * ldb);
    for (int i = 0; i < M; i++) { // a pass of its own: beta * C stays a rounded product (not fused into a sum)
        for (int j = 0; j < N; j++) {
            float* c = &C[(size_t)i * ldc + j];
            if (beta == 0.0f) { *c = 0.0f; } else if (beta != 1.0f) { *c *= beta; }
        }
    }
    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            float c = C[(size_t)i * ldc + j];
            for (int k0 = 0; k0 < K; k0 += MM_KC) {
                int k1 = K - k0 < MM_KC ? K : k0 + MM_KC;
                float s = 0.0f;
                for (int k = k0; k < k1; k += 2) {
                    float a0 = ta ? Ar[(size_t)k * lda + i] : Ar[(size_t)i * lda + k];
                    float b0 = tb ? Br[(size_t)j * ldb + k] : Br[(size_t)k * ldb + j];
                    float a1 = 0.0f, b1 = 0.0f;
                    if (k + 1 < k1) {
                        a1 = ta ? Ar[(size_t)(k + 1) * lda + i] : Ar[(size_t)i * lda + k + 1];
                        b1 = tb ? Br[(size_t)j * ldb + k + 1] : Br[(size_t)(k + 1) * ldb + j];
                    }
                    s += a0 * b0 + a1 * b1;
                }
                c += s;
            }
            C[(size_t)i * ldc + j] = c;
        }
    }
    free(Ar); free(Br);
}

// The bf16 GEMM on shapes that span several K blocks (odd K, an odd last block of 1 or 3 k),
// several column blocks of MM_NCB and row blocks of MM_MC, a tall thin and a short wide C, every
// transpose, beta 0 / 1 / 0.5 and padded rows, on 1 to 4 threads. Emulated (no AVX512-BF16, or
// LLMC_BF16_NATIVE=0): bit for bit gemm_bf16_kernel_order on every thread count. With vdpbf16ps
// (its two-term sums round their own way): within 1e-5 of the rounded inputs' double reference,
// and bit for bit the same on every thread count.
static void check_bf16_blocks(void) {
    const int shapes[][3] = {{40, 1100, 600}, {131, 560, 515}, {1500, 24, 300}, {7, 1200, 257}, {3, 5, 1}};
    const float betas[] = {0.0f, 1.0f, 0.5f};
    int emulated = !matmul_bf16_native();
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        for (int t = 0; t < 4; t++) {
            int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2], ta = t & 1, tb = t >> 1, pad = (int)(s + t) % 3;
            float beta = betas[(s + t) % 3];
            int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
            size_t asz = (size_t)(ta ? K : M) * lda, bsz = (size_t)(tb ? N : K) * ldb, csz = (size_t)M * ldc;
            float* A = (float*)malloc(asz * sizeof(float));
            float* B = (float*)malloc(bsz * sizeof(float));
            float* C0 = (float*)malloc(csz * sizeof(float));
            float* ref = (float*)malloc(csz * sizeof(float));
            float* C = (float*)malloc(csz * sizeof(float));
            double* dref = (double*)malloc((size_t)M * N * sizeof(double));
            double* scale = (double*)malloc((size_t)M * N * sizeof(double));
            for (size_t i = 0; i < asz; i++) { A[i] = rand_uniform(); }
            for (size_t i = 0; i < bsz; i++) { B[i] = rand_uniform(); }
            for (size_t i = 0; i < csz; i++) { C0[i] = rand_uniform(); }
            memcpy(ref, C0, csz * sizeof(float));
            gemm_bf16_kernel_order(ta, tb, M, N, K, A, lda, B, ldb, beta, ref, ldc);
            gemm_reference(ta, tb, M, N, K, A, lda, B, ldb, beta, C0, ldc, 1, dref, scale);
            for (int threads = 1; threads <= 4; threads++) {
#ifdef _OPENMP
                int saved = omp_get_max_threads();
                omp_set_num_threads(threads);
#endif
                memcpy(C, C0, csz * sizeof(float));
                matmul_gemm_blocked(MATMUL_BF16, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
#ifdef _OPENMP
                omp_set_num_threads(saved);
#endif
                if (threads == 1 || !emulated) {
                    double w = worst_error(C, ldc, M, N, dref, scale, 1e-5);
                    CHECK(w <= 1.0, "bf16 blocks M=%d N=%d K=%d transA=%d transB=%d beta=%g: error %.3g x tolerance",
                          M, N, K, ta, tb, beta, w);
                }
                if (!emulated && threads == 1) { memcpy(ref, C, csz * sizeof(float)); continue; }
                size_t differ = 0;
                for (size_t i = 0; i < csz; i++) { differ += memcmp(&C[i], &ref[i], sizeof(float)) != 0; }
                CHECK(differ == 0, "bf16 blocks M=%d N=%d K=%d transA=%d transB=%d beta=%g, %d thread(s): %zu elements "
                      "differ from %s", M, N, K, ta, tb, beta, threads, differ,
                      emulated ? "the kernel-order reference" : "1 thread");
            }
            free(A); free(B); free(C0); free(ref); free(C); free(dref); free(scale);
        }
    }
}

static void check_bf16_rounding(void) {
    // round to nearest even, like llmc/bf16.h's bf16_bits_round_nearest (the GPU trainer's rule)
    const float specials[] = {0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 1.0039063f, 3.14159265f, -2.5e-3f,
                              65504.0f, 1e-40f, 3.389531e38f, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) {
        CHECK(mm_bf16_round(specials[i]) == bf16_bits_round_nearest(specials[i]), "bf16 round of %g", specials[i]);
    }
    int mismatches = 0;
    for (int i = 0; i < 100000; i++) {
        float x = rand_uniform() * powf(2.0f, (float)(i % 60 - 30));
        if (mm_bf16_round(x) != bf16_bits_round_nearest(x)) { mismatches++; }
    }
    CHECK(mismatches == 0, "bf16 rounding: %d of 100000 random values differ from bf16.h", mismatches);
    CHECK(mm_bf16_round(1.00390625f) == 0x3f80, "tie 1 + 2^-8 rounds to even (1.0)");
    CHECK(mm_bf16_round(1.01171875f) == 0x3f82, "tie 1 + 3*2^-8 rounds to even (1 + 2^-6)");
    CHECK(isnan(mm_bf16_to_float(mm_bf16_round(NAN))), "NaN stays NaN");
    for (size_t i = 0; i < sizeof(specials) / sizeof(specials[0]); i++) { // the branch-free rounding is the same
        CHECK(matmul_bf16_round_value(specials[i]) == mm_bf16_round(specials[i]), "branch-free round of %g", specials[i]);
    }
    CHECK(matmul_bf16_round_value(NAN) == mm_bf16_round(NAN), "branch-free round of NaN");
}

// a mirror (a bf16 copy registered for the GEMMs) found for a covered operand, its writable copy for a layer, and
// the staleness check of LLMC_BF16_CHECK_MIRRORS that finds the one element written without its copy
static void check_bf16_mirrors(void) {
    enum { ROWS = 5, COLS = 7, LD = 9 };
    float X[ROWS * LD];
    uint16_t X16[ROWS * LD];
    for (int i = 0; i < ROWS * LD; i++) {
        X[i] = rand_uniform();
        X16[i] = matmul_bf16_round_value(X[i]);
    }
    matmul_bf16_mirror_add(X, ROWS * LD, X16);
    CHECK(matmul_bf16_shadow(X + LD, 2 * LD) == X16 + LD, "a layer finds the copy of a covered range");
    CHECK(matmul_bf16_shadow(X + LD, ROWS * LD) == NULL, "no copy for a range past the mirror's end");
    CHECK(matmul_bf16_mirror_stale_at(X16, X, ROWS, COLS, LD) == -1, "an equal copy is not stale");
    X[3 * LD + 4] += 1.0f; // written without its copy
    CHECK(matmul_bf16_mirror_stale_at(X16, X, ROWS, COLS, LD) == 3 * LD + 4, "the stale element is found");
    X[2 * LD + 8] += 1.0f; // outside the operand's columns: not read, not checked
    CHECK(matmul_bf16_mirror_stale_at(X16, X, 3, COLS, LD) == -1, "columns past cols are not the operand's");
    matmul_bf16_mirror_remove(X);
    CHECK(matmul_bf16_shadow(X, LD) == NULL, "no copy once removed");
}

static void check_vecmath(void) {
    double we = 0.0, wt = 0.0, wg = 0.0, wgg = 0.0, ws = 0.0, wsg = 0.0; // (ws, wsg: the GELU's sigmoid form)
    int normal = 1; // the sigmoid form's values stay normal floats (no subnormal s) wherever they are not 0
    for (int i = -90000; i <= 90000; i++) {
        float x = (float)i * 1e-3f;
        if (x >= -87.0f && x <= 88.0f) {
            double r = fabs(vec_expf(x) - exp((double)x)) / exp((double)x);
            if (!(r <= we)) { we = r; }
        }
        double t = fabs(vec_tanhf(x) - tanh((double)x));
        if (!(t <= wt)) { wt = t; }
        double u = 0.7978845608028654 * ((double)x + 0.044715 * (double)x * x * x), th = tanh(u);
        double g = fabs(vec_gelu_forward(x) - 0.5 * x * (1.0 + th)) / fmax(1.0, fabs((double)x));
        if (!(g <= wg)) { wg = g; }
        double dg = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * (double)x * x);
        double gg = fabs(vec_gelu_grad(x) - dg);
        if (!(gg <= wgg)) { wgg = gg; }
        double sg = fabs(vec_gelu_forward_sigmoid(x) - 0.5 * x * (1.0 + th)) / fmax(1.0, fabs((double)x));
        if (!(sg <= ws)) { ws = sg; }
        double sgg = fabs(vec_gelu_grad_sigmoid(x) - dg);
        if (!(sgg <= wsg)) { wsg = sgg; }
        float s = 1.0f / (1.0f + vec_gelu_sigmoid_e(x)), y = vec_gelu_forward_sigmoid(x);
        if (fpclassify(s) == FP_SUBNORMAL || fpclassify(y) == FP_SUBNORMAL) { normal = 0; }
    }
    CHECK(we <= 2e-7, "vec_expf relative error %.3g", we);
    CHECK(wt <= 3e-7, "vec_tanhf absolute error %.3g", wt);
    CHECK(wg <= 1e-6, "vec_gelu_forward error %.3g (absolute, relative above |x| = 1)", wg);
    CHECK(wgg <= 2e-6, "vec_gelu_grad absolute error %.3g", wgg);
    CHECK(ws <= 1e-6, "vec_gelu_forward_sigmoid error %.3g (absolute, relative above |x| = 1)", ws);
    CHECK(wsg <= 5e-7, "vec_gelu_grad_sigmoid absolute error %.3g", wsg); // (the tanh form's: 1.03e-6)
    CHECK(normal, "the GELU's sigmoid form gave a subnormal value on [-90, 90]");
    CHECK(vec_gelu_forward_sigmoid(100.0f) == 100.0f && vec_gelu_grad_sigmoid(100.0f) == 1.0f,
          "the GELU's sigmoid form is x and its derivative 1 far right");
    CHECK(fabsf(vec_gelu_forward_sigmoid(-100.0f)) < 1e-30f && fabsf(vec_gelu_grad_sigmoid(-100.0f)) < 1e-28f,
          "the GELU's sigmoid form is 0 and its derivative 0 far left");
    CHECK(isnan(vec_gelu_forward_sigmoid(NAN)) && isnan(vec_gelu_grad_sigmoid(NAN)), "NaN propagates (GELU, sigmoid)");
    CHECK(vec_expf(-100.0f) > 0.0f && vec_expf(-100.0f) < 1e-37f, "vec_expf clamps below");
    CHECK(isfinite(vec_expf(100.0f)) && vec_expf(100.0f) > 1e38f, "vec_expf clamps above");
    CHECK(vec_tanhf(50.0f) == 1.0f && vec_tanhf(-50.0f) == -1.0f, "vec_tanhf saturates");
    CHECK(isnan(vec_expf(NAN)) && isnan(vec_tanhf(NAN)), "NaN propagates");
}

#if MATMUL_X86
__attribute__((target(MM_BF16_TARGET)))
static void round16_and_round32(uint16_t* r, uint16_t* r32, const float* x, size_t n) {
    for (size_t i = 0; i < n; i += 32) {
        __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
        _mm256_storeu_si256((__m256i*)(void*)(r + i), mm16_round_bf16(a));
        _mm256_storeu_si256((__m256i*)(void*)(r + i + 16), mm16_round_bf16(b));
        _mm512_storeu_si512((void*)(r32 + i), mm32_round_bf16(a, b));
    }
}

__attribute__((target("avx512f")))
static void exp16(float* e, const float* x, size_t n) {
    for (size_t i = 0; i < n; i += 16) { _mm512_storeu_ps(e + i, vec16_expf(_mm512_loadu_ps(x + i))); }
}

// the bf16 roundings of the AVX-512 loops against matmul_bf16_round_value on every one of the 2^32 floats, in
// vectors of consecutive floats (mm_bf16_cvt_on's conversion, else the integer rounding), then in vectors that mix
// denormals, zeros, NaNs and infinities into normal values (the conversion's fallback taken for some vectors, not
// others); the row (mm_round_bf16_row, bf16_copy_row) on the mixed values too. Returns the differences.
static long long check_round16(int cvt) {
    mm_bf16_cvt_state = cvt; // (test scaffolding: the switch LLMC_BF16_CVT sets once)
    enum { CHUNK = 1 << 16 };
    float* x = (float*)malloc(CHUNK * sizeof(float));
    uint16_t* r = (uint16_t*)malloc(CHUNK * sizeof(uint16_t)), * r16 = (uint16_t*)malloc(CHUNK * sizeof(uint16_t));
    uint16_t* r32 = (uint16_t*)malloc(CHUNK * sizeof(uint16_t)), * row = (uint16_t*)malloc(CHUNK * sizeof(uint16_t));
    long long diff = 0;
    for (uint64_t base = 0; base < (1ull << 32); base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            uint32_t u = (uint32_t)base + i;
            memcpy(&x[i], &u, sizeof(float));
        }
        for (uint32_t i = 0; i < CHUNK; i++) { r[i] = matmul_bf16_round_value(x[i]); }
        round16_and_round32(r16, r32, x, CHUNK);
        for (uint32_t i = 0; i < CHUNK; i++) { diff += (r[i] != r16[i]) + (r[i] != r32[i]); }
    }
    const uint32_t odd[] = {0x00000001u, 0x807fffffu, 0x00400000u, 0x00000000u, 0x80000000u, 0x7f800001u, 0xffc00000u,
                            0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x00800000u};
    uint64_t state = 12345;
    for (uint32_t i = 0; i < CHUNK; i++) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t u = (uint32_t)(state >> 32);
        if ((state >> 20) % 61 == 0) { u = odd[(state >> 8) % (sizeof(odd) / sizeof(odd[0]))] ^ ((uint32_t)state & 0xffu); }
        memcpy(&x[i], &u, sizeof(float));
    }
    for (uint32_t i = 0; i < CHUNK; i++) { r[i] = matmul_bf16_round_value(x[i]); }
    round16_and_round32(r16, r32, x, CHUNK);
    mm_round_bf16_row(row, x, CHUNK - 7); // (a tail past the last 32)
    for (uint32_t i = 0; i < CHUNK; i++) { diff += (r[i] != r16[i]) + (r[i] != r32[i]) + (i < CHUNK - 7 && r[i] != row[i]); }
    bf16_copy_row(row, x, CHUNK);
    for (uint32_t i = 0; i < CHUNK; i++) { diff += r[i] != row[i]; }
    free(x); free(r); free(r16); free(r32); free(row);
    mm_bf16_cvt_state = -1;
    return diff;
}

__attribute__((target("avx2,fma")))
static void exp8_tanh8(float* e, float* t, const float* x, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(e + i, vec8_expf(v));
        _mm256_storeu_ps(t + i, vec8_tanhf(v));
    }
}

// the count of a and b's values that differ in their bits (two NaNs count as the same), and the first x where they do
static long long count_differences(const float* a, const float* b, const float* x, uint32_t n, float* first) {
    long long diff = 0;
    if (memcmp(a, b, sizeof(float) * n) == 0) { return 0; }
    for (uint32_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(isnan(a[i]) && isnan(b[i]))) {
            if (diff++ == 0) { *first = x[i]; }
        }
    }
    return diff;
}

// vec8_expf and vec8_tanhf (the AVX2 loops' exp and tanh) give vec_expf's and vec_tanhf's bits for every one of the
// 2^32 floats (NaN: a NaN); the chunks shared among the threads (37 s on one Zen 3 thread)
static void check_vecmath8(void) {
    if (!vec8_supported()) {
        printf("vec8_expf, vec8_tanhf: not run (no AVX2 and FMA on this CPU, or no FMA in this build)\n");
        return;
    }
    enum { CHUNK = 1 << 16 };
    long long exp_diff = 0, tanh_diff = 0;
    float first_exp = NAN, first_tanh = NAN; // (the first difference of the lowest chunk that has one)
    uint64_t first_exp_chunk = UINT64_MAX, first_tanh_chunk = UINT64_MAX;
    #pragma omp parallel reduction(+ : exp_diff, tanh_diff)
    {
        float* x = (float*)mallocCheck(CHUNK * sizeof(float)), * e = (float*)mallocCheck(CHUNK * sizeof(float));
        float* t = (float*)mallocCheck(CHUNK * sizeof(float)), * e8 = (float*)mallocCheck(CHUNK * sizeof(float));
        float* t8 = (float*)mallocCheck(CHUNK * sizeof(float));
        #pragma omp for schedule(dynamic, 16)
        for (uint64_t chunk = 0; chunk < (1ull << 32) / CHUNK; chunk++) {
            for (uint32_t i = 0; i < CHUNK; i++) {
                uint32_t u = (uint32_t)(chunk * CHUNK) + i;
                memcpy(&x[i], &u, sizeof(float));
            }
            for (uint32_t i = 0; i < CHUNK; i++) { e[i] = vec_expf(x[i]); }
            for (uint32_t i = 0; i < CHUNK; i++) { t[i] = vec_tanhf(x[i]); }
            exp8_tanh8(e8, t8, x, CHUNK);
            float fe = 0.0f, ft = 0.0f;
            long long de = count_differences(e, e8, x, CHUNK, &fe), dt = count_differences(t, t8, x, CHUNK, &ft);
            exp_diff += de;
            tanh_diff += dt;
            if (de > 0 || dt > 0) {
                #pragma omp critical
                {
                    if (de > 0 && chunk < first_exp_chunk) { first_exp_chunk = chunk; first_exp = fe; }
                    if (dt > 0 && chunk < first_tanh_chunk) { first_tanh_chunk = chunk; first_tanh = ft; }
                }
            }
        }
        free(x); free(e); free(t); free(e8); free(t8);
    }
    CHECK(exp_diff == 0, "vec8_expf = vec_expf on all 2^32 floats (%lld differ, the first at %a)", exp_diff, first_exp);
    CHECK(tanh_diff == 0, "vec8_tanhf = vec_tanhf on all 2^32 floats (%lld differ, the first at %a)", tanh_diff,
          first_tanh);
}

// vec16_expf, mm16_round_bf16 and mm32_round_bf16 (the AVX-512 loops' exp and bf16 roundings) give vec_expf's and
// matmul_bf16_round_value's bits for every one of the 2^32 floats (NaN: a NaN), the roundings both with AVX512-BF16's
// conversion (where the CPU has it) and without
static void check_vecmath16(void) {
    if (!vec16_supported()) {
        printf("vec16_expf, mm16_round_bf16, mm32_round_bf16: not run (no AVX-512 F and BW on this CPU, or no FMA in this build)\n");
        return;
    }
    enum { CHUNK = 1 << 16 };
    float* x = (float*)malloc(CHUNK * sizeof(float)), * e = (float*)malloc(CHUNK * sizeof(float));
    float* e16 = (float*)malloc(CHUNK * sizeof(float));
    long long exp_diff = 0;
    float first_exp = 0.0f;
    for (uint64_t base = 0; base < (1ull << 32); base += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; i++) {
            uint32_t u = (uint32_t)base + i;
            memcpy(&x[i], &u, sizeof(float));
        }
        for (uint32_t i = 0; i < CHUNK; i++) { e[i] = vec_expf(x[i]); }
        exp16(e16, x, CHUNK);
        if (memcmp(e, e16, sizeof(float) * CHUNK) != 0) {
            for (uint32_t i = 0; i < CHUNK; i++) {
                if (memcmp(&e[i], &e16[i], sizeof(float)) != 0 && !(isnan(e[i]) && isnan(e16[i]))) {
                    if (exp_diff++ == 0) { first_exp = x[i]; }
                }
            }
        }
    }
    CHECK(exp_diff == 0, "vec16_expf = vec_expf on all 2^32 floats (%lld differ, the first at %a)", exp_diff, first_exp);
    free(x); free(e); free(e16);
    long long int_diff = check_round16(0);
    CHECK(int_diff == 0, "mm16_round_bf16, mm32_round_bf16 (integer rounding) = matmul_bf16_round_value on all 2^32 "
          "floats and on mixed vectors (%lld differ)", int_diff);
    if (mm_bf16_cvt_on()) {
        long long cvt_diff = check_round16(1);
        CHECK(cvt_diff == 0, "mm16_round_bf16, mm32_round_bf16, mm_round_bf16_row, bf16_copy_row (AVX512-BF16's "
              "conversion) = matmul_bf16_round_value on all 2^32 floats and on mixed vectors (%lld differ)", cvt_diff);
    } else {
        printf("the roundings with AVX512-BF16's conversion: not run (no AVX512-BF16 on this CPU, or LLMC_BF16_CVT=0)\n");
    }
}
#endif

#if defined(LLMC_ONEDNN)
// a GEMM to check: random op(A), op(B) and C0 stored with `pad` extra columns, C to compute into, and the double
// reference of the fp32 inputs (bf16_ref 0) or of their bf16 roundings (1) with its error scale
typedef struct {
    int M, N, K, ta, tb, pad;
    float beta;
    float* A, * B, * C0, * C;
    int lda, ldb, ldc;
    size_t asz, bsz, csz;
    double* ref, * scale;
} GemmCase;

static GemmCase gemm_case(int M, int N, int K, int ta, int tb, int pad, float beta, int bf16_ref) {
    GemmCase g = {.M = M, .N = N, .K = K, .ta = ta, .tb = tb, .pad = pad, .beta = beta};
    g.lda = (ta ? M : K) + pad; g.ldb = (tb ? K : N) + pad; g.ldc = N + pad;
    g.asz = (size_t)(ta ? K : M) * g.lda; g.bsz = (size_t)(tb ? N : K) * g.ldb; g.csz = (size_t)M * g.ldc;
    g.A = (float*)malloc((g.asz + 1) * sizeof(float));
    g.B = (float*)malloc((g.bsz + 1) * sizeof(float));
    g.C0 = (float*)malloc((g.csz + 1) * sizeof(float));
    g.C = (float*)malloc((g.csz + 1) * sizeof(float));
    for (size_t i = 0; i < g.asz; i++) { g.A[i] = rand_uniform(); }
    for (size_t i = 0; i < g.bsz; i++) { g.B[i] = rand_uniform(); }
    for (size_t i = 0; i < g.csz; i++) { g.C0[i] = rand_uniform(); }
    g.ref = (double*)malloc(((size_t)M * N + 1) * sizeof(double));
    g.scale = (double*)malloc(((size_t)M * N + 1) * sizeof(double));
    gemm_reference(ta, tb, M, N, K, g.A, g.lda, g.B, g.ldb, beta, g.C0, g.ldc, bf16_ref, g.ref, g.scale);
    return g;
}

// case t (0..3: whether A and B are transposed) of shape s ({M, N, K}) of a table: the row padding (0, 1 or 2 times
// pad_step) and beta (0, 1, 0.5) turn with s + t, so that the shapes meet every pairing
static GemmCase gemm_table_case(const int shape[3], size_t s, int t, int pad_step, int bf16_ref) {
    const float betas[] = {0.0f, 1.0f, 0.5f};
    return gemm_case(shape[0], shape[1], shape[2], t & 1, t >> 1, (int)((s + t) % 3) * pad_step, betas[(s + t) % 3],
                     bf16_ref);
}

static void gemm_case_free(GemmCase* g) { free(g->A); free(g->B); free(g->C0); free(g->C); free(g->ref); free(g->scale); }

// the padding columns of C (beyond N in each row) kept their values
static int padding_untouched(const GemmCase* g, int M, int N) {
    for (int i = 0; i < M; i++) {
        for (int j = N; j < g->ldc; j++) { if (g->C[(size_t)i * g->ldc + j] != g->C0[(size_t)i * g->ldc + j]) { return 0; } }
    }
    return 1;
}

// oneDNN's fp32 GEMM (onednn_gemm, called directly whatever the build's BLAS) against the built-in fp32 kernel
// and the double reference: every transpose, row strides larger than the rows, ragged and tiny shapes, beta 0, 1
// and 0.5, on 1, 2 and 3 threads
static void check_onednn_fp32(void) {
    const int shapes[][3] = {{1, 1, 1}, {1, 7, 5}, {5, 1, 33}, {7, 33, 67}, {67, 130, 257}, {257, 5, 300},
                             {3, 300, 1}, {256, 768, 96}, {40, 1100, 300}};
    int checked = 0;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        for (int t = 0; t < 4; t++) {
            GemmCase g = gemm_table_case(shapes[s], s, t, 5, 0);
            int M = g.M, N = g.N, K = g.K, ta = g.ta, tb = g.tb, pad = g.pad;
            float beta = g.beta;
            float* builtin = (float*)malloc((g.csz + 1) * sizeof(float));
            memcpy(builtin, g.C0, g.csz * sizeof(float));
            matmul_gemm_blocked(MATMUL_FP32, ta, tb, M, N, K, g.A, g.lda, g.B, g.ldb, beta, builtin, g.ldc);
            for (int threads = 1; threads <= 3; threads++) {
                int saved = omp_get_max_threads();
                omp_set_num_threads(threads);
                memcpy(g.C, g.C0, g.csz * sizeof(float));
                int rc = onednn_gemm(ONEDNN_F32, ta, tb, M, N, K, g.A, g.lda, g.B, g.ldb, beta, g.C, g.ldc);
                omp_set_num_threads(saved);
                CHECK(rc == 0, "oneDNN fp32 M=%d N=%d K=%d: no kernel (%d)", M, N, K, rc);
                double w = worst_error(g.C, g.ldc, M, N, g.ref, g.scale, 1e-5);
                CHECK(w <= 1.0, "oneDNN fp32 M=%d N=%d K=%d transA=%d transB=%d beta=%g pad=%d, %d thread(s): error %.3g "
                      "x tolerance", M, N, K, ta, tb, beta, pad, threads, w);
                double vs_builtin = 0.0; // each element against the built-in kernel's, on the same error scale
                for (int i = 0; i < M; i++) {
                    for (int j = 0; j < N; j++) {
                        double d = fabs((double)g.C[(size_t)i * g.ldc + j] - builtin[(size_t)i * g.ldc + j]);
                        double r = d / (2e-5 * g.scale[(size_t)i * N + j] + 1e-30);
                        if (!(r <= vs_builtin)) { vs_builtin = r; }
                    }
                }
                CHECK(vs_builtin <= 1.0, "oneDNN fp32 M=%d N=%d K=%d transA=%d transB=%d: %.3g x tolerance from the "
                      "built-in kernel", M, N, K, ta, tb, vs_builtin);
                CHECK(padding_untouched(&g, M, N), "oneDNN fp32 M=%d N=%d K=%d: wrote outside the N columns", M, N, K);
                checked++;
            }
            free(builtin);
            gemm_case_free(&g);
        }
    }
    printf("oneDNN fp32 (%s): %d GEMMs against the built-in kernel and the double reference\n",
           onednn_gemm_kernel(ONEDNN_F32, 256, 768, 768), checked);
}

// a oneDNN call that fails (a negative row stride: dnnl_memory_desc_create_with_strides refuses it) is one error
// line naming the GEMM and the call, and exit 1
static void onednn_bad_stride(void* arg) {
    (void)arg;
    float A[4] = {0}, B[4] = {0}, C[4] = {0};
    onednn_gemm(ONEDNN_F32, 0, 0, 2, 2, 2, A, -2, B, 2, 0.0f, C, 2);
}

// The linear layer's forward with its bias as oneDNN's own argument (matmul_forward_onednn_bias, LLMC_ONEDNN_BIAS):
// on -p bf16 over oneDNN it takes the call (returns 1) and gives the bits of the bias copied into the rows and the
// GEMM adding onto them (the path before it, and LLMC_ONEDNN_BIAS=0's), fp32 input and bf16-stored input, odd shapes,
// 1 and 2 threads; without a bias, or in fp32, it leaves the call to that path (returns 0)
static void check_onednn_bias(void) {
    if (matmul_bf16_onednn_kernel()[0] == '\0') { return; } // (no bf16 kernel: the old path is the only one)
    const int shapes[][3] = {{1, 1, 1}, {7, 33, 67}, {64, 96, 2304}, {130, 257, 300}, {300, 768, 3072}};
    MatmulPrecision saved = matmul_precision;
    matmul_precision = MATMUL_BF16;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        int BT = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float* inp = (float*)malloc((size_t)BT * C * sizeof(float));
        uint16_t* inp16 = (uint16_t*)malloc((size_t)BT * C * sizeof(uint16_t));
        float* w = (float*)malloc((size_t)OC * C * sizeof(float));
        float* bias = (float*)malloc((size_t)OC * sizeof(float));
        float* before = (float*)malloc((size_t)BT * OC * sizeof(float));
        float* now = (float*)malloc((size_t)BT * OC * sizeof(float));
        for (size_t i = 0; i < (size_t)BT * C; i++) { inp[i] = rand_uniform(); }
        for (size_t i = 0; i < (size_t)OC * C; i++) { w[i] = rand_uniform(); }
        for (int i = 0; i < OC; i++) { bias[i] = 4.0f * rand_uniform(); }
        matmul_round_bf16(inp16, inp, (size_t)BT, (size_t)C, (size_t)C);
        for (int threads = 1; threads <= 2; threads++) {
            omp_set_num_threads(threads);
            for (int stored = 0; stored < 2; stored++) {
                matmul_bias_rows(before, bias, BT, OC);
                if (stored) { matmul_gemm_bf16_stored(0, 1, BT, OC, C, NULL, inp16, C, w, NULL, C, 1.0f, before, OC); }
                else { matmul_gemm(MATMUL_BF16, 0, 1, BT, OC, C, inp, C, w, C, 1.0f, before, OC); }
                for (size_t i = 0; i < (size_t)BT * OC; i++) { now[i] = NAN; }
                int taken = matmul_forward_onednn_bias(now, stored ? NULL : inp, stored ? inp16 : NULL, w, bias, BT, C, OC);
                CHECK(taken && memcmp(before, now, (size_t)BT * OC * sizeof(float)) == 0,
                      "oneDNN bias BT=%d C=%d OC=%d, %s input, %d thread(s): %s", BT, C, OC, stored ? "bf16" : "fp32",
                      threads, taken ? "not the bits of the bias rows and the GEMM adding onto them" : "not taken");
            }
        }
        CHECK(!matmul_forward_onednn_bias(now, inp, NULL, w, NULL, BT, C, OC), "oneDNN bias: taken without a bias");
        matmul_precision = MATMUL_FP32;
        CHECK(!matmul_forward_onednn_bias(now, inp, NULL, w, bias, BT, C, OC), "oneDNN bias: taken in fp32");
        matmul_precision = MATMUL_BF16;
        free(inp); free(inp16); free(w); free(bias); free(before); free(now);
    }
    omp_set_num_threads(2);
    matmul_precision = saved;
}

static void check_onednn_error_line(void) {
    expect_die("oneDNN failing status", onednn_bad_stride, NULL,
               "oneDNN fp32 GEMM (M=2 N=2 K=2, transA=0 transB=0, lda=-2 ldb=2 ldc=2)",
               "dnnl_memory_desc_create_with_strides failed: invalid_arguments");
}

// oneDNN's bf16 GEMM, on the path the test is told to expect (LLMC_TEST_ONEDNN_BF16: "kernel" where the CPU has
// AVX512-BF16 or AMX, "refused" on an AVX2-only CPU or under ONEDNN_MAX_CPU_ISA=AVX2; unset, CPUID's flags say
// which), so a run that takes the other path fails instead of passing on whichever it took.
//   kernel:  the bf16 GEMM against the double reference of the bf16-rounded inputs (1e-5) on 1-3 threads, every
//            transpose, padded rows; an operand in a registered mirror is read from the mirror (a mirror of zeros
//            gives C = beta * C), and with the true mirror the result is the reference's
//   refused: onednn_gemm(ONEDNN_BF16) returns -1 and leaves C alone; matmul_gemm(MATMUL_BF16) still gives the
//            right result (the built-in kernel)
// what the CPU says (CPUID): AVX512-BF16 or AMX-BF16 means oneDNN has a bf16 kernel, unless ONEDNN_MAX_CPU_ISA caps
// it (then the caller must say which path it expects)
static const char* onednn_bf16_expected_from_cpu(void) {
    const char* cap = getenv("ONEDNN_MAX_CPU_ISA");
    if (cap != NULL && cap[0] != '\0') { return NULL; }
    __builtin_cpu_init();
    int bf16 = __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
    return bf16 ? "kernel" : "refused";
}

static void check_onednn_bf16(void) {
    const char* expect = getenv("LLMC_TEST_ONEDNN_BF16");
    if (expect == NULL || expect[0] == '\0') { expect = onednn_bf16_expected_from_cpu(); }
    const char* kernel = matmul_bf16_onednn_kernel();
    int has_kernel = kernel[0] != '\0';
    char version[96];
    onednn_version(version, sizeof(version));
    printf("oneDNN bf16 path: %s (%s), expected: %s\n", has_kernel ? kernel : "refused: no bf16 kernel", version,
           expect != NULL ? expect : "not said");
    CHECK(expect != NULL && (strcmp(expect, "kernel") == 0 || strcmp(expect, "refused") == 0),
          "LLMC_TEST_ONEDNN_BF16=kernel|refused must say which oneDNN bf16 path this run is to take (it follows from "
          "CPUID only without ONEDNN_MAX_CPU_ISA)");
    if (expect == NULL) { return; }
    int as_expected = has_kernel == (strcmp(expect, "kernel") == 0);
    CHECK(as_expected, "oneDNN bf16: expected the %s path, this run took the other (%s)", expect, version);
    // a run on the other path than it was told proves nothing more: it stops here (tests/test_cpu_variants.py runs
    // it told both ways, and the whole file took 10 s more a run)
    if (!as_expected) { exit(test_summary()); }
    const int shapes[][3] = {{1, 1, 1}, {7, 33, 67}, {67, 130, 257}, {256, 768, 96}, {3, 300, 1}, {40, 1100, 300}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        for (int t = 0; t < 4; t++) {
            GemmCase g = gemm_table_case(shapes[s], s, t, 3, 1);
            int M = g.M, N = g.N, K = g.K, ta = g.ta, tb = g.tb, pad = g.pad;
            float beta = g.beta;
            if (!has_kernel) {
                memcpy(g.C, g.C0, g.csz * sizeof(float));
                uint16_t dummy[2] = {0, 0};
                int rc = onednn_gemm(ONEDNN_BF16, ta, tb, M, N, K, dummy, g.lda, dummy, g.ldb, beta, g.C, g.ldc);
                CHECK(rc == -1 && memcmp(g.C, g.C0, g.csz * sizeof(float)) == 0,
                      "oneDNN bf16 refused M=%d N=%d K=%d: returned %d and %s C", M, N, K, rc,
                      memcmp(g.C, g.C0, g.csz * sizeof(float)) == 0 ? "kept" : "changed");
                memcpy(g.C, g.C0, g.csz * sizeof(float));
                matmul_gemm(MATMUL_BF16, ta, tb, M, N, K, g.A, g.lda, g.B, g.ldb, beta, g.C, g.ldc);
                double w = worst_error(g.C, g.ldc, M, N, g.ref, g.scale, 1e-5);
                CHECK(w <= 1.0, "bf16 after oneDNN's refusal M=%d N=%d K=%d: error %.3g x tolerance", M, N, K, w);
            } else {
                for (int threads = 1; threads <= 3; threads++) {
                    int saved = omp_get_max_threads();
                    omp_set_num_threads(threads);
                    memcpy(g.C, g.C0, g.csz * sizeof(float));
                    int rc = matmul_gemm_onednn_bf16(ta, tb, M, N, K, g.A, g.lda, g.B, g.ldb, beta, g.C, g.ldc);
                    omp_set_num_threads(saved);
                    double w = worst_error(g.C, g.ldc, M, N, g.ref, g.scale, 1e-5);
                    CHECK(rc == 0 && w <= 1.0, "oneDNN bf16 M=%d N=%d K=%d transA=%d transB=%d beta=%g pad=%d, %d "
                          "thread(s): rc %d, error %.3g x tolerance", M, N, K, ta, tb, beta, pad, threads, rc, w);
                    CHECK(padding_untouched(&g, M, N), "oneDNN bf16 M=%d N=%d K=%d: wrote outside the N columns", M, N, K);
                }
                // B in a mirror of zeros: C = beta * C, so the mirror, not B, was read
                uint16_t* mirror = (uint16_t*)calloc(g.bsz + 1, sizeof(uint16_t));
                matmul_bf16_mirror_add(g.B, g.bsz, mirror);
                memcpy(g.C, g.C0, g.csz * sizeof(float));
                matmul_gemm(MATMUL_BF16, ta, tb, M, N, K, g.A, g.lda, g.B, g.ldb, beta, g.C, g.ldc);
                int scaled_only = 1;
                for (int i = 0; i < M; i++) {
                    for (int j = 0; j < N; j++) {
                        size_t at = (size_t)i * g.ldc + j;
                        if (g.C[at] != (beta == 0.0f ? 0.0f : beta * g.C0[at])) { scaled_only = 0; }
                    }
                }
                CHECK(scaled_only, "oneDNN bf16 M=%d N=%d K=%d transA=%d transB=%d: a registered mirror of B was not "
                      "the B the GEMM read", M, N, K, ta, tb);
                // the true mirror: the reference's result (oneDNN may sum in another order for the mirror's
                // padded row stride than for the dense copy a call makes, so not bit for bit)
                matmul_round_bf16(mirror, g.B, 1, g.bsz, g.bsz);
                memcpy(g.C, g.C0, g.csz * sizeof(float));
                matmul_gemm(MATMUL_BF16, ta, tb, M, N, K, g.A, g.lda, g.B, g.ldb, beta, g.C, g.ldc);
                double w = worst_error(g.C, g.ldc, M, N, g.ref, g.scale, 1e-5);
                CHECK(w <= 1.0, "oneDNN bf16 M=%d N=%d K=%d transA=%d transB=%d, B from its mirror: error %.3g x "
                      "tolerance", M, N, K, ta, tb, w);
                matmul_bf16_mirror_remove(g.B);
                free(mirror);
            }
            gemm_case_free(&g);
        }
    }
}
#endif

// matmul_round_bf16 (the vectorised rounding of the oneDNN path) equals mm_bf16_round element for element,
// specials included, and honours the row stride
static void check_round_bf16_rows(void) {
    const int rows = 37, cols = 129, ld = 140;
    float* X = (float*)malloc((size_t)rows * ld * sizeof(float));
    uint16_t* out = (uint16_t*)malloc((size_t)rows * cols * sizeof(uint16_t));
    const float specials[] = {0.0f, -0.0f, 1.00390625f, 1.01171875f, 1e-40f, 3.389531e38f, INFINITY, -INFINITY, NAN};
    for (size_t i = 0; i < (size_t)rows * ld; i++) {
        X[i] = i % 11 == 0 ? specials[(i / 11) % 9] : rand_uniform() * powf(2.0f, (float)((int)(i % 50) - 25));
    }
    matmul_round_bf16(out, X, rows, cols, ld);
    int mismatches = 0;
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) { mismatches += out[(size_t)r * cols + c] != mm_bf16_round(X[(size_t)r * ld + c]); }
    }
    CHECK(mismatches == 0, "matmul_round_bf16: %d of %d values differ from mm_bf16_round", mismatches, rows * cols);
    free(X); free(out);
}

int main(void) {
    printf("matmul backend: %s, blocked fp32 kernel: %s, bf16 kernel: %s\n", matmul_backend_name(),
           matmul_isa_name(matmul_isa()), matmul_bf16_native() ? "AVX512-BF16 (vdpbf16ps)" : "emulated in fp32");
    check_round_bf16_rows();
#if MATMUL_X86
    if (env_switch_on("LLMC_TEST_VECMATH")) {
        check_vecmath16();
        check_vecmath8();
    } else {
        printf("vec16_expf, mm16_round_bf16, mm32_round_bf16, vec8_expf, vec8_tanhf on all 2^32 floats: not run "
               "(LLMC_TEST_VECMATH=0)\n");
    }
#endif
#if defined(LLMC_ONEDNN)
    check_onednn_fp32();
    check_onednn_bf16();
    check_onednn_error_line();
    check_onednn_bias();
#endif
    check_bf16_rounding();
    check_bf16_mirrors();
    check_vecmath();
    const int sizes[][3] = {{1, 1, 1}, {1, 7, 5}, {5, 1, 33}, {7, 33, 67}, {33, 67, 7}, {67, 130, 257},
                            {130, 257, 300}, {6, 32, 256}, {48, 128, 512}, {257, 5, 300}, {3, 300, 1}, {4, 4, 0},
                            // several column blocks per thread, many K blocks, a tall thin C
                            {40, 1100, 300}, {70, 40, 1100}, {1500, 24, 70}};
    const float betas[] = {0.0f, 1.0f, 0.5f};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                float beta = betas[(s + ta + 2 * tb) % 3];
                check_shape(sizes[s][0], sizes[s][1], sizes[s][2], ta, tb, beta, (int)(s % 3) * 3);
            }
        }
    }
    check_thread_determinism(MATMUL_FP32);
    check_thread_determinism(MATMUL_BF16);
    check_bf16_blocks();
    return test_summary();
}
