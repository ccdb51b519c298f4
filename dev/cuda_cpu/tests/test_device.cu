/*
dev/cuda_cpu/tests/test_device.cu: the CPU execution target's device semantics, checked.

    ./test_device            the semantics that must hold (N passed, M failed; exit 1 on a failure)
    ./test_device <defect>   runs one defective kernel that the target must report (exit 1 with a
                             "cuda_cpu:" line); tests/test_cuda_cpu.py runs every one of them
    ./test_device switch NAME  starts the runtime and prints NAME=<value of the CUDA_CPU_* switch NAME>
                             (the semantics run it with malformed and valid values)

Built by dev/cuda_cpu/cuda_cpu.mk like any CUDA source (translate.py, then the host compiler).
*/
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include "../../../llmc/bf16.h"

static int passed = 0, failed = 0;
static void check(int ok, const char* what) {
    if (ok) { passed++; } else { failed++; printf("FAIL: %s\n", what); }
}
#define CHECK_CUDA(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { printf("FAIL: %s: %s\n", #call, cudaGetErrorString(e_)); exit(1); } } while (0)

template <class T> static T* device_alloc(size_t n) {
    T* p = NULL;
    CHECK_CUDA(cudaMalloc(&p, n * sizeof(T)));
    return p;
}
template <class T> static void download(T* host, const T* dev, size_t n) { CHECK_CUDA(cudaMemcpy(host, dev, n * sizeof(T), cudaMemcpyDeviceToHost)); }
template <class T> static void upload(T* dev, const T* host, size_t n) { CHECK_CUDA(cudaMemcpy(dev, host, n * sizeof(T), cudaMemcpyHostToDevice)); }

// ----------------------------------------------------------------------------
// kernels that must work

// every thread of a 3-D grid of 3-D blocks writes its coordinates once
__global__ void coordinates_kernel(int* out) {
    int bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    int per_block = blockDim.x * blockDim.y * blockDim.z;
    int g = bx * per_block + tx;
    out[4 * g + 0] = threadIdx.x + 100 * threadIdx.y + 10000 * threadIdx.z;
    out[4 * g + 1] = blockIdx.x + 100 * blockIdx.y + 10000 * blockIdx.z;
    out[4 * g + 2] = blockDim.x + 100 * blockDim.y + 10000 * blockDim.z;
    out[4 * g + 3] = gridDim.x + 100 * gridDim.y + 10000 * gridDim.z;
}

// tree reduction in shared memory: every step needs the previous step's writes of other threads
__global__ void shared_tree_sum_kernel(float* out, const float* in) {
    __shared__ float buf[1024];
    buf[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) { buf[threadIdx.x] += buf[threadIdx.x + stride]; }
        __syncthreads();
    }
    if (threadIdx.x == 0) { out[blockIdx.x] = buf[0]; }
}

// reversal through shared memory: thread t reads what thread n-1-t wrote
__global__ void shared_reverse_kernel(int* out, const int* in) {
    __shared__ int buf[256];
    buf[threadIdx.x] = in[threadIdx.x];
    __syncthreads();
    out[threadIdx.x] = buf[blockDim.x - 1 - threadIdx.x];
}

// out[4 * t + k]: the four shuffles of the lane value 1000 * lane + 7, with the given width
__global__ void shuffle_kernel(int* out, int width) {
    int lane = threadIdx.x % 32;
    int v = 1000 * lane + 7;
    unsigned mask = __activemask();
    out[4 * threadIdx.x + 0] = __shfl_xor_sync(mask, v, 5 % width, width);
    out[4 * threadIdx.x + 1] = __shfl_down_sync(mask, v, 3, width);
    out[4 * threadIdx.x + 2] = __shfl_up_sync(mask, v, 2, width);
    out[4 * threadIdx.x + 3] = __shfl_sync(mask, v, 6, width);
}

// dynamic shared memory: the size comes from the launch
__global__ void dynamic_reverse_kernel(int* out, const int* in) {
    extern __shared__ int dyn[];
    dyn[threadIdx.x] = in[blockIdx.x * blockDim.x + threadIdx.x];
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = dyn[blockDim.x - 1 - threadIdx.x];
}

// static __shared__ is per block: thread 0 writes it, every thread of the block reads it
__global__ void block_broadcast_kernel(float* out) {
    __shared__ float value;
    if (threadIdx.x == 0) { value = 10.0f * blockIdx.x; }
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = value + threadIdx.x;
}

// what a block finds in a static __shared__ variable at its start (read through a raw pointer, which
// initcheck does not see), then overwritten for whichever block runs next
__global__ void shared_at_block_start_kernel(unsigned int* out) {
    __shared__ unsigned int cell[4];
    unsigned int* raw = &cell[0];
    if (threadIdx.x == 0) {
        out[blockIdx.x] = raw[blockIdx.x % 4];
        for (int k = 0; k < 4; k++) { raw[k] = blockIdx.x; }
    }
}

// what racecheck must accept: lanes exchange through shared memory ordered by __syncwarp (both
// halves of the warp, then only the lower half with a partial mask), and a buffer reused after a barrier
__global__ void ordered_exchange_kernel(float* out) {
    __shared__ float lanes[64];
    const int lane = threadIdx.x % 32, base = threadIdx.x - lane;
    lanes[threadIdx.x] = (float)threadIdx.x;
    __syncwarp();
    float partner = lanes[base + (lane ^ 1)];
    __syncwarp();
    lanes[threadIdx.x] = partner;  // overwrites what lane ^ 1 read: ordered by the __syncwarp above
    if (lane < 16) {
        __syncwarp(0x0000FFFFu);
        partner += lanes[base + (lane ^ 2)];
    }
    __syncthreads();
    float mirrored = lanes[63 - threadIdx.x];  // another warp's element, which...
    __syncthreads();
    lanes[threadIdx.x] = partner + mirrored;  // ...is rewritten only after the barrier
    __syncthreads();
    out[threadIdx.x] = lanes[threadIdx.x];
}

__global__ void vote_kernel(unsigned* out) {
    int lane = threadIdx.x % 32;
    out[3 * threadIdx.x + 0] = __ballot_sync(0xFFFFFFFFu, lane % 3 == 0);
    out[3 * threadIdx.x + 1] = __all_sync(0xFFFFFFFFu, lane < 40);
    out[3 * threadIdx.x + 2] = __any_sync(0xFFFFFFFFu, lane == 31);
}

__global__ void atomic_count_kernel(int* counter, float* fsum) {
    atomicAdd(counter, 1);
    atomicAdd(fsum, 0.5f);
}

__global__ void bf16_convert_kernel(__nv_bfloat16* out, float* back, const float* in, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = __float2bfloat16(in[i]);
        back[i] = __bfloat162float(out[i]);
    }
}

// ----------------------------------------------------------------------------
// defects the target must report

__global__ void divergent_syncthreads_kernel(float* out) {
    if (threadIdx.x < 16) { __syncthreads(); }
    out[threadIdx.x] = 1.0f;
}
__global__ void early_return_kernel(float* out) {
    if (threadIdx.x == 0) { return; }
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}
__global__ void exited_lane_shuffle_kernel(float* out) {
    if (threadIdx.x == 3) { return; }
    out[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, 1.0f, 1);
}
__global__ void mixed_barriers_kernel(float* out) {
    if (threadIdx.x < 16) { __syncwarp(); } else { __syncthreads(); }
    out[threadIdx.x] = 1.0f;
}
__global__ void out_of_bounds_kernel(float* out, int n) {
    out[n + threadIdx.x] = 1.0f;  // one past the end (n floats fill the allocation's 256-byte granules)
}
__global__ void write_kernel(float* out) { out[threadIdx.x] = 1.0f; }
__global__ void copy_kernel(float* out, const float* in) { out[threadIdx.x] = in[threadIdx.x]; }
__global__ void unwritten_shared_kernel(float* out) {
    __shared__ float row[33];
    row[threadIdx.x] = 1.0f;  // 32 threads write row[0..31]
    __syncthreads();
    out[threadIdx.x] = row[threadIdx.x + 1];  // thread 31 reads row[32], which no thread wrote
}
__global__ void previous_block_shared_kernel(float* out) {
    __shared__ float carry;
    if (blockIdx.x == 0 && threadIdx.x == 0) { carry = 1.0f; }  // only block 0 writes it
    __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = carry;
}
__global__ void unwritten_dynamic_shared_kernel(float* out) {
    extern __shared__ float arena[];
    arena[threadIdx.x] = 2.0f;
    __syncthreads();
    out[threadIdx.x] = arena[threadIdx.x] + arena[blockDim.x];  // arena[32]: inside the arena, never written
}
__global__ void shared_out_of_bounds_kernel(float* out) {
    __shared__ float small[8];
    small[threadIdx.x] = 1.0f;  // 32 threads, 8 elements
    __syncthreads();
    out[threadIdx.x] = small[threadIdx.x % 8];
}

// racecheck: warp 1 writes, warp 0 reads, and no __syncthreads between them. Both fiber orders run
// the write first (warp 0 waits in its shuffle while warp 1 runs), so the result is right in both;
// the race is reported all the same
__global__ void race_hidden_by_order_kernel(float* out) {
    __shared__ float value;
    if (threadIdx.x == 32) { value = 5.0f; }
    float one = __shfl_sync(0xFFFFFFFFu, 1.0f, 0);
    if (threadIdx.x == 0) { out[0] = value * one; }
}
// racecheck: lanes exchange through shared memory without __syncwarp (warp-synchronous code, which
// Volta and later do not guarantee)
__global__ void warp_exchange_without_syncwarp_kernel(float* out) {
    __shared__ float lanes[32];
    lanes[threadIdx.x] = (float)threadIdx.x;
    out[threadIdx.x] = lanes[threadIdx.x ^ 1];
}
// racecheck: a read and a later write of another thread in the same barrier interval (the buffer is
// reused without a __syncthreads after its last read)
__global__ void reuse_without_barrier_kernel(float* out) {
    __shared__ float buf[64];
    buf[threadIdx.x] = (float)threadIdx.x;
    __syncthreads();
    float mine = buf[63 - threadIdx.x];
    buf[threadIdx.x] = 2.0f * mine;
    out[threadIdx.x] = mine;
}

// the planted defects: each gets 256 floats of device memory and does one thing the target must report
struct Defect {
    const char* name;
    void (*plant)(float* d);
};

static const Defect DEFECTS[] = {
    {"host_pointer", [](float*) {
         float host[32];
         write_kernel<<<1, 32>>>(host);
     }},
    {"divergent_syncthreads", [](float* d) { divergent_syncthreads_kernel<<<1, 32>>>(d); }},
    {"early_return", [](float* d) { early_return_kernel<<<1, 64>>>(d); }},
    {"exited_lane_shuffle", [](float* d) { exited_lane_shuffle_kernel<<<1, 32>>>(d); }},
    {"mixed_barriers", [](float* d) { mixed_barriers_kernel<<<1, 32>>>(d); }},
    {"out_of_bounds", [](float* d) { out_of_bounds_kernel<<<1, 32>>>(d, 256); }},
    {"unwritten_shared", [](float* d) { unwritten_shared_kernel<<<1, 32>>>(d); }},
    {"previous_block_shared", [](float* d) { previous_block_shared_kernel<<<2, 32>>>(d); }},
    {"unwritten_dynamic_shared", [](float* d) { unwritten_dynamic_shared_kernel<<<1, 32, 64 * sizeof(float)>>>(d); }},
    {"shared_out_of_bounds", [](float* d) { shared_out_of_bounds_kernel<<<1, 32>>>(d); }},
    {"race_hidden_by_order", [](float* d) { race_hidden_by_order_kernel<<<1, 64>>>(d); }},
    {"warp_exchange_without_syncwarp", [](float* d) { warp_exchange_without_syncwarp_kernel<<<1, 32>>>(d); }},
    {"reuse_without_barrier", [](float* d) { reuse_without_barrier_kernel<<<1, 64>>>(d); }},
    {"fresh_device_read", [](float* d) {  // initcheck: a kernel reads memory nothing wrote
         float* fresh = device_alloc<float>(32);
         copy_kernel<<<1, 32>>>(d, fresh);
     }},
    {"fresh_device_copy", [](float*) {  // initcheck: a copy to the host of memory nothing wrote
         float* fresh = device_alloc<float>(8);
         float h[8];
         download(h, fresh, 8);
         printf("fresh device memory reads %s with initcheck off (0xFF bytes)\n", isnan(h[0]) ? "NaN" : "a number");
     }},
    {"missing_event_wait", [](float* d) {  // stream order: b reads what a writes, unordered
         cudaStream_t a, b;
         CHECK_CUDA(cudaStreamCreate(&a));
         CHECK_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
         CHECK_CUDA(cudaMemsetAsync(d, 0, 64 * sizeof(float), a));
         CHECK_CUDA(cudaMemcpyAsync(d + 64, d, 64 * sizeof(float), cudaMemcpyDeviceToDevice, b));  // no cudaStreamWaitEvent
         CHECK_CUDA(cudaStreamSynchronize(b));
     }},
    {"host_read_before_sync", [](float* d) {  // stream order: the host reads what a stream still writes
         cudaStream_t s;
         CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
         write_kernel<<<1, 32, 0, s>>>(d);
         float h[32];
         download(h, d, 32);  // cudaMemcpy waits for the legacy stream's work only, not for s
     }},
    {"freed_pointer", [](float* d) {
         CHECK_CUDA(cudaFree(d));
         write_kernel<<<1, 32>>>(d);
     }},
};

static int run_defect(const char* name) {
    const Defect* defect = nullptr;
    for (const Defect& candidate : DEFECTS) {
        if (strcmp(name, candidate.name) == 0) { defect = &candidate; }
    }
    if (defect == nullptr) {
        printf("unknown defect %s\n", name);
        return 2;
    }
    float* d = device_alloc<float>(256);
    defect->plant(d);
    cudaError_t err = cudaDeviceSynchronize();  // kernels run in stream order: by now at the latest
    if (err == cudaSuccess) { err = cudaGetLastError(); }
    printf("defect %s was NOT reported (%s)\n", name, cudaGetErrorString(err));
    return 0;  // not reported: the caller's test fails on exit code 0
}

// ----------------------------------------------------------------------------
// the CUDA_CPU_* switches: a malformed value stops the program at its first CUDA call (exit 1) with one
// line naming the variable, the value and what it takes; a valid one is read as its number (exit 0)

struct SwitchCase {
    const char* name;
    const char* value;
    int status;        // the exit status of `test_device switch NAME` with NAME=VALUE
    const char* line;  // and the one line it writes
};

static const SwitchCase SWITCH_CASES[] = {
    {"CUDA_CPU_RACECHECK", "foo", 1, "cuda_cpu: CUDA_CPU_RACECHECK=foo: use 0 (off) or 1 (on)"},
    {"CUDA_CPU_RACECHECK", "2", 1, "cuda_cpu: CUDA_CPU_RACECHECK=2: use 0 (off) or 1 (on)"},
    {"CUDA_CPU_INITCHECK", "2x", 1, "cuda_cpu: CUDA_CPU_INITCHECK=2x: use 0 (off) or 1 (on)"},
    {"CUDA_CPU_INITCHECK", "", 1, "cuda_cpu: CUDA_CPU_INITCHECK=: use 0 (off) or 1 (on)"},
    {"CUDA_CPU_STREAM_ORDER", "3", 1, "cuda_cpu: CUDA_CPU_STREAM_ORDER=3: use 0 (off), 1 (on) or 2 (on, every other stream first)"},
    {"CUDA_CPU_STREAM_ORDER", "-1", 1, "cuda_cpu: CUDA_CPU_STREAM_ORDER=-1: use 0 (off), 1 (on) or 2 (on, every other stream first)"},
    {"CUDA_CPU_POISON", "on", 1, "cuda_cpu: CUDA_CPU_POISON=on: use 0 (off) or 1 (on)"},
    {"CUDA_CPU_THREADS", "0", 1, "cuda_cpu: CUDA_CPU_THREADS=0: use a whole number from 1 to 1024"},
    {"CUDA_CPU_THREADS", "99999999999999999999", 1, "cuda_cpu: CUDA_CPU_THREADS=99999999999999999999: use a whole number from 1 to 1024"},
    {"CUDA_CPU_DEVICES", " 2", 1, "cuda_cpu: CUDA_CPU_DEVICES= 2: use a whole number from 1 to 1024"},
    {"CUDA_CPU_GEMM_BLOCK_COLUMNS", "+7", 1, "cuda_cpu: CUDA_CPU_GEMM_BLOCK_COLUMNS=+7: use a whole number from 1 to 2147483647"},
    {"CUDA_CPU_ORDER", "Reverse", 1, "cuda_cpu: CUDA_CPU_ORDER=Reverse: use forward or reverse"},
    {"CUDA_CPU_RACECHECK", "0", 0, "CUDA_CPU_RACECHECK=0"},
    {"CUDA_CPU_INITCHECK", "1", 0, "CUDA_CPU_INITCHECK=1"},
    {"CUDA_CPU_STREAM_ORDER", "2", 0, "CUDA_CPU_STREAM_ORDER=2"},
    {"CUDA_CPU_POISON", "0", 0, "CUDA_CPU_POISON=0"},
    {"CUDA_CPU_THREADS", "3", 0, "CUDA_CPU_THREADS=3"},
    {"CUDA_CPU_DEVICES", "2", 0, "CUDA_CPU_DEVICES=2"},
    {"CUDA_CPU_GEMM_BLOCK_COLUMNS", "7", 0, "CUDA_CPU_GEMM_BLOCK_COLUMNS=7"},
    {"CUDA_CPU_ORDER", "reverse", 0, "CUDA_CPU_ORDER=1"},
};

// `test_device switch NAME` with NAME=VALUE in its environment: its exit status, and its stdout and
// stderr together in *out
static int run_with_switch(const SwitchCase& c, std::string* out) {
    char self[512], cmd[1024];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    self[len > 0 ? len : 0] = '\0';
    snprintf(cmd, sizeof(cmd), "%s='%s' '%s' switch %s 2>&1", c.name, c.value, self, c.name);
    FILE* pipe = popen(cmd, "r");
    if (pipe == NULL) { perror("popen"); exit(1); }
    char chunk[512];
    out->clear();
    for (size_t got; (got = fread(chunk, 1, sizeof(chunk), pipe)) > 0;) { out->append(chunk, got); }
    const int status = pclose(pipe);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void check_switches(void) {
    for (const SwitchCase& c : SWITCH_CASES) {
        std::string out;
        const int status = run_with_switch(c, &out);
        char what[512];
        snprintf(what, sizeof(what), "%s='%s': exit %d (want %d), wrote \"%s\" (want \"%s\\n\")", c.name, c.value, status,
                 c.status, out.c_str(), c.line);
        check(status == c.status && out == std::string(c.line) + "\n", what);
    }
}

// the child's side: start the runtime (it reads every switch), then print the one asked for
static int print_switch(const char* name) {
    float* d = device_alloc<float>(1);
    printf("%s=%lld\n", name, cuda_cpu_switch(name));
    cudaFree(d);
    return 0;
}

// ----------------------------------------------------------------------------

int main(int argc, char** argv) {
    if (argc == 3 && strcmp(argv[1], "switch") == 0) { return print_switch(argv[2]); }
    if (argc > 1) { return run_defect(argv[1]); }

    // grid and block coordinates
    {
        dim3 grid(3, 2, 2), block(4, 3, 2);
        int n = 3 * 2 * 2 * 4 * 3 * 2;
        int* d = device_alloc<int>(4 * n);
        coordinates_kernel<<<grid, block>>>(d);
        check(cudaGetLastError() == cudaSuccess, "coordinates launch");
        int* h = (int*)malloc(4 * n * sizeof(int));
        download(h, d, 4 * n);
        int ok = 1;
        for (int bz = 0; bz < 2; bz++) for (int by = 0; by < 2; by++) for (int bx = 0; bx < 3; bx++)
        for (int tz = 0; tz < 2; tz++) for (int ty = 0; ty < 3; ty++) for (int tx = 0; tx < 4; tx++) {
            int g = (bx + 3 * (by + 2 * bz)) * 24 + tx + 4 * (ty + 3 * tz);
            ok &= h[4 * g] == tx + 100 * ty + 10000 * tz && h[4 * g + 1] == bx + 100 * by + 10000 * bz;
            ok &= h[4 * g + 2] == 4 + 300 + 20000 && h[4 * g + 3] == 3 + 200 + 20000;
        }
        check(ok, "threadIdx/blockIdx/blockDim/gridDim in a 3-D grid of 3-D blocks");
        free(h);
        cudaFree(d);
    }
    // shared memory and __syncthreads
    {
        const int blocks = 5, threads = 1024;
        float* h = (float*)malloc(blocks * threads * sizeof(float));
        for (int i = 0; i < blocks * threads; i++) { h[i] = (float)(i % 17); }
        float* d_in = device_alloc<float>(blocks * threads);
        float* d_out = device_alloc<float>(blocks);
        upload(d_in, h, blocks * threads);
        shared_tree_sum_kernel<<<blocks, threads>>>(d_out, d_in);
        float out[blocks];
        download(out, d_out, blocks);
        int ok = 1;
        for (int b = 0; b < blocks; b++) {
            float ref = 0.0f;
            for (int t = 0; t < threads; t++) { ref += h[b * threads + t]; }
            ok &= out[b] == ref;
        }
        check(ok, "shared-memory tree reduction over 1024 threads with __syncthreads");
        int hi[256], ho[256];
        for (int i = 0; i < 256; i++) { hi[i] = 3 * i + 1; }
        int* di = device_alloc<int>(256);
        int* dout = device_alloc<int>(256);
        upload(di, hi, 256);
        shared_reverse_kernel<<<1, 256>>>(dout, di);
        download(ho, dout, 256);
        ok = 1;
        for (int i = 0; i < 256; i++) { ok &= ho[i] == hi[255 - i]; }
        check(ok, "shared-memory reversal (each thread reads another's write)");
        free(h);
        cudaFree(d_in); cudaFree(d_out); cudaFree(di); cudaFree(dout);
    }
    // dynamic shared memory, per block
    {
        const int blocks = 3, threads = 512;
        int* hi = (int*)malloc(blocks * threads * sizeof(int));
        int* ho = (int*)malloc(blocks * threads * sizeof(int));
        for (int i = 0; i < blocks * threads; i++) { hi[i] = 7 * i + 3; }
        int* di = device_alloc<int>(blocks * threads);
        int* dout = device_alloc<int>(blocks * threads);
        upload(di, hi, blocks * threads);
        dynamic_reverse_kernel<<<blocks, threads, threads * sizeof(int)>>>(dout, di);
        download(ho, dout, blocks * threads);
        int ok = 1;
        for (int b = 0; b < blocks; b++) {
            for (int t = 0; t < threads; t++) { ok &= ho[b * threads + t] == hi[b * threads + threads - 1 - t]; }
        }
        check(ok, "extern __shared__: dynamic shared memory per block, sized by the launch");
        dynamic_reverse_kernel<<<1, 32, 64 * 1024>>>(dout, di);
        check(cudaGetLastError() == cudaErrorInvalidConfiguration, "64 KiB of dynamic shared memory without the opt-in is refused");
        free(hi); free(ho);
        cudaFree(di); cudaFree(dout);
    }
    // static __shared__: per block, and NaN (0xFF bytes) at every block's start, whichever worker runs it
    {
        const int blocks = 40, threads = 64;
        float* d = device_alloc<float>(blocks * threads);
        block_broadcast_kernel<<<blocks, threads>>>(d);
        float* h = (float*)malloc(blocks * threads * sizeof(float));
        download(h, d, blocks * threads);
        int ok = 1;
        for (int i = 0; i < blocks * threads; i++) { ok &= h[i] == 10.0f * (i / threads) + (i % threads); }
        check(ok, "static __shared__ written by one thread is read by its whole block, in 40 blocks");
        unsigned int* d_start = device_alloc<unsigned int>(blocks);
        shared_at_block_start_kernel<<<blocks, 32>>>(d_start);
        unsigned int start[blocks];
        download(start, d_start, blocks);
        ok = 1;
        for (int b = 0; b < blocks; b++) { ok &= start[b] == 0xFFFFFFFFu; }
        check(ok, "static __shared__ holds 0xFF bytes at every block's start, not the previous block's values");
        free(h);
        cudaFree(d); cudaFree(d_start);
    }
    // shared memory ordered by __syncwarp (full and partial masks) and __syncthreads: no race reported
    {
        float* d = device_alloc<float>(64);
        ordered_exchange_kernel<<<1, 64>>>(d);
        float h[64];
        download(h, d, 64);
        int ok = 1;
        for (int t = 0; t < 64; t++) {
            const int lane = t % 32, base = t - lane;
            float partner = (float)(base + (lane ^ 1));
            if (lane < 16) { partner += (float)(base + ((lane ^ 2) ^ 1)); }
            const int u = 63 - t, ulane = u % 32, ubase = u - ulane;
            ok &= h[t] == partner + (float)(ubase + (ulane ^ 1));
        }
        check(ok, "lanes exchanging through shared memory with __syncwarp (full and partial mask) and __syncthreads");
        cudaFree(d);
    }
    // stream order: work waits for the event it is told to wait for, and only then runs
    {
        float* d = device_alloc<float>(128);
        cudaStream_t a, b;
        cudaEvent_t written;
        CHECK_CUDA(cudaStreamCreate(&a));
        CHECK_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
        CHECK_CUDA(cudaEventCreateWithFlags(&written, cudaEventDisableTiming));
        write_kernel<<<1, 64, 0, a>>>(d);
        CHECK_CUDA(cudaEventRecord(written, a));
        CHECK_CUDA(cudaStreamWaitEvent(b, written, 0));
        CHECK_CUDA(cudaMemcpyAsync(d + 64, d, 64 * sizeof(float), cudaMemcpyDeviceToDevice, b));
        check(cudaEventQuery(written) == cudaErrorNotReady, "an event recorded behind pending work is not ready before a synchronize");
        CHECK_CUDA(cudaStreamSynchronize(b));
        check(cudaEventQuery(written) == cudaSuccess, "synchronizing the waiting stream runs the work it waits for");
        float h[128];
        download(h, d, 128);
        int ok = 1;
        for (int i = 0; i < 128; i++) { ok &= h[i] == 1.0f; }
        check(ok, "a copy on a non-blocking stream after cudaStreamWaitEvent sees the kernel's writes");
        cudaFree(d);
    }
    // warp shuffles, with widths 32, 16 and 8, in full warps and in a partial last warp (48 threads)
    {
        const int widths[3] = {32, 16, 8};
        for (int threads = 32; threads <= 48; threads += 16) {
            for (int wi = threads == 32 ? 0 : 1; wi < 3; wi++) {  // a 16-lane warp: widths <= 16 only
                int width = widths[wi];
                int* d = device_alloc<int>(4 * threads);
                shuffle_kernel<<<1, threads>>>(d, width);
                int* h = (int*)malloc(4 * threads * sizeof(int));
                download(h, d, 4 * threads);
                int ok = 1;
                for (int t = 0; t < threads; t++) {
                    int lane = t % 32, seg = lane & ~(width - 1);
                    int src_xor = lane ^ (5 % width);
                    int src_down = lane + 3 < seg + width ? lane + 3 : lane;
                    int src_up = lane - 2 >= seg ? lane - 2 : lane;
                    int src_idx = seg + 6 % width;
                    ok &= h[4 * t + 0] == 1000 * src_xor + 7;
                    ok &= h[4 * t + 1] == 1000 * src_down + 7;
                    ok &= h[4 * t + 2] == 1000 * src_up + 7;
                    ok &= h[4 * t + 3] == 1000 * src_idx + 7;
                }
                char what[128];
                snprintf(what, sizeof(what), "__shfl_xor/down/up/sync lanes, width %d, %d threads", width, threads);
                check(ok, what);
                free(h);
                cudaFree(d);
            }
        }
    }
    // votes
    {
        unsigned* d = device_alloc<unsigned>(3 * 64);
        vote_kernel<<<1, 64>>>(d);
        unsigned h[3 * 64];
        download(h, d, 3 * 64);
        unsigned ballot = 0;
        for (int l = 0; l < 32; l += 3) { ballot |= 1u << l; }
        int ok = 1;
        for (int t = 0; t < 64; t++) { ok &= h[3 * t] == ballot && h[3 * t + 1] == 1 && h[3 * t + 2] == 1; }
        check(ok, "__ballot_sync, __all_sync, __any_sync");
        cudaFree(d);
    }
    // atomics across blocks that run on several worker threads
    {
        int* counter = device_alloc<int>(1);
        float* fsum = device_alloc<float>(1);
        CHECK_CUDA(cudaMemset(counter, 0, sizeof(int)));
        CHECK_CUDA(cudaMemset(fsum, 0, sizeof(float)));
        atomic_count_kernel<<<200, 128>>>(counter, fsum);
        int c;
        float s;
        download(&c, counter, 1);
        download(&s, fsum, 1);
        check(c == 200 * 128 && s == 0.5f * 200 * 128, "atomicAdd (int, float) over 200 blocks");
        cudaFree(counter); cudaFree(fsum);
    }
    // bf16: round to nearest even, bit for bit; NaN -> 0x7FFF; exact conversion back
    {
        const int n = 1 << 16;
        float* h = (float*)malloc(n * sizeof(float));
        uint32_t s = 12345;
        for (int i = 0; i < n; i++) {
            s = s * 1664525u + 1013904223u;
            uint32_t bits = s;
            if (i % 4 == 1) { bits = (bits & 0xFFFF0000u) | 0x8000u; }           // exact ties
            if (i % 4 == 2) { bits = (bits & 0xFFFF0000u) | (0x7FFFu + (i & 2)); }  // just below / above a tie
            memcpy(&h[i], &bits, 4);
        }
        const float specials[6] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 1e-40f};
        for (int k = 0; k < 6; k++) { h[k] = specials[k]; }
        float* d_in = device_alloc<float>(n);
        float* d_back = device_alloc<float>(n);
        __nv_bfloat16* d_out = device_alloc<__nv_bfloat16>(n);
        upload(d_in, h, n);
        bf16_convert_kernel<<<n / 256, 256>>>(d_out, d_back, d_in, n);
        uint16_t* bits = (uint16_t*)malloc(n * sizeof(uint16_t));
        float* back = (float*)malloc(n * sizeof(float));
        CHECK_CUDA(cudaMemcpy(bits, d_out, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
        download(back, d_back, n);
        int ok = 1, ok_back = 1;
        for (int i = 0; i < n; i++) {
            uint16_t want = isnan(h[i]) ? (uint16_t)0x7FFF : bf16_bits_round_nearest(h[i]);
            ok &= bits[i] == want;
            float exact = bf16_bits_to_float(bits[i]);
            ok_back &= memcmp(&exact, &back[i], 4) == 0;
        }
        check(ok, "__float2bfloat16: round to nearest even, bit for bit (65536 values, ties, inf, NaN, subnormal)");
        check(ok_back, "__bfloat162float: exact");
        free(h); free(bits); free(back);
        cudaFree(d_in); cudaFree(d_back); cudaFree(d_out);
    }
    // the runtime refuses what a GPU refuses
    {
        float* d = device_alloc<float>(16);
        float host[16] = {0};
        check(cudaMemcpy(d, host, 17 * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess, "a copy past the end of an allocation is refused");
        check(cudaMemcpy(host, d, 16 * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess, "HostToDevice with a host destination is refused");
        check(cudaMemcpy(d, host, 16 * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess, "DeviceToHost with a host source is refused");
        check(cudaMemset(host, 0, sizeof(host)) != cudaSuccess, "cudaMemset of host memory is refused");
        check(cudaFree(host) != cudaSuccess, "cudaFree of a host pointer is refused");
        check(cudaFree(d + 1) != cudaSuccess, "cudaFree of an offset pointer is refused");
        write_kernel<<<1, 2048>>>(d);
        check(cudaGetLastError() == cudaErrorInvalidConfiguration, "a block of 2048 threads is refused at launch");
        write_kernel<<<dim3(1, 70000), 32>>>(d);
        check(cudaGetLastError() == cudaErrorInvalidConfiguration, "a grid of 70000 in y is refused at launch");
        check(cudaGetLastError() == cudaSuccess, "cudaGetLastError clears the error");
        cudaEvent_t a, b;
        CHECK_CUDA(cudaEventCreateWithFlags(&a, cudaEventDisableTiming));
        CHECK_CUDA(cudaEventCreate(&b));
        CHECK_CUDA(cudaEventRecord(a));
        CHECK_CUDA(cudaEventRecord(b));
        float ms;
        check(cudaEventElapsedTime(&ms, a, b) != cudaSuccess, "cudaEventElapsedTime refuses an event without timing");
        cudaFree(d);
    }
    check_switches();
    printf("test_device: %d passed, %d failed\n", passed, failed);
    return failed == 0 ? 0 : 1;
}
