/*
dev/test/test_norm_cpu.c: the norms' grouped kernels (LLMC_NORM=grouped: 16 rows' sums side by side) against their
row-at-a-time kernels (LLMC_NORM=rows), bit for bit; the fused kernel (LLMC_NORM=fused, the default: the weight
gradients in the same pass as the input gradients, summed by chunks of rows) against them.

    dev/test/test_norm_cpu          the checks (about a second)
    dev/test/test_norm_cpu --time   the kernels' times at GPT-2 d12's shapes (4096 rows of 768, 2 threads or
                                    OMP_NUM_THREADS), alternating, medians
    dev/test/test_norm_cpu --time cpu   the same in the process's CPU time (a shared machine, OMP_NUM_THREADS=1)

Checked, for C = 16, 100, 768 (100: not a multiple of the 16-float vector) and row counts 37 (two groups and 5 rows
left over), 64 and 256: layernorm_forward and fused_residual_forward (out, mean, rstd, the residual),
fused_residual_rmsnorm_forward (one pass; the rows kernel's runs residual_forward then rmsnorm_forward), the LayerNorm
backward (dinp added, accumulate 1, and written, accumulate 0; dweight, dbias added to nonzero values), the RMSNorm
backward with a weight (its weight gradient: norm_weight_backward's other slicing) and without one, each grouped
kernel with 2 threads and with 1 against the rows kernel with 2, and with LLMC_NORM_AHEAD=0 (LayerNorm's backward
not asking for the next group's rows) against 1; llmc/cpu/vecmath.h's vec_dot3 (RMSNorm's sums) against its one-loop
form of before, bit for bit; LLMC_NORM's and LLMC_NORM_AHEAD's choices (its default by the CPU's vendor, both vendors'
defaults forced) and error lines; the
backwards' bytes in the phase account (LLMC_PHASE_TIME), and QK-norm's forward and backward, with and without the
bf16 copy of what they write. The grouped kernels keep every row's sums in their order, so the match is exact: any
difference fails. The fused kernel: everything but the weight gradients bit for bit too; dweight and dbias
(LayerNorm's, RMSNorm's) within FUSED_TOL of max |rows kernel's| (the same terms summed in another order: 64-row
partial sums, then the partial sums; measured here <= 7.3e-7), and bit for bit between 1 and 2 threads.
*/
#include <omp.h>

#include "../../llmc/cpu/layernorm_cpu.h"
#include "../../llmc/cpu/rmsnorm_cpu.h"
#include "../../llmc/cpu/qknorm_cpu.h"
#include "test_common.h"

#define FUSED_TOL 5e-6

// the number of elements where a and b differ in their bits (NaN patterns included)
static size_t bits_differ(const float* a, const float* b, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++) { count += float_bits(a[i]) != float_bits(b[i]); }
    return count;
}

static float* copy_of(const float* x, size_t n) {
    float* y = (float*)mallocCheck(n * sizeof(float));
    memcpy(y, x, n * sizeof(float));
    return y;
}

// what one run of the norms writes, for one kernel and thread count
typedef struct {
    float *ln_out, *ln_mean, *ln_rstd;                 // layernorm_forward
    float *res, *res_out, *res_mean, *res_rstd;        // fused_residual_forward
    float *dinp_add, *dinp_write, *dw, *db;            // layernorm_backward_into, accumulate 1 then 0
    float *rms_out, *rms_rstd, *rms_dinp, *rms_dw;     // rmsnorm_forward + rmsnorm_backward, weighted
    float *rms0_dinp;                                  // rmsnorm_backward_into, weightless, written
    float *rres, *rres_out, *rres_rstd;                // fused_residual_rmsnorm_forward (rows: the two calls)
} NormRun;

typedef struct {
    int BT, C;
    float *x, *y, *dout, *w, *b, *dinp0, *dw0, *db0;
} NormCase;

static NormCase case_make(int BT, int C, unsigned seed) {
    size_t n = (size_t)BT * C;
    NormCase c = {BT, C, random_array(n, seed), random_array(n, seed + 1), random_array(n, seed + 2),
                  random_array((size_t)C, seed + 3), random_array((size_t)C, seed + 4), random_array(n, seed + 5),
                  random_array((size_t)C, seed + 6), random_array((size_t)C, seed + 7)};
    // an offset and a spread per row, so means and variances differ from row to row
    for (int r = 0; r < BT; r++) {
        for (int i = 0; i < C; i++) { c.x[(size_t)r * C + i] = c.x[(size_t)r * C + i] * (1.0f + 0.1f * r) + 0.3f * r; }
    }
    return c;
}

static void case_free(NormCase* c) {
    free(c->x); free(c->y); free(c->dout); free(c->w); free(c->b); free(c->dinp0); free(c->dw0); free(c->db0);
}

static float* zeros(size_t n) { return (float*)calloc(n, sizeof(float)); }

static NormRun run_norms(const NormCase* c, NormKernel kernel, int threads) {
    norm_kernel_use(kernel);
    omp_set_num_threads(threads);
    int BT = c->BT, C = c->C;
    size_t n = (size_t)BT * C;
    NormRun r;
    r.ln_out = zeros(n); r.ln_mean = zeros(BT); r.ln_rstd = zeros(BT);
    layernorm_forward(r.ln_out, r.ln_mean, r.ln_rstd, c->x, c->w, c->b, 1, BT, C);
    r.res = zeros(n); r.res_out = zeros(n); r.res_mean = zeros(BT); r.res_rstd = zeros(BT);
    fused_residual_forward(r.res, r.res_out, r.res_mean, r.res_rstd, c->x, c->y, c->w, c->b, 1, BT, C);
    r.dinp_add = copy_of(c->dinp0, n); r.dw = copy_of(c->dw0, C); r.db = copy_of(c->db0, C);
    layernorm_backward_into(r.dinp_add, r.dw, r.db, c->dout, r.res, c->w, r.res_mean, r.res_rstd, 1, BT, C, 1);
    r.dinp_write = copy_of(c->dinp0, n);
    layernorm_backward_into(r.dinp_write, r.dw, r.db, c->dout, c->x, c->w, r.ln_mean, r.ln_rstd, 1, BT, C, 0);
    r.rms_out = zeros(n); r.rms_rstd = zeros(BT);
    rmsnorm_forward(r.rms_out, r.rms_rstd, c->x, c->w, 1e-5f, 1, BT, C);
    r.rms_dinp = copy_of(c->dinp0, n); r.rms_dw = copy_of(c->dw0, C);
    rmsnorm_backward(r.rms_dinp, r.rms_dw, c->dout, c->x, c->w, r.rms_rstd, 1, BT, C);
    r.rms0_dinp = copy_of(c->dinp0, n);
    rmsnorm_backward_into(r.rms0_dinp, NULL, c->dout, c->x, NULL, r.rms_rstd, 1, BT, C, 0);
    r.rres = zeros(n); r.rres_out = zeros(n); r.rres_rstd = zeros(BT);
    fused_residual_rmsnorm_forward(r.rres, r.rres_out, r.rres_rstd, c->x, c->y, c->w, 1e-5f, 1, BT, C);
    return r;
}

static void run_free(NormRun* r) {
    float* all[] = {r->ln_out, r->ln_mean, r->ln_rstd, r->res, r->res_out, r->res_mean, r->res_rstd, r->dinp_add,
                    r->dinp_write, r->dw, r->db, r->rms_out, r->rms_rstd, r->rms_dinp, r->rms_dw, r->rms0_dinp,
                    r->rres, r->rres_out, r->rres_rstd};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) { free(all[i]); }
}

// every output of got against want, bit for bit; with weights_tol > 0 the weight gradients within weights_tol of
// max |want| instead
static void check_outputs(const NormRun* got, const NormRun* want, const NormCase* c, const char* what,
                          double weights_tol) {
    size_t n = (size_t)c->BT * c->C, BT = (size_t)c->BT, C = (size_t)c->C;
    struct { const char* name; const float* a; const float* b; size_t n; int weights; } t[] = {
        {"layernorm_forward out", got->ln_out, want->ln_out, n, 0},
        {"layernorm_forward mean", got->ln_mean, want->ln_mean, BT, 0},
        {"layernorm_forward rstd", got->ln_rstd, want->ln_rstd, BT, 0},
        {"fused_residual_forward residual", got->res, want->res, n, 0},
        {"fused_residual_forward out", got->res_out, want->res_out, n, 0},
        {"fused_residual_forward mean", got->res_mean, want->res_mean, BT, 0},
        {"fused_residual_forward rstd", got->res_rstd, want->res_rstd, BT, 0},
        {"layernorm backward dinp (accumulate 1)", got->dinp_add, want->dinp_add, n, 0},
        {"layernorm backward dinp (accumulate 0)", got->dinp_write, want->dinp_write, n, 0},
        {"layernorm backward dweight", got->dw, want->dw, C, 1},
        {"layernorm backward dbias", got->db, want->db, C, 1},
        {"rmsnorm_forward out", got->rms_out, want->rms_out, n, 0},
        {"rmsnorm backward dinp", got->rms_dinp, want->rms_dinp, n, 0},
        {"rmsnorm backward dweight", got->rms_dw, want->rms_dw, C, 1},
        {"weightless rmsnorm backward dinp", got->rms0_dinp, want->rms0_dinp, n, 0},
        {"fused_residual_rmsnorm_forward residual", got->rres, want->rres, n, 0},
        {"fused_residual_rmsnorm_forward out", got->rres_out, want->rres_out, n, 0},
        {"fused_residual_rmsnorm_forward rstd", got->rres_rstd, want->rres_rstd, BT, 0},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (t[i].weights && weights_tol > 0.0) {
            double scale = 0.0;
            for (size_t j = 0; j < t[i].n; j++) { scale = fmax(scale, fabs(t[i].b[j])); }
            double err = max_abs_diff(t[i].a, t[i].b, t[i].n) / scale;
            CHECK(err <= weights_tol, "%s, rows %d, C %d: %s: off by %.2e of max |rows kernel's| (tolerance %.0e)",
                  what, c->BT, c->C, t[i].name, err, weights_tol);
            continue;
        }
        size_t bad = bits_differ(t[i].a, t[i].b, t[i].n);
        CHECK(bad == 0, "%s, rows %d, C %d: %s: %zu of %zu values differ", what, c->BT, c->C, t[i].name, bad,
              t[i].n);
    }
}

static void test_grouped_matches_rows(void) {
    const int Cs[3] = {16, 100, 768};
    const int BTs[3] = {37, 64, 256};
    for (int ci = 0; ci < 3; ci++) {
        for (int bi = 0; bi < 3; bi++) {
            NormCase c = case_make(BTs[bi], Cs[ci], (unsigned)(10 * ci + bi + 1));
            NormRun rows = run_norms(&c, NORM_ROWS, 2);
            NormRun grouped2 = run_norms(&c, NORM_GROUPED, 2);
            NormRun grouped1 = run_norms(&c, NORM_GROUPED, 1);
            NormRun fused2 = run_norms(&c, NORM_FUSED, 2);
            NormRun fused1 = run_norms(&c, NORM_FUSED, 1);
            norm_ahead_use(0); // LayerNorm's backward without asking for the next group's rows: the same bits
            NormRun grouped_behind = run_norms(&c, NORM_GROUPED, 2);
            NormRun fused_behind = run_norms(&c, NORM_FUSED, 2);
            norm_ahead_use(1);
            check_outputs(&grouped_behind, &grouped2, &c, "grouped, LLMC_NORM_AHEAD=0 against 1", 0.0);
            check_outputs(&fused_behind, &fused2, &c, "fused, LLMC_NORM_AHEAD=0 against 1", 0.0);
            run_free(&grouped_behind); run_free(&fused_behind);
            check_outputs(&grouped2, &rows, &c, "grouped, 2 threads, against rows", 0.0);
            check_outputs(&grouped1, &rows, &c, "grouped, 1 thread, against rows", 0.0);
            check_outputs(&fused2, &rows, &c, "fused, 2 threads, against rows", FUSED_TOL);
            check_outputs(&fused1, &fused2, &c, "fused, 1 thread, against 2", 0.0);
            run_free(&rows); run_free(&grouped2); run_free(&grouped1); run_free(&fused2); run_free(&fused1);
            case_free(&c);
        }
    }
}

// the backward's bytes in PHASE_NORM: dout and inp read, dinp read and written (accumulate 1) or written (0), mean
// and rstd read; and dinp's bf16 copy when it has one (-p bf16: a GEMM reads the gradient), counted as it is written
static void test_backward_phase_bytes(void) {
    const int BT = 37, C = 100;
    const double n = (double)BT * C;
    NormCase c = case_make(BT, C, 77);
    float* mean = random_array((size_t)BT, 78);
    float* rstd = random_array((size_t)BT, 79);
    float* dinp = copy_of(c.dinp0, (size_t)BT * C);
    float* dw = copy_of(c.dw0, (size_t)C);
    float* db = copy_of(c.db0, (size_t)C);
    uint16_t* dinp16 = (uint16_t*)mallocCheck((size_t)BT * C * sizeof(uint16_t));
    phase_time_on = 1;
    for (int copy = 0; copy <= 1; copy++) {
        if (copy) { matmul_bf16_mirror_add(dinp, (size_t)BT * C, dinp16); }
        for (int accumulate = 0; accumulate <= 1; accumulate++) {
            double want = 4.0 * ((accumulate ? 4.0 : 3.0) * n + 2.0 * BT) + (copy ? 2.0 * n : 0.0);
            memset(&phase_account, 0, sizeof(phase_account));
            layernorm_backward_into(dinp, dw, db, c.dout, c.x, c.w, mean, rstd, 1, BT, C, accumulate);
            double got = phase_account.bytes[PHASE_NORM];
            CHECK(got == want, "layernorm backward, accumulate %d, bf16 copy %d: %.0f bytes, want %.0f", accumulate,
                  copy, got, want);
            want -= 4.0 * BT; // RMSNorm keeps no mean
            memset(&phase_account, 0, sizeof(phase_account));
            rmsnorm_backward_into(dinp, dw, c.dout, c.x, c.w, rstd, 1, BT, C, accumulate);
            got = phase_account.bytes[PHASE_NORM];
            CHECK(got == want, "rmsnorm backward, accumulate %d, bf16 copy %d: %.0f bytes, want %.0f", accumulate, copy,
                  got, want);
        }
        if (copy) { matmul_bf16_mirror_remove(dinp); }
    }
    phase_time_on = 0;
    free(mean); free(rstd); free(dinp); free(dw); free(db); free(dinp16);
    case_free(&c);
}

// QK-norm's bytes in PHASE_NORM (2 heads of 16 in rows of 48, in place): forward x read and written, its copy for the
// backward written, rstd written; backward dx and inp read, dx written, rstd read; each with x's (dx's) bf16 copy
// when it has one
static void test_qknorm_phase_bytes(void) {
    const int N = 5, row = 48, nheads = 2, HS = 16;
    const double values = (double)N * nheads * HS, heads = (double)N * nheads;
    float* x = random_array((size_t)N * row, 81);
    float* w = random_array((size_t)HS, 82);
    float* inp = (float*)mallocCheck((size_t)values * sizeof(float));
    float* rstd = (float*)mallocCheck((size_t)heads * sizeof(float));
    float* dw = (float*)calloc((size_t)HS, sizeof(float));
    uint16_t* x16 = (uint16_t*)mallocCheck((size_t)N * row * sizeof(uint16_t));
    phase_time_on = 1;
    for (int copy = 0; copy <= 1; copy++) {
        if (copy) { matmul_bf16_mirror_add(x, (size_t)N * row, x16); }
        double want = 4.0 * (3.0 * values + heads) + (copy ? 2.0 * values : 0.0);
        memset(&phase_account, 0, sizeof(phase_account));
        qknorm_forward(x, rstd, inp, w, N, row, nheads, HS, 1e-6f);
        CHECK(phase_account.bytes[PHASE_NORM] == want, "qknorm forward, bf16 copy %d: %.0f bytes, want %.0f", copy,
              phase_account.bytes[PHASE_NORM], want);
        memset(&phase_account, 0, sizeof(phase_account));
        qknorm_backward(x, dw, x, inp, w, rstd, N, row, nheads, HS);
        CHECK(phase_account.bytes[PHASE_NORM] == want, "qknorm backward, bf16 copy %d: %.0f bytes, want %.0f", copy,
              phase_account.bytes[PHASE_NORM], want);
        if (copy) { matmul_bf16_mirror_remove(x); }
    }
    phase_time_on = 0;
    free(x); free(w); free(inp); free(rstd); free(dw); free(x16);
}

static void choose_with_env(void* arg) {
    setenv("LLMC_NORM", (const char*)arg, 1);
    norm_kernel_state = -1;
    norm_kernel();
}

// llmc/cpu/vecmath.h's vec_dot3 before 2026-12-03: one loop with the choice of b inside it (GCC kept its 16 sums
// scalar when b was not NULL). The loop for each b does the same operations: the same bits.
static float dot3_one_loop(const float* a, const float* b, const float* c, int n) {
    float part[16] = {0.0f};
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int j = 0; j < 16; j++) { part[j] += a[i + j] * (b != NULL ? b[i + j] : 1.0f) * c[i + j]; }
    }
    float sum = 0.0f;
    for (; i < n; i++) { sum += a[i] * (b != NULL ? b[i] : 1.0f) * c[i]; }
    for (int j = 0; j < 16; j++) { sum += part[j]; }
    return sum;
}

static void test_dot3_matches_one_loop(void) {
    const int n_max = 1000;
    float* a = random_array((size_t)n_max, 91);
    float* b = random_array((size_t)n_max, 92);
    float* c = random_array((size_t)n_max, 93);
    int differ = 0, runs = 0;
    for (int n = 1; n <= n_max; n += (n < 64 ? 1 : 37)) {
        for (int with_b = 0; with_b <= 1; with_b++) {
            const float* bb = with_b ? b : NULL;
            float got = vec_dot3(a, bb, c, n), want = dot3_one_loop(a, bb, c, n);
            differ += memcmp(&got, &want, sizeof(got)) != 0;
            runs++;
        }
    }
    CHECK(differ == 0, "vec_dot3 against the one-loop form: %d of %d sums differ (n = 1..%d, b NULL and not)", differ,
          runs, n_max);
    free(a); free(b); free(c);
}

static void ahead_with_env(void* arg) {
    setenv("LLMC_NORM_AHEAD", (const char*)arg, 1);
    norm_ahead_state = -1;
    norm_ahead();
}

static void test_kernel_choice(void) {
    const char* names[4] = {"", "grouped", "rows", "fused"};
    const NormKernel want[4] = {NORM_FUSED, NORM_GROUPED, NORM_ROWS, NORM_FUSED};
    for (int i = 0; i < 4; i++) {
        setenv("LLMC_NORM", names[i], 1);
        norm_kernel_state = -1;
        CHECK(norm_kernel() == want[i], "LLMC_NORM='%s' chooses kernel %d", names[i], (int)want[i]);
    }
    unsetenv("LLMC_NORM");
    norm_kernel_state = -1;
    CHECK(norm_kernel() == NORM_FUSED, "no LLMC_NORM: fused");
    expect_die("LLMC_NORM=fast", choose_with_env, (void*)"fast", "LLMC_NORM=fast", "use rows, grouped or fused");
    // unset or empty: the vendor's default (off on Intel, on elsewhere: both outcomes forced here); 0 and 1 force it
    CHECK(norm_ahead_default(1) == 0 && norm_ahead_default(0) == 1, "LLMC_NORM_AHEAD's default: off on Intel, on on others");
    int vendor_default = norm_ahead_default(norm_cpu_is_intel());
    printf("LLMC_NORM_AHEAD's default on this CPU: %d (%s)\n", vendor_default, norm_cpu_is_intel() ? "Intel" : "not Intel");
    const char* ahead_names[3] = {"", "0", "1"};
    const int ahead_want[3] = {vendor_default, 0, 1};
    for (int i = 0; i < 3; i++) {
        setenv("LLMC_NORM_AHEAD", ahead_names[i], 1);
        norm_ahead_state = -1;
        CHECK(norm_ahead() == ahead_want[i], "LLMC_NORM_AHEAD='%s' gives %d", ahead_names[i], ahead_want[i]);
    }
    expect_die("LLMC_NORM_AHEAD=2", ahead_with_env, (void*)"2", "LLMC_NORM_AHEAD=2", "use 0 or 1");
    unsetenv("LLMC_NORM_AHEAD");
    norm_ahead_state = -1;
}

// ----------------------------------------------------------------------------
// --time

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

enum { TIME_LN_FORWARD, TIME_RESIDUAL_LN, TIME_LN_BACKWARD, TIME_RMS_FORWARD, TIME_RMS_BACKWARD, TIME_COUNT };
static const char* const time_names[TIME_COUNT] = {"layernorm_forward", "fused_residual_forward",
                                                   "layernorm_backward", "rmsnorm_forward", "rmsnorm_backward"};

// the process's CPU seconds (on a shared machine, with one thread, the time the call ran, not the time it waited)
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// seconds of one call of function f with the kernel given: wall time, or with use_cpu the process's CPU time
static double time_once(int f, NormKernel kernel, const NormCase* c, NormRun* r, int use_cpu) {
    norm_kernel_use(kernel);
    int BT = c->BT, C = c->C;
    double t0 = use_cpu ? cpu_seconds() : wall_seconds();
    switch (f) {
    case TIME_LN_FORWARD: layernorm_forward(r->ln_out, r->ln_mean, r->ln_rstd, c->x, c->w, c->b, 1, BT, C); break;
    case TIME_RESIDUAL_LN:
        fused_residual_forward(r->res, r->res_out, r->res_mean, r->res_rstd, c->x, c->y, c->w, c->b, 1, BT, C);
        break;
    case TIME_LN_BACKWARD:
        layernorm_backward(r->dinp_add, r->dw, r->db, c->dout, c->x, c->w, r->ln_mean, r->ln_rstd, 1, BT, C);
        break;
    case TIME_RMS_FORWARD: rmsnorm_forward(r->rms_out, r->rms_rstd, c->x, c->w, 1e-5f, 1, BT, C); break;
    default: rmsnorm_backward(r->rms_dinp, r->rms_dw, c->dout, c->x, c->w, r->rms_rstd, 1, BT, C); break;
    }
    return (use_cpu ? cpu_seconds() : wall_seconds()) - t0;
}

static void time_norms(int use_cpu) {
    int threads = 2;
    const char* env = getenv("OMP_NUM_THREADS");
    if (env != NULL && atoi(env) > 0) { threads = atoi(env); }
    omp_set_num_threads(threads);
    NormCase c = case_make(4096, 768, 1);
    NormRun r = run_norms(&c, NORM_ROWS, threads);
    omp_set_num_threads(threads);
    const int reps = 41;
    double bytes[TIME_COUNT] = {2, 4, 4, 2, 4};  // tensors of (4096, 768) floats read or written, compulsorily
    printf("4096 rows of 768, %d threads, medians of %d calls (%s), rows, grouped and fused alternating; in brackets "
           "the GB/s of the compulsory traffic\n", threads, reps, use_cpu ? "CPU time" : "wall time");
    const NormKernel kernels[3] = {NORM_ROWS, NORM_GROUPED, NORM_FUSED};
    for (int f = 0; f < TIME_COUNT; f++) {
        double t[3][64], med[3];
        for (int i = -1; i < reps; i++) {
            for (int k = 0; k < 3; k++) {
                double s = time_once(f, kernels[k], &c, &r, use_cpu);
                if (i >= 0) { t[k][i] = s; }
            }
        }
        for (int k = 0; k < 3; k++) {
            qsort(t[k], reps, sizeof(double), cmp_double);
            med[k] = t[k][reps / 2];
        }
        double gb = bytes[f] * 4096.0 * 768 * 4 / 1e9;
        printf("%-24s rows %.3f ms [%.0f]  grouped %.3f ms [%.0f]  fused %.3f ms [%.0f]  (rows / grouped %.2fx, "
               "rows / fused %.2fx)\n", time_names[f], 1e3 * med[0], gb / med[0], 1e3 * med[1], gb / med[1],
               1e3 * med[2], gb / med[2], med[0] / med[1], med[0] / med[2]);
    }
    run_free(&r);
    case_free(&c);
}

int main(int argc, char** argv) {
    if (argc >= 2 && strcmp(argv[1], "--time") == 0 && (argc == 2 || (argc == 3 && strcmp(argv[2], "cpu") == 0))) {
        time_norms(argc == 3);
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "error: usage: %s [--time [cpu]]\n", argv[0]);
        return 1;
    }
    test_kernel_choice();
    test_dot3_matches_one_loop();
    test_grouped_matches_rows();
    test_backward_phase_bytes();
    test_qknorm_phase_bytes();
    return test_summary();
}
