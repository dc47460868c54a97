// Qualifiers that let one header serve both nvcc (kernels) and g++ (the CPU oracle, CI tests).
#pragma once

#if defined(__CUDACC__)
#define DMOE_HOST_DEVICE __host__ __device__ __forceinline__
#define DMOE_DEVICE __device__ __forceinline__
#else
#define DMOE_HOST_DEVICE inline
#endif
