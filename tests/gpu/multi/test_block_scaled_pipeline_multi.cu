// A block-scaled staged training layer end to end, compiled once per format: MXFP8 (issue 25;
// DMOE_SUITE_MXFP8, dist_moe_mxfp8_pipeline_tests) and FP8 blockwise (issue 27;
// DMOE_SUITE_FP8_BLOCKWISE, dist_moe_fp8_blockwise_training_tests). One process per GPU through
// dmoe_launch, as the BF16 suite (test_pipeline_multi.cu) does it: every rank builds the same
// global problem from a seed, runs the CPU oracle's pipeline of the format (upstream's
// quantization points, rows padded to 128 per expert) and the plain BF16 oracle, runs its part of
// the layer with weights prepared on the GPU, and checks
//   - against the format's oracle: the BF16 suite's tolerances (the same quantized operands; only
//     the GEMMs' accumulation order differs; the forward's bound: see kFwd);
//   - against the BF16 oracle: upstream's MXFP8 tolerances (reference/compare.h kMxfp8*; issue 27
//     holds FP8 blockwise to them);
//   - the saved path (slot = maximum useful) bitwise equal to the all-recompute path, graph replay
//     bitwise equal to eager, a no-grad forward equal to the training forward bitwise, an inference
//     context's forward within the forward bound of it, WGRAD accumulation, and the validation texts.
// Prints one line per case and "ALL PASS: N cases" at the end.
//
//   dmoe_launch -n 1 -- dist_moe_mxfp8_pipeline_tests [--filter NAME]   (or _fp8_blockwise_training_)
//   dmoe_launch -n 1 ... -- dist_moe_mxfp8_pipeline_tests --case overflow|bad_id   (must trap)
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/context.h"
#include "dist_moe/prepare_weight.h"
#include "dist_moe/routed_experts.h"
#include "reference/oracle.h"
#include "layer_suite.h"
#include "testing/device_buffer.h"
#include "testing/dist_env.h"

namespace {

using namespace dist_moe;
using reference::TensorF;

using namespace layer_suite;

#if defined(DMOE_SUITE_FP8_BLOCKWISE)
constexpr BlockScaledFormat kFormat = BlockScaledFormat::kFP8Blockwise, kOtherFormat = BlockScaledFormat::kMXFP8_E4M3;
constexpr reference::Quantization kQuantization = reference::Quantization::kFP8Blockwise;
constexpr const char* kSuiteName = "fp8_blockwise_training_tests";
#elif defined(DMOE_SUITE_MXFP8)
constexpr BlockScaledFormat kFormat = BlockScaledFormat::kMXFP8_E4M3, kOtherFormat = BlockScaledFormat::kFP8Blockwise;
constexpr reference::Quantization kQuantization = reference::Quantization::kMXFP8;
constexpr const char* kSuiteName = "mxfp8_pipeline_tests";
#else
#error "define DMOE_SUITE_MXFP8 or DMOE_SUITE_FP8_BLOCKWISE (tests/CMakeLists.txt)"
#endif
constexpr bool kFp8Blockwise = kFormat == BlockScaledFormat::kFP8Blockwise;
const std::string kOracle = std::string(to_string(kFormat)) + " oracle";

struct Case {
  std::string name;
  int64_t T_max = 96, T = 96, D = 256, F = 256, K = 2, E = 8;
  Activation activation = Activation::kSwiGLU;
  bool rmsnorm = false;
  int padded_rank = -1;  // this rank's routes are all -1
  DType wgrad = DType::kFloat32;
  bool int64_ids = false, bf16_scores = false;
  bool cyclic_ids = false;  // upstream's single-rank routes: id = (t*K + k) % E on every rank
  bool exact_h1 = false;    // make_h1_exact: the forward held to the issues' BF16 bound (kFwdExact)
  uint64_t seed = 1;
};

// The problem, the format's oracle (`q`) and the BF16 oracle (`ref`).
struct Problem {
  reference::Problem p;
  reference::ForwardResult q_fwd, ref_fwd;
  reference::BackwardResult q_bwd, ref_bwd;
  std::vector<TensorF> grad_out;
};

Problem make_problem(const Case& c, int world) {
  Problem pr;
  pr.p = reference::make_random_problem(problem_spec(c, world));
  if (c.exact_h1) make_h1_exact(pr.p, c.seed + 17);
  if (c.cyclic_ids)
    for (auto& ids : pr.p.ids_TK)
      for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) ids[i] = static_cast<int32_t>(i % c.E);
  pr.grad_out = reference::make_random_grad_out(pr.p, c.seed + 99);
  reference::BackwardOptions bo;
  bo.wgrad_dtype = c.wgrad;
  reference::ForwardOptions fo;
  if (c.rmsnorm) fo.rmsnorm = reference::RMSNormSpec{1e-6, {}, 0.0};
  pr.ref_fwd = reference::forward(pr.p, fo);
  pr.ref_bwd = reference::backward(pr.p, pr.ref_fwd, pr.grad_out, bo);
  fo.row_alignment = 128;
  fo.quantization = kQuantization;
  // (MXFP8: the staged layer's operands, each quantized once at its shared scale per 128: G152)
  fo.mxfp8_training_operands = reference::Mxfp8TrainingOperands::kSharedOnce;
  pr.q_fwd = reference::forward(pr.p, fo);
  pr.q_bwd = reference::backward(pr.p, pr.q_fwd, pr.grad_out, bo);
  return pr;
}

Config config_of(const Case& c, int world, bool full_slot,
                 BlockScaledPipeline pipeline = BlockScaledPipeline::kStaged) {
  BlockScaledConfig b;
  b.format = kFormat;
  b.pipeline = pipeline;
  return suite_config(c, world, full_slot, b);
}

void sync(cudaStream_t stream) { DMOE_CUDA_CHECK(cudaStreamSynchronize(stream)); }

struct Inputs : TokenInputs {
  Dev<uint16_t> gout;
  // MXFP8: 32x32 tiles (`inference_weights`: 1x32 rows); FP8 blockwise: 128x128 blocks with the
  // transposed copy DGRAD reads (`inference_weights`: without it).
  PreparedOnGpu w13, w2;
  RoutedExpertsInputs in;
  Inputs(const Case& c, const reference::Problem& p, const TensorF& grad_out, int rank, cudaStream_t stream,
         bool inference_weights = false, BlockScaledFormat format = kFormat)
      : TokenInputs(p, rank), gout(bf16_bits(grad_out)),
        w13(p.local_w13(rank), format, inference_weights, p.num_local_experts(), 2 * c.F, c.D, stream),
        w2(p.local_w2(rank), format, inference_weights, p.num_local_experts(), c.D, c.F, stream) {
    point(c, in);
    in.w13_prepared = &w13.w;
    in.w2_prepared = &w2.w;
  }
};

Result run_layer(ncclComm_t nccl, const Case& c, const Problem& pr, int rank, int world, bool full_slot,
                 cudaStream_t stream, BlockScaledPipeline pipeline = BlockScaledPipeline::kStaged) {
  auto ctx = Context::create(config_of(c, world, full_slot, pipeline), nccl);
  const int64_t L = ctx->local_experts();
  Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
  Outputs o(c, L);
  const ExecutionOptions opts = suite_options(c);
  SavedState st(*ctx);
  routed_experts_forward(*ctx, inp.in, o.out.get(), &st, opts, stream);
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), o.g, opts, stream);
  sync(stream);
  Result r = o.read(c, L);
  ctx->close();
  return r;
}

// The worst relL2 of each kind of check in the current case, printed with its PASS / FAIL line so a
// run shows the margins: against the format's oracle the forward output, the gradients (grad_x,
// grad_scores, route gradients) and the WGRADs apart -- each has its own bound -- then against the
// BF16 oracle, the worst single token's output, and where they occur the RMSNorm cases' end-to-end
// grad_x / WGRADs against the oracle (reported, not bounded: check_all) and two GPU results' difference.
struct Margins {
  double out = 0, grads = 0, wgrads = 0, bf16 = 0, token = 0, e2e = 0, gpu = 0;
  // The bucket of a check, by its name ("... vs bf16 ...", two GPU results ("... vs training out"),
  // "out ...", "dW13 ..." / "dW2 ...", the rest).
  double& of(const std::string& what) {
    if (what.find("bf16") != std::string::npos) return bf16;
    if (what.find("vs training") != std::string::npos) return gpu;
    if (what.find("out vs") != std::string::npos) return out;
    if (what.find("dW") != std::string::npos) return wgrads;
    return grads;
  }
  std::string line() const {
    char b[256];
    std::snprintf(b, sizeof(b),
                  " [max relL2 vs %s: out %.2e, grads %.2e, wgrads %.2e; vs bf16 %.2e; worst token's out vs "
                  "oracle %.2e%s%s]",
                  kOracle.c_str(), out, grads, wgrads, bf16, token, optional("; RMSNorm end to end", e2e).c_str(),
                  optional("; GPU vs GPU", gpu).c_str());
    return b;
  }
  static std::string optional(const char* what, double v) {
    char b[64];
    std::snprintf(b, sizeof(b), "%s %.2e", what, v);
    return v > 0 ? b : "";
  }
};
Margins g_margins;

bool check(const std::string& what, const TensorF& got, const TensorF& want, const reference::Tolerance& tol,
           std::string* why) {
  const auto cmp = reference::compare(got, want, tol);
  double& worst = g_margins.of(what);
  worst = std::max(worst, cmp.rel_l2);
  if (!cmp.passed) *why += " " + what + ": " + cmp.summary() + ";";
  return cmp.passed;
}

// The BF16 suite's relL2 and cosine bounds against the format's oracle (issues 25 and 27: forward
// relL2 < 5e-3, gradients < 1e-2, cos > 0.995), applied through aggregate(): element-wise bounds do
// not hold here, because where the GPU's BF16 h2 / dxy / grad_h3 differ from the oracle's in the
// last bit (GEMM accumulation order) an E4M3 rounding may land one E4M3 step apart (a handful of
// elements per case; with RMSNorm, outputs of magnitude ~1, such a step is 0.03-0.07 absolute).
// FP8 blockwise's forward is held to 1e-2, as in its inference suite: there a last-bit difference
// of the BF16 element that is its block's amax moves the block's FP32 scale (amax / 448) and with
// it the E4M3 rounding of all 128 values of the block (MXFP8's power-of-two scale rarely moves);
// test_block_scaled_inference_multi.cu holds exact-h1 cases to 5e-3. MXFP8's forward too since its
// training FPROPs run the FP8-blockwise kernel (session 72, perf_history G151): the FP8 wgmma adds 128
// products of K in its own accumulator before each FP32 promotion (32 for the per-32 kernel), so more
// BF16 h1 / h3 elements land one last bit from the oracle's exact sums, and with them more E4M3
// roundings of h2 (s75 r2, the margins by kind: random cases' forward 0.5-5.0e-3 for MXFP8, 0.8-6.7e-3
// for FP8 blockwise; the worst single token's ~2e-2).
// Session 77 (G158): MXFP8's W13 promotes every 64 of K (Context::Impl::w13_promote_k), which brings its
// random cases' forward to 2.2-4.6e-3 (s77 n1: bounded_T's 4.59e-3 the largest; 3.5-5.0e-3 at 128), so
// MXFP8's forward is held to the issue's 5e-3 again (kFwdExact) -- FP8 blockwise's, at 128, stays at 1e-2.
// The exact-h1 cases (make_h1_exact: no h1 last bit differs, so no h2 rounding either) are held to the
// issues' forward bound itself (kFwdExact, layer_suite.h; s75 r2: 0.8-1.2e-3 in both formats). The
// gradients and the WGRADs are held to the issues' 1e-2 (s75 r3, the checked ones: at most 6.5e-3 / 4.8e-3).
const reference::Tolerance kFwd{2e-2, 2e-2, 1e-2, 0.999};
const reference::Tolerance kGrad{3e-2, 3e-2, 1e-2, 0.995};
const reference::Tolerance kWgrad{3e-2, 1.0, 1e-2, 0.995};
// Against the BF16 reference upstream judges MXFP8 by relL2 and cosine only (its test catalog:
// "relL2 and cos per the fwd/grad/wgrad table"); the table's element-wise pair is not applied there,
// nor here (aggregate()).

// The comparisons against the BF16 reference are statistics of the quantization noise (relL2 ~0.06
// against upstream's 0.075): upstream makes them at T=128; with a few tokens (T=8: 16 score
// gradients) they measure the sample, not the layer (measured: grad_scores relL2 0.091 at T=8).
// Small cases are judged against the format's oracle only. FP8 blockwise from T = 64: at T = 40 the
// recipe itself (the CPU oracle, no GPU involved) measured grad_scores relL2 0.058-0.079 against the
// BF16 oracle over four seeds (0.079 at varying_t's seed 97), at T = 96 and 128 0.061-0.065
// (session 22; MXFP8's oracle 0.055-0.066).
bool judged_against_bf16(const Case& c) { return c.T >= (kFp8Blockwise ? 64 : 32); }

bool check_forward(const Case& c, const Problem& pr, const TensorF& out, int rank, const std::string& tag,
                   std::string* why) {
  g_margins.token = std::max(g_margins.token, worst_token_rel_l2(out, pr.q_fwd.ranks[rank].out_TD));
  bool ok = check(tag + "out vs " + kOracle, out, pr.q_fwd.ranks[rank].out_TD, aggregate(c.exact_h1 || !kFp8Blockwise ? kFwdExact : kFwd), why);
  if (judged_against_bf16(c))
    ok &= check(tag + "out vs bf16 (upstream mxfp8 tol)", out, pr.ref_fwd.ranks[rank].out_TD,
                aggregate(reference::kMxfp8ForwardTolerance), why);
  return ok;
}

bool check_all(const Case& c, const Problem& pr, const Result& r, int rank, std::string* why) {
  const auto& qb = pr.q_bwd.ranks[rank];
  const auto& rb = pr.ref_bwd.ranks[rank];
  bool ok = check_forward(c, pr, r.out, rank, "", why);
  ok &= check("grad_scores vs " + kOracle, r.grad_scores, qb.grad_scores_TK, aggregate(kGrad), why);
  // With the RMSNorm postprocess, grad_h3 depends on h3 (n = h3 / rms), whose last bits differ from
  // the oracle's (GEMM accumulation order); about one E4M3 rounding of grad_h3 in twenty then
  // differs by an E4M3 step, which puts end-to-end grad_x / WGRAD at relL2 ~1e-2 from the oracle
  // (measured 0.96-1.02e-2, against ~3e-3 without RMSNorm, where grad_h3 = s * g is bit-exact).
  // Those are judged by case_rmsnorm_routes instead: the GPU's route gradients against the oracle's,
  // then the expert backward from the oracle's route gradients against the oracle, at this suite's
  // tolerances. End to end they are reported (the margins line) and held to upstream's bounds
  // against the BF16 reference below.
  if (!c.rmsnorm) {
    ok &= check("grad_x vs " + kOracle, r.grad_x, qb.grad_x_TD, aggregate(kGrad), why);
    ok &= check("dW13 vs " + kOracle, r.dw13, qb.dw13_EFD, aggregate(kWgrad), why);
    ok &= check("dW2 vs " + kOracle, r.dw2, qb.dw2_EDF, aggregate(kWgrad), why);
  } else {
    for (const auto& [got, want] : {std::pair{&r.grad_x, &qb.grad_x_TD}, {&r.dw13, &qb.dw13_EFD}, {&r.dw2, &qb.dw2_EDF}})
      g_margins.e2e = std::max(g_margins.e2e, reference::compare(*got, *want).rel_l2);
  }
  if (judged_against_bf16(c)) {
    ok &= check("grad_x vs bf16", r.grad_x, rb.grad_x_TD, aggregate(reference::kMxfp8GradTolerance), why);
    ok &= check("grad_scores vs bf16", r.grad_scores, rb.grad_scores_TK, aggregate(reference::kMxfp8GradTolerance),
                why);
    ok &= check("dW13 vs bf16", r.dw13, rb.dw13_EFD, aggregate(reference::kMxfp8WgradTolerance), why);
    ok &= check("dW2 vs bf16", r.dw2, rb.dw2_EDF, aggregate(reference::kMxfp8WgradTolerance), why);
  }
  if (c.padded_rank == rank) {  // a fully padded rank: exact zeros
    bool zeros = true;
    for (float v : r.out.data) zeros &= v == 0.f;
    for (float v : r.grad_x.data) zeros &= v == 0.f;
    for (float v : r.grad_scores.data) zeros &= v == 0.f;
    if (!zeros) ok = false, *why += " padded rank not exactly zero;";
  }
  return ok;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"basic"});
  Case c;
  c = {"bounded_T"}; c.T_max = 96; c.T = 40; v.push_back(c);
  c = {"padded_rank1"}; c.padded_rank = 1; v.push_back(c);
  c = {"k6_e8"}; c.K = 6; c.E = 8; v.push_back(c);
  c = {"clamped_swiglu"}; c.activation = Activation::kSwiGLUClamped; v.push_back(c);
  c = {"rmsnorm_k2"}; c.rmsnorm = true; v.push_back(c);
  c = {"rmsnorm_k2_seed2"}; c.rmsnorm = true; c.seed = 2; v.push_back(c);
  c = {"rmsnorm_k8_seed3"}; c.rmsnorm = true; c.K = 8; c.seed = 3; v.push_back(c);
  c = {"bf16_wgrad_int64_ids_bf16_scores"}; c.wgrad = DType::kBFloat16; c.int64_ids = true; c.bf16_scores = true;
  v.push_back(c);
  c = {"t1"}; c.T_max = 8; c.T = 1; v.push_back(c);
  // The torch suite's bounded-T shape: T = 8 of 32, D = F = 256, E = 4, cyclic routes.
  c = {"t8_of_32_e4_cyclic"}; c.T_max = 32; c.T = 8; c.E = 4; c.cyclic_ids = true; c.seed = 108; v.push_back(c);
  c = {"wide_e64_d384_f640"}; c.E = 64; c.K = 8; c.D = 384; c.F = 640; c.T = 64; c.T_max = 64; v.push_back(c);
  // DeepSeek-V3's 256 experts on one rank: the GEMMs' scheduler tables at their largest (FP8
  // blockwise DGRAD on its one-stage-shallower tile, session 35).
  c = {"e256_k8"}; c.E = 256; c.K = 8; c.T = 256; c.T_max = 256; v.push_back(c);
  // The forward at the issues' bound (kFwdExact): shapes of the cases above, h1 exact on both sides.
  c = {"exact_h1"}; c.exact_h1 = true; c.seed = 41; v.push_back(c);
  c = {"exact_h1_rmsnorm_k8"}; c.exact_h1 = true; c.rmsnorm = true; c.K = 8; c.seed = 42; v.push_back(c);
  c = {"exact_h1_wide_e64_d384_f640"}; c.exact_h1 = true; c.E = 64; c.K = 8; c.D = 384; c.F = 640; c.T = c.T_max = 64;
  c.seed = 43; v.push_back(c);
  // Eight K blocks per W13 GEMM, six per W2, 128 routed rows per expert.
  c = {"exact_h1_t256_d1024_f768_k4"}; c.exact_h1 = true; c.K = 4; c.D = 1024; c.F = 768; c.T = c.T_max = 256;
  c.seed = 44; v.push_back(c);
  return v;
}

// ---- cases with their own flow ----------------------------------------------------------------

// RMSNorm: (1) the route gradients the layer publishes (grad_expert_output_out_TKD) against the
// oracle's grad_h3; (2) the expert backward run from the oracle's route gradients
// (grad_expert_output_TKD: published as given) against the oracle's grad_x and WGRADs -- both at
// this suite's BF16 tolerances (see check_all).
bool case_rmsnorm_routes(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  bool ok = true;
  for (int64_t K : {2, 8}) {
    Case c{"rmsnorm_routes"};
    c.rmsnorm = true;
    c.K = K;
    c.seed = 31 + K;
    const Problem pr = make_problem(c, world);
    const auto& qb = pr.q_bwd.ranks[rank];
    auto ctx = Context::create(config_of(c, world, false), nccl);
    const int64_t L = ctx->local_experts();
    Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
    Outputs out(c, L);
    ExecutionOptions o = suite_options(c);
    Dev<uint16_t> routes_out(c.T * c.K * c.D);
    o.grad_expert_output_out_TKD = routes_out.get();
    SavedState st(*ctx);
    routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), out.g, o, stream);
    sync(stream);
    const std::string tag = "K=" + std::to_string(K) + " ";
    ok &= check(tag + "route gradients vs " + kOracle, testing::tensor_from_bf16(routes_out.download(), {c.T * c.K, c.D}),
                qb.grad_h3_TKD, aggregate(kGrad), why);

    // The caller differentiates its own reduction: no fused postprocess in this call.
    ExecutionOptions given;
    given.validate_expert_ids = true;
    const Dev<uint16_t> oracle_routes(bf16_bits(qb.grad_h3_TKD));
    given.grad_expert_output_TKD = oracle_routes.get();
    Outputs out2(c, L);
    routed_experts_forward(*ctx, inp.in, out2.out.get(), &st, given, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), out2.g, given, stream);
    sync(stream);
    const Result r = out2.read(c, L);
    ok &= check(tag + "grad_x from oracle routes vs " + kOracle, r.grad_x, qb.grad_x_TD, aggregate(kGrad), why);
    ok &= check(tag + "dW13 from oracle routes vs " + kOracle, r.dw13, qb.dw13_EFD, aggregate(kWgrad), why);
    ok &= check(tag + "dW2 from oracle routes vs " + kOracle, r.dw2, qb.dw2_EDF, aggregate(kWgrad), why);
    ctx->close();
  }
  return ok;
}

// Forward + backward captured in one CUDA graph (global capture mode), replayed twice: bitwise
// equal to eager, the planner back to its initial state after each replay.
bool case_graph(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"graph"};
  c.seed = 7;
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world, false), nccl);
  const int64_t L = ctx->local_experts();
  Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
  Outputs eager(c, L), graphed(c, L);
  SavedState st(*ctx);
  const ExecutionOptions o = suite_options(c);
  const auto before = planner_snapshot(*ctx);
  routed_experts_forward(*ctx, inp.in, eager.out.get(), &st, o, stream);
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), eager.g, o, stream);
  sync(stream);
  bool ok = true;
  const Result want = eager.read(c, L);
  replay_graph(
      stream,
      [&] {
        routed_experts_forward(*ctx, inp.in, graphed.out.get(), &st, o, stream);
        routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), graphed.g, o, stream);
      },
      [&](int replay) {
        if (!bitwise(graphed.read(c, L), want)) ok = false, *why += " replay " + std::to_string(replay) + " != eager;";
        if (planner_snapshot(*ctx) != before) ok = false, *why += " planner not restored after replay;";
      });
  ok &= check_all(c, pr, want, rank, why);
  ctx->close();
  return ok;
}

// An inference context and a training context under no-grad (no SavedState) give the training
// forward's output bit for bit; the no-grad forward leaves the slot stacks untouched. FP8 blockwise:
// the inference context pads experts to 32 rows, not 128, which makes these calls decode-sized
// (GroupedGemmProblem::m_bound): its swap-AB tile promotes every 32 of K, the training context's
// prefill tiles every 128, so the two outputs agree within the forward bounds, not bit for bit.
bool case_inference_and_no_grad(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"inference"};
  c.seed = 11;
  const Problem pr = make_problem(c, world);
  const ExecutionOptions o = suite_options(c);
  const Result trained = run_layer(nccl, c, pr, rank, world, false, stream);
  bool ok = true;
  Config inf = config_of(c, world, false);
  inf.inference = true;
  inf.num_activation_slots = 0;
  inf.wgrad_dtype.reset();
  {
    auto ctx = Context::create(inf, nccl);
    Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
    Outputs out(c, ctx->local_experts());
    routed_experts_inference(*ctx, inp.in, out.out.get(), o, stream);
    sync(stream);
    const TensorF got = out.read(c, ctx->local_experts()).out;
    ok &= check_forward(c, pr, got, rank, "inference ", why);
    // Not the same bits: FP8 blockwise's inference quantizes x at the source, and MXFP8's reads the
    // exact 1x32 rows with the per-32 GEMMs where training's FPROPs read them at shared scales (G151).
    ok &= check("inference out vs training out", got, trained.out, aggregate(kFwd), why);
    Inputs inf_w(c, pr.p, pr.grad_out[rank], rank, stream, /*inference_weights=*/true);
    if (kFp8Blockwise) {  // weights prepared for inference (no transposed copy): the same bits
      Outputs out_w(c, ctx->local_experts());
      routed_experts_inference(*ctx, inf_w.in, out_w.out.get(), o, stream);
      sync(stream);
      if (!reference::bitwise_equal(out_w.read(c, ctx->local_experts()).out, got))
        ok = false, *why += " inference-prepared weights give other bits;";
    } else {  // MXFP8: a weight prepared for inference (1x32 rows) has no Hopper GEMM: a clear error
      try {
        routed_experts_inference(*ctx, inf_w.in, out.out.get(), o, stream);
        ok = false, *why += " inference-prepared weights were accepted;";
      } catch (const Error& e) {
        if (std::string(e.what()).find("no Hopper GEMM yet") == std::string::npos)
          ok = false, *why += std::string(" unexpected error: ") + e.what() + ";";
      }
    }
    ctx->close();
  }
  {
    auto ctx = Context::create(config_of(c, world, false), nccl);
    Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
    Outputs out(c, ctx->local_experts());
    const auto before = planner_snapshot(*ctx);
    routed_experts_forward(*ctx, inp.in, out.out.get(), nullptr, o, stream);
    sync(stream);
    const TensorF got = out.read(c, ctx->local_experts()).out;
    if (!reference::bitwise_equal(got, trained.out)) ok = false, *why += " no-grad out != training out;";
    if (planner_snapshot(*ctx) != before) ok = false, *why += " no-grad forward changed the slot state;";
    ctx->close();
  }
  return ok;
}

// Mega (MXFP8 inference; issue #28): Mega runs the staged kernels' numerics in one launch -- on
// decode-sized inference contexts (at most 12 routed rows per local expert) the 16-token tiles, on
// larger ones the 128x128 tiles with h2 quantized in the W13 epilogue -- so its output equals the
// staged context's bit for bit, eager, on a second call and in graph replays, and passes the same
// oracle checks. Ragged by random routing; T < T_max, clamped SwiGLU, RMSNorm and an all-padding
// rank in both forms (training: case_mega_training).
bool case_mega_inference(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case base{"mega"};
  base.T_max = base.T = 24;
  base.K = 4;
  base.E = 16;  // 96 routes: 6 rows per expert on average
  base.D = 512;
  base.F = 768;
  std::vector<Case> cases{base};
  Case c = base; c.name = "mega_clamped_bounded_T"; c.activation = Activation::kSwiGLUClamped; c.T = 9; c.seed = 3;
  cases.push_back(c);
  c = base; c.name = "mega_rmsnorm_k8"; c.rmsnorm = true; c.K = 8; c.T = c.T_max = 12; c.seed = 4; cases.push_back(c);
  c = base; c.name = "mega_e64"; c.E = 64; c.K = 8; c.T = c.T_max = 64; c.seed = 5; cases.push_back(c);
  // A rank whose tokens are all -1 (exact zeros; on one GPU no chunk at all: an empty tile stream).
  c = base; c.name = world > 1 ? "mega_padded_rank1" : "mega_all_padding"; c.padded_rank = world > 1 ? 1 : 0;
  c.seed = 6;
  cases.push_back(c);
  // The rows form: 128 routed rows per expert (whole 128-row chunks), 32 to 64 (partial chunks).
  Case rows = base; rows.name = "mega_rows"; rows.T = rows.T_max = 512; rows.seed = 7; cases.push_back(rows);
  c = rows; c.name = "mega_rows_clamped_bounded_T"; c.activation = Activation::kSwiGLUClamped; c.T_max = 256;
  c.T = 150; c.seed = 8; cases.push_back(c);
  c = rows; c.name = "mega_rows_rmsnorm_e64_k8"; c.rmsnorm = true; c.E = 64; c.K = 8; c.T = c.T_max = 256; c.seed = 9;
  cases.push_back(c);
  c = rows; c.name = world > 1 ? "mega_rows_padded_rank1" : "mega_rows_all_padding"; c.padded_rank = world > 1 ? 1 : 0;
  c.seed = 10;
  cases.push_back(c);
  bool ok = true;
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    if (k.E % world != 0) continue;
    const Problem pr = make_problem(k, world);
    const ExecutionOptions o = suite_options(k);
    Config inf = config_of(k, world, false);
    inf.inference = true;
    inf.num_activation_slots = 0;
    inf.wgrad_dtype.reset();
    Config mega_cfg = inf;
    mega_cfg.block_scaled->pipeline = BlockScaledPipeline::kMega;
    auto staged = Context::create(inf, nccl);
    auto mega = Context::create(mega_cfg, nccl);
    Inputs inp(k, pr.p, pr.grad_out[rank], rank, stream);
    auto run = [&](Context& ctx) {
      Outputs out(k, ctx.local_experts());
      routed_experts_inference(ctx, inp.in, out.out.get(), o, stream);
      sync(stream);
      return out.read(k, ctx.local_experts()).out;
    };
    const TensorF want = run(*staged);
    const TensorF got = run(*mega);
    ok &= check_forward(k, pr, got, rank, k.name + " ", why);
    if (k.padded_rank == rank)
      for (float v : got.data)
        if (v != 0.f) { ok = false, *why += " " + k.name + ": padded rank not exactly zero;"; break; }
    if (!reference::bitwise_equal(got, want)) ok = false, *why += " " + k.name + ": mega != staged;";
    if (!reference::bitwise_equal(run(*mega), want)) ok = false, *why += " " + k.name + ": second mega call != staged;";
    if (k.name == "mega" || k.name == "mega_rows") {  // graph replays, each form
      Outputs graphed(k, mega->local_experts());
      replay_graph(
          stream, [&] { routed_experts_inference(*mega, inp.in, graphed.out.get(), o, stream); },
          [&](int replay) {
            if (!reference::bitwise_equal(graphed.read(k, mega->local_experts()).out, want))
              ok = false, *why += " mega replay " + std::to_string(replay) + " != staged;";
          });
    }
    staged->close();
    mega->close();
  }
  return ok;
}

// WGRAD accumulation: two backward calls into the same buffers leave twice one call's gradient.
// Mega for MXFP8 training (issue #28; the forward's W13, h2 quantization and W2 in one launch, x's
// rows + columns quantization staged; the backward's W2 DGRAD, SwiGLU backward and dxy quantization
// in one launch, the rest staged): on the 128x128 tiles the staged per-32 FPROPs take at these sizes,
// with the W13 epilogue writing the quantizers' bytes (h2 rows, h2's saved column bundle) and h1, so
// forward and backward equal bit for bit a staged context on the per-32 FPROPs (DMOE_MXFP8_FPROP_PER32=1;
// the default staged FPROPs run the FP8-blockwise kernel on rows at shared scales, G151) -- with the
// saved state (a full slot) and with the backward's recompute (the default slot) -- and pass the oracle
// checks. Plain, clamped, RMSNorm (K = 8), a padded rank; and a second step accumulating the weight
// gradients (BF16 and FP32) equal to that staged context's second step.
bool case_mega_training(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case base{"mega_train"};
  base.T = base.T_max = 256;
  base.K = 4;  // 128 routed rows per expert of 8: the 128x128 tiles (no decode-sized GEMM)
  std::vector<Case> cases{base};
  Case c = base; c.name = "mega_train_clamped"; c.activation = Activation::kSwiGLUClamped; c.seed = 3; cases.push_back(c);
  c = base; c.name = "mega_train_rmsnorm_k8_e16"; c.rmsnorm = true; c.K = 8; c.E = 16; c.seed = 4; cases.push_back(c);
  c = base; c.name = world > 1 ? "mega_train_padded_rank1" : "mega_train_all_padding"; c.padded_rank = world > 1 ? 1 : 0;
  c.seed = 5;
  cases.push_back(c);
  bool ok = true;
  for (const Case& k : cases) {
    if (k.E % world != 0) continue;
    const Problem pr = make_problem(k, world);
    for (const bool full_slot : {true, false}) {
      const std::string tag = k.name + (full_slot ? " (saved)" : " (recompute)");
      const Result want = [&] {
        const ScopedEnv per32("DMOE_MXFP8_FPROP_PER32", "1");
        return run_layer(nccl, k, pr, rank, world, full_slot, stream);
      }();
      const Result got = run_layer(nccl, k, pr, rank, world, full_slot, stream, BlockScaledPipeline::kMega);
      if (!bitwise(got, want)) ok = false, *why += " " + tag + ": mega != staged;";
      std::string w;
      if (!check_all(k, pr, got, rank, &w)) ok = false, *why += " " + tag + w;
    }
  }
  // Two steps, the second accumulating into the first's weight gradients.
  const auto two_steps = [&](const Case& k, const Problem& pr, BlockScaledPipeline pipeline) {
    auto ctx = Context::create(config_of(k, world, false, pipeline), nccl);
    const int64_t L = ctx->local_experts();
    Inputs inp(k, pr.p, pr.grad_out[rank], rank, stream);
    Outputs out(k, L);
    const ExecutionOptions o = suite_options(k);
    SavedState st(*ctx);
    RoutedExpertsGradients g = out.g;
    for (int step = 0; step < 2; ++step, g.accumulate = true) {
      routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
      routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), g, o, stream);
    }
    sync(stream);
    const Result r = out.read(k, L);
    ctx->close();
    return r;
  };
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    Case k = base;
    k.name = std::string("mega_train_accumulate_") + (dt == DType::kFloat32 ? "fp32" : "bf16");
    k.wgrad = dt;
    k.seed = 23;
    const Problem pr = make_problem(k, world);
    const Result staged = [&] {
      const ScopedEnv per32("DMOE_MXFP8_FPROP_PER32", "1");
      return two_steps(k, pr, BlockScaledPipeline::kStaged);
    }();
    if (!bitwise(two_steps(k, pr, BlockScaledPipeline::kMega), staged))
      ok = false, *why += " " + k.name + ": mega != staged;";
  }
  return ok;
}

bool case_accumulate(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  bool ok = true;
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    Case c{"accumulate"};
    c.seed = 23;
    c.wgrad = dt;
    const Problem pr = make_problem(c, world);
    auto ctx = Context::create(config_of(c, world, false), nccl);
    const int64_t L = ctx->local_experts();
    Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
    Outputs out(c, L);
    const ExecutionOptions o = suite_options(c);
    SavedState st(*ctx);
    routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), out.g, o, stream);
    sync(stream);
    const Result first = out.read(c, L);
    RoutedExpertsGradients acc = out.g;
    acc.accumulate = true;
    routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), acc, o, stream);
    sync(stream);
    const Result second = out.read(c, L);
    TensorF twice13 = first.dw13, twice2 = first.dw2;
    for (auto& v : twice13.data) v *= 2.f;
    for (auto& v : twice2.data) v *= 2.f;
    const std::string tag = dt == DType::kFloat32 ? "float32 " : "bfloat16 ";
    ok &= check(tag + "dW13 x2", second.dw13, twice13, {5e-2, 2e-2, -1, -2}, why);
    ok &= check(tag + "dW2 x2", second.dw2, twice2, {5e-2, 2e-2, -1, -2}, why);
    ctx->close();
  }
  return ok;
}

// T changes between calls on one context (T_max 96): 96, 1, 40, 96, each equal bit for bit to the same
// call on a fresh context (what reusing a context must not change) and against its own oracle -- where
// the call has at least 32 tokens: one token's relL2 against the oracle is a single sample of the GEMMs'
// last-bit noise (the suite's worst token: 1.1-2.0e-2 in s71 r7 and s72 r1-r2; T = 1 at seed 58 was
// 1.8e-2 in s72 once the FPROPs ran the FP8-blockwise kernel), so the T = 1 call's is reported with the
// worst-token margin instead.
bool case_varying_t(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case base{"varying_t"};
  std::vector<Case> calls;
  std::vector<Problem> problems;
  std::vector<Result> fresh;  // each call on a context of its own, first (one context at a time)
  for (int64_t T : {96, 1, 40, 96}) {
    Case c = base;
    c.T = T;
    c.seed = 57 + T;
    calls.push_back(c);
    problems.push_back(make_problem(c, world));
    fresh.push_back(run_layer(nccl, c, problems.back(), rank, world, false, stream));
  }
  auto ctx = Context::create(config_of(base, world, false), nccl);
  const int64_t L = ctx->local_experts();
  bool ok = true;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Case& c = calls[i];
    const int64_t T = c.T;
    const Problem& pr = problems[i];
    Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
    Outputs out(c, L);
    SavedState st(*ctx);
    const ExecutionOptions o = suite_options(c);
    routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), out.g, o, stream);
    sync(stream);
    const Result got = out.read(c, L);
    if (!bitwise(got, fresh[i])) ok = false, *why += " T=" + std::to_string(T) + ": differs from a fresh context's call;";
    std::string w;
    if (T < 32)
      g_margins.token = std::max(g_margins.token, worst_token_rel_l2(got.out, pr.q_fwd.ranks[rank].out_TD));
    else if (!check_all(c, pr, got, rank, &w))
      ok = false, *why += " T=" + std::to_string(T) + w;
  }
  ctx->close();
  return ok;
}

// Upstream's creation and call checks on block-scaled contexts, with their texts.
bool case_validation(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"validation"};
  ErrorExpectations expect_error{why};
  if (kFp8Blockwise)  // (MXFP8 runs Mega: case_mega_training)
    expect_error("mega", "pipeline='mega' has no Hopper execution yet for fp8_blockwise", [&] {
      Config cfg = config_of(c, world, false);
      cfg.block_scaled->pipeline = BlockScaledPipeline::kMega;
      Context::create(cfg, nccl);
    });
  expect_error("dims", kFp8Blockwise ? "divisible by its vector size 128" : "multiples of 128", [&] {
    Case d = c;
    d.D = 320;  // a multiple of 64 (Config) but not of 128
    Context::create(config_of(d, world, false), nccl);
  });
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world, false), nccl);
  Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
  Outputs out(c, ctx->local_experts());
  RoutedExpertsInputs bare = inp.in;
  bare.w13_prepared = nullptr;
  expect_error("unprepared", "need prepared weights", [&] {
    routed_experts_forward(*ctx, bare, out.out.get(), nullptr, suite_options(c), stream);
  });
  RoutedExpertsInputs swapped = inp.in;
  swapped.w13_prepared = inp.in.w2_prepared;
  expect_error("shape", "must be prepared from a [", [&] {
    routed_experts_forward(*ctx, swapped, out.out.get(), nullptr, suite_options(c), stream);
  });
  Inputs other(c, pr.p, pr.grad_out[rank], rank, stream, false, kOtherFormat);
  const std::string wrong = std::string("was prepared for ") + to_string(kOtherFormat) + ", the context runs " +
                            to_string(kFormat);
  expect_error("format", wrong, [&] {
    routed_experts_forward(*ctx, other.in, out.out.get(), nullptr, suite_options(c), stream);
  });
  if (kFp8Blockwise) {  // the training backward needs the transposed copy DGRAD reads
    Inputs inf_w(c, pr.p, pr.grad_out[rank], rank, stream, /*inference_weights=*/true);
    SavedState st(*ctx);
    routed_experts_forward(*ctx, inf_w.in, out.out.get(), &st, suite_options(c), stream);
    expect_error("inference weights in backward", "dgrad", [&] {
      routed_experts_backward(*ctx, inf_w.in, st, inp.gout.get(), out.g, suite_options(c), stream);
    });
    sync(stream);
  }
  ctx->close();
  return expect_error.ok;
}

// Upstream's trap scenarios on an inference context of the format with prepared weights, each expected to end
// in its diagnostic (no illegal access): `overflow` (T=512, D=F=256, K=1, one expert per rank, device
// factor 0.5: 256 rows of capacity, every token to expert 0) and `bad_id` (T=128, K=1, E=4, every id
// 4, validate_expert_ids).
int run_scenario(ncclComm_t nccl, int rank, int world, const std::string& scenario, cudaStream_t stream) {
  Case c{"scenario"};
  c.T_max = c.T = scenario == "overflow" ? 512 : 128;
  c.D = c.F = 256;
  c.K = 1;
  c.E = (scenario == "overflow" ? 1 : 4) * world;
  const Problem pr = make_problem(c, world);
  Config cfg = config_of(c, world, false);
  cfg.inference = true;
  cfg.num_activation_slots = 0;
  cfg.wgrad_dtype.reset();
  if (scenario == "overflow") cfg.device_scratch_capacity_factor = 0.5;
  ContextOptions options;
  options.comm_timeout_ms = 5000;
  auto ctx = Context::create(cfg, nccl, options);
  Inputs inp(c, pr.p, pr.grad_out[rank], rank, stream);
  Outputs out(c, ctx->local_experts());
  call_expecting_trap(*ctx, inp.in, inp.ids32, c.T * c.K, scenario == "bad_id" ? static_cast<int32_t>(c.E) : 0,
                      out.out.get(), scenario, stream);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return layer_suite::suite_main(argc, argv, kSuiteName, [](layer_suite::Suite& s) {
    if (!s.scenario.empty()) return run_scenario(s.nccl, s.rank, s.world, s.scenario, s.stream);
    for (const Case& c : cases()) {
      if (!s.wants(c.name) || c.E % s.world != 0 || c.padded_rank >= s.world) continue;
      g_margins = {};
      const Problem pr = make_problem(c, s.world);
      std::string why;
      const Result r = run_layer(s.nccl, c, pr, s.rank, s.world, /*full_slot=*/false, s.stream);
      bool ok = check_all(c, pr, r, s.rank, &why);
      // The saved path (slot = maximum useful) gives the same bits as the all-recompute minimum.
      if (c.name == "basic" || c.name == "k6_e8") {
        const Result full = run_layer(s.nccl, c, pr, s.rank, s.world, /*full_slot=*/true, s.stream);
        if (!bitwise(r, full)) ok = false, why += " saved path differs from the recompute path bitwise;";
      }
      s.report(c.name, ok, g_margins.line() + why);
    }
    s.run_specials({{"graph", case_graph},
                    {"rmsnorm_routes", case_rmsnorm_routes},
                    {"inference_and_no_grad", case_inference_and_no_grad},
                    {"accumulate", case_accumulate},
                    {"varying_t", case_varying_t},
                    {"validation", case_validation}},
                   [] { g_margins = {}; }, [] { return g_margins.line(); });
    if (!kFp8Blockwise)
      s.run_specials({{"mega_inference", case_mega_inference}, {"mega_training", case_mega_training}},
                     [] { g_margins = {}; }, [] { return g_margins.line(); });
    return 0;
  });
}
