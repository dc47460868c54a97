#include "reference/stages.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "dist_moe/error.h"
#include "reference/parallel.h"

namespace dist_moe::reference {
namespace {

template <class Real>
Real sigmoid(Real x) {
  return Real(1) / (Real(1) + std::exp(-x));
}

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

void check_rows(const RankRouting& rt, const char* name, int64_t rows) {
  DMOE_CHECK_ARG(rows == rt.num_rows(), name, " has ", rows, " rows but rank ", rt.rank,
                 "'s routing has M=", rt.num_rows());
}

// Shape checks of an owner-side [T*K, D] buffer, ids and scores.
template <class Real>
void check_owner(const Tensor<Real>& buf_TKD, const std::vector<int32_t>& ids_TK, const Tensor<Real>& scores_TK) {
  DMOE_CHECK_ARG(scores_TK.dims() == 2, "scores_TK must be [T, K]");
  const int64_t TK = scores_TK.numel();
  DMOE_CHECK_ARG(static_cast<int64_t>(ids_TK.size()) == TK, "ids_TK has ", ids_TK.size(),
                 " entries, scores_TK has ", TK);
  DMOE_CHECK_ARG(buf_TKD.dims() == 2 && buf_TKD.rows() == TK, "route buffer must be [T*K, D] with T*K=", TK);
}

}  // namespace

// ---- SwiGLU ------------------------------------------------------------------------------------

template <class Real>
Real swiglu(Real g, Real u, const SwigluParams& p) {
  if (p.activation == Activation::kSwiGLU) {
    const Real s = sigmoid(g);
    return (g * s) * u;
  }
  const Real L = static_cast<Real>(p.limit);
  const Real alpha = static_cast<Real>(p.alpha);
  const Real gc = std::min(g, L);
  const Real uc = std::min(std::max(u, -L), L);
  const Real s = sigmoid(alpha * gc);
  return (gc * s) * (uc + Real(1));
}

template <class Real>
void swiglu_backward(Real g, Real u, Real dz, const SwigluParams& p, Real& dg, Real& du) {
  if (p.activation == Activation::kSwiGLU) {
    const Real s = sigmoid(g);
    dg = (dz * u) * (s + (g * s) * (Real(1) - s));
    du = (dz * g) * s;
    return;
  }
  const Real L = static_cast<Real>(p.limit);
  const Real alpha = static_cast<Real>(p.alpha);
  const Real gc = std::min(g, L);
  const Real uc = std::min(std::max(u, -L), L);
  const Real s = sigmoid(alpha * gc);
  dg = g <= L ? (dz * (uc + Real(1))) * (s + ((alpha * gc) * s) * (Real(1) - s)) : Real(0);
  du = (u >= -L && u <= L) ? (dz * gc) * s : Real(0);
}

// ---- data movement -----------------------------------------------------------------------------

template <class Real>
Tensor<Real> gather_token_rows(const RankRouting& rt, const std::vector<Tensor<Real>>& x_TD_per_rank) {
  DMOE_CHECK_ARG(static_cast<int64_t>(x_TD_per_rank.size()) == rt.num_ranks, "gather needs one x_TD per rank");
  const int64_t D = x_TD_per_rank[0].row_size();
  Tensor<Real> out({rt.num_rows(), D});
  for (int64_t m = 0; m < rt.num_rows(); ++m) {
    const RouteRef& ref = rt.rows[at(m)];
    if (ref.is_padding()) continue;
    const Tensor<Real>& src = x_TD_per_rank[at(ref.src_rank)];
    DMOE_CHECK_ARG(src.row_size() == D && ref.token < src.rows(), "x_TD of rank ", ref.src_rank,
                   " does not match the routing");
    std::copy(src.row(ref.token), src.row(ref.token) + D, out.row(m));
  }
  return out;
}

template <class Real>
Tensor<Real> gather_route_rows(const RankRouting& rt, const std::vector<Tensor<Real>>& buf_TKD_per_rank) {
  DMOE_CHECK_ARG(static_cast<int64_t>(buf_TKD_per_rank.size()) == rt.num_ranks,
                 "gather needs one route buffer per rank");
  const int64_t D = buf_TKD_per_rank[0].row_size();
  Tensor<Real> out({rt.num_rows(), D});
  for (int64_t m = 0; m < rt.num_rows(); ++m) {
    const RouteRef& ref = rt.rows[at(m)];
    if (ref.is_padding()) continue;
    const Tensor<Real>& src = buf_TKD_per_rank[at(ref.src_rank)];
    const int64_t slot = static_cast<int64_t>(ref.token) * rt.top_k + ref.k;
    DMOE_CHECK_ARG(src.row_size() == D && slot < src.rows(), "route buffer of rank ", ref.src_rank,
                   " does not match the routing");
    std::copy(src.row(slot), src.row(slot) + D, out.row(m));
  }
  return out;
}

template <class Real>
std::vector<Tensor<Real>> scatter_route_rows(const std::vector<RankRouting>& routing,
                                             const std::vector<Tensor<Real>>& rows_MD_per_rank, int64_t width) {
  DMOE_CHECK_ARG(routing.size() == rows_MD_per_rank.size(), "scatter needs one row buffer per rank");
  std::vector<Tensor<Real>> owners;
  for (const RankRouting& rt : routing) owners.emplace_back(std::vector<int64_t>{rt.tokens * rt.top_k, width});
  for (std::size_t r = 0; r < routing.size(); ++r) {
    const RankRouting& rt = routing[r];
    const Tensor<Real>& rows = rows_MD_per_rank[r];
    check_rows(rt, "scatter source", rows.rows());
    DMOE_CHECK_ARG(rows.row_size() == width, "scatter source rows must have ", width, " columns");
    for (int64_t m = 0; m < rt.num_rows(); ++m) {
      const RouteRef& ref = rt.rows[at(m)];
      if (ref.is_padding()) continue;
      Real* dst = owners[at(ref.src_rank)].row(static_cast<int64_t>(ref.token) * rt.top_k + ref.k);
      std::copy(rows.row(m), rows.row(m) + width, dst);
    }
  }
  return owners;
}

// ---- grouped GEMMs -----------------------------------------------------------------------------

template <class Real>
Tensor<Real> grouped_gemm_nt(const RankRouting& rt, const Tensor<Real>& A_MK, const Tensor<Real>& W_ENK) {
  DMOE_CHECK_ARG(W_ENK.dims() == 3 && W_ENK.size(0) == rt.num_local_experts, "W must be [E_local, N, K]");
  const int64_t N = W_ENK.size(1), Kc = W_ENK.size(2);
  check_rows(rt, "A", A_MK.rows());
  DMOE_CHECK_ARG(A_MK.row_size() == Kc, "A has ", A_MK.row_size(), " columns, W's contraction dim is ", Kc);
  Tensor<Real> C({rt.num_rows(), N});
  parallel_for(rt.num_rows(), [&](int64_t m) {
    const RouteRef& ref = rt.rows[at(m)];
    if (ref.is_padding()) return;
    const Real* a = A_MK.row(m);
    const Real* w = W_ENK.row(ref.local_expert);
    Real* c = C.row(m);
    // dot_acc(a, w + n * Kc, Kc) for four n at a time: four independent sums, each in ascending k (the
    // same bits; one dependent chain of double additions at a time ran at a quarter of the adder's rate).
    int64_t n = 0;
    for (; n + 4 <= N; n += 4) {
      const Real *w0 = w + n * Kc, *w1 = w0 + Kc, *w2 = w1 + Kc, *w3 = w2 + Kc;
      double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
      for (int64_t k = 0; k < Kc; ++k) {
        const double ak = static_cast<double>(a[k]);
        s0 += ak * static_cast<double>(w0[k]);
        s1 += ak * static_cast<double>(w1[k]);
        s2 += ak * static_cast<double>(w2[k]);
        s3 += ak * static_cast<double>(w3[k]);
      }
      const double sums[4] = {s0, s1, s2, s3};
      for (int i = 0; i < 4; ++i) c[n + i] = Numerics<Real>::bf16(Numerics<Real>::fp32(sums[i]));
    }
    for (; n < N; ++n) c[n] = Numerics<Real>::bf16(Numerics<Real>::fp32(dot_acc(a, w + n * Kc, Kc)));
  });
  return C;
}

template <class Real>
Tensor<Real> grouped_gemm_nn(const RankRouting& rt, const Tensor<Real>& A_MN, const Tensor<Real>& W_ENK) {
  DMOE_CHECK_ARG(W_ENK.dims() == 3 && W_ENK.size(0) == rt.num_local_experts, "W must be [E_local, N, K]");
  const int64_t N = W_ENK.size(1), Kc = W_ENK.size(2);
  check_rows(rt, "A", A_MN.rows());
  DMOE_CHECK_ARG(A_MN.row_size() == N, "A has ", A_MN.row_size(), " columns, W's contraction dim is ", N);
  Tensor<Real> C({rt.num_rows(), Kc});
  parallel_for(rt.num_rows(), [&](int64_t m) {
    const RouteRef& ref = rt.rows[at(m)];
    if (ref.is_padding()) return;
    const Real* a = A_MN.row(m);
    const Real* w = W_ENK.row(ref.local_expert);
    // dot_acc(a, w + k, N, Kc) for every k at once, walking W's rows in order (the same products and
    // additions per element, ascending n: the same bits, without a stride of Kc per product).
    std::vector<double> acc(at(Kc), 0.0);
    for (int64_t n = 0; n < N; ++n) {
      const double an = static_cast<double>(a[n]);
      const Real* w_row = w + n * Kc;
      for (int64_t k = 0; k < Kc; ++k) acc[at(k)] += an * static_cast<double>(w_row[k]);
    }
    Real* c = C.row(m);
    for (int64_t k = 0; k < Kc; ++k) c[k] = Numerics<Real>::bf16(Numerics<Real>::fp32(acc[at(k)]));
  });
  return C;
}

template <class Real>
Tensor<Real> grouped_wgrad(const RankRouting& rt, const Tensor<Real>& A_MN, const Tensor<Real>& B_MK) {
  check_rows(rt, "A", A_MN.rows());
  check_rows(rt, "B", B_MK.rows());
  const int64_t N = A_MN.row_size(), Kc = B_MK.row_size();
  Tensor<Real> G({rt.num_local_experts, N, Kc});
  // One task per (expert, row n of its gradient); every element sums over the expert's rows in
  // ascending row order.
  parallel_for(rt.num_local_experts * N, [&](int64_t task) {
    const int64_t e = task / N, n = task % N;
    std::vector<double> acc(at(Kc), 0.0);
    for (int64_t m = rt.expert_offsets[at(e)]; m < rt.expert_offsets[at(e + 1)]; ++m) {
      if (rt.rows[at(m)].is_padding()) continue;
      const double an = static_cast<double>(A_MN.row(m)[n]);
      const Real* b = B_MK.row(m);
      for (int64_t k = 0; k < Kc; ++k) acc[at(k)] += an * static_cast<double>(b[k]);
    }
    Real* g = G.row(e) + n * Kc;
    for (int64_t k = 0; k < Kc; ++k) g[k] = Numerics<Real>::fp32(acc[at(k)]);
  });
  return G;
}

template <class Real>
Tensor<Real> store_wgrad(const Tensor<Real>& gemm, const Tensor<Real>* prev, DType dtype) {
  DMOE_CHECK_ARG(dtype == DType::kBFloat16 || dtype == DType::kFloat32,
                 "wgrad_dtype must be bfloat16 or float32, got ", to_string(dtype));
  if (prev) {
    DMOE_CHECK_ARG(prev->shape == gemm.shape, "the WGRAD accumulation buffer has the wrong shape");
  }
  Tensor<Real> out(gemm.shape);
  for (std::size_t i = 0; i < gemm.data.size(); ++i) {
    Real v = gemm.data[i];
    if (prev) v = prev->data[i] + v;  // FP32 add of the FP32 GEMM result
    out.data[i] = dtype == DType::kBFloat16 ? Numerics<Real>::bf16(v) : v;
  }
  return out;
}

// ---- SwiGLU over rows --------------------------------------------------------------------------

template <class Real>
Tensor<Real> swiglu_rows(const RankRouting& rt, const Tensor<Real>& h1_M2F, const SwigluParams& p) {
  check_rows(rt, "h1", h1_M2F.rows());
  DMOE_CHECK_ARG(h1_M2F.row_size() % 2 == 0, "h1 must be [M, 2F]");
  const int64_t F = h1_M2F.row_size() / 2;
  Tensor<Real> h2({rt.num_rows(), F});
  for (int64_t m = 0; m < rt.num_rows(); ++m) {
    if (rt.rows[at(m)].is_padding()) continue;
    const Real* h = h1_M2F.row(m);
    Real* z = h2.row(m);
    for (int64_t f = 0; f < F; ++f) z[f] = Numerics<Real>::bf16(swiglu(h[f], h[F + f], p));
  }
  return h2;
}

template <class Real>
Tensor<Real> swiglu_backward_rows(const RankRouting& rt, const Tensor<Real>& h1_M2F, const Tensor<Real>& grad_h2_MF,
                                  const SwigluParams& p) {
  check_rows(rt, "h1", h1_M2F.rows());
  check_rows(rt, "grad_h2", grad_h2_MF.rows());
  const int64_t F = grad_h2_MF.row_size();
  DMOE_CHECK_ARG(h1_M2F.row_size() == 2 * F, "h1 must be [M, 2F] with grad_h2 [M, F]");
  Tensor<Real> grad_h1({rt.num_rows(), 2 * F});
  for (int64_t m = 0; m < rt.num_rows(); ++m) {
    if (rt.rows[at(m)].is_padding()) continue;
    const Real* h = h1_M2F.row(m);
    const Real* dz = grad_h2_MF.row(m);
    Real* d = grad_h1.row(m);
    for (int64_t f = 0; f < F; ++f) {
      Real dg, du;
      swiglu_backward(h[f], h[F + f], dz[f], p, dg, du);
      d[f] = Numerics<Real>::bf16(dg);
      d[F + f] = Numerics<Real>::bf16(du);
    }
  }
  return grad_h1;
}

template <class Real>
std::array<int64_t, 3> clip_stats(const RankRouting& rt, const Tensor<Real>& h1_M2F, double limit) {
  check_rows(rt, "h1", h1_M2F.rows());
  const int64_t F = h1_M2F.row_size() / 2;
  const Real L = static_cast<Real>(limit);
  std::array<int64_t, 3> stats{0, 0, 0};
  for (int64_t m = 0; m < rt.num_rows(); ++m) {
    if (rt.rows[at(m)].is_padding()) continue;
    const Real* h = h1_M2F.row(m);
    for (int64_t f = 0; f < F; ++f) {
      if (h[f] > L) ++stats[0];
      if (std::abs(h[F + f]) > L) ++stats[1];
    }
    stats[2] += F;
  }
  return stats;
}

// ---- owner-side reductions ---------------------------------------------------------------------

namespace {
// acc + s * h with the pipeline's single rounding (fmaf); exact model: plain double math.
inline float fma_acc(float s, float h, float acc) { return std::fma(s, h, acc); }
inline double fma_acc(double s, double h, double acc) { return acc + s * h; }
}  // namespace

template <class Real>
Tensor<Real> topk_reduce(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK, const Tensor<Real>& scores_TK) {
  check_owner(h3_TKD, ids_TK, scores_TK);
  const int64_t T = scores_TK.size(0), K = scores_TK.size(1), D = h3_TKD.row_size();
  Tensor<Real> out({T, D});
  std::vector<Real> acc(at(D));
  for (int64_t t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), Real(0));
    for (int64_t k = 0; k < K; ++k) {
      if (ids_TK[at(t * K + k)] < 0) continue;
      const Real s = scores_TK(t, k);
      const Real* h = h3_TKD.row(t * K + k);
      for (int64_t d = 0; d < D; ++d) acc[at(d)] = fma_acc(s, h[d], acc[at(d)]);
    }
    for (int64_t d = 0; d < D; ++d) out(t, d) = Numerics<Real>::bf16(acc[at(d)]);
  }
  return out;
}

template <class Real>
Tensor<Real> topk_reduce_rank_partials(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                                       const Tensor<Real>& scores_TK, int64_t experts_per_rank) {
  check_owner(h3_TKD, ids_TK, scores_TK);
  DMOE_CHECK_ARG(experts_per_rank >= 1, "experts_per_rank must be >= 1");
  const int64_t T = scores_TK.size(0), K = scores_TK.size(1), D = h3_TKD.row_size();
  int64_t ranks = 1;
  for (int32_t id : ids_TK) ranks = std::max<int64_t>(ranks, id / experts_per_rank + 1);
  Tensor<Real> out({T, D});
  std::vector<Real> acc(at(D)), part(at(D));
  for (int64_t t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), Real(0));
    for (int64_t r = 0; r < ranks; ++r) {
      bool any = false;
      std::fill(part.begin(), part.end(), Real(0));
      for (int64_t k = 0; k < K; ++k) {
        const int32_t id = ids_TK[at(t * K + k)];
        if (id < 0 || id / experts_per_rank != r) continue;
        any = true;
        const Real s = scores_TK(t, k);
        const Real* h = h3_TKD.row(t * K + k);
        for (int64_t d = 0; d < D; ++d) part[at(d)] = fma_acc(s, h[d], part[at(d)]);
      }
      if (!any) continue;
      for (int64_t d = 0; d < D; ++d) acc[at(d)] = static_cast<Real>(acc[at(d)] + part[at(d)]);
    }
    for (int64_t d = 0; d < D; ++d) out(t, d) = Numerics<Real>::bf16(acc[at(d)]);
  }
  return out;
}

template <class Real>
void topk_reduce_backward(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK, const Tensor<Real>& scores_TK,
                          const Tensor<Real>& grad_out_TD, Tensor<Real>& grad_h3_TKD, Tensor<Real>& grad_scores_TK) {
  check_owner(h3_TKD, ids_TK, scores_TK);
  const int64_t T = scores_TK.size(0), K = scores_TK.size(1), D = h3_TKD.row_size();
  DMOE_CHECK_ARG(grad_out_TD.rows() == T && grad_out_TD.row_size() == D, "grad_out must be [T, D]");
  grad_h3_TKD = Tensor<Real>({T * K, D});
  grad_scores_TK = Tensor<Real>({T, K});
  for (int64_t t = 0; t < T; ++t) {
    const Real* g = grad_out_TD.row(t);
    for (int64_t k = 0; k < K; ++k) {
      if (ids_TK[at(t * K + k)] < 0) continue;
      const Real s = scores_TK(t, k);
      Real* gh = grad_h3_TKD.row(t * K + k);
      for (int64_t d = 0; d < D; ++d) gh[d] = Numerics<Real>::bf16(s * g[d]);
      grad_scores_TK(t, k) = Numerics<Real>::fp32(dot_acc(g, h3_TKD.row(t * K + k), D));
    }
  }
}

template <class Real>
Tensor<Real> rmsnorm_topk_reduce(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                                 const Tensor<Real>& scores_TK, const RMSNormSpec& spec, Tensor<Real>& rstd_TK) {
  check_owner(h3_TKD, ids_TK, scores_TK);
  const int64_t T = scores_TK.size(0), K = scores_TK.size(1), D = h3_TKD.row_size();
  const bool gamma = !spec.weight_D.empty();
  DMOE_CHECK_ARG(!gamma || static_cast<int64_t>(spec.weight_D.size()) == D, "RMSNorm weight must have shape [D]");
  DMOE_CHECK_ARG(gamma || spec.gain_center == 0.0, "RMSNorm gain_center requires a weight");
  const Real eps = static_cast<Real>(spec.eps);
  const Real gc = static_cast<Real>(spec.gain_center);
  Tensor<Real> out({T, D});
  rstd_TK = Tensor<Real>({T, K});
  std::vector<Real> acc(at(D)), xg(at(D));
  for (int64_t t = 0; t < T; ++t) {
    std::fill(acc.begin(), acc.end(), Real(0));
    for (int64_t k = 0; k < K; ++k) {
      if (ids_TK[at(t * K + k)] < 0) continue;
      const Real* h = h3_TKD.row(t * K + k);
      for (int64_t d = 0; d < D; ++d) {
        xg[at(d)] = gamma ? (static_cast<Real>(spec.weight_D[at(d)]) + gc) * h[d] : h[d];
      }
      const Real ms = Numerics<Real>::fp32(dot_acc(xg.data(), xg.data(), D) / static_cast<double>(D));
      const Real rstd = Real(1) / std::sqrt(ms + eps);
      rstd_TK(t, k) = rstd;
      const Real s = scores_TK(t, k);
      for (int64_t d = 0; d < D; ++d) acc[at(d)] = fma_acc(s, xg[at(d)] * rstd, acc[at(d)]);
    }
    for (int64_t d = 0; d < D; ++d) out(t, d) = Numerics<Real>::bf16(acc[at(d)]);
  }
  return out;
}

template <class Real>
void rmsnorm_topk_reduce_backward(const Tensor<Real>& h3_TKD, const std::vector<int32_t>& ids_TK,
                                  const Tensor<Real>& scores_TK, const Tensor<Real>& rstd_TK,
                                  const Tensor<Real>& grad_out_TD, const RMSNormSpec& spec, Tensor<Real>& grad_h3_TKD,
                                  Tensor<Real>& grad_scores_TK) {
  check_owner(h3_TKD, ids_TK, scores_TK);
  DMOE_CHECK_ARG(spec.weight_D.empty(), "RMSNorm postprocess weight is inference/forward-only (no backward)");
  const int64_t T = scores_TK.size(0), K = scores_TK.size(1), D = h3_TKD.row_size();
  DMOE_CHECK_ARG(grad_out_TD.rows() == T && grad_out_TD.row_size() == D, "grad_out must be [T, D]");
  DMOE_CHECK_ARG(rstd_TK.shape == scores_TK.shape, "rstd_TK must be [T, K]");
  grad_h3_TKD = Tensor<Real>({T * K, D});
  grad_scores_TK = Tensor<Real>({T, K});
  std::vector<Real> n(at(D)), gn(at(D));
  for (int64_t t = 0; t < T; ++t) {
    const Real* g = grad_out_TD.row(t);
    for (int64_t k = 0; k < K; ++k) {
      if (ids_TK[at(t * K + k)] < 0) continue;
      const Real* h = h3_TKD.row(t * K + k);
      const Real rstd = rstd_TK(t, k);
      const Real s = scores_TK(t, k);
      for (int64_t d = 0; d < D; ++d) {
        n[at(d)] = h[d] * rstd;
        gn[at(d)] = s * g[d];
      }
      grad_scores_TK(t, k) = Numerics<Real>::fp32(dot_acc(g, n.data(), D));
      const Real c = Numerics<Real>::fp32(dot_acc(gn.data(), n.data(), D) / static_cast<double>(D));
      Real* gh = grad_h3_TKD.row(t * K + k);
      for (int64_t d = 0; d < D; ++d) gh[d] = Numerics<Real>::bf16(rstd * (gn[at(d)] - n[at(d)] * c));
    }
  }
}

template <class Real>
Tensor<Real> reduce_from_topk(const Tensor<Real>& grad_x_TKD, const std::vector<int32_t>& ids_TK, int64_t top_k) {
  DMOE_CHECK_ARG(top_k >= 1 && static_cast<int64_t>(ids_TK.size()) == grad_x_TKD.rows() &&
                     grad_x_TKD.rows() % top_k == 0,
                 "reduce_from_topk: grad_x_TKD must be [T*K, D] matching ids_TK");
  const int64_t T = grad_x_TKD.rows() / top_k, D = grad_x_TKD.row_size();
  Tensor<Real> out({T, D});
  for (int64_t t = 0; t < T; ++t) {
    Real* o = out.row(t);
    for (int64_t d = 0; d < D; ++d) {
      Real acc = 0;
      for (int64_t k = 0; k < top_k; ++k) {
        if (ids_TK[at(t * top_k + k)] < 0) continue;
        acc = acc + grad_x_TKD(t * top_k + k, d);
      }
      o[d] = Numerics<Real>::bf16(acc);
    }
  }
  return out;
}

// ---- explicit instantiations -------------------------------------------------------------------

#define DMOE_REFERENCE_INSTANTIATE_STAGES(Real)                                                                    \
  template Real swiglu<Real>(Real, Real, const SwigluParams&);                                                     \
  template void swiglu_backward<Real>(Real, Real, Real, const SwigluParams&, Real&, Real&);                        \
  template Tensor<Real> gather_token_rows<Real>(const RankRouting&, const std::vector<Tensor<Real>>&);             \
  template Tensor<Real> gather_route_rows<Real>(const RankRouting&, const std::vector<Tensor<Real>>&);             \
  template std::vector<Tensor<Real>> scatter_route_rows<Real>(const std::vector<RankRouting>&,                     \
                                                              const std::vector<Tensor<Real>>&, int64_t);          \
  template Tensor<Real> grouped_gemm_nt<Real>(const RankRouting&, const Tensor<Real>&, const Tensor<Real>&);       \
  template Tensor<Real> grouped_gemm_nn<Real>(const RankRouting&, const Tensor<Real>&, const Tensor<Real>&);       \
  template Tensor<Real> grouped_wgrad<Real>(const RankRouting&, const Tensor<Real>&, const Tensor<Real>&);         \
  template Tensor<Real> store_wgrad<Real>(const Tensor<Real>&, const Tensor<Real>*, DType);                        \
  template Tensor<Real> swiglu_rows<Real>(const RankRouting&, const Tensor<Real>&, const SwigluParams&);           \
  template Tensor<Real> swiglu_backward_rows<Real>(const RankRouting&, const Tensor<Real>&, const Tensor<Real>&,   \
                                                   const SwigluParams&);                                           \
  template std::array<int64_t, 3> clip_stats<Real>(const RankRouting&, const Tensor<Real>&, double);              \
  template Tensor<Real> topk_reduce<Real>(const Tensor<Real>&, const std::vector<int32_t>&, const Tensor<Real>&);  \
  template Tensor<Real> topk_reduce_rank_partials<Real>(const Tensor<Real>&, const std::vector<int32_t>&,         \
                                                        const Tensor<Real>&, int64_t);                             \
  template void topk_reduce_backward<Real>(const Tensor<Real>&, const std::vector<int32_t>&, const Tensor<Real>&,  \
                                           const Tensor<Real>&, Tensor<Real>&, Tensor<Real>&);                     \
  template Tensor<Real> rmsnorm_topk_reduce<Real>(const Tensor<Real>&, const std::vector<int32_t>&,                \
                                                  const Tensor<Real>&, const RMSNormSpec&, Tensor<Real>&);         \
  template void rmsnorm_topk_reduce_backward<Real>(const Tensor<Real>&, const std::vector<int32_t>&,               \
                                                   const Tensor<Real>&, const Tensor<Real>&, const Tensor<Real>&,  \
                                                   const RMSNormSpec&, Tensor<Real>&, Tensor<Real>&);              \
  template Tensor<Real> reduce_from_topk<Real>(const Tensor<Real>&, const std::vector<int32_t>&, int64_t);

DMOE_REFERENCE_INSTANTIATE_STAGES(float)
DMOE_REFERENCE_INSTANTIATE_STAGES(double)
#undef DMOE_REFERENCE_INSTANTIATE_STAGES

}  // namespace dist_moe::reference
