/*
llmc/args.h: the trainers' command line, from ONE table.

Each row of TRAIN_ARGS is (flag, backends, field, default, [min, max,] help), by the kind of its value;
it declares the member of TrainArgs, the row of TRAIN_ARG_TABLE (flag, type, field offset, default,
min, max, help) and the row's TRAIN_ARG_BACKENDS: the programs that take the flag. The same table
fills the defaults, parses argv and prints --help, so the help text cannot drift from the parser.
Every trainer parses it with train_args_parse and its own backend: every field of TrainArgs gets its
default, --help lists the backend's flags only, and another backend's flag is refused in one line
that names the programs taking it. The generic functions (args_parse, args_print_help) take any
table, so small tools such as test_gpt2.c declare their own.

Flags come in pairs "-flag value". An unknown flag, another backend's flag, a missing value or a bad
value prints one line "error: ..." and exits with status 1.
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
#include "families.h"

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

// the programs that parse the trainers' table, one bit per backend; TRAIN_BACKEND_NAMES names them
typedef enum {
    TRAIN_CPU = 1,      // every family's ./train_<name> (llmc/families.h; and python -m pyllmc.train, which runs one's main)
    TRAIN_GPU = 2,      // every family's ./train_<name>cu
    TRAIN_OPENCL = 4,   // ./train_gpt2cl
} TrainBackend;
#define TRAIN_EVERY (TRAIN_CPU | TRAIN_GPU | TRAIN_OPENCL)

typedef struct {
    int backend;
    const char* kind;       // "the GPU trainers"
    const char* programs;   // "./train_gpt2cu, ./train_llama3cu"
} TrainBackendName;

// the trainers of every family in llmc/families.h as one string ", ./train_a, ./train_b"; + 2 skips the first ", "
#define TRAIN_CPU_PROGRAM_(name, description, gpu, refs, refs_dir) ", ./train_" #name
#define TRAIN_GPU_PROGRAM_(name, description, gpu, refs, refs_dir) TRAIN_GPU_PROGRAM_##gpu(name)
#define TRAIN_GPU_PROGRAM_1(name) ", ./train_" #name "cu"
#define TRAIN_GPU_PROGRAM_0(name) "" // a family with the CPU programs alone
static const TrainBackendName TRAIN_BACKEND_NAMES[] = {
    {TRAIN_CPU, "the CPU trainers", LLMC_FAMILIES(TRAIN_CPU_PROGRAM_) + 2},
    {TRAIN_GPU, "the GPU trainers", LLMC_FAMILIES(TRAIN_GPU_PROGRAM_) + 2},
    {TRAIN_OPENCL, "the OpenCL trainer", "./train_gpt2cl"},
};

// TRAIN_ARGS(STR, SWITCH, COUNT, INT, FLOAT): every option of the trainers, one row each, in the order of
// TrainArgs and of --help; a row is its kind's macro (help last), `to` the TrainBackend bits of the programs
// that take the flag (the others refuse it):
//   STR(flag, to, field, "default", help)           a string (const char*)
//   SWITCH(flag, to, field, default, help)          an int, 0 or 1
//   COUNT(flag, to, field, default, help)           an int in [0, 2e9]: steps or checkpoints (0 = never, or all)
//   INT(flag, to, field, default, lo, hi, help)     an int in [lo, hi]
//   FLOAT(flag, to, field, default, lo, hi, help)   a float in [lo, hi]
// A number's default is written as a number; its ArgSpec holds it as written ("3e-4"), parsed like a flag's value.
#define TRAIN_ARGS(STR, SWITCH, COUNT, INT, FLOAT) \
    /* data and model */ \
    STR("-i", TRAIN_EVERY, train_data_pattern, "dev/data/tinyshakespeare/tiny_shakespeare_train.bin", \
        "train token shards (file or glob)") \
    STR("-j", TRAIN_EVERY, val_data_pattern, "dev/data/tinyshakespeare/tiny_shakespeare_val.bin", \
        "validation token shards (file or glob; \"\" = none)") \
    STR("-e", TRAIN_EVERY, load_filename, "gpt2_124M.bin", \
        "checkpoint to load, or dN / gpt2:dN / gpt3:cN to init from scratch (seed 42)") \
    STR("-o", TRAIN_EVERY, output_log_dir, "", "output dir for main.log and checkpoints (\"\" = none)") \
    /* batch and schedule */ \
    INT("-b", TRAIN_EVERY, B, 4, 1, 1e6, "micro-batch size B (per process)") \
    INT("-t", TRAIN_EVERY, T, 64, 1, 1e6, "sequence length T (<= the model's max)") \
    INT("-d", TRAIN_EVERY, total_batch_size, -1, -1, 2e9, \
        "total batch in tokens, via gradient accumulation (-1 = B*T*processes)") \
    INT("-x", TRAIN_EVERY, max_steps, 40, -1, 2e9, "number of optimizer steps (-1 = one epoch of -i)") \
    STR("-k", TRAIN_EVERY, lr_scheduler_type, "cosine", "LR schedule: cosine|linear|constant|wsd") \
    FLOAT("-l", TRAIN_EVERY, learning_rate, 3e-4, 0, 1e3, "peak learning rate") \
    COUNT("-u", TRAIN_EVERY, warmup_iterations, 0, "LR warmup steps") \
    FLOAT("-q", TRAIN_EVERY, final_learning_rate_frac, 1.0, 0, 1, "final LR as a fraction of the peak") \
    FLOAT("-c", TRAIN_EVERY, weight_decay, 0.0, 0, 1e3, "AdamW weight decay (2-D weights only)") \
    /* evaluation, sampling, checkpoints */ \
    COUNT("-v", TRAIN_EVERY, val_loss_every, 10, "validation loss every N steps (0 = never)") \
    INT("-m", TRAIN_EVERY, val_max_steps, 10, 1, 2e9, "validation batches per evaluation") \
    COUNT("-s", TRAIN_EVERY, sample_every, 20, "print a text sample every N steps (0 = never)") \
    INT("-g", TRAIN_EVERY, gen_tokens, 64, 1, 1e6, "tokens to generate per sample (<= the model's max T)") \
    COUNT("-n", TRAIN_EVERY, checkpoint_every, 0, "write a checkpoint to -o every N steps and at the end (0 = never)") \
    COUNT("-nk", TRAIN_EVERY, checkpoints_keep, 0, "checkpoints to keep in -o (0 = all)") \
    COUNT("-nm", TRAIN_EVERY, checkpoints_major_every, 0, \
        "checkpoints at steps that are multiples of N are major: -nk never deletes them (0 = none)") \
    SWITCH("-y", TRAIN_EVERY, resume, 0, "1 = resume from the latest checkpoint in -o") \
    SWITCH("-a", TRAIN_EVERY, overfit_single_batch, 0, "1 = train on the first batch only (overfit test)") \
    SWITCH("-sh", TRAIN_EVERY, shuffle, 0, "1 = shuffle shards and samples every epoch (seeded, same on every rank)") \
    SWITCH("-h", TRAIN_EVERY, hellaswag_eval, 0, "1 = HellaSwag accuracy at every validation (needs -he)") \
    STR("-he", TRAIN_EVERY, hellaswag_path, "dev/data/hellaswag/hellaswag_val.bin", \
        "HellaSwag eval file (python dev/data/hellaswag.py writes it)") \
    /* memory and robustness */ \
    INT("-z", TRAIN_CPU | TRAIN_GPU, zero_stage, 0, 0, 1, "ZeRO stage: 0 = off, 1 = shard the AdamW state over processes") \
    INT("-r", TRAIN_GPU, recompute, 0, 0, 2, "activation recompute: 0 = none, 1 = the MLP activation, 2 = also the norms") \
    SWITCH("-ge", TRAIN_GPU, gelu_fusion, 0, "1 = fuse GELU into the matmul epilogue") \
    SWITCH("-w", TRAIN_GPU, use_master_weights, 1, "1 = keep fp32 master weights of the parameters") \
    STR("-p", TRAIN_CPU | TRAIN_OPENCL, precision, "fp32", \
        "CPU matmul precision: fp32|bf16 (bf16 inputs, fp32 sums and weights)") \
    FLOAT("-sl", TRAIN_EVERY, skip_update_lossz, 0, 0, 1e9, "skip the update when the loss z-score exceeds this (0 = off)") \
    FLOAT("-sg", TRAIN_EVERY, skip_update_gradz, 0, 0, 1e9, \
        "skip the update when the grad-norm z-score exceeds this (0 = off)") \
    /* processes and GPUs (the CPU trainers take theirs from MPI) */ \
    INT("-pn", TRAIN_GPU, num_processes, 1, 1, 1e6, \
        "number of processes, for -pi tcp|fs (-pi mpi takes it from MPI)") \
    INT("-pr", TRAIN_GPU, process_rank, 0, 0, 1e6, \
        "rank of this process, for -pi tcp|fs (-pi mpi takes it from MPI)") \
    INT("-pg", TRAIN_GPU, gpus_per_node, 8, 1, 1e6, "GPUs per node") \
    STR("-pi", TRAIN_GPU, nccl_init_method, "mpi", "NCCL init method: mpi|tcp|fs") \
    STR("-ps", TRAIN_GPU, server_ip, "", "server IP for -pi tcp") \
    STR("-pf", TRAIN_GPU, fs_path, "", "shared directory for -pi fs") \
    /* optimizer: AdamW everywhere, or Muon on the blocks' 2-D weights (AdamW on the rest) */ \
    STR("-op", TRAIN_CPU | TRAIN_GPU | TRAIN_OPENCL, optimizer, "adamw", \
        "optimizer: adamw|muon (muon: Muon on the blocks' 2-D weights, AdamW with -l on the rest)") \
    FLOAT("-ol", TRAIN_CPU | TRAIN_GPU, muon_lr, 1e-3, 0, 1e3, "Muon peak learning rate (follows the -k schedule)") \
    FLOAT("-om", TRAIN_CPU | TRAIN_GPU, muon_momentum, 0.95, 0, 1, "Muon momentum") \
    SWITCH("-on", TRAIN_CPU | TRAIN_GPU, muon_nesterov, 1, "1 = Nesterov momentum for Muon") \
    INT("-os", TRAIN_CPU | TRAIN_GPU, muon_ns_steps, 5, 1, 100, "Newton-Schulz iterations per Muon update") \
    STR("-oa", TRAIN_CPU | TRAIN_GPU, muon_adjust_lr, "original", \
        "Muon lr adjustment: original (sqrt(max(1, rows/cols))) | match_rms_adamw (0.2 sqrt(max(rows, cols)))") \
    /* OpenCL device */ \
    INT("-cp", TRAIN_OPENCL, cl_platform, 0, 0, 1e6, "OpenCL platform index (-cl 1 lists them)") \
    INT("-cd", TRAIN_OPENCL, cl_device, 0, 0, 1e6, "OpenCL device index within the platform") \
    SWITCH("-cl", TRAIN_OPENCL, cl_list_devices, 0, "1 = list the OpenCL platforms and devices, then exit")

// TrainArgs: one member per row of TRAIN_ARGS, named by its field (every program has every field)
#define TRAIN_FIELD_STR_(flag, to, field, def, help) const char* field;
#define TRAIN_FIELD_INT01_(flag, to, field, def, help) int field;
#define TRAIN_FIELD_INT_(flag, to, field, def, lo, hi, help) int field;
#define TRAIN_FIELD_FLOAT_(flag, to, field, def, lo, hi, help) float field;
typedef struct {
    TRAIN_ARGS(TRAIN_FIELD_STR_, TRAIN_FIELD_INT01_, TRAIN_FIELD_INT01_, TRAIN_FIELD_INT_, TRAIN_FIELD_FLOAT_)
} TrainArgs;

// TRAIN_ARG_TABLE: the ArgSpec of each row
#define TRAIN_ARG(flag, type, field, def, lo, hi, help) { flag, type, offsetof(TrainArgs, field), def, lo, hi, help },
#define TRAIN_SPEC_STR_(flag, to, field, def, help) TRAIN_ARG(flag, ARG_STRING, field, def, 0, 0, help)
#define TRAIN_SPEC_SWITCH_(flag, to, field, def, help) TRAIN_ARG(flag, ARG_INT, field, #def, 0, 1, help)
#define TRAIN_SPEC_COUNT_(flag, to, field, def, help) TRAIN_ARG(flag, ARG_INT, field, #def, 0, 2e9, help)
#define TRAIN_SPEC_INT_(flag, to, field, def, lo, hi, help) TRAIN_ARG(flag, ARG_INT, field, #def, lo, hi, help)
#define TRAIN_SPEC_FLOAT_(flag, to, field, def, lo, hi, help) TRAIN_ARG(flag, ARG_FLOAT, field, #def, lo, hi, help)
static const ArgSpec TRAIN_ARG_TABLE[] = {
    TRAIN_ARGS(TRAIN_SPEC_STR_, TRAIN_SPEC_SWITCH_, TRAIN_SPEC_COUNT_, TRAIN_SPEC_INT_, TRAIN_SPEC_FLOAT_)
};
#define TRAIN_ARG_COUNT ((int)(sizeof(TRAIN_ARG_TABLE) / sizeof(TRAIN_ARG_TABLE[0])))

// TRAIN_ARG_BACKENDS: the TrainBackend bits of each row (beside the table: ArgSpec serves any tool's table)
#define TRAIN_TO_5_(flag, to, field, def, help) (to),
#define TRAIN_TO_7_(flag, to, field, def, lo, hi, help) (to),
static const int TRAIN_ARG_BACKENDS[] = {
    TRAIN_ARGS(TRAIN_TO_5_, TRAIN_TO_5_, TRAIN_TO_5_, TRAIN_TO_7_, TRAIN_TO_7_)
};

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

// whether a program of `backend` takes row i of a table whose rows are taken by backends[i] (NULL: every row)
static inline int args_takes(const int* backends, int backend, int i) {
    return backends == NULL || (backends[i] & backend) != 0;
}

// the usage line, summary and the rows `backend` takes (backends: as args_takes)
static inline void args_print_help_of(const ArgSpec* table, const int* backends, int backend, int n, const char* prog,
                                      const char* summary, FILE* out) {
    fprintf(out, "usage: %s [-flag value] ...\n%s\n\nflags:\n", prog, summary);
    for (int i = 0; i < n; i++) {
        if (!args_takes(backends, backend, i)) { continue; }
        const ArgSpec* s = &table[i];
        const char* kind = s->type == ARG_INT ? "int" : (s->type == ARG_FLOAT ? "float" : "str");
        fprintf(out, "  %-4s %-5s %s (default: \"%s\")\n", s->flag, kind, s->help, s->default_value);
    }
}

static inline void args_print_help(const ArgSpec* table, int n, const char* prog, const char* summary, FILE* out) {
    args_print_help_of(table, NULL, 0, n, prog, summary, out);
}

// another backend's flag, in one line: "flag -r: a flag of the GPU trainers (./train_gpt2cu, ./train_llama3cu),
// not of ./train_gpt2"; takers holds the TrainBackend bits of the programs that take it
static inline LLMC_NORETURN void args_refuse_backend(const char* flag, int takers, const char* prog) {
    const int count = (int)(sizeof(TRAIN_BACKEND_NAMES) / sizeof(TRAIN_BACKEND_NAMES[0]));
    int left = 0;
    for (int k = 0; k < count; k++) { left += (takers & TRAIN_BACKEND_NAMES[k].backend) != 0; }
    char names[512] = "";
    size_t len = 0;
    for (int k = 0; k < count && len < sizeof(names); k++) {
        const TrainBackendName* b = &TRAIN_BACKEND_NAMES[k];
        if ((takers & b->backend) == 0) { continue; }
        const char* sep = len == 0 ? "" : (left == 1 ? " and " : ", ");
        len += (size_t)snprintf(names + len, sizeof(names) - len, "%s%s (%s)", sep, b->kind, b->programs);
        left--;
    }
    llmc_die("flag %s: a flag of %s, not of %s", flag, names, prog);
}

// fills the defaults of every row, then the command line; --help prints the rows `backend` takes and exits 0,
// a flag of a row it does not take is refused (backends: as args_takes, NULL for a tool's own table)
static inline void args_parse_of(const ArgSpec* table, const int* backends, int backend, int n, void* out, int argc,
                                 char** argv, const char* summary) {
    const char* prog = argc > 0 ? argv[0] : "program";
    for (int i = 0; i < n; i++) {
        const char* why = args_set_value(&table[i], out, table[i].default_value);
        if (why != NULL) { llmc_die("internal: bad default \"%s\" for %s: %s", table[i].default_value, table[i].flag, why); }
    }
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--help") == 0) {
            args_print_help_of(table, backends, backend, n, prog, summary, stdout);
            exit(0);
        }
        const ArgSpec* spec = NULL;
        for (int j = 0; j < n; j++) {
            if (strcmp(argv[i], table[j].flag) != 0) { continue; }
            if (!args_takes(backends, backend, j)) { args_refuse_backend(argv[i], backends[j], prog); }
            spec = &table[j];
            break;
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

// a tool's own table: every row is taken
static inline void args_parse(const ArgSpec* table, int n, void* out, int argc, char** argv, const char* summary) {
    args_parse_of(table, NULL, 0, n, out, argc, argv, summary);
}

// one line per option `backend` takes: flag, value, help, for the start of a run's log
static inline void args_print_values_of(const ArgSpec* table, const int* backends, int backend, int n, const void* in,
                                        FILE* out) {
    for (int i = 0; i < n; i++) {
        if (!args_takes(backends, backend, i)) { continue; }
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

static inline void args_print_values(const ArgSpec* table, int n, const void* in, FILE* out) {
    args_print_values_of(table, NULL, 0, n, in, out);
}

// ----------------------------------------------------------------------------
// a trainer's command line: TRAIN_ARG_TABLE (or a copy with rows changed in place, as -e's default) parsed for
// the program's backend, a TrainBackend bit

static inline void train_args_parse(const ArgSpec* table, int backend, TrainArgs* out, int argc, char** argv,
                                    const char* summary) {
    args_parse_of(table, TRAIN_ARG_BACKENDS, backend, TRAIN_ARG_COUNT, out, argc, argv, summary);
}

// the flags this backend takes and their values, for the start of a run's log
static inline void train_args_print_values(const ArgSpec* table, int backend, const TrainArgs* in, FILE* out) {
    args_print_values_of(table, TRAIN_ARG_BACKENDS, backend, TRAIN_ARG_COUNT, in, out);
}

#endif // LLMC_ARGS_H
