// Helpers of the CPU oracle tests' naive models (test_reference_forward.cpp,
// test_reference_backward.cpp; the shared-scale MXFP8 blocks also test_numeric_mxfp8.cpp): the
// oracle's documented conventions written out independently.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
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

// The shared-scale blocks of a row-major [rows, cols] matrix as index lists: 128 columns of a row, or
// 128 rows of a column (a partial last block covers what exists).
inline std::vector<std::vector<int64_t>> row_blocks_of_128(int64_t rows, int64_t cols) {
  std::vector<std::vector<int64_t>> blocks;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      blocks.emplace_back();
      for (int64_t c = c0; c < std::min(cols, c0 + 128); ++c) blocks.back().push_back(r * cols + c);
    }
  return blocks;
}
inline std::vector<std::vector<int64_t>> col_blocks_of_128(int64_t rows, int64_t cols) {
  std::vector<std::vector<int64_t>> blocks;
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r0 = 0; r0 < rows; r0 += 128) {
      blocks.emplace_back();
      for (int64_t r = r0; r < std::min(rows, r0 + 128); ++r) blocks.back().push_back(r * cols + c);
    }
  return blocks;
}

// One MXFP8 row (1x32 blocks) at shared scales per 128 columns: the training layer's FPROP / DGRAD row.
inline std::vector<float> mxfp8_shared_row(const std::vector<float>& x) {
  std::vector<float> y = qdq_row(x, Quantization::kMXFP8);
  const int64_t n = static_cast<int64_t>(x.size());
  reround_at_shared(y, row_blocks_of_128(1, n), [&](int64_t i) {
    float amax = 0;
    for (int64_t c = i / 32 * 32; c < std::min(n, i / 32 * 32 + 32); ++c) amax = num::amax_nan(amax, x[at(c)]);
    return static_cast<int>(num::e8m0_rceil_from_amax(amax));
  });
  return y;
}

// MXFP8 quantized once at a shared scale per block (perf_history G152), from the format definitions of
// test_helpers.h rather than numeric.cuh: a block's (index lists into x) E8M0 code M is RCEIL of its
// amax (0xFF when an element is not finite), each element's E4M3 code the exact x * 2^(127 - M)
// rounded to nearest even (0x7F in a 0xFF block). The codes into q; returns each block's M.
inline std::vector<int> mxfp8_once_codes(const std::vector<float>& x, const std::vector<std::vector<int64_t>>& blocks,
                                         std::vector<uint8_t>& q) {
  q.assign(x.size(), 0);
  std::vector<int> codes;
  for (const std::vector<int64_t>& block : blocks) {
    float amax = 0;
    for (int64_t i : block) amax = std::isfinite(x[at(i)]) ? std::max(amax, std::fabs(x[at(i)])) : test_helpers::kInf;
    const int m = test_helpers::rceil_expected(amax);
    for (int64_t i : block)
      q[at(i)] = m == 0xff ? 0x7f : test_helpers::e4m3_expected(std::ldexp(static_cast<double>(x[at(i)]), 127 - m));
    codes.push_back(m);
  }
  return codes;
}

// The FP32 scale 2^(M - 127) of a shared code M; NaN for 0xFF.
inline float mxfp8_once_scale(int m) {
  return m == 0xff ? test_helpers::kNaN : static_cast<float>(std::ldexp(1.0, m - 127));
}

// The values x holds once quantized per block: e4m3 * 2^(M - 127), NaN in a 0xFF block.
inline std::vector<float> mxfp8_once_values(const std::vector<float>& x,
                                            const std::vector<std::vector<int64_t>>& blocks) {
  std::vector<uint8_t> q;
  const std::vector<int> codes = mxfp8_once_codes(x, blocks, q);
  std::vector<float> y(x.size());
  for (std::size_t b = 0; b < blocks.size(); ++b)
    for (int64_t i : blocks[b])
      y[at(i)] = static_cast<float>(test_helpers::e4m3_definition(q[at(i)]) * mxfp8_once_scale(codes[b]));
  return y;
}

// One row quantized once at shared scales per 128 columns: the G152 training layer's FPROP / DGRAD row.
inline std::vector<float> mxfp8_shared_once_row(const std::vector<float>& x) {
  return mxfp8_once_values(x, row_blocks_of_128(1, static_cast<int64_t>(x.size())));
}

// A row of 128 where quantizing once at the shared scale and re-rounding the exact 1x32 blocks part,
// at M = 127 (448 in column 0). Block 1's code is 119 (1.75 in column 32); at that scale 47 * 2^-14
// (column 33) rounds up to 0.75 * 2^-8 = 1.5 * 2^-9 and -81 * 2^-14 (column 34) down to -1.25 * 2^-8
// = -2.5 * 2^-9: midpoints of E4M3's subnormal grid at M, which the second rounding takes to the even
// codes where one rounding goes the other way. Every other element agrees: the midpoint 3 * 2^-10
// itself (column 35), the subnormal 5 * 2^-9 (column 36), random values of blocks 0 and 3 (codes 127,
// 126: 224 in column 96) and of block 1 in E4M3's normal range at M, and block 2's (code 107: 448 *
// 2^-20 in column 64), all below half the subnormal step at M (+-0 under both rules).
struct Mxfp8MidpointRow {
  std::vector<float> x;
  int64_t columns[2] = {33, 34};                                // where the rules part
  uint8_t once[2] = {0x01, 0x83}, rerounded[2] = {0x02, 0x82};  // their E4M3 codes at M = 127 there
};
inline Mxfp8MidpointRow mxfp8_midpoint_row(uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto random_in = [&](double lo, double hi) {  // |v| in [lo, hi], either sign
    const float v = static_cast<float>(lo + (hi - lo) * u(rng));
    return u(rng) < 0.5 ? -v : v;
  };
  Mxfp8MidpointRow row;
  row.x.resize(128);
  for (int64_t c = 0; c < 128; ++c) {
    const int64_t block = c / 32;
    row.x[at(c)] = block == 0 ? random_in(0.0, 448.0)
                   : block == 1 ? random_in(std::ldexp(1.0, -6), 1.75)
                   : block == 2 ? random_in(0.0, std::ldexp(448.0, -20))
                                : random_in(std::ldexp(1.0, -6), 224.0);
  }
  row.x[0] = 448.0f;
  row.x[32] = 1.75f;
  row.x[33] = std::ldexp(47.0f, -14);
  row.x[34] = -std::ldexp(81.0f, -14);
  row.x[35] = std::ldexp(3.0f, -10);
  row.x[36] = std::ldexp(5.0f, -9);
  row.x[64] = std::ldexp(448.0f, -20);
  row.x[96] = 224.0f;
  return row;
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
