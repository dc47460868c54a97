// NVFP4 token rows expanded to FP16 for the prefill-sized NVFP4 GEMMs (kNvfp4ExpandedRows): the
// conversion the GEMM's producer warps otherwise repeat for every weight tile, done once per call.
// A warp per row; lane items are (stage, piece) pairs of the row, each reading two 16-byte code
// units and four scale bytes and writing the 128 bytes of the piece's token-box row (the NVFP4
// kernels' K order, gemm/nvfp4_operands.cuh; TMA applies the swizzle when the GEMM loads them).
// Bytes: C/2 + C/16 + 4 read (over NVLink for a peer's row), 2C written per row.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "dist_moe/check.h"
#include "dist_moe/device/gemm/nvfp4_operands.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kExpandThreads = 256;
constexpr int kWarps = kExpandThreads / 32;

__global__ void __launch_bounds__(kExpandThreads)
    expand_nvfp4_rows_kernel(const void* const* __restrict__ row_ptrs, const uint8_t* __restrict__ packed,
                             int64_t packed_stride, const int32_t* __restrict__ offsets_G1, int32_t num_groups,
                             int64_t capacity, int64_t cols, uint4* __restrict__ out, float* __restrict__ token_scale_inv) {
  const int lane = threadIdx.x & 31;
  const int64_t total = min(static_cast<int64_t>(offsets_G1[num_groups]), capacity);
  const int64_t scales_at = numeric::nvfp4_packed_row_scales_offset(cols);
  const int64_t items = cols / gemm::kNvfp4StageK * gemm::kNvfp4Pieces;
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); m < total;
       m += static_cast<int64_t>(gridDim.x) * kWarps) {
    const uint8_t* src = row_ptrs != nullptr ? static_cast<const uint8_t*>(row_ptrs[m]) : packed + m * packed_stride;
    uint4* row = out + m * (cols / 8);  // 8 FP16 per uint4
    if (src == nullptr) {  // a padding row: its products are 0
      for (int64_t i = lane; i < cols / 8; i += 32) row[i] = make_uint4(0, 0, 0, 0);
      if (lane == 0) token_scale_inv[m] = 0.0f;
      continue;
    }
    for (int64_t x = lane; x < items; x += 32) {
      const int64_t kb = x / gemm::kNvfp4Pieces;
      const int i = static_cast<int>(x % gemm::kNvfp4Pieces);
      const uint8_t* codes = src + kb * gemm::kNvfp4StageBytes;
      const uint4 lo = *reinterpret_cast<const uint4*>(codes + 16 * i);       // blocks 2i, 2i + 1 (q = 0, 2)
      const uint4 hi = *reinterpret_cast<const uint4*>(codes + 64 + 16 * i);  // blocks 8 + 2i, 9 + 2i (q = 1, 3)
      const uint8_t* sc = src + scales_at + kb * gemm::kNvfp4StageBlocks;
      const uint32_t s02 = *reinterpret_cast<const uint16_t*>(sc + 2 * i);
      const uint32_t s13 = *reinterpret_cast<const uint16_t*>(sc + 8 + 2 * i);
      const uint32_t t0 = gemm::nvfp4_scale_x2(s02 & 0xFFu), t2 = gemm::nvfp4_scale_x2(s02 >> 8);
      const uint32_t t1 = gemm::nvfp4_scale_x2(s13 & 0xFFu), t3 = gemm::nvfp4_scale_x2(s13 >> 8);
      uint4* box = row + (kb * gemm::kNvfp4StageK + 64 * i) / 8;
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // words 0 and 1 of each block: units 0-3, then 4-7
        uint32_t p0[4], p1[4], p2[4], p3[4];
        gemm::nvfp4_word_x2(half == 0 ? lo.x : lo.y, t0, p0);
        gemm::nvfp4_word_x2(half == 0 ? hi.x : hi.y, t1, p1);
        gemm::nvfp4_word_x2(half == 0 ? lo.z : lo.w, t2, p2);
        gemm::nvfp4_word_x2(half == 0 ? hi.z : hi.w, t3, p3);
#pragma unroll
        for (int j = 0; j < 4; ++j) box[4 * half + j] = make_uint4(p0[j], p1[j], p2[j], p3[j]);
      }
    }
    if (lane == 0)
      token_scale_inv[m] = *reinterpret_cast<const float*>(src + numeric::nvfp4_packed_row_token_scale_offset(cols));
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
  expand_nvfp4_rows_kernel<<<row_grid(capacity, kWarps), kExpandThreads, 0, stream>>>(
      row_ptrs, static_cast<const uint8_t*>(packed), packed_stride, groups.offsets_G1, groups.num_groups, capacity,
      cols, static_cast<uint4*>(out), token_scale_inv);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
