// Internal: the generic launch description the host API fills, and the compiled kernel table.
//
// kGemmKernelSpecs below is the one list of compiled kernels. Each grouped_gemm_sm90_*.cu file
// instantiates the entries of its family (grouped_gemm_launch.cuh derives the kernel type from the
// entry's fields), and gemm_kernels() (grouped_gemm.cu) builds the host table from the same list,
// in its order; grouped_gemm.cu picks an entry by (kind, epilogue, operand formats, gather, tile,
// schedule, store path). Nothing here is part of the public API.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/grouped_gemm_config.h"

namespace dist_moe::gemm {

enum class GemmEpilogueKind { kStoreBf16, kStoreFp32, kSwiglu };

// How the epilogue stages and stores (device/gemm/epilogue_staging.cuh): synchronous stores from a
// padded buffer, asynchronous TMA stores from two swizzled buffers per warpgroup, or from four
// (deep staging: a ping-pong tile's epilogue never waits for its own stores).
enum class GemmWriter { kPadded, kTma, kTmaDeep };

// The instantiation file that compiles a kernel: one per epilogue family, so they build in parallel.
enum class GemmKernelFile { kFprop, kW13, kDgrad, kWgrad, kDecode };

// One compiled kernel, by named fields. Built with the constexpr helpers below, e.g.
// `fprop_kernel(128, 128, 6).pp().tma()`: ping-pong 128x128, 6 stages, TMA stores.
struct GemmKernelSpec {
  gemm::GemmKind kind = gemm::GemmKind::kFprop;
  GemmEpilogueKind epilogue = GemmEpilogueKind::kStoreBf16;
  int block_m = 128;
  int block_n = 256;
  int stages = 4;
  bool gather = false;    // A rows from the gather producer (M-grouped kinds only)
  bool pingpong = false;  // consumer schedule (mainloop.cuh)
  GemmWriter writer = GemmWriter::kPadded;
  int cluster_m = 1;      // CTAs per cluster along M (2: TMA multicast of B)
  // The operands as the op's arguments name them (grouped_gemm_config.h: GroupedGemmProblem), also
  // for swap-AB, whose kernel swaps them.
  OperandFormat a;
  OperandFormat b;
  // MXFP8 operands dequantized to BF16 in the producer for BF16 wgmma (mainloop_mxfp8_dequant.cuh),
  // instead of E4M3 wgmma with per-32 promotion: the measured baseline, never the heuristic's pick.
  bool dequant_bf16 = false;
  // FP8-blockwise 128x256 FPROP: FP32 promotion every promote_k of K (mainloop_fp8_blockwise.cuh;
  // 64 and 32: the "_p64" / "_p32" kernels the MXFP8 training W13 takes, G158).
  int promote_k = 128;

  constexpr bool tma_store() const { return writer != GemmWriter::kPadded; }
  constexpr GemmKernelFile file() const {
    switch (kind) {
      case gemm::GemmKind::kFprop:
        return epilogue == GemmEpilogueKind::kSwiglu ? GemmKernelFile::kW13 : GemmKernelFile::kFprop;
      case gemm::GemmKind::kDgrad: return GemmKernelFile::kDgrad;
      case gemm::GemmKind::kWgrad: return GemmKernelFile::kWgrad;
      case gemm::GemmKind::kFpropSwapAB: return GemmKernelFile::kDecode;
    }
    return GemmKernelFile::kFprop;
  }

  // Modifiers, each returning the changed copy.
  constexpr GemmKernelSpec gathered() const { GemmKernelSpec s = *this; s.gather = true; return s; }
  constexpr GemmKernelSpec pp() const { GemmKernelSpec s = *this; s.pingpong = true; return s; }
  constexpr GemmKernelSpec tma() const { GemmKernelSpec s = *this; s.writer = GemmWriter::kTma; return s; }
  constexpr GemmKernelSpec tma_deep() const { GemmKernelSpec s = *this; s.writer = GemmWriter::kTmaDeep; return s; }
  constexpr GemmKernelSpec cluster(int m) const { GemmKernelSpec s = *this; s.cluster_m = m; return s; }
  constexpr GemmKernelSpec fp8_blockwise() const {  // E4M3 operands, 1x128 / 128x128 FP32 scales
    GemmKernelSpec s = *this;
    s.a = kFp8BlockwiseRows;
    s.b = kFp8BlockwiseWeight;
    return s;
  }
  constexpr GemmKernelSpec mxfp8() const {  // E4M3 operands, 1x32 / 32x32 E8M0 scales
    GemmKernelSpec s = *this;
    s.a = kMxfp8Rows;
    s.b = kMxfp8Weight;
    return s;
  }
  constexpr GemmKernelSpec mxfp8_dequant() const {  // MXFP8 operands, made BF16 in the kernel
    GemmKernelSpec s = mxfp8();
    s.dequant_bf16 = true;
    return s;
  }
  constexpr GemmKernelSpec promote(int k) const {
    GemmKernelSpec s = *this;
    s.promote_k = k;
    return s;
  }
  constexpr GemmKernelSpec nvfp4() const {  // packed NVFP4 token rows x NVFP4 weights (swap-AB only)
    GemmKernelSpec s = *this;
    s.a = kNvfp4Rows;
    s.b = kNvfp4Weight;
    return s;
  }
  constexpr GemmKernelSpec nvfp4_expanded() const {  // expanded FP16 token rows x NVFP4 weights (swap-AB)
    GemmKernelSpec s = *this;
    s.a = kNvfp4ExpandedRows;
    s.b = kNvfp4Weight;
    return s;
  }
  constexpr GemmKernelSpec fp8_blockwise_cols() const {  // WGRAD: both operands transposed E4M3 columns
    GemmKernelSpec s = *this;
    s.a = kFp8BlockwiseRowsT;
    s.b = kFp8BlockwiseRowsT;
    return s;
  }
  constexpr GemmKernelSpec fp32_out() const {
    GemmKernelSpec s = *this;
    s.epilogue = GemmEpilogueKind::kStoreFp32;
    return s;
  }
};

constexpr GemmKernelSpec gemm_kernel(gemm::GemmKind kind, GemmEpilogueKind epilogue, int bm, int bn, int stages) {
  GemmKernelSpec s;
  s.kind = kind;
  s.epilogue = epilogue;
  s.block_m = bm;
  s.block_n = bn;
  s.stages = stages;
  return s;
}
constexpr GemmKernelSpec fprop_kernel(int bm, int bn, int stages) {
  return gemm_kernel(gemm::GemmKind::kFprop, GemmEpilogueKind::kStoreBf16, bm, bn, stages);
}
constexpr GemmKernelSpec w13_kernel(int bm, int bn, int stages) {  // SwiGLU epilogue, split weight tile
  return gemm_kernel(gemm::GemmKind::kFprop, GemmEpilogueKind::kSwiglu, bm, bn, stages);
}
constexpr GemmKernelSpec dgrad_kernel(int bm, int bn, int stages) {
  return gemm_kernel(gemm::GemmKind::kDgrad, GemmEpilogueKind::kStoreBf16, bm, bn, stages);
}
constexpr GemmKernelSpec wgrad_kernel(int bm, int bn, int stages) {
  return gemm_kernel(gemm::GemmKind::kWgrad, GemmEpilogueKind::kStoreBf16, bm, bn, stages);
}
constexpr GemmKernelSpec decode_kernel(GemmEpilogueKind epilogue, int bm, int bn, int stages) {
  return gemm_kernel(gemm::GemmKind::kFpropSwapAB, epilogue, bm, bn, stages);
}

// Every compiled kernel. The order is the table's, and so that of grouped_gemm_configs(). Adding a
// kernel of an existing family is one line here (its file instantiates it); a new family (other
// epilogue or operand type) also needs its mapping from fields to types in its instantiation file.
inline constexpr GemmKernelSpec kGemmKernelSpecs[] = {
    // FPROP, plain store (W2; grouped_gemm_sm90_fprop.cu)
    fprop_kernel(128, 256, 4),
    fprop_kernel(128, 128, 6),
    fprop_kernel(128, 256, 4).gathered(),
    fprop_kernel(128, 256, 4).tma(),
    fprop_kernel(128, 256, 4).tma().gathered(),
    fprop_kernel(128, 128, 6).pp().tma(),
    // 2-CTA clusters: M tile pairs share the weight block through TMA multicast (docs/perf.md G15).
    fprop_kernel(128, 256, 4).tma().cluster(2),
    fprop_kernel(128, 128, 6).pp().tma().cluster(2),
    // W13 FPROP with the SwiGLU epilogue (grouped_gemm_sm90_w13.cu)
    w13_kernel(128, 256, 4),
    w13_kernel(128, 256, 4).gathered(),
    w13_kernel(128, 256, 4).tma(),
    w13_kernel(128, 128, 6).pp().tma(),
    w13_kernel(128, 128, 6).pp().tma().gathered(),
    // 2-CTA clusters: CTA 0 multicasts the gate half, CTA 1 the up half (docs/perf.md G15).
    w13_kernel(128, 256, 4).tma().cluster(2),
    w13_kernel(128, 128, 6).pp().tma().cluster(2),
    // DGRAD (grouped_gemm_sm90_dgrad.cu)
    dgrad_kernel(128, 256, 4),
    dgrad_kernel(128, 128, 6),
    dgrad_kernel(128, 256, 4).gathered(),
    dgrad_kernel(128, 256, 4).tma(),
    dgrad_kernel(128, 256, 4).tma().gathered(),
    dgrad_kernel(128, 128, 6).pp().tma(),
    dgrad_kernel(128, 256, 4).fp32_out(),
    dgrad_kernel(128, 256, 4).fp32_out().tma(),
    dgrad_kernel(128, 128, 6).fp32_out().pp().tma(),
    // WGRAD (grouped_gemm_sm90_wgrad.cu)
    wgrad_kernel(128, 256, 4),
    wgrad_kernel(128, 256, 4).tma(),
    wgrad_kernel(128, 128, 6).pp().tma(),
    wgrad_kernel(128, 256, 4).fp32_out(),
    wgrad_kernel(128, 128, 6).fp32_out(),
    wgrad_kernel(128, 256, 4).fp32_out().tma(),
    wgrad_kernel(128, 128, 6).fp32_out().pp().tma(),
    // Deep staging (docs/perf.md G10): 4 stages buy 4 staging buffers per warpgroup. The config
    // names it by s4 + pp + tma (no other WGRAD kernel has that combination).
    wgrad_kernel(128, 128, 4).pp().tma_deep(),
    wgrad_kernel(128, 128, 4).fp32_out().pp().tma_deep(),
    // 2-CTA clusters sharing each x (B) block through TMA multicast (docs/perf.md G15).
    wgrad_kernel(128, 256, 4).tma().cluster(2),
    wgrad_kernel(128, 256, 4).fp32_out().tma().cluster(2),
    // Swap-AB decode: 256 weight rows (128 gate + 128 up for SwiGLU) x 32 tokens, 5 stages
    // (grouped_gemm_sm90_decode.cu)
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 32, 5),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 32, 5),
    // FP8 blockwise (device/gemm/mainloop_fp8_blockwise.cuh): cooperative tiles, a 128-deep E4M3 k
    // block per stage (the same 32 / 48 KiB stages as BF16's 64-deep ones), TMA stores; 128x256
    // runs its k block as two 128-column slices (240 consumer registers; ptxas: 44-58 bytes of
    // spill stores), 128x128 as two pipelined 64-column slices. The _c2 twins spill 92-100 bytes
    // and are compiled for A/B only. FP8 DGRAD runs the FPROP entries. grouped_gemm_sm90_fprop.cu /
    // _w13.cu.
    fprop_kernel(128, 128, 6).tma().fp8_blockwise(),
    fprop_kernel(128, 256, 4).tma().fp8_blockwise(),
    fprop_kernel(128, 128, 6).tma().cluster(2).fp8_blockwise(),
    fprop_kernel(128, 256, 4).tma().cluster(2).fp8_blockwise(),
    w13_kernel(128, 128, 6).tma().fp8_blockwise(),
    w13_kernel(128, 256, 4).tma().fp8_blockwise(),
    w13_kernel(128, 128, 6).tma().cluster(2).fp8_blockwise(),
    w13_kernel(128, 256, 4).tma().cluster(2).fp8_blockwise(),
    // One stage fewer where the scheduler tables of more than ~220 local experts (dsv3 on one GPU:
    // 256) crowd the picks above out of shared memory (up to ~4000 experts fit next to these).
    fprop_kernel(128, 128, 5).tma().fp8_blockwise(),
    fprop_kernel(128, 256, 3).tma().fp8_blockwise(),
    w13_kernel(128, 128, 5).tma().fp8_blockwise(),
    w13_kernel(128, 256, 3).tma().fp8_blockwise(),
    // W13 promoting every 64 of K (the MXFP8 training layer's: its h1 feeds h2's E4M3 rounding; G158),
    // and every 32 (A/B runs: DMOE_W13_PROMOTE_K=32).
    w13_kernel(128, 256, 4).tma().fp8_blockwise().promote(64),
    w13_kernel(128, 256, 3).tma().fp8_blockwise().promote(64),
    w13_kernel(128, 256, 4).tma().fp8_blockwise().promote(32),
    // FP8-blockwise WGRAD over the transposed columns (per-element scale products): 128x256 with
    // two 128-column slices and three stages (the pick where k % 256 == 0; G69), 128x128 with two
    // register-sourced 64-column slices and five (the stages' scale copies take the sixth's room).
    // grouped_gemm_sm90_wgrad.cu.
    wgrad_kernel(128, 128, 5).tma().fp8_blockwise_cols(),
    wgrad_kernel(128, 128, 5).fp32_out().tma().fp8_blockwise_cols(),
    wgrad_kernel(128, 256, 3).tma().fp8_blockwise_cols(),
    wgrad_kernel(128, 256, 3).fp32_out().tma().fp8_blockwise_cols(),
    // MXFP8 FPROP with per-32 promotion (device/gemm/mainloop_mxfp8.cuh): 128x128, five 32 KiB E4M3
    // stages, each with the FP32 scales the producer warpgroup's scale warps convert next to it.
    // MXFP8 DGRAD runs these on the transposed weight. grouped_gemm_sm90_fprop.cu / _w13.cu.
    fprop_kernel(128, 128, 5).tma().mxfp8(),
    w13_kernel(128, 128, 5).tma().mxfp8(),
    // The dequantize-to-BF16 baseline (issue #25 item 4; perf_history G120): run by name ("_dq").
    fprop_kernel(128, 128, 4).mxfp8_dequant(),
    w13_kernel(128, 128, 4).mxfp8_dequant(),
    // MXFP8 swap-AB decode (device/gemm/mainloop_block_scaled_swap_ab.cuh): the BF16 decode tile with
    // 128-deep E4M3 stages (same 36 KiB), per-32 promotion in the consumers. _decode.cu.
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 32, 5).mxfp8(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 32, 5).mxfp8(),
    // 16 tokens (34 KiB stages) for inference layers, whose tiles cover the real rows (G60).
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 16, 5).mxfp8(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 16, 5).mxfp8(),
    // FP8-blockwise swap-AB decode (the same mainloop with FP32 scales, one per 128-deep stage).
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 32, 5).fp8_blockwise(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 32, 5).fp8_blockwise(),
    // NVFP4 inference (device/gemm/mainloop_nvfp4_swap_ab.cuh): weights dequantized to FP16 in the
    // consumers' registers, token boxes in the producer warps; 256 K values per stage (32 KiB of
    // weights + 4 token boxes). 16 tokens (decode, 40 KiB stages: half the tensor time of 32 when
    // an expert has at most 16 rows), 32 (decode; 48 KiB stages), 64 (64 KiB) or 128 (96 KiB, one
    // A register set).
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 16, 5).nvfp4(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 16, 5).nvfp4(),
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 32, 4).nvfp4(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 32, 4).nvfp4(),
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 64, 3).nvfp4(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 64, 3).nvfp4(),
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 128, 2).nvfp4(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 128, 2).nvfp4(),
    // The token rows expanded to FP16 once per call (prefill-sized contexts): TMA brings them, no
    // producer warp converts tokens, the consumers get 232 registers.
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 128, 2).nvfp4_expanded(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 128, 2).nvfp4_expanded(),
    // Decode on expanded rows (G91): the 16-token tile without producer warps at work; each stage also
    // carries its weight scales (G131, by TMA since G133: 44 KiB stages, four fit).
    decode_kernel(GemmEpilogueKind::kStoreBf16, 256, 16, 4).nvfp4_expanded(),
    decode_kernel(GemmEpilogueKind::kSwiglu, 256, 16, 4).nvfp4_expanded(),
};
inline constexpr size_t kNumGemmKernels = sizeof(kGemmKernelSpecs) / sizeof(kGemmKernelSpecs[0]);

// Everything a launch needs, in the kernels' terms (params.cuh). Row operands are [m_capacity, *]
// BF16 row-major; weights [e_local, n, k].
struct GemmLaunch {
  gemm::GemmKind kind = gemm::GemmKind::kFprop;
  const int32_t* counts = nullptr;
  const int32_t* tile_rows = nullptr;  // swap-AB: token rows of each segment (GroupedGemmCommon)
  int32_t e_local = 0;
  int32_t m_capacity = 0;
  int32_t n = 0;  // weight rows
  int32_t k = 0;  // weight columns
  // kFprop / kFpropSwapAB: a = rows [m_cap, k], b = W.   kDgrad: a = grad_out [m_cap, n], b = W.
  // kWgrad: a = grad_out [m_cap, n], b = x [m_cap, k].
  const void* a = nullptr;
  const void* b = nullptr;
  int64_t a_ld = 0;  // swap-AB E4M3 rows: elements between a's rows (0: k; the Mega MXFP8 h2 in place)
  // Outputs: out (FPROP / DGRAD / WGRAD; unused with scatter), h1 (nullptr: dropped) and h2 (W13).
  void* out = nullptr;
  void* h1 = nullptr;
  void* h2 = nullptr;
  // Device-side byte offsets added to the row buffers at run time (nullptr = 0). a_offset applies
  // to the A rows (or to `gathered` when the gather producer runs), b_offset to WGRAD's x rows.
  const int64_t* a_offset = nullptr;
  const int64_t* b_offset = nullptr;
  const int64_t* out_offset = nullptr;
  const int64_t* h1_offset = nullptr;
  const int64_t* h2_offset = nullptr;
  // Global workspace for this launch's patched tensor maps ([num_sms][kNumMaps]); set by the host
  // API when any offset is given.
  CUtensorMap* tensormap_workspace = nullptr;
  // Dynamic tile schedule: this (device, stream)'s self-resetting counter pair; nullptr = static.
  int32_t* tile_counter = nullptr;
  // Gather producer (A's rows): row table, destination (what TMA then reads), ready counters.
  const void* const* gather_rows = nullptr;
  void* gathered = nullptr;
  int32_t* ready = nullptr;
  // Block scales (FP8 blockwise; grouped_gemm.h OperandScales): A's [k_blocks, a_scale_ld] FP32,
  // B's [e_local * n / 128, k / 128] FP32.
  const void* a_scales = nullptr;
  int64_t a_scale_ld = 0;
  bool a_scale_kblock_words = false;  // MXFP8 A: OperandScales::a_kblock_words
  bool narrow_split = true;           // MXFP8 128x128: GroupedGemmConfig::narrow_split (fill_launch: the knob's)
  const void* b_scales = nullptr;
  // FP8-blockwise WGRAD: b (x) is a compact column bundle [k, R], R = *b_compact_rows on the device,
  // its scales after the data (WgradArgs::a_compact_rows); b_scales unused.
  const int32_t* b_compact_rows = nullptr;
  const float* b_global = nullptr;  // NVFP4: the weight's global_scale_inv [e_local]
  gemm::EpilogueParams epilogue;  // filled by the caller except the tile-independent fields
  bool tiles_for_empty_experts = false;  // WGRAD overwrite
  int num_sms = 0;
  cudaStream_t stream = nullptr;

  // Whether any tensor map is patched on the device (an offset, or a compact bundle's row length).
  bool has_offsets() const {
    return a_offset || b_offset || out_offset || h1_offset || h2_offset || b_compact_rows;
  }
};

using GemmLaunchFn = void (*)(const GemmLaunch&);

// The Mega pipeline's NVFP4 decode kernel (grouped_gemm_sm90_mega.cu, device/gemm/mega.cuh):
// L13 and L2 are the W13 FPROP's and the W2 FPROP's launches as run() fills them (16-token swap-AB
// tiles on expanded token rows), `m` its counters and hand-off (tile_counter set, chunk arrays zero).
void launch_mega_nvfp4_decode(const GemmLaunch& L13, const GemmLaunch& L2, const gemm::MegaParams& m);
int mega_nvfp4_decode_smem_bytes(int num_experts);
// The same for MXFP8 (16-token swap-AB tiles on E4M3 rows; h2 quantized in place, L2.a_ld = 2F).
void launch_mega_mxfp8_decode(const GemmLaunch& L13, const GemmLaunch& L2, const gemm::MegaParams& m);
int mega_mxfp8_decode_smem_bytes(int num_experts);
// The rows form for MXFP8 (128x128 tiles; L13.h2 is W2's E4M3 A rows [m_capacity, F] and
// L13.epilogue.mx_scales / mx_scale_strides their codes, which the W13 epilogue writes).
void launch_mega_mxfp8_rows(const GemmLaunch& L13, const GemmLaunch& L2, const gemm::MegaParams& m);
int mega_mxfp8_rows_smem_bytes(int num_experts);
// The MXFP8 W2 DGRAD with SwiGLU backward and dxy's quantization in its epilogue
// (grouped_gemm_sm90_swiglu_backward.cu): L as run() fills a transposed-weight DGRAD (kind kFprop, n =
// F, k = D), L.out dxy's E4M3 rows [m_capacity, 2F], L.h1 (at L.h1_offset) and L.epilogue's f, SwiGLU,
// real_rows and mx_* fields.
void launch_dgrad_swiglu_mxfp8(const GemmLaunch& L);
int dgrad_swiglu_mxfp8_smem_bytes(int num_experts);

// What an instantiation file provides for one list entry.
struct GemmKernelFns {
  GemmLaunchFn launch = nullptr;
  int (*smem_bytes)(int num_experts) = nullptr;  // dynamic shared memory for e_local experts
};

// A row of the host table: the list entry and its compiled functions.
struct GemmKernelEntry : GemmKernelSpec {
  GemmLaunchFn launch = nullptr;
  int (*smem_bytes)(int num_experts) = nullptr;
};

// Each instantiation file fills fns[i] for the entries i of its family ([kNumGemmKernels]);
// gemm_kernels() (grouped_gemm.cu) calls them once and checks every entry got its functions.
void add_fprop_kernels(GemmKernelFns* fns);   // grouped_gemm_sm90_fprop.cu
void add_w13_kernels(GemmKernelFns* fns);     // grouped_gemm_sm90_w13.cu (SwiGLU)
void add_dgrad_kernels(GemmKernelFns* fns);   // grouped_gemm_sm90_dgrad.cu
void add_wgrad_kernels(GemmKernelFns* fns);   // grouped_gemm_sm90_wgrad.cu
void add_decode_kernels(GemmKernelFns* fns);  // grouped_gemm_sm90_decode.cu (swap-AB)
const std::vector<GemmKernelEntry>& gemm_kernels();

// Host-side TMA descriptors (gemm_tma.cpp), all with the 128-byte swizzle the wgmma descriptors
// and the epilogue staging assume: boxes are 128 bytes wide (128 E4M3, 64 BF16 or 32 FP32 values).
// 2D row-major tensor [rows, cols] (row stride `ld` elements), box {128 bytes, box_rows rows}.
CUtensorMap make_tma_2d(const void* base, int elem_bytes, int64_t rows, int64_t cols, int64_t ld, int box_rows,
                        const char* what);
// 2D byte tensor [rows, cols] (row stride `ld` bytes), an unswizzled box {box_cols bytes (a multiple
// of 16), box_rows rows}: block scales that kernels read with ordinary shared loads.
CUtensorMap make_tma_2d_bytes(const void* base, int64_t rows, int64_t cols, int64_t ld, int box_cols, int box_rows,
                              const char* what);
// 3D tensor [d2, d1, d0] (WGRAD's [E, n, k] output), box {128 bytes, box_rows, 1}.
CUtensorMap make_tma_3d(const void* base, int elem_bytes, int64_t d2, int64_t d1, int64_t d0, int box_rows,
                        const char* what);

}  // namespace dist_moe::gemm
