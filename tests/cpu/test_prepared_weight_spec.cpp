// Prepared block-scaled weight layouts (src/core/prepared_weight.cpp): host-only, so the shapes
// and byte counts every caller allocates from are pinned here, in CI (the Python view of the same
// spec: tests/python/test_prepared_weight_spec.py).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "dist_moe/error.h"
#include "dist_moe/prepared_weight.h"

namespace dist_moe {
namespace {

using Shape = std::vector<int64_t>;

void expect_field(const PreparedTensorSpec& t, DType dtype, const Shape& shape, const char* name) {
  SCOPED_TRACE(name);
  EXPECT_TRUE(t.present);
  EXPECT_EQ(t.dtype, dtype);
  EXPECT_EQ(t.shape, shape);
}

// MXFP8 training: fprop_data [E, N, K] and its own dgrad_data [E, K, N] (the same E4M3 codes
// transposed per expert, which the Hopper DGRAD reads: E4M3 wgmma is K-major only; upstream shares
// one qdata), E8M0 scales in both orientations.
TEST(PreparedWeightSpec, Mxfp8TrainingCarriesTheTransposedCopy) {
  const int64_t E = 2, N = 128, K = 256;
  const PreparedWeightSpec s = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, false, E, N, K);
  EXPECT_FALSE(s.inference);
  expect_field(s.fprop_data, DType::kFloat8E4M3, {E, N, K}, "fprop_data");
  expect_field(s.fprop_scale, DType::kFloat8E8M0, {E * N, K / 32}, "fprop_scale");
  expect_field(s.dgrad_data, DType::kFloat8E4M3, {E, K, N}, "dgrad_data");
  expect_field(s.dgrad_scale, DType::kFloat8E8M0, {E * K, N / 32}, "dgrad_scale");
  EXPECT_FALSE(s.global_scale.present);
  EXPECT_FALSE(s.global_scale_inv.present);
  // One byte per weight element for each data copy, 1/32 for each scale layout.
  EXPECT_EQ(s.fprop_data.bytes() + s.dgrad_data.bytes(), 2 * E * N * K);
  EXPECT_EQ(s.fprop_scale.bytes() + s.dgrad_scale.bytes(), 2 * E * N * K / 32);
}

// Inference preparations have no DGRAD fields: one byte per element plus 1/32.
TEST(PreparedWeightSpec, Mxfp8InferenceHasRowsOnly) {
  const int64_t E = 3, N = 96, K = 64;
  const PreparedWeightSpec s = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, true, E, N, K);
  EXPECT_TRUE(s.inference);
  expect_field(s.fprop_data, DType::kFloat8E4M3, {E, N, K}, "fprop_data");
  expect_field(s.fprop_scale, DType::kFloat8E8M0, {E * N, K / 32}, "fprop_scale");
  EXPECT_FALSE(s.dgrad_data.present);
  EXPECT_FALSE(s.dgrad_scale.present);
  EXPECT_EQ(s.dgrad_data.bytes(), 0);
}

TEST(PreparedWeightSpec, Fp8BlockwiseTrainingCarriesTheTransposedCopy) {
  const PreparedWeightSpec s = prepared_weight_spec(BlockScaledFormat::kFP8Blockwise, false, 2, 256, 384);
  expect_field(s.fprop_data, DType::kFloat8E4M3, {2, 256, 384}, "fprop_data");
  expect_field(s.fprop_scale, DType::kFloat32, {2, 2, 3}, "fprop_scale");
  expect_field(s.dgrad_data, DType::kFloat8E4M3, {2, 384, 256}, "dgrad_data");
  expect_field(s.dgrad_scale, DType::kFloat32, {2, 3, 2}, "dgrad_scale");
}

TEST(PreparedWeightSpec, Nvfp4IsInferenceWhateverTheFlag) {
  const PreparedWeightSpec s = prepared_weight_spec(BlockScaledFormat::kNVFP4, false, 2, 128, 256);
  EXPECT_TRUE(s.inference);
  expect_field(s.fprop_data, DType::kFloat4E2M1x2, {2, 128, 128}, "fprop_data");
  expect_field(s.fprop_scale, DType::kFloat8E4M3, {2, 128, 16}, "fprop_scale");
  EXPECT_FALSE(s.dgrad_data.present);
  expect_field(s.global_scale, DType::kFloat32, {2}, "global_scale");
  expect_field(s.global_scale_inv, DType::kFloat32, {2}, "global_scale_inv");
}

TEST(PreparedWeightSpec, IndivisibleDimsAreInvalidValues) {
  try {
    prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, false, 2, 100, 256);
    ADD_FAILURE() << "N = 100 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidValue);
    EXPECT_NE(std::string(e.what()).find("MXFP8 weight last two dims must be divisible by 32"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dist_moe
