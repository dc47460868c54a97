// Helpers of the CPU oracle tests' naive models (test_reference_forward.cpp,
// test_reference_backward.cpp): the oracle's documented conventions written out independently.
#pragma once

#include <cstdint>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "reference/oracle.h"
#include "test_helpers.h"

namespace naive {

namespace num = dist_moe::numeric;
using dist_moe::reference::Quantization;

inline std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

inline float bf16(float v) { return num::round_bf16(v); }

// Dot product, products and sum in double, ascending index (the oracle's documented convention).
inline double dot(const float* a, const float* b, int64_t n, int64_t stride_b = 1) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * static_cast<double>(b[i * stride_b]);
  return s;
}

// Whether a row of the oracle's buffers holds exactly the bits of the naive model's row.
inline bool row_bits_equal(const float* a, const std::vector<float>& b) {
  for (std::size_t i = 0; i < b.size(); ++i)
    if (test_helpers::to_bits(a[i]) != test_helpers::to_bits(b[i])) return false;
  return true;
}

// Quantize-dequantize one activation row with numeric.cuh directly.
inline std::vector<float> qdq_row(const std::vector<float>& x, Quantization q) {
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<float> y(x.size());
  std::vector<uint8_t> data(x.size() + 1);
  if (q == Quantization::kNone) return x;
  if (q == Quantization::kMXFP8) {
    std::vector<uint8_t> s(at((n + 31) / 32));
    num::mxfp8_quantize_rows(x.data(), 1, n, data.data(), s.data());
    num::mxfp8_dequantize_rows(data.data(), s.data(), 1, n, y.data());
  } else if (q == Quantization::kFP8Blockwise) {
    std::vector<float> s(at((n + 127) / 128));
    num::fp8_blockwise_quantize_act(x.data(), 1, n, data.data(), s.data());
    num::fp8_blockwise_dequantize_act(data.data(), s.data(), 1, n, y.data());
  } else {
    std::vector<uint8_t> s(at((n + 15) / 16));
    float inv = 0;
    num::nvfp4_quantize_activation(x.data(), 1, n, data.data(), s.data(), &inv);
    num::nvfp4_dequantize_activation(data.data(), s.data(), &inv, 1, n, y.data());
  }
  return y;
}

}  // namespace naive
