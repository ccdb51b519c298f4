/*
dev/test/test_tensor_check.c: llmc/tensor_check.h, the comparison logic of test_gpt2cu and test_gpt2 -- comparisons
fail on corrupted inputs (one bad element, NaN, inf, nothing compared), the relative L2 error catches what a max-abs
bound over a whole tensor lets through (a tenth of the elements wrong by 2x, the small rows of a heavy-tailed tensor
like dwte), the exact-zero ranges (wte's padded rows), honest bf16- and fp32-sized noise passes the BF16 and FP32
bounds, the exit codes, the per-precision tolerances.
*/
#include "../../llmc/tensor_check.h"
#include "test_common.h"

// ----------------------------------------------------------------------------
// inputs

// deterministic uniform values in [-1, 1)
static float uniform_pm1(uint32_t* state) {
    *state = *state * 1664525u + 1013904223u;
    return (float)((*state >> 8) & 0xFFFFFF) / (float)(1 << 23) - 1.0f;
}

// n deterministic uniform values in [-1, 1) from seed (malloc'd)
static float* uniform_tensor(size_t n, uint32_t seed) {
    float* x = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { x[i] = uniform_pm1(&seed); }
    return x;
}

// ref * (1 + rel * u), u uniform in [-1, 1): the per-element noise of an honest lower-precision computation
// (rel = 2^-8: bf16 rounding of the result and of its inputs, about 2.3e-3 relative L2 error)
static void add_relative_noise(float* got, const float* ref, size_t n, float rel, uint32_t seed) {
    for (size_t i = 0; i < n; i++) { got[i] = ref[i] * (1.0f + rel * uniform_pm1(&seed)); }
}

// a dwte-like (rows, C) tensor: `seen` rows of size ~1 (the tokens of the batch: encoder and classifier),
// the other rows of size ~1e-3 (the classifier alone), and the last `pad` rows exactly zero
typedef struct {
    size_t rows, C, seen, pad;
    float* ref;
    unsigned char* unseen;  // rows of the classifier alone (not the padded ones)
} HeavyTail;

static HeavyTail heavy_tail_make(size_t rows, size_t C, size_t seen, size_t pad) {
    HeavyTail h = {rows, C, seen, pad, (float*)malloc(rows * C * sizeof(float)), (unsigned char*)malloc(rows)};
    uint32_t s = 7;
    for (size_t r = 0; r < rows; r++) {
        float scale = r < seen ? 1.0f : 1e-3f;
        h.unseen[r] = r >= seen && r < rows - pad;
        for (size_t c = 0; c < C; c++) { h.ref[r * C + c] = r < rows - pad ? scale * uniform_pm1(&s) : 0.0f; }
    }
    return h;
}

// the TensorCheck of a dwte row of test_gpt2cu: whole tensor (max abs, rel L2) plus the exact-zero padded rows
static TensorCheck check_like_dwte(const HeavyTail* h, const float* got, const TestTolerances* t) {
    TensorCheck c = tensor_check_l2(got, h->ref, h->rows * h->C, t->grad_rtol, 0.0, t->grad_l2);
    tensor_check_zero(&c, got, (h->rows - h->pad) * h->C, h->rows * h->C);
    return c;
}

static TensorCheck check_unseen_rows(const HeavyTail* h, const float* got, const TestTolerances* t) {
    return tensor_check_rows(got, h->ref, h->C, h->unseen, h->rows, t->grad_rtol, 0.0, t->grad_l2);
}

// what check_table_row (test_gpt2's table) or check_table_row_l2 (test_gpt2cu's) prints for a check
static void row_text(char* buf, size_t cap, const TensorCheck* c, int l2_columns) {
    FILE* f = tmpfile();
    CheckReport r = {0, 0};
    if (l2_columns) {
        check_table_row_l2(f, &r, "t", c);
    } else {
        check_table_row(f, &r, "t", c);
    }
    rewind(f);
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
}

// ----------------------------------------------------------------------------
// the max-abs check, the table, the exit codes

static void test_tensor_check_catches_corruption(void) {
    const size_t n = 1000;
    float* ref = (float*)malloc(n * sizeof(float));
    float* got = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { ref[i] = sinf((float)i); got[i] = ref[i] + 1e-7f; }
    TensorCheck c = tensor_check(got, ref, n, 1e-5, 0.0);
    CHECK(c.ok, "a close tensor passes");
    got[500] += 0.01f;
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    CHECK(!c.ok && c.worst_index == 500, "one corrupted element fails and is located");
    got[500] = ref[500];
    got[7] = NAN;
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    CHECK(!c.ok && c.num_nonfinite == 1, "a NaN fails (it never compares greater than a tolerance)");
    c = tensor_check_l2(got, ref, n, 1e9, 0.0, 1e9);
    CHECK(!c.ok && c.num_nonfinite == 1, "a NaN fails the L2 check however loose its bounds");
    got[7] = INFINITY;
    c = tensor_check(got, ref, n, 1e9, 0.0);
    CHECK(!c.ok, "an inf fails even with a huge tolerance");
    c = tensor_check(got, ref, 0, 1.0, 1.0);
    CHECK(!c.ok, "an empty comparison is not a pass");

    FILE* devnull = fopen("/dev/null", "w");
    CheckReport r = {0, 0};
    CHECK(check_report_exit_code(&r) == 1, "no checks at all -> exit code 1");
    got[7] = ref[7];
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    check_table_row(devnull, &r, "good", &c);
    CHECK(check_report_exit_code(&r) == 0, "all checks passed -> exit code 0");
    got[3] *= 2.0f;
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    check_table_row(devnull, &r, "bad", &c);
    CHECK(check_report_exit_code(&r) == 1 && r.failures == 1, "one failed check -> exit code 1");
    // bitwise resume check catches a 1-ulp difference
    CheckReport rb = {0, 0};
    float a[3] = {1.0f, 2.0f, 3.0f}, b[3] = {1.0f, 2.0f, 3.0f};
    check_bitwise(devnull, &rb, "same", a, b, 3);
    b[2] = bits_float(float_bits(3.0f) + 1);
    check_bitwise(devnull, &rb, "ulp", a, b, 3);
    CHECK(rb.checks == 2 && rb.failures == 1, "bitwise check passes identical and fails 1-ulp arrays");
    CHECK(check_scalar(devnull, &rb, "loss", 5.0f, 5.0f + 1e-3f, 1e-4) == 0, "a loss off by 1e-3 fails a 1e-4 tolerance");
    fclose(devnull);
    free(ref);
    free(got);
}

// ----------------------------------------------------------------------------
// the relative L2 error and the exact zeros

static void test_relative_l2_error_is_measured(void) {
    float ref[4] = {3.0f, -4.0f, 0.0f, 0.0f}, got[4] = {3.3f, -4.4f, 0.0f, 0.0f};  // got = 1.1 ref
    TensorCheck c = tensor_check_l2(got, ref, 4, 1.0, 0.0, 0.2);
    CHECK(fabs(c.rel_l2 - 0.1) < 1e-6 && c.ok, "||1.1 ref - ref|| / ||ref|| = 0.1 (got %g), within a 0.2 bound", c.rel_l2);
    c = tensor_check_l2(got, ref, 4, 1.0, 0.0, 0.05);
    CHECK(!c.ok && c.max_abs_diff <= c.tolerance, "the same tensor fails a 0.05 bound on its relative L2 error alone");
    c = tensor_check(got, ref, 4, 1.0, 0.0);
    CHECK(c.ok && fabs(c.rel_l2 - 0.1) < 1e-6 && c.rel_l2_bound == 0.0, "tensor_check reports the L2 error and does not hold it");
    float zeros[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    c = tensor_check_l2(zeros, zeros, 4, 0.0, 0.0, 1e-3);
    CHECK(c.ok && c.rel_l2 == 0.0, "an all-zero reference matched exactly passes");
    c = tensor_check_l2(got, zeros, 4, 1e9, 1e9, 1e9);
    CHECK(!c.ok && isinf(c.rel_l2), "values where the reference is all zero have an infinite relative error");
}

static void test_exact_zero_ranges(void) {
    float ref[6] = {1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f}, got[6] = {1.0f, 2.0f, 3.0f, 0.0f, -0.0f, 0.0f};
    TensorCheck c = tensor_check_l2(got, ref, 6, 1e-6, 0.0, 1e-6);
    tensor_check_zero(&c, got, 3, 6);
    CHECK(c.ok && c.num_nonzero == 0, "+0 and -0 in a must-be-zero range pass");
    got[5] = 1e-30f;
    c = tensor_check_l2(got, ref, 6, 1e-6, 0.0, 1e-6);
    CHECK(c.ok, "a denormal-sized value passes the max-abs and L2 checks");
    tensor_check_zero(&c, got, 3, 6);
    CHECK(!c.ok && c.num_nonzero == 1, "but not the exact-zero check");
    got[5] = NAN;
    TensorCheck z;
    tensor_check_begin(&z);
    tensor_check_zero(&z, got, 3, 6);
    CHECK(z.num_nonzero == 1, "a NaN in a must-be-zero range is not a zero");
    char text[512];
    got[5] = 1.0f;
    c = tensor_check_l2(got, ref, 6, 1e-6, 0.0, 1e-6);
    tensor_check_zero(&c, got, 3, 6);
    row_text(text, sizeof(text), &c, 1);
    CHECK(strstr(text, "| FAIL |") && strstr(text, "1 nonzero values where exact zeros are required") &&
          strstr(text, "over bound 1.0e-06") && strstr(text, "max abs diff over tolerance (element 5)"),
          "the row says what failed: %s", text);
}

static void test_table_rows(void) {
    float ref[2] = {1.0f, -2.0f}, got[2] = {1.0f, -2.0f};
    TensorCheck c = tensor_check_l2(got, ref, 2, 1e-6, 0.0, 1e-3);
    char text[512];
    row_text(text, sizeof(text), &c, 0);
    CHECK(strcmp(text, "| t            |  0.000000e+00 |  2.000000e+00 |  2.000000e-06 | ok   |\n") == 0,
          "test_gpt2's rows keep their five columns, the verdict last: %s", text);
    row_text(text, sizeof(text), &c, 1);
    CHECK(strcmp(text, "| t            |  0.000000e+00 |  2.000000e+00 |  2.000000e-06 |  0.000e+00 |  1.0e-03 | ok   |\n") == 0,
          "test_gpt2cu's rows add the relative L2 error and its bound before the verdict: %s", text);
    c = tensor_check(got, ref, 2, 1e-6, 0.0);
    row_text(text, sizeof(text), &c, 1);
    CHECK(strstr(text, "|        - | ok   |") != NULL, "a row without an L2 bound shows -: %s", text);
    FILE* devnull = fopen("/dev/null", "w");
    CheckReport r = {0, 0};
    CHECK(check_scalar_l2(devnull, &r, "loss", 5.0f, 5.0f + 1e-3f, 1e-4) == 0 && r.failures == 1,
          "a loss off by 1e-3 fails a 1e-4 tolerance in the wide table too");
    fclose(devnull);
}

// ----------------------------------------------------------------------------
// the BF16 and FP32 bounds against planted corruptions

static void test_bf16_bounds_catch_a_tenth_wrong_by_2x(void) {
    const size_t n = 100000;
    TestTolerances t = gpu_tolerances(1);
    float* ref = uniform_tensor(n, 3);
    float* got = (float*)malloc(n * sizeof(float));
    ref[12345] = 20.0f;  // one outlier sets max|ref|: the old rule's tolerance (0.1 x 20 = 2) exceeds every other value
    add_relative_noise(got, ref, n, 1.0f / 256.0f, 11);
    TensorCheck c = tensor_check_l2(got, ref, n, t.grad_rtol, 0.0, t.grad_l2);
    CHECK(c.ok && c.rel_l2 < 0.1 * t.grad_l2, "bf16-sized noise (rel L2 %.1e) passes the BF16 bound %.0e", c.rel_l2, t.grad_l2);
    for (size_t i = 0; i < n; i += 10) { got[i] = 2.0f * ref[i]; }
    TensorCheck old = tensor_check(got, ref, n, t.grad_rtol, 0.0);
    c = tensor_check_l2(got, ref, n, t.grad_rtol, 0.0, t.grad_l2);
    CHECK(old.ok, "10 %% of the elements wrong by 2x pass a max-abs bound of 0.1 x max|ref| (the old BF16 check)");
    CHECK(!c.ok && c.rel_l2 > 5.0 * t.grad_l2, "and fail the relative L2 bound (rel L2 %.2f)", c.rel_l2);
    // a uniform scale error: twice the bound fails, half of it passes
    for (size_t i = 0; i < n; i++) { got[i] = ref[i] * (float)(1.0 + 2.0 * t.grad_l2); }
    CHECK(!tensor_check_l2(got, ref, n, t.grad_rtol, 0.0, t.grad_l2).ok, "every element off by twice the L2 bound fails");
    for (size_t i = 0; i < n; i++) { got[i] = ref[i] * (float)(1.0 + 0.5 * t.grad_l2); }
    CHECK(tensor_check_l2(got, ref, n, t.grad_rtol, 0.0, t.grad_l2).ok, "every element off by half the L2 bound passes");
    // the logits bound too
    add_relative_noise(got, ref, n, 1.0f / 256.0f, 5);
    for (size_t i = 0; i < n; i += 10) { got[i] = 2.0f * ref[i]; }
    CHECK(!tensor_check_l2(got, ref, n, t.logits_rtol, t.logits_atol, t.logits_l2).ok, "the logits' bound fails 10 %% wrong by 2x");
    free(ref);
    free(got);
}

static void test_heavy_tail_rows_are_checked_on_their_own(void) {
    // 2000 rows of 64: 20 big rows, 1852 small ones (~1e-4 of the energy, like dwte's classifier-only rows), 128 padded
    HeavyTail h = heavy_tail_make(2000, 64, 20, 128);
    const size_t n = h.rows * h.C;
    float* got = (float*)malloc(n * sizeof(float));
    for (int bf16 = 0; bf16 <= 1; bf16++) {
        TestTolerances t = gpu_tolerances(bf16);
        const char* p = bf16 ? "BF16" : "FP32";
        add_relative_noise(got, h.ref, n, bf16 ? 1.0f / 256.0f : 1e-6f, 13);
        CHECK(check_like_dwte(&h, got, &t).ok && check_unseen_rows(&h, got, &t).ok, "%s: honest noise passes both rows", p);
        // every small row wrong by 2x: a tiny share of the whole tensor's energy
        for (size_t r = 0; r < h.rows; r++) {
            if (!h.unseen[r]) { continue; }
            for (size_t k = 0; k < h.C; k++) { got[r * h.C + k] = 2.0f * h.ref[r * h.C + k]; }
        }
        TensorCheck whole = check_like_dwte(&h, got, &t), rows = check_unseen_rows(&h, got, &t);
        CHECK(bf16 ? whole.ok : !whole.ok, "%s: 93 %% of the elements wrong by 2x %s the whole-tensor check (rel L2 %.1e)", p,
              bf16 ? "pass" : "fail", whole.rel_l2);
        CHECK(!rows.ok && rows.rel_l2 > 0.9, "%s: the same rows checked on their own fail (rel L2 %.2f)", p, rows.rel_l2);
        CHECK(rows.worst_index >= h.seen * h.C && rows.worst_index < (h.rows - h.pad) * h.C,
              "%s: the rows check locates its worst element in the whole tensor", p);
        // a nonzero value in a padded row
        add_relative_noise(got, h.ref, n, bf16 ? 1.0f / 256.0f : 1e-6f, 13);
        got[(h.rows - 1) * h.C + 5] = 1e-6f;
        whole = check_like_dwte(&h, got, &t);
        CHECK(!whole.ok && whole.num_nonzero == 1 && whole.max_abs_diff <= whole.tolerance,
              "%s: one padded element at 1e-6 fails the exact-zero check alone", p);
        got[(h.rows - 1) * h.C + 5] = 0.0f;
        // a NaN among the small rows
        got[(h.seen + 3) * h.C] = NAN;
        CHECK(!check_unseen_rows(&h, got, &t).ok && !check_like_dwte(&h, got, &t).ok, "%s: a NaN in a small row fails both", p);
    }
    free(got);
    free(h.ref);
    free(h.unseen);
}

static void test_fp32_bound_catches_tf32_sized_errors(void) {
    const size_t n = 100000;
    TestTolerances t = gpu_tolerances(0);
    float* ref = uniform_tensor(n, 17);
    float* got = (float*)malloc(n * sizeof(float));
    add_relative_noise(got, ref, n, 1e-6f, 19);  // a few ulps of float32 per element
    TensorCheck c = tensor_check_l2(got, ref, n, t.grad_rtol, 0.0, t.grad_l2);
    CHECK(c.ok, "float32-sized noise (rel L2 %.1e) passes the FP32 bound %.0e", c.rel_l2, t.grad_l2);
    add_relative_noise(got, ref, n, 1.0f / 1024.0f, 19);  // TF32: 10 explicit mantissa bits
    c = tensor_check_l2(got, ref, n, t.grad_rtol, 0.0, t.grad_l2);
    CHECK(!c.ok && c.max_abs_diff <= c.tolerance, "TF32-sized noise (rel L2 %.1e) fails the FP32 L2 bound but not its max-abs one",
          c.rel_l2);
    free(ref);
    free(got);
}

static void test_tolerance_tables(void) {
    GpuTolerances f32 = gpu_tolerances(0), b16 = gpu_tolerances(1);
    CHECK(f32.logits_rtol < b16.logits_rtol && f32.loss_atol < b16.loss_atol && f32.grad_rtol < b16.grad_rtol &&
          f32.step_loss_atol < b16.step_loss_atol && f32.grad_l2 < b16.grad_l2 && f32.logits_l2 < b16.logits_l2,
          "FP32 tolerances are tighter than BF16 for every check");
    CHECK(b16.grad_rtol <= 0.1 && b16.logits_rtol <= 0.02, "BF16 tolerances stay per tensor and relative, not a blanket");
    // a tenth of a tensor's elements wrong by 2x has a relative L2 error of about sqrt(0.1) = 0.32
    CHECK(b16.grad_l2 > 0.0 && b16.logits_l2 > 0.0 && b16.grad_l2 * 5.0 < 0.32 && b16.logits_l2 * 5.0 < 0.32,
          "the BF16 L2 bounds are checked and at least 5x below a tenth wrong by 2x");
    TestTolerances c32 = cpu_tolerances(0), c16 = cpu_tolerances(1);
    CHECK(c32.grad_l2 > 0.0 && c32.grad_l2 <= f32.grad_l2 && c16.grad_l2 == b16.grad_l2, "the CPU table has the same L2 bounds");
}

int main(void) {
    test_tensor_check_catches_corruption();
    test_relative_l2_error_is_measured();
    test_exact_zero_ranges();
    test_table_rows();
    test_bf16_bounds_catch_a_tenth_wrong_by_2x();
    test_heavy_tail_rows_are_checked_on_their_own();
    test_fp32_bound_catches_tf32_sized_errors();
    test_tolerance_tables();
    return test_summary();
}
