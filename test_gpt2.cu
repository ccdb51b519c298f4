/*
test_gpt2.cu: the GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_gpt2.py --write_tensors 1     (writes gpt2_124M.bin and gpt2_124M_debug_state.bin)
    make test_gpt2cu && ./test_gpt2cu          (PRECISION=FP32 for the tight tolerances)
    python dev/cuda_cpu_refs.py                (a d2 model and debug state in build/cuda_cpu_refs: -e, -s)

The model is driven the way train_gpt2.cu's training loop drives it (llmc/trainer.h trainer_run, through
the GpuTrainer ops): per optimizer step zero_grad, forward_backward of each micro-batch with loss scale
1/N (the last one starting the gradient reduction over the processes), the loss averaged over the
processes, the global gradient norm, clipping, gpt2_update. Variants, each checked against the same
debug state and the same tolerances:
    -ge 1     GELU fused into the cuBLASLt epilogues (GELU_AUX_BIAS forward, DGELU backward)
    -r 1|2    the backward recomputes the GELU (1), and the layernorms too (2)
    -a N      gradient accumulation: each process's rows as N micro-batches (loss scale 1/N each, the
              gradients summed in floatX over the micro-batches)
    mpirun -np P ./test_gpt2cu -z 0|1
              process p takes rows [p B/P, (p+1) B/P) of the batch (then split by -a); the gradients are
              averaged over NCCL (-z 0: all-reduce; -z 1 ZeRO-1: reduce to each shard's owner, AdamW on
              the shard, all-gather of the parameters). Rank 0 prints the table; every rank's exit
              status is non-zero if any rank failed a check.
The debug state's B must split evenly: B = 4 covers -a 2, -a 4, two processes, two processes with -a 2.

1. forward on the recorded batch: logits (B, T, V) (every process's rows, gathered)
2. backward: the loss, each of the 16 parameter gradients per tensor (with ZeRO-1 each process reduces
   only its shard, so the shards are all-gathered before the comparison), the exact zeros a correct
   gradient has (wte's padded rows V..Vp-1, wpe's rows T..maxT-1), the rows of wte whose token is not
   in the batch on their own ("dwte unseen": the classifier's contribution alone, a heavy tail that
   holds 1e-4..1.6e-3 of dwte's energy and would hide inside the whole tensor's norm), and the global
   gradient norm the update clips with
3. the reference's optimizer steps on that batch (AdamW with the debug state's settings, or, for a
   debug state written with --optimizer muon, Muon on the blocks' 2-D weights and AdamW on the rest;
   gradient clipping, constant LR): every step's loss, within the tolerance derived from the float32 noise
   the reference measured for that step (step_loss_tolerance in llmc/tensor_check.h, the same
   rule as test_gpt2.c's)
4. resume: checkpoint after those steps (model by rank 0, optimizer state by every rank, Muon's momentum
   included), run 3 more
   steps, reload the checkpoint and run the same 3 steps again; the losses and the final parameters
   must match bit for bit
Exit status 0 only if every check passed. The comparison logic and the tolerances are
llmc/tensor_check.h's (gpu_tolerances: max-abs, relative L2 error, exact zeros; tested on the CPU with
corrupted inputs). FP32 builds use true fp32 GEMMs here (TF32 off).
*/
#define LLMC_NO_MAIN
#include "train_gpt2.cu"
#include "llmc/tensor_check.h"

typedef struct {
    const char* model_path;
    const char* state_path;
    const char* tmp_dir;
    int gelu_fusion;
    int recompute;
    int micro_batches;
    int zero_stage;
} TestArgs;

static const ArgSpec TEST_ARG_TABLE[] = {
    {"-e", ARG_STRING, offsetof(TestArgs, model_path), "gpt2_124M.bin", 0, 0, "model checkpoint written by train_gpt2.py"},
    {"-s", ARG_STRING, offsetof(TestArgs, state_path), "gpt2_124M_debug_state.bin", 0, 0, "debug state written by train_gpt2.py"},
    {"-o", ARG_STRING, offsetof(TestArgs, tmp_dir), "test_gpt2cu_resume", 0, 0, "scratch directory for the resume check"},
    {"-ge", ARG_INT, offsetof(TestArgs, gelu_fusion), "0", 0, 1, "1 = GELU fused into the cuBLASLt epilogues (forward and backward)"},
    {"-r", ARG_INT, offsetof(TestArgs, recompute), "0", 0, 2, "activation recompute: 0 none, 1 GELU, 2 GELU and layernorms"},
    {"-a", ARG_INT, offsetof(TestArgs, micro_batches), "1", 1, 65536,
     "gradient accumulation: each process's rows of the batch as N micro-batches"},
    {"-z", ARG_INT, offsetof(TestArgs, zero_stage), "0", 0, 1,
     "ZeRO stage when run as several processes (mpirun -np 2): 0 all-reduce, 1 sharded optimizer"},
};
#define TEST_ARG_COUNT ((int)(sizeof(TEST_ARG_TABLE) / sizeof(TEST_ARG_TABLE[0])))

// this process's part of the debug state's batch, and the trainer ops that feed it to the model
typedef struct {
    GPT2* model;
    MultiGpu* mg;
    GpuTrainer gpu;
    TrainerOps ops;
    const DebugState* d;
    int row0;           // the first row of the batch this process takes
    int micro_batches;  // -a
    int micro_B;        // rows per micro-batch (the model's B)
} TestRun;

// rows of micro-batch `micro` of this process, in a (B, T) array of the debug state
static const int* test_micro_rows(const TestRun* r, const int* tokens, int micro) {
    return tokens + ((size_t)r->row0 + (size_t)micro * r->micro_B) * r->d->T;
}

// the mean of x over the processes (as trainer_mean_over_processes)
static float test_mean_over_processes(MultiGpu* mg, float x) {
    if (mg->num_processes > 1) {
        multi_gpu_sum_host_floats(mg, &x, 1);
        x /= (float)mg->num_processes;
    }
    return x;
}

// one step's gradients as trainer_run computes them; returns the loss (mean over micro-batches and processes)
static float test_forward_backward(TestRun* r) {
    r->ops.zero_grad(r->ops.ctx);
    double loss_sum = 0.0;
    for (int m = 0; m < r->micro_batches; m++) {
        loss_sum += r->ops.forward_backward(r->ops.ctx, test_micro_rows(r, r->d->x, m), test_micro_rows(r, r->d->y, m),
                                            1.0f / (float)r->micro_batches, m == r->micro_batches - 1);
    }
    return test_mean_over_processes(r->mg, (float)(loss_sum / r->micro_batches));
}

// one optimizer step with the debug state's settings (AdamW, or Muon and AdamW); returns the loss before the update
static float test_train_step(TestRun* r, int t) {
    const DebugState* d = r->d;
    float loss = test_forward_backward(r);
    float norm = r->ops.grad_norm(r->ops.ctx);
    gpt2_update(r->model, r->mg, d->lr, gpt2_muon_lr(r->model, d->lr), d->beta1, d->beta2, d->eps, d->weight_decay,
                grad_clip_scale(norm, d->grad_clip), t);
    cudaCheck(cudaStreamSynchronize(r->model->stream));
    return loss;
}

// every process's n host floats in rank order, on every process (all: num_processes * n floats)
static void test_allgather_host_floats(MultiGpu* mg, float* all, const float* mine, size_t n) {
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

// this process's rows of the logits (V columns), from forward passes without targets, micro-batch by micro-batch
static void test_local_logits(TestRun* r, float* logits, floatX* staging_x, float* staging_f) {
    GPT2* m = r->model;
    const int V = m->config.vocab_size, Vp = m->config.padded_vocab_size;
    const size_t BT = (size_t)r->micro_B * r->d->T;
    for (int micro = 0; micro < r->micro_batches; micro++) {
        gpt2_forward(m, test_micro_rows(r, r->d->x, micro), NULL, 0.0f, 0);
        cudaCheck(cudaMemcpy(staging_x, m->acts.output, BT * Vp * sizeof(floatX), cudaMemcpyDeviceToHost));
        float_from_floatX_host(staging_f, staging_x, BT * Vp);
        for (size_t bt = 0; bt < BT; bt++) {
            memcpy(logits + ((size_t)micro * BT + bt) * V, staging_f + bt * Vp, (size_t)V * sizeof(float));
        }
    }
}

// the step's reduced gradients, all of them, on every process: with ZeRO-1 a process holds only its own
// shard reduced, so the shards are all-gathered first (the same collective as the parameters' after the update)
static void test_download_grads(TestRun* r, float* grads, floatX* staging_x) {
    GPT2* m = r->model;
    multi_gpu_sync(r->mg, m->stream);
    multi_gpu_gather_params(r->mg, m->grads_memory, m->stream);
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(staging_x, m->grads_memory, m->num_parameters * sizeof(floatX), cudaMemcpyDeviceToHost));
    float_from_floatX_host(grads, staging_x, m->num_parameters);
}

// replaces the parameters with those of a checkpoint of the same shape (the resume check)
static void gpt2_reload_parameters(GPT2* model, const char* path) {
    int version = 0;
    GPT2Config ckpt_cfg;
    FILE* f = checkpoint_open(path, &ckpt_cfg, &version);
    if (memcmp(&ckpt_cfg, &model->config, sizeof(GPT2Config)) != 0) { llmc_die("%s: a different model shape than this run's model", path); }
    float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
    model_file_read_params(f, path, version, host, model->num_parameters);
    fcloseCheck(f, path);
    gpt2_upload_parameters(model, host);
    free(host);
}

// the process count an MPI launcher gave this process (1 when not launched by one)
static int test_launcher_size(void) {
    const char* vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"};
    for (int i = 0; i < 2; i++) {
        const char* v = getenv(vars[i]);
        if (v != NULL && atoi(v) > 1) { return atoi(v); }
    }
    return 1;
}

static double test_l2_norm(const float* x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) { s += (double)x[i] * (double)x[i]; }
    return sqrt(s);
}

int main(int argc, char** argv) {
    TestArgs args;
    args_parse(TEST_ARG_TABLE, TEST_ARG_COUNT, &args, argc, argv,
               "test_gpt2cu: checks the GPU trainer against python train_gpt2.py --write_tensors 1, then bit-exact resume.\n"
               "Run it as several processes with mpirun -np 2 ./test_gpt2cu [-z 1].");
    if (!file_exists(args.model_path)) { llmc_die("%s: no such checkpoint (python train_gpt2.py --write_tensors 1 writes it)", args.model_path); }
    if (!file_exists(args.state_path)) { llmc_die("%s: no such debug state (python train_gpt2.py --write_tensors 1 writes it)", args.state_path); }

    // processes: from MPI when launched by mpirun (the trainer's default -pi mpi), else one
    MultiGpu mg;
    multi_gpu_init(&mg, &argc, &argv, 1, 0, 1, "mpi", "", "", args.zero_stage, 0);
    const int rank = mg.process_rank, nproc = mg.num_processes;
    if (nproc == 1 && test_launcher_size() > 1) {
        llmc_die("launched as one of %d processes, but this build has no MPI: each would run the whole test alone "
                 "(build with MPI and NCCL)", test_launcher_size());
    }
    FILE* out = rank == 0 ? stdout : fopenCheck("/dev/null", "w");
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    DeviceInfo dev;
    device_info_query(&dev, mg.local_device_idx);

    GPT2 model;
    gpt2_build(&model, args.model_path, mg.zero_stage, nproc);
    mg.num_parameters = model.num_parameters;
    mg.shard = zero_shard(model.num_parameters, mg.zero_stage, nproc, rank);
    const GPT2Config* cfg = &model.config;
    DebugState d;
    debug_state_read(&d, args.state_path, cfg, model.num_parameters);
    const int B = d.B, T = d.T, V = cfg->vocab_size, Vp = cfg->padded_vocab_size, C = cfg->channels;
    const size_t BT = (size_t)B * T;
    if (B % (nproc * args.micro_batches) != 0) {
        llmc_die("%s: B = %d rows do not split into %d processes x %d micro-batches (-a) of equal size", args.state_path, B,
                 nproc, args.micro_batches);
    }
    TestRun run;
    memset(&run, 0, sizeof(run));
    run.model = &model;
    run.mg = &mg;
    run.d = &d;
    run.micro_batches = args.micro_batches;
    run.micro_B = B / (nproc * args.micro_batches);
    run.row0 = rank * (B / nproc);
    if (d.optimizer == 1) {  // Muon on the blocks' 2-D weights with the debug state's settings; ZeRO-1: whole matrices per rank
        MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
        gpt2_use_muon(&model, &muon, d.lr, mg.zero_stage == 1 ? nproc : 1, rank);
    }
    gpt2_allocate_state(&model, run.micro_B, T, args.recompute, mg.shard, 1, stream);
    model.gelu_fusion = args.gelu_fusion;  // -ge
#if !PRECISION_IS_BF16
    model.cublas.compute_type = CUBLAS_COMPUTE_32F;
    cublasCheck(cublasSetMathMode(model.cublas.handle, CUBLAS_DEFAULT_MATH));
#endif
    gpu_trainer_init(&run.gpu, &model, &mg);
    run.ops = gpu_trainer_ops(&run.gpu);

    TestTolerances tol = gpu_tolerances(PRECISION_IS_BF16);
    fprintf(out, "%s, precision %s; model %s (L=%d C=%d NH=%d), debug state B=%d T=%d, %d steps\n", dev.name, PRECISION_NAME,
            args.model_path, cfg->num_layers, C, cfg->num_heads, B, T, d.nsteps);
    fprintf(out, "variant: -ge %d -r %d -a %d, %d process(es)%s: micro-batches of B=%d\n", args.gelu_fusion, args.recompute,
            args.micro_batches, nproc, nproc > 1 ? (mg.zero_stage == 1 ? " with ZeRO-1" : " with ZeRO-0") : "", run.micro_B);
    fprintf(out, "per tensor: max abs diff <= tolerance and relative L2 error <= L2 bound; exact zeros in dwte's padded rows "
                 "and dwpe's rows past T; dwte unseen: the rows of the tokens not in the batch, on their own\n");
    if (d.optimizer == 1) {
        fprintf(out, "optimizer: Muon (lr %g, momentum %g, nesterov %d, %d Newton-Schulz steps, lr adjustment %s) on the blocks' "
                     "2-D weights, AdamW (lr %g) on the rest\n", d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps,
                d.muon_adjust_lr == 1 ? "match_rms_adamw" : "original", d.lr);
    } else {
        fprintf(out, "optimizer: AdamW (lr %g)\n", d.lr);
    }
    step_loss_rule_print(out, &d, &tol);
    CheckReport report = {0, 0};

    size_t staging_n = model.num_parameters > (size_t)run.micro_B * T * Vp ? model.num_parameters : (size_t)run.micro_B * T * Vp;
    float* staging_f = (float*)mallocCheck(staging_n * sizeof(float));
    floatX* staging_x = (floatX*)mallocCheck(staging_n * sizeof(floatX));

    // 1. logits
    const size_t local_logits = BT / nproc * V;
    float* logits_mine = (float*)mallocCheck(local_logits * sizeof(float));
    float* logits = (float*)mallocCheck(BT * V * sizeof(float));
    test_local_logits(&run, logits_mine, staging_x, staging_f);
    test_allgather_host_floats(&mg, logits, logits_mine, local_logits);
    check_table_header_l2(out);
    TensorCheck c = tensor_check_l2(logits, d.logits, BT * V, tol.logits_rtol, tol.logits_atol, tol.logits_l2);
    check_table_row_l2(out, &report, "logits", &c);
    free(logits);
    free(logits_mine);

    // 2. loss, gradients, gradient norm
    float loss = test_forward_backward(&run);
    check_scalar_l2(out, &report, "loss", loss, d.loss, tol.loss_atol);
    test_download_grads(&run, staging_f, staging_x);
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        char name[32];
        snprintf(name, sizeof(name), "d%s", GPT2_PARAMETER_NAMES[k]);
        size_t off = model.param_offsets[k], n = model.param_sizes[k];
        c = tensor_check_l2(staging_f + off, d.grads + off, n, tol.grad_rtol, 0.0, tol.grad_l2);
        if (k == GPT2_PARAM_wte) { tensor_check_zero(&c, staging_f + off, (size_t)V * C, (size_t)Vp * C); }
        if (k == GPT2_PARAM_wpe) { tensor_check_zero(&c, staging_f + off, (size_t)T * C, n); }
        check_table_row_l2(out, &report, name, &c);
    }
    unsigned char* unseen = (unsigned char*)mallocCheck((size_t)Vp);
    for (int v = 0; v < Vp; v++) { unseen[v] = v < V; }
    for (size_t i = 0; i < BT; i++) { unseen[d.x[i]] = 0; }
    size_t wte = model.param_offsets[GPT2_PARAM_wte];
    c = tensor_check_rows(staging_f + wte, d.grads + wte, (size_t)C, unseen, (size_t)Vp, tol.grad_rtol, 0.0, tol.grad_l2);
    check_table_row_l2(out, &report, "dwte unseen", &c);
    free(unseen);
    float norm = run.ops.grad_norm(run.ops.ctx);
    float ref_norm = (float)test_l2_norm(d.grads, model.num_parameters);
    check_scalar_l2(out, &report, "grad norm", norm, ref_norm, tol.grad_l2 * ref_norm);

    // 3. the reference's optimizer steps
    for (int step = 0; step < d.nsteps; step++) {
        float step_loss = test_train_step(&run, step + 1);
        char name[32];
        snprintf(name, sizeof(name), "loss step %d", step);
        check_scalar_l2(out, &report, name, step_loss, d.losses[step], step_loss_tolerance(&d, step, &tol));
    }

    // 4. bit-exact resume, through the functions trainer_run saves and loads a checkpoint with
    if (rank == 0) { mkdir_p_check(args.tmp_dir); }
    multi_gpu_barrier(&mg);
    TrainerDetectors detectors;
    trainer_detectors_init(&detectors);
    const int resume_steps = 3;
    const int saved_step = d.nsteps;
    char model_path[4200], state_path[4200];
    trainer_checkpoint_path(model_path, sizeof(model_path), args.tmp_dir, "model", saved_step, -1);
    trainer_checkpoint_path(state_path, sizeof(state_path), args.tmp_dir, "state", saved_step, rank);
    TrainState saved;
    memset(&saved, 0, sizeof(saved));
    saved.num_processes = nproc;
    saved.process_rank = rank;
    saved.zero_stage = mg.zero_stage;
    saved.step = saved_step;
    if (rank == 0) { gpu_save_model(&run.gpu, model_path); }
    gpu_save_state(&run.gpu, state_path, &saved, &detectors);
    multi_gpu_barrier(&mg);  // every file in place
    float first[resume_steps], second[resume_steps];
    for (int i = 0; i < resume_steps; i++) { first[i] = test_train_step(&run, saved_step + i + 1); }
    float* params_first = (float*)mallocCheck(model.num_parameters * sizeof(float));
    gpt2_download_parameters(&model, params_first);
    gpt2_reload_parameters(&model, model_path);
    TrainState expect = saved, got;
    gpu_load_state(&run.gpu, state_path, &expect, &got, &detectors);
    for (int i = 0; i < resume_steps; i++) { second[i] = test_train_step(&run, saved_step + i + 1); }
    gpt2_download_parameters(&model, staging_f);
    check_bitwise(out, &report, "resume loss", first, second, resume_steps);
    check_bitwise(out, &report, "resume params", params_first, staging_f, model.num_parameters);
    multi_gpu_barrier(&mg);  // every process read the checkpoint
    unlink(state_path);
    if (rank == 0) { unlink(model_path); }
    multi_gpu_barrier(&mg);
    if (rank == 0) { rmdir(args.tmp_dir); }

    // every process compared the same gathered tensors; a failure anywhere fails every process
    float failures = (float)report.failures;
    if (nproc > 1) { multi_gpu_sum_host_floats(&mg, &failures, 1); }
    check_report_summary(out, &report);
    if (failures != (float)report.failures * (float)nproc) {
        fprintf(stderr, "rank %d: %d check(s) failed here, %.0f over all %d processes\n", rank, report.failures, failures, nproc);
    }
    int status = check_report_exit_code(&report) != 0 || failures > 0.0f ? 1 : 0;

    free(params_first);
    free(staging_f);
    free(staging_x);
    gpu_trainer_free(&run.gpu);
    debug_state_free(&d);
    gpt2_free(&model);
    cudaCheck(cudaStreamDestroy(stream));
    if (out != stdout) { fclose(out); }
    multi_gpu_free(&mg);
    return status;
}
