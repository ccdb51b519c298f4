/*
dev/cuda_cpu/tests/test_nccl_cpu.cpp: the emulated NCCL (dev/cuda_cpu/nccl_cpu.cpp) across MPI ranks,
against expectations every rank computes locally (each rank can generate every rank's input).

    make build/cuda_cpu/test_nccl_cpu && .venv/bin/mpirun -np 2 --oversubscribe build/cuda_cpu/test_nccl_cpu
or by hand, from the repository root (OB = the venv's scipy_openblas32 directory):
    g++ -std=c++17 -O2 -fopenmp -D__CUDACC__ -Idev/cuda_cpu/include -include cuda_runtime.h \
        -DLLMC_BLAS_OPENBLAS -I$OB/include -DUSE_MPI -I.venv/include dev/cuda_cpu/tests/test_nccl_cpu.cpp \
        dev/cuda_cpu/nccl_cpu.cpp dev/cuda_cpu/cublas_cpu.cpp dev/cuda_cpu/runtime.cpp \
        -L$OB/lib -Wl,-rpath,$OB/lib -lscipy_openblas -L.venv/lib -Wl,-rpath,.venv/lib -lmpi -lpthread -o /tmp/test_nccl_cpu
    .venv/bin/mpirun -np 2 --oversubscribe /tmp/test_nccl_cpu      (as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
With 2 ranks a sum has one addition, so rank order and the single rounding only show with 3 or more
(-np 3 runs in about the same time and passes too).

Checks: AllReduce, Reduce (to the first and the last rank; other ranks' recvbuff untouched), Broadcast,
AllGather, ReduceScatter, each in place and out of place, over float, bf16, half, double, int32,
int64 and int8, every reduction op, with counts of 1, 1000 and one that spans several internal
chunks; results bit-exact to a rank-order fp32 reduction rounded once (so identical on every rank);
calls inside ncclGroupStart/End; a communicator refused on every rank for a mismatched unique id (a
stale one) and a wrong nranks or rank (ncclCommInitRank starts MPI itself when the program has not:
-pi tcp|fs runs, tested by tests/test_cuda_cpu.py); and, in child processes, a host pointer or
a too-small buffer ending the program with one line. Needs at least 2 ranks.
Rank 0 prints "test_nccl_cpu: N passed, M failed" (totals over the ranks); every rank exits 1 on any failure.
*/
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <functional>
#include <string>
#include <vector>

#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "nccl.h"
#include "child_process.h"
#include "tally.h"

static int g_rank = 0, g_nranks = 1;

static void die_unless(bool ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "test_nccl_cpu: rank %d: setup failed: %s\n", g_rank, what);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
}

// ----------------------------------------------------------------------------
// element types: every rank's input is a function of (rank, index), exactly representable in its type

static size_t type_size(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: return 1;
        case ncclFloat16: case ncclBfloat16: return 2;
        case ncclInt32: case ncclFloat32: return 4;
        default: return 8;  // ncclInt64, ncclFloat64
    }
}

static const char* type_name(ncclDataType_t t) {
    switch (t) {
        case ncclInt8: return "int8";
        case ncclInt32: return "int32";
        case ncclInt64: return "int64";
        case ncclFloat16: return "half";
        case ncclFloat32: return "float";
        case ncclFloat64: return "double";
        case ncclBfloat16: return "bf16";
        default: return "?";
    }
}

static bool is_integer(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64; }

// x rounded to `bits` significant bits, nearest even (the test's own rounding, independent of the emulation's)
static double round_significant(double x, int bits) {
    if (x == 0.0) { return x; }
    int e;
    double m = frexp(x, &e);
    return ldexp(nearbyint(ldexp(m, bits)), e - bits);
}

// the type's value nearest to x (half: normal values only, which is all this test makes)
static double to_type(ncclDataType_t t, double x) {
    switch (t) {
        case ncclFloat32: return (double)(float)x;
        case ncclBfloat16: return round_significant((double)(float)x, 8);
        case ncclFloat16: return round_significant((double)(float)x, 11);
        default: return x;
    }
}

static uint64_t hash(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return x;
}

// rank r's element i of test `salt`; half stays in [0.25, 1] so every sum, product, max and min is normal
static double input_value(ncclDataType_t t, int rank, size_t i, int salt) {
    const double u = (double)(hash(((uint64_t)salt << 40) ^ ((uint64_t)rank << 32) ^ i) >> 11) / (double)(1ull << 53);  // [0, 1)
    switch (t) {
        case ncclInt8: return (double)((int)(u * 256.0) - 128);
        case ncclInt32: return (double)((int64_t)(u * 2e6) - 1000000);
        case ncclInt64: return (double)((int64_t)(u * 2e4) - 10000);  // products stay exact in the double the test keeps
        case ncclFloat16: return to_type(t, 0.25 + 0.75 * u);
        default: return to_type(t, 2.0 * u - 1.0);
    }
}

static uint16_t half_bits_of_normal(double x) {  // x: an exactly representable normal half
    uint16_t sign = x < 0 ? 0x8000 : 0;
    int e;
    double m = frexp(fabs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
    return (uint16_t)(sign | (uint16_t)((e - 1 + 15) << 10) | (uint16_t)((m * 2.0 - 1.0) * 1024.0));
}

// the bytes of value x (exactly representable) in type t
static void encode(ncclDataType_t t, double x, unsigned char* out) {
    switch (t) {
        case ncclInt8: { int8_t v = (int8_t)(int64_t)x; memcpy(out, &v, 1); break; }
        case ncclInt32: { int32_t v = (int32_t)(int64_t)x; memcpy(out, &v, 4); break; }
        case ncclInt64: { int64_t v = (int64_t)x; memcpy(out, &v, 8); break; }
        case ncclFloat32: { float v = (float)x; memcpy(out, &v, 4); break; }
        case ncclFloat64: memcpy(out, &x, 8); break;
        case ncclBfloat16: { uint16_t v = cuda_cpu_float_to_bf16_bits((float)x); memcpy(out, &v, 2); break; }
        case ncclFloat16: { uint16_t v = half_bits_of_normal(x); memcpy(out, &v, 2); break; }
        default: break;
    }
}

static std::vector<unsigned char> encode_all(ncclDataType_t t, const std::vector<double>& values) {
    std::vector<unsigned char> out(values.size() * type_size(t));
    for (size_t i = 0; i < values.size(); i++) { encode(t, values[i], &out[i * type_size(t)]); }
    return out;
}

static std::vector<double> inputs(ncclDataType_t t, int rank, size_t count, int salt) {
    std::vector<double> v(count);
    for (size_t i = 0; i < count; i++) { v[i] = input_value(t, rank, i, salt); }
    return v;
}

// the reduction of the ranks' element i: floating types accumulate in fp32 (double for double) in rank
// order and round once; integers wrap in their own width
static double expected_reduction(ncclDataType_t t, ncclRedOp_t op, size_t i, int salt) {
    if (is_integer(t)) {
        const int bits = t == ncclInt8 ? 8 : t == ncclInt32 ? 32 : 64;
        auto wrap = [bits](uint64_t v) -> int64_t {
            if (bits == 64) { return (int64_t)v; }
            v &= (1ull << bits) - 1;
            return (v >> (bits - 1)) ? (int64_t)v - (int64_t)(1ull << bits) : (int64_t)v;
        };
        uint64_t acc = (uint64_t)(int64_t)input_value(t, 0, i, salt);
        int64_t best = (int64_t)input_value(t, 0, i, salt);
        for (int r = 1; r < g_nranks; r++) {
            const int64_t v = (int64_t)input_value(t, r, i, salt);
            if (op == ncclProd) { acc = (uint64_t)wrap(acc) * (uint64_t)v; } else { acc += (uint64_t)v; }
            best = op == ncclMax ? (v > best ? v : best) : (v < best ? v : best);
        }
        if (op == ncclMax || op == ncclMin) { return (double)best; }
        int64_t result = wrap(acc);
        if (op == ncclAvg) { result = wrap((uint64_t)(result / g_nranks)); }
        return (double)result;
    }
    if (t == ncclFloat64) {
        double acc = input_value(t, 0, i, salt);
        for (int r = 1; r < g_nranks; r++) {
            const double v = input_value(t, r, i, salt);
            acc = op == ncclProd ? acc * v : op == ncclMax ? fmax(acc, v) : op == ncclMin ? fmin(acc, v) : acc + v;
        }
        return op == ncclAvg ? acc / g_nranks : acc;
    }
    float acc = (float)input_value(t, 0, i, salt);
    for (int r = 1; r < g_nranks; r++) {
        const float v = (float)input_value(t, r, i, salt);
        acc = op == ncclProd ? acc * v : op == ncclMax ? fmaxf(acc, v) : op == ncclMin ? fminf(acc, v) : acc + v;
    }
    if (op == ncclAvg) { acc /= (float)g_nranks; }
    return to_type(t, (double)acc);
}

// ----------------------------------------------------------------------------
// device buffers

static void* device_with(const std::vector<unsigned char>& bytes, size_t alloc_bytes) {
    void* p = NULL;
    die_unless(cudaMalloc(&p, alloc_bytes > 0 ? alloc_bytes : 1) == cudaSuccess, "cudaMalloc");
    if (!bytes.empty()) { die_unless(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess, "upload"); }
    return p;
}

static std::vector<unsigned char> device_bytes(const void* p, size_t bytes) {
    std::vector<unsigned char> out(bytes);
    if (bytes > 0) { die_unless(cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost) == cudaSuccess, "download"); }
    return out;
}

static const ncclDataType_t TYPES[] = {ncclFloat32, ncclBfloat16, ncclFloat16, ncclFloat64, ncclInt32, ncclInt64, ncclInt8};
static const ncclRedOp_t OPS[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
static const char* OP_NAMES[] = {"sum", "prod", "max", "min", "avg"};

// ----------------------------------------------------------------------------
// the collectives

static void test_all_reduce(ncclComm_t comm, ncclDataType_t t, ncclRedOp_t op, size_t count, bool in_place, int salt) {
    const size_t size = type_size(t);
    void* send = device_with(encode_all(t, inputs(t, g_rank, count, salt)), count * size);
    void* recv = in_place ? send : device_with({}, count * size);
    ncclResult_t r = ncclAllReduce(send, recv, count, t, op, comm, 0);
    std::vector<double> want(count);
    for (size_t i = 0; i < count; i++) { want[i] = expected_reduction(t, op, i, salt); }
    const bool same = device_bytes(recv, count * size) == encode_all(t, want);
    check(r == ncclSuccess && same, "ncclAllReduce %s %s count %zu %s: result %d, %s", type_name(t), OP_NAMES[op], count,
          in_place ? "in place" : "out of place", (int)r, same ? "bit-exact" : "differs");
    cudaFree(send);
    if (!in_place) { cudaFree(recv); }
}

static void test_reduce(ncclComm_t comm, ncclDataType_t t, ncclRedOp_t op, size_t count, bool in_place, int root, int salt) {
    const size_t size = type_size(t);
    const std::vector<unsigned char> mine = encode_all(t, inputs(t, g_rank, count, salt));
    void* send = device_with(mine, count * size);
    const std::vector<unsigned char> sentinel(count * size, 0xA5);
    void* recv = in_place ? send : device_with(sentinel, count * size);
    ncclResult_t r = ncclReduce(send, recv, count, t, op, root, comm, 0);
    bool ok;
    if (g_rank == root) {
        std::vector<double> want(count);
        for (size_t i = 0; i < count; i++) { want[i] = expected_reduction(t, op, i, salt); }
        ok = device_bytes(recv, count * size) == encode_all(t, want);
    } else {  // only the root's recvbuff is written
        ok = device_bytes(recv, count * size) == (in_place ? mine : sentinel);
    }
    check(r == ncclSuccess && ok, "ncclReduce %s %s count %zu root %d %s: result %d, %s", type_name(t), OP_NAMES[op], count, root,
          in_place ? "in place" : "out of place", (int)r, ok ? "ok" : "wrong");
    cudaFree(send);
    if (!in_place) { cudaFree(recv); }
}

static void test_broadcast(ncclComm_t comm, ncclDataType_t t, size_t count, bool in_place, int root, int salt) {
    const size_t size = type_size(t);
    void* send = device_with(encode_all(t, inputs(t, g_rank, count, salt)), count * size);
    void* recv = in_place ? send : device_with({}, count * size);
    ncclResult_t r = ncclBroadcast(send, recv, count, t, root, comm, 0);
    const bool ok = device_bytes(recv, count * size) == encode_all(t, inputs(t, root, count, salt));
    check(r == ncclSuccess && ok, "ncclBroadcast %s count %zu root %d %s: result %d", type_name(t), count, root,
          in_place ? "in place" : "out of place", (int)r);
    cudaFree(send);
    if (!in_place) { cudaFree(recv); }
}

// in place as llmc's ZeRO-1 gather: sendbuff = recvbuff + rank * count
static void test_all_gather(ncclComm_t comm, ncclDataType_t t, size_t count, bool in_place, int salt) {
    const size_t size = type_size(t);
    std::vector<double> want;
    for (int r = 0; r < g_nranks; r++) {
        std::vector<double> part = inputs(t, r, count, salt);
        want.insert(want.end(), part.begin(), part.end());
    }
    const std::vector<unsigned char> mine = encode_all(t, inputs(t, g_rank, count, salt));
    void* recv = device_with({}, count * size * (size_t)g_nranks);
    void* send;
    if (in_place) {
        send = (char*)recv + (size_t)g_rank * count * size;
        if (count > 0) { cudaMemcpy(send, mine.data(), mine.size(), cudaMemcpyHostToDevice); }
    } else {
        send = device_with(mine, count * size);
    }
    ncclResult_t r = ncclAllGather(send, recv, count, t, comm, 0);
    const bool ok = device_bytes(recv, count * size * (size_t)g_nranks) == encode_all(t, want);
    check(r == ncclSuccess && ok, "ncclAllGather %s count %zu %s: result %d", type_name(t), count, in_place ? "in place" : "out of place", (int)r);
    if (!in_place) { cudaFree(send); }
    cudaFree(recv);
}

// rank r's input is nranks blocks of count; it gets the reduction of everyone's block r.
// In place: recvbuff = sendbuff + rank * count
static void test_reduce_scatter(ncclComm_t comm, ncclDataType_t t, ncclRedOp_t op, size_t count, bool in_place, int salt) {
    const size_t size = type_size(t), total = count * (size_t)g_nranks;
    void* send = device_with(encode_all(t, inputs(t, g_rank, total, salt)), total * size);
    void* recv = in_place ? (char*)send + (size_t)g_rank * count * size : device_with({}, count * size);
    ncclResult_t r = ncclReduceScatter(send, recv, count, t, op, comm, 0);
    std::vector<double> want(count);
    for (size_t i = 0; i < count; i++) { want[i] = expected_reduction(t, op, (size_t)g_rank * count + i, salt); }
    const bool ok = device_bytes(recv, count * size) == encode_all(t, want);
    check(r == ncclSuccess && ok, "ncclReduceScatter %s %s count %zu %s: result %d", type_name(t), OP_NAMES[op], count,
          in_place ? "in place" : "out of place", (int)r);
    cudaFree(send);
    if (!in_place) { cudaFree(recv); }
}

static void test_collectives(ncclComm_t comm) {
    int salt = 1;
    const size_t counts[] = {1, 1000};
    for (ncclDataType_t t : TYPES) {
        for (size_t count : counts) {
            for (int in_place = 0; in_place < 2; in_place++) {
                for (ncclRedOp_t op : OPS) {
                    test_all_reduce(comm, t, op, count, in_place, salt++);
                    test_reduce(comm, t, op, count, in_place, 0, salt++);
                    test_reduce(comm, t, op, count, in_place, g_nranks - 1, salt++);
                    test_reduce_scatter(comm, t, op, count, in_place, salt++);
                }
                test_broadcast(comm, t, count, in_place, g_nranks - 1, salt++);
                test_all_gather(comm, t, count, in_place, salt++);
            }
        }
    }
    // more than one internal chunk (8 MiB from each rank per MPI call), in llmc's two types
    const size_t big = (3u << 20) + 123;
    for (ncclDataType_t t : {ncclFloat32, ncclBfloat16}) {
        test_all_reduce(comm, t, ncclAvg, big, true, salt++);
        test_reduce(comm, t, ncclAvg, big, true, 1, salt++);
        test_all_gather(comm, t, big, true, salt++);
        test_reduce_scatter(comm, t, ncclSum, big, false, salt++);
        test_broadcast(comm, t, big, false, 0, salt++);
    }
    // zero elements: nothing moves, nothing fails
    check(ncclAllReduce(NULL, NULL, 0, ncclFloat, ncclSum, comm, 0) == ncclSuccess, "ncclAllReduce of 0 elements");
}

// what llmc/cuda/multi_gpu.cuh does per layer: a group of all-reduces and reduces to shard owners
static void test_group(ncclComm_t comm) {
    const size_t n = 4096, size = type_size(ncclBfloat16);
    const int salt = 9000;
    void* grads = device_with(encode_all(ncclBfloat16, inputs(ncclBfloat16, g_rank, n, salt)), n * size);
    check(ncclGroupStart() == ncclSuccess, "ncclGroupStart");
    ncclResult_t a = ncclAllReduce(grads, grads, 1000, ncclBfloat16, ncclAvg, comm, 0);
    ncclResult_t b = ncclReduce((char*)grads + 1000 * size, (char*)grads + 1000 * size, 3096, ncclBfloat16, ncclAvg, 1, comm, 0);
    check(ncclGroupEnd() == ncclSuccess && a == ncclSuccess && b == ncclSuccess, "a group of an all-reduce and a reduce");
    std::vector<double> want = inputs(ncclBfloat16, g_rank, n, salt);
    for (size_t i = 0; i < n; i++) {
        if (i < 1000 || g_rank == 1) { want[i] = expected_reduction(ncclBfloat16, ncclAvg, i, salt); }
    }
    check(device_bytes(grads, n * size) == encode_all(ncclBfloat16, want), "the group's results (all-reduce everywhere, reduce on rank 1)");
    check(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart is refused");
    cudaFree(grads);
}

// ----------------------------------------------------------------------------
// communicators refused on every rank

static void test_refused_communicators(const ncclUniqueId& shared) {
    ncclComm_t comm = NULL;
    ncclUniqueId own;
    ncclGetUniqueId(&own);  // every rank draws its own: a stale id looks like this
    ncclResult_t r = ncclCommInitRank(&comm, g_nranks, own, g_rank);
    check(r == ncclInvalidUsage && comm == NULL, "mismatched unique ids are refused on every rank (result %d: %s)", (int)r, ncclGetErrorString(r));
    r = ncclCommInitRank(&comm, g_nranks + 1, shared, g_rank);
    check(r == ncclInvalidArgument && comm == NULL, "nranks != MPI's size is refused on every rank (result %d)", (int)r);
    r = ncclCommInitRank(&comm, g_nranks, shared, (g_rank + 1) % g_nranks);
    check(r == ncclInvalidArgument && comm == NULL, "a rank != MPI's rank is refused on every rank (result %d)", (int)r);
    // and the shared id still works afterwards
    r = ncclCommInitRank(&comm, g_nranks, shared, g_rank);
    check(r == ncclSuccess && comm != NULL, "the shared id is accepted after the refusals (result %d)", (int)r);
    int count = 0, rank = -1;
    check(ncclCommCount(comm, &count) == ncclSuccess && count == g_nranks && ncclCommUserRank(comm, &rank) == ncclSuccess && rank == g_rank,
          "ncclCommCount / ncclCommUserRank");
    check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
}

// ----------------------------------------------------------------------------
// child processes: the registry's and the stream-order check's one-line reports

// The registry cases run in fresh single-rank MPI processes (this program, exec'd with --death-case
// and without mpirun's environment): a collective that wrongly got past its check then completes
// on its own instead of talking to the test's ranks through a forked copy of their MPI state.
struct DeathCase {
    const char* name;
    const char* must_contain;  // in the one line on stderr, with also_contains
    const char* also_contains;
};
static const char* NOT_DEVICE = "not inside one device allocation";
static const DeathCase DEATH_CASES[] = {
    {"host-sendbuff", "ncclAllReduce sendbuff (256 elements of float)", NOT_DEVICE},
    {"allgather-recvbuff-short", "ncclAllGather recvbuff (256 elements of float)", NOT_DEVICE},
    {"reducescatter-sendbuff-short", "ncclReduceScatter sendbuff (256 elements of float)", NOT_DEVICE},
    {"reduce-recvbuff-short", "ncclReduce recvbuff (256 elements of bf16)", NOT_DEVICE},
    // the collective's result read on the compute stream, which never waited for the communication stream
    {"allreduce-result-unwaited", "stream order: cudaMemcpyAsync on a blocking stream would run before ncclAllReduce, issued "
                                  "earlier to a non-blocking stream", "both use 1020 bytes at offset 0 of a device allocation"},
};

// in the exec'd child: calls the collective that must die; returns 0 if it did not
static int run_death_case(const char* name) {
    MPI_Init(NULL, NULL);
    ncclUniqueId id;
    ncclComm_t comm;
    ncclGetUniqueId(&id);
    die_unless(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "single-rank communicator");
    const size_t n = 256;
    void* dev = device_with({}, n * 4);
    void* short_by_one = device_with({}, (n - 1) * 4);
    void* bf16_short = device_with({}, (n - 1) * 2);
    std::vector<float> host(n);
    if (strcmp(name, "host-sendbuff") == 0) { ncclAllReduce(host.data(), dev, n, ncclFloat, ncclSum, comm, 0); }
    if (strcmp(name, "allgather-recvbuff-short") == 0) { ncclAllGather(dev, short_by_one, n, ncclFloat, comm, 0); }
    if (strcmp(name, "reducescatter-sendbuff-short") == 0) { ncclReduceScatter(short_by_one, dev, n, ncclFloat, ncclSum, comm, 0); }
    if (strcmp(name, "reduce-recvbuff-short") == 0) { ncclReduce(dev, bf16_short, n, ncclBfloat16, ncclSum, 0, comm, 0); }
    if (strcmp(name, "allreduce-result-unwaited") == 0) {
        cudaStream_t compute, communication;
        cudaStreamCreate(&compute);
        cudaStreamCreateWithFlags(&communication, cudaStreamNonBlocking);
        cudaMemset(dev, 0, n * 4);
        cudaDeviceSynchronize();
        ncclAllReduce(dev, dev, n, ncclFloat, ncclSum, comm, communication);
        cudaMemcpyAsync(short_by_one, dev, (n - 1) * 4, cudaMemcpyDeviceToDevice, compute);  // no cudaStreamWaitEvent
        cudaStreamSynchronize(compute);
    }
    MPI_Finalize();
    return 0;
}

static void test_registry_checks(void) {
    static const char* keep[] = {"PATH", "HOME", "TMPDIR", "LD_LIBRARY_PATH", "OMPI_ALLOW_RUN_AS_ROOT", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"};
    for (const DeathCase& c : DEATH_CASES) {
        std::string err;
        const int code = run_in_child([&]() {
            std::vector<std::string> env_strings;
            for (const char* k : keep) {
                if (getenv(k) != NULL) { env_strings.push_back(std::string(k) + "=" + getenv(k)); }
            }
            env_strings.push_back("OMPI_MCA_btl=self");  // one rank needs no network (probing for one takes a second)
            std::vector<char*> env;
            for (std::string& e : env_strings) { env.push_back(&e[0]); }
            env.push_back(NULL);
            char self[] = "test_nccl_cpu", flag[] = "--death-case";
            char* args[] = {self, flag, (char*)c.name, NULL};
            execve("/proc/self/exe", args, env.data());
            return 127;
        }, &err, 60);
        // the one line of the report (MPI may add nothing: the process dies before MPI_Finalize)
        int lines = 0;
        for (char ch : err) { lines += ch == '\n'; }
        const bool ok = code == 1 && lines == 1 && err.rfind("cuda_cpu: ", 0) == 0 && err.find(c.must_contain) != std::string::npos &&
                        err.find(c.also_contains) != std::string::npos;
        check(ok, "%s ends the program with one line: exit %d, stderr: %s", c.name, code, err.c_str());
    }
}

int main(int argc, char** argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--death-case") == 0) { return run_death_case(argv[2]); }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    snprintf(g_tally_prefix, sizeof(g_tally_prefix), "rank %d: ", g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_nranks);
    die_unless(g_nranks >= 2, "run with mpirun -np 2 (or more)");

    ncclUniqueId id;
    if (g_rank == 0) { die_unless(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId"); }
    MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
    test_refused_communicators(id);

    ncclComm_t comm;
    die_unless(ncclCommInitRank(&comm, g_nranks, id, g_rank) == ncclSuccess, "ncclCommInitRank");
    test_collectives(comm);
    test_group(comm);
    if (g_rank == 0) { test_registry_checks(); }  // the same on every rank: once is enough
    for (int r = ncclSuccess; r <= ncclNumResults; r++) {
        check(ncclGetErrorString((ncclResult_t)r) != NULL && ncclGetErrorString((ncclResult_t)r)[0] != '\0', "ncclGetErrorString(%d)", r);
    }
    check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");

    int local[2] = {g_passed, g_failed}, total[2] = {0, 0};
    MPI_Allreduce(local, total, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) { printf("test_nccl_cpu: %d passed, %d failed (%d ranks)\n", total[0], total[1], g_nranks); }
    MPI_Finalize();
    return total[1] == 0 ? 0 : 1;
}
