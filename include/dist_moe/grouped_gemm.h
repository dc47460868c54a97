// Grouped GEMMs of the routed experts on SM90 (H100/H200), FP32 accumulation: BF16 inputs, and
// FP8-blockwise inputs (E4M3 with FP32 1x128 / 128x128 block scales) for FPROP, W13 FPROP and DGRAD
// (GroupedGemmCommon's operand formats name the inputs, OperandScales their scales).
//
// Row buffers are grouped by expert: expert e owns rows [offset_e, offset_e + counts[e]) with
// offset_e = counts[0] + ... + counts[e-1]. `counts` is an int32 [e_local] array on the device
// (routing writes it); the kernels compute the offsets themselves, so no call reads counts on the
// host and every call is CUDA-graph capturable. Empty experts cost nothing. Rows past sum(counts)
// (up to m_capacity) are never written.
//
// Weights are [e_local, n, k] row-major: n output features of the forward GEMM, k input features
// (W13: n = 2F, k = D, rows [gate(F) | up(F)]; W2: n = D, k = F).
//
//   FPROP        out[m, :]   = a[m, :] . w[e(m)]^T                    [m_cap, k] -> [m_cap, n]
//   W13 FPROP    h1 = a . w13[e]^T (optional), h2 = SwiGLU(h1)         [m_cap, D] -> [m_cap, F]
//   DGRAD        grad_a[m, :] = grad_out[m, :] . w[e(m)]              [m_cap, n] -> [m_cap, k]
//   WGRAD        grad_w[e] = grad_out[rows_e]^T . a[rows_e]           -> [e_local, n, k]
//
// Options of the fused pipeline: a gather producer that reads A's rows through a table of row
// addresses (peer GPUs' memory over NVLink included) into a local buffer once per row, and a
// scatter epilogue that stores every output row through a table of destination addresses,
// optionally scaled per row.
//
// Device-side operand offsets: every row-buffer operand may carry `const int64_t* <name>_offset`,
// a device pointer to one int64 byte offset (a multiple of 128) that the kernel adds to the base
// pointer at run time; nullptr means 0. The device activation planner decides where x_gathered,
// h1, h2 and the gradients live inside the activation buffer, so no host read is needed and a
// captured CUDA graph replays correctly when the offset values change between replays. The base
// pointer and the offset together must address a tensor of the documented shape. Tensor maps of
// moved operands are patched per thread block in a small global workspace the library keeps per
// (device, stream): calls on one stream run one after another, calls on different streams never
// share it. (A graph captured on stream S keeps S's workspace: do not replay two graphs captured
// on the same stream concurrently.)
//
// All pointers are device pointers; every call is asynchronous on `stream`. Invalid arguments
// throw dist_moe::Error (kInvalidValue) naming the field and the bound; a device-side violation
// (negative count, counts summing past m_capacity, an offset that is not a multiple of 128 when
// validate_counts is on, 16 otherwise) traps.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dist_moe/config.h"
#include "dist_moe/dtype.h"
#include "dist_moe/grouped_gemm_config.h"

namespace dist_moe {


// Every compiled configuration of `op` (for tests and benchmarks that sweep them), then the
// dynamic-schedule twin (`_dyn`) of each one without clusters or swap-AB (any of those accepts
// dynamic_schedule; the twins put every one the heuristic may pick under the tests). The formats
// default to the BF16 kernels'; a format without kernels has no configurations. FP8-blockwise
// DGRAD (B = kFp8BlockwiseWeightT) lists the FPROP configurations it runs on.
std::vector<GroupedGemmConfig> grouped_gemm_configs(GroupedGemmOp op, DType out_dtype, bool gather,
                                                    const OperandFormat& a_format = {},
                                                    const OperandFormat& b_format = {});

// Dynamic shared memory the compiled kernel of `config` requests for `e_local` experts (the number
// the call checks against the device's opt-in limit before launching; it grows with the experts'
// scheduler tables). Throws kInvalidValue when no kernel of those formats has that configuration.
int grouped_gemm_smem_bytes(GroupedGemmOp op, DType out_dtype, bool gather, const OperandFormat& a_format,
                            const OperandFormat& b_format, const GroupedGemmConfig& config, int64_t e_local);

// Optional fused-dispatch producer: A's row m is read from row_ptrs[m] (k BF16 values, 16-byte
// aligned; nullptr = a zero row), written once to `gathered[m]` ([m_capacity, k] BF16, which then
// holds A, e.g. the x that WGRAD needs) and consumed from there.
struct GatherArgs {
  const void* const* row_ptrs = nullptr;  // [m_capacity]
  void* gathered = nullptr;               // [m_capacity, k] BF16
  int32_t* workspace = nullptr;           // grouped_gemm_gather_workspace_bytes(); zeroed by the call
  const int64_t* gathered_offset = nullptr;  // device byte offset added to `gathered` (nullptr = 0)
};
size_t grouped_gemm_gather_workspace_bytes(int64_t m_capacity, int64_t e_local);

// Optional fused-combine epilogue: output row m is stored at row_ptrs[m] (a row of the output
// width, 16-byte aligned, anywhere in this GPU's or a peer's memory; nullptr = not stored), after
// multiplying it by row_scale[m] when row_scale is set.
struct ScatterArgs {
  void* const* row_ptrs = nullptr;  // [m_capacity]
  const float* row_scale = nullptr;  // [m_capacity] or nullptr
};

// Block scales of operands whose format has them (OperandFormat::scale != kNone), as the
// quantizers write them (docs/formats.md "GPU layouts"). FP8 blockwise (kFp8BlockwiseRows x
// kFp8BlockwiseWeight for FPROP and W13 FPROP; DGRAD: x kFp8BlockwiseWeightT):
//   a   FP32 [c / 128, a_ld] k-block-major, c = the A rows' width (FPROP k, DGRAD n): the scale of
//       row m's block j at a[j * a_ld + m] (a_ld >= m_capacity, a multiple of 4: the rows stride)
//   b   FP32 [e_local, n / 128, k / 128] (a DeepSeek-V3 checkpoint's weight_scale_inv per expert);
//       DGRAD's transposed copy: [e_local, k / 128, n / 128]
// DGRAD with FP8 blockwise reads the weight's transposed copy, w = [e_local, k, n] E4M3 (E4M3
// wgmma has no transposed operands): a training PreparedWeight's dgrad fields
// (prepare_block_scaled_weight, prepare_fp8_blockwise_weight_from_checkpoint). Operands without
// scales take nullptr. The scales of A are indexed by row of A as given: a device-side offset of
// the A rows (a_offset, grad_out_offset) does not move them, so block-scaled A takes no offset
// (an argument error). FP8-blockwise kernels hold their stage ring, TMA staging and the scheduler's
// tables in shared memory like BF16's 128x256 TMA-store kernels, with no padded fallback: about
// 200 local experts at most (a larger e_local is an argument error naming the bytes).
struct OperandScales {
  const void* a = nullptr;  // FP32 (FP8 blockwise) or E8M0 bytes (MXFP8), as the format says
  int64_t a_ld = 0;
  const void* b = nullptr;
  // NVFP4: the weight's FP32 global_scale_inv [e_local] (b: its E4M3 scales [e_local * n, k/16];
  // the token rows carry theirs, a stays nullptr).
  const float* b_global = nullptr;
  // MXFP8 rows: A's E8M0 codes as k-block-major words -- the four codes of row r's 128-deep k block
  // kb at a + 4 (kb * a_ld + r), a_ld >= m_capacity (what the rows + columns quantizers write for
  // the layer, G86) -- instead of [m_capacity, k/32] bytes, rows a_ld >= k/32 bytes apart (a
  // multiple of 4; k/32 for a dense grid, 2F for the Mega MXFP8 h2 in place).
  bool a_kblock_words = false;
};

// Fields every call has.
struct GroupedGemmCommon {
  const int32_t* counts = nullptr;  // device [e_local]
  int64_t e_local = 0;
  int64_t m_capacity = 0;           // rows of every row buffer
  int64_t n = 0;                    // weight rows
  int64_t k = 0;                    // weight columns
  const GroupedGemmConfig* config = nullptr;  // override (tests, benchmarks); nullptr = heuristic
  // Run a small kernel first that checks the counts and prints a diagnostic before trapping
  // (the GEMM kernels themselves trap without a message). Turn off where routing already checked.
  bool validate_counts = true;
  // What the two input operands hold (grouped_gemm_config.h; A and B as GroupedGemmProblem names
  // them). Compiled: BF16 without scales (every op), and FP8 blockwise for FPROP, W13 FPROP and
  // DGRAD (BF16 output; no gather producer); any other pair throws
  // kInvalidValue naming both formats, before anything is launched.
  OperandFormat a_format;
  OperandFormat b_format;
  OperandScales scales;  // the operands' block scales, where their formats have them
  // The rows a call can use at most, when less than m_capacity (0: m_capacity); the heuristic's
  // size class reads it (GroupedGemmProblem::m_bound).
  int64_t m_bound = 0;
  // The token rows a call can route at most, without any per-expert padding (0: not known); the
  // width of a decode tile is chosen on it (GroupedGemmProblem::routed_rows_bound).
  int64_t routed_rows_bound = 0;
  // Swap-AB kernels (tokens on N): device [e_local] rows of each expert's segment that are tokens,
  // when fewer than counts (a layout padded per expert; tile_rows[e] <= counts[e], or the kernel
  // traps). The tiles cover only those rows: the rows after them in the segment are neither read as
  // tokens nor written. nullptr: counts. Other kernels ignore it.
  const int32_t* tile_rows = nullptr;
  // E4M3 operands: fold the tensor cores' partial sums into FP32 at least every promote_k of K (128,
  // 64 or 32). The FP8-blockwise 128x128 / 128x256 tiles promote every 128 (the recipe's scale block);
  // 64 and 32 run a heuristic-chosen 128x256 W13 tile as its "_p64" / "_p32" kernel (the MXFP8
  // training layer's W13: G158), a configuration override with a longer interval throws; the
  // swap-AB and MXFP8 per-32 tiles promote every 32 already.
  int promote_k = 128;
};

struct FpropArgs {
  GroupedGemmCommon common;
  const void* a = nullptr;   // [m_capacity, k] BF16 or E4M3 (a_format; unused with gather)
  const void* w = nullptr;   // [e_local, n, k] BF16 or E4M3 (b_format)
  void* out = nullptr;       // [m_capacity, n] BF16 (unused with scatter)
  GatherArgs gather;
  ScatterArgs scatter;
  // Device byte offsets (see the top of this file); nullptr = 0. a_offset is unused with gather
  // (gather.gathered_offset moves the gathered copy), out_offset with scatter.
  const int64_t* a_offset = nullptr;
  const int64_t* out_offset = nullptr;
};

struct W13FpropArgs {
  GroupedGemmCommon common;  // n = 2F, k = D
  const void* a = nullptr;   // [m_capacity, D] BF16 or E4M3 (a_format; unused with gather)
  const void* w13 = nullptr; // [e_local, 2F, D] BF16 or E4M3 (b_format), rows [gate | up]
  void* h1 = nullptr;        // [m_capacity, 2F] BF16, or nullptr to drop it
  void* h2 = nullptr;        // [m_capacity, F] BF16
  Activation activation = Activation::kSwiGLU;
  float swiglu_alpha = static_cast<float>(kSwigluClampAlphaDefault);
  float swiglu_limit = static_cast<float>(kSwigluClampLimitDefault);
  // FP32 [3]: #gate > clip_limit, #|up| > clip_limit, valid rows * F (strict comparisons, BF16 h1
  // values). Zeroed first unless accumulate_clip_stats. nullptr = not computed.
  float* clip_stats = nullptr;
  float clip_limit = static_cast<float>(kSwigluClampLimitDefault);
  bool accumulate_clip_stats = false;
  // Device [e_local]: the rows of each expert the statistics count, when `counts` include padding
  // rows (block-scaled layers: routing's unpadded counts); nullptr = all `counts` rows. The Mega
  // rows form (grouped_gemm_mega_mxfp8) also takes them as the real rows: h2 past them quantizes as
  // zeros there, as the staged quantizer makes padding rows -- so they must not be fewer than the
  // token rows W2 reads.
  const int32_t* clip_rows = nullptr;
  GatherArgs gather;
  // Device byte offsets (see the top of this file); nullptr = 0. a_offset is unused with gather.
  const int64_t* a_offset = nullptr;
  const int64_t* h1_offset = nullptr;
  const int64_t* h2_offset = nullptr;
};

struct DgradArgs {
  GroupedGemmCommon common;
  const void* grad_out = nullptr;  // [m_capacity, n] BF16 (unused with gather); FP8 blockwise: E4M3
  const void* w = nullptr;         // [e_local, n, k] BF16; FP8 blockwise: the E4M3 copy [e_local, k, n]
  void* grad_a = nullptr;          // [m_capacity, k] (unused with scatter)
  DType out_dtype = DType::kBFloat16;  // kBFloat16 or kFloat32 (scatter: BF16 only)
  bool accumulate = false;         // grad_a += result (FP32 sum, one rounding)
  GatherArgs gather;               // gathers grad_out
  ScatterArgs scatter;
  // Device byte offsets (see the top of this file); nullptr = 0. grad_out_offset is unused with
  // gather, grad_a_offset with scatter.
  const int64_t* grad_out_offset = nullptr;
  const int64_t* grad_a_offset = nullptr;
};

// FP8 blockwise (a_format = b_format = kFp8BlockwiseRowsT): grad_out and a are the quantizers'
// transposed columns, E4M3 [n, m_capacity] and [k, m_capacity] with scales.a [m_capacity/128, n]
// (scales.a_ld = n) and scales.b [m_capacity/128, k]; every expert's token segment is whole
// 128-token blocks, so counts are the padded counts (multiples of 128, checked on the device) and
// m_capacity a multiple of 128; no device offsets, except for a compact `a` (a_compact_rows).
struct WgradArgs {
  GroupedGemmCommon common;
  const void* grad_out = nullptr;  // [m_capacity, n] BF16 (FP8 blockwise: see above)
  const void* a = nullptr;         // [m_capacity, k] BF16
  void* grad_w = nullptr;          // [e_local, n, k]
  DType out_dtype = DType::kFloat32;  // kBFloat16 or kFloat32
  bool accumulate = false;         // grad_w += result (BF16 with the TMA writer: result rounded to BF16,
                                   // then added by TMA reduce-add); otherwise empty experts get zeros
  // Device byte offsets of the two row buffers (see the top of this file); nullptr = 0.
  const int64_t* grad_out_offset = nullptr;
  const int64_t* a_offset = nullptr;
  // FP8 blockwise: `a` is a compact column bundle (quant::QuantizedOut::compact, the layer's saved
  // x / h2 columns) at a + *a_offset: E4M3 [k, R], R = *a_compact_rows read on the device (the sum
  // of the padded counts, a multiple of 128), then its FP32 scales [R / 128, k] at
  // align128(k * R); scales.b must be nullptr. The kernel's tensor map takes R as its row length
  // at run time, so no host read is needed (graph-safe).
  const int32_t* a_compact_rows = nullptr;
};

// The heuristic's view of a call (what select_grouped_gemm_config reads): its common fields, the
// output dtype and the options that change the pick -- the problem every call above builds before
// it chooses a configuration (benchmarks and tools print that pick with it).
GroupedGemmProblem grouped_gemm_problem(GroupedGemmOp op, const GroupedGemmCommon& common,
                                        DType out_dtype = DType::kBFloat16, bool gather = false,
                                        bool scatter = false, bool accumulate = false);

void grouped_gemm_fprop(const FpropArgs& args, cudaStream_t stream);
void grouped_gemm_w13_fprop(const W13FpropArgs& args, cudaStream_t stream);
void grouped_gemm_dgrad(const DgradArgs& args, cudaStream_t stream);
void grouped_gemm_wgrad(const WgradArgs& args, cudaStream_t stream);

// ---- the Mega pipeline's launches (issue #28; docs/grouped_gemm.md "Mega") -------------------------
// W13 FPROP + SwiGLU, the h2 hand-off and W2 FPROP in one persistent kernel: the two calls the NVFP4
// staged pipeline makes at decode (expanded token rows, 16-token swap-AB tiles), with the h2
// quantization and expansion between them done per chunk (an expert's 16-token tile) by the
// warpgroup that finishes the chunk's last W13 tile, and each W2 tile waiting only for its chunk.
// The outputs are the staged pipeline's bit for bit: h3 (w2's out or scatter rows), the packed h2
// rows, the clip statistics. Requirements beyond the two calls' own (a clear error otherwise):
// A = kNvfp4ExpandedRows and B = kNvfp4Weight in both; the same counts, tile_rows (set), e_local and
// m_capacity; w2.a == w13.h2 (the BF16 h2 [m_capacity, F] becomes the expanded FP16 h2 in place) and
// w2.common.scales.a == w13.common.scales.a (the token_scale_inv array [m_capacity]: h2's replace x's
// chunk by chunk); no h1, gather, device offsets or configuration override. The tiles cover the
// tile_rows of each expert only, so rows past them are neither read nor written.
// Every Mega launch keeps its chunk counters and tile counter in a per-(device, stream) slot the
// library owns (reset by a memset node before each launch, so graph replays are safe in stream
// order): launches that may run at the same time -- graphs captured on one stream and replayed
// concurrently on others included -- must be issued on different streams.
struct MegaNvfp4Handoff {
  uint8_t* packed_h2 = nullptr;  // [m_capacity] packed NVFP4 h2 rows, packed_stride bytes apart
  int64_t packed_stride = 0;     // >= nvfp4_packed_row_bytes(F), a multiple of 16
  // The gather of x inside the launch (nullptr: w13.a already holds the expanded x rows): row m's
  // packed NVFP4 row at x_rows[m] [m_capacity] (a dispatch window, 16-byte aligned; nullptr: a zero
  // row, never read for token rows), expanded into w13.a and its token_scale_inv into scales.a, chunk
  // by chunk, as nvfp4_expand_rows would; each chunk's W13 tiles wait only for their chunk's rows.
  const void* const* x_rows = nullptr;
};
void grouped_gemm_mega_nvfp4_decode(const W13FpropArgs& w13, const FpropArgs& w2, const MegaNvfp4Handoff& handoff,
                                    cudaStream_t stream);
// The same for MXFP8 (A = kMxfp8Rows, B = kMxfp8Weight; the 16-token swap-AB tiles on E4M3 rows):
// each chunk's h2 rows are quantized in place of the BF16 rows -- row m's E4M3 bytes at
// (uint8_t*)h2 + 2F m, its F/32 E8M0 codes right after them -- so w2.a == w13.h2 and w2.common.scales
// = {a: (uint8_t*)w13.h2 + F, a_ld: 2F, a_kblock_words: false}; the bytes are the MXFP8 row
// quantizer's (h3 is the staged pipeline's bit for bit).
// x_rows: the gather of x inside the launch, as for NVFP4 (row m's packed MXFP8 row [D E4M3 | D/32
// E8M0], 16-byte aligned, copied into w13.a and its scales.a rows, as mxfp8_gather_packed_rows would; scales.a then
// [m_capacity, D/32] bytes); nullptr: w13.a already holds the row bundle.
void grouped_gemm_mega_mxfp8_decode(const W13FpropArgs& w13, const FpropArgs& w2, cudaStream_t stream,
                                    const void* const* x_rows = nullptr);
// MXFP8 on the 128x128 tiles (the staged FPROPs' tile beyond decode: mid-sized and prefill-sized
// inference): a chunk is an expert's 128-row M tile, and the W13 epilogue writes h2 as MXFP8 rows
// straight into W2's operand (no BF16 h2, no hand-off): w13.h2 == w2.a, E4M3 [m_capacity, F], its codes
// at w2.common.scales (a_ld F/32 bytes per row, or k-block-major words of four codes [F/128, a_ld]
// with a_kblock_words); the bytes are the row quantizer's on the BF16 h2 the staged W13 writes, and
// h3 is the staged pipeline's bit for bit. The tiles cover each expert's whole segment (tile_rows is
// not used); rows past a segment's count are not written. x_rows as for the decode form.
// Training (the forward's saved state, as the staged pipeline writes it): w13.h1 (at w13.h1_offset
// too) is stored, and h2_columns names h2's compact MXFP8 column bundle (32 x 1 blocks along the
// rows, quant::QuantizedOut::compact's layout: E4M3 [F, R] at base + *offset, its E8M0 codes
// [R / 32, F] after it; R = *rows, the rows of all segments -- each a multiple of 32 rows, as the
// layer pads them), the bytes of the rows + columns quantizer on the BF16 h2 with w13.clip_rows as
// the real rows (rows past them quantize as zeros, in the rows and the columns).
struct Mxfp8Columns {
  uint8_t* base = nullptr;          // nullptr: no columns
  const int64_t* offset = nullptr;  // device byte offset (nullptr: none)
  const int32_t* rows = nullptr;    // device: R
};
void grouped_gemm_mega_mxfp8(const W13FpropArgs& w13, const FpropArgs& w2, cudaStream_t stream,
                             const void* const* x_rows = nullptr, const Mxfp8Columns& h2_columns = {});

// The Mega pipeline's MXFP8 backward (so far): W2 DGRAD with the SwiGLU backward and dxy's MXFP8
// quantization in its epilogue, on the MXFP8 128x128 tile. It replaces the staged pair
// grouped_gemm_dgrad (A = kMxfp8Rows: grad_h3's row bundle; B = kMxfp8WeightT: W2's transposed copy;
// n = D, k = F) -> quant::mxfp8_swiglu_backward_quantize, bit for bit: dxy = [dgate | dup] from the BF16
// grad_h2 that DGRAD would write and h1, as E4M3 rows [m_capacity, 2F] and their E8M0 codes, and, when
// columns.base is set, dxy's compact column bundle (2F columns; segments of whole 32-row blocks). Rows
// of a segment past real_rows[e] are quantized as zeros (the padding); rows past the segments are not
// written. grad_h2 is never stored: `dgrad` takes no grad_a, scatter, gather, accumulation, device
// offset or configuration override.
struct SwigluBackwardMxfp8Args {
  const void* h1 = nullptr;            // [m_capacity, 2F] BF16, [gate | up] (the forward's)
  const int64_t* h1_offset = nullptr;  // device byte offset of h1 (nullptr: none)
  const int32_t* real_rows = nullptr;  // device [e_local] token rows per segment (nullptr: counts)
  Activation activation = Activation::kSwiGLU;
  float swiglu_alpha = static_cast<float>(kSwigluClampAlphaDefault);
  float swiglu_limit = static_cast<float>(kSwigluClampLimitDefault);
  void* dxy = nullptr;                 // E4M3 [m_capacity, 2F]
  // dxy's codes: [m_capacity, scale_ld] bytes (scale_ld >= 2F/32, a multiple of 4), or with
  // scale_kblock_words k-block-major words [2F/128, scale_ld] (scale_ld >= m_capacity), as
  // OperandScales::a_kblock_words -- the layout W13 DGRAD then reads.
  uint8_t* dxy_scales = nullptr;
  int64_t scale_ld = 0;
  bool scale_kblock_words = false;
  Mxfp8Columns columns;                // dxy's column bundle (training's W13 WGRAD operand)
};
void grouped_gemm_dgrad_swiglu_mxfp8(const DgradArgs& dgrad, const SwigluBackwardMxfp8Args& swiglu,
                                     cudaStream_t stream);

}  // namespace dist_moe
