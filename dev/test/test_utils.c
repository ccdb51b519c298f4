// dev/test/test_utils.c: unit tests of llmc/utils.h (checked I/O, allocation, headers, atomic files)
#include <sys/resource.h>

#include "llmc/utils.h"
#include "dev/test/test_common.h"

static char g_dir[1024];
static char g_path[4096];

static void die_formatted(void* arg) { (void)arg; llmc_die("%s: bad thing %d\nsecond line", "some/file.bin", 42); }
static void open_missing(void* arg) { (void)arg; FILE* f = fopenCheck("/nonexistent_dir_llmc/x.bin", "rb"); (void)f; }
static void open_unwritable(void* arg) { (void)arg; FILE* f = fopenCheck("/nonexistent_dir_llmc/y.bin", "wb"); (void)f; }
static void read_too_much(void* arg) {
    (void)arg;
    FILE* f = fopenCheck(g_path, "rb");
    char buf[64];
    freadCheck(buf, 1, sizeof(buf), f, g_path);
}
static void seek_negative(void* arg) {
    (void)arg;
    FILE* f = fopenCheck(g_path, "rb");
    fseekCheck(f, -100, SEEK_SET, g_path);
}
static void malloc_huge(void* arg) { (void)arg; void* p = mallocCheck((size_t)1 << 62); (void)p; }
static void calloc_overflow(void* arg) { (void)arg; void* p = callocCheck(SIZE_MAX / 2, 4); (void)p; }
static void aligned_overflow(void* arg) { (void)arg; void* p = callocAligned(SIZE_MAX / 2, 4); (void)p; }
static void aligned_huge(void* arg) { (void)arg; void* p = mallocAligned((size_t)1 << 62); (void)p; }
static void align_bad_switch(void* arg) {
    (void)arg;
    setenv("LLMC_ALIGN", "2", 1);
    void* p = mallocAligned(64);
    (void)p;
}

// blocks of n bytes from callocAligned / mallocAligned: each starts on a multiple of `align`, calloc's is zeroed, every
// byte can be written, and free_aligned takes it back (the sanitizers' build checks the frees)
static int aligned_blocks_ok(size_t align) {
    static const size_t sizes[] = {1, 100, 4096, (size_t)3 << 20};
    int ok = 1;
    for (int k = 0; k < 4; k++) {
        size_t n = sizes[k];
        unsigned char* z = (unsigned char*)callocAligned(n, 1);
        unsigned char* m = (unsigned char*)mallocAligned(n);
        ok = ok && (uintptr_t)z % align == 0 && (uintptr_t)m % align == 0;
        for (size_t i = 0; i < n; i++) { ok = ok && z[i] == 0; }
        memset(z, 0xab, n);
        memset(m, 0xcd, n);
        free_aligned(z);
        free_aligned(m);
    }
    free_aligned(NULL);
    return ok;
}

// LLMC_ALIGN=0, set before the first aligned allocation (a child: the switch is read once per process)
static void aligned_at_malloc_alignment(void* arg) {
    (void)arg;
    setenv("LLMC_ALIGN", "0", 1);
    exit(aligned_blocks_ok(16) ? 0 : 2);
}

// minor page faults of a loop that reads every element of a fresh calloc'd block of `pages` pages and then writes it,
// as AdamW's first step does with its moments, after commit_pages on it (commit 1) or not (0)
static long read_write_faults(size_t pages, int commit) {
    size_t n = pages * 4096 / sizeof(float);
    float* x = (float*)callocAligned(n, sizeof(float));
    if (commit) { commit_pages(x, n * sizeof(float)); }
    struct rusage before, after;
    getrusage(RUSAGE_SELF, &before);
    for (size_t i = 0; i < n; i += 512) { ((volatile float*)x)[i] = ((volatile float*)x)[i] * 0.5f + 1.0f; }
    getrusage(RUSAGE_SELF, &after);
    free_aligned(x);
    return after.ru_minflt - before.ru_minflt;
}

// LLMC_COMMIT_PAGES=0 (a child: the switch is read once): commit_pages leaves the pages alone, so the loop faults
static void commit_switched_off(void* arg) {
    (void)arg;
    setenv("LLMC_COMMIT_PAGES", "0", 1);
    exit(read_write_faults(4096, 1) >= 4096 ? 0 : 2);
}

// the checks of commit_pages: exits 0, or 2 with what failed on stderr
static void commit_checks(void* arg) {
    (void)arg;
    int ok = 1;
    long plain = read_write_faults(4096, 0), committed = read_write_faults(4096, 1);
    if (plain < 4096) {
        fprintf(stderr, "a fresh block's 4096 pages read and then written took %ld faults; ", plain);
        ok = 0;
    }
    if (committed > 8) {
        fprintf(stderr, "committed first, the same loop took %ld faults (%ld without); ", committed, plain);
        ok = 0;
    }
    size_t n = (size_t)3 << 20;
    unsigned char* b = (unsigned char*)mallocAligned(n);
    for (size_t i = 0; i < n; i++) { b[i] = (unsigned char)(i * 131 + 7); }
    commit_pages(b + 5, n - 5); // (not on a page boundary)
    for (size_t i = 0; i < n && ok; i++) {
        if (b[i] != (unsigned char)(i * 131 + 7)) {
            fprintf(stderr, "byte %zu of a written block changed", i);
            ok = 0;
        }
    }
    free_aligned(b);
    commit_pages(NULL, 0);
    exit(ok ? 0 : 2);
}

static void commit_bad_switch(void* arg) {
    (void)arg;
    setenv("LLMC_COMMIT_PAGES", "on", 1);
    commit_pages(arg, 4096);
}

static int g_header[256];
static void header_check(void* arg) {
    int* expect = (int*)arg;  // magic, vmin, vmax
    FILE* f = fopenCheck(g_path, "rb");
    read_header_check(f, g_path, g_header, expect[0], expect[1], expect[2], "token shard");
}
static void atomic_into_missing_dir(void* arg) {
    (void)arg;
    AtomicFile af;
    atomic_file_open(&af, "/nonexistent_dir_llmc/out.bin");
}
static void mkdir_over_file(void* arg) {
    (void)arg;
    char sub[4200];
    snprintf(sub, sizeof(sub), "%s/sub", g_path);  // g_path is a regular file
    mkdir_p_check(sub);
}

// 1 when the file at path holds exactly the bytes of `want`
static int file_holds(const char* path, const char* want) {
    char buf[64];
    FILE* f = fopen(path, "rb");
    size_t n = f ? fread(buf, 1, sizeof(buf), f) : 0;
    if (f) { fclose(f); }
    return n == strlen(want) && memcmp(buf, want, n) == 0;
}

// writes `data` to path through an AtomicFile, then commits (commit 1) or aborts (commit 0)
static void atomic_write_string(const char* path, const char* data, int commit) {
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, data, 1, strlen(data));
    if (commit) { atomic_file_commit(&af); } else { atomic_file_abort(&af); }
}

static int dir_has_tmp_files(const char* dir) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "ls '%s' | grep -q '\\.tmp\\.'", dir);
    return system(cmd) == 0;
}

int main(void) {
    make_temp_dir(g_dir, sizeof(g_dir));
    snprintf(g_path, sizeof(g_path), "%s/ten.bin", g_dir);
    write_bytes(g_path, "0123456789", 10);

    // llmc_die: one line, newlines collapsed, status 1
    expect_die("llmc_die", die_formatted, NULL, "error: some/file.bin: bad thing 42", "second line");
    expect_die("fopenCheck missing", open_missing, NULL, "/nonexistent_dir_llmc/x.bin", "No such file");
    expect_die("fopenCheck unwritable", open_unwritable, NULL, "/nonexistent_dir_llmc/y.bin", "writing");
    expect_die("freadCheck short", read_too_much, NULL, g_path, "truncated");
    expect_die("fseekCheck", seek_negative, NULL, g_path, "seek");
    expect_die("mallocCheck", malloc_huge, NULL, "4611686018427387904 bytes", NULL);
    expect_die("callocCheck overflow", calloc_overflow, NULL, "out of memory", NULL);

    // freadCheck / file_size_check
    {
        FILE* f = fopenCheck(g_path, "rb");
        char buf[4];
        freadCheck(buf, 1, 4, f, g_path);
        CHECK(memcmp(buf, "0123", 4) == 0, "freadCheck reads the bytes");
        CHECK(file_size_check(f, g_path) == 10, "file_size_check is 10");
        CHECK(ftell(f) == 4, "file_size_check restores the position (at %ld)", ftell(f));
        fseekCheck(f, 8, SEEK_SET, g_path);
        freadCheck(buf, 1, 2, f, g_path);
        CHECK(memcmp(buf, "89", 2) == 0, "fseekCheck + freadCheck");
        freadCheck(buf, 1, 0, f, g_path);  // zero-length read at EOF is fine
        fcloseCheck(f, g_path);
        CHECK(1, "zero-length read does not die");
    }

    // memory
    {
        int* p = (int*)mallocCheck(100 * sizeof(int));
        p[99] = 7;
        CHECK(p[99] == 7, "mallocCheck usable");
        free(p);
        int* q = (int*)callocCheck(100, sizeof(int));
        int zero = 1;
        for (int i = 0; i < 100; i++) { if (q[i] != 0) { zero = 0; } }
        CHECK(zero, "callocCheck zeroes");
        free(q);
    }

    // the model's buffers: on a cache line, or at malloc's 16 bytes with LLMC_ALIGN=0 (first: the switch is read once)
    {
        char err[1024];
        CHECK(run_in_child(aligned_at_malloc_alignment, NULL, err, sizeof(err)) == 0,
              "LLMC_ALIGN=0: 16-byte aligned blocks, zeroed, freed (%s)", err);
        expect_die("LLMC_ALIGN=2", align_bad_switch, NULL, "LLMC_ALIGN=2", "use 0 or 1");
        CHECK(aligned_blocks_ok(LLMC_ALIGN_BYTES), "callocAligned, mallocAligned: 64-byte aligned, zeroed, freed");
        expect_die("callocAligned overflow", aligned_overflow, NULL, "overflows", NULL);
        expect_die("mallocAligned huge", aligned_huge, NULL, "4611686018427387904 bytes", NULL);
    }

    // commit_pages: the pages of a fresh block committed for writing (no fault in the loop that then reads and writes
    // them, where it takes one or two a page without), and a block's contents unchanged, whatever they are (in children:
    // its OpenMP threads would stay behind in this process's later forks, which LeakSanitizer reports)
    {
        char err[1024];
        CHECK(run_in_child(commit_switched_off, NULL, err, sizeof(err)) == 0,
              "LLMC_COMMIT_PAGES=0: the pages left to fault (%s)", err);
        expect_die("LLMC_COMMIT_PAGES=on", commit_bad_switch, NULL, "LLMC_COMMIT_PAGES=on", "use 0 or 1");
        CHECK(run_in_child(commit_checks, NULL, err, sizeof(err)) == 0, "commit_pages: %s", err);
    }

    // read_header_check
    {
        int header[256];
        memset(header, 0, sizeof(header));
        header[0] = 20240520; header[1] = 1; header[2] = 5;
        write_bytes(g_path, header, sizeof(header));
        int ok_args[3] = {20240520, 1, 1};
        char err[1024];
        CHECK(run_in_child(header_check, ok_args, err, sizeof(err)) == 0, "good header accepted (%s)", err);
        int wrong_magic[3] = {20240326, 3, 5};
        expect_die("header magic", header_check, wrong_magic, "not a token shard file", "magic 20240520, expected 20240326");
        int wrong_version[3] = {20240520, 2, 2};
        expect_die("header version", header_check, wrong_version, g_path, "unsupported token shard version 1 (expected 2)");
        int wrong_range[3] = {20240520, 3, 5};
        expect_die("header version range", header_check, wrong_range, g_path, "(expected 3..5)");
        write_bytes(g_path, header, 100);
        expect_die("header short", header_check, ok_args, g_path, "too short");
        FILE* f = fopenCheck(g_path, "rb");
        fclose(f);
    }

    // atomic files
    {
        char dst[4200];
        snprintf(dst, sizeof(dst), "%s/atomic.bin", g_dir);
        AtomicFile af;
        atomic_file_open(&af, dst);
        CHECK(!file_exists(dst), "destination does not exist before commit");
        CHECK(file_exists(af.tmp_path), "tmp file exists while writing");
        atomic_file_write(&af, "hello", 1, 5);
        atomic_file_commit(&af);
        CHECK(file_holds(dst, "hello"), "committed content");
        CHECK(!dir_has_tmp_files(g_dir), "no tmp file left after commit");

        // abort keeps the old file
        atomic_write_string(dst, "XXXXXXXX", 0);
        CHECK(file_holds(dst, "hello"), "abort leaves old content");
        CHECK(!dir_has_tmp_files(g_dir), "no tmp file left after abort");

        // overwrite
        atomic_write_string(dst, "world!", 1);
        CHECK(file_holds(dst, "world!"), "commit replaces old content");
        expect_die("atomic open in missing dir", atomic_into_missing_dir, NULL, "/nonexistent_dir_llmc/out.bin.tmp.", "No such file");
    }

    // file_exists / mkdir_p_check
    {
        CHECK(file_exists(g_dir) && !file_exists("/nonexistent_dir_llmc"), "file_exists");
        char deep[4200];
        snprintf(deep, sizeof(deep), "%s/a/b/c", g_dir);
        mkdir_p_check(deep);
        CHECK(file_exists(deep), "mkdir_p_check creates parents");
        mkdir_p_check(deep);
        CHECK(1, "mkdir_p_check on an existing dir is fine");
        expect_die("mkdir over a file", mkdir_over_file, NULL, g_path, "not a directory");
    }

    remove_tree(g_dir);
    return test_summary();
}
