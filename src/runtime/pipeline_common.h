// The steps every routed-experts pipeline (BF16: bf16_pipeline.cpp; MXFP8: mxfp8_pipeline.cpp;
// FP8 blockwise: fp8_blockwise_pipeline.cpp) shares around its expert GEMMs: argument checks, publish + route + plan, the top-k reduction
// (or RMSNorm) of the forward, the top-k backward and the final grad_x reduction. Only what
// happens between the routing tables and the owners' combine windows differs by format.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "dist_moe/routed_experts.h"
#include "kernels/topk.h"
#include "quant/quantize.h"
#include "runtime/context_impl.h"

namespace dist_moe::runtime {

// Upstream's routed_experts validation of T, x, ids and scores (the weights are the format's).
void check_token_inputs(const Context::Impl& c, const RoutedExpertsInputs& in);
// The BF16 weights' shapes (every documented W13 / W2 layout).
void check_bf16_weights(const Context::Impl& c, const RoutedExpertsInputs& in);

// Block-scaled layers: the prepared W13 and W2 of the context's format, shape and purpose (the
// training backward needs the DGRAD fields).
void check_block_scaled_weights(const Context::Impl& c, const RoutedExpertsInputs& in, bool training);

// Block-scaled layers' operands: a byte of the activation buffer; expert-major BF16 rows [cap, C]
// in scratch, or read through routing's row-address tables.
inline uint8_t* at(const Context::Impl& c, int64_t offset) { return c.activation_base() + offset; }
quant::Bf16Matrix scratch_rows(const Context::Impl& c, const void* rows, int64_t C);
quant::Bf16Matrix routed_rows(const Context::Impl& c, const void* const* row_ptrs, int64_t C);
// FP8-blockwise strided columns of C features x `rows` tokens (a multiple of 128) at a scratch offset:
// E4M3 [C, rows], then FP32 scales [rows/128, C] from the next 128-byte boundary (the WGRAD's operand
// layout; the bytes of a compact bundle of that many rows, numeric::fp8_blockwise_compact_columns_bytes).
quant::Fp8BlockwiseOut strided_fp8_columns(const Context::Impl& c, int64_t offset, int64_t C, int64_t rows);

// A compact column bundle (either E4M3 format) at a device address, the planner's slot or scratch
// home (absent where a.base is null).
template <class Scale>
quant::QuantizedOut<Scale> compact_columns(common::DeviceAddress a) {
  quant::QuantizedOut<Scale> out;
  if (a.base) {
    out.q = static_cast<uint8_t*>(a.base);
    out.compact = true;
    out.q_offset = a.offset;
  }
  return out;
}

kernels::TopkRoutes routes_of(const Context::Impl& c, const RoutedExpertsInputs& in);

// What the head of a forward decided (host-visible flags; the device decisions are in `layer`).
struct ForwardHead {
  bool saving = false;        // a backward will read this call's SavedState
  bool pushes = false;        // the layer takes its place in the selected activation slot
  bool scratch_only = true;   // !pushes
  int64_t* layer = nullptr;   // the planner's snapshot (SavedState's or the context's scratch copy)
};

// Validates ids (when asked), publishes x and ids, routes (EP barrier + tables), exchanges every
// rank's rows and plans the layer (BF16 planner, or the MXFP8 one with these scratch homes), copies
// the routing tables into `saved` and keeps x in the slot on the recompute path.
// `rows_in_window`: the caller wrote this rank's rows into the dispatch window already (packed
// rows quantized at the source; inference only), so the publish moves only the ids.
ForwardHead forward_head(Context::Impl& c, const RoutedExpertsInputs& in, SavedState::Buffers* saved,
                         const ExecutionOptions& o, const planner::Mxfp8Homes* mxfp8, cudaStream_t stream,
                         bool rows_in_window = false);

// After the expert GEMMs scattered every h3 route row into its owner's combine window: the top-k
// reduction or the RMSNorm postprocess into out_TD, h3 kept in the slot on the saved path, route
// rows for the caller's postprocess.
void forward_reduce(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                    const ExecutionOptions& o, const ForwardHead& head, cudaStream_t stream);

// The backward's argument checks (an inference context is rejected before, by
// routed_experts_backward); returns the WGRAD dtype of the call.
DType check_backward(const Context::Impl& c, const SavedState::Buffers& s, const void* grad_out_TD,
                     const RoutedExpertsGradients& g, const ExecutionOptions& o);

// The backward recompute block's opening, the same for every format: a fixed launch sequence whose
// data stages do nothing on the saved path (`need_recompute` false). The layer input comes back
// into the dispatch window's routes from the slot's x save or the caller's x (`x_offset`: device
// int64, the planner's); its EP barrier runs only when recomputing (every rank's plan agrees);
// the combine routes are made ready for the recompute's W2 scatter; `counts_gated` gets the saved
// expert rows, or zeros on the saved path (every expert GEMM of the block then does nothing).
void begin_recompute(Context::Impl& c, int64_t num_tokens, const int64_t* x_offset, const int64_t* need_recompute,
                     const int32_t* expert_rows, cudaStream_t stream);

// Top-k (or RMSNorm) backward: grad_h3 route rows published in the dispatch window and the score
// gradients, then the EP barrier after which the expert ranks may gather grad_h3. `h3_offset` is a
// device int64 the call fills with where h3 lives (the slot when saved, the combine window when
// recomputed). token_rows_ok: the caller's quantizer can read grad_h3 as scaled token rows
// (quant::Bf16Matrix::row_scales); where the plain reduction allows (no RMSNorm, no caller-given
// or observed route gradients, K >= 2), grad_out's token rows and the route scores are published
// instead of the route rows (topk_reduce_backward_token_rows, G144), and the call returns true.
bool backward_topk(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
                   const void* grad_out_TD, const RoutedExpertsGradients& g, const ExecutionOptions& o,
                   int64_t* h3_offset, cudaStream_t stream, bool token_rows_ok = false);

// ---- block-scaled pipelines (MXFP8, FP8 blockwise) ---------------------------------------------

// The routing tables a block-scaled expert part reads (the forward's, or the backward's recompute
// with gated row counts and group offsets).
struct BlockScaledTables {
  const int32_t* counts;        // padded rows per expert (gated in the recompute)
  const int32_t* offsets;       // [L + 1] (gated in the recompute)
  const int32_t* real_counts;   // unpadded rows per expert
  const void* const* gather_src;
  void* const* scatter_dst;
  bool packed_rows = false;     // gather_src points at packed rows quantized at the source (inference)
};

// The format's expert part: x rows (+ the WGRAD columns and h1 where the snapshot `layer` says,
// when `keep`) -> W13 FPROP + SwiGLU -> h2 rows (+ columns) -> W2 FPROP scattering h3 route rows
// into the owners' combine windows. `recompute` names the stages of the backward's recompute.
using BlockScaledExpertPart = void (*)(Context::Impl& c, const RoutedExpertsInputs& in, const BlockScaledTables& t,
                                       const int64_t* layer, bool keep, float* clip_stats, float clip_limit,
                                       bool recompute, cudaStream_t stream);

// A block-scaled forward around the format's expert part: the checks; inference quantizes each
// token once, at the source, with `quantize_source(x, dispatch window rows, row stride)` (D + D/32
// bytes cross NVLink instead of 2D; T rows quantized instead of T*K routed rows), so the publish
// moves only the ids (training quantizes after the gather: its WGRAD column blocks need the BF16
// rows); publish + route + plan with the scratch homes; `experts`, keeping the saved operands when
// the call saves; the top-k reduction or RMSNorm.
using SourceQuantizer = std::function<void(const quant::Bf16Matrix& x, void* rows, int64_t row_stride_bytes)>;
void block_scaled_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                          const ExecutionOptions& o, const SourceQuantizer& quantize_source,
                          BlockScaledExpertPart experts, cudaStream_t stream);

// The head of a block-scaled backward: the checks, the planner's pop, the recompute block -- a fixed
// launch sequence whose stages do nothing on the saved path (gated row counts and group offsets; the
// two EP barriers only when recomputing, as in the BF16 pipeline): x back from the slot's save or
// the caller's, `experts` on the gated tables keeping its operands, the h3 rows in their owners'
// combine windows -- then the top-k backward. Returns the WGRAD dtype of the call and where the
// grad_h3 quantizer reads its rows: the owners' route rows, or their token rows scaled by each
// row's route score (backward_topk's token rows; the scores gathered into grad_h3_row_scores).
struct BlockScaledBackwardHead {
  DType wgrad;
  quant::Bf16Matrix grad_h3;  // [capacity, D], gathered
};
BlockScaledBackwardHead block_scaled_backward_head(Context::Impl& c, const RoutedExpertsInputs& in,
                                                   const SavedState::Buffers& s, const void* grad_out_TD,
                                                   const RoutedExpertsGradients& g, const ExecutionOptions& o,
                                                   BlockScaledExpertPart experts, cudaStream_t stream);

// After the W13 DGRAD scattered every grad_x route row into its owner's combine window: the EP
// barrier, then the sum over k into grad_x_TD.
void backward_reduce(Context::Impl& c, const RoutedExpertsInputs& in, const RoutedExpertsGradients& g,
                     cudaStream_t stream);

}  // namespace dist_moe::runtime
