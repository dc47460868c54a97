// FP8 E4M3 ("fn") conversions against an independent enumeration of the representable values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "dist_moe/device/numeric/numeric.cuh"
#include "test_helpers.h"

namespace nm = dist_moe::numeric;

using test_helpers::e4m3_definition;
using test_helpers::e4m3_expected;
using test_helpers::e4m3_grid;
using test_helpers::from_bits;
using test_helpers::kAllFp32Patterns;
using test_helpers::sweep_fp32_patterns;
using test_helpers::to_bits;

TEST(NumericE4M3, AllCodesDecodeToDefinition) {
  for (int c = 0; c < 256; ++c) {
    const float got = nm::e4m3_to_float(static_cast<uint8_t>(c));
    const double want = e4m3_definition(c);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      continue;
    }
    EXPECT_EQ(static_cast<double>(got), want) << "code " << c;
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;  // 0x80 is -0
  }
  EXPECT_EQ(nm::e4m3_to_float(0x7e), 448.0f);
  EXPECT_EQ(nm::e4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(nm::e4m3_to_float(0x07), 7.0f / 512.0f);  // largest subnormal
  EXPECT_EQ(nm::e4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(nm::e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(nm::e4m3_to_float(0xfe), -448.0f);
  int nan_codes = 0;
  for (int c = 0; c < 256; ++c) nan_codes += std::isnan(nm::e4m3_to_float(static_cast<uint8_t>(c)));
  EXPECT_EQ(nan_codes, 2);
}

TEST(NumericE4M3, AllCodesRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    const float v = nm::e4m3_to_float(static_cast<uint8_t>(c));
    if (c == 0x7f || c == 0xff) {
      EXPECT_TRUE(std::isnan(v));
      EXPECT_EQ(nm::float_to_e4m3(v), 0x7f) << "code " << c;
      continue;
    }
    EXPECT_EQ(nm::float_to_e4m3(v), c) << "code " << c;
    EXPECT_EQ(nm::float_to_e4m3_portable(v), c) << "code " << c;
    EXPECT_EQ(to_bits(nm::round_e4m3(v)), to_bits(v)) << "code " << c;
  }
}

TEST(NumericE4M3, TiesRoundToEvenIncludingSubnormals) {
  const auto& g = e4m3_grid();
  for (int i = 0; i + 1 < static_cast<int>(g.size()); ++i) {
    const float mid = static_cast<float>((g[i] + g[i + 1]) / 2.0);
    ASSERT_EQ(static_cast<double>(mid), (g[i] + g[i + 1]) / 2.0) << "midpoint must be exact in FP32";
    const int even = (i % 2 == 0) ? i : i + 1;
    EXPECT_EQ(nm::float_to_e4m3(mid), even) << "midpoint of codes " << i << "," << i + 1;
    EXPECT_EQ(nm::float_to_e4m3(-mid), 0x80 | even);
    EXPECT_EQ(nm::float_to_e4m3(std::nextafter(mid, 0.0f)), i);
    EXPECT_EQ(nm::float_to_e4m3(std::nextafter(mid, 1e9f)), i + 1);
    EXPECT_EQ(nm::float_to_e4m3(-std::nextafter(mid, 1e9f)), 0x80 | (i + 1));
  }
  // A few by hand: 2^-10 is the midpoint of 0 and the smallest subnormal -> 0 (even).
  EXPECT_EQ(nm::float_to_e4m3(std::ldexp(1.0f, -10)), 0x00);
  EXPECT_EQ(nm::float_to_e4m3(3.0f * std::ldexp(1.0f, -10)), 0x02);  // 1.5 * 2^-9 -> 2 * 2^-9
  EXPECT_EQ(nm::float_to_e4m3(15.0f * std::ldexp(1.0f, -10)), 0x08);  // 7.5 * 2^-9 -> 2^-6
  EXPECT_EQ(nm::float_to_e4m3(1.0625f), 0x38);                       // between 1 and 1.125
  EXPECT_EQ(nm::float_to_e4m3(1.1875f), 0x3a);                       // between 1.125 and 1.25
  EXPECT_EQ(nm::float_to_e4m3(432.0f), 0x7e);                        // between 416 and 448
}

TEST(NumericE4M3, SaturationAndSpecials) {
  for (float v : {448.0f, 449.0f, 463.99f, 464.0f, 480.0f, 1000.0f, 1e30f, std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity()}) {
    EXPECT_EQ(nm::float_to_e4m3(v), 0x7e) << v;
    EXPECT_EQ(nm::float_to_e4m3(-v), 0xfe) << v;
  }
  EXPECT_EQ(nm::float_to_e4m3(447.0f), 0x7e);
  EXPECT_EQ(nm::float_to_e4m3(417.0f), 0x7d);  // nearest to 416
  for (uint32_t nan_bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu}) {
    EXPECT_EQ(nm::float_to_e4m3(from_bits(nan_bits)), 0x7f) << std::hex << nan_bits;
  }
  EXPECT_EQ(nm::float_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(nm::float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(nm::float_to_e4m3(-1e-10f), 0x80);   // rounds to zero, keeps sign
  EXPECT_EQ(nm::float_to_e4m3(from_bits(1)), 0x00);  // FP32 subnormals
  EXPECT_EQ(nm::float_to_e4m3(from_bits(0x807fffffu)), 0x80);
}

TEST(NumericE4M3, SweepMatchesEnumeration) {
  // Every 257th FP32 bit pattern (all exponents, both signs), then every 16th pattern across the
  // binades where E4M3 rounding happens (2^-11 .. 2^9), then random floats.
  int64_t checked = 0;
  ASSERT_NO_FATAL_FAILURE(sweep_fp32_patterns(0, kAllFp32Patterns, 257, [&](float x) {
    ASSERT_EQ(nm::float_to_e4m3(x), e4m3_expected(x)) << std::hex << to_bits(x);
    ++checked;
  }));
  ASSERT_NO_FATAL_FAILURE(sweep_fp32_patterns(to_bits(std::ldexp(1.0f, -11)), to_bits(512.0f), 16, [&](float x) {
    ASSERT_EQ(nm::float_to_e4m3(x), e4m3_expected(x)) << std::hex << to_bits(x);
    ASSERT_EQ(nm::float_to_e4m3(-x), e4m3_expected(-x)) << std::hex << to_bits(x);
    checked += 2;
  }));
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> d(-500.0f, 500.0f);
  for (int i = 0; i < 200000; ++i) {
    const float x = d(rng);
    ASSERT_EQ(nm::float_to_e4m3(x), e4m3_expected(x)) << x;
  }
  EXPECT_GT(checked, 20000000);
}

TEST(NumericE4M3, PairPackingOrder) {
  const uint16_t p = nm::float2_to_e4m3x2(1.0f, -448.0f);
  EXPECT_EQ(p & 0xff, 0x38);
  EXPECT_EQ(p >> 8, 0xfe);
  EXPECT_EQ(nm::float2_to_e4m3x2(std::numeric_limits<float>::quiet_NaN(), 0.0f), 0x007f);
}
