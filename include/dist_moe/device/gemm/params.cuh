// Plain-data parameters of the SM90 grouped GEMM kernels, shared by every instantiation so the host
// side fills one set of structs whatever tile shape it launches.
//
// Row buffers (activations, their gradients, h1/h2) are grouped by expert: expert e owns rows
// [offset_e, offset_e + counts[e]) with offset_e = counts[0] + ... + counts[e-1]. Counts live only
// on the device; the kernels compute the offsets themselves (scheduler.cuh).
// Weights are [E_local, N, K] row-major: N output features of the forward GEMM, K input features
// (W13: N = 2F, K = D; W2: N = D, K = F).
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

namespace dist_moe::gemm {

// Which GEMM a kernel computes. Fixes the majorness of each operand and which GEMM dimension is
// formed by an expert's rows.
enum class GemmKind : int {
  // out[m, n] = A[m, :] . W[e][n, :]      A = rows (K-major), B = W[e] (K-major); rows form M.
  kFprop,
  // out[m, k] = A[m, :] . W[e][:, k]      A = rows (K-major), B = W[e] (N-major: transposed).
  kDgrad,
  // G[e][n, k] = sum_m A[m, n] * X[m, k]  A = rows^T (M-major), B = X rows (N-major); the
  // expert's rows form the contraction.
  kWgrad,
  // out[m, n] = W[e][n, :] . A[m, :]      swap A/B for decode: A = W[e] (K-major) so weights fill
  // the 64-row wgmma M dimension, B = rows (K-major) so the few tokens sit on N.
  kFpropSwapAB,
};

// The GEMM dimension an expert's rows form.
enum class Grouping : int { kM, kN, kK };

constexpr Grouping grouping_of(GemmKind k) {
  return k == GemmKind::kWgrad ? Grouping::kK : (k == GemmKind::kFpropSwapAB ? Grouping::kN : Grouping::kM);
}

// ---- operands whose address is only known on the device ----------------------------------------
// Every global tensor a kernel reads or writes through TMA or through its own stores has a slot:
//   kMapA    TMA-loaded A operand (FPROP/DGRAD/swap-AB row buffer or the gathered copy; WGRAD grad_out)
//            -- swap-AB: the weights (A = W)
//   kMapB    TMA-loaded B operand (weights; WGRAD x rows; swap-AB token rows)
//   kMapOut  plain output (FPROP out, DGRAD grad_a, WGRAD grad_w)
//   kMapH1   W13 h1 = [gate | up] (nullptr base: dropped)
//   kMapH2   W13 h2 = SwiGLU(h1)
//   kMapScales  TMA-loaded weight scales (the NVFP4 16-token expanded tile: [E*N, K/16] E4M3 bytes)
// A slot whose `offset` is set holds its tensor at base + *offset (a device int64 byte offset, a
// multiple of 128 chosen by the activation planner). Each CTA resolves the offsets once at start:
// generic accesses use the moved base, and a moved tensor map is copied to this CTA's slot of
// `patched`, its global address replaced there (ptx/tensormap.cuh).
enum MapIndex : int { kMapA = 0, kMapB = 1, kMapOut = 2, kMapH1 = 3, kMapH2 = 4, kMapScales = 5, kNumMaps = 6 };

struct OperandMaps {
  CUtensorMap map[kNumMaps];        // host-encoded for base[i]; all zero when the kernel uses no TMA for it
  uint64_t base[kNumMaps] = {};     // device address of the tensor (0: unused or dropped)
  const int64_t* offset[kNumMaps] = {};  // device byte offset added to base at run time, or nullptr (= 0)
  uint32_t encoded_mask = 0;        // bit i: map[i] was encoded (TMA uses it)
  // A compact bundle of 1-byte elements whose row length is a device value (the FP8-blockwise
  // WGRAD's saved columns [rows, R], R = the routed rows): map i's inner extent and row stride
  // become *row_length[i] at run time (nullptr: as encoded).
  const int32_t* row_length[kNumMaps] = {};
  CUtensorMap* patched = nullptr;   // [gridDim.x][kNumMaps] global workspace; set when any offset is
};

// What a CTA uses after resolving the offsets (lives in shared memory, written before the first
// __syncthreads).
struct ResolvedOperands {
  const CUtensorMap* map[kNumMaps];  // the parameter-space map, or this CTA's patched copy
  char* base[kNumMaps];              // base + offset (nullptr stays nullptr)
};

struct SchedulerParams {
  const int32_t* counts = nullptr;  // [num_experts] rows per expert, on the device
  // Grouping kN: [num_experts] token rows of each expert's segment (<= counts; nullptr = counts).
  const int32_t* tile_rows = nullptr;
  int32_t num_experts = 0;
  int32_t m_capacity = 0;           // rows the row buffers hold; sum(counts) must not exceed it
  int32_t fixed_m_blocks = 0;       // Grouping kN, kK: M tiles per expert
  int32_t fixed_n_blocks = 0;       // Grouping kM, kK: N tiles per expert
  int32_t m_blocks = 0;             // kK with clusters: real M tiles per expert (fixed_m_blocks counts pairs)
  int32_t group_m = 1;              // raster: M tiles that sweep N together (L2 reuse)
  int32_t tiles_for_empty_experts = 0;  // kK: an empty expert still gets tiles (zero-fill on overwrite)
  // Dynamic schedule (config `dynamic_schedule`, name `_dyn`; nullptr = the static round-robin):
  // [0] next linear tile to hand out, [1] CTAs that have drawn past the last tile. Both are 0 at
  // launch; the last CTA to finish drawing puts them back to 0 (self-resetting, no memset), so
  // kernels sharing a counter pair must run one after another (same stream: scheduler.cuh).
  int32_t* tile_counter = nullptr;
};

struct MainloopParams {
  int32_t num_k_blocks = 0;   // Grouping kM, kN: contraction / 64 (kK takes it from the counts)
  int32_t weight_rows = 0;    // N of W[E_local, N, K]
  int32_t split_offset = 0;   // SwiGLU: row of the "up" half inside an expert's W13 (= F)
  // Gather producer (fused dispatch): rows are copied once into the kMapA tensor (the gathered
  // buffer, at its resolved base), which TMA then loads.
  const void* const* gather_rows = nullptr;  // [m_capacity] source row addresses; nullptr = zero row
  int32_t* ready = nullptr;                  // [M tiles] row chunks published per M tile
  int32_t gather_row_elems = 0;              // BF16 elements per row (the contraction K)
  // Block scales, typed by the operand format. FP8 blockwise (mainloop_fp8_blockwise.cuh), FP32:
  // FPROP A [K/128, a_scale_ld] (k-block-major; rows [0, a_scale_rows) exist), B [E * N / 128,
  // K / 128]; WGRAD A [tokens/128, a_scale_ld = N], B [tokens/128, b_scale_ld = K]. MXFP8
  // (mainloop_mxfp8.cuh), E8M0 bytes: A [a_scale_rows, a_scale_ld = K/32] or, with
  // a_scale_kblock_words, words of four codes [K/128, a_scale_ld] (row r's k block kb at byte
  // 4 (kb * a_scale_ld + r)), B [E * N, K/32].
  const void* a_scales = nullptr;
  int64_t a_scale_ld = 0;
  bool a_scale_kblock_words = false;
  int32_t a_scale_rows = 0;
  const void* b_scales = nullptr;
  int64_t b_scale_ld = 0;
  // The swap-AB decode tiles read the token rows' first scales once the tile's first stage is full,
  // not before (the Mega kernel writes the token rows during the launch, mega.cuh).
  bool token_scales_after_first_stage = false;
  // MXFP8 128x128: narrow tiles split by column slice across both warpgroups
  // (GroupedGemmConfig::narrow_split; mainloop_mxfp8.cuh).
  bool narrow_split = true;
  // FP8-blockwise WGRAD with B a compact column bundle ([K, R] E4M3 at the resolved B base, R =
  // *b_compact_rows): its scales follow the data at align128(K * R) instead of b_scales.
  const int32_t* b_compact_rows = nullptr;
  // NVFP4 (mainloop_nvfp4_swap_ab.cuh): the token rows, packed [K/2 E2M1 | K/16 E4M3 | FP32 | pad]
  // (quant::nvfp4_packed_row_bytes apart), which the producer warps dequantize into each stage;
  // the weight's E4M3 scales [E * N, K/16] are b_scales.
  const uint8_t* packed_rows = nullptr;
  int64_t packed_row_bytes = 0;
};

// Where MXFP8 A's scale word of row r and k block kb (four E8M0 codes: the block's k32 steps) lies in
// a_scales: at byte r * row + kb * kblock -- [rows, K/32] bytes, or k-block-major words
// (a_scale_kblock_words). The readers: the 128x128 kernel's scale warps and the swap-AB decode scales.
struct Mxfp8AScaleStrides {
  int32_t row, kblock;
};
#if defined(__CUDACC__)
__host__ __device__
#endif
inline Mxfp8AScaleStrides mxfp8_a_scale_strides(int64_t a_scale_ld, bool kblock_words) {
  const int32_t ld = static_cast<int32_t>(a_scale_ld);
  return kblock_words ? Mxfp8AScaleStrides{4, 4 * ld} : Mxfp8AScaleStrides{ld, 4};
}
#if defined(__CUDACC__)
__host__ __device__
#endif
inline Mxfp8AScaleStrides mxfp8_a_scale_strides(const MainloopParams& p) {
  return mxfp8_a_scale_strides(p.a_scale_ld, p.a_scale_kblock_words);
}

struct EpilogueParams {
  // Store epilogue: the kMapOut tensor (row-major, ld elements), or through a per-row address table.
  int64_t ld_out = 0;               // elements between rows of the output (and of scatter rows' width)
  int64_t expert_stride = 0;        // WGRAD: elements between experts' [N, K] outputs
  int32_t out_cols = 0;             // valid output columns (the rest of a tile is not stored)
  int32_t accumulate = 0;           // out = acc + out (FP32 math, one rounding)
  void* const* scatter_rows = nullptr;  // [m_capacity] destination of each row; nullptr = skip row
  const float* row_scale = nullptr;     // [m_capacity] multiplies each row before rounding
  // SwiGLU epilogue (W13 FPROP): h1 = [gate | up] (kMapH1, optional), h2 = SwiGLU(h1) (kMapH2).
  int32_t f = 0;                    // F
  int32_t clamped = 0;              // 0: z = g*sigmoid(g)*u; 1: GPT-OSS clamped form
  float alpha = 1.702f;             // clamped only
  float limit = 7.0f;               // clamped only
  float* clip_stats = nullptr;      // FP32 [3] counters (accumulated), or nullptr
  float clip_limit = 7.0f;          // strict threshold of the clip statistics
  // [e_local] real rows of each expert, when the counts include block-scaled padding rows, or
  // nullptr: every row of the count. The clip statistics count only these; the SwiGLU backward
  // epilogue quantizes the others as zeros (as the quantizers read padding rows).
  const int32_t* real_rows = nullptr;
  // NVFP4 (swap-AB epilogues): acc = fl(fl(acc * acc_scale * token_scale_inv[row]) *
  // expert_scale_inv[e]) before anything else -- upstream's order, with the exact power of two
  // the FP16 operands carry (nvfp4_operands.cuh). expert_scale_inv == nullptr: none of it.
  const float* token_scale_inv = nullptr;  // row r's at token_scale_inv[r * token_scale_stride]
  int64_t token_scale_stride = 0;
  const float* expert_scale_inv = nullptr;  // [e_local]
  float acc_scale = 1.0f;
  // The epilogues that write their result as MXFP8 rows (epilogue_mxfp8_blocks.cuh): h2 in the Mega
  // kernel's 128x128 W13 (epilogue_swiglu_mxfp8.cuh; E4M3 at kMapH2's base, [rows, F]) and dxy in the
  // W2 DGRAD with SwiGLU backward (epilogue_swiglu_backward_mxfp8.cuh; E4M3 at kMapOut's base,
  // [rows, 2F]). Row r's E8M0 code of 32-column block c at byte r * mx_scale_strides.row + (c / 4) *
  // mx_scale_strides.kblock + c % 4 -- the layout the next GEMM's A scales take
  // (mxfp8_a_scale_strides of its MainloopParams).
  uint8_t* mx_scales = nullptr;
  Mxfp8AScaleStrides mx_scale_strides{0, 0};
  // ... and, when mx_col is set (training: the WGRAD operand), the same values' compact MXFP8 column
  // bundle (32 x 1 blocks along the rows; numeric::mxfp8_compact_columns_*): E4M3 [C, R] at mx_col +
  // *mx_col_offset, R = *mx_col_rows (the rows of all segments), E8M0 [R / 32, C] after it (C: F, 2F).
  uint8_t* mx_col = nullptr;
  const int64_t* mx_col_offset = nullptr;  // device byte offset (nullptr: none)
  const int32_t* mx_col_rows = nullptr;    // device: R
};

// The Mega decode kernel's own state (mega.cuh).
struct MegaParams {
  int32_t* tile_counter = nullptr;  // [2] the dynamic schedule's pair over both GEMMs' tiles
  int32_t* chunk_done = nullptr;    // [max chunks] W13 warpgroup arrivals; zero at launch
  int32_t* chunk_ready = nullptr;   // [max chunks] 1 once the chunk's W2 operand rows exist; zero at launch
  // The x rows gathered in the launch (nullptr: W13's A rows are in place already): row m's packed
  // row at x_rows[m] (a dispatch window, this GPU's or a peer's; nullptr: a zero row), made W13's A
  // operand rows by the chunk's x task; x_ready[c] counts the two warpgroups that published them.
  const void* const* x_rows = nullptr;
  int32_t* x_ready = nullptr;       // [max chunks]; zero at launch
  int32_t d = 0;                    // D (x's row length)
  // NVFP4 hand-off: the chunk's packed h2 rows (packed_stride bytes apart), then FP16 rows in place of
  // the BF16 h2 [rows, f] (W13's kMapH2), their token_scale_inv [rows] over x's.
  uint8_t* packed_h2 = nullptr;
  int64_t packed_stride = 0;
  float* token_scale_inv = nullptr;
  int32_t f = 0;
};

// Per-thread clip counters, summed per CTA at the end of the kernel.
struct ClipCounts {
  uint32_t gate_over = 0;
  uint32_t up_over = 0;
  uint32_t elems = 0;  // valid gate elements seen (sums to valid rows * F)
};

}  // namespace dist_moe::gemm
