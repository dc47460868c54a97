// The layer's six grouped GEMMs, argument by argument. The pipeline (bf16_pipeline.cpp) and the
// GEMM-only twin that benchmarks time (routed_experts_gemms_* in routed_experts.h) both start from
// these builders, so the twin runs the layer's configurations, activation and WGRAD settings on the
// same shapes; only where the operands live differs (the layer adds gathers, scatters and planner
// offsets on top).
#pragma once

#include <cstdint>

#include "dist_moe/device/activation/swiglu.cuh"
#include "dist_moe/grouped_gemm.h"
#include "dist_moe/routed_experts.h"
#include "runtime/context_impl.h"

namespace dist_moe::runtime {

// The context's SwiGLU (plain, or clamped with its alpha and limit): the W13 epilogue and the
// standalone SwiGLU kernels (saved-path h2, backward) use the same parameters.
activation::SwigluParams swiglu_params(const Config& config);

// Every GEMM of the layer: this context's local experts, receive capacity and rows per expert.
GroupedGemmCommon layer_gemm_common(const Context::Impl& c, const int32_t* counts, int64_t n, int64_t k);

// W13 FPROP with the SwiGLU epilogue (the context's activation): h2 = SwiGLU(x W13^T), h1 kept when set.
W13FpropArgs w13_fprop_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts);
// W2 FPROP: h3 = h2 W2^T.
FpropArgs w2_fprop_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts);
// W2 DGRAD: grad_h2 = grad_h3 W2; W2 WGRAD: grad_W2 (+)= grad_h3^T h2.
DgradArgs w2_dgrad_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts);
WgradArgs w2_wgrad_args(const Context::Impl& c, const int32_t* counts, void* grad_w2, DType wgrad, bool accumulate);
// W13 DGRAD: grad_x = grad_h1 W13; W13 WGRAD: grad_W13 (+)= grad_h1^T x.
DgradArgs w13_dgrad_args(const Context::Impl& c, const RoutedExpertsInputs& in, const int32_t* counts);
WgradArgs w13_wgrad_args(const Context::Impl& c, const int32_t* counts, void* grad_w13, DType wgrad, bool accumulate);

}  // namespace dist_moe::runtime
