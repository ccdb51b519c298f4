// dev/cuda_cpu/tests/tally.h: the emulated libraries' tests count their checks. check(ok, fmt, ...)
// counts one check and prints "FAIL: <what>" for a failed one, after g_tally_prefix (the MPI tests
// set "rank N: " there); the test's main prints the counts and exits non-zero on a failure.
#ifndef CUDA_CPU_TESTS_TALLY_H
#define CUDA_CPU_TESTS_TALLY_H

#include <stdarg.h>
#include <stdio.h>

static int g_passed = 0, g_failed = 0;
static char g_tally_prefix[32] = "";

static void check(bool ok, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(bool ok, const char* fmt, ...) {
    if (ok) { g_passed++; return; }
    g_failed++;
    va_list ap;
    va_start(ap, fmt);
    printf("%sFAIL: ", g_tally_prefix);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

#endif // CUDA_CPU_TESTS_TALLY_H
