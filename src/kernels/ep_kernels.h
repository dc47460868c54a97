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

namespace dist_moe::comm::kernels {

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

// ---- dispatch -----------------------------------------------------------------------------------
inline constexpr int kDispatchThreads = 512;
void launch_dispatch(const EpDeviceLayout& L, const RoutingTables& tables, void* x_gathered, int num_tokens,
                     int alignment, bool per_route, bool zero_fill, int num_ctas, bool pdl, cudaStream_t stream);

// ---- combine ------------------------------------------------------------------------------------
inline constexpr int kCombineThreads = 512;
int combine_max_coresident_ctas(int id_bytes, bool score_bf16, int num_sms);
void launch_combine(const EpDeviceLayout& L, const RoutingTables& tables, const void* y, const void* scores,
                    bool score_bf16, void* out, int num_tokens, bool signal_mode, int num_ctas, cudaStream_t stream);

// ---- barriers and helpers -----------------------------------------------------------------------
void launch_ep_barrier(const EpDeviceLayout& L, int slot, cudaStream_t stream);
void launch_nccl_lsa_barrier(const ncclDevComm& dev_comm, uint32_t index, uint64_t timeout_cycles, int rank,
                             cudaStream_t stream);
// out[p] = this process's address of byte 0 of rank p's copy of `win`, for p < world.
void launch_window_bases(ncclWindow_t win, int world, uintptr_t* out, cudaStream_t stream);

}  // namespace dist_moe::comm::kernels
