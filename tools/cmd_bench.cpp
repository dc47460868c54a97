// dist-moe bench: the fused BF16 layer on every local GPU (one process per GPU through
// dmoe_launch), per-stage times, the layer time, our GEMM-only time for the same rows, and the
// stock-PyTorch EP layer (bench/peers/torch_ep_baseline.py) on the same GPUs, as ratios.
//
//   dist-moe bench --shape dsv3_prefill|qwen3_30b|mixtral|dsv3_decode [--mode train|infer]
//                  [--gpus N] [--iters N] [--slot-factor F] [--device-factor F] [--no-baseline]
//                  [--wgrad accumulate|write] [--sustain-ms MS] [--format bf16|mxfp8|fp8_blockwise|nvfp4]
//                  [--experts E] [--tokens T] [--preheat self|gemm] [--pipeline staged|mega]
// --format mxfp8 / fp8_blockwise / nvfp4 (--mode infer only): the layer under test is the MXFP8,
// FP8-blockwise or NVFP4 staged layer, weights prepared once; our BF16 layer on the same inputs is timed in alternation with it,
// and the GEMM-only column is the BF16 GEMMs' (what the block-scaled GEMMs replace).
// --pipeline mega (with --format nvfp4 --mode infer at decode-sized shapes -- at most 12 routed rows
// per local expert -- or --format mxfp8 at any size, inference or training): the layer under test is
// the Mega pipeline, and the staged layer of the same format (inference, or forward+backward) is
// timed in alternation with it too ("staged layer" line: Mega's speedup).
// --experts E: the shape with E global experts instead of its own (e.g. dsv3_prefill --experts 128
// on one GPU: the expert GEMMs one rank of EP2 runs, without the NVLink traffic); no stock layer.
// --tokens T: the shape with T tokens per rank instead of its own (e.g. dsv3_decode --tokens 512: the
// mid-sized batches between decode and prefill); no stock layer.
// --mode infer also prints the expert weights each forward GEMM stage streams against the HBM copy
// rate measured in the same run.
// --sustain-ms (default 300): every timed measurement, ours and the stock layer's, follows MS ms of
// load (the stock layer: its GEMMs; ours: --preheat), so both are timed at the power-limited clocks
// of a GPU in training rather than at boost clocks after a pause (docs/perf.md G22); 0 restores the
// earlier protocol.
// --preheat self|gemm: what that load is for our layers. self (default): the call about to be timed
// (each layer, and the GEMM-only twin, at the clocks its own kernel mix settles to: FP8 GEMMs draw
// less power per cycle than BF16 ones and hold higher clocks, so under a BF16 GEMM load a block-
// scaled layer ran at BF16's clocks, up to 15% slower; docs/perf_history.md G65). gemm: our BF16
// GEMM-only forward before every measurement (the protocol before session 29; for a BF16 layer
// the two agree within run-to-run noise).
// Protocol: the fused layer's totals and the GEMM-only totals alternate over 3 rounds (each total
// the median over rounds of its --iters-call median), the stage table over 3 more; every rank's
// numbers are shown (ranges), and the layer is also divided by the slowest rank's GEMM-only time.
// --wgrad: our backward adds its weight gradients into the gradient buffers (default), as the stock
// layer's autograd adds each call's into the existing .grad (the baseline times repeated
// forward+backward calls without zero_grad); `write` overwrites them (a step after
// zero_grad(set_to_none=True)), which saves reading the old gradients.
// The parent process never touches CUDA (the ranks are forked by dmoe_launch).
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_args.h"
#include "launch_util.h"
#include "commands.h"
#include "dist_moe/error.h"
#include "dist_moe/workloads.h"

namespace dist_moe::cli {
namespace {

// "key=value key=value" -> map
std::map<std::string, double> parse_kv(const std::string& s) {
  std::map<std::string, double> m;
  std::istringstream is(s);
  std::string tok;
  while (is >> tok) {
    const auto eq = tok.find('=');
    if (eq != std::string::npos) m[tok.substr(0, eq)] = std::atof(tok.c_str() + eq + 1);
  }
  return m;
}

// Bytes of a prepared expert weight [e_local, n, k] that a forward GEMM reads: its data and the
// scales it streams (docs/formats.md; MXFP8 through the FPROP scale view, one code per 1 x 32).
double weight_bytes(const std::string& format, int64_t e_local, int64_t n, int64_t k) {
  const double values = static_cast<double>(e_local) * static_cast<double>(n) * static_cast<double>(k);
  if (format == "mxfp8") return values * (1.0 + 1.0 / 32);
  if (format == "fp8_blockwise") return values * (1.0 + 4.0 / (128 * 128));
  if (format == "nvfp4") return values * (0.5 + 1.0 / 16) + 8.0 * static_cast<double>(e_local);
  return values * 2.0;
}

double json_number(const std::string& json, const std::string& key) {
  const auto at = json.find("\"" + key + "\":");
  return at == std::string::npos ? -1.0 : std::atof(json.c_str() + at + key.size() + 3);
}

}  // namespace

int cmd_bench(const std::vector<std::string>& argv) {
  Args args(argv, {"shape", "mode", "gpus", "iters", "slot-factor", "device-factor", "wgrad", "sustain-ms", "format",
                   "experts", "tokens", "preheat", "pipeline"},
            {"no-baseline"});
  const std::string format = args.choice("format", {"bf16", "mxfp8", "fp8_blockwise", "nvfp4"});
  const std::string pipeline = args.choice("pipeline", {"staged", "mega"});
  if (pipeline == "mega" && (format == "bf16" || (format != "mxfp8" && args.str("mode").value_or("train") != "infer")))
    detail::fail(ErrorCode::kInvalidValue, "--pipeline mega needs a block-scaled --format, and --mode infer except for "
                 "mxfp8");
  if (format == "nvfp4" && args.str("mode").value_or("train") != "infer")
    detail::fail(ErrorCode::kInvalidValue, "--format nvfp4 needs --mode infer (NVFP4 DistMoE is inference-only)");
  const std::string shape = args.str("shape").value_or("dsv3_prefill");
  Workload w = find_workload(shape);
  // --experts / --tokens: the shape with another value; the stock layer runs the reference shapes only.
  const auto shape_override = [&](const char* name, int64_t minimum, const char* what) -> std::optional<int64_t> {
    const auto v = args.integer(name);
    if (!v) return std::nullopt;
    if (*v < minimum) detail::fail(ErrorCode::kInvalidValue, "--", name, " must be >= ", what, minimum, ", got ", *v);
    if (!args.flag("no-baseline"))
      detail::fail(ErrorCode::kInvalidValue, "--", name, " changes the shape: add --no-baseline (the stock layer runs "
                   "the reference shapes only)");
    return v;
  };
  if (auto e = shape_override("experts", w.top_k, "the shape's top_k ")) w.experts = *e;
  if (auto t = shape_override("tokens", 1, "")) w.tokens = *t;
  const std::string mode = args.choice("mode", {"train", "infer"});
  const std::string wgrad = args.choice("wgrad", {"accumulate", "write"});
  // Every timed measurement (ours and the stock layer's) starts after this long under load
  // (--preheat), at the power-limited clocks of a GPU in training (docs/perf.md G23); 0: from
  // whatever state the GPU is in (the earlier protocol).
  const double sustain_ms = args.real("sustain-ms").value_or(300.0);
  if (!(sustain_ms >= 0)) detail::fail(ErrorCode::kInvalidValue, "--sustain-ms must be >= 0, got ", sustain_ms);
  const std::string preheat = args.choice("preheat", {"self", "gemm"});
  const int iters = static_cast<int>(args.integer("iters").value_or(20));
  if (iters < 1) detail::fail(ErrorCode::kInvalidValue, "--iters must be >= 1, got ", iters);
  (void)args.real("slot-factor");  // malformed numbers fail here, before looking for GPUs
  (void)args.real("device-factor");
  const int gpus = static_cast<int>(args.integer("gpus").value_or(count_nvidia_gpus()));
  if (gpus < 1) detail::fail(ErrorCode::kRuntime, "dist-moe bench needs SM90 GPUs; none found under /proc/driver/nvidia");
  if (w.experts % gpus != 0)
    detail::fail(ErrorCode::kInvalidValue, shape, " has ", w.experts, " experts, not divisible by ", gpus, " GPUs");

  std::printf("dist-moe bench: %s (T=%lld D=%lld F=%lld E=%lld K=%lld per rank), %s, %d GPU(s), %d iterations, "
              "each measurement after %.0f ms of sustained %s load\n",
              shape.c_str(), (long long)w.tokens, (long long)w.hidden, (long long)w.intermediate,
              (long long)w.experts, (long long)w.top_k, mode.c_str(), gpus, iters, sustain_ms,
              preheat == "self" ? "self (the timed call's own)" : "GEMM");
  if (mode == "train")
    std::printf("WGRAD %s (the stock layer's autograd accumulates into .grad across its timed calls)\n",
                wgrad == "accumulate" ? "accumulates into the gradient buffers" : "overwrites the gradient buffers");
  std::printf("[1/2] Dist-MoE fused layer (%s%s) ...\n", format.c_str(), pipeline == "mega" ? ", Mega" : "");
  std::fflush(stdout);
  std::ostringstream cmd;
  cmd << launcher_path() << " -n " << gpus << " --timeout 900 -- " << self_dir() << "/dist-moe bench-rank --shape "
      << shape << " --mode " << mode << " --iters " << iters;
  if (auto f = args.real("slot-factor")) cmd << " --slot-factor " << *f;
  if (auto f = args.real("device-factor")) cmd << " --device-factor " << *f;
  cmd << " --wgrad " << wgrad << " --sustain-ms " << sustain_ms << " --preheat " << preheat << " --format " << format
      << " --experts " << w.experts << " --tokens " << w.tokens << " --pipeline " << pipeline;
  std::vector<std::string> results;
  if (run_and_collect(cmd.str(), "RESULT@", &results, true) != 0 || results.empty())
    detail::fail(ErrorCode::kRuntime, "the benchmark ranks failed (output above)");
  // Rank 0 prints every rank's lines: "<rank> key=value ...", "<rank> stage name=ms ...",
  // "<rank> gemm_stage name=ms ..." (stages in the pipeline's order, the same on every rank).
  struct RankResult {
    std::map<std::string, double> totals;
    std::vector<std::pair<std::string, double>> stages, gemm_stages;
  };
  std::vector<RankResult> ranks(gpus);
  auto parse_stages = [](const std::string& line, std::vector<std::pair<std::string, double>>& out) {
    std::istringstream is(line);  // keeps the pipeline's order
    std::string tok;
    while (is >> tok)
      if (const auto eq = tok.find('='); eq != std::string::npos)
        out.emplace_back(tok.substr(0, eq), std::atof(tok.c_str() + eq + 1));
  };
  for (const auto& line : results) {
    std::istringstream is(line);
    int r = -1;
    std::string rest;
    if (!(is >> r) || r < 0 || r >= gpus) continue;
    std::getline(is >> std::ws, rest);
    if (rest.rfind("stage ", 0) == 0) parse_stages(rest.substr(6), ranks[r].stages);
    else if (rest.rfind("gemm_stage ", 0) == 0) parse_stages(rest.substr(11), ranks[r].gemm_stages);
    else ranks[r].totals = parse_kv(rest);
  }
  for (int r = 0; r < gpus; ++r)
    if (ranks[r].totals.empty() || ranks[r].stages.size() != ranks[0].stages.size())
      detail::fail(ErrorCode::kRuntime, "rank ", r, "'s results are missing or differ in their stages");
  std::map<std::string, double>& ours = ranks[0].totals;
  // Over ranks: [min, max] of a total, or of stage i of a stage list.
  auto range_of = [&](auto&& value) {
    double lo = value(ranks[0]), hi = lo;
    for (const RankResult& rr : ranks) lo = std::min(lo, value(rr)), hi = std::max(hi, value(rr));
    return std::pair<double, double>(lo, hi);
  };

  double torch_fwd = -1, torch_fb = -1;
  if (!args.flag("no-baseline")) {
    std::printf("[2/2] stock-PyTorch EP baseline (NCCL all_to_all + torch._grouped_mm) ...\n");
    std::fflush(stdout);
    const std::string repo = self_dir() + "/..";
    std::vector<std::string> base;
    const std::string py = std::string("python3 ") + repo + "/bench/peers/torch_ep_shape.py --shape " + shape +
                           " --gpus " + std::to_string(gpus) + " --sustain-ms " + std::to_string(sustain_ms);
    if (run_and_collect(py, "BASELINE ", &base, false) == 0 && !base.empty()) {
      torch_fwd = json_number(base.back(), "fwd_ms");
      torch_fb = json_number(base.back(), "fwd_bwd_ms");
    } else {
      std::printf("baseline unavailable (needs torch on this machine)\n");
    }
  }

  // Stages of the fused layer; a GEMM stage also shows its GEMM-only twin (same rows, local
  // contiguous operands), timed in alternation with it (medians of 3 rounds). With several ranks,
  // the range over ranks: a stage that ends in an EP barrier is long on a rank that waits there.
  const bool multi = gpus > 1;
  int name_width = 24;  // the longest stage name
  for (const auto& stage : ranks[0].stages) name_width = std::max(name_width, static_cast<int>(stage.first.size()));
  std::printf("\n%-*s %10s %12s %8s", name_width, "stage (eager)", "rank 0 ms",
              format == "bf16" ? "GEMM-only ms" : "BF16 GEMM ms", "ratio");
  if (multi) std::printf(" %17s %17s", "ms over ranks", "GEMM-only ranks");
  std::printf("\n");
  for (size_t i = 0; i < ranks[0].stages.size(); ++i) {
    const auto& [name, ms] = ranks[0].stages[i];
    const auto twin_of = [&](const RankResult& rr) {
      const auto t = std::find_if(rr.gemm_stages.begin(), rr.gemm_stages.end(), [&](const auto& g) { return g.first == name; });
      return t == rr.gemm_stages.end() ? -1.0 : t->second;
    };
    const double twin = twin_of(ranks[0]);
    std::printf("%-*s %10.3f", name_width, name.c_str(), ms);
    if (twin > 0) std::printf(" %12.3f %7.2fx", twin, ms / twin);
    else std::printf(" %12s %8s", "", "");
    if (multi) {
      const auto [lo, hi] = range_of([&](const RankResult& rr) { return rr.stages[i].second; });
      std::printf(" %8.3f..%-7.3f", lo, hi);
      if (twin > 0) {
        const auto [glo, ghi] = range_of(twin_of);
        std::printf(" %8.3f..%-7.3f", glo, ghi);
      }
    }
    std::printf("\n");
  }
  // Inference: the expert weights each forward GEMM streams (rank 0's eager stage times), against
  // the HBM copy rate measured in the same run; the BF16 GEMMs on the same rows beside them.
  if (mode == "infer") {
    const double copy = ours["copy_gbps"];
    const int64_t e_local = w.experts / gpus;
    // (Mega streams both weights in its one stage.)
    const struct { const char* stage; int64_t n, k; } gemms[] = {{"fwd:w13", 2 * w.intermediate, w.hidden},
                                                                 {"fwd:w2", w.hidden, w.intermediate},
                                                                 {"fwd:mega", 3 * w.intermediate, w.hidden}};
    std::printf("\nexpert weights streamed (copy rate in this run: %.0f GB/s, read + write)\n", copy);
    for (const auto& g : gemms) {
      const auto it = std::find_if(ranks[0].stages.begin(), ranks[0].stages.end(),
                                   [&](const auto& st) { return st.first == g.stage; });
      if (it == ranks[0].stages.end() || it->second <= 0) continue;
      const double gb = weight_bytes(format, e_local, g.n, g.k) / 1e9, gbps = gb / (it->second * 1e-3);
      std::printf("%-24s %7.3f GB in %7.3f ms = %6.0f GB/s (%.0f%% of copy)", g.stage, gb, it->second, gbps,
                  copy > 0 ? 100.0 * gbps / copy : 0.0);
      const auto twin = std::find_if(ranks[0].gemm_stages.begin(), ranks[0].gemm_stages.end(),
                                     [&](const auto& st) { return st.first == g.stage; });
      if (format != "bf16" && twin != ranks[0].gemm_stages.end() && twin->second > 0) {
        const double bf16_gbps = weight_bytes("bf16", e_local, g.n, g.k) / 1e9 / (twin->second * 1e-3);
        std::printf("; BF16 GEMM %6.0f GB/s (%.0f%%)", bf16_gbps, copy > 0 ? 100.0 * bf16_gbps / copy : 0.0);
      }
      std::printf("\n");
    }
  }
  auto ratio = [](double base, double ours_ms) { return base > 0 && ours_ms > 0 ? base / ours_ms : 0.0; };
  std::printf("\n%-28s %10s %12s %12s %14s\n", "measure (rank 0)", "ours ms", "GEMM-only ms", "torch EP ms",
              "speedup vs torch");
  const double fwd = ours["fwd_ms"], fb = ours["fwd_bwd_ms"];
  // The stock layer's columns, or "-" where it did not run (--no-baseline).
  const auto measure_row = [&](const char* name, double ours_ms, double gemm_ms, double torch_ms) {
    std::printf("%-28s %10.3f %12.3f", name, ours_ms, gemm_ms);
    if (torch_ms > 0) std::printf(" %12.3f %13.2fx\n", torch_ms, ratio(torch_ms, ours_ms));
    else std::printf(" %12s %14s\n", "-", "-");
  };
  measure_row(mode == "train" ? "forward" : "inference forward", fwd, ours["gemm_fwd_ms"], torch_fwd);
  if (mode == "train") measure_row("forward+backward", fb, ours["gemm_fwd_bwd_ms"], torch_fb);
  if (format != "bf16") {
    const double bf = ours["bf16_fwd_ms"], bfb = ours["bf16_fwd_bwd_ms"];
    std::printf("%-28s %10.3f %12s %12s %13.2fx  (our BF16 layer, alternated with the %s layer)\n",
                mode == "train" ? "BF16 layer forward" : "BF16 layer inference", bf, "", "", ratio(bf, fwd),
                format.c_str());
    if (mode == "train")
      std::printf("%-28s %10.3f %12s %12s %13.2fx\n", "BF16 layer forward+backward", bfb, "", "", ratio(bfb, fb));
  }
  if (pipeline == "mega") {
    const double st = ours["staged_ms"];
    std::printf("%-28s %10.3f %12s %12s %13.2fx  (the staged %s layer, alternated with Mega: Mega's speedup)\n",
                mode == "train" ? "staged layer fwd+bwd" : "staged layer inference", st, "", "",
                ratio(st, mode == "train" ? fb : fwd), format.c_str());
  }
  std::printf("GEMM-only forward with exactly balanced expert rows: %.3f ms\n", ours["gemm_fwd_even_ms"]);
  std::printf("fused layer / GEMM-only: forward %.2fx", ratio(fwd, ours["gemm_fwd_ms"]));
  if (mode == "train") std::printf(", forward+backward %.2fx", ratio(fb, ours["gemm_fwd_bwd_ms"]));
  std::printf("\n");
  std::printf("host time to enqueue one %s call: %.3f ms\n", mode == "train" ? "forward+backward" : "inference forward",
              ours["layer_host_ms"]);
  if (multi) {
    // Every rank's layer ends with the slowest rank (EP barriers); its own GEMMs on its own rows are
    // what a layer with free communication would take.
    const auto total = [&](const char* key) { return range_of([&](const RankResult& rr) { return rr.totals.at(key); }); };
    const auto gf = total("gemm_fwd_ms"), gfb = total("gemm_fwd_bwd_ms"), f = total("fwd_ms"), ffb = total("fwd_bwd_ms");
    std::printf("over ranks: fused forward %.3f..%.3f ms, GEMM-only forward %.3f..%.3f ms", f.first, f.second,
                gf.first, gf.second);
    if (mode == "train")
      std::printf("; fused forward+backward %.3f..%.3f ms, GEMM-only forward+backward %.3f..%.3f ms", ffb.first,
                  ffb.second, gfb.first, gfb.second);
    std::printf("\nfused layer (rank 0) / slowest rank's GEMM-only: forward %.2fx", fwd / gf.second);
    if (mode == "train") std::printf(", forward+backward %.2fx", fb / gfb.second);
    std::printf("\n");
  }
  return 0;
}

}  // namespace dist_moe::cli
