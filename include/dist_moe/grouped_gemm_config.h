// What a grouped GEMM call is and how it runs: the ops, the tile configuration, and the heuristic
// that picks one from host-known sizes (src/core/gemm_config.cpp). No CUDA here: the heuristic is
// host logic, built into the core library and tested on the CPU (tests/cpu/test_gemm_config.cpp);
// the kernels and their launch API are in grouped_gemm.h.
#pragma once

#include <cstdint>
#include <string>

#include "dist_moe/dtype.h"

namespace dist_moe {

enum class GroupedGemmOp {
  kFprop,        // plain FPROP (W2, or W13 without SwiGLU)
  kFpropSwiglu,  // W13 FPROP with the SwiGLU epilogue
  kDgrad,
  kWgrad,
};
const char* to_string(GroupedGemmOp op);

// How an operand's values are scaled, per block of consecutive elements along K (rows x columns of
// the block in the operand's [rows, K] view). kNone (BF16), FP8 blockwise (kFp8BlockwiseRows x
// kFp8BlockwiseWeight for FPROP and W13 FPROP, x kFp8BlockwiseWeightT for DGRAD, kFp8BlockwiseRowsT
// for WGRAD) and MXFP8 (kMxfp8Rows x kMxfp8Weight for FPROP and W13 FPROP, x kMxfp8WeightT for
// DGRAD) and NVFP4 (kNvfp4Rows or kNvfp4ExpandedRows x kNvfp4Weight, FPROP and W13 FPROP, swap-AB
// tiles) have kernels;
// MXFP8 WGRAD is still to come (docs/formats.md).
enum class ScaleKind {
  kNone,
  kE8M0_1x32,             // MXFP8 activations: one E8M0 power of two per 1 x 32
  kE8M0_32x32,            // MXFP8 weights: one E8M0 per 32 x 32 tile
  kFP32_1x128,            // FP8 blockwise activations: one FP32 per 1 x 128
  kFP32_128x128,          // FP8 blockwise weights: one FP32 per 128 x 128 tile
  kE4M3_1x16_FP32Global,  // NVFP4: one E4M3 per 1 x 16 and one FP32 per tensor
};
const char* to_string(ScaleKind scale);

// Memory order of an operand as the op's arguments describe it (grouped_gemm.h): row-major is the
// documented shape with its last dimension contiguous ([m, k] rows, [e, n, k] weights). Which of
// the GEMM's dimensions that makes contiguous (K-major or MN-major) follows from the op.
// kPackedRows: NVFP4 token rows packed as [K/2 E2M1 | K/16 E4M3 | FP32 token_scale_inv | pad to 16]
// (quant::nvfp4_packed_row_bytes apart), scales and the row's FP32 inside the row.
// kExpandedRows: NVFP4 token rows expanded to FP16 [m_capacity, K] -- each element e2m1 x s x 2^-7
// exactly, K permuted within every 256 in the NVFP4 kernels' order (quant::nvfp4_expand_rows) --
// with the FP32 token_scale_inv [m_capacity] in scales.a.
enum class OperandLayout { kRowMajor, kColumnMajor, kPackedRows, kExpandedRows };

// What an operand holds: element type, block scales, memory order.
struct OperandFormat {
  DType data = DType::kBFloat16;
  ScaleKind scale = ScaleKind::kNone;
  OperandLayout layout = OperandLayout::kRowMajor;

  constexpr bool operator==(const OperandFormat& o) const {
    return data == o.data && scale == o.scale && layout == o.layout;
  }
  constexpr bool operator!=(const OperandFormat& o) const { return !(*this == o); }
  // "bf16", "e4m3_e8m0_1x32", "e2m1x2_e4m3_1x16_fp32g", + "_col" for column-major: letters,
  // digits and '_' only, so test names can carry it.
  std::string name() const;
};

// The FP8-blockwise operands (DeepSeek-V3 recipe; docs/formats.md "GPU layouts"): E4M3 rows with
// one FP32 scale per 1 x 128, and E4M3 weights with one FP32 scale per 128 x 128.
inline constexpr OperandFormat kFp8BlockwiseRows{DType::kFloat8E4M3, ScaleKind::kFP32_1x128, OperandLayout::kRowMajor};
inline constexpr OperandFormat kFp8BlockwiseWeight{DType::kFloat8E4M3, ScaleKind::kFP32_128x128,
                                                   OperandLayout::kRowMajor};
// The weight's transposed copy [e, k, n] (column-major [e, n, k]; scales [e, k/128, n/128]): what
// DGRAD reads, since E4M3 wgmma takes K-major operands only (the contraction runs over n).
inline constexpr OperandFormat kFp8BlockwiseWeightT{DType::kFloat8E4M3, ScaleKind::kFP32_128x128,
                                                    OperandLayout::kColumnMajor};
// The MXFP8 operands (docs/formats.md "GPU layouts"): E4M3 rows with one E8M0 per 1 x 32 (scales
// [rows, K/32]), and training weights as 32 x 32 tiles read through their FPROP scale view
// [E * N, K/32] (what mxfp8_quantize_weight_tiles / prepare_block_scaled_weight write).
inline constexpr OperandFormat kMxfp8Rows{DType::kFloat8E4M3, ScaleKind::kE8M0_1x32, OperandLayout::kRowMajor};
inline constexpr OperandFormat kMxfp8Weight{DType::kFloat8E4M3, ScaleKind::kE8M0_32x32, OperandLayout::kRowMajor};
// Its transposed copy [e, k, n] with the DGRAD scale view [E * K, N/32]: what MXFP8 DGRAD reads
// (E4M3 wgmma takes K-major operands only; upstream's one qdata serves MN-major MMAs on SM100).
inline constexpr OperandFormat kMxfp8WeightT{DType::kFloat8E4M3, ScaleKind::kE8M0_32x32, OperandLayout::kColumnMajor};
// Row buffers given transposed, [features, tokens] with 1 x 128 blocks along tokens (the
// quantizers' WGRAD columns; scales [tokens / 128, features]): both operands of FP8 WGRAD.
// NVFP4 inference (mainloop_nvfp4_swap_ab.cuh): the tokens' packed rows, and the prepared weight
// [e, n, k/2] E2M1 with E4M3 scales [e, n, k/16] and the per-expert FP32 global_scale_inv.
inline constexpr OperandFormat kNvfp4Rows{DType::kFloat4E2M1x2, ScaleKind::kE4M3_1x16_FP32Global,
                                          OperandLayout::kPackedRows};
inline constexpr OperandFormat kNvfp4Weight{DType::kFloat4E2M1x2, ScaleKind::kE4M3_1x16_FP32Global,
                                            OperandLayout::kRowMajor};
// The same token rows expanded once per call (prefill-sized NVFP4 contexts): the GEMM's TMA loads
// them as they are and no producer warp converts tokens (kExpandedRows above).
inline constexpr OperandFormat kNvfp4ExpandedRows{DType::kFloat16, ScaleKind::kE4M3_1x16_FP32Global,
                                                  OperandLayout::kExpandedRows};
inline constexpr OperandFormat kFp8BlockwiseRowsT{DType::kFloat8E4M3, ScaleKind::kFP32_1x128,
                                                  OperandLayout::kColumnMajor};

// How a grouped GEMM runs. Tiles are BM x BN outputs with a 64-deep contraction step.
struct GroupedGemmConfig {
  int block_m = 128;
  int block_n = 256;
  int block_k = 64;
  int stages = 4;        // TMA pipeline depth
  // CTAs per cluster along M: 2 = pairs of M tiles share B through TMA multicast (compiled for
  // FPROP, W13 SwiGLU and WGRAD without gather; static schedule only; docs/grouped_gemm.md `_c2`).
  int cluster_m = 1;
  int num_sms = 0;       // persistent CTAs; 0 = every SM of the device
  bool swap_ab = false;  // decode: weights on the wgmma M dimension, tokens on N
  bool gather = false;   // A produced by the gather producer (set from the arguments)
  // The two consumer warpgroups take alternate tiles (each owns a whole BM x BN tile) instead of
  // sharing every tile, so one's epilogue overlaps the other's tensor-core work.
  bool pingpong = false;
  // The epilogue stages each 64-row block in shared memory and stores it with TMA, asynchronously
  // (partial blocks, scatter and BF16 accumulation still use ordinary stores).
  bool tma_store = false;
  // Tiles are handed out at run time from a global atomic counter (in the static schedule's linear
  // order) instead of round-robin: tiles start in order whatever earlier tiles cost, so ragged
  // expert rows neither unbalance the CTAs nor separate the M tiles that share a weight panel in L2
  // (docs/perf.md G8/G9). Same kernels (a run-time switch); the counter is a per-(device, stream)
  // slot the library keeps, so calls that may overlap must be on different streams.
  bool dynamic_schedule = false;
  // MXFP8 128x128 tiles holding at most 64 rows of their expert: both warpgroups contract those
  // rows, one 64-column slice each, instead of warpgroup 0 alone (mainloop_mxfp8.cuh; G99). Same
  // kernels (a run-time switch), the same bits; false only for A/B runs ("_nosplit"). Other
  // kernels ignore it.
  bool narrow_split = true;
  // MXFP8 only: the baseline kernel that dequantizes both operands to BF16 in its producer warps
  // for BF16 wgmma (issue #25; "_dq", 128x128x128_s4), instead of E4M3 wgmma with per-32
  // promotion. Never the heuristic's pick: for A/B runs and overrides.
  bool mxfp8_dequant = false;
  // FP8-blockwise 128x256 W13 only: the kernels that promote into FP32 every 64 or 32 of K instead of
  // every 128 ("_p64", "_p32"; GroupedGemmCommon::promote_k says when a call needs them).
  int promote_k = 128;

  // "128x256x64_s4" (+ "_c2", "_pp", "_tma", "_dyn", "_nosplit", "_swapab", "_gather", "_dq", "_p64"); what
  // overrides and the benchmark print.
  std::string name() const;
};

// What the heuristic may look at: only host-known sizes (never the counts).
struct GroupedGemmProblem {
  GroupedGemmOp op = GroupedGemmOp::kFprop;
  int64_t m_capacity = 0;
  // The rows the call may use at most, when the caller knows a bound below m_capacity (block-scaled
  // layers: their buffers keep upstream's 128-row padding per expert, routing pads to 32); 0 =
  // m_capacity. The size class (decode or not) is decided on it.
  int64_t m_bound = 0;
  // The token rows the call can route at most, without the per-expert padding (block-scaled
  // layers: T * K * capacity factor); 0 = not known. Divided by e_local it is the average token
  // count per expert that decides how wide a block-scaled decode tile over the real rows is
  // (with tile_rows; gemm_config.cpp).
  int64_t routed_rows_bound = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t e_local = 0;
  DType out_dtype = DType::kBFloat16;
  bool gather = false;
  bool scatter = false;  // output rows stored through a row-address table (fused combine)
  bool accumulate = false;  // the output is added to (DGRAD, WGRAD), not overwritten
  // The operands as the op names them (FPROP: a rows, b weights; DGRAD: a grad_out, b weights;
  // WGRAD: a grad_out, b x rows). Kernels: BF16 without scales; FP8 blockwise for FPROP, W13 FPROP
  // and DGRAD.
  OperandFormat a_format;
  OperandFormat b_format;
  // The call gives its experts' token rows (GroupedGemmCommon::tile_rows): a swap-AB tile then
  // covers the real rows of a padded segment, so a 16-token tile costs one pass per small expert
  // (MXFP8 picks its 16-token decode tile only then: its training layers pad without giving them).
  bool tile_rows = false;
  // The call's promotion interval (GroupedGemmCommon::promote_k): an FP8-blockwise non-swap-AB pick
  // takes the kernel of its tile that promotes that often ("_p64" / "_p32").
  int promote_k = 128;
};

// Block-scaled decode tiles over the real rows (GroupedGemmProblem::tile_rows) take 16 tokens up to
// this average of routed rows per local expert, a wider tile above it (gemm_config.cpp says why);
// NVFP4 inference contexts expand their tokens to FP16 rows up to the same average
// (nvfp4_expands_token_rows), where the 16-token tile on expanded rows is picked.
inline constexpr int64_t kNarrowDecodeRowsPerExpert = 12;
// FP8-blockwise W13 takes its swap-AB decode tile up to this average of token rows per local expert
// (routing's padding left out), the 128-row tiles above it; plain FPROP (W2) the 128-row tiles at
// every size since session 47 (gemm_config.cpp says why).
inline constexpr int64_t kFp8SwapAbMaxRowsPerExpert = 16;
// FP8-blockwise WGRAD takes the 128x128 tile up to this average of token rows per local expert
// (one or two 128-deep k blocks per tile: bound by the reduce-adds into the gradients), 128x256
// above it (gemm_config.cpp says why).
inline constexpr int64_t kFp8WgradNarrowRowsPerExpert = 256;

// The one place tile shapes are chosen (src/core/gemm_config.cpp; each branch says why), one
// function per op. The picks are the BF16 kernels' (the only operand formats compiled); the host
// API rejects any other format before choosing.
// DMOE_GEMM_EXPERIMENTAL=1 makes it pick the not-yet-measured variants (today: the same tiles
// with dynamic_schedule), for A/B runs; unset, the picks are the measured defaults.
GroupedGemmConfig select_grouped_gemm_config(const GroupedGemmProblem& problem, int device_num_sms);
bool grouped_gemm_experimental_requested();
// GroupedGemmConfig::narrow_split of the heuristic's picks and of the Mega launches: true unless
// DMOE_MXFP8_NARROW_SPLIT=0 (A/B runs of whole layers).
bool mxfp8_narrow_split_enabled();
// GroupedGemmConfig::block_k of the kernels for operand formats a x b: the K values of one stage row.
int grouped_gemm_block_k(const OperandFormat& a, const OperandFormat& b);

}  // namespace dist_moe
