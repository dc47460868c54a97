// Emulated peers on one GPU (Context::create_emulated, comm::Communicator::emulated; upstream's
// emulate_peer_buffers): rank r of R alone in this process, every virtual peer aliasing its windows.
// Each virtual peer then reads rank r's published tokens, so the layer computes rank r's experts
// for R copies of rank r's tokens, and the routes other ranks' experts own come back as exact zeros.
// The CPU oracle of exactly that (emulated_view): R ranks that all hold rank r's tokens, with the
// routes to other ranks' experts disabled. Output, input and score gradients are then rank r's;
// weight gradients count every routed row R times. Checked at R = 2 and 4, ranks other than 0,
// through the fused route kernel and the routing kernel, in BF16 and every block-scaled format,
// with the layer suites' tolerances; plus the EP group's three combine algorithms bit for bit, and
// saved vs recomputed activations bitwise; and the Mega pipeline's launches (decode and rows forms)
// bit for bit against the same rank's staged pipeline.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dist_moe/comm.h"
#include "dist_moe/context.h"
#include "dist_moe/routed_experts.h"
#include "gpu/multi/layer_suite.h"
#include "gpu_test_util.h"
#include "reference/oracle.h"

namespace {

using namespace dist_moe;
using namespace dist_moe::layer_suite;
using reference::TensorF;

struct EmulatedCase {
  std::string name;
  std::optional<BlockScaledFormat> format;  // none: BF16
  bool inference = false;
  bool mega = false;  // BlockScaledConfig.pipeline = "mega" (its output must equal the staged one's bitwise)
  int world = 2, rank = 1;
  int64_t T_max = 64, T = 64, D = 256, F = 256, K = 2, E = 8;
  // The suites' Case fields layer_suite's helpers read.
  Activation activation = Activation::kSwiGLU;
  bool rmsnorm = false, int64_ids = false, bf16_scores = false;
  int padded_rank = -1;
  DType wgrad = DType::kFloat32;
  uint64_t seed = 5;
};

std::string case_name(const ::testing::TestParamInfo<EmulatedCase>& info) { return info.param.name; }

// What an emulated rank computes, as an R-rank problem: every rank holds `rank`'s tokens and
// scores, with the routes to experts of other ranks set to -1.
reference::Problem emulated_view(const reference::Problem& p, int rank) {
  reference::Problem q = p;
  const int64_t L = p.num_local_experts();
  std::vector<int32_t> ids = p.ids_TK[rank];
  for (int32_t& id : ids)
    if (id >= 0 && id / L != rank) id = -1;
  for (int64_t s = 0; s < p.num_ranks; ++s) {
    q.x_TD[s] = p.x_TD[rank];
    q.ids_TK[s] = ids;
    q.scores_TK[s] = p.scores_TK[rank];
  }
  return q;
}

reference::Quantization quantization_of(const EmulatedCase& c) {
  if (!c.format) return reference::Quantization::kNone;
  switch (*c.format) {
    case BlockScaledFormat::kMXFP8_E4M3: return reference::Quantization::kMXFP8;
    case BlockScaledFormat::kNVFP4: return reference::Quantization::kNVFP4;
    case BlockScaledFormat::kFP8Blockwise: return reference::Quantization::kFP8Blockwise;
  }
  return reference::Quantization::kNone;
}

Config config_of(const EmulatedCase& c, bool full_slot) {
  std::optional<BlockScaledConfig> b;
  if (c.format) b = BlockScaledConfig{}, b->format = *c.format;
  if (c.mega) b->pipeline = BlockScaledPipeline::kMega;
  Config cfg = suite_config(c, c.world, full_slot && !c.inference, b);
  if (c.inference) {
    cfg.inference = true;
    cfg.num_activation_slots = 0;
    cfg.wgrad_dtype.reset();
  }
  return cfg;
}

// Rank c.rank's inputs from the original problem (its own routes, to every rank's experts) and its
// experts' weights, BF16 or prepared on the GPU.
struct EmulatedInputs : TokenInputs {
  Dev<uint16_t> w13, w2, gout;
  std::optional<PreparedOnGpu> w13_prepared, w2_prepared;
  RoutedExpertsInputs in;
  EmulatedInputs(const EmulatedCase& c, const reference::Problem& p, const TensorF& grad_out, cudaStream_t stream)
      : TokenInputs(p, c.rank), gout(bf16_bits(grad_out)) {
    const int64_t L = p.num_local_experts();
    point(c, in);
    if (c.format) {
      // MXFP8 inference contexts read training preparations (32x32 tiles); the others their own.
      const bool inference_prep = c.inference && *c.format != BlockScaledFormat::kMXFP8_E4M3;
      w13_prepared.emplace(p.local_w13(c.rank), *c.format, inference_prep, L, 2 * c.F, c.D, stream);
      w2_prepared.emplace(p.local_w2(c.rank), *c.format, inference_prep, L, c.D, c.F, stream);
      in.w13_prepared = &w13_prepared->w;
      in.w2_prepared = &w2_prepared->w;
    } else {
      w13 = Dev<uint16_t>(bf16_bits(p.local_w13(c.rank)));
      w2 = Dev<uint16_t>(bf16_bits(p.local_w2(c.rank)));
      in.w13 = w13.get();
      in.w13_shape = {L, 2 * c.F, c.D};
      in.w2 = w2.get();
      in.w2_shape = {L, c.D, c.F};
    }
  }
};

// One call of the case on `stream`: a training forward + backward, or an inference forward.
void issue_calls(Context& ctx, const EmulatedCase& c, const EmulatedInputs& inp, SavedState* st, Outputs& o,
                 cudaStream_t stream) {
  const ExecutionOptions opts = suite_options(c);
  if (c.inference) {
    routed_experts_inference(ctx, inp.in, o.out.get(), opts, stream);
  } else {
    routed_experts_forward(ctx, inp.in, o.out.get(), st, opts, stream);
    routed_experts_backward(ctx, inp.in, *st, inp.gout.get(), o.g, opts, stream);
  }
}

Result run_emulated(const EmulatedCase& c, const reference::Problem& p, const TensorF& grad_out, bool full_slot,
                    cudaStream_t stream) {
  auto ctx = Context::create_emulated(config_of(c, full_slot), c.rank, c.world);
  EXPECT_EQ(ctx->rank(), c.rank);
  EXPECT_EQ(ctx->ep_size(), c.world);
  const MemoryPlan want = plan_memory(ctx->config(), c.world);  // the plan of an EP size-R rank
  EXPECT_EQ(ctx->memory_plan().total_device_buffer_bytes, want.total_device_buffer_bytes);
  EXPECT_EQ(ctx->memory_plan().total_scratch_capacity_rows, want.total_scratch_capacity_rows);
  EXPECT_EQ(ctx->capacity_rows(), want.total_scratch_capacity_rows);
  const int64_t L = ctx->local_experts();
  EmulatedInputs inp(c, p, grad_out, stream);
  Outputs o(c, L);
  std::optional<SavedState> st;
  if (!c.inference) st.emplace(*ctx);
  issue_calls(*ctx, c, inp, st ? &*st : nullptr, o, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  Result r = o.read(L);
  ctx->close();
  return r;
}

class EmulatedPeersLayer : public ::testing::TestWithParam<EmulatedCase> {};

TEST_P(EmulatedPeersLayer, MatchesTheOracleOfItsView) {
  DMOE_REQUIRE_SM90();
  const EmulatedCase& c = GetParam();
  const reference::Problem p = reference::make_random_problem(problem_spec(c, c.world));
  const std::vector<TensorF> grad_out = reference::make_random_grad_out(p, c.seed + 99);

  const reference::Problem view = emulated_view(p, c.rank);
  reference::ForwardOptions fo;
  if (c.rmsnorm) fo.rmsnorm = reference::RMSNormSpec{1e-6, {}, 0.0};
  fo.quantization = quantization_of(c);
  // MXFP8 training: the staged layer quantizes every operand once at its shared scale (G152); Mega's forward
  // launch reads the exact 1x32 rows and its backward the re-rounded operands.
  fo.mxfp8_training_operands = c.inference || c.mega ? reference::Mxfp8TrainingOperands::kExactForward
                                                     : reference::Mxfp8TrainingOperands::kSharedOnce;
  if (c.format) fo.row_alignment = *c.format == BlockScaledFormat::kNVFP4 ? 32 : 128;  // the suites' padding
  const std::vector<TensorF> view_grad_out(c.world, grad_out[c.rank]);
  const reference::ForwardResult fwd = reference::forward(view, fo);

  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  const Result got = run_emulated(c, p, grad_out[c.rank], /*full_slot=*/false, stream);

  // The suites' bounds: element-wise in BF16; relL2 and cosine only for block-scaled formats (an
  // E4M3 rounding may land one step apart where a BF16 input differs in its last bit).
  const bool bf16 = !c.format;
  auto bounds = [&](reference::Tolerance t) { return bf16 ? t : aggregate(t); };
  const bool fp8_blockwise = c.format == BlockScaledFormat::kFP8Blockwise;
  const reference::Tolerance fwd_tol{2e-2, 2e-2, fp8_blockwise ? 1e-2 : 5e-3, 0.999};
  auto expect_close = [&](const char* what, const TensorF& a, const TensorF& b, const reference::Tolerance& t) {
    const auto cmp = reference::compare(a, b, bounds(t));
    EXPECT_TRUE(cmp.passed) << what << ": " << cmp.summary();
  };
  const auto& f = fwd.ranks[c.rank];
  expect_close("out", got.out, f.out_TD, fwd_tol);
  if (c.mega) {  // the same rank's staged pipeline, bit for bit (the Mega launch's x gather reads the peers' windows)
    EmulatedCase staged = c;
    staged.mega = false;
    // (training: the staged sequence Mega's forward launch runs, the per-32 FPROPs; G151)
    std::optional<layer_suite::ScopedEnv> per32;
    if (!c.inference) per32.emplace("DMOE_MXFP8_FPROP_PER32", "1");
    const Result want = run_emulated(staged, p, grad_out[c.rank], /*full_slot=*/false, stream);
    EXPECT_TRUE(bitwise(got, want)) << "mega differs from staged";
  }
  if (!c.inference) {
    reference::BackwardOptions bo;
    bo.wgrad_dtype = c.wgrad;
    const reference::BackwardResult bwd = reference::backward(view, fwd, view_grad_out, bo);
    const auto& b = bwd.ranks[c.rank];
    expect_close("grad_x", got.grad_x, b.grad_x_TD, {3e-2, 3e-2, 1e-2, 0.995});
    expect_close("grad_scores", got.grad_scores, b.grad_scores_TK, {3e-2, 3e-2, 1e-2, 0.995});
    expect_close("dW13", got.dw13, b.dw13_EFD, {3e-2, 1.0, 1.5e-2, 0.995});
    expect_close("dW2", got.dw2, b.dw2_EDF, {3e-2, 1.0, 1.5e-2, 0.995});
    // Routes to absent ranks' experts: exactly zero score gradients (their rows read as zeros).
    const int64_t L = p.num_local_experts();
    for (size_t i = 0; i < p.ids_TK[c.rank].size(); ++i) {
      const int32_t id = p.ids_TK[c.rank][i];
      if (id >= 0 && id / L != c.rank) EXPECT_EQ(got.grad_scores.data[i], 0.f) << "route " << i;
    }
    // The saved path (slot = maximum useful) against the all-recompute path, bitwise.
    const Result saved = run_emulated(c, p, grad_out[c.rank], /*full_slot=*/true, stream);
    EXPECT_TRUE(bitwise(saved, got)) << "saved activations vs recompute differ";
  }
  cudaStreamDestroy(stream);
}

// Mega (issue #28) at EP 4 and 2: the decode form (8 local experts, at most 4 ranks x 8 tokens x 2
// routes = 64 routed rows: <= 12 per expert) for NVFP4 and MXFP8 inference, the rows form for MXFP8
// inference and training.
std::vector<EmulatedCase> mega_cases() {
  std::vector<EmulatedCase> v;
  EmulatedCase c;
  c = {"nvfp4_mega_decode_ep4_rank2"}; c.format = BlockScaledFormat::kNVFP4; c.inference = true; c.mega = true;
  c.world = 4; c.rank = 2; c.E = 32; c.T_max = c.T = 8; v.push_back(c);
  c = {"mxfp8_mega_decode_ep4_rank1"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.inference = true; c.mega = true;
  c.world = 4; c.rank = 1; c.E = 32; c.T_max = c.T = 8; c.activation = Activation::kSwiGLUClamped; v.push_back(c);
  c = {"mxfp8_mega_rows_inference_ep2_rank1"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.inference = true;
  c.mega = true; v.push_back(c);
  c = {"mxfp8_mega_training_ep4_rank3"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.mega = true; c.world = 4;
  c.rank = 3; c.rmsnorm = true; v.push_back(c);
  // 16 local experts for ~32 routed rows: some experts get none (the rows form's empty experts).
  c = {"mxfp8_mega_training_empty_experts_ep2_rank0"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.mega = true;
  c.rank = 0; c.E = 32; c.T_max = c.T = 16; v.push_back(c);
  return v;
}

std::vector<EmulatedCase> emulated_cases() {
  std::vector<EmulatedCase> v;
  EmulatedCase c;
  c = {"bf16_ep2_rank1"}; v.push_back(c);
  c = {"bf16_ep4_rank2_k4"}; c.world = 4; c.rank = 2; c.K = 4; v.push_back(c);
  // R * T_max * K = 32768 routes: past the fused route kernel, so publish + routing kernel + EP barrier.
  c = {"bf16_ep4_rank3_routing_kernel"}; c.world = 4; c.rank = 3; c.T_max = 4096; v.push_back(c);
  c = {"bf16_ep2_rank0_rmsnorm_clamped"}; c.rank = 0; c.rmsnorm = true;
  c.activation = Activation::kSwiGLUClamped; v.push_back(c);
  c = {"mxfp8_ep2_rank1"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.T_max = c.T = 96; v.push_back(c);
  c = {"mxfp8_ep2_rank0_clamped_rmsnorm"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.rank = 0;
  c.activation = Activation::kSwiGLUClamped; c.rmsnorm = true; v.push_back(c);
  c = {"mxfp8_ep4_rank2"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.world = 4; c.rank = 2; v.push_back(c);
  c = {"fp8_blockwise_ep2_rank1"}; c.format = BlockScaledFormat::kFP8Blockwise; c.T_max = c.T = 96; v.push_back(c);
  c = {"fp8_blockwise_ep4_rank3"}; c.format = BlockScaledFormat::kFP8Blockwise; c.world = 4; c.rank = 3; v.push_back(c);
  c = {"mxfp8_inference_ep2_rank1"}; c.format = BlockScaledFormat::kMXFP8_E4M3; c.inference = true; v.push_back(c);
  c = {"fp8_blockwise_inference_ep4_rank1"}; c.format = BlockScaledFormat::kFP8Blockwise; c.inference = true;
  c.world = 4; v.push_back(c);
  c = {"nvfp4_inference_ep2_rank1"}; c.format = BlockScaledFormat::kNVFP4; c.inference = true; v.push_back(c);
  c = {"nvfp4_inference_ep4_rank2"}; c.format = BlockScaledFormat::kNVFP4; c.inference = true; c.world = 4;
  c.rank = 2; v.push_back(c);
  for (const EmulatedCase& m : mega_cases()) v.push_back(m);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, EmulatedPeersLayer, ::testing::ValuesIn(emulated_cases()), case_name);

// The case's calls captured in one CUDA graph (global capture mode: a host synchronization inside
// fails the capture; the emulation's route-slot zeroing is a captured memset), replayed twice:
// bitwise equal to the eager calls.
class EmulatedPeersGraph : public ::testing::TestWithParam<EmulatedCase> {};

TEST_P(EmulatedPeersGraph, ReplayEqualsEagerBitwise) {
  DMOE_REQUIRE_SM90();
  const EmulatedCase& c = GetParam();
  const reference::Problem p = reference::make_random_problem(problem_spec(c, c.world));
  const std::vector<TensorF> grad_out = reference::make_random_grad_out(p, c.seed + 99);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  auto ctx = Context::create_emulated(config_of(c, /*full_slot=*/false), c.rank, c.world);
  const int64_t L = ctx->local_experts();
  EmulatedInputs inp(c, p, grad_out[c.rank], stream);
  Outputs eager(c, L), graphed(c, L);
  std::optional<SavedState> st;
  if (!c.inference) st.emplace(*ctx);
  issue_calls(*ctx, c, inp, st ? &*st : nullptr, eager, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const Result want = eager.read(L);
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
  issue_calls(*ctx, c, inp, st ? &*st : nullptr, graphed, stream);
  ASSERT_EQ(cudaStreamEndCapture(stream, &graph), cudaSuccess);
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    DMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(bitwise(graphed.read(L), want)) << "replay " << replay << " differs from eager";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ctx->close();
  cudaStreamDestroy(stream);
}

std::vector<EmulatedCase> graph_cases() {
  std::vector<EmulatedCase> v;
  EmulatedCase c;
  c = {"bf16_ep2_rank1"}; v.push_back(c);
  c = {"fp8_blockwise_ep4_rank3"}; c.format = BlockScaledFormat::kFP8Blockwise; c.world = 4; c.rank = 3; v.push_back(c);
  c = {"nvfp4_inference_ep2_rank1"}; c.format = BlockScaledFormat::kNVFP4; c.inference = true; v.push_back(c);
  for (const EmulatedCase& m : mega_cases()) v.push_back(m);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, EmulatedPeersGraph, ::testing::ValuesIn(graph_cases()), case_name);

// The EP group alone: publish + route + dispatch (fused and as three ops), then each combine
// algorithm with identity experts (y = the dispatched rows). Rank 1 of 2 keeps its routes to its
// own experts, in k order; the others read zeros. Signal sync is requested and runs as the barrier
// (emulated groups have no peers to signal).
TEST(EmulatedPeersEpGroup, CombineAlgorithmsKeepLocalRoutesOnly) {
  DMOE_REQUIRE_SM90();
  constexpr int kWorld = 2, kRank = 1;
  constexpr int64_t T = 48, D = 256, K = 4, E = 8, L = E / kWorld;
  auto comm = comm::Communicator::emulated(kRank, kWorld);
  comm::EpConfig cfg;
  cfg.max_tokens = T;
  cfg.hidden = D;
  cfg.top_k = K;
  cfg.num_experts = E;
  comm::EpGroup ep(*comm, cfg);
  ASSERT_EQ(ep.world_size(), kWorld);
  ASSERT_EQ(ep.local_experts(), L);

  std::mt19937 rng(11);
  std::uniform_real_distribution<float> val(-1.f, 1.f);
  std::uniform_int_distribution<int> expert(-1, static_cast<int>(E) - 1);
  std::vector<float> x(T * D), scores(T * K);
  std::vector<int32_t> ids(T * K);
  for (float& v : x) v = numeric::bf16_to_float(numeric::float_to_bf16(val(rng)));
  for (float& v : scores) v = val(rng);
  for (int32_t& id : ids) id = expert(rng);
  // out[t] = bf16(fmaf chain over k of the routes this rank owns); absent owners add fmaf(s, 0, acc).
  std::vector<uint16_t> want(T * D);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.f;
      for (int64_t k = 0; k < K; ++k) {
        const int32_t id = ids[t * K + k];
        if (id < 0) continue;
        acc = std::fmaf(scores[t * K + k], id / L == kRank ? x[t * D + d] : 0.f, acc);
      }
      want[t * D + d] = numeric::float_to_bf16(acc).bits;
    }

  const Dev<uint16_t> x_d(dist_moe::testing::to_bf16_bits(x));
  const Dev<float> scores_d(scores);
  const Dev<int32_t> ids_d(ids);
  Dev<uint16_t> gathered(ep.capacity_rows() * D), out(T * D);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (const comm::FusedRoute fused : {comm::FusedRoute::kOn, comm::FusedRoute::kOff})
    for (const comm::CombineAlgorithm algo :
         {comm::CombineAlgorithm::kV1, comm::CombineAlgorithm::kV2, comm::CombineAlgorithm::kRankPartials}) {
      comm::DispatchOptions d;
      d.fused = fused;
      ep.publish_route_dispatch(x_d.get(), ids_d.get(), DType::kInt32, T, gathered.get(), stream, d);
      comm::CombineOptions o;
      o.algorithm = algo;
      o.sync = comm::CombineSync::kSignal;
      out.poison();
      ep.combine(gathered.get(), scores_d.get(), DType::kFloat32, out.get(), T, stream, o);
      DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      EXPECT_EQ(out.download(), want) << "fused " << (fused == comm::FusedRoute::kOn) << ", algorithm "
                                      << static_cast<int>(algo);
    }
  cudaStreamDestroy(stream);
}

}  // namespace
