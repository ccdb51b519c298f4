/*
llmc/cpu/cpu_trainer.h: what every CPU trainer (train_gpt2.c, train_llama3.c) needs around its model,
written once. Each trainer keeps only its model (layers, forward, backward, parameter table).

    cpu_grad_norm(g, n)       global L2 norm of n gradients: squares summed in double over fixed 64K
                              chunks, 8 interleaved partial sums per chunk, chunks added in order, so
                              the result does not depend on the number of threads
    cpu_adamw_update(...)     one AdamW step (llmc/adamw.h, torch semantics) on the slice
                              [lo, lo + size) of num_tensors tensors laid back to back (sizes[k]
                              floats each); gradients scaled by grad_scale first; weight decay only
                              where is_matrix[k]; m and v hold the slice (index i - lo); t is 1-based
    CpuMuon                   -op muon on a model's flat parameters: Muon (llmc/cpu/muon.h) on the blocks' 2-D
                              weights (the tensors both per_layer[k] and is_matrix[k], one matrix per layer),
                              AdamW on the rest. cpu_muon_plan(mu, cfg, dims, per_layer, is_matrix, n, zero_stage,
                              nproc, rank) lists the optimizer units and, with ZeRO-1, the segments each process
                              owns (llmc/zero.h: Muon matrices whole, balanced by size) and returns this process's
                              state length (m and v hold its segments back to back, m is a matrix's momentum);
                              cpu_muon_update steps the owned segments; cpu_muon_broadcast sends every segment
                              from its owner to the others (ZeRO-1); cpu_muon_free
    cpu_set_threads(pg, ...)  OpenMP threads: OMP_NUM_THREADS when set, else this node's cores
                              divided by the processes on the node; writes why into a buffer
    cpu_parse_precision(value, argv0)
                              -p fp32 | bf16 into matmul_precision (the trainers and their test programs)
    cpu_choose_precision(pg)  -p bf16 only where it pays: keeps matmul_precision at bf16 when every
                              process's CPU runs our bf16 GEMM at least 1.15x its fp32 one
                              (llmc/cpu/matmul.h's matmul_bf16_pays), else fp32; one line says which
                              and why (the two measured rates, or no AVX512-BF16)
    CpuTrainerCore            the model-independent half of a trainer's TrainerOps context: the
                              process group, B, T, ZeRO stage and the flat parameter, gradient and
                              optimizer-state buffers. A trainer's context struct has it as its FIRST
                              member, so cpu_trainer_grad_norm, cpu_trainer_save_state and
                              cpu_trainer_load_state go into its TrainerOps unchanged
    cpu_parse_optimizer(args, argv0, muon)   -op and the Muon flags into a MuonConfig; returns the optimizer
    cpu_trainer_update        TrainerOps.update for either optimizer, from the core: AdamW on this process's
                              slice then the ZeRO-1 all-gather, or cpu_muon_update then cpu_muon_broadcast;
                              the Muon lr follows -k from -ol (cpu_trainer_schedule_muon(core, args, max_steps))
    cpu_trainer_comm(pg)      the TrainerComm over MPI (llmc/mpi_utils.h): barrier, sum of floats
    CpuTrainerRun             a trainer main()'s start-up, whatever the model, around its model's calls:
      cpu_trainer_prepare(run, args, pg)   threads, the flags and data (trainer_prepare), and the model to
                              load: run->model_path, the resumed step's checkpoint (run->resume_step >= 0)
                              or -e; returns run->resume_step
      cpu_trainer_start(run, trainer, V, maxT, maxT_name, num_parameters)   once the model is loaded: -t
                              against its maxT, trainer_init, and this process's ZeRO shard (returned)
      cpu_trainer_print_flags(table, args), cpu_trainer_print_optimizer(core, args),
      cpu_trainer_print_threads(run)   rank 0's lines of what the run does; the trainer prints its model's
                              lines after the flags

The training state (llmc/checkpoint.h's TrainState) holds this process's optimizer slice
(m, v of opt_size floats at opt_offset), the optimizer code and the outlier windows.
*/
#ifndef LLMC_CPU_TRAINER_H
#define LLMC_CPU_TRAINER_H

#include <math.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "../adamw.h"
#include "muon.h"
#include "matmul.h"
#include "../trainer.h"
#include "../mpi_utils.h"
#include "../zero.h"

// ----------------------------------------------------------------------------
// the optimizer's arithmetic on flat buffers

static float cpu_grad_norm(const float* g, size_t n) {
    const size_t chunk = 1 << 16;
    size_t nchunks = (n + chunk - 1) / chunk;
    static void* partial_buf = NULL; // one sum per chunk, kept between calls
    static size_t partial_capacity = 0;
    double* partial = (double*)scratch_reserve(&partial_buf, &partial_capacity, nchunks * sizeof(double));
    #pragma omp parallel for schedule(static)
    for (size_t k = 0; k < nchunks; k++) {
        size_t i = k * chunk, end = i + chunk < n ? i + chunk : n;
        double s8[8] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0}, s = 0.0;
        for (; i + 8 <= end; i += 8) {
            for (int j = 0; j < 8; j++) { s8[j] += (double)g[i + j] * g[i + j]; }
        }
        for (; i < end; i++) { s += (double)g[i] * g[i]; }
        for (int j = 0; j < 8; j++) { s += s8[j]; }
        partial[k] = s;
    }
    double total = 0.0;
    for (size_t k = 0; k < nchunks; k++) { total += partial[k]; }
    return (float)sqrt(total);
}

static void cpu_adamw_update(float* params, const float* grads, float* m, float* v, size_t lo, size_t size,
                             const size_t* sizes, const int* is_matrix, int num_tensors, float learning_rate,
                             float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    AdamWScalars s = adamw_step_scalars(learning_rate, beta1, beta2, eps, t);
    size_t hi = lo + size, start = 0;
    for (int k = 0; k < num_tensors; k++) {
        size_t end_k = start + sizes[k];
        size_t begin = start > lo ? start : lo, end = end_k < hi ? end_k : hi;
        float wd = is_matrix[k] ? weight_decay : 0.0f;
        #pragma omp parallel for schedule(static)
        for (size_t i = begin; i < end; i++) {
            params[i] = adamw_update_one(params[i], grads[i] * grad_scale, &m[i - lo], &v[i - lo], wd, s);
        }
        start = end_k;
    }
}

// ----------------------------------------------------------------------------
// Muon mode: Muon on the blocks' matrices, AdamW on the rest

typedef struct {
    int tensor;       // index into the model's parameter tensors
    int rows, cols;   // a Muon matrix (rows, cols) row-major, as torch's weight (out, in); 0 for AdamW
} CpuOptUnit;

typedef struct {
    MuonConfig config;
    int num_units;
    ZeroUnit* units;          // one per Muon matrix, one per other tensor, in flat order
    CpuOptUnit* unit_info;
    int num_segments;
    ZeroSegment* segments;    // every process's, in flat order
    int rank;                 // this process
    MuonScratch scratch;
} CpuMuon;

static void cpu_muon_init(CpuMuon* mu) {
    memset(mu, 0, sizeof(*mu));
    muon_scratch_init(&mu->scratch);
}

// dims[k] = (slices, rows, cols) of tensor k: the per-layer matrices are slices = L matrices of (rows, cols)
static size_t cpu_muon_plan(CpuMuon* mu, const MuonConfig* cfg, const size_t (*dims)[3], const int* per_layer,
                            const int* is_matrix, int num_tensors, int zero_stage, int nproc, int rank) {
    mu->config = *cfg;
    mu->rank = rank;
    size_t max_units = (size_t)num_tensors;
    for (int k = 0; k < num_tensors; k++) { max_units += dims[k][0]; }
    mu->units = (ZeroUnit*)mallocCheck(max_units * sizeof(ZeroUnit));
    mu->unit_info = (CpuOptUnit*)mallocCheck(max_units * sizeof(CpuOptUnit));
    int n = 0;
    size_t start = 0;
    for (int k = 0; k < num_tensors; k++) {
        size_t slices = dims[k][0], rows = dims[k][1], cols = dims[k][2], size = slices * rows * cols;
        if (per_layer[k] && is_matrix[k]) { // (L, rows, cols): one unit per layer
            for (size_t l = 0; l < slices; l++) {
                ZeroUnit u = {start + l * rows * cols, rows * cols, 1};
                CpuOptUnit info = {k, (int)rows, (int)cols};
                mu->units[n] = u;
                mu->unit_info[n++] = info;
            }
        } else {
            ZeroUnit u = {start, size, 0};
            CpuOptUnit info = {k, 0, 0};
            mu->units[n] = u;
            mu->unit_info[n++] = info;
        }
        start += size;
    }
    mu->num_units = n;
    mu->segments = (ZeroSegment*)mallocCheck(((size_t)n + (size_t)nproc) * sizeof(ZeroSegment));
    size_t* owned = (size_t*)callocCheck((size_t)nproc, sizeof(size_t));
    mu->num_segments = zero_plan(mu->units, n, zero_stage, nproc, mu->segments, owned);
    int sharded = zero_stage == 1 && nproc > 1;
    size_t mine = owned[sharded ? rank : 0];
    free(owned);
    if (!sharded) { // every segment is this process's
        for (int i = 0; i < mu->num_segments; i++) { mu->segments[i].owner = rank; }
    }
    return mine;
}

// the number of Muon matrices of the plan
static int cpu_muon_num_matrices(const CpuMuon* mu) {
    int n = 0;
    for (int i = 0; i < mu->num_units; i++) { n += mu->unit_info[i].rows > 0; }
    return n;
}

// One step on this process's segments: Muon with muon_lr (this step's) on each owned matrix, AdamW
// (weight decay where is_matrix) with learning_rate on the other owned parameters; gradients are first
// scaled by grad_scale; m and v are this process's state; t is the 1-based step number.
static void cpu_muon_update(CpuMuon* mu, float* params, const float* grads, float* m_state, float* v_state,
                            const int* is_matrix, float learning_rate, float muon_lr, float beta1, float beta2,
                            float eps, float weight_decay, float grad_scale, int t) {
    AdamWScalars s = adamw_step_scalars(learning_rate, beta1, beta2, eps, t);
    for (int i = 0; i < mu->num_segments; i++) {
        const ZeroSegment* seg = &mu->segments[i];
        if (seg->owner != mu->rank) { continue; }
        const CpuOptUnit* info = &mu->unit_info[seg->unit];
        float* m = m_state + seg->state;
        float* v = v_state + seg->state;
        if (info->rows > 0) {
            muon_update_matrix(params + seg->start, grads + seg->start, m, info->rows, info->cols, grad_scale, muon_lr,
                               weight_decay, &mu->config, matmul_precision, &mu->scratch);
            continue;
        }
        float wd = is_matrix[info->tensor] ? weight_decay : 0.0f;
        float* p = params + seg->start;
        const float* g = grads + seg->start;
        #pragma omp parallel for schedule(static)
        for (size_t j = 0; j < seg->size; j++) {
            p[j] = adamw_update_one(p[j], g[j] * grad_scale, &m[j], &v[j], wd, s);
        }
    }
}

// ZeRO-1: every segment of the parameters goes from the process that updated it to the others
static void cpu_muon_broadcast(const CpuMuon* mu, float* params, const ProcessGroup* pg) {
#ifdef USE_MPI
    if (pg->num_processes == 1) { return; }
    for (int i = 0; i < mu->num_segments; i++) {
        const ZeroSegment* seg = &mu->segments[i];
        if (seg->size > (size_t)INT_MAX) { llmc_die("ZeRO-1: a segment of %zu parameters is too large for MPI_Bcast", seg->size); }
        MPI_Bcast(params + seg->start, (int)seg->size, MPI_FLOAT, seg->owner, MPI_COMM_WORLD);
    }
#else
    (void)mu; (void)params; (void)pg;
#endif
}

static void cpu_muon_free(CpuMuon* mu) {
    free(mu->units);
    free(mu->unit_info);
    free(mu->segments);
    muon_scratch_free(&mu->scratch);
    cpu_muon_init(mu);
}

// ----------------------------------------------------------------------------
// the program around the model

// OpenMP threads: OMP_NUM_THREADS when the user set it, else each process takes its share of this
// node's cores (two processes with a thread per core each would fight over the cores)
static void cpu_set_threads(const ProcessGroup* pg, char* why, size_t why_size) {
    snprintf(why, why_size, "OMP_NUM_THREADS");
#ifdef _OPENMP
    int local = process_group_local_size(pg);
    const char* omp_env = getenv("OMP_NUM_THREADS");
    if (omp_env == NULL || omp_env[0] == '\0') {
        int cores = (int)sysconf(_SC_NPROCESSORS_ONLN);
        int share = cores / local > 0 ? cores / local : 1;
        omp_set_num_threads(share);
        snprintf(why, why_size, "%d cores / %d processes on this node; OMP_NUM_THREADS sets it", cores, local);
    }
#else
    (void)pg;
#endif
}

// -p fp32 | bf16 into matmul_precision (the trainers and their test programs); a bad value is one line
static void cpu_parse_precision(const char* value, const char* argv0) {
    if (matmul_precision_parse(value, &matmul_precision) != 0) {
        llmc_die("flag -p: bad value \"%s\": use fp32 or bf16 (run %s --help to list the flags)", value, argv0);
    }
}

// -op adamw | muon, and the Muon settings (-ol -om -on -os -oa) into *muon; returns the optimizer code;
// a bad value is one line
static int cpu_parse_optimizer(const TrainArgs* args, const char* argv0, MuonConfig* muon) {
    int optimizer = optimizer_parse(args->optimizer);
    if (optimizer < 0) { llmc_die("flag -op: bad value \"%s\": use adamw or muon (run %s --help to list the flags)", args->optimizer, argv0); }
    MuonConfig cfg = {args->muon_lr, args->muon_momentum, args->muon_nesterov, args->muon_ns_steps, muon_adjust_parse(args->muon_adjust_lr)};
    if (cfg.adjust_lr < 0) {
        llmc_die("flag -oa: bad value \"%s\": use original or match_rms_adamw (run %s --help to list the flags)", args->muon_adjust_lr, argv0);
    }
    *muon = cfg;
    return optimizer;
}

// -p bf16 only where this CPU's bf16 GEMM beats its fp32 one; all processes agree (one slow CPU
// in the job and everyone trains fp32, so the processes keep computing the same numbers). Rank 0
// says which and why in one line, unless LLMC_BF16=force took the question away.
static void cpu_choose_precision(const ProcessGroup* pg) {
    if (matmul_precision != MATMUL_BF16) { return; }
    char why[256] = "";
    float pays = (float)matmul_bf16_pays(why, sizeof(why));
    float mine = pays;
    allreduce_sum_floats(&pays, 1, pg);
    if (pays < (float)pg->num_processes) {
        matmul_precision = MATMUL_FP32;
        if (mine > 0.0f) { snprintf(why, sizeof(why), "another process's CPU gains nothing from bf16"); }
        if (pg->process_rank == 0) { printf("-p bf16: training in fp32 instead: %s (LLMC_BF16=force runs bf16)\n", why); }
    } else if (pg->process_rank == 0 && strcmp(why, "LLMC_BF16=force") != 0) {
        printf("-p bf16: training in bf16: %s\n", why);
    }
}

typedef struct {
    const ProcessGroup* pg;
    int B, T;
    int zero_stage;
    float* params;          // the flat parameters and gradients (num_parameters floats each)
    float* grads;
    size_t num_parameters;
    float* m;               // this process's optimizer state: opt_size floats each, for [opt_offset, +opt_size)
    float* v;
    size_t opt_offset, opt_size;
    int optimizer;          // OPTIMIZER_ADAMW or OPTIMIZER_MUON (the training state records it)
    // what the update needs of the model: its tensor table (sizes, which are 2-D weights) and, for
    // -op muon, its plan (NULL for AdamW) and the -k schedule of the Muon lr (cpu_trainer_schedule_muon)
    const size_t* param_sizes;
    const int* is_matrix;
    int num_tensors;
    CpuMuon* muon;
    LearningRateScheduler muon_lr_scheduler;
} CpuTrainerCore;

// TrainerOps.grad_norm: the gradients averaged over the processes, then their norm
static float cpu_trainer_grad_norm(void* ctx) {
    CpuTrainerCore* c = (CpuTrainerCore*)ctx;
    allreduce_mean_floats(c->grads, c->num_parameters, c->pg);
    return cpu_grad_norm(c->grads, c->num_parameters);
}

// after an AdamW step on this process's shard: with ZeRO-1 every process gets every updated parameter
static void cpu_trainer_gather_params(const CpuTrainerCore* c) {
    if (c->zero_stage == 1) { allgather_param_shards(c->params, c->num_parameters, c->pg); }
}

// the Muon lr follows the -k schedule of -l, from the peak -ol
static void cpu_trainer_schedule_muon(CpuTrainerCore* c, const TrainArgs* args, int max_steps) {
    lr_scheduler_init(&c->muon_lr_scheduler, args->lr_scheduler_type, args->muon_lr, args->warmup_iterations, max_steps,
                      args->final_learning_rate_frac);
}

// TrainerOps.update: one step of the core's optimizer on this process's part (torch semantics), then with
// ZeRO-1 every process gets every updated parameter
static void cpu_trainer_update(void* ctx, float lr, float weight_decay, float grad_scale, int t) {
    CpuTrainerCore* c = (CpuTrainerCore*)ctx;
    if (c->optimizer == OPTIMIZER_MUON) {
        float muon_lr = get_learning_rate(&c->muon_lr_scheduler, t - 1);
        cpu_muon_update(c->muon, c->params, c->grads, c->m, c->v, c->is_matrix, lr, muon_lr, TRAINER_ADAMW_BETA1,
                        TRAINER_ADAMW_BETA2, TRAINER_ADAMW_EPS, weight_decay, grad_scale, t);
        if (c->zero_stage == 1) { cpu_muon_broadcast(c->muon, c->params, c->pg); }
        return;
    }
    cpu_adamw_update(c->params, c->grads, c->m, c->v, c->opt_offset, c->opt_size, c->param_sizes, c->is_matrix,
                     c->num_tensors, lr, TRAINER_ADAMW_BETA1, TRAINER_ADAMW_BETA2, TRAINER_ADAMW_EPS, weight_decay,
                     grad_scale, t);
    cpu_trainer_gather_params(c);
}

static void cpu_trainer_state_fields(const CpuTrainerCore* c, TrainState* s) {
    s->num_parameters = c->num_parameters;
    s->opt_offset = c->opt_offset;
    s->opt_size = c->opt_size;
    s->optimizer = c->optimizer;
    s->extra_bytes = (uint32_t)trainer_state_extra_bytes(0);
}

static void cpu_trainer_save_state(void* ctx, const char* path, TrainState* s, const TrainerDetectors* d) {
    CpuTrainerCore* c = (CpuTrainerCore*)ctx;
    cpu_trainer_state_fields(c, s);
    train_state_write(path, s, c->m, c->v, d);
}

static void cpu_trainer_load_state(void* ctx, const char* path, TrainState* expect, TrainState* got, TrainerDetectors* d) {
    CpuTrainerCore* c = (CpuTrainerCore*)ctx;
    cpu_trainer_state_fields(c, expect);
    train_state_read(path, expect, got, c->m, c->v, d);
}

static void cpu_trainer_barrier(void* ctx) { (void)ctx; process_group_barrier(); }

static void cpu_trainer_sum_floats(void* ctx, float* values, int n) {
    allreduce_sum_floats(values, (size_t)n, (const ProcessGroup*)ctx);
}

static TrainerComm cpu_trainer_comm(ProcessGroup* pg) {
    TrainerComm comm = {pg->process_rank, pg->num_processes, pg, cpu_trainer_barrier, cpu_trainer_sum_floats};
    return comm;
}

// ----------------------------------------------------------------------------
// a trainer's main() around its model

typedef struct {
    ProcessGroup* pg;
    const TrainArgs* args;
    int resume_step;          // the step resumed from (-y 1 and a complete checkpoint in -o), else -1
    char model_path[4200];    // the model to load: that step's checkpoint, else -e
    char threads_why[96];     // where the OpenMP thread count comes from
} CpuTrainerRun;

// data and flags first (a missing file says so before the model is loaded), then the model to load:
// the newest complete checkpoint in -o when resuming, else -e
static int cpu_trainer_prepare(CpuTrainerRun* run, const TrainArgs* args, ProcessGroup* pg) {
    run->pg = pg;
    run->args = args;
    cpu_set_threads(pg, run->threads_why, sizeof(run->threads_why));
    run->resume_step = trainer_prepare(args, pg->process_rank);
    snprintf(run->model_path, sizeof(run->model_path), "%s", args->load_filename);
    if (run->resume_step >= 0) {
        trainer_checkpoint_path(run->model_path, sizeof(run->model_path), args->output_log_dir, "model", run->resume_step, -1);
    }
    return run->resume_step;
}

// once the model is loaded: -t within its longest sequence (max_T, called max_T_name in the error), the
// training loop for its vocab_size, and this process's ZeRO shard of its num_parameters
static ZeroShard cpu_trainer_start(const CpuTrainerRun* run, Trainer* trainer, int vocab_size, int max_T,
                                   const char* max_T_name, size_t num_parameters) {
    const TrainArgs* args = run->args;
    if (args->T > max_T) {
        llmc_die("flag -t: T = %d is larger than the model's %s %d (-e %s)", args->T, max_T_name, max_T, run->model_path);
    }
    trainer_init(trainer, args, cpu_trainer_comm(run->pg), vocab_size, run->resume_step);
    return zero_shard(num_parameters, args->zero_stage, run->pg->num_processes, run->pg->process_rank);
}

// what this run does (rank 0): first the flags and their values, ...
static void cpu_trainer_print_flags(const ArgSpec* table, const TrainArgs* args) {
    printf("+-------------------------------------------------------------------------+\n");
    args_print_values(table, TRAIN_ARG_COUNT, args, stdout);
    printf("+-------------------------------------------------------------------------+\n");
}

// ... then the trainer's model lines, the optimizer's (Muon's settings; with ZeRO-1 what rank 0 owns) ...
static void cpu_trainer_print_optimizer(const CpuTrainerCore* c, const TrainArgs* args) {
    if (c->optimizer == OPTIMIZER_MUON) {
        const MuonConfig* m = &c->muon->config;
        printf("optimizer: Muon (lr %g, momentum %g, nesterov %d, %d Newton-Schulz steps, lr adjustment %s) on the %d block matrices, AdamW (lr %g) on the rest\n",
               m->lr, m->momentum, m->nesterov, m->ns_steps, args->muon_adjust_lr, cpu_muon_num_matrices(c->muon), args->learning_rate);
    }
    if (args->zero_stage == 1) {
        printf("ZeRO-1: rank 0 owns %zu of %zu parameters' optimizer state%s\n", c->opt_size, c->num_parameters,
               c->optimizer == OPTIMIZER_MUON ? " (Muon matrices whole)" : "");
    }
}

// ... and last the threads
static void cpu_trainer_print_threads(const CpuTrainerRun* run) {
#ifdef _OPENMP
    printf("threads: %d OpenMP threads x %d processes (%s)\n", omp_get_max_threads(), run->pg->num_processes, run->threads_why);
#else
    (void)run;
#endif
}

#endif // LLMC_CPU_TRAINER_H
