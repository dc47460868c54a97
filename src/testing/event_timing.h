// Timing of GPU work enqueued by a host callable, shared by the benchmarks and `dist-moe bench`:
// CUDA events around each call on one stream, synchronized after each, medians of both the GPU
// time and the host's enqueue time; and the sustained load that precedes a measurement.
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

// The middle element (the upper one of an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Calls fn for `ms` milliseconds of wall time, waiting for `stream` after every `batch` calls: an
// H200 under load reaches its power limit within ~0.1 s and its clocks drop by ~20%, so a call
// timed after this runs at the clocks of a busy GPU, not at boost clocks (docs/perf.md G22).
inline void run_for_ms(const std::function<void()>& fn, double ms, cudaStream_t stream, int batch = 1) {
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() < ms) {
    for (int i = 0; i < batch; ++i) fn();
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

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
  return {median(ms), median(host)};
}

}  // namespace dist_moe::testing
