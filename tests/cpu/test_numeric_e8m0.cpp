// E8M0 decoding, exact reciprocals and the MXFP8 "RCEIL" scale choice, checked against the
// property that defines it: 2^(byte-127) is the smallest power of two 2^e, e >= -127, with
// amax <= 448 * 2^e (evaluated exactly in double).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "dist_moe/device/numeric/numeric.cuh"
#include "test_helpers.h"

namespace nm = dist_moe::numeric;

namespace {

using test_helpers::from_bits;
using test_helpers::kInf;
using test_helpers::rceil_expected;
using test_helpers::sweep_fp32_patterns;
using test_helpers::to_bits;

// The defining property, independent of the FP32 product the implementation forms: the smallest
// e >= -127 with amax <= 448 * 2^e (exact in double).
int property_expected(float amax) {
  if (!std::isfinite(amax)) return 0xff;
  const double a = std::fabs(static_cast<double>(amax));
  int e = -127;
  if (a > 0) {
    e = static_cast<int>(std::ceil(std::log2(a / 448.0)));
    while (e > -127 && a <= std::ldexp(448.0, e - 1)) --e;  // fix any log2 rounding
    while (a > std::ldexp(448.0, e)) ++e;
    if (e < -127) e = -127;
  }
  if (e > 127) e = 127;
  return e + 127;
}

}  // namespace

TEST(NumericE8M0, DecodeAndReciprocalAreExact) {
  for (int b = 0; b < 255; ++b) {
    const float v = nm::e8m0_to_float(static_cast<uint8_t>(b));
    EXPECT_EQ(static_cast<double>(v), std::ldexp(1.0, b - 127)) << b;
    const float r = nm::e8m0_reciprocal(static_cast<uint8_t>(b));
    EXPECT_EQ(static_cast<double>(r), std::ldexp(1.0, 127 - b)) << b;
    if (b <= 253) {
      EXPECT_EQ(to_bits(r), static_cast<uint32_t>(254 - b) << 23) << "bit formula, byte " << b;
    }
  }
  EXPECT_EQ(to_bits(nm::e8m0_to_float(0)), 0x00400000u);  // 2^-127 is an FP32 subnormal
  EXPECT_EQ(nm::e8m0_to_float(127), 1.0f);
  EXPECT_TRUE(std::isnan(nm::e8m0_to_float(0xff)));
  EXPECT_TRUE(std::isnan(nm::e8m0_reciprocal(0xff)));
}

TEST(NumericE8M0, CeilPow2Step) {
  EXPECT_EQ(nm::e8m0_ceil_pow2(1.0f), 127);
  EXPECT_EQ(nm::e8m0_ceil_pow2(std::nextafter(1.0f, 2.0f)), 128);
  EXPECT_EQ(nm::e8m0_ceil_pow2(std::nextafter(1.0f, 0.0f)), 127);
  EXPECT_EQ(nm::e8m0_ceil_pow2(-3.0f), 129);  // |t|
  EXPECT_EQ(nm::e8m0_ceil_pow2(0.0f), 0);
  EXPECT_EQ(nm::e8m0_ceil_pow2(from_bits(1)), 0);            // smallest subnormal -> 2^-127
  EXPECT_EQ(nm::e8m0_ceil_pow2(from_bits(0x00400000u)), 0);  // 2^-127 exactly
  EXPECT_EQ(nm::e8m0_ceil_pow2(from_bits(0x00400001u)), 1);  // just above -> 2^-126
  EXPECT_EQ(nm::e8m0_ceil_pow2(from_bits(0x00800000u)), 1);  // 2^-126 = FLT_MIN
  EXPECT_EQ(nm::e8m0_ceil_pow2(std::ldexp(1.0f, 127)), 254);
  EXPECT_EQ(nm::e8m0_ceil_pow2(std::ldexp(1.5f, 127)), 254);  // top clamp (satfinite)
  EXPECT_EQ(nm::e8m0_ceil_pow2(std::numeric_limits<float>::max()), 254);
  EXPECT_EQ(nm::e8m0_ceil_pow2(std::numeric_limits<float>::infinity()), 255);
  EXPECT_EQ(nm::e8m0_ceil_pow2(std::numeric_limits<float>::quiet_NaN()), 255);
}

TEST(NumericE8M0, RceilOnPowersOfTwoAndNeighbours) {
  for (int k = -140; k <= 119; ++k) {
    const float a = std::ldexp(448.0f, k);  // exact when representable (448 = 7 * 2^6)
    if (a == 0.0f || static_cast<double>(a) != std::ldexp(448.0, k)) continue;
    const int want = k < -127 ? 0 : k + 127;
    EXPECT_EQ(nm::e8m0_rceil_from_amax(a), want) << "amax = 448*2^" << k;
    EXPECT_EQ(nm::e8m0_rceil_from_amax(a), rceil_expected(a));
    EXPECT_EQ(nm::e8m0_rceil_from_amax(a), property_expected(a));
    const float above = std::nextafter(a, std::numeric_limits<float>::infinity());
    EXPECT_EQ(nm::e8m0_rceil_from_amax(above), rceil_expected(above)) << "above 448*2^" << k;
    // Above 448*2^-127 the product t is an FP32 subnormal (ulp 2^-149 = 2^-22 relative) and
    // rounds back down to 2^-127: the one place where RCEIL picks one less than the property.
    if (k >= -126) {
      EXPECT_EQ(nm::e8m0_rceil_from_amax(above), want + 1) << "above 448*2^" << k;
    }
    const float below = std::nextafter(a, 0.0f);
    EXPECT_EQ(nm::e8m0_rceil_from_amax(below), rceil_expected(below)) << "below 448*2^" << k;
    EXPECT_EQ(nm::e8m0_rceil_from_amax(below), want) << "below 448*2^" << k;
    // Plain powers of two too.
    const float p = std::ldexp(1.0f, k);
    if (p != 0.0f) {
      EXPECT_EQ(nm::e8m0_rceil_from_amax(p), rceil_expected(p)) << "2^" << k;
    }
  }
}

TEST(NumericE8M0, RceilEdgeValues) {
  EXPECT_EQ(nm::e8m0_rceil_from_amax(448.0f), 127);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(449.0f), 128);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(1.0f), 127 - 8);  // 1/448 -> 2^-8 (1 <= 448 * 2^-8 = 1.75)
  EXPECT_EQ(nm::e8m0_rceil_from_amax(0.0f), 0);        // all-zero block: smallest scale, not NaN
  EXPECT_EQ(nm::e8m0_rceil_from_amax(-0.0f), 0);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(from_bits(1)), 0);            // subnormal amax
  EXPECT_EQ(nm::e8m0_rceil_from_amax(from_bits(0x007fffffu)), 0);  // largest subnormal
  EXPECT_EQ(nm::e8m0_rceil_from_amax(std::numeric_limits<float>::min()), 0);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(std::ldexp(448.0f, -127)), 0);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(std::ldexp(449.0f, -127)), 1);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(std::numeric_limits<float>::max()), 0xf7);  // top never reached
  EXPECT_EQ(nm::e8m0_rceil_from_amax(1e38f), rceil_expected(1e38f));
  EXPECT_EQ(nm::e8m0_rceil_from_amax(std::numeric_limits<float>::infinity()), 0xff);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(-std::numeric_limits<float>::infinity()), 0xff);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(std::numeric_limits<float>::quiet_NaN()), 0xff);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(from_bits(0xff800001u)), 0xff);
}

TEST(NumericE8M0, RceilSubnormalProductCorner) {
  // amax one ulp above 448 * 2^-127: t = fl(amax / 448) rounds to 2^-127 exactly, so the byte is
  // 0 and amax * 2^127 = 448 * (1 + 2^-23 / 1.75) exceeds 448 by far less than E4M3's half ulp
  // (16): it encodes to 448 exactly as rounding would, and dequantizes to the same value the
  // "ideal" byte 1 would give. This is what cvt.rp on the FP32 product does; we keep those bits.
  const float a = std::nextafter(std::ldexp(448.0f, -127), 1.0f);
  EXPECT_EQ(nm::e8m0_rceil_from_amax(a), 0);
  EXPECT_EQ(property_expected(a), 1);
  EXPECT_EQ(nm::mxfp8_quantize_value(a, 0), 0x7e);
  EXPECT_EQ(nm::mxfp8_dequantize_value(0x7e, 0), std::ldexp(448.0f, -127));
}

TEST(NumericE8M0, RceilSweepNothingClipsAndMinimal) {
  // Every 61st positive FP32 pattern, plus the first 4096 patterns above each 448 * 2^k:
  // the byte follows the instruction definition, and equals the "nothing clips, minimal"
  // property except in the subnormal-product corner above, where it is one less and the block
  // maximum still rounds (RNE) to 448, never saturating beyond a rounding.
  auto check = [](float a) {
    const int got = nm::e8m0_rceil_from_amax(a);
    ASSERT_EQ(got, rceil_expected(a)) << std::hex << to_bits(a) << " " << a;
    const int prop = property_expected(a);
    if (got != prop) {
      ASSERT_EQ(got, prop - 1) << a;
      ASSERT_LT(static_cast<double>(a), std::ldexp(448.0, -126)) << a;
      ASSERT_LT(std::ldexp(static_cast<double>(a), 127 - got), 464.0) << a;  // still rounds to 448
    }
  };
  sweep_fp32_patterns(0, to_bits(kInf), 61, check);
  for (int k = -149; k <= 119; ++k) {
    const float p = std::ldexp(448.0f, k);
    if (p == 0.0f) continue;
    for (uint32_t d = 0; d < 4096; ++d) {
      check(from_bits(to_bits(p) + d));
      if (to_bits(p) > d) check(from_bits(to_bits(p) - d));
    }
  }
}

TEST(NumericE8M0, RceilFromBf16AmaxEqualsTheFloatRuleOnEveryBf16) {
  for (uint32_t b = 0; b < (1u << 16); ++b) {
    const float amax = nm::bits_float(b << 16);
    uint8_t scale = 0;
    float reciprocal = 0;
    nm::e8m0_rceil_from_bf16_amax(amax, scale, reciprocal);
    const uint8_t want = nm::e8m0_rceil_from_amax(amax);
    ASSERT_EQ(scale, want) << std::hex << b;
    const float want_r = nm::e8m0_reciprocal(want);
    ASSERT_TRUE(nm::float_bits(reciprocal) == nm::float_bits(want_r) || (std::isnan(reciprocal) && std::isnan(want_r)))
        << std::hex << b;
  }
}
