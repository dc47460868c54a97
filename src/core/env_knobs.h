// Every tuning and debugging switch Dist-MoE reads from the environment, in one registry with one
// prefix (DMOE_). None is part of the API: each is a diagnostic or an A/B switch for measurements.
// docs/architecture.md ("Environment knobs") lists the same table; tests/cpu/test_env_knobs.cpp
// checks that it does, and that no source file outside src/core/env_knobs.cpp calls getenv.
#pragma once

#include <cstdint>
#include <vector>

namespace dist_moe::core {

struct EnvKnob {
  const char* name;    // DMOE_...
  const char* values;  // what it accepts
  const char* effect;  // what it changes
};

// The registry, in the order of the documented table.
const std::vector<EnvKnob>& env_knobs();

// The value of a registered knob, nullptr when unset or empty. An unregistered name is a bug:
// throws dist_moe::Error (kInternal).
const char* env_get(const char* name);
// Set, non-empty and not starting with '0'.
bool env_flag(const char* name);
// The integer value (strtoll), or `fallback` when unset or empty.
int64_t env_int64_or(const char* name, int64_t fallback);

}  // namespace dist_moe::core
