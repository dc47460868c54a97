// Return-code checks for CUDA runtime, CUDA driver and NCCL calls. Each failure throws
// dist_moe::Error with the call's text, the library's error string, and file:line.
//
// Header for .cu/.cpp files that talk to CUDA; the host-only core never includes it.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "dist_moe/driver_api.h"
#include "dist_moe/error.h"

namespace dist_moe::detail {
inline std::string cuda_message(cudaError_t e, const char* expr) {
  return std::string(expr) + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}
inline std::string driver_message(CUresult r, const char* expr) {
  return std::string(expr) + " failed: " + driver_error_name(r) + " (" + driver_error_text(r) + ")";
}
inline std::string nccl_message(ncclResult_t r, const char* expr) {
  return std::string(expr) + " failed: " + ncclGetErrorString(r) + " (" + ncclGetLastError(nullptr) + ")";
}
}  // namespace dist_moe::detail

#define DMOE_CUDA_CHECK(expr)                                                              \
  do {                                                                                     \
    cudaError_t dmoe_e_ = (expr);                                                          \
    if (dmoe_e_ != cudaSuccess)                                                            \
      ::dist_moe::detail::fail_at(::dist_moe::ErrorCode::kCuda, __FILE__, __LINE__,        \
                                  ::dist_moe::detail::cuda_message(dmoe_e_, #expr));       \
  } while (0)

// After a kernel launch: catches bad launch configurations at once (asynchronous faults
// surface at the next synchronizing call).
#define DMOE_CUDA_CHECK_LAUNCH() DMOE_CUDA_CHECK(cudaGetLastError())

#define DMOE_CU_CHECK(expr)                                                                \
  do {                                                                                     \
    CUresult dmoe_r_ = (expr);                                                             \
    if (dmoe_r_ != CUDA_SUCCESS)                                                           \
      ::dist_moe::detail::fail_at(::dist_moe::ErrorCode::kDriver, __FILE__, __LINE__,      \
                                  ::dist_moe::detail::driver_message(dmoe_r_, #expr));     \
  } while (0)

#define DMOE_NCCL_CHECK(expr)                                                              \
  do {                                                                                     \
    ncclResult_t dmoe_n_ = (expr);                                                         \
    if (dmoe_n_ != ncclSuccess && dmoe_n_ != ncclInProgress)                               \
      ::dist_moe::detail::fail_at(::dist_moe::ErrorCode::kNccl, __FILE__, __LINE__,        \
                                  ::dist_moe::detail::nccl_message(dmoe_n_, #expr));       \
  } while (0)
