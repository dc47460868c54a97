// DMOE_DEBUG_STAGE_DELAY's parser (src/core/debug_env.h): the GPU ordering sweep relies on it
// (the delay stage of scripts/gpu_check.sh), so a typo must fail loudly instead of running with no delay.
#include <gtest/gtest.h>

#include "core/debug_env.h"
#include "dist_moe/error.h"

namespace {

using dist_moe::core::parse_stage_delays;

TEST(DebugEnv, StageDelaysPickThisRanksEntriesInOrder) {
  const char* text = "1:w13:2000,0:plan:3.5,1:*:0.25";
  const auto r0 = parse_stage_delays(text, 0);
  ASSERT_EQ(r0.size(), 1u);
  EXPECT_EQ(r0[0].stage, "plan");
  EXPECT_EQ(r0[0].ns, 3500);
  const auto r1 = parse_stage_delays(text, 1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0].stage, "w13");
  EXPECT_EQ(r1[0].ns, 2000000);
  EXPECT_EQ(r1[1].stage, "*");
  EXPECT_EQ(r1[1].ns, 250);
  EXPECT_TRUE(parse_stage_delays(text, 2).empty());
}

TEST(DebugEnv, StageDelaysUnsetOrEmptyMeanNone) {
  EXPECT_TRUE(parse_stage_delays(nullptr, 0).empty());
  EXPECT_TRUE(parse_stage_delays("", 0).empty());
}

TEST(DebugEnv, StageDelaysStageNamesMayHoldPlusSigns) {
  const auto d = parse_stage_delays("0:publish+route:10", 0);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].stage, "publish+route");
  EXPECT_EQ(d[0].ns, 10000);
}

TEST(DebugEnv, StageDelaysMalformedEntriesThrow) {
  for (const char* text : {"0:w13", "w13:10", "0::10", "x:w13:10", "0:w13:ten", "0:w13:-1", "-1:w13:5",
                           "0:w13:10,", ",0:w13:10", "0:w13:"})
    EXPECT_THROW(parse_stage_delays(text, 0), dist_moe::Error) << text;
}

}  // namespace
