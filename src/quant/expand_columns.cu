// fp8_blockwise_expand_columns: a compact FP8-blockwise column bundle (E4M3 [C, R], FP32 scales
// [R / 128, C] after it) laid out again as the strided columns the FP8-blockwise WGRAD's TMA maps
// read ([C, capacity]: the maps' row stride is a host value, R is known on the device only).
//
// A copy: C data rows of R bytes to their strided places, and the scale grid, whose C * R / 32
// bytes are contiguous on both sides, as C / 32 more rows of R bytes. Grid: (capacity / 4096 row
// slices) x (C + C / 32 rows); a CTA moves one 4 KiB slice with one 16-byte load and store per
// thread, and slices past R return at once.
#include "dist_moe/check.h"
#include "dist_moe/device/numeric/fp8_blockwise.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kExpandThreads = 256;
constexpr int64_t kSliceBytes = kExpandThreads * 16;

__global__ void __launch_bounds__(kExpandThreads)
    fp8_blockwise_expand_columns_kernel(Fp8BlockwiseIn in, RowGroups groups, int64_t C, Fp8BlockwiseOut out) {
  const int64_t R = __ldg(groups.offsets_G1 + groups.num_groups);
  if (R % numeric::kFP8BlockwiseBlock != 0) {  // whole 128-token blocks, as the quantizer wrote them
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) layout_trap("the columns' token count", R, 128);
    return;
  }
  const int64_t at = blockIdx.x * kSliceBytes + threadIdx.x * 16;
  if (at >= R) return;
  const uint8_t* bundle = in.q + (in.q_offset != nullptr ? *in.q_offset : 0);
  const int64_t row = blockIdx.y;
  const uint8_t* src;
  uint8_t* dst;
  if (row < C) {
    src = bundle + row * R;
    dst = out.q + row * out.q_row_stride;
  } else {  // the scale grid, row (row - C) of its C / 32 rows of R bytes
    const int64_t j = row - C;
    src = bundle + numeric::fp8_blockwise_compact_columns_scales_offset(C, R) + j * R;
    dst = reinterpret_cast<uint8_t*>(out.scales) + j * R;
  }
  *reinterpret_cast<uint4*>(dst + at) = __ldg(reinterpret_cast<const uint4*>(src + at));
}

}  // namespace

void fp8_blockwise_expand_columns(const Fp8BlockwiseIn& compact, const RowGroups& groups, int64_t cols,
                                  int64_t capacity, const Fp8BlockwiseOut& out, cudaStream_t stream) {
  constexpr const char* name = "fp8_blockwise_expand_columns";
  DMOE_CHECK_ARG(compact.compact && compact.q != nullptr, name, ": the input must be a compact column bundle");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(compact.q) % 16 == 0, name, ": the compact bundle must be 16-byte aligned");
  DMOE_CHECK_ARG(cols > 0 && cols % numeric::kFP8BlockwiseBlock == 0, name, ": cols=", cols,
                 " must be a positive multiple of 128");
  DMOE_CHECK_ARG(capacity >= 0 && capacity % numeric::kFP8BlockwiseBlock == 0, name, ": capacity ", capacity,
                 " must be a multiple of 128");
  DMOE_CHECK_ARG(out.q != nullptr && out.scales != nullptr && !out.compact, name,
                 ": the output is the strided columns (q and scales, not compact)");
  DMOE_CHECK_ARG(out.q_row_stride >= capacity && out.q_row_stride % 16 == 0, name, ": the output row stride ",
                 out.q_row_stride, " must be a multiple of 16 and >= capacity");
  DMOE_CHECK_ARG(out.scale_row_stride == 1 && out.scale_block_stride == cols, name,
                 ": the output scales must be [capacity / 128, cols] (scale_row_stride 1, scale_block_stride cols)");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(out.q) % 16 == 0 && reinterpret_cast<uintptr_t>(out.scales) % 16 == 0,
                 name, ": the output data and scales must be 16-byte aligned");
  DMOE_CHECK_ARG(groups.num_groups >= 1, name, ": at least one group");
  DMOE_CHECK_ARG(cols + cols / 32 <= 65535, name, ": cols=", cols, " exceeds the grid's row count");
  if (capacity == 0) return;
  const dim3 grid(static_cast<unsigned>((capacity + kSliceBytes - 1) / kSliceBytes),
                  static_cast<unsigned>(cols + cols / 32));
  fp8_blockwise_expand_columns_kernel<<<grid, kExpandThreads, 0, stream>>>(compact, groups, cols, out);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
