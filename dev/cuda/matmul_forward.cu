/*
dev/cuda/matmul_forward.cu: out (BT, OC) = inp (BT, C) @ weight (OC, C)^T + bias (OC).

    version 1: naive, one thread per output element, fp32 accumulation
    version 2: the production path (llmc/cuda/matmul.cuh): cuBLASLt with the bias epilogue
    version 3: the production path with GELU fused into the epilogue (out = gelu(x), pre_gelu = x)

usage: ./matmul_forward [version] [--quick]   (full: the MLP's up-projection, OC = 4C, at B=4, T=256, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/matmul.cuh"

static void matmul_forward_cpu(float* out, const float* inp, const float* weight, const float* bias, int BT, int C, int OC) {
    for (int n = 0; n < BT; n++) {
        for (int o = 0; o < OC; o++) {
            float sum = bias != NULL ? bias[o] : 0.0f;
            for (int c = 0; c < C; c++) { sum += inp[(size_t)n * C + c] * weight[(size_t)o * C + c]; }
            out[(size_t)n * OC + o] = sum;
        }
    }
}

__global__ static void matmul_forward_v1(floatX* out, const floatX* inp, const floatX* weight, const floatX* bias, int BT, int C, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * OC) { return; }
    int n = (int)(idx / OC), o = (int)(idx % OC);
    float sum = to_float(bias[o]);
    for (int c = 0; c < C; c++) { sum += to_float(inp[(size_t)n * C + c]) * to_float(weight[(size_t)o * C + c]); }
    out[idx] = (floatX)sum;
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 3, "matmul_forward", 4, 256);
    const int BT = pg.shape.B * pg.shape.T, C = pg.shape.C, OC = 4 * pg.shape.C;
    Input inp((size_t)BT * C, 1), weight((size_t)OC * C, 2), bias(OC, 3);
    floatX* d_out = device_alloc<floatX>((size_t)BT * OC);
    floatX* d_pre = device_alloc<floatX>((size_t)BT * OC);
    float* ref = (float*)mallocCheck((size_t)BT * OC * sizeof(float));
    matmul_forward_cpu(ref, inp.host, weight.host, bias.host, BT, C, OC);
    // sums of C products of values in [-1, 1): TF32 / bf16 rounding dominates the error
    const float tol = precision_tol(2e-2f, 1e-1f);
    CublasContext ctx;
    cudaStream_t stream = playground_cublas_init(&ctx);
    double flops = 2.0 * BT * C * OC;
    if (version_selected(&pg, 1)) {
        auto run = [&]() { matmul_forward_v1<<<ceil_div((size_t)BT * OC, 256), 256, 0, stream>>>(d_out, inp.dev, weight.dev, bias.dev, BT, C, OC); cudaCheckLaunch(); };
        run();
        validate_result(d_out, ref, "version 1", (size_t)BT * OC, tol);
        float ms = benchmark_kernel(&pg, 10, run);
        printf("version 1: %.3f ms, %.1f TFLOP/s%s\n", ms, flops / ms * 1e-9, timing_note(&pg));
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() { matmul_forward(&ctx, d_out, inp.dev, weight.dev, bias.dev, BT, C, OC, NULL); };
        run();
        validate_result(d_out, ref, "version 2 (llmc)", (size_t)BT * OC, tol);
        float ms = benchmark_kernel(&pg, 100, run);
        printf("version 2 (llmc): %.3f ms, %.1f TFLOP/s%s\n", ms, flops / ms * 1e-9, timing_note(&pg));
    }
    if (version_selected(&pg, 3)) {
        float* ref_gelu = (float*)mallocCheck((size_t)BT * OC * sizeof(float));
        for (size_t i = 0; i < (size_t)BT * OC; i++) { ref_gelu[i] = gelu_tanh_forward(ref[i]); }
        auto run = [&]() { matmul_forward(&ctx, d_out, inp.dev, weight.dev, bias.dev, BT, C, OC, d_pre); };
        run();
        validate_result(d_pre, ref, "version 3 (llmc, GELU epilogue) pre_gelu", (size_t)BT * OC, tol);
        validate_result(d_out, ref_gelu, "version 3 (llmc, GELU epilogue) out", (size_t)BT * OC, tol);
        float ms = benchmark_kernel(&pg, 100, run);
        printf("version 3 (llmc, GELU epilogue): %.3f ms, %.1f TFLOP/s%s\n", ms, flops / ms * 1e-9, timing_note(&pg));
        free(ref_gelu);
    }
    playground_cublas_free(&ctx, stream);
    free(ref);
    cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_pre));
    printf("matmul_forward: all versions match the CPU reference\n");
    return 0;
}
