// Gather producer (fused dispatch, DESIGN.md §9 "gather once, not once per N-tile").
//
// The A rows of an M tile are named by a table of row addresses (local or a peer GPU's memory over
// NVLink; nullptr = zero row). Instead of every N tile pulling them again, warps 1-3 of the producer
// warpgroup copy each row once into the local `gathered` buffer ([m_capacity, K], also the saved
// x for WGRAD) and publish progress per M tile; the TMA thread of any CTA that computes an N tile
// of that M tile waits until the tile is complete and then loads it from local memory with TMA.
//
// Work unit: 16 rows of one M tile (8 units per 128-row tile), handed out round-robin over CTAs in
// M-tile order (unit u to CTA u % gridDim.x). Spreading a tile over 8 CTAs cuts the latency before
// its first N tile can start; the order matches the compute order, so gathering runs ahead of use.
// Publication: every gather thread fences its stores for the async proxy, the 96 gather threads
// meet at a named barrier, then one thread adds 1 to ready[m_tile] with release semantics. The
// consumer side (wait_tile_ready) acquires the counter and fences before issuing TMA. The ready
// counters must be zero at launch (the host memsets them).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/common/spin_wait.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/ptx/barrier.cuh"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"

namespace dist_moe::gemm {

template <int kBlockM>
struct GatherProducer {
  static constexpr int kThreads = 96;  // warps 1-3 of the producer warpgroup
  static constexpr int kUnitRows = 16;
  static constexpr int kUnitsPerTile = kBlockM / kUnitRows;
  static constexpr int kUnroll = 8;  // 16-byte loads in flight per thread

#if defined(__CUDACC__)

  // `gathered`: the resolved base of the kMapA tensor (operands.cuh), which TMA then reads.
  template <class Scheduler>
  DMOE_DEVICE static void run(const MainloopParams& p, char* gathered, const Scheduler& sched, int32_t n_blocks,
                              int gather_tid) {
    const int warp = gather_tid / 32;
    const int lane = gather_tid % 32;
    const int32_t total_units = (sched.total_tiles() / n_blocks) * kUnitsPerTile;
    const int64_t row_bytes = static_cast<int64_t>(p.gather_row_elems) * 2;
    for (int32_t u = static_cast<int32_t>(blockIdx.x); u < total_units; u += static_cast<int32_t>(gridDim.x)) {
      const int32_t m_tile = u / kUnitsPerTile;
      const int32_t first = (u % kUnitsPerTile) * kUnitRows;
      int32_t expert, row0, rows;
      sched.locate_m_tile(m_tile, expert, row0, rows);
      const int32_t n = min(kUnitRows, rows - first);
      for (int32_t r = warp; r < n; r += kThreads / 32) copy_row(p, gathered, row0 + first + r, row_bytes, lane);
      ptx::fence_proxy_async_global();
      ptx::named_barrier_sync(kBarrierGather, kThreads);
      if (gather_tid == 0) {
        ptx::fence_acq_rel_gpu();
        ptx::red_add_release_gpu(p.ready + m_tile, 1);
      }
    }
  }

  // TMA thread: blocks until every unit of `m_tile` is published.
  DMOE_DEVICE static void wait_tile_ready(const MainloopParams& p, int32_t m_tile) {
    const int32_t* flag = p.ready + m_tile;
    if (ptx::ld_acquire_gpu(flag) < kUnitsPerTile) {
      common::SpinTimer timer;
      while (ptx::ld_acquire_gpu(flag) < kUnitsPerTile) {
        if (timer.expired()) ptx::trap();  // trap-only: see mbarrier_wait in pipeline.cuh
      }
    }
    ptx::fence_proxy_async_global();  // the TMA that follows must see the generic-proxy stores
  }

 private:
  // One warp copies one row: 16-byte segments, kUnroll loads in flight per lane.
  DMOE_DEVICE static void copy_row(const MainloopParams& p, char* gathered, int32_t row, int64_t row_bytes, int lane) {
    const char* src = static_cast<const char*>(p.gather_rows[row]);
    char* dst = gathered + static_cast<int64_t>(row) * row_bytes;
    const int32_t segs = static_cast<int32_t>(row_bytes / 16);
    if (src == nullptr) {
      for (int32_t s = lane; s < segs; s += 32) ptx::st_global_v4(dst + 16 * s, make_uint4(0, 0, 0, 0));
      return;
    }
    for (int32_t s0 = lane; s0 < segs; s0 += 32 * kUnroll) {
      uint4 v[kUnroll];
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) {
        const int32_t s = s0 + 32 * i;
        if (s < segs) v[i] = ptx::ld_global_cg_v4(src + 16 * s);
      }
#pragma unroll
      for (int i = 0; i < kUnroll; ++i) {
        const int32_t s = s0 + 32 * i;
        if (s < segs) ptx::st_global_v4(dst + 16 * s, v[i]);
      }
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
