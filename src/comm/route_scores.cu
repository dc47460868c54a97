// The expert side's route scores for the block-scaled backward (perf_history G144): each owner
// published its routes' FP32 scores in its dispatch window after its token rows
// (routing::dispatch_score_offset); a row's route slot address (RoutingTables::grad_gather_src)
// names the owner (its window copy) and the route (the slot within it).
#include <algorithm>

#include "comm/ep_launch_and_copy.cuh"
#include "comm/ep_kernels.h"

#include "dist_moe/device/routing/routing_layout.cuh"

namespace dist_moe::comm {
namespace {

constexpr int kScoreThreads = 256;

__global__ void __launch_bounds__(kScoreThreads) gather_route_scores_kernel(const EpDeviceLayout L,
                                                                            const void* const* grad_gather_src,
                                                                            const int32_t* rows_used, float* row_scores) {
  const int64_t rows = *rows_used;
  for (int64_t m = blockIdx.x * int64_t{kScoreThreads} + threadIdx.x; m < rows; m += int64_t{gridDim.x} * kScoreThreads) {
    const char* slot = static_cast<const char*>(grad_gather_src[m]);
    float score = 0.f;
    if (slot != nullptr) {
      // Emulated peers alias this rank's copy (stride 0): every slot is in copy 0.
      const int64_t off = slot - L.dispatch_win.base;
      const int64_t src = L.dispatch_win.stride > 0 ? off / L.dispatch_win.stride : 0;
      const int64_t route = (off - src * L.dispatch_win.stride) / L.row_bytes;
      score = *reinterpret_cast<const float*>(
          peer_ptr(L.dispatch_win, routing::dispatch_score_offset(route, L.max_tokens, L.row_bytes), static_cast<int>(src)));
    }
    row_scores[m] = score;
  }
}

}  // namespace

void launch_gather_route_scores(const EpDeviceLayout& L, const void* const* grad_gather_src, const int32_t* rows,
                                int64_t capacity_rows, float* row_scores_M, int sms, cudaStream_t stream) {
  if (capacity_rows == 0) return;
  const int64_t blocks = std::min<int64_t>((capacity_rows + kScoreThreads - 1) / kScoreThreads, int64_t{sms} * 4);
  gather_route_scores_kernel<<<static_cast<unsigned>(blocks), kScoreThreads, 0, stream>>>(L, grad_gather_src, rows,
                                                                                           row_scores_M);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::comm
