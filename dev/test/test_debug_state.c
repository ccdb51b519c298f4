/*
dev/test/test_debug_state.c: llmc/debug_state.h, the reference tensors the test programs read -- a small
debug state round-trips, and a truncated file or a wrong magic is one error line naming the file; a masked state
(header[18] = 1) reads targets -1, and a masked flag other than 0 or 1, a target -1 in an unmasked state and a
masked state without a supervised position are one error line each.
*/
#include "../../llmc/gpt2.h"
#include "test_common.h"

// a small model: 3 layers of 2 heads, C 64, V 100 padded to 128, maxT 32
static GPT2Config small_config(void) {
    GPT2Config c = {.max_seq_len = 32, .vocab_size = 100, .padded_vocab_size = 128, .num_layers = 3, .num_heads = 2, .channels = 64};
    return c;
}

// a tiny debug state for small_config with B=1, T=2, nsteps=2, header[18] = masked and targets {y0, y1}
static void write_debug_state_masked(const char* path, int magic, size_t truncate_by, int masked, int y0, int y1) {
    GPT2Config cfg = small_config();
    size_t n = gpt2_num_parameters(&cfg);
    int header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic; header[1] = 2; header[2] = 1; header[3] = 2; header[4] = 2;
    header[18] = masked;
    float hp[6] = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};
    memcpy(&header[5], hp, sizeof(hp));
    size_t bytes = sizeof(header) + 2 * 2 * sizeof(int) + 2 * 100 * sizeof(float) + sizeof(float) + n * sizeof(float) + 2 * sizeof(float);
    char* buf = (char*)calloc(bytes, 1);
    memcpy(buf, header, sizeof(header));
    int tokens[4] = {1, 2, y0, y1};
    memcpy(buf + sizeof(header), tokens, sizeof(tokens));
    float loss = 4.5f;
    memcpy(buf + sizeof(header) + sizeof(tokens) + 200 * sizeof(float), &loss, sizeof(loss));
    write_bytes(path, buf, bytes - truncate_by);
    free(buf);
}

static void write_debug_state(const char* path, int magic, size_t truncate_by) {
    write_debug_state_masked(path, magic, truncate_by, 0, 2, 3);
}

static char g_dir[4096];

// reads the debug state `arg` (a file name inside g_dir) for small_config
static void read_state(void* arg) {
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", g_dir, (const char*)arg);
    GPT2Config cfg = small_config();
    DebugState d;
    gpt2_debug_state_read(&d, path, &cfg, gpt2_num_parameters(&cfg));
}

static void test_debug_state(void) {
    make_temp_dir(g_dir, sizeof(g_dir));
    char path[4200];
    snprintf(path, sizeof(path), "%s/good.bin", g_dir);
    write_debug_state(path, DEBUG_STATE_MAGIC, 0);
    GPT2Config cfg = small_config();
    DebugState d;
    gpt2_debug_state_read(&d, path, &cfg, gpt2_num_parameters(&cfg));
    CHECK(d.B == 1 && d.T == 2 && d.nsteps == 2 && d.y[1] == 3 && d.loss == 4.5f && fabsf(d.beta2 - 0.95f) < 1e-7f,
          "a debug state round-trips (B, T, steps, tokens, loss, optimizer settings)");
    debug_state_free(&d);
    snprintf(path, sizeof(path), "%s/truncated.bin", g_dir);
    write_debug_state(path, DEBUG_STATE_MAGIC, 4);
    expect_die("truncated debug state", read_state, (void*)"truncated.bin", "truncated.bin", "size mismatch");
    snprintf(path, sizeof(path), "%s/magic.bin", g_dir);
    write_debug_state(path, 12345, 0);
    expect_die("wrong magic", read_state, (void*)"magic.bin", "magic.bin", "debug state");

    // masked: y -1 where not supervised
    snprintf(path, sizeof(path), "%s/masked.bin", g_dir);
    write_debug_state_masked(path, DEBUG_STATE_MAGIC, 0, 1, -1, 3);
    gpt2_debug_state_read(&d, path, &cfg, gpt2_num_parameters(&cfg));
    CHECK(d.masked == 1 && d.y[0] == -1 && d.y[1] == 3 && debug_state_supervised(&d) == 1,
          "a masked debug state reads its flag and its target -1 (1 of 2 positions supervised)");
    debug_state_free(&d);
    snprintf(path, sizeof(path), "%s/good.bin", g_dir);
    gpt2_debug_state_read(&d, path, &cfg, gpt2_num_parameters(&cfg));
    CHECK(d.masked == 0 && debug_state_supervised(&d) == 2, "an unmasked state: flag 0, every position supervised");
    debug_state_free(&d);
    snprintf(path, sizeof(path), "%s/flag.bin", g_dir);
    write_debug_state_masked(path, DEBUG_STATE_MAGIC, 0, 2, 2, 3);
    expect_die("masked flag 2", read_state, (void*)"flag.bin", "flag.bin", "masked header[18] = 2");
    snprintf(path, sizeof(path), "%s/unsupervised.bin", g_dir);
    write_debug_state_masked(path, DEBUG_STATE_MAGIC, 0, 1, -1, -1);
    expect_die("masked without a supervised position", read_state, (void*)"unsupervised.bin", "unsupervised.bin",
               "without a supervised position");
    snprintf(path, sizeof(path), "%s/minus2.bin", g_dir);
    write_debug_state_masked(path, DEBUG_STATE_MAGIC, 0, 1, -2, 3);
    expect_die("masked target -2", read_state, (void*)"minus2.bin", "minus2.bin", "y -2");
    snprintf(path, sizeof(path), "%s/unmasked_minus1.bin", g_dir);
    write_debug_state_masked(path, DEBUG_STATE_MAGIC, 0, 0, -1, 3);
    expect_die("target -1 in an unmasked state", read_state, (void*)"unmasked_minus1.bin", "unmasked_minus1.bin",
               "outside [0, 100)");
    remove_tree(g_dir);
}

int main(void) {
    test_debug_state();
    return test_summary();
}
