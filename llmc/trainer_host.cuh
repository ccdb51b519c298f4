/*
llmc/trainer_host.cuh: the small decisions of train_gpt2.cu's training loop, in plain C so the CPU
tests check them (dev/test/test_cuda_host.c).

    step_is_due(step, every, last_step)              "every N steps" with N = 0 meaning never (no % 0)
    grad_accum_steps_for(total, B, T, nproc, &why)   micro-batches per step, or -1 and a reason
    grad_clip_scale(norm, clip)                      factor applied to the gradients (clip 0 = off)
    update_should_skip(loss_z, norm_z, sl, sg, norm) the -sl / -sg outlier rule (NaN z = not yet known)
    train_state_describe(...), state_extra_bytes(...)  the GPU trainer's training-state file layout:
        checkpoint.h's state with this rank's ZeRO shard, and an extra blob holding the two outlier
        detectors followed by the shard's fp32 master weights (bf16 builds with -w 1)
*/
#ifndef LLMC_TRAINER_HOST_CUH
#define LLMC_TRAINER_HOST_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>
#include "checkpoint.h"
#include "outlier_detector.h"
#include "zero.h"

// 1 when a periodic action runs at this step: every > 0 and (step % every == 0 or the last step)
static inline int step_is_due(int step, int every, int last_step) {
    if (every <= 0) { return 0; }
    return step % every == 0 || last_step;
}

// total: tokens per optimizer step (-1 = one micro-batch on every process)
static inline int grad_accum_steps_for(long long total, int B, int T, int nproc, const char** why) {
    *why = "";
    if (B < 1 || T < 1 || nproc < 1) {
        *why = "B, T and the number of processes must be positive";
        return -1;
    }
    long long per = (long long)B * T * nproc;
    if (total == -1) { return 1; }
    if (total < per || total % per != 0) {
        *why = "the total batch (-d) must be a positive multiple of B * T * processes";
        return -1;
    }
    long long steps = total / per;
    if (steps > 1000000) {
        *why = "the total batch (-d) needs more than a million micro-batches per step";
        return -1;
    }
    return (int)steps;
}

// gradients are scaled by this before the update: clip / norm when the norm exceeds clip
static inline float grad_clip_scale(float norm, float clip) {
    if (clip <= 0.0f || !(norm > clip)) { return 1.0f; }
    return clip / norm;
}

// skip the update for a non-finite gradient norm, or when a z-score exceeds its threshold (> 0 = on)
static inline int update_should_skip(double loss_z, double norm_z, float skip_lossz, float skip_gradz, float grad_norm) {
    if (!isfinite(grad_norm)) { return 1; }
    if (skip_lossz > 0.0f && !isnan(loss_z) && loss_z > skip_lossz) { return 1; }
    if (skip_gradz > 0.0f && !isnan(norm_z) && norm_z > skip_gradz) { return 1; }
    return 0;
}

// ----------------------------------------------------------------------------
// training-state layout

typedef struct {
    OutlierDetector loss;
    OutlierDetector grad_norm;
} TrainerDetectors;

// bytes of the extra blob: the detectors, then shard_size fp32 master weights when there are any
static inline size_t state_extra_bytes(size_t shard_size, int has_master_weights) {
    return sizeof(TrainerDetectors) + (has_master_weights ? shard_size * sizeof(float) : 0);
}

// the state format stores the blob size in 32 bits
static inline int state_extra_fits(size_t bytes) { return bytes <= (size_t)UINT32_MAX; }

static inline TrainState train_state_describe(int num_processes, int process_rank, int zero_stage, int should_shuffle,
                                              int step, uint64_t rng_state, uint64_t shard_idx, uint64_t sample_idx,
                                              size_t num_parameters, ZeroShard shard, size_t extra_bytes) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.num_processes = num_processes;
    s.process_rank = process_rank;
    s.zero_stage = zero_stage;
    s.should_shuffle = should_shuffle;
    s.step = step;
    s.rng_state = rng_state;
    s.shard_idx = shard_idx;
    s.sample_idx = sample_idx;
    s.num_parameters = num_parameters;
    s.opt_offset = shard.offset;
    s.opt_size = shard.size;
    s.extra_bytes = (uint32_t)extra_bytes;
    return s;
}

// extra blob <-> detectors and master weights (master may be NULL when the blob has none)
static inline void state_extra_pack(char* extra, const TrainerDetectors* d, const float* master, size_t shard_size) {
    memcpy(extra, d, sizeof(TrainerDetectors));
    if (master != NULL) { memcpy(extra + sizeof(TrainerDetectors), master, shard_size * sizeof(float)); }
}
static inline void state_extra_unpack(const char* extra, TrainerDetectors* d, float* master, size_t shard_size) {
    memcpy(d, extra, sizeof(TrainerDetectors));
    if (master != NULL) { memcpy(master, extra + sizeof(TrainerDetectors), shard_size * sizeof(float)); }
}

#endif // LLMC_TRAINER_HOST_CUH
