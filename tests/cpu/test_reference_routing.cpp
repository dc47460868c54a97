// Routing metadata of the CPU oracle: expert-major order, padding, counts, owner-side tables and
// the device-side error conditions (ids out of range, unequal T, receive capacity).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "dist_moe/error.h"
#include "reference/oracle.h"
#include "test_helpers.h"

namespace ref = dist_moe::reference;
using dist_moe::ErrorCode;
using test_helpers::expect_error;
using test_helpers::make_spec;

namespace {

// R=2, T=3, K=2, E=4 (E_local=2): rank 0 owns experts 0,1; rank 1 owns 2,3.
std::vector<std::vector<int32_t>> hand_ids() {
  return {
      {1, 2, /*t1*/ 3, -1, /*t2*/ 0, 1},     // rank 0
      {2, 0, /*t1*/ -1, -1, /*t2*/ 1, 3},    // rank 1
  };
}

void expect_row(const ref::RouteRef& r, int le, int src, int t, int k) {
  EXPECT_EQ(r.local_expert, le);
  EXPECT_EQ(r.src_rank, src);
  EXPECT_EQ(r.token, t);
  EXPECT_EQ(r.k, k);
}

}  // namespace

TEST(ReferenceRouting, HandBuiltExpertMajorOrder) {
  const auto rts = ref::build_routing(hand_ids(), 2, 4, 1);
  ASSERT_EQ(rts.size(), 2u);
  // Rank 0, expert 0: (src0,t2,k0), (src1,t0,k1); expert 1: (src0,t0,k0), (src0,t2,k1), (src1,t2,k0).
  const ref::RankRouting& r0 = rts[0];
  EXPECT_EQ(r0.expert_counts, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r0.expert_padded_counts, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r0.expert_offsets, (std::vector<int64_t>{0, 2, 5}));
  ASSERT_EQ(r0.rows.size(), 5u);
  expect_row(r0.rows[0], 0, 0, 2, 0);
  expect_row(r0.rows[1], 0, 1, 0, 1);
  expect_row(r0.rows[2], 1, 0, 0, 0);
  expect_row(r0.rows[3], 1, 0, 2, 1);
  expect_row(r0.rows[4], 1, 1, 2, 0);
  EXPECT_EQ(r0.recv_rows_from_rank, (std::vector<int64_t>{3, 2}));
  // Rank 1, expert 2: (src0,t0,k1), (src1,t0,k0); expert 3: (src0,t1,k0), (src1,t2,k1).
  const ref::RankRouting& r1 = rts[1];
  EXPECT_EQ(r1.expert_counts, (std::vector<int64_t>{2, 2}));
  ASSERT_EQ(r1.rows.size(), 4u);
  expect_row(r1.rows[0], 0, 0, 0, 1);
  expect_row(r1.rows[1], 0, 1, 0, 0);
  expect_row(r1.rows[2], 1, 0, 1, 0);
  expect_row(r1.rows[3], 1, 1, 2, 1);
  EXPECT_EQ(r1.recv_rows_from_rank, (std::vector<int64_t>{2, 2}));
  // Owner side: rank 0 sends ids {1,0,1} to rank 0 and {2,3} to rank 1.
  EXPECT_EQ(r0.send_rows_to_rank, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(r1.send_rows_to_rank, (std::vector<int64_t>{2, 2}));
  // Rank 0 token 0: k0 (expert 1) at rank 0 row 2, k1 (expert 2) at rank 1 row 0; t1 k1 is -1.
  EXPECT_EQ(r0.route_location_TK[0].dst_rank, 0);
  EXPECT_EQ(r0.route_location_TK[0].row, 2);
  EXPECT_EQ(r0.route_location_TK[1].dst_rank, 1);
  EXPECT_EQ(r0.route_location_TK[1].row, 0);
  EXPECT_EQ(r0.route_location_TK[3].dst_rank, -1);
  // Rank 1 token 1 is all -1.
  EXPECT_EQ(r1.route_location_TK[2].dst_rank, -1);
  EXPECT_EQ(r1.route_location_TK[3].dst_rank, -1);
  EXPECT_EQ(r1.route_location_TK[5].dst_rank, 1);
  EXPECT_EQ(r1.route_location_TK[5].row, 3);
}

TEST(ReferenceRouting, PaddingPerExpert) {
  const auto rts = ref::build_routing(hand_ids(), 2, 4, 4);
  const ref::RankRouting& r0 = rts[0];
  EXPECT_EQ(r0.expert_counts, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(r0.expert_padded_counts, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(r0.expert_offsets, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(r0.num_valid_rows(), 5);
  EXPECT_EQ(r0.required_receive_rows(), 8);
  ASSERT_EQ(r0.rows.size(), 8u);
  expect_row(r0.rows[1], 0, 1, 0, 1);
  EXPECT_TRUE(r0.rows[2].is_padding());
  EXPECT_TRUE(r0.rows[3].is_padding());
  EXPECT_EQ(r0.rows[3].local_expert, 0);
  expect_row(r0.rows[4], 1, 0, 0, 0);
  EXPECT_TRUE(r0.rows[7].is_padding());
  EXPECT_EQ(r0.rows[7].local_expert, 1);
  EXPECT_EQ(r0.route_location_TK[0].row, 4);  // t0 k0 (expert 1) moved behind expert 0's padding
}

TEST(ReferenceRouting, EmptyExpertsGetNoRowsEvenWhenPadded) {
  // E=4 on one rank; only experts 1 and 3 are used.
  const std::vector<std::vector<int32_t>> ids = {{1, 3, 3, -1, 1, -1}};
  for (int64_t align : {1, 8, 128}) {
    const auto rts = ref::build_routing(ids, 2, 4, align);
    EXPECT_EQ(rts[0].expert_counts, (std::vector<int64_t>{0, 2, 0, 2}));
    EXPECT_EQ(rts[0].expert_padded_counts[0], 0);
    EXPECT_EQ(rts[0].expert_padded_counts[2], 0);
    EXPECT_EQ(rts[0].expert_padded_counts[1], align == 1 ? 2 : align);
    EXPECT_EQ(rts[0].num_rows(), align == 1 ? 4 : 2 * align);
  }
}

TEST(ReferenceRouting, DuplicateExpertInOneTokenKeepsKOrder) {
  const std::vector<std::vector<int32_t>> ids = {{0, 0, 1}};
  const auto rts = ref::build_routing(ids, 3, 2, 1);
  ASSERT_EQ(rts[0].rows.size(), 3u);
  expect_row(rts[0].rows[0], 0, 0, 0, 0);
  expect_row(rts[0].rows[1], 0, 0, 0, 1);
  expect_row(rts[0].rows[2], 1, 0, 0, 2);
}

TEST(ReferenceRouting, RandomProblemsInvariants) {
  for (int64_t R : {1, 2, 3, 4, 8}) {
    for (int64_t align : {1, 8, 16}) {
      ref::RandomProblemSpec spec = make_spec(R, 7, 32, 16, 3, 2 * R, static_cast<uint64_t>(100 * R + align));
      spec.routing = ref::RoutingPattern::kSkewed;
      spec.padding_route_probability = 0.25;
      const ref::Problem p = ref::make_random_problem(spec);
      const auto rts = ref::build_routing(p.ids_TK, p.top_k, p.num_experts, align);
      std::set<std::tuple<int, int, int>> seen;
      int64_t valid_routes = 0;
      for (int64_t r = 0; r < R; ++r)
        for (int32_t id : p.ids_TK[static_cast<std::size_t>(r)]) valid_routes += id >= 0;
      int64_t total_rows = 0;
      for (const auto& rt : rts) {
        for (std::size_t e = 0; e < rt.expert_counts.size(); ++e) {
          EXPECT_EQ(rt.expert_padded_counts[e] % align, 0);
          EXPECT_GE(rt.expert_padded_counts[e], rt.expert_counts[e]);
          EXPECT_LT(rt.expert_padded_counts[e] - rt.expert_counts[e], align);
          EXPECT_EQ(rt.expert_offsets[e + 1] - rt.expert_offsets[e], rt.expert_padded_counts[e]);
        }
        std::tuple<int, int, int, int> prev{-1, -1, -1, -1};
        for (int64_t m = 0; m < rt.num_rows(); ++m) {
          const ref::RouteRef& row = rt.rows[static_cast<std::size_t>(m)];
          EXPECT_GE(m, rt.expert_offsets[static_cast<std::size_t>(row.local_expert)]);
          EXPECT_LT(m, rt.expert_offsets[static_cast<std::size_t>(row.local_expert) + 1]);
          if (row.is_padding()) continue;
          ++total_rows;
          // The route's id is this rank's expert; rows strictly increase in (expert, src, token, k).
          const int32_t id = p.ids_TK[static_cast<std::size_t>(row.src_rank)]
                                      [static_cast<std::size_t>(row.token * p.top_k + row.k)];
          EXPECT_EQ(id, rt.global_expert(row.local_expert));
          const std::tuple<int, int, int, int> key{row.local_expert, row.src_rank, row.token, row.k};
          EXPECT_LT(prev, key);
          prev = key;
          EXPECT_TRUE(seen.insert({row.src_rank, row.token, row.k}).second);
          const ref::RouteLocation loc =
              rts[static_cast<std::size_t>(row.src_rank)].route_location_TK[static_cast<std::size_t>(row.token * p.top_k + row.k)];
          EXPECT_EQ(loc.dst_rank, rt.rank);
          EXPECT_EQ(loc.row, m);
        }
      }
      EXPECT_EQ(total_rows, valid_routes);
    }
  }
}

TEST(ReferenceRouting, ExpertIdOutOfRangeIsAnError) {
  auto ids = hand_ids();
  ids[1][3] = 4;  // == E
  expect_error([&] { ref::build_routing(ids, 2, 4, 1); }, ErrorCode::kInvalidValue,
               {"DistMoE expert ID is outside [-1, num_experts): rank 1 token 1 k 1 has id 4"});
  ids = hand_ids();
  ids[0][4] = -2;
  expect_error([&] { ref::build_routing(ids, 2, 4, 1); }, ErrorCode::kInvalidValue, {"rank 0 token 2 k 0 has id -2"});
}

TEST(ReferenceRouting, UnequalTokenCountIsAnError) {
  auto ids = hand_ids();
  ids[1].resize(4);  // rank 1 has T=2
  expect_error([&] { ref::build_routing(ids, 2, 4, 1); }, ErrorCode::kRuntime,
               {"DistMoE token count mismatch: rank 1 has T=2 but rank 0 has T=3"});
}

TEST(ReferenceRouting, ReceiveCapacity) {
  // Rank 0 needs 5 rows (align 1) or 8 (align 4); rank 1 needs 4 or 8.
  EXPECT_NO_THROW(ref::build_routing(hand_ids(), 2, 4, 1, 5));
  expect_error([&] { ref::build_routing(hand_ids(), 2, 4, 1, 4); }, ErrorCode::kRuntime,
               {"DistMoE scratch capacity exceeded on rank 0: required_receive_rows: 5, total_scratch_capacity_rows: 4"});
  EXPECT_NO_THROW(ref::build_routing(hand_ids(), 2, 4, 4, 8));
  expect_error([&] { ref::build_routing(hand_ids(), 2, 4, 4, 7); }, ErrorCode::kRuntime,
               {"required_receive_rows: 8, total_scratch_capacity_rows: 7"});
}

TEST(ReferenceRouting, ForwardReportsDeviceErrorsWithoutCrashing) {
  const ref::RandomProblemSpec spec = make_spec(2, 5, 8, 4, 2, 4, 1);
  const ref::Problem good = ref::make_random_problem(spec);

  ref::Problem bad_id = good;
  bad_id.ids_TK[1][7] = 9;
  expect_error([&] { ref::forward(bad_id); }, ErrorCode::kInvalidValue, {"outside [-1, num_experts)"});

  ref::Problem bad_t = good;  // rank 1 with T=4: consistent shapes, unequal T
  bad_t.x_TD[1] = ref::TensorF({4, spec.hidden_dim});
  bad_t.ids_TK[1].resize(4 * 2);
  bad_t.scores_TK[1] = ref::TensorF({4, 2});
  expect_error([&] { ref::forward(bad_t); }, ErrorCode::kRuntime, {"token count mismatch"});

  ref::ForwardOptions opts;
  const auto fwd = ref::forward(good, opts);
  int64_t most = 0;
  for (const auto& r : fwd.ranks) most = std::max(most, r.routing.required_receive_rows());
  opts.receive_capacity_rows = most;
  EXPECT_NO_THROW(ref::forward(good, opts));
  opts.receive_capacity_rows = most - 1;
  expect_error([&] { ref::forward(good, opts); }, ErrorCode::kRuntime, {"DistMoE scratch capacity exceeded"});

  ref::Problem bad_shape = good;
  bad_shape.scores_TK[0] = ref::TensorF({5, 3});
  expect_error([&] { ref::forward(bad_shape); }, ErrorCode::kInvalidValue, {"topk_scores_TK of rank 0"});
  ref::Problem not_bf16 = good;
  not_bf16.x_TD[0].data[3] = 1.0f + 1.0f / 1024.0f;
  expect_error([&] { ref::forward(not_bf16); }, ErrorCode::kInvalidValue, {"is not a BF16 value"});
}
