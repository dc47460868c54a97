// plan_memory on hand-computed cases: upstream's worked examples (reference §1.7 and the
// DistMoeMemoryPlanTest inventory), clamping, block-scaled padding, inference, VMM sections, and
// this project's symmetric windows.
#include <gtest/gtest.h>

#include "dist_moe/error.h"
#include "dist_moe/memory_plan.h"
#include "test_helpers.h"

namespace dist_moe {
namespace {

using test_helpers::make_config;

// upstream's _config: T=4, D=F=128, K=2, E=4, 2 layers per slot, device factor 1.0, VMM total 2.0.
Config small_config() {
  Config c = make_config(4, 128, 128, 2, 4, 2);
  c.device_scratch_capacity_factor = 1.0;
  c.vmm = VmmConfig{2.0, true};
  return c;
}

std::string error_of(const Config& c, int64_t ep) {
  try {
    plan_memory(c, ep);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(MemoryPlan, DerivesUpstreamSmallExample) {
  const MemoryPlan p = plan_memory(small_config(), 2);
  EXPECT_EQ(p.balanced_recv_rows, 8);
  EXPECT_EQ(p.device_scratch_capacity_rows, 8);
  EXPECT_EQ(p.total_scratch_capacity_rows, 16);  // topology cap 4*2*min(2,2) = 16
  EXPECT_EQ(p.saved_input_bytes_per_layer, 1024);
  EXPECT_EQ(p.device_scratch_bytes, 12288);  // 2048 + 4096 + 4096 + 2048 (D == F: no grad_h3 term)
  EXPECT_EQ(p.host_scratch_bytes, 12288);
  EXPECT_EQ(p.minimum_activation_slot_bytes, 2048);
  EXPECT_EQ(p.balanced_full_save_activation_slot_bytes, 16384);  // 2*(2048 + 4096 + 2048)
  EXPECT_EQ(p.maximum_useful_activation_slot_bytes, 28672);      // 2*(4096 + 8192 + 2048)
  EXPECT_FALSE(p.activation_slot_capacity_factor.has_value());
  EXPECT_EQ(p.activation_slot_bytes, 2048);
  EXPECT_EQ(p.total_activation_bytes, 2048);
  EXPECT_EQ(p.total_device_buffer_bytes, 14336);
  EXPECT_EQ(p.total_virtual_bytes, 26624);
  EXPECT_TRUE(p.uses_host_scratch());
}

TEST(MemoryPlan, ExplainMatchesUpstreamWorkedExample) {
  Config c = small_config();
  c.activation_slot_capacity_factor = 1.0;
  const MemoryPlan p = plan_memory(c, 2);
  EXPECT_EQ(p.activation_slot_bytes, 16384);
  EXPECT_EQ(p.total_device_buffer_bytes, 28672);
  EXPECT_EQ(p.total_virtual_bytes, 40960);
  const std::string expected =
      "Distributed MoE memory plan:\n"
      "  balanced/device/total rows: 8/8/16\n"
      "  device/total scratch capacity factors: 1/2\n"
      "  activation slots: 1 x 0.000 GiB (16,384 bytes) = 0.000 GiB (16,384 bytes) (balanced capacity factor 1)\n"
      "  device scratch: 0.000 GiB (12,288 bytes)\n"
      "  host overflow scratch: 0.000 GiB (12,288 bytes)\n"
      "  total device buffer: 0.000 GiB (28,672 bytes)\n"
      "  activation slot minimum/balanced full-save/maximum useful: 0.000 GiB (2,048 bytes) / 0.000 GiB (16,384 "
      "bytes) / 0.000 GiB (28,672 bytes)\n"
      "  virtual address range: 0.000 GiB (40,960 bytes); balanced routing fits without recompute; larger "
      "saved-state usage may recompute\n"
      "  activation slots are a soft limit (recompute on exhaustion); total scratch capacity is a hard limit\n";
  const std::string text = p.explain();
  ASSERT_GE(text.size(), expected.size());
  EXPECT_EQ(text.substr(0, expected.size()), expected);  // this project's window lines follow
  EXPECT_NE(text.find("symmetric windows per rank"), std::string::npos);
}

TEST(MemoryPlan, SlotCapacityModesAreIndependentOfScratch) {
  Config c = small_config();
  c.activation_slot_bytes = 2049;  // minimum + 1 aligns up
  MemoryPlan p = plan_memory(c, 2);
  EXPECT_EQ(p.activation_slot_bytes, 2176);
  c.num_activation_slots = 3;
  EXPECT_EQ(plan_memory(c, 2).total_activation_bytes, 6528);

  c = small_config();
  c.activation_slot_capacity_factor = 0.0;
  EXPECT_EQ(plan_memory(c, 2).activation_slot_bytes, 2048);
  c.activation_slot_capacity_factor = 1.0;
  EXPECT_EQ(plan_memory(c, 2).activation_slot_bytes, 16384);
  c.activation_slot_capacity_factor = 1.5;
  EXPECT_EQ(plan_memory(c, 2).activation_slot_bytes, 2048 + 21504);

  // A larger device factor changes device scratch but not the slot.
  Config d = c;
  d.device_scratch_capacity_factor = 2.0;
  const MemoryPlan a = plan_memory(c, 2), b = plan_memory(d, 2);
  EXPECT_EQ(a.activation_slot_bytes, b.activation_slot_bytes);
  EXPECT_NE(a.device_scratch_bytes, b.device_scratch_bytes);
  EXPECT_EQ(b.device_scratch_bytes, 24576);
  EXPECT_EQ(b.host_scratch_bytes, 0);
}

TEST(MemoryPlan, ExactSlotBytesBelowMinimumAreRejected) {
  Config c = small_config();
  c.activation_slot_bytes = 1024;
  const std::string e = error_of(c, 2);
  EXPECT_NE(e.find("activation_slot_bytes=1024 is below the minimum required 2048 bytes"), std::string::npos) << e;
}

TEST(MemoryPlan, MutuallyExclusiveSlotControlsAreRejected) {
  Config c = small_config();
  c.activation_slot_bytes = 4096;
  c.activation_slot_capacity_factor = 1.0;
  EXPECT_NE(error_of(c, 2).find("mutually exclusive"), std::string::npos);
}

TEST(MemoryPlan, HostOverflowMustExtendDeviceCapacity) {
  Config c = small_config();
  c.device_scratch_capacity_factor = 2.0;
  c.vmm = VmmConfig{1.0, true};
  EXPECT_NE(error_of(c, 2).find("must cover at least the device_scratch_capacity_factor after EP-size clamping"),
            std::string::npos);
}

TEST(MemoryPlan, FactorsAreClampedToEpSize) {
  Config c = small_config();
  c.device_scratch_capacity_factor = 4.0;
  c.vmm = VmmConfig{16.0, true};
  const MemoryPlan p = plan_memory(c, 2);
  EXPECT_DOUBLE_EQ(p.device_scratch_capacity_factor, 2.0);
  EXPECT_DOUBLE_EQ(p.total_scratch_capacity_factor, 2.0);
  EXPECT_EQ(p.device_scratch_capacity_rows, 16);
  EXPECT_EQ(p.total_scratch_capacity_rows, 16);
  ASSERT_FALSE(p.warnings.empty());
  EXPECT_NE(p.warnings[0].find("capped to 2"), std::string::npos);
}

TEST(MemoryPlan, TopologyMaximumCapsRows) {
  // K > E_local: a token sends at most E_local rows to one rank, so the cap is T*R*min(K, L).
  Config c = small_config();
  c.num_experts = 8;
  c.top_k = 6;
  c.vmm = VmmConfig{8.0, true};
  const MemoryPlan p = plan_memory(c, 8);  // L = 1: at most T*R*1 = 32 rows
  EXPECT_EQ(p.balanced_recv_rows, 24);
  EXPECT_EQ(p.total_scratch_capacity_rows, 32);
}

TEST(MemoryPlan, EpSizeMustBePositiveAndDivideExperts) {
  EXPECT_NE(error_of(small_config(), 0).find("ep_size must be positive, got 0"), std::string::npos);
  EXPECT_NE(error_of(small_config(), 3).find("num_experts=4 must be divisible by ep_size=3"), std::string::npos);
}

TEST(MemoryPlan, PrefetchPolicyDoesNotChangeThePlan) {
  Config a = small_config(), b = small_config();
  b.vmm->prefetch = false;
  EXPECT_EQ(plan_memory(a, 2).explain(), plan_memory(b, 2).explain());
}

TEST(MemoryPlan, InferenceHasNoSlots) {
  Config c = small_config();
  c.inference = true;
  c.num_activation_slots = 0;
  const MemoryPlan p = plan_memory(c, 2);
  EXPECT_EQ(p.num_activation_slots, 0);
  EXPECT_EQ(p.activation_slot_bytes, 0);
  EXPECT_EQ(p.total_activation_bytes, 0);
  EXPECT_EQ(p.minimum_activation_slot_bytes, 0);
  EXPECT_EQ(p.balanced_full_save_activation_slot_bytes, 0);
  EXPECT_EQ(p.maximum_useful_activation_slot_bytes, 0);
  EXPECT_EQ(p.total_device_buffer_bytes, p.device_scratch_bytes);
  EXPECT_EQ(p.device_scratch_bytes, 2048 + 4096 + 2048);  // x_gathered + h1 + h2 at 8 rows
  EXPECT_EQ(p.host_scratch_bytes, 2 * 8192 - 8192);
  const std::string text = p.explain();
  EXPECT_NE(text.find("activation slots: 0 slot(s)"), std::string::npos);
  EXPECT_NE(text.find("scratch-only inference; no saved activations"), std::string::npos);
  EXPECT_EQ(text.find("across"), std::string::npos);
}

TEST(MemoryPlan, ExplainReportsSectionsAndBounds) {
  const std::string text = plan_memory(small_config(), 2).explain();
  for (const char* s : {"activation slots", "device scratch", "host overflow scratch", "minimum", "maximum useful",
                        "all layers recompute at the minimum budget", "soft limit", "hard limit"})
    EXPECT_NE(text.find(s), std::string::npos) << s;
  Config c = small_config();
  c.activation_slot_bytes = 28672;
  EXPECT_NE(plan_memory(c, 2).explain().find("all executable routing fits without recompute"), std::string::npos);
  c.activation_slot_bytes = 8192;
  EXPECT_NE(plan_memory(c, 2).explain().find("may avoid recompute for some layers"), std::string::npos);
  c.activation_slot_bytes = 40960;
  const MemoryPlan big = plan_memory(c, 2);
  ASSERT_FALSE(big.warnings.empty());  // above the maximum useful size
  EXPECT_NE(big.warnings.back().find("exceeds the maximum useful"), std::string::npos);
}

TEST(MemoryPlan, BlockScaledRowsArePaddedPerExpert) {
  Config c = small_config();
  c.max_num_local_input_tokens = 256;
  c.block_scaled = BlockScaledConfig{};
  MemoryPlan p = plan_memory(c, 2);
  EXPECT_EQ(p.device_scratch_capacity_rows, 640);   // floor((512 + 2*127)/128)*128
  EXPECT_EQ(p.total_scratch_capacity_rows, 1152);   // floor((1024 + 2*127)/128)*128
  EXPECT_GT(p.total_activation_bytes, 0);
  EXPECT_GT(p.host_scratch_bytes, 0);

  c = small_config();
  c.max_num_local_input_tokens = 100;
  c.num_experts = 8;
  c.device_scratch_capacity_factor = 1.5;
  c.vmm.reset();
  c.block_scaled = BlockScaledConfig{};
  p = plan_memory(c, 2);
  EXPECT_EQ(p.balanced_recv_rows, 200);            // balanced rows are never padded
  EXPECT_EQ(p.device_scratch_capacity_rows, 768);  // floor((300 + 4*127)/128)*128
  EXPECT_EQ(plan_max_recv_rows(100, 2, 1.5, 4, 2, 1), 300);  // BF16: no padding
}

TEST(MemoryPlan, LargeModelBf16MatchesUpstreamTable) {
  // T=4096, D=4096, F=14336, K=8, E=128, 32 layers, device 1.5, VMM 16, EP16 (reference §1.7).
  Config c = make_config(4096, 4096, 14336, 8, 128, 32);
  c.device_scratch_capacity_factor = 1.5;
  c.vmm = VmmConfig{16.0, true};
  MemoryPlan p = plan_memory(c, 16);
  EXPECT_EQ(p.balanced_recv_rows, 32768);
  EXPECT_EQ(p.device_scratch_capacity_rows, 49152);
  EXPECT_EQ(p.total_scratch_capacity_rows, 524288);
  EXPECT_EQ(p.total_activation_bytes, 1073741824LL);
  EXPECT_EQ(p.device_scratch_bytes, 7449083904LL);
  EXPECT_EQ(p.host_scratch_bytes, 72007811072LL);
  EXPECT_EQ(p.total_device_buffer_bytes, 8522825728LL);
  c.activation_slot_bytes = 16LL << 30;
  p = plan_memory(c, 16);
  EXPECT_EQ(p.total_activation_bytes, 17179869184LL);
  EXPECT_EQ(p.total_device_buffer_bytes, 24628953088LL);
  c.activation_slot_bytes.reset();
  c.activation_slot_capacity_factor = 1.0;
  p = plan_memory(c, 16);
  EXPECT_EQ(p.total_activation_bytes, 77309411328LL);
  EXPECT_EQ(p.total_device_buffer_bytes, 84758495232LL);
}

// The same configuration in MXFP8 (upstream's test_documented_large_model_memory_plans and its
// docs/memory_planner.md table). The table holds for both pipelines: at D=4096, F=14336 the dxy
// row bundle is the largest row-quant operand, so Mega's adjacent x/h2 sub-slots fit inside it.
TEST(MemoryPlan, LargeModelMxfp8MatchesUpstreamTable) {
  for (BlockScaledPipeline pipeline : {BlockScaledPipeline::kStaged, BlockScaledPipeline::kMega}) {
    SCOPED_TRACE(to_string(pipeline));
    Config c = make_config(4096, 4096, 14336, 8, 128, 32);
    c.device_scratch_capacity_factor = 1.5;
    c.vmm = VmmConfig{16.0, true};
    c.block_scaled = BlockScaledConfig{};
    c.block_scaled->pipeline = pipeline;
    MemoryPlan p = plan_memory(c, 16);
    EXPECT_EQ(p.balanced_recv_rows, 32768);
    EXPECT_EQ(p.device_scratch_capacity_rows, 50048);   // floor((49152 + 8*127)/128)*128
    EXPECT_EQ(p.total_scratch_capacity_rows, 525184);   // floor((524288 + 8*127)/128)*128
    EXPECT_EQ(p.minimum_activation_slot_bytes, 1073741824LL);
    EXPECT_EQ(p.balanced_full_save_activation_slot_bytes, 90839973888LL);
    EXPECT_EQ(p.total_activation_bytes, 1073741824LL);
    EXPECT_EQ(p.device_scratch_bytes, 8561811456LL);
    EXPECT_EQ(p.host_scratch_bytes, 81282465792LL);
    EXPECT_EQ(p.total_device_buffer_bytes, 9635553280LL);
    c.activation_slot_bytes = 16LL << 30;
    p = plan_memory(c, 16);
    EXPECT_EQ(p.total_activation_bytes, 17179869184LL);
    EXPECT_EQ(p.device_scratch_bytes, 8561811456LL);
    EXPECT_EQ(p.host_scratch_bytes, 81282465792LL);
    EXPECT_EQ(p.total_device_buffer_bytes, 25741680640LL);
    c.activation_slot_bytes.reset();
    c.activation_slot_capacity_factor = 1.0;
    p = plan_memory(c, 16);
    EXPECT_EQ(p.total_activation_bytes, 90839973888LL);
    EXPECT_EQ(p.device_scratch_bytes, 8561811456LL);
    EXPECT_EQ(p.host_scratch_bytes, 81282465792LL);
    EXPECT_EQ(p.total_device_buffer_bytes, 99401785344LL);
  }
}

// Upstream's block-scaled training formulas on the small padded case (T=100, D=F=128, K=2, E=8,
// f=1.5, ep2: 768 device rows). Row bundle(R, C) = A(R*C) + A(R*4*C/32); column bundle(R, C) =
// A(R*C) + A(C*ceil(R/32)).
TEST(MemoryPlan, BlockScaledTrainingBytesFollowUpstreamFormulas) {
  Config c = make_config(100, 128, 128, 2, 8, 2);
  c.device_scratch_capacity_factor = 1.5;
  c.block_scaled = BlockScaledConfig{};
  MemoryPlan p = plan_memory(c, 2);
  EXPECT_EQ(p.device_scratch_capacity_rows, 768);
  // row-quant slot = dxy row(768, 256) = 196608 + 24576 (x and h2 rows are 110592 each);
  // x col 101376 + h1 393216 + h2 col 101376 + grad_h3 col 101376 + grad_h2 196608 + dxy col 202752.
  EXPECT_EQ(p.device_scratch_bytes, 221184 + 101376 + 393216 + 101376 + 101376 + 196608 + 202752);
  EXPECT_EQ(p.device_scratch_bytes, 1317888);
  EXPECT_EQ(p.host_scratch_bytes, 0);
  EXPECT_EQ(p.saved_input_bytes_per_layer, 25600);  // A(100*128*2)
  EXPECT_EQ(p.minimum_activation_slot_bytes, 51200);
  // saved_full(R) = x col + h1 + h2 col + h3: at the padded balanced 640 rows 2*(84480 + 327680 +
  // 84480 + 51200), at 768 rows 2*(101376 + 393216 + 101376 + 51200).
  EXPECT_EQ(p.balanced_full_save_activation_slot_bytes, 1095680);
  EXPECT_EQ(p.maximum_useful_activation_slot_bytes, 1294336);

  // D > 2F makes x the largest row operand: staged shares one max-size slot, Mega adds h2's
  // adjacent sub-slot (row(384, 128) = 49152 + 6144 = 55296 more bytes).
  c = make_config(128, 512, 128, 2, 4, 1);
  c.vmm = VmmConfig{2.0, true};
  c.block_scaled = BlockScaledConfig{};
  const MemoryPlan staged = plan_memory(c, 2);
  c.block_scaled->pipeline = BlockScaledPipeline::kMega;
  const MemoryPlan mega = plan_memory(c, 2);
  EXPECT_EQ(staged.device_scratch_capacity_rows, 384);
  EXPECT_EQ(staged.total_scratch_capacity_rows, 640);
  EXPECT_EQ(staged.device_scratch_bytes, 1073664);
  EXPECT_EQ(staged.host_scratch_bytes, 715776);
  EXPECT_EQ(mega.device_scratch_bytes, 1073664 + 55296);
  EXPECT_EQ(mega.host_scratch_bytes, 752640);
  EXPECT_EQ(staged.balanced_full_save_activation_slot_bytes, mega.balanced_full_save_activation_slot_bytes);
  EXPECT_EQ(staged.balanced_full_save_activation_slot_bytes, 712192);
}

// Block-scaled inference: row-quant scratch (max of the x and h2 row bundles when staged, their sum
// for Mega) + BF16 h1. T=128, D=256, F=512, K=2, E=4, ep2: 384 device rows, 640 total rows.
TEST(MemoryPlan, BlockScaledInferenceBytesFollowUpstreamFormulas) {
  struct Case {
    BlockScaledFormat format;
    BlockScaledPipeline pipeline;
    int64_t device, host;
  };
  // MXFP8 rows: x = 98304 + 12288, h2 = 196608 + 24576. NVFP4 rows (packed E2M1, 4x E4M3 scales,
  // FP32 inverse token scale per row): x = 49152 + 26112, h2 = 98304 + 50688. h1 = 786432.
  // These NVFP4 calls reach 128 rows per local expert, so Hopper's expanded token rows come on top
  // of upstream's terms (Nvfp4ExpandedTokenRows below): FP16 [rows, max(D, F)] + FP32 [rows],
  // 393216 + 1536 at the 384 device rows, 655360 + 2560 at the 640 total rows (+263168 host).
  const int64_t expanded = 393216 + 1536, expanded_host = 655360 + 2560 - expanded;
  const Case cases[] = {
      {BlockScaledFormat::kMXFP8_E4M3, BlockScaledPipeline::kStaged, 221184 + 786432, 671744},
      {BlockScaledFormat::kMXFP8_E4M3, BlockScaledPipeline::kMega, 110592 + 221184 + 786432, 745472},
      {BlockScaledFormat::kNVFP4, BlockScaledPipeline::kStaged, 148992 + 786432 + expanded, 623616 + expanded_host},
      {BlockScaledFormat::kNVFP4, BlockScaledPipeline::kMega, 75264 + 148992 + 786432 + expanded,
       673792 + expanded_host},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(to_string(k.pipeline)) + (k.format == BlockScaledFormat::kNVFP4 ? " nvfp4" : " mxfp8"));
    Config c = make_config(128, 256, 512, 2, 4, 1);
    c.inference = true;
    c.num_activation_slots = 0;
    c.vmm = VmmConfig{2.0, true};
    c.block_scaled = BlockScaledConfig{};
    c.block_scaled->format = k.format;
    c.block_scaled->pipeline = k.pipeline;
    const MemoryPlan p = plan_memory(c, 2);
    EXPECT_EQ(p.device_scratch_capacity_rows, 384);
    EXPECT_EQ(p.total_scratch_capacity_rows, 640);
    EXPECT_EQ(p.device_scratch_bytes, k.device);
    EXPECT_EQ(p.host_scratch_bytes, k.host);
    EXPECT_EQ(p.total_device_buffer_bytes, k.device);
  }
}

// NVFP4 inference expands its tokens to FP16 rows (scratch beyond upstream's plan) exactly when a
// call's token rows -- T*K*f, without padding -- reach 64 per local expert or stay at or below 12
// (decode).
TEST(MemoryPlan, Nvfp4ExpandedTokenRows) {
  Config c = make_config(128, 256, 512, 2, 4, 1);
  c.inference = true;
  c.num_activation_slots = 0;
  c.block_scaled = BlockScaledConfig{};
  c.block_scaled->format = BlockScaledFormat::kNVFP4;
  // ep2, f = 1: L = 2, rows min(128 * 2, 128 * 2 * 2) = 256 >= 2 * 64.
  EXPECT_TRUE(nvfp4_expands_token_rows(c, 2, 1.0));
  c.max_num_local_input_tokens = 64;  // 128 rows: 64 per local expert, the threshold
  EXPECT_TRUE(nvfp4_expands_token_rows(c, 2, 1.0));
  c.max_num_local_input_tokens = 63;  // 126 rows (padded to 32 per expert they would be 128)
  EXPECT_FALSE(nvfp4_expands_token_rows(c, 2, 1.0));
  EXPECT_TRUE(nvfp4_expands_token_rows(c, 2, 2.0));  // the total factor doubles them
  c.max_num_local_input_tokens = 13;  // 26 rows: 13 per local expert, past the decode bound
  EXPECT_FALSE(nvfp4_expands_token_rows(c, 2, 1.0));
  c.max_num_local_input_tokens = 12;  // 24 rows: 12 per local expert, decode-sized
  EXPECT_TRUE(nvfp4_expands_token_rows(c, 2, 1.0));
  c.max_num_local_input_tokens = 63;
  // Without expansion the plan is upstream's: the larger row bundle (h2: A(R * 256) + A(R * 128 +
  // R * 4)) plus h1 = A(R * 2048) at the R device rows.
  const MemoryPlan small = plan_memory(c, 2);
  EXPECT_FALSE(nvfp4_expands_token_rows(c, 2, small.total_scratch_capacity_factor));
  const int64_t R = small.device_scratch_capacity_rows;
  EXPECT_EQ(small.device_scratch_bytes, align_up(R * 256) + align_up(R * 128 + R * 4) + align_up(R * 2048));
  // MXFP8 and training never expand.
  c.max_num_local_input_tokens = 128;
  c.block_scaled->format = BlockScaledFormat::kMXFP8_E4M3;
  EXPECT_FALSE(nvfp4_expands_token_rows(c, 2, 1.0));
  c.block_scaled->format = BlockScaledFormat::kNVFP4;
  c.inference = false;
  EXPECT_FALSE(nvfp4_expands_token_rows(c, 2, 1.0));
}

// Decode-sized tiles (the staged 16-token swap-AB tile, Mega's decode form) exactly when a block-scaled
// inference call's token rows stay at or below 12 per local expert; never for training or BF16.
TEST(MemoryPlan, DecodeTilesByRoutedRowsPerExpert) {
  Config c = make_config(12, 256, 512, 2, 4, 1);  // ep2: L = 2, 24 rows = 12 per local expert
  c.inference = true;
  c.num_activation_slots = 0;
  c.block_scaled = BlockScaledConfig{};
  c.block_scaled->format = BlockScaledFormat::kMXFP8_E4M3;
  EXPECT_TRUE(runs_decode_tiles(c, 2, 1.0));
  EXPECT_FALSE(runs_decode_tiles(c, 2, 1.5));  // the total factor: 36 rows
  c.max_num_local_input_tokens = 13;
  EXPECT_FALSE(runs_decode_tiles(c, 2, 1.0));
  EXPECT_TRUE(runs_decode_tiles(c, 1, 1.0));  // ep1: L = 4, the same 26 rows are 6.5 per expert
  c.max_num_local_input_tokens = 12;
  c.block_scaled->format = BlockScaledFormat::kNVFP4;
  EXPECT_TRUE(runs_decode_tiles(c, 2, 1.0));
  EXPECT_EQ(nvfp4_expands_token_rows(c, 2, 1.0), true);  // the decode half of the expansion rule
  c.inference = false;
  EXPECT_FALSE(runs_decode_tiles(c, 2, 1.0));
  c.inference = true;
  c.block_scaled.reset();
  EXPECT_FALSE(runs_decode_tiles(c, 2, 1.0));
}

TEST(MemoryPlan, VmmSectionsResolveWithGranularity) {
  Config c = small_config();
  c.activation_slot_capacity_factor = 1.0;
  const int64_t G = 2 << 20;
  const MemoryPlan p = plan_memory(c, 2, PlanOptions{G});
  ASSERT_TRUE(p.vmm_granularity_bytes.has_value());
  EXPECT_EQ(p.vmm_device_prefix_bytes, G);
  EXPECT_EQ(p.vmm_host_section_bytes, G);
  EXPECT_EQ(p.vmm_device_scratch_section_bytes, G);
  // Three granularity-aligned sections; no allocator rounding (we map them ourselves).
  EXPECT_EQ(p.total_virtual_bytes, 3 * G);
  EXPECT_EQ(p.vmm_padding_bytes, 3 * G - 16384 - 12288 - 12288);
  EXPECT_NE(p.explain().find("mapped device/host/device sections"), std::string::npos);
  // Without host scratch nothing is resolved.
  Config no_host = c;
  no_host.vmm = VmmConfig{1.0, true};
  EXPECT_FALSE(plan_memory(no_host, 2, PlanOptions{G}).vmm_granularity_bytes.has_value());
}

TEST(MemoryPlan, SymmetricWindowsAreByteExact) {
  const MemoryPlan p = plan_memory(small_config(), 2);
  EXPECT_EQ(p.routing_id_dtype, DType::kInt16);
  EXPECT_EQ(p.routing_window_bytes, 512);   // 2 slots of A(128 + 4*2*2)
  EXPECT_EQ(p.dispatch_window_bytes, 2048);  // 4*2*128*2
  EXPECT_EQ(p.combine_window_bytes, 2048);
  EXPECT_EQ(p.signal_window_bytes, 1152);    // A(1024 + 4*4)
  EXPECT_EQ(p.rows_window_bytes, 128);       // A(4*2)
  EXPECT_EQ(p.total_symmetric_bytes, 512 + 2048 + 2048 + 1152 + 128);
  Config many = small_config();
  many.num_experts = 65536;
  const MemoryPlan q = plan_memory(many, 2);
  EXPECT_EQ(q.routing_id_dtype, DType::kInt32);
  EXPECT_EQ(q.routing_window_bytes, 512);  // 2 slots of A(128 + 4*2*4) = A(160)
}

TEST(MemoryPlan, FormatBytesMatchesPythonFormatting) {
  EXPECT_EQ(format_bytes(0), "0.000 GiB (0 bytes)");
  EXPECT_EQ(format_bytes(16384), "0.000 GiB (16,384 bytes)");
  EXPECT_EQ(format_bytes(1073741824LL), "1.000 GiB (1,073,741,824 bytes)");
  EXPECT_EQ(format_bytes(77309411328LL), "72.000 GiB (77,309,411,328 bytes)");
}

}  // namespace
}  // namespace dist_moe
