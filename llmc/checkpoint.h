/*
llmc/checkpoint.h: the training state on disk, beside a checkpoint's model file (each family's model file is
described in its header, llmc/gpt2.h, llmc/llama3.h, and read and written by llmc/model_file.h).

Training state (one file per rank, state_%08d_%05d.bin next to model_%08d.bin): 256 int32 header
  [0]=20240527 [1]=1 [2]=num_processes [3]=process_rank [4]=zero_stage [5]=should_shuffle
  [6]=optimizer (0 AdamW, 1 Muon: m holds a Muon matrix's momentum there, v is unused; llmc/cpu/muon.h)
  [10]=step
  [20..21]=sampler RNG state (uint64)
  [30..31]=data loader shard index [32..33]=sample index (uint64 each)
  [40..41]=num_parameters [42..43]=optimizer shard offset [44..45]=shard size (uint64 each)
  [46..47]=bytes of the extra blob (uint64: [46] the low 32 bits, [47] the high 32 bits)
then AdamW m (shard size fp32), v (shard size fp32), then the extra blob (the trainer's
outlier-detector windows, then the GPU trainer's fp32 master weights of its shard: 6.2 GB for
GPT-2 1558M on one GPU, so the size needs more than 32 bits). Files written before the size was
widened have [46] = size and [47] = 0 (the rest of the header is zero), so they read unchanged.
A state whose file would exceed 2^63 - 1 bytes (off_t) is refused with one line when written.
Every field is validated on load before anything is allocated.
All files are written atomically (utils.h AtomicFile).
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"

#define TRAIN_STATE_MAGIC 20240527
#define TRAIN_STATE_VERSION 1

// ----------------------------------------------------------------------------
// training state

typedef struct {
    int num_processes;
    int process_rank;
    int zero_stage;
    int should_shuffle;
    int optimizer;            // 0 AdamW, 1 Muon (files from before the field are AdamW: 0)
    int step;
    uint64_t rng_state;       // the sampler's RNG
    uint64_t shard_idx;       // train data loader position after `step` steps
    uint64_t sample_idx;
    uint64_t num_parameters;
    uint64_t opt_offset;      // this rank's slice of the flat parameter vector (zero.h)
    uint64_t opt_size;
    uint64_t extra_bytes;     // size of the trailing blob
} TrainState;

#define TRAIN_STATE_HEADER_BYTES 1024

// Where each member of TrainState stands in the header (the layout above): an int in header[index], or a
// uint64 in header[index..index+1]
typedef struct {
    int index;
    size_t bytes;    // sizeof(int) or sizeof(uint64_t)
    size_t offset;   // the member's offset in TrainState
} TrainStateField;
#define TRAIN_STATE_FIELD_(index, member) {index, sizeof(((TrainState*)0)->member), offsetof(TrainState, member)}
static const TrainStateField TRAIN_STATE_FIELDS[] = {
    TRAIN_STATE_FIELD_(2, num_processes), TRAIN_STATE_FIELD_(3, process_rank), TRAIN_STATE_FIELD_(4, zero_stage),
    TRAIN_STATE_FIELD_(5, should_shuffle), TRAIN_STATE_FIELD_(6, optimizer), TRAIN_STATE_FIELD_(10, step),
    TRAIN_STATE_FIELD_(20, rng_state), TRAIN_STATE_FIELD_(30, shard_idx), TRAIN_STATE_FIELD_(32, sample_idx),
    TRAIN_STATE_FIELD_(40, num_parameters), TRAIN_STATE_FIELD_(42, opt_offset), TRAIN_STATE_FIELD_(44, opt_size),
    TRAIN_STATE_FIELD_(46, extra_bytes),
};
#define TRAIN_STATE_NUM_FIELDS ((int)(sizeof(TRAIN_STATE_FIELDS) / sizeof(TRAIN_STATE_FIELDS[0])))

// The bytes of a state file with this optimizer slice and extra blob, or 0 when the file could not
// exist (more than 2^63 - 1 bytes, the largest off_t).
static inline uint64_t train_state_file_bytes(uint64_t opt_size, uint64_t extra_bytes) {
    const uint64_t max_file = (uint64_t)INT64_MAX;
    if (opt_size > (max_file - TRAIN_STATE_HEADER_BYTES) / (2 * sizeof(float))) { return 0; }
    uint64_t fixed = TRAIN_STATE_HEADER_BYTES + opt_size * 2 * sizeof(float);
    if (extra_bytes > max_file - fixed) { return 0; }
    return fixed + extra_bytes;
}

// the 256-int32 header of s (the layout above; the fields not set are zero)
static inline void train_state_header(const TrainState* s, int header[256]) {
    memset(header, 0, TRAIN_STATE_HEADER_BYTES);
    header[0] = TRAIN_STATE_MAGIC;
    header[1] = TRAIN_STATE_VERSION;
    for (int i = 0; i < TRAIN_STATE_NUM_FIELDS; i++) {
        const TrainStateField* field = &TRAIN_STATE_FIELDS[i];
        memcpy(&header[field->index], (const char*)s + field->offset, field->bytes);
    }
}

// the inverse of train_state_header (no validation: train_state_read compares with what it expects)
static inline void train_state_from_header(const int header[256], TrainState* s) {
    for (int i = 0; i < TRAIN_STATE_NUM_FIELDS; i++) {
        const TrainStateField* field = &TRAIN_STATE_FIELDS[i];
        memcpy((char*)s + field->offset, &header[field->index], field->bytes);
    }
}

static inline void train_state_write(const char* path, const TrainState* s, const float* m, const float* v,
                                     const void* extra) {
    if (train_state_file_bytes(s->opt_size, s->extra_bytes) == 0) {
        llmc_die("%s: a training state of %llu optimizer values and %llu extra bytes does not fit in one file", path,
                 (unsigned long long)s->opt_size, (unsigned long long)s->extra_bytes);
    }
    int header[256];
    train_state_header(s, header);
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, header, sizeof(int), 256);
    atomic_file_write(&af, m, sizeof(float), (size_t)s->opt_size);
    atomic_file_write(&af, v, sizeof(float), (size_t)s->opt_size);
    atomic_file_write(&af, extra, 1, (size_t)s->extra_bytes);
    atomic_file_commit(&af);
}

// Reads a training state written by a run with the same layout as `expect` (processes,
// rank, ZeRO stage, parameter count, optimizer slice, extra blob size): any difference is
// one error line. Fills step/rng/data position into *out, and m, v, extra.
static inline void train_state_read(const char* path, const TrainState* expect, TrainState* out,
                                    float* m, float* v, void* extra) {
    FILE* f = fopenCheck(path, "rb");
    size_t file_size = file_size_check(f, path);
    int header[256];
    read_header_check(f, path, header, TRAIN_STATE_MAGIC, TRAIN_STATE_VERSION, TRAIN_STATE_VERSION, "training state");
    *out = *expect;
    train_state_from_header(header, out);
    if (out->num_processes != expect->num_processes) {
        llmc_die("%s: written by a run with %d processes, this run has %d (resume with the same number)", path, out->num_processes, expect->num_processes);
    }
    if (out->process_rank != expect->process_rank) {
        llmc_die("%s: belongs to rank %d, not rank %d", path, out->process_rank, expect->process_rank);
    }
    if (out->zero_stage != expect->zero_stage) {
        llmc_die("%s: written with ZeRO stage %d, this run uses -z %d", path, out->zero_stage, expect->zero_stage);
    }
    if (out->optimizer != expect->optimizer) {
        llmc_die("%s: written with optimizer %s, this run uses -op %s (resume with the same optimizer)", path,
                 out->optimizer == 1 ? "muon" : out->optimizer == 0 ? "adamw" : "(unknown)", expect->optimizer == 1 ? "muon" : "adamw");
    }
    if (out->should_shuffle != expect->should_shuffle) {
        llmc_die("%s: written with data shuffling %d, this run uses %d", path, out->should_shuffle, expect->should_shuffle);
    }
    if (out->num_parameters != expect->num_parameters || out->opt_offset != expect->opt_offset || out->opt_size != expect->opt_size) {
        llmc_die("%s: optimizer state is for %llu parameters (slice %llu+%llu), the model has %llu (slice %llu+%llu)", path,
                 (unsigned long long)out->num_parameters, (unsigned long long)out->opt_offset, (unsigned long long)out->opt_size,
                 (unsigned long long)expect->num_parameters, (unsigned long long)expect->opt_offset, (unsigned long long)expect->opt_size);
    }
    if (out->extra_bytes != expect->extra_bytes) {
        llmc_die("%s: extra state is %llu bytes, expected %llu (written by a different build?)", path,
                 (unsigned long long)out->extra_bytes, (unsigned long long)expect->extra_bytes);
    }
    if (out->step < 0) { llmc_die("%s: bad training state: step %d < 0", path, out->step); }
    uint64_t expected = train_state_file_bytes(out->opt_size, out->extra_bytes);
    if ((uint64_t)file_size != expected) {
        llmc_die("%s: training state size mismatch: expected %llu bytes, the file has %zu", path,
                 (unsigned long long)expected, file_size);
    }
    freadCheck(m, sizeof(float), (size_t)out->opt_size, f, path);
    freadCheck(v, sizeof(float), (size_t)out->opt_size, f, path);
    freadCheck(extra, 1, (size_t)out->extra_bytes, f, path);
    fcloseCheck(f, path);
}

#endif // LLMC_CHECKPOINT_H
