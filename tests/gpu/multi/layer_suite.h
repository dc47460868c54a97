// What the layer suites (test_pipeline_multi.cu: BF16; test_block_scaled_pipeline_multi.cu: MXFP8
// and FP8-blockwise training; test_block_scaled_inference_multi.cu: FP8-blockwise inference) share: the per-rank log line, a
// rank's results (output, input / score / weight gradients) read back from the device, bitwise
// equality of two results, the planner's slot state, the block-scaled suites' weights prepared on
// the GPU, comparison helpers and trap call, and the driver (arguments, device, communicator, one
// line per case, the cases with their own flow, the closing line and exit code).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <initializer_list>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/config.h"
#include "dist_moe/context.h"
#include "dist_moe/memory_plan.h"
#include "dist_moe/prepare_weight.h"
#include "dist_moe/routed_experts.h"
#include "reference/oracle.h"
#include "testing/device_buffer.h"
#include "testing/dist_env.h"

namespace dist_moe::layer_suite {

inline int g_rank = 0;

// An environment knob set for a scope (contexts read theirs at creation): e.g. a staged MXFP8 training
// context on the per-32 FPROPs, the sequence Mega's forward launch runs (DMOE_MXFP8_FPROP_PER32=1).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = ::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_.c_str(), old_->c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};
#define LOG(...)                                                  \
  do {                                                            \
    std::printf("[rank %d] ", ::dist_moe::layer_suite::g_rank);   \
    std::printf(__VA_ARGS__);                                     \
    std::printf("\n");                                            \
    std::fflush(stdout);                                          \
  } while (0)

template <class T>
using Dev = testing::DeviceBuffer<T>;
using reference::TensorF;

inline std::vector<uint16_t> bf16_bits(const TensorF& t) { return reference::to_bf16_bits(t); }

// What one rank's GPU produced.
struct Result {
  TensorF out, grad_x, grad_scores, dw13, dw2;
};

inline bool bitwise(const Result& a, const Result& b) {
  return reference::bitwise_equal(a.out, b.out) && reference::bitwise_equal(a.grad_x, b.grad_x) &&
         reference::bitwise_equal(a.grad_scores, b.grad_scores) && reference::bitwise_equal(a.dw13, b.dw13) &&
         reference::bitwise_equal(a.dw2, b.dw2);
}

// The random global problem of a Case (T, D, F, K, E, activation, bf16_scores, seed, padded_rank):
// 5% of routes -1, clamped SwiGLU at alpha 1.5 / limit 5, a padded rank's tokens all -1.
template <class Case>
reference::RandomProblemSpec problem_spec(const Case& c, int world) {
  reference::RandomProblemSpec s;
  s.num_ranks = world;
  s.tokens_per_rank = c.T;
  s.hidden_dim = c.D;
  s.intermediate_dim = c.F;
  s.top_k = c.K;
  s.num_experts = c.E;
  s.swiglu.activation = c.activation;
  if (c.activation == Activation::kSwiGLUClamped) s.swiglu.alpha = 1.5, s.swiglu.limit = 5.0;
  s.padding_route_probability = 0.05;
  s.bf16_scores = c.bf16_scores;
  s.seed = c.seed;
  if (c.padded_rank >= 0)
    for (int64_t t = 0; t < c.T; ++t) s.all_padding_tokens.push_back(c.padded_rank * c.T + t);
  return s;
}

// x and W13 of small integers in [-2, 2] whose every 128-block has amax 448 placed where the other
// operand is zero (x at feature 128 j, W13 at row 128 i, column 128 j + 1; W13 column 128 j and x
// feature 128 j + 1 are zero): every 1x128 / 128x128 block scale is exactly 1 (FP8 blockwise's
// amax / 448 and MXFP8's shared E8M0 code alike), every code the value itself, and every product
// small, so h1 is an exact integer on the GPU (FP8 tensor cores included) and in the oracle, and h2
// and its quantization are bit-identical. What remains between the two in the forward is W2's
// accumulation order: no E4M3 requantization downstream amplifies it -- the cases that hold a
// block-scaled forward to the issues' BF16 bound (relL2 < 5e-3).
// The forward bound of those cases against the format's oracle (relL2 and cosine; aggregate()).
inline const reference::Tolerance kFwdExact{2e-2, 2e-2, 5e-3, 0.999};
inline void make_h1_exact(reference::Problem& p, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> small(-2, 2);
  for (auto& x : p.x_TD)
    for (int64_t i = 0; i < x.numel(); ++i) {
      const int64_t c = i % x.size(1);
      x.data[i] = c % 128 == 0 ? (small(rng) < 0 ? -448.f : 448.f) : c % 128 == 1 ? 0.f : float(small(rng));
    }
  reference::TensorF& w = p.w13_EFD;
  const int64_t N = w.size(1), K = w.size(2);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const int64_t k = i % K, n = (i / K) % N;
    w.data[i] = k % 128 == 0 ? 0.f : (k % 128 == 1 && n % 128 == 0) ? 448.f : float(small(rng));
  }
}

// The context Config of a Case: one layer per slot, device scratch for any routing, the case's
// activation and WGRAD dtype; block_scaled as given; with `full_slot`, the maximum useful slot (the
// saved path) instead of the minimum (recompute).
template <class Case>
Config suite_config(const Case& c, int world, bool full_slot, std::optional<BlockScaledConfig> block_scaled) {
  Config cfg;
  cfg.max_num_local_input_tokens = c.T_max;
  cfg.hidden_dim = c.D;
  cfg.intermediate_dim = c.F;
  cfg.top_k = c.K;
  cfg.num_experts = c.E;
  cfg.max_moe_layers_per_activation_slot = 1;
  cfg.device_scratch_capacity_factor = static_cast<double>(world);  // any routing fits
  cfg.activation = c.activation;
  if (c.activation == Activation::kSwiGLUClamped) cfg.swiglu_alpha = 1.5, cfg.swiglu_limit = 5.0;
  cfg.wgrad_dtype = c.wgrad;
  cfg.block_scaled = block_scaled;
  if (full_slot) cfg.activation_slot_bytes = plan_memory(cfg, world).maximum_useful_activation_slot_bytes;
  return cfg;
}

// A rank's output and gradient buffers (poisoned, so an unwritten byte shows), for a Case with T, D,
// F, K, wgrad and bf16_scores.
struct Outputs {
  Dev<uint16_t> out, gx, gs16;
  Dev<float> gs32;
  Dev<uint8_t> dw13, dw2;
  RoutedExpertsGradients g;
  int64_t T, D, F, K;
  DType wgrad;
  bool bf16_scores;
  template <class Case>
  Outputs(const Case& c, int64_t L)
      : out(c.T * c.D), gx(c.T * c.D), gs16(c.T * c.K), gs32(c.T * c.K),
        dw13(L * 2 * c.F * c.D * (c.wgrad == DType::kFloat32 ? 4 : 2)),
        dw2(L * c.D * c.F * (c.wgrad == DType::kFloat32 ? 4 : 2)), T(c.T), D(c.D), F(c.F), K(c.K), wgrad(c.wgrad),
        bf16_scores(c.bf16_scores) {
    out.poison(), gx.poison(), gs16.poison(), gs32.poison(), dw13.poison(), dw2.poison();
    g.grad_x_TD = gx.get();
    g.grad_scores_TK = c.bf16_scores ? static_cast<void*>(gs16.get()) : gs32.get();
    g.grad_w13 = dw13.get();
    g.grad_w2 = dw2.get();
    g.wgrad_dtype = c.wgrad;
  }
  Result read(int64_t L) const {
    Result r;
    r.out = testing::tensor_from_bf16(out.download(), {T, D});
    r.grad_x = testing::tensor_from_bf16(gx.download(), {T, D});
    r.grad_scores = TensorF({T, K});
    if (bf16_scores) r.grad_scores = testing::tensor_from_bf16(gs16.download(), {T, K});
    else r.grad_scores.data = gs32.download();
    auto wread = [&](const Dev<uint8_t>& d, std::vector<int64_t> shape) {
      const auto bytes = d.download();
      TensorF t(std::move(shape));
      if (wgrad == DType::kFloat32) {
        std::memcpy(t.data.data(), bytes.data(), bytes.size());
        return t;
      }
      std::vector<uint16_t> bits(bytes.size() / 2);
      std::memcpy(bits.data(), bytes.data(), bytes.size());
      return testing::tensor_from_bf16(bits, t.shape);
    };
    r.dw13 = wread(dw13, {L, 2 * F, D});
    r.dw2 = wread(dw2, {L, D, F});
    return r;
  }
  template <class Case>
  Result read(const Case&, int64_t L) const {
    return read(L);
  }
};

// The planner's saved bytes [N*R] then layers per slot [N] (the slot stacks' state).
inline std::vector<int64_t> planner_snapshot(const Context& ctx) {
  const Context::PlannerView v = ctx.planner_view();
  const int64_t N = v.num_slots, R = ctx.ep_size();
  std::vector<int64_t> h(N * R + N);
  DMOE_CUDA_CHECK(cudaMemcpy(h.data(), v.saved_bytes_NR, N * R * 8, cudaMemcpyDeviceToHost));
  DMOE_CUDA_CHECK(cudaMemcpy(h.data() + N * R, v.layer_id_N, N * 8, cudaMemcpyDeviceToHost));
  return h;
}

// One rank's token operands of a Case (x, int32 and int64 ids, FP32 and BF16 scores) on the device;
// point() sets the RoutedExpertsInputs fields that read them, in the Case's dtypes.
struct TokenInputs {
  Dev<uint16_t> x, scores16;
  Dev<float> scores32;
  Dev<int32_t> ids32;
  Dev<int64_t> ids64;
  TokenInputs(const reference::Problem& p, int rank)
      : x(bf16_bits(p.x_TD[rank])), scores16(bf16_bits(p.scores_TK[rank])), scores32(p.scores_TK[rank].data),
        ids32(p.ids_TK[rank]), ids64(std::vector<int64_t>(p.ids_TK[rank].begin(), p.ids_TK[rank].end())) {}
  template <class Case>
  void point(const Case& c, RoutedExpertsInputs& in) const {
    in.x_TD = x.get();
    in.num_tokens = c.T;
    in.topk_ids_TK = c.int64_ids ? static_cast<const void*>(ids64.get()) : ids32.get();
    in.id_dtype = c.int64_ids ? DType::kInt64 : DType::kInt32;
    in.topk_scores_TK = c.bf16_scores ? static_cast<const void*>(scores16.get()) : scores32.get();
    in.score_dtype = c.bf16_scores ? DType::kBFloat16 : DType::kFloat32;
  }
};

// The suites' execution options for a Case: ids validated; the fused RMSNorm postprocess (eps 1e-6,
// not bitwise) for rmsnorm cases.
template <class Case>
ExecutionOptions suite_options(const Case& c) {
  ExecutionOptions o;
  o.validate_expert_ids = true;
  if (c.rmsnorm) {
    RMSNormPostprocess r;
    r.eps = 1e-6;
    r.require_bitwise = false;
    o.experts_output_postprocess = r;
  }
  return o;
}

// The largest relL2 of one token's output row against the reference's (an aggregate over many tokens
// could hide one wrong row).
inline double worst_token_rel_l2(const TensorF& got, const TensorF& want) {
  const int64_t T = want.shape[0], D = want.shape[1];
  double worst = 0;
  for (int64_t t = 0; t < T; ++t) {
    double d2 = 0, e2 = 0;
    for (int64_t i = t * D; i < (t + 1) * D; ++i) {
      const double d = double(got.data[i]) - double(want.data[i]);
      d2 += d * d;
      e2 += double(want.data[i]) * double(want.data[i]);
    }
    if (e2 > 0) worst = std::max(worst, std::sqrt(d2 / e2));
  }
  return worst;
}

// A tolerance's relL2 and cosine bounds only (block-scaled suites: element-wise bounds do not hold
// where an E4M3 rounding lands one step apart).
inline reference::Tolerance aggregate(const reference::Tolerance& t) {
  constexpr double kAny = 1e300;  // finite: compare() tests d <= atol + rtol * |e|, and inf * 0 is NaN
  return {kAny, kAny, t.max_rel_l2, t.min_cosine};
}

// One expert weight [L, N, K] prepared on the GPU (prepare_block_scaled_weight) in `format`, for
// inference or training (with the transposed copy DGRAD reads).
struct PreparedOnGpu {
  Dev<uint8_t> fprop_data, fprop_scale, dgrad_data, dgrad_scale;
  Dev<float> global_scale, global_scale_inv;  // NVFP4: per expert
  PreparedExpertWeight w;
  PreparedOnGpu(const TensorF& weight, BlockScaledFormat format, bool inference, int64_t L, int64_t N, int64_t K,
                cudaStream_t stream) {
    w.spec = prepared_weight_spec(format, inference, L, N, K);
    const Dev<uint16_t> src(bf16_bits(weight));
    fprop_data = Dev<uint8_t>(w.spec.fprop_data.bytes());
    fprop_scale = Dev<uint8_t>(w.spec.fprop_scale.bytes());
    w.buffers.fprop_data = fprop_data.get();
    w.buffers.fprop_scale = fprop_scale.get();
    if (w.spec.dgrad_data.present) {
      dgrad_data = Dev<uint8_t>(w.spec.dgrad_data.bytes());
      dgrad_scale = Dev<uint8_t>(w.spec.dgrad_scale.bytes());
      w.buffers.dgrad_data = dgrad_data.get();
      w.buffers.dgrad_scale = dgrad_scale.get();
    }
    if (w.spec.global_scale.present) {
      global_scale = Dev<float>(w.spec.global_scale.bytes() / 4);
      global_scale_inv = Dev<float>(w.spec.global_scale_inv.bytes() / 4);
      w.buffers.global_scale = global_scale.get();
      w.buffers.global_scale_inv = global_scale_inv.get();
    }
    prepare_block_scaled_weight(src.get(), w.spec, w.buffers, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

// Captures `call` in one CUDA graph (global capture mode) and replays it twice; after each replay
// (stream synchronized) `check(replay)` compares what it produced. The graph is destroyed after.
template <class Call, class Check>
void replay_graph(cudaStream_t stream, Call&& call, Check&& check) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  call();
  DMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  DMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    DMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    check(replay);
  }
  DMOE_CUDA_CHECK(cudaGraphExecDestroy(exec));
  DMOE_CUDA_CHECK(cudaGraphDestroy(graph));
}

// The validation cases' checks: each call runs `fn`, which must throw a dist_moe::Error whose text
// contains `text`; otherwise `ok` turns false and `why` says which check (`what`) and how.
struct ErrorExpectations {
  std::string* why;
  bool ok = true;
  template <class Fn>
  void operator()(const char* what, const std::string& text, Fn&& fn) {
    try {
      fn();
      ok = false, *why += std::string(" ") + what + ": no error;";
    } catch (const Error& e) {
      if (std::string(e.what()).find(text) == std::string::npos)
        ok = false, *why += std::string(" ") + what + ": unexpected text '" + e.what() + "';";
    }
  }
};

// The trap scenarios' call: every route of `in` set to expert id `id` (device ids32, T * K of them),
// validate_expert_ids on, one inference call that must end in the diagnostic (logged around it).
inline void call_expecting_trap(Context& ctx, RoutedExpertsInputs in, Dev<int32_t>& ids32, int64_t routes, int32_t id,
                                void* out, const std::string& scenario, cudaStream_t stream) {
  ids32.upload(std::vector<int32_t>(routes, id));
  in.id_dtype = DType::kInt32;
  in.topk_ids_TK = ids32.get();
  ExecutionOptions o;
  o.validate_expert_ids = true;
  LOG("EXPECTED_TRAP scenario %s", scenario.c_str());
  routed_experts_inference(ctx, in, out, o, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  LOG("UNEXPECTED: scenario %s finished without a trap", scenario.c_str());
}

// One rank of a suite run: its communicator and stream, the arguments (--filter NAME: only cases
// whose name contains it; --case NAME: a scenario expected to trap) and the case counters.
struct Suite {
  int rank = 0, world = 1;
  ncclComm_t nccl = nullptr;
  cudaStream_t stream = nullptr;
  std::string filter, scenario;
  int run = 0, failed = 0;
  // When the previous case ended (or the suite started): each line says how long its case took, oracle
  // included -- a device call's budget decides which cases a run script can afford.
  std::chrono::steady_clock::time_point last_report = std::chrono::steady_clock::now();

  bool wants(const std::string& name) const { return filter.empty() || name.find(filter) != std::string::npos; }
  // Counts a case and prints its line: "PASS case NAME (S s)<detail>" or "FAIL case ...".
  void report(const std::string& name, bool ok, const std::string& detail) {
    ++run;
    failed += !ok;
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last_report).count();
    last_report = now;
    LOG("%s case %s (%.1f s)%s", ok ? "PASS" : "FAIL", name.c_str(), seconds, detail.c_str());
  }
  // The cases with their own flow, in order: fn(nccl, rank, world, stream, &why) for each wanted
  // name; `before` runs first (the suite resets its margins), `detail` ends the case's line.
  using Special = bool (*)(ncclComm_t, int, int, cudaStream_t, std::string*);
  void run_specials(std::initializer_list<std::pair<const char*, Special>> specials,
                    const std::function<void()>& before = [] {},
                    const std::function<std::string()>& detail = [] { return std::string(); }) {
    for (const auto& [name, fn] : specials) {
      if (!wants(name)) continue;
      before();
      std::string why;
      const bool ok = fn(nccl, rank, world, stream, &why);
      report(name, ok, detail() + why);
    }
  }
};

// The suites' main: picks this rank's SM90 GPU (SKIP, exit 0, without one), creates the
// communicator over every rank (`id_name` keys the unique-id exchange) and a stream, runs `body`
// (its return value is the scenario's exit code when --case was given), then prints
// "ALL PASS: N cases" or "FAILED: F of N cases" and returns 0 or 1; an exception prints ERROR.
inline int suite_main(int argc, char** argv, const char* id_name, const std::function<int(Suite&)>& body) {
  Suite s;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--filter" && i + 1 < argc) s.filter = argv[++i];
    else if (std::string(argv[i]) == "--case" && i + 1 < argc) s.scenario = argv[++i];
  }
  try {
    const auto env = testing::dist_env_from_environment();
    g_rank = s.rank = env.rank;
    s.world = env.world;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
      LOG("SKIP: no usable CUDA device");
      return 0;
    }
    DMOE_CUDA_CHECK(cudaSetDevice(env.local_rank % ndev));
    int major = 0;
    DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, env.local_rank % ndev));
    if (major != 9) {
      LOG("SKIP: needs an SM90 GPU");
      return 0;
    }
    const ncclUniqueId id = testing::exchange_unique_id(env, id_name);
    DMOE_NCCL_CHECK(ncclCommInitRank(&s.nccl, env.world, id, env.rank));
    DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    const int scenario_rc = body(s);
    if (!s.scenario.empty()) return scenario_rc;
    DMOE_NCCL_CHECK(ncclCommDestroy(s.nccl));
    if (s.failed) {
      LOG("FAILED: %d of %d cases", s.failed, s.run);
      return 1;
    }
    LOG("ALL PASS: %d cases", s.run);
    return 0;
  } catch (const std::exception& e) {
    LOG("ERROR: %s", e.what());
    return 1;
  }
}

}  // namespace dist_moe::layer_suite
