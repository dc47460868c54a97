// FP8 blockwise (DeepSeek-V3 recipe: 1x128 activation blocks, 128x128 weight blocks, FP32
// scale = amax/448, data = e4m3(x * fl(448/amax))) against a reference written here with the enumerated E4M3 grid (test_helpers.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "test_helpers.h"

namespace nm = dist_moe::numeric;

namespace {

using test_helpers::cdiv;
using test_helpers::e4m3_definition;
using test_helpers::e4m3_expected;
using test_helpers::e4m3_grid;
using test_helpers::kInf;
using test_helpers::kNaN;

// The block's amax with the documented floor: 0 for an all-zero block, NaN if any value is NaN/Inf.
float ref_floored_amax(const std::vector<float>& block) {
  float amax = 0.0f;
  for (float v : block) {
    if (!std::isfinite(v)) return kNaN;
    amax = std::max(amax, std::fabs(v));
  }
  return amax == 0.0f ? 0.0f : std::max(amax, std::ldexp(448.0f, -126));
}

// Documented scale rule: amax / 448; amax = 0 -> 1; NaN/Inf -> NaN.
float ref_scale(const std::vector<float>& block) {
  const float a = ref_floored_amax(block);
  return a == 0.0f ? 1.0f : a / 448.0f;
}

// Documented multiplier rule: 448 / amax; amax = 0 -> 1; NaN/Inf -> NaN.
float ref_multiplier(const std::vector<float>& block) {
  const float a = ref_floored_amax(block);
  return a == 0.0f ? 1.0f : 448.0f / a;
}

std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(-20, 20);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int e = ed(rng);
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = std::ldexp(nd(rng), e + static_cast<int>(c / 128));
  }
  return x;
}

// Rectangle [r0,r1) x [c0,c1) checked against the reference with scale `s_got`.
void check_rect(const std::vector<float>& x, const std::vector<uint8_t>& q, const std::vector<float>& y, int64_t cols,
                int64_t r0, int64_t r1, int64_t c0, int64_t c1, float s_got) {
  std::vector<float> block;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) block.push_back(x[r * cols + c]);
  const float s = ref_scale(block), m = ref_multiplier(block);
  if (std::isnan(s)) {
    ASSERT_TRUE(std::isnan(s_got));
  } else {
    ASSERT_EQ(s_got, s);
  }
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) {
      const uint8_t want = e4m3_expected(x[r * cols + c] * m);
      ASSERT_EQ(q[r * cols + c], want) << r << "," << c;
      const float yv = static_cast<float>(e4m3_definition(want) * s);  // the product of two floats, rounded once
      if (std::isnan(yv)) {
        ASSERT_TRUE(std::isnan(y[r * cols + c]));
      } else {
        ASSERT_EQ(y[r * cols + c], yv) << r << "," << c;
      }
    }
}

}  // namespace

TEST(NumericFP8Blockwise, ActivationRowsMatchReference) {
  const int64_t rows = 9, cols = 300;  // 3 blocks per row, the last partial
  std::vector<float> x = random_matrix(rows, cols, 5);
  x[4 * cols + 200] = kNaN;
  x[6 * cols + 10] = -kInf;
  for (int64_t c = 0; c < 128; ++c) x[7 * cols + c] = 0.0f;                            // all zero
  for (int64_t c = 128; c < 256; ++c) x[8 * cols + c] = std::ldexp(float(c - 190), -140);  // subnormals
  const int64_t nb = cdiv(cols, 128);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(rows * nb), y(rows * cols);
  nm::fp8_blockwise_quantize_act(x.data(), rows, cols, q.data(), s.data());
  nm::fp8_blockwise_dequantize_act(q.data(), s.data(), rows, cols, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      check_rect(x, q, y, cols, r, r + 1, b * 128, std::min(cols, b * 128 + 128), s[r * nb + b]);
  EXPECT_TRUE(std::isnan(s[4 * nb + 1]));
  EXPECT_TRUE(std::isnan(s[6 * nb + 0]));
  EXPECT_EQ(s[7 * nb + 0], 1.0f);
  EXPECT_EQ(s[8 * nb + 1], std::ldexp(1.0f, -126));
  for (int64_t c = 0; c < 128; ++c) EXPECT_EQ(y[7 * cols + c], 0.0f);
  // Below the floor the scale stays 2^-126: x * 2^126 lands in E4M3's subnormal steps (2^-9), so
  // the absolute error is at most 2^-10 * 2^-126.
  for (int64_t c = 128; c < 256; ++c) EXPECT_LE(std::fabs(y[8 * cols + c] - x[8 * cols + c]), std::ldexp(1.0f, -136)) << c;
  for (int64_t c = 128; c < 256; ++c) EXPECT_TRUE(std::isnan(y[4 * cols + c]));
  for (int64_t c = 0; c < 128; ++c) EXPECT_TRUE(std::isfinite(y[4 * cols + c]));
}

TEST(NumericFP8Blockwise, WeightTilesMatchReferenceAndRows) {
  const int64_t rows = 200, cols = 260;  // 2 x 3 tiles, partial at both ends
  std::vector<float> w = random_matrix(rows, cols, 8);
  w[150 * cols + 259] = kNaN;  // tile (1, 2)
  const int64_t nbr = cdiv(rows, 128), nbc = cdiv(cols, 128);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(nbr * nbc), y(rows * cols);
  nm::fp8_blockwise_quantize_weight(w.data(), rows, cols, q.data(), s.data());
  nm::fp8_blockwise_dequantize_weight(q.data(), s.data(), rows, cols, y.data());
  for (int64_t i = 0; i < nbr; ++i)
    for (int64_t j = 0; j < nbc; ++j)
      check_rect(w, q, y, cols, i * 128, std::min(rows, i * 128 + 128), j * 128, std::min(cols, j * 128 + 128),
                 s[i * nbc + j]);
  // Tile scale = max of the 1x128 row-block scales inside it (amax/448 is monotone).
  std::vector<uint8_t> qa(rows * cols);
  std::vector<float> sa(rows * nbc);
  nm::fp8_blockwise_quantize_act(w.data(), rows, cols, qa.data(), sa.data());
  for (int64_t i = 0; i < nbr; ++i)
    for (int64_t j = 0; j < nbc; ++j) {
      if (i == 1 && j == 2) {
        EXPECT_TRUE(std::isnan(s[i * nbc + j]));
        continue;
      }
      float mx = 0.0f;
      for (int64_t r = i * 128; r < std::min(rows, i * 128 + 128); ++r) mx = std::max(mx, sa[r * nbc + j]);
      EXPECT_EQ(s[i * nbc + j], mx) << i << "," << j;
    }
}

TEST(NumericFP8Blockwise, AmaxEncodesTo448AndErrorBound) {
  const int64_t rows = 16, cols = 512;
  const std::vector<float> x = random_matrix(rows, cols, 13);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(rows * 4), y(rows * cols);
  nm::fp8_blockwise_quantize_act(x.data(), rows, cols, q.data(), s.data());
  nm::fp8_blockwise_dequantize_act(q.data(), s.data(), rows, cols, y.data());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < 4; ++b) {
      int64_t arg = b * 128;
      for (int64_t c = b * 128; c < b * 128 + 128; ++c)
        if (std::fabs(x[r * cols + c]) > std::fabs(x[r * cols + arg])) arg = c;
      EXPECT_EQ(q[r * cols + arg] & 0x7f, 0x7e) << r << "," << b;  // the block max becomes +-448
      for (int64_t c = b * 128; c < b * 128 + 128; ++c) {
        const double v = x[r * cols + c], err = std::fabs(y[r * cols + c] - v);
        const double sc = s[r * 4 + b];
        // Normal E4M3: relative 2^-4 (+ FP32 rounding of the product); subnormal: 2^-10 * scale.
        ASSERT_LE(err, std::max(std::ldexp(std::fabs(v), -4) * (1 + 1e-6), std::ldexp(sc, -10) * (1 + 1e-6)))
            << r << "," << c;
      }
    }
}

TEST(NumericFP8Blockwise, ScaleRule) {
  EXPECT_EQ(nm::fp8_blockwise_scale(0.0f), 1.0f);
  EXPECT_EQ(nm::fp8_blockwise_scale(448.0f), 1.0f);
  EXPECT_EQ(nm::fp8_blockwise_scale(896.0f), 2.0f);
  EXPECT_EQ(nm::fp8_blockwise_scale(1.0f), 1.0f / 448.0f);
  EXPECT_EQ(nm::fp8_blockwise_scale(std::numeric_limits<float>::denorm_min()), std::ldexp(1.0f, -126));
  EXPECT_EQ(nm::fp8_blockwise_scale(std::numeric_limits<float>::max()), std::numeric_limits<float>::max() / 448.0f);
  EXPECT_TRUE(std::isnan(nm::fp8_blockwise_scale(kNaN)));
  EXPECT_TRUE(std::isnan(nm::fp8_blockwise_scale(kInf)));
  EXPECT_EQ(nm::fp8_blockwise_multiplier(0.0f), 1.0f);
  EXPECT_EQ(nm::fp8_blockwise_multiplier(448.0f), 1.0f);
  EXPECT_EQ(nm::fp8_blockwise_multiplier(896.0f), 0.5f);
  EXPECT_EQ(nm::fp8_blockwise_multiplier(1.0f), 448.0f);
  EXPECT_EQ(nm::fp8_blockwise_multiplier(std::numeric_limits<float>::denorm_min()), std::ldexp(1.0f, 126));
  EXPECT_TRUE(std::isnan(nm::fp8_blockwise_multiplier(kNaN)));
  EXPECT_TRUE(std::isnan(nm::fp8_blockwise_multiplier(-kInf)));
  EXPECT_EQ(nm::fp8_blockwise_quantize_value(449.0f, 1.0f), 0x7e);
  EXPECT_EQ(nm::fp8_blockwise_quantize_value(-1e30f, 1.0f), 0xfe);
  EXPECT_EQ(nm::fp8_blockwise_quantize_value(1.0f, kNaN), 0x7f);
  EXPECT_EQ(nm::fp8_blockwise_dequantize_value(0x38, 0.5f), 0.5f);
}

TEST(NumericFP8Blockwise, MultiplicationNearTies) {
  // fl(x * multiplier), rounded once to FP32 then to E4M3: checked within a few ulps of E4M3 midpoints.
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> lg(-20.0f, 20.0f);
  std::uniform_int_distribution<int> code(0, 0x7d);
  int64_t checked = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const float s = std::exp2(lg(rng)) * (1.0f + 0.37f * static_cast<float>(trial % 7) / 7.0f);
    const int i = code(rng);
    const float mid = static_cast<float>((e4m3_grid()[i] + e4m3_grid()[i + 1]) / 2);
    float x = mid / s;
    for (int d = 0; d < 4; ++d) x = std::nextafter(x, 0.0f);
    for (int d = -4; d <= 4; ++d, x = std::nextafter(x, 1e30f)) {
      ASSERT_EQ(nm::fp8_blockwise_quantize_value(x, s), e4m3_expected(x * s)) << x << " " << s;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000);
}

namespace {

TEST(NumericFP8Blockwise, FactorsFromSignificandTablesEqualTheDivisionsOnEveryBf16Amax) {
  float mult_table[128], scale_table[128];
  for (int i = 0; i < 128; ++i) {
    mult_table[i] = nm::fp8_blockwise_multiplier_significand(i);
    scale_table[i] = nm::fp8_blockwise_scale_significand(i);
  }
  for (uint32_t b = 0; b < (1u << 16); ++b) {
    const float amax = nm::bits_float(b << 16);
    float scale = 0, mult = 0;
    nm::fp8_blockwise_factors_from_tables(amax, mult_table, scale_table, scale, mult);
    const float want_scale = nm::fp8_blockwise_scale(amax), want_mult = nm::fp8_blockwise_multiplier(amax);
    if (std::isnan(want_scale)) {
      ASSERT_TRUE(std::isnan(scale) && std::isnan(mult)) << std::hex << b;
    } else {
      ASSERT_EQ(nm::float_bits(scale), nm::float_bits(want_scale)) << std::hex << b;
      ASSERT_EQ(nm::float_bits(mult), nm::float_bits(want_mult)) << std::hex << b;
    }
  }
}

}  // namespace
