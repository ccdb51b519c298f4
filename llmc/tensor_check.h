/*
llmc/tensor_check.cuh: the comparison and reporting logic of test_gpt2cu, in plain C so that the
CPU tests (dev/test/test_cuda_host.c) check it with corrupted inputs: a GPU test that cannot
fail is worse than none.

    debug_state_read(d, path, cfg, num_parameters)    the reference batch, logits, loss, gradients, losses
    tensor_check(got, ref, n, rtol, atol)             max |got - ref| <= atol + rtol * max|ref|, all finite
    check_table_row(report, name, check)              prints one table row, counts the result
    check_report_exit_code(report)                    0 only if something was checked and nothing failed
    gpu_tolerances(is_bf16)                           per-tensor tolerances, tighter in FP32 than in BF16

Tolerances are relative to the largest reference value of each tensor, so one rule fits tensors
of very different scales. FP32 builds run the test with true fp32 GEMMs (TF32 off).
*/
#ifndef LLMC_TENSOR_CHECK_CUH
#define LLMC_TENSOR_CHECK_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"
#include "model_config.h"

// ----------------------------------------------------------------------------
// comparing tensors

typedef struct {
    double max_abs_diff;
    double max_abs_ref;
    double tolerance;
    size_t worst_index;
    size_t num_nonfinite;  // NaN or inf in `got`
    int ok;
} TensorCheck;

static inline TensorCheck tensor_check(const float* got, const float* ref, size_t n, double rtol, double atol) {
    TensorCheck c;
    memset(&c, 0, sizeof(c));
    for (size_t i = 0; i < n; i++) {
        double r = fabs((double)ref[i]);
        if (r > c.max_abs_ref) { c.max_abs_ref = r; }
        if (!isfinite(got[i])) {
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

// ----------------------------------------------------------------------------
// the debug state written by train_gpt2.py --write_tensors 1

#define DEBUG_STATE_MAGIC 20240327
#define DEBUG_STATE_VERSION 2

typedef struct {
    int B, T, nsteps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int* x;         // (B, T)
    int* y;         // (B, T)
    float* logits;  // (B, T, V)
    float loss;
    float* grads;   // (num_parameters) checkpoint order, wte with Vp rows
    float* losses;  // (nsteps)
} DebugState;

static inline float debug_state_float_bits(int bits) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

static inline void debug_state_read(DebugState* d, const char* path, const GPT2Config* cfg, size_t num_parameters) {
    FILE* f = fopenCheck(path, "rb");
    size_t file_size = file_size_check(f, path);
    int header[256];
    if (file_size < sizeof(header)) { llmc_die("%s: not a debug state (%zu bytes, shorter than the header)", path, file_size); }
    read_header_check(f, path, header, DEBUG_STATE_MAGIC, DEBUG_STATE_VERSION, DEBUG_STATE_VERSION, "debug state");
    d->B = header[2];
    d->T = header[3];
    d->nsteps = header[4];
    if (d->B < 1 || d->B > 65536) { llmc_die("%s: bad debug state header: B = %d", path, d->B); }
    if (d->T < 1 || d->T > cfg->max_seq_len) { llmc_die("%s: bad debug state header: T = %d (model max %d)", path, d->T, cfg->max_seq_len); }
    if (d->nsteps < 0 || d->nsteps > 100000) { llmc_die("%s: bad debug state header: nsteps = %d", path, d->nsteps); }
    float hp[6];
    for (int i = 0; i < 6; i++) {
        hp[i] = debug_state_float_bits(header[5 + i]);
        if (!isfinite(hp[i]) || hp[i] < 0.0f) { llmc_die("%s: bad debug state header: header[%d] = %g", path, 5 + i, hp[i]); }
    }
    d->lr = hp[0]; d->beta1 = hp[1]; d->beta2 = hp[2]; d->eps = hp[3]; d->weight_decay = hp[4]; d->grad_clip = hp[5];
    size_t BT = (size_t)d->B * d->T, V = (size_t)cfg->vocab_size;
    size_t expected = sizeof(header) + 2 * BT * sizeof(int) + BT * V * sizeof(float) + sizeof(float) +
                      num_parameters * sizeof(float) + (size_t)d->nsteps * sizeof(float);
    if (file_size != expected) {
        llmc_die("%s: debug state size mismatch: B=%d T=%d nsteps=%d and %zu parameters need %zu bytes, the file has %zu (wrong model?)",
                 path, d->B, d->T, d->nsteps, num_parameters, expected, file_size);
    }
    d->x = (int*)mallocCheck(BT * sizeof(int));
    d->y = (int*)mallocCheck(BT * sizeof(int));
    d->logits = (float*)mallocCheck(BT * V * sizeof(float));
    d->grads = (float*)mallocCheck(num_parameters * sizeof(float));
    d->losses = (float*)mallocCheck(((size_t)d->nsteps + 1) * sizeof(float));
    freadCheck(d->x, sizeof(int), BT, f, path);
    freadCheck(d->y, sizeof(int), BT, f, path);
    freadCheck(d->logits, sizeof(float), BT * V, f, path);
    freadCheck(&d->loss, sizeof(float), 1, f, path);
    freadCheck(d->grads, sizeof(float), num_parameters, f, path);
    freadCheck(d->losses, sizeof(float), (size_t)d->nsteps, f, path);
    fcloseCheck(f, path);
    for (size_t i = 0; i < BT; i++) {
        if (d->x[i] < 0 || (size_t)d->x[i] >= V || d->y[i] < 0 || (size_t)d->y[i] >= V) {
            llmc_die("%s: token id at position %zu is outside [0, %zu)", path, i, V);
        }
    }
}

static inline void debug_state_free(DebugState* d) {
    free(d->x);
    free(d->y);
    free(d->logits);
    free(d->grads);
    free(d->losses);
}

#endif // LLMC_TENSOR_CHECK_CUH
