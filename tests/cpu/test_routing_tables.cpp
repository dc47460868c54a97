// Routing-table logic of the EP metadata kernel, on the host (CI).
//
// routing_layout.cuh holds the arithmetic the kernel runs (local expert of an id, padding, route
// encoding, row/slot offsets, chunk and warp segments) and build_routing_tables_chunked(), the
// kernel's phases done sequentially. These tests check that mirror against the plain definition
// and against the CPU oracle (reference::build_routing) for 1..8 simulated ranks, every routing
// pattern, alignments 1..128, and chunkings that split sources, warps and experts in every way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "testing/routing_patterns.h"
#include "dist_moe/device/routing/routing_layout.cuh"
#include "dist_moe/error.h"
#include "reference/routing.h"

namespace {

using dist_moe::routing::build_routing_tables_chunked;
using dist_moe::routing::build_routing_tables_naive;
using dist_moe::routing::HostIds;
using dist_moe::routing::HostRoutingTables;
using dist_moe::routing::RoutingProblem;
using dist_moe::testing::RoutingPattern;

HostIds widen(const std::vector<std::vector<int32_t>>& ids) {
  HostIds out(ids.size());
  for (size_t r = 0; r < ids.size(); ++r) out[r].assign(ids[r].begin(), ids[r].end());
  return out;
}

std::string describe(const RoutingProblem& P, RoutingPattern pat) {
  return "R=" + std::to_string(P.world) + " rank=" + std::to_string(P.rank) + " L=" + std::to_string(P.local_experts) +
         " K=" + std::to_string(P.top_k) + " T=" + std::to_string(P.num_tokens) + " align=" +
         std::to_string(P.alignment) + " pattern=" + dist_moe::testing::to_string(pat);
}

void expect_equal_tables(const HostRoutingTables& a, const HostRoutingTables& b, const std::string& what) {
  EXPECT_EQ(a.overflow, b.overflow) << what;
  EXPECT_EQ(a.total_rows, b.total_rows) << what;
  EXPECT_EQ(a.expert_rows, b.expert_rows) << what;
  EXPECT_EQ(a.expert_rows_unpadded, b.expert_rows_unpadded) << what;
  EXPECT_EQ(a.expert_offsets, b.expert_offsets) << what;
  EXPECT_EQ(a.recv_rows_from_rank, b.recv_rows_from_rank) << what;
  EXPECT_EQ(a.send_rows_to_rank, b.send_rows_to_rank) << what;
  EXPECT_EQ(a.row_route, b.row_route) << what;
  EXPECT_EQ(a.route_row, b.route_row) << what;
}

// The oracle's RankRouting in the kernel's table format.
void expect_matches_oracle(const HostRoutingTables& got, const dist_moe::reference::RankRouting& ref,
                           const RoutingProblem& P, const std::string& what) {
  using dist_moe::routing::encode_route;
  const int L = P.local_experts;
  ASSERT_EQ(static_cast<int64_t>(got.total_rows), ref.num_rows()) << what;
  for (int e = 0; e < L; ++e) {
    EXPECT_EQ(got.expert_rows_unpadded[e], ref.expert_counts[e]) << what << " expert " << e;
    EXPECT_EQ(got.expert_rows[e], ref.expert_padded_counts[e]) << what << " expert " << e;
    EXPECT_EQ(got.expert_offsets[e], ref.expert_offsets[e]) << what << " expert " << e;
  }
  EXPECT_EQ(got.expert_offsets[L], ref.expert_offsets[L]) << what;
  for (int s = 0; s < P.world; ++s) {
    EXPECT_EQ(got.recv_rows_from_rank[s], ref.recv_rows_from_rank[s]) << what << " src " << s;
    EXPECT_EQ(got.send_rows_to_rank[s], ref.send_rows_to_rank[s]) << what << " dst " << s;
  }
  for (int64_t m = 0; m < ref.num_rows(); ++m) {
    const auto& rr = ref.rows[static_cast<size_t>(m)];
    const int32_t want = rr.is_padding() ? -1 : encode_route(rr.src_rank, int64_t{rr.token} * P.top_k + rr.k);
    ASSERT_EQ(got.row_route[static_cast<size_t>(m)], want) << what << " row " << m;
  }
}

struct Shape {
  int L, K;
};

// Chunkings: (routes per chunk, warps per chunk); routes per chunk is a multiple of 32 * warps.
const std::vector<std::pair<int64_t, int>>& chunkings() {
  static const std::vector<std::pair<int64_t, int>> v = {{32, 1}, {64, 2}, {96, 3}, {1024, 32}, {2048, 32}, {4096, 32}};
  return v;
}

TEST(RoutingLayout, ScalarHelpers) {
  using namespace dist_moe::routing;
  EXPECT_EQ(local_expert_of(-1, 0, 4, 8), -1);
  EXPECT_EQ(local_expert_of(8, 1, 4, 8), -1);  // out of range behaves like -1
  EXPECT_EQ(local_expert_of(-2, 0, 4, 8), -1);
  EXPECT_EQ(local_expert_of(5, 1, 4, 8), 1);
  EXPECT_EQ(local_expert_of(5, 0, 4, 8), -1);
  EXPECT_EQ(owner_rank_of(7, 4, 8), 1);
  EXPECT_EQ(owner_rank_of(-1, 4, 8), -1);
  EXPECT_EQ(pad_rows(0, 128), 0);
  EXPECT_EQ(pad_rows(1, 128), 128);
  EXPECT_EQ(pad_rows(129, 64), 192);
  EXPECT_EQ(pad_rows(5, 1), 5);
  for (int s : {0, 1, 7, 126})
    for (int64_t i : {int64_t{0}, int64_t{1}, int64_t{12345}, int64_t{(1 << 24) - 1}}) {
      const int32_t c = encode_route(s, i);
      EXPECT_GE(c, 0);
      EXPECT_EQ(decode_route_src(c), s);
      EXPECT_EQ(decode_route_index(c), i);
    }
  EXPECT_EQ(dispatch_row_offset(3, 14336), 3 * 14336);
  EXPECT_EQ(combine_slot_offset(3, 2, 8, 512), (3 * 8 + 2) * 512);
  EXPECT_EQ(route_row_index(2, 5, 64, 8), 2 * 64 * 8 + 5);
  // grad_gather_src: the route slot of the dispatch window, same arithmetic as the combine slot.
  EXPECT_EQ(dispatch_route_offset(3, 2, 8, 512), combine_slot_offset(3, 2, 8, 512));
  EXPECT_EQ(fused_chunk_routes(1), 1024);
  EXPECT_EQ(fused_chunk_routes(1024), 1024);
  EXPECT_EQ(fused_chunk_routes(2048), 2048);
  EXPECT_EQ(fused_chunk_routes(2049), 3072);
}

// The block-scaled backward's token rows and route scores (G144) share the [T_max, K, D] dispatch
// window without overlap: T_max rows, then T_max * K FP32 scores, inside the window wherever
// dispatch_window_holds_scores says so -- every K >= 2 at any D -- and never at K = 1.
TEST(RoutingLayout, DispatchScoresFollowTheTokenRowsInsideTheWindow) {
  using namespace dist_moe::routing;
  EXPECT_EQ(dispatch_score_offset(0, 64, 512), 64 * 512);
  EXPECT_EQ(dispatch_score_offset(5, 64, 512), 64 * 512 + 20);
  for (int K : {1, 2, 3, 8, 16})
    for (int64_t D : {int64_t{8}, int64_t{16}, int64_t{2048}, int64_t{7168}})
      for (int64_t T : {int64_t{1}, int64_t{7}, int64_t{8192}}) {
        const int64_t row_bytes = 2 * D, window = T * K * row_bytes;
        EXPECT_EQ(dispatch_window_holds_scores(K, row_bytes), K >= 2) << "K=" << K << " D=" << D;
        if (!dispatch_window_holds_scores(K, row_bytes)) continue;
        EXPECT_GE(dispatch_score_offset(0, T, row_bytes), dispatch_row_offset(T, row_bytes));
        EXPECT_LE(dispatch_score_offset(T * K, T, row_bytes), window) << "K=" << K << " D=" << D << " T=" << T;
      }
}

// The rank-partials combine's FP32 partial layout covers each half's 32*len bytes once, whatever
// len (full groups of 32 vectors, a last partial group, or only a partial one), and a full group's
// first and second halves are each one contiguous 512-byte run in vector order.
TEST(RoutingLayout, PartialHalfOffsetIsABijection) {
  using dist_moe::routing::partial_half_offset;
  for (int len = 1; len <= 200; ++len) {
    std::vector<int> hits(static_cast<size_t>(2 * len), 0);
    for (int w = 0; w < len; ++w)
      for (int h = 0; h < 2; ++h) {
        const int64_t off = partial_half_offset(w, h, len);
        ASSERT_EQ(off % 16, 0) << "len " << len << " w " << w << " h " << h;
        ASSERT_GE(off, 0);
        ASSERT_LT(off, int64_t{32} * len) << "len " << len << " w " << w << " h " << h;
        ++hits[static_cast<size_t>(off / 16)];
      }
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i], 1) << "len " << len << " piece " << i;
  }
  for (int w = 0; w < 32; ++w) {
    EXPECT_EQ(partial_half_offset(32 + w, 0, 64), 1024 + 16 * w);
    EXPECT_EQ(partial_half_offset(32 + w, 1, 64), 1024 + 512 + 16 * w);
  }
}

TEST(RoutingLayout, CombineAccumulateIsFmaf) {
  // The oracle's reduction: acc = fmaf(s, h, acc) in k order from 0.0f (reference/stages.h).
  const float s[3] = {0.3f, 1e-3f, 0.77f};
  const float h[3] = {1.5f, -2.25e5f, 3.0f};
  float a = 0.0f, b = 0.0f;
  for (int k = 0; k < 3; ++k) {
    a = dist_moe::routing::combine_accumulate(a, s[k], h[k]);
    b = std::fma(s[k], h[k], b);
  }
  EXPECT_EQ(a, b);
}

TEST(RoutingLayout, ChunkSegmentsCoverTheRouteSpaceOnce) {
  using namespace dist_moe::routing;
  for (const auto& [chunk, warps] : chunkings())
    for (int world : {1, 3, 8})
      for (int64_t T : {1, 7, 100}) {
        const ChunkPlan p = make_chunk_plan(world, T, 6, chunk, warps);
        std::vector<int> seen(static_cast<size_t>(p.total_routes), 0);
        for (int g = 0; g < p.num_chunks; ++g)
          for (int w = 0; w < warps; ++w) {
            int64_t b, e;
            warp_segment(p, g, w, &b, &e);
            ASSERT_LE(b, e);
            for (int64_t f = b; f < e; ++f) seen[static_cast<size_t>(f)] += 1;
          }
        for (int64_t f = 0; f < p.total_routes; ++f) ASSERT_EQ(seen[static_cast<size_t>(f)], 1) << "route " << f;
      }
}

// The kernel's decomposition equals the plain definition and the oracle, for 1..8 ranks.
TEST(RoutingTables, KernelMirrorMatchesDefinitionAndOracle) {
  const std::vector<Shape> shapes = {{1, 1}, {1, 2}, {4, 1}, {4, 2}, {4, 6}, {4, 8}, {3, 2}, {128, 8}};
  const std::vector<int> alignments = {1, 8, 16, 64, 128};
  uint64_t seed = 1;
  int checked = 0;
  for (int world = 1; world <= 8; ++world)
    for (const Shape& sh : shapes) {
      const int E = world * sh.L;
      if (sh.K > E) continue;
      for (RoutingPattern pat : dist_moe::testing::all_routing_patterns())
        for (int64_t T : {int64_t{1}, int64_t{5}, int64_t{37}}) {
          if (sh.L == 128 && T > 5 && world > 4) continue;  // keep the run short
          const int align = alignments[seed % alignments.size()];
          const auto ids32 = dist_moe::testing::make_routing_ids(pat, world, T, sh.K, E, seed++);
          const HostIds ids = widen(ids32);
          const auto oracle = dist_moe::reference::build_routing(ids32, sh.K, E, align);
          for (int rank = 0; rank < world; ++rank) {
            RoutingProblem P;
            P.world = world;
            P.rank = rank;
            P.local_experts = sh.L;
            P.top_k = sh.K;
            P.num_tokens = T;
            P.max_tokens = T + 3;
            P.alignment = align;
            P.capacity_rows = int64_t{1} << 30;
            const std::string what = describe(P, pat);
            const HostRoutingTables naive = build_routing_tables_naive(P, ids);
            expect_matches_oracle(naive, oracle[static_cast<size_t>(rank)], P, what + " naive");
            for (const auto& [chunk, warps] : chunkings()) {
              const HostRoutingTables mirror = build_routing_tables_chunked(P, ids, chunk, warps);
              expect_equal_tables(mirror, naive, what + " chunk=" + std::to_string(chunk));
            }
            ++checked;
            if (HasFatalFailure()) return;
          }
        }
    }
  EXPECT_GT(checked, 500);
}

// The rank-partials combine in signal sync (src/kernels/combine.cu, kPartialsSignal) never waits for
// a signal nobody sends: owner o adds 1 to token (s, t)'s counter when its routing tables hold a
// route of it (route_row), and rank s waits for as many as there are other owner ranks among the
// token's routed ids. Both sides must count the same owners, for 1..8 ranks and every pattern (-1
// routes, a fully padded rank, all tokens to one expert).
TEST(RoutingTables, PartialsSignalCountsMatchOnBothSides) {
  using namespace dist_moe::routing;
  const std::vector<Shape> shapes = {{1, 1}, {4, 2}, {4, 8}, {3, 6}, {16, 8}};
  uint64_t seed = 77;
  int checked = 0;
  for (int world = 1; world <= 8; ++world)
    for (const Shape& sh : shapes) {
      const int E = world * sh.L;
      if (sh.K > E) continue;
      for (RoutingPattern pat : dist_moe::testing::all_routing_patterns())
        for (int64_t T : {int64_t{1}, int64_t{19}}) {
          const HostIds ids = widen(dist_moe::testing::make_routing_ids(pat, world, T, sh.K, E, seed++));
          const int64_t max_tokens = T + 2;
          std::vector<HostRoutingTables> tables;
          for (int o = 0; o < world; ++o)
            tables.push_back(build_routing_tables_naive(
                RoutingProblem{world, o, sh.L, sh.K, T, max_tokens, /*alignment=*/8, int64_t{1} << 30}, ids));
          for (int s = 0; s < world; ++s)
            for (int64_t t = 0; t < T; ++t) {
              int sent = 0;  // owners o != s with a route of (s, t) in their tables
              for (int o = 0; o < world; ++o) {
                if (o == s) continue;
                bool routed = false;
                for (int k = 0; k < sh.K; ++k)
                  routed |= tables[static_cast<size_t>(o)].route_row[static_cast<size_t>(
                                route_row_index(s, t * sh.K + k, max_tokens, sh.K))] >= 0;
                sent += routed ? 1 : 0;
              }
              std::vector<bool> owner_seen(static_cast<size_t>(world), false);  // the waiting side
              int expected = 0;
              for (int k = 0; k < sh.K; ++k) {
                const int64_t id = ids[static_cast<size_t>(s)][static_cast<size_t>(t * sh.K + k)];
                if (!is_routed(id, E)) continue;
                const int r = static_cast<int>(id / sh.L);
                if (r != s && !owner_seen[static_cast<size_t>(r)]) {
                  owner_seen[static_cast<size_t>(r)] = true;
                  ++expected;
                }
              }
              ASSERT_EQ(sent, expected) << "R=" << world << " L=" << sh.L << " K=" << sh.K << " T=" << T << " pattern="
                                        << dist_moe::testing::to_string(pat) << " source " << s << " token " << t;
              ++checked;
            }
        }
    }
  EXPECT_GT(checked, 1000);
}

// The fused route kernel (src/kernels/routing.cu, fused_route_kernel) builds the whole routing in
// one CTA: the single-chunk case with routing::fused_chunk_routes() routes and 32 warp segments.
TEST(RoutingTables, FusedSingleChunkMatchesDefinition) {
  const std::vector<Shape> shapes = {{1, 1}, {4, 2}, {4, 8}, {3, 6}, {128, 8}};
  uint64_t seed = 500;
  for (int world : {1, 2, 3, 8})
    for (const Shape& sh : shapes) {
      const int E = world * sh.L;
      if (sh.K > E) continue;
      for (RoutingPattern pat : dist_moe::testing::all_routing_patterns())
        for (int64_t T : {int64_t{1}, int64_t{17}, int64_t{128}}) {
          const auto ids32 = dist_moe::testing::make_routing_ids(pat, world, T, sh.K, E, seed++);
          const HostIds ids = widen(ids32);
          const int64_t chunk = dist_moe::routing::fused_chunk_routes(world * T * sh.K);
          for (int rank = 0; rank < world; ++rank) {
            RoutingProblem P{world, rank, sh.L, sh.K, T, T + 1, static_cast<int>(1 << (seed % 5)), int64_t{1} << 30};
            const HostRoutingTables fused = build_routing_tables_chunked(P, ids, chunk, 32);
            expect_equal_tables(fused, build_routing_tables_naive(P, ids), describe(P, pat) + " fused single chunk");
            if (HasFatalFailure()) return;
          }
        }
    }
}

// route_row is the inverse of row_route, and only t < T entries are written.
TEST(RoutingTables, RouteRowInvertsRowRoute) {
  const int world = 4, L = 4, K = 6, E = world * L;
  const int64_t T = 33;
  const auto ids = widen(dist_moe::testing::make_routing_ids(RoutingPattern::kMasked, world, T, K, E, 77));
  for (int rank = 0; rank < world; ++rank) {
    RoutingProblem P{world, rank, L, K, T, /*max_tokens=*/40, /*alignment=*/16, /*capacity=*/1 << 20};
    const HostRoutingTables t = build_routing_tables_chunked(P, ids, 64, 2);
    int valid = 0;
    for (int64_t m = 0; m < t.total_rows; ++m) {
      const int32_t code = t.row_route[static_cast<size_t>(m)];
      if (code < 0) continue;
      ++valid;
      const int s = dist_moe::routing::decode_route_src(code);
      const int64_t i = dist_moe::routing::decode_route_index(code);
      ASSERT_EQ(t.route_row[static_cast<size_t>(dist_moe::routing::route_row_index(s, i, 40, K))], m);
    }
    int routed = 0;
    for (size_t j = 0; j < t.route_row.size(); ++j) {
      if (t.route_row[j] >= 0) ++routed;
      const int64_t idx = static_cast<int64_t>(j) % (40 * K);
      if (idx >= T * K) {
        ASSERT_EQ(t.route_row[j], -1) << "entry of a token >= T written";
      }
    }
    EXPECT_EQ(valid, routed);
  }
}

// Capacity: required rows (after padding) above capacity are detected before any row is placed;
// exactly at capacity is fine.
TEST(RoutingTables, CapacityOverflowIsDetected) {
  const int world = 2, L = 4, K = 1, E = world * L;
  const int64_t T = 64;
  std::vector<std::vector<int32_t>> ids32(world, std::vector<int32_t>(T * K, 0));  // all to expert 0
  const HostIds ids = widen(ids32);
  RoutingProblem P{world, 0, L, K, T, T, /*alignment=*/8, /*capacity=*/0};
  P.capacity_rows = world * T;  // exactly the required rows (128, a multiple of 8)
  HostRoutingTables t = build_routing_tables_chunked(P, ids, 64, 2);
  EXPECT_FALSE(t.overflow);
  EXPECT_EQ(t.total_rows, world * T);
  P.capacity_rows = world * T - 1;
  t = build_routing_tables_chunked(P, ids, 64, 2);
  EXPECT_TRUE(t.overflow);
  EXPECT_TRUE(t.row_route.empty());
  EXPECT_EQ(t.total_rows, world * T);
  // The oracle reports the same condition.
  EXPECT_THROW(dist_moe::reference::build_routing(ids32, K, E, 8, world * T - 1), dist_moe::Error);
}

// Duplicate experts within a token (not produced by top-k routers, but allowed by the tables):
// each route gets its own row, in k order.
TEST(RoutingTables, DuplicateExpertsKeepKOrder) {
  const int world = 2, L = 2, K = 4;
  const int64_t T = 3;
  HostIds ids(world);
  ids[0] = {0, 0, 1, 0, 2, 2, 3, -1, 1, 1, 1, 1};
  ids[1] = {0, 1, 0, 1, -1, -1, 2, 0, 3, 3, 0, 0};
  for (int rank = 0; rank < world; ++rank) {
    RoutingProblem P{world, rank, L, K, T, T, 1, 1 << 20};
    const auto naive = build_routing_tables_naive(P, ids);
    for (const auto& [chunk, warps] : chunkings())
      expect_equal_tables(build_routing_tables_chunked(P, ids, chunk, warps), naive, "duplicates");
  }
}

}  // namespace
