// E4M3 weight quantizers, one 128x128 tile of one expert's [N, K] per CTA:
// Each CTA walks a band of up to 8 tiles through a ring of cp.async stages (quant_common.cuh).
//   mxfp8_weight_tiles_kernel   32x32 tiles (upstream's training weights): one qdata and the FPROP
//                               scales [E*N, K/32]; mxfp8_dgrad_scales_kernel then writes the DGRAD
//                               scales [E*K, N/32] from them
//   fp8_blockwise_weight_kernel one 128x128 block: qdata, and the transposed copy DGRAD reads
//   transpose_e4m3_kernel       a checkpoint's E4M3 block transposed (bytes unchanged)
// Memory-bound; docs/perf.md ("GPU quantizers") has the prediction and the measurement.
#include <algorithm>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kThreads = kTileThreads;
constexpr int kBandTiles = 8;  // column tiles one CTA walks through the ring

// The CTA's band: expert e (grid z), rows n0.. (grid y), up to kBandTiles column tiles from k0.
struct TileCoords {
  int64_t e, n0, k0;
};

__device__ __forceinline__ TileCoords band_coords() {
  return {static_cast<int64_t>(blockIdx.z), static_cast<int64_t>(blockIdx.y) * kTile,
          static_cast<int64_t>(blockIdx.x) * kBandTiles * kTile};
}

__device__ __forceinline__ int band_tiles(const TileCoords& band, int64_t k) {
  const int64_t left = (k - band.k0 + kTile - 1) / kTile;
  return static_cast<int>(left < kBandTiles ? left : kBandTiles);
}

__global__ void __launch_bounds__(kThreads) mxfp8_weight_tiles_kernel(const uint16_t* w, int64_t n, int64_t k,
                                                                      uint8_t* q, uint8_t* fprop_scales) {
  constexpr int kSub = kTile / numeric::kMXBlock;  // 32x32 tiles per side (4)
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  Bf16Tile* ring = reinterpret_cast<Bf16Tile*>(dynamic_smem);
  __shared__ uint32_t amax_bits[kSub][kSub];
  __shared__ uint8_t scale_of[kSub][kSub];
  const TileCoords band = band_coords();
  const int slot = threadIdx.x % kTileSlots;
  const int64_t kb = k / numeric::kMXBlock;
  const uint16_t* expert = w + band.e * n * k;
  auto issue = [&](int t, Bf16Tile& stage) { issue_tile(stage, expert, k, n, k, band.n0, band.k0 + t * kTile); };
  for_each_tile(band_tiles(band, k), ring, issue, [&](int t, Bf16Tile& tile) {
    const int64_t k0 = band.k0 + t * kTile;
    uint4 raw[kTileLoads];
    read_own_vectors(raw, tile);
    if (threadIdx.x < kSub * kSub) amax_bits[threadIdx.x / kSub][threadIdx.x % kSub] = 0;
    float sub_amax[kSub] = {};  // this thread's amax per 32-row band (vectors 2j and 2j+1 share band j)
#pragma unroll
    for (int i = 0; i < kTileLoads; ++i) sub_amax[i / 2] = numeric::amax_nan(sub_amax[i / 2], amax_bf16x8(raw[i]));
    __syncthreads();  // amax_bits reset
    // Lanes 4s..4s+3 of both half-warps (two rows) share 32x32 tile column s: reduce, then one
    // shared atomic per (warp, band, tile column). Integer max of |x|'s bits keeps NaN on top.
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      float a = group_amax<4>(sub_amax[j]);
      a = numeric::amax_nan(a, __shfl_xor_sync(0xffffffffu, a, 16));
      if ((threadIdx.x & 31) < 16 && (threadIdx.x & 3) == 0) atomicMax(&amax_bits[j][slot / 4], __float_as_uint(a));
    }
    __syncthreads();
    if (threadIdx.x < kSub * kSub)
      scale_of[threadIdx.x / kSub][threadIdx.x % kSub] =
          numeric::e8m0_rceil_from_amax(__uint_as_float(amax_bits[threadIdx.x / kSub][threadIdx.x % kSub]));
    __syncthreads();
    const int64_t c = k0 + slot * kVec;
#pragma unroll
    for (int i = 0; i < kTileLoads; ++i) {
      const int64_t r = band.n0 + tile_row(i);
      if (r >= n || c >= k) continue;
      const uint8_t s = scale_of[i / 2][slot / 4];
      *reinterpret_cast<uint2*>(q + (band.e * n + r) * k + c) = e4m3x8(unpack_bf16x8(raw[i]), numeric::e8m0_reciprocal(s));
      if (slot % 4 == 0) fprop_scales[(band.e * n + r) * kb + c / numeric::kMXBlock] = s;
    }
    // scale_of and amax_bits are rewritten only after for_each_tile's barrier that ends this tile.
  });
}

// DGRAD scales [E*K, N/32] from the FPROP scales [E*N, K/32]: the 32x32 tile (i, j) of expert e is
// FPROP row e*N + 32i, column j, so DGRAD[e*K + c][i] = FPROP[e*N + 32i][c/32]. Written here in
// whole rows (four bytes a thread) rather than by the tile kernel, where every DGRAD row of a tile
// was another line and partly written sectors kept the tile kernel L2-bound (ncu, s16 run 6).
__global__ void __launch_bounds__(256) mxfp8_dgrad_scales_kernel(const uint8_t* fprop_scales, int64_t n, int64_t k,
                                                                 int64_t num_experts, uint8_t* dgrad_scales) {
  const int64_t nb = n / numeric::kMXBlock, kb = k / numeric::kMXBlock;
  const int64_t words_per_row = (nb + 3) / 4;
  const int64_t total = num_experts * k * words_per_row;
  for (int64_t w = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; w < total;
       w += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = w / words_per_row, i0 = (w % words_per_row) * 4;  // DGRAD row e*K + c, bytes i0..
    const int64_t e = row / k, c = row % k;
    const uint8_t* src = fprop_scales + (e * n) * kb + c / numeric::kMXBlock;
    uint8_t* dst = dgrad_scales + row * nb + i0;
    if (i0 + 4 <= nb && nb % 4 == 0) {
      *reinterpret_cast<uint32_t*>(dst) = src[(i0 + 0) * numeric::kMXBlock * kb] | (src[(i0 + 1) * numeric::kMXBlock * kb] << 8) |
                                          (src[(i0 + 2) * numeric::kMXBlock * kb] << 16) |
                                          (uint32_t{src[(i0 + 3) * numeric::kMXBlock * kb]} << 24);
    } else {
      for (int64_t i = i0; i < i0 + 4 && i < nb; ++i) dst[i - i0] = src[i * numeric::kMXBlock * kb];
    }
  }
}

__global__ void __launch_bounds__(kThreads) fp8_blockwise_weight_kernel(const uint16_t* w, int64_t n, int64_t k,
                                                                        uint8_t* q, float* scales, uint8_t* q_t,
                                                                        float* scales_t) {
  extern __shared__ __align__(16) uint8_t dynamic_smem[];
  Bf16Tile* ring = reinterpret_cast<Bf16Tile*>(dynamic_smem);
  __shared__ uint32_t amax_bits;
  const TileCoords band = band_coords();
  const int slot = threadIdx.x % kTileSlots;
  const int64_t tn = n / kTile, tk = k / kTile;
  const uint16_t* expert = w + band.e * n * k;
  auto issue = [&](int t, Bf16Tile& stage) { issue_tile(stage, expert, k, n, k, band.n0, band.k0 + t * kTile); };
  for_each_tile(band_tiles(band, k), ring, issue, [&](int t, Bf16Tile& tile) {
    const int64_t k0 = band.k0 + t * kTile;
    uint4 raw[kTileLoads];
    read_own_vectors(raw, tile);
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < kTileLoads; ++i) a = numeric::amax_nan(a, amax_bf16x8(raw[i]));
    a = group_amax<32>(a);
    if (threadIdx.x == 0) amax_bits = 0;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) atomicMax(&amax_bits, __float_as_uint(a));
    __syncthreads();
    const float amax = __uint_as_float(amax_bits);  // rewritten only after the barrier ending this tile
    const float scale = numeric::fp8_blockwise_scale(amax);
    const float mult = numeric::fp8_blockwise_multiplier(amax);
    const int64_t c = k0 + slot * kVec;
#pragma unroll
    for (int i = 0; i < kTileLoads; ++i)
      *reinterpret_cast<uint2*>(q + (band.e * n + band.n0 + tile_row(i)) * k + c) = e4m3x8(unpack_bf16x8(raw[i]), mult);
    if (threadIdx.x == 0) scales[(band.e * tn + band.n0 / kTile) * tk + k0 / kTile] = scale;
    if (!q_t) return;
    if (threadIdx.x == 0) scales_t[(band.e * tk + k0 / kTile) * tn + band.n0 / kTile] = scale;
    // Transposed: thread -> (column col, half of the rows) quantizes 64 bytes of row k0 + col in
    // registers, stages them in the tile's own stage once every thread has read it, and the tile
    // goes out in whole 128-byte rows.
    const int col = threadIdx.x % kTile, half = threadIdx.x / kTile;
    uint4 out[kTile / 2 / 16];
#pragma unroll
    for (int r = 0; r < kTile / 2; r += 16) {
      uint32_t wv[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        float f[4];
#pragma unroll
        for (int m = 0; m < 4; ++m)
          f[m] = numeric::mul_rn(ptx::bf16_lo_to_float(tile[half * (kTile / 2) + r + 4 * j + m][col]), mult);
        wv[j] = numeric::float2_to_e4m3x2(f[0], f[1]) | (static_cast<uint32_t>(numeric::float2_to_e4m3x2(f[2], f[3])) << 16);
      }
      out[r / 16] = make_uint4(wv[0], wv[1], wv[2], wv[3]);
    }
    __syncthreads();
    auto* qt = reinterpret_cast<uint8_t (*)[kTile]>(&tile[0][0]);
#pragma unroll
    for (int r = 0; r < kTile / 2 / 16; ++r) *reinterpret_cast<uint4*>(&qt[col][half * (kTile / 2) + r * 16]) = out[r];
    __syncthreads();
    store_byte_tile(qt, q_t + (band.e * k + k0) * n + band.n0, n, [](int, int) { return true; });
  });
}

__global__ void __launch_bounds__(kThreads) transpose_e4m3_kernel(const uint8_t* q, const float* scales, int64_t n,
                                                                  int64_t k, uint8_t* q_t, float* scales_t) {
  __shared__ __align__(16) uint8_t tile[kTile][kTile + 16];
  const TileCoords t{static_cast<int64_t>(blockIdx.z), static_cast<int64_t>(blockIdx.y) * kTile,
                     static_cast<int64_t>(blockIdx.x) * kTile};
  // 128 rows x 128 bytes = 1024 16-byte loads, four per thread.
#pragma unroll
  for (int i = 0; i < kTile * kTile / 16 / kThreads; ++i) {
    const int idx = threadIdx.x + i * kThreads;
    const int rr = idx / (kTile / 16), slot = idx % (kTile / 16);
    *reinterpret_cast<uint4*>(&tile[rr][slot * 16]) =
        __ldg(reinterpret_cast<const uint4*>(q + (t.e * n + t.n0 + rr) * k + t.k0 + slot * 16));
  }
  __syncthreads();
  const int col = threadIdx.x % kTile, half = threadIdx.x / kTile;
  uint8_t* dst = q_t + (t.e * k + t.k0 + col) * n + t.n0 + half * (kTile / 2);
#pragma unroll
  for (int r = 0; r < kTile / 2; r += 16) {
    uint32_t wv[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int base = half * (kTile / 2) + r + 4 * j;
      wv[j] = tile[base][col] | (tile[base + 1][col] << 8) | (tile[base + 2][col] << 16) |
              (static_cast<uint32_t>(tile[base + 3][col]) << 24);
    }
    *reinterpret_cast<uint4*>(dst + r) = make_uint4(wv[0], wv[1], wv[2], wv[3]);
  }
  const int64_t tn = n / kTile, tk = k / kTile;
  if (threadIdx.x == 0)
    scales_t[(t.e * tk + t.k0 / kTile) * tn + t.n0 / kTile] = scales[(t.e * tn + t.n0 / kTile) * tk + t.k0 / kTile];
}

dim3 tile_grid(int64_t num_experts, int64_t n, int64_t k, int band_tiles) {
  const int64_t band = int64_t{band_tiles} * kTile;
  return dim3(static_cast<unsigned>((k + band - 1) / band), static_cast<unsigned>((n + kTile - 1) / kTile),
              static_cast<unsigned>(num_experts));
}

void check_weight(const char* name, int64_t num_experts, int64_t n, int64_t k, int64_t multiple) {
  DMOE_CHECK_ARG(num_experts >= 1 && num_experts <= 65535, name, ": num_experts=", num_experts, " must be in [1, 65535]");
  DMOE_CHECK_ARG(n > 0 && k > 0 && n % multiple == 0 && k % multiple == 0, name, ": weight dims [", n, ", ", k,
                 "] must be positive multiples of ", multiple);
}

}  // namespace

void mxfp8_quantize_weight_tiles(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                 uint8_t* fprop_scales, uint8_t* dgrad_scales, cudaStream_t stream) {
  check_weight("mxfp8_quantize_weight_tiles", num_experts, n, k, numeric::kMXBlock);
  allow_dynamic_smem<mxfp8_weight_tiles_kernel>(kTileRingBytes);
  mxfp8_weight_tiles_kernel<<<tile_grid(num_experts, n, k, kBandTiles), kThreads, kTileRingBytes, stream>>>(
      static_cast<const uint16_t*>(w_ENK), n, k, q_ENK, fprop_scales);
  DMOE_CUDA_CHECK_LAUNCH();
  const int64_t words = num_experts * k * ((n / numeric::kMXBlock + 3) / 4);
  mxfp8_dgrad_scales_kernel<<<static_cast<unsigned>(std::min<int64_t>((words + 255) / 256, 8192)), 256, 0, stream>>>(
      fprop_scales, n, k, num_experts, dgrad_scales);
  DMOE_CUDA_CHECK_LAUNCH();
}

void fp8_blockwise_quantize_weight(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                   float* scales, uint8_t* q_t_EKN, float* scales_t, cudaStream_t stream) {
  check_weight("fp8_blockwise_quantize_weight", num_experts, n, k, kTile);
  DMOE_CHECK_ARG((q_t_EKN == nullptr) == (scales_t == nullptr),
                 "fp8_blockwise_quantize_weight: the transposed data and scales come together");
  allow_dynamic_smem<fp8_blockwise_weight_kernel>(kTileRingBytes);
  fp8_blockwise_weight_kernel<<<tile_grid(num_experts, n, k, kBandTiles), kThreads, kTileRingBytes, stream>>>(
      static_cast<const uint16_t*>(w_ENK), n, k, q_ENK, scales, q_t_EKN, scales_t);
  DMOE_CUDA_CHECK_LAUNCH();
}

void fp8_blockwise_transpose_weight(const uint8_t* q_ENK, const float* scales, int64_t num_experts, int64_t n,
                                    int64_t k, uint8_t* q_t_EKN, float* scales_t, cudaStream_t stream) {
  check_weight("fp8_blockwise_transpose_weight", num_experts, n, k, kTile);
  transpose_e4m3_kernel<<<tile_grid(num_experts, n, k, 1), kThreads, 0, stream>>>(q_ENK, scales, n, k, q_t_EKN, scales_t);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
