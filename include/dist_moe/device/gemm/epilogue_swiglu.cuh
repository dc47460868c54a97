// SwiGLU epilogue of the W13 FPROP: h1 = x . W13[e]^T (optionally stored), h2 = SwiGLU(h1), and
// optional clip statistics, all from the accumulators of one tile.
//
// The tile's N columns are split (Sm90Mainloop kSplit): B rows [0, BN/2) are gate rows n0 + c of
// W13[e] and rows [BN/2, BN) the matching up rows F + n0 + c, so accumulator column c (gate) and
// c + BN/2 (up) of a row sit in the same thread (fragment registers 4j+i and 4(j + BN/16)+i).
// BN = 256 (cooperative: 128 gate + 128 up per 64-row block) or 128 (ping-pong: 64 + 64, two
// 64-row blocks per warpgroup).
//
// Numerics: g = BF16(acc_gate), u = BF16(acc_up) -- the values h1 holds -- then
// h2 = BF16(activation::swiglu_forward(g, u)), the function the standalone SwiGLU kernels use
// (device/activation/swiglu.cuh, the oracle's operation order), so a recompute from a saved h1
// gives the same h2 bits. Clip statistics count, over valid rows, g > clip_limit and |u| > clip_limit
// (strict), and rows * F; each CTA sums its counts and adds them to the FP32 counters once.
//
// Stores go through the warpgroup's writer (epilogue_staging.cuh): with the TMA writer a block
// whose 64 rows all exist leaves by TMA (h1: 2D box of [m_capacity, 2F], h2: of [m_capacity, F]).
#pragma once

#include <cstdint>
#include <type_traits>

#include "dist_moe/device/activation/swiglu.cuh"
#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"
#include "dist_moe/device/numeric/bf16.cuh"

namespace dist_moe::gemm {

#if defined(__CUDACC__)

// One output of the SwiGLU epilogues (this one and the swap-AB decode one): the gate and up
// accumulators rounded to BF16, their clip statistics when kStats and the row is valid, and z.
template <bool kClamped, bool kStats>
DMOE_DEVICE float swiglu_element(float gate_acc, float up_acc, const EpilogueParams& p, bool valid,
                                 ClipCounts& counts) {
  const float g = numeric::round_bf16(gate_acc);
  const float u = numeric::round_bf16(up_acc);
  if constexpr (kStats) {
    if (valid) {
      counts.gate_over += g > p.clip_limit ? 1u : 0u;
      counts.up_over += fabsf(u) > p.clip_limit ? 1u : 0u;
      counts.elems += 1u;
    }
  }
  if constexpr (kClamped) return activation::swiglu_clamped(g, u, p.alpha, p.limit);
  return activation::swiglu_plain(g, u);
}

// The rows of tile t's expert that the clip statistics count (EpilogueParams::real_rows).
DMOE_DEVICE int32_t clip_stat_rows(const EpilogueParams& p, const WorkTile& t) {
  return p.clip_stats != nullptr && p.real_rows != nullptr ? p.real_rows[t.expert] : t.num_rows;
}

// Calls f(clamped, stats) with both as std::bool_constant: the flavour is decided once per block
// rather than branched on for each of a thread's 64 outputs (docs/perf.md G35).
template <class F>
DMOE_DEVICE void with_swiglu_flavour(const EpilogueParams& p, F&& f) {
  const bool stats = p.clip_stats != nullptr;
  if (p.clamped != 0) {
    if (stats) f(std::true_type{}, std::true_type{});
    else f(std::true_type{}, std::false_type{});
  } else {
    if (stats) f(std::false_type{}, std::true_type{});
    else f(std::false_type{}, std::false_type{});
  }
}

// z in place of the gate registers of a split tile's m64 block (this thread's rows frag_row, registers
// 4 j + i with i < 2, and frag_row + 8, i >= 2): gate j < kHalf / 8, its up partner j + kHalf / 8;
// the clip statistics count rows below stat_rows. Every SwiGLU epilogue of the M-grouped tiles.
template <int kHalf, int kAcc>
DMOE_DEVICE void swiglu_gate_in_place(const EpilogueParams& p, float (&a)[kAcc], int frag_row, int32_t stat_rows,
                                      ClipCounts& counts) {
  static_assert(kAcc >= kHalf / 2, "gate and up registers of the block");
  const bool lo_valid = frag_row < stat_rows;
  const bool hi_valid = frag_row + 8 < stat_rows;
  with_swiglu_flavour(p, [&](auto clamped, auto stats) {
    constexpr bool kClamped = decltype(clamped)::value, kStats = decltype(stats)::value;
#pragma unroll
    for (int j = 0; j < kHalf / 8; ++j) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bool valid = i < 2 ? lo_valid : hi_valid;
        a[4 * j + i] = swiglu_element<kClamped, kStats>(a[4 * j + i], a[4 * (j + kHalf / 8) + i], p, valid, counts);
      }
    }
  });
}

// h1 = [gate | up] of a split tile's m64 block -- its rows row0 .. row0 + 63 (those below t.num_rows),
// gate columns n0 .. n0 + kHalf - 1 (registers 4 j + i, j < kHalf / 8) and their up partners F + n0 ..
// (j + kHalf / 8) -- rounded to BF16 by the writer's staging, in 64-column chunks; by TMA through
// h1's map when `tma` (whole blocks only), else by ordinary stores. Every thread of the warpgroup.
template <int kHalf, class Writer, int kAcc>
DMOE_DEVICE void store_h1_block(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                const float (&a)[kAcc], int row0, int n0, bool tma, Writer& w) {
  constexpr int kCols = Staging<bf16_t>::kCols;
  constexpr int kHalfChunks = kHalf / kCols;
  const int tid = static_cast<int>(threadIdx.x % 128);
  const int64_t two_f = 2 * static_cast<int64_t>(p.f);
  char* const h1 = ops.base[kMapH1];
  char* row_ptr[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    const int r = row0 + 16 * q + tid / 8;
    row_ptr[q] = r < t.num_rows ? h1 + (static_cast<int64_t>(t.row_begin) + r) * two_f * 2 : nullptr;
  }
#pragma unroll
  for (int c = 0; c < 2 * kHalfChunks; ++c) {
    const int col0 = c < kHalfChunks ? n0 + c * kCols : p.f + n0 + (c - kHalfChunks) * kCols;
    TmaTarget target;
    if (tma) {
      target.map = ops.map[kMapH1];
      target.c0 = col0;
      target.c1 = t.row_begin + row0;
    }
    w.template write<bf16_t, bf16_t>(a, c, 1.0f, 1.0f, row_ptr, col0, static_cast<int>(two_f), false, target);
  }
}

#endif  // __CUDACC__

template <class Mainloop, class Writer_>
struct SwigluEpilogue {
  using Writer = Writer_;
  static_assert(Mainloop::kKind == GemmKind::kFprop && Mainloop::kSplit, "SwiGLU needs the split FPROP mainloop");
  static constexpr int kHalf = Mainloop::kBlockN / 2;          // gate (= up) columns per tile
  static constexpr int kCols = Staging<bf16_t>::kCols;          // 64 columns per chunk
  static_assert(kHalf % kCols == 0, "each half is whole chunks");
  static constexpr int kHalfChunks = kHalf / kCols;
  static constexpr bool kClipStats = true;
  static constexpr bool kPrefetchL2 = false;  // (kernel.cuh: operands pulled into L2 ahead of the epilogue)
  static constexpr int kOutBytes = 2;

#if defined(__CUDACC__)

  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, Writer& w,
                                ClipCounts& counts) {
#pragma unroll
    for (int b = 0; b < Mainloop::kMmaPerWg; ++b) {
      const int row0 = t.m_block * Mainloop::kBlockM + Mainloop::tile_row(wg, b);
      const int rows = min(64, t.num_rows - row0);
      if (rows > 0) store_block(p, ops, t, acc[b], row0, rows, w, counts);  // uniform per warpgroup
    }
  }

 private:
  DMOE_DEVICE static void store_block(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                      float (&a)[Mainloop::kAccPerMma], int row0, int rows, Writer& w,
                                      ClipCounts& counts) {
    const int tid = static_cast<int>(threadIdx.x % 128);
    const int n0 = t.n_block * kHalf;  // first gate column of the tile
    const bool tma = Writer::kTma && rows == 64;
    char* const h2 = ops.base[kMapH2];

    // h1 = [gate | up], rounded to BF16 by the staging (the same rounding as below).
    if (ops.base[kMapH1] != nullptr) store_h1_block<kHalf>(p, ops, t, a, row0, n0, tma, w);

    // z in place of the gate registers.
    const int frag_row = row0 + static_cast<int>((threadIdx.x / 32) % 4) * 16 + static_cast<int>(threadIdx.x % 32) / 4;
    swiglu_gate_in_place<kHalf>(p, a, frag_row, clip_stat_rows(p, t), counts);

    char* row_ptr[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int r = row0 + 16 * q + tid / 8;
      row_ptr[q] = r < t.num_rows ? h2 + (static_cast<int64_t>(t.row_begin) + r) * p.f * 2 : nullptr;
    }
#pragma unroll
    for (int c = 0; c < kHalfChunks; ++c) {
      TmaTarget target;
      if (tma) {
        target.map = ops.map[kMapH2];
        target.c0 = n0 + c * kCols;
        target.c1 = t.row_begin + row0;
      }
      w.template write<bf16_t, bf16_t>(a, c, 1.0f, 1.0f, row_ptr, n0 + c * kCols, p.f, false, target);
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
