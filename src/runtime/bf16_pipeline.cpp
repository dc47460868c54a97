// The BF16 routed-experts pipeline (DESIGN.md §4): one fixed kernel sequence per call, device
// predicates decide what the conditional stages do, the activation planner places every buffer.
//
// Forward (per rank):  [validate ids] publish -> route (EP barrier + tables) -> [rows exchange +
//   EP barrier] -> plan -> [save x] -> W13 gather GEMM + SwiGLU -> W2 scatter GEMM (h3 rows into the
//   owners' combine windows) -> EP barrier + top-k reduction (or RMSNorm) -> [save h3]
// Backward: plan -> recompute block under need_recompute (restore x, barrier, W13, W2 scatter,
//   barrier) -> SwiGLU for h2 (saved path) -> top-k backward (grad_h3 into the dispatch window,
//   grad scores) -> barrier -> W2 DGRAD gathering grad_h3 -> W2 WGRAD -> SwiGLU backward -> W13 DGRAD
//   scattering grad_x routes into the owners' combine windows -> W13 WGRAD -> barrier -> K reduction.
#include <cuda_runtime.h>

#include "dist_moe/check.h"
#include "dist_moe/grouped_gemm.h"
#include "dist_moe/routed_experts.h"
#include "kernels/pipeline_glue.h"
#include "kernels/planner.h"
#include "kernels/swiglu.h"
#include "kernels/topk.h"
#include "runtime/context_impl.h"
#include "runtime/fp8_blockwise_pipeline.h"
#include "runtime/layer_gemms.h"
#include "runtime/mxfp8_pipeline.h"
#include "runtime/nvfp4_pipeline.h"
#include "runtime/pipeline_common.h"

namespace dist_moe {
namespace {

using planner::LayerStateField;

void check_inputs(const Context::Impl& c, const RoutedExpertsInputs& in) {
  runtime::check_token_inputs(c, in);
  runtime::check_bf16_weights(c, in);
}

// ---- forward ------------------------------------------------------------------------------------

struct ForwardTables {
  const int32_t* expert_rows;
  const void* const* gather_src;
  void* const* scatter_dst;
};

// W13 (gathering x rows from the peers' dispatch windows) and W2 (scattering h3 route rows into
// the owners' combine windows). `layer` holds the planner's offsets; `counts` may be gated.
void expert_forward(Context::Impl& c, const RoutedExpertsInputs& in, const ForwardTables& t, const int32_t* counts,
                    const int64_t* xg_off, const int64_t* h1_off, const int64_t* h2_off, bool keep_h1,
                    float* clip_stats, float clip_limit, bool recompute, cudaStream_t stream) {
  uint8_t* act = c.activation_base();
  W13FpropArgs w13 = runtime::w13_fprop_args(c, in, counts);
  w13.h1 = keep_h1 ? act : nullptr;
  w13.h1_offset = keep_h1 ? h1_off : nullptr;
  w13.h2 = act;
  w13.h2_offset = h2_off;
  w13.clip_stats = clip_stats;
  w13.clip_limit = clip_limit;
  w13.gather.row_ptrs = t.gather_src;
  w13.gather.gathered = act;
  w13.gather.gathered_offset = xg_off;
  w13.gather.workspace = c.gather_workspace;
  grouped_gemm_w13_fprop(w13, stream);
  c.stage(recompute ? "recompute_w13" : "w13", stream);

  FpropArgs w2 = runtime::w2_fprop_args(c, in, counts);
  w2.a = act;
  w2.a_offset = h2_off;
  w2.scatter.row_ptrs = t.scatter_dst;
  grouped_gemm_fprop(w2, stream);
  c.stage(recompute ? "recompute_w2" : "w2", stream);
}

void forward_impl(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                  const ExecutionOptions& o, cudaStream_t stream) {
  check_inputs(c, in);
  o.validate();
  DMOE_CHECK_ARG(out_TD, "out_TD is required");
  const runtime::ForwardHead head = runtime::forward_head(c, in, saved, o, /*mxfp8=*/nullptr, stream);
  const comm::RoutingTables& tb = c.ep->tables();
  const int64_t* layer = head.layer;
  const ForwardTables t{tb.expert_rows, tb.gather_src, tb.scatter_dst};
  expert_forward(c, in, t, tb.expert_rows, layer + planner::kXGathered, layer + planner::kH1, layer + planner::kH2,
                 /*keep_h1=*/!head.scratch_only, o.swiglu_clip_stats_out_3, static_cast<float>(o.swiglu_clip_limit),
                 /*recompute=*/false, stream);
  runtime::forward_reduce(c, in, out_TD, saved, o, head, stream);
}

// ---- backward -----------------------------------------------------------------------------------

void backward_impl(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
                   const void* grad_out_TD, const RoutedExpertsGradients& g, const ExecutionOptions& o,
                   cudaStream_t stream) {
  check_inputs(c, in);
  o.validate();
  const DType wgrad = runtime::check_backward(c, s, grad_out_TD, g, o);

  const int64_t T = in.num_tokens, F = c.config.intermediate_dim;
  uint8_t* act = c.activation_base();
  const int64_t* layer = s.layer_state;
  const int64_t* need_recompute = layer + planner::kNeedRecompute;
  int64_t* bo = c.backward_offsets;  // grad_h1, h2, grad_h2, grad_h3_gathered, h1, x_gathered, x, h3
  const int64_t caller_x = static_cast<const uint8_t*>(in.x_TD) - act;
  kernels::plan_backward(c.geometry, c.call_shape(T), c.planner_state, layer, caller_x, bo, stream);

  // Recompute block: a fixed launch sequence whose data stages do nothing on the saved path. Its two
  // EP barriers run only when recomputing (every rank's plan agrees; on the saved path no peer reads
  // or writes a window between the last op's final barrier and the barrier after top-k backward).
  runtime::begin_recompute(c, T, bo + 6, need_recompute, s.expert_rows, stream);
  const ForwardTables t{s.expert_rows, s.gather_src, s.scatter_dst};
  expert_forward(c, in, t, c.counts_gated, bo + 5, bo + 4, bo + 1, /*keep_h1=*/true, nullptr, 0.f,
                 /*recompute=*/true, stream);
  c.ep->barrier(stream, need_recompute);  // recomputed h3 rows are in their owners' combine windows

  // Saved path: h2 from the saved h1 (the recompute path's W13 epilogue already wrote it).
  const kernels::ExpertRowsView rows{s.expert_rows_unpadded, s.expert_offsets, static_cast<int32_t>(c.local_experts),
                                     c.capacity_rows()};
  const activation::SwigluParams sp = runtime::swiglu_params(c.config);
  kernels::swiglu_forward({act, bo + 4}, {act, bo + 1}, F, rows, sp, nullptr, 0.f, stream, need_recompute, false);
  c.stage("h2_from_saved_h1", stream);

  runtime::backward_topk(c, in, s, grad_out_TD, g, o, bo + 7, stream);

  // W2 DGRAD gathers grad_h3 rows from the owners' dispatch windows.
  DgradArgs d2 = runtime::w2_dgrad_args(c, in, s.expert_rows);
  d2.grad_a = act;
  d2.grad_a_offset = bo + 2;
  d2.gather.row_ptrs = s.grad_gather_src;
  d2.gather.gathered = act;
  d2.gather.gathered_offset = bo + 3;
  d2.gather.workspace = c.gather_workspace;
  grouped_gemm_dgrad(d2, stream);
  c.stage("w2_dgrad", stream);

  WgradArgs w2g = runtime::w2_wgrad_args(c, s.expert_rows, g.grad_w2, wgrad, g.accumulate);
  w2g.grad_out = act;
  w2g.grad_out_offset = bo + 3;
  w2g.a = act;
  w2g.a_offset = bo + 1;
  grouped_gemm_wgrad(w2g, stream);
  c.stage("w2_wgrad", stream);

  kernels::swiglu_backward({act, bo + 4}, {act, bo + 2}, {act, bo + 0}, F, rows, sp, stream);
  c.stage("swiglu_backward", stream);

  // W13 DGRAD scatters each route's input gradient into its owner's combine window.
  DgradArgs d13 = runtime::w13_dgrad_args(c, in, s.expert_rows);
  d13.grad_out = act;
  d13.grad_out_offset = bo + 0;
  d13.scatter.row_ptrs = s.scatter_dst;
  grouped_gemm_dgrad(d13, stream);
  c.stage("w13_dgrad", stream);

  WgradArgs w13g = runtime::w13_wgrad_args(c, s.expert_rows, g.grad_w13, wgrad, g.accumulate);
  w13g.grad_out = act;
  w13g.grad_out_offset = bo + 0;
  w13g.a = act;
  w13g.a_offset = bo + 5;
  grouped_gemm_wgrad(w13g, stream);
  c.stage("w13_wgrad", stream);

  runtime::backward_reduce(c, in, g, stream);
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------

namespace {

// Reserves every piece of a SavedState in its arena (the reserve order fixes the layout), then
// allocates the arena or adopts caller-owned memory of the same size.
void lay_out_saved_state(const Context::Impl& c, SavedState::Buffers& b, void* external) {
  const int64_t L = c.local_experts, cap = c.capacity_rows();
  const int64_t TK = c.config.max_num_local_input_tokens * c.config.top_k;
  const size_t o_layer = b.arena.reserve(sizeof(int64_t) * planner::layer_state_size(c.world)),
               o_rows = b.arena.reserve(sizeof(int32_t) * L), o_rows_u = b.arena.reserve(sizeof(int32_t) * L),
               o_off = b.arena.reserve(sizeof(int32_t) * (L + 1)), o_g = b.arena.reserve(sizeof(void*) * cap),
               o_s = b.arena.reserve(sizeof(void*) * cap), o_gg = b.arena.reserve(sizeof(void*) * cap),
               o_rstd = b.arena.reserve(sizeof(float) * TK);
  if (external)
    b.arena.adopt(external);
  else
    b.arena.allocate();
  b.layer_state = b.arena.at<int64_t>(o_layer);
  b.expert_rows = b.arena.at<int32_t>(o_rows);
  b.expert_rows_unpadded = b.arena.at<int32_t>(o_rows_u);
  b.expert_offsets = b.arena.at<int32_t>(o_off);
  b.gather_src = b.arena.at<const void*>(o_g);
  b.scatter_dst = b.arena.at<void*>(o_s);
  b.grad_gather_src = b.arena.at<const void*>(o_gg);
  b.rstd = b.arena.at<float>(o_rstd);
  b.capacity_rows = cap;
  b.local_experts = L;
}

}  // namespace

SavedState::SavedState(const Context& ctx) : buffers_(new Buffers()) {
  lay_out_saved_state(context_impl(ctx), *buffers_, nullptr);
}

SavedState::SavedState(const Context& ctx, void* device_storage) : buffers_(new Buffers()) {
  DMOE_CHECK_ARG(device_storage != nullptr, "SavedState storage must be a device pointer");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(device_storage) % kMemoryAlignment == 0,
                 "SavedState storage must be ", kMemoryAlignment, "-byte aligned");
  lay_out_saved_state(context_impl(ctx), *buffers_, device_storage);
  buffers_->used = true;  // the caller vouches that a forward of this context filled it
}

size_t SavedState::storage_bytes(const Context& ctx) {
  Buffers probe;
  const Context::Impl& c = context_impl(ctx);
  lay_out_saved_state(c, probe, reinterpret_cast<void*>(static_cast<uintptr_t>(kMemoryAlignment)));
  return probe.arena.bytes();
}

SavedState::~SavedState() { delete buffers_; }

namespace {
// The FP8-blockwise pipeline: FP8-blockwise contexts, and MXFP8 training ones at shared scales (G152).
bool fp8_blockwise(const Context::Impl& c) {
  return runtime::runs_fp8_blockwise_pipeline(c.config, c.mxfp8_on_fp8_blockwise);
}

// The context's format's forward.
void forward_of_format(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                       const ExecutionOptions& options, cudaStream_t stream) {
  if (fp8_blockwise(c))
    runtime::fp8_blockwise_forward(c, in, out_TD, saved, options, stream);
  else if (c.config.block_scaled && c.config.block_scaled->format == BlockScaledFormat::kNVFP4)
    runtime::nvfp4_forward(c, in, out_TD, saved, options, stream);
  else if (c.config.block_scaled)
    runtime::mxfp8_forward(c, in, out_TD, saved, options, stream);
  else
    forward_impl(c, in, out_TD, saved, options, stream);
}
}  // namespace

void routed_experts_forward(Context& ctx, const RoutedExpertsInputs& in, void* out_TD, SavedState* saved,
                            const ExecutionOptions& options, cudaStream_t stream) {
  Context::Impl& c = context_impl(ctx);
  if (c.config.inference && saved)
    throw Error(ErrorCode::kRuntime, "inference contexts do not support autograd (no SavedState)");
  forward_of_format(c, in, out_TD, saved ? &saved->buffers() : nullptr, options, stream);
}

void routed_experts_backward(Context& ctx, const RoutedExpertsInputs& in, const SavedState& saved,
                             const void* grad_out_TD, const RoutedExpertsGradients& grads,
                             const ExecutionOptions& options, cudaStream_t stream) {
  Context::Impl& c = context_impl(ctx);
  // Before any format's checks.
  if (c.config.inference) throw Error(ErrorCode::kRuntime, "inference contexts do not support autograd");
  if (fp8_blockwise(c))
    runtime::fp8_blockwise_backward(c, in, saved.buffers(), grad_out_TD, grads, options, stream);
  else if (c.config.block_scaled)
    runtime::mxfp8_backward(c, in, saved.buffers(), grad_out_TD, grads, options, stream);
  else
    backward_impl(c, in, saved.buffers(), grad_out_TD, grads, options, stream);
}

void routed_experts_inference(Context& ctx, const RoutedExpertsInputs& in, void* out_TD,
                              const ExecutionOptions& options, cudaStream_t stream) {
  forward_of_format(context_impl(ctx), in, out_TD, nullptr, options, stream);
}

}  // namespace dist_moe
