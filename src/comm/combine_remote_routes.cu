// Combine, remote routes only (CombineAlgorithm::kV2, the default): see the mode notes below.
#include "comm/combine_common.cuh"

namespace dist_moe::comm {
namespace {

// ==== v2: remote-only scatter, local routes reduced straight from y, split barrier or signals ====
//
// Modes (kC2*, ep_kernels.h):
//   reduce-only (EpGroup::reduce): every route row is already in its owner's combine window (a GEMM
//     epilogue stored row m to scatter_dst[m] and fenced); split EP barrier, then the reduction
//     reads every route from this rank's combine window.
//   barrier: every warp stores the segments of the routes computed here whose owner is another rank
//     (plain 16-byte stores over NVLink), split EP barrier (the last CTA to finish its stores sends
//     the arrival; no grid barrier), reduce. Routes of this rank's own tokens computed here are never
//     copied: the reduction reads them from y[route_row[me][t][k]].
//   signal: warps [0, 16 - reduce_warps) of each CTA store remote routes and, every `signal_batch`
//     units, fence once and add the pieces stored to the owners' token counters; the other warps
//     reduce tokens in order, each waiting until its token's counter reaches (remote routed ids) x
//     (segments per row). The last CTA resets the counters.
// Scatter unit: (token t, owner s != me, group of k_group consecutive k, 4 KiB segment), token-
// major, so owners' tokens complete roughly in order. The reduction is v1's, bit for bit: per
// column acc = 0; for k in order, routed ids only: acc = fmaf(score, value, acc); bf16 RNE.

constexpr int kReduceBatch2 = 4;
static_assert(kRowSegmentVecs == kSegVecs, "host and device row segments differ");  // routes in flight per lane in the v2 reduction

// One warp: segment `seg` of the rows of the set bits of `mask` (lane j of the group holds the row
// of route k0 + j in `my_row`) to slot (t*K + k0 + j) of `dst_base` (an owner's combine window).
__device__ __forceinline__ void scatter_unit(const char* __restrict__ y, char* dst_base, unsigned mask,
                                             int32_t my_row, int64_t t, int k0, int K, int64_t row_bytes, int seg,
                                             int nvec, int lane) {
  unsigned m = mask;
  while (m != 0u) {
    const int j = __ffs(m) - 1;
    m &= m - 1u;
    const int32_t row = __shfl_sync(kFullMask, my_row, j);
    warp_copy_segment<false>(y + static_cast<int64_t>(row) * row_bytes,
                             dst_base + routing::combine_slot_offset(t, k0 + j, K, row_bytes), seg, nvec, lane);
  }
}

// Publishes the warp's stores (one fence for the warp) and adds each pending signal j (lane j:
// owner << 24 | token, pieces) to the owner's token counter.
__device__ __forceinline__ void flush_signals(char* const* s_sbase, int npend, uint32_t pend_code, uint32_t pend_n,
                                              int lane) {
  __syncwarp();
  fence_acq_rel_sys();
  if (lane < npend)
    red_add_relaxed_sys(reinterpret_cast<uint32_t*>(s_sbase[pend_code >> 24] + (pend_code & 0xffffffu) * 4ull), pend_n);
  __syncwarp();
}

template <typename IdT, bool kScoreBf16, int kMode>
__global__ void __launch_bounds__(kCombineThreads, 2)
    combine_remote_routes_kernel(const EpDeviceLayout L, const RoutingTables tab, const CombineArgs a) {
  __shared__ char* s_cbase[kMaxEpRanks];
  __shared__ char* s_sbase[kMaxEpRanks];
  for (int p = threadIdx.x; p < L.world; p += blockDim.x) {
    s_cbase[p] = peer_ptr(L.combine_win, 0, p);
    s_sbase[p] = peer_ptr(L.signal_win, L.token_counter_offset, p);
  }
  __syncthreads();
  trace_first(L, kTrCombineStart);

  constexpr int kWarps = kCombineThreads / 32;
  const int lane = threadIdx.x & 31;
  const int warp_in_cta = threadIdx.x >> 5;
  const int64_t row_bytes = L.row_bytes;
  const int nvec = static_cast<int>(row_bytes / 16);
  const int nseg = num_segments(nvec);
  const int K = L.top_k, R = L.world, me = L.rank;
  const int T = a.num_tokens;

  uint32_t next = 0;
  if constexpr (kMode != kRemoteSignal) next = split_barrier_begin(L, 0);

  bool do_scatter = kMode != kRemoteReduceOnly;
  bool do_reduce = true;
  int64_t s_index = static_cast<int64_t>(blockIdx.x) * kWarps + warp_in_cta;
  int64_t s_count = static_cast<int64_t>(gridDim.x) * kWarps;
  int64_t r_index = s_index, r_count = s_count;
  if constexpr (kMode == kRemoteSignal) {
   if (a.reduce_ctas > 0) {
    // CTA specialization: CTAs [0, sc) scatter with every warp, CTAs [sc, grid) reduce with every
    // warp (cooperative launch: all co-resident, so the reduce CTAs' waits cannot starve a scatter).
    const int sc = static_cast<int>(gridDim.x) - a.reduce_ctas;  // >= 1 (host-checked)
    do_scatter = static_cast<int>(blockIdx.x) < sc;
    do_reduce = !do_scatter;
    s_index = static_cast<int64_t>(blockIdx.x) * kWarps + warp_in_cta;
    s_count = static_cast<int64_t>(sc) * kWarps;
    r_index = static_cast<int64_t>(static_cast<int>(blockIdx.x) - sc) * kWarps + warp_in_cta;
    r_count = static_cast<int64_t>(a.reduce_ctas) * kWarps;
   } else {
    const int rw = a.reduce_warps;  // 1 .. kWarps - 1 (host-checked)
    const int sw = kWarps - rw;
    do_scatter = warp_in_cta < sw;
    do_reduce = !do_scatter;
    s_index = static_cast<int64_t>(blockIdx.x) * sw + warp_in_cta;
    s_count = static_cast<int64_t>(gridDim.x) * sw;
    r_index = static_cast<int64_t>(blockIdx.x) * rw + (warp_in_cta - sw);
    r_count = static_cast<int64_t>(gridDim.x) * rw;
   }
  }

  // ---- A. remote routes to their owners -----------------------------------------------------
  // Unit indices fit in 32 bits (EpGroup checks R * T_max * K * segments < 2^31).
  if (do_scatter && R > 1) {
    const uint32_t kg = static_cast<uint32_t>(a.k_group);
    const uint32_t ngroups = (static_cast<uint32_t>(K) + kg - 1) / kg;
    const uint32_t units = static_cast<uint32_t>(T) * static_cast<uint32_t>(R - 1) * ngroups * nseg;
    int npend = 0;          // pending signals of this warp (uniform)
    uint32_t pend_code = 0;  // lane j: (owner << 24) | token of pending signal j
    uint32_t pend_n = 0;     // lane j: pieces of pending signal j
    for (uint32_t u = static_cast<uint32_t>(s_index); u < units; u += static_cast<uint32_t>(s_count)) {
      const uint32_t seg = u % nseg;
      uint32_t rest = u / nseg;
      const uint32_t g = rest % ngroups;
      rest /= ngroups;
      const uint32_t si = rest % static_cast<uint32_t>(R - 1);
      const uint32_t t = rest / static_cast<uint32_t>(R - 1);
      const int s = static_cast<int>(si) < me ? static_cast<int>(si) : static_cast<int>(si) + 1;
      const int k0 = static_cast<int>(g * kg);
      const int32_t my_row = (lane < static_cast<int>(kg) && k0 + lane < K)
                                 ? tab.route_row[routing::route_row_index(s, int64_t{t} * K + k0 + lane, L.max_tokens, K)]
                                 : -1;
      const unsigned mask = __ballot_sync(kFullMask, my_row >= 0);
      if (mask == 0u) continue;
      scatter_unit(a.y, s_cbase[s], mask, my_row, t, k0, K, row_bytes, static_cast<int>(seg), nvec, lane);
      if constexpr (kMode == kRemoteSignal) {
        if (lane == npend) {
          pend_code = (static_cast<uint32_t>(s) << 24) | t;
          pend_n = static_cast<uint32_t>(__popc(mask));
        }
        if (++npend == a.signal_batch) {
          flush_signals(s_sbase, npend, pend_code, pend_n, lane);
          npend = 0;
        }
      }
    }
    if constexpr (kMode == kRemoteSignal) {
      if (npend > 0) flush_signals(s_sbase, npend, pend_code, pend_n, lane);
    }
  }
  if constexpr (kMode == kRemoteSignal) {
    // Trace only (no barrier: warp roles may differ inside a CTA): lane 0 of each scatter warp.
    if (do_scatter && lane == 0 && L.trace != nullptr)
      atomicMax(L.trace + kTrCombineScatterCtaDoneLast, globaltimer_ns());
  }

  // ---- B. split EP barrier: every peer's routes are in this rank's window ---------------------
  if constexpr (kMode != kRemoteSignal) {
    trace_last(L, kTrCombineScatterDoneLast);
    split_barrier_ready(L, 0, next);
    split_barrier_wait(L, 0, next);
    trace_first(L, kTrCombineBarrierDone);
  }

  // ---- C. reduce: unit (token t, 32 vectors), token-major -----------------------------------
  if (do_reduce) {
    const IdT* ids = published_ids<IdT>(L);
    const char* comb = s_cbase[me];
    // Reduce-only: the rows read here are also kept (the fused layer's saved h3), one pass over them.
    char* keep = nullptr;
    if constexpr (kMode == kRemoteReduceOnly) {
      if (a.keep.base != nullptr && common::stage_enabled(a.keep_skip, false))
        keep = common::resolve<char>(a.keep);
    }
    const uint32_t rseg = static_cast<uint32_t>(nvec + 31) / 32;
    const uint32_t units = static_cast<uint32_t>(T) * rseg;
    for (uint32_t u = static_cast<uint32_t>(r_index); u < units; u += static_cast<uint32_t>(r_count)) {
      const uint32_t t = u / rseg;
      const int seg = static_cast<int>(u - t * rseg);
      bool routed = false, remote = false;
      float score = 0.0f;
      const char* src = nullptr;
      if (lane < K) {
        const int64_t id = static_cast<int64_t>(ids[t * K + lane]);
        if (routing::is_routed(id, L.num_experts)) {
          routed = true;
          score = load_score<kScoreBf16>(a.scores, int64_t{t} * K + lane);
          remote = routing::owner_rank_of(id, L.local_experts, L.num_experts) != me;
          if (kMode != kRemoteReduceOnly && !remote) {
            const int32_t row = tab.route_row[routing::route_row_index(me, int64_t{t} * K + lane, L.max_tokens, K)];
            src = a.y + static_cast<int64_t>(row) * row_bytes;
          } else {
            src = comb + routing::combine_slot_offset(t, lane, K, row_bytes);
          }
        }
      }
      const unsigned routed_mask = __ballot_sync(kFullMask, routed);
      if constexpr (kMode == kRemoteSignal) {
        const unsigned remote_mask = __ballot_sync(kFullMask, remote);
        warp_wait_token_routes(L, static_cast<int>(t), static_cast<uint32_t>(__popc(remote_mask) * nseg));
      }
      const int v = seg * 32 + lane;
      const bool active = v < nvec;
      float acc[8];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = 0.0f;
      for (int kb = 0; kb < K; kb += kReduceBatch2) {
        int4 val[kReduceBatch2];
#pragma unroll
        for (int q = 0; q < kReduceBatch2; ++q) {
          const int k = kb + q;
          // Lane k holds route k's base; this lane reads its own column of it.
          const char* p =
              reinterpret_cast<const char*>(__shfl_sync(kFullMask, reinterpret_cast<unsigned long long>(src), k & 31));
          if (k < K && ((routed_mask >> k) & 1u) && active) val[q] = ld_cg_v4(p + static_cast<int64_t>(v) * 16);
        }
        if constexpr (kMode == kRemoteReduceOnly) {
          if (keep != nullptr) {
#pragma unroll
            for (int q = 0; q < kReduceBatch2; ++q) {
              const int k = kb + q;
              if (k < K && ((routed_mask >> k) & 1u) && active)
                st_v4(keep + routing::combine_slot_offset(t, k, K, row_bytes) + static_cast<int64_t>(v) * 16, val[q]);
            }
          }
        }
#pragma unroll
        for (int q = 0; q < kReduceBatch2; ++q) {
          const int k = kb + q;
          const float sk = __shfl_sync(kFullMask, score, k & 31);
          if (k < K && ((routed_mask >> k) & 1u) && active) accumulate8(acc, sk, val[q]);
        }
      }
      if (active) st_v4(a.out + int64_t{t} * row_bytes + static_cast<int64_t>(v) * 16, pack8(acc));
    }
  }

  // ---- D. signal mode: the last CTA resets this rank's token counters for the next call -------
  if constexpr (kMode == kRemoteSignal) last_cta_resets_token_counters(L, T);
  trace_last(L, kTrCombineEndLast);
}

template <typename IdT, bool kScoreBf16, int kMode>
void* remote_routes_ptr() {
  return reinterpret_cast<void*>(combine_remote_routes_kernel<IdT, kScoreBf16, kMode>);
}

template <int kMode>
void* remote_routes_ptr_of(int id_bytes, bool score_bf16) {
  if (id_bytes == 2) return score_bf16 ? remote_routes_ptr<int16_t, true, kMode>() : remote_routes_ptr<int16_t, false, kMode>();
  return score_bf16 ? remote_routes_ptr<int32_t, true, kMode>() : remote_routes_ptr<int32_t, false, kMode>();
}

void* remote_routes_kernel_ptr(int id_bytes, bool score_bf16, int mode) {
  switch (mode) {
    case kRemoteReduceOnly: return remote_routes_ptr_of<kRemoteReduceOnly>(id_bytes, score_bf16);
    case kRemoteBarrier: return remote_routes_ptr_of<kRemoteBarrier>(id_bytes, score_bf16);
    default: return remote_routes_ptr_of<kRemoteSignal>(id_bytes, score_bf16);
  }
}

template <int kMode>
void launch_remote_routes_mode(const EpDeviceLayout& L, const RoutingTables& tables, const CombineArgs& a, bool score_bf16,
                          int num_ctas, cudaStream_t stream) {
  const dim3 grid(num_ctas), block(kCombineThreads);
  if (L.id_bytes == 2) {
    if (score_bf16)
      launch_ex(combine_remote_routes_kernel<int16_t, true, kMode>, grid, block, 0, stream, true, false, L, tables, a);
    else
      launch_ex(combine_remote_routes_kernel<int16_t, false, kMode>, grid, block, 0, stream, true, false, L, tables, a);
  } else {
    if (score_bf16)
      launch_ex(combine_remote_routes_kernel<int32_t, true, kMode>, grid, block, 0, stream, true, false, L, tables, a);
    else
      launch_ex(combine_remote_routes_kernel<int32_t, false, kMode>, grid, block, 0, stream, true, false, L, tables, a);
  }
}

}  // namespace

int combine_remote_routes_max_coresident_ctas(int id_bytes, bool score_bf16, int mode, int num_sms) {
  int per_sm = 0;
  DMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, remote_routes_kernel_ptr(id_bytes, score_bf16, mode),
                                                                kCombineThreads, 0));
  return per_sm * num_sms;
}

void launch_combine_remote_routes(const EpDeviceLayout& L, const RoutingTables& tables, const CombineArgs& args, bool score_bf16,
                     int mode, int num_ctas, cudaStream_t stream) {
  switch (mode) {
    case kRemoteReduceOnly: launch_remote_routes_mode<kRemoteReduceOnly>(L, tables, args, score_bf16, num_ctas, stream); break;
    case kRemoteBarrier: launch_remote_routes_mode<kRemoteBarrier>(L, tables, args, score_bf16, num_ctas, stream); break;
    default: launch_remote_routes_mode<kRemoteSignal>(L, tables, args, score_bf16, num_ctas, stream); break;
  }
}

}  // namespace dist_moe::comm
