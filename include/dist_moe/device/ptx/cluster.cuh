// Thread-block clusters (SM90): a cluster's CTAs run at the same time on one GPC and can reach
// each other's shared memory ("distributed shared memory"). The GEMM kernels use clusters of two
// CTAs that share one operand through TMA multicast (mainloop.cuh, pipeline.cuh).
//
// Addresses: a 32-bit .shared::cta address of this CTA is also a valid .shared::cluster address
// naming this CTA's copy; `mapa` turns it into the address of the same offset in another CTA.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Rank of this CTA inside its cluster (0 .. cluster size - 1).
DMOE_DEVICE uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

// The .shared::cluster address of `smem` (an address of this CTA) in the CTA of rank `cta`.
DMOE_DEVICE uint32_t map_shared_rank(uint32_t smem, uint32_t cta) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem), "r"(cta));
  return r;
}

// Every thread of every CTA of the cluster arrives, then waits for all others. Release/acquire at
// cluster scope: shared-memory writes before (mbarrier initialization included, after
// fence_mbarrier_init) are visible to the other CTAs after. `.aligned`: the whole warp executes it
// together.
DMOE_DEVICE void cluster_sync_aligned() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n"
               "barrier.cluster.wait.acquire.aligned;" ::: "memory");
}

// The same, for threads that reach it at different times (no `.aligned`).
DMOE_DEVICE void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n"
               "barrier.cluster.wait.acquire;" ::: "memory");
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
