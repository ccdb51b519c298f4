/*
dev/cuda/fused_classifier.cu: softmax + cross-entropy loss + dlogits over the vocabulary.

    version 1: three kernels that materialise the probabilities (softmax, cross-entropy, then
               dlogits = (probs - onehot) * dloss), one thread per row
    version 2: the production kernel (llmc/cuda/fused_classifier.cuh): one block per row, online softmax,
               dlogits written in place over the logits, probabilities never stored
Every 7th row's target is -1 (not supervised, a chat shard's masked token): loss 0 and a zero gradient row.

usage: ./fused_classifier [version] [--quick]   (full: B=8, T=1024, GPT-2's vocabulary)
*/
#include "common.h"
#include "../../llmc/cuda/fused_classifier.cuh"

static void classifier_cpu(float* losses, float* dlogits, const float* logits, const int* targets, float dloss, int BT, int V, int Vp) {
    for (int n = 0; n < BT; n++) {
        const float* x = logits + (size_t)n * Vp;
        if (targets[n] == -1) {
            losses[n] = 0.0f;
            memset(dlogits + (size_t)n * Vp, 0, (size_t)Vp * sizeof(float));
            continue;
        }
        float maxval = -INFINITY;
        for (int i = 0; i < V; i++) { maxval = fmaxf(maxval, x[i]); }
        double sum = 0.0;
        for (int i = 0; i < V; i++) { sum += exp((double)(x[i] - maxval)); }
        for (int i = 0; i < Vp; i++) {
            double p = i < V ? exp((double)(x[i] - maxval)) / sum : 0.0;
            dlogits[(size_t)n * Vp + i] = i < V ? (float)((p - (i == targets[n] ? 1.0 : 0.0)) * dloss) : 0.0f;
        }
        losses[n] = (float)(log(sum) + maxval - x[targets[n]]);
    }
}

__global__ static void softmax_v1(float* probs, const floatX* logits, int BT, int V, int Vp) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= BT) { return; }
    const floatX* x = logits + (size_t)n * Vp;
    float maxval = -INFINITY, sum = 0.0f;
    for (int i = 0; i < V; i++) { maxval = fmaxf(maxval, to_float(x[i])); }
    for (int i = 0; i < V; i++) { sum += expf(to_float(x[i]) - maxval); }
    for (int i = 0; i < V; i++) { probs[(size_t)n * Vp + i] = expf(to_float(x[i]) - maxval) / sum; }
}

__global__ static void crossentropy_v1(float* losses, const float* probs, const int* targets, int BT, int Vp) {
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < BT) { losses[n] = targets[n] == -1 ? 0.0f : -logf(probs[(size_t)n * Vp + targets[n]]); }
}

__global__ static void dlogits_v1(floatX* dlogits, const float* probs, const int* targets, float dloss, int BT, int V, int Vp) {
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)BT * Vp) { return; }
    int n = (int)(idx / Vp), i = (int)(idx % Vp);
    dlogits[idx] = (floatX)(i < V && targets[n] != -1 ? (probs[idx] - (i == targets[n] ? 1.0f : 0.0f)) * dloss : 0.0f);
}

int main(int argc, char** argv) {
    Playground pg = playground_start(argc, argv, 2, "fused_classifier", 8, 1024);
    const int V = pg.shape.V, Vp = pg.shape.Vp, BT = pg.shape.B * pg.shape.T;
    size_t n = (size_t)BT * Vp;
    float* logits = make_random_float(n, 1);
    for (size_t i = 0; i < n; i++) { logits[i] *= 10.0f; }
    int* targets = make_random_int(BT, V, 2);
    for (int i = 0; i < BT; i += 7) { targets[i] = -1; }  // not supervised
    floatX* d_logits = to_device(logits, n);
    int* d_targets = to_device_int(targets, BT);
    floatX* d_work = device_alloc<floatX>(n);
    float* d_losses = device_alloc<float>(BT);
    const float dloss = 1.0f / BT;
    float* ref_losses = (float*)mallocCheck((size_t)BT * sizeof(float));
    float* ref_dlogits = (float*)mallocCheck(n * sizeof(float));
    classifier_cpu(ref_losses, ref_dlogits, logits, targets, dloss, BT, V, Vp);
    // dlogits are O(1/BT): compare them scaled up so the tolerance means the same in both checks
    for (size_t i = 0; i < n; i++) { ref_dlogits[i] *= (float)BT; }
    const float tol = precision_tol(1e-4f, 2e-2f);
    if (version_selected(&pg, 1)) {
        float* d_probs = device_alloc<float>(n);
        auto run = [&]() {
            softmax_v1<<<ceil_div(BT, 128), 128>>>(d_probs, d_logits, BT, V, Vp);
            crossentropy_v1<<<ceil_div(BT, 128), 128>>>(d_losses, d_probs, d_targets, BT, Vp);
            dlogits_v1<<<ceil_div(n, 256), 256>>>(d_work, d_probs, d_targets, 1.0f, BT, V, Vp);
            cudaCheckLaunch();
        };
        run();
        validate_result(d_losses, ref_losses, "version 1 losses", BT, tol);
        validate_result(d_work, ref_dlogits, "version 1 dlogits x BT", n, tol);
        printf("version 1: %.3f ms%s\n", benchmark_kernel(&pg, 5, run), timing_note(&pg));
        cudaCheck(cudaFree(d_probs));
    }
    if (version_selected(&pg, 2)) {
        auto run = [&]() {
            cudaCheck(cudaMemcpy(d_work, d_logits, n * sizeof(floatX), cudaMemcpyDeviceToDevice));
            fused_classifier(d_work, d_losses, d_targets, 1.0f, BT, V, Vp, 0.0f, 1, 0);
        };
        run();
        validate_result(d_losses, ref_losses, "version 2 (llmc) losses", BT, tol);
        validate_result(d_work, ref_dlogits, "version 2 (llmc) dlogits x BT", n, tol);
        printf("version 2 (llmc): %.3f ms (including a copy of the logits)%s\n", benchmark_kernel(&pg, 20, run), timing_note(&pg));
    }
    free(logits); free(targets); free(ref_losses); free(ref_dlogits);
    cudaCheck(cudaFree(d_logits)); cudaCheck(cudaFree(d_targets)); cudaCheck(cudaFree(d_work));
    cudaCheck(cudaFree(d_losses));
    printf("fused_classifier: all versions match the CPU reference\n");
    return 0;
}
