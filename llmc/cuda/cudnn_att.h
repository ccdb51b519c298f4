/*
llmc/cuda/cudnn_att.h: cuDNN flash attention (USE_CUDNN=1), the interface and its host-side arithmetic.

    CudnnAttention* att = cudnn_attention_create(stream);     one cuDNN handle, workspace, graph cache
    cudnn_attention_prepare(att, B, T, NH, NKV, HS);          optional: build the graphs up front
    cudnn_attention_forward(att, out, stats, qkv, B, T, NH, NKV, HS, is_inference)
        qkv (B, T, NH + 2 NKV, HS) is the qkv matmul output, each token's row q (NH heads) | k (NKV heads) |
        v (NKV heads), read in place through strides (no permute, no repetition of k and v)
        out (B, T, NH, HS) = softmax(q k^T / sqrt(HS), causal) v, heads concatenated; query head h attends
        with key/value head h / (NH / NKV) (grouped-query attention; NKV = NH is GPT-2's (B, T, 3, NH, HS))
        stats (B, NH, T) fp32: log-sum-exp of each softmax row, all the backward needs instead of
        the (B, NH, T, T) attention matrix; not written when is_inference (no backward follows)
    cudnn_attention_backward(att, dqkv, dout, qkv, out, stats, B, T, NH, NKV, HS)
        dqkv (B, T, NH + 2 NKV, HS) overwritten with dq, dk, dv in the layout of qkv (dk and dv summed over
        the query heads of each group)
    cudnn_attention_free(att);

BF16 only. The graphs (one forward, one backward) are built once per (B, T, NH, NKV, HS, is_inference)
and cached in the CudnnAttention; cuDNN failures die with one line. The code lives in
llmc/cuda/cudnn_att.cpp, compiled once as a host C++ object (the cuDNN frontend is header-only and slow
to compile) and linked into train_gpt2cu / test_gpt2cu and train_llama3cu / test_llama3cu.

The first half of this header is plain C (no CUDA, no cuDNN): the tensor layouts handed to cuDNN,
the cache key and the shape rules, checked on the CPU by dev/test/test_cudnn_att_host.c.
*/
#ifndef LLMC_CUDNN_ATT_H
#define LLMC_CUDNN_ATT_H

#include <stddef.h>
#include <stdint.h>

// ----------------------------------------------------------------------------
// host half: layouts, cache key, shape rules (plain C)

// the tensors of one attention call, as cuDNN sees them
enum { CUDNN_ATT_Q = 0, CUDNN_ATT_K, CUDNN_ATT_V, CUDNN_ATT_O, CUDNN_ATT_STATS, CUDNN_ATT_NUM_LAYOUTS };

// dimensions and strides in cuDNN's (batch, head, sequence, head dim) order, in elements, and the
// element offset of the tensor's first element from the start of the buffer it lives in
typedef struct {
    int64_t dim[4];
    int64_t stride[4];
    int64_t offset;
} CudnnAttLayout;

// q, k, v (and dq, dk, dv): inside the (B, T, NH + 2 NKV, HS) qkv buffer, k starting NH HS after q and v
// NKV HS after k, every row QKV = (NH + 2 NKV) HS long; q has NH heads, k and v NKV
// O (and dO): the (B, T, NH, HS) output; stats: packed (B, NH, T, 1) fp32
static inline CudnnAttLayout cudnn_att_layout(int which, int B, int T, int NH, int NKV, int HS) {
    const int64_t C = (int64_t)NH * HS, QKV = (int64_t)(NH + 2 * NKV) * HS;
    CudnnAttLayout l;
    l.dim[0] = B;
    l.dim[1] = which == CUDNN_ATT_K || which == CUDNN_ATT_V ? NKV : NH;
    l.dim[2] = T;
    l.dim[3] = HS;
    l.offset = 0;
    if (which == CUDNN_ATT_STATS) {
        l.dim[3] = 1;
        l.stride[0] = (int64_t)NH * T;
        l.stride[1] = T;
        l.stride[2] = 1;
        l.stride[3] = 1;
    } else if (which == CUDNN_ATT_O) {
        l.stride[0] = (int64_t)T * C;
        l.stride[1] = HS;
        l.stride[2] = C;
        l.stride[3] = 1;
    } else {  // CUDNN_ATT_Q, CUDNN_ATT_K, CUDNN_ATT_V
        l.stride[0] = (int64_t)T * QKV;
        l.stride[1] = HS;
        l.stride[2] = QKV;
        l.stride[3] = 1;
        l.offset = which == CUDNN_ATT_Q ? 0 : which == CUDNN_ATT_K ? C : C + (int64_t)NKV * HS;
    }
    return l;
}

// element offset of (b, h, t, d) in the buffer a layout describes
static inline int64_t cudnn_att_layout_index(const CudnnAttLayout* l, int64_t b, int64_t h, int64_t t, int64_t d) {
    return l->offset + b * l->stride[0] + h * l->stride[1] + t * l->stride[2] + d * l->stride[3];
}

// fp32 elements of one layer's saved softmax statistics (B, NH, T): what cuDNN keeps in place of
// the (B, NH, T, T) attention matrix of the cuBLAS path
static inline size_t cudnn_att_stats_count(int B, int T, int NH) {
    return (size_t)B * NH * T;
}

// floats from one layer's statistics to the next in the (L, B, NH, T) activation: the count rounded up
// to 64 floats, so every layer's statistics start 256-byte aligned like the other activations
static inline size_t cudnn_att_stats_layer_stride(int B, int T, int NH) {
    return (cudnn_att_stats_count(B, T, NH) + 63) / 64 * 64;
}

// bits of each field in the cache key; cudnn_att_shape_error keeps every value inside them
#define CUDNN_ATT_KEY_B_BITS 16
#define CUDNN_ATT_KEY_T_BITS 18
#define CUDNN_ATT_KEY_NH_BITS 10
#define CUDNN_ATT_KEY_NKV_BITS 10
#define CUDNN_ATT_KEY_HS_BITS 9
#define CUDNN_ATT_MAX_HS 256

// NULL when cuDNN attention can take this shape, else why not (one phrase). On sm_80 cuDNN's backward
// also needs HS <= 128 (sm_90: 256); the frontend says so when the graph is built, in the same one line.
static inline const char* cudnn_att_shape_error(int B, int T, int NH, int NKV, int HS) {
    if (B <= 0 || T <= 0 || NH <= 0 || NKV <= 0 || HS <= 0) { return "B, T, NH, NKV and HS must be positive"; }
    if (T < 2) { return "the sequence length T must be at least 2 (cuDNN's attention backward refuses T = 1)"; }
    if (NH % NKV != 0) { return "the query head count NH must be a multiple of the key/value head count NKV"; }
    if (HS % 8 != 0) { return "the head size HS = C / NH must be a multiple of 8 (16-byte rows in bf16)"; }
    if (HS > CUDNN_ATT_MAX_HS) { return "the head size HS = C / NH must be at most 256 for cuDNN flash attention"; }
    if (B >= (1 << CUDNN_ATT_KEY_B_BITS)) { return "the batch size B must be below 2^16"; }
    if (T >= (1 << CUDNN_ATT_KEY_T_BITS)) { return "the sequence length T must be below 2^18"; }
    if (NH >= (1 << CUDNN_ATT_KEY_NH_BITS)) { return "the head count NH must be below 1024"; }
    return NULL;  // NKV <= NH < 1024 too
}

// one 64-bit key per graph: B | T | NH | NKV | HS | is_inference, from the high bits down
static inline uint64_t cudnn_att_key(int B, int T, int NH, int NKV, int HS, int is_inference) {
    uint64_t key = (uint64_t)B;
    key = (key << CUDNN_ATT_KEY_T_BITS) | (uint64_t)T;
    key = (key << CUDNN_ATT_KEY_NH_BITS) | (uint64_t)NH;
    key = (key << CUDNN_ATT_KEY_NKV_BITS) | (uint64_t)NKV;
    key = (key << CUDNN_ATT_KEY_HS_BITS) | (uint64_t)HS;
    key = (key << 1) | (uint64_t)(is_inference != 0);
    return key;
}

// the inverse of cudnn_att_key (used by the tests and in error messages)
static inline void cudnn_att_key_unpack(uint64_t key, int* B, int* T, int* NH, int* NKV, int* HS, int* is_inference) {
    *is_inference = (int)(key & 1);
    key >>= 1;
    *HS = (int)(key & ((1u << CUDNN_ATT_KEY_HS_BITS) - 1));
    key >>= CUDNN_ATT_KEY_HS_BITS;
    *NKV = (int)(key & ((1u << CUDNN_ATT_KEY_NKV_BITS) - 1));
    key >>= CUDNN_ATT_KEY_NKV_BITS;
    *NH = (int)(key & ((1u << CUDNN_ATT_KEY_NH_BITS) - 1));
    key >>= CUDNN_ATT_KEY_NH_BITS;
    *T = (int)(key & ((1u << CUDNN_ATT_KEY_T_BITS) - 1));
    key >>= CUDNN_ATT_KEY_T_BITS;
    *B = (int)key;
}

// ----------------------------------------------------------------------------
// the cuDNN calls (C++: llmc/cuda/cudnn_att.cpp)

#if defined(__cplusplus) && defined(ENABLE_CUDNN)
#include <cuda_runtime.h>
#include <cuda_bf16.h>

typedef struct CudnnAttention CudnnAttention;

// a cuDNN handle on stream, an empty graph cache and no workspace yet
CudnnAttention* cudnn_attention_create(cudaStream_t stream);
void cudnn_attention_free(CudnnAttention* att);

// out (B, T, NH, HS); stats (B, NH, T), untouched when is_inference; qkv (B, T, NH + 2 NKV, HS)
void cudnn_attention_forward(CudnnAttention* att, __nv_bfloat16* out, float* stats, const __nv_bfloat16* qkv,
                             int B, int T, int NH, int NKV, int HS, int is_inference);

// dqkv (B, T, NH + 2 NKV, HS) overwritten; dout, out (B, T, NH, HS); qkv (B, T, NH + 2 NKV, HS); stats (B, NH, T)
void cudnn_attention_backward(CudnnAttention* att, __nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                              const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* stats,
                              int B, int T, int NH, int NKV, int HS);

// builds the three graphs of a shape now (forward for training and for inference, backward), so that an
// unsupported shape fails at start-up and the workspace is allocated before training begins
void cudnn_attention_prepare(CudnnAttention* att, int B, int T, int NH, int NKV, int HS);

// bytes of cuDNN workspace allocated so far (it grows to the largest graph's need)
size_t cudnn_attention_workspace_bytes(const CudnnAttention* att);

// without a GPU: describes the three graphs (forward for training and for inference, backward) exactly as
// the calls above do and runs the frontend's validation for compute capability sm_version (80, 90, ...):
// shapes, strides, 16-byte alignment, data types, head-size limits, the grouping of NH query heads over NKV
// key/value heads. 1 if all pass, else 0 and the reason in why.
int cudnn_attention_check_graphs(int B, int T, int NH, int NKV, int HS, int sm_version, char* why, size_t why_size);
#endif

#endif // LLMC_CUDNN_ATT_H
