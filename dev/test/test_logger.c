// dev/test/test_logger.c: unit tests of llmc/logger.h (file creation, exact lines, resume appends).
#include "llmc/logger.h"
#include "dev/test/test_common.h"

static char g_dir[1024];

static size_t read_text(const char* path, char* buf, size_t cap) {
    FILE* f = fopen(path, "rb");
    if (f == NULL) { buf[0] = '\0'; return 0; }
    size_t n = fread(buf, 1, cap - 1, f);
    buf[n] = '\0';
    fclose(f);
    return n;
}

static char g_blocked[2200];
static void init_under_file(void* arg) {
    (void)arg;
    Logger l;
    logger_init(&l, g_blocked, 0, 0);
}

int main(void) {
    make_temp_dir(g_dir, sizeof(g_dir));
    char dir[2048], path[2100], text[4096];
    snprintf(dir, sizeof(dir), "%s/run/nested", g_dir);
    snprintf(path, sizeof(path), "%s/main.log", dir);

    Logger l;
    logger_init(&l, dir, 0, 0);
    CHECK(l.active == 1 && strcmp(l.output_log_file, path) == 0, "rank 0 logs to <dir>/main.log");
    CHECK(file_exists(path), "missing directories are created and the log exists after init");
    logger_log_train(&l, 1, 4.5f, 3e-4f, 1.25f);
    logger_log_val(&l, 10, 4.25f);
    logger_log_eval(&l, 10, 0.25f);
    read_text(path, text, sizeof(text));
    const char* want = "s:1 trl:4.500000 lr:0.000300 norm:1.250000\ns:10 tel:4.250000\ns:10 eval:0.250000\n";
    CHECK(strcmp(text, want) == 0, "exact line formats (got: %s)", text);

    // resume appends
    logger_init(&l, dir, 0, 1);
    logger_log_train(&l, 11, 4.0f, 3e-4f, 1.0f);
    read_text(path, text, sizeof(text));
    CHECK(strncmp(text, want, strlen(want)) == 0 && strstr(text, "s:11 trl:4.000000") != NULL, "resume appends");
    // a fresh run truncates
    logger_init(&l, dir, 0, 0);
    read_text(path, text, sizeof(text));
    CHECK(text[0] == '\0', "a fresh run starts an empty log");

    // other ranks and no directory: inactive, nothing written
    char dir1[2048], path1[2100];
    snprintf(dir1, sizeof(dir1), "%s/rank1", g_dir);
    snprintf(path1, sizeof(path1), "%s/main.log", dir1);
    logger_init(&l, dir1, 1, 0);
    logger_log_train(&l, 1, 1.0f, 1.0f, 1.0f);
    CHECK(l.active == 0 && !file_exists(path1), "rank 1 does not log");
    logger_init(&l, NULL, 0, 0);
    logger_log_val(&l, 1, 1.0f);
    CHECK(l.active == 0, "no directory: logging off");

    // a directory that cannot be created: one error line naming it
    char blocker[2048];
    snprintf(blocker, sizeof(blocker), "%s/afile", g_dir);
    write_bytes(blocker, "x", 1);
    snprintf(g_blocked, sizeof(g_blocked), "%s/sub", blocker);
    expect_die("log dir under a file", init_under_file, NULL, blocker, "not a directory");

    remove_tree(g_dir);
    return test_summary();
}
