// plan_memory: byte-exact sizes of every buffer Dist-MoE owns. The BF16 and the block-scaled
// (MXFP8, NVFP4) formulas both reproduce upstream's planner (reference/upstream_api_and_tests.md
// §1.7, upstream's ModelConfig / BlockscaledStorageConfig); docs/memory_planner.md writes each
// formula out.
#include "dist_moe/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dist_moe/error.h"

namespace dist_moe {
namespace {

using i64 = int64_t;
i64 A(i64 bytes) { return align_up(bytes); }
i64 ceil_div(i64 a, i64 b) { return (a + b - 1) / b; }

std::string fmt_g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

// ---- block-scaled bundles: quantized data, then its scales, each 128-byte aligned ----
// Upstream's BlockscaledStorageConfig. v = scale vector (32 MXFP8, 16 NVFP4); qdata is 1 B per
// value (MXFP8 E4M3) or per two values (NVFP4 E2M1 x2); scales are 1 B (E8M0 / E4M3).
struct Bundles {
  i64 v;            // values per scale
  i64 pack;         // values per qdata byte
  i64 row_global;   // per-row FP32 payload after the row scales (NVFP4 inverse token scale)

  // Row-quantized [rows, C] (1 x v blocks along C: the FPROP/DGRAD operand). The scale region
  // reserves kRowScaleStorageMultiple (4) x the natural rows*C/v bytes (memory_plan.h says why),
  // then the per-row FP32 payload.
  i64 row(i64 rows, i64 C) const {
    return A(rows * ceil_div(C, pack)) + A(rows * kRowScaleStorageMultiple * ceil_div(C, v) + rows * row_global);
  }
  // Column-quantized [rows, C] (v x 1 blocks along rows: the WGRAD operand, contraction over tokens).
  i64 col(i64 rows, i64 C) const { return A(C * ceil_div(rows, pack)) + A(C * ceil_div(rows, v)); }
};

Bundles bundles(const BlockScaledConfig& bs) {
  if (bs.format == BlockScaledFormat::kNVFP4) return Bundles{16, 2, 4};
  return Bundles{32, 1, 0};
}

// Shapes that every byte formula reads.
struct Dims {
  i64 T, D, F, K, L, layers;
  const BlockScaledConfig* bs;  // null for BF16
  bool mega() const { return bs && bs->pipeline == BlockScaledPipeline::kMega; }
};

// Saved state of one layer that keeps everything (no recompute) for R received rows.
i64 saved_full(const Dims& d, i64 R) {
  const i64 h3 = A(d.T * d.K * d.D * 2);
  const i64 h1 = A(R * 2 * d.F * 2);
  if (!d.bs) return A(R * d.D * 2) /*x_gathered*/ + h1 + h3;
  // Block-scaled: the column bundles of x_gathered and h2 are the WGRAD operands; h1 stays BF16 for
  // SwiGLU backward; h3 is the BF16 combine source.
  const Bundles b = bundles(*d.bs);
  return b.col(R, d.D) + h1 + b.col(R, d.F) + h3;
}

// Training scratch peak (backward of a recomputed layer) for R received rows.
i64 training_scratch_peak(const Dims& d, i64 R) {
  const i64 h1 = A(R * 2 * d.F * 2), grad_h2 = A(R * d.F * 2);
  if (!d.bs) {
    const i64 grad_h1 = A(R * 2 * d.F * 2);
    const i64 grad_h3 = d.D > d.F ? A(R * d.D * 2) : 0;  // else it fits where h2 lived
    return A(R * d.D * 2) /*x_gathered*/ + h1 + grad_h1 + grad_h2 + grad_h3;
  }
  // Block-scaled (upstream's _blockscaled_bwd_act_mem_size, recompute): the row-quant scratch, the
  // rebuilt forward operands (x_gathered col, h1, h2 col) and the gradient bundles (grad_h3 col for
  // the W2 WGRAD, grad_h2 BF16, dxy = grad_h1 col for the W13 WGRAD).
  const Bundles b = bundles(*d.bs);
  const i64 x_row = b.row(R, d.D), h2_row = b.row(R, d.F), dxy_row = b.row(R, 2 * d.F);
  // Staged kernels serialize every row operand through one max-size slot; Mega co-feeds x_gathered
  // and h2 in one launch, so those two take adjacent sub-slots.
  const i64 row_scratch = d.mega() ? std::max(x_row + h2_row, dxy_row) : std::max({x_row, h2_row, dxy_row});
  return row_scratch + b.col(R, d.D) + h1 + b.col(R, d.F) + b.col(R, d.D) /*grad_h3*/ + grad_h2 +
         b.col(R, 2 * d.F) /*dxy*/;
}

// Inference (forward-only) scratch for R received rows. `expand`: NVFP4's FP16 token rows (x, then
// h2) and their FP32 token_scale_inv, beyond upstream's plan (nvfp4_expands_token_rows).
i64 inference_scratch(const Dims& d, i64 R, bool expand) {
  const i64 h1 = A(R * 2 * d.F * 2);
  if (!d.bs) return A(R * d.D * 2) + h1 + A(R * d.F * 2);
  // Row-quant scratch (x_gathered and h2 row bundles: one max-size slot staged, adjacent for Mega)
  // plus BF16 h1.
  const Bundles b = bundles(*d.bs);
  const i64 x_row = b.row(R, d.D), h2_row = b.row(R, d.F);
  const i64 expanded = expand ? A(R * std::max(d.D, d.F) * 2) + A(R * 4) : 0;
  return (d.mega() ? x_row + h2_row : std::max(x_row, h2_row)) + h1 + expanded;
}

}  // namespace

std::string format_bytes(int64_t bytes) {
  // Python: f"{b/2**30:.3f} GiB ({b:,} bytes)"
  char gib[64];
  std::snprintf(gib, sizeof(gib), "%.3f", static_cast<double>(bytes) / static_cast<double>(1LL << 30));
  std::string digits = std::to_string(bytes < 0 ? -bytes : bytes);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return std::string(gib) + " GiB (" + (bytes < 0 ? "-" : "") + grouped + " bytes)";
}

int64_t plan_max_recv_rows(int64_t tokens, int64_t top_k, double factor, int64_t local_experts, int64_t ep_size,
                           int64_t row_multiple) {
  i64 cap = static_cast<i64>(static_cast<double>(tokens * top_k) * factor + 0.5);
  cap = std::min(cap, tokens * ep_size * std::min(top_k, local_experts));  // topology maximum
  if (row_multiple > 1)  // every local expert is padded independently
    cap = (cap + local_experts * (row_multiple - 1)) / row_multiple * row_multiple;
  return cap;
}

int64_t plan_max_routed_rows(const Config& config, int64_t ep_size, double total_scratch_capacity_factor) {
  return plan_max_recv_rows(config.max_num_local_input_tokens, config.top_k, total_scratch_capacity_factor,
                            config.num_experts / ep_size, ep_size, /*row_multiple=*/1);
}

bool nvfp4_expands_token_rows(const Config& config, int64_t ep_size, double total_scratch_capacity_factor) {
  if (!config.inference || !config.block_scaled || config.block_scaled->format != BlockScaledFormat::kNVFP4 ||
      ep_size <= 0 || config.num_experts % ep_size != 0)
    return false;
  const i64 L = config.num_experts / ep_size;
  const i64 rows = plan_max_routed_rows(config, ep_size, total_scratch_capacity_factor);
  return rows >= kNvfp4ExpandRowsPerExpert * L || runs_decode_tiles(config, ep_size, total_scratch_capacity_factor);
}

bool runs_decode_tiles(const Config& config, int64_t ep_size, double total_scratch_capacity_factor) {
  if (!config.inference || !config.block_scaled || ep_size <= 0 || config.num_experts % ep_size != 0) return false;
  const i64 L = config.num_experts / ep_size;
  return plan_max_routed_rows(config, ep_size, total_scratch_capacity_factor) <= kNarrowDecodeRowsPerExpert * L;
}

MemoryPlan plan_memory(const Config& config, int64_t ep_size, const PlanOptions& options) {
  config.validate();
  if (ep_size <= 0) detail::fail(ErrorCode::kInvalidValue, "ep_size must be positive, got ", ep_size);
  if (config.num_experts % ep_size != 0)
    detail::fail(ErrorCode::kInvalidValue, "num_experts=", config.num_experts, " must be divisible by ep_size=", ep_size);

  MemoryPlan p;
  const Dims d{config.max_num_local_input_tokens,
               config.hidden_dim,
               config.intermediate_dim,
               config.top_k,
               config.num_experts / ep_size,
               config.max_moe_layers_per_activation_slot,
               config.block_scaled ? &*config.block_scaled : nullptr};
  const i64 m = d.bs ? kBlockScaledRowMultiple : 1;
  const double R = static_cast<double>(ep_size);

  // ---- receive-row capacities ----
  double f_dev = config.device_scratch_capacity_factor;
  if (f_dev > R) {
    p.warnings.push_back("device_scratch_capacity_factor=" + fmt_g(f_dev) + " exceeds ep_size=" +
                         std::to_string(ep_size) + " and is capped to " + fmt_g(R));
    f_dev = R;
  }
  double f_tot = config.vmm ? std::min(config.vmm->total_scratch_capacity_factor, R) : f_dev;
  if (f_tot < f_dev)
    detail::fail(ErrorCode::kInvalidValue,
                 "total_scratch_capacity_factor must cover at least the device_scratch_capacity_factor after EP-size "
                 "clamping: total ", fmt_g(f_tot), " < device ", fmt_g(f_dev));
  p.balanced_recv_rows = d.T * d.K;
  p.device_scratch_capacity_rows = plan_max_recv_rows(d.T, d.K, f_dev, d.L, ep_size, m);
  p.total_scratch_capacity_rows = plan_max_recv_rows(d.T, d.K, f_tot, d.L, ep_size, m);
  p.device_scratch_capacity_factor = f_dev;
  p.total_scratch_capacity_factor = f_tot;
  const i64 balanced_rows = plan_max_recv_rows(d.T, d.K, 1.0, d.L, ep_size, m);

  // ---- activation slot bounds ----
  p.inference = config.inference;
  p.saved_input_bytes_per_layer = A(d.T * d.D * 2);
  if (!config.inference) {
    p.minimum_activation_slot_bytes = A(d.layers * p.saved_input_bytes_per_layer);
    p.balanced_full_save_activation_slot_bytes = A(d.layers * saved_full(d, balanced_rows));
    p.maximum_useful_activation_slot_bytes = A(d.layers * saved_full(d, p.total_scratch_capacity_rows));
    if (p.balanced_full_save_activation_slot_bytes < p.minimum_activation_slot_bytes)
      detail::fail(ErrorCode::kInternal, "balanced full-save slot ", p.balanced_full_save_activation_slot_bytes,
                   " is below the all-recompute minimum ", p.minimum_activation_slot_bytes);
  }

  // ---- scratch ----
  if (config.inference) {
    const bool expand = nvfp4_expands_token_rows(config, ep_size, f_tot);
    p.device_scratch_bytes = A(inference_scratch(d, p.device_scratch_capacity_rows, expand));
    p.host_scratch_bytes =
        std::max<i64>(0, A(inference_scratch(d, p.total_scratch_capacity_rows, expand)) - p.device_scratch_bytes);
  } else {
    p.device_scratch_bytes = A(training_scratch_peak(d, p.device_scratch_capacity_rows));
    p.host_scratch_bytes =
        std::max<i64>(0, A(training_scratch_peak(d, p.total_scratch_capacity_rows)) - p.device_scratch_bytes);
  }

  // ---- slot selection ----
  p.activation_slot_capacity_factor = config.activation_slot_capacity_factor;
  if (config.inference) {
    p.num_activation_slots = 0;
    p.activation_slot_bytes = 0;
  } else {
    p.num_activation_slots = config.num_activation_slots;
    if (config.activation_slot_bytes) {
      if (*config.activation_slot_bytes < p.minimum_activation_slot_bytes)
        detail::fail(ErrorCode::kInvalidValue, "activation_slot_bytes=", *config.activation_slot_bytes,
                     " is below the minimum required ", p.minimum_activation_slot_bytes, " bytes");
      p.activation_slot_bytes = A(*config.activation_slot_bytes);
    } else if (config.activation_slot_capacity_factor) {
      const double span = static_cast<double>(p.balanced_full_save_activation_slot_bytes - p.minimum_activation_slot_bytes);
      p.activation_slot_bytes =
          A(p.minimum_activation_slot_bytes + static_cast<i64>(std::ceil(*config.activation_slot_capacity_factor * span)));
    } else {
      p.activation_slot_bytes = p.minimum_activation_slot_bytes;
    }
    if (p.activation_slot_bytes > p.maximum_useful_activation_slot_bytes)
      p.warnings.push_back("activation slot of " + std::to_string(p.activation_slot_bytes) +
                           " bytes exceeds the maximum useful " +
                           std::to_string(p.maximum_useful_activation_slot_bytes) + " bytes");
  }

  // ---- totals ----
  p.total_activation_bytes = p.num_activation_slots * p.activation_slot_bytes;
  p.total_device_buffer_bytes = p.total_activation_bytes + p.device_scratch_bytes;
  p.total_virtual_bytes = p.total_device_buffer_bytes + p.host_scratch_bytes;

  // ---- physical VMM sections: [device: slots + lower scratch][host][device: hot scratch] ----
  if (config.vmm && p.host_scratch_bytes > 0 && options.vmm_granularity_bytes) {
    const i64 G = *options.vmm_granularity_bytes;
    if (G <= 0) detail::fail(ErrorCode::kInvalidValue, "vmm_granularity_bytes must be positive, got ", G);
    const i64 prefix = p.total_activation_bytes > 0 ? align_up(p.total_activation_bytes, G) : 0;
    const i64 host = align_up(p.host_scratch_bytes, G);
    i64 dev = align_up(p.device_scratch_bytes, G);
    const i64 total = prefix + host + dev;  // exactly what runtime::ActivationBuffer maps
    p.vmm_granularity_bytes = G;
    p.vmm_device_prefix_bytes = prefix;
    p.vmm_host_section_bytes = host;
    p.vmm_device_scratch_section_bytes = dev;
    p.total_virtual_bytes = total;
    p.vmm_padding_bytes = total - p.total_activation_bytes - p.host_scratch_bytes - p.device_scratch_bytes;
  }

  // ---- symmetric windows ----
  p.routing_id_dtype = config.num_experts <= 32767 ? DType::kInt16 : DType::kInt32;
  // Routing ids are double-buffered: a rank may publish call n+1 while a slow peer reads call n.
  p.routing_window_bytes =
      2 * A(kRoutingHeaderBytes + d.T * d.K * static_cast<i64>(element_size(p.routing_id_dtype)));
  p.dispatch_window_bytes = A(d.T * d.K * d.D * 2);
  p.combine_window_bytes = A(d.T * d.K * d.D * 2);
  p.signal_window_bytes = A(4 * 64 * 4 + 4 * d.T);
  p.rows_window_bytes = A(4 * ep_size);
  p.total_symmetric_bytes = p.routing_window_bytes + p.dispatch_window_bytes + p.combine_window_bytes +
                            p.signal_window_bytes + p.rows_window_bytes;
  return p;
}

std::string MemoryPlan::explain() const {
  std::string s = "Distributed MoE memory plan:\n";
  auto line = [&s](const std::string& text) { s += "  " + text + "\n"; };
  line("balanced/device/total rows: " + std::to_string(balanced_recv_rows) + "/" +
       std::to_string(device_scratch_capacity_rows) + "/" + std::to_string(total_scratch_capacity_rows));
  line("device/total scratch capacity factors: " + fmt_g(device_scratch_capacity_factor) + "/" +
       fmt_g(total_scratch_capacity_factor));
  if (inference) {
    line("activation slots: 0 slot(s)");
  } else {
    std::string policy = activation_slot_capacity_factor
                             ? "balanced capacity factor " + fmt_g(*activation_slot_capacity_factor)
                             : (activation_slot_bytes == minimum_activation_slot_bytes ? "minimum all-recompute"
                                                                                       : "exact per-slot bytes");
    line("activation slots: " + std::to_string(num_activation_slots) + " x " + format_bytes(activation_slot_bytes) +
         " = " + format_bytes(total_activation_bytes) + " (" + policy + ")");
  }
  line("device scratch: " + format_bytes(device_scratch_bytes));
  line("host overflow scratch: " + format_bytes(host_scratch_bytes));
  line("total device buffer: " + format_bytes(total_device_buffer_bytes));
  line("activation slot minimum/balanced full-save/maximum useful: " + format_bytes(minimum_activation_slot_bytes) +
       " / " + format_bytes(balanced_full_save_activation_slot_bytes) + " / " +
       format_bytes(maximum_useful_activation_slot_bytes));
  std::string recompute;
  if (inference)
    recompute = "scratch-only inference; no saved activations";
  else if (activation_slot_bytes == minimum_activation_slot_bytes)
    recompute = "all layers recompute at the minimum budget";
  else if (activation_slot_bytes >= maximum_useful_activation_slot_bytes)
    recompute = "all executable routing fits without recompute";
  else if (activation_slot_bytes >= balanced_full_save_activation_slot_bytes)
    recompute = "balanced routing fits without recompute; larger saved-state usage may recompute";
  else
    recompute = "the activation budget may avoid recompute for some layers";
  line("virtual address range: " + format_bytes(total_virtual_bytes) + "; " + recompute);
  line(inference ? "inference has no activation slots; total scratch capacity is a hard limit"
                 : "activation slots are a soft limit (recompute on exhaustion); total scratch capacity is a hard limit");
  if (vmm_granularity_bytes) {
    line("VMM section granularity: " + format_bytes(*vmm_granularity_bytes));
    line("mapped device/host/device sections: " + format_bytes(vmm_device_prefix_bytes) + " / " +
         format_bytes(vmm_host_section_bytes) + " / " + format_bytes(vmm_device_scratch_section_bytes));
    line("VMM/allocator padding: " + format_bytes(vmm_padding_bytes));
  }
  line(std::string("symmetric windows per rank: routing ") + format_bytes(routing_window_bytes) + " (" +
       to_string(routing_id_dtype) + " ids), dispatch " + format_bytes(dispatch_window_bytes) + ", combine " +
       format_bytes(combine_window_bytes) + ", signal " + format_bytes(signal_window_bytes) + ", rows " +
       format_bytes(rows_window_bytes));
  line("total symmetric bytes per rank: " + format_bytes(total_symmetric_bytes));
  for (const auto& w : warnings) line("warning: " + w);
  return s;
}

}  // namespace dist_moe
