// The NCCL this build compiled against (definitions from CMakeLists.txt) and the one the dynamic
// loader gave this process (ncclGetVersion, and dladdr for its file).
#include <dlfcn.h>
#include <nccl.h>

#include "dist_moe/error.h"
#include "dist_moe/nccl_version.h"

namespace dist_moe {

NcclRuntimeInfo nccl_runtime_info() {
  NcclRuntimeInfo info;
  info.built_code = NCCL_VERSION_CODE;
  info.built_include_dir = DIST_MOE_NCCL_BUILT_INCLUDE_DIR;
  info.built_library = DIST_MOE_NCCL_BUILT_LIBRARY;
  info.minimum_code = DIST_MOE_NCCL_MIN_VERSION_CODE;
  int code = 0;
  if (ncclGetVersion(&code) == ncclSuccess) info.loaded_code = code;
  Dl_info where{};
  if (dladdr(reinterpret_cast<void*>(&ncclGetVersion), &where) != 0 && where.dli_fname != nullptr)
    info.loaded_path = where.dli_fname;
  return info;
}

void check_nccl_runtime_version() {
  const NcclRuntimeInfo info = nccl_runtime_info();
  const std::string problem = nccl_version_problem(info.built_code, info.loaded_code, info.minimum_code);
  if (problem.empty()) return;
  detail::fail(ErrorCode::kNccl, "NCCL ", nccl_version_string(info.loaded_code), " loaded from ", info.loaded_path,
               " is ", problem, "; this build was compiled against NCCL ", nccl_version_string(info.built_code), " (",
               info.built_library, ") and needs ", nccl_version_string(info.minimum_code),
               "+: make that library the one loaded (check LD_LIBRARY_PATH and LD_PRELOAD) or rebuild against the "
               "loaded one with -DDIST_MOE_NCCL_ROOT=<its folder>");
}

}  // namespace dist_moe
