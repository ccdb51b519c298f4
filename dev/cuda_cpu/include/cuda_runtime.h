/*
dev/cuda_cpu/include/cuda_runtime.h: the CUDA runtime API on the CPU (the part llmc calls).

This is test scaffolding, not the product: it lets `make test-cuda-cpu` compile llmc's unmodified
CUDA sources with the host C++ compiler and execute every kernel on the CPU (dev/cuda_cpu/README.md).

Device memory is kept apart from host memory: every cudaMalloc is its own mapping with an
inaccessible page right after its end, a registry knows every allocation, and memcpy/memset, kernel
arguments, cuBLAS and NCCL calls are checked against it (a host pointer given where device memory
is expected is reported, as is a copy that runs past an allocation). Streams are executed in issue
order as they are called (everything is synchronous), which is one legal schedule of CUDA's.
*/
#ifndef CUDA_CPU_CUDA_RUNTIME_H
#define CUDA_CPU_CUDA_RUNTIME_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <functional>
#include <initializer_list>
#include "library_types.h"

typedef enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchOutOfResources = 701,
    cudaErrorLaunchFailure = 719,
} cudaError_t;

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

struct uint3 { unsigned int x, y, z; };
struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(16) int4 { int x, y, z, w; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct alignas(16) float4 { float x, y, z, w; };
struct alignas(8) int2 { int x, y; };
struct alignas(8) float2 { float x, y; };
static inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return uint4{x, y, z, w}; }
static inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return int2{x, y}; }
static inline float2 make_float2(float x, float y) { return float2{x, y}; }

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    size_t sharedMemPerBlockOptin;
    size_t sharedMemPerMultiprocessor;
    int regsPerBlock;
    int warpSize;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int major;
    int minor;
    int multiProcessorCount;
    int maxThreadsPerMultiProcessor;
    int l2CacheSize;
    int clockRate;
    int memoryClockRate;
    int memoryBusWidth;
};

// ----------------------------------------------------------------------------
// runtime API

cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
template <class T> static inline cudaError_t cudaMalloc(T** ptr, size_t bytes) { return cudaMalloc((void**)ptr, bytes); }
template <class T> static inline cudaError_t cudaMallocHost(T** ptr, size_t bytes) { return cudaMallocHost((void**)ptr, bytes); }

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceReset(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value);
template <class F> static inline cudaError_t cudaFuncSetAttribute(F* func, enum cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void*)func, attr, value);
}

// ----------------------------------------------------------------------------
// for the emulated libraries (cuBLAS, NCCL) and tests: the device-memory registry

// 1 when [ptr, ptr + bytes) lies inside one live cudaMalloc allocation
int cuda_cpu_is_device_range(const void* ptr, size_t bytes);
// dies with one line naming `what` unless [ptr, ptr + bytes) lies inside one live device allocation
void cuda_cpu_check_device_range(const void* ptr, size_t bytes, const char* what);
// the same, for an operation that reads the range (initcheck: dies when part of it was never written
// since cudaMalloc) or writes it (it counts as written from now on)
void cuda_cpu_device_reads(const void* ptr, size_t bytes, const char* what);
void cuda_cpu_device_writes(void* ptr, size_t bytes, const char* what);
// issues work to a stream: it runs in stream order (runtime.cpp; at once with CUDA_CPU_STREAM_ORDER=0);
// uses: the device memory it reads or writes (bytes 0: an extent not known, as for a kernel's pointers)
struct CudaCpuUse {
    const void* ptr;
    int writes;
    size_t bytes;
};
void cuda_cpu_enqueue(cudaStream_t stream, const char* what, std::initializer_list<CudaCpuUse> uses, std::function<void()> work);
// prints "cuda_cpu: <message>" (one line) and exits 1: a defect the GPU would show as a fault or a hang
void cuda_cpu_fatal(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// prints "cuda_cpu: <message>" (one line) and returns: why a call that fails on a GPU too was refused
// (the runtime, cuBLAS and NCCL each wrap it in their own fail(), which returns their error code)
void cuda_cpu_report(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// the value of a CUDA_CPU_* switch (the table in runtime.cpp: its default when unset); a value the
// switch does not take ends the program with one line naming the variable, the value and what it takes
long long cuda_cpu_switch(const char* name);

#include "cuda_cpu_device.h"

#endif // CUDA_CPU_CUDA_RUNTIME_H
