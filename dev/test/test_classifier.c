/*
dev/test/test_classifier.c: unit tests of llmc/cpu/classifier_cpu.h's classifier in chunks of rows against the same
classifier on whole buffers (matmul_forward, softcap_forward, crossentropy_softmax_forward, then
crossentropy_softmax_backward, softcap_backward, matmul_backward: what the CPU trainers ran before the chunks), under
both row kernels (LLMC_CLASSIFIER=fused, the default, and passes):
  - per-row results are the same bits: the losses, the (capped) logits when kept, the input gradient dinp
  - the lm_head's gradient dweight, summed over the chunks in order, is within float rounding of the whole GEMM's,
    and the same bits with one chunk; it is written over stale contents (overwrite) or added to them
  - the padded columns (V < Vp) get no gradient: dweight's pad rows stay exactly 0
  - softcap on and off; chunk sizes 1, one that does not divide the rows (the last chunk partial), the rows, more
  - a pass without a backward computes the losses alone, one without targets the logits alone, classifier_logits
    the logits of strided rows (sampling's last positions)
  - target -1 (not supervised: a chat shard's masked position): the row's loss is 0 and it has no gradient (its dinp
    row 0, nothing in dweight), over stale work space; the supervised rows keep the bits of an unmasked pass
  - a model's classifier (cpu_classifier_forward / _backward on a CpuModel): the backward run in the forward pass
    (cpu_model_expect_backward) and the one run by the backward give the same bits; a training forward keeps no
    logits, one without targets keeps them all, or each sequence's last with last_logits_only, one with
    keep_logits keeps them beside the losses
The fused row kernel against the passes, bit for bit:
  - one row (classifier_row_fused against classifier_row) for V = 7 (shorter than a 16-float block), 16, 250, 1001
    and 1024 (= Vp), softcap on and off, targets 0, V - 1, one inside and -1, logits of a few units and of tens (the
    exponential's clamp, the tanh's saturation), each buffer layout the chunks use (dlogits over the logits in place,
    the exponentials in a row of their own, kept logits): the loss, the (capped) logits, dlogits over Vp; and its
    bf16 dlogits (dx16) equal to the passes' dlogits rounded as matmul.h rounds a GEMM operand, 0 in the pad, with
    and without their lines asked for ahead (LLMC_CLASSIFIER_PREFETCH: the chunks below too); on a
    CPU with AVX-512 the fused row with its hand-written loops (llmc/cpu/vecmath.h's vec16_enabled), on one with AVX2
    with its AVX2 loops (vec8_enabled), and with the compiled ones (the chunks below run the default: the hand-written
    loops there)
  - the chunks on -p bf16 (matmul_precision MATMUL_BF16): losses, kept logits, dinp and dweight the passes' bits with
    and without masked rows; where oneDNN has a bf16 kernel the fused kernel's dlogits are bf16 alone (the line
    "bf16 dlogits: ..." says which ran)
  - LLMC_CLASSIFIER's choice and its error line
The fp32 GEMMs here are the built-in kernel's (LLMC_FP32_GEMM=builtin), which sums each element in one fixed order
whatever the number of rows.

    dev/test/test_classifier             the checks (a few seconds)
    dev/test/test_classifier --time      the row pass of one chunk at GPT-2 d12's shapes (1024 rows, V = 50257, 2
                                         threads or OMP_NUM_THREADS), passes against fused, alternating, medians;
                                         --time cpu: in the process's CPU time (a shared machine)
*/
#include "llmc/cpu/classifier_cpu.h"
#include "dev/test/test_common.h"

#define BT 74    // rows: 2 x 37
#define C 24
#define V 250    // padded to Vp: the padded columns and the lm_head's zero pad rows
#define Vp 256

typedef struct {
    float logits[BT * Vp];
    float losses[BT];
    float dinp[BT * C];
    float dweight[Vp * C];
} Result;

static float inp[BT * C], weight[Vp * C];
static int targets[BT];

// the whole-buffer classifier: logits, losses, and with dloss > 0 the gradients (dweight added to *start)
static void reference(Result* r, const float* start, float softcap, float dloss) {
    static float probs[BT * Vp], dlogits[BT * Vp], dlosses[BT];
    matmul_forward(r->logits, inp, weight, NULL, 1, BT, C, Vp);
    if (softcap > 0.0f) {
        for (int i = 0; i < BT; i++) { softcap_forward(r->logits + (size_t)i * Vp, softcap, V); }
    }
    crossentropy_softmax_forward(r->losses, probs, r->logits, targets, 1, BT, V, Vp);
    memset(dlogits, 0, sizeof(dlogits));
    memset(r->dinp, 0, sizeof(r->dinp));
    memcpy(r->dweight, start, sizeof(r->dweight));
    for (int i = 0; i < BT; i++) { dlosses[i] = dloss; }
    crossentropy_softmax_backward(dlogits, dlosses, probs, targets, 1, BT, V, Vp);
    if (softcap > 0.0f) {
        for (int i = 0; i < BT; i++) { softcap_backward(dlogits + (size_t)i * Vp, r->logits + (size_t)i * Vp, softcap, V); }
    }
    matmul_backward(r->dinp, r->dweight, NULL, dlogits, inp, weight, 1, BT, C, Vp);
}

static int same_bits(const float* a, const float* b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static double max_abs(const float* a, size_t n) {
    double m = 0.0;
    for (size_t i = 0; i < n; i++) { m = fabs((double)a[i]) > m ? fabs((double)a[i]) : m; }
    return m;
}

// the pad rows V..Vp-1 of dweight are exactly 0
static int pad_rows_zero(const float* dweight) {
    for (size_t i = (size_t)V * C; i < (size_t)Vp * C; i++) {
        if (float_bits(dweight[i]) != 0u) { return 0; }
    }
    return 1;
}

static void test_forward_backward(float softcap, int chunk) {
    const float dloss = 1.0f / BT;
    static Result ref, got;
    static float zero[Vp * C], start[Vp * C];
    memset(zero, 0, sizeof(zero));
    reference(&ref, zero, softcap, dloss);
    // stale contents, overwritten: dinp and dweight hold garbage (NaN) on entry
    for (size_t i = 0; i < (size_t)Vp * C; i++) { got.dweight[i] = NAN; }
    for (size_t i = 0; i < (size_t)BT * C; i++) { got.dinp[i] = NAN; }
    memset(got.losses, 0, sizeof(got.losses));
    classifier_forward_backward(got.losses, NULL, got.dinp, got.dweight, 1, inp, weight, targets, dloss, softcap, BT, C,
                                V, Vp, chunk);
    CHECK(same_bits(got.losses, ref.losses, BT), "softcap %g, chunk %d: the losses are the whole buffers' bits", softcap, chunk);
    CHECK(same_bits(got.dinp, ref.dinp, (size_t)BT * C), "softcap %g, chunk %d: dinp is the whole buffers' bits", softcap, chunk);
    double scale = max_abs(ref.dweight, (size_t)Vp * C), diff = max_abs_diff(got.dweight, ref.dweight, (size_t)Vp * C);
    CHECK(scale > 0.0 && diff <= 1e-6 * scale, "softcap %g, chunk %d: dweight within %g of the whole GEMM's (max %g)",
          softcap, chunk, diff, scale);
    if (chunk >= BT) {
        CHECK(same_bits(got.dweight, ref.dweight, (size_t)Vp * C), "softcap %g, one chunk of %d: dweight is the whole GEMM's bits",
              softcap, chunk);
    }
    CHECK(pad_rows_zero(got.dweight), "softcap %g, chunk %d: the pad rows of dweight are 0", softcap, chunk);
    // added to what dweight held
    float* prior = random_array((size_t)Vp * C, 7);
    for (size_t i = (size_t)V * C; i < (size_t)Vp * C; i++) { prior[i] = 0.0f; }
    memcpy(start, prior, sizeof(start));
    reference(&ref, start, softcap, dloss);
    memcpy(got.dweight, prior, sizeof(got.dweight));
    classifier_forward_backward(NULL, NULL, got.dinp, got.dweight, 0, inp, weight, targets, dloss, softcap, BT, C, V, Vp, chunk);
    diff = max_abs_diff(got.dweight, ref.dweight, (size_t)Vp * C);
    CHECK(diff <= 1e-6 * max_abs(ref.dweight, (size_t)Vp * C), "softcap %g, chunk %d: dweight += its gradient (off by %g)",
          softcap, chunk, diff);
    CHECK(same_bits(got.dinp, ref.dinp, (size_t)BT * C), "softcap %g, chunk %d: dinp written over what it held", softcap, chunk);
    free(prior);
}

// the logits kept: the whole buffers' (capped) logits, with or without a backward in the same pass
static void test_kept_logits(float softcap, int chunk) {
    static Result ref, got;
    static float zero[Vp * C];
    memset(zero, 0, sizeof(zero));
    reference(&ref, zero, softcap, 1.0f / BT);
    for (int backward = 0; backward <= 1; backward++) {
        memset(&got, 0, sizeof(got));
        classifier_forward_backward(got.losses, got.logits, backward ? got.dinp : NULL, got.dweight, 1, inp, weight,
                                    targets, 1.0f / BT, softcap, BT, C, V, Vp, chunk);
        CHECK(same_bits(got.logits, ref.logits, (size_t)BT * Vp), "softcap %g, chunk %d, backward %d: the kept logits",
              softcap, chunk, backward);
        CHECK(same_bits(got.losses, ref.losses, BT), "softcap %g, chunk %d, backward %d: the losses with kept logits",
              softcap, chunk, backward);
        if (backward) {
            CHECK(same_bits(got.dinp, ref.dinp, (size_t)BT * C), "softcap %g, chunk %d: dinp with kept logits", softcap, chunk);
        }
    }
    // no targets: the logits alone
    memset(&got, 0, sizeof(got));
    classifier_forward_backward(NULL, got.logits, NULL, NULL, 0, inp, weight, NULL, 0.0f, softcap, BT, C, V, Vp, chunk);
    CHECK(same_bits(got.logits, ref.logits, (size_t)BT * Vp), "softcap %g, chunk %d: the logits without targets", softcap, chunk);
    // each sequence's last position (2 sequences of 37): rows 36 and 73
    static float last[2 * Vp];
    classifier_logits(last, inp + (size_t)36 * C, 37 * C, weight, softcap, 2, C, V, Vp);
    CHECK(same_bits(last, ref.logits + (size_t)36 * Vp, Vp) && same_bits(last + Vp, ref.logits + (size_t)73 * Vp, Vp),
          "softcap %g: classifier_logits of the strided last positions", softcap);
}

// masked rows (target -1): a stretch of them and single ones, in the first and in later chunks
static void test_masked_rows(float softcap, int chunk) {
    const float dloss = 1.0f / BT;
    static Result full, ref, got;
    static float zero[Vp * C];
    static int saved[BT];
    memset(zero, 0, sizeof(zero));
    reference(&full, zero, softcap, dloss);
    // an unmasked pass first, so the chunks' work space holds another pass's dlogits
    classifier_forward_backward(got.losses, NULL, got.dinp, got.dweight, 1, inp, weight, targets, dloss, softcap, BT, C,
                                V, Vp, chunk);
    memcpy(saved, targets, sizeof(saved));
    for (int i = 0; i < BT; i++) {
        if (i % 5 == 0 || (i >= 10 && i < 20)) { targets[i] = -1; }
    }
    reference(&ref, zero, softcap, dloss);
    for (size_t i = 0; i < (size_t)BT * C; i++) { got.dinp[i] = NAN; }
    for (int i = 0; i < BT; i++) { got.losses[i] = NAN; }
    classifier_forward_backward(got.losses, NULL, got.dinp, got.dweight, 1, inp, weight, targets, dloss, softcap, BT, C,
                                V, Vp, chunk);
    int masked_zero = 1, kept = 1;
    for (int i = 0; i < BT; i++) {
        const float* row = got.dinp + (size_t)i * C;
        if (targets[i] < 0) {
            masked_zero &= float_bits(got.losses[i]) == 0u && max_abs(row, C) == 0.0;
        } else {
            kept &= float_bits(got.losses[i]) == float_bits(full.losses[i]) &&
                    same_bits(row, full.dinp + (size_t)i * C, C);
        }
    }
    CHECK(masked_zero, "softcap %g, chunk %d: masked rows have loss 0 and dinp 0", softcap, chunk);
    CHECK(kept, "softcap %g, chunk %d: supervised rows keep the unmasked pass's losses and dinp bits", softcap, chunk);
    CHECK(same_bits(got.losses, ref.losses, BT) && same_bits(got.dinp, ref.dinp, (size_t)BT * C),
          "softcap %g, chunk %d: masked losses and dinp are the whole buffers' bits", softcap, chunk);
    double diff = max_abs_diff(got.dweight, ref.dweight, (size_t)Vp * C);
    CHECK(diff <= 1e-6 * max_abs(ref.dweight, (size_t)Vp * C), "softcap %g, chunk %d: masked dweight within %g of the whole GEMM's",
          softcap, chunk, diff);
    CHECK(pad_rows_zero(got.dweight), "softcap %g, chunk %d: masked: the pad rows of dweight are 0", softcap, chunk);
    memcpy(targets, saved, sizeof(saved));
}

// a model's classifier on B = 2 sequences of T = 37 positions (one chunk)
static void test_model_classifier(float softcap) {
    static Result ref, fused, later;
    static float zero[Vp * C];
    memset(zero, 0, sizeof(zero));
    reference(&ref, zero, softcap, 0.5f / BT);
    CpuModel cm;
    memset(&cm, 0, sizeof(cm));
    cm.family = "test";
    cm.vocab_size = V;
    cm.cur_B = 2;
    cm.cur_T = 37;
    cm.targets = targets;
    cm.grads_stale = 1;
    cpu_model_set_output(&cm, Vp, NULL);
    // the backward in the forward pass: the model's backward then finds it done
    memset(&fused, 0, sizeof(fused));
    CpuClassifier k = {inp, weight, fused.dinp, fused.dweight, fused.losses, softcap, C, Vp};
    cpu_model_expect_backward(&cm, 0.5f);
    cpu_classifier_forward(&cm, &k, targets);
    CHECK(cm.logits == NULL && cm.logits_memory == NULL, "softcap %g: a training forward keeps no logits", softcap);
    CHECK(same_bits(fused.losses, ref.losses, BT) && same_bits(fused.dinp, ref.dinp, (size_t)BT * C),
          "softcap %g: the losses and dinp of the backward in the forward pass", softcap);
    memset(fused.dinp, 0, sizeof(fused.dinp));
    cpu_classifier_backward(&cm, &k, 0.5f);
    CHECK(max_abs(fused.dinp, (size_t)BT * C) == 0.0, "softcap %g: the backward does not run it again", softcap);
    // a forward pass not told: the backward runs the chunks
    memset(&later, 0, sizeof(later));
    k.dinp = later.dinp;
    k.dweight = later.dweight;
    k.losses = later.losses;
    cpu_classifier_forward(&cm, &k, targets);
    CHECK(max_abs(later.dinp, (size_t)BT * C) == 0.0 && same_bits(later.losses, ref.losses, BT),
          "softcap %g: a forward pass without a backward to follow: the losses alone", softcap);
    cpu_classifier_backward(&cm, &k, 0.5f);
    CHECK(same_bits(later.dinp, ref.dinp, (size_t)BT * C) && same_bits(later.dweight, fused.dweight, (size_t)Vp * C),
          "softcap %g: the backward's own chunks give the bits of the backward in the forward pass", softcap);
    // the logits: all of them without targets, each sequence's last with last_logits_only, beside the losses
    cpu_classifier_forward(&cm, &k, NULL);
    CHECK(cm.logits != NULL && same_bits(cm.logits, ref.logits, (size_t)BT * Vp), "softcap %g: the logits without targets",
          softcap);
    cm.last_logits_only = 1;
    cpu_classifier_forward(&cm, &k, NULL);
    CHECK(same_bits(cm.logits, ref.logits + (size_t)36 * Vp, Vp) && same_bits(cm.logits + Vp, ref.logits + (size_t)73 * Vp, Vp),
          "softcap %g: each sequence's last logits", softcap);
    cm.last_logits_only = 0;
    cm.keep_logits = 1;
    memset(later.losses, 0, sizeof(later.losses));
    cpu_classifier_forward(&cm, &k, targets);
    CHECK(cm.logits != NULL && same_bits(cm.logits, ref.logits, (size_t)BT * Vp) && same_bits(later.losses, ref.losses, BT),
          "softcap %g: keep_logits keeps the logits beside the losses", softcap);
    free_aligned(cm.logits_memory);
}

// ----------------------------------------------------------------------------
// one row: the fused kernel against the passes

// where a row's buffers lie, as the chunks lay them out
typedef enum {
    ROW_IN_PLACE,   // logits not kept: dlogits over the logits, the exponentials there too (softcap: a row of their own)
    ROW_KEPT,       // logits kept: dlogits in a row of their own, the exponentials there (bf16 dlogits: in their own)
    ROW_FORWARD,    // no backward: the losses alone, the exponentials over the logits (kept: in their own)
    ROW_LAYOUTS
} RowLayout;
static const char* const row_layout_names[ROW_LAYOUTS] = {"in place", "kept logits", "forward only"};

typedef struct {
    float loss;
    float* x;       // (Vp) the logits, after
    float* dx;      // (Vp) fp32 dlogits (NULL: none)
    uint16_t* dx16; // (Vp) bf16 dlogits (NULL: none)
} RowRun;

// runs one row with the kernel given from the logits z (nvp), dlogits in fp32, or in bf16 (to_bf16: fused only;
// prefetch: its loops ask for dx16's lines ahead)
static RowRun row_run(ClassifierKernel kernel, RowLayout layout, int to_bf16, int prefetch, int lanes, const float* z,
                      int nv, int nvp, float cap, int target, float dloss) {
    RowRun r = {0.0f, (float*)mallocCheck((size_t)nvp * sizeof(float)), NULL, NULL};
    float* own = (float*)mallocCheck((size_t)nvp * sizeof(float));  // a row of their own: exponentials or dlogits
    float* e_own = (float*)mallocCheck((size_t)nvp * sizeof(float));
    for (int i = 0; i < nvp; i++) { own[i] = e_own[i] = NAN; } // stale work space
    memcpy(r.x, z, (size_t)nvp * sizeof(float));
    float* dx = NULL;
    uint16_t* dx16 = NULL;
    float* e = r.x;
    int capped = cap > 0.0f;
    if (layout == ROW_IN_PLACE) {
        dx = to_bf16 ? NULL : r.x;
        e = capped ? e_own : r.x;
    } else if (layout == ROW_KEPT) {
        dx = to_bf16 ? NULL : own;
        e = to_bf16 ? e_own : own;
    } else {
        e = capped ? e_own : r.x;  // (a kept row's capped logits must survive: the exponentials elsewhere)
    }
    if (to_bf16 && layout != ROW_FORWARD) {
        dx16 = (uint16_t*)mallocCheck((size_t)nvp * sizeof(uint16_t));
        for (int i = 0; i < nvp; i++) { dx16[i] = 0x7fc1; } // stale: a NaN pattern
    }
    r.loss = kernel == CLASSIFIER_PASSES
                 ? classifier_row(r.x, dx, e, nv, nvp, cap, target, dloss)
                 : classifier_row_fused(r.x, dx, dx16, e, nv, nvp, cap, target, dloss, NULL, lanes, prefetch);
    if (dx != NULL) {
        r.dx = (float*)mallocCheck((size_t)nvp * sizeof(float));
        memcpy(r.dx, dx, (size_t)nvp * sizeof(float));
    }
    r.dx16 = dx16;
    free(own);
    free(e_own);
    return r;
}

static void row_free(RowRun* r) {
    free(r->x);
    free(r->dx);
    free(r->dx16);
}

static void test_row_fused(int nv, int nvp, float cap, float scale, int target, float dloss) {
    float* z = random_array((size_t)nvp, 11u + (unsigned)nv + (unsigned)(target + 1) * 7u);
    for (int i = 0; i < nvp; i++) { z[i] = i < nv ? scale * z[i] : 0.0f; }
    char what[200];
    for (int layout = 0; layout < ROW_LAYOUTS; layout++) {
        RowRun passes = row_run(CLASSIFIER_PASSES, (RowLayout)layout, 0, 0, 0, z, nv, nvp, cap, target, dloss);
        for (int lanes = 0; lanes <= 16; lanes += 8) { // (the AVX2 and AVX-512 loops too, where the CPU has them)
            if ((lanes == 8 && !vec8_enabled()) || (lanes == 16 && !vec16_enabled())) { continue; }
            snprintf(what, sizeof(what), "V %d, softcap %g, logits x%g, target %d, %s%s", nv, cap, scale, target,
                     row_layout_names[layout], lanes == 16 ? ", AVX-512 loops" : lanes == 8 ? ", AVX2 loops" : "");
            RowRun fused = row_run(CLASSIFIER_FUSED, (RowLayout)layout, 0, 0, lanes, z, nv, nvp, cap, target, dloss);
            CHECK(float_bits(fused.loss) == float_bits(passes.loss),
                  "%s: the fused row's loss is the passes' bits (%.9g, %.9g)", what, fused.loss, passes.loss);
            // in place the logits' row ends as dlogits; kept, it holds the capped logits
            CHECK(same_bits(fused.x, passes.x, (size_t)nv), "%s: the row's logits (or dlogits over them) are the passes' bits",
                  what);
            if (passes.dx != NULL) {
                CHECK(fused.dx != NULL && same_bits(fused.dx, passes.dx, (size_t)nvp),
                      "%s: dlogits are the passes' bits over Vp", what);
            }
            // bf16 dlogits alone: the passes' dlogits rounded, 0 in the pad; their lines asked for ahead or not
            for (int prefetch = 0; prefetch <= 1 && layout != ROW_FORWARD; prefetch++) {
                RowRun bf16 = row_run(CLASSIFIER_FUSED, (RowLayout)layout, 1, prefetch, lanes, z, nv, nvp, cap, target,
                                      dloss);
                int same = float_bits(bf16.loss) == float_bits(passes.loss);
                for (int i = 0; i < nvp && same; i++) { same = bf16.dx16[i] == matmul_bf16_round_value(passes.dx[i]); }
                CHECK(same, "%s, prefetch %d: bf16 dlogits are the passes' dlogits rounded to bf16, and the same loss",
                      what, prefetch);
                if (layout == ROW_KEPT) {
                    CHECK(same_bits(bf16.x, passes.x, (size_t)nvp),
                          "%s, prefetch %d: with bf16 dlogits the kept logits are the passes'", what, prefetch);
                }
                row_free(&bf16);
            }
            row_free(&fused);
        }
        row_free(&passes);
    }
    free(z);
}

static void test_rows_fused(void) {
    const int nvs[5] = {7, 16, 250, 1001, 1024}, nvps[5] = {128, 16, 256, 1024, 1024};
    const float caps[2] = {0.0f, 3.0f}, scales[2] = {4.0f, 40.0f};
    for (int v = 0; v < 5; v++) {
        int nv = nvs[v];
        const int row_targets[4] = {0, nv - 1, nv / 2 + 1 < nv ? nv / 2 + 1 : 0, -1};
        for (int c = 0; c < 2; c++) {
            for (int sc = 0; sc < 2; sc++) {
                for (int t = 0; t < 4; t++) { test_row_fused(nv, nvps[v], caps[c], scales[sc], row_targets[t], t == 2 ? 0.37f : 1.0f / BT); }
            }
        }
    }
}

// ----------------------------------------------------------------------------
// the chunks on -p bf16: the fused kernel against the passes

static void test_bf16_chunks(float softcap, int chunk) {
    const float dloss = 1.0f / BT;
    static Result passes, fused;
    static int saved[BT];
    memcpy(saved, targets, sizeof(saved));
    for (int masked = 0; masked <= 1; masked++) {
        if (masked) {
            for (int i = 0; i < BT; i++) {
                if (i % 7 == 3 || (i >= 20 && i < 30)) { targets[i] = -1; }
            }
        }
        for (int keep = 0; keep <= 1; keep++) {
            Result* res[2] = {&passes, &fused};
            for (int k = 0; k < 2; k++) {
                classifier_kernel_use(k == 0 ? CLASSIFIER_PASSES : CLASSIFIER_FUSED);
                memset(res[k], 0, sizeof(Result));
                for (size_t i = 0; i < (size_t)Vp * C; i++) { res[k]->dweight[i] = NAN; } // stale: overwritten
                classifier_forward_backward(res[k]->losses, keep ? res[k]->logits : NULL, res[k]->dinp, res[k]->dweight, 1,
                                            inp, weight, targets, dloss, softcap, BT, C, V, Vp, chunk);
            }
            CHECK(same_bits(fused.losses, passes.losses, BT) && same_bits(fused.dinp, passes.dinp, (size_t)BT * C) &&
                  same_bits(fused.dweight, passes.dweight, (size_t)Vp * C) &&
                  (!keep || same_bits(fused.logits, passes.logits, (size_t)BT * Vp)),
                  "bf16, softcap %g, chunk %d, masked %d, kept logits %d: losses, logits, dinp and dweight are the passes' bits",
                  softcap, chunk, masked, keep);
            CHECK(max_abs(fused.dinp, (size_t)BT * C) > 0.0 && pad_rows_zero(fused.dweight),
                  "bf16, softcap %g, chunk %d: a gradient, and none in dweight's pad rows", softcap, chunk);
        }
    }
    memcpy(targets, saved, sizeof(saved));
}

// ----------------------------------------------------------------------------
// LLMC_CLASSIFIER

static void choose_with_env(void* arg) {
    setenv("LLMC_CLASSIFIER", (const char*)arg, 1);
    classifier_kernel_state = -1;
    classifier_kernel();
}

static void test_kernel_choice(void) {
    const char* names[3] = {"", "fused", "passes"};
    const ClassifierKernel want[3] = {CLASSIFIER_FUSED, CLASSIFIER_FUSED, CLASSIFIER_PASSES};
    for (int i = 0; i < 3; i++) {
        setenv("LLMC_CLASSIFIER", names[i], 1);
        classifier_kernel_state = -1;
        CHECK(classifier_kernel() == want[i], "LLMC_CLASSIFIER='%s' chooses kernel %d", names[i], (int)want[i]);
    }
    unsetenv("LLMC_CLASSIFIER");
    classifier_kernel_state = -1;
    CHECK(classifier_kernel() == CLASSIFIER_FUSED, "no LLMC_CLASSIFIER: fused");
    expect_die("LLMC_CLASSIFIER=rows", choose_with_env, (void*)"rows", "LLMC_CLASSIFIER=rows", "use fused or passes");
}

// ----------------------------------------------------------------------------
// --time: one chunk's row pass at GPT-2 d12's shapes

static int cmp_double(const void* a, const void* b) {
    double x = *(const double*)a, y = *(const double*)b;
    return x < y ? -1 : x > y;
}

// the process's CPU seconds (on a shared machine: the time the threads ran, not the time they waited)
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void time_rows(int use_cpu) {
    const int rows = CLASSIFIER_CHUNK_ROWS, TV = 50257, TVp = 50304;
    int threads = 2;
    const char* env = getenv("OMP_NUM_THREADS");
    if (env != NULL && atoi(env) > 0) { threads = atoi(env); }
    omp_set_num_threads(threads);
    size_t n = (size_t)rows * TVp;
    float* pristine = random_array(n, 5);
    for (size_t i = 0; i < n; i++) { pristine[i] *= 4.0f; }
    float* x = (float*)mallocCheck(n * sizeof(float));
    float* e_rows = (float*)mallocCheck((size_t)threads * TVp * sizeof(float));
    uint16_t* x16 = (uint16_t*)mallocCheck(n * sizeof(uint16_t));  // bf16 dlogits, or the GEMMs' rounding of them
    float* losses = (float*)mallocCheck((size_t)rows * sizeof(float));
    int* tg = (int*)mallocCheck((size_t)rows * sizeof(int));
    for (int r = 0; r < rows; r++) { tg[r] = (r * 7919) % TV; }
    const int reps = 9;
    printf("one chunk's row pass: %d rows, V = %d, Vp = %d, %d threads, medians of %d (%s), passes and fused "
           "alternating; in brackets the GB/s of the compulsory traffic (fp32 logits read, dlogits written)\n", rows, TV,
           TVp, threads, reps, use_cpu ? "CPU time" : "wall time");
    for (int capped = 0; capped <= 1; capped++) {
        float cap = capped ? 15.0f : 0.0f;
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            double t[2][16];
            for (int i = -1; i < reps; i++) {
                for (int k = 0; k < 2; k++) {
                    memcpy(x, pristine, n * sizeof(float)); // the logits in memory, as the GEMM leaves them
                    classifier_kernel_use(k == 0 ? CLASSIFIER_PASSES : CLASSIFIER_FUSED);
                    double t0 = use_cpu ? cpu_seconds() : wall_seconds();
                    if (k == 1 && bf16) {
                        classifier_chunk_rows(losses, x, NULL, x16, capped ? e_rows : NULL, tg, 1e-4f, cap, rows, TV, TVp, 0);
                    } else {
                        classifier_chunk_rows(losses, x, x, NULL, capped ? e_rows : NULL, tg, 1e-4f, cap, rows, TV, TVp, 0);
                        if (bf16) { // the two backward GEMMs each rounded dlogits to bf16 before
                            matmul_round_bf16(x16, x, (size_t)rows, (size_t)TVp, (size_t)TVp);
                            matmul_round_bf16(x16, x, (size_t)rows, (size_t)TVp, (size_t)TVp);
                        }
                    }
                    double s = (use_cpu ? cpu_seconds() : wall_seconds()) - t0;
                    if (i >= 0) { t[k][i] = s; }
                }
            }
            double med[2];
            for (int k = 0; k < 2; k++) {
                qsort(t[k], reps, sizeof(double), cmp_double);
                med[k] = t[k][reps / 2];
            }
            double gb = (double)rows * TV * (bf16 ? 6.0 : 8.0) / 1e9;
            printf("softcap %-4g dlogits %s: passes%s %.2f ms [%.0f]  fused %.2f ms [%.0f]  (%.2fx)\n", cap,
                   bf16 ? "bf16" : "fp32", bf16 ? " + 2 roundings" : "", 1e3 * med[0], gb / med[0], 1e3 * med[1],
                   gb / med[1], med[0] / med[1]);
        }
    }
    free(pristine); free(x); free(e_rows); free(x16); free(losses); free(tg);
}

int main(int argc, char** argv) {
    setenv("LLMC_FP32_GEMM", "builtin", 1); // one fixed summation order whatever the number of rows
    if (argc >= 2 && strcmp(argv[1], "--time") == 0 && (argc == 2 || (argc == 3 && strcmp(argv[2], "cpu") == 0))) {
        time_rows(argc == 3);
        return 0;
    }
    if (argc != 1) {
        fprintf(stderr, "error: usage: %s [--time [cpu]]\n", argv[0]);
        return 1;
    }
    float* x = random_array((size_t)BT * C, 1);
    float* w = random_array((size_t)Vp * C, 2);
    memcpy(inp, x, sizeof(inp));
    for (size_t i = 0; i < (size_t)Vp * C; i++) { weight[i] = i < (size_t)V * C ? 4.0f * w[i] : 0.0f; } // logits of a few units
    free(x);
    free(w);
    for (int i = 0; i < BT; i++) { targets[i] = (i * 37 + 11) % V; }
    targets[5] = V - 1; // the last real column
    test_kernel_choice();
    test_rows_fused();
    const float softcaps[] = {0.0f, 3.0f};
    const int chunks[] = {1, 16, BT, 1000}; // 16: four full chunks and a partial one of 10 rows
    const ClassifierKernel kernels[2] = {CLASSIFIER_FUSED, CLASSIFIER_PASSES};
    for (int k = 0; k < 2; k++) {
        classifier_kernel_use(kernels[k]);
        for (int s = 0; s < 2; s++) {
            for (int c = 0; c < 4; c++) {
                test_forward_backward(softcaps[s], chunks[c]);
                test_kept_logits(softcaps[s], chunks[c]);
                test_masked_rows(softcaps[s], chunks[c]);
            }
            test_model_classifier(softcaps[s]);
        }
    }
    // -p bf16
    matmul_precision = MATMUL_BF16;
    classifier_kernel_use(CLASSIFIER_FUSED);
    printf("bf16 dlogits: %s\n", classifier_dlogits_bf16()
               ? "written by the fused row pass in bf16 alone (oneDNN's bf16 GEMMs read them)"
               : "fp32, rounded by the GEMMs (no oneDNN bf16 kernel in this build or on this CPU)");
    for (int prefetch = 0; prefetch <= 1; prefetch++) { // (LLMC_CLASSIFIER_PREFETCH, read at each chunk)
        setenv("LLMC_CLASSIFIER_PREFETCH", prefetch ? "1" : "0", 1);
        for (int s = 0; s < 2; s++) {
            for (int c = 1; c < 4; c++) { test_bf16_chunks(softcaps[s], chunks[c]); }
        }
    }
    unsetenv("LLMC_CLASSIFIER_PREFETCH");
    matmul_precision = MATMUL_FP32;
    return test_summary();
}
