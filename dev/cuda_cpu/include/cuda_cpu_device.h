/*
dev/cuda_cpu/include/cuda_cpu_device.h: the CUDA device language on the CPU (included by cuda_runtime.h).

A kernel launch runs the real grid and block: the blocks are spread over a few worker threads, and
inside a block every CUDA thread is a fiber with its own stack. A fiber runs until it reaches a
barrier (__syncthreads, or a warp collective: shuffles, votes, __syncwarp) and waits there until
every thread that must arrive has arrived, so shared memory and shuffles behave as on the GPU, and a
barrier that some thread skips is reported (deadlock or divergence), never passed.

    threadIdx, blockIdx, blockDim, gridDim, warpSize
    __shared__ variables      one copy per worker thread, i.e. per block being run
    extern __shared__         the launch's dynamic shared memory, per block, filled with 0xFF (NaN)
    __syncthreads, __syncwarp, __shfl[_up|_down|_xor]_sync, __ballot_sync, __all_sync, __any_sync
    atomics                   real atomics (blocks of one kernel run in parallel)
    __ldcs/__stcs & co        plain loads and stores (cache hints have no meaning here)

Launches: dev/cuda_cpu/translate.py rewrites `kernel<<<grid, block, shared, stream>>>(args)` into a
call of cuda_cpu_launch below; the CUDA sources themselves are not changed.
*/
#ifndef CUDA_CPU_DEVICE_H
#define CUDA_CPU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __constant__
#define __managed__
#define __shared__ static thread_local

// ----------------------------------------------------------------------------
// the executing thread and block

struct CudaCpuThread {
    uint3 idx;
};
extern __thread CudaCpuThread* cuda_cpu_thread;
extern __thread uint3 cuda_cpu_block_idx;
extern __thread uint3 cuda_cpu_block_dim;
extern __thread uint3 cuda_cpu_grid_dim;
#define threadIdx (cuda_cpu_thread->idx)
#define blockIdx (cuda_cpu_block_idx)
#define blockDim (cuda_cpu_block_dim)
#define gridDim (cuda_cpu_grid_dim)
static constexpr int warpSize = 32;

// ----------------------------------------------------------------------------
// barriers and warp collectives (dev/cuda_cpu/runtime.cpp)

// what `extern __shared__ T name[];` becomes (translate.py): this block's dynamic shared memory
void* cuda_cpu_dynamic_shared(void);

void __syncthreads(void);
int __syncthreads_count(int predicate);
int __syncthreads_and(int predicate);
int __syncthreads_or(int predicate);
void __syncwarp(unsigned int mask = 0xFFFFFFFFu);
unsigned int __ballot_sync(unsigned int mask, int predicate);
int __all_sync(unsigned int mask, int predicate);
int __any_sync(unsigned int mask, int predicate);
unsigned int __activemask(void);
void __threadfence(void);
void __threadfence_block(void);

enum { CUDA_CPU_SHFL_IDX = 0, CUDA_CPU_SHFL_UP, CUDA_CPU_SHFL_DOWN, CUDA_CPU_SHFL_XOR };
uint64_t cuda_cpu_shfl(unsigned int mask, uint64_t bits, int op, int arg, int width, const char* what);

template <class T>
static inline T cuda_cpu_shfl_typed(unsigned int mask, T value, int op, int arg, int width, const char* what) {
    static_assert(sizeof(T) <= 8, "warp shuffles move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &value, sizeof(T));
    bits = cuda_cpu_shfl(mask, bits, op, arg, width, what);
    T out;
    memcpy(&out, &bits, sizeof(T));
    return out;
}
template <class T> static inline T __shfl_sync(unsigned int mask, T v, int src_lane, int width = 32) {
    return cuda_cpu_shfl_typed(mask, v, CUDA_CPU_SHFL_IDX, src_lane, width, "__shfl_sync");
}
template <class T> static inline T __shfl_up_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    return cuda_cpu_shfl_typed(mask, v, CUDA_CPU_SHFL_UP, (int)delta, width, "__shfl_up_sync");
}
template <class T> static inline T __shfl_down_sync(unsigned int mask, T v, unsigned int delta, int width = 32) {
    return cuda_cpu_shfl_typed(mask, v, CUDA_CPU_SHFL_DOWN, (int)delta, width, "__shfl_down_sync");
}
template <class T> static inline T __shfl_xor_sync(unsigned int mask, T v, int lane_mask, int width = 32) {
    return cuda_cpu_shfl_typed(mask, v, CUDA_CPU_SHFL_XOR, lane_mask, width, "__shfl_xor_sync");
}

// ----------------------------------------------------------------------------
// atomics (relaxed, like CUDA's)

template <class T, class F> static inline T cuda_cpu_atomic_update(T* address, F f) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "atomics on 4- and 8-byte values");
    typedef typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type Bits;
    Bits* word = (Bits*)address;
    Bits old = __atomic_load_n(word, __ATOMIC_RELAXED);
    for (;;) {
        T cur;
        memcpy(&cur, &old, sizeof(T));
        T next_value = f(cur);
        Bits next;
        memcpy(&next, &next_value, sizeof(T));
        if (__atomic_compare_exchange_n(word, &old, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) { return cur; }
    }
}
static inline float atomicAdd(float* a, float v) { return cuda_cpu_atomic_update(a, [v](float x) { return x + v; }); }
static inline double atomicAdd(double* a, double v) { return cuda_cpu_atomic_update(a, [v](double x) { return x + v; }); }
static inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }
static inline unsigned int atomicAdd(unsigned int* a, unsigned int v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }
static inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) { return __atomic_fetch_add(a, v, __ATOMIC_RELAXED); }
static inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
static inline unsigned int atomicSub(unsigned int* a, unsigned int v) { return __atomic_fetch_sub(a, v, __ATOMIC_RELAXED); }
static inline int atomicMax(int* a, int v) { return cuda_cpu_atomic_update(a, [v](int x) { return x > v ? x : v; }); }
static inline unsigned int atomicMax(unsigned int* a, unsigned int v) { return cuda_cpu_atomic_update(a, [v](unsigned int x) { return x > v ? x : v; }); }
static inline int atomicMin(int* a, int v) { return cuda_cpu_atomic_update(a, [v](int x) { return x < v ? x : v; }); }
static inline unsigned int atomicMin(unsigned int* a, unsigned int v) { return cuda_cpu_atomic_update(a, [v](unsigned int x) { return x < v ? x : v; }); }
static inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }
static inline unsigned int atomicExch(unsigned int* a, unsigned int v) { return __atomic_exchange_n(a, v, __ATOMIC_RELAXED); }
static inline float atomicExch(float* a, float v) { return cuda_cpu_atomic_update(a, [v](float) { return v; }); }
template <class T> static inline T cuda_cpu_atomic_cas(T* a, T compare, T v) {
    __atomic_compare_exchange_n(a, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;  // the old value whether or not the swap happened
}
static inline int atomicCAS(int* a, int c, int v) { return cuda_cpu_atomic_cas(a, c, v); }
static inline unsigned int atomicCAS(unsigned int* a, unsigned int c, unsigned int v) { return cuda_cpu_atomic_cas(a, c, v); }
static inline unsigned long long atomicCAS(unsigned long long* a, unsigned long long c, unsigned long long v) { return cuda_cpu_atomic_cas(a, c, v); }
static inline unsigned int atomicAnd(unsigned int* a, unsigned int v) { return __atomic_fetch_and(a, v, __ATOMIC_RELAXED); }
static inline unsigned int atomicOr(unsigned int* a, unsigned int v) { return __atomic_fetch_or(a, v, __ATOMIC_RELAXED); }
static inline unsigned int atomicXor(unsigned int* a, unsigned int v) { return __atomic_fetch_xor(a, v, __ATOMIC_RELAXED); }

// ----------------------------------------------------------------------------
// loads and stores with cache hints

template <class T> static inline T __ldg(const T* p) { return *p; }
template <class T> static inline T __ldcs(const T* p) { return *p; }
template <class T> static inline T __ldcg(const T* p) { return *p; }
template <class T> static inline T __ldca(const T* p) { return *p; }
template <class T> static inline T __ldlu(const T* p) { return *p; }
template <class T> static inline T __ldcv(const T* p) { return *p; }
template <class T> static inline void __stcs(T* p, T v) { *p = v; }
template <class T> static inline void __stcg(T* p, T v) { *p = v; }
template <class T> static inline void __stwb(T* p, T v) { *p = v; }
template <class T> static inline void __stwt(T* p, T v) { *p = v; }

// ----------------------------------------------------------------------------
// math intrinsics: the accurate functions (the GPU's fast ones differ in the last bits);
// __expf, __logf, __sinf & co are glibc's own functions of those names

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __fdividef(float x, float y) { return x / y; }
static inline float __frcp_rn(float x) { return 1.0f / x; }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
static inline float __fadd_rn(float x, float y) { return x + y; }
static inline float __fmul_rn(float x, float y) { return x * y; }
static inline float __fmaf_rn(float x, float y, float z) { return fmaf(x, y, z); }
static inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : (x == x ? x : 0.0f)); }
static inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
static inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
static inline unsigned int __float_as_uint(float x) { unsigned int i; memcpy(&i, &x, 4); return i; }
static inline float __uint_as_float(unsigned int i) { float x; memcpy(&x, &i, 4); return x; }
static inline int __float2int_rn(float x) { return (int)lrintf(x); }
static inline int __popc(unsigned int x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned int)x); }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned int __brev(unsigned int x) {
    unsigned int r = 0;
    for (int i = 0; i < 32; i++) { r |= ((x >> i) & 1u) << (31 - i); }
    return r;
}
// CUDA's global min/max overloads
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
static inline unsigned int max(unsigned int a, unsigned int b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
static inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

// ----------------------------------------------------------------------------
// kernel launches (what translate.py turns `<<<...>>>` into)

struct CudaCpuLaunchConfig {
    dim3 grid;
    dim3 block;
    size_t shared_bytes;
    cudaStream_t stream;
};
static inline CudaCpuLaunchConfig cuda_cpu_config(dim3 grid, dim3 block, size_t shared_bytes = 0, cudaStream_t stream = 0) {
    CudaCpuLaunchConfig c = {grid, block, shared_bytes, stream};
    return c;
}

// the pointer arguments of a launch, checked against the device-memory registry before it runs
#define CUDA_CPU_MAX_POINTER_ARGS 32
struct CudaCpuArgs {
    int count;
    int index[CUDA_CPU_MAX_POINTER_ARGS];
    const void* ptr[CUDA_CPU_MAX_POINTER_ARGS];
};
template <class T> static inline void cuda_cpu_note_arg(CudaCpuArgs* args, int* position, const T& value) {
    if constexpr (std::is_pointer<typename std::decay<T>::type>::value) {
        if (args->count < CUDA_CPU_MAX_POINTER_ARGS) {
            args->index[args->count] = *position;
            args->ptr[args->count] = (const void*)value;
            args->count++;
        }
    }
    (*position)++;
}
template <class... A> static inline CudaCpuArgs cuda_cpu_args(const A&... values) {
    CudaCpuArgs args;
    args.count = 0;
    int position = 0;
    (cuda_cpu_note_arg(&args, &position, values), ...);
    (void)position;
    return args;
}

void cuda_cpu_run_kernel(const CudaCpuLaunchConfig& config, const char* name, const char* file, int line,
                         const CudaCpuArgs& args, void (*invoke)(void*), void* body);

// body: a closure that calls the kernel with its arguments; every CUDA thread of the grid runs it
template <class F>
static inline void cuda_cpu_launch(CudaCpuLaunchConfig config, const char* name, const char* file, int line,
                                   const CudaCpuArgs& args, F body) {
    cuda_cpu_run_kernel(config, name, file, line, args, [](void* b) { (*(F*)b)(); }, (void*)&body);
}

#endif // CUDA_CPU_DEVICE_H
