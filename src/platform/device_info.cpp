#include "dist_moe/device_info.h"

#include <cuda_runtime.h>

namespace dist_moe {

DeviceQuery query_devices() {
  DeviceQuery q;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    q.error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return q;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    if ((e = cudaGetDeviceProperties(&p, i)) != cudaSuccess) {
      q.error = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
      continue;
    }
    DeviceInfo d;
    d.ordinal = i;
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.num_sms = p.multiProcessorCount;
    d.global_memory_bytes = static_cast<long long>(p.totalGlobalMem);
    d.l2_cache_bytes = p.l2CacheSize;
    d.max_smem_per_block_optin = static_cast<int>(p.sharedMemPerBlockOptin);
    q.devices.push_back(d);
  }
  if (count == 0) q.error = "no CUDA device";
  return q;
}

}  // namespace dist_moe
