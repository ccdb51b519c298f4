/*
llmc/opencl/matmul.cl: our own GEMM, the fallback when CLBlast is not used (LLMC_CL_GEMM=tiled, or a
build without CLBlast). fp32, OpenCL C 1.2, no extensions; work groups of 16 x 16 work items, each
computing 4 x 4 outputs of a 64 x 64 tile of C; 8 KiB of local memory per work group.

    gemm_tiled   C (M,N) = alpha * op(A) (M,K) . op(B) (K,N) + beta * C, row-major, op = transpose or not
                 (A is (K,M) with transA, B is (N,K) with transB); lda, ldb, ldc are row strides and
                 *_off element offsets. beta = 0 never reads C. Every output sums over K in order.
*/
#define GEMM_LOCAL 16                   // work group: GEMM_LOCAL x GEMM_LOCAL work items
#define GEMM_WORK 4                     // each computes GEMM_WORK x GEMM_WORK outputs
#define GEMM_TILE (GEMM_LOCAL * GEMM_WORK) // 64 x 64 outputs per work group
#define GEMM_TK 16                      // K step held in local memory

__kernel __attribute__((reqd_work_group_size(GEMM_LOCAL, GEMM_LOCAL, 1)))
void gemm_tiled(int M, int N, int K, float alpha, __global const float* A, ulong a_off, int lda, int transA,
                __global const float* Bm, ulong b_off, int ldb, int transB, float beta,
                __global float* Cm, ulong c_off, int ldc) {
    __local float As[GEMM_TK][GEMM_TILE]; // As[k][m] = op(A)[m0 + m, k0 + k]
    __local float Bs[GEMM_TK][GEMM_TILE]; // Bs[k][n] = op(B)[k0 + k, n0 + n]
    int lx = (int)get_local_id(0), ly = (int)get_local_id(1);
    int lid = ly * GEMM_LOCAL + lx;
    int n0 = (int)get_group_id(0) * GEMM_TILE, m0 = (int)get_group_id(1) * GEMM_TILE;
    A += a_off; Bm += b_off; Cm += c_off;
    float acc[GEMM_WORK][GEMM_WORK];
    for (int i = 0; i < GEMM_WORK; i++) {
        for (int j = 0; j < GEMM_WORK; j++) { acc[i][j] = 0.0f; }
    }
    for (int k0 = 0; k0 < K; k0 += GEMM_TK) {
        // each work item loads 4 elements of each tile; the index order follows the memory layout
        for (int e = lid; e < GEMM_TK * GEMM_TILE; e += GEMM_LOCAL * GEMM_LOCAL) {
            int kk = transA ? e / GEMM_TILE : e % GEMM_TK;
            int mm = transA ? e % GEMM_TILE : e / GEMM_TK;
            int m = m0 + mm, k = k0 + kk;
            float v = 0.0f;
            if (m < M && k < K) { v = transA ? A[(size_t)k * lda + m] : A[(size_t)m * lda + k]; }
            As[kk][mm] = v;
            kk = transB ? e % GEMM_TK : e / GEMM_TILE;
            int nn = transB ? e / GEMM_TK : e % GEMM_TILE;
            int n = n0 + nn;
            k = k0 + kk;
            v = 0.0f;
            if (n < N && k < K) { v = transB ? Bm[(size_t)n * ldb + k] : Bm[(size_t)k * ldb + n]; }
            Bs[kk][nn] = v;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int kk = 0; kk < GEMM_TK; kk++) {
            float a[GEMM_WORK], b[GEMM_WORK];
            for (int i = 0; i < GEMM_WORK; i++) { a[i] = As[kk][ly + GEMM_LOCAL * i]; }
            for (int j = 0; j < GEMM_WORK; j++) { b[j] = Bs[kk][lx + GEMM_LOCAL * j]; }
            for (int i = 0; i < GEMM_WORK; i++) {
                for (int j = 0; j < GEMM_WORK; j++) { acc[i][j] += a[i] * b[j]; }
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < GEMM_WORK; i++) {
        int m = m0 + ly + GEMM_LOCAL * i;
        for (int j = 0; j < GEMM_WORK; j++) {
            int n = n0 + lx + GEMM_LOCAL * j;
            if (m < M && n < N) {
                size_t idx = (size_t)m * ldc + n;
                float c = alpha * acc[i][j];
                if (beta != 0.0f) { c += beta * Cm[idx]; }
                Cm[idx] = c;
            }
        }
    }
}
