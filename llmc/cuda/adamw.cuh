/*
llmc/cuda/adamw.cuh: the AdamW update on the GPU.

    adamw_update(params, master, grads, m, v, global_offset, n, local_offset, weight_decay, grad_scale,
                 scalars, seed, stream)
        updates params[global_offset + i], i < n, from grads[global_offset + i] * grad_scale;
        m, v and master (fp32 master weights, or NULL) are indexed by local_offset + i (the rank's shard)

The per-element rule is llmc/adamw.h's adamw_update_one (PyTorch AdamW, the same function the CPU
trainer calls). bf16 parameters are written from the fp32 result with stochastic rounding whose
random bits are a hash of (seed, global index): identical whatever the ZeRO sharding, and
reproducible on resume. The trainer calls this once per parameter tensor (weight decay only on
the 2-D weights).
*/
#ifndef LLMC_ADAMW_CUH
#define LLMC_ADAMW_CUH

#include "../adamw.h"
#include "cuda_common.cuh"

__global__ static void adamw_kernel(floatX* params, float* master, const floatX* grads, float* m, float* v,
                                    size_t global_offset, size_t n, size_t local_offset,
                                    float weight_decay, float grad_scale, AdamWScalars scalars, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    size_t gi = global_offset + i;
    size_t li = local_offset + i;
    float grad = to_float(grads[gi]) * grad_scale;
    float param = master != NULL ? master[li] : to_float(params[gi]);
    float mi = m[li], vi = v[li];
    float updated = adamw_update_one(param, grad, &mi, &vi, weight_decay, scalars);
    m[li] = mi;
    v[li] = vi;
    if (master != NULL) { master[li] = updated; }
    stochastic_round(updated, &params[gi], seed, (uint32_t)gi);
}

static inline void adamw_update(floatX* params, float* master, const floatX* grads, float* m, float* v,
                                size_t global_offset, size_t n, size_t local_offset, float weight_decay,
                                float grad_scale, AdamWScalars scalars, uint32_t seed, cudaStream_t stream) {
    if (n == 0) { return; }
    const int block_size = 512;
    adamw_kernel<<<ceil_div(n, block_size), block_size, 0, stream>>>(params, master, grads, m, v, global_offset, n,
                                                                     local_offset, weight_decay, grad_scale, scalars, seed);
    cudaCheckLaunch();
}

// params (floatX) <- master (fp32), with the same stochastic rounding as the update: rebuilds the
// parameters exactly on resume, and initialises master weights from params (fp32 -> floatX is exact then)
__global__ static void copy_master_to_params_kernel(floatX* params, const float* master, size_t global_offset, size_t n,
                                                    size_t local_offset, uint32_t seed) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    stochastic_round(master[local_offset + i], &params[global_offset + i], seed, (uint32_t)(global_offset + i));
}

__global__ static void params_to_master_kernel(float* master, const floatX* params, size_t global_offset, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) { return; }
    master[i] = to_float(params[global_offset + i]);
}

static inline void adamw_init_master(float* master, const floatX* params, size_t global_offset, size_t n, cudaStream_t stream) {
    if (n == 0) { return; }
    params_to_master_kernel<<<ceil_div(n, 512), 512, 0, stream>>>(master, params, global_offset, n);
    cudaCheckLaunch();
}

#endif // LLMC_ADAMW_CUH
