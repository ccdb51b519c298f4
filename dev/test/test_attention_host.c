/*
dev/test/test_attention_host.c: the host half of llmc/cuda/attention.cuh on the CPU -- every cuBLAS call of the
attention forward and backward (scores, y, datt, dv, dq, dk) run through gemm_reference and compared with
plain row-major loops; the permute/unpermute index maps between the qkv matmul output and the heads.
*/
#include "../../llmc/cuda/attention.cuh"
#include "test_common.h"

// ----------------------------------------------------------------------------
// GEMM layouts: the row-major <-> column-major bookkeeping of every cuBLAS call

// runs one attention GEMM spec through the CPU model of cuBLAS and checks that it writes operand want_d
// with op(a) @ op(b) per head, (T, N) from (T, K) operands, as plain row-major loops compute it
static void check_attention_spec(int which, int want_d, float* const ops[ATT_NUM_OPERANDS], int T, int HS, int heads,
                                 const float* a, int trans_a, const float* b, int trans_b, int N, int K, const char* what) {
    GemmSpec s = attention_gemm_spec(which, T, HS, heads);
    gemm_reference(&s, ops[s.a], ops[s.b], ops[s.d], 1.0f, 0.0f);
    size_t n = (size_t)heads * T * N;
    float* ref = (float*)calloc(n, sizeof(float));
    matmul_rowmajor(ref, a, trans_a, b, trans_b, heads, T, N, K, 0.0f);
    CHECK(s.d == want_d && max_abs_diff(ops[want_d], ref, n) < 1e-5, "%s", what);
    free(ref);
}

static void test_attention_gemm_specs(void) {
    const int heads = 3, T = 5, HS = 4;  // a batch of 3 heads
    size_t th = (size_t)heads * T * HS, tt = (size_t)heads * T * T;
    float* q = random_array(th, 11);
    float* k = random_array(th, 12);
    float* v = random_array(th, 13);
    float* dy = random_array(th, 14);
    float* att = (float*)calloc(tt, sizeof(float));
    float* datt = (float*)calloc(tt, sizeof(float));
    float* y = (float*)calloc(th, sizeof(float));
    float* dq = (float*)calloc(th, sizeof(float));
    float* dk = (float*)calloc(th, sizeof(float));
    float* dv = (float*)calloc(th, sizeof(float));
    float* ops[ATT_NUM_OPERANDS] = {q, k, v, att, y, dy, datt, dq, dk, dv};
    const float scale = 1.0f / sqrtf((float)HS);
    // the order the trainer runs them in, with the causal softmax (forward and backward) in between
    check_attention_spec(ATT_GEMM_SCORES, ATT_ATT, ops, T, HS, heads, q, 0, k, 1, T, HS,
                         "scores spec: att[t][t2] = q[t] . k[t2] per head");
    for (size_t r = 0; r < (size_t)heads * T; r++) {  // causal softmax, as the kernel does
        int t = (int)(r % T);
        float* row = att + r * T;
        float mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j <= t; j++) { mx = fmaxf(mx, scale * row[j]); }
        for (int j = 0; j <= t; j++) { sum += expf(scale * row[j] - mx); }
        for (int j = 0; j < T; j++) { row[j] = j <= t ? expf(scale * row[j] - mx) / sum : 0.0f; }
    }
    check_attention_spec(ATT_GEMM_Y, ATT_Y, ops, T, HS, heads, att, 0, v, 0, HS, T, "y spec: y = att @ v per head");
    check_attention_spec(ATT_GEMM_DATT, ATT_DATT, ops, T, HS, heads, dy, 0, v, 1, T, HS, "datt spec: datt = dy @ v^T per head");
    check_attention_spec(ATT_GEMM_DV, ATT_DV, ops, T, HS, heads, att, 1, dy, 0, HS, T, "dv spec: dv = att^T @ dy per head");
    // dpreatt in place of datt (the softmax backward), then dq and dk
    for (int i = 0; i < (int)tt; i++) { datt[i] = att[i] * 0.5f + 0.1f * (float)(i % 3); }
    check_attention_spec(ATT_GEMM_DQ, ATT_DQ, ops, T, HS, heads, datt, 0, k, 0, HS, T, "dq spec: dq = dpreatt @ k per head");
    check_attention_spec(ATT_GEMM_DK, ATT_DK, ops, T, HS, heads, datt, 1, q, 0, HS, T, "dk spec: dk = dpreatt^T @ q per head");
    free(q); free(k); free(v); free(dy); free(att); free(datt); free(y); free(dq); free(dk); free(dv);
}

// ----------------------------------------------------------------------------
// index maps used inside the kernels

static void test_attention_index_maps(void) {
    const int B = 2, T = 3, NH = 4, HS = 5, C = NH * HS;
    size_t n = (size_t)B * NH * T * HS;
    unsigned char* seen_qkv = (unsigned char*)calloc((size_t)B * T * 3 * C, 1);
    unsigned char* seen_cat = (unsigned char*)calloc(n, 1);
    int bad = 0;
    for (size_t idx = 0; idx < n; idx++) {
        size_t hs = idx % HS, t = (idx / HS) % T, h = (idx / ((size_t)HS * T)) % NH, b = idx / ((size_t)HS * T * NH);
        size_t q = attention_qkv_offset(idx, T, NH, HS);
        bad += q != ((b * T + t) * 3 * C + h * HS + hs);  // q of head h at (b, t) in the qkv matmul output
        seen_qkv[q]++; seen_qkv[q + C]++; seen_qkv[q + 2 * C]++;
        size_t o = attention_concat_offset(idx, T, NH, HS);
        bad += o != ((b * T + t) * C + h * HS + hs);
        seen_cat[o]++;
    }
    for (size_t i = 0; i < (size_t)B * T * 3 * C; i++) { bad += seen_qkv[i] != 1; }
    for (size_t i = 0; i < n; i++) { bad += seen_cat[i] != 1; }
    CHECK(bad == 0, "permute/unpermute index maps are bijections with the q|k|v and head-concat layouts");
    free(seen_qkv);
    free(seen_cat);
}

int main(void) {
    test_attention_gemm_specs();
    test_attention_index_maps();
    return test_summary();
}
