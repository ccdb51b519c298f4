/*
llmc/args.h: the trainers' command line, from ONE table.

Each row of TRAIN_ARG_TABLE is (flag, type, field offset, default, min, max, help). The same
table fills the defaults, parses argv and prints --help, so the help text cannot drift from
the parser. train_gpt2.c and train_gpt2.cu share it; flags that only one trainer uses say so
in their help text. The generic functions (args_parse, args_print_help) take any table, so
small tools such as test_gpt2.c declare their own.

Flags come in pairs "-flag value". An unknown flag, a missing value or a bad value prints
one line "error: ... (run <prog> --help to list the flags)" and exits with status 1.
*/
#ifndef LLMC_ARGS_H
#define LLMC_ARGS_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "utils.h"

typedef enum { ARG_INT, ARG_FLOAT, ARG_STRING } ArgType;

typedef struct {
    const char* flag;           // "-b"
    ArgType type;               // int, float or string field
    size_t offset;              // offsetof(the struct, field)
    const char* default_value;  // parsed like a command-line value
    double min, max;            // accepted range of numeric values
    const char* help;
} ArgSpec;

// ----------------------------------------------------------------------------
// the trainer's options

typedef struct {
    // data and model
    const char* train_data_pattern;  // -i
    const char* val_data_pattern;    // -j
    const char* load_filename;       // -e
    const char* output_log_dir;      // -o
    // batch and schedule
    int B;                           // -b
    int T;                           // -t
    int total_batch_size;            // -d
    int max_steps;                   // -x
    const char* lr_scheduler_type;   // -k
    float learning_rate;             // -l
    int warmup_iterations;           // -u
    float final_learning_rate_frac;  // -q
    float weight_decay;              // -c
    // evaluation, sampling, checkpoints
    int val_loss_every;              // -v
    int val_max_steps;               // -m
    int sample_every;                // -s
    int gen_tokens;                  // -g
    int checkpoint_every;            // -n
    int checkpoints_keep;            // -nk
    int checkpoints_major_every;     // -nm
    int resume;                      // -y
    int overfit_single_batch;        // -a
    int shuffle;                     // -sh
    int hellaswag_eval;              // -h
    const char* hellaswag_path;      // -he
    // memory and robustness
    int zero_stage;                  // -z
    int recompute;                   // -r
    int gelu_fusion;                 // -ge
    int use_master_weights;          // -w
    const char* precision;           // -p
    float skip_update_lossz;         // -sl
    float skip_update_gradz;         // -sg
    // multi-process (MPI gives these on the CPU trainer)
    int num_processes;               // -pn
    int process_rank;                // -pr
    int gpus_per_node;               // -pg
    const char* nccl_init_method;    // -pi
    const char* server_ip;           // -ps
    const char* fs_path;             // -pf
    // optimizer: AdamW everywhere, or Muon on the blocks' 2-D weights (AdamW on the rest)
    const char* optimizer;           // -op
    float muon_lr;                   // -ol
    float muon_momentum;             // -om
    int muon_nesterov;               // -on
    int muon_ns_steps;               // -os
    const char* muon_adjust_lr;      // -oa
    // OpenCL device (the OpenCL trainer only)
    int cl_platform;                 // -cp
    int cl_device;                   // -cd
    int cl_list_devices;             // -cl
} TrainArgs;

#define TRAIN_ARG(flag, type, field, def, lo, hi, help) \
    { flag, type, offsetof(TrainArgs, field), def, lo, hi, help }

static const ArgSpec TRAIN_ARG_TABLE[] = {
    TRAIN_ARG("-i", ARG_STRING, train_data_pattern, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin", 0, 0,
              "train token shards (file or glob)"),
    TRAIN_ARG("-j", ARG_STRING, val_data_pattern, "dev/data/tinyshakespeare/tiny_shakespeare_val.bin", 0, 0,
              "validation token shards (file or glob; \"\" = none)"),
    TRAIN_ARG("-e", ARG_STRING, load_filename, "gpt2_124M.bin", 0, 0,
              "checkpoint to load, or dN / gpt2:dN / gpt3:cN to init from scratch (seed 42)"),
    TRAIN_ARG("-o", ARG_STRING, output_log_dir, "", 0, 0,
              "output dir for main.log and checkpoints (\"\" = none)"),
    TRAIN_ARG("-b", ARG_INT, B, "4", 1, 1e6, "micro-batch size B (per process)"),
    TRAIN_ARG("-t", ARG_INT, T, "64", 1, 1e6, "sequence length T (<= the model's max)"),
    TRAIN_ARG("-d", ARG_INT, total_batch_size, "-1", -1, 2e9,
              "total batch in tokens, via gradient accumulation (-1 = B*T*processes)"),
    TRAIN_ARG("-x", ARG_INT, max_steps, "40", -1, 2e9, "number of optimizer steps (-1 = one epoch of -i)"),
    TRAIN_ARG("-k", ARG_STRING, lr_scheduler_type, "cosine", 0, 0, "LR schedule: cosine|linear|constant|wsd"),
    TRAIN_ARG("-l", ARG_FLOAT, learning_rate, "3e-4", 0, 1e3, "peak learning rate"),
    TRAIN_ARG("-u", ARG_INT, warmup_iterations, "0", 0, 2e9, "LR warmup steps"),
    TRAIN_ARG("-q", ARG_FLOAT, final_learning_rate_frac, "1.0", 0, 1, "final LR as a fraction of the peak"),
    TRAIN_ARG("-c", ARG_FLOAT, weight_decay, "0.0", 0, 1e3, "AdamW weight decay (2-D weights only)"),
    TRAIN_ARG("-v", ARG_INT, val_loss_every, "10", 0, 2e9, "validation loss every N steps (0 = never)"),
    TRAIN_ARG("-m", ARG_INT, val_max_steps, "10", 1, 2e9, "validation batches per evaluation"),
    TRAIN_ARG("-s", ARG_INT, sample_every, "20", 0, 2e9, "print a text sample every N steps (0 = never)"),
    TRAIN_ARG("-g", ARG_INT, gen_tokens, "64", 1, 1e6, "tokens to generate per sample (<= the model's max T)"),
    TRAIN_ARG("-n", ARG_INT, checkpoint_every, "0", 0, 2e9, "write a checkpoint to -o every N steps and at the end (0 = never)"),
    TRAIN_ARG("-nk", ARG_INT, checkpoints_keep, "0", 0, 2e9, "checkpoints to keep in -o (0 = all)"),
    TRAIN_ARG("-nm", ARG_INT, checkpoints_major_every, "0", 0, 2e9,
              "checkpoints at steps that are multiples of N are major: -nk never deletes them (0 = none)"),
    TRAIN_ARG("-y", ARG_INT, resume, "0", 0, 1, "1 = resume from the latest checkpoint in -o"),
    TRAIN_ARG("-a", ARG_INT, overfit_single_batch, "0", 0, 1, "1 = train on the first batch only (overfit test)"),
    TRAIN_ARG("-sh", ARG_INT, shuffle, "0", 0, 1, "1 = shuffle shards and samples every epoch (seeded, same on every rank)"),
    TRAIN_ARG("-h", ARG_INT, hellaswag_eval, "0", 0, 1, "1 = HellaSwag accuracy at every validation (needs -he)"),
    TRAIN_ARG("-he", ARG_STRING, hellaswag_path, "dev/data/hellaswag/hellaswag_val.bin", 0, 0,
              "HellaSwag eval file (python dev/data/hellaswag.py writes it)"),
    TRAIN_ARG("-z", ARG_INT, zero_stage, "0", 0, 1, "ZeRO stage: 0 = off, 1 = shard the AdamW state over processes"),
    TRAIN_ARG("-r", ARG_INT, recompute, "0", 0, 2, "activation recompute level (GPU trainer only)"),
    TRAIN_ARG("-ge", ARG_INT, gelu_fusion, "0", 0, 1, "1 = fuse GELU into the matmul epilogue (GPU trainer only; the CPU trainer ignores it)"),
    TRAIN_ARG("-w", ARG_INT, use_master_weights, "1", 0, 1, "fp32 master weights (GPU trainer only; CPU is fp32)"),
    TRAIN_ARG("-p", ARG_STRING, precision, "fp32", 0, 0, "CPU matmul precision: fp32|bf16 (bf16 inputs, fp32 sums and weights)"),
    TRAIN_ARG("-sl", ARG_FLOAT, skip_update_lossz, "0", 0, 1e9, "skip the update when the loss z-score exceeds this (0 = off)"),
    TRAIN_ARG("-sg", ARG_FLOAT, skip_update_gradz, "0", 0, 1e9, "skip the update when the grad-norm z-score exceeds this (0 = off)"),
    TRAIN_ARG("-pn", ARG_INT, num_processes, "1", 1, 1e6, "number of processes (GPU trainer; the CPU trainer takes it from MPI)"),
    TRAIN_ARG("-pr", ARG_INT, process_rank, "0", 0, 1e6, "rank of this process (GPU trainer; the CPU trainer takes it from MPI)"),
    TRAIN_ARG("-pg", ARG_INT, gpus_per_node, "8", 1, 1e6, "GPUs per node (GPU trainer only)"),
    TRAIN_ARG("-pi", ARG_STRING, nccl_init_method, "mpi", 0, 0, "NCCL init method: mpi|tcp|fs (GPU trainer only)"),
    TRAIN_ARG("-ps", ARG_STRING, server_ip, "", 0, 0, "server IP for -pi tcp (GPU trainer only)"),
    TRAIN_ARG("-pf", ARG_STRING, fs_path, "", 0, 0, "shared directory for -pi fs (GPU trainer only)"),
    TRAIN_ARG("-op", ARG_STRING, optimizer, "adamw", 0, 0,
              "optimizer: adamw|muon (muon: Muon on the blocks' 2-D weights, AdamW with -l on the rest)"),
    TRAIN_ARG("-ol", ARG_FLOAT, muon_lr, "1e-3", 0, 1e3, "Muon peak learning rate (follows the -k schedule)"),
    TRAIN_ARG("-om", ARG_FLOAT, muon_momentum, "0.95", 0, 1, "Muon momentum"),
    TRAIN_ARG("-on", ARG_INT, muon_nesterov, "1", 0, 1, "1 = Nesterov momentum for Muon"),
    TRAIN_ARG("-os", ARG_INT, muon_ns_steps, "5", 1, 100, "Newton-Schulz iterations per Muon update"),
    TRAIN_ARG("-oa", ARG_STRING, muon_adjust_lr, "original", 0, 0,
              "Muon lr adjustment: original (sqrt(max(1, rows/cols))) | match_rms_adamw (0.2 sqrt(max(rows, cols)))"),
    TRAIN_ARG("-cp", ARG_INT, cl_platform, "0", 0, 1e6, "OpenCL platform index (OpenCL trainer only; -cl 1 lists them)"),
    TRAIN_ARG("-cd", ARG_INT, cl_device, "0", 0, 1e6, "OpenCL device index within the platform (OpenCL trainer only)"),
    TRAIN_ARG("-cl", ARG_INT, cl_list_devices, "0", 0, 1, "1 = list the OpenCL platforms and devices, then exit (OpenCL trainer only)"),
};
#define TRAIN_ARG_COUNT ((int)(sizeof(TRAIN_ARG_TABLE) / sizeof(TRAIN_ARG_TABLE[0])))

// ----------------------------------------------------------------------------
// the generic parser

// parses `value` into the field of spec in out; returns NULL or a reason it is invalid
static inline const char* args_set_value(const ArgSpec* spec, void* out, const char* value) {
    char* field = (char*)out + spec->offset;
    if (spec->type == ARG_STRING) {
        *(const char**)field = value;
        return NULL;
    }
    char* end = NULL;
    errno = 0;
    if (spec->type == ARG_INT) {
        long long v = strtoll(value, &end, 10);
        if (end == value || *end != '\0' || errno != 0) { return "expected an integer"; }
        if ((double)v < spec->min || (double)v > spec->max) { return "out of range"; }
        *(int*)field = (int)v;
    } else {
        float v = strtof(value, &end);
        if (end == value || *end != '\0' || errno != 0 || !isfinite(v)) { return "expected a number"; }
        if ((double)v < spec->min || (double)v > spec->max) { return "out of range"; }
        *(float*)field = v;
    }
    return NULL;
}

static inline void args_print_help(const ArgSpec* table, int n, const char* prog, const char* summary, FILE* out) {
    fprintf(out, "usage: %s [-flag value] ...\n%s\n\nflags:\n", prog, summary);
    for (int i = 0; i < n; i++) {
        const ArgSpec* s = &table[i];
        const char* kind = s->type == ARG_INT ? "int" : (s->type == ARG_FLOAT ? "float" : "str");
        fprintf(out, "  %-4s %-5s %s (default: \"%s\")\n", s->flag, kind, s->help, s->default_value);
    }
}

// fills the defaults, then the command line; --help prints the table and exits 0
static inline void args_parse(const ArgSpec* table, int n, void* out, int argc, char** argv,
                              const char* summary) {
    const char* prog = argc > 0 ? argv[0] : "program";
    for (int i = 0; i < n; i++) {
        const char* why = args_set_value(&table[i], out, table[i].default_value);
        if (why != NULL) { llmc_die("internal: bad default \"%s\" for %s: %s", table[i].default_value, table[i].flag, why); }
    }
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0) {
            args_print_help(table, n, prog, summary, stdout);
            exit(0);
        }
        const ArgSpec* spec = NULL;
        for (int j = 0; j < n; j++) {
            if (strcmp(argv[i], table[j].flag) == 0) { spec = &table[j]; break; }
        }
        if (spec == NULL) {
            llmc_die("unknown flag \"%s\" (run %s --help to list the flags)", argv[i], prog);
        }
        if (i + 1 >= argc) {
            llmc_die("flag %s needs a value (run %s --help to list the flags)", argv[i], prog);
        }
        const char* why = args_set_value(spec, out, argv[i + 1]);
        if (why != NULL) {
            if (strcmp(why, "out of range") == 0) {
                llmc_die("flag %s: value \"%s\" is out of range [%g, %g] (run %s --help to list the flags)",
                         argv[i], argv[i + 1], spec->min, spec->max, prog);
            }
            llmc_die("flag %s: bad value \"%s\": %s (run %s --help to list the flags)", argv[i], argv[i + 1], why, prog);
        }
    }
}

// one line per option: flag, value, help, for the start of a run's log
static inline void args_print_values(const ArgSpec* table, int n, const void* in, FILE* out) {
    for (int i = 0; i < n; i++) {
        const char* field = (const char*)in + table[i].offset;
        int len = fprintf(out, "%-4s ", table[i].flag);
        if (table[i].type == ARG_INT) { len += fprintf(out, "%d", *(const int*)field); }
        else if (table[i].type == ARG_FLOAT) { len += fprintf(out, "%g", (double)*(const float*)field); }
        else {
            const char* str = *(const char* const*)field;
            len += fprintf(out, "%s", str[0] != '\0' ? str : "\"\"");
        }
        fprintf(out, "%*s  %s\n", len < 26 ? 26 - len : 0, "", table[i].help);
    }
}

#endif // LLMC_ARGS_H
