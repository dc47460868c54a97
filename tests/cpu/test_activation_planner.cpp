// The device activation planner, run on the host: recompute decisions, LIFO slots, scratch-only
// calls, backward snapshots, and agreement with plan_memory's byte formulas.
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <vector>

#include "dist_moe/device/numeric/fp8_blockwise.cuh"
#include "dist_moe/device/planner/activation_planner.cuh"
#include "dist_moe/memory_plan.h"
#include "test_helpers.h"

namespace dist_moe {
namespace {

using planner::BufferGeometry;
using planner::CallShape;
using planner::PlanStatus;
using test_helpers::make_config;

// Host mirror of one rank's planner state.
struct HostPlanner {
  BufferGeometry g;
  int64_t R;
  std::vector<int64_t> saved, layer_id, peak;
  HostPlanner(const BufferGeometry& geometry, int64_t ep) : g(geometry), R(ep) {
    saved.assign(g.num_slots * R, -7);
    layer_id.assign(g.num_slots, -7);
    peak.assign(g.num_slots + 1, -7);
    planner::reset_planner(g, R, state());
  }
  planner::PlannerState state() { return {saved.data(), layer_id.data(), peak.data()}; }
  bool operator==(const HostPlanner& o) const { return saved == o.saved && layer_id == o.layer_id; }
};

BufferGeometry geometry_of(const MemoryPlan& p) {
  return {p.num_activation_slots, p.activation_slot_bytes, p.total_device_buffer_bytes + p.host_scratch_bytes};
}

CallShape shape_of(const Config& c, int64_t R, int64_t rank) {
  return {c.max_num_local_input_tokens, c.hidden_dim, c.intermediate_dim, c.top_k, R, rank};
}

std::vector<int64_t> layer_buffer(int64_t R) { return std::vector<int64_t>(planner::layer_state_size(R), -9); }

// Offset of a backward caller's x_TD from the buffer base (outside the buffer, as a caller's tensor is).
constexpr int64_t kCallerX = -(int64_t{1} << 40);

TEST(ActivationPlanner, BalancedSlotFactorRecomputesOnlyAboveItsSoftBudget) {
  Config c = make_config(8, 128, 128, 1, 4, 1);
  c.device_scratch_capacity_factor = 2.0;
  c.activation_slot_capacity_factor = 1.0;
  const MemoryPlan p = plan_memory(c, 2);
  for (int rank = 0; rank < 2; ++rank) {
    HostPlanner hp(geometry_of(p), 2);
    auto out = layer_buffer(2);
    const int32_t balanced[2] = {8, 8};
    ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 2, rank), hp.state(), 0, 1, balanced, false, out.data()),
              PlanStatus::kOk);
    EXPECT_EQ(out[planner::kNeedRecompute], 0) << "balanced rows fit a factor-1.0 slot";
    HostPlanner hq(geometry_of(p), 2);
    const int32_t skewed[2] = {16, 0};  // factor 2.0 on rank 0
    ASSERT_EQ(planner::plan_bf16_forward(hq.g, shape_of(c, 2, rank), hq.state(), 0, 1, skewed, false, out.data()),
              PlanStatus::kOk);
    EXPECT_EQ(out[planner::kNeedRecompute], 1) << "one rank above the balanced budget forces recompute on all";
  }
}

TEST(ActivationPlanner, ScratchOnlyPlansPreserveTheSlotStack) {
  Config c = make_config(8, 64, 64, 1, 4, 2);
  const MemoryPlan p = plan_memory(c, 1);
  HostPlanner hp(geometry_of(p), 1);
  const HostPlanner initial = hp;
  auto out = layer_buffer(1);
  const int32_t rows[1] = {8};
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 1, 0), hp.state(), 0, 2, rows, true, out.data()),
              PlanStatus::kOk);
    EXPECT_EQ(out[planner::kNeedRecompute], 1);
    EXPECT_EQ(out[planner::kSlot], -1);
    EXPECT_EQ(out[planner::kX], -1);
    EXPECT_TRUE(hp == initial);
  }
  EXPECT_LT(hp.peak[hp.g.num_slots], initial.peak[hp.g.num_slots]);  // only the scratch peak moves
}

TEST(ActivationPlanner, BackwardUsesTheForwardSlotNotTheLiveSelector) {
  Config c = make_config(8, 128, 128, 2, 4, 1);
  c.num_activation_slots = 2;
  c.activation_slot_capacity_factor = 1.0;
  const MemoryPlan p = plan_memory(c, 1);
  HostPlanner hp(geometry_of(p), 1);
  const HostPlanner initial = hp;
  auto out = layer_buffer(1);
  const int32_t rows[1] = {16};
  ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 1, 0), hp.state(), /*slot*/ 0, 1, rows, false, out.data()),
            PlanStatus::kOk);
  EXPECT_EQ(out[planner::kSlot], 0);
  EXPECT_EQ(hp.layer_id[0], 1);
  // The caller now selects slot 1; backward still pops slot 0 from the snapshot.
  planner::Bf16BackwardOffsets bo{};
  ASSERT_EQ(planner::plan_bf16_backward(hp.g, shape_of(c, 1, 0), hp.state(), out.data(), kCallerX, &bo), PlanStatus::kOk);
  EXPECT_TRUE(hp == initial);
  EXPECT_EQ(hp.layer_id[0], 0);
  EXPECT_EQ(hp.layer_id[1], 0);
}

TEST(ActivationPlanner, SlotsAreLifoAndOutOfOrderPopsAreCaught) {
  Config c = make_config(8, 128, 256, 2, 4, 2);
  c.activation_slot_capacity_factor = 1.0;
  const MemoryPlan p = plan_memory(c, 2);
  HostPlanner hp(geometry_of(p), 2);
  const HostPlanner initial = hp;
  auto l0 = layer_buffer(2), l1 = layer_buffer(2);
  const int32_t rows[2] = {16, 16};
  const CallShape sh = shape_of(c, 2, 1);
  ASSERT_EQ(planner::plan_bf16_forward(hp.g, sh, hp.state(), 0, 2, rows, false, l0.data()), PlanStatus::kOk);
  ASSERT_EQ(planner::plan_bf16_forward(hp.g, sh, hp.state(), 0, 2, rows, false, l1.data()), PlanStatus::kOk);
  EXPECT_EQ(l0[planner::kNeedRecompute], 0);
  EXPECT_EQ(l1[planner::kNeedRecompute], 0);
  EXPECT_EQ(l1[planner::kXGathered], l0[planner::kH3] + planner::h3_bytes(sh));  // contiguous pushes
  // A third live forward in a 2-deep slot is refused.
  auto l2 = layer_buffer(2);
  HostPlanner extra = hp;
  EXPECT_EQ(planner::plan_bf16_forward(extra.g, sh, extra.state(), 0, 2, rows, false, l2.data()),
            PlanStatus::kSlotOverflow);
  // Popping the lower layer first is an ordering error.
  planner::Bf16BackwardOffsets bo{};
  HostPlanner wrong = hp;
  EXPECT_EQ(planner::plan_bf16_backward(wrong.g, sh, wrong.state(), l0.data(), kCallerX, &bo), PlanStatus::kLayerOrder);
  ASSERT_EQ(planner::plan_bf16_backward(hp.g, sh, hp.state(), l1.data(), kCallerX, &bo), PlanStatus::kOk);
  EXPECT_EQ(bo.x_gathered, l1[planner::kXGathered]);  // saved path reads the slot
  EXPECT_EQ(bo.x, kCallerX);  // nothing recomputes here; a recompute would read the caller's x
  ASSERT_EQ(planner::plan_bf16_backward(hp.g, sh, hp.state(), l0.data(), kCallerX, &bo), PlanStatus::kOk);
  EXPECT_TRUE(hp == initial);
}

TEST(ActivationPlanner, MinimumSlotAlwaysRecomputesAndMaximumUsefulNever) {
  Config c = make_config(16, 256, 128, 2, 8, 2);
  c.device_scratch_capacity_factor = 4.0;  // scratch for the worst routing
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    // Random routing within the planned capacity: received rows per rank sum to T*K*R.
    const int64_t R = 4, total = c.max_num_local_input_tokens * c.top_k * R;
    const int64_t cap = plan_memory(c, R).total_scratch_capacity_rows;
    std::vector<int32_t> recv(R, 0);
    for (int64_t i = 0; i < total; ++i) {
      int64_t r;
      do r = rng() % R; while (recv[r] >= cap);
      recv[r]++;
    }
    for (bool maximum : {false, true}) {
      Config cc = c;
      if (maximum) cc.activation_slot_bytes = plan_memory(c, R).maximum_useful_activation_slot_bytes;
      const MemoryPlan p = plan_memory(cc, R);
      HostPlanner hp(geometry_of(p), R);
      auto out = layer_buffer(R);
      for (int layer = 0; layer < 2; ++layer) {
        ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(cc, R, 0), hp.state(), 0, 2, recv.data(), false, out.data()),
                  PlanStatus::kOk);
        EXPECT_EQ(out[planner::kNeedRecompute], maximum ? 0 : 1) << "trial " << trial << " layer " << layer;
      }
    }
  }
}

TEST(ActivationPlanner, DecisionAgreesOnEveryRank) {
  Config c = make_config(32, 128, 256, 4, 16, 3);
  c.activation_slot_capacity_factor = 0.6;
  c.device_scratch_capacity_factor = 4.0;
  const int64_t R = 4;
  const MemoryPlan p = plan_memory(c, R);
  std::mt19937 rng(11);
  std::vector<HostPlanner> ranks(R, HostPlanner(geometry_of(p), R));
  for (int layer = 0; layer < 3; ++layer) {
    std::vector<int32_t> recv(R);
    for (auto& v : recv) v = static_cast<int32_t>(rng() % (c.max_num_local_input_tokens * c.top_k * 2));
    int64_t decision = -1;
    for (int64_t r = 0; r < R; ++r) {
      auto out = layer_buffer(R);
      ASSERT_EQ(planner::plan_bf16_forward(ranks[r].g, shape_of(c, R, r), ranks[r].state(), 0, 3, recv.data(), false,
                                           out.data()),
                PlanStatus::kOk);
      if (decision < 0) decision = out[planner::kNeedRecompute];
      EXPECT_EQ(out[planner::kNeedRecompute], decision) << "rank " << r << " layer " << layer;
      EXPECT_TRUE(ranks[r].saved == ranks[0].saved);
    }
  }
}

TEST(ActivationPlanner, BackwardPeakFitsThePlannedDeviceScratchExactly) {
  for (auto dims : {std::pair<int64_t, int64_t>{128, 128}, {512, 128}, {128, 512}}) {
    Config c = make_config(8, dims.first, dims.second, 2, 4, 1);
    const MemoryPlan p = plan_memory(c, 2);  // minimum slot: every layer recomputes
    HostPlanner hp(geometry_of(p), 2);
    const int32_t rows[2] = {static_cast<int32_t>(p.device_scratch_capacity_rows),
                             static_cast<int32_t>(p.device_scratch_capacity_rows)};
    auto out = layer_buffer(2);
    ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 2, 0), hp.state(), 0, 1, rows, false, out.data()),
              PlanStatus::kOk);
    planner::Bf16BackwardOffsets bo{};
    ASSERT_EQ(planner::plan_bf16_backward(hp.g, shape_of(c, 2, 0), hp.state(), out.data(), kCallerX, &bo), PlanStatus::kOk);
    EXPECT_EQ(hp.peak[hp.g.num_slots], 0) << "D=" << dims.first << " F=" << dims.second
                                           << ": the backward peak is the planned device scratch";
    // One more row fits the forward but not the backward peak.
    HostPlanner hq(geometry_of(p), 2);
    const int32_t more[2] = {rows[0] + 1, rows[1]};
    ASSERT_EQ(planner::plan_bf16_forward(hq.g, shape_of(c, 2, 0), hq.state(), 0, 1, more, false, out.data()),
              PlanStatus::kOk);
    EXPECT_EQ(planner::plan_bf16_backward(hq.g, shape_of(c, 2, 0), hq.state(), out.data(), kCallerX, &bo),
              PlanStatus::kScratchOverflow);
  }
}

TEST(ActivationPlanner, BackwardTemporariesDoNotOverlapWhileLive) {
  Config c = make_config(8, 256, 128, 2, 4, 1);  // D > F: grad_h3_gathered below grad_h2
  const MemoryPlan p = plan_memory(c, 1);
  HostPlanner hp(geometry_of(p), 1);
  auto out = layer_buffer(1);
  const int32_t rows[1] = {16};
  ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 1, 0), hp.state(), 0, 1, rows, false, out.data()),
            PlanStatus::kOk);
  planner::Bf16BackwardOffsets bo{};
  ASSERT_EQ(planner::plan_bf16_backward(hp.g, shape_of(c, 1, 0), hp.state(), out.data(), kCallerX, &bo), PlanStatus::kOk);
  const CallShape sh = shape_of(c, 1, 0);
  struct Span { int64_t begin, bytes; };
  // Live together during W2 DGRAD/WGRAD: h2, grad_h2, grad_h3_gathered, h1, x_gathered.
  const Span live[] = {{bo.h2, planner::h2_bytes(sh, 16)}, {bo.grad_h2, planner::h2_bytes(sh, 16)},
                       {bo.grad_h3_gathered, planner::xg_bytes(sh, 16)}, {bo.h1, planner::h1_bytes(sh, 16)},
                       {bo.x_gathered, planner::xg_bytes(sh, 16)}};
  for (size_t i = 0; i < 5; ++i)
    for (size_t j = i + 1; j < 5; ++j)
      EXPECT_TRUE(live[i].begin + live[i].bytes <= live[j].begin || live[j].begin + live[j].bytes <= live[i].begin)
          << i << " overlaps " << j;
  EXPECT_EQ(bo.grad_h1 + planner::h1_bytes(sh, 16), hp.g.buffer_bytes);
}

// One step of L layers in one slot of depth L under activation checkpointing (upstream's default
// slot sizing: the minimum, 1 layer per slot, or a factor), as torch runs it: every block's first
// forward plans scratch-only with saved state (its state is discarded), and in backward, block by
// block from the last, the recompute pushes the layer and the backward pops it. `plain[i]` marks
// blocks without checkpointing (pushed in the forward, popped in backward).
void checkpointed_step(HostPlanner& hp, const CallShape& sh, int64_t L, const std::vector<bool>& plain,
                       const int32_t* rows) {
  std::vector<std::vector<int64_t>> pushed(L, layer_buffer(sh.ep_size));
  auto discarded = layer_buffer(sh.ep_size);
  for (int64_t i = 0; i < L; ++i) {
    if (plain[i]) {
      ASSERT_EQ(planner::plan_bf16_forward(hp.g, sh, hp.state(), 0, L, rows, false, pushed[i].data()), PlanStatus::kOk);
    } else {
      ASSERT_EQ(planner::plan_bf16_forward(hp.g, sh, hp.state(), 0, L, rows, true, discarded.data()), PlanStatus::kOk);
      EXPECT_EQ(discarded[planner::kSlot], -1);
    }
  }
  planner::Bf16BackwardOffsets bo{};
  for (int64_t i = L - 1; i >= 0; --i) {
    if (!plain[i]) {  // the checkpoint's recompute: a real push
      ASSERT_EQ(planner::plan_bf16_forward(hp.g, sh, hp.state(), 0, L, rows, false, pushed[i].data()), PlanStatus::kOk);
    }
    ASSERT_EQ(planner::plan_bf16_backward(hp.g, sh, hp.state(), pushed[i].data(), kCallerX, &bo), PlanStatus::kOk)
        << "layer " << i;
    if (pushed[i][planner::kNeedRecompute]) {
      EXPECT_EQ(bo.x, pushed[i][planner::kX]) << "recompute reads the slot's x";
    }
  }
}

TEST(ActivationPlanner, CheckpointedLayersLeaveTheSlotAsTheyFoundIt) {
  for (const int64_t L : {1, 4}) {
    for (const bool minimum : {true, false}) {
      Config c = make_config(8, 128, 128, 2, 4, L);
      if (!minimum) c.activation_slot_capacity_factor = 1.0;
      const MemoryPlan p = plan_memory(c, 2);
      const CallShape sh = shape_of(c, 2, 1);
      const int32_t rows[2] = {16, 16};
      const std::vector<std::vector<bool>> patterns = {std::vector<bool>(L, false),  // every block checkpointed
                                                       [&] {  // alternating checkpointed and plain blocks
                                                         std::vector<bool> v(L);
                                                         for (int64_t i = 0; i < L; ++i) v[i] = i % 2 == 1;
                                                         return v;
                                                       }()};
      for (const auto& plain : patterns) {
        HostPlanner hp(geometry_of(p), 2);
        const HostPlanner initial = hp;
        for (int step = 0; step < 20; ++step) {  // many steps, no reset
          checkpointed_step(hp, sh, L, plain, rows);
          ASSERT_TRUE(hp == initial) << "L=" << L << " step " << step << ": the slot must be empty after backward";
        }
      }
    }
  }
}

TEST(ActivationPlanner, ScratchOnlyStateRecomputesFromTheCallersInput) {
  // A scratch-only forward's state that reaches a backward anyway (nothing to pop) recomputes, and
  // reads the layer input from the backward caller's x.
  Config c = make_config(8, 128, 128, 2, 4, 1);
  const MemoryPlan p = plan_memory(c, 1);
  HostPlanner hp(geometry_of(p), 1);
  const HostPlanner initial = hp;
  auto out = layer_buffer(1);
  const int32_t rows[1] = {16};
  ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 1, 0), hp.state(), 0, 1, rows, true, out.data()),
            PlanStatus::kOk);
  planner::Bf16BackwardOffsets bo{};
  ASSERT_EQ(planner::plan_bf16_backward(hp.g, shape_of(c, 1, 0), hp.state(), out.data(), kCallerX, &bo),
            PlanStatus::kOk);
  EXPECT_EQ(bo.x, kCallerX);
  EXPECT_GE(bo.x_gathered, hp.g.num_slots * hp.g.slot_bytes) << "recomputed into scratch";
  EXPECT_TRUE(hp == initial);
}

TEST(ActivationPlanner, PlainForwardsBeyondTheSlotDepthOverflow) {
  // Without checkpoint-aware planning, a second live forward in a 1-deep slot (what a checkpoint's
  // recompute would be if its first forward had pushed) is the hard error.
  Config c = make_config(8, 128, 128, 2, 4, 1);
  const MemoryPlan p = plan_memory(c, 1);
  HostPlanner hp(geometry_of(p), 1);
  auto a = layer_buffer(1), b = layer_buffer(1);
  const int32_t rows[1] = {16};
  ASSERT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 1, 0), hp.state(), 0, 1, rows, false, a.data()),
            PlanStatus::kOk);
  EXPECT_EQ(planner::plan_bf16_forward(hp.g, shape_of(c, 1, 0), hp.state(), 0, 1, rows, false, b.data()),
            PlanStatus::kSlotOverflow);
}


// ---- MXFP8 layers --------------------------------------------------------------------------------

Config mxfp8_config(int64_t T, int64_t D, int64_t F, int64_t K, int64_t E, int64_t layers, bool inference) {
  Config c = make_config(T, D, F, K, E, layers);
  c.block_scaled = BlockScaledConfig{};
  c.inference = inference;
  if (inference) c.num_activation_slots = 0;
  return c;
}

// The static MXFP8 scratch the context lays out is exactly the scratch plan_memory sizes (device +
// host, at the routing capacity), its regions tile it without overlap, and the WGRAD views fit.
TEST(ActivationPlanner, Mxfp8ScratchIsThePlannedScratchTermForTerm) {
  struct Shape { int64_t T, D, F, K, E, R; };
  for (const Shape& s : {Shape{64, 256, 256, 2, 8, 1}, Shape{96, 384, 640, 8, 64, 2}, Shape{4096, 7168, 2048, 8, 256, 8},
                         Shape{1024, 2048, 768, 8, 128, 4}, Shape{512, 4096, 14336, 2, 8, 2}}) {
    for (bool inference : {false, true}) {
      const Config c = mxfp8_config(s.T, s.D, s.F, s.K, s.E, 1, inference);
      const MemoryPlan p = plan_memory(c, s.R);
      const int64_t top = p.total_device_buffer_bytes + p.host_scratch_bytes;
      const int64_t cap = p.total_scratch_capacity_rows;
      const planner::Mxfp8Scratch m = planner::mxfp8_scratch(cap, s.D, s.F, inference, top);
      EXPECT_EQ(top - m.bottom, p.device_scratch_bytes + p.host_scratch_bytes)
          << "T=" << s.T << " D=" << s.D << " F=" << s.F << " inference=" << inference;
      EXPECT_EQ(m.bottom, p.total_activation_bytes);
      EXPECT_EQ(m.row, m.bottom);
      if (inference) {
        EXPECT_EQ(m.h1 + planner::align128(cap * 2 * s.F * 2), top);
        continue;
      }
      // low to high: row | h1 | grad_h2 | h2_col | grad_h3_col | dxy_col | x_col
      const int64_t order[] = {m.row, m.h1, m.grad_h2, m.h2_col, m.grad_h3_col, m.dxy_col, m.x_col, top};
      for (int i = 0; i + 1 < 8; ++i) EXPECT_LT(order[i], order[i + 1]);
      EXPECT_EQ(m.grad_h2 - m.h1, planner::align128(cap * 2 * s.F * 2));
      EXPECT_EQ(m.h2_col - m.grad_h2, planner::align128(cap * s.F * 2));
      EXPECT_EQ(top - m.x_col, numeric::mxfp8_compact_columns_bytes(s.D, cap));
      // The dequantized WGRAD operands fit the regions dead by then (D <= ~4.5 F at these shapes).
      EXPECT_LE(m.row + planner::align128(cap * s.D * 2) + planner::align128(cap * s.F * 2), m.w2_views_end);
      EXPECT_LE(m.row + planner::align128(cap * 4 * s.F) + planner::align128(cap * s.D * 2), m.w13_views_end);
      // The Mega backward's dxy rows: E4M3 exactly over grad_h2's region, the code words after
      // grad_h3's codes, inside the row region.
      EXPECT_EQ(m.h2_col - m.grad_h2, planner::align128(cap * 2 * s.F));
      EXPECT_TRUE(m.fused_dxy_fits(cap, s.D, s.F));
    }
  }
}

// FP8 blockwise runs on the MXFP8 layouts (runtime/fp8_blockwise_pipeline.cpp): plan_memory sizes
// both formats alike, a compact FP8-blockwise column bundle of R = 128 n rows has the MXFP8 bundle's
// bytes, and the FP8-blockwise row bundles (x, h2 and, training, dxy) and the expanded saved columns
// fit the scratch's row region.
TEST(ActivationPlanner, Fp8BlockwiseFitsTheMxfp8Layouts) {
  struct Shape { int64_t T, D, F, K, E, R; };
  for (const Shape& s : {Shape{64, 256, 256, 2, 8, 1}, Shape{96, 384, 640, 8, 64, 2}, Shape{4096, 7168, 2048, 8, 256, 2},
                         Shape{8192, 2048, 768, 8, 128, 1}, Shape{4096, 4096, 14336, 2, 8, 1}}) {
    for (bool inference : {false, true}) {
      SCOPED_TRACE("T=" + std::to_string(s.T) + " D=" + std::to_string(s.D) + " inference=" + std::to_string(inference));
      const Config mx = mxfp8_config(s.T, s.D, s.F, s.K, s.E, 1, inference);
      Config fp8 = mx;
      fp8.block_scaled->format = BlockScaledFormat::kFP8Blockwise;
      const MemoryPlan p = plan_memory(fp8, s.R), q = plan_memory(mx, s.R);
      EXPECT_EQ(p.device_scratch_bytes, q.device_scratch_bytes);
      EXPECT_EQ(p.host_scratch_bytes, q.host_scratch_bytes);
      EXPECT_EQ(p.maximum_useful_activation_slot_bytes, q.maximum_useful_activation_slot_bytes);
      EXPECT_EQ(p.total_scratch_capacity_rows % 128, 0);
      for (int64_t rows : {int64_t{128}, 128 * s.E, p.total_scratch_capacity_rows})
        for (int64_t C : {s.D, s.F})
          EXPECT_EQ(numeric::fp8_blockwise_compact_columns_bytes(C, rows), numeric::mxfp8_compact_columns_bytes(C, rows));
      const int64_t cap = p.total_scratch_capacity_rows;
      const planner::Mxfp8Scratch m =
          planner::mxfp8_scratch(cap, s.D, s.F, inference, p.total_device_buffer_bytes + p.host_scratch_bytes);
      const int64_t row_region = m.h1 - m.row;
      for (int64_t C : {s.D, s.F, 2 * s.F}) {
        if (inference && C == 2 * s.F) continue;
        EXPECT_LE(planner::fp8_blockwise_row_bytes(cap, C), row_region) << "row bundle of " << C;
        EXPECT_LE(planner::fp8_blockwise_row_bytes(cap, C), planner::mxfp8_row_bytes(cap, C));
      }
      if (!inference) {
        EXPECT_LE(numeric::fp8_blockwise_compact_columns_bytes(std::max(s.D, s.F), cap), row_region);
      }
    }
  }
}

// The MXFP8 accounting agrees with plan_memory: the maximum useful slot never recomputes at the
// routing capacity, the minimum always recomputes, the balanced full-save slot holds balanced
// (padded) routing; every forward + backward pair leaves the slot as it found it.
TEST(ActivationPlanner, Mxfp8AccountingAgreesWithThePlan) {
  const int64_t R = 2;
  Config c = mxfp8_config(96, 256, 384, 2, 8, 2, false);
  c.device_scratch_capacity_factor = 2.0;
  const MemoryPlan base = plan_memory(c, R);
  const planner::Mxfp8Homes homes{1000 * 128, 2000 * 128, 3000 * 128, 500 * 128};
  struct Budget { std::optional<int64_t> bytes; std::vector<int32_t> recv; int expect; };
  const int32_t cap = static_cast<int32_t>(base.total_scratch_capacity_rows);
  // Balanced rows per rank, padded like routing pads them: T*K spread over L=4 experts, 128 each.
  const int32_t balanced = static_cast<int32_t>(plan_max_recv_rows(96, 2, 1.0, 4, R, kBlockScaledRowMultiple));
  for (const Budget& b : {Budget{base.maximum_useful_activation_slot_bytes, {cap, cap}, 0},
                          Budget{std::nullopt, {balanced, balanced}, 1},
                          Budget{base.balanced_full_save_activation_slot_bytes, {balanced, balanced}, 0}}) {
    Config cc = c;
    cc.activation_slot_bytes = b.bytes;
    const MemoryPlan p = plan_memory(cc, R);
    for (int64_t rank = 0; rank < R; ++rank) {
      HostPlanner hp(geometry_of(p), R);
      const HostPlanner empty = hp;
      const CallShape cs = shape_of(cc, R, rank);
      auto l0 = layer_buffer(R), l1 = layer_buffer(R);
      ASSERT_EQ(planner::plan_mxfp8_forward(hp.g, cs, hp.state(), 0, 2, b.recv.data(), false, homes, l0.data()),
                PlanStatus::kOk);
      ASSERT_EQ(planner::plan_mxfp8_forward(hp.g, cs, hp.state(), 0, 2, b.recv.data(), false, homes, l1.data()),
                PlanStatus::kOk);
      EXPECT_EQ(l0[planner::kNeedRecompute], b.expect);
      if (b.expect) {  // the operands stay at their scratch homes; the slot keeps x
        EXPECT_EQ(l0[planner::kXCol], homes.x_col);
        EXPECT_EQ(l0[planner::kH1], homes.h1);
        EXPECT_EQ(l0[planner::kH2Col], homes.h2_col);
        EXPECT_EQ(l1[planner::kX], l0[planner::kX] + planner::x_bytes(cs));
      } else {  // x_col | h1 | h2_col | h3 contiguous, the second layer right after the first
        const int64_t rows = b.recv[rank];
        EXPECT_EQ(l0[planner::kXCol], 0);
        EXPECT_EQ(l0[planner::kH1], numeric::mxfp8_compact_columns_bytes(cs.D, rows));
        EXPECT_EQ(l0[planner::kH2Col], l0[planner::kH1] + planner::h1_bytes(cs, rows));
        EXPECT_EQ(l0[planner::kH3], l0[planner::kH2Col] + numeric::mxfp8_compact_columns_bytes(cs.F, rows));
        EXPECT_EQ(l1[planner::kXCol], planner::mxfp8_saved_full_bytes(cs, rows));
      }
      int64_t x = -1;
      EXPECT_EQ(planner::plan_mxfp8_backward(hp.g, cs, hp.state(), l0.data(), kCallerX, homes, &x), PlanStatus::kLayerOrder)
          << "popping the lower layer first is caught";
      hp = HostPlanner(geometry_of(p), R);
      ASSERT_EQ(planner::plan_mxfp8_forward(hp.g, cs, hp.state(), 0, 2, b.recv.data(), false, homes, l0.data()),
                PlanStatus::kOk);
      ASSERT_EQ(planner::plan_mxfp8_forward(hp.g, cs, hp.state(), 0, 2, b.recv.data(), false, homes, l1.data()),
                PlanStatus::kOk);
      ASSERT_EQ(planner::plan_mxfp8_backward(hp.g, cs, hp.state(), l1.data(), kCallerX, homes, &x), PlanStatus::kOk);
      EXPECT_EQ(x, b.expect ? l1[planner::kX] : kCallerX) << "a saved layer keeps no x: the caller's";
      ASSERT_EQ(planner::plan_mxfp8_backward(hp.g, cs, hp.state(), l0.data(), kCallerX, homes, &x), PlanStatus::kOk);
      EXPECT_TRUE(hp == empty);
    }
  }
}

// upstream's test_balanced_slot_factor_recomputes_only_above_its_soft_budget, MXFP8 row: T = 128,
// D = F = 128, K = 1, E = 4 at EP2, device factor 2.0, slot factor 1.0. Balanced rows (padded to the
// block-scaled row multiple as routing pads them) on both ranks are saved; rows at factor 2.0 on one
// rank force recompute on every rank (the decision is global).
TEST(ActivationPlanner, Mxfp8BalancedSlotFactorRecomputesOnlyAboveItsSoftBudget) {
  const int64_t R = 2, T = 128, K = 1, L = 2;
  Config c = mxfp8_config(T, 128, 128, K, 4, 1, false);
  c.device_scratch_capacity_factor = 2.0;
  c.activation_slot_capacity_factor = 1.0;
  const MemoryPlan p = plan_memory(c, R);
  const planner::Mxfp8Homes homes{1000 * 128, 2000 * 128, 3000 * 128, 500 * 128};
  const auto rows_at = [&](double factor) {
    return static_cast<int32_t>(plan_max_recv_rows(T, K, factor, L, R, kBlockScaledRowMultiple));
  };
  const int32_t balanced[2] = {rows_at(1.0), rows_at(1.0)};
  const int32_t skewed[2] = {rows_at(2.0), 0};
  ASSERT_GT(skewed[0], balanced[0]);
  for (int64_t rank = 0; rank < R; ++rank) {
    for (const auto& [recv, expect] : {std::pair{balanced, 0}, std::pair{skewed, 1}}) {
      HostPlanner hp(geometry_of(p), R);
      auto out = layer_buffer(R);
      ASSERT_EQ(planner::plan_mxfp8_forward(hp.g, shape_of(c, R, rank), hp.state(), 0, 1, recv, false, homes, out.data()),
                PlanStatus::kOk);
      EXPECT_EQ(out[planner::kNeedRecompute], expect) << "rank " << rank << ", rows " << recv[0] << " / " << recv[1];
    }
  }
}

// A scratch-only MXFP8 forward (inference, no-grad, recompute_from_inputs) takes no slot space and
// its backward recomputes from the caller's x; both record the static scratch layout's bottom as the
// scratch peak (what check_overflow reports, host overflow included).
// NVFP4's scratch (inference): h1 | row at the top, and for prefill- and decode-sized contexts the
// expanded FP16 token rows and their scales below, all within the plan's scratch (which adds exactly
// that term).
TEST(ActivationPlanner, Nvfp4ScratchFitsThePlan) {
  struct Shape { int64_t T, D, F, K, E, R; bool expands; };
  for (const Shape& s : {Shape{16, 7168, 2048, 8, 256, 1, true}, Shape{4096, 7168, 2048, 8, 256, 8, true},
                         Shape{512, 1024, 768, 4, 16, 1, true}, Shape{96, 256, 256, 2, 8, 1, false}}) {
    Config c = mxfp8_config(s.T, s.D, s.F, s.K, s.E, 1, true);
    c.block_scaled->format = BlockScaledFormat::kNVFP4;
    const MemoryPlan p = plan_memory(c, s.R);
    const bool expand = nvfp4_expands_token_rows(c, s.R, p.total_scratch_capacity_factor);
    EXPECT_EQ(expand, s.expands) << "T=" << s.T << " E=" << s.E;
    const int64_t top = p.total_device_buffer_bytes + p.host_scratch_bytes;
    const int64_t cap = p.total_scratch_capacity_rows;
    const planner::Mxfp8Scratch m = planner::nvfp4_scratch(cap, s.D, s.F, top, expand);
    EXPECT_GE(m.bottom, p.total_activation_bytes) << "T=" << s.T;
    EXPECT_EQ(m.h1 + planner::align128(cap * 2 * s.F * 2), top);
    if (!expand) {
      EXPECT_EQ(m.expanded, 0);
      EXPECT_EQ(m.bottom, m.row);
      continue;
    }
    EXPECT_EQ(m.bottom, m.expanded);
    EXPECT_EQ(m.expanded_scales - m.expanded, planner::align128(cap * std::max(s.D, s.F) * 2));
    EXPECT_EQ(m.row - m.expanded_scales, planner::align128(cap * 4));
  }
}

TEST(ActivationPlanner, Mxfp8ScratchOnlyPlansKeepTheSlots) {
  const Config c = mxfp8_config(64, 256, 256, 2, 8, 1, false);
  const MemoryPlan p = plan_memory(c, 1);
  HostPlanner hp(geometry_of(p), 1);
  const HostPlanner empty = hp;
  auto l = layer_buffer(1);
  const int32_t rows[1] = {512};
  const int64_t floor = hp.g.num_slots * hp.g.slot_bytes;
  const planner::Mxfp8Scratch layout =
      planner::mxfp8_scratch(p.total_scratch_capacity_rows, 256, 256, false, hp.g.buffer_bytes);
  ASSERT_GE(layout.bottom, floor);
  const planner::Mxfp8Homes homes = layout.homes();
  EXPECT_EQ(hp.peak[hp.g.num_slots], hp.g.buffer_bytes - floor) << "reset: all scratch free";
  ASSERT_EQ(planner::plan_mxfp8_forward(hp.g, shape_of(c, 1, 0), hp.state(), 0, 1, rows, true, homes, l.data()),
            PlanStatus::kOk);
  EXPECT_EQ(l[planner::kNeedRecompute], 1);
  EXPECT_EQ(l[planner::kSlot], -1);
  EXPECT_EQ(l[planner::kXCol], homes.x_col);
  EXPECT_TRUE(hp == empty);
  EXPECT_EQ(hp.peak[hp.g.num_slots], layout.bottom - floor) << "the static layout is the scratch peak";
  int64_t x = 0;
  ASSERT_EQ(planner::plan_mxfp8_backward(hp.g, shape_of(c, 1, 0), hp.state(), l.data(), kCallerX, homes, &x),
            PlanStatus::kOk);
  EXPECT_EQ(x, kCallerX);
  EXPECT_TRUE(hp == empty);
  EXPECT_EQ(hp.peak[hp.g.num_slots], layout.bottom - floor);
}

}  // namespace
}  // namespace dist_moe
