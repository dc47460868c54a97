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

#include <cstdint>
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

  struct Impl;
  Impl& impl() const;  // the pipeline's view of the internals (src/runtime)

 private:
  explicit Context(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dist_moe
