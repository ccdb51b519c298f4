/*
llmc/tensor_check.h: the comparison and reporting logic of both test programs (test_gpt2.c and
test_gpt2.cu), in plain C so that the CPU tests (dev/test/test_cuda_host.c) check it with
corrupted inputs: a test that cannot fail is worse than none. Each program keeps its own tolerances.

    debug_state_read(d, path, cfg, num_parameters)    the reference tensors (llmc/debug_state.h)
    tensor_check(got, ref, n, rtol, atol)             max |got - ref| <= atol + rtol * max|ref|, all finite
    check_table_row(report, name, check)              prints one table row, counts the result
    check_report_exit_code(report)                    0 only if something was checked and nothing failed
    gpu_tolerances(is_bf16)                           per-tensor tolerances, tighter in FP32 than in BF16

Tolerances are relative to the largest reference value of each tensor, so one rule fits tensors
of very different scales. FP32 builds run the test with true fp32 GEMMs (TF32 off).
*/
#ifndef LLMC_TENSOR_CHECK_H
#define LLMC_TENSOR_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#include "model_config.h"
#include "debug_state.h"

// ----------------------------------------------------------------------------
// comparing tensors

typedef struct {
    double max_abs_diff;
    double max_abs_ref;
    double tolerance;
    size_t worst_index;
    size_t num_nonfinite;  // NaN or inf in `got` (or in `ref`)
    int ok;
} TensorCheck;

static inline TensorCheck tensor_check(const float* got, const float* ref, size_t n, double rtol, double atol) {
    TensorCheck c;
    memset(&c, 0, sizeof(c));
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)ref[i]);
        if (r > c.max_abs_ref) { c.max_abs_ref = r; }
        if (!isfinite(got[i]) || !isfinite(ref[i])) {
            c.num_nonfinite++;
            continue;
        }
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > c.max_abs_diff) {
            c.max_abs_diff = d;
            c.worst_index = i;
        }
    }
    c.tolerance = atol + rtol * c.max_abs_ref;
    c.ok = n > 0 && c.num_nonfinite == 0 && c.max_abs_diff <= c.tolerance;
    return c;
}

typedef struct {
    int checks;
    int failures;
} CheckReport;

static inline void check_table_header(FILE* out) {
    fprintf(out, "| %-12s | %13s | %13s | %13s | %-4s |\n", "tensor", "max abs diff", "max |ref|", "tolerance", "ok");
    fprintf(out, "|--------------|---------------|---------------|---------------|------|\n");
}

static inline int check_table_row(FILE* out, CheckReport* r, const char* name, const TensorCheck* c) {
    r->checks++;
    if (!c->ok) { r->failures++; }
    fprintf(out, "| %-12s | %13.6e | %13.6e | %13.6e | %-4s |", name, c->max_abs_diff, c->max_abs_ref, c->tolerance,
            c->ok ? "ok" : "FAIL");
    if (c->num_nonfinite > 0) { fprintf(out, " %zu non-finite values", c->num_nonfinite); }
    fprintf(out, "\n");
    return c->ok;
}

// a scalar check (losses): |got - ref| <= atol, got finite
static inline int check_scalar(FILE* out, CheckReport* r, const char* name, float got, float ref, double atol) {
    TensorCheck c = tensor_check(&got, &ref, 1, 0.0, atol);
    return check_table_row(out, r, name, &c);
}

// exact equality of two float arrays (bit patterns): resume must continue bit-identically
static inline int check_bitwise(FILE* out, CheckReport* r, const char* name, const float* a, const float* b, size_t n) {
    r->checks++;
    size_t first = n;
    for (size_t i = 0; i < n; i++) {
        if (memcmp(&a[i], &b[i], sizeof(float)) != 0) { first = i; break; }
    }
    int ok = n > 0 && first == n;
    if (!ok) { r->failures++; }
    if (first < n) {
        fprintf(out, "| %-12s | bitwise: FAIL at element %zu (%.9g vs %.9g)\n", name, first, a[first], b[first]);
    } else {
        fprintf(out, "| %-12s | bitwise: %s (%zu values)\n", name, ok ? "ok" : "FAIL (nothing compared)", n);
    }
    return ok;
}

static inline void check_report_summary(FILE* out, const CheckReport* r) {
    fprintf(out, "%d passed, %d failed\n", r->checks - r->failures, r->failures);
}

// 0 only if at least one check ran and none failed
static inline int check_report_exit_code(const CheckReport* r) {
    return (r->checks > 0 && r->failures == 0) ? 0 : 1;
}

typedef struct {
    double logits_rtol;      // x max|ref logits|
    double loss_atol;
    double grad_rtol;        // x max|ref| of each gradient tensor
    double step_loss_atol;   // each of the optimizer steps' losses
} GpuTolerances;

static inline GpuTolerances gpu_tolerances(int is_bf16) {
    GpuTolerances t;
    if (is_bf16) {
        t.logits_rtol = 2e-2;
        t.loss_atol = 2e-2;
        t.grad_rtol = 1e-1;
        t.step_loss_atol = 5e-2;
    } else {
        t.logits_rtol = 1e-5;
        t.loss_atol = 1e-4;
        t.grad_rtol = 2e-3;
        t.step_loss_atol = 2e-4;
    }
    return t;
}

#endif // LLMC_TENSOR_CHECK_H
