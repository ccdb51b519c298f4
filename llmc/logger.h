/*
llmc/logger.h: appends training events to <log_dir>/main.log, one line per event:
    s:STEP trl:LOSS lr:LR norm:NORM     a training step       ("s:%d trl:%f lr:%f norm:%f")
    s:STEP tel:LOSS                     a validation loss     ("s:%d tel:%f")
    s:STEP eval:ACC                     HellaSwag accuracy    ("s:%d eval:%f")
These are llm.c's lines, so its plotting habits carry over (dev/vislog.py reads them).
Only process rank 0 writes. The directory is created if missing (like mkdir -p). A fresh run
truncates main.log; a resumed run appends. Each event opens, writes, flushes and closes the
file, so the log is complete at any moment (a crash loses nothing written before it).
*/
#ifndef LLMC_LOGGER_H
#define LLMC_LOGGER_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "utils.h"

typedef struct {
    int active;                  // 0: logging is off (no directory, or not rank 0)
    char output_log_file[4096];  // <log_dir>/main.log
} Logger;

static inline void logger_init(Logger* l, const char* log_dir, int process_rank, int resume) {
    l->active = 0;
    l->output_log_file[0] = '\0';
    if (log_dir == NULL || log_dir[0] == '\0' || process_rank != 0) {
        return;
    }
    int n = snprintf(l->output_log_file, sizeof(l->output_log_file), "%s/main.log", log_dir);
    if (n < 0 || (size_t)n >= sizeof(l->output_log_file)) {
        llmc_die("%s: log directory path too long", log_dir);
    }
    mkdir_p_check(log_dir);
    // a fresh run starts an empty log; a resumed one keeps what is there
    FILE* f = fopenCheck(l->output_log_file, resume ? "a" : "w");
    fcloseCheck(f, l->output_log_file);
    l->active = 1;
}

// appends one formatted line; dies with one line if the write fails (e.g. disk full)
static inline LLMC_PRINTF(2, 3) void logger_append_(Logger* l, const char* fmt, ...) {
    if (!l->active) {
        return;
    }
    FILE* f = fopenCheck(l->output_log_file, "a");
    va_list args;
    va_start(args, fmt);
    int rc = vfprintf(f, fmt, args);
    va_end(args);
    if (rc < 0 || fflush(f) != 0) {
        llmc_die("%s: write failed (%s)", l->output_log_file, strerror(errno));
    }
    fcloseCheck(f, l->output_log_file);
}

static inline void logger_log_train(Logger* l, int step, float loss, float lr, float grad_norm) {
    logger_append_(l, "s:%d trl:%f lr:%f norm:%f\n", step, (double)loss, (double)lr, (double)grad_norm);
}

static inline void logger_log_val(Logger* l, int step, float val_loss) {
    logger_append_(l, "s:%d tel:%f\n", step, (double)val_loss);
}

static inline void logger_log_eval(Logger* l, int step, float accuracy) {
    logger_append_(l, "s:%d eval:%f\n", step, (double)accuracy);
}

#endif // LLMC_LOGGER_H
