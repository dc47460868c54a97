// A VmmRange mapped on a background thread (upstream's VMM prefetch, VmmConfig::prefetch): pinning
// gigabytes of host memory takes the driver a while, and a context starts it before its collective
// communication-buffer setup so the two overlap.
//
// The caller's claim of the device is taken on the calling thread, so a claimed device is refused
// before any thread starts. The range (with the claim) is handed over exactly once, by take(), and
// only for the layout that was prefetched: a consumer asking for another layout gets an error and
// the prefetch is closed -- no fallback to a synchronous mapping. A failed mapping is not retried by
// take(); it throws kRuntime naming the thread's error. close() releases what the thread mapped; a
// failed release keeps it (and the claim) for the next close().
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "platform/vmm_range.h"

namespace dist_moe::platform {

class VmmPrefetch {
 public:
  using Layout = VmmRange::Layout;

  // Starts mapping `layout` on a thread that first runs `thread_init` (e.g. makes the device current
  // there; may be empty). `claim` travels with the range.
  VmmPrefetch(const DriverApi& driver, Layout layout, DeviceClaim claim, std::function<void()> thread_init);
  ~VmmPrefetch();  // closes; failures go to stderr (close() reports by throwing)
  VmmPrefetch(const VmmPrefetch&) = delete;
  VmmPrefetch& operator=(const VmmPrefetch&) = delete;

  // Waits for the mapping and hands over the range. Throws kRuntime if it was taken or closed
  // already, or if the mapping failed (the thread's error in the text); kInternal if `wanted` is not
  // the prefetched layout (then closes the prefetch first).
  std::unique_ptr<VmmRange> take(const Layout& wanted);

  // Waits for the thread and releases an untaken range. Throws (kDriver) keeping what is still held,
  // the claim included, for the next close(); idempotent once everything is released.
  void close();

  // close() with one retry, for a consumer that failed (upstream's context cleanup): if the retry
  // fails too, throws kRuntime "DistMoE VMM prefetch cleanup retry also failed: ..." and what is
  // still held keeps the device claimed.
  void close_retrying_once();

  bool taken() const { return taken_; }

 private:
  void join();

  const DriverApi& d_;
  Layout layout_;
  std::thread thread_;
  std::unique_ptr<VmmRange> range_;  // written by the thread, read after join()
  std::exception_ptr error_;         // likewise
  bool taken_ = false;
  bool closed_ = false;
};

}  // namespace dist_moe::platform
