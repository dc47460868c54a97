// dist-moe: command-line front end of Dist-MoE.
//
//   dist-moe plan  --tokens T --hidden D --intermediate F --topk K --experts E --ep R [...]
//   dist-moe demo  the quick-start job: plan, CPU oracle, and GPU execution when an SM90 GPU exists
//   dist-moe bench the fused layer on all local GPUs vs GEMM-only and the stock-PyTorch EP layer
//   dist-moe info  devices and build facts
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "dist_moe/error.h"
#include "dist_moe/version.h"

namespace {

void usage(FILE* out) {
  std::fputs(
      "usage: dist-moe <command> [options]\n"
      "\n"
      "commands:\n"
      "  plan   print the memory plan of a configuration\n"
      "         --shape dsv3_prefill|qwen3_30b|mixtral|dsv3_decode  (or all of the next six)\n"
      "         --tokens T --hidden D --intermediate F --topk K --experts E --ep R\n"
      "         [--layers L] [--slots N] [--slot-factor f | --slot-bytes B] [--device-factor f]\n"
      "         [--vmm-factor f] [--format bf16|mxfp8|nvfp4] [--pipeline staged|mega]\n"
      "         [--activation swiglu|swiglu_clamped] [--inference]\n"
      "  demo   the quick-start job: a plan, the CPU oracle on a small problem, and GPU execution\n"
      "         when an SM90 GPU is present\n"
      "  bench  the fused layer on every local GPU vs our GEMM-only time and the stock-PyTorch EP layer\n"
      "         --shape dsv3_prefill|qwen3_30b|mixtral|dsv3_decode [--mode train|infer] [--gpus N]\n"
      "         [--iters N] [--slot-factor F (default: a slot that never recomputes)] [--device-factor F]\n"
      "         [--no-baseline]\n"
      "  info   devices visible to this process and build facts\n"
      "  version\n",
      out);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  try {
    if (cmd == "plan") return dist_moe::cli::cmd_plan(rest);
    if (cmd == "demo") return dist_moe::cli::cmd_demo(rest);
    if (cmd == "info") return dist_moe::cli::cmd_info(rest);
    if (cmd == "bench") return dist_moe::cli::cmd_bench(rest);
    if (cmd == "bench-rank") return dist_moe::cli::cmd_bench_rank(rest);
    if (cmd == "version" || cmd == "--version") {
      std::printf("dist-moe %s\n", DIST_MOE_VERSION_STRING);
      return 0;
    }
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      usage(stdout);
      return 0;
    }
    std::fprintf(stderr, "dist-moe: error: unknown command '%s' (try 'dist-moe help')\n", cmd.c_str());
    return 2;
  } catch (const dist_moe::Error& e) {
    std::fprintf(stderr, "dist-moe: error: %s\n", e.what());
    return e.code() == dist_moe::ErrorCode::kInvalidValue || e.code() == dist_moe::ErrorCode::kInvalidType ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist-moe: error: %s\n", e.what());
    return 1;
  }
}
