#include "runtime/layer_gemms.h"

#include "dist_moe/check.h"

namespace dist_moe::runtime {

GroupedGemmCommon layer_gemm_common(const Context::Impl& c, const int32_t* counts, int64_t n, int64_t k) {
  GroupedGemmCommon g;
  g.counts = counts;
  g.e_local = c.local_experts;
  g.m_capacity = c.capacity_rows();
  g.n = n;
  g.k = k;
  g.validate_counts = false;  // routing already checked the rows against the capacity
  return g;
}

W13FpropArgs w13_fprop_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  const int64_t D = c.config.hidden_dim, F = c.config.intermediate_dim;
  const bool clamped = c.config.activation == Activation::kSwiGLUClamped;
  W13FpropArgs a;
  a.common = layer_gemm_common(c, counts, 2 * F, D);
  a.w13 = in.w13;
  a.activation = clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
  a.swiglu_alpha = static_cast<float>(clamped ? c.config.swiglu_alpha : kSwigluClampAlphaDefault);
  a.swiglu_limit = static_cast<float>(clamped ? c.config.swiglu_limit : kSwigluClampLimitDefault);
  return a;
}

FpropArgs w2_fprop_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  FpropArgs a;
  a.common = layer_gemm_common(c, counts, c.config.hidden_dim, c.config.intermediate_dim);
  a.w = in.w2;
  return a;
}

DgradArgs w2_dgrad_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  DgradArgs a;
  a.common = layer_gemm_common(c, counts, c.config.hidden_dim, c.config.intermediate_dim);
  a.w = in.w2;
  return a;
}

WgradArgs w2_wgrad_args(const Context::Impl& c, const int32_t* counts, void* grad_w2, DType wgrad, bool accumulate) {
  WgradArgs a;
  a.common = layer_gemm_common(c, counts, c.config.hidden_dim, c.config.intermediate_dim);
  a.grad_w = grad_w2;
  a.out_dtype = wgrad;
  a.accumulate = accumulate;
  return a;
}

DgradArgs w13_dgrad_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  DgradArgs a;
  a.common = layer_gemm_common(c, counts, 2 * c.config.intermediate_dim, c.config.hidden_dim);
  a.w = in.w13;
  return a;
}

WgradArgs w13_wgrad_args(const Context::Impl& c, const int32_t* counts, void* grad_w13, DType wgrad,
                         bool accumulate) {
  WgradArgs a;
  a.common = layer_gemm_common(c, counts, 2 * c.config.intermediate_dim, c.config.hidden_dim);
  a.grad_w = grad_w13;
  a.out_dtype = wgrad;
  a.accumulate = accumulate;
  return a;
}

}  // namespace dist_moe::runtime

// ---- the GEMM-only twin (routed_experts.h) ----------------------------------------------------------

namespace dist_moe {

void routed_experts_gemms_forward(Context& ctx, const RoutedExpertsInputs& weights,
                                  const RoutedExpertsGemmBuffers& b, cudaStream_t stream) {
  const Context::Impl& c = context_impl(ctx);
  DMOE_CHECK_ARG(b.rows_per_expert && b.x && b.h2 && b.h3 && weights.w13 && weights.w2,
                 "the GEMM-only forward needs rows_per_expert, x, h2, h3 and both weights");
  W13FpropArgs w13 = runtime::w13_fprop_args(c, weights, b.rows_per_expert);
  w13.a = b.x;
  w13.h1 = b.h1;
  w13.h2 = b.h2;
  grouped_gemm_w13_fprop(w13, stream);
  c.stage("w13", stream);
  FpropArgs w2 = runtime::w2_fprop_args(c, weights, b.rows_per_expert);
  w2.a = b.h2;
  w2.out = b.h3;
  grouped_gemm_fprop(w2, stream);
  c.stage("w2", stream);
}

void routed_experts_gemms_backward(Context& ctx, const RoutedExpertsInputs& weights,
                                   const RoutedExpertsGemmBuffers& b, const RoutedExpertsGradients& g,
                                   cudaStream_t stream) {
  const Context::Impl& c = context_impl(ctx);
  DMOE_CHECK_ARG(b.rows_per_expert && b.x && b.h2 && b.grad_h3 && b.grad_h2 && b.grad_h1 && b.grad_x && g.grad_w13 &&
                     g.grad_w2 && weights.w13 && weights.w2,
                 "the GEMM-only backward needs every row buffer, both weights and both weight gradients");
  const DType wgrad = c.config.wgrad_dtype.value_or(g.wgrad_dtype);
  const int32_t* rows = b.rows_per_expert;
  DgradArgs d2 = runtime::w2_dgrad_args(c, weights, rows);
  d2.grad_out = b.grad_h3;
  d2.grad_a = b.grad_h2;
  grouped_gemm_dgrad(d2, stream);
  c.stage("w2_dgrad", stream);
  WgradArgs w2g = runtime::w2_wgrad_args(c, rows, g.grad_w2, wgrad, g.accumulate);
  w2g.grad_out = b.grad_h3;
  w2g.a = b.h2;
  grouped_gemm_wgrad(w2g, stream);
  c.stage("w2_wgrad", stream);
  DgradArgs d13 = runtime::w13_dgrad_args(c, weights, rows);
  d13.grad_out = b.grad_h1;
  d13.grad_a = b.grad_x;
  grouped_gemm_dgrad(d13, stream);
  c.stage("w13_dgrad", stream);
  WgradArgs w13g = runtime::w13_wgrad_args(c, rows, g.grad_w13, wgrad, g.accumulate);
  w13g.grad_out = b.grad_h1;
  w13g.a = b.x;
  grouped_gemm_wgrad(w13g, stream);
  c.stage("w13_wgrad", stream);
}

}  // namespace dist_moe
