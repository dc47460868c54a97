// One namespace scheme (docs/architecture.md, "Namespaces"), checked on every namespace the library,
// the tools and the bindings open: a file's namespace follows its folder, so a namespace that runs
// against the rule (dist_moe::kernels opened in src/comm, a bare detail, a component's private
// sub-namespace) fails here and the scheme cannot erode.
//
//   include/dist_moe/*.h                  dist_moe (the public API; comm.h: dist_moe::comm)
//   include/dist_moe/device/<sub>/        dist_moe::<sub>
//   src/<component>/                      dist_moe::<component>
//   tools/                                dist_moe::cli
//   python/dist_moe/csrc/                 dist_moe::python
//
// Inside those, only `detail` and anonymous namespaces. The src/ files that define what the public
// headers declare (kPublicApiDefinitions) may also open dist_moe.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// src/ files that define functions and classes the public headers (include/dist_moe/*.h) declare;
// each may open dist_moe besides its component's namespace.
const std::set<std::string> kPublicApiDefinitions = {
    "src/core/config.cpp",       "src/core/dtype.cpp",        "src/core/error.cpp",
    "src/core/gemm_config.cpp",  "src/core/memory_plan.cpp",  "src/core/nccl_version.cpp",
    "src/core/workloads.cpp",    "src/platform/device_info.cpp", "src/platform/driver_api.cpp",
    "src/comm/nccl_version.cpp", "src/gemm/grouped_gemm.cu",  "src/runtime/context.cpp",
    "src/runtime/context_impl.h", "src/runtime/bf16_pipeline.cpp", "src/runtime/layer_gemms.cpp",
    "src/core/prepared_weight.cpp", "src/quant/prepare_weight.cpp", "src/quant/quantize_rows.cpp",
};

// The namespaces a file (path relative to the repository root) may open, each of them followed by
// any number of `detail` / anonymous levels; empty: the file is not checked.
std::vector<std::string> homes_of(const std::string& path) {
  auto first_folder_after = [&](const std::string& prefix) {
    const size_t end = path.find('/', prefix.size());
    return end == std::string::npos ? std::string() : path.substr(prefix.size(), end - prefix.size());
  };
  if (path.rfind("include/dist_moe/device/", 0) == 0) {
    const std::string sub = first_folder_after("include/dist_moe/device/");
    return sub.empty() ? std::vector<std::string>{} : std::vector<std::string>{"dist_moe::" + sub};
  }
  if (path == "include/dist_moe/comm.h") return {"dist_moe::comm"};
  if (path.rfind("include/dist_moe/", 0) == 0) return {"dist_moe"};
  if (path.rfind("src/", 0) == 0) {
    const std::string component = first_folder_after("src/");
    if (component.empty()) return {};
    std::vector<std::string> homes = {"dist_moe::" + component};
    if (kPublicApiDefinitions.count(path)) homes.push_back("dist_moe");
    return homes;
  }
  if (path.rfind("tools/", 0) == 0) return {"dist_moe::cli"};
  if (path.rfind("python/dist_moe/csrc/", 0) == 0) return {"dist_moe::python"};
  return {};
}

bool allowed(const std::vector<std::string>& homes, const std::string& ns) {
  for (const std::string& home : homes) {
    if (ns.rfind(home, 0) != 0) continue;
    std::string rest = ns.substr(home.size());  // "", or "::detail::(anonymous)..."
    bool ok = true;
    while (!rest.empty() && ok) {
      if (rest.rfind("::detail", 0) == 0) {
        rest = rest.substr(8);
      } else if (rest.rfind("::(anonymous)", 0) == 0) {
        rest = rest.substr(13);
      } else {
        ok = false;
      }
    }
    if (ok) return true;
  }
  return false;
}

// The text with comments, string/character literals and preprocessor lines blanked (newlines kept,
// so offsets still give line numbers).
std::string code_only(const std::string& s) {
  std::string out = s;
  size_t i = 0;
  bool line_start = true;
  auto blank = [&](size_t from, size_t to) {
    for (size_t k = from; k < to && k < out.size(); ++k)
      if (out[k] != '\n') out[k] = ' ';
  };
  while (i < s.size()) {
    const char c = s[i];
    if (line_start && (c == ' ' || c == '\t')) {
      ++i;
      continue;
    }
    if (line_start && c == '#') {  // a directive, with its continuation lines
      size_t j = i;
      while (j < s.size() && !(s[j] == '\n' && s[j - 1] != '\\')) ++j;
      blank(i, j);
      i = j;
      continue;
    }
    line_start = false;
    if (c == '\n') {
      line_start = true;
      ++i;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '/') {
      size_t j = s.find('\n', i);
      if (j == std::string::npos) j = s.size();
      blank(i, j);
      i = j;
    } else if (c == '/' && i + 1 < s.size() && s[i + 1] == '*') {
      size_t j = s.find("*/", i + 2);
      j = j == std::string::npos ? s.size() : j + 2;
      blank(i, j);
      i = j;
    } else if (c == 'R' && i + 1 < s.size() && s[i + 1] == '"' && (i == 0 || !std::isalnum(static_cast<unsigned char>(s[i - 1])))) {
      const size_t open = s.find('(', i + 2);
      const std::string close = ")" + s.substr(i + 2, open - i - 2) + "\"";
      size_t j = s.find(close, open);
      j = j == std::string::npos ? s.size() : j + close.size();
      blank(i, j);
      i = j;
    } else if (c == '"' || (c == '\'' && !(i > 0 && std::isxdigit(static_cast<unsigned char>(s[i - 1]))))) {
      size_t j = i + 1;  // (a ' after a digit is a digit separator)
      while (j < s.size() && s[j] != c && s[j] != '\n') j += s[j] == '\\' ? 2 : 1;
      blank(i, j + 1);
      i = j + 1;
    } else {
      ++i;
    }
  }
  return out;
}

struct Opening {
  int line;
  std::string ns;  // fully qualified, anonymous levels as "(anonymous)"
};

// Every namespace a file opens, with its enclosing namespaces.
std::vector<Opening> namespaces_opened(const std::string& text) {
  const std::string code = code_only(text);
  std::vector<Opening> found;
  std::vector<std::string> stack;  // one entry per open brace: a namespace's full name, or "" (any other brace)
  auto is_ident = [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_'; };
  auto enclosing = [&]() {
    for (auto it = stack.rbegin(); it != stack.rend(); ++it)
      if (!it->empty()) return *it;
    return std::string();
  };
  int line = 1;
  for (size_t i = 0; i < code.size(); ++i) {
    const char c = code[i];
    if (c == '\n') {
      ++line;
    } else if (c == '{') {
      stack.push_back("");
    } else if (c == '}') {
      if (!stack.empty()) stack.pop_back();
    } else if (code.compare(i, 9, "namespace") == 0 && (i == 0 || !is_ident(code[i - 1])) &&
               (i + 9 >= code.size() || !is_ident(code[i + 9]))) {
      size_t j = i + 9;
      std::string name;
      while (j < code.size() && (std::isspace(static_cast<unsigned char>(code[j])) || is_ident(code[j]) || code[j] == ':')) {
        if (!std::isspace(static_cast<unsigned char>(code[j]))) name += code[j];
        ++j;
      }
      if (j >= code.size() || code[j] != '{') continue;  // using namespace / a namespace alias
      if (name.empty()) name = "(anonymous)";
      const std::string outer = enclosing();
      const std::string full = outer.empty() ? name : outer + "::" + name;
      found.push_back({line, full});
      for (size_t k = i; k < j; ++k)
        if (code[k] == '\n') ++line;
      stack.push_back(full);
      i = j;
    }
  }
  return found;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Namespaces, TheParserSeesNesting) {
  const auto opened = namespaces_opened(
      "// namespace not_this {\n#define X namespace macro {\nnamespace dist_moe::gemm {\nconst char* s = \"namespace "
      "str {\";\nnamespace {\nvoid f() { if (1) {} }\n}  // namespace\nnamespace detail { struct A {}; }\n}\n"
      "namespace py = pybind11;\nusing namespace dist_moe;\nnamespace\ndist_moe\n{\n}\n");
  ASSERT_EQ(opened.size(), 4u);
  EXPECT_EQ(opened[0].ns, "dist_moe::gemm");
  EXPECT_EQ(opened[0].line, 3);
  EXPECT_EQ(opened[1].ns, "dist_moe::gemm::(anonymous)");
  EXPECT_EQ(opened[2].ns, "dist_moe::gemm::detail");
  EXPECT_EQ(opened[3].ns, "dist_moe");
  EXPECT_EQ(opened[3].line, 12);
}

TEST(Namespaces, TheRuleByFolder) {
  EXPECT_TRUE(allowed(homes_of("src/comm/dispatch.cu"), "dist_moe::comm::(anonymous)"));
  EXPECT_FALSE(allowed(homes_of("src/comm/dispatch.cu"), "dist_moe::kernels"));
  EXPECT_FALSE(allowed(homes_of("src/comm/dispatch.cu"), "dist_moe::comm::kernels"));
  EXPECT_FALSE(allowed(homes_of("src/comm/dispatch.cu"), "dist_moe"));
  EXPECT_TRUE(allowed(homes_of("src/comm/nccl_version.cpp"), "dist_moe"));
  EXPECT_FALSE(allowed(homes_of("src/gemm/grouped_gemm_launch.h"), "dist_moe::detail"));
  EXPECT_TRUE(allowed(homes_of("src/gemm/grouped_gemm.cu"), "dist_moe::(anonymous)"));
  EXPECT_TRUE(allowed(homes_of("include/dist_moe/device/gemm/kernel.cuh"), "dist_moe::gemm::detail"));
  EXPECT_TRUE(allowed(homes_of("include/dist_moe/error.h"), "dist_moe::detail"));
  EXPECT_FALSE(allowed(homes_of("include/dist_moe/error.h"), "detail"));
  EXPECT_FALSE(allowed(homes_of("tools/main.cpp"), "(anonymous)"));
  EXPECT_TRUE(allowed(homes_of("tools/launcher/dmoe_launch.cpp"), "dist_moe::cli::(anonymous)"));
  EXPECT_FALSE(allowed(homes_of("src/core/env_knobs.h"), "dist_moe::core::env"));
}

TEST(Namespaces, EveryNamespaceFollowsItsFolder) {
  const fs::path root = DMOE_SOURCE_DIR;
  int files = 0, opened = 0;
  std::vector<std::string> wrong;
  for (const char* dir : {"include", "src", "tools", "python/dist_moe/csrc"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".cu" && ext != ".h" && ext != ".cuh")) continue;
      const std::string rel = fs::relative(e.path(), root).generic_string();
      const std::vector<std::string> homes = homes_of(rel);
      if (homes.empty()) {
        wrong.push_back(rel + ": no namespace rule for this folder (tests/cpu/test_namespaces.cpp)");
        continue;
      }
      ++files;
      for (const Opening& o : namespaces_opened(read_file(e.path()))) {
        ++opened;
        if (!allowed(homes, o.ns))
          wrong.push_back(rel + ":" + std::to_string(o.line) + ": opens " + o.ns + " (this folder: " + homes[0] +
                          (homes.size() > 1 ? " or " + homes[1] : std::string()) + ")");
      }
    }
  }
  EXPECT_GT(files, 150);
  EXPECT_GT(opened, 200);
  std::string list;
  for (const std::string& w : wrong) list += "\n  " + w;
  EXPECT_TRUE(wrong.empty()) << "namespaces against the scheme (docs/architecture.md, \"Namespaces\"):" << list;
}

// Every file named as a public-API definition exists and opens dist_moe (a stale entry would let a
// future file of that name open dist_moe unnoticed).
TEST(Namespaces, PublicApiDefinitionsAreCurrent) {
  const fs::path root = DMOE_SOURCE_DIR;
  for (const std::string& rel : kPublicApiDefinitions) {
    ASSERT_TRUE(fs::exists(root / rel)) << rel;
    bool opens_api = false;
    for (const Opening& o : namespaces_opened(read_file(root / rel))) opens_api = opens_api || o.ns == "dist_moe";
    EXPECT_TRUE(opens_api) << rel << " no longer opens dist_moe: drop it from kPublicApiDefinitions";
  }
}

}  // namespace
