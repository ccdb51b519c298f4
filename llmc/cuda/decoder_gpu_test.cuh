/*
llmc/cuda/decoder_gpu_test.cuh: a decoder family's GPU test program (test_<name>.cu), once for every decoder family:
llmc/cuda/gpu_test.cuh's checks (the logits, the loss and every gradient tensor against the family's reference debug
state, its optimizer steps, bit-exact resume) around llmc/cuda/decoder_gpu.cuh's model.

    decoder_gpu_test_main(argc, argv, family, activation)   main(): activation names what -r 1 recomputes ("SwiGLU"),
                                  for the help; the other texts come from the family
*/
#ifndef LLMC_DECODER_GPU_TEST_CUH
#define LLMC_DECODER_GPU_TEST_CUH

#include <stdio.h>
#include <string.h>
#include "decoder_gpu.cuh"
#include "gpu_test.cuh"  // the flags, the debug state's batch per process, the checks, resume, verdict

// a decoder family's GPU test program: main() of test_<name>.cu; activation names what -r 1 recomputes ("SwiGLU").
// Its texts come from the family: "the Llama 3 GPU trainer" from its model file's "Llama 3 model", its reference's
// files as the defaults (llmc/cuda/gpu_test.cuh)
static int decoder_gpu_test_main(int argc, char** argv, const ModelFamily* family, const char* activation) {
    static char about[512], model_kind[96], model_help[160], tmp_default[96], recompute_help[160];
    const char* what = family->model_file->what;  // "Llama 3 model"
    int name_len = (int)strlen(what) - (int)strlen(" model");
    if (name_len <= 0 || strcmp(what + name_len, " model") != 0) { name_len = (int)strlen(what); }
    snprintf(about, sizeof(about), "test_%scu: checks the %.*s GPU trainer against python %s --write_tensors 1, then bit-exact "
             "resume.\nRun it as several processes with mpirun -np 2 ./test_%scu [-z 1].", family->name, name_len, what,
             family->reference, family->name);
    snprintf(model_kind, sizeof(model_kind), "%s file", what);
    snprintf(model_help, sizeof(model_help), "%s file written by %s", what, family->reference);
    snprintf(tmp_default, sizeof(tmp_default), "test_%scu_resume", family->name);
    snprintf(recompute_help, sizeof(recompute_help), "activation recompute: 0 none, 1 %s, 2 %s and RMSNorms", activation, activation);
    // no -ge (decoder_gpu_calls has none), no exact zeros (no padded rows, no position table)
    const GpuTestProgram program = {
        .about = about, .family = family, .model_kind = model_kind, .model_help = model_help, .tmp_default = tmp_default,
        .recompute_help = recompute_help, .zeros_note = "", .calls = &decoder_gpu_calls, .exact_zeros = NULL,
    };
    static DecoderGpu model;
    model.family = family;
    return gpu_test_main(argc, argv, &program, &model, &model.gpu);
}

#endif // LLMC_DECODER_GPU_TEST_CUH
