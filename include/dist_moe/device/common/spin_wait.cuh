// Timeouts for device spin-waits: every wait loop in the library owns a SpinTimer and, when it
// expires, gives up with an error instead of hanging (DESIGN.md §2.4).
//
// Kernels that issue wgmma must not contain any function call -- printf is one, even on a path no
// wgmma reaches -- or ptxas serializes all of their wgmmas (C7510). Their waits (gemm/pipeline.cuh,
// gemm/gather.cuh) therefore trap without a message when the timer expires.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/ptx/special_registers.cuh"

namespace dist_moe::common {

// Long enough for any legitimate wait (a whole kernel under compute-sanitizer), short enough that a
// lost signal surfaces as an error rather than a hung job.
inline constexpr uint64_t kSpinTimeoutNs = 60ull * 1000 * 1000 * 1000;

#if defined(__CUDACC__)

// Cheap to keep in a loop: reads the global timer only every 1024 polls.
struct SpinTimer {
  uint64_t start_ns = 0;
  uint32_t polls = 0;

  DMOE_DEVICE bool expired() {
    if ((++polls & 1023u) != 0) return false;
    const uint64_t now = ptx::globaltimer_ns();
    if (start_ns == 0) {
      start_ns = now;
      return false;
    }
    return now - start_ns > kSpinTimeoutNs;
  }
};

#endif  // __CUDACC__

}  // namespace dist_moe::common
