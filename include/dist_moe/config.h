// Configuration types of Dist-MoE, mirroring upstream's Python API (newest revision).
//
// Every type has a `validate()` that applies upstream's rules in upstream's order; the first
// violated rule throws dist_moe::Error naming the field, the value and the bound (upstream's
// message fragments are kept so the Python layer can raise the same texts). Constructing a type
// does not validate it: the functions that consume a config call `validate()` first.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist_moe/dtype.h"

namespace dist_moe {

inline constexpr double kSwigluClampAlphaDefault = 1.702;
inline constexpr double kSwigluClampLimitDefault = 7.0;

enum class Activation { kSwiGLU, kSwiGLUClamped };
const char* to_string(Activation a);                // "swiglu", "swiglu_clamped"
Activation parse_activation(const std::string& s);  // throws kInvalidValue on unknown names

// Host-backed overflow scratch through CUDA VMM (pinned host pages mapped behind device scratch).
struct VmmConfig {
  // Device plus host scratch imbalance, relative to balanced T*K rows; clamped to ep_size.
  double total_scratch_capacity_factor = 16.0;
  // Map the VMM sections (and pin the host pages) on a background thread started before the
  // context's communication buffers, so the two overlap (upstream's prefetch); false maps them when
  // the activation buffer is created. Either way the same layout, and the plan does not change.
  bool prefetch = true;

  void validate() const;
};

enum class BlockScaledFormat {
  kMXFP8_E4M3,     // E4M3 data, E8M0 scale per 32 values; training and inference
  kNVFP4,          // E2M1 data (2 per byte), E4M3 scale per 16 values, FP32 global scale; inference
  kFP8Blockwise,   // beyond upstream: E4M3 data, FP32 scale per 1x128 (activations) / 128x128
                   // (weights), DeepSeek-V3's recipe; training and inference (staged).
};
const char* to_string(BlockScaledFormat f);                // "mxfp8_e4m3", "nvfp4", "fp8_blockwise"
BlockScaledFormat parse_block_scaled_format(const std::string& s);
int block_scaled_vector_size(BlockScaledFormat f);         // 32, 16 or 128

enum class BlockScaledPipeline { kStaged, kMega };
const char* to_string(BlockScaledPipeline p);  // "staged", "mega"
BlockScaledPipeline parse_block_scaled_pipeline(const std::string& s);

// Expert-only complete override of the block-scaled GEMM configuration (Hopper equivalent of
// upstream's BlockScaledKernelConfig: no TMEM fields; wgmma tile, TMA stages and cluster size).
struct BlockScaledKernelConfig {
  int num_ctas = 1;           // CTAs per cluster along M: 1 or 2
  int block_m = 128;
  int block_n = 128;
  int block_k = 128;          // must be 128: one MXFP8 scale atom column per K step
  int num_smem_buffers = 4;   // TMA pipeline stages
  int epilogue_subtile = 64;  // columns stored per epilogue step; divides block_n
  int kloop_unroll = 1;
  bool swap_ab = false;       // weights as the M operand (decode)
  int num_warps = 12;         // producer warpgroup + 2 consumer warpgroups
  bool static_scheduler = false;

  void validate(BlockScaledFormat format) const;
};

struct BlockScaledConfig {
  BlockScaledFormat format = BlockScaledFormat::kMXFP8_E4M3;
  bool fast_math = false;
  BlockScaledPipeline pipeline = BlockScaledPipeline::kStaged;
  std::optional<BlockScaledKernelConfig> kernel_config;

  void validate() const;
};

// Hopper BF16 grouped-GEMM presets (upstream names SM100 tcgen05 presets; ours name wgmma tiles).
// An unset preset means: training uses the pinned production configs, inference picks by shape.
const std::vector<std::string>& bf16_grouped_gemm_presets();

struct Config {
  int64_t max_num_local_input_tokens = 0;  // T_max per EP rank; each call uses T in [1, T_max]
  int64_t hidden_dim = 0;                  // D
  int64_t intermediate_dim = 0;            // F
  int64_t top_k = 0;                       // K
  int64_t num_experts = 0;                 // global E
  int64_t max_moe_layers_per_activation_slot = 0;
  double device_scratch_capacity_factor = 1.0;
  std::optional<int64_t> activation_slot_bytes;
  std::optional<double> activation_slot_capacity_factor;
  int64_t num_activation_slots = 1;
  std::optional<VmmConfig> vmm;
  std::optional<int64_t> num_sms;
  std::optional<std::string> bf16_grouped_gemm_preset;
  std::optional<BlockScaledConfig> block_scaled;
  Activation activation = Activation::kSwiGLU;
  double swiglu_alpha = kSwigluClampAlphaDefault;
  double swiglu_limit = kSwigluClampLimitDefault;
  std::optional<DType> wgrad_dtype;  // None, BF16 or FP32
  bool inference = false;

  // Upstream's Config.__post_init__ rules, in order.
  void validate() const;
};

// What a block-scaled context checks at creation, after Config::validate(), for `ep_size` ranks
// (upstream's execution-time checks, then what the Hopper build executes: MXFP8 and FP8 blockwise
// staged, without fast_math or a kernel_config override). Throws kInvalidValue naming the reason.
void validate_block_scaled_execution(const Config& config, int64_t ep_size);

// Post-expert RMSNorm fused into the top-k reduction: every route row is normalized in FP32,
// then weighted by its score, then summed.
struct RMSNormPostprocess {
  double eps = 1e-6;
  DType norm_output_dtype = DType::kFloat32;
  DType output_dtype = DType::kBFloat16;
  bool require_bitwise = true;
  const void* weight = nullptr;  // optional [D] gamma (device pointer, input dtype); inference only
  DType weight_dtype = DType::kBFloat16;
  double gain_center = 0.0;
  bool use_kahan = false;
  bool recompute_rstd = false;

  // Upstream's _validate_rmsnorm_postprocess for a call with this input dtype, D, K and mode.
  void validate(DType input_dtype, DType score_dtype, int64_t top_k, int64_t dim, bool training) const;
};

// Upstream's base contract for the fused post-expert RMSNorm (does not look at training mode,
// weight or Kahan summation).
bool supports_fused_post_expert_rmsnorm(DType input_dtype, DType score_dtype, DType norm_output_dtype,
                                        DType output_dtype, int64_t topk, int64_t dim);

// Per-call controls that make sense in C++ (upstream's Python callbacks have no C++ form).
struct ExecutionOptions {
  bool inplace_wgrad_accum = false;   // WGRAD accumulates into caller-owned gradient buffers
  float* swiglu_clip_stats_out_3 = nullptr;  // device FP32 [3]; rewritten every forward (BF16 only)
  double swiglu_clip_limit = kSwigluClampLimitDefault;  // strict '>' threshold
  bool validate_expert_ids = false;   // device check that ids lie in [-1, E); traps otherwise
  std::optional<RMSNormPostprocess> experts_output_postprocess;
  // Training forward only: its SavedState keeps nothing in the activation slot (the layer plans in
  // scratch, as under no-grad), and its backward recomputes the layer from the inputs it is given.
  // For a forward whose saved state the caller will discard and replace by a recomputation's (the
  // first forward of an activation checkpoint): it takes no slot space, so checkpointed layers leave
  // no entry behind. Every rank passes the same value in one call.
  bool recompute_from_inputs = false;
  // Route-level I/O, for a postprocess the caller runs itself (the PyTorch callable postprocess):
  // forward: this rank's route rows h3 (BF16 [T, K, D], before any postprocess) are copied here
  // after the combine; rows of -1 routes are unspecified.
  void* expert_output_TKD = nullptr;
  // backward: the gradient of those route rows (BF16 [T, K, D]) replaces the top-k backward, so
  // grad_out_TD and grad_scores_TK are neither read nor written (the caller differentiates its own
  // reduction); rows of -1 routes are ignored.
  const void* grad_expert_output_TKD = nullptr;
  // backward: the gradient of the route rows the library computed itself (BF16 [T, K, D], after
  // the top-k or RMSNorm backward) is copied here, for observers; rows of -1 routes are zero.
  void* grad_expert_output_out_TKD = nullptr;

  void validate() const;
};

}  // namespace dist_moe
