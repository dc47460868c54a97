// Routing metadata on the device: after one EP barrier, every rank reads all peers' published ids
// and builds its expert-major row order and tables, with no host read.
//
// One kernel of 1024-thread CTAs over the concatenated route space f = s*T*K + t*K + k (all
// sources, rank order). CTA g owns routes [g*C, (g+1)*C); warp w of it owns a contiguous segment.
//   0. (optional) EP barrier by CTA 0, grid barrier.
//   1. Headers: every CTA checks all peers' {T, epoch, magic}; on a mismatch CTA 0 prints one line
//      and traps, every other thread returns before touching any id.
//   2. Load the chunk's ids (ld.global.cg from peer routing windows), keep the local expert index
//      of each route (int16, -1 = not routed here) in shared memory; count routes per source rank
//      and, on this rank's own ids, routes per destination rank.
//   3. Per-warp counts per local expert (__match_any_sync groups equal experts of 32 routes),
//      exclusive prefix over warps, chunk totals to global memory.
//   4. Grid barrier; every CTA sums the chunk totals (all of them, and those before its own
//      chunk), pads each expert to the alignment, scans over experts. Capacity check: one line
//      (rank, required rows, available rows) and a trap by CTA 0, everyone else returns, before
//      any table is written. CTA 0 writes counts and offsets.
//   5. Placement: each route's row = expert offset + routes of the expert in earlier chunks +
//      earlier warp segments + earlier lanes/steps of this warp: the stable order (expert, source
//      rank, token, k). Writes gather_src, scatter_dst, row_route, and route_row for every route.
//   6. Padding rows of each expert get the sentinels.
// routing_layout.cuh holds the shared arithmetic and its sequential host mirror.
#include <algorithm>
#include <mutex>

#include "comm/ep_launch_and_copy.cuh"
#include "comm/ep_kernels.h"

#include "dist_moe/device/routing/routing_layout.cuh"

namespace dist_moe::comm {
namespace {

using routing::combine_slot_offset;
using routing::dispatch_route_offset;
using routing::dispatch_row_offset;
using routing::encode_route;
using routing::local_expert_of;
using routing::owner_rank_of;
using routing::pad_rows;
using routing::route_row_index;

constexpr int kIdBatch = 8;  // ids in flight per thread

__device__ __forceinline__ unsigned lanemask_lt() {
  unsigned m;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(m));
  return m;
}

template <typename IdT>
__device__ __forceinline__ int32_t load_published_id(const char* p) {
  if constexpr (sizeof(IdT) == 2)
    return ld_cg_s16(p);
  else
    return ld_cg_s32(p);
}

// Exclusive prefix sum of data[0, n) in place by all threads of the CTA; returns the total.
__device__ int32_t block_exclusive_scan(int32_t* data, int n, int32_t* warp_sums) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int nthreads = blockDim.x, nwarps = nthreads >> 5;
  const int per = (n + nthreads - 1) / nthreads;
  const int b = min(tid * per, n), e = min(b + per, n);
  int32_t local = 0;
  for (int i = b; i < e; ++i) local += data[i];
  int32_t incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int32_t y = __shfl_up_sync(kFullMask, incl, o);
    if (lane >= o) incl += y;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int32_t w = lane < nwarps ? warp_sums[lane] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t y = __shfl_up_sync(kFullMask, w, o);
      if (lane >= o) w += y;
    }
    if (lane < nwarps) warp_sums[lane] = w;
  }
  __syncthreads();
  int32_t run = incl - local + (warp > 0 ? warp_sums[warp - 1] : 0);
  const int32_t total = warp_sums[nwarps - 1];
  for (int i = b; i < e; ++i) {
    const int32_t c = data[i];
    data[i] = run;
    run += c;
  }
  __syncthreads();
  return total;
}

__device__ __noinline__ void report_header_problem(const EpDeviceLayout& L, uint32_t count, int num_tokens, int peer,
                                                   int peer_tokens, uint32_t peer_epoch, uint32_t peer_magic) {
  if (count == 0u) {
    printf("DistMoE protocol error: rank %d ran route() before any publish()\n", L.rank);
  } else if (peer_magic != kRoutingHeaderMagic || peer_epoch != count) {
    printf("DistMoE protocol error: rank %d is at call %u but rank %d published call %u (magic 0x%x); every rank "
           "must publish exactly once per call before route()\n",
           L.rank, count, peer, peer_epoch, peer_magic);
  } else {
    printf("DistMoE token count mismatch: rank %d called with T=%d but rank %d published T=%d; every EP rank must "
           "pass the same number of tokens in one call\n",
           L.rank, num_tokens, peer, peer_tokens);
  }
  __trap();
}

__device__ __noinline__ void report_overflow(const EpDeviceLayout& L, int32_t required, int64_t capacity) {
  printf("DistMoE scratch capacity exceeded: rank %d required_receive_rows: %d total_scratch_capacity_rows: %lld\n",
         L.rank, required, static_cast<long long>(capacity));
  __trap();
}

// ---- phases shared by routing_kernel and fused_route_kernel ----------------------------------------
// Both build the same tables from the same published ids; the fused kernel is the single-chunk case
// (every CTA sees all routes), so the phases take the chunk as routes [first, first + len). Each
// kernel keeps its own barriers, traces and exits between the phases. All are force-inlined and the
// callers' lambdas capture pointers and scalars by value (kernel parameters by reference): the SASS
// then matches the former hand-inlined loops, where [&] changed NVVM's shared-address arithmetic.

// {T, epoch, magic} of peer p's routing header h into hdr[3p, 3p + 3) (ld.global.cg: another GPU
// wrote it).
__device__ __forceinline__ void load_peer_header(int32_t* hdr, int p, const char* h) {
  hdr[3 * p + 0] = ld_cg_s32(h + 0);
  hdr[3 * p + 1] = ld_cg_s32(h + 4);
  hdr[3 * p + 2] = ld_cg_s32(h + 8);
}

// Peer bases of this call (routing slot, dispatch and combine windows) and zeroed per-rank and
// per-warp counters. kLoadHeaders reads the headers in the same pass: route() runs after every
// publish, the fused kernel only after its arrival wait.
template <bool kLoadHeaders>
__device__ __forceinline__ void init_peer_bases(const EpDeviceLayout& L, int slot, char** rbase, char** dbase,
                                                char** cbase, int32_t* hdr, int32_t* rank_cnt, int32_t* wcnt) {
  const int R = L.world, Lx = L.local_experts, tid = threadIdx.x;
  for (int p = tid; p < R; p += blockDim.x) {
    rbase[p] = routing_slot_ptr(L, slot, p);
    dbase[p] = peer_ptr(L.dispatch_win, 0, p);
    cbase[p] = peer_ptr(L.combine_win, 0, p);
    if constexpr (kLoadHeaders) load_peer_header(hdr, p, rbase[p]);
  }
  for (int p = tid; p < 2 * R; p += blockDim.x) rank_cnt[p] = 0;
  for (int i = tid; i < kRoutingWarps * Lx; i += blockDim.x) wcnt[i] = 0;
}

// Thread 0 checks every peer's header (the caller synced after loading them) against this call's
// epoch and T; `published` is false when route() runs before any publish(). On a mismatch CTA 0
// prints one line and traps, and every thread of every CTA gets false, to return before any id read.
__device__ __forceinline__ bool headers_match(const EpDeviceLayout& L, const int32_t* hdr, int& bad_peer, int T,
                                              uint32_t epoch, bool published) {
  if (threadIdx.x == 0) {
    int bad = -1;
    for (int p = 0; p < L.world && bad < 0; ++p) {
      const bool ok = published && static_cast<uint32_t>(hdr[3 * p + 2]) == kRoutingHeaderMagic &&
                      static_cast<uint32_t>(hdr[3 * p + 1]) == epoch && hdr[3 * p + 0] == T;
      if (!ok) bad = p;
    }
    bad_peer = bad;
  }
  __syncthreads();
  if (bad_peer >= 0) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      const int p = bad_peer;
      report_header_problem(L, epoch, T, p, hdr[3 * p + 0], static_cast<uint32_t>(hdr[3 * p + 1]),
                            static_cast<uint32_t>(hdr[3 * p + 2]));
    }
    return false;
  }
  return true;
}

// Loads routes f = first + j, j in [0, len), of the route space f = s*N + i from the peers' routing
// windows, kIdBatch ids in flight per thread, and calls visit(j, s, id) for each (s, id by reference
// into the batch arrays, as the loop read them before).
template <typename IdT, int kThreads, typename Visit>
__device__ __forceinline__ void for_each_published_id(char* const* rbase, uint32_t N, uint32_t first, uint32_t len,
                                                      Visit&& visit) {
  const int tid = threadIdx.x;
  for (uint32_t base = 0; base < len; base += kThreads * kIdBatch) {
    int32_t idv[kIdBatch];
    int src[kIdBatch];
#pragma unroll
    for (int u = 0; u < kIdBatch; ++u) {
      const uint32_t j = base + u * kThreads + tid;
      idv[u] = -1;
      src[u] = 0;
      if (j < len) {
        const uint32_t f = first + j;
        const uint32_t s = f / N;
        const uint32_t i = f - s * N;
        src[u] = static_cast<int>(s);
        idv[u] = load_published_id<IdT>(rbase[s] + kRoutingHeaderBytes + static_cast<int64_t>(i) * sizeof(IdT));
      }
    }
#pragma unroll
    for (int u = 0; u < kIdBatch; ++u) {
      const uint32_t j = base + u * kThreads + tid;
      if (j < len) visit(j, src[u], idv[u]);
    }
  }
}

// Routes [begin, end) of the chunk owned by one warp: kRoutingWarps equal segments of `chunk`
// routes, clipped to the `len` that exist.
struct WarpRange {
  uint32_t begin, end;
};
__device__ __forceinline__ WarpRange warp_range(uint32_t chunk, uint32_t len, int warp) {
  const uint32_t warp_routes = chunk / kRoutingWarps;
  const uint32_t wb = min(static_cast<uint32_t>(warp) * warp_routes, len);
  return {wb, min(wb + warp_routes, len)};
}

// Counts the warp's routes per local expert into my_w, then turns wcnt [kRoutingWarps][Lx] into each
// warp's start within the chunk and calls emit(x, routes of local expert x in the chunk). Counting:
// kMatchLeaders -- one __match_any_sync leader per expert of each 32 routes (no shared atomics; the
// routing kernel, whose chunks of up to 32768 routes may all name one expert); else one shared
// atomic per route on the warp's own counters (the fused kernel: 64 routes per warp, where the
// match took ~2 us, docs/perf.md C10). (An 8-lanes-per-expert prefix instead of the serial walk
// below measured 0.7 us slower at decode, C10.)
template <bool kMatchLeaders, typename ExpT, typename Emit>
__device__ __forceinline__ void count_local_experts(const ExpT* lexp, WarpRange wr, int lane, int32_t* wcnt,
                                                    int32_t* my_w, int Lx, Emit&& emit) {
  for (uint32_t j0 = wr.begin; j0 < wr.end; j0 += 32) {
    const uint32_t j = j0 + lane;
    const int x = j < wr.end ? lexp[j] : -1;
    if constexpr (kMatchLeaders) {
      const unsigned peers = __match_any_sync(kFullMask, x);
      if (x >= 0 && lane == __ffs(peers) - 1) my_w[x] += __popc(peers);
    } else {
      if (x >= 0) atomicAdd(&my_w[x], 1);
    }
    __syncwarp();
  }
  __syncthreads();
  for (int x = threadIdx.x; x < Lx; x += blockDim.x) {
    int32_t run = 0;
    for (int w = 0; w < kRoutingWarps; ++w) {
      const int32_t c = wcnt[w * Lx + x];
      wcnt[w * Lx + x] = run;
      run += c;
    }
    emit(x, run);
  }
}

// Capacity check before any table is written: CTA 0 prints one line and traps; every thread gets
// false and returns.
__device__ __forceinline__ bool rows_fit(const EpDeviceLayout& L, int32_t rows, int64_t capacity) {
  if (static_cast<int64_t>(rows) > capacity) {
    if (blockIdx.x == 0 && threadIdx.x == 0) report_overflow(L, rows, capacity);
    return false;
  }
  return true;
}

// CTA 0: rows and offsets per local expert and the total (s_off: exclusive prefix of padded rows).
__device__ __forceinline__ void write_expert_tables(const RoutingTables& tab, const int32_t* s_total,
                                                    const int32_t* s_off, int Lx, int32_t rows, int alignment) {
  for (int x = threadIdx.x; x < Lx; x += blockDim.x) {
    tab.expert_rows[x] = static_cast<int32_t>(pad_rows(s_total[x], alignment));
    tab.expert_rows_unpadded[x] = s_total[x];
    tab.expert_offsets[x] = s_off[x];
  }
  if (threadIdx.x == 0) {
    tab.expert_offsets[Lx] = rows;
    *tab.total_rows = rows;
  }
}

// Stable placement of the warp's routes: route j of local expert x (-1: not routed here) gets row
// my_w[x] + the earlier lanes of its 32 with the same expert; place(j, x, row_of) writes it, then one
// leader per expert advances my_w[x] past the 32. row_of() is that row, valid for x >= 0 only; a
// thunk so that each kernel keeps its own order of row and route arithmetic.
template <typename ExpT, typename Place>
__device__ __forceinline__ void place_warp_routes(const ExpT* lexp, WarpRange wr, int lane, int32_t* my_w,
                                                  Place&& place) {
  for (uint32_t j0 = wr.begin; j0 < wr.end; j0 += 32) {
    const uint32_t j = j0 + lane;
    const bool valid = j < wr.end;
    const int x = valid ? lexp[j] : -1;
    const unsigned peers = __match_any_sync(kFullMask, x);
    if (valid) place(j, x, [&] { return my_w[x] + __popc(peers & lanemask_lt()); });
    __syncwarp();
    if (x >= 0 && lane == __ffs(peers) - 1) my_w[x] += __popc(peers);
    __syncwarp();
  }
}

// Table entries of `row`, fed by route i = t*K + k of source s.
__device__ __forceinline__ void write_row_tables(const RoutingTables& tab, char* const* dbase, char* const* cbase,
                                                 uint32_t s, uint32_t i, int32_t row, int K, int64_t row_bytes) {
  const uint32_t t = i / static_cast<uint32_t>(K);
  const int k = static_cast<int>(i - t * static_cast<uint32_t>(K));
  tab.gather_src[row] = dbase[s] + dispatch_row_offset(t, row_bytes);
  tab.scatter_dst[row] = cbase[s] + combine_slot_offset(t, k, K, row_bytes);
  tab.grad_gather_src[row] = dbase[s] + dispatch_route_offset(t, k, K, row_bytes);
  tab.row_route[row] = encode_route(static_cast<int>(s), i);
}

// Sentinels for the padding rows of local experts blockIdx.x, blockIdx.x + stride, ...
__device__ __forceinline__ void write_padding_rows(const RoutingTables& tab, const int32_t* s_off,
                                                   const int32_t* s_total, int Lx, int alignment, int stride) {
  for (int x = blockIdx.x; x < Lx; x += stride) {
    const int32_t first = s_off[x] + s_total[x];
    const int32_t end = s_off[x] + static_cast<int32_t>(pad_rows(s_total[x], alignment));
    for (int32_t r = first + threadIdx.x; r < end; r += blockDim.x) {
      tab.gather_src[r] = nullptr;
      tab.scatter_dst[r] = nullptr;
      tab.grad_gather_src[r] = nullptr;
      tab.row_route[r] = -1;
    }
  }
}

template <typename IdT>
__global__ void __launch_bounds__(kRoutingThreads, 1)
    routing_kernel(const EpDeviceLayout L, const RoutingTables tab, const RoutingArgs a) {
  extern __shared__ int4 smem_dyn[];
  __shared__ char* s_rbase[kMaxEpRanks];
  __shared__ char* s_dbase[kMaxEpRanks];
  __shared__ char* s_cbase[kMaxEpRanks];
  __shared__ int32_t s_rank_cnt[2 * kMaxEpRanks];
  __shared__ int32_t s_hdr[3 * kMaxEpRanks];
  __shared__ int32_t s_warp_sums[32];
  __shared__ int s_bad;

  const int R = L.world, Lx = L.local_experts, K = L.top_k, E = L.num_experts;
  const int g = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int T = a.num_tokens;
  const uint32_t N = static_cast<uint32_t>(T) * static_cast<uint32_t>(K);  // routes per source
  const uint32_t total = N * static_cast<uint32_t>(R);
  const uint32_t chunk = static_cast<uint32_t>(a.chunk_routes);
  const uint32_t cbegin = static_cast<uint32_t>(g) * chunk;
  const uint32_t clen = min(chunk, total - cbegin);

  int32_t* wcnt = reinterpret_cast<int32_t*>(smem_dyn);  // [32][Lx]
  int32_t* s_total = wcnt + kRoutingWarps * Lx;          // [Lx]
  int32_t* s_before = s_total + Lx;                      // [Lx]
  int32_t* s_off = s_before + Lx;                        // [Lx]
  int16_t* lexp = reinterpret_cast<int16_t*>(s_off + Lx);  // [chunk]

  // The dispatch kernel that follows (programmatic launch) may start its prologue now; it waits
  // for this kernel's completion (griddepcontrol.wait) before reading any table.
  asm volatile("griddepcontrol.launch_dependents;");

  // ---- 0. EP barrier: every rank's publish is visible --------------------------------------
  trace_first(L, kTrRouteStart);
  if (a.do_barrier) {
    if (g == 0) ep_barrier_cta(L, 0);
    grid_barrier(L, kGridBarrierRouting);
  }
  trace_first(L, kTrRouteBarrierDone);

  // ---- 1. headers ---------------------------------------------------------------------------
  const uint32_t count = *reinterpret_cast<volatile uint32_t*>(&L.state->publish_count);
  const int slot = static_cast<int>((count - 1u) & 1u);
  init_peer_bases<true>(L, slot, s_rbase, s_dbase, s_cbase, s_hdr, s_rank_cnt, wcnt);
  __syncthreads();
  if (!headers_match(L, s_hdr, s_bad, T, count, count != 0u))
    return;  // every thread of every CTA leaves before reading any id

  // ---- 2. load this chunk's ids --------------------------------------------------------------
  const auto count_route = [lexp, R, Lx, E, &L](uint32_t j, const int& src, const int32_t& id) {
    const int x = local_expert_of(id, L.rank, Lx, E);
    lexp[j] = static_cast<int16_t>(x);
    if (x >= 0) atomicAdd(&s_rank_cnt[src], 1);
    if (src == L.rank) {
      const int d = owner_rank_of(id, Lx, E);
      if (d >= 0) atomicAdd(&s_rank_cnt[R + d], 1);
    }
  };
  for_each_published_id<IdT, kRoutingThreads>(s_rbase, N, cbegin, clen, count_route);
  __syncthreads();

  // ---- 3. per-warp counts per local expert ---------------------------------------------------
  const WarpRange wr = warp_range(chunk, clen, warp);
  int32_t* my_w = wcnt + warp * Lx;
  count_local_experts<true>(lexp, wr, lane, wcnt, my_w, Lx,
                      [g, Lx, &a](int x, int32_t run) { a.cta_expert_counts[static_cast<int64_t>(g) * Lx + x] = run; });
  for (int p = tid; p < 2 * R; p += blockDim.x) a.cta_rank_counts[static_cast<int64_t>(g) * 2 * R + p] = s_rank_cnt[p];

  // ---- 4. totals, padding, expert offsets, capacity check -------------------------------------
  trace_first(L, kTrRouteIdsCounted);
  grid_barrier(L, kGridBarrierRouting);
  for (int x = tid; x < Lx; x += blockDim.x) {
    int32_t tot = 0, bef = 0;
    for (int gg = 0; gg < a.num_ctas; ++gg) {
      const int32_t c = ld_cg_s32(&a.cta_expert_counts[static_cast<int64_t>(gg) * Lx + x]);
      tot += c;
      if (gg < g) bef += c;
    }
    s_total[x] = tot;
    s_before[x] = bef;
    s_off[x] = static_cast<int32_t>(pad_rows(tot, a.alignment));
  }
  __syncthreads();
  const int32_t rows = block_exclusive_scan(s_off, Lx, s_warp_sums);
  if (!rows_fit(L, rows, a.capacity_rows)) return;  // no table is written
  if (g == 0) {
    write_expert_tables(tab, s_total, s_off, Lx, rows, a.alignment);
    for (int p = tid; p < 2 * R; p += blockDim.x) {
      int32_t sum = 0;
      for (int gg = 0; gg < a.num_ctas; ++gg) sum += ld_cg_s32(&a.cta_rank_counts[static_cast<int64_t>(gg) * 2 * R + p]);
      if (p < R)
        tab.recv_rows_from_rank[p] = sum;
      else
        tab.send_rows_to_rank[p - R] = sum;
    }
  }

  // ---- 5. placement ---------------------------------------------------------------------------
  trace_first(L, kTrRouteOffsets);
  for (int i = tid; i < kRoutingWarps * Lx; i += blockDim.x) {
    const int x = i % Lx;
    wcnt[i] += s_off[x] + s_before[x];
  }
  __syncthreads();
  const int64_t row_bytes = L.row_bytes;
  place_warp_routes(lexp, wr, lane, my_w, [cbegin, N, K, row_bytes, &L, &tab](uint32_t j, int x, auto row_of) {
    const uint32_t f = cbegin + j;
    const uint32_t s = f / N;
    const uint32_t i = f - s * N;
    int32_t row = -1;
    if (x >= 0) {
      row = row_of();
      write_row_tables(tab, s_dbase, s_cbase, s, i, row, K, row_bytes);
    }
    tab.route_row[route_row_index(static_cast<int>(s), i, L.max_tokens, K)] = row;
  });

  // ---- 6. padding rows ------------------------------------------------------------------------
  write_padding_rows(tab, s_off, s_total, Lx, a.alignment, a.num_ctas);
  trace_last(L, kTrRouteEndLast);
}

// ==== fused publish + route + dispatch (EpGroup::publish_route_dispatch) ========================
//
// One cooperative kernel of 1024-thread CTAs, no grid barrier. The ids are pushed to the peers, so the
// routing reads only local memory after the ids arrival:
//   1. CTA 0 writes this rank's ids (converted) and the routing header {T, epoch} into its own
//      routing slot and into slot [parity][me] of every peer's pushed slots, fences (system scope)
//      and stores the epoch into inbox word [kPublishArrivalSlot][me] of every rank (itself
//      included): the ids arrival, a few microseconds into the kernel;
//   1b. with scores (DispatchOptions::scores_TK), CTA 1 writes them as FP32 into every peer's pushed
//      slot after the ids, and the slot's scores_epoch; they travel under the rows arrival of 2.;
//   2. every CTA publishes a slice of the x rows into this rank's dispatch window (the peers pull
//      them in step 7: pushing them too made the flags wait behind 1.8 MB of stores, docs/perf.md
//      C10); each CTA fences and counts itself done; the last one stores the epoch into inbox word
//      [kRowsArrivalSlot][me] of every rank: the rows arrival;
//   3. every CTA waits until all R ids-arrival words of its own inbox reached the epoch (acquire,
//      system scope) -- the routing below overlaps the rest of the peers' publish;
//   4. headers: T equality and epochs (token count mismatch / protocol error lines, as route());
//   5. every CTA loads all R*T*K published ids and builds the whole routing in shared memory: the
//      single-chunk case of the routing kernel (routing::fused_chunk_routes: 32 warp segments),
//      local expert per route, per-warp counts, prefix over warps, padding, scan over experts,
//      capacity check, placement; the route -> row map stays in shared memory;
//   6. each CTA writes the tables of its slice of the route space (and CTA 0 the counts);
//   7. every CTA waits for the R rows arrivals (also without dispatch: the fused GEMM producer reads
//      the peers' x rows after this kernel), then token-once dispatch from the shared-memory map.
// Each arrival is a full barrier for earlier stream work of every rank (a rank arrives only after its
// earlier kernels completed); see docs/communication.md for the reuse protocol.

template <typename InT, typename IdT>
__global__ void __launch_bounds__(kFusedThreads, 1)
    fused_route_kernel(const EpDeviceLayout L, const RoutingTables tab, const FusedArgs a) {
  extern __shared__ int4 smem_dyn[];
  __shared__ char* s_rbase[kMaxEpRanks];
  __shared__ char* s_dbase[kMaxEpRanks];
  __shared__ char* s_cbase[kMaxEpRanks];
  __shared__ int32_t s_rank_cnt[2 * kMaxEpRanks];
  __shared__ int32_t s_hdr[3 * kMaxEpRanks];
  __shared__ char* s_push_ids[kMaxEpRanks];  // peer p's pushed routing slot [parity][me]
  __shared__ int32_t s_warp_sums[32];
  __shared__ uint32_t s_count;
  __shared__ int s_flag;

  const int R = L.world, Lx = L.local_experts, K = L.top_k, E = L.num_experts, me = L.rank;
  const int g = blockIdx.x, tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int T = a.num_tokens;
  const uint32_t N = static_cast<uint32_t>(T) * static_cast<uint32_t>(K);  // routes per source
  const uint32_t total = N * static_cast<uint32_t>(R);
  const int64_t row_bytes = L.row_bytes;

  int32_t* wcnt = reinterpret_cast<int32_t*>(smem_dyn);  // [32][Lx]
  int32_t* s_total = wcnt + kRoutingWarps * Lx;          // [Lx] routed rows per expert
  int32_t* s_off = s_total + Lx;                         // [Lx] padded rows, then their exclusive prefix
  int32_t* s_f = s_off + Lx;                             // [total] local expert, then row (-1: none)

  trace_first(L, kTrFusedStart);
  // CTA 0's first id per thread is loaded with the call count, before the barrier that shares the
  // count (the ids arrival waits for both; in turn they took two load latencies, perf.md C12).
  const InT* ids_in = static_cast<const InT*>(a.ids);
  const InT first_id = g == 0 && static_cast<uint32_t>(tid) < N ? ids_in[tid] : InT{0};
  if (tid == 0) s_count = *reinterpret_cast<volatile uint32_t*>(&L.state->publish_count);
  __syncthreads();
  const uint32_t count = s_count;
  const uint32_t epoch = count + 1u;
  const int slot = static_cast<int>(count & 1u);
  init_peer_bases<false>(L, slot, s_rbase, s_dbase, s_cbase, s_hdr, s_rank_cnt, wcnt);
  for (int p = tid; p < R; p += blockDim.x) {
    s_push_ids[p] = routing_push_ptr(L, slot, me, p);
    // Routing reads are local: this rank's own slot, and the slots the peers pushed here.
    if (p != me) s_rbase[p] = routing_push_ptr(L, slot, p, me);
  }
  __syncthreads();

  // ---- 1. CTA 0: ids and header into the own slot and every peer's pushed slot; ids arrival ----
  if (g == 0) {
    for (int64_t i = tid; i < static_cast<int64_t>(N); i += blockDim.x) {  // one load, R stores
      const IdT id = static_cast<IdT>(i == tid ? first_id : ids_in[i]);
      for (int p = 0; p < R; ++p)
        reinterpret_cast<IdT*>((p == me ? s_rbase[me] : s_push_ids[p]) + kRoutingHeaderBytes)[i] = id;
    }
    __syncthreads();
    for (int p = tid; p < R; p += blockDim.x) {  // one thread per rank: its header, fence, arrival
      RoutingHeader* h = reinterpret_cast<RoutingHeader*>(p == me ? s_rbase[me] : s_push_ids[p]);
      h->num_tokens = T;
      h->epoch = epoch;
      h->magic = kRoutingHeaderMagic;
      h->id_bytes = static_cast<int32_t>(sizeof(IdT));
      fence_acq_rel_sys();
      st_release_sys(barrier_inbox_ptr(L, p, kPublishArrivalSlot, me), epoch);
    }
    trace_first(L, kTrFusedArrivalSent);
    // This rank's routes per owner rank, while the peers' ids are on their way (was on CTA 0's
    // critical path after the arrival).
    for (uint32_t i0 = 0; i0 < N; i0 += kFusedThreads) {
      const uint32_t i = i0 + tid;
      const int key = i < N ? owner_rank_of(static_cast<int64_t>(static_cast<IdT>(ids_in[i])), Lx, E) : -1;
      const unsigned peers = __match_any_sync(kFullMask, key);
      if (key >= 0 && lane == __ffs(peers) - 1) atomicAdd(&s_rank_cnt[R + key], __popc(peers));
    }
  }

  // ---- 1b. scores (when given): one CTA other than CTA 0 (whose ids arrival is on the critical
  // path) writes them as FP32 into every peer's pushed slot [parity][me], then the slots'
  // scores_epoch; the rows arrival of step 2 publishes them (the rank-partials combine reads them).
  if (a.scores != nullptr && g == (gridDim.x > 1 ? 1 : 0)) {
    for (uint32_t i = tid; i < N; i += kFusedThreads) {
      const float score = a.score_bf16 ? __uint_as_float(static_cast<uint32_t>(static_cast<const uint16_t*>(a.scores)[i]) << 16)
                                       : static_cast<const float*>(a.scores)[i];
      for (int p = 0; p < R; ++p)
        if (p != me) reinterpret_cast<float*>(s_push_ids[p] + L.push_scores_offset)[i] = score;
    }
    for (int p = tid; p < R; p += blockDim.x)
      if (p != me) reinterpret_cast<RoutingHeader*>(s_push_ids[p])->scores_epoch = epoch;
  }

  // ---- 2. every CTA: its slice of the x rows; rows arrival ---------------------------------------
  {
    const int64_t gtid = static_cast<int64_t>(g) * blockDim.x + tid;
    const int64_t nthreads = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int4* x = static_cast<const int4*>(a.x);
    int4* xo = reinterpret_cast<int4*>(s_dbase[me]);
    // Validation (a slice per CTA; CTA 0 pushed the ids unchecked): the first bad id prints its line
    // and traps before this rank's rows arrival, so its peers end at their wait with a timeout line.
    // Out-of-range ids route nowhere on the peers (local_expert_of), so they read nothing out of bounds.
    // Inlined: a call site here made the kernel spill at its 64-register limit.
    if (a.validate)
      for (int64_t i = gtid; i < static_cast<int64_t>(N); i += nthreads) {
        const int64_t id = static_cast<int64_t>(static_cast<const InT*>(a.ids)[i]);
        if (id < -1 || id >= E) report_bad_expert_id_inline(L, i, id);
      }
    // This call's rank-partials signal counters start at zero (combine_rank_partials.cu, kPartialsSignal): before
    // the rows arrival, after which the peers' combine increments them.
    zero_partial_counters(L, slot, gtid, nthreads);
    const int64_t n_vec = x == nullptr ? 0 : static_cast<int64_t>(T) * (row_bytes / 16);  // null: rows_in_window
    constexpr int kU = 4;
    for (int64_t base = gtid; base < n_vec; base += nthreads * kU) {
      int4 buf[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (base + u * nthreads < n_vec) buf[u] = ld_nc_v4(x + base + u * nthreads);
#pragma unroll
      for (int u = 0; u < kU; ++u)
        if (base + u * nthreads < n_vec) st_v4(xo + base + u * nthreads, buf[u]);
    }
  }
  __syncthreads();
  if (tid == 0) {
    fence_acq_rel_sys();
    s_flag = atom_add_acq_rel_gpu(&L.state->publish_done_ctas, 1u) == gridDim.x - 1 ? 1 : 0;
  }
  __syncthreads();
  trace_last(L, kTrFusedPublishedLast);
  if (s_flag) {
    if (tid == 0) {
      L.state->publish_done_ctas = 0u;
      L.state->publish_count = epoch;
    }
    for (int p = tid; p < R; p += blockDim.x) {
      fence_acq_rel_sys();
      st_release_sys(barrier_inbox_ptr(L, p, kRowsArrivalSlot, me), epoch);
    }
  }

  // ---- 3. every rank's ids of this call are here ------------------------------------------------
  {
    const WaitContext ctx{g == 0 ? L.timeout_cycles : 2 * L.timeout_cycles, me};
    for (int p = tid; p < R; p += blockDim.x)
      wait_epoch_reached_sys(barrier_inbox_ptr(L, me, kPublishArrivalSlot, p), epoch, ctx, WaitSite::kPublishArrival,
                             p, kPublishArrivalSlot);
  }
  __syncthreads();
  trace_first(L, kTrFusedArrived);
  trace_last(L, kTrFusedArrivedLast);

  // ---- 4. headers -----------------------------------------------------------------------------
  for (int p = tid; p < R; p += blockDim.x) load_peer_header(s_hdr, p, s_rbase[p]);
  __syncthreads();
  if (!headers_match(L, s_hdr, s_flag, T, epoch, true)) return;  // no id is read
  trace_first(L, kTrFusedHeadersOk);

  // ---- 5. all ids -> local expert per route (shared memory) ------------------------------------
  for_each_published_id<IdT, kFusedThreads>(
      s_rbase, N, 0u, total,
      [s_f, me, Lx, E](uint32_t j, const int&, const int32_t& id) { s_f[j] = local_expert_of(id, me, Lx, E); });
  __syncthreads();
  trace_first(L, kTrFusedIdsLoaded);

  // Per-source routes received (CTA 0 only; the routes sent were counted in step 1). A warp's 32
  // routes mostly share one source (sources are runs of T*K routes): then one ballot and one atomic.
  if (g == 0) {
    for (uint32_t j0 = 0; j0 < total; j0 += kFusedThreads) {
      const uint32_t j = j0 + tid;
      const uint32_t jw = j0 + (tid & ~31u);  // the warp's first route
      const bool routed = j < total && s_f[j] >= 0;
      const unsigned here = __ballot_sync(kFullMask, routed);
      if (jw / N == (jw + 31u) / N) {  // one source for the whole warp (routes past the end are not routed)
        if (lane == 0 && here != 0u) atomicAdd(&s_rank_cnt[jw / N], __popc(here));
      } else if (routed) {
        atomicAdd(&s_rank_cnt[j / N], 1);
      }
    }
    trace_first(L, kTrFusedRecvCounted);
  }

  // ---- 6. per-warp counts per local expert ---------------------------------------------------
  const WarpRange wr = warp_range(static_cast<uint32_t>(routing::fused_chunk_routes(total)), total, warp);
  int32_t* my_w = wcnt + warp * Lx;
  count_local_experts<false>(s_f, wr, lane, wcnt, my_w, Lx, [s_total, s_off, &a](int x, int32_t run) {
    s_total[x] = run;
    s_off[x] = static_cast<int32_t>(pad_rows(run, a.alignment));
  });
  trace_first(L, kTrFusedWarpCounted);
  __syncthreads();
  const int32_t rows = block_exclusive_scan(s_off, Lx, s_warp_sums);
  trace_first(L, kTrFusedCounted);
  if (!rows_fit(L, rows, a.capacity_rows)) return;  // no table is written, nothing is dispatched
  if (g == 0) {
    write_expert_tables(tab, s_total, s_off, Lx, rows, a.alignment);
    for (int p = tid; p < R; p += blockDim.x) {
      tab.recv_rows_from_rank[p] = s_rank_cnt[p];
      tab.send_rows_to_rank[p] = s_rank_cnt[R + p];
    }
  }

  // ---- 7. placement: every route's row into s_f; this CTA's slice of the tables ----------------
  for (int i = tid; i < kRoutingWarps * Lx; i += blockDim.x) wcnt[i] += s_off[i % Lx];
  __syncthreads();
  trace_first(L, kTrFusedRouted);
  trace_last(L, kTrFusedRoutedLast);
  const uint32_t per_cta = (total + gridDim.x - 1) / gridDim.x;
  const uint32_t sb = min(static_cast<uint32_t>(g) * per_cta, total);
  const uint32_t se = min(sb + per_cta, total);
  // Every CTA places all routes (s_f keeps the map for step 8) but writes only its slice's tables.
  place_warp_routes(s_f, wr, lane, my_w, [sb, se, N, K, row_bytes, s_f, &L, &tab](uint32_t j, int x, auto row_of) {
    int32_t row = -1;
    if (x >= 0) row = row_of();
    if (j >= sb && j < se) {
      const uint32_t s = j / N;
      const uint32_t i = j - s * N;
      if (row >= 0) write_row_tables(tab, s_dbase, s_cbase, s, i, row, K, row_bytes);
      tab.route_row[route_row_index(static_cast<int>(s), i, L.max_tokens, K)] = row;
    }
    s_f[j] = row;
  });
  // Padding rows of the experts of this CTA.
  write_padding_rows(tab, s_off, s_total, Lx, a.alignment, static_cast<int>(gridDim.x));
  trace_last(L, kTrFusedTablesLast);  // thread 0's tables

  // ---- 8. every rank's x rows are published; token-once dispatch ------------------------------
  // Threads 0..R-1 wait for the rows arrivals while the others finish their table writes; the
  // barrier after it is the one the dispatch needs for the row map anyway.
  {
    const WaitContext ctx{g == 0 ? L.timeout_cycles : 2 * L.timeout_cycles, me};
    for (int p = tid; p < R; p += blockDim.x)
      wait_epoch_reached_sys(barrier_inbox_ptr(L, me, kRowsArrivalSlot, p), epoch, ctx, WaitSite::kRowsArrival, p,
                             kRowsArrivalSlot);
  }
  __syncthreads();
  trace_first(L, kTrFusedRowsArrived);
  if (a.x_gathered != nullptr) {
    char* out = a.x_gathered;
    const int nvec = static_cast<int>(row_bytes / 16);
    const int nseg = num_segments(nvec);
    // Warps numbered CTA-fastest: with fewer units than warps (decode: 1024 units, 132 x 32 warps)
    // every CTA gets some, instead of the first units / 32 CTAs all of them.
    // 32-bit unit indices: R*T*K*segments < 2^31 is checked on the host (EpGroup).
    const int gw = warp * static_cast<int>(gridDim.x) + g;
    const int nw = static_cast<int>(gridDim.x) * kRoutingWarps;
    const int units = R * T * nseg;
    for (int u = gw; u < units; u += nw) {
      const int ts = u / nseg;
      const int seg = u - ts * nseg;
      const int t = ts / R;
      const int s = ts - t * R;
      const int32_t my_row = lane < K ? s_f[static_cast<int64_t>(s) * N + t * K + lane] : -1;
      const unsigned mask = __ballot_sync(kFullMask, my_row >= 0);
      if (mask == 0u) continue;
      const char* src = s == me && a.x != nullptr ? static_cast<const char*>(a.x) + t * row_bytes
                                                  : s_dbase[s] + dispatch_row_offset(t, row_bytes);
      warp_copy_segment_to_rows(src, out, row_bytes, my_row, mask, seg, nvec, lane);
    }
    if (a.zero_fill && a.alignment > 1) {
      const int64_t pad_units = static_cast<int64_t>(Lx) * (a.alignment - 1) * nseg;
      for (int64_t u = gw; u < pad_units; u += nw) {
        const int64_t xj = u / nseg;
        const int seg = static_cast<int>(u - xj * nseg);
        const int x = static_cast<int>(xj / (a.alignment - 1));
        const int j = static_cast<int>(xj - static_cast<int64_t>(x) * (a.alignment - 1));
        const int32_t unpadded = s_total[x];
        if (unpadded + j >= static_cast<int32_t>(pad_rows(unpadded, a.alignment))) continue;
        warp_zero_segment(out + static_cast<int64_t>(s_off[x] + unpadded + j) * row_bytes, seg, nvec, lane);
      }
    }
  }
  trace_last(L, kTrFusedEndLast);
}

template <typename InT, typename IdT>
void* fused_kernel_ptr() {
  return reinterpret_cast<void*>(fused_route_kernel<InT, IdT>);
}

void* fused_kernel_ptr_of(int id_bytes, bool ids_int64) {
  if (id_bytes == 2) return ids_int64 ? fused_kernel_ptr<int64_t, int16_t>() : fused_kernel_ptr<int32_t, int16_t>();
  return ids_int64 ? fused_kernel_ptr<int64_t, int32_t>() : fused_kernel_ptr<int32_t, int32_t>();
}

template <typename IdT>
void* routing_kernel_ptr() {
  return reinterpret_cast<void*>(routing_kernel<IdT>);
}

}  // namespace

size_t routing_smem_bytes(int local_experts, int64_t chunk_routes) {
  const size_t ints = static_cast<size_t>(kRoutingWarps + 3) * local_experts;
  const size_t bytes = ints * 4 + static_cast<size_t>(chunk_routes) * 2;
  return (bytes + 15) / 16 * 16;
}

int routing_max_coresident_ctas(int id_bytes, size_t smem, int num_sms) {
  const void* fn = id_bytes == 2 ? routing_kernel_ptr<int16_t>() : routing_kernel_ptr<int32_t>();
  // The attribute is per kernel and process-wide: only ever raise it, so every EpGroup alive can
  // launch with the shared memory it was sized for.
  static std::mutex mu;
  static size_t attr[2] = {0, 0};
  {
    std::lock_guard<std::mutex> lock(mu);
    size_t& cur = attr[id_bytes == 2 ? 0 : 1];
    if (smem > cur) {
      DMOE_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
      cur = smem;
    }
  }
  int per_sm = 0;
  DMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kRoutingThreads, smem));
  return per_sm * num_sms;
}

size_t fused_smem_bytes(int local_experts, int64_t total_routes) {
  const size_t ints = static_cast<size_t>(kRoutingWarps + 2) * local_experts + static_cast<size_t>(total_routes);
  return (ints * 4 + 15) / 16 * 16;
}

int fused_max_coresident_per_sm(int id_bytes, size_t smem) {
  static std::mutex mu;
  static size_t attr[2][2] = {{0, 0}, {0, 0}};
  int best = 1 << 30;
  for (int i64 = 0; i64 < 2; ++i64) {
    const void* fn = fused_kernel_ptr_of(id_bytes, i64 != 0);
    {
      std::lock_guard<std::mutex> lock(mu);
      size_t& cur = attr[id_bytes == 2 ? 0 : 1][i64];
      if (smem > cur) {
        DMOE_CUDA_CHECK(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
        cur = smem;
      }
    }
    int per_sm = 0;
    DMOE_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, kFusedThreads, smem));
    best = std::min(best, per_sm);
  }
  return best;
}

void launch_fused_route(const EpDeviceLayout& L, const RoutingTables& tables, const FusedArgs& args, bool ids_int64,
                        int num_ctas, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(L.world) * args.num_tokens * L.top_k;
  const size_t smem = fused_smem_bytes(L.local_experts, total);
  const dim3 grid(num_ctas), block(kFusedThreads);
  if (L.id_bytes == 2) {
    if (ids_int64)
      launch_ex(fused_route_kernel<int64_t, int16_t>, grid, block, smem, stream, true, false, L, tables, args);
    else
      launch_ex(fused_route_kernel<int32_t, int16_t>, grid, block, smem, stream, true, false, L, tables, args);
  } else {
    if (ids_int64)
      launch_ex(fused_route_kernel<int64_t, int32_t>, grid, block, smem, stream, true, false, L, tables, args);
    else
      launch_ex(fused_route_kernel<int32_t, int32_t>, grid, block, smem, stream, true, false, L, tables, args);
  }
}

void launch_routing(const EpDeviceLayout& L, const RoutingTables& tables, const RoutingArgs& args, cudaStream_t stream) {
  const size_t smem = routing_smem_bytes(L.local_experts, args.chunk_routes);
  const bool coop = args.num_ctas > 1;
  if (L.id_bytes == 2)
    launch_ex(routing_kernel<int16_t>, dim3(args.num_ctas), dim3(kRoutingThreads), smem, stream, coop, false, L,
              tables, args);
  else
    launch_ex(routing_kernel<int32_t>, dim3(args.num_ctas), dim3(kRoutingThreads), smem, stream, coop, false, L,
              tables, args);
}

}  // namespace dist_moe::comm
