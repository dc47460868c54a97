// Special-register reads (%globaltimer, %laneid), the shared-window address of a generic pointer
// and trap, as the device building blocks use them.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// 32-bit shared-window address of a generic pointer into shared memory (what every .shared
// instruction operand and the wgmma descriptors take).
DMOE_DEVICE uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Nanoseconds since an arbitrary origin; coarse (microsecond-class updates), for timeouts only.
DMOE_DEVICE uint64_t globaltimer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

DMOE_DEVICE uint32_t lane_id() {
  uint32_t l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

// Stops the kernel (and poisons the context): used after a diagnostic line was printed.
[[noreturn]] DMOE_DEVICE void trap() {
  asm volatile("trap;");
  __builtin_unreachable();
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
