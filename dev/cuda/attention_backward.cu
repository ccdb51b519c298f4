/*
dev/cuda/attention_backward.cu: gradient of causal self-attention, dout (B, T, C) -> dinp (B, T, 3C).

    version 1: naive, one thread per (b, t, head): recomputes its attention row, writes dq and adds
               into dk, dv with fp32 atomics (not deterministic)
    version 2: the production path (llmc/cuda/attention.cuh): unpermute, batched GEMMs for datt and dv,
               warp-per-row causal softmax backward, batched GEMMs for dq and dk, permute back

usage: ./attention_backward [version] [--quick]   (full: B=4, T=256, GPT-2 124M's C and heads)
*/
#include "common.h"
#include "attention_common.h"
#include "../../llmc/cuda/attention.cuh"

// dinp (B, T, 3C) fp32, zeroed by the caller; att (B, NH, T, T) from the forward pass
__global__ static void attention_backward_v1(float* dinp, const floatX* dout, const floatX* inp, const floatX* att,
                                             int B, int T, int C, int NH) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= B * T * NH) { return; }
    int h = idx % NH, t = (idx / NH) % T, b = idx / (NH * T);
    int HS = C / NH;
    float scale = 1.0f / sqrtf((float)HS);
    const floatX* a = att + att_offset(b, h, t, NH, T);
    const floatX* d = dout + head_offset(b, t, h, T, C, HS);
    const floatX* q = inp + qkv_offset(b, t, 0, h, T, C, HS);
    float* dq = dinp + qkv_offset(b, t, 0, h, T, C, HS);
    float dot = 0.0f;
    for (int t2 = 0; t2 <= t; t2++) { dot += to_float(a[t2]) * attention_datt(d, inp, b, t2, h, T, C, HS); }
    for (int t2 = 0; t2 <= t; t2++) {
        const floatX* k = inp + qkv_offset(b, t2, 1, h, T, C, HS);
        float* dk = dinp + qkv_offset(b, t2, 1, h, T, C, HS);
        float* dv = dinp + qkv_offset(b, t2, 2, h, T, C, HS);
        float datt = attention_datt(d, inp, b, t2, h, T, C, HS);
        float p = to_float(a[t2]);
        float dpre = p * (datt - dot) * scale;
        for (int i = 0; i < HS; i++) {
            dq[i] += dpre * to_float(k[i]);
            atomicAdd(&dk[i], dpre * to_float(q[i]));
            atomicAdd(&dv[i], p * to_float(d[i]));
        }
    }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "attention_backward", 4, 256);
    const int B = pg.shape.B, T = pg.shape.T, C = pg.shape.C, NH = pg.shape.NH;
    size_t BTC = (size_t)B * T * C, BNTT = (size_t)B * NH * T * T;
    float *inp, *dout;
    floatX* d_inp = random_input(&inp, 3 * BTC, 1);
    floatX* d_dout = random_input(&dout, BTC, 2);
    float* ref_out = (float*)mallocCheck(BTC * sizeof(float));
    float* ref_att = (float*)mallocCheck(BNTT * sizeof(float));
    float* ref_dinp = (float*)callocCheck(3 * BTC, sizeof(float));
    attention_forward_cpu(ref_out, ref_att, inp, B, T, C, NH);
    attention_backward_cpu(ref_dinp, dout, inp, ref_att, B, T, C, NH);
    floatX* d_out = device_alloc<floatX>(BTC);
    floatX* d_qkvr = device_alloc<floatX>(3 * BTC);
    floatX* d_att = device_alloc<floatX>(BNTT);
    floatX* d_scratch = device_alloc<floatX>(BTC);
    floatX* d_dinp = device_alloc<floatX>(3 * BTC);
    floatX* d_dqkvr = device_alloc<floatX>(3 * BTC);
    floatX* d_datt = device_alloc<floatX>(BNTT);
    CublasContext ctx;
    cudaStream_t stream = playground_cublas_init(&ctx);
    attention_forward(&ctx, d_out, d_qkvr, d_att, d_inp, d_scratch, B, T, C, NH);
    if (version_selected(&pg, 1)) {
        float* d_dinp_f = device_alloc<float>(3 * BTC);
        auto run = [&]() {
            cudaCheck(cudaMemsetAsync(d_dinp_f, 0, 3 * BTC * sizeof(float), stream));
            attention_backward_v1<<<ceil_div(B * T * NH, 128), 128, 0, stream>>>(d_dinp_f, d_dout, d_inp, d_att, B, T, C, NH);
            cudaCheckLaunch();
        };
        run();
        validate_result(d_dinp_f, ref_dinp, "version 1 dinp", 3 * BTC, precision_tol(1e-2f, 1e-1f));
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 10, run), timing_note(&pg));
        cudaCheck(cudaFree(d_dinp_f));
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() { attention_backward(&ctx, d_dinp, d_dqkvr, d_datt, d_scratch, d_dout, d_qkvr, d_att, B, T, C, NH); };
        run();
        validate_result(d_dinp, ref_dinp, "version 2 (llmc) dinp", 3 * BTC, precision_tol(1e-2f, 1e-1f));
        printf("version 2 (llmc): %.3f ms%s\n", benchmark_kernel(&pg, 100, run), timing_note(&pg));
    }
    playground_cublas_free(&ctx, stream);
    free(inp); free(dout); free(ref_out); free(ref_att); free(ref_dinp);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_qkvr));
    cudaCheck(cudaFree(d_att)); cudaCheck(cudaFree(d_scratch)); cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_dqkvr));
    cudaCheck(cudaFree(d_datt));
    printf("attention_backward: all versions match the CPU reference\n");
    return 0;
}
