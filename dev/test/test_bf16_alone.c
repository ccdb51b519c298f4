/*
dev/test/test_bf16_alone.c: the writers of activations held in bf16 alone (llmc/cpu/matmul.h's
matmul_bf16_mirror_set_alone: on -p bf16 the layers whose outputs only GEMMs read write the bf16 copy and leave the
fp32 memory unwritten), and the MLP backwards that recompute the activation's output in the same pass.

    dev/test/test_bf16_alone    the checks (a second or two)

Checked, for each writer (layernorm_forward, layernorm_recompute, fused_residual_forward, rmsnorm_forward with and
without a weight, rmsnorm_recompute, fused_residual_rmsnorm_forward, gelu_forward, relu2_forward, relu2_backward_into, swiglu_forward,
swiglu_backward_into, gelu_backward_bias and gelu_backward_bias_bf16_input, gelu_recompute_backward_bias_bf16), on
row counts 1, 7, 37, 130 and widths 16, 100, 768 with 1 and 2 threads: its output's mirror held alone gets the same
bf16 copy as the mirror beside fp32 (the layer's bits are the bits before), every other output is the same, and the
fp32 memory keeps the sentinel it was filled with (it is not written); under LLMC_BF16_CHECK_MIRRORS=1 it is NaN
instead. Alone only counts on the bf16 path: with matmul_precision fp32 the same call writes the fp32 values.
gelu_recompute_backward_bias_bf16 against gelu_forward_bf16 then gelu_backward_bias_bf16_input (the two passes it
replaces; LLMC_ELEMENTWISE_FUSED=0 runs them): out16, dinp, its copy and dbias bit for bit, beta 0 and 1; and
swiglu_recompute_backward (Llama 3's and Qwen3's) and relu2_recompute_backward (nanochat's) against the forward
then the backward they replace, with their outputs held in bf16 alone (the copies) and in fp32 without copies; and
the bf16 layout's SwiGLU and ReLU^2 (swiglu_forward_bf16, swiglu_recompute_backward_bf16, relu2_forward_bf16,
relu2_recompute_backward_bf16) against the fp32 kernels on the rounded inputs.
*/
#include "../../llmc/cpu/gelu_cpu.h"
#include "../../llmc/cpu/layernorm_cpu.h"
#include "../../llmc/cpu/relu2_cpu.h"
#include "../../llmc/cpu/rmsnorm_cpu.h"
#include "../../llmc/cpu/swiglu_cpu.h"
#include "test_common.h"

#define SENTINEL 0x3f3f3f3fu

static const int ROWS[] = {1, 7, 37, 130};
static const int COLS[] = {16, 100, 768};

static void fill_sentinel(float* x, size_t n) { memset(x, 0x3f, n * sizeof(float)); }

// 1 when every element of x is the sentinel (never written), or (nan) NaN
static int all_untouched(const float* x, size_t n, int nan) {
    for (size_t i = 0; i < n; i++) {
        if (nan ? x[i] == x[i] : float_bits(x[i]) != SENTINEL) { return 0; }
    }
    return 1;
}

// The writers under test, by number: each writes `out` (n floats, a mirror's buffer) from the inputs a, b (n
// floats, or BT rows of C) and small side outputs into side (mean, rstd, the residual, dbias: their own buffers)
enum { W_LN_FWD, W_LN_RECOMPUTE, W_LN_FUSED_RESIDUAL, W_RMS_FWD, W_RMS_FWD_WEIGHTLESS, W_RMS_RECOMPUTE, W_GELU_FWD,
       W_RELU2_FWD, W_RELU2_BWD, W_SWIGLU_FWD, W_SWIGLU_BWD, W_GELU_BWD_BIAS, W_GELU_BWD_BIAS_BF16, W_GELU_RECOMPUTE_BWD,
       W_RMS_FUSED_RESIDUAL, W_COUNT };
static const char* const WRITER_NAMES[W_COUNT] = {
    "layernorm_forward", "layernorm_recompute", "fused_residual_forward", "rmsnorm_forward", "rmsnorm_forward (no weight)",
    "rmsnorm_recompute", "gelu_forward", "relu2_forward", "relu2_backward_into", "swiglu_forward", "swiglu_backward_into",
    "gelu_backward_bias", "gelu_backward_bias_bf16_input", "gelu_recompute_backward_bias_bf16",
    "fused_residual_rmsnorm_forward"};

typedef struct {
    int BT, C;
    float *a, *b, *c, *weight, *bias;  // inputs: (BT,C) each, (C) each
    uint16_t* a16;                     // a rounded
    float* side;                       // (3 BT C + 2 BT + C) floats of side outputs
    uint16_t* side16;                  // (BT C): gelu_recompute's out16
    float* out2;                       // (BT C) swiglu_backward's second output (dup), a mirror's buffer too
} AloneCase;

static void run_writer(int w, AloneCase* k, float* out) {
    int BT = k->BT, C = k->C;
    size_t n = (size_t)BT * C;
    float* mean = k->side;
    float* rstd = k->side + BT;
    float* residual = k->side + 2 * (size_t)BT;
    float* dbias = residual + n;
    switch (w) {
    case W_LN_FWD: layernorm_forward(out, mean, rstd, k->a, k->weight, k->bias, 1, BT, C); break;
    case W_LN_RECOMPUTE:
        layernorm_forward(residual, mean, rstd, k->a, k->weight, k->bias, 1, BT, C); // (the statistics)
        layernorm_recompute(out, k->a, mean, rstd, k->weight, k->bias, 1, BT, C);
        break;
    case W_LN_FUSED_RESIDUAL: fused_residual_forward(residual, out, mean, rstd, k->a, k->b, k->weight, k->bias, 1, BT, C); break;
    case W_RMS_FWD: rmsnorm_forward(out, rstd, k->a, k->weight, 1e-5f, 1, BT, C); break;
    case W_RMS_FWD_WEIGHTLESS: rmsnorm_forward(out, rstd, k->a, NULL, 1e-5f, 1, BT, C); break;
    case W_RMS_RECOMPUTE:
        rmsnorm_forward(residual, rstd, k->a, k->weight, 1e-5f, 1, BT, C);
        rmsnorm_recompute(out, k->a, rstd, k->weight, 1, BT, C);
        break;
    case W_GELU_FWD: gelu_forward(out, k->a, n); break;
    case W_RELU2_FWD: relu2_forward(out, k->a, n); break;
    case W_RELU2_BWD: relu2_backward_into(out, k->a, k->b, n, 0); break;
    case W_SWIGLU_FWD: swiglu_forward(out, k->a, k->b, n); break;
    case W_SWIGLU_BWD: swiglu_backward_into(out, k->out2, k->c, k->a, k->b, n, 0); break;
    case W_GELU_BWD_BIAS: gelu_backward_bias(out, dbias, k->a, k->b, BT, C, 0.0f); break;
    case W_GELU_BWD_BIAS_BF16: gelu_backward_bias_bf16_input(out, dbias, k->a16, k->b, BT, C, 0.0f); break;
    case W_GELU_RECOMPUTE_BWD: gelu_recompute_backward_bias_bf16(k->side16, out, dbias, k->a16, k->b, BT, C, 0.0f); break;
    case W_RMS_FUSED_RESIDUAL: fused_residual_rmsnorm_forward(residual, out, rstd, k->a, k->b, k->weight, 1e-5f, 1, BT, C); break;
    }
}

// the side outputs' size in floats
static size_t side_floats(int BT, int C) { return 2 * (size_t)BT + 2 * (size_t)BT * C + (size_t)C; }

// writer w with its output's mirror beside fp32 (want) and held alone (got), on the bf16 path: the same copies and
// side outputs, and the fp32 output untouched (check 0) or NaN (check 1, as LLMC_BF16_CHECK_MIRRORS=1 makes it)
static void check_writer(int w, int BT, int C, int threads) {
    size_t n = (size_t)BT * C, ns = side_floats(BT, C);
    AloneCase k = {BT, C, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    k.a = (float*)mallocCheck(n * sizeof(float));
    k.b = (float*)mallocCheck(n * sizeof(float));
    k.c = (float*)mallocCheck(n * sizeof(float));
    k.weight = (float*)mallocCheck((size_t)C * sizeof(float));
    k.bias = (float*)mallocCheck((size_t)C * sizeof(float));
    k.a16 = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    hash_fill(k.a, n, (unsigned)(BT + C + w), 4.0f);
    hash_fill(k.b, n, (unsigned)(BT * 3 + C), 2.0f);
    hash_fill(k.c, n, (unsigned)(BT * 5 + C), 1.0f);
    hash_fill(k.weight, (size_t)C, 7u, 1.5f);
    hash_fill(k.bias, (size_t)C, 9u, 0.5f);
    for (size_t i = 0; i < n; i++) { k.a16[i] = matmul_bf16_round_value(k.a[i]); }
    float* out[2];
    float* out2[2];
    float* side[2];
    uint16_t* side16[2];
    uint16_t* copy[2];
    uint16_t* copy2[2];
    omp_set_num_threads(threads);
    for (int alone = 0; alone < 2; alone++) {
        out[alone] = (float*)mallocCheck(n * sizeof(float));
        out2[alone] = (float*)mallocCheck(n * sizeof(float));
        side[alone] = (float*)mallocCheck(ns * sizeof(float));
        side16[alone] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        copy[alone] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        copy2[alone] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        fill_sentinel(out[alone], n);
        fill_sentinel(out2[alone], n);
        memset(side[alone], 0, ns * sizeof(float));
        memset(side16[alone], 0, n * sizeof(uint16_t));
        memset(copy[alone], 0xff, n * sizeof(uint16_t));
        memset(copy2[alone], 0xff, n * sizeof(uint16_t));
        matmul_bf16_mirror_add(out[alone], n, copy[alone]);
        matmul_bf16_mirror_add(out2[alone], n, copy2[alone]);
        matmul_bf16_mirror_set_alone(out[alone], alone);
        matmul_bf16_mirror_set_alone(out2[alone], alone);
        k.side = side[alone];
        k.side16 = side16[alone];
        k.out2 = out2[alone];
        run_writer(w, &k, out[alone]);
        matmul_bf16_mirror_remove(out[alone]);
        matmul_bf16_mirror_remove(out2[alone]);
    }
    const char* name = WRITER_NAMES[w];
    int two = w == W_SWIGLU_BWD;
    CHECK(memcmp(copy[0], copy[1], n * sizeof(uint16_t)) == 0 && (!two || memcmp(copy2[0], copy2[1], n * 2) == 0),
          "%s %d x %d, %d threads: the bf16 copy written alone differs from the copy beside fp32", name, BT, C, threads);
    CHECK(memcmp(side[0], side[1], ns * sizeof(float)) == 0 && memcmp(side16[0], side16[1], n * sizeof(uint16_t)) == 0,
          "%s %d x %d, %d threads: a side output (statistics, residual, dbias, out16) differs", name, BT, C, threads);
    CHECK(all_untouched(out[1], n, matmul_bf16_check_mirrors()) && (!two || all_untouched(out2[1], n, matmul_bf16_check_mirrors())),
          "%s %d x %d, %d threads: the fp32 memory of an output held alone was written", name, BT, C, threads);
    CHECK(!all_untouched(out[0], n, 0), "%s %d x %d: the fp32 output beside its copy was not written", name, BT, C);
    for (int alone = 0; alone < 2; alone++) {
        free(out[alone]); free(out2[alone]); free(side[alone]); free(side16[alone]); free(copy[alone]); free(copy2[alone]);
    }
    free(k.a); free(k.b); free(k.c); free(k.weight); free(k.bias); free(k.a16);
}

static void test_writers(void) {
    for (int w = 0; w < W_COUNT; w++) {
        for (size_t ri = 0; ri < sizeof(ROWS) / sizeof(ROWS[0]); ri++) {
            for (size_t ci = 0; ci < sizeof(COLS) / sizeof(COLS[0]); ci++) {
                for (int threads = 1; threads <= 2; threads++) { check_writer(w, ROWS[ri], COLS[ci], threads); }
            }
        }
    }
}

// in fp32 there is no bf16 path: a mirror marked alone still gets its fp32 values
static void test_alone_needs_the_bf16_path(void) {
    const int BT = 7, C = 100;
    size_t n = (size_t)BT * C;
    float* x = (float*)mallocCheck(n * sizeof(float));
    float* out = (float*)mallocCheck(n * sizeof(float));
    uint16_t* out16 = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
    hash_fill(x, n, 3u, 2.0f);
    fill_sentinel(out, n);
    matmul_bf16_mirror_add(out, n, out16);
    matmul_bf16_mirror_set_alone(out, 1);
    matmul_precision = MATMUL_FP32;
    CHECK(matmul_bf16_fp32_kept(out, n), "fp32 precision: an alone mirror's buffer must be written");
    relu2_forward(out, x, n);
    CHECK(!all_untouched(out, n, 0) && out[0] == relu2_value(x[0]), "fp32 precision: relu2_forward left out unwritten");
    matmul_precision = MATMUL_BF16;
    CHECK(!matmul_bf16_fp32_kept(out, n) && !matmul_bf16_fp32_kept(out + 3, 10), "bf16: the buffer (and any part) alone");
    matmul_bf16_mirror_set_alone(out, 0);
    CHECK(matmul_bf16_fp32_kept(out, n), "bf16, the mirror beside fp32: the buffer is written");
    matmul_bf16_mirror_remove(out);
    free(x); free(out); free(out16);
}

// gelu_recompute_backward_bias_bf16 against the two passes it replaces, with and without dinp's copy, beta 0 and 1
static void test_gelu_recompute_matches_two_passes(void) {
    for (size_t ri = 0; ri < sizeof(ROWS) / sizeof(ROWS[0]); ri++) {
        for (size_t ci = 0; ci < sizeof(COLS) / sizeof(COLS[0]); ci++) {
            int BT = ROWS[ri], OC = COLS[ci];
            size_t n = (size_t)BT * OC;
            float* inp = (float*)mallocCheck(n * sizeof(float));
            uint16_t* inp16 = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
            float* dout = (float*)mallocCheck(n * sizeof(float));
            hash_fill(inp, n, (unsigned)(BT + OC), 5.0f); // the curved part and both tails
            for (size_t i = 0; i < n; i++) { inp16[i] = matmul_bf16_round_value(inp[i]); }
            hash_fill(dout, n, (unsigned)(BT * 7 + OC), 1.0f);
            for (int copy = 0; copy < 2; copy++) {
                for (int beta = 0; beta < 2; beta++) {
                    float* dinp[2];
                    float* dbias[2];
                    uint16_t* out16[2];
                    uint16_t* dinp16[2];
                    for (int v = 0; v < 2; v++) {
                        dinp[v] = (float*)mallocCheck(n * sizeof(float));
                        dbias[v] = (float*)mallocCheck((size_t)OC * sizeof(float));
                        out16[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
                        dinp16[v] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
                        fill_sentinel(dinp[v], n);
                        hash_fill(dbias[v], (size_t)OC, 5u, 1.0f);
                        memset(out16[v], 0xff, n * sizeof(uint16_t));
                        memset(dinp16[v], 0xff, n * sizeof(uint16_t));
                        if (copy) { matmul_bf16_mirror_add(dinp[v], n, dinp16[v]); }
                    }
                    gelu_forward_bf16(out16[0], inp16, n);
                    gelu_backward_bias_bf16_input(dinp[0], dbias[0], inp16, dout, BT, OC, (float)beta);
                    gelu_recompute_backward_bias_bf16(out16[1], dinp[1], dbias[1], inp16, dout, BT, OC, (float)beta);
                    CHECK(memcmp(out16[0], out16[1], n * 2) == 0 && memcmp(dinp[0], dinp[1], n * 4) == 0 &&
                          memcmp(dbias[0], dbias[1], (size_t)OC * 4) == 0 && (!copy || memcmp(dinp16[0], dinp16[1], n * 2) == 0),
                          "gelu_recompute_backward_bias_bf16 %d x %d, copy %d, beta %d: not the two passes' bits", BT, OC,
                          copy, beta);
                    for (int v = 0; v < 2; v++) {
                        if (copy) { matmul_bf16_mirror_remove(dinp[v]); }
                        free(dinp[v]); free(dbias[v]); free(out16[v]); free(dinp16[v]);
                    }
                }
            }
            free(inp); free(inp16); free(dout);
        }
    }
}

// swiglu_recompute_backward against swiglu_forward then swiglu_backward_into, and relu2_recompute_backward against
// relu2_forward then relu2_backward_into, in their two cases: all outputs held in bf16 alone (the copies compared),
// and fp32 without copies (the outputs compared); gate (ReLU^2's input) over [-20, 20]
static void test_recompute_backward_matches_two_calls(void) {
    const size_t sizes[] = {1, 17, 700, 4099};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t n = sizes[si];
        float* gate = (float*)mallocCheck(n * sizeof(float));
        float* up = (float*)mallocCheck(n * sizeof(float));
        float* dout = (float*)mallocCheck(n * sizeof(float));
        hash_fill(gate, n, 21u + (unsigned)n, 20.0f);
        hash_fill(up, n, 23u, 2.0f);
        hash_fill(dout, n, 29u, 1.0f);
        for (int k = 0; k < 4; k++) {
            int alone = k % 2, relu = k / 2;
            for (int threads = 1; threads <= 2; threads++) {
                omp_set_num_threads(threads);
                float* o[2][3];
                uint16_t* o16[2][3];
                for (int v = 0; v < 2; v++) {
                    for (int j = 0; j < 3; j++) {
                        o[v][j] = (float*)mallocCheck(n * sizeof(float));
                        o16[v][j] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
                        fill_sentinel(o[v][j], n);
                        memset(o16[v][j], 0xff, n * sizeof(uint16_t));
                        if (alone) {
                            matmul_bf16_mirror_add(o[v][j], n, o16[v][j]);
                            matmul_bf16_mirror_set_alone(o[v][j], 1);
                        }
                    }
                }
                int outputs = relu ? 2 : 3;
                if (relu) {
                    relu2_forward(o[0][0], gate, n);
                    relu2_backward_into(o[0][1], gate, dout, n, 0);
                    relu2_recompute_backward(o[1][0], o[1][1], gate, dout, n);
                } else {
                    swiglu_forward(o[0][0], gate, up, n);
                    swiglu_backward_into(o[0][1], o[0][2], dout, gate, up, n, 0);
                    swiglu_recompute_backward(o[1][0], o[1][1], o[1][2], dout, gate, up, n);
                }
                int same = 1;
                for (int j = 0; j < outputs; j++) {
                    same &= alone ? memcmp(o16[0][j], o16[1][j], n * 2) == 0 : memcmp(o[0][j], o[1][j], n * 4) == 0;
                    if (alone) { same &= all_untouched(o[1][j], n, matmul_bf16_check_mirrors()); }
                }
                CHECK(same, "%s n=%zu alone %d, %d threads: not the two calls' bits",
                      relu ? "relu2_recompute_backward" : "swiglu_recompute_backward", n, alone, threads);
                for (int v = 0; v < 2; v++) {
                    for (int j = 0; j < 3; j++) {
                        if (alone) { matmul_bf16_mirror_remove(o[v][j]); }
                        free(o[v][j]);
                        free(o16[v][j]);
                    }
                }
            }
        }
        free(gate); free(up); free(dout);
    }
}

// The bf16 layout's MLP kernels (llmc/cpu/decoder_cpu.h): swiglu_forward_bf16 and relu2_forward_bf16 round their
// inputs into the layer's bf16 copies and give the fp32 kernels' output on the rounded inputs, rounded;
// swiglu_recompute_backward_bf16 and relu2_recompute_backward_bf16 give swiglu_recompute_backward's and
// relu2_recompute_backward's bits on the rounded inputs, with the gradients in fp32 without copies (mode 0), held in
// bf16 alone (1, the fp32 memory never written) and in fp32 beside their copies (2)
static int rounded_equal(const uint16_t* x16, const float* x, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (x16[i] != matmul_bf16_round_value(x[i])) { return 0; }
    }
    return 1;
}

static void test_bf16_layout_kernels(void) {
    const size_t sizes[] = {1, 17, 700, 4099};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t n = sizes[si];
        float* in[3];  // gate (ReLU^2's input), up, dout
        float* inr[2]; // gate and up rounded, as floats
        for (int j = 0; j < 3; j++) { in[j] = (float*)mallocCheck(n * sizeof(float)); }
        hash_fill(in[0], n, 31u + (unsigned)n, 20.0f);
        hash_fill(in[1], n, 37u, 2.0f);
        hash_fill(in[2], n, 41u, 1.0f);
        for (int j = 0; j < 2; j++) {
            inr[j] = (float*)mallocCheck(n * sizeof(float));
            for (size_t i = 0; i < n; i++) { inr[j][i] = mm_bf16_to_float(matmul_bf16_round_value(in[j][i])); }
        }
        float* ref[3];       // the fp32 kernels on the rounded inputs: out, dgate, dup
        float* got[2];       // dgate, dup
        uint16_t* got16[4];  // out16 forward, out16 backward, gate16, up16
        uint16_t* copy16[2]; // dgate's and dup's copies
        for (int j = 0; j < 3; j++) { ref[j] = (float*)mallocCheck(n * sizeof(float)); }
        for (int j = 0; j < 2; j++) {
            got[j] = (float*)mallocCheck(n * sizeof(float));
            copy16[j] = (uint16_t*)mallocCheck(n * sizeof(uint16_t));
        }
        for (int j = 0; j < 4; j++) { got16[j] = (uint16_t*)mallocCheck(n * sizeof(uint16_t)); }
        for (int relu = 0; relu < 2; relu++) {
            const char* name = relu ? "relu2" : "swiglu";
            int grads = relu ? 1 : 2;
            for (int threads = 1; threads <= 2; threads++) {
                omp_set_num_threads(threads);
                // forward: the rounded inputs kept, the output of the rounded inputs rounded
                if (relu) {
                    relu2_forward(ref[0], inr[0], n);
                    relu2_forward_bf16(got16[0], got16[2], in[0], n);
                } else {
                    swiglu_forward(ref[0], inr[0], inr[1], n);
                    swiglu_forward_bf16(got16[0], got16[2], got16[3], in[0], in[1], n);
                }
                int same = rounded_equal(got16[0], ref[0], n);
                for (int j = 0; j < grads; j++) { same &= rounded_equal(got16[2 + j], in[j], n); }
                CHECK(same, "%s_forward_bf16 n=%zu, %d threads: not the fp32 kernel's bits on the rounded inputs, "
                      "rounded", name, n, threads);
                // backward, in the three modes of its gradients
                if (relu) { relu2_recompute_backward(ref[0], ref[1], inr[0], in[2], n); }
                else { swiglu_recompute_backward(ref[0], ref[1], ref[2], in[2], inr[0], inr[1], n); }
                for (int mode = 0; mode < 3; mode++) {
                    for (int j = 0; j < grads; j++) {
                        fill_sentinel(got[j], n);
                        memset(copy16[j], 0xff, n * sizeof(uint16_t));
                        if (mode > 0) {
                            matmul_bf16_mirror_add(got[j], n, copy16[j]);
                            matmul_bf16_mirror_set_alone(got[j], mode == 1);
                        }
                    }
                    if (relu) { relu2_recompute_backward_bf16(got16[1], got[0], got16[2], in[2], n); }
                    else { swiglu_recompute_backward_bf16(got16[1], got[0], got[1], in[2], got16[2], got16[3], n); }
                    same = rounded_equal(got16[1], ref[0], n);
                    for (int j = 0; j < grads; j++) {
                        if (mode != 1) { same &= memcmp(got[j], ref[1 + j], n * sizeof(float)) == 0; }
                        else { same &= all_untouched(got[j], n, matmul_bf16_check_mirrors()); }
                        if (mode > 0) { same &= rounded_equal(copy16[j], ref[1 + j], n); }
                        if (mode > 0) { matmul_bf16_mirror_remove(got[j]); }
                    }
                    CHECK(same, "%s_recompute_backward_bf16 n=%zu mode %d, %d threads: not the fp32 kernel's bits on "
                          "the rounded inputs", name, n, mode, threads);
                }
            }
        }
        for (int j = 0; j < 3; j++) { free(in[j]); free(ref[j]); }
        for (int j = 0; j < 2; j++) { free(inr[j]); free(got[j]); free(copy16[j]); }
        for (int j = 0; j < 4; j++) { free(got16[j]); }
    }
}

int main(int argc, char** argv) {
    (void)argv;
    if (argc != 1) {
        fprintf(stderr, "error: usage: dev/test/test_bf16_alone\n");
        return 1;
    }
    setenv("LLMC_ELEMENTWISE_FUSED", "1", 1); // the kernels under test, whatever the environment says
    matmul_precision = MATMUL_BF16;           // (alone counts on the bf16 path only)
    test_writers();
    test_alone_needs_the_bf16_path();
    test_gelu_recompute_matches_two_passes();
    test_recompute_backward_matches_two_calls();
    test_bf16_layout_kernels();
    matmul_precision = MATMUL_FP32;
    return test_summary();
}
