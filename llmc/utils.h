/*
llmc/utils.h: checked wrappers around libc file and memory calls.

Every failure prints exactly ONE line to stderr and exits with status 1:
    error: <path>: <reason>
so a user sees which file is wrong and why, never a crash or a silent short read.
Input validation never uses assert (it vanishes under -DNDEBUG).

Files written by llmc are written atomically with AtomicFile: the data goes to
"<path>.tmp.<pid>" in the same directory, is flushed and fsync'ed, then renamed
over <path>, so a crash or a full disk never leaves a half-written file behind.
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__GNUC__) || defined(__clang__)
#define LLMC_NORETURN __attribute__((noreturn))
#define LLMC_PRINTF(fmt_idx, arg_idx) __attribute__((format(printf, fmt_idx, arg_idx)))
#else
#define LLMC_NORETURN
#define LLMC_PRINTF(fmt_idx, arg_idx)
#endif

// ----------------------------------------------------------------------------
// dying with one line

// A program that embeds llmc (pyllmc, in a Python process) may install a fatal-error hook: llmc_die
// calls it after printing its line, and the hook does not return (pyllmc longjmps back to the call
// that failed and raises a Python exception). Without a hook, llmc_die exits with status 1.
typedef void (*LlmcFatalHook)(void);

static inline LlmcFatalHook* llmc_fatal_hook_slot(void) {
    static LlmcFatalHook hook = NULL; // one per program: llmc is compiled as one translation unit
    return &hook;
}

static inline void llmc_set_fatal_hook(LlmcFatalHook hook) { *llmc_fatal_hook_slot() = hook; }

// prints "error: " + message + "\n" to stderr and exits with status 1 (or runs the fatal-error hook)
static inline LLMC_NORETURN LLMC_PRINTF(1, 2) void llmc_die(const char* fmt, ...) {
    char msg[8192];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    // collapse any newline in the message so the error stays one line
    for (char* p = msg; *p; p++) {
        if (*p == '\n' || *p == '\r') { *p = ' '; }
    }
    fflush(stdout);
    fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    LlmcFatalHook hook = *llmc_fatal_hook_slot();
    if (hook != NULL) { hook(); }
    exit(1);
}

// ----------------------------------------------------------------------------
// checked file operations

static inline FILE* fopen_check(const char* path, const char* mode, const char* src_file, int src_line) {
    FILE* f = fopen(path, mode);
    if (f == NULL) {
        int err = errno;
        const char* what = (mode[0] == 'r' && strchr(mode, '+') == NULL) ? "cannot open for reading" : "cannot open for writing";
        llmc_die("%s: %s (%s) [%s:%d]", path, what, strerror(err), src_file, src_line);
    }
    return f;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

// reads exactly n items of size bytes; a short read dies naming the path
static inline void freadCheck(void* ptr, size_t size, size_t n, FILE* f, const char* path) {
    if (n == 0 || size == 0) { return; }
    size_t got = fread(ptr, size, n, f);
    if (got != n) {
        if (ferror(f)) {
            llmc_die("%s: read error (%s)", path, strerror(errno));
        }
        llmc_die("%s: truncated (expected %zu items of %zu bytes, got %zu)", path, n, size, got);
    }
}

static inline void fwriteCheck(const void* ptr, size_t size, size_t n, FILE* f, const char* path) {
    if (n == 0 || size == 0) { return; }
    size_t put = fwrite(ptr, size, n, f);
    if (put != n) {
        llmc_die("%s: write failed (%zu of %zu items of %zu bytes written: %s)", path, put, n, size, strerror(errno));
    }
}

static inline void fseekCheck(FILE* f, long offset, int whence, const char* path) {
    if (fseek(f, offset, whence) != 0) {
        llmc_die("%s: seek to offset %ld (whence %d) failed (%s)", path, offset, whence, strerror(errno));
    }
}

static inline void fcloseCheck(FILE* f, const char* path) {
    if (fclose(f) != 0) {
        llmc_die("%s: close failed (%s)", path, strerror(errno));
    }
}

// size of the file in bytes; the current position is restored
static inline size_t file_size_check(FILE* f, const char* path) {
    long here = ftell(f);
    if (here < 0) { llmc_die("%s: ftell failed (%s)", path, strerror(errno)); }
    fseekCheck(f, 0, SEEK_END, path);
    long end = ftell(f);
    if (end < 0) { llmc_die("%s: ftell failed (%s)", path, strerror(errno)); }
    fseekCheck(f, here, SEEK_SET, path);
    return (size_t)end;
}

// ----------------------------------------------------------------------------
// checked memory allocation

static inline void* malloc_check(size_t size, const char* src_file, int src_line) {
    void* p = malloc(size == 0 ? 1 : size);
    if (p == NULL) {
        llmc_die("out of memory: malloc of %zu bytes failed [%s:%d]", size, src_file, src_line);
    }
    return p;
}

static inline void* calloc_check(size_t n, size_t size, const char* src_file, int src_line) {
    if (n != 0 && size > SIZE_MAX / n) {
        llmc_die("out of memory: calloc of %zu x %zu bytes overflows [%s:%d]", n, size, src_file, src_line);
    }
    void* p = calloc(n == 0 ? 1 : n, size == 0 ? 1 : size);
    if (p == NULL) {
        llmc_die("out of memory: calloc of %zu bytes failed [%s:%d]", n * size, src_file, src_line);
    }
    return p;
}

#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)

// frees each buffer of an array of the pointers a struct owns: its _free function lists them once,
//     void* buffers[] = {s->probs, s->indices};
//     FREE_ALL(buffers);
static inline void free_all(void* const* buffers, size_t n) {
    for (size_t i = 0; i < n; i++) { free(buffers[i]); }
}
#define FREE_ALL(buffers) free_all((buffers), sizeof(buffers) / sizeof((buffers)[0]))

// ----------------------------------------------------------------------------
// the 256 x int32 header every llmc binary file starts with

// reads the 1024-byte header into header[256] and checks magic and version;
// `what` names the kind of file for the message, e.g. "model checkpoint"
static inline void read_header_check(FILE* f, const char* path, int* header, int magic,
                                     int version_min, int version_max, const char* what) {
    size_t got = fread(header, sizeof(int), 256, f);
    if (got != 256) {
        llmc_die("%s: not a %s file (file too short for the 1024-byte header)", path, what);
    }
    if (header[0] != magic) {
        llmc_die("%s: not a %s file (magic %d, expected %d)", path, what, header[0], magic);
    }
    if (header[1] < version_min || header[1] > version_max) {
        if (version_min == version_max) {
            llmc_die("%s: unsupported %s version %d (expected %d)", path, what, header[1], version_min);
        }
        llmc_die("%s: unsupported %s version %d (expected %d..%d)", path, what, header[1], version_min, version_max);
    }
}

// ----------------------------------------------------------------------------
// atomic file writing: tmp file in the same directory, fsync, rename

typedef struct {
    FILE* f;
    char path[4096];      // final destination
    char tmp_path[4096];  // "<path>.tmp.<pid>", renamed over path on commit
} AtomicFile;

static inline void atomic_file_open(AtomicFile* af, const char* path) {
    size_t len = strlen(path);
    if (len + 32 >= sizeof(af->path)) {
        llmc_die("%s: path too long (%zu bytes)", path, len);
    }
    memcpy(af->path, path, len + 1);
    snprintf(af->tmp_path, sizeof(af->tmp_path), "%s.tmp.%ld", path, (long)getpid());
    af->f = fopen(af->tmp_path, "wb");
    if (af->f == NULL) {
        llmc_die("%s: cannot open for writing (%s)", af->tmp_path, strerror(errno));
    }
}

static inline void atomic_file_abort(AtomicFile* af) {
    if (af->f != NULL) {
        fclose(af->f);
        af->f = NULL;
    }
    unlink(af->tmp_path);
}

static inline void atomic_file_write(AtomicFile* af, const void* ptr, size_t size, size_t n) {
    if (n == 0 || size == 0) { return; }
    size_t put = fwrite(ptr, size, n, af->f);
    if (put != n) {
        int err = errno;
        atomic_file_abort(af);
        llmc_die("%s: write failed (%zu of %zu items of %zu bytes written: %s)", af->path, put, n, size, strerror(err));
    }
}

static inline void atomic_file_commit(AtomicFile* af) {
    const char* step = NULL;
    int err = 0;
    if (fflush(af->f) != 0) { step = "flush"; err = errno; }
    else if (fsync(fileno(af->f)) != 0) { step = "fsync"; err = errno; }
    if (step != NULL) {
        atomic_file_abort(af);
        llmc_die("%s: %s failed (%s)", af->path, step, strerror(err));
    }
    int rc = fclose(af->f);
    af->f = NULL;
    if (rc != 0) {
        err = errno;
        unlink(af->tmp_path);
        llmc_die("%s: close failed (%s)", af->path, strerror(err));
    }
    if (rename(af->tmp_path, af->path) != 0) {
        err = errno;
        unlink(af->tmp_path);
        llmc_die("%s: rename from %s failed (%s)", af->path, af->tmp_path, strerror(err));
    }
}

// ----------------------------------------------------------------------------
// small helpers

// seconds on the monotonic clock, for timing (only differences mean anything)
static inline double wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// [*lo, *hi) of part `part` of `parts` of [0, n), the parts near-equal runs whose edges fall on multiples of `unit`
// (how the CPU GEMMs give each thread its rows and columns)
static inline void split_units(int n, int parts, int part, int unit, int* lo, int* hi) {
    int units = (n + unit - 1) / unit;
    *lo = (int)((long)units * part / parts) * unit;
    *hi = (int)((long)units * (part + 1) / parts) * unit;
    *lo = *lo < n ? *lo : n;
    *hi = *hi < n ? *hi : n;
}

// how a CPU GEMM's threads share C (M,N): pr x pc rectangles (pr * pc = nthreads, edges on multiples of row_unit
// and col_unit: split_units), the grid that packs least. Each thread packs its columns of op(B) and, weighted by
// a_weight (0 where A is read where it lies), its rows of op(A).
static inline void gemm_thread_grid(int M, int N, int nthreads, int row_unit, int col_unit, double a_weight, int* pr,
                                    int* pc) {
    int best = 1;
    double best_cost = 1e300;
    for (int r = 1; r <= nthreads; r++) {
        if (nthreads % r != 0) { continue; }
        int c = nthreads / r;
        if ((r > 1 && (M + row_unit - 1) / row_unit < r) || (c > 1 && (N + col_unit - 1) / col_unit < c)) { continue; }
        double cost = (double)N / c + a_weight * M / r;
        if (cost < best_cost) { best_cost = cost; best = r; }
    }
    *pr = best;
    *pc = nthreads / best;
}

// qsort's comparison of two doubles, ascending
static inline int compare_doubles(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return (x > y) - (x < y);
}

// an on/off environment switch that is on unless set to 0: 1 or 0; any other value is one error line
static inline int env_switch_on(const char* name) {
    const char* env = getenv(name);
    if (env != NULL && strcmp(env, "0") != 0 && strcmp(env, "1") != 0) { llmc_die("%s=%s: use 0 or 1", name, env); }
    return env == NULL || strcmp(env, "0") != 0;
}

// ----------------------------------------------------------------------------
// The big buffers start on a cache line (the model's parameters, gradients, activations, their bf16 copies, AdamW's
// moments, the kept logits; the kernels' kept work buffers: scratch_reserve's, Muon's). glibc's malloc and calloc hand
// out blocks 16 bytes past a line, so every 64-byte row an AVX-512 load or an AMX tile read there spanned two lines
// (llmc's AMX GEMM ran the d12 step's shapes 9-27 % slower, doc/cpu-speed.md).
// The block is calloc's (or malloc's), its pointer stored just before the line-aligned start the caller gets, so
// calloc's zeroed pages stay uncommitted until touched (peak memory unchanged); free_aligned frees it, and free() must
// not. LLMC_ALIGN=0 returns the block at malloc's own 16-byte alignment instead (the same bits: kept until the
// alignment is timed beyond the AMX Xeon and the Zen 4; read once).
#define LLMC_ALIGN_BYTES 64

static inline int llmc_align_lines(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_ALIGN"); }
    return on;
}

static inline void* alloc_aligned_check(size_t n, size_t size, int zeroed, const char* src_file, int src_line) {
    size_t extra = LLMC_ALIGN_BYTES + sizeof(void*);
    if (n != 0 && size > (SIZE_MAX - extra) / n) {
        llmc_die("out of memory: allocation of %zu x %zu bytes overflows [%s:%d]", n, size, src_file, src_line);
    }
    size_t bytes = n * size + extra;
    char* raw = (char*)(zeroed ? calloc(bytes, 1) : malloc(bytes));
    if (raw == NULL) {
        llmc_die("out of memory: allocation of %zu bytes failed [%s:%d]", n * size, src_file, src_line);
    }
    uintptr_t at = (uintptr_t)raw + sizeof(void*); // (room for raw just before the start)
    if (llmc_align_lines()) { at = (at + LLMC_ALIGN_BYTES - 1) & ~(uintptr_t)(LLMC_ALIGN_BYTES - 1); }
    else { at = (at + 15) & ~(uintptr_t)15; }
    memcpy((void*)(at - sizeof(void*)), &raw, sizeof(raw));
    return (void*)at;
}

static inline void free_aligned(void* p) {
    if (p == NULL) { return; }
    void* raw;
    memcpy(&raw, (char*)p - sizeof(void*), sizeof(raw));
    free(raw);
}

#define mallocAligned(size) alloc_aligned_check(1, size, 0, __FILE__, __LINE__)
#define callocAligned(n, size) alloc_aligned_check(n, size, 1, __FILE__, __LINE__)

// Commits the pages of [p, p + bytes) for writing before a loop that reads each element and then writes it, as an
// optimizer's first step does with its zeroed state. An untouched page of a calloc'd block takes two faults there: the
// read maps the shared zero page, the write copies it and flushes the page from every other thread's TLB (an interrupt
// to each CPU, and on a virtual machine an exit each): d12's first AdamW step took 2.2 s against 0.1 s for the next
// (Zen 4, 2 threads). One atomic or of 0 a page is a write from the start and changes no value, whatever the page
// holds; the threads share the pages. LLMC_COMMIT_PAGES=0 leaves the faults as they were (read once). (The AMX Xeon's
// first GPT-2 d12 -p bf16 step at B=4 T=1024: 3055 ms committed, 3532 without, 2026-12-06.)
static inline int llmc_commit_pages_on(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_COMMIT_PAGES"); }
    return on;
}

static inline void commit_pages(void* p, size_t bytes) {
    if (!llmc_commit_pages_on() || p == NULL || bytes == 0) { return; }
    const size_t page = 4096;
    unsigned char* base = (unsigned char*)p;
    long n = (long)((bytes + page - 1) / page);
#ifdef _OPENMP
    #pragma omp parallel for schedule(static) if (n >= 64)
#endif
    for (long i = 0; i < n; i++) { __atomic_fetch_or(base + (size_t)i * page, (unsigned char)0, __ATOMIC_RELAXED); }
}

// a work buffer kept between calls (no allocation per step): *buf grows to at least `bytes`,
// its old contents dropped; *capacity holds its size. Returns *buf, on a cache line (mallocAligned).
static inline void* scratch_reserve(void** buf, size_t* capacity, size_t bytes) {
    if (bytes > *capacity) {
        free_aligned(*buf);
        *buf = mallocAligned(bytes);
        *capacity = bytes;
    }
    return *buf;
}

// Which of n named choices the environment variable `name` picks: its index in names; unset or empty, dflt; any other
// value is one error line ("NAME=value: use a, b or c")
static inline int env_choice(const char* name, const char* const* names, int n, int dflt) {
    const char* env = getenv(name);
    if (env == NULL || env[0] == '\0') { return dflt; }
    for (int i = 0; i < n; i++) {
        if (strcmp(env, names[i]) == 0) { return i; }
    }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        size_t len = strlen(list);
        snprintf(list + len, sizeof(list) - len, "%s%s", i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    }
    llmc_die("%s=%s: use %s", name, env, list);
    return dflt;
}

// Before MPI_Init: a process started without a launcher (Open MPI's singleton: no mpirun set its rank) talks to no
// other, yet Open MPI's libfabric transport (btl ofi) probes the fabric in MPI_Init and sleeps a second doing so, on
// every start. Such a process leaves that transport out, unless OMPI_MCA_btl already says which ones to use.
static inline void mpi_singleton_without_fabric(void) {
    if (getenv("OMPI_COMM_WORLD_SIZE") == NULL && getenv("PMIX_RANK") == NULL) { setenv("OMPI_MCA_btl", "^ofi", 0); }
}

static inline int file_exists(const char* path) {
    struct stat st;
    return stat(path, &st) == 0;
}

// creates dir and any missing parents (like mkdir -p); dies with one line on failure
static inline void mkdir_p_check(const char* dir) {
    char buf[4096];
    size_t len = strlen(dir);
    if (len == 0) { return; }
    if (len >= sizeof(buf)) { llmc_die("%s: path too long (%zu bytes)", dir, len); }
    memcpy(buf, dir, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char saved = buf[i];
            buf[i] = '\0';
            struct stat st;
            if (stat(buf, &st) != 0) {
                if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                    llmc_die("%s: cannot create directory (%s)", buf, strerror(errno));
                }
            } else if (!S_ISDIR(st.st_mode)) {
                llmc_die("%s: exists and is not a directory", buf);
            }
            buf[i] = saved;
        }
    }
}

#endif // LLMC_UTILS_H
