/*
dev/test/test_args.c: llmc/args.h, the one argument table behind both trainers' parsing and --help:
every flag of the help text is parsed with its default, the GPU trainer's flags (multi-process ones
included) exist under their names, and an unknown flag is one error line.
*/
#include "../../llmc/args.h"
#include "test_common.h"

// ----------------------------------------------------------------------------
// command line: the table behind --help is the table behind the parser

static void test_help_matches_parser(void) {
    char path[4096];
    snprintf(path, sizeof(path), "%s/llmc_help_%d.txt", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    FILE* f = fopen(path, "w+");
    if (f == NULL) { perror(path); exit(2); }
    args_print_help(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, "train_gpt2cu", "summary", f);
    fflush(f);
    size_t n = (size_t)ftell(f);
    rewind(f);
    char* help = (char*)calloc(n + 1, 1);
    if (fread(help, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
    unlink(path);
    // every flag printed by --help is accepted by the parser with its default value
    int parsed = 0, flags_in_help = 0;
    for (char* line = strtok(help, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char flag[32];
        if (sscanf(line, " %31s", flag) != 1 || flag[0] != '-') { continue; }
        flags_in_help++;
        for (int i = 0; i < TRAIN_ARG_COUNT; i++) {
            if (strcmp(TRAIN_ARG_TABLE[i].flag, flag) != 0) { continue; }
            TrainArgs a;
            char* argv[] = {(char*)"train_gpt2cu", flag, (char*)TRAIN_ARG_TABLE[i].default_value, NULL};
            args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &a, 3, argv, "");
            parsed++;
        }
    }
    free(help);
    CHECK(flags_in_help == TRAIN_ARG_COUNT, "help lists all %d flags (listed %d)", TRAIN_ARG_COUNT, flags_in_help);
    CHECK(parsed == flags_in_help, "every flag in the help text is parsed (%d of %d)", parsed, flags_in_help);
    // the flags train_gpt2cu reads exist under these exact names
    const char* needed[] = {"-i", "-j", "-e", "-o", "-b", "-t", "-d", "-x", "-k", "-l", "-u", "-q", "-c", "-v", "-m", "-s",
                            "-g", "-n", "-nk", "-y", "-a", "-h", "-he", "-z", "-r", "-w", "-sl", "-sg",
                            "-pn", "-pr", "-pg", "-pi", "-ps", "-pf"};
    int missing = 0;
    for (size_t k = 0; k < sizeof(needed) / sizeof(needed[0]); k++) {
        int found = 0;
        for (int i = 0; i < TRAIN_ARG_COUNT; i++) { found |= strcmp(TRAIN_ARG_TABLE[i].flag, needed[k]) == 0; }
        if (!found) { printf("  missing flag %s\n", needed[k]); missing++; }
    }
    CHECK(missing == 0, "the GPU trainer's flags are all in the table (%d missing)", missing);
}

static void parse_pm(void* arg) {
    (void)arg;
    TrainArgs a;
    char* argv[] = {(char*)"train_gpt2cu", (char*)"-pm", (char*)"tcp", NULL};
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &a, 3, argv, "");
}

static void test_multi_process_flags(void) {
    expect_die("-pm is not a flag", parse_pm, NULL, "-pm", "--help");
    TrainArgs a;
    char* argv[] = {(char*)"t", (char*)"-pi", (char*)"fs", (char*)"-pf", (char*)"/shared/x", (char*)"-pn", (char*)"4",
                    (char*)"-pr", (char*)"3", NULL};
    args_parse(TRAIN_ARG_TABLE, TRAIN_ARG_COUNT, &a, 9, argv, "");
    CHECK(strcmp(a.nccl_init_method, "fs") == 0 && strcmp(a.fs_path, "/shared/x") == 0 && a.num_processes == 4 &&
          a.process_rank == 3, "-pi -pf -pn -pr parse into the fields multi_gpu_init reads");
}

int main(void) {
    test_help_matches_parser();
    test_multi_process_flags();
    return test_summary();
}
