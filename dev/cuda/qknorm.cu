/*
dev/cuda/qknorm.cu: nanochat's QK-norm, a weightless RMSNorm of each query and key head in place in the qkv
projection's output (B,T,QKV), QKV = (NH + 2 NKV) HS, and its backward, against a CPU reference written here (in
double). The v heads must come out untouched, by the forward and by the backward.

    version 1: one thread per head, a plain loop over its HS values
    version 2: the production kernels (llmc/cuda/qknorm.cuh): one warp per head

usage: ./qknorm [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C, 4 key/value heads)
*/
#include "common.h"
#include "../../llmc/cuda/qknorm.cuh"

static const float EPS = 1e-6f;

__global__ static void qknorm_forward_v1_kernel(floatX* x, float* rstd, int N, int row, int nheads, int HS, float eps) {
    int head = blockIdx.x * blockDim.x + threadIdx.x;
    if (head >= N * nheads) { return; }
    floatX* v = x + (size_t)(head / nheads) * row + (size_t)(head % nheads) * HS;
    float ss = 0.0f;
    for (int i = 0; i < HS; i++) { ss += to_float(v[i]) * to_float(v[i]); }
    float s = rsqrtf(ss / HS + eps);
    for (int i = 0; i < HS; i++) { v[i] = (floatX)(to_float(v[i]) * s); }
    rstd[head] = s;
}

__global__ static void qknorm_backward_v1_kernel(floatX* dx, const floatX* y, const float* rstd, int N, int row, int nheads, int HS) {
    int head = blockIdx.x * blockDim.x + threadIdx.x;
    if (head >= N * nheads) { return; }
    size_t off = (size_t)(head / nheads) * row + (size_t)(head % nheads) * HS;
    float dot = 0.0f;
    for (int i = 0; i < HS; i++) { dot += to_float(dx[off + i]) * to_float(y[off + i]); }
    dot /= HS;
    for (int i = 0; i < HS; i++) { dx[off + i] = (floatX)(rstd[head] * (to_float(dx[off + i]) - to_float(y[off + i]) * dot)); }
}

// version 1's launches, with the production functions' arguments (llmc/cuda/qknorm.cuh), of which it takes the
// weightless mode: inp, weight, dweight and scratch NULL
static void qknorm_forward_v1(floatX* x, float* rstd, floatX* inp, const floatX* weight, int N, int row, int nheads, int HS,
                              float eps, cudaStream_t stream) {
    (void)inp; (void)weight;
    qknorm_forward_v1_kernel<<<ceil_div(N * nheads, 128), 128, 0, stream>>>(x, rstd, N, row, nheads, HS, eps);
    cudaCheckLaunch();
}

static void qknorm_backward_v1(floatX* dx, floatX* dweight, float* scratch, const floatX* y, const floatX* inp,
                               const floatX* weight, const float* rstd, int N, int row, int nheads, int HS, cudaStream_t stream) {
    (void)dweight; (void)scratch; (void)inp; (void)weight;
    qknorm_backward_v1_kernel<<<ceil_div(N * nheads, 128), 128, 0, stream>>>(dx, y, rstd, N, row, nheads, HS);
    cudaCheckLaunch();
}

// the CPU reference in double: y, rstd from x (forward), dx from dy through the norm of x (backward); rows of `row`
// whose first nheads heads of HS are normalised, the rest copied
static void qknorm_reference(float* y, float* rstd, float* dx, const float* x, const float* dy, int N, int row, int nheads,
                             int HS) {
    memcpy(y, x, (size_t)N * row * sizeof(float));
    memcpy(dx, dy, (size_t)N * row * sizeof(float));
    for (int head = 0; head < N * nheads; head++) {
        size_t off = (size_t)(head / nheads) * row + (size_t)(head % nheads) * HS;
        double ss = 0.0, dot = 0.0;
        for (int i = 0; i < HS; i++) { ss += (double)x[off + i] * x[off + i]; }
        double s = 1.0 / sqrt(ss / HS + EPS);
        for (int i = 0; i < HS; i++) { dot += (double)dy[off + i] * x[off + i] * s; }
        dot /= HS;
        for (int i = 0; i < HS; i++) {
            y[off + i] = (float)(x[off + i] * s);
            dx[off + i] = (float)(s * (dy[off + i] - x[off + i] * s * dot));
        }
        rstd[head] = (float)s;
    }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "qknorm", 8, 1024);
    const Shape s = pg.shape;
    const int N = s.B * s.T, HS = s.C / s.NH, nheads = s.NH + s.NKV, row = (s.NH + 2 * s.NKV) * HS;
    printf("  NKV=%d HS=%d: %d heads of %d normalised in rows of %d\n", s.NKV, HS, nheads, HS, row);
    const size_t n = (size_t)N * row, nstat = (size_t)N * nheads;
    float* x = make_random_float(n, 1);
    for (size_t i = 0; i < n; i++) { x[i] *= 3.0f; }  // rms away from 1, so a missing norm shows
    float* dy;
    floatX* d_x = to_device(x, n);  // the inputs, kept; each run works on a copy
    floatX* d_dy = random_input(&dy, n, 2);
    floatX* d_work = device_alloc<floatX>(n);
    floatX* d_y = device_alloc<floatX>(n);
    float* d_rstd = device_alloc<float>(nstat);
    float* ref_y = (float*)mallocCheck(n * sizeof(float));
    float* ref_dx = (float*)mallocCheck(n * sizeof(float));
    float* ref_rstd = (float*)mallocCheck(nstat * sizeof(float));
    qknorm_reference(ref_y, ref_rstd, ref_dx, x, dy, N, row, nheads, HS);
    const float tol = precision_tol(1e-4f, 2e-2f);
    for (int version = 1; version <= 2; version++) {
        if (!version_selected(&pg, version)) { continue; }
        // each pass works on a copy in d_work: of x (forward), of dy (backward, which reads the forward's normalised
        // heads y and rstd)
        auto forward = [&]() {
            cudaCheck(cudaMemcpy(d_work, d_x, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
            (version == 1 ? qknorm_forward_v1 : qknorm_forward)(d_work, d_rstd, NULL, NULL, N, row, nheads, HS, EPS, 0);
        };
        auto backward = [&]() {
            cudaCheck(cudaMemcpy(d_work, d_dy, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
            (version == 1 ? qknorm_backward_v1 : qknorm_backward)(d_work, NULL, NULL, d_y, NULL, NULL, d_rstd, N, row, nheads,
                                                                   HS, 0);
        };
        const char* name = version == 1 ? "version 1" : "version 2 (llmc)";
        char label[64];
        snprintf(label, sizeof(label), "%s forward", name);
        check_and_time(&pg, label, forward, d_work, ref_y, n, tol, 100, " (including a copy)");
        snprintf(label, sizeof(label), "%s forward rstd", name);
        validate_result(d_rstd, ref_rstd, label, nstat, precision_tol(1e-5f, 1e-3f));
        cudaCheck(cudaMemcpy(d_y, d_work, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
        snprintf(label, sizeof(label), "%s backward", name);
        check_and_time(&pg, label, backward, d_work, ref_dx, n, tol, 100, " (including a copy)");
    }
    free(x); free(dy); free(ref_y); free(ref_dx); free(ref_rstd);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_dy)); cudaCheck(cudaFree(d_work)); cudaCheck(cudaFree(d_y));
    cudaCheck(cudaFree(d_rstd));
    printf("qknorm: all versions match the CPU reference\n");
    return 0;
}
