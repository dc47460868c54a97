// TMA descriptors for the grouped GEMMs (driver API cuTensorMapEncodeTiled).
//
// Every operand box is 128 bytes wide (128 E4M3, 64 BF16 or 32 FP32 columns: the 128B swizzle span, the width
// of one wgmma K-major row or one MN-major chunk, and one epilogue staging row) by `box_rows` rows,
// swizzled with CU_TENSOR_MAP_SWIZZLE_128B, which is the layout the wgmma descriptors in
// device/ptx/wgmma.cuh and the TMA epilogue writer describe; make_tma_2d_bytes' narrow boxes of
// bytes (block scales read with ordinary shared loads) are unswizzled. Loads zero-fill
// out-of-bounds parts of a box; stores skip them.
#include <cuda.h>

#include <cstdint>

#include "dist_moe/check.h"
#include "dist_moe/driver_api.h"
#include "dist_moe/error.h"
#include "gemm/grouped_gemm_launch.h"

namespace dist_moe::gemm {
namespace {

CUtensorMap encode(const void* base, int elem_bytes, int rank, const cuuint64_t* dims, const cuuint64_t* strides,
                   const cuuint32_t* box, CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  CUtensorMap map;
  const cuuint32_t element_stride[3] = {1, 1, 1};
  DMOE_CU_CHECK(driver().cuTensorMapEncodeTiled(
      &map,
      elem_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
      : elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
      static_cast<cuuint32_t>(rank), const_cast<void*>(base), dims, strides, box, element_stride,
      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

// A 2D map [rows, cols] of elem_bytes elements, rows ld_bytes apart, box {box_cols, box_rows}, after
// the checks every 2D operand shares (their messages name `what`).
CUtensorMap encode_2d(const void* base, int elem_bytes, int64_t rows, int64_t cols, int64_t ld_bytes, int64_t box_cols,
                      int box_rows, CUtensorMapSwizzle swizzle, const char* what) {
  DMOE_CHECK_ARG(base != nullptr, what, " is null");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(base) % 16 == 0, what, " must be 16-byte aligned (TMA)");
  DMOE_CHECK_ARG(rows >= 1 && cols >= box_cols, what, " must have at least 1 row and ", box_cols,
                 " columns, got ", rows, " x ", cols);
  DMOE_CHECK_ARG(ld_bytes % 16 == 0, what, " row stride must be a multiple of 16 bytes (TMA), got ", ld_bytes);
  DMOE_CHECK_ARG(rows <= (int64_t(1) << 31) - 1, what, " has ", rows, " rows; TMA coordinates are int32");
  DMOE_ASSERT(box_rows >= 1 && box_rows <= 256);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld_bytes)};  // bytes, dimension 1
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  return encode(base, elem_bytes, 2, dims, strides, box, swizzle);
}

}  // namespace

CUtensorMap make_tma_2d(const void* base, int elem_bytes, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                        const char* what) {
  DMOE_ASSERT(elem_bytes == 1 || elem_bytes == 2 || elem_bytes == 4);
  return encode_2d(base, elem_bytes, rows, cols, ld * elem_bytes, 128 / elem_bytes, box_rows,
                   CU_TENSOR_MAP_SWIZZLE_128B, what);
}

CUtensorMap make_tma_2d_bytes(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_cols, int box_rows,
                              const char* what) {
  DMOE_ASSERT(box_cols >= 16 && box_cols % 16 == 0 && box_cols <= 256);
  return encode_2d(base, 1, rows, cols, ld, box_cols, box_rows, CU_TENSOR_MAP_SWIZZLE_NONE, what);
}

CUtensorMap make_tma_3d(const void* base, int elem_bytes, int64_t d2, int64_t d1, int64_t d0, int box_rows,
                        const char* what) {
  DMOE_ASSERT(elem_bytes == 2 || elem_bytes == 4);
  const int64_t box_cols = 128 / elem_bytes;
  DMOE_CHECK_ARG(base != nullptr, what, " is null");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(base) % 16 == 0, what, " must be 16-byte aligned (TMA)");
  DMOE_CHECK_ARG(d0 >= box_cols && d1 >= 1 && d2 >= 1, what, " has an empty or too narrow dimension");
  DMOE_CHECK_ARG((d0 * elem_bytes) % 16 == 0, what, " row stride must be a multiple of 16 bytes (TMA)");
  DMOE_ASSERT(box_rows >= 1 && box_rows <= 256);
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d0), static_cast<cuuint64_t>(d1), static_cast<cuuint64_t>(d2)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d0 * elem_bytes), static_cast<cuuint64_t>(d1 * d0 * elem_bytes)};
  const cuuint32_t box[3] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows), 1};
  return encode(base, elem_bytes, 3, dims, strides, box);
}

}  // namespace dist_moe::gemm
