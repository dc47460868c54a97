// Packed rows (a rank's tokens quantized at the source: [C E4M3 codes | C / block scales]; NVFP4's
// [C/2 E2M1 | C/16 E4M3 | FP32 token_scale_inv | pad], copied whole) gathered
// into the expert-major row bundle the block-scaled GEMMs read: one warp per routed row, 16-byte
// copies of the codes, then the scales -- 4-byte words into MXFP8's row-major E8M0 scales, single
// FP32 scales into FP8-blockwise's k-block-major scale grid. A pure copy: C + C / 32 bytes read (over
// NVLink for a peer's row) and written per routed row, against 2C read + C + C / 32 written by
// quantizing gathered BF16 rows.
#include <cuda_runtime.h>

#include <algorithm>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/fp8_blockwise.cuh"
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "dist_moe/device/quant/mxfp8_rows.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kGatherThreads = 256;
constexpr int kWarps = kGatherThreads / 32;

template <class Scale, int kBlock>
__global__ void __launch_bounds__(kGatherThreads)
    gather_packed_rows_kernel(const void* const* __restrict__ row_ptrs, const int32_t* __restrict__ offsets_G1,
                              int32_t num_groups, int64_t capacity, int64_t cols, QuantizedOut<Scale> rows) {
  const int lane = threadIdx.x & 31;
  const int64_t total = min(static_cast<int64_t>(offsets_G1[num_groups]), capacity);
  const int64_t code_vecs = cols / 16, blocks = cols / kBlock;
  // Both packed layouts put the scales right after the C codes (numeric::*_packed_row_scales_offset).
  constexpr bool kWords = sizeof(Scale) == 1;  // MXFP8: row-major scale bytes, copied 4 at a time
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); m < total;
       m += static_cast<int64_t>(gridDim.x) * kWarps) {
    const char* src = static_cast<const char*>(row_ptrs[m]);
    uint4* q = reinterpret_cast<uint4*>(rows.q + m * rows.q_row_stride);
    Scale* sc = rows.scales + m * rows.scale_row_stride;
    if constexpr (kWords) {  // MXFP8 (the Mega kernel's x tasks copy with the same function)
      mxfp8_copy_packed_row(src, cols, q, reinterpret_cast<uint32_t*>(sc), lane);
    } else if (src == nullptr) {  // a padding row: what the quantizers write for a zero row
      for (int64_t i = lane; i < code_vecs; i += 32) q[i] = make_uint4(0, 0, 0, 0);
      // FP32 1.0 (numeric/fp8_blockwise.cuh: amax 0 -> scale 1)
      for (int64_t b = lane; b < blocks; b += 32) sc[b * rows.scale_block_stride] = 1.0f;
    } else {
      const uint4* src_q = reinterpret_cast<const uint4*>(src);
      for (int64_t i = lane; i < code_vecs; i += 32) q[i] = src_q[i];
      const Scale* src_sc = reinterpret_cast<const Scale*>(src + cols);
      for (int64_t b = lane; b < blocks; b += 32) sc[b * rows.scale_block_stride] = src_sc[b];
    }
  }
}

template <class Scale>
QuantizedOut<Scale> packed_rows_out(const char* name, void* base, int64_t row_stride_bytes, int64_t cols,
                                    int64_t packed_bytes) {
  DMOE_CHECK_ARG(cols % 128 == 0, name, ": cols=", cols, " must be a multiple of 128");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_stride_bytes % 16 == 0 &&
                     row_stride_bytes >= packed_bytes,
                 name, ": rows need 16-byte alignment and a stride of at least ", packed_bytes,
                 " bytes, a multiple of 16 (got ", row_stride_bytes, ")");
  uint8_t* q = static_cast<uint8_t*>(base);
  return QuantizedOut<Scale>{q, row_stride_bytes, reinterpret_cast<Scale*>(q + cols),
                             row_stride_bytes / static_cast<int64_t>(sizeof(Scale)), 1};
}

template <class Scale, int kBlock>
void gather_packed_rows(const char* name, const void* const* row_ptrs, const RowGroups& groups, int64_t capacity,
                        int64_t cols, const QuantizedOut<Scale>& rows, cudaStream_t stream) {
  DMOE_CHECK_ARG(cols % 128 == 0, name, ": cols=", cols, " must be a multiple of 128");
  DMOE_CHECK_ARG(row_ptrs != nullptr && groups.offsets_G1 != nullptr && groups.num_groups >= 1, name,
                 ": row_ptrs and the group offsets are required");
  DMOE_CHECK_ARG(!rows.compact && rows.q_offset == nullptr, name, ": the row bundle cannot be compact");
  DMOE_CHECK_ARG(rows.scale_word_ld == 0, name, ": the row bundle's scales are [rows, D / block] (no scale_word_ld)");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(rows.q) % 16 == 0 && rows.q_row_stride % 16 == 0 &&
                     rows.q_row_stride >= cols,
                 name, ": codes need 16-byte alignment and a row stride of at least cols, a multiple of 16");
  if constexpr (sizeof(Scale) == 1)
    DMOE_CHECK_ARG(rows.scale_block_stride == 1 && reinterpret_cast<uintptr_t>(rows.scales) % 4 == 0 &&
                       rows.scale_row_stride % 4 == 0 && rows.scale_row_stride >= cols / kBlock,
                   name, ": the scales must be plain rows (block stride 1), 4-byte aligned with a stride of 4");
  if (capacity == 0) return;
  gather_packed_rows_kernel<Scale, kBlock><<<row_grid(capacity, kWarps), kGatherThreads, 0, stream>>>(
      row_ptrs, groups.offsets_G1, groups.num_groups, capacity, cols, rows);
  DMOE_CUDA_CHECK_LAUNCH();
}

// NVFP4 packed rows are self-contained ([C/2 | C/16 | FP32 | pad]): a routed row is one copy of
// its bytes; a padding row is all zeros (zero codes, scales and token_scale_inv: its products are 0).
__global__ void __launch_bounds__(kGatherThreads)
    gather_nvfp4_rows_kernel(const void* const* __restrict__ row_ptrs, const int32_t* __restrict__ offsets_G1,
                             int32_t num_groups, int64_t capacity, int64_t row_vecs, uint4* __restrict__ rows) {
  const int lane = threadIdx.x & 31;
  const int64_t total = min(static_cast<int64_t>(offsets_G1[num_groups]), capacity);
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); m < total;
       m += static_cast<int64_t>(gridDim.x) * kWarps) {
    const uint4* src = static_cast<const uint4*>(row_ptrs[m]);
    uint4* dst = rows + m * row_vecs;
    for (int64_t i = lane; i < row_vecs; i += 32) dst[i] = src != nullptr ? src[i] : make_uint4(0, 0, 0, 0);
  }
}

}  // namespace

void nvfp4_gather_packed_rows(const void* const* row_ptrs, const RowGroups& groups, int64_t capacity, int64_t cols,
                              void* rows, cudaStream_t stream) {
  constexpr const char* name = "nvfp4_gather_packed_rows";
  DMOE_CHECK_ARG(cols % 256 == 0, name, ": cols=", cols, " must be a multiple of 256");
  DMOE_CHECK_ARG(row_ptrs != nullptr && groups.offsets_G1 != nullptr && groups.num_groups >= 1 && rows != nullptr,
                 name, ": row_ptrs, the group offsets and rows are required");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(rows) % 16 == 0, name, ": rows must be 16-byte aligned");
  if (capacity == 0) return;
  gather_nvfp4_rows_kernel<<<row_grid(capacity, kWarps), kGatherThreads, 0, stream>>>(
      row_ptrs, groups.offsets_G1, groups.num_groups, capacity, nvfp4_packed_row_bytes(cols) / 16,
      static_cast<uint4*>(rows));
  DMOE_CUDA_CHECK_LAUNCH();
}

Mxfp8Out mxfp8_packed_rows_out(void* base, int64_t row_stride_bytes, int64_t cols) {
  return packed_rows_out<uint8_t>("mxfp8_packed_rows_out", base, row_stride_bytes, cols,
                                  numeric::mxfp8_packed_row_bytes(cols));
}

Fp8BlockwiseOut fp8_blockwise_packed_rows_out(void* base, int64_t row_stride_bytes, int64_t cols) {
  return packed_rows_out<float>("fp8_blockwise_packed_rows_out", base, row_stride_bytes, cols,
                                numeric::fp8_blockwise_packed_row_bytes(cols));
}

void mxfp8_gather_packed_rows(const void* const* row_ptrs, const RowGroups& groups, int64_t capacity, int64_t cols,
                              const Mxfp8Out& rows, cudaStream_t stream) {
  gather_packed_rows<uint8_t, numeric::kMXBlock>("mxfp8_gather_packed_rows", row_ptrs, groups, capacity, cols, rows,
                                                 stream);
}

void fp8_blockwise_gather_packed_rows(const void* const* row_ptrs, const RowGroups& groups, int64_t capacity,
                                      int64_t cols, const Fp8BlockwiseOut& rows, cudaStream_t stream) {
  gather_packed_rows<float, numeric::kFP8BlockwiseBlock>("fp8_blockwise_gather_packed_rows", row_ptrs, groups,
                                                         capacity, cols, rows, stream);
}

}  // namespace dist_moe::quant
