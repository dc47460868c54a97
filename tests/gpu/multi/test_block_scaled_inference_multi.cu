// The block-scaled inference layers end to end, one process per GPU through dmoe_launch, compiled
// once per format (tests/CMakeLists.txt):
//   DMOE_SUITE_FP8_BLOCKWISE  dist_moe_fp8_blockwise_pipeline_tests (issue 27; DeepSeek-V3's recipe,
//                             beyond upstream): x and h2 in 1x128 row blocks, weights in 128x128
//                             blocks, FP32 scales; judged against the BF16 oracle with upstream's
//                             MXFP8 forward tolerances (issue 27 holds FP8 blockwise to them)
//   DMOE_SUITE_NVFP4          dist_moe_nvfp4_pipeline_tests (issue 26): tokens quantized per row at the
//                             source, h2 re-quantized per row, weights per expert (E2M1, E4M3 per 16,
//                             FP32 global scales); judged against the BF16 oracle with upstream's NVFP4
//                             tolerance
// Every rank builds the same global problem from a seed, runs the CPU oracle's quantized forward
// (the same quantization points) and the plain BF16 oracle, runs its part of the layer on an
// inference context with weights prepared on the GPU, and checks
//   - against the quantized oracle: the bounds below (the same quantized operands; only the GEMMs'
//     accumulation order differs);
//   - against the BF16 oracle: the format's upstream tolerance;
//   - graph replay bitwise equal to eager, T changing between calls, (FP8 blockwise) weights prepared
//     for inference equal to training preparations bitwise, and the validation texts.
// Prints one line per case and "ALL PASS: N cases" at the end.
//
//   dmoe_launch -n 1 -- dist_moe_<format>_pipeline_tests [--filter NAME]
//   dmoe_launch -n 1 ... -- dist_moe_<format>_pipeline_tests --case overflow|bad_id   (must trap)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/context.h"
#include "dist_moe/routed_experts.h"
#include "layer_suite.h"
#include "reference/oracle.h"
#include "testing/device_buffer.h"
#include "testing/dist_env.h"

namespace {

using namespace dist_moe;
using namespace layer_suite;
using reference::TensorF;

#if defined(DMOE_SUITE_NVFP4)
constexpr BlockScaledFormat kFormat = BlockScaledFormat::kNVFP4;
constexpr reference::Quantization kQuantization = reference::Quantization::kNVFP4;
constexpr const char* kSuiteName = "nvfp4_pipeline_tests";
constexpr int64_t kOracleRowAlignment = 32;  // the layer's padding (runtime::routing_row_alignment)
constexpr int64_t kDimStep = 256;            // NVFP4 dims are multiples of 256
const reference::Tolerance& kUpstreamTolerance = reference::kNvfp4ForwardTolerance;
#elif defined(DMOE_SUITE_FP8_BLOCKWISE)
constexpr BlockScaledFormat kFormat = BlockScaledFormat::kFP8Blockwise;
constexpr reference::Quantization kQuantization = reference::Quantization::kFP8Blockwise;
constexpr const char* kSuiteName = "fp8_blockwise_pipeline_tests";
constexpr int64_t kOracleRowAlignment = 128;  // padding rows only; the oracle wants whole 128-row groups
constexpr int64_t kDimStep = 128;
const reference::Tolerance& kUpstreamTolerance = reference::kMxfp8ForwardTolerance;
#else
#error "compile with DMOE_SUITE_FP8_BLOCKWISE or DMOE_SUITE_NVFP4"
#endif
constexpr bool kNvfp4 = kFormat == BlockScaledFormat::kNVFP4;

struct Case {
  std::string name;
  int64_t T_max = 96, T = 96, D = 256, F = 256, K = 2, E = 8;
  Activation activation = Activation::kSwiGLU;
  bool rmsnorm = false;
  int padded_rank = -1;  // this rank's routes are all -1
  DType wgrad = DType::kFloat32;  // unused (inference); problem_spec and Outputs read it
  bool int64_ids = false, bf16_scores = false;
  bool exact_h1 = false;  // integer x and W13 whose block scales are 1: h1 exact on both sides
  uint64_t seed = 1;
};

// The problem, the FP8-blockwise oracle (`q`) and the BF16 oracle (`ref`).
struct Problem {
  reference::Problem p;
  reference::ForwardResult q_fwd, ref_fwd;
};

Problem make_problem(const Case& c, int world) {
  Problem pr;
  pr.p = reference::make_random_problem(problem_spec(c, world));
  if (c.exact_h1) make_h1_exact(pr.p, c.seed + 17);
  reference::ForwardOptions fo;
  if (c.rmsnorm) fo.rmsnorm = reference::RMSNormSpec{1e-6, {}, 0.0};
  pr.ref_fwd = reference::forward(pr.p, fo);
  fo.row_alignment = kOracleRowAlignment;
  fo.quantization = kQuantization;
  pr.q_fwd = reference::forward(pr.p, fo);
  return pr;
}

BlockScaledConfig block_scaled() {
  BlockScaledConfig b;
  b.format = kFormat;
  return b;
}

Config config_of(const Case& c, int world) {
  Config cfg = suite_config(c, world, false, block_scaled());
  cfg.inference = true;
  cfg.num_activation_slots = 0;
  cfg.wgrad_dtype.reset();
  return cfg;
}

void sync(cudaStream_t stream) { DMOE_CUDA_CHECK(cudaStreamSynchronize(stream)); }

struct Inputs : TokenInputs {
  PreparedOnGpu w13, w2;  // 128x128 blocks (`inference`: without the transposed copy DGRAD reads)
  RoutedExpertsInputs in;
  Inputs(const Case& c, const reference::Problem& p, int rank, cudaStream_t stream, bool inference_weights = true,
         BlockScaledFormat format = kFormat)
      : TokenInputs(p, rank),
        w13(p.local_w13(rank), format, inference_weights, p.num_local_experts(), 2 * c.F, c.D, stream),
        w2(p.local_w2(rank), format, inference_weights, p.num_local_experts(), c.D, c.F, stream) {
    point(c, in);
    in.w13_prepared = &w13.w;
    in.w2_prepared = &w2.w;
  }
};

TensorF run_layer(Context& ctx, const Case& c, const RoutedExpertsInputs& in, cudaStream_t stream) {
  Outputs o(c, ctx.local_experts());
  routed_experts_inference(ctx, in, o.out.get(), suite_options(c), stream);
  sync(stream);
  return o.read(c, ctx.local_experts()).out;
}

// The worst relL2 of each kind of check in the current case (printed with the case's line).
struct Margins {
  double oracle = 0, bf16 = 0, token = 0;
  std::string line() const {
    char b[160];
    std::snprintf(b, sizeof(b),
                  " [max relL2 vs %s oracle %.2e, vs bf16 %.2e; worst token's out vs oracle %.2e]",
                  to_string(kFormat), oracle, bf16, token);
    return b;
  }
};
Margins g_margins;

// Against the quantized oracle, aggregate only (element-wise bounds do not hold where an E4M3
// rounding lands one step apart):
//   - exact-h1 cases (make_h1_exact): the issue's forward bound, relL2 < 5e-3, cos > 0.999;
//   - random cases: relL2 < 1e-2. There a last-bit difference of a BF16 h1 element (the GEMMs'
//     accumulation order) that is its block's amax moves the block's FP32 scale (amax / 448) and
//     with it the E4M3 rounding of all 128 h2 values of the block; MXFP8's power-of-two scale
//     rarely moves. Measured 3.4e-3 .. 5.5e-3 (session 21) against 1.8e-3 .. 3.8e-3 for MXFP8.
const reference::Tolerance kFwd{2e-2, 2e-2, 1e-2, 0.999};

// Against the BF16 reference the statistics need enough tokens (the MXFP8 suite's rule).
bool judged_against_bf16(const Case& c) { return c.T >= 32; }

bool check_out(const Case& c, const Problem& pr, const TensorF& out, int rank, std::string* why) {
  const TensorF& want = pr.q_fwd.ranks[rank].out_TD;
  g_margins.token = std::max(g_margins.token, worst_token_rel_l2(out, want));
  bool ok = true;
  const auto vs_oracle = reference::compare(out, want, aggregate(c.exact_h1 ? kFwdExact : kFwd));
  g_margins.oracle = std::max(g_margins.oracle, vs_oracle.rel_l2);
  if (!vs_oracle.passed) ok = false, *why += std::string(" out vs ") + to_string(kFormat) + " oracle: " + vs_oracle.summary() + ";";
  if (judged_against_bf16(c)) {
    const auto vs_bf16 = reference::compare(out, pr.ref_fwd.ranks[rank].out_TD, aggregate(kUpstreamTolerance));
    g_margins.bf16 = std::max(g_margins.bf16, vs_bf16.rel_l2);
    if (!vs_bf16.passed) ok = false, *why += " out vs bf16 (upstream tol): " + vs_bf16.summary() + ";";
  }
  if (c.padded_rank == rank) {
    bool zeros = true;
    for (float v : out.data) zeros &= v == 0.f;
    if (!zeros) ok = false, *why += " padded rank not exactly zero;";
  }
  return ok;
}

// A prefill-sized problem: 128 rows per expert, so an NVFP4 context expands its tokens to FP16 rows
// (memory_plan.h nvfp4_expands_token_rows) and its GEMMs take the 128-token tiles.
Case prefill_case(const char* name) {
  Case c{name};
  c.T_max = c.T = 512;
  c.D = 1024;
  c.F = 768;
  c.E = 16;
  c.K = 4;
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"basic"});
  Case c;
  c = {"bounded_T"}; c.T = 40; v.push_back(c);
  c = {"padded_rank1"}; c.padded_rank = 1; v.push_back(c);
  c = {"k6_e8"}; c.K = 6; v.push_back(c);
  c = {"clamped_swiglu"}; c.activation = Activation::kSwiGLUClamped; v.push_back(c);
  c = {"rmsnorm_k2"}; c.rmsnorm = true; v.push_back(c);
  c = {"rmsnorm_k8_seed3"}; c.rmsnorm = true; c.K = 8; c.seed = 3; v.push_back(c);
  c = {"int64_ids_bf16_scores"}; c.int64_ids = true; c.bf16_scores = true; v.push_back(c);
  c = {"t1"}; c.T_max = 8; c.T = 1; v.push_back(c);
  // Dims of three steps (FP8 blockwise 384 x 640; NVFP4 768 x 1280).
  const int64_t d3 = 3 * kDimStep, f5 = 5 * kDimStep;
  c = {"wide_e64_d3_f5"}; c.E = 64; c.K = 8; c.D = d3; c.F = f5; c.T = 64; c.T_max = 64; v.push_back(c);
  if (!kNvfp4) {  // make_h1_exact builds FP8-blockwise blocks (amax 448 per 128)
    c = {"exact_h1"}; c.exact_h1 = true; c.seed = 41; v.push_back(c);
    c = {"exact_h1_rmsnorm_k8"}; c.exact_h1 = true; c.rmsnorm = true; c.K = 8; c.seed = 42; v.push_back(c);
    c = {"exact_h1_d384_e64"}; c.exact_h1 = true; c.E = 64; c.K = 8; c.D = 384; c.F = 640; c.T = c.T_max = 64; c.seed = 43;
    v.push_back(c);
  }
  // Several tiles per expert and K blocks per GEMM (NVFP4: expanded token rows, 128-token tiles).
  c = prefill_case("t512_d1024_f768_e16_k4"); c.seed = 5;
  v.push_back(c);
  if (!kNvfp4) {
    c.name = "exact_h1_t512_d1024_f768_e16_k4"; c.exact_h1 = true; c.seed = 44; v.push_back(c);
  }
  return v;
}

// ---- cases with their own flow ----------------------------------------------------------------

// Inference captured in one CUDA graph (global capture mode), replayed twice: bitwise equal to eager.
bool graph_matches_eager(Case c, ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  c.seed = 7;
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world), nccl);
  Inputs inp(c, pr.p, rank, stream);
  const TensorF want = run_layer(*ctx, c, inp.in, stream);
  Outputs graphed(c, ctx->local_experts());
  bool ok = check_out(c, pr, want, rank, why);
  replay_graph(
      stream, [&] { routed_experts_inference(*ctx, inp.in, graphed.out.get(), suite_options(c), stream); },
      [&](int replay) {
        if (!reference::bitwise_equal(graphed.read(c, ctx->local_experts()).out, want))
          ok = false, *why += " replay " + std::to_string(replay) + " != eager;";
      });
  ctx->close();
  return ok;
}
bool case_graph(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  return graph_matches_eager(Case{"graph"}, nccl, rank, world, stream, why);
}
bool case_graph_prefill(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  return graph_matches_eager(prefill_case("graph_prefill"), nccl, rank, world, stream, why);
}

// T changes between calls on one context, each call against its own oracle: T_max 96 (96, 1, 40,
// 96), and a prefill-sized context (512, 1, 40, 512).
bool varying_t(const Case& base, std::initializer_list<int64_t> ts, ncclComm_t nccl, int world, int rank,
               cudaStream_t stream, std::string* why) {
  auto ctx = Context::create(config_of(base, world), nccl);
  bool ok = true;
  for (int64_t T : ts) {
    Case c = base;
    c.T = T;
    c.seed = 57 + T;
    const Problem pr = make_problem(c, world);
    Inputs inp(c, pr.p, rank, stream);
    std::string w;
    if (!check_out(c, pr, run_layer(*ctx, c, inp.in, stream), rank, &w)) ok = false, *why += " T=" + std::to_string(T) + w;
  }
  ctx->close();
  return ok;
}
bool case_varying_t(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  return varying_t(Case{"varying_t"}, {96, 1, 40, 96}, nccl, world, rank, stream, why);
}
bool case_varying_t_prefill(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  return varying_t(prefill_case("varying_t_prefill"), {512, 1, 40, 512}, nccl, world, rank, stream, why);
}

// Weights prepared for training (with the transposed copy) give the same output bits as weights
// prepared for inference; the routed clip statistics are those of the oracle's h1.
bool case_preparations(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"preparations"};
  c.activation = Activation::kSwiGLUClamped;
  c.seed = 13;
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world), nccl);
  Inputs inf(c, pr.p, rank, stream, /*inference_weights=*/true);
  const TensorF a = run_layer(*ctx, c, inf.in, stream);
  bool ok = check_out(c, pr, a, rank, why);
  if (!kNvfp4) {  // (NVFP4 has one preparation, for inference)
    Inputs train(c, pr.p, rank, stream, false);
    if (!reference::bitwise_equal(a, run_layer(*ctx, c, train.in, stream)))
      ok = false, *why += " training-prepared weights give other bits;";
  }
  Outputs o(c, ctx->local_experts());
  ExecutionOptions opts = suite_options(c);
  Dev<float> stats(3);
  opts.swiglu_clip_stats_out_3 = stats.get();
  opts.swiglu_clip_limit = 1.0;
  routed_experts_inference(*ctx, inf.in, o.out.get(), opts, stream);
  sync(stream);
  const std::vector<float> got = stats.download();
  reference::ForwardOptions fo;
  fo.row_alignment = kOracleRowAlignment;
  fo.quantization = kQuantization;
  fo.swiglu_clip_limit = 1.0;
  const auto want = reference::forward(pr.p, fo).ranks[rank].clip_stats;
  // Counts of h1 elements past the limit: a BF16 h1 element at the limit's edge may fall either way.
  for (int i = 0; i < 3; ++i) {
    const double slack = i == 2 ? 0.0 : std::max(2.0, 0.002 * double(want[i]));
    if (std::abs(double(got[i]) - double(want[i])) > slack)
      ok = false, *why += " clip stat " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
                       std::to_string(want[i]) + ";";
  }
  ctx->close();
  return ok;
}

// The creation and call checks of the format's context, with their texts.
bool case_validation(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"validation"};
  ErrorExpectations expect_error{why};
  if (kNvfp4) {
    expect_error("dims", "NVFP4 requires hidden_dim to be a multiple of 256 and at most 16384", [&] {
      Case d = c;
      d.D = 384;
      Context::create(config_of(d, world), nccl);
    });
    expect_error("intermediate", "intermediate_dim a multiple of 256 and at most 8192", [&] {
      Case d = c;
      d.F = 8448;
      Context::create(config_of(d, world), nccl);
    });
    expect_error("training", "NVFP4 DistMoE is inference-only", [&] {
      Config t = config_of(c, world);
      t.inference = false;
      t.num_activation_slots = 1;
      t.wgrad_dtype = DType::kFloat32;
      Context::create(t, nccl);
    });
    expect_error("fast_math", "fast_math is supported only by the MXFP8 fused path", [&] {
      Config t = config_of(c, world);
      t.block_scaled->fast_math = true;
      Context::create(t, nccl);
    });
  } else {
    expect_error("dims", "fp8_blockwise requires hidden_dim and intermediate_dim divisible by its vector size 128", [&] {
      Case d = c;
      d.D = 320;
      Context::create(config_of(d, world), nccl);
    });
  }
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world), nccl);
  Inputs inp(c, pr.p, rank, stream);
  Outputs out(c, ctx->local_experts());
  RoutedExpertsInputs bare = inp.in;
  bare.w13_prepared = nullptr;
  expect_error("unprepared", "need prepared weights", [&] {
    routed_experts_inference(*ctx, bare, out.out.get(), suite_options(c), stream);
  });
  RoutedExpertsInputs swapped = inp.in;
  swapped.w13_prepared = inp.in.w2_prepared;
  expect_error("shape", "must be prepared from a [", [&] {
    routed_experts_inference(*ctx, swapped, out.out.get(), suite_options(c), stream);
  });
  Inputs mx(c, pr.p, rank, stream, false, BlockScaledFormat::kMXFP8_E4M3);
  expect_error("format", std::string("was prepared for mxfp8_e4m3, the context runs ") + to_string(kFormat), [&] {
    routed_experts_inference(*ctx, mx.in, out.out.get(), suite_options(c), stream);
  });
  ctx->close();
  return expect_error.ok;
}

// ---- Mega (NVFP4 decode; issue #28) ------------------------------------------------------------
// The Mega pipeline runs the staged pipeline's kernels' numerics in one launch, so its output must
// equal the staged context's bit for bit (and pass the same oracle checks). Decode-sized cases only
// (at most 12 routed rows per local expert: the contexts Mega accepts), ragged by random routing.
Case mega_case(const char* name) {
  Case c{name};
  c.T_max = c.T = 24;
  c.K = 4;
  c.E = 16;  // 96 routes: 6 rows per expert on average
  c.D = 512;
  c.F = 768;
  return c;
}

Config mega_config(const Case& c, int world) {
  Config cfg = config_of(c, world);
  cfg.block_scaled->pipeline = BlockScaledPipeline::kMega;
  return cfg;
}

// Staged vs Mega on the same inputs (eager), and Mega against the oracle; with `graph`, Mega
// captured once and replayed twice, each replay == eager.
bool mega_matches_staged(const Case& c, bool graph, ncclComm_t nccl, int rank, int world, cudaStream_t stream,
                         std::string* why) {
  const Problem pr = make_problem(c, world);
  auto staged = Context::create(config_of(c, world), nccl);
  auto mega = Context::create(mega_config(c, world), nccl);
  Inputs inp(c, pr.p, rank, stream);
  const TensorF want = run_layer(*staged, c, inp.in, stream);
  const TensorF got = run_layer(*mega, c, inp.in, stream);
  bool ok = check_out(c, pr, got, rank, why);
  if (!reference::bitwise_equal(got, want)) ok = false, *why += " mega != staged;";
  const TensorF again = run_layer(*mega, c, inp.in, stream);  // the counters start from zero again
  if (!reference::bitwise_equal(again, want)) ok = false, *why += " second mega call != staged;";
  if (graph) {
    Outputs graphed(c, mega->local_experts());
    replay_graph(
        stream, [&] { routed_experts_inference(*mega, inp.in, graphed.out.get(), suite_options(c), stream); },
        [&](int replay) {
          if (!reference::bitwise_equal(graphed.read(c, mega->local_experts()).out, want))
            ok = false, *why += " mega replay " + std::to_string(replay) + " != staged;";
        });
  }
  staged->close();
  mega->close();
  return ok;
}

bool case_mega(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  const Case base = mega_case("mega");
  std::vector<Case> v{base};
  Case c = base; c.name = "clamped"; c.activation = Activation::kSwiGLUClamped; c.seed = 3; v.push_back(c);
  c = base; c.name = "rmsnorm_k8"; c.rmsnorm = true; c.K = 8; c.T = c.T_max = 12; c.seed = 4; v.push_back(c);
  c = base; c.name = "t1"; c.T = 1; c.seed = 5; v.push_back(c);
  c = base; c.name = "bounded_T"; c.T = 9; c.seed = 6; v.push_back(c);
  c = base; c.name = "e64_d3_f5"; c.E = 64; c.K = 8; c.T = c.T_max = 64; c.D = 3 * kDimStep; c.F = 5 * kDimStep;
  c.seed = 8; v.push_back(c);
  // A rank whose tokens are all -1 (exact zeros; on one GPU no chunk at all: an empty tile stream).
  c = base; c.name = world > 1 ? "padded_rank1" : "all_padding"; c.padded_rank = world > 1 ? 1 : 0; c.seed = 10;
  v.push_back(c);
  bool ok = true;
  for (const Case& k : v) {
    std::string w;
    if (k.E % world != 0 || !mega_matches_staged(k, false, nccl, rank, world, stream, &w)) ok = false, *why += " " + k.name + ":" + w;
  }
  return ok;
}
bool case_mega_graph(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c = mega_case("mega_graph");
  c.seed = 9;
  return mega_matches_staged(c, true, nccl, rank, world, stream, why);
}

// On a context that is not decode-sized, NVFP4's pipeline='mega' is refused clearly.
bool case_mega_validation(ncclComm_t nccl, int /*rank*/, int world, cudaStream_t /*stream*/, std::string* why) {
  ErrorExpectations expect_error{why};
  expect_error("prefill", "runs NVFP4 at decode sizes on Hopper so far",
               [&] { Context::create(mega_config(prefill_case("v"), world), nccl); });
  return expect_error.ok;
}

// The MXFP8 suite's trap scenarios on the format's inference context: `overflow` (T=512,
// D=F=256, K=1, one expert per rank, device factor 0.5: every token to expert 0) and `bad_id`
// (T=128, K=1, E=4, every id 4, validate_expert_ids); each must end in its diagnostic.
int run_scenario(ncclComm_t nccl, int rank, int world, const std::string& scenario, cudaStream_t stream) {
  Case c{"scenario"};
  c.T_max = c.T = scenario == "overflow" ? 512 : 128;
  c.K = 1;
  c.E = (scenario == "overflow" ? 1 : 4) * world;
  const Problem pr = make_problem(c, world);
  Config cfg = config_of(c, world);
  if (scenario == "overflow") cfg.device_scratch_capacity_factor = 0.5;
  ContextOptions options;
  options.comm_timeout_ms = 5000;
  auto ctx = Context::create(cfg, nccl, options);
  Inputs inp(c, pr.p, rank, stream);
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
      auto ctx = Context::create(config_of(c, s.world), s.nccl);
      Inputs inp(c, pr.p, s.rank, s.stream);
      const bool ok = check_out(c, pr, run_layer(*ctx, c, inp.in, s.stream), s.rank, &why);
      ctx->close();
      s.report(c.name, ok, g_margins.line() + why);
    }
    s.run_specials({{"graph", case_graph},
                    {"graph_prefill", case_graph_prefill},
                    {"varying_t", case_varying_t},
                    {"varying_t_prefill", case_varying_t_prefill},
                    {"preparations", case_preparations},
                    {"validation", case_validation}},
                   [] { g_margins = {}; }, [] { return g_margins.line(); });
    if (kNvfp4)
      s.run_specials({{"mega", case_mega}, {"mega_graph", case_mega_graph}, {"mega_validation", case_mega_validation}},
                     [] { g_margins = {}; }, [] { return g_margins.line(); });
    return 0;
  });
}
