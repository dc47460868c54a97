// The reference workloads of DESIGN.md §8 (per EP rank), shared by the CLI, tests and benchmarks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dist_moe {

struct Workload {
  std::string name;
  int64_t tokens;        // T per rank
  int64_t hidden;        // D
  int64_t intermediate;  // F
  int64_t experts;       // global E
  int64_t top_k;         // K
};

const std::vector<Workload>& reference_workloads();
// Throws kInvalidValue naming the known workloads when `name` is not one of them.
const Workload& find_workload(const std::string& name);

}  // namespace dist_moe
