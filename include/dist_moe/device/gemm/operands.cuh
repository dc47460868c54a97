// Per-CTA resolution of the operands' device-side offsets (params.cuh, OperandMaps).
//
// Thread i < kNumMaps of the block resolves slot i before the kernel's first __syncthreads:
//   base   = base + *offset                    (what generic loads and stores use)
//   map    = the parameter-space map when nothing moved, otherwise this CTA's own copy in the
//            `patched` workspace with its global address replaced (and, for a compact bundle,
//            its row length: OperandMaps::row_length).
// Memory-ordering argument for a patched map (ptx/tensormap.cuh):
//   1. The resolving thread writes the copy and replaces the address: generic-proxy writes.
//   2. fence.proxy.tensormap::generic.release.gpu, then fence.proxy.tensormap::generic.acquire.gpu
//      on the map by the same thread: its later tensormap-proxy reads see the new map.
//   3. __syncthreads (Scheduler::build) orders steps 1-2 before every other thread of the block;
//      each thread that issues TMA through a patched map also executes the acquire fence on it
//      before its first copy (acquire_patched_maps), so no thread relies on the barrier alone.
// The copy is private to the CTA (slot blockIdx.x), so no other CTA of this grid writes it; the
// host gives every (device, stream) its own workspace, so kernels of other streams never share it,
// and a kernel on the same stream starts only after this one has finished (stream order), after
// every TMA of this CTA has completed (loads are waited on; stores: bulk_wait_group<0> at exit).
// Everything is read at run time: a CUDA graph replayed with new offset values patches again.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/ptx/special_registers.cuh"
#include "dist_moe/device/ptx/tensormap.cuh"

namespace dist_moe::gemm {

#if defined(__CUDACC__)

// Called by thread `i` (< kNumMaps) of the block, before the first __syncthreads.
// Whether slot i's map is this CTA's patched copy: it moved (a device offset) or its row length
// is a device value, and it was encoded.
DMOE_DEVICE bool map_is_patched(const OperandMaps& m, int i) {
  return m.base[i] != 0 && ((m.encoded_mask >> i) & 1u) && (m.offset[i] != nullptr || m.row_length[i] != nullptr);
}

DMOE_DEVICE void resolve_operand(const OperandMaps& m, int i, ResolvedOperands& out) {
  uint64_t base = m.base[i];
  const CUtensorMap* map = &m.map[i];
  const int64_t* offset = m.offset[i];
  if (offset != nullptr && base != 0) {
    const int64_t off = *offset;
    // TMA needs 16-byte aligned tensors (the planner promises 128); a bad offset traps here,
    // before any access (no message: see pipeline.cuh; the host's count check prints one).
    if ((off & 15) != 0) ptx::trap();
    base += static_cast<uint64_t>(off);
  }
  if (map_is_patched(m, i)) {
    CUtensorMap* slot = m.patched + static_cast<int64_t>(blockIdx.x) * kNumMaps + i;
    const uint4* src = reinterpret_cast<const uint4*>(&m.map[i]);
    uint4* dst = reinterpret_cast<uint4*>(slot);
#pragma unroll
    for (int w = 0; w < 8; ++w) dst[w] = src[w];  // 128 bytes, generic proxy
    ptx::tensormap_replace_global_address(slot, base);
    if (m.row_length[i] != nullptr) {
      // A compact bundle of 1-byte elements: rows of R, R apart (TMA strides: multiples of 16).
      // R = 0: no rows, nothing is loaded through the map (it keeps the encoded extent).
      const int32_t r = *m.row_length[i];
      if (r < 0 || (r & 15) != 0) ptx::trap();
      if (r > 0) {
        ptx::tensormap_replace_global_dim<0>(slot, static_cast<uint32_t>(r));
        ptx::tensormap_replace_global_stride<0>(slot, static_cast<uint64_t>(r));
      }
    }
    ptx::fence_proxy_tensormap_release_gpu();
    ptx::fence_proxy_tensormap_acquire_gpu(slot);
    map = slot;
  }
  out.map[i] = map;
  out.base[i] = reinterpret_cast<char*>(base);
}

// A thread about to issue TMA through the maps in `mask` (bits of MapIndex): acquire the patched
// ones itself (the barrier already ordered them; this makes the pattern explicit per thread).
DMOE_DEVICE void acquire_patched_maps(const OperandMaps& m, const ResolvedOperands& r, uint32_t mask) {
#pragma unroll
  for (int i = 0; i < kNumMaps; ++i) {
    if (((mask >> i) & 1u) && map_is_patched(m, i)) ptx::fence_proxy_tensormap_acquire_gpu(r.map[i]);
  }
}

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
