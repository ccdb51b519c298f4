/*
dev/test/test_args.c: llmc/args.h, the one argument table behind every trainer's parsing and --help:
for each backend, --help lists exactly the rows it takes, each of them is parsed with its default and
each other row's flag is refused in one line naming the programs that take it; every backend still
gets every field's default; the GPU trainers' flags (multi-process ones included) exist under their
names, and an unknown flag is one error line.
*/
#include "../../llmc/args.h"
#include "test_common.h"

static const int BACKENDS[] = {TRAIN_CPU, TRAIN_GPU, TRAIN_OPENCL};
static const char* PROGRAMS[] = {"./train_gpt2", "./train_gpt2cu", "./train_gpt2cl"};

// the --help text of a backend's table, malloc'd
static char* help_of(int backend, const char* prog) {
    char* text = NULL;
    size_t size = 0;
    FILE* f = open_memstream(&text, &size);
    if (f == NULL) { perror("open_memstream"); exit(2); }
    args_print_help_of(TRAIN_ARG_TABLE, TRAIN_ARG_BACKENDS, backend, TRAIN_ARG_COUNT, prog, "summary", f);
    fclose(f);
    return text;
}

// whether the help text has a row for flag ("  -r   int ...")
static int help_lists(const char* help, const char* flag) {
    char row[40];
    snprintf(row, sizeof(row), "\n  %s ", flag);
    return strstr(help, row) != NULL;
}

typedef struct {
    int backend;
    const char* prog;
    const char* flag;
    const char* value;
} ParseCase;

static void parse_case(void* arg) {
    const ParseCase* c = (const ParseCase*)arg;
    TrainArgs a;
    char* argv[] = {(char*)c->prog, (char*)c->flag, (char*)c->value, NULL};
    train_args_parse(TRAIN_ARG_TABLE, c->backend, &a, 3, argv, "");
}

// ----------------------------------------------------------------------------
// command line: the table behind --help is the table behind the parser, per backend

static void test_help_matches_parser(void) {
    for (int b = 0; b < (int)(sizeof(BACKENDS) / sizeof(BACKENDS[0])); b++) {
        char* help = help_of(BACKENDS[b], PROGRAMS[b]);
        int listed = 0, taken = 0, parsed = 0, refused = 0;
        for (int i = 0; i < TRAIN_ARG_COUNT; i++) {
            const ArgSpec* s = &TRAIN_ARG_TABLE[i];
            int takes = (TRAIN_ARG_BACKENDS[i] & BACKENDS[b]) != 0;
            taken += takes;
            listed += help_lists(help, s->flag);
            CHECK(help_lists(help, s->flag) == takes, "%s --help %s %s", PROGRAMS[b], takes ? "lists" : "leaves out", s->flag);
            ParseCase c = {BACKENDS[b], PROGRAMS[b], s->flag, s->default_value};
            if (takes) {
                parse_case(&c);  // dies (and fails the program) if the flag is not taken
                parsed++;
            } else {
                char not_of[96];
                snprintf(not_of, sizeof(not_of), "not of %s", PROGRAMS[b]);
                int before = tests_failed;
                expect_die(s->flag, parse_case, &c, "a flag of ", not_of);
                refused += tests_failed == before;
            }
        }
        CHECK(taken > 0 && listed == taken && parsed == taken && refused == TRAIN_ARG_COUNT - taken,
              "%s: %d flags listed and parsed, %d refused, of %d", PROGRAMS[b], parsed, refused, TRAIN_ARG_COUNT);
        free(help);
    }
    // the generic help (a tool's own table) lists every row
    char* text = NULL;
    size_t size = 0;
    FILE* f = open_memstream(&text, &size);
    args_print_help(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, "t", "summary", f);
    fclose(f);
    int all = 0;
    for (int i = 0; i < TRAIN_ARG_COUNT; i++) { all += help_lists(text, TRAIN_ARG_TABLE[i].flag); }
    CHECK(all == TRAIN_ARG_COUNT, "args_print_help lists all %d rows (listed %d)", TRAIN_ARG_COUNT, all);
    free(text);
}

// the trainers of the registry's rows (llmc/families.h), "./train_<name><suffix>" joined by ", ": every row's (gpu 0),
// or the rows with a GPU trainer's (gpu 1)
#define TEST_FAMILY_ROW_(name, DESCRIPTION, GPU, refs, refs_dir) {#name, GPU},
static const struct { const char* name; int gpu; } TEST_FAMILIES[] = {LLMC_FAMILIES(TEST_FAMILY_ROW_)};
static const char* registry_trainers(int gpu, const char* suffix) {
    static char lists[2][512];
    char* out = lists[gpu];
    out[0] = '\0';
    for (size_t i = 0; i < sizeof(TEST_FAMILIES) / sizeof(TEST_FAMILIES[0]); i++) {
        if (gpu && !TEST_FAMILIES[i].gpu) { continue; }
        snprintf(out + strlen(out), 512 - strlen(out), "%s./train_%s%s", out[0] ? ", " : "", TEST_FAMILIES[i].name, suffix);
    }
    return out;
}

// the refusal names the backends that take the flag, in one line
static void test_refusal_line(void) {
    const char* cpu = registry_trainers(0, "");
    const char* gpu = registry_trainers(1, "cu");
    char want[2048];
    ParseCase r = {TRAIN_CPU, "./train_gpt2", "-r", "1"};
    snprintf(want, sizeof(want), "error: flag -r: a flag of the GPU trainers (%s), not of ./train_gpt2\n", gpu);
    expect_die("-r on the CPU", parse_case, &r, want, NULL);
    ParseCase z = {TRAIN_OPENCL, "./train_gpt2cl", "-z", "1"};
    snprintf(want, sizeof(want), "error: flag -z: a flag of the CPU trainers (%s) and the GPU trainers (%s), not of "
             "./train_gpt2cl\n", cpu, gpu);
    expect_die("-z in OpenCL", parse_case, &z, want, NULL);
    ParseCase p = {TRAIN_GPU, "./train_llama3cu", "-p", "bf16"};
    snprintf(want, sizeof(want), "error: flag -p: a flag of the CPU trainers (%s) and the OpenCL trainer (./train_gpt2cl), "
             "not of ./train_llama3cu\n", cpu);
    expect_die("-p on the GPU", parse_case, &p, want, NULL);
    // refused before its value is looked at: no value, or a bad one, is still the backend's line
    ParseCase bare = {TRAIN_OPENCL, "./train_gpt2cl", "-ol", NULL};
    expect_die("-ol without a value in OpenCL", parse_case, &bare, "flag -ol: a flag of the CPU trainers", "not of ./train_gpt2cl");
}

// every backend gets every field's default, its own flags or not
static void test_every_field_has_its_default(void) {
    for (int b = 0; b < (int)(sizeof(BACKENDS) / sizeof(BACKENDS[0])); b++) {
        TrainArgs a;
        memset(&a, 0x5a, sizeof(a));
        char* argv[] = {(char*)PROGRAMS[b], NULL};
        train_args_parse(TRAIN_ARG_TABLE, BACKENDS[b], &a, 1, argv, "");
        CHECK(a.recompute == 0 && a.use_master_weights == 1 && a.gpus_per_node == 8 && strcmp(a.nccl_init_method, "mpi") == 0 &&
              strcmp(a.precision, "fp32") == 0 && a.cl_platform == 0 && a.cl_list_devices == 0 && a.resume == 0 &&
              strcmp(a.optimizer, "adamw") == 0 && a.muon_ns_steps == 5 && a.B == 4 && a.T == 64,
              "%s: every field of TrainArgs has its default", PROGRAMS[b]);
    }
}

// ----------------------------------------------------------------------------
// the GPU trainers' multi-process flags

static void test_multi_process_flags(void) {
    const char* needed[] = {"-i", "-j", "-e", "-o", "-b", "-t", "-d", "-x", "-k", "-l", "-u", "-q", "-c", "-v", "-m", "-s",
                            "-g", "-n", "-nk", "-y", "-a", "-h", "-he", "-z", "-r", "-w", "-sl", "-sg",
                            "-pn", "-pr", "-pg", "-pi", "-ps", "-pf"};
    char* help = help_of(TRAIN_GPU, "train_gpt2cu");
    int missing = 0;
    for (size_t k = 0; k < sizeof(needed) / sizeof(needed[0]); k++) {
        if (!help_lists(help, needed[k])) { printf("  missing flag %s\n", needed[k]); missing++; }
    }
    free(help);
    CHECK(missing == 0, "the GPU trainers' flags are all theirs (%d missing)", missing);
    ParseCase pm = {TRAIN_GPU, "train_gpt2cu", "-pm", "tcp"};
    expect_die("-pm is not a flag", parse_case, &pm, "unknown flag \"-pm\"", "--help");
    TrainArgs a;
    char* argv[] = {(char*)"t", (char*)"-pi", (char*)"fs", (char*)"-pf", (char*)"/shared/x", (char*)"-pn", (char*)"4",
                    (char*)"-pr", (char*)"3", NULL};
    train_args_parse(TRAIN_ARG_TABLE, TRAIN_GPU, &a, 9, argv, "");
    CHECK(strcmp(a.nccl_init_method, "fs") == 0 && strcmp(a.fs_path, "/shared/x") == 0 && a.num_processes == 4 &&
          a.process_rank == 3, "-pi -pf -pn -pr parse into the fields multi_gpu_init reads");
}

int main(void) {
    test_help_matches_parser();
    test_refusal_line();
    test_every_field_has_its_default();
    test_multi_process_flags();
    return test_summary();
}
