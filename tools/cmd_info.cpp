// dist-moe info: devices and build facts.
#include <cstdio>

#include "commands.h"
#include "dist_moe/version.h"
#if DIST_MOE_HAS_CUDA
#include "dist_moe/device_info.h"
#endif

namespace dist_moe::cli {

int cmd_info(const std::vector<std::string>& argv) {
  std::printf("dist-moe %s\n", DIST_MOE_VERSION_STRING);
#if DIST_MOE_HAS_CUDA
  std::printf("build: CUDA kernels for sm_90a\n");
  const DeviceQuery q = query_devices();
  if (q.devices.empty()) std::printf("devices: none (%s)\n", q.error.c_str());
  for (const auto& d : q.devices)
    std::printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB%s\n", d.ordinal, d.name.c_str(), d.major, d.minor,
                d.num_sms, d.global_memory_bytes / double(1 << 30), d.l2_cache_bytes >> 20,
                d.is_sm90() ? "" : " (not SM90: Dist-MoE kernels will not run)");
#else
  std::printf("build: host-only (configured with DIST_MOE_ENABLE_CUDA=OFF)\n");
#endif
  (void)argv;
  return 0;
}

}  // namespace dist_moe::cli
