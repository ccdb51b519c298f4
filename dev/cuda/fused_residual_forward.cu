/*
dev/cuda/fused_residual_forward.cu: residual = a + b followed by layernorm(residual), in one kernel.

    version 1: two kernels, a residual add then a layernorm (one thread per row)
    version 2: the production kernel (llmc/cuda/layernorm.cuh): one warp per row does both

usage: ./fused_residual_forward [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/layernorm.cuh"

static void fused_residual_forward_cpu(float* residual, float* out, const float* a, const float* b, const float* w,
                                       const float* bias, int N, int C) {
    for (size_t i = 0; i < (size_t)N * C; i++) { residual[i] = a[i] + b[i]; }
    for (int n = 0; n < N; n++) {
        const float* x = residual + (size_t)n * C;
        float m = layernorm_mean(x, C);
        float s = layernorm_rstd(x, m, C);
        for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = (x[c] - m) * s * w[c] + bias[c]; }
    }
}

__global__ static void residual_v1(floatX* residual, const floatX* a, const floatX* b, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { residual[i] = (floatX)(to_float(a[i]) + to_float(b[i])); }
}

__global__ static void layernorm_v1(floatX* out, const floatX* inp, const floatX* w, const floatX* bias, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    const floatX* x = inp + (size_t)n * C;
    float m = 0.0f, v = 0.0f;
    for (int c = 0; c < C; c++) { m += to_float(x[c]); }
    m /= C;
    for (int c = 0; c < C; c++) { float d = to_float(x[c]) - m; v += d * d; }
    float s = rsqrtf(v / C + LAYERNORM_EPS);
    for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = (floatX)((to_float(x[c]) - m) * s * to_float(w[c]) + to_float(bias[c])); }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "fused_residual_forward", 8, 1024);
    const int C = pg.shape.C, N = pg.shape.B * pg.shape.T;
    size_t NC = (size_t)N * C;
    Input a(NC, 1), b(NC, 2), w(C, 3), bias(C, 4);
    floatX* d_res = device_alloc<floatX>(NC);
    floatX* d_out = device_alloc<floatX>(NC);
    float* d_mean = device_alloc<float>(N);
    float* d_rstd = device_alloc<float>(N);
    float* ref_res = (float*)mallocCheck(NC * sizeof(float));
    float* ref_out = (float*)mallocCheck(NC * sizeof(float));
    fused_residual_forward_cpu(ref_res, ref_out, a.host, b.host, w.host, bias.host, N, C);
    const float tol = precision_tol(1e-4f, 3e-2f);
    if (version_selected(&pg, 1)) {
        auto run = [&]() {
            residual_v1<<<ceil_div(NC, 256), 256>>>(d_res, a.dev, b.dev, NC);
            layernorm_v1<<<ceil_div(N, 256), 256>>>(d_out, d_res, w.dev, bias.dev, N, C);
            cudaCheckLaunch();
        };
        run();
        validate_result(d_res, ref_res, "version 1 residual", NC, tol);
        validate_result(d_out, ref_out, "version 1 out", NC, tol);
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() { fused_residual_forward(d_res, d_out, d_mean, d_rstd, a.dev, b.dev, w.dev, bias.dev, N, C, 0); };
        run();
        validate_result(d_res, ref_res, "version 2 (llmc) residual", NC, tol);
        validate_result(d_out, ref_out, "version 2 (llmc) out", NC, tol);
        printf("version 2 (llmc): %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
    }
    free(ref_res); free(ref_out);
    cudaCheck(cudaFree(d_res)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_mean)); cudaCheck(cudaFree(d_rstd));
    printf("fused_residual_forward: all versions match the CPU reference\n");
    return 0;
}
