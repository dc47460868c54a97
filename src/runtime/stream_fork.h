// Two streams a pipeline call forks work onto and joins back before it goes on: the backward runs
// W13 DGRAD on the high-priority one and W13 WGRAD on the low-priority one, side by side (docs/perf.md
// G33). The priorities decide which kernel's CTAs the SMs take first when both become ready at the
// same event: DGRAD's (capped below the SM count, so WGRAD starts on the rest), then WGRAD's, which
// also take every SM DGRAD's CTAs leave. Fork and join are event record + wait pairs: legal inside
// a stream capture (both streams join the capture at the fork and are joined back at the join) and
// no host synchronization.
#pragma once

#include <cuda_runtime.h>

#include "dist_moe/check.h"

namespace dist_moe::runtime {

class StreamFork {
 public:
  StreamFork() {
    int least = 0, greatest = 0;  // numerically: least is the lowest priority, greatest the highest
    DMOE_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    // Non-blocking: no implicit ordering with the legacy default stream, which a caller may use.
    DMOE_CUDA_CHECK(cudaStreamCreateWithPriority(&high_, cudaStreamNonBlocking, greatest));
    DMOE_CUDA_CHECK(cudaStreamCreateWithPriority(&low_, cudaStreamNonBlocking, least));
    DMOE_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
    DMOE_CUDA_CHECK(cudaEventCreateWithFlags(&high_done_, cudaEventDisableTiming));
    DMOE_CUDA_CHECK(cudaEventCreateWithFlags(&low_done_, cudaEventDisableTiming));
  }
  ~StreamFork() {  // never throws; the owner synchronizes its device first
    cudaEventDestroy(low_done_);
    cudaEventDestroy(high_done_);
    cudaEventDestroy(forked_);
    cudaStreamDestroy(low_);
    cudaStreamDestroy(high_);
  }
  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;

  cudaStream_t high() const { return high_; }
  cudaStream_t low() const { return low_; }
  // Work enqueued on high() and low() from now on starts after everything enqueued on `main` so far.
  void fork(cudaStream_t main) const {
    DMOE_CUDA_CHECK(cudaEventRecord(forked_, main));
    DMOE_CUDA_CHECK(cudaStreamWaitEvent(high_, forked_, 0));
    DMOE_CUDA_CHECK(cudaStreamWaitEvent(low_, forked_, 0));
  }
  // Work enqueued on `main` from now on starts after everything enqueued on both streams so far.
  void join(cudaStream_t main) const {
    DMOE_CUDA_CHECK(cudaEventRecord(high_done_, high_));
    DMOE_CUDA_CHECK(cudaEventRecord(low_done_, low_));
    DMOE_CUDA_CHECK(cudaStreamWaitEvent(main, high_done_, 0));
    DMOE_CUDA_CHECK(cudaStreamWaitEvent(main, low_done_, 0));
  }

 private:
  cudaStream_t high_ = nullptr;
  cudaStream_t low_ = nullptr;
  cudaEvent_t forked_ = nullptr;
  cudaEvent_t high_done_ = nullptr;
  cudaEvent_t low_done_ = nullptr;
};

}  // namespace dist_moe::runtime
