// Makes a CUDA device current for a scope and restores the caller's device at its end (host
// calls that must run on a context's device whatever the caller has selected).
#pragma once

#include <cuda_runtime.h>

#include "dist_moe/check.h"

namespace dist_moe::platform {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    DMOE_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) DMOE_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }  // never throws: also runs while unwinding
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace dist_moe::platform
