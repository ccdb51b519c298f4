/*
dev/test/test_cuda_host.c: the host-side logic of the GPU trainer, run on the CPU.
No GPU is needed: every function here is plain C that train_gpt2.cu / test_gpt2.cu call.

    bf16 rounding (layer_math.h)     round-to-nearest-even and stochastic rounding used by the kernels
    command line (args.h)            every flag of the help text is parsed; the multi-process flags exist
    multi-GPU plan (multi_gpu.cuh)   NCCL element counts and offsets, ZeRO-1 ownership, flag validation
    encoder backward (encoder.cuh)   the token grouping behind the deterministic wte gradient
    GEMM layouts (matmul.cuh, attention.cuh)  every cuBLAS call's transposes, leading dimensions and
                                     operand roles, run through a CPU model of cuBLAS and compared
                                     with plain row-major loops
    cuDNN attention (cudnn_att.h)    q/k/v/out/stats strides against the permute index maps, 16-byte
                                     alignment, stats sizing, the graph cache key, the shape rules
    test_gpt2cu logic (tensor_check.h)  comparisons fail on corrupted inputs; exit codes
    training loop (trainer_host.cuh) -v 0 never divides by zero, batch arithmetic, clipping, outlier skip
*/
#include <math.h>
#include <stdint.h>
#include "../../llmc/utils.h"
#include "../../llmc/layer_math.h"
#include "../../llmc/args.h"
#include "../../llmc/zero.h"
#include "../../llmc/model_config.h"
#include "../../llmc/multi_gpu.cuh"
#include "../../llmc/encoder.cuh"
#include "../../llmc/matmul.cuh"
#include "../../llmc/attention.cuh"
#include "../../llmc/cudnn_att.h"
#include "../../llmc/fused_classifier.cuh"
#include "../../llmc/tensor_check.h"
#include "../../llmc/trainer_host.cuh"
#include "test_common.h"

static uint32_t float_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof(u)); return u; }
static float bits_float(uint32_t u) { float f; memcpy(&f, &u, sizeof(f)); return f; }

// ----------------------------------------------------------------------------
// bf16 rounding

static void test_bf16_round_nearest(void) {
    CHECK(bf16_bits_round_nearest(1.0f) == 0x3F80, "1.0 -> 0x3F80");
    CHECK(bf16_bits_round_nearest(-2.0f) == 0xC000, "-2.0 -> 0xC000");
    CHECK(bf16_bits_round_nearest(bits_float(0x3F808000u)) == 0x3F80, "tie rounds to even (down)");
    CHECK(bf16_bits_round_nearest(bits_float(0x3F818000u)) == 0x3F82, "tie rounds to even (up)");
    CHECK(bf16_bits_round_nearest(bits_float(0x3F808001u)) == 0x3F81, "above the tie rounds up");
    uint16_t nan_bits = bf16_bits_round_nearest(bits_float(0x7F800001u));
    CHECK((nan_bits & 0x7F80) == 0x7F80 && (nan_bits & 0x007F) != 0, "a NaN with low payload bits stays NaN (0x%04x)", nan_bits);
    CHECK(bf16_bits_round_nearest(INFINITY) == 0x7F80, "inf stays inf");
    CHECK(bf16_bits_to_float(0x3F80) == 1.0f, "0x3F80 -> 1.0");
}

static void test_bf16_stochastic_round(void) {
    // exactly representable values never change
    int changed = 0;
    const float exact[] = {0.0f, 1.0f, -3.5f, 0.15625f, 65536.0f, -1e-20f};
    for (size_t i = 0; i < sizeof(exact) / sizeof(exact[0]); i++) {
        float x = bf16_bits_to_float(bf16_bits_round_nearest(exact[i]));
        for (uint32_t r = 0; r < 70000; r += 7) {
            if (bf16_bits_to_float(bf16_bits_stochastic_round(x, llmc_hash_u32(r, 1))) != x) { changed++; }
        }
    }
    CHECK(changed == 0, "bf16-representable values are unchanged by stochastic rounding (%d changed)", changed);

    // every result is one of the two neighbours, and the mean is the input (unbiased)
    const float values[] = {1.0f + 1.0f / 3.0f, -0.7f, 3.14159265f, 1e-3f, -12345.678f};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        float x = values[i];
        uint32_t u = float_bits(x);
        float lo = bits_float(u & 0xFFFF0000u);
        float hi = bits_float((u & 0xFFFF0000u) + 0x10000u);
        int outside = 0;
        double sum = 0.0;
        const int n = 200000;
        for (int k = 0; k < n; k++) {
            float y = bf16_bits_to_float(bf16_bits_stochastic_round(x, llmc_hash_u32((uint32_t)k, 12345u)));
            if (y != lo && y != hi) { outside++; }
            sum += y;
        }
        double mean = sum / n;
        double ulp = fabs((double)hi - (double)lo);
        CHECK(outside == 0, "%g: every result is a bf16 neighbour (%d were not)", x, outside);
        CHECK(fabs(mean - x) < 0.01 * ulp, "%g: mean of stochastic rounding %.9g is within 1%% of an ulp", x, mean);
    }
    // the random bits decide: threshold 0 rounds away unless exact, threshold 0xFFFF truncates
    float x = bits_float(0x3F800001u);
    CHECK(bf16_bits_stochastic_round(x, 0) == 0x3F81, "random 0: any dropped bits round away from zero");
    CHECK(bf16_bits_stochastic_round(x, 0xFFFF) == 0x3F80, "random 0xFFFF: truncates");
    CHECK(bf16_bits_stochastic_round(INFINITY, 0) == 0x7F80, "inf stays inf");
    uint16_t nan_bits = bf16_bits_stochastic_round(bits_float(0x7F800001u), 0xFFFF);
    CHECK((nan_bits & 0x7F80) == 0x7F80 && (nan_bits & 0x007F) != 0, "NaN stays NaN (0x%04x)", nan_bits);
}

static void test_hash(void) {
    CHECK(llmc_hash_u32(5, 7) == llmc_hash_u32(5, 7), "the hash is deterministic");
    int same = 0;
    double mean = 0.0;
    const int n = 100000;
    for (int i = 0; i < n; i++) {
        if (llmc_hash_u32((uint32_t)i, 1) == llmc_hash_u32((uint32_t)i, 2)) { same++; }
        mean += (double)(llmc_hash_u32((uint32_t)i, 99) & 0xFFFFu);
    }
    mean /= n;
    CHECK(same < 5, "different seeds give different streams (%d equal)", same);
    CHECK(fabs(mean - 32767.5) < 400.0, "low 16 bits are uniform on average (mean %.1f)", mean);
}

// ----------------------------------------------------------------------------
// command line: the table behind --help is the table behind the parser

static void test_help_matches_parser(void) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/llmc_help_%d.txt", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    FILE* f = fopen(path, "w+");
    if (f == NULL) { perror(path); exit(2); }
    args_print_help(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, "train_gpt2cu", "summary", f);
    fflush(f);
    size_t n = (size_t)ftell(f);
    rewind(f);
    char* help = (char*)calloc(n + 1, 1);
    if (fread(help, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
    unlink(path);
    // every flag printed by --help is accepted by the parser with its default value
    int parsed = 0, flags_in_help = 0;
    for (char* line = strtok(help, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char flag[32];
        if (sscanf(line, " %31s", flag) != 1 || flag[0] != '-') { continue; }
        flags_in_help++;
        for (int i = 0; i < TRAIN_ARG_COUNT; i++) {
            if (strcmp(TRAIN_ARG_TABLE[i].flag, flag) != 0) { continue; }
            TrainArgs a;
            char* argv[] = {(char*)"train_gpt2cu", flag, (char*)TRAIN_ARG_TABLE[i].default_value, NULL};
            args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &a, 3, argv, "");
            parsed++;
        }
    }
    free(help);
    CHECK(flags_in_help == TRAIN_ARG_COUNT, "help lists all %d flags (listed %d)", TRAIN_ARG_COUNT, flags_in_help);
    CHECK(parsed == flags_in_help, "every flag in the help text is parsed (%d of %d)", parsed, flags_in_help);
    // the flags train_gpt2cu reads exist under these exact names
    const char* needed[] = {"-i", "-j", "-e", "-o", "-b", "-t", "-d", "-x", "-k", "-l", "-u", "-q", "-c", "-v", "-m", "-s",
                            "-g", "-n", "-nk", "-y", "-a", "-h", "-he", "-z", "-r", "-w", "-sl", "-sg",
                            "-pn", "-pr", "-pg", "-pi", "-ps", "-pf"};
    int missing = 0;
    for (size_t k = 0; k < sizeof(needed) / sizeof(needed[0]); k++) {
        int found = 0;
        for (int i = 0; i < TRAIN_ARG_COUNT; i++) { found |= strcmp(TRAIN_ARG_TABLE[i].flag, needed[k]) == 0; }
        if (!found) { printf("  missing flag %s\n", needed[k]); missing++; }
    }
    CHECK(missing == 0, "the GPU trainer's flags are all in the table (%d missing)", missing);
}

static void parse_pm(void* arg) {
    (void)arg;
    TrainArgs a;
    char* argv[] = {(char*)"train_gpt2cu", (char*)"-pm", (char*)"tcp", NULL};
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &a, 3, argv, "");
}

static void test_multi_gpu_flags(void) {
    expect_die("-pm is not a flag", parse_pm, NULL, "-pm", "--help");
    TrainArgs a;
    char* argv[] = {(char*)"t", (char*)"-pi", (char*)"fs", (char*)"-pf", (char*)"/shared/x", (char*)"-pn", (char*)"4",
                    (char*)"-pr", (char*)"3", NULL};
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &a, 9, argv, "");
    CHECK(strcmp(a.nccl_init_method, "fs") == 0 && strcmp(a.fs_path, "/shared/x") == 0 && a.num_processes == 4 &&
          a.process_rank == 3, "-pi -pf -pn -pr parse into the fields multi_gpu_init reads");
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

static GPT2Config small_config(void) {
    GPT2Config c;
    c.max_seq_len = 32;
    c.vocab_size = 100;
    c.padded_vocab_size = 128;
    c.num_layers = 3;
    c.num_heads = 2;
    c.channels = 64;
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

// ----------------------------------------------------------------------------
// GEMM layouts: the row-major <-> column-major bookkeeping of every cuBLAS call

static float* random_array(size_t n, unsigned seed) {
    float* x = (float*)malloc(n * sizeof(float));
    unsigned s = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xFFFF) / 65536.0f - 0.5f;
    }
    return x;
}

static double max_abs_diff(const float* a, const float* b, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d) { m = d; }
    }
    return m;
}

static void test_linear_gemm_specs(void) {
    const int BT = 6, C = 5, OC = 7;
    float* inp = random_array((size_t)BT * C, 1);
    float* weight = random_array((size_t)OC * C, 2);
    float* dout = random_array((size_t)BT * OC, 3);
    float* got = (float*)calloc((size_t)BT * OC + (size_t)OC * C + (size_t)BT * C, sizeof(float));
    float* ref = (float*)calloc((size_t)BT * OC + (size_t)OC * C + (size_t)BT * C, sizeof(float));
    const float* ops[LIN_NUM_OPERANDS] = {inp, weight, NULL, NULL, NULL, dout};
    // forward: out (BT, OC) = inp @ weight^T
    GemmSpec f = linear_forward_spec(BT, C, OC);
    CHECK(f.d == LIN_OUT && f.m * f.n == BT * OC, "the forward GEMM writes out");
    gemm_reference(&f, ops[f.a], ops[f.b], got, 1.0f, 0.0f);
    for (int n = 0; n < BT; n++) {
        for (int o = 0; o < OC; o++) {
            float sum = 0.0f;
            for (int c = 0; c < C; c++) { sum += inp[n * C + c] * weight[o * C + c]; }
            ref[n * OC + o] = sum;
        }
    }
    CHECK(max_abs_diff(got, ref, (size_t)BT * OC) < 1e-5, "linear forward spec computes inp @ weight^T (row-major)");
    // dinp (BT, C) = dout @ weight
    GemmSpec di = linear_dinp_spec(BT, C, OC);
    CHECK(di.d == LIN_DINP, "the dinp GEMM writes dinp");
    gemm_reference(&di, ops[di.a], ops[di.b], got, 1.0f, 0.0f);
    for (int n = 0; n < BT; n++) {
        for (int c = 0; c < C; c++) {
            float sum = 0.0f;
            for (int o = 0; o < OC; o++) { sum += dout[n * OC + o] * weight[o * C + c]; }
            ref[n * C + c] = sum;
        }
    }
    CHECK(max_abs_diff(got, ref, (size_t)BT * C) < 1e-5, "linear dinp spec computes dout @ weight");
    // dweight (OC, C) += dout^T @ inp, accumulating onto what is there
    GemmSpec dw = linear_dweight_spec(BT, C, OC);
    CHECK(dw.d == LIN_DWEIGHT, "the dweight GEMM writes dweight");
    for (int i = 0; i < OC * C; i++) { got[i] = 1.0f; }
    gemm_reference(&dw, ops[dw.a], ops[dw.b], got, 1.0f, 1.0f);
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++) {
            float sum = 1.0f;
            for (int n = 0; n < BT; n++) { sum += dout[n * OC + o] * inp[n * C + c]; }
            ref[o * C + c] = sum;
        }
    }
    CHECK(max_abs_diff(got, ref, (size_t)OC * C) < 1e-5, "linear dweight spec accumulates dout^T @ inp");
    free(inp); free(weight); free(dout); free(got); free(ref);
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
    float* ref = (float*)calloc(tt > th ? tt : th, sizeof(float));
    float* ops[ATT_NUM_OPERANDS] = {q, k, v, att, y, dy, datt, dq, dk, dv};
    const float scale = 1.0f / sqrtf((float)HS);
    // the order the trainer runs them in, with the causal softmax (forward and backward) in between
    GemmSpec s = attention_gemm_spec(ATT_GEMM_SCORES, T, HS, heads);
    gemm_reference(&s, ops[s.a], ops[s.b], ops[s.d], 1.0f, 0.0f);
    for (int h = 0; h < heads; h++) {
        for (int t = 0; t < T; t++) {
            for (int t2 = 0; t2 < T; t2++) {
                float dot = 0.0f;
                for (int i = 0; i < HS; i++) { dot += q[(h * T + t) * HS + i] * k[(h * T + t2) * HS + i]; }
                ref[(h * T + t) * T + t2] = dot;
            }
        }
    }
    CHECK(s.d == ATT_ATT && max_abs_diff(att, ref, tt) < 1e-5, "scores spec: att[t][t2] = q[t] . k[t2] per head");
    for (size_t r = 0; r < (size_t)heads * T; r++) {  // causal softmax, as the kernel does
        int t = (int)(r % T);
        float* row = att + r * T;
        float mx = -INFINITY, sum = 0.0f;
        for (int j = 0; j <= t; j++) { mx = fmaxf(mx, scale * row[j]); }
        for (int j = 0; j <= t; j++) { sum += expf(scale * row[j] - mx); }
        for (int j = 0; j < T; j++) { row[j] = j <= t ? expf(scale * row[j] - mx) / sum : 0.0f; }
    }
    s = attention_gemm_spec(ATT_GEMM_Y, T, HS, heads);
    gemm_reference(&s, ops[s.a], ops[s.b], ops[s.d], 1.0f, 0.0f);
    for (int h = 0; h < heads; h++) {
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < HS; i++) {
                float sum = 0.0f;
                for (int t2 = 0; t2 < T; t2++) { sum += att[(h * T + t) * T + t2] * v[(h * T + t2) * HS + i]; }
                ref[(h * T + t) * HS + i] = sum;
            }
        }
    }
    CHECK(s.d == ATT_Y && max_abs_diff(y, ref, th) < 1e-5, "y spec: y = att @ v per head");
    s = attention_gemm_spec(ATT_GEMM_DATT, T, HS, heads);
    gemm_reference(&s, ops[s.a], ops[s.b], ops[s.d], 1.0f, 0.0f);
    for (int h = 0; h < heads; h++) {
        for (int t = 0; t < T; t++) {
            for (int t2 = 0; t2 < T; t2++) {
                float dot = 0.0f;
                for (int i = 0; i < HS; i++) { dot += dy[(h * T + t) * HS + i] * v[(h * T + t2) * HS + i]; }
                ref[(h * T + t) * T + t2] = dot;
            }
        }
    }
    CHECK(s.d == ATT_DATT && max_abs_diff(datt, ref, tt) < 1e-5, "datt spec: datt = dy @ v^T per head");
    s = attention_gemm_spec(ATT_GEMM_DV, T, HS, heads);
    gemm_reference(&s, ops[s.a], ops[s.b], ops[s.d], 1.0f, 0.0f);
    for (int h = 0; h < heads; h++) {
        for (int t2 = 0; t2 < T; t2++) {
            for (int i = 0; i < HS; i++) {
                float sum = 0.0f;
                for (int t = 0; t < T; t++) { sum += att[(h * T + t) * T + t2] * dy[(h * T + t) * HS + i]; }
                ref[(h * T + t2) * HS + i] = sum;
            }
        }
    }
    CHECK(s.d == ATT_DV && max_abs_diff(dv, ref, th) < 1e-5, "dv spec: dv = att^T @ dy per head");
    // dpreatt in place of datt (the softmax backward), then dq and dk
    for (int i = 0; i < (int)tt; i++) { datt[i] = att[i] * 0.5f + 0.1f * (float)(i % 3); }
    s = attention_gemm_spec(ATT_GEMM_DQ, T, HS, heads);
    gemm_reference(&s, ops[s.a], ops[s.b], ops[s.d], 1.0f, 0.0f);
    for (int h = 0; h < heads; h++) {
        for (int t = 0; t < T; t++) {
            for (int i = 0; i < HS; i++) {
                float sum = 0.0f;
                for (int t2 = 0; t2 < T; t2++) { sum += datt[(h * T + t) * T + t2] * k[(h * T + t2) * HS + i]; }
                ref[(h * T + t) * HS + i] = sum;
            }
        }
    }
    CHECK(s.d == ATT_DQ && max_abs_diff(dq, ref, th) < 1e-5, "dq spec: dq = dpreatt @ k per head");
    s = attention_gemm_spec(ATT_GEMM_DK, T, HS, heads);
    gemm_reference(&s, ops[s.a], ops[s.b], ops[s.d], 1.0f, 0.0f);
    for (int h = 0; h < heads; h++) {
        for (int t2 = 0; t2 < T; t2++) {
            for (int i = 0; i < HS; i++) {
                float sum = 0.0f;
                for (int t = 0; t < T; t++) { sum += datt[(h * T + t) * T + t2] * q[(h * T + t) * HS + i]; }
                ref[(h * T + t2) * HS + i] = sum;
            }
        }
    }
    CHECK(s.d == ATT_DK && max_abs_diff(dk, ref, th) < 1e-5, "dk spec: dk = dpreatt^T @ q per head");
    free(q); free(k); free(v); free(dy); free(att); free(datt); free(y); free(dq); free(dk); free(dv); free(ref);
}

// ----------------------------------------------------------------------------
// index maps and partitions used inside the kernels

static void test_row_chunks(void) {
    const int Ns[] = {1, 7, 32, 33, 1000, 65536};
    int bad = 0;
    for (size_t i = 0; i < sizeof(Ns) / sizeof(Ns[0]); i++) {
        int N = Ns[i];
        int next = 0;
        for (int chunk = 0; chunk < 32; chunk++) {
            int start, end;
            row_chunk(N, 32, chunk, &start, &end);
            bad += start != next || end < start || end > N;
            next = end;
        }
        bad += next != N;
    }
    CHECK(bad == 0, "the 32 row chunks of the column sums tile [0, N) in order, for N below and above 32");
}

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

// every element cuDNN reads or writes through the strided layouts is the one the cuBLAS path's
// permute kernels use: q/k/v inside the (B, T, 3, NH, HS) qkv buffer, out in (B, T, NH, HS)
static void test_cudnn_att_layouts(void) {
    const int shapes[][4] = {{2, 3, 4, 8}, {1, 5, 3, 16}, {3, 4, 2, 64}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], HS = shapes[s][3], C = NH * HS;
        CudnnAttLayout L[CUDNN_ATT_NUM_LAYOUTS];
        for (int w = 0; w < CUDNN_ATT_NUM_LAYOUTS; w++) { L[w] = cudnn_att_layout(w, B, T, NH, HS); }
        size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nstats = cudnn_att_stats_count(B, T, NH);
        unsigned char* seen_qkv = (unsigned char*)calloc(nqkv, 1);
        unsigned char* seen_out = (unsigned char*)calloc(nout, 1);
        unsigned char* seen_stats = (unsigned char*)calloc(nstats, 1);
        int bad = 0, bad_stats = 0;
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    for (int d = 0; d < HS; d++) {
                        size_t idx = (((size_t)b * NH + h) * T + t) * HS + d;  // head-major (B, NH, T, HS)
                        size_t qo = attention_qkv_offset(idx, T, NH, HS);
                        for (int w = CUDNN_ATT_Q; w <= CUDNN_ATT_V; w++) {
                            int64_t at = cudnn_att_layout_index(&L[w], b, h, t, d);
                            bad += at != (int64_t)(qo + (size_t)w * C);
                            if (at >= 0 && (size_t)at < nqkv) { seen_qkv[at]++; } else { bad++; }
                        }
                        int64_t o = cudnn_att_layout_index(&L[CUDNN_ATT_O], b, h, t, d);
                        bad += o != (int64_t)attention_concat_offset(idx, T, NH, HS);
                        if (o >= 0 && (size_t)o < nout) { seen_out[o]++; } else { bad++; }
                    }
                    int64_t st = cudnn_att_layout_index(&L[CUDNN_ATT_STATS], b, h, t, 0);
                    bad_stats += st != ((int64_t)b * NH + h) * T + t;
                    if (st >= 0 && (size_t)st < nstats) { seen_stats[st]++; } else { bad_stats++; }
                }
            }
        }
        for (size_t i = 0; i < nqkv; i++) { bad += seen_qkv[i] != 1; }
        for (size_t i = 0; i < nout; i++) { bad += seen_out[i] != 1; }
        for (size_t i = 0; i < nstats; i++) { bad_stats += seen_stats[i] != 1; }
        CHECK(bad == 0, "cuDNN q/k/v/out strides (B=%d T=%d NH=%d HS=%d) match the permute maps and cover qkv and out once", B, T, NH, HS);
        CHECK(bad_stats == 0, "cuDNN stats (B=%d T=%d NH=%d) are packed (B, NH, T) and fill exactly cudnn_att_stats_count", B, T, NH);
        // the frontend refuses (or the kernels misread) bf16 operands whose strides or offsets are not 16-byte multiples
        int misaligned = 0;
        for (int w = CUDNN_ATT_Q; w <= CUDNN_ATT_O; w++) {
            for (int k = 0; k < 3; k++) { misaligned += (L[w].stride[k] * 2) % 16 != 0; }
            misaligned += L[w].stride[3] != 1 || (L[w].offset * 2) % 16 != 0 || L[w].dim[3] != HS;
        }
        CHECK(misaligned == 0, "q/k/v/out strides and offsets are 16-byte multiples in bf16 for HS=%d", HS);
        CHECK(L[CUDNN_ATT_STATS].dim[3] == 1 && L[CUDNN_ATT_STATS].dim[2] == T && L[CUDNN_ATT_STATS].dim[1] == NH,
              "stats dims are (B, NH, T, 1)");
        free(seen_qkv);
        free(seen_out);
        free(seen_stats);
    }
    // per-layer stats: at least the count, 256-byte aligned, less than 64 floats of padding
    int bad = 0;
    for (int B = 1; B <= 5; B++) {
        for (int T = 1; T <= 70; T += 3) {
            size_t n = cudnn_att_stats_count(B, T, 3), stride = cudnn_att_stats_layer_stride(B, T, 3);
            bad += stride < n || stride % 64 != 0 || stride - n >= 64;
        }
    }
    CHECK(bad == 0, "stats layer stride: >= count, a multiple of 64 floats, under 64 floats of padding");
    // GPT-2 124M at B=4, T=1024: one layer's stats replace a bf16 (B, NH, T, T) matrix 512 times larger
    size_t att_bytes = (size_t)4 * 12 * 1024 * 1024 * 2, stats_bytes = cudnn_att_stats_layer_stride(4, 1024, 12) * sizeof(float);
    CHECK(stats_bytes == (size_t)4 * 12 * 1024 * 4 && att_bytes / stats_bytes == 512,
          "GPT-2 124M B=4 T=1024: stats %zu bytes per layer vs %zu for the attention matrix", stats_bytes, att_bytes);
}

// the graph cache key: one key per (B, T, NH, HS, is_inference), unpacked back exactly
static void test_cudnn_att_key(void) {
    const int Bs[] = {1, 2, 4, 64, (1 << 21) - 1}, Ts[] = {2, 3, 1024, (1 << 20) - 1};
    const int NHs[] = {1, 12, 25, 4095}, HSs[] = {8, 64, 128, 256};
    uint64_t keys[5 * 4 * 4 * 4 * 2];
    int n = 0, bad_roundtrip = 0;
    for (int a = 0; a < 5; a++) {
        for (int b = 0; b < 4; b++) {
            for (int c = 0; c < 4; c++) {
                for (int d = 0; d < 4; d++) {
                    for (int inf = 0; inf < 2; inf++) {
                        CHECK(cudnn_att_shape_error(Bs[a], Ts[b], NHs[c], HSs[d]) == NULL,
                              "B=%d T=%d NH=%d HS=%d is a shape cuDNN attention accepts", Bs[a], Ts[b], NHs[c], HSs[d]);
                        uint64_t key = cudnn_att_key(Bs[a], Ts[b], NHs[c], HSs[d], inf);
                        int B, T, NH, HS, is_inference;
                        cudnn_att_key_unpack(key, &B, &T, &NH, &HS, &is_inference);
                        bad_roundtrip += B != Bs[a] || T != Ts[b] || NH != NHs[c] || HS != HSs[d] || is_inference != inf;
                        keys[n++] = key;
                    }
                }
            }
        }
    }
    int dup = 0;
    for (int i = 0; i < n; i++) {
        for (int j = i + 1; j < n; j++) { dup += keys[i] == keys[j]; }
    }
    CHECK(bad_roundtrip == 0, "cache keys unpack to their (B, T, NH, HS, is_inference), boundary values included");
    CHECK(dup == 0, "%d shapes give %d distinct cache keys", n, n - dup);
    CHECK(cudnn_att_key(4, 64, 12, 64, 5) == cudnn_att_key(4, 64, 12, 64, 1), "any non-zero is_inference is one graph");
    CHECK(cudnn_att_key(4, 64, 12, 64, 0) != cudnn_att_key(4, 64, 12, 64, 1), "training and inference graphs differ");
}

static void test_cudnn_att_shape_rules(void) {
    CHECK(cudnn_att_shape_error(4, 1024, 12, 64) == NULL, "GPT-2 124M (12 heads of 64) is accepted");
    CHECK(cudnn_att_shape_error(1, 2, 1, 8) == NULL, "the smallest shape is accepted");
    const int bad_shapes[][4] = {
        {0, 64, 12, 64}, {4, 0, 12, 64}, {4, 1, 12, 64}, {4, 64, 0, 64}, {4, 64, 12, 0}, {-1, 64, 12, 64},
        {4, 64, 12, 4}, {4, 64, 12, 60}, {4, 64, 12, 264}, {1 << 21, 64, 12, 64}, {4, 1 << 20, 12, 64}, {4, 64, 4096, 64},
    };
    for (size_t i = 0; i < sizeof(bad_shapes) / sizeof(bad_shapes[0]); i++) {
        const int* s = bad_shapes[i];
        const char* why = cudnn_att_shape_error(s[0], s[1], s[2], s[3]);
        CHECK(why != NULL && strlen(why) > 10 && strchr(why, '\n') == NULL,
              "B=%d T=%d NH=%d HS=%d is refused with a one-line reason", s[0], s[1], s[2], s[3]);
    }
    CHECK(strstr(cudnn_att_shape_error(4, 64, 12, 60), "multiple of 8") != NULL, "HS=60 is refused for its alignment");
}

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

// ----------------------------------------------------------------------------
// test_gpt2cu's comparison logic

static void test_tensor_check_catches_corruption(void) {
    const size_t n = 1000;
    float* ref = (float*)malloc(n * sizeof(float));
    float* got = (float*)malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { ref[i] = sinf((float)i); got[i] = ref[i] + 1e-7f; }
    TensorCheck c = tensor_check(got, ref, n, 1e-5, 0.0);
    CHECK(c.ok, "a close tensor passes");
    got[500] += 0.01f;
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    CHECK(!c.ok && c.worst_index == 500, "one corrupted element fails and is located");
    got[500] = ref[500];
    got[7] = NAN;
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    CHECK(!c.ok && c.num_nonfinite == 1, "a NaN fails (it never compares greater than a tolerance)");
    got[7] = INFINITY;
    c = tensor_check(got, ref, n, 1e9, 0.0);
    CHECK(!c.ok, "an inf fails even with a huge tolerance");
    c = tensor_check(got, ref, 0, 1.0, 1.0);
    CHECK(!c.ok, "an empty comparison is not a pass");

    FILE* devnull = fopen("/dev/null", "w");
    CheckReport r = {0, 0};
    CHECK(check_report_exit_code(&r) == 1, "no checks at all -> exit code 1");
    got[7] = ref[7];
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    check_table_row(devnull, &r, "good", &c);
    CHECK(check_report_exit_code(&r) == 0, "all checks passed -> exit code 0");
    got[3] *= 2.0f;
    c = tensor_check(got, ref, n, 1e-5, 0.0);
    check_table_row(devnull, &r, "bad", &c);
    CHECK(check_report_exit_code(&r) == 1 && r.failures == 1, "one failed check -> exit code 1");
    // bitwise resume check catches a 1-ulp difference
    CheckReport rb = {0, 0};
    float a[3] = {1.0f, 2.0f, 3.0f}, b[3] = {1.0f, 2.0f, 3.0f};
    check_bitwise(devnull, &rb, "same", a, b, 3);
    b[2] = bits_float(float_bits(3.0f) + 1);
    check_bitwise(devnull, &rb, "ulp", a, b, 3);
    CHECK(rb.checks == 2 && rb.failures == 1, "bitwise check passes identical and fails 1-ulp arrays");
    CHECK(check_scalar(devnull, &rb, "loss", 5.0f, 5.0f + 1e-3f, 1e-4) == 0, "a loss off by 1e-3 fails a 1e-4 tolerance");
    fclose(devnull);
    free(ref);
    free(got);

    GpuTolerances f32 = gpu_tolerances(0), b16 = gpu_tolerances(1);
    CHECK(f32.logits_rtol < b16.logits_rtol && f32.loss_atol < b16.loss_atol && f32.grad_rtol < b16.grad_rtol &&
          f32.step_loss_atol < b16.step_loss_atol, "FP32 tolerances are tighter than BF16 for every check");
    CHECK(b16.grad_rtol <= 0.1 && b16.logits_rtol <= 0.02, "BF16 tolerances stay per tensor and relative, not a blanket");
}

// a tiny debug state for small_config with B=1, T=2, nsteps=2
static void write_debug_state(const char* path, int magic, size_t truncate_by) {
    GPT2Config cfg = small_config();
    size_t n = gpt2_num_parameters(&cfg);
    int header[256];
    memset(header, 0, sizeof(header));
    header[0] = magic; header[1] = 2; header[2] = 1; header[3] = 2; header[4] = 2;
    float hp[6] = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.0f, 1.0f};
    memcpy(&header[5], hp, sizeof(hp));
    size_t bytes = sizeof(header) + 2 * 2 * sizeof(int) + 2 * 100 * sizeof(float) + sizeof(float) + n * sizeof(float) + 2 * sizeof(float);
    char* buf = (char*)calloc(bytes, 1);
    memcpy(buf, header, sizeof(header));
    int tokens[4] = {1, 2, 2, 3};
    memcpy(buf + sizeof(header), tokens, sizeof(tokens));
    float loss = 4.5f;
    memcpy(buf + sizeof(header) + sizeof(tokens) + 200 * sizeof(float), &loss, sizeof(loss));
    write_bytes(path, buf, bytes - truncate_by);
    free(buf);
}

static char g_dir[4096];

static void read_state_truncated(void* arg) {
    (void)arg;
    char path[4200];
    snprintf(path, sizeof(path), "%s/truncated.bin", g_dir);
    GPT2Config cfg = small_config();
    DebugState d;
    debug_state_read(&d, path, &cfg, gpt2_num_parameters(&cfg));
}

static void read_state_bad_magic(void* arg) {
    (void)arg;
    char path[4200];
    snprintf(path, sizeof(path), "%s/magic.bin", g_dir);
    GPT2Config cfg = small_config();
    DebugState d;
    debug_state_read(&d, path, &cfg, gpt2_num_parameters(&cfg));
}

static void test_debug_state(void) {
    make_temp_dir(g_dir, sizeof(g_dir));
    char path[4200];
    snprintf(path, sizeof(path), "%s/good.bin", g_dir);
    write_debug_state(path, DEBUG_STATE_MAGIC, 0);
    GPT2Config cfg = small_config();
    DebugState d;
    debug_state_read(&d, path, &cfg, gpt2_num_parameters(&cfg));
    CHECK(d.B == 1 && d.T == 2 && d.nsteps == 2 && d.y[1] == 3 && d.loss == 4.5f && fabsf(d.beta2 - 0.95f) < 1e-7f,
          "a debug state round-trips (B, T, steps, tokens, loss, optimizer settings)");
    debug_state_free(&d);
    snprintf(path, sizeof(path), "%s/truncated.bin", g_dir);
    write_debug_state(path, DEBUG_STATE_MAGIC, 4);
    expect_die("truncated debug state", read_state_truncated, NULL, "truncated.bin", "size mismatch");
    snprintf(path, sizeof(path), "%s/magic.bin", g_dir);
    write_debug_state(path, 12345, 0);
    expect_die("wrong magic", read_state_bad_magic, NULL, "magic.bin", "debug state");
    remove_tree(g_dir);
}

// ----------------------------------------------------------------------------
// training-state files as the GPU trainer writes them (one per rank, ZeRO shards, master weights)

static char g_state_dir[4096];

static void write_states(size_t n, int nproc, int zero, int with_master, int step) {
    for (int rank = 0; rank < nproc; rank++) {
        ZeroShard sh = zero_shard(n, zero, nproc, rank);
        size_t extra_bytes = state_extra_bytes(sh.size, with_master);
        float* m = random_array(sh.size + 1, 100 + rank);
        float* v = random_array(sh.size + 1, 200 + rank);
        float* master = with_master ? random_array(sh.size + 1, 300 + rank) : NULL;
        TrainerDetectors det;
        init_detector(&det.loss);
        init_detector(&det.grad_norm);
        for (int i = 0; i < 200; i++) { update_detector(&det.loss, 3.0 + 0.01 * i + rank); update_detector(&det.grad_norm, 1.0); }
        char* extra = (char*)malloc(extra_bytes);
        state_extra_pack(extra, &det, master, sh.size);
        TrainState st = train_state_describe(nproc, rank, zero, 1, step, 0xABCDEF12345ULL + rank, 3, 17, n, sh, extra_bytes);
        char path[4200];
        snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", g_state_dir, step, rank);
        train_state_write(path, &st, m, v, extra);
        free(m); free(v); free(master); free(extra);
    }
}

// reads every rank's file back and compares with what was written
static int read_states_back(size_t n, int nproc, int zero, int with_master, int step) {
    int bad = 0;
    for (int rank = 0; rank < nproc; rank++) {
        ZeroShard sh = zero_shard(n, zero, nproc, rank);
        size_t extra_bytes = state_extra_bytes(sh.size, with_master);
        TrainState expect = train_state_describe(nproc, rank, zero, 1, step, 0, 0, 0, n, sh, extra_bytes), got;
        float* m = (float*)malloc((sh.size + 1) * sizeof(float));
        float* v = (float*)malloc((sh.size + 1) * sizeof(float));
        char* extra = (char*)malloc(extra_bytes);
        char path[4200];
        snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", g_state_dir, step, rank);
        train_state_read(path, &expect, &got, m, v, extra);
        float* m_ref = random_array(sh.size + 1, 100 + rank);
        float* v_ref = random_array(sh.size + 1, 200 + rank);
        bad += memcmp(m, m_ref, sh.size * sizeof(float)) != 0 || memcmp(v, v_ref, sh.size * sizeof(float)) != 0;
        TrainerDetectors det;
        float* master = with_master ? (float*)malloc((sh.size + 1) * sizeof(float)) : NULL;
        state_extra_unpack(extra, &det, master, sh.size);
        if (with_master) {
            float* master_ref = random_array(sh.size + 1, 300 + rank);
            bad += memcmp(master, master_ref, sh.size * sizeof(float)) != 0;
            free(master_ref);
        }
        // the restored detectors continue exactly as the saved ones would
        TrainerDetectors fresh;
        init_detector(&fresh.loss);
        init_detector(&fresh.grad_norm);
        for (int i = 0; i < 200; i++) { update_detector(&fresh.loss, 3.0 + 0.01 * i + rank); update_detector(&fresh.grad_norm, 1.0); }
        double z1 = update_detector(&det.loss, 5.0), z2 = update_detector(&fresh.loss, 5.0);
        bad += memcmp(&z1, &z2, sizeof(z1)) != 0;
        bad += got.step != step || got.rng_state != 0xABCDEF12345ULL + (uint64_t)rank || got.shard_idx != 3 || got.sample_idx != 17;
        free(m); free(v); free(extra); free(master); free(m_ref); free(v_ref);
    }
    return bad;
}

static void read_rank1_as_rank0(void* arg) {
    (void)arg;
    size_t n = 1001;
    ZeroShard sh = zero_shard(n, 1, 2, 0);
    TrainState expect = train_state_describe(2, 0, 1, 1, 5, 0, 0, 0, n, sh, state_extra_bytes(sh.size, 1)), got;
    float* m = (float*)malloc(4096 * sizeof(float));
    float* v = (float*)malloc(4096 * sizeof(float));
    char* extra = (char*)malloc(state_extra_bytes(4096, 1));
    char path[4200];
    snprintf(path, sizeof(path), "%s/state_%08d_%05d.bin", g_state_dir, 5, 1);
    train_state_read(path, &expect, &got, m, v, extra);
}

static void test_state_round_trips(void) {
    make_temp_dir(g_state_dir, sizeof(g_state_dir));
    const size_t n = 1001;  // not a multiple of the process counts: uneven shards
    int step = 0;
    for (int nproc = 1; nproc <= 3; nproc++) {
        for (int zero = 0; zero <= 1; zero++) {
            for (int with_master = 0; with_master <= 1; with_master++) {
                step++;
                write_states(n, nproc, zero, with_master, step);
                CHECK(read_states_back(n, nproc, zero, with_master, step) == 0,
                      "state files round-trip bit for bit (%d processes, ZeRO-%d, master weights %d)", nproc, zero, with_master);
            }
        }
    }
    write_states(n, 2, 1, 1, 5);
    expect_die("another rank's state file", read_rank1_as_rank0, NULL, "state_00000005_00001.bin", "rank 1");
    CHECK(state_extra_fits(state_extra_bytes((size_t)124475904, 1)), "GPT-2 124M master weights fit one state file");
    CHECK(!state_extra_fits(state_extra_bytes((size_t)1557686400, 1)), "GPT-2 1558M master weights on one GPU do not (the trainer says so)");
    remove_tree(g_state_dir);
}

// ----------------------------------------------------------------------------
// training loop decisions

static void test_trainer_host(void) {
    int due = 0;
    for (int step = 0; step <= 100; step++) { due += step_is_due(step, 0, step == 100); }
    CHECK(due == 0, "-v 0 / -s 0 / -n 0: never due, including the last step (no %% by zero)");
    CHECK(step_is_due(20, 10, 0) && !step_is_due(21, 10, 0) && step_is_due(21, 10, 1), "every 10: steps 0, 10, 20 and the last");
    CHECK(!step_is_due(5, -3, 1), "a negative period is never due");
    const char* why;
    CHECK(grad_accum_steps_for(-1, 4, 64, 2, &why) == 1, "-d -1: one micro-batch per process");
    CHECK(grad_accum_steps_for(524288, 64, 1024, 8, &why) == 1, "GPT-2 124M on 8 GPUs: 1 micro-step");
    CHECK(grad_accum_steps_for(524288, 16, 1024, 1, &why) == 32, "GPT-2 124M on 1 GPU with B=16: 32 micro-steps");
    CHECK(grad_accum_steps_for(1000, 4, 64, 1, &why) == -1 && why[0] != '\0', "a total batch that is not a multiple is refused");
    CHECK(grad_accum_steps_for(0, 4, 64, 1, &why) == -1, "a zero total batch is refused");
    CHECK(grad_accum_steps_for(256, 0, 64, 1, &why) == -1, "B = 0 is refused, not divided by");
    CHECK(grad_clip_scale(2.0f, 1.0f) == 0.5f && grad_clip_scale(0.5f, 1.0f) == 1.0f, "clip scales only above the threshold");
    CHECK(grad_clip_scale(5.0f, 0.0f) == 1.0f, "clip 0 is off");
    CHECK(grad_clip_scale(NAN, 1.0f) == 1.0f, "a NaN norm is not turned into a NaN scale here (the update is skipped)");
    CHECK(update_should_skip(NAN, NAN, 3.0f, 3.0f, 1.0f) == 0, "no skip while the detectors fill up");
    CHECK(update_should_skip(5.0, NAN, 3.0f, 0.0f, 1.0f) == 1, "a loss z-score above -sl skips");
    CHECK(update_should_skip(5.0, 5.0, 0.0f, 0.0f, 1.0f) == 0, "-sl 0 -sg 0: never skip a finite step");
    CHECK(update_should_skip(0.0, 0.0, 0.0f, 0.0f, INFINITY) == 1, "a non-finite gradient norm always skips");
}

int main(void) {
    test_bf16_round_nearest();
    test_bf16_stochastic_round();
    test_hash();
    test_help_matches_parser();
    test_multi_gpu_flags();
    test_layer_ranges_cover_everything();
    test_reduce_ops();
    test_zero_padding();
    test_linear_gemm_specs();
    test_attention_gemm_specs();
    test_row_chunks();
    test_attention_index_maps();
    test_cudnn_att_layouts();
    test_cudnn_att_key();
    test_cudnn_att_shape_rules();
    test_online_softmax_merge();
    test_token_groups();
    expect_die("token id outside the vocabulary", build_bad_token, NULL, "99", "encoder_backward");
    test_tensor_check_catches_corruption();
    test_debug_state();
    test_trainer_host();
    test_state_round_trips();
    return test_summary();
}
