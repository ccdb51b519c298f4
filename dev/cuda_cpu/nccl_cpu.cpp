/*
dev/cuda_cpu/nccl_cpu.cpp: NCCL over MPI ranks, for the CPU execution target of llmc's CUDA code (the
contract: dev/cuda_cpu/include/nccl.h). Test scaffolding, not the product.

Each collective moves the raw bytes with one MPI collective per chunk (at most CHUNK_BYTES from each
rank, so MPI's int counts and the scratch memory stay bounded) and, for reductions, combines the
ranks' values here in rank order, so the result does not depend on MPI's reduction algorithm and is
the same on every rank. Built without USE_MPI, communicators cannot be created (one process needs none).
*/
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <algorithm>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "nccl.h"

#ifdef USE_MPI
#include <mpi.h>
#endif

// most bytes one rank contributes to one MPI call
#define CHUNK_BYTES ((size_t)8 << 20)

struct ncclComm {
    int rank;
    int nranks;
#ifdef USE_MPI
    MPI_Comm mpi;  // a duplicate of MPI_COMM_WORLD: our traffic never mixes with the program's
#endif
};

// ncclGroupStart/End nesting (groups are per thread in NCCL)
static thread_local int g_group_depth = 0;

// a call that NCCL refuses too: say why on stderr (one line), return the status
#define fail(result, fmt, ...) (cuda_cpu_report("NCCL: " fmt, ##__VA_ARGS__), (result))

const char* ncclGetErrorString(ncclResult_t result) {
    switch (result) {
        case ncclSuccess: return "no error";
        case ncclUnhandledCudaError: return "unhandled cuda error";
        case ncclSystemError: return "unhandled system error";
        case ncclInternalError: return "internal error";
        case ncclInvalidArgument: return "invalid argument";
        case ncclInvalidUsage: return "invalid usage";
        case ncclRemoteError: return "remote process exited or there was a network error";
        case ncclInProgress: return "NCCL operation in progress";
        default: return "unknown result code";
    }
}

// ----------------------------------------------------------------------------
// element types

static size_t type_size(ncclDataType_t type) {
    switch (type) {
        case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
        case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
        default: return 0;
    }
}

static const char* type_name(ncclDataType_t type) {
    static const char* names[ncclNumTypes] = {"int8", "uint8", "int32", "uint32", "int64", "uint64",
                                              "half", "float", "double", "bf16", "fp8e4m3", "fp8e5m2"};
    return (type >= 0 && type < ncclNumTypes) ? names[type] : "?";
}

static float half_bits_to_float(uint16_t h) {
    const float sign = (h & 0x8000u) ? -1.0f : 1.0f;
    const int exponent = (h >> 10) & 0x1F;
    const int mantissa = h & 0x3FF;
    if (exponent == 0) { return sign * ldexpf((float)mantissa, -24); }  // zero and subnormals
    if (exponent == 31) { return mantissa == 0 ? sign * INFINITY : NAN; }
    return sign * ldexpf((float)(1024 + mantissa), exponent - 25);
}

// fp32 -> fp16, round to nearest even (what __float2half_rn gives)
static uint16_t float_to_half_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    u &= 0x7FFFFFFFu;
    if (u >= 0x7F800000u) { return (uint16_t)(sign | (u > 0x7F800000u ? 0x7E00u : 0x7C00u)); }  // NaN, Inf
    if (u >= 0x477FF000u) { return (uint16_t)(sign | 0x7C00u); }  // at least halfway past 65504: Inf
    if (u < 0x38800000u) {  // below 2^-14: a subnormal half, in units of 2^-24 (1024 units is the smallest normal)
        return (uint16_t)(sign | (uint16_t)nearbyintf(fabsf(f) * 16777216.0f));
    }
    u -= 112u << 23;  // rebias the exponent from 127 to 15
    return (uint16_t)(sign | ((u + 0xFFFu + ((u >> 13) & 1u)) >> 13));
}

static inline float load_float(const void* p, ncclDataType_t type, size_t i) {
    switch (type) {
        case ncclFloat32: return ((const float*)p)[i];
        case ncclBfloat16: return cuda_cpu_bf16_bits_to_float(((const uint16_t*)p)[i]);
        default: return half_bits_to_float(((const uint16_t*)p)[i]);
    }
}

static inline void store_float(void* p, ncclDataType_t type, size_t i, float v) {
    switch (type) {
        case ncclFloat32: ((float*)p)[i] = v; break;
        case ncclBfloat16: ((uint16_t*)p)[i] = cuda_cpu_float_to_bf16_bits(v); break;
        default: ((uint16_t*)p)[i] = float_to_half_bits(v); break;
    }
}

// ----------------------------------------------------------------------------
// reductions: `blocks` holds nranks blocks of `count` elements, rank 0's first; out gets their
// combination, accumulated in rank order

template <class T> static inline T combine(T acc, T v, ncclRedOp_t op) {
    switch (op) {
        case ncclProd: return acc * v;
        case ncclMax: return std::max(acc, v);
        case ncclMin: return std::min(acc, v);
        default: return acc + v;  // ncclSum, ncclAvg
    }
}
template <> inline float combine<float>(float acc, float v, ncclRedOp_t op) {
    if (op == ncclMax) { return fmaxf(acc, v); }
    if (op == ncclMin) { return fminf(acc, v); }
    return op == ncclProd ? acc * v : acc + v;
}
template <> inline double combine<double>(double acc, double v, ncclRedOp_t op) {
    if (op == ncclMax) { return fmax(acc, v); }
    if (op == ncclMin) { return fmin(acc, v); }
    return op == ncclProd ? acc * v : acc + v;
}

// fp32, bf16, half: in fp32, one rounding at the end
static void reduce_as_float(const char* blocks, int nranks, size_t count, ncclDataType_t type, ncclRedOp_t op, void* out) {
    const size_t block_bytes = count * type_size(type);
    for (size_t i = 0; i < count; i++) {
        float acc = load_float(blocks, type, i);
        for (int r = 1; r < nranks; r++) { acc = combine(acc, load_float(blocks + r * block_bytes, type, i), op); }
        if (op == ncclAvg) { acc /= (float)nranks; }
        store_float(out, type, i, acc);
    }
}

// double and the integers, in their own type (Acc: unsigned for the integers, so sums wrap instead of overflowing)
template <class T, class Acc>
static void reduce_typed(const char* blocks, int nranks, size_t count, ncclRedOp_t op, void* out) {
    for (size_t i = 0; i < count; i++) {
        T first;
        memcpy(&first, blocks + i * sizeof(T), sizeof(T));
        Acc acc = (Acc)first;
        T best = first;  // max and min compare in T's own order
        for (int r = 1; r < nranks; r++) {
            T v;
            memcpy(&v, blocks + ((size_t)r * count + i) * sizeof(T), sizeof(T));
            if (op == ncclMax || op == ncclMin) {
                best = combine(best, v, op);
            } else {
                acc = combine(acc, (Acc)v, op);
            }
        }
        T result = (op == ncclMax || op == ncclMin) ? best : (T)acc;
        if (op == ncclAvg) { result = (T)(result / (T)nranks); }
        memcpy((char*)out + i * sizeof(T), &result, sizeof(T));
    }
}

static void reduce_blocks(const char* blocks, int nranks, size_t count, ncclDataType_t type, ncclRedOp_t op, void* out) {
    switch (type) {
        case ncclFloat32: case ncclBfloat16: case ncclFloat16: reduce_as_float(blocks, nranks, count, type, op, out); break;
        case ncclFloat64: reduce_typed<double, double>(blocks, nranks, count, op, out); break;
        case ncclInt8: reduce_typed<int8_t, uint8_t>(blocks, nranks, count, op, out); break;
        case ncclUint8: reduce_typed<uint8_t, uint8_t>(blocks, nranks, count, op, out); break;
        case ncclInt32: reduce_typed<int32_t, uint32_t>(blocks, nranks, count, op, out); break;
        case ncclUint32: reduce_typed<uint32_t, uint32_t>(blocks, nranks, count, op, out); break;
        case ncclInt64: reduce_typed<int64_t, uint64_t>(blocks, nranks, count, op, out); break;
        case ncclUint64: reduce_typed<uint64_t, uint64_t>(blocks, nranks, count, op, out); break;
        default: break;  // fp8: refused by check_reduction
    }
}

// ----------------------------------------------------------------------------
// argument checks

static ncclResult_t check_call(const char* api, ncclComm_t comm, ncclDataType_t type) {
    if (comm == NULL) { return fail(ncclInvalidArgument, "%s: NULL communicator", api); }
    if (type_size(type) == 0) { return fail(ncclInvalidArgument, "%s: data type %d is not an ncclDataType_t", api, (int)type); }
    return ncclSuccess;
}

static ncclResult_t check_reduction(const char* api, ncclComm_t comm, ncclDataType_t type, ncclRedOp_t op) {
    ncclResult_t r = check_call(api, comm, type);
    if (r != ncclSuccess) { return r; }
    if (op < ncclSum || op >= ncclNumOps) { return fail(ncclInvalidArgument, "%s: reduction op %d is not an ncclRedOp_t", api, (int)op); }
    if (type == ncclFloat8e4m3 || type == ncclFloat8e5m2) {
        return fail(ncclInvalidArgument, "%s: reductions of %s are not emulated", api, type_name(type));
    }
    return ncclSuccess;
}

static ncclResult_t check_root(const char* api, ncclComm_t comm, int root) {
    if (root < 0 || root >= comm->nranks) { return fail(ncclInvalidArgument, "%s: root %d outside [0, %d)", api, root, comm->nranks); }
    return ncclSuccess;
}

// dies with one line unless count elements at buf lie in one device allocation
static void check_buffer(const char* api, const char* name, const void* buf, size_t count, ncclDataType_t type) {
    if (count == 0) { return; }
    char what[160];
    snprintf(what, sizeof(what), "%s %s (%zu elements of %s)", api, name, count, type_name(type));
    cuda_cpu_check_device_range(buf, count * type_size(type), what);
}

// when the collective runs: a sendbuff must have been written (initcheck), a recvbuff counts as written
static void use_buffer(const char* api, const char* name, const void* buf, size_t count, ncclDataType_t type) {
    if (count == 0) { return; }
    char what[160];
    snprintf(what, sizeof(what), "%s %s (%zu elements of %s)", api, name, count, type_name(type));
    if (strcmp(name, "sendbuff") == 0) {
        cuda_cpu_device_reads(buf, count * type_size(type), what);
    } else {
        cuda_cpu_device_writes((void*)buf, count * type_size(type), what);
    }
}

// an MPI call of a collective running in stream order: its failure ends the program with one line
#define MPI_RUN(api, call) \
    do { if ((call) != MPI_SUCCESS) { cuda_cpu_fatal("%s: %s failed", api, #call); } } while (0)

// ----------------------------------------------------------------------------
// communicators

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
    if (uniqueId == NULL) { return fail(ncclInvalidArgument, "ncclGetUniqueId: NULL id"); }
    size_t got = 0;
    while (got < sizeof(uniqueId->internal)) {
        ssize_t r = getrandom(uniqueId->internal + got, sizeof(uniqueId->internal) - got, 0);
        if (r < 0) { return fail(ncclSystemError, "ncclGetUniqueId: getrandom failed"); }
        got += (size_t)r;
    }
    return ncclSuccess;
}

#ifdef USE_MPI
#define MPI_CHECK(api, call) \
    do { if ((call) != MPI_SUCCESS) { return fail(ncclSystemError, "%s: %s failed", api, #call); } } while (0)
#endif

#ifdef USE_MPI
static void finalize_mpi_we_started(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) { MPI_Finalize(); }
}
#endif

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
    const char* api = "ncclCommInitRank";
#ifndef USE_MPI
    (void)comm; (void)nranks; (void)commId; (void)rank;
    return fail(ncclInvalidUsage, "%s: this build has no MPI, and the CPU target's NCCL runs over MPI ranks", api);
#else
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized) { return fail(ncclInvalidUsage, "%s: MPI was already finalised", api); }
    if (!initialized) {
        // -pi tcp|fs: the program itself does not start MPI, but the ranks still need a transport here,
        // so they must have been launched by mpirun; MPI is finalised at exit
        MPI_Init(NULL, NULL);
        atexit(finalize_mpi_we_started);
    }
    int world_size = 0, world_rank = 0;
    MPI_CHECK(api, MPI_Comm_size(MPI_COMM_WORLD, &world_size));
    MPI_CHECK(api, MPI_Comm_rank(MPI_COMM_WORLD, &world_rank));
    // every rank takes part in the checks below, so a refusal is seen everywhere instead of as a hang
    int mine = ncclSuccess;
    char why[256] = "";
    if (comm == NULL) {
        mine = ncclInvalidArgument;
        snprintf(why, sizeof(why), "NULL communicator pointer");
    } else if (nranks != world_size || rank != world_rank) {
        mine = ncclInvalidArgument;
        snprintf(why, sizeof(why), "nranks %d, rank %d, but MPI_COMM_WORLD has %d ranks and this is rank %d",
                 nranks, rank, world_size, world_rank);
    }
    ncclUniqueId root_id = commId;
    MPI_CHECK(api, MPI_Bcast(root_id.internal, NCCL_UNIQUE_ID_BYTES, MPI_BYTE, 0, MPI_COMM_WORLD));
    if (mine == ncclSuccess && memcmp(root_id.internal, commId.internal, NCCL_UNIQUE_ID_BYTES) != 0) {
        mine = ncclInvalidUsage;
        snprintf(why, sizeof(why), "rank %d's unique id differs from rank 0's (a stale or wrongly shared id)", world_rank);
    }
    int worst = ncclSuccess;
    MPI_CHECK(api, MPI_Allreduce(&mine, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (worst != ncclSuccess) {
        if (mine != ncclSuccess) { return fail((ncclResult_t)mine, "%s: %s", api, why); }
        return fail((ncclResult_t)worst, "%s: rank %d: another rank's arguments were refused", api, world_rank);
    }
    ncclComm* c = (ncclComm*)calloc(1, sizeof(ncclComm));
    if (c == NULL) { return fail(ncclSystemError, "%s: out of memory", api); }
    c->rank = rank;
    c->nranks = nranks;
    MPI_CHECK(api, MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi));
    *comm = c;
    return ncclSuccess;
#endif
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (comm == NULL) { return fail(ncclInvalidArgument, "ncclCommDestroy: NULL communicator"); }
    cudaDeviceSynchronize();  // its collectives still pending in stream order run first
#ifdef USE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) { MPI_Comm_free(&comm->mpi); }
#endif
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
    if (comm == NULL || count == NULL) { return fail(ncclInvalidArgument, "ncclCommCount: NULL argument"); }
    *count = comm->nranks;
    return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
    if (comm == NULL || rank == NULL) { return fail(ncclInvalidArgument, "ncclCommUserRank: NULL argument"); }
    *rank = comm->rank;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    g_group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (g_group_depth == 0) { return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart"); }
    g_group_depth--;
    return ncclSuccess;
}

// ----------------------------------------------------------------------------
// collectives (a communicator exists only in an MPI build)

#ifdef USE_MPI

// elements per chunk, so one rank's part of one MPI call stays within CHUNK_BYTES
static size_t chunk_elements(ncclDataType_t type) { return std::max<size_t>(1, CHUNK_BYTES / type_size(type)); }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* api = "ncclAllReduce";
    ncclResult_t r = check_reduction(api, comm, datatype, op);
    if (r != ncclSuccess) { return r; }
    check_buffer(api, "sendbuff", sendbuff, count, datatype);
    check_buffer(api, "recvbuff", recvbuff, count, datatype);
    const size_t bytes = count * type_size(datatype);
    cuda_cpu_enqueue(stream, api, {{sendbuff, 0, bytes}, {recvbuff, 1, bytes}}, [=]() {
        use_buffer(api, "sendbuff", sendbuff, count, datatype);
        use_buffer(api, "recvbuff", recvbuff, count, datatype);
        const size_t size = type_size(datatype), chunk = chunk_elements(datatype);
        std::vector<char> gathered(std::min(count, chunk) * size * (size_t)comm->nranks);
        for (size_t c0 = 0; c0 < count; c0 += chunk) {
            const size_t n = std::min(chunk, count - c0);
            MPI_RUN(api, MPI_Allgather((const char*)sendbuff + c0 * size, (int)(n * size), MPI_BYTE, gathered.data(),
                                       (int)(n * size), MPI_BYTE, comm->mpi));
            reduce_blocks(gathered.data(), comm->nranks, n, datatype, op, (char*)recvbuff + c0 * size);
        }
    });
    return ncclSuccess;
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root,
                        ncclComm_t comm, cudaStream_t stream) {
    const char* api = "ncclReduce";
    ncclResult_t r = check_reduction(api, comm, datatype, op);
    if (r == ncclSuccess) { r = check_root(api, comm, root); }
    if (r != ncclSuccess) { return r; }
    const bool is_root = comm->rank == root;
    check_buffer(api, "sendbuff", sendbuff, count, datatype);
    if (is_root) { check_buffer(api, "recvbuff", recvbuff, count, datatype); }
    const size_t bytes = count * type_size(datatype);
    cuda_cpu_enqueue(stream, api, {{sendbuff, 0, bytes}, {is_root ? recvbuff : nullptr, 1, bytes}}, [=]() {
        use_buffer(api, "sendbuff", sendbuff, count, datatype);
        if (is_root) { use_buffer(api, "recvbuff", recvbuff, count, datatype); }
        const size_t size = type_size(datatype), chunk = chunk_elements(datatype);
        std::vector<char> gathered(is_root ? std::min(count, chunk) * size * (size_t)comm->nranks : 0);
        for (size_t c0 = 0; c0 < count; c0 += chunk) {
            const size_t n = std::min(chunk, count - c0);
            MPI_RUN(api, MPI_Gather((const char*)sendbuff + c0 * size, (int)(n * size), MPI_BYTE, gathered.data(),
                                    (int)(n * size), MPI_BYTE, root, comm->mpi));
            if (is_root) { reduce_blocks(gathered.data(), comm->nranks, n, datatype, op, (char*)recvbuff + c0 * size); }
        }
    });
    return ncclSuccess;
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* api = "ncclBroadcast";
    ncclResult_t r = check_call(api, comm, datatype);
    if (r == ncclSuccess) { r = check_root(api, comm, root); }
    if (r != ncclSuccess) { return r; }
    const bool is_root = comm->rank == root;
    if (is_root) { check_buffer(api, "sendbuff", sendbuff, count, datatype); }  // only the root's is read
    check_buffer(api, "recvbuff", recvbuff, count, datatype);
    const size_t bytes = count * type_size(datatype);
    cuda_cpu_enqueue(stream, api, {{is_root ? sendbuff : nullptr, 0, bytes}, {recvbuff, 1, bytes}}, [=]() {
        const size_t size = type_size(datatype), chunk = chunk_elements(datatype);
        if (is_root) {
            use_buffer(api, "sendbuff", sendbuff, count, datatype);
            use_buffer(api, "recvbuff", recvbuff, count, datatype);
            if (sendbuff != recvbuff && count > 0) { memmove(recvbuff, sendbuff, count * size); }
        } else {
            use_buffer(api, "recvbuff", recvbuff, count, datatype);
        }
        for (size_t c0 = 0; c0 < count; c0 += chunk) {
            const size_t n = std::min(chunk, count - c0);
            MPI_RUN(api, MPI_Bcast((char*)recvbuff + c0 * size, (int)(n * size), MPI_BYTE, root, comm->mpi));
        }
    });
    return ncclSuccess;
}

// in place when sendbuff is recvbuff + rank * sendcount elements: each chunk of sendbuff is copied out
// before any of recvbuff is written
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
    const char* api = "ncclAllGather";
    ncclResult_t r = check_call(api, comm, datatype);
    if (r != ncclSuccess) { return r; }
    check_buffer(api, "sendbuff", sendbuff, sendcount, datatype);
    check_buffer(api, "recvbuff", recvbuff, sendcount * (size_t)comm->nranks, datatype);
    const size_t bytes = sendcount * type_size(datatype);
    cuda_cpu_enqueue(stream, api, {{sendbuff, 0, bytes}, {recvbuff, 1, bytes * (size_t)comm->nranks}}, [=]() {
        use_buffer(api, "sendbuff", sendbuff, sendcount, datatype);
        use_buffer(api, "recvbuff", recvbuff, sendcount * (size_t)comm->nranks, datatype);
        const size_t size = type_size(datatype), chunk = chunk_elements(datatype);
        const size_t most = std::min(sendcount, chunk) * size;
        std::vector<char> mine(most), gathered(most * (size_t)comm->nranks);
        for (size_t c0 = 0; c0 < sendcount; c0 += chunk) {
            const size_t n = std::min(chunk, sendcount - c0), bytes = n * size;
            memcpy(mine.data(), (const char*)sendbuff + c0 * size, bytes);
            MPI_RUN(api, MPI_Allgather(mine.data(), (int)bytes, MPI_BYTE, gathered.data(), (int)bytes, MPI_BYTE, comm->mpi));
            for (int rank = 0; rank < comm->nranks; rank++) {
                memcpy((char*)recvbuff + ((size_t)rank * sendcount + c0) * size, gathered.data() + (size_t)rank * bytes, bytes);
            }
        }
    });
    return ncclSuccess;
}

// rank r gets the reduction of every rank's block r (recvcount elements); in place when recvbuff is
// sendbuff + rank * recvcount elements
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
    const char* api = "ncclReduceScatter";
    ncclResult_t r = check_reduction(api, comm, datatype, op);
    if (r != ncclSuccess) { return r; }
    check_buffer(api, "sendbuff", sendbuff, recvcount * (size_t)comm->nranks, datatype);
    check_buffer(api, "recvbuff", recvbuff, recvcount, datatype);
    const size_t bytes = recvcount * type_size(datatype);
    cuda_cpu_enqueue(stream, api, {{sendbuff, 0, bytes * (size_t)comm->nranks}, {recvbuff, 1, bytes}}, [=]() {
        use_buffer(api, "sendbuff", sendbuff, recvcount * (size_t)comm->nranks, datatype);
        use_buffer(api, "recvbuff", recvbuff, recvcount, datatype);
        const size_t size = type_size(datatype), chunk = chunk_elements(datatype);
        const size_t most = std::min(recvcount, chunk) * size * (size_t)comm->nranks;
        std::vector<char> outgoing(most), incoming(most);
        for (size_t c0 = 0; c0 < recvcount; c0 += chunk) {
            const size_t n = std::min(chunk, recvcount - c0), bytes = n * size;
            for (int rank = 0; rank < comm->nranks; rank++) {  // block `rank` of the message goes to that rank
                memcpy(outgoing.data() + (size_t)rank * bytes, (const char*)sendbuff + ((size_t)rank * recvcount + c0) * size, bytes);
            }
            MPI_RUN(api, MPI_Alltoall(outgoing.data(), (int)bytes, MPI_BYTE, incoming.data(), (int)bytes, MPI_BYTE, comm->mpi));
            reduce_blocks(incoming.data(), comm->nranks, n, datatype, op, (char*)recvbuff + c0 * size);
        }
    });
    return ncclSuccess;
}

#else  // no MPI: no communicator can exist, so every collective is a usage error

static ncclResult_t no_mpi(const char* api) { return fail(ncclInvalidUsage, "%s: this build has no MPI", api); }
ncclResult_t ncclAllReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) { return no_mpi("ncclAllReduce"); }
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t) { return no_mpi("ncclReduce"); }
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) { return no_mpi("ncclBroadcast"); }
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) { return no_mpi("ncclAllGather"); }
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t) { return no_mpi("ncclReduceScatter"); }

#endif
