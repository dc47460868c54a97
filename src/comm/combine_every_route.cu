// Combine, every route (CombineAlgorithm::kV1): send each route result to its owner's combine
// window, synchronize, and reduce this rank's tokens: out[t] = bf16(fmaf(s_K-1, v_K-1, ...
// fmaf(s_0, v_0, 0.0f))) over the routed ids in k order (routing::combine_accumulate), the CPU
// oracle's topk_reduce bit for bit.
//
// One cooperative kernel (co-resident grid):
//   A. scatter: one warp per (token t, source rank s, 4 KiB segment), token-major: for every k
//      whose route (s, t, k) was computed here (route_row), copy that segment of y[row] to slot
//      (t*K + k) of owner s's combine window (plain 16-byte stores, NVLink for other owners).
//      Padding rows are never read.
//   B. barrier mode: every CTA fences its stores at system scope, grid barrier, CTA 0 runs the EP
//      barrier, grid barrier; then every warp reduces. Signal mode: 12 of the 16 warps of each CTA
//      scatter and add the number of pieces stored to the owner's counter of that token (release,
//      system scope); the other 4 reduce tokens in order as they complete, overlapping the transfer.
//   C. reduce: one warp per (token, 32 vectors of the row); in signal mode lane 0 first waits
//      until the token's counter reaches (routed ids) x (segments per row). Values are loaded with
//      ld.global.cg (written by other GPUs during this kernel), 4 routes in flight per lane.
//   D. signal mode: the last CTA to finish resets the token counters for the next call.
#include "comm/combine_common.cuh"

namespace dist_moe::comm {
namespace {

template <typename IdT, bool kScoreBf16>
__global__ void __launch_bounds__(kCombineThreads, 2)
    combine_every_route_kernel(const EpDeviceLayout L, const RoutingTables tab, const char* __restrict__ y,
                   const void* __restrict__ scores, char* __restrict__ out, int num_tokens, int signal_mode) {
  __shared__ char* s_cbase[kMaxEpRanks];
  load_peer_bases(L.combine_win, L.world, s_cbase);
  trace_first(L, kTrCombineStart);

  const int lane = threadIdx.x & 31;
  const int warp_in_cta = threadIdx.x >> 5;
  const int64_t row_bytes = L.row_bytes;
  const int nvec = static_cast<int>(row_bytes / 16);
  const int nseg = num_segments(nvec);
  const int K = L.top_k, R = L.world;

  // Roles. Barrier mode: every warp scatters, then every warp reduces. Signal mode: warps
  // [0, kScatterWarps) of each CTA scatter while the others reduce tokens as they complete.
  bool do_scatter = true, do_reduce = true;
  int64_t s_index = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  int64_t s_count = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  int64_t r_index = s_index, r_count = s_count;
  if (signal_mode) {
    constexpr int kReduceWarps = kCombineThreads / 32 - kScatterWarps;
    do_scatter = warp_in_cta < kScatterWarps;
    do_reduce = !do_scatter;
    s_index = static_cast<int64_t>(blockIdx.x) * kScatterWarps + warp_in_cta;
    s_count = static_cast<int64_t>(gridDim.x) * kScatterWarps;
    r_index = static_cast<int64_t>(blockIdx.x) * kReduceWarps + (warp_in_cta - kScatterWarps);
    r_count = static_cast<int64_t>(gridDim.x) * kReduceWarps;
  }

  // ---- A. scatter: unit (token t, source rank s, 4 KiB segment), token-major ---------------------
  // Lane k holds the row of route (s, t, k) on this rank (route_row); each routed k's segment goes
  // from y[row] to slot (t*K + k) of owner s's combine window. Token-major order spreads local and
  // remote traffic evenly and completes owners' tokens in order.
  if (do_scatter) {
    const int64_t units = static_cast<int64_t>(num_tokens) * R * nseg;
    for (int64_t u = s_index; u < units; u += s_count) {
      const int64_t ts = u / nseg;
      const int seg = static_cast<int>(u - ts * nseg);
      const int64_t t = ts / R;
      const int s = static_cast<int>(ts - t * R);
      const int32_t my_row =
          lane < K ? tab.route_row[routing::route_row_index(s, t * K + lane, L.max_tokens, K)] : -1;
      const unsigned mask = __ballot_sync(kFullMask, my_row >= 0);
      if (mask == 0u) continue;
      unsigned m = mask;
      while (m != 0u) {
        const int k = __ffs(m) - 1;
        m &= m - 1u;
        const int32_t row = __shfl_sync(kFullMask, my_row, k);
        warp_copy_segment<false>(y + static_cast<int64_t>(row) * row_bytes,
                                 s_cbase[s] + routing::combine_slot_offset(t, k, K, row_bytes), seg, nvec, lane);
      }
      if (signal_mode) warp_signal_route_done(L, s, static_cast<int>(t), static_cast<uint32_t>(__popc(mask)));
    }
  }

  // ---- B. barrier mode: all route results are in their owners' windows -----------------------
  if (!signal_mode) {
    combine_barrier(L, kTrCombineScatterDoneLast);
    trace_first(L, kTrCombineBarrierDone);
  }

  // ---- C. reduce: unit (token t, 32 vectors), token-major -----------------------------------
  if (do_reduce) {
    const IdT* ids = published_ids<IdT>(L);
    const char* comb = s_cbase[L.rank];
    const int rseg = (nvec + 31) / 32;
    const int64_t units = static_cast<int64_t>(num_tokens) * rseg;
    for (int64_t u = r_index; u < units; u += r_count) {
      const int64_t t = u / rseg;
      const int seg = static_cast<int>(u - t * rseg);
      int64_t id = -1;
      float score = 0.0f;
      if (lane < K) {
        id = static_cast<int64_t>(ids[t * K + lane]);
        if (routing::is_routed(id, L.num_experts)) score = load_score<kScoreBf16>(scores, t * K + lane);
      }
      const unsigned routed = __ballot_sync(kFullMask, lane < K && routing::is_routed(id, L.num_experts));
      if (signal_mode)  // every routed id arrives as nseg segment pieces
        warp_wait_token_routes(L, static_cast<int>(t), static_cast<uint32_t>(__popc(routed) * nseg));
      const int v = seg * 32 + lane;
      const bool active = v < nvec;
      float acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
      for (int kb = 0; kb < K; kb += kRouteBatch) {
        int4 val[kRouteBatch];
#pragma unroll
        for (int q = 0; q < kRouteBatch; ++q) {
          const int k = kb + q;
          if (k < K && ((routed >> k) & 1u) && active)
            val[q] = ld_cg_v4(comb + routing::combine_slot_offset(t, k, K, row_bytes) + static_cast<int64_t>(v) * 16);
        }
#pragma unroll
        for (int q = 0; q < kRouteBatch; ++q) {
          const int k = kb + q;
          const float sk = __shfl_sync(kFullMask, score, k & 31);
          if (k < K && ((routed >> k) & 1u) && active) accumulate8(acc, sk, val[q]);
        }
      }
      if (active) st_v4(out + t * row_bytes + static_cast<int64_t>(v) * 16, pack8(acc));
    }
  }

  // ---- D. signal mode: the last CTA resets this rank's token counters for the next call -------
  if (signal_mode) last_cta_resets_token_counters(L, num_tokens);
  trace_last(L, kTrCombineEndLast);
}

template <typename IdT, bool kScoreBf16>
void* every_route_kernel_ptr() {
  return reinterpret_cast<void*>(combine_every_route_kernel<IdT, kScoreBf16>);
}

}  // namespace

int combine_every_route_max_coresident_ctas(int id_bytes, bool score_bf16, int num_sms) {
  const void* fn = id_bytes == 2 ? (score_bf16 ? every_route_kernel_ptr<int16_t, true>() : every_route_kernel_ptr<int16_t, false>())
                                 : (score_bf16 ? every_route_kernel_ptr<int32_t, true>() : every_route_kernel_ptr<int32_t, false>());
  int per_sm = 0;
  DMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kCombineThreads, 0));
  return per_sm * num_sms;
}

void launch_combine_every_route(const EpDeviceLayout& L, const RoutingTables& tables, const void* y, const void* scores,
                    bool score_bf16, void* out, int num_tokens, bool signal_mode, int num_ctas, cudaStream_t stream) {
  const char* yc = static_cast<const char*>(y);
  char* oc = static_cast<char*>(out);
  const int sm = signal_mode ? 1 : 0;
  const dim3 grid(num_ctas), block(kCombineThreads);
  if (L.id_bytes == 2) {
    if (score_bf16)
      launch_ex(combine_every_route_kernel<int16_t, true>, grid, block, 0, stream, true, false, L, tables, yc, scores, oc, num_tokens, sm);
    else
      launch_ex(combine_every_route_kernel<int16_t, false>, grid, block, 0, stream, true, false, L, tables, yc, scores, oc, num_tokens, sm);
  } else {
    if (score_bf16)
      launch_ex(combine_every_route_kernel<int32_t, true>, grid, block, 0, stream, true, false, L, tables, yc, scores, oc, num_tokens, sm);
    else
      launch_ex(combine_every_route_kernel<int32_t, false>, grid, block, 0, stream, true, false, L, tables, yc, scores, oc, num_tokens, sm);
  }
}

}  // namespace dist_moe::comm
