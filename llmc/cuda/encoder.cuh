/*
llmc/cuda/encoder.cuh: token + position embedding, forward and backward.

    encoder_forward(out, inp, wte, wpe, B, T, C)       out (B,T,C) = wte[inp[b,t]] + wpe[t]
    encoder_backward(dwte, dwpe, dout, inp_host, ..)   dwte[token] += dout rows of that token, dwpe[t] += sum_b dout[b,t]
With wpe and dwpe NULL (Llama 3: no position table) the same calls are the token embedding alone.

The backward is deterministic: the host groups the positions of each distinct token (a counting
sort of the B*T token ids it already has), then one block per distinct token sums its rows in a
fixed order. No atomics, so the same batch gives bit-identical gradients run to run.
The host half (TokenGroups) is plain C and compiles with gcc, so the CPU tests exercise it.
*/
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include <string.h>
#include "../utils.h"

#ifdef __CUDACC__
#include "cuda_common.cuh"

// out (B,T,C), inp (B,T) token ids, wte (Vp,C), wpe (maxT,C) or NULL; C a multiple of x128::size
__global__ static void encoder_forward_kernel(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                              int B, int T, int C) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * x128::size;
    size_t N = (size_t)B * T * C;
    if (idx >= N) { return; }
    int bt = (int)(idx / C);
    int t = bt % T;
    int c = (int)(idx % C);
    int token = inp[bt];
    x128 w = load128cs(wte + (size_t)token * C + c);
    if (wpe == NULL) {
        store128(out + idx, w);
        return;
    }
    x128 packed_out;
    x128 p = load128cs(wpe + (size_t)t * C + c);
    for (int k = 0; k < x128::size; k++) {
        packed_out[k] = (floatX)(to_float(w[k]) + to_float(p[k]));
    }
    store128(out + idx, packed_out);
}

static inline void encoder_forward(floatX* out, const int* inp, const floatX* wte, const floatX* wpe,
                                   int B, int T, int C, cudaStream_t stream) {
    const int block_size = 256;
    size_t N = (size_t)B * T * C;
    encoder_forward_kernel<<<ceil_div(N, (size_t)block_size * x128::size), block_size, 0, stream>>>(out, inp, wte, wpe, B, T, C);
    cudaCheckLaunch();
}

// dwpe (T, C) += sum over b of dout (B, T, C); one thread per (t, c)
__global__ static void wpe_backward_kernel(floatX* dwpe, const floatX* dout, int B, int T, int C) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= T * C) { return; }
    float sum = to_float(dwpe[idx]);
    for (int b = 0; b < B; b++) {
        sum += to_float(dout[(size_t)b * T * C + idx]);
    }
    dwpe[idx] = (floatX)sum;
}

// one block per distinct token: dwte[token, :] += sum of dout rows listed in positions[start..end)
__global__ static void wte_backward_kernel(floatX* dwte, const floatX* dout, const int* token_ids, const int* starts,
                                           const int* positions, int C) {
    int group = blockIdx.x;
    int token = token_ids[group];
    int start = starts[group];
    int end = starts[group + 1];
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float sum = to_float(dwte[(size_t)token * C + c]);
        for (int i = start; i < end; i++) {
            sum += to_float(dout[(size_t)positions[i] * C + c]);
        }
        dwte[(size_t)token * C + c] = (floatX)sum;
    }
}
#endif // __CUDACC__

// host bookkeeping for the wte backward: the B*T positions grouped by token id, in increasing
// position order within a group. Plain C, tested on the CPU (dev/test/test_encoder_host.c).
typedef struct {
    int num_groups;     // distinct tokens in the batch
    int* token_ids;     // (num_groups) the token of each group, increasing
    int* starts;        // (num_groups + 1) group g owns positions[starts[g] .. starts[g+1])
    int* positions;     // (B*T) flat (b*T + t) indices
    int* counts;        // (V) scratch
    int V;
    int BT;
} TokenGroups;

static inline void token_groups_init(TokenGroups* g, int BT, int V) {
    g->BT = BT;
    g->V = V;
    g->num_groups = 0;
    g->token_ids = (int*)mallocCheck((size_t)BT * sizeof(int));
    g->starts = (int*)mallocCheck(((size_t)BT + 1) * sizeof(int));
    g->positions = (int*)mallocCheck((size_t)BT * sizeof(int));
    g->counts = (int*)mallocCheck((size_t)V * sizeof(int));
}

// counting sort of the tokens; token ids must be in [0, V) (the data loader checks that)
static inline void token_groups_build(TokenGroups* g, const int* inp) {
    memset(g->counts, 0, (size_t)g->V * sizeof(int));
    for (int i = 0; i < g->BT; i++) {
        int token = inp[i];
        if (token < 0 || token >= g->V) { llmc_die("encoder_backward: token id %d outside [0, %d)", token, g->V); }
        g->counts[token]++;
    }
    int num_groups = 0;
    int offset = 0;
    for (int v = 0; v < g->V; v++) {
        if (g->counts[v] == 0) { continue; }
        g->token_ids[num_groups] = v;
        g->starts[num_groups] = offset;
        offset += g->counts[v];
        g->counts[v] = g->starts[num_groups];  // becomes the write cursor of the group
        num_groups++;
    }
    g->starts[num_groups] = offset;
    g->num_groups = num_groups;
    for (int i = 0; i < g->BT; i++) {
        g->positions[g->counts[inp[i]]++] = i;
    }
}

static inline void token_groups_free(TokenGroups* g) {
    free(g->token_ids);
    free(g->starts);
    free(g->positions);
    free(g->counts);
}

#ifdef __CUDACC__
// device copy of the groups: one buffer of (3 * BT + 1) ints
typedef struct {
    int* buffer;
    int BT;
} TokenGroupsDevice;

static inline void token_groups_device_init(TokenGroupsDevice* d, int BT) {
    d->BT = BT;
    d->buffer = (int*)cudaMallocCheck(((size_t)3 * BT + 1) * sizeof(int));
}

// dwte (Vp, C), dwpe (maxT, C) or NULL, dout (B, T, C); groups built from this micro-batch's inputs on the host.
// The host groups are copied synchronously with respect to the stream (the caller reuses them next step).
static inline void encoder_backward(floatX* dwte, floatX* dwpe, const floatX* dout, const TokenGroups* groups,
                                    TokenGroupsDevice* dgroups, int B, int T, int C, cudaStream_t stream) {
    const int block_size = 256;
    if (dwpe != NULL) {
        wpe_backward_kernel<<<ceil_div((size_t)T * C, block_size), block_size, 0, stream>>>(dwpe, dout, B, T, C);
        cudaCheckLaunch();
    }
    int n = groups->num_groups;
    int* d_token_ids = dgroups->buffer;
    int* d_starts = d_token_ids + dgroups->BT;
    int* d_positions = d_starts + dgroups->BT + 1;
    cudaCheck(cudaMemcpyAsync(d_token_ids, groups->token_ids, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaMemcpyAsync(d_starts, groups->starts, ((size_t)n + 1) * sizeof(int), cudaMemcpyHostToDevice, stream));
    cudaCheck(cudaMemcpyAsync(d_positions, groups->positions, (size_t)groups->BT * sizeof(int), cudaMemcpyHostToDevice, stream));
    wte_backward_kernel<<<n, block_size, 0, stream>>>(dwte, dout, d_token_ids, d_starts, d_positions, C);
    cudaCheckLaunch();
    cudaCheck(cudaStreamSynchronize(stream));  // the host groups are rebuilt for the next micro-batch
}

static inline void token_groups_device_free(TokenGroupsDevice* d) { cudaCheck(cudaFree(d->buffer)); }
#endif

#endif // LLMC_ENCODER_CUH
