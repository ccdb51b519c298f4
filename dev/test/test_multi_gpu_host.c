/*
dev/test/test_multi_gpu_host.c: the host half of llmc/multi_gpu.cuh on the CPU -- the multi-process flag
rules, NCCL element counts and offsets for every layer's gradient ranges, ZeRO-1 ownership and padding.
*/
#include "../../llmc/multi_gpu.cuh"
#include "test_common.h"

static void test_check_args(void) {
    CHECK(multi_gpu_check_args(4, 3, 8, "fs", "", "/shared/x", 0, 1) == NULL, "fs init with a directory is valid");
    CHECK(multi_gpu_check_args(4, 0, 8, "fs", "", "", 0, 1) != NULL, "fs init without -pf is refused");
    CHECK(multi_gpu_check_args(2, 0, 8, "tcp", "", "", 0, 1) != NULL, "tcp init without -ps is refused");
    CHECK(multi_gpu_check_args(2, 1, 8, "tcp", "10.0.0.1", "", 0, 1) == NULL, "tcp init with -ps is valid");
    CHECK(multi_gpu_check_args(2, 0, 8, "mpi", "", "", 0, 1) != NULL, "mpi init without MPI is refused");
    CHECK(multi_gpu_check_args(2, 0, 8, "mpi", "", "", 1, 1) == NULL, "mpi init with MPI is valid");
    CHECK(multi_gpu_check_args(2, 0, 8, "pmi", "", "", 1, 1) != NULL, "an unknown init method is refused");
    CHECK(multi_gpu_check_args(2, 2, 8, "mpi", "", "", 1, 1) != NULL, "rank >= processes is refused");
    CHECK(multi_gpu_check_args(2, 0, 8, "mpi", "", "", 1, 0) != NULL, "several processes without NCCL are refused");
    CHECK(multi_gpu_check_args(1, 0, 8, "mpi", "", "", 0, 0) == NULL, "one process needs neither MPI nor NCCL");
}

// ----------------------------------------------------------------------------
// multi-GPU reduction plan

// a small model: 3 layers of 2 heads, C 64, V 100 padded to 128, maxT 32
static GPT2Config small_config(void) {
    GPT2Config c = {.max_seq_len = 32, .vocab_size = 100, .padded_vocab_size = 128, .num_layers = 3, .num_heads = 2, .channels = 64};
    return c;
}

static void test_layer_ranges_cover_everything(void) {
    GPT2Config cfg = small_config();
    size_t n = gpt2_num_parameters(&cfg);
    unsigned char* seen = (unsigned char*)calloc(n, 1);
    GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];
    int bad = 0;
    for (int l = -1; l < cfg.num_layers; l++) {
        int k = grad_layer_ranges(&cfg, l, ranges);
        bad += k != (l < 0 ? 4 : 12);
        for (int r = 0; r < k; r++) {
            for (size_t i = ranges[r].lo; i < ranges[r].hi && i < n; i++) { seen[i]++; }
            bad += ranges[r].hi > n;
        }
    }
    size_t not_once = 0;
    for (size_t i = 0; i < n; i++) { not_once += seen[i] != 1; }
    free(seen);
    CHECK(bad == 0, "12 ranges per layer, 4 outside the layers, all within the vector");
    CHECK(not_once == 0, "every gradient element is reduced exactly once (%zu were not)", not_once);
}

static void test_reduce_ops(void) {
    GPT2Config cfg = small_config();
    size_t n = gpt2_num_parameters(&cfg);
    const int nprocs[] = {1, 2, 3, 4, 7, 8, 64};
    for (size_t pi = 0; pi < sizeof(nprocs) / sizeof(nprocs[0]); pi++) {
        int nproc = nprocs[pi];
        for (int zero = 0; zero <= 1; zero++) {
            size_t covered = 0;
            int bad = 0;
            for (int l = -1; l < cfg.num_layers; l++) {
                GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];
                int k = grad_layer_ranges(&cfg, l, ranges);
                for (int r = 0; r < k; r++) {
                    GradReduceOp ops[128];
                    int m = grad_reduce_ops(ranges[r].lo, ranges[r].hi, n, zero, nproc, ops, 128);
                    size_t expect_next = ranges[r].lo;
                    bad += m < 1;
                    for (int o = 0; o < m; o++) {
                        bad += ops[o].offset != expect_next || ops[o].count == 0;  // contiguous tiling, no empty call
                        expect_next = ops[o].offset + ops[o].count;
                        covered += ops[o].count;
                        if (zero == 0 || nproc == 1) {
                            bad += ops[o].root != -1;
                        } else {
                            // the op lies inside the shard of its root
                            ZeroShard s = zero_shard(n, 1, nproc, ops[o].root);
                            bad += ops[o].root < 0 || ops[o].root >= nproc || ops[o].offset < s.offset ||
                                   ops[o].offset + ops[o].count > s.offset + s.size;
                        }
                    }
                    bad += expect_next != ranges[r].hi;
                }
            }
            CHECK(bad == 0, "nproc %d ZeRO-%d: ops tile each range inside their owners' shards", nproc, zero);
            CHECK(covered == n, "nproc %d ZeRO-%d: counts are ELEMENTS summing to the %zu parameters (got %zu)", nproc, zero, n, covered);
        }
    }
    // the lnfw tensor (C floats) is one all-reduce of C elements, not 4*C bytes
    GradReduceOp op;
    CHECK(grad_reduce_ops(1000, 1000 + 768, 2000000, 0, 8, &op, 1) == 1 && op.count == 768, "an all-reduce of 768 floats has count 768");
    CHECK(grad_reduce_ops(5, 5, 100, 1, 4, &op, 1) == 0, "an empty range needs no NCCL call");
    GradReduceOp few[2];
    CHECK(grad_reduce_ops(0, 100, 100, 1, 8, few, 2) == 0, "too many ops for the buffer is reported, not overflowed");
}

static void test_zero_padding(void) {
    const size_t sizes[] = {1, 2, 10, 127, 124475904, 124475905};
    int bad = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        for (int nproc = 1; nproc <= 9; nproc++) {
            size_t padded = zero_padded_size(sizes[i], 1, nproc);
            size_t per = padded / (size_t)nproc;
            bad += padded < sizes[i] || padded % (size_t)nproc != 0;
            for (int r = 0; r < nproc; r++) {
                ZeroShard s = zero_shard(sizes[i], 1, nproc, r);
                // the all-gather sends `per` elements from r * per: inside the allocation, covering the shard
                bad += (size_t)r * per + per > padded || (s.size > 0 && s.offset != (size_t)r * per) || s.size > per;
            }
        }
    }
    CHECK(bad == 0, "ZeRO-1 padding: equal all-gather chunks stay inside the allocation and match zero_shard");
    CHECK(zero_padded_size(10, 0, 4) == 10, "no padding without ZeRO-1");
}

int main(void) {
    test_check_args();
    test_layer_ranges_cover_everything();
    test_reduce_ops();
    test_zero_padding();
    return test_summary();
}
