// Owner-side top-k kernels of the backward, and the fused RMSNorm postprocess (forward and
// backward). Route buffers are [T, K, D] BF16 (the combine/dispatch windows); -1 routes are
// masked by the ids: never read, zero gradients.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dist_moe/dtype.h"
#include "dist_moe/device/common/device_address.h"

namespace dist_moe::kernels {

// Ids and scores as the caller gives them: ids int32 or int64, scores FP32 or BF16.
struct TopkRoutes {
  const void* ids_TK = nullptr;
  DType id_dtype = DType::kInt32;
  const void* scores_TK = nullptr;
  DType score_dtype = DType::kFloat32;
  int64_t T = 0, K = 0, D = 0;
};

// grad_h3[t,k] = BF16(s[t,k] * g[t]) and grad_scores[t,k] = sum_d g[t,d] * h3[t,k,d] (FP32);
// -1 routes: zero rows and zero score gradients.
void topk_reduce_backward(const TopkRoutes& r, common::DeviceAddress h3_TKD, const __nv_bfloat16* grad_out_TD,
                          __nv_bfloat16* grad_h3_TKD, float* grad_scores_TK, cudaStream_t stream);

// The block-scaled pipelines' form (perf_history G144): grad_scores as above, and in place of the
// route rows what the expert side computes them from -- grad_out's rows copied to token_rows_TD
// ([T, D]) and each route's score to route_scores_TK (FP32; NaN for -1 routes, whose rows are
// zeros) -- for a quantizer that reads grad_h3 row (t, k) as bf16_rne(score * grad_out[t])
// (quant::Bf16Matrix::row_scales): the same bits as topk_reduce_backward's rows, without their
// [T, K, D] store and reload.
void topk_reduce_backward_token_rows(const TopkRoutes& r, common::DeviceAddress h3_TKD,
                                     const __nv_bfloat16* grad_out_TD, __nv_bfloat16* token_rows_TD,
                                     float* route_scores_TK, float* grad_scores_TK, cudaStream_t stream);

// grad_x[t] = BF16(sum over valid k, in k order, of FP32 grad_x_routes[t,k]); all -1 rows give 0.
void reduce_from_topk(const TopkRoutes& r, const __nv_bfloat16* grad_x_TKD, __nv_bfloat16* grad_x_TD,
                      cudaStream_t stream);

// Fused post-expert RMSNorm (upstream §2.7), per valid route in FP32:
//   xg = gamma ? (gamma + gain_center) * h3 : h3;  rstd = 1 / sqrt(mean(xg^2) + eps)
//   out[t] = BF16(k-ordered fma sum of s * (xg * rstd));  rstd_TK saved (0 for -1 routes).
struct RMSNormArgs {
  float eps = 1e-6f;
  const __nv_bfloat16* gamma_D = nullptr;  // inference only
  float gain_center = 0.f;
};
void rmsnorm_topk_reduce(const TopkRoutes& r, const __nv_bfloat16* h3_TKD, const RMSNormArgs& a,
                         __nv_bfloat16* out_TD, float* rstd_TK, cudaStream_t stream);

// Backward (scalarless), per valid route: n = h3 * rstd, gn = s * g, grad_s = <g, n>,
// c = <gn, n> / D, grad_h3 = BF16(rstd * (gn - n * c)).
void rmsnorm_topk_reduce_backward(const TopkRoutes& r, common::DeviceAddress h3_TKD, const float* rstd_TK,
                                  const __nv_bfloat16* grad_out_TD, __nv_bfloat16* grad_h3_TKD,
                                  float* grad_scores_TK, cudaStream_t stream);

}  // namespace dist_moe::kernels
