/*
llmc/muon_config.h: the Muon settings every trainer shares (the CPU update is llmc/cpu/muon.h, the GPU
one llmc/cuda/muon.cuh; both include this file, which needs no matmul).

    OPTIMIZER_ADAMW 0 / OPTIMIZER_MUON 1               -op; the debug state (llmc/debug_state.h
                                                        header[12]) and the training state store them
    MUON_ADJUST_ORIGINAL 0 / MUON_ADJUST_MATCH_RMS_ADAMW 1    -oa (debug state header[17])
    MUON_NS_A, _B, _C      torch.optim.Muon's quintic Newton-Schulz coefficients (3.4445, -4.7750, 2.0315)
    MUON_NS_EPS            the floor of the Frobenius norm the iteration divides by (1e-7)
    MuonConfig             lr (the peak; the -k schedule scales it like -l), momentum, nesterov,
                           ns_steps, adjust_lr
    optimizer_parse / muon_adjust_parse    the -op and -oa strings -> codes (-1 for anything else)
    optimizer_name         a code -> "adamw" | "muon"
    muon_adjusted_lr       torch's _adjust_lr for a (rows, cols) weight, in double as Python computes it:
                           lr * sqrt(max(1, rows/cols)) (original) or lr * (0.2 * sqrt(max(rows, cols)))
    MUON_MAX_ROW_BLOCKS    the most matrices Muon makes of one layer's slice of a tensor (3: q, k, v); a plan's
                           blocks[k] (llmc/decoder.h decoder_muon_row_blocks) lists their rows, 0 after the last
    muon_block_rows(blocks, k, b, rows)   the rows of tensor k's block b (0: none); blocks NULL: one block, whole
*/
#ifndef LLMC_MUON_CONFIG_H
#define LLMC_MUON_CONFIG_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#define OPTIMIZER_ADAMW 0
#define OPTIMIZER_MUON 1
#define MUON_ADJUST_ORIGINAL 0
#define MUON_ADJUST_MATCH_RMS_ADAMW 1
#define MUON_NS_A 3.4445f
#define MUON_NS_B -4.7750f
#define MUON_NS_C 2.0315f
#define MUON_NS_EPS 1e-7f

typedef struct {
    float lr;          // peak learning rate of the Muon matrices
    float momentum;
    int nesterov;      // 0 or 1
    int ns_steps;      // Newton-Schulz iterations, 1..99
    int adjust_lr;     // MUON_ADJUST_ORIGINAL or MUON_ADJUST_MATCH_RMS_ADAMW
} MuonConfig;

static inline int optimizer_parse(const char* s) {
    if (strcmp(s, "adamw") == 0) { return OPTIMIZER_ADAMW; }
    if (strcmp(s, "muon") == 0) { return OPTIMIZER_MUON; }
    return -1;
}

static inline int muon_adjust_parse(const char* s) {
    if (strcmp(s, "original") == 0) { return MUON_ADJUST_ORIGINAL; }
    if (strcmp(s, "match_rms_adamw") == 0) { return MUON_ADJUST_MATCH_RMS_ADAMW; }
    return -1;
}

static inline const char* optimizer_name(int code) { return code == OPTIMIZER_MUON ? "muon" : "adamw"; }

static inline double muon_adjusted_lr(double lr, int adjust_lr, size_t rows, size_t cols) {
    double ratio = adjust_lr == MUON_ADJUST_MATCH_RMS_ADAMW ? 0.2 * sqrt((double)(rows > cols ? rows : cols))
                                                            : sqrt(fmax(1.0, (double)rows / (double)cols));
    return lr * ratio;
}

#define MUON_MAX_ROW_BLOCKS 3

static inline size_t muon_block_rows(const size_t (*blocks)[MUON_MAX_ROW_BLOCKS], int k, int b, size_t rows) {
    if (b >= MUON_MAX_ROW_BLOCKS) { return 0; }
    if (blocks == NULL) { return b == 0 ? rows : 0; }
    return blocks[k][b];
}

#endif // LLMC_MUON_CONFIG_H
