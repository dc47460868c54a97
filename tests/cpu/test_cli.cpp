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

Result run_cli(const std::string& args) {
  const std::string cmd = std::string(DIST_MOE_CLI_PATH) + " " + args + " 2>&1";
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
