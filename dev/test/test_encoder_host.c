/*
dev/test/test_encoder_host.c: the host half of llmc/cuda/encoder.cuh on the CPU -- the token grouping behind the
deterministic wte gradient, and a token id outside the vocabulary as one error line.
*/
#include "../../llmc/cuda/encoder.cuh"
#include "test_common.h"

// ----------------------------------------------------------------------------
// encoder backward grouping

static void test_token_groups(void) {
    const int inp[] = {5, 3, 5, 0, 9, 3, 5, 9};
    const int BT = 8, V = 16;
    TokenGroups g;
    token_groups_init(&g, BT, V);
    token_groups_build(&g, inp);
    CHECK(g.num_groups == 4, "4 distinct tokens (got %d)", g.num_groups);
    int bad = 0;
    for (int k = 0; k < g.num_groups; k++) {
        if (k > 0) { bad += g.token_ids[k] <= g.token_ids[k - 1]; }
        for (int i = g.starts[k]; i < g.starts[k + 1]; i++) {
            bad += inp[g.positions[i]] != g.token_ids[k];
            if (i > g.starts[k]) { bad += g.positions[i] <= g.positions[i - 1]; }  // fixed order: deterministic sums
        }
    }
    CHECK(bad == 0, "groups sorted by token, positions in increasing order, each of the right token");
    CHECK(g.starts[g.num_groups] == BT, "all %d positions are in a group", BT);
    // rebuilding with another batch reuses the buffers correctly
    const int inp2[] = {1, 1, 1, 1, 1, 1, 1, 1};
    token_groups_build(&g, inp2);
    CHECK(g.num_groups == 1 && g.starts[1] == 8 && g.token_ids[0] == 1, "a batch of one token is one group");
    token_groups_free(&g);
}

static void build_bad_token(void* arg) {
    (void)arg;
    const int inp[] = {1, 2, 99};
    TokenGroups g;
    token_groups_init(&g, 3, 16);
    token_groups_build(&g, inp);
}

int main(void) {
    test_token_groups();
    expect_die("token id outside the vocabulary", build_bad_token, NULL, "99", "encoder_backward");
    return test_summary();
}
