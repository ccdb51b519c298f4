/*
llmc/tensor_check.h: the comparison and reporting logic of both test programs (test_gpt2.c and
test_gpt2.cu), in plain C so that the CPU tests (dev/test/test_tensor_check.c) check it with
corrupted inputs: a test that cannot fail is worse than none. Each program has its own tolerance table.

    debug_state_read(d, path, cfg, num_parameters)    the reference tensors (llmc/debug_state.h)
    tensor_check(got, ref, n, rtol, atol)             max |got - ref| <= atol + rtol * max|ref|, all finite
    check_table_row(report, name, check)              prints one table row, counts the result
    check_report_exit_code(report)                    0 only if something was checked and nothing failed
    cpu_tolerances(is_bf16), gpu_tolerances(is_bf16)  per-tensor tolerances, tighter in FP32 than in BF16
    step_loss_tolerance(d, step, tol)                 the tolerance of optimizer step `step`'s loss

Tolerances are relative to the largest reference value of each tensor, so one rule fits tensors
of very different scales. FP32 builds run the test with true fp32 GEMMs (TF32 off).

Optimizer-step losses get a tolerance derived from the debug state itself, not a fixed one.
AdamW divides each gradient by its own running RMS, so gradients at the float32 noise floor
(|g| around eps, where a different summation order changes them by 100 %) become updates of
size lr, and the losses of later steps move by an amount that depends on the batch, the BLAS
and the CPU (d12, B=4, T=64 on the val shard: 1.9e-4 at step 3 with OpenBLAS on a Xeon,
below 1e-5 at steps 0..2). train_gpt2.py measures that noise for each file: it reruns its
reference steps in float64 and stores loss_noise[i] = |loss_fp32[i] - loss_fp64[i]|, the
distance of one correct float32 run from exact arithmetic. Another correct float32 run (ours)
can be as far from exact, so the two can differ by up to about 2x the noise, and the noise of
one step is a single sample of a quantity that grows along the trajectory. Hence

    tol[i] = STEP_LOSS_ATOL + STEP_LOSS_NOISE_MULTIPLE * max(loss_noise[0..i]),
             at most STEP_LOSS_MAX_RTOL * |losses[i]|

The running max keeps one lucky small sample from tightening a later step; the multiple (10)
covers the factor 2 and the sample-to-sample spread (on d12 our trainer differs from the
reference by at most 1.5x the noise of the same step; tests/test_debug_state_tolerances.py has
the numbers); the absolute floor 1e-5 is the tolerance of the initial loss, for steps whose
float64 rerun happens to agree to the last bits; the cap (0.1 % of the loss) guarantees that a
1 % wrong step loss fails whatever the file says. Files without the noise section use the
fixed step_loss_atol of the precision's table (1e-4 CPU FP32, 2e-4 GPU FP32). In BF16 no step
tolerance is below step_loss_atol: bf16 rounding of the GEMM inputs, not float32 noise,
dominates there.
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
    double logits_atol;
    double loss_atol;
    double grad_rtol;        // x max|ref| of each gradient tensor
    double step_loss_atol;   // step losses of files without the noise section; in BF16 also the least step tolerance
    int is_bf16;
} TestTolerances;
typedef TestTolerances GpuTolerances;

// test_gpt2.cu's: FP32 builds use true fp32 GEMMs (TF32 off); BF16 builds keep activations in bf16
static inline TestTolerances gpu_tolerances(int is_bf16) {
    TestTolerances t;
    t.is_bf16 = is_bf16;
    t.logits_atol = 0.0;
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

// test_gpt2.c's: fp32 runs the CPU trainer in fp32 throughout; with -p bf16 its GEMMs round their
// inputs to bf16 (fp32 sums, fp32 activations), which the GPU's BF16 table covers
static inline TestTolerances cpu_tolerances(int is_bf16) {
    if (is_bf16) { return gpu_tolerances(1); }
    TestTolerances t;
    t.is_bf16 = 0;
    t.logits_rtol = 0.0;
    t.logits_atol = 1e-4;
    t.loss_atol = 1e-5;
    t.grad_rtol = 1e-3;
    t.step_loss_atol = 1e-4;
    return t;
}

// the derived step-loss rule (see the top of this file)
#define STEP_LOSS_NOISE_MULTIPLE 10.0
#define STEP_LOSS_ATOL 1e-5
#define STEP_LOSS_MAX_RTOL 1e-3

static inline double step_loss_tolerance(const DebugState* d, int step, const TestTolerances* t) {
    if (!d->has_loss_noise) { return t->step_loss_atol; }
    double noise = 0.0;
    for (int i = 0; i <= step && i < d->nsteps; i++) {
        if (d->loss_noise[i] > noise) { noise = d->loss_noise[i]; }
    }
    double tol = STEP_LOSS_ATOL + STEP_LOSS_NOISE_MULTIPLE * noise;
    double cap = STEP_LOSS_MAX_RTOL * fabs((double)d->losses[step]);
    if (tol > cap) { tol = cap; }
    if (t->is_bf16 && tol < t->step_loss_atol) { tol = t->step_loss_atol; }
    return tol;
}

// one line saying which step-loss rule a run uses
static inline void step_loss_rule_print(FILE* out, const DebugState* d, const TestTolerances* t) {
    if (d->has_loss_noise) {
        fprintf(out, "step losses: tolerance %g + %g x running max of the reference's float32 noise, at most %g x loss%s\n",
                STEP_LOSS_ATOL, STEP_LOSS_NOISE_MULTIPLE, STEP_LOSS_MAX_RTOL,
                t->is_bf16 ? ", at least the BF16 table's step tolerance" : "");
    } else {
        fprintf(out, "step losses: the debug state has no noise section (written before it existed): fixed tolerance %g; "
                     "rewrite it with python train_gpt2.py --write_tensors 1 for the derived rule\n", t->step_loss_atol);
    }
}

#endif // LLMC_TENSOR_CHECK_H
