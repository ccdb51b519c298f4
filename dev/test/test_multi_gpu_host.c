/*
dev/test/test_multi_gpu_host.c: the host half of llmc/cuda/multi_gpu.cuh on the CPU -- the multi-process flag
rules, NCCL element counts and offsets for every layer's gradient ranges, ZeRO-1 ownership and padding,
and the -pi fs protocol of the NCCL id (launch nonce, atomic publish, checked fetch, removal): a file
left by an earlier launch is never taken.
*/
#include "../../llmc/cuda/multi_gpu.cuh"
#include "test_common.h"

static void test_check_args(void) {
    CHECK(multi_gpu_check_args(4, 3, 8, "fs", "", "/shared/x", 0, 1) == NULL, "fs init with a directory is valid");
    CHECK(multi_gpu_check_args(4, 0, 8, "fs", "", "", 0, 1) != NULL, "fs init without -pf is refused");
    CHECK(multi_gpu_check_args(2, 0, 8, "tcp", "", "", 0, 1) != NULL, "tcp init without -ps is refused");
    CHECK(multi_gpu_check_args(2, 1, 8, "tcp", "10.0.0.1", "", 0, 1) == NULL, "tcp init with -ps is valid");
    CHECK(multi_gpu_check_args(2, 0, 8, "mpi", "", "", 0, 1) != NULL, "mpi init without MPI is refused");
    CHECK(multi_gpu_check_args(2, 0, 8, "mpi", "", "", 1, 1) == NULL, "mpi init with MPI is valid");
    CHECK(multi_gpu_check_args(2, 0, 8, "pmi", "", "", 1, 1) != NULL, "an unknown init method is refused");
    CHECK(multi_gpu_check_args(2, 2, 8, "mpi", "", "", 1, 1) != NULL, "rank >= processes is refused");
    CHECK(multi_gpu_check_args(2, 0, 8, "mpi", "", "", 1, 0) != NULL, "several processes without NCCL are refused");
    CHECK(multi_gpu_check_args(1, 0, 8, "mpi", "", "", 0, 0) == NULL, "one process needs neither MPI nor NCCL");
}

// ----------------------------------------------------------------------------
// multi-GPU reduction plan

// a small model: 3 layers of 2 heads, C 64, V 100 padded to 128, maxT 32
static GPT2Config small_config(void) {
    GPT2Config c = {.max_seq_len = 32, .vocab_size = 100, .padded_vocab_size = 128, .num_layers = 3, .num_heads = 2, .channels = 64};
    return c;
}

static void test_layer_ranges_cover_everything(void) {
    GPT2Config cfg = small_config();
    size_t n = gpt2_num_parameters(&cfg);
    unsigned char* seen = (unsigned char*)calloc(n, 1);
    GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];
    int bad = 0;
    for (int l = -1; l < cfg.num_layers; l++) {
        int k = grad_layer_ranges(&cfg, l, ranges);
        bad += k != (l < 0 ? 4 : 12);
        for (int r = 0; r < k; r++) {
            for (size_t i = ranges[r].lo; i < ranges[r].hi && i < n; i++) { seen[i]++; }
            bad += ranges[r].hi > n;
        }
    }
    size_t not_once = 0;
    for (size_t i = 0; i < n; i++) { not_once += seen[i] != 1; }
    free(seen);
    CHECK(bad == 0, "12 ranges per layer, 4 outside the layers, all within the vector");
    CHECK(not_once == 0, "every gradient element is reduced exactly once (%zu were not)", not_once);
}

static void test_reduce_ops(void) {
    GPT2Config cfg = small_config();
    size_t n = gpt2_num_parameters(&cfg);
    const int nprocs[] = {1, 2, 3, 4, 7, 8, 64};
    for (size_t pi = 0; pi < sizeof(nprocs) / sizeof(nprocs[0]); pi++) {
        int nproc = nprocs[pi];
        for (int zero = 0; zero <= 1; zero++) {
            size_t covered = 0;
            int bad = 0;
            for (int l = -1; l < cfg.num_layers; l++) {
                GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];
                int k = grad_layer_ranges(&cfg, l, ranges);
                for (int r = 0; r < k; r++) {
                    GradReduceOp ops[128];
                    int m = grad_reduce_ops(ranges[r].lo, ranges[r].hi, n, zero, nproc, ops, 128);
                    size_t expect_next = ranges[r].lo;
                    bad += m < 1;
                    for (int o = 0; o < m; o++) {
                        bad += ops[o].offset != expect_next || ops[o].count == 0;  // contiguous tiling, no empty call
                        expect_next = ops[o].offset + ops[o].count;
                        covered += ops[o].count;
                        if (zero == 0 || nproc == 1) {
                            bad += ops[o].root != -1;
                        } else {
                            // the op lies inside the shard of its root
                            ZeroShard s = zero_shard(n, 1, nproc, ops[o].root);
                            bad += ops[o].root < 0 || ops[o].root >= nproc || ops[o].offset < s.offset ||
                                   ops[o].offset + ops[o].count > s.offset + s.size;
                        }
                    }
                    bad += expect_next != ranges[r].hi;
                }
            }
            CHECK(bad == 0, "nproc %d ZeRO-%d: ops tile each range inside their owners' shards", nproc, zero);
            CHECK(covered == n, "nproc %d ZeRO-%d: counts are ELEMENTS summing to the %zu parameters (got %zu)", nproc, zero, n, covered);
        }
    }
    // the lnfw tensor (C floats) is one all-reduce of C elements, not 4*C bytes
    GradReduceOp op;
    CHECK(grad_reduce_ops(1000, 1000 + 768, 2000000, 0, 8, &op, 1) == 1 && op.count == 768, "an all-reduce of 768 floats has count 768");
    CHECK(grad_reduce_ops(5, 5, 100, 1, 4, &op, 1) == 0, "an empty range needs no NCCL call");
    GradReduceOp few[2];
    CHECK(grad_reduce_ops(0, 100, 100, 1, 8, few, 2) == 0, "too many ops for the buffer is reported, not overflowed");
}

static void test_zero_padding(void) {
    const size_t sizes[] = {1, 2, 10, 127, 124475904, 124475905};
    int bad = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (int nproc = 1; nproc <= 9; nproc++) {
            size_t padded = zero_padded_size(sizes[i], 1, nproc);
            size_t per = padded / (size_t)nproc;
            bad += padded < sizes[i] || padded % (size_t)nproc != 0;
            for (int r = 0; r < nproc; r++) {
                ZeroShard s = zero_shard(sizes[i], 1, nproc, r);
                // the all-gather sends `per` elements from r * per: inside the allocation, covering the shard
                bad += (size_t)r * per + per > padded || (s.size > 0 && s.offset != (size_t)r * per) || s.size > per;
            }
        }
    }
    CHECK(bad == 0, "ZeRO-1 padding: equal all-gather chunks stay inside the allocation and match zero_shard");
    CHECK(zero_padded_size(10, 0, 4) == 10, "no padding without ZeRO-1");
}

// ----------------------------------------------------------------------------
// -pi fs: the NCCL id file

// a fake environment: NULL-terminated name/value pairs
static const char* const* g_env;
static const char* fake_getenv(const char* name) {
    for (int i = 0; g_env[i] != NULL; i += 2) {
        if (strcmp(g_env[i], name) == 0) { return g_env[i + 1]; }
    }
    return NULL;
}

static const char* nonce_of(const char* const* env, char* out, size_t cap) {
    g_env = env;
    return multi_gpu_fs_nonce(out, cap, fake_getenv);
}

static void test_fs_nonce(void) {
    char n[MULTI_GPU_FS_NONCE_MAX + 1];
    const char* none[] = {"HOME", "/root", NULL};
    CHECK(nonce_of(none, n, sizeof(n)) == NULL && n[0] == '\0', "no launcher and no LLMC_RUN_ID: no nonce (-pi fs refuses)");
    const char* slurm[] = {"SLURM_JOB_ID", "4242", "SLURM_STEP_ID", "3", "OMPI_MCA_ess_base_jobid", "99", NULL};
    CHECK(nonce_of(slurm, n, sizeof(n)) != NULL && strcmp(n, "slurm-4242.3") == 0, "srun: job id and step id (%s)", n);
    const char* requeued[] = {"SLURM_JOB_ID", "4242", "SLURM_STEP_ID", "3", "SLURM_RESTART_COUNT", "1", NULL};
    CHECK(nonce_of(requeued, n, sizeof(n)) != NULL && strcmp(n, "slurm-4242.3.r1") == 0,
          "a requeued Slurm job (same job and step ids) gets another nonce (%s)", n);
    const char* old_step[] = {"SLURM_JOB_ID", "7", "SLURM_STEPID", "0", NULL};
    CHECK(nonce_of(old_step, n, sizeof(n)) != NULL && strcmp(n, "slurm-7.0") == 0, "SLURM_STEPID, the older name (%s)", n);
    const char* pmix[] = {"PMIX_NAMESPACE", "prterun-node1-1234@1", "OMPI_MCA_ess_base_jobid", "99", NULL};
    CHECK(nonce_of(pmix, n, sizeof(n)) != NULL && strcmp(n, "pmix-prterun-node1-1234@1") == 0, "PMIx namespace (%s)", n);
    const char* ompi[] = {"OMPI_MCA_ess_base_jobid", "3960078337", NULL};
    CHECK(nonce_of(ompi, n, sizeof(n)) != NULL && strcmp(n, "ompi-3960078337") == 0, "Open MPI job id (%s)", n);
    const char* user[] = {"LLMC_RUN_ID", "run 17", "SLURM_JOB_ID", "4242", NULL};
    const char* src = nonce_of(user, n, sizeof(n));
    CHECK(src != NULL && strcmp(src, "LLMC_RUN_ID") == 0 && strcmp(n, "run 17") == 0, "LLMC_RUN_ID wins over the launcher's id");
    const char* empty_user[] = {"LLMC_RUN_ID", "", "SLURM_JOB_ID", "5", NULL};
    CHECK(nonce_of(empty_user, n, sizeof(n)) != NULL && strcmp(n, "slurm-5.batch") == 0, "an empty LLMC_RUN_ID is no nonce (%s)", n);
}

static const char* launcher_check_mpi(const char* const* env, int nproc, int rank, const char* method, int have_mpi) {
    static char buf[512];
    g_env = env;
    return multi_gpu_check_launcher(nproc, rank, method, have_mpi, fake_getenv, buf, sizeof(buf));
}
static const char* launcher_check(const char* const* env, int nproc, int rank, const char* method) {
    return launcher_check_mpi(env, nproc, rank, method, 1);
}

static void test_launcher_numbering(void) {
    const char* ompi_rank1[] = {"OMPI_COMM_WORLD_SIZE", "2", "OMPI_COMM_WORLD_RANK", "1", NULL};
    const char* why = launcher_check(ompi_rank1, 1, 0, "fs");
    CHECK(why != NULL && strstr(why, "rank 1 of 2") != NULL && strstr(why, "-pn 1 -pr 0") != NULL,
          "mpirun -np 2 with -pi fs and no -pn: refused instead of two independent runs (%s)", why ? why : "NULL");
    CHECK(launcher_check(ompi_rank1, 2, 1, "fs") == NULL, "mpirun -np 2 with -pn 2 -pr <its rank>: accepted");
    CHECK(launcher_check(ompi_rank1, 2, 0, "tcp") != NULL, "a -pr that is not the launcher's rank is refused");
    CHECK(launcher_check(ompi_rank1, 1, 0, "mpi") == NULL, "-pi mpi takes the numbering from MPI itself");
    why = launcher_check_mpi(ompi_rank1, 1, 0, "mpi", 0);
    CHECK(why != NULL && strstr(why, "no MPI") != NULL, "a build without MPI under mpirun is refused, whatever -pi says (%s)",
          why ? why : "NULL");
    const char* hydra[] = {"PMI_SIZE", "4", "PMI_RANK", "3", NULL};
    CHECK(launcher_check(hydra, 1, 0, "fs") != NULL && launcher_check(hydra, 4, 3, "fs") == NULL, "MPICH hydra's PMI_SIZE/PMI_RANK");
    const char* single[] = {"OMPI_COMM_WORLD_SIZE", "1", "OMPI_COMM_WORLD_RANK", "0", NULL};
    CHECK(launcher_check(single, 1, 0, "fs") == NULL, "mpirun -np 1: nothing to check");
    const char* none[] = {"HOME", "/root", NULL};
    CHECK(launcher_check(none, 2, 1, "tcp") == NULL, "no launcher (srun, or by hand): -pn/-pr are the numbering");
}

static void long_nonce(void* arg) {
    (void)arg;
    static char value[400];
    memset(value, 'x', sizeof(value) - 1);
    const char* env[] = {"LLMC_RUN_ID", value, NULL};
    char n[MULTI_GPU_FS_NONCE_MAX + 1];
    nonce_of(env, n, sizeof(n));
}

static void test_fs_id_path(void) {
    char a[4096], b[4096], c[4096];
    multi_gpu_fs_id_path(a, sizeof(a), "/shared/sync", "slurm-4242.3");
    CHECK(strcmp(a, "/shared/sync/ncclUniqueId.slurm-4242.3.sync") == 0, "the nonce is part of the file name (%s)", a);
    multi_gpu_fs_id_path(b, sizeof(b), "/shared/sync", "slurm-4242.4");
    CHECK(strcmp(a, b) != 0, "another launch, another file");
    multi_gpu_fs_id_path(c, sizeof(c), "/shared/sync", "../x/y z@1");
    CHECK(strcmp(c, "/shared/sync/ncclUniqueId..._x_y_z_1.sync") == 0, "no '/' or odd characters of a nonce reach the path (%s)", c);
    expect_die("a nonce of 399 characters", long_nonce, NULL, "LLMC_RUN_ID", "longer than 200");
}

static char g_fs_dir[4096];
static char g_fs_path[4200];

// an id of NCCL's size (128 bytes), different per seed
static void fake_id(unsigned char id[128], int seed) {
    for (int i = 0; i < 128; i++) { id[i] = (unsigned char)(seed * 31 + i * 7); }
}

typedef struct { const char* path; const char* nonce; int wait_ms; } FetchArgs;

static void fetch_into_nothing(void* arg) {
    const FetchArgs* a = (const FetchArgs*)arg;
    unsigned char id[128];
    multi_gpu_fs_fetch(a->path, a->nonce, id, sizeof(id), a->wait_ms);
}

static void publish_again(void* arg) {
    (void)arg;
    unsigned char id[128];
    fake_id(id, 9);
    multi_gpu_fs_publish(g_fs_path, "launch-B", id, sizeof(id));
}

// a rank other than 0, in a child process: fetches with `nonce` and exits 0 when it got id `seed`
static pid_t spawn_reader(const char* path, const char* nonce, int seed) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        unsigned char id[128], want[128];
        fake_id(want, seed);
        multi_gpu_fs_fetch(path, nonce, id, sizeof(id), 10000);
        _exit(memcmp(id, want, sizeof(id)) == 0 ? 0 : 3);
    }
    return pid;
}

static int wait_status(pid_t pid) {
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void test_fs_protocol(void) {
    make_temp_dir(g_fs_dir, sizeof(g_fs_dir));
    unsigned char id[128], got[128];
    // a directory reused from earlier launches: the old fixed name, and launch A's file (A died before removing it)
    char legacy[4200];
    snprintf(legacy, sizeof(legacy), "%s/ncclUniqueId.sync", g_fs_dir);
    fake_id(id, 1);
    write_bytes(legacy, id, sizeof(id));
    char stale[4200];
    multi_gpu_fs_id_path(stale, sizeof(stale), g_fs_dir, "launch-A");
    multi_gpu_fs_publish(stale, "launch-A", id, sizeof(id));
    // launch B: its readers start before rank 0 has written anything and must not take A's file
    multi_gpu_fs_id_path(g_fs_path, sizeof(g_fs_path), g_fs_dir, "launch-B");
    pid_t readers[3];
    for (int r = 0; r < 3; r++) { readers[r] = spawn_reader(g_fs_path, "launch-B", 2); }
    struct timespec pause = {0, 300 * 1000000L};
    nanosleep(&pause, NULL);
    fake_id(id, 2);
    multi_gpu_fs_publish(g_fs_path, "launch-B", id, sizeof(id));  // rank 0, later than its readers
    int bad = 0;
    for (int r = 0; r < 3; r++) { bad += wait_status(readers[r]) != 0; }
    CHECK(bad == 0, "readers that started before rank 0 wrote get this launch's id, not the stale one (%d did not)", bad);
    memset(got, 0, sizeof(got));
    multi_gpu_fs_fetch(g_fs_path, "launch-B", got, sizeof(got), 0);
    CHECK(memcmp(got, id, sizeof(id)) == 0, "a reader after rank 0 wrote gets the id at once");
    expect_die("rank 0 of a launch with a reused nonce", publish_again, NULL, "already exists", "LLMC_RUN_ID");
    multi_gpu_fs_retire(g_fs_path);  // after ncclCommInitRank
    CHECK(!file_exists(g_fs_path), "rank 0 removes its file once every rank has joined");
    FetchArgs late = {g_fs_path, "launch-B", 300};
    expect_die("a file that is not there", fetch_into_nothing, &late, "rank 0 did not write it", "launch-B");
    // launch C finds only A's stale file and the legacy one: it waits for its own, it never reads theirs
    char path_c[4200];
    multi_gpu_fs_id_path(path_c, sizeof(path_c), g_fs_dir, "launch-C");
    FetchArgs c = {path_c, "launch-C", 300};
    expect_die("a reader beside stale files", fetch_into_nothing, &c, "ncclUniqueId.launch-C.sync", "did not write it");
    // two nonces with the same file name ('/' and ':' both become '_'): the nonce inside tells them apart
    multi_gpu_fs_id_path(g_fs_path, sizeof(g_fs_path), g_fs_dir, "job/1");
    multi_gpu_fs_publish(g_fs_path, "job/1", id, sizeof(id));
    char other[4200];
    multi_gpu_fs_id_path(other, sizeof(other), g_fs_dir, "job:1");
    CHECK(strcmp(other, g_fs_path) == 0, "job/1 and job:1 share a file name");
    FetchArgs clash = {g_fs_path, "job:1", 0};
    expect_die("another launch's id under the same name", fetch_into_nothing, &clash, "holds the NCCL id of launch \"job/1\"", "job:1");
    multi_gpu_fs_retire(g_fs_path);
    // a file that is not ours, and one cut short
    write_bytes(g_fs_path, "hello, world: not an id", 23);
    FetchArgs garbage = {g_fs_path, "job/1", 0};
    expect_die("a foreign file", fetch_into_nothing, &garbage, "not an NCCL id file", NULL);
    unlink(g_fs_path);
    multi_gpu_fs_publish(g_fs_path, "job/1", id, 100);  // 100 of the 128 bytes
    expect_die("a short id", fetch_into_nothing, &garbage, "the NCCL id is 100 bytes", "expected 128");
    remove_tree(g_fs_dir);
}

int main(void) {
    test_check_args();
    test_layer_ranges_cover_everything();
    test_reduce_ops();
    test_zero_padding();
    test_fs_nonce();
    test_launcher_numbering();
    test_fs_id_path();
    test_fs_protocol();
    return test_summary();
}
