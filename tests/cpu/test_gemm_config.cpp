// The grouped-GEMM heuristic (src/core/gemm_config.cpp): host logic over host-known sizes, so its
// picks are pinned here, in CI. Each expectation is a measured pick (docs/perf.md, GEMM section);
// a heuristic change that moves one must come with its measurement and update the test.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "core/env_knobs.h"
#include "dist_moe/grouped_gemm_config.h"

namespace dist_moe {
namespace {

constexpr int kSms = 132;  // H100/H200 SXM

GroupedGemmProblem problem(GroupedGemmOp op, int64_t rows, int64_t n, int64_t k, int64_t e_local = 128,
                           DType out = DType::kBFloat16) {
  GroupedGemmProblem p;
  p.op = op;
  p.m_capacity = rows;
  p.n = n;
  p.k = k;
  p.e_local = e_local;
  p.out_dtype = out;
  return p;
}

GroupedGemmConfig pick(const GroupedGemmProblem& p) { return select_grouped_gemm_config(p, kSms); }

// Neither DMOE_GEMM_LEGACY nor DMOE_GEMM_EXPERIMENTAL may be set for the default picks.
bool defaults_in_effect() { return !grouped_gemm_experimental_requested() && !core::env_flag("DMOE_GEMM_LEGACY"); }

// FPROP (plain and SwiGLU), DGRAD, and WGRAD's cooperative 128x256 TMA-store kernel with FP32
// output or accumulating BF16 use the dynamic schedule (G9, G13, G17, G21); BF16 WGRAD that
// overwrites stays static; clusters are never picked (G15).
TEST(GemmConfig, DefaultSchedulesAreTheMeasuredOnes) {
  if (!defaults_in_effect()) GTEST_SKIP() << "a DMOE_GEMM_* override is set";
  const GroupedGemmOp ops[] = {GroupedGemmOp::kFprop, GroupedGemmOp::kFpropSwiglu, GroupedGemmOp::kDgrad,
                               GroupedGemmOp::kWgrad};
  for (GroupedGemmOp op : ops) {
    for (int64_t rows : {int64_t{1024}, int64_t{32768}}) {
      const bool w2 = op == GroupedGemmOp::kFprop;
      const GroupedGemmConfig c = pick(problem(op, rows, w2 ? 7168 : 4096, w2 ? 2048 : 7168));
      SCOPED_TRACE(std::string(to_string(op)) + " rows " + std::to_string(rows) + " -> " + c.name());
      if (op == GroupedGemmOp::kWgrad) {
        EXPECT_TRUE(c.tma_store);
        EXPECT_FALSE(c.pingpong);
        EXPECT_FALSE(c.dynamic_schedule);  // BF16, written
      } else if (c.swap_ab) {  // 1024 rows over 128 experts is decode-sized: swap-AB, static
        EXPECT_FALSE(c.dynamic_schedule);
      } else {
        EXPECT_TRUE(c.dynamic_schedule);
      }
      EXPECT_EQ(c.cluster_m, 1);
    }
  }
  for (const bool fp32 : {true, false})
    for (const bool accumulate : {false, true}) {
      if (!fp32 && !accumulate) continue;  // covered above
      GroupedGemmProblem p =
          problem(GroupedGemmOp::kWgrad, 32768, 4096, 7168, 128, fp32 ? DType::kFloat32 : DType::kBFloat16);
      p.accumulate = accumulate;
      const GroupedGemmConfig c = pick(p);
      SCOPED_TRACE(std::string(fp32 ? "fp32" : "bf16") + (accumulate ? " accumulating" : "") + " -> " + c.name());
      EXPECT_TRUE(c.dynamic_schedule);
      EXPECT_TRUE(c.tma_store);
      EXPECT_EQ(c.cluster_m, 1);
    }
}

// WGRAD: cooperative 128x256 with TMA stores even at dsv3's 4 k blocks per tile (G12); ping-pong
// 128x128 only for an output width that is an odd multiple of 128.
TEST(GemmConfig, WgradPicksCooperativeTmaForShortContractions) {
  if (!defaults_in_effect()) GTEST_SKIP() << "a DMOE_GEMM_* override is set";
  for (DType out : {DType::kBFloat16, DType::kFloat32}) {
    GroupedGemmProblem p = problem(GroupedGemmOp::kWgrad, 32768, 4096, 7168, 128, out);  // dsv3_prefill, EP2
    GroupedGemmConfig c = pick(p);
    SCOPED_TRACE(c.name());
    EXPECT_EQ(c.block_n, 256);
    EXPECT_TRUE(c.tma_store);
    EXPECT_FALSE(c.pingpong);
    p.k = 384;  // an odd multiple of 128
    c = pick(p);
    EXPECT_TRUE(c.pingpong);
    EXPECT_EQ(c.block_n, 128);
  }
}

// Decode (at most 64 rows per expert on average, no gather): swap-AB, weights on M, 32 tokens on N.
TEST(GemmConfig, DecodeTakesSwapAB) {
  if (!defaults_in_effect()) GTEST_SKIP() << "a DMOE_GEMM_* override is set";
  for (GroupedGemmOp op : {GroupedGemmOp::kFprop, GroupedGemmOp::kFpropSwiglu}) {
    GroupedGemmProblem p = problem(op, 1024 + 128 * 16, op == GroupedGemmOp::kFprop ? 7168 : 4096, 2048);
    GroupedGemmConfig c = pick(p);
    SCOPED_TRACE(c.name());
    EXPECT_TRUE(c.swap_ab);
    EXPECT_EQ(c.block_m, 256);
    EXPECT_EQ(c.block_n, 32);
    EXPECT_FALSE(c.dynamic_schedule);  // every swap-AB tile costs the same
    p.gather = true;                   // the gather producer is compiled for 128-row tiles only
    c = pick(p);
    EXPECT_FALSE(c.swap_ab);
    EXPECT_TRUE(c.gather);
  }
}

// FPROP W2: 128x256 TMA stores for long contractions (dsv3, mixtral), also when the rows are
// scattered (fused combine), ping-pong 128x128 when the contraction is short (qwen3: 12 k blocks),
// 128x128 when an output width is an odd multiple of 128, and the gather producer's 128x256 tile.
TEST(GemmConfig, FpropTiles) {
  if (!defaults_in_effect()) GTEST_SKIP() << "a DMOE_GEMM_* override is set";
  GroupedGemmConfig c = pick(problem(GroupedGemmOp::kFprop, 32768, 7168, 2048));  // dsv3 W2
  EXPECT_EQ(c.name(), "128x256x64_s4_tma_dyn");
  c = pick(problem(GroupedGemmOp::kFprop, 65536, 2048, 768, 64));  // qwen3 W2
  EXPECT_EQ(c.name(), "128x128x64_s6_pp_tma_dyn");
  GroupedGemmProblem scatter = problem(GroupedGemmOp::kFprop, 32768, 7168, 2048);
  scatter.scatter = true;
  EXPECT_EQ(pick(scatter).name(), "128x256x64_s4_tma_dyn");
  scatter.k = 768;  // qwen3 W2: short contraction, ping-pong with or without scatter
  scatter.n = 2048;
  EXPECT_EQ(pick(scatter).name(), "128x128x64_s6_pp_tma_dyn");
  EXPECT_EQ(pick(problem(GroupedGemmOp::kFprop, 32768, 7168 - 128, 2048)).block_n, 128);
  GroupedGemmProblem gather = problem(GroupedGemmOp::kFprop, 32768, 7168, 2048);
  gather.gather = true;
  c = pick(gather);
  EXPECT_EQ(c.block_n, 256);
  EXPECT_TRUE(c.gather);
  // Fewer 128x256 tiles than SMs: the smaller tile keeps every SM busy.
  EXPECT_EQ(pick(problem(GroupedGemmOp::kFprop, 512, 1024, 4096, 4)).block_n, 128);
}

// W13 with the SwiGLU epilogue: cooperative 128x256 at every D (G34, G35), with TMA stores unless
// the rows are gathered.
TEST(GemmConfig, SwigluTiles) {
  if (!defaults_in_effect()) GTEST_SKIP() << "a DMOE_GEMM_* override is set";
  // dsv3_prefill, mixtral, qwen3_30b: cooperative 128x256 everywhere (docs/perf.md G35).
  using Shape = std::array<int64_t, 4>;  // rows, 2F, D, E_local
  for (const auto& [rows, n, d, e] : {Shape{32768, 4096, 7168, 128}, Shape{32768, 28672, 4096, 4},
                                      Shape{65536, 1536, 2048, 64}}) {
    GroupedGemmProblem p = problem(GroupedGemmOp::kFpropSwiglu, rows, n, d, e);
    EXPECT_EQ(pick(p).name(), "128x256x64_s4_tma_dyn") << "D = " << d;
    p.gather = true;
    EXPECT_EQ(pick(p).name(), "128x256x64_s4_dyn_gather") << "D = " << d;
  }
}

// Too many experts for the TMA staging next to the scheduler tables: WGRAD falls back to the
// deep-staging ping-pong kernel (dynamic when accumulating or FP32, G36), the M-grouped ops to
// padded staging; with tables too large even for that, the padded kernels.
TEST(GemmConfig, ManyExpertsFallBack) {
  if (!defaults_in_effect()) GTEST_SKIP() << "a DMOE_GEMM_* override is set";
  GroupedGemmProblem wgrad = problem(GroupedGemmOp::kWgrad, 32768, 4096, 7168, 128);
  EXPECT_EQ(pick(wgrad).name(), "128x256x64_s4_tma");
  wgrad.e_local = 256;  // dsv3_prefill, EP1
  EXPECT_EQ(pick(wgrad).name(), "128x128x64_s4_pp_tma");
  wgrad.accumulate = true;
  EXPECT_EQ(pick(wgrad).name(), "128x128x64_s4_pp_tma_dyn");
  wgrad.accumulate = false;
  wgrad.out_dtype = DType::kFloat32;
  EXPECT_EQ(pick(wgrad).name(), "128x128x64_s4_pp_tma_dyn");
  wgrad.e_local = 4096;
  EXPECT_FALSE(pick(wgrad).tma_store) << pick(wgrad).name();
  const GroupedGemmConfig fprop = pick(problem(GroupedGemmOp::kFprop, 32768, 7168, 2048, 256));
  EXPECT_EQ(fprop.name(), "128x256x64_s4_dyn");
  // FP8 blockwise: one stage fewer past ~220 experts (the tables need 8 bytes per expert; at 256
  // the preferred tiles are 280 bytes over), for FPROP, W13 and DGRAD, whatever the width.
  GroupedGemmProblem fp8 = problem(GroupedGemmOp::kFprop, 32768, 7168, 2048, 220);
  fp8.a_format = kFp8BlockwiseRows;
  fp8.b_format = kFp8BlockwiseWeight;
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s4_tma_dyn");
  fp8.e_local = 256;
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s3_tma_dyn");
  fp8.e_local = 1024;
  fp8.m_capacity = 1 << 20;  // prefill-sized for 1024 experts
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s3_tma_dyn");
  fp8.n = 7168 + 128;
  EXPECT_EQ(pick(fp8).name(), "128x128x128_s5_tma_dyn");
  fp8.e_local = 219;  // (the 128x128 tile's six stages fit up to 219 experts, 128x256's four up to 223)
  EXPECT_EQ(pick(fp8).name(), "128x128x128_s6_tma_dyn");
  fp8.op = GroupedGemmOp::kFpropSwiglu;
  fp8.n = 4096;
  fp8.e_local = 256;
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s3_tma_dyn");
  fp8.op = GroupedGemmOp::kDgrad;
  fp8.b_format = kFp8BlockwiseWeightT;
  fp8.k = 7168;
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s3_tma_dyn");
}

TEST(GemmConfig, NamesListEveryOption) {
  GroupedGemmConfig c;
  EXPECT_EQ(c.name(), "128x256x64_s4");
  c.block_n = 128;
  c.stages = 6;
  c.cluster_m = 2;
  c.pingpong = true;
  c.tma_store = true;
  c.dynamic_schedule = true;
  EXPECT_EQ(c.name(), "128x128x64_s6_c2_pp_tma_dyn");
  GroupedGemmConfig d;
  d.block_m = 256;
  d.block_n = 32;
  d.stages = 5;
  d.swap_ab = true;
  EXPECT_EQ(d.name(), "256x32x64_s5_swapab");
  GroupedGemmConfig q;
  q.block_n = 128;
  q.block_k = 128;
  q.mxfp8_dequant = true;
  EXPECT_EQ(q.name(), "128x128x128_s4_dq");
  EXPECT_STREQ(to_string(GroupedGemmOp::kFpropSwiglu), "w13_fprop_swiglu");
}

// Operand formats: the default is BF16 without scales (every compiled kernel's), names are
// test-name safe, and the k block is one 128-byte row of the A format (64 BF16, 128 FP8).
TEST(GemmConfig, OperandFormats) {
  const GroupedGemmProblem p;
  EXPECT_EQ(p.a_format, OperandFormat{});
  EXPECT_EQ(p.b_format.data, DType::kBFloat16);
  EXPECT_EQ(p.b_format.scale, ScaleKind::kNone);
  EXPECT_EQ(p.b_format.layout, OperandLayout::kRowMajor);
  EXPECT_EQ(p.a_format.name(), "bf16");
  OperandFormat mx{DType::kFloat8E4M3, ScaleKind::kE8M0_32x32, OperandLayout::kRowMajor};
  EXPECT_EQ(mx.name(), "e4m3_e8m0_32x32");
  EXPECT_NE(mx, OperandFormat{});
  OperandFormat nv{DType::kFloat4E2M1x2, ScaleKind::kE4M3_1x16_FP32Global, OperandLayout::kColumnMajor};
  EXPECT_EQ(nv.name(), "e2m1x2_e4m3_1x16_fp32g_col");
  EXPECT_STREQ(to_string(ScaleKind::kFP32_128x128), "fp32_128x128");
  GroupedGemmProblem fp8 = problem(GroupedGemmOp::kFprop, 32768, 7168, 2048);
  EXPECT_EQ(pick(fp8).block_k, 64);
  fp8.a_format = {DType::kFloat8E4M3, ScaleKind::kFP32_1x128, OperandLayout::kRowMajor};
  EXPECT_EQ(pick(fp8).block_k, 128);
  EXPECT_EQ(fp8.a_format, kFp8BlockwiseRows);
  // FP8 blockwise: cooperative TMA-store tiles, 128x256 where the width is a multiple of 256 (the
  // measured winner), 128x128 otherwise; dynamic schedule like every M-grouped FPROP, W13 too.
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s4_tma_dyn");
  fp8.n = 7168 + 128;
  EXPECT_EQ(pick(fp8).name(), "128x128x128_s6_tma_dyn");
  fp8.op = GroupedGemmOp::kFpropSwiglu;
  fp8.n = 4096;
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s4_tma_dyn");
  // DGRAD writes k columns: the width that decides the tile.
  fp8.op = GroupedGemmOp::kDgrad;
  fp8.b_format = kFp8BlockwiseWeightT;
  fp8.n = 4096;
  fp8.k = 7168 + 128;
  EXPECT_EQ(pick(fp8).name(), "128x128x128_s6_tma_dyn");
  fp8.k = 7168;
  EXPECT_EQ(pick(fp8).name(), "128x256x128_s4_tma_dyn");
  // FP8-blockwise WGRAD (transposed columns): 128x256 with three stages where the output width k is
  // a multiple of 256, 128x128 with five otherwise.
  GroupedGemmProblem fw = problem(GroupedGemmOp::kWgrad, 32768, 1536, 2048, 64);
  fw.a_format = kFp8BlockwiseRowsT;
  fw.b_format = kFp8BlockwiseRowsT;
  EXPECT_EQ(pick(fw).name(), "128x256x128_s3_tma");
  fw.k = 768;  // qwen3_30b W2: F = 3 x 256
  EXPECT_EQ(pick(fw).name(), "128x256x128_s3_tma");
  fw.k = 640;
  EXPECT_EQ(pick(fw).name(), "128x128x128_s5_tma");
  // Short contractions (at most kFp8WgradNarrowRowsPerExpert token rows per expert on average, the
  // caller's routed-row bound when it gives one): 128x128 whatever the width (G140).
  fw.k = 2048;
  fw.e_local = 128;  // 256 rows per expert: dsv3_prefill's EP2 rank
  EXPECT_EQ(pick(fw).name(), "128x128x128_s5_tma");
  fw.e_local = 127;
  EXPECT_EQ(pick(fw).name(), "128x256x128_s3_tma");
  fw.e_local = 256;
  fw.m_capacity = 32768 + 256 * 127;  // dsv3_prefill EP1: padded capacity 255 rows per expert,
  fw.routed_rows_bound = 32768;       // 128 routed
  EXPECT_EQ(pick(fw).name(), "128x128x128_s5_tma");
  fw.e_local = 64;  // 512 routed rows per expert (qwen3_30b at EP1 has 512 over 128 experts)
  EXPECT_EQ(pick(fw).name(), "128x256x128_s3_tma");
  // MXFP8: the one compiled tile (128x128, five stages with the producer-converted scales) for
  // FPROP, W13 and DGRAD (which runs as FPROP on the transposed weight), whatever the width.
  GroupedGemmProblem mx8 = problem(GroupedGemmOp::kFprop, 32768, 7168, 2048);
  mx8.a_format = kMxfp8Rows;
  mx8.b_format = kMxfp8Weight;
  EXPECT_EQ(mx8.a_format.name(), "e4m3_e8m0_1x32");
  EXPECT_EQ(pick(mx8).name(), "128x128x128_s5_tma_dyn");
  mx8.op = GroupedGemmOp::kFpropSwiglu;
  mx8.n = 4096;
  EXPECT_EQ(pick(mx8).name(), "128x128x128_s5_tma_dyn");
  mx8.op = GroupedGemmOp::kFprop;  // DGRAD's FPROP problem: n and k swapped
  mx8.n = 7168;
  mx8.k = 4096;
  mx8.b_format = kMxfp8Weight;
  EXPECT_EQ(pick(mx8).name(), "128x128x128_s5_tma_dyn");
  EXPECT_EQ(kMxfp8WeightT.name(), "e4m3_e8m0_32x32_col");
  // Decode-sized MXFP8 FPROP and W13 (at most 64 rows per local expert): the swap-AB tile with
  // 128-deep E4M3 stages, static schedule; DGRAD of the same size keeps 128x128.
  GroupedGemmProblem dec = problem(GroupedGemmOp::kFprop, 8192, 7168, 2048, 256);
  dec.a_format = kMxfp8Rows;
  dec.b_format = kMxfp8Weight;
  EXPECT_EQ(pick(dec).name(), "256x32x128_s5_swapab");
  dec.op = GroupedGemmOp::kFpropSwiglu;
  dec.n = 4096;
  dec.k = 7168;
  EXPECT_EQ(pick(dec).name(), "256x32x128_s5_swapab");
  // Inference (the tiles cover the real rows): 16 tokens while the routed rows average at most 12
  // per expert (the layer's routed_rows_bound; without it the usable rows), then the 128x128 tile.
  dec.tile_rows = true;
  dec.routed_rows_bound = 256 * 12;  // dsv3 at 384 tokens per rank
  EXPECT_EQ(pick(dec).name(), "256x16x128_s5_swapab");
  dec.routed_rows_bound = 256 * 12 + 1;
  EXPECT_EQ(pick(dec).name(), "128x128x128_s5_tma_dyn");
  dec.routed_rows_bound = 0;  // the usable rows: 32 per expert
  EXPECT_EQ(pick(dec).name(), "128x128x128_s5_tma_dyn");
  dec.m_capacity = 256 * 8;
  EXPECT_EQ(pick(dec).name(), "256x16x128_s5_swapab");
  dec.m_capacity = 8192;
  dec.tile_rows = false;
  dec.routed_rows_bound = 256 * 8;  // taken only with tile_rows: training's segments are padded
  EXPECT_EQ(pick(dec).name(), "256x32x128_s5_swapab");
  dec.routed_rows_bound = 0;
  dec.op = GroupedGemmOp::kDgrad;
  dec.b_format = kMxfp8WeightT;
  EXPECT_EQ(pick(dec).name(), "128x128x128_s5_tma_dyn");
  // The host API hands E4M3 DGRAD to the heuristic as an FPROP on the transposed weight (n and k
  // swapped, b = the weight format): decode-sized, it may take the swap-AB tile only when it does
  // not accumulate, since the swap-AB epilogue only stores (the call rejects the pair).
  dec.op = GroupedGemmOp::kFprop;
  dec.b_format = kMxfp8Weight;
  dec.accumulate = true;
  EXPECT_EQ(pick(dec).name(), "128x128x128_s5_tma_dyn");
  dec.a_format = kFp8BlockwiseRows;
  dec.b_format = kFp8BlockwiseWeight;
  dec.routed_rows_bound = 256 * 8;  // FP8 blockwise's swap-AB bound counts token rows (below)
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");
  dec.accumulate = false;
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");  // FP8 blockwise: plain FPROP never swap-AB (below)
  dec.routed_rows_bound = 0;
  dec.a_format = kMxfp8Rows;
  dec.b_format = kMxfp8Weight;
  EXPECT_EQ(pick(dec).name(), "256x32x128_s5_swapab");
  dec.op = GroupedGemmOp::kDgrad;
  dec.b_format = kMxfp8WeightT;
  // FP8 blockwise: decode-sized W13 takes its swap-AB tile while the token rows (routed_rows_bound,
  // tile_rows or not; without it the usable rows) average at most 16 per expert, the 128x256 tile
  // above; plain FPROP (W2) and DGRAD never take the swap-AB tile.
  dec.a_format = kFp8BlockwiseRows;
  dec.b_format = kFp8BlockwiseWeight;
  dec.op = GroupedGemmOp::kFpropSwiglu;
  dec.n = 4096;
  dec.k = 7168;
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");  // 8192 usable rows: 32 per expert
  dec.routed_rows_bound = 256 * kFp8SwapAbMaxRowsPerExpert;
  EXPECT_EQ(pick(dec).name(), "256x32x128_s5_swapab");
  dec.routed_rows_bound = 256 * kFp8SwapAbMaxRowsPerExpert + 1;
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");
  dec.routed_rows_bound = 256 * 8;  // dsv3_decode at EP2 sizes
  EXPECT_EQ(pick(dec).name(), "256x32x128_s5_swapab");
  dec.op = GroupedGemmOp::kFprop;  // W2 at the same rows
  dec.n = 7168;
  dec.k = 2048;
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");
  dec.n = 4096;  // W13 DGRAD
  dec.k = 7168;
  dec.op = GroupedGemmOp::kDgrad;
  dec.b_format = kFp8BlockwiseWeightT;
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");  // 256 experts: s4 does not fit (ManyExpertsFallBack)
  // A block-scaled layer's buffers keep upstream's 128-row padding bound (dsv3_decode at EP1: 33536
  // rows for 256 experts, past the decode class); m_bound, the rows it can use with its 32-row
  // padding (8960), decides the class.
  dec.op = GroupedGemmOp::kFpropSwiglu;
  dec.b_format = kFp8BlockwiseWeight;
  dec.m_capacity = 33536;
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");
  dec.m_bound = 8960;
  EXPECT_EQ(pick(dec).name(), "256x32x128_s5_swapab");
  dec.m_bound = 64 * 256 + 32;
  EXPECT_EQ(pick(dec).name(), "128x256x128_s3_tma_dyn");
}

// NVFP4 runs swap-AB tiles only (inference FPROP and W13 FPROP): 32 tokens when decode-sized, 64
// otherwise (128 from 128 rows per expert only with DMOE_GEMM_EXPERIMENTAL: measured slower, G54);
// 256 K values per stage.
TEST(GemmConfig, Nvfp4TakesSwapABTiles) {
  GroupedGemmProblem p = problem(GroupedGemmOp::kFpropSwiglu, 8960, 4096, 7168, 256);
  p.a_format = kNvfp4Rows;
  p.b_format = kNvfp4Weight;
  // Decode-sized: 16 tokens up to 12 rows per expert on average, 32 above: the routed rows when the
  // tiles cover them (tile_rows), else the usable rows (35 per expert here).
  EXPECT_EQ(pick(p).name(), "256x32x256_s4_swapab");
  p.tile_rows = true;
  EXPECT_EQ(pick(p).name(), "256x32x256_s4_swapab");
  p.routed_rows_bound = 2048;  // dsv3_decode: 256 tokens x top 8
  EXPECT_EQ(pick(p).name(), "256x16x256_s5_swapab");
  p.routed_rows_bound = 8192;  // 1024 tokens
  EXPECT_EQ(pick(p).name(), "256x32x256_s4_swapab");
  p.routed_rows_bound = 0;
  p.tile_rows = false;
  p.m_capacity = 65536 + 256 * 31;  // dsv3_prefill at EP1
  EXPECT_EQ(pick(p).name(), "256x64x256_s3_swapab");
  p.op = GroupedGemmOp::kFprop;
  p.n = 7168;
  p.k = 2048;
  EXPECT_EQ(pick(p).name(), "256x64x256_s3_swapab");
  p.m_capacity = 1024;
  EXPECT_EQ(pick(p).name(), "256x16x256_s5_swapab");
  // The 16-token tile's stages leave room for the scheduler tables of 717 local experts at most
  // (GemmKernelTable.HeuristicPicksFitTheirSharedMemory checks it against the kernel); past them the
  // 32-token tile.
  p.e_local = 717;
  p.m_capacity = 717 * 4;
  EXPECT_EQ(pick(p).name(), "256x16x256_s5_swapab");
  p.e_local = 718;
  p.m_capacity = 718 * 4;
  EXPECT_EQ(pick(p).name(), "256x32x256_s4_swapab");
  p.e_local = 256;
  // Expanded FP16 token rows (prefill-sized contexts): the 128-token tile.
  p.a_format = kNvfp4ExpandedRows;
  p.m_capacity = 65536 + 256 * 31;
  EXPECT_EQ(pick(p).name(), "256x128x256_s2_swapab");
  EXPECT_EQ(kNvfp4ExpandedRows.name(), "f16_e4m3_1x16_fp32g_expanded");
}

}  // namespace
}  // namespace dist_moe
