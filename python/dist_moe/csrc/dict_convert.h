// Conversions shared by the dist_moe._native and dist_moe._C modules: configs and plans cross the
// boundary as plain dicts built by dist_moe/api.py (after the type checks only Python can do), and
// dist_moe::Error maps to the exception upstream raises: kInvalidValue -> ValueError, kInvalidType
// -> TypeError, others -> RuntimeError.
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>

#include "dist_moe/config.h"
#include "dist_moe/error.h"
#include "dist_moe/memory_plan.h"
#include "dist_moe/prepared_weight.h"

namespace dist_moe::python {

namespace py = pybind11;

inline DType parse_dtype(const std::string& name) {
  static const std::pair<const char*, DType> table[] = {
      {"bfloat16", DType::kBFloat16}, {"float16", DType::kFloat16}, {"float32", DType::kFloat32},
      {"int16", DType::kInt16},       {"int32", DType::kInt32},     {"int64", DType::kInt64},
      {"float8_e4m3fn", DType::kFloat8E4M3}, {"float8_e8m0fnu", DType::kFloat8E8M0},
      {"float4_e2m1fn_x2", DType::kFloat4E2M1x2},
  };
  for (const auto& [n, d] : table)
    if (name == n) return d;
  throw Error(ErrorCode::kInvalidType, "unsupported dtype '" + name + "'");
}

template <typename T>
std::optional<T> opt(const py::dict& d, const char* key) {
  if (!d.contains(key) || d[key].is_none()) return std::nullopt;
  return d[key].cast<T>();
}

inline Config config_from_dict(const py::dict& d) {
  Config c;
  c.max_num_local_input_tokens = d["max_num_local_input_tokens"].cast<int64_t>();
  c.hidden_dim = d["hidden_dim"].cast<int64_t>();
  c.intermediate_dim = d["intermediate_dim"].cast<int64_t>();
  c.top_k = d["top_k"].cast<int64_t>();
  c.num_experts = d["num_experts"].cast<int64_t>();
  c.max_moe_layers_per_activation_slot = d["max_moe_layers_per_activation_slot"].cast<int64_t>();
  c.device_scratch_capacity_factor = d["device_scratch_capacity_factor"].cast<double>();
  c.activation_slot_bytes = opt<int64_t>(d, "activation_slot_bytes");
  c.activation_slot_capacity_factor = opt<double>(d, "activation_slot_capacity_factor");
  c.num_activation_slots = d["num_activation_slots"].cast<int64_t>();
  if (auto v = opt<py::dict>(d, "vmm"))
    c.vmm = VmmConfig{(*v)["total_scratch_capacity_factor"].cast<double>(), (*v)["prefetch"].cast<bool>()};
  c.num_sms = opt<int64_t>(d, "num_sms");
  c.bf16_grouped_gemm_preset = opt<std::string>(d, "bf16_grouped_gemm_preset");
  if (auto b = opt<py::dict>(d, "block_scaled")) {
    BlockScaledConfig bs;
    bs.format = parse_block_scaled_format((*b)["format"].cast<std::string>());
    bs.fast_math = (*b)["fast_math"].cast<bool>();
    bs.pipeline = parse_block_scaled_pipeline((*b)["pipeline"].cast<std::string>());
    if (auto k = opt<py::dict>(*b, "kernel_config")) {
      BlockScaledKernelConfig kc;
      kc.num_ctas = (*k)["num_ctas"].cast<int>();
      kc.block_m = (*k)["block_m"].cast<int>();
      kc.block_n = (*k)["block_n"].cast<int>();
      kc.block_k = (*k)["block_k"].cast<int>();
      kc.num_smem_buffers = (*k)["num_smem_buffers"].cast<int>();
      kc.epilogue_subtile = (*k)["epilogue_subtile"].cast<int>();
      kc.kloop_unroll = (*k)["kloop_unroll"].cast<int>();
      kc.swap_ab = (*k)["swap_ab"].cast<bool>();
      kc.num_warps = (*k)["num_warps"].cast<int>();
      kc.static_scheduler = (*k)["static_scheduler"].cast<bool>();
      bs.kernel_config = kc;
    }
    c.block_scaled = bs;
  }
  c.activation = parse_activation(d["activation"].cast<std::string>());
  c.swiglu_alpha = d["swiglu_alpha"].cast<double>();
  c.swiglu_limit = d["swiglu_limit"].cast<double>();
  if (auto w = opt<std::string>(d, "wgrad_dtype")) c.wgrad_dtype = parse_dtype(*w);
  c.inference = d["inference"].cast<bool>();
  return c;
}

inline py::dict plan_to_dict(const MemoryPlan& p) {
  py::dict d;
  d["balanced_recv_rows"] = p.balanced_recv_rows;
  d["device_scratch_capacity_rows"] = p.device_scratch_capacity_rows;
  d["total_scratch_capacity_rows"] = p.total_scratch_capacity_rows;
  d["device_scratch_capacity_factor"] = p.device_scratch_capacity_factor;
  d["total_scratch_capacity_factor"] = p.total_scratch_capacity_factor;
  d["saved_input_bytes_per_layer"] = p.saved_input_bytes_per_layer;
  d["device_scratch_bytes"] = p.device_scratch_bytes;
  d["host_scratch_bytes"] = p.host_scratch_bytes;
  d["minimum_activation_slot_bytes"] = p.minimum_activation_slot_bytes;
  d["balanced_full_save_activation_slot_bytes"] = p.balanced_full_save_activation_slot_bytes;
  d["maximum_useful_activation_slot_bytes"] = p.maximum_useful_activation_slot_bytes;
  d["activation_slot_bytes"] = p.activation_slot_bytes;
  d["activation_slot_capacity_factor"] = p.activation_slot_capacity_factor;
  d["total_activation_bytes"] = p.total_activation_bytes;
  d["total_device_buffer_bytes"] = p.total_device_buffer_bytes;
  d["total_virtual_bytes"] = p.total_virtual_bytes;
  d["num_activation_slots"] = p.num_activation_slots;
  d["inference"] = p.inference;
  d["vmm_granularity_bytes"] = p.vmm_granularity_bytes;
  d["vmm_device_prefix_bytes"] = p.vmm_device_prefix_bytes;
  d["vmm_host_section_bytes"] = p.vmm_host_section_bytes;
  d["vmm_device_scratch_section_bytes"] = p.vmm_device_scratch_section_bytes;
  d["vmm_padding_bytes"] = p.vmm_padding_bytes;
  d["routing_window_bytes"] = p.routing_window_bytes;
  d["dispatch_window_bytes"] = p.dispatch_window_bytes;
  d["combine_window_bytes"] = p.combine_window_bytes;
  d["warnings"] = p.warnings;
  d["explain"] = p.explain();
  return d;
}

// A prepared weight's layout: {"format", "inference", "num_experts", "rows", "cols", and per field
// (fprop_data, fprop_scale, dgrad_data, dgrad_scale, global_scale, global_scale_inv) None or (dtype
// name, shape tuple)}. Every present field is its own tensor.
inline py::dict prepared_spec_to_dict(const PreparedWeightSpec& s) {
  auto field = [](const PreparedTensorSpec& t) -> py::object {
    if (!t.present) return py::none();
    return py::make_tuple(std::string(to_string(t.dtype)), py::tuple(py::cast(t.shape)));
  };
  py::dict d;
  d["format"] = std::string(to_string(s.format));
  d["inference"] = s.inference;
  d["num_experts"] = s.num_experts;
  d["rows"] = s.rows;
  d["cols"] = s.cols;
  d["fprop_data"] = field(s.fprop_data);
  d["fprop_scale"] = field(s.fprop_scale);
  d["dgrad_data"] = field(s.dgrad_data);
  d["dgrad_scale"] = field(s.dgrad_scale);
  d["global_scale"] = field(s.global_scale);
  d["global_scale_inv"] = field(s.global_scale_inv);
  return d;
}

inline void register_error_translator() {
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      switch (e.code()) {
        case ErrorCode::kInvalidValue: PyErr_SetString(PyExc_ValueError, e.what()); return;
        case ErrorCode::kInvalidType: PyErr_SetString(PyExc_TypeError, e.what()); return;
        default: PyErr_SetString(PyExc_RuntimeError, e.what()); return;
      }
    }
  });
}

}  // namespace dist_moe::python
