// BF16 <-> FP32 by bit manipulation, identical on host and device.
//
// The CPU oracle rounds with these functions and the kernels store with the hardware's
// cvt.rn.bf16.f32; both are round-to-nearest-even with NaN kept quiet, so results agree bitwise.
#pragma once

#include <cstdint>
#include <cstring>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/ptx/cvt.cuh"

namespace dist_moe::numeric {

// Bits of a BF16 value. A distinct type (not uint16_t) so it never converts silently.
struct bf16_t {
  uint16_t bits;
};

DMOE_HOST_DEVICE uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

DMOE_HOST_DEVICE float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// Round-to-nearest-even; NaN stays NaN (quiet bit set), infinities stay infinite.
DMOE_HOST_DEVICE bf16_t float_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_t{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  const uint32_t lsb = (u >> 16) & 1u;
  return bf16_t{static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16)};
}

DMOE_HOST_DEVICE float bf16_to_float(bf16_t h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

// FP32 -> BF16 -> FP32: the value a BF16 store followed by a load gives back. The device uses the
// hardware conversion (one instruction, no NaN branch; the same value except for a NaN's payload).
DMOE_HOST_DEVICE float round_bf16(float f) {
#if defined(__CUDA_ARCH__)
  return ptx::bf16_lo_to_float(ptx::cvt_bf16(f));
#else
  return bf16_to_float(float_to_bf16(f));
#endif
}

// Two BF16 products, each rounded to nearest even (mul.rn.bf16x2: half 0 = a's low half times b's).
// The host multiplies in FP32 and rounds once: the same result wherever the FP32 product is exact,
// which holds for every product of two BF16 values unless it falls below 2^-126 with more
// significant bits than FP32 keeps there (and for the MXFP8 dequantization's products always: their
// values keep E4M3's 4 significant bits).
DMOE_HOST_DEVICE uint32_t bf16x2_mul_rn(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
#else
  const auto half = [](uint32_t x, uint32_t y) {
    return static_cast<uint32_t>(float_to_bf16(bits_float(x << 16) * bits_float(y << 16)).bits);
  };
  return half(a & 0xffffu, b & 0xffffu) | half(a >> 16, b >> 16) << 16;
#endif
}

}  // namespace dist_moe::numeric
