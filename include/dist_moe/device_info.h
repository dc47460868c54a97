// Facts about the GPUs visible to this process, read from the device (never hard-coded).
#pragma once

#include <string>
#include <vector>

namespace dist_moe {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int major = 0, minor = 0;        // compute capability
  int num_sms = 0;
  long long global_memory_bytes = 0;
  int l2_cache_bytes = 0;
  int max_smem_per_block_optin = 0;  // bytes a kernel may request after cudaFuncSetAttribute
  bool is_sm90() const { return major == 9 && minor == 0; }
};

struct DeviceQuery {
  std::vector<DeviceInfo> devices;
  std::string error;  // why no device is visible (empty when the query succeeded)
};

// Never throws: a machine without a GPU or driver gives an empty list and a reason.
DeviceQuery query_devices();

}  // namespace dist_moe
