// Dispatch: gather the routed rows of this call from every rank's dispatch window into the local
// expert-major buffer x_gathered [capacity, D], rows ordered (expert, source rank, token, k).
//
// Two modes, same result bit for bit:
//   token-once (default): one warp per (token, source rank, 4 KiB segment); it reads
//     route_row[s][t][0..K), loads the segment once over NVLink (ld.global.cg, 8 x 16 bytes in
//     flight per lane) and stores it to every row of that token here. NVLink carries each needed
//     token once per rank, whatever the number of its experts on this rank.
//   per-route: one warp per (row, segment), reading gather_src[row] (a fused GEMM producer's
//     pattern).
// Padding rows are zero-filled when asked. Rows >= total_rows are never written.
// Launched with programmatic stream serialization: griddepcontrol.wait precedes every table read.
#include "comm/ep_launch_and_copy.cuh"
#include "comm/ep_kernels.h"

#include "dist_moe/device/routing/routing_layout.cuh"

namespace dist_moe::comm {
namespace {

template <bool kPerRoute>
__global__ void __launch_bounds__(kDispatchThreads)
    dispatch_kernel(const EpDeviceLayout L, const RoutingTables tab, char* __restrict__ out, int num_tokens,
                    int alignment, int zero_fill) {
  grid_dependency_wait();
  trace_first(L, kTrDispatchStart);
  __shared__ char* s_dbase[kMaxEpRanks];
  load_peer_bases(L.dispatch_win, L.world, s_dbase);

  const int lane = threadIdx.x & 31;
  const int64_t warp_global = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int64_t nwarps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  const int64_t row_bytes = L.row_bytes;
  const int nvec = static_cast<int>(row_bytes / 16);
  const int nseg = num_segments(nvec);
  const int K = L.top_k;

  if constexpr (!kPerRoute) {
    // Unit (t, s, seg), token-major so local and remote sources interleave: segment seg of source
    // row (s, t), read once, stored to every row of it here.
    const int64_t units = static_cast<int64_t>(L.world) * num_tokens * nseg;
    for (int64_t u = warp_global; u < units; u += nwarps) {
      const int64_t ts = u / nseg;
      const int seg = static_cast<int>(u - ts * nseg);
      const int64_t t = ts / L.world;
      const int s = static_cast<int>(ts - t * L.world);
      const int32_t my_row =
          lane < K ? tab.route_row[routing::route_row_index(s, t * K + lane, L.max_tokens, K)] : -1;
      const unsigned mask = __ballot_sync(kFullMask, my_row >= 0);
      if (mask == 0u) continue;
      const char* src = s_dbase[s] + routing::dispatch_row_offset(t, row_bytes);
      warp_copy_segment_to_rows(src, out, row_bytes, my_row, mask, seg, nvec, lane);
    }
    if (zero_fill && alignment > 1) {
      // Unit (expert x, j, seg) zero-fills segment seg of row offset[x] + unpadded[x] + j when that
      // is a padding row of x.
      const int64_t pad_units = static_cast<int64_t>(L.local_experts) * (alignment - 1) * nseg;
      for (int64_t u = warp_global; u < pad_units; u += nwarps) {
        const int64_t xj = u / nseg;
        const int seg = static_cast<int>(u - xj * nseg);
        const int x = static_cast<int>(xj / (alignment - 1));
        const int j = static_cast<int>(xj - static_cast<int64_t>(x) * (alignment - 1));
        const int32_t unpadded = tab.expert_rows_unpadded[x];
        if (unpadded + j >= tab.expert_rows[x]) continue;
        warp_zero_segment(out + static_cast<int64_t>(tab.expert_offsets[x] + unpadded + j) * row_bytes, seg, nvec, lane);
      }
    }
  } else {
    // Unit (row, seg) through the gather table.
    const int64_t units = static_cast<int64_t>(*tab.total_rows) * nseg;
    for (int64_t u = warp_global; u < units; u += nwarps) {
      const int64_t m = u / nseg;
      const int seg = static_cast<int>(u - m * nseg);
      const char* src = static_cast<const char*>(tab.gather_src[m]);
      char* dst = out + m * row_bytes;
      if (src == nullptr) {
        if (zero_fill) warp_zero_segment(dst, seg, nvec, lane);
        continue;
      }
      warp_copy_segment<true>(src, dst, seg, nvec, lane);
    }
  }
  trace_last(L, kTrDispatchEndLast);
}

}  // namespace

void launch_dispatch(const EpDeviceLayout& L, const RoutingTables& tables, void* x_gathered, int num_tokens,
                     int alignment, bool per_route, bool zero_fill, int num_ctas, bool pdl, cudaStream_t stream) {
  char* out = static_cast<char*>(x_gathered);
  const int zf = zero_fill ? 1 : 0;
  if (per_route)
    launch_ex(dispatch_kernel<true>, dim3(num_ctas), dim3(kDispatchThreads), 0, stream, false, pdl, L, tables, out,
              num_tokens, alignment, zf);
  else
    launch_ex(dispatch_kernel<false>, dim3(num_ctas), dim3(kDispatchThreads), 0, stream, false, pdl, L, tables, out,
              num_tokens, alignment, zf);
}

}  // namespace dist_moe::comm
