/*
test_llama3.cu: the Llama 3 GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_llama3.py --model d2 --write_tensors 1   (llama3_d2.bin and llama3_d2_debug_state.bin)
    make test_llama3cu && ./test_llama3cu                 (PRECISION=FP32 for the tight tolerances)

What test_gpt2.cu checks for GPT-2, with the same driver (llmc/cuda/gpu_test.cuh: the model driven through the
GpuTrainer ops as trainer_run drives it, each process's rows of the batch, the gathers, the resume check and
the verdict) and the same tolerances (llmc/tensor_check.h gpu_tolerances):
1. forward on the recorded batch: logits (B, T, V)
2. backward: the loss, every parameter gradient per tensor (wte, per layer ln1w qkvw attprojw ln2w fcw fcw2
   fcprojw, lnfw, lm_head when not tied), the rows of dwte whose token is not in the batch on their own
   ("dwte unseen": exactly zero with an untied head, the classifier's contribution alone with a tied one),
   and the global gradient norm
3. the reference's optimizer steps on that batch: AdamW, or for a debug state of train_llama3.py --optimizer muon,
   Muon on each layer's qkvw, attprojw, fcw, fcw2, fcprojw and AdamW on the rest; every step's loss
   (step_loss_tolerance, the rule of test_gpt2cu)
4. resume: checkpoint, 3 steps, reload, the same 3 steps: losses and parameters bit for bit
Variants: -r 1|2 (the backward recomputes SwiGLU, and the RMSNorms too), -a N (gradient accumulation),
mpirun -np P ./test_llama3cu -z 0|1 (each process its rows, all-reduce or ZeRO-1).
Exit status 0 only if every check passed.
*/
#define LLMC_NO_MAIN
#include "train_llama3.cu"
#include "llmc/cuda/gpu_test.cuh"  // the debug state's batch per process, steps, gathers, resume, verdict

typedef struct {
    const char* model_path;
    const char* state_path;
    const char* tmp_dir;
    int recompute;
    int micro_batches;
    int zero_stage;
} TestArgs;

static const ArgSpec TEST_ARG_TABLE[] = {
    {"-e", ARG_STRING, offsetof(TestArgs, model_path), "llama3_d2.bin", 0, 0, "Llama 3 model file written by train_llama3.py"},
    {"-s", ARG_STRING, offsetof(TestArgs, state_path), "llama3_d2_debug_state.bin", 0, 0, "debug state written by train_llama3.py"},
    {"-o", ARG_STRING, offsetof(TestArgs, tmp_dir), "test_llama3cu_resume", 0, 0, "scratch directory for the resume check"},
    {"-r", ARG_INT, offsetof(TestArgs, recompute), "0", 0, 2, "activation recompute: 0 none, 1 SwiGLU, 2 SwiGLU and RMSNorms"},
    {"-a", ARG_INT, offsetof(TestArgs, micro_batches), "1", 1, 65536,
     "gradient accumulation: each process's rows of the batch as N micro-batches"},
    {"-z", ARG_INT, offsetof(TestArgs, zero_stage), "0", 0, 1,
     "ZeRO stage when run as several processes (mpirun -np 2): 0 all-reduce, 1 sharded optimizer"},
};
#define TEST_ARG_COUNT ((int)(sizeof(TEST_ARG_TABLE) / sizeof(TEST_ARG_TABLE[0])))

// replaces the parameters with those of a model file of the same shape (the resume check)
static void llama3_reload_parameters(GpuModel* m, const char* path) {
    const Llama3* model = (const Llama3*)m;
    int version = 0;
    Llama3Config ckpt_cfg;
    FILE* f = llama3_model_open(path, &ckpt_cfg, &version);
    if (memcmp(&ckpt_cfg, &model->config, sizeof(Llama3Config)) != 0) { llmc_die("%s: a different model shape than this run's model", path); }
    float* host = (float*)mallocCheck(m->num_parameters * sizeof(float));
    model_file_read_params(f, path, version, host, m->num_parameters);
    fcloseCheck(f, path);
    gpu_model_upload_parameters(m, host);
    free(host);
}

int main(int argc, char** argv) {
    TestArgs args;
    args_parse(TEST_ARG_TABLE, TEST_ARG_COUNT, &args, argc, argv,
               "test_llama3cu: checks the Llama 3 GPU trainer against python train_llama3.py --write_tensors 1, then bit-exact "
               "resume.\nRun it as several processes with mpirun -np 2 ./test_llama3cu [-z 1].");
    if (!file_exists(args.model_path)) { llmc_die("%s: no such Llama 3 model file (python train_llama3.py --write_tensors 1 writes it)", args.model_path); }
    if (!file_exists(args.state_path)) { llmc_die("%s: no such debug state (python train_llama3.py --write_tensors 1 writes it)", args.state_path); }

    MultiGpu mg;
    gpu_test_processes(&mg, &argc, &argv, args.zero_stage);
    const int rank = mg.process_rank, nproc = mg.num_processes;
    FILE* out = rank == 0 ? stdout : fopenCheck("/dev/null", "w");
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    DeviceInfo dev;
    device_info_query(&dev, mg.local_device_idx);

    Llama3 model;
    llama3_build(&model, args.model_path, 1, mg.zero_stage, nproc);
    mg.num_parameters = model.num_parameters;
    mg.shard = zero_shard(model.num_parameters, mg.zero_stage, nproc, rank);
    const Llama3Config* cfg = &model.config;
    DebugState d;
    debug_state_read_format(&d, args.state_path, &DEBUG_STATE_LLAMA3, cfg->max_seq_len, cfg->vocab_size, model.num_parameters);
    const int B = d.B, T = d.T, V = cfg->vocab_size, C = cfg->channels;
    const size_t BT = (size_t)B * T;
    GpuTestRun run;
    gpu_test_run_init(&run, &model, &mg, &d, args.state_path, args.micro_batches);
    if (d.optimizer == 1) {  // Muon on the blocks' 2-D weights with the debug state's settings; ZeRO-1: whole matrices per rank
        MuonConfig muon = {d.muon_lr, d.muon_momentum, d.muon_nesterov, d.muon_ns_steps, d.muon_adjust_lr};
        llama3_use_muon(&model, &muon, d.lr, mg.zero_stage == 1 ? nproc : 1, rank);
    }
    llama3_allocate_state(&model, run.micro_B, T, args.recompute, mg.shard, 1, stream);
    gpu_test_exact_fp32(&model);
    gpu_test_run_start(&run, LLAMA3_CALLS);

    TestTolerances tol = gpu_tolerances(PRECISION_IS_BF16);
    fprintf(out, "%s, precision %s; model %s (Llama 3 L=%d C=%d NH=%d NKV=%d FFN=%d%s%s), debug state B=%d T=%d, %d steps\n",
            dev.name, PRECISION_NAME, args.model_path, cfg->num_layers, C, cfg->num_heads, cfg->num_kv_heads, cfg->ffn_hidden,
            cfg->tied_embeddings ? ", tied lm_head" : "", cfg->use_scaled_rope ? ", scaled RoPE" : "", B, T, d.nsteps);
    fprintf(out, "variant: -r %d -a %d, %d process(es)%s: micro-batches of B=%d\n", args.recompute, args.micro_batches, nproc,
            nproc > 1 ? (mg.zero_stage == 1 ? " with ZeRO-1" : " with ZeRO-0") : "", run.micro_B);
    fprintf(out, "per tensor: max abs diff <= tolerance and relative L2 error <= L2 bound; dwte unseen: the rows of the tokens "
                 "not in the batch, on their own\n");
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
    for (int k = 0; k < LLAMA3_NUM_PARAMETER_TENSORS; k++) {
        size_t off = model.param_offsets[k], n = model.param_sizes[k];
        if (n == 0) { continue; }  // lm_head when tied
        char name[32];
        snprintf(name, sizeof(name), "d%s", LLAMA3_PARAMETER_NAMES[k]);
        c = tensor_check_l2(grads + off, d.grads + off, n, tol.grad_rtol, 0.0, tol.grad_l2);
        check_table_row_l2(out, &report, name, &c);
    }
    unsigned char* unseen = (unsigned char*)mallocCheck((size_t)V);
    for (int v = 0; v < V; v++) { unseen[v] = 1; }
    for (size_t i = 0; i < BT; i++) { unseen[d.x[i]] = 0; }
    size_t wte = model.param_offsets[LLAMA3_PARAM_wte];
    c = tensor_check_rows(grads + wte, d.grads + wte, (size_t)C, unseen, (size_t)V, tol.grad_rtol, 0.0, tol.grad_l2);
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
    gpu_test_resume(&run, out, &report, args.tmp_dir, llama3_reload_parameters);

    int status = gpu_test_verdict(&run, out, &report);
    gpu_trainer_free(&run.gpu);
    debug_state_free(&d);
    llama3_free(&model);
    cudaCheck(cudaStreamDestroy(stream));
    if (out != stdout) { fclose(out); }
    multi_gpu_free(&mg);
    return status;
}
