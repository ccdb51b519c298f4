/*
dev/fuzz/fuzz_train_state.c: libFuzzer harness for the training-state reader of llmc/checkpoint.h
(state_%08d_%05d.bin), with the layout of a small single-process run: FUZZ_STATE_PARAMS
parameters, optimizer slice = all of them, FUZZ_STATE_EXTRA bytes of extra state.
The input is the whole file.

Seeds: with LLMC_FUZZ_WRITE_SEEDS=<dir> in the environment the harness writes valid states
with the real writer (train_state_write) into <dir> and exits; dev/fuzz/make_corpus.py does this.
*/
#include "harness.h"
#include "../../llmc/checkpoint.h"

#define FUZZ_STATE_PARAMS 40
#define FUZZ_STATE_EXTRA 24

static float m[FUZZ_STATE_PARAMS], v[FUZZ_STATE_PARAMS];
static unsigned char extra[FUZZ_STATE_EXTRA];

static TrainState expected_layout(void) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.num_processes = 1;
    s.process_rank = 0;
    s.zero_stage = 0;
    s.should_shuffle = 0;
    s.num_parameters = FUZZ_STATE_PARAMS;
    s.opt_offset = 0;
    s.opt_size = FUZZ_STATE_PARAMS;
    s.extra_bytes = FUZZ_STATE_EXTRA;
    return s;
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
    const char* dir = getenv("LLMC_FUZZ_WRITE_SEEDS");
    if (dir == NULL) { return 0; }
    for (int k = 0; k < 2; k++) {
        TrainState s = expected_layout();
        s.step = k == 0 ? 0 : 123;
        s.rng_state = 1337u + (uint64_t)k;
        s.shard_idx = (uint64_t)k;
        s.sample_idx = (uint64_t)(3 * k);
        for (int i = 0; i < FUZZ_STATE_PARAMS; i++) { m[i] = 0.01f * (float)(i + k); v[i] = 1e-4f * (float)i; }
        for (int i = 0; i < FUZZ_STATE_EXTRA; i++) { extra[i] = (unsigned char)(i * 7 + k); }
        char path[4200];
        snprintf(path, sizeof(path), "%s/state_%d.bin", dir, k);
        train_state_write(path, &s, m, v, extra);
    }
    (exit)(0);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* path = fuzz_write_file(data, size);
    FUZZ_BEGIN
        TrainState expect = expected_layout();
        TrainState got;
        train_state_read(path, &expect, &got, m, v, extra);
        if (got.step < 0 || got.opt_size != FUZZ_STATE_PARAMS || got.extra_bytes != FUZZ_STATE_EXTRA) { abort(); }
        if (size != 1024 + 2 * 4 * FUZZ_STATE_PARAMS + FUZZ_STATE_EXTRA) { abort(); }
    FUZZ_END
    return 0;
}
