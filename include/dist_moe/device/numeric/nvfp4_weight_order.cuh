// The bit order of prepared NVFP4 weights: each 32-bit word of eight E2M1 codes stored as a fixed
// GF(2)-linear transform of the standard packing, so that the GEMMs build their FP16 operands with
// fewer instructions (G126 in docs/perf_history.md).
//
// Standard packing (docs/formats.md): word u holds codes c0..c7 of 8 consecutive K values, c0 in the
// low nibble, code = sign << 3 | magnitude. The swap-AB GEMMs want, per word, four FP16 pairs
// (nvfp4_operands.cuh): pair j = {code j in the low half, code j + 4 in the high half}, a code c as
// the FP16 bits (c & 7) << 9 | (c & 8) << 12, i.e. pair j = P_j(u) with every bit outside
// kNvfp4PairMask zero. From the standard packing that takes three shifts, four logic ops and four
// byte permutes per word: a code's sign and magnitude sit 3 bits apart in its nibble and 6 apart in
// FP16, so no single shift lines both up.
//
// The stored word s is the one whose pairs come out as
//     P_0 = (s << 9) & M,   P_1 = (s << 6) & M,   P_2 = (s >> 3 ^ s << 2) & M,   P_3 = (s ^ s >> 3) & M
// (M = kNvfp4PairMask): four shifts and four logic ops. The 32 output bits depend linearly and
// invertibly on s (a search over every set of four shifts and rotations of a word, with each pair
// one source or the XOR of two: four sources alone cannot tile the word, G121; this is one of the
// solutions, with the pairs assigned so that the inverse takes the fewest shift distances), so every
// standard word has exactly one stored word: nvfp4_weight_word_encode is that inverse, written as
// the XOR of u shifted by 12 distances under 12 masks (the quantizer's cost: G126);
// nvfp4_weight_word_decode gives the standard word back.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::numeric {

inline constexpr uint32_t kNvfp4PairMask = 0x8E008E00u;  // FP16 bits 9-11 and 15 of both halves

// Pair j of stored word s (the GEMMs' form of it is gemm::nvfp4_weight_pair_x2).
DMOE_HOST_DEVICE constexpr uint32_t nvfp4_weight_pair(uint32_t s, int j) {
  return (j == 0 ? s << 9 : j == 1 ? s << 6 : j == 2 ? (s >> 3) ^ (s << 2) : s ^ (s >> 3)) & kNvfp4PairMask;
}

// The stored word of standard word u: bit t of s is the XOR of the bits t - d of u over the distances
// d whose mask holds t (the inverse of the pairs' linear map, solved once; the CPU test checks every
// pair of it against the standard pairs).
DMOE_HOST_DEVICE constexpr uint32_t nvfp4_weight_word_encode(uint32_t u) {
  return (u & 0x90879087u) ^ ((u << 1) & 0x08000800u) ^ ((u << 2) & 0x22002200u) ^ ((u << 3) & 0x00400040u) ^
         ((u << 4) & 0x48004800u) ^ ((u << 5) & 0x10001000u) ^ ((u << 7) & 0x40004000u) ^
         ((u >> 1) & 0x05B805B8u) ^ ((u >> 3) & 0x0D008D00u) ^ ((u >> 5) & 0x00802080u) ^ ((u >> 8) & 0x00000400u) ^
         ((u >> 10) & 0x00000100u);
}

// The standard word of stored word s.
DMOE_HOST_DEVICE constexpr uint32_t nvfp4_weight_word_decode(uint32_t s) {
  uint32_t u = 0;
  for (int j = 0; j < 4; ++j) {
    const uint32_t p = nvfp4_weight_pair(s, j);
    u |= (((p >> 9) & 7u) | ((p >> 12) & 8u)) << (4 * j) | (((p >> 25) & 7u) | ((p >> 28) & 8u)) << (4 * j + 16);
  }
  return u;
}

// The 32-bit words of a byte array (little-endian, as the GPU stores them), each replaced by f(word).
template <class F>
DMOE_HOST_DEVICE void nvfp4_map_words(uint8_t* q, int64_t bytes, F f) {
  for (int64_t i = 0; i + 4 <= bytes; i += 4) {
    uint32_t w = 0;
    for (int b = 0; b < 4; ++b) w |= static_cast<uint32_t>(q[i + b]) << (8 * b);
    w = f(w);
    for (int b = 0; b < 4; ++b) q[i + b] = static_cast<uint8_t>(w >> (8 * b));
  }
}

// Standard packed weight bytes (a multiple of 4: rows of K % 16 == 0 values) into the prepared
// order, in place, and back.
DMOE_HOST_DEVICE void nvfp4_weight_bytes_encode(uint8_t* q, int64_t bytes) {
  nvfp4_map_words(q, bytes, [](uint32_t w) { return nvfp4_weight_word_encode(w); });
}
DMOE_HOST_DEVICE void nvfp4_weight_bytes_decode(uint8_t* q, int64_t bytes) {
  nvfp4_map_words(q, bytes, [](uint32_t w) { return nvfp4_weight_word_decode(w); });
}

}  // namespace dist_moe::numeric
