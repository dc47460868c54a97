// Routing patterns for the communication tests (CPU routing-table tests and multi-GPU tests).
// Every pattern is a deterministic function of its seed, so all ranks of a multi-GPU test build
// the same global problem and each can compute the global oracle.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace dist_moe::testing {

enum class RoutingPattern {
  kUniform,     // K distinct experts per token, uniform
  kZipf,        // K distinct experts per token, popularity ~ 1/(e+1)^1.2 (skewed, hot experts)
  kOneExpert,   // every token's k=0 route goes to one expert; the other k distinct, uniform
  kMasked,      // uniform, then ~30% of routes and every 7th token fully set to -1
  kPaddedRank,  // uniform, except the last rank whose routes are all -1 (a fully padded rank)
};

inline const char* to_string(RoutingPattern p) {
  switch (p) {
    case RoutingPattern::kUniform: return "uniform";
    case RoutingPattern::kZipf: return "zipf";
    case RoutingPattern::kOneExpert: return "one_expert";
    case RoutingPattern::kMasked: return "masked";
    default: return "padded_rank";
  }
}

inline const std::vector<RoutingPattern>& all_routing_patterns() {
  static const std::vector<RoutingPattern> v = {RoutingPattern::kUniform, RoutingPattern::kZipf,
                                                RoutingPattern::kOneExpert, RoutingPattern::kMasked,
                                                RoutingPattern::kPaddedRank};
  return v;
}

// ids[r] holds rank r's T*K ids (token-major), values in [-1, E). Needs K <= E.
inline std::vector<std::vector<int32_t>> make_routing_ids(RoutingPattern pattern, int world, int64_t tokens, int top_k,
                                                          int num_experts, uint64_t seed) {
  if (top_k > num_experts) throw std::invalid_argument("make_routing_ids: top_k exceeds num_experts");
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 12345u);
  std::vector<double> cdf(static_cast<size_t>(num_experts));
  double acc = 0.0;
  for (int e = 0; e < num_experts; ++e) {
    acc += pattern == RoutingPattern::kZipf ? 1.0 / std::pow(e + 1.0, 1.2) : 1.0;
    cdf[static_cast<size_t>(e)] = acc;
  }
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto draw = [&]() {
    const double u = unit(rng) * acc;
    const auto it = std::lower_bound(cdf.begin(), cdf.end(), u);
    return static_cast<int32_t>(std::min<int64_t>(it - cdf.begin(), num_experts - 1));
  };
  const int32_t hot = static_cast<int32_t>(seed % static_cast<uint64_t>(num_experts));
  std::vector<std::vector<int32_t>> ids(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    auto& v = ids[static_cast<size_t>(r)];
    v.assign(static_cast<size_t>(tokens * top_k), -1);
    for (int64_t t = 0; t < tokens; ++t) {
      int32_t* row = v.data() + t * top_k;
      int k0 = 0;
      if (pattern == RoutingPattern::kOneExpert) row[k0++] = hot;
      for (int k = k0; k < top_k; ++k) {
        int32_t e;
        do {
          e = draw();
        } while (std::find(row, row + k, e) != row + k);
        row[k] = e;
      }
      if (pattern == RoutingPattern::kMasked) {
        if (t % 7 == 3) {
          std::fill(row, row + top_k, -1);
        } else {
          for (int k = 0; k < top_k; ++k)
            if (unit(rng) < 0.3) row[k] = -1;
        }
      }
      if (pattern == RoutingPattern::kPaddedRank && r == world - 1) std::fill(row, row + top_k, -1);
    }
  }
  return ids;
}

}  // namespace dist_moe::testing
