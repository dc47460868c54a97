// Store epilogue: out = acc (x row scale) (+ out), BF16 or FP32, to a row-major tensor or through a
// per-row destination table (scatter: fused combine, remote stores over NVLink).
//
// Row mapping by kind:
//   kFprop, kDgrad  tile row r -> buffer row row_begin + m_block * BM + r, stored when inside the
//                   expert (tail rows of the last M tile were computed from the next expert's rows
//                   and are dropped here); scatter: destination scatter_rows[that row] (null: skip)
//   kWgrad          tile row r -> row m_block * BM + r of out[expert] (expert_stride apart)
// Columns: n_block * BN + c, stored when < out_cols.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"

namespace dist_moe::gemm {

template <class Mainloop, class OutT>
struct StoreEpilogue {
  static constexpr GemmKind kKind = Mainloop::kKind;
  static_assert(kKind != GemmKind::kFpropSwapAB, "swap-AB stores transposed: see epilogue_swap_ab.cuh");
  static_assert(std::is_same<OutT, bf16_t>::value || std::is_same<OutT, float>::value, "BF16 or FP32 output");
  // DGRAD and WGRAD may accumulate into their output: stage FP32 so the sum is rounded once.
  using StageT = std::conditional_t<std::is_same<OutT, float>::value || kKind != GemmKind::kFprop, float, bf16_t>;
  static constexpr int kChunks = Mainloop::kBlockN / Staging<StageT>::kCols;

  static constexpr int smem_bytes() { return 2 * kStagingBytesPerWg; }
  static constexpr bool kClipStats = false;

#if defined(__CUDACC__)

  // Everything a tile needs is per tile; nothing persists across tiles.
  DMOE_DEVICE static void store(const EpilogueParams& p, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, uint32_t staging,
                                ClipCounts& /*unused*/) {
    const uint32_t bar = kBarrierEpilogueWg0 + wg;
    const int tid = static_cast<int>(threadIdx.x % 128);
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + static_cast<int>(threadIdx.x % 32) / 4;
#pragma unroll
    for (int b = 0; b < Mainloop::kMmaPerWg; ++b) {
      const int row0 = t.m_block * Mainloop::kBlockM + Mainloop::tile_row(wg, b);  // first row of the block
      char* row_ptr[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) row_ptr[q] = row_address(p, t, row0 + 16 * q + tid / 8);
      float scale_lo = 1.0f, scale_hi = 1.0f;
      if constexpr (kKind != GemmKind::kWgrad) {
        if (p.row_scale != nullptr) {
          const int r = row0 + frag_row;
          if (r < t.num_rows) scale_lo = p.row_scale[t.row_begin + r];
          if (r + 8 < t.num_rows) scale_hi = p.row_scale[t.row_begin + r + 8];
        }
      }
#pragma unroll
      for (int c = 0; c < kChunks; ++c)
        write_chunk<StageT, OutT>(staging, bar, acc[b], c, scale_lo, scale_hi, row_ptr,
                                  t.n_block * Mainloop::kBlockN + c * Staging<StageT>::kCols, p.out_cols,
                                  p.accumulate != 0);
    }
  }

 private:
  // Start of output row `r` of the tile's expert (r counted from the expert's first row / first
  // weight row), or nullptr when it must not be stored.
  DMOE_DEVICE static char* row_address(const EpilogueParams& p, const WorkTile& t, int r) {
    if constexpr (kKind == GemmKind::kWgrad) {
      const int64_t elem = static_cast<int64_t>(t.expert) * p.expert_stride + static_cast<int64_t>(r) * p.ld_out;
      return static_cast<char*>(p.out) + elem * static_cast<int64_t>(sizeof(OutT));
    } else {
      if (r >= t.num_rows) return nullptr;
      const int64_t row = static_cast<int64_t>(t.row_begin) + r;
      if (p.scatter_rows != nullptr) return static_cast<char*>(p.scatter_rows[row]);
      return static_cast<char*>(p.out) + row * p.ld_out * static_cast<int64_t>(sizeof(OutT));
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
