// The Mega pipeline on Hopper (issue #28): W13 FPROP + SwiGLU, the h2 hand-off and W2 FPROP in one
// persistent launch, one tile stream, per-chunk done counters -- the reduced FC13 -> FC2 chunk
// pipeline of upstream_kernels_and_formats.md §7.2 (a producer warpgroup and two consumer
// warpgroups; no room for upstream's separate gather and quant warpgroups).
//
// Two tile forms, each the staged kernels' tiles of its size, with the same mainloops:
//   decode  (kN grouping)  the swap-AB decode tile: weights on the wgmma M side, 16 tokens on N
//                          (NVFP4 on expanded rows, MXFP8); a chunk is an expert's 16-token tile
//   rows    (kM grouping)  the MXFP8 128x128 tile (tokens on M, per-32 promotion, the producer
//                          warpgroup's scale warps); a chunk is an expert's 128-row M tile
// Both GEMMs of a form share one stage ring (same stage size and count). The linear tile space is one
// x task per chunk when the launch gathers x (MegaParams::x_rows), then every W13 tile (expert-major,
// scheduler.cuh), then every W2 tile; the producer draws tiles from one global counter (the dynamic
// schedule), so every x task is drawn before any W13 tile and every W13 tile before any W2 tile, and
// each kind starts while the one before still runs.
//
// Chunks: chunk c is numbered the same in both GEMMs (the token tiles of the experts before, plus the
// tile's own). Its W13 tiles (tiles_per_chunk: F / 128 decode, F / 64 rows) each end with both
// consumer warpgroups' epilogues, and each warpgroup counts itself in chunk_done[c] (release). Then:
//   finisher hand-offs (Handoff::kFinisher, the decode form): the warpgroup completing the count
//     (acquire) turns the chunk's BF16 h2 rows into W2's operand rows, fences them for the async
//     proxy and publishes chunk_ready[c] = 1; W2 waits for that;
//   epilogue hand-off (the rows form): the W13 epilogue already wrote W2's operand (h2 as MXFP8
//     rows, epilogue_swiglu_mxfp8.cuh; every thread fences its stores for the async proxy before
//     the count), and W2 waits for chunk_done[c] = 2 tiles_per_chunk.
// The TMA thread waits for the chunk of a W2 tile (acquire, then the proxy fence) before loading it;
// scale warps (rows form) wait the same way before reading the tile's A scales.
//
// x tasks: both consumer warpgroups of the CTA that drew chunk c's task copy its token rows from the
// packed rows (the dispatch windows) into W13's token operand rows -- NVFP4 expanded to FP16 as
// nvfp4_expand_rows does, MXFP8 into the row bundle as mxfp8_gather_packed_rows does -- fence them
// for the async proxy and count themselves in x_ready[c]; the TMA thread (and the scale warps) take
// a W13 tile of chunk c once both have (the stages are untouched: a task is no tile of the ring).
//
// No deadlock: a tile waits only for tasks and tiles drawn before it, which CTAs are running (a task
// waits for nothing); a CTA's producer draws its next tile only after issuing all loads of the
// current one, so its consumers always finish (and, if last, hand off) the tiles it already drew,
// whatever the producer waits for.
//
// Counters: chunk_done, chunk_ready and x_ready are zero at launch (the host memsets them, one node
// in a graph); the tile counter pair resets itself (scheduler.cuh).
//
// Finisher hand-offs (each of the finisher's four warps takes a token row of the chunk at a time; W2
// then reads what the staged W2 reads):
//   Nvfp4ExpandedHandoff  nvfp4_quantize_expand_row_warp: the packed h2 row (the bytes of the staged
//                         h2 quantization) and, from the same registers, the row expanded to FP16 in
//                         place of the BF16 row (the bytes of nvfp4_expand_rows), its token_scale_inv
//                         over x's (x's rows of the chunk are dead: all W13 tiles of the chunk are done)
//   Mxfp8InPlaceHandoff   mxfp8_quantize_row_warp in place of the BF16 row: E4M3 bytes at the row's
//                         start, the E8M0 codes F bytes in (the staged row quantizer's bytes)
// Mxfp8EpilogueRows is the rows form's: no finisher, the x task of Mxfp8InPlaceHandoff.
// The mainloops and epilogues read every token-side value the launch writes through L2 (TMA,
// ld.global.cg), never through the non-coherent path.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/common/spin_wait.cuh"
#include "dist_moe/device/gemm/epilogue_swap_ab.cuh"
#include "dist_moe/device/gemm/epilogue_swiglu_mxfp8.cuh"
#include "dist_moe/device/gemm/kernel.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"
#include "dist_moe/device/ptx/cp_async.cuh"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"
#include "dist_moe/device/quant/mxfp8_rows.cuh"
#include "dist_moe/device/quant/nvfp4_rows.cuh"

namespace dist_moe::gemm {

#if defined(__CUDACC__)

// The hand-offs: the chunk's rows [row0, row0 + rows) of h2 (BF16 at h2, f per row) into W2's A
// operand rows, in place. Every thread of the finisher warpgroup calls them (tid: 0..127; scratch:
// the warpgroup's staging buffer, Writer::kBytesPerWg bytes, free between its epilogues).

// NVFP4 with expanded token rows: as nvfp4_quantize_rows then nvfp4_expand_rows would (numerics:
// device/quant/nvfp4_rows.cuh); the packed rows also land in p.packed_h2.
struct Nvfp4ExpandedHandoff {
  // Stages per expansion pass of the x task (loads in flight per warp): 2, where the expansion kernel
  // takes 8 -- more made ptxas spill in this kernel (8: 24 bytes; 4 with the x tasks: 8 bytes).
  static constexpr int kMaxStagesPerPass = 2;

  static constexpr bool kFinisher = true;

  // The x task's row m, by one warp: the packed row at p.x_rows[m] expanded into W13's token row (x,
  // FP16 at `tokens`) and its token_scale_inv, as nvfp4_expand_rows does (a null row: zeros). A packed
  // row that fits the warp's slice of shared memory (2560 bytes: D <= 4352; qwen3_30b's 2048 takes
  // 1168 bytes, dsv3's 7168 does not fit) comes in by cp.async first, one round trip to the dispatch
  // window (over NVLink for a peer's), and the expansion reads it there instead of making a round
  // trip per kMaxStagesPerPass stages (G100).
  DMOE_DEVICE static void x_row(const MegaParams& p, char* tokens, const MainloopParams& /*ml*/, int64_t m, int lane,
                                uint8_t* slice, int slice_bytes) {
    const uint8_t* src = static_cast<const uint8_t*>(p.x_rows[m]);
    const int64_t bytes = numeric::nvfp4_packed_row_bytes(p.d);  // a multiple of 16
    const bool staged = src != nullptr && bytes <= slice_bytes;  // warp-uniform
    if (staged) ptx::warp_copy_to_shared(slice, src, static_cast<int>(bytes / 16), lane);
    quant::nvfp4_expand_row<kMaxStagesPerPass>(quant::Nvfp4ExpandLane(lane), staged ? slice : src, p.d,
                                               reinterpret_cast<uint4*>(tokens + m * p.d * 2), p.token_scale_inv + m);
    __syncwarp();  // the slice is read before the warp's next row overwrites it
  }

  // scratch: the finisher's staging buffer (kScratchBytes), a quarter per warp for its rows' values.
  template <int kScratchBytes>
  DMOE_DEVICE static void run(const MegaParams& p, char* h2, int32_t row0, int32_t rows, int tid, uint8_t* scratch) {
    constexpr int kSliceVecs = kScratchBytes / 4 / 16;
    const int warp = tid / 32, lane = tid % 32;
    const int64_t f = p.f;
    uint4* slice = reinterpret_cast<uint4*>(scratch) + warp * kSliceVecs;
    for (int32_t r = warp; r < rows; r += 4) {
      const int64_t m = static_cast<int64_t>(row0) + r;
      quant::nvfp4_quantize_expand_row_warp<kSliceVecs>(reinterpret_cast<uint16_t*>(h2 + m * f * 2), f,
                                                        p.packed_h2 + m * p.packed_stride, p.token_scale_inv + m, slice,
                                                        lane);
    }
  }
};

// The MXFP8 x task of both forms: the packed row [D E4M3 | D/32 E8M0] at p.x_rows[m] copied by one
// warp into W13's token row bundle (codes at `tokens`, scales [rows, D/32] at ml.a_scales), as
// mxfp8_gather_packed_rows does (a null row: zero codes, scales 0), four 16-byte loads per lane in
// flight (G100).
struct Mxfp8XRows {
  DMOE_DEVICE static void x_row(const MegaParams& p, char* tokens, const MainloopParams& ml, int64_t m, int lane,
                                uint8_t* /*slice*/, int /*slice_bytes*/) {
    quant::mxfp8_copy_packed_row<4>(
        static_cast<const char*>(p.x_rows[m]), p.d, reinterpret_cast<uint4*>(tokens + m * p.d),
        reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(const_cast<void*>(ml.a_scales)) + m * ml.a_scale_ld), lane);
  }
};

// The rows form's hand-off: the W13 epilogue (SwigluMxfp8RowsEpilogue) writes W2's operand itself.
struct Mxfp8EpilogueRows : Mxfp8XRows {
  static constexpr bool kFinisher = false;
};

// The decode form's MXFP8 hand-off: row m's E4M3 bytes at its start and its f / 32 E8M0 codes right
// after them, f bytes in (so W2 reads A with a row stride of 2 f bytes and its scales at h2 + f, the
// same stride); the bytes are the row quantizer's (device/quant/mxfp8_rows.cuh). The codes wait in
// `scratch` until the row's values are all read.
struct Mxfp8InPlaceHandoff : Mxfp8XRows {
  static constexpr bool kFinisher = true;
  static constexpr int kHandoffBatch = 4;  // 256-value steps loaded at once per warp (G100)

  template <int kScratchBytes>
  DMOE_DEVICE static void run(const MegaParams& p, char* h2, int32_t row0, int32_t rows, int tid, uint8_t* scratch) {
    static_assert(kScratchBytes >= 4 * 2048, "four rows' codes: F <= 65536 (the host checks F)");
    const int warp = tid / 32, lane = tid % 32;
    const int64_t f = p.f;
    uint8_t* codes = scratch + warp * (f / numeric::kMXBlock);
    for (int32_t r = warp; r < rows; r += 4) {
      uint8_t* row = reinterpret_cast<uint8_t*>(h2) + (static_cast<int64_t>(row0) + r) * f * 2;
      quant::mxfp8_quantize_row_warp<kHandoffBatch>(reinterpret_cast<const uint16_t*>(row), f, row, codes, lane);
      __syncwarp();
      for (int64_t i = lane; i < f / numeric::kMXBlock; i += 32) row[f + i] = codes[i];
      __syncwarp();  // the codes are copied before the next row's overwrite them
    }
  }
};

template <class Mainloop13_, class Mainloop2_, class Epilogue13_, class Epilogue2_, class Handoff>
struct MegaKernel {
  using Mainloop13 = Mainloop13_;
  using Mainloop2 = Mainloop2_;
  using Epilogue13 = Epilogue13_;
  using Epilogue2 = Epilogue2_;
  using Writer = typename Epilogue2::Writer;  // (Epilogue13 stages through it too, or not at all)
  using Pipeline = typename Mainloop13::Pipeline;
  static constexpr int kBlockM = Mainloop13::kBlockM;
  static constexpr int kBlockN = Mainloop13::kBlockN;
  static constexpr int kStages = Mainloop13::kStages;
  static constexpr Grouping kGrouping = Mainloop13::kGrouping;
  static constexpr bool kDecode = kGrouping == Grouping::kN;  // the swap-AB decode form
  static constexpr int kChunkRows = kDecode ? kBlockN : kBlockM;
  static constexpr int kTokenMap = kDecode ? kMapB : kMapA;  // W13's token operand
  static constexpr int kScaleWarps = Mainloop13::kScaleWarps;
  using Scheduler = GroupedTileScheduler<kGrouping, kBlockM, kBlockN>;

  static_assert((kDecode && Mainloop13::kKind == GemmKind::kFpropSwapAB && Mainloop2::kKind == GemmKind::kFpropSwapAB) ||
                    (kGrouping == Grouping::kM && Mainloop13::kKind == GemmKind::kFprop &&
                     Mainloop2::kKind == GemmKind::kFprop),
                "both GEMMs swap-AB decode tiles, or both M-grouped FPROP tiles");
  static_assert(Mainloop13::kSplit && !Mainloop2::kSplit, "W13 splits gate / up rows, W2 does not");
  static_assert(Mainloop2::kBlockM == kBlockM && Mainloop2::kBlockN == kBlockN && Mainloop2::kStages == kStages &&
                    Mainloop13::smem_bytes() == Mainloop2::smem_bytes() &&
                    std::is_same<Pipeline, typename Mainloop2::Pipeline>::value,
                "one stage ring for both GEMMs");
  static_assert(Mainloop2::kScaleWarps == kScaleWarps && Mainloop13::kFillArrivals == Mainloop2::kFillArrivals &&
                    (kScaleWarps == 0 || Mainloop13::kFillArrivals == 1) && !Mainloop13::kPingPong &&
                    !Mainloop2::kPingPong && Mainloop13::kMmaPerWg == Mainloop2::kMmaPerWg &&
                    Mainloop13::kAccPerMma == Mainloop2::kAccPerMma && Mainloop13::kClusterM == 1,
                "cooperative consumers; the TMA thread, and the same scale warps taking turns, fill the stages");
  static_assert(Handoff::kFinisher == kDecode, "finisher hand-offs run the decode form, the epilogue one the rows form");
  static_assert(!Handoff::kFinisher || !Writer::kTma,
                "the finisher's hand-off overwrites its staging buffer: no TMA store may still read it");

  static constexpr int kThreads = 384;
  static constexpr uint32_t kLaunchRegs = (65536u / kThreads) & ~7u;
  // kernel.cuh's split: the scale warps hold a stage's codes and FP32 values.
  static constexpr uint32_t kProducerRegs = kScaleWarps > 0 ? static_cast<uint32_t>(Mainloop13::kStageWarpRegs) : 40;
  static constexpr uint32_t kConsumerRegs = kScaleWarps > 0 ? ((3 * kLaunchRegs - kProducerRegs) / 2) & ~7u : 232;
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kLaunchRegs * kThreads, "launch register allocation");

  struct Params {
    OperandMaps maps13;  // W13 weights and x rows, h2 (kMapH2); maps first: 64-byte alignment
    OperandMaps maps2;   // W2 weights and h2 operand rows, out (or scatter rows)
    MainloopParams ml13, ml2;
    EpilogueParams ep13, ep2;
    SchedulerParams sc13, sc2;  // the same counts and token rows; their own tiles per chunk
    MegaParams mega;
  };

  // ---- shared memory: [stages][staging x 2][pipeline][resolved x 2][counters][ring][tables x 2] -----
  static constexpr int kStagingOffset = Mainloop13::smem_bytes();
  // Warpgroup wg's staging buffer (its writer's; warpgroup 1's is also the narrow-tile join's).
  DMOE_HOST_DEVICE static constexpr int staging_offset(int wg) { return kStagingOffset + wg * Writer::kBytesPerWg; }
  static constexpr int kBarrierOffset = kStagingOffset + 2 * Writer::kBytesPerWg;
  static constexpr int kResolvedOffset = kBarrierOffset + static_cast<int>(sizeof(typename Pipeline::SharedStorage));
  static constexpr int kCountersOffset = kResolvedOffset + 2 * static_cast<int>(sizeof(ResolvedOperands));
  static constexpr int kRingOffset = kCountersOffset + 32;  // clip counters [3], finisher flags [2] at [4]
  static constexpr int kTablesOffset = kRingOffset + static_cast<int>(sizeof(TileRingStorage));
  static_assert(kBarrierOffset % 8 == 0 && kResolvedOffset % 8 == 0 && kTablesOffset % 4 == 0, "alignment");
  static_assert((kStagingOffset % 1024 == 0 && Writer::kBytesPerWg % 1024 == 0) || !Writer::kTma,
                "TMA staging buffers are 128B-swizzle atoms: 1024-byte aligned");

  static constexpr int smem_bytes(int num_experts) {
    return 1024 + kTablesOffset + 2 * Scheduler::smem_bytes(num_experts);
  }

  DMOE_DEVICE static void run(const Params& params, uint8_t* smem_raw) {
    const uint32_t raw = ptx::smem_addr(smem_raw);
    const uint32_t smem = (raw + 1023u) & ~1023u;
    uint8_t* base = smem_raw + (smem - raw);
    auto& pipe_storage = *reinterpret_cast<typename Pipeline::SharedStorage*>(base + kBarrierOffset);
    auto* resolved = reinterpret_cast<ResolvedOperands*>(base + kResolvedOffset);  // [0] W13, [1] W2
    uint32_t* cta_counts = reinterpret_cast<uint32_t*>(base + kCountersOffset);
    auto& ring = *reinterpret_cast<TileRingStorage*>(base + kRingOffset);
    int32_t* tables13 = reinterpret_cast<int32_t*>(base + kTablesOffset);
    int32_t* tables2 = tables13 + Scheduler::smem_bytes(params.sc13.num_experts) / 4;

    const int warp = static_cast<int>(threadIdx.x / 32);
    const auto role = static_cast<WarpGroupRole>(threadIdx.x / 128);
    if (threadIdx.x < kNumMaps) resolve_operand(params.maps13, static_cast<int>(threadIdx.x), resolved[0]);
    if (threadIdx.x >= 64 && threadIdx.x < 64 + kNumMaps)
      resolve_operand(params.maps2, static_cast<int>(threadIdx.x) - 64, resolved[1]);
    if (threadIdx.x == 32) {
      for (int i = 0; i < kTileRing; ++i) {
        ptx::mbarrier_init(ptx::smem_addr(&ring.full[i]), 1);
        ptx::mbarrier_init(ptx::smem_addr(&ring.empty[i]), 8 + kScaleWarps);  // every consumer and scale warp
      }
      Mainloop13::init_shared(smem);  // (both mainloops' shared state is the same)
      Pipeline::init(pipe_storage, Mainloop13::kConsumerWarpsPerTile, stage_fill_arrivals<Mainloop13>());
      cta_counts[0] = cta_counts[1] = cta_counts[2] = 0;
    }
    Scheduler::build(params.sc13, tables13);  // each ends with __syncthreads()
    Scheduler::build(params.sc2, tables2);
    const Pipeline pipe(pipe_storage);
    // Linear tiles: [0, xt) the chunks' x tasks (when the launch gathers x), [xt, w2_first) W13's,
    // then W2's. Every role walks them in that order, in one loop per kind, each with its own
    // scheduler (fewer live registers next to the wgmmas).
    const int32_t tiles13 = tables13[params.sc13.num_experts + 1 + params.sc13.num_experts];
    const int32_t xt = params.mega.x_rows != nullptr ? tiles13 / tiles_per_chunk(params.sc13) : 0;
    const int32_t w2_first = xt + tiles13;
    const int32_t total = w2_first + tables2[params.sc2.num_experts + 1 + params.sc2.num_experts];

    if (role == WarpGroupRole::kProducer) {
      ptx::setmaxnreg_dec<kProducerRegs>();
      if (threadIdx.x == 0) {
        ptx::prefetch_tensormap(resolved[0].map[kMapA]);
        ptx::prefetch_tensormap(resolved[0].map[kMapB]);
        ptx::prefetch_tensormap(resolved[1].map[kMapA]);
        ptx::prefetch_tensormap(resolved[1].map[kMapB]);
        PipelineState<kStages> st;
        int32_t seq = 0;
        int32_t cur = draw(params.mega, total);
        tile_ring_publish(ring, seq++, cur);
        for (; cur >= 0 && cur < xt; tile_ring_publish(ring, seq++, cur)) cur = draw(params.mega, total);  // no loads
        {
          Scheduler s13(params.sc13, tables13);
          for (; cur >= 0 && cur < w2_first; tile_ring_publish(ring, seq++, cur)) {
            const WorkTile t = s13.at(cur - xt);
            if (xt > 0) wait_count(params.mega.x_ready + chunk_of(s13, params.sc13, t), 2);
            Mainloop13::load_tile(params.ml13, resolved[0], t, params.ml13.num_k_blocks, pipe, st, smem);
            cur = draw(params.mega, total);
          }
        }
        Scheduler s2(params.sc2, tables2);
        for (; cur >= 0; tile_ring_publish(ring, seq++, cur)) {
          const WorkTile t = s2.at(cur - w2_first);
          wait_w2_operand(params, chunk_of(s2, params.sc2, t));
          Mainloop2::load_tile(params.ml2, resolved[1], t, params.ml2.num_k_blocks, pipe, st, smem);
          cur = draw(params.mega, total);
        }
      } else if constexpr (kScaleWarps > 0) {
        if (warp >= 1 && warp <= kScaleWarps) scale_warp(params, ring, pipe, smem, tables13, tables2, xt, w2_first, warp - 1);
      }
    } else {
      ptx::setmaxnreg_inc<kConsumerRegs>();
      const int wg = static_cast<int>(role) - 1;
      const int tid = static_cast<int>(threadIdx.x % 128);
      Writer writer(smem + staging_offset(wg), kBarrierEpilogueWg0 + wg);
      PipelineState<kStages> st;
      ClipCounts counts;
      float acc[Mainloop13::kMmaPerWg][Mainloop13::kAccPerMma];
      int32_t index = 0;
      int32_t lin = tile_ring_read(ring, 0);
      {
        Scheduler s13(params.sc13, tables13);
        for (; lin >= 0 && lin < xt; lin = tile_ring_read(ring, ++index))
          x_task(params, resolved[0], s13, lin, writer.bar, wg, tid, base + staging_offset(wg));
        while (lin >= 0 && lin < w2_first) {
          const WorkTile t = s13.at(lin - xt);
          Mainloop13::mma_tile(params.ml13, t, params.ml13.num_k_blocks, Mainloop13::kBlockK, pipe, st, smem, wg,
                               acc);
          lin = tile_ring_read(ring, ++index);  // only after this tile's stages (kernel.cuh)
          Mainloop13::join_tile(params.ml13, t, wg, acc, writer, smem + staging_offset(1));
          Epilogue13::store(params.ep13, resolved[0], t, acc, wg, writer, counts);
          arrive(params, resolved[0], s13, t, writer.bar, tid, base, wg);
        }
      }
      Scheduler s2(params.sc2, tables2);
      while (lin >= 0) {
        const WorkTile t = s2.at(lin - w2_first);
        Mainloop2::mma_tile(params.ml2, t, params.ml2.num_k_blocks, Mainloop2::kBlockK, pipe, st, smem, wg, acc);
        lin = tile_ring_read(ring, ++index);
        Mainloop2::join_tile(params.ml2, t, wg, acc, writer, smem + staging_offset(1));
        Epilogue2::store(params.ep2, resolved[1], t, acc, wg, writer, counts);
      }
      writer.finish();
      if (params.ep13.clip_stats != nullptr)
        flush_clip_counts(params.ep13, counts, cta_counts, static_cast<int>(threadIdx.x) - 128);
    }
  }

 private:
  // W13 tiles per chunk: the weight tiles of a token tile (decode), the N tiles of an M tile (rows).
  DMOE_DEVICE static int32_t tiles_per_chunk(const SchedulerParams& p) {
    return kDecode ? p.fixed_m_blocks : p.fixed_n_blocks;
  }

  // The chunk of a tile: the token tiles of the experts before its expert, plus its own.
  DMOE_DEVICE static int32_t chunk_of(const Scheduler& s, const SchedulerParams& p, const WorkTile& t) {
    if constexpr (kDecode) return s.tile_offset(t.expert) / p.fixed_m_blocks + t.n_block;
    return t.m_tile_index;
  }

  // The producer thread's next linear tile of both GEMMs (the dynamic schedule of scheduler.cuh over
  // `total` tiles), or -1 past the end; the last CTA to get there resets the pair.
  DMOE_DEVICE static int32_t draw(const MegaParams& p, int32_t total) {
    const int32_t lin = atomicAdd(&p.tile_counter[0], 1);
    if (lin < total) return lin;
    __threadfence();
    if (atomicAdd(&p.tile_counter[1], 1) == static_cast<int32_t>(gridDim.x) - 1) {
      __threadfence();
      atomicExch(&p.tile_counter[0], 0);
      atomicExch(&p.tile_counter[1], 0);
    }
    return -1;
  }

  // Until *flag reaches `target` (acquire; trap-only on a timeout: see mbarrier_wait in pipeline.cuh).
  DMOE_DEVICE static void spin_until(const int32_t* flag, int32_t target) {
    if (ptx::ld_acquire_gpu(flag) < target) {
      common::SpinTimer timer;
      while (ptx::ld_acquire_gpu(flag) < target) {
        if (timer.expired()) ptx::trap();
      }
    }
  }

  // A whole warp (the scale warps): lane 0 polls, then every lane acquires the count once (already
  // reached), so a waiting CTA puts one poller per warp on the counter's L2 line, not 32.
  DMOE_DEVICE static void spin_until_warp(const int32_t* flag, int32_t target) {
    if (threadIdx.x % 32 == 0) spin_until(flag, target);
    __syncwarp();
    spin_until(flag, target);
  }

  // TMA thread: a chunk's operand rows published, then the proxy fence.
  DMOE_DEVICE static void wait_count(const int32_t* flag, int32_t target) {
    spin_until(flag, target);
    ptx::fence_proxy_async_global();  // the TMA that follows must see the generic-proxy stores
  }

  // Chunk c's W2 operand published (the finisher's flag, or every W13 warpgroup's count).
  DMOE_DEVICE static void wait_w2_operand(const Params& params, int32_t c) {
    if constexpr (Handoff::kFinisher) wait_count(params.mega.chunk_ready + c, 1);
    else wait_count(params.mega.chunk_done + c, 2 * tiles_per_chunk(params.sc13));
  }

  // A scale warp (rows form): converts the A / B codes of every third stage of each tile the ring
  // names, as kernel.cuh's scale warps do, once the tile's token-side codes exist (x_ready for W13
  // when the launch gathers x, the chunk's count for W2; lane 0 polls, every lane acquires). One stage sequence
  // across both GEMMs: W2's producer takes over W13's state.
  DMOE_DEVICE static void scale_warp(const Params& params, TileRingStorage& ring, const Pipeline& pipe, uint32_t smem,
                                     const int32_t* tables13, const int32_t* tables2, int32_t xt, int32_t w2_first,
                                     int which) {
    int32_t seq = 0;
    int32_t lin = tile_ring_read(ring, seq++);
    for (; lin >= 0 && lin < xt; lin = tile_ring_read(ring, seq++)) {
    }
    typename Mainloop13::ScaleProducer p13(params.ml13, smem, which);
    {
      Scheduler s13(params.sc13, tables13);
      for (; lin >= 0 && lin < w2_first; lin = tile_ring_read(ring, seq++)) {
        const WorkTile t = s13.at(lin - xt);
        if (xt > 0) spin_until_warp(params.mega.x_ready + chunk_of(s13, params.sc13, t), 2);
        p13.tile(t, params.ml13.num_k_blocks, pipe);
      }
    }
    typename Mainloop2::ScaleProducer p2(params.ml2, smem, which);
    p2.st = p13.st;
    p2.seq = p13.seq;
    Scheduler s2(params.sc2, tables2);
    for (; lin >= 0; lin = tile_ring_read(ring, seq++)) {
      const WorkTile t = s2.at(lin - w2_first);
      const int32_t c = chunk_of(s2, params.sc2, t);
      if constexpr (Handoff::kFinisher) spin_until_warp(params.mega.chunk_ready + c, 1);
      else spin_until_warp(params.mega.chunk_done + c, 2 * tiles_per_chunk(params.sc13));
      p2.tile(t, params.ml2.num_k_blocks, pipe);
    }
  }

  // Chunk c's x task, both consumer warpgroups: warpgroup w's warps take the chunk's token rows
  // kChunkRows / 2 w .. kChunkRows / 2 (w + 1) - 1 (a row each at a time) into W13's token rows; each
  // warpgroup then publishes its half (x_ready[c] counts to 2). Every thread of both warpgroups calls it.
  // `scratch`: the warpgroup's staging buffer, free before its first epilogue (x tasks come first), a
  // quarter per warp.
  DMOE_DEVICE static void x_task(const Params& params, const ResolvedOperands& ops, const Scheduler& s13, int32_t c,
                                 uint32_t bar, int wg, int tid, uint8_t* scratch) {
    int32_t expert, row0, rows;
    if constexpr (kDecode) s13.locate_n_tile(c, expert, row0, rows);
    else s13.locate_m_tile(c, expert, row0, rows);
    const int warp = tid / 32, lane = tid % 32;
    for (int32_t r = kChunkRows / 2 * wg + warp; r < min(rows, kChunkRows / 2 * (wg + 1)); r += 4)
      Handoff::x_row(params.mega, ops.base[kTokenMap], params.ml13, static_cast<int64_t>(row0) + r, lane,
                     scratch + warp * (Writer::kBytesPerWg / 4), Writer::kBytesPerWg / 4);
    ptx::fence_proxy_async_global();  // W13's TMA reads the rows through the async proxy
    ptx::named_barrier_sync(bar, 128);
    if (tid == 0) {
      ptx::fence_acq_rel_gpu();
      ptx::red_add_release_gpu(params.mega.x_ready + c, 1);
    }
  }

  // A consumer warpgroup after its W13 epilogue: counts itself in the chunk. Finisher hand-offs: the
  // warpgroup completing the count hands the chunk off and publishes it. Every thread of the
  // warpgroup calls it.
  DMOE_DEVICE static void arrive(const Params& params, const ResolvedOperands& ops, const Scheduler& s13,
                                 const WorkTile& t, uint32_t bar, int tid, uint8_t* base, int wg) {
    const MegaParams& m = params.mega;
    const int32_t chunk = chunk_of(s13, params.sc13, t);
    if constexpr (!Handoff::kFinisher) {
      ptx::fence_proxy_async_global();  // W2's TMA reads this thread's h2 stores through the async proxy
      ptx::named_barrier_sync(bar, 128);  // every thread's h2 stores come before the count
      if (tid == 0) {
        ptx::fence_acq_rel_gpu();  // release: this warpgroup's stores (cumulative through the barrier)
        ptx::red_add_release_gpu(m.chunk_done + chunk, 1);
      }
      return;
    } else {
      volatile uint32_t* finisher = reinterpret_cast<uint32_t*>(base + kCountersOffset) + 4 + wg;
      uint8_t* scratch = base + staging_offset(wg);  // the writer's buffer, generic
      ptx::named_barrier_sync(bar, 128);  // every thread's h2 stores come before the count
      if (tid == 0) {
        ptx::fence_acq_rel_gpu();  // release: this warpgroup's stores (cumulative through the barrier)
        const int32_t arrivals = 2 * tiles_per_chunk(params.sc13);  // two warpgroups per W13 tile
        const bool last = atomicAdd(m.chunk_done + chunk, 1) == arrivals - 1;
        if (last) ptx::fence_acq_rel_gpu();  // acquire: every other warpgroup's h2 stores
        *finisher = last ? 1u : 0u;
      }
      ptx::named_barrier_sync(bar, 128);
      if (*finisher == 0u) return;
      const int32_t first = t.n_block * kBlockN;
      const int32_t rows = min(kBlockN, t.num_rows - first);
      Handoff::template run<Writer::kBytesPerWg>(m, ops.base[kMapH2], t.row_begin + first, rows, tid, scratch);
      ptx::fence_proxy_async_global();  // W2's TMA reads the rows through the async proxy
      ptx::named_barrier_sync(bar, 128);
      if (tid == 0) {
        ptx::fence_acq_rel_gpu();
        ptx::red_add_release_gpu(m.chunk_ready + chunk, 1);
      }
    }
  }
};

// One kernel entry point for every instantiation (Params with the TMA descriptors in parameter space).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1) sm90_mega(const __grid_constant__ typename Kernel::Params params) {
  extern __shared__ __align__(1024) uint8_t dmoe_mega_smem[];
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  Kernel::run(params, dmoe_mega_smem);
#endif
}

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
