// Which NCCL a process may run with. The rules are host-only (src/core, tested on the CPU); the
// facts about this build and this process come from src/comm/nccl_version.cpp (CUDA builds).
#pragma once

#include <string>

namespace dist_moe {

// ncclGetVersion's code as text: 22809 -> "2.28.9" (codes below 10000, NCCL <= 2.8, use 1000 per major).
std::string nccl_version_string(int code);

// Empty when an NCCL of version `loaded` can serve a build compiled against `built`; else why not.
// It must be at least `minimum` (what our device-API use needs), at least the headers' version, and
// of the headers' major.minor: the device API's structures are compiled in from the headers.
std::string nccl_version_problem(int built, int loaded, int minimum);

struct NcclRuntimeInfo {
  int built_code = 0;            // NCCL_VERSION_CODE of the headers we compiled against
  std::string built_include_dir;  // where those headers are
  std::string built_library;      // the library we linked
  int minimum_code = 0;           // what our device-API use needs
  int loaded_code = 0;            // ncclGetVersion of the library this process loaded (0: the call failed)
  std::string loaded_path;        // that library's file
};

// CUDA builds only; loads nothing new and needs no GPU (libnccl is linked into the program).
NcclRuntimeInfo nccl_runtime_info();

// Throws Error(kNccl) with one line naming the built and the loaded NCCL when they do not fit.
// Called before the first NCCL call of a Communicator.
void check_nccl_runtime_version();

}  // namespace dist_moe
