// NVFP4 block quantization on logical blocks (reference section 4.4): E2M1 data packed two per
// byte, 16-element blocks along cols, one E4M3 scale per block, one FP32 global scale per expert
// (weights) or per token row (activations). NVFP4_MAX = 448 * 6 = 2688.
//
// Upstream warns that a 1-ulp difference flips FP4 codes, so every producer must use the same
// FP32 arithmetic in the same order; the functions below spell that order out and round each
// step with mul_rn/div_rn (never an FMA). Ops the reference writes as "/ 6" are a division and
// the ones it writes as "* fl(1/6)" a multiplication by the FP32 constant 1/6.
//
// Arrays: x_RC / w_RC [rows, cols] row-major floats (activations: pass BF16-rounded values where
// the pipeline materializes BF16); q_RH [rows, ceil(cols/2)] bytes with element 2j in the low
// nibble and 2j+1 in the high one (an odd tail leaves the last high nibble 0); scales_RB
// [rows, ceil(cols/16)] E4M3 bytes; a partial last block covers what exists. No swizzled layout.
//
// Non-finite input (our rule; upstream's NaN path is not documented): NaN or Inf anywhere in an
// expert (weights) or a token row (activations) makes that global scale NaN; then every block
// scale of it is E4M3 NaN (0x7F), its data nibbles are 0x7 (E2M1 NaN rule) and all of it
// dequantizes to NaN. Finite input never produces NaN or Inf: an all-zero expert/row/block gets
// the floor scale 2^-9 and zero data.
#pragma once

#include <cstdint>

#include "dist_moe/device/numeric/fp4_e2m1.cuh"
#include "dist_moe/device/numeric/fp8_e4m3.cuh"

namespace dist_moe::numeric {

constexpr int kNVFP4Block = 16;
constexpr float kNVFP4Max = 2688.0f;                 // 448 * 6
constexpr float kNVFP4WeightAmaxFloor = 1e-12f;      // weights: amax_e clamped at >= 1e-12
constexpr float kNVFP4ActAmaxFloor = 1e-8f;          // activations: max(row_amax, 1e-8)
constexpr float kNVFP4ScaleFloor = kE4M3MinSubnormal;  // block scale clamp [2^-9, 448]
constexpr float kE2M1MaxReciprocal = 1.0f / 6.0f;    // fl(1/6)

// A packed NVFP4 token row of C features (upstream's dispatch row): C/2 bytes of E2M1 pairs, the
// C/16 E4M3 block scales, the FP32 token_scale_inv, padded to 16 bytes. docs/formats.md.
DMOE_HOST_DEVICE constexpr int64_t nvfp4_packed_row_scales_offset(int64_t c) { return c / 2; }
DMOE_HOST_DEVICE constexpr int64_t nvfp4_packed_row_token_scale_offset(int64_t c) { return c / 2 + c / kNVFP4Block; }
DMOE_HOST_DEVICE constexpr int64_t nvfp4_packed_row_bytes(int64_t c) {
  return (nvfp4_packed_row_token_scale_offset(c) + 4 + 15) / 16 * 16;
}

namespace detail {
// 2688 * fl(1 / max(|amax|, floor)) (reciprocal-then-multiply); non-finite amax -> NaN.
DMOE_HOST_DEVICE float nvfp4_global_scale(float amax, float floor) {
  if (!is_finite(amax)) return quiet_nan();
  float a = abs_f32(amax);
  if (a < floor) a = floor;
  return mul_rn(kNVFP4Max, div_rn(1.0f, a));
}
// e4m3_rn(clamp(v, [2^-9, 448])); NaN stays NaN (0x7F) instead of being clamped.
DMOE_HOST_DEVICE uint8_t nvfp4_clamp_to_scale(float v) {
  if (is_nan(v)) return kE4M3NaN;
  if (v < kNVFP4ScaleFloor) v = kNVFP4ScaleFloor;
  if (v > kE4M3Max) v = kE4M3Max;
  return float_to_e4m3(v);
}
}  // namespace detail

// ---- weights (per expert, done once at preparation) -------------------------------------------

// gs_e = 2688 * fl(1 / max(amax_e, 1e-12)); reference 4.4 weights step 2 ("authority" formula).
DMOE_HOST_DEVICE float nvfp4_weight_global_scale(float amax) {
  return detail::nvfp4_global_scale(amax, kNVFP4WeightAmaxFloor);
}

// s = e4m3_rn(clamp(fl(fl(block_amax * gs) / 6), [2^-9, 448])); reference 4.4 weights step 3.
DMOE_HOST_DEVICE uint8_t nvfp4_weight_block_scale(float block_amax, float gs) {
  return detail::nvfp4_clamp_to_scale(div_rn(mul_rn(block_amax, gs), 6.0f));
}

// The same scale with the division by 6 done through fl(1/6) (div_rn_by_reciprocal: equal to the
// division for |block_amax * gs| >= 2^-100; below, both quotients clamp to the 2^-9 floor).
DMOE_HOST_DEVICE uint8_t nvfp4_weight_block_scale_by_reciprocal(float block_amax, float gs) {
  return detail::nvfp4_clamp_to_scale(div_rn_by_reciprocal(mul_rn(block_amax, gs), 6.0f, kE2M1MaxReciprocal));
}

// q = e2m1_rn_satfinite(fl(fl(x * gs) / float(s))); reference 4.4 weights step 4.
DMOE_HOST_DEVICE uint8_t nvfp4_weight_quantize_value(float x, float gs, uint8_t s) {
  return float_to_e2m1(div_rn(mul_rn(x, gs), e4m3_to_float(s)));
}

// The same code from float(s) and its reciprocal fl(1 / float(s)) (div_rn_by_reciprocal: no
// division per element). Equal to nvfp4_weight_quantize_value(x, gs, s): the quotients can differ
// only where |x * gs| < 2^-100, and there both round to an E2M1 zero of x's sign.
DMOE_HOST_DEVICE uint8_t nvfp4_weight_quantize_value_by_reciprocal(float x, float gs, float s_value, float s_recip) {
  return float_to_e2m1(div_rn_by_reciprocal(mul_rn(x, gs), s_value, s_recip));
}

// w = fl(e2m1(q) * float(s)) / gs (the product is exact). Note the GEMM epilogue instead
// multiplies by the stored 1/gs, which can differ from this division by 1 ulp.
DMOE_HOST_DEVICE float nvfp4_weight_dequantize_value(uint8_t nibble, uint8_t s, float gs) {
  return div_rn(mul_rn(e2m1_to_float(nibble), e4m3_to_float(s)), gs);
}

// ---- activations (per token row, dynamic) -----------------------------------------------------

// row_scale = 2688 * fl(1 / max(row_amax, 1e-8)); reference 4.4 activations step 2.
DMOE_HOST_DEVICE float nvfp4_activation_row_scale(float row_amax) {
  return detail::nvfp4_global_scale(row_amax, kNVFP4ActAmaxFloor);
}

// token_scale_inv = fl(1 / row_scale); travels with the packed row.
DMOE_HOST_DEVICE float nvfp4_activation_token_scale_inv(float row_scale) { return div_rn(1.0f, row_scale); }

// s = e4m3_rn(clamp(fl(fl(block_amax * row_scale) * fl(1/6)), [2^-9, 448])); reference 4.4
// activations step 3 (this operation order is load-bearing for E4M3 ties).
DMOE_HOST_DEVICE uint8_t nvfp4_activation_block_scale(float block_amax, float row_scale) {
  return detail::nvfp4_clamp_to_scale(mul_rn(mul_rn(block_amax, row_scale), kE2M1MaxReciprocal));
}

// multiplier = fl(row_scale / float(s)) (IEEE division; upstream matches div.rn bit for bit).
DMOE_HOST_DEVICE float nvfp4_activation_multiplier(float row_scale, uint8_t s) {
  return div_rn(row_scale, e4m3_to_float(s));
}

// q = e2m1_rn_satfinite(fl(x * multiplier)); reference 4.4 activations step 4.
DMOE_HOST_DEVICE uint8_t nvfp4_activation_quantize_value(float x, float multiplier) {
  return float_to_e2m1(mul_rn(x, multiplier));
}

// x = fl(fl(e2m1(q) * float(s)) * token_scale_inv) (the first product is exact).
DMOE_HOST_DEVICE float nvfp4_activation_dequantize_value(uint8_t nibble, uint8_t s, float token_scale_inv) {
  return mul_rn(mul_rn(e2m1_to_float(nibble), e4m3_to_float(s)), token_scale_inv);
}

// ---- per-block factors from per-row tables (the GPU quantizers' shortcut) -----------------------
// Every finite positive E4M3 value s (subnormal codes included: as floats they are normal) is
// (1 + i/8) * 2^E with i = e4m3_significand_index(float(s)) in 0..7. A quotient by s is then a
// quotient by one of eight significands followed by an exact power-of-two step, as long as both
// stay normal FP32 numbers (rounding commutes with scaling by 2^-E there). The GPU quantizers keep
// the eight quotients of a row (or the eight reciprocals) in eight lanes and replace a per-block
// IEEE division by a shuffle and an integer add on the exponent field.
DMOE_HOST_DEVICE uint32_t e4m3_significand_index(float s_value) { return (float_bits(s_value) >> 20) & 7u; }
DMOE_HOST_DEVICE float e4m3_significand(uint32_t index) { return 1.0f + static_cast<float>(index) * 0.125f; }

// c * 2^-E for s_value = (1 + i/8) * 2^E, on the bits: exact when c and the result are normal.
DMOE_HOST_DEVICE float scale_by_inverse_exponent(float c, float s_value) {
  return bits_float(float_bits(c) + (127u << 23) - (float_bits(s_value) & 0x7f800000u));
}

// nvfp4_activation_multiplier(row_scale, s) from quotient_i = fl(row_scale / (1 + i/8)), i the
// scale's significand index. Equal to the IEEE division for every finite block scale s (values
// 2^-9 .. 448) whenever row_scale lies in [2^-117, 2^38): then quotient_i >= 2^-118 and the
// multiplier >= 2^-117 / 448 > 2^-126 are normal, and < 2^38 * 2^9 is finite. Every finite
// row_scale nvfp4_activation_row_scale gives lies there: 2688 * fl(1 / amax) with the largest
// finite BF16 amax (3.39e38) is 7.9e-36 > 2^-117 = 6.0e-36, and with the 1e-8 floor 2.7e11 < 2^38.
// (Checked on the host for a sample and on the GPU for every significand of row_scale at the
// range's ends and in between.)
DMOE_HOST_DEVICE float nvfp4_activation_multiplier_from_quotient(float quotient_i, float s_value) {
  return scale_by_inverse_exponent(quotient_i, s_value);
}
DMOE_HOST_DEVICE float nvfp4_activation_multiplier_by_table(float row_scale, uint8_t s) {
  const float sv = e4m3_to_float(s);
  return nvfp4_activation_multiplier_from_quotient(div_rn(row_scale, e4m3_significand(e4m3_significand_index(sv))), sv);
}

// fl(1 / float(s)) from reciprocal_i = fl(1 / (1 + i/8)): exact for every finite positive E4M3
// scale (the reciprocal lies in [1/448, 512], normal).
DMOE_HOST_DEVICE float e4m3_reciprocal_from_table(float reciprocal_i, float s_value) {
  return scale_by_inverse_exponent(reciprocal_i, s_value);
}

// ---- arrays -----------------------------------------------------------------------------------

namespace detail {
DMOE_HOST_DEVICE void nvfp4_store_nibble(uint8_t* q_RH, int64_t half_cols, int64_t r, int64_t c, uint8_t nib) {
  uint8_t* p = q_RH + r * half_cols + c / 2;
  if ((c & 1) == 0)
    *p = nib;  // low nibble first; also clears the high nibble of an odd tail
  else
    *p = static_cast<uint8_t>(*p | (nib << 4));
}
DMOE_HOST_DEVICE uint8_t nvfp4_load_nibble(const uint8_t* q_RH, int64_t half_cols, int64_t r, int64_t c) {
  const uint8_t byte = q_RH[r * half_cols + c / 2];
  return (c & 1) == 0 ? e2m1x2_lo(byte) : e2m1x2_hi(byte);
}
}  // namespace detail

// One expert's weight [rows, cols] (e.g. [N, K] or [2F, D]; blocks run along cols = the
// contraction dim). Writes q_RH, scales_RB, *global_scale = gs and *global_scale_inv = fl(1/gs)
// (either pointer may be null).
DMOE_HOST_DEVICE void nvfp4_quantize_weight(const float* w_RC, int64_t rows, int64_t cols, uint8_t* q_RH,
                                            uint8_t* scales_RB, float* global_scale, float* global_scale_inv) {
  float amax = 0.0f;
  for (int64_t i = 0; i < rows * cols; ++i) amax = amax_nan(amax, w_RC[i]);
  const float gs = nvfp4_weight_global_scale(amax);
  if (global_scale) *global_scale = gs;
  if (global_scale_inv) *global_scale_inv = div_rn(1.0f, gs);
  const int64_t nb = detail::ceil_div(cols, kNVFP4Block);
  const int64_t hc = detail::ceil_div(cols, 2);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kNVFP4Block;
      const int64_t c1 = detail::min_i64(cols, c0 + kNVFP4Block);
      float bamax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) bamax = amax_nan(bamax, w_RC[r * cols + c]);
      const uint8_t s = nvfp4_weight_block_scale(bamax, gs);
      scales_RB[r * nb + b] = s;
      for (int64_t c = c0; c < c1; ++c)
        detail::nvfp4_store_nibble(q_RH, hc, r, c, nvfp4_weight_quantize_value(w_RC[r * cols + c], gs, s));
    }
  }
}

// w_RC[r, c] = e2m1(q) * s[r, c/16] / global_scale.
DMOE_HOST_DEVICE void nvfp4_dequantize_weight(const uint8_t* q_RH, const uint8_t* scales_RB, float global_scale,
                                              int64_t rows, int64_t cols, float* w_RC) {
  const int64_t nb = detail::ceil_div(cols, kNVFP4Block);
  const int64_t hc = detail::ceil_div(cols, 2);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      w_RC[r * cols + c] = nvfp4_weight_dequantize_value(detail::nvfp4_load_nibble(q_RH, hc, r, c),
                                                         scales_RB[r * nb + c / kNVFP4Block], global_scale);
}

// Token rows x_RC [rows = tokens, cols = hidden]: per row a dynamic row_scale, per 16-block an
// E4M3 scale. Writes q_RH, scales_RB and token_scale_inv_R[r] = fl(1 / row_scale[r]).
DMOE_HOST_DEVICE void nvfp4_quantize_activation(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RH,
                                                uint8_t* scales_RB, float* token_scale_inv_R) {
  const int64_t nb = detail::ceil_div(cols, kNVFP4Block);
  const int64_t hc = detail::ceil_div(cols, 2);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = x_RC + r * cols;
    float row_amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) row_amax = amax_nan(row_amax, x[c]);
    const float row_scale = nvfp4_activation_row_scale(row_amax);
    token_scale_inv_R[r] = nvfp4_activation_token_scale_inv(row_scale);
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * kNVFP4Block;
      const int64_t c1 = detail::min_i64(cols, c0 + kNVFP4Block);
      float bamax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) bamax = amax_nan(bamax, x[c]);
      const uint8_t s = nvfp4_activation_block_scale(bamax, row_scale);
      scales_RB[r * nb + b] = s;
      const float mult = nvfp4_activation_multiplier(row_scale, s);
      for (int64_t c = c0; c < c1; ++c)
        detail::nvfp4_store_nibble(q_RH, hc, r, c, nvfp4_activation_quantize_value(x[c], mult));
    }
  }
}

// x_RC[r, c] = e2m1(q) * s[r, c/16] * token_scale_inv_R[r].
DMOE_HOST_DEVICE void nvfp4_dequantize_activation(const uint8_t* q_RH, const uint8_t* scales_RB,
                                                  const float* token_scale_inv_R, int64_t rows, int64_t cols,
                                                  float* x_RC) {
  const int64_t nb = detail::ceil_div(cols, kNVFP4Block);
  const int64_t hc = detail::ceil_div(cols, 2);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x_RC[r * cols + c] = nvfp4_activation_dequantize_value(
          detail::nvfp4_load_nibble(q_RH, hc, r, c), scales_RB[r * nb + c / kNVFP4Block], token_scale_inv_R[r]);
}

}  // namespace dist_moe::numeric
