/*
dev/test/cudnn_graph_check.cpp: the cuDNN attention graphs of llmc/cuda/cudnn_att.cpp, validated without a GPU.

For each shape, the forward (training and inference) and backward graphs are described by the same code
the trainers run and checked by the cuDNN frontend for sm_80 and sm_90: tensor shapes and strides,
16-byte alignment of the q/k/v views into the qkv buffer, data types, head-size rules, and for Llama 3's
grouped-query attention (NKV < NH key/value heads read in place from the (B, T, NH + 2 NKV, HS) projection,
dk and dv written there with NKV heads) the grouping of the query heads. The frontend's verdict must agree
with llmc's own shape rule (cudnn_att_shape_error). What needs a GPU (engine selection, plans, execution)
is not covered.

Built and linked by `make test-cuda-build` (USE_CUDNN object), run by tests/test_cuda_build.py.
*/
#include <stdio.h>
#include <string.h>

#include "../../llmc/cuda/cudnn_att.h"

static int passed = 0;
static int failed = 0;
static int graphs = 0;  // graphs the frontend validated (3 per accepted shape and architecture)

struct Shape {
    int B, T, NH, NKV, HS;
};

static void check(bool ok, const char* what, const Shape& s, int sm, const char* why) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    printf("FAIL %s: B=%d T=%d NH=%d NKV=%d HS=%d sm_%d%s%s\n", what, s.B, s.T, s.NH, s.NKV, s.HS, sm, why[0] ? ": " : "", why);
}

int main(void) {
    const Shape good[] = {
        // GPT-2 (NKV = NH): 124M demo and at scale, XL (25 heads of 64), a GPT-3 style head of 128, the smallest shape
        {4, 64, 12, 12, 64}, {64, 1024, 12, 12, 64}, {16, 1024, 25, 25, 64}, {8, 2048, 16, 16, 128}, {1, 2, 1, 1, 8},
        // Llama 3: 32 query heads over 8 of 64 at T = 1024, 8B's 32 over 8 of 128, 3:1, bench-gpu's d12 (12 over 6) at
        // its largest B, the test states' d2 (2 over 1 of 64) and GQA 4:1 (4 over 1 of 32) at B = 4 and as micro-batches
        // (-a 2, two processes), multi-query attention (NKV = 1)
        {8, 1024, 32, 8, 64}, {4, 1024, 32, 8, 128}, {4, 256, 6, 2, 64}, {32, 1024, 12, 6, 64}, {4, 64, 2, 1, 64},
        {1, 64, 2, 1, 64}, {4, 64, 4, 1, 32}, {2, 64, 4, 1, 32}, {4, 512, 16, 1, 64},
    };
    const Shape bad[] = {
        // head sizes that are not a multiple of 8 (the q/k/v views would not be 16-byte aligned), T = 1, HS > 256
        {4, 64, 12, 12, 60}, {2, 32, 4, 4, 12}, {1, 1, 1, 1, 8}, {4, 64, 3, 3, 264}, {4, 64, 3, 3, 512},
        // query heads that do not split into groups of the key/value heads
        {4, 64, 6, 4, 64}, {4, 64, 32, 3, 64}, {4, 64, 4, 8, 64}, {8, 1024, 12, 8, 64},
    };
    const int sms[] = {80, 90};
    char why[2048];
    int group_refusals = 0;
    for (int sm : sms) {
        for (const Shape& s : good) {
            bool ok = cudnn_attention_check_graphs(s.B, s.T, s.NH, s.NKV, s.HS, sm, why, sizeof(why)) == 1;
            check(ok, "the frontend accepts the graphs", s, sm, why);
            graphs += ok ? 3 : 0;
            check(cudnn_att_shape_error(s.B, s.T, s.NH, s.NKV, s.HS) == NULL, "llmc's shape rule accepts", s, sm, "");
        }
        for (const Shape& s : bad) {
            bool refused = cudnn_attention_check_graphs(s.B, s.T, s.NH, s.NKV, s.HS, sm, why, sizeof(why)) == 0;
            check(refused && strlen(why) > 0, "the frontend refuses the graphs", s, sm, "");
            if (refused) {
                printf("refused as expected: B=%d T=%d NH=%d NKV=%d HS=%d sm_%d: %s\n", s.B, s.T, s.NH, s.NKV, s.HS, sm, why);
                group_refusals += s.NH % s.NKV != 0 && strstr(why, "group-query") != NULL;
            }
            check(cudnn_att_shape_error(s.B, s.T, s.NH, s.NKV, s.HS) != NULL, "llmc's shape rule refuses before cuDNN", s, sm, "");
        }
    }
    // the grouping refusals are the frontend's own GQA rule (not an alignment or head-size one)
    check(group_refusals == 2 * 4, "the frontend names the group-query rule for every NH not a multiple of NKV", Shape{0, 0, 0, 0, 0}, 0, "");
    // HS = 256 is within llmc's rule; cuDNN's backward takes it on sm_90 but only HS <= 128 on sm_80
    const Shape wide = {4, 64, 2, 2, 256}, wide_gqa = {4, 64, 4, 2, 256};
    for (const Shape& s : {wide, wide_gqa}) {
        bool ok = cudnn_attention_check_graphs(s.B, s.T, s.NH, s.NKV, s.HS, 90, why, sizeof(why)) == 1;
        check(ok, "the frontend accepts HS=256", s, 90, why);
        graphs += ok ? 3 : 0;
        check(cudnn_attention_check_graphs(s.B, s.T, s.NH, s.NKV, s.HS, 80, why, sizeof(why)) == 0 && strstr(why, "128") != NULL,
              "the frontend refuses HS=256 naming the limit", s, 80, why);
    }
    printf("%d graphs validated by the frontend (forward training, forward inference, backward)\n", graphs);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
