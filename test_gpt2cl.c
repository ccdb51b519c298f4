/*
test_gpt2cl.c: the OpenCL trainer against the PyTorch reference, as test_gpt2.c checks the CPU trainer.

train_gpt2.py --write_tensors 1 writes a checkpoint and a debug state: one batch (x, y), the
reference logits, loss and all 16 parameter gradients for it, and the losses of `nsteps` AdamW steps
on that batch. This program loads both, runs train_gpt2cl.c's forward and backward on the OpenCL
device (-cp, -cd; LLMC_CL_GEMM=tiled for our own GEMM instead of CLBlast), prints a table of every
tensor's difference, then runs the same AdamW steps and compares every loss. Exit status 0 only if
everything is within tolerance.

Tolerances: test_gpt2's, llmc/tensor_check.h cpu_tolerances(fp32): logits max abs diff 1e-4, loss 1e-5,
each gradient tensor max abs diff <= 1e-3 x max|ref| of that tensor, each step loss 1e-5 + 10 x the
running max of the reference's float32 noise (at most 0.1 % of the loss); and the relative L2 error of
the logits and of every gradient tensor at most 3e-5 (FP32_LOGITS_L2, FP32_GRAD_L2: the bounds
test_gpt2cu holds its FP32 build to).
*/
#define LLMC_NO_MAIN
#include "train_gpt2cl.c"
#include "llmc/args.h"
#include "llmc/debug_state.h"
#include "llmc/tensor_check.h"

typedef struct {
    const char* model_path;
    const char* state_path;
    int cl_platform;
    int cl_device;
} TestArgs;

static const ArgSpec TEST_ARG_TABLE[] = {
    {"-e", ARG_STRING, offsetof(TestArgs, model_path), "gpt2_124M.bin", 0, 0, "model checkpoint written by train_gpt2.py"},
    {"-s", ARG_STRING, offsetof(TestArgs, state_path), "gpt2_124M_debug_state.bin", 0, 0, "debug state written by train_gpt2.py"},
    {"-cp", ARG_INT, offsetof(TestArgs, cl_platform), "0", 0, 1e6, "OpenCL platform index (train_gpt2cl -cl 1 lists them)"},
    {"-cd", ARG_INT, offsetof(TestArgs, cl_device), "0", 0, 1e6, "OpenCL device index within the platform"},
};

int main(int argc, char** argv) {
    TestArgs args;
    args_parse(TEST_ARG_TABLE, (int)(sizeof(TEST_ARG_TABLE) / sizeof(TEST_ARG_TABLE[0])), &args, argc, argv,
               "Checks the OpenCL trainer against the reference tensors written by python train_gpt2.py --write_tensors 1.");
    debug_state_require_files(args.model_path, "model checkpoint", args.state_path, "train_gpt2.py");
    ClRuntime rt;
    cl_runtime_init(&rt, args.cl_platform, args.cl_device);
    GPT2 model;
    gpt2_build_from_checkpoint(&model, &rt, args.model_path);
    GPT2Config cfg = model.config;
    DebugState d;
    gpt2_debug_state_read(&d, args.state_path, &cfg, model.num_parameters);
    if (d.masked) { // the OpenCL trainer trains on plain shards only: it has no masked loss
        llmc_die("%s: a masked debug state (header[18] = 1); the OpenCL trainer checks unmasked states only", args.state_path);
    }
    int B = d.B, T = d.T, V = cfg.vocab_size, Vp = cfg.padded_vocab_size;
    printf("OpenCL device: %s (platform %d: %s); GEMMs: %s\n", rt.dev.device_name, args.cl_platform,
           rt.dev.platform_name, rt.gemm.name);
    printf("model %s: L=%d NH=%d C=%d maxT=%d V=%d Vp=%d, %zu parameters\n", args.model_path, cfg.num_layers,
           cfg.num_heads, cfg.channels, cfg.max_seq_len, V, Vp, model.num_parameters);
    printf("debug state %s: B=%d T=%d, %d steps of AdamW (lr %g, betas %g %g, eps %g, wd %g, clip %g)\n",
           args.state_path, B, T, d.nsteps, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, d.grad_clip);
    TestTolerances tol = cpu_tolerances(0);
    step_loss_rule_print(stdout, &d, &tol);
    gpt2_allocate_activations(&model, B, T);

    // forward and backward on the recorded batch
    gpt2_forward(&model, d.x, d.y, B, T);
    gpt2_zero_grad(&model);
    gpt2_backward(&model, 1.0f);

    CheckReport report = {0, 0};
    check_table_header_l2(stdout);
    // logits: ours are (B,T,Vp) on the device, the reference's (B,T,V)
    float* padded = (float*)mallocCheck((size_t)B * T * Vp * sizeof(float));
    cl_read(&rt.dev, model.acts.logits.mem, model.acts.logits.off * sizeof(float), padded, (size_t)B * T * Vp * sizeof(float));
    float* logits = (float*)mallocCheck((size_t)B * T * V * sizeof(float));
    for (size_t bt = 0; bt < (size_t)B * T; bt++) { memcpy(logits + bt * V, padded + bt * Vp, (size_t)V * sizeof(float)); }
    TensorCheck c = tensor_check_l2(logits, d.logits, (size_t)B * T * V, tol.logits_rtol, tol.logits_atol, tol.logits_l2);
    check_table_row_l2(stdout, &report, "logits", &c);
    free(logits);
    free(padded);
    check_scalar_l2(stdout, &report, "loss", model.mean_loss, d.loss, tol.loss_atol);
    float* grads = (float*)mallocCheck(model.num_parameters * sizeof(float));
    gpt2_read_buffer(&model, model.grads_memory, grads);
    size_t off = 0;
    for (int k = 0; k < GPT2_NUM_PARAMETER_TENSORS; k++) {
        size_t n = model.param_sizes[k];
        char name[32];
        snprintf(name, sizeof(name), "d%s", GPT2_PARAMETER_NAMES[k]);
        c = tensor_check_l2(grads + off, d.grads + off, n, tol.grad_rtol, 0.0, tol.grad_l2);
        check_table_row_l2(stdout, &report, name, &c);
        off += n;
    }
    free(grads);

    // nsteps of AdamW on the same batch; losses[i] is the loss before update i+1
    for (int step = 0; step < d.nsteps; step++) {
        gpt2_forward(&model, d.x, d.y, B, T);
        char name[32];
        snprintf(name, sizeof(name), "loss step %d", step);
        check_scalar_l2(stdout, &report, name, model.mean_loss, d.losses[step], step_loss_tolerance(&d, step, &tol));
        gpt2_zero_grad(&model);
        gpt2_backward(&model, 1.0f);
        float norm = gpt2_grad_norm(&model);
        gpt2_update(&model, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, grad_clip_scale(norm, d.grad_clip), step + 1);
    }

    printf("\n");
    check_report_summary(stdout, &report);
    debug_state_free(&d);
    gpt2_free(&model);
    cl_runtime_free(&rt);
    return check_report_exit_code(&report);
}
