/*
dev/cuda_cpu/include/nccl.h: NCCL on the CPU, over MPI ranks (the part llmc calls), with NCCL's enum
values. Test scaffolding for the CPU execution target (dev/cuda_cpu/README.md), not the product.

    ncclGetUniqueId       128 random bytes
    ncclCommInitRank      needs MPI initialised (the program runs under mpirun: -pi mpi); nranks and rank
                          must be MPI_COMM_WORLD's size and rank, and every rank must bring the same id
                          (compared with an MPI collective, so a stale id is refused on every rank instead
                          of hanging); else an error status on every rank. The communicator is a
                          duplicate of MPI_COMM_WORLD.
    ncclAllReduce, ncclReduce (only root's recvbuff is written), ncclBroadcast, ncclAllGather,
    ncclReduceScatter     in place or not; sum, prod, max, min, avg (the sum divided by nranks)
    ncclGroupStart/End    calls inside a group run at once, in order (every rank issues the same sequence)

Reductions gather every rank's values and combine them in rank order: floating types in fp32 (fp64 for
ncclDouble), rounded once to the element type (bf16 and half round to nearest even), integers in
their own type; so every rank gets bit-identical results. Data movement works for every type;
reductions of the fp8 types return ncclInvalidArgument. Every buffer is checked against the
device-memory registry over count x element size (AllGather's recvbuff and ReduceScatter's
sendbuff: count x nranks): a host pointer or a too-small buffer ends the program with one line.
Streams are ignored: each call completes before it returns (everything in this target is synchronous).
*/
#ifndef CUDA_CPU_NCCL_H
#define CUDA_CPU_NCCL_H

#include <stddef.h>
#include "cuda_runtime.h"

#define NCCL_UNIQUE_ID_BYTES 128

typedef struct ncclComm* ncclComm_t;

typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
    ncclNumResults = 8,
} ncclResult_t;

typedef enum {
    ncclSum = 0,
    ncclProd = 1,
    ncclMax = 2,
    ncclMin = 3,
    ncclAvg = 4,
    ncclNumOps = 5,
} ncclRedOp_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
    ncclBfloat16 = 9,
    ncclFloat8e4m3 = 10,
    ncclFloat8e5m2 = 11,
    ncclNumTypes = 12,
} ncclDataType_t;

#ifdef __cplusplus
extern "C" {
#endif

const char* ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);

ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif // CUDA_CPU_NCCL_H
