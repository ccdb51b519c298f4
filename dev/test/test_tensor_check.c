/*
dev/test/test_tensor_check.c: llmc/tensor_check.h, test_gpt2cu's comparison logic -- comparisons fail on
corrupted inputs (one bad element, NaN, inf, nothing compared), the exit codes, the per-precision tolerances.
*/
#include "../../llmc/tensor_check.h"
#include "test_common.h"

// ----------------------------------------------------------------------------
// test_gpt2cu's comparison logic

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

    GpuTolerances f32 = gpu_tolerances(0), b16 = gpu_tolerances(1);
    CHECK(f32.logits_rtol < b16.logits_rtol && f32.loss_atol < b16.loss_atol && f32.grad_rtol < b16.grad_rtol &&
          f32.step_loss_atol < b16.step_loss_atol, "FP32 tolerances are tighter than BF16 for every check");
    CHECK(b16.grad_rtol <= 0.1 && b16.logits_rtol <= 0.02, "BF16 tolerances stay per tensor and relative, not a blanket");
}

int main(void) {
    test_tensor_check_catches_corruption();
    return test_summary();
}
