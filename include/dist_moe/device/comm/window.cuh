// Peer addresses of symmetric-window offsets, through the NCCL device API (LSA pointers).
//
// A window registered with ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC) has the same size and
// layout on every rank; ncclGetLsaPointer(win, offset, peer) gives this process's load/store
// address of byte `offset` of `peer`'s copy (NVLink P2P mapping). EP groups require the LSA team to
// be the whole communicator, so LSA peer index == EP rank (checked on the host).
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "dist_moe/device/comm/ep_layout.h"
#include "dist_moe/device/common/macros.cuh"

#if defined(__CUDACC__)

namespace dist_moe::comm {

// Address of byte `offset` of `peer`'s copy of window `win` (peer == own rank gives local memory).
DMOE_DEVICE char* peer_ptr(ncclWindow_t win, int64_t offset, int peer) {
  return static_cast<char*>(ncclGetLsaPointer(win, static_cast<size_t>(offset), peer));
}

// Address of byte `offset` of this rank's copy of window `win`.
DMOE_DEVICE char* local_ptr(ncclWindow_t win, int64_t offset) {
  return static_cast<char*>(ncclGetLocalPointer(win, static_cast<size_t>(offset)));
}

// The same for an EP group's window: arithmetic only, no load of the window descriptor.
DMOE_DEVICE char* peer_ptr(const EpWindow& win, int64_t offset, int peer) {
  return win.base + static_cast<int64_t>(peer) * win.stride + offset;
}
DMOE_DEVICE char* local_ptr(const EpWindow& win, int64_t offset) { return win.local + offset; }

// Base addresses of every rank's copy of a window, once per CTA into shared memory.
// Call from all threads of the CTA; ends with __syncthreads().
DMOE_DEVICE void load_peer_bases(const EpWindow& win, int world, char** bases_smem) {
  for (int p = threadIdx.x; p < world; p += blockDim.x) bases_smem[p] = peer_ptr(win, 0, p);
  __syncthreads();
}

// ---- EP-group specific addresses --------------------------------------------------------------

// Routing slot `slot` of rank `peer`: header first, then the ids.
DMOE_DEVICE char* routing_slot_ptr(const EpDeviceLayout& L, int slot, int peer) {
  return peer_ptr(L.routing_win, static_cast<int64_t>(slot) * L.routing_slot_bytes, peer);
}

// Emulated peers (EpDeviceLayout::emulated): only this rank runs, and each absent peer p acts as
// this rank's clone. The words a rank writes into a peer, indexed by the writer ([.][source]), are
// remapped: this rank's store into peer p's word [.][rank] becomes this rank's own word [.][p] --
// the store p's clone would make here. Waits on any peer then complete once this rank arrived, and
// the ids this rank "pushed" to p are what it reads back as p's. Data windows simply alias this
// rank's copy (stride 0).
DMOE_DEVICE void remap_emulated_peer_word(const EpDeviceLayout& L, int& owner, int& source) {
  if (L.emulated && owner != L.rank) {
    source = owner;
    owner = L.rank;
  }
}

// Pushed routing slot [parity][source] of rank `owner` (fused route kernel; routing_push_offset > 0).
DMOE_DEVICE char* routing_push_ptr(const EpDeviceLayout& L, int parity, int source, int owner) {
  remap_emulated_peer_word(L, owner, source);
  const int64_t index = static_cast<int64_t>(parity) * L.world + source;
  return peer_ptr(L.routing_win, L.routing_push_offset + index * L.routing_push_slot_bytes, owner);
}

// Barrier inbox word [slot][src] of rank `owner` (src writes it, owner polls it).
DMOE_DEVICE uint32_t* barrier_inbox_ptr(const EpDeviceLayout& L, int owner, int slot, int src) {
  remap_emulated_peer_word(L, owner, src);
  const int64_t off = L.barrier_inbox_offset + (static_cast<int64_t>(slot) * kMaxEpRanks + src) * 4;
  return reinterpret_cast<uint32_t*>(peer_ptr(L.signal_win, off, owner));
}

// Combine arrival counter of token t on rank `owner`.
DMOE_DEVICE uint32_t* token_counter_ptr(const EpDeviceLayout& L, int owner, int t) {
  return reinterpret_cast<uint32_t*>(peer_ptr(L.signal_win, L.token_counter_offset + static_cast<int64_t>(t) * 4, owner));
}

// Rank-partials signal mode: arrival counter of token t on rank `owner`, region `parity` (the
// call's routing slot; each publish zeroes its call's region before its arrival).
DMOE_DEVICE uint32_t* partial_counter_ptr(const EpDeviceLayout& L, int owner, int parity, int64_t t) {
  const int64_t off = L.partial_counter_offset + (static_cast<int64_t>(parity) * L.max_tokens + t) * 4;
  return reinterpret_cast<uint32_t*>(peer_ptr(L.signal_win, off, owner));
}

// Zeroes this rank's counters of region `parity`, a grid-stride slice per thread (index `first`
// of `stride`). Every publish (publish kernel, fused route) runs it for its call's region before
// the arrival after which the peers' combine increments them.
DMOE_DEVICE void zero_partial_counters(const EpDeviceLayout& L, int parity, int64_t first, int64_t stride) {
  uint32_t* counters = partial_counter_ptr(L, L.rank, parity, 0);
  for (int64_t t = first; t < L.max_tokens; t += stride) counters[t] = 0u;
}

}  // namespace dist_moe::comm

#endif  // __CUDACC__
