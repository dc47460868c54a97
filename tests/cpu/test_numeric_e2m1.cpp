// FP4 E2M1 conversions and nibble packing against an independent enumeration.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"

namespace nm = dist_moe::numeric;

namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// The eight magnitudes of the OCP FP4 E2M1 format, index = code (reference section 4.1).
const double kMagnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

uint8_t e2m1_expected(float x) {
  if (std::isnan(x)) return 0x7;  // CUDA's cvt emulation: NaN -> +MAXNORM
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  const double ax = std::fabs(static_cast<double>(x));
  if (ax >= 6.0) return static_cast<uint8_t>(sign | 0x7);
  const int hi = static_cast<int>(std::upper_bound(kMagnitudes, kMagnitudes + 8, ax) - kMagnitudes);
  const int lo = hi - 1;
  const double twice = 2.0 * ax, mid2 = kMagnitudes[lo] + kMagnitudes[hi];
  int idx;
  if (twice < mid2) idx = lo;
  else if (twice > mid2) idx = hi;
  else idx = (lo % 2 == 0) ? lo : hi;
  return static_cast<uint8_t>(sign | idx);
}

}  // namespace

TEST(NumericE2M1, AllCodesDecodeAndRoundTrip) {
  for (int c = 0; c < 16; ++c) {
    const double want = (c & 8 ? -1.0 : 1.0) * kMagnitudes[c & 7];
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
  for (int i = 0; i < 7; ++i) {
    const float mid = static_cast<float>((kMagnitudes[i] + kMagnitudes[i + 1]) / 2);
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
  for (uint64_t u = 0; u <= 0xffffffffull; u += 263) {
    const float x = from_bits(static_cast<uint32_t>(u));
    ASSERT_EQ(nm::float_to_e2m1(x), e2m1_expected(x)) << std::hex << u;
  }
  // Dense over [0.125, 8): every 8th pattern.
  uint32_t lo, hi;
  const float flo = 0.125f, fhi = 8.0f;
  std::memcpy(&lo, &flo, 4);
  std::memcpy(&hi, &fhi, 4);
  for (uint32_t u = lo; u < hi; u += 8) {
    const float x = from_bits(u);
    ASSERT_EQ(nm::float_to_e2m1(x), e2m1_expected(x)) << x;
    ASSERT_EQ(nm::float_to_e2m1(-x), e2m1_expected(-x)) << x;
  }
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
