/*
dev/test/test_attention_cpu.c: llmc/cpu/attention_cpu.h's blocked kernel (bf16 products, fp32 sums) against its tiled
kernel (fp32), forward and backward.

    dev/test/test_attention_cpu          the checks (a few seconds)
    dev/test/test_attention_cpu --time [T ...]   forward + backward times of both kernels at GPT-2 d12's shapes
                                         (B=4, NH=12, HS=64, T=64 and 1024 or the T given; medians; dev/bench_attention.py
                                         puts torch's SDPA beside them), and one tile's products on the blocked
                                         kernel's micro-kernel against matmul_gemm(MATMUL_BF16, ...)
    dev/test/test_attention_cpu --time-switch LLMC_NAME [T]   the -p bf16 forward and backward (B=4, NH=12, HS=64,
                                         T=1024 or T) with the switch at 1 and at 0 alternating call by call, medians
                                         of 40: a switch timed on a machine whose speed drifts between runs

Checked: out, dq, dk, dv of the blocked kernel against the tiled one for T not a multiple of the 64-row tile (1, 63,
65, 97, 200), HS 16, 20 (padded to 32), 64, 128, and grouped-query heads (NH 4 / NKV 2, NH 4 / NKV 1) against the
tiled kernel run on K and V repeated per query head (repeat_kv_forward, the trainers' former path); the tiled kernel's
own grouped-query path against that too; the blocked backward given the forward's out and lse against the one that
recomputes them (the same bits); 1 thread against 2 (the same bits); the backward's rows fetched ahead and not
(LLMC_ATTENTION_PREFETCH=0: the same bits); P^T, dS^T and dQ^T rounded a block at a time and a row at a time
(LLMC_ATTENTION_BLOCK_ROUND=0: the same bits, HS 16, 20, 64, 128, ragged T, grouped heads); the diagonal block's
products skipping masked zeros against the full ones (LLMC_ATTENTION_TRIANGLE=0: the same bits, those cases, the
work buffers NaN first); P^T written in the rowpair layout by the forward's AVX-512 softmax against the pass after
each block (LLMC_ATTENTION_PAIRS_FUSED=0: the same bits, those cases, the work buffers NaN first; and one block at a
time); the -p bf16 backward's qkv bias sums against the tiles' sums of the dqkv it wrote (bit for
bit, beta 0 and 1), and with dqkv held in bf16 alone (fp32 untouched, the same copy and sums; 1 thread, LLMC_VEC16=0,
LLMC_ATTENTION_BLOCK_ROUND=0); q, k and v kept in bf16
rounded row after row first and a block at a time (LLMC_ATTENTION_ROUND_ROWS=0: the same bits, the same cases); the
softmax and the
backward's element-wise part in AVX-512, and the transposes in 16 x 16 register blocks, against the compiled loops
(LLMC_VEC16=0: the same bits, those cases and
scores large enough to clamp the exponentials; and one block at a time, 64 random blocks); the tiled kernel's
softmax in AVX-512 and in AVX2 against its compiled loop (LLMC_VEC16=0, LLMC_VEC8=0: the same bits, the same
cases); dqkv written (the trainers' call) against dqkv added to zero, and
its bf16 copy (LLMC_ATTENTION_OVERWRITE=0 too); the fp32 emulation of the micro-kernel
(LLMC_BF16_NATIVE=0) against the tiled kernel; LLMC_ATTENTION's choice and its error line (and
LLMC_ATTENTION_PREFETCH's, _PAIRS_FUSED', _BLOCK_ROUND's, _ROUND_ROWS', _OVERWRITE's, and LLMC_VEC16's); the phase account; the
bf16 copies (llmc/cpu/matmul.h's mirrors) of out and dqkv written; the blocked kernel on q, k, v stored in bf16 (GPT-2's
-p bf16 activations) against the same kernel on fp32 (the forward bit for bit, the backward within ATT_BF16_D_TOL).

Tolerance of blocked against tiled: max |blocked - tiled| <= ATT_BF16_TOL of max |tiled|, per tensor (out, dq, dk,
dv; max |tiled| taken as at least 1e-3: at T=1 dq and dk are 0). Q, K, V, P, dO, dS are rounded to bf16 (8
significant bits: relative error up to 2^-8 each) and the scores here are a few units (as in a trained model), so a
score moves by ~1e-2 absolute and a weight by ~1% relative; sums over many keys average part of it out. Measured
here: <= 1.0e-2 (out at T=65, HS=16), the gradients <= 1.0e-2; the bound is 2e-2.
*/
#include "../../llmc/cpu/attention_cpu.h"
#include "../../llmc/cpu/repeat_kv_cpu.h"
#include "test_common.h"

#define ATT_BF16_TOL 2e-2
#define ATT_FP32_TOL 1e-6

typedef struct {
    int B, T, NH, NKV, HS;
} AttCase;

static float input_amp = 5.0f; // q, k, v uniform in [-input_amp, input_amp]: scores of a few units

static size_t case_qkv(const AttCase* c) { return (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->HS; }
static size_t case_out(const AttCase* c) { return (size_t)c->B * c->T * c->NH * c->HS; }

// q, k, v of scale 5 (scores of a few units: neither a flat nor a one-hot softmax), dout in [-0.5, 0.5)
static float* case_inputs(const AttCase* c, float** dout, unsigned seed) {
    float* qkv = random_array(case_qkv(c), seed);
    for (size_t i = 0; i < case_qkv(c); i++) { qkv[i] *= input_amp; }
    *dout = random_array(case_out(c), seed + 1);
    return qkv;
}

static void use_kernel(const char* name) { setenv("LLMC_ATTENTION", name, 1); }

// the two kernels run_gqa runs by name
static const char* const GQA_KERNELS[2] = {"blocked", "tiled"};

// out and dqkv (zeroed first) of attention_gqa_forward / _backward with the kernel named; keep: the backward gets
// the forward's out and lse (the Llama 3 and nanochat trainers' call), else neither (GPT-2's)
static void run_gqa(const char* kernel, const AttCase* c, const float* qkv, const float* dout, float* out, float* dqkv,
                    int keep) {
    use_kernel(kernel);
    float* lse = (float*)mallocCheck((size_t)c->B * c->T * c->NH * sizeof(float));
    attention_gqa_forward(out, keep ? lse : NULL, qkv, c->B, c->T, c->NH, c->NKV, c->HS);
    memset(dqkv, 0, case_qkv(c) * sizeof(float));
    attention_gqa_backward(dqkv, dout, qkv, keep ? out : NULL, keep ? lse : NULL, c->B, c->T, c->NH, c->NKV, c->HS);
    free(lse);
}

// the reference: the tiled kernel on K and V repeated for every query head, the repeats' gradients summed back
static void run_repeated_tiled(const AttCase* c, const float* qkv, const float* dout, float* out, float* dqkv) {
    use_kernel("tiled");
    int C = c->NH * c->HS;
    size_t nr = (size_t)c->B * c->T * 3 * C;
    float* qkvr = (float*)mallocCheck(nr * sizeof(float));
    float* dqkvr = (float*)calloc(nr, sizeof(float));
    repeat_kv_forward(qkvr, qkv, c->B, c->T, c->NH, c->NKV, c->HS);
    attention_forward(out, NULL, qkvr, c->B, c->T, C, c->NH);
    attention_backward(dqkvr, dout, qkvr, NULL, c->B, c->T, C, c->NH);
    memset(dqkv, 0, case_qkv(c) * sizeof(float));
    repeat_kv_backward(dqkv, dqkvr, c->B, c->T, c->NH, c->NKV, c->HS);
    free(qkvr);
    free(dqkvr);
}

// max |a - b| / max |b| over columns [c0, c1) of rows of width `row` (n values in all), max |b| at least 1e-3 (at
// T=1 dq is 0: a row that sees one key has no score gradient); NaN fails every check
static double rel_err_cols(const float* a, const float* b, size_t n, int row, int c0, int c1) {
    double diff = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        int col = (int)(i % (size_t)row);
        if (col < c0 || col >= c1) { continue; }
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > diff || d != d) { diff = d; }
        if (fabs((double)b[i]) > scale) { scale = fabs((double)b[i]); }
    }
    return diff / (scale > 1e-3 ? scale : 1e-3);
}

// the worst of out, dq, dk, dv relative errors of (out, dqkv) against (ref_out, ref_dqkv); each into errs[4]
static double compare(const AttCase* c, const float* out, const float* dqkv, const float* ref_out, const float* ref_dqkv,
                      double errs[4]) {
    int C = c->NH * c->HS, KV = c->NKV * c->HS, QKV = C + 2 * KV;
    errs[0] = rel_err_cols(out, ref_out, case_out(c), C, 0, C);
    errs[1] = rel_err_cols(dqkv, ref_dqkv, case_qkv(c), QKV, 0, C);
    errs[2] = rel_err_cols(dqkv, ref_dqkv, case_qkv(c), QKV, C, C + KV);
    errs[3] = rel_err_cols(dqkv, ref_dqkv, case_qkv(c), QKV, C + KV, QKV);
    double worst = 0.0;
    for (int i = 0; i < 4; i++) { worst = errs[i] > worst || errs[i] != errs[i] ? errs[i] : worst; }
    return worst;
}

static const AttCase MHA_CASES[] = {
    {2, 1, 2, 2, 64}, {1, 63, 2, 2, 64}, {2, 65, 3, 3, 16}, {1, 97, 2, 2, 20}, {1, 200, 2, 2, 128}, {2, 200, 2, 2, 64},
};
static const AttCase GQA_CASES[] = {
    {1, 200, 4, 2, 64}, {2, 65, 4, 1, 16}, {1, 130, 4, 1, 128}, {1, 1, 4, 2, 64},
};
#define NCASES(a) ((int)(sizeof(a) / sizeof((a)[0])))

// blocked against the reference (tiled; on repeated K/V for grouped heads), both backward calls
static void check_blocked_case(const AttCase* c, int gqa) {
    float* dout;
    float* qkv = case_inputs(c, &dout, (unsigned)(c->T * 7 + c->HS));
    float* ref_out = (float*)mallocCheck(case_out(c) * sizeof(float));
    float* ref_dqkv = (float*)mallocCheck(case_qkv(c) * sizeof(float));
    float* out = (float*)mallocCheck(case_out(c) * sizeof(float));
    float* dqkv = (float*)mallocCheck(case_qkv(c) * sizeof(float));
    float* out2 = (float*)mallocCheck(case_out(c) * sizeof(float));
    float* dqkv2 = (float*)mallocCheck(case_qkv(c) * sizeof(float));
    if (gqa) { run_repeated_tiled(c, qkv, dout, ref_out, ref_dqkv); }
    else { run_gqa("tiled", c, qkv, dout, ref_out, ref_dqkv, 0); }
    run_gqa("blocked", c, qkv, dout, out, dqkv, 1);
    double e[4];
    double worst = compare(c, out, dqkv, ref_out, ref_dqkv, e);
    printf("B=%d T=%d NH=%d NKV=%d HS=%d: blocked vs tiled%s: out %.1e dq %.1e dk %.1e dv %.1e\n", c->B, c->T, c->NH,
           c->NKV, c->HS, gqa ? " on repeated k/v" : "", e[0], e[1], e[2], e[3]);
    CHECK(worst <= ATT_BF16_TOL, "B=%d T=%d NH=%d NKV=%d HS=%d: blocked vs tiled: out %.2e dq %.2e dk %.2e dv %.2e > %.0e",
          c->B, c->T, c->NH, c->NKV, c->HS, e[0], e[1], e[2], e[3], ATT_BF16_TOL);
    // the backward without the forward's out and lse runs each tile's forward again: the same bits
    run_gqa("blocked", c, qkv, dout, out2, dqkv2, 0);
    CHECK(memcmp(out, out2, case_out(c) * sizeof(float)) == 0 && memcmp(dqkv, dqkv2, case_qkv(c) * sizeof(float)) == 0,
          "T=%d HS=%d: the blocked backward recomputing out and lse differs from the one given them", c->T, c->HS);
    if (gqa) { // the tiled kernel's own grouped-query path against the repeated one
        run_gqa("tiled", c, qkv, dout, out2, dqkv2, 0);
        worst = compare(c, out2, dqkv2, ref_out, ref_dqkv, e);
        CHECK(worst <= ATT_FP32_TOL, "T=%d NH=%d NKV=%d: tiled grouped-query vs repeated: out %.2e dq %.2e dk %.2e dv %.2e",
              c->T, c->NH, c->NKV, e[0], e[1], e[2], e[3]);
    }
    free(qkv); free(dout); free(ref_out); free(ref_dqkv); free(out); free(dqkv); free(out2); free(dqkv2);
}

static void test_blocked_matches_tiled_cases(void) {
    for (int i = 0; i < NCASES(MHA_CASES); i++) { check_blocked_case(&MHA_CASES[i], 0); }
    for (int i = 0; i < NCASES(GQA_CASES); i++) { check_blocked_case(&GQA_CASES[i], 1); }
}

// the blocked kernel on 1 thread and on 2 gives the same bits (the tiled one too)
static void test_thread_count_does_not_change_bits(void) {
    const AttCase c = {2, 200, 4, 2, 64};
    for (int k = 0; k < 2; k++) {
        float* dout;
        float* qkv = case_inputs(&c, &dout, 5);
        float* out[2];
        float* dqkv[2];
        for (int n = 0; n < 2; n++) {
            out[n] = (float*)mallocCheck(case_out(&c) * sizeof(float));
            dqkv[n] = (float*)mallocCheck(case_qkv(&c) * sizeof(float));
            omp_set_num_threads(n + 1);
            run_gqa(GQA_KERNELS[k], &c, qkv, dout, out[n], dqkv[n], 1);
        }
        omp_set_num_threads(2);
        CHECK(memcmp(out[0], out[1], case_out(&c) * sizeof(float)) == 0, "%s: out differs between 1 and 2 threads", GQA_KERNELS[k]);
        CHECK(memcmp(dqkv[0], dqkv[1], case_qkv(&c) * sizeof(float)) == 0, "%s: dqkv differs between 1 and 2 threads", GQA_KERNELS[k]);
        free(qkv); free(dout);
        for (int n = 0; n < 2; n++) { free(out[n]); free(dqkv[n]); }
    }
}

// every float of the attention's per-thread work buffers NaN (what a kernel reads before it writes shows up)
static void poison_attention_scratch(void) {
    const size_t floats = (size_t)1 << 22; // (more than any case here asks: later calls keep this buffer)
    int nthreads;
    float* s = attention_scratch(floats, &nthreads);
    for (size_t i = 0; i < (size_t)nthreads * floats; i++) { s[i] = NAN; }
}

// the cases every switch is checked on: head sizes 64, 128, 16, 20 (padded), ragged T, grouped heads, a single position
#define ATT_SWITCH_CASES {2, 200, 4, 2, 64}, {1, 97, 2, 2, 128}, {2, 65, 4, 1, 16}, {1, 70, 2, 2, 20}, {1, 1, 2, 2, 64}

// the blocked kernel with a switch on and off (LLMC_ATTENTION_PREFETCH, LLMC_ATTENTION_BLOCK_ROUND,
// LLMC_ATTENTION_TRIANGLE: 1, then 0) gives the same bits: out, and dqkv added to zero with and without the forward's
// out and lse, and written with its bf16 copy (the trainers' -p bf16 call); poison: the kernels' work buffers NaN
// before each run. A bad value: test_kernel_choice.
static void check_switch_keeps_bits(const char* name, const AttCase* c, int poison) {
    size_t nq = case_qkv(c), no = case_out(c), nl = (size_t)c->B * c->T * c->NH;
    float* dout;
    float* qkv = case_inputs(c, &dout, 9 + (unsigned)c->HS);
    float* lse = (float*)mallocCheck(nl * sizeof(float));
    for (int variant = 0; variant < 3; variant++) { // added to zero without out and lse, with them, written
        float* out[2];
        float* dqkv[2];
        uint16_t* dqkv16[2];
        for (int n = 0; n < 2; n++) {
            out[n] = (float*)mallocCheck(no * sizeof(float));
            dqkv[n] = (float*)mallocCheck(nq * sizeof(float));
            dqkv16[n] = (uint16_t*)calloc(nq, sizeof(uint16_t));
            setenv(name, n == 0 ? "1" : "0", 1);
            if (poison) { poison_attention_scratch(); }
            if (variant < 2) {
                run_gqa("blocked", c, qkv, dout, out[n], dqkv[n], variant);
                continue;
            }
            use_kernel("blocked");
            attention_gqa_forward(out[n], lse, qkv, c->B, c->T, c->NH, c->NKV, c->HS);
            for (size_t i = 0; i < nq; i++) { dqkv[n][i] = NAN; }
            matmul_bf16_mirror_add(dqkv[n], nq, dqkv16[n]);
            attention_gqa_backward_into(dqkv[n], dout, qkv, out[n], lse, c->B, c->T, c->NH, c->NKV, c->HS, 0);
            matmul_bf16_mirror_remove(dqkv[n]);
        }
        unsetenv(name);
        CHECK(memcmp(out[0], out[1], no * sizeof(float)) == 0 && memcmp(dqkv[0], dqkv[1], nq * sizeof(float)) == 0 &&
              memcmp(dqkv16[0], dqkv16[1], nq * sizeof(uint16_t)) == 0,
              "T=%d NH=%d NKV=%d HS=%d, %s: out, dqkv or its bf16 copy differ with %s=0", c->T, c->NH, c->NKV, c->HS,
              variant == 0 ? "added, recomputed" : variant == 1 ? "added, kept" : "written", name);
        for (int n = 0; n < 2; n++) { free(out[n]); free(dqkv[n]); free(dqkv16[n]); }
    }
    free(qkv); free(dout); free(lse);
}

// the diagonal block's products skipping the masked zeros (LLMC_ATTENTION_TRIANGLE) against the full products: the
// same bits, head sizes 16, 20 (padded), 64, 128, ragged T, grouped heads, a single position; the work buffers NaN
// before each run, so a masked score or gradient that the skipped products leave unwritten is seen if it is read.
// Where AMX runs the products (which skip nothing) the same on vdpbf16ps too (LLMC_ATTENTION_AMX=0), where the
// triangle is skipped
static void test_triangle_does_not_change_bits(void) {
    const AttCase cases[] = {ATT_SWITCH_CASES, {1, 256, 2, 1, 64}};
    for (int amx_off = 0; amx_off <= amx_usable(); amx_off++) {
        if (amx_off) { setenv("LLMC_ATTENTION_AMX", "0", 1); }
        for (int i = 0; i < NCASES(cases); i++) { check_switch_keeps_bits("LLMC_ATTENTION_TRIANGLE", &cases[i], 1); }
        if (vec16_enabled()) { // (and the compiled softmax and gradient loops)
            setenv("LLMC_VEC16", "0", 1);
            for (int i = 0; i < NCASES(cases); i++) { check_switch_keeps_bits("LLMC_ATTENTION_TRIANGLE", &cases[i], 1); }
            unsetenv("LLMC_VEC16");
        }
        unsetenv("LLMC_ATTENTION_AMX");
    }
}

// The -p bf16 backward summing the qkv bias gradient as it writes dqkv (GPT-2's call): dbias = beta dbias + each
// 64-row tile of a batch row summed in row order, the tiles' sums then added in order, checked bit for bit against
// those sums taken here from the dqkv it wrote, for beta 0 and 1; with dqkv held in bf16 alone (its fp32 left
// untouched) the same copy and dbias; the same on 1 thread, with the compiled loops (LLMC_VEC16=0), and with them
// rounding a row at a time (LLMC_ATTENTION_BLOCK_ROUND=0, which only the compiled loops read); ragged T, padded and
// grouped heads, a single position
static void test_backward_sums_the_bias(void) {
    const AttCase cases[] = {ATT_SWITCH_CASES, {3, 128, 4, 4, 64}};
    MatmulPrecision saved = matmul_precision;
    matmul_precision = MATMUL_BF16; // (a mirror holds its tensor alone on the bf16 path only)
    for (int ci = 0; ci < NCASES(cases); ci++) {
        const AttCase* c = &cases[ci];
        size_t nq = case_qkv(c), no = case_out(c), nl = (size_t)c->B * c->T * c->NH;
        int QKV = (c->NH + 2 * c->NKV) * c->HS;
        float* dout;
        float* qkv = case_inputs(c, &dout, 31 + (unsigned)ci);
        uint16_t* qkv16 = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
        uint16_t* out16 = (uint16_t*)mallocCheck(no * sizeof(uint16_t));
        float* lse = (float*)mallocCheck(nl * sizeof(float));
        float* dqkv = (float*)mallocCheck(nq * sizeof(float));
        uint16_t* dqkv16 = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
        uint16_t* alone16 = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
        float* old = random_array((size_t)QKV, 41 + (unsigned)ci);
        float* dbias = (float*)mallocCheck((size_t)QKV * sizeof(float));
        float* want = (float*)mallocCheck((size_t)QKV * sizeof(float));
        float* got = (float*)mallocCheck((size_t)QKV * sizeof(float));
        use_kernel("blocked");
        attention_gqa_forward_bf16(out16, lse, qkv, qkv16, c->B, c->T, c->NH, c->NKV, c->HS);
        for (int beta = 0; beta <= 1; beta++) {
            // dqkv written in fp32 beside its copy
            memcpy(dbias, old, (size_t)QKV * sizeof(float));
            matmul_bf16_mirror_add(dqkv, nq, dqkv16);
            attention_gqa_backward_bf16(dqkv, dbias, (float)beta, dout, qkv16, out16, lse, c->B, c->T, c->NH, c->NKV,
                                        c->HS, 0);
            matmul_bf16_mirror_remove(dqkv);
            memcpy(want, old, (size_t)QKV * sizeof(float));
            for (int b = 0; b < c->B; b++) { // (the tiles start again at each batch row)
                bias_sum_by_chunks(want, dqkv + (size_t)b * c->T * QKV, c->T, QKV, ATT_TILE, beta || b > 0);
            }
            CHECK(memcmp(dbias, want, (size_t)QKV * sizeof(float)) == 0, "T=%d NH=%d NKV=%d HS=%d beta %d: the bias "
                  "sums differ from the tiles' sums of dqkv", c->T, c->NH, c->NKV, c->HS, beta);
            // dqkv in bf16 alone, on 2 threads and 1, with the compiled loops, rounded a row at a time
            for (int v = 0; v < 4; v++) {
                if (v >= 2) { setenv("LLMC_VEC16", "0", 1); }
                if (v == 3) { setenv("LLMC_ATTENTION_BLOCK_ROUND", "0", 1); }
                omp_set_num_threads(v == 1 ? 1 : 2);
                for (size_t i = 0; i < nq; i++) { dqkv[i] = 12345.0f; }
                memset(alone16, 0xff, nq * sizeof(uint16_t));
                memcpy(got, old, (size_t)QKV * sizeof(float));
                matmul_bf16_mirror_add(dqkv, nq, alone16);
                matmul_bf16_mirror_set_alone(dqkv, 1);
                attention_gqa_backward_bf16(dqkv, got, (float)beta, dout, qkv16, out16, lse, c->B, c->T, c->NH,
                                            c->NKV, c->HS, 0);
                matmul_bf16_mirror_remove(dqkv);
                omp_set_num_threads(2);
                unsetenv("LLMC_VEC16");
                unsetenv("LLMC_ATTENTION_BLOCK_ROUND");
                int untouched = 1;
                for (size_t i = 0; i < nq; i++) { untouched &= dqkv[i] == 12345.0f; }
                CHECK(untouched, "T=%d HS=%d beta %d variant %d: dqkv's fp32 was written while its copy holds it alone",
                      c->T, c->HS, beta, v);
                CHECK(memcmp(alone16, dqkv16, nq * sizeof(uint16_t)) == 0 &&
                      memcmp(got, dbias, (size_t)QKV * sizeof(float)) == 0,
                      "T=%d NH=%d NKV=%d HS=%d beta %d variant %d: dqkv's copy alone or the bias differ", c->T, c->NH,
                      c->NKV, c->HS, beta, v);
            }
        }
        free(qkv); free(dout); free(qkv16); free(out16); free(lse); free(dqkv); free(dqkv16); free(alone16);
        free(old); free(dbias); free(want); free(got);
    }
    matmul_precision = saved;
}

static void test_prefetch_does_not_change_bits(void) {
    const AttCase c = {2, 200, 4, 2, 64};
    check_switch_keeps_bits("LLMC_ATTENTION_PREFETCH", &c, 0);
}

// P^T written in the rowpair layout by the forward's AVX-512 softmax against the pass that lays it out after each
// block (LLMC_ATTENTION_PAIRS_FUSED=0): head sizes 16, 20 (padded), 64, 128, ragged T, grouped heads, a
// single position; the work buffers NaN before each run (a pair left unwritten is read as NaN)
static void test_fused_pairs_do_not_change_bits(void) {
    if (!vec16_enabled()) { // (only the AVX-512 loops read it)
        printf("LLMC_ATTENTION_PAIRS_FUSED: not checked (no AVX-512 loops on this CPU or with LLMC_VEC16=0)\n");
        return;
    }
    const AttCase cases[] = {ATT_SWITCH_CASES};
    for (int i = 0; i < NCASES(cases); i++) { check_switch_keeps_bits("LLMC_ATTENTION_PAIRS_FUSED", &cases[i], 1); }
}

// P^T, dS^T and dQ^T rounded a block or tile at a time against a row at a time (LLMC_ATTENTION_BLOCK_ROUND=0): head
// sizes 16, 20 (padded), 64, 128, ragged T, grouped heads, a single position
static void test_block_rounding_does_not_change_bits(void) {
    const AttCase cases[] = {ATT_SWITCH_CASES};
    for (int i = 0; i < NCASES(cases); i++) { check_switch_keeps_bits("LLMC_ATTENTION_BLOCK_ROUND", &cases[i], 0); }
}

// The trainers' -p bf16 calls (q, k, v kept in bf16, the output in bf16, dqkv written with its copy) with all of qkv
// rounded row after row first against each block rounded as it is loaded (LLMC_ATTENTION_ROUND_ROWS=0): the same
// out16, lse, qkv16, dqkv and dqkv16, bit for bit; ragged T, padded and grouped heads, a single position
static void test_rounding_rows_does_not_change_bits(void) {
    const AttCase cases[] = {ATT_SWITCH_CASES};
    for (int ci = 0; ci < NCASES(cases); ci++) {
        const AttCase* c = &cases[ci];
        size_t nq = case_qkv(c), no = case_out(c), nl = (size_t)c->B * c->T * c->NH;
        float* dout;
        float* qkv = case_inputs(c, &dout, 21 + (unsigned)ci);
        uint16_t *qkv16[2], *out16[2], *dqkv16[2];
        float *lse[2], *dqkv[2];
        use_kernel("blocked");
        for (int n = 0; n < 2; n++) {
            qkv16[n] = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
            out16[n] = (uint16_t*)mallocCheck(no * sizeof(uint16_t));
            dqkv16[n] = (uint16_t*)calloc(nq, sizeof(uint16_t));
            lse[n] = (float*)mallocCheck(nl * sizeof(float));
            dqkv[n] = (float*)mallocCheck(nq * sizeof(float));
            memset(qkv16[n], 0xff, nq * sizeof(uint16_t));
            for (size_t i = 0; i < nq; i++) { dqkv[n][i] = NAN; }
            setenv("LLMC_ATTENTION_ROUND_ROWS", n == 0 ? "1" : "0", 1);
            attention_gqa_forward_bf16(out16[n], lse[n], qkv, qkv16[n], c->B, c->T, c->NH, c->NKV, c->HS);
            matmul_bf16_mirror_add(dqkv[n], nq, dqkv16[n]);
            attention_gqa_backward_bf16(dqkv[n], NULL, 0.0f, dout, qkv16[n], out16[n], lse[n], c->B, c->T, c->NH, c->NKV, c->HS, 0);
            matmul_bf16_mirror_remove(dqkv[n]);
        }
        unsetenv("LLMC_ATTENTION_ROUND_ROWS");
        int forward_same = memcmp(qkv16[0], qkv16[1], nq * sizeof(uint16_t)) == 0 &&
                           memcmp(out16[0], out16[1], no * sizeof(uint16_t)) == 0 &&
                           memcmp(lse[0], lse[1], nl * sizeof(float)) == 0;
        int backward_same = memcmp(dqkv[0], dqkv[1], nq * sizeof(float)) == 0 &&
                            memcmp(dqkv16[0], dqkv16[1], nq * sizeof(uint16_t)) == 0;
        CHECK(forward_same, "T=%d NH=%d NKV=%d HS=%d: qkv16, out16 or lse differ with LLMC_ATTENTION_ROUND_ROWS=0",
              c->T, c->NH, c->NKV, c->HS);
        CHECK(backward_same, "T=%d NH=%d NKV=%d HS=%d: dqkv or its bf16 copy differ with LLMC_ATTENTION_ROUND_ROWS=0",
              c->T, c->NH, c->NKV, c->HS);
        for (int n = 0; n < 2; n++) { free(qkv16[n]); free(out16[n]); free(dqkv16[n]); free(lse[n]); free(dqkv[n]); }
        free(qkv); free(dout);
    }
}

// the softmax and the backward's element-wise part in AVX-512 (LLMC_VEC16, on a CPU with AVX-512) against the
// compiled loops: the same cases as above, and scores large enough that exponentials clamp
static void test_softmax16_does_not_change_bits(void) {
    if (!vec16_enabled()) {
        printf("LLMC_VEC16: not run (no AVX-512 F and BW on this CPU, or no FMA in this build: the compiled loops run)\n");
        return;
    }
    const AttCase cases[] = {ATT_SWITCH_CASES};
    for (int i = 0; i < NCASES(cases); i++) { check_switch_keeps_bits("LLMC_VEC16", &cases[i], 0); }
    const AttCase large = {1, 130, 2, 1, 64};
    input_amp = 40.0f; // (scores in the hundreds: most e^(s - m) clamp at e^-87)
    check_switch_keeps_bits("LLMC_VEC16", &large, 0);
    input_amp = 5.0f;
}

// the tiled kernel's softmax in AVX-512 (lanes 16: LLMC_VEC16) or AVX2 (lanes 8: LLMC_VEC8, with LLMC_VEC16=0 on a
// CPU with AVX-512) against the compiled loop: out and dqkv bit for bit, ragged T (the rows' tails), head sizes 16 to
// 128, grouped heads, and scores large enough that exponentials clamp
static void test_tiled_softmax_loops_do_not_change_bits(int lanes) {
    const char* name = lanes == 16 ? "LLMC_VEC16" : "LLMC_VEC8";
    if (lanes == 16 ? !vec16_enabled() : !vec8_enabled()) {
        if (lanes == 8) { printf("LLMC_VEC8: not run (no AVX2 and FMA on this CPU, or no FMA in this build)\n"); }
        return; // (test_softmax16_does_not_change_bits says why for LLMC_VEC16)
    }
    if (lanes == 8) { setenv("LLMC_VEC16", "0", 1); }
    const AttCase cases[] = {ATT_SWITCH_CASES, {1, 130, 2, 1, 64}};
    for (int i = 0; i < NCASES(cases); i++) {
        const AttCase* c = &cases[i];
        input_amp = i == NCASES(cases) - 1 ? 40.0f : 5.0f;
        float* dout;
        float* qkv = case_inputs(c, &dout, 21 + (unsigned)c->T);
        float* out[2];
        float* dqkv[2];
        for (int n = 0; n < 2; n++) {
            out[n] = (float*)mallocCheck(case_out(c) * sizeof(float));
            dqkv[n] = (float*)mallocCheck(case_qkv(c) * sizeof(float));
            setenv(name, n == 0 ? "1" : "0", 1);
            run_gqa("tiled", c, qkv, dout, out[n], dqkv[n], 0);
        }
        unsetenv(name);
        CHECK(memcmp(out[0], out[1], case_out(c) * sizeof(float)) == 0 &&
                  memcmp(dqkv[0], dqkv[1], case_qkv(c) * sizeof(float)) == 0,
              "tiled, T=%d NH=%d NKV=%d HS=%d, scores x%g: out or dqkv differ with %s=0", c->T, c->NH, c->NKV,
              c->HS, input_amp, name);
        free(qkv); free(dout);
        for (int n = 0; n < 2; n++) { free(out[n]); free(dqkv[n]); }
    }
    input_amp = 5.0f;
    if (lanes == 8) { unsetenv("LLMC_VEC16"); }
}

#if MATMUL_X86
// One block's softmax (forward: P^T, the running max and sum, the rescale) and element-wise gradient (P^T, dS^T) in
// AVX-512 against the compiled loops on the same random blocks, bit for bit, 64 blocks each, diagonal and not, at a
// scale that is not a power of two (HS = 20): a product left unfused, or a mask off by a lane, shows here where the
// whole kernel's bf16 outputs might round it away. The forward's with P^T written in the rowpair layout as it is made
// (AttShape's pairs_fused): att_layout_rowpair's bits of the compiled loop's P^T.
static void test_softmax16_blocks_match(void) {
    if (!vec16_enabled()) { return; }
    AttShape sh = att_shape(ATT_TILE, 1, 1, 20);
    AttWork sizes_only;
    memset(&sizes_only, 0, sizeof(sizes_only));
    size_t per = att_work_layout(&sizes_only, NULL, &sh, 1), sq = (size_t)ATT_TILE * ATT_TILE;
    char* buf[3] = {(char*)aligned_alloc(64, per), (char*)aligned_alloc(64, per), (char*)aligned_alloc(64, per)};
    AttWork w[3]; // the compiled loops, the AVX-512 ones, the AVX-512 ones writing the rowpair layout
    uint32_t* want_rp = (uint32_t*)aligned_alloc(64, sq / 2 * sizeof(uint32_t));
    for (int n = 0; n < 3; n++) {
        memset(buf[n], 0, per);
        att_work_layout(&w[n], buf[n], &sh, 1);
    }
    int forward_same = 1, backward_same = 1, forward_pairs = 1;
    for (int n = 0; n < 3; n++) {
        for (int q = 0; q < ATT_TILE; q++) { w[n].m[q] = -INFINITY; w[n].l[q] = 0.0f; }
    }
    for (int trial = 0; trial < 64; trial++) {
        int diag = trial % 4 == 3;
        float* s = random_array(sq, 1000 + (unsigned)trial);
        float* dp = random_array(sq, 2000 + (unsigned)trial);
        float* side = random_array(2 * ATT_TILE, 3000 + (unsigned)trial);
        for (int n = 0; n < 3; n++) {
            for (size_t i = 0; i < sq; i++) { w[n].sT[i] = 30.0f * s[i]; }
            for (size_t i = 0; i < sq / 2; i++) { w[n].p_rp[i] = 0xffc1ffc1u; } // stale: NaN pairs
        }
        att_block_softmax(&w[0], diag, sh.scale, 1);
        att_block_softmax16(&w[1], diag, sh.scale, NULL);
        att_block_softmax16(&w[2], diag, sh.scale, w[2].p_rp);
        att_layout_rowpair(want_rp, w[0].p16, ATT_TILE);
        for (int n = 1; n < 3; n++) {
            int same = memcmp(w[0].m, w[n].m, ATT_TILE * sizeof(float)) == 0 &&
                       memcmp(w[0].l, w[n].l, ATT_TILE * sizeof(float)) == 0 &&
                       memcmp(w[0].alpha, w[n].alpha, ATT_TILE * sizeof(float)) == 0;
            if (n == 1) { forward_same &= same && memcmp(w[0].p16, w[1].p16, sq * sizeof(uint16_t)) == 0; }
            else { forward_pairs &= same && memcmp(want_rp, w[2].p_rp, sq / 2 * sizeof(uint32_t)) == 0; }
        }
        for (int n = 0; n < 2; n++) {
            for (size_t i = 0; i < sq; i++) { w[n].sT[i] = 30.0f * s[i]; w[n].dpT[i] = dp[i]; }
            for (int q = 0; q < ATT_TILE; q++) { w[n].lse[q] = 10.0f * side[q]; w[n].D[q] = side[ATT_TILE + q]; }
        }
        att_block_grad(&w[0], diag, sh.scale, 1);
        att_block_grad16(&w[1], diag, sh.scale);
        backward_same &= memcmp(w[0].p16, w[1].p16, sq * sizeof(uint16_t)) == 0 &&
                         memcmp(w[0].ds16, w[1].ds16, sq * sizeof(uint16_t)) == 0;
        free(s); free(dp); free(side);
    }
    CHECK(forward_same, "the forward softmax in AVX-512: P^T, max, sum and rescale the compiled loop's bits (64 blocks)");
    CHECK(backward_same, "the backward's P^T and dS^T in AVX-512: the compiled loop's bits (64 blocks)");
    CHECK(forward_pairs, "the forward softmax in AVX-512 writing P^T's rowpair layout: the compiled loop's P^T laid out, "
          "and its max, sum and rescale (64 blocks)");
    free(buf[0]); free(buf[1]); free(buf[2]); free(want_rp);
}
#endif

// A backward that writes dqkv (accumulate 0, the trainers' call) against one that adds to a zeroed dqkv: the same bits,
// and dqkv's bf16 copy written, for both kernels, the fp32 call and the bf16-stored one, with and without the
// forward's out and lse, and under LLMC_ATTENTION_OVERWRITE=0 (zeroing, adding, then the copy in a pass of its own).
// dqkv starts as NaN, its copy as 0xffff: every element must be written.
static void test_writing_dqkv_matches_adding_to_zero(void) {
    const AttCase cases[] = {{2, 200, 4, 2, 64}, {1, 97, 2, 2, 20}};
    for (int ci = 0; ci < 2; ci++) {
        const AttCase* c = &cases[ci];
        size_t nq = case_qkv(c), no = case_out(c), nl = (size_t)c->B * c->T * c->NH;
        float* dout;
        float* qkv = case_inputs(c, &dout, 13 + (unsigned)ci);
        float* out = (float*)mallocCheck(no * sizeof(float));
        float* lse = (float*)mallocCheck(nl * sizeof(float));
        float* added = (float*)mallocCheck(nq * sizeof(float));
        float* written = (float*)mallocCheck(nq * sizeof(float));
        uint16_t* written16 = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
        uint16_t* qkv16 = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
        uint16_t* out16 = (uint16_t*)mallocCheck(no * sizeof(uint16_t));
        for (int variant = 0; variant < 5; variant++) { // blocked keep 0/1, tiled, bf16-stored, bf16-stored keep 0
            const char* kernel = variant == 2 ? "tiled" : "blocked";
            int keep = variant == 1 || variant == 3, stored = variant >= 3;
            use_kernel(kernel);
            if (stored) { attention_gqa_forward_bf16(out16, lse, qkv, qkv16, c->B, c->T, c->NH, c->NKV, c->HS); }
            else { attention_gqa_forward(out, lse, qkv, c->B, c->T, c->NH, c->NKV, c->HS); }
            for (int overwrite = 1; overwrite >= 0; overwrite--) {
                setenv("LLMC_ATTENTION_OVERWRITE", overwrite ? "1" : "0", 1);
                memset(added, 0, nq * sizeof(float));
                for (size_t i = 0; i < nq; i++) { written[i] = NAN; }
                memset(written16, 0xff, nq * sizeof(uint16_t));
                matmul_bf16_mirror_add(written, nq, written16);
                if (stored) {
                    attention_gqa_backward_bf16(added, NULL, 0.0f, dout, qkv16, out16, lse, c->B, c->T, c->NH, c->NKV, c->HS, 1);
                    attention_gqa_backward_bf16(written, NULL, 0.0f, dout, qkv16, out16, lse, c->B, c->T, c->NH, c->NKV, c->HS, 0);
                } else {
                    const float* o = keep ? out : NULL;
                    const float* l = keep ? lse : NULL;
                    attention_gqa_backward(added, dout, qkv, o, l, c->B, c->T, c->NH, c->NKV, c->HS);
                    attention_gqa_backward_into(written, dout, qkv, o, l, c->B, c->T, c->NH, c->NKV, c->HS, 0);
                }
                matmul_bf16_mirror_remove(written);
                CHECK(memcmp(added, written, nq * sizeof(float)) == 0, "T=%d HS=%d %s keep %d stored %d overwrite %d: "
                      "dqkv written differs from dqkv added to zero", c->T, c->HS, kernel, keep, stored, overwrite);
                long stale = matmul_bf16_mirror_stale_at(written16, added, 1, nq, nq);
                CHECK(stale == -1, "T=%d HS=%d %s keep %d stored %d overwrite %d: dqkv's bf16 copy is not dqkv rounded at "
                      "%ld", c->T, c->HS, kernel, keep, stored, overwrite, stale);
            }
        }
        unsetenv("LLMC_ATTENTION_OVERWRITE");
        free(qkv); free(dout); free(out); free(lse); free(added); free(written); free(written16); free(qkv16); free(out16);
    }
}

// in a child (matmul_bf16_native asks once per process): the fp32 emulation of the micro-kernel against tiled;
// exits with the number of failed checks
static void emulated_child(void* arg) {
    (void)arg;
    setenv("LLMC_BF16_NATIVE", "0", 1);
    if (matmul_bf16_native()) { _exit(100); }
    tests_failed = 0;
    check_blocked_case(&MHA_CASES[4], 0); // T=200, HS=128
    check_blocked_case(&GQA_CASES[1], 1); // T=65, NH 4 / NKV 1, HS=16
    fflush(stdout);
    _exit(tests_failed);
}

static void test_emulated_micro_kernel_matches_tiled(void) {
    char err[4096];
    int status = run_in_child(emulated_child, NULL, err, sizeof(err));
    CHECK(status == 0, "the fp32 emulation of the bf16 micro-kernel: %d checks failed (status %d) %s", status, status, err);
}

// AMX tiles (where this CPU and OS allow them): the products against the same bf16 numbers multiplied in fp32, then
// the blocked kernel on them and on vdpbf16ps against tiled, and the switch
static void test_amx_products(void) {
    if (!amx_usable()) {
        printf("AMX: not on this CPU (or not allowed by the OS): the AMX products are checked where it is\n");
        return;
    }
#if AMX_X86
    static const int shapes[][3] = {{64, 64, 32}, {64, 64, 64}, {64, 128, 32}, {48, 80, 16}, {16, 16, 16}, {80, 48, 48}};
    double worst_all = 0.0;
    size_t same_bits = 0, sums = 0;
    for (int s = 0; s < (int)(sizeof(shapes) / sizeof(shapes[0])); s++) {
        int M = shapes[s][0], N = shapes[s][1], kp = shapes[s][2];
        int lda = kp + 8, ldb = N + 16, ldc = N + 4; // strides wider than the rows: the tiles must step by them
        float* af = random_array((size_t)M * lda * 2, (unsigned)(11 + s));
        float* bf = random_array((size_t)kp * ldb * 2, (unsigned)(23 + s));
        uint32_t* a = (uint32_t*)mallocCheck((size_t)M * lda * sizeof(uint32_t));
        uint32_t* b = (uint32_t*)mallocCheck((size_t)kp * ldb * sizeof(uint32_t));
        for (size_t i = 0; i < (size_t)M * lda; i++) { a[i] = mm_bf16_pair(af[2 * i], af[2 * i + 1]); }
        for (size_t i = 0; i < (size_t)kp * ldb; i++) { b[i] = mm_bf16_pair(bf[2 * i], bf[2 * i + 1]); }
        for (int accumulate = 0; accumulate < 2; accumulate++) {
            float* c = random_array((size_t)M * ldc, (unsigned)(31 + s));
            float* ref = (float*)mallocCheck((size_t)M * ldc * sizeof(float));
            memcpy(ref, c, (size_t)M * ldc * sizeof(float));
            amx_configure_16x64();
            att_gemm_amx(c, ldc, a, lda, b, ldb, M, N, kp, accumulate);
            att_gemm_emulated(ref, ldc, a, lda, b, ldb, M, N, kp, accumulate);
            double worst = 0.0;
            int untouched = 1;
            for (int i = 0; i < M; i++) {
                for (int j = 0; j < ldc; j++) {
                    float got = c[(size_t)i * ldc + j], want = ref[(size_t)i * ldc + j];
                    if (j >= N) { // past N: left as it was
                        untouched &= memcmp(&got, &want, sizeof(got)) == 0;
                        continue;
                    }
                    double mag = accumulate ? fabs((double)want) : 0.0; // the sum of |terms| bounds the rounding
                    for (int p = 0; p < kp; p++) {
                        uint32_t ap = a[(size_t)i * lda + p], bp = b[(size_t)p * ldb + j];
                        mag += fabs((double)att_bf16_lo(ap) * att_bf16_lo(bp)) + fabs((double)att_bf16_hi(ap) * att_bf16_hi(bp));
                    }
                    double err = fabs((double)got - want) / (mag > 0.0 ? mag : 1.0);
                    same_bits += memcmp(&got, &want, sizeof(got)) == 0;
                    sums++;
                    worst = err > worst || err != err ? err : worst;
                }
            }
            CHECK(worst <= 2e-6 && untouched, "AMX products M=%d N=%d kp=%d accumulate=%d: worst error %.2e of the sum "
                  "of |terms| (> 2e-6)%s", M, N, kp, accumulate, worst, untouched ? "" : ", columns past N written");
            worst_all = worst > worst_all ? worst : worst_all;
            free(c);
            free(ref);
        }
        free(af); free(bf); free(a); free(b);
    }
    printf("AMX products against fp32 products of the same bf16 numbers: worst %.2e of the sum of |terms|, %zu of %zu "
           "sums the same bits\n", worst_all, same_bits, sums);
    for (int amx = 1; amx >= 0; amx--) {
        setenv("LLMC_ATTENTION_AMX", amx ? "1" : "0", 1);
        CHECK(att_shape(64, 1, 1, 64).amx == amx, "LLMC_ATTENTION_AMX=%d on a CPU with AMX: the shape says amx=%d", amx,
              att_shape(64, 1, 1, 64).amx);
        printf("the blocked kernel's products on %s:\n", amx ? "AMX tiles" : "AVX512-BF16 (LLMC_ATTENTION_AMX=0)");
        test_blocked_matches_tiled_cases();
    }
    unsetenv("LLMC_ATTENTION_AMX");
#endif
}

// LLMC_ATTENTION: the choice, and anything else in one error line
static void choose_flash(void* arg) {
    (void)arg;
    use_kernel("flash");
    (void)attention_kernel_chosen();
}

static void prefetch_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_ATTENTION_PREFETCH", "2", 1);
    (void)att_shape(64, 1, 1, 64);
}

static void block_round_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_ATTENTION_BLOCK_ROUND", "on", 1);
    (void)att_shape(64, 1, 1, 64);
}

static void round_rows_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_ATTENTION_ROUND_ROWS", "yes", 1);
    (void)att_shape(64, 1, 1, 64);
}

static void vec16_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_VEC16", "avx512", 1);
    (void)att_shape(64, 1, 1, 64);
}

static void triangle_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_ATTENTION_TRIANGLE", "half", 1);
    (void)att_shape(64, 1, 1, 64);
}

static void amx_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_ATTENTION_AMX", "tiles", 1);
    (void)att_shape(64, 1, 1, 64);
}

static void pairs_fused_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_ATTENTION_PAIRS_FUSED", "2", 1);
    (void)att_shape(64, 1, 1, 64);
}

static void overwrite_bad_value(void* arg) {
    (void)arg;
    setenv("LLMC_ATTENTION_OVERWRITE", "yes", 1);
    (void)attention_overwrite();
}

static void test_kernel_choice(void) {
    MatmulPrecision saved = matmul_precision;
    unsetenv("LLMC_ATTENTION");
    matmul_precision = MATMUL_FP32;
    CHECK(attention_kernel_chosen() == ATTENTION_TILED, "fp32 GEMMs choose the tiled kernel");
    matmul_precision = MATMUL_BF16;
    CHECK(attention_kernel_chosen() == ATTENTION_BLOCKED, "bf16 GEMMs choose the blocked kernel");
    use_kernel("tiled");
    CHECK(attention_kernel_chosen() == ATTENTION_TILED, "LLMC_ATTENTION=tiled under bf16 GEMMs");
    matmul_precision = MATMUL_FP32;
    use_kernel("blocked");
    CHECK(attention_kernel_chosen() == ATTENTION_BLOCKED, "LLMC_ATTENTION=blocked under fp32 GEMMs");
    matmul_precision = saved;
    expect_die("LLMC_ATTENTION=flash", choose_flash, NULL, "LLMC_ATTENTION=flash", "use tiled or blocked");
    // (the children fork before any GEMM: a child forked after one exits with the OpenMP workers' per-thread
    // buffers unreachable, which LeakSanitizer reports)
    expect_die("LLMC_ATTENTION_PREFETCH=2", prefetch_bad_value, NULL, "LLMC_ATTENTION_PREFETCH=2", "use 0 or 1");
    expect_die("LLMC_ATTENTION_PAIRS_FUSED=2", pairs_fused_bad_value, NULL, "LLMC_ATTENTION_PAIRS_FUSED=2", "use 0 or 1");
    expect_die("LLMC_ATTENTION_BLOCK_ROUND=on", block_round_bad_value, NULL, "LLMC_ATTENTION_BLOCK_ROUND=on",
               "use 0 or 1");
    expect_die("LLMC_ATTENTION_ROUND_ROWS=yes", round_rows_bad_value, NULL, "LLMC_ATTENTION_ROUND_ROWS=yes",
               "use 0 or 1");
    expect_die("LLMC_VEC16=avx512", vec16_bad_value, NULL, "LLMC_VEC16=avx512", "use 0 or 1");
    expect_die("LLMC_ATTENTION_TRIANGLE=half", triangle_bad_value, NULL, "LLMC_ATTENTION_TRIANGLE=half", "use 0 or 1");
    expect_die("LLMC_ATTENTION_AMX=tiles", amx_bad_value, NULL, "LLMC_ATTENTION_AMX=tiles", "use 0 or 1");
    expect_die("LLMC_ATTENTION_OVERWRITE=yes", overwrite_bad_value, NULL, "LLMC_ATTENTION_OVERWRITE=yes", "use 0 or 1");
}

// each call adds its causal FLOPs (2 products forward, 4 backward) and compulsory bytes to PHASE_ATTENTION
static void test_phase_account(void) {
    const AttCase c = {2, 65, 4, 2, 16};
    float* dout;
    float* qkv = case_inputs(&c, &dout, 9);
    float* out = (float*)mallocCheck(case_out(&c) * sizeof(float));
    float* dqkv = (float*)mallocCheck(case_qkv(&c) * sizeof(float));
    double pairs = (double)c.B * c.NH * c.T * (c.T + 1) / 2.0, BT = (double)c.B * c.T;
    double QKV = (double)(c.NH + 2 * c.NKV) * c.HS, C = (double)c.NH * c.HS;
    phase_time_on = 1;
    memset(&phase_account, 0, sizeof(phase_account));
    run_gqa("blocked", &c, qkv, dout, out, dqkv, 1);
    double flops = phase_account.flops[PHASE_ATTENTION], bytes = phase_account.bytes[PHASE_ATTENTION];
    CHECK(flops == pairs * 2.0 * c.HS * 6.0, "phase flops %.0f, want %.0f", flops, pairs * 2.0 * c.HS * 6.0);
    // forward: q, k, v read, out and lse written; backward: q, k, v, dout, out, lse read, dqkv written
    double want = 4.0 * BT * ((QKV + C + c.NH) + (2.0 * QKV + 2.0 * C + c.NH));
    CHECK(bytes == want, "phase bytes %.0f, want %.0f", bytes, want);
    CHECK(phase_account.seconds[PHASE_ATTENTION] > 0.0 && phase_account.depth == 0, "phase time counted, phases closed");
    phase_time_on = 0;
    free(qkv); free(dout); free(out); free(dqkv);
}

// an output or gradient with a bf16 copy (a mirror: a GEMM reads it so) gets its copy written, both kernels
static void test_bf16_copies_of_out_and_dqkv_are_written(void) {
    const AttCase c = {2, 70, 4, 2, 16};
    for (int k = 0; k < 4; k++) { // each kernel, with the copies in the kernel's stores and (k >= 2) in passes of their own
        setenv("LLMC_ATTENTION_OVERWRITE", k < 2 ? "1" : "0", 1);
        float* dout;
        float* qkv = case_inputs(&c, &dout, 11);
        float* out = (float*)mallocCheck(case_out(&c) * sizeof(float));
        float* dqkv = (float*)mallocCheck(case_qkv(&c) * sizeof(float));
        uint16_t* out16 = (uint16_t*)calloc(case_out(&c), sizeof(uint16_t));
        uint16_t* dqkv16 = (uint16_t*)calloc(case_qkv(&c), sizeof(uint16_t));
        matmul_bf16_mirror_add(out, case_out(&c), out16);
        matmul_bf16_mirror_add(dqkv, case_qkv(&c), dqkv16);
        run_gqa(GQA_KERNELS[k % 2], &c, qkv, dout, out, dqkv, 1);
        CHECK(matmul_bf16_mirror_stale_at(out16, out, 1, case_out(&c), case_out(&c)) == -1, "%s (%d): out's bf16 copy",
              GQA_KERNELS[k % 2], k);
        CHECK(matmul_bf16_mirror_stale_at(dqkv16, dqkv, 1, case_qkv(&c), case_qkv(&c)) == -1, "%s (%d): dqkv's bf16 copy",
              GQA_KERNELS[k % 2], k);
        matmul_bf16_mirror_remove(out);
        matmul_bf16_mirror_remove(dqkv);
        free(qkv); free(dout); free(out); free(dqkv); free(out16); free(dqkv16);
    }
    unsetenv("LLMC_ATTENTION_OVERWRITE");
}

// The blocked kernel keeping q, k, v in bf16 (attention_gqa_forward_bf16 / _backward_bf16, GPT-2's -p bf16
// activations) against the same kernel on fp32 alone: the forward's qkv16 is qkv rounded, its out16 the fp32 call's out
// rounded and its lse the same, bit for bit (the kernel rounds q, k, v as it reads them); the backward differs only in
// D = rowsum(dO o O), taken from the rounded O: within ATT_BF16_D_TOL of the fp32 call's, and within ATT_BF16_TOL of the
// tiled kernel's like the fp32 call; 1 thread and 2 give the same bits.
#define ATT_BF16_D_TOL 1e-2
static void check_bf16_storage_case(const AttCase* c, int gqa) {
    float* dout;
    float* qkv = case_inputs(c, &dout, (unsigned)(c->T * 3 + c->HS));
    size_t nq = case_qkv(c), no = case_out(c), nl = (size_t)c->B * c->T * c->NH;
    uint16_t* qkv16 = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
    uint16_t* qkv_rounded = (uint16_t*)mallocCheck(nq * sizeof(uint16_t));
    matmul_round_bf16(qkv_rounded, qkv, 1, nq, nq);
    float* ref_out = (float*)mallocCheck(no * sizeof(float));
    float* ref_dqkv = (float*)mallocCheck(nq * sizeof(float));
    float* out = (float*)mallocCheck(no * sizeof(float));
    float* dqkv = (float*)mallocCheck(nq * sizeof(float));
    float* lse = (float*)mallocCheck(nl * sizeof(float));
    float* lse16 = (float*)mallocCheck(nl * sizeof(float));
    uint16_t* out16 = (uint16_t*)mallocCheck(no * sizeof(uint16_t));
    uint16_t* out_rounded = (uint16_t*)mallocCheck(no * sizeof(uint16_t));
    float* dqkv16[2] = {(float*)mallocCheck(nq * sizeof(float)), (float*)mallocCheck(nq * sizeof(float))};
    if (gqa) { run_repeated_tiled(c, qkv, dout, ref_out, ref_dqkv); }
    else { run_gqa("tiled", c, qkv, dout, ref_out, ref_dqkv, 0); }
    // the fp32 call, given its out and lse
    use_kernel("blocked");
    attention_gqa_forward(out, lse, qkv, c->B, c->T, c->NH, c->NKV, c->HS);
    memset(dqkv, 0, nq * sizeof(float));
    attention_gqa_backward(dqkv, dout, qkv, out, lse, c->B, c->T, c->NH, c->NKV, c->HS);
    matmul_round_bf16(out_rounded, out, 1, no, no);
    for (int n = 0; n < 2; n++) { // on 1 thread, then 2
        omp_set_num_threads(n + 1);
        memset(qkv16, 0xff, nq * sizeof(uint16_t)); // every element must be written
        attention_gqa_forward_bf16(out16, lse16, qkv, qkv16, c->B, c->T, c->NH, c->NKV, c->HS);
        memset(dqkv16[n], 0, nq * sizeof(float));
        attention_gqa_backward_bf16(dqkv16[n], NULL, 0.0f, dout, qkv16, out16, lse16, c->B, c->T, c->NH, c->NKV, c->HS, 1);
    }
    omp_set_num_threads(2);
    CHECK(memcmp(qkv16, qkv_rounded, nq * sizeof(uint16_t)) == 0, "T=%d NH=%d NKV=%d HS=%d: the bf16 forward's qkv16 is "
          "not qkv rounded", c->T, c->NH, c->NKV, c->HS);
    CHECK(memcmp(out16, out_rounded, no * sizeof(uint16_t)) == 0 && memcmp(lse16, lse, nl * sizeof(float)) == 0,
          "T=%d NH=%d NKV=%d HS=%d: the bf16 forward's out or lse is not the fp32 call's (rounded)", c->T, c->NH, c->NKV,
          c->HS);
    CHECK(memcmp(dqkv16[0], dqkv16[1], nq * sizeof(float)) == 0, "T=%d HS=%d: the bf16 backward differs between 1 and 2 "
          "threads", c->T, c->HS);
    double e[4], d[4];
    double worst_fp32 = compare(c, out, dqkv16[1], out, dqkv, d);
    double worst_ref = compare(c, ref_out, dqkv16[1], ref_out, ref_dqkv, e);
    printf("B=%d T=%d NH=%d NKV=%d HS=%d: bf16-stored vs fp32-stored dq %.1e dk %.1e dv %.1e; vs tiled dq %.1e dk %.1e "
           "dv %.1e\n", c->B, c->T, c->NH, c->NKV, c->HS, d[1], d[2], d[3], e[1], e[2], e[3]);
    CHECK(worst_fp32 <= ATT_BF16_D_TOL, "T=%d HS=%d: the bf16-stored backward vs the fp32-stored: dq %.2e dk %.2e dv %.2e "
          "> %.0e", c->T, c->HS, d[1], d[2], d[3], ATT_BF16_D_TOL);
    CHECK(worst_ref <= ATT_BF16_TOL, "T=%d HS=%d: the bf16-stored backward vs tiled: dq %.2e dk %.2e dv %.2e > %.0e", c->T,
          c->HS, e[1], e[2], e[3], ATT_BF16_TOL);
    free(qkv); free(dout); free(qkv16); free(qkv_rounded); free(ref_out); free(ref_dqkv); free(out); free(dqkv); free(lse); free(lse16);
    free(out16); free(out_rounded); free(dqkv16[0]); free(dqkv16[1]);
}

static void test_bf16_storage_matches_fp32_storage(void) {
    for (int i = 0; i < NCASES(MHA_CASES); i++) { check_bf16_storage_case(&MHA_CASES[i], 0); }
    for (int i = 0; i < NCASES(GQA_CASES); i++) { check_bf16_storage_case(&GQA_CASES[i], 1); }
}

// ----------------------------------------------------------------------------
// --time

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

// median seconds of forward + backward over reps (after one warm-up). stored: the trainers' -p bf16 calls instead
// (q, k, v rounded into their bf16 copy by the forward, its output in bf16, dqkv written, not added to)
static double time_fwd_bwd(const char* kernel, const AttCase* c, const float* qkv, const float* dout, float* out,
                           float* dqkv, float* lse, int keep, int stored, int reps, double* fwd_median) {
    use_kernel(kernel);
    uint16_t* qkv16 = stored ? (uint16_t*)mallocCheck(case_qkv(c) * sizeof(uint16_t)) : NULL;
    uint16_t* out16 = stored ? (uint16_t*)mallocCheck(case_out(c) * sizeof(uint16_t)) : NULL;
    double t[64], f[64];
    for (int r = -1; r < reps; r++) {
        double t0 = wall_seconds();
        if (stored) { attention_gqa_forward_bf16(out16, lse, qkv, qkv16, c->B, c->T, c->NH, c->NKV, c->HS); }
        else { attention_gqa_forward(out, keep ? lse : NULL, qkv, c->B, c->T, c->NH, c->NKV, c->HS); }
        double t1 = wall_seconds();
        if (stored) { attention_gqa_backward_bf16(dqkv, NULL, 0.0f, dout, qkv16, out16, lse, c->B, c->T, c->NH, c->NKV, c->HS, 0); }
        else {
            attention_gqa_backward(dqkv, dout, qkv, keep ? out : NULL, keep ? lse : NULL, c->B, c->T, c->NH, c->NKV,
                                   c->HS);
        }
        double t2 = wall_seconds();
        if (r >= 0) { t[r] = t2 - t0; f[r] = t1 - t0; }
    }
    free(qkv16); free(out16);
    qsort(t, (size_t)reps, sizeof(double), cmp_double);
    qsort(f, (size_t)reps, sizeof(double), cmp_double);
    *fwd_median = f[reps / 2];
    return t[reps / 2];
}

// one tile's S = Q K^T and O += P V (64 x 64, HS = 64) on one thread: the micro-kernel on packed operands against
// matmul_gemm(MATMUL_BF16, ...) on the fp32 ones (which rounds and packs them per call)
static void time_tile_products(void) {
    omp_set_num_threads(1);
    const int HS = 64, n = 20000;
    AttShape sh = att_shape(64, 1, 1, HS);
    float* q = random_array(64 * HS, 1);
    float* k = random_array(64 * HS, 2);
    float* v = random_array(64 * HS, 3);
    float* p = random_array(64 * 64, 4);
    float* s = (float*)callocAligned(64 * 64, sizeof(float));
    float* o = (float*)callocAligned(64 * HS, sizeof(float));
    uint16_t* q16 = (uint16_t*)callocAligned(64 * HS, sizeof(uint16_t));
    uint16_t* x16 = (uint16_t*)callocAligned(64 * HS, sizeof(uint16_t));
    uint16_t* p16 = (uint16_t*)callocAligned(64 * 64, sizeof(uint16_t));
    uint32_t* k_dm = (uint32_t*)callocAligned(32 * HS, sizeof(uint32_t));
    uint32_t* v_rp = (uint32_t*)callocAligned(32 * HS, sizeof(uint32_t));
    att_round_block(q16, q, HS, 64, HS, HS);
    att_round_block(x16, k, HS, 64, HS, HS);
    att_layout_dmajor(k_dm, x16, HS, 0);
    att_round_block(x16, v, HS, 64, HS, HS);
    att_layout_rowpair(v_rp, x16, HS);
    for (int r = 0; r < 64; r++) { mm_round_bf16_row(p16 + r * 64, p + r * 64, 64); }
    double flop = 2.0 * 2.0 * 64 * 64 * HS;
    att_tiles_ready(&sh);
    double t0 = wall_seconds();
    for (int i = 0; i < n; i++) {
        att_gemm(&sh, s, 64, q16, HS / 2, k_dm, 64, 64, 64, HS / 2, 0, ATT_FULL);
        att_gemm(&sh, o, HS, p16, 32, v_rp, HS, 64, HS, 32, 1, ATT_FULL);
    }
    double t_micro = (wall_seconds() - t0) / n;
    t0 = wall_seconds();
    for (int i = 0; i < n / 10; i++) {
        matmul_gemm(MATMUL_BF16, 0, 1, 64, 64, HS, q, HS, k, HS, 0.0f, s, 64);
        matmul_gemm(MATMUL_BF16, 0, 0, 64, HS, 64, p, 64, v, HS, 1.0f, o, HS);
    }
    double t_gemm = (wall_seconds() - t0) / (n / 10);
    char gemm[128];
    matmul_bf16_gemm_describe(gemm, sizeof(gemm));
    printf("one tile's S = Q K^T and O += P V (64 x 64, HS 64), one thread: micro-kernel (%s) %.2f us (%.0f GFLOP/s), "
           "matmul_gemm(MATMUL_BF16) [%s] %.2f us (%.0f GFLOP/s)\n", sh.amx ? "AMX" : sh.native ? "AVX512-BF16" : "emulated",
           1e6 * t_micro, flop / t_micro / 1e9, gemm, 1e6 * t_gemm, flop / t_gemm / 1e9);
    free(q); free(k); free(v); free(p);
    free_aligned(s); free_aligned(o); free_aligned(q16); free_aligned(x16); free_aligned(p16); free_aligned(k_dm);
    free_aligned(v_rp);
}

// --time-switch: the -p bf16 calls (forward, then backward) with the switch `name` at 1 and at 0, alternating call by
// call (att_shape and vec16_enabled read the environment at each call), medians of 40 each: a switch's effect on a
// machine whose speed drifts between runs (the drift falls on both values alike)
static void time_switch(const char* name, int T) {
    int threads = 2;
    const char* env = getenv("OMP_NUM_THREADS");
    if (env != NULL && atoi(env) > 0) { threads = atoi(env); }
    omp_set_num_threads(threads);
    enum { REPS = 40 };
    AttCase c = {4, T, 12, 12, 64};
    float* dout;
    float* qkv = case_inputs(&c, &dout, 3);
    float* dqkv = (float*)callocAligned(case_qkv(&c), sizeof(float));
    float* lse = (float*)mallocCheck((size_t)c.B * c.T * c.NH * sizeof(float));
    uint16_t* qkv16 = (uint16_t*)mallocCheck(case_qkv(&c) * sizeof(uint16_t));
    uint16_t* out16 = (uint16_t*)mallocCheck(case_out(&c) * sizeof(uint16_t));
    use_kernel("blocked");
    double t[2][2][REPS]; // [switch 1, 0][forward, backward]
    for (int r = -2; r < REPS; r++) {
        for (int v = 0; v < 2; v++) {
            setenv(name, v == 0 ? "1" : "0", 1);
            double t0 = wall_seconds();
            attention_gqa_forward_bf16(out16, lse, qkv, qkv16, c.B, c.T, c.NH, c.NKV, c.HS);
            double t1 = wall_seconds();
            attention_gqa_backward_bf16(dqkv, NULL, 0.0f, dout, qkv16, out16, lse, c.B, c.T, c.NH, c.NKV, c.HS, 0);
            double t2 = wall_seconds();
            if (r >= 0) { t[v][0][r] = t1 - t0; t[v][1][r] = t2 - t1; }
        }
    }
    unsetenv(name);
    for (int v = 0; v < 2; v++) {
        for (int k = 0; k < 2; k++) { qsort(t[v][k], REPS, sizeof(double), cmp_double); }
    }
    printf("%s=1 / %s=0, B=4 T=%d NH=12 HS=64, the -p bf16 calls, %d threads, alternating call by call, medians of %d "
           "(quartiles):\n", name, name, T, threads, REPS);
    const char* part[2] = {"forward", "backward"};
    for (int k = 0; k < 2; k++) {
        printf("  %-8s %.3f / %.3f ms (%.3fx)  (%.3f-%.3f / %.3f-%.3f)\n", part[k], 1e3 * t[0][k][REPS / 2],
               1e3 * t[1][k][REPS / 2], t[1][k][REPS / 2] / t[0][k][REPS / 2], 1e3 * t[0][k][REPS / 4],
               1e3 * t[0][k][3 * REPS / 4], 1e3 * t[1][k][REPS / 4], 1e3 * t[1][k][3 * REPS / 4]);
    }
    free(qkv); free(dout); free_aligned(dqkv); free(lse); free(qkv16); free(out16);
}

static void time_attention(const int* Ts, int nT) {
    time_tile_products();
    int threads = 2;
    const char* env = getenv("OMP_NUM_THREADS");
    if (env != NULL && atoi(env) > 0) { threads = atoi(env); }
    omp_set_num_threads(threads);
    printf("fp32 GEMMs: %s; %d threads; medians of forward + backward (forward alone in brackets)\n", matmul_backend_name(),
           threads);
    for (int i = 0; i < nT; i++) {
        AttCase c = {4, Ts[i], 12, 12, 64};
        int reps = c.T >= 1024 ? 7 : 31;
        float* dout;
        float* qkv = case_inputs(&c, &dout, 3);
        float* out = (float*)mallocCheck(case_out(&c) * sizeof(float));
        float* dqkv = (float*)calloc(case_qkv(&c), sizeof(float));
        float* lse = (float*)mallocCheck((size_t)c.B * c.T * c.NH * sizeof(float));
        double flops = attention_flops(c.B, c.T, c.NH, c.HS, 6), f;
        double tt = time_fwd_bwd("tiled", &c, qkv, dout, out, dqkv, lse, 0, 0, reps, &f);
        printf("B=4 T=%d NH=12 HS=64: tiled fp32 %.2f ms [%.2f] (%.0f GFLOP/s)\n", c.T, 1e3 * tt, 1e3 * f, flops / tt / 1e9);
        double tb = time_fwd_bwd("blocked", &c, qkv, dout, out, dqkv, lse, 1, 0, reps, &f);
        printf("B=4 T=%d NH=12 HS=64: blocked bf16, out and lse kept %.2f ms [%.2f] (%.0f GFLOP/s, %.2fx tiled)\n", c.T,
               1e3 * tb, 1e3 * f, flops / tb / 1e9, tt / tb);
        double tr = time_fwd_bwd("blocked", &c, qkv, dout, out, dqkv, lse, 0, 0, reps, &f);
        printf("B=4 T=%d NH=12 HS=64: blocked bf16, recomputed %.2f ms [%.2f] (%.0f GFLOP/s, %.2fx tiled)\n", c.T,
               1e3 * tr, 1e3 * f, flops / tr / 1e9, tt / tr);
        double ts = time_fwd_bwd("blocked", &c, qkv, dout, out, dqkv, lse, 1, 1, reps, &f);
        printf("B=4 T=%d NH=12 HS=64: blocked bf16, q k v and out stored in bf16 (-p bf16's) %.2f ms [%.2f] "
               "(%.0f GFLOP/s, %.2fx tiled)\n", c.T, 1e3 * ts, 1e3 * f, flops / ts / 1e9, tt / ts);
        free(qkv); free(dout); free(out); free(dqkv); free(lse);
    }
}

int main(int argc, char** argv) {
    if (argc >= 2 && strcmp(argv[1], "--time-switch") == 0) {
        char* end = NULL;
        long T = argc == 4 ? strtol(argv[3], &end, 10) : 1024;
        if (argc < 3 || argc > 4 || strncmp(argv[2], "LLMC_", 5) != 0 || (argc == 4 && (end == argv[3] || *end != '\0')) ||
            T < 1 || T > 8192) {
            fprintf(stderr, "error: usage: %s --time-switch LLMC_NAME [T] (T 1..8192, default 1024)\n", argv[0]);
            return 1;
        }
        time_switch(argv[2], (int)T);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "--time") == 0) {
        int Ts[8] = {64, 1024}, nT = argc > 2 ? argc - 2 : 2;
        for (int i = 2; i < argc; i++) {
            char* end = NULL;
            long T = strtol(argv[i], &end, 10);
            if (i - 2 >= 8 || end == argv[i] || *end != '\0' || T < 1 || T > 8192) {
                fprintf(stderr, "error: --time takes at most 8 sequence lengths T, each 1..8192 (got %s)\n", argv[i]);
                return 1;
            }
            Ts[i - 2] = (int)T;
        }
        time_attention(Ts, nT);
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "error: usage: %s [--time [T ...] | --time-switch LLMC_NAME [T]]\n", argv[0]);
        return 1;
    }
    omp_set_num_threads(2);
    test_kernel_choice();
    test_emulated_micro_kernel_matches_tiled();
    if (!amx_usable()) { test_blocked_matches_tiled_cases(); }
    test_amx_products();
    test_thread_count_does_not_change_bits();
    test_prefetch_does_not_change_bits();
    test_fused_pairs_do_not_change_bits();
    test_triangle_does_not_change_bits();
    test_backward_sums_the_bias();
    test_block_rounding_does_not_change_bits();
    test_rounding_rows_does_not_change_bits();
    test_softmax16_does_not_change_bits();
    test_tiled_softmax_loops_do_not_change_bits(16);
    test_tiled_softmax_loops_do_not_change_bits(8);
#if MATMUL_X86
    test_softmax16_blocks_match();
#endif
    test_writing_dqkv_matches_adding_to_zero();
    test_phase_account();
    test_bf16_copies_of_out_and_dqkv_are_written();
    test_bf16_storage_matches_fp32_storage();
    unsetenv("LLMC_ATTENTION");
    return test_summary();
}
