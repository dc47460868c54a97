// The MXFP8 staged pipeline, per rank (docs/block_scaled_layer.md has the plan and the departures). A
// staged training context without an A/B knob does not come here: it runs the FP8-blockwise pipeline
// with MXFP8's scale rule (Context::Impl::mxfp8_on_fp8_blockwise; perf_history G152). This file runs
// inference, Mega, and training under DMOE_MXFP8_REROUND / _FPROP_PER32 / _EXACT / _WGRAD_BF16.
//
// Forward:  [validate ids] publish -> route (rows padded to 32 per local expert) -> [rows exchange
//   + EP barrier] -> plan -> [save x] -> quantize x rows + columns, reading the rows from the peers'
//   dispatch windows (inference: x quantized at the source into packed rows of this rank's dispatch
//   window before the publish, which then moves only the ids; the expert side gathers the packed
//   rows into the row bundle) -> W13 FPROP + SwiGLU (BF16 h1, h2) -> quantize h2 rows + columns -> W2 FPROP
//   scattering BF16 h3 route rows into the owners' combine windows -> EP barrier + top-k reduction
//   (or RMSNorm) -> [save h3]. Training runs both FPROPs as FP8-blockwise FPROPs on the row bundles turned
//   into 1x128 blocks at shared scales in place and the weights prepared at shared 128x128 scales
//   (use_weight_operands; perf_history G151); inference the per-32 MXFP8 kernels on the exact rows.
// Backward: plan -> recompute block under need_recompute (the forward's expert part) -> top-k
//   backward -> barrier -> quantize grad_h3 rows + columns, reading the owners' dispatch windows ->
//   W2 DGRAD (the FP8-blockwise DGRAD on the row bundle and the transposed W2 copy at shared scales:
//   use_dgrad_operands) -> SwiGLU backward fused with dxy's rows + columns quantization -> W13 DGRAD
//   (likewise) scattering grad_x routes -> W2 WGRAD and W13 WGRAD as
//   FP8-blockwise WGRADs of the column bundles at shared scales per 128 tokens (run_wgrad) -> barrier
//   -> K reduction.
//
// Mega (pipeline="mega"; docs/block_scaled_layer.md "Mega"): the x gather (inference), W13, the h2
// quantization and W2 are one launch -- at decode sizes grouped_gemm_mega_mxfp8_decode (h2 quantized
// in place of its BF16 rows: E4M3 at a row's start, its codes F bytes in), beyond them and in training
// grouped_gemm_mega_mxfp8 (128x128 tiles; the W13 epilogue writes h2 as MXFP8 rows, and in training
// h1 and h2's columns). Its backward runs the staged sequence: the launch that fuses W2 DGRAD, SwiGLU
// backward and the dxy quantization (grouped_gemm_dgrad_swiglu_mxfp8) measured 0.90 ms at qwen3_30b
// where the staged pair takes 0.69 (s46, perf_history G102), so it runs only under
// DMOE_MEGA_FUSED_DGRAD_SWIGLU=1 (A/B runs; bitwise the same values either way).
//
// Row bundles live one at a time in the static scratch's row region (but the fused backward launch's
// dxy rows: Mxfp8Scratch::fused_dxy_codes); the column bundles of x and
// h2 (the saved state) sit where the planner put them and take the compact layout, sized by the
// call's received rows; everything else is at a static scratch place (planner::Mxfp8Scratch).
#include "runtime/mxfp8_pipeline.h"

#include "core/env_knobs.h"
#include "dist_moe/check.h"
#include "dist_moe/device/numeric/fp8_blockwise.cuh"
#include "dist_moe/grouped_gemm.h"
#include "dist_moe/memory_plan.h"
#include "kernels/swiglu.h"
#include "quant/quantize.h"
#include "runtime/layer_gemms.h"
#include "runtime/pipeline_common.h"

namespace dist_moe::runtime {
namespace {

using planner::align128;

// Whether Mega's backward takes the fused W2 DGRAD + SwiGLU backward launch (the header says why not
// by default).
bool mega_fused_dgrad_swiglu() {
  static const bool on = core::env_flag("DMOE_MEGA_FUSED_DGRAD_SWIGLU");
  return on;
}

// ---- operands -----------------------------------------------------------------------------------

// The row bundle of a [cap, C] operand in the scratch's row region: E4M3 rows, then E8M0 scales --
// as k-block-major words [C/128, cap] where the rows + columns quantizers write them (their region's
// scales go out as whole lines; G86), as [cap, C/32] where the rows are gathered from packed rows
// (the inference x: `packed_source`). Both grids are cap * C / 32 bytes (C a multiple of 128).
struct RowBundle {
  uint8_t* q;
  uint8_t* scales;
  int64_t word_ld;  // > 0: k-block-major scale words with this row stride (the capacity)
};
RowBundle row_bundle(const Context::Impl& c, int64_t C, bool packed_source = false) {
  uint8_t* q = at(c, c.mxfp8_scratch.row);
  return {q, q + align128(c.capacity_rows() * C), packed_source ? 0 : c.capacity_rows()};
}

quant::Mxfp8Out row_bundle_out(const Context::Impl& c, int64_t C, bool packed_source = false) {
  const RowBundle rb = row_bundle(c, C, packed_source);
  quant::Mxfp8Out out{rb.q, C, rb.scales, C / 32, 1};
  out.scale_word_ld = rb.word_ld;
  return out;
}

// Quantizes expert-major rows into the row bundle and, when `cols` is set, the compact column
// bundle at cols.base + *cols.offset. `offsets` may be gated (all zero: nothing happens).
void quantize_rows_cols(const Context::Impl& c, const quant::Bf16Matrix& x, const int32_t* real_counts,
                        const int32_t* offsets, common::DeviceAddress cols, cudaStream_t stream) {
  const quant::RowGroups groups{real_counts, offsets, static_cast<int32_t>(c.local_experts)};
  quant::mxfp8_quantize_rows_cols(x, groups, row_bundle_out(c, x.cols), compact_columns<uint8_t>(cols), stream);
}

// The compact column bundle at a device address, as a converter's input.
quant::Mxfp8In compact_columns_in(common::DeviceAddress cols) {
  quant::Mxfp8In in;
  in.q = static_cast<const uint8_t*>(cols.base);
  in.compact = true;
  in.q_offset = cols.offset;
  return in;
}

// The saved routing's expert-major groups (real counts, padded offsets).
quant::RowGroups saved_groups(const Context::Impl& c, const SavedState::Buffers& s) {
  return {s.expert_rows_unpadded, s.expert_offsets, static_cast<int32_t>(c.local_experts)};
}

// A compact column bundle back to BF16 rows [cap, C] at `rows` (a WGRAD operand).
void dequantize_columns(const Context::Impl& c, common::DeviceAddress cols, int64_t C, const SavedState::Buffers& s,
                        void* rows, cudaStream_t stream) {
  quant::mxfp8_dequantize_columns(compact_columns_in(cols), saved_groups(c, s),
                                  quant::Bf16MatrixOut{rows, c.capacity_rows(), C, C}, stream);
}

// A WGRAD (w: the layer's arguments, n = grad_out's features, k = a's) on the compact column bundles
// grad_cols and a_cols, through scratch from the row region up (dead by then; context.cpp checks the
// room). Context::Impl::mxfp8_wgrad_fp8 (perf_history G149): each bundle at shared scales per 128
// tokens, every expert from a multiple of 128 (mxfp8_columns_to_fp8_blockwise), then the FP8-blockwise
// WGRAD -- FP8 wgmma over 128-token blocks, each block's product folded in with a_scale[n] *
// b_scale[k]. Otherwise (DMOE_MXFP8_WGRAD_BF16=1) both back to BF16 rows, exactly, and our BF16 WGRAD:
// the products exactly as MXFP8 defines them, for A/B runs.
void run_wgrad(const Context::Impl& c, const SavedState::Buffers& s, WgradArgs w, common::DeviceAddress grad_cols,
               common::DeviceAddress a_cols, cudaStream_t stream) {
  const int64_t n = w.common.n, k = w.common.k, row = c.mxfp8_scratch.row;
  if (!c.mxfp8_wgrad_fp8) {
    void* grad_rows = at(c, row);
    void* a_rows = at(c, row + align128(c.capacity_rows() * n * 2));
    dequantize_columns(c, grad_cols, n, s, grad_rows, stream);
    dequantize_columns(c, a_cols, k, s, a_rows, stream);
    w.grad_out = grad_rows;
    w.a = a_rows;
    grouped_gemm_wgrad(w, stream);
    return;
  }
  const int64_t cap = planner::mxfp8_wgrad_capacity(c.capacity_rows(), c.local_experts);
  const quant::Fp8BlockwiseOut gc = strided_fp8_columns(c, row, n, cap);
  const quant::Fp8BlockwiseOut ac = strided_fp8_columns(c, row + numeric::fp8_blockwise_compact_columns_bytes(n, cap), k, cap);
  const quant::RowGroups groups = saved_groups(c, s);
  quant::mxfp8_columns_to_fp8_blockwise(compact_columns_in(grad_cols), groups, n, cap, gc, c.wgrad_padded_counts, stream);
  quant::mxfp8_columns_to_fp8_blockwise(compact_columns_in(a_cols), groups, k, cap, ac, c.wgrad_padded_counts, stream);
  w.common.counts = c.wgrad_padded_counts;
  w.common.m_capacity = cap;
  w.common.a_format = w.common.b_format = kFp8BlockwiseRowsT;
  w.common.scales = OperandScales{gc.scales, n, ac.scales};
  w.grad_out = gc.q;
  w.a = ac.q;
  grouped_gemm_wgrad(w, stream);
}

// A layer GEMM's operands made MXFP8: the row bundle A ([cap, a_cols]) against a prepared
// weight's FPROP fields, or (DGRAD) its transposed copy with the DGRAD scales.
void use_mxfp8_operands(GroupedGemmCommon& g, const RowBundle& a, int64_t a_cols, const void* b_scales,
                        bool transposed_weight) {
  g.a_format = kMxfp8Rows;
  g.b_format = transposed_weight ? kMxfp8WeightT : kMxfp8Weight;
  g.scales = OperandScales{a.scales, a.word_ld > 0 ? a.word_ld : a_cols / 32, b_scales};
  g.scales.a_kblock_words = a.word_ld > 0;
}

// A training GEMM's operands: the row bundle A ([cap, a_cols], its k-block-major code words; rows up to
// *used_rows) against a prepared weight whose product has out_cols columns -- FPROP: its own fields
// [E, out_cols, a_cols]; DGRAD: its transposed copy [E, out_cols, a_cols] with the DGRAD scales. The
// preparation put the weight at shared scales per 128x128 block (perf_history G150-G151); where the
// context runs the FP8-blockwise kernels for the op (Context::Impl::mxfp8_fprop_fp8 / mxfp8_dgrad_fp8) the
// bundle turns into FP8-blockwise rows at shared scales in place and the weight's FP32 block scales come
// from its E8M0 grid, else (DMOE_MXFP8_EXACT=1, DMOE_MXFP8_FPROP_PER32=1) the per-32 MXFP8 GEMM.
void use_weight_operands(const Context::Impl& c, GroupedGemmCommon& g, const RowBundle& a, int64_t a_cols,
                         int64_t out_cols, const PreparedWeightBuffers& w, bool dgrad, const int32_t* used_rows,
                         cudaStream_t stream) {
  const void* e8m0 = dgrad ? w.dgrad_scale : w.fprop_scale;
  if (!(dgrad ? c.mxfp8_dgrad_fp8 : c.mxfp8_fprop_fp8)) {
    use_mxfp8_operands(g, a, a_cols, e8m0, dgrad);
    return;
  }
  DMOE_ASSERT(a.word_ld > 0);  // the rows + columns quantizers' bundle (training), not gathered packed rows
  quant::mxfp8_rows_to_fp8_blockwise(a.q, a_cols, reinterpret_cast<uint32_t*>(a.scales), a.word_ld, c.capacity_rows(),
                                     used_rows, stream);
  quant::mxfp8_weight_block_scales(static_cast<const uint8_t*>(e8m0), c.local_experts, out_cols, a_cols,
                                   c.weight_block_scales, stream);
  g.a_format = kFp8BlockwiseRows;
  g.b_format = dgrad ? kFp8BlockwiseWeightT : kFp8BlockwiseWeight;
  g.scales = OperandScales{a.scales, a.word_ld, c.weight_block_scales};
}

// ---- the expert part of the forward (also the backward's recompute) ------------------------------

// x rows + columns -> W13 FPROP + SwiGLU -> h2 rows + columns -> W2 FPROP scattering h3 routes.
// `keep`: write the WGRAD columns and h1 where the snapshot says (else only the FPROP operands).
void expert_forward(Context::Impl& c, const RoutedExpertsInputs& in, const BlockScaledTables& t, const int64_t* layer,
                    bool keep, float* clip_stats, float clip_limit, bool recompute, cudaStream_t stream) {
  const int64_t D = c.config.hidden_dim, F = c.config.intermediate_dim;
  uint8_t* act = c.activation_base();
  const PreparedWeightBuffers& w13 = in.w13_prepared->buffers;
  const PreparedWeightBuffers& w2 = in.w2_prepared->buffers;
  const common::DeviceAddress none;
  void* h2_bf16 = at(c, c.mxfp8_scratch.h2_bf16());

  const bool mega = c.config.block_scaled->pipeline == BlockScaledPipeline::kMega;
  if (mega && t.packed_rows) {
    // (inference: the launch below gathers each chunk's packed x rows itself)
  } else if (t.packed_rows) {  // inference: the rows arrive quantized; no WGRAD columns
    const quant::RowGroups groups{t.real_counts, t.offsets, static_cast<int32_t>(c.local_experts)};
    quant::mxfp8_gather_packed_rows(t.gather_src, groups, c.capacity_rows(), D,
                                    row_bundle_out(c, D, /*packed_source=*/true), stream);
    c.stage("gather_x_rows", stream);
  } else {
    quantize_rows_cols(c, routed_rows(c, t.gather_src, D), t.real_counts, t.offsets,
                       keep ? common::DeviceAddress{act, layer + planner::kXCol} : none, stream);
    c.stage(recompute ? "recompute_quantize_x" : "quantize_x", stream);
  }

  // Inference: the swap-AB tiles of W13 and W2 cover each expert's real rows, not its 32-row padded
  // segment (h2's padding rows are then not written, and nothing reads them: no WGRAD columns here).
  const int32_t* tile_rows = t.packed_rows ? t.real_counts : nullptr;
  W13FpropArgs f13 = w13_fprop_args(c, in, t.counts);
  const RowBundle xr = row_bundle(c, D, t.packed_rows);
  const int32_t* used_rows = t.offsets + c.local_experts;
  if (mega) use_mxfp8_operands(f13.common, xr, D, w13.fprop_scale, false);  // (Mega's mainloop is per-32 MXFP8)
  else use_weight_operands(c, f13.common, xr, D, 2 * F, w13, false, used_rows, stream);
  f13.common.tile_rows = tile_rows;
  f13.a = xr.q;
  f13.w13 = w13.fprop_data;
  f13.h1 = keep ? act : nullptr;
  f13.h1_offset = keep ? layer + planner::kH1 : nullptr;
  f13.h2 = h2_bf16;
  f13.clip_stats = clip_stats;
  f13.clip_limit = clip_limit;
  f13.clip_rows = t.real_counts;  // not the padding rows

  if (mega) {
    // One launch (context.cpp): each chunk's W13 tiles, its h2 as MXFP8 rows, its W2 tiles; at
    // inference each chunk's x rows gathered from the dispatch windows first. Decode sizes: the
    // 16-token tiles, a chunk's h2 rows quantized in place of their BF16 rows (E4M3 at the row's
    // start, the codes F bytes in) as soon as its W13 tiles are done. Larger, and training: the
    // 128x128 tiles, the W13 epilogue writing h2's E4M3 rows [cap, F] and their codes (k-block-major
    // words) where BF16 h2 would lie (2 cap F bytes; x's row bundle stays in the row region, still
    // read by later chunks), and when the layer keeps its state h1 and h2's column bundle too.
    FpropArgs f2 = w2_fprop_args(c, in, t.counts);
    f2.common.a_format = kMxfp8Rows;
    f2.common.b_format = kMxfp8Weight;
    f2.common.tile_rows = tile_rows;
    f2.w = w2.fprop_data;
    f2.scatter.row_ptrs = t.scatter_dst;
    if (runs_decode_tiles(c.config, c.world, c.plan.total_scratch_capacity_factor)) {
      DMOE_ASSERT(t.packed_rows && !keep);
      f2.common.scales = OperandScales{static_cast<uint8_t*>(h2_bf16) + F, 2 * F, w2.fprop_scale};
      f2.a = h2_bf16;
      grouped_gemm_mega_mxfp8_decode(f13, f2, stream, t.gather_src);
    } else {
      const int64_t cap = c.capacity_rows();
      uint8_t* h2q = static_cast<uint8_t*>(h2_bf16);
      f2.common.scales = OperandScales{h2q + align128(cap * F), cap, w2.fprop_scale};
      f2.common.scales.a_kblock_words = true;
      f2.a = h2q;
      f13.h2 = h2q;
      Mxfp8Columns h2_col;  // the forward's saved h2 columns, where the staged quantizer puts them
      if (keep) h2_col = Mxfp8Columns{act, layer + planner::kH2Col, t.offsets + c.local_experts};
      grouped_gemm_mega_mxfp8(f13, f2, stream, t.packed_rows ? t.gather_src : nullptr, h2_col);
    }
    c.stage(recompute ? "recompute_mega" : "mega", stream);
    return;
  }

  grouped_gemm_w13_fprop(f13, stream);
  c.stage(recompute ? "recompute_w13" : "w13", stream);

  quantize_rows_cols(c, scratch_rows(c, h2_bf16, F), t.real_counts, t.offsets,
                     keep ? common::DeviceAddress{act, layer + planner::kH2Col} : none, stream);
  c.stage(recompute ? "recompute_quantize_h2" : "quantize_h2", stream);

  FpropArgs f2 = w2_fprop_args(c, in, t.counts);
  const RowBundle hr = row_bundle(c, F);
  use_weight_operands(c, f2.common, hr, F, D, w2, false, used_rows, stream);
  f2.common.tile_rows = tile_rows;
  f2.a = hr.q;
  f2.w = w2.fprop_data;
  f2.scatter.row_ptrs = t.scatter_dst;
  grouped_gemm_fprop(f2, stream);
  c.stage(recompute ? "recompute_w2" : "w2", stream);
}

}  // namespace

// ---- forward ------------------------------------------------------------------------------------

void mxfp8_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                   const ExecutionOptions& o, cudaStream_t stream) {
  block_scaled_forward(
      c, in, out_TD, saved, o,
      [&](const quant::Bf16Matrix& x, void* rows, int64_t row_stride) {
        quant::mxfp8_quantize_rows(x, quant::mxfp8_packed_rows_out(rows, row_stride, x.cols), stream);
      },
      expert_forward, stream);
}

// ---- backward -----------------------------------------------------------------------------------

void mxfp8_backward(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
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
  quantize_rows_cols(c, head.grad_h3, s.expert_rows_unpadded, s.expert_offsets,
                     at(c, S.grad_h3_col), stream);
  c.stage("quantize_grad_h3", stream);

  void* grad_h2 = at(c, S.grad_h2);
  DgradArgs d2 = w2_dgrad_args(c, in, s.expert_rows);
  const RowBundle g3r = row_bundle(c, D);
  d2.grad_out = g3r.q;
  d2.w = w2.dgrad_data;
  RowBundle dxr = row_bundle(c, 2 * F);  // W13 DGRAD's A: dxy's rows
  const bool fused = c.config.block_scaled->pipeline == BlockScaledPipeline::kMega && mega_fused_dgrad_swiglu();
  if (fused && c.mxfp8_dgrad_fp8)
    detail::fail(ErrorCode::kInvalidValue, "DMOE_MEGA_FUSED_DGRAD_SWIGLU=1 runs the per-32 MXFP8 DGRAD (measured "
                 "with upstream's exact weights): set DMOE_MXFP8_EXACT=1 with it");
  if (fused) {
    use_mxfp8_operands(d2.common, g3r, D, w2.dgrad_scale, true);
    // W2 DGRAD with SwiGLU backward and dxy's rows + columns in its epilogue: grad_h2 is never
    // stored. dxy's rows cannot share the row region with grad_h3's, which the launch reads: E4M3 over
    // grad_h2's region, the code words after grad_h3's codes (planner::Mxfp8Scratch::fused_dxy_codes;
    // context creation checked fused_dxy_fits).
    dxr = RowBundle{static_cast<uint8_t*>(grad_h2), at(c, S.fused_dxy_codes(cap, D)), cap};
    const activation::SwigluParams sp = swiglu_params(c.config);
    SwigluBackwardMxfp8Args sb;
    sb.h1 = act;
    sb.h1_offset = layer + planner::kH1;
    sb.real_rows = s.expert_rows_unpadded;
    sb.activation = sp.clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
    sb.swiglu_alpha = sp.alpha;
    sb.swiglu_limit = sp.limit;
    sb.dxy = dxr.q;
    sb.dxy_scales = dxr.scales;
    sb.scale_ld = dxr.word_ld;
    sb.scale_kblock_words = true;
    sb.columns = Mxfp8Columns{at(c, S.dxy_col), nullptr, s.expert_offsets + L};
    grouped_gemm_dgrad_swiglu_mxfp8(d2, sb, stream);
    c.stage("mega_w2_dgrad_swiglu", stream);
  } else {
    use_weight_operands(c, d2.common, g3r, D, F, w2, true, s.expert_offsets + L, stream);
    d2.grad_a = grad_h2;
    grouped_gemm_dgrad(d2, stream);
    c.stage("w2_dgrad", stream);

    // dxy = SwiGLU'(h1) * grad_h2 straight to E4M3 rows + compact columns, never stored in BF16 (G70).
    const quant::SwigluBackwardSource dxy{{act, layer + planner::kH1}, grad_h2, cap, F, swiglu_params(c.config)};
    quant::mxfp8_swiglu_backward_quantize(dxy, saved_groups(c, s), row_bundle_out(c, 2 * F),
                                          compact_columns<uint8_t>(at(c, S.dxy_col)), stream);
    c.stage("swiglu_backward_quantize_dxy", stream);
  }

  DgradArgs d13 = w13_dgrad_args(c, in, s.expert_rows);
  use_weight_operands(c, d13.common, dxr, 2 * F, D, w13, true, s.expert_offsets + L, stream);
  d13.grad_out = dxr.q;
  d13.w = w13.dgrad_data;
  d13.scatter.row_ptrs = s.scatter_dst;
  grouped_gemm_dgrad(d13, stream);
  c.stage("w13_dgrad", stream);

  // WGRADs on the column bundles, their operands over the dead row / h1 / grad_h2 regions.
  run_wgrad(c, s, w2_wgrad_args(c, s.expert_rows, g.grad_w2, wgrad, g.accumulate), at(c, S.grad_h3_col),
            {act, layer + planner::kH2Col}, stream);
  c.stage("w2_wgrad", stream);
  run_wgrad(c, s, w13_wgrad_args(c, s.expert_rows, g.grad_w13, wgrad, g.accumulate), at(c, S.dxy_col),
            {act, layer + planner::kXCol}, stream);
  c.stage("w13_wgrad", stream);

  backward_reduce(c, in, g, stream);
}

}  // namespace dist_moe::runtime
