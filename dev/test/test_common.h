/*
dev/test/test_common.h: the tiny test harness shared by the C unit tests in dev/test.

    CHECK(cond, "what is checked %d", x)    counts a pass or prints the failure with file:line
    expect_die(...)                         runs a function in a forked child and checks that it
                                            exits with status 1 after printing exactly one
                                            stderr line that contains the given substrings
    test_summary()                          prints "N passed, M failed"; returns the exit status
    float_bits / bits_float                 a float's bit pattern and back
    random_array, max_abs_diff              deterministic test inputs and their comparison
    hash_fill(x, n, seed, scale)            x (n) in [-scale, scale), a hash of the index and seed
    matmul_rowmajor(...)                    the plain row-major matmul the GEMM layouts are checked against
    set_threads(n)                          OpenMP's thread count for what follows (nothing without OpenMP)
*/
#ifndef LLMC_TEST_COMMON_H
#define LLMC_TEST_COMMON_H

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static inline void set_threads(int n) {
#ifdef _OPENMP
    omp_set_num_threads(n);
#else
    (void)n;
#endif
}

static int tests_passed = 0;
static int tests_failed = 0;

static inline void check_report(int ok, const char* file, int line, const char* fmt, ...) {
    if (ok) {
        tests_passed++;
        return;
    }
    tests_failed++;
    va_list args;
    va_start(args, fmt);
    fprintf(stdout, "FAIL %s:%d: ", file, line);
    vfprintf(stdout, fmt, args);
    fprintf(stdout, "\n");
    va_end(args);
    fflush(stdout);
}
#define CHECK(cond, ...) check_report((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)

// prints the closing line and returns the process exit status (non-zero if anything failed)
static inline int test_summary(void) {
    printf("%d passed, %d failed\n", tests_passed, tests_failed);
    fflush(stdout);
    return tests_failed > 0 ? 1 : 0;
}

// ----------------------------------------------------------------------------
// running code that is expected to die

typedef void (*child_fn)(void* arg);

// runs fn(arg) in a forked child with stderr captured (stdout silenced);
// returns the child's exit status (or 128 + signal), stderr text in err (NUL-terminated)
static inline int run_in_child(child_fn fn, void* arg, char* err, size_t err_cap) {
    fflush(stdout);
    fflush(stderr);
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); exit(2); }
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); exit(2); }
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        close(fds[1]);
        if (freopen("/dev/null", "w", stdout) == NULL) { _exit(3); }
        fn(arg);
        fflush(stdout);
        fflush(stderr);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    for (;;) {
        char chunk[1024];
        ssize_t n = read(fds[0], chunk, sizeof(chunk));
        if (n <= 0) { break; }
        for (ssize_t i = 0; i < n; i++) {
            if (len + 1 < err_cap) { err[len++] = chunk[i]; }
        }
    }
    err[len] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status)) { return WEXITSTATUS(status); }
    if (WIFSIGNALED(status)) { return 128 + WTERMSIG(status); }
    return -1;
}

// counts the lines of s (a final line without '\n' counts too)
static inline int count_lines(const char* s) {
    int lines = 0;
    size_t len = strlen(s);
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\n') { lines++; }
    }
    if (len > 0 && s[len - 1] != '\n') { lines++; }
    return lines;
}

// checks that fn(arg) exits with status 1 after printing exactly one stderr line
// starting with "error: " and containing needle1 and needle2 (either may be NULL)
static inline void expect_die_at(const char* file, int line, const char* name, child_fn fn, void* arg,
                                 const char* needle1, const char* needle2) {
    char err[8192];
    int status = run_in_child(fn, arg, err, sizeof(err));
    int ok = status == 1 && count_lines(err) == 1 && strncmp(err, "error: ", 7) == 0
             && (needle1 == NULL || strstr(err, needle1) != NULL)
             && (needle2 == NULL || strstr(err, needle2) != NULL);
    check_report(ok, file, line, "%s: expected exit 1 with one 'error:' line containing [%s] and [%s]; got exit %d, stderr: %s",
                 name, needle1 ? needle1 : "", needle2 ? needle2 : "", status, err);
}
#define expect_die(name, fn, arg, needle1, needle2) expect_die_at(__FILE__, __LINE__, name, fn, arg, needle1, needle2)

// ----------------------------------------------------------------------------
// scratch directory and file helpers

// creates a fresh temporary directory into buf ("/tmp/llmc_test_XXXXXX")
static inline void make_temp_dir(char* buf, size_t cap) {
    snprintf(buf, cap, "%s/llmc_test_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (mkdtemp(buf) == NULL) { perror("mkdtemp"); exit(2); }
}

// removes a directory tree made by the tests (rm -rf)
static inline void remove_tree(const char* dir) {
    char cmd[8192];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0) { fprintf(stderr, "warning: could not remove %s\n", dir); }
}

// writes raw bytes to path (not atomic: test fixtures only)
static inline void write_bytes(const char* path, const void* data, size_t n) {
    FILE* f = fopen(path, "wb");
    if (f == NULL) { perror(path); exit(2); }
    if (n > 0 && fwrite(data, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

// ----------------------------------------------------------------------------
// numbers

static inline uint32_t float_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof(u)); return u; }
static inline float bits_float(uint32_t u) { float f; memcpy(&f, &u, sizeof(f)); return f; }

// x (n) in [-scale, scale): a hash of the index and seed, so every size gets different values
static inline void hash_fill(float* x, size_t n, unsigned seed, float scale) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u) ^ (seed * 40503u);
        h ^= h >> 13;
        h *= 0x5bd1e995u;
        h ^= h >> 15;
        x[i] = scale * ((float)(h % 20001u) / 10000.0f - 1.0f);
    }
}

// n floats in [-0.5, 0.5), the same for the same seed (malloc'd; the caller frees)
static inline float* random_array(size_t n, unsigned seed) {
    float* x = (float*)malloc(n * sizeof(float));
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xFFFF) / 65536.0f - 0.5f;
    }
    return x;
}

// the largest |a[i] - b[i]|; a NaN anywhere makes it NaN (which fails every "< tol" check)
// dbias (OC) = (beta ? dbias : 0) + the rows of d (BT,OC) summed by chunks of `chunk` rows, each in row order from
// zero, then the chunks' sums in chunk order: the kernels' bias gradients by chunks of rows, written out plainly
static inline void bias_sum_by_chunks(float* dbias, const float* d, int BT, int OC, int chunk, int beta) {
    float* part = (float*)malloc((size_t)OC * sizeof(float));
    if (part == NULL) { fprintf(stderr, "error: out of memory\n"); exit(1); }
    if (!beta) { memset(dbias, 0, (size_t)OC * sizeof(float)); }
    for (int r0 = 0; r0 < BT; r0 += chunk) {
        memset(part, 0, (size_t)OC * sizeof(float));
        for (int r = r0; r < BT && r < r0 + chunk; r++) {
            for (int o = 0; o < OC; o++) { part[o] += d[(size_t)r * OC + o]; }
        }
        for (int o = 0; o < OC; o++) { dbias[o] += part[o]; }
    }
    free(part);
}

static inline double max_abs_diff(const float* a, const float* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) { m = d; }
    }
    return m;
}

// out (batch, M, N) = beta * out + op(a) @ op(b) for each of `batch` matrices, in plain row-major loops.
// a is (batch, M, K), or (batch, K, M) when trans_a; b is (batch, K, N), or (batch, N, K) when trans_b.
// beta 0 ignores what out held.
static inline void matmul_rowmajor(float* out, const float* a, int trans_a, const float* b, int trans_b,
                                   int batch, int M, int N, int K, float beta) {
    for (int h = 0; h < batch; h++) {
        const float* ah = a + (size_t)h * M * K;
        const float* bh = b + (size_t)h * K * N;
        float* oh = out + (size_t)h * M * N;
        for (int m = 0; m < M; m++) {
            for (int n = 0; n < N; n++) {
                float sum = beta == 0.0f ? 0.0f : beta * oh[m * N + n];
                for (int k = 0; k < K; k++) {
                    sum += (trans_a ? ah[k * M + m] : ah[m * K + k]) * (trans_b ? bh[n * K + k] : bh[k * N + n]);
                }
                oh[m * N + n] = sum;
            }
        }
    }
}

#endif // LLMC_TEST_COMMON_H
