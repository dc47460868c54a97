// SwiGLU backward fused with the rows + columns quantization of its output (perf_history G70):
// dxy = [dgate | dup] goes from h1 = [gate | up] and grad_h2 straight to E4M3 rows and transposed
// columns, the bytes *_quantize_rows_cols(dxy) writes, without dxy ever being stored in BF16 --
// 6 R·F bytes read and 4 written (R routed rows, F the intermediate size) instead of the two
// passes' 18.
//
// A CTA of 512 threads walks a region of tiles (128 tokens x 128 of the F features) through two
// stages of three BF16 tiles each (gate, up, grad_h2: 96 KiB; one CTA per SM). Per tile: all 512
// threads compute dgate and dup over the gate and up tiles in place (kernels::swiglu_backward's
// arithmetic, activation::swiglu_backward, rounded to BF16); then threads 0..255 quantize the dgate
// tile (output features c) and 256..511 the dup tile (features F + c) with the rows + columns
// quantizer's tile body (rows_cols_tile.cuh), in step: its barriers are the CTA's.
#include "dist_moe/check.h"
#include "dist_moe/device/activation/swiglu.cuh"
#include "dist_moe/device/common/device_address.h"
#include "dist_moe/device/ptx/cp_async.cuh"
#include "dist_moe/device/ptx/cvt.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"
#include "quant/rows_cols_tile.cuh"

namespace dist_moe::quant {
namespace {

constexpr int kFusedThreads = 2 * kTileThreads;
constexpr int kFusedStages = 2;
enum SourceTile { kGate = 0, kUp = 1, kGradH2 = 2 };
using TileTriple = Bf16Tile[3];
constexpr size_t kFusedRingBytes = sizeof(TileTriple) * kFusedStages;  // 192 KiB
constexpr int kOwnLoads = kTile * kTileSlots / kFusedThreads;         // vectors per thread per source tile (4)

// Issues tile (r0, c0) of gate, up and grad_h2: a thread copies slot threadIdx.x % 16 of rows
// threadIdx.x / 16 + 32 q (q = 0..3) of each source tile (2048 vectors each, 512 threads). Rows at
// or past `end` and features at or past F are zero-filled. The addresses start from the thread's
// row-q = 0 pointers and step 32 rows at a time (h1 rows are 2 F apart, grad_h2 rows F); rebuilt
// per copy from the row index they cost 1.5% more instructions and 0.6-2.5% of the kernel's time
// (perf_history G113).
__device__ __forceinline__ void issue_triple(TileTriple& stage, const uint16_t* h1, const uint16_t* grad_h2, int64_t f_dim,
                                             int64_t end, int64_t r0, int64_t c0) {
  constexpr int kRowStep = kFusedThreads / kTileSlots;  // 32
  const int slot = threadIdx.x % kTileSlots, r = threadIdx.x / kTileSlots;
  const int64_t row = r0 + r, c = c0 + slot * kVec;
  const uint16_t* gate = h1 + row * 2 * f_dim + c;
  const uint16_t* grad = grad_h2 + row * f_dim + c;
  const bool col_in = c < f_dim;
#pragma unroll
  for (int q = 0; q < kOwnLoads; ++q) {
    const bool valid = col_in && row + q * kRowStep < end;
    const int rq = r + q * kRowStep;
    ptx::cp_async_16_zfill(&stage[kGate][rq][slot * kVec], valid ? gate : grad_h2, valid);
    ptx::cp_async_16_zfill(&stage[kUp][rq][slot * kVec], valid ? gate + f_dim : grad_h2, valid);
    ptx::cp_async_16_zfill(&stage[kGradH2][rq][slot * kVec], valid ? grad : grad_h2, valid);
    gate += kRowStep * 2 * f_dim;
    grad += kRowStep * f_dim;
  }
}

// dgate over the gate tile and dup over the up tile, in place, element by element as
// kernels::swiglu_backward (FP32 from the BF16 inputs, rounded to nearest even BF16). Rows that are
// not real tokens get whatever their inputs give: the tile body reads them as zeros.
__device__ __forceinline__ void swiglu_backward_in_place(TileTriple& stage, const activation::SwigluParams& p) {
  const int slot = threadIdx.x % kTileSlots;
#pragma unroll
  for (int j = 0; j < kOwnLoads; ++j) {
    const int r = threadIdx.x / kTileSlots + j * (kFusedThreads / kTileSlots);
    uint4* gate = reinterpret_cast<uint4*>(&stage[kGate][r][slot * kVec]);
    uint4* up = reinterpret_cast<uint4*>(&stage[kUp][r][slot * kVec]);
    const uint4 dz = *reinterpret_cast<const uint4*>(&stage[kGradH2][r][slot * kVec]);
    const Vec8 g = unpack_bf16x8(*gate), u = unpack_bf16x8(*up), d = unpack_bf16x8(dz);
    uint32_t dg[kVec / 2], du[kVec / 2];
#pragma unroll
    for (int k = 0; k < kVec; k += 2) {
      float dg0, du0, dg1, du1;
      activation::swiglu_backward(g.v[k], u.v[k], d.v[k], p, &dg0, &du0);
      activation::swiglu_backward(g.v[k + 1], u.v[k + 1], d.v[k + 1], p, &dg1, &du1);
      dg[k / 2] = ptx::pack_bf16x2(dg0, dg1);
      du[k / 2] = ptx::pack_bf16x2(du0, du1);
    }
    *gate = make_uint4(dg[0], dg[1], dg[2], dg[3]);
    *up = make_uint4(du[0], du[1], du[2], du[3]);
  }
}

template <class F, bool kCompactCols>
__global__ void __launch_bounds__(kFusedThreads, 1)
    swiglu_backward_quantize_kernel(common::DeviceAddress h1_addr, const void* grad_h2_MF, int64_t capacity,
                                    int64_t f_dim, activation::SwigluParams params, RowGroups groups,
                                    QuantizedOut<typename F::Scale> rows, QuantizedOut<typename F::Scale> cols,
                                    int log2_rt, int log2_rf) {
  using Scale = typename F::Scale;
  constexpr int kChunks = kTile / 32;
  constexpr int kBlocksPerTile = kTile / F::kBlock;
  extern __shared__ __align__(kRingAlign) uint8_t dynamic_smem[];
  TileTriple* ring = reinterpret_cast<TileTriple*>(dynamic_smem);
  __shared__ uint32_t real_bits[kRegionTiles * kTile / 32];
  __shared__ float factor_tables[F::kTableEntries];
  // Per half (dgate, dup): column-pass maxima and the region's row and column scales.
  __shared__ uint16_t chunk_amax[2][kChunks][kTile];
  __shared__ __align__(16) Scale row_scale[2][kRegionTiles * kTile * kBlocksPerTile];
  __shared__ __align__(16) Scale col_scale[2][kRegionTiles * kTile * kBlocksPerTile];
  __shared__ int64_t compact_offset, compact_ld;

  const int64_t m_first = (static_cast<int64_t>(blockIdx.y) * kTile) << log2_rt;
  const int64_t c_first = (static_cast<int64_t>(blockIdx.x) * kTile) << log2_rf;
  const auto* h1 = common::resolve<const uint16_t>(h1_addr);
  const auto* grad_h2 = static_cast<const uint16_t*>(grad_h2_MF);

  const int64_t used = __ldg(groups.offsets_G1 + groups.num_groups);
  const int64_t end = used < capacity ? used : capacity;
  if (m_first >= end) return;  // CTA-uniform, before any copy
  const int64_t t_left = (end - m_first + kTile - 1) / kTile, f_left = (f_dim - c_first + kTile - 1) / kTile;
  const int tiles_t = static_cast<int>(t_left < (1 << log2_rt) ? t_left : (1 << log2_rt));
  const int tiles_f = static_cast<int>(f_left < (1 << log2_rf) ? f_left : (1 << log2_rf));
  const int half = threadIdx.x / kTileThreads;  // 0: dgate, 1: dup
  const int64_t out_col0 = half * f_dim;
  const RowsColsStaging<F> staging{chunk_amax[half], row_scale[half], col_scale[half], kBlocksPerTile << log2_rf,
                                   kBlocksPerTile << log2_rt};
  auto prologue = [&] {
    auto* offsets = reinterpret_cast<int32_t*>(&ring[kFusedStages - 1][0][0][0]);
    rows_cols_region_prologue<F, kFusedThreads, kCompactCols>(offsets, groups, cols, used, m_first, end, tiles_t,
                                                              factor_tables, real_bits, compact_offset, compact_ld);
  };
  const int tiles = tiles_t * tiles_f;
  auto issue = [&](int t, TileTriple& stage) {
    issue_triple(stage, h1, grad_h2, f_dim, end, m_first + (t / tiles_f) * kTile, c_first + (t % tiles_f) * kTile);
  };
  for_each_tile<kFusedStages>(tiles, ring, issue, [&](int t, TileTriple& stage) {
    const int tt = t / tiles_f, tf = t % tiles_f;
    swiglu_backward_in_place(stage, params);
    __syncthreads();  // the tile body reads other threads' vectors
    quantize_rows_cols_tile<F, kCompactCols>(stage[half], HalfCtaThread{}, tt, tf, m_first + tt * kTile,
                                             c_first + tf * kTile, end, f_dim, out_col0, real_bits + tt * (kTile / 32),
                                             factor_tables, staging, rows, cols, compact_offset, compact_ld);
  }, prologue);
  store_region_scales<F, kCompactCols>(threadIdx.x % kTileThreads, staging, m_first, c_first, end, f_dim, tiles_t,
                                       tiles_f, out_col0, 2 * f_dim, rows, cols, compact_offset, compact_ld);
}

// One CTA per SM: a CTA's first tile loads with nothing else in flight on its SM (about a tile's
// time lost per CTA), so the region is as large as the waves allow: cost 1 + 1 / tiles per region
// over the wave efficiency (choose_region); MXFP8's partial scale rows break ties as in
// choose_rows_cols_region.
RegionShape choose_fused_region(int64_t tiles_t, int64_t tiles_f, bool byte_scales, int64_t slots) {
  return choose_region(tiles_t, tiles_f, 1, slots, kRegionTiles, kRegionTiles, [&](int64_t rt, int64_t rf) {
    return 1.0 + 1.0 / double(rt * rf) + (byte_scales ? scale_request_cost(mxfp8_scale_row_requests(rt, rf)) : 0.0);
  });
}

template <class F, bool kCompactCols>
void launch_kernel(const SwigluBackwardSource& src, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
                   const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name, int log2_rt,
                   int log2_rf) {
  constexpr auto kernel = swiglu_backward_quantize_kernel<F, kCompactCols>;
  allow_dynamic_smem<kernel>(kFusedRingBytes);
  const int64_t tiles_t = (src.capacity + kTile - 1) / kTile, tiles_f = (src.intermediate + kTile - 1) / kTile;
  if (log2_rt < 0) {
    const RegionShape r =
        choose_fused_region(tiles_t, tiles_f, sizeof(typename F::Scale) == 1,
                            resident_ctas(reinterpret_cast<const void*>(kernel), kFusedThreads, kFusedRingBytes));
    log2_rt = r.log2_a;
    log2_rf = r.log2_b;
  }
  const dim3 grid = rows_cols_grid(name, tiles_t, tiles_f, log2_rt, log2_rf);
  kernel<<<grid, kFusedThreads, kFusedRingBytes, stream>>>(src.h1, src.grad_h2, src.capacity, src.intermediate,
                                                           src.params, groups, rows, cols, log2_rt, log2_rf);
  DMOE_CUDA_CHECK_LAUNCH();
}

template <class F>
void launch(const SwigluBackwardSource& src, const RowGroups& groups, const QuantizedOut<typename F::Scale>& rows,
            const QuantizedOut<typename F::Scale>& cols, cudaStream_t stream, const char* name, int log2_rt = -1,
            int log2_rf = -1) {
  const int64_t f = src.intermediate;
  DMOE_CHECK_ARG(f > 0 && f % F::kBlock == 0, name, ": intermediate_dim=", f, " must be a positive multiple of ",
                 F::kBlock);
  DMOE_CHECK_ARG(src.h1.base != nullptr && src.grad_h2 != nullptr, name, ": h1 and grad_h2 are required");
  DMOE_CHECK_ARG(src.capacity >= 0, name, ": negative row capacity ", src.capacity);
  check_rows_cols_outputs(name, F::kBlock, src.capacity, groups, rows, cols);
  if (src.capacity == 0 || (!rows.present() && !cols.present())) return;
  if (cols.compact) return launch_kernel<F, true>(src, groups, rows, cols, stream, name, log2_rt, log2_rf);
  launch_kernel<F, false>(src, groups, rows, cols, stream, name, log2_rt, log2_rf);
}

}  // namespace

void mxfp8_swiglu_backward_quantize(const SwigluBackwardSource& src, const RowGroups& groups, const Mxfp8Out& rows,
                                    const Mxfp8Out& cols, cudaStream_t stream) {
  launch<Mxfp8Format>(src, groups, rows, cols, stream, "mxfp8_swiglu_backward_quantize");
}

void fp8_blockwise_swiglu_backward_quantize(const SwigluBackwardSource& src, const RowGroups& groups,
                                            const Fp8BlockwiseOut& rows, const Fp8BlockwiseOut& cols,
                                            cudaStream_t stream, Fp8BlockScale rule) {
  with_fp8_block_scale(rule, [&](auto format) {
    launch<decltype(format)>(src, groups, rows, cols, stream, "fp8_blockwise_swiglu_backward_quantize");
  });
}

void mxfp8_swiglu_backward_quantize_in_regions(const SwigluBackwardSource& src, const RowGroups& groups,
                                               const Mxfp8Out& rows, const Mxfp8Out& cols, int log2_region_t,
                                               int log2_region_f, cudaStream_t stream) {
  DMOE_CHECK_ARG(log2_region_t >= 0 && log2_region_f >= 0, "mxfp8_swiglu_backward_quantize: negative region");
  launch<Mxfp8Format>(src, groups, rows, cols, stream, "mxfp8_swiglu_backward_quantize", log2_region_t, log2_region_f);
}

void fp8_blockwise_swiglu_backward_quantize_in_regions(const SwigluBackwardSource& src, const RowGroups& groups,
                                                       const Fp8BlockwiseOut& rows, const Fp8BlockwiseOut& cols,
                                                       int log2_region_t, int log2_region_f, cudaStream_t stream,
                                                       Fp8BlockScale rule) {
  const char* name = "fp8_blockwise_swiglu_backward_quantize";
  DMOE_CHECK_ARG(log2_region_t >= 0 && log2_region_f >= 0, name, ": negative region");
  with_fp8_block_scale(rule, [&](auto format) {
    launch<decltype(format)>(src, groups, rows, cols, stream, name, log2_region_t, log2_region_f);
  });
}

}  // namespace dist_moe::quant
