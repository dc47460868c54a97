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
// Scratch: 128x128 keeps two 64-column slices (32 registers each) and pipelines them -- slice 0 of a
// k block is folded in while slice 1 runs, slice 1 while the next block's slice 0 runs -- so a
// warpgroup never waits with an empty wgmma queue. 128x256 runs two 128-column slices (64
// registers) one after another, A and B from shared memory; with the 128 accumulators that takes
// 240 registers per consumer thread (kWideConsumers). Four 64-column slices with A in registers
// (perf_history G39) issue twice the waits and folds: 3-11% slower (G66).
//
// Promotion every kPromoteK < 128 of K (128x256 FPROP only; the "_p64" / "_p32" kernels): each slice
// runs as 128 / kPromoteK wgmma groups of kPromoteK / 32 k32 steps, each folded with the k block's
// scales (the same for all of them) -- at 32 waited for in turn, at 64 pipelined over the tile's
// 64-column quarters (kQuarters, G159). The tensor cores' own accumulator keeps about 14
// significant bits (the DeepSeek-V3 report, section 3.3.2), and a group's sum carries into the next
// wgmma of the same group: shorter groups put the outputs closer to an FP32 accumulation of the
// products, at one more wait and fold per group. The MXFP8 training layer's W13 takes them (its BF16
// h1 feeds h2's E4M3 rounding: perf_history G158).
//
// Scale lookups per k block and thread: the A scales of its two fragment rows (row r and r + 8 of
// its m64 block) and one B scale per slice (kSliceN tile columns), which always lie inside one 128-row
// block of W: tile columns start at multiples of kSliceN of W's rows (n_block * BN, or with the
// SwiGLU split n_block * BN / 2 and F + n_block * BN / 2; 128x128 needs F % 64 == 0, 128x256 F %
// 128 == 0, which the API requires). Scales are read from global memory (L2) ahead of the wgmmas that
// use them (see load_scales' callers); rows past the buffer read row m_capacity - 1 and a last tile
// past N reads W's last scale row (those results are never stored).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/numeric/fp8_blockwise.cuh"

namespace dist_moe::gemm {

template <class Config, int kPromoteK = 128>
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
  // Scratch slice width: 128x256 two of 128 columns (FPROP: two B scales per tile; 240 registers:
  // ptxas still reports 44-58 bytes of spill stores, 92-100 for the _c2 twins, and the tile is
  // 3-11% faster than four RS slices all the same: G66; WGRAD likewise, G69), 128x128 64 columns,
  // pipelined in pairs (kDoubleBuffer).
  static constexpr int kSliceN = kBlockN == 256 ? 128 : 64;
  static constexpr bool kDoubleBuffer = kBlockN == 128;
  static constexpr bool kWideConsumers = kSliceN == 128;
  static constexpr int kSlices = kBlockN / kSliceN;
  static constexpr int kSliceAcc = kSliceN / 2;  // FP32 registers of one m64 x kSliceN fragment
  // One B scale per slice: a 128x256 tile's 128-column halves each lie in one 128-row block of W,
  // and so does each 64-column slice of 128x128 (its SwiGLU split puts 64 gate and 64 up columns).
  static constexpr int kGroups = kSlices;  // B scales per tile and k block
  static_assert(Operands::kElemBytes == 1 && kBlockK == kScaleBlock, "one 128-byte E4M3 k block = one scale block");
  static_assert(kKind == GemmKind::kFprop || kKind == GemmKind::kWgrad,
                "FP8 blockwise: FPROP (DGRAD runs as FPROP on the transposed weight) and WGRAD");
  static_assert(kKind != GemmKind::kWgrad || Config::kClusterM == 1, "FP8 WGRAD: no clusters");
  static_assert(!Base::kPingPong && kMmaPerWg == 1,
                "cooperative 128-row tiles: the other warpgroup's wgmmas hide this one's promotion");
  static_assert(kBlockN % kSliceN == 0, "BN: whole slices, one B scale each");
  static_assert(!kDoubleBuffer || kSlices == 2, "the pipelined loop runs two slices per k block");

  // Promotion groups per slice and k32 steps per group (the top of the file).
  static constexpr int kGroupSteps = kPromoteK / Operands::kK;
  static constexpr int kPromoteGroups = kBlockK / kPromoteK;
  static_assert(kPromoteK == 128 || kPromoteK == 64 || kPromoteK == 32, "promotion every 128, 64 or 32 of K");
  static_assert(kPromoteK == 128 || (kKind == GemmKind::kFprop && kWideConsumers),
                "promotion below 128 of K: the 128x256 FPROP loop only");

  using SliceMma = typename Operands::template Mma<kSliceN, 0, 0>;

  // 128x256 FPROP promoting every 64 (G159): the tile's four 64-column quarters x two 64-deep groups per k
  // block, eight register-sourced m64n64 units of two k32 wgmmas each, pipelined in two 32-register
  // scratch slices so one unit is in flight while the previous one is folded (the loop at kPromoteK =
  // 64 without it waited for every group with an empty queue: +26-42%, G158). Per accumulator the same
  // group sums (the same k32 steps chained) and folds in the same order as that serial loop, which the
  // `_p32` kernels keep.
  static constexpr bool kQuarters = kPromoteK == 64 && kWideConsumers && kKind == GemmKind::kFprop;
  static constexpr int kQuarterN = 64;
  static constexpr int kQuarterAcc = kQuarterN / 2;  // FP32 registers of one m64 x 64 fragment
  static constexpr int kUnits = (kBlockN / kQuarterN) * kPromoteGroups;  // units per k block: 8

  // ---- WGRAD (1 x 128 blocks along tokens on both operands) ------------------------------------
  // A = grad_out^T [N, tokens] and B = x^T [K, tokens] (the quantizers' transposed columns), scales
  // [tokens / 128, N] and [tokens / 128, K]: every element of a k block has its own scale product
  // a_scale[n] * b_scale[k]. The producer copies the tile's BM + BN scales of each k block next to
  // the stage (two bulk copies completing on the stage's barrier; the B copy stops at K), so the
  // consumers read them from shared memory. Experts' token segments start at multiples of 128 (the
  // padded column layout), so token block kb of a tile is global block row_begin / 128 + kb.
  static constexpr uint32_t kScaleStageBytes = kKind == GemmKind::kWgrad ? (kBlockM + kBlockN) * 4 : 0;
  static constexpr uint32_t kScaleRegionBytes = (kStages * kScaleStageBytes + 1023) / 1024 * 1024;
  static constexpr int smem_bytes() { return Base::smem_bytes() + static_cast<int>(kScaleRegionBytes); }
  DMOE_DEVICE static uint32_t smem_scales(uint32_t smem, int stage) {
    return smem + static_cast<uint32_t>(Base::smem_bytes()) + stage * kScaleStageBytes;
  }

#if defined(__CUDACC__)

  // Producer: FPROP loads as the BF16 mainloop; WGRAD also copies each k block's scales.
  DMOE_DEVICE static void load_tile(const MainloopParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                    int32_t num_k_blocks, const Pipeline& pipe, PipelineState<kStages>& st,
                                    uint32_t smem) {
    if constexpr (kKind != GemmKind::kWgrad) {
      Base::load_tile(p, ops, t, num_k_blocks, pipe, st, smem);
    } else {
      const CUtensorMap* map_a = ops.map[kMapA];
      const CUtensorMap* map_b = ops.map[kMapB];
      const int32_t first_block = t.row_begin / kScaleBlock;
      // B scales that exist for this tile's columns (a 128x256 tile can end 128 columns past K; the
      // TMA zero-fills that data, and its columns are never stored).
      const int64_t b_cols = min(static_cast<int64_t>(kBlockN), p.b_scale_ld - static_cast<int64_t>(t.n_block) * kBlockN);
      const uint32_t b_scale_bytes = static_cast<uint32_t>(b_cols) * 4;
      for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
        pipe.producer_acquire(st);
        const uint32_t bar = pipe.producer_expect(st, Base::kStageBytes + kBlockM * 4 + b_scale_bytes);
        const int32_t r0 = t.row_begin + kb * kBlockK;
        ptx::tma_load_2d(Base::smem_a(smem, st.stage), map_a, bar, r0, t.m_block * kBlockM);
        ptx::tma_load_2d(Base::smem_b(smem, st.stage), map_b, bar, r0, t.n_block * kBlockN);
        const int64_t block = first_block + kb;
        const uint32_t scales = smem_scales(smem, st.stage);
        ptx::bulk_load_1d(scales, fp32(p.a_scales) + block * p.a_scale_ld + t.m_block * kBlockM, kBlockM * 4, bar);
        ptx::bulk_load_1d(scales + kBlockM * 4, b_scales(p, ops) + block * p.b_scale_ld + t.n_block * kBlockN,
                          b_scale_bytes, bar);
        st.advance();
      }
    }
  }

  // Contracts one tile for warpgroup `wg` into acc (interface of Sm90Mainloop::mma_tile; the hook
  // runs after each k block is folded in). Blocks past the expert's end issue no wgmma but still
  // wait for and release every stage, so the ring keeps its phase.
  template <class Hook = typename Base::NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& p, const WorkTile& t, int32_t num_k_blocks,
                                   int /*rows_in_last*/, const Pipeline& pipe, PipelineState<kStages>& st,
                                   uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
    Base::zero_acc(acc);
    if (num_k_blocks == 0) return;
    if constexpr (kKind == GemmKind::kWgrad) {
      if constexpr (kWideConsumers) mma_tile_wgrad_wide(num_k_blocks, pipe, st, smem, wg, acc, hook);
      else mma_tile_wgrad(num_k_blocks, pipe, st, smem, wg, acc, hook);
      return;
    }
    // The shared memory base, warpgroup and stage that address the wgmma operands, as values ptxas
    // knows are warp-uniform (ptx::warp_uniform): it then builds the descriptors in uniform registers
    // instead of per lane with an R2UR per word (G119).
    wg = ptx::warp_uniform(wg);
    smem = ptx::warp_uniform(smem);
    if (Base::active_blocks(t, wg) == 0) {
      for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
        pipe.consumer_wait(st);
        pipe.consumer_release(st.stage);
        hook(kb);
        st.advance();
      }
      return;
    }
    // This thread's two fragment rows, as rows of the A buffer (clamped: see the top of the file),
    // and one B scale row per slice (W's [E * N / 128, K / 128] grid). Element offsets
    // in int32 (the host checks both scale grids have fewer than 2^31 elements): registers are
    // scarce next to 128x256's accumulators.
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int32_t row0 = t.row_begin + t.m_block * kBlockM + Base::tile_row(wg, 0) + frag_row;
    const int32_t last_row = p.a_scale_rows - 1;
    ScaleRows rows;
    rows.a_lo = min(row0, last_row);
    rows.a_hi = min(row0 + 8, last_row);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      int32_t w_row;
      if constexpr (kSplit) {
        const int32_t half = g < kGroups / 2 ? 0 : p.split_offset;
        w_row = half + t.n_block * (kBlockN / 2) + kSliceN * (g % (kGroups / 2));
      } else {
        // A last tile past N (N an odd multiple of 128 at BN = 256): its columns are never
        // stored; read the last scale row rather than past the expert (or the array).
        w_row = min(t.n_block * kBlockN + kSliceN * g, p.weight_rows - kSliceN);
      }
      rows.b[g] = (t.expert * p.weight_rows + w_row) / kScaleBlock * num_k_blocks;
    }

    // Scales are loaded ahead of the wgmmas that use them: 128x128 two k blocks ahead (an L2 round
    // trip under full load is longer than one k block of both warpgroups' wgmma), 128x256 one (no
    // registers to spare next to its scratch slice; its k block is twice as long). Indices past the
    // last block load the last block's scales again (no branch in the loop).
    const int32_t last_kb = num_k_blocks - 1;
    Scales cur = load_scales(p, rows, 0);
    if constexpr (kDoubleBuffer) {
      Scales ahead = load_scales(p, rows, min(1, last_kb));
      // Two slices per k block, scratch s0 / s1. In flight at the top of iteration kb: slice 0 and
      // slice 1 of block kb. Slice 0 is folded while slice 1 runs, slice 1 while the next block's
      // slice 0 runs, so this warpgroup always has wgmma queued while it promotes.
      float s0[kSliceAcc], s1[kSliceAcc];
      StageDescs d = stage_descs(smem, st, wg);
      pipe.consumer_wait(st);
      issue_slice(d, 0, s0);
      issue_slice(d, 1, s1);
      // Every block but the last: no branch around a wgmma (a divergent-looking path makes ptxas
      // serialize them, C7518).
      int32_t kb = 0;
      for (; kb < last_kb; ++kb) {
        const int done_stage = st.stage;
        const Scales now = cur;
        cur = ahead;
        ahead = load_scales(p, rows, min(kb + 2, last_kb));
        ptx::wgmma_wait<1>();  // slice 0 of block kb
        ptx::wgmma_fence_operands(s0);
        fold(acc, s0, 0, now);
        st.advance();
        d = stage_descs(smem, st, wg);
        pipe.consumer_wait(st);
        issue_slice(d, 0, s0);
        ptx::wgmma_wait<1>();  // slice 1 of block kb
        ptx::wgmma_fence_operands(s1);
        pipe.consumer_release(done_stage);  // both slices of block kb are done with the stage
        fold(acc, s1, 1, now);
        hook(kb);
        issue_slice(d, 1, s1);
      }
      ptx::wgmma_wait<1>();
      ptx::wgmma_fence_operands(s0);
      fold(acc, s0, 0, cur);
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_operands(s1);
      pipe.consumer_release(st.stage);
      fold(acc, s1, 1, cur);
      hook(kb);
      st.advance();
    } else if constexpr (kQuarters) {
      mma_tile_quarters(p, rows, num_k_blocks, pipe, st, smem, wg, acc, cur, hook);
    } else {
      float scratch[kSliceAcc];
      for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
        const Scales now = cur;
        cur = load_scales(p, rows, min(kb + 1, last_kb));
        const StageDescs d = stage_descs(smem, st, wg);
        pipe.consumer_wait(st);
#pragma unroll
        for (int s = 0; s < kSlices; ++s) {
#pragma unroll
          for (int g = 0; g < kPromoteGroups; ++g) {
            issue_slice(d, s, scratch, g);
            ptx::wgmma_wait<0>();
            ptx::wgmma_fence_operands(scratch);
            // The stage's last reader is done.
            if (s == kSlices - 1 && g == kPromoteGroups - 1) pipe.consumer_release(st.stage);
            fold(acc, scratch, s, now);
          }
        }
        hook(kb);
        st.advance();
      }
    }
    ptx::wgmma_fence_operands(acc[0]);
  }

  // The kQuarters k loop (see its constants). Unit u of a k block: group g = u / 4 (k32 steps 2g, 2g + 1),
  // quarter q = u % 4 (B rows [64 q, 64 q + 64) of the stage; accumulator registers [32 q, 32 q + 32) of
  // the m64n256 fragment; B scale group q / 2); scratch slice u % 2. A comes from registers, loaded once
  // per k block; a block's last unit is waited for with an empty queue (wgmma_wait<0>) before the next
  // block's fragments replace this one's -- one drain per k block, where the serial loop had four.
  // (Rows, Sc: ScaleRows and Scales, declared below this function.)
  template <class Hook, class Rows, class Sc>
  DMOE_DEVICE static void mma_tile_quarters(const MainloopParams& p, const Rows& rows, int32_t num_k_blocks,
                                            const Pipeline& pipe, PipelineState<kStages>& st, uint32_t smem, int wg,
                                            float (&acc)[kMmaPerWg][kAccPerMma], Sc cur, Hook& hook) {
    static_assert(kMmaPerWg == 1 && kUnits == 8 && kGroups == 2, "128x256: four quarters, two groups, two B scales");
    static_assert(kQuarterAcc == ptx::WgmmaE4m3Rs<kQuarterN>::kRegs, "a quarter is one m64n64 fragment");
    float s0[kQuarterAcc], s1[kQuarterAcc];
    uint32_t a_frag[kBlockK / Operands::kK][4];
    AFragOffsets frag_off;
    a_frag_offsets(wg, frag_off);
    const uint64_t desc_b0 = Base::desc_b(smem, 0);
    const int32_t last_kb = num_k_blocks - 1;
    const auto issue = [&](int stage, int u, float (&scratch)[kQuarterAcc]) {
      issue_rs64<kGroupSteps>(a_frag, desc_b0, stage, (u % 4) * kQuarterN, (u / 4) * kGroupSteps, scratch);
    };
    const auto fold_unit = [&](const float (&scratch)[kQuarterAcc], int u, const Sc& sc) {
      fold_columns(acc, scratch, (u % 4) * kQuarterAcc, (u % 4) / 2, sc);
    };
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      const Sc now = cur;
      cur = load_scales(p, rows, min(kb + 1, last_kb));
      const int stage = ptx::warp_uniform(st.stage);
      pipe.consumer_wait(st);
      load_a_fragments(smem, stage, frag_off, a_frag);
      issue(stage, 0, s0);
      issue(stage, 1, s1);
#pragma unroll
      for (int u = 0; u < kUnits - 2; u += 2) {  // units u, u + 1 in flight; fold each, issue its successor two on
        ptx::wgmma_wait<1>();
        ptx::wgmma_fence_operands(s0);
        fold_unit(s0, u, now);
        issue(stage, u + 2, s0);
        ptx::wgmma_wait<1>();
        ptx::wgmma_fence_operands(s1);
        fold_unit(s1, u + 1, now);
        issue(stage, u + 3, s1);
      }
      ptx::wgmma_wait<1>();
      ptx::wgmma_fence_operands(s0);
      fold_unit(s0, kUnits - 2, now);
      ptx::wgmma_wait<0>();  // the block's last unit: the stage and the fragments are free
      ptx::wgmma_fence_operands(s1);
      ptx::wgmma_fence_operands(a_frag);
      pipe.consumer_release(stage);
      fold_unit(s1, kUnits - 1, now);
      hook(kb);
      st.advance();
    }
  }

  // WGRAD k loop. Shared-memory reads, not the tensor pipe, bound it (per k block and CTA, at 128
  // B/clock: 64 KiB of wgmma operands when both slices read A from shared memory, plus ~160 warp
  // loads of scales, about 670 clocks against ~500 of FP8 wgmma), so A is loaded once per k block
  // into registers (ldmatrix) and both 64-column slices run register-sourced (RS): 16 KiB less per
  // k block (perf_history G51). Slice 0 of a block is folded while slice 1 runs, slice 1 while the
  // next block's slice 0 runs; the next block's fragments replace this block's only after slice 1
  // retired. The scales are per element (this thread's two A rows x its B columns) and live in the
  // stage's scale copy, so a stage is released only after its second fold has read them.
  template <class Hook>
  DMOE_DEVICE static void mma_tile_wgrad(int32_t num_k_blocks, const Pipeline& pipe, PipelineState<kStages>& st,
                                         uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook& hook) {
    static_assert(kSlices == 2, "two 64-column slices per 128x128 tile");
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t a_row = static_cast<uint32_t>(Base::tile_row(wg, 0)) + ((threadIdx.x / 32) % 4) * 16 + lane / 4;
    float s0[kSliceAcc], s1[kSliceAcc];
    uint32_t a_frag[kBlockK / Operands::kK][4];
    AFragOffsets frag_off;
    a_frag_offsets(wg, frag_off);
    const uint32_t scale_off = (kBlockM + 2 * (lane % 4)) * 4;  // this thread's first B scale in a stage's copy
    smem = ptx::warp_uniform(smem);
    const uint64_t desc_b0 = Base::desc_b(smem, 0);
    int stage = ptx::warp_uniform(st.stage);
    pipe.consumer_wait(st);
    load_a_fragments(smem, st.stage, frag_off, a_frag);
    issue_rs64(a_frag, desc_b0, stage, 0, 0, s0);
    issue_rs64(a_frag, desc_b0, stage, kSliceN, 0, s1);
    int32_t kb = 0;
    for (; kb < num_k_blocks - 1; ++kb) {  // no branch around a wgmma (C7518)
      const int done_stage = st.stage;
      ptx::wgmma_wait<1>();  // slice 0 of block kb
      ptx::wgmma_fence_operands(s0);
      fold_wgrad(acc, s0, 0, smem_scales(smem, done_stage), a_row, scale_off);
      ptx::wgmma_wait<0>();  // slice 1 of block kb: the fragments are free
      ptx::wgmma_fence_operands(s1);
      ptx::wgmma_fence_operands(a_frag);
      st.advance();
      stage = ptx::warp_uniform(st.stage);
      pipe.consumer_wait(st);
      load_a_fragments(smem, st.stage, frag_off, a_frag);
      issue_rs64(a_frag, desc_b0, stage, 0, 0, s0);
      fold_wgrad(acc, s1, 1, smem_scales(smem, done_stage), a_row, scale_off);
      pipe.consumer_release(done_stage);  // data and scales of block kb all read
      hook(kb);
      issue_rs64(a_frag, desc_b0, stage, kSliceN, 0, s1);
    }
    ptx::wgmma_wait<1>();
    ptx::wgmma_fence_operands(s0);
    fold_wgrad(acc, s0, 0, smem_scales(smem, st.stage), a_row, scale_off);
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operands(s1);
    ptx::wgmma_fence_operands(a_frag);
    fold_wgrad(acc, s1, 1, smem_scales(smem, st.stage), a_row, scale_off);
    pipe.consumer_release(st.stage);
    hook(kb);
    st.advance();
    ptx::wgmma_fence_operands(acc[0]);
  }

  // WGRAD k loop of the 128x256 tile (G69): two 128-column slices from shared memory (SS), each
  // waited for and folded before the next is issued, as the 128x256 FPROP loop (the other warpgroup's
  // wgmmas fill the tensor pipe meanwhile). Against 128x128: half the wgmma instructions, descriptor
  // chains and A scale loads per FLOP, and 25% fewer operand bytes from L2 per FLOP. The stage is
  // released after the second fold, which reads its scale copy.
  template <class Hook>
  DMOE_DEVICE static void mma_tile_wgrad_wide(int32_t num_k_blocks, const Pipeline& pipe, PipelineState<kStages>& st,
                                              uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook& hook) {
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t a_row = static_cast<uint32_t>(Base::tile_row(wg, 0)) + ((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const uint32_t scale_off = (kBlockM + 2 * (lane % 4)) * 4;  // this thread's first B scale in a stage's copy
    float scratch[kSliceAcc];
    smem = ptx::warp_uniform(smem);
    wg = ptx::warp_uniform(wg);
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      const StageDescs d = stage_descs(smem, st, wg);
      pipe.consumer_wait(st);
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        issue_slice(d, s, scratch);
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_operands(scratch);
        fold_wgrad(acc, scratch, s, smem_scales(smem, st.stage), a_row, scale_off);
      }
      pipe.consumer_release(st.stage);  // data and scales of block kb all read
      hook(kb);
      st.advance();
    }
    ptx::wgmma_fence_operands(acc[0]);
  }

  // acc[slice s] += scratch * a_scale[row] * b_scale[column], from the stage's scale copy: A's at
  // this thread's rows a_row and a_row + 8, B's at its columns 8 c + 2 (lane % 4) + {0, 1}, from
  // byte b_off (c = 0 of slice 0, computed once per tile: the loads take immediate offsets).
  DMOE_DEVICE static void fold_wgrad(float (&acc)[kMmaPerWg][kAccPerMma], const float (&scratch)[kSliceAcc], int s,
                                     uint32_t scales, uint32_t a_row, uint32_t b_off) {
    const float sa_lo = ptx::ld_shared_f32(scales + a_row * 4);
    const float sa_hi = ptx::ld_shared_f32(scales + (a_row + 8) * 4);
    const uint32_t b = scales + b_off;
#pragma unroll
    for (int c = 0; c < kSliceN / 8; ++c) {
      const float2 sb = ptx::ld_shared_f32x2(b + (s * kSliceN + 8 * c) * 4);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int i = 4 * c + j;
        const float scale = (j / 2 == 0 ? sa_lo : sa_hi) * (j % 2 == 0 ? sb.x : sb.y);
        acc[0][s * kSliceAcc + i] = fmaf(scratch[i], scale, acc[0][s * kSliceAcc + i]);
      }
    }
  }

 protected:
  // The FP32 scale grids (MainloopParams holds the format's scale pointers untyped).
  DMOE_DEVICE static const float* fp32(const void* scales) { return static_cast<const float*>(scales); }
  // WGRAD's B scales: b_scales, or after a compact B bundle's data ([K, R] then [R / 128, K] at
  // align128(K * R)). Evaluated at each use: a pointer held across the producer's loop cost the
  // 128x256 kernel 24 bytes of spills.
  DMOE_DEVICE static const float* b_scales(const MainloopParams& p, const ResolvedOperands& ops) {
    if (p.b_compact_rows == nullptr) return fp32(p.b_scales);
    return reinterpret_cast<const float*>(
        ops.base[kMapB] + numeric::fp8_blockwise_compact_columns_scales_offset(p.b_scale_ld, *p.b_compact_rows));
  }

  // Where this thread's scales are: element offsets of its two A rows (k block 0) and of its
  // B scale row per scale group (k block 0).
  struct ScaleRows {
    int32_t a_lo, a_hi, b[kGroups];
  };
  // The scales of one k block for this thread: its two A rows and one B scale per scale group.
  struct Scales {
    float lo, hi, b[kGroups];
  };
  DMOE_DEVICE static Scales load_scales(const MainloopParams& p, const ScaleRows& rows, int32_t kb) {
    Scales sc;
    const int32_t a_off = kb * static_cast<int32_t>(p.a_scale_ld);
    sc.lo = __ldg(fp32(p.a_scales) + (a_off + rows.a_lo));
    sc.hi = __ldg(fp32(p.a_scales) + (a_off + rows.a_hi));
#pragma unroll
    for (int g = 0; g < kGroups; ++g) sc.b[g] = __ldg(fp32(p.b_scales) + (rows.b[g] + kb));
    return sc;
  }

  // The wgmma descriptors of a stage: this warpgroup's A rows and the B block. The loops build
  // them before waiting for the stage, from warp-uniform inputs, so ptxas computes them in uniform
  // registers (G119: the 128x256 FPROP loop ran 294 instructions per k block, 32 of them R2UR).
  struct StageDescs {
    uint64_t a, b;
  };
  DMOE_DEVICE static StageDescs stage_descs(uint32_t smem, int stage, int wg) {
    return {Base::desc_a(smem, stage, wg, 0), Base::desc_b(smem, stage)};
  }
  // Those of the pipeline's current stage, its index made warp-uniform first (what the loops pass).
  DMOE_DEVICE static StageDescs stage_descs(uint32_t smem, const PipelineState<kStages>& st, int wg) {
    return stage_descs(smem, ptx::warp_uniform(st.stage), wg);
  }

  // Issues promotion group g of slice s of the stage whose descriptors are `d` (B rows [s * kSliceN,
  // (s + 1) * kSliceN): K-major rows 128 bytes apart) into `scratch` as one wgmma group: its
  // kGroupSteps k32 steps (all four of the k block at kPromoteK = 128), the first overwriting.
  DMOE_DEVICE static void issue_slice(const StageDescs& d, int s, float (&scratch)[kSliceAcc], int g = 0) {
    const uint64_t da = d.a;
    const uint64_t db = ptx::desc_advance32(d.b, static_cast<uint32_t>(s * kSliceN * 128));
    ptx::wgmma_fence();  // the scratch registers were read by the last fold
#pragma unroll
    for (int j = 0; j < kGroupSteps; ++j) {
      const int kk = g * kGroupSteps + j;
      SliceMma::mma(scratch, ptx::desc_advance32(da, kk * Base::kStepA), ptx::desc_advance32(db, kk * Base::kStepB),
                    j > 0 ? 1u : 0u);
    }
    ptx::wgmma_commit();
  }

  // The warpgroup's A block of the stage into registers, as four k32 wgmma fragments: the warp's
  // 16 rows, row r at byte 128 r with 16-byte chunk c stored at chunk c ^ (r % 8) (128B swizzle;
  // the block starts at a multiple of 64 rows of a 1024-aligned stage). Lanes 8j .. 8j + 7 address
  // rows (j % 2) * 8 + [0, 8) at chunk 2 kk + j / 2: matrices a0..a3 of the fragment. The byte
  // offsets inside the A block depend only on the lane: a_frag_offsets computes them once per tile
  // (recomputed per k block, from threadIdx, they were ~20 integer instructions per block).
  using AFragOffsets = uint32_t[kBlockK / 32];
  DMOE_DEVICE static void a_frag_offsets(int wg, AFragOffsets& off) {
    const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    const uint32_t j = lane / 8, i = lane % 8;
    const uint32_t row = static_cast<uint32_t>(Base::tile_row(wg, 0)) + 16 * warp + i + 8 * (j % 2);
#pragma unroll
    for (uint32_t kk = 0; kk < kBlockK / 32; ++kk) off[kk] = row * 128 + (((2 * kk + j / 2) ^ i) << 4);
  }
  DMOE_DEVICE static void load_a_fragments(uint32_t smem, int stage, const AFragOffsets& off,
                                           uint32_t (&frag)[kBlockK / Operands::kK][4]) {
    const uint32_t base = Base::smem_a(smem, stage);
#pragma unroll
    for (int kk = 0; kk < kBlockK / Operands::kK; ++kk) ptx::ldmatrix_x4(base + off[kk], frag[kk]);
  }

  // issue_slice with A from registers (RS wgmma; only B is read from shared memory): the 64 B rows
  // from b_row0 of the stage, k32 steps [k0, k0 + kSteps) of the k block (the WGRAD slices: all four;
  // the kQuarters units: one promotion group), into `scratch` as one wgmma group, the first step
  // overwriting. desc_b0 is stage 0's B descriptor (built once per tile); the stage and row offsets
  // advance its 14-bit address field, which cannot carry below 256 KiB of shared memory.
  template <int kSteps = kBlockK / Operands::kK>
  DMOE_DEVICE static void issue_rs64(const uint32_t (&a_frag)[kBlockK / Operands::kK][4], uint64_t desc_b0, int stage,
                                     int b_row0, int k0, float (&scratch)[ptx::WgmmaE4m3Rs<64>::kRegs]) {
    const uint64_t db = ptx::desc_advance32(desc_b0, static_cast<uint32_t>(stage) * Base::kBBytes +
                                                         static_cast<uint32_t>(b_row0 * 128));
    ptx::wgmma_fence();  // the fragments were just loaded, the scratch read by the last fold
#pragma unroll
    for (int j = 0; j < kSteps; ++j)
      ptx::WgmmaE4m3Rs<64>::mma(scratch, a_frag[k0 + j], ptx::desc_advance32(db, (k0 + j) * Base::kStepB),
                                j > 0 ? 1u : 0u);
    ptx::wgmma_commit();
  }

  // The accumulator registers [first, first + kN) += scratch * (A row scale x B scale of group g): a
  // slice (or kQuarters' quarter) lies in one B scale group, so two scale products (rows lo and hi).
  // Register i of an m64 fragment is row lo / hi by bit 1 and column 8 (i / 4) + (lane % 4) * 2 + i % 2.
  template <int kN>
  DMOE_DEVICE static void fold_columns(float (&acc)[kMmaPerWg][kAccPerMma], const float (&scratch)[kN], int first,
                                       int g, const Scales& sc) {
    const float scale_lo = sc.lo * sc.b[g];
    const float scale_hi = sc.hi * sc.b[g];
#pragma unroll
    for (int i = 0; i < kN; ++i)
      acc[0][first + i] = fmaf(scratch[i], (i / 2) % 2 == 0 ? scale_lo : scale_hi, acc[0][first + i]);
  }
  // acc[slice s] += scratch * (its scale products).
  DMOE_DEVICE static void fold(float (&acc)[kMmaPerWg][kAccPerMma], const float (&scratch)[kSliceAcc], int s,
                               const Scales& sc) {
    fold_columns(acc, scratch, s * kSliceAcc, s, sc);
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
