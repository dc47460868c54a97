// Work of the oracle's large loops spread over the host's cores. Each index runs whole on one
// thread, in the same order of operations as a single thread would run it, so the oracle's values do
// not depend on the thread count (tests/cpu checks it bitwise).
#pragma once

#include <cstdint>
#include <functional>

namespace dist_moe::reference {

// Threads parallel_for uses: std::thread::hardware_concurrency(), at most 64; DMOE_ORACLE_THREADS=N
// sets it (1: every index in order on the calling thread). Read once.
int oracle_threads();

// body(i) for every i in [0, n): contiguous index ranges, one per thread, the calling thread taking
// the first; returns when all are done. An exception from a body is rethrown on the calling thread
// (the first one, by thread order) after every thread has stopped.
void parallel_for(int64_t n, const std::function<void(int64_t)>& body);

}  // namespace dist_moe::reference
