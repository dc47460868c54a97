// What the quantize kernels share: BF16 vectors in registers, NaN-propagating group amax over
// shuffles, the two E4M3 formats as traits (MXFP8: E8M0 power-of-two scales; FP8 blockwise: FP32
// scales), and the device-side diagnostic for a broken layout precondition.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <tuple>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/device/ptx/cp_async.cuh"
#include "dist_moe/device/ptx/cvt.cuh"
#include "dist_moe/device/quant/vectors.cuh"  // kVec, Vec8, amax_bf16x8, group_amax, e4m3x8
#include "quant/quantize.h"

namespace dist_moe::quant {

// Whether `row` is one of the groups' token rows: below offsets_G1[num_groups] and, when counts_G
// is set, among the first counts_G[g] rows of its group g (the rest of a group's segment is the
// padding of a layout padded per group). A binary search over the offsets.
__device__ __forceinline__ bool is_token_row(const RowGroups& groups, int64_t row) {
  const int32_t* off = groups.offsets_G1;
  if (row >= off[groups.num_groups]) return false;
  if (groups.counts_G == nullptr) return true;
  int lo = 0, hi = groups.num_groups - 1;  // the last group g with off[g] <= row
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (off[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  return row - off[lo] < groups.counts_G[lo];
}

// The |x| bits maxima of two 16-byte loads packed in one word: a's in the low 16 bits, b's in the
// high 16 (amax_bf16x8's value is either half shifted to the top of a float). Packed, the group
// maxima below take one shuffle and one 16-bit max for two vectors (group_amax16x2).
__device__ __forceinline__ uint32_t amax16x2_bf16x8(const uint4& a, const uint4& b) {
  constexpr uint32_t kAbs = 0x7fff7fffu;
  const uint32_t ma = __vmaxu2(__vmaxu2(a.x & kAbs, a.y & kAbs), __vmaxu2(a.z & kAbs, a.w & kAbs));
  const uint32_t mb = __vmaxu2(__vmaxu2(b.x & kAbs, b.y & kAbs), __vmaxu2(b.z & kAbs, b.w & kAbs));
  return __vmaxu2(__byte_perm(ma, mb, 0x5410), __byte_perm(ma, mb, 0x7632));
}

// group_amax over the two packed halves at once: |x| bits order like amax_nan's (NaN on top), so
// the 16-bit unsigned maxima give exactly group_amax's two results.
template <int kWidth>
__device__ __forceinline__ uint32_t group_amax16x2(uint32_t packed) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) packed = __vmaxu2(packed, __shfl_xor_sync(0xffffffffu, packed, o));
  return packed;
}
__device__ __forceinline__ float amax16_lo(uint32_t packed) { return __uint_as_float(packed << 16); }
__device__ __forceinline__ float amax16_hi(uint32_t packed) { return __uint_as_float(packed & 0xffff0000u); }

// The same over a register pair (two BF16 values).
__device__ __forceinline__ uint32_t abs_bf16x2(uint32_t w) { return w & 0x7fff7fffu; }

// The E4M3 formats with one scale per block, as the generic kernels see them: a block's stored
// scale and its quantization multiplier, both from the block's amax.
// from_bf16_amax is the same for a BF16-valued amax with the format's shared-memory tables
// (kTableEntries floats, filled by fill_tables before a barrier): FP8 blockwise replaces its two IEEE
// divisions by table look-ups (numeric::fp8_blockwise_factors_from_tables); MXFP8 needs no table,
// its scale byte is the amax's exponent field plus a significand test (e8m0_rceil_from_bf16_amax).
struct Mxfp8Format {
  static constexpr int kBlock = numeric::kMXBlock;
  static constexpr int kTableEntries = 1;
  using Scale = uint8_t;
  __device__ __forceinline__ static void from_amax(float amax, Scale& scale, float& mult) {
    scale = numeric::e8m0_rceil_from_amax(amax);
    mult = numeric::e8m0_reciprocal(scale);  // exact power of two: mxfp8_quantize_value's factor
  }
  __device__ __forceinline__ static void fill_tables(float*) {}
  __device__ __forceinline__ static void from_bf16_amax(float amax, const float*, Scale& scale, float& mult) {
    numeric::e8m0_rceil_from_bf16_amax(amax, scale, mult);  // integer steps on the exponent field
  }
};

struct Fp8BlockwiseFormat {
  static constexpr int kBlock = numeric::kFP8BlockwiseBlock;
  static constexpr int kTableEntries = 256;  // multipliers [0, 128), scales [128, 256)
  using Scale = float;
  __device__ __forceinline__ static void from_amax(float amax, Scale& scale, float& mult) {
    scale = numeric::fp8_blockwise_scale(amax);
    mult = numeric::fp8_blockwise_multiplier(amax);
  }
  // Every thread of the CTA calls it (blockDim.x >= 128).
  __device__ __forceinline__ static void fill_tables(float* tables) {
    if (threadIdx.x < 128) {
      tables[threadIdx.x] = numeric::fp8_blockwise_multiplier_significand(threadIdx.x);
      tables[128 + threadIdx.x] = numeric::fp8_blockwise_scale_significand(threadIdx.x);
    }
  }
  __device__ __forceinline__ static void from_bf16_amax(float amax, const float* tables, Scale& scale, float& mult) {
    numeric::fp8_blockwise_factors_from_tables(amax, tables, tables + 128, scale, mult);
  }
};

// MXFP8 at a shared scale per 128 elements (numeric::mxfp8_quantize_rows_shared; perf_history G152):
// FP8 blockwise's blocks and FP32 scale layouts with MXFP8's rule -- the E8M0 RCEIL code of the
// 128-block's amax, stored as its power of two.
struct Mxfp8SharedFormat {
  static constexpr int kBlock = numeric::kMXSharedBlock;
  static constexpr int kTableEntries = 1;
  using Scale = float;
  __device__ __forceinline__ static void from_amax(float amax, Scale& scale, float& mult) {
    const uint8_t code = numeric::e8m0_rceil_from_amax(amax);
    scale = numeric::e8m0_to_float(code);
    mult = numeric::e8m0_reciprocal(code);
  }
  __device__ __forceinline__ static void fill_tables(float*) {}
  __device__ __forceinline__ static void from_bf16_amax(float amax, const float*, Scale& scale, float& mult) {
    uint8_t code;
    numeric::e8m0_rceil_from_bf16_amax(amax, code, mult);
    scale = numeric::e8m0_to_float(code);
  }
};

// fn(F{}) with the format struct of an FP8-blockwise quantizer's scale rule (quantize.h Fp8BlockScale).
template <class Fn>
void with_fp8_block_scale(Fp8BlockScale rule, Fn&& fn) {
  if (rule == Fp8BlockScale::kMxfp8Shared) fn(Mxfp8SharedFormat{});
  else fn(Fp8BlockwiseFormat{});
}

// A thread's index among the 256 threads of a tile: the CTA's (CtaThread) or, in a CTA of 512 running
// two tiles at once, its half's (HalfCtaThread).
struct CtaThread {
  __device__ __forceinline__ unsigned operator()() const { return threadIdx.x; }
};
struct HalfCtaThread {
  __device__ __forceinline__ unsigned operator()() const { return threadIdx.x % 256; }
};

// ---- 128x128 BF16 tiles through a ring of shared-memory stages ----------------------------------
// The tile kernels (both activation orientations, weight tiles) are memory-bound with a barrier or
// two per tile; a ring of cp.async stages keeps the next kTileStages - 1 tiles' loads in flight
// while one tile is processed, without holding the bytes in registers.

constexpr int kTile = 128;                 // tile rows and columns
constexpr int kTileThreads = 256;          // every tile kernel's CTA
constexpr int kTileStages = 3;             // 96 KiB of stages: two CTAs per SM (rows + columns: 2)
constexpr int kTileSlots = kTile / kVec;   // 16-byte slots per tile row (16)
constexpr int kTileRowStep = kTileThreads / kTileSlots;  // tile rows one pass of the CTA covers (16)
constexpr int kTileLoads = kTile / kTileRowStep;         // 16-byte vectors per thread per tile (8)
using Bf16Tile = uint16_t[kTile][kTile];
constexpr size_t kTileRingBytes = sizeof(Bf16Tile) * kTileStages;

// Where a ring lives. Dynamic shared memory starts where the kernel's static variables end, only
// as aligned as its extern declaration asks: with the 16 bytes the ring kernels asked until session
// 49 it sat 16 bytes past a 128-byte line in the compact-columns instantiations (their two int64
// more) and the FP8-blockwise weight kernel, 64 past in the MXFP8 weight-tile kernel, so every
// 128-byte ring row straddled two lines and each 16-byte cp.async landed across them: ncu counted
// twice the ideal L2 sectors and three times the ideal shared wavefronts on every ring copy of the
// MXFP8 fused dxy kernel, none on its aligned FP8-blockwise twin (perf_history G109). The ring
// kernels declare their dynamic shared memory kRingAlign-aligned; ptxas then rounds the static
// variables up to it (the compact rows + columns kernels: 10384 -> 10496 bytes).
constexpr size_t kRingAlign = 128;

// Row of tile vector i of thread `tid` of a tile's 256 (its slot is tid % kTileSlots). A CTA of
// 512 threads runs two tiles at once, each with its own 256 (tid = threadIdx.x % kTileThreads).
__device__ __forceinline__ int tile_row(int i, unsigned tid = threadIdx.x) { return tid / kTileSlots + i * kTileRowStep; }

// Issues the copies of the tile at (r0, c0) of the row-major BF16 matrix [rows, cols] into `tile`;
// what lies outside the matrix is zero-filled.
__device__ __forceinline__ void issue_tile(Bf16Tile& tile, const uint16_t* base, int64_t row_stride, int64_t rows,
                                           int64_t cols, int64_t r0, int64_t c0) {
  const int slot = threadIdx.x % kTileSlots;
  const int64_t c = c0 + slot * kVec;
#pragma unroll
  for (int i = 0; i < kTileLoads; ++i) {
    const int r = tile_row(i);
    const bool valid = r0 + r < rows && c < cols;
    ptx::cp_async_16_zfill(&tile[r][slot * kVec], valid ? base + (r0 + r) * row_stride + c : base, valid);
  }
}

// The same for a gathered matrix: row r at row_ptrs[r] (nullptr = a zero row, never read). A warp
// copies 16 rows, two per pass (tile_row: one per half-warp); lane l loads the pointer of pass
// l / 2 % 8's row of half-warp l % 2 -- one load per lane, not one per vector -- and each thread
// takes its rows' pointers by shuffles (their wait is 10-12% of the gathered quantizer's stall
// samples; an L1 prefetch of the next token tile's pointers moved neither them nor its time:
// perf_history G111). Every thread of the warp must call it.
__device__ __forceinline__ void issue_gathered_tile(Bf16Tile& tile, const void* const* row_ptrs, int64_t rows,
                                                    int64_t cols, int64_t r0, int64_t c0) {
  const int slot = threadIdx.x % kTileSlots, lane = threadIdx.x % 32;
  const int64_t c = c0 + slot * kVec;
  const int64_t own = r0 + (threadIdx.x / 32) * 2 + (lane & 1) + kTileRowStep * ((lane >> 1) & (kTileLoads - 1));
  const auto* table = reinterpret_cast<const unsigned long long*>(row_ptrs);
  const unsigned long long loaded = own < rows ? __ldg(table + own) : 0ull;
#pragma unroll
  for (int i = 0; i < kTileLoads; ++i) {
    const int r = tile_row(i);
    const auto* row = reinterpret_cast<const uint16_t*>(__shfl_sync(0xffffffffu, loaded, 2 * i + lane / kTileSlots));
    const bool valid = row != nullptr && c < cols;
    ptx::cp_async_16_zfill(&tile[r][slot * kVec], valid ? static_cast<const void*>(row + c) : row_ptrs, valid);
  }
}

// Thread tid's kTileLoads vectors of a landed tile (row tile_row(i, tid), slot tid % kTileSlots).
__device__ __forceinline__ void read_own_vectors(uint4 (&raw)[kTileLoads], const Bf16Tile& tile,
                                                 unsigned tid = threadIdx.x) {
#pragma unroll
  for (int i = 0; i < kTileLoads; ++i)
    raw[i] = *reinterpret_cast<const uint4*>(&tile[tile_row(i, tid)][(tid % kTileSlots) * kVec]);
}

// Bf16Matrix::row_scales of a tile's rows r0 .. r0 + 127 into `scores` (shared memory, 128 FP32),
// copied ahead of the tile's use (cp.async, 16 bytes per thread of the first 32): read at the use,
// their L2 latency stalled every tile (G144, s69 r2: the scaled quantizer 0.07 ms over its unscaled
// twin). Rows at or past `rows` (a multiple of 4) are zero-filled, never read.
__device__ __forceinline__ void issue_tile_scores(float* scores, const float* row_scales, int64_t rows, int64_t r0) {
  if (threadIdx.x < kTile / 4) {
    const int64_t r = r0 + 4 * threadIdx.x;
    ptx::cp_async_16_zfill(scores + 4 * threadIdx.x, r < rows ? row_scales + r : row_scales, r < rows);
  }
}

// A landed tile scaled in place by its rows' scores (issue_tile_scores): each thread's own vectors
// become bf16_rne(score * value) -- the BF16 rounding of one FP32 product, the top-k backward's
// store of s * g -- or +0 where the row's score is NaN. The caller syncs before other threads read
// the tile.
__device__ __forceinline__ void scale_tile_rows(Bf16Tile& tile, const float* scores) {
#pragma unroll
  for (int i = 0; i < kTileLoads; ++i) {
    const int r = tile_row(i);
    const float s = scores[r];
    auto* v = reinterpret_cast<uint4*>(&tile[r][(threadIdx.x % kTileSlots) * kVec]);
    const uint4 u = *v;
    uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] = s == s ? ptx::pack_bf16x2(s * ptx::bf16_lo_to_float(w[j]), s * ptx::bf16_hi_to_float(w[j])) : 0u;
    *v = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Walks n tiles through a ring of kStages stages (a stage: one Bf16Tile, or an array of them for a
// kernel that reads several inputs per tile): issue(t, stage) starts tile t's copies, body(t,
// stage) runs once they have landed and are visible to the whole CTA (the body may reuse its stage
// as scratch after a barrier of its own). One barrier per tile: tile t + kStages - 1 is issued right
// after the barrier that publishes tile t, into the stage tile t - 1 used -- every thread has left
// body(t - 1) by then, so that barrier also separates consecutive bodies (their shared-memory
// hazards need no barrier of their own) -- and tiles t + 1 .. t + kStages - 2 are in flight while
// body(t) runs, t + kStages - 1 from its start. prologue() runs while the first copies are in
// flight; it may use the last stage as scratch (nothing lands there before the first barrier, which
// also publishes what it wrote). The walk ends on a barrier: what the bodies left in shared memory
// is visible to the whole CTA.
struct NoPrologue {
  __device__ void operator()() const {}
};

template <int kStages = kTileStages, class Stage, class Issue, class Body, class Prologue = NoPrologue>
__device__ __forceinline__ void for_each_tile(int n, Stage* ring, Issue issue, Body body, Prologue prologue = {}) {
  static_assert(kStages >= 2, "a stage in use and one loading");
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < n) issue(t, ring[t]);
    ptx::cp_async_commit();
  }
  prologue();
  for (int t = 0; t < n; ++t) {
    ptx::cp_async_wait<kStages - 2>();  // groups complete in order: tile t has landed
    __syncthreads();
    if (t + kStages - 1 < n) issue(t + kStages - 1, ring[(t + kStages - 1) % kStages]);
    ptx::cp_async_commit();  // possibly empty: keeps the group count uniform
    body(t, ring[t % kStages]);
  }
  __syncthreads();
}

// Opts `Kernel` in to `bytes` of dynamic shared memory (above the default 48 KiB) and to the largest
// shared-memory carveout (three 75 KiB CTAs need all 228 KiB of an SM), once per kernel.
template <auto Kernel>
void allow_dynamic_smem(size_t bytes) {
  static const cudaError_t result = [&] {
    const cudaError_t e =
        cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
    return e != cudaSuccess ? e
                            : cudaFuncSetAttribute(Kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                                   cudaSharedmemCarveoutMaxShared);
  }();
  DMOE_CUDA_CHECK(result);
}

// A [kTile][kTile]-byte transposed tile staged in shared memory goes out as whole 128-byte rows:
// row f to dst + f * dst_row_stride, each 16-byte piece only where keep(f, byte offset) says so.
// (One lane per row and 16 bytes per store made every warp store touch 32 lines: the tile kernels
// were L2-request-bound at ~40% of DRAM bandwidth, ncu s16 run 5.)
// The staged rows are swizzled: 16-byte piece p of row f sits at piece staged_piece(f, p). The
// writers give each thread one row (or two), so eight consecutive lanes -- one phase of a 16-byte
// shared store -- write eight rows 128 bytes apart: unswizzled, that is one bank group eight
// times (8-way conflicts); XOR-ing the piece with (f ^ f / 8) % 8 spreads any eight consecutive
// rows, and any eight rows 2 apart, over all eight groups, while a row stays in one 128-byte line.
__device__ __forceinline__ int staged_piece(int f, int p) { return p ^ ((f ^ (f >> 3)) & 7); }

template <class Keep>
__device__ __forceinline__ void store_byte_tile(uint8_t (*staged)[kTile], uint8_t* dst, int64_t dst_row_stride,
                                                Keep keep, unsigned tid = threadIdx.x) {
  constexpr int kPieces = kTile * kTile / 16 / kTileThreads;  // 4 per thread
#pragma unroll
  for (int i = 0; i < kPieces; ++i) {
    const int idx = tid + i * kTileThreads;
    const int f = idx / (kTile / 16), p = idx % (kTile / 16);
    if (keep(f, p * 16))
      *reinterpret_cast<uint4*>(dst + f * dst_row_stride + p * 16) =
          *reinterpret_cast<const uint4*>(&staged[f][staged_piece(f, p) * 16]);
  }
}

// ---- grids (host side) ------------------------------------------------------------------------------

// The kernels that zero the padding rows (row_is_real) need each group's count; a null counts_G
// there was read through (an illegal address) until session 49: an argument error instead.
inline void check_group_counts(const char* name, const RowGroups& groups) {
  DMOE_CHECK_ARG(groups.counts_G != nullptr && groups.offsets_G1 != nullptr, name,
                 ": groups need counts_G and offsets_G1 (rows past a group's count quantize as zeros)");
}

// CTAs of a grid-stride launch over `rows` rows, `rows_per_cta` at a time: enough to cover them, at
// most 8 per SM of the current device.
inline unsigned row_grid(int64_t rows, int rows_per_cta) {
  int device = 0, sms = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&device));
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<unsigned>(std::min<int64_t>((rows + rows_per_cta - 1) / rows_per_cta, int64_t{sms} * 8));
}

// ---- CTA regions of tiles (host side) -------------------------------------------------------------
// Kernels whose CTA covers a region of 2^log2_a x 2^log2_b tiles (scales staged per region) pick
// the region shape here: the least per-tile cost (region_tile_cost, measured) divided by the wave
// efficiency, tiles / (waves * slots * tiles per region) -- a large region leaves SMs idle in the
// last wave when there are few of them.

// Time per tile of the tile kernels by tiles per CTA region, relative to a 2-tile region, with the
// waves factored out (s28 r2-r3: every region shape of the rows + columns quantizers and of the
// MXFP8 training weight, perf_history G64). A 1-tile CTA pays its setup (group table, real-row
// search, the ring's fill) alone; from 4 tiles on a CTA's drain (its scale grids stored with no load
// in flight, the last tiles' stores) grows with the region. scale_requests: the region's partly
// written scale-row L2 requests per tile (MXFP8's byte scales), which only order shapes of one size
// (~1% per 200: at 1 x 2 and 2 x 4 both formats' times moved alike).
inline double scale_request_cost(double scale_requests) { return scale_requests / 20000.0; }
inline double region_tile_cost(int64_t tiles, double scale_requests = 0.0) {
  const double by_size =
      tiles <= 1 ? 1.12 : tiles == 2 ? 1.0 : tiles <= 4 ? 1.01 : tiles <= 8 ? 1.03 : tiles <= 16 ? 1.05 : 1.07;
  return by_size + scale_request_cost(scale_requests);
}

// The partly written L2 requests per tile of a region's MXFP8 byte scales, staged per region and
// stored as rows: a 128x128 tile has 4 scale bytes in each of its 128 rows along both axes, written
// as rows of 4 * ra and 4 * rb bytes (the region is ra x rb tiles).
inline double mxfp8_scale_row_requests(int64_t ra, int64_t rb) { return 128.0 / double(rb) + 128.0 / double(ra); }

// CTAs of `kernel` (threads, dynamic shared memory) the device holds at once: the slots of a wave.
// Asked once per (device, kernel, launch shape) and remembered: launchers call it every time.
inline int64_t resident_ctas(const void* kernel, int threads, size_t dynamic_smem) {
  int device = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(device, kernel, threads, dynamic_smem);
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, size_t>, int64_t> known;
  std::lock_guard<std::mutex> lock(mu);
  const auto it = known.find(key);
  if (it != known.end()) return it->second;
  int sms = 0, per_sm = 0;
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  DMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, dynamic_smem));
  const int64_t slots = int64_t{sms} * (per_sm > 0 ? per_sm : 1);
  known.emplace(key, slots);
  return slots;
}

struct RegionShape {
  int log2_a, log2_b;  // tiles per region side: 1 << log2
};

// Regions of at most max_side tiles per side and max_tiles in all over a tiles_a x tiles_b grid
// (times `batches`); cost_per_tile(ra, rb) is the caller's estimate for one tile.
template <class Cost>
RegionShape choose_region(int64_t tiles_a, int64_t tiles_b, int64_t batches, int64_t slots, int max_side,
                          int max_tiles, Cost cost_per_tile) {
  RegionShape best{0, 0};
  double best_cost = 0;
  for (int la = 0; (1 << la) <= max_side; ++la)
    for (int lb = 0; (1 << lb) <= max_side && (1 << (la + lb)) <= max_tiles; ++lb) {
      const int64_t ra = int64_t{1} << la, rb = int64_t{1} << lb;
      if ((ra > 1 && ra / 2 >= tiles_a) || (rb > 1 && rb / 2 >= tiles_b)) continue;  // wider than the grid
      const int64_t ctas = (tiles_a + ra - 1) / ra * ((tiles_b + rb - 1) / rb) * batches;
      const int64_t waves = (ctas + slots - 1) / slots;
      const double efficiency = double(tiles_a * tiles_b * batches) / double(waves * slots * ra * rb);
      const double cost = cost_per_tile(ra, rb) / efficiency;
      if (best_cost == 0 || cost < best_cost) {
        best = {la, lb};
        best_cost = cost;
      }
    }
  return best;
}

// ---- MXFP8 codes at a shared scale (numeric::mxfp8_code_at_shared_scale) --------------------------

// The factor 2^-shift of a block whose E8M0 code lies `shift` below the shared one (0 past 24: every
// re-rounded code is then +-0 or NaN, as the rule's exact product gives).
__device__ __forceinline__ float shared_scale_factor(uint32_t shift) {
  return shift > 24u ? 0.0f : __uint_as_float((127u - shift) << 23);
}

// Two E4M3 codes (low byte: the first) -> two exact floats (the hardware decode, as
// numeric::e4m3_to_float_fast: every E4M3 value is an FP16 value, the widening is exact).
__device__ __forceinline__ void e4m3x2_to_float2(uint32_t codes16, float& lo, float& hi) {
  asm("{\n\t.reg .b32 h2;\n\t.reg .b16 l, h;\n\t"
      "cvt.rn.f16x2.e4m3x2 h2, %2;\n\tmov.b32 {l, h}, h2;\n\tcvt.f32.f16 %0, l;\n\tcvt.f32.f16 %1, h;\n\t}"
      : "=f"(lo), "=f"(hi)
      : "h"(static_cast<uint16_t>(codes16)));
}

// The largest of a word's four E8M0 codes.
__device__ __forceinline__ uint32_t max_code4(uint32_t w) {
  return max(max(w & 0xffu, (w >> 8) & 0xffu), max((w >> 16) & 0xffu, w >> 24));
}

// Four E4M3 codes (code 0 in the low byte) times `factor`, each encoded RNE: the rule's arithmetic
// (the hardware decode equals e4m3_to_float but for NaN payloads, which the encoder maps to 0x7F either way).
__device__ __forceinline__ uint32_t e4m3x4_scaled(uint32_t w, float factor) {
  uint32_t r = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float lo, hi;
    e4m3x2_to_float2(w >> (16 * h), lo, hi);
    r |= static_cast<uint32_t>(numeric::float2_to_e4m3x2(__fmul_rn(lo, factor), __fmul_rn(hi, factor))) << (16 * h);
  }
  return r;
}
__device__ __forceinline__ uint4 e4m3x16_scaled(uint4 v, float factor) {
  return make_uint4(e4m3x4_scaled(v.x, factor), e4m3x4_scaled(v.y, factor), e4m3x4_scaled(v.z, factor),
                    e4m3x4_scaled(v.w, factor));
}

// A layout precondition the host cannot check (it lives in device memory) is broken: one line,
// then trap, before any access it would make wrong.
__device__ __noinline__ inline void layout_trap(const char* what, long long value, long long multiple) {
  printf("Dist-MoE quantize: %s = %lld is not a multiple of %lld\n", what, value, multiple);
  __trap();
}

// Whether row m (below `end`, the last group's padded end) is one of its expert's real rows rather
// than padding: the last group g with offsets_G1[g] <= m (a copy in shared memory), then m's place
// in it against counts_G[g] (required: the launchers reject a null counts_G, check_group_counts).
__device__ __forceinline__ bool row_is_real(const int32_t* offsets, const RowGroups& groups, int64_t m, int64_t end) {
  if (m >= end) return false;
  int lo = 0, hi = groups.num_groups - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (offsets[mid] <= m) lo = mid;
    else hi = mid - 1;
  }
  return m - offsets[lo] < groups.counts_G[lo];
}

}  // namespace dist_moe::quant
