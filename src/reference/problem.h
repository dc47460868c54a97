// The input of the CPU oracle: one routed-experts call on R simulated expert-parallel ranks.
//
// Every rank r holds its own x_TD, ids_TK and scores_TK (T rows each; the oracle checks that T is
// equal on all ranks, as the device does). Weights are given globally, [E, 2F, D] and [E, D, F];
// rank r owns experts [r*E_local, (r+1)*E_local) and uses that slice, so one global problem can be
// re-split over any rank count that divides E and the total token count (`resplit`).
//
// Two numeric models share one implementation (see docs/oracle.md):
//   BasicProblem<float>  (Problem):      the GPU pipeline, with its BF16 rounding points.
//   BasicProblem<double> (ExactProblem): the same formulas in double with no rounding at all;
//                                        used to check the backward against finite differences.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dist_moe/config.h"
#include "dist_moe/dtype.h"
#include "reference/tensor.h"

namespace dist_moe::reference {

// SwiGLU flavour and parameters (upstream §2.5): plain g*sigmoid(g)*u, or clamped
// min(g,L)*sigmoid(alpha*min(g,L))*(clamp(u,-L,L)+1).
struct SwigluParams {
  Activation activation = Activation::kSwiGLU;
  double alpha = kSwigluClampAlphaDefault;  // clamped only
  double limit = kSwigluClampLimitDefault;  // clamped only
};

template <class Real>
struct BasicProblem {
  int64_t num_ranks = 1;         // R
  int64_t hidden_dim = 0;        // D
  int64_t intermediate_dim = 0;  // F
  int64_t top_k = 0;             // K
  int64_t num_experts = 0;       // E (global); E % R == 0
  SwigluParams swiglu;

  std::vector<Tensor<Real>> x_TD;            // [R] x [T, D]   BF16 values
  std::vector<std::vector<int32_t>> ids_TK;  // [R] x T*K      in [-1, E); -1 = disabled route
  std::vector<Tensor<Real>> scores_TK;       // [R] x [T, K]   FP32 (or BF16) values
  Tensor<Real> w13_EFD;                      // [E, 2F, D]     rows 0..F-1 gate, F..2F-1 up; BF16
  Tensor<Real> w2_EDF;                       // [E, D, F]      BF16

  int64_t num_local_experts() const { return num_ranks > 0 ? num_experts / num_ranks : 0; }
  int64_t tokens(int64_t rank) const { return x_TD.at(static_cast<std::size_t>(rank)).rows(); }

  // Host-side checks (kInvalidValue, naming the field): dims >= 1, E % R == 0, one x/ids/scores
  // per rank, x [T, D], ids T*K, scores [T, K], weights [E, 2F, D] / [E, D, F]; for the
  // pipeline model (float) also that x and the weights hold BF16-representable values.
  // The device-side conditions (equal T on every rank, ids in [-1, E)) are checked by the
  // forward itself, as the GPU does, with the errors documented in oracle.h.
  void validate() const;

  // This rank's weight slices: [E_local, 2F, D] and [E_local, D, F].
  Tensor<Real> local_w13(int64_t rank) const;
  Tensor<Real> local_w2(int64_t rank) const;

  // The same global problem on `new_num_ranks` ranks: all ranks' tokens concatenated in rank
  // order, then cut into equal consecutive pieces. Needs E % new_num_ranks == 0 and the total
  // token count divisible by new_num_ranks.
  BasicProblem resplit(int64_t new_num_ranks) const;
};

using Problem = BasicProblem<float>;
using ExactProblem = BasicProblem<double>;

// Element-wise conversion of every tensor (float -> double is exact).
template <class To, class From>
BasicProblem<To> problem_cast(const BasicProblem<From>& p) {
  BasicProblem<To> q;
  q.num_ranks = p.num_ranks;
  q.hidden_dim = p.hidden_dim;
  q.intermediate_dim = p.intermediate_dim;
  q.top_k = p.top_k;
  q.num_experts = p.num_experts;
  q.swiglu = p.swiglu;
  for (const auto& t : p.x_TD) q.x_TD.push_back(tensor_cast<To>(t));
  q.ids_TK = p.ids_TK;
  for (const auto& t : p.scores_TK) q.scores_TK.push_back(tensor_cast<To>(t));
  q.w13_EFD = tensor_cast<To>(p.w13_EFD);
  q.w2_EDF = tensor_cast<To>(p.w2_EDF);
  return q;
}

// Concatenate per-rank tensors along their leading dimension (e.g. per-rank out_TD into the
// global [R*T, D], per-rank dW13 [E_local, 2F, D] into [E, 2F, D]).
template <class Real>
Tensor<Real> concat_rows(const std::vector<Tensor<Real>>& parts) {
  Tensor<Real> out;
  if (parts.empty()) return out;
  out.shape = parts[0].shape;
  out.shape[0] = 0;
  for (const auto& p : parts) {
    DMOE_CHECK_ARG(p.row_size() == parts[0].row_size() && p.dims() == parts[0].dims(),
                   "concat_rows: parts must share their trailing shape");
    out.shape[0] += p.rows();
    out.data.insert(out.data.end(), p.data.begin(), p.data.end());
  }
  return out;
}

// Quantization model of the expert GEMMs (docs/oracle.md, "Quantized paths").
enum class Quantization {
  kNone,          // BF16 pipeline
  kMXFP8,         // MXFP8 E4M3 training: x/h2/grad_h3/grad_h1 1x32 row + 32x1 column, weights 32x32 tiles
  kNVFP4,         // NVFP4 inference: weights per-expert global scale, activations per token at the source
  kFP8Blockwise,  // FP8 E4M3 blockwise: activations 1x128, weights 128x128
};
const char* to_string(Quantization q);

// Which values the MXFP8 training layer's GEMM operands hold (kMXFP8 only; docs/formats.md "MXFP8
// training operands"). Shared scales are one E8M0 code per 1x128 row block / 128x1 column block along
// tokens (restarting at each expert), the largest of the block's four 1x32 / 32x1 codes.
enum class Mxfp8TrainingOperands {
  kExactForward,  // FPROP on upstream's exact 1x32 rows; DGRAD / WGRAD operands re-rounded at shared scales
                  // (the per-32 FPROPs: DMOE_MXFP8_FPROP_PER32=1, Mega training, and inference layers,
                  // which only run the forward)
  kReround,       // every operand: exact 1x32 / 32x1 blocks re-rounded at the shared scale per 128
                  // (G149-G151; DMOE_MXFP8_REROUND=1)
  kSharedOnce,    // every operand quantized once at the shared scale per 128 (G152; the layer's default)
};

// Fused post-expert RMSNorm (upstream §2.7): per route row n = xg / sqrt(mean(xg^2) + eps) with
// xg = (gamma + gain_center) * h3 when gamma is given (inference only), else xg = h3.
struct RMSNormSpec {
  double eps = 1e-6;
  std::vector<float> weight_D;  // optional gamma [D], BF16 values; empty = scalarless
  double gain_center = 0.0;
};

struct ForwardOptions {
  // Per-expert row padding of the expert-major buffers (1, 8, 16, 64, 128, ...). Padding rows are
  // zero in every oracle buffer and contribute nothing.
  int64_t row_alignment = 1;
  // Receive-row capacity of every rank (the planner's total_scratch_capacity_rows). A rank that
  // needs more rows (sum of padded expert counts) fails with ErrorCode::kRuntime.
  std::optional<int64_t> receive_capacity_rows;
  // Clip statistics threshold (strict '>'); the counters are always computed.
  double swiglu_clip_limit = kSwigluClampLimitDefault;
  std::optional<RMSNormSpec> rmsnorm;
  Quantization quantization = Quantization::kNone;
  // kMXFP8: the rule the layer being modelled quantizes its activation operands by (the backward
  // reads it from the forward's options). The default, exact FPROP rows, also models inference.
  Mxfp8TrainingOperands mxfp8_training_operands = Mxfp8TrainingOperands::kExactForward;

  void validate(int64_t hidden_dim) const;
};

struct BackwardOptions {
  DType wgrad_dtype = DType::kBFloat16;  // kBFloat16 or kFloat32
  // When non-empty (one tensor per rank, [E_local, 2F, D] / [E_local, D, F], values of
  // wgrad_dtype), WGRAD adds into these: result = round(FP32(prev) + FP32(gemm)).
  std::vector<TensorF> accumulate_dw13;
  std::vector<TensorF> accumulate_dw2;
};

}  // namespace dist_moe::reference
