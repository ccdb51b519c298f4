/*
llmc/cuda/fused_classifier.cuh: softmax + cross-entropy + its gradient in one pass over the logits, and the
logit softcap in front of it (nanochat).

    fused_classifier(logits, losses, targets, dloss, BT, V, Vp, softcap, write_dlogits)
        logits (BT, Vp): on return (write_dlogits) the gradient of the loss w.r.t. the logits,
        dloss * (softmax - onehot(target)), written in place; the pad columns V..Vp-1 get 0
        losses (BT): -log softmax(logits)[target] in fp32
        targets (BT): ids in [0, V), or -1 for a position that is not supervised (a chat shard's masked token): its
        loss is 0 and its gradient row all zeros, so the mean over BT counts it as 0 (the row's softmax is skipped)
        softcap > 0: the logits are already capped (softcap_forward) and the gradient written is the one of the
        logits before the cap, dloss * (softmax - onehot) * (1 - (y / cap)^2) with y the capped logit
    softcap_forward(logits, BT, V, Vp, cap)   in place, y = cap * tanh(z / cap) on the V used columns of each row

The probabilities are never stored: each block finds its row's max and sum with an online
softmax (running max, rescaled running sum), then computes log-sum-exp once and writes each
gradient directly. Numerically stable (max subtracted before exp); reductions in a fixed order.
The cap's derivative needs only the capped logit, which the classifier reads before it overwrites it with the
gradient: no copy of the logits is kept.
*/
#ifndef LLMC_FUSED_CLASSIFIER_CUH
#define LLMC_FUSED_CLASSIFIER_CUH

#include <math.h>
#include "../layer_math.h"

// ----------------------------------------------------------------------------
// host half (plain C, tested on the CPU): the online softmax's merge rule, the softcap

// merges two partial softmax states (running max m, sum of exp(x - m)); (-inf, 0) is the empty state.
// Merging the states of any split of a row, in any order, gives the row's max and sum of exp(x - max).
static inline HD void online_softmax_merge(float* m, float* s, float m2, float s2) {
    float M = fmaxf(*m, m2);
    if (M == -INFINITY) { return; }
    float a = *m == -INFINITY ? 0.0f : *s * expf(*m - M);
    float b = m2 == -INFINITY ? 0.0f : s2 * expf(m2 - M);
    *m = M;
    *s = a + b;
}

// the logit softcap: y = cap * tanh(z / cap), and dy/dz from y alone, 1 - (y / cap)^2 = 1 - tanh^2
static inline HD float softcap_value(float z, float cap) { return cap * tanhf(z / cap); }

static inline HD float softcap_grad(float y, float cap) {
    float t = y / cap;
    return 1.0f - t * t;
}

// ----------------------------------------------------------------------------
// device half

#ifdef __CUDACC__
#include "cuda_common.cuh"

// one block per row; blockDim.x a multiple of 32 (at most 1024)
__global__ static void fused_classifier_kernel(floatX* logits, float* losses, const int* targets, float dloss,
                                               int V, int Vp, float softcap, int write_dlogits) {
    __shared__ float shared_m[WARP_SIZE];
    __shared__ float shared_s[WARP_SIZE];
    __shared__ float shared_target_logit;
    size_t row = blockIdx.x;
    floatX* x = logits + row * Vp;
    int target = targets[row];
    if (target < 0) {  // -1: not supervised; the whole block leaves together, before any barrier
        if (threadIdx.x == 0) { losses[row] = 0.0f; }
        if (write_dlogits) {
            for (int i = threadIdx.x; i < Vp; i += blockDim.x) { x[i] = (floatX)0.0f; }
        }
        return;
    }
    if (threadIdx.x == 0) { shared_target_logit = to_float(x[target]); }

    float m = -INFINITY, s = 0.0f;
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = to_float(x[i]);
        online_softmax_merge(&m, &s, v, 1.0f);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
        float m2 = __shfl_xor_sync(0xffffffff, m, offset);
        float s2 = __shfl_xor_sync(0xffffffff, s, offset);
        online_softmax_merge(&m, &s, m2, s2);
    }
    int lane = threadIdx.x % WARP_SIZE, warp = threadIdx.x / WARP_SIZE, num_warps = blockDim.x / WARP_SIZE;
    if (lane == 0) { shared_m[warp] = m; shared_s[warp] = s; }
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = -INFINITY, S = 0.0f;
        for (int w = 0; w < num_warps; w++) { online_softmax_merge(&M, &S, shared_m[w], shared_s[w]); }
        shared_m[0] = M;
        shared_s[0] = S;
    }
    __syncthreads();
    float lse = shared_m[0] + logf(shared_s[0]);
    if (threadIdx.x == 0) { losses[row] = lse - shared_target_logit; }
    if (!write_dlogits) { return; }
    for (int i = threadIdx.x; i < Vp; i += blockDim.x) {
        float g = 0.0f;
        if (i < V) {
            float y = to_float(x[i]);
            float p = expf(y - lse);
            g = (p - (i == target ? 1.0f : 0.0f)) * dloss;
            if (softcap > 0.0f) { g *= softcap_grad(y, softcap); }
        }
        x[i] = (floatX)g;
    }
}

// targets in [0, V) or -1 (not supervised): the data loader checks every token id against the vocabulary, and
// gpu_model_upload_batch the targets; softcap 0: none
static inline void fused_classifier(floatX* logits, float* losses, const int* targets, float dloss,
                                    int BT, int V, int Vp, float softcap, int write_dlogits, cudaStream_t stream) {
    const int block_size = 1024;
    fused_classifier_kernel<<<BT, block_size, 0, stream>>>(logits, losses, targets, dloss, V, Vp, softcap, write_dlogits);
    cudaCheckLaunch();
}

// logits (BT, Vp): the V used columns of each row capped in place; one thread per logit
__global__ static void softcap_forward_kernel(floatX* logits, int BT, int V, int Vp, float cap) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * V) { return; }
    floatX* x = logits + (idx / V) * Vp + idx % V;
    *x = (floatX)softcap_value(to_float(*x), cap);
}

static inline void softcap_forward(floatX* logits, int BT, int V, int Vp, float cap, cudaStream_t stream) {
    const int block_size = 256;
    softcap_forward_kernel<<<ceil_div((size_t)BT * V, block_size), block_size, 0, stream>>>(logits, BT, V, Vp, cap);
    cudaCheckLaunch();
}

#endif // __CUDACC__

#endif // LLMC_FUSED_CLASSIFIER_CUH
