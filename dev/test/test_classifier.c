/*
dev/test/test_classifier.c: unit tests of llmc/cpu/classifier_cpu.h's classifier in chunks of rows against the same
classifier on whole buffers (matmul_forward, softcap_forward, crossentropy_softmax_forward, then
crossentropy_softmax_backward, softcap_backward, matmul_backward: what the CPU trainers ran before the chunks):
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
The GEMMs here are the built-in kernel's, which sums each element in one fixed order whatever the number of rows.
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
    free(cm.logits_memory);
}

int main(void) {
    float* x = random_array((size_t)BT * C, 1);
    float* w = random_array((size_t)Vp * C, 2);
    memcpy(inp, x, sizeof(inp));
    for (size_t i = 0; i < (size_t)Vp * C; i++) { weight[i] = i < (size_t)V * C ? 4.0f * w[i] : 0.0f; } // logits of a few units
    free(x);
    free(w);
    for (int i = 0; i < BT; i++) { targets[i] = (i * 37 + 11) % V; }
    targets[5] = V - 1; // the last real column
    const float softcaps[] = {0.0f, 3.0f};
    const int chunks[] = {1, 16, BT, 1000}; // 16: four full chunks and a partial one of 10 rows
    for (int s = 0; s < 2; s++) {
        for (int c = 0; c < 4; c++) {
            test_forward_backward(softcaps[s], chunks[c]);
            test_kept_logits(softcaps[s], chunks[c]);
            test_masked_rows(softcaps[s], chunks[c]);
        }
        test_model_classifier(softcaps[s]);
    }
    return test_summary();
}
