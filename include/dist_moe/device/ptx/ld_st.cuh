// Loads and stores with explicit scope, ordering and caching.
//
//   flags:   ld.acquire / red.add.release at GPU scope (the gather producer's ready counters),
//            the only accesses that synchronize;
//   data:    16-byte ld.global.cg (L2 only: rows a peer or another SM wrote, never stale in L1)
//            and plain 16-byte st.global (peer stores are made visible by a later release);
//   shared:  16-byte ld/st.shared for epilogue staging.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// ---- flags -------------------------------------------------------------------------------------
DMOE_DEVICE int32_t ld_acquire_gpu(const int32_t* p) {
  int32_t v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Adds `v` with release semantics at GPU scope (a counter several producers bump).
DMOE_DEVICE void red_add_release_gpu(int32_t* p, int32_t v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// ---- 16-byte data accesses ----------------------------------------------------------------------
// V is any 16-byte vector of four 32-bit members (uint4 by default, int4 for the comm kernels).

// Global load that bypasses L1 (.cg): safe for rows written by another SM or another GPU before a
// synchronization this thread has observed.
template <class V = uint4>
DMOE_DEVICE V ld_global_cg_v4(const void* p) {
  static_assert(sizeof(V) == 16, "16-byte vector");
  V v;
  asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Read-only streaming load of memory no one writes during the kernel (not allocated in L1).
template <class V = uint4>
DMOE_DEVICE V ld_global_nc_v4(const void* p) {
  static_assert(sizeof(V) == 16, "16-byte vector");
  V v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Plain 16-byte global load (data this kernel did not write, e.g. an accumulation source).
template <class V = uint4>
DMOE_DEVICE V ld_global_v4(const void* p) {
  static_assert(sizeof(V) == 16, "16-byte vector");
  V v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// Plain 16-byte global store (local or peer memory; peers see it after a later release).
template <class V>
DMOE_DEVICE void st_global_v4(void* p, const V& v) {
  static_assert(sizeof(V) == 16, "16-byte vector");
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

DMOE_DEVICE uint2 ld_global_v2(const void* p) {
  uint2 v;
  asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

DMOE_DEVICE void st_global_v2(void* p, uint2 v) {
  asm volatile("st.global.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
}

// ---- shared memory ------------------------------------------------------------------------------
DMOE_DEVICE void st_shared_b16(uint32_t addr, uint16_t v) {
  asm volatile("st.shared.b16 [%0], %1;" ::"r"(addr), "h"(v) : "memory");
}

DMOE_DEVICE void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

DMOE_DEVICE void st_shared_v2(uint32_t addr, uint32_t a, uint32_t b) {
  asm volatile("st.shared.v2.b32 [%0], {%1, %2};" ::"r"(addr), "r"(a), "r"(b) : "memory");
}

DMOE_DEVICE void st_shared_v4(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}

DMOE_DEVICE uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

DMOE_DEVICE uint2 ld_shared_v2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.b32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}

DMOE_DEVICE float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

DMOE_DEVICE float2 ld_shared_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// ldmatrix.x4: four 8 x 8 matrices of 16-bit elements (rows of 16 bytes). Lanes 8j .. 8j + 7 give
// the shared addresses of matrix j's rows; lane l receives, for each matrix j, the 4 bytes at byte
// 4 (l % 4) of row l / 4 in r[j]. With 8-bit data this is the A fragment of an m64nNk32 E4M3 wgmma
// (rows of 16 E4M3 values).
DMOE_DEVICE void ldmatrix_x4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
