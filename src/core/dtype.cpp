#include "dist_moe/dtype.h"

namespace dist_moe {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kFloat32: return "float32";
    case DType::kInt16: return "int16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kFloat8E4M3: return "float8_e4m3fn";
    case DType::kFloat8E8M0: return "float8_e8m0fnu";
    case DType::kFloat4E2M1x2: return "float4_e2m1fn_x2";
  }
  return "unknown";
}

std::size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::kBFloat16:
    case DType::kFloat16:
    case DType::kInt16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFloat8E4M3:
    case DType::kFloat8E8M0:
    case DType::kFloat4E2M1x2: return 1;
  }
  return 0;
}

}  // namespace dist_moe
