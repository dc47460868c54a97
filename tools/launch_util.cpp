// Starting multi-GPU jobs from the CLI (see launch_util.h).
#include "launch_util.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include "dist_moe/error.h"

namespace dist_moe::cli {

int count_nvidia_gpus() {  // without initializing CUDA in this process
  int n = 0;
  if (DIR* d = opendir("/proc/driver/nvidia/gpus")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

std::string self_dir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  buf[n] = '\0';
  std::string p(buf);
  return p.substr(0, p.rfind('/'));
}

std::string launcher_path() {
#ifdef DIST_MOE_LAUNCHER_PATH
  if (access(DIST_MOE_LAUNCHER_PATH, X_OK) == 0) return DIST_MOE_LAUNCHER_PATH;
#endif
  const std::string guess = self_dir() + "/dmoe_launch";
  if (access(guess.c_str(), X_OK) == 0) return guess;
  detail::fail(ErrorCode::kRuntime, "dmoe_launch not found next to dist-moe (build the dmoe_launch target: it starts one process per GPU)");
}

// Runs `cmd`, echoing its output lines; lines starting with `tag` (after an optional "[rank 0] ")
// are collected without the tag.
int run_and_collect(const std::string& cmd, const std::string& tag, std::vector<std::string>* tagged, bool echo) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) detail::fail(ErrorCode::kRuntime, "cannot run: ", cmd);
  char line[8192];
  while (std::fgets(line, sizeof(line), p)) {
    std::string s(line);
    std::string body = s;
    if (body.rfind("[rank 0] ", 0) == 0) body = body.substr(9);
    if (body.rfind(tag, 0) == 0) {
      std::string v = body.substr(tag.size());
      while (!v.empty() && (v.back() == '\n' || v.back() == '\r')) v.pop_back();
      tagged->push_back(v);
    } else if (echo) {
      std::fputs(s.c_str(), stdout);
      std::fflush(stdout);
    }
  }
  const int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace dist_moe::cli
