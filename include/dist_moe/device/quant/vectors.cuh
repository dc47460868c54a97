// BF16 vectors in registers, as every block quantizer handles them (src/quant and the Mega
// hand-offs, device/gemm/mega.cuh): 16-byte loads of 8 values, their NaN-propagating
// maxima (over a vector and over lanes), and 8 values to 8 E4M3 bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/device/ptx/cvt.cuh"

namespace dist_moe::quant {

constexpr int kVec = 8;  // BF16 elements per 16-byte load

// NaN-propagating max |x| of the 8 BF16 values of one 16-byte load, on the packed bits: with the
// sign cleared, unsigned order is magnitude order and every NaN sits above Inf (numeric::amax_nan's
// rule), so two-lane 16-bit integer maxima give exactly amax_nan's result in a quarter of the
// instructions. abs_max_bf16_pairs leaves the two 16-bit lanes' maxima packed (to be combined with
// other loads' by __vmaxu2), bf16_pairs_amax makes them one float.
__device__ __forceinline__ uint32_t abs_max_bf16_pairs(const uint4& u) {
  constexpr uint32_t kAbs = 0x7fff7fffu;
  return __vmaxu2(__vmaxu2(u.x & kAbs, u.y & kAbs), __vmaxu2(u.z & kAbs, u.w & kAbs));
}
__device__ __forceinline__ float bf16_pairs_amax(uint32_t m) { return __uint_as_float(max(m & 0xffffu, m >> 16) << 16); }

__device__ __forceinline__ float amax_bf16x8(const uint4& u) { return bf16_pairs_amax(abs_max_bf16_pairs(u)); }

// The same over the 16 values of two loads (one NVFP4 block).
__device__ __forceinline__ float amax_bf16x16(const uint4& u, const uint4& v) {
  return bf16_pairs_amax(__vmaxu2(abs_max_bf16_pairs(u), abs_max_bf16_pairs(v)));
}

// NaN-propagating amax over `kWidth` consecutive lanes (kWidth a power of two <= 32). Every lane
// of the warp must call it.
template <int kWidth>
__device__ __forceinline__ float group_amax(float a) {
#pragma unroll
  for (int o = kWidth / 2; o > 0; o >>= 1) a = numeric::amax_nan(a, __shfl_xor_sync(0xffffffffu, a, o));
  return a;
}

// 8 BF16 values (one uint4) as floats, element 0 first.
struct Vec8 {
  float v[kVec];
};

__device__ __forceinline__ Vec8 unpack_bf16x8(const uint4& u) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
  Vec8 r;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    r.v[2 * i] = ptx::bf16_lo_to_float(w[i]);
    r.v[2 * i + 1] = ptx::bf16_hi_to_float(w[i]);
  }
  return r;
}

// 8 values -> 8 E4M3 bytes, each e4m3_rn_satfinite(fl(x * mult)) (the shared numeric rules).
__device__ __forceinline__ uint2 e4m3x8(const Vec8& x, float mult) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t lo = numeric::float2_to_e4m3x2(numeric::mul_rn(x.v[4 * h], mult), numeric::mul_rn(x.v[4 * h + 1], mult));
    const uint32_t hi =
        numeric::float2_to_e4m3x2(numeric::mul_rn(x.v[4 * h + 2], mult), numeric::mul_rn(x.v[4 * h + 3], mult));
    w[h] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

}  // namespace dist_moe::quant
