/*
AMX (Intel's Advanced Matrix Extensions) for the kernels that run their own small bf16 products: whether this
process may use the tiles, and the one tile shape they use.

AMX needs three things: the CPU's AMX-TILE and AMX-BF16 (CPUID leaf 7), the OS saving the tile state (XCR0 bits 17
and 18), and on Linux the process asking for it once (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA; a tile
instruction without it faults). amx_usable() checks all three, once per process. A thread then loads a tile
configuration (ldtilecfg) before its first tile instruction, and again whenever another library may have loaded
its own (oneDNN's AMX GEMMs do): amx_configure_16x64() at the start of each piece of work.

The configuration: tiles 0-7, each 16 rows of 64 bytes: 16 x 16 fp32 sums, 16 rows of 16 bf16 pairs (an A
operand: 32 values of the inner index a row), or 16 pair rows of 16 columns (a B operand, pairs of the inner index
per column: the layout vdpbf16ps takes too).
*/
#ifndef LLMC_CPU_AMX_H
#define LLMC_CPU_AMX_H

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__linux__)
#define AMX_X86 1
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#define AMX_X86 0
#endif

#if AMX_X86
#define AMX_ARCH_GET_XCOMP_PERM 0x1022
#define AMX_ARCH_REQ_XCOMP_PERM 0x1023
#define AMX_XFEATURE_XTILEDATA 18

// the CPU has AMX-TILE and AMX-BF16, and the OS saves the tile state
static int amx_cpu_has_bf16(void) {
    unsigned int a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) { return 0; }
    int tile = (d >> 24) & 1, bf16 = (d >> 22) & 1;
    if (!tile || !bf16 || !__get_cpuid(1, &a, &b, &c, &d) || !((c >> 27) & 1)) { return 0; } // OSXSAVE
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    unsigned long long xcr0 = ((unsigned long long)hi << 32) | lo;
    return (xcr0 & (3ull << 17)) == (3ull << 17); // XTILECFG and XTILEDATA
}

// asks Linux for the tile state; 1 when the process has it
static int amx_request_permission(void) {
    unsigned long bits = 0;
    if (syscall(SYS_arch_prctl, AMX_ARCH_REQ_XCOMP_PERM, AMX_XFEATURE_XTILEDATA) != 0) { return 0; }
    if (syscall(SYS_arch_prctl, AMX_ARCH_GET_XCOMP_PERM, &bits) != 0) { return 0; }
    return (int)((bits >> AMX_XFEATURE_XTILEDATA) & 1);
}

typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} AmxTileConfig;

// this thread's tiles 0-7 as 16 rows of 64 bytes. ldtilecfg as an asm that reads the whole configuration: GCC 12
// takes _tile_loadconfig's operand as a pointer it need not see written, and at -O3 without -march=native dropped
// the stores of the shapes (palette 1, no rows: the first tile load faulted)
__attribute__((target("amx-tile")))
static inline void amx_configure_16x64(void) {
    AmxTileConfig cfg __attribute__((aligned(64)));
    memset(&cfg, 0, sizeof(cfg));
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// c (32 x 32 fp32, row stride ldc floats) = (accumulate ? c : 0) + a . b over kp pairs of the inner index (a
// multiple of 16), in tiles 0-3 (c), 4-5 (a) and 6-7 (b) of amx_configure_16x64's shapes: a is 32 rows of pairs, sa
// bytes apart; b is pair rows of 32 columns, sb bytes apart. Each sum takes its pairs in order, a pair's two products
// one after the other (tdpbf16ps). The blocked attention's products and the AMX GEMM both run on it.
// c_next (or NULL): the block of C the caller writes next, 32 x 32, row stride ld_next floats; its 64 cache lines
// are prefetched for writing a few per step, so that the next block's stores (or loads) find them in cache instead
// of waiting on memory (the AMX Xeon: each of the trainer's GEMM shapes 1.03-1.43x faster).
__attribute__((target("amx-tile,amx-bf16")))
static void amx_block_32x32(float* c, int ldc, const char* a, size_t sa, const char* b, size_t sb, int kp, int accumulate,
                            const float* c_next, size_t ld_next) {
    size_t sc = 4 * (size_t)ldc;
    if (accumulate) {
        _tile_loadd(0, c, sc);
        _tile_loadd(1, c + 16, sc);
        _tile_loadd(2, c + 16 * (size_t)ldc, sc);
        _tile_loadd(3, c + 16 * (size_t)ldc + 16, sc);
    } else {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
    }
    int lines_per_step = (64 + kp / 16 - 1) / (kp / 16), line = c_next != NULL ? 0 : 64;
    for (int p = 0; p < kp; p += 16) {
        for (int l = 0; l < lines_per_step && line < 64; l++, line++) { // row line / 2, its half line % 2
            __builtin_prefetch(c_next + (size_t)(line >> 1) * ld_next + 16 * (line & 1), 1, 3);
        }
        _tile_loadd(4, a + 4 * (size_t)p, sa);             // rows 0-15, pairs p .. p+15
        _tile_loadd(5, a + 16 * sa + 4 * (size_t)p, sa);   // rows 16-31
        _tile_loadd(6, b + (size_t)p * sb, sb);            // pair rows p .. p+15, columns 0-15
        _tile_loadd(7, b + (size_t)p * sb + 64, sb);       // columns 16-31
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, c, sc);
    _tile_stored(1, c + 16, sc);
    _tile_stored(2, c + 16 * (size_t)ldc, sc);
    _tile_stored(3, c + 16 * (size_t)ldc + 16, sc);
}
#endif

// 1 when this process may run AMX bf16 tiles: asked once (call it before the threads start)
static int amx_usable(void) {
    static int usable = -1;
    if (usable < 0) {
#if AMX_X86
        usable = amx_cpu_has_bf16() && amx_request_permission();
#else
        usable = 0;
#endif
    }
    return usable;
}

#endif // LLMC_CPU_AMX_H
