// Loads, stores, fences and atomics with explicit scope, for data that crosses GPUs.
//
// The rules every communication kernel follows (docs/communication.md, "Memory ordering"):
//   * Bulk data that a peer wrote before a barrier or signal: ld_cg_v4 (ld.global.cg: bypasses L1,
//     served by the L2 of the GPU that owns the memory). Never plain cached loads.
//   * Bulk data to a peer: st_v4 (plain st.global), then a release at system scope (a barrier
//     arrival or signal_add) before anyone reads it.
//   * Flags and counters: acquire loads / release stores / release reductions at .sys scope when a
//     peer GPU is on the other side, .gpu scope when only CTAs of this GPU are.
// Every 16-byte access must be 16-byte aligned (row strides are multiples of 16 bytes).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"

#if defined(__CUDACC__)

namespace dist_moe::comm {

// ---- bulk 16-byte data ------------------------------------------------------------------------

// The 16-byte accesses are the PTX wrappers of device/ptx/ld_st.cuh, named here for their role.
// L1-bypassing load (peer or local memory written by another kernel / another GPU).
DMOE_DEVICE int4 ld_cg_v4(const void* ptr) { return ptx::ld_global_cg_v4<int4>(ptr); }

// Read-only streaming load of local memory that no one writes during the kernel.
DMOE_DEVICE int4 ld_nc_v4(const void* ptr) { return ptx::ld_global_nc_v4<int4>(ptr); }

// Plain 16-byte store (local or peer memory).
DMOE_DEVICE void st_v4(void* ptr, const int4& v) { ptx::st_global_v4(ptr, v); }

// L1-bypassing scalar loads for small metadata a peer wrote before a barrier.
DMOE_DEVICE int32_t ld_cg_s32(const void* ptr) {
  int32_t v;
  asm volatile("ld.global.cg.s32 %0, [%1];" : "=r"(v) : "l"(ptr));
  return v;
}
DMOE_DEVICE int16_t ld_cg_s16(const void* ptr) {
  int16_t v;
  asm volatile("ld.global.cg.s16 %0, [%1];" : "=h"(v) : "l"(ptr));
  return v;
}

// ---- fences -----------------------------------------------------------------------------------

// Orders this thread's earlier memory operations (and, through bar.sync, those of its CTA) before
// later ones for observers on other GPUs.
DMOE_DEVICE void fence_acq_rel_sys() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
DMOE_DEVICE void fence_acq_rel_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// ---- 32-bit flags and counters ----------------------------------------------------------------

DMOE_DEVICE uint32_t ld_acquire_sys(const uint32_t* ptr) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}
DMOE_DEVICE uint32_t ld_acquire_gpu(const uint32_t* ptr) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}
DMOE_DEVICE uint32_t ld_relaxed_gpu(const uint32_t* ptr) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}
DMOE_DEVICE void st_release_sys(uint32_t* ptr, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}
DMOE_DEVICE void st_release_gpu(uint32_t* ptr, uint32_t v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}
DMOE_DEVICE void st_relaxed_gpu(uint32_t* ptr, uint32_t v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}
// Fire-and-forget increment that publishes this thread's earlier writes (system scope).
DMOE_DEVICE void red_add_release_sys(uint32_t* ptr, uint32_t v) {
  asm volatile("red.release.sys.global.add.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}
// Relaxed increment at system scope: publishes earlier writes when preceded by fence_acq_rel_sys()
// in the same thread (the PTX release pattern: fence, then a strong write).
DMOE_DEVICE void red_add_relaxed_sys(uint32_t* ptr, uint32_t v) {
  asm volatile("red.relaxed.sys.global.add.u32 [%0], %1;" ::"l"(ptr), "r"(v) : "memory");
}
// Returns the value before the increment; acquire + release at GPU scope.
DMOE_DEVICE uint32_t atom_add_acq_rel_gpu(uint32_t* ptr, uint32_t v) {
  uint32_t old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(ptr), "r"(v) : "memory");
  return old;
}

// Global nanosecond timer (same clock on every SM of the GPU); used by the phase trace.
DMOE_DEVICE unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ---- programmatic dependent launch ------------------------------------------------------------

// Waits until the kernels this one depends on (stream order) have completed and flushed their
// memory. A no-op when the kernel was launched without the programmatic-serialization attribute.
DMOE_DEVICE void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

}  // namespace dist_moe::comm

#endif  // __CUDACC__
