// Element types that cross the public API.
#pragma once

#include <cstddef>

namespace dist_moe {

enum class DType {
  kBFloat16,
  kFloat16,
  kFloat32,
  kInt16,
  kInt32,
  kInt64,
  kFloat8E4M3,  // OCP E4M3 ("fn": no infinities, one NaN pattern per sign)
  kFloat8E8M0,  // unsigned power-of-two scale, bias 127, 0xFF = NaN
  kFloat4E2M1x2,  // two E2M1 values per byte, low nibble first
};

const char* to_string(DType dtype);
// Bytes per element; kFloat4E2M1x2 counts one byte per packed pair.
std::size_t element_size(DType dtype);

}  // namespace dist_moe
