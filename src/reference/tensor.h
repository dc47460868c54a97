// A minimal dense row-major tensor for the CPU oracle.
//
// `Tensor<float>` holds what the GPU pipeline stores: BF16 tensors are kept as floats whose values
// are exactly BF16-representable (compare them with the device's BF16 bits through
// numeric::float_to_bf16), FP32 tensors as plain floats. `Tensor<double>` is used by the exact
// (no rounding) model that the finite-difference tests differentiate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/error.h"

namespace dist_moe::reference {

template <class Real>
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<Real> data;

  Tensor() = default;
  explicit Tensor(std::vector<int64_t> shape_in, Real fill = Real(0))
      : shape(std::move(shape_in)), data(element_count(shape), fill) {}

  static std::size_t element_count(const std::vector<int64_t>& s) {
    std::size_t n = 1;
    for (int64_t d : s) {
      DMOE_CHECK_ARG(d >= 0, "tensor dimension must be >= 0, got ", d);
      n *= static_cast<std::size_t>(d);
    }
    return n;
  }

  int64_t numel() const { return static_cast<int64_t>(data.size()); }
  int64_t dims() const { return static_cast<int64_t>(shape.size()); }
  int64_t size(int64_t d) const { return shape.at(static_cast<std::size_t>(d)); }
  // Leading dimension and the number of elements behind one index of it.
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  int64_t row_size() const {
    int64_t n = 1;
    for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
    return n;
  }
  Real* row(int64_t i) { return data.data() + i * row_size(); }
  const Real* row(int64_t i) const { return data.data() + i * row_size(); }

  Real& operator()(int64_t i, int64_t j) { return data[static_cast<std::size_t>(i * shape[1] + j)]; }
  const Real& operator()(int64_t i, int64_t j) const {
    return data[static_cast<std::size_t>(i * shape[1] + j)];
  }
  Real& operator()(int64_t i, int64_t j, int64_t k) {
    return data[static_cast<std::size_t>((i * shape[1] + j) * shape[2] + k)];
  }
  const Real& operator()(int64_t i, int64_t j, int64_t k) const {
    return data[static_cast<std::size_t>((i * shape[1] + j) * shape[2] + k)];
  }

  bool empty() const { return data.empty(); }
};

using TensorF = Tensor<float>;
using TensorD = Tensor<double>;

// Element-wise conversion (float -> double is exact; double -> float rounds to nearest).
template <class To, class From>
Tensor<To> tensor_cast(const Tensor<From>& t) {
  Tensor<To> out;
  out.shape = t.shape;
  out.data.resize(t.data.size());
  for (std::size_t i = 0; i < t.data.size(); ++i) out.data[i] = static_cast<To>(t.data[i]);
  return out;
}

// BF16 bits of a float tensor (round-to-nearest-even; exact for the oracle's BF16 tensors), e.g.
// to upload oracle inputs to the GPU; and back, e.g. to compare a downloaded BF16 buffer.
inline std::vector<uint16_t> to_bf16_bits(const Tensor<float>& t) {
  std::vector<uint16_t> out(t.data.size());
  for (std::size_t i = 0; i < t.data.size(); ++i) out[i] = numeric::float_to_bf16(t.data[i]).bits;
  return out;
}
inline Tensor<float> from_bf16_bits(std::vector<int64_t> shape, const uint16_t* bits) {
  Tensor<float> out(std::move(shape));
  for (std::size_t i = 0; i < out.data.size(); ++i) out.data[i] = numeric::bf16_to_float(numeric::bf16_t{bits[i]});
  return out;
}

}  // namespace dist_moe::reference
