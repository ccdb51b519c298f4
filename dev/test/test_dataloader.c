// dev/test/test_dataloader.c: unit tests of llmc/dataloader.h on tiny shards written here.
#include "llmc/dataloader.h"
#include "dev/test/test_common.h"

static char g_dir[1024];
static char g_pattern[2048];
static char g_path[2048];

// writes a shard with the given tokens (uint16 when token_bytes is 2, else uint32); header token count =
// ntok_header (or ntok if < 0)
static void write_tokens(const char* path, int magic, int version, int token_bytes, const uint32_t* tokens, size_t ntok,
                         long ntok_header) {
    int header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic;
    header[1] = version;
    header[2] = ntok_header >= 0 ? (int)ntok_header : (int)ntok;
    FILE* f = fopen(path, "wb");
    fwrite(header, sizeof(int), 256, f);
    for (size_t i = 0; i < ntok; i++) {
        if (token_bytes == 2) {
            uint16_t t16 = (uint16_t)tokens[i];
            fwrite(&t16, 2, 1, f);
        } else {
            fwrite(&tokens[i], 4, 1, f);
        }
    }
    fclose(f);
}

// writes a shard whose token i is first + i; header token count = ntok_header (or ntok if < 0)
static void write_shard(const char* path, int magic, int version, int token_bytes, size_t ntok, uint32_t first,
                        long ntok_header) {
    uint32_t* tokens = (uint32_t*)mallocCheck(ntok * sizeof(uint32_t));
    for (size_t i = 0; i < ntok; i++) { tokens[i] = first + (uint32_t)i; }
    write_tokens(path, magic, version, token_bytes, tokens, ntok, ntok_header);
    free(tokens);
}

static void shard_path(char* out, size_t cap, const char* sub, const char* name) {
    snprintf(out, cap, "%s/%s/%s", g_dir, sub, name);
}

static void make_subdir(const char* sub) {
    char d[2048];
    snprintf(d, sizeof(d), "%s/%s", g_dir, sub);
    mkdir_p_check(d);
}

static void set_pattern(const char* sub) { snprintf(g_pattern, sizeof(g_pattern), "%s/%s/*.bin", g_dir, sub); }

// a loader over g_pattern with the given settings and expected shard format, `batches` batches read
typedef struct { size_t B, T; int rank, nproc, shuffle, vocab, batches; ShardFormat format; } LoaderArgs;
static void open_and_read(void* arg) {
    LoaderArgs* a = (LoaderArgs*)arg;
    DataLoader l;
    dataloader_init(&l, g_pattern, a->B, a->T, a->rank, a->nproc, a->shuffle, a->vocab, a->format);
    for (int i = 0; i < a->batches; i++) { dataloader_next_batch(&l); }
    dataloader_free(&l);
}

static int batch_is_consecutive(const DataLoader* l, int first) {
    for (size_t i = 0; i < l->B * l->T; i++) {
        if (l->inputs[i] != first + (int)i || l->targets[i] != first + (int)i + 1) { return 0; }
    }
    return 1;
}

static void test_order_without_shuffle(void) {
    make_subdir("order");
    shard_path(g_path, sizeof(g_path), "order", "s_000.bin");
    write_shard(g_path, 20240520, 1, 2, 8 * 5 + 1, 0, -1);  // exactly 5 samples of B*T = 8
    set_pattern("order");
    DataLoader l;
    dataloader_init(&l, g_pattern, 2, 4, 0, 1, 0, 50257, SHARD_FORMAT_GPT2);
    CHECK(l.num_shards == 1 && l.num_tokens == 41 && l.shard_num_samples == 5, "one shard, 41 tokens, 5 samples");
    int ok = 1;
    for (int k = 0; k < 12; k++) {
        dataloader_next_batch(&l);
        if (!batch_is_consecutive(&l, (k % 5) * 8)) { ok = 0; }
    }
    CHECK(ok, "batches are consecutive windows, wrapping after the last sample");
    CHECK(l.current_shard_idx == 2 && l.current_sample_idx == 2, "position counts shards across epochs (%zu, %zu)",
          l.current_shard_idx, l.current_sample_idx);
    dataloader_reset(&l);
    dataloader_next_batch(&l);
    CHECK(batch_is_consecutive(&l, 0), "reset goes back to the first batch");
    dataloader_free(&l);

    // one token fewer: only 4 samples fit (a sample needs B*T+1 tokens)
    write_shard(g_path, 20240520, 1, 2, 8 * 5, 0, -1);
    dataloader_init(&l, g_pattern, 2, 4, 0, 1, 0, 0, SHARD_FORMAT_GPT2);
    CHECK(l.shard_num_samples == 4, "40 tokens hold 4 samples of 8 (+1)");
    dataloader_free(&l);
}

static void test_rank_slicing(int shuffle) {
    make_subdir("ranks");
    for (int s = 0; s < 3; s++) {
        char name[64];
        snprintf(name, sizeof(name), "shard_%03d.bin", s);
        shard_path(g_path, sizeof(g_path), "ranks", name);
        write_shard(g_path, 20240520, 1, 2, 16 * (3 + s) + 1 + (size_t)s, (uint32_t)(10000 * s), -1);
    }
    set_pattern("ranks");
    DataLoader one, r0, r1;
    dataloader_init(&one, g_pattern, 4, 4, 0, 1, shuffle, 50257, SHARD_FORMAT_GPT2);
    dataloader_init(&r0, g_pattern, 2, 4, 0, 2, shuffle, 50257, SHARD_FORMAT_GPT2);
    dataloader_init(&r1, g_pattern, 2, 4, 1, 2, shuffle, 50257, SHARD_FORMAT_GPT2);
    int ok = 1;
    for (int k = 0; k < 40; k++) {  // several epochs over 3 + 4 + 5 samples
        dataloader_next_batch(&one);
        dataloader_next_batch(&r0);
        dataloader_next_batch(&r1);
        if (memcmp(one.inputs, r0.inputs, 8 * sizeof(int)) != 0 || memcmp(one.inputs + 8, r1.inputs, 8 * sizeof(int)) != 0
            || memcmp(one.targets, r0.targets, 8 * sizeof(int)) != 0 || memcmp(one.targets + 8, r1.targets, 8 * sizeof(int)) != 0) {
            ok = 0;
        }
    }
    CHECK(ok, "2 ranks with B=2 read exactly what 1 rank with B=4 reads (shuffle=%d)", shuffle);
    dataloader_free(&one);
    dataloader_free(&r0);
    dataloader_free(&r1);
}

static void test_shard_rollover(void) {
    make_subdir("roll");
    shard_path(g_path, sizeof(g_path), "roll", "a.bin");
    write_shard(g_path, 20240520, 1, 2, 8 * 2 + 5, 100, -1);   // 2 samples, 4 tokens left over
    shard_path(g_path, sizeof(g_path), "roll", "b.bin");
    write_shard(g_path, 20240520, 1, 2, 8 * 3 + 1, 2000, -1);  // 3 samples
    set_pattern("roll");
    DataLoader l;
    dataloader_init(&l, g_pattern, 2, 4, 0, 1, 0, 50257, SHARD_FORMAT_GPT2);
    const int expect_first[7] = {100, 108, 2000, 2008, 2016, 100, 108};
    int ok = 1;
    for (int k = 0; k < 7; k++) {
        dataloader_next_batch(&l);
        if (!batch_is_consecutive(&l, expect_first[k])) { ok = 0; }
    }
    CHECK(ok, "shard a (2 samples), then b (3 samples), then a again, in sorted glob order");
    CHECK(l.num_tokens == 21 + 25, "num_tokens sums the shards");
    dataloader_free(&l);
}

// the starts of all batches of one epoch, for the "ranks" shards (3+4+5 samples)
static void epoch_starts(DataLoader* l, int* starts, int n) {
    for (int k = 0; k < n; k++) {
        dataloader_next_batch(l);
        starts[k] = l->inputs[0];
    }
}

static int cmp_int(const void* a, const void* b) { return (*(const int*)a > *(const int*)b) - (*(const int*)a < *(const int*)b); }

static void test_shuffle(void) {
    set_pattern("ranks");  // written by test_rank_slicing: 3 shards of 3, 4, 5 samples of 16 tokens
    DataLoader a, b, plain;
    dataloader_init(&a, g_pattern, 4, 4, 0, 1, 1, 50257, SHARD_FORMAT_GPT2);
    dataloader_init(&b, g_pattern, 4, 4, 0, 1, 1, 50257, SHARD_FORMAT_GPT2);
    dataloader_init(&plain, g_pattern, 4, 4, 0, 1, 0, 50257, SHARD_FORMAT_GPT2);
    int sa[12], sb[12], sp[12], sa2[12];
    epoch_starts(&a, sa, 12);
    epoch_starts(&b, sb, 12);
    epoch_starts(&plain, sp, 12);
    CHECK(memcmp(sa, sb, sizeof(sa)) == 0, "shuffling is deterministic");
    CHECK(memcmp(sa, sp, sizeof(sa)) != 0, "shuffling changes the order");
    int sorted_a[12], sorted_p[12];
    memcpy(sorted_a, sa, sizeof(sa));
    memcpy(sorted_p, sp, sizeof(sp));
    qsort(sorted_a, 12, sizeof(int), cmp_int);
    qsort(sorted_p, 12, sizeof(int), cmp_int);
    CHECK(memcmp(sorted_a, sorted_p, sizeof(sa)) == 0, "a shuffled epoch is a permutation of the samples");
    int ok = 1;
    for (int k = 0; k < 12; k++) { if (!batch_is_consecutive(&a, a.inputs[0])) { ok = 0; } }
    CHECK(ok, "a shuffled batch is still a consecutive window");
    epoch_starts(&a, sa2, 12);
    memcpy(sorted_a, sa2, sizeof(sa2));
    qsort(sorted_a, 12, sizeof(int), cmp_int);
    CHECK(memcmp(sorted_a, sorted_p, sizeof(sa)) == 0, "the second epoch is a permutation too");
    CHECK(memcmp(sa, sa2, sizeof(sa)) != 0, "the second epoch has a different order");
    dataloader_free(&a);
    dataloader_free(&b);
    dataloader_free(&plain);
}

static void test_resume(int shuffle) {
    set_pattern("ranks");
    int ok = 1;
    for (int stop = 0; stop < 30; stop += 7) {
        DataLoader a, b;
        dataloader_init(&a, g_pattern, 2, 4, 1, 2, shuffle, 50257, SHARD_FORMAT_GPT2);
        for (int k = 0; k < stop; k++) { dataloader_next_batch(&a); }
        size_t shard = a.current_shard_idx, sample = a.current_sample_idx;
        dataloader_init(&b, g_pattern, 2, 4, 1, 2, shuffle, 50257, SHARD_FORMAT_GPT2);
        dataloader_next_batch(&b);  // move it somewhere else first
        dataloader_resume(&b, shard, sample);
        for (int k = 0; k < 20; k++) {
            dataloader_next_batch(&a);
            dataloader_next_batch(&b);
            if (memcmp(a.inputs, b.inputs, 8 * sizeof(int)) != 0 || memcmp(a.targets, b.targets, 8 * sizeof(int)) != 0) { ok = 0; }
        }
        dataloader_free(&a);
        dataloader_free(&b);
    }
    CHECK(ok, "resume from (shard, sample) continues exactly (shuffle=%d)", shuffle);
}

static void test_llama3_shards(void) {
    make_subdir("u32");
    shard_path(g_path, sizeof(g_path), "u32", "x.bin");
    write_shard(g_path, 20240801, 7, 4, 8 * 2 + 1, 100000, -1);
    set_pattern("u32");
    DataLoader l;
    dataloader_init(&l, g_pattern, 2, 4, 0, 1, 0, 128256, SHARD_FORMAT_LLAMA3);
    dataloader_next_batch(&l);
    CHECK(l.token_bytes == 4 && batch_is_consecutive(&l, 100000), "uint32 llama-3 shards are read");
    dataloader_free(&l);
}

// a loader refuses a shard of the other format with one line naming both formats and the command
// that writes the one it reads; a shard's name picks the dev/data script in that command
static void test_shard_of_the_other_format(void) {
    LoaderArgs llama = {2, 4, 0, 1, 0, 128256, 1, SHARD_FORMAT_LLAMA3};
    LoaderArgs gpt2 = {2, 4, 0, 1, 0, 50257, 1, SHARD_FORMAT_GPT2};
    char want[4400];
    make_subdir("formats");
    set_pattern("formats");
    shard_path(g_path, sizeof(g_path), "formats", "x.bin");

    write_shard(g_path, 20240520, 1, 2, 8 * 2 + 1, 100, -1);
    snprintf(want, sizeof(want), "error: %s: a gpt-2 token shard (magic 20240520, uint16 tokens), but this model reads "
             "llama-3 shards (magic 20240801, uint32 tokens); one of the dev/data/*.py scripts with --model_desc llama-3 "
             "--tokenizer DIR writes them\n", g_path);
    expect_die("a gpt-2 shard given to a llama-3 loader", open_and_read, &llama, want, NULL);
    write_shard(g_path, 20240801, 7, 4, 8 * 2 + 1, 100, -1);
    snprintf(want, sizeof(want), "error: %s: a llama-3 token shard (magic 20240801, uint32 tokens), but this model reads "
             "gpt-2 shards (magic 20240520, uint16 tokens); one of the dev/data/*.py scripts writes them\n", g_path);
    expect_die("a llama-3 shard given to a gpt-2 loader", open_and_read, &gpt2, want, NULL);
    write_shard(g_path, 20240801, 1, 4, 8 * 2 + 1, 100, -1);
    expect_die("llama-3 magic, gpt-2 version", open_and_read, &llama, g_path,
               "unsupported token shard version 1 (expected 7 for magic 20240801)");

    // a glob of a llama-3 shard (x.bin) and a gpt-2 one (y.bin): init names the second
    write_shard(g_path, 20240801, 7, 4, 8 * 2 + 1, 100, -1);
    char second[2048];
    shard_path(second, sizeof(second), "formats", "y.bin");
    write_shard(second, 20240520, 1, 2, 8 * 2 + 1, 100, -1);
    expect_die("a gpt-2 shard among llama-3 ones", open_and_read, &llama, second, "a gpt-2 token shard");
    remove(second);
    remove(g_path);

    shard_path(g_path, sizeof(g_path), "formats", "tinyshakespeare_val.bin");
    write_shard(g_path, 20240520, 1, 2, 8 * 2 + 1, 100, -1);
    expect_die("the script named from the shard's name", open_and_read, &llama, g_path,
               "; python dev/data/tinyshakespeare.py --model_desc llama-3 --tokenizer DIR writes them");
    remove(g_path);

    char command[256];
    CHECK(strcmp(shard_data_command(command, sizeof(command), "dev/data/fineweb10B/fineweb_train_*.bin", SHARD_FORMAT_GPT2),
                 "python dev/data/fineweb.py") == 0, "gpt-2 shards: the script without flags (%s)", command);
    CHECK(strcmp(shard_data_command(command, sizeof(command), "tinystories/x.bin", SHARD_FORMAT_LLAMA3),
                 "python dev/data/tinystories.py --model_desc llama-3 --tokenizer DIR") == 0,
          "llama-3 shards: the script with its flags (%s)", command);
}

static void test_bad_shards(void) {
    LoaderArgs args = {2, 4, 0, 1, 0, 50257, 1, SHARD_FORMAT_GPT2};
    make_subdir("bad");
    set_pattern("bad");
    shard_path(g_path, sizeof(g_path), "bad", "x.bin");

    write_shard(g_path, 20240326, 1, 2, 100, 0, -1);
    expect_die("wrong magic", open_and_read, &args, g_path, "magic 20240326");
    write_shard(g_path, 20240520, 3, 2, 100, 0, -1); // version 2 is a gpt-2 chat shard
    expect_die("wrong version", open_and_read, &args, g_path, "version 3");
    write_shard(g_path, 20240520, 1, 2, 100, 0, 200);
    expect_die("truncated", open_and_read, &args, g_path, "truncated");
    write_shard(g_path, 20240520, 1, 2, 100, 0, 50);
    expect_die("trailing bytes", open_and_read, &args, g_path, "size mismatch");
    write_shard(g_path, 20240520, 1, 2, 0, 0, -1);
    expect_die("empty", open_and_read, &args, g_path, "empty shard");
    write_shard(g_path, 20240520, 1, 2, 8, 0, -1);
    expect_die("too small", open_and_read, &args, g_path, "too small for one batch");
    write_bytes(g_path, "abc", 3);
    expect_die("shorter than a header", open_and_read, &args, g_path, "1024-byte header");

    // token ids: shard tokens are 50250 + i; the 8th (position 7) is 50257
    write_shard(g_path, 20240520, 1, 2, 100, 50250, -1);
    expect_die("token >= vocab", open_and_read, &args, g_path, "token id 50257 at position 7 >= vocab size 50257");
    LoaderArgs novocab = {2, 4, 0, 1, 0, 0, 3, SHARD_FORMAT_GPT2};
    char err[4096];
    CHECK(run_in_child(open_and_read, &novocab, err, sizeof(err)) == 0, "vocab_size 0 disables the check (%s)", err);

    snprintf(g_pattern, sizeof(g_pattern), "%s/nothing_here_*.bin", g_dir);
    expect_die("no match", open_and_read, &args, g_pattern, "no files match");
}

// ---------------------------------------------------------------------------- token ids checked at init

// the search for the first bad id, at every place of the array (vector body and scalar tail), both widths
static void test_find_bad_token(void) {
    uint16_t t16[67];
    uint32_t t32[67];
    int ok = 1;
    for (int bytes = 2; bytes <= 4; bytes += 2) {
        void* t = bytes == 2 ? (void*)t16 : (void*)t32;
        for (size_t n = 1; n <= 67; n++) {
            for (size_t i = 0; i < n; i++) { t16[i] = (uint16_t)(i % 1000); t32[i] = (uint32_t)(i % 1000); }
            if (shard_find_bad_token(t, n, bytes, 1000) != n) { ok = 0; }  // max id 999: none bad
            for (size_t bad = 0; bad < n; bad++) {
                t16[bad] = 1000;
                t32[bad] = 1000;
                if (bad + 1 < n) { t16[n - 1] = 1001; t32[n - 1] = 1001; }  // a later bad id does not hide the first
                if (shard_find_bad_token(t, n, bytes, 1000) != bad) { ok = 0; }
                t16[bad] = 0;
                t32[bad] = 0;
                t16[n - 1] = 0;
                t32[n - 1] = 0;
            }
        }
    }
    CHECK(ok, "shard_find_bad_token finds the first id >= bound at every position of 1..67 tokens, uint16 and uint32");
    t32[0] = 0x80000000u;
    CHECK(shard_find_bad_token(t32, 1, 4, shard_token_bound(0)) == 0, "vocab_size 0: a uint32 id >= 2^31 is bad");
    t16[0] = 65535;
    CHECK(shard_find_bad_token(t16, 1, 2, shard_token_bound(0)) == 1, "vocab_size 0: every uint16 id is fine");
}

// a shard of ntok ids 0, 1, ..., wrapping below `below`, with tokens[bad_pos] = bad_id (none if bad_pos >= ntok)
static void write_big_shard(const char* path, int token_bytes, size_t ntok, uint32_t below, size_t bad_pos, uint32_t bad_id) {
    uint32_t* tokens = (uint32_t*)mallocCheck(ntok * sizeof(uint32_t));
    for (size_t i = 0; i < ntok; i++) { tokens[i] = (uint32_t)(i % below); }
    if (bad_pos < ntok) { tokens[bad_pos] = bad_id; }
    write_tokens(path, token_bytes == 2 ? 20240520 : 20240801, token_bytes == 2 ? 1 : 7, token_bytes, tokens, ntok, -1);
    free(tokens);
}

// a shard of 20 check pieces: with OpenMP they are shared out over the threads, and the first bad id
// is still the one reported whichever thread finds its piece first (run in a child: the test process
// itself never starts an OpenMP team, so the forked child can)
static void test_token_ids_checked_in_parallel_pieces(void) {
    LoaderArgs init_only = {2, 4, 0, 1, 0, 50257, 0, SHARD_FORMAT_GPT2};
    const size_t piece = DATALOADER_CHECK_CHUNK_BYTES / 2, ntok = 20 * piece;
    make_subdir("pieces");
    set_pattern("pieces");
    shard_path(g_path, sizeof(g_path), "pieces", "a.bin");
    uint32_t* tokens = (uint32_t*)mallocCheck(ntok * sizeof(uint32_t));
    for (size_t i = 0; i < ntok; i++) { tokens[i] = (uint32_t)(i % 50257); }
    tokens[17 * piece + 3] = 60001;
    tokens[5 * piece + 11] = 60000;
    write_tokens(g_path, 20240520, 1, 2, tokens, ntok, -1);
    free(tokens);
    char want[4200];
    snprintf(want, sizeof(want), "token id 60000 at position %zu >= vocab size 50257", 5 * piece + 11);
    expect_die("the first of two bad ids in a 20-piece shard", open_and_read, &init_only, g_path, want);
    remove(g_path);
}

static void test_token_ids_checked_at_init(void) {
    LoaderArgs init_only = {2, 4, 0, 1, 0, 50257, 0, SHARD_FORMAT_GPT2};  // no batch is read: the failure must come from init
    char err[4096];
    char want[4200];
    // 3 chunks of the init check (524,288 uint16 tokens each) and a part; ids 0..50256
    const size_t ntok = 3 * 524288 + 1000;
    make_subdir("deep");
    set_pattern("deep");
    shard_path(g_path, sizeof(g_path), "deep", "a.bin");
    write_big_shard(g_path, 2, ntok, 50257, ntok, 0);
    CHECK(run_in_child(open_and_read, &init_only, err, sizeof(err)) == 0 && err[0] == '\0',
          "a correct shard with ids up to 50256 passes init (%s)", err);
    LoaderArgs read_some = {2, 4, 0, 1, 0, 50257, 5, SHARD_FORMAT_GPT2};
    CHECK(run_in_child(open_and_read, &read_some, err, sizeof(err)) == 0, "and its batches are read (%s)", err);

    // deep in the first shard: the third chunk, and the very last token
    write_big_shard(g_path, 2, ntok, 50257, 2 * 524288 + 15000, 60000);
    snprintf(want, sizeof(want), "error: %s: token id 60000 at position %zu >= vocab size 50257", g_path,
             (size_t)2 * 524288 + 15000);
    expect_die("bad id deep in the first shard", open_and_read, &init_only, want, NULL);
    write_big_shard(g_path, 2, ntok, 50257, ntok - 1, 50257);
    snprintf(want, sizeof(want), "%s: token id 50257 at position %zu >= vocab size 50257", g_path, ntok - 1);
    expect_die("bad id as the last token", open_and_read, &init_only, want, NULL);

    // the second of two shards, found before the loader reaches it
    write_big_shard(g_path, 2, ntok, 50257, ntok, 0);
    shard_path(g_path, sizeof(g_path), "deep", "b.bin");
    write_big_shard(g_path, 2, 20000, 50257, 15000, 60000);
    snprintf(want, sizeof(want), "%s: token id 60000 at position 15000 >= vocab size 50257", g_path);
    expect_die("bad id in the second of two shards", open_and_read, &init_only, want, NULL);
    remove(g_path);

    // uint32 llama-3 shards: against the vocab, and against 2^31 when vocab_size is 0
    make_subdir("deep32");
    set_pattern("deep32");
    shard_path(g_path, sizeof(g_path), "deep32", "x.bin");
    write_big_shard(g_path, 4, 700000, 128256, 700000, 0);
    LoaderArgs llama = {2, 4, 0, 1, 0, 128256, 2, SHARD_FORMAT_LLAMA3};
    CHECK(run_in_child(open_and_read, &llama, err, sizeof(err)) == 0, "a correct uint32 shard with ids up to 128255 passes (%s)", err);
    write_big_shard(g_path, 4, 700000, 128256, 654321, 128256);
    llama.batches = 0;
    snprintf(want, sizeof(want), "%s: token id 128256 at position 654321 >= vocab size 128256", g_path);
    expect_die("uint32 id = vocab deep in the shard", open_and_read, &llama, want, NULL);
    write_big_shard(g_path, 4, 700000, 128256, 300001, 0x80000000u);
    LoaderArgs novocab = {2, 4, 0, 1, 0, 0, 0, SHARD_FORMAT_LLAMA3};
    snprintf(want, sizeof(want), "%s: token id 2147483648 at position 300001 does not fit an int (>= 2^31)", g_path);
    expect_die("uint32 id that does not fit an int, vocab_size 0", open_and_read, &novocab, want, NULL);
}

// init checked the shard; one rewritten while the loader runs is still caught when the batch is read
static void rewrite_then_read(void* arg) {
    (void)arg;
    DataLoader l;
    dataloader_init(&l, g_pattern, 2, 4, 0, 1, 0, 50257, SHARD_FORMAT_GPT2);
    write_big_shard(g_path, 2, 10000, 50257, 5003, 50300);  // past what stdio may have buffered at init
    for (int k = 0; k <= 5003 / 8; k++) { dataloader_next_batch(&l); }  // batch k holds tokens 8k .. 8k+8
    dataloader_free(&l);
}

static void test_shard_rewritten_after_init(void) {
    make_subdir("rewrite");
    set_pattern("rewrite");
    shard_path(g_path, sizeof(g_path), "rewrite", "x.bin");
    write_big_shard(g_path, 2, 10000, 50257, 10000, 0);
    expect_die("shard rewritten after init", rewrite_then_read, NULL, g_path, "token id 50300 at position 5003 >= vocab size 50257");
}

static void test_free_twice(void) {
    set_pattern("order");
    DataLoader l;
    dataloader_init(&l, g_pattern, 2, 4, 0, 1, 0, 50257, SHARD_FORMAT_GPT2);
    dataloader_free(&l);
    CHECK(l.buffer == NULL && l.tokens_file == NULL && l.num_shards == 0, "dataloader_free leaves the struct zeroed");
    dataloader_free(&l);  // would be a double free if anything were left
}

// ---------------------------------------------------------------------------- EvalLoader

// appends one example to buf (uint16), returns the new length
static size_t add_example(uint16_t* buf, size_t n, int index, int label, int ctx_len, int comp_base) {
    size_t start = n;
    buf[n++] = 65535;
    buf[n++] = 0;  // bytes, filled below
    buf[n++] = (uint16_t)index;
    buf[n++] = (uint16_t)label;
    buf[n++] = 4;
    buf[n++] = (uint16_t)ctx_len;
    for (int i = 0; i < ctx_len; i++) { buf[n++] = (uint16_t)(1000 * index + i); }
    for (int c = 0; c < 4; c++) {
        int len = 1 + c;  // completion c has c+1 tokens
        buf[n++] = (uint16_t)len;
        for (int i = 0; i < len; i++) { buf[n++] = (uint16_t)(comp_base + 100 * c + i); }
    }
    buf[start + 1] = (uint16_t)((n - start) * 2);
    return n;
}

static uint16_t g_examples[4096];
static size_t g_examples_len;
static int g_longest;

static void write_eval(const char* path, int num_examples, int magic) {
    int header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic;
    header[1] = 1;
    header[2] = num_examples;
    header[3] = g_longest;
    FILE* f = fopen(path, "wb");
    fwrite(header, sizeof(int), 256, f);
    fwrite(g_examples, sizeof(uint16_t), g_examples_len, f);
    fclose(f);
}

typedef struct { size_t B, T; } EvalArgs;
static void open_eval(void* arg) {
    EvalArgs* a = (EvalArgs*)arg;
    EvalLoader l;
    evalloader_init(&l, g_path, a->B, a->T, 0, 1);
    evalloader_next_batch(&l);
    evalloader_free(&l);
}

static void test_evalloader(void) {
    // 5 examples, context lengths 3..7, labels 2,0,3,1,2
    const int labels[5] = {2, 0, 3, 1, 2};
    g_examples_len = 0;
    g_longest = 0;
    for (int i = 0; i < 5; i++) {
        size_t before = g_examples_len;
        g_examples_len = add_example(g_examples, g_examples_len, i, labels[i], 3 + i, 500);
        int bytes = (int)((g_examples_len - before) * 2);
        if (bytes > g_longest) { g_longest = bytes; }
    }
    snprintf(g_path, sizeof(g_path), "%s/hellaswag_val.bin", g_dir);
    write_eval(g_path, 5, 20240522);

    size_t B = 8, T = 16;
    EvalLoader l;
    evalloader_init(&l, g_path, B, T, 0, 1);
    CHECK(l.num_examples == 5 && l.num_batches == 3, "5 examples, 2 per batch: 3 batches (got %d)", l.num_batches);
    evalloader_next_batch(&l);
    CHECK(l.num_examples_in_batch == 2, "2 examples in the first batch");
    // example 0: ctx 3 tokens (0, 1, 2); completion c: c+1 tokens 500+100c+i
    int ok = 1;
    for (int c = 0; c < 4; c++) {
        const int* inp = l.inputs + c * T;
        const int* tgt = l.targets + c * T;
        const char* msk = l.mask + c * T;
        int len = 3 + c + 1;
        for (int t = 0; t < (int)T; t++) {
            int want_in = t < 3 ? t : (t < len ? 500 + 100 * c + (t - 3) : 0);
            int want_mask = (t >= 2 && t < len - 1) ? 1 : 0;
            if (inp[t] != want_in || msk[t] != want_mask) { ok = 0; }
            if (t + 1 < len && tgt[t] != inp[t + 1]) { ok = 0; }
        }
    }
    CHECK(ok, "example 0: inputs = context + completion, targets shifted, mask over completion targets");

    // losses: 5 everywhere except where set below
    float* losses = (float*)calloc(B * T, sizeof(float));
    for (size_t i = 0; i < B * T; i++) { losses[i] = 5.0f; }
    // example 0 (rows 0..3), label 2: completion 2 has 3 masked positions at 1.0 (sum 3.0, mean 1.0),
    // completion 1 has 2 at 1.2 (sum 2.4, mean 1.2): the mean picks the label, a sum would not
    for (int t = 0; t < (int)T; t++) {
        if (l.mask[2 * T + t]) { losses[2 * T + t] = 1.0f; }
        if (l.mask[1 * T + t]) { losses[1 * T + t] = 1.2f; }
    }
    // example 1 (rows 4..7), label 0: make completion 1 best -> wrong
    for (int t = 0; t < (int)T; t++) { if (l.mask[5 * T + t]) { losses[5 * T + t] = 0.5f; } }
    int correct = evalloader_stat_losses(&l, losses);
    CHECK(correct == 1, "stat_losses uses the mean over masked positions and compares with the label (got %d)", correct);
    for (int t = 0; t < (int)T; t++) { if (l.mask[5 * T + t]) { losses[5 * T + t] = 5.0f; } }
    for (int t = 0; t < (int)T; t++) { if (l.mask[4 * T + t]) { losses[4 * T + t] = 0.1f; } }
    CHECK(evalloader_stat_losses(&l, losses) == 2, "both examples correct");
    evalloader_next_batch(&l);
    evalloader_next_batch(&l);
    CHECK(l.num_examples_in_batch == 1, "the last batch holds the fifth example only");
    int rest_empty = 1;
    for (size_t i = 4 * T; i < B * T; i++) { if (l.mask[i] != 0 || l.inputs[i] != 0) { rest_empty = 0; } }
    CHECK(rest_empty, "rows past the last example are empty");
    CHECK(l.inputs[0] == 4000, "the fifth example's context starts with 4000");
    evalloader_reset(&l);
    evalloader_next_batch(&l);
    CHECK(l.inputs[0] == 0 && l.num_examples_in_batch == 2, "reset starts over");
    free(losses);
    evalloader_free(&l);

    // two ranks: examples 0..2 and 3..4, the same number of batches
    EvalLoader r0, r1;
    evalloader_init(&r0, g_path, 4, T, 0, 2);
    evalloader_init(&r1, g_path, 4, T, 1, 2);
    CHECK(r0.num_batches == 3 && r1.num_batches == 3, "both ranks do 3 batches");
    CHECK(r0.start_example_index == 0 && r0.end_example_index == 3 && r1.start_example_index == 3
          && r1.end_example_index == 5, "examples split [0,3) and [3,5)");
    evalloader_next_batch(&r1);
    CHECK(r1.inputs[0] == 3000, "rank 1 starts at example 3");
    evalloader_free(&r0);
    evalloader_free(&r1);

    // bad input
    EvalArgs small = {8, 6};
    expect_die("eval T too small", open_eval, &small, g_path, "longer than T=6");
    EvalArgs fine = {8, 16};
    write_eval(g_path, 5, 20240520);
    expect_die("eval magic", open_eval, &fine, g_path, "not a HellaSwag eval file");
    write_eval(g_path, 6, 20240522);
    expect_die("eval truncated", open_eval, &fine, g_path, "truncated");
    g_examples[0] = 1234;
    write_eval(g_path, 5, 20240522);
    expect_die("eval delimiter", open_eval, &fine, g_path, "delimiter");
    g_examples[0] = 65535;
    g_examples[3] = 7;  // label of example 0
    write_eval(g_path, 5, 20240522);
    expect_die("eval label", open_eval, &fine, g_path, "label 7");
    g_examples[3] = 2;
    write_eval(g_path, 4, 20240522);
    expect_die("eval trailing data", open_eval, &fine, g_path, "trailing data");
    g_examples[6] = 50257;  // first context token of example 0
    write_eval(g_path, 5, 20240522);
    expect_die("eval token range", open_eval, &fine, g_path, "example 0: token id 50257 >= vocab size 50257");
    g_examples[6] = 0;
    EvalArgs bad_b = {6, 16};
    write_eval(g_path, 5, 20240522);
    expect_die("eval B not a multiple of 4", open_eval, &bad_b, g_path, "multiple of 4");
}

int main(void) {
    make_temp_dir(g_dir, sizeof(g_dir));
    test_order_without_shuffle();
    test_rank_slicing(0);
    test_rank_slicing(1);
    test_shard_rollover();
    test_shuffle();
    test_resume(0);
    test_resume(1);
    test_llama3_shards();
    test_shard_of_the_other_format();
    test_bad_shards();
    test_find_bad_token();
    test_token_ids_checked_at_init();
    test_token_ids_checked_in_parallel_pieces();
    test_shard_rewritten_after_init();
    test_free_twice();
    test_evalloader();
    remove_tree(g_dir);
    return test_summary();
}
