// Comparing a computed tensor (a GPU result copied back, or another oracle path) with the oracle.
//
// Metrics follow upstream's test conventions (upstream_api_and_tests.md §3): element-wise
// |a - e| <= atol + rtol * |e|, relL2 = ||a - e|| / max(||e||, 1e-12), cosine of the flattened
// tensors; all computed in double. Bitwise comparison treats +0 and -0 as different and any two
// NaNs with identical bits as equal.
#pragma once

#include <cstdint>
#include <string>

#include "reference/tensor.h"

namespace dist_moe::reference {

struct Tolerance {
  double rtol = 0.0;
  double atol = 0.0;
  double max_rel_l2 = -1.0;  // < 0: not checked
  double min_cosine = -2.0;  // < -1: not checked
};

// Upstream's tolerances (BF16 output / gradients; block-scaled table as (rtol, atol, relL2, cos)).
inline constexpr Tolerance kBf16OutputTolerance{2e-2, 2e-2, 5e-3, -2.0};
inline constexpr Tolerance kBf16GradTolerance{3e-2, 3e-2, 1e-2, 0.995};
inline constexpr Tolerance kMxfp8ForwardTolerance{0.05, 0.002, 0.075, 0.9975};
inline constexpr Tolerance kMxfp8GradTolerance{0.05, 0.04, 0.075, 0.9975};
inline constexpr Tolerance kMxfp8WgradTolerance{0.05, 0.025, 0.075, 0.9975};
inline constexpr Tolerance kNvfp4ForwardTolerance{0.05, 0.007, 0.29, 0.955};

struct Comparison {
  int64_t count = 0;
  int64_t bit_mismatches = 0;       // elements whose float bits differ
  int64_t first_bit_mismatch = -1;  // flat index, -1 if none
  int64_t tolerance_failures = 0;   // elements outside atol + rtol*|e| (needs a Tolerance)
  int64_t worst_index = -1;         // flat index of the largest |a - e|
  double max_abs = 0.0;
  double rel_l2 = 0.0;
  double cosine = 1.0;
  bool shapes_match = true;
  bool passed = true;  // shapes match and every check of the Tolerance holds

  std::string summary() const;  // one line for test failure messages
};

// `actual` points at expected.numel() floats laid out like `expected`.
Comparison compare(const float* actual, const TensorF& expected, const Tolerance& tol = {});
Comparison compare(const TensorF& actual, const TensorF& expected, const Tolerance& tol = {});
bool bitwise_equal(const TensorF& a, const TensorF& b);

}  // namespace dist_moe::reference
