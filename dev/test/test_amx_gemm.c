/*
dev/test/test_amx_gemm.c: llmc/cpu/amx_gemm.h, the bf16 GEMM on AMX tiles, against a double reference: every
transpose, ragged shapes (rows, columns and K that are not multiples of 32, odd K, K longer than one K block), row
strides wider than the rows, beta 1 and the bias, the bits the same on 1, 2 and 3 threads. Where this process may
use AMX the tiles run; on every CPU the same blocking and packing run once more on the plain-C stand-in for the tiles
(amx_gemm_test_mode), so a CPU without AMX still checks them, with the packing's AVX-512 loops and with its
scalar ones. Also the trainer-level switch: on an AMX CPU, matmul_gemm's
bf16 GEMMs run here unless LLMC_AMX_GEMM=0 (checked in fresh processes), and a bad value is one error line.

    dev/test/test_amx_gemm            the checks
*/
// blocks smaller than the trainer's, so that shapes a double reference checks quickly still cross every block edge:
// three K blocks at K = 600, a new block of rows past 64, of columns past 64 at K >= 256 (the trainer's blocks run in
// every test of its -p bf16 step on an AMX CPU)
#define AMX_KC 256
#define AMX_MC 64
#define AMX_NC_BYTES (32 << 10)
#include "../../llmc/cpu/matmul.h"
#include "test_common.h"

// bf16 bit patterns from deterministic floats in [-0.5, 0.5)
static uint16_t* bf16_array(size_t n, unsigned seed) {
    uint16_t* x = (uint16_t*)malloc(n * sizeof(uint16_t) + 64);
    for (size_t i = 0; i < n; i++) { x[i] = mm_bf16_round((float)((i * 2654435761u + seed * 40503u) % 1000u) * 1e-3f - 0.5f); }
    return x;
}

// C (M, ldc) = the GEMM at these settings on `threads` threads; returns the failures against the double reference
static int check_one(const char* kind, int ta, int tb, int M, int N, int K, int pad_a, int pad_b, int pad_c, float beta,
                     int use_bias, int threads, int verify, float** out) {
    int lda = (ta ? M : K) + pad_a, ldb = (tb ? K : N) + pad_b, ldc = N + pad_c;
    size_t asz = (size_t)(ta ? K : M) * lda, bsz = (size_t)(tb ? N : K) * ldb, csz = (size_t)M * ldc;
    uint16_t* A = bf16_array(asz, 1);
    uint16_t* B = bf16_array(bsz, 2);
    float* bias = (float*)malloc((size_t)(N > 0 ? N : 1) * sizeof(float));
    for (int j = 0; j < N; j++) { bias[j] = 0.01f * (float)(j % 13) - 0.05f; }
    float* C = (float*)malloc((csz > 0 ? csz : 1) * sizeof(float));
    float* C0 = (float*)malloc((csz > 0 ? csz : 1) * sizeof(float));
    for (size_t i = 0; i < csz; i++) { C[i] = C0[i] = (float)(i % 17) * 0.25f - 2.0f; }
    set_threads(threads);
    int rc = amx_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, use_bias ? bias : NULL, C, ldc);
    int bad = 0;
    CHECK(rc == 0, "%s: amx_gemm_bf16 returned %d", kind, rc);
    for (int i = 0; i < M && rc == 0 && verify; i++) {
        for (int j = 0; j < ldc; j++) {
            float got = C[(size_t)i * ldc + j];
            if (j >= N) { // the row stride's padding is not C's
                bad += got != C0[(size_t)i * ldc + j];
                continue;
            }
            double sum = 0.0, size = 0.0;
            for (int k = 0; k < K; k++) {
                double a = mm_bf16_to_float(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                double b = mm_bf16_to_float(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
                sum += a * b;
                size += fabs(a * b);
            }
            sum += (double)beta * C0[(size_t)i * ldc + j] + (use_bias ? bias[j] : 0.0);
            // fp32 sums of K products: K ulps of the sum of magnitudes bounds the rounding
            double tol = 1.2e-7 * (K + 2) * (size + fabs(C0[(size_t)i * ldc + j]) + 0.1);
            bad += !(fabs(got - sum) <= tol);
        }
    }
    CHECK(bad == 0, "%s: transA=%d transB=%d M=%d N=%d K=%d strides +%d +%d +%d beta=%g bias=%d threads=%d: %d elements "
          "off", kind, ta, tb, M, N, K, pad_a, pad_b, pad_c, beta, use_bias, threads, bad);
    free(A);
    free(B);
    free(bias);
    free(C0);
    if (out != NULL) { *out = C; } else { free(C); }
    return bad;
}

static void check_shapes(const char* kind) {
    // (past one block of rows, of columns and of K, odd K, a K block's last pairs past K)
    static const int shapes[][3] = {{32, 32, 32}, {64, 96, 64}, {33, 47, 31}, {100, 70, 130}, {31, 33, 1}, {1, 1, 2},
                                    {17, 64, 530}, {96, 40, 600}, {160, 48, 300}, {40, 200, 300}, {5, 3, 0}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        for (int ta = 0; ta < 2; ta++) {
            for (int tb = 0; tb < 2; tb++) {
                int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
                check_one(kind, ta, tb, M, N, K, 0, 0, 0, 0.0f, 0, 2, 1, NULL);
                check_one(kind, ta, tb, M, N, K, 1, 0, 3, 0.0f, 1, 2, 1, NULL);
                check_one(kind, ta, tb, M, N, K, 0, 3, 5, 1.0f, 0, 2, 1, NULL);
                // the same bits on 1, 2 and 3 threads
                float *c1, *c2, *c3;
                check_one(kind, ta, tb, M, N, K, 2, 2, 0, 1.0f, 0, 1, 1, &c1);
                check_one(kind, ta, tb, M, N, K, 2, 2, 0, 1.0f, 0, 2, 0, &c2);
                check_one(kind, ta, tb, M, N, K, 2, 2, 0, 1.0f, 0, 3, 0, &c3);
                size_t n = (size_t)M * N;
                CHECK(memcmp(c1, c2, n * sizeof(float)) == 0 && memcmp(c1, c3, n * sizeof(float)) == 0,
                      "%s: transA=%d transB=%d M=%d N=%d K=%d: the bits depend on the thread count", kind, ta, tb, M, N, K);
                free(c1);
                free(c2);
                free(c3);
            }
        }
    }
    // beta other than 0 and 1, or a bias with beta 1: not this kernel's (-1, C untouched)
    float c = 3.0f, bias = 1.0f;
    uint16_t a = 0x3f80;
    CHECK(amx_gemm_bf16(0, 0, 1, 1, 1, &a, 1, &a, 1, 0.5f, NULL, &c, 1) == -1 && c == 3.0f, "%s: beta 0.5 refused", kind);
    CHECK(amx_gemm_bf16(0, 0, 1, 1, 1, &a, 1, &a, 1, 1.0f, &bias, &c, 1) == -1 && c == 3.0f, "%s: bias with beta 1 refused", kind);
}

// the trainer-level switch, in a fresh process: which kernel matmul_bf16_gemm_describe names
static void describe_child(void* arg) {
    (void)arg;
    char buf[160];
    matmul_bf16_gemm_describe(buf, sizeof(buf));
    fprintf(stderr, "%s\n", buf);
    exit(1);
}

int main(void) {
    amx_gemm_test_mode(1, 0);
    check_shapes("emulated tiles");
    amx_gemm_test_mode(1, 1);
    check_shapes("emulated tiles, scalar packing");
    amx_gemm_test_mode(0, 0);
    if (amx_usable()) {
        check_shapes("AMX tiles");
        printf("AMX tiles: checked\n");
    } else {
        float c = 0.0f;
        uint16_t a = 0x3f80;
        CHECK(amx_gemm_bf16(0, 0, 1, 1, 1, &a, 1, &a, 1, 0.0f, NULL, &c, 1) == -1, "no AMX: amx_gemm_bf16 refuses");
        printf("AMX tiles: this CPU or OS has none (the emulated tiles checked the blocking and packing)\n");
    }
#if defined(LLMC_ONEDNN)
    if (amx_usable() && matmul_bf16_onednn_kernel()[0] != '\0') {
        setenv("LLMC_AMX_GEMM", "1", 1);
        expect_die("LLMC_AMX_GEMM=1: the AMX kernel", describe_child, NULL, "llmc's AMX bf16 GEMM", NULL);
        setenv("LLMC_AMX_GEMM", "0", 1);
        expect_die("LLMC_AMX_GEMM=0: oneDNN's", describe_child, NULL, "oneDNN's bf16 GEMM", NULL);
    }
    setenv("LLMC_AMX_GEMM", "2", 1);
    expect_die("LLMC_AMX_GEMM=2", describe_child, NULL, "LLMC_AMX_GEMM=2: use 0 or 1", NULL);
    unsetenv("LLMC_AMX_GEMM");
#endif
    return test_summary();
}
