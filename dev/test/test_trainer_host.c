/*
dev/test/test_trainer_host.c: llmc/trainer_host.cuh on the CPU -- the training-loop decisions of the GPU
trainer (-v 0 never divides by zero, batch arithmetic, clipping, the outlier skip) and its training-state
files (one per rank, ZeRO shards, master weights) written and read back.
*/
#include "../../llmc/trainer_host.cuh"
#include "test_common.h"

// ----------------------------------------------------------------------------
// training-state files as the GPU trainer writes them (one per rank, ZeRO shards, master weights)

static char g_state_dir[4096];

static void write_states(size_t n, int nproc, int zero, int with_master, int step) {
    for (int rank = 0; rank < nproc; rank++) {
        ZeroShard sh = zero_shard(n, zero, nproc, rank);
        size_t extra_bytes = state_extra_bytes(sh.size, with_master);
        float* m = random_array(sh.size + 1, 100 + rank);
        float* v = random_array(sh.size + 1, 200 + rank);
        float* master = with_master ? random_array(sh.size + 1, 300 + rank) : NULL;
        TrainerDetectors det;
        init_detector(&det.loss);
        init_detector(&det.grad_norm);
        for (int i = 0; i < 200; i++) { update_detector(&det.loss, 3.0 + 0.01 * i + rank); update_detector(&det.grad_norm, 1.0); }
        char* extra = (char*)malloc(extra_bytes);
        state_extra_pack(extra, &det, master, sh.size);
        TrainState st = train_state_describe(nproc, rank, zero, 1, step, 0xABCDEF12345ULL + rank, 3, 17, n, sh, extra_bytes);
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
        size_t extra_bytes = state_extra_bytes(sh.size, with_master);
        TrainState expect = train_state_describe(nproc, rank, zero, 1, step, 0, 0, 0, n, sh, extra_bytes), got;
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
        state_extra_unpack(extra, &det, master, sh.size);
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
    TrainState expect = train_state_describe(2, 0, 1, 1, 5, 0, 0, 0, n, sh, state_extra_bytes(sh.size, 1)), got;
    float* m = (float*)malloc(4096 * sizeof(float));
    float* v = (float*)malloc(4096 * sizeof(float));
    char* extra = (char*)malloc(state_extra_bytes(4096, 1));
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
    CHECK(state_extra_fits(state_extra_bytes((size_t)124475904, 1)), "GPT-2 124M master weights fit one state file");
    CHECK(!state_extra_fits(state_extra_bytes((size_t)1557686400, 1)), "GPT-2 1558M master weights on one GPU do not (the trainer says so)");
    remove_tree(g_state_dir);
}

// ----------------------------------------------------------------------------
// training loop decisions

static void test_trainer_host(void) {
    int due = 0;
    for (int step = 0; step <= 100; step++) { due += step_is_due(step, 0, step == 100); }
    CHECK(due == 0, "-v 0 / -s 0 / -n 0: never due, including the last step (no %% by zero)");
    CHECK(step_is_due(20, 10, 0) && !step_is_due(21, 10, 0) && step_is_due(21, 10, 1), "every 10: steps 0, 10, 20 and the last");
    CHECK(!step_is_due(5, -3, 1), "a negative period is never due");
    const char* why;
    CHECK(grad_accum_steps_for(-1, 4, 64, 2, &why) == 1, "-d -1: one micro-batch per process");
    CHECK(grad_accum_steps_for(524288, 64, 1024, 8, &why) == 1, "GPT-2 124M on 8 GPUs: 1 micro-step");
    CHECK(grad_accum_steps_for(524288, 16, 1024, 1, &why) == 32, "GPT-2 124M on 1 GPU with B=16: 32 micro-steps");
    CHECK(grad_accum_steps_for(1000, 4, 64, 1, &why) == -1 && why[0] != '\0', "a total batch that is not a multiple is refused");
    CHECK(grad_accum_steps_for(0, 4, 64, 1, &why) == -1, "a zero total batch is refused");
    CHECK(grad_accum_steps_for(256, 0, 64, 1, &why) == -1, "B = 0 is refused, not divided by");
    CHECK(grad_clip_scale(2.0f, 1.0f) == 0.5f && grad_clip_scale(0.5f, 1.0f) == 1.0f, "clip scales only above the threshold");
    CHECK(grad_clip_scale(5.0f, 0.0f) == 1.0f, "clip 0 is off");
    CHECK(grad_clip_scale(NAN, 1.0f) == 1.0f, "a NaN norm is not turned into a NaN scale here (the update is skipped)");
    CHECK(update_should_skip(NAN, NAN, 3.0f, 3.0f, 1.0f) == 0, "no skip while the detectors fill up");
    CHECK(update_should_skip(5.0, NAN, 3.0f, 0.0f, 1.0f) == 1, "a loss z-score above -sl skips");
    CHECK(update_should_skip(5.0, 5.0, 0.0f, 0.0f, 1.0f) == 0, "-sl 0 -sg 0: never skip a finite step");
    CHECK(update_should_skip(0.0, 0.0, 0.0f, 0.0f, INFINITY) == 1, "a non-finite gradient norm always skips");
}

int main(void) {
    test_trainer_host();
    test_state_round_trips();
    return test_summary();
}
