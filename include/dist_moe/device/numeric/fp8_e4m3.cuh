// FP8 E4M3, the "fn" variant (OCP FP8 spec; torch.float8_e4m3fn; PTX .e4m3).
//
// Byte layout: s eeee mmm, exponent bias 7. Exponent field 0 holds the subnormals m * 2^-9;
// the largest finite magnitude is 0x7E = 1.75 * 2^8 = 448. There are no infinities; 0x7F and
// 0xFF are the only NaNs. Encoding is round-to-nearest-even with "satfinite" saturation, the
// semantics of PTX cvt.rn.satfinite.e4m3x2.f32 (and of CUDA's __nv_cvt_float_to_fp8 with
// __NV_SATFINITE): finite values beyond 448 and +-Inf become +-448, NaN becomes 0x7F (sign
// discarded), and values that round to zero keep their sign (0x80 for negative).
#pragma once

#include <cstdint>

#include "dist_moe/device/numeric/fp32.cuh"

namespace dist_moe::numeric {

constexpr float kE4M3Max = 448.0f;
constexpr float kE4M3MinNormal = 0.015625f;            // 2^-6
constexpr float kE4M3MinSubnormal = 0.001953125f;      // 2^-9
constexpr uint8_t kE4M3MaxCode = 0x7e;                 // +448
constexpr uint8_t kE4M3NaN = 0x7f;                     // canonical NaN produced by the encoder

// float -> E4M3 by bit manipulation only: RNE, satfinite, NaN -> 0x7F. The reference path,
// identical on host and device; float_to_e4m3 below must give the same bits.
DMOE_HOST_DEVICE uint8_t float_to_e4m3_portable(float x) {
  const uint32_t u = float_bits(x);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return kE4M3NaN;                                // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | kE4M3MaxCode);  // |x| >= 448, Inf
  if (a >= 0x3c800000u) {
    // Normal E4M3 (|x| >= 2^-6): keep 3 of the 23 mantissa bits, RNE on the 20 dropped bits.
    // A carry out of the mantissa correctly bumps the exponent; |x| < 448 keeps it <= 0x7E.
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    return static_cast<uint8_t>(sign | ((r >> 20) - (120u << 3)));  // rebias 127 -> 7
  }
  // Subnormal E4M3: the code is round(|x| / 2^-9). With |x| = m * 2^(E-23), m the 24-bit
  // significand, that is m >> (14 - E) rounded to nearest even. A result of 8 is the smallest
  // normal (0x08), which the code layout makes continuous.
  const uint32_t biased = a >> 23;
  if (biased < 127u - 10u) return sign;  // |x| < 2^-10 (incl. FP32 subnormals): rounds to 0
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 14u + 127u - biased;  // 21 ... 24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint8_t>(sign | q);
}

// Two floats -> two E4M3 codes, lo in bits 0..7 and hi in bits 8..15. On SM89+ devices this is
// one cvt.rn.satfinite.e4m3x2.f32 (PTX puts its first source in the upper byte); its result
// must equal the portable path bit for bit (NaN -> 0x7F, +-Inf -> +-448). That equality is
// checked on the GPU by the GPU tests; everywhere else the portable path runs.
DMOE_HOST_DEVICE uint16_t float2_to_e4m3x2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint16_t>(float_to_e4m3_portable(lo) |
                               (static_cast<uint16_t>(float_to_e4m3_portable(hi)) << 8));
#endif
}

// float -> E4M3: RNE, satfinite (+-448), NaN -> 0x7F. Hardware cvt on device, portable on host.
DMOE_HOST_DEVICE uint8_t float_to_e4m3(float x) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  return static_cast<uint8_t>(float2_to_e4m3x2(x, 0.0f) & 0xffu);
#else
  return float_to_e4m3_portable(x);
#endif
}

// E4M3 -> float, exact. 0x7F/0xFF decode to a quiet NaN carrying the code's sign.
DMOE_HOST_DEVICE float e4m3_to_float(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80u) << 24;
  const uint32_t e = (code >> 3) & 0xfu;
  const uint32_t m = code & 0x7u;
  if (e == 0xfu && m == 0x7u) return bits_float(sign | 0x7fc00000u);
  if (e == 0u) {
    // m * 2^-9: exact, since m has at most 3 bits.
    return bits_float(sign | float_bits(mul_rn(static_cast<float>(m), kE4M3MinSubnormal)));
  }
  return bits_float(sign | ((e + 120u) << 23) | (m << 20));
}

// The same value through the hardware decode on SM89+ devices (cvt.rn.f16x2.e4m3x2, then the
// half's exact widening: every E4M3 value is a normal or subnormal FP16 value), two instructions
// instead of the branches above; equal to e4m3_to_float on every code but the NaN payloads (GPU
// test over all 256 codes). The portable decode elsewhere.
DMOE_HOST_DEVICE float e4m3_to_float_fast(uint8_t code) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 890)
  float f;
  asm("{\n\t.reg .b32 h2;\n\t.reg .b16 lo, hi;\n\t"
      "cvt.rn.f16x2.e4m3x2 h2, %1;\n\tmov.b32 {lo, hi}, h2;\n\tcvt.f32.f16 %0, lo;\n\t}"
      : "=f"(f)
      : "h"(static_cast<uint16_t>(code)));
  return f;
#else
  return e4m3_to_float(code);
#endif
}

// The value an E4M3 store followed by a load gives back.
DMOE_HOST_DEVICE float round_e4m3(float x) { return e4m3_to_float(float_to_e4m3(x)); }

}  // namespace dist_moe::numeric
