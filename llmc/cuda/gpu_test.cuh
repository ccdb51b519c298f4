/*
llmc/cuda/gpu_test.cuh: what every GPU test program (test_gpt2.cu) does around its model against the
reference's debug state, written once. The model is driven the way trainer_run drives it, through its
GpuTrainer's ops (llmc/cuda/gpu_trainer.cuh); each process takes its rows of the debug state's batch.

    gpu_test_processes(mg, argc, argv, zero_stage)   the processes (from MPI when launched by mpirun, else one;
                              refused when a launcher started several but this build has no MPI)
    gpu_test_exact_fp32(m)    FP32 builds: true fp32 GEMMs (TF32 off), for the tight tolerances
    GpuTestRun                the model's GpuTrainer and ops, the debug state, this process's rows and micro-batches
    gpu_test_run_init(r, model, mg, d, state_path, micro_batches)   this process's rows (dies when B does not
                              split evenly); gpu_test_run_start(r, calls) once the model's state is allocated
    gpu_test_forward_backward(r)   one step's gradients as trainer_run computes them; the loss (mean over
                              micro-batches and processes)
    gpu_test_train_step(r, t) one optimizer step with the debug state's settings; the loss before it
    gpu_test_logits(r, logits)   every process's rows of the logits (B, T, V) in fp32, on every process
    gpu_test_grads(r, grads)  the step's reduced gradients, all of them, in fp32, on every process
    gpu_test_print_optimizer(out, d)   the debug state's optimizer, one line
    gpu_test_resume(r, out, report, tmp_dir, reload)   checkpoint through the trainer's save calls, 3 steps,
                              reload (the model's reload of its parameters from the checkpoint, then the state),
                              the same 3 steps again: the losses and the final parameters bit for bit
    gpu_test_verdict(r, out, report)   the summary line; the exit status, non-zero on every process if any
                              process failed a check
*/
#ifndef LLMC_GPU_TEST_CUH
#define LLMC_GPU_TEST_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../utils.h"
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

// this process's part of the debug state's batch, and the trainer ops that feed it to the model
typedef struct {
    GpuModel* model;
    MultiGpu* mg;
    GpuTrainer gpu;
    TrainerOps ops;
    const DebugState* d;
    int row0;           // the first row of the batch this process takes
    int micro_batches;  // -a
    int micro_B;        // rows per micro-batch (the model's B)
} GpuTestRun;

// this process's rows and micro-batches of the debug state's batch (the model's state is then allocated for
// micro-batches of r->micro_B rows, and gpu_test_run_start gives the run its ops)
static void gpu_test_run_init(GpuTestRun* r, GpuModel* model, MultiGpu* mg, const DebugState* d, const char* state_path,
                              int micro_batches) {
    const int nproc = mg->num_processes;
    if (d->B % (nproc * micro_batches) != 0) {
        llmc_die("%s: B = %d rows do not split into %d processes x %d micro-batches (-a) of equal size", state_path, d->B,
                 nproc, micro_batches);
    }
    memset(r, 0, sizeof(*r));
    r->model = model;
    r->mg = mg;
    r->d = d;
    r->micro_batches = micro_batches;
    r->micro_B = d->B / (nproc * micro_batches);
    r->row0 = mg->process_rank * (d->B / nproc);
}

static void gpu_test_run_start(GpuTestRun* r, GpuModelCalls calls) {
    gpu_trainer_init(&r->gpu, r->model, calls, r->mg);
    r->ops = gpu_trainer_ops(&r->gpu);
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

// one step's gradients as trainer_run computes them; returns the loss (mean over micro-batches and processes)
static float gpu_test_forward_backward(GpuTestRun* r) {
    r->ops.zero_grad(r->ops.ctx);
    double loss_sum = 0.0;
    for (int m = 0; m < r->micro_batches; m++) {
        loss_sum += r->ops.forward_backward(r->ops.ctx, gpu_test_micro_rows(r, r->d->x, m), gpu_test_micro_rows(r, r->d->y, m),
                                            1.0f / (float)r->micro_batches, m == r->micro_batches - 1);
    }
    return gpu_test_mean_over_processes(r->mg, (float)(loss_sum / r->micro_batches));
}

// one optimizer step with the debug state's settings (AdamW, or Muon and AdamW); returns the loss before the update
static float gpu_test_train_step(GpuTestRun* r, int t) {
    const DebugState* d = r->d;
    float loss = gpu_test_forward_backward(r);
    float norm = r->ops.grad_norm(r->ops.ctx);
    gpu_model_update(r->model, r->mg, d->lr, gpu_model_muon_lr(r->model, d->lr), d->beta1, d->beta2, d->eps, d->weight_decay,
                     grad_clip_scale(norm, d->grad_clip), t);
    cudaCheck(cudaStreamSynchronize(r->model->stream));
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
    GpuModel* m = r->model;
    const size_t V = (size_t)m->vocab_size, S = m->logits_stride, BT = (size_t)r->micro_B * r->d->T;
    const size_t local = BT * r->micro_batches * V;
    float* mine = (float*)mallocCheck(local * sizeof(float));
    floatX* staging_x = (floatX*)mallocCheck(BT * S * sizeof(floatX));
    float* staging_f = (float*)mallocCheck(BT * S * sizeof(float));
    for (int micro = 0; micro < r->micro_batches; micro++) {
        r->gpu.calls.forward(m, gpu_test_micro_rows(r, r->d->x, micro), NULL, 0.0f, 0);
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
    GpuModel* m = r->model;
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

// Bit-exact resume, through the functions trainer_run saves and loads a checkpoint with: after the debug
// state's steps, the model (rank 0) and every rank's optimizer state to tmp_dir, 3 more steps; then reload
// (the model's: its parameters from the model file at path) and the state, and the same 3 steps again. The
// losses and the final parameters must match bit for bit. Removes the files and tmp_dir.
static void gpu_test_resume(GpuTestRun* r, FILE* out, CheckReport* report, const char* tmp_dir,
                            void (*reload)(GpuModel* m, const char* path)) {
    MultiGpu* mg = r->mg;
    GpuModel* m = r->model;
    const int rank = mg->process_rank;
    if (rank == 0) { mkdir_p_check(tmp_dir); }
    multi_gpu_barrier(mg);
    TrainerDetectors detectors;
    trainer_detectors_init(&detectors);
    const int resume_steps = 3;
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
    if (rank == 0) { gpu_save_model(&r->gpu, model_path); }
    gpu_save_state(&r->gpu, state_path, &saved, &detectors);
    multi_gpu_barrier(mg);  // every file in place
    float first[resume_steps], second[resume_steps];
    for (int i = 0; i < resume_steps; i++) { first[i] = gpu_test_train_step(r, saved_step + i + 1); }
    float* params_first = (float*)mallocCheck(m->num_parameters * sizeof(float));
    float* params_second = (float*)mallocCheck(m->num_parameters * sizeof(float));
    gpu_model_download_parameters(m, params_first);
    reload(m, model_path);
    TrainState expect = saved, got;
    gpu_load_state(&r->gpu, state_path, &expect, &got, &detectors);
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

#endif // LLMC_GPU_TEST_CUH
