// The oracle's helper API used by GPU tests: stage functions called one at a time, comparison
// metrics, BF16 bit conversion, problem validation.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/oracle.h"
#include "test_helpers.h"

namespace ref = dist_moe::reference;
using ref::TensorF;
using test_helpers::make_spec;

TEST(ReferenceApi, StagesCalledOneAtATimeReproduceTheForward) {
  // What a kernel test does: feed one stage the inputs its kernel saw, get that stage's output.
  ref::RandomProblemSpec spec = make_spec(2, 6, 32, 16, 2, 4, 14);
  spec.padding_route_probability = 0.2;
  const ref::Problem p = ref::make_random_problem(spec);
  ref::ForwardOptions o;
  o.row_alignment = 8;
  const auto fwd = ref::forward(p, o);
  const auto routing = ref::build_routing(p.ids_TK, p.top_k, p.num_experts, 8);
  std::vector<TensorF> h3;
  for (int64_t r = 0; r < 2; ++r) {
    const auto& rf = fwd.ranks[static_cast<std::size_t>(r)];
    const TensorF xg = ref::gather_token_rows(routing[static_cast<std::size_t>(r)], p.x_TD);
    EXPECT_TRUE(ref::bitwise_equal(xg, rf.x_gathered_MD));
    const TensorF h1 = ref::grouped_gemm_nt(rf.routing, rf.x_gathered_MD, p.local_w13(r));
    EXPECT_TRUE(ref::bitwise_equal(h1, rf.h1_M2F));
    const TensorF h2 = ref::swiglu_rows(rf.routing, rf.h1_M2F, p.swiglu);
    EXPECT_TRUE(ref::bitwise_equal(h2, rf.h2_MF));
    h3.push_back(ref::grouped_gemm_nt(rf.routing, rf.h2_MF, p.local_w2(r)));
    EXPECT_TRUE(ref::bitwise_equal(h3.back(), rf.h3_MD));
  }
  const auto combine = ref::scatter_route_rows(routing, h3, 32);
  for (int64_t r = 0; r < 2; ++r) {
    const auto& rf = fwd.ranks[static_cast<std::size_t>(r)];
    EXPECT_TRUE(ref::bitwise_equal(combine[static_cast<std::size_t>(r)], rf.combine_TKD));
    const TensorF out = ref::topk_reduce(rf.combine_TKD, p.ids_TK[static_cast<std::size_t>(r)],
                                         p.scores_TK[static_cast<std::size_t>(r)]);
    EXPECT_TRUE(ref::bitwise_equal(out, rf.out_TD));
  }
  // Shape errors are reported, not crashed on.
  EXPECT_THROW(ref::grouped_gemm_nt(fwd.ranks[0].routing, fwd.ranks[0].h2_MF, p.local_w13(0)), dist_moe::Error);
}

TEST(ReferenceApi, CompareMetrics) {
  TensorF e({2, 2}), a({2, 2});
  e.data = {1.0f, 2.0f, -1.0f, 0.0f};
  a.data = {1.0f, 2.5f, -1.0f, -0.0f};
  const ref::Comparison c = ref::compare(a, e);
  EXPECT_EQ(c.count, 4);
  EXPECT_EQ(c.bit_mismatches, 2);  // 2.5 vs 2 and -0 vs +0
  EXPECT_EQ(c.first_bit_mismatch, 1);
  EXPECT_EQ(c.worst_index, 1);
  EXPECT_DOUBLE_EQ(c.max_abs, 0.5);
  EXPECT_DOUBLE_EQ(c.rel_l2, 0.5 / std::sqrt(6.0));
  EXPECT_DOUBLE_EQ(c.cosine, 7.0 / (std::sqrt(8.25) * std::sqrt(6.0)));
  EXPECT_EQ(c.tolerance_failures, 1);  // rtol = atol = 0
  EXPECT_FALSE(c.passed);
  EXPECT_TRUE(ref::compare(a, e, ref::Tolerance{0.0, 0.5}).passed);
  EXPECT_FALSE(ref::compare(a, e, ref::Tolerance{0.0, 0.5, 0.1}).passed);   // relL2 0.204 > 0.1
  EXPECT_FALSE(ref::compare(a, e, ref::Tolerance{0.3, 0.0, -1, 0.999}).passed);  // cos 0.99494
  EXPECT_TRUE(ref::compare(a, e, ref::Tolerance{0.3, 0.0, 0.25, 0.99}).passed);
  EXPECT_FALSE(ref::bitwise_equal(a, e));
  TensorF wrong({4});
  EXPECT_FALSE(ref::compare(wrong, e).passed);
  EXPECT_FALSE(ref::compare(wrong, e).shapes_match);
}

TEST(ReferenceApi, Bf16BitsRoundTrip) {
  ref::Rng rng(1);
  TensorF t({3, 5});
  for (float& v : t.data) v = rng.bf16_uniform(-100, 100);
  const std::vector<uint16_t> bits = ref::to_bf16_bits(t);
  ASSERT_EQ(bits.size(), 15u);
  EXPECT_TRUE(ref::bitwise_equal(ref::from_bf16_bits(t.shape, bits.data()), t));
  TensorF one({1});
  one.data = {1.0f};
  EXPECT_EQ(ref::to_bf16_bits(one)[0], 0x3f80);
  one.data = {-2.0f};
  EXPECT_EQ(ref::to_bf16_bits(one)[0], 0xc000);
}

TEST(ReferenceApi, ProblemValidation) {
  ref::RandomProblemSpec spec;
  spec.num_ranks = 2;
  spec.num_experts = 4;
  const ref::Problem good = ref::make_random_problem(spec);
  EXPECT_NO_THROW(good.validate());
  ref::Problem p = good;
  p.num_experts = 3;
  EXPECT_THROW(p.validate(), dist_moe::Error);
  p = good;
  p.w2_EDF = TensorF({4, spec.hidden_dim, spec.intermediate_dim + 1});
  EXPECT_THROW(p.validate(), dist_moe::Error);
  p = good;
  p.w13_EFD.data[0] = 0.1f;  // not a BF16 value
  EXPECT_THROW(p.validate(), dist_moe::Error);
  EXPECT_NO_THROW(ref::problem_cast<double>(p).validate());  // the exact model takes any value
  p = good;
  p.ids_TK.pop_back();
  EXPECT_THROW(p.validate(), dist_moe::Error);
  ref::ForwardOptions no_rows;
  no_rows.row_alignment = 0;
  EXPECT_THROW(ref::forward(good, no_rows), dist_moe::Error);
  ref::RMSNormSpec zero_eps;
  zero_eps.eps = 0;
  ref::ForwardOptions o;
  o.rmsnorm = zero_eps;
  EXPECT_THROW(ref::forward(good, o), dist_moe::Error);
  ref::RMSNormSpec center_without_weight;
  center_without_weight.gain_center = 1.0;
  o.rmsnorm = center_without_weight;
  EXPECT_THROW(ref::forward(good, o), dist_moe::Error);
  // Backward checks its grad_out.
  const auto fwd = ref::forward(good);
  auto g = ref::make_random_grad_out(good, 2);
  g[1].data[0] = 0.1f;
  EXPECT_THROW(ref::backward(good, fwd, g), dist_moe::Error);
  g.pop_back();
  EXPECT_THROW(ref::backward(good, fwd, g), dist_moe::Error);
}

// The rank-partials combine order (CombineAlgorithm::kRankPartials): per token, each owner rank's
// k-ordered fmaf chain from 0, then the owners' partials added in rank order.
TEST(ReferenceApi, TopkReduceRankPartials) {
  // Hand-checked order: routes k0 -> rank 1, k1 -> rank 0, k2 -> rank 1 (2 experts per rank).
  TensorF h3({3, 1}), scores({1, 3});
  const float h[3] = {1.0f + 0x1p-20f, 3.0f, -1.0f + 0x1p-21f};
  const float s[3] = {0.75f + 0x1p-22f, 0x1p-25f, 1.25f};
  for (int k = 0; k < 3; ++k) {
    h3(k, 0) = h[k];
    scores(0, k) = s[k];
  }
  const std::vector<int32_t> ids = {2, 1, 3};
  const float p0 = std::fma(s[1], h[1], 0.0f);
  const float p1 = std::fma(s[2], h[2], std::fma(s[0], h[0], 0.0f));
  const float want = dist_moe::numeric::round_bf16((0.0f + p0) + p1);
  EXPECT_EQ(ref::topk_reduce_rank_partials(h3, ids, scores, 2)(0, 0), want);
  // One owner rank: exactly topk_reduce (the k-ordered chain).
  EXPECT_EQ(ref::topk_reduce_rank_partials(h3, ids, scores, 4)(0, 0), ref::topk_reduce(h3, ids, scores)(0, 0));

  // Random routings at 1..8 ranks: -1 routes skipped, one owner equal to topk_reduce bitwise, and
  // every order within FP32 rounding of the double reference.
  for (int ranks = 1; ranks <= 8; ++ranks) {
    ref::RandomProblemSpec spec = make_spec(ranks, 5, 32, 8, 6, 8 * ranks, 100 + ranks);
    spec.padding_route_probability = 0.15;
    const ref::Problem p = ref::make_random_problem(spec);
    const int64_t T = p.scores_TK[0].size(0), K = p.top_k, D = 32;
    TensorF rows({T * K, D});
    ref::Tensor<double> rows_d({T * K, D}), scores_d({T, K});
    uint32_t state = 12345u + static_cast<uint32_t>(ranks);
    for (int64_t i = 0; i < T * K; ++i)
      for (int64_t d = 0; d < D; ++d) {
        state = state * 1664525u + 1013904223u;
        const float v = dist_moe::numeric::round_bf16(static_cast<float>(state >> 8) * 0x1p-23f - 1.0f);
        rows(i, d) = v;
        rows_d(i, d) = v;
      }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) scores_d(t, k) = p.scores_TK[0](t, k);
    const int64_t per_rank = p.num_experts / ranks;
    const TensorF got = ref::topk_reduce_rank_partials(rows, p.ids_TK[0], p.scores_TK[0], per_rank);
    const auto exact = ref::topk_reduce_rank_partials(rows_d, p.ids_TK[0], scores_d, per_rank);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t d = 0; d < D; ++d) {
        double mag = 0.0;
        for (int64_t k = 0; k < K; ++k)
          if (p.ids_TK[0][static_cast<std::size_t>(t * K + k)] >= 0) mag += std::fabs(scores_d(t, k) * rows_d(t * K + k, d));
        EXPECT_NEAR(got(t, d), exact(t, d), 0x1p-7 * std::fabs(exact(t, d)) + 0x1p-20 * (mag + 1.0))
            << "ranks " << ranks << " t " << t << " d " << d;
      }
    if (ranks == 1) {
      EXPECT_TRUE(ref::bitwise_equal(got, ref::topk_reduce(rows, p.ids_TK[0], p.scores_TK[0])));
    }
  }
}
