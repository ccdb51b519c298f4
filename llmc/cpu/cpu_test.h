/*
llmc/cpu/cpu_test.h: what every CPU test program (test_gpt2.c, test_llama3.c, ...) does around its model, written
once: the model (-e, as the trainers build it), its line (its family's config line), the flags, the lines that say
what is checked, the table rows, the steps and the verdict. Each program gives its family (tensor names, debug-state
format, the reference's files) and its model's calls (allocate, forward, backward).

    cpu_test_args_parse(a, argc, argv, p)   -e model, -s debug state, -p precision (defaults and the
                                          error lines from the program's CpuTestProgram); both files
                                          must exist
    cpu_test_begin(t, state_path, d, l2)  the tolerances of the precision (llmc/tensor_check.h,
                                          cpu_tolerances), then the debug state's line (with its Muon
                                          settings), the precision and the step-loss rule
    cpu_test_table_header(t)              the table: narrow, or with l2 the relative L2 columns too
    cpu_test_tensor(t, name, got, ref, n, rtol, atol, l2_bound)   one row; l2_bound applies in the wide table only
    cpu_test_scalar(t, name, got, ref, atol)
    cpu_test_grads(t, grads, sizes, names, n)   a row per gradient tensor ("d" name; none for size 0)
    cpu_test_step_loss(t, step, loss)     the loss before optimizer step step + 1 (step_loss_tolerance)
    cpu_test_finish(t)                    the summary line; returns the exit status
    cpu_test_main(argc, argv, p, family, model, calls, cm)   a test program's main(): all of the above around the
                                          model's calls (llmc/cpu/cpu_model.h) and the program's
                                          CpuTestProgram. A masked state (llmc/debug_state.h, header[18]): N of
                                          the B*T targets supervised, the others -1; every backward runs with
                                          loss_scale = B*T / N (the gradients of the mean over the N), and the
                                          model's loss (the mean over B*T, a masked position counting 0) is
                                          compared times B*T / N
    CPU_TEST_MAIN(Model, init, family, calls, about, model_kind, wide)   a test program's whole main(), after its
                                          trainer is included with LLMC_NO_MAIN: its model (type and initialiser),
                                          family, calls and CpuTestProgram fields
*/
#ifndef LLMC_CPU_TEST_H
#define LLMC_CPU_TEST_H

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../utils.h"
#include "../args.h"
#include "matmul.h"
#include "../muon_config.h"
#include "cpu_model.h"
#include "cpu_trainer.h"
#include "../trainer.h"
#include "../debug_state.h"
#include "../tensor_check.h"

typedef struct {
    const char* model_path;
    const char* state_path;
    const char* precision;
} CpuTestArgs;

// what differs between the test programs
typedef struct {
    const char* about;          // --help's first line
    const char* model_kind;     // "model checkpoint": -e's help and its "no such" line
    int wide;                   // the wide table (relative L2 columns and bounds) and every step's gradient norm
} CpuTestProgram;

static void cpu_test_args_parse(CpuTestArgs* a, int argc, char** argv, const CpuTestProgram* p, const ModelFamily* family) {
    const char* script = family->reference;
    char model_help[128], state_help[128];
    snprintf(model_help, sizeof(model_help), "%s written by %s", p->model_kind, script);
    snprintf(state_help, sizeof(state_help), "debug state written by %s", script);
    const ArgSpec table[] = {
        {"-e", ARG_STRING, offsetof(CpuTestArgs, model_path), family->reference_model, 0, 0, model_help},
        {"-s", ARG_STRING, offsetof(CpuTestArgs, state_path), family->reference_state, 0, 0, state_help},
        {"-p", ARG_STRING, offsetof(CpuTestArgs, precision), "fp32", 0, 0, "GEMM precision: fp32 | bf16 (bf16-rounded inputs, fp32 sums)"},
    };
    args_parse(table, (int)(sizeof(table) / sizeof(table[0])), a, argc, argv, p->about);
    cpu_parse_precision(a->precision, argv[0]);
    if (!file_exists(a->model_path)) {
        llmc_die("%s: no such %s (python %s --write_tensors 1 writes it)", a->model_path, p->model_kind, script);
    }
    if (!file_exists(a->state_path)) {
        llmc_die("%s: no such debug state (python %s --write_tensors 1 writes it)", a->state_path, script);
    }
}

typedef struct {
    const DebugState* d;
    TestTolerances tol;
    int l2;               // the wide table: relative L2 columns, and the logits and gradients held to their L2 bounds
    CheckReport report;
} CpuTest;

static void cpu_test_begin(CpuTest* t, const char* state_path, const DebugState* d, int l2) {
    t->d = d;
    t->tol = cpu_tolerances(matmul_precision == MATMUL_BF16);
    t->l2 = l2;
    t->report = (CheckReport){0, 0};
    printf("debug state %s: B=%d T=%d, %d steps of AdamW (lr %g, betas %g %g, eps %g, wd %g, clip %g)\n",
           state_path, d->B, d->T, d->nsteps, d->lr, d->beta1, d->beta2, d->eps, d->weight_decay, d->grad_clip);
    if (d->masked) {
        printf("  masked: %zu of %d positions supervised (targets -1 elsewhere), losses the means over them\n",
               debug_state_supervised(d), d->B * d->T);
    }
    if (d->optimizer == OPTIMIZER_MUON) {
        printf("  with Muon on the block matrices (lr %g, momentum %g, nesterov %d, %d Newton-Schulz steps, lr adjustment %s)\n",
               d->muon_lr, d->muon_momentum, d->muon_nesterov, d->muon_ns_steps,
               d->muon_adjust_lr == MUON_ADJUST_ORIGINAL ? "original" : "match_rms_adamw");
    }
    char gemm[128] = "";
    if (matmul_precision == MATMUL_BF16) { matmul_bf16_gemm_describe(gemm, sizeof(gemm)); }
    printf("precision %s%s\n", matmul_precision == MATMUL_BF16 ? "bf16 (GEMM inputs rounded to bf16) on " : "fp32", gemm);
    step_loss_rule_print(stdout, d, &t->tol);
}

static void cpu_test_table_header(const CpuTest* t) {
    if (t->l2) {
        check_table_header_l2(stdout);
    } else {
        check_table_header(stdout);
    }
}

static void cpu_test_row_(CpuTest* t, const char* name, const TensorCheck* c) {
    if (t->l2) {
        check_table_row_l2(stdout, &t->report, name, c);
    } else {
        check_table_row(stdout, &t->report, name, c);
    }
}

static void cpu_test_tensor(CpuTest* t, const char* name, const float* got, const float* ref, size_t n, double rtol,
                            double atol, double l2_bound) {
    TensorCheck c = tensor_check_l2(got, ref, n, rtol, atol, t->l2 ? l2_bound : 0.0);
    cpu_test_row_(t, name, &c);
}

static void cpu_test_scalar(CpuTest* t, const char* name, float got, float ref, double atol) {
    cpu_test_tensor(t, name, &got, &ref, 1, 0.0, atol, 0.0);
}

// grads and the reference's: n tensors of sizes[k] floats back to back
static void cpu_test_grads(CpuTest* t, const float* grads, const size_t* sizes, const char* const* names, int n) {
    size_t off = 0;
    for (int k = 0; k < n; k++) {
        if (sizes[k] == 0) { continue; } // Llama 3's lm_head when tied
        char name[32];
        snprintf(name, sizeof(name), "d%s", names[k]);
        cpu_test_tensor(t, name, grads + off, t->d->grads + off, sizes[k], t->tol.grad_rtol, 0.0, t->tol.grad_l2);
        off += sizes[k];
    }
}

static void cpu_test_step_loss(CpuTest* t, int step, float loss) {
    char name[32];
    snprintf(name, sizeof(name), "loss step %d", step);
    cpu_test_scalar(t, name, loss, t->d->losses[step], step_loss_tolerance(t->d, step, &t->tol));
}

// the loss of the state's batch from the model's mean over its B*T positions: itself, or in a masked state (a masked
// position counting 0 in that mean) the mean over the supervised positions, mean * B*T / N
static float cpu_test_loss(const DebugState* d, float mean_loss) {
    if (!d->masked) { return mean_loss; }
    return (float)((double)mean_loss * ((double)d->B * d->T) / (double)debug_state_supervised(d));
}

static int cpu_test_finish(const CpuTest* t) {
    printf("\n");
    check_report_summary(stdout, &t->report);
    return check_report_exit_code(&t->report);
}

// A test program's main(): the model (cpu_model_build from the model file), the debug state, the forward and
// backward on its batch against the reference (logits, loss, every gradient), then its optimizer steps
// (losses, and with p->wide the gradient norms). Returns the exit status.
static int cpu_test_main(int argc, char** argv, const CpuTestProgram* p, const ModelFamily* family, void* model,
                         const CpuModelCalls* calls, CpuModel* cm) {
    CpuTestArgs args;
    cpu_test_args_parse(&args, argc, argv, p, family);
    cpu_model_build(cm, family, model, calls, args.model_path, 1);
    DebugState d;
    debug_state_read_format(&d, args.state_path, family->debug_state, cm->max_seq_len, cm->vocab_size, cm->num_parameters);
    char line[512];
    cpu_model_line(cm, line, sizeof(line));
    printf("model %s: %s\n", args.model_path, line);
    int B = d.B, T = d.T, V = cm->vocab_size;
    CpuTest t;
    cpu_test_begin(&t, args.state_path, &d, p->wide);
    double norm_rtol = t.tol.is_bf16 ? 5e-2 : 1e-4;
    // the backward's scale: 1 (the mean over B*T), or in a masked state B*T / N, so that the gradients are those of the
    // mean over the N supervised positions, the reference's
    float loss_scale = d.masked ? (float)(B * T) / (float)debug_state_supervised(&d) : 1.0f;
    calls->allocate_activations(model, B, T);
    if (d.optimizer == OPTIMIZER_MUON) {
        MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
        cpu_model_allocate_muon(cm, &muon, 0, 1, 0);
    } else {
        cpu_model_allocate_optimizer(cm, 0, cm->num_parameters);
    }

    // the recorded batch's logits: a forward pass without targets keeps them (training's, which a backward pass
    // follows, runs the classifier a chunk of rows at a time and keeps none); ours are (B,T,logits_stride) (GPT-2
    // pads V), the reference's (B,T,V)
    calls->forward(model, d.x, NULL, B, T);
    float* logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    for (size_t bt = 0; bt < (size_t)B * T; bt++) {
        memcpy(logits + bt * V, cm->logits + bt * cm->logits_stride, (size_t)V * sizeof(float));
    }
    // forward and backward on the recorded batch, as the trainers run them
    cpu_model_zero_grad(cm);
    cpu_model_expect_backward(cm, loss_scale);
    calls->forward(model, d.x, d.y, B, T);
    calls->backward(model, loss_scale);

    cpu_test_table_header(&t);
    cpu_test_tensor(&t, "logits", logits, d.logits, (size_t)B * T * V, t.tol.logits_rtol, t.tol.logits_atol, t.tol.logits_l2);
    free(logits);
    cpu_test_scalar(&t, "loss", cpu_test_loss(&d, cm->mean_loss), d.loss, t.tol.loss_atol);
    cpu_test_grads(&t, cm->grads_memory, cm->param_sizes, family->tensor_names, cm->num_tensors);

    // nsteps of the optimizer on the same batch; losses[i] is the loss before update i+1, grad_norms[i] its norm
    for (int step = 0; step < d.nsteps; step++) {
        cpu_model_zero_grad(cm);
        cpu_model_expect_backward(cm, loss_scale);
        calls->forward(model, d.x, d.y, B, T);
        cpu_test_step_loss(&t, step, cpu_test_loss(&d, cm->mean_loss));
        calls->backward(model, loss_scale);
        float norm = cpu_model_grad_norm(cm);
        if (p->wide) {
            char name[32];
            snprintf(name, sizeof(name), "norm step %d", step);
            cpu_test_scalar(&t, name, norm, d.grad_norms[step], norm_rtol * fabs((double)d.grad_norms[step]));
        }
        float scale = grad_clip_scale(norm, d.grad_clip);
        if (d.optimizer == OPTIMIZER_MUON) {
            cpu_model_update_muon(cm, d.lr, d.muon_lr, d.beta1, d.beta2, d.eps, d.weight_decay, scale, step + 1);
        } else {
            cpu_model_update(cm, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, scale, step + 1);
        }
    }

    int status = cpu_test_finish(&t);
    debug_state_free(&d);
    cpu_model_free_with(cm, calls, model);
    return status;
}

// A test program's main(): its trainer included with LLMC_NO_MAIN, the program is this one line. Model is the model's
// type (a struct with a CpuModel named cpu), init its initialiser ({0}, or a decoder's {.family = &LLAMA3_FAMILY}),
// family and calls its family's description and the model's calls, about, model_kind and wide its CpuTestProgram's.
#define CPU_TEST_MAIN(Model, init, family, calls, about_line, kind, wide_table) \
    int main(int argc, char** argv) { \
        static const CpuTestProgram program = {.about = (about_line), .model_kind = (kind), .wide = (wide_table)}; \
        Model model = init; \
        return cpu_test_main(argc, argv, &program, (family), &model, (calls), &model.cpu); \
    }

#endif // LLMC_CPU_TEST_H
