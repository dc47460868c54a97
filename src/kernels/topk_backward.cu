// Owner-side backward of the plain top-k reduction, and the K-reduction of input gradients.
// Backward: one warp per route (token, k), lanes moving 16-byte vectors along D, the score
// gradient's dot product summed by warp shuffles (it was one block per token walking the K routes
// one after another, with a block-wide reduction per route: ~1/3 of the byte rate at qwen3). Its
// token-rows form writes no route rows: the (t, 0) warp copies grad_out's row and every warp its
// route's score, from which the block-scaled quantizers scale the rows themselves (G144).
// K-reduction: one block per token, route validity staged in shared memory, each thread's K loads
// in flight together.
#include <algorithm>

#include "dist_moe/check.h"
#include "dist_moe/error.h"
#include "kernels/topk.h"
#include "kernels/topk_vec.cuh"

namespace dist_moe::kernels {

using common::DeviceAddress;
using common::resolve;

namespace {

using namespace detail;

constexpr int kUnroll = 4;

// kTokenRows: gh3 is [T, D] (grad_out's rows, written by the k = 0 warps) and route_scores gets each
// route's score (NaN for -1 routes); else gh3 is the route rows [T, K, D].
template <bool kTokenRows>
__global__ void __launch_bounds__(kThreads) topk_reduce_backward_kernel(TopkRoutes r, DeviceAddress h3_addr,
                                                                       const __nv_bfloat16* __restrict__ gout,
                                                                       __nv_bfloat16* __restrict__ gh3,
                                                                       float* route_scores, float* gscores) {
  const __nv_bfloat16* h3 = resolve<const __nv_bfloat16>(h3_addr);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = int64_t(gridDim.x) * (kThreads / 32);
  for (int64_t route = (blockIdx.x * int64_t(kThreads) + threadIdx.x) / 32; route < r.T * r.K; route += warps) {
    const int64_t t = route / r.K;
    const bool valid = route_id(r, route) >= 0;
    const float s = valid ? route_score(r, route) : 0.f;
    const bool copies_row = kTokenRows && route % r.K == 0;  // warp-uniform
    float dot = 0.f;
    // kUnroll vectors per lane in flight (loads first, then math and stores); the lane's dot product
    // still runs over its vectors in increasing c.
    for (int64_t c0 = int64_t{lane} * kVec; c0 < r.D; c0 += kUnroll * 32 * kVec) {
      Bf16x8 graw[kUnroll], hraw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32 * kVec;
        if (c < r.D) {
          graw[u] = *reinterpret_cast<const Bf16x8*>(gout + t * r.D + c);
          if (valid) hraw[u] = *reinterpret_cast<const Bf16x8*>(h3 + route * r.D + c);
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * 32 * kVec;
        if (c >= r.D) break;
        if (copies_row) *reinterpret_cast<Bf16x8*>(gh3 + t * r.D + c) = graw[u];
        float out[kVec];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 g = __bfloat1622float2(graw[u].v[q]);
          out[2 * q] = valid ? s * g.x : 0.f;
          out[2 * q + 1] = valid ? s * g.y : 0.f;
          if (valid) {
            const float2 h = __bfloat1622float2(hraw[u].v[q]);
            dot = fmaf(g.x, h.x, dot);
            dot = fmaf(g.y, h.y, dot);
          }
        }
        if (!kTokenRows) store8(gh3 + route * r.D + c, out);
      }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0) {
      gscores[route] = valid ? dot : 0.f;
      if constexpr (kTokenRows) route_scores[route] = valid ? s : __int_as_float(0x7fffffff);
    }
  }
}

// One block per token. The token's route validity goes to shared memory first, so no data load
// waits for an id load; then each thread walks its 16-byte vectors along D, issuing the loads of
// up to kBatch routes together (raw BF16 in registers) before the k-ordered FP32 sum.
constexpr int kReduceThreads = 128;
constexpr int kBatch = 8;

__global__ void __launch_bounds__(kReduceThreads) reduce_from_topk_kernel(TopkRoutes r,
                                                                         const __nv_bfloat16* gx_routes,
                                                                         __nv_bfloat16* gx) {
  extern __shared__ uint8_t valid_s[];  // [K]
  const int64_t t = blockIdx.x;
  for (int64_t k = threadIdx.x; k < r.K; k += kReduceThreads) valid_s[k] = route_id(r, t * r.K + k) >= 0;
  __syncthreads();
  const __nv_bfloat16* rows = gx_routes + t * r.K * r.D;
  for (int64_t c = threadIdx.x * kVec; c < r.D; c += kReduceThreads * kVec) {
    float acc[kVec] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t k0 = 0; k0 < r.K; k0 += kBatch) {
      Bf16x8 raw[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (k0 + j < r.K && valid_s[k0 + j]) raw[j] = *reinterpret_cast<const Bf16x8*>(rows + (k0 + j) * r.D + c);
#pragma unroll
      for (int j = 0; j < kBatch; ++j)
        if (k0 + j < r.K && valid_s[k0 + j]) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            const float2 f = __bfloat1622float2(raw[j].v[q]);
            acc[2 * q] += f.x;
            acc[2 * q + 1] += f.y;
          }
        }
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

// One warp per route, at most eight 256-thread blocks per SM.
template <bool kTokenRows>
void launch_topk_reduce_backward(const TopkRoutes& r, DeviceAddress h3_TKD, const __nv_bfloat16* grad_out_TD,
                                 __nv_bfloat16* gh3, float* route_scores_TK, float* grad_scores_TK,
                                 cudaStream_t stream) {
  check_routes(r);
  if (r.T == 0) return;
  int device = 0, sms = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&device));
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t warps_needed = r.T * r.K;
  const int64_t blocks = std::min<int64_t>((warps_needed + kThreads / 32 - 1) / (kThreads / 32), int64_t{sms} * 8);
  topk_reduce_backward_kernel<kTokenRows><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      r, h3_TKD, grad_out_TD, gh3, route_scores_TK, grad_scores_TK);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace

void topk_reduce_backward(const TopkRoutes& r, DeviceAddress h3_TKD, const __nv_bfloat16* grad_out_TD,
                          __nv_bfloat16* grad_h3_TKD, float* grad_scores_TK, cudaStream_t stream) {
  launch_topk_reduce_backward<false>(r, h3_TKD, grad_out_TD, grad_h3_TKD, nullptr, grad_scores_TK, stream);
}

void topk_reduce_backward_token_rows(const TopkRoutes& r, DeviceAddress h3_TKD, const __nv_bfloat16* grad_out_TD,
                                     __nv_bfloat16* token_rows_TD, float* route_scores_TK, float* grad_scores_TK,
                                     cudaStream_t stream) {
  launch_topk_reduce_backward<true>(r, h3_TKD, grad_out_TD, token_rows_TD, route_scores_TK, grad_scores_TK, stream);
}

void reduce_from_topk(const TopkRoutes& r, const __nv_bfloat16* grad_x_TKD, __nv_bfloat16* grad_x_TD,
                      cudaStream_t stream) {
  check_routes(r);
  if (r.T == 0) return;
  reduce_from_topk_kernel<<<static_cast<unsigned>(r.T), kReduceThreads, static_cast<size_t>(r.K), stream>>>(
      r, grad_x_TKD, grad_x_TD);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::kernels
