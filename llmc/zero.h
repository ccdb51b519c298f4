/*
llmc/zero.h: ZeRO stage 1 partitioning of the flat parameter vector.

With ZeRO-1 every rank keeps the AdamW moments (m, v) only for its own contiguous slice of
the num_parameters-long flat parameter vector, updates only that slice, then the ranks
all-gather the updated parameters. Shards are ceil(n / nproc) elements; the last one(s) are
shorter (possibly empty), so every parameter is owned by exactly one rank.
Shared by the CPU (train_gpt2.c) and GPU (train_gpt2.cu) trainers.
*/
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include <stddef.h>

typedef struct {
    size_t offset;  // first parameter owned by this rank
    size_t size;    // number of parameters owned by this rank (may be 0 for tiny models)
} ZeroShard;

// the slice of n parameters owned by `rank` of `nproc` ranks; zero_stage 0 = everything
static inline ZeroShard zero_shard(size_t n, int zero_stage, int nproc, int rank) {
    ZeroShard s;
    if (zero_stage == 0 || nproc <= 1) {
        s.offset = 0;
        s.size = n;
        return s;
    }
    size_t per = (n + (size_t)nproc - 1) / (size_t)nproc;
    size_t start = per * (size_t)rank;
    if (start > n) { start = n; }
    size_t end = start + per;
    if (end > n) { end = n; }
    s.offset = start;
    s.size = end - start;
    return s;
}

#endif // LLMC_ZERO_H
