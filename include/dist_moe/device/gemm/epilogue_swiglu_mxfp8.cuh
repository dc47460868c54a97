// SwiGLU epilogue of the MXFP8 W13 FPROP that writes h2 as MXFP8 rows (1 x 32 blocks: E4M3 data, one
// E8M0 RCEIL code per block) instead of BF16 -- upstream's quantization point (the SwiGLU epilogue
// quantizes what W2 reads; upstream_kernels_and_formats.md §2.5, §5.3), for the Mega kernel's
// 128x128 tiles (device/gemm/mega.cuh), where nothing else may stand between W13 and W2. Training
// also saves h1 (BF16, when kMapH1 is set) and h2's compact column bundle (32 x 1 blocks along the
// rows, when EpilogueParams::mx_col is set): the staged W13's h1 and the rows + columns quantizer's
// columns, bit for bit (rows of a segment past its real rows, EpilogueParams::real_rows, quantize as
// zeros, as the quantizer makes them, whatever W13 gave them: 0 x NaN is NaN).
//
// Tile: the MXFP8 mainloop's cooperative 128x128 split tile, 64 gate + 64 up columns; warpgroup w
// owns rows 64 w .. 64 w + 63. Register 4 j + i of a thread (j < 8) is gate column 8 j + 2 (lane % 4)
// + i % 2 of row lo (i < 2: warp row lane / 4) or hi (+ 8), and 4 (j + 8) + i the matching up column
// (epilogue_swiglu.cuh): after swiglu_gate_in_place the gate registers hold h2 in the fragment layout
// of epilogue_mxfp8_blocks.cuh, two 32-column blocks per row.
//
// Numerics, bit for bit the staged pair "SwigluEpilogue (BF16 h2) -> the row quantizer": z =
// swiglu_gate_in_place (the same function), rounded to BF16 (the value a BF16 h2 holds), then the
// quantizers' steps (epilogue_mxfp8_blocks.cuh). Clip statistics as SwigluEpilogue's. Rows past the
// expert's count are not written.
//
// Stores: each lane stores the 8-byte piece of its row's block the quad transpose gives it; lane 0 of
// a quad stores the row's two codes as one 16-bit word (the tile's two blocks are codes 2 n and 2 n + 1
// of the row: one half of a k-block word, or two adjacent bytes of a [rows, F/32] row). Plain global
// stores: the Mega kernel fences them for W2's TMA and publishes them per chunk.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_mxfp8_blocks.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/epilogue_swiglu.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"

namespace dist_moe::gemm {

template <class Mainloop>
struct SwigluMxfp8RowsEpilogue {
  using Writer = PaddedStagingWriter;  // not used for h2 (the kernel's other epilogue stages through it)
  static_assert(Mainloop::kKind == GemmKind::kFprop && Mainloop::kSplit && !Mainloop::kPingPong &&
                    Mainloop::kBlockM == 128 && Mainloop::kBlockN == 128 && Mainloop::kMmaPerWg == 1,
                "the cooperative 128x128 split tile: 64 rows and 64 h2 columns per warpgroup");
  static constexpr int kHalf = Mainloop::kBlockN / 2;  // h2 columns per tile: 64
  static constexpr int kBlocks = kHalf / 32;            // MX blocks per row and tile: 2
  static constexpr bool kClipStats = true;
  static constexpr bool kPrefetchL2 = false;
  static constexpr int kOutBytes = 1;

#if defined(__CUDACC__)
  static_assert(kHalf == Mxfp8ColumnStaging::kCols, "the tile's h2 columns are one column staging");

  // (Any writer: the kernel's. It stages h1 when h1 is stored; its bytes hold the h2 columns on their
  // way to the column bundle.)
  template <class AnyWriter>
  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, AnyWriter& w,
                                ClipCounts& counts) {
    static_assert(Mxfp8ColumnStaging::kBytes <= AnyWriter::kBytesPerWg, "the column staging fits the writer's bytes");
    float(&a)[Mainloop::kAccPerMma] = acc[0];
    const int row0 = t.m_block * Mainloop::kBlockM + Mainloop::tile_row(wg, 0);
    if (row0 >= t.num_rows) return;  // uniform per warpgroup
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int quad_lane = lane % 4;
    const int frag_row = row0 + static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int n0 = t.n_block * kHalf;  // the tile's first gate (= h2) column
    // h1 = [gate | up] (training saves it), by ordinary stores: nothing in the launch reads it.
    if (ops.base[kMapH1] != nullptr) store_h1_block<kHalf>(p, ops, t, a, row0, n0, false, w);
    swiglu_gate_in_place<kHalf>(p, a, frag_row, clip_stat_rows(p, t), counts);
    const int32_t real = p.real_rows != nullptr ? p.real_rows[t.expert] : t.num_rows;
#pragma unroll
    for (int j = 0; j < 8; ++j)  // gate registers 4 j + 2 h + {0, 1} hold row lo (h = 0) or hi's h2
#pragma unroll
      for (int i = 0; i < 4; ++i) a[4 * j + i] = frag_row + 8 * (i / 2) < real ? a[4 * j + i] : 0.0f;

    const bool columns = p.mx_col != nullptr;
    const uint32_t staged = columns ? w.borrow() : 0u;  // z as BF16, column-major (Mxfp8ColumnStaging)
    const int64_t f = p.f;
    const int32_t c32 = t.n_block * kBlocks;  // the tile's first 32-column block of h2
    uint8_t* const q = reinterpret_cast<uint8_t*>(ops.base[kMapH2]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows lo, hi
      const int r = frag_row + 8 * h;
      const bool exists = r < t.num_rows;
      const int64_t m = static_cast<int64_t>(t.row_begin) + r;
      const auto pairs = [&](int b) { return mxfp8_block_pairs(a, b, h); };  // the staging writer's rounding
      if (columns) {
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) Mxfp8ColumnStaging::stage(staged, pairs(b), b, r - row0, quad_lane);
      }
      const uint32_t codes = mxfp8_store_row_blocks<kBlocks>(pairs, exists ? q + m * f + 32 * c32 : nullptr, quad_lane);
      if (exists && quad_lane == 0) {
        const int64_t at = m * p.mx_scale_strides.row + (c32 / 4) * static_cast<int64_t>(p.mx_scale_strides.kblock) +
                           c32 % 4;
        *reinterpret_cast<uint16_t*>(p.mx_scales + at) = static_cast<uint16_t>(codes);
      }
    }
    if (columns) {
      const Mxfp8ColumnBundle bundle = mxfp8_column_bundle(p, f);
      Mxfp8ColumnStaging::store(staged, w.bar, bundle, n0, static_cast<int64_t>(t.row_begin) + row0, t.num_rows - row0);
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
