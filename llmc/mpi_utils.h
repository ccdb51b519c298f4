/*
llmc/mpi_utils.h: the few MPI collectives the CPU trainer uses, behind small functions.

Built with -DUSE_MPI (the Makefile does so when mpicc is found) these call MPI; otherwise
they are the single-process identities, so train_gpt2.c has no #ifdefs of its own.
All counts are element counts (floats), never bytes; large buffers go in INT_MAX chunks.
*/
#ifndef LLMC_MPI_UTILS_H
#define LLMC_MPI_UTILS_H

#include <limits.h>
#include <stddef.h>
#include "utils.h"
#include "zero.h"

#ifdef USE_MPI
#include <mpi.h>
#endif

typedef struct {
    int process_rank;
    int num_processes;
} ProcessGroup;

static inline ProcessGroup process_group_init(int* argc, char*** argv) {
    ProcessGroup pg;
    pg.process_rank = 0;
    pg.num_processes = 1;
#ifndef USE_MPI
    (void)argc; (void)argv;
#else
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &pg.process_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &pg.num_processes);
#endif
    return pg;
}

// how many processes of this run share this node (1 without MPI)
static inline int process_group_local_size(const ProcessGroup* pg) {
#ifdef USE_MPI
    if (pg->num_processes == 1) { return 1; }
    MPI_Comm local;
    int n = 1;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, pg->process_rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &n);
    MPI_Comm_free(&local);
    return n;
#else
    (void)pg;
    return 1;
#endif
}

static inline void process_group_finalize(void) {
#ifdef USE_MPI
    MPI_Finalize();
#endif
}

static inline void process_group_barrier(void) {
#ifdef USE_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
}

// buf[i] <- mean over ranks of buf[i], for n floats (sum in MPI, then one division)
static inline void allreduce_mean_floats(float* buf, size_t n, const ProcessGroup* pg) {
#ifdef USE_MPI
    if (pg->num_processes == 1) { return; }
    for (size_t done = 0; done < n;) {
        size_t chunk = n - done < (size_t)INT_MAX ? n - done : (size_t)INT_MAX;
        MPI_Allreduce(MPI_IN_PLACE, buf + done, (int)chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        done += chunk;
    }
    float inv = 1.0f / (float)pg->num_processes;
    for (size_t i = 0; i < n; i++) { buf[i] *= inv; }
#else
    (void)buf; (void)n; (void)pg;
#endif
}

// buf[i] <- sum over ranks of buf[i], for n floats (host scalars: losses, counts)
static inline void allreduce_sum_floats(float* buf, size_t n, const ProcessGroup* pg) {
#ifdef USE_MPI
    if (pg->num_processes == 1) { return; }
    if (n > (size_t)INT_MAX) { llmc_die("internal: %zu floats are too many for one MPI_Allreduce", n); }
    MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#else
    (void)buf; (void)n; (void)pg;
#endif
}

static inline float allreduce_mean_float(float x, const ProcessGroup* pg) {
    allreduce_mean_floats(&x, 1, pg);
    return x;
}

// x summed (take_max 0) or maximised (take_max 1) over ranks
static inline int allreduce_int(int x, int take_max, const ProcessGroup* pg) {
#ifdef USE_MPI
    if (pg->num_processes > 1) {
        MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_INT, take_max ? MPI_MAX : MPI_SUM, MPI_COMM_WORLD);
    }
#else
    (void)take_max; (void)pg;
#endif
    return x;
}

static inline int allreduce_sum_int(int x, const ProcessGroup* pg) { return allreduce_int(x, 0, pg); }
static inline int allreduce_max_int(int x, const ProcessGroup* pg) { return allreduce_int(x, 1, pg); }

// ZeRO-1: after each rank updated its own shard of params (zero_shard), give every rank
// every shard. Needs the shard sizes to fit an int (true below 2^31 * nproc parameters).
static inline void allgather_param_shards(float* params, size_t n, const ProcessGroup* pg) {
#ifdef USE_MPI
    if (pg->num_processes == 1) { return; }
    int nproc = pg->num_processes;
    int* counts = (int*)mallocCheck((size_t)nproc * sizeof(int));
    int* displs = (int*)mallocCheck((size_t)nproc * sizeof(int));
    for (int r = 0; r < nproc; r++) {
        ZeroShard s = zero_shard(n, 1, nproc, r);
        if (s.size > (size_t)INT_MAX || s.offset > (size_t)INT_MAX) {
            llmc_die("ZeRO-1: %zu parameters are too many for one MPI_Allgatherv", n);
        }
        counts[r] = (int)s.size;
        displs[r] = (int)s.offset;
    }
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, params, counts, displs, MPI_FLOAT, MPI_COMM_WORLD);
    free(counts);
    free(displs);
#else
    (void)params; (void)n; (void)pg;
#endif
}

#endif // LLMC_MPI_UTILS_H
