// The SM90 grouped GEMM kernel: Kernel<Mainloop, Epilogue, RowSource> over the expert tile
// scheduler, with warp-specialized roles.
//
//   warpgroup 0  producer   (setmaxnreg down)  warp 0, lane 0: TMA issue for every tile
//                                              warps 1-3: row gather (gather variants only)
//   warpgroup 1  consumer 0 (setmaxnreg up)    wgmma + epilogue
//   warpgroup 2  consumer 1 (setmaxnreg up)    wgmma + epilogue
//
// Consumer schedules (mainloop.cuh): cooperative -- both warpgroups share every tile, each owns
// half of its rows, and store them while the producer already fills the next tile's stages;
// ping-pong -- the warpgroups take alternate tiles of the CTA, so one's epilogue overlaps the
// other's wgmmas. Persistent: gridDim.x <= number of SMs, one CTA per SM (the stage ring takes most
// of shared memory, which also means no two GEMM CTAs ever share an SM).
//
// Clusters (Mainloop::kClusterM = 2, WGRAD and FPROP): both CTAs of a cluster run the same pairs of tiles in
// the same order (scheduler.cuh) and fill each other's stages (TMA multicast of B, pipeline.cuh).
// A cluster barrier after the setup (the peer's mbarriers are initialized before any multicast or
// remote arrival reaches them) and one before exit (no CTA leaves while its peer may still write
// into its shared memory or arrive on its barriers) bracket the kernel.
//
// Start of the kernel: threads 0..4 resolve the operands' device-side offsets (operands.cuh),
// thread 0 initializes the pipeline, every thread helps build the scheduler tables; the
// __syncthreads at the end of Scheduler::build publishes all of it.
//
// Shared memory (from a 1024-aligned base):
//   [stages: A x S, B x S][epilogue staging: 2 x writer bytes][pipeline mbarriers]
//   [resolved operands][clip counters][tile ring][scheduler tables]
//
// Dynamic schedule (scheduler.cuh, SchedulerParams::tile_counter): the producer thread draws the
// CTA's linear tiles from the global counter, one tile ahead of the one it loads, and publishes
// each index (then -1) in a kTileRing-slot ring: full[i] (1 arrival: the producer), empty[i] (one
// arrival per consumer warp, 8). Both consumer warpgroups read every entry, so the ping-pong
// alternation is the same as with the static schedule. The producer draws tile i + 1 only after
// issuing tile i's loads (tiles start in draw order), so a consumer reads entry i + 1 (its
// look-ahead) only after consuming -- or skipping -- tile i's stages; reading it earlier would
// deadlock whenever tile i has more k blocks than the ring has stages.
#pragma once

#include <cstdint>
#include <type_traits>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/epilogue_staging.cuh"
#include "dist_moe/device/gemm/gather.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/operands.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/pipeline.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"
#include "dist_moe/device/ptx/cluster.cuh"
#include "dist_moe/device/ptx/setmaxnreg.cuh"
#include "dist_moe/device/ptx/special_registers.cuh"
#include "dist_moe/device/ptx/tma.cuh"

namespace dist_moe::gemm {

enum class WarpGroupRole : int { kProducer = 0, kConsumer0 = 1, kConsumer1 = 2 };

// Linear tile indices from the producer to the consumers (dynamic schedule only; unused otherwise).
inline constexpr int kTileRing = 4;
struct TileRingStorage {
  uint64_t full[kTileRing];
  uint64_t empty[kTileRing];
  int32_t lin[kTileRing];
};

#if defined(__CUDACC__)
// Producer thread: waits for slot seq % kTileRing to be free, writes the index, arrives.
DMOE_DEVICE void tile_ring_publish(TileRingStorage& r, int32_t seq, int32_t lin) {
  const int slot = seq % kTileRing;
  const uint32_t phase = static_cast<uint32_t>(seq / kTileRing) & 1u;
  mbarrier_wait(ptx::smem_addr(&r.empty[slot]), phase ^ 1u);
  *reinterpret_cast<volatile int32_t*>(&r.lin[slot]) = lin;
  ptx::mbarrier_arrive(ptx::smem_addr(&r.full[slot]));  // release: the index is visible first
}

// Every thread of a consumer warp: the seq-th index; lane 0 frees the slot for the warp.
DMOE_DEVICE int32_t tile_ring_read(TileRingStorage& r, int32_t seq) {
  const int slot = seq % kTileRing;
  const uint32_t phase = static_cast<uint32_t>(seq / kTileRing) & 1u;
  mbarrier_wait(ptx::smem_addr(&r.full[slot]), phase);
  const int32_t lin = *reinterpret_cast<volatile int32_t*>(&r.lin[slot]);
  __syncwarp();
  if (threadIdx.x % 32 == 0) ptx::mbarrier_arrive(ptx::smem_addr(&r.empty[slot]));
  return lin;
}
// Warp sums -> CTA sums in shared memory -> one FP32 atomicAdd per counter per CTA. Every thread of
// both consumer warpgroups calls it (consumer_tid 0..255).
DMOE_DEVICE void flush_clip_counts(const EpilogueParams& p, const ClipCounts& c, uint32_t* cta_counts, int consumer_tid) {
  const uint32_t gate = __reduce_add_sync(0xffffffffu, c.gate_over);
  const uint32_t up = __reduce_add_sync(0xffffffffu, c.up_over);
  const uint32_t elems = __reduce_add_sync(0xffffffffu, c.elems);
  if (consumer_tid % 32 == 0) {
    atomicAdd(&cta_counts[0], gate);
    atomicAdd(&cta_counts[1], up);
    atomicAdd(&cta_counts[2], elems);
  }
  ptx::named_barrier_sync(kBarrierConsumers, 256);
  if (consumer_tid == 0) {
    atomicAdd(&p.clip_stats[0], static_cast<float>(cta_counts[0]));
    atomicAdd(&p.clip_stats[1], static_cast<float>(cta_counts[1]));
    atomicAdd(&p.clip_stats[2], static_cast<float>(cta_counts[2]));
  }
}
#endif  // __CUDACC__

// Whether an epilogue stores deferred (epilogue_store.cuh: StoreEpilogue::kDeferred; others never).
template <class Epilogue, class = void>
struct IsDeferred : std::false_type {};
template <class Epilogue>
struct IsDeferred<Epilogue, std::void_t<decltype(Epilogue::kDeferred)>> : std::bool_constant<Epilogue::kDeferred> {};

// The deferred epilogue's state for epilogues that have one, else nothing.
template <class Epilogue, bool = IsDeferred<Epilogue>::value>
struct DeferredSlot {
  struct None {} d;
};
template <class Epilogue>
struct DeferredSlot<Epilogue, true> {
  typename Epilogue::Deferred d;
};

// Whether an epilogue loads operands of its own before the tile's k loop (kEarlyLoads: the swap-AB
// epilogues' NVFP4 factors where the consumers have the registers, G131), and their slot.
template <class Epilogue, class = void>
struct HasEarlyLoads : std::false_type {};
template <class Epilogue>
struct HasEarlyLoads<Epilogue, std::void_t<decltype(Epilogue::kEarlyLoads)>> : std::bool_constant<Epilogue::kEarlyLoads> {};
template <class Epilogue, bool = HasEarlyLoads<Epilogue>::value>
struct EarlySlot {
  struct None {} v;
};
template <class Epilogue>
struct EarlySlot<Epilogue, true> {
  typename Epilogue::Early v;
};

// The mainloop hook that stores one deferred chunk per k block.
template <class Epilogue>
struct StoreChunkHook {
  const EpilogueParams& p;
  const ResolvedOperands& ops;
  typename Epilogue::Deferred& d;
  typename Epilogue::Writer& w;
  DMOE_DEVICE void operator()(int32_t /*kb*/) const { Epilogue::store_chunk(p, ops, d, w); }
};

// Where A's rows come from: TMA straight from the row buffer, or the gather producer's local copy
// of rows named by a row-address table (gather.cuh).
enum class RowSource { kTma, kGather };

template <class Mainloop_, class Epilogue_, RowSource kRowSource = RowSource::kTma>
struct GroupedGemmKernel {
  using Mainloop = Mainloop_;
  using Epilogue = Epilogue_;
  using Writer = typename Epilogue::Writer;
  static constexpr int kClusterM = Mainloop::kClusterM;
  using Scheduler = GroupedTileScheduler<Mainloop::kGrouping, Mainloop::kBlockM, Mainloop::kBlockN, kClusterM>;
  using Pipeline = typename Mainloop::Pipeline;
  using Gather = GatherProducer<Mainloop::kBlockM>;
  static constexpr bool kGather = kRowSource == RowSource::kGather;
  static constexpr bool kPingPong = Mainloop::kPingPong;
  static constexpr bool kDeferred = IsDeferred<Epilogue>::value;
  static constexpr bool kEarlyLoads = HasEarlyLoads<Epilogue>::value;
  static_assert(!kEarlyLoads || !kDeferred, "early loads: the plain store path");
  static_assert(!kGather || Mainloop::kGrouping == Grouping::kM, "the gather producer feeds A of M-grouped GEMMs");
  static_assert(!kGather || Mainloop::kClusterM == 1, "the gather producer's ready flags count one CTA per M tile");

  static constexpr int kThreads = 384;
  // Registers per thread at launch (__launch_bounds__(kThreads, 1)): the 64K register file over
  // kThreads, in the allocation unit of 8 -- 168.
  static constexpr uint32_t kLaunchRegs = (65536u / kThreads) & ~7u;
  // setmaxnreg moves registers inside the CTA's launch allocation: a consumer's increase waits
  // until the producer's decrease has freed enough, so 128 * producer + 256 * consumer must fit in
  // kLaunchRegs * kThreads or the consumers wait forever. The gather warps keep 8
  // 16-byte loads per lane in flight next to the scheduler state, so the gather variants give the
  // producer more (below 96 ptxas spills them; 200 still holds a consumer's 128 accumulators and
  // its epilogue).
  // The MXFP8 scale warps hold a stage's codes and their FP32 values: 56, leaving the consumers 224
  // (the NVFP4 producer warps, which fill the token boxes, take the same slot).
  // The NVFP4 producer warps convert the token boxes: 72 (88 at 128 tokens), leaving the consumers
  // 216 (208) (Mainloop::kStageWarpRegs).
  // The FP8-blockwise 128x256 consumers hold 128 accumulators and a 64-register scratch: the
  // producer keeps 24 (its one TMA thread's loop), the consumers 240 (Mainloop::kWideConsumers).
  static constexpr uint32_t kProducerRegs =
      kGather ? 96
              : (Mainloop::kScaleWarps > 0 ? static_cast<uint32_t>(Mainloop::kStageWarpRegs)
                                           : (Mainloop::kWideConsumers ? 24 : 40));
  static constexpr uint32_t kConsumerRegs =
      kGather ? 200
              : (Mainloop::kScaleWarps > 0 || Mainloop::kWideConsumers ? ((3 * kLaunchRegs - kProducerRegs) / 2) & ~7u
                                                                      : 232);
  static_assert(128 * kProducerRegs + 256 * kConsumerRegs <= kLaunchRegs * kThreads, "launch register allocation");
  // Producer warps that take the stages in turn must not outnumber the stages: a warp would wait on
  // a slot two ring turns ahead, which a parity wait cannot tell from the turn before (an NVFP4
  // 2-stage tile with the three warps deadlocked at 8+ k blocks, session 23).
  static_assert(Mainloop::kFillArrivals != 1 || Mainloop::kScaleWarps <= Mainloop::kStages,
                "stage-filling warps taking turns: at most one per stage");

  struct Params {
    OperandMaps maps;  // first: the tensor maps keep their 64-byte alignment
    MainloopParams mainloop;
    EpilogueParams epilogue;
    SchedulerParams scheduler;
  };

  // ---- shared memory layout ---------------------------------------------------------------------
  static constexpr int kStagingOffset = Mainloop::smem_bytes();
  // Warpgroup wg's staging buffer (its writer's; warpgroup 1's is also the narrow-tile join's).
  DMOE_HOST_DEVICE static constexpr int staging_offset(int wg) { return kStagingOffset + wg * Writer::kBytesPerWg; }
  static constexpr int kBarrierOffset = kStagingOffset + 2 * Writer::kBytesPerWg;
  static constexpr int kResolvedOffset = kBarrierOffset + static_cast<int>(sizeof(typename Pipeline::SharedStorage));
  static constexpr int kCountersOffset = kResolvedOffset + static_cast<int>(sizeof(ResolvedOperands));
  static constexpr int kRingOffset = kCountersOffset + 16;
  static constexpr int kTablesOffset = kRingOffset + static_cast<int>(sizeof(TileRingStorage));
  static_assert((kStagingOffset % 1024 == 0 && Writer::kBytesPerWg % 1024 == 0) || !Writer::kTma,
                "TMA staging buffers are 128B-swizzle atoms: 1024-byte aligned");
  static_assert(kBarrierOffset % 8 == 0 && kResolvedOffset % 8 == 0, "mbarriers and pointers are 8-byte aligned");

  // Dynamic shared memory to request: the layout plus slack to align the base to 1024 bytes.
  static constexpr int smem_bytes(int num_experts) {
    return 1024 + kTablesOffset + Scheduler::smem_bytes(num_experts);
  }

#if defined(__CUDACC__)

  DMOE_DEVICE static void run(const Params& params, uint8_t* smem_raw) {
    const uint32_t raw = ptx::smem_addr(smem_raw);
    const uint32_t smem = (raw + 1023u) & ~1023u;
    uint8_t* base = smem_raw + (smem - raw);
    auto& pipe_storage = *reinterpret_cast<typename Pipeline::SharedStorage*>(base + kBarrierOffset);
    auto& resolved = *reinterpret_cast<ResolvedOperands*>(base + kResolvedOffset);
    uint32_t* cta_counts = reinterpret_cast<uint32_t*>(base + kCountersOffset);
    int32_t* tables = reinterpret_cast<int32_t*>(base + kTablesOffset);
    auto& ring = *reinterpret_cast<TileRingStorage*>(base + kRingOffset);

    const int warp = static_cast<int>(threadIdx.x / 32);
    const auto role = static_cast<WarpGroupRole>(threadIdx.x / 128);
    if (threadIdx.x < kNumMaps) resolve_operand(params.maps, static_cast<int>(threadIdx.x), resolved);
    if (threadIdx.x == 32) {
      for (int i = 0; i < kTileRing; ++i) {
        ptx::mbarrier_init(ptx::smem_addr(&ring.full[i]), 1);
        // Every consumer warp reads every entry, and so does every scale warp.
        ptx::mbarrier_init(ptx::smem_addr(&ring.empty[i]), 8 + Mainloop::kScaleWarps);
      }
      Mainloop::init_shared(smem);  // (the pipeline's init fences it)
      // A slot is full after the TMA bytes and the arrivals of the scale warps that fill it.
      Pipeline::init(pipe_storage, Mainloop::kConsumerWarpsPerTile, stage_fill_arrivals<Mainloop>());
      // (its fence covers the ring too)
      cta_counts[0] = cta_counts[1] = cta_counts[2] = 0;
    }
    // Prefix sums of the counts (and their validation); ends with __syncthreads(), which also
    // publishes the barrier initialization and the resolved operands above.
    Scheduler::build(params.scheduler, tables);
    if constexpr (kClusterM > 1) ptx::cluster_sync_aligned();  // the peer's barriers exist
    const Pipeline pipe(pipe_storage);
    Scheduler sched(params.scheduler, tables);

    if (role == WarpGroupRole::kProducer) {
      ptx::setmaxnreg_dec<kProducerRegs>();
      if (warp == 0) {
        if (threadIdx.x == 0) {
          // Epilogues that pull a tile's epilogue operands into L2 as its loads start (prefetch_l2):
          // WGRAD its old output (G72), the SwiGLU backward its h1.
          constexpr bool kPrefetchL2 = Epilogue::kPrefetchL2;
          acquire_patched_maps(params.maps, resolved,
                               (1u << kMapA) | (1u << kMapB) | (kPrefetchL2 ? (1u << kMapOut) | (1u << kMapH1) : 0u));
          ptx::prefetch_tensormap(resolved.map[kMapA]);
          if ((params.maps.encoded_mask >> kMapB) & 1u) ptx::prefetch_tensormap(resolved.map[kMapB]);
          PipelineState<Mainloop::kStages> st;
          if (sched.dynamic()) {
            // Draw a tile only when this CTA is about to load it (right after issuing the previous
            // tile's loads), so tiles start in draw order: the M tiles of one weight panel, drawn
            // back to back by different CTAs, run at the same time.
            int32_t seq = 0;
            int32_t cur = sched.draw();
            tile_ring_publish(ring, seq++, cur);
            while (cur >= 0) {
              const WorkTile t = sched.at(cur);
              if constexpr (kGather) Gather::wait_tile_ready(params.mainloop, t.m_tile_index);
              const int32_t num_k = sched.num_k_blocks(t, params.mainloop.num_k_blocks, Mainloop::kBlockK);
              if constexpr (kPrefetchL2) Epilogue::prefetch_l2(params.epilogue, resolved, t);
              Mainloop::load_tile(params.mainloop, resolved, t, num_k, pipe, st, smem);
              cur = sched.draw();
              tile_ring_publish(ring, seq++, cur);
            }
          } else {
            for (WorkTile t = sched.first(); t.valid; t = sched.next()) {
              if constexpr (kGather) Gather::wait_tile_ready(params.mainloop, t.m_tile_index);
              const int32_t num_k = sched.num_k_blocks(t, params.mainloop.num_k_blocks, Mainloop::kBlockK);
              if constexpr (kPrefetchL2) Epilogue::prefetch_l2(params.epilogue, resolved, t);
              Mainloop::load_tile(params.mainloop, resolved, t, num_k, pipe, st, smem);
            }
          }
        }
      } else if constexpr (kGather) {
        Gather::run(params.mainloop, resolved.base[kMapA], sched, params.scheduler.fixed_n_blocks,
                    static_cast<int>(threadIdx.x) - 32);
      } else if constexpr (Mainloop::kScaleWarps > 0) {
        // The scale warps walk the CTA's tiles as the TMA thread does: the static sequence, or the
        // dynamic one from the ring (they read every entry, after producing the previous tile).
        if (warp <= Mainloop::kScaleWarps) {
          typename Mainloop::ScaleProducer producer(params.mainloop, smem, warp - 1);
          if (sched.dynamic()) {
            for (int32_t seq = 0;; ++seq) {
              const int32_t lin = tile_ring_read(ring, seq);
              if (lin < 0) break;
              const WorkTile t = sched.at(lin);
              producer.tile(t, sched.num_k_blocks(t, params.mainloop.num_k_blocks, Mainloop::kBlockK), pipe);
            }
          } else {
            for (WorkTile t = sched.first(); t.valid; t = sched.next())
              producer.tile(t, sched.num_k_blocks(t, params.mainloop.num_k_blocks, Mainloop::kBlockK), pipe);
          }
        }
      }
    } else {
      ptx::setmaxnreg_inc<kConsumerRegs>();
      const int wg = static_cast<int>(role) - 1;
      const int consumer_tid = static_cast<int>(threadIdx.x) - 128;
      Writer writer(smem + staging_offset(wg), kBarrierEpilogueWg0 + wg);
      if constexpr (Writer::kTma) {
        if (threadIdx.x % 128 == 0)
          acquire_patched_maps(params.maps, resolved, (1u << kMapOut) | (1u << kMapH1) | (1u << kMapH2));
      }
      PipelineState<Mainloop::kStages> st;
      ClipCounts counts;
      float acc[Mainloop::kMmaPerWg][Mainloop::kAccPerMma];
      [[maybe_unused]] DeferredSlot<Epilogue> deferred;  // kDeferred: the previous tile, not stored yet
      int32_t index = 0;  // position of the tile in this CTA's sequence
      const bool dynamic = sched.dynamic();
      WorkTile t = dynamic ? sched.at(tile_ring_read(ring, 0)) : sched.first();
      while (t.valid) {
        // Look-ahead: does a tile follow this one? Dynamic: read only once this tile's stages are
        // consumed (or skipped) -- the producer draws the next tile after issuing this one's loads.
        WorkTile next;
        if (!dynamic) next = sched.next();
        const int32_t num_k = sched.num_k_blocks(t, params.mainloop.num_k_blocks, Mainloop::kBlockK);
        if (kPingPong && (index & 1) != wg) {  // the other warpgroup's tile: skip its stages
          st.advance(num_k);
          if (dynamic) next = sched.at(tile_ring_read(ring, index + 1));
        } else {
          // Ping-pong: wait until the other warpgroup has consumed every stage of the tile before
          // this one. Then the full barriers of this tile's stages are at most one phase ahead
          // of their last completed phase, which the parity wait needs (without it, a warpgroup
          // skipping a long tile would take an older phase of the same parity for its data).
          if (kPingPong && index > 0) ptx::named_barrier_sync(kBarrierMathOrder0 + (1 - wg), 256);
          const int rows_in_last =
              Mainloop::kGrouping == Grouping::kK ? t.num_rows - (num_k - 1) * Mainloop::kBlockK : Mainloop::kBlockK;
          [[maybe_unused]] EarlySlot<Epilogue> early;
          if constexpr (kEarlyLoads) early.v = Epilogue::load_early(params.epilogue, t);  // (latency under the k loop)
          if constexpr (kDeferred) {
            // The previous tile's chunks leave during this tile's k loop (one per k block).
            StoreChunkHook<Epilogue> hook{params.epilogue, resolved, deferred.d, writer};
            Mainloop::mma_tile(params.mainloop, t, num_k, rows_in_last, pipe, st, smem, wg, acc, hook);
            Epilogue::flush(params.epilogue, resolved, deferred.d, writer);
            Epilogue::defer(params.epilogue, resolved, t, acc, wg, deferred.d, writer);
          } else {
            Mainloop::mma_tile(params.mainloop, t, num_k, rows_in_last, pipe, st, smem, wg, acc);
            Mainloop::join_tile(params.mainloop, t, wg, acc, writer, smem + staging_offset(1));
          }
          if (dynamic) next = sched.at(tile_ring_read(ring, index + 1));
          // Signal only when the other warpgroup has a tile to wait for: every arrival is matched.
          if (kPingPong && next.valid) ptx::named_barrier_arrive(kBarrierMathOrder0 + wg, 256);
          if constexpr (kEarlyLoads) {
            if (!t.phantom) Epilogue::store(params.epilogue, resolved, t, acc, wg, writer, counts, early.v);
          } else if constexpr (!kDeferred) {
            if (!t.phantom) Epilogue::store(params.epilogue, resolved, t, acc, wg, writer, counts);
          }
        }
        t = next;
        ++index;
      }
      if constexpr (kDeferred) Epilogue::flush(params.epilogue, resolved, deferred.d, writer);
      writer.finish();
      if constexpr (Epilogue::kClipStats) {
        if (params.epilogue.clip_stats != nullptr) flush_clip_counts(params.epilogue, counts, cta_counts, consumer_tid);
      }
    }
    // Every thread of both CTAs: the peer's last multicasts into this CTA, and this CTA's last
    // arrivals on the peer's barriers, are complete before either CTA exits.
    if constexpr (kClusterM > 1) ptx::cluster_sync();
  }

#endif  // __CUDACC__
};

#if defined(__CUDACC__)

// One kernel entry point for every instantiation; Params (with the TMA descriptors) is a
// __grid_constant__ parameter so the descriptors stay in parameter space, where TMA reads them.
template <class Kernel>
__global__ void __launch_bounds__(Kernel::kThreads, 1) sm90_grouped_gemm(const __grid_constant__ typename Kernel::Params params) {
  extern __shared__ __align__(1024) uint8_t dmoe_gemm_smem[];
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  Kernel::run(params, dmoe_gemm_smem);
#endif
}

#endif  // __CUDACC__

}  // namespace dist_moe::gemm
