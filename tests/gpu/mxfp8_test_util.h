// MXFP8 operands for the GPU tests: the GPU quantizers' outputs and their values dequantized on
// the host (numeric::mxfp8_dequantize_rows, the oracle's; exact in FP32).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "quant/quantize.h"
#include "testing/device_buffer.h"

namespace dist_moe::testing {

// The values of an MXFP8 row bundle [rows, C] (E8M0 scales [rows, C/32]) on the device.
inline std::vector<float> mxfp8_row_values(const DeviceBuffer<uint8_t>& q, const DeviceBuffer<uint8_t>& scales,
                                           int64_t rows, int64_t C) {
  const std::vector<uint8_t> hq = q.download(), hs = scales.download();
  std::vector<float> v(static_cast<size_t>(rows * C));
  numeric::mxfp8_dequantize_rows(hq.data(), hs.data(), rows, C, v.data());
  return v;
}

// A BF16 weight [E, N, K] quantized in 32x32 tiles: q with its FPROP scale view [E*N, K/32], and
// the transposed copy [E, K, N] with the DGRAD view [E*K, N/32] (what DGRAD reads); at_shared_scales:
// as the training preparation writes it (the tiles at shared scales per 128x128 block, N, K % 128 == 0).
struct Mxfp8TileWeight {
  DeviceBuffer<uint8_t> q, s, q_t, s_dgrad;
  int64_t rows = 0, k = 0;  // E*N, K
  std::vector<float> values() const { return mxfp8_row_values(q, s, rows, k); }  // [E, N, K]
};

inline Mxfp8TileWeight quantize_mxfp8_weight(const std::vector<uint16_t>& bits, int64_t E, int64_t N, int64_t K,
                                             bool at_shared_scales = false) {
  Mxfp8TileWeight o;
  o.rows = E * N;
  o.k = K;
  const DeviceBuffer<uint16_t> d(bits);
  o.q = DeviceBuffer<uint8_t>(static_cast<size_t>(E * N * K));
  o.s = DeviceBuffer<uint8_t>(static_cast<size_t>(E * N * (K / 32)));
  o.q_t = DeviceBuffer<uint8_t>(o.q.size());
  o.s_dgrad = DeviceBuffer<uint8_t>(static_cast<size_t>(E * K * (N / 32)));
  quant::mxfp8_quantize_weight_tiles(d.get(), E, N, K, o.q.get(), o.s.get(), o.q_t.get(), o.s_dgrad.get(), nullptr,
                                     at_shared_scales);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return o;
}

}  // namespace dist_moe::testing
