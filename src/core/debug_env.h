// Debugging switches read from the environment (not part of the API; docs/pipeline.md, "Ordering
// checks").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dist_moe::core {

// After pipeline stage `stage` ("*": every stage), this rank runs a spin kernel of `ns` nanoseconds.
struct StageDelay {
  std::string stage;
  int64_t ns = 0;
};

// DMOE_DEBUG_STAGE_DELAY's syntax: "rank:stage:us[,rank:stage:us...]", us >= 0 (fractions allowed).
// Returns the entries of `rank`, in order; nullptr or "" -> none. A malformed entry throws
// dist_moe::Error (kInvalidValue) naming it.
std::vector<StageDelay> parse_stage_delays(const char* text, int rank);

}  // namespace dist_moe::core
