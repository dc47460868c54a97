// Memory planning: a pure function from (Config, EP size) to every byte Dist-MoE will own.
//
// The plan covers the per-rank symmetric windows (routing, dispatch, combine), the activation
// buffer (saved-activation slots growing up, scratch growing down) and, with VMM, the pinned host
// overflow scratch. All sizes are rounded up to kMemoryAlignment. Formulas: docs/memory_planner.md.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dist_moe/config.h"
#include "dist_moe/grouped_gemm_config.h"

namespace dist_moe {

inline constexpr int64_t kMemoryAlignment = 128;
// Rows of every local expert are padded to this multiple for block-scaled formats (one 128-row
// scale atom per expert start; 32-row column-quant blocks never straddle experts).
inline constexpr int64_t kBlockScaledRowMultiple = 128;
// Row-quantized activation bundles in the activation buffer reserve this multiple of their natural
// scale bytes (rows * C/v): room for the scale layout of the smallest (32-row) M tiles, where every
// 32 rows take a whole 128-row scale atom (upstream's ACTIVATION_ROW_SCALE_STORAGE_MULTIPLE).
inline constexpr int64_t kRowScaleStorageMultiple = 4;
inline constexpr int64_t kRoutingHeaderBytes = 128;
// Rows routing pads every local expert to in block-scaled inference (and MXFP8 training): whole
// 32-row quantizer groups. The plan's capacity keeps kBlockScaledRowMultiple.
inline constexpr int64_t kBlockScaledRoutingRows = 32;
// NVFP4 inference on Hopper: a context whose calls can route this many token rows per local expert
// on average gives its GEMMs the routed tokens as FP16 rows, expanded once per call, and its scratch
// holds them (docs/memory_planner.md); smaller ones convert tokens in the GEMM. Measured (dsv3 dims
// at EP1, perf_history G63): expanding wins from 64 rows per expert (1.05x vs 0.85x our BF16 layer)
// and loses at 32 and 48 (1.09-1.12x vs 1.33-1.34x, 1.02x vs 1.15x).
inline constexpr int64_t kNvfp4ExpandRowsPerExpert = 64;

inline int64_t align_up(int64_t bytes, int64_t alignment = kMemoryAlignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

struct PlanOptions {
  // Allocation granularity of the VMM mapping (cuMemGetAllocationGranularity, RECOMMENDED).
  // When set, and the plan uses host scratch, the physical VMM sections are resolved.
  std::optional<int64_t> vmm_granularity_bytes;
};

struct MemoryPlan {
  // ---- upstream's 23 fields, in upstream's order ----
  int64_t balanced_recv_rows = 0;            // T_max * K
  int64_t device_scratch_capacity_rows = 0;  // rows HBM scratch can hold (clamped factor, padded)
  int64_t total_scratch_capacity_rows = 0;   // hard limit: device + host rows
  double device_scratch_capacity_factor = 1.0;  // effective (clamped to ep_size)
  double total_scratch_capacity_factor = 1.0;   // effective (clamped to ep_size)
  int64_t saved_input_bytes_per_layer = 0;
  int64_t device_scratch_bytes = 0;
  int64_t host_scratch_bytes = 0;
  int64_t minimum_activation_slot_bytes = 0;
  int64_t balanced_full_save_activation_slot_bytes = 0;
  int64_t maximum_useful_activation_slot_bytes = 0;
  int64_t activation_slot_bytes = 0;
  std::optional<double> activation_slot_capacity_factor;  // echo of the config
  int64_t total_activation_bytes = 0;
  int64_t total_device_buffer_bytes = 0;
  int64_t total_virtual_bytes = 0;
  int64_t num_activation_slots = 0;
  bool inference = false;
  std::optional<int64_t> vmm_granularity_bytes;  // set only when the VMM layout is resolved
  int64_t vmm_device_prefix_bytes = 0;
  int64_t vmm_host_section_bytes = 0;
  int64_t vmm_device_scratch_section_bytes = 0;
  int64_t vmm_padding_bytes = 0;

  // ---- this project's symmetric windows, per rank (allocated with ncclMemAlloc) ----
  DType routing_id_dtype = DType::kInt16;  // int16 when num_experts fits, else int32
  int64_t routing_window_bytes = 0;        // 2 parity slots of: 128-byte header (int32 T) + T_max*K ids
  int64_t dispatch_window_bytes = 0;       // BF16 [T_max, K, D]: x rows (fwd), grad_h3 routes (bwd)
  int64_t combine_window_bytes = 0;        // BF16 [T_max, K, D]: h3 routes (fwd), grad_x routes (bwd)
  int64_t signal_window_bytes = 0;         // EP barrier inbox (4 slots x 64 ranks x 4 B) + T_max counters
  int64_t rows_window_bytes = 0;           // every rank's received rows, int32 [ep_size]
  int64_t total_symmetric_bytes = 0;

  // Soft problems the planner corrected (factor clamping, oversized slot).
  std::vector<std::string> warnings;

  bool uses_host_scratch() const { return host_scratch_bytes > 0; }
  // Human-readable summary in upstream's categories, then this project's windows.
  std::string explain() const;
};

// Pure: allocates nothing. Throws dist_moe::Error (kInvalidValue) on invalid input.
MemoryPlan plan_memory(const Config& config, int64_t ep_size, const PlanOptions& options = {});

// Receive-row capacity for T_max tokens, factor f, L local experts, R ranks and per-expert row
// multiple m (1 for BF16): min(int(T*K*f + 0.5), T*R*min(K, L)), then padded per expert.
int64_t plan_max_recv_rows(int64_t tokens, int64_t top_k, double factor, int64_t local_experts,
                           int64_t ep_size, int64_t row_multiple);

// The token rows one call can route to a rank's local experts: T*K*f (no padding), f the plan's
// total scratch capacity factor, capped by the topology (plan_max_recv_rows with row multiple 1).
int64_t plan_max_routed_rows(const Config& config, int64_t ep_size, double total_scratch_capacity_factor);

// Whether an NVFP4 inference context expands its tokens to FP16 rows: its routed token rows
// (plan_max_routed_rows) reach kNvfp4ExpandRowsPerExpert per local expert, or stay at or below
// kNarrowDecodeRowsPerExpert (grouped_gemm_config.h: decode, where the 16-token tile on FP16 rows
// runs without the token-converting producer warps; perf_history G91). False for every other config.
bool nvfp4_expands_token_rows(const Config& config, int64_t ep_size, double total_scratch_capacity_factor);

// Whether a block-scaled inference context runs decode-sized tiles: its routed token rows
// (plan_max_routed_rows) stay at or below kNarrowDecodeRowsPerExpert per local expert, where the
// staged GEMMs take the 16-token swap-AB tile and the Mega pipeline its decode form
// (device/gemm/mega.cuh). False for training configs.
bool runs_decode_tiles(const Config& config, int64_t ep_size, double total_scratch_capacity_factor);

// "0.000 GiB (16,384 bytes)": the size format of explain().
std::string format_bytes(int64_t bytes);

}  // namespace dist_moe
