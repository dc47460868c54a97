// NVFP4 token rows on the GPU: the pieces every producer of them shares, so that the quantizer
// kernels (src/quant) and the Mega pipeline's h2 hand-off (device/gemm/mega.cuh) write the
// same bits by running the same code.
//
//   e2m1x8_signed                 8 scaled values -> 8 E2M1 nibbles (one 32-bit word)
//   nvfp4_row_block_scale         a token row's block, given the row's scale: its E4M3 scale and
//                                 the multiplier its values are quantized with
//   nvfp4_row_vector,             one 16-byte vector of a token row (two lanes per block) or a whole
//   nvfp4_row_block               block in one lane: E2M1 words and the block's E4M3 scale
//   Nvfp4ExpandLane,              stages of a packed row made FP16 in the NVFP4 GEMMs' K order
//   nvfp4_expand_row_stages       (kNvfp4ExpandedRows, gemm/nvfp4_operands.cuh)
//   nvfp4_quantize_expand_row_warp  a whole row by one warp: the packed row, and the row expanded
//                                 in place (the Mega h2 hand-off)
//
// Numerics: numeric/nvfp4.cuh (the activation recipe, reference section 4.4); the packed row is
// [C/2 E2M1 | C/16 E4M3 | FP32 token_scale_inv | pad] (docs/formats.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dist_moe/device/gemm/nvfp4_operands.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"
#include "dist_moe/device/ptx/cp_async.cuh"
#include "dist_moe/device/quant/vectors.cuh"

namespace dist_moe::quant {

// ---- E2M1 words -----------------------------------------------------------------------------------

constexpr int kNvfp4LanesPerBlock = numeric::kNVFP4Block / kVec;  // 2: lanes 2b, 2b+1 hold block b
constexpr uint32_t kE2M1NaNx8 = 0x77777777u;
// The smallest normal E4M3 code (2^-6): a block scale at or above it keeps every scaled magnitude of
// its block below 7 (numeric::e2m1_magnitude_code_bits_below7), a subnormal one may not (v = 1.49 *
// 2^-9 rounds to s = 2^-9: magnitudes up to ~8.9).
constexpr uint8_t kE4M3MinNormalCode = 0x08;

// 8 nibbles (element 0 in the low nibble of byte 0): the E2M1 code of magnitude(|x_i|) = |y_i| with
// x_i's sign bit. That is float_to_e2m1(y_i) whenever y_i = x_i * (a finite positive factor), the
// quantizers' case when the block's factor is finite (sign of a product or quotient, zeros and
// underflows included); a block whose factor is NaN is all 0x7, which the callers write themselves.
// The codes come from FP32 arithmetic (numeric::e2m1_magnitude_code_bits: the code in the low byte
// of each result), and the nibbles and signs are assembled for all eight at once with byte
// permutes: ~15 instructions per 8 elements instead of ~5 per element (mask, sign shift and mask,
// nibble shift, or).
// kBelow7: every magnitude is known to be below 7 (the warp's block scales are normal E4M3
// values), so the clamp at 6 is left out (numeric::e2m1_magnitude_code_bits_below7).
template <bool kBelow7 = false, class Magnitude>
__device__ __forceinline__ uint32_t e2m1x8_signed(const uint4& raw, Magnitude magnitude) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
  uint32_t code[kVec];  // float bits with element i's magnitude code in the low byte
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const uint32_t word = w[i / 2];
    const float x = __uint_as_float((i & 1) ? word & 0xffff0000u : word << 16);
    const float y = magnitude(fabsf(x));  // |x|: a free operand modifier
    code[i] = kBelow7 ? numeric::e2m1_magnitude_code_bits_below7(y) : numeric::e2m1_magnitude_code_bits(y);
  }
  // Even elements' codes in the low nibbles of bytes 0..3, odd ones' in the high nibbles.
  const uint32_t even = __byte_perm(__byte_perm(code[0], code[2], 0x0040), __byte_perm(code[4], code[6], 0x0040), 0x5410);
  const uint32_t odd = __byte_perm(__byte_perm(code[1], code[3], 0x0040), __byte_perm(code[5], code[7], 0x0040), 0x5410);
  // Signs: element 2j's is bit 15 of word j (bit 7 of its byte 1), element 2j+1's bit 31 (byte 3).
  const uint32_t high01 = __byte_perm(w[0], w[1], 0x7531), high23 = __byte_perm(w[2], w[3], 0x7531);
  const uint32_t sign_even = __byte_perm(high01, high23, 0x6420), sign_odd = __byte_perm(high01, high23, 0x7531);
  return even | (odd << 4) | ((sign_even >> 4) & 0x08080808u) | (sign_odd & 0x80808080u);
}

// ---- token rows -------------------------------------------------------------------------------------

// A block of a token row whose scale is row_scale = nvfp4_activation_row_scale(row amax) (row_nan: that
// scale is NaN), given the block's amax: its E4M3 scale `s` and the multiplier fl(row_scale / s) its
// values are quantized with. `quotient` is fl(row_scale / (1 + i/8)) with i = lane % 8. Per block no
// division and no software decode: the block scale is clamped below and converted with satfinite (the
// upper clamp at 448 is satfinite's own, the NaN case a row-uniform select), decoded by the hardware
// cvt, and the multiplier comes from the row's eight quotients by a shuffle on s's significand and an
// exact exponent step (nvfp4_activation_multiplier_from_quotient). `below7`: every block the warp
// handles in this call has a normal scale (numeric::e2m1_magnitude_code_bits_below7's condition).
// Every lane of the warp must call it (a shuffle and a vote), lanes without a block included.
struct Nvfp4BlockScale {
  uint8_t s;
  float mult;
  bool below7;
};

__device__ __forceinline__ Nvfp4BlockScale nvfp4_row_block_scale(float bamax, float row_scale, bool row_nan,
                                                                 float quotient) {
  // s = nvfp4_activation_block_scale(bamax, row_scale): finite and >= 0 when the row is.
  const float v = numeric::mul_rn(numeric::mul_rn(bamax, row_scale), numeric::kE2M1MaxReciprocal);
  Nvfp4BlockScale b;
  b.s = row_nan ? numeric::kE4M3NaN : numeric::float_to_e4m3(fmaxf(v, numeric::kNVFP4ScaleFloor));
  const float sf = numeric::e4m3_to_float_fast(b.s);
  // The source lane's low three bits are s's significand index, the rest of the five bits don't
  // matter (lane l holds i = l % 8).
  const float qi = __shfl_sync(0xffffffffu, quotient, static_cast<int>(__float_as_uint(sf) >> 20));
  b.below7 = __all_sync(0xffffffffu, b.s >= kE4M3MinNormalCode);  // warp-uniform
  b.mult = numeric::nvfp4_activation_multiplier_from_quotient(qi, sf);
  return b;
}

// q = e2m1(fl(x * mult)) of one vector of the block (nvfp4_activation_quantize_value, with the sign
// taken from x).
__device__ __forceinline__ uint32_t nvfp4_row_block_word(const uint4& raw, const Nvfp4BlockScale& b, bool row_nan) {
  const auto product = [&](float abs_x) { return numeric::mul_rn(abs_x, b.mult); };
  return row_nan ? kE2M1NaNx8 : (b.below7 ? e2m1x8_signed<true>(raw, product) : e2m1x8_signed<false>(raw, product));
}

// One 16-byte vector (8 BF16 values, `raw`, with its amax `vamax`) of a token row, lanes 2b, 2b+1 of
// the warp holding the two halves of block b: the vector's E2M1 word, and its block's E4M3 scale in
// `s`. `valid`: the vector exists (lanes past the row's end return 0 but must call it).
__device__ __forceinline__ uint32_t nvfp4_row_vector(const uint4& raw, float vamax, float row_scale, bool row_nan,
                                                     float quotient, bool valid, uint8_t& s) {
  const Nvfp4BlockScale b =
      nvfp4_row_block_scale(group_amax<kNvfp4LanesPerBlock>(vamax), row_scale, row_nan, quotient);
  s = b.s;
  if (!valid) return 0u;
  return nvfp4_row_block_word(raw, b, row_nan);
}

// A whole block in one lane (its two vectors `lo`, `hi`, with the block's amax `bamax`): the block's
// two E2M1 words (lo's first) and its E4M3 scale in `s`; the scale work once per block instead of
// once per vector in each of two lanes. `valid` as above.
__device__ __forceinline__ uint2 nvfp4_row_block(const uint4& lo, const uint4& hi, float bamax, float row_scale,
                                                 bool row_nan, float quotient, bool valid, uint8_t& s) {
  const Nvfp4BlockScale b = nvfp4_row_block_scale(bamax, row_scale, row_nan, quotient);
  s = b.s;
  if (!valid) return make_uint2(0u, 0u);
  return make_uint2(nvfp4_row_block_word(lo, b, row_nan), nvfp4_row_block_word(hi, b, row_nan));
}

// ---- expansion to FP16 in the GEMMs' K order ----------------------------------------------------------

// A warp writes a stage (256 K values) of a row as 32 16-byte units, lane L unit L: unit r = 4 half
// + j of piece i = L / 8 holds pair j of word `half` of the blocks nvfp4_piece_block(q, i), q = 0..3
// (gemm/nvfp4_operands.cuh). The four lanes j = 0..3 of a (piece, half) need the same four words and
// scales: lane j loads those of block q = j and shuffles share them (a quarter of the load
// instructions: with one load per word and scale, ncu s28 r4 showed the warps stalled on a full load
// queue).
struct Nvfp4ExpandLane {
  int lane, j, half, own_block, group;
  __device__ __forceinline__ explicit Nvfp4ExpandLane(int lane_)
      : lane(lane_), j(lane_ % 4), half((lane_ % 8) / 4), own_block(gemm::nvfp4_piece_block(lane_ % 4, lane_ / 8)),
        group(lane_ & ~3) {}
};
constexpr int kNvfp4UnitsPerStage = gemm::kNvfp4StageK / 8;  // 16-byte units (8 FP16) of a stage: a lane each

// Stages [kb0, kb0 + count) (count <= kMaxStages, warp-uniform) of the packed row `src` of `cols`
// values -- nullptr: a padding row, zeros -- into `units` (this lane's unit of stage kb0; a stage is
// kNvfp4UnitsPerStage units further); with kb0 == 0 also the row's token_scale_inv into
// *token_scale_inv (0 for a padding row). The loads all issue before the first store (the rows may
// alias the output as far as the compiler knows, so nothing would be hoisted past a store
// otherwise). Every lane of the warp must call it.
template <int kMaxStages>
__device__ __forceinline__ void nvfp4_expand_row_stages(const Nvfp4ExpandLane& l, const uint8_t* src, int64_t cols,
                                                        int64_t kb0, int count, uint4* units, float* token_scale_inv) {
  if (src == nullptr) {  // a padding row: its products are 0
    for (int s = 0; s < count; ++s) units[s * kNvfp4UnitsPerStage] = make_uint4(0, 0, 0, 0);
    if (kb0 == 0 && l.lane == 0) *token_scale_inv = 0.0f;
    return;
  }
  constexpr int kUnitsPerStage = kNvfp4UnitsPerStage;
  const int64_t scales_at = numeric::nvfp4_packed_row_scales_offset(cols);
  uint32_t word[kMaxStages], scale[kMaxStages];  // block own_block's, per stage
#pragma unroll
  for (int s = 0; s < kMaxStages; ++s) {
    if (s < count) {  // warp-uniform
      const uint8_t* stage = src + (kb0 + s) * gemm::kNvfp4StageBytes;
      word[s] = *reinterpret_cast<const uint32_t*>(stage + 8 * l.own_block + 4 * l.half);
      scale[s] = src[scales_at + (kb0 + s) * gemm::kNvfp4StageBlocks + l.own_block];
    }
  }
#pragma unroll
  for (int s = 0; s < kMaxStages; ++s) {
    if (s < count) {
      uint32_t pair[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint32_t w = __shfl_sync(0xffffffffu, word[s], l.group | q);
        const uint32_t sc = __shfl_sync(0xffffffffu, scale[s], l.group | q);
        pair[q] = gemm::nvfp4_pair_x2(gemm::nvfp4_high_bytes(w), l.j, gemm::nvfp4_scale_x2(sc));
      }
      units[s * kUnitsPerStage] = make_uint4(pair[0], pair[1], pair[2], pair[3]);
    }
  }
  if (kb0 == 0 && l.lane == 0)
    *token_scale_inv = *reinterpret_cast<const float*>(src + numeric::nvfp4_packed_row_token_scale_offset(cols));
}

// A whole row: every stage, kPass at a time (the loads in flight per warp), into `row_units` (the
// expanded row, cols FP16 values), and its token_scale_inv.
template <int kPass>
__device__ __forceinline__ void nvfp4_expand_row(const Nvfp4ExpandLane& l, const uint8_t* src, int64_t cols,
                                                 uint4* row_units, float* token_scale_inv) {
  const int64_t stages = cols / gemm::kNvfp4StageK;
  for (int64_t kb0 = 0; kb0 < stages; kb0 += kPass)
    nvfp4_expand_row_stages<kPass>(l, src, cols, kb0, static_cast<int>(min(static_cast<int64_t>(kPass), stages - kb0)),
                                   row_units + kb0 * kNvfp4UnitsPerStage + l.lane, token_scale_inv);
}

// A whole token row of `cols` BF16 values (a multiple of 256) by one warp: quantized to NVFP4 into the
// packed row at `packed` (16-byte aligned) and expanded to FP16 in place of the BF16 row (the GEMMs'
// K order), with its token_scale_inv at *token_scale_inv -- the bytes nvfp4_quantize_rows writes,
// then nvfp4_expand_rows from them. For the Mega pipeline's h2 hand-off, where one warpgroup turns
// a chunk's rows over while the other soon waits for the stages it holds, so it is built for
// latency: the row comes into the warp's shared-memory slice (`slice`, kSliceVecs 16-byte vectors)
// by cp.async, a slice-full at a time, no registers held (L2 only: the rows were written by other
// SMs of the same launch) -- one L2 round trip per slice-full for the amax and, for a row longer
// than the slice, one per slice-full but the last for the second pass, which takes the last first
// (still in the slice); a row that fits is read once. kSliceVecs >= 32 (one stage). In the second pass a
// stage (256 values) is one vector per lane, so the lanes that made a stage's E2M1 words and block
// scales hand them to the lanes that expand them by shuffles (what nvfp4_expand_row_stages does
// after loading them back from the packed row), and each lane stores its unit where its own vector
// was: the row's values are read (into the slice) before any unit of them is stored. Every lane of
// the warp must call it.
template <int kSliceVecs>
__device__ __forceinline__ void nvfp4_quantize_expand_row_warp(uint16_t* row, int64_t cols, uint8_t* packed,
                                                              float* token_scale_inv, uint4* slice, int lane) {
  static_assert(kSliceVecs >= 32, "a slice holds at least one 256-value stage (32 vectors)");
  constexpr int piece = kSliceVecs / 32 * 32;  // whole stages per slice-full
  const int vecs_total = static_cast<int>(cols / kVec);  // cols % 256 == 0: whole stages
  uint4* vecs = reinterpret_cast<uint4*>(row);
  // Vectors [v0, v0 + n) of the row into the slice.
  const auto fetch = [&](int v0, int n) { ptx::warp_copy_to_shared(slice, vecs + v0, n, lane); };
  float a = 0.0f;
  for (int v0 = 0; v0 < vecs_total; v0 += piece) {
    const int n = min(piece, vecs_total - v0);
    fetch(v0, n);
    for (int v = lane; v < n; v += 32) a = numeric::amax_nan(a, amax_bf16x8(slice[v]));
    __syncwarp();  // the slice is read before the next fetch overwrites it
  }
  a = group_amax<32>(a);
  const float row_scale = numeric::nvfp4_activation_row_scale(a);
  const bool row_nan = numeric::is_nan(row_scale);
  if (lane == 0) {
    const float inv = numeric::nvfp4_activation_token_scale_inv(row_scale);
    *reinterpret_cast<float*>(packed + numeric::nvfp4_packed_row_token_scale_offset(cols)) = inv;
    *token_scale_inv = inv;
  }
  const float quotient = numeric::div_rn(row_scale, numeric::e4m3_significand(lane % 8));
  uint8_t* scales = packed + numeric::nvfp4_packed_row_scales_offset(cols);
  // This lane's unit takes, for q = 0..3, word `half` of block nvfp4_piece_block(q, i) of the stage
  // (i = lane / 8): vector 2 block + half of the stage, made by that lane, which also holds the
  // block's scale (both lanes of a block do).
  const Nvfp4ExpandLane l(lane);
  const int last = (vecs_total - 1) / piece * piece;  // pass 1 left this slice-full in the slice
  for (int k = 0; k * piece < vecs_total; ++k) {
    const int v0 = k == 0 ? last : (k - 1) * piece;  // the last slice-full first, then the others
    const int n = min(piece, vecs_total - v0);
    if (k > 0) fetch(v0, n);
    for (int v = lane; v < n; v += 32) {  // n % 32 == 0: every lane has a vector per stage
      const int idx = v0 + v;
      const uint4 raw = slice[v];
      uint8_t s;
      const uint32_t word = nvfp4_row_vector(raw, amax_bf16x8(raw), row_scale, row_nan, quotient, true, s);
      *reinterpret_cast<uint32_t*>(packed + idx * (kVec / 2)) = word;
      if (idx % kNvfp4LanesPerBlock == 0) scales[idx / kNvfp4LanesPerBlock] = s;
      uint32_t pair[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int from = 2 * gemm::nvfp4_piece_block(q, lane / 8) + l.half;
        const uint32_t w = __shfl_sync(0xffffffffu, word, from);
        const uint32_t sc = __shfl_sync(0xffffffffu, static_cast<uint32_t>(s), from);
        pair[q] = gemm::nvfp4_pair_x2(gemm::nvfp4_high_bytes(w), l.j, gemm::nvfp4_scale_x2(sc));
      }
      vecs[idx] = make_uint4(pair[0], pair[1], pair[2], pair[3]);
    }
    __syncwarp();  // the slice is read before the next fetch overwrites it
  }
}

}  // namespace dist_moe::quant
