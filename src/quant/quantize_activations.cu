// E4M3 activation quantizers (MXFP8 1x32 and FP8 blockwise 1x128), one template per kernel:
//   quantize_rows_kernel      blocks along cols; each thread issues its four 16-byte loads before
//                             any math, kBlock/8 lanes share a block (shuffles)
//   quantize_rows_cols_kernel both orientations from one read: a CTA walks a band of 128 tokens
//                             across up to kBandTiles 128x128 tiles through a ring of cp.async
//                             stages (two tiles in flight while one is processed); the rows come
//                             from the thread's own vectors, the token-axis (WGRAD) blocks from
//                             shared memory, staged transposed in the tile's own stage and
//                             written as whole 128-byte rows
// Memory-bound: the prediction and the measurements are in docs/perf_history.md (G37).
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

constexpr int kBandTiles = 8;     // column tiles one CTA walks (its token band's setup is paid once)
constexpr int kMaxGroups = 1024;  // expert groups the shared-memory tables hold

template <class F>
__global__ void __launch_bounds__(kTileThreads) quantize_rows_cols_kernel(Bf16Matrix x, RowGroups groups,
                                                                          QuantizedOut<typename F::Scale> rows,
                                                                          QuantizedOut<typename F::Scale> cols) {
  using Scale = typename F::Scale;
  constexpr int kGroup = (F::kBlock < kTile ? F::kBlock : kTile) / kVec;
  constexpr int kChunk = 32;                           // tokens per column-pass thread
  constexpr int kChunks = kTile / kChunk;              // 4: one per warp of a warp quartet
  constexpr int kChunksPerBlock = F::kBlock / kChunk;  // 1 (MXFP8) or 4 (FP8 blockwise)
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  Bf16Tile* ring = reinterpret_cast<Bf16Tile*>(dynamic_smem);
  __shared__ bool real[kTile];
  __shared__ int32_t offsets[kMaxGroups + 1];
  __shared__ uint32_t chunk_amax[kChunks][kTile];  // column pass: |x| bits per (chunk, feature)

  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t c_first = static_cast<int64_t>(blockIdx.x) * kBandTiles * kTile;
  const int64_t left = (x.cols - c_first + kTile - 1) / kTile;
  const int tiles = static_cast<int>(left < kBandTiles ? left : kBandTiles);
  const auto* base = static_cast<const uint16_t*>(x.data);
  auto issue = [&](int t, Bf16Tile& stage) { issue_tile(stage, base, x.row_stride, x.rows, x.cols, m0, c_first + t * kTile); };

  for (int g = threadIdx.x; g <= groups.num_groups; g += kTileThreads) offsets[g] = groups.offsets_G1[g];
  __syncthreads();
  const int64_t used = offsets[groups.num_groups];
  if (blockIdx.x == 0 && blockIdx.y == 0)
    for (int g = threadIdx.x; g <= groups.num_groups; g += kTileThreads)
      if (offsets[g] % F::kBlock != 0) layout_trap("an expert's first row", offsets[g], F::kBlock);
  if (m0 >= used) return;  // CTA-uniform, before any copy: unused capacity is never read
  if (threadIdx.x < kTile) {
    const int64_t m = m0 + threadIdx.x;
    bool is_real = false;
    if (m < used) {
      int lo = 0, hi = groups.num_groups - 1;  // last group with offsets[g] <= m
      while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (offsets[mid] <= m) lo = mid;
        else hi = mid - 1;
      }
      is_real = m - offsets[lo] < groups.counts_G[lo];
    }
    real[threadIdx.x] = is_real;
  }
  // (for_each_tile's first barrier publishes real[] too)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunk = warp % kChunks;
  const int f0 = (warp / kChunks) * 64 + 2 * lane;  // the column-pass lane's two features in a tile
  for_each_tile(tiles, ring, issue, [&](int t, Bf16Tile& tile) {
    const int64_t c0 = c_first + t * kTile;
    if (rows.present()) {
      const int64_t c = c0 + (threadIdx.x % kTileSlots) * kVec;
      uint4 raw[kTileLoads];
      read_own_vectors(raw, tile);
#pragma unroll
      for (int i = 0; i < kTileLoads; ++i) {
        const int r = tile_row(i);
        if (!real[r]) raw[i] = make_uint4(0, 0, 0, 0);  // padding rows quantize as zeros
        const float amax = group_amax<kGroup>(amax_bf16x8(raw[i]));
        if (m0 + r < used && c < x.cols) {
          Scale scale;
          float mult;
          F::from_amax(amax, scale, mult);
          *reinterpret_cast<uint2*>(rows.q + (m0 + r) * rows.q_row_stride + c) = e4m3x8(unpack_bf16x8(raw[i]), mult);
          if (c % F::kBlock == 0)
            rows.scales[(m0 + r) * rows.scale_row_stride + (c / F::kBlock) * rows.scale_block_stride] = scale;
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
#pragma unroll
    for (int k = 0; k < kChunk; ++k) {
      pair[k] = real[chunk * kChunk + k] ? *reinterpret_cast<const uint32_t*>(&tile[chunk * kChunk + k][f0]) : 0u;
      amax2 = __vmaxu2(amax2, abs_bf16x2(pair[k]));
    }
    float a0 = __uint_as_float(amax2 << 16), a1 = __uint_as_float(amax2 & 0xffff0000u);
    if constexpr (kChunksPerBlock > 1) {
      chunk_amax[chunk][f0] = __float_as_uint(a0);
      chunk_amax[chunk][f0 + 1] = __float_as_uint(a1);
    }
    __syncthreads();  // every value is in registers: the stage is scratch from here on
    if constexpr (kChunksPerBlock > 1) {
      const int first = chunk / kChunksPerBlock * kChunksPerBlock;
      for (int k = first; k < first + kChunksPerBlock; ++k) {
        a0 = numeric::amax_nan(a0, __uint_as_float(chunk_amax[k][f0]));
        a1 = numeric::amax_nan(a1, __uint_as_float(chunk_amax[k][f0 + 1]));
      }
    }
    // The transposed bytes go to the stage as [feature][token] (16 KiB), the scales after them as
    // [feature][chunk], and then out in whole rows.
    auto* qt = reinterpret_cast<uint8_t (*)[kTile]>(&tile[0][0]);
    auto* st = reinterpret_cast<Scale (*)[kChunks]>(&tile[0][0] + kTile * kTile / 2);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      Scale scale;
      float mult;
      F::from_amax(h == 0 ? a0 : a1, scale, mult);
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
      uint4* q = reinterpret_cast<uint4*>(&qt[f0 + h][chunk * kChunk]);
      q[0] = make_uint4(w[0], w[1], w[2], w[3]);
      q[1] = make_uint4(w[4], w[5], w[6], w[7]);
      st[f0 + h][chunk] = scale;
    }
    __syncthreads();
    store_byte_tile(qt, cols.q + c0 * cols.q_row_stride + m0, cols.q_row_stride,
                    [&](int f, int off) { return c0 + f < x.cols && m0 + off < used; });
    // Scales: one thread per feature; the tile's kChunks / kChunksPerBlock blocks of it.
    if (threadIdx.x < kTile && c0 + threadIdx.x < x.cols) {
      Scale* dst = cols.scales + (c0 + threadIdx.x) * cols.scale_row_stride + (m0 / F::kBlock) * cols.scale_block_stride;
      if constexpr (kChunksPerBlock == 1 && sizeof(Scale) == 1) {
        // MXFP8's four E8M0 bytes of a feature in one 4-byte store where the layout allows it.
        if (cols.scale_block_stride == 1 && reinterpret_cast<uintptr_t>(dst) % 4 == 0 && m0 + kTile <= used) {
          *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(&st[threadIdx.x][0]);
          return;
        }
      }
      for (int k = 0; k < kChunks; k += kChunksPerBlock)
        if (m0 + k * kChunk < used) dst[(k / kChunksPerBlock) * cols.scale_block_stride] = st[threadIdx.x][k];
    }
  });
}

template <class F>
void launch_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                      const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name) {
  DMOE_CHECK_ARG(x.cols % F::kBlock == 0, name, ": cols=", x.cols, " must be a multiple of ", F::kBlock);
  DMOE_CHECK_ARG(x.rows % F::kBlock == 0, name, ": the row capacity ", x.rows, " must be a multiple of ", F::kBlock);
  DMOE_CHECK_ARG(x.row_stride % kVec == 0, name, ": the input row stride must keep 16-byte alignment");
  DMOE_CHECK_ARG(groups.num_groups >= 1 && groups.num_groups <= kMaxGroups, name, ": ", groups.num_groups,
                 " groups (1 .. ", kMaxGroups, " supported)");
  DMOE_CHECK_ARG(!cols.present() || cols.q_row_stride % 16 == 0, name, ": the transposed row stride ",
                 cols.q_row_stride, " must be a multiple of 16 bytes");
  if (x.rows == 0 || (!rows.present() && !cols.present())) return;
  allow_dynamic_smem<quantize_rows_cols_kernel<F>>(kTileRingBytes);
  const int64_t band = int64_t{kBandTiles} * kTile;
  const dim3 grid(static_cast<unsigned>((x.cols + band - 1) / band), static_cast<unsigned>((x.rows + kTile - 1) / kTile));
  quantize_rows_cols_kernel<F><<<grid, kTileThreads, kTileRingBytes, stream>>>(x, groups, rows, cols);
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

void fp8_blockwise_quantize_rows(const Bf16Matrix& x, const Fp8BlockwiseOut& out, cudaStream_t stream) {
  launch_rows<Fp8BlockwiseFormat>(x, out, stream, "fp8_blockwise_quantize_rows");
}

void fp8_blockwise_quantize_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const Fp8BlockwiseOut& rows,
                                      const Fp8BlockwiseOut& cols, cudaStream_t stream) {
  launch_rows_cols<Fp8BlockwiseFormat>(x, groups, rows, cols, stream, "fp8_blockwise_quantize_rows_cols");
}

}  // namespace dist_moe::quant
