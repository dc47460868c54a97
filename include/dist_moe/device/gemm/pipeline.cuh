// Stage hand-off between the TMA producer and the consumer warpgroups: a ring of kStages shared
// memory slots, each guarded by a "full" mbarrier (TMA bytes landed) and an "empty" mbarrier
// (every consumer warp finished reading the slot).
//
//   producer (one thread)                     consumers (every thread of the warpgroup(s) of the tile)
//   producer_acquire(s)   wait empty[s]       consumer_wait(s)     wait full[s]
//   producer_expect(s, n) arrive + expect n   ... wgmma reads slot s ...
//   TMA copies -> complete_tx on full[s]      consumer_release(s)  one arrival per warp
//
// Phases: both sides walk the ring with a PipelineState; the phase bit flips at each wrap. The
// producer waits on empty with the opposite parity, so its first pass over the ring does not block.
//
// Clusters (kClusterM = 2, TMA multicast): slot s of each CTA is filled partly by the other CTA's
// producer (the shared operand's half it loads for both). So a CTA's consumers release slot s in
// every CTA of the cluster (one arrival per warp on each CTA's empty[s]), and each empty[s] expects
// the consumer warps of all kClusterM CTAs: a producer refills slot s only when no CTA still reads
// its copy. full[s] still expects the whole stage's bytes (its own loads plus the peer's multicast);
// a peer's bytes may land before this CTA's expect_tx of the same phase, which the transaction count
// allows (the phase cannot complete before the producer's own arrival).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/common/spin_wait.cuh"
#include "dist_moe/device/ptx/cluster.cuh"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/mbarrier.cuh"
#include "dist_moe/device/ptx/special_registers.cuh"

namespace dist_moe::gemm {

template <int kStages>
struct PipelineState {
  int32_t stage = 0;
  uint32_t phase = 0;

  DMOE_DEVICE void advance() {
    if (++stage == kStages) {
      stage = 0;
      phase ^= 1u;
    }
  }

  // Skips `n` slots (ping-pong: the other consumer warpgroup's tile).
  DMOE_DEVICE void advance(int32_t n) {
    const int32_t s = stage + n;
    phase ^= static_cast<uint32_t>((s / kStages) & 1);
    stage = s % kStages;
  }
};

#if defined(__CUDACC__)

// Waits for the phase of parity `parity` of the mbarrier at `bar`, trapping after the library's
// spin timeout. No message: any function call in a kernel that issues wgmma (printf included, even
// on a path no wgmma reaches) makes ptxas serialize all of its wgmmas (C7510), so the GEMM kernels
// use trap-only timeouts (like DeepGEMM's trap-only device asserts). A hang becomes an error.
DMOE_DEVICE void mbarrier_wait(uint32_t bar, uint32_t parity) {
  if (ptx::mbarrier_try_wait_parity(bar, parity)) return;
  common::SpinTimer timer;
  while (!ptx::mbarrier_try_wait_parity(bar, parity)) {
    if (timer.expired()) ptx::trap();
  }
}

template <int kStages, int kClusterM = 1>
class TmaPipeline {
 public:
  struct SharedStorage {
    uint64_t full[kStages];
    uint64_t empty[kStages];
  };

  // One thread, before the block-wide barrier that precedes any use. `producer_arrivals`: the TMA
  // thread's arrive.expect_tx, plus one per other producer that fills part of a slot (the MXFP8
  // scale warps: mainloop_mxfp8.cuh).
  DMOE_DEVICE static void init(SharedStorage& s, uint32_t consumer_arrivals, uint32_t producer_arrivals = 1) {
#pragma unroll
    for (int i = 0; i < kStages; ++i) {
      ptx::mbarrier_init(ptx::smem_addr(&s.full[i]), producer_arrivals);
      ptx::mbarrier_init(ptx::smem_addr(&s.empty[i]), consumer_arrivals * kClusterM);
    }
    ptx::fence_mbarrier_init();
  }

  DMOE_DEVICE explicit TmaPipeline(SharedStorage& s)
      : full_(ptx::smem_addr(&s.full[0])), empty_(ptx::smem_addr(&s.empty[0])) {
    if constexpr (kClusterM > 1) rank_ = ptx::cluster_ctarank();
  }

  // ---- producer -------------------------------------------------------------------------------
  DMOE_DEVICE void producer_acquire(const PipelineState<kStages>& s) const {
    mbarrier_wait(empty_ + 8 * s.stage, s.phase ^ 1u);
  }

  // Arrives on full[s] announcing `bytes`; returns the barrier the TMA copies complete on.
  DMOE_DEVICE uint32_t producer_expect(const PipelineState<kStages>& s, uint32_t bytes) const {
    const uint32_t bar = full_ + 8 * s.stage;
    ptx::mbarrier_arrive_expect_tx(bar, bytes);
    return bar;
  }

  // A producer that writes part of the slot with ordinary stores: its arrival (release) publishes
  // them. One thread per arriving producer, after its warp's stores (__syncwarp).
  DMOE_DEVICE void producer_arrive(const PipelineState<kStages>& s) const { ptx::mbarrier_arrive(full_ + 8 * s.stage); }

  // ---- consumers ------------------------------------------------------------------------------
  DMOE_DEVICE void consumer_wait(const PipelineState<kStages>& s) const {
    mbarrier_wait(full_ + 8 * s.stage, s.phase);
  }

  // Called by every thread of a consumer warp once its reads of the slot are complete (after
  // wgmma_wait); lane 0 arrives for the warp. The empty barrier expects one arrival per warp that
  // consumes a tile: 8 (both warpgroups share each tile) or 4 (ping-pong: one warpgroup per tile),
  // times kClusterM (every CTA of the cluster releases the slot in every CTA).
  DMOE_DEVICE void consumer_release(int32_t stage) const {
    if (ptx::lane_id() != 0) return;
    ptx::mbarrier_arrive(empty_ + 8 * stage);
    if constexpr (kClusterM > 1) {
#pragma unroll
      for (uint32_t cta = 0; cta < static_cast<uint32_t>(kClusterM); ++cta)
        if (cta != rank_) ptx::mbarrier_arrive_cluster(ptx::map_shared_rank(empty_ + 8 * stage, cta));
    }
  }

 private:
  uint32_t full_;   // smem address of full[0]; barriers are 8 bytes apart
  uint32_t empty_;
  uint32_t rank_ = 0;  // this CTA's rank in its cluster
};

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
