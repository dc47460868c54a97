// The NVFP4 staged pipeline, per rank (inference; docs/block_scaled_layer.md has the plan):
//
//   [validate ids] x quantized at the source into packed NVFP4 rows [D/2 E2M1 | D/16 E4M3 | FP32
//   token_scale_inv | pad] of this rank's dispatch window -> publish ids -> route (rows padded to 32
//   per local expert) -> plan (scratch only) -> gather the routed packed rows into the row region
//   -> W13 FPROP + SwiGLU (both operands dequantized to FP16 in the kernel, the FP32 token and
//   expert scales in the epilogue, upstream's order; BF16 h2) -> h2 quantized per token into packed
//   rows in the row region -> W2 FPROP scattering BF16 h3 route rows into the owners' combine
//   windows -> EP barrier + top-k reduction (or RMSNorm)
//
// Scratch (planner::Mxfp8Scratch, inference): the row region holds the packed x rows, then the
// packed h2 rows (each at most upstream's row bundle: C/2 + C/16 + 4 bytes per row against the
// C + C/32 the MXFP8 layout reserves); h1's region holds the BF16 h2 (h1 is not kept).
//
// Prefill- and decode-sized contexts (memory_plan.h nvfp4_expands_token_rows) expand the tokens to
// FP16 once instead of letting every weight tile's producer warps convert them: the routed rows
// straight from the dispatch windows into the expanded region (x), and the packed h2 rows after
// their quantization (h2, over x's dead rows); the GEMMs read kNvfp4ExpandedRows with the 128-token
// tile, or the 16-token one at decode.
//
// Mega (pipeline="mega", decode contexts; docs/block_scaled_layer.md "Mega"): the x expansion, W13,
// the h2 quantization and expansion, and W2 are one launch (grouped_gemm_mega_nvfp4_decode): each
// chunk's expanded h2 rows replace its BF16 ones in h1's region.
#include "runtime/nvfp4_pipeline.h"

#include "dist_moe/check.h"
#include "dist_moe/grouped_gemm.h"
#include "quant/quantize.h"
#include "runtime/layer_gemms.h"
#include "runtime/pipeline_common.h"

namespace dist_moe::runtime {
namespace {

// A layer GEMM's operands made NVFP4: packed token rows (or expanded ones, with their FP32
// token_scale_inv) against a prepared weight. The tiles cover each expert's real rows, not its
// 32-row padded segment: a decode expert of <= 16 rows is then one pass over its weights with the
// 16-token tile, and the padding rows are neither read nor written.
void use_nvfp4_operands(GroupedGemmCommon& g, const PreparedWeightBuffers& w, const float* expanded_scales,
                        const int32_t* real_counts) {
  g.tile_rows = real_counts;
  g.a_format = expanded_scales != nullptr ? kNvfp4ExpandedRows : kNvfp4Rows;
  g.b_format = kNvfp4Weight;
  g.scales = OperandScales{expanded_scales, 0, w.fprop_scale, w.global_scale_inv};
}

// Gathered x rows -> W13 FPROP + SwiGLU -> packed h2 rows -> W2 FPROP scattering h3 routes.
void expert_forward(Context::Impl& c, const RoutedExpertsInputs& in, const BlockScaledTables& t,
                    const int64_t* /*layer*/, bool /*keep*/, float* clip_stats, float clip_limit, bool /*recompute*/,
                    cudaStream_t stream) {
  DMOE_ASSERT(t.packed_rows);  // NVFP4 is inference-only: the rows always arrive quantized
  const int64_t D = c.config.hidden_dim, F = c.config.intermediate_dim, cap = c.capacity_rows();
  const PreparedWeightBuffers& w13 = in.w13_prepared->buffers;
  const PreparedWeightBuffers& w2 = in.w2_prepared->buffers;
  const quant::RowGroups groups{t.real_counts, t.offsets, static_cast<int32_t>(c.local_experts)};
  uint8_t* rows = at(c, c.mxfp8_scratch.row);
  void* h2_bf16 = at(c, c.mxfp8_scratch.h2_bf16());
  const bool expand = c.mxfp8_scratch.expanded != 0;
  void* expanded = expand ? at(c, c.mxfp8_scratch.expanded) : nullptr;
  float* expanded_scales = expand ? reinterpret_cast<float*>(at(c, c.mxfp8_scratch.expanded_scales)) : nullptr;

  const bool mega = c.config.block_scaled->pipeline == BlockScaledPipeline::kMega;
  if (mega) {
    // (the launch below expands each chunk's x rows itself)
  } else if (expand) {
    quant::nvfp4_expand_rows(t.gather_src, nullptr, 0, groups, cap, D, expanded, expanded_scales, stream);
    c.stage("expand_x_rows", stream);
  } else {
    quant::nvfp4_gather_packed_rows(t.gather_src, groups, cap, D, rows, stream);
    c.stage("gather_x_rows", stream);
  }

  W13FpropArgs f13 = w13_fprop_args(c, in, t.counts);
  use_nvfp4_operands(f13.common, w13, expanded_scales, t.real_counts);
  f13.a = expand ? expanded : rows;
  f13.w13 = w13.fprop_data;
  f13.h1 = nullptr;
  f13.h2 = h2_bf16;
  f13.clip_stats = clip_stats;
  f13.clip_limit = clip_limit;
  f13.clip_rows = t.real_counts;  // not the padding rows
  FpropArgs f2 = w2_fprop_args(c, in, t.counts);
  use_nvfp4_operands(f2.common, w2, expanded_scales, t.real_counts);
  f2.w = w2.fprop_data;
  f2.scatter.row_ptrs = t.scatter_dst;

  if (mega) {
    // One launch (decode contexts; context.cpp): each chunk's x rows expanded from the dispatch
    // windows, its W13 tiles, its h2 quantized into the packed rows and expanded in place of its BF16
    // rows as soon as its last W13 tile is done, its W2 tiles.
    DMOE_ASSERT(expand);
    f2.a = h2_bf16;
    grouped_gemm_mega_nvfp4_decode(f13, f2, MegaNvfp4Handoff{rows, quant::nvfp4_packed_row_bytes(F), t.gather_src},
                                   stream);
    c.stage("mega", stream);
    return;
  }

  grouped_gemm_w13_fprop(f13, stream);
  c.stage("w13", stream);

  // The token rows of the groups only: W13 wrote no h2 for the padding rows, and W2's tiles, like
  // the expansion, skip them (at decode most of each 32-row segment is padding).
  quant::nvfp4_quantize_rows(scratch_rows(c, h2_bf16, F),
                             quant::nvfp4_packed_rows_out(rows, quant::nvfp4_packed_row_bytes(F), F), stream,
                             t.offsets + c.local_experts, groups);
  c.stage("quantize_h2", stream);
  if (expand) {
    quant::nvfp4_expand_rows(nullptr, rows, quant::nvfp4_packed_row_bytes(F), groups, cap, F, expanded,
                             expanded_scales, stream);
    c.stage("expand_h2_rows", stream);
  }

  f2.a = expand ? expanded : rows;
  grouped_gemm_fprop(f2, stream);
  c.stage("w2", stream);
}

}  // namespace

void nvfp4_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                   const ExecutionOptions& o, cudaStream_t stream) {
  block_scaled_forward(
      c, in, out_TD, saved, o,
      [&](const quant::Bf16Matrix& x, void* rows, int64_t row_stride) {
        quant::nvfp4_quantize_rows(x, quant::nvfp4_packed_rows_out(rows, row_stride, x.cols), stream);
      },
      expert_forward, stream);
}

}  // namespace dist_moe::runtime
