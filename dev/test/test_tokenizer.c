// dev/test/test_tokenizer.c: unit tests of llmc/tokenizer.h on small tokenizer files written here.
#include "llmc/tokenizer.h"
#include "dev/test/test_common.h"

static char g_dir[1024];
static char g_path[2048];

// writes a tokenizer file: header (magic, version, vocab, eot), then the given pieces;
// extra bytes are appended after the table
static void write_tokenizer(const char* path, uint32_t magic, uint32_t version, uint32_t vocab, uint32_t eot,
                            const char** pieces, int npieces, const char* extra, size_t extra_len) {
    uint32_t header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic;
    header[1] = version;
    header[2] = vocab;
    header[3] = eot;
    FILE* f = fopen(path, "wb");
    fwrite(header, sizeof(uint32_t), 256, f);
    for (int i = 0; i < npieces; i++) {
        unsigned char len = (unsigned char)strlen(pieces[i]);
        fwrite(&len, 1, 1, f);
        fwrite(pieces[i], 1, len, f);
    }
    if (extra_len > 0) { fwrite(extra, 1, extra_len, f); }
    fclose(f);
}

static void load(void* arg) {
    (void)arg;
    Tokenizer t;
    tokenizer_init(&t, g_path);
    tokenizer_free(&t);
}

// a missing file is not fatal: exits 0 when init_ok is 0 and decoding returns NULL, else 5
static void load_missing(void* arg) {
    (void)arg;
    Tokenizer t;
    tokenizer_init(&t, g_path);
    int ok = t.init_ok == 0 && tokenizer_decode(&t, 0) == NULL;
    tokenizer_free(&t);
    exit(ok ? 0 : 5);
}

static const char* PIECES[5] = {"Hello", " world", "!", "\n", "\x01"};

int main(void) {
    make_temp_dir(g_dir, sizeof(g_dir));
    snprintf(g_path, sizeof(g_path), "%s/tok.bin", g_dir);

    // version 2: EOT from the header
    write_tokenizer(g_path, 20240328, 2, 5, 2, PIECES, 5, NULL, 0);
    Tokenizer t;
    tokenizer_init(&t, g_path);
    CHECK(t.init_ok == 1 && t.vocab_size == 5 && t.eot_token == 2, "v2 loads, EOT from header");
    CHECK(strcmp(tokenizer_decode(&t, 0), "Hello") == 0 && strcmp(tokenizer_decode(&t, 1), " world") == 0,
          "decode returns the pieces");
    CHECK(tokenizer_decode_length(&t, 1) == 6, "decode length");
    CHECK(tokenizer_decode(&t, 5) == NULL && tokenizer_decode(&t, 0xFFFFFFFFu) == NULL, "out of range -> NULL");

    // safe_fprintf: printable pieces and whitespace pass, lone control bytes do not
    FILE* tmp = tmpfile();
    for (uint32_t i = 0; i < 5; i++) { safe_fprintf(tmp, tokenizer_decode(&t, i)); }
    safe_fprintf(tmp, NULL);
    safe_fprintf(tmp, tokenizer_decode(&t, 99));
    rewind(tmp);
    char buf[64] = {0};
    size_t n = fread(buf, 1, sizeof(buf) - 1, tmp);
    fclose(tmp);
    CHECK(n == 13 && strcmp(buf, "Hello world!\n") == 0, "safe_fprintf skips a lone control byte and NULL (got '%s')", buf);
    tokenizer_free(&t);

    // version 3 (Llama 3): EOT and BOS (header[4], 0 here) from the header; samples start at BOS
    write_tokenizer(g_path, 20240328, 3, 5, 2, PIECES, 5, NULL, 0);
    tokenizer_init(&t, g_path);
    CHECK(t.init_ok == 1 && t.version == 3 && t.eot_token == 2 && t.bos_token == 0 && tokenizer_start_token(&t) == 0,
          "v3 loads with EOT and BOS from the header");
    tokenizer_free(&t);
    write_tokenizer(g_path, 20240328, 2, 5, 2, PIECES, 5, NULL, 0);
    tokenizer_init(&t, g_path);
    CHECK(t.bos_token == -1 && tokenizer_start_token(&t) == 2, "v2 has no BOS: samples start at EOT");
    tokenizer_free(&t);

    // version 1: EOT assumed 50256 (needs a vocab above it)
    {
        static const char* many[50257];
        static char storage[50257][16];
        for (int i = 0; i < 50257; i++) {
            snprintf(storage[i], sizeof(storage[i]), "t%d", i);
            many[i] = storage[i];
        }
        write_tokenizer(g_path, 20240328, 1, 50257, 0, many, 50257, NULL, 0);
        tokenizer_init(&t, g_path);
        CHECK(t.init_ok && t.eot_token == 50256 && strcmp(tokenizer_decode(&t, 50256), "t50256") == 0,
              "v1 loads with EOT 50256");
        tokenizer_free(&t);
    }

    // missing file: not fatal, one warning line with the hint
    {
        snprintf(g_path, sizeof(g_path), "%s/missing.bin", g_dir);
        char err[4096];
        int status = run_in_child(load_missing, NULL, err, sizeof(err));
        CHECK(status == 0 && count_lines(err) == 1 && strstr(err, g_path) && strstr(err, "python train_gpt2.py"),
              "missing tokenizer: init_ok 0, decode NULL, a one-line hint (status %d, stderr %s)", status, err);
        snprintf(g_path, sizeof(g_path), "%s/tok.bin", g_dir);
    }

    // corrupt files die with one line
    write_tokenizer(g_path, 20240326, 2, 5, 2, PIECES, 5, NULL, 0);
    expect_die("wrong magic", load, NULL, g_path, "magic 20240326");
    write_tokenizer(g_path, 20240328, 4, 5, 2, PIECES, 5, NULL, 0);
    expect_die("wrong version", load, NULL, g_path, "version 4");
    write_tokenizer(g_path, 20240328, 2, 6, 2, PIECES, 5, NULL, 0);
    expect_die("vocab larger than the table", load, NULL, g_path, "truncated");
    write_tokenizer(g_path, 20240328, 2, 5, 2, PIECES, 5, "\x03" "ab", 3);
    expect_die("trailing data", load, NULL, g_path, "trailing data");
    write_tokenizer(g_path, 20240328, 2, 5, 2, PIECES, 4, "\x09" "abc", 4);
    expect_die("length past the end", load, NULL, g_path, "token 4 needs 9 bytes, only 3 left");
    write_tokenizer(g_path, 20240328, 2, 5, 5, PIECES, 5, NULL, 0);
    expect_die("EOT out of range", load, NULL, g_path, "EOT token 5");
    write_tokenizer(g_path, 20240328, 2, 5, 2, PIECES, 4, "\x00", 1);
    expect_die("zero-length token", load, NULL, g_path, "token 4 has length 0");
    write_tokenizer(g_path, 20240328, 2, 0, 0, PIECES, 0, NULL, 0);
    expect_die("vocab 0", load, NULL, g_path, "bad vocab size 0");
    write_bytes(g_path, "short", 5);
    expect_die("short file", load, NULL, g_path, "shorter than the 1024-byte header");

    remove_tree(g_dir);
    return test_summary();
}
