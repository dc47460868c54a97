// TMA descriptors for the grouped GEMMs (driver API cuTensorMapEncodeTiled).
//
// Every operand tile is a box of 64 BF16 columns (128 bytes: the 128B swizzle span, the width of
// one wgmma K-major row or one MN-major chunk) by `box_rows` rows, swizzled with
// CU_TENSOR_MAP_SWIZZLE_128B, which is the layout the wgmma descriptors in
// device/ptx/wgmma.cuh describe. Out-of-bounds parts of a box are zero-filled.
#include <cuda.h>

#include <cstdint>

#include "dist_moe/check.h"
#include "dist_moe/driver_api.h"
#include "dist_moe/error.h"
#include "grouped_gemm_launch.h"

namespace dist_moe::detail {

CUtensorMap make_tma_bf16_2d(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                             const char* what) {
  DMOE_CHECK_ARG(base != nullptr, what, " is null");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(base) % 16 == 0, what, " must be 16-byte aligned (TMA)");
  DMOE_CHECK_ARG(rows >= 1 && cols >= 64, what, " must have at least 1 row and 64 columns, got ", rows, " x ", cols);
  DMOE_CHECK_ARG((ld * 2) % 16 == 0, what, " row stride must be a multiple of 16 bytes (TMA), got ", ld * 2);
  DMOE_CHECK_ARG(rows <= (int64_t(1) << 31) - 1, what, " has ", rows, " rows; TMA coordinates are int32");
  DMOE_ASSERT(box_rows >= 1 && box_rows <= 256);

  CUtensorMap map;
  const cuuint64_t global_dim[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t global_stride[1] = {static_cast<cuuint64_t>(ld) * 2};  // bytes, dimension 1
  const cuuint32_t box_dim[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_stride[2] = {1, 1};
  DMOE_CU_CHECK(driver().cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), global_dim,
                                       global_stride, box_dim, element_stride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

}  // namespace dist_moe::detail
