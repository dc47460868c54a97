// Deterministic random problems for CPU and GPU tests (same seed -> same bits on every machine:
// a SplitMix64 generator and integer-only sampling, no <random> distributions).
#pragma once

#include <cstdint>
#include <vector>

#include "reference/problem.h"
#include "reference/tensor.h"

namespace dist_moe::reference {

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double uniform();                        // [0, 1), 53 random bits
  double uniform(double lo, double hi);    // [lo, hi)
  int64_t below(int64_t n);                // [0, n), n >= 1
  float bf16_uniform(double lo, double hi);  // uniform(lo, hi) rounded to BF16 (RNE)

 private:
  uint64_t state_;
};

enum class RoutingPattern {
  kUniform,  // K distinct experts per token, uniformly among the allowed experts
  kSkewed,   // K distinct experts per token, expert i of the allowed list weighted 1/(i+1)^2
};

struct RandomProblemSpec {
  int64_t num_ranks = 1;
  int64_t tokens_per_rank = 4;
  int64_t hidden_dim = 32;
  int64_t intermediate_dim = 16;
  int64_t top_k = 2;
  int64_t num_experts = 4;
  SwigluParams swiglu;
  RoutingPattern routing = RoutingPattern::kUniform;
  // Experts the routes may pick (empty: all). When fewer than K are allowed, the remaining routes of
  // every token are -1 (e.g. {e} with K > 1: every token's route 0 goes to e, the rest are -1).
  std::vector<int32_t> allowed_experts;
  double padding_route_probability = 0.0;  // each route independently becomes -1 (score 0)
  std::vector<int64_t> all_padding_tokens;  // global token indices whose routes are all -1
  bool bf16_scores = false;                 // scores BF16 values instead of arbitrary FP32
  double x_range = 1.0;                     // x ~ U(-x_range, x_range), BF16
  double weight_range = 0.0;                // weights ~ U(-a, a), BF16; 0 = 1/sqrt(contraction dim)
  uint64_t seed = 1;
};

// Scores are U(0.05, 1) (independent per route, not normalised); -1 routes get score 0. Tokens
// are numbered globally (rank * T + t) and every draw happens in that order, so the same spec
// with a different num_ranks (and tokens_per_rank scaled to keep R*T) is the same global problem.
Problem make_random_problem(const RandomProblemSpec& spec);

// Per-rank [T, D] tensors of BF16 values U(-range, range) (output gradients for backward tests).
std::vector<TensorF> make_random_grad_out(const Problem& problem, uint64_t seed, double range = 1.0);

}  // namespace dist_moe::reference
