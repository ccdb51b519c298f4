/*
dev/cuda/nccl_all_reduce.cu: the gradient reduction across GPUs (run with mpirun, one process per GPU).

    mpirun -np 2 ./nccl_all_reduce [version] [--quick]   (full: GPT-2 124M's gradients; at least 2 processes)

    version 1: one ncclAllReduce (average) over the whole vector
    version 2: the production ZeRO-0 path (llmc/cuda/multi_gpu.cuh): per-layer ranges, averaged with
               all-reduces on the NCCL stream
    version 3: the production ZeRO-1 path: per-layer ranges reduced to their shard owners (ncclReduce),
               i.e. a reduce-scatter; each rank checks only the shard it owns
Rank r fills the gradients with r + 1 + (i % 7) / 8, so the average is known in closed form.
*/
#include "common.h"
#include "../../llmc/cuda/multi_gpu.cuh"

#if !defined(USE_NCCL) || !defined(USE_MPI)
int main(void) {
    printf("nccl_all_reduce: built without NCCL and MPI (the dev/cuda Makefile adds them when found)\n");
    return 1;
}
#else
__global__ static void fill_kernel(floatX* x, size_t n, int rank) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { x[i] = (floatX)((float)(rank + 1) + (float)(i % 7) / 8.0f); }
}

int main(int argc, char** argv) {
    MultiGpu mg;
    multi_gpu_init(&mg, &argc, &argv, 1, 0, 8, "mpi", "", "", 0, 0);  // MPI_Init may edit argc, argv
    Playground pg = playground_init(argc, argv, 3);
    int nproc = mg.num_processes, rank = mg.process_rank;
    if (nproc < 2) {
        // one process has no communicator (multi_gpu_init makes none) and nothing to average
        printf("nccl_all_reduce: needs at least 2 processes: mpirun -np 2 ./nccl_all_reduce\n");
        multi_gpu_free(&mg);
        return 1;
    }
    Shape s = playground_shape(&pg, 8, 1024);
    if (rank == 0) { playground_announce(&pg, "nccl_all_reduce", &s); }
    GPT2Config cfg = shape_model(&s);  // the layer ranges of GPT-2 124M (d12), or of the quick model
    size_t n = gpt2_num_parameters(&cfg);
    size_t padded = zero_padded_size(n, 1, nproc);
    floatX* d_grads = device_alloc<floatX>(padded);
    float* ref = (float*)mallocCheck(n * sizeof(float));
    for (size_t i = 0; i < n; i++) { ref[i] = (float)(nproc + 1) / 2.0f + (float)(i % 7) / 8.0f; }
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));
    mg.num_parameters = n;
    const double bytes = (double)n * sizeof(floatX);
    for (int version = 1; version <= 3; version++) {
        if (!version_selected(&pg, version)) { continue; }
        mg.zero_stage = version == 3 ? 1 : 0;
        mg.shard = zero_shard(n, mg.zero_stage, nproc, rank);
        auto run = [&]() {
            fill_kernel<<<ceil_div(n, 256), 256, 0, stream>>>(d_grads, n, rank);
            cudaCheckLaunch();
            if (version == 1) {
                ncclCheck(ncclAllReduce(d_grads, d_grads, n, NCCL_FLOATX, ncclAvg, mg.comm, stream));
            } else {
                GradRange ranges[GPT2_NUM_PARAMETER_TENSORS];
                for (int l = cfg.num_layers - 1; l >= -1; l--) {
                    int k = grad_layer_ranges(&cfg, l, ranges);
                    multi_gpu_reduce_ranges(&mg, d_grads, ranges, k, stream);
                }
                multi_gpu_sync(&mg, stream);
            }
        };
        run();
        cudaCheck(cudaStreamSynchronize(stream));
        validate_result(d_grads + mg.shard.offset, ref + mg.shard.offset, "reduced gradients", mg.shard.size,
                        precision_tol(1e-6f, 1e-2f));
        float ms = benchmark_kernel(&pg, 10, [&]() { run(); cudaCheck(cudaStreamSynchronize(stream)); });
        if (rank == 0) {
            printf("version %d: %.3f ms, algorithm bandwidth %.1f GB/s over %d processes%s\n", version, ms, bytes / ms * 1e-6,
                   nproc, timing_note(&pg));
        }
    }
    free(ref);
    cudaCheck(cudaFree(d_grads));
    cudaCheck(cudaStreamDestroy(stream));
    if (rank == 0) { printf("nccl_all_reduce: all versions give the average on every owner\n"); }
    multi_gpu_free(&mg);
    return 0;
}
#endif
