// FP4 E2M1 (OCP MX spec FP4; torch.float4_e2m1fn_x2; PTX .e2m1), as a 4-bit nibble.
//
// Nibble layout: s ee m, exponent bias 1. Magnitudes by code 0..7: {0, 0.5, 1, 1.5, 2, 3, 4, 6}
// (code 1 is the only subnormal); bit 3 is the sign. No Inf, no NaN.
// Encoding is round-to-nearest-even with saturation to +-6, the semantics of PTX
// cvt.rn.satfinite.e2m1x2.f32 (SM100+; Hopper has no FP4 instructions, so this portable path is
// the only one). NaN -> 0x7 (+6, sign discarded), as CUDA's __nv_cvt_float_to_fp4 emulation of
// that instruction does; values that round to zero keep their sign (0x8 for negative).
// Packing (reference section 4.1, float4_e2m1fn_x2): two per byte, element 0 in the low nibble.
#pragma once

#include <cmath>
#include <cstdint>

#include "dist_moe/device/numeric/fp32.cuh"

namespace dist_moe::numeric {

constexpr float kE2M1Max = 6.0f;
constexpr uint8_t kE2M1MaxCode = 0x7;

// float -> E2M1 nibble: RNE, satfinite (+-6, +-Inf -> +-6), NaN -> 0x7. The reference path (branches
// per range); float_to_e2m1 below must give the same bits.
DMOE_HOST_DEVICE uint8_t float_to_e2m1_portable(float x) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 28) & 0x8u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return kE2M1MaxCode;                               // NaN -> +6
  if (a >= 0x40c00000u) return static_cast<uint8_t>(sign | kE2M1MaxCode);  // |x| >= 6, Inf
  if (a >= 0x3f800000u) {
    // Normal (|x| >= 1): keep 1 of 23 mantissa bits, RNE on the 22 dropped bits; the carry
    // bumps the exponent; |x| < 6 keeps the result <= 0x7.
    const uint32_t r = a + 0x1fffffu + ((a >> 22) & 1u);
    return static_cast<uint8_t>(sign | ((r >> 22) - (126u << 1)));  // rebias 127 -> 1
  }
  // |x| < 1: the code is round(|x| / 0.5) (0, 1 or 2; 2 is the normal 1.0, continuous layout).
  // With |x| = m * 2^(E-23): m >> (22 - E), RNE.
  const uint32_t biased = a >> 23;
  if (biased < 127u - 2u) return sign;  // |x| < 0.25 (incl. FP32 subnormals): rounds to 0
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 22u + 127u - biased;  // 23 or 24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint8_t>(sign | q);
}

// E2M1 magnitude code (0..7) of |x| >= 0 in FP32 arithmetic, without a branch or a select: with
// v = min(|x|, 6) the code is the least of rint(2v), rint(v) + 2 and rint(v/2) + 4. The E2M1
// grid's steps are 0.5 below 2, 1 below 4 and 2 above; each of the three lines is the code on its
// own range and at or above it elsewhere (2v <= v + 2 <= v/2 + 4 for v <= 2, v + 2 <= 2v and
// v + 2 <= v/2 + 4 on [2, 4], v/2 + 4 below both from 4 on; rint keeps the order). Each rint is one
// FMA against 1.5 * 2^23 + offset, which rounds with RNE (E2M1's ties are exactly these roundings:
// 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5) and leaves the code in the low mantissa bits of floats of
// one binade, so their FP32 minimum is the code's. Six FP32 operations (Hopper issues FP32 at twice
// the integer rate; the NVFP4 quantizers run this once per element): the result's bits have the
// code in their low byte (the kernels pack those bytes); equal to float_to_e2m1_portable's code on
// every float from +0 to +Inf (checked exhaustively on the host once, and on the GPU by the test of
// float_to_e2m1). NaN gives 7 on the device (min.f32 drops a NaN operand); callers mask NaN.
DMOE_HOST_DEVICE uint32_t e2m1_magnitude_code_bits(float abs_x) {
#if defined(__CUDA_ARCH__)
  const float v = fminf(abs_x, 6.0f);
  const float lo = fma_rn(v, 2.0f, 12582912.0f), mid = fma_rn(v, 1.0f, 12582914.0f),
              hi = fma_rn(v, 0.5f, 12582916.0f);
  return float_bits(fminf(fminf(lo, mid), hi));
#else
  const float v = std::fmin(abs_x, 6.0f);
  const float lo = fma_rn(v, 2.0f, 12582912.0f), mid = fma_rn(v, 1.0f, 12582914.0f),
              hi = fma_rn(v, 0.5f, 12582916.0f);
  return float_bits(std::fmin(std::fmin(lo, mid), hi));
#endif
}

DMOE_HOST_DEVICE uint32_t e2m1_magnitude_code(float abs_x) { return e2m1_magnitude_code_bits(abs_x) & 7u; }

// The same bits for 0 <= abs_x < 7 without the clamp at 6 (five FP32 operations): on [6, 7) the
// third line is rint(abs_x / 2) + 4 = 7 and the other two exceed it, so the clamp changes nothing
// there (at 7 the third line would give 8). The NVFP4 quantizers take this where every scaled
// magnitude of a block is provably below 7: when the block's E4M3 scale s is normal (>= 2^-6), its
// rounding error is at most 2^-4 relative, so |x| * fl(row_scale / s) (or fl(|x| * gs) / s) <=
// 6 * (1 + 2^-4) * (1 + 2^-21) < 6.4 (s saturated at 448 is within a few ulps of v). Checked equal
// to e2m1_magnitude_code_bits on every float below 7 (GPU test; a sample on the host).
DMOE_HOST_DEVICE uint32_t e2m1_magnitude_code_bits_below7(float abs_x) {
  const float lo = fma_rn(abs_x, 2.0f, 12582912.0f), mid = fma_rn(abs_x, 1.0f, 12582914.0f),
              hi = fma_rn(abs_x, 0.5f, 12582916.0f);
#if defined(__CUDA_ARCH__)
  return float_bits(fminf(fminf(lo, mid), hi));
#else
  return float_bits(std::fmin(std::fmin(lo, mid), hi));
#endif
}

// float -> E2M1 nibble, the same bits as float_to_e2m1_portable without a branch: the magnitude
// code above, the sign bit, and NaN -> 0x7 without its sign. Checked against the portable rule on
// every float (GPU test) and on a sample of them (CPU test).
DMOE_HOST_DEVICE uint8_t float_to_e2m1(float x) {
  const uint32_t u = float_bits(x);
  const uint32_t code = e2m1_magnitude_code(bits_float(u & 0x7fffffffu)) | ((u >> 28) & 0x8u);
  return static_cast<uint8_t>((u & 0x7fffffffu) > 0x7f800000u ? kE2M1MaxCode : code);
}

// E2M1 nibble -> float, exact. Only the low 4 bits of `nibble` are read.
DMOE_HOST_DEVICE float e2m1_to_float(uint8_t nibble) {
  const uint32_t sign = static_cast<uint32_t>(nibble & 0x8u) << 28;
  const uint32_t e = (nibble >> 1) & 0x3u;
  const uint32_t m = nibble & 0x1u;
  if (e == 0u) return bits_float(sign | (m ? 0x3f000000u : 0u));  // 0 or 0.5
  return bits_float(sign | ((e + 126u) << 23) | (m << 22));
}

// The value an E2M1 store followed by a load gives back.
DMOE_HOST_DEVICE float round_e2m1(float x) { return e2m1_to_float(float_to_e2m1(x)); }

// Two nibbles -> one byte: element 0 (lo) in bits 0..3, element 1 (hi) in bits 4..7.
DMOE_HOST_DEVICE uint8_t e2m1x2_pack(uint8_t lo, uint8_t hi) {
  return static_cast<uint8_t>((lo & 0xfu) | ((hi & 0xfu) << 4));
}
DMOE_HOST_DEVICE uint8_t e2m1x2_lo(uint8_t byte) { return static_cast<uint8_t>(byte & 0xfu); }
DMOE_HOST_DEVICE uint8_t e2m1x2_hi(uint8_t byte) { return static_cast<uint8_t>(byte >> 4); }

}  // namespace dist_moe::numeric
