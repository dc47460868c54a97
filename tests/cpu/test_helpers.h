// Helpers shared by the CPU test files, each written once: FP32 bit patterns and sweeps, the
// format definitions the numeric tests check encoders against (independent of numeric.cuh),
// dist_moe::Error expectations, and the Config / RandomProblemSpec builders.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "dist_moe/config.h"
#include "dist_moe/error.h"
#include "reference/oracle.h"

namespace test_helpers {

// ---- FP32 bit patterns --------------------------------------------------------------------------

inline float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline uint32_t to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline const float kInf = std::numeric_limits<float>::infinity();
inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

// Every FP32 bit pattern (both signs, every exponent, NaNs): the `last` of a whole-space sweep.
inline constexpr uint64_t kAllFp32Patterns = uint64_t{1} << 32;

// Calls check(x) for every `step`-th FP32 bit pattern in [first, last). Stops at the first fatal
// failure, as an ASSERT written directly in the loop would, so a broken encoder reports once.
template <class Check>
void sweep_fp32_patterns(uint64_t first, uint64_t last, uint32_t step, Check&& check) {
  for (uint64_t u = first; u < last; u += step) {
    check(from_bits(static_cast<uint32_t>(u)));
    if (::testing::Test::HasFatalFailure()) return;
  }
}

inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- format definitions -------------------------------------------------------------------------

// Of the neighbouring codes lo and lo + 1, whose values bracket ax, the nearer; on a tie the even
// one. All values are exact in double, so the midpoint comparison is exact.
inline int64_t nearest_even_of_two(double ax, double lo_value, double hi_value, int64_t lo) {
  const double twice = 2.0 * ax, mid2 = lo_value + hi_value;
  if (twice < mid2) return lo;
  if (twice > mid2) return lo + 1;
  return lo % 2 == 0 ? lo : lo + 1;
}

// Code of the grid value nearest to ax >= 0 (grid ascending from 0, index = code), ties to the
// even code, satfinite.
inline int nearest_even_code(const std::vector<double>& grid, double ax) {
  if (ax >= grid.back()) return static_cast<int>(grid.size()) - 1;
  const int hi = static_cast<int>(std::upper_bound(grid.begin(), grid.end(), ax) - grid.begin());
  return static_cast<int>(nearest_even_of_two(ax, grid[hi - 1], grid[hi], hi - 1));
}

// Value of an E4M3 code from the format definition (OCP FP8: bias 7, subnormals, S.1111.111 NaN).
inline double e4m3_definition(int code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag = e == 0 ? std::ldexp(m, -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// The 127 non-negative finite E4M3 values, index = code 0x00..0x7E (monotone by construction).
inline const std::vector<double>& e4m3_grid() {
  static const std::vector<double> g = [] {
    std::vector<double> v;
    for (int c = 0; c <= 0x7e; ++c) v.push_back(e4m3_definition(c));
    return v;
  }();
  return g;
}

// Expected E4M3 encoding: nearest grid value, ties to the even code, satfinite, NaN -> 0x7F.
inline uint8_t e4m3_expected(double x) {
  if (std::isnan(x)) return 0x7f;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  return static_cast<uint8_t>(sign | nearest_even_code(e4m3_grid(), std::fabs(x)));
}

// The eight magnitudes of the OCP FP4 E2M1 format, index = code (reference section 4.1).
inline const std::vector<double>& e2m1_grid() {
  static const std::vector<double> g = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  return g;
}

inline double e2m1_definition(int code) { return (code & 8 ? -1.0 : 1.0) * e2m1_grid()[code & 7]; }

// Expected E2M1 encoding; NaN -> +MAXNORM as CUDA's cvt emulation does.
inline uint8_t e2m1_expected(float x) {
  if (std::isnan(x)) return 0x7;
  const uint8_t sign = std::signbit(x) ? 0x8 : 0x0;
  return static_cast<uint8_t>(sign | nearest_even_code(e2m1_grid(), std::fabs(static_cast<double>(x))));
}

// The MXFP8 scale byte from its instruction definition (reference 4.2): t = fl(amax * fl(1/448)),
// then the smallest power of two >= t, clamped to [2^-127, 2^127]. The ceiling is taken in double.
inline int rceil_expected(float amax) {
  if (!std::isfinite(amax)) return 0xff;
  const float t = std::fabs(amax) * (1.0f / 448.0f);  // one FP32 multiply
  if (static_cast<double>(t) <= std::ldexp(1.0, -127)) return 0;
  int x;
  const double f = std::frexp(static_cast<double>(t), &x);  // t = f * 2^x, f in [0.5, 1)
  return std::min(f == 0.5 ? x - 1 : x, 127) + 127;
}

// ---- errors -------------------------------------------------------------------------------------

// Expects fn to throw dist_moe::Error of `code` whose message contains every fragment.
inline void expect_error(const std::function<void()>& fn, dist_moe::ErrorCode code,
                         std::initializer_list<std::string> fragments) {
  try {
    fn();
  } catch (const dist_moe::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    for (const std::string& f : fragments)
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << "missing '" << f << "' in: " << e.what();
    return;
  }
  ADD_FAILURE() << "no dist_moe::Error thrown";
}

// ---- problem builders ---------------------------------------------------------------------------

// A Config of the given sizes; every other field keeps its default.
inline dist_moe::Config make_config(int64_t T, int64_t D, int64_t F, int64_t K, int64_t E, int64_t layers) {
  dist_moe::Config c;
  c.max_num_local_input_tokens = T;
  c.hidden_dim = D;
  c.intermediate_dim = F;
  c.top_k = K;
  c.num_experts = E;
  c.max_moe_layers_per_activation_slot = layers;
  return c;
}

// A random oracle problem of the given sizes and seed; routing, padding and ranges keep their
// defaults for the caller to set.
inline dist_moe::reference::RandomProblemSpec make_spec(int64_t R, int64_t T, int64_t D, int64_t F, int64_t K,
                                                        int64_t E, uint64_t seed) {
  dist_moe::reference::RandomProblemSpec s;
  s.num_ranks = R;
  s.tokens_per_rank = T;
  s.hidden_dim = D;
  s.intermediate_dim = F;
  s.top_k = K;
  s.num_experts = E;
  s.seed = seed;
  return s;
}

// Spreads every rank's x over binades: x(t, d) times 2^-(3 * ((d / 32 + g / 32) % 4)), g the global
// token (exact on BF16 values). The 1x32 / 32x1 blocks of a 128-feature row block or a 128-token
// column block then sit up to 9 binades apart, so their values reach E4M3's subnormal grid at the
// shared scale -- where the MXFP8 training rules (Mxfp8TrainingOperands) part.
inline void spread_x_binades(dist_moe::reference::Problem& p) {
  int64_t g0 = 0;
  for (auto& x : p.x_TD) {
    for (int64_t t = 0; t < x.size(0); ++t)
      for (int64_t d = 0; d < x.size(1); ++d)
        x(t, d) = std::ldexp(x(t, d), -3 * static_cast<int>((d / 32 + (g0 + t) / 32) % 4));
    g0 += x.size(0);
  }
}

// Plain SwiGLU, or clamped at `limit` (0.5: small enough that h1 crosses it often).
inline dist_moe::reference::SwigluParams swiglu_of(bool clamped, double limit = 0.5) {
  dist_moe::reference::SwigluParams s;
  if (clamped) {
    s.activation = dist_moe::Activation::kSwiGLUClamped;
    s.limit = limit;
  }
  return s;
}

}  // namespace test_helpers
