/*
dev/test/test_train_state.c: training-state files as the trainers write them (llmc/checkpoint.h's
format with llmc/trainer.h's extra blob: the outlier detectors, then the GPU trainer's fp32 master
weights of its ZeRO shard), one per rank, written and read back bit for bit; and the 64-bit size of
that blob (GPT-2 1558M's master weights on one GPU are 6.2 GB), checked without allocating it.
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
    s.extra_bytes = extra_bytes;
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
    remove_tree(g_state_dir);
}

// ----------------------------------------------------------------------------
// the extra blob's size is 64-bit: [46] low and [47] high 32 bits of the header

#define GPT2_1558M_PARAMS ((size_t)1557686400)

// a state of a few optimizer values whose header claims `extra` bytes of extra blob
static TrainState big_extra_state(uint64_t extra) {
    ZeroShard sh = {0, 8};
    return describe(1, 0, 0, 7, 1, 2, 3, 8, sh, (size_t)extra);
}

static void test_header_encodes_64_bit_sizes(void) {
    const uint64_t extra = trainer_state_extra_bytes(GPT2_1558M_PARAMS);  // 6,230,745,600 + the detectors
    CHECK(extra > ((uint64_t)1 << 32), "GPT-2 1558M's fp32 master weights (%llu bytes) exceed 32 bits", (unsigned long long)extra);
    TrainState s = big_extra_state(extra), back;
    int header[256];
    train_state_header(&s, header);
    CHECK((uint32_t)header[46] == (uint32_t)(extra & 0xFFFFFFFFu) && (uint32_t)header[47] == (uint32_t)(extra >> 32),
          "header[46] holds the low and header[47] the high 32 bits of the size (got %u, %u)", (uint32_t)header[46], (uint32_t)header[47]);
    memset(&back, 0, sizeof(back));
    train_state_from_header(header, &back);
    CHECK(back.extra_bytes == extra && back.opt_size == 8 && back.step == 7, "the header reads back to the same 64-bit size");
    // a file written before the size was widened: [46] the size, [47] zero like the rest of the header
    int old[256];
    memset(old, 0, sizeof(old));
    old[0] = TRAIN_STATE_MAGIC;
    old[1] = TRAIN_STATE_VERSION;
    old[46] = (int)trainer_state_extra_bytes(0);
    train_state_from_header(old, &back);
    CHECK(back.extra_bytes == trainer_state_extra_bytes(0), "an old header with [47] = 0 reads its 32-bit size unchanged");
    CHECK(train_state_file_bytes(8, extra) == 1024 + 64 + extra, "the file size is computed in 64 bits");
    CHECK(trainer_state_fits(GPT2_1558M_PARAMS, extra), "GPT-2 1558M with fp32 master weights on one GPU fits one state file");
    CHECK(trainer_state_fits(124475904, trainer_state_extra_bytes(124475904)), "GPT-2 124M fits one state file");
    CHECK(!trainer_state_fits(8, (size_t)INT64_MAX), "a state beyond 2^63 - 1 bytes does not fit");
    CHECK(!trainer_state_fits((size_t)1 << 62, 0), "an optimizer slice beyond 2^63 - 1 bytes does not fit");
}

// the file written below: its header says 2^32 + 48 extra bytes, the file stops after m and v
static char g_big_path[4200];

// A run whose blob is 48 bytes reads a file whose blob is 2^32 + 48: a 32-bit field would have
// taken the two for the same size.
static void read_big_as_small(void* arg) {
    (void)arg;
    TrainState expect = big_extra_state(48), got;
    float m[8], v[8];
    char extra[48];
    train_state_read(g_big_path, &expect, &got, m, v, extra);
}

// the right size expected, the file too short: refused before anything is read or allocated
static void read_big_truncated(void* arg) {
    (void)arg;
    TrainState expect = big_extra_state(((uint64_t)1 << 32) + 48), got;
    float m[8], v[8];
    char extra[1];
    train_state_read(g_big_path, &expect, &got, m, v, extra);
}

static void write_too_big(void* arg) {
    (void)arg;
    TrainState s = big_extra_state((uint64_t)INT64_MAX);
    float m[8] = {0}, v[8] = {0};
    train_state_write(g_big_path, &s, m, v, NULL);
}

static void test_big_sizes_in_files(void) {
    char dir[4096];
    make_temp_dir(dir, sizeof(dir));
    snprintf(g_big_path, sizeof(g_big_path), "%s/state_00000007_00000.bin", dir);
    TrainState s = big_extra_state(((uint64_t)1 << 32) + 48);
    int header[256];
    train_state_header(&s, header);
    char file[1024 + 64];
    memset(file, 0, sizeof(file));
    memcpy(file, header, sizeof(header));
    write_bytes(g_big_path, file, sizeof(file));
    expect_die("a 4 GiB + 48 blob read as a 48-byte one", read_big_as_small, NULL, "extra state is 4294967344 bytes", "expected 48");
    expect_die("a 4 GiB + 48 blob cut off", read_big_truncated, NULL, "expected 4294968432 bytes", "the file has 1088");
    unlink(g_big_path);
    expect_die("a state beyond 2^63 bytes", write_too_big, NULL, "does not fit in one file", "9223372036854775807 extra bytes");
    CHECK(!file_exists(g_big_path), "the refused state left no file");
    remove_tree(dir);
}

int main(void) {
    test_state_round_trips();
    test_header_encodes_64_bit_sizes();
    test_big_sizes_in_files();
    return test_summary();
}
