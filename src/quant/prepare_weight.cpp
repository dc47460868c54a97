// prepare_block_scaled_weight on the GPU: the spec's fields filled by the quantizers of this
// component (include/dist_moe/prepare_weight.h).
#include "dist_moe/prepare_weight.h"

#include "core/env_knobs.h"
#include "dist_moe/check.h"
#include "quant/quantize.h"

namespace dist_moe {

namespace {

void check_buffers(const PreparedWeightSpec& spec, const PreparedWeightBuffers& out, const char* who) {
  const auto need = [&](const PreparedTensorSpec& t, const void* p, const char* field) {
    DMOE_CHECK_ARG(!t.present || p != nullptr, who, ": the prepared weight's ", field, " buffer is missing");
    DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(p) % 16 == 0, who, ": the ", field, " buffer must be 16-byte aligned");
  };
  need(spec.fprop_data, out.fprop_data, "fprop_data");
  need(spec.fprop_scale, out.fprop_scale, "fprop_scale");
  need(spec.dgrad_data, out.dgrad_data, "dgrad_data");
  need(spec.dgrad_scale, out.dgrad_scale, "dgrad_scale");
  need(spec.global_scale, out.global_scale, "global_scale");
  need(spec.global_scale_inv, out.global_scale_inv, "global_scale_inv");
  // Training: dgrad_data is the transposed copy, written in the same pass as fprop_data, so the two
  // must not share bytes (MXFP8 as FP8 blockwise: on Hopper DGRAD reads its own [E, K, N] E4M3).
  if (spec.dgrad_data.present) {
    const auto f = reinterpret_cast<uintptr_t>(out.fprop_data), d = reinterpret_cast<uintptr_t>(out.dgrad_data);
    const auto f_bytes = static_cast<uintptr_t>(spec.fprop_data.bytes());
    const auto d_bytes = static_cast<uintptr_t>(spec.dgrad_data.bytes());
    DMOE_CHECK_ARG(d + d_bytes <= f || f + f_bytes <= d, who,
                   ": dgrad_data must be its own buffer (the weight transposed per expert, [E, K, N]), not fprop_data "
                   "or overlapping it");
  }
}

}  // namespace

void prepare_block_scaled_weight(const void* weight_bf16, const PreparedWeightSpec& spec,
                                 const PreparedWeightBuffers& out, cudaStream_t stream) {
  const char* who = "prepare_block_scaled_weight";
  DMOE_CHECK_ARG(weight_bf16 != nullptr && reinterpret_cast<uintptr_t>(weight_bf16) % 16 == 0, who,
                 ": the BF16 weight must be a 16-byte aligned device pointer");
  check_buffers(spec, out, who);
  const int64_t e = spec.num_experts, n = spec.rows, k = spec.cols;
  auto* q = static_cast<uint8_t*>(out.fprop_data);
  switch (spec.format) {
    case BlockScaledFormat::kMXFP8_E4M3:
      if (spec.inference) {
        // 1x32 rows over the whole [E*N, K] (a row never crosses experts).
        quant::mxfp8_quantize_rows({weight_bf16, e * n, k, k}, {q, k, static_cast<uint8_t*>(out.fprop_scale), k / 32, 1},
                                   stream);
      } else {
        // 32x32 tiles: fprop_data, its scales, the transposed copy DGRAD reads and the DGRAD scales. Where
        // both dims are multiples of 128 (every layer weight) and DMOE_MXFP8_EXACT=1 is not set, the tiles
        // sit at the scale shared by their 128x128 block (both copies and both grids: the FP8-blockwise
        // FPROP's and DGRAD's operands, perf_history G150-G151); else upstream's exact tile bytes.
        const bool shared = n % 128 == 0 && k % 128 == 0 && !core::env_flag("DMOE_MXFP8_EXACT");
        quant::mxfp8_quantize_weight_tiles(weight_bf16, e, n, k, q, static_cast<uint8_t*>(out.fprop_scale),
                                           static_cast<uint8_t*>(out.dgrad_data),
                                           static_cast<uint8_t*>(out.dgrad_scale), stream, shared);
      }
      break;
    case BlockScaledFormat::kNVFP4:
      quant::nvfp4_quantize_weight(weight_bf16, e, n, k, q, static_cast<uint8_t*>(out.fprop_scale), out.global_scale,
                                   out.global_scale_inv, stream);
      break;
    case BlockScaledFormat::kFP8Blockwise:
      quant::fp8_blockwise_quantize_weight(weight_bf16, e, n, k, q, static_cast<float*>(out.fprop_scale),
                                           static_cast<uint8_t*>(out.dgrad_data), static_cast<float*>(out.dgrad_scale),
                                           stream);
      break;
  }
}

void prepare_fp8_blockwise_weight_from_checkpoint(const void* data_e4m3, const float* scale_inv,
                                                  const PreparedWeightSpec& spec, const PreparedWeightBuffers& out,
                                                  cudaStream_t stream) {
  const char* who = "prepare_fp8_blockwise_weight_from_checkpoint";
  DMOE_CHECK_ARG(spec.format == BlockScaledFormat::kFP8Blockwise, who, ": the spec is for ", to_string(spec.format),
                 ", not fp8_blockwise");
  DMOE_CHECK_ARG(data_e4m3 != nullptr && scale_inv != nullptr && reinterpret_cast<uintptr_t>(data_e4m3) % 16 == 0,
                 who, ": the checkpoint's data (16-byte aligned) and scale_inv must be device pointers");
  check_buffers(spec, out, who);
  if (out.fprop_data != data_e4m3)
    DMOE_CUDA_CHECK(cudaMemcpyAsync(out.fprop_data, data_e4m3, spec.fprop_data.bytes(), cudaMemcpyDeviceToDevice, stream));
  if (out.fprop_scale != scale_inv)
    DMOE_CUDA_CHECK(
        cudaMemcpyAsync(out.fprop_scale, scale_inv, spec.fprop_scale.bytes(), cudaMemcpyDeviceToDevice, stream));
  if (!spec.inference)
    quant::fp8_blockwise_transpose_weight(static_cast<const uint8_t*>(data_e4m3), scale_inv, spec.num_experts,
                                          spec.rows, spec.cols, static_cast<uint8_t*>(out.dgrad_data),
                                          static_cast<float*>(out.dgrad_scale), stream);
}

}  // namespace dist_moe
