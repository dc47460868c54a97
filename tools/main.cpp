// dist-moe: command-line front end of Dist-MoE.
//
//   dist-moe plan  --tokens T --hidden D --intermediate F --topk K --experts E --ep R [...]
//   dist-moe demo  the quick-start job: plan, CPU oracle, and GPU execution when an SM90 GPU exists
//   dist-moe bench the fused layer on all local GPUs vs GEMM-only and the stock-PyTorch EP layer
//   dist-moe info  devices, the NCCL in use, build facts
// `dist-moe <command> --help` prints that command's usage. Every error is one line on stderr:
// exit 2 for bad input, 1 for anything else.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "dist_moe/error.h"
#include "dist_moe/version.h"

namespace dist_moe::cli {
namespace {

struct Command {
  const char* name;
  int (*run)(const std::vector<std::string>&);
  const char* summary;  // one line in the command list
  const char* usage;    // `dist-moe <name> --help`
};

const Command kCommands[] = {
    {"plan", dist_moe::cli::cmd_plan, "print the memory plan of a configuration",
     "usage: dist-moe plan --shape NAME [--ep R] [options]\n"
     "       dist-moe plan --tokens T --hidden D --intermediate F --topk K --experts E [--ep R] [options]\n"
     "\n"
     "Prints the memory plan of a configuration (no GPU needed).\n"
     "\n"
     "  --shape dsv3_prefill|qwen3_30b|mixtral|dsv3_decode   a reference workload; the next five override it\n"
     "  --tokens T --hidden D --intermediate F --topk K --experts E   per-rank sizes (required without --shape)\n"
     "  --ep R                 expert-parallel ranks (default 1)\n"
     "  --layers L             MoE layers per activation slot (default 1)\n"
     "  --slots N              activation slots (default 1; 0 with --inference)\n"
     "  --slot-factor f | --slot-bytes B   activation slot capacity\n"
     "  --device-factor f      device scratch capacity factor\n"
     "  --vmm-factor f         virtual address range factor (VMM host overflow)\n"
     "  --format bf16|mxfp8|nvfp4   [--pipeline staged|mega] (block-scaled formats only)\n"
     "  --activation swiglu|swiglu_clamped\n"
     "  --inference            plan for inference (no saved activations)\n"},
    {"demo", dist_moe::cli::cmd_demo,
     "the quick-start job: a plan, the CPU oracle, and GPU execution when an SM90 GPU is present",
     "usage: dist-moe demo\n"
     "\n"
     "The quick-start job (scripts/run.sh): the memory plan of dsv3_prefill at EP 8, the CPU oracle of a\n"
     "two-rank layer, and, on SM90 GPUs, a two-layer MoE forward+backward on every GPU checked against\n"
     "the oracle. Takes no options.\n"},
    {"bench", dist_moe::cli::cmd_bench,
     "the fused layer on every local GPU vs our GEMM-only time and the stock-PyTorch EP layer",
     "usage: dist-moe bench [--shape NAME] [options]\n"
     "\n"
     "Times the fused layer on every local GPU (one process per GPU) against our GEMM-only time for the\n"
     "same rows and the stock-PyTorch EP layer (needs torch), as ratios.\n"
     "\n"
     "  --shape dsv3_prefill|qwen3_30b|mixtral|dsv3_decode   (default dsv3_prefill)\n"
     "  --mode train|infer     (default train)\n"
     "  --format bf16|mxfp8|fp8_blockwise|nvfp4   the layer's format (default bf16); a block-scaled one\n"
     "                         also times our BF16 layer\n"
     "  --gpus N               ranks (default: every GPU)\n"
     "  --experts E            the shape with E global experts (one GPU, E/2: one EP2 rank's GEMMs);\n"
     "                         needs --no-baseline\n"
     "  --tokens T             the shape with T tokens per rank (e.g. the batches between decode and\n"
     "                         prefill); needs --no-baseline\n"
     "  --iters N              calls per measurement (default 20)\n"
     "  --slot-factor F        activation slot factor (default: a slot that never recomputes)\n"
     "  --device-factor F      device scratch capacity factor\n"
     "  --wgrad accumulate|write   add weight gradients into the buffers (default) or overwrite them\n"
     "  --sustain-ms MS        load before each measurement, for sustained clocks (default 300)\n"
     "  --preheat self|gemm    that load for our layers: the timed call itself (default: each format at\n"
     "                         the clocks its own kernels settle to), or our BF16 GEMMs\n"
     "  --no-baseline          skip the stock-PyTorch layer\n"},
    {"info", dist_moe::cli::cmd_info, "devices visible to this process, the NCCL in use, build facts",
     "usage: dist-moe info\n"
     "\n"
     "Prints the version, the build, the NCCL this build compiled against and the one loaded at run\n"
     "time (path, version, whether it fits), and the GPUs visible to this process. Takes no options.\n"},
    {"bench-rank", dist_moe::cli::cmd_bench_rank, nullptr,  // internal: one rank of `bench`
     "usage: dist-moe bench-rank [--shape NAME] [--mode train|infer] [--iters N] [--slot-factor F]\n"
     "                           [--device-factor F] [--wgrad accumulate|write] [--sustain-ms MS] [--preheat self|gemm]\n"
     "                           [--format bf16|mxfp8|fp8_blockwise|nvfp4] [--experts E] [--tokens T]\n"
     "\n"
     "One rank of `dist-moe bench`, started by dmoe_launch (internal).\n"},
};

void usage(FILE* out) {
  std::fputs("usage: dist-moe <command> [options]\n\ncommands:\n", out);
  for (const Command& c : kCommands)
    if (c.summary != nullptr) std::fprintf(out, "  %-8s %s\n", c.name, c.summary);
  std::fputs("  version  print the version\n  help     this text; `dist-moe <command> --help` for a command's options\n",
             out);
}

const Command* find_command(const std::string& name) {
  for (const Command& c : kCommands)
    if (name == c.name) return &c;
  return nullptr;
}

bool asks_for_help(const std::vector<std::string>& args) {
  for (const std::string& a : args)
    if (a == "-h" || a == "--help") return true;
  return false;
}

}  // namespace
}  // namespace dist_moe::cli

using namespace dist_moe::cli;

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  const Command* command = find_command(cmd);
  try {
    if (command != nullptr) {
      if (asks_for_help(rest)) {
        std::fputs(command->usage, stdout);
        return 0;
      }
      return command->run(rest);
    }
    if (cmd == "version" || cmd == "--version") {
      std::printf("dist-moe %s\n", DIST_MOE_VERSION_STRING);
      return 0;
    }
    if (cmd == "help" || cmd == "--help" || cmd == "-h") {
      if (rest.empty()) {
        usage(stdout);
        return 0;
      }
      if (const Command* about = find_command(rest[0])) {
        std::fputs(about->usage, stdout);
        return 0;
      }
      std::fprintf(stderr, "dist-moe: error: unknown command '%s' (try 'dist-moe help')\n", rest[0].c_str());
      return 2;
    }
    std::fprintf(stderr, "dist-moe: error: unknown command '%s' (try 'dist-moe help')\n", cmd.c_str());
    return 2;
  } catch (const dist_moe::Error& e) {
    const bool bad_input = e.code() == dist_moe::ErrorCode::kInvalidValue || e.code() == dist_moe::ErrorCode::kInvalidType;
    const bool device = e.code() == dist_moe::ErrorCode::kCuda || e.code() == dist_moe::ErrorCode::kDriver ||
                        e.code() == dist_moe::ErrorCode::kNccl;
    std::fprintf(stderr, "dist-moe: error: %s%s%s%s\n", e.what(), bad_input ? " (try 'dist-moe " : "",
                 bad_input ? (cmd + " --help')").c_str() : "",
                 device ? " ('dist-moe info' shows the GPUs and the NCCL in use)" : "");
    return bad_input ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist-moe: error: %s\n", e.what());
    return 1;
  }
}
