/*
dev/cuda/attention_forward.cu: causal multi-head self-attention, inp (B, T, 3C) -> out (B, T, C).

    version 1: naive, one thread per (b, t, head): scores, softmax and the weighted sum of v in registers
    version 2: the production path (llmc/cuda/attention.cuh): permute, cuBLAS batched GEMM for q k^T,
               warp-per-row causal softmax, batched GEMM with v, unpermute

usage: ./attention_forward [version] [--quick]   (full: B=4, T=256, GPT-2 124M's C and heads)
*/
#include "common.h"
#include "attention_common.h"
#include "../../llmc/cuda/attention.cuh"

__global__ static void attention_forward_v1(floatX* out, const floatX* inp, int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * NH) { return; }
    int h = idx % NH, t = (idx / NH) % T, b = idx / (NH * T);
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* q = inp + qkv_offset(b, t, 0, h, T, C, HS);
    float maxval = -INFINITY;
    for (int t2 = 0; t2 <= t; t2++) {
        const floatX* k = inp + qkv_offset(b, t2, 1, h, T, C, HS);
        float dot = 0.0f;
        for (int i = 0; i < HS; i++) { dot += to_float(q[i]) * to_float(k[i]); }
        maxval = fmaxf(maxval, dot * scale);
    }
    float sum = 0.0f;
    float acc[128];  // HS <= 128
    for (int i = 0; i < HS; i++) { acc[i] = 0.0f; }
    for (int t2 = 0; t2 <= t; t2++) {
        const floatX* k = inp + qkv_offset(b, t2, 1, h, T, C, HS);
        const floatX* v = inp + qkv_offset(b, t2, 2, h, T, C, HS);
        float dot = 0.0f;
        for (int i = 0; i < HS; i++) { dot += to_float(q[i]) * to_float(k[i]); }
        float p = expf(dot * scale - maxval);
        sum += p;
        for (int i = 0; i < HS; i++) { acc[i] += p * to_float(v[i]); }
    }
    floatX* o = out + head_offset(b, t, h, T, C, HS);
    for (int i = 0; i < HS; i++) { o[i] = (floatX)(acc[i] / sum); }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "attention_forward", 4, 256);
    const int B = pg.shape.B, T = pg.shape.T, C = pg.shape.C, NH = pg.shape.NH;
    if (C / NH > 128) { llmc_die("attention_forward: version 1 keeps a head of at most 128 values in registers, not %d", C / NH); }
    size_t BTC = (size_t)B * T * C;
    float *inp;
    floatX* d_inp = random_input(&inp, 3 * BTC, 1);
    floatX* d_out = device_alloc<floatX>(BTC);
    floatX* d_qkvr = device_alloc<floatX>(3 * BTC);
    floatX* d_att = device_alloc<floatX>((size_t)B * NH * T * T);
    floatX* d_scratch = device_alloc<floatX>(BTC);
    float* ref = (float*)mallocCheck(BTC * sizeof(float));
    float* ref_att = (float*)mallocCheck((size_t)B * NH * T * T * sizeof(float));
    attention_forward_cpu(ref, ref_att, inp, B, T, C, NH);
    const float tol = precision_tol(1e-2f, 5e-2f);
    CublasContext ctx;
    cudaStream_t stream = playground_cublas_init(&ctx);
    if (version_selected(&pg, 1)) {
        auto run = [&]() { attention_forward_v1<<<ceil_div(B * T * NH, 128), 128, 0, stream>>>(d_out, d_inp, B, T, C, NH); cudaCheckLaunch(); };
        check_and_time(&pg, "version 1", run, d_out, ref, BTC, tol, 10);
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() { attention_forward(&ctx, d_out, d_qkvr, d_att, d_inp, d_scratch, B, T, C, NH); };
        run();
        validate_result(d_out, ref, "version 2 (llmc) out", BTC, tol);
        validate_result(d_att, ref_att, "version 2 (llmc) att", (size_t)B * NH * T * T, tol);
        printf("version 2 (llmc): %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
    }
    playground_cublas_free(&ctx, stream);
    free(inp); free(ref); free(ref_att);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_qkvr)); cudaCheck(cudaFree(d_att)); cudaCheck(cudaFree(d_scratch));
    printf("attention_forward: all versions match the CPU reference\n");
    return 0;
}
