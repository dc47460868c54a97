// SM90 swap-AB (decode) mainloop for MXFP8 operands: the weights [E, N, K] E4M3 on the wgmma M
// side (256 rows per tile, or 128 gate + 128 up rows with the SwiGLU split), 32 tokens of E4M3
// rows on N -- the BF16 decode tile (mainloop.cuh) with a 128-deep E4M3 k block per stage, so a
// stage is the same 36 KiB and the GEMM streams half the weight bytes.
//
// Scales (docs/formats.md "GPU layouts"): the weight's FPROP view [E * N, K/32] (each 32x32 tile's
// code on each of its rows; DGRAD passes the transposed copy's view) and the token rows'
// [a_scale_rows, K/32]; the launch's a_scales are the tokens' (the op's A), b_scales the weights'.
// A thread's two fragment rows (r and r + 8 of its warp's 16) lie in one 32-row group, so per k32
// step it needs one weight scale per m64 block and one token scale per accumulator column (8).
//
// Per-32 promotion as the 128x128 MXFP8 kernel does it (mainloop_mxfp8.cuh): each k32 step of each
// m64 block is one m64n32k32 wgmma into a scratch fragment (scale-d = 0), folded in by
//   acc += scratch * (w_scale[row group, k32] * x_scale[token, k32])
// with two scratch sets, one folded while the other's wgmmas run, continuously across stages (the
// first version drained both at every stage's end and streamed the weights at ~64% of the copy
// rate: perf_history G47). Decode is bound by streaming the weights (~2000 cycles of HBM time per
// stage and SM).
// The consumers read the scale codes themselves (10 words per thread and stage, loaded one stage
// ahead): the producer warpgroup's scale warps of the 128x128 kernel are not needed here.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/numeric/e8m0.cuh"

namespace dist_moe::gemm {

template <class Config>
struct Sm90Mxfp8SwapABMainloop : Sm90Mainloop<Config> {
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

  static constexpr int kSteps = kBlockK / Operands::kK;  // k32 steps per stage: 4, one E8M0 word
  static constexpr int kTokenScales = kAccPerMma / 2;    // token columns of one thread: 8
  static_assert(kKind == GemmKind::kFpropSwapAB && Operands::kElemBytes == 1, "MXFP8 swap-AB: E4M3 decode tiles");
  static_assert(kSteps == 4 && kBlockM == 256 && kMmaPerWg == 2 && kBlockN == 32,
                "256 weight rows (two m64 blocks per warpgroup) x 32 tokens, four k32 steps per stage");

  using StepMma = typename Operands::template Mma<kBlockN, 0, 0>;  // m64n32k32

#if defined(__CUDACC__)

  // The interface of Sm90Mainloop::mma_tile.
  template <class Hook = typename Base::NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& p, const WorkTile& t, int32_t num_k_blocks,
                                   int /*rows_in_last*/, const Pipeline& pipe, PipelineState<kStages>& st,
                                   uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
#pragma unroll
      for (int i = 0; i < kAccPerMma; ++i) acc[b][i] = 0.0f;
    if (num_k_blocks == 0) return;

    // Byte offsets of this thread's scale rows (stage kb's four codes at + 4 kb): one weight row per
    // m64 block, eight token rows. Rows past the tensors read the last row (never stored).
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int32_t ld = num_k_blocks * kSteps;  // K / 32 codes per row, both grids
    int32_t w_off[kMmaPerWg], x_off[kTokenScales];
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) {
      int32_t row;
      if constexpr (kSplit) {  // block 0: gate rows [0, F); block 1: the matching up rows [F, 2F)
        const int in_half = Base::tile_row(wg, b) % (kBlockM / 2) + frag_row;
        row = (b == 0 ? 0 : p.split_offset) + t.m_block * (kBlockM / 2) + in_half;
      } else {
        row = min(t.m_block * kBlockM + Base::tile_row(wg, b) + frag_row, p.weight_rows - 1);
      }
      w_off[b] = (t.expert * p.weight_rows + row) * ld;
    }
    const int32_t token0 = t.row_begin + t.n_block * kBlockN + 2 * (lane % 4), last_token = p.a_scale_rows - 1;
#pragma unroll
    for (int q = 0; q < kTokenScales; ++q)
      x_off[q] = min(token0 + 8 * (q / 2) + q % 2, last_token) * static_cast<int32_t>(p.a_scale_ld);

    const auto* w_codes = static_cast<const uint8_t*>(p.b_scales);
    const auto* x_codes = static_cast<const uint8_t*>(p.a_scales);
    // Two scratch sets in one continuous stream of steps: step j of a stage uses set j % 2, each set
    // is refilled (the step two ahead, across the stage boundary too) right after its fold, so one
    // commit group is always in flight behind the one being folded and the stage boundary leaves
    // no bubble. (Four sets, one per step, need 128 scratch registers: with the accumulators that
    // is more than the 168 ptxas allocates per thread, and it serialized the wgmmas, C7514.)
    float s0[kMmaPerWg][kAccPerMma], s1[kMmaPerWg][kAccPerMma];
    Words now = load_words(w_codes, x_codes, w_off, x_off, 0);
    pipe.consumer_wait(st);
    issue_step(smem, st.stage, wg, 0, s0);
    issue_step(smem, st.stage, wg, 1, s1);
    const int32_t last_kb = num_k_blocks - 1;
    // Every block but the last (no branch around a wgmma: a divergent-looking path makes ptxas
    // serialize them, C7518).
    for (int32_t kb = 0; kb < last_kb; ++kb) {
      const int stage = st.stage;
      const Words next = load_words(w_codes, x_codes, w_off, x_off, kb + 1);
      fold_step<1>(acc, s0, now, 0);
      issue_step(smem, stage, wg, 2, s0);
      fold_step<1>(acc, s1, now, 1);
      issue_step(smem, stage, wg, 3, s1);
      fold_step<1>(acc, s0, now, 2);
      st.advance();
      pipe.consumer_wait(st);
      issue_step(smem, st.stage, wg, 0, s0);
      fold_step<1>(acc, s1, now, 3);
      pipe.consumer_release(stage);  // its four steps are folded
      issue_step(smem, st.stage, wg, 1, s1);
      hook(kb);
      now = next;
    }
    fold_step<1>(acc, s0, now, 0);
    issue_step(smem, st.stage, wg, 2, s0);
    fold_step<1>(acc, s1, now, 1);
    issue_step(smem, st.stage, wg, 3, s1);
    fold_step<1>(acc, s0, now, 2);
    fold_step<0>(acc, s1, now, 3);
    pipe.consumer_release(st.stage);
    hook(last_kb);
    st.advance();
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) ptx::wgmma_fence_operands(acc[b]);
  }

 private:
  // One stage's codes: the weight row word of each m64 block and the eight token words.
  struct Words {
    uint32_t w[kMmaPerWg];
    uint32_t x[kTokenScales];
  };

  DMOE_DEVICE static Words load_words(const uint8_t* w_codes, const uint8_t* x_codes, const int32_t (&w_off)[kMmaPerWg],
                                      const int32_t (&x_off)[kTokenScales], int32_t kb) {
    Words s;
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) s.w[b] = __ldg(reinterpret_cast<const uint32_t*>(w_codes + w_off[b] + 4 * kb));
#pragma unroll
    for (int q = 0; q < kTokenScales; ++q)
      s.x[q] = __ldg(reinterpret_cast<const uint32_t*>(x_codes + x_off[q] + 4 * kb));
    return s;
  }

  DMOE_DEVICE static float code(uint32_t word, int step) {
    return numeric::e8m0_to_float(static_cast<uint8_t>(word >> (8 * step)));
  }

  // k32 step j of the stage, both m64 blocks, into `scratch` (scale-d = 0): one commit group.
  DMOE_DEVICE static void issue_step(uint32_t smem, int stage, int wg, int j, float (&scratch)[kMmaPerWg][kAccPerMma]) {
    const uint64_t db = ptx::desc_advance(Base::desc_b(smem, stage), static_cast<uint32_t>(j * Base::kStepB));
    ptx::wgmma_fence();  // the scratch registers were read by the last fold
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
      StepMma::mma(scratch[b], ptx::desc_advance(Base::desc_a(smem, stage, wg, b), static_cast<uint32_t>(j * Base::kStepA)),
                   db, 0u);
    ptx::wgmma_commit();
  }

  // Waits until at most kPending commit groups are in flight (step j's is then done) and folds it.
  // Register 4 c + i of a block is token 8 c + 2 (lane % 4) + i % 2 (epilogue_swap_ab.cuh).
  template <int kPending>
  DMOE_DEVICE static void fold_step(float (&acc)[kMmaPerWg][kAccPerMma], float (&scratch)[kMmaPerWg][kAccPerMma],
                                    const Words& s, int j) {
    float x[kTokenScales];
#pragma unroll
    for (int q = 0; q < kTokenScales; ++q) x[q] = code(s.x[q], j);
    ptx::wgmma_wait<kPending>();
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) {
      ptx::wgmma_fence_operands(scratch[b]);
      const float w = code(s.w[b], j);
#pragma unroll
      for (int i = 0; i < kAccPerMma; ++i)
        acc[b][i] = fmaf(scratch[b][i], w * x[2 * (i / 4) + i % 2], acc[b][i]);
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
