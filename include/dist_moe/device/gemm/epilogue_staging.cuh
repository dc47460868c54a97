// Accumulator fragments -> shared memory -> 16-byte row stores.
//
// wgmma leaves each thread 2-column pieces of 8-row groups, which would make 4-byte global stores
// scattered over 8 rows. The epilogues therefore move a warpgroup's 64 rows through a small
// staging buffer one column chunk at a time: a chunk is 128 bytes of each row (64 BF16 or 32 FP32
// values), written from the fragment, then read back as eight 16-byte segments per row and stored
// with per-row predicates (tail rows of an expert, scatter rows with no destination) and per-column
// predicates (N not a multiple of the tile).
//
// Bank conflicts: a warp writes 8 rows x 4 threads; padding rows to 144 bytes (BF16: 4-byte
// stores) or 160 bytes (FP32: 8-byte stores, served per half warp) puts those on distinct banks.
// Reads are 8 threads per 128-byte row, one row per quarter-warp phase: conflict-free.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/device/ptx/barrier.cuh"
#include "dist_moe/device/ptx/cvt.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"

namespace dist_moe::gemm {

using numeric::bf16_t;

template <class S>
struct Staging {
  static_assert(std::is_same<S, bf16_t>::value || std::is_same<S, float>::value, "staged as BF16 or FP32");
  static constexpr int kCols = 128 / static_cast<int>(sizeof(S));          // columns per chunk
  static constexpr int kStride = sizeof(S) == 2 ? 144 : 160;                // bytes per staged row
  static constexpr int kValsPerSeg = 16 / static_cast<int>(sizeof(S));      // values per 16-byte segment
};

// Staging bytes of one consumer warpgroup (64 rows, the larger stride).
constexpr int kStagingBytesPerWg = 64 * 160;

#if defined(__CUDACC__)

// Writes columns [chunk * kCols, (chunk + 1) * kCols) of one m64 fragment into the staging rows,
// each row multiplied by its scale (the two fragment rows of this thread: r and r + 8).
template <class S, int kN>
DMOE_DEVICE void stage_fragment(uint32_t staging, const float (&acc)[kN], int chunk, float scale_lo, float scale_hi) {
  constexpr int kJ = Staging<S>::kCols / 8;  // 8-column blocks per chunk
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
  const int col = 2 * (lane % 4);
  const uint32_t lo_row = staging + row * Staging<S>::kStride;
  const uint32_t hi_row = lo_row + 8 * Staging<S>::kStride;
#pragma unroll
  for (int jj = 0; jj < kJ; ++jj) {
    const int j = chunk * kJ + jj;
    const float v0 = acc[4 * j + 0] * scale_lo, v1 = acc[4 * j + 1] * scale_lo;
    const float v2 = acc[4 * j + 2] * scale_hi, v3 = acc[4 * j + 3] * scale_hi;
    const uint32_t off = static_cast<uint32_t>((8 * jj + col) * static_cast<int>(sizeof(S)));
    if constexpr (std::is_same<S, bf16_t>::value) {
      ptx::st_shared_b32(lo_row + off, ptx::pack_bf16x2(v0, v1));
      ptx::st_shared_b32(hi_row + off, ptx::pack_bf16x2(v2, v3));
    } else {
      ptx::st_shared_v2(lo_row + off, __float_as_uint(v0), __float_as_uint(v1));
      ptx::st_shared_v2(hi_row + off, __float_as_uint(v2), __float_as_uint(v3));
    }
  }
}

// Stores the staged chunk: thread t of the warpgroup writes segment t % 8 of rows 16 p + t / 8
// (p = 0..3) to row_ptr[p] + column offset; a null row pointer skips the row. Columns at or past
// `cols_valid` are skipped. With `accumulate` the old output is added in FP32 before rounding.
template <class S, class O>
DMOE_DEVICE void store_staged(uint32_t staging, char* const (&row_ptr)[4], int col0, int cols_valid, bool accumulate) {
  static_assert(std::is_same<S, O>::value || std::is_same<S, float>::value, "BF16 staging stores BF16 only");
  const int t = static_cast<int>(threadIdx.x % 128);
  const int seg = t % 8;
  const int col = col0 + seg * Staging<S>::kValsPerSeg;
  if (col >= cols_valid) return;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    if (row_ptr[p] == nullptr) continue;
    const int row = 16 * p + t / 8;
    const uint4 v = ptx::ld_shared_v4(staging + row * Staging<S>::kStride + seg * 16);
    char* dst = row_ptr[p] + static_cast<int64_t>(col) * static_cast<int64_t>(sizeof(O));
    if constexpr (std::is_same<S, O>::value) {
      if constexpr (std::is_same<O, float>::value) {
        if (accumulate) {
          const uint4 old = ptx::ld_global_v4(dst);
          uint4 sum;
          sum.x = __float_as_uint(__uint_as_float(v.x) + __uint_as_float(old.x));
          sum.y = __float_as_uint(__uint_as_float(v.y) + __uint_as_float(old.y));
          sum.z = __float_as_uint(__uint_as_float(v.z) + __uint_as_float(old.z));
          sum.w = __float_as_uint(__uint_as_float(v.w) + __uint_as_float(old.w));
          ptx::st_global_v4(dst, sum);
          continue;
        }
      }
      ptx::st_global_v4(dst, v);
    } else {  // FP32 staged, BF16 out: 4 values -> 8 bytes
      float f0 = __uint_as_float(v.x), f1 = __uint_as_float(v.y), f2 = __uint_as_float(v.z),
            f3 = __uint_as_float(v.w);
      if (accumulate) {
        const uint2 old = ptx::ld_global_v2(dst);
        f0 += ptx::bf16_lo_to_float(old.x);
        f1 += ptx::bf16_hi_to_float(old.x);
        f2 += ptx::bf16_lo_to_float(old.y);
        f3 += ptx::bf16_hi_to_float(old.y);
      }
      ptx::st_global_v2(dst, make_uint2(ptx::pack_bf16x2(f0, f1), ptx::pack_bf16x2(f2, f3)));
    }
  }
}

// One chunk through the staging buffer, bracketed by the warpgroup's named barrier: the first
// sync makes sure the previous chunk's reads are done, the second that this chunk is complete.
template <class S, class O, int kN>
DMOE_DEVICE void write_chunk(uint32_t staging, uint32_t wg_barrier, const float (&acc)[kN], int chunk, float scale_lo,
                             float scale_hi, char* const (&row_ptr)[4], int col0, int cols_valid, bool accumulate) {
  ptx::named_barrier_sync(wg_barrier, 128);
  stage_fragment<S>(staging, acc, chunk, scale_lo, scale_hi);
  ptx::named_barrier_sync(wg_barrier, 128);
  store_staged<S, O>(staging, row_ptr, col0, cols_valid, accumulate);
}

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
