// The FP8-blockwise inference pipeline, per rank:
//
//   [validate ids] quantize x at the source into packed rows [D E4M3 | D/128 FP32] of this rank's
//   dispatch window -> publish (ids only) -> route (rows padded to 32 per local expert) -> [EP
//   barrier] -> gather the routed packed rows into the row bundle -> W13 FPROP + SwiGLU (BF16 h2) ->
//   quantize h2 rows -> W2 FPROP scattering BF16 h3 route rows into the owners' combine windows ->
//   EP barrier + top-k reduction (or RMSNorm)
//
// The row bundle [cap, C] E4M3 with its FP32 scales k-block-major [C/128, ld] (the layout the FP8
// GEMMs read; ld = cap rounded up to 4) lives in the static scratch's row region, BF16 h2 in the h1
// region (planner::Mxfp8Scratch's inference layout: its row region, sized for MXFP8's 4x-reserved
// scale bytes, holds this bundle too; checked when the context is built).
#include "runtime/fp8_blockwise_pipeline.h"

#include "dist_moe/check.h"
#include "dist_moe/grouped_gemm.h"
#include "kernels/planner.h"
#include "quant/quantize.h"
#include "runtime/layer_gemms.h"
#include "runtime/pipeline_common.h"

namespace dist_moe::runtime {
namespace {

using planner::align128;

int64_t scale_ld(int64_t cap) { return (cap + 3) / 4 * 4; }

// The row bundle of a [cap, C] operand: E4M3 rows, then the k-block-major FP32 scale grid.
quant::Fp8BlockwiseOut row_bundle(const Context::Impl& c, int64_t C) {
  const int64_t cap = c.capacity_rows();
  uint8_t* q = at(c, c.mxfp8_scratch.row);
  return {q, C, reinterpret_cast<float*>(q + align128(cap * C)), 1, scale_ld(cap)};
}

// A layer GEMM's operands made FP8 blockwise: the row bundle A against a prepared weight's FPROP
// fields.
void use_fp8_blockwise_operands(GroupedGemmCommon& g, const quant::Fp8BlockwiseOut& a, const void* b_scales) {
  g.a_format = kFp8BlockwiseRows;
  g.b_format = kFp8BlockwiseWeight;
  g.scales = OperandScales{a.scales, a.scale_block_stride, b_scales};
}

}  // namespace

int64_t fp8_blockwise_row_bundle_bytes(int64_t cap, int64_t C) {
  return align128(cap * C) + align128(C / 128 * scale_ld(cap) * 4);
}

void fp8_blockwise_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, const ExecutionOptions& o,
                           cudaStream_t stream) {
  check_token_inputs(c, in);
  check_block_scaled_weights(c, in, /*training=*/false);
  o.validate();
  DMOE_CHECK_ARG(out_TD, "out_TD is required");
  DMOE_ASSERT(c.config.inference);  // validate_block_scaled_execution rejects training contexts
  const int64_t T = in.num_tokens, D = c.config.hidden_dim, F = c.config.intermediate_dim;
  const PreparedWeightBuffers& w13 = in.w13_prepared->buffers;
  const PreparedWeightBuffers& w2 = in.w2_prepared->buffers;

  // Each token once, at the source (D + D/32 bytes cross NVLink instead of 2D).
  quant::fp8_blockwise_quantize_rows(
      quant::Bf16Matrix{in.x_TD, T, D, D},
      quant::fp8_blockwise_packed_rows_out(c.ep->local_dispatch_routes(), c.ep->route_slot_bytes(), D), stream);
  c.stage("quantize_x_source", stream);
  const planner::Mxfp8Homes homes = c.mxfp8_scratch.homes();
  const ForwardHead head = forward_head(c, in, nullptr, o, &homes, stream, /*rows_in_window=*/true);
  const comm::RoutingTables& tb = c.ep->tables();
  const quant::RowGroups groups{tb.expert_rows_unpadded, tb.expert_offsets, static_cast<int32_t>(c.local_experts)};

  const quant::Fp8BlockwiseOut xr = row_bundle(c, D);
  quant::fp8_blockwise_gather_packed_rows(tb.gather_src, groups, c.capacity_rows(), D, xr, stream);
  c.stage("gather_x_rows", stream);

  void* h2_bf16 = at(c, c.mxfp8_scratch.h2_bf16());
  W13FpropArgs f13 = w13_fprop_args(c, in, tb.expert_rows);
  use_fp8_blockwise_operands(f13.common, xr, w13.fprop_scale);
  f13.a = xr.q;
  f13.w13 = w13.fprop_data;
  f13.h2 = h2_bf16;
  f13.clip_stats = o.swiglu_clip_stats_out_3;
  f13.clip_limit = static_cast<float>(o.swiglu_clip_limit);
  f13.clip_rows = tb.expert_rows_unpadded;  // not the padding rows
  grouped_gemm_w13_fprop(f13, stream);
  c.stage("w13", stream);

  // Padding rows quantize as zeros; rows past the groups are not touched.
  const quant::Fp8BlockwiseOut hr = row_bundle(c, F);
  quant::fp8_blockwise_quantize_rows_cols(scratch_rows(c, h2_bf16, F), groups, hr, {}, stream);
  c.stage("quantize_h2", stream);

  FpropArgs f2 = w2_fprop_args(c, in, tb.expert_rows);
  use_fp8_blockwise_operands(f2.common, hr, w2.fprop_scale);
  f2.a = hr.q;
  f2.w = w2.fprop_data;
  f2.scatter.row_ptrs = tb.scatter_dst;
  grouped_gemm_fprop(f2, stream);
  c.stage("w2", stream);

  forward_reduce(c, in, out_TD, nullptr, o, head, stream);
}

}  // namespace dist_moe::runtime
