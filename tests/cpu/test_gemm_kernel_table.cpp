// The heuristic (src/core/gemm_config.cpp) against the compiled kernel table (src/gemm): every pick
// must launch. A kernel's shared memory grows with the local experts (8-12 bytes of scheduler tables
// each), so a tile that fits at 256 experts can miss the device's opt-in limit at 1024, where the
// call would fail naming the bytes; each selector falls back before that, on an estimate of the
// layout (gemm_config.cpp smem_estimate), so every e_local from 1 to 1024 is checked: a change of the
// layout by a few bytes moves the limit by one or two experts (s62: one more operand map slot, and
// the picks at 224-225 experts no longer fit). Host code only (the table and its smem_bytes() are
// host functions), so it runs in CI; built where the CUDA kernels are.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "dist_moe/grouped_gemm_config.h"
#if defined(DIST_MOE_TEST_GEMM_TABLE)
#include "dist_moe/grouped_gemm.h"  // (CUDA runtime headers: only where the kernels are built)
#endif

namespace dist_moe {
namespace {

#if defined(DIST_MOE_TEST_GEMM_TABLE)

constexpr int kSms = 132;
constexpr int kSmemOptin = 232448;  // H100/H200 dynamic shared memory per block (227 KiB)

// The names of the compiled configurations of op on formats (a, b), BF16 output, for which keep(c).
template <class Keep>
std::vector<std::string> config_names(GroupedGemmOp op, const OperandFormat& a, const OperandFormat& b, Keep keep) {
  std::vector<std::string> v;
  for (const GroupedGemmConfig& c : grouped_gemm_configs(op, DType::kBFloat16, false, a, b))
    if (keep(c)) v.push_back(c.name());
  return v;
}

struct Family {
  const char* name;
  GroupedGemmOp op;  // as the host API hands it to the heuristic (E4M3 DGRAD: an FPROP)
  DType out;
  OperandFormat a, b;
  bool accumulate;
  bool tile_rows;  // inference's decode tiles over the real rows
  bool gather = false;  // A rows from the gather producer (the fused dispatch)
};

struct Dims {
  int64_t d, f;
};

// n and k of the op's GEMM (W13 for FPROP-like ops, W2's DGRAD, W13's WGRAD) at model dims.
std::pair<int64_t, int64_t> gemm_nk(GroupedGemmOp op, bool w2, const Dims& m) {
  switch (op) {
    case GroupedGemmOp::kFpropSwiglu: return {2 * m.f, m.d};
    case GroupedGemmOp::kFprop: return w2 ? std::make_pair(m.d, m.f) : std::make_pair(m.f, m.d);
    case GroupedGemmOp::kDgrad: return {m.d, m.f};
    case GroupedGemmOp::kWgrad: return {2 * m.f, m.d};
  }
  return {0, 0};
}

TEST(GemmKernelTable, HeuristicPicksFitTheirSharedMemory) {
  if (grouped_gemm_experimental_requested()) GTEST_SKIP() << "DMOE_GEMM_EXPERIMENTAL changes the picks";
  const std::vector<Family> families = {
      {"BF16 FPROP", GroupedGemmOp::kFprop, DType::kBFloat16, {}, {}, false, false},
      {"BF16 W13", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, {}, {}, false, false},
      {"BF16 FPROP gathered", GroupedGemmOp::kFprop, DType::kBFloat16, {}, {}, false, false, true},
      {"BF16 W13 gathered", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, {}, {}, false, false, true},
      {"BF16 DGRAD", GroupedGemmOp::kDgrad, DType::kBFloat16, {}, {}, false, false},
      {"BF16 DGRAD gathered", GroupedGemmOp::kDgrad, DType::kBFloat16, {}, {}, false, false, true},
      {"BF16 DGRAD accumulating", GroupedGemmOp::kDgrad, DType::kBFloat16, {}, {}, true, false},
      {"BF16 DGRAD FP32", GroupedGemmOp::kDgrad, DType::kFloat32, {}, {}, false, false},
      {"BF16 WGRAD", GroupedGemmOp::kWgrad, DType::kBFloat16, {}, {}, false, false},
      {"BF16 WGRAD accumulating", GroupedGemmOp::kWgrad, DType::kBFloat16, {}, {}, true, false},
      {"BF16 WGRAD FP32", GroupedGemmOp::kWgrad, DType::kFloat32, {}, {}, true, false},
      {"FP8 blockwise FPROP", GroupedGemmOp::kFprop, DType::kBFloat16, kFp8BlockwiseRows, kFp8BlockwiseWeight, false,
       false},
      {"FP8 blockwise W13", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, kFp8BlockwiseRows, kFp8BlockwiseWeight,
       false, false},
      {"FP8 blockwise DGRAD (as FPROP)", GroupedGemmOp::kFprop, DType::kBFloat16, kFp8BlockwiseRows,
       kFp8BlockwiseWeight, true, false},
      {"FP8 blockwise WGRAD", GroupedGemmOp::kWgrad, DType::kBFloat16, kFp8BlockwiseRowsT, kFp8BlockwiseRowsT, true,
       false},
      {"FP8 blockwise WGRAD FP32", GroupedGemmOp::kWgrad, DType::kFloat32, kFp8BlockwiseRowsT, kFp8BlockwiseRowsT,
       true, false},
      {"MXFP8 FPROP", GroupedGemmOp::kFprop, DType::kBFloat16, kMxfp8Rows, kMxfp8Weight, false, false},
      {"MXFP8 W13 inference", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, kMxfp8Rows, kMxfp8Weight, false, true},
      {"MXFP8 DGRAD (as FPROP)", GroupedGemmOp::kFprop, DType::kBFloat16, kMxfp8Rows, kMxfp8Weight, true, false},
      {"NVFP4 FPROP", GroupedGemmOp::kFprop, DType::kBFloat16, kNvfp4Rows, kNvfp4Weight, false, true},
      {"NVFP4 W13", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, kNvfp4Rows, kNvfp4Weight, false, true},
      {"NVFP4 W13 expanded", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, kNvfp4ExpandedRows, kNvfp4Weight, false,
       false},
  };
  const Dims dims[] = {{7168, 2048}, {2048, 768}};  // dsv3, qwen3_30b
  int checked = 0;
  std::vector<std::string> misses;
  for (const Family& fam : families) {
    ASSERT_FALSE(grouped_gemm_configs(fam.op, fam.out, fam.gather, fam.a, fam.b).empty()) << fam.name << ": no kernels";
    for (const Dims& m : dims) {
      for (bool w2 : {false, true}) {
        if (w2 && fam.op != GroupedGemmOp::kFprop) continue;
        const auto [n, k] = gemm_nk(fam.op, w2, m);
        for (int64_t e = 1; e <= 1024; ++e) {
          for (int64_t rows_per_expert : {4, 12, 32, 64, 512}) {
            GroupedGemmProblem p;
            p.op = fam.op;
            p.m_capacity = e * rows_per_expert;
            p.n = n;
            p.k = k;
            p.e_local = e;
            p.out_dtype = fam.out;
            p.accumulate = fam.accumulate;
            p.a_format = fam.a;
            p.b_format = fam.b;
            p.tile_rows = fam.tile_rows;
            p.gather = fam.gather;
            if (fam.tile_rows) p.routed_rows_bound = p.m_capacity;
            const GroupedGemmConfig c = select_grouped_gemm_config(p, kSms);
            const int smem = grouped_gemm_smem_bytes(fam.op, fam.out, fam.gather, fam.a, fam.b, c, e);
            ++checked;
            if (smem > kSmemOptin) {
              std::ostringstream os;
              os << fam.name << " n=" << n << " k=" << k << " e_local=" << e << " rows/expert=" << rows_per_expert
                 << " -> " << c.name() << ": " << smem << " bytes";
              misses.push_back(os.str());
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
  std::string list;
  for (const std::string& s : misses) list += "\n  " + s;
  EXPECT_TRUE(misses.empty()) << misses.size() << " picks exceed " << kSmemOptin << " bytes:" << list;
}

// MXFP8 128x128 narrow tiles (perf_history G99): every configuration the heuristic may pick splits
// them across both warpgroups, and each has its "_nosplit" twin (warpgroup 0 alone, the A/B and the
// bitwise test's reference); the swap-AB tiles have none, and neither have other formats or the
// dequantizing baseline (BF16 consumers: no per-32 loop to split).
TEST(GemmKernelTable, Mxfp8ConfigurationsHaveNosplitTwins) {
  for (const GroupedGemmOp op : {GroupedGemmOp::kFprop, GroupedGemmOp::kFpropSwiglu}) {
    const std::vector<GroupedGemmConfig> v = grouped_gemm_configs(op, DType::kBFloat16, false, kMxfp8Rows, kMxfp8Weight);
    int split = 0, alone = 0;
    for (const GroupedGemmConfig& c : v) {
      if (c.swap_ab || c.mxfp8_dequant) {
        EXPECT_TRUE(c.narrow_split) << c.name();
        continue;
      }
      (c.narrow_split ? split : alone) += 1;
      const bool suffixed = c.name().size() > 8 && c.name().compare(c.name().size() - 8, 8, "_nosplit") == 0;
      EXPECT_EQ(suffixed, !c.narrow_split) << c.name();
      GroupedGemmConfig twin = c;
      twin.narrow_split = !c.narrow_split;
      bool found = false;
      for (const GroupedGemmConfig& o : v) found = found || o.name() == twin.name();
      EXPECT_TRUE(found) << c.name() << " has no twin " << twin.name();
    }
    EXPECT_GT(split, 0);
    EXPECT_EQ(split, alone);
  }
  for (const GroupedGemmConfig& c :
       grouped_gemm_configs(GroupedGemmOp::kFprop, DType::kBFloat16, false, kFp8BlockwiseRows, kFp8BlockwiseWeight))
    EXPECT_TRUE(c.narrow_split) << c.name();
  GroupedGemmProblem p;
  p.op = GroupedGemmOp::kFprop;
  p.m_capacity = 128 * 512;  // training-sized: the 128x128 tile
  p.n = 2048;
  p.k = 768;
  p.e_local = 128;
  p.a_format = kMxfp8Rows;
  p.b_format = kMxfp8Weight;
  // The heuristic's MXFP8 128x128 pick follows DMOE_MXFP8_NARROW_SPLIT; every other pick keeps the flag
  // (and its name) whatever the knob says.
  EXPECT_FALSE(select_grouped_gemm_config(p, kSms).swap_ab);
  EXPECT_EQ(select_grouped_gemm_config(p, kSms).narrow_split, mxfp8_narrow_split_enabled());
  p.a_format = p.b_format = OperandFormat{};  // BF16
  EXPECT_TRUE(select_grouped_gemm_config(p, kSms).narrow_split);
  p.a_format = kFp8BlockwiseRows;
  p.b_format = kFp8BlockwiseWeight;
  EXPECT_TRUE(select_grouped_gemm_config(p, kSms).narrow_split);
}

// The W13 kernels promoting every 64 / 32 of K (perf_history G158): compiled for the FP8-blockwise
// 128x256 W13 only (the MXFP8 training layer's tile; the s3 twin where many experts crowd the s4 out
// of shared memory), under their own names with and without the dynamic schedule, fitting the shared
// memory at 256 experts as their 128-promoting twins do; the heuristic picks one only for a call that
// asks for it (GroupedGemmProblem::promote_k, from GroupedGemmCommon's).
TEST(GemmKernelTable, PromotionKernelsAreTheWideW13sOnly) {
  auto names = [](GroupedGemmOp op, const OperandFormat& a, const OperandFormat& b) {
    return config_names(op, a, b, [](const GroupedGemmConfig& c) { return c.promote_k != 128; });
  };
  const std::vector<std::string> want = {"128x256x128_s4_tma_p64", "128x256x128_s3_tma_p64", "128x256x128_s4_tma_p32",
                                         "128x256x128_s4_tma_dyn_p64", "128x256x128_s3_tma_dyn_p64",
                                         "128x256x128_s4_tma_dyn_p32"};
  EXPECT_EQ(names(GroupedGemmOp::kFpropSwiglu, kFp8BlockwiseRows, kFp8BlockwiseWeight), want);
  EXPECT_TRUE(names(GroupedGemmOp::kFprop, kFp8BlockwiseRows, kFp8BlockwiseWeight).empty());
  EXPECT_TRUE(names(GroupedGemmOp::kDgrad, kFp8BlockwiseRows, kFp8BlockwiseWeightT).empty());
  EXPECT_TRUE(names(GroupedGemmOp::kFpropSwiglu, kMxfp8Rows, kMxfp8Weight).empty());
  EXPECT_TRUE(names(GroupedGemmOp::kFpropSwiglu, OperandFormat{}, OperandFormat{}).empty());
  for (const GroupedGemmConfig& c :
       grouped_gemm_configs(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, false, kFp8BlockwiseRows, kFp8BlockwiseWeight)) {
    if (c.promote_k == 128) continue;
    GroupedGemmConfig twin = c;
    twin.promote_k = 128;
    EXPECT_EQ(grouped_gemm_smem_bytes(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, false, kFp8BlockwiseRows,
                                      kFp8BlockwiseWeight, c, 256),
              grouped_gemm_smem_bytes(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, false, kFp8BlockwiseRows,
                                      kFp8BlockwiseWeight, twin, 256))
        << c.name();
  }
  for (int64_t e : {1, 8, 128, 256})
    for (int64_t rows_per_expert : {4, 32, 512, 4096}) {
      GroupedGemmProblem p;
      p.op = GroupedGemmOp::kFpropSwiglu;
      p.m_capacity = e * rows_per_expert;
      p.n = 4096;
      p.k = 7168;
      p.e_local = e;
      p.a_format = kFp8BlockwiseRows;
      p.b_format = kFp8BlockwiseWeight;
      EXPECT_EQ(select_grouped_gemm_config(p, kSms).promote_k, 128) << select_grouped_gemm_config(p, kSms).name();
      p.promote_k = 64;  // a call asking for 64: its tile's _p64 kernel, or swap-AB (every 32 already)
      const GroupedGemmConfig asked = select_grouped_gemm_config(p, kSms);
      EXPECT_EQ(asked.promote_k, asked.swap_ab ? 128 : 64) << asked.name();
    }
}

// The MXFP8 dequantize-to-BF16 baseline (mainloop_mxfp8_dequant.cuh, issue #25): compiled for
// FPROP and W13 (and so for the transposed-weight DGRAD, which runs the FPROP kernels) under its
// own names, with and without the dynamic schedule; it fits the shared memory at 1024 experts; no
// other format lists it; and the heuristic never picks it, at any size.
TEST(GemmKernelTable, Mxfp8DequantBaselineIsCompiledByNameAndNeverPicked) {
  auto names = [](GroupedGemmOp op, const OperandFormat& a, const OperandFormat& b) {
    return config_names(op, a, b, [](const GroupedGemmConfig& c) { return c.mxfp8_dequant; });
  };
  const std::vector<std::string> want = {"128x128x128_s4_dq", "128x128x128_s4_dyn_dq"};
  EXPECT_EQ(names(GroupedGemmOp::kFprop, kMxfp8Rows, kMxfp8Weight), want);
  EXPECT_EQ(names(GroupedGemmOp::kFpropSwiglu, kMxfp8Rows, kMxfp8Weight), want);
  EXPECT_EQ(names(GroupedGemmOp::kDgrad, kMxfp8Rows, kMxfp8WeightT), want);
  EXPECT_TRUE(names(GroupedGemmOp::kFprop, kFp8BlockwiseRows, kFp8BlockwiseWeight).empty());
  EXPECT_TRUE(names(GroupedGemmOp::kFprop, OperandFormat{}, OperandFormat{}).empty());
  GroupedGemmConfig dq;
  dq.block_n = 128;
  dq.block_k = 128;
  dq.stages = 4;
  dq.mxfp8_dequant = true;
  for (const GroupedGemmOp op : {GroupedGemmOp::kFprop, GroupedGemmOp::kFpropSwiglu})
    EXPECT_LE(grouped_gemm_smem_bytes(op, DType::kBFloat16, false, kMxfp8Rows, kMxfp8Weight, dq, 1024), kSmemOptin);
  int checked = 0;
  for (const GroupedGemmOp op : {GroupedGemmOp::kFprop, GroupedGemmOp::kFpropSwiglu})
    for (int64_t e : {1, 8, 128, 256, 1024})
      for (int64_t rows_per_expert : {4, 32, 512, 4096}) {
        GroupedGemmProblem p;
        p.op = op;
        p.m_capacity = e * rows_per_expert;
        p.n = 4096;
        p.k = 7168;
        p.e_local = e;
        p.a_format = kMxfp8Rows;
        p.b_format = kMxfp8Weight;
        EXPECT_FALSE(select_grouped_gemm_config(p, kSms).mxfp8_dequant) << select_grouped_gemm_config(p, kSms).name();
        ++checked;
      }
  EXPECT_EQ(checked, 40);
}

#else

TEST(GemmKernelTable, HeuristicPicksFitTheirSharedMemory) {
  GTEST_SKIP() << "built without the CUDA kernels (DIST_MOE_ENABLE_CUDA off): no kernel table to check";
}

#endif

}  // namespace
}  // namespace dist_moe
