// Dist-MoE number formats: one umbrella for every conversion shared by the GPU kernels and the
// CPU oracle (src/reference). All functions are DMOE_HOST_DEVICE (host: plain inline C++17, no
// CUDA headers; device: __host__ __device__ __forceinline__), namespace dist_moe::numeric.
// The exact rules (bits, rounding, saturation, NaN, block rules, and where each comes from) are
// in docs/formats.md.
//
// ---- API summary (stable; codes are raw uint8_t bytes / nibbles) ------------------------------
// fp32.cuh (helpers the formats use; exact IEEE FP32, never contracted into FMA)
//   float mul_rn(float,float), div_rn(float,float); uint32_t abs_bits(float); bool is_nan(float), is_finite(float)
//   float amax_nan(float running, float x)   NaN-propagating max(|running|, |x|)
//   int64_t detail::ceil_div(int64_t a, int64_t b)   sizes of scale arrays (stable; src/reference uses it)
// Block sizes: kMXBlock = 32, kNVFP4Block = 16, kFP8BlockwiseBlock = 128.
// bf16.cuh
//   bf16_t float_to_bf16(float)            RNE, NaN stays (quiet) NaN
//   float  bf16_to_float(bf16_t)           exact
//   float  round_bf16(float)               float -> bf16 -> float
// fp8_e4m3.cuh   (E4M3 "fn": bias 7, max 448, no Inf, 0x7F/0xFF NaN, subnormals down to 2^-9)
//   uint8_t  float_to_e4m3(float)          RNE, satfinite (|x|>448 and +-Inf -> +-448), NaN -> 0x7F
//   uint8_t  float_to_e4m3_portable(float) same bits, bit manipulation only (the reference path)
//   uint16_t float2_to_e4m3x2(float lo, float hi)   lo in bits 0..7, hi in bits 8..15
//   float    e4m3_to_float(uint8_t)        exact; 0x7F/0xFF -> NaN
//   float    round_e4m3(float)             float -> e4m3 -> float
//   constants kE4M3Max = 448, kE4M3MinSubnormal = 2^-9, kE4M3NaN = 0x7F
// e8m0.cuh       (unsigned power of two 2^(byte-127), byte 0xFF = NaN)
//   uint8_t e8m0_rceil_from_amax(float amax) MXFP8 "RCEIL" scale: ceil_pow2(amax * fl(1/448)),
//                                            clamped to [0x00, 0xFE]; NaN/Inf amax -> 0xFF;
//                                            amax = 0 -> 0x00 (2^-127; the data are then all 0)
//   uint8_t e8m0_ceil_pow2(float t)          the cvt.rp.ue8m0 step on its own (byte of ceil_pow2(|t|))
//   float   e8m0_to_float(uint8_t)           2^(byte-127) exactly (byte 0 -> 2^-127 subnormal); 0xFF -> NaN
//   float   e8m0_reciprocal(uint8_t)         2^(127-byte) exactly, from bits ((254-byte)<<23); 0xFF -> NaN
// fp4_e2m1.cuh   (E2M1: magnitudes {0,.5,1,1.5,2,3,4,6}, bit 3 = sign, no Inf/NaN)
//   uint8_t float_to_e2m1(float)           nibble; RNE, satfinite to +-6; NaN -> 0x7 (+6, as CUDA's cvt)
//   float   e2m1_to_float(uint8_t nibble)  exact (only the low 4 bits are read)
//   float   round_e2m1(float)
//   uint8_t e2m1x2_pack(uint8_t lo, uint8_t hi)   element 0 in the low nibble
//   uint8_t e2m1x2_lo(uint8_t byte), e2m1x2_hi(uint8_t byte)
// mxfp8.cuh      (MXFP8 E4M3: 32-element blocks, E8M0 scales; row-major float arrays in/out)
//   uint8_t mxfp8_quantize_value(float x, uint8_t scale)   e4m3(x * e8m0_reciprocal(scale))
//   float   mxfp8_dequantize_value(uint8_t q, uint8_t scale) e4m3_to_float(q) * 2^(scale-127)
//   void mxfp8_quantize_rows (const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC, uint8_t* scales_RB)
//   void mxfp8_quantize_cols (const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC, uint8_t* scales_BC)
//   void mxfp8_quantize_tiles(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC, uint8_t* scales_BB)
//   void mxfp8_dequantize_rows (const uint8_t* q_RC, const uint8_t* scales_RB, int64_t rows, int64_t cols, float* y_RC)
//   void mxfp8_dequantize_cols (const uint8_t* q_RC, const uint8_t* scales_BC, int64_t rows, int64_t cols, float* y_RC)
//   void mxfp8_dequantize_tiles(const uint8_t* q_RC, const uint8_t* scales_BB, int64_t rows, int64_t cols, float* y_RC)
//   void mxfp8_tile_scales_to_rows(const uint8_t* scales_BB, int64_t rows, int64_t cols, uint8_t* scales_RB)  FPROP view [rows, cols/32]
//   void mxfp8_tile_scales_to_cols(const uint8_t* scales_BB, int64_t rows, int64_t cols, uint8_t* scales_CB)  DGRAD view [cols, rows/32]
//     B = ceil(n/32) blocks: rows -> scales [rows, B(cols)]; cols -> [B(rows), cols];
//     tiles (32x32 weights) -> [B(rows), B(cols)]. A partial last block covers what is there.
// nvfp4.cuh      (NVFP4: E2M1 data packed 2/byte, 16-element blocks, E4M3 block scales, FP32 global)
//   float   nvfp4_weight_global_scale(float amax)                       gs = 2688 * fl(1 / max(amax, 1e-12))
//   uint8_t nvfp4_weight_block_scale(float block_amax, float gs)        e4m3(clamp((block_amax*gs)/6, [2^-9,448]))
//   uint8_t nvfp4_weight_quantize_value(float x, float gs, uint8_t s)   e2m1((x*gs)/float(s))
//   float   nvfp4_weight_dequantize_value(uint8_t nib, uint8_t s, float gs)           (e2m1*s)/gs
//   float   nvfp4_activation_row_scale(float row_amax)                  2688 * fl(1 / max(row_amax, 1e-8))
//   float   nvfp4_activation_token_scale_inv(float row_scale)           fl(1 / row_scale)
//   uint8_t nvfp4_activation_block_scale(float block_amax, float row_scale)  e4m3(clamp((block_amax*row_scale)*fl(1/6), [2^-9,448]))
//   float   nvfp4_activation_multiplier(float row_scale, uint8_t s)     row_scale / float(s)
//   uint8_t nvfp4_activation_quantize_value(float x, float multiplier)  e2m1(x*multiplier)
//   float   nvfp4_activation_dequantize_value(uint8_t nib, uint8_t s, float token_scale_inv)  (e2m1*s)*inv
//   void nvfp4_quantize_weight(const float* w_RC, int64_t rows, int64_t cols,
//                              uint8_t* q_RH, uint8_t* scales_RB, float* global_scale, float* global_scale_inv)
//   void nvfp4_dequantize_weight(const uint8_t* q_RH, const uint8_t* scales_RB, float global_scale,
//                                int64_t rows, int64_t cols, float* w_RC)          e2m1 * s / gs
//   void nvfp4_quantize_activation(const float* x_RC, int64_t rows, int64_t cols,
//                                  uint8_t* q_RH, uint8_t* scales_RB, float* token_scale_inv_R)
//   void nvfp4_dequantize_activation(const uint8_t* q_RH, const uint8_t* scales_RB, const float* token_scale_inv_R,
//                                    int64_t rows, int64_t cols, float* x_RC)        e2m1 * s * token_scale_inv
//     One nvfp4_quantize_weight call = one expert (the global amax spans the whole [rows, cols]).
//     H = ceil(cols/2) packed bytes per row (element 2j low nibble, 2j+1 high); B = ceil(cols/16).
// fp8_blockwise.cuh (DeepSeek-V3 style: FP32 scale = amax/448, data = e4m3(x * fl(448/amax)))
//   float   fp8_blockwise_scale(float amax)   max(amax, 448*2^-126)/448 (so scale >= FLT_MIN, never 0);
//                                             amax = 0 -> 1 exactly; NaN/Inf -> NaN
//   float   fp8_blockwise_multiplier(float amax)   448/max(amax, 448*2^-126); amax = 0 -> 1; NaN/Inf -> NaN
//   uint8_t fp8_blockwise_quantize_value(float x, float multiplier) e4m3(x * multiplier)
//   float   fp8_blockwise_dequantize_value(uint8_t q, float scale) e4m3(q) * scale
//   void fp8_blockwise_quantize_act (const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC, float* scales_RB)   1x128, B = ceil(cols/128)
//   void fp8_blockwise_quantize_weight(const float* w_RC, int64_t rows, int64_t cols, uint8_t* q_RC, float* scales_BB) 128x128
//   void fp8_blockwise_dequantize_act   (const uint8_t* q_RC, const float* scales_RB, int64_t rows, int64_t cols, float* y_RC)
//   void fp8_blockwise_dequantize_weight(const uint8_t* q_RC, const float* scales_BB, int64_t rows, int64_t cols, float* y_RC)
//
// Non-finite inputs: a NaN/Inf poisons its scale group (MXFP8: the 32-block or 32x32 tile;
// NVFP4: the whole expert (weights) or token row (activations); FP8 blockwise: the block): the
// scale becomes NaN and every element of the group dequantizes to NaN. Finite inputs never give NaN.
#pragma once

#include "dist_moe/device/numeric/fp32.cuh"
#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/device/numeric/fp8_e4m3.cuh"
#include "dist_moe/device/numeric/e8m0.cuh"
#include "dist_moe/device/numeric/fp4_e2m1.cuh"
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"
#include "dist_moe/device/numeric/nvfp4_weight_order.cuh"
#include "dist_moe/device/numeric/fp8_blockwise.cuh"
