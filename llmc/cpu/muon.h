/*
llmc/cpu/muon.h: the Muon update of one weight matrix on the CPU, as torch.optim.Muon computes it
(torch/optim/_muon.py, _single_tensor_muon). The settings the trainers share (MuonConfig, the codes,
the Newton-Schulz coefficients, optimizer_parse / muon_adjust_parse, muon_adjusted_lr) are in
llmc/muon_config.h, which llmc/cuda/muon.cuh includes too.

    muon_update_matrix    one matrix W (rows, cols) row-major (and its bf16 copy, when one is passed), its gradient G,
                          its momentum buffer M:
        g  = G * grad_scale                        (global-norm clipping, 1 = none)
        M  = lerp(M, g, 1 - momentum)              (torch's lerp: fma, two formulas by |weight| < 0.5)
        U  = nesterov ? lerp(g, M, momentum) : M
        O  = NS(U): X = U (transposed when rows > cols, so X is m x n with m <= n) / max(||U||_F, 1e-7),
             then ns_steps times  A = X X^T (m,m),  B = b A + c A A (m,m),  X = a X + B X (m,n),
             (a, b, c) = (3.4445, -4.7750, 2.0315); O = X (transposed back)
        W  = W * (1 - lr * weight_decay) - muon_adjusted_lr(lr) * O      (the subtraction as one fma)
    The GEMMs are llmc/cpu/matmul.h's matmul_gemm in the precision passed: MATMUL_FP32, or MATMUL_BF16 (inputs
    rounded to bf16, fp32 sums; torch's own iteration runs entirely in bfloat16). Everything else is fp32.
    Scalars that torch forms in Python doubles (1 - momentum, 1 - lr * wd, the adjusted lr) are formed in
    double here too and rounded to float once.

Determinism: the element loops are OpenMP over independent elements, the Frobenius norm is summed in
double in a fixed order, and the GEMMs are deterministic for a given thread count; the same inputs and
thread count give bit-identical updates. A MuonScratch holds the iteration's buffers between calls
(sized for the largest matrix seen); muon_scratch_free releases them.
*/
#ifndef LLMC_MUON_H
#define LLMC_MUON_H

#include <math.h>
#include <stddef.h>
#include <string.h>

#include "../utils.h"
#include "matmul.h"
#include "../muon_config.h"

typedef struct {
    float* x;      // (m, n) the iterate
    float* xn;     // (m, n) the next iterate
    float* gram;   // (m, m) X X^T
    float* gram2;  // (m, m) A A, then b A + c A A
    size_t capacity_mn, capacity_mm;
} MuonScratch;

// torch.lerp(start, end, weight) for float32 on the CPU: start + w (end - start) for |w| < 0.5, else
// end - (end - start)(1 - w), each as one fused multiply-add
static inline float muon_lerp(float start, float end, float w) {
    float diff = end - start;
    return fabsf(w) < 0.5f ? fmaf(w, diff, start) : fmaf(-diff, 1.0f - w, end);
}

static inline void muon_scratch_init(MuonScratch* s) { memset(s, 0, sizeof(*s)); }

static inline void muon_scratch_free(MuonScratch* s) {
    free_aligned(s->x);
    free_aligned(s->xn);
    free_aligned(s->gram);
    free_aligned(s->gram2);
    muon_scratch_init(s);
}

// grows *a and *b, two buffers of *capacity floats each, to hold n floats each (contents are not kept)
static inline void muon_scratch_grow_pair(float** a, float** b, size_t* capacity, size_t n) {
    if (n <= *capacity) { return; }
    free_aligned(*a);
    free_aligned(*b);
    *a = (float*)mallocAligned(n * sizeof(float)); // (GEMM operands: on a cache line, llmc/utils.h)
    *b = (float*)mallocAligned(n * sizeof(float));
    *capacity = n;
}

static inline void muon_scratch_reserve(MuonScratch* s, size_t mn, size_t mm) {
    muon_scratch_grow_pair(&s->x, &s->xn, &s->capacity_mn, mn);
    muon_scratch_grow_pair(&s->gram, &s->gram2, &s->capacity_mm, mm);
}

// The Newton-Schulz iteration on s->x (m, n), m <= n, already normalised; the result is left in s->x.
static inline void muon_newton_schulz(MuonScratch* s, int m, int n, int steps, MatmulPrecision prec) {
    size_t mn = (size_t)m * n, mm = (size_t)m * m;
    for (int it = 0; it < steps; it++) {
        float* x = s->x;
        float* xn = s->xn;
        float* gram = s->gram;
        float* gram2 = s->gram2;
        matmul_gemm(prec, 0, 1, m, m, n, x, n, x, n, 0.0f, gram, m);          // A = X X^T      (m,m)
        matmul_gemm(prec, 0, 0, m, m, m, gram, m, gram, m, 0.0f, gram2, m);   // A A            (m,m)
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < mm; i++) { gram2[i] = MUON_NS_B * gram[i] + MUON_NS_C * gram2[i]; } // B = b A + c A A
        #pragma omp parallel for schedule(static)
        for (size_t i = 0; i < mn; i++) { xn[i] = MUON_NS_A * x[i]; }
        matmul_gemm(prec, 0, 0, m, n, m, gram2, m, x, n, 1.0f, xn, n);         // X' = a X + B X (m,n)
        s->x = xn;
        s->xn = x;
    }
}

// One Muon step of the (rows, cols) row-major matrix w with gradient g (times grad_scale) and momentum
// buffer buf (rows * cols, zero at the first step); lr is this step's (scheduled) Muon learning rate.
// w_bf16 (NULL: none) receives the updated w rounded to bf16 (-p bf16's weight copy) in the same pass.
static inline void muon_update_matrix(float* w, uint16_t* w_bf16, const float* g, float* buf, int rows, int cols,
                                      float grad_scale, float lr, float weight_decay, const MuonConfig* cfg,
                                      MatmulPrecision prec, MuonScratch* s) {
    int tall = rows > cols;
    int m = tall ? cols : rows, n = tall ? rows : cols;
    size_t count = (size_t)rows * cols;
    muon_scratch_reserve(s, count, (size_t)m * m);
    float w_momentum = (float)(1.0 - (double)cfg->momentum); // torch: buf.lerp_(grad, 1 - momentum)
    float w_nesterov = cfg->momentum;                         // torch: grad.lerp(buf, momentum)
    float* x = s->x;
    // momentum, then the update U written into X (transposed for a tall matrix)
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            size_t i = (size_t)r * cols + c;
            float gi = g[i] * grad_scale;
            float b = muon_lerp(buf[i], gi, w_momentum);
            buf[i] = b;
            float u = cfg->nesterov ? muon_lerp(gi, b, w_nesterov) : b;
            x[tall ? (size_t)c * rows + r : i] = u;
        }
    }
    // X / max(||X||_F, eps), the norm summed in double over rows in order
    double sumsq = 0.0;
    for (size_t i = 0; i < count; i++) { sumsq += (double)x[i] * x[i]; }
    float norm = (float)sqrt(sumsq);
    if (norm < MUON_NS_EPS) { norm = MUON_NS_EPS; }
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < count; i++) { x[i] = x[i] / norm; }
    muon_newton_schulz(s, m, n, cfg->ns_steps, prec);
    x = s->x;
    float decay = (float)(1.0 - (double)lr * (double)weight_decay);
    float step = (float)-muon_adjusted_lr((double)lr, cfg->adjust_lr, rows, cols);
    #pragma omp parallel for schedule(static)
    for (int r = 0; r < rows; r++) {
        for (int c = 0; c < cols; c++) {
            size_t i = (size_t)r * cols + c;
            float o = x[tall ? (size_t)c * rows + r : i];
            w[i] = fmaf(step, o, w[i] * decay);
        }
        if (w_bf16 != NULL) { // the row's copy while it is in cache
            for (int c = 0; c < cols; c++) { w_bf16[(size_t)r * cols + c] = matmul_bf16_round_value(w[(size_t)r * cols + c]); }
        }
    }
}

#endif // LLMC_MUON_H
