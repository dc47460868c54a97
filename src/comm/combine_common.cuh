// What the three combine kernels share (combine_every_route.cu, combine_remote_routes.cu,
// combine_rank_partials.cu): score loads, the k-ordered FP32 accumulation of BF16 route rows
// (routing::combine_accumulate: the CPU oracle's topk_reduce bit for bit), BF16 packing, the
// in-kernel barrier, and the reset of the signal modes' token counters.
#pragma once

#include "comm/ep_launch_and_copy.cuh"
#include "comm/ep_kernels.h"
#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/device/routing/routing_layout.cuh"

namespace dist_moe::comm {
namespace {

constexpr int kRouteBatch = 4;    // routes in flight per lane in the reduction
constexpr int kScatterWarps = 12;  // signal mode: scatter warps per CTA (the other 4 reduce)

template <bool kScoreBf16>
__device__ __forceinline__ float load_score(const void* scores, int64_t i) {
  if constexpr (kScoreBf16)
    return numeric::bf16_to_float(numeric::bf16_t{static_cast<const uint16_t*>(scores)[i]});
  else
    return static_cast<const float*>(scores)[i];
}

__device__ __forceinline__ void accumulate8(float* acc, float score, const int4& v) {
  const uint32_t w[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y), static_cast<uint32_t>(v.z),
                         static_cast<uint32_t>(v.w)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    acc[2 * i + 0] = routing::combine_accumulate(acc[2 * i + 0], score, __uint_as_float(w[i] << 16));
    acc[2 * i + 1] = routing::combine_accumulate(acc[2 * i + 1], score, __uint_as_float(w[i] & 0xffff0000u));
  }
}

__device__ __forceinline__ int4 pack8(const float* acc) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t lo = numeric::float_to_bf16(acc[2 * i + 0]).bits;
    const uint32_t hi = numeric::float_to_bf16(acc[2 * i + 1]).bits;
    w[i] = lo | (hi << 16);
  }
  return make_int4(static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), static_cast<int>(w[3]));
}

// Every CTA's stores (to peers too) published, then every rank past the same point: grid barrier,
// EP barrier (CTA 0), grid barrier. `trace_slot` >= 0: the latest CTA to get here is traced.
__device__ __forceinline__ void combine_barrier(const EpDeviceLayout& L, int trace_slot) {
  __syncthreads();
  if (trace_slot >= 0) trace_last(L, trace_slot);
  if (threadIdx.x == 0) fence_acq_rel_sys();
  grid_barrier(L, kGridBarrierCombine);
  if (blockIdx.x == 0) ep_barrier_cta(L, 0);
  grid_barrier(L, kGridBarrierCombine);
}

// Signal modes: the last CTA of the grid to get here resets this rank's token counters (signal
// window) for the next call. Every thread of every CTA calls it once, after its last wait.
__device__ __forceinline__ void last_cta_resets_token_counters(const EpDeviceLayout& L, int num_tokens) {
  __shared__ int s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    s_last = atomicAdd(&L.state->combine_done_ctas, 1u) == gridDim.x - 1 ? 1 : 0;
  }
  __syncthreads();
  if (s_last) {
    uint32_t* counters = token_counter_ptr(L, L.rank, 0);
    for (int t = threadIdx.x; t < num_tokens; t += blockDim.x) counters[t] = 0u;
    if (threadIdx.x == 0) L.state->combine_done_ctas = 0u;
  }
}

}  // namespace
}  // namespace dist_moe::comm
