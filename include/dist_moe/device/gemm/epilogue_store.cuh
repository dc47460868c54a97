// Store epilogue: out = acc (x row scale) (+ out), BF16 or FP32, to a row-major tensor or through a
// per-row destination table (scatter: fused combine, remote stores over NVLink).
//
// Row mapping by kind:
//   kFprop, kDgrad  tile row r -> buffer row row_begin + m_block * BM + r, stored when inside the
//                   expert (tail rows of the last M tile were computed from the next expert's rows
//                   and are dropped here); scatter: destination scatter_rows[that row] (null: skip)
//   kWgrad          tile row r -> row m_block * BM + r of out[expert] (expert_stride apart)
// Columns: n_block * BN + c, stored when < out_cols.
//
// With the TMA writer (epilogue_staging.cuh) a 64-row block whose rows all exist and that goes to
// the plain output leaves by TMA: 2D box (column, buffer row) of the [m_capacity, cols] output, or
// 3D box (column, weight row, expert) of WGRAD's [E, n, k] (columns past the end are clipped by
// TMA). FP32 accumulation uses the TMA reduce-add (old + acc in FP32, one rounding). BF16
// accumulation: WGRAD stages BF16 and uses the BF16 TMA reduce-add (acc rounded to BF16, then old +
// that rounded again in L2) -- its blocks always leave by TMA, and the synchronous read-add-write
// it replaces made dsv3's accumulating W13 WGRAD 3.4x slower than writing it; DGRAD, whose tail
// rows need ordinary stores, keeps FP32 staging so old + acc is rounded once.
//
// Deferred epilogue (kDeferred: cooperative WGRAD, BF16 output, TMA writer, not the FP8-blockwise
// 128x256 tile; docs/perf.md G19): at dsv3 a WGRAD tile has 4 k blocks and removing its epilogue
// made the kernel 35% faster; the cooperative schedule cannot overlap it with math (both
// warpgroups share each tile). So the first half of a tile's chunks is stored at once and the
// second half is packed to BF16 in registers (defer) and staged and stored one chunk per k block of
// the *next* tile, while that k block's wgmmas run (store_chunk, called by the mainloop's hook);
// what is left is flushed after the k loop and at the end. Deferring more than half spills at 168
// registers. Same values, same TMA stores (or BF16 reduce-adds), in the same order per warpgroup.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"

namespace dist_moe::gemm {

template <class Mainloop, class OutT, class Writer_>
struct StoreEpilogue {
  using Writer = Writer_;
  static constexpr GemmKind kKind = Mainloop::kKind;
  static_assert(kKind != GemmKind::kFpropSwapAB, "swap-AB stores transposed: see epilogue_swap_ab.cuh");
  static_assert(std::is_same<OutT, bf16_t>::value || std::is_same<OutT, float>::value, "BF16 or FP32 output");
  static constexpr bool kClipStats = false;
  static constexpr bool kBf16Out = std::is_same<OutT, bf16_t>::value;
  static constexpr int kOutBytes = static_cast<int>(sizeof(OutT));
  // WGRAD blocks are always whole (64 weight rows) and plain: BF16 accumulation goes by TMA reduce-add.
  static constexpr bool kBf16ReduceAdd = kBf16Out && kKind == GemmKind::kWgrad;
  // Whether a call may add into the output: DGRAD and WGRAD, and the E4M3 FPROP kernels (which
  // also run FP8-blockwise DGRAD); BF16 FPROP never accumulates, so it compiles no FP32 staging.
  static constexpr bool kMayAccumulate = kKind != GemmKind::kFprop || Mainloop::kMapElemBytes == 1;
  // Not for the FP8-blockwise 128x256 WGRAD (kWideConsumers: 128 accumulators next to a 64-register
  // scratch slice): one deferred chunk of four made its layer stages 1-6% slower than none (G69).
  static constexpr bool kDeferred = kKind == GemmKind::kWgrad && kBf16Out && Writer::kTma && !Mainloop::kPingPong &&
                                    Mainloop::kMmaPerWg == 1 && !Mainloop::kWideConsumers;

  // Chunks (64 BF16 columns) per tile, and how many of them wait for the next tile's k loop: the
  // packed values stay in registers next to the next tile's accumulators (measured: 2 of 4, -3% at
  // dsv3; 3 of 4 does not spill either but was not measured).
  static constexpr int kChunks = Mainloop::kBlockN / Staging<bf16_t>::kCols;
  static constexpr int kDeferChunks = kChunks / 2;
  static constexpr int kFirstDeferred = kChunks - kDeferChunks;
  static constexpr int kPackedPerChunk = Staging<bf16_t>::kCols / 4;  // BF16 pairs of a thread per chunk

  // A finished tile waiting to be stored (kDeferred): this thread's BF16 pairs of the deferred
  // chunks and where they go.
  struct Deferred {
    uint32_t packed[kDeferChunks * kPackedPerChunk];
    int32_t row0 = 0;      // first output row of this warpgroup's 64-row block (weight row)
    int32_t col_base = 0;  // first output column of the tile
    int32_t expert = 0;
    int32_t next = 0;      // next chunk to store
    bool pending = false;
  };

#if defined(__CUDACC__)

  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, Writer& w,
                                ClipCounts& /*unused*/) {
    if constexpr (kBf16Out && kMayAccumulate) {
      // Accumulating into a BF16 output (DGRAD, WGRAD's padded writer; FP8-blockwise DGRAD runs
      // as FPROP on the transposed weight): stage FP32, so old + acc is rounded once. The padded
      // writer of DGRAD / WGRAD always stages FP32. Otherwise BF16 staging lets whole blocks leave
      // by TMA (WGRAD accumulation: BF16 reduce-add).
      const bool fp32_staging =
          (p.accumulate != 0 && !kBf16ReduceAdd) || (kKind != GemmKind::kFprop && !Writer::kTma);
      if (fp32_staging) store_as<float>(p, ops, t, acc, wg, w);
      else store_as<bf16_t>(p, ops, t, acc, wg, w);
    } else {
      store_as<OutT>(p, ops, t, acc, wg, w);
    }
  }

  // WGRAD adding into its output by TMA reduce-add: every add reads an old gradient, from HBM at the
  // reference shapes (qwen3_30b's W13 gradients are 805 MB), and the adds leave at the tile's end,
  // where nothing else hides their latency. The producer thread pulls the tile's old output boxes
  // into L2 when it starts loading the tile (`prefetch_l2`), a whole k loop before they are added
  // to (G72). Same adds, same results.
  static constexpr bool kPrefetchL2 = kKind == GemmKind::kWgrad && Writer::kTma;

  DMOE_DEVICE static void prefetch_l2(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t) {
    static_assert(kPrefetchL2, "WGRAD with the TMA writer");
    if (p.accumulate == 0 || t.phantom) return;
    // The output map's box: 64 weight rows x 128 bytes (the staged chunk: BF16 reduce-adds stage
    // BF16, FP32 ones FP32).
    constexpr int kBoxCols = Staging<OutT>::kCols;
    // Not unrolled: the producer thread of the wide FP8 tiles runs on 24 registers.
    const int col_end = min(p.out_cols, (t.n_block + 1) * Mainloop::kBlockN);
#pragma unroll 1
    for (int col0 = t.n_block * Mainloop::kBlockN; col0 < col_end; col0 += kBoxCols) {
#pragma unroll
      for (int r = 0; r < Mainloop::kBlockM; r += 64)
        ptx::tma_prefetch_l2_3d(ops.map[kMapOut], col0, t.m_block * Mainloop::kBlockM + r, t.expert);
    }
  }

  // ---- deferred epilogue (kDeferred) ------------------------------------------------------------
  // Stores the tile's first chunks now and packs the others (the writer's BF16 pair order) for
  // store_chunk, recording where they go.
  DMOE_DEVICE static void defer(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                const float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, Deferred& d,
                                Writer& w) {
    static_assert(kDeferred, "deferred epilogue: cooperative BF16 WGRAD with the TMA writer");
    d.row0 = t.m_block * Mainloop::kBlockM + Mainloop::tile_row(wg, 0);
    d.col_base = t.n_block * Mainloop::kBlockN;
    d.expert = t.expert;
    d.next = kFirstDeferred;
    d.pending = !t.phantom;
    if (!d.pending) return;
    char* const no_rows[4] = {nullptr, nullptr, nullptr, nullptr};
#pragma unroll
    for (int c = 0; c < kFirstDeferred; ++c) {
      const int col0 = d.col_base + c * Staging<bf16_t>::kCols;
      if (col0 >= p.out_cols) continue;
      const TmaTarget target = tma_target(ops, d.expert, 0, d.row0, col0, p.accumulate != 0);
      w.template write<bf16_t, bf16_t>(acc[0], c, 1.0f, 1.0f, no_rows, col0, p.out_cols, false, target);
    }
#pragma unroll
    for (int i = 0; i < kDeferChunks * kPackedPerChunk / 2; ++i) {
      const int j = kFirstDeferred * (kPackedPerChunk / 2) + i;  // 4-value group of the fragment
      d.packed[2 * i] = ptx::pack_bf16x2(acc[0][4 * j + 0], acc[0][4 * j + 1]);
      d.packed[2 * i + 1] = ptx::pack_bf16x2(acc[0][4 * j + 2], acc[0][4 * j + 3]);
    }
  }

  // Stores the next deferred chunk, if one is left (every thread of the warpgroup).
  DMOE_DEVICE static void store_chunk(const EpilogueParams& p, const ResolvedOperands& ops, Deferred& d, Writer& w) {
    if (!d.pending) return;
    const int c = d.next;
    const int col0 = d.col_base + c * Staging<bf16_t>::kCols;
    // N not a multiple of the tile: the last chunks hold no columns.
    if (col0 < p.out_cols)
      write_slot<0>(c - kFirstDeferred, d, tma_target(ops, d.expert, 0, d.row0, col0, p.accumulate != 0), w);
    d.next = c + 1;
    d.pending = d.next < kChunks;
  }

  DMOE_DEVICE static void flush(const EpilogueParams& p, const ResolvedOperands& ops, Deferred& d, Writer& w) {
#pragma unroll 1
    for (int i = 0; i < kDeferChunks; ++i) store_chunk(p, ops, d, w);
  }

 private:
  // The TMA box of the chunk at output row `row0` (counted in the expert) and column `col0`: 2D
  // (column, buffer row row_begin + row0) of the row output, or WGRAD's 3D (column, weight row,
  // expert). `accumulate`: TMA reduce-add instead of a store.
  DMOE_DEVICE static TmaTarget tma_target(const ResolvedOperands& ops, int32_t expert, int32_t row_begin, int row0,
                                          int col0, bool accumulate) {
    TmaTarget target;
    target.map = ops.map[kMapOut];
    target.c0 = col0;
    target.reduce = accumulate;
    if constexpr (kKind == GemmKind::kWgrad) {
      target.c1 = row0;
      target.c2 = expert;
    } else {
      target.c1 = row_begin + row0;
    }
    return target;
  }

  // Deferred chunk `slot` (0 = the first deferred one), with the slot a constant so that the packed
  // values are indexed by constants and stay in registers.
  template <int kSlot>
  DMOE_DEVICE static void write_slot(int slot, const Deferred& d, const TmaTarget& target, Writer& w) {
    if constexpr (kSlot < kDeferChunks) {
      if (slot == kSlot) w.template write_packed<kSlot>(d.packed, target);
      else write_slot<kSlot + 1>(slot, d, target, w);
    }
  }

  template <class S>
  DMOE_DEVICE static void store_as(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                   float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, Writer& w) {
    constexpr int kCols = Staging<S>::kCols;
    constexpr int kChunks = Mainloop::kBlockN / kCols;
    const bool accumulate = p.accumulate != 0;
    const int tid = static_cast<int>(threadIdx.x % 128);
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + static_cast<int>(threadIdx.x % 32) / 4;
    char* const out = ops.base[kMapOut];
#pragma unroll
    for (int b = 0; b < Mainloop::kMmaPerWg; ++b) {
      const int row0 = t.m_block * Mainloop::kBlockM + Mainloop::tile_row(wg, b);  // first row of the block
      const int rows = kKind == GemmKind::kWgrad ? 64 : min(64, t.num_rows - row0);
      if (rows <= 0) continue;  // the whole block lies past the expert's end (uniform per warpgroup)
      char* row_ptr[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) row_ptr[q] = row_address(p, out, t, row0 + 16 * q + tid / 8);
      float scale_lo = 1.0f, scale_hi = 1.0f;
      if constexpr (kKind != GemmKind::kWgrad) {
        if (p.row_scale != nullptr) {
          const int r = row0 + frag_row;
          if (r < t.num_rows) scale_lo = p.row_scale[t.row_begin + r];
          if (r + 8 < t.num_rows) scale_hi = p.row_scale[t.row_begin + r + 8];
        }
      }
      // TMA: whole block, plain output, and an accumulation TMA can do (FP32, or WGRAD's BF16).
      const bool tma = Writer::kTma && std::is_same<S, OutT>::value && rows == 64 && p.scatter_rows == nullptr &&
                       (!accumulate || !kBf16Out || kBf16ReduceAdd);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        const int col0 = t.n_block * Mainloop::kBlockN + c * kCols;
        if (col0 >= p.out_cols) break;  // N not a multiple of the tile: nothing left in this block
        TmaTarget target;
        if (tma) target = tma_target(ops, t.expert, t.row_begin, row0, col0, accumulate);
        w.template write<S, OutT>(acc[b], c, scale_lo, scale_hi, row_ptr, col0, p.out_cols, accumulate, target);
      }
    }
  }

  // Start of output row `r` of the tile's expert (r counted from the expert's first row / first
  // weight row), or nullptr when it must not be stored.
  DMOE_DEVICE static char* row_address(const EpilogueParams& p, char* out, const WorkTile& t, int r) {
    if constexpr (kKind == GemmKind::kWgrad) {
      const int64_t elem = static_cast<int64_t>(t.expert) * p.expert_stride + static_cast<int64_t>(r) * p.ld_out;
      return out + elem * static_cast<int64_t>(sizeof(OutT));
    } else {
      if (r >= t.num_rows) return nullptr;
      const int64_t row = static_cast<int64_t>(t.row_begin) + r;
      if (p.scatter_rows != nullptr) return static_cast<char*>(p.scatter_rows[row]);
      return out + row * p.ld_out * static_cast<int64_t>(sizeof(OutT));
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
