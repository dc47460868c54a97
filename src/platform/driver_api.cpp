#include "dist_moe/driver_api.h"

#include <cuda_runtime.h>

#include <mutex>
#include <string>

#include "dist_moe/error.h"

namespace dist_moe {
namespace {

template <class Fn>
void resolve(const char* symbol, int version, Fn* out) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status{};
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &status);
  if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == nullptr) {
    cudaGetLastError();
    throw Error(ErrorCode::kDriver, std::string("CUDA driver entry point ") + symbol + " is unavailable: " +
                                        cudaGetErrorString(e));
  }
  *out = reinterpret_cast<Fn>(fn);
}

}  // namespace

const DriverApi& driver() {
  static DriverApi api;
  static std::once_flag once;
  static std::string failure;
  std::call_once(once, [] {
    try {
      resolve("cuGetErrorName", 6000, &api.cuGetErrorName);
      resolve("cuGetErrorString", 6000, &api.cuGetErrorString);
      resolve("cuDeviceGetAttribute", 2000, &api.cuDeviceGetAttribute);
      resolve("cuMemGetAllocationGranularity", 10020, &api.cuMemGetAllocationGranularity);
      resolve("cuMemAddressReserve", 10020, &api.cuMemAddressReserve);
      resolve("cuMemAddressFree", 10020, &api.cuMemAddressFree);
      resolve("cuMemCreate", 10020, &api.cuMemCreate);
      resolve("cuMemRelease", 10020, &api.cuMemRelease);
      resolve("cuMemMap", 10020, &api.cuMemMap);
      resolve("cuMemUnmap", 10020, &api.cuMemUnmap);
      resolve("cuMemSetAccess", 10020, &api.cuMemSetAccess);
      resolve("cuTensorMapEncodeTiled", 12000, &api.cuTensorMapEncodeTiled);
    } catch (const Error& e) {
      failure = e.what();
    }
  });
  if (!failure.empty()) throw Error(ErrorCode::kDriver, failure);
  return api;
}

const char* driver_error_name(const DriverApi& d, CUresult r) {
  const char* s = nullptr;
  if (d.cuGetErrorName == nullptr || d.cuGetErrorName(r, &s) != CUDA_SUCCESS) s = nullptr;
  return s ? s : "CUDA_ERROR_UNKNOWN_CODE";
}

const char* driver_error_text(const DriverApi& d, CUresult r) {
  const char* s = nullptr;
  if (d.cuGetErrorString == nullptr || d.cuGetErrorString(r, &s) != CUDA_SUCCESS) s = nullptr;
  return s ? s : "unknown driver error";
}

const char* driver_error_name(CUresult r) {
  try {
    return driver_error_name(driver(), r);
  } catch (...) {
    return "CUDA_ERROR_UNKNOWN_CODE";
  }
}

const char* driver_error_text(CUresult r) {
  try {
    return driver_error_text(driver(), r);
  } catch (...) {
    return "unknown driver error";
  }
}

}  // namespace dist_moe
