// cp.async (SM80+): 16-byte global -> shared copies that complete asynchronously, in commit
// groups. The memory-bound tile kernels keep several tiles of loads in flight with them without
// holding the bytes in registers (src/quant).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/ptx/special_registers.cuh"

namespace dist_moe::ptx {

#if defined(__CUDACC__)

// Copies 16 bytes from `src` to `dst` (shared), or writes 16 zero bytes when !valid (src-size 0:
// nothing is read; `src` must still be a mapped address).
DMOE_DEVICE void cp_async_16_zfill(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_addr(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}

// Closes the group of this thread's cp.async issued since the last commit.
DMOE_DEVICE void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

// Waits until at most `kPending` of this thread's committed groups are still in flight.
template <int kPending>
DMOE_DEVICE void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(kPending) : "memory");
}

// One warp: `vecs` 16-byte vectors from `src` (global, 16-byte aligned) into `dst` (shared), waited
// for: when it returns, every lane may read any of them. Every lane of the warp must call it.
DMOE_DEVICE void warp_copy_to_shared(void* dst, const void* src, int vecs, int lane) {
  for (int v = lane; v < vecs; v += 32)
    cp_async_16_zfill(static_cast<uint4*>(dst) + v, static_cast<const uint4*>(src) + v, true);
  cp_async_commit();
  cp_async_wait<0>();
  __syncwarp();
}

#endif  // __CUDACC__

}  // namespace dist_moe::ptx
