/*
test_gpt2.cu: the GPU trainer against the PyTorch reference, then bit-exact resume.

    python train_gpt2.py --write_tensors 1     (writes gpt2_124M.bin and gpt2_124M_debug_state.bin)
    make test_gpt2cu && ./test_gpt2cu          (PRECISION=FP32 for the tight tolerances)

1. forward on the recorded batch: logits (B, T, V) and the loss against the reference
2. backward: each of the 16 parameter gradients, per tensor
3. the reference's optimizer steps on that batch (AdamW with the debug state's settings, gradient
   clipping, constant LR): every step's loss, within the tolerance derived from the float32 noise
   the reference measured for that step (step_loss_tolerance in llmc/tensor_check.h, the same
   rule as test_gpt2.c's)
4. resume: checkpoint after those steps, run 3 more steps, reload the checkpoint and run the same
   3 steps again; the losses and the final parameters must match bit for bit
Exit status 0 only if every check passed (the comparison logic is llmc/tensor_check.h,
tested on the CPU with corrupted inputs). FP32 builds use true fp32 GEMMs here (TF32 off).
*/
#define LLMC_NO_MAIN
#include "train_gpt2.cu"
#include "llmc/tensor_check.h"

typedef struct {
    const char* model_path;
    const char* state_path;
    const char* tmp_dir;
} TestArgs;

static const ArgSpec TEST_ARG_TABLE[] = {
    {"-e", ARG_STRING, offsetof(TestArgs, model_path), "gpt2_124M.bin", 0, 0, "model checkpoint written by train_gpt2.py"},
    {"-s", ARG_STRING, offsetof(TestArgs, state_path), "gpt2_124M_debug_state.bin", 0, 0, "debug state written by train_gpt2.py"},
    {"-o", ARG_STRING, offsetof(TestArgs, tmp_dir), "test_gpt2cu_resume", 0, 0, "scratch directory for the resume check"},
};
#define TEST_ARG_COUNT ((int)(sizeof(TEST_ARG_TABLE) / sizeof(TEST_ARG_TABLE[0])))

// one optimizer step on (x, y): returns the loss before the update
// replaces the parameters with those of a checkpoint of the same shape (the resume check)
static void gpt2_reload_parameters(GPT2* model, const char* path) {
    int version = 0;
    GPT2Config ckpt_cfg;
    FILE* f = checkpoint_open(path, &ckpt_cfg, &version);
    if (memcmp(&ckpt_cfg, &model->config, sizeof(GPT2Config)) != 0) { llmc_die("%s: a different model shape than this run's model", path); }
    float* host = (float*)mallocCheck(model->num_parameters * sizeof(float));
    checkpoint_read_params(f, path, version, host, model->num_parameters);
    fcloseCheck(f, path);
    gpt2_upload_parameters(model, host);
    free(host);
}

static float test_train_step(GPT2* model, MultiGpu* mg, const DebugState* d, int t) {
    const int BT = d->B * d->T;
    cudaCheck(cudaMemsetAsync(model->grads_memory, 0, model->num_parameters * sizeof(floatX), model->stream));
    gpt2_forward(model, d->x, d->y, 1.0f / (float)BT, 1);
    float loss = model->mean_loss;
    gpt2_backward(model, d->x, mg, 1);
    float norm = gpt2_grad_norm(model, mg);
    float scale = grad_clip_scale(norm, d->grad_clip);
    gpt2_update(model, mg, d->lr, d->beta1, d->beta2, d->eps, d->weight_decay, scale, t);
    cudaCheck(cudaStreamSynchronize(model->stream));
    return loss;
}

int main(int argc, char** argv) {
    TestArgs args;
    args_parse(TEST_ARG_TABLE, TEST_ARG_COUNT, &args, argc, argv,
               "test_gpt2cu: checks the GPU trainer against python train_gpt2.py --write_tensors 1, then bit-exact resume.");
    if (!file_exists(args.model_path)) { llmc_die("%s: no such checkpoint (python train_gpt2.py --write_tensors 1 writes it)", args.model_path); }
    if (!file_exists(args.state_path)) { llmc_die("%s: no such debug state (python train_gpt2.py --write_tensors 1 writes it)", args.state_path); }

    MultiGpu mg;
    multi_gpu_init(&mg, &argc, &argv, 1, 0, 1, "fs", "", "", 0, 0);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    DeviceInfo dev;
    device_info_query(&dev, mg.local_device_idx);

    GPT2 model;
    gpt2_build(&model, args.model_path, 0, 1);
    mg.num_parameters = model.num_parameters;
    mg.shard = zero_shard(model.num_parameters, 0, 1, 0);
    const GPT2Config* cfg = &model.config;
    DebugState d;
    debug_state_read(&d, args.state_path, cfg, model.num_parameters);
    const int B = d.B, T = d.T, V = cfg->vocab_size, Vp = cfg->padded_vocab_size;
    const size_t BT = (size_t)B * T;
    gpt2_allocate_state(&model, B, T, 0, mg.shard, 1, stream);
#if !PRECISION_IS_BF16
    model.cublas.compute_type = CUBLAS_COMPUTE_32F;
    cublasCheck(cublasSetMathMode(model.cublas.handle, CUBLAS_DEFAULT_MATH));
#endif
    TestTolerances tol = gpu_tolerances(PRECISION_IS_BF16);
    printf("%s, precision %s; model %s (L=%d C=%d NH=%d), debug state B=%d T=%d, %d steps\n", dev.name, PRECISION_NAME,
           args.model_path, cfg->num_layers, cfg->channels, cfg->num_heads, B, T, d.nsteps);
    step_loss_rule_print(stdout, &d, &tol);
    CheckReport report = {0, 0};

    // 1. logits and loss
    float* staging_f = (float*)mallocCheck(model.num_parameters * sizeof(float) > BT * Vp * sizeof(float)
                                               ? model.num_parameters * sizeof(float) : BT * Vp * sizeof(float));
    floatX* staging_x = (floatX*)mallocCheck(BT * Vp * sizeof(floatX) > model.num_parameters * sizeof(floatX)
                                                 ? BT * Vp * sizeof(floatX) : model.num_parameters * sizeof(floatX));
    gpt2_forward(&model, d.x, NULL, 0.0f, 0);
    cudaCheck(cudaMemcpy(staging_x, model.acts.output, BT * Vp * sizeof(floatX), cudaMemcpyDeviceToHost));
    float_from_floatX_host(staging_f, staging_x, BT * Vp);
    float* logits = (float*)mallocCheck(BT * V * sizeof(float));
    for (size_t bt = 0; bt < BT; bt++) { memcpy(logits + bt * V, staging_f + bt * Vp, (size_t)V * sizeof(float)); }
    check_table_header(stdout);
    TensorCheck c = tensor_check(logits, d.logits, BT * V, tol.logits_rtol, 0.0);
    check_table_row(stdout, &report, "logits", &c);
    free(logits);

    // 2. loss and gradients
    cudaCheck(cudaMemset(model.grads_memory, 0, model.num_parameters * sizeof(floatX)));
    gpt2_forward(&model, d.x, d.y, 1.0f / (float)BT, 1);
    check_scalar(stdout, &report, "loss", model.mean_loss, d.loss, tol.loss_atol);
    gpt2_backward(&model, d.x, &mg, 0);
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaMemcpy(staging_x, model.grads_memory, model.num_parameters * sizeof(floatX), cudaMemcpyDeviceToHost));
    float_from_floatX_host(staging_f, staging_x, model.num_parameters);
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        char name[32];
        snprintf(name, sizeof(name), "d%s", GPT2_PARAMETER_NAMES[k]);
        size_t off = model.param_offsets[k], n = model.param_sizes[k];
        c = tensor_check(staging_f + off, d.grads + off, n, tol.grad_rtol, 0.0);
        check_table_row(stdout, &report, name, &c);
    }

    // 3. the reference's optimizer steps
    for (int step = 0; step < d.nsteps; step++) {
        float loss = test_train_step(&model, &mg, &d, step + 1);
        char name[32];
        snprintf(name, sizeof(name), "loss step %d", step);
        check_scalar(stdout, &report, name, loss, d.losses[step], step_loss_tolerance(&d, step, &tol));
    }

    // 4. bit-exact resume, through the functions trainer_run saves and loads a checkpoint with
    mkdir_p_check(args.tmp_dir);
    GpuTrainer gpu;
    gpu_trainer_init(&gpu, &model, &mg);
    TrainerDetectors detectors;
    trainer_detectors_init(&detectors);
    const int resume_steps = 3;
    const int saved_step = d.nsteps;
    char model_path[4200], state_path[4200];
    trainer_checkpoint_path(model_path, sizeof(model_path), args.tmp_dir, "model", saved_step, -1);
    trainer_checkpoint_path(state_path, sizeof(state_path), args.tmp_dir, "state", saved_step, 0);
    TrainState saved;
    memset(&saved, 0, sizeof(saved));
    saved.num_processes = 1;
    saved.step = saved_step;
    gpu_save_model(&gpu, model_path);
    gpu_save_state(&gpu, state_path, &saved, &detectors);
    float first[resume_steps], second[resume_steps];
    for (int i = 0; i < resume_steps; i++) { first[i] = test_train_step(&model, &mg, &d, saved_step + i + 1); }
    float* params_first = (float*)mallocCheck(model.num_parameters * sizeof(float));
    gpt2_download_parameters(&model, params_first);
    gpt2_reload_parameters(&model, model_path);
    TrainState expect = saved, got;
    gpu_load_state(&gpu, state_path, &expect, &got, &detectors);
    for (int i = 0; i < resume_steps; i++) { second[i] = test_train_step(&model, &mg, &d, saved_step + i + 1); }
    gpt2_download_parameters(&model, staging_f);
    check_bitwise(stdout, &report, "resume loss", first, second, resume_steps);
    check_bitwise(stdout, &report, "resume params", params_first, staging_f, model.num_parameters);
    unlink(model_path);
    unlink(state_path);
    rmdir(args.tmp_dir);
    gpu_trainer_free(&gpu);

    check_report_summary(stdout, &report);
    free(params_first);
    free(staging_f);
    free(staging_x);
    debug_state_free(&d);
    gpt2_free(&model);
    cudaCheck(cudaStreamDestroy(stream));
    multi_gpu_free(&mg);
    return check_report_exit_code(&report);
}
