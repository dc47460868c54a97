// Named barriers (bar.sync). Barrier 0 is the one __syncthreads() uses; the GEMM
// kernels take their ids from an enum so that no two roles share one by accident.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Blocks until `num_threads` threads (a multiple of 32, whole warps) have arrived at barrier `id`.
DMOE_DEVICE void named_barrier_sync(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

// Arrives at barrier `id` without waiting: with named_barrier_sync on the other side (the same
// `num_threads`, counting both sides) it is a one-way signal from the arriving warps to the waiting
// ones. Each arrival must be matched by one completed sync before the next arrival.
DMOE_DEVICE void named_barrier_arrive(uint32_t id, uint32_t num_threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(num_threads) : "memory");
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
