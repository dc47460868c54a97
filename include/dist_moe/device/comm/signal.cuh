// Signals: counters in a peer's symmetric signal window that a producer bumps with a release at
// system scope after writing data for that peer, and that the peer waits on with acquire.
//
// Combine signal mode uses one counter per token of the owner: every expert rank, after storing a
// piece (a 4 KiB segment) of a route result row into the owner's combine window, adds 1 to the
// owner's counter of that token. The owner waits until the counter reaches (valid routes of the
// token) x (segments per row), reduces, and resets the counters at the end of its combine kernel. The next increment of a counter comes only
// after the next call's EP barrier, which the owner enters after the reset (stream order), so the
// reset cannot race with the next call's signals.
#pragma once

#include <cstdint>

#include "dist_moe/device/comm/ep_layout.h"
#include "dist_moe/device/comm/memory.cuh"
#include "dist_moe/device/comm/timeout.cuh"
#include "dist_moe/device/comm/window.cuh"

#if defined(__CUDACC__)

namespace dist_moe::comm {

// Publishes the data this warp wrote (all lanes) and adds `n` to `counter` (local or peer memory).
// Call from all lanes of the warp.
DMOE_DEVICE void warp_signal_add(uint32_t* counter, uint32_t n = 1u) {
  __syncwarp();
  if ((threadIdx.x & 31) == 0) {
    fence_acq_rel_sys();
    red_add_release_sys(counter, n);
  }
  __syncwarp();
}

// `n` route-result pieces of this rank's token `t` have been stored into owner `owner`'s combine
// window.
DMOE_DEVICE void warp_signal_route_done(const EpDeviceLayout& L, int owner, int t, uint32_t n = 1u) {
  warp_signal_add(token_counter_ptr(L, owner, t), n);
}

// Lane 0 waits until `expected` route results of token t have arrived in this rank's combine
// window; afterwards the whole warp may read them. Call from all lanes of the warp.
DMOE_DEVICE void warp_wait_token_routes(const EpDeviceLayout& L, int t, uint32_t expected) {
  if ((threadIdx.x & 31) == 0 && expected > 0)
    wait_count_reached_sys(token_counter_ptr(L, L.rank, t), expected, WaitContext{L.timeout_cycles, L.rank},
                           WaitSite::kCombineRoutes, -1, t);
  __syncwarp();
}

}  // namespace dist_moe::comm

#endif  // __CUDACC__
