/*
llmc/cuda/gpu_trainer.cuh: what every GPU trainer does on the host around its model, written once: the flat
parameter, gradient and optimizer buffers laid out from the model's tensor table, the ZeRO-1 shard, the update
(AdamW, Muon), the gradient norm and reduction, the NCCL TrainerComm, saving and loading the GPU training state,
the TrainerOps that llmc/trainer.h's trainer_run drives, and main()'s start-up. A trainer (train_gpt2.cu) keeps
its model: the activations, the kernels' calls, forward and backward, its model file.

    GpuModel                  the model-independent half of a GPU model. A model's struct holds one
                              (typedef struct { GPT2Config config; ParameterTensors params, grads;
                              ActivationTensors acts; ...; GpuModel gpu; } GPT2, as the CPU models hold a
                              CpuModel), and every gpu_model_* call takes that GpuModel. It holds:
                              the tensor table: num_tensors tensors of param_sizes[k] elements laid back to
                                back in file order at param_offsets[k] (num_parameters in all), their names,
                                is_matrix (AdamW decays these; with per_layer also Muon's matrices) and
                                per_layer (L slices of one layer each) flags, L, C, V and the longest sequence;
                              params_memory, grads_memory: floatX, one allocation each, padded for the ZeRO-1
                                all-gather (zero_padded_size); m_memory, v_memory, master_weights: fp32 AdamW
                                moments and master weights of this rank's shard; the Muon state;
                              B, T, the batch buffers, and what a forward pass leaves for the trainer:
                                mean_loss, losses_host (B, T), logits (B, T, logits_stride) on the device;
                              norm_scratch (1 + GLOBAL_NORM_BLOCKS device floats, the model's), cublas, stream;
                              the activations' one allocation, -r, the encoder backward's token groups, cuDNN
    GPU_ACT_FIELD, GPU_ACT_POINT, GPU_ACT_LAYER   a model's activation table, rows X(type, name, per_layer,
                              per_token, has_grad) as the CPU's, expanded to its struct's pointers, pointed into
                              memory (gpu_act_point), and layer l's views (gpu_act_slice)
    gpu_model_init(m, family, config, params, grads, L, C, V, maxT)
                              the family's tensor table at the model's config (llmc/model_family.h) and the
                              model's views of its parameters and gradients; zeroes everything else
    gpu_model_build(m, family, calls, model, load, from_file, zero_stage, nproc)   -e for every family
                              (llmc/model_family.h's rule): calls->init, then the parameters of the model file or
                              of the family's init from scratch, on the device and kept for the master weights
    gpu_model_allocate_parameters(m, zero_stage, nproc)   the device parameters and gradients, zeroed
    gpu_model_load_parameters(m, params, grads, f, path, version, zero_stage, nproc)   those, the model's views of
                              them, and the host fp32 values (read from the open model file f, or for the caller
                              to fill from scratch when f is NULL)
    gpu_model_upload_parameters(m, host) / gpu_model_download_parameters(m, host)
                              host fp32 <-> device floatX (rounded to nearest / exact)
    gpu_model_set_init_params(m, host)   uploads host (fp32, malloc'd) and keeps it for the master weights
                              (gpu_model_allocate_state frees it): a checkpoint's values or the from-scratch init
    gpu_model_use_muon(m, settings, mats, count, state_size)   -op muon with the model's plan (mats,
                              malloc'd, owned from then on; muon_plan for GPT-2); before gpu_model_allocate_state
    gpu_model_use_muon_on_layers(m, settings, owners, rank)   the plan of every per-layer 2-D weight of the table
    gpu_model_allocate_state(m, B, T, shard, use_master_weights, stream)   batch buffers, the shard's optimizer
                              state (master weights from the kept fp32 parameters), the Muon state, cuBLAS
    gpu_model_allocate_activations(m, bytes, recompute, BT, V)   the activations' memory (returned for the
                              table to point into), the token groups of BT tokens over V rows
    gpu_model_prepare_attention(m, B, T, NH, NKV, HS, stream)   cuDNN builds: the attention graphs
    gpu_model_check_attention(B, T, NH, NKV, HS)   cuDNN builds: -b and -t against what cuDNN's attention runs
    gpu_model_describe(m, path)   rank 0's lines of the model: its family's config line, parameters, activations
                              (and cuDNN's attention)
    gpu_model_upload_batch(m, inputs, targets) / gpu_model_loss(m, targets, losses, dloss, V, write_dlogits)
                              a forward's start (the tokens to the device) and end (the classifier, mean_loss)
    gpu_model_free(m)
    gpu_model_layer_ranges(m, l, out)      the gradient ranges of layer l (-1: the tensors outside the layers)
    gpu_model_reduce_ranges(m, mg, ranges, n)   starts their reduction over the processes
    gpu_model_grad_norm(m, mg)             the global gradient norm (waits for the reductions)
    gpu_model_update(m, mg, lr, muon_lr, beta1, beta2, eps, weight_decay, grad_scale, t)
                              AdamW on the shard at lr (Muon on its matrices at muon_lr: trainer_run's, from
                              the -ol schedule), then the ZeRO-1 all-gather
    GpuModelCalls             the model's calls, each taking the model's struct as void*: those the trainer drives
                              (forward, backward) and those the programs around it make (init, use_muon,
                              allocate_state, set_gelu_fusion); a model writes them out and hands them over as one
                              table filled by field name (static const GpuModelCalls gpt2_calls). Its model file is
                              written from its family and config (gpu_save_model, llmc/model_file.h)
    GpuTrainer, gpu_trainer_init(g, model, calls, gpu, mg), gpu_trainer_ops(g), gpu_trainer_free(g)
                              the TrainerOps of a model; gpu_save_model, gpu_save_state, gpu_load_state are
                              its checkpoint calls (test programs call them directly)
    gpu_trainer_comm(mg)      the TrainerComm over NCCL / MPI
    gpu_parse_optimizer(args, argv0, muon) -op and the Muon flags; 1 for muon
    gpu_trainer_main(argc, argv, program, about, family, model, calls, gpu)   a trainer's main() (as llmc/cpu/
                              cpu_trainer.h's cpu_trainer_main): the flags, -op, the processes and this process's GPU, rank 0's
                              banner and flags, the data, the model (-e, or the resumed step's checkpoint), -t
                              against the model's maxT, its V grown for chat shards (llmc/trainer.h
                              trainer_grow_vocab_for_chat: GPT-2's), this rank's ZeRO shard, -op muon, the state, -ge, the
                              model's line, trainer_init with the GPU's peak FLOP/s and a step's FLOPs, the
                              training loop; returns the exit status. family: the model family's description
                              (llmc/model_family.h): -e's default and help, -t's name, the shards, the tokenizer
*/
#ifndef LLMC_GPU_TRAINER_CUH
#define LLMC_GPU_TRAINER_CUH

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../utils.h"
#include "../zero.h"
#include "../checkpoint.h"
#include "../mfu.h"
#include "../muon_config.h"
#include "../model_family.h"
#include "../decoder.h"
#include "../trainer.h"
#include "cuda_common.cuh"
#include "cublas_common.cuh"
#include "encoder.cuh"
#include "fused_classifier.cuh"
#ifdef ENABLE_CUDNN
#include "cudnn_att.h"
#endif
#include "global_norm.cuh"
#include "adamw.cuh"
#include "muon.cuh"
#include "multi_gpu.cuh"

// the most parameter tensors a model's table may have
#define GPU_MODEL_MAX_TENSORS 32

typedef struct {
    const ModelFamily* family;  // the model's family (llmc/model_family.h) and its config: what its model file holds
    const void* config;
    void* param_views;          // the model's structs of floatX pointers (one per tensor, table order) into the
    void* grad_views;           // parameters and the gradients: gpu_model_build points them
    int att_heads, att_kv_heads;  // NH query heads over NKV key/value heads (gpu_model_prepare_attention), for its line
    // the tensor table, file order
    int num_tensors;
    const char* const* names;
    const int* is_matrix;
    const int* per_layer;
    size_t param_sizes[GPU_MODEL_MAX_TENSORS];
    size_t param_offsets[GPU_MODEL_MAX_TENSORS];
    size_t num_parameters;
    int num_layers;            // L
    int channels;              // C (a step's FLOPs count with it)
    int vocab_size;            // V
    int max_seq_len;           // the longest sequence the model takes (-t is checked against it)
    floatX* params_memory;     // padded for the ZeRO-1 all-gather (zero_padded_size)
    floatX* grads_memory;
    float* master_weights;     // fp32 copy of this rank's shard (bf16 builds with -w 1), else NULL
    float* init_params;        // host fp32 parameters as the model read or initialised them, until
                               // gpu_model_allocate_state has made the master weights from them (then NULL)
    float* m_memory;           // AdamW moments of this rank's shard
    float* v_memory;
    // -op muon: the blocks' 2-D weights are Muon's (llmc/cuda/muon.cuh); AdamW's m, v, master there go unused
    int use_muon;
    MuonConfig muon;
    MuonMatrix* muon_mats;     // the matrices and their owners
    int muon_count;
    size_t muon_state_size;    // elements of Muon state this rank holds (the matrices it owns)
    float* muon_buf;           // momentum of the matrices this rank owns
    float* muon_master;        // their fp32 master weights (bf16 builds with -w 1), else NULL
    MuonWorkspace muon_ws;
    int B, T;                  // the batch size and sequence length of a forward pass
    int* inputs;               // (B, T) device
    int* targets;              // (B, T) device
    float* losses_host;        // (B, T) pinned, the last forward's per-token losses
    float mean_loss;           // their mean (-1 after a forward without targets)
    floatX* logits;            // (B, T, logits_stride) device: the last forward's logits (V used per row)
    size_t logits_stride;
    float logit_softcap;       // > 0: the logits are capped (the model's forward caps them; the classifier's
                               // gradient is then the one before the cap), 0 none
    float* norm_scratch;       // (1 + GLOBAL_NORM_BLOCKS) device: the squared norm, then its partial sums
    float* norm_host;          // pinned scalar
    CublasContext cublas;
    cudaStream_t stream;
    // the activations: one allocation the model's table points into (gpu_model_allocate_activations)
    void* acts_memory;
    size_t acts_bytes;
    int recompute;             // -r: 0 none, 1 the MLP activation, 2 also the norms
    TokenGroups token_groups;  // host bookkeeping of the encoder backward
    TokenGroupsDevice token_groups_device;
#ifdef ENABLE_CUDNN
    CudnnAttention* cudnn;     // cuDNN handle, workspace and the cached attention graphs
#endif
} GpuModel;

// A model's activation table has rows X(type, name, per_layer, per_token, has_grad), the CPU's rows
// (llmc/cpu/cpu_model.h) with the element type in front: each tensor is (B, T, per_token), or (L, B, T, per_token)
// when per_layer (a row's per_layer is 0 when the backward recomputes it, -r: all layers share one slice);
// has_grad: the backward needs its gradient (the GPU keeps no per-tensor gradient buffers: the backward writes
// gradients into scratch rows, so nothing reads the column here). Every slice (one layer's, or the whole tensor)
// starts 256-byte aligned. GPU_ACT_FIELD declares a row's pointer; GPU_ACT_POINT, in a function with a->, memory,
// offset, L and BT, points it at offset in memory (NULL: only counts; a row of 0 elements gets NULL) and moves
// offset past it; GPU_ACT_LAYER, in a function with v, a->, l and BT, sets layer l's view v.name of a->name.
#define GPU_ACT_FIELD(type, name, per_layer, per_token, has_grad) type* name;
#define GPU_ACT_POINT(type, name, per_layer, per_token, has_grad) \
    a->name = (type*)gpu_act_point(memory, &offset, (per_layer) ? L : 1, BT * (size_t)(per_token) * sizeof(type));
#define GPU_ACT_LAYER(type, name, per_layer, per_token, has_grad) \
    v.name = (type*)gpu_act_slice(a->name, (per_layer) ? l : 0, BT * (size_t)(per_token) * sizeof(type));

// the bytes of one slice of `bytes` in the activations' memory: rounded up to 256, so every slice starts aligned
static size_t gpu_act_slice_bytes(size_t bytes) { return (bytes + 255) / 256 * 256; }

// slices of `bytes` each at offset in memory (memory NULL: only counts; 0 bytes: NULL); moves offset past them
static void* gpu_act_point(char* memory, size_t* offset, size_t slices, size_t bytes) {
    void* p = memory != NULL && bytes > 0 ? (void*)(memory + *offset) : NULL;
    *offset += slices * gpu_act_slice_bytes(bytes);
    return p;
}

// slice `index` of a tensor whose slices are `bytes` each (NULL stays NULL)
static void* gpu_act_slice(void* tensor, int index, size_t bytes) {
    return tensor != NULL ? (void*)((char*)tensor + (size_t)index * gpu_act_slice_bytes(bytes)) : NULL;
}

// the tensor table of a model of this family and config (llmc/model_family.h; config stays the model's, it is
// what its model file is written from) and the model's views of its parameters and gradients (its structs of floatX
// pointers, pointed by gpu_model_build); zeroes everything else
static void gpu_model_init(GpuModel* m, const ModelFamily* family, const void* config, void* param_views, void* grad_views,
                           int num_layers, int channels, int vocab_size, int max_seq_len) {
    memset(m, 0, sizeof(*m));
    m->param_views = param_views;
    m->grad_views = grad_views;
    const int num_tensors = family->num_tensors;
    if (num_tensors > GPU_MODEL_MAX_TENSORS) { llmc_die("internal: %d parameter tensors, at most %d", num_tensors, GPU_MODEL_MAX_TENSORS); }
    m->family = family;
    m->config = config;
    m->num_tensors = num_tensors;
    m->names = family->tensor_names;
    m->is_matrix = family->tensor_is_matrix;
    m->per_layer = family->tensor_per_layer;
    size_t sizes[GPU_MODEL_MAX_TENSORS];
    m->num_parameters = tensor_table_sizes(family->tensor_dims, config, num_tensors, sizes);
    size_t off = 0;
    for (int i = 0; i < num_tensors; i++) {
        m->param_sizes[i] = sizes[i];
        m->param_offsets[i] = off;
        off += sizes[i];
    }
    m->num_layers = num_layers;
    m->channels = channels;
    m->vocab_size = vocab_size;
    m->max_seq_len = max_seq_len;
    m->mean_loss = -1.0f;
}

// points views (the model's struct of floatX pointers, one per parameter tensor in table order) into memory: the
// device parameters or gradients
static void gpu_model_point(const GpuModel* m, void* views, floatX* memory) {
    tensor_table_point(m->family->tensor_dims, m->config, m->num_tensors, views, memory, sizeof(floatX));
}

// layer l's view (a struct of one layer's floatX pointers) of the model's parameter or gradient views
template <typename LayerViews, typename Views>
static LayerViews gpu_model_layer(const GpuModel* m, const Views* views, int l) {
    const ModelFamily* f = m->family;
    LayerViews w;
    tensor_table_layer(f->tensor_dims, m->config, f->first_layer_tensor, f->num_layer_tensors, &w, views, sizeof(floatX), l);
    return w;
}

// parameters and gradients on the device; padded so that the ZeRO-1 all-gather stays in bounds
static void gpu_model_allocate_parameters(GpuModel* m, int zero_stage, int nproc) {
    size_t bytes = zero_padded_size(m->num_parameters, zero_stage, nproc) * sizeof(floatX);
    m->params_memory = (floatX*)cudaMallocCheck(bytes);
    m->grads_memory = (floatX*)cudaMallocCheck(bytes);
    cudaCheck(cudaMemset(m->params_memory, 0, bytes));
    cudaCheck(cudaMemset(m->grads_memory, 0, bytes));
}

// host fp32 parameters -> device floatX (round to nearest)
static void gpu_model_upload_parameters(GpuModel* m, const float* host_params) {
    size_t n = m->num_parameters;
    floatX* staging = (floatX*)mallocCheck(n * sizeof(floatX));
    floatX_from_float_host(staging, host_params, n);
    cudaCheck(cudaMemcpy(m->params_memory, staging, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(staging);
}

// device floatX parameters -> host fp32 (exact)
static void gpu_model_download_parameters(const GpuModel* m, float* host_params) {
    size_t n = m->num_parameters;
    floatX* staging = (floatX*)mallocCheck(n * sizeof(floatX));
    cudaCheck(cudaMemcpy(staging, m->params_memory, n * sizeof(floatX), cudaMemcpyDeviceToHost));
    float_from_floatX_host(host_params, staging, n);
    free(staging);
}

// The device gets the parameters rounded to floatX; the fp32 values stay in m->init_params for the master
// weights (gpu_model_allocate_state), not the floatX copy: in bf16 builds that copy is rounded, and training
// would start from the rounded weights instead of the checkpoint's. host: malloc'd, owned from here on.
static void gpu_model_set_init_params(GpuModel* m, float* host) {
    gpu_model_upload_parameters(m, host);
    m->init_params = host;
}

// The parameters of a model whose config is known (gpu_model_init first): the device parameters and gradients
// (padded for the ZeRO-1 all-gather), the model's views of both (its structs of floatX pointers, table order),
// and their fp32 values on the host, returned (malloc'd, num_parameters of them; hand them to
// gpu_model_set_init_params): read from f, the model file `path` open at its first parameter (then closed), or
// left for the caller to fill when f is NULL (from scratch).
static float* gpu_model_load_parameters(GpuModel* m, void* params, void* grads, FILE* f, const char* path, int version,
                                        int zero_stage, int nproc) {
    gpu_model_allocate_parameters(m, zero_stage, nproc);
    gpu_model_point(m, params, m->params_memory);
    gpu_model_point(m, grads, m->grads_memory);
    float* host = (float*)mallocCheck(m->num_parameters * sizeof(float));
    if (f != NULL) {
        model_file_read_params(f, path, version, host, m->num_parameters);
        fcloseCheck(f, path);
    }
    return host;
}

// -e, for every family (llmc/model_family.h's rule): the model of the model file load, or of a descriptor from scratch
// (the family's init at TRAINER_INIT_SEED); from_file: load is a model file whatever its name (a resumed checkpoint).
// calls->init keeps the config and sets up m (gpu_model_init); then the parameters, padded for the ZeRO-1 all-gather
// of zero_stage over nproc processes, go to the device rounded to floatX, their fp32 values kept for the master weights.
static void gpu_model_build_with(GpuModel* m, const ModelFamily* family, void (*init)(void* model, const void* config),
                                 void* model, const char* load, int from_file, int zero_stage, int nproc) {
    void* config = callocCheck(1, family->model_file->config_size);
    int scratch = model_family_config(family, load, from_file, config);
    FILE* f = NULL;
    int version = 0;
    if (!scratch) { f = model_file_open(load, family->model_file, config, &version); }
    init(model, config);
    free(config);
    float* host = gpu_model_load_parameters(m, m->param_views, m->grad_views, f, load, version, zero_stage, nproc);
    if (scratch) { family->init_params(host, m->config, TRAINER_INIT_SEED); }
    gpu_model_set_init_params(m, host);
}

// -op muon: Muon on the matrices of the model's plan (mats: count of them, malloc'd, owned from here on;
// state_size: the elements of Muon state this rank holds) with these settings. Before gpu_model_allocate_state.
static void gpu_model_use_muon(GpuModel* m, const MuonConfig* settings, MuonMatrix* mats, int count, size_t state_size) {
    if (m->init_params == NULL) { llmc_die("internal: gpu_model_use_muon after gpu_model_allocate_state"); }
    m->use_muon = 1;
    m->muon = *settings;
    m->muon_mats = mats;
    m->muon_count = count;
    m->muon_state_size = state_size;
}

// -op muon on every per-layer 2-D weight of the model's tensor table (llmc/model_family.h), each layer's slice whole
// or in the family's row blocks (llmc/decoder.h decoder_muon_row_blocks: nanochat's q, k, v), the matrices spread over
// owners processes (muon_plan_table); before gpu_model_allocate_state
static void gpu_model_use_muon_on_layers(GpuModel* m, const MuonConfig* settings, int owners, int rank) {
    size_t dims[GPU_MODEL_MAX_TENSORS][3], blocks[GPU_MODEL_MAX_TENSORS][MUON_MAX_ROW_BLOCKS], state_size = 0, count = 0;
    m->family->tensor_dims(dims, m->config);
    decoder_muon_row_blocks(m->family, m->config, (const size_t(*)[3])dims, blocks);
    for (int k = 0; k < m->num_tensors; k++) { count += m->per_layer[k] && m->is_matrix[k] ? dims[k][0] * MUON_MAX_ROW_BLOCKS : 0; }
    MuonMatrix* mats = (MuonMatrix*)mallocCheck((count + 1) * sizeof(MuonMatrix));
    int n = muon_plan_table((const size_t(*)[3])dims, (const size_t(*)[MUON_MAX_ROW_BLOCKS])blocks, m->per_layer,
                            m->is_matrix, m->num_tensors, owners, rank, mats, &state_size);
    gpu_model_use_muon(m, settings, mats, n, state_size);
}

// the fp32 master weights of this rank's shard, from the fp32 parameters on the host
static void gpu_model_init_master_weights(GpuModel* m, const float* host_params, ZeroShard shard) {
    if (shard.size == 0) { return; }
    if (shard.offset + shard.size > m->num_parameters) {
        llmc_die("internal: shard [%zu, +%zu) outside the %zu parameters", shard.offset, shard.size, m->num_parameters);
    }
    cudaCheck(cudaMemcpy(m->master_weights, host_params + shard.offset, shard.size * sizeof(float), cudaMemcpyHostToDevice));
}

// the Muon state of the matrices this rank owns: zero momentum, master weights from the fp32 parameters
static void gpu_model_allocate_muon(GpuModel* m, int use_master_weights) {
    size_t n = m->muon_state_size, max_elems = 1, max_r = 1;
    m->muon_buf = (float*)cudaMallocCheck(n * sizeof(float) + 1);
    cudaCheck(cudaMemset(m->muon_buf, 0, n * sizeof(float) + 1));
    m->muon_master = use_master_weights ? (float*)cudaMallocCheck(n * sizeof(float) + 1) : NULL;
    for (int k = 0; k < m->muon_count; k++) {
        const MuonMatrix* mat = &m->muon_mats[k];
        size_t r = mat->rows < mat->cols ? mat->rows : mat->cols;
        if (mat->rows * mat->cols > max_elems) { max_elems = mat->rows * mat->cols; }
        if (r > max_r) { max_r = r; }
        if (mat->state_offset != SIZE_MAX && m->muon_master != NULL) {
            cudaCheck(cudaMemcpy(m->muon_master + mat->state_offset, m->init_params + mat->offset,
                                 mat->rows * mat->cols * sizeof(float), cudaMemcpyHostToDevice));
        }
    }
    muon_workspace_init(&m->muon_ws, max_elems, max_r);
}

// the buffers of forward passes of B x T tokens, the optimizer state of this rank's shard (AdamW moments,
// master weights with -w 1 in bf16 builds, Muon's), then the cuBLAS context on the stream
static void gpu_model_allocate_state(GpuModel* m, int B, int T, ZeroShard shard, int use_master_weights, cudaStream_t stream) {
    m->B = B;
    m->T = T;
    m->stream = stream;
    m->inputs = (int*)cudaMallocCheck((size_t)B * T * sizeof(int));
    m->targets = (int*)cudaMallocCheck((size_t)B * T * sizeof(int));
    cudaCheck(cudaMallocHost((void**)&m->losses_host, (size_t)B * T * sizeof(float)));
    cudaCheck(cudaMallocHost((void**)&m->norm_host, sizeof(float)));
    m->m_memory = (float*)cudaMallocCheck(shard.size * sizeof(float));
    m->v_memory = (float*)cudaMallocCheck(shard.size * sizeof(float));
    cudaCheck(cudaMemset(m->m_memory, 0, shard.size * sizeof(float)));
    cudaCheck(cudaMemset(m->v_memory, 0, shard.size * sizeof(float)));
    m->master_weights = NULL;
    if (use_master_weights && PRECISION_IS_BF16) {
        if (m->init_params == NULL) { llmc_die("internal: gpu_model_allocate_state without the model's fp32 parameters"); }
        m->master_weights = (float*)cudaMallocCheck(shard.size * sizeof(float));
        gpu_model_init_master_weights(m, m->init_params, shard);
    }
    if (m->use_muon) { gpu_model_allocate_muon(m, use_master_weights && PRECISION_IS_BF16); }
    free(m->init_params);  // the device has the parameters, the master weights their fp32 values
    m->init_params = NULL;
    cublas_context_init(&m->cublas, stream);
}

// the activations for micro-batches of BT tokens at recompute level -r: `bytes` (as the model's table counts
// them) in one allocation, returned for the table to point into, and the encoder backward's bookkeeping of the
// tokens over V rows of wte
static char* gpu_model_allocate_activations(GpuModel* m, size_t bytes, int recompute, int BT, int V) {
    m->recompute = recompute;
    m->acts_bytes = bytes;
    m->acts_memory = cudaMallocCheck(bytes);
    token_groups_init(&m->token_groups, BT, V);
    token_groups_device_init(&m->token_groups_device, BT);
    return (char*)m->acts_memory;
}

// cuDNN builds: the attention graphs for B x T with NH query heads over NKV key/value heads of size HS (the
// explicit attention needs nothing)
static void gpu_model_prepare_attention(GpuModel* m, int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    m->att_heads = NH;
    m->att_kv_heads = NKV;
#ifdef ENABLE_CUDNN
    m->cudnn = cudnn_attention_create(stream);
    cudnn_attention_prepare(m->cudnn, B, T, NH, NKV, HS);
#else
    (void)m; (void)B; (void)T; (void)NH; (void)NKV; (void)HS; (void)stream;
#endif
}

// grouped-query attention of NH query heads over NKV key/value heads of HS: in cuDNN builds, -b B and -t T checked
// against what cuDNN's attention runs (one line when it cannot), and rank 0's line of it (gpu_model_describe_attention)
static void gpu_model_check_attention(int B, int T, int NH, int NKV, int HS) {
#ifdef ENABLE_CUDNN
    const char* why = cudnn_att_shape_error(B, T, NH, NKV, HS);
    if (why != NULL) { llmc_die("-b %d -t %d with %d query heads over %d key/value heads of size %d: cuDNN attention cannot run it: %s",
                                B, T, NH, NKV, HS, why); }
#else
    (void)B; (void)T; (void)NH; (void)NKV; (void)HS;
#endif
}

// rank 0's lines of the model: its path, its family's config line, its parameters and activations, and in cuDNN builds
// the attention's (grouped-query where NKV < NH)
static void gpu_model_describe(const GpuModel* m, const char* path) {
    char line[256];
    model_family_describe(m->family, m->config, line, sizeof(line));
    printf("model: %s %s, %zu parameters, %.2f GiB of activations\n", path, line, m->num_parameters,
           (double)m->acts_bytes / (1024.0 * 1024.0 * 1024.0));
#ifdef ENABLE_CUDNN
    char grouped[96] = "";
    if (m->att_kv_heads < m->att_heads) {
        snprintf(grouped, sizeof(grouped), " (grouped-query, %d query heads over %d key/value heads)", m->att_heads, m->att_kv_heads);
    }
    printf("attention: cuDNN flash attention%s, %.2f GiB of cuDNN workspace\n", grouped,
           (double)cudnn_attention_workspace_bytes(m->cudnn) / (1024.0 * 1024.0 * 1024.0));
#endif
}

// a forward's start: the host (B, T) inputs, and the targets unless NULL, to the device. A target is an id in
// [0, V) or -1 (not supervised: the classifier gives it loss 0 and no gradient); anything else would be read out of
// bounds by the classifier, so it stops here (the input ids: token_groups_build, the encoder's backward)
static void gpu_model_upload_batch(GpuModel* m, const int* inputs, const int* targets) {
    const size_t BT = (size_t)m->B * m->T;
    cudaCheck(cudaMemcpyAsync(m->inputs, inputs, BT * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    if (targets != NULL) {
        for (size_t i = 0; i < BT; i++) {
            if (targets[i] < -1 || targets[i] >= m->vocab_size) {
                llmc_die("target token id %d at position %zu is outside [-1, %d)", targets[i], i, m->vocab_size);
            }
        }
        cudaCheck(cudaMemcpyAsync(m->targets, targets, BT * sizeof(int), cudaMemcpyHostToDevice, m->stream));
    }
}

// a forward's end, once the logits are written: without targets mean_loss = -1; with them the per-token losses
// (B, T) of the V used logits of each row, their mean over all B x T positions in mean_loss (a position with target
// -1 has loss 0 and counts 0: llmc/trainer.h rescales to the mean over the supervised ones), and with write_dlogits
// the dlogits (scaled by dloss; zero rows where the target is -1) over the logits
static void gpu_model_loss(GpuModel* m, const int* targets, float* losses, float dloss, int V, int write_dlogits) {
    if (targets == NULL) {
        m->mean_loss = -1.0f;
        return;
    }
    const int BT = m->B * m->T;
    fused_classifier(m->logits, losses, m->targets, dloss, BT, V, (int)m->logits_stride, m->logit_softcap, write_dlogits,
                     m->stream);
    cudaCheck(cudaMemcpyAsync(m->losses_host, losses, (size_t)BT * sizeof(float), cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    double sum = 0.0;
    for (int i = 0; i < BT; i++) { sum += m->losses_host[i]; }
    m->mean_loss = (float)(sum / BT);
}

static void gpu_model_free(GpuModel* m) {
#ifdef ENABLE_CUDNN
    cudnn_attention_free(m->cudnn);
#endif
    cudaCheck(cudaFree(m->acts_memory));
    token_groups_free(&m->token_groups);
    token_groups_device_free(&m->token_groups_device);
    free(m->init_params);
    cublas_context_free(&m->cublas);
    cudaCheck(cudaFree(m->params_memory));
    cudaCheck(cudaFree(m->grads_memory));
    cudaCheck(cudaFree(m->m_memory));
    cudaCheck(cudaFree(m->v_memory));
    if (m->master_weights != NULL) { cudaCheck(cudaFree(m->master_weights)); }
    if (m->use_muon) {
        free(m->muon_mats);
        cudaCheck(cudaFree(m->muon_buf));
        if (m->muon_master != NULL) { cudaCheck(cudaFree(m->muon_master)); }
        muon_workspace_free(&m->muon_ws);
    }
    cudaCheck(cudaFree(m->inputs));
    cudaCheck(cudaFree(m->targets));
    cudaCheck(cudaFreeHost(m->losses_host));
    cudaCheck(cudaFreeHost(m->norm_host));
}

// ----------------------------------------------------------------------------
// gradients and the update

// the gradient ranges of layer l, or with l = -1 those of the tensors outside the layers; returns how
// many were written to out (capacity num_tensors)
static int gpu_model_layer_ranges(const GpuModel* m, int l, GradRange* out) {
    return grad_table_layer_ranges(m->param_offsets, m->param_sizes, m->per_layer, m->num_tensors, m->num_layers, l, out);
}

// 1 for tensor k when Muon updates it (-op muon): the blocks' 2-D weights
static int gpu_model_is_muon_tensor(const GpuModel* m, int k) { return m->use_muon && m->is_matrix[k] && m->per_layer[k]; }

// 1 when the flat index i lies in a tensor Muon updates
static int gpu_model_in_muon_tensor(const GpuModel* m, size_t i) {
    for (int k = 0; k < m->num_tensors; k++) {
        if (i >= m->param_offsets[k] && i < m->param_offsets[k] + m->param_sizes[k]) { return gpu_model_is_muon_tensor(m, k); }
    }
    return 0;
}

// starts the reduction of gradient ranges over the processes: Muon's matrices under ZeRO-1 are
// all-reduced (their owner needs the whole matrix), the rest as the ZeRO stage says
static void gpu_model_reduce_ranges(GpuModel* m, MultiGpu* mg, const GradRange* ranges, int n) {
    GradRange muon[GPU_MODEL_MAX_TENSORS], rest[GPU_MODEL_MAX_TENSORS];
    int n_muon = 0, n_rest = 0;
    for (int r = 0; r < n; r++) {
        if (mg->zero_stage == 1 && gpu_model_in_muon_tensor(m, ranges[r].lo)) { muon[n_muon++] = ranges[r]; }
        else { rest[n_rest++] = ranges[r]; }
    }
    multi_gpu_reduce_ranges_stage(mg, m->grads_memory, muon, n_muon, 0, m->stream);
    multi_gpu_reduce_ranges(mg, m->grads_memory, rest, n_rest, m->stream);
}

// the squared norm of the (reduced) gradients this rank owns, summed over ranks; waits for the reductions
static float gpu_model_grad_norm(GpuModel* m, MultiGpu* mg) {
    cudaStream_t stream = m->stream;
    multi_gpu_sync(mg, stream);
    global_norm_squared(m->norm_scratch, m->norm_scratch + 1, m->grads_memory + mg->shard.offset, mg->shard.size, stream);
    if (mg->zero_stage == 1) { multi_gpu_sum_floats(mg, m->norm_scratch, 1, stream); }
    cudaCheck(cudaMemcpyAsync(m->norm_host, m->norm_scratch, sizeof(float), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaStreamSynchronize(stream));
    return sqrtf(*m->norm_host);
}

// AdamW on this rank's shard, one launch per parameter tensor it overlaps (weight decay on
// the 2-D weights only); with -op muon the blocks' 2-D weights get Muon at muon_lr instead, each
// matrix from the rank that owns it (every rank under ZeRO-0), broadcast from there under ZeRO-1;
// then the ZeRO-1 all-gather
static void gpu_model_update(GpuModel* m, MultiGpu* mg, float lr, float muon_lr, float beta1, float beta2, float eps,
                             float weight_decay, float grad_scale, int t) {
    AdamWScalars scalars = adamw_step_scalars(lr, beta1, beta2, eps, t);
    uint32_t seed = llmc_hash_u32((uint32_t)t, 0x5EEDu);
    size_t s0 = mg->shard.offset, s1 = mg->shard.offset + mg->shard.size;
    for (int i = 0; i < m->num_tensors; i++) {
        size_t t0 = m->param_offsets[i], t1 = t0 + m->param_sizes[i];
        size_t lo = t0 > s0 ? t0 : s0, hi = t1 < s1 ? t1 : s1;
        if (hi <= lo || gpu_model_is_muon_tensor(m, i)) { continue; }
        float wd = m->is_matrix[i] ? weight_decay : 0.0f;
        adamw_update(m->params_memory, m->master_weights, m->grads_memory, m->m_memory, m->v_memory,
                     lo, hi - lo, lo - s0, wd, grad_scale, scalars, seed, m->stream);
    }
    if (m->use_muon) {
        GradReduceOp* owners = (GradReduceOp*)mallocCheck((size_t)m->muon_count * sizeof(GradReduceOp));
        for (int k = 0; k < m->muon_count; k++) {
            const MuonMatrix* mat = &m->muon_mats[k];
            if (mat->state_offset != SIZE_MAX) {
                muon_update_matrix(&m->cublas, &m->muon_ws, m->params_memory, m->muon_master, m->grads_memory, m->muon_buf,
                                   mat, muon_lr, weight_decay, grad_scale, &m->muon, seed, m->stream);
            }
            owners[k].offset = mat->offset;
            owners[k].count = mat->rows * mat->cols;
            owners[k].root = mat->owner;
        }
        if (mg->zero_stage == 1) { multi_gpu_broadcast_ranges(mg, m->params_memory, owners, m->muon_count, m->stream); }
        free(owners);
    }
    multi_gpu_gather_params(mg, m->params_memory, m->stream);
}

// ----------------------------------------------------------------------------
// what the GPU trainer brings to llmc/trainer.h's loop (the loop, checkpoints, signals and every rule
// of training are shared with the CPU trainers there): the model's kernels, device memory and NCCL

// A model's calls, each taking the model's struct (which holds its GpuModel): those the trainer drives and
// those the programs around the model make. A model writes them out as functions of its own and hands them over
// as one table (static const GpuModelCalls gpt2_calls = {...} in train_gpt2.cu), as the CPU models do.
typedef struct {
    // the model of this config (its family's struct, kept by the model): gpu_model_init with the model's views of its
    // parameters and gradients, and what else the model sets up before them (gpu_model_build reads or draws the
    // parameters, for -e and the resumed checkpoint)
    void (*init)(void* model, const void* config);
    // -op muon with these settings, Muon's matrices spread over owners processes (before allocate_state); NULL:
    // every per-layer 2-D weight of the family's table (gpu_model_use_muon_on_layers)
    void (*use_muon)(void* model, const MuonConfig* settings, int owners, int rank);
    // the activations for B x T tokens at recompute level -r, the optimizer state of the shard, cuBLAS on stream
    void (*allocate_state)(void* model, int B, int T, int recompute, ZeroShard shard, int use_master_weights,
                           cudaStream_t stream);
    // -ge: GELU fused into the cuBLASLt epilogues; NULL for a model without the option
    void (*set_gelu_fusion)(void* model, int on);
    // inputs, targets: host (B, T) token ids; targets may be NULL (logits only). With targets: per-token
    // losses in losses_host, their mean in mean_loss, and with write_dlogits the dlogits (scaled by dloss)
    // in place of the logits
    void (*forward)(void* model, const int* inputs, const int* targets, float dloss, int write_dlogits);
    // the gradients of the last forward (write_dlogits = 1) ADDED to grads_memory; reduce: the step's last
    // micro-batch, so each finished layer's gradients start their reduction over the processes
    void (*backward)(void* model, const int* inputs, MultiGpu* mg, int reduce);
} GpuModelCalls;

// -e (gpu_model_build_with) through the model's calls
static void gpu_model_build(GpuModel* m, const ModelFamily* family, const GpuModelCalls* calls, void* model, const char* load,
                            int from_file, int zero_stage, int nproc) {
    gpu_model_build_with(m, family, calls->init, model, load, from_file, zero_stage, nproc);
}

// -op muon: the model's own plan, else every per-layer 2-D weight of its table
static void gpu_model_use_muon_of(GpuModel* m, const GpuModelCalls* calls, void* model, const MuonConfig* settings,
                                  int owners, int rank) {
    if (calls->use_muon != NULL) {
        calls->use_muon(model, settings, owners, rank);
    } else {
        gpu_model_use_muon_on_layers(m, settings, owners, rank);
    }
}

typedef struct {
    void* model;             // the model's struct, its calls, and its GpuModel
    const GpuModelCalls* calls;
    GpuModel* gpu;
    MultiGpu* mg;
    int* tokens;             // (B, T) host staging for next_token_logits
    float* logits_row;       // (V) host
    floatX* logits_staging;  // (V) host
} GpuTrainer;

static void gpu_trainer_init(GpuTrainer* g, void* model, const GpuModelCalls* calls, GpuModel* gpu, MultiGpu* mg) {
    g->model = model;
    g->calls = calls;
    g->gpu = gpu;
    g->mg = mg;
    g->tokens = (int*)mallocCheck((size_t)gpu->B * gpu->T * sizeof(int));
    g->logits_row = (float*)mallocCheck((size_t)gpu->vocab_size * sizeof(float));
    g->logits_staging = (floatX*)mallocCheck((size_t)gpu->vocab_size * sizeof(floatX));
}

static void gpu_trainer_free(GpuTrainer* g) {
    free(g->tokens);
    free(g->logits_row);
    free(g->logits_staging);
}

static void gpu_zero_grad(void* ctx) {
    GpuModel* m = ((GpuTrainer*)ctx)->gpu;
    cudaCheck(cudaMemsetAsync(m->grads_memory, 0, m->num_parameters * sizeof(floatX), m->stream));
}

// the last micro-batch's backward starts each finished layer's gradient reduction over the processes
static float gpu_forward_backward(void* ctx, const int* inputs, const int* targets, float loss_scale, int last) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GpuModel* m = g->gpu;
    g->calls->forward(g->model, inputs, targets, loss_scale / (float)(m->B * m->T), 1);
    g->calls->backward(g->model, inputs, g->mg, last);
    return m->mean_loss;
}

static float gpu_grad_norm(void* ctx) { return gpu_model_grad_norm(((GpuTrainer*)ctx)->gpu, ((GpuTrainer*)ctx)->mg); }

// lr, muon_lr: trainer_run's, each from its own schedule (-l, -ol)
static void gpu_update(void* ctx, float lr, float muon_lr, float weight_decay, float grad_scale, int t) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    gpu_model_update(g->gpu, g->mg, lr, muon_lr, TRAINER_ADAMW_BETA1, TRAINER_ADAMW_BETA2, TRAINER_ADAMW_EPS, weight_decay,
                     grad_scale, t);
    cudaCheck(cudaStreamSynchronize(g->gpu->stream)); // the step's time includes the update
}

static const float* gpu_forward_losses(void* ctx, const int* inputs, const int* targets) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    g->calls->forward(g->model, inputs, targets, 0.0f, 0);
    return g->gpu->losses_host;
}

// a full (B, T) forward with tokens[0..len) in the first row (the rest is padding the causal
// attention never lets position len - 1 see), then that position's logits
static const float* gpu_next_token_logits(void* ctx, const int* tokens, int len) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GpuModel* m = g->gpu;
    const int BT = m->B * m->T, V = m->vocab_size;
    for (int i = 0; i < BT; i++) { g->tokens[i] = i < len ? tokens[i] : tokens[0]; }
    g->calls->forward(g->model, g->tokens, NULL, 0.0f, 0);
    cudaCheck(cudaMemcpy(g->logits_staging, m->logits + (size_t)(len - 1) * m->logits_stride, (size_t)V * sizeof(floatX),
                         cudaMemcpyDeviceToHost));
    float_from_floatX_host(g->logits_row, g->logits_staging, (size_t)V);
    return g->logits_row;
}

// rank 0: fp32 values of the parameters
static void gpu_save_model(void* ctx, const char* path) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GpuModel* m = g->gpu;
    cudaCheck(cudaStreamSynchronize(m->stream));
    float* host = (float*)mallocCheck(m->num_parameters * sizeof(float));
    gpu_model_download_parameters(m, host);
    model_file_write(path, m->family->model_file, m->config, host, m->num_parameters);
    free(host);
}

// The training state holds this rank's ZeRO shard: AdamW m, v, and after the detectors its fp32
// master weights (bf16 builds with -w 1); with -op muon then the Muon momentum of the matrices this
// rank owns and their fp32 master weights (when the shard has them). Host copies of them, on the way
// to or from the file.
typedef struct {
    size_t shard, master;  // element counts (master 0: none)
    size_t muon, muon_master;
    float* m;
    float* v;
    float* w;
    char* extra;
    size_t muon_at;        // where the Muon state starts in extra
} GpuStateStaging;

// fills the optimizer fields of s and allocates the host copies
static GpuStateStaging gpu_state_staging(const GpuTrainer* g, TrainState* s, const char* path) {
    GpuStateStaging st;
    st.shard = g->mg->shard.size;
    st.master = g->gpu->master_weights != NULL ? st.shard : 0;
    st.muon = g->gpu->use_muon ? g->gpu->muon_state_size : 0;
    st.muon_master = g->gpu->muon_master != NULL ? st.muon : 0;
    st.muon_at = trainer_state_extra_bytes(st.master);
    // 64-bit in the file: 6.2 GB for 1558M on one GPU
    size_t extra = st.muon_at + (st.muon + st.muon_master) * sizeof(float);
    if (!trainer_state_fits(st.shard, extra)) {
        llmc_die("%s: the optimizer state of this rank (%zu values, %zu extra bytes) does not fit in one file", path, st.shard, extra);
    }
    s->num_parameters = g->gpu->num_parameters;
    s->optimizer = g->gpu->use_muon;  // a resume with the other -op is refused (llmc/checkpoint.h)
    s->opt_offset = g->mg->shard.offset;
    s->opt_size = st.shard;
    s->extra_bytes = extra;
    st.m = (float*)mallocCheck(st.shard * sizeof(float) + 1);
    st.v = (float*)mallocCheck(st.shard * sizeof(float) + 1);
    st.w = (float*)mallocCheck(st.master * sizeof(float) + 1);
    st.extra = (char*)mallocCheck(extra);
    return st;
}

static void gpu_state_staging_free(GpuStateStaging* st) {
    free(st->m);
    free(st->v);
    free(st->w);
    free(st->extra);
}

static void gpu_save_state(void* ctx, const char* path, TrainState* s, const TrainerDetectors* d) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GpuModel* model = g->gpu;
    GpuStateStaging st = gpu_state_staging(g, s, path);
    cudaCheck(cudaStreamSynchronize(model->stream));
    cudaCheck(cudaMemcpy(st.m, model->m_memory, st.shard * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(st.v, model->v_memory, st.shard * sizeof(float), cudaMemcpyDeviceToHost));
    if (st.master > 0) { cudaCheck(cudaMemcpy(st.w, model->master_weights, st.master * sizeof(float), cudaMemcpyDeviceToHost)); }
    trainer_state_extra_pack(st.extra, d, st.w, st.master);
    if (st.muon > 0) {
        float* muon = (float*)(st.extra + st.muon_at);
        cudaCheck(cudaMemcpy(muon, model->muon_buf, st.muon * sizeof(float), cudaMemcpyDeviceToHost));
        if (st.muon_master > 0) {
            cudaCheck(cudaMemcpy(muon + st.muon, model->muon_master, st.muon_master * sizeof(float), cudaMemcpyDeviceToHost));
        }
    }
    train_state_write(path, s, st.m, st.v, st.extra);
    gpu_state_staging_free(&st);
}

static void gpu_load_state(void* ctx, const char* path, TrainState* expect, TrainState* got, TrainerDetectors* d) {
    GpuTrainer* g = (GpuTrainer*)ctx;
    GpuModel* model = g->gpu;
    GpuStateStaging st = gpu_state_staging(g, expect, path);
    train_state_read(path, expect, got, st.m, st.v, st.extra);
    trainer_state_extra_unpack(st.extra, d, st.w, st.master);
    if (st.muon > 0) {
        const float* muon = (const float*)(st.extra + st.muon_at);
        cudaCheck(cudaMemcpy(model->muon_buf, muon, st.muon * sizeof(float), cudaMemcpyHostToDevice));
        if (st.muon_master > 0) {
            cudaCheck(cudaMemcpy(model->muon_master, muon + st.muon, st.muon_master * sizeof(float), cudaMemcpyHostToDevice));
        }
    }
    cudaCheck(cudaMemcpy(model->m_memory, st.m, st.shard * sizeof(float), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(model->v_memory, st.v, st.shard * sizeof(float), cudaMemcpyHostToDevice));
    if (st.master > 0) { cudaCheck(cudaMemcpy(model->master_weights, st.w, st.master * sizeof(float), cudaMemcpyHostToDevice)); }
    gpu_state_staging_free(&st);
}

static TrainerOps gpu_trainer_ops(GpuTrainer* g) {
    TrainerOps ops = {g, gpu_zero_grad, gpu_forward_backward, gpu_grad_norm, gpu_update, gpu_forward_losses,
                      gpu_next_token_logits, gpu_save_model, gpu_save_state, gpu_load_state};
    return ops;
}

static void gpu_barrier_op(void* ctx) { multi_gpu_barrier((MultiGpu*)ctx); }

static void gpu_sum_floats_op(void* ctx, float* values, int n) { multi_gpu_sum_host_floats((MultiGpu*)ctx, values, n); }

static TrainerComm gpu_trainer_comm(MultiGpu* mg) {
    TrainerComm comm = {mg->process_rank, mg->num_processes, mg, gpu_barrier_op, gpu_sum_floats_op};
    return comm;
}

// -op and the Muon flags into *muon; returns 1 for muon, 0 for adamw; a bad value is one line in the CPU trainers'
// words (llmc/cpu/cpu_trainer.h cpu_parse_optimizer; argv0 names the program)
static int gpu_parse_optimizer(const TrainArgs* args, const char* argv0, MuonConfig* muon) {
    int optimizer = optimizer_parse(args->optimizer);
    if (optimizer < 0) { llmc_die("flag -op: bad value \"%s\": use adamw or muon (run %s --help to list the flags)", args->optimizer, argv0); }
    muon->lr = args->muon_lr;
    muon->momentum = args->muon_momentum;
    muon->nesterov = args->muon_nesterov;
    muon->ns_steps = args->muon_ns_steps;
    muon->adjust_lr = muon_adjust_parse(args->muon_adjust_lr);
    if (muon->adjust_lr < 0) {
        llmc_die("flag -oa: bad value \"%s\": use original or match_rms_adamw (run %s --help to list the flags)", args->muon_adjust_lr,
                 argv0);
    }
    return optimizer == OPTIMIZER_MUON;
}

// ----------------------------------------------------------------------------
// a trainer's main() around its model

// A GPU trainer's main(): the flags (-op refused before the processes start), the processes (-pn -pr -pg -pi -ps
// -pf, MPI) and this process's GPU and stream; rank 0's banner (program, GPU, precision, processes, ZeRO stage) and
// flags; the data (a missing file says so before the model is loaded); the model (-e, or the newest complete
// checkpoint in -o when resuming), -t against its longest sequence, this rank's ZeRO shard, -op muon, the state for
// micro-batches of -b x -t (-r, -w), -ge; rank 0's line of the model; then llmc/trainer.h's loop (the GPU's peak
// FLOP/s at the build's precision and a step's FLOPs for the MFU) through the model's GpuTrainer. model is the
// family's model struct (unbuilt), gpu its GpuModel. Returns the exit status.
static int gpu_trainer_main(int argc, char** argv, const char* program, const char* about, const ModelFamily* family,
                            void* model, const GpuModelCalls* calls, GpuModel* gpu) {
    ArgSpec table[TRAIN_ARG_COUNT];
    TrainArgs args;
    trainer_parse_args(&args, table, TRAIN_GPU, family, argc, argv, about);
    MuonConfig muon;
    const int use_muon = gpu_parse_optimizer(&args, argv[0], &muon);
    MultiGpu mg;
    multi_gpu_init(&mg, &argc, &argv, args.num_processes, args.process_rank, args.gpus_per_node, args.nccl_init_method,
                   args.server_ip, args.fs_path, args.zero_stage, 0);
    const int rank = mg.process_rank;
    DeviceInfo dev;
    device_info_query(&dev, mg.local_device_idx);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    if (rank == 0) {
        printf("+-------------------------------------------------------------+\n");
        printf("| %s: %s, precision %s, %d process(es), ZeRO-%d\n", program, dev.name, PRECISION_NAME,
               mg.num_processes, mg.zero_stage);
        printf("+-------------------------------------------------------------+\n");
        train_args_print_values(table, TRAIN_GPU, &args, stdout);
    }

    // data and flags first (a missing file says so before the model is loaded), then the model
    const int resume_step = trainer_prepare(&args, family, rank);
    char model_path[4200];
    snprintf(model_path, sizeof(model_path), "%s", args.load_filename);
    if (resume_step >= 0) {
        trainer_checkpoint_path(model_path, sizeof(model_path), args.output_log_dir, "model", resume_step, -1);
    }
    gpu_model_build(gpu, family, calls, model, model_path, resume_step >= 0, mg.zero_stage, mg.num_processes);
    if (args.T > gpu->max_seq_len) {
        llmc_die("flag -t: T = %d is larger than the model's %s %d (-e %s)", args.T, family->max_T_name, gpu->max_seq_len, model_path);
    }
    // chat shards may need more of the vocabulary than the model has (GPT-2's V = 50257): V grows here, in the
    // model's config and its host parameters (the master weights' source), then on the device, before the data
    // loaders check the token ids against it (llmc/trainer.h, as the CPU trainers do)
    const int grown = trainer_grow_vocab_for_chat(&args, family, (void*)gpu->config, gpu->init_params, gpu->vocab_size, rank);
    if (grown != gpu->vocab_size) {
        gpu->vocab_size = grown;
        gpu_model_upload_parameters(gpu, gpu->init_params);
    }
    // this rank's ZeRO shard of the parameters (kept in the process group); Muon's matrices go whole to the ranks
    // under ZeRO-1, else every rank updates them all
    mg.num_parameters = gpu->num_parameters;
    mg.shard = zero_shard(gpu->num_parameters, mg.zero_stage, mg.num_processes, rank);
    if (use_muon) { gpu_model_use_muon_of(gpu, calls, model, &muon, mg.zero_stage == 1 ? mg.num_processes : 1, rank); }
    calls->allocate_state(model, args.B, args.T, args.recompute, mg.shard, args.use_master_weights, stream);
    if (calls->set_gelu_fusion != NULL) { calls->set_gelu_fusion(model, args.gelu_fusion); }
    if (rank == 0) { gpu_model_describe(gpu, model_path); }

    Trainer trainer;
    trainer_init(&trainer, &args, family, gpu_trainer_comm(&mg), gpu->vocab_size, resume_step);
    trainer.peak_flops = gpu_peak_flops(dev.name, PRECISION_IS_BF16 ? MFU_BF16 : MFU_TF32);
    trainer.flops_per_step = transformer_flops_per_step(gpu->num_parameters, gpu->num_layers, gpu->channels, args.T,
                                                 (size_t)trainer.total_batch);
    GpuTrainer g;
    gpu_trainer_init(&g, model, calls, gpu, &mg);
    TrainerOps ops = gpu_trainer_ops(&g);
    int status = trainer_run(&trainer, &ops);

    gpu_trainer_free(&g);
    trainer_free(&trainer);
    gpu_model_free(gpu);
    cudaCheck(cudaStreamDestroy(stream));
    multi_gpu_free(&mg);
    return status;
}

#endif // LLMC_GPU_TRAINER_CUH
