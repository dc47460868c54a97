#include "dist_moe/workloads.h"

#include "dist_moe/error.h"

namespace dist_moe {

const std::vector<Workload>& reference_workloads() {
  static const std::vector<Workload> workloads = {
      {"dsv3_prefill", 4096, 7168, 2048, 256, 8},
      {"qwen3_30b", 8192, 2048, 768, 128, 8},
      {"mixtral", 4096, 4096, 14336, 8, 2},
      {"dsv3_decode", 128, 7168, 2048, 256, 8},
  };
  return workloads;
}

const Workload& find_workload(const std::string& name) {
  std::string known;
  for (const auto& w : reference_workloads()) {
    if (w.name == name) return w;
    known += (known.empty() ? "" : ", ") + w.name;
  }
  detail::fail(ErrorCode::kInvalidValue, "unknown shape '", name, "' (known: ", known, ")");
}

}  // namespace dist_moe
