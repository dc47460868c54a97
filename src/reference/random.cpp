#include "reference/random.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/error.h"

namespace dist_moe::reference {

uint64_t Rng::next_u64() {
  // SplitMix64 (Steele, Lea, Flood 2014).
  state_ += 0x9e3779b97f4a7c15ull;
  uint64_t z = state_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

int64_t Rng::below(int64_t n) {
  DMOE_CHECK_ARG(n >= 1, "Rng::below needs n >= 1");
  return static_cast<int64_t>(next_u64() % static_cast<uint64_t>(n));
}

float Rng::bf16_uniform(double lo, double hi) {
  return numeric::round_bf16(static_cast<float>(uniform(lo, hi)));
}

namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

// Picks up to K distinct experts from `allowed` (in pick order).
std::vector<int32_t> pick_experts(Rng& rng, const std::vector<int32_t>& allowed, const std::vector<double>& weights,
                                  int64_t K) {
  std::vector<int32_t> pool = allowed;
  std::vector<double> w = weights;
  std::vector<int32_t> picks;
  while (static_cast<int64_t>(picks.size()) < K && !pool.empty()) {
    double total = 0;
    for (double x : w) total += x;
    double u = rng.uniform() * total;
    std::size_t i = 0;
    for (; i + 1 < pool.size(); ++i) {
      if (u < w[i]) break;
      u -= w[i];
    }
    picks.push_back(pool[i]);
    pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(i));
    w.erase(w.begin() + static_cast<std::ptrdiff_t>(i));
  }
  return picks;
}

}  // namespace

Problem make_random_problem(const RandomProblemSpec& spec) {
  Problem p;
  p.num_ranks = spec.num_ranks;
  p.hidden_dim = spec.hidden_dim;
  p.intermediate_dim = spec.intermediate_dim;
  p.top_k = spec.top_k;
  p.num_experts = spec.num_experts;
  p.swiglu = spec.swiglu;
  DMOE_CHECK_ARG(spec.num_ranks >= 1 && spec.tokens_per_rank >= 1 && spec.hidden_dim >= 1 &&
                     spec.intermediate_dim >= 1 && spec.top_k >= 1 && spec.num_experts >= 1 &&
                     spec.num_experts % spec.num_ranks == 0,
                 "make_random_problem: invalid dimensions");
  const int64_t R = spec.num_ranks, T = spec.tokens_per_rank, D = spec.hidden_dim, F = spec.intermediate_dim,
                K = spec.top_k, E = spec.num_experts;
  Rng rng(spec.seed);

  // Weights first (independent of the token split).
  const double a13 = spec.weight_range > 0 ? spec.weight_range : 1.0 / std::sqrt(static_cast<double>(D));
  const double a2 = spec.weight_range > 0 ? spec.weight_range : 1.0 / std::sqrt(static_cast<double>(F));
  p.w13_EFD = TensorF({E, 2 * F, D});
  for (float& v : p.w13_EFD.data) v = rng.bf16_uniform(-a13, a13);
  p.w2_EDF = TensorF({E, D, F});
  for (float& v : p.w2_EDF.data) v = rng.bf16_uniform(-a2, a2);

  std::vector<int32_t> allowed = spec.allowed_experts;
  if (allowed.empty()) {
    for (int32_t e = 0; e < E; ++e) allowed.push_back(e);
  }
  for (int32_t e : allowed) DMOE_CHECK_ARG(e >= 0 && e < E, "allowed expert ", e, " out of [0, ", E, ")");
  std::vector<double> weights(allowed.size(), 1.0);
  if (spec.routing == RoutingPattern::kSkewed) {
    for (std::size_t i = 0; i < weights.size(); ++i) weights[i] = 1.0 / static_cast<double>((i + 1) * (i + 1));
  }

  for (int64_t r = 0; r < R; ++r) {
    TensorF x({T, D}), s({T, K});
    std::vector<int32_t> ids(at(T * K), -1);
    for (int64_t t = 0; t < T; ++t) {
      const int64_t global_t = r * T + t;
      for (int64_t d = 0; d < D; ++d) x(t, d) = rng.bf16_uniform(-spec.x_range, spec.x_range);
      const std::vector<int32_t> picks = pick_experts(rng, allowed, weights, K);
      const bool all_padding = std::find(spec.all_padding_tokens.begin(), spec.all_padding_tokens.end(), global_t) !=
                               spec.all_padding_tokens.end();
      for (int64_t k = 0; k < K; ++k) {
        const double score = rng.uniform(0.05, 1.0);
        const bool drop = rng.uniform() < spec.padding_route_probability;
        if (all_padding || drop || k >= static_cast<int64_t>(picks.size())) continue;
        ids[at(t * K + k)] = picks[at(k)];
        s(t, k) = spec.bf16_scores ? numeric::round_bf16(static_cast<float>(score)) : static_cast<float>(score);
      }
    }
    p.x_TD.push_back(std::move(x));
    p.ids_TK.push_back(std::move(ids));
    p.scores_TK.push_back(std::move(s));
  }
  p.validate();
  return p;
}

std::vector<TensorF> make_random_grad_out(const Problem& problem, uint64_t seed, double range) {
  Rng rng(seed);
  std::vector<TensorF> g;
  for (int64_t r = 0; r < problem.num_ranks; ++r) {
    TensorF t({problem.tokens(r), problem.hidden_dim});
    for (float& v : t.data) v = rng.bf16_uniform(-range, range);
    g.push_back(std::move(t));
  }
  return g;
}

}  // namespace dist_moe::reference
