#include "dist_moe/error.h"

namespace dist_moe {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidValue: return "invalid value";
    case ErrorCode::kInvalidType: return "invalid type";
    case ErrorCode::kRuntime: return "runtime error";
    case ErrorCode::kCuda: return "CUDA error";
    case ErrorCode::kDriver: return "CUDA driver error";
    case ErrorCode::kNccl: return "NCCL error";
    case ErrorCode::kInternal: return "internal error";
  }
  return "unknown error";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

namespace detail {
void fail_at(ErrorCode code, const char* file, int line, const std::string& what) {
  throw Error(code, what + " [" + file + ":" + std::to_string(line) + "]");
}
}  // namespace detail

}  // namespace dist_moe
