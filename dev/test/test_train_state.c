/*
dev/test/test_train_state.c: training-state files as the trainers write them (llmc/checkpoint.h's
format with llmc/trainer.h's extra blob: the outlier detectors, then the GPU trainer's fp32 master
weights of its ZeRO shard), one per rank, written and read back bit for bit.
*/
#include "../../llmc/trainer.h"
#include "../../llmc/zero.h"
#include "test_common.h"

// the header fields a trainer writes for rank `rank` of `nproc` (the loop's own fields included)
static TrainState describe(int nproc, int rank, int zero, int step, uint64_t rng, uint64_t shard_idx, uint64_t sample_idx,
                           size_t n, ZeroShard sh, size_t extra_bytes) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.num_processes = nproc;
    s.process_rank = rank;
    s.zero_stage = zero;
    s.should_shuffle = 1;
    s.step = step;
    s.rng_state = rng;
    s.shard_idx = shard_idx;
    s.sample_idx = sample_idx;
    s.num_parameters = n;
    s.opt_offset = sh.offset;
    s.opt_size = sh.size;
    s.extra_bytes = (uint32_t)extra_bytes;
    return s;
}

// ----------------------------------------------------------------------------
// training-state files as the GPU trainer writes them (one per rank, ZeRO shards, master weights)

static char g_state_dir[4096];

static void write_states(size_t n, int nproc, int zero, int with_master, int step) {
    for (int rank = 0; rank < nproc; rank++) {
        ZeroShard sh = zero_shard(n, zero, nproc, rank);
        size_t extra_bytes = trainer_state_extra_bytes(with_master ? sh.size : 0);
        float* m = random_array(sh.size + 1, 100 + rank);
        float* v = random_array(sh.size + 1, 200 + rank);
        float* master = with_master ? random_array(sh.size + 1, 300 + rank) : NULL;
        TrainerDetectors det;
        init_detector(&det.loss);
        init_detector(&det.grad_norm);
        for (int i = 0; i < 200; i++) { update_detector(&det.loss, 3.0 + 0.01 * i + rank); update_detector(&det.grad_norm, 1.0); }
        char* extra = (char*)malloc(extra_bytes);
        trainer_state_extra_pack(extra, &det, master, with_master ? sh.size : 0);
        TrainState st = describe(nproc, rank, zero, step, 0xABCDEF12345ULL + rank, 3, 17, n, sh, extra_bytes);
        char path[4200];
        snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", g_state_dir, step, rank);
        train_state_write(path, &st, m, v, extra);
        free(m); free(v); free(master); free(extra);
    }
}

// reads every rank's file back and compares with what was written
static int read_states_back(size_t n, int nproc, int zero, int with_master, int step) {
    int bad = 0;
    for (int rank = 0; rank < nproc; rank++) {
        ZeroShard sh = zero_shard(n, zero, nproc, rank);
        size_t extra_bytes = trainer_state_extra_bytes(with_master ? sh.size : 0);
        TrainState expect = describe(nproc, rank, zero, step, 0, 0, 0, n, sh, extra_bytes), got;
        float* m = (float*)malloc((sh.size + 1) * sizeof(float));
        float* v = (float*)malloc((sh.size + 1) * sizeof(float));
        char* extra = (char*)malloc(extra_bytes);
        char path[4200];
        snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", g_state_dir, step, rank);
        train_state_read(path, &expect, &got, m, v, extra);
        float* m_ref = random_array(sh.size + 1, 100 + rank);
        float* v_ref = random_array(sh.size + 1, 200 + rank);
        bad += memcmp(m, m_ref, sh.size * sizeof(float)) != 0 || memcmp(v, v_ref, sh.size * sizeof(float)) != 0;
        TrainerDetectors det;
        float* master = with_master ? (float*)malloc((sh.size + 1) * sizeof(float)) : NULL;
        trainer_state_extra_unpack(extra, &det, master, with_master ? sh.size : 0);
        if (with_master) {
            float* master_ref = random_array(sh.size + 1, 300 + rank);
            bad += memcmp(master, master_ref, sh.size * sizeof(float)) != 0;
            free(master_ref);
        }
        // the restored detectors continue exactly as the saved ones would
        TrainerDetectors fresh;
        init_detector(&fresh.loss);
        init_detector(&fresh.grad_norm);
        for (int i = 0; i < 200; i++) { update_detector(&fresh.loss, 3.0 + 0.01 * i + rank); update_detector(&fresh.grad_norm, 1.0); }
        double z1 = update_detector(&det.loss, 5.0), z2 = update_detector(&fresh.loss, 5.0);
        bad += memcmp(&z1, &z2, sizeof(z1)) != 0;
        bad += got.step != step || got.rng_state != 0xABCDEF12345ULL + (uint64_t)rank || got.shard_idx != 3 || got.sample_idx != 17;
        free(m); free(v); free(extra); free(master); free(m_ref); free(v_ref);
    }
    return bad;
}

static void read_rank1_as_rank0(void* arg) {
    (void)arg;
    size_t n = 1001;
    ZeroShard sh = zero_shard(n, 1, 2, 0);
    TrainState expect = describe(2, 0, 1, 5, 0, 0, 0, n, sh, trainer_state_extra_bytes(sh.size)), got;
    float* m = (float*)malloc(4096 * sizeof(float));
    float* v = (float*)malloc(4096 * sizeof(float));
    char* extra = (char*)malloc(trainer_state_extra_bytes(4096));
    char path[4200];
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", g_state_dir, 5, 1);
    train_state_read(path, &expect, &got, m, v, extra);
}

static void test_state_round_trips(void) {
    make_temp_dir(g_state_dir, sizeof(g_state_dir));
    const size_t n = 1001;  // not a multiple of the process counts: uneven shards
    int step = 0;
    for (int nproc = 1; nproc <= 3; nproc++) {
        for (int zero = 0; zero <= 1; zero++) {
            for (int with_master = 0; with_master <= 1; with_master++) {
                step++;
                write_states(n, nproc, zero, with_master, step);
                CHECK(read_states_back(n, nproc, zero, with_master, step) == 0,
                      "state files round-trip bit for bit (%d processes, ZeRO-%d, master weights %d)", nproc, zero, with_master);
            }
        }
    }
    write_states(n, 2, 1, 1, 5);
    expect_die("another rank's state file", read_rank1_as_rank0, NULL, "state_00000005_00001.bin", "rank 1");
    CHECK(trainer_state_extra_fits(trainer_state_extra_bytes((size_t)124475904)), "GPT-2 124M master weights fit one state file");
    CHECK(!trainer_state_extra_fits(trainer_state_extra_bytes((size_t)1557686400)), "GPT-2 1558M master weights on one GPU do not (the trainer says so)");
    remove_tree(g_state_dir);
}

int main(void) {
    test_state_round_trips();
    return test_summary();
}
