// NVFP4 (E2M1 data, 16-blocks, E4M3 block scales, FP32 global scale) for weights and
// activations: a reference written here from reference section 4.4 (FP32 steps in the stated
// order, enumerated E4M3/E2M1 grids for rounding, its own packing), crafted blocks, error bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "dist_moe/device/gemm/nvfp4_operands.cuh"
#include "dist_moe/device/numeric/numeric.cuh"
#include "test_helpers.h"

namespace nm = dist_moe::numeric;
namespace gemm = dist_moe::gemm;

namespace {

using test_helpers::cdiv;
using test_helpers::e2m1_expected;
using test_helpers::e4m3_expected;
using test_helpers::e4m3_grid;
using test_helpers::kInf;
using test_helpers::kNaN;

// Code values as FP32, the type the reference's FP32 steps multiply and divide by (exact).
float e4m3_value(uint8_t c) { return static_cast<float>(test_helpers::e4m3_definition(c)); }
float e2m1_value(uint8_t c) { return static_cast<float>(test_helpers::e2m1_definition(c)); }

// Block scale: clamp to [2^-9, 448] (NaN stays NaN), then E4M3 RNE.
uint8_t ref_block_scale(float v) {
  if (std::isnan(v)) return 0x7f;
  v = std::min(std::max(v, std::ldexp(1.0f, -9)), 448.0f);
  return e4m3_expected(v);
}

float ref_amax(const float* x, int64_t n) {
  float a = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(x[i])) return kNaN;
    a = std::max(a, std::fabs(x[i]));
  }
  return a;
}

struct Packed {
  std::vector<uint8_t> q;       // [rows, ceil(cols/2)]
  std::vector<uint8_t> scales;  // [rows, ceil(cols/16)]
  std::vector<float> global;    // weights: {gs, 1/gs}; activations: token_scale_inv per row
};

void put_nibble(std::vector<uint8_t>& q, int64_t cols, int64_t r, int64_t c, uint8_t nib) {
  q[r * cdiv(cols, 2) + c / 2] |= static_cast<uint8_t>(c % 2 == 0 ? nib : nib << 4);
}
uint8_t get_nibble(const std::vector<uint8_t>& q, int64_t cols, int64_t r, int64_t c) {
  const uint8_t b = q[r * cdiv(cols, 2) + c / 2];
  return c % 2 == 0 ? (b & 0xf) : (b >> 4);
}

// Weights, reference 4.4: gs = 2688 * fl(1/max(amax,1e-12)); s = e4m3(clamp(fl(fl(bamax*gs)/6)));
// q = e2m1(fl(fl(x*gs)/s)). Non-finite amax -> NaN gs (our documented rule).
Packed ref_weight(const std::vector<float>& w, int64_t rows, int64_t cols) {
  Packed p{std::vector<uint8_t>(rows * cdiv(cols, 2), 0), std::vector<uint8_t>(rows * cdiv(cols, 16)), {}};
  float amax = 0.0f;
  bool bad = false;
  for (float v : w) {
    if (!std::isfinite(v)) bad = true;
    else amax = std::max(amax, std::fabs(v));
  }
  const float recip = 1.0f / std::max(amax, 1e-12f);
  const float gs = bad ? kNaN : 2688.0f * recip;
  p.global = {gs, 1.0f / gs};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < cdiv(cols, 16); ++b) {
      const int64_t c0 = b * 16, c1 = std::min(cols, c0 + 16);
      const float bamax = ref_amax(&w[r * cols + c0], c1 - c0);
      const float prod = bamax * gs;
      const uint8_t s = ref_block_scale(prod / 6.0f);
      p.scales[r * cdiv(cols, 16) + b] = s;
      for (int64_t c = c0; c < c1; ++c) {
        const float xg = w[r * cols + c] * gs;
        put_nibble(p.q, cols, r, c, e2m1_expected(xg / e4m3_value(s)));
      }
    }
  return p;
}

// Activations, reference 4.4: row_scale = 2688 * fl(1/max(amax,1e-8)); inv = fl(1/row_scale);
// s = e4m3(clamp(fl(fl(bamax*row_scale) * fl(1/6)))); mult = fl(row_scale/s); q = e2m1(fl(x*mult)).
Packed ref_activation(const std::vector<float>& x, int64_t rows, int64_t cols) {
  Packed p{std::vector<uint8_t>(rows * cdiv(cols, 2), 0), std::vector<uint8_t>(rows * cdiv(cols, 16)),
           std::vector<float>(rows)};
  const float inv6 = 1.0f / 6.0f;
  for (int64_t r = 0; r < rows; ++r) {
    bool bad = false;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c];
      if (!std::isfinite(v)) bad = true;
      else amax = std::max(amax, std::fabs(v));
    }
    const float recip = 1.0f / std::max(amax, 1e-8f);
    const float row_scale = bad ? kNaN : 2688.0f * recip;
    p.global[r] = 1.0f / row_scale;
    for (int64_t b = 0; b < cdiv(cols, 16); ++b) {
      const int64_t c0 = b * 16, c1 = std::min(cols, c0 + 16);
      const float bamax = ref_amax(&x[r * cols + c0], c1 - c0);
      const float t = bamax * row_scale;
      const uint8_t s = ref_block_scale(t * inv6);
      p.scales[r * cdiv(cols, 16) + b] = s;
      const float mult = row_scale / e4m3_value(s);
      for (int64_t c = c0; c < c1; ++c) {
        const float xm = x[r * cols + c] * mult;
        put_nibble(p.q, cols, r, c, e2m1_expected(xm));
      }
    }
  }
  return p;
}

std::vector<float> random_rows(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(-6, 6);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cdiv(cols, 16); ++b) {
      const int e = ed(rng);  // blocks of different magnitudes within a row
      for (int64_t c = b * 16; c < std::min(cols, b * 16 + 16); ++c) x[r * cols + c] = std::ldexp(nd(rng), e);
    }
  }
  return x;
}

struct WeightOut {
  std::vector<uint8_t> q, s;
  float gs = 0, gs_inv = 0;
  std::vector<float> y;
};
WeightOut run_weight(const std::vector<float>& w, int64_t rows, int64_t cols) {
  WeightOut o;
  o.q.assign(rows * cdiv(cols, 2), 0xcc);
  o.s.assign(rows * cdiv(cols, 16), 0xcc);
  o.y.assign(rows * cols, 0.0f);
  nm::nvfp4_quantize_weight(w.data(), rows, cols, o.q.data(), o.s.data(), &o.gs, &o.gs_inv);
  nm::nvfp4_dequantize_weight(o.q.data(), o.s.data(), o.gs, rows, cols, o.y.data());
  return o;
}
struct ActOut {
  std::vector<uint8_t> q, s;
  std::vector<float> inv, y;
};
ActOut run_act(const std::vector<float>& x, int64_t rows, int64_t cols) {
  ActOut o;
  o.q.assign(rows * cdiv(cols, 2), 0xcc);
  o.s.assign(rows * cdiv(cols, 16), 0xcc);
  o.inv.assign(rows, 0.0f);
  o.y.assign(rows * cols, 0.0f);
  nm::nvfp4_quantize_activation(x.data(), rows, cols, o.q.data(), o.s.data(), o.inv.data());
  nm::nvfp4_dequantize_activation(o.q.data(), o.s.data(), o.inv.data(), rows, cols, o.y.data());
  return o;
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

}  // namespace

TEST(NumericNVFP4, WeightMatchesReferenceBitwise) {
  for (auto shape : {std::pair<int64_t, int64_t>{64, 256}, {5, 50}, {3, 7}}) {
    const int64_t rows = shape.first, cols = shape.second;
    const std::vector<float> w = random_rows(rows, cols, static_cast<uint32_t>(rows + 100 * cols));
    const WeightOut o = run_weight(w, rows, cols);
    const Packed ref = ref_weight(w, rows, cols);
    EXPECT_EQ(o.gs, ref.global[0]);
    EXPECT_EQ(o.gs_inv, ref.global[1]);
    EXPECT_EQ(o.s, ref.scales);
    EXPECT_EQ(o.q, ref.q);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t nib = get_nibble(ref.q, cols, r, c);
        const float want = e2m1_value(nib) * e4m3_value(ref.scales[r * cdiv(cols, 16) + c / 16]) / ref.global[0];
        ASSERT_EQ(o.y[r * cols + c], want) << r << "," << c;
      }
  }
}

TEST(NumericNVFP4, ActivationMatchesReferenceBitwise) {
  for (auto shape : {std::pair<int64_t, int64_t>{32, 512}, {5, 50}, {2, 9}}) {
    const int64_t rows = shape.first, cols = shape.second;
    const std::vector<float> x = random_rows(rows, cols, static_cast<uint32_t>(7 * rows + cols));
    const ActOut o = run_act(x, rows, cols);
    const Packed ref = ref_activation(x, rows, cols);
    EXPECT_EQ(o.inv, ref.global);
    EXPECT_EQ(o.s, ref.scales);
    EXPECT_EQ(o.q, ref.q);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t nib = get_nibble(ref.q, cols, r, c);
        const float want = e2m1_value(nib) * e4m3_value(ref.scales[r * cdiv(cols, 16) + c / 16]) * ref.global[r];
        ASSERT_EQ(o.y[r * cols + c], want) << r << "," << c;
      }
  }
}

TEST(NumericNVFP4, ErrorBoundsOnRandomData) {
  // Per element, in units u = s / gs (weights) or s * inv (activations): E2M1 RNE with
  // satfinite to 6 errs by at most 1 unit (half the widest gap, 4..6), or by |x|/u - 6 when the
  // E4M3 rounding of s pushed |x|/u past 6. Aggregate: relative L2 error below 12%.
  const int64_t rows = 48, cols = 320;
  const std::vector<float> x = random_rows(rows, cols, 77);
  const WeightOut w = run_weight(x, rows, cols);
  const ActOut a = run_act(x, rows, cols);
  double num_w = 0, num_a = 0, den = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x[r * cols + c];
      const double sw = nm::e4m3_to_float(w.s[r * (cols / 16) + c / 16]);
      const double uw = sw / w.gs;
      const double ua = static_cast<double>(nm::e4m3_to_float(a.s[r * (cols / 16) + c / 16])) * a.inv[r];
      const double ew = std::fabs(w.y[r * cols + c] - v), ea = std::fabs(a.y[r * cols + c] - v);
      ASSERT_LE(ew, std::max(uw, std::fabs(v) - 6 * uw) * (1 + 1e-6)) << r << "," << c;
      ASSERT_LE(ea, std::max(ua, std::fabs(v) - 6 * ua) * (1 + 1e-6)) << r << "," << c;
      num_w += ew * ew;
      num_a += ea * ea;
      den += v * v;
    }
  EXPECT_LT(std::sqrt(num_w / den), 0.12);
  EXPECT_LT(std::sqrt(num_a / den), 0.12);
}

TEST(NumericNVFP4, CraftedAllZero) {
  const std::vector<float> z(2 * 32, 0.0f);
  const WeightOut w = run_weight(z, 2, 32);
  EXPECT_EQ(w.gs, 2688.0f * (1.0f / 1e-12f));  // amax floor 1e-12
  const ActOut a = run_act(z, 2, 32);
  for (uint8_t s : w.s) EXPECT_EQ(s, 0x01);  // floor 2^-9, never 0 -> no 0/0
  for (uint8_t s : a.s) EXPECT_EQ(s, 0x01);
  for (uint8_t q : w.q) EXPECT_EQ(q, 0x00);
  for (uint8_t q : a.q) EXPECT_EQ(q, 0x00);
  for (float y : w.y) EXPECT_EQ(y, 0.0f);
  for (float y : a.y) EXPECT_EQ(y, 0.0f);
  EXPECT_EQ(a.inv[0], 1.0f / (2688.0f * (1.0f / 1e-8f)));
}

TEST(NumericNVFP4, CraftedExpertMaxMapsToSix) {
  // The element equal to the expert amax gets s = 448 and code 6, and comes back nearly exactly.
  std::vector<float> w = random_rows(4, 64, 3);
  w[2 * 64 + 37] = -1000.0f;
  const WeightOut o = run_weight(w, 4, 64);
  EXPECT_EQ(o.s[2 * 4 + 2], 0x7e);
  EXPECT_EQ(get_nibble(o.q, 64, 2, 37), 0xf);
  EXPECT_NEAR(o.y[2 * 64 + 37], -1000.0f, 1000.0f * 1e-6f);
  std::vector<float> x = w;
  const ActOut a = run_act(x, 4, 64);
  EXPECT_EQ(a.s[2 * 4 + 2], 0x7e);
  EXPECT_EQ(get_nibble(a.q, 64, 2, 37), 0xf);
  EXPECT_NEAR(a.y[2 * 64 + 37], -1000.0f, 1000.0f * 1e-6f);
}

TEST(NumericNVFP4, CraftedOneHugeValue) {
  std::vector<float> w(2 * 48, 1.0f);
  w[17] = 3.0e38f;
  const WeightOut o = run_weight(w, 2, 48);
  EXPECT_NEAR(o.y[17], 3.0e38f, 3.0e38f * 1e-6f);
  EXPECT_TRUE(std::isfinite(o.gs) && o.gs > 0.0f);
  for (int i = 0; i < 2 * 48; ++i) {
    EXPECT_TRUE(std::isfinite(o.y[i])) << i;
    if (i / 16 != 1) {
      EXPECT_EQ(o.s[i / 16], 0x01) << i;  // floor scale: far below 2^-9 * 6
    }
  }
  EXPECT_EQ(o.q, ref_weight(w, 2, 48).q);
  const ActOut a = run_act(w, 2, 48);
  EXPECT_NEAR(a.y[17], 3.0e38f, 3.0e38f * 1e-6f);
  EXPECT_EQ(a.q, ref_activation(w, 2, 48).q);
}

TEST(NumericNVFP4, CraftedSubnormalOnly) {
  std::vector<float> w(32);
  for (int i = 0; i < 32; ++i) w[i] = std::ldexp(static_cast<float>(i - 16), -140);
  const WeightOut o = run_weight(w, 1, 32);
  const ActOut a = run_act(w, 1, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_TRUE(std::isfinite(o.y[i]) && std::isfinite(a.y[i])) << i;
    EXPECT_LE(std::fabs(o.y[i] - w[i]), std::ldexp(16.0f, -140)) << i;  // below the amax floors: 0
    EXPECT_LE(std::fabs(a.y[i] - w[i]), std::ldexp(16.0f, -140)) << i;
  }
  EXPECT_EQ(o.q, ref_weight(w, 1, 32).q);
  EXPECT_EQ(a.q, ref_activation(w, 1, 32).q);
}

TEST(NumericNVFP4, CraftedNaNOrInfPoisonsExpertOrRow) {
  for (float bad : {kNaN, kInf, -kInf}) {
    std::vector<float> x = random_rows(3, 48, 9);
    x[1 * 48 + 20] = bad;
    // Weights: the whole expert.
    const WeightOut w = run_weight(x, 3, 48);
    EXPECT_TRUE(std::isnan(w.gs));
    for (uint8_t s : w.s) EXPECT_EQ(s, 0x7f);
    for (float y : w.y) EXPECT_TRUE(std::isnan(y));
    // Activations: only row 1; rows 0 and 2 equal quantizing them on their own.
    const ActOut a = run_act(x, 3, 48);
    EXPECT_TRUE(std::isnan(a.inv[1]));
    for (int c = 0; c < 48; ++c) EXPECT_TRUE(std::isnan(a.y[48 + c])) << c;
    for (int r : {0, 2}) {
      const std::vector<float> row(x.begin() + r * 48, x.begin() + r * 48 + 48);
      const ActOut single = run_act(row, 1, 48);
      for (int c = 0; c < 48; ++c) ASSERT_EQ(a.y[r * 48 + c], single.y[c]) << r << "," << c;
    }
    const Packed ref = ref_activation(x, 3, 48);
    EXPECT_EQ(a.s, ref.scales);
    for (int r = 0; r < 3; ++r) EXPECT_TRUE(same_float(a.inv[r], ref.global[r]));
  }
}

TEST(NumericNVFP4, ScaleClampEndsAndOrder) {
  const float gs = nm::nvfp4_weight_global_scale(10.0f);
  EXPECT_EQ(gs, 2688.0f * (1.0f / 10.0f));
  EXPECT_EQ(nm::nvfp4_weight_block_scale(0.0f, gs), 0x01);       // low clamp 2^-9
  EXPECT_EQ(nm::nvfp4_weight_block_scale(10.0f, gs), 0x7e);      // ~448
  EXPECT_EQ(nm::nvfp4_weight_block_scale(1e6f, gs), 0x7e);       // high clamp 448
  EXPECT_EQ(nm::nvfp4_weight_block_scale(kNaN, gs), 0x7f);
  EXPECT_EQ(nm::nvfp4_activation_block_scale(0.0f, 1.0f), 0x01);
  EXPECT_EQ(nm::nvfp4_activation_block_scale(6.0f * 448.0f * 4.0f, 1.0f), 0x7e);
  EXPECT_EQ(nm::nvfp4_activation_row_scale(0.0f), 2688.0f * (1.0f / 1e-8f));
  EXPECT_TRUE(std::isnan(nm::nvfp4_activation_row_scale(kInf)));
  EXPECT_TRUE(std::isnan(nm::nvfp4_weight_global_scale(kNaN)));
  // E2M1 saturation inside the quantizer: x * multiplier beyond 6 -> code 7.
  EXPECT_EQ(nm::nvfp4_activation_quantize_value(7.0f, 1.0f), 0x7);
  EXPECT_EQ(nm::nvfp4_activation_quantize_value(-100.0f, 1.0f), 0xf);
  // Ties at the E4M3 scale: (block_amax * row_scale) * fl(1/6) vs / 6 can differ; the activation
  // path must use the multiply. 6 * 1.0625 = 6.375 is exact, so t * fl(1/6) lands within an ulp
  // of the E4M3 midpoint 1.0625 between 1 and 1.125; both paths are checked against the reference.
  for (float bamax : {6.375f, 6.375f * 2, 6.375f * 128, 9.375f, 11.0f}) {
    EXPECT_EQ(nm::nvfp4_activation_block_scale(bamax, 1.0f), ref_block_scale(bamax * (1.0f / 6.0f))) << bamax;
    EXPECT_EQ(nm::nvfp4_weight_block_scale(bamax, 1.0f), ref_block_scale(bamax / 6.0f)) << bamax;
  }
}

// Inputs placed within a few ulps of every rounding midpoint, where upstream's warning applies:
// a different order of the FP32 steps (x*(gs/s) instead of (x*gs)/s, "/6" instead of "*fl(1/6)",
// row_scale*(1/s) instead of row_scale/s) flips codes here, so these sweeps pin the order down.
TEST(NumericNVFP4, OperationOrderNearTies) {
  std::mt19937 rng(2024);
  std::uniform_real_distribution<float> lg(-12.0f, 12.0f);
  std::uniform_int_distribution<int> sc(1, 0x7e);
  const float e2m1_mids[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f};
  int64_t checked = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const float g = std::exp2(lg(rng));  // a global / row scale
    const uint8_t s = static_cast<uint8_t>(sc(rng));
    const float sv = e4m3_value(s);
    // E2M1 step, weights: q = e2m1(fl(fl(x*gs)/s)).
    for (float m : e2m1_mids) {
      const float x0 = m * sv / g;
      float x = x0;
      for (int d = 0; d < 4; ++d) x = std::nextafter(x, 0.0f);
      for (int d = -4; d <= 4; ++d, x = std::nextafter(x, 1e30f)) {
        const float xg = x * g;
        ASSERT_EQ(nm::nvfp4_weight_quantize_value(x, g, s), e2m1_expected(xg / sv)) << x << " " << g << " " << int(s);
        // Activations: multiplier = fl(row_scale / s), q = e2m1(fl(x * multiplier)).
        const float mult = g / sv;
        ASSERT_EQ(nm::nvfp4_activation_multiplier(g, s), mult);
        ASSERT_EQ(nm::nvfp4_activation_quantize_value(x, mult), e2m1_expected(x * mult));
        ++checked;
      }
    }
    // E4M3 block-scale step near each E4M3 midpoint M: weights fl(fl(b*gs)/6), activations
    // fl(fl(b*row_scale)*fl(1/6)).
    const int i = sc(rng) % 0x7e;
    const float mid = static_cast<float>((e4m3_grid()[i] + e4m3_grid()[i + 1]) / 2);
    if (mid < std::ldexp(1.0f, -9)) continue;
    float b = mid * 6.0f / g;
    for (int d = 0; d < 4; ++d) b = std::nextafter(b, 0.0f);
    for (int d = -4; d <= 4; ++d, b = std::nextafter(b, 1e30f)) {
      const float prod = b * g;
      ASSERT_EQ(nm::nvfp4_weight_block_scale(b, g), ref_block_scale(prod / 6.0f)) << b << " " << g;
      ASSERT_EQ(nm::nvfp4_activation_block_scale(b, g), ref_block_scale(prod * (1.0f / 6.0f))) << b << " " << g;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100000);
}

TEST(NumericNVFP4, GlobalScalesAreReciprocalThenMultiply) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> lg(-30.0f, 30.0f);
  for (int i = 0; i < 100000; ++i) {
    const float amax = std::exp2(lg(rng));
    const float r = 1.0f / std::max(amax, 1e-12f);
    ASSERT_EQ(nm::nvfp4_weight_global_scale(amax), 2688.0f * r) << amax;
    const float ra = 1.0f / std::max(amax, 1e-8f);
    const float row_scale = 2688.0f * ra;
    ASSERT_EQ(nm::nvfp4_activation_row_scale(amax), row_scale) << amax;
    ASSERT_EQ(nm::nvfp4_activation_token_scale_inv(row_scale), 1.0f / row_scale);
  }
}

TEST(NumericNVFP4, PerBlockFactorsFromSignificandTablesEqualTheDivisions) {
  // The GPU quantizers' tables: fl(1 / s) from fl(1 / (1 + i/8)) for every finite positive E4M3
  // scale, and the activation multiplier fl(row_scale / s) from fl(row_scale / (1 + i/8)) for row
  // scales across [2^-117, 2^38) (the range nvfp4_activation_row_scale gives; the GPU test takes
  // every significand at the ends), both with an exact exponent step.
  for (int code = 0x01; code <= 0x7e; ++code) {
    const uint8_t s = static_cast<uint8_t>(code);
    const float sf = nm::e4m3_to_float(s);
    const uint32_t i = nm::e4m3_significand_index(sf);
    ASSERT_EQ(nm::float_bits(nm::e4m3_reciprocal_from_table(nm::rcp_rn(nm::e4m3_significand(i)), sf)),
              nm::float_bits(1.0f / sf))
        << code;
  }
  std::mt19937 rng(41);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::vector<float> row_scales = {nm::nvfp4_activation_row_scale(0.0f), nm::nvfp4_activation_row_scale(3.3895314e38f),
                                   std::ldexp(1.0f, -117), std::nextafter(std::ldexp(1.0f, 38), 0.0f)};
  for (int e = -117; e < 38; ++e)
    for (int k = 0; k < 200; ++k) row_scales.push_back(std::ldexp(1.0f + mant(rng) * 0x1p-23f, e));
  for (const float r : row_scales)
    for (int code = 0x01; code <= 0x7e; ++code) {
      const uint8_t s = static_cast<uint8_t>(code);
      ASSERT_EQ(nm::float_bits(nm::nvfp4_activation_multiplier_by_table(r, s)),
                nm::float_bits(nm::nvfp4_activation_multiplier(r, s)))
          << r << " / code " << code;
    }
  // The row scale's extremes are inside the proven range.
  EXPECT_GE(nm::nvfp4_activation_row_scale(3.3895314e38f), std::ldexp(1.0f, -117));
  EXPECT_LT(nm::nvfp4_activation_row_scale(0.0f), std::ldexp(1.0f, 38));
}

TEST(NumericNVFP4, ScaledMagnitudesStayBelowSevenWhereTheBlockScaleIsNormal) {
  // The GPU quantizers leave out the E2M1 clamp at 6 when a block's E4M3 scale is normal
  // (>= 2^-6, code >= 0x08): the largest scaled magnitude of the block, the one of its amax, must
  // then be < 7 (e2m1_magnitude_code_bits_below7's precondition). Every BF16 block amax up to the
  // row (expert) amax, for row amaxes across the BF16 range.
  std::mt19937 rng(43);
  std::uniform_int_distribution<uint32_t> bf16(0x0001, 0x7f7f);
  std::vector<uint32_t> tops = {0x7f7f, 0x3f80, 0x0001, 0x3200, 0x2b8c};  // max, 1, min subnormal, ~1e-8, ~1e-12
  for (int i = 0; i < 300; ++i) tops.push_back(bf16(rng));
  int normal_blocks = 0;
  for (const uint32_t top : tops) {
    const float a = nm::bits_float(top << 16);
    const float row_scale = nm::nvfp4_activation_row_scale(a), gs = nm::nvfp4_weight_global_scale(a);
    for (uint32_t b = 0; b <= top; ++b) {
      const float bamax = nm::bits_float(b << 16);
      const uint8_t sa = nm::nvfp4_activation_block_scale(bamax, row_scale);
      if (sa >= 0x08) {
        ++normal_blocks;
        ASSERT_LT(nm::mul_rn(bamax, nm::nvfp4_activation_multiplier(row_scale, sa)), 7.0f) << a << " " << bamax;
      }
      const uint8_t sw = nm::nvfp4_weight_block_scale(bamax, gs);
      if (sw >= 0x08) {
        ASSERT_LT(nm::div_rn(nm::mul_rn(bamax, gs), nm::e4m3_to_float(sw)), 7.0f) << a << " " << bamax;
      }
    }
  }
  EXPECT_GT(normal_blocks, 100000);
}

TEST(NumericNVFP4, ReciprocalFormsOfTheWeightRulesGiveTheSameCodes) {
  // The GPU quantizer's division-free forms (block scale through fl(1/6), element through the
  // block scale's reciprocal) against the oracle's divisions, over amaxes of every magnitude.
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> ex(-40, 20);
  for (int trial = 0; trial < 200000; ++trial) {
    const float amax = std::ldexp(mant(rng), ex(rng));
    const float gs = nm::nvfp4_weight_global_scale(amax * 1.5f);
    const float bamax = amax * std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    const uint8_t s = nm::nvfp4_weight_block_scale(bamax, gs);
    ASSERT_EQ(nm::nvfp4_weight_block_scale_by_reciprocal(bamax, gs), s) << bamax << " " << gs;
    const float sf = nm::e4m3_to_float(s), sr = nm::rcp_rn(sf);
    ASSERT_EQ(nm::float_bits(sr), nm::float_bits(nm::div_rn(1.0f, sf)));
    for (float x : {bamax, -bamax, bamax * 0.37f, -bamax * 0.81f, bamax * 0.0625f}) {
      ASSERT_EQ(nm::nvfp4_weight_quantize_value_by_reciprocal(x, gs, sf, sr), nm::nvfp4_weight_quantize_value(x, gs, s))
          << x << " " << gs << " " << int(s);
    }
  }
}

namespace {
// The packed token row (upstream's dispatch row): D/2 E2M1 bytes, D/16 E4M3 scales, FP32
// token_scale_inv, padded to 16 bytes -- the geometry the quantizer, the gather, the GEMM and the
// planner all read from nvfp4.cuh.
TEST(Nvfp4PackedRow, Geometry) {
  EXPECT_EQ(nm::nvfp4_packed_row_scales_offset(256), 128);
  EXPECT_EQ(nm::nvfp4_packed_row_token_scale_offset(256), 144);
  EXPECT_EQ(nm::nvfp4_packed_row_bytes(256), 160);     // 148 -> 160
  EXPECT_EQ(nm::nvfp4_packed_row_bytes(7168), 4048);   // dsv3: 3584 + 448 + 4 = 4036 -> 4048
  EXPECT_EQ(nm::nvfp4_packed_row_token_scale_offset(7168) % 4, 0);  // the FP32 is aligned
}
}  // namespace

TEST(NumericNVFP4, PreparedWeightOrderGivesEveryWordsPairsAndBack) {
  // nvfp4_weight_order.cuh: the stored word's four pairs, as the GEMMs extract them, are the FP16
  // pair bits of codes (j, j + 4) of the standard word, and decoding returns the standard word --
  // on every single-bit word, the NaN word, crafted code patterns and random words.
  std::vector<uint32_t> words = {0u, 0xFFFFFFFFu, 0x77777777u, 0x88888888u, 0x01234567u, 0x89ABCDEFu, 0xF0F0F0F0u};
  for (int b = 0; b < 32; ++b) words.push_back(1u << b);
  std::mt19937 rng(61);
  for (int i = 0; i < 200000; ++i) words.push_back(static_cast<uint32_t>(rng()));
  for (const uint32_t u : words) {
    const uint32_t s = nm::nvfp4_weight_word_encode(u);
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = (u >> (4 * j)) & 15u, hi = (u >> (4 * j + 16)) & 15u;
      const uint32_t want = ((lo & 7u) << 9) | ((lo & 8u) << 12) | ((hi & 7u) << 25) | ((hi & 8u) << 28);
      ASSERT_EQ(nm::nvfp4_weight_pair(s, j), want) << std::hex << "word 0x" << u << " pair " << j;
    }
    ASSERT_EQ(nm::nvfp4_weight_word_decode(s), u) << std::hex << u;
  }
  // Byte arrays: little-endian words, in place and back.
  std::vector<uint8_t> q(64), orig;
  for (uint8_t& v : q) v = static_cast<uint8_t>(rng());
  orig = q;
  nm::nvfp4_weight_bytes_encode(q.data(), static_cast<int64_t>(q.size()));
  const uint32_t w0 = orig[0] | orig[1] << 8 | orig[2] << 16 | static_cast<uint32_t>(orig[3]) << 24;
  EXPECT_EQ(q[0] | q[1] << 8 | q[2] << 16 | static_cast<uint32_t>(q[3]) << 24, nm::nvfp4_weight_word_encode(w0));
  nm::nvfp4_weight_bytes_decode(q.data(), static_cast<int64_t>(q.size()));
  EXPECT_EQ(q, orig);
}

TEST(Nvfp4Operands, WeightScalePairSelectorTakesEachPiecesBlock) {
  // The swap-AB consumers (G134): quad thread q holds the 8 scale bytes of blocks 8 (q & 1) .. + 7 of
  // a row and stage, word w = bytes 4w .. 4w + 3; one byte permute with nvfp4_weight_scale_pair_selector
  // (q >> 1) must put piece 2w's block (nvfp4_piece_block) in byte 0 and piece 2w + 1's in byte 1 --
  // the low and high FP16 halves after the E4M3x2 conversion -- over zero bytes 2 and 3. Emulates the
  // byte permute: result byte k is byte (selector nibble k) & 7 of {word, 0}.
  const auto byte_perm = [](uint32_t a, uint32_t b, uint32_t sel) {
    const uint64_t both = static_cast<uint64_t>(b) << 32 | a;
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k) r |= static_cast<uint32_t>((both >> (8 * ((sel >> (4 * k)) & 7u))) & 0xFFu) << (8 * k);
    return r;
  };
  for (int q = 0; q < 4; ++q) {
    uint8_t held[8];  // block index + 1 in each byte: 0 would not tell a zero byte from block 0
    for (int i = 0; i < 8; ++i) held[i] = static_cast<uint8_t>(8 * (q & 1) + i + 1);
    for (int w = 0; w < 2; ++w) {
      const uint32_t word = held[4 * w] | held[4 * w + 1] << 8 | held[4 * w + 2] << 16 |
                            static_cast<uint32_t>(held[4 * w + 3]) << 24;
      const uint32_t r = byte_perm(word, 0u, gemm::nvfp4_weight_scale_pair_selector(q >> 1));
      EXPECT_EQ(r & 0xFFu, static_cast<uint32_t>(gemm::nvfp4_piece_block(q, 2 * w) + 1)) << "q " << q << " word " << w;
      EXPECT_EQ((r >> 8) & 0xFFu, static_cast<uint32_t>(gemm::nvfp4_piece_block(q, 2 * w + 1) + 1)) << "q " << q << " word " << w;
      EXPECT_EQ(r >> 16, 0u) << "q " << q << " word " << w;
    }
  }
}
