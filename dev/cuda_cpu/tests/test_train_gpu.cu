/*
dev/cuda_cpu/tests/test_train_gpu.cu: GPU-trainer state that test_gpt2cu does not see, on the CPU target.

    ./test_train_gpu <fp32 checkpoint>     (BF16 build; N passed, M failed; exit 1 on a failure)

1. the fp32 master weights of a BF16 build start from the checkpoint's fp32 values, not from the
   bf16-rounded device parameters (for every ZeRO-1 shard of two processes, bit for bit)
2. the device parameters are those values rounded to nearest even
*/
#define LLMC_NO_MAIN
#include "../../../train_gpt2.cu"
#include "../../test/test_common.h"

static void check_master_weights(const char* path, int nproc, int rank) {
    GPT2 model;
    gpu_model_build(&model.gpu, &GPT2_FAMILY, &gpt2_calls, &model, path, 1, 1, nproc);  // a checkpoint, padded for ZeRO-1 over nproc
    ZeroShard shard = zero_shard(model.gpu.num_parameters, 1, nproc, rank);
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    gpt2_allocate_state(&model, 2, 64, 0, shard, 1, stream);

    GPT2Config cfg;
    int version = 0;
    FILE* f = gpt2_model_open(path, &cfg, &version);
    float* want = (float*)mallocCheck(model.gpu.num_parameters * sizeof(float));
    model_file_read_params(f, path, version, want, model.gpu.num_parameters);
    fcloseCheck(f, path);

    float* master = (float*)mallocCheck(shard.size * sizeof(float));
    CHECK(model.gpu.master_weights != NULL, "BF16 with -w 1 allocates master weights");
    cudaCheck(cudaMemcpy(master, model.gpu.master_weights, shard.size * sizeof(float), cudaMemcpyDeviceToHost));
    size_t differ = 0, not_bf16 = 0;
    for (size_t i = 0; i < shard.size; i++) {
        float w = want[shard.offset + i];
        differ += memcmp(&master[i], &w, sizeof(float)) != 0;
        not_bf16 += bf16_bits_to_float(bf16_bits_round_nearest(w)) != w;
    }
    CHECK(not_bf16 > shard.size / 2, "the checkpoint's values are mostly not bf16 values (%zu of %zu), so the check means something",
          not_bf16, shard.size);
    CHECK(differ == 0, "rank %d of %d: master weights equal the checkpoint's fp32 values bit for bit (%zu of %zu differ)", rank,
          nproc, differ, shard.size);

    floatX* device = (floatX*)mallocCheck(model.gpu.num_parameters * sizeof(floatX));
    cudaCheck(cudaMemcpy(device, model.gpu.params_memory, model.gpu.num_parameters * sizeof(floatX), cudaMemcpyDeviceToHost));
    size_t wrong = 0;
    for (size_t i = 0; i < model.gpu.num_parameters; i++) {
        uint16_t bits;
        memcpy(&bits, &device[i], sizeof(bits));
        wrong += bits != bf16_bits_round_nearest(want[i]);
    }
    CHECK(wrong == 0, "the device parameters are the checkpoint rounded to nearest even (%zu wrong)", wrong);
    free(device);
    free(master);
    free(want);
    gpu_model_free(&model.gpu);
    cudaCheck(cudaStreamDestroy(stream));
}

int main(int argc, char** argv) {
#if !PRECISION_IS_BF16
    printf("test_train_gpu: a BF16 build is needed (master weights exist only there)\n");
    return 1;
#endif
    if (argc != 2) {
        fprintf(stderr, "usage: %s <fp32 checkpoint>\n", argv[0]);
        return 1;
    }
    check_master_weights(argv[1], 1, 0);
    check_master_weights(argv[1], 2, 0);
    check_master_weights(argv[1], 2, 1);
    return test_summary();
}
