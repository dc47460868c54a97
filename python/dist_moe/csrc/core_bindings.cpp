// dist_moe._native: the torch-free C++ core (config validation, memory planning, prepared-weight
// layouts) for Python.
// Configs cross as dicts (dict_convert.h); errors map to ValueError / TypeError / RuntimeError.
#include "dict_convert.h"

namespace py = pybind11;
using namespace dist_moe;
using namespace dist_moe::python;


PYBIND11_MODULE(_native, m) {
  m.doc() = "Dist-MoE C++ core: config validation, memory planning and prepared-weight layouts (no CUDA, no torch)";
  static py::exception<Error> base(m, "DistMoeError", PyExc_RuntimeError);
  register_error_translator();
  m.def("validate_config", [](const py::dict& d) { config_from_dict(d).validate(); });
  m.def("plan_memory", [](const py::dict& d, int64_t ep_size, std::optional<int64_t> granularity) {
    PlanOptions o;
    o.vmm_granularity_bytes = granularity;
    return plan_to_dict(plan_memory(config_from_dict(d), ep_size, o));
  }, py::arg("config"), py::arg("ep_size"), py::arg("vmm_granularity_bytes") = py::none());
  m.def("supports_fused_post_expert_rmsnorm",
        [](const std::string& in, const std::string& score, const std::string& norm, const std::string& out,
           int64_t topk, int64_t dim) {
          return supports_fused_post_expert_rmsnorm(parse_dtype(in), parse_dtype(score), parse_dtype(norm),
                                                    parse_dtype(out), topk, dim);
        });
  m.def("validate_rmsnorm", [](double eps, const std::string& norm_out, const std::string& out, bool require_bitwise,
                               bool has_weight, const std::string& weight_dtype, double gain_center, bool use_kahan,
                               bool recompute_rstd, const std::string& input, const std::string& score, int64_t topk,
                               int64_t dim, bool training) {
    static const char dummy = 0;
    RMSNormPostprocess r;
    r.eps = eps;
    r.norm_output_dtype = parse_dtype(norm_out);
    r.output_dtype = parse_dtype(out);
    r.require_bitwise = require_bitwise;
    r.weight = has_weight ? &dummy : nullptr;
    r.weight_dtype = parse_dtype(weight_dtype);
    r.gain_center = gain_center;
    r.use_kahan = use_kahan;
    r.recompute_rstd = recompute_rstd;
    r.validate(parse_dtype(input), parse_dtype(score), topk, dim, training);
  });
  m.def("validate_vmm", [](double total, bool prefetch) { VmmConfig{total, prefetch}.validate(); });
  m.def("validate_block_scaled", [](const py::dict& d) {
    py::dict c;  // a minimal valid Config carrying only the block-scaled part
    c["max_num_local_input_tokens"] = 1; c["hidden_dim"] = 256; c["intermediate_dim"] = 256; c["top_k"] = 1;
    c["num_experts"] = 1; c["max_moe_layers_per_activation_slot"] = 1; c["device_scratch_capacity_factor"] = 1.0;
    c["num_activation_slots"] = 1; c["activation"] = "swiglu"; c["swiglu_alpha"] = 1.702; c["swiglu_limit"] = 7.0;
    c["inference"] = false; c["block_scaled"] = d;
    config_from_dict(c).block_scaled->validate();
  });
  m.def("bf16_grouped_gemm_presets", &bf16_grouped_gemm_presets);
  // The fields of a prepared block-scaled weight (include/dist_moe/prepared_weight.h): format is
  // "mxfp8_e4m3", "nvfp4" or "fp8_blockwise"; ValueError on shapes the format cannot take.
  m.def("prepared_weight_spec", [](const std::string& format, bool inference, int64_t num_experts, int64_t rows,
                                   int64_t cols) {
    return prepared_spec_to_dict(
        prepared_weight_spec(parse_block_scaled_format(format), inference, num_experts, rows, cols));
  }, py::arg("format"), py::arg("inference"), py::arg("num_experts"), py::arg("rows"), py::arg("cols"));
}
