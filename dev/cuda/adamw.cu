/*
dev/cuda/adamw.cu: one AdamW step over a parameter tensor (fp32 master weights, floatX params).

    version 1: the update written out inline (PyTorch AdamW formula), params rounded to nearest
    version 2: the production kernel (llmc/cuda/adamw.cuh): llmc/adamw.h's adamw_update_one, the CPU
               trainer's function, and stochastic rounding of the parameters in BF16 builds
The CPU reference calls adamw_update_one in fp32 on the host.

usage: ./adamw [version] [--quick]   (full: 2^24 parameters; --quick: 100003, a partial last block)
*/
#include "common.h"
#include "../../llmc/cuda/adamw.cuh"

__global__ static void adamw_v1(floatX* params, float* master, const floatX* grads, float* m, float* v, size_t n,
                                float lr, float beta1, float beta2, float eps, float wd, int t) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    float g = to_float(grads[i]);
    float p = master[i] * (1.0f - lr * wd);
    float mi = beta1 * m[i] + (1.0f - beta1) * g;
    float vi = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float mhat = mi / (1.0f - powf(beta1, (float)t));
    float vhat = vi / (1.0f - powf(beta2, (float)t));
    p -= lr * mhat / (sqrtf(vhat) + eps);
    master[i] = p;
    params[i] = (floatX)p;
}

int main(int argc, char** argv) {
    Playground pg = playground_init(argc, argv, 2);
    const size_t n = pg.quick ? 100003 : (size_t)1 << 24;
    printf("adamw: n=%zu, %s, %s\n", n, PRECISION_NAME, playground_mode(&pg));
    const float lr = 1e-3f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    const int t = 3;
    float* params = make_random_float(n, 1);
    float *grads;
    float* m0 = make_random_float(n, 3);
    float* v0 = make_random_float(n, 4);
    for (size_t i = 0; i < n; i++) { m0[i] *= 0.1f; v0[i] = v0[i] * v0[i] * 0.01f; }
    floatX* d_params = to_device(params, n);    // params (and the reference's copy) rounded to floatX
    floatX* d_grads = random_input(&grads, n, 2);
    float* ref = (float*)mallocCheck(n * sizeof(float));
    float* ref_m = (float*)mallocCheck(n * sizeof(float));
    float* ref_v = (float*)mallocCheck(n * sizeof(float));
    AdamWScalars s = adamw_step_scalars(lr, beta1, beta2, eps, t);
    for (size_t i = 0; i < n; i++) {
        ref_m[i] = m0[i];
        ref_v[i] = v0[i];
        ref[i] = adamw_update_one(params[i], grads[i], &ref_m[i], &ref_v[i], wd, s);
    }
    float* d_master = device_alloc<float>(n);
    float* d_m = device_alloc<float>(n);
    float* d_v = device_alloc<float>(n);
    auto reset = [&]() {
        cudaCheck(cudaMemcpy(d_master, params, n * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_m, m0, n * sizeof(float), cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(d_v, v0, n * sizeof(float), cudaMemcpyHostToDevice));
    };
    if (version_selected(&pg, 1)) {
        auto run = [&]() { adamw_v1<<<ceil_div(n, 512), 512>>>(d_params, d_master, d_grads, d_m, d_v, n, lr, beta1, beta2, eps, wd, t); cudaCheckLaunch(); };
        reset();
        run();
        validate_result(d_master, ref, "version 1 master", n, 1e-5f);
        validate_result(d_m, ref_m, "version 1 m", n, 1e-6f);
        validate_result(d_v, ref_v, "version 1 v", n, 1e-6f);
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 20, run), timing_note(&pg));
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() { adamw_update(d_params, d_master, d_grads, d_m, d_v, 0, n, 0, wd, 1.0f, s, 1234u, 0); };
        reset();
        run();
        validate_result(d_master, ref, "version 2 (llmc) master", n, 1e-6f);
        validate_result(d_params, ref, "version 2 (llmc) params", n, precision_tol(1e-6f, 1e-2f));
        validate_result(d_m, ref_m, "version 2 (llmc) m", n, 1e-6f);
        validate_result(d_v, ref_v, "version 2 (llmc) v", n, 1e-6f);
        printf("version 2 (llmc): %.3f ms%s\n", benchmark_kernel(&pg, 20, run), timing_note(&pg));
    }
    free(params); free(grads); free(m0); free(v0); free(ref); free(ref_m); free(ref_v);
    cudaCheck(cudaFree(d_params)); cudaCheck(cudaFree(d_grads)); cudaCheck(cudaFree(d_master));
    cudaCheck(cudaFree(d_m)); cudaCheck(cudaFree(d_v));
    printf("adamw: all versions match the CPU reference\n");
    return 0;
}
