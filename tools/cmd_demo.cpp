// dist-moe demo: the quick-start job. Shows a memory plan, runs the CPU oracle of a two-rank
// layer (forward and backward, GPU rounding points) against the unrounded double model, and says
// what the GPU path would do here.
#include <cstdio>

#include "cli_args.h"
#include "commands.h"
#include "launch_util.h"
#include "dist_moe/error.h"
#include "dist_moe/memory_plan.h"
#include "dist_moe/workloads.h"
#include "reference/oracle.h"
#if DIST_MOE_HAS_CUDA
#include "dist_moe/device_info.h"
#include "dist_moe/nccl_version.h"
#endif

namespace dist_moe::cli {
namespace {

void show_plan() {
  const Workload& w = find_workload("dsv3_prefill");
  Config c;
  c.max_num_local_input_tokens = w.tokens;
  c.hidden_dim = w.hidden;
  c.intermediate_dim = w.intermediate;
  c.top_k = w.top_k;
  c.num_experts = w.experts;
  c.max_moe_layers_per_activation_slot = 1;
  std::printf("== 1. memory plan: %s at EP 8 (dist-moe plan --shape %s --ep 8) ==\n", w.name.c_str(),
              w.name.c_str());
  std::fputs(plan_memory(c, 8).explain().c_str(), stdout);
}

void show_oracle() {
  using namespace reference;
  RandomProblemSpec spec;
  spec.num_ranks = 2;
  spec.tokens_per_rank = 16;
  spec.hidden_dim = 256;
  spec.intermediate_dim = 128;
  spec.top_k = 2;
  spec.num_experts = 8;
  spec.padding_route_probability = 0.1;
  spec.seed = 2026;
  const Problem p = make_random_problem(spec);
  std::printf("\n== 2. CPU oracle: R=%lld simulated ranks, T=%lld per rank, D=%lld, F=%lld, K=%lld, E=%lld ==\n",
              (long long)spec.num_ranks, (long long)spec.tokens_per_rank, (long long)spec.hidden_dim,
              (long long)spec.intermediate_dim, (long long)spec.top_k, (long long)spec.num_experts);
  const ForwardResult fwd = forward(p);
  const ExactProblem exact = problem_cast<double>(p);
  const ExactForwardResult fwd_exact = forward(exact);
  const auto grads = make_random_grad_out(p, 7);
  const BackwardResult bwd = backward(p, fwd, grads);
  std::vector<TensorD> grads_exact;
  for (const auto& g : grads) grads_exact.push_back(tensor_cast<double>(g));
  const ExactBackwardResult bwd_exact = backward(exact, fwd_exact, grads_exact);
  std::printf("routing: rank 0 receives %lld rows, rank 1 receives %lld rows\n",
              (long long)fwd.ranks[0].routing.num_valid_rows(), (long long)fwd.ranks[1].routing.num_valid_rows());
  struct Row {
    const char* name;
    Comparison c;
  } rows[] = {
      {"out_TD (BF16 pipeline vs exact)", compare(fwd.global_out_TD(), tensor_cast<float>(fwd_exact.global_out_TD()))},
      {"grad_x_TD", compare(bwd.global_grad_x_TD(), tensor_cast<float>(bwd_exact.global_grad_x_TD()))},
      {"grad_scores_TK", compare(bwd.global_grad_scores_TK(), tensor_cast<float>(bwd_exact.global_grad_scores_TK()))},
      {"dW13", compare(bwd.global_dw13_EFD(), tensor_cast<float>(bwd_exact.global_dw13_EFD()))},
      {"dW2", compare(bwd.global_dw2_EDF(), tensor_cast<float>(bwd_exact.global_dw2_EDF()))},
  };
  std::printf("%-34s %12s %12s\n", "tensor", "rel L2", "cosine");
  for (const auto& r : rows) std::printf("%-34s %12.3e %12.6f\n", r.name, r.c.rel_l2, r.c.cosine);
  std::printf("(the GPU kernels are checked against this oracle: tests/gpu, scripts/gpu_check.sh)\n");
}

int show_gpu() {
  std::printf("\n== 3. GPU execution ==\n");
#if DIST_MOE_HAS_CUDA
  const DeviceQuery q = query_devices();
  int sm90 = 0;
  for (const auto& d : q.devices) sm90 += d.is_sm90();
  if (sm90 == 0) {
    std::printf("no SM90 GPU visible (%s): execution needs an SM90 GPU (H100/H200).\n",
                q.error.empty() ? "devices are not sm_90" : q.error.c_str());
  } else {
    // An NCCL without the device API would fail in every rank after a screen of output: say it once.
    check_nccl_runtime_version();
    std::printf("%d SM90 GPU(s): a two-layer MoE forward+backward on every GPU, checked against the oracle\n", sm90);
    std::fflush(stdout);
    std::vector<std::string> unused;
    const std::string cmd = launcher_path() + " -n " + std::to_string(sm90) + " --timeout 600 -- " + self_dir() +
                            "/examples/two_layer_moe";
    const int rc = run_and_collect(cmd, "\x01", &unused, true);
    if (rc != 0)
      detail::fail(ErrorCode::kRuntime, "the two-layer example FAILED (exit ", rc, "): each rank's error is above");
    std::printf("example passed\nperformance: dist-moe bench --shape dsv3_prefill (all local GPUs)\n");
    return 0;
  }
#else
  std::printf("host-only build: execution needs an SM90 GPU (H100/H200) and a CUDA build.\n");
#endif
  return 0;
}

}  // namespace

int cmd_demo(const std::vector<std::string>& argv) {
  Args args(argv, {}, {});  // no options: anything else is an error
  show_plan();
  show_oracle();
  return show_gpu();
}

}  // namespace dist_moe::cli
