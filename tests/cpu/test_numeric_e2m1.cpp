// FP4 E2M1 conversions and nibble packing against an independent enumeration.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>

#include "dist_moe/device/numeric/numeric.cuh"
#include "test_helpers.h"

namespace nm = dist_moe::numeric;

using test_helpers::e2m1_definition;
using test_helpers::e2m1_expected;
using test_helpers::e2m1_grid;
using test_helpers::from_bits;
using test_helpers::kAllFp32Patterns;
using test_helpers::sweep_fp32_patterns;
using test_helpers::to_bits;

TEST(NumericE2M1, AllCodesDecodeAndRoundTrip) {
  for (int c = 0; c < 16; ++c) {
    const double want = e2m1_definition(c);
    const float got = nm::e2m1_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), (c & 8) != 0) << "code " << c;  // 0x8 is -0
    EXPECT_EQ(nm::float_to_e2m1(got), c) << "code " << c;
    EXPECT_EQ(nm::round_e2m1(got), got);
    // High bits of the argument are ignored by the decoder.
    EXPECT_EQ(nm::e2m1_to_float(static_cast<uint8_t>(0xf0 | c)), got);
  }
}

TEST(NumericE2M1, TiesRoundToEven) {
  // Midpoints between adjacent magnitudes, and the expected (even) code.
  const struct {
    float mid;
    int code;
  } ties[] = {{0.25f, 0}, {0.75f, 2}, {1.25f, 2}, {1.75f, 4}, {2.5f, 4}, {3.5f, 6}, {5.0f, 6}};
  for (const auto& t : ties) {
    EXPECT_EQ(nm::float_to_e2m1(t.mid), t.code) << t.mid;
    EXPECT_EQ(nm::float_to_e2m1(-t.mid), 0x8 | t.code) << t.mid;
  }
  const auto& g = e2m1_grid();
  for (int i = 0; i < 7; ++i) {
    const float mid = static_cast<float>((g[i] + g[i + 1]) / 2);
    EXPECT_EQ(nm::float_to_e2m1(std::nextafter(mid, 0.0f)), i);
    EXPECT_EQ(nm::float_to_e2m1(std::nextafter(mid, 10.0f)), i + 1);
  }
}

TEST(NumericE2M1, SaturationAndNaN) {
  for (float v : {6.0f, 6.5f, 7.0f, 8.0f, 1e30f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(nm::float_to_e2m1(v), 0x7) << v;
    EXPECT_EQ(nm::float_to_e2m1(-v), 0xf) << v;
  }
  EXPECT_EQ(nm::round_e2m1(7.0f), 6.0f);
  EXPECT_EQ(nm::float_to_e2m1(std::numeric_limits<float>::quiet_NaN()), 0x7);
  EXPECT_EQ(nm::float_to_e2m1(from_bits(0xffc00000u)), 0x7);  // sign of NaN discarded
  EXPECT_EQ(nm::float_to_e2m1(from_bits(0x7f800001u)), 0x7);
  EXPECT_EQ(nm::float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(nm::float_to_e2m1(-0.1f), 0x8);
  EXPECT_EQ(nm::float_to_e2m1(from_bits(1)), 0x0);
}

TEST(NumericE2M1, SweepMatchesEnumeration) {
  ASSERT_NO_FATAL_FAILURE(sweep_fp32_patterns(0, kAllFp32Patterns, 263, [](float x) {
    ASSERT_EQ(nm::float_to_e2m1(x), e2m1_expected(x)) << std::hex << to_bits(x);
  }));
  // Dense over [0.125, 8): every 8th pattern.
  ASSERT_NO_FATAL_FAILURE(sweep_fp32_patterns(to_bits(0.125f), to_bits(8.0f), 8, [](float x) {
    ASSERT_EQ(nm::float_to_e2m1(x), e2m1_expected(x)) << x;
    ASSERT_EQ(nm::float_to_e2m1(-x), e2m1_expected(-x)) << x;
  }));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> d(-8.0f, 8.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = d(rng);
    ASSERT_EQ(nm::float_to_e2m1(x), e2m1_expected(x)) << x;
  }
}

TEST(NumericE2M1, PackTwoPerByteLowNibbleFirst) {
  for (int lo = 0; lo < 16; ++lo)
    for (int hi = 0; hi < 16; ++hi) {
      const uint8_t b = nm::e2m1x2_pack(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
      EXPECT_EQ(b, lo + 16 * hi);
      EXPECT_EQ(nm::e2m1x2_lo(b), lo);
      EXPECT_EQ(nm::e2m1x2_hi(b), hi);
    }
  EXPECT_EQ(nm::e2m1x2_pack(0x17, 0x2a), 0xa7);  // stray high bits are masked
}

TEST(NumericE2M1, BranchFreeRoundingEqualsPortableRule) {
  // Every 61st float bit pattern (the GPU test checks all 2^32), plus every float within 64 ulps of
  // each rounding boundary.
  for (uint64_t u = 0; u < (1ull << 32); u += 61) {
    float x;
    const uint32_t b = static_cast<uint32_t>(u);
    std::memcpy(&x, &b, 4);
    ASSERT_EQ(nm::float_to_e2m1(x), nm::float_to_e2m1_portable(x)) << std::hex << b;
  }
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 1.0f}) {
    float x = t;
    for (int i = 0; i < 64; ++i) x = std::nextafter(x, 0.0f);
    for (int i = -64; i <= 64; ++i, x = std::nextafter(x, 100.0f)) {
      ASSERT_EQ(nm::float_to_e2m1(x), nm::float_to_e2m1_portable(x)) << x;
      ASSERT_EQ(nm::float_to_e2m1(-x), nm::float_to_e2m1_portable(-x)) << -x;
    }
  }
}

TEST(NumericE2M1, ClamplessCodeBelowSevenEqualsClampedCode) {
  // A sample of the floats in [0, 7) and every float near the code boundaries and 6, 7 (the GPU
  // test takes every float below 7).
  for (uint32_t b = 0; b < 0x40e00000u; b += 37) {
    const float x = nm::bits_float(b);
    ASSERT_EQ(nm::e2m1_magnitude_code_bits_below7(x), nm::e2m1_magnitude_code_bits(x)) << std::hex << b;
  }
  for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, 6.5f, 7.0f}) {
    float x = t;
    for (int i = 0; i < 256; ++i) x = std::nextafter(x, 0.0f);
    for (int i = -256; i <= 256 && x < 7.0f; ++i, x = std::nextafter(x, 100.0f))
      ASSERT_EQ(nm::e2m1_magnitude_code_bits_below7(x), nm::e2m1_magnitude_code_bits(x)) << x;
  }
  EXPECT_EQ(nm::e2m1_magnitude_code_bits_below7(std::nextafter(7.0f, 0.0f)) & 0xffu, 7u);
}

TEST(NumericE2M1, DivisionThroughTheReciprocalEqualsIeeeDivision) {
  // a / s for the eight E4M3 scale significands, a sample of dividends (the GPU test takes all).
  for (int code = 0x08; code < 0x10; ++code) {
    const float s = nm::e4m3_to_float(static_cast<uint8_t>(code)), r = 1.0f / s;
    for (uint32_t m = 0; m < (1u << 23); m += 7) {
      float a;
      const uint32_t b = (127u << 23) | m;
      std::memcpy(&a, &b, 4);
      ASSERT_EQ(nm::float_bits(nm::div_rn_by_reciprocal(a, s, r)), nm::float_bits(a / s)) << a << " / " << s;
      ASSERT_EQ(nm::float_bits(nm::div_rn_by_reciprocal(-a, s, r)), nm::float_bits(-a / s)) << -a << " / " << s;
    }
  }
  EXPECT_EQ(nm::float_bits(nm::div_rn_by_reciprocal(-0.0f, 1.5f, 1.0f / 1.5f)), 0x80000000u);
  EXPECT_TRUE(std::isnan(nm::div_rn_by_reciprocal(1.0f, std::nanf(""), std::nanf(""))));
}
