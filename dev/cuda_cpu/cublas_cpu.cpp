/*
dev/cuda_cpu/cublas_cpu.cpp: cuBLAS and cuBLASLt on the CPU, for the CPU execution target of llmc's
CUDA code (the contracts: dev/cuda_cpu/include/cublas_v2.h and cublasLt.h). Test scaffolding, not the product.

Every GEMM goes the same way: validate the description (an unsupported combination returns a status),
check each operand against the device-memory registry over the extent its layout implies, then per
block of output columns: convert A and B to fp32 (bf16 widened exactly; TF32 rounding when the compute
type asks for it), multiply with the BLAS's sgemm into an fp32 block (fp32 accumulation, the contract;
the BLAS's summation order differs from cuBLAS's anyway), apply alpha, beta C and the epilogue in fp32,
and round once to D's type.

BLAS: -DLLMC_BLAS_OPENBLAS (scipy_cblas_sgemm), -DLLMC_BLAS_MKL (cblas_sgemm), else a plain loop;
the root Makefile's BLAS_CFLAGS_<blas> / BLAS_LDLIBS_<blas> select it, as for the CPU trainer. The
BLAS's own threads follow OPENBLAS_NUM_THREADS / OMP_NUM_THREADS (and do not change the results:
every element of D is one thread's dot product over all of k).
*/
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "cublasLt.h"
#include "cublas_v2.h"
#include "cuda_bf16.h"
#include "cuda_runtime.h"
#include "../../llmc/layer_math.h"

#if defined(LLMC_BLAS_OPENBLAS)
#include <cblas.h>  // scipy_openblas32: its symbols carry a scipy_ prefix
#define CUDA_CPU_SGEMM scipy_cblas_sgemm
#elif defined(LLMC_BLAS_MKL)
#include <mkl_cblas.h>
#define CUDA_CPU_SGEMM cblas_sgemm
#endif

// ----------------------------------------------------------------------------
// handles and descriptors

struct cublasContext {
    cudaStream_t stream;
    void* workspace;
    size_t workspace_bytes;
    cublasMath_t math_mode;
};

struct cublasLtContext {
    int unused;
};

struct cublasLtMatmulDescOpaque {
    int32_t compute_type;       // cublasComputeType_t
    int32_t scale_type;         // cudaDataType_t
    int32_t pointer_mode;       // cublasLtPointerMode_t
    int32_t trans_a, trans_b, trans_c;
    uint32_t epilogue;          // cublasLtEpilogue_t
    const void* bias;           // bias (input) or bias gradient (output)
    int32_t bias_type;          // -1: D's type
    int64_t bias_batch_stride;
    void* aux;
    int64_t aux_ld;
    int64_t aux_batch_stride;
    int32_t aux_type;           // -1: D's type
    int32_t sm_count_target;    // a hint only
};

struct cublasLtMatrixLayoutOpaque {
    uint32_t type;              // cudaDataType_t
    int32_t order;
    uint64_t rows, cols;
    int64_t ld;
    int32_t batch_count;
    int64_t batch_stride;
    int64_t plane_offset;
};

enum { ALIGN_A = 0, ALIGN_B, ALIGN_C, ALIGN_D, NUM_OPERANDS };

struct cublasLtMatmulPreferenceOpaque {
    uint32_t search_mode;
    uint64_t max_workspace_bytes;
    uint32_t reduction_scheme_mask;
    uint32_t min_alignment[NUM_OPERANDS];
    float max_waves_count;
    uint64_t impl_mask;
};

// cuBLASLt's assumption when the caller says nothing about the operands' alignment
#define DEFAULT_MIN_ALIGNMENT 256u
// marks an algorithm this file handed out: data[0] = tag, data[1 + operand] = its promised alignment
#define ALGO_TAG 0x63756461635055ull

// ----------------------------------------------------------------------------
// error statuses: a call that cuBLAS refuses too says why on stderr (one line) and returns the status

static const char* status_name(cublasStatus_t status) {
    switch (status) {
        case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
        case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
        case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
        case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
        default: return "CUBLAS_STATUS_?";
    }
}

// the message, then the status's name in parentheses
#define fail(status, fmt, ...) (cuda_cpu_report(fmt " (%s)", ##__VA_ARGS__, status_name(status)), (status))

// ----------------------------------------------------------------------------
// elements

static size_t type_size(int32_t type) {
    switch (type) {
        case CUDA_R_32F: return 4;
        case CUDA_R_16BF: return 2;
        default: return 0;  // not emulated
    }
}

static const char* type_name(int32_t type) { return type == CUDA_R_32F ? "fp32" : type == CUDA_R_16BF ? "bf16" : "other"; }

static inline float load_element(const void* base, int32_t type, size_t i) {
    if (type == CUDA_R_32F) { return ((const float*)base)[i]; }
    return cuda_cpu_bf16_bits_to_float(((const uint16_t*)base)[i]);
}

static inline void store_element(void* base, int32_t type, size_t i, float v) {
    if (type == CUDA_R_32F) {
        ((float*)base)[i] = v;
    } else {
        ((uint16_t*)base)[i] = cuda_cpu_float_to_bf16_bits(v);
    }
}

// what a TF32 tensor core reads of an fp32 value: 10 mantissa bits, rounded to nearest even
static inline float round_to_tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof(u));
    if ((u & 0x7F800000u) == 0x7F800000u) {  // Inf stays; NaN stays a (quiet) NaN
        if ((u & 0x007FFFFFu) != 0) { u |= 0x00400000u; }
        memcpy(&x, &u, sizeof(u));
        return x;
    }
    u = (u + 0xFFFu + ((u >> 13) & 1u)) & ~0x1FFFu;
    memcpy(&x, &u, sizeof(u));
    return x;
}

// elements spanned by a column-major rows x cols matrix with leading dimension ld, over `batch`
// matrices `stride` apart (0 when the matrix is empty)
static size_t matrix_extent(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    if (rows <= 0 || cols <= 0 || batch <= 0) { return 0; }
    return (size_t)(ld * (cols - 1) + rows) + (size_t)((batch - 1) * stride);
}

// dies with one line (the registry's) unless the whole extent lies in one device allocation; when the
// GEMM runs (use != OPERAND_CHECKED), an operand it reads must have been written (initcheck) and one it
// writes counts as written from then on
enum OperandUse { OPERAND_CHECKED, OPERAND_READ, OPERAND_WRITTEN };
static void check_operand(const char* api, const char* name, const void* ptr, int32_t type, int64_t rows, int64_t cols,
                          int64_t ld, int64_t batch, int64_t stride, OperandUse use) {
    size_t elements = matrix_extent(rows, cols, ld, batch, stride);
    if (elements == 0) { return; }
    char what[256];
    if (batch > 1) {
        snprintf(what, sizeof(what), "%s %s (%s %lld x %lld, ld %lld, %lld batches %lld apart)", api, name, type_name(type),
                 (long long)rows, (long long)cols, (long long)ld, (long long)batch, (long long)stride);
    } else {
        snprintf(what, sizeof(what), "%s %s (%s %lld x %lld, ld %lld)", api, name, type_name(type), (long long)rows,
                 (long long)cols, (long long)ld);
    }
    if (use == OPERAND_CHECKED) {
        cuda_cpu_check_device_range(ptr, elements * type_size(type), what);
    } else if (use == OPERAND_READ) {
        cuda_cpu_device_reads(ptr, elements * type_size(type), what);
    } else {
        cuda_cpu_device_writes((void*)ptr, elements * type_size(type), what);
    }
}

// ----------------------------------------------------------------------------
// one GEMM (no batches): D (m, n) = epilogue(alpha op(A) op(B) + beta C), column-major

enum BiasGrad { BGRAD_NONE = 0, BGRAD_OF_D, BGRAD_OF_A, BGRAD_OF_B };

struct Epilogue {
    bool add_bias;      // + bias[i]
    bool gelu;          // GELU of the value (after the bias)
    bool write_aux;     // aux gets the GELU's input
    bool dgelu;         // value times GELU'(aux)
    BiasGrad bias_grad; // bias gets a sum: over D's columns, op(A)'s columns or op(B)'s rows
    const void* bias;
    int32_t bias_type;
    void* aux;
    int32_t aux_type;
    int64_t aux_ld;
};

struct Gemm {
    bool trans_a, trans_b;
    int64_t m, n, k;
    const void* a; int32_t a_type; int64_t lda;
    const void* b; int32_t b_type; int64_t ldb;
    const void* c; int32_t c_type; int64_t ldc;
    void* d; int32_t d_type; int64_t ldd;
    float alpha, beta;
    bool tf32;
    Epilogue epi;
};

// a stored matrix as the BLAS takes it (fp32, its leading dimension)
struct Fp32Matrix {
    const float* data;
    int64_t ld;
};

// the stored rows x cols matrix at p as fp32: p itself when it is fp32 and needs no rounding, else a
// dense converted copy in `buffer`
static Fp32Matrix as_fp32(const void* p, int32_t type, int64_t rows, int64_t cols, int64_t ld, bool tf32, std::vector<float>* buffer) {
    if (type == CUDA_R_32F && !tf32) { return Fp32Matrix{(const float*)p, ld}; }
    buffer->resize((size_t)(rows * cols));
    for (int64_t j = 0; j < cols; j++) {
        float* dst = buffer->data() + j * rows;
        for (int64_t i = 0; i < rows; i++) {
            float v = load_element(p, type, (size_t)(i + j * ld));
            dst[i] = tf32 ? round_to_tf32(v) : v;
        }
    }
    return Fp32Matrix{buffer->data(), std::max<int64_t>(rows, 1)};
}

// out (m, n, ld m) = op(a) (m, k) * op(b) (k, n), fp32 accumulation
static void multiply(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, Fp32Matrix a, Fp32Matrix b, float* out) {
    if (k == 0) {
        memset(out, 0, (size_t)(m * n) * sizeof(float));
        return;
    }
#if defined(CUDA_CPU_SGEMM)
    CUDA_CPU_SGEMM(CblasColMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                   (int)k, 1.0f, a.data, (int)a.ld, b.data, (int)b.ld, 0.0f, out, (int)std::max<int64_t>(m, 1));
#else
    // no BLAS in this build: column by column of out, the inner loops running along A's stored columns
    std::vector<float> bcol((size_t)k);
    for (int64_t j = 0; j < n; j++) {
        for (int64_t p = 0; p < k; p++) { bcol[(size_t)p] = trans_b ? b.data[j + p * b.ld] : b.data[p + j * b.ld]; }
        float* col = out + j * m;
        if (trans_a) {  // op(A) row i is A's stored column i: a dot product
            for (int64_t i = 0; i < m; i++) {
                const float* arow = a.data + i * a.ld;
                float sum = 0.0f;
                for (int64_t p = 0; p < k; p++) { sum += arow[p] * bcol[(size_t)p]; }
                col[i] = sum;
            }
        } else {  // a sum of A's columns
            for (int64_t i = 0; i < m; i++) { col[i] = 0.0f; }
            for (int64_t p = 0; p < k; p++) {
                const float* acol = a.data + p * a.ld;
                const float bv = bcol[(size_t)p];
                for (int64_t i = 0; i < m; i++) { col[i] += acol[i] * bv; }
            }
        }
    }
#endif
}

// BGRADA / BGRADB: bias[i] = sum_p op(A)[i, p] (length m), or bias[j] = sum_p op(B)[p, j] (length n),
// summed in fp32 in order of p over the stored values, rounded once to the bias type
static void bias_grad_of_operand(const Gemm& g) {
    const bool of_a = g.epi.bias_grad == BGRAD_OF_A;
    const void* x = of_a ? g.a : g.b;
    const int32_t type = of_a ? g.a_type : g.b_type;
    const int64_t ld = of_a ? g.lda : g.ldb;
    // op(A)[i, p] is A[i + p ld] (N) or A[p + i ld] (T); op(B)[p, j] is B[p + j ld] (N) or B[j + p ld] (T)
    const bool index_is_column = of_a ? g.trans_a : !g.trans_b;  // the vector index selects a stored column
    const int64_t length = of_a ? g.m : g.n;
    for (int64_t v = 0; v < length; v++) {
        float sum = 0.0f;
        for (int64_t p = 0; p < g.k; p++) {
            sum += load_element(x, type, (size_t)(index_is_column ? p + v * ld : v + p * ld));
        }
        store_element((void*)g.epi.bias, g.epi.bias_type, (size_t)v, sum);
    }
}

// columns [j0, j0 + width) of D from their products in acc (m x width); bias_grad (length m) collects
// the sums of DGELU_BGRAD
static void apply_epilogue(const Gemm& g, int64_t j0, int64_t width, const float* acc, float* bias_grad) {
    const Epilogue& e = g.epi;
    for (int64_t jj = 0; jj < width; jj++) {
        const int64_t j = j0 + jj;
        for (int64_t i = 0; i < g.m; i++) {
            float v = g.alpha * acc[i + jj * g.m];
            // as in BLAS, C is not read when beta is 0 (a NaN there does not leak into D)
            if (g.beta != 0.0f) { v += g.beta * load_element(g.c, g.c_type, (size_t)(i + j * g.ldc)); }
            if (e.add_bias) { v += load_element(e.bias, e.bias_type, (size_t)i); }
            if (e.write_aux) { store_element(e.aux, e.aux_type, (size_t)(i + j * e.aux_ld), v); }
            if (e.gelu) { v = gelu_tanh_forward(v); }
            if (e.dgelu) { v *= gelu_tanh_grad(load_element(e.aux, e.aux_type, (size_t)(i + j * e.aux_ld))); }
            if (e.bias_grad == BGRAD_OF_D) { bias_grad[i] += v; }
            store_element(g.d, g.d_type, (size_t)(i + j * g.ldd), v);
        }
    }
}

// columns of D per block: the fp32 product block holds about GEMM_BLOCK_ELEMENTS (16 MiB), but at
// least GEMM_MIN_BLOCK_COLUMNS columns, so a tall A (the classifier's) is not re-packed by the BLAS
// for every few columns. CUDA_CPU_GEMM_BLOCK_COLUMNS overrides it (the tests make it small, so that
// small GEMMs run through several blocks).
#define GEMM_BLOCK_ELEMENTS ((int64_t)1 << 22)
#define GEMM_MIN_BLOCK_COLUMNS ((int64_t)256)

static int64_t block_columns(int64_t m, int64_t n) {
    const int64_t asked = cuda_cpu_switch("CUDA_CPU_GEMM_BLOCK_COLUMNS");
    const int64_t columns = asked > 0 ? asked : std::max(GEMM_MIN_BLOCK_COLUMNS, GEMM_BLOCK_ELEMENTS / m);
    return std::min(columns, n);
}

static void gemm_run(const Gemm& g) {
    if (g.epi.bias_grad == BGRAD_OF_A || g.epi.bias_grad == BGRAD_OF_B) { bias_grad_of_operand(g); }
    if (g.m == 0 || g.n == 0) { return; }
    std::vector<float> a_buffer, b_buffer;
    const Fp32Matrix a = as_fp32(g.a, g.a_type, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda, g.tf32, &a_buffer);
    const int64_t block = block_columns(g.m, g.n);
    std::vector<float> acc((size_t)(g.m * block));
    std::vector<float> bias_grad(g.epi.bias_grad == BGRAD_OF_D ? (size_t)g.m : 0, 0.0f);
    const size_t b_size = type_size(g.b_type);
    for (int64_t j0 = 0; j0 < g.n; j0 += block) {
        const int64_t width = std::min(block, g.n - j0);
        // columns j0.. of op(B): stored columns j0.. (N) or stored rows j0.. (T)
        const char* b_block = (const char*)g.b + (size_t)(g.trans_b ? j0 : j0 * g.ldb) * b_size;
        const Fp32Matrix b = as_fp32(b_block, g.b_type, g.trans_b ? width : g.k, g.trans_b ? g.k : width, g.ldb, g.tf32, &b_buffer);
        multiply(g.trans_a, g.trans_b, g.m, width, g.k, a, b, acc.data());
        apply_epilogue(g, j0, width, acc.data(), bias_grad.data());
    }
    if (g.epi.bias_grad == BGRAD_OF_D) {
        for (int64_t i = 0; i < g.m; i++) { store_element((void*)g.epi.bias, g.epi.bias_type, (size_t)i, bias_grad[i]); }
    }
}

// ----------------------------------------------------------------------------
// the type rules shared by cuBLAS and cuBLASLt

// SUCCESS when (compute, A, B, C) is a combination we emulate
static cublasStatus_t check_types(const char* api, int32_t compute, int32_t a, int32_t b, int32_t c) {
    const bool fp32_compute = compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC;
    if (!fp32_compute && compute != CUBLAS_COMPUTE_32F_FAST_TF32) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: compute type %d is not emulated (32F, 32F_PEDANTIC, 32F_FAST_TF32 are)", api, compute);
    }
    bool ok;
    if (compute == CUBLAS_COMPUTE_32F_FAST_TF32) {
        ok = a == CUDA_R_32F && b == CUDA_R_32F && c == CUDA_R_32F;
    } else {
        ok = (a == CUDA_R_32F && b == CUDA_R_32F && c == CUDA_R_32F) ||
             (a == CUDA_R_16BF && b == CUDA_R_16BF && (c == CUDA_R_16BF || c == CUDA_R_32F));
    }
    if (!ok) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: types A=%d B=%d C=%d with compute type %d are not supported", api, a, b, c, compute);
    }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t parse_op(const char* api, const char* name, int32_t op, bool* trans) {
    if (op == CUBLAS_OP_N) { *trans = false; return CUBLAS_STATUS_SUCCESS; }
    if (op == CUBLAS_OP_T || op == CUBLAS_OP_C) { *trans = true; return CUBLAS_STATUS_SUCCESS; }  // C = T for real types
    return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %s = %d is not a cublasOperation_t", api, name, op);
}

// ----------------------------------------------------------------------------
// cuBLAS

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasCreate: handle is NULL"); }
    cublasContext* ctx = (cublasContext*)calloc(1, sizeof(cublasContext));
    if (ctx == NULL) { return CUBLAS_STATUS_ALLOC_FAILED; }
    ctx->math_mode = CUBLAS_DEFAULT_MATH;
    *handle = ctx;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasDestroy: NULL handle"); }
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetStream: NULL handle"); }
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t workspace_bytes) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetWorkspace: NULL handle"); }
    if (workspace_bytes > 0) { cuda_cpu_check_device_range(workspace, workspace_bytes, "cublasSetWorkspace workspace"); }
    handle->workspace = workspace;
    handle->workspace_bytes = workspace_bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasSetMathMode: NULL handle"); }
    const int base = (int)mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base < CUBLAS_DEFAULT_MATH || base > CUBLAS_TF32_TENSOR_OP_MATH) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasSetMathMode: %d is not a cublasMath_t", (int)mode);
    }
    handle->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasGetMathMode: NULL handle"); }
    if (mode == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasGetMathMode: mode is NULL"); }
    *mode = handle->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

// TF32 for cuBLAS: asked for by the compute type, or allowed on fp32 data by the handle's math mode
static bool gemm_ex_uses_tf32(const cublasContext* handle, int32_t compute, int32_t a_type) {
    const int base_mode = (int)handle->math_mode & ~(int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    return compute == CUBLAS_COMPUTE_32F_FAST_TF32 ||
           (compute == CUBLAS_COMPUTE_32F && base_mode == CUBLAS_TF32_TENSOR_OP_MATH && a_type == CUDA_R_32F);
}

cublasStatus_t cublasGemmStridedBatchedEx(CUBLAS_GEMM_STRIDED_BATCHED_EX_PARAMS) {
    const char* api = "cublasGemmStridedBatchedEx";
    (void)algo;  // an algorithm choice changes speed, not the result
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "%s: NULL handle", api); }
    Gemm g;
    memset(&g, 0, sizeof(g));
    cublasStatus_t st;
    if ((st = parse_op(api, "transa", transa, &g.trans_a)) != CUBLAS_STATUS_SUCCESS) { return st; }
    if ((st = parse_op(api, "transb", transb, &g.trans_b)) != CUBLAS_STATUS_SUCCESS) { return st; }
    const int a_rows = g.trans_a ? k : m, b_rows = g.trans_b ? n : k;
    if (m < 0 || n < 0 || k < 0 || batchCount < 0) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: m=%d n=%d k=%d batchCount=%d", api, m, n, k, batchCount);
    }
    if (lda < std::max(1, a_rows) || ldb < std::max(1, b_rows) || ldc < std::max(1, m)) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: lda=%d ldb=%d ldc=%d too small for m=%d n=%d k=%d", api, lda, ldb, ldc, m, n, k);
    }
    if (strideA < 0 || strideB < 0 || strideC < 0) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: negative batch strides are not emulated", api);
    }
    if ((st = check_types(api, computeType, Atype, Btype, Ctype)) != CUBLAS_STATUS_SUCCESS) { return st; }
    if (alpha == NULL || beta == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: alpha or beta is NULL", api); }
    g.m = m; g.n = n; g.k = k;
    g.alpha = *(const float*)alpha;  // host pointer mode, compute type 32F: float scalars
    g.beta = *(const float*)beta;
    g.tf32 = gemm_ex_uses_tf32(handle, computeType, Atype);
    g.epi.bias_grad = BGRAD_NONE;
    if (batchCount == 0 || m == 0 || n == 0) { return CUBLAS_STATUS_SUCCESS; }
    check_operand(api, "A", A, Atype, a_rows, g.trans_a ? m : k, lda, batchCount, strideA, OPERAND_CHECKED);
    check_operand(api, "B", B, Btype, b_rows, g.trans_b ? k : n, ldb, batchCount, strideB, OPERAND_CHECKED);
    check_operand(api, "C", C, Ctype, m, n, ldc, batchCount, strideC, OPERAND_CHECKED);
    const CudaCpuUse uses[3] = {{A, 0, matrix_extent(a_rows, g.trans_a ? m : k, lda, batchCount, strideA) * type_size(Atype)},
                                {B, 0, matrix_extent(b_rows, g.trans_b ? k : n, ldb, batchCount, strideB) * type_size(Btype)},
                                {C, 1, matrix_extent(m, n, ldc, batchCount, strideC) * type_size(Ctype)}};
    cuda_cpu_enqueue(handle->stream, api, {uses[0], uses[1], uses[2]}, [=]() mutable {  // in stream order
        check_operand(api, "A", A, Atype, a_rows, g.trans_a ? m : k, lda, batchCount, strideA, OPERAND_READ);
        check_operand(api, "B", B, Btype, b_rows, g.trans_b ? k : n, ldb, batchCount, strideB, OPERAND_READ);
        if (g.beta != 0.0f) { check_operand(api, "C", C, Ctype, m, n, ldc, batchCount, strideC, OPERAND_READ); }
        check_operand(api, "C", C, Ctype, m, n, ldc, batchCount, strideC, OPERAND_WRITTEN);
        for (int batch = 0; batch < batchCount; batch++) {
            g.a = (const char*)A + (size_t)(batch * strideA) * type_size(Atype); g.a_type = Atype; g.lda = lda;
            g.b = (const char*)B + (size_t)(batch * strideB) * type_size(Btype); g.b_type = Btype; g.ldb = ldb;
            g.d = (char*)C + (size_t)(batch * strideC) * type_size(Ctype); g.d_type = Ctype; g.ldd = ldc;
            g.c = g.d; g.c_type = Ctype; g.ldc = ldc;
            gemm_run(g);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}

// ----------------------------------------------------------------------------
// attributes: the objects that take them (descriptor, layout, preference) share one table and one setter

enum AttributeOwner { MATMUL_DESC = 0, MATRIX_LAYOUT, MATMUL_PREFERENCE };

struct AttributeField {
    AttributeOwner owner;
    int attr;
    size_t offset, size;  // the field it sets in the owner's struct
};

#define DESC(attr, f) {MATMUL_DESC, CUBLASLT_MATMUL_DESC_##attr, offsetof(cublasLtMatmulDescOpaque, f), \
                       sizeof(((cublasLtMatmulDescOpaque*)0)->f)}
#define LAYOUT(attr, f) {MATRIX_LAYOUT, CUBLASLT_MATRIX_LAYOUT_##attr, offsetof(cublasLtMatrixLayoutOpaque, f), \
                         sizeof(((cublasLtMatrixLayoutOpaque*)0)->f)}
#define PREF(attr, f) {MATMUL_PREFERENCE, CUBLASLT_MATMUL_PREF_##attr, offsetof(cublasLtMatmulPreferenceOpaque, f), \
                       sizeof(((cublasLtMatmulPreferenceOpaque*)0)->f)}
// every attribute emulated; a descriptor's others (scale pointers, amax, fast accumulation, fill mode)
// would change the result
static const AttributeField ATTRIBUTE_FIELDS[] = {
    DESC(COMPUTE_TYPE, compute_type),
    DESC(SCALE_TYPE, scale_type),
    DESC(POINTER_MODE, pointer_mode),
    DESC(TRANSA, trans_a),
    DESC(TRANSB, trans_b),
    DESC(TRANSC, trans_c),
    DESC(EPILOGUE, epilogue),
    DESC(BIAS_POINTER, bias),
    DESC(BIAS_DATA_TYPE, bias_type),
    DESC(BIAS_BATCH_STRIDE, bias_batch_stride),
    DESC(EPILOGUE_AUX_POINTER, aux),
    DESC(EPILOGUE_AUX_LD, aux_ld),
    DESC(EPILOGUE_AUX_BATCH_STRIDE, aux_batch_stride),
    DESC(EPILOGUE_AUX_DATA_TYPE, aux_type),
    DESC(SM_COUNT_TARGET, sm_count_target),
    LAYOUT(TYPE, type),
    LAYOUT(ORDER, order),
    LAYOUT(ROWS, rows),
    LAYOUT(COLS, cols),
    LAYOUT(LD, ld),
    LAYOUT(BATCH_COUNT, batch_count),
    LAYOUT(STRIDED_BATCH_OFFSET, batch_stride),
    LAYOUT(PLANE_OFFSET, plane_offset),
    PREF(SEARCH_MODE, search_mode),
    PREF(MAX_WORKSPACE_BYTES, max_workspace_bytes),
    PREF(REDUCTION_SCHEME_MASK, reduction_scheme_mask),
    PREF(MIN_ALIGNMENT_A_BYTES, min_alignment[ALIGN_A]),
    PREF(MIN_ALIGNMENT_B_BYTES, min_alignment[ALIGN_B]),
    PREF(MIN_ALIGNMENT_C_BYTES, min_alignment[ALIGN_C]),
    PREF(MIN_ALIGNMENT_D_BYTES, min_alignment[ALIGN_D]),
    PREF(MAX_WAVES_COUNT, max_waves_count),
    PREF(IMPL_MASK, impl_mask),
};
#undef DESC
#undef LAYOUT
#undef PREF

// per owner: its name in messages, and the answer to an attribute the table does not list for it
struct AttributeOwnerInfo {
    const char* name;
    cublasStatus_t unlisted_status;
    const char* unlisted_why;
};
static const AttributeOwnerInfo ATTRIBUTE_OWNERS[] = {
    {"descriptor", CUBLAS_STATUS_NOT_SUPPORTED, "is not emulated"},
    {"layout", CUBLAS_STATUS_INVALID_VALUE, "is not a layout attribute"},
    {"preference", CUBLAS_STATUS_INVALID_VALUE, "is not a preference attribute"},
};

// the SetAttribute calls: copies a value of exactly the attribute's size, as cuBLASLt insists
static cublasStatus_t set_attribute(const char* api, AttributeOwner owner, void* object, int attr, const void* buf, size_t size) {
    const AttributeOwnerInfo& info = ATTRIBUTE_OWNERS[owner];
    if (object == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL %s", api, info.name); }
    for (const AttributeField& field : ATTRIBUTE_FIELDS) {
        if (field.owner != owner || field.attr != attr) { continue; }
        if (buf == NULL || size != field.size) {
            return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: attribute %d takes %zu bytes, got %zu%s", api, attr, field.size, size,
                        buf == NULL ? " (NULL buffer)" : "");
        }
        memcpy((char*)object + field.offset, buf, size);
        return CUBLAS_STATUS_SUCCESS;
    }
    return fail(info.unlisted_status, "%s: attribute %d %s", api, attr, info.unlisted_why);
}

// ----------------------------------------------------------------------------
// cuBLASLt: handles, descriptors, layouts, preferences

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: handle is NULL"); }
    *handle = (cublasLtContext*)calloc(1, sizeof(cublasLtContext));
    return *handle != NULL ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: NULL handle"); }
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType, cudaDataType_t scaleType) {
    if (desc == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulDescCreate: desc is NULL"); }
    cublasLtMatmulDescOpaque* d = (cublasLtMatmulDescOpaque*)calloc(1, sizeof(cublasLtMatmulDescOpaque));
    if (d == NULL) { return CUBLAS_STATUS_ALLOC_FAILED; }
    d->compute_type = computeType;
    d->scale_type = scaleType;
    d->pointer_mode = CUBLASLT_POINTER_MODE_HOST;
    d->trans_a = d->trans_b = d->trans_c = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->bias_type = -1;
    d->aux_type = -1;
    *desc = d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
    if (layout == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatrixLayoutCreate: layout is NULL"); }
    cublasLtMatrixLayoutOpaque* l = (cublasLtMatrixLayoutOpaque*)calloc(1, sizeof(cublasLtMatrixLayoutOpaque));
    if (l == NULL) { return CUBLAS_STATUS_ALLOC_FAILED; }
    l->type = (uint32_t)type;
    l->order = CUBLASLT_ORDER_COL;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    l->batch_count = 1;
    *layout = l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
    if (pref == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulPreferenceCreate: pref is NULL"); }
    cublasLtMatmulPreferenceOpaque* p = (cublasLtMatmulPreferenceOpaque*)calloc(1, sizeof(cublasLtMatmulPreferenceOpaque));
    if (p == NULL) { return CUBLAS_STATUS_ALLOC_FAILED; }
    p->search_mode = CUBLASLT_SEARCH_BEST_FIT;
    p->reduction_scheme_mask = 0x7;
    for (int i = 0; i < NUM_OPERANDS; i++) { p->min_alignment[i] = DEFAULT_MIN_ALIGNMENT; }
    p->impl_mask = ~(uint64_t)0;
    *pref = p;
    return CUBLAS_STATUS_SUCCESS;
}

// destroying a descriptor, layout or preference frees its one allocation
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { free(desc); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) { free(layout); return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) { free(pref); return CUBLAS_STATUS_SUCCESS; }

// setting an attribute goes through the table above (set_attribute)
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
    return set_attribute("cublasLtMatmulDescSetAttribute", MATMUL_DESC, desc, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
    return set_attribute("cublasLtMatrixLayoutSetAttribute", MATRIX_LAYOUT, layout, attr, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void* buf, size_t sizeInBytes) {
    return set_attribute("cublasLtMatmulPreferenceSetAttribute", MATMUL_PREFERENCE, pref, attr, buf, sizeInBytes);
}

// ----------------------------------------------------------------------------
// cuBLASLt: what a (descriptor, layouts) pair asks for, validated once for the heuristic and the matmul

struct LtProblem {
    Gemm g;                 // pointers and scalars still unset
    int64_t batch;
    int64_t stride_a, stride_b, stride_c, stride_d;
    bool needs_bias, needs_aux;
    int64_t bias_length;
};

// the epilogue's parts, or NOT_SUPPORTED for the ones we do not emulate (ReLU's bit masks among them)
static cublasStatus_t parse_epilogue(const char* api, uint32_t epilogue, Epilogue* e, bool* needs_bias, bool* needs_aux) {
    memset(e, 0, sizeof(*e));
    e->bias_grad = BGRAD_NONE;
    switch (epilogue) {
        case CUBLASLT_EPILOGUE_DEFAULT: break;
        case CUBLASLT_EPILOGUE_BIAS: e->add_bias = true; break;
        case CUBLASLT_EPILOGUE_GELU: e->gelu = true; break;
        case CUBLASLT_EPILOGUE_GELU_AUX: e->gelu = true; e->write_aux = true; break;
        case CUBLASLT_EPILOGUE_GELU_BIAS: e->add_bias = true; e->gelu = true; break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: e->add_bias = true; e->gelu = true; e->write_aux = true; break;
        case CUBLASLT_EPILOGUE_DGELU: e->dgelu = true; break;
        case CUBLASLT_EPILOGUE_DGELU_BGRAD: e->dgelu = true; e->bias_grad = BGRAD_OF_D; break;
        case CUBLASLT_EPILOGUE_BGRADA: e->bias_grad = BGRAD_OF_A; break;
        case CUBLASLT_EPILOGUE_BGRADB: e->bias_grad = BGRAD_OF_B; break;
        default: return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: epilogue %u is not emulated", api, epilogue);
    }
    *needs_bias = e->add_bias || e->bias_grad != BGRAD_NONE;
    *needs_aux = e->write_aux || e->dgelu;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t check_layout(const char* api, const char* name, const cublasLtMatrixLayoutOpaque* l) {
    if (l == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: layout of %s is NULL", api, name); }
    if (l->order != CUBLASLT_ORDER_COL || l->plane_offset != 0) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: %s: only column-major (CUBLASLT_ORDER_COL) real layouts are emulated", api, name);
    }
    if (type_size((int32_t)l->type) == 0) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: %s: type %u is not emulated (CUDA_R_32F, CUDA_R_16BF are)", api, name, l->type);
    }
    if (l->rows > INT_MAX || l->cols > INT_MAX || l->ld > INT_MAX) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: %s: dimensions beyond int32 are not emulated", api, name);
    }
    if (l->ld < std::max<int64_t>(1, (int64_t)l->rows)) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %s: ld %lld < rows %llu", api, name, (long long)l->ld, (unsigned long long)l->rows);
    }
    if (l->batch_count < 1 || l->batch_stride < 0) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: %s: batch count %d, stride %lld", api, name, l->batch_count, (long long)l->batch_stride);
    }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t lt_problem(const char* api, const cublasLtMatmulDescOpaque* desc, const cublasLtMatrixLayoutOpaque* A,
                                 const cublasLtMatrixLayoutOpaque* B, const cublasLtMatrixLayoutOpaque* C,
                                 const cublasLtMatrixLayoutOpaque* D, LtProblem* p) {
    cublasStatus_t st;
    if (desc == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: NULL matmul descriptor", api); }
    if ((st = check_layout(api, "A", A)) != CUBLAS_STATUS_SUCCESS || (st = check_layout(api, "B", B)) != CUBLAS_STATUS_SUCCESS ||
        (st = check_layout(api, "C", C)) != CUBLAS_STATUS_SUCCESS || (st = check_layout(api, "D", D)) != CUBLAS_STATUS_SUCCESS) {
        return st;
    }
    memset(p, 0, sizeof(*p));
    Gemm& g = p->g;
    if ((st = parse_op(api, "TRANSA", desc->trans_a, &g.trans_a)) != CUBLAS_STATUS_SUCCESS) { return st; }
    if ((st = parse_op(api, "TRANSB", desc->trans_b, &g.trans_b)) != CUBLAS_STATUS_SUCCESS) { return st; }
    if (desc->trans_c != CUBLAS_OP_N) { return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: TRANSC must be CUBLAS_OP_N", api); }
    // shapes: op(A) (m, k), op(B) (k, n), C and D (m, n)
    g.m = (int64_t)D->rows;
    g.n = (int64_t)D->cols;
    g.k = (int64_t)(g.trans_a ? A->rows : A->cols);
    const int64_t a_rows = (int64_t)(g.trans_a ? A->cols : A->rows);
    const int64_t b_rows = (int64_t)(g.trans_b ? B->cols : B->rows), b_cols = (int64_t)(g.trans_b ? B->rows : B->cols);
    if (a_rows != g.m || b_rows != g.k || b_cols != g.n || C->rows != D->rows || C->cols != D->cols) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: shapes disagree: op(A) %lld x %lld, op(B) %lld x %lld, C %llu x %llu, D %llu x %llu",
                    api, (long long)a_rows, (long long)g.k, (long long)b_rows, (long long)b_cols, (unsigned long long)C->rows,
                    (unsigned long long)C->cols, (unsigned long long)D->rows, (unsigned long long)D->cols);
    }
    if (C->type != D->type) { return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: C and D types differ (%u, %u)", api, C->type, D->type); }
    if ((st = check_types(api, desc->compute_type, (int32_t)A->type, (int32_t)B->type, (int32_t)C->type)) != CUBLAS_STATUS_SUCCESS) { return st; }
    if (desc->scale_type != CUDA_R_32F) { return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: scale type must be CUDA_R_32F", api); }
    if (desc->pointer_mode != CUBLASLT_POINTER_MODE_HOST && desc->pointer_mode != CUBLASLT_POINTER_MODE_DEVICE) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: pointer mode %d is not emulated (HOST, DEVICE are)", api, desc->pointer_mode);
    }
    g.a_type = (int32_t)A->type; g.lda = A->ld;
    g.b_type = (int32_t)B->type; g.ldb = B->ld;
    g.c_type = (int32_t)C->type; g.ldc = C->ld;
    g.d_type = (int32_t)D->type; g.ldd = D->ld;
    g.tf32 = desc->compute_type == CUBLAS_COMPUTE_32F_FAST_TF32;
    // batches
    p->batch = D->batch_count;
    if (A->batch_count != p->batch || B->batch_count != p->batch || C->batch_count != p->batch) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: batch counts differ (A %d, B %d, C %d, D %d)", api, A->batch_count,
                    B->batch_count, C->batch_count, D->batch_count);
    }
    p->stride_a = A->batch_stride; p->stride_b = B->batch_stride; p->stride_c = C->batch_stride; p->stride_d = D->batch_stride;
    // epilogue
    if ((st = parse_epilogue(api, desc->epilogue, &g.epi, &p->needs_bias, &p->needs_aux)) != CUBLAS_STATUS_SUCCESS) { return st; }
    if (p->batch > 1 && desc->epilogue != CUBLASLT_EPILOGUE_DEFAULT) {
        return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: batched matmuls with an epilogue are not emulated", api);
    }
    if (p->needs_bias) {
        g.epi.bias_type = desc->bias_type < 0 ? g.d_type : desc->bias_type;
        if (g.epi.bias_type != g.d_type && g.epi.bias_type != CUDA_R_32F) {
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: bias type %d with D of type %d is not supported", api, g.epi.bias_type, g.d_type);
        }
        p->bias_length = g.epi.bias_grad == BGRAD_OF_B ? g.n : g.m;
    }
    if (p->needs_aux) {
        g.epi.aux_type = desc->aux_type < 0 ? g.d_type : desc->aux_type;
        if (g.epi.aux_type != g.d_type) {
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: aux type %d differs from D's type %d", api, g.epi.aux_type, g.d_type);
        }
        g.epi.aux_ld = desc->aux_ld;
        if (g.epi.aux_ld < std::max<int64_t>(1, g.m) || g.epi.aux_ld % 8 != 0) {
            return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: EPILOGUE_AUX_LD %lld must be a multiple of 8 and at least m = %lld", api,
                        (long long)g.epi.aux_ld, (long long)g.m);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int* returnAlgoCount) {
    const char* api = "cublasLtMatmulAlgoGetHeuristic";
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "%s: NULL handle", api); }
    if (requestedAlgoCount <= 0 || heuristicResultsArray == NULL || returnAlgoCount == NULL) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: requestedAlgoCount %d, results %p, count %p", api, requestedAlgoCount,
                    (void*)heuristicResultsArray, (void*)returnAlgoCount);
    }
    *returnAlgoCount = 0;
    LtProblem problem;
    cublasStatus_t st = lt_problem(api, desc, Adesc, Bdesc, Cdesc, Ddesc, &problem);
    if (st != CUBLAS_STATUS_SUCCESS) { return st; }
    uint32_t alignment[NUM_OPERANDS] = {DEFAULT_MIN_ALIGNMENT, DEFAULT_MIN_ALIGNMENT, DEFAULT_MIN_ALIGNMENT, DEFAULT_MIN_ALIGNMENT};
    if (pref != NULL) {
        if (pref->search_mode != CUBLASLT_SEARCH_BEST_FIT) {
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: search mode %u is not emulated", api, pref->search_mode);
        }
        memcpy(alignment, pref->min_alignment, sizeof(alignment));
    }
    cublasLtMatmulHeuristicResult_t* r = &heuristicResultsArray[0];
    memset(r, 0, sizeof(*r));
    r->algo.data[0] = ALGO_TAG;
    for (int i = 0; i < NUM_OPERANDS; i++) { r->algo.data[1 + i] = alignment[i]; }
    r->workspaceSize = 0;  // the emulation needs none
    r->state = CUBLAS_STATUS_SUCCESS;
    r->wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// NOT_SUPPORTED when an operand is less aligned than the algorithm was chosen for (cuBLASLt's answer too)
static cublasStatus_t check_alignment(const char* api, const cublasLtMatmulAlgo_t* algo, const void* const ptrs[NUM_OPERANDS]) {
    static const char* names[NUM_OPERANDS] = {"A", "B", "C", "D"};
    if (algo == NULL) { return CUBLAS_STATUS_SUCCESS; }  // cuBLASLt picks an algorithm for these very pointers
    if (algo->data[0] != ALGO_TAG) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: the algorithm does not come from cublasLtMatmulAlgoGetHeuristic", api);
    }
    for (int i = 0; i < NUM_OPERANDS; i++) {
        const uint64_t need = std::max<uint64_t>(1, algo->data[1 + i]);
        if (ptrs[i] != NULL && (uintptr_t)ptrs[i] % need != 0) {
            return fail(CUBLAS_STATUS_NOT_SUPPORTED, "%s: %s at %p is not %llu-byte aligned, as the algorithm was chosen for "
                        "(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%s_BYTES)", api, names[i], ptrs[i], (unsigned long long)need, names[i]);
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}

// alpha or beta, on the host or (POINTER_MODE_DEVICE) in device memory
static float read_scalar(const char* api, const char* name, const void* p, int32_t pointer_mode) {
    if (pointer_mode == CUBLASLT_POINTER_MODE_DEVICE) {
        char what[128];
        snprintf(what, sizeof(what), "%s %s (device pointer mode)", api, name);
        cuda_cpu_device_reads(p, sizeof(float), what);
    }
    return *(const float*)p;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc,
                              void* D, cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo,
                              void* workspace, size_t workspaceSizeInBytes, cudaStream_t stream) {
    const char* api = "cublasLtMatmul";
    if (handle == NULL) { return fail(CUBLAS_STATUS_NOT_INITIALIZED, "%s: NULL handle", api); }
    LtProblem p;
    cublasStatus_t st = lt_problem(api, desc, Adesc, Bdesc, Cdesc, Ddesc, &p);
    if (st != CUBLAS_STATUS_SUCCESS) { return st; }
    const void* ptrs[NUM_OPERANDS] = {A, B, C, D};
    if ((st = check_alignment(api, algo, ptrs)) != CUBLAS_STATUS_SUCCESS) { return st; }
    if (alpha == NULL || beta == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: alpha or beta is NULL", api); }
    if (p.needs_bias && desc->bias == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: the epilogue needs BIAS_POINTER", api); }
    if (p.needs_aux && desc->aux == NULL) { return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: the epilogue needs EPILOGUE_AUX_POINTER", api); }
    Gemm& g = p.g;
    g.alpha = read_scalar(api, "alpha", alpha, desc->pointer_mode);
    g.beta = read_scalar(api, "beta", beta, desc->pointer_mode);
    if (C == D && (g.ldc != g.ldd || p.stride_c != p.stride_d)) {
        return fail(CUBLAS_STATUS_INVALID_VALUE, "%s: in place (C == D) needs C's layout to equal D's", api);
    }
    // the registry: every byte the GPU would touch
    if (workspaceSizeInBytes > 0) { cuda_cpu_check_device_range(workspace, workspaceSizeInBytes, "cublasLtMatmul workspace"); }
    const int64_t a_rows = g.trans_a ? g.k : g.m, a_cols = g.trans_a ? g.m : g.k;
    const int64_t b_rows = g.trans_b ? g.n : g.k, b_cols = g.trans_b ? g.k : g.n;
    // every operand, checked now and used when the GEMM runs in stream order
    const void* bias = desc->bias;
    void* aux = desc->aux;
    auto operands = [=](bool run) {
        const OperandUse read = run ? OPERAND_READ : OPERAND_CHECKED, written = run ? OPERAND_WRITTEN : OPERAND_CHECKED;
        check_operand(api, "A", A, g.a_type, a_rows, a_cols, g.lda, p.batch, p.stride_a, read);
        check_operand(api, "B", B, g.b_type, b_rows, b_cols, g.ldb, p.batch, p.stride_b, read);
        if (g.beta != 0.0f) { check_operand(api, "C", C, g.c_type, g.m, g.n, g.ldc, p.batch, p.stride_c, read); }
        check_operand(api, "D", D, g.d_type, g.m, g.n, g.ldd, p.batch, p.stride_d, written);
        if (p.needs_bias) {  // added to D, or (a bias-gradient epilogue) written
            check_operand(api, "bias", bias, g.epi.bias_type, p.bias_length, 1, std::max<int64_t>(1, p.bias_length), 1, 0,
                          g.epi.bias_grad == BGRAD_NONE ? read : written);
        }
        if (p.needs_aux) {  // read by dGELU, written by the forward GELU epilogues
            check_operand(api, "aux", aux, g.epi.aux_type, g.m, g.n, g.epi.aux_ld, 1, 0, g.epi.dgelu ? read : written);
        }
    };
    operands(false);
    g.epi.bias = bias;
    g.epi.aux = aux;
    const CudaCpuUse uses[6] = {
        {A, 0, matrix_extent(a_rows, a_cols, g.lda, p.batch, p.stride_a) * type_size(g.a_type)},
        {B, 0, matrix_extent(b_rows, b_cols, g.ldb, p.batch, p.stride_b) * type_size(g.b_type)},
        {g.beta != 0.0f ? C : nullptr, 0, matrix_extent(g.m, g.n, g.ldc, p.batch, p.stride_c) * type_size(g.c_type)},
        {D, 1, matrix_extent(g.m, g.n, g.ldd, p.batch, p.stride_d) * type_size(g.d_type)},
        {p.needs_bias ? bias : nullptr, g.epi.bias_grad != BGRAD_NONE, (size_t)p.bias_length * type_size(g.epi.bias_type)},
        {p.needs_aux ? aux : nullptr, !g.epi.dgelu, matrix_extent(g.m, g.n, g.epi.aux_ld, 1, 0) * type_size(g.epi.aux_type)}};
    cuda_cpu_enqueue(stream, api, {uses[0], uses[1], uses[2], uses[3], uses[4], uses[5]}, [=]() mutable {
        operands(true);
        for (int64_t batch = 0; batch < p.batch; batch++) {
            g.a = (const char*)A + (size_t)(batch * p.stride_a) * type_size(g.a_type);
            g.b = (const char*)B + (size_t)(batch * p.stride_b) * type_size(g.b_type);
            g.c = C == NULL ? NULL : (const char*)C + (size_t)(batch * p.stride_c) * type_size(g.c_type);  // unread when beta is 0
            g.d = (char*)D + (size_t)(batch * p.stride_d) * type_size(g.d_type);
            gemm_run(g);
        }
    });
    return CUBLAS_STATUS_SUCCESS;
}
