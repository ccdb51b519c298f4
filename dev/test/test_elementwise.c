/*
dev/test/test_elementwise.c: the element-wise kernels of the CPU step against the passes they replace, and a timing
of every element-wise pass (the PHASE_ELEMENTWISE account split per call).

    dev/test/test_elementwise              the checks (about a second); exits non-zero on any mismatch
    dev/test/test_elementwise --time [T]   each element-wise pass of one d12 layer of each family's -p bf16 step
                                           (B=4, C=768, T=1024 unless given) on the run's threads: best of 7, ms,
                                           MB moved, GB/s, and the layer's sum (the phase is about 12 of them);
                                           and GPT-2's fp32 GELU backward

Checked, bit for bit (the new kernels sum in the old order, so nothing may differ):
- llmc/cpu/matmul.h's matmul_backward_bias (each thread a slice of columns, rows in order, four at a time) against
  the 64-column chunks it replaced (matmul_backward_bias_chunked), beta 0 and 1, odd sizes (rows 1..130, columns
  1..3100: slices that are not a multiple of 16, one thread's slice empty), 1, 2 and 3 threads;
- llmc/cpu/gelu_cpu.h's gelu_backward_bias and gelu_backward_bias_bf16_input (the GELU's backward with the fc
  layer's bias gradient in the same pass) against gelu_backward_into / gelu_backward_bf16_input followed by the old
  bias pass: dinp, dbias and dinp's bf16 copy, beta 0 and 1, with and without a bf16 copy of dinp (a registered
  mirror, -p bf16 on oneDNN), the same sizes and thread counts;
- a dbias of NULL (no bias) leaves the GELU's backward as it was;
- llmc/cpu/swiglu_cpu.h's backward with both bf16 copies (the trainers' case: now vectorised) against the loop it
  replaced (swiglu_backward_copies_scalar): dgate, dup and their copies, gate over [-20, 20] with +-100 and 0, odd
  sizes, 1 to 3 threads;
- GPT-2's -p bf16 bias add and GELU forward in AVX-512 (LLMC_VEC16; on a CPU with AVX-512) against the compiled loop:
  all 2^16 bf16 inputs, and random values;
- GPT-2's -p bf16 GELU backward (the forward again, the gradient, the fc bias gradient) in AVX-512 against the
  compiled loops: all 2^16 bf16 inputs and random ones, dinp in fp32, with its bf16 copy, or the copy alone;
- SwiGLU's -p bf16 forward and its backward's one pass (out again, dgate and dup in bf16 alone) in AVX-512 against
  the compiled loops: all 2^16 bf16 gates with 8 ups each (NaN and infinity among them), and random values;
- GPT-2's fp32 GELU backward with the forward again in its pass (gelu_recompute_backward_bias) against gelu_forward
  then gelu_backward_bias: out, dinp, dbias, in place and apart, both bias orders, the same sizes and thread counts,
  and with bf16 copies of out and dinp (where the two calls run);
- the GELU backward's bias gradient in both LLMC_GELU_BIAS orders: columns gives the old bias pass's bits; chunks
  (the default: the rows split over threads, summed by chunks of 64 rows) the bits of the same order written out
  plainly here (bias_sum_by_chunks), for 1, 2 and 3 threads alike.
*/
#include "../../llmc/cpu/gelu_cpu.h"
#include "../../llmc/cpu/relu2_cpu.h"
#include "../../llmc/cpu/residual_cpu.h"
#include "../../llmc/cpu/rope_cpu.h"
#include "../../llmc/cpu/swiglu_cpu.h"
#include "test_common.h"

static int same_bits(const void* a, const void* b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

// the same bits, or NaN in both: which NaN a sum of two NaNs keeps depends on the order of the add's operands,
// which the compiler chooses (an add commutes for it)
static int same_floats(const float* a, const float* b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(isnan(a[i]) && isnan(b[i]))) { return 0; }
    }
    return 1;
}

// the same bits, or NaN in both, for bf16 values (same_floats's rule)
static int same_bf16(const uint16_t* a, const uint16_t* b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int a_nan = (a[i] & 0x7fff) > 0x7f80, b_nan = (b[i] & 0x7fff) > 0x7f80;
        if (a[i] != b[i] && !(a_nan && b_nan)) { return 0; }
    }
    return 1;
}

static const int ROWS[] = {1, 3, 4, 7, 64, 130};
static const int COLS[] = {1, 5, 16, 17, 33, 100, 768, 3100};

static void check_bias_gradient(void) {
    for (size_t ri = 0; ri < sizeof(ROWS) / sizeof(ROWS[0]); ri++) {
        for (size_t ci = 0; ci < sizeof(COLS) / sizeof(COLS[0]); ci++) {
            int BT = ROWS[ri], OC = COLS[ci];
            float* dout = (float*)mallocCheck((size_t)BT * OC * sizeof(float));
            float* start = (float*)mallocCheck((size_t)OC * sizeof(float));
            float* want = (float*)mallocCheck((size_t)OC * sizeof(float));
            float* got = (float*)mallocCheck((size_t)OC * sizeof(float));
            hash_fill(dout, (size_t)BT * OC, (unsigned)(BT * 31 + OC), 1.0f);
            hash_fill(start, (size_t)OC, 7u, 3.0f);
            for (int beta = 0; beta <= 1; beta++) {
                for (int threads = 1; threads <= 3; threads++) {
                    set_threads(threads);
                    memcpy(want, start, (size_t)OC * sizeof(float));
                    if (beta == 0) { memset(want, 0, (size_t)OC * sizeof(float)); }
                    matmul_backward_bias_chunked(want, dout, BT, OC);
                    memcpy(got, start, (size_t)OC * sizeof(float));
                    matmul_backward_bias(got, dout, BT, OC, (float)beta);
                    CHECK(same_bits(want, got, (size_t)OC * sizeof(float)),
                          "bias gradient, %d rows x %d columns, beta %d, %d threads: not the old bits", BT, OC, beta,
                          threads);
                }
            }
            free(dout);
            free(start);
            free(want);
            free(got);
        }
    }
    set_threads(2);
}

// the GELU's backward with the bias gradient against the two passes, from fp32 (bf16_input 0) or bf16 input,
// with or without a bf16 copy of dinp; the bias gradient in each LLMC_GELU_BIAS order (columns: the old pass's bits;
// chunks: bias_sum_by_chunks's)
static void check_gelu_backward_bias(int bf16_input, int copy, GeluBiasSum order) {
    gelu_bias_sum_use(order);
    for (size_t ri = 0; ri < sizeof(ROWS) / sizeof(ROWS[0]); ri++) {
        for (size_t ci = 0; ci < sizeof(COLS) / sizeof(COLS[0]); ci++) {
            int BT = ROWS[ri], OC = COLS[ci];
            size_t N = (size_t)BT * OC;
            float* inp = (float*)mallocCheck(N * sizeof(float));
            uint16_t* inp16 = (uint16_t*)mallocCheck(N * sizeof(uint16_t));
            float* dout = (float*)mallocCheck(N * sizeof(float));
            float* dinp_want = (float*)mallocCheck(N * sizeof(float));
            float* dinp_got = (float*)mallocCheck(N * sizeof(float));
            uint16_t* copy_want = (uint16_t*)mallocCheck(N * sizeof(uint16_t));
            uint16_t* copy_got = (uint16_t*)mallocCheck(N * sizeof(uint16_t));
            float* start = (float*)mallocCheck((size_t)OC * sizeof(float));
            float* dbias_want = (float*)mallocCheck((size_t)OC * sizeof(float));
            float* dbias_got = (float*)mallocCheck((size_t)OC * sizeof(float));
            hash_fill(inp, N, (unsigned)(BT + OC), 4.0f); // the GELU's curved part and both tails
            for (size_t i = 0; i < N; i++) { inp16[i] = matmul_bf16_round_value(inp[i]); }
            hash_fill(dout, N, (unsigned)(BT * 7 + OC * 3), 1.0f);
            hash_fill(start, (size_t)OC, 11u, 2.0f);
            if (copy) {
                matmul_bf16_mirror_add(dinp_want, N, copy_want);
                matmul_bf16_mirror_add(dinp_got, N, copy_got);
            }
            for (int beta = 0; beta <= 1; beta++) {
                for (int threads = 1; threads <= 3; threads++) {
                    set_threads(threads);
                    // stale contents: written over, never read
                    memset(dinp_want, 0x7f, N * sizeof(float));
                    memset(dinp_got, 0x3f, N * sizeof(float));
                    memset(copy_want, 0, N * sizeof(uint16_t));
                    memset(copy_got, 0xff, N * sizeof(uint16_t));
                    memcpy(dbias_want, start, (size_t)OC * sizeof(float));
                    memcpy(dbias_got, start, (size_t)OC * sizeof(float));
                    if (bf16_input) {
                        gelu_backward_bf16_input(dinp_want, inp16, dout, N);
                    } else {
                        gelu_backward_into(dinp_want, inp, dout, N, 0);
                    }
                    if (order == GELU_BIAS_CHUNKS) {
                        bias_sum_by_chunks(dbias_want, dinp_want, BT, OC, SUM_CHUNK_ROWS, beta);
                    } else {
                        if (beta == 0) { memset(dbias_want, 0, (size_t)OC * sizeof(float)); }
                        matmul_backward_bias_chunked(dbias_want, dinp_want, BT, OC);
                    }
                    if (bf16_input) {
                        gelu_backward_bias_bf16_input(dinp_got, dbias_got, inp16, dout, BT, OC, (float)beta);
                    } else {
                        gelu_backward_bias(dinp_got, dbias_got, inp, dout, BT, OC, (float)beta);
                    }
                    static const char* const WHAT[2][2] = {{"fp32 input, columns", "fp32 input, chunks"},
                                                           {"bf16 input, columns", "bf16 input, chunks"}};
                    const char* what = WHAT[bf16_input][order == GELU_BIAS_CHUNKS];
                    CHECK(same_bits(dinp_want, dinp_got, N * sizeof(float)),
                          "GELU backward with bias (%s, copy %d), %d x %d, beta %d, %d threads: dinp differs", what,
                          copy, BT, OC, beta, threads);
                    CHECK(same_bits(dbias_want, dbias_got, (size_t)OC * sizeof(float)),
                          "GELU backward with bias (%s, copy %d), %d x %d, beta %d, %d threads: dbias differs", what,
                          copy, BT, OC, beta, threads);
                    if (copy) {
                        CHECK(same_bits(copy_want, copy_got, N * sizeof(uint16_t)),
                              "GELU backward with bias (%s), %d x %d, beta %d, %d threads: dinp's bf16 copy differs",
                              what, BT, OC, beta, threads);
                    }
                }
            }
            // no bias: the GELU's backward alone
            set_threads(2);
            memset(dinp_got, 0x3f, N * sizeof(float));
            if (bf16_input) {
                gelu_backward_bias_bf16_input(dinp_got, NULL, inp16, dout, BT, OC, 0.0f);
            } else {
                gelu_backward_bias(dinp_got, NULL, inp, dout, BT, OC, 0.0f);
            }
            CHECK(same_bits(dinp_want, dinp_got, N * sizeof(float)), "GELU backward, no bias, %d x %d: dinp differs",
                  BT, OC);
            if (copy) {
                matmul_bf16_mirror_remove(dinp_want);
                matmul_bf16_mirror_remove(dinp_got);
            }
            free(inp);
            free(inp16);
            free(dout);
            free(dinp_want);
            free(dinp_got);
            free(copy_want);
            free(copy_got);
            free(start);
            free(dbias_want);
            free(dbias_got);
        }
    }
    set_threads(2);
}

// GPT-2's fp32 GELU backward with its forward again in the same pass (gelu_recompute_backward_bias) against the two
// calls it replaces, gelu_forward then gelu_backward_bias: out, dinp and dbias bit for bit, dinp in place over dout
// (the trainer's call) or apart, beta 0 and 1, on 1, 2 or 3 threads, the bias gradient in the order given; copy 1: out and
// dinp with bf16 copies (-p bf16 on oneDNN with the fp32 activations), where the two calls run, copies included.
// Inputs over [-6, 6] (the tanh saturates from 4.5) with +-100, 0, NaN and infinities.
static void check_gelu_recompute_fp32(GeluBiasSum order, int copy) {
    gelu_bias_sum_use(order);
    for (size_t ri = 0; ri < sizeof(ROWS) / sizeof(ROWS[0]); ri++) {
        for (size_t ci = 0; ci < sizeof(COLS) / sizeof(COLS[0]); ci++) {
            int BT = ROWS[ri], OC = COLS[ci];
            size_t N = (size_t)BT * OC;
            float* inp = (float*)mallocCheck(N * sizeof(float));
            float* dout = (float*)mallocCheck(N * sizeof(float));
            float *out[2], *dinp[2], *dbias[2];
            uint16_t *out16[2], *dinp16[2];
            for (int v = 0; v < 2; v++) {
                out[v] = (float*)mallocCheck(N * sizeof(float));
                dinp[v] = (float*)mallocCheck(N * sizeof(float));
                dbias[v] = (float*)mallocCheck((size_t)OC * sizeof(float));
                out16[v] = (uint16_t*)mallocCheck(N * sizeof(uint16_t));
                dinp16[v] = (uint16_t*)mallocCheck(N * sizeof(uint16_t));
                if (copy) {
                    matmul_bf16_mirror_add(out[v], N, out16[v]);
                    matmul_bf16_mirror_add(dinp[v], N, dinp16[v]);
                }
            }
            hash_fill(inp, N, (unsigned)(BT * 5 + OC), 6.0f);
            static const float SPECIAL[] = {100.0f, -100.0f, 0.0f, NAN, INFINITY, -INFINITY};
            for (size_t i = 0; i < N && i < 6; i++) { inp[i * 7 % N] = SPECIAL[i]; }
            hash_fill(dout, N, (unsigned)(BT * 3 + OC * 11), 1.0f);
            for (int beta = 0; beta <= 1; beta++) {
                for (int in_place = 0; in_place <= 1; in_place++) {
                    { // 1, 2, 3 threads in turn
                        int threads = 1 + (2 * beta + in_place) % 3;
                        set_threads(threads);
                        for (int v = 0; v < 2; v++) {
                            memset(out[v], v == 0 ? 0x7f : 0x3f, N * sizeof(float)); // stale: never read
                            memset(out16[v], v == 0 ? 0 : 0xff, N * sizeof(uint16_t));
                            memset(dinp16[v], v == 0 ? 0 : 0xff, N * sizeof(uint16_t));
                            if (in_place) {
                                memcpy(dinp[v], dout, N * sizeof(float));
                            } else {
                                memset(dinp[v], v == 0 ? 0x7f : 0x3f, N * sizeof(float));
                            }
                            hash_fill(dbias[v], (size_t)OC, 13u, 2.0f);
                        }
                        const float* d0 = in_place ? dinp[0] : dout;
                        const float* d1 = in_place ? dinp[1] : dout;
                        gelu_forward(out[0], inp, N);
                        gelu_backward_bias(dinp[0], dbias[0], inp, d0, BT, OC, (float)beta);
                        gelu_recompute_backward_bias(out[1], dinp[1], dbias[1], inp, d1, BT, OC, (float)beta);
                        int same = same_floats(out[0], out[1], N) && same_floats(dinp[0], dinp[1], N) &&
                                   same_floats(dbias[0], dbias[1], (size_t)OC) &&
                                   (!copy || (same_bf16(out16[0], out16[1], N) && same_bf16(dinp16[0], dinp16[1], N)));
                        CHECK(same, "GELU recompute + backward, fp32, %d x %d, %s, copies %d, beta %d, %s, %d threads: "
                              "not the bits of gelu_forward then gelu_backward_bias", BT, OC,
                              order == GELU_BIAS_CHUNKS ? "chunks" : "columns", copy, beta,
                              in_place ? "in place" : "apart", threads);
                    }
                }
            }
            for (int v = 0; v < 2; v++) {
                if (copy) {
                    matmul_bf16_mirror_remove(out[v]);
                    matmul_bf16_mirror_remove(dinp[v]);
                }
                free(out[v]); free(dinp[v]); free(dbias[v]); free(out16[v]); free(dinp16[v]);
            }
            free(inp);
            free(dout);
        }
    }
    set_threads(2);
}

// SwiGLU's backward with both bf16 copies (the trainers' case), vectorised, against the loop it replaced
static void check_swiglu_backward(void) {
    static const size_t SIZES[] = {1, 15, 16, 17, 100, 1000, 4099};
    for (size_t si = 0; si < sizeof(SIZES) / sizeof(SIZES[0]); si++) {
        size_t N = SIZES[si];
        float* in = (float*)mallocCheck(3 * N * sizeof(float)); // dout, gate, up
        float* want = (float*)mallocCheck(2 * N * sizeof(float)); // dgate, dup
        float* got = (float*)mallocCheck(2 * N * sizeof(float));
        uint16_t* want16 = (uint16_t*)mallocCheck(2 * N * sizeof(uint16_t));
        uint16_t* got16 = (uint16_t*)mallocCheck(2 * N * sizeof(uint16_t));
        hash_fill(in, N, (unsigned)N, 1.0f);
        hash_fill(in + N, N, (unsigned)N + 1u, 20.0f); // gate: sigmoid's flat tails, its middle, and e^x's clamps
        hash_fill(in + 2 * N, N, (unsigned)N + 2u, 3.0f);
        if (N >= 3) { in[N] = 100.0f; in[N + 1] = -100.0f; in[N + 2] = 0.0f; }
        matmul_bf16_mirror_add(got, N, got16);
        matmul_bf16_mirror_add(got + N, N, got16 + N);
        for (int threads = 1; threads <= 3; threads++) {
            set_threads(threads);
            memset(want, 0, 2 * N * sizeof(float));
            memset(got, 0x7f, 2 * N * sizeof(float));
            memset(got16, 0xff, 2 * N * sizeof(uint16_t));
            swiglu_backward_copies_scalar(want, want + N, want16, want16 + N, in, in + N, in + 2 * N, N);
            swiglu_backward_into(got, got + N, in, in + N, in + 2 * N, N, 0);
            CHECK(same_bits(want, got, 2 * N * sizeof(float)), "SwiGLU backward, N %zu, %d threads: dgate or dup differs",
                  N, threads);
            CHECK(same_bits(want16, got16, 2 * N * sizeof(uint16_t)),
                  "SwiGLU backward, N %zu, %d threads: a bf16 copy differs", N, threads);
        }
        matmul_bf16_mirror_remove(got);
        matmul_bf16_mirror_remove(got + N);
        free(in);
        free(want);
        free(got);
        free(want16);
        free(got16);
    }
    set_threads(2);
}

// ---------------------------------------------------------------------------- --time

static float* timing_buffer(size_t n) {
    float* x = (float*)mallocCheck(n * sizeof(float));
    hash_fill(x, n, (unsigned)n, 2.0f);
    return x;
}

static uint16_t* timing_buffer16(size_t n) {
    uint16_t* x = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) { x[i] = matmul_bf16_round_value((float)(i % 1000) / 250.0f - 2.0f); }
    return x;
}

// the best of 7 runs of stmt, printed with the bytes it moves; added to *layer_ms
#define TIME_PASS(layer_ms, name, bytes, stmt) \
    do { \
        double best = 1e30; \
        for (int rep = 0; rep < 7; rep++) { \
            double t0 = wall_seconds(); \
            stmt; \
            double t = wall_seconds() - t0; \
            best = t < best ? t : best; \
        } \
        *(layer_ms) += best * 1e3; \
        printf("  %-46s %8.3f ms %8.1f MB %6.1f GB/s\n", name, best * 1e3, (bytes) / 1e6, (bytes) / best / 1e9); \
    } while (0)

// one layer's element-wise passes of each family's -p bf16 step at d12 (B=4, C=768), the buffers' bf16 copies
// registered where the step has them, and the layer's sum: the elementwise phase of a step is about 12 of them
static void time_passes(int T) {
    int B = 4, C = 768, BT = B * T;
    size_t N4 = (size_t)BT * 4 * C, NC = (size_t)BT * C;
    // enough for every family's largest tensors: (BT, 4C) for GPT-2 and nanochat, two (BT, FFN=2048) for Llama 3
    size_t NBUF = (size_t)BT * 2 * 2048 > N4 ? (size_t)BT * 2 * 2048 : N4;
    float *x = timing_buffer(NBUF), *y = timing_buffer(NBUF), *dout = timing_buffer(NBUF), *dx = timing_buffer(NBUF);
    float *bias = timing_buffer(4 * (size_t)C), *dbias = timing_buffer(4 * (size_t)C);
    uint16_t *x16 = timing_buffer16(NBUF), *y16 = timing_buffer16(NBUF), *dx16 = timing_buffer16(NBUF);
    float *cos_table = timing_buffer((size_t)T * 64), *sin_table = timing_buffer((size_t)T * 64);
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    printf("one d12 layer's element-wise passes, -p bf16, B=%d T=%d C=%d, %d threads, LLMC_ELEMENTWISE_FUSED=%d\n", B,
           T, C, threads, elementwise_fused());
    double gpt2 = 0.0, llama3 = 0.0, nanochat = 0.0;
    printf("GPT-2 (4C = %d)\n", 4 * C);
    TIME_PASS(&gpt2, "bias rows, qkv (BT,3C)", 12.0 * NC, matmul_bias_rows(y, bias, BT, 3 * C));
    TIME_PASS(&gpt2, "bias rows, attproj (BT,C)", 4.0 * NC, matmul_bias_rows(y, bias, BT, C));
    TIME_PASS(&gpt2, "bias rows, fcproj (BT,C)", 4.0 * NC, matmul_bias_rows(y, bias, BT, C));
    TIME_PASS(&gpt2, "bias + GELU forward to bf16 (BT,4C)", 8.0 * N4, bias_gelu_forward_bf16(y16, x16, x, bias, B, T, 4 * C));
    TIME_PASS(&gpt2, "GELU forward again, bf16 (BT,4C)", 4.0 * N4, gelu_forward_bf16(y16, x16, N4));
    TIME_PASS(&gpt2, "bias gradient, fcproj (BT,C)", 4.0 * NC, matmul_backward_bias(dbias, dout, BT, C, 1.0f));
    matmul_bf16_mirror_add(dx, N4, dx16);
    TIME_PASS(&gpt2, "GELU backward (in place) + fc bias gradient", 12.0 * N4,
              gelu_backward_bias_bf16_input(dx, dbias, x16, dx, BT, 4 * C, 1.0f));
    matmul_bf16_mirror_remove(dx);
    MatmulPrecision precision = matmul_precision;
    matmul_precision = MATMUL_BF16; // (a mirror held alone counts on the bf16 path only)
    matmul_bf16_mirror_add(dx, N4, dx16);
    matmul_bf16_mirror_set_alone(dx, 1);
    printf("  (the step's GELU backward, instead of the one above: the forward again, dinp in bf16 alone)\n");
    TIME_PASS(&gpt2, "GELU recompute + backward + fc bias gradient", 10.0 * N4,
              gelu_recompute_backward_bias_bf16(y16, dx, dbias, x16, dout, BT, 4 * C, 1.0f));
    matmul_bf16_mirror_remove(dx);
    matmul_precision = precision;
    TIME_PASS(&gpt2, "bias gradient, attproj (BT,C)", 4.0 * NC, matmul_backward_bias(dbias, dout, BT, C, 1.0f));
    TIME_PASS(&gpt2, "bias gradient, qkv (BT,3C)", 12.0 * NC, matmul_backward_bias(dbias, dout, BT, 3 * C, 1.0f));
    printf("  %-46s %8.3f ms\n", "GPT-2 layer", gpt2);
    // the fp32 step's GELU backward (LLMC_GELU_RECOMPUTE_FUSED=0: its forward again in a pass of its own first)
    double gpt2_fp32 = 0.0;
    printf("GPT-2 fp32, the backward's GELU (LLMC_GELU_RECOMPUTE_FUSED=%d)\n", gelu_recompute_fused());
    TIME_PASS(&gpt2_fp32, "GELU recompute + backward + fc bias gradient", (gelu_recompute_fused() ? 16.0 : 24.0) * N4,
              gelu_recompute_backward_bias(y, dx, dbias, x, dout, BT, 4 * C, 1.0f));

    int FFN = 2048, NH = 12, NKV = 6, HS = 64, QKV = (NH + 2 * NKV) * HS;
    size_t NF = (size_t)BT * FFN;
    printf("Llama 3 (FFN %d, %d + %d heads of %d)\n", FFN, NH, NKV, HS);
    TIME_PASS(&llama3, "RoPE forward, q and k heads", 8.0 * BT * (NH + NKV) * HS,
              rope_forward(y, cos_table, sin_table, B, T, QKV, NH + NKV, HS));
    TIME_PASS(&llama3, "residual forward, attention", 12.0 * NC, residual_forward(y, x, dout, NC));
    // the step's SwiGLU (-p bf16's layout): gate and up rounded beside the output; the backward's one pass from them,
    // dgate and dup in bf16 alone
    TIME_PASS(&llama3, "SwiGLU forward to bf16 (gate, up kept)", 14.0 * NF,
              swiglu_forward_bf16(y16, x16, x16 + NF, x, x + NF, NF));
    TIME_PASS(&llama3, "residual forward, MLP", 12.0 * NC, residual_forward(dx, x, dout, NC));
    precision = matmul_precision;
    matmul_precision = MATMUL_BF16;
    matmul_bf16_mirror_add(dx, NF, dx16);
    matmul_bf16_mirror_set_alone(dx, 1);
    matmul_bf16_mirror_add(dx + NF, NF, dx16 + NF);
    matmul_bf16_mirror_set_alone(dx + NF, 1);
    TIME_PASS(&llama3, "SwiGLU recompute + backward, bf16 alone", 14.0 * NF,
              swiglu_recompute_backward_bf16(y16, dx, dx + NF, dout, x16, x16 + NF, NF));
    matmul_bf16_mirror_remove(dx);
    matmul_bf16_mirror_remove(dx + NF);
    matmul_precision = precision;
    matmul_bf16_mirror_add(dx, (size_t)BT * QKV, dx16);
    TIME_PASS(&llama3, "RoPE backward (+ copy)", 10.0 * BT * (NH + NKV) * HS,
              rope_backward(dx, cos_table, sin_table, B, T, QKV, NH + NKV, HS));
    matmul_bf16_mirror_remove(dx);
    printf("  %-46s %8.3f ms\n", "Llama 3 layer", llama3);

    NH = 6, HS = 128, QKV = 3 * C;
    printf("nanochat (FFN %d, %d heads of %d)\n", 4 * C, NH, HS);
    TIME_PASS(&nanochat, "RoPE forward, q and k heads", 8.0 * BT * 2 * NH * HS,
              rope_reverse_forward(y, cos_table, sin_table, B, T, QKV, 2 * NH, HS));
    TIME_PASS(&nanochat, "residual forward, attention", 12.0 * NC, residual_forward(y, x, dout, NC));
    matmul_bf16_mirror_add(y, N4, y16);
    TIME_PASS(&nanochat, "ReLU^2 forward (+ copy)", 10.0 * N4, relu2_forward(y, x, N4));
    TIME_PASS(&nanochat, "residual forward, MLP", 12.0 * NC, residual_forward(dx, x, dout, NC));
    TIME_PASS(&nanochat, "ReLU^2 forward again (+ copy)", 10.0 * N4, relu2_forward(y, x, N4));
    matmul_bf16_mirror_remove(y);
    matmul_bf16_mirror_add(dx, N4, dx16);
    TIME_PASS(&nanochat, "ReLU^2 backward (+ copy)", 14.0 * N4, relu2_backward_into(dx, x, dout, N4, 0));
    matmul_bf16_mirror_remove(dx);
    matmul_bf16_mirror_add(dx, (size_t)BT * QKV, dx16);
    TIME_PASS(&nanochat, "RoPE backward (+ copy)", 10.0 * BT * 2 * NH * HS,
              rope_reverse_backward(dx, cos_table, sin_table, B, T, QKV, 2 * NH, HS));
    matmul_bf16_mirror_remove(dx);
    printf("  %-46s %8.3f ms\n", "nanochat layer", nanochat);
    free(x); free(y); free(dout); free(dx); free(bias); free(dbias);
    free(x16); free(y16); free(dx16); free(cos_table); free(sin_table);
}

// GPT-2's -p bf16 bias add and GELU forward in AVX-512 (llmc/cpu/vecmath.h's vec16_enabled) against the compiled loop,
// bit for bit: on every one of the 2^16 bf16 inputs (NaN and infinities included; bias 0) and on random
// pre-activations and biases, a row length that is not a multiple of 16
static void check_gelu_vec16(void) {
    if (!vec16_supported()) {
        printf("GELU's AVX-512 forward: not run (no AVX-512 F and BW on this CPU, or no FMA in this build)\n");
        return;
    }
    enum { ROWS16 = 64, COLS16 = 1030 };
    size_t n = (size_t)ROWS16 * COLS16;
    float* x = (float*)mallocCheck(n * sizeof(float));
    float* bias = (float*)mallocCheck(COLS16 * sizeof(float));
    uint16_t* out[2], * x16[2];
    for (int v = 0; v < 2; v++) {
        out[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        x16[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    }
    for (int random = 0; random <= 1; random++) {
        if (random) {
            hash_fill(x, n, 9, 6.0f);
            hash_fill(bias, COLS16, 10, 1.0f);
        } else {
            for (size_t i = 0; i < n; i++) { x[i] = mm_bf16_to_float((uint16_t)(i & 0xffffu)); }
            memset(bias, 0, COLS16 * sizeof(float));
        }
        for (int v = 0; v < 2; v++) {
            setenv("LLMC_VEC16", v == 0 ? "0" : "1", 1);
            bias_gelu_forward_bf16(out[v], x16[v], x, bias, 1, ROWS16, COLS16);
        }
        unsetenv("LLMC_VEC16");
        CHECK(same_bits(out[0], out[1], n * sizeof(uint16_t)) && same_bits(x16[0], x16[1], n * sizeof(uint16_t)),
              "bias + GELU forward to bf16 with LLMC_VEC16=1 and 0: the same bits (%s)",
              random ? "random pre-activations and biases" : "all bf16 inputs, bias 0");
    }
    free(x); free(bias);
    for (int v = 0; v < 2; v++) { free(out[v]); free(x16[v]); }
}

// GPT-2's -p bf16 backward through its GELU (the forward again, the GELU's gradient and the fc bias gradient in one
// pass) in AVX-512 against the compiled loops, bit for bit: out16, dinp (fp32, its bf16 copy beside it, or the copy
// alone) and dbias (a NaN for a NaN: same_floats), on every one of the 2^16 bf16 inputs and on random ones; a row
// length that is not a multiple of 16, beta 0 and 1, 1 to 3 threads; the bias gradient in the given order (three
// chunks of rows, the last a short one, under LLMC_GELU_BIAS=chunks)
static void check_gelu_recompute_vec16(GeluBiasSum order) {
    if (!vec16_supported()) {
        printf("GELU's AVX-512 recompute and backward: not run (no AVX-512 F and BW on this CPU, or no FMA in this "
               "build)\n");
        return;
    }
    gelu_bias_sum_use(order);
    enum { ROWS16 = 130, COLS16 = 1030 };
    size_t n = (size_t)ROWS16 * COLS16;
    uint16_t* x16 = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    float* x = (float*)mallocCheck(n * sizeof(float));
    float* dout = (float*)mallocCheck(n * sizeof(float));
    float* start = (float*)mallocCheck(COLS16 * sizeof(float));
    uint16_t* out[2], * copy[2];
    float* dinp[2], * dbias[2];
    for (int v = 0; v < 2; v++) {
        out[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        copy[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        dinp[v] = (float*)mallocCheck(n * sizeof(float));
        dbias[v] = (float*)mallocCheck(COLS16 * sizeof(float));
    }
    hash_fill(dout, n, 12, 1.0f);
    hash_fill(start, COLS16, 13, 2.0f);
    static const char* KEPT[] = {"dinp in fp32 alone", "dinp and its bf16 copy", "dinp's bf16 copy alone"};
    for (int random = 0; random <= 1; random++) {
        if (random) {
            hash_fill(x, n, 14, 6.0f);
            for (size_t i = 0; i < n; i++) { x16[i] = matmul_bf16_round_value(x[i]); }
        } else {
            for (size_t i = 0; i < n; i++) { x16[i] = (uint16_t)(i & 0xffffu); }
        }
        for (int kept = 0; kept < 3; kept++) {
            for (int beta = 0; beta <= 1; beta++) {
                for (int threads = 1; threads <= 3; threads++) {
                    set_threads(threads);
                    for (int v = 0; v < 2; v++) {
                        if (kept > 0) {
                            matmul_bf16_mirror_add(dinp[v], n, copy[v]);
                            matmul_bf16_mirror_set_alone(dinp[v], kept == 2);
                        }
                        memset(out[v], v == 0 ? 0 : 0xff, n * sizeof(uint16_t));
                        memset(copy[v], v == 0 ? 0 : 0xff, n * sizeof(uint16_t));
                        memset(dinp[v], v == 0 ? 0 : 0x7f, n * sizeof(float));
                        memcpy(dbias[v], start, COLS16 * sizeof(float));
                        setenv("LLMC_VEC16", v == 0 ? "0" : "1", 1);
                        gelu_recompute_backward_bias_bf16(out[v], dinp[v], dbias[v], x16, dout, ROWS16, COLS16,
                                                          (float)beta);
                        if (kept > 0) { matmul_bf16_mirror_remove(dinp[v]); }
                    }
                    unsetenv("LLMC_VEC16");
                    CHECK(same_bits(out[0], out[1], n * sizeof(uint16_t)) &&
                          same_floats(dbias[0], dbias[1], COLS16) &&
                          (kept == 2 || same_bits(dinp[0], dinp[1], n * sizeof(float))) &&
                          (kept == 0 || same_bits(copy[0], copy[1], n * sizeof(uint16_t))),
                          "GELU recompute + backward with LLMC_VEC16=1 and 0 (%s, %s, beta %d, %d threads, %s): not "
                          "the same bits", random ? "random inputs" : "all bf16 inputs", KEPT[kept], beta, threads,
                          order == GELU_BIAS_CHUNKS ? "chunks" : "columns");
                }
            }
        }
    }
    free(x16); free(x); free(dout); free(start);
    for (int v = 0; v < 2; v++) { free(out[v]); free(copy[v]); free(dinp[v]); free(dbias[v]); }
}

static void swiglu_wide_with_env(void* arg) {
    setenv("LLMC_SWIGLU_WIDE", (const char*)arg, 1);
    swiglu_wide();
}

// SwiGLU's -p bf16 forward (gate and up rounded, out = silu(gate) up rounded) and its backward's one pass (out again,
// dgate and dup in bf16 alone) in AVX-512 (llmc/cpu/vecmath.h's vec16_enabled) against the compiled loops: every one
// of the 2^16 bf16 gates with 8 ups each (zero, a denormal, huge, infinite and NaN among them) and random values, a
// length that is not a multiple of 16, 1 to 3 threads, the wide loops and the narrow ones of before
// (LLMC_SWIGLU_WIDE=0). The same bits, or NaN in both (same_bf16: which of two NaNs a product keeps is the compiler's
// choice of operand order)
static void check_swiglu_vec16(void) {
    if (!vec16_supported() || !mm_bf16_cvt_on()) {
        printf("SwiGLU's AVX-512 forward and backward: not run (no AVX-512 F, BW and BF16 on this CPU, or no FMA in "
               "this build)\n");
        return;
    }
    const size_t n = 8 * 65536 + 13;
    static const float UPS[8] = {1.0f, -0.37f, 3.5e4f, 1e-40f, 0.0f, -2.5f, NAN, INFINITY};
    float* gate = (float*)mallocCheck(n * sizeof(float));
    float* up = (float*)mallocCheck(n * sizeof(float));
    float* dout = (float*)mallocCheck(n * sizeof(float));
    uint16_t* out[2], * gate16[2], * up16[2], * dg16[2], * du16[2];
    float* dgate[2], * dup[2];
    for (int v = 0; v < 2; v++) {
        out[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        gate16[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        up16[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        dg16[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        du16[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        dgate[v] = (float*)mallocCheck(n * sizeof(float));
        dup[v] = (float*)mallocCheck(n * sizeof(float));
    }
    hash_fill(dout, n, 21, 3.0f);
    for (int random = 0; random <= 1; random++) {
        if (random) {
            hash_fill(gate, n, 22, 12.0f);
            hash_fill(up, n, 23, 4.0f);
        } else {
            for (size_t i = 0; i < n; i++) {
                // every bf16 gate, with low bits set in odd rounds so that the rounding of gate is exercised too
                uint32_t low = (i >> 16) & 1u ? (uint32_t)(i * 2654435761u) & 0xffffu : 0u;
                uint32_t bits = (uint32_t)(i & 0xffffu) << 16 | low;
                memcpy(&gate[i], &bits, sizeof(float));
                up[i] = UPS[(i >> 16) & 7u] * (1.0f + 1e-3f * (float)(i % 7));
            }
        }
        for (int run = 0; run < 6; run++) { // 1 to 3 threads, the wide loops then the narrow ones (LLMC_SWIGLU_WIDE)
            int threads = 1 + run % 3, wide = run < 3;
            set_threads(threads);
            setenv("LLMC_SWIGLU_WIDE", wide ? "1" : "0", 1);
            for (int v = 0; v < 2; v++) {
                setenv("LLMC_VEC16", v == 0 ? "0" : "1", 1);
                memset(out[v], v == 0 ? 0 : 0xff, n * sizeof(uint16_t));
                swiglu_forward_bf16(out[v], gate16[v], up16[v], gate, up, n);
            }
            CHECK(same_bits(gate16[0], gate16[1], n * sizeof(uint16_t)) &&
                  same_bits(up16[0], up16[1], n * sizeof(uint16_t)) && same_bf16(out[0], out[1], n),
                  "SwiGLU forward to bf16 with LLMC_VEC16=1 and 0 (%s, %d threads, LLMC_SWIGLU_WIDE=%d): not the "
                  "same bits", random ? "random inputs" : "all bf16 gates", threads, wide);
            MatmulPrecision precision = matmul_precision;
            matmul_precision = MATMUL_BF16; // (a mirror held alone counts on the bf16 path only)
            for (int v = 0; v < 2; v++) {
                setenv("LLMC_VEC16", v == 0 ? "0" : "1", 1);
                matmul_bf16_mirror_add(dgate[v], n, dg16[v]);
                matmul_bf16_mirror_set_alone(dgate[v], 1);
                matmul_bf16_mirror_add(dup[v], n, du16[v]);
                matmul_bf16_mirror_set_alone(dup[v], 1);
                memset(out[v], v == 0 ? 0 : 0xff, n * sizeof(uint16_t));
                memset(dg16[v], v == 0 ? 0 : 0xff, n * sizeof(uint16_t));
                memset(du16[v], v == 0 ? 0 : 0xff, n * sizeof(uint16_t));
                swiglu_recompute_backward_bf16(out[v], dgate[v], dup[v], dout, gate16[0], up16[0], n);
                CHECK(!matmul_bf16_fp32_kept(dgate[v], n) && !matmul_bf16_fp32_kept(dup[v], n),
                      "SwiGLU's backward check: dgate and dup are not held in bf16 alone, so the loops under test "
                      "did not run");
                matmul_bf16_mirror_remove(dgate[v]);
                matmul_bf16_mirror_remove(dup[v]);
            }
            matmul_precision = precision;
            unsetenv("LLMC_VEC16");
            unsetenv("LLMC_SWIGLU_WIDE");
            CHECK(same_bf16(out[0], out[1], n) && same_bf16(dg16[0], dg16[1], n) && same_bf16(du16[0], du16[1], n),
                  "SwiGLU recompute + backward with LLMC_VEC16=1 and 0 (%s, %d threads, LLMC_SWIGLU_WIDE=%d): not the "
                  "same bits", random ? "random inputs" : "all bf16 gates", threads, wide);
        }
    }
    free(gate); free(up); free(dout);
    for (int v = 0; v < 2; v++) {
        free(out[v]); free(gate16[v]); free(up16[v]); free(dg16[v]); free(du16[v]); free(dgate[v]); free(dup[v]);
    }
}

int main(int argc, char** argv) {
    if (argc >= 2 && strcmp(argv[1], "--time") == 0) {
        time_passes(argc >= 3 ? atoi(argv[2]) : 1024);
        return 0;
    }
    if (argc >= 2) {
        fprintf(stderr, "usage: %s [--time [T]]\n", argv[0]);
        return 1;
    }
    // the kernels under test, whatever the environment says (their old forms are called by name)
    setenv("LLMC_ELEMENTWISE_FUSED", "1", 1);
    // first, before OpenMP's threads exist (a forked child of a process with them stops on the sanitizers' leak check)
    expect_die("LLMC_SWIGLU_WIDE=yes", swiglu_wide_with_env, (void*)"yes", "LLMC_SWIGLU_WIDE=yes", "use 0 or 1");
    check_bias_gradient();
    // every GELU check in both of the GELU's forms (LLMC_GELU_SIGMOID's: the tanh one, then the sigmoid one);
    // LLMC_TEST_GELU_FORMS=sigmoid: the sigmoid one alone (the sanitizers' run: both forms run the same loops over the
    // same memory, and the checks under ASan cost 20 s a form)
    const char* forms = getenv("LLMC_TEST_GELU_FORMS");
    int one_form = forms != NULL && strcmp(forms, "sigmoid") == 0;
    if (one_form) { printf("GELU checks: the sigmoid form alone (LLMC_TEST_GELU_FORMS=sigmoid)\n"); }
    for (int sigmoid = one_form; sigmoid <= 1; sigmoid++) {
        gelu_sigmoid_use(sigmoid);
        int failed = tests_failed;
        for (int bf16_input = 0; bf16_input <= 1; bf16_input++) {
            for (int copy = 0; copy <= 1; copy++) {
                check_gelu_backward_bias(bf16_input, copy, GELU_BIAS_COLUMNS);
                check_gelu_backward_bias(bf16_input, copy, GELU_BIAS_CHUNKS);
            }
        }
        for (int copy = 0; copy <= 1; copy++) {
            check_gelu_recompute_fp32(GELU_BIAS_COLUMNS, copy);
            check_gelu_recompute_fp32(GELU_BIAS_CHUNKS, copy);
        }
        check_gelu_vec16();
        check_gelu_recompute_vec16(GELU_BIAS_COLUMNS);
        check_gelu_recompute_vec16(GELU_BIAS_CHUNKS);
        if (tests_failed != failed) {
            printf("(the failures above: the GELU's %s form)\n", sigmoid ? "sigmoid" : "tanh");
        }
    }
    check_swiglu_backward();
    check_swiglu_vec16();
    return test_summary();
}
