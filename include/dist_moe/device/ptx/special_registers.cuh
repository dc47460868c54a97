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

// `v` as lane 0 holds it (every lane of the warp calls, and passes the same value), as a value
// ptxas knows is warp-uniform: what derives from it -- a wgmma descriptor from a stage index -- is
// then computed once in uniform registers, not per lane and moved over with an R2UR per descriptor
// word (perf_history G119). A plain shuffle does not do it: NVVM drops one whose input its own
// analysis finds uniform, and ptxas drops one whose input it can prove uniform, yet keeps the
// value per lane. So the input mixes in the lane index (lane 0 adds nothing): the shuffle stays.
DMOE_DEVICE int warp_uniform(int v) {
  int r;
  asm("{\n\t.reg .u32 t;\n\t"
      "mov.u32 t, %%laneid;\n\t"
      "mad.lo.u32 t, t, 65536, %1;\n\t"
      "shfl.sync.idx.b32 %0, t, 0, 0x1f, 0xffffffff;\n\t}"
      : "=r"(r) : "r"(v));
  return r;
}
// The same for a 32-bit shared memory address.
DMOE_DEVICE uint32_t warp_uniform(uint32_t v) { return static_cast<uint32_t>(warp_uniform(static_cast<int>(v))); }

// Makes v opaque to the compiler at this point (no instruction): a loop-invariant value pinned at the
// top of each iteration stays in its register instead of being recomputed from its sources.
DMOE_DEVICE void keep_in_register(uint32_t& v) { asm volatile("" : "+r"(v)); }

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
