// Internal: the generic launch description the host API fills, and the compiled kernel table.
//
// Each grouped_gemm_sm90_*.cu file instantiates a few kernels (one per tile configuration) and
// exposes them as GemmKernelEntry; grouped_gemm.cu picks one by (kind, epilogue, gather, tile,
// schedule, store path). Nothing here is part of the public API.
#pragma once

#include <cuda.h>
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
  // Outputs: out (FPROP / DGRAD / WGRAD; unused with scatter), h1 (nullptr: dropped) and h2 (W13).
  void* out = nullptr;
  void* h1 = nullptr;
  void* h2 = nullptr;
  // Device-side byte offsets added to the row buffers at run time (nullptr = 0). a_offset applies
  // to the A rows (or to `gathered` when the gather producer runs), b_offset to WGRAD's x rows.
  const int64_t* a_offset = nullptr;
  const int64_t* b_offset = nullptr;
  const int64_t* out_offset = nullptr;
  const int64_t* h1_offset = nullptr;
  const int64_t* h2_offset = nullptr;
  // Global workspace for this launch's patched tensor maps ([num_sms][kNumMaps]); set by the host
  // API when any offset is given.
  CUtensorMap* tensormap_workspace = nullptr;
  // Dynamic tile schedule: this (device, stream)'s self-resetting counter pair; nullptr = static.
  int32_t* tile_counter = nullptr;
  // Gather producer (A's rows): row table, destination (what TMA then reads), ready counters.
  const void* const* gather_rows = nullptr;
  void* gathered = nullptr;
  int32_t* ready = nullptr;
  gemm::EpilogueParams epilogue;  // filled by the caller except the tile-independent fields
  bool tiles_for_empty_experts = false;  // WGRAD overwrite
  int num_sms = 0;
  cudaStream_t stream = nullptr;

  bool has_offsets() const { return a_offset || b_offset || out_offset || h1_offset || h2_offset; }
};

using GemmLaunchFn = void (*)(const GemmLaunch&);

struct GemmKernelEntry {
  gemm::GemmKind kind;
  GemmEpilogueKind epilogue;
  bool gather;
  int block_m, block_n, stages;
  int cluster_m;   // CTAs per cluster along M (2: TMA multicast of B; WGRAD only)
  bool pingpong;   // consumer schedule (mainloop.cuh)
  bool tma_store;  // epilogue writer (epilogue_staging.cuh)
  GemmLaunchFn launch;
  int (*smem_bytes)(int num_experts);  // dynamic shared memory for e_local experts
};

// The instantiation files append their kernels; gemm_kernels() (grouped_gemm.cu) collects them once.
void add_fprop_kernels(std::vector<GemmKernelEntry>& out);   // grouped_gemm_sm90_fprop.cu
void add_w13_kernels(std::vector<GemmKernelEntry>& out);     // grouped_gemm_sm90_w13.cu (SwiGLU)
void add_dgrad_kernels(std::vector<GemmKernelEntry>& out);   // grouped_gemm_sm90_dgrad.cu
void add_wgrad_kernels(std::vector<GemmKernelEntry>& out);   // grouped_gemm_sm90_wgrad.cu
void add_decode_kernels(std::vector<GemmKernelEntry>& out);  // grouped_gemm_sm90_decode.cu (swap-AB)
const std::vector<GemmKernelEntry>& gemm_kernels();

// Host-side TMA descriptors (gemm_tma.cpp), all with the 128-byte swizzle the wgmma descriptors
// and the epilogue staging assume: boxes are 128 bytes wide (64 BF16 or 32 FP32 values).
// 2D row-major tensor [rows, cols] (row stride `ld` elements), box {128 bytes, box_rows rows}.
CUtensorMap make_tma_2d(const void* base, int elem_bytes, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                        const char* what);
// 3D tensor [d2, d1, d0] (WGRAD's [E, n, k] output), box {128 bytes, box_rows, 1}.
CUtensorMap make_tma_3d(const void* base, int elem_bytes, int64_t d2, int64_t d1, int64_t d0, int box_rows,
                        const char* what);

}  // namespace dist_moe::detail
