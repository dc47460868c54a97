// Internal: turns a GemmLaunch into one kernel's Params (TMA boxes from the kernel's own constants,
// so host and device can never disagree) and launches it. Included only by the instantiation files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "dist_moe/check.h"
#include "dist_moe/device/gemm/kernel.cuh"
#include "grouped_gemm_launch.h"

namespace dist_moe::detail {

inline int32_t ceil_div_i32(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

template <class Kernel>
void launch_grouped_gemm(const GemmLaunch& L) {
  using Mainloop = typename Kernel::Mainloop;
  using gemm::GemmKind;
  constexpr GemmKind kKind = Mainloop::kKind;
  constexpr int BM = Mainloop::kBlockM;
  constexpr int BN = Mainloop::kBlockN;
  DMOE_ASSERT(L.kind == kKind);

  typename Kernel::Params p{};
  gemm::MainloopParams& ml = p.mainloop;
  gemm::SchedulerParams& sc = p.scheduler;
  p.epilogue = L.epilogue;
  ml.weight_rows = L.n;

  // The A rows come from the gathered copy when the gather producer runs.
  const void* rows_a = Kernel::kGather ? L.gathered : L.a;
  const int64_t weight_total_rows = static_cast<int64_t>(L.e_local) * L.n;
  int64_t tiles_upper_bound = 0;  // host-side bound on the tile count (sizes the grid)
  const int64_t m_tiles_bound = (L.m_capacity + BM - 1) / BM + L.e_local;

  if constexpr (kKind == GemmKind::kFprop) {
    ml.tma_a = make_tma_bf16_2d(rows_a, L.m_capacity, L.k, L.k, Mainloop::kBoxAOuter, "A rows");
    ml.tma_b = make_tma_bf16_2d(L.b, weight_total_rows, L.k, L.k, Mainloop::kBoxBOuter, "weights");
    ml.num_k_blocks = L.k / Mainloop::kBlockK;
    ml.split_offset = L.n / 2;
    // Split (SwiGLU): each N tile covers BN/2 gate and the matching BN/2 up columns.
    sc.fixed_n_blocks = Mainloop::kSplit ? (L.n / 2) / (BN / 2) : ceil_div_i32(L.n, BN);
    sc.group_m = 8;
    tiles_upper_bound = m_tiles_bound * sc.fixed_n_blocks;
  } else if constexpr (kKind == GemmKind::kDgrad) {
    ml.tma_a = make_tma_bf16_2d(rows_a, L.m_capacity, L.n, L.n, Mainloop::kBoxAOuter, "grad_out rows");
    ml.tma_b = make_tma_bf16_2d(L.b, weight_total_rows, L.k, L.k, Mainloop::kBoxBOuter, "weights");
    ml.num_k_blocks = L.n / Mainloop::kBlockK;
    sc.fixed_n_blocks = ceil_div_i32(L.k, BN);
    sc.group_m = 8;
    tiles_upper_bound = m_tiles_bound * sc.fixed_n_blocks;
  } else if constexpr (kKind == GemmKind::kWgrad) {
    ml.tma_a = make_tma_bf16_2d(L.a, L.m_capacity, L.n, L.n, Mainloop::kBoxAOuter, "grad_out rows");
    ml.tma_b = make_tma_bf16_2d(L.b, L.m_capacity, L.k, L.k, Mainloop::kBoxBOuter, "x rows");
    sc.fixed_m_blocks = L.n / BM;
    sc.fixed_n_blocks = ceil_div_i32(L.k, BN);
    sc.group_m = 8;
    sc.tiles_for_empty_experts = L.tiles_for_empty_experts ? 1 : 0;
    tiles_upper_bound = static_cast<int64_t>(L.e_local) * sc.fixed_m_blocks * sc.fixed_n_blocks;
  } else {  // kFpropSwapAB
    ml.tma_a = make_tma_bf16_2d(L.b, weight_total_rows, L.k, L.k, Mainloop::kBoxAOuter, "weights");
    ml.tma_b = make_tma_bf16_2d(rows_a, L.m_capacity, L.k, L.k, Mainloop::kBoxBOuter, "A rows");
    ml.num_k_blocks = L.k / Mainloop::kBlockK;
    ml.split_offset = L.n / 2;
    sc.fixed_m_blocks = Mainloop::kSplit ? (L.n / 2) / (BM / 2) : ceil_div_i32(L.n, BM);
    sc.group_m = 1;  // token tiles of one weight tile back to back: the weight tile stays in L2
    tiles_upper_bound = static_cast<int64_t>(sc.fixed_m_blocks) * ((L.m_capacity + BN - 1) / BN + L.e_local);
  }
  if constexpr (Kernel::kGather) {
    ml.gather_rows = L.gather_rows;
    ml.gathered = L.gathered;
    ml.ready = L.ready;
    ml.gather_row_elems = kKind == GemmKind::kDgrad ? L.n : L.k;
  }
  sc.counts = L.counts;
  sc.num_experts = L.e_local;
  sc.m_capacity = L.m_capacity;

  // Persistent grid: at most one CTA per SM, and no more CTAs than tiles can exist. The gather
  // variants keep every CTA: each one also gathers its share of the rows.
  int grid = L.num_sms;
  if (!Kernel::kGather) grid = static_cast<int>(std::min<int64_t>(grid, std::max<int64_t>(tiles_upper_bound, 1)));
  const int smem = Kernel::smem_bytes(L.e_local);
  const auto kernel = gemm::sm90_grouped_gemm<Kernel>;
  // Raise the kernel's dynamic shared memory limit to the largest size any launch can need (the
  // E_local bound), once per device.
  static std::atomic<uint64_t> configured_devices{0};
  int dev = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if ((configured_devices.load(std::memory_order_acquire) & bit) == 0) {
    int optin = 0;
    DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    DMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    configured_devices.fetch_or(bit, std::memory_order_acq_rel);
  }
  kernel<<<grid, Kernel::kThreads, smem, L.stream>>>(p);
  DMOE_CUDA_CHECK_LAUNCH();
}

template <class Kernel>
int grouped_gemm_smem_bytes(int num_experts) {
  return Kernel::smem_bytes(num_experts);
}

template <class Kernel>
GemmKernelEntry make_gemm_entry(GemmEpilogueKind epilogue) {
  using M = typename Kernel::Mainloop;
  return GemmKernelEntry{M::kKind,   epilogue,  Kernel::kGather,
                         M::kBlockM, M::kBlockN, M::kStages,
                         &launch_grouped_gemm<Kernel>, &grouped_gemm_smem_bytes<Kernel>};
}

}  // namespace dist_moe::detail
