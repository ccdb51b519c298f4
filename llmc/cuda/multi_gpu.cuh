/*
llmc/cuda/multi_gpu.cuh: data-parallel training over GPUs and nodes with NCCL (+ MPI, TCP or a shared
file system to exchange the NCCL id), and ZeRO-1 sharding of the optimizer state.

Host half (plain C, compiled by gcc in dev/test/test_multi_gpu_host.c):
    multi_gpu_check_args(...)        validates -pn -pr -pg -pi -ps -pf; returns NULL or the reason
    grad_table_layer_ranges(..)      the [lo, hi) ranges of the flat gradient vector that layer l owns, for
                                     any model's tensor table (offsets, sizes, per-layer flags)
    grad_layer_ranges(cfg, l, ..)    the same for GPT-2's table
    grad_reduce_ops(lo, hi, ..)      the NCCL calls that reduce one range: element counts, offsets, roots
    zero_padded_size(n, nproc)       the allocation the ZeRO-1 all-gather needs (equal shards)
    multi_gpu_fs_nonce/_id_path/_publish/_fetch/_retire   the -pi fs file protocol (below)

Device half (nvcc with USE_NCCL): MultiGpu init/free, reduce of one layer's gradients on a
separate stream while the backward pass continues, the scalar all-reduces, and the ZeRO-1
all-gather of the updated parameters, ordered after the optimizer by an event.

ZeRO-1 uses zero.h's contiguous shards of the flat parameter vector (per = ceil(n / nproc)
elements, the last shard shorter). A gradient range is reduced with ncclReduce to each shard
owner it overlaps (together: one reduce-scatter); ZeRO-0 all-reduces the range (as ZeRO-1 does for
Muon's matrices, which their owners update whole and broadcast: multi_gpu_broadcast_ranges). Every count
handed to NCCL is an element count (never bytes), computed by grad_reduce_ops and tested.

-pi fs -pf DIR: rank 0 writes the NCCL id to DIR/ncclUniqueId.<nonce>.sync, the others wait for it
and read it. A file left in DIR by an earlier launch must never be taken: its id names a rank 0 that
is gone, and the ranks would hang in ncclCommInitRank. Three rules see to that:
  1. the file name carries a nonce that every rank of this launch shares and no other launch has: the
     launcher's id of the launch (multi_gpu_fs_nonce, first found wins): LLMC_RUN_ID, set by the user
     (computed ONCE per launch and exported to every rank, e.g. LLMC_RUN_ID=$(date +%s%N) in the launch
     script); SLURM_JOB_ID + SLURM_STEP_ID (+ SLURM_RESTART_COUNT of a requeued job) under srun;
     PMIX_NAMESPACE under a PMIx launcher; OMPI_MCA_ess_base_jobid under Open MPI's mpirun. Without
     any, -pi fs refuses to start (one error line). A stale file of another launch has another name.
  2. rank 0 writes the file atomically (temporary file + rename, utils.h AtomicFile), so a reader sees
     all of it or nothing, and refuses to start when its file already exists (a launch with the same
     nonce died before rule 3): the launch fails with one line instead of hanging.
  3. rank 0 removes the file as soon as its ncclCommInitRank has returned: that call returns only once
     every rank has joined with the id, so every rank has read the file by then.
The file holds a magic, the nonce and the id; a reader checks all three (one error line on a mismatch).
*/
#ifndef LLMC_MULTI_GPU_CUH
#define LLMC_MULTI_GPU_CUH

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../utils.h"
#include "../zero.h"
#include "../gpt2.h"

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

// For num_tensors tensors laid back to back (offsets[i], sizes[i] elements; per_layer[i]: num_layers slices
// of equal size, one per layer): the ranges of layer `layer`, one per per-layer tensor, or with layer = -1
// the tensors outside the layers; returns how many were written to out (capacity num_tensors)
static inline int grad_table_layer_ranges(const size_t* offsets, const size_t* sizes, const int* per_layer, int num_tensors,
                                          int num_layers, int layer, GradRange* out) {
    int n = 0;
    for (int i = 0; i < num_tensors; i++) {
        if (layer < 0 && !per_layer[i]) {
            out[n].lo = offsets[i];
            out[n].hi = offsets[i] + sizes[i];
            n++;
        } else if (layer >= 0 && per_layer[i]) {
            size_t per = sizes[i] / (size_t)num_layers;
            out[n].lo = offsets[i] + (size_t)layer * per;
            out[n].hi = out[n].lo + per;
            n++;
        }
    }
    return n;
}

// GPT-2: the ranges of layer `layer` (12 of them), or with layer = -1 the 4 tensors outside the layers
// (wte, wpe, lnfw, lnfb); returns how many were written to out (capacity 16)
static inline int grad_layer_ranges(const GPT2Config* cfg, int layer, GradRange out[GPT2_NUM_PARAMETER_TENSORS]) {
    size_t offsets[GPT2_NUM_PARAMETER_TENSORS], sizes[GPT2_NUM_PARAMETER_TENSORS];
    grad_tensor_offsets(cfg, offsets, sizes);
    return grad_table_layer_ranges(offsets, sizes, GPT2_PARAMETER_PER_LAYER, GPT2_NUM_PARAMETER_TENSORS, cfg->num_layers,
                                   layer, out);
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
// -pi fs: the NCCL id through a shared directory (the rules in the header comment)

#define MULTI_GPU_FS_MAGIC "llmcNCCL"  // 8 bytes, then uint32 nonce length, nonce, uint32 id length, id
#define MULTI_GPU_FS_NONCE_MAX 200

// an environment lookup (getenv; tests pass their own)
typedef const char* (*MultiGpuGetenv)(const char* name);
static inline const char* multi_gpu_getenv(const char* name) { return getenv(name); }

// With -pi tcp|fs the processes are numbered by -pn/-pr, not by MPI. A process that an MPI launcher
// started as one of several (mpirun sets OMPI_COMM_WORLD_SIZE/RANK, MPICH's hydra PMI_SIZE/RANK) but
// that was told -pn 1, or another rank than the launcher's, would train on its own and write the same
// checkpoints as its siblings: NULL when the numbering agrees, else the reason (one line, in `buf`).
// (A build without MPI numbers its processes by -pn/-pr whatever -pi says, so it is checked too.)
static inline const char* multi_gpu_check_launcher(int num_processes, int process_rank, const char* init_method,
                                                   int have_mpi, MultiGpuGetenv get, char* buf, size_t cap) {
    if (strcmp(init_method, "mpi") == 0 && have_mpi) { return NULL; }
    static const char* const vars[2][2] = {{"OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"}, {"PMI_SIZE", "PMI_RANK"}};
    for (int k = 0; k < 2; k++) {
        const char* size = get(vars[k][0]);
        const char* rank = get(vars[k][1]);
        if (size == NULL || rank == NULL || atoi(size) <= 1) { continue; }
        if (atoi(size) != num_processes || atoi(rank) != process_rank) {
            snprintf(buf, cap, "%s%s: this process was launched as rank %s of %s (%s) but -pn %d -pr %d say otherwise: "
                     "pass the launcher's numbering to -pn/-pr%s", have_mpi ? "-pi " : "this build has no MPI, -pi ",
                     init_method, rank, size, vars[k][0], num_processes, process_rank,
                     have_mpi ? ", or use -pi mpi" : " with -pi tcp|fs, or rebuild with MPI");
            return buf;
        }
    }
    return NULL;
}

// The nonce of this launch into out (see the header comment); returns the variables it came from, or
// NULL when the environment has none (out is then ""). Dies when the value is longer than
// MULTI_GPU_FS_NONCE_MAX characters.
static inline const char* multi_gpu_fs_nonce(char* out, size_t cap, MultiGpuGetenv get) {
    const char* user = get("LLMC_RUN_ID");
    const char* job = get("SLURM_JOB_ID");
    const char* step = get("SLURM_STEP_ID") != NULL ? get("SLURM_STEP_ID") : get("SLURM_STEPID");
    const char* restart = get("SLURM_RESTART_COUNT");
    const char* pmix = get("PMIX_NAMESPACE");
    const char* ompi = get("OMPI_MCA_ess_base_jobid");
    char buf[3 * MULTI_GPU_FS_NONCE_MAX];
    const char* source = NULL;
    buf[0] = '\0';
    if (user != NULL && user[0] != '\0') {
        snprintf(buf, sizeof(buf), "%s", user);
        source = "LLMC_RUN_ID";
    } else if (job != NULL && job[0] != '\0') {
        snprintf(buf, sizeof(buf), "slurm-%s.%s%s%s", job, step != NULL ? step : "batch",
                 restart != NULL && restart[0] != '\0' ? ".r" : "", restart != NULL ? restart : "");
        source = "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT";
    } else if (pmix != NULL && pmix[0] != '\0') {
        snprintf(buf, sizeof(buf), "pmix-%s", pmix);
        source = "PMIX_NAMESPACE";
    } else if (ompi != NULL && ompi[0] != '\0') {
        snprintf(buf, sizeof(buf), "ompi-%s", ompi);
        source = "OMPI_MCA_ess_base_jobid";
    }
    if (strlen(buf) > MULTI_GPU_FS_NONCE_MAX || strlen(buf) >= cap) {
        llmc_die("-pi fs: the launch id from %s is longer than %d characters", source, MULTI_GPU_FS_NONCE_MAX);
    }
    memcpy(out, buf, strlen(buf) + 1);
    return source;
}

// DIR/ncclUniqueId.<nonce>.sync, the nonce's characters other than [A-Za-z0-9._-] written as '_'
static inline void multi_gpu_fs_id_path(char* out, size_t cap, const char* dir, const char* nonce) {
    char safe[MULTI_GPU_FS_NONCE_MAX + 1];
    size_t n = 0;
    for (; nonce[n] != '\0' && n < MULTI_GPU_FS_NONCE_MAX; n++) {
        char c = nonce[n];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
        safe[n] = ok ? c : '_';
    }
    safe[n] = '\0';
    int len = snprintf(out, cap, "%s/ncclUniqueId.%s.sync", dir, safe);
    if (len < 0 || (size_t)len >= cap) { llmc_die("-pf %s: path too long for the NCCL id file", dir); }
}

// rank 0: writes the id with the nonce, atomically; refuses a file that is already there
static inline void multi_gpu_fs_publish(const char* path, const char* nonce, const void* id, size_t id_bytes) {
    if (file_exists(path)) {
        llmc_die("%s: already exists: left by an earlier launch with the same launch id, whose ranks may read it "
                 "(remove it, and give every launch its own LLMC_RUN_ID)", path);
    }
    uint32_t nonce_len = (uint32_t)strlen(nonce), id_len = (uint32_t)id_bytes;
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, MULTI_GPU_FS_MAGIC, 1, 8);
    atomic_file_write(&af, &nonce_len, sizeof(nonce_len), 1);
    atomic_file_write(&af, nonce, 1, nonce_len);
    atomic_file_write(&af, &id_len, sizeof(id_len), 1);
    atomic_file_write(&af, id, 1, id_bytes);
    atomic_file_commit(&af);
}

// the other ranks: waits up to wait_ms for rank 0's file, then reads the id, checking magic, nonce and size
static inline void multi_gpu_fs_fetch(const char* path, const char* nonce, void* id, size_t id_bytes, int wait_ms) {
    const int poll_ms = 100;
    for (int waited = 0; !file_exists(path); waited += poll_ms) {
        if (waited >= wait_ms) {
            llmc_die("%s: rank 0 did not write it within %.1f s (-pi fs: is -pf the same shared directory for every rank, "
                     "and the launch id \"%s\" the same?)", path, wait_ms / 1000.0, nonce);
        }
        struct timespec pause = {0, poll_ms * 1000000L};
        nanosleep(&pause, NULL);
    }
    FILE* f = fopenCheck(path, "rb");
    unsigned char buf[8 + 4 + MULTI_GPU_FS_NONCE_MAX + 4 + 1024];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fcloseCheck(f, path);
    uint32_t nonce_len = 0, id_len = 0;
    int ok = n >= 12 && memcmp(buf, MULTI_GPU_FS_MAGIC, 8) == 0;
    if (ok) { memcpy(&nonce_len, buf + 8, 4); }
    ok = ok && nonce_len <= MULTI_GPU_FS_NONCE_MAX && n >= 12 + (size_t)nonce_len + 4;
    if (!ok) { llmc_die("%s: not an NCCL id file of llmc (-pi fs)", path); }
    if (nonce_len != strlen(nonce) || memcmp(buf + 12, nonce, nonce_len) != 0) {
        llmc_die("%s: holds the NCCL id of launch \"%.*s\", not of this launch \"%s\"", path, (int)nonce_len,
                 (const char*)(buf + 12), nonce);
    }
    memcpy(&id_len, buf + 12 + nonce_len, 4);
    if (id_len != id_bytes || n != 12 + (size_t)nonce_len + 4 + id_bytes) {
        llmc_die("%s: the NCCL id is %zu bytes, expected %zu (-pi fs)", path, n - (12 + (size_t)nonce_len + 4), id_bytes);
    }
    memcpy(id, buf + 12 + nonce_len + 4, id_bytes);
}

// rank 0, once its ncclCommInitRank returned (every rank has read the file): removes it
static inline void multi_gpu_fs_retire(const char* path) {
    if (unlink(path) != 0) { llmc_die("%s: cannot remove the NCCL id file (%s)", path, strerror(errno)); }
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

// rank 0 publishes the id in the shared directory, the others fetch it (the -pi fs rules above);
// rank 0 removes the file once ncclCommInitRank returned (multi_gpu_init)
static inline void nccl_id_over_fs(ncclUniqueId* id, int rank, const char* path, const char* nonce) {
    if (rank == 0) {
        multi_gpu_fs_publish(path, nonce, id, sizeof(*id));
    } else {
        multi_gpu_fs_fetch(path, nonce, id, sizeof(*id), MULTI_GPU_WAIT_SECONDS * 1000);
    }
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
        mpi_singleton_without_fabric(); // (llmc/utils.h)
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
    char launcher_why[512];
    why = multi_gpu_check_launcher(mg->num_processes, mg->process_rank, init_method, have_mpi, multi_gpu_getenv,
                                   launcher_why, sizeof(launcher_why));
    if (why != NULL) { llmc_die("%s", why); }
    // -pi fs: the NCCL id file of this launch (its nonce must exist before anything waits on it)
    const int id_over_fs = strcmp(init_method, "fs") == 0 && mg->num_processes > 1;
    char fs_nonce[MULTI_GPU_FS_NONCE_MAX + 1] = "", fs_id_path[4096] = "";
    if (id_over_fs) {
        if (multi_gpu_fs_nonce(fs_nonce, sizeof(fs_nonce), multi_gpu_getenv) == NULL) {
            llmc_die("-pi fs needs an id of this launch, the same on every rank: launch with srun or mpirun, or export "
                     "LLMC_RUN_ID (new for every launch) to every rank");
        }
        multi_gpu_fs_id_path(fs_id_path, sizeof(fs_id_path), fs_path, fs_nonce);
    }
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
        } else if (id_over_fs) {
            nccl_id_over_fs(&id, mg->process_rank, fs_id_path, fs_nonce);
        } else {
#ifdef USE_MPI
            MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
        }
        ncclCheck(ncclCommInitRank(&mg->comm, mg->num_processes, id, mg->process_rank));
        // every rank has joined, so every rank has read the file: no later launch can find it
        if (id_over_fs && mg->process_rank == 0) { multi_gpu_fs_retire(fs_id_path); }
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
// produced them; the compute stream does not wait (call multi_gpu_sync before reading the grads).
// zero_stage 0 all-reduces them whatever mg's stage is (Muon's matrices under ZeRO-1: the owner of
// a whole matrix needs all of its gradient).
static inline void multi_gpu_reduce_ranges_stage(MultiGpu* mg, floatX* grads, const GradRange* ranges, int num_ranges,
                                                 int zero_stage, cudaStream_t compute) {
    if (mg->num_processes == 1 || num_ranges == 0) { return; }
#ifdef USE_NCCL
    stream_wait_stream(mg->nccl_stream, compute, mg->compute_ready);
    ncclCheck(ncclGroupStart());
    for (int r = 0; r < num_ranges; r++) {
        GradReduceOp ops[64];
        int n = grad_reduce_ops(ranges[r].lo, ranges[r].hi, mg->num_parameters, zero_stage, mg->num_processes, ops, 64);
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
    (void)grads; (void)ranges; (void)num_ranges; (void)zero_stage; (void)compute;
#endif
}

static inline void multi_gpu_reduce_ranges(MultiGpu* mg, floatX* grads, const GradRange* ranges, int num_ranges,
                                           cudaStream_t compute) {
    multi_gpu_reduce_ranges_stage(mg, grads, ranges, num_ranges, mg->zero_stage, compute);
}

// every rank gets params[offset, offset + count) of each op from the op's root (the Muon matrices under
// ZeRO-1, updated whole by their owners), on the NCCL stream after the compute stream's work; the
// compute stream waits for it
static inline void multi_gpu_broadcast_ranges(MultiGpu* mg, floatX* params, const GradReduceOp* ops, int num_ops,
                                              cudaStream_t compute) {
    if (mg->num_processes == 1 || num_ops == 0) { return; }
#ifdef USE_NCCL
    stream_wait_stream(mg->nccl_stream, compute, mg->compute_ready);
    ncclCheck(ncclGroupStart());
    for (int k = 0; k < num_ops; k++) {
        floatX* p = params + ops[k].offset;
        ncclCheck(ncclBroadcast(p, p, ops[k].count, NCCL_FLOATX, ops[k].root, mg->comm, mg->nccl_stream));
    }
    ncclCheck(ncclGroupEnd());
    stream_wait_stream(compute, mg->nccl_stream, mg->nccl_done);
#else
    (void)params; (void)ops; (void)num_ops; (void)compute;
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
