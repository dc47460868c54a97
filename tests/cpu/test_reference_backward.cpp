// The oracle backward:
//  * against a naive per-token backward loop (bitwise; the loop takes the forward's h1/h2/h3 of each
//    route, already checked bitwise against a naive forward in test_reference_forward.cpp, and
//    does the reduction backward, both DGRADs, SwiGLU backward, the k-sum and both WGRADs per
//    expert itself), in the BF16 and the quantized training paths;
//  * in the exact (double) model against central finite differences for x, scores, W13, W2, with
//    and without the RMSNorm postprocess, plain and clamped SwiGLU;
//  * the pipeline model against the exact one within upstream's gradient tolerances;
//  * WGRAD dtype and accumulation semantics; -1 routes and all -1 tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "naive_helpers.h"
#include "reference/oracle.h"
#include "test_helpers.h"

namespace ref = dist_moe::reference;
namespace num = dist_moe::numeric;
using dist_moe::Activation;
using dist_moe::DType;
using ref::Quantization;
using ref::TensorD;
using ref::TensorF;

namespace {

using naive::at;
using naive::bf16;
using naive::dot;
using naive::qdq_row;
using naive::reround_at_shared;
using naive::row_bits_equal;
using test_helpers::make_spec;
using test_helpers::swiglu_of;
using test_helpers::to_bits;

// A WGRAD operand: column (Bx1 along rows) quantize-dequantize of a [rows, cols] matrix, rows = one
// expert's rows. MXFP8's as the Hopper layer runs it: every 128 rows of a column quantized once at
// the RCEIL code of their amax (`once`, perf_history G152), else (G149) the 32x1 blocks, then each
// value re-rounded to E4M3 at the largest of their four scales.
std::vector<float> qdq_cols(const std::vector<float>& x, int64_t rows, int64_t cols, Quantization q, bool once) {
  if (q == Quantization::kNone || rows == 0) return x;
  std::vector<float> y(x.size());
  std::vector<uint8_t> data(x.size());
  if (q == Quantization::kMXFP8 && once) return naive::mxfp8_once_values(x, naive::col_blocks_of_128(rows, cols));
  if (q == Quantization::kMXFP8) {
    std::vector<uint8_t> s(at(((rows + 31) / 32) * cols));
    num::mxfp8_quantize_cols(x.data(), rows, cols, data.data(), s.data());
    num::mxfp8_dequantize_cols(data.data(), s.data(), rows, cols, y.data());
    reround_at_shared(y, naive::col_blocks_of_128(rows, cols),
                      [&](int64_t i) { return static_cast<int>(s[at((i / cols / 32) * cols + i % cols)]); });
    return y;
  }
  // FP8 blockwise 128x1: per column, blocks of 128 consecutive rows.
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r0 = 0; r0 < rows; r0 += 128) {
      const int64_t r1 = std::min(rows, r0 + 128);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r) amax = num::amax_nan(amax, x[at(r * cols + c)]);
      const float scale = num::fp8_blockwise_scale(amax), mult = num::fp8_blockwise_multiplier(amax);
      for (int64_t r = r0; r < r1; ++r) {
        y[at(r * cols + c)] = num::fp8_blockwise_dequantize_value(
            num::fp8_blockwise_quantize_value(x[at(r * cols + c)], mult), scale);
      }
    }
  }
  return y;
}

std::vector<float> dgrad_row(const std::vector<float>& x, Quantization q, bool once) {
  if (q != Quantization::kMXFP8) return qdq_row(x, q);
  return once ? naive::mxfp8_shared_once_row(x) : naive::mxfp8_shared_row(x);
}

struct NaiveBackward {
  std::vector<TensorF> grad_x, grad_scores;
  TensorF dw13, dw2;  // global, FP32 GEMM results stored per wgrad_dtype
  // Per (rank, t*K+k) route rows, for the intermediate comparisons.
  std::vector<std::vector<std::vector<float>>> gh3, gh2, gh1, gxr;
};

NaiveBackward naive_backward(const ref::Problem& p, const ref::ForwardResult& fwd, const std::vector<TensorF>& g,
                             DType wgrad_dtype) {
  const int64_t R = p.num_ranks, D = p.hidden_dim, F = p.intermediate_dim, K = p.top_k, E = p.num_experts;
  const int64_t El = p.num_local_experts();
  const Quantization q = fwd.options.quantization;
  const bool once = fwd.options.mxfp8_training_operands == ref::Mxfp8TrainingOperands::kSharedOnce;
  const auto& rms = fwd.options.rmsnorm;
  NaiveBackward nb;
  nb.gh3.resize(at(R));
  nb.gh2.resize(at(R));
  nb.gh1.resize(at(R));
  nb.gxr.resize(at(R));
  // Weights as the GEMMs see them (the forward test checks these through h1/h3).
  auto w13_of = [&](int64_t e) -> const float* {
    const auto& rf = fwd.ranks[at(e / El)];
    return q == Quantization::kNone ? &p.w13_EFD(e, 0, 0) : rf.quantized.w13_EFD.row(e % El);
  };
  auto w2_of = [&](int64_t e) -> const float* {
    const auto& rf = fwd.ranks[at(e / El)];
    return q == Quantization::kNone ? &p.w2_EDF(e, 0, 0) : rf.quantized.w2_EDF.row(e % El);
  };
  // The DGRADs' weights: the same, MXFP8's at shared scales rebuilt here independently, per global expert.
  std::vector<std::vector<float>> w13_dgrad(at(E)), w2_dgrad(at(E));
  if (q == Quantization::kMXFP8)
    for (int64_t e = 0; e < E; ++e) {
      w13_dgrad[at(e)] = naive::mxfp8_shared_weight(&p.w13_EFD(e, 0, 0), 2 * F, D);
      w2_dgrad[at(e)] = naive::mxfp8_shared_weight(&p.w2_EDF(e, 0, 0), D, F);
    }
  auto w13_dgrad_of = [&](int64_t e) { return q == Quantization::kMXFP8 ? w13_dgrad[at(e)].data() : w13_of(e); };
  auto w2_dgrad_of = [&](int64_t e) { return q == Quantization::kMXFP8 ? w2_dgrad[at(e)].data() : w2_of(e); };
  // Forward rows of a route, from the expert rank that computed it.
  auto fwd_row = [&](int64_t r, int64_t tk, int which) -> const float* {
    const ref::RouteLocation loc = fwd.ranks[at(r)].routing.route_location_TK[at(tk)];
    const auto& ex = fwd.ranks[at(loc.dst_rank)];
    return which == 0 ? ex.x_gathered_MD.row(loc.row) : which == 1 ? ex.h1_M2F.row(loc.row)
                      : which == 2 ? ex.h2_MF.row(loc.row) : ex.h3_MD.row(loc.row);
  };

  for (int64_t r = 0; r < R; ++r) {
    const int64_t T = p.tokens(r);
    TensorF gx({T, D}), gs({T, K});
    nb.gh3[at(r)].resize(at(T * K));
    nb.gh2[at(r)].resize(at(T * K));
    nb.gh1[at(r)].resize(at(T * K));
    nb.gxr[at(r)].resize(at(T * K));
    for (int64_t t = 0; t < T; ++t) {
      const float* gt = g[at(r)].row(t);
      std::vector<float> acc(at(D), 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t e = p.ids_TK[at(r)][at(t * K + k)];
        if (e < 0) continue;
        const float s = p.scores_TK[at(r)](t, k);
        const float* h1 = fwd_row(r, t * K + k, 1);
        const float* h3 = fwd_row(r, t * K + k, 3);
        std::vector<float> gh3(at(D));
        if (rms) {
          const float ms = static_cast<float>(dot(h3, h3, D) / static_cast<double>(D));
          const float rstd = 1.0f / std::sqrt(ms + static_cast<float>(rms->eps));
          std::vector<float> n(at(D)), gn(at(D));
          for (int64_t d = 0; d < D; ++d) {
            n[at(d)] = h3[d] * rstd;
            gn[at(d)] = s * gt[d];
          }
          gs(t, k) = static_cast<float>(dot(gt, n.data(), D));
          const float c = static_cast<float>(dot(gn.data(), n.data(), D) / static_cast<double>(D));
          for (int64_t d = 0; d < D; ++d) gh3[at(d)] = bf16(rstd * (gn[at(d)] - n[at(d)] * c));
        } else {
          for (int64_t d = 0; d < D; ++d) gh3[at(d)] = bf16(s * gt[d]);
          gs(t, k) = static_cast<float>(dot(gt, h3, D));
        }
        const std::vector<float> gh3q = dgrad_row(gh3, q, once);
        std::vector<float> gh2(at(F));
        for (int64_t f = 0; f < F; ++f) gh2[at(f)] = bf16(static_cast<float>(dot(gh3q.data(), w2_dgrad_of(e) + f, D, F)));
        std::vector<float> gh1(at(2 * F));
        for (int64_t f = 0; f < F; ++f) {
          float dg, du;
          ref::swiglu_backward<float>(h1[f], h1[F + f], gh2[at(f)], p.swiglu, dg, du);
          gh1[at(f)] = bf16(dg);
          gh1[at(F + f)] = bf16(du);
        }
        const std::vector<float> gh1q = dgrad_row(gh1, q, once);
        std::vector<float> gxr(at(D));
        for (int64_t d = 0; d < D; ++d)
          gxr[at(d)] = bf16(static_cast<float>(dot(gh1q.data(), w13_dgrad_of(e) + d, 2 * F, D)));
        for (int64_t d = 0; d < D; ++d) acc[at(d)] = acc[at(d)] + gxr[at(d)];
        nb.gh3[at(r)][at(t * K + k)] = gh3;
        nb.gh2[at(r)][at(t * K + k)] = gh2;
        nb.gh1[at(r)][at(t * K + k)] = gh1;
        nb.gxr[at(r)][at(t * K + k)] = gxr;
      }
      for (int64_t d = 0; d < D; ++d) gx(t, d) = bf16(acc[at(d)]);
    }
    nb.grad_x.push_back(std::move(gx));
    nb.grad_scores.push_back(std::move(gs));
  }

  // WGRAD per global expert over its routes in (source rank, token, k) order.
  nb.dw13 = TensorF({E, 2 * F, D});
  nb.dw2 = TensorF({E, D, F});
  for (int64_t e = 0; e < E; ++e) {
    std::vector<float> X, H2, G3, G1;  // [n, D], [n, F], [n, D], [n, 2F]
    int64_t n = 0;
    for (int64_t r = 0; r < R; ++r)
      for (int64_t tk = 0; tk < p.tokens(r) * K; ++tk) {
        if (p.ids_TK[at(r)][at(tk)] != e) continue;
        X.insert(X.end(), fwd_row(r, tk, 0), fwd_row(r, tk, 0) + D);
        H2.insert(H2.end(), fwd_row(r, tk, 2), fwd_row(r, tk, 2) + F);
        G3.insert(G3.end(), nb.gh3[at(r)][at(tk)].begin(), nb.gh3[at(r)][at(tk)].end());
        G1.insert(G1.end(), nb.gh1[at(r)][at(tk)].begin(), nb.gh1[at(r)][at(tk)].end());
        ++n;
      }
    X = qdq_cols(X, n, D, q, once);
    H2 = qdq_cols(H2, n, F, q, once);
    G3 = qdq_cols(G3, n, D, q, once);
    G1 = qdq_cols(G1, n, 2 * F, q, once);
    auto store = [&](double v) {
      const float f = static_cast<float>(v);
      return wgrad_dtype == DType::kBFloat16 ? bf16(f) : f;
    };
    for (int64_t d = 0; d < D; ++d)
      for (int64_t f = 0; f < F; ++f) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += static_cast<double>(G3[at(i * D + d)]) * H2[at(i * F + f)];
        nb.dw2(e, d, f) = store(s);
      }
    for (int64_t j = 0; j < 2 * F; ++j)
      for (int64_t d = 0; d < D; ++d) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += static_cast<double>(G1[at(i * 2 * F + j)]) * X[at(i * D + d)];
        nb.dw13(e, j, d) = store(s);
      }
  }
  return nb;
}

void expect_backward_matches_naive(const ref::Problem& p, const ref::ForwardOptions& fo, DType wgrad_dtype,
                                   const std::string& what) {
  SCOPED_TRACE(what);
  const ref::ForwardResult fwd = ref::forward(p, fo);
  const std::vector<TensorF> g = ref::make_random_grad_out(p, 99);
  ref::BackwardOptions bo;
  bo.wgrad_dtype = wgrad_dtype;
  const ref::BackwardResult bwd = ref::backward(p, fwd, g, bo);
  const NaiveBackward nb = naive_backward(p, fwd, g, wgrad_dtype);
  const int64_t K = p.top_k;
  for (int64_t r = 0; r < p.num_ranks; ++r) {
    const auto& rb = bwd.ranks[at(r)];
    EXPECT_TRUE(ref::bitwise_equal(rb.grad_x_TD, nb.grad_x[at(r)]))
        << "rank " << r << " grad_x " << ref::compare(rb.grad_x_TD, nb.grad_x[at(r)]).summary();
    EXPECT_TRUE(ref::bitwise_equal(rb.grad_scores_TK, nb.grad_scores[at(r)]))
        << "rank " << r << " grad_scores " << ref::compare(rb.grad_scores_TK, nb.grad_scores[at(r)]).summary();
    for (int64_t tk = 0; tk < p.tokens(r) * K; ++tk) {
      const ref::RouteLocation loc = fwd.ranks[at(r)].routing.route_location_TK[at(tk)];
      if (loc.dst_rank < 0) {
        EXPECT_EQ(rb.grad_scores_TK.data[at(tk)], 0.0f);
        continue;
      }
      const auto& ex = bwd.ranks[at(loc.dst_rank)];
      EXPECT_TRUE(row_bits_equal(rb.grad_h3_TKD.row(tk), nb.gh3[at(r)][at(tk)])) << "grad_h3 (owner) " << r << "/" << tk;
      EXPECT_TRUE(row_bits_equal(ex.grad_h3_MD.row(loc.row), nb.gh3[at(r)][at(tk)])) << "grad_h3 (gathered)";
      EXPECT_TRUE(row_bits_equal(ex.grad_h2_MF.row(loc.row), nb.gh2[at(r)][at(tk)])) << "grad_h2 " << r << "/" << tk;
      EXPECT_TRUE(row_bits_equal(ex.grad_h1_M2F.row(loc.row), nb.gh1[at(r)][at(tk)])) << "grad_h1 " << r << "/" << tk;
      EXPECT_TRUE(row_bits_equal(ex.grad_x_route_MD.row(loc.row), nb.gxr[at(r)][at(tk)])) << "grad_x route";
      EXPECT_TRUE(row_bits_equal(rb.grad_x_TKD.row(tk), nb.gxr[at(r)][at(tk)])) << "grad_x_TKD " << r << "/" << tk;
    }
  }
  const TensorF dw13 = bwd.global_dw13_EFD(), dw2 = bwd.global_dw2_EDF();
  EXPECT_TRUE(ref::bitwise_equal(dw13, nb.dw13)) << "dW13 " << ref::compare(dw13, nb.dw13).summary();
  EXPECT_TRUE(ref::bitwise_equal(dw2, nb.dw2)) << "dW2 " << ref::compare(dw2, nb.dw2).summary();
}

// ---- finite differences in the exact model ------------------------------------------------------

double loss(const ref::ExactProblem& p, const ref::ForwardOptions& o, const std::vector<TensorD>& G) {
  const ref::ExactForwardResult f = ref::forward(p, o);
  double l = 0;
  for (int64_t r = 0; r < p.num_ranks; ++r)
    for (std::size_t i = 0; i < G[at(r)].data.size(); ++i) l += G[at(r)].data[i] * f.ranks[at(r)].out_TD.data[i];
  return l;
}

struct FdStats {
  int64_t checked = 0;
  int64_t nonzero = 0;
};

// Central differences of loss() over every element of `field`, compared with `analytic`.
void check_fd(ref::ExactProblem p, const ref::ForwardOptions& o, const std::vector<TensorD>& G,
              const std::function<std::vector<double*>(ref::ExactProblem&)>& field, const std::vector<double>& analytic,
              const std::string& name, FdStats& stats) {
  const double h = 1e-6;
  std::vector<double*> ptrs = field(p);
  ASSERT_EQ(ptrs.size(), analytic.size()) << name;
  for (std::size_t i = 0; i < ptrs.size(); ++i) {
    const double v = *ptrs[i];
    *ptrs[i] = v + h;
    const double lp = loss(p, o, G);
    *ptrs[i] = v - h;
    const double lm = loss(p, o, G);
    *ptrs[i] = v;
    const double fd = (lp - lm) / (2 * h);
    EXPECT_NEAR(analytic[i], fd, 1e-7 + 1e-6 * std::abs(fd)) << name << "[" << i << "]";
    ++stats.checked;
    stats.nonzero += analytic[i] != 0.0;
  }
}

std::vector<double*> all_of(std::vector<TensorD>& ts) {
  std::vector<double*> out;
  for (auto& t : ts)
    for (double& v : t.data) out.push_back(&v);
  return out;
}
std::vector<double*> all_of(TensorD& t) {
  std::vector<double*> out;
  for (double& v : t.data) out.push_back(&v);
  return out;
}
std::vector<double> flat(const std::vector<TensorD>& ts) {
  std::vector<double> out;
  for (const auto& t : ts) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

void run_finite_differences(const ref::RandomProblemSpec& spec, const ref::ForwardOptions& o, const std::string& what) {
  SCOPED_TRACE(what);
  const ref::Problem pf = ref::make_random_problem(spec);
  const ref::ExactProblem p = ref::problem_cast<double>(pf);
  std::vector<TensorD> G;
  for (const auto& g : ref::make_random_grad_out(pf, 5)) G.push_back(ref::tensor_cast<double>(g));
  const ref::ExactForwardResult fwd = ref::forward(p, o);
  // The clamp's kinks have no derivative: make sure no pre-activation sits within FD reach of one.
  if (p.swiglu.activation == Activation::kSwiGLUClamped) {
    int64_t clamped = 0;
    for (const auto& rf : fwd.ranks)
      for (int64_t m = 0; m < rf.routing.num_rows(); ++m)
        for (int64_t f = 0; f < p.intermediate_dim; ++f) {
          const double gte = rf.h1_M2F(m, f), u = rf.h1_M2F(m, p.intermediate_dim + f);
          ASSERT_GT(std::abs(gte - p.swiglu.limit), 1e-4);
          ASSERT_GT(std::abs(std::abs(u) - p.swiglu.limit), 1e-4);
          clamped += gte > p.swiglu.limit || std::abs(u) > p.swiglu.limit;
        }
    EXPECT_GT(clamped, 0) << "the clamp is exercised";
  }
  const ref::ExactBackwardResult bwd = ref::backward(p, fwd, G);
  std::vector<TensorD> gx, gs;
  for (const auto& rb : bwd.ranks) {
    gx.push_back(rb.grad_x_TD);
    gs.push_back(rb.grad_scores_TK);
  }
  FdStats st;
  check_fd(p, o, G, [](ref::ExactProblem& q) { return all_of(q.x_TD); }, flat(gx), "x", st);
  check_fd(p, o, G, [](ref::ExactProblem& q) { return all_of(q.scores_TK); }, flat(gs), "scores", st);
  check_fd(p, o, G, [](ref::ExactProblem& q) { return all_of(q.w13_EFD); }, bwd.global_dw13_EFD().data, "w13", st);
  check_fd(p, o, G, [](ref::ExactProblem& q) { return all_of(q.w2_EDF); }, bwd.global_dw2_EDF().data, "w2", st);
  const int64_t R = p.num_ranks, T = p.tokens(0), D = p.hidden_dim, F = p.intermediate_dim, K = p.top_k,
                E = p.num_experts;
  EXPECT_EQ(st.checked, R * T * D + R * T * K + E * 2 * F * D + E * D * F);
  EXPECT_GT(st.nonzero, st.checked / 2) << "most gradients are non-zero (the check is not vacuous)";
  // -1 routes: exactly zero score gradient (and the FD above agreed).
  for (int64_t r = 0; r < p.num_ranks; ++r)
    for (std::size_t i = 0; i < p.ids_TK[at(r)].size(); ++i)
      if (p.ids_TK[at(r)][i] < 0) {
        EXPECT_EQ(bwd.ranks[at(r)].grad_scores_TK.data[i], 0.0);
      }
}

ref::RandomProblemSpec fd_spec(int64_t R, int64_t K, bool clamped, uint64_t seed) {
  ref::RandomProblemSpec s = make_spec(R, 3, 8, 4, K, 4, seed);
  s.swiglu = swiglu_of(clamped, 0.6);
  s.padding_route_probability = 0.2;
  s.x_range = 2.0;
  return s;
}

}  // namespace

// ---- naive loop ---------------------------------------------------------------------------------

TEST(ReferenceBackward, MatchesNaiveLoop) {
  int cases = 0;
  for (int64_t R : {1, 2, 3, 4}) {
    for (int64_t K : {1, 2, 6}) {
      for (bool clamped : {false, true}) {
        ref::RandomProblemSpec spec =
            make_spec(R, 5, 24, 12, K, R * ((8 + R - 1) / R), static_cast<uint64_t>(300 + 10 * R + K + clamped));
        spec.swiglu = swiglu_of(clamped);
        spec.routing = K == 2 ? ref::RoutingPattern::kSkewed : ref::RoutingPattern::kUniform;
        spec.padding_route_probability = 0.2;
        spec.all_padding_tokens.push_back(1);  // (not "= {1}": GCC 12 -O3 false -Wnonnull)
        spec.x_range = 2.0;
        const ref::Problem p = ref::make_random_problem(spec);
        ref::ForwardOptions fo;
        fo.row_alignment = (R + K) % 2 ? 8 : 1;
        const DType dt = clamped ? DType::kFloat32 : DType::kBFloat16;
        expect_backward_matches_naive(p, fo, dt, "R=" + std::to_string(R) + " K=" + std::to_string(K) +
                                                     (clamped ? " clamped fp32-wgrad" : " plain bf16-wgrad"));
        ++cases;
      }
    }
  }
  EXPECT_EQ(cases, 24);
}

TEST(ReferenceBackward, RMSNormMatchesNaiveLoop) {
  for (int64_t R : {1, 2}) {
    ref::RandomProblemSpec spec = make_spec(R, 6, 32, 8, 2, 4, static_cast<uint64_t>(17 + R));
    spec.padding_route_probability = 0.2;
    spec.all_padding_tokens = {2};
    ref::ForwardOptions fo;
    fo.rmsnorm = ref::RMSNormSpec{};
    expect_backward_matches_naive(ref::make_random_problem(spec), fo, DType::kBFloat16, "rmsnorm R=" + std::to_string(R));
  }
}

TEST(ReferenceBackward, AllPaddingTokenHasZeroGradients) {
  ref::RandomProblemSpec spec = make_spec(2, 4, 16, 8, 2, 4, 2);
  spec.all_padding_tokens = {1, 6};
  const ref::Problem p = ref::make_random_problem(spec);
  for (bool rms : {false, true}) {
    ref::ForwardOptions fo;
    if (rms) fo.rmsnorm = ref::RMSNormSpec{};
    const auto fwd = ref::forward(p, fo);
    const auto bwd = ref::backward(p, fwd, ref::make_random_grad_out(p, 3));
    const TensorF gx = bwd.global_grad_x_TD(), gs = bwd.global_grad_scores_TK();
    for (int64_t t : {1, 6}) {
      for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(to_bits(gx(t, d)), 0u) << "token " << t;
      for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(to_bits(gs(t, k)), 0u) << "token " << t;
    }
    int64_t nonzero = 0;
    for (float v : gx.data) nonzero += v != 0.0f;
    EXPECT_GT(nonzero, 16 * 4);
  }
}

// ---- finite differences --------------------------------------------------------------------------

TEST(ReferenceBackward, FiniteDifferencesPlainSwiglu) {
  run_finite_differences(fd_spec(2, 2, false, 51), {}, "R=2 K=2 plain");
  run_finite_differences(fd_spec(1, 3, false, 52), {}, "R=1 K=3 plain");
}

TEST(ReferenceBackward, FiniteDifferencesClampedSwiglu) {
  run_finite_differences(fd_spec(2, 2, true, 53), {}, "R=2 K=2 clamped");
  run_finite_differences(fd_spec(4, 1, true, 54), {}, "R=4 K=1 clamped");
}

TEST(ReferenceBackward, FiniteDifferencesRMSNorm) {
  ref::ForwardOptions o;
  ref::RMSNormSpec rms;
  rms.eps = 1e-3;  // comparable to mean(h3^2) at these sizes, so eps matters in the derivative
  o.rmsnorm = rms;
  run_finite_differences(fd_spec(2, 2, false, 55), o, "R=2 K=2 rmsnorm");
  run_finite_differences(fd_spec(1, 2, true, 56), o, "R=1 K=2 clamped rmsnorm");
}

TEST(ReferenceBackward, PipelineAgreesWithExactModelWithinUpstreamGradTolerance) {
  for (bool rms : {false, true}) {
    ref::RandomProblemSpec spec = make_spec(2, 16, 64, 32, 2, 4, 61);
    spec.swiglu = swiglu_of(true, 1.0);
    const ref::Problem p = ref::make_random_problem(spec);
    ref::ForwardOptions o;
    if (rms) o.rmsnorm = ref::RMSNormSpec{};
    // RMSNorm multiplies gradients by rstd (about 10 here, h3 being about 0.1): scale grad_out so
    // the gradients are unit-scale, the premise of upstream's absolute tolerance.
    const auto g = ref::make_random_grad_out(p, 62, rms ? 0.1 : 1.0);
    ref::BackwardOptions bo;
    bo.wgrad_dtype = DType::kFloat32;
    const auto pipe = ref::backward(p, ref::forward(p, o), g, bo);
    const ref::ExactProblem pe = ref::problem_cast<double>(p);
    std::vector<TensorD> ge;
    for (const auto& t : g) ge.push_back(ref::tensor_cast<double>(t));
    const auto exact = ref::backward(pe, ref::forward(pe, o), ge);
    const std::pair<TensorF, TensorD> pairs[] = {
        {pipe.global_grad_x_TD(), exact.global_grad_x_TD()},
        {pipe.global_grad_scores_TK(), exact.global_grad_scores_TK()},
        {pipe.global_dw13_EFD(), exact.global_dw13_EFD()},
        {pipe.global_dw2_EDF(), exact.global_dw2_EDF()},
    };
    for (const auto& [a, e] : pairs) {
      const ref::Comparison c = ref::compare(a, ref::tensor_cast<float>(e), ref::kBf16GradTolerance);
      EXPECT_TRUE(c.passed) << (rms ? "rmsnorm " : "") << c.summary();
    }
  }
}

// ---- WGRAD dtype and accumulation ---------------------------------------------------------------

TEST(ReferenceBackward, WgradDtypeAndAccumulation) {
  ref::RandomProblemSpec spec = make_spec(2, 8, 16, 8, 2, 4, 71);
  const ref::Problem p = ref::make_random_problem(spec);
  const auto fwd = ref::forward(p);
  const auto g = ref::make_random_grad_out(p, 72);
  ref::BackwardOptions fp32;
  fp32.wgrad_dtype = DType::kFloat32;
  const auto b32 = ref::backward(p, fwd, g, fp32);
  const auto b16 = ref::backward(p, fwd, g);  // BF16 default
  ref::Rng rng(73);
  ref::BackwardOptions acc16, acc32;
  acc32.wgrad_dtype = DType::kFloat32;
  for (int64_t r = 0; r < 2; ++r) {
    TensorF p13(b32.ranks[at(r)].dw13_EFD.shape), p2(b32.ranks[at(r)].dw2_EDF.shape);
    for (float& v : p13.data) v = rng.bf16_uniform(-0.1, 0.1);
    for (float& v : p2.data) v = rng.bf16_uniform(-0.1, 0.1);
    acc16.accumulate_dw13.push_back(p13);
    acc16.accumulate_dw2.push_back(p2);
    TensorF q13 = p13, q2 = p2;
    for (float& v : q13.data) v = static_cast<float>(rng.uniform(-0.1, 0.1));  // arbitrary FP32
    for (float& v : q2.data) v = static_cast<float>(rng.uniform(-0.1, 0.1));
    acc32.accumulate_dw13.push_back(q13);
    acc32.accumulate_dw2.push_back(q2);
  }
  const auto a16 = ref::backward(p, fwd, g, acc16);
  const auto a32 = ref::backward(p, fwd, g, acc32);
  int64_t bf16_differs_from_sum_of_rounded = 0;
  for (int64_t r = 0; r < 2; ++r) {
    const auto check = [&](const TensorF& gemm32, const TensorF& out16, const TensorF& prev16, const TensorF& got16,
                           const TensorF& prev32, const TensorF& got32) {
      for (std::size_t i = 0; i < gemm32.data.size(); ++i) {
        EXPECT_EQ(to_bits(out16.data[i]), to_bits(bf16(gemm32.data[i])));
        // Fused rounding point BF16(FP32(prev) + FP32(gemm)).
        EXPECT_EQ(to_bits(got16.data[i]), to_bits(bf16(prev16.data[i] + gemm32.data[i])));
        bf16_differs_from_sum_of_rounded += got16.data[i] != bf16(prev16.data[i] + bf16(gemm32.data[i]));
        EXPECT_EQ(to_bits(got32.data[i]), to_bits(prev32.data[i] + gemm32.data[i]));
      }
    };
    check(b32.ranks[at(r)].dw13_EFD, b16.ranks[at(r)].dw13_EFD, acc16.accumulate_dw13[at(r)], a16.ranks[at(r)].dw13_EFD,
          acc32.accumulate_dw13[at(r)], a32.ranks[at(r)].dw13_EFD);
    check(b32.ranks[at(r)].dw2_EDF, b16.ranks[at(r)].dw2_EDF, acc16.accumulate_dw2[at(r)], a16.ranks[at(r)].dw2_EDF,
          acc32.accumulate_dw2[at(r)], a32.ranks[at(r)].dw2_EDF);
    // Accumulation touches only the weight gradients.
    EXPECT_TRUE(ref::bitwise_equal(a16.ranks[at(r)].grad_x_TD, b16.ranks[at(r)].grad_x_TD));
  }
  EXPECT_GT(bf16_differs_from_sum_of_rounded, 0);  // the fused rounding point is observable
  ref::BackwardOptions bad;
  bad.wgrad_dtype = DType::kFloat16;
  EXPECT_THROW(ref::backward(p, fwd, g, bad), dist_moe::Error);
  ref::BackwardOptions half = acc16;
  half.accumulate_dw2.clear();
  EXPECT_THROW(ref::backward(p, fwd, g, half), dist_moe::Error);
}

TEST(ReferenceBackward, RejectsInferenceOnlyFeatures) {
  ref::RandomProblemSpec spec;
  spec.hidden_dim = 32;
  const ref::Problem p = ref::make_random_problem(spec);
  ref::ForwardOptions o;
  o.rmsnorm = ref::RMSNormSpec{};
  o.rmsnorm->weight_D.assign(32, 1.0f);
  const auto g = ref::make_random_grad_out(p, 1);
  EXPECT_THROW(ref::backward(p, ref::forward(p, o), g), dist_moe::Error);
  ref::ForwardOptions nv;
  nv.quantization = Quantization::kNVFP4;
  EXPECT_THROW(ref::backward(p, ref::forward(p, nv), g), dist_moe::Error);
}

// ---- quantized training paths -------------------------------------------------------------------

TEST(ReferenceQuantBackward, MatchesNaiveLoopWithQuantizationPoints) {
  for (Quantization q : {Quantization::kMXFP8, Quantization::kFP8Blockwise}) {
    for (int64_t R : {1, 2}) {
      for (int64_t align : {1, 32}) {
        // T = 40 > 32 rows per expert: several column blocks.
        ref::RandomProblemSpec spec = make_spec(R, 40, 160, 48, 2, 2, static_cast<uint64_t>(80 + R + align));
        spec.swiglu = swiglu_of(R == 2);
        spec.padding_route_probability = 0.1;
        const ref::Problem p = ref::make_random_problem(spec);
        ref::ForwardOptions fo;
        fo.quantization = q;
        fo.row_alignment = align;
        expect_backward_matches_naive(p, fo, DType::kFloat32,
                                      std::string(ref::to_string(q)) + " R=" + std::to_string(R) +
                                          " align=" + std::to_string(align));
      }
    }
  }
}

// The G152 rule: every MXFP8 operand quantized once at the shared scale per 128, with x spread over
// binades (test_helpers::spread_x_binades) so its rows and columns reach the subnormal midpoints where
// the rule parts from the re-rounded one -- and dW13, whose WGRAD reads x's columns, with it.
TEST(ReferenceQuantBackward, MXFP8SharedOnceMatchesNaiveLoop) {
  for (int64_t R : {1, 2}) {
    for (int64_t align : {1, 32}) {
      ref::RandomProblemSpec spec = make_spec(R, 40, 160, 48, 2, 2, static_cast<uint64_t>(180 + R + align));
      spec.swiglu = swiglu_of(R == 2);
      spec.padding_route_probability = 0.1;
      ref::Problem p = ref::make_random_problem(spec);
      test_helpers::spread_x_binades(p);
      ref::ForwardOptions fo;
      fo.quantization = Quantization::kMXFP8;
      fo.row_alignment = align;
      fo.mxfp8_training_operands = ref::Mxfp8TrainingOperands::kSharedOnce;
      const std::string what = "R=" + std::to_string(R) + " align=" + std::to_string(align);
      expect_backward_matches_naive(p, fo, DType::kFloat32, what);
      ref::ForwardOptions rerounded = fo;
      rerounded.mxfp8_training_operands = ref::Mxfp8TrainingOperands::kReround;
      const std::vector<TensorF> g = ref::make_random_grad_out(p, 99);
      ref::BackwardOptions bo;
      bo.wgrad_dtype = DType::kFloat32;
      const TensorF dw13_once = ref::backward(p, ref::forward(p, fo), g, bo).global_dw13_EFD();
      const TensorF dw13_rerounded = ref::backward(p, ref::forward(p, rerounded), g, bo).global_dw13_EFD();
      EXPECT_FALSE(ref::bitwise_equal(dw13_once, dw13_rerounded)) << what;
    }
  }
}

TEST(ReferenceQuantBackward, MXFP8WithinUpstreamToleranceOfBf16) {
  ref::RandomProblemSpec spec = make_spec(2, 32, 128, 64, 2, 4, 90);
  const ref::Problem p = ref::make_random_problem(spec);
  const auto g = ref::make_random_grad_out(p, 91);
  ref::ForwardOptions mx;
  mx.quantization = Quantization::kMXFP8;
  mx.row_alignment = 128;
  ref::BackwardOptions bo;
  bo.wgrad_dtype = DType::kFloat32;
  const auto qb = ref::backward(p, ref::forward(p, mx), g, bo);
  const auto bb = ref::backward(p, ref::forward(p), g, bo);
  const ref::Comparison cx = ref::compare(qb.global_grad_x_TD(), bb.global_grad_x_TD(), ref::kMxfp8GradTolerance);
  EXPECT_TRUE(cx.passed) << cx.summary();
  EXPECT_GT(cx.bit_mismatches, 0);
  const std::pair<TensorF, TensorF> wgrads[] = {{qb.global_dw13_EFD(), bb.global_dw13_EFD()},
                                                {qb.global_dw2_EDF(), bb.global_dw2_EDF()}};
  for (const auto& [a, e] : wgrads) {
    // Element-wise atol is scaled for upstream's unit-variance weights; the aggregate metrics apply as is.
    const ref::Comparison c = ref::compare(a, e, ref::kMxfp8WgradTolerance);
    EXPECT_LT(c.rel_l2, ref::kMxfp8WgradTolerance.max_rel_l2) << c.summary();
    EXPECT_GT(c.cosine, ref::kMxfp8WgradTolerance.min_cosine) << c.summary();
    EXPECT_GT(c.bit_mismatches, 0);
  }
}
