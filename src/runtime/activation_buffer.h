// The activation buffer of one context: one device virtual range holding the saved-activation
// slots (low addresses, growing up) and scratch (growing down from the top), sized by the memory
// plan. With VMM host scratch the range is three mapped sections, low to high:
//
//   [ device: slots + lower scratch ][ pinned host: overflow scratch ][ device: hot scratch ]
//
// so scratch touches host pages only past the device capacity. Kernels address the buffer with
// byte offsets emitted by the device planner; the host never reads them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dist_moe/memory_plan.h"
#include "platform/vmm_prefetch.h"
#include "platform/vmm_range.h"

namespace dist_moe::runtime {

// Granularity every VMM section must respect on `device` (device and pinned host allocations):
// pass it to plan_memory (PlanOptions::vmm_granularity_bytes) before creating a VMM buffer.
int64_t vmm_allocation_granularity(int device);

class ActivationBuffer {
 public:
  enum class SectionKind { kDevice, kHost };
  struct Section {
    SectionKind kind;
    int64_t offset;  // from data()
    int64_t bytes;
  };

  // Allocates what `plan` asks for on `device` (the current device is switched for the call).
  // With `use_vmm` and host scratch in the plan, maps the plan's resolved VMM sections (pinned
  // host memory in the middle); only one such buffer may live per device in a process.
  // `guard_bytes` of readable memory follow the planned range: TMA tile loads may read up to one
  // tile of rows past a buffer the planner placed at the top (they are never used).
  // A `prefetch` from prefetch() (same plan, device and guard) hands over its mapped range instead
  // of the range being mapped here.
  static std::unique_ptr<ActivationBuffer> create(const MemoryPlan& plan, bool use_vmm, int device,
                                                  int64_t guard_bytes = 0, platform::VmmPrefetch* prefetch = nullptr);

  // Claims `device` (the one live VMM buffer) and starts mapping the VMM range `plan` needs on a
  // background thread (VmmConfig::prefetch): nullptr when the plan has no host scratch. A context
  // starts it before its communication buffers and passes it to create(); dropping it unconsumed
  // releases the range (close() it to see a failure).
  static std::unique_ptr<platform::VmmPrefetch> prefetch(const MemoryPlan& plan, bool use_vmm, int device,
                                                         int64_t guard_bytes = 0);
  ~ActivationBuffer();  // releases; failures are reported on stderr (close() reports by throwing)
  ActivationBuffer(const ActivationBuffer&) = delete;
  ActivationBuffer& operator=(const ActivationBuffer&) = delete;

  // Releases everything; on failure throws and keeps what is still held so a later call retries.
  void close();

  uint8_t* data() const { return base_; }
  int64_t size() const { return bytes_; }             // planner's buffer_bytes (guard excluded)
  int64_t activation_bytes() const { return activation_bytes_; }  // slots occupy [0, this)
  bool uses_vmm() const { return vmm_; }
  const std::vector<Section>& sections() const { return sections_; }
  int device() const { return device_; }

 private:
  ActivationBuffer() = default;
  void release_vmm();  // throws after trying every step

  uint8_t* base_ = nullptr;
  int64_t bytes_ = 0;
  int64_t mapped_bytes_ = 0;  // bytes_ + guard (rounded to the VMM granularity with VMM)
  int64_t activation_bytes_ = 0;
  int device_ = -1;
  bool vmm_ = false;
  std::vector<Section> sections_;
  std::unique_ptr<platform::VmmRange> range_;  // the mapped sections, kept as far as still held
};

}  // namespace dist_moe::runtime
