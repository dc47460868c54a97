// MXFP8 blocks made straight from a cooperative tile's accumulator fragments, for the epilogues that
// quantize what they compute: the Mega W13's h2 (epilogue_swiglu_mxfp8.cuh) and the W2 DGRAD's dxy
// (epilogue_swiglu_backward_mxfp8.cuh). Bit for bit the quantizers' steps (quant/rows_cols_tile.cuh):
// BF16 values, the block's NaN-propagating amax, numeric::e8m0_rceil_from_bf16_amax, each value
// e4m3_rn_satfinite(fl(x * 2^(127 - code))) (quant::e4m3x8).
//
// Fragment: register 4 j + i of a thread is column 8 j + 2 (lane % 4) + i % 2 of row lo (i < 2: the
// warp's row lane / 4) or hi (+ 8). So a 1 x 32 row block (32 columns: j = 4 b .. 4 b + 3) lies in the
// four lanes of a quad, eight values each, passed around as four BF16 pairs (a uint4 whose pair jj is
// columns 8 (4 b + jj) + 2 (lane % 4) + 0, 1: mxfp8_block_pairs).
//
// Column blocks (32 x 1, along the rows) span the warpgroup's warps, so their values go through shared
// memory: Mxfp8ColumnStaging stages 64 columns of the warpgroup's 64 rows column-major, then each thread
// quantizes one column block into a compact column bundle (numeric::mxfp8_compact_columns_*).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/numeric/e8m0.cuh"
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "dist_moe/device/ptx/barrier.cuh"
#include "dist_moe/device/ptx/cvt.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"
#include "dist_moe/device/quant/vectors.cuh"

namespace dist_moe::gemm {

// A compact MXFP8 column bundle: E4M3 [cols, rows] at base, its E8M0 codes [rows / 32, cols] after it.
struct Mxfp8ColumnBundle {
  uint8_t* base;
  int64_t rows;  // R: the rows of all segments
  int64_t cols;  // C
};

#if defined(__CUDACC__)

// The bundle an epilogue's EpilogueParams name (mx_col, mx_col_offset, mx_col_rows) for C columns.
template <class Params>
DMOE_DEVICE Mxfp8ColumnBundle mxfp8_column_bundle(const Params& p, int64_t cols) {
  return Mxfp8ColumnBundle{p.mx_col + (p.mx_col_offset != nullptr ? *p.mx_col_offset : 0), *p.mx_col_rows, cols};
}

// This thread's part of row block b of fragment row h (0: lo, 1: hi): its four pairs rounded to BF16
// (round to nearest even: the value a BF16 store of the accumulator holds).
template <int kAcc>
DMOE_DEVICE uint4 mxfp8_block_pairs(const float (&a)[kAcc], int b, int h) {
  const auto pair = [&](int jj) {
    const int base = 4 * (4 * b + jj) + 2 * h;
    return ptx::pack_bf16x2(a[base], a[base + 1]);
  };
  return make_uint4(pair(0), pair(1), pair(2), pair(3));
}

// The quad's 4 x 4 transpose of E4M3 pairs: lane l holds pairs p_l[0..3] (pair jj: columns 8 jj +
// 2 l + 0, 1 of the block); lane l gets piece l, the 8 bytes of columns 8 l .. 8 l + 7 =
// p_0[l] p_1[l] p_2[l] p_3[l]. Round d: lane l sends its pair (l + d) % 4 to lane (l + d) % 4 and
// receives pair l from lane (l - d) % 4. Every lane of the warp calls it.
DMOE_DEVICE uint2 mxfp8_quad_gather_piece(uint2 bytes, int l) {
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

// One row block quantized by its quad: `code` (the same in every lane of the quad) and this lane's
// piece, the E4M3 bytes of columns 8 quad_lane .. + 7 of the block (an 8-byte store). Every lane of
// the warp calls it.
struct Mxfp8RowPiece {
  uint2 bytes;
  uint8_t code;
};
DMOE_DEVICE Mxfp8RowPiece mxfp8_quantize_row_block(const uint4& pairs, int quad_lane) {
  const float amax = quant::group_amax<4>(quant::amax_bf16x8(pairs));
  Mxfp8RowPiece r;
  float mult;
  numeric::e8m0_rceil_from_bf16_amax(amax, r.code, mult);
  r.bytes = mxfp8_quad_gather_piece(quant::e4m3x8(quant::unpack_bf16x8(pairs), mult), quad_lane);
  return r;
}

// A fragment row's kBlocks consecutive row blocks (pairs(b): block b's uint4) quantized and, when
// `row` is set (the row exists), this lane's pieces stored at row + 32 b + 8 quad_lane. Returns the
// blocks' codes, block b in byte b. Every lane of the warp calls it.
template <int kBlocks, class Pairs>
DMOE_DEVICE uint32_t mxfp8_store_row_blocks(const Pairs& pairs, uint8_t* row, int quad_lane) {
  static_assert(kBlocks <= 4, "the codes of at most four blocks: one 32-bit word");
  uint32_t codes = 0;
#pragma unroll
  for (int b = 0; b < kBlocks; ++b) {
    const Mxfp8RowPiece piece = mxfp8_quantize_row_block(pairs(b), quad_lane);
    if (row != nullptr) *reinterpret_cast<uint2*>(row + 32 * b + 8 * quad_lane) = piece.bytes;
    codes |= static_cast<uint32_t>(piece.code) << (8 * b);
  }
  return codes;
}

// 64 columns of a warpgroup's 64 rows staged column-major as BF16 (kStride values per column: the
// padding spreads the banks) in kBytes of the epilogue writer's staging (its borrow()).
struct Mxfp8ColumnStaging {
  static constexpr int kCols = 64;
  static constexpr int kStride = 64 + 8;
  static constexpr int kBytes = kCols * kStride * 2;

  // This thread's pairs of block b (< 2) of the 64 columns, row r (< 64) of the warpgroup's rows.
  DMOE_DEVICE static void stage(uint32_t staged, const uint4& pairs, int b, int r, int quad_lane) {
    const uint32_t w[4] = {pairs.x, pairs.y, pairs.z, pairs.w};
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      const int c = 8 * (4 * b + jj) + 2 * quad_lane;
      ptx::st_shared_b16(staged + static_cast<uint32_t>((c * kStride + r) * 2), static_cast<uint16_t>(w[jj]));
      ptx::st_shared_b16(staged + static_cast<uint32_t>(((c + 1) * kStride + r) * 2),
                         static_cast<uint16_t>(w[jj] >> 16));
    }
  }

  // The staged columns' 32 x 1 blocks into `dst` -- columns col0 .. col0 + 63, rows m0 .. m0 + 63 of
  // the bundle: thread tid takes column tid % 64 of row block tid / 64 (its 32 values, their amax, the
  // code, 32 E4M3 bytes). Row blocks at or past `rows_left` (the segment's end; segments are whole
  // 32-row blocks) are not written. Every thread of the warpgroup calls it; `bar` is its barrier.
  DMOE_DEVICE static void store(uint32_t staged, uint32_t bar, const Mxfp8ColumnBundle& dst, int64_t col0, int64_t m0,
                                int rows_left) {
    ptx::named_barrier_sync(bar, 128);  // every thread's values staged
    const int tid = static_cast<int>(threadIdx.x % 128);
    const int c = tid % kCols, b = tid / kCols;
    if (32 * b >= rows_left) return;
    uint4 raw[4];
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      raw[i] = ptx::ld_shared_v4(staged + static_cast<uint32_t>((c * kStride + 32 * b) * 2 + 16 * i));
      amax = numeric::amax_nan(amax, quant::amax_bf16x8(raw[i]));
    }
    uint8_t code;
    float mult;
    numeric::e8m0_rceil_from_bf16_amax(amax, code, mult);
    uint2 bytes[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) bytes[i] = quant::e4m3x8(quant::unpack_bf16x8(raw[i]), mult);
    const int64_t m = m0 + 32 * b, col = col0 + c;
    uint4* q = reinterpret_cast<uint4*>(dst.base + col * dst.rows + m);
    q[0] = make_uint4(bytes[0].x, bytes[0].y, bytes[1].x, bytes[1].y);
    q[1] = make_uint4(bytes[2].x, bytes[2].y, bytes[3].x, bytes[3].y);
    dst.base[numeric::mxfp8_compact_columns_scales_offset(dst.cols, dst.rows) + (m / 32) * dst.cols + col] = code;
  }
};

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
