/*
dev/cuda/attention_backward.cu: gradient of causal self-attention, dout (B, T, C) -> dinp (B, T, 3C).

    version 1: the production path (llmc/attention.cuh): unpermute, batched GEMMs for datt and dv,
               warp-per-row causal softmax backward, batched GEMMs for dq and dk, permute back
(A naive single-kernel version is not written yet; the CPU reference checks the production path.)
*/
#include "common.h"
#include "attention_common.h"
#include "../../llmc/attention.cuh"

int main(int argc, char** argv) {
    const int B = 4, T = 256, C = 768, NH = 12;
    size_t BTC = (size_t)B * T * C, BNTT = (size_t)B * NH * T * T;
    float* inp = make_random_float(3 * BTC, 1);
    float* dout = make_random_float(BTC, 2);
    floatX* d_inp = to_device(inp, 3 * BTC);
    floatX* d_dout = to_device(dout, BTC);
    float* ref_out = (float*)mallocCheck(BTC * sizeof(float));
    float* ref_att = (float*)mallocCheck(BNTT * sizeof(float));
    float* ref_dinp = (float*)callocCheck(3 * BTC, sizeof(float));
    attention_forward_cpu(ref_out, ref_att, inp, B, T, C, NH);
    attention_backward_cpu(ref_dinp, dout, inp, ref_att, B, T, C, NH);
    floatX* d_out = (floatX*)cudaMallocCheck(BTC * sizeof(floatX));
    floatX* d_qkvr = (floatX*)cudaMallocCheck(3 * BTC * sizeof(floatX));
    floatX* d_att = (floatX*)cudaMallocCheck(BNTT * sizeof(floatX));
    floatX* d_scratch = (floatX*)cudaMallocCheck(BTC * sizeof(floatX));
    floatX* d_dinp = (floatX*)cudaMallocCheck(3 * BTC * sizeof(floatX));
    floatX* d_dqkvr = (floatX*)cudaMallocCheck(3 * BTC * sizeof(floatX));
    floatX* d_datt = (floatX*)cudaMallocCheck(BNTT * sizeof(floatX));
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    CublasContext ctx;
    cublas_context_init(&ctx, stream);
    attention_forward(&ctx, d_out, d_qkvr, d_att, d_inp, d_scratch, B, T, C, NH);
    if (version_selected(argc, argv, 1)) {
        auto run = [&]() { attention_backward(&ctx, d_dinp, d_dqkvr, d_datt, d_scratch, d_dout, d_qkvr, d_att, B, T, C, NH); };
        run();
        validate_result(d_dinp, ref_dinp, "version 1 (llmc) dinp", 3 * BTC, precision_tol(1e-2f, 1e-1f));
        printf("version 1 (llmc): %.3f ms\n", benchmark_kernel(100, run));
    }
    cublas_context_free(&ctx);
    cudaCheck(cudaStreamDestroy(stream));
    free(inp); free(dout); free(ref_out); free(ref_att); free(ref_dinp);
    cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_qkvr));
    cudaCheck(cudaFree(d_att)); cudaCheck(cudaFree(d_scratch)); cudaCheck(cudaFree(d_dinp)); cudaCheck(cudaFree(d_dqkvr));
    cudaCheck(cudaFree(d_datt));
    printf("attention_backward: all versions match the CPU reference\n");
    return 0;
}
