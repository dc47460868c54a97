// The rules the NCCL loaded at run time must meet (dist_moe::nccl_version_problem): at least the
// minimum our device-API use needs, at least the headers' version, and the headers' release.
#include <gtest/gtest.h>

#include "dist_moe/nccl_version.h"

namespace {

using dist_moe::nccl_version_problem;
using dist_moe::nccl_version_string;

TEST(NcclVersion, CodesPrintAsReleases) {
  EXPECT_EQ(nccl_version_string(22809), "2.28.9");
  EXPECT_EQ(nccl_version_string(22800), "2.28.0");
  EXPECT_EQ(nccl_version_string(21903), "2.19.3");
  EXPECT_EQ(nccl_version_string(2708), "2.7.8");  // NCCL <= 2.8 counted 1000 per major
  EXPECT_EQ(nccl_version_string(0), "of unknown version");
}

TEST(NcclVersion, TheBuiltOneAndNewerPatchesFit) {
  EXPECT_EQ(nccl_version_problem(22809, 22809, 22800), "");
  EXPECT_EQ(nccl_version_problem(22800, 22809, 22800), "");
}

TEST(NcclVersion, OlderOrOtherReleasesDoNot) {
  const std::string old = nccl_version_problem(22809, 22105, 22800);
  EXPECT_NE(old.find("older than 2.28.0"), std::string::npos) << old;
  const std::string older_patch = nccl_version_problem(22809, 22803, 22800);
  EXPECT_NE(older_patch.find("older than the headers we were compiled against (2.28.9)"), std::string::npos)
      << older_patch;
  const std::string next = nccl_version_problem(22809, 22903, 22800);
  EXPECT_NE(next.find("a different release"), std::string::npos) << next;
  EXPECT_NE(nccl_version_problem(22809, 0, 22800).find("ncclGetVersion failed"), std::string::npos);
}

}  // namespace
