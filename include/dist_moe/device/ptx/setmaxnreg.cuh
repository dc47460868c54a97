// Per-warpgroup register reallocation (sm_90a). Every warp of the warpgroup must execute the same
// instruction; the kernel needs a register cap at entry (__launch_bounds__(threads, 1)), and each
// role must be one branch of a single if/else, or ptxas ignores it (warning C7508).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

template <uint32_t kRegs>
DMOE_DEVICE void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

template <uint32_t kRegs>
DMOE_DEVICE void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg takes a multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
