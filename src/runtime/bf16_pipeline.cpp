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
#include "runtime/layer_gemms.h"

namespace dist_moe {
namespace {

using planner::LayerStateField;

// ---- argument checks (upstream's routed_experts validation, C++ part) ---------------------------

void check_weights(const Context::Impl& c, const RoutedExpertsInputs& in) {
  const int64_t L = c.local_experts, D = c.config.hidden_dim, F = c.config.intermediate_dim;
  const auto& a = in.w13_shape;
  const auto& b = in.w2_shape;
  DMOE_CHECK_ARG(in.w13 && in.w2, "w13 and w2 must be device pointers");
  const bool three_d = (a.size() == 3 || a.size() == 4) && b.size() == 3;
  const bool flat = a.size() == 2 && b.size() == 2;
  if (!three_d && !flat) detail::fail(ErrorCode::kInvalidValue, "w13 and w2 use incompatible expert-weight layouts");
  if (a.size() == 4 && a[1] != 2) detail::fail(ErrorCode::kInvalidValue, "gate-axis w13 must have shape [E, 2, F, D]");
  const int64_t w13_rows = flat ? a[0] : (a.size() == 4 ? a[0] * 2 * a[2] : a[0] * a[1]);
  const int64_t w13_cols = a.back(), w2_rows = flat ? b[0] : b[0] * b[1], w2_cols = b.back();
  if (!flat && (a[0] != L || b[0] != L))
    detail::fail(ErrorCode::kInvalidValue, "weights must contain ", L, " local experts, got w13 ", a[0], " and w2 ",
                 b[0]);
  if (w13_rows != L * 2 * F || w13_cols != D)
    detail::fail(ErrorCode::kInvalidValue, "w13 must hold [", L, ", ", 2 * F, ", ", D, "] elements");
  if (w2_rows != L * D || w2_cols != F)
    detail::fail(ErrorCode::kInvalidValue, "w2 must hold [", L, ", ", D, ", ", F, "] elements");
}

void check_inputs(const Context::Impl& c, const RoutedExpertsInputs& in) {
  const int64_t T_max = c.config.max_num_local_input_tokens;
  if (in.num_tokens < 1 || in.num_tokens > T_max)
    detail::fail(ErrorCode::kInvalidValue, "local input token count must be in [1, context.max_num_local_input_tokens=",
                 T_max, "], got ", in.num_tokens);
  DMOE_CHECK_ARG(in.x_TD && in.topk_ids_TK && in.topk_scores_TK, "x_TD, topk_ids_TK and topk_scores_TK are required");
  if (in.id_dtype != DType::kInt32 && in.id_dtype != DType::kInt64)
    detail::fail(ErrorCode::kInvalidType, "topk_expert_ids_TK must be int32 or int64, got ", to_string(in.id_dtype));
  if (in.score_dtype != DType::kFloat32 && in.score_dtype != DType::kBFloat16)
    detail::fail(ErrorCode::kInvalidType, "topk_scores_TK must be float32 or bfloat16, got ",
                 to_string(in.score_dtype));
  check_weights(c, in);
}

kernels::TopkRoutes routes_of(const Context::Impl& c, const RoutedExpertsInputs& in) {
  kernels::TopkRoutes r;
  r.ids_TK = in.topk_ids_TK;
  r.id_dtype = in.id_dtype;
  r.scores_TK = in.topk_scores_TK;
  r.score_dtype = in.score_dtype;
  r.T = in.num_tokens;
  r.K = c.config.top_k;
  r.D = c.config.hidden_dim;
  return r;
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
  const int64_t T = in.num_tokens, D = c.config.hidden_dim, K = c.config.top_k;
  if (o.experts_output_postprocess)
    o.experts_output_postprocess->validate(DType::kBFloat16, in.score_dtype, K, D, saved != nullptr);
  // `saving`: a backward will read this call's SavedState. `pushes`: the layer also takes its place
  // in the selected activation slot; a forward whose saved state the caller will discard
  // (recompute_from_inputs: an activation checkpoint's first forward) plans scratch-only instead.
  const bool saving = saved != nullptr && !c.config.inference;
  const bool pushes = saving && !o.recompute_from_inputs;
  const bool scratch_only = !pushes;
  if (o.validate_expert_ids)
    kernels::validate_expert_ids(in.topk_ids_TK, in.id_dtype, T * K, c.config.num_experts, c.rank, stream);

  // Publish, barrier, routing tables (one kernel for decode-sized problems). No dispatch: the W13
  // GEMM gathers the rows itself.
  c.ep->publish_route_dispatch(in.x_TD, in.topk_ids_TK, in.id_dtype, T, /*x_gathered_MD=*/nullptr, stream);
  c.stage("publish+route", stream);
  const comm::RoutingTables& tb = c.ep->tables();

  // Plan: every rank's rows decide saved vs recompute identically on all ranks.
  int64_t* layer = saving ? saved->layer_state : c.call_layer_state;
  const int32_t* all_rows = nullptr;
  if (pushes) {
    kernels::publish_to_peers(tb.total_rows, c.rows_peer_bases, c.rank, c.world, stream);
    c.ep->barrier(stream);
    all_rows = static_cast<const int32_t*>(c.rows_window->local_ptr());
  }
  kernels::plan_forward(c.geometry, c.call_shape(T), c.planner_state, c.slot_ids + c.selected_slot, c.slot_depth,
                        all_rows, tb.total_rows, scratch_only, layer, stream);
  const int64_t* need_recompute = layer + planner::kNeedRecompute;
  uint8_t* act = c.activation_base();

  if (saving) {  // the backward's copy of this call's routing tables
    const int64_t L = c.local_experts, cap = c.capacity_rows();
    kernels::CopyBatch tables;  // one launch for the six arrays
    tables.add(saved->expert_rows, tb.expert_rows, L * sizeof(int32_t));
    tables.add(saved->expert_rows_unpadded, tb.expert_rows_unpadded, L * sizeof(int32_t));
    tables.add(saved->expert_offsets, tb.expert_offsets, (L + 1) * sizeof(int32_t));
    tables.add(saved->gather_src, tb.gather_src, cap * sizeof(void*));
    tables.add(saved->scatter_dst, tb.scatter_dst, cap * sizeof(void*));
    tables.add(saved->grad_gather_src, tb.grad_gather_src, cap * sizeof(void*));
    kernels::copy_batch(tables, stream);
    // Recompute path: keep the layer input (the published dispatch copy) in the slot.
    if (pushes)
      kernels::copy_if({act, layer + planner::kX}, c.dispatch_routes(), T * D * 2, need_recompute, true, stream);
    saved->used = true;
  }
  c.stage("plan", stream);

  const ForwardTables t{tb.expert_rows, tb.gather_src, tb.scatter_dst};
  expert_forward(c, in, t, tb.expert_rows, layer + planner::kXGathered, layer + planner::kH1, layer + planner::kH2,
                 /*keep_h1=*/!scratch_only, o.swiglu_clip_stats_out_3, static_cast<float>(o.swiglu_clip_limit),
                 /*recompute=*/false, stream);

  // Every route row is in its owner's combine window after the barrier; reduce over k.
  const kernels::TopkRoutes routes = routes_of(c, in);
  if (o.experts_output_postprocess) {
    const RMSNormPostprocess& pp = *o.experts_output_postprocess;
    c.ep->barrier(stream);
    kernels::RMSNormArgs a;
    a.eps = static_cast<float>(pp.eps);
    a.gamma_D = static_cast<const __nv_bfloat16*>(pp.weight);
    a.gain_center = static_cast<float>(pp.gain_center);
    kernels::rmsnorm_topk_reduce(routes, static_cast<const __nv_bfloat16*>(c.combine_routes()), a,
                                 static_cast<__nv_bfloat16*>(out_TD), saved ? saved->rstd : c.rstd_scratch, stream);
    // Saved path: keep h3 (this rank's route rows) for the score gradients.
    if (pushes)
      kernels::copy_if({act, layer + planner::kH3}, c.combine_routes(), T * K * D * 2, need_recompute, false, stream);
  } else {
    // Saved path: the reduction keeps h3 (this rank's route rows) for the score gradients as it
    // reads them (routed slots only: the backward reads no other).
    comm::KeepRoutes keep;
    if (pushes) keep = {act, layer + planner::kH3, need_recompute};
    c.ep->reduce(in.topk_scores_TK, in.score_dtype, out_TD, T, stream, {}, keep);
  }
  // Route rows for a postprocess the caller runs (the reduction above already made them final here).
  if (o.expert_output_TKD)
    DMOE_CUDA_CHECK(cudaMemcpyAsync(o.expert_output_TKD, c.combine_routes(), T * K * D * 2, cudaMemcpyDeviceToDevice,
                                    stream));
  c.stage("reduce", stream);
}

// ---- backward -----------------------------------------------------------------------------------

void backward_impl(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
                   const void* grad_out_TD, const RoutedExpertsGradients& g, const ExecutionOptions& o,
                   cudaStream_t stream) {
  check_inputs(c, in);
  o.validate();
  if (c.config.inference) throw Error(ErrorCode::kRuntime, "inference contexts do not support autograd");
  if (!s.used) throw Error(ErrorCode::kRuntime, "backward needs the SavedState of a training forward");
  const bool route_grads = o.grad_expert_output_TKD != nullptr;  // the caller differentiated its reduction
  DMOE_CHECK_ARG(g.grad_x_TD && g.grad_w13 && g.grad_w2 && (route_grads || (grad_out_TD && g.grad_scores_TK)),
                 "backward needs grad_out_TD (or grad_expert_output_TKD) and every gradient destination");
  DType wgrad = c.config.wgrad_dtype.value_or(g.wgrad_dtype);
  if (c.config.wgrad_dtype && *c.config.wgrad_dtype != g.wgrad_dtype)
    detail::fail(ErrorCode::kRuntime, "wgrad_dtype conflicts with the gradient buffers: Config says ",
                 to_string(*c.config.wgrad_dtype), ", buffers are ", to_string(g.wgrad_dtype));
  if (wgrad != DType::kBFloat16 && wgrad != DType::kFloat32)
    detail::fail(ErrorCode::kInvalidType, "WGRAD dtype must be bfloat16 or float32, got ", to_string(wgrad));

  const int64_t T = in.num_tokens, D = c.config.hidden_dim, F = c.config.intermediate_dim, K = c.config.top_k;
  uint8_t* act = c.activation_base();
  const int64_t* layer = s.layer_state;
  const int64_t* need_recompute = layer + planner::kNeedRecompute;
  int64_t* bo = c.backward_offsets;  // grad_h1, h2, grad_h2, grad_h3_gathered, h1, x_gathered, x, h3
  const int64_t caller_x = static_cast<const uint8_t*>(in.x_TD) - act;
  kernels::plan_backward(c.geometry, c.call_shape(T), c.planner_state, layer, caller_x, bo, stream);

  // Recompute block: a fixed launch sequence whose data stages do nothing on the saved path. Its two
  // EP barriers run only when recomputing (every rank's plan agrees; on the saved path no peer reads
  // or writes a window between the last op's final barrier and the barrier after top-k backward).
  // The layer input comes back from the slot's x save, or from the caller's x when none was kept.
  kernels::copy_if(c.dispatch_routes(), {act, bo + 6}, T * D * 2, need_recompute, true, stream);
  c.ep->barrier(stream, need_recompute);
  kernels::predicated_counts(s.expert_rows, c.counts_gated, static_cast<int>(c.local_experts), need_recompute, true,
                             stream);
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

  // Owner side: h3 is in the slot (saved) or back in the combine window (recomputed).
  kernels::select_offset(bo + 7, need_recompute,
                         static_cast<int64_t>(static_cast<uint8_t*>(c.combine_routes()) - act), layer + planner::kH3,
                         stream);
  const kernels::TopkRoutes routes = routes_of(c, in);
  float* gscores = in.score_dtype == DType::kFloat32 ? static_cast<float*>(g.grad_scores_TK) : c.grad_scores_f32;
  auto* grad_h3_routes = static_cast<__nv_bfloat16*>(c.dispatch_routes());
  if (route_grads) {  // published as given: the W2 DGRAD gathers only valid routes' rows
    DMOE_CUDA_CHECK(cudaMemcpyAsync(grad_h3_routes, o.grad_expert_output_TKD, T * K * D * 2, cudaMemcpyDeviceToDevice,
                                    stream));
  } else if (o.experts_output_postprocess) {
    o.experts_output_postprocess->validate(DType::kBFloat16, in.score_dtype, K, D, /*training=*/true);
    kernels::rmsnorm_topk_reduce_backward(routes, {act, bo + 7}, s.rstd,
                                          static_cast<const __nv_bfloat16*>(grad_out_TD), grad_h3_routes, gscores,
                                          stream);
  } else {
    kernels::topk_reduce_backward(routes, {act, bo + 7}, static_cast<const __nv_bfloat16*>(grad_out_TD),
                                  grad_h3_routes, gscores, stream);
  }
  if (!route_grads && in.score_dtype == DType::kBFloat16)
    kernels::convert_f32_to_bf16(gscores, g.grad_scores_TK, T * K, stream);
  if (o.grad_expert_output_out_TKD)  // for observers; peers only read these rows, so no ordering needed
    DMOE_CUDA_CHECK(cudaMemcpyAsync(o.grad_expert_output_out_TKD, grad_h3_routes, T * K * D * 2,
                                    cudaMemcpyDeviceToDevice, stream));
  c.ep->barrier(stream);  // grad_h3 published; every owner is done reading its combine window
  c.stage("topk_backward", stream);

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

  c.ep->barrier(stream);  // every grad_x route row is in its owner's combine window
  c.stage("grad_x_barrier", stream);
  kernels::reduce_from_topk(routes, static_cast<const __nv_bfloat16*>(c.combine_routes()),
                            static_cast<__nv_bfloat16*>(g.grad_x_TD), stream);
  c.stage("reduce_grad_x", stream);
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

void routed_experts_forward(Context& ctx, const RoutedExpertsInputs& in, void* out_TD, SavedState* saved,
                            const ExecutionOptions& options, cudaStream_t stream) {
  Context::Impl& c = context_impl(ctx);
  if (c.config.inference && saved)
    throw Error(ErrorCode::kRuntime, "inference contexts do not support autograd (no SavedState)");
  forward_impl(c, in, out_TD, saved ? &saved->buffers() : nullptr, options, stream);
}

void routed_experts_backward(Context& ctx, const RoutedExpertsInputs& in, const SavedState& saved,
                             const void* grad_out_TD, const RoutedExpertsGradients& grads,
                             const ExecutionOptions& options, cudaStream_t stream) {
  backward_impl(context_impl(ctx), in, saved.buffers(), grad_out_TD, grads, options, stream);
}

void routed_experts_inference(Context& ctx, const RoutedExpertsInputs& in, void* out_TD,
                              const ExecutionOptions& options, cudaStream_t stream) {
  forward_impl(context_impl(ctx), in, out_TD, nullptr, options, stream);
}

}  // namespace dist_moe
