// MXFP8 E4M3 block quantization on logical blocks (reference section 4.2; OCP MX block size 32).
//
// Per block of 32 values: amax = NaN-propagating max |x|; scale byte = e8m0_rceil_from_amax(amax)
// (RCEIL: nothing clips); data q = e4m3_rn_satfinite(x * e8m0_reciprocal(scale)) with the exact
// power-of-two reciprocal; dequantized value = e4m3_to_float(q) * 2^(scale-127), exact in FP32.
// A NaN or Inf in a block makes its scale 0xFF, its data 0x7F and every dequantized element NaN;
// other blocks are unaffected. An all-zero block gets scale 0x00 and zero data.
//
// Arrays are plain row-major: x_RC / q_RC are [rows, cols]. Three block shapes:
//   rows  (1x32 along cols, activations for FPROP/DGRAD):  scales_RB [rows, ceil(cols/32)]
//   cols  (32x1 along rows, activations for WGRAD):        scales_BC [ceil(rows/32), cols]
//   tiles (32x32, weights; one qdata serves FPROP + DGRAD): scales_BB [ceil(rows/32), ceil(cols/32)]
// A partial last block (rows or cols not a multiple of 32) covers only the elements that exist.
// No kernel scale layout (CUBLAS_BLOCKED swizzle) happens here.
#pragma once

#include <cstdint>

#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/device/numeric/e8m0.cuh"
#include "dist_moe/device/numeric/fp8_e4m3.cuh"

namespace dist_moe::numeric {

constexpr int kMXBlock = 32;

// The compact column bundle of C features x R tokens (R a multiple of 32; the WGRAD operand as the
// layer saves it): E4M3 q [C, R] (row stride R), then its E8M0 scales token-block-major [R / 32, C]
// (row stride C: a 32-token block's scales of consecutive features are contiguous, as FP8
// blockwise's) from the next 128-byte boundary -- the bytes of upstream's column bundle,
// memory_plan.cpp Bundles::col(R, C) (docs/formats.md "GPU layouts").
DMOE_HOST_DEVICE constexpr int64_t mxfp8_compact_columns_scales_offset(int64_t c, int64_t r) {
  return (c * r + 127) / 128 * 128;
}
DMOE_HOST_DEVICE constexpr int64_t mxfp8_compact_columns_bytes(int64_t c, int64_t r) {
  return mxfp8_compact_columns_scales_offset(c, r) + (c * (r / kMXBlock) + 127) / 128 * 128;
}

// A packed MXFP8 row of C features (C a multiple of 128): its C E4M3 codes, then their C / 32 E8M0
// scales -- what an MXFP8 inference rank sends instead of a BF16 row (C + C / 32 bytes of 2C; the
// scales start 16-byte aligned). docs/formats.md "GPU layouts".
DMOE_HOST_DEVICE constexpr int64_t mxfp8_packed_row_bytes(int64_t c) { return c + c / kMXBlock; }
DMOE_HOST_DEVICE constexpr int64_t mxfp8_packed_row_scales_offset(int64_t c) { return c; }

// One element: e4m3_rn_satfinite(x * exact reciprocal of the E8M0 scale).
DMOE_HOST_DEVICE uint8_t mxfp8_quantize_value(float x, uint8_t scale) {
  return float_to_e4m3(mul_rn(x, e8m0_reciprocal(scale)));
}

// One element back: e4m3 value times 2^(scale-127). Exact for every scale a finite block can get;
// NaN for q = 0x7F/0xFF or scale 0xFF.
DMOE_HOST_DEVICE float mxfp8_dequantize_value(uint8_t q, uint8_t scale) {
  return mul_rn(e4m3_to_float(q), e8m0_to_float(scale));
}

// ---- back to BF16 in registers (the dequantizing GEMM baseline, gemm/mainloop_mxfp8_dequant.cuh) ----

// Byte permute (prmt / __byte_perm): byte i of the result is byte s_i of the eight bytes {y:x}.
DMOE_HOST_DEVICE uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = static_cast<uint64_t>(y) << 32 | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
  return r;
#endif
}

// Four E4M3 codes (code 0 in the low byte) as two BF16x2 words {code 0, 1} and {code 2, 3} of value
// x 2^-120, exactly: code s eeee mmm becomes BF16 s 0000eeee mmm0000 -- the 4-bit exponent at the
// bottom of BF16's 8-bit field, so a normal code keeps its value times 2^(-127 + 7) and a subnormal
// one (e = 0) lands on the BF16 subnormal with the same mantissa. Per code the BF16 high byte is
// s000 0eee and the low byte emmm 0000: formed for the four codes at once, then paired (the NaN
// codes 0x7F / 0xFF become finite values: a NaN block's scale 255 makes them NaN below).
DMOE_HOST_DEVICE void mxfp8_e4m3x4_to_bf16x2_m120(uint32_t w, uint32_t& c01, uint32_t& c23) {
  const uint32_t high = ((w >> 4) & 0x07070707u) | (w & 0x80808080u);
  const uint32_t low = (w << 4) & 0xF0F0F0F0u;
  c01 = byte_perm(low, high, 0x5140u);
  c23 = byte_perm(low, high, 0x7362u);
}

// The two BF16x2 factors that take value x 2^-120 to value x 2^(s - 127) for the E8M0 code s:
// 2^(s - 7) and 1 while 2^(s - 7) is a BF16 (s <= 134), else 2^127 and 2^(s - 134); NaN and 1 for
// s = 255. Applied one after the other with bf16x2_mul_rn, the result is the exact dequantized value
// rounded once to BF16 (exact down to 2^-130 in magnitude). Always two multiplies, no branch: the
// dequantizing GEMM's converting warps interleave consecutive chunks only across branch-free code
// (perf_history G120).
struct Mxfp8Bf16Factors {
  uint32_t first, second;
};
DMOE_HOST_DEVICE Mxfp8Bf16Factors mxfp8_bf16_factors(uint32_t s) {
  constexpr uint32_t kOne = 0x3F803F80u;
  const uint32_t big = ((s - 7u) << 7) * 0x00010001u;
  const uint32_t small = ((s + 120u) << 7) * 0x00010001u;
  if (s == 255u) return {0x7FC07FC0u, kOne};
  return s <= 134u ? Mxfp8Bf16Factors{small, kOne} : Mxfp8Bf16Factors{0x7F007F00u, big};
}

// Sixteen E4M3 codes of one block (four words, code 0 in the low byte of w[0]) with its E8M0 code
// s, as eight BF16x2 words in the same order.
DMOE_HOST_DEVICE void mxfp8_e4m3x16_to_bf16(const uint32_t (&w)[4], uint32_t s, uint32_t (&v)[8]) {
  const Mxfp8Bf16Factors f = mxfp8_bf16_factors(s);
  for (int i = 0; i < 4; ++i) mxfp8_e4m3x4_to_bf16x2_m120(w[i], v[2 * i], v[2 * i + 1]);
  for (int e = 0; e < 8; ++e) v[e] = bf16x2_mul_rn(bf16x2_mul_rn(v[e], f.first), f.second);
}

namespace detail {
// Quantize the rectangle [r0, r1) x [c0, c1) of x_RC with one shared scale; returns the scale.
DMOE_HOST_DEVICE uint8_t mxfp8_quantize_rect(const float* x_RC, int64_t cols, int64_t r0, int64_t r1,
                                             int64_t c0, int64_t c1, uint8_t* q_RC) {
  float amax = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) amax = amax_nan(amax, x_RC[r * cols + c]);
  const uint8_t scale = e8m0_rceil_from_amax(amax);
  const float recip = e8m0_reciprocal(scale);
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) q_RC[r * cols + c] = float_to_e4m3(mul_rn(x_RC[r * cols + c], recip));
  return scale;
}
}  // namespace detail

// Row blocks (1x32 along cols): scales_RB[r, b] covers x_RC[r, 32b .. 32b+31].
DMOE_HOST_DEVICE void mxfp8_quantize_rows(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC,
                                          uint8_t* scales_RB) {
  const int64_t nb = detail::ceil_div(cols, kMXBlock);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b)
      scales_RB[r * nb + b] = detail::mxfp8_quantize_rect(
          x_RC, cols, r, r + 1, b * kMXBlock, detail::min_i64(cols, (b + 1) * kMXBlock), q_RC);
}

// Column blocks (32x1 along rows): scales_BC[b, c] covers x_RC[32b .. 32b+31, c].
DMOE_HOST_DEVICE void mxfp8_quantize_cols(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC,
                                          uint8_t* scales_BC) {
  const int64_t nb = detail::ceil_div(rows, kMXBlock);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t c = 0; c < cols; ++c)
      scales_BC[b * cols + c] = detail::mxfp8_quantize_rect(
          x_RC, cols, b * kMXBlock, detail::min_i64(rows, (b + 1) * kMXBlock), c, c + 1, q_RC);
}

// 32x32 tiles (weights, upstream ScaleReduction.TWO_D): scales_BB[i, j] covers rows 32i.., cols 32j...
DMOE_HOST_DEVICE void mxfp8_quantize_tiles(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC,
                                           uint8_t* scales_BB) {
  const int64_t nbr = detail::ceil_div(rows, kMXBlock);
  const int64_t nbc = detail::ceil_div(cols, kMXBlock);
  for (int64_t i = 0; i < nbr; ++i)
    for (int64_t j = 0; j < nbc; ++j)
      scales_BB[i * nbc + j] = detail::mxfp8_quantize_rect(
          x_RC, cols, i * kMXBlock, detail::min_i64(rows, (i + 1) * kMXBlock), j * kMXBlock,
          detail::min_i64(cols, (j + 1) * kMXBlock), q_RC);
}

// ---- MXFP8 at a shared scale per 128, quantized once: the training layer's activations (G152) ------
// Hopper's FP8-blockwise kernels take one FP32 scale per 128 elements. The MXFP8 training layer
// quantizes its activations straight into that form: the code M of a 1x128 row block (128x1 column
// block along tokens, restarting at each expert) is e8m0_rceil_from_amax of the block's amax -- the
// largest of its four 32-element blocks' codes, RCEIL being monotone -- and every element is rounded
// once at it, mxfp8_quantize_value(x, M); the FP32 scale is e8m0_to_float(M). Each 32-element block
// is then an MXFP8 block with code M. It equals re-rounding the exact 1x32 codes at M
// (mxfp8_code_at_shared_scale, below) except where that first rounding lands on a midpoint of E4M3's
// subnormal grid at the shared scale (|x| < 2^-6 of it): one rounding instead of two.
// docs/formats.md "MXFP8 training operands".
constexpr int kMXSharedBlock = 128;

// Row blocks of 128 (a partial last block covers what exists): scales_RS[r, b] (FP32) for
// x_RC[r, 128b .. 128b + 127].
DMOE_HOST_DEVICE void mxfp8_quantize_rows_shared(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC,
                                                 float* scales_RS) {
  const int64_t ns = detail::ceil_div(cols, int64_t{kMXSharedBlock});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < ns; ++b)
      scales_RS[r * ns + b] = e8m0_to_float(detail::mxfp8_quantize_rect(
          x_RC, cols, r, r + 1, b * kMXSharedBlock, detail::min_i64(cols, (b + 1) * kMXSharedBlock), q_RC));
}

// Column blocks of 128 along rows: scales_SC[b, c] (FP32) for x_RC[128b .. 128b + 127, c].
DMOE_HOST_DEVICE void mxfp8_quantize_cols_shared(const float* x_RC, int64_t rows, int64_t cols, uint8_t* q_RC,
                                                 float* scales_SC) {
  const int64_t ns = detail::ceil_div(rows, int64_t{kMXSharedBlock});
  for (int64_t b = 0; b < ns; ++b)
    for (int64_t c = 0; c < cols; ++c)
      scales_SC[b * cols + c] = e8m0_to_float(detail::mxfp8_quantize_rect(
          x_RC, cols, b * kMXSharedBlock, detail::min_i64(rows, (b + 1) * kMXSharedBlock), c, c + 1, q_RC));
}

// Dequantize row blocks: y_RC[r, c] = e4m3(q_RC[r, c]) * 2^(scales_RB[r, c/32] - 127).
DMOE_HOST_DEVICE void mxfp8_dequantize_rows(const uint8_t* q_RC, const uint8_t* scales_RB, int64_t rows,
                                            int64_t cols, float* y_RC) {
  const int64_t nb = detail::ceil_div(cols, kMXBlock);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y_RC[r * cols + c] = mxfp8_dequantize_value(q_RC[r * cols + c], scales_RB[r * nb + c / kMXBlock]);
}

// Dequantize column blocks: y_RC[r, c] = e4m3(q_RC[r, c]) * 2^(scales_BC[r/32, c] - 127).
DMOE_HOST_DEVICE void mxfp8_dequantize_cols(const uint8_t* q_RC, const uint8_t* scales_BC, int64_t rows,
                                            int64_t cols, float* y_RC) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y_RC[r * cols + c] = mxfp8_dequantize_value(q_RC[r * cols + c], scales_BC[(r / kMXBlock) * cols + c]);
}

// Dequantize tiles: y_RC[r, c] = e4m3(q_RC[r, c]) * 2^(scales_BB[r/32, c/32] - 127).
DMOE_HOST_DEVICE void mxfp8_dequantize_tiles(const uint8_t* q_RC, const uint8_t* scales_BB, int64_t rows,
                                             int64_t cols, float* y_RC) {
  const int64_t nbc = detail::ceil_div(cols, kMXBlock);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y_RC[r * cols + c] =
          mxfp8_dequantize_value(q_RC[r * cols + c], scales_BB[(r / kMXBlock) * nbc + c / kMXBlock]);
}

// Tile scales seen as FPROP row-block scales of the [rows, cols] = [N, K] weight (reference 4.2:
// FPROP scales [E*N, K/32]): scales_RB[r, b] = scales_BB[r/32, b]. With these, the tiles' q_RC
// dequantizes through mxfp8_dequantize_rows to the same values.
DMOE_HOST_DEVICE void mxfp8_tile_scales_to_rows(const uint8_t* scales_BB, int64_t rows, int64_t cols,
                                                uint8_t* scales_RB) {
  const int64_t nbc = detail::ceil_div(cols, kMXBlock);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nbc; ++b) scales_RB[r * nbc + b] = scales_BB[(r / kMXBlock) * nbc + b];
}

// Tile scales seen as DGRAD scales of the transposed weight (reference 4.2: DGRAD scales
// [E*K, N/32]): scales_CB[c, b] = scales_BB[b, c/32], shape [cols, ceil(rows/32)]. With these,
// transpose(q_RC) dequantizes through mxfp8_dequantize_rows to transpose of the same values.
DMOE_HOST_DEVICE void mxfp8_tile_scales_to_cols(const uint8_t* scales_BB, int64_t rows, int64_t cols,
                                                uint8_t* scales_CB) {
  const int64_t nbr = detail::ceil_div(rows, kMXBlock);
  const int64_t nbc = detail::ceil_div(cols, kMXBlock);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t b = 0; b < nbr; ++b) scales_CB[c * nbr + b] = scales_BB[b * nbc + c / kMXBlock];
}

// ---- column blocks at a shared scale: the Hopper MXFP8 WGRAD's operands ------------------------------
// Hopper's FP8 wgmma takes no block scales, and folding a per-element scale product into FP32 every 32
// tokens would cost twice the FP8 wgmma's own time (docs/block_scaled_layer.md). So the MXFP8 WGRAD
// runs the FP8-blockwise WGRAD on the column blocks re-expressed per 128 tokens: the four 32-token
// blocks of a feature take the largest of their E8M0 scales, M, as the 128-token block's FP32 scale
// 2^(M - 127), and a code q of a block with scale s becomes e4m3_rn(q * 2^(s - M)). Only the exponent
// moves -- the same value -- unless the product falls below E4M3's normal range (2^-6), where it
// rounds to the subnormal grid: an error of at most 2^-10 * 2^(M - 127), under 2^-18.8 of the shared
// block's largest magnitude (448 * 2^(M - 127)). docs/formats.md "MXFP8 WGRAD operands".
constexpr int kMXBlocksPerSharedBlock = 4;  // 32-token blocks per 128-token block

// The rule for one code: unchanged when its block holds the shared scale (s >= M; NaN codes too),
// else e4m3_rn(q * 2^(s - M)) -- exactly, since the product of an E4M3 value and a power of two is an
// FP32 value, and from a shift of 20 on every result is +-0 (|q| * 2^-20 < 2^-10), so the factor may
// be 0 past 24 (NaN codes become 0x7F, the encoder's NaN).
DMOE_HOST_DEVICE uint8_t mxfp8_code_at_shared_scale(uint8_t q, uint8_t scale, uint8_t shared) {
  if (scale >= shared) return q;
  const uint32_t shift = static_cast<uint32_t>(shared - scale);
  const float factor = shift > 24u ? 0.0f : bits_float((127u - shift) << 23);
  return float_to_e4m3(mul_rn(e4m3_to_float(q), factor));
}

namespace detail {
// The rectangle [r0, r1) x [c0, c1) of q_RC (row stride cols) at the largest of its elements' block
// codes, code(r, c): the re-rounded codes into out_q_RC; returns that shared code.
template <class Code>
DMOE_HOST_DEVICE uint8_t mxfp8_rect_at_shared_scale(const uint8_t* q_RC, int64_t cols, int64_t r0, int64_t r1,
                                                    int64_t c0, int64_t c1, Code code, uint8_t* out_q_RC) {
  uint8_t shared = 0;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c) shared = code(r, c) > shared ? code(r, c) : shared;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t c = c0; c < c1; ++c)
      out_q_RC[r * cols + c] = mxfp8_code_at_shared_scale(q_RC[r * cols + c], code(r, c), shared);
  return shared;
}
constexpr int64_t kMXShared = kMXBlock * kMXBlocksPerSharedBlock;  // 128
}  // namespace detail

// Column blocks q_RC / scales_BC as mxfp8_quantize_cols writes them (rows tokens, the blocks restart
// at row 0) -> the same tokens at shared scales: out_q_RC and FP32 out_scales_BC[b, c] for tokens
// 128b .. 128b + 127 (a last partial block shares over the 32-token blocks it has). The WGRAD's operands.
DMOE_HOST_DEVICE void mxfp8_cols_at_shared_scales(const uint8_t* q_RC, const uint8_t* scales_BC, int64_t rows,
                                                  int64_t cols, uint8_t* out_q_RC, float* out_scales_BC) {
  auto code = [&](int64_t r, int64_t c) { return scales_BC[(r / kMXBlock) * cols + c]; };
  for (int64_t b = 0; b * detail::kMXShared < rows; ++b)
    for (int64_t c = 0; c < cols; ++c)
      out_scales_BC[b * cols + c] = e8m0_to_float(detail::mxfp8_rect_at_shared_scale(
          q_RC, cols, b * detail::kMXShared, detail::min_i64(rows, (b + 1) * detail::kMXShared), c, c + 1, code,
          out_q_RC));
}

// Row blocks (mxfp8_quantize_rows' q_RC / scales_RB, 1x32 along cols) at shared scales per 128 columns:
// out_scales_RB[r, b] (FP32) for columns 128b .. 128b + 127 of row r, the DGRAD's A operand.
DMOE_HOST_DEVICE void mxfp8_rows_at_shared_scales(const uint8_t* q_RC, const uint8_t* scales_RB, int64_t rows,
                                                  int64_t cols, uint8_t* out_q_RC, float* out_scales_RB) {
  const int64_t nb = detail::ceil_div(cols, kMXBlock), ns = detail::ceil_div(cols, detail::kMXShared);
  auto code = [&](int64_t r, int64_t c) { return scales_RB[r * nb + c / kMXBlock]; };
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < ns; ++b)
      out_scales_RB[r * ns + b] = e8m0_to_float(detail::mxfp8_rect_at_shared_scale(
          q_RC, cols, r, r + 1, b * detail::kMXShared, detail::min_i64(cols, (b + 1) * detail::kMXShared), code,
          out_q_RC));
}

// 32x32 tiles (mxfp8_quantize_tiles' q_RC / scales_BB) at shared scales per 128x128 block: the sixteen
// tiles of a block share the largest code; out_scales_BB[i, j] (FP32) for rows 128i.., cols 128j.. --
// the DGRAD's weight operand (its transposed copy holds the same codes transposed).
DMOE_HOST_DEVICE void mxfp8_tiles_at_shared_scales(const uint8_t* q_RC, const uint8_t* scales_BB, int64_t rows,
                                                   int64_t cols, uint8_t* out_q_RC, float* out_scales_BB) {
  const int64_t nbc = detail::ceil_div(cols, kMXBlock);
  const int64_t nsr = detail::ceil_div(rows, detail::kMXShared), nsc = detail::ceil_div(cols, detail::kMXShared);
  auto code = [&](int64_t r, int64_t c) { return scales_BB[(r / kMXBlock) * nbc + c / kMXBlock]; };
  for (int64_t i = 0; i < nsr; ++i)
    for (int64_t j = 0; j < nsc; ++j)
      out_scales_BB[i * nsc + j] = e8m0_to_float(detail::mxfp8_rect_at_shared_scale(
          q_RC, cols, i * detail::kMXShared, detail::min_i64(rows, (i + 1) * detail::kMXShared), j * detail::kMXShared,
          detail::min_i64(cols, (j + 1) * detail::kMXShared), code, out_q_RC));
}

}  // namespace dist_moe::numeric
