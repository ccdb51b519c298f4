/*
dev/cuda_cpu/include/cuda_cpu_device.h: the CUDA device language on the CPU (included by cuda_runtime.h).

A kernel launch runs the real grid and block: the blocks are spread over a few worker threads, and
inside a block every CUDA thread is a fiber with its own stack. A fiber runs until it reaches a
barrier (__syncthreads, or a warp collective: shuffles, votes, __syncwarp) and waits there until
every thread that must arrive has arrived, so shared memory and shuffles behave as on the GPU, and a
barrier that some thread skips is reported (deadlock or divergence), never passed.

    threadIdx, blockIdx, blockDim, gridDim, warpSize
    __shared__ variables      per block, filled with 0xFF (NaN) at every block's start
    extern __shared__         the launch's dynamic shared memory, per block, filled with 0xFF (NaN)
    initcheck                 a read of shared memory that no thread of the block wrote since the
                              block started is reported (CUDA_CPU_INITCHECK=0 turns it off)
    racecheck                 two threads' accesses of one shared byte, one a write, that no barrier
                              orders are reported (CUDA_CPU_RACECHECK=0 turns it off)
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
#include <tuple>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __constant__
#define __managed__

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
// shared memory (translate.py rewrites the declarations)
//
//     __shared__ float acc[8][32];   ->  static CudaCpuSharedSite cuda_cpu_site_acc = {"acc", __FILE__, __LINE__, -1};
//                                        CudaCpuSharedRef<float[8][32]> acc = cuda_cpu_static_shared<float[8][32]>(&cuda_cpu_site_acc);
//     extern __shared__ float buf[]; ->  CudaCpuSharedPtr<float> buf = cuda_cpu_dynamic_shared<float>();
//
// Each variable (and the extern arena) is storage of the block being run, filled with 0xFF at the
// block's start, with a shadow record per byte (runtime.cpp): which thread last wrote it and which
// threads read it since, with the barrier epoch and warp-collective count of each access. Elements
// are read and written through CudaCpuSharedRef, which checks the access against the variable's
// extent and hands it to cuda_cpu_shared_access, where
//   initcheck (CUDA_CPU_INITCHECK, default 1) reports a read of a byte no thread of the block wrote;
//   racecheck (CUDA_CPU_RACECHECK, default 1) reports two accesses of one byte by different threads,
//     at least one a write, that no __syncthreads orders and, within a warp, no warp collective
//     (shuffle, vote, __syncwarp) whose mask holds both lanes.
// Both verdicts depend on what the threads access, not on the order the fibers run in. A raw
// pointer taken from a variable (`&acc[i][j]`, `acc[i]` passed as a float*, a cast of the arena
// pointer) stops both checks for that variable for the rest of the block: accesses through raw
// pointers are not seen.

// one shared variable, or the extern arena, of the block being run
struct CudaCpuShadow;
struct CudaCpuShared {
    char* data;
    CudaCpuShadow* shadow;   // one record per byte of data (runtime.cpp)
    size_t bytes;
    int escaped;             // a raw pointer was taken: accesses are no longer checked
    const char* name;        // the variable's name; NULL for the extern arena
    const char* file;
    int line;
};
// a static __shared__ declaration (one per declaration site; id given by the runtime at first use)
struct CudaCpuSharedSite {
    const char* name;
    const char* file;
    int line;
    int id;
};

extern int cuda_cpu_initcheck;  // CUDA_CPU_INITCHECK (default 1), read once at the first launch
extern int cuda_cpu_racecheck;  // CUDA_CPU_RACECHECK (default 1), read once at the first launch
CudaCpuShared* cuda_cpu_static_shared_block(CudaCpuSharedSite* site, size_t bytes);
CudaCpuShared* cuda_cpu_dynamic_shared_block(void);
void cuda_cpu_shared_report(const CudaCpuShared* v, const void* p, size_t bytes) __attribute__((noreturn));
// an element access of bytes at offset off; not inlined: its return address is the access's place in the kernel
void cuda_cpu_shared_access(CudaCpuShared* v, size_t off, size_t bytes, int write) __attribute__((noinline));

#define CUDA_CPU_INLINE inline __attribute__((always_inline))
static CUDA_CPU_INLINE size_t cuda_cpu_shared_offset(const CudaCpuShared* v, const void* p, size_t bytes) {
    size_t off = (size_t)((const char*)p - v->data);  // below the start wraps to a huge offset
    if (off > v->bytes || bytes > v->bytes - off) { cuda_cpu_shared_report(v, p, bytes); }
    return off;
}
static CUDA_CPU_INLINE void cuda_cpu_shared_read(CudaCpuShared* v, const void* p, size_t bytes) {
    size_t off = cuda_cpu_shared_offset(v, p, bytes);
    if ((cuda_cpu_initcheck | cuda_cpu_racecheck) && !v->escaped) { cuda_cpu_shared_access(v, off, bytes, 0); }
}
static CUDA_CPU_INLINE void cuda_cpu_shared_write(CudaCpuShared* v, const void* p, size_t bytes) {
    size_t off = cuda_cpu_shared_offset(v, p, bytes);
    if ((cuda_cpu_initcheck | cuda_cpu_racecheck) && !v->escaped) { cuda_cpu_shared_access(v, off, bytes, 1); }
}

// a place in shared memory: an element (T a scalar or a struct) ...
template <class T> struct CudaCpuSharedRef {
    T* p;
    CudaCpuShared* v;
    CUDA_CPU_INLINE operator T() const {
        cuda_cpu_shared_read(v, p, sizeof(T));
        return *p;
    }
    CUDA_CPU_INLINE CudaCpuSharedRef& operator=(const T& x) {
        cuda_cpu_shared_write(v, p, sizeof(T));
        *p = x;
        return *this;
    }
    CudaCpuSharedRef& operator=(const CudaCpuSharedRef& o) { return *this = (T)o; }  // assigns the value, not the place
    template <class U> CudaCpuSharedRef& operator+=(const U& x) { T t = *this; t += x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator-=(const U& x) { T t = *this; t -= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator*=(const U& x) { T t = *this; t *= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator/=(const U& x) { T t = *this; t /= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator%=(const U& x) { T t = *this; t %= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator&=(const U& x) { T t = *this; t &= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator|=(const U& x) { T t = *this; t |= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator^=(const U& x) { T t = *this; t ^= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator<<=(const U& x) { T t = *this; t <<= x; return *this = t; }
    template <class U> CudaCpuSharedRef& operator>>=(const U& x) { T t = *this; t >>= x; return *this = t; }
    CudaCpuSharedRef& operator++() { T t = *this; ++t; return *this = t; }
    CudaCpuSharedRef& operator--() { T t = *this; --t; return *this = t; }
    T operator++(int) { T t = *this; T u = t; ++u; *this = u; return t; }
    T operator--(int) { T t = *this; T u = t; --u; *this = u; return t; }
    T* operator&() const {  // a raw pointer: from here on the variable's accesses are not seen
        v->escaped = 1;
        return p;
    }
};
// ... or an array, indexed down to its elements (a sub-array is held by a pointer to its first element)
template <class E> static inline auto cuda_cpu_shared_first(E* q) {
    if constexpr (std::is_array<E>::value) { return &(*q)[0]; } else { return q; }
}
template <class E, size_t N> struct CudaCpuSharedRef<E[N]> {
    E* p;
    CudaCpuShared* v;
    template <class I> CudaCpuSharedRef<E> operator[](I i) const {
        static_assert(std::is_integral<I>::value || std::is_enum<I>::value, "a shared array index must be an integer");
        return CudaCpuSharedRef<E>{cuda_cpu_shared_first(p + i), v};
    }
    operator E*() const {  // the array as a pointer: from here on the variable's accesses are not seen
        v->escaped = 1;
        return p;
    }
};

// the extern arena as a pointer to T
template <class T> struct CudaCpuSharedPtr {
    T* p;
    CudaCpuShared* v;
    template <class I> CudaCpuSharedRef<T> operator[](I i) const {
        static_assert(std::is_integral<I>::value || std::is_enum<I>::value, "a shared array index must be an integer");
        return CudaCpuSharedRef<T>{p + i, v};
    }
    CudaCpuSharedRef<T> operator*() const { return CudaCpuSharedRef<T>{p, v}; }
    template <class I> CudaCpuSharedPtr operator+(I i) const { return CudaCpuSharedPtr{p + i, v}; }
    template <class I> CudaCpuSharedPtr operator-(I i) const { return CudaCpuSharedPtr{p - i, v}; }
    ptrdiff_t operator-(const CudaCpuSharedPtr& o) const { return p - o.p; }
    template <class I> CudaCpuSharedPtr& operator+=(I i) { p += i; return *this; }
    template <class I> CudaCpuSharedPtr& operator-=(I i) { p -= i; return *this; }
    CudaCpuSharedPtr& operator++() { ++p; return *this; }
    CudaCpuSharedPtr& operator--() { --p; return *this; }
    bool operator==(const CudaCpuSharedPtr& o) const { return p == o.p; }
    bool operator!=(const CudaCpuSharedPtr& o) const { return p != o.p; }
    bool operator<(const CudaCpuSharedPtr& o) const { return p < o.p; }
    template <class U> operator U*() const {  // a raw pointer (a cast, a call): from here on the arena is not seen
        v->escaped = 1;
        return (U*)p;
    }
};

template <class T> static inline CudaCpuSharedRef<T> cuda_cpu_static_shared(CudaCpuSharedSite* site) {
    CudaCpuShared* v = cuda_cpu_static_shared_block(site, sizeof(T));
    typedef typename std::conditional<std::is_array<T>::value, typename std::remove_extent<T>::type, T>::type First;
    return CudaCpuSharedRef<T>{(First*)v->data, v};
}
template <class T> static inline CudaCpuSharedPtr<T> cuda_cpu_dynamic_shared(void) {
    CudaCpuShared* v = cuda_cpu_dynamic_shared_block();
    return CudaCpuSharedPtr<T>{(T*)v->data, v};
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
    int writes[CUDA_CPU_MAX_POINTER_ARGS];  // a pointer to non-const: the kernel may write through it
};
template <class T> static inline void cuda_cpu_note_arg(CudaCpuArgs* args, int* position, const T& value) {
    typedef typename std::decay<T>::type P;
    if constexpr (std::is_pointer<P>::value) {
        if (args->count < CUDA_CPU_MAX_POINTER_ARGS) {
            args->index[args->count] = *position;
            args->writes[args->count] = !std::is_const<typename std::remove_pointer<P>::type>::value;
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

// body(...) is called with the launch's argument values by every CUDA thread; owner keeps it (and
// the values) alive until the kernel has run, in stream order, and drop deletes it
void cuda_cpu_run_kernel(const CudaCpuLaunchConfig& config, const char* name, const char* file, int line,
                         const CudaCpuArgs& args, void (*invoke)(void*), void* owner, void (*drop)(void*));

// kernel: a generic lambda that calls the kernel with its arguments; the arguments are evaluated once,
// here, as in CUDA, and kept by value until the kernel runs
template <class F, class... A>
static inline void cuda_cpu_launch(CudaCpuLaunchConfig config, const char* name, const char* file, int line, F kernel,
                                   A&&... values) {
    auto body = [kernel, captured = std::make_tuple(values...)]() { std::apply(kernel, captured); };
    typedef decltype(body) Body;
    cuda_cpu_run_kernel(config, name, file, line, cuda_cpu_args(values...), [](void* b) { (*(Body*)b)(); },
                        new Body(std::move(body)), [](void* b) { delete (Body*)b; });
}

#endif // CUDA_CPU_DEVICE_H
