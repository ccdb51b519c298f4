/*
llmc/schedulers.h: learning rate schedules.

With lr = learning_rate, W = warmup_iterations, N = train_num_batches (total steps),
lr_min = lr * final_learning_rate_frac, and for every schedule
    warmup:   step < W  ->  lr * (step + 1) / W
then, for step >= W:
    cosine:   r = clamp((step - W) / (N - W), 0, 1), lr_min + 0.5 * (1 + cos(pi * r)) * (lr - lr_min)
    linear:   r as for cosine,                        lr - r * (lr - lr_min)
    constant: lr
    wsd:      warmup, stable, decay: D = max(W, (int)(0.8 * N)) is where the last 20% starts;
              step < D -> lr; else r = clamp((step - D) / (N - D), 0, 1), lr_min + (1 - sqrt(r)) * (lr - lr_min)
When the decay has no length (N <= W for cosine/linear, N <= D for wsd) r is 1: the schedule
is already at lr_min after warmup. So warmup 0, N == W, N == 0 and steps past N never divide
by zero; past N the rate stays at lr_min. The arithmetic is done in double (as the Python
reference does) and rounded to float once at the end.
*/
#ifndef LLMC_SCHEDULERS_H
#define LLMC_SCHEDULERS_H

#include <math.h>
#include <string.h>

#include "utils.h"

enum { LR_SCHEDULE_COSINE = 0, LR_SCHEDULE_LINEAR = 1, LR_SCHEDULE_CONSTANT = 2, LR_SCHEDULE_WSD = 3 };
#define LR_SCHEDULE_NAMES "cosine, linear, constant, wsd"

typedef struct {
    int type;  // LR_SCHEDULE_*
    float learning_rate;
    int warmup_iterations;
    int train_num_batches;
    float final_learning_rate_frac;
} LearningRateScheduler;

// the schedule's name, e.g. for logs ("cosine")
static inline const char* lr_scheduler_name(const LearningRateScheduler* s) {
    switch (s->type) {
        case LR_SCHEDULE_COSINE: return "cosine";
        case LR_SCHEDULE_LINEAR: return "linear";
        case LR_SCHEDULE_CONSTANT: return "constant";
        case LR_SCHEDULE_WSD: return "wsd";
        default: return "unknown";
    }
}

static inline void lr_scheduler_init(LearningRateScheduler* s, const char* type, float lr, int warmup,
                                     int total_steps, float final_frac) {
    if (type == NULL) { type = "(null)"; }
    if (strcmp(type, "cosine") == 0) {
        s->type = LR_SCHEDULE_COSINE;
    } else if (strcmp(type, "linear") == 0) {
        s->type = LR_SCHEDULE_LINEAR;
    } else if (strcmp(type, "constant") == 0) {
        s->type = LR_SCHEDULE_CONSTANT;
    } else if (strcmp(type, "wsd") == 0) {
        s->type = LR_SCHEDULE_WSD;
    } else {
        llmc_die("unknown learning rate schedule '%s' (valid: %s)", type, LR_SCHEDULE_NAMES);
    }
    if (warmup < 0) {
        llmc_die("learning rate warmup must be >= 0 steps (got %d)", warmup);
    }
    s->learning_rate = lr;
    s->warmup_iterations = warmup;
    s->train_num_batches = total_steps;
    s->final_learning_rate_frac = final_frac;
}

// (step - start) / (end - start) clamped to [0, 1]; 1 when the interval is empty
static inline double lr_decay_ratio(int step, int start, int end) {
    if (end <= start) { return 1.0; }
    double r = ((double)step - (double)start) / ((double)end - (double)start);
    return r < 0.0 ? 0.0 : (r > 1.0 ? 1.0 : r);
}

static inline float get_learning_rate(const LearningRateScheduler* s, int step) {
    double lr = (double)s->learning_rate;
    double lr_min = lr * (double)s->final_learning_rate_frac;
    int W = s->warmup_iterations;
    int N = s->train_num_batches;
    if (step < W) {
        return (float)(lr * (double)(step + 1) / (double)W);
    }
    double out = lr;
    switch (s->type) {
        case LR_SCHEDULE_COSINE: {
            double r = lr_decay_ratio(step, W, N);
            out = lr_min + 0.5 * (1.0 + cos(3.14159265358979323846 * r)) * (lr - lr_min);
            break;
        }
        case LR_SCHEDULE_LINEAR: {
            double r = lr_decay_ratio(step, W, N);
            out = lr - r * (lr - lr_min);
            break;
        }
        case LR_SCHEDULE_CONSTANT:
            out = lr;
            break;
        case LR_SCHEDULE_WSD: {
            int D = (int)(0.8 * (double)N);
            if (D < W) { D = W; }
            if (step < D) {
                out = lr;
            } else {
                double r = lr_decay_ratio(step, D, N);
                out = lr_min + (1.0 - sqrt(r)) * (lr - lr_min);
            }
            break;
        }
        default:
            llmc_die("learning rate scheduler has unknown type %d (valid: %s)", s->type, LR_SCHEDULE_NAMES);
    }
    return (float)out;
}

#endif // LLMC_SCHEDULERS_H
