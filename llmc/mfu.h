/*
llmc/mfu.h: model FLOPs utilisation, plain C so the CPU tests check it.

    gpu_peak_flops(device_name, precision)      dense peak FLOP/s of a known GPU, or -1 if unknown
    transformer_flops_per_step(num_params, L, C, T, tokens)   the PaLM-paper estimate, 6N + 12 L C T per token
    mfu_format(buf, n, flops_per_step, seconds, peak)  "43.2%", or "unknown" (never a negative number)

Peak numbers are the vendors' dense tensor-core figures (no sparsity) with fp32 accumulation,
which is what our GEMMs use: BF16 for PRECISION=BF16, TF32 for PRECISION=FP32. GeForce cards run
fp32-accumulate tensor math at half their fp16-accumulate rate; the table has the fp32-accumulate
figure. A GPU missing from the table prints "unknown".
*/
#ifndef LLMC_MFU_H
#define LLMC_MFU_H

#include <stdio.h>
#include <string.h>

typedef enum { MFU_BF16 = 0, MFU_TF32 = 1 } MfuPrecision;

typedef struct {
    const char* name_part;   // matched as a substring of the CUDA device name, first match wins
    double tflops_bf16;
    double tflops_tf32;
} GpuPeak;

// most specific names first ("H100 PCIe" before "H100")
static const GpuPeak GPU_PEAK_TABLE[] = {
    {"A100", 312.0, 156.0},
    {"H100 PCIe", 756.0, 378.0},
    {"H100 NVL", 835.0, 418.0},
    {"H100", 989.4, 494.7},            // SXM (device name "NVIDIA H100 80GB HBM3")
    {"H200", 989.4, 494.7},
    {"GH200", 989.4, 494.7},
    {"B200", 2250.0, 1100.0},
    {"L40S", 362.0, 183.0},
    {"L4", 121.0, 60.0},
    {"A10G", 70.0, 35.0},
    {"RTX 3080 Ti", 68.0, 34.1},
    {"RTX 3080", 59.5, 29.8},
    {"RTX 3090 Ti", 80.0, 40.0},
    {"RTX 3090", 71.0, 35.6},
    {"RTX 4080", 97.5, 48.7},
    {"RTX 4090", 165.2, 82.6},
    {"RTX 5080", 112.6, 56.3},
    {"RTX 5090", 209.5, 104.8},
};
#define GPU_PEAK_TABLE_SIZE ((int)(sizeof(GPU_PEAK_TABLE) / sizeof(GPU_PEAK_TABLE[0])))

// dense peak FLOP/s (not TFLOP/s) of the named GPU, or -1.0 if the GPU is unknown
static inline double gpu_peak_flops(const char* device_name, MfuPrecision precision) {
    if (device_name == NULL) { return -1.0; }
    for (int i = 0; i < GPU_PEAK_TABLE_SIZE; i++) {
        if (strstr(device_name, GPU_PEAK_TABLE[i].name_part) != NULL) {
            double tf = precision == MFU_BF16 ? GPU_PEAK_TABLE[i].tflops_bf16 : GPU_PEAK_TABLE[i].tflops_tf32;
            return tf * 1e12;
        }
    }
    return -1.0;
}

// FLOPs of one forward + backward over `tokens` tokens of sequence length T:
// per token 6 N (the matmuls with the weights) + 12 L C T (attention scores and mixing)
static inline double transformer_flops_per_step(size_t num_params, int L, int C, int T, size_t tokens) {
    double per_token = 6.0 * (double)num_params + 12.0 * (double)L * (double)C * (double)T;
    return per_token * (double)tokens;
}

// the fraction of peak achieved, or -1.0 when it cannot be known (unknown GPU, bad timing)
static inline double mfu_fraction(double flops_per_step, double seconds, double peak_flops) {
    if (!(peak_flops > 0.0) || !(seconds > 0.0) || !(flops_per_step >= 0.0)) { return -1.0; }
    return flops_per_step / seconds / peak_flops;
}

// writes "12.3%" or "unknown" into buf
static inline void mfu_format(char* buf, size_t n, double flops_per_step, double seconds, double peak_flops) {
    double f = mfu_fraction(flops_per_step, seconds, peak_flops);
    if (f < 0.0) {
        snprintf(buf, n, "unknown");
    } else {
        snprintf(buf, n, "%.1f%%", 100.0 * f);
    }
}

#endif // LLMC_MFU_H
