// A buffer address chosen on the device: base + *offset bytes. The device activation planner picks
// the offsets of x_gathered, h1, h2, grad_* inside the activation buffer (no host read), so the
// kernels that read or write them take a DeviceAddress instead of a plain pointer. A nullptr offset
// means 0 (a plain pointer); offsets may be negative (an address outside the buffer).
#pragma once

#include <cstdint>

namespace dist_moe::common {

struct DeviceAddress {
  void* base = nullptr;
  const int64_t* offset = nullptr;

  DeviceAddress() = default;
  DeviceAddress(const void* p) : base(const_cast<void*>(p)) {}  // NOLINT: a plain pointer is an address
  DeviceAddress(void* b, const int64_t* off) : base(b), offset(off) {}
};

#if defined(__CUDACC__)
template <typename T>
__device__ __forceinline__ T* resolve(const DeviceAddress& a) {
  return reinterpret_cast<T*>(static_cast<char*>(a.base) + (a.offset ? *a.offset : 0));
}

// A stage runs when its predicate (an int64 on the device, e.g. need_recompute) equals `when`;
// a nullptr predicate always runs.
__device__ __forceinline__ bool stage_enabled(const int64_t* predicate, bool when) {
  return predicate == nullptr || ((*predicate != 0) == when);
}
#endif

}  // namespace dist_moe::common
