/*
dev/test/test_mfu.c: the GPU peak table and the MFU printout of llmc/mfu.h.
An unknown GPU, a zero or negative time, or a bad FLOP count prints "unknown", never a
negative percentage.
*/
#include <math.h>
#include "../../llmc/mfu.h"
#include "test_common.h"

static void test_known_gpus(void) {
    // device names as the CUDA runtime reports them
    const char* names[] = {"NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe",
                           "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA B200", "NVIDIA L4", "NVIDIA GeForce RTX 3090",
                           "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 3080", "NVIDIA GeForce RTX 4080"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        double bf16 = gpu_peak_flops(names[i], MFU_BF16);
        double tf32 = gpu_peak_flops(names[i], MFU_TF32);
        CHECK(bf16 > 1e13 && bf16 < 1e16, "%s: bf16 peak %g FLOP/s is plausible", names[i], bf16);
        CHECK(tf32 > 1e12 && tf32 <= bf16, "%s: tf32 peak %g is positive and at most the bf16 peak", names[i], tf32);
    }
}

static void test_specific_names_win(void) {
    CHECK(fabs(gpu_peak_flops("NVIDIA H100 PCIe", MFU_BF16) - 756e12) < 1e9, "H100 PCIe is not taken for the SXM part");
    CHECK(fabs(gpu_peak_flops("NVIDIA H100 80GB HBM3", MFU_BF16) - 989.4e12) < 1e9, "H100 SXM (HBM3) has 989.4 TFLOP/s bf16");
    CHECK(fabs(gpu_peak_flops("NVIDIA A100-SXM4-40GB", MFU_BF16) - 312e12) < 1e9, "A100 has 312 TFLOP/s bf16");
    CHECK(gpu_peak_flops("NVIDIA L40S", MFU_BF16) > gpu_peak_flops("NVIDIA L4", MFU_BF16), "L40S is not matched as L4");
    CHECK(gpu_peak_flops("NVIDIA GeForce RTX 3090 Ti", MFU_BF16) > gpu_peak_flops("NVIDIA GeForce RTX 3090", MFU_BF16),
          "RTX 3090 Ti matched before RTX 3090");
}

static void test_unknown_is_unknown(void) {
    char buf[64];
    CHECK(gpu_peak_flops("Tesla K80", MFU_BF16) < 0.0, "unknown GPU has no peak");
    CHECK(gpu_peak_flops(NULL, MFU_BF16) < 0.0, "NULL name has no peak");
    mfu_format(buf, sizeof(buf), 1e15, 1.0, gpu_peak_flops("Tesla K80", MFU_BF16));
    CHECK(strcmp(buf, "unknown") == 0, "unknown GPU prints 'unknown' (got '%s')", buf);
    mfu_format(buf, sizeof(buf), 1e15, 0.0, 312e12);
    CHECK(strcmp(buf, "unknown") == 0, "zero step time prints 'unknown' (got '%s')", buf);
    mfu_format(buf, sizeof(buf), 1e15, -1.0, 312e12);
    CHECK(strcmp(buf, "unknown") == 0, "negative step time prints 'unknown' (got '%s')", buf);
    mfu_format(buf, sizeof(buf), NAN, 1.0, 312e12);
    CHECK(strcmp(buf, "unknown") == 0, "NaN FLOPs print 'unknown' (got '%s')", buf);
    mfu_format(buf, sizeof(buf), 1e15, NAN, 312e12);
    CHECK(strcmp(buf, "unknown") == 0, "NaN time prints 'unknown' (got '%s')", buf);
}

static void test_never_negative(void) {
    const double peaks[] = {-1.0, 0.0, 1e12, 312e12, NAN};
    const double times[] = {-1.0, 0.0, 1e-3, 1.0, INFINITY, NAN};
    const double flops[] = {-5.0, 0.0, 1e12, 1e18};
    int negative = 0;
    for (size_t i = 0; i < sizeof(peaks) / sizeof(peaks[0]); i++) {
        for (size_t j = 0; j < sizeof(times) / sizeof(times[0]); j++) {
            for (size_t k = 0; k < sizeof(flops) / sizeof(flops[0]); k++) {
                char buf[64];
                mfu_format(buf, sizeof(buf), flops[k], times[j], peaks[i]);
                if (buf[0] == '-' || strstr(buf, "nan") != NULL || strstr(buf, "inf") != NULL) { negative++; }
            }
        }
    }
    CHECK(negative == 0, "no combination prints a negative, NaN or inf MFU (%d did)", negative);
}

static void test_value(void) {
    char buf[64];
    // 124M model, 0.5M tokens per step: ~6 * 124e6 * 524288 FLOPs
    double flops = transformer_flops_per_step(124475904, 12, 768, 1024, 524288);
    double expect = (6.0 * 124475904 + 12.0 * 12 * 768 * 1024) * 524288;
    CHECK(fabs(flops - expect) / expect < 1e-12, "flops per step follows 6N + 12LCT per token");
    mfu_format(buf, sizeof(buf), 312e12 * 0.5, 1.0, 312e12);
    CHECK(strcmp(buf, "50.0%") == 0, "half of peak prints 50.0%% (got '%s')", buf);
}

int main(void) {
    test_known_gpus();
    test_specific_names_win();
    test_unknown_is_unknown();
    test_never_negative();
    test_value();
    return test_summary();
}
