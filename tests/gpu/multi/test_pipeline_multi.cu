// The BF16 distributed routed-experts layer end to end (issue 6), one process per GPU through
// dmoe_launch: every rank builds the same global problem from a seed, runs the CPU oracle of all
// ranks, runs its part of the layer on the GPU, and compares its output and gradients with the
// oracle at upstream's tolerances. Prints one line per case and "ALL PASS: N cases" at the end.
//
//   dmoe_launch -n 2 -- dist_moe_pipeline_tests [--filter NAME]
//   dmoe_launch -n 2 ... -- dist_moe_pipeline_tests --case unequal_t|overflow|bad_id   (must trap)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "layer_suite.h"
#include "testing/device_buffer.h"
#include "testing/dist_env.h"
#include "dist_moe/check.h"
#include "dist_moe/context.h"
#include "dist_moe/routed_experts.h"
#include "reference/oracle.h"
#include "kernels/pipeline_glue.h"

namespace {

using namespace dist_moe;
using reference::TensorF;

using namespace layer_suite;

TensorF from_bf16(const std::vector<uint16_t>& bits, std::vector<int64_t> shape) {
  return testing::tensor_from_bf16(bits, std::move(shape));
}

struct Case {
  std::string name;
  int64_t T_max = 64, T = 64, D = 512, F = 256, K = 2, E = 8;
  Activation activation = Activation::kSwiGLU;
  bool rmsnorm = false;
  int padded_rank = -1;           // this rank's routes are all -1
  bool full_slot = false;         // slot = maximum useful (saved path) instead of the minimum
  DType wgrad = DType::kFloat32;
  bool int64_ids = false, bf16_scores = false;
  uint64_t seed = 1;
};

struct Problem {
  reference::Problem p;
  reference::ForwardResult fwd;
  reference::BackwardResult bwd;
  std::vector<TensorF> grad_out;
};

Problem make_problem(const Case& c, int world) {
  Problem pr;
  pr.p = reference::make_random_problem(problem_spec(c, world));
  reference::ForwardOptions fo;
  if (c.rmsnorm) fo.rmsnorm = reference::RMSNormSpec{1e-6, {}, 0.0};
  pr.fwd = reference::forward(pr.p, fo);
  pr.grad_out = reference::make_random_grad_out(pr.p, c.seed + 99);
  reference::BackwardOptions bo;
  bo.wgrad_dtype = c.wgrad;
  pr.bwd = reference::backward(pr.p, pr.fwd, pr.grad_out, bo);
  return pr;
}

Config config_of(const Case& c, int world, bool full_slot) {
  return suite_config(c, world, full_slot, std::nullopt);
}

// Device copies of one rank's inputs.
struct Inputs : TokenInputs {
  Dev<uint16_t> w13, w2, gout;
  RoutedExpertsInputs in;
  Inputs(const Case& c, const reference::Problem& p, const TensorF& grad_out, int rank)
      : TokenInputs(p, rank), w13(bf16_bits(p.local_w13(rank))), w2(bf16_bits(p.local_w2(rank))),
        gout(bf16_bits(grad_out)) {
    const int64_t L = p.num_local_experts();
    point(c, in);
    in.w13 = w13.get();
    in.w13_shape = {L, 2 * c.F, c.D};
    in.w2 = w2.get();
    in.w2_shape = {L, c.D, c.F};
  }
};

Result run_layer(ncclComm_t nccl, const Case& c, const Problem& pr, int rank, int world, bool full_slot,
                 cudaStream_t stream) {
  auto ctx = Context::create(config_of(c, world, full_slot), nccl);
  const int64_t L = ctx->local_experts();
  Inputs inp(c, pr.p, pr.grad_out[rank], rank);
  Outputs o(c, L);
  const ExecutionOptions opts = suite_options(c);
  SavedState st(*ctx);
  routed_experts_forward(*ctx, inp.in, o.out.get(), &st, opts, stream);
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), o.g, opts, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  Result r = o.read(c, L);
  ctx->close();
  return r;
}

bool check(const char* what, const TensorF& got, const TensorF& want, const reference::Tolerance& tol,
           std::string* why) {
  const auto cmp = reference::compare(got, want, tol);
  if (!cmp.passed) *why += std::string(" ") + what + ": " + cmp.summary() + ";";
  return cmp.passed;
}

bool check_against_oracle(const Case& c, const Problem& pr, const Result& r, int rank, std::string* why) {
  const reference::Tolerance fwd{2e-2, 2e-2, 5e-3, 0.999};
  const reference::Tolerance grad{3e-2, 3e-2, 1e-2, 0.995};
  const reference::Tolerance wgrad{3e-2, 1.0, 1.5e-2, 0.995};
  const auto& f = pr.fwd.ranks[rank];
  const auto& b = pr.bwd.ranks[rank];
  bool ok = check("out", r.out, f.out_TD, fwd, why);
  ok &= check("grad_x", r.grad_x, b.grad_x_TD, grad, why);
  ok &= check("grad_scores", r.grad_scores, b.grad_scores_TK, grad, why);
  ok &= check("dW13", r.dw13, b.dw13_EFD, wgrad, why);
  ok &= check("dW2", r.dw2, b.dw2_EDF, wgrad, why);
  if (c.padded_rank == rank) {  // a fully padded rank: exact zeros
    for (float v : r.out.data) ok &= v == 0.f;
    for (float v : r.grad_x.data) ok &= v == 0.f;
    for (float v : r.grad_scores.data) ok &= v == 0.f;
    if (!ok) *why += " padded rank not exactly zero;";
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
  c = {"bf16_wgrad_int64_ids_bf16_scores"}; c.wgrad = DType::kBFloat16; c.int64_ids = true; c.bf16_scores = true;
  v.push_back(c);
  c = {"t1"}; c.T_max = 8; c.T = 1; v.push_back(c);
  c = {"wide_e64"}; c.E = 64; c.K = 8; c.D = 256; c.F = 512; c.T = 128; c.T_max = 128; v.push_back(c);
  return v;
}

// ---- cases with their own flow ----------------------------------------------------------------

ExecutionOptions plain_options() {
  ExecutionOptions o;
  o.validate_expert_ids = true;
  return o;
}

// Whole forward+backward captured in one CUDA graph (global capture mode: any host synchronization
// inside a call fails the capture), replayed twice: bitwise equal to eager, and the planner is back
// to its initial state after each replay.
bool case_graph(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"graph"};
  c.seed = 7;
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world, false), nccl);
  const int64_t L = ctx->local_experts();
  Inputs inp(c, pr.p, pr.grad_out[rank], rank);
  Outputs eager(c, L), graphed(c, L);
  SavedState st(*ctx);
  const ExecutionOptions o = plain_options();
  const auto before = planner_snapshot(*ctx);
  routed_experts_forward(*ctx, inp.in, eager.out.get(), &st, o, stream);
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), eager.g, o, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  DMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  routed_experts_forward(*ctx, inp.in, graphed.out.get(), &st, o, stream);
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), graphed.g, o, stream);
  DMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  DMOE_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  bool ok = true;
  const Result want = eager.read(c, L);
  for (int replay = 0; replay < 2; ++replay) {
    DMOE_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!bitwise(graphed.read(c, L), want)) ok = false, *why += " replay " + std::to_string(replay) + " != eager;";
    if (planner_snapshot(*ctx) != before) ok = false, *why += " planner not restored after replay;";
  }
  std::string oracle_why;
  if (!check_against_oracle(c, pr, want, rank, &oracle_why)) ok = false, *why += oracle_why;
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  ctx->close();
  return ok;
}

// Inference context (0 slots): the forward matches the oracle; a training context under no-grad
// (no SavedState) gives the same output and leaves the slot stacks untouched.
bool case_inference_and_no_grad(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"inference"};
  c.seed = 11;
  const Problem pr = make_problem(c, world);
  const ExecutionOptions o = plain_options();
  bool ok = true;
  Config inf = config_of(c, world, false);
  inf.inference = true;
  inf.num_activation_slots = 0;
  inf.wgrad_dtype.reset();
  {
    auto ctx = Context::create(inf, nccl);
    Inputs inp(c, pr.p, pr.grad_out[rank], rank);
    Outputs out(c, ctx->local_experts());
    routed_experts_inference(*ctx, inp.in, out.out.get(), o, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    ok &= check("inference out", out.read(c, ctx->local_experts()).out, pr.fwd.ranks[rank].out_TD,
                {2e-2, 2e-2, 5e-3, 0.999}, why);
    ctx->close();
  }
  {
    auto ctx = Context::create(config_of(c, world, false), nccl);
    Inputs inp(c, pr.p, pr.grad_out[rank], rank);
    Outputs out(c, ctx->local_experts());
    const auto before = planner_snapshot(*ctx);
    routed_experts_forward(*ctx, inp.in, out.out.get(), nullptr, o, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    ok &= check("no-grad out", out.read(c, ctx->local_experts()).out, pr.fwd.ranks[rank].out_TD,
                {2e-2, 2e-2, 5e-3, 0.999}, why);
    if (planner_snapshot(*ctx) != before) ok = false, *why += " no-grad forward changed the slot state;";
    ctx->close();
  }
  return ok;
}

// WGRAD accumulation over two backward calls: the second leaves about twice the first.
// A SavedState constructed while the legacy stream is busy (a 20 ms spin there), used at once on the
// suite's non-blocking stream, with a 40 ms spin between the forward that fills it and the backward
// that reads it: had the constructor left its zeroing memset queued on the legacy stream, the memset
// would land inside that gap and the backward would read zeroed tables. Checked against the oracle.
bool case_saved_state_legacy_stream(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"saved_state_legacy_stream"};
  c.seed = 13;
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world, true), nccl);
  const int64_t L = ctx->local_experts();
  Inputs inp(c, pr.p, pr.grad_out[rank], rank);
  Outputs out(c, L);
  const ExecutionOptions o = plain_options();
  kernels::spin_delay(20'000'000, cudaStreamLegacy);
  SavedState st(*ctx);
  routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
  kernels::spin_delay(40'000'000, stream);
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), out.g, o, stream);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const bool ok = check_against_oracle(c, pr, out.read(c, L), rank, why);
  ctx->close();
  return ok;
}

bool case_accumulate(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  bool ok = true;
  for (DType dt : {DType::kFloat32, DType::kBFloat16}) {
    Case c{"accumulate"};
    c.wgrad = dt;
    c.seed = 13;
    const Problem pr = make_problem(c, world);
    auto ctx = Context::create(config_of(c, world, false), nccl);
    const int64_t L = ctx->local_experts();
    Inputs inp(c, pr.p, pr.grad_out[rank], rank);
    Outputs o1(c, L);
    SavedState st(*ctx);
    const ExecutionOptions o = plain_options();
    routed_experts_forward(*ctx, inp.in, o1.out.get(), &st, o, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), o1.g, o, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const Result first = o1.read(c, L);
    RoutedExpertsGradients acc = o1.g;
    acc.accumulate = true;
    routed_experts_forward(*ctx, inp.in, o1.out.get(), &st, o, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), acc, o, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const Result second = o1.read(c, L);
    TensorF twice13 = first.dw13, twice2 = first.dw2;
    for (auto& v : twice13.data) v *= 2.f;
    for (auto& v : twice2.data) v *= 2.f;
    ok &= check(dt == DType::kFloat32 ? "fp32 dW13 x2" : "bf16 dW13 x2", second.dw13, twice13, {5e-2, 2e-2, -1, -2}, why);
    ok &= check(dt == DType::kFloat32 ? "fp32 dW2 x2" : "bf16 dW2 x2", second.dw2, twice2, {5e-2, 2e-2, -1, -2}, why);
    ok &= check("accumulated dW13 vs oracle x2", second.dw13, [&] {
      TensorF t = pr.bwd.ranks[rank].dw13_EFD;
      for (auto& v : t.data) v *= 2.f;
      return t;
    }(), {3e-2, 1.0, 1.5e-2, 0.995}, why);
    ctx->close();
  }
  return ok;
}

// T changes between calls on one context: 64, 17, 64, each against its own oracle.
bool case_varying_t(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case base{"varying_t"};
  base.T_max = 64;
  auto ctx = Context::create(config_of(base, world, false), nccl);
  const int64_t L = ctx->local_experts();
  bool ok = true;
  for (int64_t T : {64, 17, 64}) {
    Case c = base;
    c.T = T;
    c.seed = 17 + T;
    const Problem pr = make_problem(c, world);
    Inputs inp(c, pr.p, pr.grad_out[rank], rank);
    Outputs out(c, L);
    SavedState st(*ctx);
    const ExecutionOptions o = plain_options();
    routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
    routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), out.g, o, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::string w;
    if (!check_against_oracle(c, pr, out.read(c, L), rank, &w)) ok = false, *why += " T=" + std::to_string(T) + w;
  }
  ctx->close();
  return ok;
}

// Two slots, the second selected: the layer is pushed to and popped from slot 1, slot 0 untouched.
bool case_selected_slot(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"selected_slot"};
  c.seed = 19;
  const Problem pr = make_problem(c, world);
  Config cfg = config_of(c, world, false);
  cfg.num_activation_slots = 2;
  cfg.activation_slot_capacity_factor = 1.5;
  auto ctx = Context::create(cfg, nccl);
  ctx->select_activation_slot(1, 1);
  const int64_t L = ctx->local_experts();
  Inputs inp(c, pr.p, pr.grad_out[rank], rank);
  Outputs out(c, L);
  SavedState st(*ctx);
  const ExecutionOptions o = plain_options();
  const auto before = planner_snapshot(*ctx);
  routed_experts_forward(*ctx, inp.in, out.out.get(), &st, o, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  const auto during = planner_snapshot(*ctx);
  const int64_t R = world;  // snapshot: saved_bytes[2][R] then layer_id[2]
  bool ok = true;
  if (during[2 * R + 0] != 0 || during[2 * R + 1] != 1) ok = false, *why += " layer not pushed to slot 1;";
  for (int64_t r = 0; r < R; ++r)
    if (during[r] != 0) ok = false, *why += " slot 0 bytes changed;";
  ctx->select_activation_slot(0, 1);  // a later selection must not redirect the pop
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), out.g, o, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  if (planner_snapshot(*ctx) != before) ok = false, *why += " slot 1 not restored;";
  std::string w;
  if (!check_against_oracle(c, pr, out.read(c, L), rank, &w)) ok = false, *why += w;
  ctx->close();
  return ok;
}

// Activation checkpointing as torch runs it, on a 1-layer slot (minimum and maximum useful): the
// first forward's state is discarded (recompute_from_inputs: it takes no slot space), the
// checkpoint's recompute pushes the layer and the backward pops it. Three steps, no reset: every
// step equals a plain forward+backward bitwise and leaves the planner as it found it. A discarded
// state that reaches a backward anyway recomputes from the caller's x, bitwise the same too.
bool case_checkpoint(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"checkpoint"};
  c.seed = 29;
  const Problem pr = make_problem(c, world);
  bool ok = true;
  for (const bool full : {false, true}) {
    auto ctx = Context::create(config_of(c, world, full), nccl);
    const int64_t L = ctx->local_experts();
    Inputs inp(c, pr.p, pr.grad_out[rank], rank);
    const ExecutionOptions o = plain_options();
    ExecutionOptions discard = o;
    discard.recompute_from_inputs = true;
    Outputs plain(c, L);
    SavedState first(*ctx), recomputed(*ctx);
    const auto before = planner_snapshot(*ctx);
    routed_experts_forward(*ctx, inp.in, plain.out.get(), &recomputed, o, stream);
    routed_experts_backward(*ctx, inp.in, recomputed, inp.gout.get(), plain.g, o, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    const Result want = plain.read(c, L);
    const std::string tag = full ? " (full slot)" : " (minimum slot)";
    for (int step = 0; step < 3; ++step) {
      Outputs o1(c, L), o2(c, L);
      routed_experts_forward(*ctx, inp.in, o1.out.get(), &first, discard, stream);  // the checkpoint's forward
      DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (planner_snapshot(*ctx) != before) ok = false, *why += " discarded forward touched the slot" + tag + ";";
      routed_experts_forward(*ctx, inp.in, o2.out.get(), &recomputed, o, stream);  // its recompute
      routed_experts_backward(*ctx, inp.in, recomputed, inp.gout.get(), o2.g, o, stream);
      DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
      Result got = o2.read(c, L);
      got.out = o1.read(c, L).out;  // the caller's output is the first forward's
      if (!bitwise(got, want)) ok = false, *why += " step " + std::to_string(step) + " differs from plain" + tag + ";";
      if (planner_snapshot(*ctx) != before) ok = false, *why += " slot not empty after step" + tag + ";";
    }
    Outputs o3(c, L);
    routed_experts_forward(*ctx, inp.in, o3.out.get(), &first, discard, stream);
    routed_experts_backward(*ctx, inp.in, first, inp.gout.get(), o3.g, o, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    if (!bitwise(o3.read(c, L), want)) ok = false, *why += " backward from a discarded state differs" + tag + ";";
    if (planner_snapshot(*ctx) != before) ok = false, *why += " discarded state's backward touched the slot" + tag + ";";
    ctx->close();
  }
  return ok;
}

// ---- failure scenarios: each must end in a device trap with its diagnostic line -------------------

int run_scenario(ncclComm_t nccl, int rank, int world, const std::string& scenario, cudaStream_t stream) {
  Case c{"scenario"};
  c.T_max = 16;
  c.T = 16;
  c.D = 256;
  c.F = 256;
  c.K = 1;
  c.E = 2 * world;
  const Problem pr = make_problem(c, world);
  Config cfg = config_of(c, world, false);
  if (scenario == "overflow") cfg.device_scratch_capacity_factor = 0.5;
  ContextOptions options;
  options.comm_timeout_ms = 5000;  // a peer left waiting at a barrier gives up quickly
  auto ctx = Context::create(cfg, nccl, options);
  Inputs inp(c, pr.p, pr.grad_out[rank], rank);
  Outputs out(c, ctx->local_experts());
  std::vector<int32_t> ids(c.T * c.K, 0);  // every token to expert 0 (overflow)
  if (scenario == "bad_id") ids.assign(ids.size(), static_cast<int32_t>(c.E));
  if (scenario == "overflow" || scenario == "bad_id") inp.ids32.upload(ids);
  RoutedExpertsInputs in = inp.in;
  in.id_dtype = DType::kInt32;
  in.topk_ids_TK = inp.ids32.get();
  if (scenario == "unequal_t" && rank == world - 1) in.num_tokens = c.T - 1;
  LOG("EXPECTED_TRAP scenario %s", scenario.c_str());
  SavedState st(*ctx);
  routed_experts_forward(*ctx, in, out.out.get(), &st, plain_options(), stream);
  routed_experts_backward(*ctx, in, st, inp.gout.get(), out.g, plain_options(), stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  LOG("UNEXPECTED: scenario %s finished without a trap", scenario.c_str());
  return 0;
}

}  // namespace

// Route-level I/O (the PyTorch callable postprocess): the forward's exported route rows match the
// oracle's on valid routes, and a backward fed grad_h3 = BF16(s * g) -- what the top-k backward
// computes itself -- gives the ordinary backward's grad_x, dW13 and dW2 bitwise.
bool case_route_io(ncclComm_t nccl, int rank, int world, cudaStream_t stream, std::string* why) {
  Case c{"route_io"};
  c.seed = 23;
  const Problem pr = make_problem(c, world);
  auto ctx = Context::create(config_of(c, world, false), nccl);
  const int64_t L = ctx->local_experts(), TK = c.T * c.K;
  Inputs inp(c, pr.p, pr.grad_out[rank], rank);
  Outputs plain(c, L), routed(c, L);
  SavedState st(*ctx);
  const ExecutionOptions o = plain_options();
  routed_experts_forward(*ctx, inp.in, plain.out.get(), &st, o, stream);
  routed_experts_backward(*ctx, inp.in, st, inp.gout.get(), plain.g, o, stream);

  const auto& ids = pr.p.ids_TK[rank];
  const TensorF& scores = pr.p.scores_TK[rank];
  const TensorF& gout = pr.grad_out[rank];
  TensorF gh3({TK, c.D});
  for (int64_t r = 0; r < TK; ++r)
    for (int64_t d = 0; d < c.D; ++d)
      gh3.data[r * c.D + d] = ids[r] >= 0 ? scores.data[r] * gout.data[(r / c.K) * c.D + d] : 0.f;
  Dev<uint16_t> h3(TK * c.D), grad_h3(bf16_bits(gh3));
  h3.poison();
  ExecutionOptions out_io = o;
  out_io.expert_output_TKD = h3.get();
  ExecutionOptions grad_io = o;
  grad_io.grad_expert_output_TKD = grad_h3.get();
  RoutedExpertsGradients g = routed.g;
  g.grad_scores_TK = nullptr;  // the caller differentiates its own reduction
  routed_experts_forward(*ctx, inp.in, routed.out.get(), &st, out_io, stream);
  routed_experts_backward(*ctx, inp.in, st, nullptr, g, grad_io, stream);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));

  const Result want = plain.read(c, L), got = routed.read(c, L);
  bool ok = true;
  TensorF h3_valid = from_bf16(h3.download(), {TK, c.D}), oracle = pr.fwd.ranks[rank].combine_TKD;
  for (int64_t r = 0; r < TK; ++r)
    if (ids[r] < 0)
      for (int64_t d = 0; d < c.D; ++d) h3_valid.data[r * c.D + d] = oracle.data[r * c.D + d] = 0.f;
  ok &= check("exported h3", h3_valid, oracle, {2e-2, 2e-2, 5e-3, 0.999}, why);
  if (!reference::bitwise_equal(got.out, want.out)) ok = false, *why += " out differs with export on;";
  if (!reference::bitwise_equal(got.grad_x, want.grad_x)) ok = false, *why += " grad_x differs;";
  if (!reference::bitwise_equal(got.dw13, want.dw13)) ok = false, *why += " dW13 differs;";
  if (!reference::bitwise_equal(got.dw2, want.dw2)) ok = false, *why += " dW2 differs;";
  ctx->close();
  return ok;
}

int main(int argc, char** argv) {
  return layer_suite::suite_main(argc, argv, "pipeline_tests", [](layer_suite::Suite& s) {
    if (!s.scenario.empty()) return run_scenario(s.nccl, s.rank, s.world, s.scenario, s.stream);
    for (const Case& c : cases()) {
      if (!s.wants(c.name) || c.E % s.world != 0 || c.padded_rank >= s.world) continue;
      const Problem pr = make_problem(c, s.world);
      std::string why;
      const Result r = run_layer(s.nccl, c, pr, s.rank, s.world, c.full_slot, s.stream);
      bool ok = check_against_oracle(c, pr, r, s.rank, &why);
      // The saved path (slot = maximum useful) gives the same bits as the all-recompute minimum.
      if (ok && c.name == "basic") {
        const Result full = run_layer(s.nccl, c, pr, s.rank, s.world, /*full_slot=*/true, s.stream);
        if (!bitwise(r, full)) ok = false, why += " saved path differs from the recompute path bitwise;";
      }
      s.report(c.name, ok, why);
    }
    s.run_specials({{"graph", case_graph},
                    {"inference_and_no_grad", case_inference_and_no_grad},
                    {"accumulate", case_accumulate},
                    {"varying_t", case_varying_t},
                    {"selected_slot", case_selected_slot},
                    {"checkpoint", case_checkpoint},
                    {"route_io", case_route_io},
                    {"saved_state_legacy_stream", case_saved_state_legacy_stream}});
    return 0;
  });
}
