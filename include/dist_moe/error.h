// Error model: one exception type for the whole library.
//
// `Error` carries an `ErrorCode` that says which kind of failure it is, so the PyTorch binding can
// map it to the exception upstream raises (kInvalidValue -> ValueError, kInvalidType ->
// TypeError, everything else -> RuntimeError). Messages name the field, the value and the bound.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace dist_moe {

enum class ErrorCode {
  kInvalidValue,  // a value out of its documented range (Python: ValueError)
  kInvalidType,   // a value of the wrong kind, e.g. an unsupported dtype (Python: TypeError)
  kRuntime,       // a valid request the current state cannot serve (Python: RuntimeError)
  kCuda,          // a CUDA runtime call failed
  kDriver,        // a CUDA driver call failed
  kNccl,          // an NCCL call failed
  kInternal,      // a broken internal invariant (a bug in Dist-MoE)
};

const char* to_string(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

namespace detail {
// Builds a message from stream-able parts: fail(ErrorCode::kInvalidValue, "x=", x, " must be ...").
template <typename... Parts>
[[noreturn]] void fail(ErrorCode code, const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(code, os.str());
}
[[noreturn]] void fail_at(ErrorCode code, const char* file, int line, const std::string& what);
}  // namespace detail

}  // namespace dist_moe

// Host-side check of an invariant the caller is responsible for (throws kInvalidValue).
#define DMOE_CHECK_ARG(cond, ...)                                              \
  do {                                                                         \
    if (!(cond)) ::dist_moe::detail::fail(::dist_moe::ErrorCode::kInvalidValue, __VA_ARGS__); \
  } while (0)

// Host-side check of an internal invariant (throws kInternal with file and line).
#define DMOE_ASSERT(cond)                                                                   \
  do {                                                                                      \
    if (!(cond))                                                                            \
      ::dist_moe::detail::fail_at(::dist_moe::ErrorCode::kInternal, __FILE__, __LINE__,     \
                                  "internal invariant violated: " #cond);                   \
  } while (0)
