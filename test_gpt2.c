/*
test_gpt2.c: the CPU trainer against the PyTorch reference.

train_gpt2.py --write_tensors 1 writes a checkpoint and a debug state: one batch (x, y), the
reference logits, loss and all 16 parameter gradients for it, and the losses of `nsteps`
AdamW steps on that batch. This program loads both, runs our forward and backward on the
batch, prints a table of every tensor's difference, then runs the same AdamW steps and
compares every loss. Exit status 0 only if everything is within tolerance.

Tolerances: logits max abs diff 1e-4, loss 1e-5, each gradient tensor max abs diff
<= 1e-3 x max|reference| of that tensor, each optimizer-step loss 1e-4.

Debug state (int32 header of 256): [0]=20240327 [1]=2 [2]=B [3]=T [4]=nsteps
[5..10]=fp32 bits of lr, beta1, beta2, eps, weight_decay, grad_clip; body: x int32[B*T],
y int32[B*T], logits fp32[B*T*V], loss fp32, 16 gradients fp32 (wte with Vp rows),
nsteps losses fp32.
*/
#define TESTING
#include "train_gpt2.c"
#include "llmc/args.h"

#define DEBUG_STATE_MAGIC 20240327
#define DEBUG_STATE_VERSION 2

typedef struct {
    const char* model_path;
    const char* state_path;
} TestArgs;

static const ArgSpec TEST_ARG_TABLE[] = {
    {"-e", ARG_STRING, offsetof(TestArgs, model_path), "gpt2_124M.bin", 0, 0, "model checkpoint written by train_gpt2.py"},
    {"-s", ARG_STRING, offsetof(TestArgs, state_path), "gpt2_124M_debug_state.bin", 0, 0, "debug state written by train_gpt2.py"},
};

typedef struct {
    int B, T, nsteps;
    float lr, beta1, beta2, eps, weight_decay, grad_clip;
    int* x;            // (B, T)
    int* y;            // (B, T)
    float* logits;     // (B, T, V)
    float loss;
    float* grads;      // num_parameters, checkpoint order
    float* losses;     // (nsteps)
} DebugState;

static float float_from_bits(int bits) {
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// reads and validates the debug state against the model's config
static void debug_state_read(DebugState* d, const char* path, const GPT2Config* cfg, size_t num_parameters) {
    FILE* f = fopenCheck(path, "rb");
    size_t file_size = file_size_check(f, path);
    int header[256];
    read_header_check(f, path, header, DEBUG_STATE_MAGIC, DEBUG_STATE_VERSION, DEBUG_STATE_VERSION, "debug state");
    d->B = header[2];
    d->T = header[3];
    d->nsteps = header[4];
    if (d->B < 1 || d->B > 65536) { llmc_die("%s: bad debug state header: B = %d", path, d->B); }
    if (d->T < 1 || d->T > cfg->max_seq_len) {
        llmc_die("%s: bad debug state header: T = %d (the model's max is %d)", path, d->T, cfg->max_seq_len);
    }
    if (d->nsteps < 0 || d->nsteps > 100000) { llmc_die("%s: bad debug state header: nsteps = %d", path, d->nsteps); }
    d->lr = float_from_bits(header[5]);
    d->beta1 = float_from_bits(header[6]);
    d->beta2 = float_from_bits(header[7]);
    d->eps = float_from_bits(header[8]);
    d->weight_decay = float_from_bits(header[9]);
    d->grad_clip = float_from_bits(header[10]);
    float hp[6] = {d->lr, d->beta1, d->beta2, d->eps, d->weight_decay, d->grad_clip};
    for (int i = 0; i < 6; i++) {
        if (!isfinite(hp[i]) || hp[i] < 0.0f) { llmc_die("%s: bad debug state header: optimizer setting header[%d] = %g", path, 5 + i, hp[i]); }
    }
    size_t BT = (size_t)d->B * d->T, V = (size_t)cfg->vocab_size;
    size_t expected = sizeof(header) + 2 * BT * sizeof(int) + BT * V * sizeof(float) + sizeof(float)
                      + num_parameters * sizeof(float) + (size_t)d->nsteps * sizeof(float);
    if (file_size != expected) {
        llmc_die("%s: debug state size mismatch: B=%d T=%d V=%zu nsteps=%d and %zu parameters need %zu bytes, the file has %zu (wrong model?)",
                 path, d->B, d->T, V, d->nsteps, num_parameters, expected, file_size);
    }
    d->x = (int*)mallocCheck(BT * sizeof(int));
    d->y = (int*)mallocCheck(BT * sizeof(int));
    d->logits = (float*)mallocCheck(BT * V * sizeof(float));
    d->grads = (float*)mallocCheck(num_parameters * sizeof(float));
    d->losses = (float*)mallocCheck(((size_t)d->nsteps + 1) * sizeof(float));
    freadCheck(d->x, sizeof(int), BT, f, path);
    freadCheck(d->y, sizeof(int), BT, f, path);
    freadCheck(d->logits, sizeof(float), BT * V, f, path);
    freadCheck(&d->loss, sizeof(float), 1, f, path);
    freadCheck(d->grads, sizeof(float), num_parameters, f, path);
    freadCheck(d->losses, sizeof(float), (size_t)d->nsteps, f, path);
    fcloseCheck(f, path);
    for (size_t i = 0; i < BT; i++) {
        if (d->x[i] < 0 || (size_t)d->x[i] >= V || d->y[i] < 0 || (size_t)d->y[i] >= V) {
            llmc_die("%s: token id at position %zu is outside [0, %zu) (x %d, y %d)", path, i, V, d->x[i], d->y[i]);
        }
    }
}

static void debug_state_free(DebugState* d) {
    free(d->x);
    free(d->y);
    free(d->logits);
    free(d->grads);
    free(d->losses);
}

typedef struct {
    int passed, failed;
} Tally;

// one table row: max abs diff, max abs diff relative to max|ref|, pass if abs diff <= tol
static void check_row(Tally* tally, const char* name, const float* ours, const float* ref, size_t n, float tol) {
    double max_diff = 0.0, max_ref = 0.0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ours[i])) { finite = 0; }
        double diff = fabs((double)ours[i] - (double)ref[i]);
        if (diff > max_diff || diff != diff) { max_diff = diff; }
        if (fabs((double)ref[i]) > max_ref) { max_ref = fabs((double)ref[i]); }
    }
    int ok = finite && max_diff <= tol;
    double rel = max_ref > 0.0 ? max_diff / max_ref : max_diff;
    printf("| %-10s | %13.6e | %13.6e | %9.3e | %-4s |\n", name, max_diff, rel, tol, ok ? "ok" : "FAIL");
    if (ok) { tally->passed++; } else { tally->failed++; }
}

static float max_abs(const float* x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) { if (fabsf(x[i]) > m) { m = fabsf(x[i]); } }
    return m;
}

int main(int argc, char** argv) {
    TestArgs args;
    args_parse(TEST_ARG_TABLE, (int)(sizeof(TEST_ARG_TABLE) / sizeof(TEST_ARG_TABLE[0])), &args, argc, argv,
               "Checks the CPU trainer against the reference tensors written by python train_gpt2.py --write_tensors 1.");
    if (!file_exists(args.model_path)) {
        llmc_die("%s: no such model checkpoint (python train_gpt2.py --write_tensors 1 writes it)", args.model_path);
    }
    if (!file_exists(args.state_path)) {
        llmc_die("%s: no such debug state (python train_gpt2.py --write_tensors 1 writes it)", args.state_path);
    }
    GPT2 model;
    gpt2_build_from_checkpoint(&model, args.model_path);
    GPT2Config cfg = model.config;
    DebugState d;
    debug_state_read(&d, args.state_path, &cfg, model.num_parameters);
    int B = d.B, T = d.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    printf("model %s: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %zu parameters\n", args.model_path, cfg.num_layers,
           cfg.num_heads, cfg.channels, cfg.max_seq_len, V, Vp, model.num_parameters);
    printf("debug state %s: B=%d T=%d, %d steps of AdamW (lr %g, betas %g %g, eps %g, wd %g, clip %g)\n",
           args.state_path, B, T, d.nsteps, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, d.grad_clip);
    gpt2_allocate_state(&model, B, T, 0, model.num_parameters);

    // forward and backward on the recorded batch
    gpt2_forward(&model, d.x, d.y, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);

    Tally tally = {0, 0};
    printf("| %-10s | %13s | %13s | %9s | %-4s |\n", "tensor", "max abs diff", "max rel diff", "tolerance", "ok");
    printf("|------------|---------------|---------------|-----------|------|\n");
    // logits: ours are (B,T,Vp), the reference's (B,T,V)
    float* logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        memcpy(logits + bt * V, model.acts.logits + bt * Vp, (size_t)V * sizeof(float));
    }
    check_row(&tally, "logits", logits, d.logits, (size_t)B * T * V, 1e-4f);
    free(logits);
    check_row(&tally, "loss", &model.mean_loss, &d.loss, 1, 1e-5f);
    const float* ours = model.grads_memory;
    const float* ref = d.grads;
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        size_t n = model.param_sizes[k];
        char name[32];
        snprintf(name, sizeof(name), "d%s", GPT2_PARAMETER_NAMES[k]);
        float tol = 1e-3f * max_abs(ref, n);
        check_row(&tally, name, ours, ref, n, tol);
        ours += n;
        ref += n;
    }

    // nsteps of AdamW on the same batch; losses[i] is the loss before update i+1
    printf("\n| %-4s | %12s | %12s | %9s | %9s | %-4s |\n", "step", "loss", "reference", "abs diff", "tolerance", "ok");
    printf("|------|--------------|--------------|-----------|-----------|------|\n");
    for (int step = 0; step < d.nsteps; step++) {
        gpt2_forward(&model, d.x, d.y, B, T);
        float loss = model.mean_loss;
        float diff = fabsf(loss - d.losses[step]);
        int ok = isfinite(loss) && diff <= 1e-4f;
        printf("| %4d | %12.6f | %12.6f | %9.3e | %9.3e | %-4s |\n", step, loss, d.losses[step], diff, 1e-4f, ok ? "ok" : "FAIL");
        if (ok) { tally.passed++; } else { tally.failed++; }
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        gpt2_update(&model, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, grad_clip_scale(norm, d.grad_clip), step + 1);
    }

    printf("\n%d passed, %d failed\n", tally.passed, tally.failed);
    debug_state_free(&d);
    gpt2_free(&model);
    return tally.failed == 0 ? 0 : 1;
}
