/*
dev/test/test_trainer.c: llmc/trainer.h, the host side of training that train_gpt2.c, train_gpt2.cu
and pyllmc share. The rules are checked one by one, then the whole loop (trainer_run) is driven with
a small CPU model in place of a trainer's kernels: real flags (llmc/args.h), a real token shard, real
checkpoint files, AdamW moments and signals. Whatever these tests show of the loop holds for the GPU
trainer too, since its main() runs the same trainer_run with its own kernels.

The model: NPARAM weights; a token's loss is 0.5 * (w[token % NPARAM] - target / V)^2, so the
gradients are exact and small, and every step changes the weights.
*/
#include <signal.h>
#include <sys/stat.h>
#include "llmc/trainer.h"
#include "llmc/gpt2.h"
#include "llmc/adamw.h"
#include "dev/test/test_common.h"

#define NPARAM 16
#define VOCAB 64
#define MAX_CALLS 4096

typedef struct {
    int B, T;
    float w[NPARAM], g[NPARAM], m[NPARAM], v[NPARAM];
    float losses[1024];
    float logits[VOCAB];
    // what the loop did, for the checks
    int ncalls;
    int first_input[MAX_CALLS];     // inputs[0] of every forward_backward
    float step_loss[MAX_CALLS];     // the loss handed to update (per update call)
    float lr[MAX_CALLS];            // the learning rates handed to update (per update call)
    float muon_lr[MAX_CALLS];
    int nupdates;
    int sampled[MAX_CALLS];         // tokens[len - 1] of every next_token_logits call
    int nsampled;
    float loss_scale[MAX_CALLS];    // loss_scale of every forward_backward
    int supervised[MAX_CALLS];      // targets other than -1 in every forward_backward (chat shards)
    int signal_at_call;             // raise SIGINT in this forward_backward call (-1 = never)
    int nan_norm_at_call;           // grad_norm returns NaN after this call (-1 = never)
} FakeModel;

static float fake_token_loss(const FakeModel* f, int tok, int target, float* dw) {
    float d = f->w[tok % NPARAM] - (float)target / VOCAB;
    if (dw != NULL) { *dw = d; }
    return 0.5f * d * d;
}

static void fake_zero_grad(void* ctx) { memset(((FakeModel*)ctx)->g, 0, sizeof(((FakeModel*)ctx)->g)); }

static float fake_forward_backward(void* ctx, const int* inputs, const int* targets, float loss_scale, int last) {
    FakeModel* f = (FakeModel*)ctx;
    int n = f->B * f->T;
    double sum = 0.0;
    int supervised = 0;
    for (int i = 0; i < n; i++) {
        if (targets[i] == -1) { continue; } // chat shards: not supervised, loss 0 and no gradient
        float d;
        sum += fake_token_loss(f, inputs[i], targets[i], &d);
        f->g[inputs[i] % NPARAM] += loss_scale * d / (float)n;
        supervised++;
    }
    if (f->ncalls < MAX_CALLS) {
        f->first_input[f->ncalls] = inputs[0];
        f->loss_scale[f->ncalls] = loss_scale;
        f->supervised[f->ncalls] = supervised;
    }
    if (f->ncalls == f->signal_at_call) { raise(SIGINT); }
    f->ncalls++;
    (void)last;
    return (float)(sum / n);
}

static float fake_grad_norm(void* ctx) {
    FakeModel* f = (FakeModel*)ctx;
    if (f->nan_norm_at_call >= 0 && f->ncalls == f->nan_norm_at_call + 1) { return NAN; }
    double s = 0.0;
    for (int i = 0; i < NPARAM; i++) { s += (double)f->g[i] * f->g[i]; }
    return (float)sqrt(s);
}

static void fake_update(void* ctx, float lr, float muon_lr, float wd, float grad_scale, int t) {
    FakeModel* f = (FakeModel*)ctx;
    AdamWScalars s = adamw_step_scalars(lr, TRAINER_ADAMW_BETA1, TRAINER_ADAMW_BETA2, TRAINER_ADAMW_EPS, t);
    for (int i = 0; i < NPARAM; i++) { f->w[i] = adamw_update_one(f->w[i], f->g[i] * grad_scale, &f->m[i], &f->v[i], wd, s); }
    if (f->nupdates < MAX_CALLS) {
        f->step_loss[f->nupdates] = (float)t;
        f->lr[f->nupdates] = lr;
        f->muon_lr[f->nupdates] = muon_lr;
    }
    f->nupdates++;
}

static const float* fake_forward_losses(void* ctx, const int* inputs, const int* targets) {
    FakeModel* f = (FakeModel*)ctx;
    for (int i = 0; i < f->B * f->T; i++) { f->losses[i] = targets[i] == -1 ? 0.0f : fake_token_loss(f, inputs[i], targets[i], NULL); }
    return f->losses;
}

static const float* fake_next_token_logits(void* ctx, const int* tokens, int len) {
    FakeModel* f = (FakeModel*)ctx;
    for (int v = 0; v < VOCAB; v++) { f->logits[v] = 4.0f * f->w[(v + tokens[len - 1]) % NPARAM]; }
    if (f->nsampled < MAX_CALLS) { f->sampled[f->nsampled++] = tokens[len - 1]; }
    return f->logits;
}

static void fake_save_model(void* ctx, const char* path) {
    AtomicFile af;
    atomic_file_open(&af, path);
    atomic_file_write(&af, ((FakeModel*)ctx)->w, sizeof(float), NPARAM);
    atomic_file_commit(&af);
}

static void fake_load_model(FakeModel* f, const char* path) {
    FILE* fp = fopenCheck(path, "rb");
    freadCheck(f->w, sizeof(float), NPARAM, fp, path);
    fcloseCheck(fp, path);
}

static void fake_state_fields(TrainState* s) {
    s->num_parameters = NPARAM;
    s->opt_offset = 0;
    s->opt_size = NPARAM;
    s->extra_bytes = (uint32_t)sizeof(TrainerDetectors);
}

static void fake_save_state(void* ctx, const char* path, TrainState* s, const TrainerDetectors* d) {
    FakeModel* f = (FakeModel*)ctx;
    fake_state_fields(s);
    train_state_write(path, s, f->m, f->v, d);
}

static void fake_load_state(void* ctx, const char* path, TrainState* expect, TrainState* got, TrainerDetectors* d) {
    FakeModel* f = (FakeModel*)ctx;
    fake_state_fields(expect);
    train_state_read(path, expect, got, f->m, f->v, d);
}

static TrainerOps fake_ops(FakeModel* f) {
    TrainerOps ops = {f, fake_zero_grad, fake_forward_backward, fake_grad_norm, fake_update, fake_forward_losses,
                      fake_next_token_logits, fake_save_model, fake_save_state, fake_load_state};
    return ops;
}

// ----------------------------------------------------------------------------
// running the loop like a trainer's main() does

static char shard_path[256];
static char work_dir[200];

// a gpt-2 shard of ntok pseudo-random tokens; with mask (ntok bytes, filled here) a chat shard (version 2) of the same
// tokens in conversations of T, mask 1 on about a quarter of the tokens (never a conversation's first), and none at all
// in tokens [empty_from, empty_to)
static void write_any_shard(const char* path, int ntok, int T, int empty_from, int empty_to, uint8_t* mask) {
    int header[256] = {0};
    header[0] = 20240520;
    header[1] = mask != NULL ? 2 : 1;
    header[2] = ntok;
    header[3] = mask != NULL ? T : 0;
    FILE* f = fopenCheck(path, "wb");
    fwriteCheck(header, sizeof(int), 256, f, path);
    uint32_t x = 12345;
    for (int i = 0; i < ntok; i++) {
        x = x * 1664525u + 1013904223u;
        uint16_t tok = (uint16_t)((x >> 16) % VOCAB);
        fwriteCheck(&tok, sizeof(tok), 1, f, path);
        if (mask != NULL) { mask[i] = (uint8_t)(i % T != 0 && (i < empty_from || i >= empty_to) && ((x >> 8) & 3) == 0); }
    }
    if (mask != NULL) { fwriteCheck(mask, 1, (size_t)ntok, f, path); }
    fcloseCheck(f, path);
}

static void write_shard(const char* path, int ntok) { write_any_shard(path, ntok, 0, 0, 0, NULL); }

static void write_chat_shard(const char* path, int ntok, int T, int empty_from, int empty_to, uint8_t* mask) {
    write_any_shard(path, ntok, T, empty_from, empty_to, mask);
}

typedef struct {
    FakeModel model;
    int status;
    int max_steps;
    TrainerDetectors detectors;
} RunResult;

// parses a space-separated flag string with llmc/args.h and runs the loop like a trainer's main()
static RunResult run_flags(const char* flags, int signal_at_call, int nan_norm_at_call) {
    static char buf[2048];
    snprintf(buf, sizeof(buf), "%s", flags);
    char* argv[128];
    int argc = 0;
    argv[argc++] = (char*)"test_trainer";
    for (char* tok = strtok(buf, " "); tok != NULL && argc < 127; tok = strtok(NULL, " ")) {
        argv[argc++] = strcmp(tok, "''") == 0 ? (char*)"" : tok;
    }
    TrainArgs args;
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &args, argc, argv, "test");
    RunResult r;
    memset(&r, 0, sizeof(r));
    FakeModel* f = &r.model;
    f->B = args.B;
    f->T = args.T;
    f->signal_at_call = signal_at_call;
    f->nan_norm_at_call = nan_norm_at_call;
    for (int i = 0; i < NPARAM; i++) { f->w[i] = 0.01f * (float)i; }
    int resume_step = trainer_prepare(&args, &GPT2_FAMILY, 0);
    if (resume_step >= 0) {
        char path[4200];
        trainer_checkpoint_path(path, sizeof(path), args.output_log_dir, "model", resume_step, -1);
        fake_load_model(f, path);
    }
    TrainerComm comm = {0, 1, NULL, NULL, NULL};
    Trainer tr;
    trainer_init(&tr, &args, &GPT2_FAMILY, comm, VOCAB, resume_step);
    TrainerOps ops = fake_ops(f);
    fflush(stdout);
    int saved_stdout = dup(1); // the loop's progress lines are not this test's output
    FILE* devnull = fopen("/dev/null", "w");
    dup2(fileno(devnull), 1);
    r.status = trainer_run(&tr, &ops);
    fflush(stdout);
    dup2(saved_stdout, 1);
    close(saved_stdout);
    fclose(devnull);
    r.max_steps = tr.max_steps;
    r.detectors = tr.detectors;
    trainer_free(&tr);
    return r;
}

static int same_bits(const float* a, const float* b, int n) { return memcmp(a, b, (size_t)n * sizeof(float)) == 0; }

static void make_dir(const char* name, char* out, size_t cap) {
    snprintf(out, cap, "%s/%s", work_dir, name);
    mkdir(out, 0755);
}

// the loop on the test shard with `flags` and -o work_dir/out (out NULL: no -o); dir receives the path
static RunResult run_in(const char* out, const char* flags, int signal_at_call, int nan_norm_at_call, char* dir) {
    char all[1024];
    if (out == NULL) {
        snprintf(all, sizeof(all), "-i %s -j '' -e d1 -b 2 -t 8 -v 0 %s", shard_path, flags);
    } else {
        make_dir(out, dir, 300);
        snprintf(all, sizeof(all), "-i %s -j '' -e d1 -b 2 -t 8 -v 0 %s -o %s", shard_path, flags, dir);
    }
    return run_flags(all, signal_at_call, nan_norm_at_call);
}

static int exists(const char* dir, const char* kind, int step) {
    char path[4200];
    trainer_checkpoint_path(path, sizeof(path), dir, kind, step, strcmp(kind, "state") == 0 ? 0 : -1);
    return file_exists(path);
}

// ----------------------------------------------------------------------------
// the rules

static void test_grad_clip_scale_is_torch_clip_grad_norm(void) {
    // torch: coef = max_norm / (total_norm + 1e-6), clamped to 1, in float32
    CHECK(grad_clip_scale(2.0f, 1.0f) == 1.0f / (2.0f + 1e-6f), "norm 2 clips to 1 / (2 + 1e-6)");
    CHECK(grad_clip_scale(0.5f, 1.0f) == 1.0f, "a norm below the clip is untouched");
    CHECK(grad_clip_scale(0.9999995f, 1.0f) < 1.0f, "just below the clip, torch still scales (the 1e-6 is in the denominator)");
    CHECK(grad_clip_scale(5.0f, 0.0f) == 1.0f, "clip 0 is off");
    CHECK(grad_clip_scale(NAN, 1.0f) == 1.0f && grad_clip_scale(INFINITY, 1.0f) == 1.0f,
          "a non-finite norm gives 1 (the update is skipped instead)");
}

static void test_grad_accum_and_max_steps(void) {
    const char* why;
    CHECK(trainer_grad_accum_steps(-1, 4, 64, 2, &why) == 1, "-d -1 is one micro-batch per process");
    CHECK(trainer_grad_accum_steps(4 * 64 * 2 * 3, 4, 64, 2, &why) == 3, "-d = 3 x B*T*nproc is 3 micro-batches");
    CHECK(trainer_grad_accum_steps(1000, 4, 64, 1, &why) == -1 && strstr(why, "multiple") != NULL, "-d not a multiple is refused");
    CHECK(trainer_max_steps(40, 10, 256, &why) == 40, "-x N is N");
    CHECK(trainer_max_steps(-1, 2560, 256, &why) == 10, "-x -1 is one epoch");
    CHECK(trainer_max_steps(-1, 100, 256, &why) == -1 && strstr(why, "smaller than one") != NULL,
          "-x -1 on data smaller than one batch is an error, not one step");
}

static void test_due_schedule(void) {
    TrainArgs a;
    const char* argv[] = {"t", "-v", "10", "-s", "5", "-n", "10", "-h", "1"};
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &a, 9, (char**)argv, "t");
    TrainerDue d = trainer_due(&a, 0, 20, -1, 1, 1, 0);
    CHECK(d.val && d.eval && !d.sample && !d.checkpoint && !d.stop, "step 0: val and HellaSwag, no sample or checkpoint");
    d = trainer_due(&a, 10, 20, -1, 1, 1, 0);
    CHECK(d.val && d.sample && d.checkpoint && !d.stop, "step 10: everything due");
    d = trainer_due(&a, 10, 20, 10, 1, 1, 0);
    CHECK(!d.val && !d.eval && !d.sample && !d.checkpoint && !d.stop,
          "the resumed step repeats none of its top-of-step actions (they ran before it was saved)");
    d = trainer_due(&a, 13, 20, -1, 1, 1, 0);
    CHECK(!d.val && !d.sample && !d.checkpoint && !d.stop, "step 13: nothing due");
    d = trainer_due(&a, 13, 20, -1, 1, 1, SIGINT);
    CHECK(d.checkpoint && d.stop, "a signal saves and stops at the next step");
    d = trainer_due(&a, 13, 20, -1, 1, 0, SIGINT);
    CHECK(!d.checkpoint && d.stop, "without -o a signal stops without saving");
    d = trainer_due(&a, 20, 20, -1, 1, 1, 0);
    CHECK(d.val && d.sample && d.checkpoint && d.stop, "the last step evaluates, samples, saves and stops");
}

static void test_skip_rule_keeps_the_windows_clean(void) {
    TrainerDetectors d;
    trainer_detectors_init(&d);
    for (int i = 0; i < OUTLIER_DETECTOR_WINDOW_SIZE; i++) {
        UpdateDecision u = trainer_judge_update(&d, 3.0f + 0.01f * (float)(i % 7), 1.0f + 0.01f * (float)(i % 5), 3.0f, 3.0f);
        CHECK(!u.skip, "warm-up step %d is applied", i);
    }
    UpdateDecision u = trainer_judge_update(&d, 3.02f, NAN, 3.0f, 3.0f);
    CHECK(u.skip && strstr(u.why, "non-finite gradient norm") != NULL, "a NaN gradient norm skips the update");
    u = trainer_judge_update(&d, INFINITY, 1.0f, 0.0f, 0.0f);
    CHECK(u.skip, "an infinite loss skips the update even with -sl/-sg off");
    u = trainer_judge_update(&d, 3.02f, 1.02f, 3.0f, 3.0f);
    CHECK(!u.skip && isfinite(u.loss_z) && isfinite(u.norm_z),
          "after a NaN step the z-scores are finite (the NaN never entered the windows)");
    u = trainer_judge_update(&d, 30.0f, 1.02f, 3.0f, 3.0f);
    CHECK(u.skip && strstr(u.why, "loss z") != NULL, "a loss spike is skipped");
    double before = outlier_zscore(&d.loss, 30.0);
    u = trainer_judge_update(&d, 30.0f, 1.02f, 3.0f, 3.0f);
    CHECK(u.skip && outlier_zscore(&d.loss, 30.0) == before, "a skipped spike does not enter the window: the next one is caught too");
    u = trainer_judge_update(&d, 3.0f, 9.0f, 3.0f, 0.0f);
    CHECK(!u.skip, "a norm spike with -sg off is applied");
}

static void test_prune_list(void) {
    int steps[] = {5, 10, 15, 20, 23}, out[8];
    int n = trainer_checkpoints_to_prune(steps, 5, 2, 0, out);
    CHECK(n == 3 && out[0] == 5 && out[1] == 10 && out[2] == 15, "-nk 2 keeps the newest two, 20 and 23");
    n = trainer_checkpoints_to_prune(steps, 5, 2, 10, out);
    CHECK(n == 2 && out[0] == 5 && out[1] == 15, "-nm 10 keeps the multiples of 10");
    CHECK(trainer_checkpoints_to_prune(steps, 5, 0, 0, out) == 0, "-nk 0 keeps everything");
}

// ----------------------------------------------------------------------------
// the loop

static void test_resume_is_bit_exact(void) {
    char a[300], b[300];
    RunResult straight = run_in("straight", "-k constant -l 0.01 -s 5 -g 6 -n 5 -x 20", -1, -1, a);
    RunResult first = run_in("resumed", "-k constant -l 0.01 -s 5 -g 6 -n 5 -x 10", -1, -1, b);
    RunResult second = run_in("resumed", "-k constant -l 0.01 -s 5 -g 6 -n 5 -x 20 -y 1", -1, -1, b);
    CHECK(straight.status == 0 && first.status == 0 && second.status == 0, "all three runs exit 0");
    CHECK(first.model.ncalls == 10 && second.model.ncalls == 10, "10 + 10 steps (the resumed run trains from step 10)");
    CHECK(same_bits(straight.model.w, second.model.w, NPARAM), "resumed weights are bit-identical to the straight run's");
    CHECK(same_bits(straight.model.m, second.model.m, NPARAM) && same_bits(straight.model.v, second.model.v, NPARAM),
          "and so are the AdamW moments");
    CHECK(memcmp(straight.model.first_input + 10, second.model.first_input, 10 * sizeof(int)) == 0,
          "the resumed run reads the same batches as steps 10..19 of the straight run");
    // samples at 5, 10 (before the save), 15, 20: the resumed run samples at 15 and 20 only, with the same text
    int g = 6;
    CHECK(straight.model.nsampled == 4 * g && first.model.nsampled == 2 * g && second.model.nsampled == 2 * g,
          "samples at 5, 10, 15, 20; the resumed run does not repeat step 10's");
    CHECK(memcmp(straight.model.sampled + 2 * g, second.model.sampled, 2 * g * sizeof(int)) == 0,
          "the resumed run's samples equal the straight run's (the sampler RNG was saved after step 10's sample)");
}

static void test_signal_saves_and_resume_continues(void) {
    char a[300], b[300];
    RunResult straight = run_in("sig_straight", "-l 0.01 -s 0 -x 12", -1, -1, a);
    RunResult stopped = run_in("sig", "-l 0.01 -s 0 -x 12", 4, -1, b); // SIGINT arrives during step 4's backward
    CHECK(stopped.status == 130, "SIGINT: exit status 130 (got %d)", stopped.status);
    CHECK(stopped.model.ncalls == 5, "the step that was running finishes (5 steps ran)");
    CHECK(exists(b, "DONE", 5) && exists(b, "model", 5) && exists(b, "state", 5), "a complete checkpoint for step 5");
    CHECK(trainer_latest_checkpoint(b) == 5, "listed as the newest checkpoint");
    RunResult resumed = run_in("sig", "-l 0.01 -s 0 -x 12 -y 1", -1, -1, b);
    CHECK(resumed.status == 0 && resumed.model.ncalls == 7, "the resumed run trains steps 5..11");
    CHECK(same_bits(straight.model.w, resumed.model.w, NPARAM), "and ends bit-identical to the run that was never stopped");
}

static void test_signal_without_output_dir_stops_cleanly(void) {
    RunResult r = run_in(NULL, "-s 0 -x 12", 2, -1, NULL);
    CHECK(r.status == 130 && r.model.ncalls == 3, "no -o: stops after the step with 128 + signal, nothing written");
}

static void test_half_written_checkpoint_is_not_resumed(void) {
    char d[300], path[4200];
    run_in("killed", "-s 0 -x 10 -n 10", -1, -1, d);
    // a run killed while saving step 20: rank 0's model is there, the other rank's state and DONE are not
    trainer_checkpoint_path(path, sizeof(path), d, "model", 20, -1);
    FILE* f = fopenCheck(path, "wb");
    fcloseCheck(f, path);
    trainer_checkpoint_path(path, sizeof(path), d, "state", 20, 0);
    f = fopenCheck(path, "wb");
    fcloseCheck(f, path);
    CHECK(trainer_latest_checkpoint(d) == 10, "the newest complete checkpoint is 10, not the half-written 20");
    RunResult r = run_in("killed", "-s 0 -x 12 -y 1", -1, -1, d);
    CHECK(r.status == 0 && r.model.ncalls == 2, "-y 1 resumes from step 10");
}

static void test_keep_prunes_by_listing(void) {
    char d[300];
    run_in("keep", "-s 0 -x 23 -n 5 -nk 2", -1, -1, d);
    int steps[16];
    int n = trainer_list_checkpoints(d, steps, 16);
    CHECK(n == 2 && steps[0] == 20 && steps[1] == 23, "-x 23 -n 5 -nk 2 keeps exactly 20 and 23 (got %d)", n);
    CHECK(!exists(d, "model", 15) && !exists(d, "state", 15) && exists(d, "model", 20) && exists(d, "state", 23),
          "the pruned checkpoints' files are gone, the kept ones' are there");
    run_in("major", "-s 0 -x 23 -n 5 -nk 1 -nm 10", -1, -1, d);
    n = trainer_list_checkpoints(d, steps, 16);
    CHECK(n == 3 && steps[0] == 10 && steps[1] == 20 && steps[2] == 23, "-nk 1 -nm 10 keeps 10, 20 and the newest");
}

static void test_overfit_trains_on_the_first_batch_after_resume(void) {
    char d[300];
    RunResult first = run_in("overfit", "-d 48 -s 0 -a 1 -x 3 -n 3", -1, -1, d);
    RunResult resumed = run_in("overfit", "-d 48 -s 0 -a 1 -x 5 -y 1", -1, -1, d);
    CHECK(first.model.ncalls == 9 && resumed.model.ncalls == 6, "3 micro-batches per step, 3 + 2 steps");
    int all_first = 1;
    for (int i = 0; i < first.model.ncalls; i++) { all_first &= first.model.first_input[i] == first.model.first_input[0]; }
    for (int i = 0; i < resumed.model.ncalls; i++) { all_first &= resumed.model.first_input[i] == first.model.first_input[0]; }
    CHECK(all_first, "-a 1: every micro-batch, also after -y 1, is the first batch (never unloaded memory)");
}

static void test_nan_norm_is_skipped_in_the_loop(void) {
    RunResult r = run_in(NULL, "-s 0 -x 140 -sl 5 -sg 5 -k constant", -1, 130, NULL);
    CHECK(r.status == 0 && r.model.nupdates == 139, "the NaN-norm step is not applied, the other 139 are");
    int finite = 1;
    for (int i = 0; i < OUTLIER_DETECTOR_WINDOW_SIZE; i++) {
        finite &= isfinite(r.detectors.grad_norm.buffer[i]) && isfinite(r.detectors.loss.buffer[i]);
    }
    CHECK(finite && isfinite(outlier_zscore(&r.detectors.grad_norm, 1.0)), "the windows hold no NaN after it");
}

// both learning rates come from trainer_run: -l and, with -op muon, -ol, each through its own -k/-u/-q schedule
// (the CPU and GPU updates use what they are given); AdamW runs get a Muon lr of 0
static void test_update_gets_both_scheduled_learning_rates(void) {
    const char* schedule = "-s 0 -x 7 -l 1e-3 -k cosine -u 2 -q 0.1";
    char flags[256];
    snprintf(flags, sizeof(flags), "%s -op muon -ol 0.02", schedule);
    RunResult r = run_in(NULL, flags, -1, -1, NULL);
    LearningRateScheduler adamw, muon;
    lr_scheduler_init(&adamw, "cosine", 1e-3f, 2, 7, 0.1f);
    lr_scheduler_init(&muon, "cosine", 0.02f, 2, 7, 0.1f);
    int same = r.status == 0 && r.model.nupdates == 7, scaled_differs = 0;
    for (int step = 0; step < 7 && same; step++) {
        float lr = get_learning_rate(&adamw, step), muon_lr = get_learning_rate(&muon, step);
        same &= same_bits(&r.model.lr[step], &lr, 1) && same_bits(&r.model.muon_lr[step], &muon_lr, 1);
        // the rescaling the GPU trainer did before (-ol * lr / -l) is not always the schedule's value bit for bit
        scaled_differs |= (float)((double)0.02f * (double)lr / (double)1e-3f) != muon_lr;
    }
    CHECK(same, "-op muon: every update gets the -l schedule's lr and the -ol schedule's Muon lr, bit for bit");
    CHECK(scaled_differs, "the check can tell the schedule of -ol from -ol * lr / -l");
    r = run_in(NULL, schedule, -1, -1, NULL);
    int zero = r.status == 0 && r.model.nupdates == 7;
    for (int i = 0; i < r.model.nupdates && zero; i++) { zero &= r.model.muon_lr[i] == 0.0f; }
    CHECK(zero, "-op adamw: the Muon lr handed to update is 0");
}

static void test_tiny_data_with_epoch_steps_is_an_error(void) {
    char small[300];
    snprintf(small, sizeof(small), "%s/small.bin", work_dir);
    write_shard(small, 20);
    TrainArgs args;
    const char* argv[] = {"t", "-i", small, "-j", "", "-b", "2", "-t", "8", "-x", "-1"};
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &args, 11, (char**)argv, "t");
    const char* why;
    CHECK(trainer_max_steps(args.max_steps, 20, 2 * 8, &why) == 1, "20 tokens hold one 16-token batch");
    CHECK(trainer_max_steps(args.max_steps, 10, 2 * 8, &why) == -1, "10 tokens hold none: an error");
}

// chat shards: a step's micro-batches are counted first, each runs with loss_scale = B*T / N_step (one process), and a
// step with nothing supervised runs nothing and updates nothing, while the steps after it go on (AdamW's t included)
static void test_masked_steps_scale_by_the_step_s_supervised_count(void) {
    enum { NTOK = 256, T = 8, B = 2, ACCUM = 2 };
    uint8_t mask[NTOK];
    char path[300];
    snprintf(path, sizeof(path), "%s/chat.bin", work_dir);
    write_chat_shard(path, NTOK, T, 2 * B * T * ACCUM, 3 * B * T * ACCUM, mask); // step 3's tokens: no mask
    char flags[600];
    snprintf(flags, sizeof(flags), "-i %s -j '' -e d1 -b %d -t %d -d %d -v 0 -x 4", path, B, T, B * T * ACCUM);
    RunResult r = run_flags(flags, -1, -1);
    CHECK(r.status == 0, "masked run exits 0 (got %d)", r.status);
    CHECK(r.model.ncalls == 6, "3 steps of 2 micro-batches run, the empty one none (got %d calls)", r.model.ncalls);
    CHECK(r.model.nupdates == 3, "3 updates (got %d)", r.model.nupdates);
    int steps_run[3] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        int step = steps_run[k], n_step = 0;
        for (int j = step * B * T * ACCUM; j < (step + 1) * B * T * ACCUM; j++) {
            n_step += j % T != T - 1 && mask[j + 1]; // the reading rule: the target of position j is token j + 1
        }
        for (int m = 0; m < ACCUM; m++) {
            int call = 2 * k + m;
            float want = (float)((double)(B * T) / (double)n_step);
            CHECK(r.model.loss_scale[call] == want, "step %d micro-batch %d: loss_scale %g, want B*T/N_step = %g", step,
                  m, r.model.loss_scale[call], want);
        }
        CHECK(r.model.supervised[2 * k] + r.model.supervised[2 * k + 1] == n_step,
              "step %d: the micro-batches hold the %d supervised targets of the mask", step, n_step);
        CHECK(r.model.step_loss[k] == (float)(step + 1), "step %d: AdamW's t is %d (got %g)", step, step + 1,
              r.model.step_loss[k]);
    }
}

int main(void) {
    snprintf(work_dir, sizeof(work_dir), "/tmp/llmc_test_trainer_%d", (int)getpid());
    mkdir(work_dir, 0755);
    snprintf(shard_path, sizeof(shard_path), "%s/train.bin", work_dir);
    write_shard(shard_path, 8192);

    test_grad_clip_scale_is_torch_clip_grad_norm();
    test_grad_accum_and_max_steps();
    test_due_schedule();
    test_skip_rule_keeps_the_windows_clean();
    test_prune_list();
    test_resume_is_bit_exact();
    test_signal_saves_and_resume_continues();
    test_signal_without_output_dir_stops_cleanly();
    test_half_written_checkpoint_is_not_resumed();
    test_keep_prunes_by_listing();
    test_overfit_trains_on_the_first_batch_after_resume();
    test_nan_norm_is_skipped_in_the_loop();
    test_update_gets_both_scheduled_learning_rates();
    test_tiny_data_with_epoch_steps_is_an_error();
    test_masked_steps_scale_by_the_step_s_supervised_count();

    char cmd[400];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", work_dir);
    if (system(cmd) != 0) { printf("note: could not remove %s\n", work_dir); }
    return test_summary();
}
