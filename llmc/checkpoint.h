/*
llmc/checkpoint.h: model checkpoints and training state on disk.

Model checkpoint (llm.c-compatible): 256 int32 header
  [0]=20240326 [1]=3 (fp32) or 5 (bf16) [2]=maxT [3]=V [4]=L [5]=NH [6]=C [7]=Vp
then the 16 parameter tensors in checkpoint order (model_config.h), wte with Vp rows.
We write fp32 (version 3); we read 3 and 5 (bf16 is widened to fp32 on load).

Training state (one file per rank, state_%08d_%05d.bin next to model_%08d.bin): 256 int32 header
  [0]=20240527 [1]=1 [2]=num_processes [3]=process_rank [4]=zero_stage [5]=should_shuffle
  [10]=step
  [20..21]=sampler RNG state (uint64)
  [30..31]=data loader shard index [32..33]=sample index (uint64 each)
  [40..41]=num_parameters [42..43]=optimizer shard offset [44..45]=shard size (uint64 each)
  [46]=bytes of the extra blob
then AdamW m (shard size fp32), v (shard size fp32), then the extra blob (the trainer's
outlier-detector windows). Every field is validated on load before anything is allocated.
All files are written atomically (utils.h AtomicFile).
*/
#ifndef LLMC_CHECKPOINT_H
#define LLMC_CHECKPOINT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "utils.h"
#include "model_config.h"

#define CHECKPOINT_MAGIC 20240326
#define CHECKPOINT_VERSION_FP32 3
#define CHECKPOINT_VERSION_BF16 5
#define TRAIN_STATE_MAGIC 20240527
#define TRAIN_STATE_VERSION 1

// ----------------------------------------------------------------------------
// model checkpoint

// Opens a checkpoint, validates its header against its real size and returns the open file
// positioned at the first parameter. *version is 3 (fp32) or 5 (bf16).
static inline FILE* checkpoint_open(const char* path, GPT2Config* cfg, int* version) {
    FILE* f = fopenCheck(path, "rb");
    size_t file_size = file_size_check(f, path);
    int header[256];
    if (file_size < sizeof(header)) {
        llmc_die("%s: not a model checkpoint (file is %zu bytes, shorter than the 1024-byte header)", path, file_size);
    }
    read_header_check(f, path, header, CHECKPOINT_MAGIC, CHECKPOINT_VERSION_FP32, CHECKPOINT_VERSION_BF16, "model checkpoint");
    if (header[1] == 4) { llmc_die("%s: unsupported model checkpoint version 4 (expected 3 = fp32 or 5 = bf16)", path); }
    *version = header[1];
    // each header field, its allowed range and where it goes; cfg is filled only once all are valid
    struct { const char* name; int index; int lo; int hi; int* dst; } fields[] = {
        {"maxT (header[2])", 2, 1, 1 << 20, &cfg->max_seq_len}, {"vocab size V (header[3])", 3, 1, 1 << 24, &cfg->vocab_size},
        {"layers L (header[4])", 4, 1, 4096, &cfg->num_layers}, {"heads NH (header[5])", 5, 1, 1 << 16, &cfg->num_heads},
        {"channels C (header[6])", 6, 1, 1 << 17, &cfg->channels},
        {"padded vocab Vp (header[7])", 7, 1, 1 << 24, &cfg->padded_vocab_size},
    };
    const size_t num_fields = sizeof(fields) / sizeof(fields[0]);
    for (size_t i = 0; i < num_fields; i++) {
        int v = header[fields[i].index];
        if (v < fields[i].lo || v > fields[i].hi) {
            llmc_die("%s: bad model checkpoint header: %s = %d is outside [%d, %d]", path, fields[i].name, v, fields[i].lo, fields[i].hi);
        }
    }
    for (size_t i = 0; i < num_fields; i++) { *fields[i].dst = header[fields[i].index]; }
    if (cfg->padded_vocab_size < cfg->vocab_size) {
        llmc_die("%s: bad model checkpoint header: padded vocab Vp = %d is smaller than V = %d", path, cfg->padded_vocab_size, cfg->vocab_size);
    }
    if (cfg->channels % cfg->num_heads != 0) {
        llmc_die("%s: bad model checkpoint header: channels C = %d is not a multiple of heads NH = %d", path, cfg->channels, cfg->num_heads);
    }
    size_t elem_bytes = (*version == CHECKPOINT_VERSION_FP32) ? 4 : 2;
    size_t expected = sizeof(header) + gpt2_num_parameters(cfg) * elem_bytes;
    if (file_size != expected) {
        llmc_die("%s: model checkpoint size mismatch: the header (L=%d C=%d Vp=%d maxT=%d, %s) needs %zu bytes, the file has %zu%s",
                 path, cfg->num_layers, cfg->channels, cfg->padded_vocab_size, cfg->max_seq_len,
                 elem_bytes == 4 ? "fp32" : "bf16", expected, file_size, file_size < expected ? " (truncated?)" : "");
    }
    return f;
}

// reads the n parameters that follow the header into params (fp32), widening bf16
static inline void checkpoint_read_params(FILE* f, const char* path, int version, float* params, size_t n) {
    if (version == CHECKPOINT_VERSION_FP32) {
        freadCheck(params, sizeof(float), n, f, path);
        return;
    }
    // bf16 is the upper half of an fp32: read in chunks and shift into place
    const size_t chunk = 1 << 20;
    uint16_t* buf = (uint16_t*)mallocCheck(chunk * sizeof(uint16_t));
    for (size_t done = 0; done < n; done += chunk) {
        size_t k = n - done < chunk ? n - done : chunk;
        freadCheck(buf, sizeof(uint16_t), k, f, path);
        for (size_t i = 0; i < k; i++) {
            uint32_t bits = (uint32_t)buf[i] << 16;
            memcpy(&params[done + i], &bits, sizeof(float));
        }
    }
    free(buf);
}

static inline void checkpoint_write(const char* path, const GPT2Config* cfg, const float* params, size_t n) {
    // the layout above; the rest of the header is zero
    int header[256] = {CHECKPOINT_MAGIC, CHECKPOINT_VERSION_FP32, cfg->max_seq_len, cfg->vocab_size, cfg->num_layers,
                       cfg->num_heads, cfg->channels, cfg->padded_vocab_size};
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, header, sizeof(int), 256);
    atomic_file_write(&af, params, sizeof(float), n);
    atomic_file_commit(&af);
}

// ----------------------------------------------------------------------------
// training state

typedef struct {
    int num_processes;
    int process_rank;
    int zero_stage;
    int should_shuffle;
    int step;
    uint64_t rng_state;       // the sampler's RNG
    uint64_t shard_idx;       // train data loader position after `step` steps
    uint64_t sample_idx;
    uint64_t num_parameters;
    uint64_t opt_offset;      // this rank's slice of the flat parameter vector (zero.h)
    uint64_t opt_size;
    uint32_t extra_bytes;     // size of the trailing blob
} TrainState;

static inline void state_put_u64(int* header, int index, uint64_t v) { memcpy(&header[index], &v, sizeof(v)); }
static inline uint64_t state_get_u64(const int* header, int index) {
    uint64_t v;
    memcpy(&v, &header[index], sizeof(v));
    return v;
}

static inline void train_state_write(const char* path, const TrainState* s, const float* m, const float* v,
                                     const void* extra) {
    // the layout above; the fields not set are zero
    int header[256] = {TRAIN_STATE_MAGIC, TRAIN_STATE_VERSION, s->num_processes, s->process_rank, s->zero_stage,
                       s->should_shuffle};
    header[10] = s->step;
    state_put_u64(header, 20, s->rng_state);
    state_put_u64(header, 30, s->shard_idx);
    state_put_u64(header, 32, s->sample_idx);
    state_put_u64(header, 40, s->num_parameters);
    state_put_u64(header, 42, s->opt_offset);
    state_put_u64(header, 44, s->opt_size);
    header[46] = (int)s->extra_bytes;
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, header, sizeof(int), 256);
    atomic_file_write(&af, m, sizeof(float), (size_t)s->opt_size);
    atomic_file_write(&af, v, sizeof(float), (size_t)s->opt_size);
    atomic_file_write(&af, extra, 1, s->extra_bytes);
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
    out->num_processes = header[2];
    out->process_rank = header[3];
    out->zero_stage = header[4];
    out->should_shuffle = header[5];
    out->step = header[10];
    out->rng_state = state_get_u64(header, 20);
    out->shard_idx = state_get_u64(header, 30);
    out->sample_idx = state_get_u64(header, 32);
    out->num_parameters = state_get_u64(header, 40);
    out->opt_offset = state_get_u64(header, 42);
    out->opt_size = state_get_u64(header, 44);
    out->extra_bytes = (uint32_t)header[46];
    if (out->num_processes != expect->num_processes) {
        llmc_die("%s: written by a run with %d processes, this run has %d (resume with the same number)", path, out->num_processes, expect->num_processes);
    }
    if (out->process_rank != expect->process_rank) {
        llmc_die("%s: belongs to rank %d, not rank %d", path, out->process_rank, expect->process_rank);
    }
    if (out->zero_stage != expect->zero_stage) {
        llmc_die("%s: written with ZeRO stage %d, this run uses -z %d", path, out->zero_stage, expect->zero_stage);
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
        llmc_die("%s: extra state is %u bytes, expected %u (written by a different build?)", path, out->extra_bytes, expect->extra_bytes);
    }
    if (out->step < 0) { llmc_die("%s: bad training state: step %d < 0", path, out->step); }
    size_t expected = sizeof(header) + 2 * (size_t)out->opt_size * sizeof(float) + out->extra_bytes;
    if (file_size != expected) {
        llmc_die("%s: training state size mismatch: expected %zu bytes, the file has %zu", path, expected, file_size);
    }
    freadCheck(m, sizeof(float), (size_t)out->opt_size, f, path);
    freadCheck(v, sizeof(float), (size_t)out->opt_size, f, path);
    freadCheck(extra, 1, out->extra_bytes, f, path);
    fcloseCheck(f, path);
}

#endif // LLMC_CHECKPOINT_H
