/*
dev/cuda_cpu/tests/test_cublas_cpu.cpp: the emulated cuBLAS / cuBLASLt (dev/cuda_cpu/cublas_cpu.cpp)
against straightforward loops in double.

    make build/cuda_cpu/test_cublas_cpu && build/cuda_cpu/test_cublas_cpu      (dev/cuda_cpu/cuda_cpu.mk)
or by hand, from the repository root (OB = the venv's scipy_openblas32 directory):
    g++ -std=c++17 -O2 -fopenmp -D__CUDACC__ -Idev/cuda_cpu/include -include cuda_runtime.h \
        -DLLMC_BLAS_OPENBLAS -I$OB/include -DUSE_MPI -I.venv/include dev/cuda_cpu/tests/test_cublas_cpu.cpp \
        dev/cuda_cpu/cublas_cpu.cpp dev/cuda_cpu/nccl_cpu.cpp dev/cuda_cpu/runtime.cpp \
        -L$OB/lib -Wl,-rpath,$OB/lib -lscipy_openblas -L.venv/lib -Wl,-rpath,.venv/lib -lmpi -lpthread -o /tmp/test_cublas_cpu

Checks: every epilogue x transpose x (fp32, fp32 with TF32, bf16) x (beta 0, separate C, accumulate
in place) against the reference within an fp32-accumulation bound (plus one bf16 ulp for bf16
outputs), padding rows never written; TF32 rounding and bf16 output rounding bit-exact on exactly
representable products; cublasGemmStridedBatchedEx (batches, strides, math modes); the heuristic's
refusals (mismatched types, epilogues and attributes we do not emulate, a bad aux ld); the alignment
preferences honoured and enforced; and, in child processes, that a host pointer or a buffer one
element too small for a layout ends the program with one line naming the operand. Every matrix is
allocated to exactly the extent its layout implies, so reading past it is caught too.
Prints "test_cublas_cpu: N passed, M failed"; exits 1 on any failure.
*/
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <functional>
#include <string>
#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "child_process.h"
#include "tally.h"


// runs one group of checks and says how it went
static void section(const char* name, const std::function<void()>& body) {
    const int before = g_failed;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    body();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double seconds = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    printf("%s %s (%.2f s)\n", g_failed == before ? "ok:" : "FAILED:", name, seconds);
    fflush(stdout);
}

static void die_unless(bool ok, const char* what) {
    if (!ok) { fprintf(stderr, "test_cublas_cpu: setup failed: %s\n", what); exit(2); }
}

// ----------------------------------------------------------------------------
// the reference's own roundings (written independently of the emulation's bit tricks)

// x rounded to `bits` significant bits, nearest even (exact in double for the values used here)
static double round_significant(double x, int bits) {
    if (x == 0.0 || !isfinite(x)) { return x; }
    int e;
    double m = frexp(x, &e);  // x = m 2^e, |m| in [0.5, 1)
    return ldexp(nearbyint(ldexp(m, bits)), e - bits);
}
static double round_bf16(double x) { return round_significant(x, 8); }
static double round_tf32(double x) { return round_significant(x, 11); }
// the spacing of bf16 values around x
static double bf16_ulp(double x) {
    if (x == 0.0) { return ldexp(1.0, -133); }
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 8);
}

static double gelu_ref(double x) { return 0.5 * x * (1.0 + tanh(sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }
static double gelu_grad_ref(double x) {
    const double s = sqrt(2.0 / M_PI), u = s * (x + 0.044715 * x * x * x), t = tanh(u);
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * s * (1.0 + 3.0 * 0.044715 * x * x);
}

// ----------------------------------------------------------------------------
// matrices in device memory, allocated to exactly ld * (cols - 1) + rows elements

struct Rng {
    uint64_t state;
    double uniform() {  // in [-1, 1)
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return (double)(state >> 11) / (double)(1ull << 52) - 1.0;
    }
};

struct Matrix {
    int32_t type = CUDA_R_32F;
    int64_t rows = 0, cols = 0, ld = 1;
    void* dev = NULL;
    std::vector<double> v;  // the stored values, column-major with ld (padding: NAN)
    size_t elements() const { return (size_t)(ld * (cols - 1) + rows); }
    size_t bytes() const { return elements() * (type == CUDA_R_32F ? 4 : 2); }
    double at(int64_t i, int64_t j) const { return v[(size_t)(i + j * ld)]; }
};

static double stored_value(int32_t type, double x) { return type == CUDA_R_32F ? (double)(float)x : round_bf16((double)(float)x); }

static void upload(Matrix* m) {
    std::vector<unsigned char> raw(m->bytes(), 0xFF);  // padding keeps the poison (NaN) pattern
    for (int64_t j = 0; j < m->cols; j++) {
        for (int64_t i = 0; i < m->rows; i++) {
            size_t idx = (size_t)(i + j * m->ld);
            if (m->type == CUDA_R_32F) {
                float f = (float)m->v[idx];
                memcpy(&raw[idx * 4], &f, 4);
            } else {
                uint16_t b = cuda_cpu_float_to_bf16_bits((float)m->v[idx]);
                memcpy(&raw[idx * 2], &b, 2);
            }
        }
    }
    die_unless(cudaMemcpy(m->dev, raw.data(), raw.size(), cudaMemcpyHostToDevice) == cudaSuccess, "upload");
}

static Matrix matrix_new(int32_t type, int64_t rows, int64_t cols, int64_t ld) {
    Matrix m;
    m.type = type; m.rows = rows; m.cols = cols; m.ld = ld;
    die_unless(cudaMalloc(&m.dev, m.bytes()) == cudaSuccess, "cudaMalloc");
    m.v.assign(m.elements(), NAN);
    upload(&m);
    return m;
}

static Matrix matrix_random(int32_t type, int64_t rows, int64_t cols, int64_t ld, Rng* rng, double scale) {
    Matrix m = matrix_new(type, rows, cols, ld);
    for (int64_t j = 0; j < cols; j++) {
        for (int64_t i = 0; i < rows; i++) { m.v[(size_t)(i + j * ld)] = stored_value(type, scale * rng->uniform()); }
    }
    upload(&m);
    return m;
}

// the device contents; *padding_ok: every padding byte still has the poison pattern
static std::vector<double> download(const Matrix& m, bool* padding_ok) {
    std::vector<unsigned char> raw(m.bytes());
    die_unless(cudaMemcpy(raw.data(), m.dev, raw.size(), cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    std::vector<double> out(m.elements(), NAN);
    *padding_ok = true;
    const size_t size = m.type == CUDA_R_32F ? 4 : 2;
    for (size_t idx = 0; idx < m.elements(); idx++) {
        const bool in_range = (int64_t)(idx % (size_t)m.ld) < m.rows;
        if (!in_range) {
            for (size_t b = 0; b < size; b++) { *padding_ok = *padding_ok && raw[idx * size + b] == 0xFF; }
            continue;
        }
        if (m.type == CUDA_R_32F) {
            float f;
            memcpy(&f, &raw[idx * 4], 4);
            out[idx] = f;
        } else {
            uint16_t b;
            memcpy(&b, &raw[idx * 2], 2);
            out[idx] = cuda_cpu_bf16_bits_to_float(b);
        }
    }
    return out;
}

static void matrix_free(Matrix* m) { cudaFree(m->dev); m->dev = NULL; }

// |got - want| within tol, plus one ulp of the output type when it is bf16
static bool near_enough(double got, double want, double tol, int32_t type) {
    if (type == CUDA_R_16BF) { tol += bf16_ulp(fmax(fabs(got), fabs(want))); }
    return fabs(got - want) <= tol;
}

// ----------------------------------------------------------------------------
// one cuBLASLt matmul the way llmc/cuda/matmul.cuh's gemm_lt issues it

struct LtCall {
    int32_t ab_type, d_type;
    cublasComputeType_t compute;
    bool ta, tb;
    cublasLtEpilogue_t epilogue;
    float alpha, beta;
    void* bias; int32_t bias_type;           // bias_type -1: leave the attribute unset
    void* aux; int64_t aux_ld;
    uint32_t align;                          // 0: leave the alignment preferences unset
    int64_t m, n, k, lda, ldb, ldc, ldd;
    const void *a, *b, *c;
    void* d;
    int heuristic_count;                     // out
};

static cublasStatus_t lt_call(cublasLtHandle_t lt, LtCall* call, void* workspace, size_t workspace_bytes) {
    cublasStatus_t st;
    cublasLtMatmulDesc_t desc;
    die_unless(cublasLtMatmulDescCreate(&desc, call->compute, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS, "desc");
    cublasOperation_t op_a = call->ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = call->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &call->epilogue, sizeof(call->epilogue));
    if (call->bias != NULL) {
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &call->bias, sizeof(call->bias));
        if (call->bias_type >= 0) {
            cudaDataType_t t = (cudaDataType_t)call->bias_type;
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof(t));
        }
    }
    if (call->aux != NULL) {
        cudaDataType_t t = (cudaDataType_t)call->d_type;
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &call->aux, sizeof(call->aux));
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &call->aux_ld, sizeof(call->aux_ld));
        cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, &t, sizeof(t));
    }
    cublasLtMatrixLayout_t la, lb, lc, ld;
    cublasLtMatrixLayoutCreate(&la, (cudaDataType_t)call->ab_type, call->ta ? call->k : call->m, call->ta ? call->m : call->k, call->lda);
    cublasLtMatrixLayoutCreate(&lb, (cudaDataType_t)call->ab_type, call->tb ? call->n : call->k, call->tb ? call->k : call->n, call->ldb);
    cublasLtMatrixLayoutCreate(&lc, (cudaDataType_t)call->d_type, call->m, call->n, call->ldc);
    cublasLtMatrixLayoutCreate(&ld, (cudaDataType_t)call->d_type, call->m, call->n, call->ldd);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes, sizeof(workspace_bytes));
    if (call->align != 0) {
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &call->align, sizeof(call->align));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &call->align, sizeof(call->align));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &call->align, sizeof(call->align));
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &call->align, sizeof(call->align));
    }
    cublasLtMatmulHeuristicResult_t heuristic;
    call->heuristic_count = -1;
    st = cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, ld, pref, 1, &heuristic, &call->heuristic_count);
    if (st == CUBLAS_STATUS_SUCCESS && call->heuristic_count == 1) {
        st = cublasLtMatmul(lt, desc, &call->alpha, call->a, la, call->b, lb, &call->beta, call->c, lc, call->d, ld, &heuristic.algo,
                            workspace, workspace_bytes, 0);
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(ld);
    cublasLtMatmulDescDestroy(desc);
    return st;
}

// D = A B (no transposes, alpha 1, beta 0, no epilogue) in the matrices' own types, sizes and lds
static LtCall product_call(const Matrix& A, const Matrix& B, const Matrix& D, cublasComputeType_t compute) {
    LtCall call;
    memset(&call, 0, sizeof(call));
    call.ab_type = A.type; call.d_type = D.type; call.compute = compute;
    call.epilogue = CUBLASLT_EPILOGUE_DEFAULT; call.alpha = 1.0f; call.beta = 0.0f; call.bias_type = -1;
    call.m = D.rows; call.n = D.cols; call.k = A.cols; call.lda = A.ld; call.ldb = B.ld; call.ldc = D.ld; call.ldd = D.ld;
    call.a = A.dev; call.b = B.dev; call.c = D.dev; call.d = D.dev;
    return call;
}

// ----------------------------------------------------------------------------
// every epilogue x transposes x types x beta against the reference

static const cublasLtEpilogue_t EPILOGUES[] = {
    CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_BIAS, CUBLASLT_EPILOGUE_GELU, CUBLASLT_EPILOGUE_GELU_AUX,
    CUBLASLT_EPILOGUE_GELU_BIAS, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU, CUBLASLT_EPILOGUE_DGELU_BGRAD,
    CUBLASLT_EPILOGUE_BGRADA, CUBLASLT_EPILOGUE_BGRADB,
};

struct EpilogueParts {
    bool bias_in, gelu, aux_out, dgelu, bgrad_d, bgrad_a, bgrad_b;
};
static EpilogueParts parts_of(cublasLtEpilogue_t e) {
    EpilogueParts p = {false, false, false, false, false, false, false};
    p.bias_in = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    p.gelu = e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_BIAS ||
             e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    p.aux_out = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    p.dgelu = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    p.bgrad_d = e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
    p.bgrad_a = e == CUBLASLT_EPILOGUE_BGRADA;
    p.bgrad_b = e == CUBLASLT_EPILOGUE_BGRADB;
    return p;
}

enum BetaCase { BETA_ZERO = 0, BETA_SEPARATE_C, BETA_IN_PLACE };

static void test_epilogue_case(cublasLtHandle_t lt, void* ws, size_t ws_bytes, int32_t ab_type, int32_t d_type,
                               cublasComputeType_t compute, bool ta, bool tb, cublasLtEpilogue_t epilogue, BetaCase beta_case,
                               int32_t bias_type, uint64_t seed, int64_t m = 24, int64_t n = 40, int64_t k = 20) {
    Rng rng = {seed};
    const EpilogueParts e = parts_of(epilogue);
    const bool tf32 = compute == CUBLAS_COMPUTE_32F_FAST_TF32;
    Matrix A = matrix_random(ab_type, ta ? k : m, ta ? m : k, (ta ? k : m) + 3, &rng, 1.0);
    Matrix B = matrix_random(ab_type, tb ? n : k, tb ? k : n, (tb ? n : k) + 1, &rng, 1.0);
    // D fresh (NaN poison) unless it is accumulated into in place
    Matrix D = beta_case == BETA_IN_PLACE ? matrix_random(d_type, m, n, m + 5, &rng, 1.0) : matrix_new(d_type, m, n, m + 5);
    Matrix C = beta_case == BETA_SEPARATE_C ? matrix_random(d_type, m, n, m + 2, &rng, 1.0) : D;
    const float beta = beta_case == BETA_SEPARATE_C ? 0.75f : beta_case == BETA_IN_PLACE ? 1.0f : 0.0f;
    const int64_t bias_length = e.bgrad_b ? n : m;
    const int32_t bias_storage = bias_type < 0 ? d_type : bias_type;
    const bool uses_bias = e.bias_in || e.bgrad_d || e.bgrad_a || e.bgrad_b;
    const bool uses_aux = e.aux_out || e.dgelu;
    Matrix bias = uses_bias ? (e.bias_in ? matrix_random(bias_storage, bias_length, 1, bias_length, &rng, 0.5)
                                         : matrix_new(bias_storage, bias_length, 1, bias_length))
                            : Matrix();
    const int64_t aux_ld = m + 8;
    Matrix aux = uses_aux ? (e.dgelu ? matrix_random(d_type, m, n, aux_ld, &rng, 2.0) : matrix_new(d_type, m, n, aux_ld)) : Matrix();

    LtCall call;
    memset(&call, 0, sizeof(call));
    call.ab_type = ab_type; call.d_type = d_type; call.compute = compute; call.ta = ta; call.tb = tb;
    call.epilogue = epilogue; call.alpha = 1.25f; call.beta = beta;
    call.bias = uses_bias ? bias.dev : NULL; call.bias_type = bias_type;
    call.aux = uses_aux ? aux.dev : NULL; call.aux_ld = aux_ld;
    call.align = 16;
    call.m = m; call.n = n; call.k = k; call.lda = A.ld; call.ldb = B.ld; call.ldc = C.ld; call.ldd = D.ld;
    call.a = A.dev; call.b = B.dev; call.c = C.dev; call.d = D.dev;
    cublasStatus_t st = lt_call(lt, &call, ws, ws_bytes);
    char name[160];
    snprintf(name, sizeof(name), "epilogue %d, %s%s, A/B %s, D %s, bias %s, compute %d, beta case %d", (int)epilogue, ta ? "T" : "N",
             tb ? "T" : "N", ab_type == CUDA_R_32F ? "fp32" : "bf16", d_type == CUDA_R_32F ? "fp32" : "bf16",
             bias_storage == CUDA_R_32F ? "fp32" : "bf16", (int)compute, (int)beta_case);
    check(st == CUBLAS_STATUS_SUCCESS && call.heuristic_count == 1, "%s: status %d, %d algorithms", name, (int)st, call.heuristic_count);
    if (st != CUBLAS_STATUS_SUCCESS) { return; }

    bool d_pad = false, aux_pad = true;
    std::vector<double> got = download(D, &d_pad);
    std::vector<double> got_aux = uses_aux ? download(aux, &aux_pad) : std::vector<double>();
    bool bias_pad = true;
    std::vector<double> got_bias = uses_bias ? download(bias, &bias_pad) : std::vector<double>();
    check(d_pad && aux_pad, "%s: padding rows of D or aux were written", name);

    int bad = 0;
    std::vector<double> bgrad_sum(m, 0.0), bgrad_tol(m, 0.0);
    for (int64_t j = 0; j < n; j++) {
        for (int64_t i = 0; i < m; i++) {
            double acc = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double a = ta ? A.at(p, i) : A.at(i, p), b = tb ? B.at(j, p) : B.at(p, j);
                if (tf32) { a = round_tf32(a); b = round_tf32(b); }
                acc += a * b;
                mag += fabs(a * b);
            }
            double v = (double)call.alpha * acc;
            mag *= fabs(call.alpha);
            if (beta != 0.0f) { v += beta * C.at(i, j); mag += fabs(beta * C.at(i, j)); }
            if (e.bias_in) { v += bias.v[(size_t)i]; mag += fabs(bias.v[(size_t)i]); }
            // fp32 accumulation error bound, then what the fp32 GELU (tanhf) adds
            const double tol_pre = (double)(k + 4) * ldexp(1.0, -23) * mag + 1e-7;
            double tol = tol_pre;
            if (e.aux_out && !near_enough(got_aux[(size_t)(i + j * aux_ld)], v, tol_pre, d_type)) { bad++; }
            if (e.gelu) {
                const double pre = v;
                v = gelu_ref(pre);
                tol = 1.2 * tol + 1e-6 * fabs(v) + 1e-7 * (1.0 + fabs(pre));
            }
            if (e.dgelu) {
                const double pre = v, x = aux.at(i, j), g = gelu_grad_ref(x);
                v = pre * g;
                tol = tol * fabs(g) + 1e-6 * fabs(v) + 1e-7 * (1.0 + fabs(x)) * fabs(pre);
            }
            bgrad_sum[(size_t)i] += v;
            bgrad_tol[(size_t)i] += tol + ldexp(1.0, -23) * (double)n * fabs(v);
            if (!near_enough(got[(size_t)(i + j * D.ld)], v, tol, d_type)) { bad++; }
        }
    }
    if (e.bgrad_d) {
        for (int64_t i = 0; i < m; i++) { bad += !near_enough(got_bias[(size_t)i], bgrad_sum[(size_t)i], bgrad_tol[(size_t)i], bias_storage); }
    }
    if (e.bgrad_a || e.bgrad_b) {
        for (int64_t x = 0; x < bias_length; x++) {
            double sum = 0.0, mag = 0.0;
            for (int64_t p = 0; p < k; p++) {
                double val = e.bgrad_a ? (ta ? A.at(p, x) : A.at(x, p)) : (tb ? B.at(x, p) : B.at(p, x));
                sum += val;
                mag += fabs(val);
            }
            bad += !near_enough(got_bias[(size_t)x], sum, (double)(k + 2) * ldexp(1.0, -23) * mag, bias_storage);
        }
    }
    check(bad == 0, "%s: %d values differ from the reference", name, bad);

    matrix_free(&A);
    matrix_free(&B);
    matrix_free(&D);
    if (beta_case == BETA_SEPARATE_C) { matrix_free(&C); }
    if (uses_bias) { matrix_free(&bias); }
    if (uses_aux) { matrix_free(&aux); }
}

static void test_all_epilogues(cublasLtHandle_t lt, void* ws, size_t ws_bytes) {
    struct TypeCase { int32_t ab, d; cublasComputeType_t compute; };
    const TypeCase types[] = {
        {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F},
        {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32},
        {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F},
        {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F},
    };
    uint64_t seed = 1;
    for (const TypeCase& t : types) {
        for (cublasLtEpilogue_t epi : EPILOGUES) {
            for (int trans = 0; trans < 4; trans++) {
                for (int beta_case = 0; beta_case < 3; beta_case++) {
                    const EpilogueParts e = parts_of(epi);
                    // the bias in D's type (attribute unset), or fp32 for a bf16 D
                    int32_t bias_type = (t.d == CUDA_R_16BF && (trans & 1)) ? CUDA_R_32F : -1;
                    if (!(e.bias_in || e.bgrad_d || e.bgrad_a || e.bgrad_b)) { bias_type = -1; }
                    test_epilogue_case(lt, ws, ws_bytes, t.ab, t.d, t.compute, trans & 1, (trans >> 1) & 1, epi, (BetaCase)beta_case,
                                       bias_type, seed++);
                }
            }
        }
    }
}

// the emulation works through D in blocks of columns (thousands for llmc's shapes); with blocks of 7
// columns, a block's offsets into B, C, D and aux, and the bias-gradient sum across blocks, are exercised
static void test_gemm_strided_batched(cublasHandle_t handle);
static void test_several_column_blocks(cublasLtHandle_t lt, cublasHandle_t handle, void* ws, size_t ws_bytes) {
    setenv("CUDA_CPU_GEMM_BLOCK_COLUMNS", "7", 1);
    const cublasLtEpilogue_t epilogues[] = {CUBLASLT_EPILOGUE_DEFAULT, CUBLASLT_EPILOGUE_GELU_AUX_BIAS, CUBLASLT_EPILOGUE_DGELU_BGRAD,
                                            CUBLASLT_EPILOGUE_BGRADB};
    uint64_t seed = 1000;
    for (cublasLtEpilogue_t epi : epilogues) {
        for (int trans = 0; trans < 4; trans++) {
            test_epilogue_case(lt, ws, ws_bytes, CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, trans & 1, (trans >> 1) & 1, epi,
                               BETA_IN_PLACE, -1, seed++);
            test_epilogue_case(lt, ws, ws_bytes, CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, trans & 1, (trans >> 1) & 1, epi,
                               BETA_SEPARATE_C, -1, seed++);
        }
    }
    test_gemm_strided_batched(handle);
    unsetenv("CUDA_CPU_GEMM_BLOCK_COLUMNS");
}

// ----------------------------------------------------------------------------
// bit-exact roundings: TF32 inputs and bf16 outputs on products that are exact in fp32

static void test_tf32_rounding(cublasLtHandle_t lt, void* ws, size_t ws_bytes) {
    // D (m x 1) = A (m x 1) * B (1 x 1): one product per element, exact in fp32 after TF32 rounding
    const int64_t m = 4096;
    Rng rng = {99};
    Matrix A = matrix_random(CUDA_R_32F, m, 1, m, &rng, 3.0);
    // hand-made ties and near-ties around 1 (TF32 spacing there is 2^-10)
    const double specials[] = {1.0 + ldexp(1.0, -11), 1.0 + 3 * ldexp(1.0, -11), 1.0 + ldexp(1.0, -11) + ldexp(1.0, -23),
                               -(1.0 + 3 * ldexp(1.0, -12)), 65504.0 + 16.0, ldexp(1.0, -126) * 1.5};
    for (size_t s = 0; s < sizeof(specials) / sizeof(specials[0]); s++) { A.v[s] = (double)(float)specials[s]; }
    upload(&A);
    Matrix B = matrix_new(CUDA_R_32F, 1, 1, 1);
    B.v[0] = 1.0 + ldexp(1.0, -10);  // exact in TF32: the products stay exact in fp32 (11 x 11 bits)
    upload(&B);
    for (int use_tf32 = 0; use_tf32 < 2; use_tf32++) {
        Matrix D = matrix_new(CUDA_R_32F, m, 1, m);
        LtCall call = product_call(A, B, D, use_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
        cublasStatus_t st = lt_call(lt, &call, ws, ws_bytes);
        bool pad;
        std::vector<double> got = download(D, &pad);
        int bad = 0, rounded = 0;
        for (int64_t i = 0; i < m; i++) {
            const double a = use_tf32 ? round_tf32(A.v[(size_t)i]) : A.v[(size_t)i];
            const double want = (double)(float)(a * B.v[0]);
            bad += got[(size_t)i] != want;
            rounded += round_tf32(A.v[(size_t)i]) != A.v[(size_t)i];
        }
        check(st == CUBLAS_STATUS_SUCCESS && bad == 0 && rounded > m / 2, "TF32 rounding (compute %s): %d of %lld products differ",
              use_tf32 ? "32F_FAST_TF32" : "32F", bad, (long long)m);
        if (use_tf32) {
            check(got[0] == 1.0 + ldexp(1.0, -10) && got[1] == (1.0 + ldexp(1.0, -9)) * (1.0 + ldexp(1.0, -10)),
                  "TF32 ties go to even: 1+2^-11 -> 1, 1+3*2^-11 -> 1+2^-9 (got %.17g, %.17g)", got[0], got[1]);
        }
        matrix_free(&D);
    }
    matrix_free(&A);
    matrix_free(&B);
}

static void test_bf16_output_rounding(cublasLtHandle_t lt, void* ws, size_t ws_bytes) {
    // products of two bf16 values (16 significant bits, exact in fp32), rounded once to bf16
    const int64_t m = 8192;
    Rng rng = {7};
    Matrix A = matrix_random(CUDA_R_16BF, m, 1, m, &rng, 4.0);
    Matrix B = matrix_new(CUDA_R_16BF, 1, 1, 1);
    B.v[0] = round_bf16(1.0 + 3.0 / 128.0);  // 1.0234375: 8 significant bits
    upload(&B);
    Matrix D = matrix_new(CUDA_R_16BF, m, 1, m);
    LtCall call = product_call(A, B, D, CUBLAS_COMPUTE_32F);
    cublasStatus_t st = lt_call(lt, &call, ws, ws_bytes);
    bool pad;
    std::vector<double> got = download(D, &pad);
    int bad = 0, ties = 0;
    for (int64_t i = 0; i < m; i++) {
        const double exact = A.v[(size_t)i] * B.v[0];
        bad += got[(size_t)i] != round_bf16(exact);
        ties += fabs(exact - round_bf16(exact)) == 0.5 * bf16_ulp(exact);
    }
    check(st == CUBLAS_STATUS_SUCCESS && bad == 0 && ties > 10, "bf16 output rounding: %d of %lld products differ from nearest-even (%d ties)",
          bad, (long long)m, ties);
    // integer sums (exact in fp32) that need more than bf16's 8 bits, with an integer bias
    const int64_t m2 = 64, n2 = 48, k2 = 16;
    Matrix A2 = matrix_new(CUDA_R_16BF, m2, k2, m2), B2 = matrix_new(CUDA_R_16BF, k2, n2, k2), bias = matrix_new(CUDA_R_16BF, m2, 1, m2);
    for (size_t i = 0; i < A2.v.size(); i++) { A2.v[i] = (double)((int)(rng.uniform() * 9.0)); }
    for (size_t i = 0; i < B2.v.size(); i++) { B2.v[i] = (double)((int)(rng.uniform() * 9.0)); }
    for (size_t i = 0; i < bias.v.size(); i++) { bias.v[i] = round_bf16((double)((int)(rng.uniform() * 1000.0))); }
    upload(&A2); upload(&B2); upload(&bias);
    Matrix D2 = matrix_new(CUDA_R_16BF, m2, n2, m2);
    call = product_call(A2, B2, D2, CUBLAS_COMPUTE_32F);
    call.epilogue = CUBLASLT_EPILOGUE_BIAS; call.bias = bias.dev;
    st = lt_call(lt, &call, ws, ws_bytes);
    std::vector<double> got2 = download(D2, &pad);
    int bad2 = 0, inexact = 0;
    for (int64_t j = 0; j < n2; j++) {
        for (int64_t i = 0; i < m2; i++) {
            double exact = bias.v[(size_t)i];
            for (int64_t p = 0; p < k2; p++) { exact += A2.at(i, p) * B2.at(p, j); }
            bad2 += got2[(size_t)(i + j * m2)] != round_bf16(exact);
            inexact += round_bf16(exact) != exact;
        }
    }
    check(st == CUBLAS_STATUS_SUCCESS && bad2 == 0 && inexact > 100,
          "bf16 rounding of exact integer sums + bias: %d differ (%d needed rounding)", bad2, inexact);
    matrix_free(&A); matrix_free(&B); matrix_free(&D);
    matrix_free(&A2); matrix_free(&B2); matrix_free(&bias); matrix_free(&D2);
}

// with beta = 0, C is never read: the NaN poison of fresh device memory must not reach D
static void test_beta_zero_ignores_c(cublasLtHandle_t lt, void* ws, size_t ws_bytes) {
    Rng rng = {5};
    Matrix A = matrix_random(CUDA_R_16BF, 32, 16, 32, &rng, 1.0), B = matrix_random(CUDA_R_16BF, 16, 8, 16, &rng, 1.0);
    Matrix D = matrix_new(CUDA_R_16BF, 32, 8, 32);  // all NaN
    LtCall call = product_call(A, B, D, CUBLAS_COMPUTE_32F);
    cublasStatus_t st = lt_call(lt, &call, ws, ws_bytes);
    bool pad;
    std::vector<double> got = download(D, &pad);
    int nans = 0;
    for (double x : got) { nans += isnan(x); }
    check(st == CUBLAS_STATUS_SUCCESS && nans == 0, "beta = 0 with a NaN-filled C (= D): %d NaNs in D", nans);
    matrix_free(&A); matrix_free(&B); matrix_free(&D);
}

// ----------------------------------------------------------------------------
// cublasGemmStridedBatchedEx

static void test_gemm_strided_batched(cublasHandle_t handle) {
    struct TypeCase { int32_t ab, c; cublasComputeType_t compute; cublasMath_t math; bool tf32; };
    const TypeCase types[] = {
        {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH, false},
        {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_TF32_TENSOR_OP_MATH, true},
        {CUDA_R_32F, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_DEFAULT_MATH, true},
        {CUDA_R_16BF, CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH, false},
        {CUDA_R_16BF, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH, false},
    };
    const int m = 17, n = 12, k = 33, batch = 3;
    Rng rng = {11};
    for (const TypeCase& t : types) {
        for (int trans = 0; trans < 4; trans++) {
            for (int accumulate = 0; accumulate < 2; accumulate++) {
                const bool ta = trans & 1, tb = (trans >> 1) & 1;
                const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
                const int lda = a_rows + 2, ldb = b_rows, ldc = m + 1;
                const long long sa = (long long)lda * a_cols + 5, sb = (long long)ldb * b_cols, sc = (long long)ldc * n + 3;
                // each operand one flat allocation of exactly the batches' extent (no padding, all values random)
                const int64_t total_a = sa * (batch - 1) + (int64_t)lda * (a_cols - 1) + a_rows;
                const int64_t total_b = sb * (batch - 1) + (int64_t)ldb * (b_cols - 1) + b_rows;
                const int64_t total_c = sc * (batch - 1) + (int64_t)ldc * (n - 1) + m;
                Matrix A = matrix_random(t.ab, total_a, 1, total_a, &rng, 1.0);
                Matrix B = matrix_random(t.ab, total_b, 1, total_b, &rng, 1.0);
                Matrix C = matrix_random(t.c, total_c, 1, total_c, &rng, 1.0);
                std::vector<double> c_before = C.v;
                cublasSetMathMode(handle, t.math);
                const float alpha = 0.5f, beta = accumulate ? 1.0f : 0.0f;
                cublasStatus_t st = cublasGemmStridedBatchedEx(handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                                               m, n, k, &alpha, A.dev, (cudaDataType_t)t.ab, lda, sa, B.dev,
                                                               (cudaDataType_t)t.ab, ldb, sb, &beta, C.dev, (cudaDataType_t)t.c, ldc,
                                                               sc, batch, t.compute, CUBLAS_GEMM_DEFAULT);
                bool pad;
                std::vector<double> got = download(C, &pad);
                int bad = st != CUBLAS_STATUS_SUCCESS;
                for (int bi = 0; bi < batch && st == CUBLAS_STATUS_SUCCESS; bi++) {
                    for (int j = 0; j < n; j++) {
                        for (int i = 0; i < m; i++) {
                            double acc = 0.0, mag = 0.0;
                            for (int p = 0; p < k; p++) {
                                double a = A.v[(size_t)(bi * sa + (ta ? p + (long long)i * lda : i + (long long)p * lda))];
                                double b = B.v[(size_t)(bi * sb + (tb ? j + (long long)p * ldb : p + (long long)j * ldb))];
                                if (t.tf32) { a = round_tf32(a); b = round_tf32(b); }
                                acc += a * b;
                                mag += fabs(a * b);
                            }
                            const size_t ci = (size_t)(bi * sc + i + (long long)j * ldc);
                            double want = alpha * acc + (accumulate ? c_before[ci] : 0.0);
                            bad += !near_enough(got[ci], want, (k + 4) * ldexp(1.0, -23) * (mag + fabs(c_before[ci])) + 1e-7, t.c);
                        }
                    }
                }
                // the gaps between the batches of C are never written
                for (size_t ci = 0; ci < got.size(); ci++) {
                    const long long within = (long long)ci % sc, col = within / ldc, row = within % ldc;
                    const bool in_matrix = (long long)ci < sc * batch && col < n && row < m;
                    if (!in_matrix && !isnan(c_before[ci]) && got[ci] != c_before[ci]) { bad++; }
                }
                check(bad == 0, "cublasGemmStridedBatchedEx A/B %s C %s compute %d math %d %s%s beta %g: status %d, %d bad values",
                      t.ab == CUDA_R_32F ? "fp32" : "bf16", t.c == CUDA_R_32F ? "fp32" : "bf16", (int)t.compute, (int)t.math,
                      ta ? "T" : "N", tb ? "T" : "N", (double)beta, (int)st, bad);
                matrix_free(&A); matrix_free(&B); matrix_free(&C);
            }
        }
    }
    cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH);

    // refusals: mixed input types, TF32 on bf16, bad leading dimension
    float one = 1.0f;
    Matrix X = matrix_new(CUDA_R_32F, 8, 8, 8);
    cublasStatus_t mixed = cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, X.dev, CUDA_R_32F, 8, 64, X.dev,
                                                      CUDA_R_16BF, 8, 64, &one, X.dev, CUDA_R_32F, 8, 64, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    cublasStatus_t tf32_bf16 = cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, X.dev, CUDA_R_16BF, 8, 64, X.dev,
                                                          CUDA_R_16BF, 8, 64, &one, X.dev, CUDA_R_16BF, 8, 64, 1, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT);
    cublasStatus_t bad_ld = cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, X.dev, CUDA_R_32F, 7, 64, X.dev,
                                                       CUDA_R_32F, 8, 64, &one, X.dev, CUDA_R_32F, 8, 64, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    check(mixed == CUBLAS_STATUS_NOT_SUPPORTED && tf32_bf16 == CUBLAS_STATUS_NOT_SUPPORTED && bad_ld == CUBLAS_STATUS_INVALID_VALUE,
          "cublasGemmStridedBatchedEx refusals: mixed types %d, TF32 on bf16 %d, lda < m %d", (int)mixed, (int)tf32_bf16, (int)bad_ld);
    matrix_free(&X);
}

// ----------------------------------------------------------------------------
// the heuristic's and the descriptors' refusals

static void test_refusals(cublasLtHandle_t lt, void* ws, size_t ws_bytes) {
    Matrix X = matrix_new(CUDA_R_32F, 64, 64, 64);
    Matrix Y = matrix_new(CUDA_R_16BF, 64, 64, 64);
    LtCall base;
    memset(&base, 0, sizeof(base));
    base.ab_type = CUDA_R_32F; base.d_type = CUDA_R_32F; base.compute = CUBLAS_COMPUTE_32F; base.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    base.alpha = 1.0f; base.bias_type = -1; base.m = 64; base.n = 64; base.k = 64;
    base.lda = 64; base.ldb = 64; base.ldc = 64; base.ldd = 64; base.a = X.dev; base.b = X.dev; base.c = X.dev; base.d = X.dev;

    LtCall c = base;  // bf16 inputs with an fp32 D under TF32 compute
    c.ab_type = CUDA_R_16BF; c.compute = CUBLAS_COMPUTE_32F_FAST_TF32; c.a = Y.dev; c.b = Y.dev;
    cublasStatus_t st = lt_call(lt, &c, ws, ws_bytes);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED && c.heuristic_count == 0, "heuristic refuses TF32 on bf16 inputs: status %d, %d algorithms", (int)st, c.heuristic_count);

    c = base;  // fp32 inputs with a bf16 D
    c.d_type = CUDA_R_16BF; c.c = Y.dev; c.d = Y.dev;
    st = lt_call(lt, &c, ws, ws_bytes);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED && c.heuristic_count == 0, "heuristic refuses fp32 inputs with a bf16 output: status %d, %d", (int)st, c.heuristic_count);

    c = base;  // ReLU's bit mask is not emulated
    c.epilogue = CUBLASLT_EPILOGUE_RELU;
    st = lt_call(lt, &c, ws, ws_bytes);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED && c.heuristic_count == 0, "heuristic refuses the ReLU epilogue: status %d", (int)st);

    c = base;  // an aux leading dimension that is not a multiple of 8
    c.epilogue = CUBLASLT_EPILOGUE_GELU_AUX; c.aux = X.dev; c.aux_ld = 68;
    st = lt_call(lt, &c, ws, ws_bytes);
    check(st == CUBLAS_STATUS_INVALID_VALUE && c.heuristic_count == 0, "heuristic refuses EPILOGUE_AUX_LD 68 (not a multiple of 8): status %d", (int)st);

    c = base;  // a bias type that is neither D's nor fp32
    c.ab_type = CUDA_R_16BF; c.a = Y.dev; c.b = Y.dev; c.epilogue = CUBLASLT_EPILOGUE_BIAS; c.bias = Y.dev; c.bias_type = CUDA_R_16F;
    st = lt_call(lt, &c, ws, ws_bytes);
    check(st == CUBLAS_STATUS_NOT_SUPPORTED, "heuristic refuses an fp16 bias: status %d", (int)st);

    c = base;  // the epilogue needs a bias pointer
    c.epilogue = CUBLASLT_EPILOGUE_BIAS;
    st = lt_call(lt, &c, ws, ws_bytes);
    check(st == CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmul refuses BIAS without BIAS_POINTER: status %d", (int)st);

    // attributes: the wrong size, and ones whose effect is not emulated
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    int64_t wide = CUBLAS_OP_T;
    const void* scale = X.dev;
    cublasStatus_t size_st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof(wide));
    cublasStatus_t scale_st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale, sizeof(scale));
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t align_as_size_t = 16;
    cublasStatus_t pref_st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_as_size_t, sizeof(align_as_size_t));
    cublasLtMatmulPreferenceDestroy(pref);
    check(size_st == CUBLAS_STATUS_INVALID_VALUE && scale_st == CUBLAS_STATUS_NOT_SUPPORTED && pref_st == CUBLAS_STATUS_INVALID_VALUE,
          "attributes: 8-byte TRANSA %d, A_SCALE_POINTER %d, 8-byte MIN_ALIGNMENT %d", (int)size_st, (int)scale_st, (int)pref_st);

    matrix_free(&X);
    matrix_free(&Y);
}

// ----------------------------------------------------------------------------
// batched cuBLASLt layouts

static void test_lt_batched(cublasLtHandle_t lt) {
    const int64_t m = 16, n = 8, k = 12, batch = 3, sa = m * k + 16, sb = k * n, sd = m * n + 8;
    Rng rng = {21};
    Matrix A = matrix_random(CUDA_R_32F, m, (sa * (batch - 1) + m * k) / m + 1, m, &rng, 1.0);
    Matrix B = matrix_random(CUDA_R_32F, k, sb * batch / k, k, &rng, 1.0);
    Matrix D = matrix_new(CUDA_R_32F, m, (sd * (batch - 1) + m * n) / m + 1, m);
    cublasLtMatmulDesc_t desc;
    cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k);
    cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, m);
    int32_t b32 = (int32_t)batch;
    int64_t strides[3] = {sa, sb, sd};
    cublasLtMatrixLayout_t layouts[3] = {la, lb, ld};
    for (int i = 0; i < 3; i++) {
        cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b32, sizeof(b32));
        cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &strides[i], sizeof(strides[i]));
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st = cublasLtMatmul(lt, desc, &alpha, A.dev, la, B.dev, lb, &beta, D.dev, ld, D.dev, ld, NULL, NULL, 0, 0);
    bool pad;
    std::vector<double> got = download(D, &pad);
    int bad = 0;
    for (int64_t bi = 0; bi < batch; bi++) {
        for (int64_t j = 0; j < n; j++) {
            for (int64_t i = 0; i < m; i++) {
                double acc = 0.0, mag = 0.0;
                for (int64_t p = 0; p < k; p++) {
                    const double x = A.v[(size_t)(bi * sa + i + p * m)] * B.v[(size_t)(bi * sb + p + j * k)];
                    acc += x;
                    mag += fabs(x);
                }
                bad += !near_enough(got[(size_t)(bi * sd + i + j * m)], acc, (k + 4) * ldexp(1.0, -23) * mag, CUDA_R_32F);
            }
        }
    }
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_GELU;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi));
    cublasStatus_t with_epilogue = cublasLtMatmul(lt, desc, &alpha, A.dev, la, B.dev, lb, &beta, D.dev, ld, D.dev, ld, NULL, NULL, 0, 0);
    check(st == CUBLAS_STATUS_SUCCESS && bad == 0 && with_epilogue == CUBLAS_STATUS_NOT_SUPPORTED,
          "batched cuBLASLt layouts: status %d, %d bad values; with an epilogue: status %d", (int)st, bad, (int)with_epilogue);
    for (int i = 0; i < 3; i++) { cublasLtMatrixLayoutDestroy(layouts[i]); }
    cublasLtMatmulDescDestroy(desc);
    matrix_free(&A); matrix_free(&B); matrix_free(&D);
}

// ----------------------------------------------------------------------------
// alignment preferences

static void test_alignment(cublasLtHandle_t lt, void* ws, size_t ws_bytes) {
    // operands 16 bytes into their allocations: 16-byte aligned, not 256
    const int64_t m = 32, n = 16, k = 8;
    Rng rng = {3};
    Matrix A = matrix_random(CUDA_R_16BF, m + 8, k, m + 8, &rng, 1.0);
    Matrix B = matrix_random(CUDA_R_16BF, k + 8, n, k + 8, &rng, 1.0);
    Matrix D = matrix_new(CUDA_R_16BF, m + 8, n, m + 8);
    LtCall call;
    memset(&call, 0, sizeof(call));
    call.ab_type = CUDA_R_16BF; call.d_type = CUDA_R_16BF; call.compute = CUBLAS_COMPUTE_32F; call.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    call.alpha = 1.0f; call.bias_type = -1; call.m = m; call.n = n; call.k = k;
    call.lda = m + 8; call.ldb = k + 8; call.ldc = m + 8; call.ldd = m + 8;
    call.a = (char*)A.dev + 16; call.b = (char*)B.dev + 16; call.c = (char*)D.dev + 16; call.d = (char*)D.dev + 16;

    LtCall c = call;  // promised 16, are 16
    c.align = 16;
    cublasStatus_t promised_16 = lt_call(lt, &c, ws, ws_bytes);
    c = call;  // nothing promised: cuBLASLt assumes 256
    cublasStatus_t unset = lt_call(lt, &c, ws, ws_bytes);
    const int unset_count = c.heuristic_count;
    c = call;  // promised 16, D is only 2-byte aligned
    c.align = 16;
    c.d = (char*)D.dev + 18; c.c = c.d;
    c.m = m - 1;
    cublasStatus_t d_off = lt_call(lt, &c, ws, ws_bytes);
    c = call;  // promised 2 for everything: any bf16 pointer will do
    c.align = 2;
    c.a = (char*)A.dev + 2;
    c.m = m - 1;
    cublasStatus_t promised_2 = lt_call(lt, &c, ws, ws_bytes);
    check(promised_16 == CUBLAS_STATUS_SUCCESS && unset == CUBLAS_STATUS_NOT_SUPPORTED && unset_count == 1 &&
              d_off == CUBLAS_STATUS_NOT_SUPPORTED && promised_2 == CUBLAS_STATUS_SUCCESS,
          "alignment: 16 promised and kept %d; none promised (256 assumed) %d with %d algorithm; D 2-aligned after promising 16 %d; 2 promised %d",
          (int)promised_16, (int)unset, unset_count, (int)d_off, (int)promised_2);
    matrix_free(&A); matrix_free(&B); matrix_free(&D);
}

// ----------------------------------------------------------------------------
// the registry checks, each in a child process: it must die with one line naming the operand

static void expect_death(const char* name, const std::function<void()>& f, const char* must_contain) {
    std::string err;
    int code = run_in_child([&]() { f(); return 0; }, &err, 30);
    int lines = 0;
    for (char ch : err) { lines += ch == '\n'; }
    const bool ok = code == 1 && lines == 1 && err.rfind("cuda_cpu: ", 0) == 0 && err.find(must_contain) != std::string::npos &&
                    err.find("not inside one device allocation") != std::string::npos;
    check(ok, "%s: exit %d, stderr: %s", name, code, err.c_str());
}

static void test_registry_checks(cublasLtHandle_t lt, cublasHandle_t handle, void* ws, size_t ws_bytes) {
    const int64_t m = 32, n = 24, k = 16;
    Rng rng = {17};
    Matrix A = matrix_random(CUDA_R_16BF, m, k, m, &rng, 1.0), B = matrix_random(CUDA_R_16BF, k, n, k, &rng, 1.0);
    Matrix D = matrix_new(CUDA_R_16BF, m, n, m);
    Matrix bias = matrix_random(CUDA_R_16BF, m, 1, m, &rng, 1.0), aux = matrix_new(CUDA_R_16BF, m, n, m);
    LtCall call;
    memset(&call, 0, sizeof(call));
    call.ab_type = CUDA_R_16BF; call.d_type = CUDA_R_16BF; call.compute = CUBLAS_COMPUTE_32F; call.epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    call.alpha = 1.0f; call.bias_type = -1; call.m = m; call.n = n; call.k = k; call.align = 16;
    call.lda = m; call.ldb = k; call.ldc = m; call.ldd = m; call.a = A.dev; call.b = B.dev; call.c = D.dev; call.d = D.dev;

    // the tight allocations themselves pass (the extent is ld * (cols - 1) + rows, not ld * cols)
    LtCall c = call;
    c.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; c.bias = bias.dev; c.aux = aux.dev; c.aux_ld = m;
    check(lt_call(lt, &c, ws, ws_bytes) == CUBLAS_STATUS_SUCCESS, "tight allocations are accepted");

    std::vector<uint16_t> host_a((size_t)(m * k));
    expect_death("host pointer as A", [&]() { LtCall x = call; x.a = host_a.data(); x.align = 2; lt_call(lt, &x, ws, ws_bytes); },
                 "cublasLtMatmul A (bf16 32 x 16, ld 32)");
    Matrix small_d = matrix_new(CUDA_R_16BF, m * n - 1, 1, m * n - 1);  // one element short of m x n
    expect_death("D one element short", [&]() { LtCall x = call; x.c = x.d = small_d.dev; lt_call(lt, &x, ws, ws_bytes); },
                 "cublasLtMatmul D (bf16 32 x 24, ld 32)");
    expect_death("ld larger than the buffer", [&]() { LtCall x = call; x.lda = m + 8; lt_call(lt, &x, ws, ws_bytes); },
                 "cublasLtMatmul A (bf16 32 x 16, ld 40)");
    Matrix small_bias = matrix_new(CUDA_R_16BF, m - 1, 1, m - 1);
    expect_death("bias one element short", [&]() { LtCall x = call; x.epilogue = CUBLASLT_EPILOGUE_BIAS; x.bias = small_bias.dev; lt_call(lt, &x, ws, ws_bytes); },
                 "cublasLtMatmul bias (bf16 32 x 1");
    Matrix small_aux = matrix_new(CUDA_R_16BF, m * n - 1, 1, m * n - 1);
    expect_death("aux one element short", [&]() {
        LtCall x = call; x.epilogue = CUBLASLT_EPILOGUE_DGELU; x.aux = small_aux.dev; x.aux_ld = m; lt_call(lt, &x, ws, ws_bytes); },
                 "cublasLtMatmul aux (bf16 32 x 24, ld 32)");
    expect_death("fp32 bias where a bf16-sized buffer was allocated", [&]() {
        LtCall x = call; x.epilogue = CUBLASLT_EPILOGUE_BIAS; x.bias = bias.dev; x.bias_type = CUDA_R_32F; lt_call(lt, &x, ws, ws_bytes); },
                 "cublasLtMatmul bias (fp32 32 x 1");
    std::vector<char> host_ws(1024);
    expect_death("host workspace", [&]() { LtCall x = call; lt_call(lt, &x, host_ws.data(), host_ws.size()); }, "cublasLtMatmul workspace");
    // batched: C sized for two of three batches
    Matrix C2 = matrix_new(CUDA_R_32F, 8, 16, 8);
    expect_death("strided batch past the end of C", [&]() {
        float one = 1.0f;
        cublasGemmStridedBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, C2.dev, CUDA_R_32F, 8, 0, C2.dev, CUDA_R_32F, 8, 0,
                                   &one, C2.dev, CUDA_R_32F, 8, 64, 3, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT); },
                 "cublasGemmStridedBatchedEx C (fp32 8 x 8, ld 8, 3 batches 64 apart)");
    matrix_free(&A); matrix_free(&B); matrix_free(&D); matrix_free(&bias); matrix_free(&aux);
    matrix_free(&small_d); matrix_free(&small_bias); matrix_free(&small_aux); matrix_free(&C2);
}

// ----------------------------------------------------------------------------
// speed: one GEMM of the size a d12 MLP layer has at B*T = 1024

static void report_speed(cublasLtHandle_t lt, void* ws, size_t ws_bytes) {
    const int64_t m = 3072, n = 1024, k = 768;
    Rng rng = {1};
    Matrix A = matrix_random(CUDA_R_16BF, k, m, k, &rng, 1.0), B = matrix_random(CUDA_R_16BF, k, n, k, &rng, 1.0);
    Matrix D = matrix_new(CUDA_R_16BF, m, n, m), bias = matrix_random(CUDA_R_16BF, m, 1, m, &rng, 1.0), aux = matrix_new(CUDA_R_16BF, m, n, m);
    LtCall call;
    memset(&call, 0, sizeof(call));
    call.ab_type = CUDA_R_16BF; call.d_type = CUDA_R_16BF; call.compute = CUBLAS_COMPUTE_32F; call.ta = true;
    call.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS; call.alpha = 1.0f; call.bias = bias.dev; call.bias_type = -1;
    call.aux = aux.dev; call.aux_ld = m; call.align = 16;
    call.m = m; call.n = n; call.k = k; call.lda = k; call.ldb = k; call.ldc = m; call.ldd = m;
    call.a = A.dev; call.b = B.dev; call.c = D.dev; call.d = D.dev;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cublasStatus_t st = lt_call(lt, &call, ws, ws_bytes);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    check(st == CUBLAS_STATUS_SUCCESS, "speed run: status %d", (int)st);
    printf("speed: bf16 %lldx%lldx%lld GEMM with GELU_AUX_BIAS in %.3f s (%.1f GFLOP/s)\n", (long long)m, (long long)n, (long long)k, s,
           2.0 * (double)(m * n * k) / s * 1e-9);
    matrix_free(&A); matrix_free(&B); matrix_free(&D); matrix_free(&bias); matrix_free(&aux);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);  // the lines so far survive a fatal report
    cublasHandle_t handle;
    cublasLtHandle_t lt;
    die_unless(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS && cublasLtCreate(&lt) == CUBLAS_STATUS_SUCCESS, "handles");
    const size_t ws_bytes = 1 << 20;
    void* ws;
    die_unless(cudaMalloc(&ws, ws_bytes) == cudaSuccess, "workspace");
    die_unless(cublasSetWorkspace(handle, ws, ws_bytes) == CUBLAS_STATUS_SUCCESS, "cublasSetWorkspace");

    section("every epilogue x transpose x type x beta (480 GEMMs) against the reference", [&]() { test_all_epilogues(lt, ws, ws_bytes); });
    section("the same through blocks of 7 columns", [&]() { test_several_column_blocks(lt, handle, ws, ws_bytes); });
    section("TF32 rounding of the inputs, bit-exact (nearest even)", [&]() { test_tf32_rounding(lt, ws, ws_bytes); });
    section("bf16 output rounding, bit-exact (nearest even)", [&]() { test_bf16_output_rounding(lt, ws, ws_bytes); });
    section("beta = 0 never reads C", [&]() { test_beta_zero_ignores_c(lt, ws, ws_bytes); });
    section("cublasGemmStridedBatchedEx: types, math modes, transposes, beta, strided batches, refusals",
            [&]() { test_gemm_strided_batched(handle); });
    section("batched cuBLASLt layouts (BATCH_COUNT, STRIDED_BATCH_OFFSET)", [&]() { test_lt_batched(lt); });
    section("the heuristic refuses what is not emulated (types, ReLU, aux ld, bias type, attributes)", [&]() { test_refusals(lt, ws, ws_bytes); });
    section("MIN_ALIGNMENT_{A,B,C,D}_BYTES honoured; an operand less aligned than promised is refused",
            [&]() { test_alignment(lt, ws, ws_bytes); });
    section("host pointers and too-small buffers end the program with one line naming the operand",
            [&]() { test_registry_checks(lt, handle, ws, ws_bytes); });
    report_speed(lt, ws, ws_bytes);

    cublasLtDestroy(lt);
    cublasDestroy(handle);
    cudaFree(ws);
    printf("test_cublas_cpu: %d passed, %d failed\n", g_passed, g_failed);
    return g_failed == 0 ? 0 : 1;
}
