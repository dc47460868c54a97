// The oracle forward against a naive per-token loop: for every token of every rank and each of its
// K routes, dense math on that one row with the pipeline's rounding points, written here
// independently of the oracle's routing / gather / scatter machinery. Equality is bitwise, for
// out and for every intermediate row (x_gathered, h1, h2, h3, combine), in the BF16 pipeline and
// in the quantized paths (whose operands the naive loop quantizes itself with numeric.cuh).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <string>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "naive_helpers.h"
#include "reference/oracle.h"
#include "test_helpers.h"

namespace ref = dist_moe::reference;
namespace num = dist_moe::numeric;
using ref::Quantization;
using ref::TensorF;

namespace {

using naive::at;
using naive::bf16;
using naive::dot;
using naive::qdq_row;
using naive::row_bits_equal;
using test_helpers::make_spec;
using test_helpers::swiglu_of;
using test_helpers::to_bits;

// Quantize-dequantize all experts' weights [E, N, K], one expert at a time.
TensorF qdq_weights(const TensorF& w, Quantization q) {
  if (q == Quantization::kNone) return w;
  TensorF out(w.shape);
  const int64_t N = w.size(1), K = w.size(2);
  std::vector<uint8_t> data(at(N * K));
  for (int64_t e = 0; e < w.size(0); ++e) {
    if (q == Quantization::kMXFP8) {  // the Hopper preparation: tiles at shared scales per 128x128
      const std::vector<float> y = naive::mxfp8_shared_weight(w.row(e), N, K);
      std::copy(y.begin(), y.end(), out.row(e));
    } else if (q == Quantization::kFP8Blockwise) {
      std::vector<float> s(at(((N + 127) / 128) * ((K + 127) / 128)));
      num::fp8_blockwise_quantize_weight(w.row(e), N, K, data.data(), s.data());
      num::fp8_blockwise_dequantize_weight(data.data(), s.data(), N, K, out.row(e));
    } else {
      std::vector<uint8_t> s(at(N * ((K + 15) / 16)));
      float gs = 0;
      num::nvfp4_quantize_weight(w.row(e), N, K, data.data(), s.data(), &gs, nullptr);
      num::nvfp4_dequantize_weight(data.data(), s.data(), gs, N, K, out.row(e));
    }
  }
  return out;
}

const char* name_of(ref::Mxfp8TrainingOperands rule) {
  switch (rule) {
    case ref::Mxfp8TrainingOperands::kExactForward: return "exact forward";
    case ref::Mxfp8TrainingOperands::kReround: return "re-rounded";
    case ref::Mxfp8TrainingOperands::kSharedOnce: return "once";
  }
  return "?";
}

struct NaiveRoute {
  bool valid = false;
  std::vector<float> x, h1, h2, h3;  // x as gathered (NVFP4: dequantized at the source)
};

struct Naive {
  std::vector<TensorF> out;                          // [R] [T, D]
  std::vector<std::vector<NaiveRoute>> routes;       // [R][T*K]
  std::vector<std::array<int64_t, 3>> clip;          // [R] over each rank's experts
};

Naive naive_forward(const ref::Problem& p, const ref::ForwardOptions& o) {
  const int64_t R = p.num_ranks, D = p.hidden_dim, F = p.intermediate_dim, K = p.top_k;
  const Quantization q = o.quantization;
  const TensorF w13 = qdq_weights(p.w13_EFD, q);
  const TensorF w2 = qdq_weights(p.w2_EDF, q);
  auto fprop_row = [&](const std::vector<float>& v) {
    if (q != Quantization::kMXFP8) return qdq_row(v, q);
    switch (o.mxfp8_training_operands) {
      case ref::Mxfp8TrainingOperands::kReround: return naive::mxfp8_shared_row(v);
      case ref::Mxfp8TrainingOperands::kSharedOnce: return naive::mxfp8_shared_once_row(v);
      case ref::Mxfp8TrainingOperands::kExactForward: break;
    }
    return qdq_row(v, q);
  };
  Naive n;
  n.clip.assign(at(R), {0, 0, 0});
  for (int64_t r = 0; r < R; ++r) {
    const int64_t T = p.tokens(r);
    TensorF out({T, D});
    std::vector<NaiveRoute> routes(at(T * K));
    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> acc(at(D), 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = p.ids_TK[at(r)][at(t * K + k)];
        if (e < 0) continue;
        NaiveRoute& rt = routes[at(t * K + k)];
        rt.valid = true;
        const std::vector<float> x(p.x_TD[at(r)].row(t), p.x_TD[at(r)].row(t) + D);
        rt.x = q == Quantization::kNVFP4 ? qdq_row(x, q) : x;
        const std::vector<float> xq = fprop_row(x);
        rt.h1.resize(at(2 * F));
        for (int64_t j = 0; j < 2 * F; ++j) rt.h1[at(j)] = bf16(static_cast<float>(dot(xq.data(), &w13(e, j, 0), D)));
        auto& clip = n.clip[at(e / p.num_local_experts())];
        for (int64_t f = 0; f < F; ++f) {
          clip[0] += rt.h1[at(f)] > static_cast<float>(o.swiglu_clip_limit);
          clip[1] += std::abs(rt.h1[at(F + f)]) > static_cast<float>(o.swiglu_clip_limit);
        }
        clip[2] += F;
        rt.h2.resize(at(F));
        for (int64_t f = 0; f < F; ++f) rt.h2[at(f)] = bf16(ref::swiglu<float>(rt.h1[at(f)], rt.h1[at(F + f)], p.swiglu));
        const std::vector<float> h2q = fprop_row(rt.h2);
        rt.h3.resize(at(D));
        for (int64_t d = 0; d < D; ++d) rt.h3[at(d)] = bf16(static_cast<float>(dot(h2q.data(), &w2(e, d, 0), F)));
        const float s = p.scores_TK[at(r)](t, k);
        if (o.rmsnorm) {
          const bool gamma = !o.rmsnorm->weight_D.empty();
          std::vector<float> xg(at(D));
          for (int64_t d = 0; d < D; ++d) {
            xg[at(d)] = gamma ? (o.rmsnorm->weight_D[at(d)] + static_cast<float>(o.rmsnorm->gain_center)) * rt.h3[at(d)]
                              : rt.h3[at(d)];
          }
          const float ms = static_cast<float>(dot(xg.data(), xg.data(), D) / static_cast<double>(D));
          const float rstd = 1.0f / std::sqrt(ms + static_cast<float>(o.rmsnorm->eps));
          for (int64_t d = 0; d < D; ++d) acc[at(d)] = std::fma(s, xg[at(d)] * rstd, acc[at(d)]);
        } else {
          for (int64_t d = 0; d < D; ++d) acc[at(d)] = std::fma(s, rt.h3[at(d)], acc[at(d)]);
        }
      }
      for (int64_t d = 0; d < D; ++d) out(t, d) = bf16(acc[at(d)]);
    }
    n.out.push_back(std::move(out));
    n.routes.push_back(std::move(routes));
  }
  return n;
}

bool row_is_zero(const float* a, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (to_bits(a[i]) != 0u) return false;
  return true;
}

// Oracle vs naive, everything bitwise. Returns the number of valid routes compared.
int64_t expect_matches_naive(const ref::Problem& p, const ref::ForwardOptions& o, const std::string& what) {
  SCOPED_TRACE(what);
  const ref::ForwardResult fwd = ref::forward(p, o);
  const Naive n = naive_forward(p, o);
  const int64_t R = p.num_ranks, D = p.hidden_dim, F = p.intermediate_dim, K = p.top_k;
  int64_t routes = 0;
  for (int64_t r = 0; r < R; ++r) {
    const ref::RankForward<float>& rf = fwd.ranks[at(r)];
    EXPECT_TRUE(ref::bitwise_equal(rf.out_TD, n.out[at(r)])) << "rank " << r << " out: "
                                                             << ref::compare(rf.out_TD, n.out[at(r)]).summary();
    EXPECT_EQ(rf.clip_stats, n.clip[at(r)]) << "rank " << r;
    // Expert-side buffers: padding rows are exact zeros.
    const int64_t M = rf.routing.num_rows();
    EXPECT_EQ(rf.h1_M2F.shape, (std::vector<int64_t>{M, 2 * F}));
    EXPECT_EQ(rf.h3_MD.shape, (std::vector<int64_t>{M, D}));
    for (int64_t m = 0; m < M; ++m) {
      if (!rf.routing.rows[at(m)].is_padding()) continue;
      EXPECT_TRUE(row_is_zero(rf.x_gathered_MD.row(m), D) && row_is_zero(rf.h1_M2F.row(m), 2 * F) &&
                  row_is_zero(rf.h2_MF.row(m), F) && row_is_zero(rf.h3_MD.row(m), D))
          << "rank " << r << " padding row " << m;
    }
    // Every route: its row on the expert rank and its combine slot on the owner.
    for (int64_t tk = 0; tk < p.tokens(r) * K; ++tk) {
      const NaiveRoute& nr = n.routes[at(r)][at(tk)];
      const ref::RouteLocation loc = rf.routing.route_location_TK[at(tk)];
      if (!nr.valid) {
        EXPECT_EQ(loc.dst_rank, -1);
        EXPECT_TRUE(row_is_zero(rf.combine_TKD.row(tk), D)) << "combine slot of a -1 route";
        continue;
      }
      ++routes;
      if (loc.dst_rank < 0) {
        ADD_FAILURE() << "valid route without a location, rank " << r << " route " << tk;
        continue;
      }
      const ref::RankForward<float>& ex = fwd.ranks[at(loc.dst_rank)];
      EXPECT_TRUE(row_bits_equal(ex.x_gathered_MD.row(loc.row), nr.x)) << "x_gathered, rank " << r << " route " << tk;
      EXPECT_TRUE(row_bits_equal(ex.h1_M2F.row(loc.row), nr.h1)) << "h1, rank " << r << " route " << tk;
      EXPECT_TRUE(row_bits_equal(ex.h2_MF.row(loc.row), nr.h2)) << "h2, rank " << r << " route " << tk;
      EXPECT_TRUE(row_bits_equal(ex.h3_MD.row(loc.row), nr.h3)) << "h3, rank " << r << " route " << tk;
      EXPECT_TRUE(row_bits_equal(rf.combine_TKD.row(tk), nr.h3)) << "combine, rank " << r << " route " << tk;
    }
  }
  return routes;
}

}  // namespace

TEST(ReferenceForward, MatchesNaiveLoopOverRanksTopKAndActivations) {
  const int64_t aligns[] = {1, 8, 16, 64, 128};
  int64_t cases = 0, routes = 0, clipped = 0;
  for (int64_t R = 1; R <= 8; ++R) {
    for (int64_t K : {1, 2, 6, 8}) {
      for (bool clamped : {false, true}) {
        const int64_t E = R * std::max<int64_t>(1, (10 + R - 1) / R);  // >= 10 experts: room for K = 8
        ref::RandomProblemSpec spec = make_spec(R, 5, 24, 12, K, E, static_cast<uint64_t>(1000 * R + 10 * K + clamped));
        spec.swiglu = swiglu_of(clamped);
        spec.routing = (R + K) % 2 ? ref::RoutingPattern::kSkewed : ref::RoutingPattern::kUniform;
        spec.padding_route_probability = 0.15;
        spec.bf16_scores = K % 2 == 1;
        spec.x_range = 2.0;
        const ref::Problem p = ref::make_random_problem(spec);
        ref::ForwardOptions o;
        o.row_alignment = aligns[(R + K) % 5];
        o.swiglu_clip_limit = 0.4;
        routes += expect_matches_naive(p, o, "R=" + std::to_string(R) + " K=" + std::to_string(K) +
                                                 (clamped ? " clamped" : " plain"));
        for (const auto& rf : ref::forward(p, o).ranks) clipped += rf.clip_stats[0] + rf.clip_stats[1];
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 64);
  EXPECT_GT(routes, 1000);
  EXPECT_GT(clipped, 0);  // the clip counters were exercised
}

TEST(ReferenceForward, RaggedAndEmptyExperts) {
  for (int64_t R : {1, 2, 4}) {
    ref::RandomProblemSpec spec = make_spec(R, 9, 16, 8, 3, 8, static_cast<uint64_t>(77 + R));
    spec.routing = ref::RoutingPattern::kSkewed;
    spec.allowed_experts = {6, 1, 2, 5};  // experts 0, 3, 4, 7 stay empty
    const ref::Problem p = ref::make_random_problem(spec);
    ref::ForwardOptions o;
    o.row_alignment = 8;
    expect_matches_naive(p, o, "ragged R=" + std::to_string(R));
    const auto fwd = ref::forward(p, o);
    std::vector<int64_t> counts;
    for (const auto& rf : fwd.ranks) counts.insert(counts.end(), rf.routing.expert_counts.begin(), rf.routing.expert_counts.end());
    for (int e : {0, 3, 4, 7}) EXPECT_EQ(counts[at(e)], 0) << "expert " << e;
    EXPECT_GT(counts[6], counts[5]);  // skew: the first allowed expert is the most popular
  }
}

TEST(ReferenceForward, SingleTokenPerRank) {
  for (int64_t R = 1; R <= 8; ++R) {
    for (int64_t K : {1, 8}) {
      ref::RandomProblemSpec spec = make_spec(R, 1, 16, 8, K, R * ((8 + R - 1) / R), static_cast<uint64_t>(5 * R + K));
      expect_matches_naive(ref::make_random_problem(spec), {}, "T=1 R=" + std::to_string(R));
    }
  }
}

TEST(ReferenceForward, AllTokensToOneExpert) {
  for (int64_t K : {1, 4}) {
    ref::RandomProblemSpec spec = make_spec(4, 6, 16, 8, K, 8, 3);
    spec.allowed_experts = {5};  // rank 2's second expert; routes k >= 1 become -1
    const ref::Problem p = ref::make_random_problem(spec);
    ref::ForwardOptions o;
    o.row_alignment = 16;
    expect_matches_naive(p, o, "one expert K=" + std::to_string(K));
    const auto fwd = ref::forward(p, o);
    for (int64_t r = 0; r < 4; ++r) {
      const auto& rt = fwd.ranks[at(r)].routing;
      EXPECT_EQ(rt.num_rows(), r == 2 ? 32 : 0);
      EXPECT_EQ(rt.num_valid_rows(), r == 2 ? 24 : 0);
      EXPECT_EQ(fwd.ranks[at(r)].clip_stats[2], r == 2 ? 24 * 8 : 0);
    }
  }
}

TEST(ReferenceForward, AllPaddingRowsAreExactZeros) {
  for (bool rms : {false, true}) {
    ref::RandomProblemSpec spec = make_spec(2, 5, 16, 8, 2, 4, 21);
    spec.all_padding_tokens = {0, 3, 7};
    spec.padding_route_probability = 0.3;
    const ref::Problem p = ref::make_random_problem(spec);
    ref::ForwardOptions o;
    if (rms) o.rmsnorm = ref::RMSNormSpec{};
    expect_matches_naive(p, o, rms ? "rmsnorm" : "plain");
    const auto fwd = ref::forward(p, o);
    for (int64_t g : {0, 3, 7}) {
      const TensorF& out = fwd.ranks[at(g / 5)].out_TD;
      EXPECT_TRUE(row_is_zero(out.row(g % 5), 16)) << "token " << g;
    }
    // A token with a valid route is not zero (the test above is not vacuous).
    EXPECT_FALSE(row_is_zero(fwd.ranks[0].out_TD.row(1), 16) && row_is_zero(fwd.ranks[0].out_TD.row(2), 16));
  }
}

TEST(ReferenceForward, RMSNormPostprocess) {
  for (bool gamma : {false, true}) {
    ref::RandomProblemSpec spec = make_spec(2, 6, 32, 16, 2, 4, 8);
    spec.padding_route_probability = 0.2;
    const ref::Problem p = ref::make_random_problem(spec);
    ref::ForwardOptions o;
    ref::RMSNormSpec rms;
    rms.eps = 1e-5;
    if (gamma) {
      ref::Rng rng(4);
      for (int d = 0; d < 32; ++d) rms.weight_D.push_back(rng.bf16_uniform(-0.5, 0.5));
      rms.gain_center = 1.0;
    }
    o.rmsnorm = rms;
    expect_matches_naive(p, o, gamma ? "gamma" : "scalarless");
    // Each route row is normalised before the score sum: with one valid route the output row's
    // RMS is the score (up to rounding), whatever h3's scale.
    const auto fwd = ref::forward(p, o);
    EXPECT_EQ(fwd.ranks[0].rstd_TK.shape, (std::vector<int64_t>{6, 2}));
  }
}

TEST(ReferenceForward, RMSNormNormalisesEachRoute) {
  ref::RandomProblemSpec spec = make_spec(1, 8, 64, 16, 1, 2, 12);
  const ref::Problem p = ref::make_random_problem(spec);
  ref::ForwardOptions o;
  o.rmsnorm = ref::RMSNormSpec{};
  const auto fwd = ref::forward(p, o);
  for (int64_t t = 0; t < 8; ++t) {
    double ss = 0;
    for (int64_t d = 0; d < 64; ++d) ss += std::pow(fwd.ranks[0].out_TD(t, d), 2);
    EXPECT_NEAR(std::sqrt(ss / 64), p.scores_TK[0](t, 0), 1e-2 * p.scores_TK[0](t, 0)) << "token " << t;
  }
}

TEST(ReferenceForward, ExactModelAgreesWithPipelineWithinBf16Tolerance) {
  for (bool clamped : {false, true}) {
    ref::RandomProblemSpec spec = make_spec(2, 8, 64, 32, 2, 4, 31);
    spec.swiglu = swiglu_of(clamped);
    const ref::Problem p = ref::make_random_problem(spec);
    const TensorF pipe = ref::forward(p).global_out_TD();
    const TensorF exact = ref::tensor_cast<float>(ref::forward(ref::problem_cast<double>(p)).global_out_TD());
    const ref::Comparison c = ref::compare(pipe, exact, ref::kBf16OutputTolerance);
    EXPECT_TRUE(c.passed) << c.summary();
    EXPECT_GT(c.bit_mismatches, 0);  // the pipeline does round
  }
}

TEST(ReferenceQuantForward, MatchesNaiveLoopWithQuantizationPoints) {
  for (Quantization q : {Quantization::kMXFP8, Quantization::kNVFP4, Quantization::kFP8Blockwise}) {
    for (int64_t R : {1, 2, 4}) {
      // D = 160: 5 MXFP8 blocks, 10 NVFP4 blocks, one full + one partial 128-block; F = 48: a
      // partial MXFP8 block / tile.
      ref::RandomProblemSpec spec = make_spec(R, 5, 160, 48, 2, 4, static_cast<uint64_t>(40 + R));
      spec.swiglu = swiglu_of(R == 2);
      spec.padding_route_probability = 0.2;
      const ref::Problem p = ref::make_random_problem(spec);
      ref::ForwardOptions o;
      o.quantization = q;
      o.row_alignment = q == Quantization::kNVFP4 ? 1 : 32;
      expect_matches_naive(p, o, std::string(ref::to_string(q)) + " R=" + std::to_string(R));
      if (q == Quantization::kMXFP8) {  // and the training layer's FPROP rows at shared scales
        for (auto rule : {ref::Mxfp8TrainingOperands::kReround, ref::Mxfp8TrainingOperands::kSharedOnce}) {
          ref::ForwardOptions t = o;
          t.mxfp8_training_operands = rule;
          expect_matches_naive(p, t, std::string("MXFP8 training rows ") + name_of(rule) + " R=" + std::to_string(R));
        }
      }
      // Quantization changes the result, within upstream's block-scaled forward tolerance.
      const TensorF quant_out = ref::forward(p, o).global_out_TD();
      const TensorF bf16_out = ref::forward(p).global_out_TD();
      const ref::Comparison c = ref::compare(
          quant_out, bf16_out, q == Quantization::kNVFP4 ? ref::kNvfp4ForwardTolerance : ref::kMxfp8ForwardTolerance);
      EXPECT_GT(c.bit_mismatches, 0) << ref::to_string(q);
      EXPECT_LT(c.rel_l2, q == Quantization::kNVFP4 ? 0.29 : 0.075) << c.summary();
      EXPECT_GT(c.cosine, q == Quantization::kNVFP4 ? 0.955 : 0.9975) << c.summary();
    }
  }
}

// x spread over binades (test_helpers::spread_x_binades; D = 288: two 128-blocks and a partial one),
// so the rules' FPROP rows part: each matches the naive loop, and each rule's x rows differ from the
// others'.
TEST(ReferenceQuantForward, MXFP8TrainingRulesMatchNaiveLoopOnSpreadBinades) {
  ref::Problem p = ref::make_random_problem(make_spec(2, 40, 288, 64, 2, 4, 77));
  test_helpers::spread_x_binades(p);
  std::vector<TensorF> x_rows;
  for (auto rule : {ref::Mxfp8TrainingOperands::kExactForward, ref::Mxfp8TrainingOperands::kReround,
                    ref::Mxfp8TrainingOperands::kSharedOnce}) {
    ref::ForwardOptions o;
    o.quantization = Quantization::kMXFP8;
    o.row_alignment = 32;
    o.mxfp8_training_operands = rule;
    expect_matches_naive(p, o, name_of(rule));
    x_rows.push_back(ref::forward(p, o).ranks[0].quantized.x_row_MD);
  }
  EXPECT_FALSE(ref::bitwise_equal(x_rows[0], x_rows[1])) << "exact forward vs re-rounded";
  EXPECT_FALSE(ref::bitwise_equal(x_rows[1], x_rows[2])) << "re-rounded vs once";
}

// The oracle's MXFP8 training operands under the two shared-scale rules, on naive_helpers.h's crafted
// row: as an FPROP / DGRAD row (mxfp8_shared_rows, _once) and as a WGRAD column of an expert's 128
// rows behind an expert of 5 rows at 2^10 times its scale (the column blocks restart at each expert).
// Each matches its naive model; they differ exactly at the two subnormal midpoints, where the once
// value is the nearer.
TEST(ReferenceQuant, SharedOnceOperandsDifferFromReroundedOnlyAtSubnormalMidpoints) {
  const naive::Mxfp8MidpointRow row = naive::mxfp8_midpoint_row(11);
  TensorF a({1, 128});
  std::copy(row.x.begin(), row.x.end(), a.data.begin());
  std::vector<int32_t> ids(133, 1);
  std::fill(ids.begin(), ids.begin() + 5, 0);
  const ref::RankRouting rt = ref::build_routing({ids}, 1, 2, 1)[0];
  TensorF col({133, 1});
  std::fill(col.data.begin(), col.data.begin() + 5, std::ldexp(448.0f, 10));
  std::copy(row.x.begin(), row.x.end(), col.data.begin() + 5);

  const std::vector<float> naive_once = naive::mxfp8_shared_once_row(row.x);
  const std::vector<float> naive_rerounded = naive::mxfp8_shared_row(row.x);
  const TensorF rows_once = ref::mxfp8_shared_rows_once(a), rows_rerounded = ref::mxfp8_shared_rows(a);
  const TensorF cols_once = ref::mxfp8_wgrad_operand_once(rt, col);
  const TensorF cols_rerounded = ref::mxfp8_wgrad_operand(rt, col);
  for (int64_t m = 0; m < 5; ++m) {
    EXPECT_EQ(cols_once.data[at(m)], col.data[at(m)]);
    EXPECT_EQ(cols_rerounded.data[at(m)], col.data[at(m)]);
  }
  int64_t differ = 0;
  for (int64_t i = 0; i < 128; ++i) {
    SCOPED_TRACE(testing::Message() << "element " << i << " x " << row.x[at(i)]);
    EXPECT_EQ(to_bits(rows_once.data[at(i)]), to_bits(naive_once[at(i)]));
    EXPECT_EQ(to_bits(cols_once.data[at(5 + i)]), to_bits(naive_once[at(i)]));
    EXPECT_EQ(to_bits(rows_rerounded.data[at(i)]), to_bits(naive_rerounded[at(i)]));
    EXPECT_EQ(to_bits(cols_rerounded.data[at(5 + i)]), to_bits(naive_rerounded[at(i)]));
    const auto* midpoint = std::find(std::begin(row.columns), std::end(row.columns), i);
    if (midpoint == std::end(row.columns)) {
      EXPECT_EQ(to_bits(naive_once[at(i)]), to_bits(naive_rerounded[at(i)]));
      continue;
    }
    const std::ptrdiff_t k = midpoint - std::begin(row.columns);  // (M = 127: the codes' own values)
    EXPECT_EQ(naive_once[at(i)], static_cast<float>(test_helpers::e4m3_definition(row.once[k])));
    EXPECT_EQ(naive_rerounded[at(i)], static_cast<float>(test_helpers::e4m3_definition(row.rerounded[k])));
    EXPECT_LT(std::fabs(naive_once[at(i)] - row.x[at(i)]), std::fabs(naive_rerounded[at(i)] - row.x[at(i)]));
    differ += naive_once[at(i)] != naive_rerounded[at(i)];
  }
  EXPECT_EQ(differ, 2);
}

TEST(ReferenceQuantForward, ExactModelRejectsQuantization) {
  ref::RandomProblemSpec spec;
  spec.hidden_dim = 32;
  const ref::ExactProblem p = ref::problem_cast<double>(ref::make_random_problem(spec));
  ref::ForwardOptions o;
  o.quantization = Quantization::kMXFP8;
  EXPECT_THROW(ref::forward(p, o), dist_moe::Error);
}
