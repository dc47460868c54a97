// Accumulator fragments -> shared memory -> global memory, one 64-row x 128-byte chunk at a time.
//
// wgmma leaves each thread 2-column pieces of 8-row groups, which would make 4-byte global stores
// scattered over 8 rows. The epilogues therefore move a warpgroup's 64-row block through shared
// memory one column chunk at a time: a chunk is 128 bytes of each row (64 BF16 or 32 FP32 values),
// written from the fragment, then stored. Two writers share one interface (`write`):
//
// PaddedStagingWriter (the original epilogue): one 10 KiB buffer per warpgroup, rows padded to
//   144/160 bytes (conflict-free fragment writes), read back as 16-byte row segments and stored by
//   every thread with per-row (expert tail, scatter null) and per-column predicates. The stores are
//   synchronous for the warpgroup: the tensor cores idle until the last one is issued.
//
// SwizzledTmaWriter (SwizzledTmaWriterN<2>; <4>: four buffers, the deep-staging WGRAD variant):
//   two 8 KiB buffers per warpgroup in the TMA 128-byte-swizzle layout (row r at
//   byte 128 r, its 16-byte chunks XOR-ed by r % 8: conflict-free fragment writes for BF16, 2-way
//   for FP32). A chunk whose 64 rows all exist and that goes to a plain tensor is stored by one TMA
//   (cp.async.bulk.tensor, or cp.reduce.async.bulk.tensor .add for FP32 accumulation) issued by the
//   warpgroup's first thread, which only waits for it when the buffer comes round again
//   (bulk_wait_group_read) -- the global writes overlap the next chunks and the next tile's
//   mainloop. Other chunks (an expert's last rows, scatter tables, BF16 accumulation) are stored
//   from the same buffer by every thread, like the padded writer.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/device/ptx/barrier.cuh"
#include "dist_moe/device/ptx/cvt.cuh"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"
#include "dist_moe/device/ptx/tma.cuh"

namespace dist_moe::gemm {

using numeric::bf16_t;

template <class S>
struct Staging {
  static_assert(std::is_same<S, bf16_t>::value || std::is_same<S, float>::value, "staged as BF16 or FP32");
  static constexpr int kCols = 128 / static_cast<int>(sizeof(S));          // columns per chunk
  static constexpr int kStride = sizeof(S) == 2 ? 144 : 160;                // padded writer: bytes per row
  static constexpr int kValsPerSeg = 16 / static_cast<int>(sizeof(S));      // values per 16-byte segment
};

// Where a chunk goes when it may be stored by TMA: box coordinates of the tensor map (c2 < 0: 2D).
struct TmaTarget {
  const void* map = nullptr;  // nullptr: store this chunk with ordinary stores
  int32_t c0 = 0, c1 = 0, c2 = -1;
  bool reduce = false;        // global += chunk (FP32 accumulation)
};

#if defined(__CUDACC__)

// ---- pieces shared by both writers ----------------------------------------------------------------

// Adds the old output to a staged 16-byte FP32 segment (accumulation, FP32 math) and stores it as O.
template <class O>
DMOE_DEVICE void store_fp32_segment(char* dst, uint4 v, bool accumulate) {
  if constexpr (std::is_same<O, float>::value) {
    if (accumulate) {
      const uint4 old = ptx::ld_global_v4(dst);
      v.x = __float_as_uint(__uint_as_float(v.x) + __uint_as_float(old.x));
      v.y = __float_as_uint(__uint_as_float(v.y) + __uint_as_float(old.y));
      v.z = __float_as_uint(__uint_as_float(v.z) + __uint_as_float(old.z));
      v.w = __float_as_uint(__uint_as_float(v.w) + __uint_as_float(old.w));
    }
    ptx::st_global_v4(dst, v);
  } else {  // FP32 staged, BF16 out: 4 values -> 8 bytes
    float f0 = __uint_as_float(v.x), f1 = __uint_as_float(v.y), f2 = __uint_as_float(v.z), f3 = __uint_as_float(v.w);
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

// Thread t of the warpgroup stores 16-byte segment t % 8 of rows 16 p + t / 8 (p = 0..3) to
// row_ptr[p] + column offset; a null row pointer skips the row, columns at or past `cols_valid`
// are skipped. `seg_addr(row, seg)` is the segment's shared-memory address in the writer's layout.
template <class S, class O, class SegAddr>
DMOE_DEVICE void store_rows(const SegAddr& seg_addr, char* const (&row_ptr)[4], int col0, int cols_valid,
                            bool accumulate) {
  static_assert(std::is_same<S, O>::value || std::is_same<S, float>::value, "BF16 staging stores BF16 only");
  const int t = static_cast<int>(threadIdx.x % 128);
  const int seg = t % 8;
  const int col = col0 + seg * Staging<S>::kValsPerSeg;
  if (col >= cols_valid) return;
#pragma unroll
  for (int p = 0; p < 4; ++p) {
    if (row_ptr[p] == nullptr) continue;
    const uint4 v = ptx::ld_shared_v4(seg_addr(16 * p + t / 8, seg));
    char* dst = row_ptr[p] + static_cast<int64_t>(col) * static_cast<int64_t>(sizeof(O));
    if constexpr (std::is_same<S, float>::value) {
      store_fp32_segment<O>(dst, v, accumulate);
    } else {
      ptx::st_global_v4(dst, v);
    }
  }
}

// Segment addressing of the two layouts (functors rather than lambdas: everything must inline --
// a call left in a kernel that issues wgmma serializes its wgmmas, ptxas C7510).
template <class S>
struct PaddedSegments {
  uint32_t buf;
  DMOE_DEVICE uint32_t operator()(int row, int seg) const { return buf + row * Staging<S>::kStride + seg * 16; }
};

struct SwizzledSegments {
  uint32_t buf;
  DMOE_DEVICE uint32_t operator()(int row, int seg) const { return buf + row * 128 + ((seg ^ (row & 7)) << 4); }
};

// ---- the original writer ----------------------------------------------------------------------------
struct PaddedStagingWriter {
  static constexpr int kBytesPerWg = 64 * 160;  // one buffer, the larger row stride
  static constexpr bool kTma = false;

  uint32_t buf;  // this warpgroup's buffer
  uint32_t bar;  // this warpgroup's named barrier

  DMOE_DEVICE PaddedStagingWriter(uint32_t staging, uint32_t wg_barrier) : buf(staging), bar(wg_barrier) {}

  // Columns [chunk * kCols, (chunk + 1) * kCols) of one m64 fragment, each row multiplied by its
  // scale (the two fragment rows of this thread: r and r + 8).
  template <class S, int kN>
  DMOE_DEVICE void stage(const float (&acc)[kN], int chunk, float scale_lo, float scale_hi) const {
    constexpr int kJ = Staging<S>::kCols / 8;  // 8-column blocks per chunk
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int col = 2 * (lane % 4);
    const uint32_t lo_row = buf + row * Staging<S>::kStride;
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

  // One chunk, bracketed by the warpgroup's barrier: the first sync makes sure the previous
  // chunk's reads are done, the second that this chunk is complete. `tma` is ignored.
  template <class S, class O, int kN>
  DMOE_DEVICE void write(const float (&acc)[kN], int chunk, float scale_lo, float scale_hi, char* const (&row_ptr)[4],
                         int col0, int cols_valid, bool accumulate, const TmaTarget& /*tma*/) {
    ptx::named_barrier_sync(bar, 128);
    stage<S>(acc, chunk, scale_lo, scale_hi);
    ptx::named_barrier_sync(bar, 128);
    store_rows<S, O>(PaddedSegments<S>{buf}, row_ptr, col0, cols_valid, accumulate);
  }

  DMOE_DEVICE void finish() const {}

  // The warpgroup's kBytesPerWg staging bytes for other use until its next write (which begins with
  // the barrier that orders it after that use): every read of the last chunk is done on return.
  // Every thread of the warpgroup calls it.
  DMOE_DEVICE uint32_t borrow() const {
    ptx::named_barrier_sync(bar, 128);
    return buf;
  }
};

// ---- the asynchronous TMA writer ------------------------------------------------------------------
// kBufs buffers per warpgroup, used round-robin. Two (SwizzledTmaWriter): a chunk waits for the TMA
// read of the chunk two before it. Four (SwizzledTmaWriter4, the deep-staging WGRAD variant): a
// whole 128 x 128 BF16 ping-pong tile (4 chunks) is staged without waiting for any of its own
// stores; the first chunk of the warpgroup's next tile waits for the first chunk of this one, a
// whole other-warpgroup mainloop later (docs/perf.md G10).
template <int kBufs>
struct SwizzledTmaWriterN {
  static_assert(kBufs == 2 || kBufs == 4, "2 or 4 staging buffers");
  static constexpr int kBufBytes = 64 * 128;   // 64 rows x 128 bytes: one TMA box
  static constexpr int kBytesPerWg = kBufs * kBufBytes;
  static constexpr bool kTma = true;

  uint32_t buf0;         // this warpgroup's buffers (1024-aligned)
  uint32_t bar;          // this warpgroup's named barrier
  bool elected;          // thread 0 of the warpgroup issues and waits for every TMA store
  uint32_t chunks = 0;   // chunks written so far: the buffer of the next one is chunks % kBufs
  bool last_was_tma = false;
  uint32_t tma_hist = 0;  // kBufs > 2: bit i = the chunk i + 1 before the next one committed a bulk group

  DMOE_DEVICE SwizzledTmaWriterN(uint32_t staging, uint32_t wg_barrier)
      : buf0(staging), bar(wg_barrier), elected(threadIdx.x % 128 == 0) {}

  // Byte address of 16-byte segment `seg` of row `row` in buffer `b` (the TMA 128B swizzle).
  DMOE_DEVICE static uint32_t seg_addr(uint32_t b, int row, int seg) { return SwizzledSegments{b}(row, seg); }

  template <class S, int kN>
  DMOE_DEVICE static void stage(uint32_t b, const float (&acc)[kN], int chunk, float scale_lo, float scale_hi) {
    constexpr int kJ = Staging<S>::kCols / 8;  // 8-column blocks per chunk
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;  // and row + 8 (same row & 7)
    const int q = lane % 4;
#pragma unroll
    for (int jj = 0; jj < kJ; ++jj) {
      const int j = chunk * kJ + jj;
      const float v0 = acc[4 * j + 0] * scale_lo, v1 = acc[4 * j + 1] * scale_lo;
      const float v2 = acc[4 * j + 2] * scale_hi, v3 = acc[4 * j + 3] * scale_hi;
      if constexpr (std::is_same<S, bf16_t>::value) {
        // Columns 8 jj + 2q, +1: bytes 16 jj + 4q, in segment jj.
        const uint32_t lo = seg_addr(b, row, jj) + 4 * q;
        ptx::st_shared_b32(lo, ptx::pack_bf16x2(v0, v1));
        ptx::st_shared_b32(lo + 8 * 128, ptx::pack_bf16x2(v2, v3));
      } else {
        // Columns 8 jj + 2q, +1: bytes 32 jj + 8q, in segment 2 jj + q / 2.
        const uint32_t lo = seg_addr(b, row, 2 * jj + q / 2) + 8 * (q % 2);
        ptx::st_shared_v2(lo, __float_as_uint(v0), __float_as_uint(v1));
        ptx::st_shared_v2(lo + 8 * 128, __float_as_uint(v2), __float_as_uint(v3));
      }
    }
  }

  // BF16 values already packed in registers (two per uint32, the order stage<bf16_t> writes them:
  // packed[2 j] = columns 8 j + 2q, +1 of row r, packed[2 j + 1] = the same of row r + 8).
  // `kChunk` is a template argument so that `packed` is indexed by constants and stays in registers.
  template <int kChunk, int kP>
  DMOE_DEVICE static void stage_packed(uint32_t b, const uint32_t (&packed)[kP]) {
    constexpr int kJ = Staging<bf16_t>::kCols / 8;
    constexpr int chunk = kChunk;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int q = lane % 4;
#pragma unroll
    for (int jj = 0; jj < kJ; ++jj) {
      const int j = chunk * kJ + jj;
      const uint32_t lo = seg_addr(b, row, jj) + 4 * q;
      ptx::st_shared_b32(lo, packed[2 * j]);
      ptx::st_shared_b32(lo + 8 * 128, packed[2 * j + 1]);
    }
  }

  template <class S, class O, int kN>
  DMOE_DEVICE void write(const float (&acc)[kN], int chunk, float scale_lo, float scale_hi, char* const (&row_ptr)[4],
                         int col0, int cols_valid, bool accumulate, const TmaTarget& tma) {
    const uint32_t b = begin_chunk();
    stage<S>(b, acc, chunk, scale_lo, scale_hi);
    end_chunk<S, O>(b, row_ptr, col0, cols_valid, accumulate, tma);
  }

  // A chunk of pre-packed BF16 values that leaves by TMA (`tma.map` set: no ordinary-store fallback).
  template <int kChunk, int kP>
  DMOE_DEVICE void write_packed(const uint32_t (&packed)[kP], const TmaTarget& tma) {
    const uint32_t b = begin_chunk();
    stage_packed<kChunk>(b, packed);
    char* const no_rows[4] = {nullptr, nullptr, nullptr, nullptr};
    end_chunk<bf16_t, bf16_t>(b, no_rows, 0, 0, false, tma);
  }

 private:
  // The next buffer, once the TMA store that last read it is done and every thread may write it.
  DMOE_DEVICE uint32_t begin_chunk() {
    const uint32_t b = buf0 + (chunks % static_cast<uint32_t>(kBufs)) * kBufBytes;
    if constexpr (kBufs == 2) {
      // This buffer was last used two chunks ago. If the previous chunk committed a bulk group, at
      // most that one may still be reading; otherwise the last group may be this buffer's.
      if (elected) {
        if (last_was_tma) ptx::bulk_wait_group_read<1>();
        else ptx::bulk_wait_group_read<0>();
      }
    } else {
      // Last used kBufs chunks ago: the groups committed since (TMA chunks among the kBufs - 1
      // chunks in between) may still be pending, this buffer's (if it had one) may not.
      if (elected) {
        const int since = __popc(tma_hist & ((1u << (kBufs - 1)) - 1u));
        if (since >= 3) ptx::bulk_wait_group_read<3>();
        else if (since == 2) ptx::bulk_wait_group_read<2>();
        else if (since == 1) ptx::bulk_wait_group_read<1>();
        else ptx::bulk_wait_group_read<0>();
      }
    }
    ptx::named_barrier_sync(bar, 128);  // buffer free (TMA done reading, ordinary reads done)
    return b;
  }

  // The staged chunk in buffer `b` leaves: by one TMA (issued by the elected thread) or by every
  // thread's ordinary stores.
  template <class S, class O>
  DMOE_DEVICE void end_chunk(uint32_t b, char* const (&row_ptr)[4], int col0, int cols_valid, bool accumulate,
                             const TmaTarget& tma) {
    ptx::fence_proxy_async_shared();    // the TMA (async proxy) reads what these stores wrote
    ptx::named_barrier_sync(bar, 128);
    if (tma.map != nullptr) {
      if (elected) {
        if (tma.c2 < 0) {
          if (tma.reduce) ptx::tma_reduce_add_2d(tma.map, b, tma.c0, tma.c1);
          else ptx::tma_store_2d(tma.map, b, tma.c0, tma.c1);
        } else {
          if (tma.reduce) ptx::tma_reduce_add_3d(tma.map, b, tma.c0, tma.c1, tma.c2);
          else ptx::tma_store_3d(tma.map, b, tma.c0, tma.c1, tma.c2);
        }
        ptx::bulk_commit_group();
      }
      last_was_tma = true;
    } else {
      store_rows<S, O>(SwizzledSegments{b}, row_ptr, col0, cols_valid, accumulate);
      last_was_tma = false;
    }
    if constexpr (kBufs > 2) tma_hist = (tma_hist << 1) | (last_was_tma ? 1u : 0u);
    ++chunks;
  }

 public:
  // Before the CTA exits: every store complete (the shared memory and this CTA's tensor maps must
  // outlive the copies that read them).
  DMOE_DEVICE void finish() const {
    if (elected) ptx::bulk_wait_group<0>();
  }

  // The warpgroup's kBytesPerWg staging bytes for other use until its next write (whose
  // begin_chunk barrier orders it after that use): no TMA store and no thread reads them on return.
  // Every thread of the warpgroup calls it.
  DMOE_DEVICE uint32_t borrow() const {
    if (elected) ptx::bulk_wait_group_read<0>();
    ptx::named_barrier_sync(bar, 128);
    return buf0;
  }
};

using SwizzledTmaWriter = SwizzledTmaWriterN<2>;
using SwizzledTmaWriter4 = SwizzledTmaWriterN<4>;

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
