// The CPU oracle of the routed-experts layer: forward and backward for R simulated
// expert-parallel ranks in one process, with every intermediate tensor of the GPU pipeline.
//
//   #include "reference/oracle.h"
//   reference::Problem p = reference::make_random_problem(spec);   // or fill one by hand
//   auto fwd = reference::forward(p, opts);                         // per rank: routing, x_gathered, h1..h3, out
//   auto bwd = reference::backward(p, fwd, grad_out_per_rank);      // per rank: every gradient, dW13, dW2
//
// Semantics, rounding points and accumulation order: docs/oracle.md and stages.h. In short, the
// float model is the GPU pipeline (BF16 x_gathered, h1, h2, h3, grad_h3, grad_h2, grad_h1,
// grad_x routes; FP32 top-k reductions in k order; GEMM sums in double rounded once to FP32),
// and the double model (ExactProblem) is the same computation with no rounding at all.
//
// Expert-parallel flow modelled, per call:
//   forward:  every rank publishes x and ids -> every rank builds routing for its experts from all
//             ranks' ids (T equality, id range, capacity checks) -> gathers x rows -> W13 -> SwiGLU
//             (+ clip stats) -> W2 -> scatters h3 route rows into the owners' combine buffers ->
//             every owner reduces its [T, K] routes (plain or RMSNorm postprocess).
//   backward: every owner computes grad_h3 per route (+ grad_scores) -> every expert rank gathers
//             them in expert-major order -> W2 DGRAD, W2 WGRAD -> SwiGLU backward -> W13 DGRAD,
//             W13 WGRAD -> scatters input-gradient routes to the owners -> owners reduce over k.
// Nothing depends on the rank count except which rank holds what: the same global problem gives
// bit-identical results for any R (tested).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "reference/compare.h"
#include "reference/problem.h"
#include "reference/quant.h"
#include "reference/random.h"
#include "reference/routing.h"
#include "reference/stages.h"
#include "reference/tensor.h"

namespace dist_moe::reference {

// Dequantized GEMM operands of the quantized paths (empty tensors in the BF16 path).
template <class Real>
struct QuantizedOperands {
  Tensor<Real> w13_EFD;         // [E_local, 2F, D] weights as the W13 FPROP/DGRAD GEMMs see them
  Tensor<Real> w2_EDF;          // [E_local, D, F]
  Tensor<Real> x_row_MD;        // W13 FPROP A operand (blocks along D)
  Tensor<Real> x_col_MD;        // W13 WGRAD operand (blocks along rows), MXFP8/FP8-blockwise training
  Tensor<Real> h2_row_MF;       // W2 FPROP A operand
  Tensor<Real> h2_col_MF;       // W2 WGRAD operand
  Tensor<Real> grad_h3_row_MD;  // W2 DGRAD A operand
  Tensor<Real> grad_h3_col_MD;  // W2 WGRAD operand
  Tensor<Real> grad_h1_row_M2F; // W13 DGRAD A operand
  Tensor<Real> grad_h1_col_M2F; // W13 WGRAD operand
};

template <class Real>
struct RankForward {
  RankRouting routing;  // this rank's experts (expert side) and its own routes (owner side)
  // Expert side: this rank's experts, expert-major rows, padding rows zero.
  Tensor<Real> x_gathered_MD;  // [M, D]  BF16 copy of the source rows
  Tensor<Real> h1_M2F;         // [M, 2F] BF16 [gate | up]
  Tensor<Real> h2_MF;          // [M, F]  BF16 SwiGLU(h1)
  Tensor<Real> h3_MD;          // [M, D]  BF16 expert output
  std::array<int64_t, 3> clip_stats{0, 0, 0};  // upstream §2.6 over this rank's experts' valid rows
  // Owner side: this rank's tokens.
  Tensor<Real> combine_TKD;  // [T*K, D] h3 route rows received from the expert ranks; -1 routes zero
  Tensor<Real> rstd_TK;      // [T, K]   FP32, RMSNorm postprocess only (0 for -1 routes)
  Tensor<Real> out_TD;       // [T, D]   BF16 output
  QuantizedOperands<Real> quantized;
};

template <class Real>
struct BasicForwardResult {
  ForwardOptions options;  // as given (backward reads rmsnorm and quantization from here)
  std::vector<RankForward<Real>> ranks;

  std::vector<RankRouting> routing() const;  // every rank's routing
  Tensor<Real> global_out_TD() const;        // all ranks' out_TD concatenated in rank order
};

template <class Real>
struct RankBackward {
  // Owner side.
  Tensor<Real> grad_h3_TKD;     // [T*K, D] BF16 route gradients published for the expert ranks
  Tensor<Real> grad_scores_TK;  // [T, K]   FP32; exactly 0 for -1 routes
  Tensor<Real> grad_x_TKD;      // [T*K, D] BF16 per-route input gradients received back
  Tensor<Real> grad_x_TD;       // [T, D]   BF16 sum over k (FP32, k order)
  // Expert side (expert-major rows, padding rows zero).
  Tensor<Real> grad_h3_MD;       // [M, D]  gathered grad_h3
  Tensor<Real> grad_h2_MF;       // [M, F]  BF16 grad_h3 . W2
  Tensor<Real> grad_h1_M2F;      // [M, 2F] BF16 SwiGLU backward
  Tensor<Real> grad_x_route_MD;  // [M, D]  BF16 grad_h1 . W13
  Tensor<Real> dw13_EFD;         // [E_local, 2F, D] wgrad_dtype values (this rank's experts)
  Tensor<Real> dw2_EDF;          // [E_local, D, F]
  QuantizedOperands<Real> quantized;  // the backward operands (grad_h3_*, grad_h1_*) filled
};

template <class Real>
struct BasicBackwardResult {
  std::vector<RankBackward<Real>> ranks;
  Tensor<Real> global_grad_x_TD() const;       // [R*T, D]
  Tensor<Real> global_grad_scores_TK() const;  // [R*T, K]
  Tensor<Real> global_dw13_EFD() const;        // [E, 2F, D]
  Tensor<Real> global_dw2_EDF() const;         // [E, D, F]
};

using ForwardResult = BasicForwardResult<float>;
using BackwardResult = BasicBackwardResult<float>;
using ExactForwardResult = BasicForwardResult<double>;
using ExactBackwardResult = BasicBackwardResult<double>;

// Forward of the whole layer on all simulated ranks. Errors (dist_moe::Error): problem.validate()
// and options.validate() (kInvalidValue), then build_routing's (ids out of [-1, E): kInvalidValue;
// T differs between ranks: kRuntime; receive capacity exceeded: kRuntime). Quantization other than
// kNone needs the float model.
template <class Real>
BasicForwardResult<Real> forward(const BasicProblem<Real>& problem, const ForwardOptions& options = {});

// Backward from per-rank output gradients grad_out_TD[r] ([T, D], BF16 values in the float model).
// `fwd` must come from forward() on the same problem. NVFP4 (inference only) and RMSNorm with a
// gamma (inference only) are rejected with kInvalidValue.
template <class Real>
BasicBackwardResult<Real> backward(const BasicProblem<Real>& problem, const BasicForwardResult<Real>& fwd,
                                   const std::vector<Tensor<Real>>& grad_out_TD, const BackwardOptions& options = {});

}  // namespace dist_moe::reference
