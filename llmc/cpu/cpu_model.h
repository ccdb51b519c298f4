/*
llmc/cpu/cpu_model.h: what every CPU model (train_gpt2.c's GPT2, llmc/cpu/decoder_cpu.h's DecoderCpu) holds around its
tensors, written once: the flat parameter and gradient buffers, the optimizer state and its arithmetic, the
activation buffers and the current batch. A model struct has a CpuModel named cpu beside its named pointers
(params, grads, acts, grads_acts) into these buffers; the model's own code is its tables, forward and backward.

    cpu_grad_norm(g, n)       global L2 norm of n gradients: squares summed in double over fixed 64K
                              chunks, 32 interleaved partial sums per chunk (8 with LLMC_GRAD_NORM_WIDE=0),
                              four chunks read side by side, chunks added in order, so the result does not
                              depend on the number of threads
    cpu_adamw_update(...)     one AdamW step (llmc/adamw.h, torch semantics) on the slice
                              [lo, lo + size) of num_tensors tensors laid back to back (sizes[k]
                              floats each); gradients scaled by grad_scale first; weight decay only
                              where is_matrix[k]; m and v hold the slice (index i - lo); t is 1-based
    CpuMuon                   -op muon on a model's flat parameters: Muon (llmc/cpu/muon.h) on the blocks' 2-D
                              weights (the tensors both per_layer[k] and is_matrix[k], one matrix per layer, or per
                              layer one per row block of blocks[k]: nanochat's q, k, v), AdamW on the rest.
                              cpu_muon_plan(mu, cfg, dims, blocks, per_layer, is_matrix, n, zero_stage, nproc, rank)
                              lists the optimizer units and, with ZeRO-1, the segments each process
                              owns (llmc/zero.h: Muon matrices whole, balanced by size) and returns this process's
                              state length (m and v hold its segments back to back, m is a matrix's momentum);
                              cpu_muon_update steps the owned segments; cpu_muon_broadcast sends every segment
                              from its owner to the others (ZeRO-1); cpu_muon_free
    CpuModel                  the buffers: model->cpu.params_memory, .grads_memory, .m_memory, ...
    cpu_model_init(cm, family, config, V, maxT)   zeroed parameters and gradients for the family's tensor
                              table at this config (llmc/model_family.h); the family's name stands in internal
                              error lines
    cpu_model_allocate_activations(cm, B, T, point, model)   for batches of up to B x T tokens: the
                              model's point function counts its named activations and points them in
    cpu_model_set_output(cm, stride, losses)   the row stride of the model's logits (llmc/cpu/classifier_cpu.h
                              keeps them in cm->logits after a forward pass that computes them) and where its
                              losses are
    cpu_model_free_activations(cm)
    cpu_model_allocate_optimizer(cm, offset, size)   AdamW moments of the parameter slice [offset, +size):
                              all of it, or with ZeRO-1 this process's shard (llmc/zero.h)
    cpu_model_allocate_muon(cm, muon, zero_stage, nproc, rank)   -op muon: the Muon plan and its state
    cpu_model_begin_forward(cm, inputs, targets, B, T)   token ids checked against [0, V) (targets: or -1, not
                              supervised: a chat shard's masked position), the batch kept
    cpu_model_end_forward(cm, with_targets)   the mean of the B x T losses into mean_loss (-1 without targets; a
                              position with target -1 counts 0, and has no gradient)
    cpu_model_expect_backward(cm, loss_scale)   the next forward pass (with targets) is followed by the backward
                              pass of loss_scale times its mean loss: the classifier runs its backward in the
                              forward pass, chunk by chunk (llmc/cpu/classifier_cpu.h), never holding every logit
    cpu_model_begin_backward(cm)   checks that the last forward pass had targets (the model's backward writes
                              each activation gradient before it reads it: none is zeroed)
    cpu_model_zero_grad(cm)   the gradients zeroed, or in a model with lazy_zero_grad set (every CPU trainer's)
                              marked stale: they count as zero, and the model's next backward overwrites them
                              instead of adding to them (its weight GEMMs then write and never read them)
    cpu_model_grad_norm(cm)
    cpu_model_update(cm, ...) one AdamW step on this process's slice
    cpu_model_update_muon(cm, ...)   one step of Muon mode on this process's segments
    cpu_model_params_changed(cm)   the parameters were written (load, init): -p bf16's copy of them is rounded again
                              at the next forward pass (cpu_model_refresh_bf16; the updates call it themselves)
    cpu_model_bf16_activations()   whether a model keeps the activations only bf16 readers read in bf16 alone (its
                              bf16 layout, and every family's activations named bf16_alone to
                              cpu_model_shadow_activation: -p bf16 on oneDNN with the layers' copies;
                              LLMC_BF16_ACTIVATIONS=0 says no)
    cpu_model_bf16_layout()   whether a model's activations take its bf16 layout (the bf16 activations with the
                              attention's blocked kernel)
    cpu_model_free(cm)
    CpuModelCalls             a family's calls for the programs around the model, each taking the model as void*:
                              allocate (the model of a config), allocate_activations, forward, backward, free
    cpu_model_line(cm, line, size)   the model's line: its family's config line and its parameter count
    cpu_model_write(cm, path)        its model file (its family's format, llmc/model_file.h)
*/
#ifndef LLMC_CPU_MODEL_H
#define LLMC_CPU_MODEL_H

#include <math.h>
#include <stddef.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../utils.h"
#include "../adamw.h"
#include "../muon_config.h"
#include "../mpi_utils.h"
#include "../zero.h"
#include "../model_family.h"
#include "../decoder.h"
#include "muon.h"
#include "matmul.h"
#include "attention_cpu.h"
#include "phase_time.h"

// ----------------------------------------------------------------------------
// the optimizer's arithmetic on flat buffers

// The squares of one chunk summed in double (a float's square is exact there): element i into running sum i mod
// `sums`, then the sums in order, then the tail. 32 sums compile to four AVX-512 (eight AVX2) vectors of adds in
// flight; 8 (LLMC_GRAD_NORM_WIDE=0, one chunk at a time: the norm before, kept until the new one is timed on a Zen
// 4) compiled to scalar adds, each waiting on its sum's last.
#define CPU_GRAD_NORM_CHUNK ((size_t)1 << 16)
#define CPU_GRAD_NORM_SUMS 32
#define CPU_GRAD_NORM_STREAMS 4
static inline double cpu_grad_norm_chunk(const float* g, size_t n, int wide) {
    double sums[CPU_GRAD_NORM_SUMS] = {0.0}, s = 0.0;
    size_t i = 0;
    if (wide) {
        for (; i + CPU_GRAD_NORM_SUMS <= n; i += CPU_GRAD_NORM_SUMS) {
            for (int j = 0; j < CPU_GRAD_NORM_SUMS; j++) { sums[j] += (double)g[i + j] * g[i + j]; }
        }
    } else {
        for (; i + 8 <= n; i += 8) {
            for (int j = 0; j < 8; j++) { sums[j] += (double)g[i + j] * g[i + j]; }
        }
    }
    for (; i < n; i++) { s += (double)g[i] * g[i]; }
    for (int j = 0; j < (wide ? CPU_GRAD_NORM_SUMS : 8); j++) { s += sums[j]; }
    return s;
}

// cpu_grad_norm_chunk(wide) of CPU_GRAD_NORM_STREAMS whole chunks, read side by side (the same bits for each): one
// stream of reads a thread left the memory idle half the time (the AMX Xeon: 15 GB/s on 2 threads, 27 with four
// streams each, its triad's rate)
static inline void cpu_grad_norm_chunks(double* out, const float* const* g) {
    double sums[CPU_GRAD_NORM_STREAMS][CPU_GRAD_NORM_SUMS];
    memset(sums, 0, sizeof(sums));
    for (size_t i = 0; i < CPU_GRAD_NORM_CHUNK; i += CPU_GRAD_NORM_SUMS) {
        for (int k = 0; k < CPU_GRAD_NORM_STREAMS; k++) {
            for (int j = 0; j < CPU_GRAD_NORM_SUMS; j++) { sums[k][j] += (double)g[k][i + j] * g[k][i + j]; }
        }
    }
    for (int k = 0; k < CPU_GRAD_NORM_STREAMS; k++) {
        double s = 0.0; // (a whole chunk has no tail)
        for (int j = 0; j < CPU_GRAD_NORM_SUMS; j++) { s += sums[k][j]; }
        out[k] = s;
    }
}

// the global norm: the chunks' sums (wide: CPU_GRAD_NORM_STREAMS chunks a piece of work, nchunks / STREAMS apart),
// then added in order
static float cpu_grad_norm_sums(const float* g, size_t n, int wide) {
    size_t nchunks = (n + CPU_GRAD_NORM_CHUNK - 1) / CPU_GRAD_NORM_CHUNK;
    static void* partial_buf = NULL; // one sum per chunk, kept between calls
    static size_t partial_capacity = 0;
    double* partial = (double*)scratch_reserve(&partial_buf, &partial_capacity, nchunks * sizeof(double));
    double t_phase = phase_begin();
    size_t streams = wide ? CPU_GRAD_NORM_STREAMS : 1, apart = (nchunks + streams - 1) / streams;
    #pragma omp parallel for schedule(static)
    for (size_t w = 0; w < apart; w++) {
        const float* at[CPU_GRAD_NORM_STREAMS];
        int whole = streams == CPU_GRAD_NORM_STREAMS;
        for (size_t k = 0; k < streams; k++) {
            size_t c = w + k * apart;
            whole = whole && (c + 1) * CPU_GRAD_NORM_CHUNK <= n;
            at[k] = whole ? g + c * CPU_GRAD_NORM_CHUNK : g; // (no pointer past the gradients' end)
        }
        if (whole) {
            double out[CPU_GRAD_NORM_STREAMS];
            cpu_grad_norm_chunks(out, at);
            for (size_t k = 0; k < streams; k++) { partial[w + k * apart] = out[k]; }
        } else {
            for (size_t k = 0; k < streams && w + k * apart < nchunks; k++) {
                size_t i = (w + k * apart) * CPU_GRAD_NORM_CHUNK;
                size_t end = i + CPU_GRAD_NORM_CHUNK < n ? i + CPU_GRAD_NORM_CHUNK : n;
                partial[w + k * apart] = cpu_grad_norm_chunk(g + i, end - i, wide);
            }
        }
    }
    double total = 0.0;
    for (size_t k = 0; k < nchunks; k++) { total += partial[k]; }
    phase_end(PHASE_GRAD_NORM, t_phase, 4.0 * n, 2.0 * n);
    return (float)sqrt(total);
}

static float cpu_grad_norm(const float* g, size_t n) {
    static int wide = -1;
    if (wide < 0) { wide = env_switch_on("LLMC_GRAD_NORM_WIDE"); }
    return cpu_grad_norm_sums(g, n, wide);
}

// params_bf16 (NULL: none): the bf16 copy of params (-p bf16's weight mirror), written in the same pass as the update
#define CPU_ADAMW_BLOCK 4096
static void cpu_adamw_update(float* params, uint16_t* params_bf16, const float* grads, float* m, float* v, size_t lo,
                             size_t size, const size_t* sizes, const int* is_matrix, int num_tensors, float learning_rate,
                             float beta1, float beta2, float eps, float weight_decay, float grad_scale, int t) {
    AdamWScalars s = adamw_step_scalars(learning_rate, beta1, beta2, eps, t);
    double t_phase = phase_begin();
    size_t hi = lo + size, start = 0;
    for (int k = 0; k < num_tensors; k++) {
        size_t end_k = start + sizes[k];
        size_t begin = start > lo ? start : lo, end = end_k < hi ? end_k : hi;
        float wd = is_matrix[k] ? weight_decay : 0.0f;
        if (params_bf16 != NULL) { // a block at a time: updated, then rounded while it is in cache (both loops vectorise)
            #pragma omp parallel for schedule(static)
            for (size_t b0 = begin; b0 < end; b0 += CPU_ADAMW_BLOCK) {
                size_t b1 = b0 + CPU_ADAMW_BLOCK < end ? b0 + CPU_ADAMW_BLOCK : end;
                for (size_t i = b0; i < b1; i++) {
                    params[i] = adamw_update_one(params[i], grads[i] * grad_scale, &m[i - lo], &v[i - lo], wd, s);
                }
                for (size_t i = b0; i < b1; i++) { params_bf16[i] = matmul_bf16_round_value(params[i]); }
            }
        } else {
            #pragma omp parallel for schedule(static)
            for (size_t i = begin; i < end; i++) {
                params[i] = adamw_update_one(params[i], grads[i] * grad_scale, &m[i - lo], &v[i - lo], wd, s);
            }
        }
        start = end_k;
    }
    // p, g, m, v read; p, m, v written (and the bf16 copy); about 12 flop an element
    phase_end(PHASE_OPTIMIZER, t_phase, (double)size * (28.0 + (params_bf16 != NULL ? 2.0 : 0.0)), 12.0 * size);
}

// ----------------------------------------------------------------------------
// Muon mode: Muon on the blocks' matrices, AdamW on the rest

typedef struct {
    int tensor;       // index into the model's parameter tensors
    int rows, cols;   // a Muon matrix (rows, cols) row-major, as torch's weight (out, in); 0 for AdamW
} CpuOptUnit;

typedef struct {
    MuonConfig config;
    int num_units;
    ZeroUnit* units;          // one per Muon matrix, one per other tensor, in flat order
    CpuOptUnit* unit_info;
    int num_segments;
    ZeroSegment* segments;    // every process's, in flat order
    int rank;                 // this process
    MuonScratch scratch;
} CpuMuon;

static void cpu_muon_init(CpuMuon* mu) {
    memset(mu, 0, sizeof(*mu));
    muon_scratch_init(&mu->scratch);
}

// dims[k] = (slices, rows, cols) of tensor k: the per-layer matrices are slices = L matrices of (rows, cols), each
// cut into Muon's matrices by blocks[k] (rows of each, top to bottom; NULL: every one whole)
static size_t cpu_muon_plan(CpuMuon* mu, const MuonConfig* cfg, const size_t (*dims)[3],
                            const size_t (*blocks)[MUON_MAX_ROW_BLOCKS], const int* per_layer, const int* is_matrix,
                            int num_tensors, int zero_stage, int nproc, int rank) {
    mu->config = *cfg;
    mu->rank = rank;
    size_t max_units = (size_t)num_tensors;
    for (int k = 0; k < num_tensors; k++) { max_units += dims[k][0] * MUON_MAX_ROW_BLOCKS; }
    mu->units = (ZeroUnit*)mallocCheck(max_units * sizeof(ZeroUnit));
    mu->unit_info = (CpuOptUnit*)mallocCheck(max_units * sizeof(CpuOptUnit));
    int n = 0;
    size_t start = 0;
    for (int k = 0; k < num_tensors; k++) {
        size_t slices = dims[k][0], rows = dims[k][1], cols = dims[k][2], size = slices * rows * cols;
        if (per_layer[k] && is_matrix[k]) { // (L, rows, cols): one unit per layer and row block, in flat order
            for (size_t l = 0; l < slices; l++) {
                size_t row = 0, block_rows;
                for (int b = 0; (block_rows = muon_block_rows(blocks, k, b, rows)) > 0; b++) {
                    ZeroUnit u = {start + (l * rows + row) * cols, block_rows * cols, 1};
                    CpuOptUnit info = {k, (int)block_rows, (int)cols};
                    mu->units[n] = u;
                    mu->unit_info[n++] = info;
                    row += block_rows;
                }
                if (row != rows) { llmc_die("internal: Muon's blocks of tensor %d cover %zu of its %zu rows", k, row, rows); }
            }
        } else {
            ZeroUnit u = {start, size, 0};
            CpuOptUnit info = {k, 0, 0};
            mu->units[n] = u;
            mu->unit_info[n++] = info;
        }
        start += size;
    }
    mu->num_units = n;
    mu->segments = (ZeroSegment*)mallocCheck(((size_t)n + (size_t)nproc) * sizeof(ZeroSegment));
    size_t* owned = (size_t*)callocCheck((size_t)nproc, sizeof(size_t));
    mu->num_segments = zero_plan(mu->units, n, zero_stage, nproc, mu->segments, owned);
    int sharded = zero_stage == 1 && nproc > 1;
    size_t mine = owned[sharded ? rank : 0];
    free(owned);
    if (!sharded) { // every segment is this process's
        for (int i = 0; i < mu->num_segments; i++) { mu->segments[i].owner = rank; }
    }
    return mine;
}

// the number of Muon matrices of the plan
static int cpu_muon_num_matrices(const CpuMuon* mu) {
    int n = 0;
    for (int i = 0; i < mu->num_units; i++) { n += mu->unit_info[i].rows > 0; }
    return n;
}

// One step on this process's segments: Muon with muon_lr (this step's) on each owned matrix, AdamW
// (weight decay where is_matrix) with learning_rate on the other owned parameters; gradients are first
// scaled by grad_scale; m and v are this process's state; t is the 1-based step number.
// params_bf16 (NULL: none): the parameters' bf16 copy, written in the same pass as each update.
static void cpu_muon_update(CpuMuon* mu, float* params, uint16_t* params_bf16, const float* grads, float* m_state,
                            float* v_state, const int* is_matrix, float learning_rate, float muon_lr, float beta1,
                            float beta2, float eps, float weight_decay, float grad_scale, int t) {
    AdamWScalars s = adamw_step_scalars(learning_rate, beta1, beta2, eps, t);
    double t_phase = phase_begin();
    double bytes = 0.0, flops = 0.0;
    for (int i = 0; i < mu->num_segments; i++) {
        const ZeroSegment* seg = &mu->segments[i];
        if (seg->owner != mu->rank) { continue; }
        const CpuOptUnit* info = &mu->unit_info[seg->unit];
        float* m = m_state + seg->state;
        float* v = v_state + seg->state;
        if (info->rows > 0) {
            muon_update_matrix(params + seg->start, params_bf16 != NULL ? params_bf16 + seg->start : NULL,
                               grads + seg->start, m, info->rows, info->cols, grad_scale, muon_lr, weight_decay,
                               &mu->config, matmul_precision, &mu->scratch);
            // w, g, the momentum read; w, the momentum written; the Newton-Schulz GEMMs count as GEMMs
            bytes += 20.0 * seg->size;
            flops += 10.0 * seg->size;
            continue;
        }
        float wd = is_matrix[info->tensor] ? weight_decay : 0.0f;
        float* p = params + seg->start;
        uint16_t* p16 = params_bf16 != NULL ? params_bf16 + seg->start : NULL;
        const float* g = grads + seg->start;
        #pragma omp parallel for schedule(static)
        for (size_t b0 = 0; b0 < seg->size; b0 += CPU_ADAMW_BLOCK) { // as cpu_adamw_update: a block, then its copy
            size_t b1 = b0 + CPU_ADAMW_BLOCK < seg->size ? b0 + CPU_ADAMW_BLOCK : seg->size;
            for (size_t j = b0; j < b1; j++) { p[j] = adamw_update_one(p[j], g[j] * grad_scale, &m[j], &v[j], wd, s); }
            if (p16 != NULL) {
                for (size_t j = b0; j < b1; j++) { p16[j] = matmul_bf16_round_value(p[j]); }
            }
        }
        bytes += 28.0 * seg->size;
        flops += 12.0 * seg->size;
    }
    phase_end(PHASE_OPTIMIZER, t_phase, bytes, flops);
}

// commit_pages on the state this process's segments read and write: a Muon matrix's momentum, the others' m and v
static void cpu_muon_commit_state(const CpuMuon* mu, float* m_state, float* v_state) {
    for (int i = 0; i < mu->num_segments; i++) {
        const ZeroSegment* seg = &mu->segments[i];
        if (seg->owner != mu->rank) { continue; }
        commit_pages(m_state + seg->state, seg->size * sizeof(float));
        if (mu->unit_info[seg->unit].rows == 0) { commit_pages(v_state + seg->state, seg->size * sizeof(float)); }
    }
}

// whether this process updates every segment (no ZeRO-1 sharding)
static int cpu_muon_owns_all(const CpuMuon* mu) {
    for (int i = 0; i < mu->num_segments; i++) {
        if (mu->segments[i].owner != mu->rank) { return 0; }
    }
    return 1;
}

// ZeRO-1: every segment of the parameters goes from the process that updated it to the others
static void cpu_muon_broadcast(const CpuMuon* mu, float* params, const ProcessGroup* pg) {
    if (pg->num_processes == 1) { return; }
    for (int i = 0; i < mu->num_segments; i++) {
        const ZeroSegment* seg = &mu->segments[i];
        if (seg->size > (size_t)INT_MAX) { llmc_die("ZeRO-1: a segment of %zu parameters is too large for MPI_Bcast", seg->size); }
        process_group_bcast_floats(params + seg->start, (int)seg->size, seg->owner, pg); // MPI, or the host's comm
    }
}

static void cpu_muon_free(CpuMuon* mu) {
    free(mu->units);
    free(mu->unit_info);
    free(mu->segments);
    muon_scratch_free(&mu->scratch);
    cpu_muon_init(mu);
}

// ----------------------------------------------------------------------------
// the model's buffers

// Expanders of a model's activation table, rows X(type, name, per_layer, per_token, has_grad): each tensor is
// (B, T, per_token), or (L, B, T, per_token) when per_layer; has_grad: the backward pass keeps its gradient.
// CPU_ACT_FIELD declares a tensor's pointer; CPU_ACT_POINT, in a function with a->, memory, n, grads, L and BT,
// points it into memory at n and counts its floats (grads = 1: the gradients, has_grad tensors only, the others
// NULL; memory NULL: counts only); CPU_ACT_LAYER, in a function with v, a->, l and BT, points v at layer l's slice
// (at the one slice of a tensor that is not per_layer: every layer reuses it).
#define CPU_ACT_FIELD(type, name, per_layer, per_token, has_grad) type* name;
#define CPU_ACT_POINT(type, name, per_layer, per_token, has_grad) { \
        size_t size = (grads && !(has_grad)) ? 0 : ((per_layer) ? L : 1) * BT * (per_token); \
        a->name = memory != NULL && size > 0 ? memory + n : NULL; \
        n += size; \
    }
#define CPU_ACT_LAYER(type, name, per_layer, per_token, has_grad) \
    v.name = a->name != NULL ? a->name + ((per_layer) ? (size_t)l : 0) * BT * (per_token) : NULL;
// The same for a model's table of bf16 activations, rows X(name, per_layer, per_token), uint16 (B, T, per_token) or
// (L, B, T, per_token): -p bf16's layout, where what only bf16 readers read is kept in bf16 alone (train_gpt2.c's
// GPT2_BF16_ACTIVATION_TENSORS, llmc/cpu/decoder_cpu.h's DECODER_CPU_BF16_ACTIVATION_TENSORS). CPU_ACT16_POINT also
// needs keep_fp32 (the fp32 layout: none of them get memory) and puts two bf16 numbers to a float of the buffer; no
// gradients are kept in it.
#define CPU_ACT16_FIELD(name, per_layer, per_token) uint16_t* name;
#define CPU_ACT16_POINT(name, per_layer, per_token) { \
        size_t size = (grads || keep_fp32) ? 0 : ((per_layer) ? L : 1) * BT * (per_token); \
        a->name = memory != NULL && size > 0 ? (uint16_t*)(void*)(memory + n) : NULL; \
        n += (size + 1) / 2; \
    }
#define CPU_ACT16_LAYER(name, per_layer, per_token) \
    v.name = a->name != NULL ? a->name + ((per_layer) ? (size_t)l : 0) * BT * (per_token) : NULL;

#define CPU_MODEL_MAX_TENSORS 32
#define CPU_MODEL_MAX_SHADOWS 16

typedef struct {
    const char* family;         // "gpt2", "llama3": the prefix of the model's functions in internal errors
    const ModelFamily* description;  // its family (llmc/model_family.h): the model file, the init, the config's line
    const void* config;         // the model's config (the family's struct, held by the model)
    // weights and their gradients: one flat buffer each, num_tensors tensors back to back
    float* params_memory;
    float* grads_memory;
    size_t num_parameters;
    int num_tensors;
    size_t param_dims[CPU_MODEL_MAX_TENSORS][3];   // (slices, rows, cols): per-layer tensors have L slices
    size_t param_sizes[CPU_MODEL_MAX_TENSORS];
    const int* is_matrix;       // the 2-D weights (weight decay applies to them only)
    int lazy_zero_grad;         // set by a model whose backward honours grads_stale
    int grads_stale;            // the gradients count as zero (lazy_zero_grad after cpu_model_zero_grad)
    const int* per_layer;       // one slice per layer (with is_matrix: one Muon matrix per layer)
    // -p bf16 on oneDNN: the parameters rounded to bf16, the GEMMs' copy of the weights (llmc/cpu/matmul.h's mirror),
    // made at the first forward pass after the parameters changed (an optimizer step, a load)
    uint16_t* params_bf16;
    int params_bf16_stale;
    // and bf16 copies of the activations (and activation gradients) that GEMMs read, each written by the layer that
    // writes the activation (llmc/cpu/matmul.h's matmul_bf16_shadow), so that no GEMM rounds its input: the model
    // names them (cpu_model_shadow_activation) when it allocates its activations, they are made with the weights' copy
    int num_shadows;
    const float* shadow_fp32[CPU_MODEL_MAX_SHADOWS];
    size_t shadow_size[CPU_MODEL_MAX_SHADOWS];
    uint16_t* shadow_bf16[CPU_MODEL_MAX_SHADOWS];
    int shadow_alone[CPU_MODEL_MAX_SHADOWS]; // only GEMMs read it: in bf16 alone where cpu_model_bf16_activations()
    // the optimizer state of this process's slice [opt_offset, opt_offset + opt_size) of the flat
    // parameters (everything, or with ZeRO-1 one shard), or with -op muon of its segments back to back
    // (m is a Muon matrix's momentum, v unused there)
    float* m_memory;
    float* v_memory;
    int opt_committed;          // the state's pages committed for writing (commit_pages), at the first update
    size_t opt_offset;
    size_t opt_size;
    int optimizer;              // OPTIMIZER_ADAMW or OPTIMIZER_MUON
    CpuMuon muon;
    // activations for batches up to batch_size x seq_len, and their gradients
    float* acts_memory;
    size_t num_activations;
    float* grads_acts_memory;
    size_t num_grad_activations;
    int batch_size;
    int seq_len;
    // the current batch (set by the forward pass)
    int* inputs;                // (B, T)
    int* targets;               // (B, T)
    int cur_B, cur_T;           // sizes of the last forward pass
    float mean_loss;            // mean loss of the last forward pass with targets, -1 without
    // where the programs around the model read its output: logits (B, T, logits_stride) of which the first
    // vocab_size count, the per-token losses (B, T) (cpu_model_set_output). logits is NULL after a forward pass that
    // did not keep them: training's (llmc/cpu/classifier_cpu.h runs the classifier a chunk of rows at a time).
    const float* logits;
    const float* losses;
    int logits_stride;
    int keep_logits;            // forward passes with targets keep the logits too (test programs, pyllmc); those
                                // without targets always do
    int last_logits_only;       // forward passes without targets keep each sequence's last position only, (B, stride)
    float* logits_memory;       // the kept logits, allocated at the first forward pass that keeps them
    size_t logits_capacity;     // its floats
    // the classifier's backward in the forward pass (cpu_model_expect_backward): asked for the next forward pass,
    // and done by the last one, with these loss scales
    int backward_follows;
    float backward_loss_scale;
    int classifier_backward_done;
    float classifier_loss_scale;
    int vocab_size;             // V: token ids are in [0, V)
    int max_seq_len;            // the longest sequence the model takes
} CpuModel;

// the flat buffers of a model of this family and config (its tensor table, llmc/model_family.h), zeroed
static void cpu_model_init(CpuModel* cm, const ModelFamily* family, const void* config, int vocab_size, int max_seq_len) {
    int num_tensors = family->num_tensors;
    if (num_tensors > CPU_MODEL_MAX_TENSORS) { llmc_die("internal: %d tensors, CpuModel holds %d", num_tensors, CPU_MODEL_MAX_TENSORS); }
    memset(cm, 0, sizeof(*cm));
    cm->family = family->name;
    cm->description = family;
    cm->config = config;
    cm->vocab_size = vocab_size;
    cm->max_seq_len = max_seq_len;
    cm->num_tensors = num_tensors;
    family->tensor_dims(cm->param_dims, config);
    for (int k = 0; k < num_tensors; k++) {
        cm->param_sizes[k] = cm->param_dims[k][0] * cm->param_dims[k][1] * cm->param_dims[k][2];
        cm->num_parameters += cm->param_sizes[k];
    }
    cm->is_matrix = family->tensor_is_matrix;
    cm->per_layer = family->tensor_per_layer;
    cm->params_memory = (float*)callocAligned(cm->num_parameters, sizeof(float));
    cm->grads_memory = (float*)callocAligned(cm->num_parameters, sizeof(float));
    cm->optimizer = OPTIMIZER_ADAMW;
    cpu_muon_init(&cm->muon);
    cm->mean_loss = -1.0f;
    cm->params_bf16_stale = 1;
}

// the parameters were written (loaded, initialised, set from Python): the bf16 copy is rounded again before the
// next forward pass reads it
static void cpu_model_params_changed(CpuModel* cm) { cm->params_bf16_stale = 1; }

// -p bf16 with oneDNN's GEMMs: the bf16 copy of the parameters, made (and registered with llmc/cpu/matmul.h) at
// the first forward pass and rounded again after each change, so each weight is rounded once per optimizer step
// instead of in every GEMM that reads it. Nothing happens in fp32 or with the built-in bf16 kernel (it rounds its
// operands as it packs them).
// LLMC_BF16_COPIES=0: the bf16 path as it was before the layers wrote copies (the weights' copy rounded in a pass of
// its own after each update, every other GEMM operand rounded by the GEMM that reads it), the same bits; kept so the
// copies can be timed against it on CPUs where they have not been (they were timed on a Zen 5 only)
static int cpu_model_bf16_copies(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_BF16_COPIES"); }
    return on;
}

// Whether a model keeps in bf16 alone the activations that are only ever read in bf16 (its bf16 layout's: GPT-2's qkv,
// attention output and MLP hidden layer, train_gpt2.c; the decoders' qkv, attention output and MLP projections,
// llmc/cpu/decoder_cpu.h; every family's norm outputs and MLP activations, and the MLP's input gradients where no bias
// gradient reads them: cpu_model_shadow_activation's bf16_alone), instead of in fp32 beside a bf16 copy: -p bf16 on
// oneDNN's bf16 kernels with the layers' copies (LLMC_BF16_COPIES), and LLMC_BF16_ACTIVATIONS not 0.
// LLMC_BF16_ACTIVATIONS=0 keeps the fp32 layout (GPT-2 d12's -p bf16 step at B=4 T=1024 with the bf16 one: 1.09x
// faster on a Zen 4, 2026-12-02; 1.12x on the AMX Xeon, 2026-12-06; doc/cpu-speed.md).
// (Asked at each forward pass: the precision may be set after the activations are allocated, by the
// trainer's calibration or by pyllmc.)
static int cpu_model_bf16_activations(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_BF16_ACTIVATIONS"); }
    return on && matmul_precision == MATMUL_BF16 && cpu_model_bf16_copies() && matmul_bf16_takes_bf16() &&
           matmul_bf16_onednn_kernel()[0] != '\0';
}

// Whether a model's activations take its bf16 layout (train_gpt2.c's GPT2_BF16_ACTIVATION_TENSORS,
// llmc/cpu/decoder_cpu.h's DECODER_CPU_BF16_ACTIVATION_TENSORS): the bf16 activations with the attention's blocked
// kernel, the one that reads q, k, v and its output in bf16 (llmc/cpu/attention_cpu.h)
static int cpu_model_bf16_layout(void) {
    return cpu_model_bf16_activations() && attention_kernel_chosen() == ATTENTION_BLOCKED;
}

// Whether the activations a model names bf16_alone (cpu_model_shadow_activation) are written in bf16 alone: with the
// bf16 activations, and LLMC_BF16_ALONE not 0. LLMC_BF16_ALONE=0 writes their fp32 values beside the copies as before
// 2026-11-29 (the same bits: only the unread fp32 writes go). Timed at GPT-2 d12 -p bf16, B=4 T=1024: the norm phase
// 171 against 198 ms a step on a Zen 4 (2026-12-02), the step 1.04x faster on the AMX Xeon (2026-12-06).
static int cpu_model_bf16_alone(void) {
    static int on = -1;
    if (on < 0) { on = env_switch_on("LLMC_BF16_ALONE"); }
    return on && cpu_model_bf16_activations();
}

static void cpu_model_refresh_bf16(CpuModel* cm) {
    if (matmul_precision != MATMUL_BF16 || !matmul_bf16_takes_bf16()) { return; }
    if (cm->params_bf16 == NULL) {
        cm->params_bf16 = (uint16_t*)mallocAligned(cm->num_parameters * sizeof(uint16_t));
        matmul_bf16_mirror_add(cm->params_memory, cm->num_parameters, cm->params_bf16);
        cm->params_bf16_stale = 1;
    }
    for (int i = 0; i < cm->num_shadows && cpu_model_bf16_copies(); i++) {
        if (cm->shadow_bf16[i] == NULL) { // its layer writes it before any GEMM reads it
            cm->shadow_bf16[i] = (uint16_t*)mallocAligned(cm->shadow_size[i] * sizeof(uint16_t));
            matmul_bf16_mirror_add(cm->shadow_fp32[i], cm->shadow_size[i], cm->shadow_bf16[i]);
        }
        matmul_bf16_mirror_set_alone(cm->shadow_fp32[i], cm->shadow_alone[i] && cpu_model_bf16_alone());
    }
    if (cm->params_bf16_stale) { // (a bf16 phase of LLMC_PHASE_TIME, matmul_round_bf16's own)
        matmul_round_bf16(cm->params_bf16, cm->params_memory, 1, cm->num_parameters, cm->num_parameters);
        cm->params_bf16_stale = 0;
    }
}

// point(model, memory, B, T, grads) points the model's named activations for B x T tokens (grads = 1: their
// gradients) into memory and returns how many floats they take (memory NULL: counts only)
typedef size_t (*CpuPointActivations)(void* model, float* memory, int B, int T, int grads);

static void cpu_model_allocate_activations(CpuModel* cm, int B, int T, CpuPointActivations point, void* model) {
    cm->batch_size = B;
    cm->seq_len = T;
    cm->num_activations = point(model, NULL, B, T, 0);
    cm->num_grad_activations = point(model, NULL, B, T, 1);
    cm->acts_memory = (float*)callocAligned(cm->num_activations, sizeof(float));
    cm->grads_acts_memory = (float*)callocAligned(cm->num_grad_activations, sizeof(float));
    point(model, cm->acts_memory, B, T, 0);
    point(model, cm->grads_acts_memory, B, T, 1);
    cm->inputs = (int*)mallocCheck((size_t)B * T * sizeof(int));
    cm->targets = (int*)mallocCheck((size_t)B * T * sizeof(int));
}

// where the programs around the model read its output: logits (B, T, logits_stride) once a forward pass has kept
// them (cm->logits), per-token losses (B, T)
static void cpu_model_set_output(CpuModel* cm, int logits_stride, const float* losses) {
    cm->logits = NULL;
    cm->logits_stride = logits_stride;
    cm->losses = losses;
}

// frees the activations (pyllmc reallocates them for a bigger batch; the optimizer state stays)
// x (n floats) is an activation, or an activation gradient, that GEMMs read: on -p bf16 with oneDNN it gets a bf16
// copy (a mirror), which every layer that writes x writes too. Called when the activations are allocated. bf16_alone:
// GEMMs are x's only readers, so with the bf16 activations (cpu_model_bf16_alone) its layers write the copy alone and
// x's fp32 memory is never written (llmc/cpu/matmul.h's matmul_bf16_fp32_kept).
static void cpu_model_shadow_activation(CpuModel* cm, const float* x, size_t n, int bf16_alone) {
    if (cm->num_shadows == CPU_MODEL_MAX_SHADOWS) { llmc_die("internal: more than %d bf16 activation copies", CPU_MODEL_MAX_SHADOWS); }
    cm->shadow_fp32[cm->num_shadows] = x;
    cm->shadow_size[cm->num_shadows] = n;
    cm->shadow_bf16[cm->num_shadows] = NULL;
    cm->shadow_alone[cm->num_shadows] = bf16_alone;
    cm->num_shadows++;
}

static void cpu_model_free_shadows(CpuModel* cm) {
    for (int i = 0; i < cm->num_shadows; i++) {
        if (cm->shadow_bf16[i] != NULL) { matmul_bf16_mirror_remove(cm->shadow_fp32[i]); }
        free_aligned(cm->shadow_bf16[i]);
    }
    cm->num_shadows = 0;
}

static void cpu_model_free_activations(CpuModel* cm) {
    cpu_model_free_shadows(cm);
    free_aligned(cm->acts_memory);
    free_aligned(cm->grads_acts_memory);
    free(cm->inputs);
    free(cm->targets);
    cm->acts_memory = cm->grads_acts_memory = NULL;
    cm->inputs = cm->targets = NULL;
    cm->batch_size = cm->seq_len = 0;
}

static void cpu_model_allocate_optimizer(CpuModel* cm, size_t opt_offset, size_t opt_size) {
    cm->opt_offset = opt_offset;
    cm->opt_size = opt_size;
    cm->m_memory = (float*)callocAligned(opt_size, sizeof(float));
    cm->v_memory = (float*)callocAligned(opt_size, sizeof(float));
    cm->opt_committed = 0;
}

// Muon on the block matrices (the per-layer 2-D weights), AdamW on the rest: the optimizer units and, with
// ZeRO-1 over nproc processes, the segments each owns (Muon matrices whole, balanced by size); this process
// (rank) allocates the state of its own segments.
static void cpu_model_allocate_muon(CpuModel* cm, const MuonConfig* muon, int zero_stage, int nproc, int rank) {
    cm->optimizer = OPTIMIZER_MUON;
    size_t blocks[CPU_MODEL_MAX_TENSORS][MUON_MAX_ROW_BLOCKS]; // Muon's matrices per layer: whole, or q, k, v
    decoder_muon_row_blocks(cm->description, cm->config, (const size_t(*)[3])cm->param_dims, blocks);
    size_t owned = cpu_muon_plan(&cm->muon, muon, (const size_t(*)[3])cm->param_dims, (const size_t(*)[MUON_MAX_ROW_BLOCKS])blocks,
                                 cm->per_layer, cm->is_matrix, cm->num_tensors, zero_stage, nproc, rank);
    cpu_model_allocate_optimizer(cm, 0, owned);
}

// the start of a forward pass on inputs (B,T) and targets (B,T) or NULL: every id within [0, V) (a target may be -1:
// not supervised), the batch
// kept for the backward pass. B x T may be smaller than what the activations were allocated for.
static void cpu_model_begin_forward(CpuModel* cm, const int* inputs, const int* targets, int B, int T) {
    int V = cm->vocab_size;
    if (cm->acts_memory == NULL) { llmc_die("internal: %s_allocate_activations was not called", cm->family); }
    if ((size_t)B * T > (size_t)cm->batch_size * cm->seq_len || T > cm->seq_len) {
        llmc_die("internal: forward of %dx%d tokens exceeds the %dx%d allocated", B, T, cm->batch_size, cm->seq_len);
    }
    for (int i = 0; i < B * T; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) { llmc_die("input token id %d at position %d is outside [0, %d)", inputs[i], i, V); }
        if (targets != NULL && (targets[i] < -1 || targets[i] >= V)) { // -1: not supervised (a chat shard's mask)
            llmc_die("target token id %d at position %d is outside [-1, %d)", targets[i], i, V);
        }
    }
    memcpy(cm->inputs, inputs, (size_t)B * T * sizeof(int));
    if (targets != NULL) { memcpy(cm->targets, targets, (size_t)B * T * sizeof(int)); }
    cm->cur_B = B;
    cm->cur_T = T;
    cpu_model_refresh_bf16(cm);
}

// the loss of the forward pass: the mean of its B x T per-token losses (summed in double, in order), or -1
// after a forward pass without targets (inference: logits only)
static void cpu_model_end_forward(CpuModel* cm, int with_targets) {
    if (!with_targets) {
        cm->mean_loss = -1.0f;
        return;
    }
    int n = cm->cur_B * cm->cur_T;
    double sum = 0.0;
    for (int i = 0; i < n; i++) { sum += cm->losses[i]; }
    cm->mean_loss = (float)(sum / n);
}

// The next forward pass (with targets) is followed by the backward pass of loss_scale times its mean loss, so the
// classifier computes its gradients as it goes (llmc/cpu/classifier_cpu.h): llmc/cpu/cpu_trainer.h's step and the
// test programs say so; a backward pass that follows a forward pass not told runs the classifier again.
static void cpu_model_expect_backward(CpuModel* cm, float loss_scale) {
    cm->backward_follows = 1;
    cm->backward_loss_scale = loss_scale;
}

// The start of the backward pass of the last forward (which must have had targets). Nothing is zeroed: the model's
// backward writes each activation gradient before it reads it (or zeroes the few it only adds to).
static void cpu_model_begin_backward(CpuModel* cm) {
    if (cm->mean_loss < 0.0f) { llmc_die("internal: %s_backward needs a forward pass with targets", cm->family); }
}

static void cpu_model_zero_grad(CpuModel* cm) {
    if (cm->lazy_zero_grad) {
        cm->grads_stale = 1;
        return;
    }
    double t_phase = phase_begin();
    memset(cm->grads_memory, 0, cm->num_parameters * sizeof(float));
    phase_end(PHASE_ZERO, t_phase, 4.0 * cm->num_parameters, 0.0);
}

// Global L2 norm of the gradients (llmc/cpu/cpu_trainer.h: fixed chunks, does not depend on the thread count)
static float cpu_model_grad_norm(const CpuModel* cm) { return cpu_grad_norm(cm->grads_memory, cm->num_parameters); }

// The bf16 copy of the parameters for an update to write as it goes, or NULL: only when the copy exists (-p bf16 on
// oneDNN) and this process updates every parameter (with ZeRO-1 the other shards arrive by broadcast, and the copy
// is rounded again at the next forward pass, cpu_model_refresh_bf16)
static uint16_t* cpu_model_update_mirror(const CpuModel* cm) {
    if (cm->params_bf16 == NULL || !cpu_model_bf16_copies()) { return NULL; }
    if (cm->optimizer == OPTIMIZER_MUON) { return cpu_muon_owns_all(&cm->muon) ? cm->params_bf16 : NULL; }
    return cm->opt_offset == 0 && cm->opt_size == cm->num_parameters ? cm->params_bf16 : NULL;
}

// One AdamW step (llmc/adamw.h, PyTorch semantics) on this process's parameter slice. Gradients are
// first scaled by grad_scale (global-norm clipping; 1 = none). Weight decay applies to the 2-D weight
// matrices only. t is the 1-based step number.
static void cpu_model_update(CpuModel* cm, float learning_rate, float beta1, float beta2, float eps, float weight_decay,
                             float grad_scale, int t) {
    uint16_t* mirror = cpu_model_update_mirror(cm);
    if (!cm->opt_committed) { // (AdamW reads and writes all of m and v)
        commit_pages(cm->m_memory, cm->opt_size * sizeof(float));
        commit_pages(cm->v_memory, cm->opt_size * sizeof(float));
        cm->opt_committed = 1;
    }
    cpu_adamw_update(cm->params_memory, mirror, cm->grads_memory, cm->m_memory, cm->v_memory, cm->opt_offset,
                     cm->opt_size, cm->param_sizes, cm->is_matrix, cm->num_tensors, learning_rate, beta1, beta2, eps,
                     weight_decay, grad_scale, t);
    cm->params_bf16_stale = mirror == NULL;
}

// One step of Muon mode on this process's segments: Muon (llmc/cpu/muon.h) with muon_lr on each owned block
// matrix, AdamW (weight decay on 2-D tensors) with learning_rate on the other owned parameters; gradients are
// first scaled by grad_scale. t is the 1-based step number. With ZeRO-1 the caller then sends every segment
// from its owner to the others.
static void cpu_model_update_muon(CpuModel* cm, float learning_rate, float muon_lr, float beta1, float beta2, float eps,
                                  float weight_decay, float grad_scale, int t) {
    uint16_t* mirror = cpu_model_update_mirror(cm);
    if (!cm->opt_committed) { // (v only where AdamW runs: a Muon matrix's stays untouched)
        cpu_muon_commit_state(&cm->muon, cm->m_memory, cm->v_memory);
        cm->opt_committed = 1;
    }
    cpu_muon_update(&cm->muon, cm->params_memory, mirror, cm->grads_memory, cm->m_memory, cm->v_memory, cm->is_matrix,
                    learning_rate, muon_lr, beta1, beta2, eps, weight_decay, grad_scale, t);
    cm->params_bf16_stale = mirror == NULL;
}

static void cpu_model_free(CpuModel* cm) {
    cpu_muon_free(&cm->muon);
    if (cm->params_bf16 != NULL) { matmul_bf16_mirror_remove(cm->params_memory); }
    free_aligned(cm->params_bf16);
    free_aligned(cm->params_memory);
    free_aligned(cm->grads_memory);
    free_aligned(cm->m_memory);
    free_aligned(cm->v_memory);
    free_aligned(cm->logits_memory);
    cm->logits_memory = NULL;
    cm->logits_capacity = 0;
    cpu_model_free_activations(cm);
}

// ----------------------------------------------------------------------------
// the model's calls, for the programs around it (llmc/cpu/cpu_trainer.h's TrainerOps and main, llmc/cpu/cpu_test.h)

typedef struct {
    // the model of this config (its family's struct): the config kept, the parameters (zeroed) and gradients with
    // cpu_model_init, the model's tables; llmc/cpu/cpu_trainer.h's cpu_model_build fills the parameters
    void (*allocate)(void* model, const void* config);
    void (*allocate_activations)(void* model, int B, int T);
    void (*forward)(void* model, const int* inputs, const int* targets, int B, int T);
    void (*backward)(void* model, float loss_scale);
    void (*free)(void* model);  // what the model holds beyond its CpuModel too; NULL: only that (cpu_model_free)
} CpuModelCalls;

// frees the model: its calls' free, else its CpuModel
static void cpu_model_free_with(CpuModel* cm, const CpuModelCalls* calls, void* model) {
    if (calls->free != NULL) {
        calls->free(model);
    } else {
        cpu_model_free(cm);
    }
}

// the model's line: "<config line>, N parameters" (llmc/model_family.h's model_family_describe)
static void cpu_model_line(const CpuModel* cm, char* line, size_t size) {
    char config[256];
    model_family_describe(cm->description, cm->config, config, sizeof(config));
    snprintf(line, size, "%s, %zu parameters", config, cm->num_parameters);
}

// the model file of the model's fp32 parameters, atomically (llmc/model_file.h)
static void cpu_model_write(const CpuModel* cm, const char* path) {
    model_file_write(path, cm->description->model_file, cm->config, cm->params_memory, cm->num_parameters);
}

#endif // LLMC_CPU_MODEL_H
