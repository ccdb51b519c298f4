/*
dev/test/test_gemm_align.c: gemm_pointer_alignment (llmc/cuda/matmul.cuh), the alignment gemm_lt promises
cuBLASLt for each operand (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES, whose default of 256
would let the heuristic pick kernels that our 16-byte aligned tensors cannot feed): the largest power
of two up to 256 that divides the address, never more than the address has.
*/
#include "../../llmc/cuda/matmul.cuh"
#include "../../llmc/gpt2.h"
#include "test_common.h"

static void test_alignment_of_addresses(void) {
    CHECK(gemm_pointer_alignment(NULL) == 256, "address 0 is 256-byte aligned");
    CHECK(gemm_pointer_alignment((const void*)(uintptr_t)0x7f0000000000u) == 256, "a cudaMalloc-like address gives 256, the cap");
    CHECK(gemm_pointer_alignment((const void*)(uintptr_t)0x7f0000000010u) == 16, "base + 16 bytes gives 16");
    CHECK(gemm_pointer_alignment((const void*)(uintptr_t)0x7f0000000180u) == 128, "base + 384 bytes gives 128");
    CHECK(gemm_pointer_alignment((const void*)(uintptr_t)0x7f0000000002u) == 2, "base + one bf16 gives 2");
    CHECK(gemm_pointer_alignment((const void*)(uintptr_t)0x7f0000000001u) == 1, "an odd address gives 1");
    // every address from a 4096-aligned base: the result divides the address and doubling it would not
    static char buf[8192] __attribute__((aligned(4096)));
    int bad = 0;
    for (int off = 0; off < 4096; off++) {
        const char* p = buf + off;
        uint32_t a = gemm_pointer_alignment(p);
        uintptr_t address = (uintptr_t)p;
        int power_of_two = a != 0 && (a & (a - 1)) == 0;
        bad += !power_of_two || a > 256 || address % a != 0 || (a < 256 && address % (2 * a) == 0);
    }
    CHECK(bad == 0, "for every offset: a power of two <= 256 that divides the address, the largest such");
}

// The GEMM operands of a bf16 GPT-2 124M: per-layer weight slices at their element offsets in the
// 256-byte aligned parameter buffer are at least 16-byte aligned, the alignment the trainer relies on.
static void test_parameter_slices_are_16_byte_aligned(void) {
    GPT2Config cfg = {.max_seq_len = 1024, .vocab_size = 50257, .padded_vocab_size = 50304, .num_layers = 12,
                      .num_heads = 12, .channels = 768};
    size_t sizes[GPT2_NUM_PARAMETER_TENSORS];
    gpt2_parameter_sizes(sizes, &cfg);
    const uintptr_t base = (uintptr_t)0x7f0000000000u;
    size_t off = 0;
    int bad = 0;
    for (int i = 0; i < GPT2_NUM_PARAMETER_TENSORS; i++) {
        size_t per_layer = GPT2_PARAMETER_PER_LAYER[i] ? sizes[i] / (size_t)cfg.num_layers : sizes[i];
        int layers = GPT2_PARAMETER_PER_LAYER[i] ? cfg.num_layers : 1;
        for (int l = 0; l < layers; l++) {
            const void* p = (const void*)(base + (off + (size_t)l * per_layer) * 2);  // bf16
            bad += gemm_pointer_alignment(p) < 16;
        }
        off += sizes[i];
    }
    CHECK(bad == 0, "every bf16 parameter slice of GPT-2 124M is at least 16-byte aligned (%d are not)", bad);
}

int main(void) {
    test_alignment_of_addresses();
    test_parameter_slices_are_16_byte_aligned();
    return test_summary();
}
