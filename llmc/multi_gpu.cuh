/*
llmc/multi_gpu.cuh: data-parallel training over GPUs and nodes with NCCL (+ MPI, TCP or a shared
file system to exchange the NCCL id), and ZeRO-1 sharding of the optimizer state.

Host half (plain C, compiled by gcc in dev/test/test_multi_gpu_host.c):
    multi_gpu_check_args(...)        validates -pn -pr -pg -pi -ps -pf; returns NULL or the reason
    grad_layer_ranges(cfg, l, ..)    the [lo, hi) ranges of the flat gradient vector that layer l owns
    grad_reduce_ops(lo, hi, ..)      the NCCL calls that reduce one range: element counts, offsets, roots
    zero_padded_size(n, nproc)       the allocation the ZeRO-1 all-gather needs (equal shards)

Device half (nvcc with USE_NCCL): MultiGpu init/free, reduce of one layer's gradients on a
separate stream while the backward pass continues, the scalar all-reduces, and the ZeRO-1
all-gather of the updated parameters, ordered after the optimizer by an event.

ZeRO-1 uses zero.h's contiguous shards of the flat parameter vector (per = ceil(n / nproc)
elements, the last shard shorter). A gradient range is reduced with ncclReduce to each shard
owner it overlaps (together: one reduce-scatter); ZeRO-0 all-reduces the range. Every count
handed to NCCL is an element count (never bytes), computed by grad_reduce_ops and tested.
*/
#ifndef LLMC_MULTI_GPU_CUH
#define LLMC_MULTI_GPU_CUH

#include <stddef.h>
#include <string.h>
#include "utils.h"
#include "zero.h"
#include "model_config.h"

// ----------------------------------------------------------------------------
// host half

// NULL when the multi-process flags are consistent, else the reason (one line)
static inline const char* multi_gpu_check_args(int num_processes, int process_rank, int gpus_per_node,
                                               const char* init_method, const char* server_ip, const char* fs_path,
                                               int have_mpi, int have_nccl) {
    if (num_processes < 1) { return "-pn must be at least 1"; }
    if (process_rank < 0 || process_rank >= num_processes) { return "-pr must be in [0, -pn)"; }
    if (gpus_per_node < 1) { return "-pg must be at least 1"; }
    if (strcmp(init_method, "mpi") != 0 && strcmp(init_method, "tcp") != 0 && strcmp(init_method, "fs") != 0) {
        return "-pi must be one of mpi|tcp|fs";
    }
    if (strcmp(init_method, "tcp") == 0 && num_processes > 1 && (server_ip == NULL || server_ip[0] == '\0')) {
        return "-pi tcp needs the server's IP address (-ps)";
    }
    if (strcmp(init_method, "fs") == 0 && num_processes > 1 && (fs_path == NULL || fs_path[0] == '\0')) {
        return "-pi fs needs a directory shared by all processes (-pf)";
    }
    if (strcmp(init_method, "mpi") == 0 && !have_mpi && num_processes > 1) {
        return "-pi mpi: this build has no MPI (use -pi tcp or -pi fs, or rebuild with MPI)";
    }
    if (!have_nccl && num_processes > 1) {
        return "this build has no NCCL, so it runs on one GPU only (pip install nvidia-nccl-cu13 and rebuild)";
    }
    return NULL;
}

typedef struct {
    size_t lo, hi;
} GradRange;

// tensor offsets in the flat vector, checkpoint order
static inline void grad_tensor_offsets(const GPT2Config* cfg, size_t offsets[GPT2_NUM_PARAMETER_TENSORS],
                                       size_t sizes[GPT2_NUM_PARAMETER_TENSORS]) {
    gpt2_parameter_sizes(sizes, cfg);
    size_t off = 0;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) {
        offsets[i] = off;
        off += sizes[i];
    }
}

// 1 for the per-layer tensors (ln1w .. fcprojb), 0 for wte, wpe, lnfw, lnfb
static inline int grad_tensor_is_per_layer(int i) { return GPT2_PARAMETER_PER_LAYER[i]; }

// the ranges of layer `layer` (12 of them), or with layer = -1 the 4 tensors outside the layers
// (wte, wpe, lnfw, lnfb); returns how many were written to out (capacity 16)
static inline int grad_layer_ranges(const GPT2Config* cfg, int layer, GradRange out[GPT2_NUM_PARAMETER_TENSORS]) {
    size_t offsets[GPT2_NUM_PARAMETER_TENSORS], sizes[GPT2_NUM_PARAMETER_TENSORS];
    grad_tensor_offsets(cfg, offsets, sizes);
    int n = 0;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) {
        if (layer < 0 && !grad_tensor_is_per_layer(i)) {
            out[n].lo = offsets[i];
            out[n].hi = offsets[i] + sizes[i];
            n++;
        } else if (layer >= 0 && grad_tensor_is_per_layer(i)) {
            size_t per_layer = sizes[i] / (size_t)cfg->num_layers;
            out[n].lo = offsets[i] + (size_t)layer * per_layer;
            out[n].hi = out[n].lo + per_layer;
            n++;
        }
    }
    return n;
}

typedef struct {
    size_t offset;  // first element (of the flat vector)
    size_t count;   // number of ELEMENTS
    int root;       // -1: all-reduce; else ncclReduce to this rank (the shard owner)
} GradReduceOp;

// splits [lo, hi) into the NCCL operations that reduce it; returns the number of ops written
// (at most max_ops; 0 and nothing written if more would be needed)
static inline int grad_reduce_ops(size_t lo, size_t hi, size_t n_total, int zero_stage, int nproc,
                                  GradReduceOp* ops, int max_ops) {
    if (hi <= lo) { return 0; }
    if (zero_stage == 0 || nproc <= 1) {
        if (max_ops < 1) { return 0; }
        ops[0].offset = lo;
        ops[0].count = hi - lo;
        ops[0].root = -1;
        return 1;
    }
    size_t per = (n_total + (size_t)nproc - 1) / (size_t)nproc;
    int first = (int)(lo / per), last = (int)((hi - 1) / per);
    if (last - first + 1 > max_ops) { return 0; }
    int k = 0;
    for (int r = first; r <= last; r++) {
        size_t s = (size_t)r * per > lo ? (size_t)r * per : lo;
        size_t e = (size_t)(r + 1) * per < hi ? (size_t)(r + 1) * per : hi;
        ops[k].offset = s;
        ops[k].count = e - s;
        ops[k].root = r;
        k++;
    }
    return k;
}

// elements to allocate for the parameters so that every rank's all-gather send buffer
// (per = ceil(n / nproc) elements at rank * per) lies inside the allocation
static inline size_t zero_padded_size(size_t n, int zero_stage, int nproc) {
    if (zero_stage == 0 || nproc <= 1) { return n; }
    size_t per = (n + (size_t)nproc - 1) / (size_t)nproc;
    return per * (size_t)nproc;
}

// ----------------------------------------------------------------------------
// device half

#ifdef __CUDACC__
#include "cuda_common.cuh"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <time.h>
#ifdef USE_NCCL
#include <nccl.h>
#endif
#ifdef USE_MPI
#include <mpi.h>
#endif

#define MULTI_GPU_TCP_PORT 12345
#define MULTI_GPU_WAIT_SECONDS 600

#ifdef USE_NCCL
static inline void nccl_check(ncclResult_t status, const char* what, const char* file, int line) {
    if (status != ncclSuccess) { llmc_die("NCCL: %s failed: %s (%s:%d)", what, ncclGetErrorString(status), file, line); }
}
#define ncclCheck(call) nccl_check((call), #call, __FILE__, __LINE__)
#if PRECISION_IS_BF16
#define NCCL_FLOATX ncclBfloat16
#else
#define NCCL_FLOATX ncclFloat
#endif
#endif

typedef struct {
    int process_rank;
    int num_processes;
    int local_device_idx;
    int zero_stage;
    int used_mpi;
    ZeroShard shard;          // this rank's slice of the flat parameter vector (all of it with ZeRO-0)
    size_t num_parameters;
    cudaStream_t nccl_stream; // communication runs here, overlapped with the compute stream
    cudaEvent_t compute_ready;
    cudaEvent_t nccl_done;
    float* host_sums;         // device scratch of MULTI_GPU_HOST_SUM_MAX floats for multi_gpu_sum_host_floats
#ifdef USE_NCCL
    ncclComm_t comm;
#endif
} MultiGpu;

// the most host floats one multi_gpu_sum_host_floats call sums (losses, counts, a signal flag)
#define MULTI_GPU_HOST_SUM_MAX 16

#ifdef USE_NCCL
// rank 0 serves the id to the others over TCP
static inline void nccl_id_over_tcp(ncclUniqueId* id, int rank, int nproc, const char* server_ip) {
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons(MULTI_GPU_TCP_PORT);
    if (inet_pton(AF_INET, server_ip, &addr.sin_addr) != 1) { llmc_die("-ps %s: not an IPv4 address", server_ip); }
    if (rank == 0) {
        int server = socket(AF_INET, SOCK_STREAM, 0);
        int one = 1;
        if (server < 0 || setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
            llmc_die("-pi tcp: cannot open a socket: %s", strerror(errno));
        }
        if (bind(server, (struct sockaddr*)&addr, sizeof(addr)) != 0 || listen(server, nproc) != 0) {
            llmc_die("-pi tcp: cannot listen on %s:%d: %s", server_ip, MULTI_GPU_TCP_PORT, strerror(errno));
        }
        for (int i = 1; i < nproc; i++) {
            int client = accept(server, NULL, NULL);
            if (client < 0) { llmc_die("-pi tcp: accept failed: %s", strerror(errno)); }
            if (send(client, id, sizeof(*id), 0) != (ssize_t)sizeof(*id)) { llmc_die("-pi tcp: sending the NCCL id failed: %s", strerror(errno)); }
            close(client);
        }
        close(server);
        return;
    }
    for (int attempt = 0;; attempt++) {
        int sock = socket(AF_INET, SOCK_STREAM, 0);
        if (sock < 0) { llmc_die("-pi tcp: cannot open a socket: %s", strerror(errno)); }
        if (connect(sock, (struct sockaddr*)&addr, sizeof(addr)) == 0) {
            size_t got = 0;
            while (got < sizeof(*id)) {
                ssize_t r = recv(sock, (char*)id + got, sizeof(*id) - got, 0);
                if (r <= 0) { llmc_die("-pi tcp: receiving the NCCL id from %s failed", server_ip); }
                got += (size_t)r;
            }
            close(sock);
            return;
        }
        close(sock);
        if (attempt >= MULTI_GPU_WAIT_SECONDS) { llmc_die("-pi tcp: rank 0 at %s:%d did not answer for %d s", server_ip, MULTI_GPU_TCP_PORT, MULTI_GPU_WAIT_SECONDS); }
        sleep(1);
    }
}

// rank 0 writes the id atomically into the shared directory; the others wait for the file
static inline void nccl_id_over_fs(ncclUniqueId* id, int rank, const char* dir) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/ncclUniqueId.sync", dir);
    if (rank == 0) {
        AtomicFile af;
        atomic_file_open(&af, path);
        atomic_file_write(&af, id, sizeof(*id), 1);
        atomic_file_commit(&af);
        return;
    }
    for (int waited = 0; !file_exists(path); waited++) {
        if (waited >= MULTI_GPU_WAIT_SECONDS) { llmc_die("%s: rank 0 did not write it within %d s (-pi fs)", path, MULTI_GPU_WAIT_SECONDS); }
        sleep(1);
    }
    FILE* f = fopenCheck(path, "rb");
    freadCheck(id, sizeof(*id), 1, f, path);
    fcloseCheck(f, path);
}
#endif

// args: -pn -pr -pg -pi -ps -pf. With -pi mpi the rank and size come from MPI.
static inline void multi_gpu_init(MultiGpu* mg, int* argc, char*** argv, int num_processes, int process_rank,
                                  int gpus_per_node, const char* init_method, const char* server_ip, const char* fs_path,
                                  int zero_stage, size_t num_parameters) {
#ifdef USE_MPI
    const int have_mpi = 1;
#else
    const int have_mpi = 0;
#endif
#ifdef USE_NCCL
    const int have_nccl = 1;
#else
    const int have_nccl = 0;
#endif
    memset(mg, 0, sizeof(*mg));
    mg->num_processes = num_processes;
    mg->process_rank = process_rank;
    mg->local_device_idx = process_rank % gpus_per_node;
    (void)argc;
    (void)argv;
#ifdef USE_MPI
    if (strcmp(init_method, "mpi") == 0) {
        MPI_Init(argc, argv);
        mg->used_mpi = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &mg->process_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &mg->num_processes);
        MPI_Comm local;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mg->process_rank, MPI_INFO_NULL, &local);
        MPI_Comm_rank(local, &mg->local_device_idx);
        MPI_Comm_free(&local);
    }
#endif
    const char* why = multi_gpu_check_args(mg->num_processes, mg->process_rank, gpus_per_node, init_method,
                                           server_ip, fs_path, have_mpi, have_nccl);
    if (why != NULL) { llmc_die("%s", why); }
    int device_count = 0;
    cudaError_t count_err = cudaGetDeviceCount(&device_count);
    if (count_err != cudaSuccess || device_count == 0) {
        llmc_die("no usable NVIDIA GPU on this machine (cudaGetDeviceCount: %s)",
                 count_err != cudaSuccess ? cudaGetErrorString(count_err) : "0 devices");
    }
    if (mg->local_device_idx >= device_count) {
        llmc_die("rank %d wants GPU %d but this node has %d (check -pg)", mg->process_rank, mg->local_device_idx, device_count);
    }
    cudaCheck(cudaSetDevice(mg->local_device_idx));
    mg->zero_stage = mg->num_processes > 1 ? zero_stage : 0;
    mg->num_parameters = num_parameters;
    mg->shard = zero_shard(num_parameters, mg->zero_stage, mg->num_processes, mg->process_rank);
    cudaCheck(cudaStreamCreateWithFlags(&mg->nccl_stream, cudaStreamNonBlocking));
    mg->host_sums = (float*)cudaMallocCheck(MULTI_GPU_HOST_SUM_MAX * sizeof(float));
    cudaCheck(cudaEventCreateWithFlags(&mg->compute_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&mg->nccl_done, cudaEventDisableTiming));
#ifdef USE_NCCL
    if (mg->num_processes > 1) {
        ncclUniqueId id;
        if (mg->process_rank == 0) { ncclCheck(ncclGetUniqueId(&id)); }
        if (strcmp(init_method, "tcp") == 0) {
            nccl_id_over_tcp(&id, mg->process_rank, mg->num_processes, server_ip);
        } else if (strcmp(init_method, "fs") == 0) {
            nccl_id_over_fs(&id, mg->process_rank, fs_path);
        } else {
#ifdef USE_MPI
            MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
        }
        ncclCheck(ncclCommInitRank(&mg->comm, mg->num_processes, id, mg->process_rank));
    }
#endif
}

static inline void multi_gpu_free(MultiGpu* mg) {
#ifdef USE_NCCL
    if (mg->num_processes > 1) { ncclCheck(ncclCommDestroy(mg->comm)); }
#endif
    cudaCheck(cudaFree(mg->host_sums));
    cudaCheck(cudaEventDestroy(mg->compute_ready));
    cudaCheck(cudaEventDestroy(mg->nccl_done));
    cudaCheck(cudaStreamDestroy(mg->nccl_stream));
#ifdef USE_MPI
    if (mg->used_mpi) { MPI_Finalize(); }
#endif
}

// the next work on `waiter` starts after everything queued so far on `signaler`
static inline void stream_wait_stream(cudaStream_t waiter, cudaStream_t signaler, cudaEvent_t event) {
    cudaCheck(cudaEventRecord(event, signaler));
    cudaCheck(cudaStreamWaitEvent(waiter, event, 0));
}

// starts reducing the given gradient ranges (averaged over ranks) once the compute stream has
// produced them; the compute stream does not wait (call multi_gpu_sync before reading the grads)
static inline void multi_gpu_reduce_ranges(MultiGpu* mg, floatX* grads, const GradRange* ranges, int num_ranges,
                                           cudaStream_t compute) {
    if (mg->num_processes == 1) { return; }
#ifdef USE_NCCL
    stream_wait_stream(mg->nccl_stream, compute, mg->compute_ready);
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < num_ranges; r++) {
        GradReduceOp ops[64];
        int n = grad_reduce_ops(ranges[r].lo, ranges[r].hi, mg->num_parameters, mg->zero_stage, mg->num_processes, ops, 64);
        if (n == 0) { llmc_die("multi_gpu: gradient range [%zu, %zu) spans too many shards", ranges[r].lo, ranges[r].hi); }
        for (int k = 0; k < n; k++) {
            floatX* p = grads + ops[k].offset;
            if (ops[k].root < 0) {
                ncclCheck(ncclAllReduce(p, p, ops[k].count, NCCL_FLOATX, ncclAvg, mg->comm, mg->nccl_stream));
            } else {
                ncclCheck(ncclReduce(p, p, ops[k].count, NCCL_FLOATX, ncclAvg, ops[k].root, mg->comm, mg->nccl_stream));
            }
        }
    }
    ncclCheck(ncclGroupEnd());
#else
    (void)grads; (void)ranges; (void)num_ranges; (void)compute;
#endif
}

// the compute stream waits for all communication queued so far
static inline void multi_gpu_sync(MultiGpu* mg, cudaStream_t compute) {
    if (mg->num_processes == 1) { return; }
    stream_wait_stream(compute, mg->nccl_stream, mg->nccl_done);
}

// in-place sum of n floats on the device over all ranks. Like every collective here it runs on the
// NCCL stream (one stream per communicator keeps the collectives in the same order on every rank),
// after the compute stream's work, and the compute stream waits for it.
static inline void multi_gpu_sum_floats(MultiGpu* mg, float* d_values, size_t n, cudaStream_t compute) {
    if (mg->num_processes == 1) { return; }
#ifdef USE_NCCL
    stream_wait_stream(mg->nccl_stream, compute, mg->compute_ready);
    ncclCheck(ncclAllReduce(d_values, d_values, n, ncclFloat, ncclSum, mg->comm, mg->nccl_stream));
    stream_wait_stream(compute, mg->nccl_stream, mg->nccl_done);
#else
    (void)d_values; (void)n; (void)compute;
#endif
}

// ZeRO-1: every rank gets every rank's updated shard. The all-gather runs on the NCCL stream only
// after the optimizer kernels queued on `compute` (event), and the compute stream waits for it
// before the next forward pass. params must hold zero_padded_size(n) elements.
static inline void multi_gpu_gather_params(MultiGpu* mg, floatX* params, cudaStream_t compute) {
    if (mg->num_processes == 1 || mg->zero_stage == 0) { return; }
#ifdef USE_NCCL
    size_t per = zero_padded_size(mg->num_parameters, 1, mg->num_processes) / (size_t)mg->num_processes;
    stream_wait_stream(mg->nccl_stream, compute, mg->compute_ready);
    ncclCheck(ncclAllGather(params + (size_t)mg->process_rank * per, params, per, NCCL_FLOATX, mg->comm, mg->nccl_stream));
    stream_wait_stream(compute, mg->nccl_stream, mg->nccl_done);
#else
    (void)params; (void)compute;
#endif
}

// in-place sum of n host floats over all ranks (the loss of a step, validation losses, HellaSwag
// counts, the signal flag): through the one small device buffer, on the NCCL stream
static inline void multi_gpu_sum_host_floats(MultiGpu* mg, float* values, int n) {
    if (mg->num_processes == 1) { return; }
    if (n < 1 || n > MULTI_GPU_HOST_SUM_MAX) { llmc_die("internal: multi_gpu_sum_host_floats of %d floats", n); }
#ifdef USE_NCCL
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(mg->host_sums, values, (size_t)n * sizeof(float), cudaMemcpyHostToDevice));
    ncclCheck(ncclAllReduce(mg->host_sums, mg->host_sums, (size_t)n, ncclFloat, ncclSum, mg->comm, mg->nccl_stream));
    cudaCheck(cudaStreamSynchronize(mg->nccl_stream));
    cudaCheck(cudaMemcpy(values, mg->host_sums, (size_t)n * sizeof(float), cudaMemcpyDeviceToHost));
#else
    (void)values;
#endif
}

static inline void multi_gpu_barrier(MultiGpu* mg) {
#ifdef USE_MPI
    if (mg->used_mpi && mg->num_processes > 1) { MPI_Barrier(MPI_COMM_WORLD); }
#endif
    if (!mg->used_mpi && mg->num_processes > 1) {
        float zero = 0.0f; // a one-float all-reduce is a barrier for the non-MPI launches
        multi_gpu_sum_host_floats(mg, &zero, 1);
    }
}
#endif // __CUDACC__

#endif // LLMC_MULTI_GPU_CUH
