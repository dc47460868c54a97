// Routing-table logic shared by the device metadata kernel (src/kernels/routing.cu) and the CPU
// tests: which routes a rank owns, how rows are ordered and padded, how a route is encoded, where
// its source row and its result slot live, how the combine reduction rounds, and how the kernel
// splits the work into chunks and warp segments.
//
// Row order of rank r's expert-major buffer: (local expert e, source rank s, source token t, k).
// That is a stable counting sort of the concatenated route space f = s*T*K + t*K + k by the key
// e(f) = local expert of id[s][t][k] (routes of other ranks and -1 ids have no key). The kernel
// computes each route's row as
//     row = expert_offset[e] + (routes of e in earlier chunks) + (routes of e in earlier warp
//           segments of this chunk) + (routes of e earlier in this warp segment),
// which is exactly its rank in that stable order; build_routing_tables_chunked() below does the
// same arithmetic sequentially, build_routing_tables_naive() is the plain definition.
//
// Compiles as host C++ (CPU tests) and as CUDA (kernels).
#pragma once

#include <cmath>
#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

#if !defined(__CUDA_ARCH__)
#include <vector>
#endif

namespace dist_moe::routing {

inline constexpr int kRouteIndexBits = 24;  // route index t*K + k must fit: T_max * K < 2^24
inline constexpr int32_t kRouteIndexMask = (1 << kRouteIndexBits) - 1;
inline constexpr int kMaxWorldForRouteCode = 127;

// Local expert index on `rank` of a published id, or -1 (disabled route, out-of-range id, or an
// expert of another rank). Out-of-range ids therefore behave like -1 when validation is off.
DMOE_HOST_DEVICE int local_expert_of(int64_t id, int rank, int local_experts, int num_experts) {
  if (id < 0 || id >= num_experts) return -1;
  const int64_t e = id - static_cast<int64_t>(rank) * local_experts;
  return (e >= 0 && e < local_experts) ? static_cast<int>(e) : -1;
}

// A route exists for this id (it is sent to some expert rank and reduced by its owner).
DMOE_HOST_DEVICE bool is_routed(int64_t id, int num_experts) { return id >= 0 && id < num_experts; }

// Rank that owns expert `id`, or -1.
DMOE_HOST_DEVICE int owner_rank_of(int64_t id, int local_experts, int num_experts) {
  return is_routed(id, num_experts) ? static_cast<int>(id / local_experts) : -1;
}

// Rows of an expert after padding to `alignment` (>= 1).
DMOE_HOST_DEVICE int64_t pad_rows(int64_t rows, int alignment) {
  return (rows + alignment - 1) / alignment * alignment;
}

// row_route encoding: (source rank << 24) | (t*K + k); -1 marks a padding row.
DMOE_HOST_DEVICE int32_t encode_route(int src_rank, int64_t route_index) {
  return static_cast<int32_t>((static_cast<uint32_t>(src_rank) << kRouteIndexBits) |
                              static_cast<uint32_t>(route_index));
}
DMOE_HOST_DEVICE int decode_route_src(int32_t code) { return static_cast<int>(static_cast<uint32_t>(code) >> kRouteIndexBits); }
DMOE_HOST_DEVICE int64_t decode_route_index(int32_t code) { return code & kRouteIndexMask; }

// Byte offset of token t's row in a dispatch window (x_TD rows; the row is published once,
// whatever K).
DMOE_HOST_DEVICE int64_t dispatch_row_offset(int64_t t, int64_t row_bytes) { return t * row_bytes; }

// Byte offset of route (t, k)'s result slot in its owner's combine window ([T_max, K, D]).
DMOE_HOST_DEVICE int64_t combine_slot_offset(int64_t t, int k, int top_k, int64_t row_bytes) {
  return (t * top_k + k) * row_bytes;
}

// Rank-partials combine: an FP32 partial row is split into halves of `len` 16-byte BF16 vectors
// (columns [0, D/2) in the slot of the owner's first route of the token, [D/2, D) in its second);
// inside a half, vector w's 8 FP32 (32 bytes) go in groups of 32 vectors: a group's 16-byte first
// halves (columns 0-3) of its vectors, then their second halves, so that a warp's 32 consecutive
// vectors are two contiguous 512-byte stores and loads. Byte offset of half h (0, 1) of vector w; a
// last group of n < 32 vectors keeps its halves inside its 32n bytes. A bijection of
// {0..len-1} x {0, 1} onto the 16-byte pieces of [0, 32*len).
DMOE_HOST_DEVICE int64_t partial_half_offset(int w, int h, int len) {
  const int g = w >> 5;
  const int rest = len - (g << 5);
  const int n = rest < 32 ? rest : 32;
  return static_cast<int64_t>(g) * 1024 + (h != 0 ? n * 16 : 0) + (w & 31) * 16;
}

// Byte offset of route (t, k)'s slot in a dispatch window used as route slots [T_max, K, D] (the
// backward's grad_h3; RoutingTables::grad_gather_src). Same arithmetic as the combine slot.
DMOE_HOST_DEVICE int64_t dispatch_route_offset(int64_t t, int k, int top_k, int64_t row_bytes) {
  return (t * top_k + k) * row_bytes;
}

// Backward of the block-scaled pipelines (perf_history G144): instead of grad_h3's route slots the
// owner's dispatch window holds grad_out's token rows [T, D] at dispatch_row_offset(t) (where the
// forward's x rows were: RoutingTables::gather_src finds them) and the FP32 score of route t*K + k
// after T_max rows, at the byte offset below (where the forward's rank-partials combine puts its
// scores too). Both fit the [T_max, K, D] window where dispatch_window_holds_scores:
// 4K <= (K - 1) * row_bytes, so K >= 2.
DMOE_HOST_DEVICE int64_t dispatch_score_offset(int64_t route_index, int64_t max_tokens, int64_t row_bytes) {
  return max_tokens * row_bytes + 4 * route_index;
}
DMOE_HOST_DEVICE bool dispatch_window_holds_scores(int top_k, int64_t row_bytes) {
  return top_k >= 2 && 4 * static_cast<int64_t>(top_k) <= (top_k - 1) * row_bytes;
}

// Index of route (s, t*K + k) in RoutingTables::route_row ([R, T_max*K], fixed stride).
DMOE_HOST_DEVICE int64_t route_row_index(int src_rank, int64_t route_index, int64_t max_tokens, int top_k) {
  return static_cast<int64_t>(src_rank) * max_tokens * top_k + route_index;
}

// One step of the combine reduction: fmaf(score, value, acc), a single rounding, identical on host
// and device. The reduction, as the CPU oracle defines it (reference/stages.h, topk_reduce):
// acc = 0.0f; for k = 0..K-1 in order, routed ids only: acc = combine_accumulate(acc, s[k], v[k]);
// out = bf16_rne(acc).
DMOE_HOST_DEVICE float combine_accumulate(float acc, float score, float value) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(score, value, acc);
#else
  return std::fma(score, value, acc);
#endif
}

// ---- work decomposition of the metadata kernel ------------------------------------------------

// The concatenated route space [0, world * T * K) is cut into chunks of `chunk_routes` routes (one
// CTA each); a chunk is cut into `warps` segments of `warp_routes` (a multiple of 32) routes.
struct ChunkPlan {
  int64_t routes_per_src;  // N = T * K
  int64_t total_routes;    // world * N
  int64_t chunk_routes;    // C, a multiple of 32 * warps
  int64_t warp_routes;     // C / warps
  int num_chunks;          // ceil(total / C)
  int warps;
};

DMOE_HOST_DEVICE ChunkPlan make_chunk_plan(int world, int64_t num_tokens, int top_k, int64_t chunk_routes, int warps) {
  ChunkPlan p;
  p.routes_per_src = num_tokens * top_k;
  p.total_routes = p.routes_per_src * world;
  p.chunk_routes = chunk_routes;
  p.warps = warps;
  p.warp_routes = chunk_routes / warps;
  p.num_chunks = static_cast<int>((p.total_routes + chunk_routes - 1) / chunk_routes);
  return p;
}

// The fused route kernel (one CTA builds the whole routing) is the single-chunk case: the chunk is
// the route space rounded up to 32 warps x 32 lanes, cut into 32 warp segments.
inline constexpr int kFusedRouteWarps = 32;
DMOE_HOST_DEVICE int64_t fused_chunk_routes(int64_t total_routes) {
  const int64_t q = int64_t{kFusedRouteWarps} * 32;
  const int64_t c = (total_routes + q - 1) / q * q;
  return c > 0 ? c : q;
}

// Route range [begin, end) of warp `w` of chunk `g` (empty when past the end).
DMOE_HOST_DEVICE void warp_segment(const ChunkPlan& p, int g, int w, int64_t* begin, int64_t* end) {
  const int64_t chunk_begin = static_cast<int64_t>(g) * p.chunk_routes;
  const int64_t chunk_end = chunk_begin + p.chunk_routes < p.total_routes ? chunk_begin + p.chunk_routes : p.total_routes;
  int64_t b = chunk_begin + static_cast<int64_t>(w) * p.warp_routes;
  int64_t e = b + p.warp_routes;
  if (b > chunk_end) b = chunk_end;
  if (e > chunk_end) e = chunk_end;
  *begin = b;
  *end = e;
}

// ---- host reference builders (CPU tests, GPU test oracles) ------------------------------------
#if !defined(__CUDA_ARCH__)

struct RoutingProblem {
  int world = 1;
  int rank = 0;
  int local_experts = 1;
  int top_k = 1;
  int64_t num_tokens = 1;   // T of this call (same on every rank)
  int64_t max_tokens = 1;   // T_max
  int alignment = 1;
  int64_t capacity_rows = 0;
  int num_experts() const { return world * local_experts; }
};

struct HostRoutingTables {
  std::vector<int32_t> expert_rows;           // [L] padded
  std::vector<int32_t> expert_rows_unpadded;  // [L]
  std::vector<int32_t> expert_offsets;        // [L + 1]
  int32_t total_rows = 0;
  std::vector<int32_t> recv_rows_from_rank;   // [R]
  std::vector<int32_t> send_rows_to_rank;     // [R]
  std::vector<int32_t> row_route;             // [total_rows]; -1 for padding
  std::vector<int32_t> route_row;             // [R * T_max * K]; -1 where not routed here
  bool overflow = false;                      // total_rows > capacity_rows: row tables left empty
};

// ids[s] holds rank s's T*K published ids (token-major).
using HostIds = std::vector<std::vector<int64_t>>;

namespace detail {
inline void finish_counts(const RoutingProblem& P, const HostIds& ids, HostRoutingTables& out) {
  const int L = P.local_experts;
  out.expert_rows.assign(L, 0);
  out.expert_offsets.assign(L + 1, 0);
  for (int e = 0; e < L; ++e) {
    out.expert_rows[e] = static_cast<int32_t>(pad_rows(out.expert_rows_unpadded[e], P.alignment));
    out.expert_offsets[e + 1] = out.expert_offsets[e] + out.expert_rows[e];
  }
  out.total_rows = out.expert_offsets[L];
  out.overflow = out.total_rows > P.capacity_rows;
  out.send_rows_to_rank.assign(P.world, 0);
  for (int64_t i = 0; i < P.num_tokens * P.top_k; ++i) {
    const int d = owner_rank_of(ids[P.rank][i], L, P.num_experts());
    if (d >= 0) out.send_rows_to_rank[d] += 1;
  }
  out.route_row.assign(static_cast<size_t>(P.world) * P.max_tokens * P.top_k, -1);
}
}  // namespace detail

// The plain definition: for e, for s, for t, for k: append the matching route.
inline HostRoutingTables build_routing_tables_naive(const RoutingProblem& P, const HostIds& ids) {
  HostRoutingTables out;
  const int L = P.local_experts, E = P.num_experts(), K = P.top_k;
  const int64_t N = P.num_tokens * K;
  out.expert_rows_unpadded.assign(L, 0);
  out.recv_rows_from_rank.assign(P.world, 0);
  for (int s = 0; s < P.world; ++s)
    for (int64_t i = 0; i < N; ++i) {
      const int e = local_expert_of(ids[s][i], P.rank, L, E);
      if (e >= 0) {
        out.expert_rows_unpadded[e] += 1;
        out.recv_rows_from_rank[s] += 1;
      }
    }
  detail::finish_counts(P, ids, out);
  if (out.overflow) return out;
  out.row_route.assign(out.total_rows, -1);
  for (int e = 0; e < L; ++e) {
    int32_t row = out.expert_offsets[e];
    for (int s = 0; s < P.world; ++s)
      for (int64_t t = 0; t < P.num_tokens; ++t)
        for (int k = 0; k < K; ++k) {
          const int64_t i = t * K + k;
          if (local_expert_of(ids[s][i], P.rank, L, E) != e) continue;
          out.row_route[row] = encode_route(s, i);
          out.route_row[route_row_index(s, i, P.max_tokens, K)] = row;
          ++row;
        }
  }
  return out;
}

// Sequential mirror of the metadata kernel: per-chunk, per-warp counting, prefix over warps, over
// chunks and over experts, then placement with running counters.
inline HostRoutingTables build_routing_tables_chunked(const RoutingProblem& P, const HostIds& ids,
                                                      int64_t chunk_routes, int warps) {
  HostRoutingTables out;
  const int L = P.local_experts, E = P.num_experts(), K = P.top_k;
  const ChunkPlan plan = make_chunk_plan(P.world, P.num_tokens, K, chunk_routes, warps);
  auto lexp = [&](int64_t f) {
    const int s = static_cast<int>(f / plan.routes_per_src);
    return local_expert_of(ids[s][f % plan.routes_per_src], P.rank, L, E);
  };
  // Phase 3 of the kernel: counts per (chunk, warp, expert); exclusive prefix over warps.
  std::vector<int32_t> wpre(static_cast<size_t>(plan.num_chunks) * warps * L, 0);
  std::vector<int32_t> chunk_cnt(static_cast<size_t>(plan.num_chunks) * L, 0);
  out.recv_rows_from_rank.assign(P.world, 0);
  for (int g = 0; g < plan.num_chunks; ++g) {
    std::vector<int32_t> wcnt(static_cast<size_t>(warps) * L, 0);
    for (int w = 0; w < warps; ++w) {
      int64_t b, e;
      warp_segment(plan, g, w, &b, &e);
      for (int64_t f = b; f < e; ++f) {
        const int x = lexp(f);
        if (x < 0) continue;
        wcnt[static_cast<size_t>(w) * L + x] += 1;
        out.recv_rows_from_rank[f / plan.routes_per_src] += 1;
      }
    }
    for (int x = 0; x < L; ++x) {
      int32_t running = 0;
      for (int w = 0; w < warps; ++w) {
        wpre[(static_cast<size_t>(g) * warps + w) * L + x] = running;
        running += wcnt[static_cast<size_t>(w) * L + x];
      }
      chunk_cnt[static_cast<size_t>(g) * L + x] = running;
    }
  }
  // Phase 4: totals, padding, expert prefix, capacity check.
  out.expert_rows_unpadded.assign(L, 0);
  for (int g = 0; g < plan.num_chunks; ++g)
    for (int x = 0; x < L; ++x) out.expert_rows_unpadded[x] += chunk_cnt[static_cast<size_t>(g) * L + x];
  detail::finish_counts(P, ids, out);
  if (out.overflow) return out;
  // Phase 5: placement.
  out.row_route.assign(out.total_rows, -1);
  std::vector<int32_t> before(L, 0);  // routes of each expert in earlier chunks
  for (int g = 0; g < plan.num_chunks; ++g) {
    for (int w = 0; w < warps; ++w) {
      std::vector<int32_t> running(L);
      for (int x = 0; x < L; ++x)
        running[x] = out.expert_offsets[x] + before[x] + wpre[(static_cast<size_t>(g) * warps + w) * L + x];
      int64_t b, e;
      warp_segment(plan, g, w, &b, &e);
      for (int64_t f = b; f < e; ++f) {
        const int x = lexp(f);
        const int s = static_cast<int>(f / plan.routes_per_src);
        const int64_t i = f % plan.routes_per_src;
        if (x < 0) continue;
        const int32_t row = running[x]++;
        out.row_route[row] = encode_route(s, i);
        out.route_row[route_row_index(s, i, P.max_tokens, K)] = row;
      }
    }
    for (int x = 0; x < L; ++x) before[x] += chunk_cnt[static_cast<size_t>(g) * L + x];
  }
  return out;
}

#endif  // !__CUDA_ARCH__

}  // namespace dist_moe::routing
