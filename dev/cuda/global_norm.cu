/*
dev/cuda/global_norm.cu: the squared L2 norm of the gradient vector.

    version 1: grid-stride sums with one fp32 atomicAdd per block (order varies run to run)
    version 2: the production kernels (llmc/cuda/global_norm.cuh): a fixed number of blocks, per-block
               sums written out, one block adds them in order; bit-identical run to run

usage: ./global_norm [version] [--quick]   (full: GPT-2 124M's 124475904 parameters)
*/
#include "common.h"
#include "../../llmc/cuda/global_norm.cuh"

// the production kernel's per-block sums (global_norm_block_sum), added up with atomics instead
__global__ static void global_norm_v1(float* out, const floatX* grads, size_t n) {
    float block_sum = global_norm_block_sum(grads, n);
    if (threadIdx.x == 0) { atomicAdd(out, block_sum); }
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "global_norm", 8, 1024);
    GPT2Config model = shape_model(&pg.shape);
    const size_t n = gpt2_num_parameters(&model);  // the whole gradient vector (GPT-2 124M: 124475904)
    float* grads = make_random_float(n, 1);
    for (size_t i = 0; i < n; i++) { grads[i] *= 1e-3f; }
    floatX* d_grads = to_device(grads, n);
    double ref = 0.0;
    for (size_t i = 0; i < n; i++) { ref += (double)grads[i] * grads[i]; }
    float ref_f = (float)ref;
    float* d_out = device_alloc<float>(1 + GLOBAL_NORM_BLOCKS);
    if (version_selected(&pg, 1)) {
        auto run = [&]() {
            cudaCheck(cudaMemset(d_out, 0, sizeof(float)));
            global_norm_v1<<<2 * GLOBAL_NORM_BLOCKS, 512>>>(d_out, d_grads, n);
            cudaCheckLaunch();
        };
        check_and_time(&pg, "version 1", run, d_out, &ref_f, 1, 1e-4f, 20);
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() { global_norm_squared(d_out, d_out + 1, d_grads, n, 0); };
        run();
        validate_result(d_out, &ref_f, "version 2 (llmc)", 1, 1e-4f);
        float first = 0.0f, again = 0.0f;
        cudaCheck(cudaMemcpy(&first, d_out, sizeof(float), cudaMemcpyDeviceToHost));
        run();
        cudaCheck(cudaMemcpy(&again, d_out, sizeof(float), cudaMemcpyDeviceToHost));
        if (memcmp(&first, &again, sizeof(float)) != 0) { printf("FAIL: version 2 is not deterministic\n"); return 1; }
        printf("version 2 (llmc): %.3f ms, bit-identical on a second run%s\n", benchmark_kernel(&pg, 20, run), timing_note(&pg));
    }
    free(grads);
    cudaCheck(cudaFree(d_grads)); cudaCheck(cudaFree(d_out));
    printf("global_norm: all versions match the CPU reference\n");
    return 0;
}
