/*
llmc/cpu/transpose.h: 32-bit transposes in 16 x 16 blocks of AVX-512 registers, for the kernels that lay out bf16
pairs (or floats, moved as bits) for their products: the blocked attention (llmc/cpu/attention_cpu.h) and the AMX
GEMM (llmc/cpu/amx_gemm.h).

    transpose32_avx512(dst, ld_dst, src, ld_src, rows, cols)
        dst (cols, rows) = src (rows, cols) transposed, rows and cols multiples of 16, row strides in elements; the
        caller asks whether the CPU has AVX-512 F (the function is compiled for it whatever the build's -march)
*/
#ifndef LLMC_CPU_TRANSPOSE_H
#define LLMC_CPU_TRANSPOSE_H

#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx512f")))
static void transpose32_avx512(uint32_t* dst, size_t ld_dst, const uint32_t* src, size_t ld_src, int rows, int cols) {
    for (int r0 = 0; r0 < rows; r0 += 16) {
        for (int c0 = 0; c0 < cols; c0 += 16) {
            __m512i a[16], t[16];
            for (int i = 0; i < 16; i++) { a[i] = _mm512_loadu_si512((const void*)(src + (size_t)(r0 + i) * ld_src + c0)); }
            // in each 128-bit lane: pairs of rows interleaved, then groups of four rows: t[4g + c] holds, in lane L,
            // column 4L + c of rows 4g .. 4g + 3
            for (int i = 0; i < 16; i += 2) {
                t[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);
                t[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);
            }
            for (int g = 0; g < 4; g++) {
                a[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
                a[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
                a[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
                a[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
            }
            // output row 4L + c = lane L of a[c], a[4 + c], a[8 + c], a[12 + c]
            for (int c = 0; c < 4; c++) {
                __m512i lo01 = _mm512_shuffle_i32x4(a[c], a[4 + c], 0x44), hi01 = _mm512_shuffle_i32x4(a[c], a[4 + c], 0xee);
                __m512i lo23 = _mm512_shuffle_i32x4(a[8 + c], a[12 + c], 0x44);
                __m512i hi23 = _mm512_shuffle_i32x4(a[8 + c], a[12 + c], 0xee);
                __m512i out[4] = {_mm512_shuffle_i32x4(lo01, lo23, 0x88), _mm512_shuffle_i32x4(lo01, lo23, 0xdd),
                                  _mm512_shuffle_i32x4(hi01, hi23, 0x88), _mm512_shuffle_i32x4(hi01, hi23, 0xdd)};
                for (int L = 0; L < 4; L++) {
                    _mm512_storeu_si512((void*)(dst + (size_t)(c0 + 4 * L + c) * ld_dst + r0), out[L]);
                }
            }
        }
    }
}
#endif

#endif // LLMC_CPU_TRANSPOSE_H
