/*
llmc/cuda/cuda_common.cuh: what every GPU file of llmc needs.

    cudaCheck(call)            a failed CUDA call dies with ONE line naming the call site
    floatX                     the activation/parameter type: bf16 (PRECISION=BF16) or float (FP32)
    Packed128<T>               16-byte vector loads and stores (x128 = Packed128<floatX>)
    warp_reduce_sum/max        warp-level reductions; block_reduce_sum for a whole block
    residual_add_row           a warp's row of residual = inp1 + inp2 (the fused residual + norm kernels)
    stochastic_round           float -> floatX, bf16 via llmc/bf16.h's shared rounding rule

The precision is chosen at build time (make PRECISION=BF16|FP32); FP16 is refused at build time
because it needs loss scaling, which llmc does not implement.
*/
#ifndef LLMC_CUDA_COMMON_CUH
#define LLMC_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "../utils.h"
#include "../layer_math.h"
#include "../bf16.h"

// ----------------------------------------------------------------------------
// error checking: one line, then exit(1)

static inline void cuda_check(cudaError_t err, const char* what, const char* file, int line) {
    if (err != cudaSuccess) {
        llmc_die("CUDA: %s failed: %s (%s:%d)", what, cudaGetErrorString(err), file, line);
    }
}
#define cudaCheck(call) cuda_check((call), #call, __FILE__, __LINE__)

// after a kernel launch: catches bad launch configurations at the call site
#define cudaCheckLaunch() cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline void* cuda_malloc_check(size_t bytes, const char* file, int line) {
    void* ptr = NULL;
    cudaError_t err = cudaMalloc(&ptr, bytes > 0 ? bytes : 1);
    if (err != cudaSuccess) {
        llmc_die("CUDA: cannot allocate %zu bytes (%.2f GiB) of GPU memory: %s (%s:%d)",
                 bytes, (double)bytes / (1024.0 * 1024.0 * 1024.0), cudaGetErrorString(err), file, line);
    }
    return ptr;
}
#define cudaMallocCheck(bytes) cuda_malloc_check((bytes), __FILE__, __LINE__)

// ----------------------------------------------------------------------------
// precision

#if defined(LLMC_BAD_PRECISION) || defined(ENABLE_FP16)
#error "llmc: PRECISION must be BF16 or FP32 (FP16 needs loss scaling, which llmc does not implement)"
#endif

#if defined(ENABLE_FP32)
typedef float floatX;
#define PRECISION_NAME "FP32"
#define PRECISION_IS_BF16 0
#else
#ifndef ENABLE_BF16
#define ENABLE_BF16
#endif
typedef __nv_bfloat16 floatX;
#define PRECISION_NAME "BF16"
#define PRECISION_IS_BF16 1
#endif

#define WARP_SIZE 32
static inline int ceil_div(size_t a, size_t b) { return (int)((a + b - 1) / b); }

// floatX <-> float, usable in templates and on the host side of the trainer
__host__ __device__ static inline float to_float(float x) { return x; }
__host__ __device__ static inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// host-side conversions between the device parameter type and fp32 (round to nearest even)
static inline void floatX_from_float_host(floatX* dst, const float* src, size_t n) {
    for (size_t i = 0; i < n; i++) {
#if PRECISION_IS_BF16
        __nv_bfloat16_raw raw;
        raw.x = bf16_bits_round_nearest(src[i]);
        dst[i] = __nv_bfloat16(raw);
#else
        dst[i] = src[i];
#endif
    }
}
static inline void float_from_floatX_host(float* dst, const floatX* src, size_t n) {
    for (size_t i = 0; i < n; i++) {
#if PRECISION_IS_BF16
        __nv_bfloat16_raw raw = (__nv_bfloat16_raw)src[i];
        dst[i] = bf16_bits_to_float(raw.x);
#else
        dst[i] = src[i];
#endif
    }
}

// ----------------------------------------------------------------------------
// 128-bit packed loads and stores

template <class T>
struct alignas(16) Packed128 {
    static constexpr int size = (int)(sizeof(int4) / sizeof(T));
    T payload[size];
    __device__ Packed128() {}
    __device__ explicit Packed128(int4 bits) { memcpy(&payload, &bits, sizeof(bits)); }
    __device__ static Packed128 zeros() {
        Packed128 p;
        for (int k = 0; k < size; k++) { p.payload[k] = (T)0.0f; }
        return p;
    }
    __device__ T& operator[](int index) { return payload[index]; }
    __device__ const T& operator[](int index) const { return payload[index]; }
    __device__ int4 get_bits() const {
        int4 bits;
        memcpy(&bits, &payload, sizeof(bits));
        return bits;
    }
};
typedef Packed128<float> f128;
typedef Packed128<floatX> x128;

template <class T>
__device__ static inline Packed128<T> load128(const T* address) {
    return Packed128<T>{*reinterpret_cast<const int4*>(address)};
}
// load with the "cache streaming" hint: data that is read once
template <class T>
__device__ static inline Packed128<T> load128cs(const T* address) {
    return Packed128<T>{__ldcs(reinterpret_cast<const int4*>(address))};
}
template <class T>
__device__ static inline void store128(T* target, Packed128<T> value) {
    *reinterpret_cast<int4*>(target) = value.get_bits();
}
template <class T>
__device__ static inline void store128cs(T* target, Packed128<T> value) {
    __stcs(reinterpret_cast<int4*>(target), value.get_bits());
}

// ----------------------------------------------------------------------------
// reductions

__device__ static inline float warp_reduce_sum(float val) {
    for (int offset = 16; offset > 0; offset /= 2) { val += __shfl_xor_sync(0xffffffff, val, offset); }
    return val;
}
__device__ static inline float warp_reduce_max(float val) {
    for (int offset = 16; offset > 0; offset /= 2) { val = fmaxf(val, __shfl_xor_sync(0xffffffff, val, offset)); }
    return val;
}
// sum over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// Fixed reduction order: deterministic run to run.
__device__ static inline float block_reduce_sum(float val) {
    __shared__ float shared_val[WARP_SIZE];
    __syncthreads();  // the shared buffer may still be read by a previous call
    const int lane = threadIdx.x % WARP_SIZE;
    const int warp = threadIdx.x / WARP_SIZE;
    const int num_warps = blockDim.x / WARP_SIZE;
    float warp_sum = warp_reduce_sum(val);
    if (lane == 0) { shared_val[warp] = warp_sum; }
    __syncthreads();
    float v = (lane < num_warps) ? shared_val[lane] : 0.0f;
    return warp_reduce_sum(v);
}

// one warp, one row of C values (the fused residual + norm kernels): residual = inp1 + inp2, rounded to
// floatX, then __syncwarp, so that the lanes go on to read the row as stored
__device__ static inline void residual_add_row(floatX* residual, const floatX* inp1, const floatX* inp2, int C, int lane) {
    for (int c = lane; c < C; c += WARP_SIZE) { residual[c] = (floatX)(to_float(inp1[c]) + to_float(inp2[c])); }
    __syncwarp();
}

// ----------------------------------------------------------------------------
// stochastic rounding (the rule itself lives in llmc/bf16.h, tested on the CPU)

__device__ static inline void stochastic_round(float in, float* out, uint32_t seed, uint32_t index) {
    (void)seed;
    (void)index;
    *out = in;
}
__device__ static inline void stochastic_round(float in, __nv_bfloat16* out, uint32_t seed, uint32_t index) {
    uint32_t random = llmc_hash_u32(index, seed);
    __nv_bfloat16_raw raw;
    raw.x = bf16_bits_stochastic_round(in, random);
    *out = __nv_bfloat16(raw);
}

// ----------------------------------------------------------------------------
// device properties the trainer needs once

typedef struct {
    int device;
    char name[256];
    int sm_count;
    int max_threads_per_sm;
    size_t total_memory;
    int major, minor;
} DeviceInfo;

static inline void device_info_query(DeviceInfo* info, int device) {
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, device));
    info->device = device;
    snprintf(info->name, sizeof(info->name), "%s", prop.name);
    info->sm_count = prop.multiProcessorCount;
    info->max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    info->total_memory = prop.totalGlobalMem;
    info->major = prop.major;
    info->minor = prop.minor;
}

#endif // LLMC_CUDA_COMMON_CUH
