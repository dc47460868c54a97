// RAII device buffers and BF16 conversion of oracle tensors, shared by the GPU tests (gtest suites
// and the multi-process suites, which do not link gtest).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/bf16.cuh"
#include "reference/tensor.h"

namespace dist_moe::testing {

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : count_(count) {
    if (count) DMOE_CUDA_CHECK(cudaMalloc(&ptr_, count * sizeof(T)));
  }
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size()) { upload(host); }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), count_(o.count_) { o.ptr_ = nullptr; o.count_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_;
      count_ = o.count_;
      o.ptr_ = nullptr;
      o.count_ = 0;
    }
    return *this;
  }

  T* get() const { return ptr_; }
  size_t size() const { return count_; }
  void upload(const std::vector<T>& host) {
    DMOE_ASSERT(host.size() == count_);
    if (count_) DMOE_CUDA_CHECK(cudaMemcpy(ptr_, host.data(), count_ * sizeof(T), cudaMemcpyHostToDevice));
    finish_legacy_stream_work();
  }
  std::vector<T> download() const {
    std::vector<T> host(count_);
    if (count_) DMOE_CUDA_CHECK(cudaMemcpy(host.data(), ptr_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
  // Fill every byte (0xFF makes BF16 and FP32 NaN: an unwritten element cannot pass a check).
  void poison(unsigned char byte = 0xFF) {
    if (count_) DMOE_CUDA_CHECK(cudaMemset(ptr_, byte, count_ * sizeof(T)));
    finish_legacy_stream_work();
  }

 private:
  // cudaMemcpy from pageable memory may return before its DMA lands, and cudaMemset is
  // asynchronous; both run on the legacy stream, which the tests' non-blocking streams do not wait
  // for. Finish them before any kernel can read the buffer.
  static void finish_legacy_stream_work() { DMOE_CUDA_CHECK(cudaDeviceSynchronize()); }

  T* ptr_ = nullptr;
  size_t count_ = 0;
};

// Oracle float tensors hold BF16-representable values; these move them to and from BF16 bits.
inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = numeric::float_to_bf16(v[i]).bits;
  return out;
}

inline std::vector<float> from_bf16_bits(const std::vector<uint16_t>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = numeric::bf16_to_float(numeric::bf16_t{v[i]});
  return out;
}

inline reference::TensorF tensor_from_bf16(const std::vector<uint16_t>& bits, std::vector<int64_t> shape) {
  reference::TensorF t(std::move(shape));
  t.data = from_bf16_bits(bits);
  return t;
}

}  // namespace dist_moe::testing
