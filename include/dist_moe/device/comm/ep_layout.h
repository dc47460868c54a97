// Plain structs shared by the host (EpGroup) and the EP kernels: where every symmetric byte lives,
// the routing tables the metadata kernel builds, and the small local state the kernels keep.
//
// Host-compilable (no CUDA-only constructs); the kernels get these structs by value.
//
// Symmetric windows of one EP group (same size and layout on every rank; docs/communication.md):
//
//   routing  : kRoutingSlots parity slots, each routing_slot_bytes =
//                align128(128-byte RoutingHeader + T_max * K * id_bytes)
//              slot p = publish_count % 2 holds the ids of the latest call (double buffering lets a
//              rank publish call n+1 while a slow peer still reads call n's ids). Groups the fused
//              route kernel serves (R * T_max * K <= kFusedMaxRoutes) also have, at
//              routing_push_offset, kRoutingSlots x R slots [parity][source] of
//                routing_push_slot_bytes = align128(align16(128 + T_max * K * id_bytes) + T_max * K * 4):
//              the fused kernel pushes its header and ids into every peer's [parity][me], so routing
//              reads are local, and (when given scores) the FP32 scores [T, K] at push_scores_offset
//              for the rank-partials combine.
//   dispatch : BF16 rows [T_max, K, D]; forward uses the first T rows of D elements (x_TD).
//   combine  : BF16 [T_max, K, D]; route (t, k) of this rank's token t lands at (t*K + k) * D.
//   signal   : uint32 barrier inbox [kNumBarrierSlots][kMaxEpRanks] (peer s writes [slot][s]),
//              then uint32 token counters [T_max] (combine v1/v2 signal mode), then uint32
//              counters [2 parities][T_max] (rank-partials signal mode). Inbox slot 0 is the EP
//              barrier of the ops (epoch = barrier_epoch[0]); slot kPublishArrivalSlot carries the
//              one-way "publish of call n is complete" arrival of the fused route kernel (value =
//              the publish epoch n).
#pragma once

#include <nccl.h>

#include <cstdint>

namespace dist_moe::comm {

inline constexpr int kMaxEpRanks = 64;          // ranks of one NVLink (LSA) team
inline constexpr int kNumBarrierSlots = 4;      // independent EP barriers (slot 0: the op stream)
inline constexpr int kRoutingSlots = 2;         // parity slots of the routing window
inline constexpr int kRoutingHeaderBytes = 128; // == dist_moe::kRoutingHeaderBytes (memory_plan.h)
inline constexpr uint32_t kRoutingHeaderMagic = 0x444d4f45u;  // "DMOE"
inline constexpr int kRouteIndexBits = 24;      // row_route = (src_rank << 24) | (t*K + k)
inline constexpr int kNumGridBarriers = 4;      // one per kernel family that has grid barriers
inline constexpr int kPublishArrivalSlot = 3;   // inbox slot of the fused kernel's ids arrival
inline constexpr int kRowsArrivalSlot = 2;      // inbox slot of the fused kernel's x-rows arrival
inline constexpr int64_t kFusedMaxRoutes = 16384;  // R * T_max * K limit of the fused route kernel
inline constexpr int kTraceSlots = 64;          // EpDeviceLayout::trace entries (phase timestamps)

// First bytes of a routing slot. num_tokens is the first int32, as memory_plan.h documents.
struct RoutingHeader {
  int32_t num_tokens;  // T of this call on the publishing rank
  uint32_t epoch;      // publish_count after this publish (1 for the first call)
  uint32_t magic;      // kRoutingHeaderMagic
  int32_t id_bytes;    // 2 (int16 ids) or 4 (int32 ids)
  // Pushed slots only: the epoch whose FP32 scores follow the ids (fused route with scores; written
  // after the scores, covered by the rows arrival). Stale when the call pushed none.
  uint32_t scores_epoch;
};

// Per-group device state in ordinary (non-symmetric) device memory, zero-initialized; only this
// rank's kernels touch it.
struct EpLocalState {
  uint32_t publish_count;                     // number of publishes so far
  uint32_t publish_done_ctas;                 // last-CTA detection of the publish kernel
  uint32_t barrier_epoch[kNumBarrierSlots];   // epochs of the EP barrier slots
  uint32_t nccl_barrier_pad;                  // (unused, keeps the layout stable)
  uint32_t grid_count[kNumGridBarriers];      // grid barrier arrival counters
  uint32_t grid_gen[kNumGridBarriers];        // grid barrier generations
  uint32_t combine_done_ctas;                 // last-CTA detection of the combine kernel
  uint32_t diag_lock;                         // first device diagnostic wins the right to print
  // Split EP barrier (one arrival per rank, every CTA waits; src/kernels/ep_split_barrier.cuh):
  // CTAs that are ready count here; the last one sends the arrival and advances barrier_epoch.
  uint32_t split_ready_ctas;
  uint32_t fused_done_ctas;                   // last-CTA detection of the fused route kernel
  uint32_t reserved[6];
};

enum GridBarrierId : int { kGridBarrierRouting = 0, kGridBarrierCombine = 1, kGridBarrierTest = 2 };

// One symmetric window as the EP kernels address it: rank p's copy of byte o is at
// base + p * stride + o, NCCL's LSA layout (ncclGetLsaPointer: lsaFlatBase + p * stride4G * 4 GiB).
// EpGroup reads it once from the window descriptor and checks it for every rank, so a kernel forms
// peer addresses without loading the descriptor first (docs/perf.md C12).
struct EpWindow {
  ncclWindow_t handle;
  char* base;      // rank 0's copy
  int64_t stride;  // bytes from one rank's copy to the next one's
  char* local;     // this rank's copy (base + rank * stride)
};

// Everything a kernel needs to address the group's windows.
struct EpDeviceLayout {
  EpWindow routing_win;
  EpWindow dispatch_win;
  EpWindow combine_win;
  EpWindow signal_win;
  int rank;
  int world;
  // 1: the peers are emulated (Communicator::emulated, one process): only this rank runs, every
  // window's peer copies alias this rank's (stride 0), and the signal words peers would write are
  // remapped (window.cuh, remap_emulated_peer_word).
  int emulated;
  int local_experts;  // L; rank r owns experts [r*L, (r+1)*L)
  int num_experts;    // E = world * L
  int top_k;          // K
  int hidden;         // D (multiple of 8)
  int max_tokens;     // T_max
  int id_bytes;       // 2 or 4
  int64_t routing_slot_bytes;
  int64_t row_bytes;              // D * 2
  int64_t barrier_inbox_offset;   // in the signal window
  int64_t token_counter_offset;   // in the signal window
  int64_t partial_counter_offset; // in the signal window: [2][T_max] (rank-partials signal mode)
  int64_t routing_push_offset;    // routing window: pushed [parity][source] slots (0: none)
  int64_t routing_push_slot_bytes;  // stride of the pushed slots
  int64_t push_scores_offset;       // pushed slot: FP32 scores [T, K] (after header and ids)
  EpLocalState* state;            // local device state
  uint64_t timeout_cycles;        // budget of every spin-wait
  // Phase timestamps (%globaltimer, ns) of the EP kernels, [kTraceSlots], or nullptr (off; the
  // default). EpGroup::enable_trace() sets it; the benchmark prints the phases of one call.
  unsigned long long* trace;
};

// Trace slots (see EpDeviceLayout::trace). "first" entries are written by CTA 0; "last" entries
// hold the latest time any CTA reached that point (atomicMax).
enum TraceSlot : int {
  kTrRouteStart = 0, kTrRouteBarrierDone = 1, kTrRouteIdsCounted = 2, kTrRouteOffsets = 3, kTrRouteEndLast = 4,
  kTrDispatchStart = 6, kTrDispatchEndLast = 7,
  kTrFusedStart = 8, kTrFusedPublishedLast = 9, kTrFusedArrivalSent = 10, kTrFusedArrived = 11,
  kTrFusedRouted = 12, kTrFusedTablesLast = 13, kTrFusedEndLast = 14, kTrFusedRowsArrived = 15,
  kTrCombineStart = 16, kTrCombineScatterDoneLast = 17, kTrCombineBarrierDone = 18, kTrCombineFirstReduce = 19,
  kTrCombineEndLast = 20,
  kTrPublishStart = 24, kTrPublishEndLast = 25,
  // C5: finer points of the fused kernel (CTA 0 unless "Last") and of signal-mode combine.
  kTrFusedHeadersOk = 26, kTrFusedIdsLoaded = 27, kTrFusedCounted = 28, kTrFusedArrivedLast = 29,
  kTrFusedRoutedLast = 30, kTrCombineScatterCtaDoneLast = 31,
  // C10: CTA 0 after its received-routes count, and after the per-expert counts (before the scan).
  kTrFusedRecvCounted = 32, kTrFusedWarpCounted = 33,
  kTrCombineScoresDone = 34,  // rank-partials combine: scores exchanged (barrier passed, or pushed scores checked)
  kTrCombineSetUp = 35,       // rank-partials combine: the last warp has loaded the barrier epoch (the others go on)
};

// Routing tables built on the device by the metadata kernel (EpGroup::route). Device pointers,
// allocated once by EpGroup for `capacity_rows` rows. Row order of this rank's expert-major
// buffer: (local expert, source rank, source token, k); each expert's rows are padded up to the
// row alignment. Padding rows hold gather_src = nullptr, scatter_dst = nullptr, row_route = -1.
struct RoutingTables {
  int32_t* expert_rows;           // [L] padded row count per local expert
  int32_t* expert_rows_unpadded;  // [L] routed rows per local expert
  int32_t* expert_offsets;        // [L + 1] exclusive prefix of expert_rows; [L] = total rows
  int32_t* total_rows;            // [1] padded rows of this call (== expert_offsets[L])
  int32_t* recv_rows_from_rank;   // [R] routes this rank receives from each source rank
  int32_t* send_rows_to_rank;     // [R] routes this rank sends to each expert rank
  const void** gather_src;        // [capacity] address of the source row (peer dispatch window)
  void** scatter_dst;             // [capacity] owner's combine-window slot of the route's result
  int32_t* row_route;             // [capacity] (src_rank << 24) | (t*K + k), -1 for padding
  int32_t* route_row;             // [R * T_max * K] row of route (s, t, k) here, -1 if not here
  int64_t capacity_rows;
  // [capacity] address of the route's slot t*K + k in its source rank's *dispatch* window
  // ([T_max, K, D], where the owner publishes grad_h3 in backward): scatter_dst translated from the
  // combine window to the dispatch window of the same rank. nullptr for padding rows.
  const void** grad_gather_src;
};

}  // namespace dist_moe::comm
