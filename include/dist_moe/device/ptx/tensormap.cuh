// Tensor maps modified on the device (sm_90a): the global address of a host-encoded CUtensorMap is
// replaced at run time (and, for a compact bundle whose row length is a device value, its inner
// extent and row stride), so a kernel can follow a buffer whose position inside a larger allocation
// is only known on the device (the activation planner's offsets) without any host read.
//
// Memory model (PTX ISA "tensormap.replace", "fence.proxy.tensormap"; CUDA programming guide
// "Usage of a Modified Tensor Map"): the TMA unit reads a map through the *tensormap proxy*, while
// ordinary stores and tensormap.replace write it through the *generic proxy*. A map written in
// global memory becomes safe to use only after
//   writer:  generic writes ; fence.proxy.tensormap::generic.release.<scope>
//   user:    fence.proxy.tensormap::generic.acquire.<scope> [map], 128 ; then cp.async.bulk.tensor
// where the acquiring thread is in the same thread block as every thread that uses the map (other
// threads of the block after a barrier such as __syncthreads). Stream order or a kernel boundary
// alone does not order tensormap-proxy reads after generic writes.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Replaces the global address field of the 128-byte tensor map at `map` (global memory, 128-byte
// aligned). A generic-proxy write of the whole map object.
DMOE_DEVICE void tensormap_replace_global_address(void* map, uint64_t new_address) {
  const uint64_t g = static_cast<uint64_t>(__cvta_generic_to_global(map));
  asm volatile("tensormap.replace.tile.global_address.global.b1024.b64 [%0], %1;" ::"l"(g), "l"(new_address)
               : "memory");
}

// Replaces the extent of dimension kOrd (0: the innermost) of the map at `map` (as above).
template <int kOrd>
DMOE_DEVICE void tensormap_replace_global_dim(void* map, uint32_t extent) {
  const uint64_t g = static_cast<uint64_t>(__cvta_generic_to_global(map));
  asm volatile("tensormap.replace.tile.global_dim.global.b1024.b32 [%0], %1, %2;" ::"l"(g), "n"(kOrd), "r"(extent)
               : "memory");
}

// Replaces the byte stride of dimension kOrd + 1 (kOrd = 0: the stride between rows of a 2D map).
template <int kOrd>
DMOE_DEVICE void tensormap_replace_global_stride(void* map, uint64_t stride_bytes) {
  const uint64_t g = static_cast<uint64_t>(__cvta_generic_to_global(map));
  asm volatile("tensormap.replace.tile.global_stride.global.b1024.b64 [%0], %1, %2;" ::"l"(g), "n"(kOrd),
               "l"(stride_bytes)
               : "memory");
}

// Orders this thread's earlier generic writes of tensor maps before later tensormap-proxy reads
// that are acquired at GPU scope.
DMOE_DEVICE void fence_proxy_tensormap_release_gpu() {
  asm volatile("fence.proxy.tensormap::generic.release.gpu;" ::: "memory");
}

// Makes the released contents of the map at `map` (generic address) visible to this thread's later
// TMA operations through it.
DMOE_DEVICE void fence_proxy_tensormap_acquire_gpu(const void* map) {
  asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;" ::"l"(map) : "memory");
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
