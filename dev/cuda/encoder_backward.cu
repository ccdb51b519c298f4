/*
dev/cuda/encoder_backward.cu: gradients of the embedding tables, dwte[inp[b,t]] += dout[b,t], dwpe[t] += sum_b dout[b,t].

    version 1: one thread per (b, t, c) with fp32 atomicAdd (fast to write, not deterministic)
    version 2: the production kernels (llmc/cuda/encoder.cuh): host-side grouping of the positions of each
               token, one block per token summing in a fixed order; deterministic, no atomics

usage: ./encoder_backward [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C and vocabulary)
*/
#include "common.h"
#include "../../llmc/cuda/encoder.cuh"

static void encoder_backward_cpu(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float* d = dout + ((size_t)b * T + t) * C;
            float* w = dwte + (size_t)inp[b * T + t] * C;
            float* p = dwpe + (size_t)t * C;
            for (int c = 0; c < C; c++) { w[c] += d[c]; p[c] += d[c]; }
        }
    }
}

__global__ static void encoder_backward_v1(float* dwte, float* dwpe, const floatX* dout, const int* inp, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) { return; }
    int c = (int)(idx % C);
    int bt = (int)(idx / C);
    float d = to_float(dout[idx]);
    atomicAdd(&dwte[(size_t)inp[bt] * C + c], d);
    atomicAdd(&dwpe[(size_t)(bt % T) * C + c], d);
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "encoder_backward", 8, 1024);
    const int B = pg.shape.B, T = pg.shape.T, C = pg.shape.C, V = pg.shape.Vp;  // dwte has the padded vocabulary's rows
    size_t N = (size_t)B * T * C;
    float *dout;
    const int distinct = pg.quick ? 64 : 1000;  // far fewer token ids than positions: each repeats ~8 times
    int* inp = make_random_int((size_t)B * T, distinct, 2);
    floatX* d_dout = random_input(&dout, N, 1);
    int* d_inp = to_device_int(inp, (size_t)B * T);
    float* ref_wte = (float*)callocCheck((size_t)V * C, sizeof(float));
    float* ref_wpe = (float*)callocCheck((size_t)T * C, sizeof(float));
    encoder_backward_cpu(ref_wte, ref_wpe, dout, inp, B, T, C);
    if (version_selected(&pg, 1)) {
        float* d_wte = device_alloc<float>((size_t)V * C);
        float* d_wpe = device_alloc<float>((size_t)T * C);
        auto run = [&]() {
            cudaCheck(cudaMemset(d_wte, 0, (size_t)V * C * sizeof(float)));
            cudaCheck(cudaMemset(d_wpe, 0, (size_t)T * C * sizeof(float)));
            encoder_backward_v1<<<ceil_div(N, 256), 256>>>(d_wte, d_wpe, d_dout, d_inp, B, T, C);
            cudaCheckLaunch();
        };
        run();
        validate_result(d_wte, ref_wte, "version 1 dwte", (size_t)V * C, 1e-4f);
        validate_result(d_wpe, ref_wpe, "version 1 dwpe", (size_t)T * C, 1e-4f);
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 20, run), timing_note(&pg));
        cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_wpe));
    }
    if (version_selected(&pg, 2)) {
        floatX* d_wte = device_alloc<floatX>((size_t)V * C);
        floatX* d_wpe = device_alloc<floatX>((size_t)T * C);
        TokenGroups groups;
        token_groups_init(&groups, B * T, V);
        TokenGroupsDevice dgroups;
        token_groups_device_init(&dgroups, B * T);
        auto run = [&]() {
            cudaCheck(cudaMemset(d_wte, 0, (size_t)V * C * sizeof(floatX)));
            cudaCheck(cudaMemset(d_wpe, 0, (size_t)T * C * sizeof(floatX)));
            token_groups_build(&groups, inp);
            encoder_backward(d_wte, d_wpe, d_dout, &groups, &dgroups, B, T, C, 0);
        };
        run();
        const float tol = precision_tol(1e-4f, 3e-2f);
        validate_result(d_wte, ref_wte, "version 2 (llmc) dwte", (size_t)V * C, tol);
        validate_result(d_wpe, ref_wpe, "version 2 (llmc) dwpe", (size_t)T * C, tol);
        printf("version 2 (llmc): %.3f ms (including the host grouping)%s\n", benchmark_kernel(&pg, 20, run), timing_note(&pg));
        token_groups_free(&groups);
        token_groups_device_free(&dgroups);
        cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_wpe));
    }
    free(dout); free(inp); free(ref_wte); free(ref_wpe);
    cudaCheck(cudaFree(d_dout)); cudaCheck(cudaFree(d_inp));
    printf("encoder_backward: all versions match the CPU reference\n");
    return 0;
}
