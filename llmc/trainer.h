/*
llmc/trainer.h: the host side of training, written once for every trainer. Plain C (no CUDA, no
MPI): train_gpt2.c and train_gpt2.cu run their training loop through trainer_run, and so does pyllmc
(pyllmc/train.py runs train_gpt2.c's main() through cffi); dev/test/test_trainer.c drives the whole
loop with a small CPU model, so what the GPU trainer does between its kernels is tested without a GPU.

What a trainer brings (TrainerOps, TrainerComm): its kernels and memory (forward + backward of a
micro-batch, the gradient norm, the optimizer update, per-token losses, next-token logits, writing
its parameters and optimizer state) and its communication (a barrier, a sum of a few host floats).
Everything else is here:

    the rules            grad_clip_scale (torch's clip_grad_norm_), trainer_judge_update (the skip
                         rule and the outlier windows), trainer_grad_accum_steps, trainer_max_steps,
                         trainer_due (what runs at the top of a step), the AdamW constants and seeds
    checkpoints          <dir>/model_%08d.bin (rank 0), state_%08d_%05d.bin (every rank), then
                         DONE_%08d (rank 0, after a barrier): only steps with a DONE marker exist for
                         listing, resume (-y) and pruning (-nk keeps the newest N, -nm never removes
                         a multiple of N); a run killed while saving resumes from the previous one
    the loop             val loss, HellaSwag, sample, checkpoint, then one optimizer step of
                         grad-accumulated micro-batches (-a 1: every micro-batch is the first batch),
                         clipping, skipping, the step's learning rates (-l and, with -op muon, -ol, each
                         on the -k/-u/-q schedule) handed to the update, the progress line and main.log
    signals              SIGINT/SIGTERM finish the step; the next step's scheduled evaluations run as
                         they would have, a checkpoint is written (with -o) and trainer_run returns
                         128 + the signal (130 / 143). A second signal kills at once (files are atomic).

Chat shards (a loss mask, llmc/dataloader.h: targets -1 where not supervised) train in masked mode, with no
flag: a step first loads its micro-batches and counts their supervised positions, N_step, summed over the
processes; each micro-batch then runs with loss_scale = processes x B x T / N_step (forward_backward's
gradients are of loss_scale x the micro-batch's loss summed over its supervised positions / (B x T), and
grad_norm averages them over the processes), so the step's gradient is that of the sum of the supervised
cross-entropies over every micro-batch and process divided by N_step, and the step's loss is that mean.
A step with no supervised position anywhere trains nothing (no forward, backward or update; the step
and the lr schedule move on) and prints one line saying so. The val loss of chat shards is likewise the
mean over the supervised positions of all its batches and processes. Plain shards run as before.

Resume is bit-exact: a step's top-of-step actions (evaluations, sample, checkpoint) run before its
state is saved, so a resumed run skips them at that step and continues with the same sampler RNG,
data position, outlier windows and optimizer state as the run that saved it.
*/
#ifndef LLMC_TRAINER_H
#define LLMC_TRAINER_H

#include <dirent.h>
#include <glob.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "utils.h"
#include "args.h"
#include "checkpoint.h"
#include "dataloader.h"
#include "tokenizer.h"
#include "sampler.h"
#include "schedulers.h"
#include "logger.h"
#include "outlier_detector.h"
#include "mfu.h"
#include "muon_config.h"
#include "model_family.h"

// the reference's optimizer and seeds (train_gpt2.py); no flags: they are fixed like there
#define TRAINER_ADAMW_BETA1 0.9f
#define TRAINER_ADAMW_BETA2 0.95f
#define TRAINER_ADAMW_EPS 1e-8f
#define TRAINER_GRAD_CLIP 1.0f
#define TRAINER_INIT_SEED 42u
#define TRAINER_SAMPLER_SEED 1337u

// ----------------------------------------------------------------------------
// the rules

static inline double trainer_wall_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// "1:02:03" for a number of seconds, "?" when unknown
static inline void trainer_format_duration(char* buf, size_t size, double seconds) {
    if (!(seconds >= 0.0) || seconds > 1e8) { snprintf(buf, size, "?"); return; }
    long s = (long)(seconds + 0.5);
    snprintf(buf, size, "%ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
}

// The factor the gradients are multiplied by, exactly torch.nn.utils.clip_grad_norm_ in float32:
// min(1, clip / (norm + 1e-6)). clip <= 0 turns clipping off; a non-finite norm gives 1 (the
// update is skipped by trainer_judge_update instead).
static inline float grad_clip_scale(float norm, float clip) {
    if (clip <= 0.0f || !isfinite(norm)) { return 1.0f; }
    float coef = clip / (norm + 1e-6f);
    return coef < 1.0f ? coef : 1.0f;
}

// micro-batches per optimizer step for -d total tokens (-1 = one micro-batch on every process),
// or -1 with *why set
static inline int trainer_grad_accum_steps(long long total, int B, int T, int nproc, const char** why) {
    *why = "";
    if (B < 1 || T < 1 || nproc < 1) {
        *why = "B, T and the number of processes must be positive";
        return -1;
    }
    long long per = (long long)B * T * nproc;
    if (total == -1) { return 1; }
    if (total < per || total % per != 0) {
        *why = "the total batch (-d) must be a positive multiple of B * T * processes";
        return -1;
    }
    if (total / per > 1000000) {
        *why = "the total batch (-d) needs more than a million micro-batches per step";
        return -1;
    }
    return (int)(total / per);
}

// -x: the requested steps, or for -1 one epoch of the training tokens; -1 with *why when the
// epoch is shorter than one step
static inline int trainer_max_steps(int requested, size_t train_tokens, long long total_batch, const char** why) {
    *why = "";
    if (requested >= 0) { return requested; }
    long long steps = (long long)train_tokens / total_batch;
    if (steps < 1) {
        *why = "the training data is smaller than one total batch (flag -x -1 = one epoch)";
        return -1;
    }
    return steps > 2000000000LL ? 2000000000 : (int)steps;
}

// the -sl / -sg outlier windows, saved in the training state
typedef struct {
    OutlierDetector loss;
    OutlierDetector grad_norm;
} TrainerDetectors;

static inline void trainer_detectors_init(TrainerDetectors* d) {
    init_detector(&d->loss);
    init_detector(&d->grad_norm);
}

typedef struct {
    int skip;          // 1: leave the parameters as they are this step
    double loss_z;     // z-scores against the windows (NaN until 128 steps were seen)
    double norm_z;
    char why[64];      // for the progress line, "" when applied
} UpdateDecision;

// The skip rule: a non-finite loss or gradient norm is never applied; with -sl / -sg (> 0) a
// z-score above the threshold is not either. Only the values of applied steps enter the windows,
// so a NaN or a spike cannot turn the next 128 z-scores into NaN or hide the next spike.
static inline UpdateDecision trainer_judge_update(TrainerDetectors* d, float loss, float grad_norm,
                                                  float skip_lossz, float skip_gradz) {
    UpdateDecision u;
    u.skip = 0;
    u.why[0] = '\0';
    u.loss_z = outlier_zscore(&d->loss, (double)loss);
    u.norm_z = outlier_zscore(&d->grad_norm, (double)grad_norm);
    if (!isfinite(loss) || !isfinite(grad_norm)) {
        u.skip = 1;
        snprintf(u.why, sizeof(u.why), "non-finite %s", isfinite(loss) ? "gradient norm" : "loss");
    } else if (skip_lossz > 0.0f && !isnan(u.loss_z) && u.loss_z > skip_lossz) {
        u.skip = 1;
        snprintf(u.why, sizeof(u.why), "loss z %.1f", u.loss_z);
    } else if (skip_gradz > 0.0f && !isnan(u.norm_z) && u.norm_z > skip_gradz) {
        u.skip = 1;
        snprintf(u.why, sizeof(u.why), "norm z %.1f", u.norm_z);
    }
    if (!u.skip) {
        outlier_push(&d->loss, (double)loss);
        outlier_push(&d->grad_norm, (double)grad_norm);
    }
    return u;
}

// The extra blob of a training state (llmc/checkpoint.h): the detectors, then `master_count` fp32
// values (the GPU trainer's master weights of its shard in bf16 builds with -w 1; 0 elsewhere).
static inline size_t trainer_state_extra_bytes(size_t master_count) {
    return sizeof(TrainerDetectors) + master_count * sizeof(float);
}

// 1 when a state file holds an optimizer slice of opt_size values and an extra blob of extra_bytes
// (the format's sizes are 64-bit; only a file beyond 2^63 - 1 bytes is refused, llmc/checkpoint.h)
static inline int trainer_state_fits(size_t opt_size, size_t extra_bytes) {
    return train_state_file_bytes((uint64_t)opt_size, (uint64_t)extra_bytes) != 0;
}

static inline void trainer_state_extra_pack(char* extra, const TrainerDetectors* d, const float* master, size_t master_count) {
    memcpy(extra, d, sizeof(TrainerDetectors));
    if (master_count > 0) { memcpy(extra + sizeof(TrainerDetectors), master, master_count * sizeof(float)); }
}

static inline void trainer_state_extra_unpack(const char* extra, TrainerDetectors* d, float* master, size_t master_count) {
    memcpy(d, extra, sizeof(TrainerDetectors));
    if (master_count > 0) { memcpy(master, extra + sizeof(TrainerDetectors), master_count * sizeof(float)); }
}

// what runs at the top of a step, before its optimizer step
typedef struct {
    int val;         // validation loss (-v, with -j)
    int eval;        // HellaSwag (-h 1, on the -v schedule)
    int sample;      // text sample (-s)
    int checkpoint;  // checkpoint (-n, with -o; or the stop of a signal)
    int stop;        // the loop ends here: the last step, or a signal
} TrainerDue;

// every > 0 and (step a multiple of it, or the last step)
static inline int trainer_every(int step, int every, int last) { return every > 0 && (step % every == 0 || last); }

// resume_step: the step a resumed run starts at (its top-of-step actions ran before it was saved;
// -1 for a fresh run); stopping: a signal arrived during the previous step
static inline TrainerDue trainer_due(const TrainArgs* a, int step, int max_steps, int resume_step, int have_val,
                                     int have_out_dir, int stopping) {
    TrainerDue d;
    int last = step >= max_steps;
    int fresh = step != resume_step;
    d.val = fresh && have_val && trainer_every(step, a->val_loss_every, last);
    d.eval = fresh && a->hellaswag_eval && trainer_every(step, a->val_loss_every, last);
    d.sample = fresh && a->sample_every > 0 && (last || (step > 0 && step % a->sample_every == 0));
    d.checkpoint = fresh && have_out_dir &&
                   (stopping || (a->checkpoint_every > 0 && (last || (step > 0 && step % a->checkpoint_every == 0))));
    d.stop = last || stopping;
    return d;
}

// The progress line of an optimizer step (step is 0-based; mfu may be ""), the same for every trainer:
// step 12/40 | loss 5.123456 | lr 3.00e-04 | norm 1.2345 | 1234.5 ms | 207 tok/s | ETA 0:00:34
static inline void trainer_progress_line(char* buf, size_t size, int step, int max_steps, float loss, float lr,
                                         float grad_norm, double seconds, long long tokens, double eta_seconds,
                                         const char* mfu, const UpdateDecision* u) {
    char eta[32];
    trainer_format_duration(eta, sizeof(eta), eta_seconds);
    int n = snprintf(buf, size, "step %d/%d | loss %.6f | lr %.2e | norm %.4f | %.1f ms | %.0f tok/s%s%s | ETA %s", step + 1,
                     max_steps, loss, lr, grad_norm, 1000.0 * seconds, (double)tokens / seconds,
                     mfu[0] != '\0' ? " | MFU " : "", mfu, eta);
    if (u->skip && n > 0 && (size_t)n < size) { snprintf(buf + n, size - (size_t)n, " | update skipped (%s)", u->why); }
}

// ----------------------------------------------------------------------------
// checkpoint directory

static inline void trainer_checkpoint_path(char* buf, size_t size, const char* dir, const char* kind, int step, int rank) {
    int n;
    if (rank >= 0) { n = snprintf(buf, size, "%s/%s_%08d_%05d.bin", dir, kind, step, rank); }
    else if (strcmp(kind, "DONE") == 0) { n = snprintf(buf, size, "%s/DONE_%08d", dir, step); }
    else { n = snprintf(buf, size, "%s/%s_%08d.bin", dir, kind, step); }
    if (n < 0 || (size_t)n >= size) { llmc_die("%s: output directory path too long", dir); }
}

// the steps with a DONE marker in dir, ascending; returns how many (at most max)
static inline int trainer_list_checkpoints(const char* dir, int* steps, int max) {
    DIR* d = opendir(dir);
    if (d == NULL) { return 0; }
    int n = 0;
    struct dirent* e;
    while ((e = readdir(d)) != NULL) {
        int step;
        char tail;
        if (sscanf(e->d_name, "DONE_%d%c", &step, &tail) == 1 && strlen(e->d_name) == 13 && step >= 0 && n < max) {
            steps[n++] = step;
        }
    }
    closedir(d);
    for (int i = 1; i < n; i++) { // insertion sort, n is small
        int s = steps[i], j = i - 1;
        while (j >= 0 && steps[j] > s) { steps[j + 1] = steps[j]; j--; }
        steps[j + 1] = s;
    }
    return n;
}

// the newest complete checkpoint in dir, or -1
static inline int trainer_latest_checkpoint(const char* dir) {
    int steps[4096];
    int n = trainer_list_checkpoints(dir, steps, 4096);
    return n > 0 ? steps[n - 1] : -1;
}

// Which of the listed steps (ascending) -nk / -nm remove: all but the newest `keep` (0 = keep all),
// except the multiples of major_every (> 0). Writes them to out; returns how many.
static inline int trainer_checkpoints_to_prune(const int* steps, int n, int keep, int major_every, int* out) {
    int count = 0;
    if (keep <= 0) { return 0; }
    for (int i = 0; i < n - keep; i++) {
        if (major_every > 0 && steps[i] % major_every == 0) { continue; }
        out[count++] = steps[i];
    }
    return count;
}

// ----------------------------------------------------------------------------
// SIGINT / SIGTERM: the handler only records the signal; the loop acts on it after the step

static volatile sig_atomic_t trainer_stop_signal_ = 0;

static inline void trainer_on_signal_(int sig) { trainer_stop_signal_ = sig; }

static inline void trainer_install_stop_handlers(void) {
    trainer_stop_signal_ = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = trainer_on_signal_;
    sa.sa_flags = SA_RESETHAND | SA_RESTART; // a second signal kills at once
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static inline void trainer_restore_signal_handlers(void) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
}

// ----------------------------------------------------------------------------
// what a trainer brings

typedef struct {
    int rank;
    int nproc;
    void* ctx;
    void (*barrier)(void* ctx);
    void (*sum_floats)(void* ctx, float* values, int n); // in place, over all processes (host memory)
} TrainerComm;

typedef struct {
    void* ctx;
    void (*zero_grad)(void* ctx);
    // forward and backward of one (B, T) micro-batch: the gradients of loss_scale * (mean loss) are
    // ADDED; last: the last micro-batch of the step. Returns this micro-batch's mean loss.
    float (*forward_backward)(void* ctx, const int* inputs, const int* targets, float loss_scale, int last);
    // the gradients averaged over processes; returns their global L2 norm
    float (*grad_norm)(void* ctx);
    // AdamW with the TRAINER_ADAMW constants at lr (with -op muon, Muon at muon_lr on its matrices; 0 for
    // AdamW), the gradients multiplied by grad_scale first; t is 1-based
    void (*update)(void* ctx, float lr, float muon_lr, float weight_decay, float grad_scale, int t);
    // forward only: the (B, T) per-token losses, in host memory
    const float* (*forward_losses)(void* ctx, const int* inputs, const int* targets);
    // forward only on tokens[0..len) (len <= T): the logits (V, host memory) after the last token
    const float* (*next_token_logits)(void* ctx, const int* tokens, int len);
    // rank 0: the parameters as a model checkpoint
    void (*save_model)(void* ctx, const char* path);
    // this rank's training state: the trainer fills the optimizer fields of s (num_parameters,
    // opt_offset, opt_size, extra_bytes) and writes s, its AdamW moments and an extra blob that
    // starts with the detectors (llmc/checkpoint.h train_state_write)
    void (*save_state)(void* ctx, const char* path, TrainState* s, const TrainerDetectors* d);
    // the inverse: fills the optimizer fields of expect, reads (train_state_read) into got and d
    void (*load_state)(void* ctx, const char* path, TrainState* expect, TrainState* got, TrainerDetectors* d);
} TrainerOps;

typedef struct {
    TrainArgs args;
    const ModelFamily* family;    // the model's: its shard format, its tokenizer (llmc/model_family.h)
    TrainerComm comm;
    const char* out_dir;          // -o, NULL for none
    int vocab_size;
    int grad_accum_steps;
    long long total_batch;        // tokens per optimizer step
    int max_steps;
    int have_val;
    DataLoader train_loader;
    DataLoader val_loader;
    EvalLoader eval_loader;
    Tokenizer tokenizer;
    uint32_t foreign_tokenizer_vocab; // the family's tokenizer file held more ids than the model's V (not this model's
                                      // tokenizer, e.g. GPT-2's beside a V=512 model): its size; it was not kept
    Sampler sampler;
    Logger logger;
    LearningRateScheduler lr_scheduler;
    int use_muon;                 // -op muon: the Muon lr follows -k from -ol as the lr does from -l
    LearningRateScheduler muon_lr_scheduler;
    TrainerDetectors detectors;
    int resume_step;              // the checkpoint resumed from, -1 for a fresh run
    double flops_per_step;        // with peak_flops > 0 the progress line shows the MFU
    double peak_flops;
    int* step_inputs;             // chat shards: the step's grad_accum_steps micro-batches (B, T) each, loaded
    int* step_targets;            // before the first forward pass (its supervised positions are counted first)
} Trainer;

static inline void trainer_barrier(const Trainer* tr) {
    if (tr->comm.nproc > 1 && tr->comm.barrier != NULL) { tr->comm.barrier(tr->comm.ctx); }
}

// the mean of x over processes
static inline float trainer_mean_over_processes(const Trainer* tr, float x) {
    if (tr->comm.nproc > 1) {
        tr->comm.sum_floats(tr->comm.ctx, &x, 1);
        x /= (float)tr->comm.nproc;
    }
    return x;
}

// the sum of a count over processes, exact: sent as two floats (count / 2^16 and count % 2^16), each of whose sums
// stays below 2^24 for up to 256 processes and totals below 2^40
static inline long long trainer_sum_count_over_processes(const Trainer* tr, long long n) {
    if (tr->comm.nproc == 1) { return n; }
    float parts[2] = {(float)(n >> 16), (float)(n & 0xFFFF)};
    tr->comm.sum_floats(tr->comm.ctx, parts, 2);
    return ((long long)parts[0] << 16) + (long long)parts[1];
}

// how many of targets[0..n) are supervised (not -1)
static inline long long trainer_count_supervised(const int* targets, size_t n) {
    long long count = 0;
    for (size_t i = 0; i < n; i++) { count += targets[i] != -1; }
    return count;
}

static inline void trainer_printf0(const Trainer* tr, const char* fmt, ...) LLMC_PRINTF(2, 3);
static inline void trainer_printf0(const Trainer* tr, const char* fmt, ...) {
    if (tr->comm.rank != 0) { return; }
    va_list args;
    va_start(args, fmt);
    vprintf(fmt, args);
    va_end(args);
    fflush(stdout);
}

// ----------------------------------------------------------------------------
// start-up

static inline void trainer_require_files_(const char* pattern, const char* flag, const ModelFamily* family) {
    glob_t g;
    int rc = glob(pattern, 0, NULL, &g);
    size_t n = rc == 0 ? g.gl_pathc : 0;
    if (rc == 0) { globfree(&g); }
    if (n == 0) {
        char hint[256];
        llmc_die("%s: no such file (flag %s; run %s to create it)", pattern, flag,
                 shard_data_command(hint, sizeof(hint), pattern, family->shard_format));
    }
}

// The flags of a trainer of `backend` running a model of `family` into *args: the trainers' table (llmc/args.h) with
// the family's -e default and help, copied into table (TRAIN_ARG_COUNT rows, printed later with the run's values);
// --help (about heads it) prints the backend's rows and exits, a bad or another backend's flag is one error line.
static inline void trainer_parse_args(TrainArgs* args, ArgSpec* table, int backend, const ModelFamily* family, int argc,
                                      char** argv, const char* about) {
    memcpy(table, TRAIN_ARG_TABLE, TRAIN_ARG_COUNT * sizeof(ArgSpec));
    for (int i = 0; i < TRAIN_ARG_COUNT; i++) {
        if (strcmp(table[i].flag, "-e") == 0) {
            table[i].default_value = family->load_default;
            table[i].help = family->load_help;
        }
    }
    train_args_parse(table, backend, args, argc, argv, about);
}

// Checks the flags that depend on each other and that every data file exists, before a model is
// built; returns the step to resume from (-y 1: the newest complete checkpoint in -o), or -1.
static inline int trainer_prepare(const TrainArgs* a, const ModelFamily* family, int rank) {
    int have_out = a->output_log_dir[0] != '\0';
    if ((a->checkpoint_every > 0 || a->resume) && !have_out) {
        llmc_die("flag %s needs an output directory (-o)", a->resume ? "-y" : "-n");
    }
    trainer_require_files_(a->train_data_pattern, "-i", family);
    if (a->val_loss_every > 0 && a->val_data_pattern[0] != '\0') { trainer_require_files_(a->val_data_pattern, "-j", family); }
    if (a->hellaswag_eval && !file_exists(a->hellaswag_path)) {
        llmc_die("%s: no such file (flag -h 1 needs the HellaSwag eval file, see -he; "
                 "run python dev/data/hellaswag.py to create it)", a->hellaswag_path);
    }
    if (!a->resume) { return -1; }
    int step = trainer_latest_checkpoint(a->output_log_dir);
    if (step < 0 && rank == 0) {
        printf("resume: no complete checkpoint in %s, starting from -e %s\n", a->output_log_dir, a->load_filename);
    }
    return step;
}

// 1 when the first shard of pattern is a chat shard of the family's format (dataloader_init checks every shard later)
static inline int trainer_chat_pattern(const char* pattern, const ModelFamily* family) {
    glob_t g;
    if (pattern[0] == '\0' || glob(pattern, 0, NULL, &g) != 0) { return 0; }
    int chat = 0;
    if (g.gl_pathc > 0) {
        const char* path = g.gl_pathv[0];
        FILE* f = fopenCheck(path, "rb");
        size_t chat_T;
        shard_read_header(f, path, family->shard_format, &chat_T);
        fcloseCheck(f, path);
        chat = chat_T != 0;
    }
    globfree(&g);
    return chat;
}

// A model about to train on chat shards whose vocabulary's chat tokens lie past its V (GPT-2's V = 50257) grows to
// hold them (the family's grow_vocab_for_chat: config's V and params' new rows); rank 0 says so in one line. Returns
// the model's V, grown or not. Checkpoints then carry the new V, so a resumed run (-y) starts from it.
static inline int trainer_grow_vocab_for_chat(const TrainArgs* a, const ModelFamily* family, void* config, float* params,
                                              int vocab_size, int rank) {
    if (family->grow_vocab_for_chat == NULL || !trainer_chat_pattern(a->train_data_pattern, family)) { return vocab_size; }
    char line[512];
    int grown = family->grow_vocab_for_chat(config, params, line, sizeof(line));
    if (grown == 0) { return vocab_size; }
    if (rank == 0) { printf("%s\n", line); }
    return grown;
}

// Loaders, schedule, tokenizer, sampler, logger and, when resuming, nothing yet of the state
// (trainer_run loads it). vocab_size: the model's V (token ids are checked against it); the shards
// must be of the family's format, and its tokenizer decodes the samples.
static inline void trainer_init(Trainer* tr, const TrainArgs* a, const ModelFamily* family, TrainerComm comm, int vocab_size,
                                int resume_step) {
    memset(tr, 0, sizeof(*tr));
    tr->args = *a;
    tr->family = family;
    tr->comm = comm;
    tr->out_dir = a->output_log_dir[0] != '\0' ? a->output_log_dir : NULL;
    tr->vocab_size = vocab_size;
    tr->resume_step = resume_step;
    int B = a->B, T = a->T, rank = comm.rank, nproc = comm.nproc;
    const char* why;
    tr->grad_accum_steps = trainer_grad_accum_steps(a->total_batch_size, B, T, nproc, &why);
    if (tr->grad_accum_steps < 0) {
        llmc_die("flag -d: %d: %s (B*T*processes = %d*%d*%d)", a->total_batch_size, why, B, T, nproc);
    }
    tr->total_batch = (long long)tr->grad_accum_steps * B * T * nproc;
    dataloader_init(&tr->train_loader, a->train_data_pattern, B, T, rank, nproc, a->shuffle, vocab_size,
                    family->shard_format);
    tr->have_val = a->val_loss_every > 0 && a->val_data_pattern[0] != '\0';
    if (tr->have_val) {
        dataloader_init(&tr->val_loader, a->val_data_pattern, B, T, rank, nproc, 0, vocab_size, family->shard_format);
    }
    if (tr->train_loader.masked) {
        size_t step_tokens = (size_t)tr->grad_accum_steps * (size_t)B * (size_t)T;
        tr->step_inputs = (int*)mallocCheck(step_tokens * sizeof(int));
        tr->step_targets = (int*)mallocCheck(step_tokens * sizeof(int));
    }
    if (a->hellaswag_eval) { evalloader_init(&tr->eval_loader, a->hellaswag_path, B, T, rank, nproc); }
    tr->max_steps = trainer_max_steps(a->max_steps, tr->train_loader.num_tokens, tr->total_batch, &why);
    if (tr->max_steps < 0) { llmc_die("%s: %s", a->train_data_pattern, why); }
    if (resume_step > tr->max_steps) {
        llmc_die("flag -x: %d steps, but the checkpoint in %s is already at step %d", tr->max_steps, tr->out_dir, resume_step);
    }
    lr_scheduler_init(&tr->lr_scheduler, a->lr_scheduler_type, a->learning_rate, a->warmup_iterations, tr->max_steps,
                      a->final_learning_rate_frac);
    tr->use_muon = optimizer_parse(a->optimizer) == OPTIMIZER_MUON;
    if (tr->use_muon) {
        lr_scheduler_init(&tr->muon_lr_scheduler, a->lr_scheduler_type, a->muon_lr, a->warmup_iterations, tr->max_steps,
                          a->final_learning_rate_frac);
    }
    if (rank == 0) { tokenizer_init(&tr->tokenizer, family->tokenizer_path); } // only rank 0 samples; a bad file fails now
    // A tokenizer of more ids than the model has is another model's: its start token may lie outside the model's
    // vocabulary (GPT-2's <|endoftext|> 50256 for a V=512 model) and its pieces are not the model's tokens, so the
    // samples are printed as ids, as without a tokenizer (trainer_print_plan says why)
    if (tr->tokenizer.init_ok && tr->tokenizer.vocab_size > (uint32_t)vocab_size) {
        tr->foreign_tokenizer_vocab = tr->tokenizer.vocab_size;
        tokenizer_free(&tr->tokenizer);
    }
    sampler_init(&tr->sampler, vocab_size, 1.0f, 0, 1.0f, TRAINER_SAMPLER_SEED);
    trainer_detectors_init(&tr->detectors);
    if (tr->out_dir != NULL && rank == 0) { mkdir_p_check(tr->out_dir); }
    trainer_barrier(tr);
    logger_init(&tr->logger, tr->out_dir, rank, resume_step >= 0);
}

static inline void trainer_free(Trainer* tr) {
    dataloader_free(&tr->train_loader);
    if (tr->have_val) { dataloader_free(&tr->val_loader); }
    if (tr->args.hellaswag_eval) { evalloader_free(&tr->eval_loader); }
    tokenizer_free(&tr->tokenizer);
    sampler_free(&tr->sampler);
    free(tr->step_inputs);
    free(tr->step_targets);
    tr->step_inputs = tr->step_targets = NULL;
}

// ----------------------------------------------------------------------------
// evaluations and sampling

static inline float trainer_mean_(const float* x, int n) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) { sum += x[i]; }
    return (float)(sum / n);
}

// chat shards: the mean loss over the supervised positions of -m batches of the validation data on every process;
// NAN when they hold none
static inline float trainer_masked_val_loss(Trainer* tr, const TrainerOps* ops) {
    DataLoader* l = &tr->val_loader;
    dataloader_reset(l);
    size_t BT = l->B * l->T;
    double sum = 0.0;
    long long count = 0;
    for (int i = 0; i < tr->args.val_max_steps; i++) {
        dataloader_next_batch(l);
        const float* losses = ops->forward_losses(ops->ctx, l->inputs, l->targets);
        for (size_t k = 0; k < BT; k++) {
            if (l->targets[k] != -1) { sum += losses[k]; }
        }
        count += trainer_count_supervised(l->targets, BT);
    }
    float total = (float)sum;
    if (tr->comm.nproc > 1) { tr->comm.sum_floats(tr->comm.ctx, &total, 1); }
    long long n = trainer_sum_count_over_processes(tr, count);
    return n > 0 ? (float)((double)total / (double)n) : NAN;
}

// mean loss over -m batches of the validation data, averaged over processes (chat shards: over their supervised
// positions)
static inline float trainer_val_loss(Trainer* tr, const TrainerOps* ops) {
    if (tr->val_loader.masked) { return trainer_masked_val_loss(tr, ops); }
    DataLoader* l = &tr->val_loader;
    dataloader_reset(l);
    double sum = 0.0;
    int steps = tr->args.val_max_steps;
    for (int i = 0; i < steps; i++) {
        dataloader_next_batch(l);
        sum += trainer_mean_(ops->forward_losses(ops->ctx, l->inputs, l->targets), (int)(l->B * l->T));
    }
    return trainer_mean_over_processes(tr, (float)(sum / steps));
}

// HellaSwag: the completion with the lowest mean loss should be the labelled one
static inline float trainer_hellaswag(Trainer* tr, const TrainerOps* ops) {
    EvalLoader* e = &tr->eval_loader;
    evalloader_reset(e);
    float counts[2] = {0.0f, 0.0f}; // correct, total: exact in float below 2^24 examples
    for (int i = 0; i < e->num_batches; i++) {
        evalloader_next_batch(e);
        counts[0] += (float)evalloader_stat_losses(e, ops->forward_losses(ops->ctx, e->inputs, e->targets));
        counts[1] += (float)e->num_examples_in_batch;
    }
    if (tr->comm.nproc > 1) { tr->comm.sum_floats(tr->comm.ctx, counts, 2); }
    return counts[1] > 0.0f ? counts[0] / counts[1] : 0.0f;
}

// rank 0: -g tokens sampled after the tokenizer's start token (<|endoftext|>, Llama 3's BOS), printed as they come (ids without a tokenizer);
// the context is the last T tokens
static inline void trainer_sample(Trainer* tr, const TrainerOps* ops) {
    int n = tr->args.gen_tokens, T = tr->args.T;
    int* tokens = (int*)mallocCheck(((size_t)n + 1) * sizeof(int));
    tokens[0] = tr->tokenizer.init_ok ? tokenizer_start_token(&tr->tokenizer) : tr->vocab_size - 1;
    printf("generating:\n---\n");
    for (int t = 1; t <= n; t++) {
        int len = t < T ? t : T;
        int next = sampler_sample(&tr->sampler, ops->next_token_logits(ops->ctx, tokens + t - len, len));
        tokens[t] = next;
        const char* piece = tr->tokenizer.init_ok ? tokenizer_decode(&tr->tokenizer, (uint32_t)next) : NULL;
        if (piece != NULL) { safe_printf(piece); }
        else { printf("%d ", next); }
        fflush(stdout);
    }
    printf("\n---\n");
    free(tokens);
}

// ----------------------------------------------------------------------------
// checkpoints

static inline TrainState trainer_state_header_(const Trainer* tr, int step) {
    TrainState s;
    memset(&s, 0, sizeof(s));
    s.num_processes = tr->comm.nproc;
    s.process_rank = tr->comm.rank;
    s.zero_stage = tr->args.zero_stage;
    s.should_shuffle = tr->train_loader.should_shuffle;
    s.step = step;
    s.rng_state = tr->sampler.rng_state;
    s.shard_idx = tr->train_loader.current_shard_idx;
    s.sample_idx = tr->train_loader.current_sample_idx;
    return s;
}

// model (rank 0) and state (every rank), a barrier, then the DONE marker; then -nk / -nm pruning
static inline void trainer_save_checkpoint(Trainer* tr, const TrainerOps* ops, int step) {
    char path[4200];
    const char* dir = tr->out_dir;
    int rank = tr->comm.rank;
    if (rank == 0) {
        trainer_checkpoint_path(path, sizeof(path), dir, "model", step, -1);
        ops->save_model(ops->ctx, path);
    }
    TrainState s = trainer_state_header_(tr, step);
    trainer_checkpoint_path(path, sizeof(path), dir, "state", step, rank);
    ops->save_state(ops->ctx, path, &s, &tr->detectors);
    trainer_barrier(tr); // every file of the step is in place
    if (rank == 0) {
        trainer_checkpoint_path(path, sizeof(path), dir, "DONE", step, -1);
        AtomicFile af;
        atomic_file_open(&af, path);
        atomic_file_commit(&af);
    }
    trainer_barrier(tr);
    int steps[4096], prune[4096];
    int n = trainer_list_checkpoints(dir, steps, 4096);
    int np = trainer_checkpoints_to_prune(steps, n, tr->args.checkpoints_keep, tr->args.checkpoints_major_every, prune);
    trainer_barrier(tr); // everyone listed before anyone deletes
    for (int i = 0; i < np; i++) {
        if (rank == 0) { // the marker first: a half-removed checkpoint is never listed
            trainer_checkpoint_path(path, sizeof(path), dir, "DONE", prune[i], -1);
            unlink(path);
            trainer_checkpoint_path(path, sizeof(path), dir, "model", prune[i], -1);
            unlink(path);
        }
        trainer_checkpoint_path(path, sizeof(path), dir, "state", prune[i], rank);
        unlink(path);
    }
    trainer_printf0(tr, "wrote checkpoint for step %d to %s\n", step, dir);
}

// everything but the parameters (the trainer built its model from model_<step>.bin)
static inline void trainer_load_checkpoint(Trainer* tr, const TrainerOps* ops, int step) {
    char path[4200];
    trainer_checkpoint_path(path, sizeof(path), tr->out_dir, "state", step, tr->comm.rank);
    TrainState expect = trainer_state_header_(tr, step), got;
    ops->load_state(ops->ctx, path, &expect, &got, &tr->detectors);
    if (got.step != step) { llmc_die("%s: holds step %d, expected %d", path, got.step, step); }
    tr->sampler.rng_state = got.rng_state;
    dataloader_resume(&tr->train_loader, (size_t)got.shard_idx, (size_t)got.sample_idx);
}

// ----------------------------------------------------------------------------
// the loop

// prints what the run will do (after the trainer printed its model line)
static inline void trainer_print_plan(const Trainer* tr) {
    const TrainArgs* a = &tr->args;
    trainer_printf0(tr, "train: %zu tokens; batch %lld tokens = %d processes x B=%d x T=%d x %d accumulation steps; %d steps\n",
                    tr->train_loader.num_tokens, tr->total_batch, tr->comm.nproc, a->B, a->T, tr->grad_accum_steps,
                    tr->max_steps);
    if (tr->train_loader.masked) {
        trainer_printf0(tr, "train: chat shards: a step's loss is the mean over its supervised (mask 1) positions\n");
    }
    if (tr->have_val) {
        trainer_printf0(tr, "val: %zu tokens, %d batches every %d steps\n", tr->val_loader.num_tokens, a->val_max_steps,
                        a->val_loss_every);
    }
    if (tr->resume_step >= 0) {
        char path[4200];
        trainer_checkpoint_path(path, sizeof(path), tr->out_dir, "model", tr->resume_step, -1);
        trainer_printf0(tr, "resumed from %s at step %d\n", path, tr->resume_step);
    }
    if (tr->comm.rank == 0 && !tr->tokenizer.init_ok && a->sample_every > 0) {
        if (tr->foreign_tokenizer_vocab > 0) {
            printf("samples will be printed as token ids (%s holds %u tokens, more than the model's vocab size %d: "
                   "not this model's tokenizer)\n", tr->family->tokenizer_path, tr->foreign_tokenizer_vocab, tr->vocab_size);
        } else {
            printf("samples will be printed as token ids (no %s)\n", tr->family->tokenizer_path);
        }
    }
}

// A signal on any process stops every process after this same step: the signal to stop at the next top of a step
// (which saves and stops), or 0
static inline int trainer_signalled_(const Trainer* tr) {
    float signalled = trainer_stop_signal_ != 0 ? 1.0f : 0.0f;
    if (tr->comm.nproc > 1) { tr->comm.sum_floats(tr->comm.ctx, &signalled, 1); }
    if (signalled == 0.0f) { return 0; }
    return trainer_stop_signal_ != 0 ? (int)trainer_stop_signal_ : SIGTERM;
}

// Chat shards: the step's micro-batches loaded first and their supervised positions counted over every process
// (N_step), then their gradients accumulated with loss_scale = processes x B x T / N_step (grad_norm averages the
// processes' gradients, and forward_backward's loss is a mean over B x T positions). Into *loss: the mean
// cross-entropy over the step's supervised positions. Returns 0, with nothing run, when there are none.
static inline int trainer_masked_forward_backward(Trainer* tr, const TrainerOps* ops, float* loss) {
    const TrainArgs* a = &tr->args;
    DataLoader* l = &tr->train_loader;
    size_t BT = (size_t)a->B * (size_t)a->T;
    long long count = 0;
    for (int micro = 0; micro < tr->grad_accum_steps; micro++) {
        if (a->overfit_single_batch) { dataloader_reset(l); }
        dataloader_next_batch(l);
        memcpy(tr->step_inputs + (size_t)micro * BT, l->inputs, BT * sizeof(int));
        memcpy(tr->step_targets + (size_t)micro * BT, l->targets, BT * sizeof(int));
        count += trainer_count_supervised(l->targets, BT);
    }
    long long n_step = trainer_sum_count_over_processes(tr, count);
    if (n_step == 0) { return 0; }
    float loss_scale = (float)((double)tr->comm.nproc * (double)BT / (double)n_step);
    ops->zero_grad(ops->ctx);
    double sum = 0.0; // this process's supervised cross-entropies
    for (int micro = 0; micro < tr->grad_accum_steps; micro++) {
        float mean = ops->forward_backward(ops->ctx, tr->step_inputs + (size_t)micro * BT,
                                           tr->step_targets + (size_t)micro * BT, loss_scale,
                                           micro == tr->grad_accum_steps - 1);
        sum += (double)mean * (double)BT;
    }
    float total = (float)sum;
    if (tr->comm.nproc > 1) { tr->comm.sum_floats(tr->comm.ctx, &total, 1); }
    *loss = (float)((double)total / (double)n_step);
    return 1;
}

// Trains from the resumed step (or 0) to max_steps. Returns the exit status: 0, or 128 + the
// signal that stopped it.
static inline int trainer_run(Trainer* tr, const TrainerOps* ops) {
    const TrainArgs* a = &tr->args;
    int start = tr->resume_step >= 0 ? tr->resume_step : 0;
    if (tr->resume_step >= 0) { trainer_load_checkpoint(tr, ops, tr->resume_step); }
    trainer_print_plan(tr);
    double time_sum = 0.0;
    int time_count = 0;
    int stopping = 0, exit_status = 0;
    trainer_install_stop_handlers();
    for (int step = start;; step++) {
        TrainerDue due = trainer_due(a, step, tr->max_steps, tr->resume_step, tr->have_val, tr->out_dir != NULL, stopping);
        if (due.val) {
            float val_loss = trainer_val_loss(tr, ops);
            trainer_printf0(tr, "step %d: val loss %.6f\n", step, val_loss);
            logger_log_val(&tr->logger, step, val_loss);
        }
        if (due.eval) {
            float acc = trainer_hellaswag(tr, ops);
            trainer_printf0(tr, "step %d: HellaSwag accuracy %.4f\n", step, acc);
            logger_log_eval(&tr->logger, step, acc);
        }
        if (due.sample && tr->comm.rank == 0) { trainer_sample(tr, ops); }
        if (due.checkpoint) { trainer_save_checkpoint(tr, ops, step); }
        if (due.stop) {
            if (stopping) {
                exit_status = 128 + stopping;
                trainer_printf0(tr, "%s: stopped at step %d%s\n", strsignal(stopping), step,
                                tr->out_dir != NULL ? " (resume with -y 1)" : " (no -o: no checkpoint written)");
            }
            break;
        }

        // one optimizer step: accumulate the gradients of grad_accum_steps micro-batches
        double t0 = trainer_wall_seconds();
        float loss;
        if (tr->train_loader.masked) {
            if (!trainer_masked_forward_backward(tr, ops, &loss)) {
                trainer_printf0(tr, "step %d/%d | no supervised position in this step's batches: nothing trained\n", step + 1,
                                tr->max_steps);
                stopping = trainer_signalled_(tr);
                continue;
            }
        } else {
            ops->zero_grad(ops->ctx);
            double loss_sum = 0.0;
            for (int micro = 0; micro < tr->grad_accum_steps; micro++) {
                if (a->overfit_single_batch) { dataloader_reset(&tr->train_loader); }
                dataloader_next_batch(&tr->train_loader);
                loss_sum += ops->forward_backward(ops->ctx, tr->train_loader.inputs, tr->train_loader.targets,
                                                  1.0f / (float)tr->grad_accum_steps, micro == tr->grad_accum_steps - 1);
            }
            loss = trainer_mean_over_processes(tr, (float)(loss_sum / tr->grad_accum_steps));
        }
        float grad_norm = ops->grad_norm(ops->ctx);
        UpdateDecision u = trainer_judge_update(&tr->detectors, loss, grad_norm, a->skip_update_lossz, a->skip_update_gradz);
        float lr = get_learning_rate(&tr->lr_scheduler, step);
        float muon_lr = tr->use_muon ? get_learning_rate(&tr->muon_lr_scheduler, step) : 0.0f;
        if (!u.skip) { ops->update(ops->ctx, lr, muon_lr, a->weight_decay, grad_clip_scale(grad_norm, TRAINER_GRAD_CLIP), step + 1); }
        double dt = trainer_wall_seconds() - t0;
        if (step > start || tr->max_steps - start == 1) { time_sum += dt; time_count++; } // the first step warms up
        char mfu[32] = "", line[512];
        if (tr->peak_flops > 0.0) { mfu_format(mfu, sizeof(mfu), tr->flops_per_step, dt, tr->peak_flops); }
        double eta = (time_count > 0 ? time_sum / time_count : dt) * (tr->max_steps - step - 1);
        trainer_progress_line(line, sizeof(line), step, tr->max_steps, loss, lr, grad_norm, dt, tr->total_batch, eta, mfu, &u);
        trainer_printf0(tr, "%s\n", line);
        logger_log_train(&tr->logger, step, loss, lr, grad_norm);
        stopping = trainer_signalled_(tr);
    }
    trainer_restore_signal_handlers();
    if (time_count > 0) { trainer_printf0(tr, "average step time %.1f ms\n", 1000.0 * time_sum / time_count); }
    return exit_status;
}

#endif // LLMC_TRAINER_H
