/*
llmc/tensor_check.h: the comparison and reporting logic of both test programs (test_gpt2.c and
test_gpt2.cu), in plain C so that the CPU tests (dev/test/test_tensor_check.c) check it with
corrupted inputs: a test that cannot fail is worse than none. Each program has its own tolerance table.

    gpt2_debug_state_read(d, path, cfg, num_parameters)   the reference tensors (llmc/gpt2.h, llmc/debug_state.h)
    tensor_check(got, ref, n, rtol, atol)             max |got - ref| <= atol + rtol * max|ref|, all finite
                                                      (reports the relative L2 error without holding it)
    tensor_check_l2(got, ref, n, rtol, atol, l2)      the same, and ||got - ref|| / ||ref|| <= l2
    tensor_check_rows(got, ref, row_len, keep, ...)   tensor_check_l2 over the kept rows of a matrix only
    tensor_check_zero(check, got, lo, hi)             got[lo..hi) exactly zero, or the check fails
    check_table_header(out), check_table_row(out, report, name, check), check_scalar(...)
                                                      test_gpt2's table: one row per check, counted in report
    check_table_header_l2, check_table_row_l2, check_scalar_l2
                                                      test_gpt2cu's: the same with the relative L2 columns
    check_report_exit_code(report)                    0 only if something was checked and nothing failed
    cpu_tolerances(is_bf16), gpu_tolerances(is_bf16)  per-tensor tolerances, tighter in FP32 than in BF16
    step_loss_tolerance(d, step, tol)                 the tolerance of optimizer step `step`'s loss

A table row: | name | max abs diff | max |ref| | tolerance | ok |, or with the _l2 functions
| name | max abs diff | max |ref| | tolerance | rel L2 err | L2 bound | ok |; after it, what failed.
FP32 builds run the test with true fp32 GEMMs (TF32 off).

Two bounds per tensor, both relative to the tensor itself so that one rule fits tensors of very
different scales:
- max |got - ref| <= rtol * max|ref| catches one wild element, but over a whole tensor it is blind to
  most of it: every element below rtol * max|ref| may be wrong by 100 % and pass. In BF16 (rtol 0.1)
  that is nearly all of a heavy-tailed tensor like dwte.
- the relative L2 error ||got - ref|| / ||ref|| weighs every element by its size: a tenth of the
  elements wrong by 2x gives about sqrt(0.1) = 0.32, a uniform scale error s gives |s - 1|. (A cosine
  bound would miss the scale error, and the L2 error bounds it: cos >= sqrt(1 - rel_l2^2).)
The L2 error still cannot see a part of a tensor that holds a tiny share of its energy. dwte is such
a tensor: the rows of the ~100 tokens in the batch get the encoder's gradient (size ~0.1), the other
~50,000 rows only the classifier's (size ~1e-5) and hold 1e-4..1.6e-3 of the energy, so all of them
wrong by 2x moves the whole tensor's L2 error by only 0.01..0.04. test_gpt2cu therefore checks those
rows on their own ("dwte unseen", tensor_check_rows), and holds the rows where a correct gradient is
exactly zero to exact zeros (tensor_check_zero: wte's padded rows V..Vp-1, wpe's rows T..maxT-1).

The L2 bounds are calibrated like the step-loss rule below: by the noise of an honest computation in
the lower precision, measured on the debug states (python dev/cuda_cpu_refs.py --noise; B=4, T=64,
the tinyshakespeare train and val batches, models d2, d4, d12):
- float32 noise, the float32 reference against the same model in float64: 2.1e-7..7.0e-7 per tensor
  (logits <= 6.8e-7); test_gpt2 (CPU) against the reference: 3.8e-7..6.7e-7 (d2), 3.9e-7..1.1e-6 (the
  d12 gpt2_124M state, logits 1.06e-6); test_gpt2cu FP32 on the CPU execution target (dev/cuda_cpu):
  2.3e-7..6.4e-7 (d2; -ge 1, -r 1, -r 2 -a 2, -a 4, and two processes with -z 0 and -z 1 alike).
  FP32 bound 3e-5 for logits and gradients: 28x the largest of these (room for the GPU's fast-math
  exp and rsqrt, a few ulps each), and 16x below the unit roundoff of TF32's inputs (4.9e-4), so a
  build whose GEMMs fall back to TF32 fails.
- bf16 noise, the model run entirely in bfloat16 (parameters, activations, gradients; fp32 sums
  inside the GEMMs, as train_gpt2cu's BF16 build) against the float32 reference: gradients
  2.9e-3..1.9e-2 (the largest are the layernorm parameters: d4 dln1b 1.9e-2; without them <= 1.1e-2,
  d12 dwpe), dwte's classifier-only rows 4.0e-3..8.7e-3, logits 6.5e-3 (d2), 8.3e-3 (d4), 1.14e-2
  (d12). Our arithmetic is quieter than that: test_gpt2 -p bf16 (bf16 GEMM inputs only) gives
  1.5e-3..4.4e-3 (d2, logits 3.9e-3) and 1.7e-3..7.1e-3 (d12 gpt2_124M, logits 6.6e-3); test_gpt2cu
  BF16 on the CPU execution target 2.2e-3..6.6e-3 (logits 6.2e-3..6.5e-3, dwte unseen 4.0e-3..4.3e-3;
  d2: plain, -ge 1 -r 1 -a 4, -r 2 -a 2, two processes with -z 1 -a 2), its layernorm backward summing in fp32.
  BF16 bound 3e-2 for logits and gradients: 1.6x the largest bf16 noise measured (torch's layernorm
  gradients), 2.6x the largest logits noise (d12), 4.2x test_gpt2's and 4.5x test_gpt2cu's own; a
  tenth of the elements wrong by 2x (0.32) fails it 10x over. The old max-abs bounds stay beside it
  (0.1 x max|ref| for gradients, 0.02 x for logits) against a single wild element.

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
#include "debug_state.h"

// ----------------------------------------------------------------------------
// comparing tensors

typedef struct {
    double max_abs_diff;
    double max_abs_ref;
    double tolerance;        // the max-abs bound: atol + rtol * max|ref|
    size_t worst_index;      // index of the largest |got - ref|
    size_t num_nonfinite;    // NaN or inf in `got` (or in `ref`)
    size_t count;            // elements compared
    double sum_sq_diff;      // sum (got - ref)^2, in double
    double sum_sq_ref;       // sum ref^2
    double rel_l2;           // ||got - ref|| / ||ref|| (inf if ref is all zero and got is not)
    double rel_l2_bound;     // what rel_l2 is held to; 0: reported, not checked
    size_t num_nonzero;      // elements of a must-be-zero range (tensor_check_zero) that are not exactly 0
    int ok;
} TensorCheck;

// the pieces, for checks over parts of a tensor (tensor_check_rows): begin, add segments, end
static inline void tensor_check_begin(TensorCheck* c) { memset(c, 0, sizeof(*c)); }

// adds got[0..n) vs ref[0..n); first_index: the index of got[0] in the whole tensor
static inline void tensor_check_add(TensorCheck* c, const float* got, const float* ref, size_t n, size_t first_index) {
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)ref[i]);
        if (r > c->max_abs_ref) { c->max_abs_ref = r; }
        if (!isfinite(got[i]) || !isfinite(ref[i])) {
            c->num_nonfinite++;
            continue;
        }
        double d = (double)got[i] - (double)ref[i];
        c->sum_sq_diff += d * d;
        c->sum_sq_ref += r * r;
        if (fabs(d) > c->max_abs_diff) {
            c->max_abs_diff = fabs(d);
            c->worst_index = first_index + i;
        }
    }
    c->count += n;
}

// ok: something compared, all finite, max |got - ref| <= atol + rtol * max|ref|, and with
// l2_bound > 0 also rel_l2 <= l2_bound (a range marked by tensor_check_zero fails it too)
static inline void tensor_check_end(TensorCheck* c, double rtol, double atol, double l2_bound) {
    c->tolerance = atol + rtol * c->max_abs_ref;
    c->rel_l2_bound = l2_bound;
    if (c->sum_sq_ref > 0.0) {
        c->rel_l2 = sqrt(c->sum_sq_diff / c->sum_sq_ref);
    } else {
        c->rel_l2 = c->sum_sq_diff > 0.0 ? INFINITY : 0.0;
    }
    c->ok = c->count > 0 && c->num_nonfinite == 0 && c->max_abs_diff <= c->tolerance &&
            (l2_bound <= 0.0 || c->rel_l2 <= l2_bound) && c->num_nonzero == 0;
}

// max |got - ref| <= atol + rtol * max|ref|, all finite (the relative L2 error is reported, not checked)
static inline TensorCheck tensor_check(const float* got, const float* ref, size_t n, double rtol, double atol) {
    TensorCheck c;
    tensor_check_begin(&c);
    tensor_check_add(&c, got, ref, n, 0);
    tensor_check_end(&c, rtol, atol, 0.0);
    return c;
}

// the same, and ||got - ref|| / ||ref|| <= l2_bound
static inline TensorCheck tensor_check_l2(const float* got, const float* ref, size_t n, double rtol, double atol,
                                          double l2_bound) {
    TensorCheck c;
    tensor_check_begin(&c);
    tensor_check_add(&c, got, ref, n, 0);
    tensor_check_end(&c, rtol, atol, l2_bound);
    return c;
}

// tensor_check_l2 over the rows r of a (nrows, row_len) tensor with keep[r] != 0 (max|ref| and the
// norms are those of the kept rows): a part of a tensor held to its own relative error
static inline TensorCheck tensor_check_rows(const float* got, const float* ref, size_t row_len, const unsigned char* keep,
                                            size_t nrows, double rtol, double atol, double l2_bound) {
    TensorCheck c;
    tensor_check_begin(&c);
    for (size_t r = 0; r < nrows; r++) {
        if (keep[r]) { tensor_check_add(&c, got + r * row_len, ref + r * row_len, row_len, r * row_len); }
    }
    tensor_check_end(&c, rtol, atol, l2_bound);
    return c;
}

// got[lo..hi) must be exactly zero (+0 or -0; a NaN is not): the padded rows of wte, the rows of wpe
// past the batch's T. Counts the other elements into c->num_nonzero and fails c if there are any.
static inline void tensor_check_zero(TensorCheck* c, const float* got, size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; i++) {
        if (!(got[i] == 0.0f)) { c->num_nonzero++; }
    }
    if (c->num_nonzero > 0) { c->ok = 0; }
}

typedef struct {
    int checks;
    int failures;
} CheckReport;

// the table of test_gpt2.c: | tensor | max abs diff | max |ref| | tolerance | ok |
static inline void check_table_header(FILE* out) {
    fprintf(out, "| %-12s | %13s | %13s | %13s | %-4s |\n", "tensor", "max abs diff", "max |ref|", "tolerance", "ok");
    fprintf(out, "|--------------|---------------|---------------|---------------|------|\n");
}

// the table of test_gpt2cu, two columns wider: | ... | tolerance | rel L2 err | L2 bound | ok |
// (its rows come from the _l2 functions below)
static inline void check_table_header_l2(FILE* out) {
    fprintf(out, "| %-12s | %13s | %13s | %13s | %10s | %8s | %-4s |\n", "tensor", "max abs diff", "max |ref|", "tolerance",
            "rel L2 err", "L2 bound", "ok");
    fprintf(out, "|--------------|---------------|---------------|---------------|------------|----------|------|\n");
}

// one row, in the narrow table or (l2_columns) the wide one; the verdict last, covering every check of the
// row; after it, what failed
static inline int check_table_row_(FILE* out, CheckReport* r, const char* name, const TensorCheck* c, int l2_columns) {
    r->checks++;
    if (!c->ok) { r->failures++; }
    fprintf(out, "| %-12s | %13.6e | %13.6e | %13.6e |", name, c->max_abs_diff, c->max_abs_ref, c->tolerance);
    if (l2_columns) {
        fprintf(out, " %10.3e |", c->rel_l2);
        if (c->rel_l2_bound > 0.0) {
            fprintf(out, " %8.1e |", c->rel_l2_bound);
        } else {
            fprintf(out, " %8s |", "-");
        }
    }
    fprintf(out, " %-4s |", c->ok ? "ok" : "FAIL");
    if (c->count == 0) { fprintf(out, " nothing compared"); }
    if (c->max_abs_diff > c->tolerance) { fprintf(out, " max abs diff over tolerance (element %zu)", c->worst_index); }
    if (c->rel_l2_bound > 0.0 && !(c->rel_l2 <= c->rel_l2_bound)) {
        fprintf(out, " rel L2 error %.3e over bound %.1e", c->rel_l2, c->rel_l2_bound);
    }
    if (c->num_nonfinite > 0) { fprintf(out, " %zu non-finite values", c->num_nonfinite); }
    if (c->num_nonzero > 0) { fprintf(out, " %zu nonzero values where exact zeros are required", c->num_nonzero); }
    fprintf(out, "\n");
    return c->ok;
}

static inline int check_table_row(FILE* out, CheckReport* r, const char* name, const TensorCheck* c) {
    return check_table_row_(out, r, name, c, 0);
}

static inline int check_table_row_l2(FILE* out, CheckReport* r, const char* name, const TensorCheck* c) {
    return check_table_row_(out, r, name, c, 1);
}

// a scalar check (losses): |got - ref| <= atol, got finite
static inline int check_scalar(FILE* out, CheckReport* r, const char* name, float got, float ref, double atol) {
    TensorCheck c = tensor_check(&got, &ref, 1, 0.0, atol);
    return check_table_row(out, r, name, &c);
}

static inline int check_scalar_l2(FILE* out, CheckReport* r, const char* name, float got, float ref, double atol) {
    TensorCheck c = tensor_check(&got, &ref, 1, 0.0, atol);
    return check_table_row_l2(out, r, name, &c);
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
    double logits_l2;        // relative L2 error of the logits (0: reported, not checked)
    double loss_atol;
    double grad_rtol;        // x max|ref| of each gradient tensor
    double grad_l2;          // relative L2 error of each gradient tensor (0: reported, not checked)
    double step_loss_atol;   // step losses of files without the noise section; in BF16 also the least step tolerance
    int is_bf16;
} TestTolerances;
typedef TestTolerances GpuTolerances;

// the relative L2 bounds (see the top of this file for the measurements behind them)
#define FP32_LOGITS_L2 3e-5
#define FP32_GRAD_L2 3e-5
#define BF16_LOGITS_L2 3e-2
#define BF16_GRAD_L2 3e-2

// The tolerance rows. test_gpt2.cu's FP32 builds use true fp32 GEMMs (TF32 off); its BF16 builds keep
// activations and gradients in bf16. test_gpt2.c's fp32 runs the CPU trainer in fp32 throughout; with -p bf16
// its GEMMs round their inputs to bf16 (fp32 sums, fp32 activations), which the GPU's BF16 row covers. Its
// rows report the relative L2 error; a check made with tensor_check_l2 and these bounds holds it to them.
//                          logits: rtol  atol  L2              loss  grads: rtol  L2            steps  is_bf16
#define GPU_FP32_TOLERANCES {        1e-5, 0.0,  FP32_LOGITS_L2, 1e-4,        2e-3, FP32_GRAD_L2, 2e-4,  0}
#define CPU_FP32_TOLERANCES {        0.0,  1e-4, FP32_LOGITS_L2, 1e-5,        1e-3, FP32_GRAD_L2, 1e-4,  0}
#define BF16_TOLERANCES     {        2e-2, 0.0,  BF16_LOGITS_L2, 2e-2,        1e-1, BF16_GRAD_L2, 5e-2,  1}

static inline TestTolerances gpu_tolerances(int is_bf16) {
    static const TestTolerances table[2] = {GPU_FP32_TOLERANCES, BF16_TOLERANCES};
    return table[is_bf16 ? 1 : 0];
}

static inline TestTolerances cpu_tolerances(int is_bf16) {
    static const TestTolerances table[2] = {CPU_FP32_TOLERANCES, BF16_TOLERANCES};
    return table[is_bf16 ? 1 : 0];
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
