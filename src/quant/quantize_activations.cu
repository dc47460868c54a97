// E4M3 activation quantizers (MXFP8 1x32 and FP8 blockwise 1x128), one template per kernel:
//   quantize_rows_kernel      blocks along cols, one 16-byte load per thread, kBlock/8 lanes per block
//   quantize_rows_cols_kernel both orientations from one read of a 128x128 BF16 tile: the rows
//                             from registers, the token-axis (WGRAD) blocks from shared memory,
//                             written transposed
// Memory-bound: the prediction and the measurement are in docs/perf.md ("GPU quantizers").
#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kRowsThreads = 256;
constexpr int kRowsLoads = 4;  // 16-byte loads per thread, all issued before any math (bytes in flight)

template <class F>
__global__ void __launch_bounds__(kRowsThreads) quantize_rows_kernel(Bf16Matrix x, QuantizedOut<typename F::Scale> out) {
  constexpr int kGroup = F::kBlock / kVec;  // lanes sharing one block
  const int64_t vecs_per_row = x.cols / kVec, total = x.rows * vecs_per_row;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsThreads * kRowsLoads + threadIdx.x;
  // Slice j of the CTA is vectors base + j * 256. cols % kBlock == 0: a group is all in range or
  // all out, and a warp whose first lane is out has no lane in range (it skips the slice whole).
  uint4 raw[kRowsLoads];
#pragma unroll
  for (int j = 0; j < kRowsLoads; ++j) {
    const int64_t i = base + j * kRowsThreads;
    raw[j] = make_uint4(0, 0, 0, 0);
    if (i < total)
      raw[j] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x.data) +
                                                    (i / vecs_per_row) * x.row_stride + (i % vecs_per_row) * kVec));
  }
#pragma unroll
  for (int j = 0; j < kRowsLoads; ++j) {
    const int64_t i = base + j * kRowsThreads;
    if (i - (threadIdx.x & 31) >= total) break;  // warp-uniform
    const Vec8 v = unpack_bf16x8(raw[j]);
    const float amax = group_amax<kGroup>(amax8(v));
    if (i >= total) continue;
    typename F::Scale scale;
    float mult;
    F::from_amax(amax, scale, mult);
    const int64_t r = i / vecs_per_row, c = (i % vecs_per_row) * kVec;
    *reinterpret_cast<uint2*>(out.q + r * out.q_row_stride + c) = e4m3x8(v, mult);
    if (c % F::kBlock == 0) out.scales[r * out.scale_row_stride + (c / F::kBlock) * out.scale_block_stride] = scale;
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
  const int64_t blocks = (vecs + kRowsThreads * kRowsLoads - 1) / (kRowsThreads * kRowsLoads);
  quantize_rows_kernel<F><<<static_cast<unsigned>(blocks), kRowsThreads, 0, stream>>>(x, out);
  DMOE_CUDA_CHECK_LAUNCH();
}

// ---- both orientations ---------------------------------------------------------------------------

constexpr int kTile = 128;          // tile rows (tokens) and cols (features)
constexpr int kTileThreads = 256;
constexpr int kTileVecs = kTile * kTile / kVec / kTileThreads;  // 16-byte loads per thread (8)

// Is row m of the expert-major buffer a real row (not padding)? offsets are ascending.
__device__ __forceinline__ bool row_is_real(const RowGroups& g, int64_t m) {
  int lo = 0, hi = g.num_groups - 1;  // last group with offsets[g] <= m
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (g.offsets_G1[mid] <= m) lo = mid;
    else hi = mid - 1;
  }
  return m - g.offsets_G1[lo] < g.counts_G[lo];
}

template <class F>
__global__ void __launch_bounds__(kTileThreads) quantize_rows_cols_kernel(Bf16Matrix x, RowGroups groups,
                                                                          QuantizedOut<typename F::Scale> rows,
                                                                          QuantizedOut<typename F::Scale> cols) {
  using Scale = typename F::Scale;
  constexpr int kGroup = (F::kBlock < kTile ? F::kBlock : kTile) / kVec;
  constexpr int kChunk = 32;                    // tokens per column-pass thread
  constexpr int kChunks = kTile / kChunk;       // 4: one per warp of a warp quartet
  constexpr int kChunksPerBlock = F::kBlock / kChunk;  // 1 (MXFP8) or 4 (FP8 blockwise)
  __shared__ __align__(16) uint16_t tile[kTile][kTile];
  __shared__ bool real[kTile];
  __shared__ uint32_t chunk_amax[kChunks][kTile];  // column pass: |x| bits per (chunk, feature)

  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t used = groups.offsets_G1[groups.num_groups];
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x <= groups.num_groups &&
      groups.offsets_G1[threadIdx.x] % F::kBlock != 0)
    layout_trap("an expert's first row", groups.offsets_G1[threadIdx.x], F::kBlock);
  if (m0 >= used) return;
  if (threadIdx.x < kTile) real[threadIdx.x] = m0 + threadIdx.x < used && row_is_real(groups, m0 + threadIdx.x);
  __syncthreads();

  // Load every vector first (padding rows read as zeros), then quantize the rows from registers.
  const int cv = threadIdx.x % (kTile / kVec);  // 16-byte column slot in the tile
  const int64_t c = c0 + cv * kVec;
  const bool col_live = c < x.cols;
  constexpr int kRowStep = kTileThreads * kVec / kTile;  // 16 tile rows per pass of the CTA
  uint4 raw[kTileVecs];
#pragma unroll
  for (int i = 0; i < kTileVecs; ++i) {
    const int r = threadIdx.x / (kTile / kVec) + i * kRowStep;
    raw[i] = make_uint4(0, 0, 0, 0);
    if (real[r] && col_live)
      raw[i] = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x.data) + (m0 + r) * x.row_stride + c));
  }
#pragma unroll
  for (int i = 0; i < kTileVecs; ++i) {
    const int r = threadIdx.x / (kTile / kVec) + i * kRowStep;
    *reinterpret_cast<uint4*>(&tile[r][cv * kVec]) = raw[i];
    if (!rows.present()) continue;
    const Vec8 v = unpack_bf16x8(raw[i]);
    const float amax = group_amax<kGroup>(amax8(v));
    if (m0 + r < used && col_live) {
      Scale scale;
      float mult;
      F::from_amax(amax, scale, mult);
      *reinterpret_cast<uint2*>(rows.q + (m0 + r) * rows.q_row_stride + c) = e4m3x8(v, mult);
      if (c % F::kBlock == 0)
        rows.scales[(m0 + r) * rows.scale_row_stride + (c / F::kBlock) * rows.scale_block_stride] = scale;
    }
  }
  if (!cols.present()) return;
  __syncthreads();

  // Token-axis blocks. Warp w takes the 32-token chunk w % 4 of 64 features (two per lane, one
  // 4-byte shared load per token: a warp reads 128 contiguous bytes, no bank conflict), keeps its
  // 2 x 32 values in registers, and writes 32 transposed bytes per feature. An FP8-blockwise block
  // spans the four chunks: their amaxes meet in shared memory.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int chunk = warp % kChunks;
  const int f0 = (warp / kChunks) * 64 + 2 * lane;  // the lane's two features in the tile
  const int64_t m_chunk = m0 + chunk * kChunk;
  uint32_t pair[kChunk];
  float a0 = 0.0f, a1 = 0.0f;
#pragma unroll
  for (int t = 0; t < kChunk; ++t) {
    pair[t] = *reinterpret_cast<const uint32_t*>(&tile[chunk * kChunk + t][f0]);
    a0 = numeric::amax_nan(a0, ptx::bf16_lo_to_float(pair[t]));
    a1 = numeric::amax_nan(a1, ptx::bf16_hi_to_float(pair[t]));
  }
  if constexpr (kChunksPerBlock > 1) {
    chunk_amax[chunk][f0] = __float_as_uint(a0);
    chunk_amax[chunk][f0 + 1] = __float_as_uint(a1);
    __syncthreads();
    const int first = chunk / kChunksPerBlock * kChunksPerBlock;
    for (int k = first; k < first + kChunksPerBlock; ++k) {
      a0 = numeric::amax_nan(a0, __uint_as_float(chunk_amax[k][f0]));
      a1 = numeric::amax_nan(a1, __uint_as_float(chunk_amax[k][f0 + 1]));
    }
  }
  if (m_chunk >= used) return;  // past the groups (MXFP8 only: FP8-blockwise tiles are whole blocks)
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t feature = c0 + f0 + h;
    if (feature >= x.cols) continue;
    Scale scale;
    float mult;
    F::from_amax(h == 0 ? a0 : a1, scale, mult);
    uint32_t w[kChunk / 4];
#pragma unroll
    for (int t = 0; t < kChunk; t += 4) {
      float f[4];
#pragma unroll
      for (int k = 0; k < 4; ++k)
        f[k] = numeric::mul_rn(h == 0 ? ptx::bf16_lo_to_float(pair[t + k]) : ptx::bf16_hi_to_float(pair[t + k]), mult);
      w[t / 4] = numeric::float2_to_e4m3x2(f[0], f[1]) | (static_cast<uint32_t>(numeric::float2_to_e4m3x2(f[2], f[3])) << 16);
    }
    uint4* q = reinterpret_cast<uint4*>(cols.q + feature * cols.q_row_stride + m_chunk);
    q[0] = make_uint4(w[0], w[1], w[2], w[3]);
    q[1] = make_uint4(w[4], w[5], w[6], w[7]);
    if (chunk % kChunksPerBlock == 0)
      cols.scales[feature * cols.scale_row_stride + (m_chunk / F::kBlock) * cols.scale_block_stride] = scale;
  }
}

template <class F>
void launch_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                      const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name) {
  DMOE_CHECK_ARG(x.cols % F::kBlock == 0, name, ": cols=", x.cols, " must be a multiple of ", F::kBlock);
  DMOE_CHECK_ARG(x.rows % F::kBlock == 0, name, ": the row capacity ", x.rows, " must be a multiple of ", F::kBlock);
  DMOE_CHECK_ARG(groups.num_groups >= 1 && groups.num_groups < kTileThreads, name, ": ", groups.num_groups,
                 " groups (1 .. ", kTileThreads - 1, " supported)");
  DMOE_CHECK_ARG(!cols.present() || cols.q_row_stride % 16 == 0, name, ": the transposed row stride ",
                 cols.q_row_stride, " must be a multiple of 16 bytes");
  if (x.rows == 0 || (!rows.present() && !cols.present())) return;
  const dim3 grid(static_cast<unsigned>((x.cols + kTile - 1) / kTile), static_cast<unsigned>((x.rows + kTile - 1) / kTile));
  quantize_rows_cols_kernel<F><<<grid, kTileThreads, 0, stream>>>(x, groups, rows, cols);
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
