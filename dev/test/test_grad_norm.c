/*
dev/test/test_grad_norm.c: llmc/cpu/cpu_model.h's gradient norm (the squares summed in double over fixed 64K chunks)
against a long double reference, and its two ways of summing a chunk against each other.

    dev/test/test_grad_norm          the checks (about a second); exits non-zero on any mismatch
    dev/test/test_grad_norm --time   the norm of d12's 124,475,904 gradients on the run's threads, read from memory:
                                     32 and 8 running sums a chunk alternating, 9 rounds, median ms and GB/s

Checked:
- 32 sums a chunk (the default) and 8 (LLMC_GRAD_NORM_WIDE=0) within the bound of their longest chain of adds of
  the long double sum of squares, and their float norms within one ulp of its square root, for sizes around every boundary (the 32 sums, the 8, a chunk,
  several chunks with a ragged tail; 0 and 1), values spread over 10^-20 .. 10^4, negative ones, zeros;
- the same bits on 1, 2 and 3 threads, for both, and the bits of the chunks' sums added in order (sizes with groups of
  four whole chunks, read side by side, and ragged groups);
- four whole chunks read side by side (cpu_grad_norm_chunks): each stream's sum has its chunk's bits;
- each sum of a chunk in the order the header states (element i into running sum i mod 32, the sums in order, then
  the tail), written out here in scalar code: the vectorised loop may not reorder it;
- LLMC_GRAD_NORM_WIDE picks the way (0: 8 sums, unset or 1: 32), read once in a process; any other value is one
  error line.
*/
#include "../../llmc/cpu/cpu_model.h"
#include "test_common.h"

// x (n): magnitudes 10^-20 .. 10^4 by a hash of the index, every 7th negative, every 11th zero
static void fill_gradients(float* x, size_t n, uint32_t seed) {
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u) ^ (seed * 2246822519u);
        h ^= h >> 15;
        h *= 2654435761u;
        h ^= h >> 13;
        float mantissa = 1.0f + (float)(h & 0xffff) / 65536.0f;
        float v = mantissa * powf(10.0f, (float)((h >> 16) % 25) - 20.0f);
        x[i] = i % 11 == 0 ? 0.0f : i % 7 == 0 ? -v : v;
    }
}

static long double sum_squares_reference(const float* g, size_t n) {
    long double s = 0.0L;
    for (size_t i = 0; i < n; i++) { s += (long double)g[i] * g[i]; }
    return s;
}

// a chunk's sum in the stated order, one scalar add at a time
static double chunk_sum_stated(const float* g, size_t n, int nsums) {
    double sums[CPU_GRAD_NORM_SUMS] = {0.0}, s = 0.0;
    size_t full = n / (size_t)nsums * (size_t)nsums;
    for (size_t i = 0; i < full; i++) { sums[i % (size_t)nsums] += (double)g[i] * g[i]; }
    for (size_t i = full; i < n; i++) { s += (double)g[i] * g[i]; }
    for (int j = 0; j < nsums; j++) { s += sums[j]; }
    return s;
}

static float float_next_up(float x) { return nextafterf(x, INFINITY); }
static float float_next_down(float x) { return nextafterf(x, -INFINITY); }

static void check_size(const float* g, size_t n) {
    long double ref = sum_squares_reference(g, n);
    float ref_norm = (float)sqrtl(ref);
    for (int wide = 0; wide <= 1; wide++) {
        float norms[3];
        for (int threads = 1; threads <= 3; threads++) {
            set_threads(threads);
            norms[threads - 1] = cpu_grad_norm_sums(g, n, wide);
        }
        set_threads(2);
        CHECK(memcmp(&norms[0], &norms[1], sizeof(float)) == 0 && memcmp(&norms[0], &norms[2], sizeof(float)) == 0,
              "n=%zu wide=%d: 1, 2, 3 threads give %.9g %.9g %.9g", n, wide, norms[0], norms[1], norms[2]);
        CHECK(norms[0] == ref_norm || norms[0] == float_next_up(ref_norm) || norms[0] == float_next_down(ref_norm),
              "n=%zu wide=%d: norm %.9g, the reference's %.9g", n, wide, norms[0], ref_norm);
        // every chunk's sum: the stated order's bits, and within 1e-15 of the reference
        double total = 0.0;
        for (size_t i = 0; i < n; i += (size_t)1 << 16) {
            size_t len = n - i < ((size_t)1 << 16) ? n - i : ((size_t)1 << 16);
            double got = cpu_grad_norm_chunk(g + i, len, wide);
            double stated = chunk_sum_stated(g + i, len, wide ? CPU_GRAD_NORM_SUMS : 8);
            CHECK(memcmp(&got, &stated, sizeof(double)) == 0, "n=%zu wide=%d chunk at %zu: %.17g, stated order %.17g", n,
                  wide, i, got, stated);
            total += got;
        }
        // a sum of k non-negative terms in double is within (k - 1) 2^-53 of the exact one, relatively: here k is
        // the longest chain of adds, a running sum's share of a chunk, the sums, the tail and the chunks
        size_t nsums = wide ? CPU_GRAD_NORM_SUMS : 8, nchunks = (n >> 16) + 1;
        double bound = (double)(((size_t)1 << 16) / nsums + nsums + nsums + nchunks) * ldexp(1.0, -53);
        // the whole norm: those chunk sums added in order, whichever thread and stream summed each
        float from_chunks = (float)sqrt(total);
        CHECK(memcmp(&norms[0], &from_chunks, sizeof(float)) == 0, "n=%zu wide=%d: norm %.9g, from its chunks %.9g", n,
              wide, norms[0], from_chunks);
        double err = fabs((double)((long double)total - ref));
        CHECK(err <= bound * (double)ref, "n=%zu wide=%d: sum of squares %.17g, reference %.17Lg (%.2g apart, bound %.2g)",
              n, wide, total, ref, err / (double)ref, bound);
    }
}

static void die_on_bad_switch(void* arg) {
    (void)arg;
    setenv("LLMC_GRAD_NORM_WIDE", "32", 1);
    float g[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    cpu_grad_norm(g, 4);
}

typedef struct {
    const float* g;
    size_t n;
    const char* value; // LLMC_GRAD_NORM_WIDE, or NULL: unset
    int wide;          // the way it should pick
} SwitchCase;

// exits 0 when cpu_grad_norm under the case's setting gives the bits of the way it should pick, else 1
static void norm_under_switch(void* arg) {
    const SwitchCase* c = (const SwitchCase*)arg;
    if (c->value != NULL) { setenv("LLMC_GRAD_NORM_WIDE", c->value, 1); }
    else { unsetenv("LLMC_GRAD_NORM_WIDE"); }
    float got = cpu_grad_norm(c->g, c->n);
    float want = cpu_grad_norm_sums(c->g, c->n, c->wide);
    _exit(memcmp(&got, &want, sizeof(float)) == 0 ? 0 : 1);
}

// 160 gradients whose float norm the way of summing decides (with 8 sums 1 + 2^-23, with 32 sums 1): 1, 2^-12,
// 2^-12 and 2^-24 at 0, 32, 64 and 96 (running sum 0 in both ways) square to exactly (1 + 2^-24)^2, whose root is
// the midpoint between 1 and the float above it; 2^-28 at every index not a multiple of 8 squares to 2^-56. With 32
// sums each small sum holds 5 of those, 1.25 x 2^-54, under half an ulp of the total (2^-53), and adds nothing: the
// root stays on the midpoint and the float rounds to even, 1. With 8 sums each holds 20, 1.25 x 2^-52, and adds an
// ulp: seven ulps lift the root past the midpoint, to 1 + 2^-23
static size_t fill_gradients_ways_differ(float* g) {
    size_t n = 160;
    for (size_t i = 0; i < n; i++) { g[i] = i % 8 != 0 ? ldexpf(1.0f, -28) : 0.0f; }
    g[0] = 1.0f;
    g[32] = ldexpf(1.0f, -12);
    g[64] = ldexpf(1.0f, -12);
    g[96] = ldexpf(1.0f, -24);
    return n;
}

static int time_norms(void) {
    size_t n = 124475904, evict_n = (size_t)64 << 20; // d12's parameters; 256 MB written between two norms
    float* g = (float*)malloc(n * sizeof(float));
    float* evict = (float*)malloc(evict_n * sizeof(float));
    if (g == NULL || evict == NULL) { fprintf(stderr, "error: out of memory\n"); return 1; }
    fill_gradients(g, n, 7);
    enum { ROUNDS = 9 };
    double ms[2][ROUNDS];
    for (int r = 0; r < ROUNDS; r++) {
        for (int wide = 1; wide >= 0; wide--) {
            #pragma omp parallel for schedule(static)
            for (size_t i = 0; i < evict_n; i++) { evict[i] = (float)r; }
            double t0 = wall_seconds();
            volatile float norm = cpu_grad_norm_sums(g, n, wide);
            (void)norm;
            ms[wide][r] = (wall_seconds() - t0) * 1e3;
        }
    }
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    for (int wide = 1; wide >= 0; wide--) {
        qsort(ms[wide], ROUNDS, sizeof(double), compare_doubles);
        double med = ms[wide][ROUNDS / 2];
        printf("grad norm, %2d sums a chunk: %7.2f ms median (%.2f-%.2f), %.1f GB/s, %zu floats, %d threads\n",
               wide ? CPU_GRAD_NORM_SUMS : 8, med, ms[wide][0], ms[wide][ROUNDS - 1], n * 4.0 / med / 1e6, n, threads);
    }
    free(g);
    free(evict);
    return 0;
}

int main(int argc, char** argv) {
    if (argc > 1 && strcmp(argv[1], "--time") == 0) { return time_norms(); }
    // (first, before this process starts OpenMP's threads, which a forked child could not use: the switch is read
    // once a process, in these children)
    expect_die("LLMC_GRAD_NORM_WIDE=32", die_on_bad_switch, NULL, "LLMC_GRAD_NORM_WIDE=32", "use 0 or 1");
    size_t max_n = 17 * CPU_GRAD_NORM_CHUNK + 5; // (four groups of four whole chunks, and a ragged one)
    float* g = (float*)malloc(max_n * sizeof(float));
    size_t differ_n = fill_gradients_ways_differ(g);
    const char* values[3] = {NULL, "1", "0"};
    const int ways[3] = {1, 1, 0};
    for (int v = 0; v < 3; v++) {
        SwitchCase c = {g, differ_n, values[v], ways[v]};
        char err[1024];
        int status = run_in_child(norm_under_switch, &c, err, sizeof(err));
        CHECK(status == 0, "LLMC_GRAD_NORM_WIDE=%s: cpu_grad_norm does not give the %d sums' norm (exit %d) %s",
              values[v] ? values[v] : "(unset)", ways[v] ? CPU_GRAD_NORM_SUMS : 8, status, err);
    }
    float norm32 = cpu_grad_norm_sums(g, differ_n, 1), norm8 = cpu_grad_norm_sums(g, differ_n, 0);
    CHECK(norm32 == 1.0f && norm8 == 1.0f + ldexpf(1.0f, -23),
          "the crafted gradients: 32 sums give %.9g (want 1), 8 give %.9g (want 1 + 2^-23): the switch check above "
          "needs them to differ", norm32, norm8);
    const size_t chunk = CPU_GRAD_NORM_CHUNK;
    const size_t sizes[] = {0, 1, 7, 8, 9, 31, 32, 33, 63, 100, 4096 + 5, chunk - 1, chunk, chunk + 1, 3 * chunk + 40,
                            4 * chunk, 9 * chunk + 77, 16 * chunk, max_n};
    // four whole chunks read side by side: each its own sum's bits
    fill_gradients(g, max_n, 3);
    const float* at[CPU_GRAD_NORM_STREAMS] = {g + 8 * chunk, g, g + 2 * chunk + 1, g + 15 * chunk};
    double out[CPU_GRAD_NORM_STREAMS];
    cpu_grad_norm_chunks(out, at);
    for (int k = 0; k < CPU_GRAD_NORM_STREAMS; k++) {
        double stated = chunk_sum_stated(at[k], chunk, CPU_GRAD_NORM_SUMS);
        CHECK(memcmp(&out[k], &stated, sizeof(double)) == 0, "stream %d of four: %.17g, its chunk's sum %.17g", k, out[k],
              stated);
    }
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        fill_gradients(g, sizes[k], (uint32_t)k + 100);
        check_size(g, sizes[k]);
    }
    free(g);
    return test_summary();
}
