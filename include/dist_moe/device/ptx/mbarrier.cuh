// mbarrier: the shared-memory transaction barrier that TMA completes and warps wait on.
//
// A barrier counts down "pending arrivals" (set at init) and "transaction bytes" (raised by
// arrive.expect_tx, lowered by every TMA that lands); the current phase completes when both are
// zero, and the phase parity flips. Waiters name the parity of the phase they wait to see complete.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

DMOE_DEVICE void mbarrier_init(uint32_t bar, uint32_t arrival_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrival_count) : "memory");
}

// One arrival (release semantics at CTA scope: prior smem reads/writes of this thread are ordered
// before the phase completes).
DMOE_DEVICE void mbarrier_arrive(uint32_t bar) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.shared::cta.b64 state, [%0];\n"
      "}\n" ::"r"(bar)
      : "memory");
}

// One arrival on the mbarrier at .shared::cluster address `cluster_bar` (ptx::map_shared_rank:
// another CTA's of the cluster). Default semantics (release at CTA scope), as for a local arrival:
// what it announces is that this warp's wgmma reads of a stage are complete (wgmma_wait), which
// needs no cluster-wide fence -- a .release.cluster arrival costs one per stage per warp.
DMOE_DEVICE void mbarrier_arrive_cluster(uint32_t cluster_bar) {
  asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" ::"r"(cluster_bar) : "memory");
}

// One arrival that also announces `tx_bytes` bytes the async proxy will deliver this phase.
DMOE_DEVICE void mbarrier_arrive_expect_tx(uint32_t bar, uint32_t tx_bytes) {
  asm volatile(
      "{\n"
      ".reg .b64 state;\n"
      "mbarrier.arrive.expect_tx.shared::cta.b64 state, [%0], %1;\n"
      "}\n" ::"r"(bar),
      "r"(tx_bytes)
      : "memory");
}

// True once the phase with parity `parity` has completed. The hardware may suspend the thread
// for a short while before returning false, so a loop around it does not hammer shared memory.
DMOE_DEVICE bool mbarrier_try_wait_parity(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
