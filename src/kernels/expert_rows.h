// The expert-major row buffer as kernels see it: per local expert, its padded start row and its
// valid row count, both produced on the device by routing. Rows past an expert's count (up to the
// next expert's start) are padding; rows past the last offset are unused capacity.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::kernels {

struct ExpertRowsView {
  const int32_t* counts_E = nullptr;   // [E_local] valid rows per expert (device)
  const int32_t* offsets_E1 = nullptr; // [E_local + 1] exclusive prefix of padded counts (device)
  int32_t num_local_experts = 0;
  int64_t max_rows = 0;                // capacity of the row buffer (host; sizes the grid)
};

#if defined(__CUDACC__)
// Is row m a valid (routed) row? Binary search over the padded offsets: E_local <= a few hundred.
__device__ __forceinline__ bool expert_row_is_valid(const ExpertRowsView& v, int64_t m) {
  if (m >= v.offsets_E1[v.num_local_experts]) return false;
  int lo = 0, hi = v.num_local_experts - 1;  // find the last e with offsets[e] <= m
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (v.offsets_E1[mid] <= m) lo = mid;
    else hi = mid - 1;
  }
  return m - v.offsets_E1[lo] < v.counts_E[lo];
}
#endif

}  // namespace dist_moe::kernels
