// Combine, rank partials (CombineAlgorithm::kRankPartials): see the notes below.
#include "comm/combine_common.cuh"

namespace dist_moe::comm {
namespace {

// ==== v3 (kRankPartials): each owner sums its routes of a token before sending ====================
//
// Reduction order (reference::topk_reduce_rank_partials): per token, for each owner rank r in order
// that computed routes of it, P_r = the k-ordered fmaf chain of its routes from 0 (FP32); then acc =
// 0 and acc += P_r in rank order (FP32 adds); out = bf16 RNE(acc). One owner: v1/v2's bits.
// What crosses NVLink per (token, remote owner): the BF16 row of its route when it holds one (the
// token's rank computes fmaf(s, y, 0) itself), else the FP32 partial: columns [0, D/2) in the slot of
// its first route, [D/2, D) in the slot of its second (4D bytes in the 2 x 2D bytes of its own slots;
// D % 16 == 0 keeps a 16-byte vector inside one half). At EP2, K = 8 that is about half of v2's bytes.
//   0. scores for the owners (K > 1 and R > 1; an owner holding one route of a token needs none):
//      either pushed with the ids by the fused route kernel (DispatchOptions::scores_TK; every
//      pushed slot's scores_epoch must be this call's), or every rank writes its FP32 [T, K] into
//      its own dispatch window after the published x rows, then a split EP barrier.
//   A. unit (token t, rank s, segment of 32c vectors; even c in [2, 8] so that the units cover the warps
//      when the rows are few), token-major, warps numbered CTA-fastest: the routes of (s, t)
//      computed here (route_row): one -> s != me: copy its segment (s == me: left to B); several ->
//      the FP32 partial of the segment's columns into the two slots of rank s's combine window (this
//      rank's own window for its own tokens, so B reads one value per owner). Split EP barrier that
//      also waits for this grid (B reads the other CTAs' local partials).
//   B. unit (token t, 32 cb vectors, cb in [1, 3]): per owner in rank order its P (a single route's
//      row times its score -- this rank's own from y -- or the partial), kOwnerBatch owners' loads
//      in flight; acc += P. The first unit's ids, scores and rows are loaded before the barrier wait.
// CombineArgs::partials_sync changes A and B without changing a bit of the result:
//   kPartialsBarrierOwnLate: A handles s != me only; B sums this rank's own routes of its unit
//      itself (the same k-ordered chain from y, kept in registers), for the first unit before the
//      barrier wait: the own partials are neither stored nor read back, and the first unit's own
//      loads overlap the barrier (perf.md C13: B is bandwidth-bound after the barrier at decode).
//   kPartialsSignal: as OwnLate, and no barrier: A runs a row's segments on the warps of one CTA
//      (rows CTA-fastest); after the CTA's stores, one release fence, then one increment of owner
//      s's counter of token t per row (s, t) with routes; a B unit waits until its token's counter
//      reaches the number of other owners with routes of t. Counters [parity][T_max] in the signal
//      window, parity = the call's routing slot; every publish (publish_kernel, the fused route)
//      zeroes its call's parity before its arrival, and the peers increment them only after that
//      arrival. The previous call of that parity is complete here: this rank's waits of that call
//      consumed every increment of it. One combine per routed call, as in v1/v2 signal mode.
// 384-thread CTAs (one per SM): up to 168 registers, for the owner phase's loads in flight.
constexpr int kRankPartialsThreads = 384;
constexpr int kPartialBatch = 4;  // routes in flight per lane in the owner-side partial sums
constexpr int kOwnerVecs = 2;     // 16-byte vectors per lane per step of an owner-side partial
// Owners whose loads are in flight together in the final reduction: with the own partial in
// registers (kOwnLate) one, for the registers (168 at 384 threads) -- at EP2 one owner is remote.
template <bool kOwnLate>
constexpr int kOwnerBatch = kOwnLate ? 1 : 2;
constexpr int kReduceVecs = 3;    // 16-byte vectors per lane of a final-reduction unit (at most)
constexpr int kOwnRouteBatch = 2;  // own_late: own routes in flight per lane (x kReduceVecs loads)

// A rank-partials combine with pushed scores found a peer's pushed slot without this call's scores
// (one rank passed DispatchOptions::scores_TK, another did not): one line, then trap.
__device__ __noinline__ void report_stale_pushed_scores(const EpDeviceLayout& L, uint32_t call, int peer,
                                                        uint32_t found) {
  if (take_diag_lock(L.state))
    printf("DistMoE protocol error: rank %d runs the rank-partials combine of call %u with pushed scores, but rank %d "
           "pushed scores last with call %u; pass DispatchOptions::scores_TK to publish_route_dispatch on every rank "
           "or on none\n",
           L.rank, call, peer, found);
  __trap();
}

// acc[j] = the k-ordered fmaf chain, from acc[j], over the routes in `mask` (lane k holds route k's
// row of y in `row` and its score in `score`), for the 16-byte vectors v0 + 32j + lane with j < nj
// and below v_end; kBatch routes' loads in flight per lane. All lanes call (warp-uniform mask).
template <int kBatch, int kVecs>
__device__ __forceinline__ void add_route_chain(float (&acc)[kVecs][8], unsigned mask, int32_t row, float score,
                                                const char* __restrict__ y, int64_t row_bytes, int v0, int nj,
                                                int v_end, int lane) {
  unsigned m = mask;
  while (m != 0u) {  // routes in k order
    int kk[kBatch];
    int nb = 0;
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      kk[q] = -1;
      if (m != 0u) {
        kk[q] = __ffs(m) - 1;
        m &= m - 1u;
        ++nb;
      }
    }
    int4 val[kBatch][kVecs];
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const int32_t r = __shfl_sync(kFullMask, row, kk[q] < 0 ? 0 : kk[q]);
      const char* src = y + static_cast<int64_t>(r) * row_bytes;
#pragma unroll
      for (int j = 0; j < kVecs; ++j) {
        const int v = v0 + j * 32 + lane;
        if (q < nb && j < nj && v < v_end) val[q][j] = ld_nc_v4(src + static_cast<int64_t>(v) * 16);
      }
    }
#pragma unroll
    for (int q = 0; q < kBatch; ++q) {
      const float sk = __shfl_sync(kFullMask, score, kk[q] < 0 ? 0 : kk[q]);
#pragma unroll
      for (int j = 0; j < kVecs; ++j)
        if (q < nb && j < nj && v0 + j * 32 + lane < v_end) accumulate8(acc[j], sk, val[q][j]);
    }
  }
}

// kSync: CombineArgs::partials_sync (kPartials*), one instantiation each.
template <typename IdT, bool kScoreBf16, int kSync>
__global__ void __launch_bounds__(kRankPartialsThreads, 1)
    combine_rank_partials_kernel(const EpDeviceLayout L, const RoutingTables tab, const CombineArgs a) {
  trace_first(L, kTrCombineStart);
  const int K = L.top_k, R = L.world, me = L.rank, T = a.num_tokens;
  constexpr int kWarps = kRankPartialsThreads / 32;
  const int lane = threadIdx.x & 31;
  constexpr bool signal = kSync == kPartialsSignal;
  constexpr bool own_late = kSync != kPartialsBarrier;  // own partials summed in B
  constexpr int kOwners = kOwnerBatch<own_late>;
  // No CTA-wide set-up (it took ~1 us at decode, perf.md C12): the last warp, which holds no owner
  // unit when they are few (decode; perf.md C13: on warp 0 the load delayed its owner unit), loads
  // the split barrier's next epoch into shared memory now (before its CTA counts itself ready, as
  // split_barrier_begin would), read after the CTA's next __syncthreads; the call (the pushed
  // slots' parity) is loaded where needed.
  constexpr int kSetUpThread = kRankPartialsThreads - 32;  // lane 0 of the last warp
  __shared__ uint32_t s_next;
  if (threadIdx.x == kSetUpThread) s_next = split_barrier_next_epoch(L, 0);
  // Trace points of that thread (CTA 0).
  auto trace_set_up_thread = [&L](int slot) {
    if (L.trace != nullptr && blockIdx.x == 0 && threadIdx.x == kSetUpThread) L.trace[slot] = globaltimer_ns();
  };
  auto load_call = [&L]() { return *reinterpret_cast<volatile uint32_t*>(&L.state->publish_count); };
  const int64_t score_offset = routing::dispatch_score_offset(0, L.max_tokens, L.row_bytes);  // past the x rows
  // Owners' scores of source rank s's routes: pushed into this rank's slot [parity][s], or s's own
  // dispatch window after its x rows.
  auto scores_of = [&](int s, int parity) {
    return reinterpret_cast<const float*>(a.scores_pushed ? routing_push_ptr(L, parity, s, me) + L.push_scores_offset
                                                          : peer_ptr(L.dispatch_win, score_offset, s));
  };
  trace_set_up_thread(kTrCombineSetUp);

  const int64_t row_bytes = L.row_bytes;
  const int nvec = static_cast<int>(row_bytes / 16);
  const int half_vecs = nvec / 2;  // vectors of columns [0, D/2)
  const int rseg = (nvec + 31) / 32;
  // Warps numbered CTA-fastest (warp * CTAs + CTA), so that few units (decode) still reach every SM;
  // numbered CTA-major, dsv3_decode's 512 owner units had all landed on CTAs 0-31 of 132 (perf.md C11).
  const int64_t w_index = static_cast<int64_t>(threadIdx.x >> 5) * gridDim.x + blockIdx.x;
  const int64_t w_count = static_cast<int64_t>(gridDim.x) * kWarps;

  uint32_t barriers_done = 0;  // split barriers this kernel ran before the owner phase's

  // ---- 0. scores for the owners --------------------------------------------------------------
  if (K > 1 && R > 1) {
    if (a.scores_pushed) {
      // The last warp checks the slots; the others go on (a stale slot traps the grid shortly after).
      if (threadIdx.x >= kSetUpThread) {
        const uint32_t call = load_call();
        const int parity = static_cast<int>((call - 1u) & 1u);
        for (int p = lane; p < R; p += 32) {
          if (p == me) continue;
          const RoutingHeader* h = reinterpret_cast<const RoutingHeader*>(routing_push_ptr(L, parity, p, me));
          const uint32_t found = *reinterpret_cast<const volatile uint32_t*>(&h->scores_epoch);
          if (found != call) report_stale_pushed_scores(L, call, p, found);
        }
      }
    } else {
      float* mine = reinterpret_cast<float*>(local_ptr(L.dispatch_win, score_offset));
      for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < int64_t{T} * K;
           i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        mine[i] = load_score<kScoreBf16>(a.scores, i);
      __syncthreads();
      const uint32_t next = s_next;
      split_barrier_ready(L, 0, next, true);
      split_barrier_wait(L, 0, next, true);
      ++barriers_done;
    }
    trace_set_up_thread(kTrCombineScoresDone);
  }

  // ---- A. owner side: per (token, rank) a copied row or an FP32 partial ------------------------
  {
    const int ranks_sent = own_late ? R - 1 : R;  // (token, rank) rows per token handled here
    const int64_t rows = int64_t{T} * ranks_sent;
    const int64_t chunks = rows * rseg;  // 32-vector pieces of all (token, rank) rows
    // Signal mode: a row's segments go to the warps of one CTA (below), so size them to those warps.
    const int64_t spread = signal ? (rseg + kWarps - 1) / kWarps : (chunks + w_count - 1) / w_count;
    const int64_t per_warp = (max(int64_t{1}, spread) + kOwnerVecs - 1) / kOwnerVecs * kOwnerVecs;
    const int c = static_cast<int>(min(static_cast<int64_t>(kRowUnroll), per_warp));  // a multiple of kOwnerVecs
    const int seg_vecs = 32 * c;
    const int nseg = (nvec + seg_vecs - 1) / seg_vecs;
    // Barrier mode: units (row, segment) token-major over the warps, numbered CTA-fastest, this
    // rank's own rows interleaved: its local stores overlap the NVLink ones (the other ranks' units
    // first measured slower, docs/perf.md C12). Signal mode: rows CTA-fastest, a row's segments on
    // the warps of that CTA, so that one fence per CTA publishes whole rows.
    const int64_t cta_rows = (rows - blockIdx.x + gridDim.x - 1) / gridDim.x;  // rows of this CTA (signal)
    const int64_t first = signal ? threadIdx.x >> 5 : w_index;
    const int64_t stride = signal ? kWarps : w_count;
    const int64_t count = signal ? cta_rows * nseg : rows * nseg;
    for (int64_t u = first; u < count; u += stride) {
      const int seg = static_cast<int>(u % nseg);
      const int64_t ts = signal ? blockIdx.x + (u / nseg) * gridDim.x : u / nseg;  // the row
      const int si = static_cast<int>(ts % ranks_sent);
      const int s = own_late && si >= me ? si + 1 : si;
      const int64_t t = ts / ranks_sent;
      const int32_t my_row = lane < K ? tab.route_row[routing::route_row_index(s, t * K + lane, L.max_tokens, K)] : -1;
      const uint32_t call = a.scores_pushed ? load_call() : 0u;  // in flight with the route rows
      const unsigned mask = __ballot_sync(kFullMask, my_row >= 0);
      const bool single = (mask & (mask - 1u)) == 0u;
      if (mask == 0u || (single && s == me)) continue;  // a single own route: B reads it from y
      const int k1 = __ffs(mask) - 1;
      char* dst1 = peer_ptr(L.combine_win, routing::combine_slot_offset(t, k1, K, row_bytes), s);
      const int v_begin = seg * seg_vecs;
      const int v_end = min(nvec, v_begin + seg_vecs);
      if (single) {  // its BF16 row
        const char* src = a.y + static_cast<int64_t>(__shfl_sync(kFullMask, my_row, k1)) * row_bytes;
        int4 buf[kRowUnroll];
#pragma unroll
        for (int q = 0; q < kRowUnroll; ++q) {
          const int v = v_begin + q * 32 + lane;
          if (v < v_end) buf[q] = ld_nc_v4(src + static_cast<int64_t>(v) * 16);
        }
#pragma unroll
        for (int q = 0; q < kRowUnroll; ++q) {
          const int v = v_begin + q * 32 + lane;
          if (v < v_end) st_v4(dst1 + static_cast<int64_t>(v) * 16, buf[q]);
        }
        continue;
      }
      const int k2 = __ffs(mask & (mask - 1u)) - 1;
      char* dst2 = peer_ptr(L.combine_win, routing::combine_slot_offset(t, k2, K, row_bytes), s);
      const int parity = static_cast<int>((call - 1u) & 1u);
      float score = 0.0f;
      if (my_row >= 0)
        score = s == me ? load_score<kScoreBf16>(a.scores, t * K + lane)
                        : __int_as_float(ld_cg_s32(scores_of(s, parity) + t * K + lane));
      // Warp-uniform trip count (the shuffles below need every lane); lanes past the row idle.
      // kOwnerVecs vectors per lane per step: kPartialBatch x kOwnerVecs loads in flight.
      for (int v0 = v_begin; v0 < v_end; v0 += 32 * kOwnerVecs) {
        float acc[kOwnerVecs][8];
#pragma unroll
        for (int j = 0; j < kOwnerVecs; ++j)
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[j][i] = 0.0f;
        add_route_chain<kPartialBatch>(acc, mask, my_row, score, a.y, row_bytes, v0, kOwnerVecs, v_end, lane);
#pragma unroll
        for (int j = 0; j < kOwnerVecs; ++j) {
          const int v = v0 + j * 32 + lane;
          if (v >= v_end) continue;
          const bool first = v < half_vecs;
          char* dst = first ? dst1 : dst2;
          const int w = first ? v : v - half_vecs, len = first ? half_vecs : nvec - half_vecs;
          st_v4(dst + routing::partial_half_offset(w, 0, len), make_int4(__float_as_int(acc[j][0]), __float_as_int(acc[j][1]),
                                                                __float_as_int(acc[j][2]), __float_as_int(acc[j][3])));
          st_v4(dst + routing::partial_half_offset(w, 1, len), make_int4(__float_as_int(acc[j][4]), __float_as_int(acc[j][5]),
                                                                __float_as_int(acc[j][6]), __float_as_int(acc[j][7])));
        }
      }
    }
    // Signal mode: the CTA's stores, then one release fence (its last warp, which holds no final
    // unit at decode); each lane then adds 1 to the owner's counter of a (token, owner) row of this
    // CTA that has routes. A fence per warp measured ~5 us slower (perf.md C13): MEMBAR.SYS of the
    // 12 warps of an SM serialize.
    if (signal) {
      __syncthreads();
      if (threadIdx.x >= blockDim.x - 32) {
        const int parity = static_cast<int>((load_call() - 1u) & 1u);
        fence_acq_rel_sys();
        for (int64_t row = blockIdx.x + int64_t{lane} * gridDim.x; row < rows; row += int64_t{gridDim.x} * 32) {
          const int si = static_cast<int>(row % ranks_sent);
          const int s = si >= me ? si + 1 : si;
          const int64_t t = row / ranks_sent;
          bool routed = false;
          for (int k = 0; k < K && !routed; ++k)
            routed = tab.route_row[routing::route_row_index(s, t * K + k, L.max_tokens, K)] >= 0;
          if (routed) red_add_relaxed_sys(partial_counter_ptr(L, s, parity, t), 1u);
        }
      }
    }
  }
  uint32_t next = 0;
  if (!signal) {
    __syncthreads();
    next = s_next + barriers_done;
    trace_last(L, kTrCombineScatterDoneLast);
    split_barrier_ready(L, 0, next, true);
  } else if (threadIdx.x == blockDim.x - 32 && L.trace != nullptr) {  // the CTA's rows signalled
    atomicMax(L.trace + kTrCombineScatterCtaDoneLast, globaltimer_ns());
  }

  // ---- B. the token's rank: owners' values in rank order -------------------------------------
  // Unit (token t, segment of 32 cb vectors, cb in [1, kReduceVecs]): cb sized, like A's segments,
  // so that the units cover the warps in one round when the rows are few.
  const IdT* ids = published_ids<IdT>(L);
  const char* comb = local_ptr(L.combine_win, 0);
  const int cb = static_cast<int>(
      min(static_cast<int64_t>(kReduceVecs), max(int64_t{1}, (int64_t{T} * rseg + w_count - 1) / w_count)));
  const int bseg = (rseg + cb - 1) / cb;
  const int64_t units = int64_t{T} * bseg;
  // Lane k < K: route (t, k)'s score, owner rank (-1: not routed) and, for this rank's own routes,
  // its row of y. Loaded for the warp's first unit before the barrier wait (they do not depend on it).
  float score = 0.0f;
  int owner = -1;
  int32_t local_row = -1;
  auto load_route = [&](int64_t t) {
    score = 0.0f;
    owner = -1;
    local_row = -1;
    if (lane < K) {
      const int64_t id = static_cast<int64_t>(ids[t * K + lane]);
      if (routing::is_routed(id, L.num_experts)) {
        score = load_score<kScoreBf16>(a.scores, t * K + lane);
        owner = static_cast<int>(id / L.local_experts);
        if (owner == me) local_row = tab.route_row[routing::route_row_index(me, t * K + lane, L.max_tokens, K)];
      }
    }
  };
  // own_late: this rank's own routes of the unit summed here, the same k-ordered chain as A's.
  float own[kReduceVecs][8];
  auto own_partial = [&](int v_begin) {
#pragma unroll
    for (int q = 0; q < kReduceVecs; ++q)
#pragma unroll
      for (int i = 0; i < 8; ++i) own[q][i] = 0.0f;
    add_route_chain<kOwnRouteBatch>(own, __ballot_sync(kFullMask, owner == me), local_row, score, a.y, row_bytes,
                                    v_begin, cb, nvec, lane);
  };
  const int call_parity = signal ? static_cast<int>((load_call() - 1u) & 1u) : 0;
  if (w_index < units) {
    load_route(w_index / bseg);
    if (own_late) own_partial(static_cast<int>(w_index % bseg) * 32 * cb);
  }
  if (!signal) {
    split_barrier_wait(L, 0, next, true);
    trace_first(L, kTrCombineBarrierDone);
  }

  for (int64_t u = w_index; u < units; u += w_count) {
    const int64_t t = u / bseg;
    const int v_begin = static_cast<int>(u - t * bseg) * 32 * cb;
    if (u != w_index) {
      load_route(t);
      if (own_late) own_partial(v_begin);
    }
    if (signal) {  // every other owner's rows of token t have arrived
      uint32_t others = 0;
      for (int r = 0; r < R; ++r) others += (r != me && __ballot_sync(kFullMask, owner == r) != 0u) ? 1u : 0u;
      if (lane == 0 && others > 0)
        wait_count_reached_sys(partial_counter_ptr(L, me, call_parity, t), others, WaitContext{L.timeout_cycles, me},
                               WaitSite::kCombineRoutes, -1, static_cast<int>(t));
      __syncwarp();
      if (u == w_index) trace_first(L, kTrCombineBarrierDone);
    }
    float acc[kReduceVecs][8];
#pragma unroll
    for (int q = 0; q < kReduceVecs; ++q)
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[q][i] = 0.0f;
    int r = 0;
    while (r < R) {  // up to kOwners owners per round: their loads in flight together
      const char* b1[kOwners];  // one route: its row (y or the slot); partial: slot of columns [0, D/2)
      const char* b2[kOwners];  // partial: slot of columns [D/2, D)
      float sk[kOwners];
      int kind[kOwners];  // 0: no owner, 1: one route (BF16 row x score), 2: FP32 partial, 3: own (registers)
#pragma unroll
      for (int o = 0; o < kOwners; ++o) {
        kind[o] = 0;
        b1[o] = b2[o] = comb;
        sk[o] = 0.0f;
        unsigned mr = 0u;
        while (r < R && (mr = __ballot_sync(kFullMask, owner == r)) == 0u) ++r;
        if (r >= R) continue;
        const int k1 = __ffs(mr) - 1;
        if (own_late && r == me) {
          kind[o] = 3;
        } else if ((mr & (mr - 1u)) == 0u) {
          kind[o] = 1;
          sk[o] = __shfl_sync(kFullMask, score, k1);
          const int32_t row = __shfl_sync(kFullMask, local_row, k1);
          b1[o] = r == me ? a.y + static_cast<int64_t>(row) * row_bytes : comb + routing::combine_slot_offset(t, k1, K, row_bytes);
        } else {
          kind[o] = 2;
          b1[o] = comb + routing::combine_slot_offset(t, k1, K, row_bytes);
          b2[o] = comb + routing::combine_slot_offset(t, __ffs(mr & (mr - 1u)) - 1, K, row_bytes);
        }
        ++r;
      }
      int4 lo[kOwners][kReduceVecs], hi[kOwners][kReduceVecs];
#pragma unroll
      for (int o = 0; o < kOwners; ++o)
#pragma unroll
        for (int q = 0; q < kReduceVecs; ++q) {
          const int v = v_begin + q * 32 + lane;
          const bool active = q < cb && v < nvec;
          lo[o][q] = hi[o][q] = make_int4(0, 0, 0, 0);
          if (active && kind[o] == 1) lo[o][q] = ld_cg_v4(b1[o] + static_cast<int64_t>(v) * 16);
          if (active && kind[o] == 2) {
            const bool first = v < half_vecs;
            const char* src = first ? b1[o] : b2[o];
            const int w = first ? v : v - half_vecs, len = first ? half_vecs : nvec - half_vecs;
            lo[o][q] = ld_cg_v4(src + routing::partial_half_offset(w, 0, len));
            hi[o][q] = ld_cg_v4(src + routing::partial_half_offset(w, 1, len));
          }
        }
#pragma unroll
      for (int o = 0; o < kOwners; ++o) {
        if (kind[o] == 0) continue;
#pragma unroll
        for (int q = 0; q < kReduceVecs; ++q) {
          float p[8];
          if (kind[o] == 3) {
#pragma unroll
            for (int i = 0; i < 8; ++i) p[i] = own[q][i];
          } else if (kind[o] == 1) {
#pragma unroll
            for (int i = 0; i < 8; ++i) p[i] = 0.0f;
            accumulate8(p, sk[o], lo[o][q]);
          } else {
            p[0] = __int_as_float(lo[o][q].x); p[1] = __int_as_float(lo[o][q].y);
            p[2] = __int_as_float(lo[o][q].z); p[3] = __int_as_float(lo[o][q].w);
            p[4] = __int_as_float(hi[o][q].x); p[5] = __int_as_float(hi[o][q].y);
            p[6] = __int_as_float(hi[o][q].z); p[7] = __int_as_float(hi[o][q].w);
          }
#pragma unroll
          for (int i = 0; i < 8; ++i) acc[q][i] = __fadd_rn(acc[q][i], p[i]);
        }
      }
    }
#pragma unroll
    for (int q = 0; q < kReduceVecs; ++q) {
      const int v = v_begin + q * 32 + lane;
      if (q < cb && v < nvec) st_v4(a.out + t * row_bytes + static_cast<int64_t>(v) * 16, pack8(acc[q]));
    }
    if (u == w_index) trace_first(L, kTrCombineFirstReduce);  // CTA 0's warp 0: its first unit stored
  }

  trace_last(L, kTrCombineEndLast);
}

}  // namespace

template <int kSync>
const void* rank_partials_ptr(int id_bytes, bool score_bf16) {
  if (id_bytes == 2)
    return score_bf16 ? reinterpret_cast<const void*>(combine_rank_partials_kernel<int16_t, true, kSync>)
                      : reinterpret_cast<const void*>(combine_rank_partials_kernel<int16_t, false, kSync>);
  return score_bf16 ? reinterpret_cast<const void*>(combine_rank_partials_kernel<int32_t, true, kSync>)
                    : reinterpret_cast<const void*>(combine_rank_partials_kernel<int32_t, false, kSync>);
}

template <int kSync>
void launch_rank_partials_as(const EpDeviceLayout& L, const RoutingTables& tables, const CombineArgs& a, bool score_bf16,
                        int num_ctas, cudaStream_t stream) {
  using Kernel = void (*)(EpDeviceLayout, RoutingTables, CombineArgs);
  const Kernel kernel = L.id_bytes == 2 ? (score_bf16 ? combine_rank_partials_kernel<int16_t, true, kSync> : combine_rank_partials_kernel<int16_t, false, kSync>)
                                        : (score_bf16 ? combine_rank_partials_kernel<int32_t, true, kSync> : combine_rank_partials_kernel<int32_t, false, kSync>);
  // Signal mode with the scores pushed (or nothing to exchange) has no barrier inside the grid: a
  // CTA waits only for other ranks' owner rows, which every CTA stores before any wait, so a grid
  // that fits co-resident (num_ctas is capped by combine_rank_partials_max_coresident_ctas) cannot deadlock
  // without the cooperative attribute (an empty cooperative kernel of this grid measures ~1.3 us
  // more graphed; the decode combine gained ~0.2 us, perf.md C14).
  const bool grid_sync = kSync != kPartialsSignal || (L.top_k > 1 && L.world > 1 && !a.scores_pushed);
  launch_ex(kernel, dim3(num_ctas), dim3(kRankPartialsThreads), 0, stream, grid_sync, false, L, tables, a);
}

// The co-resident CTAs of every variant (the grid of each must fit).
int combine_rank_partials_max_coresident_ctas(int id_bytes, bool score_bf16, int num_sms) {
  int per_sm = 1 << 30;
  for (const void* fn : {rank_partials_ptr<kPartialsBarrier>(id_bytes, score_bf16),
                         rank_partials_ptr<kPartialsBarrierOwnLate>(id_bytes, score_bf16),
                         rank_partials_ptr<kPartialsSignal>(id_bytes, score_bf16)}) {
    int n = 0;
    DMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, fn, kRankPartialsThreads, 0));
    per_sm = std::min(per_sm, n);
  }
  return per_sm * num_sms;
}

void launch_combine_rank_partials(const EpDeviceLayout& L, const RoutingTables& tables, const CombineArgs& a, bool score_bf16,
                     int num_ctas, cudaStream_t stream) {
  switch (a.partials_sync) {
    case kPartialsBarrier: launch_rank_partials_as<kPartialsBarrier>(L, tables, a, score_bf16, num_ctas, stream); break;
    case kPartialsBarrierOwnLate: launch_rank_partials_as<kPartialsBarrierOwnLate>(L, tables, a, score_bf16, num_ctas, stream); break;
    default: launch_rank_partials_as<kPartialsSignal>(L, tables, a, score_bf16, num_ctas, stream); break;
  }
}

}  // namespace dist_moe::comm
