// The MXFP8 training numerics on one GPU, stage by stage, against the CPU oracle's MXFP8 pipeline
// (reference::Quantization::kMXFP8: upstream's quantization points, upstream_kernels_and_formats.md
// §4.6) -- the kernels the staged layer will chain (docs/block_scaled_layer.md), without the layer:
//   quantizers  x_gathered, grad_h3, grad_h1 in 1x32 rows and 32x1 columns restarting at each
//               expert's padded offset, weights in 32x32 tiles (at shared scales per 128x128 block, as
//               the training preparation writes them): bit for bit against the oracle's
//               dequantized operands (the columns through mxfp8_dequantize_columns);
//   GEMMs       W13 FPROP + SwiGLU and W2 FPROP (MXFP8), W2 / W13 DGRAD on the transposed weight
//               copies (MXFP8), W2 / W13 WGRAD as the BF16 WGRAD on the dequantized columns: within
//               the BF16 tolerances of the oracle's float model (accumulation order differs).
// Forward stages take the GPU's own previous output (h2 -> W2); backward stages start from the
// oracle's gradients (grad_h3, grad_h1), so each GEMM is judged on its own inputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/grouped_gemm.h"
#include "gpu_test_util.h"
#include "mxfp8_test_util.h"
#include "quant/quantize.h"
#include "reference/oracle.h"
#include "testing/device_buffer.h"

namespace dist_moe::testing {
namespace {

using reference::TensorF;

DeviceBuffer<uint16_t> upload_bf16(const TensorF& t) { return DeviceBuffer<uint16_t>(to_bf16_bits(t.data)); }

void sync() { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError()); }

// Rows [cap, C] quantized in 1x32 row blocks and 32x1 column blocks (transposed: [C, cap]).
struct Bundles {
  DeviceBuffer<uint8_t> q, s, qt, st;
};

Bundles quantize_rows_cols(const DeviceBuffer<uint16_t>& x, int64_t cap, int64_t C, const quant::RowGroups& groups) {
  Bundles b;
  b.q = DeviceBuffer<uint8_t>(static_cast<size_t>(cap * C));
  b.s = DeviceBuffer<uint8_t>(static_cast<size_t>(cap * C / 32));
  b.qt = DeviceBuffer<uint8_t>(static_cast<size_t>(C * cap));
  b.st = DeviceBuffer<uint8_t>(static_cast<size_t>(C * cap / 32));
  quant::mxfp8_quantize_rows_cols(quant::Bf16Matrix{x.get(), cap, C, C}, groups,
                                  quant::Mxfp8Out{b.q.get(), C, b.s.get(), C / 32, 1},
                                  quant::Mxfp8Out{b.qt.get(), cap, b.st.get(), cap / 32, 1}, nullptr);
  sync();
  return b;
}

// The row bundle's values, dequantized on the host.
TensorF row_values(const Bundles& b, int64_t cap, int64_t C) {
  TensorF t({cap, C});
  t.data = mxfp8_row_values(b.q, b.s, cap, C);
  return t;
}

// The column bundle back as BF16 rows [cap, C] on the GPU (the BF16 WGRAD's operand).
DeviceBuffer<uint16_t> column_rows(const Bundles& b, int64_t cap, int64_t C, const quant::RowGroups& groups) {
  DeviceBuffer<uint16_t> y(static_cast<size_t>(cap * C));
  quant::mxfp8_dequantize_columns(quant::Mxfp8In{b.qt.get(), cap, b.st.get(), cap / 32, 1}, groups,
                                  quant::Bf16MatrixOut{y.get(), cap, C, C}, nullptr);
  sync();
  return y;
}

TensorF weight_values(const Mxfp8TileWeight& w, int64_t E, int64_t N, int64_t K) {
  TensorF t({E, N, K});
  t.data = w.values();
  return t;
}

TensorF bf16_tensor(const DeviceBuffer<uint16_t>& d, std::vector<int64_t> shape) {
  return tensor_from_bf16(d.download(), std::move(shape));
}

void expect_bitwise(const std::string& what, const TensorF& got, const TensorF& oracle) {
  const reference::Comparison c = reference::compare(got, oracle);
  EXPECT_EQ(c.bit_mismatches, 0) << what << ": " << c.summary();
  std::printf("  %-34s bitwise: %lld of %lld differ\n", what.c_str(), static_cast<long long>(c.bit_mismatches),
              static_cast<long long>(c.count));
}

void expect_within(const std::string& what, const TensorF& got, const TensorF& oracle, const reference::Tolerance& tol) {
  const reference::Comparison c = reference::compare(got, oracle, tol);
  EXPECT_TRUE(c.passed) << what << ": " << c.summary();
  std::printf("  %-34s %s\n", what.c_str(), c.summary().c_str());
}

GroupedGemmCommon mx_common(const DeviceBuffer<int32_t>& counts, int64_t E, int64_t M, int64_t n, int64_t k,
                            const OperandFormat& b_format, const void* a_scales, int64_t a_ld, const void* b_scales) {
  GroupedGemmCommon c;
  c.counts = counts.get();
  c.e_local = E;
  c.m_capacity = M;
  c.n = n;
  c.k = k;
  c.a_format = kMxfp8Rows;
  c.b_format = b_format;
  c.scales = OperandScales{a_scales, a_ld, b_scales};
  return c;
}

GroupedGemmCommon bf16_common(const DeviceBuffer<int32_t>& counts, int64_t E, int64_t M, int64_t n, int64_t k) {
  GroupedGemmCommon c;
  c.counts = counts.get();
  c.e_local = E;
  c.m_capacity = M;
  c.n = n;
  c.k = k;
  return c;
}

// MXFP8 DGRAD of a row bundle of grad_out [M, n] through the weight's transposed copy: BF16 [M, k].
TensorF mxfp8_dgrad(const DeviceBuffer<int32_t>& counts, int64_t E, int64_t M, int64_t n, int64_t k, const Bundles& g,
                    const Mxfp8TileWeight& w) {
  DeviceBuffer<uint16_t> out(static_cast<size_t>(M * k));
  DgradArgs d;
  d.common = mx_common(counts, E, M, n, k, kMxfp8WeightT, g.s.get(), n / 32, w.s_dgrad.get());
  d.grad_out = g.q.get();
  d.w = w.q_t.get();
  d.grad_a = out.get();
  grouped_gemm_dgrad(d, nullptr);
  sync();
  return bf16_tensor(out, {M, k});
}

// Our BF16 WGRAD of two BF16 row buffers (grad_out [M, n], a [M, k]), FP32 [E, n, k].
TensorF bf16_wgrad(const DeviceBuffer<int32_t>& counts, int64_t E, int64_t M, int64_t n, int64_t k,
                   const DeviceBuffer<uint16_t>& grad_out, const DeviceBuffer<uint16_t>& a) {
  DeviceBuffer<float> dw(static_cast<size_t>(E * n * k));
  WgradArgs w;
  w.common = bf16_common(counts, E, M, n, k);
  w.grad_out = grad_out.get();
  w.a = a.get();
  w.grad_w = dw.get();
  w.out_dtype = DType::kFloat32;
  grouped_gemm_wgrad(w, nullptr);
  sync();
  TensorF t({E, n, k});
  t.data = dw.download();
  return t;
}

void run_chain(const reference::RandomProblemSpec& spec) {
  const reference::Problem p = reference::make_random_problem(spec);
  reference::ForwardOptions fo;
  fo.row_alignment = 128;  // the block-scaled layout: every local expert padded to 128 rows
  fo.quantization = reference::Quantization::kMXFP8;
  const reference::ForwardResult fwd = reference::forward(p, fo);
  reference::Rng rng(spec.seed + 100);
  TensorF grad_out({p.tokens(0), p.hidden_dim});
  for (float& g : grad_out.data) g = rng.bf16_uniform(-1.0, 1.0);
  reference::BackwardOptions bo;
  bo.wgrad_dtype = DType::kFloat32;
  const reference::BackwardResult bwd = reference::backward(p, fwd, {grad_out}, bo);
  const auto& rf = fwd.ranks[0];
  const auto& rb = bwd.ranks[0];
  const reference::RankRouting& rt = rf.routing;
  const int64_t L = p.num_local_experts(), D = p.hidden_dim, F = p.intermediate_dim, M = rt.num_rows();
  std::printf("mxfp8 chain: T=%lld D=%lld F=%lld K=%lld E=%lld, M=%lld expert-major rows (%lld real)\n",
              static_cast<long long>(p.tokens(0)), static_cast<long long>(D), static_cast<long long>(F),
              static_cast<long long>(p.top_k), static_cast<long long>(L), static_cast<long long>(M),
              static_cast<long long>(rt.num_valid_rows()));
  ASSERT_GT(M, 0);
  std::vector<int32_t> padded, real, offsets;
  for (int64_t e = 0; e < L; ++e) {
    padded.push_back(static_cast<int32_t>(rt.expert_padded_counts[e]));
    real.push_back(static_cast<int32_t>(rt.expert_counts[e]));
  }
  for (int64_t o : rt.expert_offsets) offsets.push_back(static_cast<int32_t>(o));
  const DeviceBuffer<int32_t> d_padded(padded), d_real(real), d_offsets(offsets);
  const quant::RowGroups groups{d_real.get(), d_offsets.get(), static_cast<int32_t>(L)};

  // Quantization points: x after the gather, the weights.
  const DeviceBuffer<uint16_t> x = upload_bf16(rf.x_gathered_MD);
  const Bundles xb = quantize_rows_cols(x, M, D, groups);
  expect_bitwise("x rows (W13 FPROP operand)", row_values(xb, M, D), rf.quantized.x_row_MD);
  const DeviceBuffer<uint16_t> x_cols = column_rows(xb, M, D, groups);
  expect_bitwise("x columns (W13 WGRAD operand)", bf16_tensor(x_cols, {M, D}), rf.quantized.x_col_MD);
  // (the training preparation's tiles at shared scales per 128x128 block, which the oracle models; read
  // per 32 by the MXFP8 kernels below, as Mega reads them)
  const Mxfp8TileWeight w13 = quantize_mxfp8_weight(to_bf16_bits(p.local_w13(0).data), L, 2 * F, D, true);
  const Mxfp8TileWeight w2 = quantize_mxfp8_weight(to_bf16_bits(p.local_w2(0).data), L, D, F, true);
  expect_bitwise("w13 32x32 tiles", weight_values(w13, L, 2 * F, D), rf.quantized.w13_EFD);
  expect_bitwise("w2 32x32 tiles", weight_values(w2, L, D, F), rf.quantized.w2_EDF);

  // Forward: W13 FPROP + SwiGLU, h2 quantized, W2 FPROP.
  DeviceBuffer<uint16_t> h1(static_cast<size_t>(M * 2 * F)), h2(static_cast<size_t>(M * F)), h3(static_cast<size_t>(M * D));
  W13FpropArgs f13;
  f13.common = mx_common(d_padded, L, M, 2 * F, D, kMxfp8Weight, xb.s.get(), D / 32, w13.s.get());
  f13.a = xb.q.get();
  f13.w13 = w13.q.get();
  f13.h1 = h1.get();
  f13.h2 = h2.get();
  f13.activation = p.swiglu.activation;
  f13.swiglu_alpha = static_cast<float>(p.swiglu.alpha);
  f13.swiglu_limit = static_cast<float>(p.swiglu.limit);
  grouped_gemm_w13_fprop(f13, nullptr);
  sync();
  expect_within("h1 = x_row . w13", bf16_tensor(h1, {M, 2 * F}), rf.h1_M2F, reference::kBf16OutputTolerance);
  expect_within("h2 = swiglu(h1)", bf16_tensor(h2, {M, F}), rf.h2_MF, reference::kBf16OutputTolerance);
  const Bundles h2b = quantize_rows_cols(h2, M, F, groups);
  FpropArgs f2;
  f2.common = mx_common(d_padded, L, M, D, F, kMxfp8Weight, h2b.s.get(), F / 32, w2.s.get());
  f2.a = h2b.q.get();
  f2.w = w2.q.get();
  f2.out = h3.get();
  grouped_gemm_fprop(f2, nullptr);
  sync();
  expect_within("h3 = h2_row . w2", bf16_tensor(h3, {M, D}), rf.h3_MD, reference::kBf16OutputTolerance);

  // W2 backward from the oracle's gathered grad_h3.
  const DeviceBuffer<uint16_t> g3 = upload_bf16(rb.grad_h3_MD);
  const Bundles g3b = quantize_rows_cols(g3, M, D, groups);
  expect_bitwise("grad_h3 rows (W2 DGRAD operand)", row_values(g3b, M, D), rb.quantized.grad_h3_row_MD);
  const DeviceBuffer<uint16_t> g3_cols = column_rows(g3b, M, D, groups);
  expect_bitwise("grad_h3 columns (W2 WGRAD operand)", bf16_tensor(g3_cols, {M, D}), rb.quantized.grad_h3_col_MD);
  expect_within("grad_h2 = grad_h3_row . w2", mxfp8_dgrad(d_padded, L, M, D, F, g3b, w2), rb.grad_h2_MF,
                reference::kBf16GradTolerance);
  const DeviceBuffer<uint16_t> h2_cols = column_rows(h2b, M, F, groups);
  expect_within("dw2 = grad_h3_col^T . h2_col", bf16_wgrad(d_padded, L, M, D, F, g3_cols, h2_cols), rb.dw2_EDF,
                reference::kBf16GradTolerance);

  // W13 backward from the oracle's grad_h1 (SwiGLU backward's output).
  const DeviceBuffer<uint16_t> g1 = upload_bf16(rb.grad_h1_M2F);
  const Bundles g1b = quantize_rows_cols(g1, M, 2 * F, groups);
  expect_bitwise("grad_h1 rows (W13 DGRAD operand)", row_values(g1b, M, 2 * F), rb.quantized.grad_h1_row_M2F);
  const DeviceBuffer<uint16_t> g1_cols = column_rows(g1b, M, 2 * F, groups);
  expect_bitwise("grad_h1 columns (W13 WGRAD operand)", bf16_tensor(g1_cols, {M, 2 * F}),
                 rb.quantized.grad_h1_col_M2F);
  expect_within("grad_x routes = grad_h1_row . w13", mxfp8_dgrad(d_padded, L, M, 2 * F, D, g1b, w13),
                rb.grad_x_route_MD, reference::kBf16GradTolerance);
  expect_within("dw13 = grad_h1_col^T . x_col", bf16_wgrad(d_padded, L, M, 2 * F, D, g1_cols, x_cols), rb.dw13_EFD,
                reference::kBf16GradTolerance);
}

// K = 6 of E = 8 with -1 routes, so experts get ragged row counts padded to 128.
TEST(Mxfp8Chain, MatchesTheOracleStageByStage) {
  DMOE_REQUIRE_SM90();
  reference::RandomProblemSpec spec;
  spec.tokens_per_rank = 200;
  spec.hidden_dim = 512;
  spec.intermediate_dim = 384;
  spec.top_k = 6;
  spec.num_experts = 8;
  spec.padding_route_probability = 0.1;
  spec.seed = 18;
  run_chain(spec);
}

// Clamped SwiGLU, skewed routing (an expert with few rows, one with many).
TEST(Mxfp8Chain, ClampedSkewed) {
  DMOE_REQUIRE_SM90();
  reference::RandomProblemSpec spec;
  spec.tokens_per_rank = 150;
  spec.hidden_dim = 256;
  spec.intermediate_dim = 256;
  spec.top_k = 2;
  spec.num_experts = 4;
  spec.routing = reference::RoutingPattern::kSkewed;
  spec.swiglu.activation = Activation::kSwiGLUClamped;
  spec.swiglu.limit = 0.5;
  spec.seed = 19;
  run_chain(spec);
}

}  // namespace
}  // namespace dist_moe::testing
