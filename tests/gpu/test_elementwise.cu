// Standalone SwiGLU, top-k backward, K-reduction and RMSNorm postprocess kernels vs the CPU oracle,
// on fresh random inputs with poisoned outputs.
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include "gpu_test_util.h"
#include "kernels/swiglu.h"
#include "kernels/topk.h"
#include "reference/oracle.h"

namespace dist_moe {
namespace {

using reference::TensorF;
using testing::DeviceBuffer;

// A routing of one rank's experts from random ids over R source ranks, padded to `align`.
reference::RankRouting random_routing(int64_t R, int64_t T, int64_t K, int64_t E_local, int64_t align, uint64_t seed) {
  reference::Rng rng(seed);
  std::vector<std::vector<int32_t>> ids(R, std::vector<int32_t>(T * K));
  for (auto& rank_ids : ids)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < K; ++k) {
        // distinct experts per token; some -1 routes
        int32_t e;
        bool dup;
        do {
          e = rng.below(8) == 0 ? -1 : static_cast<int32_t>(rng.below(E_local));
          dup = false;
          for (int64_t j = 0; j < k; ++j) dup = dup || (e >= 0 && rank_ids[t * K + j] == e);
        } while (dup);
        rank_ids[t * K + k] = e;
      }
  // ids < E_local: every route goes to rank 0's experts (the rank whose buffer we build)
  return reference::build_routing(ids, K, E_local * R, align)[0];
}

TensorF random_bf16_tensor(std::vector<int64_t> shape, reference::Rng& rng, double lo, double hi) {
  TensorF t(std::move(shape));
  for (auto& v : t.data) v = rng.bf16_uniform(lo, hi);
  return t;
}

struct RowsOnDevice {
  DeviceBuffer<int32_t> counts, offsets;
  kernels::ExpertRowsView view;
  explicit RowsOnDevice(const reference::RankRouting& rt, int64_t capacity) {
    std::vector<int32_t> c(rt.expert_counts.begin(), rt.expert_counts.end());
    std::vector<int32_t> o(rt.expert_offsets.begin(), rt.expert_offsets.end());
    counts = DeviceBuffer<int32_t>(c);
    offsets = DeviceBuffer<int32_t>(o);
    view = {counts.get(), offsets.get(), static_cast<int32_t>(c.size()), capacity};
  }
};

class SwigluKernel : public ::testing::TestWithParam<std::tuple<bool, int64_t, int64_t>> {};

TEST_P(SwigluKernel, ForwardAndBackwardMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  const auto [clamped, F, align] = GetParam();
  const int64_t R = 2, T = 37, K = 4, E_local = 5;
  const reference::RankRouting rt = random_routing(R, T, K, E_local, align, 1000 + F + align);
  const int64_t M = rt.num_rows(), capacity = M + 24;  // unused capacity rows stay untouched
  reference::Rng rng(42 + F);
  TensorF h1 = random_bf16_tensor({M, 2 * F}, rng, -9.0, 9.0);  // beyond the clamp limit on purpose
  TensorF gh2 = random_bf16_tensor({M, F}, rng, -1.0, 1.0);
  reference::SwigluParams op;
  op.activation = clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
  op.alpha = 1.5;
  op.limit = 5.0;
  const activation::SwigluParams kp{clamped, 1.5f, 5.0f};
  const float clip_limit = 3.0f;

  std::vector<uint16_t> h1_bits = testing::to_bf16_bits(h1.data);
  h1_bits.resize(capacity * 2 * F, 0);
  DeviceBuffer<uint16_t> d_h1(h1_bits), d_gh2(testing::to_bf16_bits(gh2.data));
  DeviceBuffer<uint16_t> d_h2(capacity * F), d_gh1(capacity * 2 * F);
  DeviceBuffer<float> d_stats(3);
  d_h2.poison();
  d_gh1.poison();
  d_stats.poison();
  RowsOnDevice rows(rt, capacity);
  auto* h1p = reinterpret_cast<const __nv_bfloat16*>(d_h1.get());
  kernels::swiglu_forward(h1p, reinterpret_cast<__nv_bfloat16*>(d_h2.get()), F, rows.view, kp, d_stats.get(),
                          clip_limit, nullptr);
  kernels::swiglu_backward(h1p, reinterpret_cast<const __nv_bfloat16*>(d_gh2.get()),
                           reinterpret_cast<__nv_bfloat16*>(d_gh1.get()), F, rows.view, kp, nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());

  const TensorF want_h2 = reference::swiglu_rows(rt, h1, op);
  const TensorF want_gh1 = reference::swiglu_backward_rows(rt, h1, gh2, op);
  const auto h2_bits = d_h2.download(), gh1_bits = d_gh1.download();
  const TensorF got_h2 = testing::tensor_from_bf16({h2_bits.begin(), h2_bits.begin() + M * F}, {M, F});
  const TensorF got_gh1 = testing::tensor_from_bf16({gh1_bits.begin(), gh1_bits.begin() + M * 2 * F}, {M, 2 * F});
  const auto c1 = reference::compare(got_h2, want_h2, reference::kBf16OutputTolerance);
  const auto c2 = reference::compare(got_gh1, want_gh1, reference::kBf16GradTolerance);
  EXPECT_TRUE(c1.passed) << "h2: " << c1.summary();
  EXPECT_TRUE(c2.passed) << "grad_h1: " << c2.summary();
  EXPECT_LE(c1.bit_mismatches, c1.count / 100) << "SwiGLU should differ from the oracle only by rare exp ulps";
  for (size_t i = M * F; i < h2_bits.size(); ++i) ASSERT_EQ(h2_bits[i], 0xFFFF) << "capacity row written at " << i;

  const auto want_stats = reference::clip_stats(rt, h1, clip_limit);
  const auto got_stats = d_stats.download();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(static_cast<int64_t>(got_stats[i]), want_stats[i]) << "clip stat " << i;
  EXPECT_EQ(want_stats[2], rt.num_valid_rows() * F);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwigluKernel,
                         ::testing::Combine(::testing::Bool(), ::testing::Values<int64_t>(64, 768, 2048),
                                            ::testing::Values<int64_t>(1, 8, 128)));

struct OwnerCase {
  int64_t T, K, D;
  bool int64_ids, bf16_scores;
};

class TopkKernels : public ::testing::TestWithParam<OwnerCase> {};

TEST_P(TopkKernels, BackwardReductionAndRmsnormMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  const OwnerCase c = GetParam();
  reference::Rng rng(7 + c.T + c.D);
  std::vector<int32_t> ids(c.T * c.K);
  TensorF scores({c.T, c.K});
  for (int64_t i = 0; i < c.T * c.K; ++i) {
    ids[i] = rng.below(5) == 0 ? -1 : static_cast<int32_t>(rng.below(64));
    scores.data[i] = ids[i] < 0 ? 0.f : (c.bf16_scores ? rng.bf16_uniform(0.05, 1.0) : float(rng.uniform(0.05, 1.0)));
  }
  for (int64_t k = 0; k < c.K; ++k) ids[k] = -1, scores.data[k] = 0.f;  // token 0 fully padded
  TensorF h3 = random_bf16_tensor({c.T * c.K, c.D}, rng, -2.0, 2.0);
  TensorF gout = random_bf16_tensor({c.T, c.D}, rng, -1.0, 1.0);
  TensorF gx_routes = random_bf16_tensor({c.T * c.K, c.D}, rng, -1.0, 1.0);

  std::vector<int64_t> ids64(ids.begin(), ids.end());
  DeviceBuffer<int32_t> d_ids32(ids);
  DeviceBuffer<int64_t> d_ids64(ids64);
  DeviceBuffer<float> d_scores32(scores.data);
  DeviceBuffer<uint16_t> d_scores16(testing::to_bf16_bits(scores.data));
  kernels::TopkRoutes r;
  r.ids_TK = c.int64_ids ? static_cast<const void*>(d_ids64.get()) : d_ids32.get();
  r.id_dtype = c.int64_ids ? DType::kInt64 : DType::kInt32;
  r.scores_TK = c.bf16_scores ? static_cast<const void*>(d_scores16.get()) : d_scores32.get();
  r.score_dtype = c.bf16_scores ? DType::kBFloat16 : DType::kFloat32;
  r.T = c.T;
  r.K = c.K;
  r.D = c.D;
  DeviceBuffer<uint16_t> d_h3(testing::to_bf16_bits(h3.data)), d_gout(testing::to_bf16_bits(gout.data));
  DeviceBuffer<uint16_t> d_gxr(testing::to_bf16_bits(gx_routes.data));
  DeviceBuffer<uint16_t> d_gh3(c.T * c.K * c.D), d_gx(c.T * c.D), d_out(c.T * c.D), d_gh3n(c.T * c.K * c.D);
  DeviceBuffer<float> d_gs(c.T * c.K), d_rstd(c.T * c.K), d_gsn(c.T * c.K);
  for (auto* b : {&d_gh3, &d_gx, &d_out, &d_gh3n}) b->poison();
  for (auto* b : {&d_gs, &d_rstd, &d_gsn}) b->poison();
  auto bf = [](const DeviceBuffer<uint16_t>& b) { return reinterpret_cast<__nv_bfloat16*>(b.get()); };
  kernels::topk_reduce_backward(r, bf(d_h3), bf(d_gout), bf(d_gh3), d_gs.get(), nullptr);
  kernels::reduce_from_topk(r, bf(d_gxr), bf(d_gx), nullptr);
  kernels::RMSNormArgs a;
  a.eps = 1e-6f;
  kernels::rmsnorm_topk_reduce(r, bf(d_h3), a, bf(d_out), d_rstd.get(), nullptr);
  kernels::rmsnorm_topk_reduce_backward(r, bf(d_h3), d_rstd.get(), bf(d_gout), bf(d_gh3n), d_gsn.get(), nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());

  TensorF want_gh3, want_gs;
  reference::topk_reduce_backward(h3, ids, scores, gout, want_gh3, want_gs);
  const TensorF got_gh3 = testing::tensor_from_bf16(d_gh3.download(), {c.T * c.K, c.D});
  EXPECT_TRUE(reference::bitwise_equal(got_gh3, want_gh3)) << "grad_h3 = BF16(s * g) is a single rounding";
  TensorF got_gs({c.T, c.K});
  got_gs.data = d_gs.download();
  const auto cs = reference::compare(got_gs, want_gs, {1e-4, 1e-4, 1e-5, -2.0});
  EXPECT_TRUE(cs.passed) << "grad_scores: " << cs.summary();
  for (int64_t k = 0; k < c.K; ++k) EXPECT_EQ(got_gs.data[k], 0.f) << "padded route score grad";

  const TensorF want_gx = reference::reduce_from_topk(gx_routes, ids, c.K);
  const TensorF got_gx = testing::tensor_from_bf16(d_gx.download(), {c.T, c.D});
  EXPECT_TRUE(reference::bitwise_equal(got_gx, want_gx)) << "K-reduction order must match the oracle";

  reference::RMSNormSpec spec;
  spec.eps = 1e-6;
  TensorF want_rstd;
  const TensorF want_out = reference::rmsnorm_topk_reduce(h3, ids, scores, spec, want_rstd);
  const TensorF got_out = testing::tensor_from_bf16(d_out.download(), {c.T, c.D});
  const auto co = reference::compare(got_out, want_out, reference::kBf16OutputTolerance);
  EXPECT_TRUE(co.passed) << "rmsnorm out: " << co.summary();
  for (int64_t d = 0; d < c.D; ++d) ASSERT_EQ(got_out.data[d], 0.f) << "fully padded token must be exact zero";
  TensorF got_rstd({c.T, c.K});
  got_rstd.data = d_rstd.download();
  const auto cr = reference::compare(got_rstd, want_rstd, {1e-5, 0.0, 1e-6, -2.0});
  EXPECT_TRUE(cr.passed) << "rstd: " << cr.summary();

  TensorF want_gh3n, want_gsn;
  reference::rmsnorm_topk_reduce_backward(h3, ids, scores, want_rstd, gout, spec, want_gh3n, want_gsn);
  const TensorF got_gh3n = testing::tensor_from_bf16(d_gh3n.download(), {c.T * c.K, c.D});
  const auto cg = reference::compare(got_gh3n, want_gh3n, reference::kBf16GradTolerance);
  EXPECT_TRUE(cg.passed) << "rmsnorm grad_h3: " << cg.summary();
  TensorF got_gsn({c.T, c.K});
  got_gsn.data = d_gsn.download();
  const auto cgs = reference::compare(got_gsn, want_gsn, {1e-3, 1e-3, 1e-4, -2.0});
  EXPECT_TRUE(cgs.passed) << "rmsnorm grad_scores: " << cgs.summary();
}

INSTANTIATE_TEST_SUITE_P(Shapes, TopkKernels,
                         ::testing::Values(OwnerCase{1, 1, 256, false, false}, OwnerCase{33, 2, 256, true, false},
                                           OwnerCase{64, 8, 2048, false, true}, OwnerCase{17, 6, 7168, true, true},
                                           OwnerCase{128, 8, 16384, false, false},
                                           OwnerCase{9, 11, 768, true, false}));  // K past one load batch

}  // namespace
}  // namespace dist_moe
