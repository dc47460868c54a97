// Helpers of the gtest GPU suites: SM90 detection with a printed skip reason, byte comparison of
// downloads, plus device_buffer.h (RAII device buffers, BF16 conversion of oracle tensors, output
// poisoning).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dist_moe/error.h"
#include "testing/device_buffer.h"

namespace dist_moe::testing {

// The byte quantizer tests fill outputs with first, so that a byte a kernel did not write fails.
constexpr uint8_t kPoison = 0xA5;

// Empty when an SM90 device is usable, else why not.
inline std::string sm90_unavailable_reason() {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return std::string("no CUDA device: ") + cudaGetErrorString(e);
  }
  if (count == 0) return "no CUDA device";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "cudaGetDeviceProperties failed";
  if (p.major != 9 || p.minor != 0) return std::string(p.name) + " is not SM90";
  return {};
}

#define DMOE_REQUIRE_SM90()                                                         \
  do {                                                                              \
    const std::string dmoe_why_ = ::dist_moe::testing::sm90_unavailable_reason();   \
    if (!dmoe_why_.empty()) GTEST_SKIP() << "needs an SM90 GPU: " << dmoe_why_;     \
  } while (0)

// The first byte at which two downloads differ (-1: none; 0 when the sizes differ).
template <class T>
int64_t first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return 0;
  const auto* pa = reinterpret_cast<const uint8_t*>(a.data());
  const auto* pb = reinterpret_cast<const uint8_t*>(b.data());
  for (size_t i = 0; i < a.size() * sizeof(T); ++i)
    if (pa[i] != pb[i]) return static_cast<int64_t>(i);
  return -1;
}

// f() must throw dist_moe::Error with code kInvalidValue and a message containing `fragment` (an
// argument error raised before any launch).
template <class F>
void expect_invalid_argument(F&& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidValue) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

}  // namespace dist_moe::testing
