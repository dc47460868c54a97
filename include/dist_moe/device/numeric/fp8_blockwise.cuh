// FP8 blockwise quantization, the DeepSeek-V3 recipe that Hopper runs natively (DeepSeek-V3
// technical report section 3.3; DeepGEMM's scaled FP8 GEMMs): E4M3 data, one FP32 scale per
// 1x128 activation block (per token, along the hidden dim) or per 128x128 weight block.
// Not in upstream dist_moe (DESIGN.md section 5).
//
//   scale      = fl(amax / 448)   (the stored FP32 dequantization scale; amax = NaN-propagating max |x|)
//   multiplier = fl(448 / amax)   (one division per block)
//   q          = e4m3_rn_satfinite(fl(x * multiplier))   (one multiplication per element)
//   x'         = fl(e4m3(q) * scale)
//
// Our choices where the recipe is silent (checkpoints only store the scale, so any producer works;
// DeepGEMM's and TransformerEngine's quantizers also multiply by 448/amax rather than divide):
//   * a multiplication per element, not x / scale: an IEEE division per element made the GPU
//     quantizers issue-bound (about 10 instructions each) instead of HBM-bound.
//   * amax = 0 -> scale = multiplier = 1 exactly; the data are all zero.
//   * 0 < amax < 448 * 2^-126 (an all-tiny block) -> amax is raised to 448 * 2^-126 so the scale
//     is the smallest normal FP32 2^-126 (multiplier 2^126), never a subnormal, never 0.
//   * NaN or Inf in a block -> scale and multiplier NaN; its data become 0x7F and dequantize to NaN.
// The element with |x| = amax always encodes to +-448 (x * fl(448/amax) is within an ulp of 448).
// Arrays: x_RC/q_RC [rows, cols] row-major; activation scales_RB [rows, ceil(cols/128)], weight
// scales_BB [ceil(rows/128), ceil(cols/128)]; partial last blocks cover what exists.
#pragma once

#include <cstdint>

#include "dist_moe/device/numeric/fp8_e4m3.cuh"

namespace dist_moe::numeric {

constexpr int kFP8BlockwiseBlock = 128;
constexpr float kFP8BlockwiseAmaxFloor = 448.0f * 1.1754943508222875e-38f;  // 448 * 2^-126, exact

// A packed FP8-blockwise row of C features (C a multiple of 128): its C E4M3 codes, then their
// C / 128 FP32 scales -- what an FP8-blockwise inference rank sends instead of a BF16 row (C + C / 32
// bytes of 2C; the scales start 16-byte aligned). docs/formats.md "GPU layouts".
DMOE_HOST_DEVICE constexpr int64_t fp8_blockwise_packed_row_bytes(int64_t c) { return c + c / kFP8BlockwiseBlock * 4; }
DMOE_HOST_DEVICE constexpr int64_t fp8_blockwise_packed_row_scales_offset(int64_t c) { return c; }

// The compact FP8-blockwise column bundle (the WGRAD operand a training layer saves) of C features
// over R tokens, R a multiple of 128 (each expert's rows padded to 128): E4M3 [C, R] (tokens
// contiguous, row stride R), then the FP32 scales [R / 128, C] (token-block-major, the WGRAD GEMM's
// scale layout) at the next 128-byte boundary. Its C * R / 32 scale bytes make it exactly as large
// as MXFP8's compact bundle (mxfp8_compact_columns_bytes), so the activation planner sizes both
// with one formula. docs/formats.md "GPU layouts".
DMOE_HOST_DEVICE constexpr int64_t fp8_blockwise_compact_columns_scales_offset(int64_t c, int64_t r) {
  return (c * r + 127) / 128 * 128;
}
DMOE_HOST_DEVICE constexpr int64_t fp8_blockwise_compact_columns_bytes(int64_t c, int64_t r) {
  return fp8_blockwise_compact_columns_scales_offset(c, r) + (r / kFP8BlockwiseBlock * c * 4 + 127) / 128 * 128;
}

namespace detail {
// |amax| with the floor applied; NaN for a non-finite amax, 0 for an all-zero block.
DMOE_HOST_DEVICE float fp8_blockwise_amax(float amax) {
  if (!is_finite(amax)) return quiet_nan();
  const float a = abs_f32(amax);
  return (a != 0.0f && a < kFP8BlockwiseAmaxFloor) ? kFP8BlockwiseAmaxFloor : a;
}
}  // namespace detail

// FP32 block scale (dequantization factor) from the block's amax: fl(amax / 448) (rules above).
DMOE_HOST_DEVICE float fp8_blockwise_scale(float amax) {
  const float a = detail::fp8_blockwise_amax(amax);
  return a == 0.0f ? 1.0f : div_rn(a, kE4M3Max);
}

// Quantization multiplier from the block's amax: fl(448 / amax) (rules above).
DMOE_HOST_DEVICE float fp8_blockwise_multiplier(float amax) {
  const float a = detail::fp8_blockwise_amax(amax);
  return a == 0.0f ? 1.0f : div_rn(kE4M3Max, a);
}

// The same two factors for a BF16-valued amax (its low 16 FP32 bits zero, as every block amax of
// BF16 data is) from two 128-entry tables over the amax's 7 stored significand bits,
// multiplier_table[i] = fl(448 / (1 + i/128)) and scale_table[i] = fl((1 + i/128) / 448), and an
// exact exponent step: the floored amax is a normal (1 + i/128) * 2^E, and the quotients by it
// (multiplier in [1.3e-36, 2^126], scale in [2^-126, 7.6e35]) and the table entries are normal,
// where rounding commutes with scaling by 2^E. Equal to fp8_blockwise_multiplier / _scale on every
// BF16 amax (host test over all 2^16), with no division: the GPU rows+columns quantizer computes
// these once per 128-element block in every column-pass lane.
DMOE_HOST_DEVICE float fp8_blockwise_multiplier_significand(int i) {
  return div_rn(kE4M3Max, 1.0f + static_cast<float>(i) * 0.0078125f);
}
DMOE_HOST_DEVICE float fp8_blockwise_scale_significand(int i) {
  return div_rn(1.0f + static_cast<float>(i) * 0.0078125f, kE4M3Max);
}
DMOE_HOST_DEVICE void fp8_blockwise_factors_from_tables(float bf16_amax, const float* multiplier_table,
                                                        const float* scale_table, float& scale, float& multiplier) {
  const float a = detail::fp8_blockwise_amax(bf16_amax);
  if (a == 0.0f) {
    scale = multiplier = 1.0f;
    return;
  }
  const uint32_t bits = float_bits(a), exponent = bits & 0x7f800000u;
  const uint32_t i = (bits >> 16) & 0x7fu;
  const bool nan = is_nan(a);
  multiplier = nan ? a : bits_float(float_bits(multiplier_table[i]) + (127u << 23) - exponent);
  scale = nan ? a : bits_float(float_bits(scale_table[i]) - (127u << 23) + exponent);
}

// q = e4m3_rn_satfinite(fl(x * multiplier)).
DMOE_HOST_DEVICE uint8_t fp8_blockwise_quantize_value(float x, float multiplier) {
  return float_to_e4m3(mul_rn(x, multiplier));
}

// x' = fl(e4m3(q) * scale).
DMOE_HOST_DEVICE float fp8_blockwise_dequantize_value(uint8_t q, float scale) {
  return mul_rn(e4m3_to_float(q), scale);
}

namespace detail {
// Quantize the rectangle [r0, r1) x [c0, c1) of x_RC with one shared scale; returns the scale.
DMOE_HOST_DEVICE float fp8_blockwise_quantize_rect(const float* x_RC, int64_t cols, int64_t r0, int64_t r1,
                                                   int64_t c0, int64_t c1, uint8_t* q_RC) {
  float amax = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) amax = amax_nan(amax, x_RC[r * cols + c]);
  const float mult = fp8_blockwise_multiplier(amax);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) q_RC[r * cols + c] = fp8_blockwise_quantize_value(x_RC[r * cols + c], mult);
  return fp8_blockwise_scale(amax);
}
}  // namespace detail

// Activations, 1x128 blocks along cols: scales_RB[r, b] covers x_RC[r, 128b .. 128b+127].
DMOE_HOST_DEVICE void fp8_blockwise_quantize_act(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC,
                                                 float* scales_RB) {
  const int64_t nb = detail::ceil_div(cols, kFP8BlockwiseBlock);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      scales_RB[r * nb + b] = detail::fp8_blockwise_quantize_rect(
          x_RC, cols, r, r + 1, b * kFP8BlockwiseBlock, detail::min_i64(cols, (b + 1) * kFP8BlockwiseBlock), q_RC);
}

// Weights, 128x128 blocks: scales_BB[i, j] covers rows 128i.., cols 128j.. (DeepSeek-V3's
// weight_scale_inv layout [ceil(N/128), ceil(K/128)] for a [N, K] weight).
DMOE_HOST_DEVICE void fp8_blockwise_quantize_weight(const float* w_RC, int64_t rows, int64_t cols, uint8_t* q_RC,
                                                    float* scales_BB) {
  const int64_t nbr = detail::ceil_div(rows, kFP8BlockwiseBlock);
  const int64_t nbc = detail::ceil_div(cols, kFP8BlockwiseBlock);
  for (int64_t i = 0; i < nbr; ++i)
    for (int64_t j = 0; j < nbc; ++j)
      scales_BB[i * nbc + j] = detail::fp8_blockwise_quantize_rect(
          w_RC, cols, i * kFP8BlockwiseBlock, detail::min_i64(rows, (i + 1) * kFP8BlockwiseBlock),
          j * kFP8BlockwiseBlock, detail::min_i64(cols, (j + 1) * kFP8BlockwiseBlock), q_RC);
}

// y_RC[r, c] = e4m3(q_RC[r, c]) * scales_RB[r, c/128].
DMOE_HOST_DEVICE void fp8_blockwise_dequantize_act(const uint8_t* q_RC, const float* scales_RB, int64_t rows,
                                                   int64_t cols, float* y_RC) {
  const int64_t nb = detail::ceil_div(cols, kFP8BlockwiseBlock);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y_RC[r * cols + c] = fp8_blockwise_dequantize_value(q_RC[r * cols + c], scales_RB[r * nb + c / kFP8BlockwiseBlock]);
}

// y_RC[r, c] = e4m3(q_RC[r, c]) * scales_BB[r/128, c/128].
DMOE_HOST_DEVICE void fp8_blockwise_dequantize_weight(const uint8_t* q_RC, const float* scales_BB, int64_t rows,
                                                      int64_t cols, float* y_RC) {
  const int64_t nbc = detail::ceil_div(cols, kFP8BlockwiseBlock);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y_RC[r * cols + c] = fp8_blockwise_dequantize_value(
          q_RC[r * cols + c], scales_BB[(r / kFP8BlockwiseBlock) * nbc + c / kFP8BlockwiseBlock]);
}

}  // namespace dist_moe::numeric
