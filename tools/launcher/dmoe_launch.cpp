// dmoe_launch: runs one process per GPU for multi-GPU tests and benchmarks, collects every rank's
// exit status and output, kills hung ranks, and optionally checks expectations (for tests whose
// ranks must fail with a given diagnostic).
//
//   dmoe_launch [-n N] [--timeout S] [--grace S] [--log-dir DIR] [--quiet]
//               [--expect-fail R] [--expect-ok R] [--expect-output R:TEXT] [--forbid-output TEXT]
//               -- program [args...]
// (every --option VALUE can also be written --option=VALUE; R:TEXT takes '*' for any rank)
//
// Each child gets DMOE_RANK, DMOE_WORLD_SIZE, DMOE_LOCAL_RANK, DMOE_LOCAL_WORLD_SIZE and
// DMOE_BOOTSTRAP_DIR (a fresh directory for the NCCL unique-id exchange, see dist_env.h), runs in
// its own process group, and has stdout and stderr merged; lines are echoed as "[rank r] ...".
// NCCL_NVLS_ENABLE=0 is set unless the environment already sets it (NVLink multicast stays off).
//
// A rank still running `--timeout` seconds after the start, or `--grace` seconds after another rank
// failed, is killed (SIGKILL to its process group) and reported as TIMEOUT.
// Exit status: without expectations, 0 iff every rank exited 0; with expectations, 0 iff all hold
// (a rank killed for a timeout never satisfies --expect-fail: the failure must be its own); 77 when
// skipped for want of GPUs.
// Fewer visible GPUs than ranks (NCCL refuses two ranks on one GPU): prints the reason and exits
// kSkipExitCode (77) without starting any rank; CTest's SKIP_RETURN_CODE reports the test as skipped.
// The GPUs are counted in a forked child that dlopens the driver, so this process stays CUDA-free.
// This program links no CUDA: no CUDA context exists before the children start.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace dist_moe::cli {
namespace {

constexpr int kSkipExitCode = 77;

// GPUs this process's children would see (CUDA_VISIBLE_DEVICES applies), and why none when zero.
// cuInit runs in a forked child: a CUDA context in this process would be inherited by the ranks.
int count_visible_gpus(std::string* why_none) {
  const pid_t pid = fork();
  if (pid < 0) {
    *why_none = "fork failed";
    return 0;
  }
  if (pid == 0) {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (cuda == nullptr) _exit(200);
    using InitFn = int (*)(unsigned);
    using CountFn = int (*)(int*);
    auto init = reinterpret_cast<InitFn>(dlsym(cuda, "cuInit"));
    auto count = reinterpret_cast<CountFn>(dlsym(cuda, "cuDeviceGetCount"));
    int n = 0;
    if (init == nullptr || count == nullptr || init(0) != 0 || count(&n) != 0) _exit(201);
    _exit(n < 199 ? n : 199);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) {
    *why_none = "the GPU probe crashed";
    return 0;
  }
  const int code = WEXITSTATUS(status);
  if (code == 200) *why_none = "no CUDA driver (libcuda.so.1 not found)";
  if (code == 201) *why_none = "the CUDA driver found no usable device";
  return code >= 200 ? 0 : code;
}

struct Expectation {
  enum Kind { kFail, kOk, kOutput, kForbid } kind;
  int rank;  // -1: any rank (kOutput) / every rank (kForbid)
  std::string text;
};

struct Rank {
  pid_t pid = -1;
  int fd = -1;
  bool running = false;
  bool timed_out = false;
  int status = 0;
  double seconds = 0.0;
  std::string output;
  std::string partial;  // unfinished line
  std::string last_line;
};

[[noreturn]] void usage(const char* msg) {
  std::fprintf(stderr,
               "dmoe_launch: %s\nusage: dmoe_launch [-n N] [--timeout S] [--grace S] [--log-dir DIR] [--quiet]\n"
               "                   [--expect-fail R] [--expect-ok R] [--expect-output R:TEXT] [--forbid-output TEXT]\n"
               "                   -- program [args...]\n",
               msg);
  std::exit(2);
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void emit_line(int r, const std::string& line, bool quiet) {
  if (!quiet) std::printf("[rank %d] %s\n", r, line.c_str());
}

void drain(Rank& rk, int r, bool quiet, bool final_flush) {
  char buf[65536];
  while (true) {
    const ssize_t n = read(rk.fd, buf, sizeof(buf));
    if (n <= 0) break;
    rk.output.append(buf, static_cast<size_t>(n));
    rk.partial.append(buf, static_cast<size_t>(n));
    size_t pos;
    while ((pos = rk.partial.find('\n')) != std::string::npos) {
      std::string line = rk.partial.substr(0, pos);
      rk.partial.erase(0, pos + 1);
      if (!line.empty()) rk.last_line = line;
      emit_line(r, line, quiet);
    }
  }
  if (final_flush && !rk.partial.empty()) {
    rk.last_line = rk.partial;
    emit_line(r, rk.partial, quiet);
    rk.partial.clear();
  }
  std::fflush(stdout);
}

std::string describe_status(const Rank& rk) {
  if (rk.timed_out) return "TIMEOUT (killed)";
  if (WIFEXITED(rk.status)) return "exit " + std::to_string(WEXITSTATUS(rk.status));
  if (WIFSIGNALED(rk.status)) return "signal " + std::to_string(WTERMSIG(rk.status));
  return "unknown";
}

bool rank_failed(const Rank& rk) { return rk.timed_out || !WIFEXITED(rk.status) || WEXITSTATUS(rk.status) != 0; }

void remove_dir(const std::string& dir) {
  // Only the unique-id files of dist_env.h live there: remove them, then the directory.
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* ent = readdir(d)) {
      const std::string name = ent->d_name;
      if (name != "." && name != "..") unlink((dir + "/" + name).c_str());
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace dist_moe::cli

using namespace dist_moe::cli;

int main(int argc, char** argv) {
  int nproc = 2;
  if (const char* e = std::getenv("DMOE_NPROC")) nproc = std::atoi(e);
  double timeout_s = 600.0, grace_s = 30.0;
  bool quiet = false;
  std::string log_dir;
  std::vector<Expectation> expect;
  int i = 1;
  for (; i < argc; ++i) {
    std::string a = argv[i];
    std::string inline_value;  // --option=value form
    bool has_inline = false;
    const size_t eq = a.find('=');
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      inline_value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    auto next = [&]() -> std::string {
      if (has_inline) return inline_value;
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "-n" || a == "--nproc") {
      nproc = std::atoi(next().c_str());
    } else if (a == "--timeout") {
      timeout_s = std::atof(next().c_str());
    } else if (a == "--grace") {
      grace_s = std::atof(next().c_str());
    } else if (a == "--log-dir") {
      log_dir = next();
    } else if (a == "--quiet") {
      quiet = true;
    } else if (a == "--expect-fail") {
      expect.push_back({Expectation::kFail, std::atoi(next().c_str()), ""});
    } else if (a == "--expect-ok") {
      expect.push_back({Expectation::kOk, std::atoi(next().c_str()), ""});
    } else if (a == "--expect-output") {
      const std::string v = next();
      const size_t c = v.find(':');
      if (c == std::string::npos) usage("--expect-output takes RANK:TEXT (RANK may be *)");
      const std::string r = v.substr(0, c);
      expect.push_back({Expectation::kOutput, r == "*" ? -1 : std::atoi(r.c_str()), v.substr(c + 1)});
    } else if (a == "--forbid-output") {
      expect.push_back({Expectation::kForbid, -1, next()});
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  if (i >= argc) usage("no program given (put it after --)");
  if (nproc < 1 || nproc > 64) usage("-n must be in [1, 64]");
  {
    std::string why_none;
    const int gpus = count_visible_gpus(&why_none);
    if (gpus < nproc) {
      std::printf("[launcher] SKIP: needs %d GPU%s, found %d%s%s\n", nproc, nproc == 1 ? "" : "s", gpus,
                  why_none.empty() ? "" : ": ", why_none.c_str());
      return kSkipExitCode;
    }
  }
  std::vector<char*> child_argv(argv + i, argv + argc);
  child_argv.push_back(nullptr);

  char dir_template[] = "/tmp/dmoe_launch.XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::perror("dmoe_launch: mkdtemp");
    return 2;
  }
  const std::string boot_dir = dir_template;
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);

  std::vector<Rank> ranks(static_cast<size_t>(nproc));
  const double t0 = now_s();
  for (int r = 0; r < nproc; ++r) {
    int fds[2];
    if (pipe(fds) != 0) {
      std::perror("dmoe_launch: pipe");
      return 2;
    }
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("dmoe_launch: fork");
      return 2;
    }
    if (pid == 0) {
      setpgid(0, 0);
      dup2(fds[1], STDOUT_FILENO);
      dup2(fds[1], STDERR_FILENO);
      close(fds[0]);
      close(fds[1]);
      setenv("DMOE_RANK", std::to_string(r).c_str(), 1);
      setenv("DMOE_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("DMOE_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("DMOE_LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("DMOE_BOOTSTRAP_DIR", boot_dir.c_str(), 1);
      execvp(child_argv[0], child_argv.data());
      std::fprintf(stderr, "dmoe_launch: cannot execute %s: %s\n", child_argv[0], std::strerror(errno));
      _exit(127);
    }
    setpgid(pid, pid);  // also from the parent, so the group exists before any kill
    close(fds[1]);
    fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
    ranks[static_cast<size_t>(r)].pid = pid;
    ranks[static_cast<size_t>(r)].fd = fds[0];
    ranks[static_cast<size_t>(r)].running = true;
  }

  double first_failure = -1.0;
  int running = nproc;
  while (running > 0) {
    std::vector<pollfd> pfds;
    for (auto& rk : ranks)
      if (rk.fd >= 0) pfds.push_back({rk.fd, POLLIN, 0});
    if (!pfds.empty()) poll(pfds.data(), pfds.size(), 100);
    else usleep(100000);
    for (int r = 0; r < nproc; ++r) {
      Rank& rk = ranks[static_cast<size_t>(r)];
      if (rk.fd >= 0) drain(rk, r, quiet, false);
      if (!rk.running) continue;
      int st = 0;
      const pid_t w = waitpid(rk.pid, &st, WNOHANG);
      if (w == rk.pid) {
        rk.running = false;
        rk.status = st;
        rk.seconds = now_s() - t0;
        --running;
        if (rank_failed(rk) && first_failure < 0) first_failure = now_s();
      }
    }
    const double t = now_s();
    const bool global_timeout = t - t0 > timeout_s;
    const bool grace_over = first_failure >= 0 && t - first_failure > grace_s;
    if (global_timeout || grace_over) {
      for (int r = 0; r < nproc; ++r) {
        Rank& rk = ranks[static_cast<size_t>(r)];
        if (!rk.running) continue;
        std::printf("[launcher] killing rank %d (pid %d): %s\n", r, static_cast<int>(rk.pid),
                    global_timeout ? "global timeout" : "another rank failed and the grace period ended");
        kill(-rk.pid, SIGKILL);
        kill(rk.pid, SIGKILL);
        rk.timed_out = true;
      }
      for (int r = 0; r < nproc; ++r) {
        Rank& rk = ranks[static_cast<size_t>(r)];
        if (!rk.running) continue;
        waitpid(rk.pid, &rk.status, 0);
        rk.running = false;
        rk.seconds = now_s() - t0;
        --running;
      }
    }
  }
  for (int r = 0; r < nproc; ++r) {
    Rank& rk = ranks[static_cast<size_t>(r)];
    if (rk.fd >= 0) {
      drain(rk, r, quiet, true);
      close(rk.fd);
      rk.fd = -1;
    }
    if (!log_dir.empty()) {
      mkdir(log_dir.c_str(), 0755);
      const std::string path = log_dir + "/rank" + std::to_string(r) + ".log";
      if (FILE* f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(rk.output.data(), 1, rk.output.size(), f);
        std::fclose(f);
      }
    }
  }
  remove_dir(boot_dir);

  // ---- summary ----
  std::printf("\n[launcher] %-6s %-18s %-9s %s\n", "rank", "status", "seconds", "last line");
  bool all_ok = true;
  for (int r = 0; r < nproc; ++r) {
    const Rank& rk = ranks[static_cast<size_t>(r)];
    std::string last = rk.last_line.size() > 100 ? rk.last_line.substr(0, 100) + "..." : rk.last_line;
    std::printf("[launcher] %-6d %-18s %-9.1f %s\n", r, describe_status(rk).c_str(), rk.seconds, last.c_str());
    if (rank_failed(rk)) all_ok = false;
  }
  if (expect.empty()) {
    std::printf("[launcher] %s: %d rank(s), %s\n", all_ok ? "PASS" : "FAIL", nproc,
                all_ok ? "all exited 0" : "at least one rank failed");
    return all_ok ? 0 : 1;
  }
  bool pass = true;
  for (const Expectation& e : expect) {
    bool ok = false;
    std::string what;
    if ((e.kind == Expectation::kFail || e.kind == Expectation::kOk || e.kind == Expectation::kOutput) &&
        e.rank >= nproc) {
      what = "rank " + std::to_string(e.rank) + " does not exist";
    } else if (e.kind == Expectation::kFail) {
      const Rank& rk = ranks[static_cast<size_t>(e.rank)];
      ok = !rk.timed_out && rank_failed(rk);
      what = "rank " + std::to_string(e.rank) + " fails on its own (" + describe_status(rk) + ")";
    } else if (e.kind == Expectation::kOk) {
      const Rank& rk = ranks[static_cast<size_t>(e.rank)];
      ok = !rank_failed(rk);
      what = "rank " + std::to_string(e.rank) + " exits 0 (" + describe_status(rk) + ")";
    } else if (e.kind == Expectation::kOutput) {
      for (int r = 0; r < nproc; ++r)
        if ((e.rank < 0 || e.rank == r) && ranks[static_cast<size_t>(r)].output.find(e.text) != std::string::npos)
          ok = true;
      what = (e.rank < 0 ? std::string("some rank") : "rank " + std::to_string(e.rank)) + " prints \"" + e.text + "\"";
    } else {
      ok = true;
      for (int r = 0; r < nproc; ++r)
        if (ranks[static_cast<size_t>(r)].output.find(e.text) != std::string::npos) ok = false;
      what = "no rank prints \"" + e.text + "\"";
    }
    std::printf("[launcher] expectation %-4s %s\n", ok ? "ok" : "FAIL", what.c_str());
    pass = pass && ok;
  }
  std::printf("[launcher] %s: expectations %s\n", pass ? "PASS" : "FAIL", pass ? "all hold" : "violated");
  return pass ? 0 : 1;
}
