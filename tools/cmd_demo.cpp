// dist-moe demo: the quick-start job.
#include <cstdio>

#include "commands.h"
#include "dist_moe/memory_plan.h"
#include "dist_moe/workloads.h"
#if DIST_MOE_HAS_CUDA
#include "dist_moe/device_info.h"
#endif

namespace dist_moe::cli {

int cmd_demo(const std::vector<std::string>& argv) {
  (void)argv;
  const Workload& w = find_workload("dsv3_prefill");
  Config c;
  c.max_num_local_input_tokens = w.tokens;
  c.hidden_dim = w.hidden;
  c.intermediate_dim = w.intermediate;
  c.top_k = w.top_k;
  c.num_experts = w.experts;
  c.max_moe_layers_per_activation_slot = 1;
  std::printf("== 1. memory plan: %s at EP 8 ==\n", w.name.c_str());
  std::fputs(plan_memory(c, 8).explain().c_str(), stdout);
  std::printf("\n== 2. GPU execution ==\n");
#if DIST_MOE_HAS_CUDA
  const DeviceQuery q = query_devices();
  int sm90 = 0;
  for (const auto& d : q.devices) sm90 += d.is_sm90();
  if (sm90 == 0) {
    std::printf("no SM90 GPU visible (%s): execution needs an SM90 GPU (H100/H200).\n",
                q.error.empty() ? "devices are not sm_90" : q.error.c_str());
  } else {
    std::printf("%d SM90 GPU(s) visible. The distributed pipeline is not built yet (see README status).\n", sm90);
  }
#else
  std::printf("host-only build: execution needs an SM90 GPU (H100/H200) and a CUDA build.\n");
#endif
  return 0;
}

}  // namespace dist_moe::cli
