// CUDA driver entry points, looked up at run time through cudaGetDriverEntryPoint.
//
// Nothing in Dist-MoE links libcuda directly: a binary that links the library must start on a
// machine without a GPU driver (CI runs the CLI there). Call sites use `driver().cuMemCreate(...)`
// and check the result with DMOE_CU_CHECK.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

namespace dist_moe {

struct DriverApi {
  PFN_cuGetErrorName_v6000 cuGetErrorName = nullptr;
  PFN_cuGetErrorString_v6000 cuGetErrorString = nullptr;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 cuMemGetAllocationGranularity = nullptr;
  PFN_cuMemAddressReserve_v10020 cuMemAddressReserve = nullptr;
  PFN_cuMemAddressFree_v10020 cuMemAddressFree = nullptr;
  PFN_cuMemCreate_v10020 cuMemCreate = nullptr;
  PFN_cuMemRelease_v10020 cuMemRelease = nullptr;
  PFN_cuMemMap_v10020 cuMemMap = nullptr;
  PFN_cuMemUnmap_v10020 cuMemUnmap = nullptr;
  PFN_cuMemSetAccess_v10020 cuMemSetAccess = nullptr;
  PFN_cuTensorMapEncodeTiled_v12000 cuTensorMapEncodeTiled = nullptr;
};

// Resolved once (thread-safe); throws dist_moe::Error (kDriver) when the driver is missing.
const DriverApi& driver();

// A driver result's name ("CUDA_ERROR_X") and text; never throw (used while reporting errors).
const char* driver_error_name(CUresult r);
const char* driver_error_text(CUresult r);
// The same through the given entry points (a component handed a DriverApi, e.g. a test's).
const char* driver_error_name(const DriverApi& d, CUresult r);
const char* driver_error_text(const DriverApi& d, CUresult r);

}  // namespace dist_moe
