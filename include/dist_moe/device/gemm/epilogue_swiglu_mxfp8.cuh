// SwiGLU epilogue of the MXFP8 W13 FPROP that writes h2 as MXFP8 rows (1 x 32 blocks: E4M3 data, one
// E8M0 RCEIL code per block) instead of BF16 -- upstream's quantization point (the SwiGLU epilogue
// quantizes what W2 reads; upstream_kernels_and_formats.md §2.5, §5.3), for the Mega kernel's
// 128x128 tiles (device/gemm/mega.cuh), where nothing else may stand between W13 and W2. Training
// also saves h1 (BF16, when kMapH1 is set) and h2's compact column bundle (32 x 1 blocks along the
// rows, when EpilogueParams::h2_col is set): the staged W13's h1 and the rows + columns quantizer's
// columns, bit for bit (padding rows: zero x rows give zero h2).
//
// Tile: the MXFP8 mainloop's cooperative 128x128 split tile, 64 gate + 64 up columns; warpgroup w
// owns rows 64 w .. 64 w + 63. Register 4 j + i of a thread (j < 8) is gate column 8 j + 2 (lane % 4)
// + i % 2 of row lo (i < 2: warp row lane / 4) or hi (+ 8), and 4 (j + 8) + i the matching up column
// (epilogue_swiglu.cuh), so h2 column block b (32 columns: j = 4 b .. 4 b + 3) of a row lies in the
// four lanes of a quad, eight values each.
//
// Numerics, bit for bit the staged pair "SwigluEpilogue (BF16 h2) -> the row quantizer": z =
// swiglu_gate_in_place (the same function), rounded to BF16 (the value a BF16 h2 holds), the block's
// NaN-propagating amax over the quad, numeric::e8m0_rceil_from_bf16_amax, each value
// e4m3_rn_satfinite(fl(z * 2^(127 - code))) (quant::e4m3x8, the quantizers' step). Clip statistics
// as SwigluEpilogue's. Rows past the expert's count are not written.
//
// Stores: each lane gathers one 8-column piece of its row's block from the quad (a 4 x 4 transpose of
// 16-bit pairs by shuffles) and stores 8 bytes; lane 0 of a quad stores the row's two codes as one
// 16-bit word (the tile's two blocks are codes 2 n and 2 n + 1 of the row: one half of a k-block
// word, or two adjacent bytes of a [rows, F/32] row). Plain global stores: the Mega kernel fences them
// for W2's TMA and publishes them per chunk.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/epilogue_swiglu.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"
#include "dist_moe/device/numeric/e8m0.cuh"
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "dist_moe/device/ptx/cvt.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"
#include "dist_moe/device/quant/vectors.cuh"

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
  static constexpr bool kPrefetchOut = false;
  static constexpr int kOutBytes = 1;

#if defined(__CUDACC__)

  // (Any writer: the kernel's. It stages h1 when h1 is stored; its bytes hold the h2 columns on their
  // way to the column bundle.)
  template <class AnyWriter>
  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, AnyWriter& w,
                                ClipCounts& counts) {
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

    const bool columns = p.h2_col != nullptr;
    const uint32_t staged = columns ? w.borrow() : 0u;  // z as BF16, column-major [64][kColStride]
    const int64_t f = p.f;
    const int32_t c32 = t.n_block * kBlocks;  // the tile's first 32-column block of h2
    uint8_t* const q = reinterpret_cast<uint8_t*>(ops.base[kMapH2]);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // rows lo, hi
      const int r = frag_row + 8 * h;
      const bool exists = r < t.num_rows;
      const int64_t m = static_cast<int64_t>(t.row_begin) + r;
      uint32_t codes = 0;
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) {
        // The thread's 8 values of block b as BF16 pairs: piece jj holds columns 8 (4 b + jj) + 2 quad_lane + 0, 1.
        const auto pair = [&](int jj) {  // the staging writer's BF16 rounding
          const int base = 4 * (4 * b + jj) + 2 * h;
          return ptx::pack_bf16x2(a[base], a[base + 1]);
        };
        const uint4 packed = make_uint4(pair(0), pair(1), pair(2), pair(3));
        if (columns) stage_column_values(staged, packed, b, r - row0, quad_lane);
        const float amax = quant::group_amax<4>(quant::amax_bf16x8(packed));
        uint8_t code;
        float mult;
        numeric::e8m0_rceil_from_bf16_amax(amax, code, mult);
        const uint2 bytes = quant::e4m3x8(quant::unpack_bf16x8(packed), mult);
        const uint2 piece = gather_piece(bytes, quad_lane);
        if (exists) *reinterpret_cast<uint2*>(q + m * f + 32 * (c32 + b) + 8 * quad_lane) = piece;
        codes |= static_cast<uint32_t>(code) << (8 * b);
      }
      if (exists && quad_lane == 0) {
        const int64_t at = m * p.h2_scale_strides.row + (c32 / 4) * static_cast<int64_t>(p.h2_scale_strides.kblock) +
                           c32 % 4;
        *reinterpret_cast<uint16_t*>(p.h2_scales + at) = static_cast<uint16_t>(codes);
      }
    }
    if (columns) store_columns(p, t, staged, row0, n0, w.bar);
  }

 private:
  static constexpr int kColStride = 64 + 8;  // BF16 values per staged column (the padding spreads the banks)
  static_assert(kHalf * kColStride * 2 <= PaddedStagingWriter::kBytesPerWg, "the staged columns fit the writers");

  // This thread's BF16 pairs of h2 block b (row r of the warpgroup's 64: columns 8 (4 b + jj) +
  // 2 quad_lane + 0, 1 in pair jj) into the column-major staging.
  DMOE_DEVICE static void stage_column_values(uint32_t staged, const uint4& packed, int b, int r, int quad_lane) {
    const uint32_t w[4] = {packed.x, packed.y, packed.z, packed.w};
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int c = 8 * (4 * b + jj) + 2 * quad_lane;
      ptx::st_shared_b16(staged + static_cast<uint32_t>((c * kColStride + r) * 2), static_cast<uint16_t>(w[jj]));
      ptx::st_shared_b16(staged + static_cast<uint32_t>(((c + 1) * kColStride + r) * 2),
                         static_cast<uint16_t>(w[jj] >> 16));
    }
  }

  // h2's 32 x 1 column blocks of the warpgroup's 64 rows (two blocks), from the staging: thread tid
  // takes column tid % 64 of block tid / 64 -- its 32 values, their NaN-propagating amax, the RCEIL
  // code and 32 E4M3 bytes (the rows + columns quantizer's steps) -- into the compact bundle. Blocks
  // past the segment are not written (segments are whole 32-row blocks). Every thread of the
  // warpgroup calls it.
  DMOE_DEVICE static void store_columns(const EpilogueParams& p, const WorkTile& t, uint32_t staged, int row0, int n0,
                                        uint32_t bar) {
    ptx::named_barrier_sync(bar, 128);  // every thread's values staged
    const int tid = static_cast<int>(threadIdx.x % 128);
    const int c = tid % kHalf, b = tid / kHalf;
    if (row0 + 32 * b >= t.num_rows) return;
    uint4 raw[4];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      raw[i] = ptx::ld_shared_v4(staged + static_cast<uint32_t>((c * kColStride + 32 * b) * 2 + 16 * i));
      amax = numeric::amax_nan(amax, quant::amax_bf16x8(raw[i]));
    }
    uint8_t code;
    float mult;
    numeric::e8m0_rceil_from_bf16_amax(amax, code, mult);
    uint2 bytes[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) bytes[i] = quant::e4m3x8(quant::unpack_bf16x8(raw[i]), mult);
    const int64_t rows = *p.h2_col_rows;
    uint8_t* const base = p.h2_col + (p.h2_col_offset != nullptr ? *p.h2_col_offset : 0);
    const int64_t m0 = static_cast<int64_t>(t.row_begin) + row0 + 32 * b, col = n0 + c;
    uint4* dst = reinterpret_cast<uint4*>(base + col * rows + m0);
    dst[0] = make_uint4(bytes[0].x, bytes[0].y, bytes[1].x, bytes[1].y);
    dst[1] = make_uint4(bytes[2].x, bytes[2].y, bytes[3].x, bytes[3].y);
    base[numeric::mxfp8_compact_columns_scales_offset(p.f, rows) + (m0 / 32) * p.f + col] = code;
  }

  // The quad's 4 x 4 transpose of E4M3 pairs: lane l holds pairs p_l[0..3] (pair jj: columns 8 jj +
  // 2 l + 0, 1 of the block); lane l gets piece l, the 8 bytes of columns 8 l .. 8 l + 7 =
  // p_0[l] p_1[l] p_2[l] p_3[l]. Round d: lane l sends its pair (l + d) % 4 to lane (l + d) % 4 and
  // receives pair l from lane (l - d) % 4. Every lane of the warp calls it.
  DMOE_DEVICE static uint2 gather_piece(uint2 bytes, int l) {
    // (Pair i by selects, not an indexed array: a runtime index would put the array on the stack.)
    const auto pair = [&](int i) {
      const uint32_t w = i < 2 ? bytes.x : bytes.y;
      return (i % 2 == 0) ? (w & 0xffffu) : (w >> 16);
    };
    uint64_t piece = static_cast<uint64_t>(pair(l)) << (16 * l);
#pragma unroll
    for (int d = 1; d < 4; ++d) {
      const int to = (l + d) % 4, from = (l + 4 - d) % 4;
      const uint32_t got = __shfl_sync(0xffffffffu, pair(to), (static_cast<int>(threadIdx.x % 32) & ~3) | from);
      piece |= static_cast<uint64_t>(got) << (16 * from);
    }
    return make_uint2(static_cast<uint32_t>(piece), static_cast<uint32_t>(piece >> 32));
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
