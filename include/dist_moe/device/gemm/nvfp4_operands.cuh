// NVFP4 operands of the swap-AB GEMM (mainloop_nvfp4_swap_ab.cuh), made exact FP16 in the kernel.
//
// Hopper has no FP4 tensor cores, so both operands -- the packed E2M1 weights with their E4M3 block
// scales, and the tokens' packed NVFP4 rows -- become FP16 values for FP16 wgmma (FP32 accumulate);
// the FP32 scales (per-token inverse, per-expert inverse global) are applied in the epilogue.
// Exactness: an element is e2m1 * s (E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6}, E4M3 scales s in
// [2^-9, 448]): at most 6 significant bits, lowest bit >= 2^-10, largest 2688. The kernel forms
// the tokens' e2m1 * s * 2^-7 (largest 21, lowest bit >= 2^-17) and the weights' e2m1 * s * 2^-14
// (largest 0.164, lowest bit >= 2^-24, FP16's smallest subnormal): exact in FP16, and their
// product carries 2^-21, which the epilogue removes exactly (`kNvfp4AccScale`).
//
// The conversion, per packed 32-bit word w (E2M1 codes c0..c7, c0 in the low nibble) and j in 0..3:
//   fp16x2 bits {(cj & 7) << 9 | (cj & 8) << 12, the same of c(j+4)} are e2m1 * 2^-14 (the three
//   magnitude bits are FP16's low two exponent bits and its top mantissa bit; code 1 is the
//   subnormal 2^-15), multiplied (FP16, exact) by t = s * 2^7 for the tokens, formed from the E4M3
//   byte as bits (s << 7) = s * 2^-8 times 2^15, and by t = s for the weights (one cvt).
// Seven shifts / logic ops per word, then one byte permute and one HMUL2 per two values
// (nvfp4_word_x2): 3.75 instructions per pair. That is the tokens' conversion (their packed rows
// keep the standard order); prepared weights store each word in the order of
// numeric/nvfp4_weight_order.cuh, whose pairs take 3 instructions each (nvfp4_weight_pair_x2).
//
// The K order. A stage is 256 K values (128 packed bytes of a weight row, 16 scale blocks). Thread
// q = lane % 4 of a quad supplies, per k16 step, the RS A fragment's K pairs {2q, 2q + 1} and
// {2q + 8, 2q + 9}. A contraction may take K in any order that both operands share, so the weights
// keep upstream's layout and each thread reads whole scale blocks: in piece i (0..3) of a stage,
// thread q reads scale block nvfp4_piece_block(q, i) -- 8 bytes, 16 codes, one scale -- of its rows
// (one ld.shared.v2 per row: the 16-byte units 4 (q & 1) + i of the 128B-swizzled row, conflict-free
// across the warp's rows). Its 16 codes make 8 FP16 pairs P_r (r = 0..7: word r / 4 of the block,
// codes j = r % 4 and j + 4); step s of the piece takes P_{2s} as the {2q, 2q+1} pair and P_{2s+1}
// as {2q+8, 2q+9}. The tokens' B stage holds the same order: box i (64 FP16 of K per token row),
// 16-byte unit r = [P_r of block nvfp4_piece_block(0, i) | of nvfp4_piece_block(1, i) | of (2, i) | of (3, i)].
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/numeric/nvfp4_weight_order.cuh"

namespace dist_moe::gemm {

inline constexpr int kNvfp4StageK = 256;          // K values per stage
inline constexpr int kNvfp4StageBytes = 128;      // packed bytes of one row per stage
inline constexpr int kNvfp4StageBlocks = 16;      // scale blocks of one row per stage
inline constexpr int kNvfp4Pieces = 4;            // 64-deep pieces per stage
inline constexpr float kNvfp4AccScale = 2097152.0f;  // 2^21: what the tokens' 2^-7 and weights' 2^-14 take off

// The scale block (0..15 within a stage) thread q takes in piece i.
DMOE_HOST_DEVICE constexpr int nvfp4_piece_block(int q, int i) { return 8 * (q & 1) + 2 * i + (q >> 1); }

// The byte permute selector (G121's, per thread) that puts bytes b and b + 2 (b = 0, 1) of a word of
// four scale bytes into bytes 0 and 1 over zeros: thread q's blocks of pieces 2w and 2w + 1 for b = q >> 1.
DMOE_HOST_DEVICE constexpr uint32_t nvfp4_weight_scale_pair_selector(int b) {
  return 0x4400u | static_cast<uint32_t>(b) | static_cast<uint32_t>(b + 2) << 4;
}

#if defined(__CUDACC__)

DMOE_DEVICE uint32_t hmul2_f16(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// s * 2^7 in both FP16 halves from `pair` = s | s << 16, s an E4M3 scale byte: bits s << 7 are the
// FP16 s * 2^-8, times 2^15 (block scales are positive; the NaN code 0x7F gives a finite factor: NaN
// reaches the output through the NaN FP32 scale of that expert or row).
DMOE_DEVICE uint32_t nvfp4_scale_pair_x2(uint32_t pair) { return hmul2_f16(pair << 7, 0x78007800u); }

// The same of a scale byte s.
DMOE_DEVICE uint32_t nvfp4_scale_x2(uint32_t s) { return nvfp4_scale_pair_x2(s * 0x00010001u); }

// The weights' factors of scale bytes b and b + 2 (b = 0, 1) of `word` -- the blocks of two
// consecutive pieces of a stage, nvfp4_piece_block -- as the two FP16 halves (low: byte b): E4M3
// values are FP16 values, so one byte permute (`selector` = nvfp4_weight_scale_pair_selector(b)) and one
// conversion make both, where the tokens' s * 2^7 takes three instructions per scale; each piece
// multiplies by its half (nvfp4_weight_pair_x2, G134). The weights' operands are then e2m1 * s * 2^-14
// (largest 0.164, lowest bit >= 2^-24, FP16's smallest subnormal: exact; many are subnormal, which the
// FP16 wgmma multiplies exactly), the products with the tokens' carry 2^-21 (kNvfp4AccScale). The NaN
// code 0x7F gives NaN operands: only an expert whose global scale is NaN has it, and its outputs are
// NaN through that scale anyway.
DMOE_DEVICE uint32_t nvfp4_weight_scale_x2_of(uint32_t word, uint32_t selector) {
  uint32_t d;
  asm("{\n .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, lo;\n}"
      : "=r"(d)
      : "r"(__byte_perm(word, 0u, selector)));
  return d;
}

// An FP16 e2m1 * 2^-14 has a zero low byte and the high byte (c & 7) << 1 | (c & 8) << 4: the high
// bytes of a packed word's eight codes (c0..c7, c0 in the low nibble), formed at once -- byte k of
// `even` for code 2k, of `odd` for code 2k + 1.
struct Nvfp4Bytes {
  uint32_t even, odd;
};
DMOE_DEVICE Nvfp4Bytes nvfp4_high_bytes(uint32_t w) {
  return {((w << 1) & 0x0E0E0E0Eu) | ((w << 4) & 0x80808080u), ((w >> 3) & 0x0E0E0E0Eu) | (w & 0x80808080u)};
}

// Pair j of the word (0..3): {code j (low half), code j + 4 (high half)} as FP16 e2m1 * s * 2^-7,
// one byte permute (two high bytes over zero low bytes) and the HMUL2 by t.
DMOE_DEVICE uint32_t nvfp4_pair_x2(const Nvfp4Bytes& b, int j, uint32_t t) {
  const uint32_t bytes = (j & 1) ? b.odd : b.even;          // codes j, j + 4: bytes j / 2, j / 2 + 2
  return hmul2_f16(__byte_perm(bytes, 0u, j < 2 ? 0x2404u : 0x3414u), t);
}

// The word's four pairs: out[j] = nvfp4_pair_x2(bytes, j, t).
DMOE_DEVICE void nvfp4_word_x2(uint32_t w, uint32_t t, uint32_t (&out)[4]) {
  const Nvfp4Bytes b = nvfp4_high_bytes(w);
#pragma unroll
  for (int j = 0; j < 4; ++j) out[j] = nvfp4_pair_x2(b, j, t);
}

// a times half kHalf of b in both halves: one HMUL2 (ptxas reads the half through the operand's
// .H0_H0 / .H1_H1 selection).
template <int kHalf>
DMOE_DEVICE uint32_t hmul2_f16_by_half(uint32_t a, uint32_t b) {
  static_assert(kHalf == 0 || kHalf == 1, "half 0 (low) or 1");
  uint32_t d;
  if constexpr (kHalf == 0)
    asm("{\n .reg .b16 lo, hi;\n .reg .b32 t;\n mov.b32 {lo, hi}, %2;\n mov.b32 t, {lo, lo};\n"
        " mul.rn.f16x2 %0, %1, t;\n}" : "=r"(d) : "r"(a), "r"(b));
  else
    asm("{\n .reg .b16 lo, hi;\n .reg .b32 t;\n mov.b32 {lo, hi}, %2;\n mov.b32 t, {hi, hi};\n"
        " mul.rn.f16x2 %0, %1, t;\n}" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// Pair j of a prepared weight word (stored in the order of numeric/nvfp4_weight_order.cuh), times
// half kHalf of t (nvfp4_weight_scale_x2_of): a word's four pairs take four shifts (s >> 3 shared),
// four logic ops and four HMUL2 -- 12 instructions where the standard packing's nvfp4_word_x2 takes 15.
template <int kHalf>
DMOE_DEVICE uint32_t nvfp4_weight_pair_x2(uint32_t s, int j, uint32_t t) {
  return hmul2_f16_by_half<kHalf>(numeric::nvfp4_weight_pair(s, j), t);
}

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
