/*
llmc/host_device.h: HD marks a function that runs on the CPU and on the GPU: a plain static inline
function in C, __host__ __device__ under nvcc. The scalar rules the CPU code and the CUDA kernels
share (llmc/layer_math.h, llmc/adamw.h, llmc/bf16.h) use it, so both compute the same bits.
*/
#ifndef LLMC_HOST_DEVICE_H
#define LLMC_HOST_DEVICE_H

#ifdef __CUDACC__
#define HD __host__ __device__
#else
#define HD
#endif

#endif // LLMC_HOST_DEVICE_H
