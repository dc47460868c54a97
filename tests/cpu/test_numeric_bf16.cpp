// BF16 rounding (bf16.cuh) against an independent nearest-value computation in double.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "dist_moe/device/numeric/numeric.cuh"
#include "test_helpers.h"

namespace nm = dist_moe::numeric;

namespace {

using test_helpers::from_bits;
using test_helpers::kAllFp32Patterns;
using test_helpers::nearest_even_of_two;
using test_helpers::sweep_fp32_patterns;
using test_helpers::to_bits;

// Magnitude of the BF16 pattern h (sign ignored) from the format definition; exponent field 255
// with mantissa 0 is taken as 2^128, the "next value" IEEE overflow rounding compares against.
double bf16_magnitude(uint32_t h) {
  const int e = (h >> 7) & 0xff, m = h & 0x7f;
  if (e == 0) return std::ldexp(m, -133);
  return std::ldexp(1.0 + m / 128.0, e - 127);
}

// Expected BF16 bits of a finite x: nearest of the two neighbours, ties to even, overflow to Inf.
uint16_t bf16_expected(float x) {
  const uint32_t u = to_bits(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t lo = (u & 0x7fffffffu) >> 16;
  const double ax = std::fabs(static_cast<double>(x));
  const auto h = static_cast<uint32_t>(nearest_even_of_two(ax, bf16_magnitude(lo), bf16_magnitude(lo + 1), lo));
  return static_cast<uint16_t>((sign >> 16) | h);
}

}  // namespace

TEST(NumericBF16, TiesRoundToEvenIncludingSubnormals) {
  // Exact midpoints between adjacent BF16 values: the low 16 FP32 bits are 0x8000.
  for (uint32_t h : {0x0000u, 0x0001u, 0x0002u, 0x0003u, 0x007eu, 0x007fu, 0x0080u, 0x0081u, 0x3f80u, 0x3f81u,
                     0x4000u, 0x7f7eu}) {
    const float mid = from_bits((h << 16) | 0x8000u);
    const uint16_t even = static_cast<uint16_t>((h % 2 == 0) ? h : h + 1);
    EXPECT_EQ(nm::float_to_bf16(mid).bits, even) << std::hex << h;
    EXPECT_EQ(nm::float_to_bf16(-mid).bits, 0x8000u | even) << std::hex << h;
    EXPECT_EQ(nm::float_to_bf16(from_bits((h << 16) | 0x7fffu)).bits, h);
    EXPECT_EQ(nm::float_to_bf16(from_bits((h << 16) | 0x8001u)).bits, h + 1);
  }
  // Largest finite BF16 plus half an ulp rounds (to even) to +Inf, as IEEE RNE does.
  EXPECT_EQ(nm::float_to_bf16(from_bits(0x7f7f8000u)).bits, 0x7f80u);
  EXPECT_EQ(nm::float_to_bf16(from_bits(0x7f7f7fffu)).bits, 0x7f7fu);
}

TEST(NumericBF16, SpecialsAndExactValues) {
  EXPECT_EQ(nm::float_to_bf16(std::numeric_limits<float>::infinity()).bits, 0x7f80u);
  EXPECT_EQ(nm::float_to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80u);
  EXPECT_EQ(nm::float_to_bf16(-0.0f).bits, 0x8000u);
  for (uint32_t nan_bits : {0x7fc00000u, 0x7f800001u, 0xffffffffu, 0x7f80ffffu}) {
    EXPECT_TRUE(std::isnan(nm::round_bf16(from_bits(nan_bits)))) << std::hex << nan_bits;
  }
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7f80u) == 0x7f80u && (h & 0x7fu)) continue;  // NaN patterns
    const float v = from_bits(h << 16);
    ASSERT_EQ(nm::float_to_bf16(v).bits, h);
    ASSERT_EQ(to_bits(nm::bf16_to_float(nm::bf16_t{static_cast<uint16_t>(h)})), h << 16);
  }
}

TEST(NumericBF16, SweepMatchesNearest) {
  ASSERT_NO_FATAL_FAILURE(sweep_fp32_patterns(0, kAllFp32Patterns, 211, [](float x) {
    if (!std::isfinite(x)) return;
    ASSERT_EQ(nm::float_to_bf16(x).bits, bf16_expected(x)) << std::hex << to_bits(x);
  }));
  std::mt19937 rng(99);
  std::uniform_int_distribution<uint32_t> d;
  for (int i = 0; i < 500000; ++i) {
    const float x = from_bits(d(rng));
    if (!std::isfinite(x)) continue;
    ASSERT_EQ(nm::float_to_bf16(x).bits, bf16_expected(x)) << x;
  }
}
