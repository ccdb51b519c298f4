/*
dev/cuda/layernorm_backward.cu: layernorm gradients, dinp += ..., dweight += ..., dbias += ...

    version 1: one thread per row for dinp, one thread per channel for dweight/dbias (serial over rows)
    version 2: the production kernels (llmc/cuda/layernorm.cuh): a warp per row for dinp, and deterministic
               two-level column sums (row chunks, then a fixed-order final sum) for dweight/dbias

usage: ./layernorm_backward [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/layernorm.cuh"

static void layernorm_backward_cpu(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                                   const float* mean, const float* rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float* x = inp + (size_t)n * C;
        const float* d = dout + (size_t)n * C;
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[n]) * rstd[n];
            dnorm_mean += w[c] * d[c];
            dnorm_norm_mean += w[c] * d[c] * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        for (int c = 0; c < C; c++) {
            float norm = (x[c] - mean[n]) * rstd[n];
            db[c] += d[c];
            dw[c] += norm * d[c];
            dinp[(size_t)n * C + c] += (w[c] * d[c] - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
        }
    }
}

__global__ static void layernorm_backward_dinp_v1(float* dinp, const floatX* dout, const floatX* inp, const floatX* w,
                                                  const float* mean, const float* rstd, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    float dm = 0.0f, dnm = 0.0f;
    for (int c = 0; c < C; c++) {
        float norm = (to_float(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
        float dn = to_float(w[c]) * to_float(dout[(size_t)n * C + c]);
        dm += dn;
        dnm += dn * norm;
    }
    dm /= C;
    dnm /= C;
    for (int c = 0; c < C; c++) {
        float norm = (to_float(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
        float dn = to_float(w[c]) * to_float(dout[(size_t)n * C + c]);
        dinp[(size_t)n * C + c] += (dn - dm - norm * dnm) * rstd[n];
    }
}

__global__ static void layernorm_backward_params_v1(float* dw, float* db, const floatX* dout, const floatX* inp,
                                                    const float* mean, const float* rstd, int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float sw = 0.0f, sb = 0.0f;
    for (int n = 0; n < N; n++) {
        float d = to_float(dout[(size_t)n * C + c]);
        sw += d * (to_float(inp[(size_t)n * C + c]) - mean[n]) * rstd[n];
        sb += d;
    }
    dw[c] += sw;
    db[c] += sb;
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "layernorm_backward", 8, 1024);
    const int C = pg.shape.C, N = pg.shape.B * pg.shape.T;
    Input inp((size_t)N * C, 1), dout((size_t)N * C, 2), w(C, 3);
    float* mean = (float*)mallocCheck((size_t)N * sizeof(float));
    float* rstd = (float*)mallocCheck((size_t)N * sizeof(float));
    for (int n = 0; n < N; n++) {
        mean[n] = layernorm_mean(inp.host + (size_t)n * C, C);
        rstd[n] = layernorm_rstd(inp.host + (size_t)n * C, mean[n], C);
    }
    float* d_mean = to_device_float(mean, N);
    float* d_rstd = to_device_float(rstd, N);
    float* ref_dinp = (float*)callocCheck((size_t)N * C, sizeof(float));
    float* ref_dw = (float*)callocCheck(C, sizeof(float));
    float* ref_db = (float*)callocCheck(C, sizeof(float));
    layernorm_backward_cpu(ref_dinp, ref_dw, ref_db, dout.host, inp.host, w.host, mean, rstd, N, C);
    if (version_selected(&pg, 1)) {
        float* d_dinp = device_alloc<float>((size_t)N * C);
        float* d_dw = device_alloc<float>(C);
        float* d_db = device_alloc<float>(C);
        auto run = [&]() {
            cudaCheck(cudaMemset(d_dinp, 0, (size_t)N * C * sizeof(float)));
            cudaCheck(cudaMemset(d_dw, 0, C * sizeof(float)));
            cudaCheck(cudaMemset(d_db, 0, C * sizeof(float)));
            layernorm_backward_dinp_v1<<<ceil_div(N, 256), 256>>>(d_dinp, dout.dev, inp.dev, w.dev, d_mean, d_rstd, N, C);
            layernorm_backward_params_v1<<<ceil_div(C, 256), 256>>>(d_dw, d_db, dout.dev, inp.dev, d_mean, d_rstd, N, C);
            cudaCheckLaunch();
        };
        run();
        validate_result(d_dinp, ref_dinp, "version 1 dinp", (size_t)N * C, 1e-3f);
        validate_result(d_dw, ref_dw, "version 1 dweight", C, 1e-3f);
        validate_result(d_db, ref_db, "version 1 dbias", C, 1e-3f);
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 10, run), timing_note(&pg));
        cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_db));
    }
    if (version_selected(&pg, 2)) {
        floatX* d_dinp = device_alloc<floatX>((size_t)N * C);
        floatX* d_dw = device_alloc<floatX>(C);
        floatX* d_db = device_alloc<floatX>(C);
        float* scratch = device_alloc<float>(2 * LAYERNORM_ROW_CHUNKS * C);
        auto run = [&]() {
            cudaCheck(cudaMemset(d_dinp, 0, (size_t)N * C * sizeof(floatX)));
            cudaCheck(cudaMemset(d_dw, 0, C * sizeof(floatX)));
            cudaCheck(cudaMemset(d_db, 0, C * sizeof(floatX)));
            layernorm_backward(d_dinp, d_dw, d_db, scratch, dout.dev, inp.dev, w.dev, d_mean, d_rstd, N, C, 0);
        };
        run();
        const float tol = precision_tol(1e-3f, 5e-2f);
        validate_result(d_dinp, ref_dinp, "version 2 (llmc) dinp", (size_t)N * C, tol);
        validate_result(d_dw, ref_dw, "version 2 (llmc) dweight", C, tol);
        validate_result(d_db, ref_db, "version 2 (llmc) dbias", C, tol);
        printf("version 2 (llmc): %.3f ms%s\n", benchmark_kernel(&pg, 10, run), timing_note(&pg));
        cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(d_db)); cudaCheck(cudaFree(scratch));
    }
    free(mean); free(rstd); free(ref_dinp); free(ref_dw); free(ref_db);
    cudaCheck(cudaFree(d_mean)); cudaCheck(cudaFree(d_rstd));
    printf("layernorm_backward: all versions match the CPU reference\n");
    return 0;
}
