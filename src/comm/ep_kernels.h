// Internal launchers of the expert-parallel kernels (publish, routing, dispatch, combine, barriers).
// Host-callable, defined in src/kernels/*.cu; EpGroup (src/comm/ep_group.cpp) is their only user.
// Launchers check their launch with DMOE_CUDA_CHECK_LAUNCH and never synchronize.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>

#include "dist_moe/device/comm/ep_layout.h"
#include "dist_moe/dtype.h"
#include "dist_moe/device/common/device_address.h"

namespace dist_moe::comm {

// ---- publish ----------------------------------------------------------------------------------
inline constexpr int kPublishThreads = 512;
void launch_publish(const EpDeviceLayout& L, const void* x_TD, const void* ids_TK, DType ids_dtype, int num_tokens,
                    bool validate_ids, int num_ctas, cudaStream_t stream);

// ---- routing metadata ---------------------------------------------------------------------------
inline constexpr int kRoutingThreads = 1024;
inline constexpr int kRoutingWarps = kRoutingThreads / 32;
inline constexpr int64_t kRoutingMinChunk = 2048;     // routes per CTA, at least
inline constexpr int64_t kRoutingChunkStep = 1024;    // chunk sizes are multiples of this
inline constexpr int64_t kRoutingMaxChunk = 32768;    // int16 local-expert cache of 64 KiB

struct RoutingArgs {
  int num_tokens;
  int alignment;
  int64_t capacity_rows;
  int64_t chunk_routes;
  int num_ctas;
  int do_barrier;
  int32_t* cta_expert_counts;  // [num_ctas, L]
  int32_t* cta_rank_counts;    // [num_ctas, 2, R]
};

size_t routing_smem_bytes(int local_experts, int64_t chunk_routes);
// CTAs of 1024 threads that fit at once with `smem` bytes of dynamic shared memory (all SMs).
int routing_max_coresident_ctas(int id_bytes, size_t smem, int num_sms);
void launch_routing(const EpDeviceLayout& L, const RoutingTables& tables, const RoutingArgs& args, cudaStream_t stream);

// ---- fused publish + route + dispatch (one cooperative kernel; routing.cu) -------------------------
inline constexpr int kFusedThreads = 1024;  // == 32 warps (routing::kFusedRouteWarps)
struct FusedArgs {
  const void* x;       // BF16 [T, D], or nullptr: the rows are in this rank's dispatch window already
  const void* ids;     // [T, K] int32 or int64
  char* x_gathered;    // BF16 [capacity, D], or nullptr (publish + route only)
  int num_tokens;
  int alignment;
  int validate;
  int zero_fill;
  int64_t capacity_rows;
  const void* scores;  // [T, K] FP32 or BF16 pushed as FP32 with the ids for the rank-partials combine, or nullptr
  int score_bf16;
};
// Dynamic shared memory for R*T*K = total_routes routes.
size_t fused_smem_bytes(int local_experts, int64_t total_routes);
// CTAs of the fused kernel that fit on one SM with `smem` bytes (raises the kernels' limit to smem).
int fused_max_coresident_per_sm(int id_bytes, size_t smem);
void launch_fused_route(const EpDeviceLayout& L, const RoutingTables& tables, const FusedArgs& args, bool ids_int64,
                        int num_ctas, cudaStream_t stream);

// ---- dispatch -----------------------------------------------------------------------------------
inline constexpr int kDispatchThreads = 512;
void launch_dispatch(const EpDeviceLayout& L, const RoutingTables& tables, void* x_gathered, int num_tokens,
                     int alignment, bool per_route, bool zero_fill, int num_ctas, bool pdl, cudaStream_t stream);

// ---- combine: three kernels, one per CombineAlgorithm (combine_*.cu) ----------------------------
inline constexpr int kCombineThreads = 512;
// Every route (CombineAlgorithm::kV1; combine_every_route.cu).
int combine_every_route_max_coresident_ctas(int id_bytes, bool score_bf16, int num_sms);
void launch_combine_every_route(const EpDeviceLayout& L, const RoutingTables& tables, const void* y,
                                const void* scores, bool score_bf16, void* out, int num_tokens, bool signal_mode,
                                int num_ctas, cudaStream_t stream);

// Rows move in segments of this many 16-byte vectors (4 KiB; == kSegVecs of ep_launch_and_copy.cuh).
inline constexpr int kRowSegmentVecs = 256;
inline constexpr int row_segments(int nvec) { return (nvec + kRowSegmentVecs - 1) / kRowSegmentVecs; }

// Remote routes only (CombineAlgorithm::kV2; combine_remote_routes.cu): modes, and the arguments it
// shares with the rank-partials combine.
enum RemoteRoutesMode : int { kRemoteReduceOnly = 0, kRemoteBarrier = 1, kRemoteSignal = 2 };
struct CombineArgs {
  const char* y;       // BF16 [capacity, D] route results (unused in reduce-only mode)
  const void* scores;  // [T, K] FP32 or BF16
  char* out;           // BF16 [T, D]
  int num_tokens;
  int reduce_warps;    // signal mode: warps per CTA that reduce, 1..15 (the others scatter)
  int k_group;         // routes (consecutive k) per scatter unit, 1..K
  int signal_batch;    // signal mode: scatter units per release fence, 1..32
  int reduce_ctas;     // signal mode: 0 = warp split per CTA; else the last reduce_ctas CTAs reduce
                       // (all warps) and the others scatter (all warps), 1..CTAs-1
  // Reduce-only mode: also store every routed row the reduction reads to `keep` (route-major
  // [T, K, D]; base null: none), unless *keep_skip != 0 (comm::KeepRoutes).
  common::DeviceAddress keep;
  const int64_t* keep_skip;
  // v3 only: the scores came with the ids (fused route, FusedArgs::scores) into the pushed routing
  // slots; no scores exchange in the combine.
  int scores_pushed;
  // v3 only (kPartials*): how the owners' values meet the token's rank, and where this rank's own
  // multi-route partials are summed.
  int partials_sync;
};
// CombineArgs::partials_sync.
enum : int {
  kPartialsBarrier = 0,         // own partials stored in the owner phase, read back after a split EP barrier
  kPartialsBarrierOwnLate = 1,  // split EP barrier; own partials summed in the reduction (before the wait)
  kPartialsSignal = 2,          // no barrier: per-token counters; own partials summed in the reduction
};
int combine_remote_routes_max_coresident_ctas(int id_bytes, bool score_bf16, int mode, int num_sms);
void launch_combine_remote_routes(const EpDeviceLayout& L, const RoutingTables& tables, const CombineArgs& args, bool score_bf16,
                     int mode, int num_ctas, cudaStream_t stream);

// Rank partials (CombineAlgorithm::kRankPartials; combine_rank_partials.cu): partials_sync picks barrier or signal mode;
// reduce_warps, k_group, signal_batch and reduce_ctas of the arguments are unused.
int combine_rank_partials_max_coresident_ctas(int id_bytes, bool score_bf16, int num_sms);
void launch_combine_rank_partials(const EpDeviceLayout& L, const RoutingTables& tables, const CombineArgs& args, bool score_bf16,
                     int num_ctas, cudaStream_t stream);

// ---- barriers and helpers -----------------------------------------------------------------------
// run_if (optional device int64): the barrier runs only where *run_if != 0.
void launch_ep_barrier(const EpDeviceLayout& L, int slot, cudaStream_t stream, const int64_t* run_if = nullptr);
void launch_nccl_lsa_barrier(const ncclDevComm& dev_comm, uint32_t index, uint64_t timeout_cycles, int rank,
                             cudaStream_t stream);
// Route scores for the expert side (route_scores.cu): row_scores_M[m] = the FP32 score its source
// rank published for row m's route (routing::dispatch_score_offset), found from grad_gather_src[m];
// 0 for padding rows (nullptr), rows m >= *rows untouched. At most 4 CTAs per SM (`sms`: the
// communicator's count).
void launch_gather_route_scores(const EpDeviceLayout& L, const void* const* grad_gather_src, const int32_t* rows,
                                int64_t capacity_rows, float* row_scores_M, int sms, cudaStream_t stream);
// out[p] = this process's address of byte 0 of rank p's copy of `win`, for p < world.
void launch_window_bases(ncclWindow_t win, int world, uintptr_t* out, cudaStream_t stream);

}  // namespace dist_moe::comm
