/*
dev/cuda_cpu/include/library_types.h: the data-type enum shared by cuBLAS and the runtime, with
CUDA's numeric values (the CPU execution target of llmc's CUDA code; see dev/cuda_cpu/README.md).
*/
#ifndef CUDA_CPU_LIBRARY_TYPES_H
#define CUDA_CPU_LIBRARY_TYPES_H

// the types llmc names (fp32, bf16) and fp16, which the emulated cuBLAS refuses
typedef enum cudaDataType_t {
    CUDA_R_16F = 2,
    CUDA_R_32F = 0,
    CUDA_R_16BF = 14,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

#endif // CUDA_CPU_LIBRARY_TYPES_H
