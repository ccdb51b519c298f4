/*
llmc/cuda/repeat_kv.cuh: grouped-query attention's key/value repetition, the GPU side of
llmc/cpu/repeat_kv_cpu.h's repeat_kv_forward / repeat_kv_backward. It turns the qkv projection's
(B,T,QKV) output, QKV = (NH + 2 NKV) HS, into the packed (B,T,3C) q|k|v layout (C here the attention width NH HS) that the attention
kernels (attention.cuh) take, so they serve GQA unchanged.

    repeat_kv_forward(out, inp, B, T, NH, NKV, HS)     out (B,T,3C) = [q | k repeated | v repeated]:
        query head h reads key/value head h / (NH/NKV), as transformers' repeat_kv
    repeat_kv_backward(dinp, dout, B, T, NH, NKV, HS)  dinp (B,T,QKV) = the gradient: dq copied, each
        key/value head the sum of its NH/NKV copies' gradients in head order (the CPU's order; it
        writes dinp, where the CPU adds into a zeroed buffer)

One thread per 128-bit packet of the output; HS must be a multiple of the packet (8 in BF16, 4 in FP32).
*/
#ifndef LLMC_REPEAT_KV_CUH
#define LLMC_REPEAT_KV_CUH

#include "cuda_common.cuh"

// which of the (B,T,QKV) input's columns the packed column j of a (B,T,3C) row reads
__device__ static inline int repeat_kv_source(int j, int NH, int NKV, int HS) {
    int C = NH * HS;
    int part = j / C;          // 0 q, 1 k, 2 v
    int h = (j % C) / HS;      // query head
    int d = j % HS;
    if (part == 0) { return j; }
    int kv = h / (NH / NKV);   // the key/value head of query head h's group
    return C + (part - 1) * NKV * HS + kv * HS + d;
}

// out (B,T,3C), inp (B,T,QKV)
__global__ static void repeat_kv_forward_kernel(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HS) {
    size_t C3 = 3 * (size_t)NH * HS, QKV = (size_t)(NH + 2 * NKV) * HS;
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)B * T * C3) { return; }
    size_t bt = idx / C3;
    int j = (int)(idx % C3);
    store128(out + idx, load128(inp + bt * QKV + repeat_kv_source(j, NH, NKV, HS)));
}

// dinp (B,T,QKV), dout (B,T,3C); one thread per packet of dinp
__global__ static void repeat_kv_backward_kernel(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HS) {
    size_t C = (size_t)NH * HS, QKV = (size_t)(NH + 2 * NKV) * HS;
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    if (idx >= (size_t)B * T * QKV) { return; }
    size_t bt = idx / QKV;
    int j = (int)(idx % QKV);
    const floatX* g = dout + bt * 3 * C;
    if ((size_t)j < C) {
        store128(dinp + idx, load128(g + j));
        return;
    }
    int part = (size_t)j < C + (size_t)NKV * HS ? 1 : 2;  // k or v
    int rel = j - (int)C - (part - 1) * NKV * HS;
    int kv = rel / HS, d = rel % HS;
    int rep = NH / NKV;
    float acc[x128::size];
    for (int k = 0; k < x128::size; k++) { acc[k] = 0.0f; }
    for (int r = 0; r < rep; r++) {
        x128 p = load128(g + (size_t)part * C + (size_t)(kv * rep + r) * HS + d);
        for (int k = 0; k < x128::size; k++) { acc[k] += to_float(p[k]); }
    }
    x128 o;
    for (int k = 0; k < x128::size; k++) { o[k] = (floatX)acc[k]; }
    store128(dinp + idx, o);
}

// The activation-table rows (llmc/cuda/gpu_trainer.cuh GPU_ACT_*: type, name, per_layer, per_token, has_grad; sizes
// in AW = NH HS the attention width, NH, T) of grouped-query attention through repeat_kv and attention.cuh, the
// trainers' path without cuDNN: per layer what attention_backward reads, then the repeated q|k|v and
// attention_backward's work buffers (one slice each)
#define REPEAT_KV_ATTENTION_LAYER_ACTIVATIONS(X) \
    X(floatX, qkvr,         1, 3 * AW, 1) /* (3, B, NH, T, HS) q, k, v head-major, k and v repeated */ \
    X(floatX, att,          1, NH * T, 1) /* (B, NH, T, T) */
#define REPEAT_KV_ATTENTION_BUFFER(X) \
    X(floatX, scratch_bt3c, 0, 3 * AW, 1) /* q|k|v with k, v repeated; its gradient */
#define REPEAT_KV_ATTENTION_BACKWARD_BUFFERS(X) \
    X(floatX, dqkvr,        0, 3 * AW, 0) /* attention_backward's work buffers */ \
    X(floatX, datt,         0, NH * T, 0) \
    X(floatX, dy,           0, AW,     0)

static inline void repeat_kv_check(int NH, int NKV, int HS) {
    if (NKV <= 0 || NH % NKV != 0) { llmc_die("repeat_kv: NH=%d is not a multiple of NKV=%d", NH, NKV); }
    if (HS % x128::size != 0) { llmc_die("repeat_kv: head size %d is not a multiple of %d (128-bit packets)", HS, x128::size); }
}

static inline void repeat_kv_forward(floatX* out, const floatX* inp, int B, int T, int NH, int NKV, int HS,
                                     cudaStream_t stream) {
    repeat_kv_check(NH, NKV, HS);
    const int block_size = 256;
    size_t packets = (size_t)B * T * 3 * NH * HS / x128::size;
    repeat_kv_forward_kernel<<<ceil_div(packets, block_size), block_size, 0, stream>>>(out, inp, B, T, NH, NKV, HS);
    cudaCheckLaunch();
}

static inline void repeat_kv_backward(floatX* dinp, const floatX* dout, int B, int T, int NH, int NKV, int HS,
                                      cudaStream_t stream) {
    repeat_kv_check(NH, NKV, HS);
    const int block_size = 256;
    size_t packets = (size_t)B * T * (NH + 2 * NKV) * HS / x128::size;
    repeat_kv_backward_kernel<<<ceil_div(packets, block_size), block_size, 0, stream>>>(dinp, dout, B, T, NH, NKV, HS);
    cudaCheckLaunch();
}

#endif // LLMC_REPEAT_KV_CUH
