// The FP8-blockwise staged pipeline, per rank (docs/block_scaled_layer.md has the plan):
//
// Forward:  [validate ids] publish -> route (rows padded to 128 per local expert in training, 32 in
//   inference) -> [rows exchange + EP barrier] -> plan -> [save x] -> quantize x rows + columns,
//   reading the rows from the peers' dispatch windows (inference: x quantized at the source into
//   packed rows [D E4M3 | D/128 FP32] of this rank's dispatch window before the publish, which then
//   moves only the ids; the expert side gathers the packed rows into the row bundle) -> W13 FPROP +
//   SwiGLU (BF16 h1, h2) -> quantize h2 rows + columns -> W2 FPROP scattering BF16 h3 route rows into
//   the owners' combine windows -> EP barrier + top-k reduction (or RMSNorm) -> [save h3]
// Backward: the MXFP8 pipeline's sequence (recompute block, top-k backward, grad_h3 quantized into
//   rows + columns, SwiGLU backward fused with dxy's rows + columns quantization, W2 / W13 DGRAD on
//   the weights' transposed copies, W13 DGRAD scattering grad_x routes), with FP8-blockwise WGRADs on
//   the column bundles themselves: the products of the 1x128-along-tokens blocks, accumulated in FP32.
//
// Operands: the row bundle [cap, C] E4M3 with its FP32 scales k-block-major [C/128, ld] (ld = cap
// rounded up to 4) lives in the static scratch's row region, one at a time. Column bundles: x's and
// h2's (the saved state) are compact (numeric::fp8_blockwise_compact_columns_bytes: MXFP8's size,
// so planner::Mxfp8Scratch and the MXFP8 planner place them) wherever the planner put them;
// grad_h3's and dxy's are strided [C, cap] + [cap/128, C] at their scratch homes. The WGRAD reads
// the saved compact bundles where they lie (WgradArgs::a_compact_rows: their row length R is patched
// into its tensor map on the device; perf_history G71).
//
// MXFP8 training runs here too (Context::Impl::mxfp8_on_fp8_blockwise, perf_history G152): the same
// sequence and layouts with MXFP8's scale rule in every activation quantizer -- each 1x128 / 128x1
// block's E8M0 RCEIL code as its FP32 power of two, the elements rounded once at it, so each 32-element
// block is an MXFP8 block with that code (quant::Fp8BlockScale::kMxfp8Shared) -- against the MXFP8
// weights prepared at shared 128x128 scales (G151), whose FP32 block scales are derived from their
// E8M0 grid right before each GEMM (weight_scales).
#include "runtime/fp8_blockwise_pipeline.h"

#include "dist_moe/check.h"
#include "dist_moe/grouped_gemm.h"
#include "kernels/swiglu.h"
#include "quant/quantize.h"
#include "runtime/layer_gemms.h"
#include "runtime/pipeline_common.h"

namespace dist_moe::runtime {
namespace {

using planner::align128;

// ---- operands -----------------------------------------------------------------------------------

// The activation quantizers' scale rule: MXFP8's shared codes in an MXFP8 context (the header says why).
quant::Fp8BlockScale scale_rule(const Context::Impl& c) {
  return c.config.block_scaled->format == BlockScaledFormat::kMXFP8_E4M3 ? quant::Fp8BlockScale::kMxfp8Shared
                                                                        : quant::Fp8BlockScale::kAmaxOver448;
}

// A prepared weight's FP32 128x128 block scales for FPROP (its [E, n, k] fields) or DGRAD (the
// transposed copy, [E, n, k] as well): an FP8-blockwise preparation holds them; an MXFP8 one holds
// E8M0 codes, the same in all sixteen 32x32 tiles of a block (G151), turned into them here, into one
// buffer that the next GEMM on the stream reads.
const void* weight_scales(const Context::Impl& c, const PreparedWeightBuffers& w, bool dgrad, int64_t n, int64_t k,
                          cudaStream_t stream) {
  const void* scales = dgrad ? w.dgrad_scale : w.fprop_scale;
  if (c.config.block_scaled->format != BlockScaledFormat::kMXFP8_E4M3) return scales;
  quant::mxfp8_weight_block_scales(static_cast<const uint8_t*>(scales), c.local_experts, n, k, c.weight_block_scales,
                                   stream);
  return c.weight_block_scales;
}

// The row bundle of a [cap, C] operand: E4M3 rows, then the k-block-major FP32 scale grid.
quant::Fp8BlockwiseOut row_bundle(const Context::Impl& c, int64_t C) {
  const int64_t cap = c.capacity_rows();
  uint8_t* q = at(c, c.mxfp8_scratch.row);
  return {q, C, reinterpret_cast<float*>(q + align128(cap * C)), 1, planner::fp8_blockwise_scale_ld(cap)};
}

// A layer GEMM's operands made FP8 blockwise: the row bundle A against a prepared weight's FPROP
// fields, or (DGRAD) its transposed copy with the DGRAD scales.
void use_row_operands(GroupedGemmCommon& g, const quant::Fp8BlockwiseOut& a, const void* b_scales,
                      bool transposed_weight) {
  g.a_format = kFp8BlockwiseRows;
  g.b_format = transposed_weight ? kFp8BlockwiseWeightT : kFp8BlockwiseWeight;
  g.scales = OperandScales{a.scales, a.scale_block_stride, b_scales};
}

// A WGRAD on the strided grad_out columns [n, cap] and the compact column bundle of a ([k, R] at a
// device address, R = *rows: the routed rows), which the kernel reads where it was saved.
void run_wgrad(WgradArgs w, const quant::Fp8BlockwiseOut& grad_out, common::DeviceAddress a, const int32_t* rows,
               cudaStream_t stream) {
  w.common.a_format = w.common.b_format = kFp8BlockwiseRowsT;
  w.common.scales = OperandScales{grad_out.scales, grad_out.scale_block_stride, nullptr};
  w.grad_out = grad_out.q;
  w.a = a.base;
  w.a_offset = a.offset;
  w.a_compact_rows = rows;
  grouped_gemm_wgrad(w, stream);
}

// ---- the expert part of the forward (also the backward's recompute) ------------------------------

// x rows (+ columns) -> W13 FPROP + SwiGLU -> h2 rows (+ columns) -> W2 FPROP scattering h3 routes.
// `keep`: write the WGRAD columns and h1 where the snapshot says (else only the FPROP operands).
void expert_forward(Context::Impl& c, const RoutedExpertsInputs& in, const BlockScaledTables& t, const int64_t* layer,
                    bool keep, float* clip_stats, float clip_limit, bool recompute, cudaStream_t stream) {
  const int64_t D = c.config.hidden_dim, F = c.config.intermediate_dim;
  uint8_t* act = c.activation_base();
  const PreparedWeightBuffers& w13 = in.w13_prepared->buffers;
  const PreparedWeightBuffers& w2 = in.w2_prepared->buffers;
  const quant::RowGroups groups{t.real_counts, t.offsets, static_cast<int32_t>(c.local_experts)};
  const quant::Fp8BlockwiseOut none;
  void* h2_bf16 = at(c, c.mxfp8_scratch.h2_bf16());

  const quant::Fp8BlockwiseOut xr = row_bundle(c, D);
  if (t.packed_rows) {  // inference: the rows arrive quantized; no WGRAD columns
    quant::fp8_blockwise_gather_packed_rows(t.gather_src, groups, c.capacity_rows(), D, xr, stream);
    c.stage("gather_x_rows", stream);
  } else {
    const quant::Fp8BlockwiseOut xc = keep ? compact_columns<float>({act, layer + planner::kXCol}) : none;
    quant::fp8_blockwise_quantize_rows_cols(routed_rows(c, t.gather_src, D), groups, xr, xc, stream, scale_rule(c));
    c.stage(recompute ? "recompute_quantize_x" : "quantize_x", stream);
  }

  W13FpropArgs f13 = w13_fprop_args(c, in, t.counts);
  use_row_operands(f13.common, xr, weight_scales(c, w13, false, 2 * F, D, stream), false);
  f13.a = xr.q;
  f13.w13 = w13.fprop_data;
  f13.h1 = keep ? act : nullptr;
  f13.h1_offset = keep ? layer + planner::kH1 : nullptr;
  f13.h2 = h2_bf16;
  f13.clip_stats = clip_stats;
  f13.clip_limit = clip_limit;
  f13.clip_rows = t.real_counts;  // not the padding rows
  grouped_gemm_w13_fprop(f13, stream);
  c.stage(recompute ? "recompute_w13" : "w13", stream);

  // Padding rows quantize as zeros; rows past the groups are not touched.
  const quant::Fp8BlockwiseOut hr = row_bundle(c, F);
  quant::fp8_blockwise_quantize_rows_cols(scratch_rows(c, h2_bf16, F), groups, hr,
                                          keep ? compact_columns<float>({act, layer + planner::kH2Col}) : none, stream,
                                          scale_rule(c));
  c.stage(recompute ? "recompute_quantize_h2" : "quantize_h2", stream);

  FpropArgs f2 = w2_fprop_args(c, in, t.counts);
  use_row_operands(f2.common, hr, weight_scales(c, w2, false, D, F, stream), false);
  f2.a = hr.q;
  f2.w = w2.fprop_data;
  f2.scatter.row_ptrs = t.scatter_dst;
  grouped_gemm_fprop(f2, stream);
  c.stage(recompute ? "recompute_w2" : "w2", stream);
}

}  // namespace

// ---- forward ------------------------------------------------------------------------------------

void fp8_blockwise_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                           const ExecutionOptions& o, cudaStream_t stream) {
  block_scaled_forward(
      c, in, out_TD, saved, o,
      [&](const quant::Bf16Matrix& x, void* rows, int64_t row_stride) {
        quant::fp8_blockwise_quantize_rows(x, quant::fp8_blockwise_packed_rows_out(rows, row_stride, x.cols), stream);
      },
      expert_forward, stream);
}

// ---- backward -----------------------------------------------------------------------------------

void fp8_blockwise_backward(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
                            const void* grad_out_TD, const RoutedExpertsGradients& g, const ExecutionOptions& o,
                            cudaStream_t stream) {
  const BlockScaledBackwardHead head = block_scaled_backward_head(c, in, s, grad_out_TD, g, o, expert_forward, stream);
  const DType wgrad = head.wgrad;
  const int64_t D = c.config.hidden_dim, F = c.config.intermediate_dim, cap = c.capacity_rows();
  const int L = static_cast<int>(c.local_experts);
  uint8_t* act = c.activation_base();
  const planner::Mxfp8Scratch& S = c.mxfp8_scratch;
  const PreparedWeightBuffers& w13 = in.w13_prepared->buffers;
  const PreparedWeightBuffers& w2 = in.w2_prepared->buffers;
  const int64_t* layer = s.layer_state;

  // grad_h3 rows + columns straight from the owners' dispatch windows.
  const quant::RowGroups groups{s.expert_rows_unpadded, s.expert_offsets, L};
  const quant::Fp8BlockwiseOut g3r = row_bundle(c, D), g3c = strided_fp8_columns(c, S.grad_h3_col, D, cap);
  quant::fp8_blockwise_quantize_rows_cols(head.grad_h3, groups, g3r, g3c, stream, scale_rule(c));
  c.stage("quantize_grad_h3", stream);

  void* grad_h2 = at(c, S.grad_h2);
  DgradArgs d2 = w2_dgrad_args(c, in, s.expert_rows);
  use_row_operands(d2.common, g3r, weight_scales(c, w2, true, F, D, stream), true);
  d2.grad_out = g3r.q;
  d2.w = w2.dgrad_data;
  d2.grad_a = grad_h2;
  grouped_gemm_dgrad(d2, stream);
  c.stage("w2_dgrad", stream);

  // dxy = SwiGLU'(h1) * grad_h2 straight to E4M3 rows + columns, never stored in BF16 (G70).
  const quant::Fp8BlockwiseOut dxr = row_bundle(c, 2 * F), dxc = strided_fp8_columns(c, S.dxy_col, 2 * F, cap);
  const quant::SwigluBackwardSource dxy{{act, layer + planner::kH1}, grad_h2, cap, F, swiglu_params(c.config)};
  quant::fp8_blockwise_swiglu_backward_quantize(dxy, groups, dxr, dxc, stream, scale_rule(c));
  c.stage("swiglu_backward_quantize_dxy", stream);

  DgradArgs d13 = w13_dgrad_args(c, in, s.expert_rows);
  use_row_operands(d13.common, dxr, weight_scales(c, w13, true, D, 2 * F, stream), true);
  d13.grad_out = dxr.q;
  d13.w = w13.dgrad_data;
  d13.scatter.row_ptrs = s.scatter_dst;
  grouped_gemm_dgrad(d13, stream);
  c.stage("w13_dgrad", stream);

  // WGRADs on the column bundles: grad_h3's and dxy's strided in scratch, h2's and x's compact where
  // the forward saved them (their row length R = the routed rows, read on the device).
  const int32_t* routed = s.expert_offsets + L;
  run_wgrad(w2_wgrad_args(c, s.expert_rows, g.grad_w2, wgrad, g.accumulate), g3c, {act, layer + planner::kH2Col},
            routed, stream);
  c.stage("w2_wgrad", stream);
  run_wgrad(w13_wgrad_args(c, s.expert_rows, g.grad_w13, wgrad, g.accumulate), dxc, {act, layer + planner::kXCol},
            routed, stream);
  c.stage("w13_wgrad", stream);

  backward_reduce(c, in, g, stream);
}

}  // namespace dist_moe::runtime
