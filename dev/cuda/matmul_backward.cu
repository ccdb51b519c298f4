/*
dev/cuda/matmul_backward.cu: gradients of out = inp @ weight^T + bias:
dinp = dout @ weight, dweight += dout^T @ inp, dbias += column sums of dout.

    version 1: naive kernels, one thread per output element (dinp, dweight, dbias)
    version 2: the production path (llmc/cuda/matmul.cuh): two cuBLASLt GEMMs and the deterministic
               two-level bias column sum

usage: ./matmul_backward [version] [--quick]   (full: the qkv projection, OC = 3C, at B=4, T=256, GPT-2 124M's C)
*/
#include "common.h"
#include "../../llmc/cuda/matmul.cuh"

static void matmul_backward_cpu(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp, const float* weight,
                                int BT, int C, int OC) {
    for (int n = 0; n < BT; n++) {
        for (int c = 0; c < C; c++) {
            float sum = 0.0f;
            for (int o = 0; o < OC; o++) { sum += dout[(size_t)n * OC + o] * weight[(size_t)o * C + c]; }
            dinp[(size_t)n * C + c] = sum;
        }
    }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            float sum = 0.0f;
            for (int n = 0; n < BT; n++) { sum += dout[(size_t)n * OC + o] * inp[(size_t)n * C + c]; }
            dweight[(size_t)o * C + c] += sum;
        }
        float s = 0.0f;
        for (int n = 0; n < BT; n++) { s += dout[(size_t)n * OC + o]; }
        dbias[o] += s;
    }
}

__global__ static void dinp_v1(floatX* dinp, const floatX* dout, const floatX* weight, int BT, int C, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * C) { return; }
    int n = (int)(idx / C), c = (int)(idx % C);
    float sum = 0.0f;
    for (int o = 0; o < OC; o++) { sum += to_float(dout[(size_t)n * OC + o]) * to_float(weight[(size_t)o * C + c]); }
    dinp[idx] = (floatX)sum;
}

__global__ static void dweight_v1(floatX* dweight, floatX* dbias, const floatX* dout, const floatX* inp, int BT, int C, int OC) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)OC * C) { return; }
    int o = (int)(idx / C), c = (int)(idx % C);
    float sum = 0.0f;
    for (int n = 0; n < BT; n++) { sum += to_float(dout[(size_t)n * OC + o]) * to_float(inp[(size_t)n * C + c]); }
    dweight[idx] = (floatX)(to_float(dweight[idx]) + sum);
    if (c == 0) {
        float s = 0.0f;
        for (int n = 0; n < BT; n++) { s += to_float(dout[(size_t)n * OC + o]); }
        dbias[o] = (floatX)(to_float(dbias[o]) + s);
    }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "matmul_backward", 4, 256);
    const int BT = pg.shape.B * pg.shape.T, C = pg.shape.C, OC = 3 * pg.shape.C;
    Input dout((size_t)BT * OC, 1), inp((size_t)BT * C, 2), weight((size_t)OC * C, 3);
    floatX* d_dinp = device_alloc<floatX>((size_t)BT * C);
    floatX* d_dweight = device_alloc<floatX>((size_t)OC * C);
    floatX* d_dbias = device_alloc<floatX>(OC);
    float* scratch = device_alloc<float>((size_t)BIAS_GRAD_ROW_CHUNKS * OC);
    float* ref_dinp = (float*)callocCheck((size_t)BT * C, sizeof(float));
    float* ref_dweight = (float*)callocCheck((size_t)OC * C, sizeof(float));
    float* ref_dbias = (float*)callocCheck(OC, sizeof(float));
    matmul_backward_cpu(ref_dinp, ref_dweight, ref_dbias, dout.host, inp.host, weight.host, BT, C, OC);
    const float tol = precision_tol(3e-2f, 1e-1f);
    CublasContext ctx;
    cudaStream_t stream = playground_cublas_init(&ctx);
    auto zero = [&]() {
        cudaCheck(cudaMemsetAsync(d_dweight, 0, (size_t)OC * C * sizeof(floatX), stream));
        cudaCheck(cudaMemsetAsync(d_dbias, 0, (size_t)OC * sizeof(floatX), stream));
    };
    if (version_selected(&pg, 1)) {
        auto run = [&]() {
            zero();
            dinp_v1<<<ceil_div((size_t)BT * C, 256), 256, 0, stream>>>(d_dinp, dout.dev, weight.dev, BT, C, OC);
            dweight_v1<<<ceil_div((size_t)OC * C, 256), 256, 0, stream>>>(d_dweight, d_dbias, dout.dev, inp.dev, BT, C, OC);
            cudaCheckLaunch();
        };
        run();
        validate_result(d_dinp, ref_dinp, "version 1 dinp", (size_t)BT * C, tol);
        validate_result(d_dweight, ref_dweight, "version 1 dweight", (size_t)OC * C, tol);
        validate_result(d_dbias, ref_dbias, "version 1 dbias", OC, tol);
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 5, run), timing_note(&pg));
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() {
            zero();
            matmul_backward(&ctx, d_dinp, d_dweight, d_dbias, dout.dev, inp.dev, weight.dev, scratch, BT, C, OC, NULL);
        };
        run();
        validate_result(d_dinp, ref_dinp, "version 2 (llmc) dinp", (size_t)BT * C, tol);
        validate_result(d_dweight, ref_dweight, "version 2 (llmc) dweight", (size_t)OC * C, tol);
        validate_result(d_dbias, ref_dbias, "version 2 (llmc) dbias", OC, tol);
        printf("version 2 (llmc): %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
    }
    playground_cublas_free(&ctx, stream);
    free(ref_dinp); free(ref_dweight); free(ref_dbias);
    cudaCheck(cudaFree(d_dinp));
    cudaCheck(cudaFree(d_dweight)); cudaCheck(cudaFree(d_dbias)); cudaCheck(cudaFree(scratch));
    printf("matmul_backward: all versions match the CPU reference\n");
    return 0;
}
