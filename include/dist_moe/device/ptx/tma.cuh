// TMA (cp.async.bulk.tensor): tile copies between global memory and shared memory described by a
// CUtensorMap built on the host with cuTensorMapEncodeTiled.
//
// The tensor map lives in kernel parameter space (a __grid_constant__ parameter); its generic
// address is what the instruction takes. Coordinates are in elements, innermost dimension first;
// parts of the box outside the tensor are filled with zeros and still count toward the bytes the
// mbarrier expects.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Pulls the descriptor into the TMA unit's cache ahead of the first copy.
DMOE_DEVICE void prefetch_tensormap(const void* tensor_map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(tensor_map) : "memory");
}

// 2D tile load: box at (c0 = inner coordinate, c1 = outer coordinate) into `smem_dst`,
// completion (bytes) reported on the mbarrier at `bar`.
DMOE_DEVICE void tma_load_2d(uint32_t smem_dst, const void* tensor_map, uint32_t bar, int32_t c0, int32_t c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];" ::"r"(smem_dst),
      "l"(tensor_map), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
