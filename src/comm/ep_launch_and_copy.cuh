// What every EP kernel file uses: launches with attributes (launch_ex), warp-level row copies in
// segments, and the per-kernel reads/records of the group state (the "first diagnostic prints"
// lock, the bad expert-id report, the phase trace, the ids of the last publish).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "dist_moe/check.h"
#include "dist_moe/device/comm/comm.cuh"

namespace dist_moe::comm {

inline constexpr unsigned kFullMask = 0xffffffffu;
inline constexpr int kRowUnroll = 8;  // 16-byte vectors per lane in flight in row copies

// Launches `kernel` with optional cooperative (co-resident grid) and programmatic-serialization
// (PDL) attributes. Both are valid under stream capture (CUDA 12.3+).
template <typename... KernelArgs, typename... Args>
void launch_ex(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
               bool cooperative, bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attrs[2];
  unsigned n = 0;
  if (cooperative) {
    attrs[n].id = cudaLaunchAttributeCooperative;
    attrs[n].val.cooperative = 1;
    ++n;
  }
  if (pdl) {
    attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cfg.attrs = n ? attrs : nullptr;
  cfg.numAttrs = n;
  DMOE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

#if defined(__CUDACC__)

// True for exactly one thread of the whole grid (and of all later kernels of this group, since the
// lock is never released: a diagnostic is always followed by a trap).
__device__ __forceinline__ bool take_diag_lock(EpLocalState* state) {
  return atomicCAS(&state->diag_lock, 0u, 1u) == 0u;
}

// With validate_expert_ids: the first thread that sees an id outside [-1, E) prints and traps.
// Inlined form, for kernels at their register limit (a call site made the fused route kernel spill).
__device__ __forceinline__ void report_bad_expert_id_inline(const EpDeviceLayout& L, int64_t index, int64_t id) {
  if (take_diag_lock(L.state)) {
    printf("DistMoE expert ID is outside [-1, num_experts): rank %d token %lld k %lld id %lld num_experts %d\n", L.rank,
           static_cast<long long>(index / L.top_k), static_cast<long long>(index % L.top_k),
           static_cast<long long>(id), L.num_experts);
    __trap();
  }
}
__device__ __noinline__ inline void report_bad_expert_id(const EpDeviceLayout& L, int64_t index, int64_t id) {
  report_bad_expert_id_inline(L, index, id);
}

// ---- phase trace (EpDeviceLayout::trace; off when nullptr) --------------------------------------

// CTA 0, thread 0 records the time of `slot`.
__device__ __forceinline__ void trace_first(const EpDeviceLayout& L, int slot) {
  if (L.trace != nullptr && blockIdx.x == 0 && threadIdx.x == 0) L.trace[slot] = globaltimer_ns();
}
// Thread 0 of every CTA: `slot` holds the latest time any CTA got here.
__device__ __forceinline__ void trace_last(const EpDeviceLayout& L, int slot) {
  if (L.trace != nullptr && threadIdx.x == 0) atomicMax(L.trace + slot, globaltimer_ns());
}

// This rank's ids of the last publish: routing slot (publish_count - 1) % 2, after its header.
template <typename IdT>
__device__ __forceinline__ const IdT* published_ids(const EpDeviceLayout& L) {
  const uint32_t count = *reinterpret_cast<volatile uint32_t*>(&L.state->publish_count);
  const int slot = static_cast<int>((count - 1u) & 1u);
  return reinterpret_cast<const IdT*>(local_ptr(L.routing_win, static_cast<int64_t>(slot) * L.routing_slot_bytes) +
                                      kRoutingHeaderBytes);
}

// Rows are moved in segments of kSegVecs 16-byte vectors (4 KiB): one warp, one batch of
// kRowUnroll loads in flight per lane. Work units are (row, segment), so even a few rows keep many
// warps busy.
inline constexpr int kSegVecs = 32 * kRowUnroll;

__host__ __device__ constexpr int num_segments(int nvec) { return (nvec + kSegVecs - 1) / kSegVecs; }

// Warp copy of segment `seg` of a row of `nvec` 16-byte vectors. Loads use ld.global.cg when
// kSrcCg (peer data, or data written during this kernel), ld.global.nc otherwise (read-only).
template <bool kSrcCg>
__device__ __forceinline__ void warp_copy_segment(const char* src, char* dst, int seg, int nvec, int lane) {
  const int v0 = seg * kSegVecs;
  int4 buf[kRowUnroll];
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    const int v = v0 + u * 32 + lane;
    if (v < nvec) buf[u] = kSrcCg ? ld_cg_v4(src + static_cast<int64_t>(v) * 16) : ld_nc_v4(src + static_cast<int64_t>(v) * 16);
  }
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    const int v = v0 + u * 32 + lane;
    if (v < nvec) st_v4(dst + static_cast<int64_t>(v) * 16, buf[u]);
  }
}

// Warp copy of segment `seg` of one source row (peer data: ld.global.cg) to several rows of `out`:
// lane l of the warp holds destination row my_row (for lanes whose bit is set in `mask`; the row
// index is shuffled out), so the source is read once whatever the number of destinations.
__device__ __forceinline__ void warp_copy_segment_to_rows(const char* src, char* __restrict__ out, int64_t row_bytes,
                                                          int32_t my_row, unsigned mask, int seg, int nvec,
                                                          int lane) {
  const int v0 = seg * kSegVecs;
  int4 buf[kRowUnroll];
#pragma unroll
  for (int q = 0; q < kRowUnroll; ++q) {
    const int v = v0 + q * 32 + lane;
    if (v < nvec) buf[q] = ld_cg_v4(src + static_cast<int64_t>(v) * 16);
  }
  while (mask != 0u) {
    const int l = __ffs(mask) - 1;
    mask &= mask - 1u;
    const int32_t row = __shfl_sync(kFullMask, my_row, l);
    char* dst = out + static_cast<int64_t>(row) * row_bytes;
#pragma unroll
    for (int q = 0; q < kRowUnroll; ++q) {
      const int v = v0 + q * 32 + lane;
      if (v < nvec) st_v4(dst + static_cast<int64_t>(v) * 16, buf[q]);
    }
  }
}

// Warp zero-fill of segment `seg` of a row.
__device__ __forceinline__ void warp_zero_segment(char* dst, int seg, int nvec, int lane) {
  const int4 z = make_int4(0, 0, 0, 0);
  const int v0 = seg * kSegVecs;
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u) {
    const int v = v0 + u * 32 + lane;
    if (v < nvec) st_v4(dst + static_cast<int64_t>(v) * 16, z);
  }
}

#endif  // __CUDACC__

}  // namespace dist_moe::comm
