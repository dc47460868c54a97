// E4M3 weight quantizers over 128x128 tiles of one expert's [N, K], walked through a ring of
// cp.async stages (quant_common.cuh):
//   mxfp8_weight_tiles_kernel   32x32 tiles (upstream's training weights): one qdata, the FPROP
//                               scales [E*N, K/32] and the DGRAD scales [E*K, N/32]; a CTA covers a
//                               region of up to 8 x 8 tiles and writes both scale layouts once at
//                               its end, in whole rows of the region; optionally (kTransposed) the
//                               same bytes transposed per expert [E, K, N], which the MXFP8 DGRAD
//                               reads through the DGRAD scales
//   fp8_blockwise_weight_kernel one 128x128 block, a band of up to 8 tiles per CTA: qdata, and the
//                               transposed copy DGRAD reads
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
constexpr int kBandTiles = 8;  // at most this many column tiles per CTA (choose_weight_band)

// The CTA's band: expert e (grid z), rows n0.. (grid y), up to `band` column tiles from k0.
struct TileCoords {
  int64_t e, n0, k0;
};

__device__ __forceinline__ TileCoords band_coords(int band) {
  return {static_cast<int64_t>(blockIdx.z), static_cast<int64_t>(blockIdx.y) * kTile,
          static_cast<int64_t>(blockIdx.x) * band * kTile};
}

__device__ __forceinline__ int band_tiles(const TileCoords& coords, int64_t k, int band) {
  const int64_t left = (k - coords.k0 + kTile - 1) / kTile;
  return static_cast<int>(left < band ? left : band);
}

// ---- MXFP8 training weights: a region of up to 8 x 8 tiles per CTA ------------------------------
// Both scale layouts repeat the 32x32 tile scale: FPROP [E*N, K/32] along N rows, DGRAD [E*K, N/32]
// along K rows. A tile holds 4 bytes of each of its 128 FPROP rows and 128 DGRAD rows, so a CTA that
// stored them per tile wrote 256 lines of 4 bytes each (partly written sectors; ncu s16 run 6: the
// kernel was L2-bound at 87% with DRAM at 66%), or needed a second pass over the scales. A CTA that
// covers rn x rk tiles instead keeps the region's tile scales in shared memory and writes each FPROP
// row's 4 * rk bytes and each DGRAD row's 4 * rn bytes once, at the end: whole 32-byte sectors for
// an 8 x 8 region, 128 * (rn + rk) / (rn * rk) scale requests per tile instead of 256.
constexpr int kSubTiles = kTile / numeric::kMXBlock;      // 32x32 tiles per tile side (4)
constexpr int kRegionMax = 8;                             // tiles per region side
constexpr int kRegionBlocks = kRegionMax * kSubTiles;     // 32x32 tiles per region side (32)

// The region's tile scales written out as rows of scale bytes: row r (0 .. rows) of the layout is
// dst + r * row_bytes, its bytes first_block .. first_block + 4 * words come from
// grid[r / 32][0 .. 4 * words) (only blocks < blocks exist). Consecutive lanes take consecutive
// 4-byte words of a row, so a row's piece is one request.
__device__ __forceinline__ void store_region_scales(const uint8_t (*grid)[kRegionBlocks], uint8_t* dst,
                                                    int64_t row_bytes, int64_t rows, int64_t first_block,
                                                    int64_t blocks, int log2_words) {
  const int words = 1 << log2_words;
  // Whole words where every row starts 4-byte aligned (then a word is all in range or all out).
  const bool by_word = row_bytes % 4 == 0 && reinterpret_cast<uintptr_t>(dst) % 4 == 0;
  for (int64_t idx = threadIdx.x; idx < (rows << log2_words); idx += kThreads) {
    const int64_t r = idx >> log2_words;
    const int word = static_cast<int>(idx & (words - 1));
    const int64_t b = first_block + 4 * word;
    if (b >= blocks) continue;
    const uint8_t* src = &grid[r / numeric::kMXBlock][4 * word];
    uint8_t* out = dst + r * row_bytes + b;
    if (by_word) {
      *reinterpret_cast<uint32_t*>(out) = *reinterpret_cast<const uint32_t*>(src);
    } else {
      for (int j = 0; j < 4 && b + j < blocks; ++j) out[j] = src[j];
    }
  }
}

// Grid: x = region along K, y = region along N, z = expert. log2_rn / log2_rk: region tiles per side.
// kTransposed: also q_t [E, K, N]. Warp w takes the 32 N-rows of band w % 4 (one 32x32 tile's rows)
// and 64 K-columns (two per lane, one 4-byte shared load per row: a warp reads 128 contiguous
// bytes) of the landed tile, in registers before the tile's first barrier; once the tile scales
// are known it quantizes them with the scale of its one 32x32 tile (the row pass's arithmetic on
// the same values: the same bytes), stages them transposed in the tile's own stage (free: every
// thread has read it) and the tile goes out as whole 128-byte rows of q_t (store_byte_tile). Both
// instances fit two CTAs per SM (the 96 KiB ring is the limit): at most 128 registers.
// kCopy: no transposed copy, the same bytes transposed, or (kSharedScales) the weight at shared scales per
// 128x128 tile: q and q_t hold each code re-rounded at the largest of the tile's sixteen codes
// (mxfp8_code_at_shared_scale) and both grids hold that code for all sixteen 32x32 tiles (G151).
enum class TransposedCopy : int { kNone, kExact, kSharedScales };

template <TransposedCopy kCopy>
__global__ void __launch_bounds__(kThreads, 2) mxfp8_weight_tiles_kernel(const uint16_t* w, int64_t n, int64_t k,
                                                                         int log2_rn, int log2_rk, uint8_t* q,
                                                                         uint8_t* fprop_scales, uint8_t* dgrad_scales,
                                                                         uint8_t* q_t) {
  constexpr bool kTransposed = kCopy != TransposedCopy::kNone;
  constexpr bool kShared = kCopy == TransposedCopy::kSharedScales;
  extern __shared__ __align__(kRingAlign) uint8_t dynamic_smem[];
  Bf16Tile* ring = reinterpret_cast<Bf16Tile*>(dynamic_smem);
  __shared__ uint32_t amax_bits[kSubTiles][kSubTiles];
  // The region's tile scales, [N block][K block] and transposed (FPROP and DGRAD rows read them).
  __shared__ __align__(16) uint8_t scale_nk[kRegionBlocks][kRegionBlocks];
  __shared__ __align__(16) uint8_t scale_kn[kRegionBlocks][kRegionBlocks];
  const int64_t e = blockIdx.z;
  const int64_t n_first = (static_cast<int64_t>(blockIdx.y) * kTile) << log2_rn;
  const int64_t k_first = (static_cast<int64_t>(blockIdx.x) * kTile) << log2_rk;
  const int64_t n_left = (n - n_first + kTile - 1) / kTile, k_left = (k - k_first + kTile - 1) / kTile;
  const int tiles_n = static_cast<int>(n_left < (1 << log2_rn) ? n_left : (1 << log2_rn));
  const int tiles_k = static_cast<int>(k_left < (1 << log2_rk) ? k_left : (1 << log2_rk));
  const int slot = threadIdx.x % kTileSlots;
  const int64_t kb = k / numeric::kMXBlock, nb = n / numeric::kMXBlock;
  const uint16_t* expert = w + e * n * k;
  // Tile t of the region: row t / tiles_k, column t % tiles_k (along K first: one N band at a time).
  auto issue = [&](int t, Bf16Tile& stage) {
    issue_tile(stage, expert, k, n, k, n_first + (t / tiles_k) * kTile, k_first + (t % tiles_k) * kTile);
  };
  for_each_tile(tiles_n * tiles_k, ring, issue, [&](int t, Bf16Tile& tile) {
    const int tn = t / tiles_k, tk = t % tiles_k;
    const int64_t n0 = n_first + tn * kTile, k0 = k_first + tk * kTile;
    uint4 raw[kTileLoads];
    read_own_vectors(raw, tile);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int band = warp % kSubTiles;              // transposed pass: the thread's 32-row band
    const int f0 = (warp / kSubTiles) * 64 + 2 * lane;  // and its two tile columns
    uint32_t pair[kTransposed ? numeric::kMXBlock : 1];
    if constexpr (kTransposed) {
#pragma unroll
      for (int r = 0; r < numeric::kMXBlock; ++r)
        pair[r] = *reinterpret_cast<const uint32_t*>(&tile[band * numeric::kMXBlock + r][f0]);
    }
    if (threadIdx.x < kSubTiles * kSubTiles) amax_bits[threadIdx.x / kSubTiles][threadIdx.x % kSubTiles] = 0;
    float sub_amax[kSubTiles] = {};  // this thread's amax per 32-row band (vectors 2j and 2j+1 share band j)
#pragma unroll
    for (int i = 0; i < kTileLoads; ++i) sub_amax[i / 2] = numeric::amax_nan(sub_amax[i / 2], amax_bf16x8(raw[i]));
    __syncthreads();  // amax_bits reset
    // Lanes 4s..4s+3 of both half-warps (two rows) share 32x32 tile column s: reduce, then one
    // shared atomic per (warp, band, tile column). Integer max of |x|'s bits keeps NaN on top.
#pragma unroll
    for (int j = 0; j < kSubTiles; ++j) {
      float a = group_amax<4>(sub_amax[j]);
      a = numeric::amax_nan(a, __shfl_xor_sync(0xffffffffu, a, 16));
      if ((threadIdx.x & 31) < 16 && (threadIdx.x & 3) == 0) atomicMax(&amax_bits[j][slot / 4], __float_as_uint(a));
    }
    __syncthreads();
    if (threadIdx.x < kSubTiles * kSubTiles) {
      const int j = threadIdx.x / kSubTiles, s = threadIdx.x % kSubTiles;
      const uint8_t scale = numeric::e8m0_rceil_from_amax(__uint_as_float(amax_bits[j][s]));
      scale_nk[tn * kSubTiles + j][tk * kSubTiles + s] = scale;
      scale_kn[tk * kSubTiles + s][tn * kSubTiles + j] = scale;
    }
    __syncthreads();
    // kSharedScales: the 128x128 block's shared code, the largest of its sixteen tile codes.
    uint32_t shared = 0;
    if constexpr (kShared) {
#pragma unroll
      for (int a = 0; a < kSubTiles; ++a)
        shared = max(shared, max_code4(*reinterpret_cast<const uint32_t*>(&scale_nk[tn * kSubTiles + a][tk * kSubTiles])));
    }
    const int64_t c = k0 + slot * kVec;
#pragma unroll
    for (int i = 0; i < kTileLoads; ++i) {
      const int64_t r = n0 + tile_row(i);
      if (r >= n || c >= k) continue;
      const uint8_t s = scale_nk[tn * kSubTiles + i / 2][tk * kSubTiles + slot / 4];
      uint2 v = e4m3x8(unpack_bf16x8(raw[i]), numeric::e8m0_reciprocal(s));
      if (kShared && s < shared) {  // the code re-rounded at the shared scale (the transposed pass's rule)
        const float factor = shared_scale_factor(shared - s);
        v = make_uint2(e4m3x4_scaled(v.x, factor), e4m3x4_scaled(v.y, factor));
      }
      *reinterpret_cast<uint2*>(q + (e * n + r) * k + c) = v;
    }
    if constexpr (kTransposed) {
      // Every thread read its tile values before the first barrier above: the stage is scratch.
      const uint8_t own = scale_nk[tn * kSubTiles + band][tk * kSubTiles + f0 / numeric::kMXBlock];
      const float mult = numeric::e8m0_reciprocal(own);
      const bool rescale = kShared && own < shared;
      const float factor = kShared ? shared_scale_factor(shared - own) : 1.0f;  // 2^-(shared - own)
      auto* qt = reinterpret_cast<uint8_t (*)[kTile]>(&tile[0][0]);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        uint32_t wv[numeric::kMXBlock / 4];
#pragma unroll
        for (int r = 0; r < numeric::kMXBlock; r += 4) {
          float f[4];
#pragma unroll
          for (int j = 0; j < 4; ++j)
            f[j] = numeric::mul_rn(h == 0 ? ptx::bf16_lo_to_float(pair[r + j]) : ptx::bf16_hi_to_float(pair[r + j]), mult);
          wv[r / 4] = numeric::float2_to_e4m3x2(f[0], f[1]) |
                      (static_cast<uint32_t>(numeric::float2_to_e4m3x2(f[2], f[3])) << 16);
          if (rescale) wv[r / 4] = e4m3x4_scaled(wv[r / 4], factor);
        }
        const int col = f0 + h;
        *reinterpret_cast<uint4*>(&qt[col][staged_piece(col, 2 * band) * 16]) = make_uint4(wv[0], wv[1], wv[2], wv[3]);
        *reinterpret_cast<uint4*>(&qt[col][staged_piece(col, 2 * band + 1) * 16]) = make_uint4(wv[4], wv[5], wv[6], wv[7]);
      }
      __syncthreads();
      // Every thread has read this tile's own codes: the grids take the shared one for all sixteen tiles.
      if (kShared && threadIdx.x < kSubTiles * kSubTiles) {
        const int j = threadIdx.x / kSubTiles, s = threadIdx.x % kSubTiles;
        scale_nk[tn * kSubTiles + j][tk * kSubTiles + s] = static_cast<uint8_t>(shared);
        scale_kn[tk * kSubTiles + s][tn * kSubTiles + j] = static_cast<uint8_t>(shared);
      }
      store_byte_tile(qt, q_t + (e * k + k0) * n + n0, n, [&](int col, int off) { return k0 + col < k && n0 + off < n; });
    }
    // amax_bits is rewritten only after for_each_tile's barrier that starts the next tile; each tile owns
    // its own cells of the scale grids.
  });
  // for_each_tile ended on a barrier: the grids are complete.
  const int64_t rows_n = (n - n_first < (int64_t{tiles_n} * kTile)) ? n - n_first : int64_t{tiles_n} * kTile;
  const int64_t rows_k = (k - k_first < (int64_t{tiles_k} * kTile)) ? k - k_first : int64_t{tiles_k} * kTile;
  store_region_scales(scale_nk, fprop_scales + (e * n + n_first) * kb, kb, rows_n, k_first / numeric::kMXBlock, kb,
                      log2_rk);
  store_region_scales(scale_kn, dgrad_scales + (e * k + k_first) * nb, nb, rows_k, n_first / numeric::kMXBlock, nb,
                      log2_rn);
}

__global__ void __launch_bounds__(kThreads) fp8_blockwise_weight_kernel(const uint16_t* w, int64_t n, int64_t k,
                                                                        int band_width, uint8_t* q, float* scales,
                                                                        uint8_t* q_t, float* scales_t) {
  extern __shared__ __align__(kRingAlign) uint8_t dynamic_smem[];
  Bf16Tile* ring = reinterpret_cast<Bf16Tile*>(dynamic_smem);
  __shared__ uint32_t amax_bits;
  const TileCoords band = band_coords(band_width);
  const int slot = threadIdx.x % kTileSlots;
  const int64_t tn = n / kTile, tk = k / kTile;
  const uint16_t* expert = w + band.e * n * k;
  auto issue = [&](int t, Bf16Tile& stage) { issue_tile(stage, expert, k, n, k, band.n0, band.k0 + t * kTile); };
  for_each_tile(band_tiles(band, k, band_width), ring, issue, [&](int t, Bf16Tile& tile) {
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
    const float amax = __uint_as_float(amax_bits);  // rewritten only after the barrier starting the next tile
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
    for (int r = 0; r < kTile / 2 / 16; ++r)
      *reinterpret_cast<uint4*>(&qt[col][staged_piece(col, half * (kTile / 2 / 16) + r) * 16]) = out[r];
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

// The MXFP8 weight-tile region: region_tile_cost divided by the wave efficiency, the scale rows
// (128 * (1/rn + 1/rk) L2 requests per tile) breaking ties. The estimate by L2 requests alone chose
// 8 x 8 at dsv3_prefill (0.81x the copy with the transposed copy; 1 x 2: 0.84x) and 4 x 4 at
// qwen3_30b (0.78x; 1 x 2: 0.88x), s28 r3.
RegionShape choose_weight_region(int64_t tiles_n, int64_t tiles_k, int64_t experts, int64_t slots) {
  return choose_region(tiles_n, tiles_k, experts, slots, kRegionMax, kRegionMax * kRegionMax,
                       [](int64_t rn, int64_t rk) {
                         return region_tile_cost(rn * rk, mxfp8_scale_row_requests(rn, rk));
                       });
}

// FP8 blockwise weights: the band (1 x b tiles along K) the same way; its two scales per tile are
// single floats.
int choose_weight_band(int64_t tiles_n, int64_t tiles_k, int64_t experts, int64_t slots) {
  const RegionShape r = choose_region(1, tiles_k, tiles_n * experts, slots, kBandTiles, kBandTiles,
                                      [](int64_t, int64_t b) { return region_tile_cost(b); });
  return 1 << r.log2_b;
}

struct WeightTilesLaunch {
  dim3 grid;
  cudaStream_t stream;
  const uint16_t* w;
  int64_t n, k;
  int log2_rn, log2_rk;
  uint8_t *q, *fprop_scales, *dgrad_scales, *q_t;
};
template <TransposedCopy kCopy>
void launch_weight_tiles(const WeightTilesLaunch& l) {
  allow_dynamic_smem<mxfp8_weight_tiles_kernel<kCopy>>(kTileRingBytes);
  mxfp8_weight_tiles_kernel<kCopy><<<l.grid, kThreads, kTileRingBytes, l.stream>>>(
      l.w, l.n, l.k, l.log2_rn, l.log2_rk, l.q, l.fprop_scales, l.dgrad_scales, l.q_t);
}

void check_weight(const char* name, int64_t num_experts, int64_t n, int64_t k, int64_t multiple) {
  DMOE_CHECK_ARG(num_experts >= 1 && num_experts <= 65535, name, ": num_experts=", num_experts, " must be in [1, 65535]");
  DMOE_CHECK_ARG(n > 0 && k > 0 && n % multiple == 0 && k % multiple == 0, name, ": weight dims [", n, ", ", k,
                 "] must be positive multiples of ", multiple);
}

}  // namespace

void mxfp8_quantize_weight_tiles_in_regions(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k,
                                            uint8_t* q_ENK, uint8_t* fprop_scales, uint8_t* q_t_EKN,
                                            uint8_t* dgrad_scales, int log2_region_n, int log2_region_k,
                                            cudaStream_t stream, bool at_shared_scales) {
  check_weight("mxfp8_quantize_weight_tiles", num_experts, n, k, numeric::kMXBlock);
  DMOE_CHECK_ARG(!at_shared_scales || (q_t_EKN != nullptr && n % kTile == 0 && k % kTile == 0),
                 "mxfp8_quantize_weight_tiles: the transposed copy at shared scales needs q_t and weight dims that "
                 "are multiples of 128, got [", n, ", ", k, "]");
  DMOE_CHECK_ARG(log2_region_n >= 0 && (1 << log2_region_n) <= kRegionMax && log2_region_k >= 0 &&
                     (1 << log2_region_k) <= kRegionMax,
                 "mxfp8_quantize_weight_tiles: region 2^", log2_region_n, " x 2^", log2_region_k, " tiles (at most ",
                 kRegionMax, " per side)");
  DMOE_CHECK_ARG(q_t_EKN == nullptr || reinterpret_cast<uintptr_t>(q_t_EKN) % 16 == 0,
                 "mxfp8_quantize_weight_tiles: the transposed copy must be 16-byte aligned");
  const int64_t region_n = int64_t{kTile} << log2_region_n, region_k = int64_t{kTile} << log2_region_k;
  const dim3 grid(static_cast<unsigned>((k + region_k - 1) / region_k), static_cast<unsigned>((n + region_n - 1) / region_n),
                  static_cast<unsigned>(num_experts));
  const auto* w = static_cast<const uint16_t*>(w_ENK);
  const WeightTilesLaunch l{grid, stream, w, n, k, log2_region_n, log2_region_k, q_ENK, fprop_scales, dgrad_scales, q_t_EKN};
  if (q_t_EKN == nullptr) launch_weight_tiles<TransposedCopy::kNone>(l);
  else if (at_shared_scales) launch_weight_tiles<TransposedCopy::kSharedScales>(l);
  else launch_weight_tiles<TransposedCopy::kExact>(l);
  DMOE_CUDA_CHECK_LAUNCH();
}

void mxfp8_quantize_weight_tiles_in_regions(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k,
                                            uint8_t* q_ENK, uint8_t* fprop_scales, uint8_t* dgrad_scales,
                                            int log2_region_n, int log2_region_k, cudaStream_t stream) {
  mxfp8_quantize_weight_tiles_in_regions(w_ENK, num_experts, n, k, q_ENK, fprop_scales, nullptr, dgrad_scales,
                                         log2_region_n, log2_region_k, stream);
}

void mxfp8_quantize_weight_tiles(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                 uint8_t* fprop_scales, uint8_t* q_t_EKN, uint8_t* dgrad_scales, cudaStream_t stream,
                                 bool at_shared_scales) {
  check_weight("mxfp8_quantize_weight_tiles", num_experts, n, k, numeric::kMXBlock);
  // Both instances hold two CTAs per SM (the ring's shared memory bounds them): one wave size.
  allow_dynamic_smem<mxfp8_weight_tiles_kernel<TransposedCopy::kNone>>(kTileRingBytes);
  const RegionShape region = choose_weight_region(
      (n + kTile - 1) / kTile, (k + kTile - 1) / kTile, num_experts,
      resident_ctas(reinterpret_cast<const void*>(&mxfp8_weight_tiles_kernel<TransposedCopy::kNone>), kThreads, kTileRingBytes));
  mxfp8_quantize_weight_tiles_in_regions(w_ENK, num_experts, n, k, q_ENK, fprop_scales, q_t_EKN, dgrad_scales,
                                         region.log2_a, region.log2_b, stream, at_shared_scales);
}

void mxfp8_quantize_weight_tiles(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                 uint8_t* fprop_scales, uint8_t* dgrad_scales, cudaStream_t stream) {
  mxfp8_quantize_weight_tiles(w_ENK, num_experts, n, k, q_ENK, fprop_scales, nullptr, dgrad_scales, stream);
}

void fp8_blockwise_quantize_weight(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                   float* scales, uint8_t* q_t_EKN, float* scales_t, cudaStream_t stream) {
  check_weight("fp8_blockwise_quantize_weight", num_experts, n, k, kTile);
  DMOE_CHECK_ARG((q_t_EKN == nullptr) == (scales_t == nullptr),
                 "fp8_blockwise_quantize_weight: the transposed data and scales come together");
  allow_dynamic_smem<fp8_blockwise_weight_kernel>(kTileRingBytes);
  const int band = choose_weight_band(
      n / kTile, k / kTile, num_experts,
      resident_ctas(reinterpret_cast<const void*>(&fp8_blockwise_weight_kernel), kThreads, kTileRingBytes));
  fp8_blockwise_weight_kernel<<<tile_grid(num_experts, n, k, band), kThreads, kTileRingBytes, stream>>>(
      static_cast<const uint16_t*>(w_ENK), n, k, band, q_ENK, scales, q_t_EKN, scales_t);
  DMOE_CUDA_CHECK_LAUNCH();
}

void fp8_blockwise_transpose_weight(const uint8_t* q_ENK, const float* scales, int64_t num_experts, int64_t n,
                                    int64_t k, uint8_t* q_t_EKN, float* scales_t, cudaStream_t stream) {
  check_weight("fp8_blockwise_transpose_weight", num_experts, n, k, kTile);
  transpose_e4m3_kernel<<<tile_grid(num_experts, n, k, 1), kThreads, 0, stream>>>(q_ENK, scales, n, k, q_t_EKN, scales_t);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
