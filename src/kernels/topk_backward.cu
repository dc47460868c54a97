// Owner-side backward of the plain top-k reduction, and the K-reduction of input gradients.
// One block per token; each thread moves 16-byte vectors along D.
#include "dist_moe/check.h"
#include "dist_moe/error.h"
#include "kernels/topk.h"
#include "kernels/topk_vec.cuh"

namespace dist_moe::kernels {
namespace {

using namespace topk_detail;

__global__ void __launch_bounds__(kThreads) topk_reduce_backward_kernel(TopkRoutes r, DeviceAddress h3_addr,
                                                                       const __nv_bfloat16* gout,
                                                                       __nv_bfloat16* gh3, float* gscores) {
  __shared__ float scratch[kThreads / 32];
  const __nv_bfloat16* h3 = resolve<const __nv_bfloat16>(h3_addr);
  const int64_t t = blockIdx.x;
  for (int64_t k = 0; k < r.K; ++k) {
    const int64_t route = t * r.K + k;
    const bool valid = route_id(r, route) >= 0;
    const float s = valid ? route_score(r, route) : 0.f;
    float dot = 0.f;
    for (int64_t c = threadIdx.x * kVec; c < r.D; c += kThreads * kVec) {
      float g[kVec], h[kVec], out[kVec];
      load8(gout + t * r.D + c, g);
      if (valid) load8(h3 + route * r.D + c, h);
#pragma unroll
      for (int j = 0; j < kVec; ++j) {
        out[j] = valid ? s * g[j] : 0.f;
        dot = valid ? fmaf(g[j], h[j], dot) : dot;
      }
      store8(gh3 + route * r.D + c, out);
    }
    dot = block_sum(dot, scratch);
    if (threadIdx.x == 0) gscores[route] = valid ? dot : 0.f;
  }
}

__global__ void __launch_bounds__(kThreads) reduce_from_topk_kernel(TopkRoutes r, const __nv_bfloat16* gx_routes,
                                                                   __nv_bfloat16* gx) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x * kVec; c < r.D; c += kThreads * kVec) {
    float acc[kVec] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t k = 0; k < r.K; ++k) {
      const int64_t route = t * r.K + k;
      if (route_id(r, route) < 0) continue;
      float v[kVec];
      load8(gx_routes + route * r.D + c, v);
#pragma unroll
      for (int j = 0; j < kVec; ++j) acc[j] += v[j];
    }
    store8(gx + t * r.D + c, acc);
  }
}

void check_routes(const TopkRoutes& r) {
  DMOE_CHECK_ARG(r.T >= 0 && r.K > 0 && r.D > 0 && r.D % kVec == 0, "top-k kernels need T >= 0, K > 0 and D a "
                 "positive multiple of 8; got T=", r.T, " K=", r.K, " D=", r.D);
  DMOE_CHECK_ARG(r.id_dtype == DType::kInt32 || r.id_dtype == DType::kInt64, "expert ids must be int32 or int64, got ",
                 to_string(r.id_dtype));
  DMOE_CHECK_ARG(r.score_dtype == DType::kFloat32 || r.score_dtype == DType::kBFloat16,
                 "scores must be float32 or bfloat16, got ", to_string(r.score_dtype));
}

}  // namespace

void topk_reduce_backward(const TopkRoutes& r, DeviceAddress h3_TKD, const __nv_bfloat16* grad_out_TD,
                          __nv_bfloat16* grad_h3_TKD, float* grad_scores_TK, cudaStream_t stream) {
  check_routes(r);
  if (r.T == 0) return;
  topk_reduce_backward_kernel<<<static_cast<unsigned>(r.T), kThreads, 0, stream>>>(r, h3_TKD, grad_out_TD,
                                                                                  grad_h3_TKD, grad_scores_TK);
  DMOE_CUDA_CHECK_LAUNCH();
}

void reduce_from_topk(const TopkRoutes& r, const __nv_bfloat16* grad_x_TKD, __nv_bfloat16* grad_x_TD,
                      cudaStream_t stream) {
  check_routes(r);
  if (r.T == 0) return;
  reduce_from_topk_kernel<<<static_cast<unsigned>(r.T), kThreads, 0, stream>>>(r, grad_x_TKD, grad_x_TD);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::kernels
