/*
llmc/mpi_utils.h: the few MPI collectives the CPU trainer uses, behind small functions.

Built with -DUSE_MPI (the Makefile does so when mpicc is found) these call MPI; otherwise
they are the single-process identities, so train_gpt2.c has no #ifdefs of its own.
All counts are element counts (floats), never bytes; large buffers go in INT_MAX chunks.

A program that embeds the CPU trainer and has its own way to talk to the other processes brings it
as a ProcessComm (pyllmc: mpi4py, its extension is built without MPI): a ProcessGroup made by
process_group_with(comm, rank, nproc) sends every collective below through it instead of MPI. The
comm needs only a barrier, an in-place sum and a broadcast of floats; the ZeRO-1 all-gather is one
broadcast per rank's shard (the same bytes as MPI_Allgatherv).
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

// the communication a host program brings instead of MPI; n is at most INT_MAX (the callers chunk)
typedef struct {
    void* ctx;
    int local_size;                                                // processes of this run on this node
    void (*barrier)(void* ctx);
    void (*sum_floats)(void* ctx, float* buf, int n);              // in place, over all processes
    void (*bcast_floats)(void* ctx, float* buf, int n, int root);  // root's buf to every process
} ProcessComm;

typedef struct {
    int process_rank;
    int num_processes;
    const ProcessComm* comm;  // NULL: MPI (USE_MPI) or the only process
} ProcessGroup;

static inline ProcessGroup process_group_init(int* argc, char*** argv) {
    ProcessGroup pg;
    pg.process_rank = 0;
    pg.num_processes = 1;
    pg.comm = NULL;
#ifndef USE_MPI
    (void)argc; (void)argv;
#else
    mpi_singleton_without_fabric(); // (llmc/utils.h)
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &pg.process_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &pg.num_processes);
#endif
    return pg;
}

// rank of nproc processes that talk through comm (process_group_finalize is then the host's business)
static inline ProcessGroup process_group_with(const ProcessComm* comm, int rank, int nproc) {
    ProcessGroup pg = {rank, nproc, comm};
    return pg;
}

// how many processes of this run share this node (1 without MPI)
static inline int process_group_local_size(const ProcessGroup* pg) {
    if (pg->comm != NULL) { return pg->comm->local_size; }
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

static inline void process_group_barrier(const ProcessGroup* pg) {
    if (pg->comm != NULL) {
        if (pg->num_processes > 1) { pg->comm->barrier(pg->comm->ctx); }
        return;
    }
#ifdef USE_MPI
    MPI_Barrier(MPI_COMM_WORLD);
#endif
}

// buf[i] <- sum over ranks of buf[i] for n <= INT_MAX floats, through the group's comm or MPI
static inline void process_group_sum_floats_(float* buf, int n, const ProcessGroup* pg) {
    if (pg->comm != NULL) {
        pg->comm->sum_floats(pg->comm->ctx, buf, n);
        return;
    }
#ifdef USE_MPI
    MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
#else
    (void)buf; (void)n;
#endif
}

// rank root's n <= INT_MAX floats at buf to every rank
static inline void process_group_bcast_floats(float* buf, int n, int root, const ProcessGroup* pg) {
    if (pg->num_processes == 1) { return; }
    if (pg->comm != NULL) {
        pg->comm->bcast_floats(pg->comm->ctx, buf, n, root);
        return;
    }
#ifdef USE_MPI
    MPI_Bcast(buf, n, MPI_FLOAT, root, MPI_COMM_WORLD);
#else
    (void)buf; (void)n; (void)root;
#endif
}

// buf[i] <- mean over ranks of buf[i], for n floats (sum in MPI, then one division)
static inline void allreduce_mean_floats(float* buf, size_t n, const ProcessGroup* pg) {
    if (pg->num_processes == 1) { return; } // without MPI or a comm there is only one
    for (size_t done = 0; done < n;) {
        size_t chunk = n - done < (size_t)INT_MAX ? n - done : (size_t)INT_MAX;
        process_group_sum_floats_(buf + done, (int)chunk, pg);
        done += chunk;
    }
    float inv = 1.0f / (float)pg->num_processes;
    for (size_t i = 0; i < n; i++) { buf[i] *= inv; }
}

// buf[i] <- sum over ranks of buf[i], for n floats (host scalars: losses, counts)
static inline void allreduce_sum_floats(float* buf, size_t n, const ProcessGroup* pg) {
    if (pg->num_processes == 1) { return; }
    if (n > (size_t)INT_MAX) { llmc_die("internal: %zu floats are too many for one MPI_Allreduce", n); }
    process_group_sum_floats_(buf, (int)n, pg);
}
// ZeRO-1: after each rank updated its own shard of params (zero_shard), give every rank
// every shard. Needs the shard sizes to fit an int (true below 2^31 * nproc parameters).
static inline void allgather_param_shards(float* params, size_t n, const ProcessGroup* pg) {
    if (pg->num_processes == 1) { return; }
    if (pg->comm != NULL) { // one broadcast per shard, from its owner
        for (int r = 0; r < pg->num_processes; r++) {
            ZeroShard s = zero_shard(n, 1, pg->num_processes, r);
            if (s.size > (size_t)INT_MAX) { llmc_die("ZeRO-1: %zu parameters are too many for one broadcast per shard", n); }
            process_group_bcast_floats(params + s.offset, (int)s.size, r, pg);
        }
        return;
    }
#ifdef USE_MPI
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
