// Persistent tile scheduler over experts, driven by device-side row counts only.
//
// At kernel start every CTA turns counts[E] into exclusive prefix sums in shared memory:
//   row_offset[e]   first row of expert e in the row buffers        (row_offset[E] = total rows)
//   tile_offset[p]  first linear tile of the expert visited p-th    (tile_offset[E] = total tiles)
//   order[p]        (WGRAD only) the expert visited p-th
// An expert's tiles depend on the grouping (params.cuh):
//   kM (FPROP, DGRAD)  ceil(count / BM) M tiles x fixed N tiles   -- empty experts: no tiles
//   kN (swap-AB)       fixed M tiles x ceil(count / BN) N tiles   -- empty experts: no tiles
//                      (count: tile_rows[e] when set -- the token rows of a padded segment)
//   kK (WGRAD)         fixed M x N tiles, contraction = the rows  -- empty experts: tiles only when
//                      their output must be overwritten with zeros
// Static persistent schedule (no atomics: nothing to reset between launches, deterministic order).
//   kM, kN: CTA b walks linear tiles b, b + G, b + 2G, ... (G = gridDim.x). All tiles of a kind
//           cost about the same, so round-robin balances.
//   kK:     a tile costs the expert's row count, which Zipf routing makes very uneven. Experts are
//           visited largest first, and round r hands tiles [rG, rG + G) to the CTAs in forward order
//           when r is even and backward when odd ("snake"): with costs sorted, the CTA that got the
//           dearest tile of one round gets the cheapest of the next -- a static stand-in for
//           longest-processing-time-first.
// Tiles never straddle experts.
//
// Dynamic schedule (SchedulerParams::tile_counter set; config `dynamic_schedule`, name `_dyn`):
// the linear order above is kept, but each CTA's producer draws its next linear tile from a global
// atomic counter when it is about to load it (right after issuing the previous tile's loads), and
// hands the index to both consumer warpgroups through a small shared-memory ring (kernel.cuh).
// Tiles then *start* in linear order whatever the earlier tiles cost: the M tiles of one (expert, N block) -- adjacent in the raster
// -- run at the same time on neighbouring CTAs and share the weight panel in L2, and no CTA idles
// while another still holds several tiles (work-conserving; with the kK order, largest expert
// first, it is longest-processing-time-first). The static schedule loses both under ragged counts:
// tiles of unequal cost make the CTAs drift apart round after round (docs/perf.md G8). The counter
// resets itself: every CTA draws exactly one index past the end, then counts itself in
// tile_counter[1]; the last one zeroes both.
//
// Inside an expert, tiles are rastered in groups of `group_m` M tiles: the group sweeps N with M
// fastest, so the CTAs running at the same time share a few A row blocks and a few B column blocks
// in L2 instead of streaming all of B once per M tile.
//
// Clusters (kClusterM = 2; kK and kM; static schedule only): the schedule above runs over clusters
// (cluster c = CTAs 2c and 2c + 1, G = gridDim.x / 2) and over pairs of M tiles of one (expert,
// N block) -- kK: the host sets fixed_m_blocks to the pair count; kM: an expert of m M tiles has
// ceil(m / 2) pairs -- and CTA rank r of the cluster takes M tile 2p + r of pair p. With an odd
// number of M tiles the last pair's second tile does not exist: that CTA still loads and runs the
// pipeline (its partner needs its share of B) but issues no wgmma (kM) and stores nothing
// (`phantom`).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/ptx/special_registers.cuh"

namespace dist_moe::gemm {

struct WorkTile {
  int32_t expert = 0;
  int32_t m_block = 0;     // tile index inside the expert along M
  int32_t n_block = 0;     // tile index inside the expert along N
  int32_t row_begin = 0;   // first row of the expert in the row buffers
  int32_t num_rows = 0;    // the expert's row count
  int32_t m_tile_index = 0;  // kM: global index of this M tile (gather ready flags)
  bool valid = false;
  bool phantom = false;      // clusters: past the last M tile, computed for the partner, never stored
};

#if defined(__CUDACC__)

template <Grouping kGrouping, int kBlockM, int kBlockN, int kClusterM = 1>
class GroupedTileScheduler {
 public:
  static_assert(kClusterM == 1 || kGrouping != Grouping::kN, "clusters pair M tiles (kK, kM)");
  // WGRAD visits experts largest first (see above).
  static constexpr bool kSorted = kGrouping == Grouping::kK;

  // Shared memory: row_offset[E + 1], tile_offset[E + 1], then order[E] when sorted.
  static constexpr int smem_bytes(int num_experts) {
    return (2 * (num_experts + 1) + (kSorted ? num_experts : 0)) * 4;
  }

  // The rows expert e's tiles cover: its segment, or (kN with tile_rows) the token rows at its start,
  // which must fit the segment.
  DMOE_DEVICE static int32_t tile_count(const SchedulerParams& p, int e, int32_t segment) {
    if constexpr (kGrouping == Grouping::kN) {
      if (p.tile_rows != nullptr) {
        const int32_t rows = p.tile_rows[e];
        if (rows < 0 || rows > segment) ptx::trap();
        return rows;
      }
    }
    return segment;
  }

  DMOE_DEVICE static int32_t tiles_of(int32_t count, const SchedulerParams& p) {
    if constexpr (kGrouping == Grouping::kM)
      return ((count + kBlockM * kClusterM - 1) / (kBlockM * kClusterM)) * p.fixed_n_blocks;
    if constexpr (kGrouping == Grouping::kN) return p.fixed_m_blocks * ((count + kBlockN - 1) / kBlockN);
    return (count > 0 || p.tiles_for_empty_experts) ? p.fixed_m_blocks * p.fixed_n_blocks : 0;
  }

  // Called by every thread of the block; ends with __syncthreads(). Checks the counts before
  // anything reads the row buffers: a negative count or a total above m_capacity traps (without a
  // message: see pipeline.cuh; the host API runs a small kernel first that prints the diagnostic
  // line, GroupedGemmCommon::validate_counts).
  DMOE_DEVICE static void build(const SchedulerParams& p, int32_t* tables) {
    int32_t* row_offset = tables;
    int32_t* tile_offset = tables + p.num_experts + 1;
    int32_t* order = tables + 2 * (p.num_experts + 1);
    const int E = p.num_experts;
    for (int i = threadIdx.x; i < E; i += blockDim.x) row_offset[i + 1] = p.counts[i];
    __syncthreads();
    if constexpr (kSorted) {
      // Rank by (count descending, index ascending): a permutation, so order[] is filled exactly.
      // O(E^2 / threads) comparisons: a few microseconds even at E = 1024, once per kernel.
      for (int i = threadIdx.x; i < E; i += blockDim.x) {
        const int32_t ci = row_offset[i + 1];
        int32_t rank = 0;
        for (int j = 0; j < E; ++j) {
          const int32_t cj = row_offset[j + 1];
          rank += (cj > ci || (cj == ci && j < i)) ? 1 : 0;
        }
        order[rank] = i;
      }
      __syncthreads();
    }
    if (threadIdx.x < 32) {
      const uint32_t lane = threadIdx.x;
      // Rows, in expert order.
      long long row_carry = 0;
      for (int base = 0; base < E; base += 32) {
        const int i = base + static_cast<int>(lane);
        const int32_t count = i < E ? row_offset[i + 1] : 0;
        if (count < 0) ptx::trap();
        int32_t rows = count;
#pragma unroll
        for (int s = 1; s < 32; s <<= 1) {
          const int32_t r = __shfl_up_sync(0xffffffffu, rows, s);
          if (lane >= static_cast<uint32_t>(s)) rows += r;
        }
        if (i < E) row_offset[i + 1] = static_cast<int32_t>(row_carry + rows);
        row_carry += __shfl_sync(0xffffffffu, rows, 31);
        if (row_carry > p.m_capacity) ptx::trap();
      }
      if (lane == 0) row_offset[0] = 0;
      __syncwarp();
      // Tiles, in visiting order.
      int32_t tile_carry = 0;
      for (int base = 0; base < E; base += 32) {
        const int pos = base + static_cast<int>(lane);
        int32_t tiles = 0;
        if (pos < E) {
          const int e = kSorted ? order[pos] : pos;
          tiles = tiles_of(tile_count(p, e, row_offset[e + 1] - row_offset[e]), p);
        }
#pragma unroll
        for (int s = 1; s < 32; s <<= 1) {
          const int32_t t = __shfl_up_sync(0xffffffffu, tiles, s);
          if (lane >= static_cast<uint32_t>(s)) tiles += t;
        }
        if (pos < E) tile_offset[pos + 1] = tile_carry + tiles;
        tile_carry += __shfl_sync(0xffffffffu, tiles, 31);
      }
      if (lane == 0) tile_offset[0] = 0;
    }
    __syncthreads();
  }

  DMOE_DEVICE GroupedTileScheduler(const SchedulerParams& p, const int32_t* tables)
      : p_(p),
        row_offset_(tables),
        tile_offset_(tables + p.num_experts + 1),
        order_(tables + 2 * (p.num_experts + 1)) {}

  DMOE_DEVICE int32_t total_tiles() const { return tile_offset_[p_.num_experts]; }
  // The first linear tile of the expert visited p-th (unsorted groupings: expert p).
  DMOE_DEVICE int32_t tile_offset(int32_t p) const { return tile_offset_[p]; }
  DMOE_DEVICE int32_t total_rows() const { return row_offset_[p_.num_experts]; }

  DMOE_DEVICE WorkTile first() {
    round_ = 0;
    pos_ = 0;
    return decode();
  }

  DMOE_DEVICE WorkTile next() {
    ++round_;
    return decode();
  }

  // ---- dynamic schedule ---------------------------------------------------------------------------
  // Clusters keep the static schedule (both CTAs of a cluster must get the same pair; the host
  // rejects dynamic_schedule with cluster_m > 1).
  DMOE_DEVICE bool dynamic() const { return kClusterM == 1 && p_.tile_counter != nullptr; }

  // Producer thread only: the next linear tile of this CTA, or -1 past the end (drawn exactly once
  // per CTA; the last CTA to get there resets the counters for the next launch).
  DMOE_DEVICE int32_t draw() const {
    const int32_t lin = atomicAdd(&p_.tile_counter[0], 1);
    if (lin < total_tiles()) return lin;
    __threadfence();
    if (atomicAdd(&p_.tile_counter[1], 1) == static_cast<int32_t>(gridDim.x) - 1) {
      __threadfence();
      atomicExch(&p_.tile_counter[0], 0);
      atomicExch(&p_.tile_counter[1], 0);
    }
    return -1;
  }

  // The tile with linear index `lin` (-1: none). A CTA's indices only grow, so the expert cursor
  // still moves forward only.
  DMOE_DEVICE WorkTile at(int32_t lin) {
    if (lin < 0) return WorkTile{};
    return decode_linear(lin);
  }

  // Contraction blocks of a tile: fixed for kM/kN, the expert's rows for kK.
  DMOE_DEVICE int32_t num_k_blocks(const WorkTile& t, int32_t fixed, int32_t block_k) const {
    if constexpr (kGrouping == Grouping::kK) return (t.num_rows + block_k - 1) / block_k;
    return fixed;
  }

  // kM only: the expert, first row and row count of global M tile `m_tile` (gather producer).
  // Returns false past the last M tile.
  DMOE_DEVICE bool locate_m_tile(int32_t m_tile, int32_t& expert, int32_t& row0, int32_t& rows) const {
    static_assert(kGrouping == Grouping::kM && kClusterM == 1, "M tiles are numbered in expert order, one per linear tile");
    const int32_t nb = p_.fixed_n_blocks;
    if (m_tile * nb >= total_tiles()) return false;
    const int32_t e = expert_with_tile(m_tile * nb);
    const int32_t m_block = m_tile - tile_offset_[e] / nb;
    const int32_t count = row_offset_[e + 1] - row_offset_[e];
    expert = e;
    row0 = row_offset_[e] + m_block * kBlockM;
    rows = min(kBlockM, count - m_block * kBlockM);
    return true;
  }

  // kN only: the expert, first row and token rows of global N tile `n_tile` (the token tiles of all
  // experts in expert order; the Mega kernel's chunks). Returns false past the last one.
  DMOE_DEVICE bool locate_n_tile(int32_t n_tile, int32_t& expert, int32_t& row0, int32_t& rows) const {
    static_assert(kGrouping == Grouping::kN, "N tiles of the swap-AB grouping");
    const int32_t mb = p_.fixed_m_blocks;
    if (n_tile * mb >= total_tiles()) return false;
    const int32_t e = expert_with_tile(n_tile * mb);
    const int32_t n_block = n_tile - tile_offset_[e] / mb;
    expert = e;
    row0 = row_offset_[e] + n_block * kBlockN;
    rows = min(kBlockN, tile_count(p_, e, row_offset_[e + 1] - row_offset_[e]) - n_block * kBlockN);
    return true;
  }

 private:
  // The expert (unsorted order) whose tiles include linear tile `lin` < total_tiles().
  DMOE_DEVICE int32_t expert_with_tile(int32_t lin) const {
    static_assert(!kSorted, "experts in index order");
    int32_t lo = 0, hi = p_.num_experts - 1;  // largest e with tile_offset[e] <= lin
    while (lo < hi) {
      const int32_t mid = (lo + hi + 1) / 2;
      if (tile_offset_[mid] <= lin) lo = mid; else hi = mid - 1;
    }
    // Empty experts share their tile_offset with the next one: move to the expert that has tiles.
    while (tile_offset_[lo + 1] <= lin) ++lo;
    return lo;
  }

  // Linear tile (cluster: tile pair) of this CTA in round `round_`. A one-dimensional cluster of
  // kClusterM CTAs is blockIdx.x / kClusterM, its rank blockIdx.x % kClusterM.
  DMOE_DEVICE int32_t linear() const {
    const int32_t g = static_cast<int32_t>(gridDim.x) / kClusterM;
    const int32_t b = static_cast<int32_t>(blockIdx.x) / kClusterM;
    if constexpr (kSorted) return round_ * g + ((round_ & 1) ? g - 1 - b : b);
    return round_ * g + b;
  }

  DMOE_DEVICE WorkTile decode() { return decode_linear(linear()); }

  DMOE_DEVICE WorkTile decode_linear(int32_t lin) {
    WorkTile t;
    const int32_t E = p_.num_experts;
    if (lin >= tile_offset_[E]) return t;  // valid = false
    // Linear tiles only grow, so the position cursor only moves forward.
    while (tile_offset_[pos_ + 1] <= lin) ++pos_;
    const int32_t e = kSorted ? order_[pos_] : pos_;
    const int32_t count = tile_count(p_, e, row_offset_[e + 1] - row_offset_[e]);
    int32_t m_blocks, n_blocks;
    if constexpr (kGrouping == Grouping::kM) {
      m_blocks = (count + kBlockM * kClusterM - 1) / (kBlockM * kClusterM);  // pairs with clusters
      n_blocks = p_.fixed_n_blocks;
    } else if constexpr (kGrouping == Grouping::kN) {
      m_blocks = p_.fixed_m_blocks;
      n_blocks = (count + kBlockN - 1) / kBlockN;
    } else {
      m_blocks = p_.fixed_m_blocks;
      n_blocks = p_.fixed_n_blocks;
    }
    // Raster inside the expert: groups of group_m M tiles, M fastest within a group.
    const int32_t local = lin - tile_offset_[pos_];
    const int32_t group_size = p_.group_m * n_blocks;
    const int32_t group = local / group_size;
    const int32_t first_m = group * p_.group_m;
    const int32_t group_rows = min(p_.group_m, m_blocks - first_m);
    const int32_t in_group = local - group * group_size;
    t.expert = e;
    t.m_block = first_m + in_group % group_rows;
    t.n_block = in_group / group_rows;
    if constexpr (kClusterM > 1) {
      t.m_block = t.m_block * kClusterM + static_cast<int32_t>(blockIdx.x) % kClusterM;
      t.phantom = kGrouping == Grouping::kK ? t.m_block >= p_.m_blocks : t.m_block * kBlockM >= count;
    }
    t.row_begin = row_offset_[e];
    t.num_rows = count;
    if constexpr (kGrouping == Grouping::kM) t.m_tile_index = tile_offset_[pos_] / n_blocks + t.m_block;
    t.valid = true;
    return t;
  }

  const SchedulerParams& p_;
  const int32_t* row_offset_;
  const int32_t* tile_offset_;
  const int32_t* order_;
  int32_t round_ = 0;
  int32_t pos_ = 0;
};

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
