/*
llmc/model_config.h: GPT-2 shapes, the model descriptors accepted by `-e`, and the
sizes of the 16 parameter tensors in checkpoint order.

Descriptors (identical in train_gpt2.py):
  dN or gpt2:dN   depth N; d6 -> C=384 NH=6, d12 -> 768/12, d24 -> 1024/16, d36 -> 1280/20,
                  d48 -> 1600/25, any other N -> C=64*N, NH=N; maxT 1024
  gpt3:cN         GPT-3 style, channels N (a multiple of 64), head size 64, depth from the
                  GPT-3 paper's table for that width; maxT 2048
Vocabulary: V = 50257, padded to Vp = 50304 (a multiple of 128).
*/
#ifndef LLMC_MODEL_CONFIG_H
#define LLMC_MODEL_CONFIG_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_NUM_PARAMETER_TENSORS 16
#define GPT2_VOCAB_SIZE 50257
#define GPT2_PADDED_VOCAB_SIZE 50304

typedef struct {
    int max_seq_len;        // maxT
    int vocab_size;         // V
    int padded_vocab_size;  // Vp, V rounded up so the lm_head rows stay aligned
    int num_layers;         // L
    int num_heads;          // NH
    int channels;           // C
} GPT2Config;

// names of the 16 parameter tensors, checkpoint order
static const char* const GPT2_PARAMETER_NAMES[GPT2_NUM_PARAMETER_TENSORS] = {
    "wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
    "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"};

// 1 for the 2-D weight matrices (AdamW applies weight decay to these only)
static const int GPT2_PARAMETER_IS_MATRIX[GPT2_NUM_PARAMETER_TENSORS] = {
    1, 1, 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 0};

// number of elements of each parameter tensor, checkpoint order
static inline void gpt2_parameter_sizes(size_t sizes[GPT2_NUM_PARAMETER_TENSORS], const GPT2Config* cfg) {
    size_t Vp = (size_t)cfg->padded_vocab_size, C = (size_t)cfg->channels;
    size_t maxT = (size_t)cfg->max_seq_len, L = (size_t)cfg->num_layers;
    sizes[0] = Vp * C;            // wte
    sizes[1] = maxT * C;          // wpe
    sizes[2] = L * C;             // ln1w
    sizes[3] = L * C;             // ln1b
    sizes[4] = L * (3 * C) * C;   // qkvw
    sizes[5] = L * (3 * C);       // qkvb
    sizes[6] = L * C * C;         // attprojw
    sizes[7] = L * C;             // attprojb
    sizes[8] = L * C;             // ln2w
    sizes[9] = L * C;             // ln2b
    sizes[10] = L * (4 * C) * C;  // fcw
    sizes[11] = L * (4 * C);      // fcb
    sizes[12] = L * C * (4 * C);  // fcprojw
    sizes[13] = L * C;            // fcprojb
    sizes[14] = C;                // lnfw
    sizes[15] = C;                // lnfb
}

static inline size_t gpt2_num_parameters(const GPT2Config* cfg) {
    size_t sizes[GPT2_NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(sizes, cfg);
    size_t n = 0;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) { n += sizes[i]; }
    return n;
}

// parses a positive decimal integer filling the whole string; -1 if it is not one
static inline int model_config_parse_int(const char* s) {
    if (s == NULL || *s == '\0') { return -1; }
    long v = 0;
    for (const char* p = s; *p; p++) {
        if (*p < '0' || *p > '9') { return -1; }
        v = v * 10 + (*p - '0');
        if (v > 1000000) { return -1; }
    }
    return (int)v;
}

// GPT-3 depth for a given width (Brown et al. 2020, table 2.1); 0 if not a listed width
static inline int gpt3_depth_for_channels(int C) {
    static const int widths[] = {384, 768, 1024, 1536, 2048, 2560, 4096, 5120, 12288};
    static const int depths[] = {6, 12, 24, 24, 24, 32, 32, 40, 96};
    for (int i = 0; i < (int)(sizeof(widths) / sizeof(widths[0])); i++) {
        if (widths[i] == C) { return depths[i]; }
    }
    return 0;
}

// Fills cfg from a descriptor ("d12", "gpt2:d12", "gpt3:c768"). Returns 1 on success,
// 0 if `desc` is not a descriptor (then it is a checkpoint path), -1 if it looks like one
// but is invalid (e.g. "d0", "gpt3:c100"); *why then says what is wrong.
static inline int model_config_from_descriptor(const char* desc, GPT2Config* cfg, const char** why) {
    *why = "";
    const char* depth_str = NULL;
    if (strncmp(desc, "gpt2:d", 6) == 0) { depth_str = desc + 6; }
    else if (desc[0] == 'd' && desc[1] >= '0' && desc[1] <= '9') { depth_str = desc + 1; }
    cfg->vocab_size = GPT2_VOCAB_SIZE;
    cfg->padded_vocab_size = GPT2_PADDED_VOCAB_SIZE;
    if (depth_str != NULL) {
        int depth = model_config_parse_int(depth_str);
        if (depth < 1 || depth > 1000) {
            if (strncmp(desc, "gpt2:", 5) != 0 && depth < 0) { return 0; } // e.g. a file named "d1.bin"
            *why = "depth must be an integer in 1..1000 (e.g. d12)";
            return -1;
        }
        int C, NH;
        switch (depth) {
            case 6: C = 384; NH = 6; break;
            case 12: C = 768; NH = 12; break;
            case 24: C = 1024; NH = 16; break;
            case 36: C = 1280; NH = 20; break;
            case 48: C = 1600; NH = 25; break;
            default: C = 64 * depth; NH = depth; break;
        }
        cfg->max_seq_len = 1024;
        cfg->num_layers = depth;
        cfg->num_heads = NH;
        cfg->channels = C;
        return 1;
    }
    if (strncmp(desc, "gpt3:c", 6) == 0) {
        int C = model_config_parse_int(desc + 6);
        int depth = (C > 0 && C % 64 == 0) ? gpt3_depth_for_channels(C) : 0;
        if (depth == 0) {
            *why = "gpt3 width must be one of 384 768 1024 1536 2048 2560 4096 5120 12288 (e.g. gpt3:c768)";
            return -1;
        }
        cfg->max_seq_len = 2048;
        cfg->num_layers = depth;
        cfg->num_heads = C / 64;
        cfg->channels = C;
        return 1;
    }
    if (strncmp(desc, "gpt2:", 5) == 0 || strncmp(desc, "gpt3:", 5) == 0) {
        *why = "expected gpt2:dN or gpt3:cN";
        return -1;
    }
    return 0;
}

#endif // LLMC_MODEL_CONFIG_H
