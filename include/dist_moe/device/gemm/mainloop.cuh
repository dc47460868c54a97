// SM90 mainloop: a TMA producer (one thread) fills a ring of shared-memory stages; two consumer
// warpgroups run wgmma on them with FP32 accumulators in registers.
//
// Tile: kBlockM x kBlockN outputs, contraction in blocks of kBlockK = 128 bytes of K (the width of
// one 128B-swizzle row: 64 BF16). A flavour is a MainloopConfig (named fields). Two consumer
// schedules (ConsumerSchedule):
//   cooperative (kPingPong = false): both warpgroups work on every tile; warpgroup w owns rows
//     tile_row(w, b) + [0, 64) for b in [0, kMmaPerWg), tile_row(w, b) = b * kBlockM / 2 + 64 * w.
//     kBlockM = 128: warpgroup 0 has rows 0-63 and 1 has 64-127 (one m64 wgmma each); kBlockM = 256
//     (swap-AB decode): block b = 0 is the first half of the tile and b = 1 the second, which puts
//     a gate row and its up row (SwiGLU split) in the same thread.
//   ping-pong (kPingPong = true): the warpgroups take alternate tiles of the CTA, each owning all
//     kBlockM rows (tile_row(w, b) = 64 b, kMmaPerWg = kBlockM / 64), so one warpgroup's epilogue
//     runs while the other's wgmmas keep the tensor cores busy. Each stage is then read by one
//     warpgroup (4 arrivals on its empty barrier instead of 8).
// Blocks of 64 rows that lie wholly past an expert's end (kM grouping) issue no wgmma: a tile of
// at most 64 valid rows costs half (Zipf routing has many such tails).
// Clusters (kClusterM = 2; WGRAD cooperative, FPROP without the gather producer): the two CTAs of
// a cluster take M tiles 2p and 2p + 1 of the same (expert, N block), so they contract the same B
// block (WGRAD: x rows; FPROP: the weights) against different A blocks. Each CTA loads its own A
// and half of B, multicast to both (WGRAD: half of the 64-wide boxes; FPROP: one of two half-height
// boxes -- with the SwiGLU split, CTA 0 the gate half and CTA 1 the up half): per 128x256 stage
// 32 KiB instead of 48 KiB cross L2 -> SM per CTA (docs/perf.md G15).
//
// Shared memory per stage (every buffer 1024-byte aligned, as the 128B swizzle atom needs):
//   A: kBlockM x 64, B: kBlockN x 64 BF16.
//   K-major operand: one TMA box {64, rows} per operand (two half boxes when split for SwiGLU);
//     row r at byte 128 r.
//   MN-major operand: boxes {64 MN, 64 K} of 8 KiB each, box j covers MN elements [64 j, 64 j + 64).
// wgmma.cuh derives the descriptor fields for both layouts.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/params.cuh"
#include "dist_moe/device/gemm/pipeline.cuh"
#include "dist_moe/device/gemm/scheduler.cuh"
#include "dist_moe/device/ptx/barrier.cuh"
#include "dist_moe/device/ptx/cluster.cuh"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"
#include "dist_moe/device/ptx/tma.cuh"
#include "dist_moe/device/ptx/wgmma.cuh"

namespace dist_moe::gemm {

// Named barrier ids of the GEMM kernels (0 is __syncthreads).
enum NamedBarrier : uint32_t {
  kBarrierConsumers = 1,     // both consumer warpgroups (256 threads)
  kBarrierEpilogueWg0 = 2,   // consumer warpgroup 0 (128), then 3 for warpgroup 1
  kBarrierGather = 4,        // the producer warpgroup's gather warps, or NVFP4's token-filling warps (96)
  kBarrierMathOrder0 = 5,    // ping-pong: warpgroup 0 finished a mainloop, 1 may start (128 + 128)
                             // then 6: warpgroup 1 finished, 0 may start
};

// How the consumer warpgroups share the tiles (see the top of this file).
enum class ConsumerSchedule { kCooperative, kPingPong };
// SwiGLU split: the weight operand's tile is [gate half | up half] (B for kFprop, A for swap-AB).
enum class WeightSplit { kNone, kGateUp };

// A mainloop flavour, by name: GEMM kind, tile, pipeline depth, consumer schedule, weight split,
// cluster size and the operand type (ptx/wgmma.cuh: its element size sets the 128-byte k block,
// its instruction the k step).
template <GemmKind kKind_, int kBlockM_, int kBlockN_, int kStages_,
          ConsumerSchedule kSchedule_ = ConsumerSchedule::kCooperative, WeightSplit kSplit_ = WeightSplit::kNone,
          int kClusterM_ = 1, class Operands_ = ptx::WgmmaTypeBf16>
struct MainloopConfig {
  static constexpr GemmKind kKind = kKind_;
  static constexpr int kBlockM = kBlockM_;
  static constexpr int kBlockN = kBlockN_;
  static constexpr int kStages = kStages_;
  static constexpr ConsumerSchedule kSchedule = kSchedule_;
  static constexpr WeightSplit kSplit = kSplit_;
  static constexpr int kClusterM = kClusterM_;
  using Operands = Operands_;
};

// Arrivals that fill one stage of Mainloop's ring (its full barrier's count): the TMA thread's,
// unless it loads another ring (kTmaArrivesOnFull), and those of the warps that write the stage.
// A free function: a base-class constant could not see a derived mainloop's own values.
template <class Mainloop>
constexpr uint32_t stage_fill_arrivals() {
  return (Mainloop::kTmaArrivesOnFull ? 1u : 0u) + static_cast<uint32_t>(Mainloop::kFillArrivals);
}

template <class Config>
struct Sm90Mainloop {
  static constexpr GemmKind kKind = Config::kKind;
  static constexpr Grouping kGrouping = grouping_of(kKind);
  static constexpr int kBlockM = Config::kBlockM;
  static constexpr int kBlockN = Config::kBlockN;
  using Operands = typename Config::Operands;
  static constexpr int kElemBytes = Operands::kElemBytes;
  static constexpr int kBlockK = 128 / kElemBytes;  // one 128-byte swizzle row of K per stage row
  // Bytes per element of the operands in global memory, which the host's TMA maps describe: the
  // wgmma's own, except where the kernel converts them (the MXFP8 dequantizing mainloop: E4M3).
  static constexpr int kMapElemBytes = kElemBytes;
  static constexpr int kStages = Config::kStages;
  static constexpr bool kSplit = Config::kSplit == WeightSplit::kGateUp;
  static constexpr bool kPingPong = Config::kSchedule == ConsumerSchedule::kPingPong;
  static constexpr int kClusterM = Config::kClusterM;  // CTAs per cluster along M (TMA multicast of B)
  using Pipeline = TmaPipeline<kStages, kClusterM>;

  // WGRAD contracts over tokens: BF16 reads the row buffers MN-major; E4M3 (no transposed wgmma
  // operands) reads transposed copies [features, tokens], K-major like FPROP.
  static constexpr bool kAMnMajor = kKind == GemmKind::kWgrad && Operands::kTransposable;
  static constexpr bool kBMnMajor = (kKind == GemmKind::kDgrad || kKind == GemmKind::kWgrad) && Operands::kTransposable;
  static constexpr int kMmaPerWg = kPingPong ? kBlockM / 64 : kBlockM / 128;  // m64 blocks per warpgroup
  static constexpr int kAccPerMma = kBlockN / 2;    // FP32 registers of one m64 x kBlockN fragment
  static constexpr int kConsumerWarpsPerTile = kPingPong ? 4 : 8;
  // Producer warps besides the TMA thread that fill part of each stage (the MXFP8 scale warps);
  // the BF16 and FP8-blockwise mainloops have none.
  static constexpr int kScaleWarps = 0;
  // Arrivals of those warps on each stage's full barrier (next to the TMA thread's): 1 when they
  // take the stages in turn (MXFP8), kScaleWarps when they share every stage (NVFP4).
  static constexpr int kFillArrivals = 0;
  // Whether the TMA thread arrives on each stage's full barrier (next to those warps): yes, but in
  // the MXFP8 dequantizing mainloop, whose TMA thread fills another ring (its warps write the stages).
  static constexpr bool kTmaArrivesOnFull = true;
  // Registers of those warps (setmaxnreg; the consumers get the rest of the launch allocation).
  static constexpr int kStageWarpRegs = 56;
  // Consumers that need 240 registers: the producer warpgroup keeps the minimum, 24 (kernel.cuh).
  static constexpr bool kWideConsumers = false;
  // Whether each stage also carries the weight's block scales, so that the consumers have registers
  // left to load the epilogue's factors before the k loop (the NVFP4 16-token decode tile, G131 / G133;
  // epilogue_swap_ab.cuh kEarlyLoads).
  static constexpr bool kScalesInStage = false;

  static_assert(kBlockM == 128 || (kBlockM == 256 && kKind == GemmKind::kFpropSwapAB),
                "BM is 128 (two m64 warpgroups), or 256 for swap-AB decode");
  static_assert(!kPingPong || (kKind != GemmKind::kFpropSwapAB && kMmaPerWg * kAccPerMma <= 128),
                "ping-pong: one warpgroup holds the whole tile, at most 128 accumulator registers");
  static_assert(kBlockN % 64 == 0 || (kKind == GemmKind::kFpropSwapAB && kBlockN % 16 == 0), "BN granularity");
  static_assert(kBlockN <= 256, "wgmma N and TMA box rows are at most 256");
  static_assert(!kSplit || kKind == GemmKind::kFprop || kKind == GemmKind::kFpropSwapAB, "split is FPROP only");
  static_assert(kClusterM == 1 || (kClusterM == 2 && ((kKind == GemmKind::kWgrad && !kPingPong) ||
                                                       kKind == GemmKind::kFprop)),
                "clusters: pairs of cooperative WGRAD CTAs, or of FPROP CTAs");
  static_assert(kKind != GemmKind::kWgrad || (kBlockN / 64) % kClusterM == 0,
                "each CTA of a WGRAD cluster multicasts whole B boxes");
  static_assert(Operands::kTransposable || (!kAMnMajor && !kBMnMajor),
                "this operand type's wgmma takes K-major operands only (FPROP, swap-AB)");

  // ---- shared memory ----------------------------------------------------------------------------
  static constexpr uint32_t kABytes = kBlockM * kBlockK * kElemBytes;
  static constexpr uint32_t kBBytes = kBlockN * kBlockK * kElemBytes;
  static constexpr uint32_t kBoxBytes = 64 * kBlockK * 2;  // one MN-major box: 64 MN x 64 K BF16 = 8 KiB
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static_assert(kABytes % 1024 == 0 && kBBytes % 1024 == 0, "stage buffers keep 1024-byte alignment");

  // Bytes of all stages (A[0..S), then B[0..S)), starting at a 1024-aligned base.
  static constexpr int smem_bytes() { return kStages * static_cast<int>(kStageBytes); }

  // ---- TMA boxes the host must encode (inner extent, outer extent), all 128B-swizzled ----------
  //   kFprop:       A = rows [m_capacity, K]       box {64, BM};  B = W [E*N, K]   box {64, BN or BN/2}
  //   kDgrad:       A = rows [m_capacity, N]       box {64, BM};  B = W [E*N, K]   box {64, 64}
  //   kWgrad:       A = rows [m_capacity, N]       box {64, 64};  B = rows [m_cap, K] box {64, 64}
  //   kFpropSwapAB: A = W [E*N, K]   box {64, BM or BM/2};        B = rows [m_capacity, K] box {64, BN}
  static constexpr int kBoxAOuter =
      kAMnMajor ? 64 : (kKind == GemmKind::kFpropSwapAB && kSplit ? kBlockM / 2 : kBlockM);
  // FPROP: split (gate | up halves) or clustered (each CTA loads one half for both) -> half boxes.
  static constexpr int kBoxBOuter =
      kBMnMajor ? 64 : (kKind == GemmKind::kFprop && (kSplit || kClusterM > 1) ? kBlockN / 2 : kBlockN);
  static_assert(kBoxAOuter <= 256 && kBoxBOuter <= 256, "TMA box extent is at most 256");

  DMOE_DEVICE static uint32_t smem_a(uint32_t base, int stage) { return base + stage * kABytes; }
  DMOE_DEVICE static uint32_t smem_b(uint32_t base, int stage) { return base + kStages * kABytes + stage * kBBytes; }

  DMOE_DEVICE static constexpr int tile_row(int wg, int b) {
    return kPingPong ? 64 * b : b * (kBlockM / 2) + 64 * wg;
  }

  // Swap-AB: the weight row (inside the expert's [N, K]) of tile row `tile_row` of M tile m_block.
  // SwiGLU split: the first half of the tile is gate rows [0, F), the second the matching up rows
  // [F, 2F); otherwise rows past the weight read the last one (never stored).
  DMOE_DEVICE static int32_t swap_ab_weight_row(const MainloopParams& p, int32_t m_block, int tile_row) {
    if constexpr (kSplit) {
      return (tile_row < kBlockM / 2 ? 0 : p.split_offset) + m_block * (kBlockM / 2) + tile_row % (kBlockM / 2);
    } else {
      return min(m_block * kBlockM + tile_row, p.weight_rows - 1);
    }
  }

  // m64 blocks of warpgroup `wg` that hold rows of the expert (kM grouping: the last M tile of an
  // expert may end early); every block for the other groupings.
  DMOE_DEVICE static int active_blocks(const WorkTile& t, int wg) {
    if constexpr (kGrouping != Grouping::kM) return kMmaPerWg;
    const int rows_left = t.num_rows - t.m_block * kBlockM;
    int n = 0;
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) n += rows_left > tile_row(wg, b) ? 1 : 0;
    return n;
  }

#if defined(__CUDACC__)

  // Barriers of the mainloop's own (none here), initialized by one thread before the kernel's
  // first block-wide barrier, next to the pipeline's.
  DMOE_DEVICE static void init_shared(uint32_t /*smem*/) {}

  // Every mma_tile starts here. Zero the accumulators explicitly (rather than relying on scale-d = 0
  // for the first slice): leaving them undefined lets the compiler carry the previous tile's
  // registers through copies that serialize the wgmma pipeline (ptxas C7515) and spill. It also
  // gives WGRAD of an empty expert (num_k_blocks == 0) its zero result.
  DMOE_DEVICE static void zero_acc(float (&acc)[kMmaPerWg][kAccPerMma]) {
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
#pragma unroll
      for (int i = 0; i < kAccPerMma; ++i) acc[b][i] = 0.0f;
  }

  // ---- producer: one thread issues every TMA copy of a tile -------------------------------------
  // Block `block` of kRows rows of W[e] (first row w_row0 of the [E*N, K] view) at K offset k0, kBytes
  // into dst; with the SwiGLU split, kRows / 2 gate rows, then the matching up rows (split_offset
  // further down W) in dst's second half.
  template <int kRows, uint32_t kBytes>
  DMOE_DEVICE static void load_weight_block(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t k0,
                                            int32_t w_row0, int32_t block, const MainloopParams& p) {
    if constexpr (kSplit) {
      const int32_t n0 = block * (kRows / 2);
      ptx::tma_load_2d(dst, map, bar, k0, w_row0 + n0);
      ptx::tma_load_2d(dst + kBytes / 2, map, bar, k0, w_row0 + p.split_offset + n0);
    } else {
      ptx::tma_load_2d(dst, map, bar, k0, w_row0 + block * kRows);
    }
  }

  DMOE_DEVICE static void load_tile(const MainloopParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                    int32_t num_k_blocks, const Pipeline& pipe, PipelineState<kStages>& st,
                                    uint32_t smem) {
    const int32_t w_row0 = t.expert * p.weight_rows;  // first row of W[e] in the [E*N, K] view
    const CUtensorMap* map_a = ops.map[kMapA];
    const CUtensorMap* map_b = ops.map[kMapB];
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      pipe.producer_acquire(st);
      const uint32_t bar = pipe.producer_expect(st, kStageBytes);
      const uint32_t a = smem_a(smem, st.stage);
      const uint32_t b = smem_b(smem, st.stage);
      const int32_t k0 = kb * kBlockK;
      if constexpr (kKind == GemmKind::kFprop) {
        ptx::tma_load_2d(a, map_a, bar, k0, t.row_begin + t.m_block * kBlockM);
        if constexpr (kClusterM > 1) {
          // This CTA's half of the weight block, for both CTAs of the cluster (same offset there).
          const uint32_t r = ptx::cluster_ctarank();
          const int32_t w_row = kSplit ? w_row0 + (r == 0 ? 0 : p.split_offset) + t.n_block * (kBlockN / 2)
                                       : w_row0 + t.n_block * kBlockN + static_cast<int32_t>(r) * (kBlockN / 2);
          ptx::tma_load_2d_multicast(b + r * (kBBytes / 2), map_b, bar, k0, w_row, 0x3);
        } else {
          load_weight_block<kBlockN, kBBytes>(b, map_b, bar, k0, w_row0, t.n_block, p);
        }
      } else if constexpr (kKind == GemmKind::kDgrad) {
        // Contraction over W's rows: B box j holds W[e][k0 : k0 + 64, n0 + 64 j : n0 + 64 j + 64].
        ptx::tma_load_2d(a, map_a, bar, k0, t.row_begin + t.m_block * kBlockM);
#pragma unroll
        for (int j = 0; j < kBlockN / 64; ++j)
          ptx::tma_load_2d(b + j * kBoxBytes, map_b, bar, t.n_block * kBlockN + 64 * j, w_row0 + k0);
      } else if constexpr (kKind == GemmKind::kWgrad && !kAMnMajor) {
        // Transposed copies (E4M3): A = grad_out^T [N, tokens], B = x^T [K, tokens]; box rows are
        // features, the contraction coordinate is the token.
        const int32_t r0 = t.row_begin + k0;
        ptx::tma_load_2d(a, map_a, bar, r0, t.m_block * kBlockM);
        ptx::tma_load_2d(b, map_b, bar, r0, t.n_block * kBlockN);
      } else if constexpr (kKind == GemmKind::kWgrad) {
        // Contraction over the expert's rows; rows past its end are zeroed by the consumers.
        const int32_t r0 = t.row_begin + k0;
#pragma unroll
        for (int j = 0; j < kBlockM / 64; ++j)
          ptx::tma_load_2d(a + j * kBoxBytes, map_a, bar, t.m_block * kBlockM + 64 * j, r0);
        if constexpr (kClusterM == 1) {
#pragma unroll
          for (int j = 0; j < kBlockN / 64; ++j)
            ptx::tma_load_2d(b + j * kBoxBytes, map_b, bar, t.n_block * kBlockN + 64 * j, r0);
        } else {
          // This CTA's share of B, for every CTA of the cluster (same offset, same stage there).
          constexpr int kBoxesPerCta = kBlockN / 64 / kClusterM;
          constexpr uint16_t kAllCtas = static_cast<uint16_t>((1u << kClusterM) - 1u);
          const int first = static_cast<int>(ptx::cluster_ctarank()) * kBoxesPerCta;
#pragma unroll
          for (int i = 0; i < kBoxesPerCta; ++i) {
            const int j = first + i;
            ptx::tma_load_2d_multicast(b + j * kBoxBytes, map_b, bar, t.n_block * kBlockN + 64 * j, r0, kAllCtas);
          }
        }
      } else {  // kFpropSwapAB
        load_weight_block<kBlockM, kABytes>(a, map_a, bar, k0, w_row0, t.m_block, p);
        ptx::tma_load_2d(b, map_b, bar, k0, t.row_begin + t.n_block * kBlockN);
      }
      st.advance();
    }
  }

  // ---- consumers: one warpgroup's share of a tile -------------------------------------------------
  using Wgmma = typename Operands::template Mma<kBlockN, kAMnMajor ? 1 : 0, kBMnMajor ? 1 : 0>;

  DMOE_DEVICE static uint64_t desc_a(uint32_t smem, int stage, int wg, int b) {
    const uint32_t a = smem_a(smem, stage);
    if constexpr (kAMnMajor) return ptx::make_mnmajor_desc(a + (tile_row(wg, b) / 64) * kBoxBytes, kBoxBytes);
    return ptx::make_kmajor_desc(a + tile_row(wg, b) * 128);
  }

  DMOE_DEVICE static uint64_t desc_b(uint32_t smem, int stage) {
    const uint32_t b = smem_b(smem, stage);
    if constexpr (kBMnMajor) return ptx::make_mnmajor_desc(b, kBoxBytes);
    return ptx::make_kmajor_desc(b);
  }

  // Start-address step of one instruction's K slice (k16 for BF16): 32 bytes along a K-major row,
  // 16 rows (2 KiB) MN-major.
  static constexpr int kMmaK = Operands::kK;
  static constexpr uint32_t kStepA = kAMnMajor ? kMmaK * 128 : kMmaK * kElemBytes;
  static constexpr uint32_t kStepB = kBMnMajor ? kMmaK * 128 : kMmaK * kElemBytes;

  // WGRAD: zero K-rows [valid, 64) of every box of this stage so the rows after the expert's end
  // contribute nothing (both operands: rows beyond the expert may hold anything, even NaN).
  // Rows are whole 128-byte lines in an MN-major box, so the swizzle does not matter here. Done by
  // the threads that consume the stage (both warpgroups, or one in ping-pong), `bar` is theirs.
  DMOE_DEVICE static void zero_tail_rows(uint32_t smem, int stage, int valid, int tid, int threads, uint32_t bar) {
    constexpr int kBoxesA = kBlockM / 64;
    constexpr int kBoxes = kBoxesA + kBlockN / 64;
    const int vec_per_box = (kBlockK - valid) * 8;  // 16-byte vectors
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int i = tid; i < kBoxes * vec_per_box; i += threads) {
      const int box = i / vec_per_box;
      const int v = i - box * vec_per_box;
      const uint32_t base = box < kBoxesA ? smem_a(smem, stage) + box * kBoxBytes
                                          : smem_b(smem, stage) + (box - kBoxesA) * kBoxBytes;
      ptx::st_shared_v4(base + valid * 128 + v * 16, zero);
    }
    ptx::fence_proxy_async_shared();  // generic writes before the wgmma (async proxy) reads
    ptx::named_barrier_sync(bar, threads);
  }

  // Where the consumers of one tile meet: both warpgroups (cooperative) or the owning one.
  DMOE_DEVICE static uint32_t tile_barrier(int wg) { return kPingPong ? kBarrierEpilogueWg0 + wg : kBarrierConsumers; }
  static constexpr int kTileThreads = kPingPong ? 128 : 256;

  // What the k loop calls after issuing each k block's wgmmas, before waiting for them (the deferred
  // epilogue's chunk stores, epilogue_store.cuh); nothing by default.
  struct NoHook {
    DMOE_DEVICE void operator()(int32_t /*kb*/) const {}
  };

  // What the kernels call between mma_tile and the epilogue, both warpgroups (`staging1`: warpgroup
  // 1's staging buffer): nothing here; the MXFP8 mainloop joins its narrow tiles' slices.
  template <class Writer>
  DMOE_DEVICE static void join_tile(const MainloopParams& /*p*/, const WorkTile& /*t*/, int /*wg*/,
                                    float (&/*acc*/)[kMmaPerWg][kAccPerMma], const Writer& /*writer*/,
                                    uint32_t /*staging1*/) {}

  // Runs the contraction of one tile for warpgroup `wg` into acc. `rows_in_last` is the number of
  // valid rows of the last k block (WGRAD only; 64 when it is full). Blocks past the expert's end
  // get no wgmma (their accumulators stay zero and the epilogue stores none of their rows), but the
  // warpgroup still waits for and releases every stage so the ring keeps its phase.
  template <class Hook = NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& /*p*/, const WorkTile& t, int32_t num_k_blocks, int rows_in_last,
                                   const Pipeline& pipe, PipelineState<kStages>& st, uint32_t smem, int wg,
                                   float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
    zero_acc(acc);
    if (num_k_blocks == 0) return;
    const int active = active_blocks(t, wg);
    if (active == kMmaPerWg) {
      mma_blocks<kMmaPerWg>(num_k_blocks, rows_in_last, pipe, st, smem, wg, acc, hook);
    } else if constexpr (kMmaPerWg > 1) {
      if (active == 1) mma_blocks<1>(num_k_blocks, rows_in_last, pipe, st, smem, wg, acc, hook);
      else mma_blocks<0>(num_k_blocks, rows_in_last, pipe, st, smem, wg, acc, hook);
    } else {
      mma_blocks<0>(num_k_blocks, rows_in_last, pipe, st, smem, wg, acc, hook);
    }
  }

 private:
  // The k loop with the first kBlocks m64 blocks active (0: only keep the ring moving).
  template <int kBlocks, class Hook>
  DMOE_DEVICE static void mma_blocks(int32_t num_k_blocks, int rows_in_last, const Pipeline& pipe,
                                     PipelineState<kStages>& st, uint32_t smem, int wg,
                                     float (&acc)[kMmaPerWg][kAccPerMma], Hook& hook) {
    // Index among the tile's consumer threads (threads 128..383 cooperative: a permutation of 0..255).
    const int tid = static_cast<int>(threadIdx.x % kTileThreads);
    int32_t prev_stage = 0;
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      pipe.consumer_wait(st);
      if constexpr (kKind == GemmKind::kWgrad) {
        if (kb == num_k_blocks - 1 && rows_in_last < kBlockK)
          zero_tail_rows(smem, st.stage, rows_in_last, tid, kTileThreads, tile_barrier(wg));
      }
      if constexpr (kBlocks > 0) {
        uint64_t da[kBlocks];
#pragma unroll
        for (int b = 0; b < kBlocks; ++b) da[b] = desc_a(smem, st.stage, wg, b);
        const uint64_t db = desc_b(smem, st.stage);
        ptx::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kBlockK / kMmaK; ++kk)
#pragma unroll
          for (int b = 0; b < kBlocks; ++b)
            Wgmma::mma(acc[b], ptx::desc_advance(da[b], kk * kStepA), ptx::desc_advance(db, kk * kStepB), 1u);
        ptx::wgmma_commit();
        // Keep this block's wgmmas in flight; the previous block's are done after this wait.
        ptx::wgmma_wait<1>();
      }
      if (kb > 0) pipe.consumer_release(prev_stage);
      hook(kb);  // runs while this block's wgmmas execute, after the previous stage is released
      prev_stage = st.stage;
      st.advance();
    }
    if constexpr (kBlocks > 0) ptx::wgmma_wait<0>();
    pipe.consumer_release(prev_stage);
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) ptx::wgmma_fence_operands(acc[b]);
  }
#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
