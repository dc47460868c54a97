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
#include "quant/rows_cols_tile.cuh"

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
  DMOE_CHECK_ARG(x.row_ptrs == nullptr && x.row_scales == nullptr, name,
                 ": gathered rows (row_ptrs) and scaled rows (row_scales) are not supported (rows+cols only)");
  DMOE_CHECK_ARG(!out.compact && out.q_offset == nullptr, name,
                 ": compact outputs (compact, q_offset) are for the rows+columns quantizers' columns only");
  DMOE_CHECK_ARG(out.scale_word_ld == 0, name,
                 ": k-block-major scale words (scale_word_ld) are for the rows+columns quantizers' rows only");
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

// ---- both orientations (the pieces: rows_cols_tile.cuh) --------------------------------------------

// A two-stage ring (64 KiB) and at most 80 registers: three CTAs per SM, 24 warps to cover the three
// barriers per tile (G40, G42), one tile loading per CTA while a body runs (96 KiB in flight per SM).
constexpr int kRowsColsStages = 2;
constexpr int kRowsColsCtasPerSm = 3;
constexpr size_t kRowsColsRingBytes = sizeof(Bf16Tile) * kRowsColsStages;

// kCompactCols: `cols` is a compact column bundle (MXFP8 or FP8 blockwise), in an instantiation
// of its own: the strided kernel keeps its stores' addresses in constant-bank parameters, with no register to spare.
// kRowScales: x.row_scales is set (scale_tile_rows before each tile's body), its own instantiation too.
template <class F, bool kCompactCols, bool kRowScales>
__global__ void __launch_bounds__(kTileThreads, kRowsColsCtasPerSm)
    quantize_rows_cols_kernel(Bf16Matrix x, RowGroups groups, QuantizedOut<typename F::Scale> rows,
                              QuantizedOut<typename F::Scale> cols, int log2_rt, int log2_rf) {
  using Scale = typename F::Scale;
  constexpr int kChunks = kTile / 32;
  constexpr int kBlocksPerTile = kTile / F::kBlock;
  extern __shared__ __align__(kRingAlign) uint8_t dynamic_smem[];
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
  // kRowScales: the current token tile's 128 row scores (issue_tile_scores). One buffer, not one per
  // stage: with 1 KiB more the CTA (74.6 KiB with its ring) no longer fits three to an SM.
  __shared__ __align__(16) float tile_scores[kRowScales ? kTile : 4];

  const int64_t m_first = (static_cast<int64_t>(blockIdx.y) * kTile) << log2_rt;
  const int64_t c_first = (static_cast<int64_t>(blockIdx.x) * kTile) << log2_rf;
  const auto* base = static_cast<const uint16_t*>(x.data);

  const int64_t used = __ldg(groups.offsets_G1 + groups.num_groups);
  const int64_t end = used < x.rows ? used : x.rows;
  if (m_first >= end) return;  // CTA-uniform, before any copy: unused capacity is never read
  const int64_t t_left = (end - m_first + kTile - 1) / kTile, f_left = (x.cols - c_first + kTile - 1) / kTile;
  const int tiles_t = static_cast<int>(t_left < (1 << log2_rt) ? t_left : (1 << log2_rt));
  const int tiles_f = static_cast<int>(f_left < (1 << log2_rf) ? f_left : (1 << log2_rf));
  const RowsColsStaging<F> staging{chunk_amax, row_scale, col_scale, kBlocksPerTile << log2_rf,
                                   kBlocksPerTile << log2_rt};
  // While the first tiles load: the group table (in the last stage, free until the first barrier),
  // the format's tables and the region's real-row bits (for_each_tile's first barrier publishes them).
  auto prologue = [&] {
    auto* offsets = reinterpret_cast<int32_t*>(&ring[kRowsColsStages - 1][0][0]);
    rows_cols_region_prologue<F, kTileThreads, kCompactCols>(offsets, groups, cols, used, m_first, end, tiles_t,
                                                             factor_tables, real_bits, compact_offset, compact_ld);
  };

  // Tile t of the region: token tile t / tiles_f, feature tile t % tiles_f (along the features first).
  // Rows at or past `end` are neither read nor (gathered) looked up: their real-row bits are clear.
  auto issue = [&](int t, Bf16Tile& stage) {
    const int64_t r0 = m_first + (t / tiles_f) * kTile, c0 = c_first + (t % tiles_f) * kTile;
    if (x.row_ptrs != nullptr) issue_gathered_tile(stage, x.row_ptrs, end, x.cols, r0, c0);
    else issue_tile(stage, base, x.row_stride, end, x.cols, r0, c0);
    if constexpr (kRowScales)
      if (t == 0) issue_tile_scores(tile_scores, x.row_scales, end, r0);  // in tile 0's group
  };
  for_each_tile<kRowsColsStages>(tiles_t * tiles_f, ring, issue, [&](int t, Bf16Tile& tile) {
    const int tt = t / tiles_f, tf = t % tiles_f;
    if constexpr (kRowScales) {
      scale_tile_rows(tile, tile_scores);
      __syncthreads();  // the body's column pass reads other threads' vectors; tile_scores is free
      // The next token tile's scores (tiles run along the features first), in their own group: the
      // two-stage ring's wait for the next tile (cp.async.wait_group 0) waits for them too.
      static_assert(kRowsColsStages == 2, "the scores' group relies on the ring waiting for every group");
      if (tf == tiles_f - 1 && tt + 1 < tiles_t) {
        issue_tile_scores(tile_scores, x.row_scales, end, m_first + (tt + 1) * kTile);
        ptx::cp_async_commit();
      }
    }
    quantize_rows_cols_tile<F, kCompactCols>(tile, CtaThread{}, tt, tf, m_first + tt * kTile, c_first + tf * kTile,
                                             end, x.cols, 0, real_bits + tt * (kTile / 32), factor_tables, staging,
                                             rows, cols, compact_offset, compact_ld);
  }, prologue);
  // for_each_tile ended on a barrier: the region's scales are all staged.
  store_region_scales<F, kCompactCols>(threadIdx.x, staging, m_first, c_first, end, x.cols, tiles_t, tiles_f, 0,
                                       x.cols, rows, cols, compact_offset, compact_ld);
}

template <class F, bool kCompactCols, bool kRowScales>
void launch_rows_cols_kernel(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                             const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name,
                             int log2_rt, int log2_rf);

template <class F, bool kCompactCols>
void launch_rows_cols_kernel(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                             const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name,
                             int log2_rt, int log2_rf) {
  if (x.row_scales != nullptr)
    return launch_rows_cols_kernel<F, kCompactCols, true>(x, groups, rows, cols, stream, name, log2_rt, log2_rf);
  launch_rows_cols_kernel<F, kCompactCols, false>(x, groups, rows, cols, stream, name, log2_rt, log2_rf);
}

template <class F>
void launch_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                      const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name,
                      int log2_rt = -1, int log2_rf = -1) {
  DMOE_CHECK_ARG(x.cols % F::kBlock == 0, name, ": cols=", x.cols, " must be a multiple of ", F::kBlock);
  check_rows_cols_outputs(name, F::kBlock, x.rows, groups, rows, cols);
  DMOE_CHECK_ARG(x.row_ptrs != nullptr || x.row_stride % kVec == 0, name,
                 ": the input row stride must keep 16-byte alignment");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(x.row_scales) % 16 == 0, name, ": row_scales must be 16-byte aligned");
  if (x.rows == 0 || (!rows.present() && !cols.present())) return;
  if (cols.compact) return launch_rows_cols_kernel<F, true>(x, groups, rows, cols, stream, name, log2_rt, log2_rf);
  launch_rows_cols_kernel<F, false>(x, groups, rows, cols, stream, name, log2_rt, log2_rf);
}

template <class F, bool kCompactCols, bool kRowScales>
void launch_rows_cols_kernel(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                             const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name,
                             int log2_rt, int log2_rf) {
  constexpr auto kernel = quantize_rows_cols_kernel<F, kCompactCols, kRowScales>;
  allow_dynamic_smem<kernel>(kRowsColsRingBytes);
  const int64_t tiles_t = (x.rows + kTile - 1) / kTile, tiles_f = (x.cols + kTile - 1) / kTile;
  if (log2_rt < 0) {
    const RegionShape r =
        choose_rows_cols_region(tiles_t, tiles_f, sizeof(typename F::Scale) == 1,
                                resident_ctas(reinterpret_cast<const void*>(kernel), kTileThreads, kRowsColsRingBytes));
    log2_rt = r.log2_a;
    log2_rf = r.log2_b;
  }
  const dim3 grid = rows_cols_grid(name, tiles_t, tiles_f, log2_rt, log2_rf);
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
                                      const Fp8BlockwiseOut& cols, cudaStream_t stream, Fp8BlockScale rule) {
  with_fp8_block_scale(rule, [&](auto format) {
    launch_rows_cols<decltype(format)>(x, groups, rows, cols, stream, "fp8_blockwise_quantize_rows_cols");
  });
}

void fp8_blockwise_quantize_rows_cols_in_regions(const Bf16Matrix& x, const RowGroups& groups,
                                                 const Fp8BlockwiseOut& rows, const Fp8BlockwiseOut& cols,
                                                 int log2_region_t, int log2_region_f, cudaStream_t stream,
                                                 Fp8BlockScale rule) {
  const char* name = "fp8_blockwise_quantize_rows_cols";
  DMOE_CHECK_ARG(log2_region_t >= 0 && log2_region_f >= 0, name, ": negative region");
  with_fp8_block_scale(rule, [&](auto format) {
    launch_rows_cols<decltype(format)>(x, groups, rows, cols, stream, name, log2_region_t, log2_region_f);
  });
}

}  // namespace dist_moe::quant
