// The component graph (docs/architecture.md, CMakeLists.txt), checked on every #include of the
// library, the tools, the benchmarks, the examples and the bindings: an include that runs against
// the graph (a kernel reaching into the runtime, a tool reading a runtime internal, a benchmark
// including tests/) fails here, so the rule cannot erode.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// Component of a source file, by its path relative to the repository root ("" = not checked).
std::string component_of(const std::string& path) {
  static const std::vector<std::pair<std::string, std::string>> prefixes = {
      {"include/dist_moe/device/", "device"}, {"include/dist_moe/", "api"}, {"src/core/", "core"},
      {"src/reference/", "reference"},       {"src/platform/", "platform"}, {"src/gemm/", "gemm"},
      {"src/comm/", "comm"},                 {"src/kernels/", "kernels"},  {"src/runtime/", "runtime"},
      {"src/quant/", "quant"},
      {"src/testing/", "testing"},           {"tools/", "tools"},          {"bench/", "bench"},
      {"examples/", "examples"},             {"python/dist_moe/csrc/", "bindings"},
  };
  for (const auto& [prefix, name] : prefixes)
    if (path.rfind(prefix, 0) == 0) return name;
  return "";
}

// Component an #include "..." names ("" = a file of the includer's own folder).
std::string component_included(const std::string& inc) {
  if (inc.rfind("dist_moe/device/", 0) == 0) return "device";
  if (inc.rfind("dist_moe/", 0) == 0) return "api";
  const size_t slash = inc.find('/');
  if (slash == std::string::npos) return "";
  return inc.substr(0, slash);  // core/, reference/, platform/, gemm/, comm/, kernels/, runtime/, testing/, ...
}

// Who may include whom (each component may also include itself).
const std::map<std::string, std::set<std::string>>& allowed() {
  static const std::map<std::string, std::set<std::string>> graph = {
      {"api", {"device"}},
      {"device", {"api"}},
      {"core", {"api"}},
      {"reference", {"core", "api", "device"}},
      {"platform", {"core", "api"}},
      {"gemm", {"device", "platform", "core", "api"}},
      {"comm", {"device", "platform", "core", "api"}},
      {"kernels", {"device", "core", "api"}},
      {"quant", {"device", "core", "api"}},
      {"runtime", {"gemm", "comm", "kernels", "quant", "platform", "device", "core", "api"}},
      {"testing", {"reference", "core", "api", "device"}},
      {"tools", {"api", "reference", "testing"}},
      {"examples", {"api", "reference", "testing"}},
      // Component benchmarks time component internals next to their peers; never tests/ or runtime.
      {"bench", {"api", "device", "kernels", "comm", "gemm", "quant", "testing", "reference", "core"}},
      {"bindings", {"api", "platform"}},
  };
  return graph;
}

TEST(Layering, EveryIncludeFollowsTheComponentGraph) {
  const fs::path root = DMOE_SOURCE_DIR;
  const std::regex include_line(R"re(^\s*#\s*include\s*"([^"]+)")re");
  int files = 0, includes = 0;
  std::vector<std::string> wrong;
  for (const char* dir : {"include", "src", "tools", "bench", "examples", "python/dist_moe/csrc"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".cu" && ext != ".h" && ext != ".cuh")) continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      const std::string from = component_of(rel);
      if (from.empty()) continue;
      ++files;
      std::ifstream in(e.path());
      std::string line;
      int n = 0;
      while (std::getline(in, line)) {
        ++n;
        std::smatch m;
        if (!std::regex_search(line, m, include_line)) continue;
        ++includes;
        const std::string inc = m[1].str();
        const std::string to = component_included(inc);
        if (to.empty() || to == from) continue;
        const auto& ok = allowed().at(from);
        if (!ok.count(to)) wrong.push_back(rel + ":" + std::to_string(n) + ": " + from + " includes " + inc);
      }
    }
  }
  EXPECT_GT(files, 100);
  EXPECT_GT(includes, 300);
  std::string list;
  for (const std::string& w : wrong) list += "\n  " + w;
  EXPECT_TRUE(wrong.empty()) << "includes against the component graph (docs/architecture.md):" << list;
}

}  // namespace
