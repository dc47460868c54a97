#include "runtime/layer_gemms.h"

#include <algorithm>

#include "dist_moe/check.h"
#include "dist_moe/memory_plan.h"

namespace dist_moe::runtime {

activation::SwigluParams swiglu_params(const Config& config) {
  const bool clamped = config.activation == Activation::kSwiGLUClamped;
  return {clamped, static_cast<float>(clamped ? config.swiglu_alpha : kSwigluClampAlphaDefault),
          static_cast<float>(clamped ? config.swiglu_limit : kSwigluClampLimitDefault)};
}

GroupedGemmCommon layer_gemm_common(const Context::Impl& c, const int32_t* counts, int64_t n, int64_t k) {
  GroupedGemmCommon g;
  g.counts = counts;
  g.e_local = c.local_experts;
  g.m_capacity = c.capacity_rows();
  g.n = n;
  g.k = k;
  g.validate_counts = false;  // routing already checked the rows against the capacity
  // Block-scaled buffers keep upstream's 128-row padding bound per expert, routing may pad to 32:
  // the rows a call can use are then fewer, which decides the GEMMs' size class (decode or not).
  // Without the padding, the same bound is the token rows the call can route: its average per
  // expert decides how wide the block-scaled decode tiles are.
  if (c.config.block_scaled) {
    const auto recv_rows = [&](int64_t row_multiple) {
      return std::min(g.m_capacity, plan_max_recv_rows(c.config.max_num_local_input_tokens, c.config.top_k,
                                                       c.plan.total_scratch_capacity_factor, c.local_experts, c.world,
                                                       row_multiple));
    };
    g.m_bound = recv_rows(routing_row_alignment(c.config, c.mxfp8_on_fp8_blockwise));
    g.routed_rows_bound = recv_rows(1);
  }
  return g;
}

namespace {

// The two weights' GEMM shapes: W13 n = 2F, k = D; W2 n = D, k = F.
int64_t w13_n(const Context::Impl& c) { return 2 * c.config.intermediate_dim; }
int64_t w2_n(const Context::Impl& c) { return c.config.hidden_dim; }

DgradArgs dgrad_args(const Context::Impl& c, const int32_t* counts, int64_t n, int64_t k, const void* w) {
  DgradArgs a;
  a.common = layer_gemm_common(c, counts, n, k);
  a.w = w;
  return a;
}

WgradArgs wgrad_args(const Context::Impl& c, const int32_t* counts, int64_t n, int64_t k, void* grad_w, DType wgrad,
                     bool accumulate) {
  WgradArgs a;
  a.common = layer_gemm_common(c, counts, n, k);
  a.grad_w = grad_w;
  a.out_dtype = wgrad;
  a.accumulate = accumulate;
  return a;
}

}  // namespace

W13FpropArgs w13_fprop_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  const activation::SwigluParams sp = swiglu_params(c.config);
  W13FpropArgs a;
  a.common = layer_gemm_common(c, counts, w13_n(c), c.config.hidden_dim);
  a.common.promote_k = c.w13_promote_k;
  a.w13 = in.w13;
  a.activation = sp.clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
  a.swiglu_alpha = sp.alpha;
  a.swiglu_limit = sp.limit;
  return a;
}

FpropArgs w2_fprop_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  FpropArgs a;
  a.common = layer_gemm_common(c, counts, w2_n(c), c.config.intermediate_dim);
  a.w = in.w2;
  return a;
}

DgradArgs w2_dgrad_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  return dgrad_args(c, counts, w2_n(c), c.config.intermediate_dim, in.w2);
}

WgradArgs w2_wgrad_args(const Context::Impl& c, const int32_t* counts, void* grad_w2, DType wgrad, bool accumulate) {
  return wgrad_args(c, counts, w2_n(c), c.config.intermediate_dim, grad_w2, wgrad, accumulate);
}

DgradArgs w13_dgrad_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts) {
  return dgrad_args(c, counts, w13_n(c), c.config.hidden_dim, in.w13);
}

WgradArgs w13_wgrad_args(const Context::Impl& c, const int32_t* counts, void* grad_w13, DType wgrad,
                         bool accumulate) {
  return wgrad_args(c, counts, w13_n(c), c.config.hidden_dim, grad_w13, wgrad, accumulate);
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
