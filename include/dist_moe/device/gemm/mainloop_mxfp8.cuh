// SM90 mainloop for MXFP8 operands (docs/formats.md "GPU layouts"): A = E4M3 rows with one E8M0
// scale per 1 x 32 ([a_scale_rows, K/32] row-major, or k-block-major words of four codes
// [K/128, a_scale_ld]: MainloopParams::a_scale_kblock_words), B = E4M3 weights [E, N, K] with one E8M0
// scale per 32 x 32 tile, read through the FPROP view [E * N, K/32] (each tile's scale on each of
// its 32 rows) -- so 1 x 32 inference weights, whose rows each have their own scales, are not
// this kernel's operand. DGRAD runs it on the weight's transposed copy (grouped_gemm.cu).
//
// The scales change every 32 of K, so each k32 wgmma gets its own scratch accumulator and is
// folded in by itself (per-32 promotion; upstream_kernels_and_formats.md §7.3 sizes it):
//   acc += scratch * (a_scale[row, k32] * b_scale[column's 32-row group of W, k32])
// A unit of work is one (k32 step, 64-column slice): one m64n64k32 wgmma and 32 FFMAs per thread
// against four scale products (rows lo / hi x the slice's two 32-column groups). Units run through
// two scratch buffers, one folded while the other's wgmma runs, as the FP8-blockwise 128x128 loop
// does with whole k blocks. The stages, the TMA producer and the slice descriptors are that
// mainloop's (a stage holds one 128-deep E4M3 k block: four k32 steps); 128x128 tiles only (the
// 128x256 accumulators leave no room for two scratch buffers).
//
// The E8M0 codes become FP32 scales in the producer warpgroup, whose warps 1-3 are otherwise idle
// (ScaleProducer): warp s % 3 takes stage s, loads the tile's 128 row words and 4 column-group
// words (four codes each: the stage's k32 steps), writes FP32 scales [128 rows][4 steps] +
// [4 groups][4 steps] (2112 bytes) next to the stage and arrives on the stage's full barrier (two
// arrivals per slot: the TMA thread's and its own). Consumers read 6 vectors per k block; doing
// the conversion there instead cost ~90 issue slots per k block next to the 256 promotion FFMAs
// and ran 5-10% slower (docs/perf_history.md G43).
//
// E8M0 to FP32 (numeric::e8m0_to_float, the oracle's): code e is 2^(e - 127); e = 0 is the FP32
// subnormal 2^-127 and e = 255 is NaN (a NaN block). Scale products are FP32 products, exact unless they fall below 2^-149 (two codes
// summing below 105), where they flush to zero (docs/grouped_gemm.md).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop_fp8_blockwise.cuh"
#include "dist_moe/device/numeric/e8m0.cuh"

namespace dist_moe::gemm {

template <class Config>
struct Sm90Mxfp8Mainloop : Sm90Fp8BlockwiseMainloop<Config> {
  using Fp8 = Sm90Fp8BlockwiseMainloop<Config>;
  using Base = typename Fp8::Base;
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
  using Fp8::kSliceN;
  using Fp8::kSliceAcc;

  static constexpr int kSteps = kBlockK / Operands::kK;  // k32 steps per stage: 4
  static constexpr int kGroups = kBlockN / 32;           // 32-column groups of the tile: one B scale each
  static_assert(kKind == GemmKind::kFprop && kBlockN == 128 && Fp8::kSlices == 2,
                "MXFP8: FPROP kinds on 128x128 tiles (two 64-column slices)");
  static_assert(kSteps == 4, "a stage's four E8M0 codes per row are one 32-bit word");

  static constexpr int kScaleWarps = 3;  // producer warps 1-3 (kernel.cuh)
  static constexpr int kFillArrivals = 1;  // they take the stages in turn
  // Per stage: FP32 A scales [BM rows][kSteps], then B [kGroups][kSteps].
  static constexpr uint32_t kScaleStageBytes = (kBlockM + kGroups) * kSteps * 4;
  static_assert(kScaleStageBytes % 16 == 0, "16-byte vectors");
  // Rounded to 1 KiB: the epilogue's swizzled staging buffers follow.
  static constexpr int smem_bytes() {
    return Fp8::smem_bytes() + (kStages * static_cast<int>(kScaleStageBytes) + 1023) / 1024 * 1024;
  }
  DMOE_DEVICE static uint32_t smem_scales(uint32_t smem, int stage) {
    return smem + static_cast<uint32_t>(Fp8::smem_bytes()) + stage * kScaleStageBytes;
  }

#if defined(__CUDACC__)

  // The interface of Sm90Mainloop::mma_tile (the hook runs after each k block is folded in).
  template <class Hook = typename Base::NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& p, const WorkTile& t, int32_t num_k_blocks,
                                   int /*rows_in_last*/, const Pipeline& pipe, PipelineState<kStages>& st,
                                   uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
    Base::zero_acc(acc);
    if (num_k_blocks == 0) return;
    if (narrow(p, t)) {
      mma_tile_narrow(num_k_blocks, pipe, st, smem, wg, acc, hook);
      return;
    }
    if (Base::active_blocks(t, wg) == 0) {
      for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
        pipe.consumer_wait(st);
        pipe.consumer_release(st.stage);
        hook(kb);
        st.advance();
      }
      return;
    }
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t a_row = static_cast<uint32_t>(Base::tile_row(wg, 0)) + ((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int32_t last_kb = num_k_blocks - 1;
    float s0[kSliceAcc], s1[kSliceAcc];
    pipe.consumer_wait(st);
    issue_unit(smem, st.stage, wg, 0, 0, s0);
    issue_unit(smem, st.stage, wg, 1, 0, s1);
    int32_t kb = 0;
    // Every block but the last: its last step issues the next block's first units. No branch
    // around a wgmma (a divergent-looking path makes ptxas serialize them, C7518).
    for (; kb < last_kb; ++kb) {
      const int stage = st.stage;
      const Scales now = read_scales(smem, stage, a_row);
#pragma unroll
      for (int j = 0; j < kSteps - 1; ++j) {
        fold_unit(acc, s0, 0, j, now, /*pending=*/1);
        issue_unit(smem, stage, wg, 0, j + 1, s0);
        fold_unit(acc, s1, 1, j, now, 1);
        issue_unit(smem, stage, wg, 1, j + 1, s1);
      }
      fold_unit(acc, s0, 0, kSteps - 1, now, 1);
      st.advance();
      pipe.consumer_wait(st);
      issue_unit(smem, st.stage, wg, 0, 0, s0);
      fold_unit(acc, s1, 1, kSteps - 1, now, 1);
      pipe.consumer_release(stage);  // both slices of every step of block kb are done with the stage
      hook(kb);
      issue_unit(smem, st.stage, wg, 1, 0, s1);
    }
    const Scales last = read_scales(smem, st.stage, a_row);
#pragma unroll
    for (int j = 0; j < kSteps - 1; ++j) {
      fold_unit(acc, s0, 0, j, last, 1);
      issue_unit(smem, st.stage, wg, 0, j + 1, s0);
      fold_unit(acc, s1, 1, j, last, 1);
      issue_unit(smem, st.stage, wg, 1, j + 1, s1);
    }
    fold_unit(acc, s0, 0, kSteps - 1, last, 1);
    fold_unit(acc, s1, 1, kSteps - 1, last, 0);
    pipe.consumer_release(st.stage);
    hook(kb);
    st.advance();
    ptx::wgmma_fence_operands(acc[0]);
  }

  // A narrow tile: at most 64 rows of its expert, all in warpgroup 0's m64 block; split by slice
  // unless the launch says not to (MainloopParams::narrow_split: A/B runs).
  DMOE_DEVICE static bool narrow(const MainloopParams& p, const WorkTile& t) {
    const int32_t rows_left = t.num_rows - t.m_block * kBlockM;
    return p.narrow_split && rows_left > 0 && rows_left <= 64;
  }

  // After mma_tile and before the epilogue, every thread of both warpgroups: a narrow tile's slice 1
  // (warpgroup 1's acc[0][0, kSliceAcc), mma_tile_narrow) moves to warpgroup 0's acc[0][kSliceAcc,
  // 2 kSliceAcc) through warpgroup 1's staging buffer (`staging1`, taken from its writer), and
  // warpgroup 1's accumulators become zeros, as for any m64 block past the expert's end: the
  // epilogue sees what the full loop leaves. Thread i of one warpgroup holds the fragment positions
  // thread i of the other would, so the move is positional: 16-byte vectors, [vector][thread], so a
  // warp's stores and loads are 512 contiguous bytes.
  template <class Writer>
  DMOE_DEVICE static void join_tile(const MainloopParams& p, const WorkTile& t, int wg,
                                    float (&acc)[kMmaPerWg][kAccPerMma], const Writer& writer, uint32_t staging1) {
    if (!narrow(p, t)) return;
    // Registers per round: the slice at once where the buffer holds it, else halves.
    constexpr int kRound = Writer::kBytesPerWg >= 128 * kSliceAcc * 4 ? kSliceAcc : kSliceAcc / 2;
    static_assert(Writer::kBytesPerWg >= 128 * kRound * 4 && kRound % 4 == 0, "a round fits the staging buffer");
    const uint32_t tid = threadIdx.x % 128;
    // No TMA store reads the buffer any more; warpgroup 1 meets. `staging1` must be the buffer warpgroup
    // 1's writer owns (the kernels pass their staging_offset(1); warpgroup 0 has no handle
    // on it). Not checked here: a compare and trap made ptxas spill 322 bytes in the FPROP kernel.
    if (wg == 1) writer.borrow();
    // Both warpgroups load and select rather than branch around the loads: one select per register
    // (a branch kept two versions of the accumulators live and spilled in the Mega kernel).
    const bool keep = wg == 0;
#pragma unroll
    for (int r = 0; r < kSliceAcc; r += kRound) {
      if (wg == 1) {
#pragma unroll
        for (int v = 0; v < kRound / 4; ++v) {
          const float* f = &acc[0][r + 4 * v];
          ptx::st_shared_v4(staging1 + (v * 128 + tid) * 16,
                            make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]),
                                       __float_as_uint(f[3])));
        }
      }
      ptx::named_barrier_sync(kBarrierConsumers, 256);
#pragma unroll
      for (int v = 0; v < kRound / 4; ++v) {
        const uint4 q = ptx::ld_shared_v4(staging1 + (v * 128 + tid) * 16);
        float* f = &acc[0][kSliceAcc + r + 4 * v];
        f[0] = keep ? __uint_as_float(q.x) : 0.0f;
        f[1] = keep ? __uint_as_float(q.y) : 0.0f;
        f[2] = keep ? __uint_as_float(q.z) : 0.0f;
        f[3] = keep ? __uint_as_float(q.w) : 0.0f;
      }
      ptx::named_barrier_sync(kBarrierConsumers, 256);  // read before warpgroup 1 writes again
    }
#pragma unroll
    for (int i = 0; i < kSliceAcc; ++i) acc[0][i] = keep ? acc[0][i] : 0.0f;
  }

  // ---- the scale warps ------------------------------------------------------------------------
  // Warp `which` (0 .. 2) of the producer warpgroup's warps 1-3 fills the scale region of every
  // third stage: lane l converts the codes of rows l, l + 32, l + 64, l + 96 and lanes 0-3 those
  // of the tile's four column groups. Codes are loaded before the slot is acquired, so the global
  // latency overlaps the wait. The token rows' codes go through L2 (ld.global.cg): the Mega kernel
  // writes them in the same launch (device/gemm/mega.cuh), which the non-coherent path forbids.
  struct ScaleProducer {
    const MainloopParams& p;
    uint32_t smem;
    int which;
    PipelineState<kStages> st;
    int32_t seq = 0;  // stages walked so far (every scale warp walks all of them)

    DMOE_DEVICE ScaleProducer(const MainloopParams& params, uint32_t smem_base, int warp_index)
        : p(params), smem(smem_base), which(warp_index) {}

    DMOE_DEVICE void tile(const WorkTile& t, int32_t num_k_blocks, const Pipeline& pipe) {
      const uint32_t lane = threadIdx.x % 32;
      const auto* a = static_cast<const uint8_t*>(p.a_scales);
      const auto* b = static_cast<const uint8_t*>(p.b_scales);
      const int32_t ld_b = num_k_blocks * kSteps;  // K / 32
      // (k-block-major words: the warp's lanes read consecutive rows as consecutive words.)
      const Mxfp8AScaleStrides a_stride = mxfp8_a_scale_strides(p);
      // Rows past the buffer (a tile's tail) read the last row's codes; their results are not stored.
      const int32_t last_row = p.a_scale_rows - 1;
      int32_t row_off[4];
#pragma unroll
      for (int i = 0; i < 4; ++i)
        row_off[i] =
            min(t.row_begin + t.m_block * kBlockM + static_cast<int32_t>(lane) + 32 * i, last_row) * a_stride.row;
      int32_t group_off = 0;
      if (lane < kGroups) {
        int32_t w_row;
        if constexpr (kSplit) {  // gate columns from rows [0, F), up columns from [F, 2F)
          const int32_t half = lane < kGroups / 2 ? 0 : p.split_offset;
          w_row = half + t.n_block * (kBlockN / 2) + 32 * (static_cast<int32_t>(lane) % (kGroups / 2));
        } else {
          w_row = min(t.n_block * kBlockN + 32 * static_cast<int32_t>(lane), p.weight_rows - 32);
        }
        group_off = (t.expert * p.weight_rows + w_row) * ld_b;
      }
      for (int32_t kb = 0; kb < num_k_blocks; ++kb, ++seq, st.advance()) {
        if (seq % kScaleWarps != which) continue;
        uint32_t words[4], gword = 0;
#pragma unroll
        for (int i = 0; i < 4; ++i)
          words[i] = __ldcg(reinterpret_cast<const uint32_t*>(a + row_off[i] + a_stride.kblock * kb));
        if (lane < kGroups) gword = __ldg(reinterpret_cast<const uint32_t*>(b + group_off + 4 * kb));
        pipe.producer_acquire(st);
        const uint32_t region = smem_scales(smem, st.stage);
#pragma unroll
        for (int i = 0; i < 4; ++i) ptx::st_shared_v4(region + (lane + 32 * i) * kSteps * 4, e8m0x4(words[i]));
        if (lane < kGroups) ptx::st_shared_v4(region + (kBlockM + lane) * kSteps * 4, e8m0x4(gword));
        __syncwarp();  // the warp's stores before lane 0's arrival (release) publishes them
        if (lane == 0) pipe.producer_arrive(st);
      }
    }
  };

 private:
  // The k loop of a narrow tile: both warpgroups contract warpgroup 0's rows, warpgroup w only
  // slice w (into acc[0][0, kSliceAcc)), its k32 steps alternating between the two scratch buffers.
  // The loop is bound by each warpgroup's serial chain -- wait for the oldest unit, fold it, issue
  // the next (docs/perf_history.md G89) -- so with one warpgroup running both slices of the 64 rows
  // (the full loop with warpgroup 1 idle) a tile took ~0.75 of a full one; split by slice, each
  // chain is half as long (G99). Every accumulator gets the same wgmmas, products and FFMAs in the
  // same order as in the full loop: the results are bitwise the same.
  template <class Hook>
  DMOE_DEVICE static void mma_tile_narrow(int32_t num_k_blocks, const Pipeline& pipe, PipelineState<kStages>& st,
                                          uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook& hook) {
    const uint32_t lane = threadIdx.x % 32;
    const uint32_t a_row = static_cast<uint32_t>(Base::tile_row(0, 0)) + ((threadIdx.x / 32) % 4) * 16 + lane / 4;
    const int32_t last_kb = num_k_blocks - 1;
    float s0[kSliceAcc], s1[kSliceAcc];
    pipe.consumer_wait(st);
    issue_unit(smem, st.stage, 0, wg, 0, s0);
    issue_unit(smem, st.stage, 0, wg, 1, s1);
    int32_t kb = 0;
    for (; kb < last_kb; ++kb) {
      const int stage = st.stage;
      const Scales now = read_scales<2>(smem, stage, a_row, 2 * wg);
      fold_narrow(acc, s0, 0, now, 1);
      issue_unit(smem, stage, 0, wg, 2, s0);
      fold_narrow(acc, s1, 1, now, 1);
      issue_unit(smem, stage, 0, wg, 3, s1);
      fold_narrow(acc, s0, 2, now, 1);
      st.advance();
      pipe.consumer_wait(st);
      issue_unit(smem, st.stage, 0, wg, 0, s0);
      fold_narrow(acc, s1, 3, now, 1);
      pipe.consumer_release(stage);  // every step of block kb is done with the stage
      hook(kb);
      issue_unit(smem, st.stage, 0, wg, 1, s1);
    }
    const Scales last = read_scales<2>(smem, st.stage, a_row, 2 * wg);
    fold_narrow(acc, s0, 0, last, 1);
    issue_unit(smem, st.stage, 0, wg, 2, s0);
    fold_narrow(acc, s1, 1, last, 1);
    issue_unit(smem, st.stage, 0, wg, 3, s1);
    fold_narrow(acc, s0, 2, last, 1);
    fold_narrow(acc, s1, 3, last, 0);
    pipe.consumer_release(st.stage);
    hook(kb);
    st.advance();
    ptx::wgmma_fence_operands(acc[0]);
  }

  // One stage's scales for a consumer thread, [k32 step]: its rows a_row and a_row + 8, and the
  // tile's four column groups -- or, for a narrow tile's slice (kReadGroups = 2, group0 = 2 slice),
  // that slice's two groups as groups 0 and 1 (fold_unit of slice 0 reads only those).
  struct Scales {
    float lo[kSteps], hi[kSteps], b[kGroups][kSteps];
  };

  template <int kReadGroups = kGroups>
  DMOE_DEVICE static Scales read_scales(uint32_t smem, int stage, uint32_t a_row, int group0 = 0) {
    const uint32_t region = smem_scales(smem, stage);
    Scales s;
    unpack(ptx::ld_shared_v4(region + a_row * kSteps * 4), s.lo);
    unpack(ptx::ld_shared_v4(region + (a_row + 8) * kSteps * 4), s.hi);
#pragma unroll
    for (int g = 0; g < kGroups; ++g)
      unpack(g < kReadGroups ? ptx::ld_shared_v4(region + (kBlockM + group0 + g) * kSteps * 4) : make_uint4(0, 0, 0, 0),
             s.b[g]);
    return s;
  }

  DMOE_DEVICE static void unpack(uint4 v, float (&f)[kSteps]) {
    f[0] = __uint_as_float(v.x), f[1] = __uint_as_float(v.y), f[2] = __uint_as_float(v.z), f[3] = __uint_as_float(v.w);
  }

  // The four FP32 scales of an E8M0 word (k32 steps 0..3, low byte first), as one 16-byte vector.
  DMOE_DEVICE static uint4 e8m0x4(uint32_t word) {
    const auto scale = [word](int j) {
      return __float_as_uint(numeric::e8m0_to_float(static_cast<uint8_t>(word >> (8 * j))));
    };
    return make_uint4(scale(0), scale(1), scale(2), scale(3));
  }

  // Slice s of k32 step j of the stage into `scratch`: one m64n64k32 wgmma (scale-d = 0).
  DMOE_DEVICE static void issue_unit(uint32_t smem, int stage, int wg, int s, int j, float (&scratch)[kSliceAcc]) {
    const uint64_t da = ptx::desc_advance(Base::desc_a(smem, stage, wg, 0), static_cast<uint32_t>(j * Base::kStepA));
    const uint64_t db = ptx::desc_advance(Base::desc_b(smem, stage),
                                          static_cast<uint32_t>(s * kSliceN * 128 + j * Base::kStepB));
    ptx::wgmma_fence();  // the scratch registers were read by the last fold
    Fp8::SliceMma::mma(scratch, da, db, 0u);
    ptx::wgmma_commit();
  }

  // Waits until at most `pending` wgmma groups are in flight (this unit's is then done) and folds
  // it: acc[slice s] += scratch * (A row scale x B group scale) of step j. Register i of an m64
  // fragment is row lo / hi by bit 1 and column 8 (i / 4) + 2 (lane % 4) + i % 2 of the slice, so
  // registers 0-15 lie in the slice's first 32-column group and 16-31 in its second.
  DMOE_DEVICE static void fold_unit(float (&acc)[kMmaPerWg][kAccPerMma], float (&scratch)[kSliceAcc], int s, int j,
                                    const Scales& sc, int pending) {
    const float b0 = sc.b[2 * s][j], b1 = sc.b[2 * s + 1][j];
    const float lo0 = sc.lo[j] * b0, hi0 = sc.hi[j] * b0, lo1 = sc.lo[j] * b1, hi1 = sc.hi[j] * b1;
    if (pending) ptx::wgmma_wait<1>();
    else ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operands(scratch);
#pragma unroll
    for (int i = 0; i < kSliceAcc; ++i) {
      const float scale = i < 16 ? ((i / 2) % 2 == 0 ? lo0 : hi0) : ((i / 2) % 2 == 0 ? lo1 : hi1);
      acc[0][s * kSliceAcc + i] = fmaf(scratch[i], scale, acc[0][s * kSliceAcc + i]);
    }
  }

  // fold_unit of a narrow tile's step j, its FFMAs pinned ahead of the next wgmma issue: the folds
  // of a narrow tile add into the same accumulators one after another, and without the pin the
  // compiler sinks one past the next issue of its scratch buffer (a copy of registers a wgmma is
  // writing, which serializes the wgmmas: ptxas C7514 / C7517).
  DMOE_DEVICE static void fold_narrow(float (&acc)[kMmaPerWg][kAccPerMma], float (&scratch)[kSliceAcc], int j,
                                      const Scales& sc, int pending) {
    fold_unit(acc, scratch, 0, j, sc, pending);
    ptx::wgmma_fence_operands(acc[0]);
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
