// The environment-knob registry (src/core/env_knobs.h): one prefix, every read goes through it, and
// docs/architecture.md lists exactly its knobs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "core/env_knobs.h"
#include "dist_moe/error.h"

namespace dist_moe {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::set<std::string> registered() {
  std::set<std::string> names;
  for (const core::EnvKnob& k : core::env_knobs()) names.insert(k.name);
  return names;
}

TEST(EnvKnobs, OnePrefixNoDuplicates) {
  for (const core::EnvKnob& k : core::env_knobs()) {
    EXPECT_EQ(std::string(k.name).rfind("DMOE_", 0), 0u) << k.name;
    EXPECT_NE(std::string(k.effect), "") << k.name;
  }
  EXPECT_EQ(registered().size(), core::env_knobs().size());
}

TEST(EnvKnobs, ReadsFollowTheirRules) {
  ::setenv("DMOE_DISABLE_PDL", "1", 1);
  EXPECT_TRUE(core::env_flag("DMOE_DISABLE_PDL"));
  ::setenv("DMOE_DISABLE_PDL", "0", 1);
  EXPECT_FALSE(core::env_flag("DMOE_DISABLE_PDL"));
  ::setenv("DMOE_DISABLE_PDL", "", 1);
  EXPECT_FALSE(core::env_flag("DMOE_DISABLE_PDL"));
  EXPECT_EQ(core::env_get("DMOE_DISABLE_PDL"), nullptr);
  ::unsetenv("DMOE_DISABLE_PDL");
  ::setenv("DMOE_COMBINE_K_GROUP", "3", 1);
  EXPECT_EQ(core::env_int64_or("DMOE_COMBINE_K_GROUP", 7), 3);
  ::unsetenv("DMOE_COMBINE_K_GROUP");
  EXPECT_EQ(core::env_int64_or("DMOE_COMBINE_K_GROUP", 7), 7);
  EXPECT_THROW(core::env_get("DMOE_NOT_A_KNOB"), Error);
}

// No source file reads the environment behind the registry's back, and every knob a source file
// names through it is registered (a typo would throw only when that code path runs).
TEST(EnvKnobs, EveryReadGoesThroughTheRegistry) {
  const fs::path root = DMOE_SOURCE_DIR;
  const std::regex getenv_call(R"(\bgetenv\s*\()");
  const std::regex knob_use(R"re(core::env_(?:get|flag|int64_or)\("([A-Z0-9_]+)")re");
  const std::set<std::string> names = registered();
  int files = 0;
  for (const char* dir : {"src", "tools", "bench", "examples", "include", "python/dist_moe/csrc"}) {
    for (const auto& e : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".cpp" && ext != ".cu" && ext != ".h" && ext != ".cuh")) continue;
      ++files;
      const std::string text = read_file(e.path());
      // The registry itself, and the rank launcher's protocol (its environment is how dmoe_launch
      // hands ranks their identity: not a knob).
      const std::string name = e.path().filename().string();
      if (name != "env_knobs.cpp" && name != "dist_env.h" && name != "dmoe_launch.cpp") {
        EXPECT_FALSE(std::regex_search(text, getenv_call)) << e.path() << " reads the environment: use core/env_knobs.h";
      }
      for (std::sregex_iterator m(text.begin(), text.end(), knob_use), end; m != end; ++m)
        EXPECT_TRUE(names.count((*m)[1].str())) << e.path() << " reads unregistered knob " << (*m)[1].str();
    }
  }
  EXPECT_GT(files, 50);
}

// docs/architecture.md's "Environment knobs" table names exactly the registered knobs.
TEST(EnvKnobs, DocumentedInOneTable) {
  const std::string doc = read_file(fs::path(DMOE_SOURCE_DIR) / "docs/architecture.md");
  const size_t at = doc.find("## Environment knobs");
  ASSERT_NE(at, std::string::npos) << "docs/architecture.md has no '## Environment knobs' section";
  const size_t end = doc.find("\n## ", at + 1);
  const std::string section = doc.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::set<std::string> listed;
  const std::regex row(R"(\n\| `(DMOE_[A-Z0-9_]+)` \|)");
  for (std::sregex_iterator m(section.begin(), section.end(), row), e; m != e; ++m) listed.insert((*m)[1].str());
  EXPECT_EQ(listed, registered());
}

}  // namespace
}  // namespace dist_moe
