/*
dev/cuda/layernorm_forward.cu: layernorm over the channels, out = (x - mean) * rstd * w + b.

    version 1: one thread per row, three passes over the row
    version 2: the production kernel (llmc/cuda/layernorm.cuh): one warp per row, warp reductions

usage: ./layernorm_forward [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/layernorm.cuh"

static void layernorm_forward_cpu(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        float m = layernorm_mean(x, C);        // the CPU trainer's own statistics (layer_math.h)
        float s = layernorm_rstd(x, m, C);
        for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = (x[c] - m) * s * w[c] + b[c]; }
        mean[n] = m;
        rstd[n] = s;
    }
}

__global__ static void layernorm_forward_v1(floatX* out, float* mean, float* rstd, const floatX* inp, const floatX* w,
                                            const floatX* b, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    const floatX* x = inp + (size_t)n * C;
    float m = 0.0f;
    for (int c = 0; c < C; c++) { m += to_float(x[c]); }
    m /= C;
    float v = 0.0f;
    for (int c = 0; c < C; c++) { float d = to_float(x[c]) - m; v += d * d; }
    float s = rsqrtf(v / C + LAYERNORM_EPS);
    for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = (floatX)((to_float(x[c]) - m) * s * to_float(w[c]) + to_float(b[c])); }
    mean[n] = m;
    rstd[n] = s;
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "layernorm_forward", 8, 1024);
    const int C = pg.shape.C, N = pg.shape.B * pg.shape.T;
    Input inp((size_t)N * C, 1), w(C, 2), b(C, 3);
    floatX* d_out = device_alloc<floatX>((size_t)N * C);
    float* d_mean = device_alloc<float>(N);
    float* d_rstd = device_alloc<float>(N);
    float* ref = (float*)mallocCheck((size_t)N * C * sizeof(float));
    float* ref_mean = (float*)mallocCheck((size_t)N * sizeof(float));
    float* ref_rstd = (float*)mallocCheck((size_t)N * sizeof(float));
    layernorm_forward_cpu(ref, ref_mean, ref_rstd, inp.host, w.host, b.host, N, C);
    const float tol = precision_tol(1e-4f, 2e-2f);
    if (version_selected(&pg, 1)) {
        auto run = [&]() { layernorm_forward_v1<<<ceil_div(N, 256), 256>>>(d_out, d_mean, d_rstd, inp.dev, w.dev, b.dev, N, C); cudaCheckLaunch(); };
        run();
        validate_result(d_out, ref, "version 1 out", (size_t)N * C, tol);
        validate_result(d_mean, ref_mean, "version 1 mean", N, 1e-4f);
        validate_result(d_rstd, ref_rstd, "version 1 rstd", N, 1e-4f);
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() { layernorm_forward(d_out, d_mean, d_rstd, inp.dev, w.dev, b.dev, N, C, 0); };
        run();
        validate_result(d_out, ref, "version 2 (llmc) out", (size_t)N * C, tol);
        validate_result(d_mean, ref_mean, "version 2 (llmc) mean", N, 1e-4f);
        validate_result(d_rstd, ref_rstd, "version 2 (llmc) rstd", N, 1e-4f);
        printf("version 2 (llmc): %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
    }
    free(ref); free(ref_mean); free(ref_rstd);
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_mean)); cudaCheck(cudaFree(d_rstd));
    printf("layernorm_forward: all versions match the CPU reference\n");
    return 0;
}
