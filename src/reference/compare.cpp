#include "reference/compare.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

namespace dist_moe::reference {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace

std::string Comparison::summary() const {
  std::ostringstream os;
  os << (passed ? "pass" : "FAIL") << ": n=" << count;
  if (!shapes_match) os << " shape mismatch";
  os << " bit_mismatches=" << bit_mismatches << " (first " << first_bit_mismatch << ")"
     << " tol_failures=" << tolerance_failures << " max_abs=" << max_abs << " (at " << worst_index << ")"
     << " relL2=" << rel_l2 << " cos=" << cosine;
  return os.str();
}

Comparison compare(const float* actual, const TensorF& expected, const Tolerance& tol) {
  Comparison c;
  c.count = expected.numel();
  double diff2 = 0, e2 = 0, a2 = 0, ae = 0;
  for (int64_t i = 0; i < c.count; ++i) {
    const float a = actual[i];
    const float e = expected.data[static_cast<std::size_t>(i)];
    if (bits(a) != bits(e)) {
      if (c.first_bit_mismatch < 0) c.first_bit_mismatch = i;
      ++c.bit_mismatches;
    }
    const double da = a, de = e;
    const double d = std::abs(da - de);
    const bool both_nan = std::isnan(da) && std::isnan(de);
    if (!both_nan && !(d <= tol.atol + tol.rtol * std::abs(de))) ++c.tolerance_failures;
    if (!(d <= c.max_abs) && !both_nan) {
      c.max_abs = std::isnan(d) ? INFINITY : d;
      c.worst_index = i;
    }
    diff2 += (da - de) * (da - de);
    e2 += de * de;
    a2 += da * da;
    ae += da * de;
  }
  c.rel_l2 = std::sqrt(diff2) / std::max(std::sqrt(e2), 1e-12);
  c.cosine = (a2 == 0 && e2 == 0) ? 1.0 : ae / std::max(std::sqrt(a2) * std::sqrt(e2), 1e-300);
  c.passed = c.tolerance_failures == 0 && (tol.max_rel_l2 < 0 || c.rel_l2 <= tol.max_rel_l2) &&
             (tol.min_cosine < -1 || c.cosine >= tol.min_cosine);
  return c;
}

Comparison compare(const TensorF& actual, const TensorF& expected, const Tolerance& tol) {
  if (actual.shape != expected.shape) {
    Comparison c;
    c.count = expected.numel();
    c.shapes_match = false;
    c.passed = false;
    return c;
  }
  return compare(actual.data.data(), expected, tol);
}

bool bitwise_equal(const TensorF& a, const TensorF& b) {
  if (a.shape != b.shape) return false;
  for (std::size_t i = 0; i < a.data.size(); ++i) {
    if (bits(a.data[i]) != bits(b.data[i])) return false;
  }
  return true;
}

}  // namespace dist_moe::reference
