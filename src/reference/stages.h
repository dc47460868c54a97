// The oracle's stage functions: one per GPU pipeline stage, so a kernel test can feed a stage the
// exact inputs its kernel saw and get the oracle's output for just that stage.
//
// Numeric model (docs/oracle.md has the full story):
//  * Real = float  -> the GPU pipeline. BF16 tensors are floats holding BF16 values; every stage
//    rounds its output where the GPU stores BF16 (round-to-nearest-even).
//  * Real = double -> the exact model: the same formulas in double, no rounding anywhere.
//  * Every dot product (GEMM element, WGRAD element, <g, h3>, sum of squares) forms each product
//    in double (exact for float inputs) and sums in double in ascending contraction index (WGRAD:
//    ascending expert-major row). The pipeline then rounds the double sum once to FP32 (the value
//    an FP32-accumulating tensor core approximates) and, where the GPU stores BF16, once more to
//    BF16. Why double: the GPU's FP32 summation order inside a wgmma is not specified, so no FP32
//    order would be "the" order; a (nearly) exact sum is the best-defined target, differs from
//    any FP32-accumulated GEMM only by that GEMM's own accumulation error, and is independent of
//    the rank count (the contraction never crosses ranks).
//  * The top-k reductions are FP32 in k order, exactly as the reduce kernels do them:
//    out = BF16(fmaf(s_K-1, h_K-1, ... fmaf(s_0, h_0, 0.0f))) over the valid routes, and
//    grad_x = BF16(((0.0f + g_0) + g_1) + ...).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/dtype.h"
#include "reference/problem.h"
#include "reference/routing.h"
#include "reference/tensor.h"

namespace dist_moe::reference {

// Rounding of the numeric model.
template <class Real>
struct Numerics;
template <>
struct Numerics<float> {
  static constexpr bool kPipeline = true;
  static float bf16(float v) { return numeric::round_bf16(v); }  // a BF16 store
  static float fp32(double v) { return static_cast<float>(v); }  // FP32 result of a double sum
};
template <>
struct Numerics<double> {
  static constexpr bool kPipeline = false;
  static double bf16(double v) { return v; }
  static double fp32(double v) { return v; }
};

// sum_i a[i] * b[i * stride_b], products and sum in double, ascending i.
template <class Real>
double dot_acc(const Real* a, const Real* b, int64_t n, int64_t stride_b = 1) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * static_cast<double>(b[i * stride_b]);
  return acc;
}

// ---- SwiGLU (upstream §2.5), one element -------------------------------------------------------
// Pipeline (float): all math in FP32 with sigmoid(x) = 1.0f / (1.0f + expf(-x)).
//   plain:   z = (g * s) * u,                    s = sigmoid(g)
//   clamped: z = (gc * s) * (uc + 1),            gc = min(g, L), uc = clamp(u, -L, L), s = sigmoid(alpha*gc)
// Backward (dz = upstream gradient):
//   plain:   dg = (dz * u) * (s + (g * s) * (1 - s)),   du = (dz * g) * s
//   clamped: dg = g <= L ? (dz * (uc + 1)) * (s + ((alpha * gc) * s) * (1 - s)) : 0
//            du = -L <= u <= L ? (dz * gc) * s : 0     (zero strictly outside the clamp)
template <class Real>
Real swiglu(Real g, Real u, const SwigluParams& p);
template <class Real>
void swiglu_backward(Real g, Real u, Real dz, const SwigluParams& p, Real& dg, Real& du);

// ---- dispatch / combine data movement (expert side <-> owner side) -----------------------------
// x_gathered[m] = x_TD[src_rank][token] for valid rows, zero for padding rows. [M, D]
template <class Real>
Tensor<Real> gather_token_rows(const RankRouting& rt, const std::vector<Tensor<Real>>& x_TD_per_rank);
// rows[m] = buf_TKD[src_rank][token*K + k] for valid rows, zero for padding rows. [M, D]
// (the backward's grad_h3 gather through the forward scatter table)
template <class Real>
Tensor<Real> gather_route_rows(const RankRouting& rt, const std::vector<Tensor<Real>>& buf_TKD_per_rank);
// Owner buffers [T*K, D] per rank: slot token*K + k receives the row that computed that route;
// slots of -1 routes are zero. (h3 into combine; input gradients into dispatch.)
template <class Real>
std::vector<Tensor<Real>> scatter_route_rows(const std::vector<RankRouting>& routing,
                                             const std::vector<Tensor<Real>>& rows_MD_per_rank,
                                             int64_t width);

// ---- grouped GEMMs over a rank's expert-major rows (padding rows give zero rows) ---------------
// FPROP: C[m, n] = BF16(FP32(sum_k A[m, k] * W[e(m), n, k])).   A [M, Kc], W [E_local, N, Kc] -> [M, N]
template <class Real>
Tensor<Real> grouped_gemm_nt(const RankRouting& rt, const Tensor<Real>& A_MK, const Tensor<Real>& W_ENK);
// DGRAD: C[m, k] = BF16(FP32(sum_n A[m, n] * W[e(m), n, k])).   A [M, N], W [E_local, N, Kc] -> [M, Kc]
template <class Real>
Tensor<Real> grouped_gemm_nn(const RankRouting& rt, const Tensor<Real>& A_MN, const Tensor<Real>& W_ENK);
// WGRAD: G[e, n, k] = FP32(sum over e's valid rows m, ascending, of A[m, n] * B[m, k]).
//   A [M, N], B [M, Kc] -> [E_local, N, Kc], not yet stored (see store_wgrad).
template <class Real>
Tensor<Real> grouped_wgrad(const RankRouting& rt, const Tensor<Real>& A_MN, const Tensor<Real>& B_MK);
// WGRAD store: dtype kBFloat16 -> BF16(gemm) or BF16(FP32(prev) + gemm); kFloat32 -> gemm or
// prev + gemm in FP32. `prev` may be null (no accumulation). The exact model adds without rounding.
template <class Real>
Tensor<Real> store_wgrad(const Tensor<Real>& gemm, const Tensor<Real>* prev, DType dtype);

// ---- SwiGLU over rows --------------------------------------------------------------------------
// h2[m, f] = BF16(swiglu(h1[m, f], h1[m, F + f])); padding rows zero.   [M, 2F] -> [M, F]
template <class Real>
Tensor<Real> swiglu_rows(const RankRouting& rt, const Tensor<Real>& h1_M2F, const SwigluParams& p);
// grad_h1[m] = BF16([dg | du]) from BF16 h1 and grad_h2; padding rows zero.   -> [M, 2F]
template <class Real>
Tensor<Real> swiglu_backward_rows(const RankRouting& rt, const Tensor<Real>& h1_M2F,
                                  const Tensor<Real>& grad_h2_MF, const SwigluParams& p);
// Clip statistics (upstream §2.6) over this rank's valid rows, pre-activation h1 values:
// [0] #gate > limit (signed, strict), [1] #|up| > limit (strict), [2] valid rows * F.
// (The GPU keeps them as FP32 counters: exact while below 2^24.)
template <class Real>
std::array<int64_t, 3> clip_stats(const RankRouting& rt, const Tensor<Real>& h1_M2F, double limit);

// ---- owner-side top-k reductions ---------------------------------------------------------------
// ids: this rank's T*K ids; scores [T, K]; route buffers [T*K, D]. -1 routes are skipped
// everywhere (their h3 slot is never read, their gradients are exactly zero).
// out[t] = BF16(FP32 k-ordered fmaf sum of s[t,k] * h3[t,k]).     -> [T, D]
template <class Real>
Tensor<Real> topk_reduce(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                         const Tensor<Real>& scores_TK);
// The rank-partials order (EpGroup::combine with CombineAlgorithm::kRankPartials): experts
// [r * experts_per_rank, (r + 1) * experts_per_rank) belong to rank r. Per token, for each rank r in
// order owning at least one of its routes: P_r = FP32 k-ordered fmaf sum of s * h3 over those
// routes, from 0; acc = 0, acc = FP32(acc + P_r) in rank order; out = BF16(acc). With every expert
// on one rank it is topk_reduce bit for bit.                       -> [T, D]
template <class Real>
Tensor<Real> topk_reduce_rank_partials(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                                       const Tensor<Real>& scores_TK, int64_t experts_per_rank);
// grad_h3[t,k] = BF16(FP32(s[t,k] * g[t, d])), grad_scores[t,k] = FP32(sum_d g[t,d] * h3[t,k,d]).
template <class Real>
void topk_reduce_backward(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                          const Tensor<Real>& scores_TK, const Tensor<Real>& grad_out_TD,
                          Tensor<Real>& grad_h3_TKD, Tensor<Real>& grad_scores_TK);
// Fused RMSNorm postprocess (upstream §2.7). Per valid route, in FP32:
//   xg[d] = gamma ? (FP32(gamma[d]) + FP32(gain_center)) * h3[d] : h3[d]
//   ms = FP32(sum_d xg[d]^2 / D)  (sum in double)   rstd = 1.0f / sqrtf(ms + FP32(eps))
//   n[d] = xg[d] * rstd,     out[t] = BF16(k-ordered fmaf sum of s * n);   rstd_TK (0 for -1 routes)
template <class Real>
Tensor<Real> rmsnorm_topk_reduce(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                                 const Tensor<Real>& scores_TK, const RMSNormSpec& spec, Tensor<Real>& rstd_TK);
// Backward (scalarless only; gamma is inference-only and throws kInvalidValue), per valid route:
//   gn[d] = s * g[d];  grad_s = FP32(sum_d g[d] * n[d]);  c = FP32(sum_d gn[d] * n[d] / D)
//   grad_h3[d] = BF16(rstd * (gn[d] - n[d] * c)),   n[d] = h3[d] * rstd as in the forward.
template <class Real>
void rmsnorm_topk_reduce_backward(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                                  const Tensor<Real>& scores_TK, const Tensor<Real>& rstd_TK,
                                  const Tensor<Real>& grad_out_TD, const RMSNormSpec& spec,
                                  Tensor<Real>& grad_h3_TKD, Tensor<Real>& grad_scores_TK);
// grad_x[t] = BF16(((0.0f + gx[t,k0]) + gx[t,k1]) + ...) over the valid routes in k order.
template <class Real>
Tensor<Real> reduce_from_topk(const Tensor<Real>& grad_x_TKD, const std::vector<int32_t>& ids_TK,
                              int64_t top_k);

}  // namespace dist_moe::reference
