// Context: everything one MoE configuration owns on one expert-parallel rank.
//
//   - the NCCL communicator (borrowed or created) and the EP group: symmetric routing, dispatch and
//     combine windows, routing tables;
//   - the activation buffer (saved-activation slots growing up, scratch growing down, optionally
//     with VMM host overflow) and the device activation planner's state;
//   - small device workspaces of the pipeline.
//
// Creation and close are collective: every rank calls them with the same Config, in the same order
// relative to other collective calls. Create contexts before capturing CUDA graphs; calls through
// one context must not overlap (one stream, or stream-ordered).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "dist_moe/config.h"
#include "dist_moe/memory_plan.h"

namespace dist_moe {

struct ContextOptions {
  // Limit of every device spin-wait (barriers, signals) in milliseconds; 0: environment variable
  // DMOE_COMM_TIMEOUT_MS, else 60 s. A wait past it prints rank, peer and what it waited for, then traps.
  int64_t comm_timeout_ms = 0;
};

class Context {
 public:
  // Collective over the ranks of `comm` (the caller keeps ownership). The current CUDA device must be
  // the communicator's device.
  static std::unique_ptr<Context> create(const Config& config, ncclComm_t comm, const ContextOptions& options = {});
  // Collective: creates (and owns) an NCCL communicator of `world_size` ranks on the current device.
  static std::unique_ptr<Context> create(const Config& config, const ncclUniqueId& id, int rank, int world_size,
                                         const ContextOptions& options = {});
  // Not collective: rank `rank` of `world_size` with emulated peers (upstream's emulate_peer_buffers,
  // comm::Communicator::emulated). Only this rank runs: every peer window aliases this rank's, the
  // EP barriers wait for this rank alone, and the routes other ranks' experts own come back as exact
  // zeros, so a call computes this rank's experts for every virtual rank's tokens -- this rank's own
  // tokens, as each virtual peer reads this rank's windows. For shapes, memory and the kernels of an
  // EP size on one GPU; the other ranks' expert outputs are not computed.
  static std::unique_ptr<Context> create_emulated(const Config& config, int rank, int world_size,
                                                  const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Puts the activation planner back to its initial state (device kernel: safe inside a CUDA-graph
  // capture). Use only after an aborted schedule, never while a backward still owns saved state.
  void reset(cudaStream_t stream);
  // Selects the activation slot the next training forwards push to, and the number of MoE layers
  // that slot will hold (static host data). Ignored by inference contexts (0 slots).
  void select_activation_slot(int64_t activation_slot, int64_t num_moe_layers_in_slot);
  // Collective; idempotent. Synchronizes the device, then releases every buffer.
  void close();
  bool closed() const;

  const Config& config() const;
  const MemoryPlan& memory_plan() const;
  int rank() const;
  int ep_size() const;
  int64_t local_experts() const;
  int device() const;

  // ---- introspection: benchmarks, tests and the PyTorch bindings (not needed to run the layer) ----

  // Called after each stage of a call with the stage's name ("publish+route", "w13", ...), on the
  // call's stream; benchmarks record events here. Eager use only; an empty hook turns it off.
  using StageHook = std::function<void(const char* stage, cudaStream_t stream)>;
  void set_stage_hook(StageHook hook);
  // Rows the local experts can receive in one call, all together (the routing tables' capacity).
  int64_t capacity_rows() const;
  // Device int32 [local_experts()]: the rows each local expert received in the latest call
  // (padded to the row multiple); valid once that call has run on its stream.
  const int32_t* routed_rows_per_expert() const;
  // Device memory this context owns (pointer, bytes): the activation buffer and the symmetric
  // routing, dispatch and combine windows (this rank's copies).
  struct DeviceRegion {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  DeviceRegion activation_buffer() const;
  DeviceRegion routing_window() const;
  DeviceRegion dispatch_window() const;
  DeviceRegion combine_window() const;
  // The activation planner's live device state (N slots, R ranks; int64 arrays on the device):
  // saved bytes [N*R] slot major, layers held per slot [N], lowest free bytes per slot then
  // scratch [N+1], the slot ids 0..N-1 [max(N, 1)]; and the buffer's geometry.
  struct PlannerView {
    const int64_t* saved_bytes_NR = nullptr;
    const int64_t* layer_id_N = nullptr;
    const int64_t* peak_min_free_N1 = nullptr;
    const int64_t* slot_ids = nullptr;
    int64_t num_slots = 0, slot_bytes = 0, buffer_bytes = 0;
  };
  PlannerView planner_view() const;

  struct Impl;  // defined in src/runtime (the pipeline's view of the internals)

 private:
  explicit Context(std::unique_ptr<Impl> impl);
  friend Impl& context_impl(const Context& ctx);  // src/runtime/context_impl.h
  std::unique_ptr<Impl> impl_;
};

}  // namespace dist_moe
