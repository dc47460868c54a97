// Bounded spin-waits: every wait in a Dist-MoE kernel gives up after a configurable number of
// clock64() cycles, prints one line naming the rank, the peer and what it waited for, then traps.
//
// The budget comes from the host (Communicator::timeout_cycles(): milliseconds times the SM clock
// rate), so a hung peer turns into a diagnosable error instead of a silent hang.
#pragma once

#include <cstdint>
#include <cstdio>

#include "dist_moe/device/comm/memory.cuh"

#if defined(__CUDACC__)

namespace dist_moe::comm {

// What a wait was for; printed in the timeout line.
enum class WaitSite : int {
  kEpBarrier = 0,       // EP barrier arrival of a peer (signal window inbox)
  kGridBarrier = 1,     // other CTAs of this kernel (grid barrier)
  kCombineRoutes = 2,   // route results of one token from expert ranks (combine signal mode)
  kNcclLsaBarrier = 3,  // NCCL LSA barrier arrival of a peer
  kTest = 4,            // test / benchmark waits
  kPublishArrival = 5,  // a peer's "ids published" arrival (fused route kernel)
  kRowsArrival = 6,     // a peer's "x rows published" arrival (fused route kernel)
};

DMOE_DEVICE const char* wait_site_name(WaitSite s) {
  switch (s) {
    case WaitSite::kEpBarrier: return "EP barrier arrival";
    case WaitSite::kGridBarrier: return "grid barrier (other CTAs of this kernel)";
    case WaitSite::kCombineRoutes: return "combine route results of a token";
    case WaitSite::kNcclLsaBarrier: return "NCCL LSA barrier arrival";
    case WaitSite::kPublishArrival: return "publish arrival of a peer (fused route)";
    case WaitSite::kRowsArrival: return "x rows arrival of a peer (fused route)";
    default: return "test flag";
  }
}

// Who waits, and for how long at most.
struct WaitContext {
  uint64_t timeout_cycles;  // clock64() cycles; the host never passes 0
  int rank;                 // this EP rank, for the diagnostic
};

// Prints the diagnostic and traps. `peer` is -1 when the wait is not about one peer; `index` is an
// extra number (token, slot) or -1.
__device__ __noinline__ inline void timeout_trap(const WaitContext& ctx, WaitSite site, int peer, int index,
                                                 uint32_t expected, uint32_t observed) {
  printf("DistMoE timeout: rank %d gave up waiting for %s (peer %d, index %d): expected %u, observed %u after "
         "%llu cycles (set DMOE_COMM_TIMEOUT_MS to change the limit)\n",
         ctx.rank, wait_site_name(site), peer, index, expected, observed,
         static_cast<unsigned long long>(ctx.timeout_cycles));
  __trap();
}

// Spins until the 32-bit value at `ptr`, read with acquire at system scope, has reached `target`
// in wrap-around (epoch) order: (int32)(value - target) >= 0. Returns the value seen.
DMOE_DEVICE uint32_t wait_epoch_reached_sys(const uint32_t* ptr, uint32_t target, const WaitContext& ctx,
                                            WaitSite site, int peer, int index = -1) {
  const long long start = clock64();
  uint32_t v = ld_acquire_sys(ptr);
  while (static_cast<int32_t>(v - target) < 0) {
    if (static_cast<uint64_t>(clock64() - start) > ctx.timeout_cycles) timeout_trap(ctx, site, peer, index, target, v);
    v = ld_acquire_sys(ptr);
  }
  return v;
}

// Spins until the counter at `ptr` (acquire, system scope) is at least `target` (plain order:
// counters start at 0 and are reset by their owner). Returns the value seen.
DMOE_DEVICE uint32_t wait_count_reached_sys(const uint32_t* ptr, uint32_t target, const WaitContext& ctx,
                                            WaitSite site, int peer, int index = -1) {
  const long long start = clock64();
  uint32_t v = ld_acquire_sys(ptr);
  while (v < target) {
    if (static_cast<uint64_t>(clock64() - start) > ctx.timeout_cycles) timeout_trap(ctx, site, peer, index, target, v);
    v = ld_acquire_sys(ptr);
  }
  return v;
}

}  // namespace dist_moe::comm

#endif  // __CUDACC__
