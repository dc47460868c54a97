// The NVFP4 grouped GEMMs (device/gemm/mainloop_nvfp4_swap_ab.cuh: weights and token rows made
// exact FP16 in the kernel, FP32 token and expert scales in the epilogue) against the host reference
// on the operands they read. Token rows are quantized on the GPU into packed rows (the quantizer is
// bitwise equal to the oracle: test_quantize.cu) and weights prepared on the GPU
// (prepare_block_scaled_weight), both downloaded and dequantized on the host -- e2m1 * s * the FP32
// scale -- and multiplied with double sums rounded once to FP32, then BF16. Rows get per-row
// magnitudes over 2^-6 .. 2^6 (so their token scales differ) and each expert another (so do the
// global scales): a scale applied to the wrong row, expert or block fails by orders of magnitude.
// Every compiled configuration runs, on ragged counts with empty experts and tails that are not tile
// multiples, and rows past sum(counts) must stay untouched; the kernels that read expanded FP16 token
// rows (kNvfp4ExpandedRows) get them from quant::nvfp4_expand_rows on the same packed rows, whose
// FP16 values are checked bitwise against the host (Nvfp4ExpandRows).
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/device/gemm/nvfp4_operands.cuh"
#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/prepare_weight.h"
#include "dist_moe/prepared_weight.h"
#include "grouped_gemm_test_util.h"
#include "quant/quantize.h"

namespace dist_moe::testing {
namespace {

constexpr int64_t kSlack = 37;  // rows past sum(counts): never written

std::vector<int32_t> nvfp4_counts(int64_t e_local, int max_rows, std::mt19937& rng) {
  static const int32_t kAwkward[] = {0, 1, 31, 32, 33, 0, 64, 100};
  std::uniform_int_distribution<int> size(0, max_rows);
  std::vector<int32_t> c(static_cast<size_t>(e_local));
  for (int64_t e = 0; e < e_local; ++e) c[e] = e < 8 && kAwkward[e] <= max_rows ? kAwkward[e] : size(rng);
  return c;
}

// Packed NVFP4 token rows [cap, nvfp4_packed_row_bytes(K)] and the values the GEMM multiplies by
// (e2m1 * s * token_scale_inv, in double then float).
struct Nvfp4Rows {
  DeviceBuffer<uint8_t> packed;
  std::vector<float> vals;
};
Nvfp4Rows nvfp4_rows(const HostBf16& a, int64_t cap, int64_t K) {
  const int64_t pk = quant::nvfp4_packed_row_bytes(K);
  DeviceBuffer<uint16_t> src(a.bits);
  Nvfp4Rows r{DeviceBuffer<uint8_t>(static_cast<size_t>(cap * pk)), {}};
  quant::nvfp4_quantize_rows(quant::Bf16Matrix{src.get(), cap, K, K}, quant::nvfp4_packed_rows_out(r.packed.get(), pk, K),
                             nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint8_t> bytes = r.packed.download();
  r.vals.resize(static_cast<size_t>(cap * K));
  for (int64_t m = 0; m < cap; ++m) {
    const uint8_t* row = &bytes[m * pk];
    const uint8_t* scales = row + numeric::nvfp4_packed_row_scales_offset(K);
    float tsi;
    std::memcpy(&tsi, row + numeric::nvfp4_packed_row_token_scale_offset(K), 4);
    for (int64_t c = 0; c < K; ++c)
      r.vals[m * K + c] = static_cast<float>(double(numeric::e2m1_to_float(numeric::detail::nvfp4_load_nibble(row, 0, 0, c))) *
                                             numeric::e4m3_to_float(scales[c / 16]) * tsi);
  }
  return r;
}

// An NVFP4 weight [E, N, K] prepared on the GPU, and its values e2m1 * s * global_scale_inv.
struct Nvfp4Weight {
  DeviceBuffer<uint8_t> q, s;
  DeviceBuffer<float> gs, gsi;
  std::vector<float> vals;
};
Nvfp4Weight nvfp4_weight(const HostBf16& w, int64_t E, int64_t N, int64_t K) {
  const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kNVFP4, true, E, N, K);
  Nvfp4Weight o{DeviceBuffer<uint8_t>(spec.fprop_data.bytes()), DeviceBuffer<uint8_t>(spec.fprop_scale.bytes()),
                DeviceBuffer<float>(static_cast<size_t>(E)), DeviceBuffer<float>(static_cast<size_t>(E)), {}};
  DeviceBuffer<uint16_t> src(w.bits);
  PreparedWeightBuffers b;
  b.fprop_data = o.q.get();
  b.fprop_scale = o.s.get();
  b.global_scale = o.gs.get();
  b.global_scale_inv = o.gsi.get();
  prepare_block_scaled_weight(src.get(), spec, b, nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> q = o.q.download();
  const std::vector<uint8_t> s = o.s.download();
  numeric::nvfp4_weight_bytes_decode(q.data(), static_cast<int64_t>(q.size()));  // the standard packing
  const std::vector<float> gsi = o.gsi.download();
  o.vals.resize(static_cast<size_t>(E * N * K));
  for (int64_t r = 0; r < E * N; ++r)
    for (int64_t c = 0; c < K; ++c)
      o.vals[r * K + c] = static_cast<float>(double(numeric::e2m1_to_float(numeric::detail::nvfp4_load_nibble(q.data(), K / 2, r, c))) *
                                             numeric::e4m3_to_float(s[r * (K / 16) + c / 16]) * gsi[r / N]);
  return o;
}

struct Nvfp4Case {
  int64_t e_local, n, k;
  int max_rows;
  uint32_t seed;
  bool tiny_blocks = false;  // tiny_block_weight and unscaled token rows
};

// A weight whose experts' amax is one element (1.0 at row 0, column 0) and whose other values are
// U(-1, 1) * 1e-3 (even experts: E4M3 block scales ~0.45) or * 1e-5 (odd: subnormal E4M3 scales,
// some at the 2^-9 floor): every other block's FP16 operands in the kernel are small, many of them
// FP16 subnormals, which the products must keep exactly.
HostBf16 tiny_block_weight(int64_t E, int64_t N, int64_t K, std::mt19937& rng) {
  HostBf16 w = random_bf16(static_cast<size_t>(E * N * K), 1.0f, rng);
  for (int64_t i = 0; i < E * N * K; ++i) {
    const int64_t e = i / (N * K);
    const numeric::bf16_t b = numeric::float_to_bf16(i % (N * K) == 0 ? 1.0f : w.vals[i] * (e % 2 ? 1e-5f : 1e-3f));
    w.bits[i] = b.bits;
    w.vals[i] = numeric::bf16_to_float(b);
  }
  return w;
}

struct Operands {
  std::vector<int32_t> counts;
  int64_t M = 0, cap = 0;
  Nvfp4Rows a;
  Nvfp4Weight w;
};
Operands operands(const Nvfp4Case& cs) {
  std::mt19937 rng(cs.seed);
  Operands o;
  o.counts = nvfp4_counts(cs.e_local, cs.max_rows, rng);
  o.M = total_rows(o.counts);
  o.cap = o.M + kSlack;
  o.a = nvfp4_rows(cs.tiny_blocks ? random_bf16(static_cast<size_t>(o.cap * cs.k), 1.0f, rng)
                                   : spread_bf16(o.cap, cs.k, 1, 1.0f, rng),
                   o.cap, cs.k);
  o.w = nvfp4_weight(cs.tiny_blocks ? tiny_block_weight(cs.e_local, cs.n, cs.k, rng)
                                    : spread_bf16(cs.e_local * cs.n, cs.k, cs.n, 1.0f / std::sqrt(float(cs.k)), rng),
                     cs.e_local, cs.n, cs.k);
  return o;
}

// Exclusive prefix sums of the counts, [e_local + 1] (what RowGroups::offsets_G1 holds).
std::vector<int32_t> offsets_of(const std::vector<int32_t>& counts) {
  std::vector<int32_t> o(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) o[e + 1] = o[e] + counts[e];
  return o;
}

// The A operand a kernel reads: the packed rows as they are, or (kNvfp4ExpandedRows) expanded to
// FP16 rows [cap, K] with their FP32 token_scale_inv [cap].
struct TokenOperand {
  const void* rows = nullptr;
  DeviceBuffer<uint16_t> expanded;
  DeviceBuffer<float> token_scale_inv;
  DeviceBuffer<int32_t> offsets;
};
TokenOperand token_operand(const Operands& o, const Nvfp4Case& cs, const OperandFormat& a) {
  TokenOperand t;
  t.rows = o.a.packed.get();
  if (a != kNvfp4ExpandedRows) return t;
  t.expanded = DeviceBuffer<uint16_t>(static_cast<size_t>(o.cap * cs.k));
  t.token_scale_inv = DeviceBuffer<float>(static_cast<size_t>(o.cap));
  t.offsets = DeviceBuffer<int32_t>(offsets_of(o.counts));
  const quant::RowGroups groups{nullptr, t.offsets.get(), static_cast<int32_t>(cs.e_local)};
  quant::nvfp4_expand_rows(nullptr, o.a.packed.get(), quant::nvfp4_packed_row_bytes(cs.k), groups, o.cap, cs.k,
                           t.expanded.get(), t.token_scale_inv.get(), nullptr);
  t.rows = t.expanded.get();
  return t;
}

GroupedGemmCommon common_of(const Operands& o, const DeviceBuffer<int32_t>& counts, const Nvfp4Case& cs,
                            const GemmParam* param, const TokenOperand& t) {
  GroupedGemmCommon c;
  c.counts = counts.get();
  c.e_local = cs.e_local;
  c.m_capacity = o.cap;
  c.n = cs.n;
  c.k = cs.k;
  c.config = param ? &param->config : nullptr;
  c.a_format = param ? param->a_format : kNvfp4Rows;
  c.b_format = kNvfp4Weight;
  const float* token_scales = c.a_format == kNvfp4ExpandedRows ? t.token_scale_inv.get() : nullptr;
  c.scales = OperandScales{token_scales, 0, o.w.s.get(), o.w.gsi.get()};
  return c;
}

const char* config_name(const GemmParam* param, std::string& buf) {
  if (param == nullptr) return "heuristic pick";
  buf = param->config.name() + " " + param->a_format.name();
  return buf.c_str();
}

// token_rows_only: GroupedGemmCommon::tile_rows below the counts for some experts (the layer's
// padded segments): those experts' rows past their token rows must stay unwritten.
void run_nvfp4_fprop(const Nvfp4Case& cs, const GemmParam* param, bool token_rows_only = false) {
  const Operands o = operands(cs);
  std::string name;
  std::printf("nvfp4 fprop E=%lld n=%lld k=%lld rows=%lld (%s)\n", static_cast<long long>(cs.e_local),
              static_cast<long long>(cs.n), static_cast<long long>(cs.k), static_cast<long long>(o.M),
              config_name(param, name));
  const std::vector<float> ref = rounded_bf16(ref_fprop(o.a.vals, o.w.vals, o.counts, cs.n, cs.k));
  DeviceBuffer<int32_t> d_counts(o.counts);
  DeviceBuffer<uint16_t> d_out(static_cast<size_t>(o.cap * cs.n));
  d_out.poison();
  const TokenOperand t = token_operand(o, cs, param ? param->a_format : kNvfp4Rows);
  FpropArgs args;
  args.common = common_of(o, d_counts, cs, param, t);
  args.a = t.rows;
  args.w = o.w.q.get();
  args.out = d_out.get();
  const TileRowsCase rows = tile_rows_case(o.counts, token_rows_only);
  DeviceBuffer<int32_t> d_tiles(rows.tiles);
  if (token_rows_only) args.common.tile_rows = d_tiles.get();
  grouped_gemm_fprop(args, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = d_out.download();
  // Tiny blocks: outputs ~7e-3 / ~7e-5 (even / odd experts), FP32 noise below 1e-9; an atol of 1e-7
  // fails any lost subnormal product.
  expect_close("nvfp4 fprop out",
               [&](int64_t i) { return rows.token_row[static_cast<size_t>(i / cs.n)] ? bf16_value(out, i) : double(ref[i]); },
               ref, cs.tiny_blocks ? Tolerance{2e-2, 1e-7, 5e-3} : Tolerance{});
  expect_dropped_rows_untouched(out, rows, cs.n);
  expect_rows_untouched("nvfp4 fprop out", out, o.M, cs.n);
}

// h1 against the reference GEMM; h2 against SwiGLU of the h1 the GPU stored.
void run_nvfp4_w13(const Nvfp4Case& cs, bool clamped, const GemmParam* param) {
  const Operands o = operands(cs);
  const int64_t F = cs.n / 2;
  std::string name;
  std::printf("nvfp4 w13 E=%lld 2F=%lld D=%lld rows=%lld %s (%s)\n", static_cast<long long>(cs.e_local),
              static_cast<long long>(cs.n), static_cast<long long>(cs.k), static_cast<long long>(o.M),
              clamped ? "clamped" : "plain", config_name(param, name));
  reference::SwigluParams act;
  act.activation = clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
  act.alpha = 1.702f;
  act.limit = 0.6f;
  const std::vector<float> ref_h1 = rounded_bf16(ref_fprop(o.a.vals, o.w.vals, o.counts, cs.n, cs.k));
  DeviceBuffer<int32_t> d_counts(o.counts);
  DeviceBuffer<uint16_t> d_h1(static_cast<size_t>(o.cap * cs.n)), d_h2(static_cast<size_t>(o.cap * F));
  d_h1.poison();
  d_h2.poison();
  const TokenOperand t = token_operand(o, cs, param ? param->a_format : kNvfp4Rows);
  W13FpropArgs args;
  args.common = common_of(o, d_counts, cs, param, t);
  args.a = t.rows;
  args.w13 = o.w.q.get();
  args.h1 = d_h1.get();
  args.h2 = d_h2.get();
  args.activation = act.activation;
  args.swiglu_alpha = act.alpha;
  args.swiglu_limit = act.limit;
  grouped_gemm_w13_fprop(args, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> h1 = d_h1.download(), h2 = d_h2.download();
  expect_close("nvfp4 w13 h1", [&](int64_t i) { return bf16_value(h1, i); }, ref_h1);
  std::vector<float> gpu_h1(static_cast<size_t>(o.M * cs.n));
  for (int64_t i = 0; i < o.M * cs.n; ++i) gpu_h1[i] = static_cast<float>(bf16_value(h1, i));
  expect_close("nvfp4 w13 h2 = swiglu(gpu h1)", [&](int64_t i) { return bf16_value(h2, i); },
               ref_swiglu_h2(gpu_h1, F, act));
  expect_rows_untouched("nvfp4 w13 h1", h1, o.M, cs.n);
  expect_rows_untouched("nvfp4 w13 h2", h2, o.M, F);
}

// The packed-row kernels, then the expanded-row ones.
std::vector<GemmParam> nvfp4_params(GroupedGemmOp op) {
  std::vector<GemmParam> v = format_params(op, DType::kBFloat16, kNvfp4Rows, kNvfp4Weight);
  for (const GemmParam& p : format_params(op, DType::kBFloat16, kNvfp4ExpandedRows, kNvfp4Weight)) v.push_back(p);
  return v;
}

class GroupedGemmNvfp4Fprop : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmNvfp4W13 : public ::testing::TestWithParam<GemmParam> {};
INSTANTIATE_TEST_SUITE_P(, GroupedGemmNvfp4Fprop, ::testing::ValuesIn(nvfp4_params(GroupedGemmOp::kFprop)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmNvfp4W13, ::testing::ValuesIn(nvfp4_params(GroupedGemmOp::kFpropSwiglu)),
                         GemmParamName());

TEST_P(GroupedGemmNvfp4Fprop, Ragged) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_fprop({10, 768, 512, 100, 61u}, &GetParam());
}
TEST_P(GroupedGemmNvfp4Fprop, LongK) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_fprop({9, 256, 2048, 70, 62u}, &GetParam());
}
TEST_P(GroupedGemmNvfp4Fprop, ManyRows) {  // several 128-token tiles per expert
  DMOE_REQUIRE_SM90();
  run_nvfp4_fprop({4, 512, 1024, 400, 67u}, &GetParam());
}
TEST_P(GroupedGemmNvfp4Fprop, TinyBlockScalesKeepSubnormalOperands) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_fprop({4, 256, 512, 40, 83u, true}, &GetParam());
}
TEST_P(GroupedGemmNvfp4W13, Plain) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_w13({10, 512, 768, 100, 63u}, false, &GetParam());
}
TEST_P(GroupedGemmNvfp4Fprop, TileRowsCoverOnlyTheTokenRows) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_fprop({9, 512, 512, 90, 72u}, &GetParam(), true);
}

TEST_P(GroupedGemmNvfp4W13, Clamped) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_w13({9, 2 * 384, 512, 70, 64u}, true, &GetParam());
}

// quant::nvfp4_expand_rows, bitwise: element p of stage kb's piece i (box i of the NVFP4 kernels'
// token stage; nvfp4_operands.cuh) is code k of the packed row times its block scale times 2^-7 in
// FP16 (exact), k = 256 kb + 16 nvfp4_piece_block(q, i) + 8 (r / 4) + r % 4 + 4 h for p = 64 i + 8 r +
// 2 q + h; the row's token_scale_inv copied; padding rows (a null row pointer) all zeros.
TEST(Nvfp4ExpandRows, BitwiseAgainstHost) {
  DMOE_REQUIRE_SM90();
  // 3 stages (one partial item of the kernel's 4), 9 (two full and one partial).
  for (const int64_t K : {int64_t{768}, int64_t{2304}}) {
    SCOPED_TRACE(K);
    const int64_t cap = 45;
    std::mt19937 rng(68u + static_cast<unsigned>(K));
    const Nvfp4Rows a = nvfp4_rows(spread_bf16(cap, K, 1, 1.0f, rng), cap, K);
    const int64_t pk = quant::nvfp4_packed_row_bytes(K);
    const std::vector<uint8_t> bytes = a.packed.download();
    const std::vector<int32_t> counts = {20, 0, 17};  // 37 rows of the 45
    // The token rows of each segment when the groups give them (the layer's padded segments): rows
    // 15-19 and 31-36 are then padding, never written.
    const std::vector<int32_t> tokens = {15, 0, 11};
    DeviceBuffer<int32_t> offsets(offsets_of(counts)), d_tokens(tokens);
    for (const int mode : {0, 1, 2}) {
      const bool gather = mode == 1, token_rows_only = mode == 2;
      SCOPED_TRACE(gather ? "gathered rows" : token_rows_only ? "dense rows, token rows only" : "dense rows");
      const quant::RowGroups groups{token_rows_only ? d_tokens.get() : nullptr, offsets.get(), 3};
      // Gathered: row m reads packed row (m * 7) % cap; rows 5 and 30 are padding.
      std::vector<const void*> ptrs(static_cast<size_t>(cap));
      std::vector<int64_t> src(static_cast<size_t>(cap));
      for (int64_t m = 0; m < cap; ++m) {
        src[m] = gather ? (m * 7) % cap : m;
        ptrs[m] = gather && (m == 5 || m == 30) ? nullptr : a.packed.get() + src[m] * pk;
        if (ptrs[m] == nullptr) src[m] = -1;
      }
      DeviceBuffer<const void*> d_ptrs(ptrs);
      DeviceBuffer<uint16_t> out(static_cast<size_t>(cap * K));
      DeviceBuffer<float> tsi(static_cast<size_t>(cap));
      out.poison();
      tsi.poison();
      quant::nvfp4_expand_rows(gather ? d_ptrs.get() : nullptr, gather ? nullptr : a.packed.get(), gather ? 0 : pk, groups,
                               cap, K, out.get(), tsi.get(), nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = out.download();
      const std::vector<float> got_tsi = tsi.download();
      int64_t bad = 0;
      for (int64_t m = 0; m < 37; ++m) {
        if (token_rows_only && ((m >= 15 && m < 20) || m >= 31)) {  // padding: the 0xFF poison stays
          uint32_t tsi_bits;
          std::memcpy(&tsi_bits, &got_tsi[m], 4);
          bad += tsi_bits != 0xFFFFFFFFu;
          for (int64_t p = 0; p < K; ++p) bad += got[m * K + p] != 0xFFFF;
          continue;
        }
        const uint8_t* row = src[m] < 0 ? nullptr : &bytes[src[m] * pk];
        float want_tsi = 0.0f;
        if (row) std::memcpy(&want_tsi, row + numeric::nvfp4_packed_row_token_scale_offset(K), 4);
        if (std::memcmp(&want_tsi, &got_tsi[m], 4) != 0) ++bad;
        for (int64_t p = 0; p < K; ++p) {
          const int64_t kb = p / 256, i = (p % 256) / 64, r = (p % 64) / 8, q = (p % 8) / 2, h = p % 2;
          const int64_t k = 256 * kb + 16 * gemm::nvfp4_piece_block(static_cast<int>(q), static_cast<int>(i)) +
                            8 * (r / 4) + r % 4 + 4 * h;
          uint16_t want = 0;
          if (row) {
            const float v = numeric::e2m1_to_float(numeric::detail::nvfp4_load_nibble(row, 0, 0, k)) *
                            numeric::e4m3_to_float(row[numeric::nvfp4_packed_row_scales_offset(K) + k / 16]) / 128.0f;
            const __half hv = __float2half_rn(v);
            std::memcpy(&want, &hv, 2);
          }
          if (got[m * K + p] != want && bad++ < 5)
            ADD_FAILURE() << "row " << m << " element " << p << " (k " << k << "): got 0x" << std::hex << got[m * K + p]
                          << " want 0x" << want << std::dec;
        }
      }
      EXPECT_EQ(bad, 0);
      std::printf("nvfp4_expand_rows %s: %lld rows x %lld bitwise, %lld mismatches\n",
                  gather ? "gathered" : token_rows_only ? "dense, token rows only" : "dense", 37LL,
                  static_cast<long long>(K), static_cast<long long>(bad));
    }
  }
}

TEST(GroupedGemmNvfp4, HeuristicPicksCompiledKernels) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_fprop({10, 512, 512, 300, 65u}, nullptr);
  run_nvfp4_w13({10, 512, 512, 20, 66u}, false, nullptr);
}

// More local experts than the 16-token decode tile's shared memory holds scheduler tables for (717):
// the heuristic takes the 32-token tile (GemmKernelTable.HeuristicPicksFitTheirSharedMemory checks
// every pick against its kernel on the host; before, this call failed naming the bytes).
TEST(GroupedGemmNvfp4, HeuristicPicksFitManyExperts) {
  DMOE_REQUIRE_SM90();
  run_nvfp4_fprop({800, 256, 256, 8, 68u}, nullptr);
}

// ---- Mega (grouped_gemm_mega_nvfp4_decode, device/gemm/mega.cuh) ------------------------
// One launch of W13 + SwiGLU, the per-chunk h2 hand-off and W2 against the staged sequence it
// replaces -- W13 FPROP, nvfp4_quantize_rows over the token rows, nvfp4_expand_rows, W2 FPROP, each
// on the same 16-token decode tile -- on the same operands, bit for bit: h3, the packed h2 rows, the
// expanded h2 rows and their token_scale_inv, the clip statistics. Segments are padded to 32 rows
// with 0..12 token rows each (the layer's decode layout; empty experts included); rows past the
// token rows must stay untouched. Run twice (the chunk counters start from zero again), the second
// time gathering x in the launch (x_rows) and checked against nvfp4_expand_rows' x too.

void run_mega_vs_staged(int64_t E, int64_t D, int64_t F, bool clamped, uint32_t seed, bool special_rows = false) {
  std::printf("nvfp4 mega E=%lld D=%lld F=%lld %s\n", static_cast<long long>(E), static_cast<long long>(D),
              static_cast<long long>(F), clamped ? "clamped" : "plain");
  std::mt19937 rng(seed);
  const TokenSegments seg = decode_segments(E, kSlack, rng);
  const std::vector<int32_t>&counts = seg.counts, &tiles = seg.tiles, &offsets = seg.offsets;
  const std::vector<char>& token = seg.token;
  const int64_t cap = seg.cap;
  HostBf16 x_bf16 = spread_bf16(cap, D, 1, 1.0f, rng);
  if (special_rows) poke_special_rows(x_bf16, token, D);
  const Nvfp4Rows x = nvfp4_rows(x_bf16, cap, D);
  const Nvfp4Weight w13 = nvfp4_weight(spread_bf16(E * 2 * F, D, 2 * F, 1.0f / std::sqrt(float(D)), rng), E, 2 * F, D);
  const Nvfp4Weight w2 = nvfp4_weight(spread_bf16(E * D, F, D, 1.0f / std::sqrt(float(F)), rng), E, D, F);
  DeviceBuffer<int32_t> d_counts(counts), d_tiles(tiles), d_offsets(offsets);
  const quant::RowGroups groups{d_tiles.get(), d_offsets.get(), static_cast<int32_t>(E)};
  const int64_t pk_x = quant::nvfp4_packed_row_bytes(D), pk_h = quant::nvfp4_packed_row_bytes(F);
  const GroupedGemmConfig cfg13 = decode16_config(GroupedGemmOp::kFpropSwiglu, kNvfp4ExpandedRows, kNvfp4Weight);
  const GroupedGemmConfig cfg2 = decode16_config(GroupedGemmOp::kFprop, kNvfp4ExpandedRows, kNvfp4Weight);

  // What each path owns: the expanded x rows are only read; the token scales, h2 and the rows are
  // written by both.
  DeviceBuffer<uint16_t> x_exp(static_cast<size_t>(cap * std::max(D, F)));
  x_exp.poison();
  struct Path {
    DeviceBuffer<float> scales;
    DeviceBuffer<uint16_t> h2, h2_exp, out;
    DeviceBuffer<uint8_t> packed_h2;
    DeviceBuffer<float> clip;
  };
  auto make_path = [&] {
    Path p{DeviceBuffer<float>(static_cast<size_t>(cap)), DeviceBuffer<uint16_t>(static_cast<size_t>(cap * F)),
           DeviceBuffer<uint16_t>(static_cast<size_t>(cap * F)), DeviceBuffer<uint16_t>(static_cast<size_t>(cap * D)),
           DeviceBuffer<uint8_t>(static_cast<size_t>(cap * pk_h)), DeviceBuffer<float>(3)};
    p.h2.poison();
    p.h2_exp.poison();
    p.out.poison();
    DMOE_CUDA_CHECK(cudaMemset(p.packed_h2.get(), 0xAB, static_cast<size_t>(cap * pk_h)));
    quant::nvfp4_expand_rows(nullptr, x.packed.get(), pk_x, groups, cap, D, x_exp.get(), p.scales.get(), nullptr);
    return p;
  };
  auto common = [&](const Path& p, int64_t n, int64_t k, const Nvfp4Weight& w) {
    GroupedGemmCommon c;
    c.counts = d_counts.get();
    c.tile_rows = d_tiles.get();
    c.e_local = E;
    c.m_capacity = cap;
    c.n = n;
    c.k = k;
    c.a_format = kNvfp4ExpandedRows;
    c.b_format = kNvfp4Weight;
    c.scales = OperandScales{p.scales.get(), 0, w.s.get(), w.gsi.get()};
    return c;
  };
  auto args = [&](const Path& p, void* h2, W13FpropArgs& a13, FpropArgs& a2) {
    a13.common = common(p, 2 * F, D, w13);
    a13.a = x_exp.get();
    a13.w13 = w13.q.get();
    a13.h2 = h2;
    a13.activation = clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
    a13.swiglu_limit = 0.6f;
    a13.clip_stats = p.clip.get();
    a13.clip_limit = 0.5f;
    a13.clip_rows = d_tiles.get();
    a2.common = common(p, D, F, w2);
    a2.w = w2.q.get();
    a2.out = p.out.get();
  };

  Path staged = make_path();
  {
    W13FpropArgs a13;
    FpropArgs a2;
    args(staged, staged.h2.get(), a13, a2);
    a13.common.config = &cfg13;
    a2.common.config = &cfg2;
    grouped_gemm_w13_fprop(a13, nullptr);
    quant::nvfp4_quantize_rows(quant::Bf16Matrix{staged.h2.get(), cap, F, F},
                               quant::nvfp4_packed_rows_out(staged.packed_h2.get(), pk_h, F), nullptr,
                               d_offsets.get() + E, groups);
    quant::nvfp4_expand_rows(nullptr, staged.packed_h2.get(), pk_h, groups, cap, F, staged.h2_exp.get(),
                             staged.scales.get(), nullptr);
    a2.a = staged.h2_exp.get();
    grouped_gemm_fprop(a2, nullptr);
  }
  // Call 0 takes the x rows expanded beforehand; call 1 gathers them in the launch (x_rows: the
  // packed rows by row pointer, as from the dispatch windows) into a poisoned buffer of its own.
  Path mega = make_path();
  std::vector<uint64_t> row_ptrs(static_cast<size_t>(cap), 0);
  for (int64_t m = 0; m < cap; ++m)
    if (token[static_cast<size_t>(m)]) row_ptrs[m] = reinterpret_cast<uint64_t>(x.packed.get() + m * pk_x);
  DeviceBuffer<uint64_t> d_row_ptrs(row_ptrs);
  DeviceBuffer<uint16_t> mx_exp(static_cast<size_t>(cap * std::max(D, F)));
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call);
    const bool gather = call == 1;
    if (gather) {  // fresh state: poisoned h2, h3, x and token scales
      mega.h2.poison();
      mega.out.poison();
      mx_exp.poison();
      DMOE_CUDA_CHECK(cudaMemset(mega.scales.get(), 0xFF, static_cast<size_t>(cap) * 4));
    }
    W13FpropArgs a13;
    FpropArgs a2;
    args(mega, mega.h2.get(), a13, a2);
    if (gather) a13.a = mx_exp.get();
    a2.a = mega.h2.get();
    const auto* x_rows = gather ? reinterpret_cast<const void* const*>(d_row_ptrs.get()) : nullptr;
    grouped_gemm_mega_nvfp4_decode(a13, a2, MegaNvfp4Handoff{mega.packed_h2.get(), pk_h, x_rows}, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    auto diff_rows = [&](const char* what, const auto& got, const auto& want, int64_t row_elems) {
      int64_t bad = 0, touched = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        const size_t m = i / static_cast<size_t>(row_elems);
        if (token[m]) bad += got[i] != want[i];
        else touched += got[i] != want[i];  // both untouched (poison / fill) where no token row lies
      }
      EXPECT_EQ(bad, 0) << what << ": elements of token rows differ from the staged pipeline";
      EXPECT_EQ(touched, 0) << what << ": rows past the token rows differ (written by one path only)";
    };
    diff_rows("h3", mega.out.download(), staged.out.download(), D);
    diff_rows("packed h2", mega.packed_h2.download(), staged.packed_h2.download(), pk_h);
    diff_rows("expanded h2", mega.h2.download(), staged.h2_exp.download(), F);
    if (gather) {  // x expanded in the launch: the token rows as nvfp4_expand_rows writes them
      const std::vector<uint16_t> got_x = mx_exp.download(), want_x = x_exp.download();
      int64_t bad_x = 0;
      for (int64_t m = 0; m < cap; ++m)
        if (token[static_cast<size_t>(m)])
          bad_x += std::memcmp(&got_x[m * D], &want_x[m * D], static_cast<size_t>(D) * 2) != 0;
      EXPECT_EQ(bad_x, 0) << "x rows expanded in the launch differ from nvfp4_expand_rows'";
    }
    const std::vector<float> ms = mega.scales.download(), ss = staged.scales.download();
    int64_t bad_scale = 0;
    for (int64_t m = 0; m < cap; ++m) bad_scale += token[m] && std::memcmp(&ms[m], &ss[m], 4) != 0;
    EXPECT_EQ(bad_scale, 0) << "h2 token_scale_inv differs";
    EXPECT_EQ(mega.clip.download(), staged.clip.download()) << "clip statistics differ";
  }
}

TEST(MegaNvfp4Decode, MatchesTheStagedSequenceBitwise) {
  DMOE_REQUIRE_SM90();
  run_mega_vs_staged(16, 512, 768, false, 91u);
}
TEST(MegaNvfp4Decode, ClampedManyExpertsLongK) {
  DMOE_REQUIRE_SM90();
  run_mega_vs_staged(72, 1024, 1280, true, 92u);  // more chunks than CTAs: W2 tiles wait on the W13 tail
}
TEST(MegaNvfp4Decode, HandoffRowsLongerThanTheSlice) {
  DMOE_REQUIRE_SM90();
  // F = 2304: a hand-off row takes two slice-fulls (1280 + 1024 values) in each pass (G100).
  run_mega_vs_staged(8, 512, 2304, false, 93u);
}
TEST(MegaNvfp4Decode, NanAndOverflowRows) {
  DMOE_REQUIRE_SM90();
  run_mega_vs_staged(16, 512, 768, false, 95u, /*special_rows=*/true);
}
TEST(MegaNvfp4Decode, XRowsLongerThanTheSlice) {
  DMOE_REQUIRE_SM90();
  // D = 4608: a packed x row (2608 bytes) does not fit a warp's 2560-byte slice, so the x task expands
  // it from the dispatch rows directly (G100); the rows above take the slice.
  run_mega_vs_staged(8, 4608, 512, false, 94u);
}
TEST(MegaNvfp4Decode, RefusesWhatItCannotRun) {
  DMOE_REQUIRE_SM90();
  W13FpropArgs a13;
  FpropArgs a2;
  EXPECT_THROW(grouped_gemm_mega_nvfp4_decode(a13, a2, MegaNvfp4Handoff{}, nullptr), Error);
}

}  // namespace
}  // namespace dist_moe::testing
