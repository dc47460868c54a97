// SM90 mainloop for FP8-blockwise operands (DeepSeek-V3 recipe; docs/formats.md "GPU layouts"):
// A = E4M3 rows with one FP32 scale per 1 x 128 (k-block-major [K/128, a_scale_ld]), B = E4M3
// weights [E, N, K] with one FP32 scale per 128 x 128 ([E, N/128, K/128]).
//
// The E4M3 wgmma accumulates in FP32 but cannot apply the scales, which change every 128 of K. So
// each k block (one stage: 128 E4M3 = 128 bytes of K, exactly one scale block) is contracted into
// a scratch accumulator (four m64nNk32 wgmmas, the first with scale-d = 0), the warpgroup waits for
// it, and folds it into the tile's accumulator with one FFMA per element:
//   acc += scratch * (a_scale[row] * b_scale[column's 128-row block of W])
// (the "promotion" of DeepGEMM's SM90 kernels). The wait stalls this warpgroup's tensor work; the
// other consumer warpgroup's wgmmas (cooperative schedule: both share every tile) fill the tensor
// cores meanwhile, so the promotion's FP32 work hides behind them when it is shorter than one
// warpgroup's k block of wgmma.
//
// Scratch width: the whole tile up to 128 columns (64 registers). A wider tile (BN = 256) runs its
// k block as four 64-column slices, each contracted and promoted in turn: 128 + 32 accumulator
// registers instead of 256 (what fits next to the epilogue in 232), at three more waits per k block.
//
// Scale lookups per k block and thread: the A scales of its two fragment rows (row r and r + 8 of
// its m64 block) and one B scale per 64 tile columns. A 64-column group of the tile always lies
// inside one 128-row block of W: tile columns start at multiples of 64 of W's rows (n_block * BN,
// or with the SwiGLU split n_block * BN / 2 and F + n_block * BN / 2, where F % 64 == 0). Scales
// are read from global memory (L2) one k block ahead, so their latency overlaps a whole k block of
// wgmma; rows past the buffer read row m_capacity - 1 (their results are never stored).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"

namespace dist_moe::gemm {

template <class Config>
struct Sm90Fp8BlockwiseMainloop : Sm90Mainloop<Config> {
  using Base = Sm90Mainloop<Config>;
  using typename Base::Pipeline;
  using Base::kBlockK;
  using Base::kBlockM;
  using Base::kBlockN;
  using Base::kKind;
  using Base::kMmaPerWg;
  using Base::kAccPerMma;
  using Base::kStages;
  using Base::kSplit;
  using Operands = typename Config::Operands;

  static constexpr int kScaleBlock = 128;  // K elements per scale (A: 1 x 128, B: 128 x 128)
  // Scratch accumulator width: the whole tile up to 128 columns; 64 for 128x256, whose 128
  // accumulators leave room for only 32 scratch registers in the consumers' 232 (setmaxnreg).
  static constexpr int kSliceN = kBlockN <= 128 ? kBlockN : 64;
  static constexpr int kSlices = kBlockN / kSliceN;
  static constexpr int kSliceAcc = kSliceN / 2;  // FP32 registers of one m64 x kSliceN fragment
  static constexpr int kGroups = kBlockN / 64;   // 64-column groups: one B scale each
  static_assert(Operands::kElemBytes == 1 && kBlockK == kScaleBlock, "one 128-byte E4M3 k block = one scale block");
  static_assert(kKind == GemmKind::kFprop, "FP8 blockwise: FPROP kinds (DGRAD runs as FPROP on the transposed weight)");
  static_assert(!Base::kPingPong && kMmaPerWg == 1,
                "cooperative 128-row tiles: the other warpgroup's wgmmas hide this one's promotion");
  static_assert(kBlockN % 64 == 0 && kBlockN % kSliceN == 0, "BN: 64-column scale groups, whole slices");

  using SliceMma = typename Operands::template Mma<kSliceN, 0, 0>;

#if defined(__CUDACC__)

  // Contracts one tile for warpgroup `wg` into acc (interface of Sm90Mainloop::mma_tile; the hook
  // runs after each k block is folded in). Blocks past the expert's end issue no wgmma but still
  // wait for and release every stage, so the ring keeps its phase.
  template <class Hook = typename Base::NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& p, const WorkTile& t, int32_t num_k_blocks,
                                   int /*rows_in_last*/, const Pipeline& pipe, PipelineState<kStages>& st,
                                   uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
#pragma unroll
    for (int i = 0; i < kAccPerMma; ++i) acc[0][i] = 0.0f;
    if (num_k_blocks == 0) return;
    if (Base::active_blocks(t, wg) == 0) {
      for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
        pipe.consumer_wait(st);
        pipe.consumer_release(st.stage);
        hook(kb);
        st.advance();
      }
      return;
    }
    // This thread's two fragment rows, as rows of the A buffer (clamped: see the top of the file).
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int32_t row0 = t.row_begin + t.m_block * kBlockM + Base::tile_row(wg, 0) + frag_row;
    const int32_t last_row = p.a_scale_rows - 1;
    const float* a_lo = p.a_scales + min(row0, last_row);
    const float* a_hi = p.a_scales + min(row0 + 8, last_row);
    // One B scale row per 64-column group: W's [E * N / 128, K / 128] scale rows.
    const float* b_row[kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      int32_t w_row;
      if constexpr (kSplit) {
        const int32_t half = g < kGroups / 2 ? 0 : p.split_offset;
        w_row = half + t.n_block * (kBlockN / 2) + 64 * (g % (kGroups / 2));
      } else {
        w_row = t.n_block * kBlockN + 64 * g;
      }
      const int64_t block_row = (static_cast<int64_t>(t.expert) * p.weight_rows + w_row) / kScaleBlock;
      b_row[g] = p.b_scales + block_row * num_k_blocks;
    }

    // Scales of k block kb + 1 are loaded while block kb is contracted (an L2 round trip is longer
    // than one k block of wgmma when both warpgroups share the tensor cores).
    float next_lo = __ldg(a_lo), next_hi = __ldg(a_hi), next_b[kGroups];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) next_b[g] = __ldg(b_row[g]);
    float scratch[kSliceAcc];
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      const float sa_lo = next_lo, sa_hi = next_hi;
      float sb[kGroups];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) sb[g] = next_b[g];
      if (kb + 1 < num_k_blocks) {
        const int64_t a_off = static_cast<int64_t>(kb + 1) * p.a_scale_ld;
        next_lo = __ldg(a_lo + a_off);
        next_hi = __ldg(a_hi + a_off);
#pragma unroll
        for (int g = 0; g < kGroups; ++g) next_b[g] = __ldg(b_row[g] + kb + 1);
      }

      pipe.consumer_wait(st);
      const uint64_t da = Base::desc_a(smem, st.stage, wg, 0);
      const uint64_t db = Base::desc_b(smem, st.stage);
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        // Slice s = B rows [s * kSliceN, (s + 1) * kSliceN) of the stage: K-major rows 128 bytes apart.
        const uint64_t db_s = ptx::desc_advance(db, static_cast<uint32_t>(s * kSliceN * 128));
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / Operands::kK; ++kk)
          SliceMma::mma(scratch, ptx::desc_advance(da, kk * Base::kStepA), ptx::desc_advance(db_s, kk * Base::kStepB),
                        kk > 0 ? 1u : 0u);
        ptx::wgmma_commit();
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_operands(scratch);
        if (s == kSlices - 1) pipe.consumer_release(st.stage);  // the stage's last reader is done
        // Fold in: register i of the slice is row lo/hi by bit 1, column 8 (i / 4) + ... of the slice.
#pragma unroll
        for (int i = 0; i < kSliceAcc; ++i) {
          const int col = s * kSliceN + 8 * (i / 4);
          const float sb_col = sb[col / 64];
          const float scale = ((i / 2) % 2 == 0 ? sa_lo : sa_hi) * sb_col;
          acc[0][s * kSliceAcc + i] = fmaf(scratch[i], scale, acc[0][s * kSliceAcc + i]);
        }
      }
      hook(kb);
      st.advance();
    }
    ptx::wgmma_fence_operands(acc[0]);
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
