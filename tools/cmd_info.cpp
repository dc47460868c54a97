// dist-moe info: devices, the NCCL in use, build facts.
#include <cstdio>

#include "cli_args.h"
#include "commands.h"
#include "dist_moe/version.h"
#if DIST_MOE_HAS_CUDA
#include "dist_moe/device_info.h"
#include "dist_moe/nccl_version.h"
#endif

namespace dist_moe::cli {

int cmd_info(const std::vector<std::string>& argv) {
  Args args(argv, {}, {});  // no options: anything else is an error
  std::printf("dist-moe %s\n", DIST_MOE_VERSION_STRING);
#if DIST_MOE_HAS_CUDA
  std::printf("build: CUDA kernels for sm_90a\n");
  // Before the devices: the NCCL line needs no GPU, and a wrong NCCL is the first thing to rule out.
  const NcclRuntimeInfo nccl = nccl_runtime_info();
  const std::string problem = nccl_version_problem(nccl.built_code, nccl.loaded_code, nccl.minimum_code);
  std::printf("NCCL: built with %s (%s), loaded %s from %s: %s\n", nccl_version_string(nccl.built_code).c_str(),
              nccl.built_library.c_str(), nccl_version_string(nccl.loaded_code).c_str(),
              nccl.loaded_path.empty() ? "an unknown file" : nccl.loaded_path.c_str(),
              problem.empty() ? ("ok (needs " + nccl_version_string(nccl.minimum_code) + "+)").c_str()
                              : ("UNUSABLE, " + problem).c_str());
  const DeviceQuery q = query_devices();
  if (q.devices.empty()) std::printf("devices: none (%s)\n", q.error.c_str());
  for (const auto& d : q.devices)
    std::printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB%s\n", d.ordinal, d.name.c_str(), d.major, d.minor,
                d.num_sms, d.global_memory_bytes / double(1 << 30), d.l2_cache_bytes >> 20,
                d.is_sm90() ? "" : " (not SM90: Dist-MoE kernels will not run)");
#else
  std::printf("build: host-only (configured with DIST_MOE_ENABLE_CUDA=OFF)\n");
  std::printf("NCCL: none (host-only build: no communication)\n");
#endif
  return 0;
}

}  // namespace dist_moe::cli
