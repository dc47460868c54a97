#include "reference/parallel.h"

#include "core/env_knobs.h"

#include <algorithm>
#include <exception>
#include <thread>
#include <vector>

namespace dist_moe::reference {

int oracle_threads() {
  static const int threads = [] {
    const int64_t n = core::env_int64_or("DMOE_ORACLE_THREADS", 0);
    if (n >= 1) return static_cast<int>(std::min<int64_t>(n, 64));
    return std::clamp(static_cast<int>(std::thread::hardware_concurrency()), 1, 64);
  }();
  return threads;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& body) {
  const int64_t threads = std::min<int64_t>(oracle_threads(), n);
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  auto run = [&](int64_t t) {
    try {
      for (int64_t i = n * t / threads; i < n * (t + 1) / threads; ++i) body(i);
    } catch (...) {
      errors[static_cast<size_t>(t)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(run, t);
  run(0);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace dist_moe::reference
