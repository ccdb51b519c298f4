/*
llmc/cpu/phase_time.h: a roofline account of the CPU training step. With LLMC_PHASE_TIME=1 every layer, GEMM,
optimizer and housekeeping pass of a CPU trainer adds its wall time, its compulsory memory traffic (bytes read and
written at the stored dtypes, each tensor once) and its minimal FLOP count (no recomputation) to one of a few
phases, and the program prints at exit, one line per phase that ran:

    phase gemm: 512.3 ms, 4831838208 bytes, 1304621645824 flop over 4 steps

(totals over the steps counted; the first optimizer step warms up and is left out, as for LLMC_GEMM_TIME).
make bench (dev/bench.py) holds each phase against its limit on this machine: max(bytes / bandwidth, FLOPs / peak).

    double t = phase_begin();              0 when the account is off or inside an OpenMP parallel region
    ...the pass...
    phase_end(PHASE_NORM, t, bytes, flops);
    phase_begin_whole() / phase_end_whole()    the same for a pass whose inner passes count as its own
    zero_floats(x, n)                      zeroes a gradient that its backward only adds to (PHASE_ZERO)

Phases nest: a phase's time excludes that of the phases begun inside it (Muon's GEMMs count as GEMMs, the rest
of Muon as the optimizer), so the phases add up to the time they cover. A pass begun with phase_begin_whole()
keeps everything inside it as its own (attention's products are attention, not GEMMs). Off, a phase costs one
load and a branch. Only the thread that runs the step (outside parallel regions) records.
*/
#ifndef LLMC_PHASE_TIME_H
#define LLMC_PHASE_TIME_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"

typedef enum {
    PHASE_GEMM,        // the matmul layers' GEMMs, the lm_head's, Muon's
    PHASE_ATTENTION,   // causal self-attention, forward and backward (its products included)
    PHASE_NORM,        // LayerNorm, RMSNorm, QK-norm (and a residual add fused into a norm)
    PHASE_ELEMENTWISE, // GELU, SwiGLU, ReLU^2, RoPE, residual adds, bias adds, repeat_kv
    PHASE_EMBEDDING,   // token (and position) embeddings and their gradients
    PHASE_CLASSIFIER,  // softmax, loss, softcap, dlogits
    PHASE_OPTIMIZER,   // AdamW, Muon (outside its GEMMs)
    PHASE_GRAD_NORM,   // the gradient norm and clipping
    PHASE_BF16,        // rounding to bf16: GEMM operands, the weight mirror
    PHASE_ZERO,        // zeroing gradients and activation gradients
    PHASE_COUNT
} Phase;

static const char* const phase_names[PHASE_COUNT] = {"gemm",       "attention", "norm",      "elementwise", "embedding",
                                                     "classifier", "optimizer", "grad_norm", "bf16",        "zero"};

typedef struct {
    double seconds[PHASE_COUNT];
    double bytes[PHASE_COUNT];
    double flops[PHASE_COUNT];
    long steps_begun;
    // the phases begun and not yet ended, innermost last: each collects the time of the phases inside it
    double child_seconds[16];
    int depth;
    int whole_depth;   // > 0 inside a phase_begin_whole() pass: nothing inside it records
} PhaseAccount;

static PhaseAccount phase_account;
static int phase_time_on = -1; // -1: LLMC_PHASE_TIME not read yet

static void phase_time_report(void) {
    long steps = phase_account.steps_begun > 0 ? phase_account.steps_begun - 1 : 0;
    for (int p = 0; p < PHASE_COUNT; p++) {
        if (phase_account.seconds[p] == 0.0 && phase_account.bytes[p] == 0.0) { continue; }
        printf("phase %s: %.1f ms, %.0f bytes, %.0f flop over %ld steps\n", phase_names[p],
               1000.0 * phase_account.seconds[p], phase_account.bytes[p], phase_account.flops[p], steps);
    }
}

static int phase_time_enabled(void) {
    if (phase_time_on < 0) {
        const char* env = getenv("LLMC_PHASE_TIME");
        phase_time_on = env != NULL && strcmp(env, "1") == 0;
        if (phase_time_on) { atexit(phase_time_report); }
    }
    return phase_time_on;
}

// the account starts again from zero
static void phase_time_reset(void) {
    long steps = phase_account.steps_begun;
    memset(&phase_account, 0, sizeof(phase_account));
    phase_account.steps_begun = steps;
}

// an optimizer step begins: the first and the second start the account from zero (the second ends the warm-up)
static void phase_time_step(void) {
    phase_account.steps_begun++;
    if (phase_account.steps_begun <= 2) { phase_time_reset(); }
}

// the start of a pass: its start time, or 0 when nothing is recorded
static inline double phase_begin(void) {
    if (__builtin_expect(phase_time_on == 0, 1)) { return 0.0; }
    if (!phase_time_enabled()) { return 0.0; }
#ifdef _OPENMP
    if (omp_in_parallel() || omp_get_level() > 0) { return 0.0; } // (level: a parallel region of one thread too)
#endif
    if (phase_account.whole_depth > 0) { return 0.0; }
    if (phase_account.depth < 16) { phase_account.child_seconds[phase_account.depth] = 0.0; }
    phase_account.depth++;
    return wall_seconds();
}

// the start of a pass that counts the passes inside it as its own; it ends with phase_end_whole
static inline double phase_begin_whole(void) {
    double t0 = phase_begin();
    if (t0 != 0.0) { phase_account.whole_depth++; }
    return t0;
}

// the end of a pass begun at t0 (phase_begin's value): its time, less that of the phases inside it, its bytes and
// its FLOPs go to phase p
static inline void phase_end(Phase p, double t0, double bytes, double flops) {
    if (t0 == 0.0) { return; }
    double elapsed = wall_seconds() - t0;
    int d = --phase_account.depth;
    double inner = d < 16 ? phase_account.child_seconds[d] : 0.0;
    phase_account.seconds[p] += elapsed - inner;
    phase_account.bytes[p] += bytes;
    phase_account.flops[p] += flops;
    if (d > 0 && d - 1 < 16) { phase_account.child_seconds[d - 1] += elapsed; }
}

static inline void phase_end_whole(Phase p, double t0, double bytes, double flops) {
    if (t0 == 0.0) { return; }
    phase_account.whole_depth--;
    phase_end(p, t0, bytes, flops);
}

// zeroes n floats on the team's threads, counted as PHASE_ZERO: a gradient that its backward only adds to (an
// activation's, or a stale parameter gradient that no GEMM overwrites)
static void zero_floats(float* x, size_t n) {
    double t_phase = phase_begin();
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) { x[i] = 0.0f; }
    phase_end(PHASE_ZERO, t_phase, 4.0 * (double)n, 0.0);
}

#endif // LLMC_PHASE_TIME_H
