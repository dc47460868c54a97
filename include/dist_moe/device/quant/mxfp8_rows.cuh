// An MXFP8 row (1 x 32 blocks: E4M3 data, one E8M0 RCEIL scale per block) by one warp: the bytes
// src/quant's row quantizers write (the rows + columns tile's row blocks: the block's NaN-propagating
// amax, numeric::e8m0_rceil_from_bf16_amax, e4m3x8), for the Mega pipeline's h2 hand-off
// (device/gemm/mega.cuh), where one warpgroup quantizes a chunk's rows as they complete.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dist_moe/device/numeric/e8m0.cuh"
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "dist_moe/device/quant/vectors.cuh"

namespace dist_moe::quant {

constexpr int kMxfp8LanesPerBlock = numeric::kMXBlock / kVec;  // 4: lanes 4b .. 4b+3 hold block b

// `cols` BF16 values at `src` (a multiple of 256, 16-byte aligned) into E4M3 bytes at `q` and
// cols / 32 E8M0 codes at `scales`, 256 values (one vector per lane) per step, kBatch steps' loads
// in flight at once, read from L2 (ld.global.cg: the rows were written by other SMs of the same
// launch). `q` may be `src` itself (the rows quantized in place): a step's bytes land on values of
// steps no later than it, all read by the time the warp synchronizes before a batch's stores;
// `scales` must not overlap the values still unread. Every lane of the warp must call it.
template <int kBatch>
__device__ __forceinline__ void mxfp8_quantize_row_warp(const uint16_t* src, int64_t cols, uint8_t* q, uint8_t* scales,
                                                        int lane) {
  const int steps = static_cast<int>(cols / (32 * kVec));
  for (int s0 = 0; s0 < steps; s0 += kBatch) {
    uint4 raw[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (s0 + b < steps) raw[b] = __ldcg(reinterpret_cast<const uint4*>(src) + (s0 + b) * 32 + lane);  // warp-uniform
    uint2 bytes[kBatch];
    uint8_t s[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (s0 + b >= steps) break;
      const float amax = group_amax<kMxfp8LanesPerBlock>(amax_bf16x8(raw[b]));
      float mult;
      numeric::e8m0_rceil_from_bf16_amax(amax, s[b], mult);
      bytes[b] = e4m3x8(unpack_bf16x8(raw[b]), mult);
    }
    __syncwarp();  // every lane's values of the batch are read before any lane overwrites them
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (s0 + b >= steps) break;
      const int idx = (s0 + b) * 32 + lane;
      *reinterpret_cast<uint2*>(q + idx * kVec) = bytes[b];
      if (idx % kMxfp8LanesPerBlock == 0) scales[idx / kMxfp8LanesPerBlock] = s[b];
    }
  }
}

// A packed MXFP8 row [cols E4M3 | cols / 32 E8M0] (a rank's token quantized at the source; nullptr:
// a padding row -- zero codes, scales 0, what the quantizers write for a zero row) copied by one warp
// into a row bundle row: codes at `q` (16-byte aligned), scales at `scales` (4-byte aligned). 16-byte
// copies of the codes, kBatch loads per lane issued before their stores (the Mega x task, one warp
// per row, wants them in flight; the gather kernel has warps enough), 4-byte words of the scales.
// cols % 128 == 0.
template <int kBatch = 1>
__device__ __forceinline__ void mxfp8_copy_packed_row(const char* src, int64_t cols, uint4* q, uint32_t* scales,
                                                      int lane) {
  const int64_t n = cols / 16;
  const uint4* codes = reinterpret_cast<const uint4*>(src);
  for (int64_t i0 = lane; i0 < n; i0 += 32 * kBatch) {
    uint4 v[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + 32 * b < n) v[b] = src ? codes[i0 + 32 * b] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int b = 0; b < kBatch; ++b)
      if (i0 + 32 * b < n) q[i0 + 32 * b] = v[b];
  }
  for (int64_t i = lane; i < cols / 128; i += 32) scales[i] = src ? reinterpret_cast<const uint32_t*>(src + cols)[i] : 0u;
}

}  // namespace dist_moe::quant
