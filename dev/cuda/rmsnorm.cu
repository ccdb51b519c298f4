/*
dev/cuda/rmsnorm.cu: Llama's RMSNorm, forward (out, rstd), backward (dinp += ..., dweight += ...) and the
fused residual + RMSNorm forward, against llmc/cpu/rmsnorm_cpu.h's rmsnorm_forward / rmsnorm_backward.

    version 1: one thread per row (forward, dinp), one thread per channel for dweight (serial over rows)
    version 2: the production kernels (llmc/cuda/rmsnorm.cuh): a warp per row, deterministic two-level
               column sums (row chunks, then a fixed-order final sum) for dweight
    version 3: the production fused residual + RMSNorm forward (llmc/cuda/rmsnorm.cuh), one warp per row

usage: ./rmsnorm [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cpu/rmsnorm_cpu.h"
#include "../../llmc/cuda/rmsnorm.cuh"

static const float EPS = 1e-5f;
// the launches name their stream: with FP32 (floatX = float) a literal 0 would pick the CPU's
// rmsnorm_forward(out, rstd, inp, weight, eps, B, T, C), whose parameters the GPU's otherwise share
static const cudaStream_t STREAM = 0;

__global__ static void rmsnorm_forward_v1(float* out, float* rstd, const floatX* inp, const floatX* w, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    const floatX* x = inp + (size_t)n * C;
    float ss = 0.0f;
    for (int c = 0; c < C; c++) { ss += to_float(x[c]) * to_float(x[c]); }
    float s = 1.0f / sqrtf(ss / C + EPS);
    for (int c = 0; c < C; c++) { out[(size_t)n * C + c] = to_float(w[c]) * (to_float(x[c]) * s); }
    rstd[n] = s;
}

__global__ static void rmsnorm_backward_dinp_v1(float* dinp, const floatX* dout, const floatX* inp, const floatX* w,
                                                const float* rstd, int N, int C) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) { return; }
    size_t off = (size_t)n * C;
    float s = rstd[n], dot = 0.0f;
    for (int c = 0; c < C; c++) { dot += to_float(w[c]) * to_float(dout[off + c]) * (to_float(inp[off + c]) * s); }
    dot /= C;
    for (int c = 0; c < C; c++) {
        dinp[off + c] += s * (to_float(w[c]) * to_float(dout[off + c]) - to_float(inp[off + c]) * s * dot);
    }
}

__global__ static void rmsnorm_backward_dweight_v1(float* dw, const floatX* dout, const floatX* inp, const float* rstd,
                                                   int N, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) { return; }
    float sw = 0.0f;
    for (int n = 0; n < N; n++) { sw += to_float(dout[(size_t)n * C + c]) * (to_float(inp[(size_t)n * C + c]) * rstd[n]); }
    dw[c] += sw;
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 3, "rmsnorm", 8, 1024);
    const int C = pg.shape.C, N = pg.shape.B * pg.shape.T;
    size_t NC = (size_t)N * C;
    Input inp(NC, 1), inp2(NC, 2), dout(NC, 3), w(C, 4);
    // the references: forward, backward from the forward's rstd, and the fused residual's forward
    float* ref_out = (float*)mallocCheck(NC * sizeof(float));
    float* ref_rstd = (float*)mallocCheck((size_t)N * sizeof(float));
    rmsnorm_forward(ref_out, ref_rstd, inp.host, w.host, EPS, pg.shape.B, pg.shape.T, C);
    float* ref_dinp = (float*)callocCheck(NC, sizeof(float));
    float* ref_dw = (float*)callocCheck(C, sizeof(float));
    rmsnorm_backward(ref_dinp, ref_dw, dout.host, inp.host, w.host, ref_rstd, pg.shape.B, pg.shape.T, C);
    float* ref_res = (float*)mallocCheck(NC * sizeof(float));
    float* ref_res_out = (float*)mallocCheck(NC * sizeof(float));
    float* ref_res_rstd = (float*)mallocCheck((size_t)N * sizeof(float));
    for (size_t i = 0; i < NC; i++) { ref_res[i] = inp.host[i] + inp2.host[i]; }
    floatX_round_host(ref_res, NC);  // the fused kernel normalises the residual as stored
    rmsnorm_forward(ref_res_out, ref_res_rstd, ref_res, w.host, EPS, pg.shape.B, pg.shape.T, C);
    float* d_rstd = to_device_float(ref_rstd, N);
    float* d_rstd_out = device_alloc<float>(N);
    const float rstd_tol = 1e-5f;  // float32 in both precisions
    if (version_selected(&pg, 1)) {
        float* d_out = device_alloc<float>(NC);
        float* d_dinp = device_alloc<float>(NC);
        float* d_dw = device_alloc<float>(C);
        auto run = [&]() {
            rmsnorm_forward_v1<<<ceil_div(N, 256), 256>>>(d_out, d_rstd_out, inp.dev, w.dev, N, C);
            cudaCheck(cudaMemset(d_dinp, 0, NC * sizeof(float)));
            cudaCheck(cudaMemset(d_dw, 0, C * sizeof(float)));
            rmsnorm_backward_dinp_v1<<<ceil_div(N, 256), 256>>>(d_dinp, dout.dev, inp.dev, w.dev, d_rstd, N, C);
            rmsnorm_backward_dweight_v1<<<ceil_div(C, 256), 256>>>(d_dw, dout.dev, inp.dev, d_rstd, N, C);
            cudaCheckLaunch();
        };
        run();
        validate_result(d_out, ref_out, "version 1 out", NC, 1e-4f);
        validate_result(d_rstd_out, ref_rstd, "version 1 rstd", N, rstd_tol);
        validate_result(d_dinp, ref_dinp, "version 1 dinp", NC, 1e-4f);
        validate_result(d_dw, ref_dw, "version 1 dweight", C, 1e-4f);
        printf("version 1 (forward + backward): %.3f ms%s\n", benchmark_kernel(&pg, 10, run), timing_note(&pg));
        cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_dw));
    }
    floatX* d_out = device_alloc<floatX>(NC);
    if (version_selected(&pg, 2)) {
        floatX* d_dinp = device_alloc<floatX>(NC);
        floatX* d_dw = device_alloc<floatX>(C);
        float* scratch = device_alloc<float>(RMSNORM_ROW_CHUNKS * C);
        auto forward = [&]() { rmsnorm_forward(d_out, d_rstd_out, inp.dev, w.dev, EPS, N, C, STREAM); };
        auto backward = [&]() {
            cudaCheck(cudaMemset(d_dinp, 0, NC * sizeof(floatX)));
            cudaCheck(cudaMemset(d_dw, 0, C * sizeof(floatX)));
            rmsnorm_backward(d_dinp, d_dw, scratch, dout.dev, inp.dev, w.dev, d_rstd, N, C, STREAM);
        };
        forward();
        validate_result(d_out, ref_out, "version 2 (llmc) out", NC, precision_tol(1e-4f, 3e-2f));
        validate_result(d_rstd_out, ref_rstd, "version 2 (llmc) rstd", N, rstd_tol);
        printf("version 2 (llmc) forward: %.3f ms%s\n", benchmark_kernel(&pg, 100, forward), timing_note(&pg));
        backward();
        validate_result(d_dinp, ref_dinp, "version 2 (llmc) dinp", NC, precision_tol(1e-4f, 5e-2f));
        validate_result(d_dw, ref_dw, "version 2 (llmc) dweight", C, precision_tol(1e-4f, 5e-2f));
        printf("version 2 (llmc) backward: %.3f ms%s\n", benchmark_kernel(&pg, 10, backward), timing_note(&pg));
        cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_dw)); cudaCheck(cudaFree(scratch));
    }
    if (version_selected(&pg, 3)) {
        floatX* d_res = device_alloc<floatX>(NC);
        auto run = [&]() { fused_residual_rmsnorm_forward(d_res, d_out, d_rstd_out, inp.dev, inp2.dev, w.dev, EPS, N, C, STREAM); };
        run();
        const float tol = precision_tol(1e-4f, 3e-2f);
        validate_result(d_res, ref_res, "version 3 (llmc fused residual) residual", NC, tol);
        validate_result(d_out, ref_res_out, "version 3 (llmc fused residual) out", NC, tol);
        validate_result(d_rstd_out, ref_res_rstd, "version 3 (llmc fused residual) rstd", N, rstd_tol);
        printf("version 3 (llmc fused residual): %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
        cudaCheck(cudaFree(d_res));
    }
    free(ref_out); free(ref_rstd); free(ref_dinp); free(ref_dw);
    free(ref_res); free(ref_res_out); free(ref_res_rstd);
    cudaCheck(cudaFree(d_rstd)); cudaCheck(cudaFree(d_rstd_out)); cudaCheck(cudaFree(d_out));
    printf("rmsnorm: all versions match the CPU reference\n");
    return 0;
}
