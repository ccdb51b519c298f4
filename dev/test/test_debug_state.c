/*
dev/test/test_debug_state.c: llmc/debug_state.h, the reference tensors the test programs read -- a small
debug state round-trips, and a truncated file or a wrong magic is one error line naming the file.
*/
#include "../../llmc/gpt2.h"
#include "test_common.h"

// a small model: 3 layers of 2 heads, C 64, V 100 padded to 128, maxT 32
static GPT2Config small_config(void) {
    GPT2Config c = {.max_seq_len = 32, .vocab_size = 100, .padded_vocab_size = 128, .num_layers = 3, .num_heads = 2, .channels = 64};
    return c;
}

// a tiny debug state for small_config with B=1, T=2, nsteps=2
static void write_debug_state(const char* path, int magic, size_t truncate_by) {
    GPT2Config cfg = small_config();
    size_t n = gpt2_num_parameters(&cfg);
    int header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic; header[1] = 2; header[2] = 1; header[3] = 2; header[4] = 2;
    float hp[6] = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};
    memcpy(&header[5], hp, sizeof(hp));
    size_t bytes = sizeof(header) + 2 * 2 * sizeof(int) + 2 * 100 * sizeof(float) + sizeof(float) + n * sizeof(float) + 2 * sizeof(float);
    char* buf = (char*)calloc(bytes, 1);
    memcpy(buf, header, sizeof(header));
    int tokens[4] = {1, 2, 2, 3};
    memcpy(buf + sizeof(header), tokens, sizeof(tokens));
    float loss = 4.5f;
    memcpy(buf + sizeof(header) + sizeof(tokens) + 200 * sizeof(float), &loss, sizeof(loss));
    write_bytes(path, buf, bytes - truncate_by);
    free(buf);
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
    remove_tree(g_dir);
}

int main(void) {
    test_debug_state();
    return test_summary();
}
