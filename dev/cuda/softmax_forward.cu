/*
dev/cuda/softmax_forward.cu: the causal softmax of attention, in place on (B*NH*T) rows of T scores:
row t keeps columns 0..t, p = exp(scale * x - max) / sum, zeros above the diagonal.

    version 1: one thread per row
    version 2: the production kernel (llmc/cuda/attention.cuh softmax_causal_forward_kernel): one warp per row

usage: ./softmax_forward [version] [--quick]   (full: B=4, T=1024, GPT-2 124M's 12 heads of size 64)
*/
#include "common.h"
#include "../../llmc/cuda/attention.cuh"

static void softmax_causal_cpu(float* out, const float* x, float scale, int rows, int T) {
    for (int r = 0; r < rows; r++) {
        int t = r % T;
        const float* in = x + (size_t)r * T;
        float* o = out + (size_t)r * T;
        float maxval = -INFINITY;
        for (int j = 0; j <= t; j++) { maxval = fmaxf(maxval, scale * in[j]); }
        double sum = 0.0;
        for (int j = 0; j <= t; j++) { sum += exp((double)(scale * in[j] - maxval)); }
        for (int j = 0; j < T; j++) { o[j] = j <= t ? (float)(exp((double)(scale * in[j] - maxval)) / sum) : 0.0f; }
    }
}

__global__ static void softmax_causal_v1(floatX* x, float scale, int rows, int T) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) { return; }
    int t = r % T;
    floatX* row = x + (size_t)r * T;
    float maxval = -INFINITY, sum = 0.0f;
    for (int j = 0; j <= t; j++) { maxval = fmaxf(maxval, scale * to_float(row[j])); }
    for (int j = 0; j <= t; j++) { sum += expf(scale * to_float(row[j]) - maxval); }
    for (int j = 0; j < T; j++) { row[j] = (floatX)(j <= t ? expf(scale * to_float(row[j]) - maxval) / sum : 0.0f); }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "softmax_forward", 4, 1024);
    const int T = pg.shape.T, rows = pg.shape.B * pg.shape.NH * T;
    const float scale = 1.0f / sqrtf((float)(pg.shape.C / pg.shape.NH));
    size_t n = (size_t)rows * T;
    float* x = make_random_float(n, 1);
    for (size_t i = 0; i < n; i++) { x[i] *= 20.0f; }  // large scores: the max subtraction matters
    floatX* d_x = to_device(x, n);
    floatX* d_work = device_alloc<floatX>(n);
    float* ref = (float*)mallocCheck(n * sizeof(float));
    softmax_causal_cpu(ref, x, scale, rows, T);
    const float tol = precision_tol(1e-5f, 1e-2f);
    // in place: every run starts from a fresh copy of the scores
    auto reset = [&]() { cudaCheck(cudaMemcpy(d_work, d_x, n * sizeof(floatX), cudaMemcpyDeviceToDevice)); };
    auto v1 = [&]() { reset(); softmax_causal_v1<<<ceil_div(rows, 256), 256>>>(d_work, scale, rows, T); cudaCheckLaunch(); };
    auto v2 = [&]() {
        reset();
        softmax_causal_forward_kernel<<<ceil_div(rows, 8), 256>>>(d_work, scale, rows, T);
        cudaCheckLaunch();
    };
    const char* note = " (including a copy)";
    if (version_selected(&pg, 1)) { check_and_time(&pg, "version 1", v1, d_work, ref, n, tol, 10, note); }
    if (version_selected(&pg, 2)) { check_and_time(&pg, "version 2 (llmc)", v2, d_work, ref, n, tol, 10, note); }
    free(x); free(ref);
    cudaCheck(cudaFree(d_x)); cudaCheck(cudaFree(d_work));
    printf("softmax_forward: all versions match the CPU reference\n");
    return 0;
}
