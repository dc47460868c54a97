// Conversions between FP32 registers and packed BF16 (round-to-nearest-even, like the host's
// numeric::float_to_bf16).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Two floats -> one 32-bit word holding BF16(lo) in bits 0-15 and BF16(hi) in bits 16-31.
// (cvt.rn.bf16x2.f32 d, a, b puts a in the upper half and b in the lower half.)
DMOE_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

// One float -> its BF16 bits (the single-value conversion: packing it with a zero as above costs
// the W13 kernels registers, two of them spill).
DMOE_DEVICE uint16_t cvt_bf16(float f) {
  uint16_t h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return h;
}

DMOE_DEVICE float bf16_lo_to_float(uint32_t w) { return __uint_as_float(w << 16); }
DMOE_DEVICE float bf16_hi_to_float(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
