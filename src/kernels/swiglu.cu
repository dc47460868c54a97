// SwiGLU forward/backward over expert-major rows. Memory-bound: one warp per row at a time, each
// lane moving 16-byte vectors (8 BF16) of gate, up and output; the row's validity (inside its
// expert's count, not alignment padding) is found once per row, and the indexing is per row and
// column rather than a 64-bit division per vector (which, with a per-vector expert search, kept the
// old one-vector-per-thread loop at half the copy rate: docs/perf.md L1). The grid covers the
// planned capacity and warps past the device-side row count exit, so the launch is the same for
// every routing (graph-safe).
#include "kernels/swiglu.h"

#include "dist_moe/check.h"
#include "dist_moe/error.h"

namespace dist_moe::kernels {

using common::DeviceAddress;
using common::resolve;
using common::stage_enabled;

namespace {

constexpr int kVec = 8;  // BF16 per 16-byte access
constexpr int kThreads = 256;

struct alignas(16) Bf16x8 {
  __nv_bfloat162 v[4];
};

__device__ __forceinline__ void unpack(const Bf16x8& p, float (&f)[kVec]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 t = __bfloat1622float2(p.v[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}

__device__ __forceinline__ Bf16x8 pack(const float (&f)[kVec]) {
  Bf16x8 p;
#pragma unroll
  for (int i = 0; i < 4; ++i) p.v[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  return p;
}

// Warp-per-row walk: this warp's first row, and the stride (warps in the grid).
__device__ __forceinline__ int64_t row_of_warp() { return (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32; }
__device__ __forceinline__ int64_t warps_in_grid() { return int64_t(gridDim.x) * blockDim.x / 32; }

// Block-wide sum of three counters, then one atomicAdd each (upstream: each CTA adds once).
__device__ void add_clip_stats(float (&c)[3], float* out3) {
  __shared__ float partial[kThreads / 32][3];
#pragma unroll
  for (int i = 0; i < 3; ++i)
    for (int o = 16; o > 0; o >>= 1) c[i] += __shfl_xor_sync(0xffffffffu, c[i], o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0)
    for (int i = 0; i < 3; ++i) partial[warp][i] = c[i];
  __syncthreads();
  if (threadIdx.x < 3) {
    float s = 0.f;
    for (int w = 0; w < kThreads / 32; ++w) s += partial[w][threadIdx.x];
    if (s != 0.f) atomicAdd(out3 + threadIdx.x, s);
  }
}

__global__ void __launch_bounds__(kThreads) swiglu_forward_kernel(DeviceAddress h1_addr, DeviceAddress h2_addr,
                                                                 int64_t F, ExpertRowsView rows,
                                                                 activation::SwigluParams p, float* clip_stats_3,
                                                                 float clip_limit, const int64_t* enable, bool when) {
  if (!stage_enabled(enable, when)) return;  // uniform across the grid: no clip-stat barrier is skipped
  const __nv_bfloat16* __restrict__ h1 = resolve<const __nv_bfloat16>(h1_addr);
  __nv_bfloat16* __restrict__ h2 = resolve<__nv_bfloat16>(h2_addr);
  float clip[3] = {0.f, 0.f, 0.f};
  const int64_t end = min(rows.max_rows, static_cast<int64_t>(rows.offsets_E1[rows.num_local_experts]));
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t m = row_of_warp(); m < end; m += warps_in_grid()) {
    const bool valid = expert_row_is_valid(rows, m);
    const __nv_bfloat16* gate = h1 + m * 2 * F;
    __nv_bfloat16* out = h2 + m * F;
    for (int64_t c = int64_t{lane} * kVec; c < F; c += 32 * kVec) {
      float z[kVec];
      if (valid) {
        float g[kVec], u[kVec];
        unpack(*reinterpret_cast<const Bf16x8*>(gate + c), g);
        unpack(*reinterpret_cast<const Bf16x8*>(gate + F + c), u);
#pragma unroll
        for (int j = 0; j < kVec; ++j) {
          z[j] = activation::swiglu_forward(g[j], u[j], p);
          clip[0] += g[j] > clip_limit ? 1.f : 0.f;
          clip[1] += fabsf(u[j]) > clip_limit ? 1.f : 0.f;
        }
        clip[2] += kVec;
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) z[j] = 0.f;
      }
      *reinterpret_cast<Bf16x8*>(out + c) = pack(z);
    }
  }
  if (clip_stats_3) add_clip_stats(clip, clip_stats_3);
}

__global__ void __launch_bounds__(kThreads) swiglu_backward_kernel(DeviceAddress h1_addr, DeviceAddress gh2_addr,
                                                                  DeviceAddress gh1_addr, int64_t F,
                                                                  ExpertRowsView rows, activation::SwigluParams p) {
  // gh1 may be h1 itself (the MXFP8 pipeline writes dxy over h1): every element is read before the
  // same thread writes it, so no __restrict__ on these two.
  const __nv_bfloat16* h1 = resolve<const __nv_bfloat16>(h1_addr);
  const __nv_bfloat16* __restrict__ gh2 = resolve<const __nv_bfloat16>(gh2_addr);
  __nv_bfloat16* gh1 = resolve<__nv_bfloat16>(gh1_addr);
  const int64_t end = min(rows.max_rows, static_cast<int64_t>(rows.offsets_E1[rows.num_local_experts]));
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (int64_t m = row_of_warp(); m < end; m += warps_in_grid()) {
    const bool valid = expert_row_is_valid(rows, m);
    const __nv_bfloat16* gate = h1 + m * 2 * F;
    const __nv_bfloat16* dz_row = gh2 + m * F;
    __nv_bfloat16* out = gh1 + m * 2 * F;
    for (int64_t c = int64_t{lane} * kVec; c < F; c += 32 * kVec) {
      float dg[kVec], du[kVec];
      if (valid) {
        float g[kVec], u[kVec], dz[kVec];
        unpack(*reinterpret_cast<const Bf16x8*>(gate + c), g);
        unpack(*reinterpret_cast<const Bf16x8*>(gate + F + c), u);
        unpack(*reinterpret_cast<const Bf16x8*>(dz_row + c), dz);
#pragma unroll
        for (int j = 0; j < kVec; ++j) activation::swiglu_backward(g[j], u[j], dz[j], p, &dg[j], &du[j]);
      } else {
#pragma unroll
        for (int j = 0; j < kVec; ++j) dg[j] = du[j] = 0.f;
      }
      *reinterpret_cast<Bf16x8*>(out + c) = pack(dg);
      *reinterpret_cast<Bf16x8*>(out + F + c) = pack(du);
    }
  }
}

// Blocks for `work_items` threads (one warp per row: rows * 32), at most 8 per SM.
int grid_for(int64_t work_items) {
  int device = 0, sms = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&device));
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t blocks = (work_items + kThreads - 1) / kThreads;
  return static_cast<int>(blocks < int64_t(sms) * 8 ? (blocks > 0 ? blocks : 1) : int64_t(sms) * 8);
}

void check_shapes(int64_t F, const ExpertRowsView& rows) {
  DMOE_CHECK_ARG(F > 0 && F % kVec == 0, "SwiGLU intermediate_dim must be a positive multiple of 8, got ", F);
  DMOE_CHECK_ARG(rows.counts_E && rows.offsets_E1 && rows.num_local_experts > 0,
                 "SwiGLU needs the routing's per-expert counts and offsets");
}

}  // namespace

void swiglu_forward(DeviceAddress h1_M2F, DeviceAddress h2_MF, int64_t F, const ExpertRowsView& rows,
                    const activation::SwigluParams& p, float* clip_stats_3, float clip_limit, cudaStream_t stream,
                    const int64_t* enable, bool when) {
  check_shapes(F, rows);
  if (clip_stats_3) DMOE_CUDA_CHECK(cudaMemsetAsync(clip_stats_3, 0, 3 * sizeof(float), stream));
  if (rows.max_rows == 0) return;
  swiglu_forward_kernel<<<grid_for(rows.max_rows * 32), kThreads, 0, stream>>>(
      h1_M2F, h2_MF, F, rows, p, clip_stats_3, clip_limit, enable, when);
  DMOE_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(DeviceAddress h1_M2F, DeviceAddress grad_h2_MF, DeviceAddress grad_h1_M2F, int64_t F,
                     const ExpertRowsView& rows, const activation::SwigluParams& p, cudaStream_t stream) {
  check_shapes(F, rows);
  if (rows.max_rows == 0) return;
  swiglu_backward_kernel<<<grid_for(rows.max_rows * 32), kThreads, 0, stream>>>(h1_M2F, grad_h2_MF,
                                                                                       grad_h1_M2F, F, rows, p);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::kernels
