// GPU block quantizers: BF16 in, MXFP8 / NVFP4 / FP8-blockwise out, bit-identical to the CPU
// oracle (the per-block math is include/dist_moe/device/numeric/, shared by both). Every launcher
// enqueues on `stream`, never synchronizes and reads no device value on the host, so each one is
// CUDA-graph capturable. Byte layouts and formulas: docs/formats.md "GPU layouts".
//
// Output descriptors are strided, so a quantizer can write into a packed row (the dispatch
// window's [q | scales | ...] rows) as well as into plain matrices:
//   q element (r, c)     at q[r * q_row_stride + c]                (bytes; NVFP4: c / 2)
//   scale of block (r, b) at scales[r * scale_row_stride + b * scale_block_stride]
// "Transposed" outputs (the WGRAD operands) are the row quantization of the transposed matrix:
// rows are features, the blocks run along tokens, tokens are contiguous (K-major, as FP8 wgmma
// needs for both operands).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dist_moe/device/activation/swiglu.cuh"
#include "dist_moe/device/common/device_address.h"
#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"

namespace dist_moe::quant {

// A BF16 row-major matrix in device memory (row_stride in elements, >= cols).
struct Bf16Matrix {
  const void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
  // Gathered rows (the rows+cols quantizers only: mxfp8_ and fp8_blockwise_quantize_rows_cols, one
  // kernel): when set, row r is read from row_ptrs[r] (`cols` BF16 values, 16-byte aligned, in this
  // GPU's or a peer's memory; nullptr = a zero row); `data` and `row_stride` are then unused. The
  // routing table's gather_src / grad_gather_src: [rows] device pointers, padding rows nullptr;
  // entries at or past offsets_G1[G] are not read. Every other launcher rejects it.
  const void* const* row_ptrs = nullptr;
  // Scaled rows (the rows+cols quantizers only, like row_ptrs): when set, row r's values are
  // bf16_rne(row_scales[r] * value) (one FP32 product, then RNE) -- the top-k backward's grad_h3 =
  // score * grad_out, read from the owners' token rows instead of route rows written out first
  // (perf_history G144). A NaN scale marks a row whose values are +0 (a -1 route's zero gradient).
  // [rows] FP32, device memory; entries of padding rows are not used.
  const float* row_scales = nullptr;
};

// The compact MXFP8 column bundle's layout (QuantizedOut / QuantizedIn::compact): numeric/mxfp8.cuh.
using numeric::mxfp8_compact_columns_bytes;
using numeric::mxfp8_compact_columns_scales_offset;

template <class Scale>
struct QuantizedOut {
  uint8_t* q = nullptr;
  int64_t q_row_stride = 0;
  Scale* scales = nullptr;
  int64_t scale_row_stride = 0;
  int64_t scale_block_stride = 0;
  // Compact columns: the layout of upstream's column bundle, sized by the rows actually used,
  // R = offsets_G1[num_groups] (read on the device): q [C, R] (row stride R) at q + *q_offset, its
  // scales at q + *q_offset + align128(C * R), token-block-major -- MXFP8: E8M0 [R / 32, C] (row
  // stride 1, block stride C); FP8 blockwise: FP32 [R / 128, C] --; the stride and scale fields are
  // ignored. q_offset: device int64 byte offset (nullptr = 0, a multiple of 128; q 16-byte
  // aligned). Column outputs and inputs only (the rows+columns quantizers' `cols`,
  // mxfp8_dequantize_columns' input); every other operand rejects it.
  bool compact = false;
  const int64_t* q_offset = nullptr;
  // MXFP8 row outputs of the rows + columns quantizers only (mxfp8_quantize_rows_cols, the fused
  // SwiGLU backward): when > 0, the scales are k-block-major words, the four codes of row r's
  // 128-column block j at scales[4 (j * scale_word_ld + r) + 0..3] (scale_word_ld >= the row
  // capacity; the stride fields are ignored) -- the MXFP8 GEMMs' OperandScales::a_kblock_words
  // (G86). Every other output rejects it.
  int64_t scale_word_ld = 0;
  DMOE_HOST_DEVICE bool present() const { return q != nullptr; }
};
using Mxfp8Out = QuantizedOut<uint8_t>;        // E4M3 data, E8M0 scales
using Fp8BlockwiseOut = QuantizedOut<float>;   // E4M3 data, FP32 scales (dequantization factors)

// Expert-major rows as routing lays them out: group g owns rows [offsets_G1[g], offsets_G1[g+1]),
// of which the first counts_G[g] are real and the rest padding. Device arrays; the host knows
// only the capacity (rows of the buffer), which sizes the grid. The rows + columns quantizers, the
// fused SwiGLU backward and the column dequantizer require counts_G; nvfp4_expand_rows takes a null
// counts_G as "every row of a group is real".
struct RowGroups {
  const int32_t* counts_G = nullptr;
  const int32_t* offsets_G1 = nullptr;
  int32_t num_groups = 0;
};

// ---- MXFP8 E4M3 (32-element blocks, E8M0 RCEIL scales) -----------------------------------------

// 1x32 blocks along cols. cols % 32 == 0. Activations (FPROP/DGRAD operands) and inference weights.
void mxfp8_quantize_rows(const Bf16Matrix& x, const Mxfp8Out& out, cudaStream_t stream);

// Both orientations from one read of expert-major rows x [capacity, D]: `rows` (1x32 along D) and
// `cols` (32x1 along tokens, written transposed: q [D, capacity], scales per (feature, 32 tokens) at
// any strides; token-block-major [capacity / 32, D], the compact bundle's, stores whole lines).
// Either output may be absent. Padding rows quantize as zeros; rows at or past offsets_G1[G] are
// not touched. Group offsets must be multiples of 32 (checked on the device: a trap with a message).
// x may be gathered (x.row_ptrs: row r from row_ptrs[r], the same bytes out as from a contiguous
// x); `cols` may be compact (cols.compact: the bundle [C, R] + scales at a device offset, sized by
// R = offsets_G1[G] <= capacity; a q_offset that is not a multiple of 128 traps); `rows` may not.
void mxfp8_quantize_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const Mxfp8Out& rows,
                              const Mxfp8Out& cols, cudaStream_t stream);

// Training weights w [E, N, K] as 32x32 tiles: one qdata [E*N, K], FPROP scales [E*N, K/32] and
// DGRAD scales [E*K, N/32] (natural row-major); and, when q_t_EKN is given (16-byte aligned), the
// same E4M3 bytes transposed per expert, q_t [E*K, N] (per expert [K, N]), from the same read: the
// K-major B operand the MXFP8 DGRAD reads with the DGRAD scales as they are (no requantization, no
// scale of its own; the FP8-blockwise argument order: data, scales, transposed data, its scales).
// N, K % 32 == 0.
void mxfp8_quantize_weight_tiles(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                 uint8_t* fprop_scales, uint8_t* q_t_EKN, uint8_t* dgrad_scales, cudaStream_t stream,
                                 bool at_shared_scales = false);
// at_shared_scales (the prepared training weight since session 72, perf_history G151): the tiles at
// shared scales per 128x128 block -- q and q_t hold each code re-rounded at the largest of the block's
// sixteen tile codes (numeric::mxfp8_tiles_at_shared_scales) and both grids hold that code for all sixteen
// tiles: still an MXFP8 weight (any per-32 reader gets the same values), and with
// mxfp8_weight_block_scales the FP8-blockwise FPROP's and DGRAD's weight operands. N, K % 128 == 0, q_t given.
// Without the transposed copy (upstream's one qdata for FPROP and DGRAD; the prepared training
// weight, prepare_block_scaled_weight, always writes the copy: the tests and benches use this).
void mxfp8_quantize_weight_tiles(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                 uint8_t* fprop_scales, uint8_t* dgrad_scales, cudaStream_t stream);
// The same with a fixed CTA region of 2^log2_region_n x 2^log2_region_k 128x128 tiles (each side
// 1 .. 8 tiles); the launchers above pick it from the shape and the device (tests sweep all).
void mxfp8_quantize_weight_tiles_in_regions(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k,
                                            uint8_t* q_ENK, uint8_t* fprop_scales, uint8_t* q_t_EKN,
                                            uint8_t* dgrad_scales, int log2_region_n, int log2_region_k,
                                            cudaStream_t stream, bool at_shared_scales = false);
void mxfp8_quantize_weight_tiles_in_regions(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k,
                                            uint8_t* q_ENK, uint8_t* fprop_scales, uint8_t* dgrad_scales,
                                            int log2_region_n, int log2_region_k, cudaStream_t stream);

// The WGRAD column operand back to BF16 rows: `cols` as mxfp8_quantize_rows_cols writes it (q
// [D, capacity] at q[d * q_row_stride + m], q_row_stride % 16 == 0 and q 16-byte aligned; the E8M0
// scale of feature d, token block m / 32 at scales[d * scale_row_stride + (m / 32) *
// scale_block_stride]) -> y [capacity, D] (y.rows = capacity, y.cols = D, row stride in elements, a
// multiple of 8, 16-byte aligned). A real row's element is
// float_to_bf16(mxfp8_dequantize_value(q, scale)) (RNE; exact -- the BF16 value is the FP32 product
// itself -- for every code the quantizer writes from BF16 input, except the products >= 2^128, which
// are +-Inf in FP32 and in BF16 both: docs/formats.md "GPU layouts"); a padding row (past its
// expert's count) is +0 whatever its block holds (a NaN block's padding too); rows at or past
// offsets_G1[G] are not touched (neither read nor written). Group offsets multiples of 32 (checked
// on the device: a trap with a message), 1 .. 1024 groups. D % 32 == 0. `cols` may be compact
// (QuantizedIn::compact: the bundle mxfp8_quantize_rows_cols writes with a compact `cols`).
struct Bf16MatrixOut {
  void* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};
template <class Scale>
struct QuantizedIn {
  const uint8_t* q = nullptr;
  int64_t q_row_stride = 0;
  const Scale* scales = nullptr;
  int64_t scale_row_stride = 0;
  int64_t scale_block_stride = 0;
  // Compact columns, as QuantizedOut's: q [C, R] at q + *q_offset, scales [R / 32, C] after it at
  // align128(C * R), R = offsets_G1[num_groups] read on the device; strides and scales ignored.
  bool compact = false;
  const int64_t* q_offset = nullptr;
};
using Mxfp8In = QuantizedIn<uint8_t>;
void mxfp8_dequantize_columns(const Mxfp8In& cols, const RowGroups& groups, const Bf16MatrixOut& y,
                              cudaStream_t stream);

// The WGRAD column operand as the FP8-blockwise WGRAD reads it (Hopper's MXFP8 WGRAD; perf_history
// G149, docs/formats.md "MXFP8 WGRAD operands"): `cols` as mxfp8_quantize_rows_cols writes them (C
// features, strided or compact; group offsets multiples of 32, checked on the device) -> `out`,
// strided columns (q [C, *] with row stride >= capacity, a multiple of 16 bytes; FP32 scale of feature
// c, 128-token block b at scales[c * scale_row_stride + b * scale_block_stride]) where group g's
// tokens start at P_g = the earlier groups' rows each rounded up to 128 and run to P_g + that
// rounding of its own: the four 32-token blocks of a 128-token block at their shared scale
// (numeric::mxfp8_code_at_shared_scale, the largest of their E8M0 codes as 2^(M - 127)), padding rows
// (past counts_G) and the tokens that round the group up to 128 +0. padded_counts_G[g] gets group g's
// rounded rows: the WGRAD's counts. Tokens past the last group's rounded end are not written; that
// end must fit the capacity (checked on the device: a trap with a message). capacity % 128 == 0,
// C % 32 == 0, 1 .. 1024 groups.
void mxfp8_columns_to_fp8_blockwise(const Mxfp8In& cols, const RowGroups& groups, int64_t C, int64_t capacity,
                                    const Fp8BlockwiseOut& out, int32_t* padded_counts_G, cudaStream_t stream);

// The DGRAD's A operand as the FP8-blockwise DGRAD reads it (perf_history G150), in place: the layer's
// MXFP8 row bundle -- E4M3 rows q [capacity, C] (row stride C) with k-block-major code words (the four
// codes of row r's 128-column block j in code_words[j * word_ld + r], as the rows + columns quantizers
// write them: QuantizedOut::scale_word_ld) -- becomes FP8-blockwise rows with FP32 scales k-block-major
// [C/128, word_ld] over the same words: each word becomes e8m0_to_float(its largest code), each 32-byte
// block whose code is below it re-rounded (numeric::mxfp8_code_at_shared_scale). Rows at or past
// *used_rows (device) are not touched. C % 128 == 0, q 16-byte aligned, word_ld >= capacity.
void mxfp8_rows_to_fp8_blockwise(uint8_t* q, int64_t C, uint32_t* code_words, int64_t word_ld, int64_t capacity,
                                 const int32_t* used_rows, cudaStream_t stream);

// A prepared MXFP8 training weight's 128x128 FP32 scales (mxfp8_quantize_weight_tiles with
// at_shared_scales) from one of its E8M0 grids, each 32x32 tile's code repeated on its 32 rows: scales
// [E*R, C/32] -> out [E, R/128, C/128] = e8m0_to_float(the largest of the block's sixteen codes). The
// FPROP grid [E*N, K/32] gives the FPROP weight's scales (R = N, C = K), the DGRAD grid [E*K, N/32] the
// transposed copy's (R = K, C = N). R, C % 128 == 0.
void mxfp8_weight_block_scales(const uint8_t* scales, int64_t num_experts, int64_t rows, int64_t cols, float* out,
                               cudaStream_t stream);

// Packed MXFP8 rows (numeric::mxfp8_packed_row_bytes: C codes, then C / 32 scales): the output of
// mxfp8_quantize_rows that writes rows of `cols` features at `base` + r * row_stride_bytes (16-byte
// aligned, row_stride_bytes >= the packed row and a multiple of 16), e.g. a rank's dispatch window.
Mxfp8Out mxfp8_packed_rows_out(void* base, int64_t row_stride_bytes, int64_t cols);

// Packed rows gathered into expert-major row-bundle rows: row m of `rows` (q [capacity, C] and
// scales [capacity, C / 32] at their row strides, block stride 1) from the packed row at
// row_ptrs[m] (this GPU's or a peer's memory, 16-byte aligned; nullptr: a zero row, scales 0);
// rows at or past offsets_G1[G] are neither read nor written. The same bytes mxfp8_quantize_rows
// writes for the BF16 rows the packed rows were made from. C % 128 == 0; q 16-byte and scales
// 4-byte aligned, their row strides multiples of 16 and 4.
void mxfp8_gather_packed_rows(const void* const* row_ptrs, const RowGroups& groups, int64_t capacity, int64_t cols,
                              const Mxfp8Out& rows, cudaStream_t stream);

// ---- FP8 blockwise (DeepSeek-V3: 1x128 activations, 128x128 weights, FP32 scales) --------------

// The scale rule of the FP8-blockwise rows + columns quantizers: the recipe's FP32 amax / 448, or
// MXFP8's -- the E8M0 RCEIL code of the 128-block's amax as its FP32 power of two, every element
// rounded once at it (numeric::mxfp8_quantize_rows_shared): the MXFP8 training layer's operands
// (perf_history G152). The layouts are the same.
enum class Fp8BlockScale { kAmaxOver448, kMxfp8Shared };

// 1x128 blocks along cols. cols % 128 == 0.
void fp8_blockwise_quantize_rows(const Bf16Matrix& x, const Fp8BlockwiseOut& out, cudaStream_t stream);

// Both orientations from one read, as mxfp8_quantize_rows_cols with 128-token column blocks
// (group offsets and the row capacity multiples of 128; without `cols`, multiples of 32 will do:
// the routed rows of an inference layer); x may be gathered, `cols` compact (below).
void fp8_blockwise_quantize_rows_cols(const Bf16Matrix& x, const RowGroups& groups, const Fp8BlockwiseOut& rows,
                                      const Fp8BlockwiseOut& cols, cudaStream_t stream,
                                      Fp8BlockScale rule = Fp8BlockScale::kAmaxOver448);

// Both rows+columns quantizers with a fixed CTA region of 2^log2_region_t token tiles x
// 2^log2_region_f feature tiles (128 each; at most 8 tiles in all); the launchers above pick it from
// the shape and the device (tests sweep all).
void mxfp8_quantize_rows_cols_in_regions(const Bf16Matrix& x, const RowGroups& groups, const Mxfp8Out& rows,
                                         const Mxfp8Out& cols, int log2_region_t, int log2_region_f,
                                         cudaStream_t stream);
void fp8_blockwise_quantize_rows_cols_in_regions(const Bf16Matrix& x, const RowGroups& groups,
                                                 const Fp8BlockwiseOut& rows, const Fp8BlockwiseOut& cols,
                                                 int log2_region_t, int log2_region_f, cudaStream_t stream,
                                                 Fp8BlockScale rule = Fp8BlockScale::kAmaxOver448);

// Compact columns (cols.compact, as mxfp8_quantize_rows_cols' with FP8 blockwise's scale layout):
// q [C, R] (row stride R) at cols.q + *cols.q_offset, then the FP32 scales [R / 128, C] at
// numeric::fp8_blockwise_compact_columns_scales_offset(C, R); R = offsets_G1[G], a multiple of 128.

// Weights w [E, N, K] in 128x128 blocks: q [E*N, K], scales [E, N/128, K/128]; and, when q_t is
// given, the transposed data DGRAD reads, q_t [E*K, N] (per expert [K, N]) with the transposed
// scale grid scales_t [E, K/128, N/128] (no requantization: the same bytes). N, K % 128 == 0.
void fp8_blockwise_quantize_weight(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENK,
                                   float* scales, uint8_t* q_t_EKN, float* scales_t, cudaStream_t stream);

// A checkpoint's E4M3 data [E, N, K] + FP32 scale_inv [E, N/128, K/128] -> the transposed copy
// DGRAD reads (q_t [E*K, N], scales_t [E, K/128, N/128]). Bytes move unchanged.
void fp8_blockwise_transpose_weight(const uint8_t* q_ENK, const float* scales, int64_t num_experts, int64_t n,
                                    int64_t k, uint8_t* q_t_EKN, float* scales_t, cudaStream_t stream);

// Packed FP8-blockwise rows (numeric::fp8_blockwise_packed_row_bytes: C codes, then C / 128 FP32
// scales): the output of fp8_blockwise_quantize_rows that writes rows at `base` + r *
// row_stride_bytes (16-byte aligned; row_stride_bytes >= the packed row, a multiple of 16).
Fp8BlockwiseOut fp8_blockwise_packed_rows_out(void* base, int64_t row_stride_bytes, int64_t cols);

// Packed FP8-blockwise rows gathered into the row bundle: as mxfp8_gather_packed_rows, with the
// scales at any strides (the GEMMs' k-block-major grid: scale_row_stride 1, scale_block_stride =
// the grid's leading dimension). The same bytes fp8_blockwise_quantize_rows_cols writes into its
// rows output from the BF16 rows the packed rows were made from, padding rows included (zero codes,
// scale 1.0). C % 128 == 0.
void fp8_blockwise_gather_packed_rows(const void* const* row_ptrs, const RowGroups& groups, int64_t capacity,
                                      int64_t cols, const Fp8BlockwiseOut& rows, cudaStream_t stream);

// ---- SwiGLU backward fused with the rows + columns quantization of its output ------------------

// The inputs of SwiGLU backward over expert-major rows: h1 = [gate | up] [capacity, 2F] (row stride
// 2F, at a device-chosen address) and grad_h2 [capacity, F] (row stride F), both BF16, 16-byte
// aligned; F = intermediate.
struct SwigluBackwardSource {
  common::DeviceAddress h1;
  const void* grad_h2 = nullptr;
  int64_t capacity = 0;
  int64_t intermediate = 0;
  activation::SwigluParams params;
};

// dxy = [dgate | dup] [capacity, 2F] as kernels::swiglu_backward computes it (BF16), quantized as
// *_quantize_rows_cols(dxy, groups, rows, cols) quantizes it -- the same bytes, every output
// optional, `cols` strided or compact -- without dxy being written: one pass over h1 and grad_h2.
// F a multiple of the format's block (32 / 128); the capacity a multiple of it with `cols` (32
// without). Padding rows quantize as zeros, rows at or past offsets_G1[G] are neither read nor written.
void mxfp8_swiglu_backward_quantize(const SwigluBackwardSource& src, const RowGroups& groups, const Mxfp8Out& rows,
                                    const Mxfp8Out& cols, cudaStream_t stream);
void fp8_blockwise_swiglu_backward_quantize(const SwigluBackwardSource& src, const RowGroups& groups,
                                            const Fp8BlockwiseOut& rows, const Fp8BlockwiseOut& cols,
                                            cudaStream_t stream, Fp8BlockScale rule = Fp8BlockScale::kAmaxOver448);
// The same with a fixed CTA region of 2^log2_region_t token tiles x 2^log2_region_f feature tiles of
// F (128 each, at most 8 tiles in all); the launchers above pick it (tests and benches sweep all).
void mxfp8_swiglu_backward_quantize_in_regions(const SwigluBackwardSource& src, const RowGroups& groups,
                                               const Mxfp8Out& rows, const Mxfp8Out& cols, int log2_region_t,
                                               int log2_region_f, cudaStream_t stream);
void fp8_blockwise_swiglu_backward_quantize_in_regions(const SwigluBackwardSource& src, const RowGroups& groups,
                                                       const Fp8BlockwiseOut& rows, const Fp8BlockwiseOut& cols,
                                                       int log2_region_t, int log2_region_f, cudaStream_t stream,
                                                       Fp8BlockScale rule = Fp8BlockScale::kAmaxOver448);

// ---- NVFP4 (E2M1 data, E4M3 per-16 scales, FP32 global / per-token scales) ----------------------

// Weights w [E, N, K]: per expert gs_e = 2688 / amax_e; q [E, N, K/2] (element 2j low nibble, then
// each 32-bit word in the GEMMs' order: numeric::nvfp4_weight_word_encode), scales [E, N, K/16]
// E4M3, global_scale [E], global_scale_inv [E] = fl(1 / gs). K % 16 == 0.
// Reads w twice (the expert amax comes first; the second read of an expert comes while it is still
// in L2, where it fits). global_scale and global_scale_inv are scratch until the call ends.
void nvfp4_quantize_weight(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENH,
                           uint8_t* scales, float* global_scale, float* global_scale_inv, cudaStream_t stream);

// Per-token rows x [T, D] (D % 16 == 0, D <= 16384): q at q[t * q_row_stride] (D/2 bytes), E4M3
// scales at scales[t * scale_row_stride] (D/16 bytes), token_scale_inv at
// token_scale_inv[t * inv_row_stride] (bytes; 4-byte aligned). A packed row
// [D/2 | D/16 | 4 | pad to 16] is these three with one row stride.
struct Nvfp4RowsOut {
  uint8_t* q = nullptr;
  int64_t q_row_stride = 0;
  uint8_t* scales = nullptr;
  int64_t scale_row_stride = 0;
  uint8_t* token_scale_inv = nullptr;
  int64_t inv_row_stride = 0;
};
// rows_bound (device, optional): rows at or past *rows_bound are neither read nor written, so a
// capacity sized for the worst routing costs only the rows routed. token_rows (optional: offsets_G1
// and counts_G): only the groups' token rows -- the first counts_G[g] rows of each group's segment --
// are read and written: the layer's h2, whose groups are padded to 32 rows while its GEMM tiles
// cover the routed rows alone.
void nvfp4_quantize_rows(const Bf16Matrix& x, const Nvfp4RowsOut& out, cudaStream_t stream,
                         const int32_t* rows_bound = nullptr, const RowGroups& token_rows = {});

// Bytes of one packed NVFP4 row of D elements: D/2 + D/16 + 4, rounded up to 16.
inline int64_t nvfp4_packed_row_bytes(int64_t d) { return numeric::nvfp4_packed_row_bytes(d); }

// The packed-row output of nvfp4_quantize_rows: rows at `base` + r * row_stride_bytes.
inline Nvfp4RowsOut nvfp4_packed_rows_out(void* base, int64_t row_stride_bytes, int64_t cols) {
  uint8_t* q = static_cast<uint8_t*>(base);
  return {q, row_stride_bytes, q + numeric::nvfp4_packed_row_scales_offset(cols), row_stride_bytes,
          q + numeric::nvfp4_packed_row_token_scale_offset(cols), row_stride_bytes};
}

// Packed NVFP4 rows (quantized at the source) gathered into a dense [capacity, nvfp4_packed_row_bytes(C)]
// buffer in expert-major order, what the NVFP4 GEMMs read: a copy per routed row (row_ptrs[m]),
// zeros for padding rows (nullptr). C % 256 == 0.
void nvfp4_gather_packed_rows(const void* const* row_ptrs, const RowGroups& groups, int64_t capacity, int64_t cols,
                              void* rows, cudaStream_t stream);

// Packed NVFP4 rows expanded to FP16 for the prefill-sized GEMMs (kNvfp4ExpandedRows): row m of
// `out` [capacity, cols] (16-byte aligned) from packed row m -- row_ptrs[m] (a gather; nullptr: a
// padding row, zeros) or, with row_ptrs == nullptr, packed + m * packed_stride -- for the groups'
// rows (offsets_G1[num_groups] of them): elements e2m1 x s x 2^-7 in FP16, exact, K permuted within
// every 256 as the NVFP4 kernels' token boxes (gemm/nvfp4_operands.cuh); the row's FP32
// token_scale_inv into token_scale_inv[m] (0 for padding rows). cols % 256 == 0. With groups.counts_G
// set, only the first counts_G[g] rows of each group are expanded; the rest of its segment (the
// padding of a layout padded per group, which GEMM tiles over tile_rows never read) is neither read
// nor written.
void nvfp4_expand_rows(const void* const* row_ptrs, const void* packed, int64_t packed_stride, const RowGroups& groups,
                       int64_t capacity, int64_t cols, void* out, float* token_scale_inv, cudaStream_t stream);

}  // namespace dist_moe::quant
