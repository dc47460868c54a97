// dist-moe plan: print the memory plan of a configuration.
#include <cstdio>
#include <set>

#include "cli_args.h"
#include "commands.h"
#include "dist_moe/error.h"
#include "dist_moe/memory_plan.h"
#include "dist_moe/workloads.h"

namespace dist_moe::cli {

const std::vector<std::string>& config_valued_options() {
  static const std::vector<std::string> v = {"shape",        "tokens",      "hidden",        "intermediate",
                                             "topk",         "experts",     "ep",            "layers",
                                             "slots",        "slot-factor", "slot-bytes",    "device-factor",
                                             "vmm-factor",   "format",      "pipeline",      "activation"};
  return v;
}

const std::vector<std::string>& config_flag_options() {
  static const std::vector<std::string> v = {"inference"};
  return v;
}

Config config_from_args(const Args& args, int64_t* ep_size) {
  Config c;
  if (auto shape = args.str("shape")) {
    const Workload& w = find_workload(*shape);
    c.max_num_local_input_tokens = w.tokens;
    c.hidden_dim = w.hidden;
    c.intermediate_dim = w.intermediate;
    c.num_experts = w.experts;
    c.top_k = w.top_k;
  }
  auto take = [&](const char* opt, int64_t& field) {
    if (auto v = args.integer(opt)) field = *v;
    else if (!args.has("shape")) field = args.required_integer(opt);  // throws "missing required option"
  };
  take("tokens", c.max_num_local_input_tokens);
  take("hidden", c.hidden_dim);
  take("intermediate", c.intermediate_dim);
  take("topk", c.top_k);
  take("experts", c.num_experts);
  *ep_size = args.integer("ep").value_or(1);
  c.max_moe_layers_per_activation_slot = args.integer("layers").value_or(1);
  c.num_activation_slots = args.integer("slots").value_or(args.flag("inference") ? 0 : 1);
  if (auto v = args.real("slot-factor")) c.activation_slot_capacity_factor = *v;
  if (auto v = args.integer("slot-bytes")) c.activation_slot_bytes = *v;
  if (auto v = args.real("device-factor")) c.device_scratch_capacity_factor = *v;
  if (auto v = args.real("vmm-factor")) c.vmm = VmmConfig{*v, true};
  if (auto v = args.str("activation")) c.activation = parse_activation(*v);
  c.inference = args.flag("inference");
  const std::string format = args.str("format").value_or("bf16");
  if (format != "bf16") {
    BlockScaledConfig bs;
    bs.format = parse_block_scaled_format(format);
    if (auto p = args.str("pipeline")) bs.pipeline = parse_block_scaled_pipeline(*p);
    c.block_scaled = bs;
  } else if (args.has("pipeline")) {
    detail::fail(ErrorCode::kInvalidValue, "--pipeline applies only to --format mxfp8 or nvfp4");
  }
  c.validate();
  return c;
}

int cmd_plan(const std::vector<std::string>& argv) {
  std::set<std::string> valued(config_valued_options().begin(), config_valued_options().end());
  std::set<std::string> flags(config_flag_options().begin(), config_flag_options().end());
  Args args(argv, valued, flags);
  int64_t ep = 1;
  const Config c = config_from_args(args, &ep);
  const MemoryPlan plan = plan_memory(c, ep);
  std::printf("config: T_max=%lld D=%lld F=%lld K=%lld E=%lld ep=%lld (E_local=%lld) layers/slot=%lld format=%s%s%s\n",
              (long long)c.max_num_local_input_tokens, (long long)c.hidden_dim, (long long)c.intermediate_dim,
              (long long)c.top_k, (long long)c.num_experts, (long long)ep, (long long)(c.num_experts / ep),
              (long long)c.max_moe_layers_per_activation_slot,
              c.block_scaled ? to_string(c.block_scaled->format) : "bf16",
              c.block_scaled ? (std::string(" pipeline=") + to_string(c.block_scaled->pipeline)).c_str() : "",
              c.inference ? " inference" : " training");
  std::fputs(plan.explain().c_str(), stdout);
  return 0;
}

}  // namespace dist_moe::cli
