// Barriers with timeouts: across the EP team (one CTA per rank takes part), across the CTAs of one
// kernel (grid barrier, needs a co-resident grid: cooperative launch), and NCCL's LSA barrier with
// a bounded wait.
//
// EP barrier protocol (epoch based, self-resetting, no atomics):
//   every participating CTA reads its local epoch e of the slot, then thread p (p != rank) stores
//   e+1 with release.sys into word [slot][rank] of peer p's inbox, and polls its own inbox word
//   [slot][p] with acquire.sys until it reaches e+1 (wrap-around compare). Thread 0 then stores e+1
//   as the slot's local epoch. All writes this GPU made before the barrier (earlier kernels on the
//   stream, and this kernel's CTAs when a grid barrier precedes it) are visible to every peer after
//   it: kernel boundaries plus the fence.acq_rel.sys each signalling thread issues before its
//   release store.
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "dist_moe/device/comm/ep_layout.h"
#include "dist_moe/device/comm/memory.cuh"
#include "dist_moe/device/comm/timeout.cuh"
#include "dist_moe/device/comm/window.cuh"

#if defined(__CUDACC__)

namespace dist_moe::comm {

// EP barrier for one CTA per rank (all threads of the CTA call it; blockDim.x >= 1). Every rank
// must call it on the same slot the same number of times.
DMOE_DEVICE void ep_barrier_cta(const EpDeviceLayout& L, int slot) {
  __syncthreads();
  const uint32_t next = *reinterpret_cast<volatile uint32_t*>(&L.state->barrier_epoch[slot]) + 1u;
  const WaitContext ctx{L.timeout_cycles, L.rank};
  for (int p = threadIdx.x; p < L.world; p += blockDim.x) {
    if (p == L.rank) continue;
    fence_acq_rel_sys();
    st_release_sys(barrier_inbox_ptr(L, p, slot, L.rank), next);
  }
  for (int p = threadIdx.x; p < L.world; p += blockDim.x) {
    if (p == L.rank) continue;
    wait_epoch_reached_sys(barrier_inbox_ptr(L, L.rank, slot, p), next, ctx, WaitSite::kEpBarrier, p, slot);
  }
  __syncthreads();
  if (threadIdx.x == 0) L.state->barrier_epoch[slot] = next;
  __syncthreads();
}

// Grid barrier across all CTAs of a co-resident grid (launch with cudaLaunchAttributeCooperative).
// `count` and `gen` start at 0; count returns to 0 after every barrier.
DMOE_DEVICE void grid_barrier(uint32_t* count, uint32_t* gen, uint32_t num_ctas, const WaitContext& ctx) {
  __syncthreads();
  if (num_ctas > 1 && threadIdx.x == 0) {
    const uint32_t my_gen = ld_acquire_gpu(gen);
    const uint32_t arrived = atom_add_acq_rel_gpu(count, 1u);
    if (arrived == num_ctas - 1) {
      st_relaxed_gpu(count, 0u);
      st_release_gpu(gen, my_gen + 1u);
    } else {
      const long long start = clock64();
      uint32_t g = ld_acquire_gpu(gen);
      while (g == my_gen) {
        if (static_cast<uint64_t>(clock64() - start) > ctx.timeout_cycles)
          timeout_trap(ctx, WaitSite::kGridBarrier, -1, static_cast<int>(blockIdx.x), num_ctas, ld_relaxed_gpu(count));
        g = ld_acquire_gpu(gen);
      }
    }
  }
  __syncthreads();
}

// The grid barrier's budget is twice the EP budget: CTAs waiting here may be waiting for CTA 0's EP
// barrier, whose own (more precise) timeout line must come first.
DMOE_DEVICE void grid_barrier(const EpDeviceLayout& L, int id) {
  grid_barrier(&L.state->grid_count[id], &L.state->grid_gen[id], gridDim.x,
               WaitContext{2 * L.timeout_cycles, L.rank});
}

// ---- split EP barrier: one arrival per rank, every CTA of the grid waits --------------------------
//
// The EP barrier without grid barriers, for kernels whose every CTA needs the peers' data:
//   const uint32_t next = split_barrier_begin(L, slot);   // every CTA, first thing
//   ... pre-barrier work (e.g. stores to peers) ...
//   split_barrier_ready(L, slot, next);                    // every CTA: fence, count; the last
//                                                          // CTA to get here sends the arrival
//   split_barrier_wait(L, slot, next);                     // every CTA: wait for every peer
// Same inbox words and epochs as ep_barrier_cta (the two interoperate on one slot). Needs a
// co-resident grid (cooperative launch): the peers' arrivals wait for this grid's last ready CTA
// (and with_self, this grid's own waits do).
// Why it is safe to advance barrier_epoch in the last ready CTA: every CTA read it in begin(),
// before it counted itself ready.

// The slot's next epoch (one thread's load). split_barrier_begin shares it with the CTA; a kernel
// that loads other state at its start may share it through its own __syncthreads instead.
DMOE_DEVICE uint32_t split_barrier_next_epoch(const EpDeviceLayout& L, int slot) {
  return *reinterpret_cast<volatile uint32_t*>(&L.state->barrier_epoch[slot]) + 1u;
}

// Reads the slot's next epoch. Every CTA of the grid calls it before split_barrier_ready.
DMOE_DEVICE uint32_t split_barrier_begin(const EpDeviceLayout& L, int slot) {
  __shared__ uint32_t s_next;
  __syncthreads();
  if (threadIdx.x == 0) s_next = split_barrier_next_epoch(L, slot);
  __syncthreads();
  return s_next;
}

// Counts this CTA ready (its earlier stores, to peers or local, are published at system scope);
// the last CTA of the grid stores the arrival `next` into every peer's inbox and advances the
// local epoch. Call from all threads of every CTA.
// with_self (pass the same to split_barrier_wait): the last CTA also arrives in this rank's own
// inbox word, after resetting the grid's ready count, and every CTA waits for it. Past the wait,
// every CTA of this grid is ready (their local stores are visible too) and the slot's local state
// is reset, so the kernel may run the barrier again with next + 1.
DMOE_DEVICE void split_barrier_ready(const EpDeviceLayout& L, int slot, uint32_t next, bool with_self = false) {
  __shared__ int s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    fence_acq_rel_sys();
    s_last = atom_add_acq_rel_gpu(&L.state->split_ready_ctas, 1u) == gridDim.x - 1 ? 1 : 0;
  }
  __syncthreads();
  if (s_last) {
    if (threadIdx.x == 0) {
      L.state->split_ready_ctas = 0u;
      L.state->barrier_epoch[slot] = next;
    }
    if (with_self) __syncthreads();  // the reset before the self arrival (s_last is CTA-uniform)
    for (int p = threadIdx.x; p < L.world; p += blockDim.x) {
      if (p == L.rank && !with_self) continue;
      fence_acq_rel_sys();
      st_release_sys(barrier_inbox_ptr(L, p, slot, L.rank), next);
    }
  }
}

// Waits until every peer's arrival `next` is in this rank's inbox. CTA 0 uses the EP budget, the
// others twice as much, so a hung peer is reported once, by CTA 0.
DMOE_DEVICE void split_barrier_wait(const EpDeviceLayout& L, int slot, uint32_t next, bool with_self = false) {
  const WaitContext ctx{blockIdx.x == 0 ? L.timeout_cycles : 2 * L.timeout_cycles, L.rank};
  for (int p = threadIdx.x; p < L.world; p += blockDim.x) {
    if (p == L.rank && !with_self) continue;
    wait_epoch_reached_sys(barrier_inbox_ptr(L, L.rank, slot, p), next, ctx, WaitSite::kEpBarrier, p, slot);
  }
  __syncthreads();
}

// NCCL LSA barrier (ncclDevComm's lsaBarrier, index `index`) for one CTA, with a bounded wait.
//
// NCCL 2.28's ncclLsaBarrierSession::wait spins without a limit; this wrapper arrives through
// NCCL's own arrive() and waits on the same inbox words with our timeout. It relies on the 2.28
// session layout (ucInbox(), epoch, team), so other NCCL versions fall back to NCCL's untimed sync.
// Unicast only (Dist-MoE never requests multimem).
DMOE_DEVICE void nccl_lsa_barrier_cta(const ncclDevComm& dev_comm, uint32_t index, const WaitContext& ctx) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), dev_comm, ncclTeamLsa(dev_comm), dev_comm.lsaBarrier, index};
#if NCCL_MAJOR == 2 && NCCL_MINOR == 28
  bar.arrive(ncclCoopCta(), cuda::memory_order_acq_rel);
  const uint32_t target = bar.epoch + 1u;
  for (int i = threadIdx.x; i < bar.team.nRanks - 1; i += blockDim.x) {
    const int peer = i + (bar.team.rank <= i ? 1 : 0);
    wait_epoch_reached_sys(bar.ucInbox(bar.team.rank, peer), target, ctx, WaitSite::kNcclLsaBarrier, peer,
                           static_cast<int>(index));
  }
  bar.epoch += 1u;
  __syncthreads();
#else
  bar.sync(ncclCoopCta(), cuda::memory_order_acq_rel);
#endif
}

}  // namespace dist_moe::comm

#endif  // __CUDACC__
