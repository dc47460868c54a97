// Exact IEEE-754 FP32 helpers shared by the number formats, identical on host and device.
//
// Every rounding-relevant product or quotient in the formats goes through mul_rn/div_rn so
// that nvcc can never contract it into an FMA (on device they are __fmul_rn/__fdiv_rn; on the
// host g++ in ISO C++17 mode without -ffast-math already rounds each operation to FP32 on SSE).
// Kernels that use these headers must not be built with --use_fast_math or -ftz=true: the
// formats rely on FP32 subnormals (E8M0 byte 0 is 2^-127, a subnormal float).
#pragma once

#include <cstdint>

#include "dist_moe/device/numeric/bf16.cuh"  // float_bits / bits_float

namespace dist_moe::numeric {

// a * b rounded to nearest even in FP32 (never fused).
DMOE_HOST_DEVICE float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// a / b rounded to nearest even in FP32 (IEEE division: div.rn.f32 on device).
DMOE_HOST_DEVICE float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// Bits of |x| (sign cleared). For non-NaN values, integer order of these bits is the order of |x|;
// every NaN compares above +Inf (0x7f800000).
DMOE_HOST_DEVICE uint32_t abs_bits(float x) { return float_bits(x) & 0x7fffffffu; }

DMOE_HOST_DEVICE float abs_f32(float x) { return bits_float(abs_bits(x)); }

DMOE_HOST_DEVICE bool is_nan(float x) { return abs_bits(x) > 0x7f800000u; }

DMOE_HOST_DEVICE bool is_finite(float x) { return abs_bits(x) < 0x7f800000u; }

// Canonical quiet NaN (0x7fc00000).
DMOE_HOST_DEVICE float quiet_nan() { return bits_float(0x7fc00000u); }

// max(|running|, |x|) with NaN propagation (like max.NaN.f32 / redux.sync.max.NaN): once a NaN
// is seen the result stays NaN. Done on the integer bits of |.|: they order like the values, and
// every NaN's bits lie above +Inf's, so the integer max keeps the NaN. The result is never negative.
DMOE_HOST_DEVICE float amax_nan(float running, float x) {
  const uint32_t a = abs_bits(running);
  const uint32_t b = abs_bits(x);
  return bits_float(a > b ? a : b);
}

namespace detail {
// Index helpers for the block quantizers (non-negative arguments).
DMOE_HOST_DEVICE int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
DMOE_HOST_DEVICE int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }
}  // namespace detail

}  // namespace dist_moe::numeric
