#include "runtime/pipeline_common.h"

#include <cuda_runtime.h>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/fp8_blockwise.cuh"
#include "dist_moe/device/routing/routing_layout.cuh"
#include "kernels/pipeline_glue.h"
#include "kernels/planner.h"

namespace dist_moe::runtime {

// ---- argument checks (upstream's routed_experts validation, C++ part) ---------------------------

void check_bf16_weights(const Context::Impl& c, const RoutedExpertsInputs& in) {
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

void check_token_inputs(const Context::Impl& c, const RoutedExpertsInputs& in) {
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
}

namespace {
void check_prepared(const Context::Impl& c, const PreparedExpertWeight* w, const char* name, int64_t n, int64_t k,
                    bool training) {
  const BlockScaledFormat format = c.config.block_scaled->format;
  const char* fmt = to_string(format);
  if (w == nullptr)
    detail::fail(ErrorCode::kInvalidValue, "block-scaled (", fmt, ") contexts need prepared weights: ", name,
                 "_prepared is not set (prepare_block_scaled_weight)");
  const PreparedWeightSpec& s = w->spec;
  if (s.format != format)
    detail::fail(ErrorCode::kInvalidValue, name, " was prepared for ", to_string(s.format), ", the context runs ", fmt);
  if (s.num_experts != c.local_experts || s.rows != n || s.cols != k)
    detail::fail(ErrorCode::kInvalidValue, name, " must be prepared from a [", c.local_experts, ", ", n, ", ", k,
                 "] weight, got [", s.num_experts, ", ", s.rows, ", ", s.cols, "]");
  if (s.inference && format == BlockScaledFormat::kMXFP8_E4M3)
    detail::fail(ErrorCode::kInvalidValue, name,
                 " is an MXFP8 inference preparation (1x32 row scales), which has no Hopper GEMM yet; prepare it with "
                 "inference=False (32x32 tiles): inference contexts read its FPROP fields");
  const PreparedWeightBuffers& b = w->buffers;
  DMOE_CHECK_ARG(b.fprop_data && b.fprop_scale, name, "_prepared needs fprop_data and fprop_scale");
  if (format == BlockScaledFormat::kNVFP4)
    DMOE_CHECK_ARG(b.global_scale_inv, name, "_prepared needs global_scale_inv (the NVFP4 epilogue's expert scale)");
  if (training)
    DMOE_CHECK_ARG(b.dgrad_data && b.dgrad_scale && b.dgrad_data != b.fprop_data, name,
                   "_prepared needs dgrad_data (the transposed E4M3 copy, not fprop_data) and dgrad_scale for the "
                   "backward");
}
}  // namespace

void check_block_scaled_weights(const Context::Impl& c, const RoutedExpertsInputs& in, bool training) {
  const int64_t D = c.config.hidden_dim, F = c.config.intermediate_dim;
  check_prepared(c, in.w13_prepared, "w13", 2 * F, D, training);
  check_prepared(c, in.w2_prepared, "w2", D, F, training);
}

quant::Bf16Matrix scratch_rows(const Context::Impl& c, const void* rows, int64_t C) {
  return {rows, c.capacity_rows(), C, C};
}
quant::Fp8BlockwiseOut strided_fp8_columns(const Context::Impl& c, int64_t offset, int64_t C, int64_t rows) {
  uint8_t* q = at(c, offset);
  return {q, rows, reinterpret_cast<float*>(q + numeric::fp8_blockwise_compact_columns_scales_offset(C, rows)), 1, C};
}
quant::Bf16Matrix routed_rows(const Context::Impl& c, const void* const* row_ptrs, int64_t C) {
  quant::Bf16Matrix x{nullptr, c.capacity_rows(), C, C};
  x.row_ptrs = row_ptrs;
  return x;
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

ForwardHead forward_head(Context::Impl& c, const RoutedExpertsInputs& in, SavedState::Buffers* saved,
                         const ExecutionOptions& o, const planner::Mxfp8Homes* mxfp8, cudaStream_t stream,
                         bool rows_in_window) {
  const int64_t T = in.num_tokens, D = c.config.hidden_dim, K = c.config.top_k;
  if (o.experts_output_postprocess)
    o.experts_output_postprocess->validate(DType::kBFloat16, in.score_dtype, K, D, saved != nullptr);
  // `saving`: a backward will read this call's SavedState. `pushes`: the layer also takes its place
  // in the selected activation slot; a forward whose saved state the caller will discard
  // (recompute_from_inputs: an activation checkpoint's first forward) plans scratch-only instead.
  ForwardHead h;
  h.saving = saved != nullptr && !c.config.inference;
  DMOE_CHECK_ARG(!rows_in_window || c.config.inference, "rows quantized at the source are for inference contexts");
  h.pushes = h.saving && !o.recompute_from_inputs;
  h.scratch_only = !h.pushes;
  if (o.validate_expert_ids)
    kernels::validate_expert_ids(in.topk_ids_TK, in.id_dtype, T * K, c.config.num_experts, c.rank, stream);

  // Publish, barrier, routing tables (one kernel for decode-sized problems). No dispatch: the
  // expert side reads the rows itself (a gathering GEMM producer or quantizer).
  comm::DispatchOptions dispatch;
  dispatch.rows_in_window = rows_in_window;
  c.ep->publish_route_dispatch(rows_in_window ? nullptr : in.x_TD, in.topk_ids_TK, in.id_dtype, T,
                               /*x_gathered_MD=*/nullptr, stream, dispatch);
  c.ep->prepare_scatter(T, stream);  // emulated peers: absent owners' routes read as zeros
  c.stage("publish+route", stream);
  const comm::RoutingTables& tb = c.ep->tables();

  // Plan: every rank's rows decide saved vs recompute identically on all ranks.
  h.layer = h.saving ? saved->layer_state : c.call_layer_state;
  const int32_t* all_rows = nullptr;
  if (h.pushes) {
    kernels::publish_to_peers(tb.total_rows, c.rows_peer_bases, c.rank, c.world, stream);
    c.ep->barrier(stream);
    all_rows = static_cast<const int32_t*>(c.rows_window->local_ptr());
  }
  kernels::plan_forward(c.geometry, c.call_shape(T), c.planner_state, c.slot_ids + c.selected_slot, c.slot_depth,
                        all_rows, tb.total_rows, h.scratch_only, h.layer, stream, mxfp8);

  if (h.saving) {  // the backward's copy of this call's routing tables
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
    if (h.pushes)
      kernels::copy_if({c.activation_base(), h.layer + planner::kX}, c.dispatch_routes(), T * D * 2,
                       h.layer + planner::kNeedRecompute, true, stream);
    saved->used = true;
  }
  c.stage("plan", stream);
  return h;
}

void forward_reduce(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                    const ExecutionOptions& o, const ForwardHead& head, cudaStream_t stream) {
  const int64_t T = in.num_tokens, D = c.config.hidden_dim, K = c.config.top_k;
  uint8_t* act = c.activation_base();
  const int64_t* need_recompute = head.layer + planner::kNeedRecompute;
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
    if (head.pushes)
      kernels::copy_if({act, head.layer + planner::kH3}, c.combine_routes(), T * K * D * 2, need_recompute, false,
                       stream);
  } else {
    // Saved path: the reduction keeps h3 (this rank's route rows) for the score gradients as it
    // reads them (routed slots only: the backward reads no other).
    comm::KeepRoutes keep;
    if (head.pushes) keep = {act, head.layer + planner::kH3, need_recompute};
    c.ep->reduce(in.topk_scores_TK, in.score_dtype, out_TD, T, stream, {}, keep);
  }
  // Route rows for a postprocess the caller runs (the reduction above already made them final here).
  if (o.expert_output_TKD)
    DMOE_CUDA_CHECK(cudaMemcpyAsync(o.expert_output_TKD, c.combine_routes(), T * K * D * 2, cudaMemcpyDeviceToDevice,
                                    stream));
  c.stage("reduce", stream);
}

// ---- backward -----------------------------------------------------------------------------------

DType check_backward(const Context::Impl& c, const SavedState::Buffers& s, const void* grad_out_TD,
                     const RoutedExpertsGradients& g, const ExecutionOptions& o) {
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
  return wgrad;
}

bool backward_topk(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
                   const void* grad_out_TD, const RoutedExpertsGradients& g, const ExecutionOptions& o,
                   int64_t* h3_offset, cudaStream_t stream, bool token_rows_ok) {
  const int64_t T = in.num_tokens, D = c.config.hidden_dim, K = c.config.top_k;
  uint8_t* act = c.activation_base();
  const int64_t* layer = s.layer_state;
  const bool route_grads = o.grad_expert_output_TKD != nullptr;
  // Owner side: h3 is in the slot (saved) or back in the combine window (recomputed).
  kernels::select_offset(h3_offset, layer + planner::kNeedRecompute,
                         static_cast<int64_t>(static_cast<uint8_t*>(c.combine_routes()) - act), layer + planner::kH3,
                         stream);
  const kernels::TopkRoutes routes = routes_of(c, in);
  float* gscores = in.score_dtype == DType::kFloat32 ? static_cast<float*>(g.grad_scores_TK) : c.grad_scores_f32;
  auto* grad_h3_routes = static_cast<__nv_bfloat16*>(c.dispatch_routes());
  const int64_t row_bytes = c.ep->route_slot_bytes();
  // The plain reduction's grad_h3 rows are score * grad_out: its token rows and the scores will do
  // where the caller's quantizer scales them (and no observer wants the route rows).
  const bool token_rows = token_rows_ok && !route_grads && !o.experts_output_postprocess &&
                          !o.grad_expert_output_out_TKD && routing::dispatch_window_holds_scores(K, row_bytes);
  if (token_rows) {
    auto* window = static_cast<uint8_t*>(c.dispatch_routes());
    kernels::topk_reduce_backward_token_rows(
        routes, {act, h3_offset}, static_cast<const __nv_bfloat16*>(grad_out_TD), grad_h3_routes,
        reinterpret_cast<float*>(window + routing::dispatch_score_offset(0, c.ep->layout().max_tokens, row_bytes)),
        gscores, stream);
  } else if (route_grads) {  // published as given: the W2 DGRAD gathers only valid routes' rows
    DMOE_CUDA_CHECK(cudaMemcpyAsync(grad_h3_routes, o.grad_expert_output_TKD, T * K * D * 2, cudaMemcpyDeviceToDevice,
                                    stream));
  } else if (o.experts_output_postprocess) {
    o.experts_output_postprocess->validate(DType::kBFloat16, in.score_dtype, K, D, /*training=*/true);
    kernels::rmsnorm_topk_reduce_backward(routes, {act, h3_offset}, s.rstd,
                                          static_cast<const __nv_bfloat16*>(grad_out_TD), grad_h3_routes, gscores,
                                          stream);
  } else {
    kernels::topk_reduce_backward(routes, {act, h3_offset}, static_cast<const __nv_bfloat16*>(grad_out_TD),
                                  grad_h3_routes, gscores, stream);
  }
  if (!route_grads && in.score_dtype == DType::kBFloat16)
    kernels::convert_f32_to_bf16(gscores, g.grad_scores_TK, T * K, stream);
  if (o.grad_expert_output_out_TKD)  // for observers; peers only read these rows, so no ordering needed
    DMOE_CUDA_CHECK(cudaMemcpyAsync(o.grad_expert_output_out_TKD, grad_h3_routes, T * K * D * 2,
                                    cudaMemcpyDeviceToDevice, stream));
  c.ep->barrier(stream);  // grad_h3 published; every owner is done reading its combine window
  c.ep->prepare_scatter(T, stream);  // before the W13 DGRAD scatters grad_x
  c.stage("topk_backward", stream);
  return token_rows;
}

void backward_reduce(Context::Impl& c, const RoutedExpertsInputs& in, const RoutedExpertsGradients& g,
                     cudaStream_t stream) {
  c.ep->barrier(stream);  // every grad_x route row is in its owner's combine window
  c.stage("grad_x_barrier", stream);
  kernels::reduce_from_topk(routes_of(c, in), static_cast<const __nv_bfloat16*>(c.combine_routes()),
                            static_cast<__nv_bfloat16*>(g.grad_x_TD), stream);
  c.stage("reduce_grad_x", stream);
}

// ---- block-scaled pipelines ------------------------------------------------------------------------

void block_scaled_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                          const ExecutionOptions& o, const SourceQuantizer& quantize_source,
                          BlockScaledExpertPart experts, cudaStream_t stream) {
  check_token_inputs(c, in);
  check_block_scaled_weights(c, in, /*training=*/false);
  o.validate();
  DMOE_CHECK_ARG(out_TD, "out_TD is required");
  const bool source = c.config.inference;
  if (source) {
    const int64_t T = in.num_tokens, D = c.config.hidden_dim;
    quantize_source(quant::Bf16Matrix{in.x_TD, T, D, D}, c.ep->local_dispatch_routes(), c.ep->route_slot_bytes());
    c.stage("quantize_x_source", stream);
  }
  const planner::Mxfp8Homes homes = c.mxfp8_scratch.homes();
  const ForwardHead head = forward_head(c, in, saved, o, &homes, stream, /*rows_in_window=*/source);
  const comm::RoutingTables& tb = c.ep->tables();
  experts(c, in, {tb.expert_rows, tb.expert_offsets, tb.expert_rows_unpadded, tb.gather_src, tb.scatter_dst, source},
          head.layer, /*keep=*/!head.scratch_only, o.swiglu_clip_stats_out_3, static_cast<float>(o.swiglu_clip_limit),
          /*recompute=*/false, stream);
  forward_reduce(c, in, out_TD, saved, o, head, stream);
}

void begin_recompute(Context::Impl& c, int64_t num_tokens, const int64_t* x_offset, const int64_t* need_recompute,
                     const int32_t* expert_rows, cudaStream_t stream) {
  kernels::copy_if(c.dispatch_routes(), {c.activation_base(), x_offset}, num_tokens * c.config.hidden_dim * 2,
                   need_recompute, true, stream);
  c.ep->barrier(stream, need_recompute);
  c.ep->prepare_scatter(num_tokens, stream);  // before the recompute's W2 scatters h3
  kernels::predicated_counts(expert_rows, c.counts_gated, static_cast<int>(c.local_experts), need_recompute, true,
                             stream);
}

BlockScaledBackwardHead block_scaled_backward_head(Context::Impl& c, const RoutedExpertsInputs& in,
                                                   const SavedState::Buffers& s, const void* grad_out_TD,
                                                   const RoutedExpertsGradients& g, const ExecutionOptions& o,
                                                   BlockScaledExpertPart experts, cudaStream_t stream) {
  check_token_inputs(c, in);
  check_block_scaled_weights(c, in, /*training=*/true);
  o.validate();
  const DType wgrad = check_backward(c, s, grad_out_TD, g, o);
  const int64_t T = in.num_tokens;
  const int L = static_cast<int>(c.local_experts);
  uint8_t* act = c.activation_base();
  const int64_t* layer = s.layer_state;
  const int64_t* need_recompute = layer + planner::kNeedRecompute;
  int64_t* bo = c.backward_offsets;  // [6]: where the recompute reads x; [7]: h3
  const int64_t caller_x = static_cast<const uint8_t*>(in.x_TD) - act;
  const planner::Mxfp8Homes homes = c.mxfp8_scratch.homes();
  kernels::plan_mxfp8_backward(c.geometry, c.call_shape(T), c.planner_state, layer, caller_x, homes, bo + 6, stream);

  begin_recompute(c, T, bo + 6, need_recompute, s.expert_rows, stream);
  kernels::predicated_counts(s.expert_offsets, c.offsets_gated, L + 1, need_recompute, true, stream);
  experts(c, in, {c.counts_gated, c.offsets_gated, s.expert_rows_unpadded, s.gather_src, s.scatter_dst}, layer,
          /*keep=*/true, nullptr, 0.f, /*recompute=*/true, stream);
  c.ep->barrier(stream, need_recompute);  // recomputed h3 rows are in their owners' combine windows

  BlockScaledBackwardHead h{wgrad, routed_rows(c, s.grad_gather_src, c.config.hidden_dim)};
  if (backward_topk(c, in, s, grad_out_TD, g, o, bo + 7, stream, /*token_rows_ok=*/true)) {
    c.ep->gather_route_scores(s.grad_gather_src, s.expert_offsets + L, c.grad_h3_row_scores, stream);
    h.grad_h3 = routed_rows(c, s.gather_src, c.config.hidden_dim);
    h.grad_h3.row_scales = c.grad_h3_row_scores;
  }
  return h;
}

}  // namespace dist_moe::runtime
