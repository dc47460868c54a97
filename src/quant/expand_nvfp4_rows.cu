// NVFP4 token rows expanded to FP16 for the prefill-sized NVFP4 GEMMs (kNvfp4ExpandedRows): the
// conversion the GEMM's producer warps otherwise repeat for every weight tile, done once per call.
// A warp takes up to kStagesPerItem stages of a row at a time; in every stage lane L writes the
// stage's 16-byte unit L (piece L / 8, unit L % 8 of the piece's token-box row in the NVFP4 kernels'
// K order, gemm/nvfp4_operands.cuh), so each store instruction writes 512 contiguous bytes
// (nvfp4_expand_row_stages, device/quant/nvfp4_rows.cuh: shared with the Mega h2 hand-off).
// Bytes: C/2 + C/16 + 4 read (over NVLink for a peer's row), 2C written per row.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "dist_moe/check.h"
#include "dist_moe/device/gemm/nvfp4_operands.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"
#include "dist_moe/device/quant/nvfp4_rows.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kExpandThreads = 256;
constexpr int kWarps = kExpandThreads / 32;
constexpr int kStagesPerItem = 8;  // loads in flight per warp: 8 x 144 bytes (4: 2-5% slower, s28 r6)

// A row's items: its stages in groups of kStagesPerItem (the last one partial).
__host__ __device__ constexpr int64_t items_per_row(int64_t cols) {
  return (cols / gemm::kNvfp4StageK + kStagesPerItem - 1) / kStagesPerItem;
}

__global__ void __launch_bounds__(kExpandThreads)
    expand_nvfp4_rows_kernel(const void* const* __restrict__ row_ptrs, const uint8_t* __restrict__ packed,
                             int64_t packed_stride, RowGroups groups, int64_t capacity, int64_t cols,
                             uint4* __restrict__ out, float* __restrict__ token_scale_inv) {
  const int lane = threadIdx.x & 31;
  const Nvfp4ExpandLane l(lane);
  const int64_t total = min(static_cast<int64_t>(groups.offsets_G1[groups.num_groups]), capacity);
  const int64_t stages = cols / gemm::kNvfp4StageK;
  const int64_t row_items = items_per_row(cols);
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); item < total * row_items;
       item += static_cast<int64_t>(gridDim.x) * kWarps) {
    const int64_t m = item / row_items, kb0 = (item % row_items) * kStagesPerItem;
    if (groups.counts_G != nullptr && !is_token_row(groups, m)) continue;  // a group's padding: untouched
    const int count = static_cast<int>(min(static_cast<int64_t>(kStagesPerItem), stages - kb0));
    const uint8_t* src = row_ptrs != nullptr ? static_cast<const uint8_t*>(row_ptrs[m]) : packed + m * packed_stride;
    uint4* units = out + m * (cols / 8) + kb0 * kNvfp4UnitsPerStage + lane;  // 8 FP16 per uint4
    nvfp4_expand_row_stages<kStagesPerItem>(l, src, cols, kb0, count, units, token_scale_inv + m);
  }
}

}  // namespace

void nvfp4_expand_rows(const void* const* row_ptrs, const void* packed, int64_t packed_stride, const RowGroups& groups,
                       int64_t capacity, int64_t cols, void* out, float* token_scale_inv, cudaStream_t stream) {
  constexpr const char* name = "nvfp4_expand_rows";
  DMOE_CHECK_ARG(cols % 256 == 0, name, ": cols=", cols, " must be a multiple of 256");
  DMOE_CHECK_ARG((row_ptrs != nullptr) != (packed != nullptr), name, ": give row_ptrs or packed rows, not both");
  DMOE_CHECK_ARG(packed == nullptr || (reinterpret_cast<uintptr_t>(packed) % 16 == 0 && packed_stride % 16 == 0 &&
                                       packed_stride >= nvfp4_packed_row_bytes(cols)),
                 name, ": packed rows need 16-byte alignment and a stride of at least ", nvfp4_packed_row_bytes(cols),
                 " bytes, a multiple of 16");
  DMOE_CHECK_ARG(groups.offsets_G1 != nullptr && groups.num_groups >= 1 && out != nullptr && token_scale_inv != nullptr,
                 name, ": the group offsets, out and token_scale_inv are required");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(out) % 16 == 0, name, ": out must be 16-byte aligned");
  if (capacity == 0) return;
  const int64_t items = capacity * items_per_row(cols);
  expand_nvfp4_rows_kernel<<<row_grid(items, kWarps), kExpandThreads, 0, stream>>>(
      row_ptrs, static_cast<const uint8_t*>(packed), packed_stride, groups, capacity, cols, static_cast<uint4*>(out),
      token_scale_inv);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
