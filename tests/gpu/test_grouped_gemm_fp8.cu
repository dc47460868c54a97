// The E4M3 grouped GEMMs -- FP8 blockwise (device/gemm/mainloop_fp8_blockwise.cuh) and MXFP8
// (mainloop_mxfp8.cuh) -- against the host reference on the operands they read: A rows and weights are quantized on the GPU (the quantizers
// are bitwise equal to the oracle: test_quantize.cu), downloaded, dequantized exactly on the host
// (E4M3 value x FP32 scale, in double) and multiplied with double sums rounded once to FP32, then
// BF16 -- the GPU's only freedom is the order and precision of its FP32 accumulation. Rows get
// per-row magnitudes spread over 2^-6 .. 2^6 and weight blocks likewise, so a scale applied to the
// wrong row or weight block fails by orders of magnitude, not by rounding. Every compiled
// configuration runs (test parameter), on ragged counts with empty experts, tails that are not
// tile multiples and rows past sum(counts) that must stay untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "grouped_gemm_test_util.h"
#include "mxfp8_test_util.h"
#include "quant/quantize.h"

namespace dist_moe::testing {
namespace {

constexpr int64_t kSlack = 37;  // rows past sum(counts): never written

// Counts with the awkward sizes first (empty, 1, tile +- 1), then random ones.
std::vector<int32_t> fp8_counts(int64_t e_local, int max_rows, std::mt19937& rng) {
  static const int32_t kAwkward[] = {0, 1, 127, 128, 129, 0, 255, 300};
  std::uniform_int_distribution<int> size(0, max_rows);
  std::vector<int32_t> c(static_cast<size_t>(e_local));
  for (int64_t e = 0; e < e_local; ++e) c[e] = e < 8 && kAwkward[e] <= max_rows ? kAwkward[e] : size(rng);
  return c;
}

struct Fp8Rows {
  DeviceBuffer<uint8_t> q;
  DeviceBuffer<float> s;
  int64_t ld = 0;
  std::vector<float> vals;  // the dequantized values the GEMM multiplies
};
struct Fp8Weight {
  DeviceBuffer<uint8_t> q, q_t;  // [E, N, K] and the transposed copy [E, K, N]
  DeviceBuffer<float> s, s_t;    // [E, N/128, K/128] and [E, K/128, N/128]
  std::vector<float> vals;       // dequantized [E, N, K]
};

// A [cap, C] in 1x128 rows (k-block-major scales [C/128, ld]), on the GPU; dequantized on the host.
Fp8Rows quantize_rows(const HostBf16& a, int64_t cap, int64_t C) {
  Fp8Rows o;
  o.ld = (cap + 3) / 4 * 4;
  DeviceBuffer<uint16_t> d_a(a.bits);
  o.q = DeviceBuffer<uint8_t>(static_cast<size_t>(cap * C));
  o.s = DeviceBuffer<float>(static_cast<size_t>(C / 128 * o.ld));
  o.s.poison(0);  // the padding columns of the scale rows: read by no kernel, defined anyway
  quant::fp8_blockwise_quantize_rows(quant::Bf16Matrix{d_a.get(), cap, C, C},
                                     quant::Fp8BlockwiseOut{o.q.get(), C, o.s.get(), 1, o.ld}, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> q = o.q.download();
  const std::vector<float> s = o.s.download();
  o.vals.resize(q.size());
  for (int64_t r = 0; r < cap; ++r)
    for (int64_t c = 0; c < C; ++c)
      o.vals[r * C + c] =
          static_cast<float>(static_cast<double>(numeric::e4m3_to_float(q[r * C + c])) * s[(c / 128) * o.ld + r]);
  return o;
}

// W [E, N, K] in 128x128 blocks (and the transposed copy DGRAD reads), on the GPU; dequantized.
Fp8Weight quantize_weight(const HostBf16& w, int64_t E, int64_t N, int64_t K) {
  Fp8Weight o;
  DeviceBuffer<uint16_t> d_w(w.bits);
  o.q = DeviceBuffer<uint8_t>(static_cast<size_t>(E * N * K));
  o.q_t = DeviceBuffer<uint8_t>(o.q.size());
  o.s = DeviceBuffer<float>(static_cast<size_t>(E * (N / 128) * (K / 128)));
  o.s_t = DeviceBuffer<float>(o.s.size());
  quant::fp8_blockwise_quantize_weight(d_w.get(), E, N, K, o.q.get(), o.s.get(), o.q_t.get(), o.s_t.get(), nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint8_t> q = o.q.download();
  const std::vector<float> s = o.s.download();
  o.vals.resize(q.size());
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const size_t i = static_cast<size_t>((e * N + n) * K + k);
        o.vals[i] = static_cast<float>(static_cast<double>(numeric::e4m3_to_float(q[i])) *
                                       s[(e * (N / 128) + n / 128) * (K / 128) + k / 128]);
      }
  return o;
}

// The MXFP8 operands: A rows [cap, C] in 1x32 blocks (E8M0 scales [cap, C/32]) and W [E, N, K] in
// 32x32 tiles (the FPROP scale view [E*N, K/32] the GEMM reads; the transposed copy DGRAD reads), quantized on the GPU
// and dequantized on the host (exact in FP32: E4M3 value x 2^(e - 127)).
struct Mxfp8Rows {
  DeviceBuffer<uint8_t> q, s;
  std::vector<float> vals;
};
struct Mxfp8Weight {
  Mxfp8TileWeight w;
  std::vector<float> vals;
};

Mxfp8Rows mxfp8_rows(const HostBf16& a, int64_t cap, int64_t C) {
  Mxfp8Rows o;
  DeviceBuffer<uint16_t> d_a(a.bits);
  o.q = DeviceBuffer<uint8_t>(static_cast<size_t>(cap * C));
  o.s = DeviceBuffer<uint8_t>(static_cast<size_t>(cap * (C / 32)));
  quant::mxfp8_quantize_rows(quant::Bf16Matrix{d_a.get(), cap, C, C}, quant::Mxfp8Out{o.q.get(), C, o.s.get(), C / 32, 1},
                             nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  o.vals = mxfp8_row_values(o.q, o.s, cap, C);
  return o;
}

Mxfp8Weight mxfp8_weight(const HostBf16& w, int64_t E, int64_t N, int64_t K) {
  Mxfp8Weight o;
  o.w = quantize_mxfp8_weight(w.bits, E, N, K);
  o.vals = o.w.values();
  return o;
}

// The FPROP operands of one case in either recipe, with their dequantized values; fill() sets a
// call's formats and scales.
enum class Recipe { kFp8Blockwise, kMxfp8 };
const char* recipe_name(Recipe r) { return r == Recipe::kMxfp8 ? "mxfp8" : "fp8"; }

struct FpropOperands {
  Recipe recipe = Recipe::kFp8Blockwise;
  Fp8Rows a;
  Fp8Weight w;
  Mxfp8Rows mx_a;
  Mxfp8Weight mx_w;
  const void* a_q() const { return recipe == Recipe::kMxfp8 ? mx_a.q.get() : a.q.get(); }
  const void* w_q() const { return recipe == Recipe::kMxfp8 ? mx_w.w.q.get() : w.q.get(); }
  const std::vector<float>& a_vals() const { return recipe == Recipe::kMxfp8 ? mx_a.vals : a.vals; }
  const std::vector<float>& w_vals() const { return recipe == Recipe::kMxfp8 ? mx_w.vals : w.vals; }
  void fill(GroupedGemmCommon& c) const {
    if (recipe == Recipe::kMxfp8) {
      c.a_format = kMxfp8Rows;
      c.b_format = kMxfp8Weight;
      c.scales = OperandScales{mx_a.s.get(), c.k / 32, mx_w.w.s.get()};
    } else {
      c.a_format = kFp8BlockwiseRows;
      c.b_format = kFp8BlockwiseWeight;
      c.scales = OperandScales{a.s.get(), a.ld, w.s.get()};
    }
  }
};

// Rows get per-row magnitudes, weights per-128-row-block ones (spread_bf16).
FpropOperands fprop_operands(Recipe r, int64_t E, int64_t N, int64_t K, int64_t cap, std::mt19937& rng) {
  FpropOperands o;
  o.recipe = r;
  const HostBf16 a = spread_bf16(cap, K, 1, 1.0f, rng);
  const HostBf16 w = spread_bf16(E * N, K, 128, 1.0f / std::sqrt(float(K)), rng);
  if (r == Recipe::kMxfp8) {
    o.mx_a = mxfp8_rows(a, cap, K);
    o.mx_w = mxfp8_weight(w, E, N, K);
  } else {
    o.a = quantize_rows(a, cap, K);
    o.w = quantize_weight(w, E, N, K);
  }
  return o;
}

// E4M3 x FP32-scale products are exact in FP32 while they stay in range; with these magnitudes
// (|x| <= 64) they do, so the float copies above are the exact dequantized values.

std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::fabs(x);
  return v;
}

// The FP8 tensor cores add the 32 products of one k32 step, and keep the running sum, with about
// 14 significant bits aligned to the largest term, not FP32's 24 (DeepSeek-V3 report, section
// 3.3.2; the reason the recipe promotes into FP32 every 128 of K). An output element's error is
// then bounded by the sum of its products' magnitudes, sum_k |a_k w_k|, times ~2^-14 per term that
// loses bits; worst case about 2^-9, measured 2^-15 .. 2^-18 on these inputs (session 17 run 3).
// Each element must satisfy
//   |got - ref| <= atol + rtol |ref| + 2^-12 sum_k |a_k w_k| [+ 2^-8 sum_steps max_step |a_k w_k|]
// (BF16 rounding of the output and the FP8 accumulation), and the relative L2 error over the
// tensor stays below BF16's 5e-3 -- a scale applied to the wrong row or weight block fails both
// by orders of magnitude. The bracketed term is WGRAD's: its contraction runs over tokens, whose
// magnitudes differ by up to 2^12 here, so one k32 step can hold a product 2^24 times the others,
// and the others lose their low bits against it (up to 32 x 2^-13 of the largest; measured 2^-11.2
// of sum |a.w| on the spread tokens, s18 r1). WGRAD's indexing is checked bit for bit by
// GroupedGemmFp8WgradExact. The worst ratio error / sum|a.w| is printed.
void expect_close_fp8(const std::string& what, const std::function<double(int64_t)>& got, const std::vector<float>& ref,
                      const std::vector<float>& sum_abs, const std::vector<float>* step_max = nullptr) {
  const Tolerance tol;
  const double kAccumBound = std::ldexp(1.0, -12);
  const int64_t n = static_cast<int64_t>(ref.size());
  int64_t bad = 0, unwritten = 0;
  double err2 = 0.0, ref2 = 0.0, worst_ratio = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got(i), r = ref[i];
    if (std::isnan(g) && !std::isnan(r)) {
      if (unwritten++ < 5) ADD_FAILURE() << what << ": element " << i << " is NaN, expected " << r;
      continue;
    }
    const double d = std::fabs(g - r);
    err2 += d * d;
    ref2 += r * r;
    const double excess = d - (tol.atol + tol.rtol * std::fabs(r));
    if (excess > 0 && sum_abs[i] > 0) worst_ratio = std::max(worst_ratio, excess / sum_abs[i]);
    const double bound = kAccumBound * sum_abs[i] + (step_max ? std::ldexp((*step_max)[i], -8) : 0.0);
    if (!(excess <= bound)) {
      if (bad++ < 5)
        ADD_FAILURE() << what << ": element " << i << " got " << g << " expected " << r << " (sum|a.w| "
                      << sum_abs[i] << ")";
    }
  }
  const double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_EQ(unwritten, 0) << what;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements outside the bound";
  EXPECT_LT(rel_l2, tol.rel_l2) << what << ": relative L2 error";
  std::printf("  %-24s n=%-9lld relL2=%.2e worst excess/sum|a.w|=2^%.1f (bound 2^-12) %s\n", what.c_str(),
              static_cast<long long>(n), rel_l2, worst_ratio > 0 ? std::log2(worst_ratio) : -99.0,
              (bad || unwritten || rel_l2 >= tol.rel_l2) ? "FAIL" : "PASS");
}

struct Fp8Case {
  int64_t e_local, n, k;
  int max_rows;
  uint32_t seed;
};

// The call throws a dist_moe::Error whose text contains `fragment`.
void expect_error(const std::function<void()>& call, const std::string& fragment) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

std::vector<GemmParam> fp8_params(GroupedGemmOp op) {
  return format_params(op, DType::kBFloat16, kFp8BlockwiseRows, kFp8BlockwiseWeight);
}

// The call's sizes and configuration (formats and scales: FpropOperands::fill or the overload
// below).
GroupedGemmCommon fp8_common(const DeviceBuffer<int32_t>& counts, const Fp8Case& cs, int64_t cap,
                             const GroupedGemmConfig* cfg) {
  GroupedGemmCommon c;
  c.counts = counts.get();
  c.e_local = cs.e_local;
  c.m_capacity = cap;
  c.n = cs.n;
  c.k = cs.k;
  c.config = cfg;
  return c;
}
// FP8 blockwise; `w_scales` is the weight (or its transposed copy's) scale grid.
GroupedGemmCommon fp8_common(const DeviceBuffer<int32_t>& counts, const Fp8Case& cs, int64_t cap, const Fp8Rows& a,
                             const DeviceBuffer<float>& w_scales, const GroupedGemmConfig* cfg) {
  GroupedGemmCommon c = fp8_common(counts, cs, cap, cfg);
  c.a_format = kFp8BlockwiseRows;
  c.b_format = kFp8BlockwiseWeight;
  c.scales = OperandScales{a.s.get(), a.ld, w_scales.get()};
  return c;
}

// token_rows_only: tile_rows below the counts (tile_rows_case); the swap-AB tiles leave the dropped
// rows unwritten.
void run_fp8_fprop(const Fp8Case& cs, const GroupedGemmConfig* cfg, Recipe recipe = Recipe::kFp8Blockwise,
                   bool token_rows_only = false) {
  std::mt19937 rng(cs.seed);
  const std::vector<int32_t> counts = fp8_counts(cs.e_local, cs.max_rows, rng);
  const int64_t M = total_rows(counts), cap = M + kSlack;
  std::printf("%s fprop E=%lld n=%lld k=%lld rows=%lld (%s)\n", recipe_name(recipe), static_cast<long long>(cs.e_local),
              static_cast<long long>(cs.n), static_cast<long long>(cs.k), static_cast<long long>(M),
              cfg ? cfg->name().c_str() : "heuristic pick");
  const FpropOperands ops = fprop_operands(recipe, cs.e_local, cs.n, cs.k, cap, rng);
  const std::vector<float> ref = rounded_bf16(ref_fprop(ops.a_vals(), ops.w_vals(), counts, cs.n, cs.k));
  const std::vector<float> sum_abs = ref_fprop(absolute(ops.a_vals()), absolute(ops.w_vals()), counts, cs.n, cs.k);

  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_out(static_cast<size_t>(cap * cs.n));
  d_out.poison();
  FpropArgs args;
  args.common = fp8_common(d_counts, cs, cap, cfg);
  ops.fill(args.common);
  args.a = ops.a_q();
  args.w = ops.w_q();
  args.out = d_out.get();
  const TileRowsCase rows = tile_rows_case(counts, token_rows_only);
  DeviceBuffer<int32_t> d_tiles(rows.tiles);
  if (token_rows_only) args.common.tile_rows = d_tiles.get();
  grouped_gemm_fprop(args, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = d_out.download();
  const std::string what = std::string(recipe_name(recipe)) + " fprop out";
  expect_close_fp8(
      what, [&](int64_t i) { return rows.token_row[static_cast<size_t>(i / cs.n)] ? bf16_value(out, i) : double(ref[i]); },
      ref, sum_abs);
  expect_dropped_rows_untouched(out, rows, cs.n);
  expect_rows_untouched(what, out, M, cs.n);
}

// W13: h1 against the reference GEMM (FP8 bound); h2 against SwiGLU of the h1 the GPU stored, so
// the epilogue is checked on its own input rather than through the accumulation differences of h1.
void run_fp8_w13(const Fp8Case& cs, bool clamped, const GroupedGemmConfig* cfg, Recipe recipe = Recipe::kFp8Blockwise) {
  std::mt19937 rng(cs.seed);
  const std::vector<int32_t> counts = fp8_counts(cs.e_local, cs.max_rows, rng);
  const int64_t M = total_rows(counts), cap = M + kSlack, F = cs.n / 2;
  std::printf("%s w13 E=%lld 2F=%lld D=%lld rows=%lld %s (%s)\n", recipe_name(recipe), static_cast<long long>(cs.e_local),
              static_cast<long long>(cs.n), static_cast<long long>(cs.k), static_cast<long long>(M),
              clamped ? "clamped" : "plain", cfg ? cfg->name().c_str() : "heuristic pick");
  const FpropOperands ops = fprop_operands(recipe, cs.e_local, cs.n, cs.k, cap, rng);
  reference::SwigluParams act;
  act.activation = clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
  act.alpha = 1.702f;
  act.limit = 0.6f;  // small: clamping happens
  const std::vector<float> ref_h1 = rounded_bf16(ref_fprop(ops.a_vals(), ops.w_vals(), counts, cs.n, cs.k));
  const std::vector<float> sum_abs = ref_fprop(absolute(ops.a_vals()), absolute(ops.w_vals()), counts, cs.n, cs.k);

  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_h1(static_cast<size_t>(cap * cs.n)), d_h2(static_cast<size_t>(cap * F));
  d_h1.poison();
  d_h2.poison();
  W13FpropArgs args;
  args.common = fp8_common(d_counts, cs, cap, cfg);
  ops.fill(args.common);
  args.a = ops.a_q();
  args.w13 = ops.w_q();
  args.h1 = d_h1.get();
  args.h2 = d_h2.get();
  args.activation = act.activation;
  args.swiglu_alpha = act.alpha;
  args.swiglu_limit = act.limit;
  grouped_gemm_w13_fprop(args, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> h1 = d_h1.download(), h2 = d_h2.download();
  const std::string what = std::string(recipe_name(recipe)) + " w13";
  expect_close_fp8(what + " h1", [&](int64_t i) { return bf16_value(h1, i); }, ref_h1, sum_abs);
  std::vector<float> gpu_h1(static_cast<size_t>(M * cs.n));
  for (int64_t i = 0; i < M * cs.n; ++i) gpu_h1[i] = static_cast<float>(bf16_value(h1, i));
  expect_close(what + " h2 = swiglu(gpu h1)", [&](int64_t i) { return bf16_value(h2, i); },
               ref_swiglu_h2(gpu_h1, F, act));
  expect_rows_untouched(what + " h1", h1, M, cs.n);
  expect_rows_untouched(what + " h2", h2, M, F);
}

// DGRAD: grad_a [cap, K] = grad_out [cap, N] . W[e] through the weight's transposed copy
// (kFp8BlockwiseWeightT, written by the weight quantizer next to q); the reference multiplies the
// dequantized grad_out rows with the dequantized untransposed weight.
void run_fp8_dgrad(const Fp8Case& cs, const GroupedGemmConfig* cfg, bool accumulate,
                   Recipe recipe = Recipe::kFp8Blockwise) {
  std::mt19937 rng(cs.seed);
  const std::vector<int32_t> counts = fp8_counts(cs.e_local, cs.max_rows, rng);
  const int64_t M = total_rows(counts), cap = M + kSlack, N = cs.n, K = cs.k, E = cs.e_local;
  std::printf("%s dgrad E=%lld n=%lld k=%lld rows=%lld%s (%s)\n", recipe_name(recipe), static_cast<long long>(E),
              static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(M),
              accumulate ? " accumulate" : "", cfg ? cfg->name().c_str() : "heuristic pick");
  const HostBf16 g_bf16 = spread_bf16(cap, N, 1, 1.0f, rng);  // blocks along N
  const HostBf16 w_bf16 = spread_bf16(E * N, K, 128, 1.0f / std::sqrt(float(N)), rng);
  const bool mx = recipe == Recipe::kMxfp8;
  Fp8Rows g;
  Fp8Weight w;
  Mxfp8Rows mg;
  Mxfp8Weight mw;
  if (mx) {
    mg = mxfp8_rows(g_bf16, cap, N);
    mw = mxfp8_weight(w_bf16, E, N, K);
  } else {
    g = quantize_rows(g_bf16, cap, N);
    w = quantize_weight(w_bf16, E, N, K);
  }
  const std::vector<float>& g_vals = mx ? mg.vals : g.vals;
  const std::vector<float>& w_vals = mx ? mw.vals : w.vals;
  std::vector<float> ref = ref_dgrad(g_vals, w_vals, counts, N, K);
  const std::vector<float> sum_abs = ref_dgrad(absolute(g_vals), absolute(w_vals), counts, N, K);
  const HostBf16 prev = random_bf16(static_cast<size_t>(cap * K), 4.0f, rng);
  const std::vector<float> prev_vals(prev.vals.begin(), prev.vals.begin() + M * K);
  apply_output_store(ref, prev_vals, accumulate, false);

  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_out(static_cast<size_t>(cap * K));
  if (accumulate) {
    std::vector<uint16_t> init = prev.bits;
    std::fill(init.begin() + M * K, init.end(), uint16_t{0xFFFF});
    d_out.upload(init);
  } else {
    d_out.poison();
  }
  DgradArgs args;
  args.common = fp8_common(d_counts, cs, cap, cfg);
  if (mx) {
    args.common.a_format = kMxfp8Rows;
    args.common.b_format = kMxfp8WeightT;
    args.common.scales = OperandScales{mg.s.get(), N / 32, mw.w.s_dgrad.get()};
    args.grad_out = mg.q.get();
    args.w = mw.w.q_t.get();
  } else {
    args.common = fp8_common(d_counts, cs, cap, g, w.s_t, cfg);
    args.common.b_format = kFp8BlockwiseWeightT;
    args.grad_out = g.q.get();
    args.w = w.q_t.get();
  }
  args.grad_a = d_out.get();
  args.accumulate = accumulate;
  grouped_gemm_dgrad(args, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = d_out.download();
  const std::string what = std::string(recipe_name(recipe)) + " dgrad grad_a";
  expect_close_fp8(what, [&](int64_t i) { return bf16_value(out, i); }, ref, sum_abs);
  expect_rows_untouched(what, out, M, K);
}

// One FP8-blockwise WGRAD call over transposed columns (g [N, cap], x [K, cap], scales
// [cap/128, N] and [cap/128, K]), its output first holding `prev` (accumulate) or poison; returns
// the output's bytes.
struct Fp8WgradCall {
  const int32_t* counts;
  int64_t e_local, cap, n, k;
  const GroupedGemmConfig* cfg;
  const DeviceBuffer<uint8_t>& g_q;
  const DeviceBuffer<float>& g_s;
  const DeviceBuffer<uint8_t>& x_q;
  const DeviceBuffer<float>& x_s;
  DType out_dtype;
  bool accumulate;
  // x as a compact column bundle instead ([K, R] then its scales, at x_bundle + *x_offset; R =
  // *x_rows): x_q and x_s unused.
  const uint8_t* x_bundle = nullptr;
  const int64_t* x_offset = nullptr;
  const int32_t* x_rows = nullptr;
};

std::vector<uint8_t> fp8_wgrad_call(const Fp8WgradCall& c, const HostBf16& prev) {
  const bool fp32 = c.out_dtype == DType::kFloat32;
  const size_t out_bytes = static_cast<size_t>(c.e_local * c.n * c.k) * (fp32 ? 4 : 2);
  DeviceBuffer<uint8_t> d_out(out_bytes);
  if (c.accumulate) {
    std::vector<uint8_t> init(out_bytes);
    for (size_t i = 0; i < prev.vals.size(); ++i) {
      if (fp32) std::memcpy(&init[4 * i], &prev.vals[i], 4);
      else std::memcpy(&init[2 * i], &prev.bits[i], 2);
    }
    d_out.upload(init);
  } else {
    d_out.poison();
  }
  WgradArgs args;
  args.common.counts = c.counts;
  args.common.e_local = c.e_local;
  args.common.m_capacity = c.cap;
  args.common.n = c.n;
  args.common.k = c.k;
  args.common.config = c.cfg;
  args.common.a_format = kFp8BlockwiseRowsT;
  args.common.b_format = kFp8BlockwiseRowsT;
  args.common.scales = OperandScales{c.g_s.get(), c.n, c.x_bundle ? nullptr : c.x_s.get()};
  args.grad_out = c.g_q.get();
  args.a = c.x_bundle ? static_cast<const void*>(c.x_bundle) : c.x_q.get();
  args.a_offset = c.x_offset;
  args.a_compact_rows = c.x_rows;
  args.grad_w = d_out.get();
  args.out_dtype = c.out_dtype;
  args.accumulate = c.accumulate;
  grouped_gemm_wgrad(args, nullptr);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return d_out.download();
}

// sum over the k32 steps of out[e, n, k] of the step's largest |g[m, n] x[m, k]| (steps of 32
// tokens from each expert's first one): expect_close_fp8's WGRAD term.
std::vector<float> wgrad_step_max(const std::vector<float>& g, const std::vector<float>& x,
                                  const std::vector<int32_t>& counts, int64_t N, int64_t K) {
  const std::vector<int64_t> off = offsets_of(counts);
  const int64_t E = static_cast<int64_t>(counts.size());
  std::vector<float> out(static_cast<size_t>(E * N * K));
  parallel_for(E * N, [&](int64_t en) {
    const int64_t e = en / N, n = en % N;
    std::vector<double> sum(static_cast<size_t>(K), 0.0), step(static_cast<size_t>(K), 0.0);
    for (int64_t m = off[e]; m < off[e + 1]; ++m) {
      const double gv = std::fabs(g[m * N + n]);
      for (int64_t k = 0; k < K; ++k) step[k] = std::max(step[k], gv * std::fabs(x[m * K + k]));
      if ((m - off[e]) % 32 == 31 || m + 1 == off[e + 1])
        for (int64_t k = 0; k < K; ++k) {
          sum[k] += step[k];
          step[k] = 0.0;
        }
    }
    for (int64_t k = 0; k < K; ++k) out[en * K + k] = static_cast<float>(sum[k]);
  });
  return out;
}

// WGRAD over the transposed columns: grad_w[e] [N, K] = sum over the expert's (padded) tokens of
// grad_out^T [N, tokens] x^T [K, tokens]. Both operands go through the GPU rows+columns quantizer
// with 128-token groups (padding tokens quantize to zeros), whose column outputs the GEMM reads;
// counts given to the GEMM are the padded ones.
void run_fp8_wgrad(const std::vector<int32_t>& counts, int64_t N, int64_t K, uint32_t seed, DType out_dtype,
                   bool accumulate, const GroupedGemmConfig* cfg) {
  const int64_t E = static_cast<int64_t>(counts.size());
  std::vector<int32_t> padded(counts.size()), offsets(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) {
    padded[e] = (counts[e] + 127) / 128 * 128;
    offsets[e + 1] = offsets[e] + padded[e];
  }
  const int64_t used = offsets.back(), cap = used + 128;  // a spare token block the GEMM never reads
  std::printf("fp8 wgrad E=%lld n=%lld k=%lld tokens=%lld%s%s (%s)\n", static_cast<long long>(E),
              static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(used),
              out_dtype == DType::kFloat32 ? " fp32" : " bf16", accumulate ? " accumulate" : "",
              cfg ? cfg->name().c_str() : "heuristic pick");
  std::mt19937 rng(seed);
  DeviceBuffer<int32_t> d_counts(counts), d_offsets(offsets), d_padded(padded);
  const quant::RowGroups groups{d_counts.get(), d_offsets.get(), static_cast<int32_t>(E)};
  // Quantize rows [cap, C] into the transposed columns [C, cap] + scales [cap / 128, C]; return the
  // dequantized values as row-major [cap, C] (padding and spare tokens 0).
  auto columns = [&](int64_t C, DeviceBuffer<uint8_t>& q, DeviceBuffer<float>& sc) {
    const HostBf16 h = spread_bf16(cap, C, 1, 1.0f, rng);
    DeviceBuffer<uint16_t> d(h.bits);
    q = DeviceBuffer<uint8_t>(static_cast<size_t>(C * cap));
    sc = DeviceBuffer<float>(static_cast<size_t>(cap / 128 * C));
    q.poison(0);
    sc.poison(0);
    quant::fp8_blockwise_quantize_rows_cols(quant::Bf16Matrix{d.get(), cap, C, C}, groups, quant::Fp8BlockwiseOut{},
                                            quant::Fp8BlockwiseOut{q.get(), cap, sc.get(), 1, C}, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<uint8_t> qh = q.download();
    const std::vector<float> sh = sc.download();
    std::vector<float> vals(static_cast<size_t>(cap * C), 0.0f);
    for (int64_t m = 0; m < used; ++m)
      for (int64_t c = 0; c < C; ++c)
        vals[m * C + c] = static_cast<float>(static_cast<double>(numeric::e4m3_to_float(qh[c * cap + m])) *
                                             sh[(m / 128) * C + c]);
    return vals;
  };
  DeviceBuffer<uint8_t> g_q, x_q;
  DeviceBuffer<float> g_s, x_s;
  const std::vector<float> g = columns(N, g_q, g_s), x = columns(K, x_q, x_s);
  std::vector<float> ref = ref_wgrad(g, x, padded, N, K);
  const std::vector<float> sum_abs = ref_wgrad(absolute(g), absolute(x), padded, N, K);
  const std::vector<float> step_max = wgrad_step_max(g, x, padded, N, K);
  const bool fp32 = out_dtype == DType::kFloat32;
  const HostBf16 prev = random_bf16(static_cast<size_t>(E * N * K), 4.0f, rng);
  apply_output_store(ref, prev.vals, accumulate, fp32);

  const std::vector<uint8_t> got =
      fp8_wgrad_call({d_padded.get(), E, cap, N, K, cfg, g_q, g_s, x_q, x_s, out_dtype, accumulate}, prev);
  expect_close_fp8("fp8 wgrad grad_w", [&](int64_t i) { return out_at(got, 0, i, fp32); }, ref, sum_abs, &step_max);

  // x again as the layer saves it, a compact bundle at a device offset (its rows R = used tokens,
  // its scales after the data): the same bytes out, bit for bit.
  const int64_t offset = 384, scales_at = offset + numeric::fp8_blockwise_compact_columns_scales_offset(K, used);
  const std::vector<uint8_t> xq = x_q.download();
  const std::vector<float> xs = x_s.download();
  std::vector<uint8_t> bundle(static_cast<size_t>(offset + numeric::fp8_blockwise_compact_columns_bytes(K, used) + 256),
                              0xA5);
  for (int64_t k = 0; k < K; ++k) std::memcpy(&bundle[offset + k * used], &xq[k * cap], static_cast<size_t>(used));
  std::memcpy(&bundle[scales_at], xs.data(), static_cast<size_t>(used / 128 * K) * sizeof(float));
  DeviceBuffer<uint8_t> d_bundle(bundle);
  DeviceBuffer<int64_t> d_offset(std::vector<int64_t>{offset});
  Fp8WgradCall compact{d_padded.get(), E, cap, N, K, cfg, g_q, g_s, x_q, x_s, out_dtype, accumulate};
  compact.x_bundle = d_bundle.get();
  compact.x_offset = d_offset.get();
  compact.x_rows = d_offsets.get() + E;
  const int64_t first = testing::first_difference(fp8_wgrad_call(compact, prev), got);
  EXPECT_EQ(first, -1) << "fp8 wgrad with a compact x bundle: byte " << first << " differs from strided x";
}

// WGRAD bit for bit: E4M3 operands written directly (integers in [-4, 4], exact in E4M3) with
// power-of-two scales in 2^-2 .. 2^2, so every k32 sum (|.| <= 32 x 16) is exact in the tensor
// cores' accumulator and every scaled FP32 sum (multiples of 2^-4 below 2^21) exact in FP32: the
// only result is the exact one, and a wrong scale, token block, tile or expert changes bits.
void run_fp8_wgrad_exact(const std::vector<int32_t>& counts, int64_t N, int64_t K, uint32_t seed, DType out_dtype,
                         bool accumulate, const GroupedGemmConfig* cfg) {
  const int64_t E = static_cast<int64_t>(counts.size());
  int64_t used = 0;
  for (int32_t c : counts) {
    ASSERT_EQ(c % 128, 0) << "the exact case takes whole token blocks";
    used += c;
  }
  const int64_t cap = used + 128;
  std::printf("fp8 wgrad exact E=%lld n=%lld k=%lld tokens=%lld%s%s (%s)\n", static_cast<long long>(E),
              static_cast<long long>(N), static_cast<long long>(K), static_cast<long long>(used),
              out_dtype == DType::kFloat32 ? " fp32" : " bf16", accumulate ? " accumulate" : "",
              cfg ? cfg->name().c_str() : "heuristic pick");
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(-4, 4), exponent(-2, 2);
  // Transposed columns q [C, cap] and scales [cap / 128, C]; returns the values row-major [cap, C].
  auto columns = [&](int64_t C, DeviceBuffer<uint8_t>& q, DeviceBuffer<float>& sc) {
    std::vector<uint8_t> qh(static_cast<size_t>(C * cap));
    std::vector<float> sh(static_cast<size_t>(cap / 128 * C)), vals(static_cast<size_t>(cap * C));
    for (float& x : sh) x = std::ldexp(1.0f, exponent(rng));
    for (int64_t c = 0; c < C; ++c)
      for (int64_t m = 0; m < cap; ++m) {
        const float v = static_cast<float>(value(rng));
        qh[c * cap + m] = numeric::float_to_e4m3(v);
        vals[m * C + c] = v * sh[(m / 128) * C + c];
      }
    q = DeviceBuffer<uint8_t>(qh);
    sc = DeviceBuffer<float>(sh);
    return vals;
  };
  DeviceBuffer<uint8_t> g_q, x_q;
  DeviceBuffer<float> g_s, x_s;
  const std::vector<float> g = columns(N, g_q, g_s), x = columns(K, x_q, x_s);
  std::vector<float> ref = ref_wgrad(g, x, counts, N, K);
  const bool fp32 = out_dtype == DType::kFloat32;
  const HostBf16 prev = random_bf16(static_cast<size_t>(E * N * K), 4.0f, rng);
  apply_output_store(ref, prev.vals, accumulate, fp32);

  const DeviceBuffer<int32_t> d_counts(counts);
  const std::vector<uint8_t> got =
      fp8_wgrad_call({d_counts.get(), E, cap, N, K, cfg, g_q, g_s, x_q, x_s, out_dtype, accumulate}, prev);
  int64_t wrong = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double v = out_at(got, 0, static_cast<int64_t>(i), fp32);
    if (v != static_cast<double>(ref[i]) && wrong++ < 5)
      ADD_FAILURE() << "fp8 wgrad exact: element " << i << " got " << v << " expected " << ref[i];
  }
  EXPECT_EQ(wrong, 0) << "fp8 wgrad exact: elements that differ from the exact result";
  std::printf("  fp8 wgrad exact          n=%-9zu %lld differ %s\n", ref.size(), static_cast<long long>(wrong),
              wrong ? "FAIL" : "PASS");
}

class GroupedGemmFp8Fprop : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmFp8W13 : public ::testing::TestWithParam<GemmParam> {};
INSTANTIATE_TEST_SUITE_P(, GroupedGemmFp8Fprop, ::testing::ValuesIn(fp8_params(GroupedGemmOp::kFprop)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmFp8W13, ::testing::ValuesIn(fp8_params(GroupedGemmOp::kFpropSwiglu)),
                         GemmParamName());

// W2-like (N = 7168 would be slow on the host: 1024 columns, odd and even multiples of 128) and a
// long contraction.
TEST_P(GroupedGemmFp8Fprop, Ragged) {
  DMOE_REQUIRE_SM90();
  run_fp8_fprop({10, 1024, 512, 300, 11u}, &GetParam().config);
}
TEST_P(GroupedGemmFp8Fprop, OddWidthLongK) {
  DMOE_REQUIRE_SM90();
  run_fp8_fprop({9, 384, 2048, 260, 12u}, &GetParam().config);
}
TEST_P(GroupedGemmFp8W13, Plain) {
  DMOE_REQUIRE_SM90();
  run_fp8_w13({10, 768, 1024, 300, 13u}, false, &GetParam().config);
}
TEST_P(GroupedGemmFp8W13, ClampedOddF) {
  DMOE_REQUIRE_SM90();
  run_fp8_w13({9, 2 * 384, 512, 260, 14u}, true, &GetParam().config);
}

// DGRAD runs the FPROP kernels (n and k swapped), so it takes their configurations (not the
// swap-AB decode tile's).
TEST_P(GroupedGemmFp8Fprop, Dgrad) {
  DMOE_REQUIRE_SM90();
  if (GetParam().config.swap_ab) GTEST_SKIP() << "DGRAD has no swap-AB kernel";
  run_fp8_dgrad({10, 512, 768, 300, 15u}, &GetParam().config, false);
}
TEST_P(GroupedGemmFp8Fprop, DgradAccumulate) {
  DMOE_REQUIRE_SM90();
  if (GetParam().config.swap_ab) GTEST_SKIP() << "DGRAD has no swap-AB kernel";
  run_fp8_dgrad({9, 1024, 384, 260, 16u}, &GetParam().config, true);
}

std::vector<GemmParam> fp8_wgrad_params(DType out) {
  return format_params(GroupedGemmOp::kWgrad, out, kFp8BlockwiseRowsT, kFp8BlockwiseRowsT);
}
class GroupedGemmFp8WgradBf16 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmFp8WgradFp32 : public ::testing::TestWithParam<GemmParam> {};
INSTANTIATE_TEST_SUITE_P(, GroupedGemmFp8WgradBf16, ::testing::ValuesIn(fp8_wgrad_params(DType::kBFloat16)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmFp8WgradFp32, ::testing::ValuesIn(fp8_wgrad_params(DType::kFloat32)),
                         GemmParamName());

// Ragged experts (empty ones included: their gradient is written as zeros), tokens that are not
// multiples of 128 (padded by the quantizer), N and K odd multiples of 128.
TEST_P(GroupedGemmFp8WgradBf16, Overwrite) {
  DMOE_REQUIRE_SM90();
  run_fp8_wgrad({300, 0, 129, 1, 256, 77}, 384, 640, 31u, DType::kBFloat16, false, &GetParam().config);
}
TEST_P(GroupedGemmFp8WgradBf16, Accumulate) {
  DMOE_REQUIRE_SM90();
  run_fp8_wgrad({130, 0, 257, 64}, 256, 384, 32u, DType::kBFloat16, true, &GetParam().config);
}
TEST_P(GroupedGemmFp8WgradFp32, Overwrite) {
  DMOE_REQUIRE_SM90();
  run_fp8_wgrad({300, 0, 129, 1, 256, 77}, 384, 640, 33u, DType::kFloat32, false, &GetParam().config);
}
TEST_P(GroupedGemmFp8WgradFp32, Accumulate) {
  DMOE_REQUIRE_SM90();
  run_fp8_wgrad({130, 0, 257, 64}, 256, 384, 34u, DType::kFloat32, true, &GetParam().config);
}

// Whole token blocks, an empty expert, N and K odd multiples of 128: every output bit checked.
class GroupedGemmFp8WgradExact : public ::testing::TestWithParam<GemmParam> {};
INSTANTIATE_TEST_SUITE_P(, GroupedGemmFp8WgradExact, ::testing::ValuesIn(fp8_wgrad_params(DType::kFloat32)),
                         GemmParamName());
TEST_P(GroupedGemmFp8WgradExact, Fp32) {
  DMOE_REQUIRE_SM90();
  run_fp8_wgrad_exact({256, 0, 128, 384}, 384, 640, 41u, DType::kFloat32, false, &GetParam().config);
}
TEST_P(GroupedGemmFp8WgradExact, Fp32Accumulate) {
  DMOE_REQUIRE_SM90();
  run_fp8_wgrad_exact({128, 384, 0}, 256, 384, 42u, DType::kFloat32, true, &GetParam().config);
}
TEST(GroupedGemmFp8, WgradExactBf16HeuristicPick) {
  DMOE_REQUIRE_SM90();
  run_fp8_wgrad_exact({256, 0, 128, 384}, 384, 640, 43u, DType::kBFloat16, false, nullptr);
}

TEST(GroupedGemmFp8, HeuristicPicksCompiledKernels) {
  DMOE_REQUIRE_SM90();
  run_fp8_fprop({10, 1024, 512, 300, 21u}, nullptr);
  run_fp8_w13({10, 512, 512, 300, 22u}, false, nullptr);
  run_fp8_dgrad({10, 512, 384, 300, 23u}, nullptr, false);
  run_fp8_wgrad({200, 0, 129}, 256, 256, 24u, DType::kFloat32, false, nullptr);
}

// DeepSeek-V3's 256 experts on one GPU: the scheduler tables push the preferred tiles past the
// shared memory, and the heuristic's one-stage-shallower picks run them (odd and even widths).
TEST(GroupedGemmFp8, HeuristicPicksFitManyExperts) {
  DMOE_REQUIRE_SM90();
  run_fp8_fprop({256, 256, 256, 24, 25u}, nullptr);
  run_fp8_fprop({300, 384, 256, 24, 26u}, nullptr);
  run_fp8_w13({256, 512, 256, 24, 27u}, false, nullptr);
  run_fp8_dgrad({256, 256, 384, 24, 28u}, nullptr, false);
}

// Decode-sized DGRAD that accumulates, as the heuristic picks it: the host API hands E4M3 DGRAD to
// the heuristic as an FPROP on the transposed weight, and decode-sized FPROPs take the swap-AB tile,
// whose epilogue only stores -- so it must not be picked here (until session 38 it was: the host
// code shows the pick, and the swap-AB epilogue has no accumulating path).
TEST(GroupedGemmFp8, DecodeSizedDgradAccumulates) {
  DMOE_REQUIRE_SM90();
  run_fp8_dgrad({16, 512, 768, 24, 29u}, nullptr, true);
  run_fp8_dgrad({16, 512, 768, 24, 30u}, nullptr, true, Recipe::kMxfp8);
}
// The same call writing its output: the heuristic's swap-AB tile runs DGRAD as an FPROP on the
// transposed weight (the small-T training layers' DGRADs), which the DGRAD tests' configuration
// lists leave out.
TEST(GroupedGemmFp8, DecodeSizedDgradOnTheSwapABTile) {
  DMOE_REQUIRE_SM90();
  run_fp8_dgrad({16, 512, 768, 24, 35u}, nullptr, false);
  run_fp8_dgrad({16, 512, 768, 24, 36u}, nullptr, false, Recipe::kMxfp8);
}

// ---- promotion every 64 / 32 of K (the 128x256 W13's "_p64" / "_p32" kernels; perf_history G158) ----

// One plain-SwiGLU W13 call of case `cs` on FP8-blockwise `ops` with `cfg` (nullptr: the heuristic)
// and GroupedGemmCommon::promote_k: its h1.
std::vector<uint16_t> fp8_w13_h1(const Fp8Case& cs, const FpropOperands& ops, const std::vector<int32_t>& counts,
                                 int64_t cap, const GroupedGemmConfig* cfg, int promote_k) {
  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_h1(static_cast<size_t>(cap * cs.n)), d_h2(static_cast<size_t>(cap * cs.n / 2));
  d_h1.poison();
  W13FpropArgs args;
  args.common = fp8_common(d_counts, cs, cap, cfg);
  args.common.promote_k = promote_k;
  ops.fill(args.common);
  args.a = ops.a_q();
  args.w13 = ops.w_q();
  args.h1 = d_h1.get();
  args.h2 = d_h2.get();
  args.activation = Activation::kSwiGLU;
  grouped_gemm_w13_fprop(args, nullptr);
  const cudaError_t done = cudaDeviceSynchronize();  // (CUDA_OK returns void)
  EXPECT_EQ(done, cudaSuccess) << cudaGetErrorString(done);
  return d_h1.download();
}

// h1 is BF16, so the FP32 sums' last bits show where they move its rounding: the elements of h1 that
// differ from the exact products' BF16 rounding. The tensor cores keep ~14 significant bits of a
// promotion group's running sum, so groups of 64 and 32 of K must differ less often than 128 (~1.2M
// elements at K = 2048: the counts' sampling noise is ~1%, the intervals' effect predicted 15-40%).
// Each kernel also stays within the FP8 bound of expect_close_fp8. The same call through promote_k
// alone (no override) runs the 128x256 _p64 kernel: h1 bitwise equal; an override promoting less
// often than the call asks, and an interval other than 128 / 64 / 32, are errors.
TEST(GroupedGemmFp8, W13PromotionIntervals) {
  DMOE_REQUIRE_SM90();
  const Fp8Case cs{8, 512, 2048, 300, 61u};
  std::mt19937 rng(cs.seed);
  const std::vector<int32_t> counts = fp8_counts(cs.e_local, cs.max_rows, rng);
  const int64_t M = total_rows(counts), cap = M + kSlack;
  const FpropOperands ops = fprop_operands(Recipe::kFp8Blockwise, cs.e_local, cs.n, cs.k, cap, rng);
  const std::vector<float> ref_h1 = rounded_bf16(ref_fprop(ops.a_vals(), ops.w_vals(), counts, cs.n, cs.k));
  const std::vector<float> sum_abs = ref_fprop(absolute(ops.a_vals()), absolute(ops.w_vals()), counts, cs.n, cs.k);
  const auto wide_tile = [&](int promote_k) {
    for (const GemmParam& p : fp8_params(GroupedGemmOp::kFpropSwiglu))
      if (p.config.block_n == 256 && p.config.stages == 4 && p.config.cluster_m == 1 && !p.config.dynamic_schedule &&
          p.config.promote_k == promote_k)
        return p.config;
    ADD_FAILURE() << "no 128x256 s4 W13 kernel promoting every " << promote_k;
    return GroupedGemmConfig{};
  };
  std::printf("fp8 w13 E=%lld 2F=%lld D=%lld rows=%lld: h1 elements off the exact BF16 rounding\n",
              static_cast<long long>(cs.e_local), static_cast<long long>(cs.n), static_cast<long long>(cs.k),
              static_cast<long long>(M));
  std::vector<uint16_t> h1_p64;
  int64_t off[3] = {0, 0, 0};
  const int intervals[3] = {128, 64, 32};
  for (int i = 0; i < 3; ++i) {
    const GroupedGemmConfig cfg = wide_tile(intervals[i]);
    const std::vector<uint16_t> h1 = fp8_w13_h1(cs, ops, counts, cap, &cfg, 128);
    expect_close_fp8(cfg.name() + " h1", [&](int64_t j) { return bf16_value(h1, j); }, ref_h1, sum_abs);
    for (int64_t j = 0; j < M * cs.n; ++j) off[i] += bf16_value(h1, j) != static_cast<double>(ref_h1[j]);
    std::printf("  promotion every %3d of K (%s): %lld of %lld\n", intervals[i], cfg.name().c_str(),
                static_cast<long long>(off[i]), static_cast<long long>(M * cs.n));
    if (intervals[i] == 64) h1_p64 = h1;
  }
  EXPECT_LT(off[1], off[0]) << "promotion every 64 of K is no closer to FP32 accumulation than every 128";
  EXPECT_LT(off[2], off[1]) << "promotion every 32 of K is no closer to FP32 accumulation than every 64";

  const std::vector<uint16_t> h1_asked = fp8_w13_h1(cs, ops, counts, cap, nullptr, 64);
  int64_t differ = 0;
  for (int64_t j = 0; j < M * cs.n; ++j) differ += h1_asked[j] != h1_p64[j];
  EXPECT_EQ(differ, 0) << "promote_k = 64 without an override: h1 elements unlike the _p64 kernel's";

  const GroupedGemmConfig every128 = wide_tile(128);
  expect_error([&] { fp8_w13_h1(cs, ops, counts, cap, &every128, 64); },
               "promotes every 128 of K; the call asks for at most 64");
  expect_error([&] { fp8_w13_h1(cs, ops, counts, cap, nullptr, 96); }, "promote_k must be 128, 64 or 32, got 96");
}

// ---- MXFP8 (per-32 promotion: device/gemm/mainloop_mxfp8.cuh) --------------------------------

std::vector<GemmParam> mxfp8_params(GroupedGemmOp op) {
  return format_params(op, DType::kBFloat16, kMxfp8Rows, kMxfp8Weight);
}
class GroupedGemmMxfp8Fprop : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmMxfp8W13 : public ::testing::TestWithParam<GemmParam> {};
INSTANTIATE_TEST_SUITE_P(, GroupedGemmMxfp8Fprop, ::testing::ValuesIn(mxfp8_params(GroupedGemmOp::kFprop)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmMxfp8W13, ::testing::ValuesIn(mxfp8_params(GroupedGemmOp::kFpropSwiglu)),
                         GemmParamName());

TEST_P(GroupedGemmMxfp8Fprop, Ragged) {
  DMOE_REQUIRE_SM90();
  run_fp8_fprop({10, 1024, 512, 300, 51u}, &GetParam().config, Recipe::kMxfp8);
}
TEST_P(GroupedGemmMxfp8Fprop, OddWidthLongK) {
  DMOE_REQUIRE_SM90();
  run_fp8_fprop({9, 384, 2048, 260, 52u}, &GetParam().config, Recipe::kMxfp8);
}
// The decode tiles over the inference layer's real counts (tile_rows, perf_history G60).
TEST_P(GroupedGemmMxfp8Fprop, TileRowsCoverOnlyTheTokenRows) {
  DMOE_REQUIRE_SM90();
  if (!GetParam().config.swap_ab) GTEST_SKIP() << "tile_rows is taken by the swap-AB (decode) tiles";
  run_fp8_fprop({9, 512, 512, 40, 59u}, &GetParam().config, Recipe::kMxfp8, true);
}
TEST_P(GroupedGemmMxfp8W13, Plain) {
  DMOE_REQUIRE_SM90();
  run_fp8_w13({10, 768, 1024, 300, 53u}, false, &GetParam().config, Recipe::kMxfp8);
}
TEST_P(GroupedGemmMxfp8W13, ClampedOddF) {
  DMOE_REQUIRE_SM90();
  run_fp8_w13({9, 2 * 384, 512, 260, 54u}, true, &GetParam().config, Recipe::kMxfp8);
}

// MXFP8 FPROP bit for bit: integer E4M3 operands in [-4, 4] with E8M0 codes 125..129 (2^-2 .. 2^2;
// the weight's per 32x32 tile), so every k32 sum is exact in the tensor cores and every scaled
// FP32 sum (multiples of 2^-4 below 2^18) exact too: the output is the exact result rounded once
// to BF16. One A block carries the NaN code 0xFF: its row must come out NaN in every column.
// DGRAD runs the FPROP kernel on the weight's transposed copy (its DGRAD scale view).
// The swap-AB (decode) tile is FPROP only: DGRAD neither lists nor takes it (RejectsWhatItCannotDo).
TEST_P(GroupedGemmMxfp8Fprop, Dgrad) {
  DMOE_REQUIRE_SM90();
  if (GetParam().config.swap_ab) GTEST_SKIP() << "DGRAD has no swap-AB kernel";
  run_fp8_dgrad({10, 512, 768, 300, 58u}, &GetParam().config, false, Recipe::kMxfp8);
}
TEST_P(GroupedGemmMxfp8Fprop, DgradAccumulate) {
  DMOE_REQUIRE_SM90();
  if (GetParam().config.swap_ab) GTEST_SKIP() << "DGRAD has no swap-AB kernel";
  run_fp8_dgrad({9, 1024, 384, 260, 59u}, &GetParam().config, true, Recipe::kMxfp8);
}

TEST_P(GroupedGemmMxfp8Fprop, Exact) {
  DMOE_REQUIRE_SM90();
  const std::vector<int32_t> counts = {200, 0, 129, 1, 256};
  const int64_t E = static_cast<int64_t>(counts.size()), N = 384, K = 512, M = total_rows(counts), cap = M + kSlack;
  std::mt19937 rng(55u);
  std::uniform_int_distribution<int> value(-4, 4), code(125, 129);
  std::vector<uint8_t> a_q(static_cast<size_t>(cap * K)), a_s(static_cast<size_t>(cap * (K / 32)));
  std::vector<uint8_t> w_q(static_cast<size_t>(E * N * K)), w_s(static_cast<size_t>(E * N * (K / 32)));
  for (uint8_t& q : a_q) q = numeric::float_to_e4m3(static_cast<float>(value(rng)));
  for (uint8_t& c : a_s) c = static_cast<uint8_t>(code(rng));
  for (uint8_t& q : w_q) q = numeric::float_to_e4m3(static_cast<float>(value(rng)));
  for (int64_t t = 0; t < E * N / 32; ++t)  // one code per 32x32 tile, on each of its rows
    for (int64_t b = 0; b < K / 32; ++b) {
      const auto c = static_cast<uint8_t>(code(rng));
      for (int64_t r = 32 * t; r < 32 * t + 32; ++r) w_s[r * (K / 32) + b] = c;
    }
  const int64_t nan_row = 7;
  a_s[nan_row * (K / 32) + 5] = 0xFF;
  std::vector<float> a_vals(a_q.size()), w_vals(w_q.size());
  for (int64_t r = 0; r < cap; ++r)
    for (int64_t c = 0; c < K; ++c)
      a_vals[r * K + c] = numeric::mxfp8_dequantize_value(a_q[r * K + c], a_s[r * (K / 32) + c / 32]);
  for (int64_t r = 0; r < E * N; ++r)
    for (int64_t c = 0; c < K; ++c)
      w_vals[r * K + c] = numeric::mxfp8_dequantize_value(w_q[r * K + c], w_s[r * (K / 32) + c / 32]);
  const std::vector<float> ref = rounded_bf16(ref_fprop(a_vals, w_vals, counts, N, K));

  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint8_t> d_aq(a_q), d_as(a_s), d_wq(w_q), d_ws(w_s);
  DeviceBuffer<uint16_t> d_out(static_cast<size_t>(cap * N));
  d_out.poison();
  FpropArgs args;
  args.common = fp8_common(d_counts, Fp8Case{E, N, K, 0, 0u}, cap, &GetParam().config);
  args.common.a_format = kMxfp8Rows;
  args.common.b_format = kMxfp8Weight;
  args.common.scales = OperandScales{d_as.get(), K / 32, d_ws.get()};
  args.a = d_aq.get();
  args.w = d_wq.get();
  args.out = d_out.get();
  grouped_gemm_fprop(args, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> out = d_out.download();
  int64_t wrong = 0, nans = 0;
  for (int64_t i = 0; i < M * N; ++i) {
    const double g = bf16_value(out, i);
    const bool nan_expected = i / N == nan_row;
    nans += nan_expected && std::isnan(g);
    const bool ok = nan_expected ? std::isnan(g) : g == static_cast<double>(ref[i]);
    if (!ok && wrong++ < 5) ADD_FAILURE() << "mxfp8 exact: element " << i << " got " << g << " expected " << ref[i];
  }
  EXPECT_EQ(wrong, 0) << "mxfp8 exact: elements that differ from the exact result";
  EXPECT_EQ(nans, N) << "mxfp8 exact: the NaN block's row";
  expect_rows_untouched("mxfp8 exact", out, M, N);
  std::printf("  mxfp8 fprop exact        n=%-9lld %lld differ %s\n", static_cast<long long>(M * N),
              static_cast<long long>(wrong), wrong ? "FAIL" : "PASS");

  // The same A scales as k-block-major words (OperandScales::a_kblock_words, what the rows +
  // columns quantizers write for the layer), with a row stride past the capacity: the same bits.
  const int64_t word_ld = cap + 32;
  std::vector<uint8_t> a_words(static_cast<size_t>((K / 128) * word_ld * 4), 0xEE);
  for (int64_t r = 0; r < cap; ++r)
    for (int64_t b = 0; b < K / 32; ++b) a_words[4 * ((b / 4) * word_ld + r) + b % 4] = a_s[r * (K / 32) + b];
  DeviceBuffer<uint8_t> d_aw(a_words);
  DeviceBuffer<uint16_t> d_out2(static_cast<size_t>(cap * N));
  d_out2.poison();
  args.common.scales = OperandScales{d_aw.get(), word_ld, d_ws.get()};
  args.common.scales.a_kblock_words = true;
  args.out = d_out2.get();
  grouped_gemm_fprop(args, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(d_out2.download(), out) << "mxfp8 exact: k-block-major A scale words";
}

// Narrow tiles (at most 64 rows of their expert in a 128x128 tile) run on both warpgroups, one
// 64-column slice each, and join before the epilogue (GroupedGemmConfig::narrow_split, perf_history
// G99). The same wgmmas, products and FFMAs per accumulator as on warpgroup 0 alone: every output
// byte equal to the "_nosplit" twin's, for FPROP (scattered rows of 64, 65, 1, 63 ... around the
// 64-row boundary, second tiles of 64 and 65 rows, an empty expert) and W13 (SwiGLU, clamped).
TEST(GroupedGemmMxfp8, NarrowTilesSplitMatchesWarpgroupZeroBitwise) {
  DMOE_REQUIRE_SM90();
  const std::vector<int32_t> counts = {64, 65, 1, 63, 192, 193, 0, 37, 128, 129};
  const int64_t E = static_cast<int64_t>(counts.size()), D = 512, N = 768, M = total_rows(counts), cap = M + kSlack;
  std::mt19937 rng(63u);
  DeviceBuffer<int32_t> d_counts(counts);
  for (const bool w13 : {false, true}) {
    const int64_t n = w13 ? N : D, k = w13 ? D : N, out_cols = w13 ? N / 2 : n;
    const FpropOperands ops = fprop_operands(Recipe::kMxfp8, E, n, k, cap, rng);
    const GroupedGemmOp op = w13 ? GroupedGemmOp::kFpropSwiglu : GroupedGemmOp::kFprop;
    for (const GroupedGemmConfig& split : grouped_gemm_configs(op, DType::kBFloat16, false, kMxfp8Rows, kMxfp8Weight)) {
      if (split.swap_ab || !split.narrow_split) continue;
      GroupedGemmConfig alone = split;
      alone.narrow_split = false;
      std::vector<uint16_t> outs[2];
      for (int v = 0; v < 2; ++v) {
        DeviceBuffer<uint16_t> d_out(static_cast<size_t>(cap * out_cols)), d_h1(static_cast<size_t>(cap * n));
        d_out.poison();
        d_h1.poison();
        GroupedGemmCommon c = fp8_common(d_counts, Fp8Case{E, n, k, 0, 0u}, cap, v == 0 ? &split : &alone);
        ops.fill(c);
        if (w13) {
          W13FpropArgs args;
          args.common = c;
          args.a = ops.a_q();
          args.w13 = ops.w_q();
          args.h1 = d_h1.get();
          args.h2 = d_out.get();
          args.activation = Activation::kSwiGLUClamped;
          args.swiglu_alpha = 1.702f;
          args.swiglu_limit = 0.6f;
          grouped_gemm_w13_fprop(args, nullptr);
        } else {
          FpropArgs args;
          args.common = c;
          args.a = ops.a_q();
          args.w = ops.w_q();
          args.out = d_out.get();
          grouped_gemm_fprop(args, nullptr);
        }
        CUDA_OK(cudaDeviceSynchronize());
        outs[v] = d_out.download();
        if (w13) {
          const std::vector<uint16_t> h1 = d_h1.download();
          outs[v].insert(outs[v].end(), h1.begin(), h1.end());
        }
      }
      EXPECT_EQ(outs[0], outs[1]) << (w13 ? "w13 h2 + h1 " : "fprop out ") << split.name() << " vs " << alone.name();
      std::printf("  mxfp8 narrow split %-5s %-22s == %s: %s\n", w13 ? "w13" : "fprop", split.name().c_str(),
                  alone.name().c_str(), outs[0] == outs[1] ? "PASS" : "FAIL");
    }
  }
}

TEST(GroupedGemmMxfp8, HeuristicPicksCompiledKernels) {
  DMOE_REQUIRE_SM90();
  run_fp8_fprop({10, 1024, 512, 300, 56u}, nullptr, Recipe::kMxfp8);
  run_fp8_w13({10, 512, 512, 300, 57u}, false, nullptr, Recipe::kMxfp8);
  run_fp8_dgrad({10, 512, 384, 300, 60u}, nullptr, false, Recipe::kMxfp8);
  // Decode-sized (at most 8 rows per expert): the swap-AB tile (tests/cpu/test_gemm_config.cpp).
  run_fp8_fprop({16, 1024, 512, 8, 61u}, nullptr, Recipe::kMxfp8);
  run_fp8_w13({16, 512, 768, 8, 62u}, true, nullptr, Recipe::kMxfp8);
}

// What the MXFP8 kernels do not take: wrong scale strides and missing scales (argument errors),
// DGRAD on the untransposed weight (E4M3 wgmma needs it transposed) or with other rows, and WGRAD.
TEST(GroupedGemmMxfp8, RejectsWhatItCannotDo) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<int32_t> counts(std::vector<int32_t>{4});
  DeviceBuffer<uint8_t> a(128 * 128), w(128 * 128), s(128 * 4), out(2 * 128 * 128);
  FpropArgs args;
  args.common = fp8_common(counts, Fp8Case{1, 128, 128, 0, 0u}, 4, nullptr);
  args.common.a_format = kMxfp8Rows;
  args.common.b_format = kMxfp8Weight;
  args.common.scales = OperandScales{s.get(), 4, s.get()};
  args.a = a.get();
  args.w = w.get();
  args.out = out.get();
  args.common.scales.a_ld = 2;  // rows closer than k/32 codes (a wider stride is allowed: the Mega h2)
  expect_error([&] { grouped_gemm_fprop(args, nullptr); }, "scales.a_ld must be at least k/32 = 4");
  args.common.scales.a_ld = 6;  // not a multiple of 4 (the kernels read 32-bit words)
  expect_error([&] { grouped_gemm_fprop(args, nullptr); }, "scales.a_ld must be at least k/32 = 4");
  args.common.scales.a_kblock_words = true;  // k-block-major words need a_ld >= m_capacity (4)
  args.common.scales.a_ld = 2;
  expect_error([&] { grouped_gemm_fprop(args, nullptr); }, "need k % 128 == 0 and scales.a_ld >= m_capacity");
  args.common.scales.a_kblock_words = false;
  args.common.scales.a_ld = 4;
  args.common.scales.b = nullptr;
  expect_error([&] { grouped_gemm_fprop(args, nullptr); }, "need their E8M0 scales");
  args.common.scales.b = s.get();
  DgradArgs d;
  d.common = args.common;
  d.grad_out = a.get();
  d.w = w.get();
  d.grad_a = out.get();
  expect_error([&] { grouped_gemm_dgrad(d, nullptr); }, "MXFP8 DGRAD reads the weight's transposed copy");
  d.common.b_format = kMxfp8WeightT;
  d.common.a_format = kFp8BlockwiseRows;
  expect_error([&] { grouped_gemm_dgrad(d, nullptr); }, "needs A=" + kMxfp8Rows.name());
  d.common.a_format = kMxfp8Rows;
  GroupedGemmConfig decode;  // the FPROP decode tile is not a DGRAD kernel
  for (const GroupedGemmConfig& c : grouped_gemm_configs(GroupedGemmOp::kFprop, DType::kBFloat16, false, kMxfp8Rows,
                                                         kMxfp8Weight))
    if (c.swap_ab) decode = c;
  ASSERT_TRUE(decode.swap_ab) << "the MXFP8 swap-AB decode tile is compiled";
  for (const GroupedGemmConfig& c : grouped_gemm_configs(GroupedGemmOp::kDgrad, DType::kBFloat16, false, kMxfp8Rows,
                                                         kMxfp8WeightT))
    EXPECT_FALSE(c.swap_ab) << c.name() << " listed for DGRAD";
  d.common.config = &decode;
  expect_error([&] { grouped_gemm_dgrad(d, nullptr); }, "DGRAD has no swap-AB (decode) kernel");
  d.common.config = nullptr;
  WgradArgs wg;  // MXFP8 WGRAD: no kernel (it dequantizes its column operands to BF16)
  wg.common = args.common;
  wg.grad_out = a.get();
  wg.a = a.get();
  wg.grad_w = out.get();
  expect_error([&] { grouped_gemm_wgrad(wg, nullptr); }, "no grouped GEMM kernel");
}

// Missing or unneeded scales are argument errors, before any launch.
TEST(GroupedGemmFp8, RejectsMissingScales) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<int32_t> counts(std::vector<int32_t>{4});
  DeviceBuffer<uint8_t> a(128 * 128), w(128 * 128), out(2 * 128 * 128);
  DeviceBuffer<float> s(128);
  FpropArgs args;
  args.common.counts = counts.get();
  args.common.e_local = 1;
  args.common.m_capacity = 4;
  args.common.n = 128;
  args.common.k = 128;
  args.common.a_format = kFp8BlockwiseRows;
  args.common.b_format = kFp8BlockwiseWeight;
  args.a = a.get();
  args.w = w.get();
  args.out = out.get();
  auto expect_error = [&](const std::string& fragment) {
    try {
      grouped_gemm_fprop(args, nullptr);
      ADD_FAILURE() << "no error; expected one containing: " << fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  expect_error("needs its block scales in scales.a");
  args.common.scales.a = s.get();
  args.common.scales.a_ld = 2;
  expect_error("scales.a_ld must be a multiple of 4 and >= m_capacity = 4, got 2");
  args.common.scales.a_ld = 4;
  expect_error("needs its block scales in scales.b");
  // BF16 operands with scales: the scales would be ignored, so the call is refused.
  args.common.a_format = OperandFormat{};
  args.common.b_format = OperandFormat{};
  expect_error("scales.a is set but A (bf16) has no block scales");
}

// The block-scaled restrictions are argument errors, raised before anything touches the device
// (fake device addresses: nothing is dereferenced).
TEST(GroupedGemmFp8Args, RejectsWhatTheKernelsCannotDo) {
  const auto* counts = reinterpret_cast<const int32_t*>(256);
  auto* dev = reinterpret_cast<void*>(4096);
  const auto* scales = reinterpret_cast<const float*>(8192);
  const int64_t offset_storage = 0;
  GroupedGemmCommon c;
  c.counts = counts;
  c.e_local = 4;
  c.m_capacity = 512;
  c.n = 256;
  c.k = 384;
  c.a_format = kFp8BlockwiseRows;
  c.b_format = kFp8BlockwiseWeight;
  c.scales = OperandScales{scales, 512, scales};

  FpropArgs f;
  f.common = c;
  f.a = dev;
  f.w = dev;
  f.out = dev;
  f.a_offset = &offset_storage;
  expect_error([&] { grouped_gemm_fprop(f, nullptr); }, "a_offset would move the A rows");
  f.a_offset = nullptr;
  f.gather.row_ptrs = reinterpret_cast<const void* const*>(dev);
  f.gather.gathered = dev;
  f.gather.workspace = reinterpret_cast<int32_t*>(dev);
  expect_error([&] { grouped_gemm_fprop(f, nullptr); }, "has no gather producer");

  DgradArgs d;
  d.common = c;
  d.grad_out = dev;
  d.w = dev;
  d.grad_a = dev;
  expect_error([&] { grouped_gemm_dgrad(d, nullptr); }, "B must be kFp8BlockwiseWeightT");
  d.common.b_format = kFp8BlockwiseWeightT;
  d.out_dtype = DType::kFloat32;
  expect_error([&] { grouped_gemm_dgrad(d, nullptr); }, "FP8-blockwise DGRAD writes bfloat16 output");
  d.out_dtype = DType::kBFloat16;
  d.common.n = 200;  // the call's own n is checked before the FPROP view swaps n and k
  expect_error([&] { grouped_gemm_dgrad(d, nullptr); }, "n (weight rows) must be a positive multiple of 128, got 200");
  // DGRAD lists the FPROP configurations it runs on, all but the swap-AB (decode) tile.
  const auto fprop = grouped_gemm_configs(GroupedGemmOp::kFprop, DType::kBFloat16, false, kFp8BlockwiseRows,
                                          kFp8BlockwiseWeight);
  const auto dgrad = grouped_gemm_configs(GroupedGemmOp::kDgrad, DType::kBFloat16, false, kFp8BlockwiseRows,
                                          kFp8BlockwiseWeightT);
  const auto decode = std::count_if(fprop.begin(), fprop.end(), [](const GroupedGemmConfig& c) { return c.swap_ab; });
  EXPECT_EQ(decode, 1) << "the FP8-blockwise swap-AB decode tile is compiled";
  EXPECT_EQ(dgrad.size() + decode, fprop.size());
  for (const GroupedGemmConfig& c : dgrad) EXPECT_FALSE(c.swap_ab) << c.name() << " listed for DGRAD";
}

// ---- Mega (grouped_gemm_mega_mxfp8_decode / grouped_gemm_mega_mxfp8, device/gemm/mega.cuh) ------
// One launch of W13 + SwiGLU, the h2 quantization and W2 against the staged sequence it replaces --
// W13 FPROP, mxfp8_quantize_rows, W2 FPROP, each on the same tile -- on the same operands, bit for
// bit: h3, h2's E4M3 bytes and E8M0 codes of the token rows, the clip statistics (over the token rows).
//   decode form  the 16-token decode tiles over each expert's token rows; h2 quantized in place (row
//                m's bytes at 2F m, its codes F bytes in); segments padded to 32 rows with 0..12 token
//                rows (the inference layer's decode layout); rows past the token rows untouched
//   rows form    the 128x128 tiles over each expert's segment; h2 quantized in the W13 epilogue into
//                E4M3 rows [cap, F] and codes as [cap, F/32] bytes or k-block words [F/128, cap] (the
//                layer's); segments of 0..max_rows token rows padded to 32 (whole, partial and
//                token-less chunks); nothing written past the segments
//   rows form, training  also h1 and h2's compact column bundle (the saved state), against the staged
//                W13's h1 and the rows + columns quantizer's columns over the segments (padding rows
//                zero, as the layer's x rows + columns quantizer leaves them: x's padding rows are
//                zero here)
// Every fifth expert has no token rows. Run twice (the chunk counters start from zero again), the
// second time gathering x in the launch from packed rows (x_rows), checked against the row quantizer's x.
enum class MegaMxfp8Form { kDecode, kRowsBytes, kRowsWords, kRowsTraining };

GroupedGemmConfig mxfp8_128x128_config(GroupedGemmOp op) {
  for (const GemmParam& p : format_params(op, DType::kBFloat16, kMxfp8Rows, kMxfp8Weight))
    if (!p.config.swap_ab && p.config.block_m == 128 && p.config.block_n == 128) return p.config;
  ADD_FAILURE() << "no 128x128 MXFP8 configuration for " << to_string(op);
  return {};
}

void run_mxfp8_mega_vs_staged(MegaMxfp8Form form, int64_t E, int64_t D, int64_t F, int max_rows, bool clamped,
                              uint32_t seed, bool special_rows = false) {
  const bool decode = form == MegaMxfp8Form::kDecode, training = form == MegaMxfp8Form::kRowsTraining;
  const bool words = form == MegaMxfp8Form::kRowsWords || training;
  std::printf("mxfp8 mega %s E=%lld D=%lld F=%lld %s\n",
              decode ? "decode" : (training ? "rows, training (h1, h2 columns)" : words ? "rows, k-block word codes" : "rows, [cap, F/32] codes"),
              static_cast<long long>(E), static_cast<long long>(D), static_cast<long long>(F),
              clamped ? "clamped" : "plain");
  std::mt19937 rng(seed);
  // (training: a capacity that is a multiple of 32, as the rows + columns quantizer needs)
  const TokenSegments seg = token_segments(E, max_rows, training ? 64 : kSlack, rng);
  const std::vector<int32_t>&counts = seg.counts, &tiles = seg.tiles;
  const std::vector<char>& token = seg.token;
  const int64_t cap = seg.cap, M = seg.offsets.back();
  HostBf16 x_bf16 = spread_bf16(cap, D, 1, 1.0f, rng);
  if (training)  // the layer's x rows + columns quantizer leaves padding rows zero
    for (int64_t m = 0; m < cap; ++m)
      if (!token[static_cast<size_t>(m)]) std::fill_n(x_bf16.bits.begin() + m * D, D, uint16_t{0});
  if (special_rows) poke_special_rows(x_bf16, token, D);
  const Mxfp8Rows x = mxfp8_rows(x_bf16, cap, D);
  const Mxfp8Weight w13 = mxfp8_weight(spread_bf16(E * 2 * F, D, 128, 1.0f / std::sqrt(float(D)), rng), E, 2 * F, D);
  const Mxfp8Weight w2 = mxfp8_weight(spread_bf16(E * D, F, 128, 1.0f / std::sqrt(float(F)), rng), E, D, F);
  DeviceBuffer<int32_t> d_counts(counts), d_tiles(tiles), d_offsets(seg.offsets);
  const quant::RowGroups groups{d_tiles.get(), d_offsets.get(), static_cast<int32_t>(E)};
  const int64_t col_bytes = numeric::mxfp8_compact_columns_bytes(F, M);
  const GroupedGemmConfig cfg13 = decode ? decode16_config(GroupedGemmOp::kFpropSwiglu, kMxfp8Rows, kMxfp8Weight)
                                         : mxfp8_128x128_config(GroupedGemmOp::kFpropSwiglu);
  const GroupedGemmConfig cfg2 = decode ? decode16_config(GroupedGemmOp::kFprop, kMxfp8Rows, kMxfp8Weight)
                                        : mxfp8_128x128_config(GroupedGemmOp::kFprop);
  auto common = [&](int64_t n, int64_t k) {
    GroupedGemmCommon c;
    c.counts = d_counts.get();
    c.tile_rows = d_tiles.get();  // (the 128x128 tiles cover whole segments whatever it says)
    c.e_local = E;
    c.m_capacity = cap;
    c.n = n;
    c.k = k;
    c.a_format = kMxfp8Rows;
    c.b_format = kMxfp8Weight;
    return c;
  };
  auto w13_args = [&](void* h2, float* clip, const uint8_t* xq, const uint8_t* xs) {
    W13FpropArgs a;
    a.common = common(2 * F, D);
    a.common.scales = OperandScales{xs, D / 32, w13.w.s.get()};
    a.a = xq;
    a.w13 = w13.w.q.get();
    a.h2 = h2;
    a.activation = clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
    a.swiglu_limit = 0.6f;
    a.clip_stats = clip;
    a.clip_limit = 0.5f;
    a.clip_rows = d_tiles.get();
    return a;
  };

  // Staged: W13, the row quantizer over h2 (training: the rows + columns quantizer), W2 on the row bundle.
  DeviceBuffer<uint16_t> h2(static_cast<size_t>(cap * F)), out(static_cast<size_t>(cap * D));
  DeviceBuffer<uint16_t> h1(static_cast<size_t>(training ? cap * 2 * F : 1));
  DeviceBuffer<uint8_t> hq(static_cast<size_t>(cap * F)), hs(static_cast<size_t>(cap * (F / 32)));
  DeviceBuffer<uint8_t> hcol(static_cast<size_t>(training ? col_bytes : 1));
  DeviceBuffer<float> clip(3);
  h2.poison();
  h1.poison();
  out.poison();
  {
    W13FpropArgs a13 = w13_args(h2.get(), clip.get(), x.q.get(), x.s.get());
    a13.common.config = &cfg13;
    if (training) a13.h1 = h1.get();
    grouped_gemm_w13_fprop(a13, nullptr);
    const quant::Bf16Matrix h2m{h2.get(), cap, F, F};
    const quant::Mxfp8Out rows_out{hq.get(), F, hs.get(), F / 32, 1};
    if (training) {
      quant::Mxfp8Out cols_out;
      cols_out.q = hcol.get();
      cols_out.compact = true;
      quant::mxfp8_quantize_rows_cols(h2m, groups, rows_out, cols_out, nullptr);
    } else {
      quant::mxfp8_quantize_rows(h2m, rows_out, nullptr);
    }
    FpropArgs a2;
    a2.common = common(D, F);
    a2.common.scales = OperandScales{hs.get(), F / 32, w2.w.s.get()};
    a2.common.config = &cfg2;
    a2.a = hq.get();
    a2.w = w2.w.q.get();
    a2.out = out.get();
    grouped_gemm_fprop(a2, nullptr);
  }
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint16_t> want = out.download();
  const std::vector<uint8_t> want_q = hq.download(), want_s = hs.download();
  const std::vector<float> want_clip = clip.download();
  const std::vector<uint16_t> want_h1 = training ? h1.download() : std::vector<uint16_t>{};
  const std::vector<uint8_t> want_col = training ? hcol.download() : std::vector<uint8_t>{};

  // Call 0 takes the x row bundle made beforehand; call 1 gathers it in the launch (x_rows: packed
  // rows [D E4M3 | D/32 E8M0] by row pointer, as from the dispatch windows) into buffers of its own.
  const int64_t pk_x = (numeric::mxfp8_packed_row_bytes(D) + 15) / 16 * 16;
  DeviceBuffer<uint8_t> x_packed(static_cast<size_t>(cap * pk_x));
  {
    DeviceBuffer<uint16_t> d_x(x_bf16.bits);
    quant::mxfp8_quantize_rows(quant::Bf16Matrix{d_x.get(), cap, D, D}, quant::mxfp8_packed_rows_out(x_packed.get(), pk_x, D),
                               nullptr);
    CUDA_OK(cudaDeviceSynchronize());
  }
  std::vector<uint64_t> row_ptrs(static_cast<size_t>(cap), 0);
  for (int64_t m = 0; m < cap; ++m)
    if (token[static_cast<size_t>(m)]) row_ptrs[m] = reinterpret_cast<uint64_t>(x_packed.get() + m * pk_x);
  DeviceBuffer<uint64_t> d_row_ptrs(row_ptrs);
  DeviceBuffer<uint8_t> mxq(static_cast<size_t>(cap * D)), mxs(static_cast<size_t>(cap * (D / 32)));
  // h2 as the launch leaves it: decode, in place of the BF16 rows [cap, 2F bytes]; rows, E4M3 [cap, F]
  // then the codes (bytes or words), both cap F (1 + 1/32) bytes at most.
  DeviceBuffer<uint8_t> mh2(static_cast<size_t>(cap * F * 2));
  DeviceBuffer<uint16_t> mout(static_cast<size_t>(cap * D)), mh1(static_cast<size_t>(training ? cap * 2 * F : 1));
  DeviceBuffer<uint8_t> mcol(static_cast<size_t>(training ? col_bytes : 1));
  DeviceBuffer<float> mclip(3);
  uint8_t* const mh2q = mh2.get();
  uint8_t* const mh2s = decode ? mh2.get() + F : mh2.get() + cap * F;
  const int64_t s_ld = decode ? 2 * F : (words ? cap : F / 32);
  // Row m's E4M3 bytes and its code of 32-column block c as the launch left them.
  const auto q_at = [&](const std::vector<uint8_t>& b, int64_t m) { return &b[static_cast<size_t>(m * (decode ? 2 * F : F))]; };
  const auto code_at = [&](const std::vector<uint8_t>& b, int64_t m, int64_t c) {
    const size_t base = static_cast<size_t>(mh2s - mh2q);
    return words ? b[base + static_cast<size_t>(4 * ((c / 4) * cap + m) + c % 4)]
                 : b[base + static_cast<size_t>(m * s_ld + c)];
  };
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call);
    const bool gather = call == 1;
    mout.poison();
    mh1.poison();
    DMOE_CUDA_CHECK(cudaMemset(mcol.get(), 0x5A, mcol.size()));
    DMOE_CUDA_CHECK(cudaMemset(mh2.get(), 0x7E, mh2.size()));
    DMOE_CUDA_CHECK(cudaMemset(mxq.get(), 0x7F, mxq.size()));
    DMOE_CUDA_CHECK(cudaMemset(mxs.get(), 0xFF, mxs.size()));
    W13FpropArgs a13 = gather ? w13_args(mh2q, mclip.get(), mxq.get(), mxs.get())
                              : w13_args(mh2q, mclip.get(), x.q.get(), x.s.get());
    FpropArgs a2;
    a2.common = common(D, F);
    a2.common.scales = OperandScales{mh2s, s_ld, w2.w.s.get()};
    a2.common.scales.a_kblock_words = words;
    a2.a = mh2q;
    a2.w = w2.w.q.get();
    a2.out = mout.get();
    const void* const* x_rows = gather ? reinterpret_cast<const void* const*>(d_row_ptrs.get()) : nullptr;
    if (decode) {
      grouped_gemm_mega_mxfp8_decode(a13, a2, nullptr, x_rows);
    } else {
      Mxfp8Columns cols;
      if (training) {
        a13.h1 = mh1.get();
        cols = Mxfp8Columns{mcol.get(), nullptr, d_offsets.get() + E};
      }
      grouped_gemm_mega_mxfp8(a13, a2, nullptr, x_rows, cols);
    }
    CUDA_OK(cudaDeviceSynchronize());
    if (training) {  // the saved state: h1 of the segments' rows, h2's whole column bundle
      const std::vector<uint16_t> got_h1 = mh1.download();
      int64_t bad_h1 = 0;
      for (size_t i = 0; i < static_cast<size_t>(M * 2 * F); ++i) bad_h1 += got_h1[i] != want_h1[i];
      EXPECT_EQ(bad_h1, 0) << "h1 elements differ from the staged W13's";
      expect_rows_untouched("h1", got_h1, M, 2 * F);
      const std::vector<uint8_t> got_col = mcol.download();
      int64_t bad_col = 0;
      const int64_t scales_at = numeric::mxfp8_compact_columns_scales_offset(F, M);
      for (int64_t i = 0; i < col_bytes; ++i) {  // the data [F, M] and the codes [M / 32, F], not the padding
        const bool used = i < F * M || (i >= scales_at && i < scales_at + F * (M / 32));
        if (used) bad_col += got_col[static_cast<size_t>(i)] != want_col[static_cast<size_t>(i)];
      }
      EXPECT_EQ(bad_col, 0) << "bytes of h2's column bundle differ from the rows + columns quantizer's";
    }
    if (gather) {  // x gathered in the launch: the token rows as the row quantizer wrote them
      const std::vector<uint8_t> gq = mxq.download(), gs = mxs.download(), wq = x.q.download(), ws = x.s.download();
      int64_t bad_x = 0;
      for (int64_t m = 0; m < cap; ++m)
        if (token[static_cast<size_t>(m)])
          bad_x += std::memcmp(&gq[m * D], &wq[m * D], static_cast<size_t>(D)) != 0 ||
                   std::memcmp(&gs[m * (D / 32)], &ws[m * (D / 32)], static_cast<size_t>(D / 32)) != 0;
      EXPECT_EQ(bad_x, 0) << "x rows gathered in the launch differ from the row quantizer's";
    }
    // h3: token rows bitwise; decode tiles write nothing else, the 128x128 tiles nothing past the segments.
    const std::vector<uint16_t> got = mout.download();
    int64_t bad = 0, touched = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const int64_t m = static_cast<int64_t>(i / static_cast<size_t>(D));
      if (token[static_cast<size_t>(m)]) bad += got[i] != want[i];
      else if (decode || m >= M) touched += got[i] != 0xFFFF;
    }
    EXPECT_EQ(bad, 0) << "h3 elements of token rows differ from the staged pipeline";
    EXPECT_EQ(touched, 0) << "h3 rows the launch must not write were written";
    const std::vector<uint8_t> bytes = mh2.download();
    int64_t bad_q = 0, bad_s = 0, touched_h2 = 0;
    for (int64_t m = 0; m < cap; ++m) {
      if (!decode && m >= M) {
        for (int64_t c = 0; c < F; ++c) touched_h2 += q_at(bytes, m)[c] != 0x7E;
        for (int64_t c = 0; c < F / 32; ++c) touched_h2 += code_at(bytes, m, c) != 0x7E;
      }
      if (!token[static_cast<size_t>(m)]) continue;
      bad_q += std::memcmp(q_at(bytes, m), &want_q[m * F], static_cast<size_t>(F)) != 0;
      for (int64_t c = 0; c < F / 32; ++c) bad_s += code_at(bytes, m, c) != want_s[static_cast<size_t>(m * (F / 32) + c)];
    }
    EXPECT_EQ(bad_q, 0) << "rows whose E4M3 h2 differs from the row quantizer's";
    EXPECT_EQ(bad_s, 0) << "E8M0 codes that differ from the row quantizer's";
    EXPECT_EQ(touched_h2, 0) << "h2 bytes or codes past the segments were written";
    EXPECT_EQ(mclip.download(), want_clip) << "clip statistics differ";
  }
}

TEST(MegaMxfp8Decode, MatchesTheStagedSequenceBitwise) {
  DMOE_REQUIRE_SM90();
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kDecode, 16, 512, 768, 12, false, 93u);
}
TEST(MegaMxfp8Decode, ClampedManyExpertsLongK) {
  DMOE_REQUIRE_SM90();
  // more chunks than CTAs: W2 tiles wait on the W13 tail
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kDecode, 72, 1024, 1280, 12, true, 94u);
}
TEST(MegaMxfp8Decode, NanAndOverflowRows) {
  DMOE_REQUIRE_SM90();
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kDecode, 16, 512, 768, 12, false, 90u, /*special_rows=*/true);
}
TEST(MegaMxfp8Rows, MatchesTheStagedSequenceBitwise) {
  DMOE_REQUIRE_SM90();
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kRowsBytes, 16, 512, 768, 300, false, 95u);
}
TEST(MegaMxfp8Rows, KBlockWordCodesClamped) {
  DMOE_REQUIRE_SM90();
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kRowsWords, 12, 1024, 640, 200, true, 96u);
}
TEST(MegaMxfp8Rows, TrainingSavesH1AndTheColumnBundle) {
  DMOE_REQUIRE_SM90();
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kRowsTraining, 24, 512, 768, 300, false, 98u);
}
TEST(MegaMxfp8Rows, TrainingClampedLongK) {
  DMOE_REQUIRE_SM90();
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kRowsTraining, 8, 1536, 384, 200, true, 99u);
}
TEST(MegaMxfp8Rows, ManyExpertsMoreChunksThanCtas) {
  DMOE_REQUIRE_SM90();
  run_mxfp8_mega_vs_staged(MegaMxfp8Form::kRowsWords, 96, 512, 384, 260, false, 97u);  // W2 waits on the W13 tail
}
TEST(MegaMxfp8Decode, RefusesRowsLongerThanItsHandoffHolds) {
  DMOE_REQUIRE_SM90();
  // The finisher's four warps keep a row's F / 32 codes each in its staging buffer: F <= 65536. An
  // argument error, raised before anything touches the device (fake device addresses).
  constexpr int64_t F = 65536 + 256;
  W13FpropArgs a13;
  FpropArgs a2;
  a13.h2 = reinterpret_cast<void*>(uintptr_t{1} << 24);
  a2.common.k = F;
  a2.common.scales.a = static_cast<const uint8_t*>(a13.h2) + F;
  a2.common.scales.a_ld = 2 * F;
  try {
    grouped_gemm_mega_mxfp8_decode(a13, a2, nullptr);
    ADD_FAILURE() << "no error for F = " << F;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than the decode hand-off holds"), std::string::npos) << e.what();
  }
}
TEST(MegaMxfp8Rows, RefusesWhatItCannotRun) {
  DMOE_REQUIRE_SM90();
  W13FpropArgs a13;
  FpropArgs a2;
  EXPECT_THROW(grouped_gemm_mega_mxfp8(a13, a2, nullptr), Error);  // w13.h2 != w2.a (both unset)
}

// ---- W2 DGRAD with the SwiGLU backward in its epilogue (grouped_gemm_dgrad_swiglu_mxfp8) -----------
// Against the staged pair it replaces -- grouped_gemm_dgrad (BF16 grad_h2) then
// quant::mxfp8_swiglu_backward_quantize -- on the same operands, bit for bit: dxy's E4M3 rows and codes
// (bytes [cap, 2F/32] or k-block words) of every segment row, and in training its compact column
// bundle. Segments of 0..max_rows token rows padded to 32 (every fifth expert none); grad_h3's padding
// rows are not zero (the kernel must quantize them as zeros, as the quantizer does); rows past the
// segments untouched. Run twice, the second time with h1 at a device offset.
void run_dgrad_swiglu_vs_staged(int64_t E, int64_t D, int64_t F, int max_rows, bool clamped, bool words, bool columns,
                                uint32_t seed) {
  std::printf("mxfp8 dgrad + swiglu backward E=%lld D=%lld F=%lld %s, %s codes%s\n", static_cast<long long>(E),
              static_cast<long long>(D), static_cast<long long>(F), clamped ? "clamped" : "plain",
              words ? "k-block word" : "[cap, 2F/32]", columns ? ", column bundle" : "");
  std::mt19937 rng(seed);
  const TokenSegments seg = token_segments(E, max_rows, 64, rng);  // cap: a multiple of 32 (the quantizer's)
  const int64_t cap = seg.cap, M = seg.offsets.back(), C = 2 * F;
  const Mxfp8Rows g = mxfp8_rows(spread_bf16(cap, D, 1, 1.0f, rng), cap, D);
  const Mxfp8Weight w2 = mxfp8_weight(spread_bf16(E * D, F, 128, 1.0f / std::sqrt(float(F)), rng), E, D, F);
  const HostBf16 h1_bf16 = spread_bf16(cap, C, 1, 2.0f, rng);
  DeviceBuffer<int32_t> d_counts(seg.counts), d_real(seg.tiles), d_offsets(seg.offsets);
  constexpr int64_t kH1Offset = 4096;  // the second call's device offset of h1
  DeviceBuffer<uint16_t> d_h1(static_cast<size_t>(cap * C + kH1Offset / 2));
  {
    std::vector<uint16_t> bits(d_h1.size(), 0);
    std::copy(h1_bf16.bits.begin(), h1_bf16.bits.end(), bits.begin());
    d_h1.upload(bits);
  }
  DeviceBuffer<uint16_t> d_h1_moved(static_cast<size_t>(cap * C + kH1Offset / 2));
  {
    std::vector<uint16_t> bits(d_h1_moved.size(), 0);
    std::copy(h1_bf16.bits.begin(), h1_bf16.bits.end(), bits.begin() + kH1Offset / 2);
    d_h1_moved.upload(bits);
  }
  DeviceBuffer<int64_t> d_h1_offset(std::vector<int64_t>{kH1Offset});
  const activation::SwigluParams sp{clamped, 1.702f, 0.9f};
  const int64_t s_ld = words ? cap : C / 32, s_bytes = cap * (C / 32);
  const int64_t col_bytes = numeric::mxfp8_compact_columns_bytes(C, M);

  DgradArgs d;
  d.common.counts = d_counts.get();
  d.common.e_local = E;
  d.common.m_capacity = cap;
  d.common.n = D;
  d.common.k = F;
  d.common.a_format = kMxfp8Rows;
  d.common.b_format = kMxfp8WeightT;
  d.common.scales = OperandScales{g.s.get(), D / 32, w2.w.s_dgrad.get()};
  d.grad_out = g.q.get();
  d.w = w2.w.q_t.get();

  // Staged: W2 DGRAD to BF16 grad_h2, then the fused SwiGLU backward quantizer.
  DeviceBuffer<uint16_t> grad_h2(static_cast<size_t>(cap * F));
  DeviceBuffer<uint8_t> want_q(static_cast<size_t>(cap * C)), want_s(static_cast<size_t>(s_bytes)),
      want_col(static_cast<size_t>(columns ? col_bytes : 1));
  {
    DgradArgs staged = d;
    staged.grad_a = grad_h2.get();
    grouped_gemm_dgrad(staged, nullptr);
    quant::Mxfp8Out rows_out{want_q.get(), C, want_s.get(), C / 32, 1};
    if (words) rows_out.scale_word_ld = cap;
    quant::Mxfp8Out cols_out;
    if (columns) {
      cols_out.q = want_col.get();
      cols_out.compact = true;
    }
    quant::mxfp8_swiglu_backward_quantize(quant::SwigluBackwardSource{{d_h1.get(), nullptr}, grad_h2.get(), cap, F, sp},
                                          quant::RowGroups{d_real.get(), d_offsets.get(), static_cast<int32_t>(E)},
                                          rows_out, cols_out, nullptr);
  }
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<uint8_t> wq = want_q.download(), ws = want_s.download(), wc = want_col.download();

  DeviceBuffer<uint8_t> got_q(static_cast<size_t>(cap * C)), got_s(static_cast<size_t>(s_bytes)),
      got_col(static_cast<size_t>(columns ? col_bytes : 1));
  for (int call = 0; call < 2; ++call) {
    SCOPED_TRACE(call);
    DMOE_CUDA_CHECK(cudaMemset(got_q.get(), 0x7E, got_q.size()));
    DMOE_CUDA_CHECK(cudaMemset(got_s.get(), 0x7E, got_s.size()));
    DMOE_CUDA_CHECK(cudaMemset(got_col.get(), 0x5A, got_col.size()));
    SwigluBackwardMxfp8Args s;
    s.h1 = call == 0 ? d_h1.get() : d_h1_moved.get();
    s.h1_offset = call == 0 ? nullptr : d_h1_offset.get();
    s.real_rows = d_real.get();
    s.activation = clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
    s.swiglu_alpha = sp.alpha;
    s.swiglu_limit = sp.limit;
    s.dxy = got_q.get();
    s.dxy_scales = got_s.get();
    s.scale_ld = s_ld;
    s.scale_kblock_words = words;
    if (columns) s.columns = Mxfp8Columns{got_col.get(), nullptr, d_offsets.get() + E};
    grouped_gemm_dgrad_swiglu_mxfp8(d, s, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint8_t> q = got_q.download(), sc = got_s.download(), col = got_col.download();
    // A row's code of 32-column block c in either layout.
    const auto code = [&](const std::vector<uint8_t>& b, int64_t m, int64_t c) {
      return words ? b[static_cast<size_t>(4 * ((c / 4) * cap + m) + c % 4)] : b[static_cast<size_t>(m * s_ld + c)];
    };
    int64_t bad_q = 0, bad_s = 0, touched = 0;
    std::string first_q, first_s;  // the first difference of each kind, for the log
    for (int64_t m = 0; m < cap; ++m) {
      for (int64_t c = 0; c < C; ++c) {
        const size_t i = static_cast<size_t>(m * C + c);
        if (m < M && q[i] != wq[i] && bad_q++ == 0)
          first_q = " (first: row " + std::to_string(m) + " col " + std::to_string(c) + ": " + std::to_string(q[i]) +
                    " vs " + std::to_string(wq[i]) + ")";
        if (m >= M) touched += q[i] != 0x7E;
      }
      for (int64_t c = 0; c < C / 32; ++c) {
        if (m < M && code(sc, m, c) != code(ws, m, c) && bad_s++ == 0)
          first_s = " (first: row " + std::to_string(m) + " block " + std::to_string(c) + ": " +
                    std::to_string(code(sc, m, c)) + " vs " + std::to_string(code(ws, m, c)) + ")";
        if (m >= M) touched += code(sc, m, c) != 0x7E;
      }
    }
    EXPECT_EQ(bad_q, 0) << "dxy E4M3 bytes that differ from the staged pair's" << first_q;
    EXPECT_EQ(bad_s, 0) << "dxy E8M0 codes that differ from the staged pair's" << first_s;
    EXPECT_EQ(touched, 0) << "dxy bytes or codes past the segments were written";
    if (columns) {
      int64_t bad_col = 0;
      const int64_t scales_at = numeric::mxfp8_compact_columns_scales_offset(C, M);
      for (int64_t i = 0; i < col_bytes; ++i) {  // the data [2F, M] and the codes [M / 32, 2F]
        const bool used = i < C * M || (i >= scales_at && i < scales_at + C * (M / 32));
        if (used) bad_col += col[static_cast<size_t>(i)] != wc[static_cast<size_t>(i)];
      }
      EXPECT_EQ(bad_col, 0) << "bytes of dxy's column bundle differ from the staged pair's";
    }
  }
}

TEST(DgradSwigluMxfp8, MatchesTheStagedPairBitwise) {
  DMOE_REQUIRE_SM90();
  run_dgrad_swiglu_vs_staged(16, 512, 768, 300, false, true, true, 101u);
}
TEST(DgradSwigluMxfp8, ClampedByteCodesLongK) {
  DMOE_REQUIRE_SM90();
  run_dgrad_swiglu_vs_staged(10, 1536, 384, 260, true, false, true, 102u);
}
TEST(DgradSwigluMxfp8, RowsOnlyManyExperts) {
  DMOE_REQUIRE_SM90();
  run_dgrad_swiglu_vs_staged(96, 512, 640, 200, false, true, false, 103u);
}
TEST(DgradSwigluMxfp8, RefusesWhatItCannotDo) {
  DMOE_REQUIRE_SM90();
  DgradArgs d;
  SwigluBackwardMxfp8Args s;
  EXPECT_THROW(grouped_gemm_dgrad_swiglu_mxfp8(d, s, nullptr), Error);  // no counts, formats, pointers
}

}  // namespace
}  // namespace dist_moe::testing
