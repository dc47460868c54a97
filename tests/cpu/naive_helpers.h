// Helpers of the CPU oracle tests' naive models (test_reference_forward.cpp,
// test_reference_backward.cpp): the oracle's documented conventions written out independently.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
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

// The Hopper MXFP8 operands (perf_history G149-G151), independently of the oracle's numeric helpers'
// shared path: the MXFP8 values y, then each block (index lists into y: 128 rows of a column, 128
// columns of a row, a weight's 128x128) re-rounded at the largest of its elements' E8M0 codes, code(i),
// with ldexp.
inline void reround_at_shared(std::vector<float>& y, const std::vector<std::vector<int64_t>>& blocks,
                              const std::function<int(int64_t)>& code) {
  for (const std::vector<int64_t>& block : blocks) {
    int top = 0;
    for (int64_t i : block) top = std::max(top, code(i));
    for (int64_t i : block) y[at(i)] = std::ldexp(num::round_e4m3(std::ldexp(y[at(i)], 127 - top)), top - 127);
  }
}

// One MXFP8 row (1x32 blocks) at shared scales per 128 columns: the training layer's FPROP / DGRAD row.
inline std::vector<float> mxfp8_shared_row(const std::vector<float>& x) {
  std::vector<float> y = qdq_row(x, Quantization::kMXFP8);
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<std::vector<int64_t>> blocks;
  for (int64_t c0 = 0; c0 < n; c0 += 128) {
    blocks.emplace_back();
    for (int64_t c = c0; c < std::min(n, c0 + 128); ++c) blocks.back().push_back(c);
  }
  reround_at_shared(y, blocks, [&](int64_t i) {
    float amax = 0;
    for (int64_t c = i / 32 * 32; c < std::min(n, i / 32 * 32 + 32); ++c) amax = num::amax_nan(amax, x[at(c)]);
    return static_cast<int>(num::e8m0_rceil_from_amax(amax));
  });
  return y;
}

// One expert's [rows, cols] MXFP8 weight (32x32 tiles) at shared scales per 128x128 block: the
// prepared training weight (G151).
inline std::vector<float> mxfp8_shared_weight(const float* w, int64_t rows, int64_t cols) {
  std::vector<uint8_t> data(at(rows * cols)), s(at(((rows + 31) / 32) * ((cols + 31) / 32)));
  std::vector<float> y(at(rows * cols));
  num::mxfp8_quantize_tiles(w, rows, cols, data.data(), s.data());
  num::mxfp8_dequantize_tiles(data.data(), s.data(), rows, cols, y.data());
  std::vector<std::vector<int64_t>> blocks;
  for (int64_t r0 = 0; r0 < rows; r0 += 128)
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      blocks.emplace_back();
      for (int64_t r = r0; r < std::min(rows, r0 + 128); ++r)
        for (int64_t c = c0; c < std::min(cols, c0 + 128); ++c) blocks.back().push_back(r * cols + c);
    }
  const int64_t nbc = (cols + 31) / 32;
  reround_at_shared(y, blocks, [&](int64_t i) { return static_cast<int>(s[at((i / cols / 32) * nbc + i % cols / 32)]); });
  return y;
}

}  // namespace naive
