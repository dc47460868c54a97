#include "reference/oracle.h"

#include <cstddef>
#include <type_traits>

#include "dist_moe/error.h"
#include "reference/quant.h"

namespace dist_moe::reference {
namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

// Quantize-dequantize hooks: identity in the BF16 path; the float model's quantized paths go
// through quant.h. (The exact model rejects quantization up front.)
template <class Real>
Tensor<Real> q_rows(const Tensor<Real>& a, Quantization q) {
  if constexpr (std::is_same_v<Real, float>) {
    if (q != Quantization::kNone) return quantize_activation_rows(a, q);
  }
  return a;
}
template <class Real>
Tensor<Real> q_cols(const RankRouting& rt, const Tensor<Real>& a, Quantization q) {
  if constexpr (std::is_same_v<Real, float>) {
    if (q != Quantization::kNone) return quantize_activation_columns(rt, a, q);
  }
  return a;
}
// A training GEMM's row operand: as quantized, except MXFP8's, which the Hopper layer runs at shared
// scales (quant.h mxfp8_wgrad_operand, mxfp8_shared_rows or their _once forms): `shared(raw)` from the
// unquantized values (a generic lambda: instantiated for float only).
template <class Real, class Shared>
Tensor<Real> hopper_operand(const Tensor<Real>& raw, const Tensor<Real>& quantized, Quantization q, Shared&& shared) {
  if constexpr (std::is_same_v<Real, float>) {
    if (q == Quantization::kMXFP8) return shared(raw);
  }
  return quantized;
}
template <class Real>
Tensor<Real> q_weights(const Tensor<Real>& w, Quantization q) {
  if constexpr (std::is_same_v<Real, float>) {
    if (q != Quantization::kNone) return quantize_weights(w, q);
  }
  return w;
}

}  // namespace

template <class Real>
std::vector<RankRouting> BasicForwardResult<Real>::routing() const {
  std::vector<RankRouting> out;
  for (const auto& r : ranks) out.push_back(r.routing);
  return out;
}

template <class Real>
Tensor<Real> BasicForwardResult<Real>::global_out_TD() const {
  std::vector<Tensor<Real>> parts;
  for (const auto& r : ranks) parts.push_back(r.out_TD);
  return concat_rows(parts);
}

template <class Real>
Tensor<Real> BasicBackwardResult<Real>::global_grad_x_TD() const {
  std::vector<Tensor<Real>> parts;
  for (const auto& r : ranks) parts.push_back(r.grad_x_TD);
  return concat_rows(parts);
}

template <class Real>
Tensor<Real> BasicBackwardResult<Real>::global_grad_scores_TK() const {
  std::vector<Tensor<Real>> parts;
  for (const auto& r : ranks) parts.push_back(r.grad_scores_TK);
  return concat_rows(parts);
}

template <class Real>
Tensor<Real> BasicBackwardResult<Real>::global_dw13_EFD() const {
  std::vector<Tensor<Real>> parts;
  for (const auto& r : ranks) parts.push_back(r.dw13_EFD);
  return concat_rows(parts);
}

template <class Real>
Tensor<Real> BasicBackwardResult<Real>::global_dw2_EDF() const {
  std::vector<Tensor<Real>> parts;
  for (const auto& r : ranks) parts.push_back(r.dw2_EDF);
  return concat_rows(parts);
}

template <class Real>
BasicForwardResult<Real> forward(const BasicProblem<Real>& problem, const ForwardOptions& options) {
  problem.validate();
  options.validate(problem.hidden_dim);
  const Quantization q = options.quantization;
  constexpr bool kPipelineModel = Numerics<Real>::kPipeline;
  DMOE_CHECK_ARG(q == Quantization::kNone || kPipelineModel,
                 "quantization ", to_string(q), " is modelled by the float (pipeline) oracle only");
  const int64_t R = problem.num_ranks, D = problem.hidden_dim;

  BasicForwardResult<Real> res;
  res.options = options;
  res.ranks.resize(at(R));

  // Publish + routing (every rank reads every rank's ids; T / id / capacity checks).
  std::vector<RankRouting> routing =
      build_routing(problem.ids_TK, problem.top_k, problem.num_experts, options.row_alignment,
                    options.receive_capacity_rows);

  // What each rank publishes into its dispatch buffer: BF16 x rows, or (NVFP4 inference) rows
  // quantized at the source, one per token whatever its K.
  std::vector<Tensor<Real>> published;
  for (int64_t r = 0; r < R; ++r) {
    published.push_back(q == Quantization::kNVFP4 ? q_rows(problem.x_TD[at(r)], q) : problem.x_TD[at(r)]);
  }

  // Expert side.
  std::vector<Tensor<Real>> h3_per_rank;
  for (int64_t r = 0; r < R; ++r) {
    RankForward<Real>& rf = res.ranks[at(r)];
    rf.routing = routing[at(r)];
    const RankRouting& rt = rf.routing;
    const Tensor<Real> w13 = q_weights(problem.local_w13(r), q);
    const Tensor<Real> w2 = q_weights(problem.local_w2(r), q);

    rf.x_gathered_MD = gather_token_rows(rt, published);
    // MXFP8 / FP8-blockwise: x quantized after the gather (row blocks for FPROP, column blocks
    // for WGRAD); NVFP4 arrives quantized already.
    const bool quant_after_gather = q == Quantization::kMXFP8 || q == Quantization::kFP8Blockwise;
    auto fprop_rows = [&](const Tensor<Real>& a) {  // (the shared rows straight from a: no exact rows first)
      if constexpr (std::is_same_v<Real, float>) {
        if (q == Quantization::kMXFP8) {
          switch (options.mxfp8_training_operands) {
            case Mxfp8TrainingOperands::kExactForward: break;
            case Mxfp8TrainingOperands::kReround: return mxfp8_shared_rows(a);
            case Mxfp8TrainingOperands::kSharedOnce: return mxfp8_shared_rows_once(a);
          }
        }
      }
      return q_rows(a, q);
    };
    const Tensor<Real> x_row = quant_after_gather ? fprop_rows(rf.x_gathered_MD) : rf.x_gathered_MD;
    rf.h1_M2F = grouped_gemm_nt(rt, x_row, w13);
    rf.clip_stats = clip_stats(rt, rf.h1_M2F, options.swiglu_clip_limit);
    rf.h2_MF = swiglu_rows(rt, rf.h1_M2F, problem.swiglu);
    const Tensor<Real> h2_row = fprop_rows(rf.h2_MF);
    rf.h3_MD = grouped_gemm_nt(rt, h2_row, w2);
    h3_per_rank.push_back(rf.h3_MD);

    if (q != Quantization::kNone) {
      QuantizedOperands<Real>& qo = rf.quantized;
      qo.w13_EFD = w13;
      qo.w2_EDF = w2;
      qo.x_row_MD = x_row;
      qo.h2_row_MF = h2_row;
      if (quant_after_gather) {
        qo.x_col_MD = q_cols(rt, rf.x_gathered_MD, q);
        qo.h2_col_MF = q_cols(rt, rf.h2_MF, q);
      }
    }
  }

  // Combine: h3 route rows land in their owners' combine buffers; owners reduce.
  std::vector<Tensor<Real>> combine = scatter_route_rows(routing, h3_per_rank, D);
  for (int64_t r = 0; r < R; ++r) {
    RankForward<Real>& rf = res.ranks[at(r)];
    rf.combine_TKD = std::move(combine[at(r)]);
    if (options.rmsnorm) {
      rf.out_TD = rmsnorm_topk_reduce(rf.combine_TKD, problem.ids_TK[at(r)], problem.scores_TK[at(r)],
                                      *options.rmsnorm, rf.rstd_TK);
    } else {
      rf.out_TD = topk_reduce(rf.combine_TKD, problem.ids_TK[at(r)], problem.scores_TK[at(r)]);
    }
  }
  return res;
}

template <class Real>
BasicBackwardResult<Real> backward(const BasicProblem<Real>& problem, const BasicForwardResult<Real>& fwd,
                                   const std::vector<Tensor<Real>>& grad_out_TD, const BackwardOptions& options) {
  problem.validate();
  const int64_t R = problem.num_ranks, D = problem.hidden_dim;
  const Quantization q = fwd.options.quantization;
  DMOE_CHECK_ARG(q != Quantization::kNVFP4, "NVFP4 is inference-only: the oracle has no NVFP4 backward");
  DMOE_CHECK_ARG(static_cast<int64_t>(fwd.ranks.size()) == R, "forward result has ", fwd.ranks.size(),
                 " ranks, the problem has ", R);
  DMOE_CHECK_ARG(static_cast<int64_t>(grad_out_TD.size()) == R, "grad_out_TD needs one [T, D] tensor per rank");
  DMOE_CHECK_ARG(options.wgrad_dtype == DType::kBFloat16 || options.wgrad_dtype == DType::kFloat32,
                 "wgrad_dtype must be bfloat16 or float32, got ", to_string(options.wgrad_dtype));
  const bool accumulate = !options.accumulate_dw13.empty() || !options.accumulate_dw2.empty();
  if (accumulate) {
    DMOE_CHECK_ARG(static_cast<int64_t>(options.accumulate_dw13.size()) == R &&
                       static_cast<int64_t>(options.accumulate_dw2.size()) == R,
                   "WGRAD accumulation needs both dW13 and dW2 buffers, one per rank");
  }
  for (int64_t r = 0; r < R; ++r) {
    const Tensor<Real>& g = grad_out_TD[at(r)];
    DMOE_CHECK_ARG(g.dims() == 2 && g.size(0) == problem.tokens(r) && g.size(1) == D, "grad_out_TD of rank ", r,
                   " must have shape [T, D]");
    if constexpr (std::is_same_v<Real, float>) {
      for (float v : g.data) DMOE_CHECK_ARG(numeric::round_bf16(v) == v, "grad_out_TD of rank ", r, " must hold BF16 values");
    }
  }

  BasicBackwardResult<Real> res;
  res.ranks.resize(at(R));
  const std::vector<RankRouting> routing = fwd.routing();

  // Owner side: reduction backward -> grad_h3 routes (published) and grad_scores.
  std::vector<Tensor<Real>> grad_h3_published;
  for (int64_t r = 0; r < R; ++r) {
    RankBackward<Real>& rb = res.ranks[at(r)];
    const RankForward<Real>& rf = fwd.ranks[at(r)];
    if (fwd.options.rmsnorm) {
      rmsnorm_topk_reduce_backward(rf.combine_TKD, problem.ids_TK[at(r)], problem.scores_TK[at(r)], rf.rstd_TK,
                                   grad_out_TD[at(r)], *fwd.options.rmsnorm, rb.grad_h3_TKD, rb.grad_scores_TK);
    } else {
      topk_reduce_backward(rf.combine_TKD, problem.ids_TK[at(r)], problem.scores_TK[at(r)], grad_out_TD[at(r)],
                           rb.grad_h3_TKD, rb.grad_scores_TK);
    }
    grad_h3_published.push_back(rb.grad_h3_TKD);
  }

  // Expert side.
  std::vector<Tensor<Real>> grad_x_routes;
  for (int64_t r = 0; r < R; ++r) {
    RankBackward<Real>& rb = res.ranks[at(r)];
    const RankForward<Real>& rf = fwd.ranks[at(r)];
    const RankRouting& rt = routing[at(r)];
    const Tensor<Real> w13 = q != Quantization::kNone ? rf.quantized.w13_EFD : problem.local_w13(r);
    const Tensor<Real> w2 = q != Quantization::kNone ? rf.quantized.w2_EDF : problem.local_w2(r);
    // WGRAD operands of the forward activations (column-quantized in the quantized training paths);
    // MXFP8's DGRAD rows and WGRAD columns: quantized once at the shared scales under kSharedOnce, else
    // the exact blocks re-rounded there.
    const bool mxfp8_once = fwd.options.mxfp8_training_operands == Mxfp8TrainingOperands::kSharedOnce;
    auto wgrad_cols = [&](const auto& a) {
      return mxfp8_once ? mxfp8_wgrad_operand_once(rt, a) : mxfp8_wgrad_operand(rt, a);
    };
    const Tensor<Real> x_wgrad = q != Quantization::kNone
                                     ? hopper_operand(rf.x_gathered_MD, rf.quantized.x_col_MD, q, wgrad_cols)
                                     : rf.x_gathered_MD;
    const Tensor<Real> h2_wgrad =
        q != Quantization::kNone ? hopper_operand(rf.h2_MF, rf.quantized.h2_col_MF, q, wgrad_cols) : rf.h2_MF;
    auto dgrad_rows = [&](const auto& a) { return mxfp8_once ? mxfp8_shared_rows_once(a) : mxfp8_shared_rows(a); };

    rb.grad_h3_MD = gather_route_rows(rt, grad_h3_published);
    const Tensor<Real> gh3_row = q_rows(rb.grad_h3_MD, q);
    const Tensor<Real> gh3_col = q_cols(rt, rb.grad_h3_MD, q);
    rb.grad_h2_MF = grouped_gemm_nn(rt, hopper_operand(rb.grad_h3_MD, gh3_row, q, dgrad_rows), w2);
    const Tensor<Real> dw2 = grouped_wgrad(rt, hopper_operand(rb.grad_h3_MD, gh3_col, q, wgrad_cols), h2_wgrad);

    rb.grad_h1_M2F = swiglu_backward_rows(rt, rf.h1_M2F, rb.grad_h2_MF, problem.swiglu);
    const Tensor<Real> gh1_row = q_rows(rb.grad_h1_M2F, q);
    const Tensor<Real> gh1_col = q_cols(rt, rb.grad_h1_M2F, q);
    rb.grad_x_route_MD = grouped_gemm_nn(rt, hopper_operand(rb.grad_h1_M2F, gh1_row, q, dgrad_rows), w13);
    const Tensor<Real> dw13 = grouped_wgrad(rt, hopper_operand(rb.grad_h1_M2F, gh1_col, q, wgrad_cols), x_wgrad);

    Tensor<Real> prev13, prev2;
    if (accumulate) {
      prev13 = tensor_cast<Real>(options.accumulate_dw13[at(r)]);
      prev2 = tensor_cast<Real>(options.accumulate_dw2[at(r)]);
    }
    rb.dw2_EDF = store_wgrad(dw2, accumulate ? &prev2 : nullptr, options.wgrad_dtype);
    rb.dw13_EFD = store_wgrad(dw13, accumulate ? &prev13 : nullptr, options.wgrad_dtype);
    grad_x_routes.push_back(rb.grad_x_route_MD);

    if (q != Quantization::kNone) {
      rb.quantized.grad_h3_row_MD = gh3_row;
      rb.quantized.grad_h3_col_MD = gh3_col;
      rb.quantized.grad_h1_row_M2F = gh1_row;
      rb.quantized.grad_h1_col_M2F = gh1_col;
    }
  }

  // Input-gradient routes go back to their owners; owners reduce over k.
  std::vector<Tensor<Real>> grad_x_TKD = scatter_route_rows(routing, grad_x_routes, D);
  for (int64_t r = 0; r < R; ++r) {
    RankBackward<Real>& rb = res.ranks[at(r)];
    rb.grad_x_TKD = std::move(grad_x_TKD[at(r)]);
    rb.grad_x_TD = reduce_from_topk(rb.grad_x_TKD, problem.ids_TK[at(r)], problem.top_k);
  }
  return res;
}

template struct BasicForwardResult<float>;
template struct BasicForwardResult<double>;
template struct BasicBackwardResult<float>;
template struct BasicBackwardResult<double>;
template BasicForwardResult<float> forward<float>(const BasicProblem<float>&, const ForwardOptions&);
template BasicForwardResult<double> forward<double>(const BasicProblem<double>&, const ForwardOptions&);
template BasicBackwardResult<float> backward<float>(const BasicProblem<float>&, const BasicForwardResult<float>&,
                                                    const std::vector<Tensor<float>>&, const BackwardOptions&);
template BasicBackwardResult<double> backward<double>(const BasicProblem<double>&, const BasicForwardResult<double>&,
                                                      const std::vector<Tensor<double>>&, const BackwardOptions&);

}  // namespace dist_moe::reference
