// Config validation: every upstream rule that applies in C++, with its message fragment, the field,
// the value and the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "dist_moe/config.h"
#include "dist_moe/error.h"
#include "test_helpers.h"

namespace dist_moe {
namespace {

using test_helpers::expect_error;

Config base_config() { return test_helpers::make_config(4, 128, 128, 2, 4, 1); }

void expect_invalid(const Config& c, std::initializer_list<std::string> fragments) {
  expect_error([&] { c.validate(); }, ErrorCode::kInvalidValue, fragments);
}

// Double, unlike test_helpers' float kNaN / kInf: the fields and the {..} lists below are double.
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(ConfigValidation, BaseConfigIsValid) { EXPECT_NO_THROW(base_config().validate()); }

TEST(ConfigValidation, SizesMustBePositive) {
  for (auto field : {&Config::max_num_local_input_tokens, &Config::hidden_dim, &Config::intermediate_dim, &Config::top_k}) {
    for (int64_t bad : {0, -3}) {
      Config c = base_config();
      c.*field = bad;
      expect_invalid(c, {"must be positive", "got " + std::to_string(bad)});
    }
  }
  Config c = base_config();
  c.max_num_local_input_tokens = 0;
  expect_invalid(c, {"Config.max_num_local_input_tokens must be positive, got 0"});
}

TEST(ConfigValidation, HiddenDimMultipleOf64) {
  Config c = base_config();
  c.hidden_dim = 100;
  expect_invalid(c, {"hidden_dim must be a multiple of 64 BF16 elements", "got 100"});
  c.hidden_dim = 192;
  EXPECT_NO_THROW(c.validate());
}

TEST(ConfigValidation, ExpertsPositiveAndTopKBound) {
  Config c = base_config();
  c.num_experts = 0;
  c.top_k = 1;
  expect_invalid(c, {"num_experts must be positive", "got 0"});
  c = base_config();
  c.top_k = 9;
  c.num_experts = 8;
  expect_invalid(c, {"top_k cannot exceed num_experts", "top_k=9", "num_experts=8"});
  c.top_k = 8;
  EXPECT_NO_THROW(c.validate());
}

TEST(ConfigValidation, LayersPerSlotPositive) {
  Config c = base_config();
  c.max_moe_layers_per_activation_slot = 0;
  expect_invalid(c, {"max_moe_layers_per_activation_slot must be positive", "got 0"});
}

TEST(ConfigValidation, SlotCapacityControls) {
  Config c = base_config();
  c.activation_slot_bytes = -1;
  expect_invalid(c, {"activation_slot_bytes cannot be negative", "got -1"});
  for (double bad : {-1.0, kNaN, kInf}) {
    c = base_config();
    c.activation_slot_capacity_factor = bad;
    expect_invalid(c, {"activation_slot_capacity_factor must be finite and nonnegative"});
  }
  c = base_config();
  c.activation_slot_bytes = 4096;
  c.activation_slot_capacity_factor = 1.0;
  expect_invalid(c, {"mutually exclusive"});
  c = base_config();
  c.activation_slot_capacity_factor = 0.0;
  EXPECT_NO_THROW(c.validate());
}

TEST(ConfigValidation, SlotCountByMode) {
  Config c = base_config();
  c.num_activation_slots = 0;
  expect_invalid(c, {"training requires at least one activation slot", "got 0"});
  c.inference = true;
  EXPECT_NO_THROW(c.validate());  // inference allows zero slots
  c.num_activation_slots = -1;
  expect_invalid(c, {"num_activation_slots cannot be negative", "got -1"});
  c.num_activation_slots = 0;
  c.activation_slot_capacity_factor = 1.0;
  expect_invalid(c, {"inference does not retain saved activations; activation slot capacity controls must be None"});
  c.activation_slot_capacity_factor.reset();
  c.activation_slot_bytes = 4096;
  expect_invalid(c, {"does not retain saved activations"});
}

TEST(ConfigValidation, ScratchFactorsFiniteAndPositive) {
  for (double bad : {kNaN, kInf, 0.0, -1.0}) {
    Config c = base_config();
    c.device_scratch_capacity_factor = bad;
    expect_invalid(c, {"device_scratch_capacity_factor must be finite and positive"});
    VmmConfig v;
    v.total_scratch_capacity_factor = bad;
    expect_error([&] { v.validate(); }, ErrorCode::kInvalidValue, {"total_scratch_capacity_factor must be finite and positive"});
    c = base_config();
    c.vmm = v;
    expect_invalid(c, {"total_scratch_capacity_factor must be finite and positive"});
  }
}

TEST(ConfigValidation, NumSmsPositiveWhenSet) {
  Config c = base_config();
  c.num_sms = 0;
  expect_invalid(c, {"num_sms must be positive when specified", "got 0"});
  c.num_sms = 132;
  EXPECT_NO_THROW(c.validate());
}

TEST(ConfigValidation, PresetMustBeKnown) {
  Config c = base_config();
  c.bf16_grouped_gemm_preset = "unknown";
  expect_invalid(c, {"must name a supported BF16 preset", "'unknown'"});
  for (const auto& p : bf16_grouped_gemm_presets()) {
    c.bf16_grouped_gemm_preset = p;
    EXPECT_NO_THROW(c.validate()) << p;
  }
}

TEST(ConfigValidation, WgradDtypeIsATypeError) {
  Config c = base_config();
  EXPECT_FALSE(c.wgrad_dtype.has_value());  // default None
  c.wgrad_dtype = DType::kFloat16;
  expect_error([&] { c.validate(); }, ErrorCode::kInvalidType,
               {"wgrad_dtype must be None, torch.bfloat16, or torch.float32", "float16"});
  c.wgrad_dtype = DType::kFloat32;
  EXPECT_NO_THROW(c.validate());
  c.wgrad_dtype = DType::kBFloat16;
  EXPECT_NO_THROW(c.validate());
}

TEST(ConfigValidation, ActivationNames) {
  EXPECT_EQ(parse_activation("swiglu"), Activation::kSwiGLU);
  EXPECT_EQ(parse_activation("swiglu_clamped"), Activation::kSwiGLUClamped);
  expect_error([] { parse_activation("gelu"); }, ErrorCode::kInvalidValue, {"activation", "'gelu'"});
}

TEST(ConfigValidation, ClampedSwigluParameters) {
  for (double bad : {0.0, kNaN, kInf, -1.0}) {
    Config c = base_config();
    c.activation = Activation::kSwiGLUClamped;
    c.swiglu_alpha = bad;
    expect_invalid(c, {"clamped SwiGLU requires finite positive swiglu_alpha and swiglu_limit"});
    c.swiglu_alpha = 1.5;
    c.swiglu_limit = bad;
    expect_invalid(c, {"finite positive"});
    c.activation = Activation::kSwiGLU;  // plain SwiGLU ignores alpha and limit
    EXPECT_NO_THROW(c.validate());
  }
}

TEST(ConfigValidation, BlockScaledFormats) {
  EXPECT_EQ(parse_block_scaled_format("mxfp8_e4m3"), BlockScaledFormat::kMXFP8_E4M3);
  EXPECT_EQ(parse_block_scaled_format("nvfp4"), BlockScaledFormat::kNVFP4);
  expect_error([] { parse_block_scaled_format("mxfp4"); }, ErrorCode::kInvalidValue, {"unsupported DistMoE block-scaled format"});
  EXPECT_EQ(BlockScaledConfig{}.format, BlockScaledFormat::kMXFP8_E4M3);  // default
  BlockScaledConfig nv;
  nv.format = BlockScaledFormat::kNVFP4;
  nv.fast_math = true;
  expect_error([&] { nv.validate(); }, ErrorCode::kInvalidValue, {"fast_math is supported only by the MXFP8 fused path"});
  expect_error([] { parse_block_scaled_pipeline("fused"); }, ErrorCode::kInvalidValue, {"'staged' or 'mega'"});
}

TEST(ConfigValidation, BlockScaledKernelConfig) {
  BlockScaledKernelConfig k;
  EXPECT_NO_THROW(k.validate(BlockScaledFormat::kMXFP8_E4M3));
  k.block_m = 0;
  expect_error([&] { k.validate(BlockScaledFormat::kMXFP8_E4M3); }, ErrorCode::kInvalidValue,
               {"block-scaled kernel dimensions must be positive", "block_m=0"});
  k = {};
  k.num_ctas = 3;
  expect_error([&] { k.validate(BlockScaledFormat::kMXFP8_E4M3); }, ErrorCode::kInvalidValue, {"num_ctas must be 1 or 2", "got 3"});
  k = {};
  k.epilogue_subtile = 48;
  expect_error([&] { k.validate(BlockScaledFormat::kMXFP8_E4M3); }, ErrorCode::kInvalidValue,
               {"block_n=128 must be divisible by epilogue_subtile=48"});
  k = {};
  k.block_k = 64;
  expect_error([&] { k.validate(BlockScaledFormat::kNVFP4); }, ErrorCode::kInvalidValue, {"nvfp4 requires block_k=128, got 64"});
  Config c = base_config();
  c.block_scaled = BlockScaledConfig{};
  c.block_scaled->kernel_config = k;
  expect_invalid(c, {"mxfp8_e4m3 requires block_k=128"});
}

TEST(ConfigValidation, BlockScaledDimensions) {
  Config c = base_config();
  c.block_scaled = BlockScaledConfig{};
  c.hidden_dim = 64 * 3;  // 192 divisible by 32
  c.intermediate_dim = 100;
  expect_invalid(c, {"divisible by its vector size 32", "intermediate_dim=100"});
  // NVFP4: inference only, dims multiples of 256 within bounds.
  c = base_config();
  c.hidden_dim = 256;
  c.intermediate_dim = 256;
  c.block_scaled = BlockScaledConfig{};
  c.block_scaled->format = BlockScaledFormat::kNVFP4;
  expect_invalid(c, {"NVFP4 DistMoE is inference-only"});
  c.inference = true;
  c.num_activation_slots = 0;
  EXPECT_NO_THROW(c.validate());
  c.hidden_dim = 128;
  expect_invalid(c, {"NVFP4 requires hidden_dim to be a multiple of 256", "hidden_dim=128"});
  c.hidden_dim = 16384 + 256;
  expect_invalid(c, {"at most 16384"});
  c.hidden_dim = 256;
  c.intermediate_dim = 8192 + 256;
  expect_invalid(c, {"intermediate_dim=8448"});
}

TEST(RMSNormPostprocessValidation, SupportPredicate) {
  auto ok = [](DType in, DType score, DType norm, DType out, int64_t k, int64_t d) {
    return supports_fused_post_expert_rmsnorm(in, score, norm, out, k, d);
  };
  const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
  EXPECT_TRUE(ok(bf, f32, f32, bf, 2, 256));
  EXPECT_TRUE(ok(bf, f32, f32, bf, 8, 16384));
  EXPECT_FALSE(ok(bf, f32, f32, f32, 2, 256));   // output dtype must equal input dtype
  EXPECT_FALSE(ok(bf, bf, f32, bf, 2, 256));     // scores FP32
  EXPECT_FALSE(ok(bf, f32, bf, bf, 2, 256));     // norm output FP32
  EXPECT_FALSE(ok(bf, f32, f32, bf, 6, 256));    // top_k in {2, 8}
  EXPECT_FALSE(ok(bf, f32, f32, bf, 2, 128));    // D >= 256
  EXPECT_FALSE(ok(bf, f32, f32, bf, 2, 16384 + 128));
  EXPECT_FALSE(ok(bf, f32, f32, bf, 2, 320));    // D % 128
}

TEST(RMSNormPostprocessValidation, Rules) {
  const DType bf = DType::kBFloat16, f32 = DType::kFloat32;
  RMSNormPostprocess r;
  EXPECT_NO_THROW(r.validate(bf, f32, 2, 256, true));
  r.eps = 0.0;
  expect_error([&] { r.validate(bf, f32, 2, 256, true); }, ErrorCode::kInvalidValue, {"eps must be finite and positive"});
  r = {};
  r.output_dtype = f32;
  expect_error([&] { r.validate(bf, f32, 2, 256, true); }, ErrorCode::kInvalidValue, {"output_dtype must equal the input dtype"});
  r = {};
  expect_error([&] { r.validate(bf, f32, 6, 256, true); }, ErrorCode::kInvalidValue, {"top_k must be 2 or 8, got 6"});
  r.require_bitwise = false;
  expect_error([&] { r.validate(bf, f32, 8, 12288 + 128, true); }, ErrorCode::kInvalidValue, {"above 12288 are inference-only"});
  EXPECT_NO_THROW(r.validate(bf, f32, 8, 12288 + 128, false));
  r = {};
  r.gain_center = 1.0;
  expect_error([&] { r.validate(bf, f32, 2, 256, false); }, ErrorCode::kInvalidValue, {"gain_center requires a weight"});
  static const uint16_t gamma[256] = {};
  r = {};
  r.weight = gamma;
  r.use_kahan = true;
  expect_error([&] { r.validate(bf, f32, 2, 256, false); }, ErrorCode::kInvalidValue, {"cannot be combined with use_kahan"});
  r.use_kahan = false;
  EXPECT_NO_THROW(r.validate(bf, f32, 2, 256, false));
  expect_error([&] { r.validate(bf, f32, 2, 256, true); }, ErrorCode::kInvalidValue, {"inference/forward-only"});
}

TEST(ExecutionOptionsValidation, ClipLimitFinite) {
  ExecutionOptions o;
  EXPECT_NO_THROW(o.validate());
  EXPECT_FALSE(o.validate_expert_ids);
  o.swiglu_clip_limit = kInf;
  expect_error([&] { o.validate(); }, ErrorCode::kInvalidValue, {"swiglu_clip_limit must be finite"});
}

TEST(ExecutionOptionsValidation, RouteIoAndFusedRmsnorm) {
  int dummy = 0;
  ExecutionOptions o;
  o.expert_output_TKD = &dummy;  // exporting route rows works with any postprocess
  o.grad_expert_output_out_TKD = &dummy;
  o.experts_output_postprocess = RMSNormPostprocess{};
  EXPECT_NO_THROW(o.validate());
  o.grad_expert_output_TKD = &dummy;  // importing their gradient replaces the library's reduction
  expect_error([&] { o.validate(); }, ErrorCode::kInvalidValue, {"cannot be combined with the fused RMSNorm"});
  o.experts_output_postprocess.reset();
  expect_error([&] { o.validate(); }, ErrorCode::kInvalidValue, {"mutually exclusive"});
  o.grad_expert_output_out_TKD = nullptr;
  EXPECT_NO_THROW(o.validate());
}

// What a block-scaled context checks at creation (validate_block_scaled_execution): upstream's
// execution checks, then what Hopper executes (MXFP8 staged, FP8 blockwise, NVFP4 inference), each
// with its text.
TEST(BlockScaledExecution, Mxfp8StagedRunsAndTheRestSaysWhy) {
  Config c = test_helpers::make_config(8, 256, 384, 2, 4, 1);
  c.block_scaled = BlockScaledConfig{};
  EXPECT_NO_THROW(c.validate());
  EXPECT_NO_THROW(validate_block_scaled_execution(c, 4));
  EXPECT_NO_THROW(validate_block_scaled_execution(test_helpers::make_config(8, 200, 384, 2, 4, 1), 4))
      << "BF16 contexts have nothing to check";
  auto expect_execution_error = [](const Config& cfg, int64_t ep, std::initializer_list<std::string> fragments) {
    EXPECT_NO_THROW(cfg.validate());
    expect_error([&] { validate_block_scaled_execution(cfg, ep); }, ErrorCode::kInvalidValue, fragments);
  };
  Config nvfp4 = c;
  nvfp4.block_scaled->format = BlockScaledFormat::kNVFP4;
  nvfp4.inference = true;
  nvfp4.num_activation_slots = 0;
  nvfp4.intermediate_dim = 512;  // NVFP4's Config rule: multiples of 256
  EXPECT_NO_THROW(validate_block_scaled_execution(nvfp4, 1));  // NVFP4 inference runs (issue 26)
  Config nvfp4_train = nvfp4;
  nvfp4_train.inference = false;
  nvfp4_train.num_activation_slots = 1;
  expect_error([&] { nvfp4_train.validate(); }, ErrorCode::kInvalidValue, {"NVFP4 DistMoE is inference-only"});
  // FP8 blockwise (beyond upstream): training and inference contexts run.
  Config fp8bw = c;
  fp8bw.block_scaled->format = BlockScaledFormat::kFP8Blockwise;
  EXPECT_NO_THROW(fp8bw.validate());
  EXPECT_NO_THROW(validate_block_scaled_execution(fp8bw, 4));
  fp8bw.inference = true;
  fp8bw.num_activation_slots = 0;
  EXPECT_NO_THROW(fp8bw.validate());
  EXPECT_NO_THROW(validate_block_scaled_execution(fp8bw, 4));
  fp8bw.intermediate_dim = 320;  // Config itself asks for multiples of the format's 128-element vector
  expect_error([&] { fp8bw.validate(); }, ErrorCode::kInvalidValue,
               {"fp8_blockwise requires hidden_dim and intermediate_dim divisible by its vector size 128"});
  // Mega: NVFP4 inference, MXFP8 inference and training; FP8 blockwise and NVFP4 training refused
  // (the sizes are the context's check, tests/gpu/multi).
  Config mega = c;
  mega.block_scaled->pipeline = BlockScaledPipeline::kMega;
  Config nvfp4_mega = nvfp4;
  nvfp4_mega.block_scaled->pipeline = BlockScaledPipeline::kMega;
  EXPECT_NO_THROW(validate_block_scaled_execution(nvfp4_mega, 1));
  Config mxfp8_mega = mega;  // MXFP8 Mega runs inference and training (the forward in one launch)
  mxfp8_mega.inference = true;
  mxfp8_mega.num_activation_slots = 0;
  EXPECT_NO_THROW(validate_block_scaled_execution(mxfp8_mega, 1));
  EXPECT_NO_THROW(validate_block_scaled_execution(mega, 1));  // training
  Config fp8bw_mega = fp8bw;  // FP8 blockwise has no Mega
  fp8bw_mega.intermediate_dim = 256;
  fp8bw_mega.block_scaled->pipeline = BlockScaledPipeline::kMega;
  expect_execution_error(fp8bw_mega, 4, {"pipeline='mega' has no Hopper execution yet for fp8_blockwise"});
  Config fast = c;
  fast.block_scaled->fast_math = true;
  expect_execution_error(fast, 1, {"fast_math has no Hopper execution yet"});
  Config tuned = c;
  tuned.block_scaled->kernel_config = BlockScaledKernelConfig{};
  expect_execution_error(tuned, 1, {"kernel_config has no Hopper execution yet"});
  Config few = c;
  few.num_experts = 2;
  expect_execution_error(few, 4, {"requires num_experts >= world_size", "num_experts=2", "world_size=4"});
  Config odd = c;
  odd.hidden_dim = 320;  // a multiple of 64 (Config) and of 32 (MXFP8's vector), not of 128
  expect_execution_error(odd, 1, {"multiples of 128", "hidden_dim=320"});
}

}  // namespace
}  // namespace dist_moe
