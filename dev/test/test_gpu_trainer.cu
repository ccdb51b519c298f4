/*
dev/test/test_gpu_trainer.cu: llmc/cuda/gpu_trainer.cuh fed from a second model's tensor table, Llama 3's
(llmc/llama3.h: no wpe, no biases, GQA qkvw, SwiGLU's fcw and fcw2, an untied lm_head), at d2 with
V = 512. Built and run on the CPU execution target, BF16 (tests/test_gpu_trainer.py).

    ./test_gpu_trainer      (N passed, M failed; exit 1 on a failure)

1. the table: num_parameters is the table's sum (tensor_table_sizes), and each tensor starts where llmc/decoder.h's
   decoder_layout, which finds it by name, puts it
2. the gradient ranges: the L layers' ranges and those outside the layers cover [0, n) exactly once
3. for each rank of two ZeRO-1 processes: the padded parameters hold the fp32 values rounded to bf16 (the
   download gives back those), the master weights are the shard's fp32 values bit for bit
4. one update (gpu_model_update) on rank 0's shard with a constant gradient: every master weight is
   llmc/adamw.h's adamw_update_one of its value, with weight decay exactly on the 2-D weights of the table
5. the training state: gpu_save_state, then gpu_load_state into cleared buffers, gives back m, v and the
   master weights bit for bit
*/
#include "../../llmc/cuda/gpu_trainer.cuh"
#include "../../llmc/llama3.h"
#include "../../llmc/decoder.h"
#include "test_common.h"

static Llama3Config test_config(void) {
    Llama3Config cfg;
    if (!llama3_config_from_descriptor("d2", 512, &cfg)) { llmc_die("internal: d2 is a Llama 3 descriptor"); }
    return cfg;
}

// the model's table into a GpuModel, as a Llama 3 GPU trainer does it
static void test_model_init(GpuModel* m, const Llama3Config* cfg) {
    gpu_model_init(m, &LLAMA3_FAMILY, cfg, NULL, NULL, cfg->num_layers, cfg->channels, cfg->vocab_size, cfg->max_seq_len);
}

static void check_table(const Llama3Config* cfg) {
    GpuModel m;
    test_model_init(&m, cfg);
    size_t n = tensor_table_sizes(llama3_parameter_dims, cfg, LLAMA3_NUM_PARAMETER_TENSORS, NULL);
    CHECK(m.num_parameters == n, "num_parameters %zu, the table's sum %zu", m.num_parameters, n);
    CHECK(cfg->num_kv_heads < cfg->num_heads && !cfg->tied_embeddings, "d2 has GQA and an untied head");
    DecoderLayout layout;
    decoder_layout(&LLAMA3_FAMILY, cfg, &layout);
    const int slots[LLAMA3_NUM_PARAMETER_TENSORS] = {DECODER_TENSOR_wte, DECODER_TENSOR_ln1w, DECODER_TENSOR_qkvw,
                                                     DECODER_TENSOR_attprojw, DECODER_TENSOR_ln2w, DECODER_TENSOR_fcw,
                                                     DECODER_TENSOR_fcw2, DECODER_TENSOR_fcprojw, DECODER_TENSOR_lnfw,
                                                     DECODER_TENSOR_lm_head};
    for (int k = 0; k < LLAMA3_NUM_PARAMETER_TENSORS; k++) {
        CHECK(m.param_offsets[k] == layout.offset[slots[k]], "%s at %zu, decoder_layout puts it at %zu", m.names[k],
              m.param_offsets[k], layout.offset[slots[k]]);
    }

    // every element in exactly one range: the layers', then the tensors outside them
    unsigned char* seen = (unsigned char*)calloc(n, 1);
    GradRange ranges[GPU_MODEL_MAX_TENSORS];
    for (int l = -1; l < cfg->num_layers; l++) {
        int count = gpu_model_layer_ranges(&m, l, ranges);
        CHECK(count == (l < 0 ? 3 : 7), "layer %d: %d ranges", l, count);
        for (int r = 0; r < count; r++) {
            for (size_t i = ranges[r].lo; i < ranges[r].hi && i < n; i++) { seen[i]++; }
        }
    }
    size_t once = 0;
    for (size_t i = 0; i < n; i++) { once += seen[i] == 1; }
    CHECK(once == n, "%zu of %zu elements in exactly one gradient range", once, n);
    free(seen);
}

// a deterministic value per parameter, most of them not bf16 values
static float test_value(size_t i) { return (float)((double)((i * 2654435761u) % 20011u) / 20011.0 - 0.5) * 0.37f; }

static void check_rank(const Llama3Config* cfg, int nproc, int rank) {
    GpuModel m;
    test_model_init(&m, cfg);
    const size_t n = m.num_parameters;
    gpu_model_allocate_parameters(&m, 1, nproc);
    float* host = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { host[i] = test_value(i); }
    gpu_model_set_init_params(&m, host);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    ZeroShard shard = zero_shard(n, 1, nproc, rank);
    const int B = 2, T = 16;
    gpu_model_allocate_state(&m, B, T, shard, 1, stream);
    float* norm_scratch = (float*)cudaMallocCheck((1 + GLOBAL_NORM_BLOCKS) * sizeof(float));
    m.norm_scratch = norm_scratch;

    // 3. parameters and master weights
    float* back = (float*)mallocCheck(n * sizeof(float));
    gpu_model_download_parameters(&m, back);
    size_t rounded = 0;
    for (size_t i = 0; i < n; i++) { rounded += back[i] == bf16_bits_to_float(bf16_bits_round_nearest(test_value(i))); }
    CHECK(rounded == n, "rank %d: %zu of %zu device parameters are the fp32 values rounded to nearest", rank, rounded, n);
    float* master = (float*)mallocCheck(shard.size * sizeof(float) + 1);
    CHECK(m.master_weights != NULL, "rank %d: master weights in a BF16 build", rank);
    cudaCheck(cudaMemcpy(master, m.master_weights, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    size_t exact = 0;
    for (size_t i = 0; i < shard.size; i++) {
        float want = test_value(shard.offset + i);
        exact += memcmp(&master[i], &want, sizeof(float)) == 0;
    }
    CHECK(exact == shard.size, "rank %d: %zu of %zu master weights are the shard's fp32 values", rank, exact, shard.size);

    // 4. one AdamW step on this rank's shard (one process: the all-gather and reductions are no-ops)
    MultiGpu mg;
    memset(&mg, 0, sizeof(mg));
    mg.num_processes = 1;
    mg.num_parameters = n;
    mg.shard = shard;
    const float grad = 0.25f, lr = 1e-3f, wd = 0.1f;
    floatX* grads = (floatX*)mallocCheck(n * sizeof(floatX));
    for (size_t i = 0; i < n; i++) { back[i] = grad; }
    floatX_from_float_host(grads, back, n);
    cudaCheck(cudaMemcpy(m.grads_memory, grads, n * sizeof(floatX), cudaMemcpyHostToDevice));
    free(grads);
    const float norm = gpu_model_grad_norm(&m, &mg);
    const float want_norm = grad * sqrtf((float)shard.size);
    CHECK(fabsf(norm - want_norm) <= 1e-4f * want_norm, "rank %d: gradient norm %g of the shard, want %g", rank, norm, want_norm);
    gpu_model_update(&m, &mg, lr, 0.0f, 0.9f, 0.95f, 1e-8f, wd, 1.0f, 1);
    cudaCheck(cudaStreamSynchronize(stream));
    cudaCheck(cudaMemcpy(master, m.master_weights, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    AdamWScalars s = adamw_step_scalars(lr, 0.9f, 0.95f, 1e-8f, 1);
    size_t right = 0;
    for (size_t i = 0; i < shard.size; i++) {
        size_t gi = shard.offset + i;
        int k = 0;
        while (gi >= m.param_offsets[k] + m.param_sizes[k]) { k++; }
        float mi = 0.0f, vi = 0.0f;
        float want = adamw_update_one(test_value(gi), grad, &mi, &vi, LLAMA3_PARAMETER_IS_MATRIX[k] ? wd : 0.0f, s);
        right += memcmp(&master[i], &want, sizeof(float)) == 0;
    }
    CHECK(right == shard.size, "rank %d: %zu of %zu master weights are adamw_update_one's (decay on the 2-D weights only)",
          rank, right, shard.size);

    // 5. the training state round trip
    GpuTrainer g;
    memset(&g, 0, sizeof(g));
    g.gpu = &m;
    g.mg = &mg;
    char path[64];
    snprintf(path, sizeof(path), "test_gpu_trainer_state_%d.bin", rank);
    TrainerDetectors d;
    trainer_detectors_init(&d);
    TrainState saved;
    memset(&saved, 0, sizeof(saved));
    saved.num_processes = nproc;
    saved.process_rank = rank;
    saved.zero_stage = 1;
    saved.step = 1;
    gpu_save_state(&g, path, &saved, &d);
    float* mv_before = (float*)mallocCheck(3 * shard.size * sizeof(float) + 1);
    cudaCheck(cudaMemcpy(mv_before, m.m_memory, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(mv_before + shard.size, m.v_memory, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(mv_before + 2 * shard.size, m.master_weights, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemset(m.m_memory, 0, shard.size * sizeof(float)));
    cudaCheck(cudaMemset(m.v_memory, 0, shard.size * sizeof(float)));
    cudaCheck(cudaMemset(m.master_weights, 0, shard.size * sizeof(float)));
    TrainState expect = saved, got;
    gpu_load_state(&g, path, &expect, &got, &d);
    unlink(path);
    float* mv_after = (float*)mallocCheck(3 * shard.size * sizeof(float) + 1);
    cudaCheck(cudaMemcpy(mv_after, m.m_memory, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(mv_after + shard.size, m.v_memory, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(mv_after + 2 * shard.size, m.master_weights, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    CHECK(memcmp(mv_before, mv_after, 3 * shard.size * sizeof(float)) == 0, "rank %d: m, v and master weights back from the state file",
          rank);
    CHECK(got.opt_offset == shard.offset && got.opt_size == shard.size && got.num_parameters == n,
          "rank %d: the state file holds the shard [%zu, +%zu) of %zu parameters", rank, got.opt_offset, got.opt_size, got.num_parameters);

    free(mv_before);
    free(mv_after);
    free(master);
    free(back);
    cudaCheck(cudaFree(norm_scratch));
    gpu_model_free(&m);
    cudaCheck(cudaStreamDestroy(stream));
}

int main(void) {
    Llama3Config cfg = test_config();
    check_table(&cfg);
    for (int rank = 0; rank < 2; rank++) { check_rank(&cfg, 2, rank); }
    return test_summary();
}
