/*
dev/fuzz/harness.h: what every llmc libFuzzer harness shares.

A harness writes the fuzz input to a file and calls a real llmc loader on it. On bad input the
loaders print one "error: ..." line and call exit(1) (llmc_die in llmc/utils.h). To keep the
fuzzer running, this header is included BEFORE the llmc headers and renames a few libc calls
for the code that follows it (the system headers are included first, so their declarations
are untouched):

    exit(status)        -> fuzz_exit_: longjmp back into the harness (status must be 1)
    malloc/calloc/realloc/free, fopen/fclose
                        -> tracked, so that after a longjmp every buffer and FILE the loader
                           still held is released (no leak, no fd exhaustion over millions of runs)

A harness wraps the loader calls in FUZZ_BEGIN ... FUZZ_END, which ends with fuzz_end_input(died):
after a successful load (the harness has called the loader's _free function) nothing may be
left allocated or open, which catches leaks on the success path too; after a die everything
still tracked is freed. This needs no hook in llmc/utils.h and no fork per input, so libFuzzer
keeps its coverage feedback and runs at full speed.

Messages: the loaders' "error:" lines are noise while fuzzing; run with -close_fd_mask=2 (the
tests do) to hide them. libFuzzer and the sanitizers still report on their own descriptor.
*/
#ifndef LLMC_FUZZ_HARNESS_H
#define LLMC_FUZZ_HARNESS_H

// every system header the loaders use, so the renames below do not touch their declarations
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// ----------------------------------------------------------------------------
// exit() -> longjmp

static jmp_buf fuzz_jmp_;
static int fuzz_jmp_armed_ = 0;

static void fuzz_exit_(int status) __attribute__((noreturn));
static void fuzz_exit_(int status) {
    if (!fuzz_jmp_armed_) { (exit)(status); }
    if (status != 1) {
        fprintf(stderr, "fuzz: loader called exit(%d), expected exit(1) on bad input\n", status);
        abort();
    }
    fuzz_jmp_armed_ = 0;
    longjmp(fuzz_jmp_, 1);
}

// ----------------------------------------------------------------------------
// allocation and FILE tracking

#define FUZZ_MAX_TRACKED 4096

static void* fuzz_ptrs_[FUZZ_MAX_TRACKED];
static int fuzz_nptrs_ = 0;
static FILE* fuzz_files_[FUZZ_MAX_TRACKED];
static int fuzz_nfiles_ = 0;

static void fuzz_track_(void** table, int* n, void* p) {
    if (p == NULL) { return; }
    if (*n >= FUZZ_MAX_TRACKED) {
        fprintf(stderr, "fuzz: more than %d live allocations or files\n", FUZZ_MAX_TRACKED);
        abort();
    }
    table[(*n)++] = p;
}

// removes p from the table; returns 0 if it was not there
static int fuzz_untrack_(void** table, int* n, void* p) {
    for (int i = *n - 1; i >= 0; i--) {
        if (table[i] == p) {
            table[i] = table[--(*n)];
            return 1;
        }
    }
    return 0;
}

static void* fuzz_malloc_(size_t n) {
    void* p = (malloc)(n);
    fuzz_track_(fuzz_ptrs_, &fuzz_nptrs_, p);
    return p;
}

static void* fuzz_calloc_(size_t n, size_t size) {
    void* p = (calloc)(n, size);
    fuzz_track_(fuzz_ptrs_, &fuzz_nptrs_, p);
    return p;
}

static void* fuzz_realloc_(void* old, size_t n) {
    void* p = (realloc)(old, n);
    if (p != NULL) {
        if (old != NULL) { fuzz_untrack_(fuzz_ptrs_, &fuzz_nptrs_, old); }
        fuzz_track_(fuzz_ptrs_, &fuzz_nptrs_, p);
    }
    return p;
}

static void fuzz_free_(void* p) {
    if (p != NULL) { fuzz_untrack_(fuzz_ptrs_, &fuzz_nptrs_, p); }
    (free)(p);
}

static FILE* fuzz_fopen_(const char* path, const char* mode) {
    FILE* f = (fopen)(path, mode);
    fuzz_track_((void**)fuzz_files_, &fuzz_nfiles_, f);
    return f;
}

static int fuzz_fclose_(FILE* f) {
    if (f != NULL) { fuzz_untrack_((void**)fuzz_files_, &fuzz_nfiles_, f); }
    return (fclose)(f);
}

// called after every input: died = 1 if the loader called exit(1)
static void fuzz_end_input(int died) {
    if (!died && (fuzz_nptrs_ != 0 || fuzz_nfiles_ != 0)) {
        fprintf(stderr, "fuzz: the loader succeeded but left %d allocations and %d files open after its _free\n",
                fuzz_nptrs_, fuzz_nfiles_);
        abort();
    }
    while (fuzz_nptrs_ > 0) { (free)(fuzz_ptrs_[--fuzz_nptrs_]); }
    while (fuzz_nfiles_ > 0) { (fclose)(fuzz_files_[--fuzz_nfiles_]); }
}

#define exit(status) fuzz_exit_(status)
#define malloc(n) fuzz_malloc_(n)
#define calloc(n, size) fuzz_calloc_(n, size)
#define realloc(p, n) fuzz_realloc_(p, n)
#define free(p) fuzz_free_(p)
#define fopen(path, mode) fuzz_fopen_(path, mode)
#define fclose(f) fuzz_fclose_(f)

// FUZZ_BEGIN loader calls, then the loader's _free FUZZ_END
// A loader that dies jumps from inside the block to its end; fuzz_end_input then frees what it held.
#define FUZZ_BEGIN \
    { \
        volatile int fuzz_died_ = 1; \
        fuzz_jmp_armed_ = 1; \
        if (setjmp(fuzz_jmp_) == 0) {
#define FUZZ_END \
            fuzz_died_ = 0; \
        } \
        fuzz_jmp_armed_ = 0; \
        fuzz_end_input(fuzz_died_); \
    }

// ----------------------------------------------------------------------------
// the fuzz input as a file

static char fuzz_path_[4096];

static void fuzz_remove_file_(void) {
    if (fuzz_path_[0] != '\0') { unlink(fuzz_path_); }
}

// writes data to this process's scratch file ($LLMC_FUZZ_TMPDIR, else /dev/shm, $TMPDIR, /tmp); returns its path
static const char* fuzz_write_file(const uint8_t* data, size_t size) {
    if (fuzz_path_[0] == '\0') {
        // a RAM disk when there is one: an on-disk /tmp costs ten times the executions per second
        const char* dir = getenv("LLMC_FUZZ_TMPDIR");
        if (dir == NULL || dir[0] == '\0') { dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : getenv("TMPDIR"); }
        if (dir == NULL || dir[0] == '\0') { dir = "/tmp"; }
        snprintf(fuzz_path_, sizeof(fuzz_path_), "%s/llmc_fuzz_%ld.bin", dir, (long)getpid());
        atexit(fuzz_remove_file_);
    }
    FILE* f = (fopen)(fuzz_path_, "wb");
    if (f == NULL) {
        fprintf(stderr, "fuzz: cannot write %s: %s\n", fuzz_path_, strerror(errno));
        abort();
    }
    if (size > 0 && fwrite(data, 1, size, f) != size) {
        fprintf(stderr, "fuzz: short write to %s\n", fuzz_path_);
        abort();
    }
    (fclose)(f);
    return fuzz_path_;
}

// a small number from the first bytes of the input (consumed), for loader parameters
static unsigned fuzz_take_byte(const uint8_t** data, size_t* size) {
    if (*size == 0) { return 0; }
    unsigned v = **data;
    (*data)++;
    (*size)--;
    return v;
}

#endif // LLMC_FUZZ_HARNESS_H
