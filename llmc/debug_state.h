/*
llmc/debug_state.h: the reference tensors written by python train_gpt2.py --write_tensors 1,
read by both test programs (test_gpt2.c on the CPU, test_gpt2.cu on the GPU).

int32 header of 256: [0]=20240327 [1]=2 [2]=B [3]=T [4]=nsteps [5..10]=fp32 bit patterns of
lr, beta1, beta2, eps, weight_decay, grad_clip, [11]=nnoise (0 or nsteps), [12..17]=the optimizer
of the steps: [12] 0 AdamW | 1 Muon, [13] Muon lr and [14] momentum (fp32 bit patterns), [15] Nesterov
(0/1), [16] Newton-Schulz steps (1..99), [17] lr adjustment 0 original | 1 match_rms_adamw; all zero
for AdamW (files written before these fields existed are AdamW files), [18] masked: 0 every y is a
token id in [0, V) (every file written before the field existed), 1 y holds -1 at the positions not
supervised (a chat shard's loss mask, the reference's --mask_half 1), at least one y >= 0, and the loss
and the step losses are means over the supervised positions alone. Body: x int32[B*T],
y int32[B*T], logits fp32[B*T*V] (V unpadded, every position's), loss fp32, the 16 parameter gradients fp32 in
checkpoint order (wte with Vp rows), then nsteps fp32 losses (losses[i] is the loss before
optimizer step i+1), then nnoise fp32 loss noises: loss_noise[i] = |losses[i] - the same loss
when the reference reruns its steps in float64|, the float32 rounding noise of that step's loss
(train_gpt2.py, reference_loss_noise). With Muon the steps are train_gpt2.py's MuonNS: torch.optim.Muon
with the Newton-Schulz iteration in float32 (torch's runs it in bfloat16), AdamW (lr, betas, eps) on
what Muon does not train, weight_decay on both (llmc/cpu/muon.h). The noise section comes last and the version stays 2, so
llm.c's reader (which reads up to the gradients) still reads these files.

Other models' debug states are this layout with their own magic and version (DebugStateFormat), and
can carry each step's reference gradient norm after the losses (test_llama3.c's Llama 3 states):
debug_state_read_format reads them all (a family's header names its format: llmc/gpt2.h's GPT2_DEBUG_STATE). debug_state_require_files: a test
program's model file and debug state exist, else the line that names the missing one and its writer.

Files without the noise section (nnoise = 0: written before it existed) still load with
has_loss_noise = 0; the tests then check step losses with their fixed fallback tolerance
(llmc/tensor_check.h, step_loss_tolerance). Every inconsistency (header, size, token ids, a
negative or non-finite noise, an unknown optimizer or Muon setting, a masked flag other than 0 or 1, a masked
state without a supervised position) is one error line naming the file.

debug_state_supervised(d): the number of positions with y >= 0 (B*T when not masked). A test program runs a
masked state's backward with loss_scale = B*T / N (the model's loss is the mean over B*T positions, a masked
one counting 0: that scale gives the gradients of the mean over the N supervised ones) and compares the model's
loss times B*T / N with the stored loss.
*/
#ifndef LLMC_DEBUG_STATE_H
#define LLMC_DEBUG_STATE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"

#define DEBUG_STATE_MAGIC 20240327
#define DEBUG_STATE_VERSION 2

typedef struct {
    int B, T, nsteps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int optimizer;          // 0 AdamW, 1 Muon (header[12]); the Muon fields are zero for AdamW
    float muon_lr, muon_momentum;
    int muon_nesterov, muon_ns_steps;
    int muon_adjust_lr;     // 0 original, 1 match_rms_adamw
    int masked;             // header[18]: 1 when y holds -1 at positions not supervised, and the losses are means
                            // over the supervised positions
    int* x;         // (B, T)
    int* y;         // (B, T) token ids in [0, V), or -1 (not supervised) in a masked state
    float* logits;  // (B, T, V)
    float loss;
    float* grads;   // (num_parameters) checkpoint order, wte with Vp rows
    float* losses;  // (nsteps)
    int has_loss_noise;   // 1 if the file has the noise section (header[11] == nsteps)
    float* loss_noise;    // (nsteps) float32 noise of each step loss; zeros without the section
    float* grad_norms;    // (nsteps) the reference's gradient norm before clipping, per step; NULL if the format has none
} DebugState;

// what tells one model's debug state file from another's
typedef struct {
    int magic, version;
    const char* name;          // "debug state": the file is "not a <name>"
    const char* max_T_name;    // what the model calls its longest sequence, in the error on T
    int has_grad_norms;        // nsteps gradient norms follow the losses
} DebugStateFormat;

static inline float debug_state_float_bits(int bits) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// header[12..17]: the optimizer of the steps and its Muon settings
static inline void debug_state_read_optimizer_(DebugState* d, const char* path, const int header[256]) {
    d->optimizer = header[12];
    d->muon_lr = debug_state_float_bits(header[13]);
    d->muon_momentum = debug_state_float_bits(header[14]);
    d->muon_nesterov = header[15];
    d->muon_ns_steps = header[16];
    d->muon_adjust_lr = header[17];
    if (d->optimizer != 0 && d->optimizer != 1) {
        llmc_die("%s: bad debug state header: optimizer header[12] = %d (0 AdamW, 1 Muon)", path, d->optimizer);
    }
    if (d->optimizer == 0) {
        for (int i = 13; i <= 17; i++) {
            if (header[i] != 0) { llmc_die("%s: bad debug state header: header[%d] = %d must be 0 for AdamW", path, i, header[i]); }
        }
        return;
    }
    if (!isfinite(d->muon_lr) || d->muon_lr < 0.0f) {
        llmc_die("%s: bad debug state header: Muon lr header[13] = %g", path, d->muon_lr);
    }
    if (!isfinite(d->muon_momentum) || d->muon_momentum < 0.0f || d->muon_momentum > 1.0f) {
        llmc_die("%s: bad debug state header: Muon momentum header[14] = %g (must be in [0, 1])", path, d->muon_momentum);
    }
    if (d->muon_nesterov != 0 && d->muon_nesterov != 1) {
        llmc_die("%s: bad debug state header: Muon Nesterov header[15] = %d (0 or 1)", path, d->muon_nesterov);
    }
    if (d->muon_ns_steps < 1 || d->muon_ns_steps > 99) {
        llmc_die("%s: bad debug state header: Muon Newton-Schulz steps header[16] = %d (1..99)", path, d->muon_ns_steps);
    }
    if (d->muon_adjust_lr != 0 && d->muon_adjust_lr != 1) {
        llmc_die("%s: bad debug state header: Muon lr adjustment header[17] = %d (0 original, 1 match_rms_adamw)", path, d->muon_adjust_lr);
    }
}

// reads and validates a debug state of the given format against the model's longest sequence (max_T),
// vocab size and parameter count
static inline void debug_state_read_format(DebugState* d, const char* path, const DebugStateFormat* fmt, int max_T,
                                           int vocab_size, size_t num_parameters) {
    FILE* f = fopenCheck(path, "rb");
    size_t file_size = file_size_check(f, path);
    int header[256];
    if (file_size < sizeof(header)) { llmc_die("%s: not a %s (%zu bytes, shorter than the header)", path, fmt->name, file_size); }
    read_header_check(f, path, header, fmt->magic, fmt->version, fmt->version, fmt->name);
    d->B = header[2];
    d->T = header[3];
    d->nsteps = header[4];
    if (d->B < 1 || d->B > 65536) { llmc_die("%s: bad debug state header: B = %d", path, d->B); }
    if (d->T < 1 || d->T > max_T) {
        llmc_die("%s: bad debug state header: T = %d (the model's %s is %d)", path, d->T, fmt->max_T_name, max_T);
    }
    if (d->nsteps < 0 || d->nsteps > 100000) { llmc_die("%s: bad debug state header: nsteps = %d", path, d->nsteps); }
    float hp[6];
    for (int i = 0; i < 6; i++) {
        hp[i] = debug_state_float_bits(header[5 + i]);
        if (!isfinite(hp[i]) || hp[i] < 0.0f) {
            llmc_die("%s: bad debug state header: optimizer setting header[%d] = %g", path, 5 + i, hp[i]);
        }
    }
    d->lr = hp[0];
    d->beta1 = hp[1];
    d->beta2 = hp[2];
    d->eps = hp[3];
    d->weight_decay = hp[4];
    d->grad_clip = hp[5];
    int nnoise = header[11];
    if (nnoise != 0 && nnoise != d->nsteps) {
        llmc_die("%s: bad debug state header: %d loss noises for %d steps (header[11] must be 0 or nsteps)",
                 path, nnoise, d->nsteps);
    }
    d->has_loss_noise = nnoise > 0;
    debug_state_read_optimizer_(d, path, header);
    d->masked = header[18];
    if (d->masked != 0 && d->masked != 1) {
        llmc_die("%s: bad debug state header: masked header[18] = %d (0 every target a token, 1 targets -1 where not supervised)",
                 path, d->masked);
    }
    size_t BT = (size_t)d->B * d->T, V = (size_t)vocab_size;
    size_t per_step = (size_t)d->nsteps * (fmt->has_grad_norms ? 2 : 1); // losses, and norms
    size_t expected = sizeof(header) + 2 * BT * sizeof(int) + BT * V * sizeof(float) + sizeof(float) +
                      num_parameters * sizeof(float) + (per_step + (size_t)nnoise) * sizeof(float);
    if (file_size != expected) {
        llmc_die("%s: debug state size mismatch: B=%d T=%d V=%zu nsteps=%d nnoise=%d and %zu parameters need %zu bytes, the file has %zu (wrong model?)",
                 path, d->B, d->T, V, d->nsteps, nnoise, num_parameters, expected, file_size);
    }
    d->x = (int*)mallocCheck(BT * sizeof(int));
    d->y = (int*)mallocCheck(BT * sizeof(int));
    d->logits = (float*)mallocCheck(BT * V * sizeof(float));
    d->grads = (float*)mallocCheck(num_parameters * sizeof(float));
    d->losses = (float*)mallocCheck(((size_t)d->nsteps + 1) * sizeof(float));
    d->loss_noise = (float*)mallocCheck(((size_t)d->nsteps + 1) * sizeof(float));
    memset(d->loss_noise, 0, ((size_t)d->nsteps + 1) * sizeof(float));
    d->grad_norms = fmt->has_grad_norms ? (float*)mallocCheck(((size_t)d->nsteps + 1) * sizeof(float)) : NULL;
    freadCheck(d->x, sizeof(int), BT, f, path);
    freadCheck(d->y, sizeof(int), BT, f, path);
    freadCheck(d->logits, sizeof(float), BT * V, f, path);
    freadCheck(&d->loss, sizeof(float), 1, f, path);
    freadCheck(d->grads, sizeof(float), num_parameters, f, path);
    freadCheck(d->losses, sizeof(float), (size_t)d->nsteps, f, path);
    if (fmt->has_grad_norms) { freadCheck(d->grad_norms, sizeof(float), (size_t)d->nsteps, f, path); }
    freadCheck(d->loss_noise, sizeof(float), (size_t)nnoise, f, path);
    fcloseCheck(f, path);
    for (int i = 0; i < nnoise; i++) {
        if (!isfinite(d->loss_noise[i]) || d->loss_noise[i] < 0.0f) {
            llmc_die("%s: loss noise of step %d is %g (must be finite and >= 0)", path, i, d->loss_noise[i]);
        }
    }
    int y_min = d->masked ? -1 : 0; // -1: not supervised
    size_t supervised = 0;
    for (size_t i = 0; i < BT; i++) {
        if (d->x[i] < 0 || (size_t)d->x[i] >= V || d->y[i] < y_min || (d->y[i] >= 0 && (size_t)d->y[i] >= V)) {
            llmc_die("%s: token id at position %zu is outside [0, %zu) (x %d, y %d%s)", path, i, V, d->x[i], d->y[i],
                     d->masked ? ", or -1 for y in a masked state" : "");
        }
        supervised += d->y[i] >= 0;
    }
    if (supervised == 0) {
        llmc_die("%s: masked debug state without a supervised position (every y is -1)", path);
    }
}

// the positions whose target is a token (y >= 0): B*T when the state is not masked
static inline size_t debug_state_supervised(const DebugState* d) {
    size_t BT = (size_t)d->B * d->T, n = 0;
    for (size_t i = 0; i < BT; i++) { n += d->y[i] >= 0; }
    return n;
}

// a test program's two input files exist, else one line naming the one missing and the reference script that writes
// both (model_kind: "model checkpoint", what the program calls its model file)
static inline void debug_state_require_files(const char* model_path, const char* model_kind, const char* state_path,
                                             const char* script) {
    if (!file_exists(model_path)) {
        llmc_die("%s: no such %s (python %s --write_tensors 1 writes it)", model_path, model_kind, script);
    }
    if (!file_exists(state_path)) {
        llmc_die("%s: no such debug state (python %s --write_tensors 1 writes it)", state_path, script);
    }
}

static inline void debug_state_free(DebugState* d) {
    void* buffers[] = {d->x, d->y, d->logits, d->grads, d->losses, d->loss_noise, d->grad_norms};
    FREE_ALL(buffers);
}

#endif // LLMC_DEBUG_STATE_H
