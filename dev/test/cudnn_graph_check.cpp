/*
dev/test/cudnn_graph_check.cpp: the cuDNN attention graphs of llmc/cuda/cudnn_att.cpp, validated without a GPU.

For each shape, the forward (training and inference) and backward graphs are described by the same code
the trainer runs and checked by the cuDNN frontend for sm_80 and sm_90: tensor shapes and strides,
16-byte alignment of the q/k/v views into the qkv buffer, data types, head-size rules. The frontend's
verdict must agree with llmc's own shape rule (cudnn_att_shape_error). What needs a GPU (engine
selection, plans, execution) is not covered.

Built and linked by `make test-cuda-build` (USE_CUDNN object), run by tests/test_cuda_build.py.
*/
#include <stdio.h>
#include <string.h>

#include "../../llmc/cuda/cudnn_att.h"

static int passed = 0;
static int failed = 0;

static void check(bool ok, const char* what, int B, int T, int NH, int HS, int sm, const char* why) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    printf("FAIL %s: B=%d T=%d NH=%d HS=%d sm_%d%s%s\n", what, B, T, NH, HS, sm, why[0] ? ": " : "", why);
}

int main(void) {
    // GPT-2 124M demo and at scale, GPT-2 XL (25 heads of 64), a GPT-3 style head of 128, the smallest shape
    const int good[][4] = {{4, 64, 12, 64}, {64, 1024, 12, 64}, {16, 1024, 25, 64}, {8, 2048, 16, 128}, {1, 2, 1, 8}};
    // head sizes that are not a multiple of 8 (the q/k/v views would not be 16-byte aligned), T = 1
    const int bad[][4] = {{4, 64, 12, 60}, {2, 32, 4, 12}, {1, 1, 1, 8}, {4, 64, 3, 264}, {4, 64, 3, 512}};
    const int sms[] = {80, 90};
    char why[2048];
    for (int sm : sms) {
        for (const auto& s : good) {
            bool ok = cudnn_attention_check_graphs(s[0], s[1], s[2], s[3], sm, why, sizeof(why)) == 1;
            check(ok, "the frontend accepts the graphs", s[0], s[1], s[2], s[3], sm, why);
            check(cudnn_att_shape_error(s[0], s[1], s[2], s[3]) == NULL, "llmc's shape rule accepts", s[0], s[1], s[2],
                  s[3], sm, "");
        }
        for (const auto& s : bad) {
            bool refused = cudnn_attention_check_graphs(s[0], s[1], s[2], s[3], sm, why, sizeof(why)) == 0;
            check(refused && strlen(why) > 0, "the frontend refuses the graphs", s[0], s[1], s[2], s[3], sm, "");
            if (refused) { printf("refused as expected: B=%d T=%d NH=%d HS=%d sm_%d: %s\n", s[0], s[1], s[2], s[3], sm, why); }
            check(cudnn_att_shape_error(s[0], s[1], s[2], s[3]) != NULL, "llmc's shape rule refuses before cuDNN",
                  s[0], s[1], s[2], s[3], sm, "");
        }
    }
    // HS = 256 is within llmc's rule; cuDNN's backward takes it on sm_90 but only HS <= 128 on sm_80
    check(cudnn_attention_check_graphs(4, 64, 2, 256, 90, why, sizeof(why)) == 1, "the frontend accepts HS=256", 4, 64, 2, 256, 90, why);
    check(cudnn_attention_check_graphs(4, 64, 2, 256, 80, why, sizeof(why)) == 0 && strstr(why, "128") != NULL,
          "the frontend refuses HS=256 naming the limit", 4, 64, 2, 256, 80, why);
    printf("%d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
