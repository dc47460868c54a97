// Shared device helpers of the owner-side top-k kernels: typed id/score loads, 16-byte BF16
// vectors, and a block-wide sum.
#pragma once

#include <cuda_bf16.h>

#include "kernels/topk.h"

namespace dist_moe::kernels::detail {

constexpr int kVec = 8;       // BF16 per 16-byte access
constexpr int kThreads = 256;

struct alignas(16) Bf16x8 {
  __nv_bfloat162 v[4];
};

__device__ __forceinline__ void load8(const __nv_bfloat16* p, float (&f)[kVec]) {
  const Bf16x8 x = *reinterpret_cast<const Bf16x8*>(p);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(x.v[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const float (&f)[kVec]) {
  Bf16x8 x;
#pragma unroll
  for (int i = 0; i < 4; ++i) x.v[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<Bf16x8*>(p) = x;
}

__device__ __forceinline__ int64_t route_id(const TopkRoutes& r, int64_t i) {
  return r.id_dtype == DType::kInt64 ? static_cast<const int64_t*>(r.ids_TK)[i]
                                     : static_cast<const int32_t*>(r.ids_TK)[i];
}

__device__ __forceinline__ float route_score(const TopkRoutes& r, int64_t i) {
  return r.score_dtype == DType::kBFloat16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(r.scores_TK)[i])
                                           : static_cast<const float*>(r.scores_TK)[i];
}

// Sum over the block; every thread gets the result. `scratch` holds kThreads/32 floats.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float s = 0.f;
#pragma unroll
  for (int w = 0; w < kThreads / 32; ++w) s += scratch[w];
  return s;
}

}  // namespace dist_moe::kernels::detail
