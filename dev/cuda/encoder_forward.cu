/*
dev/cuda/encoder_forward.cu: token + position embedding, out (B, T, C) = wte[inp] + wpe[t].

    version 1: one thread per output element
    version 2: the production kernel (llmc/cuda/encoder.cuh): one thread per 128-bit packet

usage: ./encoder_forward [version] [--quick]   (full: B=8, T=1024, GPT-2 124M's C and vocabulary)
*/
#include "common.h"
#include "../../llmc/cuda/encoder.cuh"

static void encoder_forward_cpu(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C) {
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            const float* w = wte + (size_t)inp[b * T + t] * C;
            const float* p = wpe + (size_t)t * C;
            float* o = out + ((size_t)b * T + t) * C;
            for (int c = 0; c < C; c++) { o[c] = w[c] + p[c]; }
        }
    }
}

__global__ static void encoder_forward_v1(floatX* out, const int* inp, const floatX* wte, const floatX* wpe, int B, int T, int C) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)B * T * C) { return; }
    int c = (int)(idx % C);
    int bt = (int)(idx / C);
    int t = bt % T;
    out[idx] = (floatX)(to_float(wte[(size_t)inp[bt] * C + c]) + to_float(wpe[(size_t)t * C + c]));
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "encoder_forward", 8, 1024);
    const int B = pg.shape.B, T = pg.shape.T, C = pg.shape.C, Vp = pg.shape.Vp;
    size_t N = (size_t)B * T * C;
    float *wte, *wpe;
    int* inp = make_random_int((size_t)B * T, pg.shape.V, 3);
    floatX* d_wte = random_input(&wte, (size_t)Vp * C, 1);
    floatX* d_wpe = random_input(&wpe, (size_t)T * C, 2);
    int* d_inp = to_device_int(inp, (size_t)B * T);
    floatX* d_out = device_alloc<floatX>(N);
    float* ref = (float*)mallocCheck(N * sizeof(float));
    encoder_forward_cpu(ref, inp, wte, wpe, B, T, C);
    const float tol = precision_tol(1e-6f, 1e-2f);
    auto v1 = [&]() { encoder_forward_v1<<<ceil_div(N, 256), 256>>>(d_out, d_inp, d_wte, d_wpe, B, T, C); cudaCheckLaunch(); };
    auto v2 = [&]() { encoder_forward(d_out, d_inp, d_wte, d_wpe, B, T, C, 0); };
    if (version_selected(&pg, 1)) { check_and_time(&pg, "version 1", v1, d_out, ref, N, tol, 100); }
    if (version_selected(&pg, 2)) { check_and_time(&pg, "version 2 (llmc)", v2, d_out, ref, N, tol, 100); }
    free(wte); free(wpe); free(inp); free(ref);
    cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_wpe)); cudaCheck(cudaFree(d_inp)); cudaCheck(cudaFree(d_out));
    printf("encoder_forward: all versions match the CPU reference\n");
    return 0;
}
