// Persistent tile scheduler over experts, driven by device-side row counts only.
//
// At kernel start every CTA turns counts[E] into two exclusive prefix sums in shared memory:
//   row_offset[e]   first row of expert e in the row buffers      (row_offset[E] = total rows)
//   tile_offset[e]  first linear tile of expert e                   (tile_offset[E] = total tiles)
// An expert's tiles depend on the grouping (params.cuh):
//   kM (FPROP, DGRAD)  ceil(count / BM) M tiles x fixed N tiles   -- empty experts: no tiles
//   kN (swap-AB)       fixed M tiles x ceil(count / BN) N tiles   -- empty experts: no tiles
//   kK (WGRAD)         fixed M x N tiles, contraction = the rows  -- empty experts: tiles only when
//                      their output must be overwritten with zeros
// CTA b then walks linear tiles b, b + gridDim.x, ... (static persistent schedule: no atomics, so
// nothing to reset between launches and the order is deterministic). Tiles never straddle experts.
//
// Inside an expert, tiles are rastered in groups of `group_m` M tiles: the group sweeps N with M
// fastest, so the CTAs running at the same time share a few A row blocks and a few B column blocks
// in L2 instead of streaming all of B once per M tile.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/ptx/special.cuh"

namespace dist_moe::gemm {

struct WorkTile {
  int32_t expert = 0;
  int32_t m_block = 0;     // tile index inside the expert along M
  int32_t n_block = 0;     // tile index inside the expert along N
  int32_t row_begin = 0;   // first row of the expert in the row buffers
  int32_t num_rows = 0;    // the expert's row count
  int32_t m_tile_index = 0;  // kM: global index of this M tile (gather ready flags)
  bool valid = false;
};

#if defined(__CUDACC__)

template <Grouping kGrouping, int kBlockM, int kBlockN>
class GroupedTileScheduler {
 public:
  // Shared memory: row_offset[E + 1] then tile_offset[E + 1].
  static constexpr int smem_bytes(int num_experts) { return 2 * (num_experts + 1) * 4; }

  DMOE_DEVICE static int32_t tiles_of(int32_t count, const SchedulerParams& p) {
    if constexpr (kGrouping == Grouping::kM) return ((count + kBlockM - 1) / kBlockM) * p.fixed_n_blocks;
    if constexpr (kGrouping == Grouping::kN) return p.fixed_m_blocks * ((count + kBlockN - 1) / kBlockN);
    return (count > 0 || p.tiles_for_empty_experts) ? p.fixed_m_blocks * p.fixed_n_blocks : 0;
  }

  // Called by every thread of the block; ends with __syncthreads(). Checks the counts before
  // anything reads the row buffers: a negative count or a total above m_capacity traps (without a
  // message: see pipeline.cuh; the host API runs a small kernel first that prints the diagnostic
  // line, GroupedGemmOptions::validate_counts).
  DMOE_DEVICE static void build(const SchedulerParams& p, int32_t* tables) {
    int32_t* row_offset = tables;
    int32_t* tile_offset = tables + p.num_experts + 1;
    const int E = p.num_experts;
    for (int i = threadIdx.x; i < E; i += blockDim.x) row_offset[i + 1] = p.counts[i];
    __syncthreads();
    if (threadIdx.x < 32) {
      const uint32_t lane = threadIdx.x;
      long long row_carry = 0;
      int32_t tile_carry = 0;
      for (int base = 0; base < E; base += 32) {
        const int i = base + static_cast<int>(lane);
        const int32_t count = i < E ? row_offset[i + 1] : 0;
        if (count < 0) ptx::trap();
        int32_t rows = count;
        int32_t tiles = i < E ? tiles_of(count, p) : 0;
#pragma unroll
        for (int s = 1; s < 32; s <<= 1) {
          const int32_t r = __shfl_up_sync(0xffffffffu, rows, s);
          const int32_t t = __shfl_up_sync(0xffffffffu, tiles, s);
          if (lane >= static_cast<uint32_t>(s)) {
            rows += r;
            tiles += t;
          }
        }
        if (i < E) {
          row_offset[i + 1] = static_cast<int32_t>(row_carry + rows);
          tile_offset[i + 1] = tile_carry + tiles;
        }
        row_carry += __shfl_sync(0xffffffffu, rows, 31);
        tile_carry += __shfl_sync(0xffffffffu, tiles, 31);
        if (row_carry > p.m_capacity) ptx::trap();
      }
      if (lane == 0) {
        row_offset[0] = 0;
        tile_offset[0] = 0;
      }
    }
    __syncthreads();
  }

  DMOE_DEVICE GroupedTileScheduler(const SchedulerParams& p, const int32_t* tables)
      : p_(p), row_offset_(tables), tile_offset_(tables + p.num_experts + 1) {}

  DMOE_DEVICE int32_t total_tiles() const { return tile_offset_[p_.num_experts]; }
  DMOE_DEVICE int32_t total_rows() const { return row_offset_[p_.num_experts]; }

  DMOE_DEVICE WorkTile first() {
    linear_ = static_cast<int32_t>(blockIdx.x);
    expert_ = 0;
    return decode();
  }

  DMOE_DEVICE WorkTile next() {
    linear_ += static_cast<int32_t>(gridDim.x);
    return decode();
  }

  // Contraction blocks of a tile: fixed for kM/kN, the expert's rows for kK.
  DMOE_DEVICE int32_t num_k_blocks(const WorkTile& t, int32_t fixed, int32_t block_k) const {
    if constexpr (kGrouping == Grouping::kK) return (t.num_rows + block_k - 1) / block_k;
    return fixed;
  }

  // kM only: the expert, first row and row count of global M tile `m_tile` (gather producer).
  // Returns false past the last M tile.
  DMOE_DEVICE bool locate_m_tile(int32_t m_tile, int32_t& expert, int32_t& row0, int32_t& rows) const {
    const int32_t nb = p_.fixed_n_blocks;
    if (m_tile * nb >= total_tiles()) return false;
    int32_t e = 0;
    int32_t lo = 0, hi = p_.num_experts - 1;  // largest e with tile_offset[e] <= m_tile * nb
    while (lo < hi) {
      const int32_t mid = (lo + hi + 1) / 2;
      if (tile_offset_[mid] <= m_tile * nb) lo = mid; else hi = mid - 1;
    }
    e = lo;
    // Empty experts share their tile_offset with the next one: move to the expert that has tiles.
    while (tile_offset_[e + 1] <= m_tile * nb) ++e;
    const int32_t m_block = m_tile - tile_offset_[e] / nb;
    const int32_t count = row_offset_[e + 1] - row_offset_[e];
    expert = e;
    row0 = row_offset_[e] + m_block * kBlockM;
    rows = min(kBlockM, count - m_block * kBlockM);
    return true;
  }

 private:
  DMOE_DEVICE WorkTile decode() {
    WorkTile t;
    const int32_t E = p_.num_experts;
    if (linear_ >= tile_offset_[E]) return t;  // valid = false
    // Linear tiles only grow, so the expert cursor only moves forward.
    while (tile_offset_[expert_ + 1] <= linear_) ++expert_;
    const int32_t e = expert_;
    const int32_t count = row_offset_[e + 1] - row_offset_[e];
    int32_t m_blocks, n_blocks;
    if constexpr (kGrouping == Grouping::kM) {
      m_blocks = (count + kBlockM - 1) / kBlockM;
      n_blocks = p_.fixed_n_blocks;
    } else if constexpr (kGrouping == Grouping::kN) {
      m_blocks = p_.fixed_m_blocks;
      n_blocks = (count + kBlockN - 1) / kBlockN;
    } else {
      m_blocks = p_.fixed_m_blocks;
      n_blocks = p_.fixed_n_blocks;
    }
    // Raster inside the expert: groups of group_m M tiles, M fastest within a group.
    const int32_t local = linear_ - tile_offset_[e];
    const int32_t group_size = p_.group_m * n_blocks;
    const int32_t group = local / group_size;
    const int32_t first_m = group * p_.group_m;
    const int32_t group_rows = min(p_.group_m, m_blocks - first_m);
    const int32_t in_group = local - group * group_size;
    t.expert = e;
    t.m_block = first_m + in_group % group_rows;
    t.n_block = in_group / group_rows;
    t.row_begin = row_offset_[e];
    t.num_rows = count;
    if constexpr (kGrouping == Grouping::kM) t.m_tile_index = tile_offset_[e] / n_blocks + t.m_block;
    t.valid = true;
    return t;
  }

  const SchedulerParams& p_;
  const int32_t* row_offset_;
  const int32_t* tile_offset_;
  int32_t linear_ = 0;
  int32_t expert_ = 0;
};

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
