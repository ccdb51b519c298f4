/*
dev/test/test_fused_classifier_host.c: the host half of llmc/cuda/fused_classifier.cuh on the CPU -- the online
softmax merge behind the fused classifier, folded the way the kernel's threads, warps and block do.
*/
#include "../../llmc/cuda/fused_classifier.cuh"
#include "test_common.h"

static void test_online_softmax_merge(void) {
    const int V = 1000;
    float* x = random_array(V, 21);
    for (int i = 0; i < V; i++) { x[i] *= 40.0f; }
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < V; i++) { mx = x[i] > mx ? x[i] : mx; }
    for (int i = 0; i < V; i++) { sum += exp((double)x[i] - mx); }
    // the kernel's shape: 1024 threads each fold a strided subset, then warps and the block merge
    const int threads[] = {1, 32, 1024};
    for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
        int nt = threads[k];
        float M = -INFINITY, S = 0.0f;
        for (int t = nt - 1; t >= 0; t--) {  // reverse order on purpose
            float m = -INFINITY, s2 = 0.0f;
            for (int i = t; i < V; i += nt) { online_softmax_merge(&m, &s2, x[i], 1.0f); }
            online_softmax_merge(&M, &S, m, s2);  // threads past V contribute the empty state
        }
        CHECK(M == (float)mx && fabs(S - sum) / sum < 1e-5, "online softmax over %d threads: max %g, sum %g (want %g, %g)",
              nt, M, S, mx, sum);
    }
    float m = -INFINITY, s2 = 0.0f;
    online_softmax_merge(&m, &s2, -INFINITY, 0.0f);
    CHECK(m == -INFINITY && s2 == 0.0f, "merging two empty states stays empty (no NaN from inf - inf)");
    online_softmax_merge(&m, &s2, 1000.0f, 1.0f);
    online_softmax_merge(&m, &s2, -1000.0f, 1.0f);
    CHECK(m == 1000.0f && s2 == 1.0f, "huge logits do not overflow (max subtracted before exp)");
    free(x);
}

int main(void) {
    test_online_softmax_merge();
    return test_summary();
}
