/*
llmc/opencl/opencl_matmul.h: the GEMMs of the OpenCL trainer, through CLBlast or our own tiled kernel
(llmc/opencl/matmul.cl, gemm_tiled).

    cl_gemm_init(g, dev, program)   picks the implementation: CLBlast (built with USE_CLBLAST, the
                                    default), or the tiled kernel when LLMC_CL_GEMM=tiled or the build
                                    has no CLBlast. LLMC_CL_GEMM=clblast in a build without it is an error.
    cl_gemm(g, dev, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
                                    C (M,N) = alpha * op(A) . op(B) + beta * C, row-major, fp32; A is
                                    (M,K), or (K,M) with transA; B is (K,N), or (N,K) with transB;
                                    beta = 0 never reads C. Errors are one line (clCheck / CLBlast's code).

CLBlast picks its kernel parameters from its database of devices it was tuned on (most AMD, Intel and
NVIDIA GPUs); other devices (PoCL on a CPU among them) get its defaults. Both implementations sum in a
fixed order, so a run repeats bit for bit on the same device.
*/
#ifndef LLMC_OPENCL_MATMUL_H
#define LLMC_OPENCL_MATMUL_H

#include <stdlib.h>
#include <string.h>

#include "opencl_common.h"
#ifdef USE_CLBLAST
#include <clblast_c.h>
#endif

#define CL_GEMM_LOCAL 16 // gemm_tiled's work group is CL_GEMM_LOCAL x CL_GEMM_LOCAL work items
#define CL_GEMM_TILE 64  // each computes a CL_GEMM_TILE x CL_GEMM_TILE tile of C

typedef struct {
    int use_clblast;
    cl_kernel tiled;
    const char* name; // for the start-up line
} ClGemm;

static void cl_gemm_init(ClGemm* g, const ClDevice* dev, cl_program program) {
    const char* want = getenv("LLMC_CL_GEMM");
    if (want == NULL || want[0] == '\0') { want = "default"; }
    if (strcmp(want, "default") != 0 && strcmp(want, "clblast") != 0 && strcmp(want, "tiled") != 0) {
        llmc_die("LLMC_CL_GEMM=%s: use clblast or tiled", want);
    }
    g->tiled = cl_kernel_get(program, "gemm_tiled");
    size_t wg = 0;
    clCheck(clGetKernelWorkGroupInfo(g->tiled, dev->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof(wg), &wg, NULL));
#ifdef USE_CLBLAST
    g->use_clblast = strcmp(want, "tiled") != 0;
#else
    if (strcmp(want, "clblast") == 0) { llmc_die("LLMC_CL_GEMM=clblast: this build has no CLBlast (make system-packages installs it)"); }
    g->use_clblast = 0;
#endif
    if (!g->use_clblast && wg < CL_GEMM_LOCAL * CL_GEMM_LOCAL) {
        llmc_die("OpenCL device %s runs gemm_tiled in work groups of at most %zu, it needs %d", dev->device_name, wg,
                 CL_GEMM_LOCAL * CL_GEMM_LOCAL);
    }
    g->name = g->use_clblast ? "CLBlast" : "gemm_tiled (llmc/opencl/matmul.cl)";
}

#ifdef USE_CLBLAST
static const char* clblast_status_name(CLBlastStatusCode s) {
    if ((int)s > -1000) { return cl_error_name((cl_int)s); }
    switch (s) {
        case CLBlastNotImplemented: return "CLBlastNotImplemented";
        case CLBlastInvalidDimension: return "CLBlastInvalidDimension";
        case CLBlastInvalidLeadDimA: return "CLBlastInvalidLeadDimA";
        case CLBlastInvalidLeadDimB: return "CLBlastInvalidLeadDimB";
        case CLBlastInvalidLeadDimC: return "CLBlastInvalidLeadDimC";
        case CLBlastInsufficientMemoryA: return "CLBlastInsufficientMemoryA";
        case CLBlastInsufficientMemoryB: return "CLBlastInsufficientMemoryB";
        case CLBlastInsufficientMemoryC: return "CLBlastInsufficientMemoryC";
        case CLBlastInvalidLocalMemUsage: return "CLBlastInvalidLocalMemUsage";
        case CLBlastDatabaseError: return "CLBlastDatabaseError";
        case CLBlastUnknownError: return "CLBlastUnknownError";
        case CLBlastUnexpectedError: return "CLBlastUnexpectedError";
        default: return "CLBlast error";
    }
}
#endif

static void cl_gemm(const ClGemm* g, const ClDevice* dev, int transA, int transB, int M, int N, int K, float alpha,
                    ClTensor A, int lda, ClTensor B, int ldb, float beta, ClTensor C, int ldc) {
    if (M <= 0 || N <= 0) { return; }
#ifdef USE_CLBLAST
    if (g->use_clblast) {
        cl_command_queue q = dev->queue;
        CLBlastStatusCode s = CLBlastSgemm(CLBlastLayoutRowMajor, transA ? CLBlastTransposeYes : CLBlastTransposeNo,
                                           transB ? CLBlastTransposeYes : CLBlastTransposeNo, (size_t)M, (size_t)N,
                                           (size_t)K, alpha, A.mem, A.off, (size_t)lda, B.mem, B.off, (size_t)ldb, beta,
                                           C.mem, C.off, (size_t)ldc, &q, NULL);
        if (s != CLBlastSuccess) {
            llmc_die("CLBlastSgemm (%dx%dx%d) failed at %s:%d: %s (%d)", M, N, K, __FILE__, __LINE__,
                     clblast_status_name(s), (int)s);
        }
        return;
    }
#endif
    cl_set_args(g->tiled, CL_ARGS(cl_i(M), cl_i(N), cl_i(K), cl_f(alpha), cl_t(A), cl_i(lda), cl_i(transA), cl_t(B),
                                  cl_i(ldb), cl_i(transB), cl_f(beta), cl_t(C), cl_i(ldc)));
    size_t local[2] = {CL_GEMM_LOCAL, CL_GEMM_LOCAL};
    size_t global[2] = {(size_t)(N + CL_GEMM_TILE - 1) / CL_GEMM_TILE * CL_GEMM_LOCAL,
                        (size_t)(M + CL_GEMM_TILE - 1) / CL_GEMM_TILE * CL_GEMM_LOCAL};
    clCheck(clEnqueueNDRangeKernel(dev->queue, g->tiled, 2, NULL, global, local, 0, NULL, NULL));
}

#endif // LLMC_OPENCL_MATMUL_H
