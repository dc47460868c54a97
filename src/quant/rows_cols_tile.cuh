// The rows + columns quantizers' pieces, shared by the kernel that reads BF16 x
// (quantize_rows_cols_kernel) and the one that computes its tiles from SwiGLU backward's inputs
// (swiglu_backward_quantize_kernel): a CTA covers a region of rt x rf 128x128 tiles (tokens x
// features); its prologue loads the group table, the format's tables and the region's real-row
// bits; each tile's body writes the row blocks from the thread's own vectors and the token-axis
// (WGRAD) blocks through shared memory; the region's scales are staged and stored at its end.
//
// Why regions: a tile holds 4 MXFP8 scale bytes of each of its 128 token rows and 4 of each of its
// 128 feature rows, and stored per tile those were 256 lines of 4 bytes (partly written sectors);
// per region they are rows of 4 * rf and 4 * rt bytes, 128 * (1/rf + 1/rt) requests per tile (96
// at 2 x 4). Token-block-major column scales (the compact bundles', since session 37: G82) go out
// as whole lines instead, 4 * rt rows of 128 * rf bytes, as do FP8 blockwise scales (one per tile
// row and column) in the k-block-major layouts.
//
// Output features: a body writes its tile's features at out_col0 + (input feature), so one input
// feature range can feed a slice of a wider output (the fused kernel's dgate at 0, dup at F).
#pragma once

#include <cstdint>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {

constexpr int kRegionTiles = 8;   // tiles per CTA region, rt * rf
constexpr int kMaxGroups = 1024;  // expert groups the group table (in a ring stage) holds

// A [rows][blocks] grid of scales staged in shared memory (`ld` per row) to
// dst[i * row_stride + j * block_stride], lanes along dst's contiguous direction: 4-byte words
// where the bytes of a row (or, block-major, of a block) are contiguous and aligned, else one scale
// per lane. The tile's 256 threads (tid) store it.
template <class Scale>
__device__ __forceinline__ void store_scale_grid(const Scale* staged, int ld, int rows, int blocks, Scale* dst,
                                                 int64_t row_stride, int64_t block_stride, unsigned tid = threadIdx.x) {
  if constexpr (sizeof(Scale) == 1) {
    const bool aligned = reinterpret_cast<uintptr_t>(dst) % 4 == 0;
    if (block_stride == 1 && row_stride % 4 == 0 && aligned && blocks % 4 == 0) {
      const int words = blocks / 4;
      for (int idx = tid; idx < rows * words; idx += kTileThreads) {
        const int i = idx / words, w = idx % words;
        *reinterpret_cast<uint32_t*>(dst + i * row_stride + 4 * w) =
            *reinterpret_cast<const uint32_t*>(staged + i * ld + 4 * w);
      }
      return;
    }
    if (row_stride == 1 && block_stride % 4 == 0 && aligned && rows % 4 == 0) {  // block-major: 4 rows a word
      const int words = rows / 4;
      for (int idx = tid; idx < blocks * words; idx += kTileThreads) {
        const int j = idx / words, i = 4 * (idx % words);
        const uint32_t word = staged[i * ld + j] | staged[(i + 1) * ld + j] << 8 | staged[(i + 2) * ld + j] << 16 |
                              static_cast<uint32_t>(staged[(i + 3) * ld + j]) << 24;
        *reinterpret_cast<uint32_t*>(dst + i + j * block_stride) = word;
      }
      return;
    }
  }
  if (block_stride == 1 && row_stride != 1) {
    for (int idx = tid; idx < rows * blocks; idx += kTileThreads) {
      const int i = idx / blocks, j = idx % blocks;
      dst[i * row_stride + j] = staged[i * ld + j];
    }
  } else {
    for (int idx = tid; idx < rows * blocks; idx += kTileThreads) {
      const int j = idx / rows, i = idx % rows;
      dst[i * row_stride + j * block_stride] = staged[i * ld + j];
    }
  }
}

// The region shape (rt x rf tiles, rt * rf <= kRegionTiles) with the least estimated time per
// tile (region_tile_cost) divided by the wave efficiency; MXFP8's partial scale rows
// (128 * (1/rf + 1/rt) L2 requests per tile next to 512 for the data) only break ties. The estimate
// by L2 requests alone chose 2 x 4 for MXFP8: 4.5 waves at dsv3_prefill, 0.77x the copy against
// 0.81x at 1 x 2 (s28 r2-r3).
inline RegionShape choose_rows_cols_region(int64_t tiles_t, int64_t tiles_f, bool byte_scales, int64_t slots) {
  return choose_region(tiles_t, tiles_f, 1, slots, kRegionTiles, kRegionTiles, [&](int64_t rt, int64_t rf) {
    return region_tile_cost(rt * rf, byte_scales ? mxfp8_scale_row_requests(rt, rf) : 0.0);
  });
}

// The checks of both rows + columns launchers (name: the API function's) on the groups, the row
// capacity (a multiple of the block with columns, of 32 without) and the outputs.
template <class Scale>
void check_rows_cols_outputs(const char* name, int block, int64_t capacity, const RowGroups& groups,
                             const QuantizedOut<Scale>& rows, const QuantizedOut<Scale>& cols) {
  check_group_counts(name, groups);
  const int64_t row_multiple = cols.present() ? block : numeric::kMXBlock;
  DMOE_CHECK_ARG(capacity % row_multiple == 0, name, ": the row capacity ", capacity, " must be a multiple of ",
                 row_multiple);
  DMOE_CHECK_ARG(groups.num_groups >= 1 && groups.num_groups <= kMaxGroups, name, ": ", groups.num_groups,
                 " groups (1 .. ", kMaxGroups, " supported)");
  DMOE_CHECK_ARG(!rows.compact && rows.q_offset == nullptr, name,
                 ": the row output cannot be compact (compact, q_offset are for the column output)");
  DMOE_CHECK_ARG(cols.compact || cols.q_offset == nullptr, name, ": q_offset is set but compact is not");
  DMOE_CHECK_ARG(!cols.present() || cols.compact || cols.q_row_stride % 16 == 0, name, ": the transposed row stride ",
                 cols.q_row_stride, " must be a multiple of 16 bytes");
  DMOE_CHECK_ARG(!cols.compact || reinterpret_cast<uintptr_t>(cols.q) % 16 == 0, name,
                 ": compact columns need q 16-byte aligned");
  DMOE_CHECK_ARG(cols.scale_word_ld == 0, name, ": scale_word_ld is for the row output");
  DMOE_CHECK_ARG(rows.scale_word_ld == 0 || (sizeof(Scale) == 1 && rows.scale_word_ld >= capacity &&
                                             reinterpret_cast<uintptr_t>(rows.scales) % 4 == 0),
                 name, ": k-block-major row scale words (scale_word_ld ", rows.scale_word_ld,
                 ") are MXFP8's, need scale_word_ld >= the row capacity ", capacity, " and 4-byte aligned scales");
}

// The grid of a rows + columns kernel over tiles_t x tiles_f tiles in regions of 2^log2_rt x 2^log2_rf.
inline dim3 rows_cols_grid(const char* name, int64_t tiles_t, int64_t tiles_f, int log2_rt, int log2_rf) {
  DMOE_CHECK_ARG(log2_rt >= 0 && log2_rf >= 0 && (1 << (log2_rt + log2_rf)) <= kRegionTiles, name, ": region 2^",
                 log2_rt, " x 2^", log2_rf, " tiles (at most ", kRegionTiles, ")");
  return dim3(static_cast<unsigned>((tiles_f + (1 << log2_rf) - 1) >> log2_rf),
              static_cast<unsigned>((tiles_t + (1 << log2_rt) - 1) >> log2_rt));
}

// A region's rows: the group table copied to `offsets` (shared memory), the format's tables and
// (kCompactCols) the compact columns' offset and row stride R = used into compact_offset /
// compact_ld, then (after a barrier) the layout checks and bit k of real_bits[i] = "row m_first +
// 32 i + k is one of its expert's real tokens" for the region's tiles_t * 128 rows. Every one of the
// CTA's kThreads threads calls it.
template <class F, int kThreads, bool kCompactCols>
__device__ __forceinline__ void rows_cols_region_prologue(int32_t* offsets, const RowGroups& groups,
                                                          const QuantizedOut<typename F::Scale>& cols, int64_t used,
                                                          int64_t m_first, int64_t end, int tiles_t,
                                                          float* factor_tables, uint32_t* real_bits,
                                                          int64_t& compact_offset, int64_t& compact_ld) {
  for (int g = threadIdx.x; g <= groups.num_groups; g += kThreads) offsets[g] = groups.offsets_G1[g];
  F::fill_tables(factor_tables);
  if constexpr (kCompactCols) {
    if (threadIdx.x == 0) {
      compact_offset = cols.q_offset != nullptr ? *cols.q_offset : 0;
      compact_ld = used;
      if (blockIdx.x == 0 && blockIdx.y == 0 && compact_offset % 128 != 0)
        layout_trap("the compact columns' q_offset", compact_offset, 128);
    }
  }
  __syncthreads();
  // Column blocks restart at every expert; row blocks run along features, so without the column
  // output 32-row groups (the block-scaled routing's padding) will do.
  const int group_multiple = cols.present() ? F::kBlock : numeric::kMXBlock;
  if (blockIdx.x == 0 && blockIdx.y == 0)
    for (int g = threadIdx.x; g <= groups.num_groups; g += kThreads)
      if (offsets[g] % group_multiple != 0) layout_trap("an expert's first row", offsets[g], group_multiple);
  for (int i = threadIdx.x; i < tiles_t * kTile; i += kThreads) {  // warp-uniform: tiles_t * kTile % 32 == 0
    const bool is_real = row_is_real(offsets, groups, m_first + i, end);
    const uint32_t bits = __ballot_sync(0xffffffffu, is_real);
    if (i % 32 == 0) real_bits[i / 32] = bits;
  }
}

// The shared-memory state one stream of tiles stages through its region: per-chunk column maxima
// (FP8 blockwise), the region's row scales [token][feature block] and column scales
// [feature][token block], each grid `ld_*` scales per row.
template <class F>
struct RowsColsStaging {
  uint16_t (*chunk_amax)[kTile];
  typename F::Scale* row_scale;
  typename F::Scale* col_scale;
  int ld_row, ld_col;
};

// One tile (token tile tt, feature tile tf of the region; first token m0, first input feature c0)
// landed in `tile`, by the 256 threads of a tile (tid(): the thread's index among them, read at
// each use so that it stays a special-register read rather than a live register): rows below `end` are stored, features below
// in_cols; rows whose real-bit (tile_real) is clear quantize as zeros. Its two barriers are
// __syncthreads: in a CTA running two tiles at once, both run this in step. `tile` is scratch
// after the first. compact_offset / compact_ld: the compact columns' offset and row stride (shared
// memory, read at their uses).
template <class F, bool kCompactCols, class Tid>
__device__ __forceinline__ void quantize_rows_cols_tile(Bf16Tile& tile, Tid tid, int tt, int tf, int64_t m0, int64_t c0,
                                                        int64_t end, int64_t in_cols, int64_t out_col0,
                                                        const uint32_t* tile_real, const float* factor_tables,
                                                        const RowsColsStaging<F>& st,
                                                        const QuantizedOut<typename F::Scale>& rows,
                                                        const QuantizedOut<typename F::Scale>& cols,
                                                        const int64_t& compact_offset, const int64_t& compact_ld) {
  using Scale = typename F::Scale;
  constexpr int kGroup = (F::kBlock < kTile ? F::kBlock : kTile) / kVec;
  constexpr int kChunk = 32;                           // tokens per column-pass thread
  constexpr int kChunks = kTile / kChunk;              // 4: one per warp of a warp quartet
  constexpr int kChunksPerBlock = F::kBlock / kChunk;  // 1 (MXFP8) or 4 (FP8 blockwise)
  constexpr int kBlocksPerTile = kTile / F::kBlock;    // blocks of a tile row (and column): 4 or 1
  const int warp = tid() / 32, lane = tid() % 32;
  // Capacity rows past an expert's count quantize as zeros; a tile without any (every tile of a
  // balanced batch) skips the masking.
  const bool all_real = (tile_real[0] & tile_real[1] & tile_real[2] & tile_real[3]) == 0xffffffffu;
  if (rows.present()) {
    const int64_t c = c0 + (tid() % kTileSlots) * kVec;
    // Row tile_row(i)'s 8 output bytes: one 64-bit product per tile, then a step per vector.
    uint8_t* q_ptr = rows.q + (m0 + tile_row(0, tid())) * rows.q_row_stride + out_col0 + c;
    const int64_t q_step = kTileRowStep * rows.q_row_stride;
    const int rows_left = static_cast<int>(end - m0 < kTile ? end - m0 : kTile);  // tile rows < rows_left are stored
    const bool col_in = c < in_cols;
    uint4 raw[kTileLoads];
    read_own_vectors(raw, tile, tid());
    if (!all_real) {
#pragma unroll
      for (int i = 0; i < kTileLoads; ++i)
        if (!((tile_real[tile_row(i, tid()) / 32] >> (tile_row(i, tid()) % 32)) & 1u)) raw[i] = make_uint4(0, 0, 0, 0);
    }
    // Group maxima two vectors per shuffle (16-bit halves): vectors i and i + 1.
    const auto pair_amax = [&](int i) { return group_amax16x2<kGroup>(amax16x2_bf16x8(raw[i], raw[i + 1])); };
    if constexpr (kGroup == kTileSlots) {
      float amax[kTileLoads];
#pragma unroll
      for (int i = 0; i < kTileLoads; i += 2) {
        const uint32_t packed = pair_amax(i);
        amax[i] = amax16_lo(packed);
        amax[i + 1] = amax16_hi(packed);
      }
      // One block per tile row (FP8 blockwise), its amax in all 16 lanes of a half-warp: lane
      // 2i + h (< 16) computes the scale and multiplier of vector i's row of half-warp h once
      // (two table look-ups), instead of every lane for all eight rows.
      float row_amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kTileLoads; ++i) {
        const float a = __shfl_sync(0xffffffffu, amax[i], (lane & 1) * 16);
        if (((lane >> 1) & (kTileLoads - 1)) == i) row_amax = a;
      }
      Scale scale;
      float mult;
      F::from_bf16_amax(row_amax, factor_tables, scale, mult);
      if (lane < 16) {
        const int r = warp * 2 + (lane & 1) + kTileRowStep * (lane >> 1);  // tile_row(lane / 2) of half lane & 1
        st.row_scale[(tt * kTile + r) * st.ld_row + tf] = scale;
      }
#pragma unroll
      for (int i = 0; i < kTileLoads; ++i) {
        const float m = __shfl_sync(0xffffffffu, mult, 2 * i + (lane >> 4));
        const int r = tile_row(i, tid());
        if (r < rows_left && col_in) *reinterpret_cast<uint2*>(q_ptr) = e4m3x8(unpack_bf16x8(raw[i]), m);
        q_ptr += q_step;
      }
    } else {
      // Each pair's maxima just before its quantization (at 80 registers, all eight live at once spilled).
      uint32_t packed = 0;
#pragma unroll
      for (int i = 0; i < kTileLoads; ++i) {
        if (i % 2 == 0) packed = pair_amax(i);
        const int r = tile_row(i, tid());
        Scale scale;
        float mult;
        F::from_bf16_amax(i % 2 == 0 ? amax16_lo(packed) : amax16_hi(packed), factor_tables, scale, mult);
        if (r < rows_left && col_in) *reinterpret_cast<uint2*>(q_ptr) = e4m3x8(unpack_bf16x8(raw[i]), mult);
        q_ptr += q_step;
        if ((c - c0) % F::kBlock == 0)
          st.row_scale[(tt * kTile + r) * st.ld_row + tf * kBlocksPerTile + (c - c0) / F::kBlock] = scale;
      }
    }
  }
  if (!cols.present()) return;
  // Token-axis blocks. Warp w takes the 32-token chunk w % 4 of 64 features (two per lane, one
  // 4-byte shared load per token: a warp reads 128 contiguous bytes, no bank conflict) and keeps
  // its 2 x 32 values in registers (padding rows as zeros). An FP8-blockwise block spans the four
  // chunks: their amaxes meet in shared memory.
  const int chunk = warp % kChunks;
  const int f0 = (warp / kChunks) * 64 + 2 * lane;  // the column-pass lane's two features in a tile
  uint32_t pair[kChunk];
  uint32_t amax2 = 0;  // |bf16| bits of both features, two lanes of 16 bits
  const uint32_t chunk_real = tile_real[chunk];  // warp-uniform
  if (chunk_real == 0xffffffffu) {
#pragma unroll
    for (int k = 0; k < kChunk; ++k) pair[k] = *reinterpret_cast<const uint32_t*>(&tile[chunk * kChunk + k][f0]);
  } else {
#pragma unroll
    for (int k = 0; k < kChunk; ++k)
      pair[k] = (chunk_real >> k) & 1u ? *reinterpret_cast<const uint32_t*>(&tile[chunk * kChunk + k][f0]) : 0u;
  }
#pragma unroll
  for (int k = 0; k < kChunk; ++k) amax2 = __vmaxu2(amax2, abs_bf16x2(pair[k]));
  float a0 = __uint_as_float(amax2 << 16), a1 = __uint_as_float(amax2 & 0xffff0000u);
  if constexpr (kChunksPerBlock > 1) *reinterpret_cast<uint32_t*>(&st.chunk_amax[chunk][f0]) = amax2;
  __syncthreads();  // every value is in registers: the stage is scratch from here on
  if constexpr (kChunksPerBlock > 1) {
    const int first = chunk / kChunksPerBlock * kChunksPerBlock;
    for (int k = first; k < first + kChunksPerBlock; ++k) {
      const uint32_t other = *reinterpret_cast<const uint32_t*>(&st.chunk_amax[k][f0]);
      a0 = numeric::amax_nan(a0, __uint_as_float(other << 16));
      a1 = numeric::amax_nan(a1, __uint_as_float(other & 0xffff0000u));
    }
  }
  // The transposed bytes go to the stage as [feature][token] (16 KiB, swizzled: store_byte_tile)
  // and then out in whole rows.
  auto* qt = reinterpret_cast<uint8_t (*)[kTile]>(&tile[0][0]);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    Scale scale;
    float mult;
    F::from_bf16_amax(h == 0 ? a0 : a1, factor_tables, scale, mult);
    uint32_t w[kChunk / 4];
#pragma unroll
    for (int k = 0; k < kChunk; k += 4) {
      float f[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        f[j] = numeric::mul_rn(h == 0 ? ptx::bf16_lo_to_float(pair[k + j]) : ptx::bf16_hi_to_float(pair[k + j]), mult);
      w[k / 4] = numeric::float2_to_e4m3x2(f[0], f[1]) |
                 (static_cast<uint32_t>(numeric::float2_to_e4m3x2(f[2], f[3])) << 16);
    }
    const int f = f0 + h;
    *reinterpret_cast<uint4*>(&qt[f][staged_piece(f, 2 * chunk) * 16]) = make_uint4(w[0], w[1], w[2], w[3]);
    *reinterpret_cast<uint4*>(&qt[f][staged_piece(f, 2 * chunk + 1) * 16]) = make_uint4(w[4], w[5], w[6], w[7]);
    if (chunk % kChunksPerBlock == 0)
      st.col_scale[(tf * kTile + f) * st.ld_col + tt * kBlocksPerTile + chunk / kChunksPerBlock] = scale;
  }
  __syncthreads();
  const auto keep = [&](int f, int off) { return c0 + f < in_cols && m0 + off < end; };
  if constexpr (kCompactCols)
    store_byte_tile(qt, cols.q + compact_offset + (out_col0 + c0) * compact_ld + m0, compact_ld, keep, tid());
  else store_byte_tile(qt, cols.q + (out_col0 + c0) * cols.q_row_stride + m0, cols.q_row_stride, keep, tid());
}

// A region's staged MXFP8 row scales ([token][ld] bytes, ld = 4 rf) to the k-block-major word grid
// (QuantizedOut::scale_word_ld): token i's codes of blocks out_b0 + jb. Whole words (lanes along the
// tokens: 128-byte runs) where the region's blocks are whole 128-column blocks, else byte stores.
__device__ __forceinline__ void store_scale_words(const uint8_t* staged, int ld, int tokens, int blocks, uint8_t* dst,
                                                  int64_t word_ld, int64_t out_b0, unsigned tid) {
  if (out_b0 % 4 == 0 && blocks % 4 == 0) {
    const int words = blocks / 4;
    for (int idx = tid; idx < tokens * words; idx += kTileThreads) {
      const int w = idx / tokens, i = idx % tokens;
      reinterpret_cast<uint32_t*>(dst)[(out_b0 / 4 + w) * word_ld + i] =
          *reinterpret_cast<const uint32_t*>(staged + i * ld + 4 * w);
    }
    return;
  }
  for (int idx = tid; idx < tokens * blocks; idx += kTileThreads) {
    const int jb = idx / tokens, i = idx % tokens;
    const int64_t b = out_b0 + jb;
    dst[4 * ((b / 4) * word_ld + i) + b % 4] = staged[i * ld + jb];
  }
}

// The region's staged scales out (after the walk's closing barrier), by a tile's 256 threads:
// tokens [m_first, min(end, m_first + tiles_t * 128)), input features [c_first, min(in_cols, ...)),
// written at output feature out_col0 + the input feature. Compact columns: their scales follow
// the data of all out_cols output features.
template <class F, bool kCompactCols>
__device__ __forceinline__ void store_region_scales(unsigned tid, const RowsColsStaging<F>& st, int64_t m_first,
                                                    int64_t c_first, int64_t end, int64_t in_cols, int tiles_t,
                                                    int tiles_f, int64_t out_col0, int64_t out_cols,
                                                    const QuantizedOut<typename F::Scale>& rows,
                                                    QuantizedOut<typename F::Scale> cols,
                                                    const int64_t& compact_offset, const int64_t& compact_ld) {
  using Scale = typename F::Scale;
  const int64_t tokens = (end - m_first < int64_t{tiles_t} * kTile) ? end - m_first : int64_t{tiles_t} * kTile;
  const int64_t features = (in_cols - c_first < int64_t{tiles_f} * kTile) ? in_cols - c_first : int64_t{tiles_f} * kTile;
  const int64_t out_c = out_col0 + c_first;
  if (rows.present()) {
    const int row_blocks = static_cast<int>(features / F::kBlock);
    if (rows.scale_word_ld > 0) {  // MXFP8 only (check_rows_cols_outputs)
      if constexpr (sizeof(Scale) == 1)
        store_scale_words(st.row_scale, st.ld_row, static_cast<int>(tokens), row_blocks, rows.scales + 4 * m_first,
                          rows.scale_word_ld, out_c / F::kBlock, tid);
    } else {
      store_scale_grid(st.row_scale, st.ld_row, static_cast<int>(tokens), row_blocks,
                       rows.scales + m_first * rows.scale_row_stride + (out_c / F::kBlock) * rows.scale_block_stride,
                       rows.scale_row_stride, rows.scale_block_stride, tid);
    }
  }
  if (cols.present()) {
    if constexpr (kCompactCols) {  // token-block-major [R / block, C] after the data
      // MXFP8: E8M0 [R / 32, C]; FP8 blockwise: FP32 [R / 128, C] (the WGRAD GEMM's layout). Both
      // start at align128(C * R).
      static_assert(numeric::mxfp8_compact_columns_scales_offset(1000, 128) ==
                    numeric::fp8_blockwise_compact_columns_scales_offset(1000, 128));
      cols.scales = reinterpret_cast<Scale*>(cols.q + compact_offset +
                                             mxfp8_compact_columns_scales_offset(out_cols, compact_ld));
      cols.scale_row_stride = 1;
      cols.scale_block_stride = out_cols;
    }
    store_scale_grid(st.col_scale, st.ld_col, static_cast<int>(features), static_cast<int>(tokens / F::kBlock),
                     cols.scales + out_c * cols.scale_row_stride + (m_first / F::kBlock) * cols.scale_block_stride,
                     cols.scale_row_stride, cols.scale_block_stride, tid);
  }
}

}  // namespace dist_moe::quant
