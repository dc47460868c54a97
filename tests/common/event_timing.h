// Timing of GPU work enqueued by a host callable, shared by the benchmarks and `dist-moe bench`:
// CUDA events around each call on one stream, synchronized after each, medians of both the GPU
// time and the host's enqueue time.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "dist_moe/check.h"

namespace dist_moe::testing {

struct EventTiming {
  double ms = 0;       // median GPU time between the events around a call
  double host_ms = 0;  // median host time to enqueue a call
};

// `iters` calls of fn (>= 1), each starting on an idle stream (the previous one was waited for).
inline EventTiming median_event_ms(const std::function<void()>& fn, int iters, cudaStream_t stream) {
  cudaEvent_t a, b;
  DMOE_CUDA_CHECK(cudaEventCreate(&a));
  DMOE_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<double> ms, host;
  for (int i = 0; i < std::max(iters, 1); ++i) {
    DMOE_CUDA_CHECK(cudaEventRecord(a, stream));
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    host.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    DMOE_CUDA_CHECK(cudaEventRecord(b, stream));
    DMOE_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    DMOE_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  std::sort(host.begin(), host.end());
  return {ms[ms.size() / 2], host[host.size() / 2]};
}

}  // namespace dist_moe::testing
