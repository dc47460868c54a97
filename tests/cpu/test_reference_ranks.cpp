// The simulated rank count does not change the result: the same global problem on 1 rank and on
// R ranks gives identical bits for the output, every gradient and both WGRADs, and the R ranks'
// expert-major buffers concatenated in rank order are the 1-rank buffers.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reference/oracle.h"
#include "test_helpers.h"

namespace ref = dist_moe::reference;
using dist_moe::DType;
using ref::Quantization;
using ref::TensorF;
using test_helpers::make_spec;
using test_helpers::swiglu_of;

namespace {

template <class Get>
TensorF concat_ranks(const std::vector<ref::RankForward<float>>& ranks, Get get) {
  std::vector<TensorF> parts;
  for (const auto& r : ranks) parts.push_back(get(r));
  return ref::concat_rows(parts);
}
template <class Get>
TensorF concat_ranks(const std::vector<ref::RankBackward<float>>& ranks, Get get) {
  std::vector<TensorF> parts;
  for (const auto& r : ranks) parts.push_back(get(r));
  return ref::concat_rows(parts);
}

void expect_same(const TensorF& a, const TensorF& b, const std::string& what) {
  EXPECT_TRUE(ref::bitwise_equal(a, b)) << what << ": " << ref::compare(a, b).summary();
}

void expect_rank_invariant(const ref::Problem& one, int64_t R, const ref::ForwardOptions& fo, DType wgrad,
                           const std::string& what) {
  SCOPED_TRACE(what + " R=" + std::to_string(R));
  ASSERT_EQ(one.num_ranks, 1);
  const ref::Problem many = one.resplit(R);
  ASSERT_EQ(many.num_ranks, R);
  const std::vector<TensorF> g1 = ref::make_random_grad_out(one, 5);
  // The same global grad_out, cut into R pieces.
  std::vector<TensorF> gR;
  const int64_t T = many.tokens(0), D = one.hidden_dim;
  for (int64_t r = 0; r < R; ++r) {
    TensorF g({T, D});
    std::copy(g1[0].row(r * T), g1[0].row((r + 1) * T), g.data.begin());
    gR.push_back(g);
  }
  ref::BackwardOptions bo;
  bo.wgrad_dtype = wgrad;
  const auto f1 = ref::forward(one, fo);
  const auto fR = ref::forward(many, fo);
  const auto b1 = ref::backward(one, f1, g1, bo);
  const auto bR = ref::backward(many, fR, gR, bo);

  expect_same(fR.global_out_TD(), f1.global_out_TD(), "out");
  expect_same(bR.global_grad_x_TD(), b1.global_grad_x_TD(), "grad_x");
  expect_same(bR.global_grad_scores_TK(), b1.global_grad_scores_TK(), "grad_scores");
  expect_same(bR.global_dw13_EFD(), b1.global_dw13_EFD(), "dW13");
  expect_same(bR.global_dw2_EDF(), b1.global_dw2_EDF(), "dW2");

  const auto& r1 = f1.ranks[0];
  expect_same(concat_ranks(fR.ranks, [](const auto& r) { return r.x_gathered_MD; }), r1.x_gathered_MD, "x_gathered");
  expect_same(concat_ranks(fR.ranks, [](const auto& r) { return r.h1_M2F; }), r1.h1_M2F, "h1");
  expect_same(concat_ranks(fR.ranks, [](const auto& r) { return r.h2_MF; }), r1.h2_MF, "h2");
  expect_same(concat_ranks(fR.ranks, [](const auto& r) { return r.h3_MD; }), r1.h3_MD, "h3");
  expect_same(concat_ranks(fR.ranks, [](const auto& r) { return r.combine_TKD; }), r1.combine_TKD, "combine");
  expect_same(concat_ranks(bR.ranks, [](const auto& r) { return r.grad_h3_MD; }), b1.ranks[0].grad_h3_MD, "grad_h3");
  expect_same(concat_ranks(bR.ranks, [](const auto& r) { return r.grad_h2_MF; }), b1.ranks[0].grad_h2_MF, "grad_h2");
  expect_same(concat_ranks(bR.ranks, [](const auto& r) { return r.grad_h1_M2F; }), b1.ranks[0].grad_h1_M2F, "grad_h1");
  expect_same(concat_ranks(bR.ranks, [](const auto& r) { return r.grad_x_route_MD; }), b1.ranks[0].grad_x_route_MD,
              "grad_x_route");
  std::array<int64_t, 3> sum{0, 0, 0};
  for (const auto& r : fR.ranks)
    for (int i = 0; i < 3; ++i) sum[static_cast<std::size_t>(i)] += r.clip_stats[static_cast<std::size_t>(i)];
  EXPECT_EQ(sum, r1.clip_stats);
  // Not vacuous: work really is spread over the ranks.
  int64_t ranks_with_rows = 0;
  for (const auto& r : fR.ranks) ranks_with_rows += r.routing.num_valid_rows() > 0;
  EXPECT_GT(ranks_with_rows, 1);
}

ref::RandomProblemSpec global_spec(uint64_t seed) {
  ref::RandomProblemSpec s = make_spec(1, 16, 32, 16, 3, 8, seed);
  s.routing = ref::RoutingPattern::kSkewed;
  s.padding_route_probability = 0.15;
  s.all_padding_tokens = {5};
  s.x_range = 2.0;
  return s;
}

}  // namespace

TEST(ReferenceRanks, OneVersusFourRanksIdenticalBits) {
  for (bool clamped : {false, true}) {
    ref::RandomProblemSpec spec = global_spec(clamped ? 2 : 1);
    spec.swiglu = swiglu_of(clamped);
    ref::ForwardOptions fo;
    fo.swiglu_clip_limit = 0.4;
    expect_rank_invariant(ref::make_random_problem(spec), 4, fo, DType::kBFloat16, clamped ? "clamped" : "plain");
  }
}

TEST(ReferenceRanks, AnyRankCountWithPaddingAndFp32Wgrad) {
  const ref::Problem one = ref::make_random_problem(global_spec(3));
  for (int64_t R : {2, 4, 8}) {
    for (int64_t align : {1, 16}) {
      ref::ForwardOptions fo;
      fo.row_alignment = align;
      expect_rank_invariant(one, R, fo, DType::kFloat32, "align=" + std::to_string(align));
    }
  }
}

TEST(ReferenceRanks, RMSNormAndQuantizedPaths) {
  const ref::Problem one = ref::make_random_problem(global_spec(4));
  ref::ForwardOptions rms;
  rms.rmsnorm = ref::RMSNormSpec{};
  expect_rank_invariant(one, 4, rms, DType::kBFloat16, "rmsnorm");
  for (Quantization q : {Quantization::kMXFP8, Quantization::kFP8Blockwise}) {
    ref::ForwardOptions fo;
    fo.quantization = q;
    fo.row_alignment = 32;
    expect_rank_invariant(one, 4, fo, DType::kFloat32, ref::to_string(q));
  }
}

TEST(ReferenceRanks, GeneratorGivesTheSameGlobalProblemForAnyRankCount) {
  ref::RandomProblemSpec spec = global_spec(9);
  const ref::Problem one = ref::make_random_problem(spec);
  spec.num_ranks = 4;
  spec.tokens_per_rank = 4;
  spec.all_padding_tokens = {5};
  const ref::Problem four = ref::make_random_problem(spec);
  const ref::Problem resplit = one.resplit(4);
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_TRUE(ref::bitwise_equal(four.x_TD[static_cast<std::size_t>(r)], resplit.x_TD[static_cast<std::size_t>(r)]));
    EXPECT_EQ(four.ids_TK[static_cast<std::size_t>(r)], resplit.ids_TK[static_cast<std::size_t>(r)]);
    EXPECT_TRUE(ref::bitwise_equal(four.scores_TK[static_cast<std::size_t>(r)],
                                   resplit.scores_TK[static_cast<std::size_t>(r)]));
  }
  EXPECT_TRUE(ref::bitwise_equal(four.w13_EFD, one.w13_EFD));
  EXPECT_TRUE(ref::bitwise_equal(four.w2_EDF, one.w2_EDF));
  EXPECT_THROW(one.resplit(3), dist_moe::Error);  // 8 experts do not split over 3 ranks
}
