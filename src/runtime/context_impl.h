// The internals of a Context, as the pipeline (bf16_pipeline.cpp) sees them.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "dist_moe/comm.h"
#include "dist_moe/context.h"
#include "dist_moe/device/planner/activation_planner.cuh"
#include "dist_moe/routed_experts.h"
#include "dist_moe/grouped_gemm.h"
#include "dist_moe/memory_plan.h"
#include "core/debug_env.h"
#include "kernels/pipeline_glue.h"
#include "runtime/activation_buffer.h"

namespace dist_moe::runtime {

// Whether an MXFP8 training context runs the FP8-blockwise pipeline (perf_history G152): its activations
// quantized once at MXFP8's shared scale per 128 elements (quant::Fp8BlockScale::kMxfp8Shared), its
// weights prepared at shared 128x128 scales (G151), so every GEMM is an FP8-blockwise one and the WGRADs
// read the saved column bundles where they lie. Staged only (Mega's forward launch is per-32 MXFP8), and
// not under the knobs that keep the MXFP8 pipeline for A/B runs (DMOE_MXFP8_EXACT, DMOE_MXFP8_FPROP_PER32,
// DMOE_MXFP8_REROUND, DMOE_MXFP8_WGRAD_BF16). Read once, at context creation (Context::Impl keeps it, and
// routing_row_alignment derives from it).
bool mxfp8_training_on_fp8_blockwise(const Config& config);
// The W13 FPROP's promotion interval for `config` (Context::Impl::w13_promote_k): 64 for MXFP8, whose
// BF16 h1 feeds h2's E4M3 rounding and which the issue holds to the BF16 forward bound, 128 (the
// recipe's scale block) otherwise; DMOE_W13_PROMOTE_K overrides it (A/B runs).
int w13_promote_k(const Config& config);

// Whether a context runs the FP8-blockwise pipeline (fp8_blockwise_pipeline.cpp): FP8-blockwise contexts,
// and MXFP8 training ones where mxfp8_training_on_fp8_blockwise (its value, which the context keeps).
inline bool runs_fp8_blockwise_pipeline(const Config& config, bool mxfp8_on_fp8_blockwise) {
  return config.block_scaled &&
         (config.block_scaled->format == BlockScaledFormat::kFP8Blockwise || mxfp8_on_fp8_blockwise);
}

// Rows routing pads every local expert to. Block-scaled layouts pad to whole column blocks (the
// WGRAD operands' blocks run along tokens and restart at each expert): 32 for MXFP8 (and for every
// inference layer, which has no columns: 32 keeps the row quantizers' groups whole), 128 for
// training on the FP8-blockwise pipeline (1x128 blocks along tokens: FP8 blockwise, and MXFP8 where
// mxfp8_training_on_fp8_blockwise). The plan's capacity keeps upstream's 128-row bound (memory_plan.h
// kBlockScaledRowMultiple) for all of them (kBlockScaledRoutingRows: 32). context.cpp says more.
inline int routing_row_alignment(const Config& config, bool mxfp8_on_fp8_blockwise) {
  if (!config.block_scaled) return 1;
  const bool fp8_columns = !config.inference && runs_fp8_blockwise_pipeline(config, mxfp8_on_fp8_blockwise);
  return fp8_columns ? 128 : static_cast<int>(kBlockScaledRoutingRows);
}

// One device allocation of small int64/int32 arrays, carved in 128-byte aligned pieces.
class DeviceArena {
 public:
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;
  // Reserves `bytes` (before allocate()); returns the piece's offset.
  size_t reserve(size_t bytes);
  void allocate();  // cudaMalloc + zero fill
  // Frees owned memory now (checked) rather than in the destructor: a destructor that runs while
  // another stream captures a graph (a Python object collected then) would invalidate the capture.
  void release();
  // Uses caller-owned device memory of bytes() bytes instead of allocating (never freed here).
  void adopt(void* base);
  size_t bytes() const { return size_; }
  template <typename T>
  T* at(size_t offset) const {
    return reinterpret_cast<T*>(base_ + offset);
  }

 private:
  char* base_ = nullptr;
  size_t size_ = 0;
  bool owned_ = false;
};

}  // namespace dist_moe::runtime

namespace dist_moe {

struct Context::Impl {
  Config config;
  MemoryPlan plan;
  ContextOptions options;
  int device = 0;
  int rank = 0;
  int world = 1;
  int64_t local_experts = 0;
  bool closed = false;

  std::unique_ptr<comm::Communicator> comm;
  std::unique_ptr<comm::EpGroup> ep;
  // Every rank's received-row count of the current call (training): int32 [R] in a symmetric window;
  // each rank writes its count into slot [rank] of every peer's copy before an EP barrier.
  std::unique_ptr<comm::SymmetricWindow> rows_window;
  std::unique_ptr<runtime::ActivationBuffer> activations;

  // Device planner state and per-call workspaces.
  runtime::DeviceArena arena;
  planner::BufferGeometry geometry;
  planner::PlannerState planner_state{};
  const int64_t* slot_ids = nullptr;  // constant [max(N, 1)] = 0..N-1; the selector points into it
  int64_t selected_slot = 0;
  int64_t slot_depth = 1;
  int32_t** rows_peer_bases = nullptr;  // [R] every peer's rows_window as seen from here
  int64_t* call_layer_state = nullptr;  // layer snapshot of calls that save nothing
  int64_t* backward_offsets = nullptr;  // [8]: 7 from the planner (the last: x to recompute from), [7] h3
  int32_t* counts_gated = nullptr;      // [L] routing counts, zeroed when a stage is skipped
  float* grad_scores_f32 = nullptr;     // [T_max * K]
  float* rstd_scratch = nullptr;        // [T_max * K] RMSNorm rstd of calls that save nothing
  int32_t* gather_workspace = nullptr;
  // MXFP8 contexts: the static scratch layout, and the group offsets gated like counts_gated.
  planner::Mxfp8Scratch mxfp8_scratch;
  int32_t* offsets_gated = nullptr;     // [L + 1]
  float* grad_h3_row_scores = nullptr;  // [capacity] block-scaled backward: each row's route score (G144)
  int32_t* wgrad_padded_counts = nullptr;  // [L] MXFP8 backward: the experts' rows rounded up to 128 (G149)
  // MXFP8 training on the FP8-blockwise pipeline (mxfp8_training_on_fp8_blockwise); otherwise, in the MXFP8
  // pipeline, which of its GEMMs run on operands converted to FP8 blockwise (the three below).
  bool mxfp8_on_fp8_blockwise = false;
  bool mxfp8_wgrad_fp8 = false;  // MXFP8 training: the WGRADs on FP8-blockwise operands (mxfp8_pipeline.cpp)
  bool mxfp8_dgrad_fp8 = false;  // MXFP8 training: the DGRADs on FP8-blockwise operands (mxfp8_pipeline.cpp)
  bool mxfp8_fprop_fp8 = false;  // MXFP8 training: the FPROPs on FP8-blockwise operands (mxfp8_pipeline.cpp)
  // The W13 FPROP's FP32 promotion interval along K (GroupedGemmCommon::promote_k): 64 in MXFP8
  // contexts, 128 otherwise (w13_promote_k; perf_history G158).
  int w13_promote_k = 128;
  // [L, D/128, 2F/128] MXFP8 training: the 128x128 FP32 scales of the weight the next FP8-blockwise GEMM
  // reads, derived right before it (G150-G151; one GEMM at a time on the stream).
  float* weight_block_scales = nullptr;

  // Called after each pipeline stage when set (benchmarks record events here; eager use only).
  std::function<void(const char* stage, cudaStream_t stream)> stage_hook;
  // DMOE_DEBUG_STAGE_DELAY entries of this rank (core/debug_env.h): after a matching stage, a
  // device delay (a debugging aid for ordering bugs between ranks).
  std::vector<core::StageDelay> stage_delays;
  void stage(const char* name, cudaStream_t stream) const {
    if (stage_hook) stage_hook(name, stream);
    for (const core::StageDelay& d : stage_delays)
      if (d.stage == "*" || d.stage == name) kernels::spin_delay(d.ns, stream);
  }

  uint8_t* activation_base() const { return activations->data(); }
  void* dispatch_routes() const { return ep->dispatch_window().local_ptr(); }  // [T_max, K, D] BF16
  void* combine_routes() const { return ep->combine_window().local_ptr(); }    // [T_max, K, D] BF16
  int64_t capacity_rows() const { return ep->capacity_rows(); }
  planner::CallShape call_shape(int64_t T) const {
    return {T, config.hidden_dim, config.intermediate_dim, config.top_k, world, rank};
  }
};

// The internals of `ctx` (throws "distributed MoE context is closed" after close()).
Context::Impl& context_impl(const Context& ctx);

struct SavedState::Buffers {
  runtime::DeviceArena arena;
  int64_t* layer_state = nullptr;      // planner snapshot (layer_state_size(R) int64)
  int32_t* expert_rows = nullptr;      // [L] padded rows per local expert
  int32_t* expert_rows_unpadded = nullptr;  // [L]
  int32_t* expert_offsets = nullptr;   // [L + 1]
  const void** gather_src = nullptr;   // [capacity] forward gather (peer dispatch windows)
  void** scatter_dst = nullptr;        // [capacity] owners' combine-window slots
  const void** grad_gather_src = nullptr;  // [capacity] owners' dispatch-window slots (grad_h3)
  float* rstd = nullptr;               // [T_max * K] RMSNorm postprocess
  int64_t capacity_rows = 0;
  int64_t local_experts = 0;
  bool used = false;                   // a forward filled it
};

}  // namespace dist_moe
