/*
dev/test/test_cudnn_att_host.c: llmc/cuda/cudnn_att.h on the CPU -- the q/k/v/out/stats strides of cuDNN attention
against the cuBLAS path's permute index maps (llmc/cuda/attention.cuh), GPT-2's (NKV = NH) and Llama 3's grouped
layouts (NKV < NH) against the key/value repetition of the explicit path (llmc/cpu/repeat_kv_cpu.h), 16-byte
alignment, stats sizing, the graph cache key and the shape rules.
*/
#include "../../llmc/cuda/attention.cuh"
#include "../../llmc/cuda/cudnn_att.h"
#include "../../llmc/cpu/repeat_kv_cpu.h"
#include "test_common.h"

// every element cuDNN reads or writes through the strided layouts is the one the cuBLAS path's
// permute kernels use: q/k/v inside the (B, T, 3, NH, HS) qkv buffer, out in (B, T, NH, HS)
static void test_cudnn_att_layouts(void) {
    const int shapes[][4] = {{2, 3, 4, 8}, {1, 5, 3, 16}, {3, 4, 2, 64}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], HS = shapes[s][3], C = NH * HS;
        CudnnAttLayout L[CUDNN_ATT_NUM_LAYOUTS];
        for (int w = 0; w < CUDNN_ATT_NUM_LAYOUTS; w++) { L[w] = cudnn_att_layout(w, B, T, NH, NH, HS); }
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

// grouped-query attention: q, k, v read in place from the (B, T, NH + 2 NKV, HS) projection. Each element cuDNN reads
// for query head h through the q layout, and for its key/value head h / (NH / NKV) through the k and v layouts, is the
// one the explicit path's repeat_kv_forward puts at (b, h, t, d) of its (B, T, 3C) buffer; the three layouts cover
// the projection once; dk, dv in the same layouts are (B, T, NKV, HS) blocks, the repetition's gradient.
static void test_cudnn_att_gqa_layouts(void) {
    const int shapes[][5] = {{2, 3, 4, 2, 8}, {1, 5, 6, 2, 16}, {2, 4, 8, 1, 8}, {1, 3, 4, 4, 8}, {1, 2, 32, 8, 64}};
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        const int B = shapes[s][0], T = shapes[s][1], NH = shapes[s][2], NKV = shapes[s][3], HS = shapes[s][4];
        const int C = NH * HS, QKV = (NH + 2 * NKV) * HS, group = NH / NKV;
        CudnnAttLayout L[CUDNN_ATT_NUM_LAYOUTS];
        for (int w = 0; w < CUDNN_ATT_NUM_LAYOUTS; w++) { L[w] = cudnn_att_layout(w, B, T, NH, NKV, HS); }
        size_t nqkv = (size_t)B * T * QKV, npacked = (size_t)B * T * 3 * C;
        float* proj = (float*)malloc(nqkv * sizeof(float));
        float* packed = (float*)malloc(npacked * sizeof(float));
        unsigned char* seen = (unsigned char*)calloc(nqkv, 1);
        for (size_t i = 0; i < nqkv; i++) { proj[i] = (float)i; }  // every element its own index (exact in fp32)
        repeat_kv_forward(packed, proj, B, T, NH, NKV, HS);
        int bad = 0;
        for (int b = 0; b < B; b++) {
            for (int h = 0; h < NH; h++) {
                for (int t = 0; t < T; t++) {
                    for (int d = 0; d < HS; d++) {
                        size_t at = attention_qkv_offset((((size_t)b * NH + h) * T + t) * HS + d, T, NH, HS);
                        for (int w = CUDNN_ATT_Q; w <= CUDNN_ATT_V; w++) {
                            int64_t i = cudnn_att_layout_index(&L[w], b, w == CUDNN_ATT_Q ? h : h / group, t, d);
                            if (i < 0 || (size_t)i >= nqkv) { bad++; continue; }
                            bad += proj[i] != packed[at + (size_t)w * C];
                        }
                    }
                }
            }
        }
        int over = 0;
        for (int w = CUDNN_ATT_Q; w <= CUDNN_ATT_V; w++) {
            for (int b = 0; b < L[w].dim[0]; b++) {
                for (int h = 0; h < L[w].dim[1]; h++) {
                    for (int t = 0; t < L[w].dim[2]; t++) {
                        for (int d = 0; d < L[w].dim[3]; d++) {
                            int64_t i = cudnn_att_layout_index(&L[w], b, h, t, d);
                            if (i >= 0 && (size_t)i < nqkv) { seen[i]++; } else { over++; }
                        }
                    }
                }
            }
        }
        for (size_t i = 0; i < nqkv; i++) { over += seen[i] != 1; }
        CHECK(bad == 0, "GQA B=%d T=%d NH=%d NKV=%d HS=%d: q/k/v read in place are what repeat_kv_forward packs", B, T, NH, NKV, HS);
        CHECK(over == 0, "GQA NH=%d NKV=%d: the q (NH heads), k, v (NKV heads) layouts cover the (B, T, QKV) projection once", NH, NKV);
        CHECK(L[CUDNN_ATT_Q].dim[1] == NH && L[CUDNN_ATT_K].dim[1] == NKV && L[CUDNN_ATT_V].dim[1] == NKV &&
              L[CUDNN_ATT_O].dim[1] == NH && L[CUDNN_ATT_STATS].dim[1] == NH,
              "GQA NH=%d NKV=%d: q, out and stats have NH heads, k and v NKV", NH, NKV);
        CHECK(L[CUDNN_ATT_K].offset == C && L[CUDNN_ATT_V].offset == C + NKV * HS && L[CUDNN_ATT_Q].stride[2] == QKV &&
              L[CUDNN_ATT_K].stride[0] == (int64_t)T * QKV && L[CUDNN_ATT_O].stride[2] == C,
              "GQA NH=%d NKV=%d: k at NH HS, v at (NH + NKV) HS, rows of QKV = %d, out rows of C", NH, NKV, QKV);
        int misaligned = 0;
        for (int w = CUDNN_ATT_Q; w <= CUDNN_ATT_O; w++) {
            for (int k = 0; k < 3; k++) { misaligned += (L[w].stride[k] * 2) % 16 != 0; }
            misaligned += L[w].stride[3] != 1 || (L[w].offset * 2) % 16 != 0;
        }
        CHECK(misaligned == 0, "GQA NH=%d NKV=%d HS=%d: strides and offsets are 16-byte multiples in bf16", NH, NKV, HS);
        free(proj);
        free(packed);
        free(seen);
    }
}

// the graph cache key: one key per (B, T, NH, NKV, HS, is_inference), unpacked back exactly
static void test_cudnn_att_key(void) {
    const int Bs[] = {1, 2, 4, 64, (1 << 16) - 1}, Ts[] = {2, 3, 1024, (1 << 18) - 1};
    const int heads[][2] = {{1, 1}, {12, 12}, {32, 8}, {6, 2}, {32, 1}, {1020, 510}, {1023, 1023}}, HSs[] = {8, 64, 128, 256};
    static uint64_t keys[5 * 4 * 7 * 4 * 2];
    int n = 0, bad_roundtrip = 0, refused = 0;
    for (int a = 0; a < 5; a++) {
        for (int b = 0; b < 4; b++) {
            for (int c = 0; c < 7; c++) {
                for (int d = 0; d < 4; d++) {
                    for (int inf = 0; inf < 2; inf++) {
                        const int nh = heads[c][0], nkv = heads[c][1];
                        refused += cudnn_att_shape_error(Bs[a], Ts[b], nh, nkv, HSs[d]) != NULL;
                        uint64_t key = cudnn_att_key(Bs[a], Ts[b], nh, nkv, HSs[d], inf);
                        int B, T, NH, NKV, HS, is_inference;
                        cudnn_att_key_unpack(key, &B, &T, &NH, &NKV, &HS, &is_inference);
                        bad_roundtrip += B != Bs[a] || T != Ts[b] || NH != nh || NKV != nkv || HS != HSs[d] || is_inference != inf;
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
    CHECK(refused == 0, "every shape of the key test (boundary values included) is one cuDNN attention accepts");
    CHECK(bad_roundtrip == 0, "cache keys unpack to their (B, T, NH, NKV, HS, is_inference), boundary values included");
    CHECK(dup == 0, "%d shapes give %d distinct cache keys", n, n - dup);
    CHECK(cudnn_att_key(4, 64, 12, 12, 64, 5) == cudnn_att_key(4, 64, 12, 12, 64, 1), "any non-zero is_inference is one graph");
    CHECK(cudnn_att_key(4, 64, 12, 12, 64, 0) != cudnn_att_key(4, 64, 12, 12, 64, 1), "training and inference graphs differ");
    CHECK(cudnn_att_key(4, 64, 32, 8, 64, 0) != cudnn_att_key(4, 64, 32, 32, 64, 0) &&
          cudnn_att_key(4, 64, 32, 8, 64, 0) != cudnn_att_key(4, 64, 32, 4, 64, 0), "GQA 4:1, MHA and GQA 8:1 are three graphs");
}

static void test_cudnn_att_shape_rules(void) {
    CHECK(cudnn_att_shape_error(4, 1024, 12, 12, 64) == NULL, "GPT-2 124M (12 heads of 64) is accepted");
    CHECK(cudnn_att_shape_error(4, 1024, 32, 8, 128) == NULL, "Llama 3 8B (32 query heads over 8 key/value heads of 128) is accepted");
    CHECK(cudnn_att_shape_error(4, 64, 6, 2, 8) == NULL && cudnn_att_shape_error(4, 64, 8, 1, 8) == NULL,
          "GQA 3:1 and multi-query attention (NKV = 1) are accepted");
    CHECK(cudnn_att_shape_error(1, 2, 1, 1, 8) == NULL, "the smallest shape is accepted");
    const int bad_shapes[][5] = {
        {0, 64, 12, 12, 64}, {4, 0, 12, 12, 64}, {4, 1, 12, 12, 64}, {4, 64, 0, 1, 64}, {4, 64, 12, 12, 0}, {-1, 64, 12, 12, 64},
        {4, 64, 12, 12, 4}, {4, 64, 12, 12, 60}, {4, 64, 12, 12, 264}, {1 << 16, 64, 12, 12, 64}, {4, 1 << 18, 12, 12, 64},
        {4, 64, 1024, 1024, 64}, {4, 64, 12, 0, 64}, {4, 64, 12, -4, 64}, {4, 64, 6, 4, 64}, {4, 64, 4, 8, 64}, {4, 64, 32, 3, 64},
    };
    for (size_t i = 0; i < sizeof(bad_shapes) / sizeof(bad_shapes[0]); i++) {
        const int* s = bad_shapes[i];
        const char* why = cudnn_att_shape_error(s[0], s[1], s[2], s[3], s[4]);
        CHECK(why != NULL && strlen(why) > 10 && strchr(why, '\n') == NULL,
              "B=%d T=%d NH=%d NKV=%d HS=%d is refused with a one-line reason", s[0], s[1], s[2], s[3], s[4]);
    }
    CHECK(strstr(cudnn_att_shape_error(4, 64, 12, 12, 60), "multiple of 8") != NULL, "HS=60 is refused for its alignment");
    CHECK(strstr(cudnn_att_shape_error(4, 64, 6, 4, 64), "multiple of the key/value head count") != NULL &&
          strstr(cudnn_att_shape_error(4, 64, 4, 8, 64), "multiple of the key/value head count") != NULL,
          "NH not a multiple of NKV (6 over 4, 4 over 8) is refused for its grouping");
}

int main(void) {
    test_cudnn_att_layouts();
    test_cudnn_att_gqa_layouts();
    test_cudnn_att_key();
    test_cudnn_att_shape_rules();
    return test_summary();
}
