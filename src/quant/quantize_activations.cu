// E4M3 activation quantizers (MXFP8 1x32 and FP8 blockwise 1x128), one template per kernel:
//   quantize_rows_kernel      blocks along cols; each thread issues its four 16-byte loads before
//                             any math, kBlock/8 lanes share a block (shuffles)
//   quantize_rows_cols_kernel both orientations from one read: a CTA walks a region of up to 8
//                             128x128 tiles (tokens x features) through a ring of cp.async stages
//                             (two tiles in flight while one is processed); the rows come from the
//                             thread's own vectors, the token-axis (WGRAD) blocks from shared memory,
//                             staged transposed in the tile's own stage and written as whole 128-byte
//                             rows; both orientations' scales are staged for the region and written
//                             at its end. Gathered x: a tile's rows come through the row-pointer
//                             table (one pointer per row per tile, shuffled to the row's threads);
//                             compact columns (both formats): their own instantiation
// Memory-bound: the prediction and the measurements are in docs/perf_history.md (G37, G38).
#include <type_traits>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kRowsThreads = 256;
constexpr int kRowsLoads = 4;  // 16-byte loads per thread, all issued before any math (bytes in flight)

template <class F>
__global__ void __launch_bounds__(kRowsThreads) quantize_rows_kernel(Bf16Matrix x, QuantizedOut<typename F::Scale> out,
                                                                     uint32_t vecs_per_row, uint32_t total) {
  constexpr int kGroup = F::kBlock / kVec;  // lanes sharing one block
  const uint32_t base = blockIdx.x * (kRowsThreads * kRowsLoads) + threadIdx.x;
  // Slice j of the CTA is vectors base + j * 256. cols % kBlock == 0: a group is all in range or
  // all out, and a warp whose first lane is out has no lane in range (it skips the slice whole).
  uint4 raw[kRowsLoads];
  int64_t row[kRowsLoads], col[kRowsLoads];
#pragma unroll
  for (int j = 0; j < kRowsLoads; ++j) {
    const uint32_t i = base + j * kRowsThreads;
    row[j] = i / vecs_per_row;
    col[j] = static_cast<int64_t>(i - static_cast<uint32_t>(row[j]) * vecs_per_row) * kVec;
    raw[j] = make_uint4(0, 0, 0, 0);
    if (i < total)
      raw[j] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x.data) + row[j] * x.row_stride + col[j]));
  }
#pragma unroll
  for (int j = 0; j < kRowsLoads; ++j) {
    const uint32_t i = base + j * kRowsThreads;
    if (i - (threadIdx.x & 31) >= total) break;  // warp-uniform
    const float amax = group_amax<kGroup>(amax_bf16x8(raw[j]));
    if (i >= total) continue;
    typename F::Scale scale;
    float mult;
    F::from_amax(amax, scale, mult);
    *reinterpret_cast<uint2*>(out.q + row[j] * out.q_row_stride + col[j]) = e4m3x8(unpack_bf16x8(raw[j]), mult);
    if (col[j] % F::kBlock == 0)
      out.scales[row[j] * out.scale_row_stride + (col[j] / F::kBlock) * out.scale_block_stride] = scale;
  }
}

template <class F>
void launch_rows(const Bf16Matrix& x, const QuantizedOut<typename F::Scale>& out, cudaStream_t stream,
                 const char* name) {
  DMOE_CHECK_ARG(x.cols % F::kBlock == 0, name, ": cols=", x.cols, " must be a multiple of ", F::kBlock);
  DMOE_CHECK_ARG(x.row_ptrs == nullptr, name, ": gathered rows (row_ptrs) are not supported (rows+cols only)");
  DMOE_CHECK_ARG(!out.compact && out.q_offset == nullptr, name,
                 ": compact outputs (compact, q_offset) are for the rows+columns quantizers' columns only");
  DMOE_CHECK_ARG(x.row_stride % kVec == 0 && out.q_row_stride % 8 == 0, name,
                 ": row strides must keep 16-byte (input) and 8-byte (output) alignment");
  const int64_t vecs = x.rows * (x.cols / kVec);
  if (vecs == 0) return;
  DMOE_CHECK_ARG(vecs < (int64_t{1} << 31), name, ": ", x.rows, " x ", x.cols, " elements exceed one launch");
  const int64_t blocks = (vecs + kRowsThreads * kRowsLoads - 1) / (kRowsThreads * kRowsLoads);
  quantize_rows_kernel<F><<<static_cast<unsigned>(blocks), kRowsThreads, 0, stream>>>(
      x, out, static_cast<uint32_t>(x.cols / kVec), static_cast<uint32_t>(vecs));
  DMOE_CUDA_CHECK_LAUNCH();
}

// ---- both orientations ---------------------------------------------------------------------------
// A CTA covers a region of rt x rf tiles (tokens x features, rt * rf <= 8) and keeps the region's
// row and column scales in shared memory until its end: a tile holds 4 MXFP8 scale bytes of each
// of its 128 token rows and 4 of each of its 128 feature rows, and stored per tile those were 256
// lines of 4 bytes (partly written sectors); per region they are rows of 4 * rf and 4 * rt bytes,
// 128 * (1/rf + 1/rt) requests per tile (96 at 2 x 4). FP8 blockwise scales (one per tile row and
// column) go out as contiguous runs in the k-block-major layouts.

constexpr int kRegionTiles = 8;   // tiles per CTA region, rt * rf
constexpr int kMaxGroups = 1024;  // expert groups the group table (in a ring stage) holds

// A [rows][blocks] grid of scales staged in shared memory (`ld` per row) to
// dst[i * row_stride + j * block_stride], lanes along dst's contiguous direction: 4-byte words of a
// row where the bytes of a row are contiguous and aligned, else one scale per lane.
template <class Scale>
__device__ __forceinline__ void store_scale_grid(const Scale* staged, int ld, int rows, int blocks, Scale* dst,
                                                 int64_t row_stride, int64_t block_stride) {
  if constexpr (sizeof(Scale) == 1) {
    if (block_stride == 1 && row_stride % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % 4 == 0 && blocks % 4 == 0) {
      const int words = blocks / 4;
      for (int idx = threadIdx.x; idx < rows * words; idx += kTileThreads) {
        const int i = idx / words, w = idx % words;
        *reinterpret_cast<uint32_t*>(dst + i * row_stride + 4 * w) =
            *reinterpret_cast<const uint32_t*>(staged + i * ld + 4 * w);
      }
      return;
    }
  }
  if (block_stride == 1 && row_stride != 1) {
    for (int idx = threadIdx.x; idx < rows * blocks; idx += kTileThreads) {
      const int i = idx / blocks, j = idx % blocks;
      dst[i * row_stride + j] = staged[i * ld + j];
    }
  } else {
    for (int idx = threadIdx.x; idx < rows * blocks; idx += kTileThreads) {
      const int j = idx / rows, i = idx % rows;
      dst[i * row_stride + j * block_stride] = staged[i * ld + j];
    }
  }
}

// A two-stage ring (64 KiB) and at most 80 registers: three CTAs per SM, 24 warps to cover the three
// barriers per tile (G40, G42), one tile loading per CTA while a body runs (96 KiB in flight per SM).
constexpr int kRowsColsStages = 2;
constexpr int kRowsColsCtasPerSm = 3;
constexpr size_t kRowsColsRingBytes = sizeof(Bf16Tile) * kRowsColsStages;

// kCompactCols: `cols` is a compact column bundle (MXFP8 or FP8 blockwise), in an instantiation
// of its own: the strided kernel keeps its stores' addresses in constant-bank parameters, with no register to spare.
template <class F, bool kCompactCols>
__global__ void __launch_bounds__(kTileThreads, kRowsColsCtasPerSm)
    quantize_rows_cols_kernel(Bf16Matrix x, RowGroups groups, QuantizedOut<typename F::Scale> rows,
                              QuantizedOut<typename F::Scale> cols, int log2_rt, int log2_rf) {
  using Scale = typename F::Scale;
  constexpr int kGroup = (F::kBlock < kTile ? F::kBlock : kTile) / kVec;
  constexpr int kChunk = 32;                           // tokens per column-pass thread
  constexpr int kChunks = kTile / kChunk;              // 4: one per warp of a warp quartet
  constexpr int kChunksPerBlock = F::kBlock / kChunk;  // 1 (MXFP8) or 4 (FP8 blockwise)
  constexpr int kBlocksPerTile = kTile / F::kBlock;    // blocks of a tile row (and column): 4 or 1
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  Bf16Tile* ring = reinterpret_cast<Bf16Tile*>(dynamic_smem);
  __shared__ uint32_t real_bits[kRegionTiles * kTile / 32];  // bit k of word i: row 32 i + k is a real token
  __shared__ float factor_tables[F::kTableEntries];           // FP8 blockwise: scale and multiplier by table
  __shared__ uint16_t chunk_amax[kChunks][kTile];  // column pass: |bf16| bits per (chunk, feature)
  // The region's scales: row scales [token][feature block], column scales [feature][token block].
  __shared__ __align__(16) Scale row_scale[kRegionTiles * kTile * kBlocksPerTile];
  __shared__ __align__(16) Scale col_scale[kRegionTiles * kTile * kBlocksPerTile];
  // Compact columns: the bundle's byte offset and its row stride R = used (quantize.h), which reach
  // their uses through shared memory (in registers through the walk, at 80, they spilled).
  __shared__ int64_t compact_offset, compact_ld;

  const int64_t m_first = (static_cast<int64_t>(blockIdx.y) * kTile) << log2_rt;
  const int64_t c_first = (static_cast<int64_t>(blockIdx.x) * kTile) << log2_rf;
  const auto* base = static_cast<const uint16_t*>(x.data);

  const int64_t used = __ldg(groups.offsets_G1 + groups.num_groups);
  const int64_t end = used < x.rows ? used : x.rows;
  if (m_first >= end) return;  // CTA-uniform, before any copy: unused capacity is never read
  const int64_t t_left = (end - m_first + kTile - 1) / kTile, f_left = (x.cols - c_first + kTile - 1) / kTile;
  const int tiles_t = static_cast<int>(t_left < (1 << log2_rt) ? t_left : (1 << log2_rt));
  const int tiles_f = static_cast<int>(f_left < (1 << log2_rf) ? f_left : (1 << log2_rf));
  const int ld_row = kBlocksPerTile << log2_rf, ld_col = kBlocksPerTile << log2_rt;
  // While the first tiles load: the group table (in the last stage, free until the first barrier),
  // the format's tables and the region's real-row bits (for_each_tile's first barrier publishes them).
  auto prologue = [&] {
    auto* offsets = reinterpret_cast<int32_t*>(&ring[kRowsColsStages - 1][0][0]);
    for (int g = threadIdx.x; g <= groups.num_groups; g += kTileThreads) offsets[g] = groups.offsets_G1[g];
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
      for (int g = threadIdx.x; g <= groups.num_groups; g += kTileThreads)
        if (offsets[g] % group_multiple != 0) layout_trap("an expert's first row", offsets[g], group_multiple);
    for (int i = threadIdx.x; i < tiles_t * kTile; i += kTileThreads) {  // warp-uniform: tiles_t * kTile % 32 == 0
      const bool is_real = row_is_real(offsets, groups, m_first + i, end);
      const uint32_t bits = __ballot_sync(0xffffffffu, is_real);
      if (i % 32 == 0) real_bits[i / 32] = bits;
    }
  };

  // Tile t of the region: token tile t / tiles_f, feature tile t % tiles_f (along the features first).
  // Rows at or past `end` are neither read nor (gathered) looked up: their real-row bits are clear.
  auto issue = [&](int t, Bf16Tile& stage) {
    const int64_t r0 = m_first + (t / tiles_f) * kTile, c0 = c_first + (t % tiles_f) * kTile;
    if (x.row_ptrs != nullptr) issue_gathered_tile(stage, x.row_ptrs, end, x.cols, r0, c0);
    else issue_tile(stage, base, x.row_stride, end, x.cols, r0, c0);
  };
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunk = warp % kChunks;
  const int f0 = (warp / kChunks) * 64 + 2 * lane;  // the column-pass lane's two features in a tile
  for_each_tile<kRowsColsStages>(tiles_t * tiles_f, ring, issue, [&](int t, Bf16Tile& tile) {
    const int tt = t / tiles_f, tf = t % tiles_f;
    const int64_t m0 = m_first + tt * kTile, c0 = c_first + tf * kTile;
    const uint32_t* tile_real = real_bits + tt * (kTile / 32);
    // Capacity rows past an expert's count quantize as zeros; a tile without any (every tile of a
    // balanced batch) skips the masking.
    const bool all_real = (tile_real[0] & tile_real[1] & tile_real[2] & tile_real[3]) == 0xffffffffu;
    if (rows.present()) {
      const int64_t c = c0 + (threadIdx.x % kTileSlots) * kVec;
      // Row tile_row(i)'s 8 output bytes: one 64-bit product per tile, then a step per vector.
      uint8_t* q_ptr = rows.q + (m0 + tile_row(0)) * rows.q_row_stride + c;
      const int64_t q_step = kTileRowStep * rows.q_row_stride;
      const int rows_left = static_cast<int>(end - m0 < kTile ? end - m0 : kTile);  // tile rows < rows_left are stored
      const bool col_in = c < x.cols;
      uint4 raw[kTileLoads];
      read_own_vectors(raw, tile);
      if (!all_real) {
#pragma unroll
        for (int i = 0; i < kTileLoads; ++i)
          if (!((tile_real[tile_row(i) / 32] >> (tile_row(i) % 32)) & 1u)) raw[i] = make_uint4(0, 0, 0, 0);
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
          row_scale[(tt * kTile + r) * ld_row + tf] = scale;
        }
#pragma unroll
        for (int i = 0; i < kTileLoads; ++i) {
          const float m = __shfl_sync(0xffffffffu, mult, 2 * i + (lane >> 4));
          const int r = tile_row(i);
          if (r < rows_left && col_in) *reinterpret_cast<uint2*>(q_ptr) = e4m3x8(unpack_bf16x8(raw[i]), m);
          q_ptr += q_step;
        }
      } else {
        // Each pair's maxima just before its quantization (at 80 registers, all eight live at once spilled).
        uint32_t packed = 0;
#pragma unroll
        for (int i = 0; i < kTileLoads; ++i) {
          if (i % 2 == 0) packed = pair_amax(i);
          const int r = tile_row(i);
          Scale scale;
          float mult;
          F::from_bf16_amax(i % 2 == 0 ? amax16_lo(packed) : amax16_hi(packed), factor_tables, scale, mult);
          if (r < rows_left && col_in) *reinterpret_cast<uint2*>(q_ptr) = e4m3x8(unpack_bf16x8(raw[i]), mult);
          q_ptr += q_step;
          if ((c - c0) % F::kBlock == 0)
            row_scale[(tt * kTile + r) * ld_row + tf * kBlocksPerTile + (c - c0) / F::kBlock] = scale;
        }
      }
    }
    if (!cols.present()) return;
    // Token-axis blocks. Warp w takes the 32-token chunk w % 4 of 64 features (two per lane, one
    // 4-byte shared load per token: a warp reads 128 contiguous bytes, no bank conflict) and keeps
    // its 2 x 32 values in registers (padding rows as zeros). An FP8-blockwise block spans the four
    // chunks: their amaxes meet in shared memory.
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
    if constexpr (kChunksPerBlock > 1) *reinterpret_cast<uint32_t*>(&chunk_amax[chunk][f0]) = amax2;
    __syncthreads();  // every value is in registers: the stage is scratch from here on
    if constexpr (kChunksPerBlock > 1) {
      const int first = chunk / kChunksPerBlock * kChunksPerBlock;
      for (int k = first; k < first + kChunksPerBlock; ++k) {
        const uint32_t other = *reinterpret_cast<const uint32_t*>(&chunk_amax[k][f0]);
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
        col_scale[(tf * kTile + f) * ld_col + tt * kBlocksPerTile + chunk / kChunksPerBlock] = scale;
    }
    __syncthreads();
    const auto keep = [&](int f, int off) { return c0 + f < x.cols && m0 + off < end; };
    if constexpr (kCompactCols) store_byte_tile(qt, cols.q + compact_offset + c0 * compact_ld + m0, compact_ld, keep);
    else store_byte_tile(qt, cols.q + c0 * cols.q_row_stride + m0, cols.q_row_stride, keep);
  }, prologue);
  // for_each_tile ended on a barrier: the region's scales are all staged.
  const int64_t tokens = (end - m_first < int64_t{tiles_t} * kTile) ? end - m_first : int64_t{tiles_t} * kTile;
  const int64_t features = (x.cols - c_first < int64_t{tiles_f} * kTile) ? x.cols - c_first : int64_t{tiles_f} * kTile;
  if (rows.present())
    store_scale_grid(row_scale, ld_row, static_cast<int>(tokens), static_cast<int>(features / F::kBlock),
                     rows.scales + m_first * rows.scale_row_stride + (c_first / F::kBlock) * rows.scale_block_stride,
                     rows.scale_row_stride, rows.scale_block_stride);
  if (cols.present()) {
    if constexpr (kCompactCols) {  // [C, R / 32] after the data
      // MXFP8: E8M0 [C, R / 32]; FP8 blockwise: FP32 [R / 128, C] (the WGRAD GEMM's layout). Both
      // start at align128(C * R).
      static_assert(numeric::mxfp8_compact_columns_scales_offset(1000, 128) ==
                    numeric::fp8_blockwise_compact_columns_scales_offset(1000, 128));
      cols.scales = reinterpret_cast<Scale*>(cols.q + compact_offset +
                                             mxfp8_compact_columns_scales_offset(x.cols, compact_ld));
      const bool byte_scales = sizeof(Scale) == 1;
      cols.scale_row_stride = byte_scales ? compact_ld / F::kBlock : 1;
      cols.scale_block_stride = byte_scales ? 1 : x.cols;
    }
    store_scale_grid(col_scale, ld_col, static_cast<int>(features), static_cast<int>(tokens / F::kBlock),
                     cols.scales + c_first * cols.scale_row_stride + (m_first / F::kBlock) * cols.scale_block_stride,
                     cols.scale_row_stride, cols.scale_block_stride);
  }
}

// The region shape (rt x rf tiles, rt * rf <= kRegionTiles) with the least estimated time per
// tile (region_tile_cost) divided by the wave efficiency; MXFP8's partial scale rows
// (128 * (1/rf + 1/rt) L2 requests per tile next to 512 for the data) only break ties. The estimate
// by L2 requests alone chose 2 x 4 for MXFP8: 4.5 waves at dsv3_prefill, 0.77x the copy against
// 0.81x at 1 x 2 (s28 r2-r3).
RegionShape choose_rows_cols_region(int64_t tiles_t, int64_t tiles_f, bool byte_scales, int64_t slots) {
  return choose_region(tiles_t, tiles_f, 1, slots, kRegionTiles, kRegionTiles, [&](int64_t rt, int64_t rf) {
    return region_tile_cost(rt * rf, byte_scales ? mxfp8_scale_row_requests(rt, rf) : 0.0);
  });
}

template <class F, bool kCompactCols>
void launch_rows_cols_kernel(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                             const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name,
                             int log2_rt, int log2_rf);

template <class F>
void launch_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                      const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name,
                      int log2_rt = -1, int log2_rf = -1) {
  DMOE_CHECK_ARG(x.cols % F::kBlock == 0, name, ": cols=", x.cols, " must be a multiple of ", F::kBlock);
  const int64_t row_multiple = cols.present() ? F::kBlock : numeric::kMXBlock;
  DMOE_CHECK_ARG(x.rows % row_multiple == 0, name, ": the row capacity ", x.rows, " must be a multiple of ",
                 row_multiple);
  DMOE_CHECK_ARG(x.row_ptrs != nullptr || x.row_stride % kVec == 0, name,
                 ": the input row stride must keep 16-byte alignment");
  DMOE_CHECK_ARG(groups.num_groups >= 1 && groups.num_groups <= kMaxGroups, name, ": ", groups.num_groups,
                 " groups (1 .. ", kMaxGroups, " supported)");
  DMOE_CHECK_ARG(!rows.compact && rows.q_offset == nullptr, name,
                 ": the row output cannot be compact (compact, q_offset are for the column output)");
  DMOE_CHECK_ARG(cols.compact || cols.q_offset == nullptr, name, ": q_offset is set but compact is not");
  DMOE_CHECK_ARG(!cols.present() || cols.compact || cols.q_row_stride % 16 == 0, name, ": the transposed row stride ",
                 cols.q_row_stride, " must be a multiple of 16 bytes");
  DMOE_CHECK_ARG(!cols.compact || reinterpret_cast<uintptr_t>(cols.q) % 16 == 0, name,
                 ": compact columns need q 16-byte aligned");
  if (x.rows == 0 || (!rows.present() && !cols.present())) return;
  if (cols.compact) return launch_rows_cols_kernel<F, true>(x, groups, rows, cols, stream, name, log2_rt, log2_rf);
  launch_rows_cols_kernel<F, false>(x, groups, rows, cols, stream, name, log2_rt, log2_rf);
}

template <class F, bool kCompactCols>
void launch_rows_cols_kernel(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                             const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name,
                             int log2_rt, int log2_rf) {
  constexpr auto kernel = quantize_rows_cols_kernel<F, kCompactCols>;
  allow_dynamic_smem<kernel>(kRowsColsRingBytes);
  const int64_t tiles_t = (x.rows + kTile - 1) / kTile, tiles_f = (x.cols + kTile - 1) / kTile;
  if (log2_rt < 0) {
    const RegionShape r =
        choose_rows_cols_region(tiles_t, tiles_f, sizeof(typename F::Scale) == 1,
                                resident_ctas(reinterpret_cast<const void*>(kernel), kTileThreads, kRowsColsRingBytes));
    log2_rt = r.log2_a;
    log2_rf = r.log2_b;
  }
  DMOE_CHECK_ARG(log2_rt >= 0 && log2_rf >= 0 && (1 << (log2_rt + log2_rf)) <= kRegionTiles, name, ": region 2^",
                 log2_rt, " x 2^", log2_rf, " tiles (at most ", kRegionTiles, ")");
  const dim3 grid(static_cast<unsigned>((tiles_f + (1 << log2_rf) - 1) >> log2_rf),
                  static_cast<unsigned>((tiles_t + (1 << log2_rt) - 1) >> log2_rt));
  kernel<<<grid, kTileThreads, kRowsColsRingBytes, stream>>>(x, groups, rows, cols, log2_rt, log2_rf);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void mxfp8_quantize_rows(const Bf16Matrix& x, const Mxfp8Out& out, cudaStream_t stream) {
  launch_rows<Mxfp8Format>(x, out, stream, "mxfp8_quantize_rows");
}

void mxfp8_quantize_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const Mxfp8Out& rows, const Mxfp8Out& cols,
                              cudaStream_t stream) {
  launch_rows_cols<Mxfp8Format>(x, groups, rows, cols, stream, "mxfp8_quantize_rows_cols");
}

void mxfp8_quantize_rows_cols_in_regions(const Bf16Matrix& x, const RowGroups& groups, const Mxfp8Out& rows,
                                         const Mxfp8Out& cols, int log2_region_t, int log2_region_f,
                                         cudaStream_t stream) {
  DMOE_CHECK_ARG(log2_region_t >= 0 && log2_region_f >= 0, "mxfp8_quantize_rows_cols: negative region");
  launch_rows_cols<Mxfp8Format>(x, groups, rows, cols, stream, "mxfp8_quantize_rows_cols", log2_region_t,
                                log2_region_f);
}

void fp8_blockwise_quantize_rows(const Bf16Matrix& x, const Fp8BlockwiseOut& out, cudaStream_t stream) {
  launch_rows<Fp8BlockwiseFormat>(x, out, stream, "fp8_blockwise_quantize_rows");
}

void fp8_blockwise_quantize_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const Fp8BlockwiseOut& rows,
                                      const Fp8BlockwiseOut& cols, cudaStream_t stream) {
  launch_rows_cols<Fp8BlockwiseFormat>(x, groups, rows, cols, stream, "fp8_blockwise_quantize_rows_cols");
}

void fp8_blockwise_quantize_rows_cols_in_regions(const Bf16Matrix& x, const RowGroups& groups,
                                                 const Fp8BlockwiseOut& rows, const Fp8BlockwiseOut& cols,
                                                 int log2_region_t, int log2_region_f, cudaStream_t stream) {
  DMOE_CHECK_ARG(log2_region_t >= 0 && log2_region_f >= 0, "fp8_blockwise_quantize_rows_cols: negative region");
  launch_rows_cols<Fp8BlockwiseFormat>(x, groups, rows, cols, stream, "fp8_blockwise_quantize_rows_cols",
                                       log2_region_t, log2_region_f);
}

}  // namespace dist_moe::quant
