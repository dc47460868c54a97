// Epilogue of the MXFP8 W2 DGRAD that finishes the SwiGLU backward and quantizes its output: from
// the tile's grad_h2 accumulators and h1 = [gate | up] it computes dxy = [dgate | dup] and writes it
// as MXFP8 rows (W13 DGRAD's A operand) and, in training, as the compact column bundle (W13 WGRAD's),
// so neither grad_h2 nor a BF16 dxy is ever stored -- upstream's fused "SwiGLU-bwd quant" of its second
// backward launch (upstream_kernels_and_formats.md §2.5), here in the W2 DGRAD's epilogue: the Mega
// pipeline's backward (issue #28). Bit for bit the staged pair "W2 DGRAD (BF16 grad_h2) ->
// mxfp8_swiglu_backward_quantize":
//   dz = BF16(acc) (the value the staged grad_h2 holds), g, u = h1's BF16 values,
//   dg, du = activation::swiglu_backward(g, u, dz) rounded to BF16 (the fused quantizer's order),
//   rows of an expert's segment past its real rows (EpilogueParams::real_rows) as zeros,
//   then the quantizers' steps on dg (dxy columns n) and du (columns F + n) (epilogue_mxfp8_blocks.cuh).
//
// Tile: the MXFP8 mainloop's cooperative 128x128 tile of the transposed-weight DGRAD (grad_h2 columns
// n0 .. n0 + 127, n0 = 128 n_block); warpgroup w owns rows 64 w .. 64 w + 63, each row's 128 columns
// four 32-column blocks of dgate and four of dup. h1's values come by ordinary loads (gate and up
// pairs at a thread's two fragment rows: 64 four-byte loads, all issued before any is used), from L2:
// the producer thread prefetches the tile's h1 boxes when it starts the tile's loads (prefetch_l2).
//
// Stores (plain global stores; the next kernel reads them): a lane's 8-byte piece of each row block, a
// row's four codes of a half as one 32-bit word (F and n0 are multiples of 128: whole k-block words, or
// four adjacent bytes of a [rows, 2F/32] row); the column bundle through Mxfp8ColumnStaging, 64
// columns at a time in the writer's bytes. Rows past the expert's segment are not written.
#pragma once

#include <cstdint>

#include "dist_moe/device/activation/swiglu.cuh"
#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_mxfp8_blocks.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"
#include "dist_moe/device/ptx/cvt.cuh"
#include "dist_moe/device/ptx/tma.cuh"

namespace dist_moe::gemm {

template <class Mainloop>
struct SwigluBackwardMxfp8Epilogue {
  using Writer = PaddedStagingWriter;  // only its bytes: the column staging
  static_assert(Mainloop::kKind == GemmKind::kFprop && !Mainloop::kSplit && !Mainloop::kPingPong &&
                    Mainloop::kBlockM == 128 && Mainloop::kBlockN == 128 && Mainloop::kMmaPerWg == 1,
                "the cooperative 128x128 tile: 64 rows and 128 grad_h2 columns per warpgroup");
  static constexpr int kCols = Mainloop::kBlockN;  // grad_h2 (= dgate = dup) columns per tile
  static constexpr int kJ = kCols / 8;             // a thread's column pairs per fragment row: 16
  static constexpr int kBlocks = kCols / 32;       // 32-column blocks per row and half: 4
  static constexpr bool kClipStats = false;
  static constexpr bool kPrefetchL2 = true;
  static constexpr int kOutBytes = 1;

#if defined(__CUDACC__)
  static_assert(Mxfp8ColumnStaging::kBytes <= Writer::kBytesPerWg, "64 staged columns fit the writer's bytes");

  // The tile's h1 boxes (h1's map: 64 rows x 64 BF16 columns) into L2: both 64-row halves of the
  // tile, the gate columns n0 .. n0 + 127 and the up columns F + n0 .. (8 box prefetches).
  DMOE_DEVICE static void prefetch_l2(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t) {
    if (t.phantom) return;
    const int32_t row = t.row_begin + t.m_block * Mainloop::kBlockM;
    const int32_t n0 = t.n_block * kCols;
#pragma unroll
    for (int r = 0; r < Mainloop::kBlockM; r += 64)
#pragma unroll
      for (int c = 0; c < 2 * kCols; c += 64) {
        const int32_t col = c < kCols ? n0 + c : p.f + n0 + c - kCols;
        ptx::tma_prefetch_l2_2d(ops.map[kMapH1], col, row + r);
      }
  }

  template <class AnyWriter>
  DMOE_DEVICE static void store(const EpilogueParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                float (&acc)[Mainloop::kMmaPerWg][Mainloop::kAccPerMma], int wg, AnyWriter& w,
                                ClipCounts&) {
    const float(&a)[Mainloop::kAccPerMma] = acc[0];
    const int row0 = t.m_block * Mainloop::kBlockM + Mainloop::tile_row(wg, 0);
    if (row0 >= t.num_rows) return;  // uniform per warpgroup
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int quad_lane = lane % 4;
    const int frag_row = row0 + static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int32_t n0 = t.n_block * kCols;
    const int64_t f = p.f, two_f = 2 * f;
    const int32_t real = p.real_rows != nullptr ? p.real_rows[t.expert] : t.num_rows;

    // dxy[half][h][j]: the BF16 pair of dgate (half 0) / dup (half 1) at columns 8 j + 2 quad_lane + 0, 1
    // of fragment row h. First h1's gate and up pairs (zero for padding rows), every load in flight.
    uint32_t dxy[2][2][kJ];
    const char* const h1 = ops.base[kMapH1];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = frag_row + 8 * h;
      const bool real_row = r < real;
      const int64_t m = static_cast<int64_t>(t.row_begin) + (real_row ? r : 0);
      const auto* gate = reinterpret_cast<const uint32_t*>(h1 + (m * two_f + n0) * 2) + quad_lane;
      const auto* up = gate + f / 2;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        dxy[0][h][j] = real_row ? __ldg(gate + 4 * j) : 0u;
        dxy[1][h][j] = real_row ? __ldg(up + 4 * j) : 0u;
      }
    }
    const activation::SwigluParams sp{p.clamped != 0, p.alpha, p.limit};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const bool real_row = frag_row + 8 * h < real;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        const uint32_t dz = ptx::pack_bf16x2(a[4 * j + 2 * h], a[4 * j + 2 * h + 1]);  // grad_h2 as BF16
        const uint32_t g = dxy[0][h][j], u = dxy[1][h][j];
        float dg0, du0, dg1, du1;
        activation::swiglu_backward(ptx::bf16_lo_to_float(g), ptx::bf16_lo_to_float(u), ptx::bf16_lo_to_float(dz),
                                    sp, &dg0, &du0);
        activation::swiglu_backward(ptx::bf16_hi_to_float(g), ptx::bf16_hi_to_float(u), ptx::bf16_hi_to_float(dz),
                                    sp, &dg1, &du1);
        dxy[0][h][j] = real_row ? ptx::pack_bf16x2(dg0, dg1) : 0u;
        dxy[1][h][j] = real_row ? ptx::pack_bf16x2(du0, du1) : 0u;
      }
    }

    // Row blocks: E4M3 [rows, 2F] at kMapOut's base, codes at mx_scales.
    uint8_t* const q = reinterpret_cast<uint8_t*>(ops.base[kMapOut]);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t col0 = half * f + n0;  // the half's first dxy column in this tile
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = frag_row + 8 * h;
        const bool exists = r < t.num_rows;
        const int64_t m = static_cast<int64_t>(t.row_begin) + r;
        const uint32_t codes = mxfp8_store_row_blocks<kBlocks>([&](int b) { return block_pairs(dxy[half][h], b); },
                                                               exists ? q + m * two_f + col0 : nullptr, quad_lane);
        if (exists && quad_lane == 0) {
          const int64_t at = m * p.mx_scale_strides.row + (col0 / 128) * static_cast<int64_t>(p.mx_scale_strides.kblock);
          *reinterpret_cast<uint32_t*>(p.mx_scales + at) = codes;
        }
      }
    }

    // Column blocks (training): 64 columns per pass, dgate's two then dup's two.
    if (p.mx_col == nullptr) return;
    const Mxfp8ColumnBundle bundle = mxfp8_column_bundle(p, two_f);
#pragma unroll
    for (int pass = 0; pass < 4; ++pass) {
      const int half = pass / 2, c64 = pass % 2;
      const uint32_t staged = w.borrow();  // (its barrier: the previous pass's reads are done)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int b = 0; b < 2; ++b) {
          Mxfp8ColumnStaging::stage(staged, block_pairs(dxy[half][h], 2 * c64 + b), b, frag_row + 8 * h - row0,
                                    quad_lane);
        }
      }
      Mxfp8ColumnStaging::store(staged, w.bar, bundle, half * f + n0 + 64 * c64,
                                static_cast<int64_t>(t.row_begin) + row0, t.num_rows - row0);
    }
  }


 private:
  // Row block b's four pairs of one fragment row (epilogue_mxfp8_blocks.cuh's uint4).
  DMOE_DEVICE static uint4 block_pairs(const uint32_t (&v)[kJ], int b) {
    return make_uint4(v[4 * b], v[4 * b + 1], v[4 * b + 2], v[4 * b + 3]);
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
