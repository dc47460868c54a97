// Fused post-expert RMSNorm + score-weighted top-k reduction, forward and backward.
// One block per token. Forward: pass 1 computes each valid route's rstd (block reduction of
// sum(xg^2)); pass 2 accumulates s * xg * rstd over k in registers, in k order, per element.
#include "dist_moe/check.h"
#include "dist_moe/error.h"
#include "kernels/topk.h"
#include "kernels/topk_vec.cuh"

namespace dist_moe::kernels {

using common::DeviceAddress;
using common::resolve;

namespace {

using namespace detail;

__device__ __forceinline__ void gamma_scale(const RMSNormArgs& a, int64_t c, float (&x)[kVec]) {
  if (!a.gamma_D) return;
  float w[kVec];
  load8(a.gamma_D + c, w);
#pragma unroll
  for (int j = 0; j < kVec; ++j) x[j] = (w[j] + a.gain_center) * x[j];
}

__global__ void __launch_bounds__(kThreads) rmsnorm_forward_kernel(TopkRoutes r, const __nv_bfloat16* h3,
                                                                  RMSNormArgs a, __nv_bfloat16* out,
                                                                  float* rstd_TK) {
  extern __shared__ float rstd_k[];  // [K]
  __shared__ float scratch[kThreads / 32];
  const int64_t t = blockIdx.x;
  for (int64_t k = 0; k < r.K; ++k) {
    const int64_t route = t * r.K + k;
    if (route_id(r, route) < 0) {  // uniform across the block
      if (threadIdx.x == 0) rstd_k[k] = 0.f;
      continue;
    }
    float ss = 0.f;
    for (int64_t c = threadIdx.x * kVec; c < r.D; c += kThreads * kVec) {
      float x[kVec];
      load8(h3 + route * r.D + c, x);
      gamma_scale(a, c, x);
#pragma unroll
      for (int j = 0; j < kVec; ++j) ss = fmaf(x[j], x[j], ss);
    }
    ss = block_sum(ss, scratch);
    if (threadIdx.x == 0) rstd_k[k] = 1.0f / sqrtf(ss / static_cast<float>(r.D) + a.eps);
  }
  __syncthreads();
  if (threadIdx.x < r.K) rstd_TK[t * r.K + threadIdx.x] = rstd_k[threadIdx.x];
  for (int64_t c = threadIdx.x * kVec; c < r.D; c += kThreads * kVec) {
    float acc[kVec] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t k = 0; k < r.K; ++k) {
      const int64_t route = t * r.K + k;
      if (route_id(r, route) < 0) continue;
      const float s = route_score(r, route), rstd = rstd_k[k];
      float x[kVec];
      load8(h3 + route * r.D + c, x);
      gamma_scale(a, c, x);
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[j] = fmaf(s, x[j] * rstd, acc[j]);
    }
    store8(out + t * r.D + c, acc);
  }
}

__global__ void __launch_bounds__(kThreads) rmsnorm_backward_kernel(TopkRoutes r, DeviceAddress h3_addr,
                                                                   const float* rstd_TK, const __nv_bfloat16* gout,
                                                                   __nv_bfloat16* gh3, float* gscores) {
  __shared__ float scratch[kThreads / 32];
  const __nv_bfloat16* h3 = resolve<const __nv_bfloat16>(h3_addr);
  const int64_t t = blockIdx.x;
  const float inv_d = 1.0f / static_cast<float>(r.D);
  for (int64_t k = 0; k < r.K; ++k) {
    const int64_t route = t * r.K + k;
    if (route_id(r, route) < 0) {
      for (int64_t c = threadIdx.x * kVec; c < r.D; c += kThreads * kVec) {
        const float z[kVec] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        store8(gh3 + route * r.D + c, z);
      }
      if (threadIdx.x == 0) gscores[route] = 0.f;
      continue;
    }
    const float s = route_score(r, route), rstd = rstd_TK[route];
    float gn_dot = 0.f, g_dot = 0.f;  // <gn, n> and <g, n>
    for (int64_t c = threadIdx.x * kVec; c < r.D; c += kThreads * kVec) {
      float x[kVec], g[kVec];
      load8(h3 + route * r.D + c, x);
      load8(gout + t * r.D + c, g);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        const float n = x[j] * rstd;
        g_dot = fmaf(g[j], n, g_dot);
        gn_dot = fmaf(s * g[j], n, gn_dot);
      }
    }
    g_dot = block_sum(g_dot, scratch);
    const float coef = block_sum(gn_dot, scratch) * inv_d;
    if (threadIdx.x == 0) gscores[route] = g_dot;
    for (int64_t c = threadIdx.x * kVec; c < r.D; c += kThreads * kVec) {
      float x[kVec], g[kVec], out[kVec];
      load8(h3 + route * r.D + c, x);
      load8(gout + t * r.D + c, g);
#pragma unroll
      for (int j = 0; j < kVec; ++j) out[j] = rstd * (s * g[j] - (x[j] * rstd) * coef);
      store8(gh3 + route * r.D + c, out);
    }
  }
}

void check(const TopkRoutes& r) {
  DMOE_CHECK_ARG(r.K > 0 && r.K <= detail::kThreads && r.D > 0 && r.D % kVec == 0,
                 "RMSNorm postprocess needs 0 < K <= 256 and D a positive multiple of 8; got K=", r.K, " D=", r.D);
  DMOE_CHECK_ARG(r.id_dtype == DType::kInt32 || r.id_dtype == DType::kInt64, "expert ids must be int32 or int64");
  DMOE_CHECK_ARG(r.score_dtype == DType::kFloat32 || r.score_dtype == DType::kBFloat16,
                 "scores must be float32 or bfloat16");
}

}  // namespace

void rmsnorm_topk_reduce(const TopkRoutes& r, const __nv_bfloat16* h3_TKD, const RMSNormArgs& a,
                         __nv_bfloat16* out_TD, float* rstd_TK, cudaStream_t stream) {
  check(r);
  if (r.T == 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(r.T), kThreads, r.K * sizeof(float), stream>>>(r, h3_TKD, a, out_TD,
                                                                                              rstd_TK);
  DMOE_CUDA_CHECK_LAUNCH();
}

void rmsnorm_topk_reduce_backward(const TopkRoutes& r, DeviceAddress h3_TKD, const float* rstd_TK,
                                  const __nv_bfloat16* grad_out_TD, __nv_bfloat16* grad_h3_TKD,
                                  float* grad_scores_TK, cudaStream_t stream) {
  check(r);
  if (r.T == 0) return;
  rmsnorm_backward_kernel<<<static_cast<unsigned>(r.T), kThreads, 0, stream>>>(r, h3_TKD, rstd_TK, grad_out_TD,
                                                                              grad_h3_TKD, grad_scores_TK);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::kernels
