// Shapes of prepared block-scaled weights (include/dist_moe/prepared_weight.h): host-only, so the
// PyTorch package's fake implementations and CI can ask for them without a GPU.
#include "dist_moe/prepared_weight.h"

#include "dist_moe/error.h"

namespace dist_moe {

int64_t PreparedTensorSpec::numel() const {
  if (!present) return 0;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int64_t PreparedTensorSpec::bytes() const { return numel() * static_cast<int64_t>(element_size(dtype)); }

namespace {
PreparedTensorSpec tensor(DType dtype, std::vector<int64_t> shape) { return {true, dtype, std::move(shape)}; }
}  // namespace

PreparedWeightSpec prepared_weight_spec(BlockScaledFormat format, bool inference, int64_t num_experts, int64_t rows,
                                        int64_t cols) {
  DMOE_CHECK_ARG(num_experts > 0 && rows > 0 && cols > 0, "block-scaled weight must have positive dims, got [",
                 num_experts, ", ", rows, ", ", cols, "]");
  const int64_t e = num_experts, n = rows, k = cols;
  PreparedWeightSpec s;
  s.format = format;
  s.inference = inference || format == BlockScaledFormat::kNVFP4;
  s.num_experts = e;
  s.rows = n;
  s.cols = k;
  switch (format) {
    case BlockScaledFormat::kMXFP8_E4M3:
      DMOE_CHECK_ARG(n % 32 == 0 && k % 32 == 0, "MXFP8 weight last two dims must be divisible by 32, got [", e, ", ",
                     n, ", ", k, "]");
      s.fprop_data = tensor(DType::kFloat8E4M3, {e, n, k});
      s.fprop_scale = tensor(DType::kFloat8E8M0, {e * n, k / 32});
      if (!s.inference) {
        s.dgrad_data = tensor(DType::kFloat8E4M3, {e, k, n});  // fprop_data transposed per expert
        s.dgrad_scale = tensor(DType::kFloat8E8M0, {e * k, n / 32});
      }
      break;
    case BlockScaledFormat::kNVFP4:
      DMOE_CHECK_ARG(k % 16 == 0, "NVFP4 weight last dim must be divisible by 16, got [", e, ", ", n, ", ", k, "]");
      s.fprop_data = tensor(DType::kFloat4E2M1x2, {e, n, k / 2});
      s.fprop_scale = tensor(DType::kFloat8E4M3, {e, n, k / 16});
      s.global_scale = tensor(DType::kFloat32, {e});
      s.global_scale_inv = tensor(DType::kFloat32, {e});
      break;
    case BlockScaledFormat::kFP8Blockwise:
      DMOE_CHECK_ARG(n % 128 == 0 && k % 128 == 0, "FP8 blockwise weight last two dims must be divisible by 128, got [",
                     e, ", ", n, ", ", k, "]");
      s.fprop_data = tensor(DType::kFloat8E4M3, {e, n, k});
      s.fprop_scale = tensor(DType::kFloat32, {e, n / 128, k / 128});
      if (!s.inference) {
        s.dgrad_data = tensor(DType::kFloat8E4M3, {e, k, n});
        s.dgrad_scale = tensor(DType::kFloat32, {e, k / 128, n / 128});
      }
      break;
  }
  return s;
}

}  // namespace dist_moe
