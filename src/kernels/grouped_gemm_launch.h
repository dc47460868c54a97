// Internal: the generic launch description the host API fills, and the compiled kernel table.
//
// Each grouped_gemm_sm90_*.cu file instantiates a few kernels (one per tile configuration) and
// exposes them as GemmKernelEntry; grouped_gemm.cu picks one by (kind, epilogue, gather, tile). Nothing here is part of the public API.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "dist_moe/device/gemm/params.cuh"

namespace dist_moe::detail {

enum class GemmEpilogueKind { kStoreBf16, kStoreFp32, kSwiglu };

// Everything a launch needs, in the kernels' terms (params.cuh). Row operands are [m_capacity, *]
// BF16 row-major; weights [e_local, n, k].
struct GemmLaunch {
  gemm::GemmKind kind = gemm::GemmKind::kFprop;
  const int32_t* counts = nullptr;
  int32_t e_local = 0;
  int32_t m_capacity = 0;
  int32_t n = 0;  // weight rows
  int32_t k = 0;  // weight columns
  // kFprop / kFpropSwapAB: a = rows [m_cap, k], b = W.   kDgrad: a = grad_out [m_cap, n], b = W.
  // kWgrad: a = grad_out [m_cap, n], b = x [m_cap, k].
  const void* a = nullptr;
  const void* b = nullptr;
  // Gather producer (A's rows): row table, destination (what TMA then reads), ready counters.
  const void* const* gather_rows = nullptr;
  void* gathered = nullptr;
  int32_t* ready = nullptr;
  gemm::EpilogueParams epilogue;  // filled by the caller except the tile-independent fields
  bool tiles_for_empty_experts = false;  // WGRAD overwrite
  int num_sms = 0;
  cudaStream_t stream = nullptr;
};

using GemmLaunchFn = void (*)(const GemmLaunch&);

struct GemmKernelEntry {
  gemm::GemmKind kind;
  GemmEpilogueKind epilogue;
  bool gather;
  int block_m, block_n, stages;
  GemmLaunchFn launch;
  int (*smem_bytes)(int num_experts);  // dynamic shared memory for e_local experts
};

// The instantiation files append their kernels; gemm_kernels() (grouped_gemm.cu) collects them once.
void add_fprop_kernels(std::vector<GemmKernelEntry>& out);   // grouped_gemm_sm90_fprop.cu
void add_dgrad_kernels(std::vector<GemmKernelEntry>& out);   // grouped_gemm_sm90_dgrad.cu
void add_wgrad_kernels(std::vector<GemmKernelEntry>& out);   // grouped_gemm_sm90_wgrad.cu
void add_decode_kernels(std::vector<GemmKernelEntry>& out);  // grouped_gemm_sm90_decode.cu (swap-AB)
const std::vector<GemmKernelEntry>& gemm_kernels();

// Host-side TMA descriptor of a 2D BF16 row-major tensor [rows, cols] (row stride `ld` elements),
// box {64 columns, box_rows rows}, 128-byte swizzle (gemm_tma.cpp).
CUtensorMap make_tma_bf16_2d(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                             const char* what);

}  // namespace dist_moe::detail
