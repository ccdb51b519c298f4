/*
llmc/cpu/onednn_gemm.h: GEMMs on oneDNN's matmul primitive, through its documented C API (oneapi/dnnl/dnnl.h).
Built with -DLLMC_ONEDNN and linked with libdnnl (the pip wheels onednn-cpu-gomp + onednn-devel-cpu-gomp: oneDNN
built on GNU OpenMP and nothing else), or another oneDNN's with make ONEDNN_DIR=PREFIX (doc/cpu-speed.md: 3.13,
evaluated and not adopted); llmc/cpu/matmul.h calls it.

    onednn_gemm(dtype, transA, transB, M, N, K, A, lda, B, ldb, beta, C, ldc)
        C (M,N) = beta * C + op(A)(M,K) . op(B)(K,N), row-major like the rest of llmc: lda, ldb, ldc are the row
        strides of the stored matrices (A is (M,K) or, with transA, (K,M); likewise B). A and B are floats
        (ONEDNN_F32) or bf16 bit patterns, uint16_t (ONEDNN_BF16); C is fp32 either way and the products are summed
        in fp32. Returns 0; returns -1 when oneDNN has no kernel for the GEMM on this CPU (bf16 without AVX512-BF16
        or AMX: dnnl_unimplemented, or only its reference code "ref:any"), having changed nothing. Any other status that is not dnnl_success is one error
        line naming the GEMM and the call that failed, and exit(1).
    onednn_gemm_bias(dtype, transA, transB, M, N, K, A, lda, B, ldb, bias, C, ldc)
        C (M,N) = op(A) . op(B) + bias (N) on every row: the bias is the primitive's own argument, added to each sum
        as it is stored (no pass that fills C with the bias first, no read of C); bias NULL: onednn_gemm with beta 0
    onednn_gemm_kernel(dtype, M, N, K)   the implementation oneDNN picks for C = A . B^T of that shape in the
        calling thread's setting (e.g. "brg:avx512_core_bf16", "brg:avx512_core_amx"), or NULL where it has none
    onednn_version(buf, n)               "3.2.0" and the ISA oneDNN dispatches to ("avx512_core_bf16")

Primitives are created once per (dtype, transposes, M, N, K, lda, ldb, ldc, beta, threads) and cached for the life
of the process: a trainer's GEMMs come in a few dozen shapes, and creating a primitive costs far more than running a
small one. The cache is a hash table behind a mutex; running a primitive needs no lock.
Threads: oneDNN built on GNU OpenMP runs a GEMM on omp_get_max_threads() threads, the trainer's -t / OMP_NUM_THREADS;
inside an OpenMP parallel region it runs on the calling thread alone (the cache keys a primitive by which of the two
it was made for). A oneDNN built on TBB (3.13's onednn wheel) runs every GEMM on TBB's own threads instead. The scratchpad is the caller's (dnnl_scratchpad_mode_user): one buffer per thread (freed with
the thread, like its stream), so several threads may run the same primitive at once.
ONEDNN_MAX_CPU_ISA (oneDNN's own variable, e.g. AVX2) caps the instructions it uses: on an AVX512-BF16 CPU, AVX2
takes away its bf16 kernels, which is how the tests reach the refusal path there.
*/
#ifndef LLMC_ONEDNN_GEMM_H
#define LLMC_ONEDNN_GEMM_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include "../utils.h"
#ifdef _OPENMP
#include <omp.h>
#endif

typedef enum { ONEDNN_F32 = 0, ONEDNN_BF16 = 1 } OnednnType;

typedef struct {
    int dtype, transA, transB, M, N, K, lda, ldb, ldc, beta_kind, threads, has_bias;
    float beta;
} OnednnKey;

typedef struct OnednnEntry {
    OnednnKey key;
    int status;                  // dnnl_success, or dnnl_unimplemented (no kernel: remembered, not asked again)
    char impl[64];               // the implementation oneDNN picked ("brg:avx512_core_bf16")
    dnnl_primitive_t primitive;
    const_dnnl_memory_desc_t src_md, weights_md, bias_md, dst_md, scratch_md; // owned by the primitive's descriptor
    dnnl_primitive_desc_t pd;
    size_t scratch_bytes;
    struct OnednnEntry* next;
} OnednnEntry;

#define ONEDNN_BUCKETS 1024
static struct {
    pthread_mutex_t lock;
    dnnl_engine_t engine;
    OnednnEntry* buckets[ONEDNN_BUCKETS];
} onednn = {PTHREAD_MUTEX_INITIALIZER, NULL, {NULL}};

static const char* onednn_type_name(int dtype) { return dtype == ONEDNN_BF16 ? "bf16" : "fp32"; }

// one line naming the GEMM and the call that failed, then exit (a failing status is never a silent fallback)
static void onednn_check(dnnl_status_t status, const char* call, const OnednnKey* k) {
    if (status == dnnl_success) { return; }
    llmc_die("oneDNN %s GEMM (M=%d N=%d K=%d, transA=%d transB=%d, lda=%d ldb=%d ldc=%d): %s failed: %s",
             onednn_type_name(k->dtype), k->M, k->N, k->K, k->transA, k->transB, k->lda, k->ldb, k->ldc, call,
             dnnl_status2str(status));
}

static int onednn_threads(void) {
#ifdef _OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}

static unsigned onednn_hash(const OnednnKey* k) {
    const unsigned char* p = (const unsigned char*)k;
    unsigned h = 2166136261u; // FNV-1a over the key's bytes
    for (size_t i = 0; i < sizeof(*k); i++) { h = (h ^ p[i]) * 16777619u; }
    return h % ONEDNN_BUCKETS;
}

// a row-major (rows, cols) matrix stored with row stride ld, or its transpose (stored (cols, rows))
static dnnl_memory_desc_t onednn_matrix_md(int rows, int cols, int ld, int trans, dnnl_data_type_t type, const OnednnKey* k) {
    dnnl_dims_t dims = {rows, cols};
    dnnl_dims_t strides = {trans ? 1 : ld, trans ? ld : 1};
    dnnl_memory_desc_t md;
    onednn_check(dnnl_memory_desc_create_with_strides(&md, 2, dims, type, strides), "dnnl_memory_desc_create_with_strides", k);
    return md;
}

// the primitive of key k, created when first asked for (the caller holds the lock)
static OnednnEntry* onednn_create(const OnednnKey* k) {
    OnednnEntry* e = (OnednnEntry*)calloc(1, sizeof(OnednnEntry));
    if (e == NULL) { onednn_check(dnnl_out_of_memory, "calloc", k); }
    e->key = *k;
    if (onednn.engine == NULL) {
        // headers of one oneDNN and the library of another (an include path that shadows ONEDNN_DIR's) would pass
        // structures of another layout: stop before the first call that takes one
        const dnnl_version_t* v = dnnl_version();
        if (v->major != DNNL_VERSION_MAJOR || v->minor != DNNL_VERSION_MINOR) {
            llmc_die("oneDNN: built with the headers of %d.%d but running library %d.%d (rebuild against one oneDNN)",
                     DNNL_VERSION_MAJOR, DNNL_VERSION_MINOR, v->major, v->minor);
        }
        onednn_check(dnnl_engine_create(&onednn.engine, dnnl_cpu, 0), "dnnl_engine_create", k);
    }
    dnnl_data_type_t in_type = k->dtype == ONEDNN_BF16 ? dnnl_bf16 : dnnl_f32;
    dnnl_memory_desc_t src = onednn_matrix_md(k->M, k->K, k->lda, k->transA, in_type, k);
    dnnl_memory_desc_t weights = onednn_matrix_md(k->K, k->N, k->ldb, k->transB, in_type, k);
    dnnl_memory_desc_t dst = onednn_matrix_md(k->M, k->N, k->ldc, 0, dnnl_f32, k);
    dnnl_primitive_attr_t attr;
    onednn_check(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create", k);
    onednn_check(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), "dnnl_primitive_attr_set_scratchpad_mode", k);
    if (k->beta_kind) { // C = beta * C + A . B: the sum post-op reads C before it is overwritten
        dnnl_post_ops_t post_ops;
        onednn_check(dnnl_post_ops_create(&post_ops), "dnnl_post_ops_create", k);
        onednn_check(dnnl_post_ops_append_sum(post_ops, k->beta, 0, dnnl_data_type_undef), "dnnl_post_ops_append_sum", k);
        onednn_check(dnnl_primitive_attr_set_post_ops(attr, post_ops), "dnnl_primitive_attr_set_post_ops", k);
        dnnl_post_ops_destroy(post_ops);
    }
    dnnl_memory_desc_t bias = NULL; // (1, N): one row, broadcast over C's rows
    if (k->has_bias) { bias = onednn_matrix_md(1, k->N, k->N, 0, dnnl_f32, k); }
    dnnl_status_t st = dnnl_matmul_primitive_desc_create(&e->pd, onednn.engine, src, weights, bias, dst, attr);
    dnnl_primitive_attr_destroy(attr);
    if (bias != NULL) { dnnl_memory_desc_destroy(bias); }
    dnnl_memory_desc_destroy(src);
    dnnl_memory_desc_destroy(weights);
    dnnl_memory_desc_destroy(dst);
    e->status = (int)st;
    if (st == dnnl_unimplemented) { return e; }
    onednn_check(st, "dnnl_matmul_primitive_desc_create", k);
    const char* impl = NULL;
    onednn_check(dnnl_primitive_desc_query(e->pd, dnnl_query_impl_info_str, 0, (void*)&impl), "dnnl_primitive_desc_query", k);
    snprintf(e->impl, sizeof(e->impl), "%s", impl != NULL ? impl : "");
    if (strncmp(e->impl, "ref", 3) == 0) { // oneDNN's reference code: correct, and a hundred times slower than a kernel
        dnnl_primitive_desc_destroy(e->pd);
        e->pd = NULL;
        e->status = (int)dnnl_unimplemented;
        return e;
    }
    onednn_check(dnnl_primitive_create(&e->primitive, e->pd), "dnnl_primitive_create", k);
    e->src_md = dnnl_primitive_desc_query_md(e->pd, dnnl_query_src_md, 0);
    e->weights_md = dnnl_primitive_desc_query_md(e->pd, dnnl_query_weights_md, 0);
    e->dst_md = dnnl_primitive_desc_query_md(e->pd, dnnl_query_dst_md, 0);
    e->bias_md = k->has_bias ? dnnl_primitive_desc_query_md(e->pd, dnnl_query_weights_md, 1) : NULL;
    e->scratch_md = dnnl_primitive_desc_query_md(e->pd, dnnl_query_scratchpad_md, 0);
    e->scratch_bytes = e->scratch_md != NULL ? dnnl_memory_desc_get_size(e->scratch_md) : 0;
    return e;
}

static OnednnEntry* onednn_entry(const OnednnKey* k) {
    unsigned h = onednn_hash(k);
    pthread_mutex_lock(&onednn.lock);
    OnednnEntry* e = onednn.buckets[h];
    while (e != NULL && memcmp(&e->key, k, sizeof(*k)) != 0) { e = e->next; }
    if (e == NULL) {
        e = onednn_create(k);
        e->next = onednn.buckets[h];
        onednn.buckets[h] = e;
    }
    pthread_mutex_unlock(&onednn.lock);
    return e;
}

static OnednnKey onednn_key(int dtype, int transA, int transB, int M, int N, int K, int lda, int ldb, int ldc, float beta) {
    OnednnKey k;
    memset(&k, 0, sizeof(k)); // the key is hashed and compared as bytes
    k.dtype = dtype; k.transA = transA; k.transB = transB;
    k.M = M; k.N = N; k.K = K; k.lda = lda; k.ldb = ldb; k.ldc = ldc;
    k.beta_kind = beta != 0.0f;
    k.beta = beta;
    k.threads = onednn_threads();
    return k;
}

// Per thread: a stream (oneDNN streams are not shared between threads) and the scratchpad. They hang on a pthread
// key whose destructor frees them when the thread ends (OpenMP ends threads when a team shrinks), as
// llmc/cpu/matmul.h's packing buffers do.
typedef struct {
    dnnl_stream_t stream;
    void* scratch;
    size_t scratch_capacity;
} OnednnThread;

static pthread_key_t onednn_thread_key;
static pthread_once_t onednn_thread_key_once = PTHREAD_ONCE_INIT;

static void onednn_thread_free(void* p) {
    OnednnThread* t = (OnednnThread*)p;
    if (t->stream != NULL) { dnnl_stream_destroy(t->stream); }
    free(t->scratch);
    free(t);
}

static void onednn_thread_key_create(void) {
    if (pthread_key_create(&onednn_thread_key, onednn_thread_free) != 0) { llmc_die("pthread_key_create failed (oneDNN streams)"); }
}

// this thread's stream, and a scratchpad of at least `bytes`
static OnednnThread* onednn_thread(size_t bytes, const OnednnKey* k) {
    pthread_once(&onednn_thread_key_once, onednn_thread_key_create);
    OnednnThread* t = (OnednnThread*)pthread_getspecific(onednn_thread_key);
    if (t == NULL) {
        t = (OnednnThread*)calloc(1, sizeof(OnednnThread));
        if (t == NULL || pthread_setspecific(onednn_thread_key, t) != 0) { onednn_check(dnnl_out_of_memory, "calloc", k); }
        onednn_check(dnnl_stream_create(&t->stream, onednn.engine, dnnl_stream_default_flags), "dnnl_stream_create", k);
    }
    if (bytes > t->scratch_capacity) {
        free(t->scratch);
        t->scratch = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (t->scratch == NULL) { onednn_check(dnnl_out_of_memory, "aligned_alloc (scratchpad)", k); }
        t->scratch_capacity = bytes;
    }
    return t;
}

// C = beta * C + op(A) . op(B) (+ bias on every row where bias is not NULL: beta is then 0)
static int onednn_gemm_any(OnednnType dtype, int transA, int transB, int M, int N, int K, const void* A, int lda,
                           const void* B, int ldb, float beta, const float* bias, float* C, int ldc) {
    if (M <= 0 || N <= 0) { return 0; }
    OnednnKey k = onednn_key(dtype, transA, transB, M, N, K, lda, ldb, ldc, beta);
    k.has_bias = bias != NULL;
    if (K <= 0) { // no products: C = beta * C, or the bias (oneDNN refuses a zero inner dimension)
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++) {
                float* c = C + (size_t)i * ldc + j;
                *c = bias != NULL ? bias[j] : beta == 0.0f ? 0.0f : beta * *c;
            }
        }
        return 0;
    }
    OnednnEntry* e = onednn_entry(&k);
    if (e->status == dnnl_unimplemented) { return -1; }
    OnednnThread* t = onednn_thread(e->scratch_bytes, &k);
    dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
    onednn_check(dnnl_memory_create(&mem[0], e->src_md, onednn.engine, (void*)A), "dnnl_memory_create", &k);
    onednn_check(dnnl_memory_create(&mem[1], e->weights_md, onednn.engine, (void*)B), "dnnl_memory_create", &k);
    onednn_check(dnnl_memory_create(&mem[2], e->dst_md, onednn.engine, C), "dnnl_memory_create", &k);
    int nargs = 3;
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
    if (bias != NULL) {
        onednn_check(dnnl_memory_create(&mem[3], e->bias_md, onednn.engine, (void*)bias), "dnnl_memory_create", &k);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, mem[3]};
    }
    if (e->scratch_bytes > 0) {
        onednn_check(dnnl_memory_create(&mem[4], e->scratch_md, onednn.engine, t->scratch), "dnnl_memory_create", &k);
        args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, mem[4]};
    }
    onednn_check(dnnl_primitive_execute(e->primitive, t->stream, nargs, args), "dnnl_primitive_execute", &k);
    onednn_check(dnnl_stream_wait(t->stream), "dnnl_stream_wait", &k);
    for (int i = 0; i < 5; i++) {
        if (mem[i] != NULL) { dnnl_memory_destroy(mem[i]); }
    }
    return 0;
}

static int onednn_gemm(OnednnType dtype, int transA, int transB, int M, int N, int K, const void* A, int lda,
                       const void* B, int ldb, float beta, float* C, int ldc) {
    return onednn_gemm_any(dtype, transA, transB, M, N, K, A, lda, B, ldb, beta, NULL, C, ldc);
}

static int onednn_gemm_bias(OnednnType dtype, int transA, int transB, int M, int N, int K, const void* A, int lda,
                            const void* B, int ldb, const float* bias, float* C, int ldc) {
    return onednn_gemm_any(dtype, transA, transB, M, N, K, A, lda, B, ldb, 0.0f, bias, C, ldc);
}

static const char* onednn_gemm_kernel(OnednnType dtype, int M, int N, int K) {
    OnednnKey k = onednn_key(dtype, 0, 1, M, N, K, K, K, N, 0.0f);
    OnednnEntry* e = onednn_entry(&k);
    return e->status == dnnl_unimplemented ? NULL : e->impl;
}

static const char* onednn_isa_name(dnnl_cpu_isa_t isa) {
    switch (isa) {
        case dnnl_cpu_isa_sse41: return "sse41";
        case dnnl_cpu_isa_avx: return "avx";
        case dnnl_cpu_isa_avx2: return "avx2";
        case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
        case dnnl_cpu_isa_avx2_vnni_2: return "avx2_vnni_2";
        case dnnl_cpu_isa_avx512_core: return "avx512_core";
        case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
        case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
        case dnnl_cpu_isa_avx512_core_fp16: return "avx512_core_fp16";
        case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
        case dnnl_cpu_isa_avx512_core_amx_fp16: return "avx512_core_amx_fp16";
        default: return "other";
    }
}

static void onednn_version(char* buf, size_t n) {
    const dnnl_version_t* v = dnnl_version();
    snprintf(buf, n, "oneDNN %d.%d.%d, %s", v->major, v->minor, v->patch, onednn_isa_name(dnnl_get_effective_cpu_isa()));
}

#endif // LLMC_ONEDNN_GEMM_H
