// The dist-moe command line: plans print, bad input gives one error line and a non-zero exit.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

namespace {

struct Result {
  int exit_code;
  std::string out;  // stdout and stderr
};

// `redirect` decides what the pipe reads: both streams by default.
Result run_cli(const std::string& args, const char* redirect = "2>&1") {
  const std::string cmd = std::string(DIST_MOE_CLI_PATH) + " " + args + " " + redirect;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, PlanPrintsDsv3PrefillAtEp2AndEp8) {
  for (const char* ep : {"2", "8"}) {
    const Result r = run_cli(std::string("plan --tokens 4096 --hidden 7168 --intermediate 2048 --topk 8 --experts 256 --ep ") + ep);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("Distributed MoE memory plan:"), std::string::npos);
    EXPECT_NE(r.out.find("balanced/device/total rows: 32768/32768/32768"), std::string::npos) << r.out;
  }
  const Result shape = run_cli("plan --shape dsv3_prefill --ep 8");
  EXPECT_EQ(shape.exit_code, 0);
  EXPECT_NE(shape.out.find("E_local=32"), std::string::npos) << shape.out;
}

TEST(Cli, BadInputPrintsOneErrorLineAndFails) {
  const std::string base = "plan --tokens 4096 --hidden 7168 --intermediate 2048 --topk 8 --experts 256 --ep 2";
  struct Case {
    std::string args;
    const char* fragment;
  } cases[] = {
      {"plan --tokens 0 --hidden 7168 --intermediate 2048 --topk 8 --experts 256 --ep 2", "max_num_local_input_tokens must be positive"},
      {"plan --tokens 4096 --hidden 7168 --intermediate 2048 --topk 9 --experts 8 --ep 2", "top_k cannot exceed num_experts"},
      {"plan --tokens 4096 --hidden 100 --intermediate 2048 --topk 8 --experts 256 --ep 2", "multiple of 64"},
      {base + " --bogus 1", "unknown option --bogus"},
      {base + " --slot-factor abc", "expects a number"},
      {"plan --hidden 7168", "missing required option --tokens"},
      {base + " --format fp6", "unsupported DistMoE block-scaled format"},
      {"frobnicate", "unknown command"},
      // Checked before looking for GPUs, so they fail the same way on any machine.
      {"bench --shape qwen3_30b --mode fast", "--mode must be train or infer"},
      {"bench --shape qwen3_30b --wgrad sometimes", "--wgrad must be accumulate or write"},
      {"bench --shape qwen3_30b --sustain-ms -5", "--sustain-ms must be >= 0"},
      {"bench --shape qwen3_30b --preheat warm", "--preheat must be self or gemm"},
      {"bench --shape qwen3_30b --format fp4", "--format must be bf16, mxfp8, fp8_blockwise or nvfp4"},
      {"bench --shape qwen3_30b --format nvfp4", "--format nvfp4 needs --mode infer"},
      {"bench --shape qwen3_30b --experts 64", "--experts changes the shape: add --no-baseline"},
      {"bench --shape dsv3_prefill --experts 4 --no-baseline", "--experts must be >= the shape's top_k 8"},
      {"bench --shape dsv3_decode --tokens 512", "--tokens changes the shape: add --no-baseline"},
      {"bench --shape dsv3_decode --tokens 0 --no-baseline", "--tokens must be >= 1, got 0"},
  };
  for (const auto& c : cases) {
    const Result r = run_cli(c.args);
    EXPECT_NE(r.exit_code, 0) << c.args;
    EXPECT_EQ(count_lines(r.out), 1) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find("dist-moe: error: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(c.fragment), std::string::npos) << r.out;
  }
}

TEST(Cli, PlanOptionsReachTheConfig) {
  const Result r = run_cli("plan --tokens 4 --hidden 128 --intermediate 128 --topk 2 --experts 4 --ep 2 --layers 2 "
                           "--slot-factor 1.0 --vmm-factor 2.0");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("virtual address range: 0.000 GiB (40,960 bytes)"), std::string::npos) << r.out;
  const Result inf = run_cli("plan --shape dsv3_decode --ep 2 --inference --format mxfp8");
  EXPECT_EQ(inf.exit_code, 0) << inf.out;
  EXPECT_NE(inf.out.find("activation slots: 0 slot(s)"), std::string::npos) << inf.out;
  EXPECT_NE(inf.out.find("format=mxfp8_e4m3"), std::string::npos) << inf.out;
}

}  // namespace

namespace {
TEST(Cli, DemoRunsPlanOracleAndSaysWhatNeedsAGpu) {
  const Result r = run_cli("demo");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Distributed MoE memory plan:"), std::string::npos);
  EXPECT_NE(r.out.find("CPU oracle"), std::string::npos);
  EXPECT_NE(r.out.find("out_TD (BF16 pipeline vs exact)"), std::string::npos);
  EXPECT_NE(r.out.find("GPU execution"), std::string::npos);
}
}  // namespace

namespace {
// Every command's -h/--help prints its usage on stdout and exits 0, wherever the flag stands.
TEST(Cli, HelpPrintsEachCommandsUsage) {
  for (const char* cmd : {"plan", "demo", "bench", "info"}) {
    for (const char* flag : {"--help", "-h"}) {
      const Result r = run_cli(std::string(cmd) + " " + flag, "2>/dev/null");
      EXPECT_EQ(r.exit_code, 0) << cmd << " " << flag << "\n" << r.out;
      EXPECT_EQ(r.out.rfind(std::string("usage: dist-moe ") + cmd, 0), 0u) << cmd << " " << flag << "\n" << r.out;
    }
    const Result about = run_cli(std::string("help ") + cmd, "2>/dev/null");
    EXPECT_EQ(about.exit_code, 0) << about.out;
    EXPECT_EQ(about.out.rfind(std::string("usage: dist-moe ") + cmd, 0), 0u) << about.out;
  }
  const Result late = run_cli("plan --shape dsv3_prefill --help", "2>/dev/null");
  EXPECT_EQ(late.exit_code, 0) << late.out;
  EXPECT_NE(late.out.find("--slot-factor"), std::string::npos) << late.out;
  const Result bench = run_cli("bench --help", "2>/dev/null");
  EXPECT_NE(bench.out.find("--sustain-ms"), std::string::npos) << bench.out;
  EXPECT_NE(bench.out.find("--preheat"), std::string::npos) << bench.out;
  for (const char* top : {"--help", "-h", "help"}) {
    const Result r = run_cli(top, "2>/dev/null");
    EXPECT_EQ(r.exit_code, 0) << top;
    for (const char* cmd : {"plan", "demo", "bench", "info", "version"})
      EXPECT_NE(r.out.find(std::string("  ") + cmd + " "), std::string::npos) << top << ": " << cmd << "\n" << r.out;
  }
}

// Unknown options and malformed values: one line on stderr, exit 2, on every command.
TEST(Cli, BadOptionsAndValuesExitTwoWithOneLine) {
  struct Case {
    const char* args;
    const char* fragment;
  } cases[] = {
      {"plan --shape dsv3_prefill --bogus", "unknown option --bogus"},
      {"plan --shape dsv3_prefill -x", "unexpected argument '-x'"},
      {"plan --shape dsv3_prefill --ep two", "option --ep expects an integer, got 'two'"},
      {"demo --bogus", "unknown option --bogus"},
      {"info --bogus", "unknown option --bogus"},
      {"info extra", "unexpected argument 'extra'"},
      {"bench --bogus 1", "unknown option --bogus"},
      {"bench --iters many", "option --iters expects an integer, got 'many'"},
      {"bench --iters 0", "--iters must be >= 1"},
      {"bench --slot-factor x", "option --slot-factor expects a number, got 'x'"},
      {"bench --shape nosuch", "nosuch"},
      {"help frobnicate", "unknown command 'frobnicate'"},
  };
  for (const auto& c : cases) {
    const Result err = run_cli(c.args, "2>&1 >/dev/null");  // stderr only
    EXPECT_EQ(err.exit_code, 2) << c.args << "\n" << err.out;
    EXPECT_EQ(count_lines(err.out), 1) << c.args << "\n" << err.out;
    EXPECT_EQ(err.out.rfind("dist-moe: error: ", 0), 0u) << c.args << "\n" << err.out;
    EXPECT_NE(err.out.find(c.fragment), std::string::npos) << c.args << "\n" << err.out;
    const Result out = run_cli(c.args, "2>/dev/null");  // nothing on stdout
    EXPECT_EQ(out.out, "") << c.args;
  }
  const Result none = run_cli("");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.out.find("usage: dist-moe <command>"), std::string::npos) << none.out;
}

// `dist-moe info` names the NCCL of the build and the one loaded, and needs no GPU to do so.
TEST(Cli, InfoNamesTheNccl) {
  const Result r = run_cli("info");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("\nNCCL: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at + 1, r.out.find('\n', at + 1) - at - 1);
  if (line.find("host-only") == std::string::npos) {
    // A CUDA build: the loader found the library the build chose (RPATH), so it fits.
    EXPECT_NE(line.find("built with "), std::string::npos) << line;
    EXPECT_NE(line.find(", loaded "), std::string::npos) << line;
    EXPECT_NE(line.find("libnccl.so"), std::string::npos) << line;
    EXPECT_NE(line.find(": ok (needs 2.28.0+)"), std::string::npos) << line;
  }
}
}  // namespace
