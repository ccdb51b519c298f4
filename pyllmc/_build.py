"""cffi (API mode) builder of pyllmc._llmc: train_gpt2.c's layers and model, compiled from the repo's sources.

    python pyllmc/_build.py        builds pyllmc/_llmc*.so in place (what `make pyllmc` runs)
    PYLLMC_EXTENSION=1 pip install .   builds it through setuptools' cffi_modules (setup.py)

The C side is pyllmc/_capi.h, which includes train_gpt2.c (LLMC_NO_MAIN) and adds thin wrappers.
Compiler and linker flags: the Makefile's CFLAGS and LDLIBS (so a BLAS selected there is used here
too), read with `make -s pyllmc-flags`; when make or the Makefile is missing, -O3 -march=native
-fopenmp; then -fno-wrapv against Python's -fwrapv. PYLLMC_CFLAGS / PYLLMC_LDFLAGS in the environment add more.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from cffi import FFI

REPO = Path(__file__).resolve().parent.parent

CDEF = """
typedef struct {
    int max_seq_len; int vocab_size; int padded_vocab_size; int num_layers; int num_heads; int channels;
} GPT2Config;

typedef struct { float* losses; ...; } ActivationTensors;

typedef struct {
    float* params_memory; size_t num_parameters; float* grads_memory;
    float* m_memory; float* v_memory; size_t opt_offset; size_t opt_size;
    int batch_size; int seq_len; int cur_B; int cur_T; float mean_loss;
    const float* logits; int logits_stride; int keep_logits;
    ...;
} CpuModel;

typedef struct {
    GPT2Config config;
    ActivationTensors acts;
    CpuModel cpu;
    ...;
} GPT2;

typedef struct {
    size_t B; size_t T; size_t num_shards; size_t num_tokens;
    size_t current_shard_idx; size_t current_sample_idx;
    int* inputs; int* targets;
    int masked;
    ...;
} DataLoader;

#define GPT2_NUM_PARAMETER_TENSORS 16
static const char* const GPT2_PARAMETER_NAMES[16];
static const int GPT2_PARAMETER_IS_MATRIX[16];
static const int GPT2_PARAMETER_PER_LAYER[16];
void gpt2_parameter_dims(size_t dims[16][3], const GPT2Config* cfg);
size_t gpt2_parameter_sizes(size_t sizes[16], const GPT2Config* cfg);
size_t gpt2_num_parameters(const GPT2Config* cfg);

/* the layers (train_gpt2.c) */
void encoder_forward(float* out, const int* inp, const float* wte, const float* wpe, int B, int T, int C);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int B, int T, int C);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int B, int T, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int B, int T, int C);
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int B, int T, int C, int OC);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int B, int T, int C, int OC);
void attention_forward(float* out, float* att, const float* inp, int B, int T, int C, int NH);
void attention_backward(float* dinp, const float* dout, const float* inp, const float* att,
                        int B, int T, int C, int NH);
void gelu_forward(float* out, const float* inp, size_t N);
void gelu_backward(float* dinp, const float* inp, const float* dout, size_t N);
void residual_forward(float* out, const float* inp1, const float* inp2, size_t N);
void residual_backward(float* dinp1, float* dinp2, const float* dout, size_t N);
void crossentropy_softmax_forward(float* losses, float* probs, const float* logits, const int* targets,
                                  int B, int T, int V, int Vp);
void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets,
                                   int B, int T, int V, int Vp);
void pyllmc_adamw_update(float* params, const float* grads, float* m, float* v, size_t n,
                         float learning_rate, float beta1, float beta2, float eps,
                         float weight_decay, float grad_scale, int t);

/* the model (train_gpt2.c, through pyllmc/_capi.h) */
const char* pyllmc_last_error(void);
int pyllmc_config_from_descriptor(const char* desc, GPT2Config* cfg, char* why, size_t why_size);
int pyllmc_model_init_checkpoint(GPT2* model, const char* path);
int pyllmc_model_init_scratch(GPT2* model, const GPT2Config* cfg, unsigned int seed);
void pyllmc_model_discard(GPT2* model);
int pyllmc_model_ensure_activations(GPT2* model, int B, int T);
int pyllmc_model_forward(GPT2* model, const int* inputs, const int* targets, int B, int T);
int pyllmc_model_backward(GPT2* model, float loss_scale);
void pyllmc_model_zero_grad(GPT2* model);
float pyllmc_model_grad_norm(const GPT2* model);
int pyllmc_model_ensure_optimizer(GPT2* model);
float pyllmc_model_step(GPT2* model, float learning_rate, float beta1, float beta2, float eps,
                        float weight_decay, float grad_clip, int t);
int pyllmc_model_generate(GPT2* model, int* tokens, int n_prompt, int n_total, int window,
                          float temperature, int top_k, float top_p, uint64_t seed);
int pyllmc_model_save(GPT2* model, const char* path);
void pyllmc_model_free(GPT2* model);

void pyllmc_model_params_changed(GPT2* model);

/* -p fp32 | bf16 (llmc/cpu/matmul.h) */
int pyllmc_set_precision(const char* value);
const char* pyllmc_precision(void);

/* the trainers' command line (llmc/args.h), ./train_gpt2's main() (llmc/cpu/cpu_trainer.h) and the training
   constants (llmc/trainer.h) */
typedef struct {
    const char* train_data_pattern; const char* val_data_pattern; const char* load_filename; const char* output_log_dir;
    int B; int T; int total_batch_size; int max_steps; const char* lr_scheduler_type; float learning_rate;
    int warmup_iterations; float final_learning_rate_frac; float weight_decay;
    int val_loss_every; int val_max_steps; int sample_every; int gen_tokens; int checkpoint_every; int checkpoints_keep;
    int checkpoints_major_every; int resume; int overfit_single_batch; int shuffle; int hellaswag_eval;
    const char* hellaswag_path;
    int zero_stage; int recompute; int gelu_fusion; int use_master_weights; const char* precision;
    float skip_update_lossz; float skip_update_gradz;
    int num_processes; int process_rank; int gpus_per_node; const char* nccl_init_method; const char* server_ip;
    const char* fs_path;
    const char* optimizer; float muon_lr; float muon_momentum; int muon_nesterov; int muon_ns_steps;
    const char* muon_adjust_lr;
    int cl_platform; int cl_device; int cl_list_devices;
} TrainArgs;
int pyllmc_parse_train_args(TrainArgs* out, int argc, char** argv);

/* the processes' communication (llmc/mpi_utils.h): pyllmc/train.py's mpi4py calls */
typedef struct {
    void* ctx; int local_size;
    void (*barrier)(void* ctx);
    void (*sum_floats)(void* ctx, float* buf, int n);
    void (*bcast_floats)(void* ctx, float* buf, int n, int root);
} ProcessComm;
extern "Python" void pyllmc_comm_barrier(void* ctx);
extern "Python" void pyllmc_comm_sum_floats(void* ctx, float* buf, int n);
extern "Python" void pyllmc_comm_bcast_floats(void* ctx, float* buf, int n, int root);
int pyllmc_train_main(int argc, char** argv, const ProcessComm* comm, int rank, int nproc, int* failed);

static const float TRAINER_ADAMW_BETA1;
static const float TRAINER_ADAMW_BETA2;
static const float TRAINER_ADAMW_EPS;
static const float TRAINER_GRAD_CLIP;
static const unsigned int TRAINER_INIT_SEED;
static const unsigned int TRAINER_SAMPLER_SEED;
float grad_clip_scale(float norm, float clip);

/* data loader (llmc/dataloader.h) */
int pyllmc_dataloader_new(DataLoader** out, const char* pattern, int B, int T, int rank, int nproc,
                          int shuffle, int vocab_size);
void pyllmc_dataloader_discard(DataLoader* l);
int pyllmc_dataloader_next_batch(DataLoader* l);
int pyllmc_dataloader_reset(DataLoader* l);
void pyllmc_dataloader_free(DataLoader* l);

/* tokenizer (llmc/tokenizer.h), learning-rate schedules (llmc/schedulers.h) */
typedef struct { uint32_t vocab_size; int init_ok; int eot_token; ...; } Tokenizer;
int pyllmc_tokenizer_new(Tokenizer** out, const char* path);
const char* tokenizer_decode(Tokenizer* t, uint32_t token_id);
size_t tokenizer_decode_length(Tokenizer* t, uint32_t token_id);
void pyllmc_tokenizer_free(Tokenizer* t);
typedef struct { ...; } LearningRateScheduler;
int pyllmc_lr_scheduler_new(LearningRateScheduler** out, const char* type, float lr, int warmup,
                            int total_steps, float final_frac);
float get_learning_rate(const LearningRateScheduler* s, int step);
void pyllmc_lr_scheduler_free(LearningRateScheduler* s);
"""


def makefile_flags() -> tuple[list[str], list[str]]:
    """(compile flags, link flags) from the Makefile's `pyllmc-flags` target, or a default."""
    cflags = ["-O3", "-march=native", "-fopenmp"]
    ldflags = ["-fopenmp", "-lm"]
    if (REPO / "Makefile").exists():
        try:
            out = subprocess.run(["make", "--no-print-directory", "-s", "-C", str(REPO), "pyllmc-flags"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            out = None
        if out is not None and out.returncode == 0:
            lines = dict(line.split(":", 1) for line in out.stdout.splitlines() if ":" in line)
            if "cflags" in lines and "ldlibs" in lines:
                cflags = shlex.split(lines["cflags"])
                ldflags = shlex.split(lines["ldlibs"])
    cflags += shlex.split(os.environ.get("PYLLMC_CFLAGS", ""))
    ldflags += shlex.split(os.environ.get("PYLLMC_LDFLAGS", ""))
    # warnings that cffi's generated wrapper code triggers
    cflags += ["-Wno-unused-parameter", "-Wno-unused-function", "-Wno-missing-field-initializers"]
    # Python's own CFLAGS come first and hold -fwrapv, which changes how gcc vectorizes the layers: on Zen 4
    # (-march=znver4) the extension's weights then differed from ./train_gpt2's in the last bit after one step.
    # -fno-wrapv (after them, so it wins) keeps the code ./train_gpt2 runs; -fPIC, -g and -DNDEBUG change nothing.
    cflags += ["-fno-wrapv"]
    return cflags, ldflags


def make_builder() -> FFI:
    cflags, ldflags = makefile_flags()
    ffibuilder = FFI()
    ffibuilder.cdef(CDEF)
    ffibuilder.set_source(
        "pyllmc._llmc",
        '#include "pyllmc/_capi.h"',
        include_dirs=[str(REPO)],
        extra_compile_args=cflags,
        extra_link_args=ldflags,
        libraries=["m"],
        py_limited_api=False,  # the same file name as `make pyllmc` builds
        depends=[str(p) for p in [REPO / "train_gpt2.c", REPO / "pyllmc" / "_capi.h", *sorted((REPO / "llmc").glob("**/*.h"))]],
    )
    return ffibuilder


ffibuilder = make_builder()

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=str(REPO), verbose=False)
