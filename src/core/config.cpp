// Validation of the configuration types. Rules and their order follow upstream's
// Config.__post_init__ (reference/upstream_api_and_tests.md §1.2-1.6); every message names the
// field, the offending value and the bound.
#include "dist_moe/config.h"

#include <cmath>

#include "dist_moe/error.h"

namespace dist_moe {
namespace {

[[noreturn]] void value_error(const std::string& message) { throw Error(ErrorCode::kInvalidValue, message); }
[[noreturn]] void type_error(const std::string& message) { throw Error(ErrorCode::kInvalidType, message); }

std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

void require_positive(const char* field, int64_t value) {
  if (value <= 0)
    value_error(std::string("Config.") + field + " must be positive, got " + std::to_string(value));
}

}  // namespace

// ---- enums ------------------------------------------------------------------------------------

const char* to_string(Activation a) { return a == Activation::kSwiGLU ? "swiglu" : "swiglu_clamped"; }

Activation parse_activation(const std::string& s) {
  if (s == "swiglu") return Activation::kSwiGLU;
  if (s == "swiglu_clamped") return Activation::kSwiGLUClamped;
  value_error("Config.activation must be 'swiglu' or 'swiglu_clamped', got '" + s + "'");
}

const char* to_string(BlockScaledFormat f) {
  switch (f) {
    case BlockScaledFormat::kMXFP8_E4M3: return "mxfp8_e4m3";
    case BlockScaledFormat::kNVFP4: return "nvfp4";
    case BlockScaledFormat::kFP8Blockwise: return "fp8_blockwise";
  }
  return "?";
}

BlockScaledFormat parse_block_scaled_format(const std::string& s) {
  if (s == "mxfp8_e4m3" || s == "mxfp8") return BlockScaledFormat::kMXFP8_E4M3;
  if (s == "nvfp4") return BlockScaledFormat::kNVFP4;
  if (s == "fp8_blockwise") return BlockScaledFormat::kFP8Blockwise;
  value_error("unsupported DistMoE block-scaled format: '" + s + "' (supported: mxfp8_e4m3, nvfp4, fp8_blockwise)");
}

int block_scaled_vector_size(BlockScaledFormat f) {
  switch (f) {
    case BlockScaledFormat::kMXFP8_E4M3: return 32;
    case BlockScaledFormat::kNVFP4: return 16;
    case BlockScaledFormat::kFP8Blockwise: return 128;
  }
  return 0;
}

const char* to_string(BlockScaledPipeline p) { return p == BlockScaledPipeline::kStaged ? "staged" : "mega"; }

BlockScaledPipeline parse_block_scaled_pipeline(const std::string& s) {
  if (s == "staged") return BlockScaledPipeline::kStaged;
  if (s == "mega") return BlockScaledPipeline::kMega;
  value_error("BlockScaledConfig.pipeline must be 'staged' or 'mega', got '" + s + "'");
}

const std::vector<std::string>& bf16_grouped_gemm_presets() {
  // <warpgroups>wg_bm<BLOCK_M>_bn<BLOCK_N>[_c2]: consumer warpgroups, wgmma tile, 2-CTA cluster.
  static const std::vector<std::string> presets = {
      "1wg_bm64_bn128", "1wg_bm64_bn256", "2wg_bm128_bn128", "2wg_bm128_bn256", "2wg_bm128_bn256_c2",
  };
  return presets;
}

// ---- VmmConfig --------------------------------------------------------------------------------

void VmmConfig::validate() const {
  if (!std::isfinite(total_scratch_capacity_factor) || total_scratch_capacity_factor <= 0)
    value_error("VmmConfig.total_scratch_capacity_factor must be finite and positive, got " +
                num(total_scratch_capacity_factor));
}

// ---- block-scaled -----------------------------------------------------------------------------

void BlockScaledKernelConfig::validate(BlockScaledFormat format) const {
  const std::pair<const char*, int> dims[] = {
      {"num_ctas", num_ctas},       {"block_m", block_m},
      {"block_n", block_n},         {"block_k", block_k},
      {"num_smem_buffers", num_smem_buffers}, {"epilogue_subtile", epilogue_subtile},
      {"kloop_unroll", kloop_unroll}, {"num_warps", num_warps},
  };
  for (const auto& [name, value] : dims)
    if (value <= 0)
      value_error(std::string("block-scaled kernel dimensions must be positive: ") + name + "=" +
                  std::to_string(value));
  if (num_ctas != 1 && num_ctas != 2)
    value_error("BlockScaledKernelConfig.num_ctas must be 1 or 2, got " + std::to_string(num_ctas));
  if (block_n % epilogue_subtile != 0)
    value_error("BlockScaledKernelConfig.block_n=" + std::to_string(block_n) +
                " must be divisible by epilogue_subtile=" + std::to_string(epilogue_subtile));
  if (block_k != 128)
    value_error(std::string(to_string(format)) + " requires block_k=128, got " + std::to_string(block_k));
}

void BlockScaledConfig::validate() const {
  if (format != BlockScaledFormat::kMXFP8_E4M3 && format != BlockScaledFormat::kNVFP4 &&
      format != BlockScaledFormat::kFP8Blockwise)
    value_error("unsupported DistMoE block-scaled format");
  if (fast_math && format == BlockScaledFormat::kNVFP4)
    value_error("fast_math is supported only by the MXFP8 fused path (format=nvfp4)");
  if (pipeline != BlockScaledPipeline::kStaged && pipeline != BlockScaledPipeline::kMega)
    value_error("BlockScaledConfig.pipeline must be 'staged' or 'mega'");
  if (kernel_config) kernel_config->validate(format);
}

// ---- Config -----------------------------------------------------------------------------------

void Config::validate() const {
  // 1. sizes
  require_positive("max_num_local_input_tokens", max_num_local_input_tokens);
  require_positive("hidden_dim", hidden_dim);
  require_positive("intermediate_dim", intermediate_dim);
  require_positive("top_k", top_k);
  // 2. TMA rows of x must be 128-byte multiples
  if (hidden_dim % 64 != 0)
    value_error("Config.hidden_dim must be a multiple of 64 BF16 elements, got " + std::to_string(hidden_dim));
  // 3-4. experts
  if (num_experts <= 0) value_error("Config.num_experts must be positive, got " + std::to_string(num_experts));
  if (top_k > num_experts)
    value_error("Config.top_k cannot exceed num_experts: top_k=" + std::to_string(top_k) +
                " > num_experts=" + std::to_string(num_experts));
  // 5.
  require_positive("max_moe_layers_per_activation_slot", max_moe_layers_per_activation_slot);
  // 6-8. slot capacity controls
  if (activation_slot_bytes && *activation_slot_bytes < 0)
    value_error("Config.activation_slot_bytes cannot be negative, got " + std::to_string(*activation_slot_bytes));
  if (activation_slot_capacity_factor &&
      (!std::isfinite(*activation_slot_capacity_factor) || *activation_slot_capacity_factor < 0))
    value_error("Config.activation_slot_capacity_factor must be finite and nonnegative, got " +
                num(*activation_slot_capacity_factor));
  if (activation_slot_bytes && activation_slot_capacity_factor)
    value_error("Config.activation_slot_bytes and Config.activation_slot_capacity_factor are mutually exclusive");
  // 9-10. slots vs mode
  if (!inference && num_activation_slots <= 0)
    value_error("Config.num_activation_slots: training requires at least one activation slot, got " +
                std::to_string(num_activation_slots));
  if (inference && num_activation_slots < 0)
    value_error("Config.num_activation_slots cannot be negative, got " + std::to_string(num_activation_slots));
  if (inference && (activation_slot_bytes || activation_slot_capacity_factor))
    value_error("inference does not retain saved activations; activation slot capacity controls must be None "
                "(activation_slot_bytes or activation_slot_capacity_factor is set)");
  // 11-12.
  if (!std::isfinite(device_scratch_capacity_factor) || device_scratch_capacity_factor <= 0)
    value_error("Config.device_scratch_capacity_factor must be finite and positive, got " +
                num(device_scratch_capacity_factor));
  if (num_sms && *num_sms <= 0)
    value_error("Config.num_sms must be positive when specified, got " + std::to_string(*num_sms));
  if (vmm) vmm->validate();
  // 13. preset
  if (bf16_grouped_gemm_preset) {
    const auto& presets = bf16_grouped_gemm_presets();
    bool known = false;
    std::string list;
    for (const auto& p : presets) {
      known = known || p == *bf16_grouped_gemm_preset;
      list += (list.empty() ? "" : ", ") + p;
    }
    if (!known)
      value_error("Config.bf16_grouped_gemm_preset must name a supported BF16 preset; got '" +
                  *bf16_grouped_gemm_preset + "' (supported: " + list + ")");
  }
  // 14. WGRAD dtype
  if (wgrad_dtype && *wgrad_dtype != DType::kBFloat16 && *wgrad_dtype != DType::kFloat32)
    type_error(std::string("Config.wgrad_dtype must be None, torch.bfloat16, or torch.float32, got ") +
               to_string(*wgrad_dtype));
  // 15-16. activation
  if (activation == Activation::kSwiGLUClamped &&
      (!std::isfinite(swiglu_alpha) || swiglu_alpha <= 0 || !std::isfinite(swiglu_limit) || swiglu_limit <= 0))
    value_error("clamped SwiGLU requires finite positive swiglu_alpha and swiglu_limit, got swiglu_alpha=" +
                num(swiglu_alpha) + ", swiglu_limit=" + num(swiglu_limit));
  // 17. block-scaled
  if (block_scaled) {
    block_scaled->validate();
    const int vec = block_scaled_vector_size(block_scaled->format);
    const char* fmt = to_string(block_scaled->format);
    if (hidden_dim % vec != 0 || intermediate_dim % vec != 0)
      value_error(std::string(fmt) + " requires hidden_dim and intermediate_dim divisible by its vector size " +
                  std::to_string(vec) + ", got hidden_dim=" + std::to_string(hidden_dim) +
                  ", intermediate_dim=" + std::to_string(intermediate_dim));
    if (block_scaled->format == BlockScaledFormat::kNVFP4) {
      if (!inference) value_error("NVFP4 DistMoE is inference-only: set Config.inference=true");
      if (hidden_dim % 256 != 0 || intermediate_dim % 256 != 0 || hidden_dim > 16384 || intermediate_dim > 8192)
        value_error("NVFP4 requires hidden_dim to be a multiple of 256 and at most 16384, and intermediate_dim "
                    "a multiple of 256 and at most 8192; got hidden_dim=" + std::to_string(hidden_dim) +
                    ", intermediate_dim=" + std::to_string(intermediate_dim));
    }
  }
}

// ---- RMSNorm postprocess ----------------------------------------------------------------------

namespace {
// Returns an empty string when the base contract holds, else the first reason it fails.
std::string rmsnorm_contract_violation(DType input_dtype, DType score_dtype, DType norm_output_dtype,
                                       DType output_dtype, int64_t topk, int64_t dim) {
  if (input_dtype != DType::kBFloat16)
    return std::string("expert output dtype must be bfloat16, got ") + to_string(input_dtype);
  if (score_dtype != DType::kFloat32) return std::string("score dtype must be float32, got ") + to_string(score_dtype);
  if (norm_output_dtype != DType::kFloat32)
    return std::string("norm_output_dtype must be float32, got ") + to_string(norm_output_dtype);
  if (output_dtype != DType::kBFloat16 && output_dtype != DType::kFloat32)
    return std::string("output_dtype must be bfloat16 or float32, got ") + to_string(output_dtype);
  if (topk != 2 && topk != 8) return "top_k must be 2 or 8, got " + std::to_string(topk);
  if (dim < 256 || dim > 16384 || dim % 128 != 0)
    return "hidden_dim must be a multiple of 128 in [256, 16384], got " + std::to_string(dim);
  return {};
}
}  // namespace

bool supports_fused_post_expert_rmsnorm(DType input_dtype, DType score_dtype, DType norm_output_dtype,
                                        DType output_dtype, int64_t topk, int64_t dim) {
  if (output_dtype != input_dtype) return false;
  return rmsnorm_contract_violation(input_dtype, score_dtype, norm_output_dtype, output_dtype, topk, dim).empty();
}

void RMSNormPostprocess::validate(DType input_dtype, DType score_dtype, int64_t top_k, int64_t dim,
                                  bool training) const {
  if (!std::isfinite(eps) || eps <= 0)
    value_error("RMSNormPostprocess.eps must be finite and positive, got " + num(eps));
  if (output_dtype != input_dtype)
    value_error(std::string("RMSNormPostprocess.output_dtype must equal the input dtype ") + to_string(input_dtype) +
                ", got " + to_string(output_dtype));
  const std::string why = rmsnorm_contract_violation(input_dtype, score_dtype, norm_output_dtype, output_dtype, top_k, dim);
  if (!why.empty()) value_error("fused post-expert RMSNorm is unsupported: " + why);
  if (training && !require_bitwise && dim > 12288)
    value_error("non-bitwise fused RMSNorm dims above 12288 are inference-only, got hidden_dim=" +
                std::to_string(dim));
  if (weight == nullptr && gain_center != 0.0)
    value_error("RMSNormPostprocess.gain_center requires a weight, got gain_center=" + num(gain_center));
  if (weight != nullptr && use_kahan)
    value_error("RMSNormPostprocess.weight cannot be combined with use_kahan=true");
  if (weight != nullptr && weight_dtype != input_dtype)
    value_error(std::string("RMSNormPostprocess.weight must have the input dtype ") + to_string(input_dtype) +
                ", got " + to_string(weight_dtype));
  if (weight != nullptr && training)
    value_error("RMSNormPostprocess.weight is inference/forward-only (training call)");
}

// ---- ExecutionOptions -------------------------------------------------------------------------

void ExecutionOptions::validate() const {
  if (!std::isfinite(swiglu_clip_limit))
    value_error("ExecutionOptions.swiglu_clip_limit must be finite, got " + num(swiglu_clip_limit));
  if (grad_expert_output_TKD && experts_output_postprocess)
    value_error("ExecutionOptions: grad_expert_output_TKD (the caller differentiates its own reduction) cannot be "
                "combined with the fused RMSNorm postprocess");
  if (grad_expert_output_TKD && grad_expert_output_out_TKD)
    value_error("ExecutionOptions: grad_expert_output_TKD and grad_expert_output_out_TKD are mutually exclusive");
}

// ---- block-scaled execution (checked when a context is created) ----------------------------------

void validate_block_scaled_execution(const Config& config, int64_t ep_size) {
  if (!config.block_scaled) return;
  const BlockScaledConfig& bs = *config.block_scaled;
  // Mega on Hopper (issue #28): NVFP4 inference (decode sizes), MXFP8 inference of every size and
  // MXFP8 training (the forward in one launch, the backward staged: mxfp8_pipeline.cpp); the context
  // checks the sizes (context.cpp).
  const bool mega_built = bs.format == BlockScaledFormat::kMXFP8_E4M3 ||
                          (config.inference && bs.format == BlockScaledFormat::kNVFP4);
  if (bs.pipeline != BlockScaledPipeline::kStaged && !mega_built)
    detail::fail(ErrorCode::kInvalidValue, "BlockScaledConfig.pipeline='mega' has no Hopper execution yet for ",
                 to_string(bs.format), "; use pipeline='staged' (Mega runs MXFP8, and NVFP4 inference)");
  if (bs.fast_math)
    detail::fail(ErrorCode::kInvalidValue, "BlockScaledConfig.fast_math has no Hopper execution yet; use "
                 "fast_math=False");
  if (bs.kernel_config)
    detail::fail(ErrorCode::kInvalidValue, "BlockScaledConfig.kernel_config has no Hopper execution yet (the MXFP8 "
                 "GEMMs pick their tiles by shape); leave it None");
  if (config.num_experts < ep_size)
    detail::fail(ErrorCode::kInvalidValue, "block-scaled DistMoE requires num_experts >= world_size, got num_experts=",
                 config.num_experts, " and world_size=", ep_size);
  if (config.hidden_dim % 128 != 0 || config.intermediate_dim % 128 != 0)
    detail::fail(ErrorCode::kInvalidValue, "MXFP8 DistMoE requires hidden_dim and intermediate_dim to be multiples of "
                 "128, got hidden_dim=", config.hidden_dim, " and intermediate_dim=", config.intermediate_dim);
}

}  // namespace dist_moe
