/*
llmc/cpu/cpu_trainer.h: what every CPU trainer (train_gpt2.c, train_llama3.c) does around its model,
written once. Each trainer keeps only its model (tables, layers, forward, backward) and gives its calls
(llmc/cpu/cpu_model.h's CpuModelCalls), its family's description (llmc/model_family.h) and its --help line to
cpu_trainer_main.

    cpu_set_threads(pg, ...)  OpenMP threads: OMP_NUM_THREADS when set, else this node's cores
                              divided by the processes on the node; writes why into a buffer
    cpu_parse_precision(value, argv0)
                              -p fp32 | bf16 into matmul_precision (the trainers and their test programs)
    cpu_parse_optimizer(args, argv0, muon)   -op and the Muon flags into a MuonConfig; returns the optimizer
    cpu_choose_precision(pg)  -p bf16 only where it pays: keeps matmul_precision at bf16 when every
                              process's CPU runs our bf16 GEMM at least 1.15x its fp32 one
                              (llmc/cpu/matmul.h's matmul_bf16_pays), else fp32; one line says which
                              and why (the two measured rates, or no AVX512-BF16)
    CpuTrainer                the TrainerOps context of a CPU model: the process group, B, T, ZeRO stage,
                              the model with its calls and its CpuModel buffers. cpu_trainer_update steps
                              either optimizer: AdamW on this process's slice then the ZeRO-1 all-gather, or
                              Muon mode (at the Muon lr trainer_run gives it) then cpu_muon_broadcast. The
                              training state (llmc/checkpoint.h's TrainState) holds this process's optimizer
                              slice, the optimizer code and the outlier windows.
    cpu_trainer_comm(pg)      the TrainerComm over MPI (llmc/mpi_utils.h): barrier, sum of floats
    cpu_model_build(cm, family, model, calls, load, from_file)   -e for every family (llmc/model_family.h's rule):
                              the model of a model file, or of a descriptor with the family's init from scratch
    cpu_trainer_main(argc, argv, about, family, model, calls, cpu)   a trainer's main(): flags, threads, data,
                              the model (-e, or the resumed step's checkpoint), -t against the model's
                              maxT, its V grown for chat shards where its family says (llmc/trainer.h's
                              trainer_grow_vocab_for_chat: GPT-2's 50257 -> 50261), trainer_init, the optimizer state (this process's ZeRO shard or Muon
                              plan), the precision, rank 0's lines of what the run does (flags, the model's
                              line: its family's config line, the optimizer's, the threads), the training loop;
                              returns the status
    cpu_trainer_main_in_group(pg, argc, argv, about, family, model, calls, cpu)
                              the same in a process group set up by the caller: pyllmc.train runs ./train_gpt2's
                              main() through it, its processes talking through mpi4py (llmc/mpi_utils.h's ProcessComm)
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
#include "../args.h"
#include "../trainer.h"
#include "../mpi_utils.h"
#include "../zero.h"
#include "matmul.h"
#include "cpu_model.h"

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
// the outcome of -p bf16 once every process has answered matmul_bf16_pays: matmul_precision set, and into line
// (n bytes) what rank 0 prints ("" for nothing: LLMC_BF16=force took the question away). all_pay: every process's
// answer was yes; mine, why: this process's answer and reason.
static void cpu_precision_outcome(int all_pay, int mine, const char* why, char* line, size_t n) {
    line[0] = '\0';
    if (!all_pay) {
        matmul_precision = MATMUL_FP32;
        snprintf(line, n, "-p bf16: training in fp32 instead: %s (LLMC_BF16=force runs bf16)",
                 mine ? "another process's CPU gains nothing from bf16" : why);
    } else if (strcmp(why, "LLMC_BF16=force") != 0) {
        snprintf(line, n, "-p bf16: training in bf16: %s", why);
    }
}

static void cpu_choose_precision(const ProcessGroup* pg) {
    if (matmul_precision != MATMUL_BF16) { return; }
    char why[256] = "", line[320];
    int mine = matmul_bf16_pays(why, sizeof(why));
    float pays = (float)mine;
    allreduce_sum_floats(&pays, 1, pg);
    cpu_precision_outcome(pays >= (float)pg->num_processes, mine, why, line, sizeof(line));
    if (pg->process_rank == 0 && line[0] != '\0') { printf("%s\n", line); }
}

// ----------------------------------------------------------------------------
// the TrainerOps of a CPU model

typedef struct {
    const ProcessGroup* pg;
    int B, T;
    int zero_stage;
    void* model;                 // the family's model struct, and its calls (llmc/cpu/cpu_model.h)
    const CpuModelCalls* calls;
    CpuModel* cpu;               // the model's buffers: parameters, gradients, optimizer state, output
} CpuTrainer;

// each optimizer step begins here (llmc/trainer.h): the GEMM clock of LLMC_GEMM_TIME=1 and the phase account of
// LLMC_PHASE_TIME=1 (llmc/cpu/phase_time.h) are told
static void cpu_trainer_zero_grad(void* ctx) {
    matmul_gemm_clock_step();
    phase_time_step();
    cpu_model_zero_grad(((CpuTrainer*)ctx)->cpu);
}

static float cpu_trainer_forward_backward(void* ctx, const int* inputs, const int* targets, float loss_scale, int last) {
    CpuTrainer* c = (CpuTrainer*)ctx;
    (void)last;
    cpu_model_expect_backward(c->cpu, loss_scale); // the classifier's backward runs in the forward pass
    c->calls->forward(c->model, inputs, targets, c->B, c->T);
    c->calls->backward(c->model, loss_scale);
    return c->cpu->mean_loss;
}

static const float* cpu_trainer_forward_losses(void* ctx, const int* inputs, const int* targets) {
    CpuTrainer* c = (CpuTrainer*)ctx;
    c->calls->forward(c->model, inputs, targets, c->B, c->T);
    return c->cpu->losses;
}

static const float* cpu_trainer_next_token_logits(void* ctx, const int* tokens, int len) {
    CpuTrainer* c = (CpuTrainer*)ctx;
    c->cpu->last_logits_only = 1; // the classifier on the last position only
    c->calls->forward(c->model, tokens, NULL, 1, len);
    c->cpu->last_logits_only = 0;
    return c->cpu->logits;
}

static void cpu_trainer_save_model(void* ctx, const char* path) { cpu_model_write(((CpuTrainer*)ctx)->cpu, path); }

// TrainerOps.grad_norm: the gradients averaged over the processes, then their norm
static float cpu_trainer_grad_norm(void* ctx) {
    CpuModel* cm = ((CpuTrainer*)ctx)->cpu;
    allreduce_mean_floats(cm->grads_memory, cm->num_parameters, ((CpuTrainer*)ctx)->pg);
    return cpu_model_grad_norm(cm);
}

// TrainerOps.update: one step of the model's optimizer on this process's part (torch semantics), then with
// ZeRO-1 every process gets every updated parameter
static void cpu_trainer_update(void* ctx, float lr, float muon_lr, float weight_decay, float grad_scale, int t) {
    CpuTrainer* c = (CpuTrainer*)ctx;
    CpuModel* cm = c->cpu;
    if (cm->optimizer == OPTIMIZER_MUON) {
        cpu_model_update_muon(cm, lr, muon_lr, TRAINER_ADAMW_BETA1, TRAINER_ADAMW_BETA2, TRAINER_ADAMW_EPS, weight_decay,
                              grad_scale, t);
        if (c->zero_stage == 1) { cpu_muon_broadcast(&cm->muon, cm->params_memory, c->pg); }
        return;
    }
    cpu_model_update(cm, lr, TRAINER_ADAMW_BETA1, TRAINER_ADAMW_BETA2, TRAINER_ADAMW_EPS, weight_decay, grad_scale, t);
    if (c->zero_stage == 1) { allgather_param_shards(cm->params_memory, cm->num_parameters, c->pg); }
}

// the training state (llmc/checkpoint.h's TrainState) holds this process's optimizer slice (m, v of opt_size
// floats at opt_offset), the optimizer code and the outlier windows
static void cpu_trainer_state_fields(const CpuModel* cm, TrainState* s) {
    s->num_parameters = cm->num_parameters;
    s->opt_offset = cm->opt_offset;
    s->opt_size = cm->opt_size;
    s->optimizer = cm->optimizer;
    s->extra_bytes = (uint32_t)trainer_state_extra_bytes(0);
}

static void cpu_trainer_save_state(void* ctx, const char* path, TrainState* s, const TrainerDetectors* d) {
    CpuModel* cm = ((CpuTrainer*)ctx)->cpu;
    cpu_trainer_state_fields(cm, s);
    train_state_write(path, s, cm->m_memory, cm->v_memory, d);
}

static void cpu_trainer_load_state(void* ctx, const char* path, TrainState* expect, TrainState* got, TrainerDetectors* d) {
    CpuModel* cm = ((CpuTrainer*)ctx)->cpu;
    cpu_trainer_state_fields(cm, expect);
    train_state_read(path, expect, got, cm->m_memory, cm->v_memory, d);
}

static void cpu_trainer_barrier(void* ctx) { process_group_barrier((const ProcessGroup*)ctx); }

static void cpu_trainer_sum_floats(void* ctx, float* values, int n) {
    allreduce_sum_floats(values, (size_t)n, (const ProcessGroup*)ctx);
}

static TrainerComm cpu_trainer_comm(ProcessGroup* pg) {
    TrainerComm comm = {pg->process_rank, pg->num_processes, pg, cpu_trainer_barrier, cpu_trainer_sum_floats};
    return comm;
}

// ----------------------------------------------------------------------------
// a trainer's main() around its model

// -e, for every family (llmc/model_family.h's rule): the model of the model file load, or of a descriptor from scratch
// (the family's init at TRAINER_INIT_SEED); from_file: load is a model file whatever its name (a resumed checkpoint).
// calls->allocate gives the model its config, its zeroed parameters (cm) and its tables; the parameters are then
// read or drawn here.
static void cpu_model_build(CpuModel* cm, const ModelFamily* family, void* model, const CpuModelCalls* calls,
                            const char* load, int from_file) {
    void* config = callocCheck(1, family->model_file->config_size);
    int scratch = model_family_config(family, load, from_file, config);
    FILE* f = NULL;
    int version = 0;
    if (!scratch) { f = model_file_open(load, family->model_file, config, &version); }
    calls->allocate(model, config);
    free(config);
    if (scratch) {
        family->init_params(cm->params_memory, cm->config, TRAINER_INIT_SEED);
    } else {
        model_file_read_params(f, load, version, cm->params_memory, cm->num_parameters);
        fcloseCheck(f, load);
    }
}

// what this run does (rank 0): the flags and their values, the model's line, the optimizer's (Muon's
// settings; with ZeRO-1 what rank 0 owns) and the threads
static void cpu_trainer_print_run(const ArgSpec* table, const TrainArgs* args, const CpuTrainer* c, const char* model_path,
                                  const char* threads_why) {
    printf("+-------------------------------------------------------------------------+\n");
    train_args_print_values(table, TRAIN_CPU, args, stdout);
    printf("+-------------------------------------------------------------------------+\n");
    const CpuModel* cm = c->cpu;
    char line[512];
    cpu_model_line(cm, line, sizeof(line));
    printf("model: %s %s\n", model_path, line);
    if (cm->optimizer == OPTIMIZER_MUON) {
        const MuonConfig* m = &cm->muon.config;
        printf("optimizer: Muon (lr %g, momentum %g, nesterov %d, %d Newton-Schulz steps, lr adjustment %s) on the %d block matrices, AdamW (lr %g) on the rest\n",
               m->lr, m->momentum, m->nesterov, m->ns_steps, args->muon_adjust_lr, cpu_muon_num_matrices(&cm->muon), args->learning_rate);
    }
    if (args->zero_stage == 1) {
        printf("ZeRO-1: rank 0 owns %zu of %zu parameters' optimizer state%s\n", cm->opt_size, cm->num_parameters,
               cm->optimizer == OPTIMIZER_MUON ? " (Muon matrices whole)" : "");
    }
#ifdef _OPENMP
    printf("threads: %d OpenMP threads x %d processes (%s)\n", omp_get_max_threads(), c->pg->num_processes, threads_why);
#else
    (void)threads_why;
#endif
}

// A CPU trainer's main(): the flags, the data, the model (-e, or the newest complete checkpoint in -o when
// resuming), -t against the model's longest sequence, the optimizer's state (AdamW on this process's ZeRO
// shard, or the Muon plan), the precision, the lines of what the run does, then llmc/trainer.h's loop.
// model is the family's model struct (unbuilt), cpu its CpuModel. Returns the exit status.
// pg: the processes, set up by the caller (cpu_trainer_main below, or pyllmc with its own comm).
static int cpu_trainer_main_in_group(ProcessGroup pg, int argc, char** argv, const char* about, const ModelFamily* family,
                                     void* model, const CpuModelCalls* calls, CpuModel* cpu) {
    ArgSpec table[TRAIN_ARG_COUNT];
    TrainArgs args;
    trainer_parse_args(&args, table, TRAIN_CPU, family, argc, argv, about);
    cpu_parse_precision(args.precision, argv[0]);
    MuonConfig muon;
    int optimizer = cpu_parse_optimizer(&args, argv[0], &muon);
    char threads_why[96];
    cpu_set_threads(&pg, threads_why, sizeof(threads_why));

    // data and flags first (a missing file says so before the model is loaded), then the model
    int resume_step = trainer_prepare(&args, family, pg.process_rank);
    char model_path[4200];
    snprintf(model_path, sizeof(model_path), "%s", args.load_filename);
    if (resume_step >= 0) {
        trainer_checkpoint_path(model_path, sizeof(model_path), args.output_log_dir, "model", resume_step, -1);
    }
    cpu_model_build(cpu, family, model, calls, model_path, resume_step >= 0);
    if (args.T > cpu->max_seq_len) {
        llmc_die("flag -t: T = %d is larger than the model's %s %d (-e %s)", args.T, family->max_T_name, cpu->max_seq_len, model_path);
    }
    // chat shards may need more of the vocabulary than the model has (GPT-2's V = 50257): V grows here, before the
    // data loaders check the token ids against it
    cpu->vocab_size = trainer_grow_vocab_for_chat(&args, family, (void*)cpu->config, cpu->params_memory, cpu->vocab_size,
                                                  pg.process_rank);
    Trainer trainer;
    trainer_init(&trainer, &args, family, cpu_trainer_comm(&pg), cpu->vocab_size, resume_step);
    ZeroShard shard = zero_shard(cpu->num_parameters, args.zero_stage, pg.num_processes, pg.process_rank);
    calls->allocate_activations(model, args.B, args.T);
    if (optimizer == OPTIMIZER_MUON) {
        cpu_model_allocate_muon(cpu, &muon, args.zero_stage, pg.num_processes, pg.process_rank);
    } else {
        cpu_model_allocate_optimizer(cpu, shard.offset, shard.size);
    }
    cpu_choose_precision(&pg);
    CpuTrainer c = {&pg, args.B, args.T, args.zero_stage, model, calls, cpu};
    if (pg.process_rank == 0) { cpu_trainer_print_run(table, &args, &c, model_path, threads_why); }

    TrainerOps ops = {&c, cpu_trainer_zero_grad, cpu_trainer_forward_backward, cpu_trainer_grad_norm, cpu_trainer_update,
                      cpu_trainer_forward_losses, cpu_trainer_next_token_logits, cpu_trainer_save_model,
                      cpu_trainer_save_state, cpu_trainer_load_state};
    int status = trainer_run(&trainer, &ops);

    trainer_free(&trainer);
    cpu_model_free_with(cpu, calls, model);
    return status;
}

// the same, with MPI started and finished around it (a program's main())
static int cpu_trainer_main(int argc, char** argv, const char* about, const ModelFamily* family, void* model,
                            const CpuModelCalls* calls, CpuModel* cpu) {
    ProcessGroup pg = process_group_init(&argc, &argv);
    int status = cpu_trainer_main_in_group(pg, argc, argv, about, family, model, calls, cpu);
    process_group_finalize();
    return status;
}

#endif // LLMC_CPU_TRAINER_H
