/*
llmc/cpu/classifier_cpu.h: the classifier of every CPU model (GPT-2, Llama 3, nanochat): the lm_head, the logit
softcap (nanochat), softmax, cross-entropy and their gradients, in chunks of rows, so that training never holds the
(B,T,Vp) logits, probabilities or their gradient whole (1.65 GB of them at GPT-2 124M, B=4, T=1024).

    classifier_forward_backward(losses, logits, dinp, dweight, overwrite, inp, weight, targets, dloss, softcap,
                                BT, C, V, Vp, chunk)
        per chunk of `chunk` rows of inp (BT,C): its logits (chunk,Vp) = inp . weight^T (weight (Vp,C), the
        lm_head), capped as cap * tanh(z / cap) when softcap > 0; with targets (BT) each row's softmax over the
        first V logits and its cross-entropy into losses (NULL: not kept); a row with target -1 (not supervised: a
        chat shard's masked position) has loss 0 and dlogits 0 over Vp; with dinp (the backward in the same
        pass) dlogits = (probs - onehot(target)) * dloss (times the softcap's slope), zero in the Vp - V padded
        columns, then dinp rows = dlogits . weight (written) and dweight (Vp,C) += dlogits^T . inp rows (written
        by the first chunk when overwrite: stale gradients). logits (BT,Vp) keeps every chunk's (capped) logits,
        or is NULL: one chunk of them exists at a time, in a scratch buffer that the backward's dlogits overwrite
        in place. Without targets (NULL) only the logits (then not NULL) are computed.
    classifier_logits(logits, inp, ld, weight, softcap, rows, C, V, Vp)
        the (capped) logits of `rows` rows of inp, row r at inp + r * ld: generate's and sampling's last positions
    crossentropy_softmax_forward / _backward   the same softmax and cross-entropy on whole (B,T,Vp) buffers
                                 (pyllmc.layers' layers, and what dev/test/test_classifier.c holds the chunks to);
                                 target -1: loss 0, no gradient
    softcap_forward(logits, cap, N) / softcap_backward(dlogits, capped, cap, N)
                                 the logit softcap on a whole buffer, in place: z <- cap * tanh(z / cap), and its
                                 gradient from the capped logits (generate's; llmc/cuda/fused_classifier.cuh's
                                 softcap_forward on the GPU)
    CpuClassifier, cpu_classifier_forward(cm, k, targets), cpu_classifier_backward(cm, k, loss_scale)
        a CPU model's classifier in its forward and backward passes (llmc/cpu/cpu_model.h keeps the state): the
        forward pass runs the chunks with the backward when one follows (cpu_model_expect_backward), so that
        backward starts from dinp; a backward whose forward pass did not (pyllmc's forward, then backward) runs the
        chunks again with their backward. Without targets the forward keeps the logits in cm->logits (allocated
        at the first such pass): every position's, or with cm->last_logits_only each sequence's last.

The row kernel (LLMC_CLASSIFIER, read once): fused, the default, makes three passes over a row (softcap and max, the
exponentials and their sum, dlogits with the probabilities in registers: classifier_row_fused); passes, the kernel
before it, five (classifier_row). On -p bf16 with oneDNN's bf16 GEMMs the fused kernel writes dlogits in bf16 alone
(classifier_dlogits_bf16), and the two backward GEMMs read them as they are instead of each rounding fp32 dlogits.
On a CPU with AVX-512 its three passes are hand-written AVX-512 loops on llmc/cpu/vecmath.h's vec16_expf and
vec16_tanhf (the same bits; LLMC_VEC16=0 keeps the compiled loops): one chunk of GPT-2 d12's rows 9.0 -> 8.1 ms, with
nanochat's softcap 16.1 -> 14.8 ms, bf16 dlogits, on a Zen 5 (dev/test/test_classifier --time). On a CPU with AVX2
and no AVX-512 the same loops in AVX2 on vec8_expf and vec8_tanhf (LLMC_VEC8=0 keeps the compiled ones).

Bit for bit: a row's softmax, loss and dlogits are those of crossentropy_softmax_forward, _backward and
softcap_forward, _backward (the same operations on the same numbers, each rounding where theirs does; bf16 dlogits are
theirs rounded as a GEMM rounds its operands), whichever kernel, and dinp's rows are the same GEMM's. dweight sums over the chunks in order, one GEMM each, so
its sum over the BT rows runs in a different order than one GEMM over all rows (the last bits of the lm_head's
gradient; the losses of later steps follow). The result does not depend on the thread count.

The chunk's non-GEMM work counts as PHASE_CLASSIFIER (llmc/cpu/phase_time.h), its GEMMs as PHASE_GEMM
(llmc/cpu/matmul.h).

Shapes: BT rows (B*T positions), C channels, V vocab, Vp padded vocab (the logits' row stride).
*/
#ifndef LLMC_CLASSIFIER_CPU_H
#define LLMC_CLASSIFIER_CPU_H

#include <math.h>
#include <stddef.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "matmul.h"
#include "vecmath.h"
#include "phase_time.h"
#include "cpu_model.h"

// rows of a chunk: its logits are CLASSIFIER_CHUNK_ROWS x Vp floats (206 MB at GPT-2's Vp), the lm_head's gradient
// (Vp,C) is read and written once per chunk
#define CLASSIFIER_CHUNK_ROWS 1024

// ----------------------------------------------------------------------------
// one row's softmax, the loops every softmax here runs

// the largest of the row's first V logits x: 16 lanes (vectorises), the tail, then the lanes
static inline float classifier_row_max(const float* x, int V) {
    float lane_max[16];
    for (int j = 0; j < 16; j++) { lane_max[j] = -INFINITY; }
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        for (int j = 0; j < 16; j++) { lane_max[j] = x[i + j] > lane_max[j] ? x[i + j] : lane_max[j]; }
    }
    float maxval = -INFINITY;
    for (; i < V; i++) { maxval = x[i] > maxval ? x[i] : maxval; }
    for (int j = 0; j < 16; j++) { maxval = lane_max[j] > maxval ? lane_max[j] : maxval; }
    return maxval;
}

// e[i] = exp(x[i] - maxval) for the first V (e may be x), and their sum: 16 interleaved float partial sums
// (vectorises; a fixed order), the tail, then the partial sums, added in double
static inline double classifier_row_exp_sum(float* e, const float* x, int V, float maxval) {
    float part[16] = {0.0f};
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        for (int j = 0; j < 16; j++) {
            float ex = vec_expf(x[i + j] - maxval);
            e[i + j] = ex;
            part[j] += ex;
        }
    }
    double sum = 0.0;
    for (; i < V; i++) {
        e[i] = vec_expf(x[i] - maxval);
        sum += e[i];
    }
    for (int j = 0; j < 16; j++) { sum += part[j]; }
    return sum;
}

// ----------------------------------------------------------------------------
// whole buffers

// softmax over the first V logits and the cross-entropy of the target token, per position
static void crossentropy_softmax_forward(float* losses, float* probs, const float* logits, const int* targets,
                                         int B, int T, int V, int Vp) {
    // logits, probs are (B,T,Vp) (the Vp-V padded columns are ignored, their prob is 0);
    // targets are (B,T) ids in [0,V), or -1: not supervised, loss 0; losses are (B,T)
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        const float* x = logits + (size_t)bt * Vp;
        float* p = probs + (size_t)bt * Vp;
        float maxval = classifier_row_max(x, V);
        double sum = classifier_row_exp_sum(p, x, V, maxval);
        float inv = (float)(1.0 / sum);
        int i = 0;
        for (; i < V; i++) { p[i] *= inv; }
        for (; i < Vp; i++) { p[i] = 0.0f; }
        // -log softmax computed from the logits directly (no log of a rounded probability)
        losses[bt] = targets[bt] < 0 ? 0.0f : (float)(log(sum) - (double)(x[targets[bt]] - maxval));
    }
}

// the fused backward of softmax + cross-entropy: dlogits = (probs - onehot(target)) * dloss
static void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets,
                                          int B, int T, int V, int Vp) {
    // dlogits, probs are (B,T,Vp); dlosses, targets are (B,T). dlogits is accumulated (+=); a row with target -1
    // (not supervised) gets nothing.
    #pragma omp parallel for
    for (int bt = 0; bt < B * T; bt++) {
        int ix = targets[bt];
        if (ix < 0) { continue; }
        float* dl = dlogits + (size_t)bt * Vp;
        const float* p = probs + (size_t)bt * Vp;
        float dloss = dlosses[bt];
        for (int i = 0; i < V; i++) {
            float indicator = i == ix ? 1.0f : 0.0f;
            dl[i] += (p[i] - indicator) * dloss;
        }
    }
}

// the logit softcap in place: z <- cap * tanh(z / cap) (cap > 0; the caller skips it for cap 0 = none)
static void softcap_forward(float* logits, float cap, size_t N) {
    // logits are (N) = (B,T,V)
    float inv = 1.0f / cap;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) { logits[i] = cap * vec_tanhf(logits[i] * inv); }
}

// in place: dlogits, the gradient of the capped logits, becomes that of the raw ones, from the capped logits
static void softcap_backward(float* dlogits, const float* capped, float cap, size_t N) {
    // dlogits, capped are (N) = (B,T,V); d cap tanh(z / cap) / dz = 1 - tanh^2, tanh = capped / cap
    float inv = 1.0f / cap;
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < N; i++) {
        float t = capped[i] * inv;
        dlogits[i] *= 1.0f - t * t;
    }
}

// ----------------------------------------------------------------------------
// in chunks of rows

// One row. x (Vp) holds the row's logits; with cap > 0 they are capped in place. With target < 0 returns 0 and
// writes dx (when given) 0 over Vp: the row is not supervised. With target >= 0 returns the row's cross-entropy; e (Vp) receives the exponentials, then the probabilities (x itself when the logits are not
// needed afterwards, or dx); with dx (Vp, may be e, and x when e is) also writes there the loss's gradient (dloss)
// with respect to the raw logits, 0 in the padded columns.
// The loops are those of crossentropy_softmax_forward, _backward and softcap_forward, _backward, and each value
// that theirs store to memory is stored here too before it is read again: the compiler may fuse a product and a sum
// into one FMA only while the product stays in a register, so this keeps their roundings.
static inline float classifier_row(float* x, float* dx, float* e, int V, int Vp, float cap, int target, float dloss) {
    if (cap > 0.0f) {
        float inv = 1.0f / cap;
        for (int i = 0; i < V; i++) { x[i] = cap * vec_tanhf(x[i] * inv); }
    }
    if (target < 0) { // not supervised (a masked position, or no targets): loss 0, and no gradient
        if (dx != NULL) { memset(dx, 0, (size_t)Vp * sizeof(float)); }
        return 0.0f;
    }
    float maxval = classifier_row_max(x, V);
    float zt = x[target];  // read before e (which may be x) is written
    double sum = classifier_row_exp_sum(e, x, V, maxval);
    float loss = (float)(log(sum) - (double)(zt - maxval));
    if (dx == NULL) { return loss; }
    // the probabilities, then dlogits = (probs - onehot(target)) * dloss, times the softcap's slope 1 - tanh^2
    float inv = (float)(1.0 / sum);
    int i = 0;
    for (; i < V; i++) { e[i] *= inv; }
    if (cap > 0.0f) {
        float icap = 1.0f / cap;
        for (i = 0; i < V; i++) {
            float indicator = i == target ? 1.0f : 0.0f;
            float t = x[i] * icap;
            float d = (e[i] - indicator) * dloss;
            d *= 1.0f - t * t;
            dx[i] = d;
        }
    } else {
        for (i = 0; i < V; i++) {
            float indicator = i == target ? 1.0f : 0.0f;
            dx[i] = (e[i] - indicator) * dloss;
        }
    }
    for (; i < Vp; i++) { dx[i] = 0.0f; }
    return loss;
}

// ----------------------------------------------------------------------------
// one row in three passes (LLMC_CLASSIFIER=fused, the default)

// The row kernel, read once: LLMC_CLASSIFIER=fused (the default) runs classifier_row_fused, =passes the loops above
// (classifier_row: a pass each for the softcap, the max, the exponentials, the probabilities, dlogits, and on -p bf16
// each backward GEMM rounding dlogits itself). The same bits; the old one is kept selectable until the new one is
// timed on CPUs beyond the Zen 5 (doc/cpu-speed.md).
typedef enum { CLASSIFIER_FUSED = 0, CLASSIFIER_PASSES = 1 } ClassifierKernel;
static int classifier_kernel_state = -1;  // -1: LLMC_CLASSIFIER not read yet

static ClassifierKernel classifier_kernel(void) {
    static const char* const names[] = {"fused", "passes"}; // (ClassifierKernel's order)
    if (classifier_kernel_state < 0) {
        classifier_kernel_state = env_choice("LLMC_CLASSIFIER", names, 2, CLASSIFIER_FUSED);
    }
    return (ClassifierKernel)classifier_kernel_state;
}

// the kernel the next calls run, whatever LLMC_CLASSIFIER says (dev/test/test_classifier runs both)
static inline void classifier_kernel_use(ClassifierKernel k) { classifier_kernel_state = (int)k; }

// Whether the backward GEMMs read dlogits in bf16 from oneDNN's bf16 kernels (-p bf16 on oneDNN, the fused kernel):
// then the row pass writes dlogits in bf16 alone, into a (rows, Vp) bf16 buffer beside the chunk's fp32 work space,
// and no GEMM rounds them (each rounded them into a buffer of that size before). Nothing reads fp32 dlogits there.
// (Not over the first half of each fp32 row, which would need no buffer: with a row stride of 2 Vp oneDNN's dinp
// GEMM summed in another order than on the dense rows, and the bits of the passes were lost.)
static int classifier_dlogits_bf16(void) {
    return classifier_kernel() == CLASSIFIER_FUSED && matmul_precision == MATMUL_BF16 &&
           matmul_bf16_takes_bf16() && matmul_bf16_onednn_kernel()[0] != '\0';
}

// 16 floats, one vector (two on AVX2, four on SSE): GCC's vector extension, as llmc/cpu/layernorm_cpu.h's lanes
typedef float ClassifierLanes __attribute__((vector_size(16 * sizeof(float))));
typedef int32_t ClassifierLaneMask __attribute__((vector_size(16 * sizeof(int32_t))));

// *acc = the larger of v and *acc in each lane, as v > acc ? v : acc picks it (acc where either is NaN); by pointer:
// a 64-byte vector passed by value on a build without AVX-512 draws GCC's -Wpsabi warning
static inline void classifier_lanes_keep_max(ClassifierLanes* acc, const ClassifierLanes* v) {
    ClassifierLaneMask greater = *v > *acc;  // all ones where v > acc
    *acc = (ClassifierLanes)(((ClassifierLaneMask)*v & greater) | ((ClassifierLaneMask)*acc & ~greater));
}

// classifier_row_max's maximum, from four vectors of 16 lanes side by side (GCC keeps classifier_row_max's 16 lanes
// in 16 scalar registers, one vmaxss per logit; one vector of lanes is a chain of compare-and-select): on one Zen 5
// thread 1.5 instead of 6 us for a row of 50257 in L2. The maximum of the same values, NaN skipped as there; only the sign of a zero
// maximum can differ, which nothing after it sees (z - (+0) and z - (-0) differ only for z = 0, and the
// exponentials of +0 and -0 are both 1)
static inline float classifier_row_max_lanes(const float* x, int V) {
    const ClassifierLanes zero = {0.0f};
    ClassifierLanes lane_max[4] = {zero - INFINITY, zero - INFINITY, zero - INFINITY, zero - INFINITY};
    int i = 0;
    for (; i + 64 <= V; i += 64) {
        for (int a = 0; a < 4; a++) {
            ClassifierLanes v;
            memcpy(&v, x + i + 16 * a, sizeof(v));
            classifier_lanes_keep_max(&lane_max[a], &v);
        }
    }
    for (; i + 16 <= V; i += 16) {
        ClassifierLanes v;
        memcpy(&v, x + i, sizeof(v));
        classifier_lanes_keep_max(&lane_max[0], &v);
    }
    classifier_lanes_keep_max(&lane_max[1], &lane_max[0]);  // max(0, 1), max(2, 3), then the max of the two
    classifier_lanes_keep_max(&lane_max[3], &lane_max[2]);
    classifier_lanes_keep_max(&lane_max[3], &lane_max[1]);
    ClassifierLanes m = lane_max[3];
    float maxval = -INFINITY;
    for (; i < V; i++) { maxval = x[i] > maxval ? x[i] : maxval; }
    for (int j = 0; j < 16; j++) { maxval = m[j] > maxval ? m[j] : maxval; }
    return maxval;
}

// caps the row's first V logits in place, x <- cap * tanh(x / cap) (softcap_forward's operations), and returns the
// largest of them as classifier_row_max finds it (16 lanes, the tail, then the lanes): one pass instead of two
static inline float classifier_row_softcap_max(float* x, int V, float cap) {
    float inv = 1.0f / cap;
    float lane_max[16];
    for (int j = 0; j < 16; j++) { lane_max[j] = -INFINITY; }
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        for (int j = 0; j < 16; j++) {
            float z = cap * vec_tanhf(x[i + j] * inv);
            x[i + j] = z;
            lane_max[j] = z > lane_max[j] ? z : lane_max[j];
        }
    }
    float maxval = -INFINITY;
    for (; i < V; i++) {
        float z = cap * vec_tanhf(x[i] * inv);
        x[i] = z;
        maxval = z > maxval ? z : maxval;
    }
    for (int j = 0; j < 16; j++) { maxval = lane_max[j] > maxval ? lane_max[j] : maxval; }
    return maxval;
}

// classifier_row_exp_sum's values and sum (the same adds in the same order), the 16 partial sums one vector in a
// register (classifier_row_exp_sum's array lives on the stack: a store and a load in every step of the sums' chain;
// 8.9 instead of 11-12 us for a row of 50257 in L2 on one Zen 5 thread), asking for one cache line of `next` (the thread's next row, in
// memory) per 16 values: this pass is arithmetic on a row in L2, the next row's first pass would wait on memory
static inline double classifier_row_exp_sum_ahead(float* e, const float* x, int V, float maxval, const float* next) {
    ClassifierLanes part;
    for (int j = 0; j < 16; j++) { part[j] = 0.0f; }
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        __builtin_prefetch(next + i, 0, 3);
        float ex[16];
        for (int j = 0; j < 16; j++) { ex[j] = vec_expf(x[i + j] - maxval); }
        memcpy(e + i, ex, sizeof(ex));
        ClassifierLanes v;
        memcpy(&v, ex, sizeof(v));
        part += v;
    }
    double sum = 0.0;
    for (; i < V; i++) {
        e[i] = vec_expf(x[i] - maxval);
        sum += e[i];
    }
    for (int j = 0; j < 16; j++) { sum += part[j]; }
    return sum;
}

// one logit's gradient from q = its probability minus the target's indicator: q * dloss, times the softcap's slope
// 1 - t^2 (t = the capped logit z / cap) when capped; crossentropy_softmax_backward's and softcap_backward's operations
static inline float classifier_dlogit(float q, float dloss, float z, float icap, int capped) {
    float d = q * dloss;
    if (capped) {
        float t = z * icap;
        d *= 1.0f - t * t;
    }
    return d;
}

// the row's dlogits over its first V columns, from the exponentials e, 1 / sum (inv) and the capped logits x (read
// only when capped), into dx (fp32; may be e or x: in place) or dx16 (bf16: to_bf16). The probability p = e * inv
// stays in a register: q = p - 0 = p for every column but the target's, whose p - 1 the caller writes afterwards
// (rounded as the passes round it: no FMA). One flat loop per case (capped, to_bf16 are constants where it is called):
// GCC vectorises it, testing once per row that dx does not overlap e or x other than exactly (in place); blocks of 16
// through a local array made it gather each vector from 16 scalar loads.
static inline __attribute__((always_inline)) void classifier_row_dlogits(float* dx, uint16_t* dx16, const float* e,
                                                                          const float* x, int V, float inv, float dloss,
                                                                          float icap, const int capped,
                                                                          const int to_bf16) {
    for (int i = 0; i < V; i++) {
        float d = classifier_dlogit(e[i] * inv, dloss, capped ? x[i] : 0.0f, icap, capped);
        if (to_bf16) { dx16[i] = matmul_bf16_round_value(d); }
        else { dx[i] = d; }
    }
}

#if MATMUL_X86
// The row pass's three loops in AVX-512 (vec16_enabled; LLMC_VEC16=0: the compiled ones above), on the same numbers
// with the same operations (vec16_expf and vec16_tanhf are vec_expf's and vec_tanhf's bits; the product the compiled
// dlogits loop fuses into 1 - t^2 is fused here by hand), the tail of a row in one masked vector. Where the compiled
// loops spent half their time in the exponential's integer conversions and masks. (fp-contract off: no other
// product is fused into the add after it, as GCC would do with the intrinsics' products.)

// classifier_row_softcap_max's capped logits and maximum (the maximum's sign when it is a zero aside, as
// classifier_row_max_lanes: nothing after it sees it), asking for writing one cache line of ahead_w (V bf16, or NULL:
// none) per 32 logits
__attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off")))
static float classifier_row_softcap_max16(float* x, int V, float cap, const uint16_t* ahead_w) {
    const __m512 inv = _mm512_set1_ps(1.0f / cap), vcap = _mm512_set1_ps(cap);
    __m512 lane_max = _mm512_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        if (ahead_w != NULL && i % 32 == 0) { __builtin_prefetch(ahead_w + i, 1, 3); }
        __m512 z = _mm512_mul_ps(vcap, vec16_tanhf(_mm512_mul_ps(_mm512_loadu_ps(x + i), inv)));
        _mm512_storeu_ps(x + i, z);
        lane_max = _mm512_max_ps(z, lane_max); // (z > max ? z : max: a NaN skipped)
    }
    if (i < V) {
        __mmask16 k = vec16_first(V - i);
        __m512 z = _mm512_mul_ps(vcap, vec16_tanhf(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, x + i), inv)));
        _mm512_mask_storeu_ps(x + i, k, z);
        lane_max = _mm512_mask_max_ps(lane_max, k, z, lane_max);
    }
    float lanes[16];
    _mm512_storeu_ps(lanes, lane_max);
    float maxval = -INFINITY;
    for (int j = 0; j < 16; j++) { maxval = lanes[j] > maxval ? lanes[j] : maxval; }
    return maxval;
}

// classifier_row_exp_sum_ahead's exponentials and sum: the 16 lane sums, the tail's values added in double one by
// one, then the lanes, as there (ahead_w: as vec16_exp_sub's)
__attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off")))
static double classifier_row_exp_sum16(float* e, const float* x, int V, float maxval, const float* next,
                                       const uint16_t* ahead_w) {
    __m512 part = vec16_exp_sub(e, x, V, maxval, next, ahead_w);
    double sum = 0.0;
    for (int i = V - V % 16; i < V; i++) { sum += e[i]; }
    float lanes[16];
    _mm512_storeu_ps(lanes, part);
    for (int j = 0; j < 16; j++) { sum += lanes[j]; }
    return sum;
}

// classifier_row_dlogits (into dx16 in bf16 when dx16 is given, else into dx), 32 logits a step
__attribute__((target("avx512f,avx512bw"), optimize("fp-contract=off"), always_inline))
static inline __m512 classifier_dlogit16(__m512 e, __m512 z, __m512 inv, __m512 dloss, __m512 icap, int capped) {
    __m512 d = _mm512_mul_ps(_mm512_mul_ps(e, inv), dloss);
    if (capped) {
        __m512 t = _mm512_mul_ps(z, icap);
        d = _mm512_mul_ps(d, _mm512_fnmadd_ps(t, t, _mm512_set1_ps(1.0f)));
    }
    return d;
}

__attribute__((target(MM_BF16_TARGET), optimize("fp-contract=off")))
static void classifier_row_dlogits16(float* dx, uint16_t* dx16, const float* e, const float* x, int V, float inv,
                                     float dloss, float icap, int capped) {
    const __m512 vinv = _mm512_set1_ps(inv), vdloss = _mm512_set1_ps(dloss), vicap = _mm512_set1_ps(icap);
    const __m512 zero = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= V; i += 32) {
        __m512 d0 = classifier_dlogit16(_mm512_loadu_ps(e + i), capped ? _mm512_loadu_ps(x + i) : zero, vinv, vdloss,
                                        vicap, capped);
        __m512 d1 = classifier_dlogit16(_mm512_loadu_ps(e + i + 16), capped ? _mm512_loadu_ps(x + i + 16) : zero, vinv,
                                        vdloss, vicap, capped);
        if (dx16 != NULL) { _mm512_storeu_si512((void*)(dx16 + i), mm32_round_bf16(d0, d1)); }
        else {
            _mm512_storeu_ps(dx + i, d0);
            _mm512_storeu_ps(dx + i + 16, d1);
        }
    }
    for (; i < V; i += 16) {
        __mmask16 k = V - i >= 16 ? (__mmask16)0xffff : vec16_first(V - i);
        __m512 d = classifier_dlogit16(_mm512_maskz_loadu_ps(k, e + i), capped ? _mm512_maskz_loadu_ps(k, x + i) : zero,
                                       vinv, vdloss, vicap, capped);
        if (dx16 != NULL) {
            mm16_store_bf16(dx16 + i, d, V - i < 16 ? V - i : 16);
        } else {
            _mm512_mask_storeu_ps(dx + i, k, d);
        }
    }
}

// The row pass's three loops in AVX2 (vec8_enabled, on a CPU without AVX-512; LLMC_VEC8=0: the compiled ones above):
// the AVX-512 loops' operations on the 16 lanes as two vectors of 8 (the same partial sums, added in the same order),
// the tail in masked vectors. On a Zen 3 the compiled loops kept the exponentials' 16 sums on the stack and moved
// each vector of them through it in 8-byte pieces. fp32 dlogits only (bf16 dlogits need oneDNN's bf16 GEMMs, which
// a CPU without AVX-512 has not: the compiled loop writes them).

// classifier_row_max_lanes's maximum (any order: the same value, a zero's sign aside), four vectors side by side
__attribute__((target("avx2")))
static float classifier_row_max8(const float* x, int V) {
    __m256 m[4];
    for (int k = 0; k < 4; k++) { m[k] = _mm256_set1_ps(-INFINITY); }
    int i = 0;
    for (; i + 32 <= V; i += 32) {
        for (int k = 0; k < 4; k++) { m[k] = _mm256_max_ps(_mm256_loadu_ps(x + i + 8 * k), m[k]); } // (a NaN skipped)
    }
    for (; i < V; i += 8) {
        __m256i k = vec8_first(V - i);
        __m256 z = _mm256_blendv_ps(m[0], _mm256_maskload_ps(x + i, k), _mm256_castsi256_ps(k));
        m[0] = _mm256_max_ps(z, m[0]);
    }
    float lanes[32];
    for (int k = 0; k < 4; k++) { _mm256_storeu_ps(lanes + 8 * k, m[k]); }
    float maxval = -INFINITY;
    for (int j = 0; j < 32; j++) { maxval = lanes[j] > maxval ? lanes[j] : maxval; }
    return maxval;
}

// classifier_row_softcap_max16 on two vectors of 8
__attribute__((target("avx2,fma"), optimize("fp-contract=off")))
static float classifier_row_softcap_max8(float* x, int V, float cap) {
    const __m256 inv = _mm256_set1_ps(1.0f / cap), vcap = _mm256_set1_ps(cap);
    __m256 max_lo = _mm256_set1_ps(-INFINITY), max_hi = max_lo;
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        __m256 z0 = _mm256_mul_ps(vcap, vec8_tanhf(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv)));
        __m256 z1 = _mm256_mul_ps(vcap, vec8_tanhf(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8), inv)));
        _mm256_storeu_ps(x + i, z0);
        _mm256_storeu_ps(x + i + 8, z1);
        max_lo = _mm256_max_ps(z0, max_lo); // (z > max ? z : max: a NaN skipped)
        max_hi = _mm256_max_ps(z1, max_hi);
    }
    for (; i < V; i += 8) {
        __m256i k = vec8_first(V - i);
        __m256 z = _mm256_mul_ps(vcap, vec8_tanhf(_mm256_mul_ps(_mm256_maskload_ps(x + i, k), inv)));
        _mm256_maskstore_ps(x + i, k, z);
        max_lo = _mm256_max_ps(_mm256_blendv_ps(max_lo, z, _mm256_castsi256_ps(k)), max_lo);
    }
    float lanes[16];
    _mm256_storeu_ps(lanes, max_lo);
    _mm256_storeu_ps(lanes + 8, max_hi);
    float maxval = -INFINITY;
    for (int j = 0; j < 16; j++) { maxval = lanes[j] > maxval ? lanes[j] : maxval; }
    return maxval;
}

// classifier_row_exp_sum16 on two vectors of 8: lanes 0-7 and 8-15 of its 16 sums, the tail's values added in
// double one by one, then the lanes
__attribute__((target("avx2,fma"), optimize("fp-contract=off")))
static double classifier_row_exp_sum8(float* e, const float* x, int V, float maxval, const float* next) {
    __m256 part[2];
    vec8_exp_sub(e, x, V, maxval, next, part);
    double sum = 0.0;
    for (int i = V - V % 16; i < V; i++) { sum += e[i]; }
    float lanes[16];
    _mm256_storeu_ps(lanes, part[0]);
    _mm256_storeu_ps(lanes + 8, part[1]);
    for (int j = 0; j < 16; j++) { sum += lanes[j]; }
    return sum;
}

// classifier_dlogit16 on 8 lanes
__attribute__((target("avx2,fma"), optimize("fp-contract=off"), always_inline))
static inline __m256 classifier_dlogit8(__m256 e, __m256 z, __m256 inv, __m256 dloss, __m256 icap, int capped) {
    __m256 d = _mm256_mul_ps(_mm256_mul_ps(e, inv), dloss);
    if (capped) {
        __m256 t = _mm256_mul_ps(z, icap);
        d = _mm256_mul_ps(d, _mm256_fnmadd_ps(t, t, _mm256_set1_ps(1.0f)));
    }
    return d;
}

// classifier_row_dlogits into dx (fp32; may be e or x: in place), 16 logits a step
__attribute__((target("avx2,fma"), optimize("fp-contract=off")))
static void classifier_row_dlogits8(float* dx, const float* e, const float* x, int V, float inv, float dloss,
                                    float icap, int capped) {
    const __m256 vinv = _mm256_set1_ps(inv), vdloss = _mm256_set1_ps(dloss), vicap = _mm256_set1_ps(icap);
    const __m256 zero = _mm256_setzero_ps();
    int i = 0;
    for (; i + 16 <= V; i += 16) {
        __m256 d0 = classifier_dlogit8(_mm256_loadu_ps(e + i), capped ? _mm256_loadu_ps(x + i) : zero, vinv, vdloss,
                                       vicap, capped);
        __m256 d1 = classifier_dlogit8(_mm256_loadu_ps(e + i + 8), capped ? _mm256_loadu_ps(x + i + 8) : zero, vinv,
                                       vdloss, vicap, capped);
        _mm256_storeu_ps(dx + i, d0);
        _mm256_storeu_ps(dx + i + 8, d1);
    }
    for (; i < V; i += 8) {
        __m256i k = vec8_first(V - i);
        __m256 d = classifier_dlogit8(_mm256_maskload_ps(e + i, k), capped ? _mm256_maskload_ps(x + i, k) : zero, vinv,
                                      vdloss, vicap, capped);
        _mm256_maskstore_ps(dx + i, k, d);
    }
}
#endif

// One row, classifier_row's results in three passes over it: the softcap with the max, the exponentials with their
// sum, dlogits with the probabilities (in registers). x, e, dx, V, Vp, cap, target, dloss as for classifier_row; with
// dx16 (and dx NULL) dlogits go to dx16 (Vp) in bf16 alone, rounded as matmul.h rounds a GEMM operand, 0 in the
// padded columns. lanes: the hand-written loops to run (classifier_lanes: 16, 8, or 0 for the compiled ones).
// prefetch_dx16 (classifier_prefetch_dlogits): the AVX-512 loops ask for dx16's lines before the dlogits pass
// writes them, in the pass before the exponentials' when capped (the softcap's), else in the exponentials'.
static inline float classifier_row_fused(float* x, float* dx, uint16_t* dx16, float* e, int V, int Vp, float cap,
                                         int target, float dloss, const float* next, int lanes, int prefetch_dx16) {
    int capped = cap > 0.0f;
    if (target < 0) { // not supervised: the capped logits (when they are kept), loss 0, no gradient
        if (capped) {
            float inv = 1.0f / cap;
            for (int i = 0; i < V; i++) { x[i] = cap * vec_tanhf(x[i] * inv); }
        }
        if (dx != NULL) { memset(dx, 0, (size_t)Vp * sizeof(float)); }
        if (dx16 != NULL) { memset(dx16, 0, (size_t)Vp * sizeof(uint16_t)); }
        return 0.0f;
    }
    float maxval, zt;
    double sum;
    const float* ahead = next != NULL ? next : x;
#if MATMUL_X86
    if (lanes == 16) {
        const uint16_t* ahead_w = prefetch_dx16 ? dx16 : NULL;
        maxval = capped ? classifier_row_softcap_max16(x, V, cap, ahead_w) : classifier_row_max_lanes(x, V);
        zt = x[target];
        sum = classifier_row_exp_sum16(e, x, V, maxval, ahead, capped ? NULL : ahead_w);
    } else if (lanes == 8) {
        maxval = capped ? classifier_row_softcap_max8(x, V, cap) : classifier_row_max8(x, V);
        zt = x[target];
        sum = classifier_row_exp_sum8(e, x, V, maxval, ahead);
    } else
#endif
    {
        maxval = capped ? classifier_row_softcap_max(x, V, cap) : classifier_row_max_lanes(x, V);
        zt = x[target];  // read before e (which may be x) is written
        sum = classifier_row_exp_sum_ahead(e, x, V, maxval, ahead);
    }
    float loss = (float)(log(sum) - (double)(zt - maxval));
    if (dx == NULL && dx16 == NULL) { return loss; }
    float inv = (float)(1.0 / sum);
    float icap = capped ? 1.0f / cap : 0.0f;
    float et = e[target];  // read before dlogits (which may lie over e) are written
#if MATMUL_X86
    if (lanes == 16) { classifier_row_dlogits16(dx, dx16, e, x, V, inv, dloss, icap, capped); } else
    if (lanes == 8 && dx16 == NULL) { classifier_row_dlogits8(dx, e, x, V, inv, dloss, icap, capped); } else
#endif
    if (dx16 != NULL) {
        if (capped) { classifier_row_dlogits(NULL, dx16, e, x, V, inv, dloss, icap, 1, 1); }
        else { classifier_row_dlogits(NULL, dx16, e, x, V, inv, dloss, icap, 0, 1); }
    } else {
        if (capped) { classifier_row_dlogits(dx, NULL, e, x, V, inv, dloss, icap, 1, 0); }
        else { classifier_row_dlogits(dx, NULL, e, x, V, inv, dloss, icap, 0, 0); }
    }
    // the target's column: its probability stored (volatile: rounded to float before the - 1, as the passes store
    // it), then p - 1
    volatile float pt = et * inv;
    float dt = classifier_dlogit(pt - 1.0f, dloss, zt, icap, capped);
    if (dx16 != NULL) {
        dx16[target] = matmul_bf16_round_value(dt);
        memset(dx16 + V, 0, (size_t)(Vp - V) * sizeof(uint16_t));
    } else {
        dx[target] = dt;
        memset(dx + V, 0, (size_t)(Vp - V) * sizeof(float));
    }
    return loss;
}

// the fused row's hand-written loops this CPU runs: 16 (AVX-512, LLMC_VEC16), 8 (AVX2, LLMC_VEC8) or 0 (compiled)
static int classifier_lanes(void) { return vec16_enabled() ? 16 : vec8_enabled() ? 8 : 0; }

// Whether the AVX-512 row pass asks for bf16 dlogits' cache lines for writing a pass ahead (prefetchw), so that its
// last pass's stores do not wait on memory for each line: a chunk of 1024 rows with softcap 15 in 12.4-13.0 instead
// of 13.7-15.0 ms, without softcap 7.7-8.2 instead of 8.5-9.6; nanochat d12's classifier phase 5 % faster (a Zen 5,
// 2 threads). LLMC_CLASSIFIER_PREFETCH=0: none, as before 2026-12-05 (the same bits), kept until timed beyond the
// Zen 5; read at each chunk.
static int classifier_prefetch_dlogits(void) { return env_switch_on("LLMC_CLASSIFIER_PREFETCH"); }

// the chunks' work space: `floats` floats, kept between calls (grown when needed)
static float* classifier_scratch(size_t floats) {
    static void* scratch = NULL;
    static size_t capacity = 0;
    return (float*)scratch_reserve(&scratch, &capacity, floats * sizeof(float));
}

static inline int classifier_thread_id(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

// the (capped) logits (rows,Vp) of rows of inp (row r at inp + r * ld, C wide) by weight (Vp,C)
static void classifier_logits(float* logits, const float* inp, int ld, const float* weight, float softcap, int rows,
                              int C, int V, int Vp) {
    matmul_gemm(matmul_precision, 0, 1, rows, Vp, C, inp, ld, weight, C, 0.0f, logits, Vp);
    if (softcap > 0.0f) {
        double t = phase_begin();
        #pragma omp parallel for
        for (int r = 0; r < rows; r++) { classifier_row(logits + (size_t)r * Vp, NULL, NULL, V, Vp, softcap, -1, 0.0f); }
        phase_end(PHASE_CLASSIFIER, t, 2.0 * 4.0 * rows * V, 2.0 * rows * V);
    }
}

// One chunk's row pass (PHASE_CLASSIFIER): `rows` rows of logits x (rows,Vp), capped in place when softcap > 0; with
// targets (rows) their losses into losses (rows, or NULL: not kept) and, with dx (rows,Vp) or dx16 (rows,Vp; the fused
// kernel only), dlogits in fp32 or in bf16 alone. e_rows: a Vp row per thread for the exponentials, or NULL: they go
// to dx's row, else to x's. kept: x is kept (its capped values written back count as traffic).
static void classifier_chunk_rows(float* losses, float* x, float* dx, uint16_t* dx16, float* e_rows, const int* targets,
                                  float dloss, float softcap, int rows, int V, int Vp, int kept) {
    // (read here: never inside the parallel region)
    int fused = classifier_kernel() == CLASSIFIER_FUSED, lanes = classifier_lanes();
    int prefetch = classifier_prefetch_dlogits();
    if (dx16 != NULL && !fused) { llmc_die("internal: bf16 dlogits from the classifier's passes kernel"); }
    double t = phase_begin();
    #pragma omp parallel for schedule(static)  // (a thread's rows one after another: row r + 1 is its next)
    for (int r = 0; r < rows; r++) {
        float* xr = x + (size_t)r * Vp;
        float* dxr = dx != NULL ? dx + (size_t)r * Vp : NULL;
        uint16_t* dxr16 = dx16 != NULL ? dx16 + (size_t)r * Vp : NULL;
        float* e = e_rows != NULL ? e_rows + (size_t)classifier_thread_id() * Vp : (dxr != NULL ? dxr : xr);
        int target = targets != NULL ? targets[r] : -1;
        float loss = fused ? classifier_row_fused(xr, dxr, dxr16, e, V, Vp, softcap, target, dloss, r + 1 < rows ? xr + Vp : NULL,
                                                  lanes, prefetch)
                           : classifier_row(xr, dxr, e, V, Vp, softcap, target, dloss);
        if (losses != NULL && targets != NULL) { losses[r] = loss; } // 0 for target -1
    }
    // bytes: the logits read (and written back capped when they are kept), dlogits written (fp32, or bf16 alone),
    // targets and losses; flops per logit: max, subtract, exp, add; 3 more for dlogits; the softcap 2 forward, 3
    // backward
    int capped = softcap > 0.0f, backward = dx != NULL || dx16 != NULL;
    double n = (double)rows * V;
    double bytes = 4.0 * n * (1 + (kept && capped)) + (dx16 != NULL ? 2.0 : 4.0) * n * backward +
                   (targets != NULL ? 8.0 * rows : 0.0);
    double flops = n * ((targets != NULL ? 4 : 0) + 2 * capped + (backward ? 3 + 3 * capped : 0));
    phase_end(PHASE_CLASSIFIER, t, bytes, flops);
}

// the classifier a chunk of rows at a time, with its backward when dinp is given (the contract at the top of the file)
static void classifier_forward_backward(float* losses, float* logits, float* dinp, float* dweight, int overwrite,
                                        const float* inp, const float* weight, const int* targets, float dloss,
                                        float softcap, int BT, int C, int V, int Vp, int chunk) {
    // losses, targets are (BT); logits are (BT,Vp) or NULL; dinp, inp are (BT,C); dweight, weight are (Vp,C)
    int nthreads = 1;
#ifdef _OPENMP
    nthreads = omp_get_max_threads();
#endif
    int rows_max = chunk < BT ? chunk : BT;
    int backward = dinp != NULL && targets != NULL;
    // -p bf16 on oneDNN: dlogits (rows, Vp) in bf16 alone, after the rest of the work space (half a float each)
    int dlogits_bf16 = backward && classifier_dlogits_bf16();
    // a chunk's logits when they are not kept, or its fp32 dlogits when they are; a row per thread for the
    // exponentials where neither the logits nor fp32 dlogits can take them (kept logits without a backward or with
    // bf16 dlogits, the softcap's backward: it reads the capped logits again)
    size_t chunk_floats = (logits == NULL || (backward && !dlogits_bf16)) ? (size_t)rows_max * Vp : 0;
    int own_row = targets != NULL && (logits != NULL ? !backward || dlogits_bf16 : backward && softcap > 0.0f);
    size_t row_floats = own_row ? (size_t)Vp : 0;
    size_t bf16_floats = dlogits_bf16 ? ((size_t)rows_max * Vp + 1) / 2 : 0;
    float* scratch = classifier_scratch(chunk_floats + (size_t)nthreads * row_floats + bf16_floats);
    float* rows_e = own_row ? scratch + chunk_floats : NULL;
    uint16_t* dx16 = dlogits_bf16 ? (uint16_t*)(scratch + chunk_floats + (size_t)nthreads * row_floats) : NULL;
    for (int r0 = 0; r0 < BT; r0 += chunk) {
        int rows = BT - r0 < chunk ? BT - r0 : chunk;
        float* x = logits != NULL ? logits + (size_t)r0 * Vp : scratch;
        float* dx = !backward || dx16 != NULL ? NULL : (logits != NULL ? scratch : x);
        const float* in = inp + (size_t)r0 * C;
        matmul_gemm(matmul_precision, 0, 1, rows, Vp, C, in, C, weight, C, 0.0f, x, Vp);
        classifier_chunk_rows(losses != NULL ? losses + r0 : NULL, x, dx, dx16, rows_e, targets != NULL ? targets + r0 : NULL,
                              dloss, softcap, rows, V, Vp, logits != NULL);
        if (backward) {
            // dinp rows = dlogits . weight; dweight (+)= dlogits^T . inp rows
            float beta = overwrite && r0 == 0 ? 0.0f : 1.0f;
            if (dx16 != NULL) { // the GEMMs matmul_gemm runs, on the bf16 numbers it would round dx to
                matmul_gemm_bf16_stored(0, 0, rows, C, Vp, NULL, dx16, Vp, weight, NULL, C, 0.0f, dinp + (size_t)r0 * C, C);
                matmul_gemm_bf16_stored(1, 0, Vp, C, rows, NULL, dx16, Vp, in, NULL, C, beta, dweight, C);
            } else {
                matmul_gemm(matmul_precision, 0, 0, rows, C, Vp, dx, Vp, weight, C, 0.0f, dinp + (size_t)r0 * C, C);
                matmul_gemm(matmul_precision, 1, 0, Vp, C, rows, dx, Vp, in, C, beta, dweight, C);
            }
        }
    }
}

// ----------------------------------------------------------------------------
// a CPU model's classifier

typedef struct {
    const float* inp;       // (B,T,C) the final norm's output
    const float* weight;    // (Vp,C) the lm_head (GPT-2's and a tied Llama 3's: wte)
    float* dinp;            // (B,T,C) inp's gradient, written by the backward
    float* dweight;         // (Vp,C) the lm_head's gradient: added to, or written when the gradients are stale
    float* losses;          // (B,T)
    float softcap;          // 0: none
    int C, Vp;              // Vp: the logits' row stride (V rounded up, or V)
} CpuClassifier;

// the logits of a forward pass that keeps them: `rows` rows of cm->logits_stride, allocated at the first such pass
// and grown when a larger one comes (training allocates none)
static float* cpu_classifier_logits_buffer(CpuModel* cm, size_t rows) {
    size_t floats = rows * (size_t)cm->logits_stride;
    if (floats > cm->logits_capacity) {
        free_aligned(cm->logits_memory);
        cm->logits_memory = (float*)mallocAligned(floats * sizeof(float));
        cm->logits_capacity = floats;
    }
    return cm->logits_memory;
}

// the classifier in the model's forward pass on cm->cur_B x cm->cur_T positions; targets (B,T) or NULL
static void cpu_classifier_forward(CpuModel* cm, const CpuClassifier* k, const int* targets) {
    int B = cm->cur_B, T = cm->cur_T, V = cm->vocab_size, BT = B * T;
    int backward = targets != NULL && cm->backward_follows;
    float dloss = cm->backward_loss_scale / (float)BT; // the loss is the mean over BT positions
    cm->backward_follows = 0;
    cm->classifier_backward_done = 0;
    cm->logits = NULL;
    if (targets == NULL && cm->last_logits_only) { // each sequence's last position
        float* logits = cpu_classifier_logits_buffer(cm, (size_t)B);
        classifier_logits(logits, k->inp + (size_t)(T - 1) * k->C, T * k->C, k->weight, k->softcap, B, k->C, V, k->Vp);
        cm->logits = logits;
        return;
    }
    float* logits = targets == NULL || cm->keep_logits ? cpu_classifier_logits_buffer(cm, (size_t)BT) : NULL;
    classifier_forward_backward(k->losses, logits, backward ? k->dinp : NULL, k->dweight, cm->grads_stale, k->inp,
                                k->weight, targets, dloss, k->softcap, BT, k->C, V, k->Vp, CLASSIFIER_CHUNK_ROWS);
    cm->logits = logits;
    if (backward) {
        cm->classifier_backward_done = 1;
        cm->classifier_loss_scale = cm->backward_loss_scale;
    }
}

// the classifier in the model's backward pass (of loss_scale times the mean loss): k->dinp written, k->dweight
// added to (written when the gradients are stale); run already when the forward pass knew that this backward follows
static void cpu_classifier_backward(CpuModel* cm, const CpuClassifier* k, float loss_scale) {
    if (cm->classifier_backward_done) {
        if (cm->classifier_loss_scale != loss_scale) {
            llmc_die("internal: %s_backward(%g) after a forward pass expecting loss_scale %g", cm->family, loss_scale,
                     cm->classifier_loss_scale);
        }
        cm->classifier_backward_done = 0;
        return;
    }
    int BT = cm->cur_B * cm->cur_T;
    classifier_forward_backward(NULL, NULL, k->dinp, k->dweight, cm->grads_stale, k->inp, k->weight, cm->targets,
                                loss_scale / (float)BT, k->softcap, BT, k->C, cm->vocab_size, k->Vp, CLASSIFIER_CHUNK_ROWS);
}

#endif // LLMC_CLASSIFIER_CPU_H
