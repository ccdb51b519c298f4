/*
llmc/args.h: the trainers' command line, from ONE table.

Each row of TRAIN_ARGS is (flag, field, default, [min, max,] help), by the kind of its value; it
declares the member of TrainArgs and the row of TRAIN_ARG_TABLE (flag, type, field offset, default,
min, max, help). The same table fills the defaults, parses argv and prints --help, so the help
text cannot drift from the parser. train_gpt2.c and train_gpt2.cu share it; flags that only one
trainer uses say so in their help text. The generic functions (args_parse, args_print_help) take any table, so
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

// TRAIN_ARGS(STR, SWITCH, COUNT, INT, FLOAT): every option of the trainers, one row each, in the order of
// TrainArgs and of --help; a row is its kind's macro (help last):
//   STR(flag, field, "default", help)           a string (const char*)
//   SWITCH(flag, field, default, help)          an int, 0 or 1
//   COUNT(flag, field, default, help)           an int in [0, 2e9]: steps or checkpoints (0 = never, or all)
//   INT(flag, field, default, lo, hi, help)     an int in [lo, hi]
//   FLOAT(flag, field, default, lo, hi, help)   a float in [lo, hi]
// A number's default is written as a number; its ArgSpec holds it as written ("3e-4"), parsed like a flag's value.
#define TRAIN_ARGS(STR, SWITCH, COUNT, INT, FLOAT) \
    /* data and model */ \
    STR("-i", train_data_pattern, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin", \
        "train token shards (file or glob)") \
    STR("-j", val_data_pattern, "dev/data/tinyshakespeare/tiny_shakespeare_val.bin", \
        "validation token shards (file or glob; \"\" = none)") \
    STR("-e", load_filename, "gpt2_124M.bin", \
        "checkpoint to load, or dN / gpt2:dN / gpt3:cN to init from scratch (seed 42)") \
    STR("-o", output_log_dir, "", "output dir for main.log and checkpoints (\"\" = none)") \
    /* batch and schedule */ \
    INT("-b", B, 4, 1, 1e6, "micro-batch size B (per process)") \
    INT("-t", T, 64, 1, 1e6, "sequence length T (<= the model's max)") \
    INT("-d", total_batch_size, -1, -1, 2e9, \
        "total batch in tokens, via gradient accumulation (-1 = B*T*processes)") \
    INT("-x", max_steps, 40, -1, 2e9, "number of optimizer steps (-1 = one epoch of -i)") \
    STR("-k", lr_scheduler_type, "cosine", "LR schedule: cosine|linear|constant|wsd") \
    FLOAT("-l", learning_rate, 3e-4, 0, 1e3, "peak learning rate") \
    COUNT("-u", warmup_iterations, 0, "LR warmup steps") \
    FLOAT("-q", final_learning_rate_frac, 1.0, 0, 1, "final LR as a fraction of the peak") \
    FLOAT("-c", weight_decay, 0.0, 0, 1e3, "AdamW weight decay (2-D weights only)") \
    /* evaluation, sampling, checkpoints */ \
    COUNT("-v", val_loss_every, 10, "validation loss every N steps (0 = never)") \
    INT("-m", val_max_steps, 10, 1, 2e9, "validation batches per evaluation") \
    COUNT("-s", sample_every, 20, "print a text sample every N steps (0 = never)") \
    INT("-g", gen_tokens, 64, 1, 1e6, "tokens to generate per sample (<= the model's max T)") \
    COUNT("-n", checkpoint_every, 0, "write a checkpoint to -o every N steps and at the end (0 = never)") \
    COUNT("-nk", checkpoints_keep, 0, "checkpoints to keep in -o (0 = all)") \
    COUNT("-nm", checkpoints_major_every, 0, \
        "checkpoints at steps that are multiples of N are major: -nk never deletes them (0 = none)") \
    SWITCH("-y", resume, 0, "1 = resume from the latest checkpoint in -o") \
    SWITCH("-a", overfit_single_batch, 0, "1 = train on the first batch only (overfit test)") \
    SWITCH("-sh", shuffle, 0, "1 = shuffle shards and samples every epoch (seeded, same on every rank)") \
    SWITCH("-h", hellaswag_eval, 0, "1 = HellaSwag accuracy at every validation (needs -he)") \
    STR("-he", hellaswag_path, "dev/data/hellaswag/hellaswag_val.bin", \
        "HellaSwag eval file (python dev/data/hellaswag.py writes it)") \
    /* memory and robustness */ \
    INT("-z", zero_stage, 0, 0, 1, "ZeRO stage: 0 = off, 1 = shard the AdamW state over processes") \
    INT("-r", recompute, 0, 0, 2, "activation recompute level (GPU trainer only)") \
    SWITCH("-ge", gelu_fusion, 0, \
        "1 = fuse GELU into the matmul epilogue (GPU trainer only; the CPU trainer ignores it)") \
    SWITCH("-w", use_master_weights, 1, "fp32 master weights (GPU trainer only; CPU is fp32)") \
    STR("-p", precision, "fp32", "CPU matmul precision: fp32|bf16 (bf16 inputs, fp32 sums and weights)") \
    FLOAT("-sl", skip_update_lossz, 0, 0, 1e9, "skip the update when the loss z-score exceeds this (0 = off)") \
    FLOAT("-sg", skip_update_gradz, 0, 0, 1e9, \
        "skip the update when the grad-norm z-score exceeds this (0 = off)") \
    /* multi-process (MPI gives these on the CPU trainer) */ \
    INT("-pn", num_processes, 1, 1, 1e6, \
        "number of processes (GPU trainer; the CPU trainer takes it from MPI)") \
    INT("-pr", process_rank, 0, 0, 1e6, \
        "rank of this process (GPU trainer; the CPU trainer takes it from MPI)") \
    INT("-pg", gpus_per_node, 8, 1, 1e6, "GPUs per node (GPU trainer only)") \
    STR("-pi", nccl_init_method, "mpi", "NCCL init method: mpi|tcp|fs (GPU trainer only)") \
    STR("-ps", server_ip, "", "server IP for -pi tcp (GPU trainer only)") \
    STR("-pf", fs_path, "", "shared directory for -pi fs (GPU trainer only)") \
    /* optimizer: AdamW everywhere, or Muon on the blocks' 2-D weights (AdamW on the rest) */ \
    STR("-op", optimizer, "adamw", \
        "optimizer: adamw|muon (muon: Muon on the blocks' 2-D weights, AdamW with -l on the rest)") \
    FLOAT("-ol", muon_lr, 1e-3, 0, 1e3, "Muon peak learning rate (follows the -k schedule)") \
    FLOAT("-om", muon_momentum, 0.95, 0, 1, "Muon momentum") \
    SWITCH("-on", muon_nesterov, 1, "1 = Nesterov momentum for Muon") \
    INT("-os", muon_ns_steps, 5, 1, 100, "Newton-Schulz iterations per Muon update") \
    STR("-oa", muon_adjust_lr, "original", \
        "Muon lr adjustment: original (sqrt(max(1, rows/cols))) | match_rms_adamw (0.2 sqrt(max(rows, cols)))") \
    /* OpenCL device (the OpenCL trainer only) */ \
    INT("-cp", cl_platform, 0, 0, 1e6, "OpenCL platform index (OpenCL trainer only; -cl 1 lists them)") \
    INT("-cd", cl_device, 0, 0, 1e6, "OpenCL device index within the platform (OpenCL trainer only)") \
    SWITCH("-cl", cl_list_devices, 0, \
        "1 = list the OpenCL platforms and devices, then exit (OpenCL trainer only)")

// TrainArgs: one member per row of TRAIN_ARGS, named by its field
#define TRAIN_FIELD_STR_(flag, field, def, help) const char* field;
#define TRAIN_FIELD_INT01_(flag, field, def, help) int field;
#define TRAIN_FIELD_INT_(flag, field, def, lo, hi, help) int field;
#define TRAIN_FIELD_FLOAT_(flag, field, def, lo, hi, help) float field;
typedef struct {
    TRAIN_ARGS(TRAIN_FIELD_STR_, TRAIN_FIELD_INT01_, TRAIN_FIELD_INT01_, TRAIN_FIELD_INT_, TRAIN_FIELD_FLOAT_)
} TrainArgs;

// TRAIN_ARG_TABLE: the ArgSpec of each row
#define TRAIN_ARG(flag, type, field, def, lo, hi, help) { flag, type, offsetof(TrainArgs, field), def, lo, hi, help },
#define TRAIN_SPEC_STR_(flag, field, def, help) TRAIN_ARG(flag, ARG_STRING, field, def, 0, 0, help)
#define TRAIN_SPEC_SWITCH_(flag, field, def, help) TRAIN_ARG(flag, ARG_INT, field, #def, 0, 1, help)
#define TRAIN_SPEC_COUNT_(flag, field, def, help) TRAIN_ARG(flag, ARG_INT, field, #def, 0, 2e9, help)
#define TRAIN_SPEC_INT_(flag, field, def, lo, hi, help) TRAIN_ARG(flag, ARG_INT, field, #def, lo, hi, help)
#define TRAIN_SPEC_FLOAT_(flag, field, def, lo, hi, help) TRAIN_ARG(flag, ARG_FLOAT, field, #def, lo, hi, help)
static const ArgSpec TRAIN_ARG_TABLE[] = {
    TRAIN_ARGS(TRAIN_SPEC_STR_, TRAIN_SPEC_SWITCH_, TRAIN_SPEC_COUNT_, TRAIN_SPEC_INT_, TRAIN_SPEC_FLOAT_)
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
