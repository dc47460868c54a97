// SM90 swap-AB (decode) mainloop for block-scaled E4M3 operands (MXFP8 and FP8 blockwise): the
// weights [E, N, K] E4M3 on the wgmma M side (256 rows per tile, or 128 gate + 128 up rows with the
// SwiGLU split), 32 tokens of E4M3 rows on N -- the BF16 decode tile (mainloop.cuh) with a 128-deep
// E4M3 k block per stage, so a stage is the same 36 KiB and the GEMM streams half the weight bytes
// -- or 16 tokens (MXFP8 inference, whose tiles cover the real rows: half the wgmma and fold work).
//
// Promotion per k32 step, as the 128x128 MXFP8 kernel does it (mainloop_mxfp8.cuh): each k32 step
// of each m64 block is one m64n32k32 wgmma into a scratch fragment (scale-d = 0), folded in by
//   acc += scratch * (w_scale[row, k32] * x_scale[token, k32])
// with two scratch sets, one folded while the other's wgmmas run, continuously across stages (the
// first version drained both at every stage's end and streamed the weights at ~64% of the copy
// rate: perf_history G47). A thread's two fragment rows (r and r + 8 of its warp's 16) share their
// scale in both formats, so per step it needs one weight scale per m64 block and one token scale
// per accumulator column (8). Decode is bound by streaming the weights (~2000 cycles of HBM time
// per stage and SM).
//
// The scale policy says where a stage's scales are and what each k32 step's are
// (docs/formats.md "GPU layouts"; a_scales are the token rows', the op's A, b_scales the weights'):
//   Mxfp8SwapABScales         E8M0 codes, the weight's FPROP view [E * N, K/32] and the tokens'
//                             [a_scale_rows, K/32] (or k-block-major words [K/128, a_scale_ld]): one
//                             4-code word per row and stage, a code per step
//   Fp8BlockwiseSwapABScales  FP32, the weight's [E, N/128, K/128] and the tokens' k-block-major
//                             [K/128, a_scale_ld]: one scale per row and stage, the same for its steps
// The consumers load them themselves (10 loads per thread and stage, one stage ahead): the producer
// warpgroup's scale warps of the 128x128 kernels are not needed here.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/numeric/e8m0.cuh"

namespace dist_moe::gemm {

// Scale policies: constructed per tile from the thread's weight rows (one per m64 block) and token
// rows (eight), clamped to the tensors; load_weights(kb, s) and load_tokens(kb, s) read stage kb's
// scales, products(s, j, f) gives step j's (weight scale x token scale) per m64 block and token column.
template <int kBlocks, int kTokens>
struct Mxfp8SwapABScales {
  struct Stage {
    uint32_t w[kBlocks];  // four E8M0 codes: the stage's k32 steps
    uint32_t x[kTokens];
  };
  const uint8_t* w_codes;
  const uint8_t* x_codes;
  int32_t w_off[kBlocks], x_off[kTokens];  // byte offsets of the rows; a weight's stage kb word at + 4 kb
  int32_t x_kb_bytes;                      // stage kb's token word at x_off + x_kb_bytes kb

  DMOE_DEVICE Mxfp8SwapABScales(const MainloopParams& p, int32_t num_k_blocks, const int32_t (&w_rows)[kBlocks],
                                const int32_t (&tokens)[kTokens])
      : w_codes(static_cast<const uint8_t*>(p.b_scales)), x_codes(static_cast<const uint8_t*>(p.a_scales)),
        x_kb_bytes(mxfp8_a_scale_strides(p).kblock) {
    const int32_t ld = num_k_blocks * 4;  // K / 32 codes per row of the weight's grid
    const int32_t x_row_bytes = mxfp8_a_scale_strides(p).row;
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) w_off[b] = w_rows[b] * ld;
#pragma unroll
    for (int q = 0; q < kTokens; ++q) x_off[q] = tokens[q] * x_row_bytes;
  }
  // The weights' codes through the read-only path, the tokens' from L2 (ld.global.cg): in the Mega
  // kernel other SMs write them during the launch (mega.cuh), which ld.global.nc forbids.
  DMOE_DEVICE void load_weights(int32_t kb, Stage& s) const {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) s.w[b] = __ldg(reinterpret_cast<const uint32_t*>(w_codes + w_off[b] + 4 * kb));
  }
  DMOE_DEVICE void load_tokens(int32_t kb, Stage& s) const {
#pragma unroll
    for (int q = 0; q < kTokens; ++q) s.x[q] = __ldcg(reinterpret_cast<const uint32_t*>(x_codes + x_off[q] + x_kb_bytes * kb));
  }
  // Step j's scale products. Codes in [64, 190] (every block of ordinary data: 2^-63 .. 2^63) add
  // in the exponent: 2^(w-127) * 2^(x-127) is the FP32 with biased exponent w + x - 127 in [1, 253],
  // exactly the product of the decoded scales. Any other code (0xFF NaN blocks, 0, extremes) takes
  // the decoded product.
  DMOE_DEVICE static void products(const Stage& s, int j, float (&f)[kBlocks][kTokens]) {
    uint32_t wb[kBlocks], xb[kTokens], outside = 0;
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) wb[b] = (s.w[b] >> (8 * j)) & 0xFFu, outside |= (wb[b] - 64u) > 126u;
#pragma unroll
    for (int q = 0; q < kTokens; ++q) xb[q] = (s.x[q] >> (8 * j)) & 0xFFu, outside |= (xb[q] - 64u) > 126u;
    if (outside == 0) {
#pragma unroll
      for (int b = 0; b < kBlocks; ++b)
#pragma unroll
        for (int q = 0; q < kTokens; ++q) f[b][q] = __uint_as_float((wb[b] + xb[q] - 127u) << 23);
    } else {
#pragma unroll
      for (int b = 0; b < kBlocks; ++b)
#pragma unroll
        for (int q = 0; q < kTokens; ++q) f[b][q] = decode(wb[b]) * decode(xb[q]);
    }
  }
  // numeric::e8m0_to_float without its branches (selects instead: branching on each of a stage's
  // 40 codes made the kernel issue-bound, at half the copy rate; perf_history G49).
  DMOE_DEVICE static float decode(uint32_t byte) {
    uint32_t bits = byte << 23;
    bits = byte == 0u ? 0x00400000u : bits;                       // 2^-127, a subnormal
    bits = byte == numeric::kE8M0NaN ? 0x7FC00000u : bits;        // NaN
    return __uint_as_float(bits);
  }
};

template <int kBlocks, int kTokens>
struct Fp8BlockwiseSwapABScales {
  static constexpr int kScaleBlock = 128;  // K, and weight rows, per FP32 scale: one stage's k block
  struct Stage {
    float w[kBlocks];
    float x[kTokens];
  };
  const float* w_scales;
  const float* x_scales;
  int32_t x_ld;  // (K / 128) * a_scale_ld < 2^31: the launch checks the scale grid's size
  int32_t w_off[kBlocks], x_off[kTokens];  // stage kb's at w_off + kb and x_off + kb * x_ld

  DMOE_DEVICE Fp8BlockwiseSwapABScales(const MainloopParams& p, int32_t num_k_blocks, const int32_t (&w_rows)[kBlocks],
                                       const int32_t (&tokens)[kTokens])
      : w_scales(static_cast<const float*>(p.b_scales)), x_scales(static_cast<const float*>(p.a_scales)),
        x_ld(static_cast<int32_t>(p.a_scale_ld)) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) w_off[b] = (w_rows[b] / kScaleBlock) * num_k_blocks;
#pragma unroll
    for (int q = 0; q < kTokens; ++q) x_off[q] = tokens[q];
  }
  DMOE_DEVICE void load_weights(int32_t kb, Stage& s) const {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) s.w[b] = __ldg(w_scales + w_off[b] + kb);
  }
  // Non-coherent loads: no Mega launch runs FP8 blockwise, so its token rows never change in a launch
  // (one that did would read them through L2, as the MXFP8 scales above do).
  DMOE_DEVICE void load_tokens(int32_t kb, Stage& s) const {
#pragma unroll
    for (int q = 0; q < kTokens; ++q) s.x[q] = __ldg(x_scales + kb * x_ld + x_off[q]);
  }
  // Step j's scale products: the stage's, whatever the step.
  DMOE_DEVICE static void products(const Stage& s, int /*j*/, float (&f)[kBlocks][kTokens]) {
#pragma unroll
    for (int b = 0; b < kBlocks; ++b)
#pragma unroll
      for (int q = 0; q < kTokens; ++q) f[b][q] = s.w[b] * s.x[q];
  }
};

template <class Config, template <int, int> class ScalesOf>
struct Sm90BlockScaledSwapABMainloop : Sm90Mainloop<Config> {
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

  static constexpr int kSteps = kBlockK / Operands::kK;  // k32 steps per stage: 4
  static constexpr int kTokenScales = kAccPerMma / 2;    // token columns of one thread: 8 (4 at 16 tokens)
  using Scales = ScalesOf<kMmaPerWg, kTokenScales>;
  using Stage = typename Scales::Stage;
  static_assert(kKind == GemmKind::kFpropSwapAB && Operands::kElemBytes == 1, "block-scaled swap-AB: E4M3 decode tiles");
  static_assert(kSteps == 4 && kBlockM == 256 && kMmaPerWg == 2 && (kBlockN == 32 || kBlockN == 16),
                "256 weight rows (two m64 blocks per warpgroup) x 32 or 16 tokens, four k32 steps per stage");

  using StepMma = typename Operands::template Mma<kBlockN, 0, 0>;  // m64n32k32 or m64n16k32

#if defined(__CUDACC__)

  // The interface of Sm90Mainloop::mma_tile.
  template <class Hook = typename Base::NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& p, const WorkTile& t, int32_t num_k_blocks,
                                   int /*rows_in_last*/, const Pipeline& pipe, PipelineState<kStages>& st,
                                   uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
    Base::zero_acc(acc);
    if (num_k_blocks == 0) return;

    // This thread's scale rows: one weight row per m64 block (its global row in [E * N]), eight
    // token rows. Rows past the tensors read the last row (never stored).
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    int32_t w_rows[kMmaPerWg], tokens[kTokenScales];
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
      w_rows[b] = t.expert * p.weight_rows + Base::swap_ab_weight_row(p, t.m_block, Base::tile_row(wg, b) + frag_row);
    const int32_t token0 = t.row_begin + t.n_block * kBlockN + 2 * (lane % 4), last_token = p.a_scale_rows - 1;
#pragma unroll
    for (int q = 0; q < kTokenScales; ++q) tokens[q] = min(token0 + 8 * (q / 2) + q % 2, last_token);
    const Scales scales(p, num_k_blocks, w_rows, tokens);

    // Two scratch sets in one continuous stream of steps: step j of a stage uses set j % 2, each set
    // is refilled (the step two ahead, across the stage boundary too) right after its fold, so one
    // commit group is always in flight behind the one being folded and the stage boundary leaves
    // no bubble. (Four sets, one per step, need 128 scratch registers: with the accumulators that
    // is more than the 168 ptxas allocates per thread, and it serialized the wgmmas, C7514.)
    float s0[kMmaPerWg][kAccPerMma], s1[kMmaPerWg][kAccPerMma];
    // The first scales ahead of the first stage, but the Mega kernel's token scales only once it is
    // full: the launch writes the token rows and publishes them before the tile's loads start.
    Stage now;
    scales.load_weights(0, now);
    const bool late = p.token_scales_after_first_stage;
    if (!late) scales.load_tokens(0, now);
    pipe.consumer_wait(st);
    if (late) scales.load_tokens(0, now);
    issue_step(smem, st.stage, wg, 0, s0);
    issue_step(smem, st.stage, wg, 1, s1);
    const int32_t last_kb = num_k_blocks - 1;
    // Every block but the last (no branch around a wgmma: a divergent-looking path makes ptxas
    // serialize them, C7518).
    for (int32_t kb = 0; kb < last_kb; ++kb) {
      const int stage = st.stage;
      Stage next;
      scales.load_weights(kb + 1, next);
      scales.load_tokens(kb + 1, next);
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
                                    const Stage& s, int j) {
    float f[kMmaPerWg][kTokenScales];  // (weight scale x token scale) of step j, before the wait
    Scales::products(s, j, f);
    ptx::wgmma_wait<kPending>();
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) {
      ptx::wgmma_fence_operands(scratch[b]);
#pragma unroll
      for (int i = 0; i < kAccPerMma; ++i) acc[b][i] = fmaf(scratch[b][i], f[b][2 * (i / 4) + i % 2], acc[b][i]);
    }
  }

#endif  // __CUDACC__
};

template <class Config>
using Sm90Mxfp8SwapABMainloop = Sm90BlockScaledSwapABMainloop<Config, Mxfp8SwapABScales>;
template <class Config>
using Sm90Fp8BlockwiseSwapABMainloop = Sm90BlockScaledSwapABMainloop<Config, Fp8BlockwiseSwapABScales>;

}  // namespace dist_moe::gemm
