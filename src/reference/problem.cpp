#include "reference/problem.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <type_traits>

#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/error.h"

namespace dist_moe::reference {
namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

template <class Real>
void check_bf16_values(const Tensor<Real>& t, const char* name, int64_t rank) {
  if constexpr (std::is_same_v<Real, float>) {
    for (std::size_t i = 0; i < t.data.size(); ++i) {
      const float v = t.data[i];
      if (!(numeric::round_bf16(v) == v)) {
        if (rank >= 0) {
          detail::fail(ErrorCode::kInvalidValue, name, " of rank ", rank, " element ", i, " = ", v,
                       " is not a BF16 value");
        }
        detail::fail(ErrorCode::kInvalidValue, name, " element ", i, " = ", v, " is not a BF16 value");
      }
    }
  }
}

template <class Real>
Tensor<Real> expert_slice(const Tensor<Real>& w, int64_t first, int64_t count) {
  Tensor<Real> out({count, w.size(1), w.size(2)});
  const Real* src = w.row(first);
  std::copy(src, src + count * w.row_size(), out.data.begin());
  return out;
}

}  // namespace

const char* to_string(Quantization q) {
  switch (q) {
    case Quantization::kNone: return "none";
    case Quantization::kMXFP8: return "mxfp8";
    case Quantization::kNVFP4: return "nvfp4";
    case Quantization::kFP8Blockwise: return "fp8_blockwise";
  }
  return "unknown";
}

template <class Real>
void BasicProblem<Real>::validate() const {
  DMOE_CHECK_ARG(num_ranks >= 1, "num_ranks must be >= 1, got ", num_ranks);
  DMOE_CHECK_ARG(hidden_dim >= 1, "hidden_dim must be >= 1, got ", hidden_dim);
  DMOE_CHECK_ARG(intermediate_dim >= 1, "intermediate_dim must be >= 1, got ", intermediate_dim);
  DMOE_CHECK_ARG(top_k >= 1, "top_k must be >= 1, got ", top_k);
  DMOE_CHECK_ARG(num_experts >= 1 && num_experts % num_ranks == 0, "num_experts=", num_experts,
                 " must be a positive multiple of num_ranks=", num_ranks);
  DMOE_CHECK_ARG(swiglu.activation == Activation::kSwiGLU || (std::isfinite(swiglu.alpha) && swiglu.limit > 0),
                 "clamped SwiGLU needs a finite alpha and a limit > 0");
  const auto R = at(num_ranks);
  DMOE_CHECK_ARG(x_TD.size() == R && ids_TK.size() == R && scores_TK.size() == R,
                 "x_TD, ids_TK and scores_TK need one entry per rank (", num_ranks, "), got ", x_TD.size(),
                 ", ", ids_TK.size(), ", ", scores_TK.size());
  const int64_t D = hidden_dim, F = intermediate_dim, K = top_k, E = num_experts;
  for (std::size_t r = 0; r < R; ++r) {
    const Tensor<Real>& x = x_TD[r];
    DMOE_CHECK_ARG(x.dims() == 2 && x.size(1) == D, "x_TD of rank ", r, " must have shape [T, D] with D=", D);
    const int64_t T = x.size(0);
    DMOE_CHECK_ARG(static_cast<int64_t>(ids_TK[r].size()) == T * K, "topk_expert_ids_TK of rank ", r,
                   " must have shape [T, K] = [", T, ", ", K, "], got ", ids_TK[r].size(), " entries");
    DMOE_CHECK_ARG(scores_TK[r].dims() == 2 && scores_TK[r].size(0) == T && scores_TK[r].size(1) == K,
                   "topk_scores_TK of rank ", r, " must have shape [T, K] = [", T, ", ", K, "]");
    check_bf16_values(x, "x_TD", static_cast<int64_t>(r));
  }
  DMOE_CHECK_ARG(w13_EFD.dims() == 3 && w13_EFD.size(0) == E && w13_EFD.size(1) == 2 * F && w13_EFD.size(2) == D,
                 "w13_EFD must have shape [E, 2F, D] = [", E, ", ", 2 * F, ", ", D, "]");
  DMOE_CHECK_ARG(w2_EDF.dims() == 3 && w2_EDF.size(0) == E && w2_EDF.size(1) == D && w2_EDF.size(2) == F,
                 "w2_EDF must have shape [E, D, F] = [", E, ", ", D, ", ", F, "]");
  check_bf16_values(w13_EFD, "w13_EFD", -1);
  check_bf16_values(w2_EDF, "w2_EDF", -1);
}

template <class Real>
Tensor<Real> BasicProblem<Real>::local_w13(int64_t rank) const {
  DMOE_CHECK_ARG(rank >= 0 && rank < num_ranks, "rank ", rank, " out of [0, ", num_ranks, ")");
  return expert_slice(w13_EFD, rank * num_local_experts(), num_local_experts());
}

template <class Real>
Tensor<Real> BasicProblem<Real>::local_w2(int64_t rank) const {
  DMOE_CHECK_ARG(rank >= 0 && rank < num_ranks, "rank ", rank, " out of [0, ", num_ranks, ")");
  return expert_slice(w2_EDF, rank * num_local_experts(), num_local_experts());
}

template <class Real>
BasicProblem<Real> BasicProblem<Real>::resplit(int64_t new_num_ranks) const {
  validate();
  DMOE_CHECK_ARG(new_num_ranks >= 1 && num_experts % new_num_ranks == 0, "resplit: num_experts=", num_experts,
                 " is not a multiple of ", new_num_ranks);
  const Tensor<Real> x_all = concat_rows(x_TD);
  const Tensor<Real> s_all = concat_rows(scores_TK);
  std::vector<int32_t> ids_all;
  for (const auto& ids : ids_TK) ids_all.insert(ids_all.end(), ids.begin(), ids.end());
  const int64_t total = x_all.rows();
  DMOE_CHECK_ARG(total % new_num_ranks == 0, "resplit: ", total, " tokens do not split evenly over ", new_num_ranks,
                 " ranks");
  const int64_t T = total / new_num_ranks, D = hidden_dim, K = top_k;
  BasicProblem out = *this;
  out.num_ranks = new_num_ranks;
  out.x_TD.clear();
  out.ids_TK.clear();
  out.scores_TK.clear();
  for (int64_t r = 0; r < new_num_ranks; ++r) {
    Tensor<Real> x({T, D}), s({T, K});
    std::copy(x_all.row(r * T), x_all.row(r * T) + T * D, x.data.begin());
    std::copy(s_all.row(r * T), s_all.row(r * T) + T * K, s.data.begin());
    out.x_TD.push_back(std::move(x));
    out.scores_TK.push_back(std::move(s));
    out.ids_TK.emplace_back(ids_all.begin() + r * T * K, ids_all.begin() + (r + 1) * T * K);
  }
  return out;
}

void ForwardOptions::validate(int64_t hidden_dim) const {
  DMOE_CHECK_ARG(row_alignment >= 1, "row_alignment must be >= 1, got ", row_alignment);
  if (receive_capacity_rows) {
    DMOE_CHECK_ARG(*receive_capacity_rows >= 0, "receive_capacity_rows must be >= 0, got ", *receive_capacity_rows);
  }
  if (rmsnorm) {
    DMOE_CHECK_ARG(std::isfinite(rmsnorm->eps) && rmsnorm->eps > 0, "RMSNorm eps must be finite and > 0, got ",
                   rmsnorm->eps);
    DMOE_CHECK_ARG(rmsnorm->weight_D.empty() || static_cast<int64_t>(rmsnorm->weight_D.size()) == hidden_dim,
                   "RMSNorm weight must have shape [D] with D=", hidden_dim);
    DMOE_CHECK_ARG(!rmsnorm->weight_D.empty() || rmsnorm->gain_center == 0.0,
                   "RMSNorm gain_center requires a weight");
  }
}

template struct BasicProblem<float>;
template struct BasicProblem<double>;

}  // namespace dist_moe::reference
