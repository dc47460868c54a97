// E8M0 (OCP MX spec "E8M0"; torch.float8_e8m0fnu; PTX .ue8m0): an unsigned power of two.
//
// byte b in [0, 254] means 2^(b - 127); b = 0xFF is NaN. There is no zero and no sign.
// The MXFP8 scale choice is upstream's "RCEIL" (reference section 4.2):
//   byte = cvt.rp.ue8m0x2.f32(amax * fl(1/448))
// i.e. the FP32 product rounded up to a power of two, which makes byte - 127 the smallest e
// with amax / 2^e <= 448, so no element of the block clips (one harmless corner: see below).
// This differs from the OCP MX reference choice floor(log2 amax) - 8, which can saturate the
// top of the block.
#pragma once

#include <cstdint>

#include "dist_moe/device/numeric/fp32.cuh"

namespace dist_moe::numeric {

constexpr uint8_t kE8M0NaN = 0xff;
constexpr uint8_t kE8M0MaxFinite = 0xfe;                // 2^127
constexpr float kE4M3MaxReciprocal = 1.0f / 448.0f;     // fl(1/448), the constant RCEIL multiplies by

// Byte of the smallest power of two >= |t| (the rounding step of cvt.rp.ue8m0x2.f32), clamped
// to the E8M0 range: |t| <= 2^-127, including 0 and every FP32 subnormal up to 2^-127, gives
// 0x00 (2^-127); finite |t| above 2^127 saturates to 0xFE (2^127); NaN and +-Inf give 0xFF.
// Source: the rounding rule of PTX cvt.rp.ue8m0x2 and CUDA's __nv_cvt_float_to_e8m0 emulation
// (exponent field, +1 if any mantissa bit is set and |t| > 2^-127). Non-finite -> 0xFF is the
// non-satfinite instruction's behaviour, which upstream relies on to poison a block.
DMOE_HOST_DEVICE uint8_t e8m0_ceil_pow2(float t) {
  const uint32_t a = abs_bits(t);
  if (a >= 0x7f800000u) return kE8M0NaN;  // NaN or Inf
  if (a <= 0x00400000u) return 0x00u;     // |t| <= 2^-127
  uint32_t b = (a >> 23) + ((a & 0x7fffffu) != 0u ? 1u : 0u);  // FP32 subnormals give 0 + 1
  if (b > kE8M0MaxFinite) b = kE8M0MaxFinite;
  return static_cast<uint8_t>(b);
}

// MXFP8 "RCEIL" scale byte for a block whose NaN-propagating amax is `amax`:
// e8m0_ceil_pow2(fl(|amax| * fl(1/448))), bit-identical to cvt.rp.ue8m0x2.f32 on that product.
// Properties (tested): for finite amax, 2^(byte-127) is the smallest power of two 2^e, e >= -127,
// with amax <= 448 * 2^e, so nothing clips; the single exception is the few amax just above
// 448 * 2^-127, where the product is an FP32 subnormal that rounds down to 2^-127 and byte 0 is
// one less than ideal: the block maximum then scales to 448 * (1 + ~2^-23), which E4M3 RNE
// rounds to 448 anyway (same code, same dequantized value). amax = 0 gives 0x00 (scale 2^-127,
// reciprocal 2^127) and the block's data are all zero (0 * 2^127 = 0), never NaN; finite amax
// never reaches the top clamp (FLT_MAX / 448 < 2^120, so the largest byte is 0xF7); NaN or Inf
// amax gives 0xFF and the block dequantizes to NaN.
DMOE_HOST_DEVICE uint8_t e8m0_rceil_from_amax(float amax) {
  return e8m0_ceil_pow2(mul_rn(abs_f32(amax), kE4M3MaxReciprocal));
}

// E8M0 -> float, exact: 2^(byte-127); byte 0 is the FP32 subnormal 2^-127; 0xFF -> NaN.
DMOE_HOST_DEVICE float e8m0_to_float(uint8_t byte) {
  if (byte == kE8M0NaN) return quiet_nan();
  if (byte == 0u) return bits_float(0x00400000u);
  return bits_float(static_cast<uint32_t>(byte) << 23);
}

// Exact reciprocal 2^(127-byte) built from bits ((254 - byte) << 23) (reference section 4.2).
// The formula would give +0 for byte 0xFE, so that byte returns the subnormal 2^-127 instead
// (unreachable from a finite amax anyway); 0xFF -> NaN, so a poisoned block's data become NaN.
DMOE_HOST_DEVICE float e8m0_reciprocal(uint8_t byte) {
  if (byte == kE8M0NaN) return quiet_nan();
  if (byte == kE8M0MaxFinite) return bits_float(0x00400000u);
  return bits_float(static_cast<uint32_t>(254u - byte) << 23);
}

// The same RCEIL scale and its reciprocal for a BF16-valued amax (low 16 FP32 bits zero, as every
// block amax of BF16 data is) in a few integer steps: for amax = (1 + m/128) * 2^(e-127) with a
// biased exponent e in [10, 254], fl(amax * fl(1/448)) is a normal (1 + m/128) * fl(1/448) * 2^(e-127)
// (rounding commutes with the power of two), which rounds up to 2^(e-135) for m <= 96 and to
// 2^(e-134) above: the scale byte is e - 8 + (m > 96), its reciprocal 2^(127 - byte). Other amaxes
// (zero, tiny, Inf, NaN) take e8m0_rceil_from_amax. Equal to it and to e8m0_reciprocal on all 2^16
// BF16 amaxes (host test). The GPU rows+columns quantizer's per-block step (~6 instructions
// instead of ~18).
DMOE_HOST_DEVICE void e8m0_rceil_from_bf16_amax(float amax, uint8_t& scale, float& reciprocal) {
  const uint32_t u = (float_bits(amax) >> 16) & 0x7fffu;
  const uint32_t e = u >> 7;
  if (e - 10u <= 244u) {
    const uint32_t byte = e - 8u + ((u & 0x7fu) > 96u ? 1u : 0u);
    scale = static_cast<uint8_t>(byte);
    reciprocal = bits_float((254u - byte) << 23);
    return;
  }
  scale = e8m0_rceil_from_amax(amax);
  reciprocal = e8m0_reciprocal(scale);
}

}  // namespace dist_moe::numeric
