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

// fl(1 / a): the correctly rounded reciprocal, equal to div_rn(1, a) (rcp.rn.f32 on device, shorter
// than the general division).
DMOE_HOST_DEVICE float rcp_rn(float a) {
#if defined(__CUDA_ARCH__)
  return __frcp_rn(a);
#else
  return 1.0f / a;
#endif
}

// fl(a * b + c) with one rounding (an FMA).
DMOE_HOST_DEVICE float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}

// a / b for b > 0 given rb = div_rn(1, b): one multiplication and two FMAs (Markstein's correction
// step) instead of an IEEE division; the sign is a's, also for zeros. For b an E4M3 block scale it
// equals div_rn(a, b) bit for bit whenever |a| >= 2^-100 (checked on the GPU for every significand
// of a against every E4M3 scale); below that the FMA's residual underflows and the quotient may be
// an ulp off, but it is then < 2^-90 and rounds to an E2M1 zero of a's sign either way. The NVFP4
// weight quantizer divides every element by its block scale, so this is its inner loop.
DMOE_HOST_DEVICE float div_rn_by_reciprocal_abs(float m, float b, float rb) {  // m = |a|
  const float q = mul_rn(m, rb);
  const float r = fma_rn(-q, b, m);
  return fma_rn(r, rb, q);
}
DMOE_HOST_DEVICE float div_rn_by_reciprocal(float a, float b, float rb) {
  const uint32_t sign = float_bits(a) & 0x80000000u;
  return bits_float(float_bits(div_rn_by_reciprocal_abs(bits_float(float_bits(a) & 0x7fffffffu), b, rb)) | sign);
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
