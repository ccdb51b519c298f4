/*
llmc/cuda/gpu_test.cuh: what every GPU test program (test_gpt2.cu) does around its model against the
reference's debug state, written once. The model is driven the way trainer_run drives it, through its
GpuTrainer's ops (llmc/cuda/gpu_trainer.cuh); each process takes its rows of the debug state's batch.

    gpu_test_processes(mg, argc, argv, zero_stage)   the processes (from MPI when launched by mpirun, else one;
                              refused when a launcher started several but this build has no MPI)
    gpu_test_exact_fp32(m)    FP32 builds: true fp32 GEMMs (TF32 off), for the tight tolerances
    GpuTestRun                the model's GpuTrainer and ops, the debug state, this process's rows and micro-batches
    gpu_test_run_init(r, model, gpu, mg, d, state_path, micro_batches)   this process's rows (dies when B does not
                              split evenly); gpu_test_run_start(r, calls) once the model's state is allocated
    gpu_test_forward_backward(r)   one step's gradients as trainer_run computes them; the loss (mean over
                              micro-batches and processes). A masked debug state (header[18] = 1: y is -1 where a
                              position is not supervised): the gradients and the loss of the mean over the batch's
                              N supervised positions, each micro-batch at loss_scale = processes x its B x T / N
    gpu_test_train_step(r, t) one optimizer step with the debug state's settings and learning rates; the loss
                              before it
    gpu_test_logits(r, logits)   every process's rows of the logits (B, T, V) in fp32, on every process
    gpu_test_grads(r, grads)  the step's reduced gradients, all of them, in fp32, on every process
    gpu_test_print_optimizer(out, d)   the debug state's optimizer, one line
    gpu_test_resume(r, out, report, tmp_dir, p)   checkpoint through the trainer's save calls, 3 steps,
                              reload (the parameters from the checkpoint through its family's model file
                              (llmc/model_file.h), then the state),
                              the same 3 steps again: the losses and the final parameters bit for bit
    gpu_test_verdict(r, out, report)   the summary line; the exit status, non-zero on every process if any
                              process failed a check
    GpuTestProgram            what differs between the test programs: their family (the reference, its files as
                              the flags' defaults, the debug state, the model file), their flags' help, their
                              model's calls (the trainer's GpuModelCalls table), and the lines and checks of the test
    gpu_test_main(argc, argv, p, model, gpu)   a test program's main() (model: its model struct, gpu the
                              GpuModel in it): the flags (-e -s -o [-ge] -r -a -z), the processes, the model and
                              debug state, then steps 1-4 of test_gpt2.cu around the program's calls; returns the
                              exit status
*/
#ifndef LLMC_GPU_TEST_CUH
#define LLMC_GPU_TEST_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../utils.h"
#include "../args.h"
#include "../debug_state.h"
#include "../tensor_check.h"
#include "gpu_trainer.cuh"

// the process count an MPI launcher gave this process (1 when not launched by one)
static int gpu_test_launcher_size(void) {
    const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char* v = getenv(vars[i]);
        if (v != NULL && atoi(v) > 1) { return atoi(v); }
    }
    return 1;
}

// processes: from MPI when launched by mpirun (the trainer's default -pi mpi), else one
static void gpu_test_processes(MultiGpu* mg, int* argc, char*** argv, int zero_stage) {
    multi_gpu_init(mg, argc, argv, 1, 0, 1, "mpi", "", "", zero_stage, 0);
    if (mg->num_processes == 1 && gpu_test_launcher_size() > 1) {
        llmc_die("launched as one of %d processes, but this build has no MPI: each would run the whole test alone "
                 "(build with MPI and NCCL)", gpu_test_launcher_size());
    }
}

// FP32 builds: true fp32 GEMMs (TF32 off); BF16 builds unchanged
static void gpu_test_exact_fp32(GpuModel* m) {
#if !PRECISION_IS_BF16
    m->cublas.compute_type = CUBLAS_COMPUTE_32F;
    cublasCheck(cublasSetMathMode(m->cublas.handle, CUBLAS_DEFAULT_MATH));
#else
    (void)m;
#endif
}

typedef struct {
    const char* model_path;
    const char* state_path;
    const char* tmp_dir;
    int gelu_fusion;
    int recompute;
    int micro_batches;
    int zero_stage;
} GpuTestArgs;

// what differs between the GPU test programs; the model's calls take the program's model struct (which holds its
// GpuModel)
typedef struct {
    const char* about;           // --help's text
    const ModelFamily* family;   // the model's: its reference, the files it writes (the defaults), its debug state
    const char* model_kind;      // "checkpoint": what -e names in its "no such" line
    const char* model_help;      // -e's help
    const char* tmp_default;     // -o: the resume check's scratch directory
    const char* recompute_help;  // -r's help
    const char* zeros_note;      // the exact zeros the gradient rows check, for the line that says what is checked
    const GpuModelCalls* calls;  // the trainer's: init, Muon, state, -ge (NULL: the program has no -ge), forward,
                                 // backward (the model's line is its family's: llmc/model_family.h)
    // the exact zeros of gradient tensor k (grad: its values; T: the debug state's) added to c; NULL: none
    void (*exact_zeros)(TensorCheck* c, const void* model, int k, const float* grad, int T);
} GpuTestProgram;

// this process's part of the debug state's batch, and the trainer ops that feed it to the model
typedef struct {
    void* model;        // the program's model struct, and its GpuModel
    GpuModel* gpu;
    MultiGpu* mg;
    GpuTrainer trainer;
    TrainerOps ops;
    const DebugState* d;
    int row0;           // the first row of the batch this process takes
    int micro_batches;  // -a
    int micro_B;        // rows per micro-batch (the model's B)
} GpuTestRun;

// this process's rows and micro-batches of the debug state's batch (the model's state is then allocated for
// micro-batches of r->micro_B rows, and gpu_test_run_start gives the run its ops)
static void gpu_test_run_init(GpuTestRun* r, void* model, GpuModel* gpu, MultiGpu* mg, const DebugState* d,
                              const char* state_path, int micro_batches) {
    const int nproc = mg->num_processes;
    if (d->B % (nproc * micro_batches) != 0) {
        llmc_die("%s: B = %d rows do not split into %d processes x %d micro-batches (-a) of equal size", state_path, d->B,
                 nproc, micro_batches);
    }
    memset(r, 0, sizeof(*r));
    r->model = model;
    r->gpu = gpu;
    r->mg = mg;
    r->d = d;
    r->micro_batches = micro_batches;
    r->micro_B = d->B / (nproc * micro_batches);
    r->row0 = mg->process_rank * (d->B / nproc);
}

static void gpu_test_run_start(GpuTestRun* r, const GpuModelCalls* calls) {
    gpu_trainer_init(&r->trainer, r->model, calls, r->gpu, r->mg);
    r->ops = gpu_trainer_ops(&r->trainer);
}

// rows of micro-batch `micro` of this process, in a (B, T) array of the debug state
static const int* gpu_test_micro_rows(const GpuTestRun* r, const int* tokens, int micro) {
    return tokens + ((size_t)r->row0 + (size_t)micro * r->micro_B) * r->d->T;
}

// the mean of x over the processes (as trainer_mean_over_processes)
static float gpu_test_mean_over_processes(MultiGpu* mg, float x) {
    if (mg->num_processes > 1) {
        multi_gpu_sum_host_floats(mg, &x, 1);
        x /= (float)mg->num_processes;
    }
    return x;
}

// a masked debug state's step (llmc/debug_state.h header[18]): the gradients of the mean cross-entropy over the
// batch's N supervised positions (y >= 0), as trainer_run computes them on chat shards. A micro-batch's
// forward_backward returns the mean over its micro_B x T positions (a masked one counting 0) and takes the gradients
// of loss_scale times it; the processes' gradients are then averaged, so loss_scale = nproc x micro_B x T / N gives
// the mean over N. N is the whole batch's count, which every process knows (each holds the whole state). Returns
// the loss: the supervised positions' summed loss over micro-batches and processes, divided by N.
static float gpu_test_masked_forward_backward(GpuTestRun* r) {
    const int nproc = r->mg->num_processes;
    const double micro_BT = (double)r->micro_B * (double)r->d->T;
    const double N = (double)debug_state_supervised(r->d);
    const float loss_scale = (float)((double)nproc * micro_BT / N);  // as llmc/trainer.h's masked step computes it
    double loss_sum = 0.0;
    for (int m = 0; m < r->micro_batches; m++) {
        float mean = r->ops.forward_backward(r->ops.ctx, gpu_test_micro_rows(r, r->d->x, m), gpu_test_micro_rows(r, r->d->y, m),
                                             loss_scale, m == r->micro_batches - 1);
        loss_sum += (double)mean * micro_BT;
    }
    float total = (float)loss_sum;
    if (nproc > 1) { multi_gpu_sum_host_floats(r->mg, &total, 1); }
    return (float)((double)total / N);
}

// one step's gradients as trainer_run computes them; returns the loss (mean over micro-batches and processes; for a
// masked state the mean over the supervised positions)
static float gpu_test_forward_backward(GpuTestRun* r) {
    r->ops.zero_grad(r->ops.ctx);
    if (r->d->masked) { return gpu_test_masked_forward_backward(r); }
    double loss_sum = 0.0;
    for (int m = 0; m < r->micro_batches; m++) {
        loss_sum += r->ops.forward_backward(r->ops.ctx, gpu_test_micro_rows(r, r->d->x, m), gpu_test_micro_rows(r, r->d->y, m),
                                            1.0f / (float)r->micro_batches, m == r->micro_batches - 1);
    }
    return gpu_test_mean_over_processes(r->mg, (float)(loss_sum / r->micro_batches));
}

// one optimizer step with the debug state's settings (AdamW, or Muon and AdamW: both at the state's constant
// learning rates, the Muon lr 0 for AdamW as trainer_run gives it); returns the loss before the update
static float gpu_test_train_step(GpuTestRun* r, int t) {
    const DebugState* d = r->d;
    float loss = gpu_test_forward_backward(r);
    float norm = r->ops.grad_norm(r->ops.ctx);
    gpu_model_update(r->gpu, r->mg, d->lr, d->optimizer == 1 ? d->muon_lr : 0.0f, d->beta1, d->beta2, d->eps, d->weight_decay,
                     grad_clip_scale(norm, d->grad_clip), t);
    cudaCheck(cudaStreamSynchronize(r->gpu->stream));
    return loss;
}

// every process's n host floats in rank order, on every process (all: num_processes * n floats)
static void gpu_test_allgather_host_floats(MultiGpu* mg, float* all, const float* mine, size_t n) {
    if (mg->num_processes == 1) {
        memcpy(all, mine, n * sizeof(float));
        return;
    }
#ifdef USE_NCCL
    size_t mine_at = (size_t)mg->process_rank * n;
    float* dev = (float*)cudaMallocCheck(n * (size_t)mg->num_processes * sizeof(float));
    cudaCheck(cudaMemcpy(dev + mine_at, mine, n * sizeof(float), cudaMemcpyHostToDevice));
    ncclCheck(ncclAllGather(dev + mine_at, dev, n, ncclFloat, mg->comm, mg->nccl_stream));
    cudaCheck(cudaStreamSynchronize(mg->nccl_stream));
    cudaCheck(cudaMemcpy(all, dev, n * (size_t)mg->num_processes * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaFree(dev));
#else
    llmc_die("internal: %d processes in a build without NCCL", mg->num_processes);
#endif
}

// the logits (B, T, V) of the whole batch on every process: this process's rows from forward passes without
// targets, micro-batch by micro-batch, then every process's gathered
static void gpu_test_logits(GpuTestRun* r, float* logits) {
    GpuModel* m = r->gpu;
    const size_t V = (size_t)m->vocab_size, S = m->logits_stride, BT = (size_t)r->micro_B * r->d->T;
    const size_t local = BT * r->micro_batches * V;
    float* mine = (float*)mallocCheck(local * sizeof(float));
    floatX* staging_x = (floatX*)mallocCheck(BT * S * sizeof(floatX));
    float* staging_f = (float*)mallocCheck(BT * S * sizeof(float));
    for (int micro = 0; micro < r->micro_batches; micro++) {
        r->trainer.calls->forward(r->model, gpu_test_micro_rows(r, r->d->x, micro), NULL, 0.0f, 0);
        cudaCheck(cudaMemcpy(staging_x, m->logits, BT * S * sizeof(floatX), cudaMemcpyDeviceToHost));
        float_from_floatX_host(staging_f, staging_x, BT * S);
        for (size_t bt = 0; bt < BT; bt++) { memcpy(mine + ((size_t)micro * BT + bt) * V, staging_f + bt * S, V * sizeof(float)); }
    }
    gpu_test_allgather_host_floats(r->mg, logits, mine, local);
    free(mine);
    free(staging_x);
    free(staging_f);
}

// the step's reduced gradients, all of them, on every process: with ZeRO-1 a process holds only its own
// shard reduced, so the shards are all-gathered first (the same collective as the parameters' after the update)
static void gpu_test_grads(GpuTestRun* r, float* grads) {
    GpuModel* m = r->gpu;
    floatX* staging = (floatX*)mallocCheck(m->num_parameters * sizeof(floatX));
    multi_gpu_sync(r->mg, m->stream);
    multi_gpu_gather_params(r->mg, m->grads_memory, m->stream);
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(staging, m->grads_memory, m->num_parameters * sizeof(floatX), cudaMemcpyDeviceToHost));
    float_from_floatX_host(grads, staging, m->num_parameters);
    free(staging);
}

static double gpu_test_l2_norm(const float* x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) { s += (double)x[i] * (double)x[i]; }
    return sqrt(s);
}

static void gpu_test_print_optimizer(FILE* out, const DebugState* d) {
    if (d->optimizer == 1) {
        fprintf(out, "optimizer: Muon (lr %g, momentum %g, nesterov %d, %d Newton-Schulz steps, lr adjustment %s) on the blocks' "
                     "2-D weights, AdamW (lr %g) on the rest\n", d->muon_lr, d->muon_momentum, d->muon_nesterov, d->muon_ns_steps,
                d->muon_adjust_lr == 1 ? "match_rms_adamw" : "original", d->lr);
    } else {
        fprintf(out, "optimizer: AdamW (lr %g)\n", d->lr);
    }
}

// replaces the parameters with those of a model file of the program's family and of the same shape (the
// resume check)
static void gpu_test_reload_parameters(const GpuTestProgram* p, GpuModel* m, const char* path) {
    int version = 0;
    const ModelFileFormat* format = p->family->model_file;
    void* cfg = mallocCheck(format->config_size);
    FILE* f = model_file_open(path, format, cfg, &version);
    if (memcmp(cfg, m->config, format->config_size) != 0) { llmc_die("%s: a different model shape than this run's model", path); }
    free(cfg);
    float* host = (float*)mallocCheck(m->num_parameters * sizeof(float));
    model_file_read_params(f, path, version, host, m->num_parameters);
    fcloseCheck(f, path);
    gpu_model_upload_parameters(m, host);
    free(host);
}

// Bit-exact resume, through the functions trainer_run saves and loads a checkpoint with: after the debug
// state's steps, the model (rank 0) and every rank's optimizer state to tmp_dir, 2 more steps; then reload
// (the program's family's model file: its parameters) and the state, and the same 2 steps again. The
// losses and the final parameters must match bit for bit: the first loss needs the loaded parameters, the
// second and the parameters every piece of the loaded optimizer state (moments, Muon's momentum, the step
// count, the stochastic-rounding seed). Removes the files and tmp_dir.
static void gpu_test_resume(GpuTestRun* r, FILE* out, CheckReport* report, const char* tmp_dir, const GpuTestProgram* p) {
    MultiGpu* mg = r->mg;
    GpuModel* m = r->gpu;
    const int rank = mg->process_rank;
    if (rank == 0) { mkdir_p_check(tmp_dir); }
    multi_gpu_barrier(mg);
    TrainerDetectors detectors;
    trainer_detectors_init(&detectors);
    const int resume_steps = 2;
    const int saved_step = r->d->nsteps;
    char model_path[4200], state_path[4200];
    trainer_checkpoint_path(model_path, sizeof(model_path), tmp_dir, "model", saved_step, -1);
    trainer_checkpoint_path(state_path, sizeof(state_path), tmp_dir, "state", saved_step, rank);
    TrainState saved;
    memset(&saved, 0, sizeof(saved));
    saved.num_processes = mg->num_processes;
    saved.process_rank = rank;
    saved.zero_stage = mg->zero_stage;
    saved.step = saved_step;
    if (rank == 0) { gpu_save_model(&r->trainer, model_path); }
    gpu_save_state(&r->trainer, state_path, &saved, &detectors);
    multi_gpu_barrier(mg);  // every file in place
    float first[resume_steps], second[resume_steps];
    for (int i = 0; i < resume_steps; i++) { first[i] = gpu_test_train_step(r, saved_step + i + 1); }
    float* params_first = (float*)mallocCheck(m->num_parameters * sizeof(float));
    float* params_second = (float*)mallocCheck(m->num_parameters * sizeof(float));
    gpu_model_download_parameters(m, params_first);
    gpu_test_reload_parameters(p, m, model_path);
    TrainState expect = saved, got;
    gpu_load_state(&r->trainer, state_path, &expect, &got, &detectors);
    for (int i = 0; i < resume_steps; i++) { second[i] = gpu_test_train_step(r, saved_step + i + 1); }
    gpu_model_download_parameters(m, params_second);
    check_bitwise(out, report, "resume loss", first, second, resume_steps);
    check_bitwise(out, report, "resume params", params_first, params_second, m->num_parameters);
    free(params_first);
    free(params_second);
    multi_gpu_barrier(mg);  // every process read the checkpoint
    unlink(state_path);
    if (rank == 0) { unlink(model_path); }
    multi_gpu_barrier(mg);
    if (rank == 0) { rmdir(tmp_dir); }
}

// every process compared the same gathered tensors; a failure anywhere fails every process
static int gpu_test_verdict(GpuTestRun* r, FILE* out, const CheckReport* report) {
    const int nproc = r->mg->num_processes;
    float failures = (float)report->failures;
    if (nproc > 1) { multi_gpu_sum_host_floats(r->mg, &failures, 1); }
    check_report_summary(out, report);
    if (failures != (float)report->failures * (float)nproc) {
        fprintf(stderr, "rank %d: %d check(s) failed here, %.0f over all %d processes\n", r->mg->process_rank, report->failures,
                failures, nproc);
    }
    return check_report_exit_code(report) != 0 || failures > 0.0f ? 1 : 0;
}

// ----------------------------------------------------------------------------
// a test program's main() around its model


static void gpu_test_args_parse(GpuTestArgs* a, int argc, char** argv, const GpuTestProgram* p) {
    char state_help[128];
    snprintf(state_help, sizeof(state_help), "debug state written by %s", p->family->reference);
    const ArgSpec all[] = {
        {"-e", ARG_STRING, offsetof(GpuTestArgs, model_path), p->family->reference_model, 0, 0, p->model_help},
        {"-s", ARG_STRING, offsetof(GpuTestArgs, state_path), p->family->reference_state, 0, 0, state_help},
        {"-o", ARG_STRING, offsetof(GpuTestArgs, tmp_dir), p->tmp_default, 0, 0, "scratch directory for the resume check"},
        {"-ge", ARG_INT, offsetof(GpuTestArgs, gelu_fusion), "0", 0, 1, "1 = GELU fused into the cuBLASLt epilogues (forward and backward)"},
        {"-r", ARG_INT, offsetof(GpuTestArgs, recompute), "0", 0, 2, p->recompute_help},
        {"-a", ARG_INT, offsetof(GpuTestArgs, micro_batches), "1", 1, 65536,
         "gradient accumulation: each process's rows of the batch as N micro-batches"},
        {"-z", ARG_INT, offsetof(GpuTestArgs, zero_stage), "0", 0, 1,
         "ZeRO stage when run as several processes (mpirun -np 2): 0 all-reduce, 1 sharded optimizer"},
    };
    const int count = (int)(sizeof(all) / sizeof(all[0]));
    ArgSpec table[sizeof(all) / sizeof(all[0])];
    int n = 0;
    for (int i = 0; i < count; i++) {
        if (strcmp(all[i].flag, "-ge") != 0 || p->calls->set_gelu_fusion != NULL) { table[n++] = all[i]; }
    }
    memset(a, 0, sizeof(*a));
    args_parse(table, n, a, argc, argv, p->about);
    debug_state_require_files(a->model_path, p->model_kind, a->state_path, p->family->reference);
}


// steps 1 and 2: the logits, the loss, every gradient tensor (with the exact zeros the program names), the rows of
// dwte whose token is not in the batch on their own, and the global gradient norm
static void gpu_test_check_gradients(GpuTestRun* r, const GpuTestProgram* p, FILE* out, CheckReport* report,
                                     const TestTolerances* tol) {
    GpuModel* m = r->gpu;
    const DebugState* d = r->d;
    const int T = d->T, V = m->vocab_size, C = m->channels;
    const size_t BT = (size_t)d->B * T;
    // 1. logits
    float* logits = (float*)mallocCheck(BT * V * sizeof(float));
    gpu_test_logits(r, logits);
    check_table_header_l2(out);
    TensorCheck c = tensor_check_l2(logits, d->logits, BT * V, tol->logits_rtol, tol->logits_atol, tol->logits_l2);
    check_table_row_l2(out, report, "logits", &c);
    free(logits);

    // 2. loss, gradients, gradient norm
    float loss = gpu_test_forward_backward(r);
    check_scalar_l2(out, report, "loss", loss, d->loss, tol->loss_atol);
    float* grads = (float*)mallocCheck(m->num_parameters * sizeof(float));
    gpu_test_grads(r, grads);
    for (int k = 0; k < m->num_tensors; k++) {
        size_t off = m->param_offsets[k], n = m->param_sizes[k];
        if (n == 0) { continue; }  // Llama 3's lm_head when tied
        char name[32];
        snprintf(name, sizeof(name), "d%s", m->names[k]);
        c = tensor_check_l2(grads + off, d->grads + off, n, tol->grad_rtol, 0.0, tol->grad_l2);
        if (p->exact_zeros != NULL) { p->exact_zeros(&c, r->model, k, grads + off, T); }
        check_table_row_l2(out, report, name, &c);
    }
    // wte (tensor 0): rows of C, the first V of them tokens (GPT-2 pads to Vp)
    const size_t rows = m->param_sizes[0] / (size_t)C;
    unsigned char* unseen = (unsigned char*)mallocCheck(rows);
    for (size_t v = 0; v < rows; v++) { unseen[v] = v < (size_t)V; }
    for (size_t i = 0; i < BT; i++) { unseen[d->x[i]] = 0; }
    c = tensor_check_rows(grads, d->grads, (size_t)C, unseen, rows, tol->grad_rtol, 0.0, tol->grad_l2);
    check_table_row_l2(out, report, "dwte unseen", &c);
    free(unseen);
    free(grads);
    float norm = r->ops.grad_norm(r->ops.ctx);
    float ref_norm = (float)gpu_test_l2_norm(d->grads, m->num_parameters);
    check_scalar_l2(out, report, "grad norm", norm, ref_norm, tol->grad_l2 * ref_norm);
}

// A test program's main(): the model (its build call, from the model file) and the debug state, each process its
// rows of the batch; steps 1-4 (the logits, the gradients, the reference's optimizer steps, bit-exact resume) and
// the verdict. model: the program's model struct, gpu its GpuModel. Returns the exit status.
static int gpu_test_main(int argc, char** argv, const GpuTestProgram* p, void* model, GpuModel* gpu) {
    GpuTestArgs args;
    gpu_test_args_parse(&args, argc, argv, p);

    // processes: from MPI when launched by mpirun (the trainer's default -pi mpi), else one
    MultiGpu mg;
    gpu_test_processes(&mg, &argc, &argv, args.zero_stage);
    const int rank = mg.process_rank, nproc = mg.num_processes;
    FILE* out = rank == 0 ? stdout : fopenCheck("/dev/null", "w");
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    DeviceInfo dev;
    device_info_query(&dev, mg.local_device_idx);

    gpu_model_build(gpu, p->family, p->calls, model, args.model_path, 1, mg.zero_stage, nproc);
    mg.num_parameters = gpu->num_parameters;
    mg.shard = zero_shard(gpu->num_parameters, mg.zero_stage, nproc, rank);
    DebugState d;
    debug_state_read_format(&d, args.state_path, p->family->debug_state, gpu->max_seq_len, gpu->vocab_size, gpu->num_parameters);
    GpuTestRun run;
    gpu_test_run_init(&run, model, gpu, &mg, &d, args.state_path, args.micro_batches);
    if (d.optimizer == 1) {  // Muon on the blocks' 2-D weights with the debug state's settings; ZeRO-1: whole matrices per rank
        MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
        gpu_model_use_muon_of(gpu, p->calls, model, &muon, mg.zero_stage == 1 ? nproc : 1, rank);
    }
    p->calls->allocate_state(model, run.micro_B, d.T, args.recompute, mg.shard, 1, stream);
    if (p->calls->set_gelu_fusion != NULL) { p->calls->set_gelu_fusion(model, args.gelu_fusion); }  // -ge
    gpu_test_exact_fp32(gpu);
    gpu_test_run_start(&run, p->calls);

    TestTolerances tol = gpu_tolerances(PRECISION_IS_BF16);
    fprintf(out, "%s, precision %s; model %s (", dev.name, PRECISION_NAME, args.model_path);
    char line[256];
    model_family_describe(p->family, gpu->config, line, sizeof(line));
    fprintf(out, "%s", line);
    fprintf(out, "), debug state B=%d T=%d, %d steps\n", d.B, d.T, d.nsteps);
    fprintf(out, "variant: ");
    if (p->calls->set_gelu_fusion != NULL) { fprintf(out, "-ge %d ", args.gelu_fusion); }
    fprintf(out, "-r %d -a %d, %d process(es)%s: micro-batches of B=%d\n", args.recompute, args.micro_batches, nproc,
            nproc > 1 ? (mg.zero_stage == 1 ? " with ZeRO-1" : " with ZeRO-0") : "", run.micro_B);
    fprintf(out, "per tensor: max abs diff <= tolerance and relative L2 error <= L2 bound; %sdwte unseen: the rows of the "
                 "tokens not in the batch, on their own\n", p->zeros_note);
    gpu_test_print_optimizer(out, &d);
    if (d.masked) {
        fprintf(out, "masked debug state: %zu of the %d x %d positions supervised; the loss and the gradients are of the "
                     "mean over those\n", debug_state_supervised(&d), d.B, d.T);
    }
    step_loss_rule_print(out, &d, &tol);
    CheckReport report = {0, 0};

    // 1., 2. the logits, the loss, the gradients and their norm
    gpu_test_check_gradients(&run, p, out, &report, &tol);

    // 3. the reference's optimizer steps
    for (int step = 0; step < d.nsteps; step++) {
        float step_loss = gpu_test_train_step(&run, step + 1);
        char name[32];
        snprintf(name, sizeof(name), "loss step %d", step);
        check_scalar_l2(out, &report, name, step_loss, d.losses[step], step_loss_tolerance(&d, step, &tol));
    }

    // 4. bit-exact resume
    gpu_test_resume(&run, out, &report, args.tmp_dir, p);

    int status = gpu_test_verdict(&run, out, &report);
    gpu_trainer_free(&run.trainer);
    debug_state_free(&d);
    gpu_model_free(gpu);
    cudaCheck(cudaStreamDestroy(stream));
    if (out != stdout) { fclose(out); }
    multi_gpu_free(&mg);
    return status;
}

#endif // LLMC_GPU_TEST_CUH
