/*
pyllmc/_capi.h: what the Python bindings (pyllmc/_build.py, cffi) compile against.

It includes train_gpt2.c with LLMC_NO_MAIN defined (so its main() is left out), plus the sampler and
data loader headers, and adds thin pyllmc_* wrappers for what the trainer's main() does inline:
building a model, (re)allocating activations, one AdamW step, sampling, saving, data loading.
No layer code lives here; the layers are train_gpt2.c's. pyllmc_train_main is ./train_gpt2's main()
itself (llmc/cpu/cpu_trainer.h's cpu_trainer_main_in_group) for python -m pyllmc.train, its
processes talking through the ProcessComm that pyllmc/train.py builds from mpi4py.

Errors. llmc's loaders report bad input with llmc_die(): one line on stderr, then exit(1). That
would kill the Python interpreter, so while a wrapper marked "guarded" runs, llmc/utils.h's
fatal-error hook longjmps back into the wrapper and stderr goes to a memory buffer. A guarded
wrapper returns 0 on success and 1 on error; pyllmc_last_error() then holds the message (without
"error: "), which the Python side raises as pyllmc.LlmcError. Anything printed to stderr by a
successful call is passed through. The Python side validates inputs first, so the guard is a safety
net; it is not thread-safe (one guarded call at a time per process).
*/
#ifndef PYLLMC_CAPI_H
#define PYLLMC_CAPI_H

#define LLMC_NO_MAIN
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ----------------------------------------------------------------------------
// llmc_die -> Python exception

typedef struct {
    jmp_buf env;
    int active;             // 1 while a guarded wrapper runs
    FILE* saved_stderr;     // the real stderr while it is captured
    char* captured;         // open_memstream buffer
    size_t captured_len;
} PyllmcGuard;

static PyllmcGuard pyllmc_guard_;
static char pyllmc_error_[8192];

// llmc_die's hook while a guarded wrapper runs: back into the wrapper, which returns 1
static void pyllmc_fatal_(void) {
    if (pyllmc_guard_.active) {
        pyllmc_guard_.active = 0;
        longjmp(pyllmc_guard_.env, 1);
    }
}

#include "../train_gpt2.c"
#include "../llmc/sampler.h"
#include "../llmc/dataloader.h"
#include "../llmc/tokenizer.h"
#include "../llmc/schedulers.h"
#include "../llmc/trainer.h"

static void pyllmc_capture_begin_(void) {
    llmc_set_fatal_hook(pyllmc_fatal_);
    pyllmc_error_[0] = '\0';
    pyllmc_guard_.saved_stderr = stderr;
    pyllmc_guard_.captured = NULL;
    pyllmc_guard_.captured_len = 0;
    FILE* mem = open_memstream(&pyllmc_guard_.captured, &pyllmc_guard_.captured_len);
    if (mem != NULL) { stderr = mem; }
}

// restores stderr; on failure keeps the last captured line as the error message, else echoes it
static void pyllmc_capture_end_(int failed) {
    if (stderr != pyllmc_guard_.saved_stderr) {
        fclose(stderr);
        stderr = pyllmc_guard_.saved_stderr;
    }
    char* text = pyllmc_guard_.captured;
    size_t len = text != NULL ? pyllmc_guard_.captured_len : 0;
    if (failed) {
        // the message is the last non-empty line; drop the "error: " prefix and the newline
        while (len > 0 && (text[len - 1] == '\n' || text[len - 1] == '\r')) { len--; }
        size_t start = len;
        while (start > 0 && text[start - 1] != '\n') { start--; }
        const char* line = len > 0 ? text + start : "llmc stopped without a message";
        size_t n = len > 0 ? len - start : strlen(line);
        if (n >= 7 && strncmp(line, "error: ", 7) == 0) { line += 7; n -= 7; }
        if (n >= sizeof(pyllmc_error_)) { n = sizeof(pyllmc_error_) - 1; }
        memcpy(pyllmc_error_, line, n);
        pyllmc_error_[n] = '\0';
    } else if (len > 0) {
        fwrite(text, 1, len, stderr);
        fflush(stderr);
    }
    free(text);
    pyllmc_guard_.captured = NULL;
}

// Runs the statements with llmc_die turned into a return of 1 from the enclosing function (0 on success).
#define PYLLMC_GUARDED(...)                                    \
    do {                                                       \
        pyllmc_capture_begin_();                               \
        if (setjmp(pyllmc_guard_.env) == 0) {                  \
            pyllmc_guard_.active = 1;                          \
            __VA_ARGS__;                                       \
            pyllmc_guard_.active = 0;                          \
            pyllmc_capture_end_(0);                            \
            return 0;                                          \
        }                                                      \
        pyllmc_capture_end_(1);                                \
        return 1;                                              \
    } while (0)

static const char* pyllmc_last_error(void) { return pyllmc_error_; }

// ----------------------------------------------------------------------------
// one AdamW step on a single array (llmc/adamw.h's per-element rule, PyTorch semantics)

static void pyllmc_adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                                float learning_rate, float beta1, float beta2, float eps,
                                float weight_decay, float grad_scale, int t) {
    // params, grads, m, v are (n); t is the 1-based step number
    AdamWScalars s = adamw_step_scalars(learning_rate, beta1, beta2, eps, t);
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        params[i] = adamw_update_one(params[i], grads[i] * grad_scale, &m[i], &v[i], weight_decay, s);
    }
}

// ----------------------------------------------------------------------------
// the model

// frees what a failed build left behind and zeroes the struct
static void pyllmc_model_reset_(GPT2* model) {
    free_aligned(model->cpu.params_memory);
    free_aligned(model->cpu.grads_memory);
    memset(model, 0, sizeof(*model));
}

// Python reads the gradients (model.grads): zero_grad zeroes them at once instead of marking them stale for the next
// backward to overwrite (llmc/cpu/cpu_model.h's lazy_zero_grad, which ./train_gpt2 uses)
static void pyllmc_model_eager_zero_grad_(GPT2* model) { model->cpu.lazy_zero_grad = 0; }

// guarded
static int pyllmc_model_init_checkpoint(GPT2* model, const char* path) {
    memset(model, 0, sizeof(*model));
    PYLLMC_GUARDED({
        gpt2_build_from_checkpoint(model, path);
        pyllmc_model_eager_zero_grad_(model);
    });
}

// guarded
static int pyllmc_model_init_scratch(GPT2* model, const GPT2Config* cfg, unsigned int seed) {
    memset(model, 0, sizeof(*model));
    PYLLMC_GUARDED({
        gpt2_build_from_scratch(model, cfg, seed);
        pyllmc_model_eager_zero_grad_(model);
    });
}

static void pyllmc_model_discard(GPT2* model) { pyllmc_model_reset_(model); }

// returns 1 and fills cfg for a descriptor (dN, gpt2:dN, gpt3:cN), 0 if desc is not one,
// -1 if it is a bad one (why then says what is wrong)
static int pyllmc_config_from_descriptor(const char* desc, GPT2Config* cfg, char* why, size_t why_size) {
    const char* reason = "";
    int kind = gpt2_config_from_descriptor(desc, cfg, &reason);
    snprintf(why, why_size, "%s", reason);
    return kind;
}

// Activations (and their gradients) for batches of up to B x T tokens: grows the allocation when
// a forward needs more, never shrinks it (the optimizer state is separate and stays). guarded
static int pyllmc_model_ensure_activations(GPT2* model, int B, int T) {
    PYLLMC_GUARDED({
        int fits = model->cpu.acts_memory != NULL && (size_t)B * T <= (size_t)model->cpu.batch_size * model->cpu.seq_len &&
                   T <= model->cpu.seq_len;
        if (!fits) {
            int newT = T > model->cpu.seq_len ? T : model->cpu.seq_len;
            size_t tokens = (size_t)B * T;
            size_t old_tokens = (size_t)model->cpu.batch_size * model->cpu.seq_len;
            if (old_tokens > tokens) { tokens = old_tokens; }
            int newB = (int)((tokens + (size_t)newT - 1) / (size_t)newT);
            cpu_model_free_activations(&model->cpu);
            gpt2_allocate_activations(model, newB, newT);
            model->cpu.mean_loss = -1.0f;
        }
    });
}

// guarded; without targets the logits of every position (model->cpu.logits), with them when model->cpu.keep_logits
static int pyllmc_model_forward(GPT2* model, const int* inputs, const int* targets, int B, int T) {
    model->cpu.last_logits_only = 0;
    PYLLMC_GUARDED(gpt2_forward(model, inputs, targets, B, T));
}

// guarded
static int pyllmc_model_backward(GPT2* model, float loss_scale) {
    PYLLMC_GUARDED(gpt2_backward(model, loss_scale));
}

static void pyllmc_model_zero_grad(GPT2* model) { cpu_model_zero_grad(&model->cpu); }

static float pyllmc_model_grad_norm(const GPT2* model) { return cpu_model_grad_norm(&model->cpu); }

// AdamW moments for all parameters, allocated on the first step. guarded
static int pyllmc_model_ensure_optimizer(GPT2* model) {
    PYLLMC_GUARDED({
        if (model->cpu.m_memory == NULL) { cpu_model_allocate_optimizer(&model->cpu, 0, model->cpu.num_parameters); }
    });
}

// One optimizer step exactly as ./train_gpt2 does it: global gradient norm, clip factor,
// AdamW on every parameter (weight decay on the 2-D weights only). Returns the norm.
static float pyllmc_model_step(GPT2* model, float learning_rate, float beta1, float beta2, float eps,
                               float weight_decay, float grad_clip, int t) {
    float norm = cpu_model_grad_norm(&model->cpu);
    cpu_model_update(&model->cpu, learning_rate, beta1, beta2, eps, weight_decay, grad_clip_scale(norm, grad_clip), t);
    return norm;
}

// Samples tokens[n_prompt .. n_total) one at a time with llmc/sampler.h, each from the logits
// of a forward pass over the last `window` tokens (B = 1; the classifier on the last position only). guarded
static int pyllmc_model_generate(GPT2* model, int* tokens, int n_prompt, int n_total, int window,
                                 float temperature, int top_k, float top_p, uint64_t seed) {
    PYLLMC_GUARDED({
        Sampler sampler;
        sampler_init(&sampler, model->config.vocab_size, temperature, top_k, top_p, seed);
        model->cpu.last_logits_only = 1;
        for (int t = n_prompt; t < n_total; t++) {
            int len = t < window ? t : window;
            gpt2_forward(model, tokens + t - len, NULL, 1, len);
            tokens[t] = sampler_sample(&sampler, model->cpu.logits);
        }
        model->cpu.last_logits_only = 0;
        sampler_free(&sampler);
    });
}

// writes an fp32 checkpoint atomically. guarded
static int pyllmc_model_save(GPT2* model, const char* path) {
    PYLLMC_GUARDED(gpt2_model_write(path, &model->config, model->cpu.params_memory, model->cpu.num_parameters));
}

static void pyllmc_model_free(GPT2* model) {
    gpt2_free(model);
    memset(model, 0, sizeof(*model));
}

// the parameters were written from Python: -p bf16's copy of them is rounded again before the next forward
static void pyllmc_model_params_changed(GPT2* model) { cpu_model_params_changed(&model->cpu); }

// -p fp32 | bf16 into llmc/cpu/matmul.h's matmul_precision (the GEMMs of every model in this process); -1 for a
// bad value
static int pyllmc_set_precision(const char* value) { return matmul_precision_parse(value, &matmul_precision); }

static const char* pyllmc_precision(void) { return matmul_precision == MATMUL_BF16 ? "bf16" : "fp32"; }

// ----------------------------------------------------------------------------
// python -m pyllmc.train: the trainers' command line (llmc/args.h), then ./train_gpt2's main()

#define PYLLMC_TRAIN_ABOUT                                                                                   \
    "Trains GPT-2 with ./train_gpt2's C trainer from Python; data-parallel under mpirun (mpi4py). The flags " \
    "are ./train_gpt2's; the GPU and OpenCL trainers' flags are refused."

// fills *out from argv with the trainers' own table, as ./train_gpt2 reads it (pyllmc.train runs its main()): --help
// prints the CPU trainers' flags and exits 0, a flag of the GPU or OpenCL trainers is refused in one line. guarded
static int pyllmc_parse_train_args(TrainArgs* out, int argc, char** argv) {
    PYLLMC_GUARDED(train_args_parse(TRAIN_ARG_TABLE, TRAIN_CPU, out, argc, argv, PYLLMC_TRAIN_ABOUT));
}

// ./train_gpt2's main() on argv (argv[0] names the program in the error lines), as process rank of nproc that talk
// through comm (NULL: the only process). Returns the exit status: 0, or 128 + the signal that stopped the run. When
// llmc_die stopped it, its one error line is on stderr already, *failed is 1 and the status 1: the caller ends the
// process (what the run allocated is not freed).
static int pyllmc_train_main(int argc, char** argv, const ProcessComm* comm, int rank, int nproc, int* failed) {
    GPT2 model;
    memset(&model, 0, sizeof(model));
    *failed = 0;
    llmc_set_fatal_hook(pyllmc_fatal_);
    if (setjmp(pyllmc_guard_.env) != 0) {
        *failed = 1;
        return 1;
    }
    pyllmc_guard_.active = 1;
    int status = cpu_trainer_main_in_group(process_group_with(comm, rank, nproc), argc, argv, PYLLMC_TRAIN_ABOUT,
                                           &GPT2_FAMILY, &model, &gpt2_calls, &model.cpu);
    pyllmc_guard_.active = 0;
    return status;
}

// ----------------------------------------------------------------------------
// data loader (llmc/dataloader.h), heap-allocated for Python

// guarded; *out is NULL on error. GPT-2 token shards only, like ./train_gpt2
static int pyllmc_dataloader_new(DataLoader** out, const char* pattern, int B, int T, int rank, int nproc,
                                 int shuffle, int vocab_size) {
    *out = NULL;
    PYLLMC_GUARDED({
        DataLoader* l = (DataLoader*)mallocCheck(sizeof(DataLoader));
        *out = l;
        dataloader_init(l, pattern, (size_t)B, (size_t)T, rank, nproc, shuffle, vocab_size, SHARD_FORMAT_GPT2);
    });
}

// guarded
static int pyllmc_dataloader_next_batch(DataLoader* l) { PYLLMC_GUARDED(dataloader_next_batch(l)); }

// guarded
static int pyllmc_dataloader_reset(DataLoader* l) { PYLLMC_GUARDED(dataloader_reset(l)); }

// after a failed pyllmc_dataloader_new: frees the struct (its partial contents may leak)
static void pyllmc_dataloader_discard(DataLoader* l) { free(l); }

static void pyllmc_dataloader_free(DataLoader* l) {
    if (l == NULL) { return; }
    dataloader_free(l);
    free(l);
}

// ----------------------------------------------------------------------------
// tokenizer (llmc/tokenizer.h) and learning-rate schedules (llmc/schedulers.h), heap-allocated

// guarded; a missing file gives init_ok = 0 (decoding unavailable), a corrupt one an error
static int pyllmc_tokenizer_new(Tokenizer** out, const char* path) {
    *out = NULL;
    PYLLMC_GUARDED({
        Tokenizer* t = (Tokenizer*)callocCheck(1, sizeof(Tokenizer));
        *out = t;
        tokenizer_init(t, path);
    });
}

static void pyllmc_tokenizer_free(Tokenizer* t) {
    if (t == NULL) { return; }
    if (t->init_ok) { tokenizer_free(t); }
    free(t);
}

// guarded
static int pyllmc_lr_scheduler_new(LearningRateScheduler** out, const char* type, float lr, int warmup,
                                   int total_steps, float final_frac) {
    *out = NULL;
    PYLLMC_GUARDED({
        LearningRateScheduler* s = (LearningRateScheduler*)mallocCheck(sizeof(LearningRateScheduler));
        *out = s;
        lr_scheduler_init(s, type, lr, warmup, total_steps, final_frac);
    });
}

static void pyllmc_lr_scheduler_free(LearningRateScheduler* s) { free(s); }

#endif // PYLLMC_CAPI_H
