/*
llmc/zero.h: ZeRO stage 1 partitioning of the flat parameter vector.

With ZeRO-1 every rank keeps the AdamW moments (m, v) only for its own contiguous slice of
the num_parameters-long flat parameter vector, updates only that slice, then the ranks
all-gather the updated parameters. Shards are ceil(n / nproc) elements; the last one(s) are
shorter (possibly empty), so every parameter is owned by exactly one rank.

With Muon some parameters must be owned whole (the Newton-Schulz iteration needs the whole matrix):
zero_plan takes the parameters as units in flat order (ZeroUnit: a range, whole or splittable) and
gives the segments a rank owns (ZeroSegment: a range and where its optimizer state starts in the
rank's state buffers, which hold the owned segments back to back in flat order). Whole units go to
ranks by zero_assign_whole (largest first, ties by lower index, each to the least loaded rank, ties
to the lower rank: train_gpt2.py's owners_by_size), the splittable units' concatenation is cut into
zero_shard's contiguous shards. Without ZeRO (stage 0, or one process) a rank owns every unit and its
state offsets are the flat offsets.
Shared by the CPU trainers (llmc/cpu/cpu_trainer.h: train_gpt2.c, train_llama3.c) and the GPU one (train_gpt2.cu).
*/
#ifndef LLMC_ZERO_H
#define LLMC_ZERO_H

#include <stddef.h>
#include <stdlib.h>

#include "utils.h"

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

typedef struct {
    size_t start;   // first parameter (flat index); units are given in flat order, without gaps or overlap
    size_t size;
    int whole;      // 1: owned whole by one rank (a Muon matrix), 0: may be split across ranks
} ZeroUnit;

typedef struct {
    size_t start;   // first parameter (flat index)
    size_t size;
    size_t state;   // index of its first value in the owning rank's optimizer state buffers
    int unit;       // the unit it belongs to
    int owner;      // the rank that owns it
} ZeroSegment;

// owner[i] for n whole units of the given sizes over nproc ranks, balanced by size
static inline void zero_assign_whole(const size_t* sizes, int n, int nproc, int* owner, size_t* load) {
    for (int r = 0; r < nproc; r++) { load[r] = 0; }
    for (int i = 0; i < n; i++) { owner[i] = -1; }
    for (int k = 0; k < n; k++) {
        int best = -1; // the largest unassigned unit (the lowest index among equals)
        for (int i = 0; i < n; i++) {
            if (owner[i] < 0 && (best < 0 || sizes[i] > sizes[best])) { best = i; }
        }
        int r_min = 0;
        for (int r = 1; r < nproc; r++) {
            if (load[r] < load[r_min]) { r_min = r; }
        }
        owner[best] = r_min;
        load[r_min] += sizes[best];
    }
}

// The segments of every rank (out: room for nunits + nproc segments), in flat order; returns their
// count and sets owned[r] to the number of parameters rank r owns (its state buffers' length).
static inline int zero_plan(const ZeroUnit* units, int nunits, int zero_stage, int nproc, ZeroSegment* out,
                            size_t* owned) {
    int sharded = zero_stage == 1 && nproc > 1;
    int nwhole = 0;
    size_t split_total = 0;
    for (int i = 0; i < nunits; i++) {
        if (units[i].whole) { nwhole++; } else { split_total += units[i].size; }
    }
    size_t* sizes = (size_t*)mallocCheck(((size_t)nwhole + 1) * sizeof(size_t));
    int* whole_owner = (int*)mallocCheck(((size_t)nwhole + 1) * sizeof(int));
    size_t* load = (size_t*)mallocCheck((size_t)nproc * sizeof(size_t));
    for (int i = 0, k = 0; i < nunits; i++) {
        if (units[i].whole) { sizes[k++] = units[i].size; }
    }
    if (sharded) { zero_assign_whole(sizes, nwhole, nproc, whole_owner, load); }
    for (int r = 0; r < nproc; r++) { owned[r] = 0; }
    int count = 0, k = 0;
    size_t split_pos = 0; // position in the concatenation of the splittable units
    for (int i = 0; i < nunits; i++) {
        const ZeroUnit* u = &units[i];
        if (!sharded || u->whole) {
            int r = !sharded ? 0 : whole_owner[k];
            if (u->whole) { k++; }
            ZeroSegment seg = {u->start, u->size, owned[r], i, r};
            out[count++] = seg;
            owned[r] += u->size;
            continue;
        }
        // the pieces of this unit inside each rank's shard of the splittable parameters
        for (int r = 0; r < nproc; r++) {
            ZeroShard sh = zero_shard(split_total, 1, nproc, r);
            size_t lo = sh.offset > split_pos ? sh.offset : split_pos;
            size_t hi = sh.offset + sh.size < split_pos + u->size ? sh.offset + sh.size : split_pos + u->size;
            if (lo >= hi) { continue; }
            ZeroSegment seg = {u->start + (lo - split_pos), hi - lo, owned[r], i, r};
            out[count++] = seg;
            owned[r] += hi - lo;
        }
        split_pos += u->size;
    }
    free(sizes);
    free(whole_owner);
    free(load);
    return count;
}

#endif // LLMC_ZERO_H
