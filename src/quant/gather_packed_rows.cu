// Packed MXFP8 rows (a rank's tokens quantized at the source) gathered into the expert-major row
// bundle the MXFP8 GEMMs read: one warp per routed row, 16-byte copies of the codes and 4-byte
// copies of the scales. A pure copy: C + C / 32 bytes read (over NVLink for a peer's row) and
// written per routed row, against 2C read + C + C / 32 written by quantizing gathered BF16 rows.
#include <cuda_runtime.h>

#include <algorithm>

#include "dist_moe/check.h"
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kGatherThreads = 256;
constexpr int kWarps = kGatherThreads / 32;

__global__ void __launch_bounds__(kGatherThreads)
    gather_packed_rows_kernel(const void* const* __restrict__ row_ptrs, const int32_t* __restrict__ offsets_G1,
                              int32_t num_groups, int64_t capacity, int64_t cols, Mxfp8Out rows) {
  const int lane = threadIdx.x & 31;
  const int64_t total = min(static_cast<int64_t>(offsets_G1[num_groups]), capacity);
  const int64_t code_vecs = cols / 16, scale_words = cols / numeric::kMXBlock / 4;
  const int64_t scales_at = numeric::mxfp8_packed_row_scales_offset(cols);
  for (int64_t m = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); m < total;
       m += static_cast<int64_t>(gridDim.x) * kWarps) {
    const char* src = static_cast<const char*>(row_ptrs[m]);
    uint4* q = reinterpret_cast<uint4*>(rows.q + m * rows.q_row_stride);
    uint32_t* sc = reinterpret_cast<uint32_t*>(rows.scales + m * rows.scale_row_stride);
    if (src == nullptr) {  // a padding row
      for (int64_t i = lane; i < code_vecs; i += 32) q[i] = make_uint4(0, 0, 0, 0);
      for (int64_t i = lane; i < scale_words; i += 32) sc[i] = 0u;
      continue;
    }
    const uint4* src_q = reinterpret_cast<const uint4*>(src);
    const uint32_t* src_sc = reinterpret_cast<const uint32_t*>(src + scales_at);
    for (int64_t i = lane; i < code_vecs; i += 32) q[i] = src_q[i];
    for (int64_t i = lane; i < scale_words; i += 32) sc[i] = src_sc[i];
  }
}

}  // namespace

Mxfp8Out mxfp8_packed_rows_out(void* base, int64_t row_stride_bytes, int64_t cols) {
  DMOE_CHECK_ARG(cols % 128 == 0, "mxfp8_packed_rows_out: cols=", cols, " must be a multiple of 128");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(base) % 16 == 0 && row_stride_bytes % 16 == 0 &&
                     row_stride_bytes >= numeric::mxfp8_packed_row_bytes(cols),
                 "mxfp8_packed_rows_out: rows need 16-byte alignment and a stride of at least ",
                 numeric::mxfp8_packed_row_bytes(cols), " bytes, a multiple of 16 (got ", row_stride_bytes, ")");
  uint8_t* q = static_cast<uint8_t*>(base);
  return Mxfp8Out{q, row_stride_bytes, q + numeric::mxfp8_packed_row_scales_offset(cols), row_stride_bytes, 1};
}

void mxfp8_gather_packed_rows(const void* const* row_ptrs, const RowGroups& groups, int64_t capacity, int64_t cols,
                              const Mxfp8Out& rows, cudaStream_t stream) {
  const char* name = "mxfp8_gather_packed_rows";
  DMOE_CHECK_ARG(cols % 128 == 0, name, ": cols=", cols, " must be a multiple of 128");
  DMOE_CHECK_ARG(row_ptrs != nullptr && groups.offsets_G1 != nullptr && groups.num_groups >= 1, name,
                 ": row_ptrs and the group offsets are required");
  DMOE_CHECK_ARG(!rows.compact && rows.q_offset == nullptr && rows.scale_block_stride == 1, name,
                 ": the row bundle must be plain rows (block stride 1, not compact)");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(rows.q) % 16 == 0 && rows.q_row_stride % 16 == 0 &&
                     rows.q_row_stride >= cols && reinterpret_cast<uintptr_t>(rows.scales) % 4 == 0 &&
                     rows.scale_row_stride % 4 == 0 && rows.scale_row_stride >= cols / numeric::kMXBlock,
                 name, ": codes need 16-byte alignment and stride, scales 4-byte alignment and stride");
  if (capacity == 0) return;
  int device = 0, sms = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&device));
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  const int64_t blocks = std::min<int64_t>((capacity + kWarps - 1) / kWarps, int64_t{sms} * 8);
  gather_packed_rows_kernel<<<static_cast<unsigned>(blocks), kGatherThreads, 0, stream>>>(
      row_ptrs, groups.offsets_G1, groups.num_groups, capacity, cols, rows);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
