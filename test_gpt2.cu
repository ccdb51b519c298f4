/*
test_gpt2.cu: the GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_gpt2.py --write_tensors 1     (writes gpt2_124M.bin and gpt2_124M_debug_state.bin)
    make test_gpt2cu && ./test_gpt2cu          (PRECISION=FP32 for the tight tolerances)
    python dev/cuda_cpu_refs.py                (a d2 model and debug state in build/cuda_cpu_refs: -e, -s)

The model is driven the way train_gpt2.cu's training loop drives it (llmc/trainer.h trainer_run, through
the GpuTrainer ops; llmc/cuda/gpu_test.cuh does it, and the gathers, the resume check and the verdict, for
every GPU test program): per optimizer step zero_grad, forward_backward of each micro-batch with loss scale
1/N (the last one starting the gradient reduction over the processes), the loss averaged over the
processes, the global gradient norm, clipping, gpu_model_update. Variants, each checked against the same
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
#include "llmc/cuda/gpu_test.cuh"  // the debug state's batch per process, steps, gathers, resume, verdict

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

// replaces the parameters with those of a checkpoint of the same shape (the resume check)
static void gpt2_reload_parameters(GpuModel* m, const char* path) {
    const GPT2* model = (const GPT2*)m;
    int version = 0;
    GPT2Config ckpt_cfg;
    FILE* f = checkpoint_open(path, &ckpt_cfg, &version);
    if (memcmp(&ckpt_cfg, &model->config, sizeof(GPT2Config)) != 0) { llmc_die("%s: a different model shape than this run's model", path); }
    float* host = (float*)mallocCheck(m->num_parameters * sizeof(float));
    model_file_read_params(f, path, version, host, m->num_parameters);
    fcloseCheck(f, path);
    gpu_model_upload_parameters(m, host);
    free(host);
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
    gpu_test_processes(&mg, &argc, &argv, args.zero_stage);
    const int rank = mg.process_rank, nproc = mg.num_processes;
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
    GpuTestRun run;
    gpu_test_run_init(&run, &model, &mg, &d, args.state_path, args.micro_batches);
    if (d.optimizer == 1) {  // Muon on the blocks' 2-D weights with the debug state's settings; ZeRO-1: whole matrices per rank
        MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
        gpt2_use_muon(&model, &muon, d.lr, mg.zero_stage == 1 ? nproc : 1, rank);
    }
    gpt2_allocate_state(&model, run.micro_B, T, args.recompute, mg.shard, 1, stream);
    model.gelu_fusion = args.gelu_fusion;  // -ge
    gpu_test_exact_fp32(&model);
    gpu_test_run_start(&run, GPT2_CALLS);

    TestTolerances tol = gpu_tolerances(PRECISION_IS_BF16);
    fprintf(out, "%s, precision %s; model %s (L=%d C=%d NH=%d), debug state B=%d T=%d, %d steps\n", dev.name, PRECISION_NAME,
            args.model_path, cfg->num_layers, C, cfg->num_heads, B, T, d.nsteps);
    fprintf(out, "variant: -ge %d -r %d -a %d, %d process(es)%s: micro-batches of B=%d\n", args.gelu_fusion, args.recompute,
            args.micro_batches, nproc, nproc > 1 ? (mg.zero_stage == 1 ? " with ZeRO-1" : " with ZeRO-0") : "", run.micro_B);
    fprintf(out, "per tensor: max abs diff <= tolerance and relative L2 error <= L2 bound; exact zeros in dwte's padded rows "
                 "and dwpe's rows past T; dwte unseen: the rows of the tokens not in the batch, on their own\n");
    gpu_test_print_optimizer(out, &d);
    step_loss_rule_print(out, &d, &tol);
    CheckReport report = {0, 0};

    // 1. logits
    float* logits = (float*)mallocCheck(BT * V * sizeof(float));
    gpu_test_logits(&run, logits);
    check_table_header_l2(out);
    TensorCheck c = tensor_check_l2(logits, d.logits, BT * V, tol.logits_rtol, tol.logits_atol, tol.logits_l2);
    check_table_row_l2(out, &report, "logits", &c);
    free(logits);

    // 2. loss, gradients, gradient norm
    float loss = gpu_test_forward_backward(&run);
    check_scalar_l2(out, &report, "loss", loss, d.loss, tol.loss_atol);
    float* grads = (float*)mallocCheck(model.num_parameters * sizeof(float));
    gpu_test_grads(&run, grads);
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        char name[32];
        snprintf(name, sizeof(name), "d%s", GPT2_PARAMETER_NAMES[k]);
        size_t off = model.param_offsets[k], n = model.param_sizes[k];
        c = tensor_check_l2(grads + off, d.grads + off, n, tol.grad_rtol, 0.0, tol.grad_l2);
        if (k == GPT2_PARAM_wte) { tensor_check_zero(&c, grads + off, (size_t)V * C, (size_t)Vp * C); }
        if (k == GPT2_PARAM_wpe) { tensor_check_zero(&c, grads + off, (size_t)T * C, n); }
        check_table_row_l2(out, &report, name, &c);
    }
    unsigned char* unseen = (unsigned char*)mallocCheck((size_t)Vp);
    for (int v = 0; v < Vp; v++) { unseen[v] = v < V; }
    for (size_t i = 0; i < BT; i++) { unseen[d.x[i]] = 0; }
    size_t wte = model.param_offsets[GPT2_PARAM_wte];
    c = tensor_check_rows(grads + wte, d.grads + wte, (size_t)C, unseen, (size_t)Vp, tol.grad_rtol, 0.0, tol.grad_l2);
    check_table_row_l2(out, &report, "dwte unseen", &c);
    free(unseen);
    free(grads);
    float norm = run.ops.grad_norm(run.ops.ctx);
    float ref_norm = (float)gpu_test_l2_norm(d.grads, model.num_parameters);
    check_scalar_l2(out, &report, "grad norm", norm, ref_norm, tol.grad_l2 * ref_norm);

    // 3. the reference's optimizer steps
    for (int step = 0; step < d.nsteps; step++) {
        float step_loss = gpu_test_train_step(&run, step + 1);
        char name[32];
        snprintf(name, sizeof(name), "loss step %d", step);
        check_scalar_l2(out, &report, name, step_loss, d.losses[step], step_loss_tolerance(&d, step, &tol));
    }

    // 4. bit-exact resume
    gpu_test_resume(&run, out, &report, args.tmp_dir, gpt2_reload_parameters);

    int status = gpu_test_verdict(&run, out, &report);
    gpu_trainer_free(&run.gpu);
    debug_state_free(&d);
    gpt2_free(&model);
    cudaCheck(cudaStreamDestroy(stream));
    if (out != stdout) { fclose(out); }
    multi_gpu_free(&mg);
    return status;
}
