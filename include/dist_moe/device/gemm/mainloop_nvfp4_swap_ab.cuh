// SM90 swap-AB mainloop for NVFP4 inference: packed E2M1 weights [E, N, K/2] (each 32-bit word in the
// prepared order of numeric/nvfp4_weight_order.cuh) with E4M3 scales per
// 16 on the wgmma M side (256 rows per tile, or 128 gate + 128 up rows with the SwiGLU split), the
// tokens' packed NVFP4 rows on N (16, 32, 64 or 128 per tile). Hopper has no FP4 MMA: both operands are
// made exact FP16 in the kernel and multiplied by FP16 wgmma with A from registers
// (nvfp4_operands.cuh has the numerics and the K order). Decode streams the weights: 4.5 bits
// per weight instead of BF16's 16.
//
// Roles (kernel.cuh):
//   TMA thread       per stage, the weight rows (256 rows x 128 packed bytes = 256 K values, 32 KiB)
//                    and the tile's token rows' packed codes (128 bytes each) into the last box
//                    (expanded rows: the four token boxes instead; the 16-token tile also the
//                    rows' 16 scale bytes of the stage, unswizzled, after the boxes)
//   producer warps   warps 1-3 (the MXFP8 scale warps' slot) fill every stage's token boxes: the
//   1-3              (token, piece) items of the existing tokens, converted from the staged codes
//                    with the scales read from the gathered rows into 4 boxes [tokens][64 FP16] in
//                    the 128B swizzle; fenced for the async proxy, each warp arrives (four arrivals
//                    per slot: the TMA thread's and the three warps'). Expanded token rows
//                    (kExpanded): the TMA thread loads the four boxes instead and the warps idle.
//   consumers        per 64-deep piece of a stage: one ld.shared.v2 per weight row (8 bytes = one
//                    scale block), FP16 A fragments in registers, four m64nNk16 RS wgmmas per m64
//                    block; the A registers are double-buffered by piece (16 to 64 tokens), so a
//                    piece's conversion runs while the previous piece's wgmmas execute
// The weights' E4M3 scales come straight from global memory (8 bytes per row and stage, one stage
// ahead), or in the 16-token expanded tile with the stage (TMA, kScalesInStage); the epilogue applies
// the FP32 token and expert scales (params.cuh EpilogueParams).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/nvfp4_operands.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"

namespace dist_moe::gemm {

// kExpanded: the tokens arrive as expanded FP16 rows (kNvfp4ExpandedRows, quant::nvfp4_expand_rows),
// which TMA loads into the token boxes as they are; no producer warp converts tokens.
// kUniformStage: the token boxes' descriptors from a shared memory base and stage that ptxas knows
// are warp-uniform (ptx::warp_uniform): built in uniform registers instead of per lane with two R2UR
// per wgmma, 689 -> 622 loop instructions per stage (G128). The Mega kernel's copies of the loop opt
// out: there they ran 2-4% slower on an H100 (s53, G128, G129), while the staged GEMMs gained 1-4%.
// In the 16-token expanded kernels (the layer's decode tile, staged and Mega) the TMA thread also
// brings each stage's weight scales into the stage (kScalesInStage: G131's copy, by TMA since G133),
// so no tile starts on a cold load of its first stage's scales.
template <class Config, bool kExpanded = false, bool kUniformStage = true>
struct Sm90Nvfp4SwapABMainloop : Sm90Mainloop<Config> {
  using Base = Sm90Mainloop<Config>;
  using typename Base::Pipeline;
  using Base::kBlockM;
  using Base::kBlockN;
  using Base::kKind;
  using Base::kMmaPerWg;
  using Base::kAccPerMma;
  using Base::kStages;
  using Base::kSplit;

  static constexpr bool kNvfp4 = true;
  static constexpr bool kExpandedTokens = kExpanded;
  static constexpr int kBlockK = kNvfp4StageK;  // K values per stage (Base's is 64 FP16)
  static constexpr int kPieces = kNvfp4Pieces;
  static constexpr int kStepsPerPiece = 4;        // k16 steps of a 64-deep piece
  static constexpr uint32_t kABytes = kBlockM * kNvfp4StageBytes;
  static constexpr uint32_t kBoxBytes = kBlockN * 128;  // one token box: kBlockN rows x 64 FP16
  static constexpr uint32_t kBBytes = kPieces * kBoxBytes;
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static constexpr int kBoxAOuter = kSplit ? kBlockM / 2 : kBlockM;  // weight rows per TMA box
  // The producer warps that fill the token boxes from packed rows: all three share every stage, and
  // each arrives. None for expanded rows.
  static constexpr int kProducerWarps = 3;
  static constexpr int kScaleWarps = kExpanded ? 0 : kProducerWarps;
  static constexpr int kFillArrivals = kScaleWarps;
  // Their registers: each item's scale bytes, the last box's staged units, one item's FP16 values.
  // 72 leaves the consumers 216 (at 104 the 32-token consumers spilled, session 24); the 128-token
  // tile's producers hold more items (88, consumers 208).
  static constexpr int kStageWarpRegs = kBlockN >= 128 ? 88 : 72;
  // Weight scales in the stage: 16 bytes (one stage's 16 E4M3 blocks) per weight row, by TMA from the
  // scales [E*N, K/16] (map kMapScales, unswizzled 16-byte boxes) on the stage's full barrier. Only
  // the 16-token expanded tile: the 128-token one has no room for them next to its two stages.
  static constexpr bool kScalesInStage = kExpanded && kBlockN == 16;
  static constexpr uint32_t kScaleBytes = kScalesInStage ? kBlockM * kNvfp4StageBlocks : 0;
  using Mma = ptx::WgmmaF16Rs<kBlockN>;

  static_assert(kKind == GemmKind::kFpropSwapAB && kBlockM == 256 && kMmaPerWg == 2,
                "256 weight rows (two m64 blocks per warpgroup) per tile");
  static_assert(kBlockN == 16 || kBlockN == 32 || kBlockN == 64 || kBlockN == 128, "16 to 128 tokens per tile");
  // A register sets: two (a piece converts while the previous piece's wgmmas run), or one at 128
  // tokens, whose 128 accumulators leave no room for the second (the other warpgroup's wgmmas then
  // keep the tensor cores busy while this one converts). With expanded tokens the consumers' 232
  // registers hold one set without spilling; two spill ~350 bytes (ptxas, session 24).
  static constexpr int kSets = kBlockN >= 128 ? 1 : 2;
  static_assert(kABytes % 1024 == 0 && kBoxBytes % 1024 == 0, "stage buffers keep 1024-byte alignment");

  static constexpr uint32_t kTokenBytes = kBlockN * kNvfp4StageBytes;  // the TMA'd packed codes of a stage
  static_assert(kTokenBytes == kBoxBytes, "a stage's packed token codes fill exactly one box");

  // The stages (weights, then token boxes, then with kScalesInStage the weight scales [256 rows][16
  // bytes]), then (packed rows) one mbarrier per stage: staged[s], the tokens' packed codes landed.
  static constexpr int smem_bytes() {
    return kStages * static_cast<int>(kStageBytes + kScaleBytes) + (kExpanded ? 0 : 128);
  }
  DMOE_DEVICE static uint32_t smem_a(uint32_t base, int stage) { return base + stage * kABytes; }
  DMOE_DEVICE static uint32_t smem_b(uint32_t base, int stage) { return base + kStages * kABytes + stage * kBBytes; }
  DMOE_DEVICE static uint32_t smem_scales(uint32_t base, int stage) {
    return base + kStages * kStageBytes + stage * kScaleBytes;
  }
  DMOE_DEVICE static uint32_t staged_bar(uint32_t base, int stage) { return base + kStages * kStageBytes + 8 * stage; }

#if defined(__CUDACC__)

  DMOE_DEVICE static void init_shared(uint32_t smem) {
    if constexpr (!kExpanded) {
#pragma unroll
      for (int s = 0; s < kStages; ++s) ptx::mbarrier_init(staged_bar(smem, s), 1);
    }
  }

  // ---- the TMA thread: weight rows (and their scales), the tokens' packed codes or FP16 boxes -----
  DMOE_DEVICE static void load_tile(const MainloopParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                    int32_t num_k_blocks, const Pipeline& pipe, PipelineState<kStages>& st,
                                    uint32_t smem) {
    const int32_t w_row0 = t.expert * p.weight_rows;
    const CUtensorMap* map_a = ops.map[kMapA];
    const CUtensorMap* map_b = ops.map[kMapB];
    const CUtensorMap* map_scales = ops.map[kMapScales];
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      pipe.producer_acquire(st);
      const uint32_t bar = pipe.producer_expect(st, kExpanded ? kStageBytes + kScaleBytes : kABytes);
      const uint32_t a = smem_a(smem, st.stage);
      const int32_t k0 = kb * kNvfp4StageBytes;  // packed bytes
      Base::template load_weight_block<kBlockM, kABytes>(a, map_a, bar, k0, w_row0, t.m_block, p);
      if constexpr (kScalesInStage)  // the same rows' 16 scale bytes of this stage, row-major
        Base::template load_weight_block<kBlockM, kScaleBytes>(smem_scales(smem, st.stage), map_scales, bar,
                                                               kb * kNvfp4StageBlocks, w_row0, t.m_block, p);
      const int32_t token0 = t.row_begin + t.n_block * kBlockN;
      if constexpr (kExpanded) {  // the four token boxes, 64 FP16 of K each, on the same barrier
#pragma unroll
        for (int i = 0; i < kPieces; ++i)
          ptx::tma_load_2d(smem_b(smem, st.stage) + i * kBoxBytes, map_b, bar, kb * kNvfp4StageK + 64 * i, token0);
      } else {  // the packed codes for the producer warps, into the last box (which they overwrite)
        const uint32_t staged = staged_bar(smem, st.stage);
        ptx::mbarrier_arrive_expect_tx(staged, kTokenBytes);
        ptx::tma_load_2d(smem_b(smem, st.stage) + (kPieces - 1) * kBoxBytes, map_b, staged, k0, token0);
      }
      st.advance();
    }
  }

  // ---- producer warps 1-3: the tokens' FP16 boxes ---------------------------------------------------
  // The TMA thread brings the stage's packed codes of the tile's kBlockN token rows (128 bytes per
  // row, 128B-swizzled) into the last box and completes staged[stage]. All three warps fill every
  // stage: its work is (token, piece) items of the tokens that exist, consecutive lanes on
  // consecutive tokens of one piece (rows 128 bytes apart, spread over the banks by the swizzle).
  // An item reads the row's two staged units of its piece, converts them with the scales (read
  // from the gathered rows in global memory before the waits) and writes the row of box i. The
  // last box is the staging area: its items read first and store after a barrier of the three
  // warps, once every item of pieces 0-2 has read the units they overwrite.
  struct TokenBoxFiller {
    static constexpr int kLanes = 32 * kProducerWarps;
    static constexpr int kFrontItems = (3 * kBlockN + kLanes - 1) / kLanes;  // pieces 0-2, per lane
    static constexpr int kLastItems = (kBlockN + kLanes - 1) / kLanes;       // piece 3, per lane
    const MainloopParams& p;
    uint32_t smem;
    int lane_index;  // among the kLanes
    PipelineState<kStages> st;

    DMOE_DEVICE TokenBoxFiller(const MainloopParams& params, uint32_t smem_base, int warp_index)
        : p(params), smem(smem_base), lane_index(32 * warp_index + static_cast<int>(threadIdx.x % 32)) {}

    DMOE_DEVICE void tile(const WorkTile& t, int32_t num_k_blocks, const Pipeline& pipe) {
      const int32_t first = t.n_block * kBlockN;
      const int valid = max(0, min(kBlockN, t.num_rows - first));  // tokens of the tile that exist
      const int64_t scales_at = numeric::nvfp4_packed_row_scales_offset(static_cast<int64_t>(num_k_blocks) * kNvfp4StageK);
      const uint8_t* rows = p.packed_rows + (static_cast<int64_t>(t.row_begin) + first) * p.packed_row_bytes;
      for (int32_t kb = 0; kb < num_k_blocks; ++kb, st.advance()) {
        const uint8_t* sc = rows + scales_at + kb * kNvfp4StageBlocks;
        uint32_t front_sc[kFrontItems][2], last_sc[kLastItems][2];
#pragma unroll
        for (int r = 0; r < kFrontItems; ++r) {
          const int x = lane_index + kLanes * r;
          if (x < 3 * valid) load_scales(sc, x % valid, x / valid, front_sc[r]);
        }
#pragma unroll
        for (int r = 0; r < kLastItems; ++r) {
          const int n = lane_index + kLanes * r;
          if (n < valid) load_scales(sc, n, kPieces - 1, last_sc[r]);
        }
        // Each warp walks every stage in order, so staged[] is at most one phase behind the one
        // waited for once the slot's previous turn is consumed (a parity wait cannot tell two apart).
        pipe.producer_acquire(st);
        mbarrier_wait(staged_bar(smem, st.stage), st.phase);
        const uint32_t b = smem_b(smem, st.stage);
        uint4 last_lo[kLastItems], last_hi[kLastItems];
#pragma unroll
        for (int r = 0; r < kLastItems; ++r) {
          const int n = lane_index + kLanes * r;
          if (n < valid) read_units(b, n, kPieces - 1, last_lo[r], last_hi[r]);
        }
#pragma unroll
        for (int r = 0; r < kFrontItems; ++r) {
          const int x = lane_index + kLanes * r;
          if (x < 3 * valid) {
            const int n = x % valid, i = x / valid;
            uint4 lo, hi;
            read_units(b, n, i, lo, hi);
            store(b, n, i, lo, hi, front_sc[r]);
          }
        }
        ptx::named_barrier_sync(kBarrierGather, kLanes);  // the staged units are read
#pragma unroll
        for (int r = 0; r < kLastItems; ++r) {
          const int n = lane_index + kLanes * r;
          if (n < valid) store(b, n, kPieces - 1, last_lo[r], last_hi[r], last_sc[r]);
        }
        // Tokens past the expert get no values: their columns are never stored (the epilogue), and
        // a column of the product depends on its own token only.
        ptx::fence_proxy_async_shared();  // the generic stores, before the wgmmas (async proxy) read them
        __syncwarp();
        if (threadIdx.x % 32 == 0) pipe.producer_arrive(st);
      }
    }

   private:
    // The scale bytes of token n's piece i: blocks 2i, 2i + 1 (q = 0, 2) and 8 + 2i, 9 + 2i (q = 1, 3).
    DMOE_DEVICE void load_scales(const uint8_t* sc, int n, int i, uint32_t (&out)[2]) const {
      const uint8_t* row = sc + n * p.packed_row_bytes;
      out[0] = __ldg(reinterpret_cast<const uint16_t*>(row + 2 * i));
      out[1] = __ldg(reinterpret_cast<const uint16_t*>(row + 8 + 2 * i));
    }

    // Staged row n (the last box), units i (blocks 2i, 2i + 1) and 4 + i (blocks 8 + 2i, 9 + 2i);
    // 128B swizzle: unit u of row n at u ^ (n % 8).
    DMOE_DEVICE static void read_units(uint32_t b, int n, int i, uint4& lo, uint4& hi) {
      const uint32_t staged = b + (kPieces - 1) * kBoxBytes + n * 128, sw = static_cast<uint32_t>(n % 8);
      lo = ptx::ld_shared_v4(staged + 16u * (static_cast<uint32_t>(i) ^ sw));
      hi = ptx::ld_shared_v4(staged + 16u * (static_cast<uint32_t>(4 + i) ^ sw));
    }

    // Box i, token row n: unit r = the FP16 pairs P_r of blocks q = 0..3 (nvfp4_operands.cuh).
    DMOE_DEVICE static void store(uint32_t b, int n, int i, const uint4& lo, const uint4& hi, const uint32_t (&s)[2]) {
      const uint32_t t0 = nvfp4_scale_x2(s[0] & 0xFFu), t2 = nvfp4_scale_x2(s[0] >> 8);
      const uint32_t t1 = nvfp4_scale_x2(s[1] & 0xFFu), t3 = nvfp4_scale_x2(s[1] >> 8);
      const uint32_t box = b + i * kBoxBytes + n * 128, sw = static_cast<uint32_t>(n % 8);
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // words 0 and 1 of each block: P_0..3, then P_4..7
        uint32_t p0[4], p1[4], p2[4], p3[4];
        nvfp4_word_x2(half == 0 ? lo.x : lo.y, t0, p0);
        nvfp4_word_x2(half == 0 ? hi.x : hi.y, t1, p1);
        nvfp4_word_x2(half == 0 ? lo.z : lo.w, t2, p2);
        nvfp4_word_x2(half == 0 ? hi.z : hi.w, t3, p3);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint32_t r = static_cast<uint32_t>(4 * half + j);
          ptx::st_shared_v4(box + 16u * (r ^ sw), make_uint4(p0[j], p1[j], p2[j], p3[j]));
        }
      }
    }
  };

  using ScaleProducer = TokenBoxFiller;  // (kernel.cuh's name for the producer warps' role)

  // ---- consumers ------------------------------------------------------------------------------------
  // The interface of Sm90Mainloop::mma_tile; acc holds the products times 2^-21 (kNvfp4AccScale).
  template <class Hook = typename Base::NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& p, const WorkTile& t, int32_t num_k_blocks,
                                   int /*rows_in_last*/, const Pipeline& pipe, PipelineState<kStages>& st,
                                   uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
    Base::zero_acc(acc);
    if (num_k_blocks == 0) return;

    // This thread's four weight rows: tile rows tile_row(wg, b) + 16 warp + g + 8 h. Every tile row
    // is g modulo 8, so g is the swizzle of all of them; the thread reads 8-byte half q >> 1 of the
    // 16-byte unit 4 (q & 1) + i of each.
    const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + g;
    const int32_t scale_ld = num_k_blocks * kNvfp4StageBlocks;  // K / 16
    const uint8_t* w_scales = static_cast<const uint8_t*>(p.b_scales);
    const uint8_t* scale_row[kMmaPerWg][2];
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tile_row = Base::tile_row(wg, b) + frag_row + 8 * h;
        const int32_t row = Base::swap_ab_weight_row(p, t.m_block, tile_row);
        scale_row[b][h] = w_scales + static_cast<int64_t>(t.expert * p.weight_rows + row) * scale_ld + 8 * (q & 1);
      }

    // The thread's scale bytes of pieces 2w and 2w + 1: bytes q >> 1 and 2 + (q >> 1) of word w.
    uint32_t scale_sel = nvfp4_weight_scale_pair_selector(q >> 1);
    if constexpr (kUniformStage) smem = ptx::warp_uniform(smem);  // (and the stage below)
    uint32_t set0[kMmaPerWg][kStepsPerPiece][4] = {}, set1[kMmaPerWg][kStepsPerPiece][4] = {};
    auto& odd = kSets > 1 ? set1 : set0;  // the set of pieces 1 and 3 (set1 unused with one set)
    uint2 sc_now[kMmaPerWg][2];
    if constexpr (kSets > 1 && !kScalesInStage) load_scales(scale_row, 0, sc_now);
    const int first_row = Base::tile_row(wg, 0) + frag_row;  // the thread's first tile row (the others: kRowOff)
    // kScalesInStage: this thread's row scales in the stage's copy, from first_row's (the others 8, 128
    // and 136 rows on: immediate offsets), half q & 1 of the row's 16 bytes.
    uint32_t stage_scale_off = static_cast<uint32_t>(first_row * 16 + 8 * (q & 1));
    // Piece i's blocks of first_row in a stage: unit 4 (q & 1) + i swizzled by g, half q >> 1.
    const uint32_t row_off = static_cast<uint32_t>(first_row * kNvfp4StageBytes + 8 * (q >> 1));
    uint32_t piece_off[kPieces];
#pragma unroll
    for (int i = 0; i < kPieces; ++i) piece_off[i] = row_off + 16u * static_cast<uint32_t>((4 * (q & 1) + i) ^ g);
    int32_t prev_stage = 0;
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      // Left to itself ptxas recomputes these from the thread index at every stage (~30 instructions
      // ahead of the stage's first shared load, G134); pinned, they stay in their registers.
#pragma unroll
      for (int i = 0; i < kPieces; ++i) ptx::keep_in_register(piece_off[i]);
      ptx::keep_in_register(scale_sel);
      ptx::keep_in_register(stage_scale_off);
      // The next stage's scales, one stage ahead (two sets: at 128 tokens they are loaded for this
      // stage here instead, their latency under the full-barrier wait: registers).
      uint2 sc_next[kSets > 1 && !kScalesInStage ? kMmaPerWg : 1][2];
      if constexpr (!kScalesInStage) {  // (kScalesInStage: read from the stage after its wait)
        if constexpr (kSets > 1) load_scales(scale_row, min(kb + 1, num_k_blocks - 1), sc_next);
        else load_scales(scale_row, kb, sc_now);
      }
      const int stage = kUniformStage ? ptx::warp_uniform(st.stage) : st.stage;
      pipe.consumer_wait(st);
      const uint32_t a = smem_a(smem, stage);
      const uint64_t boxes = ptx::make_kmajor_desc(smem_b(smem, stage));  // of the stage's first token box
      if constexpr (kScalesInStage) read_stage_scales(smem_scales(smem, stage) + stage_scale_off, sc_now);
      uint2 raw[kMmaPerWg][2];
      uint32_t t[kMmaPerWg][2];  // the rows' block scales of two pieces (piece<0>'s and piece<2>'s)
      load_piece<0>(a, piece_off, raw);
      piece<0>(a, boxes, piece_off, scale_sel, sc_now, t, set0, acc, raw);
      if (kSets == 1 && kb > 0) pipe.consumer_release(prev_stage);  // done by piece<0>'s wait
      piece<1>(a, boxes, piece_off, scale_sel, sc_now, t, odd, acc, raw);
      if (kSets == 2 && kb > 0) pipe.consumer_release(prev_stage);  // its last piece: piece<1>'s wait
      piece<2>(a, boxes, piece_off, scale_sel, sc_now, t, set0, acc, raw);
      piece<3>(a, boxes, piece_off, scale_sel, sc_now, t, odd, acc, raw);
      hook(kb);
      prev_stage = st.stage;
      st.advance();
      if constexpr (kSets > 1 && !kScalesInStage) {
#pragma unroll
        for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
          for (int h = 0; h < 2; ++h) sc_now[bb][h] = sc_next[bb][h];
      }
    }
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) ptx::wgmma_fence_operands(set0[b]);
    if constexpr (kSets > 1) {
#pragma unroll
      for (int b = 0; b < kMmaPerWg; ++b) ptx::wgmma_fence_operands(set1[b]);
    }
    pipe.consumer_release(prev_stage);
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) ptx::wgmma_fence_operands(acc[b]);
  }

 private:
  // This thread's 8 scale bytes of each of its rows for stage kb (blocks 8 (q & 1) .. + 7).
  DMOE_DEVICE static void load_scales(const uint8_t* const (&scale_row)[kMmaPerWg][2], int32_t kb,
                                      uint2 (&out)[kMmaPerWg][2]) {
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        out[b][h] = __ldg(reinterpret_cast<const uint2*>(scale_row[b][h] + kb * kNvfp4StageBlocks));
  }

  // The stage's scale copy (kScalesInStage), from this thread's first row's 8 bytes: rows + 8 h and
  // tile_row(wg, b) = b * 128 + 64 wg, 16 bytes per row.
  DMOE_DEVICE static void read_stage_scales(uint32_t first, uint2 (&out)[kMmaPerWg][2]) {
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        out[b][h] = ptx::ld_shared_v2(first + 16u * static_cast<uint32_t>(b * (kBlockM / 2) + 8 * h));
  }

  // Offset of row (b, h) of the thread's rows from its first (b = h = 0) in a stage.
  static constexpr uint32_t kRowOff(int b, int h) {
    return static_cast<uint32_t>((Base::tile_row(0, b) - Base::tile_row(0, 0) + 8 * h) * kNvfp4StageBytes);
  }

  // The rows' blocks of piece i: one ld.shared.v2 per row (16-byte unit 4 (q & 1) + i, half q >> 1).
  template <int kPiece>
  DMOE_DEVICE static void load_piece(uint32_t a, const uint32_t (&piece_off)[kPieces], uint2 (&raw)[kMmaPerWg][2]) {
    const uint32_t first = a + piece_off[kPiece];
#pragma unroll
    for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
      for (int h = 0; h < 2; ++h) raw[bb][h] = ptx::ld_shared_v2(first + kRowOff(bb, h));
  }

  // Piece i of the stage (its blocks in `raw`): read the next piece's blocks, wait until the set's
  // previous wgmmas (kSets pieces back) are done, convert into the set, issue its four k16 steps per
  // m64 block as one group; `raw` then holds the next piece's blocks.
  template <int kPiece>
  DMOE_DEVICE static void piece(uint32_t a, uint64_t boxes, const uint32_t (&piece_off)[kPieces],
                                uint32_t scale_sel, const uint2 (&sc)[kMmaPerWg][2], uint32_t (&t)[kMmaPerWg][2],
                                uint32_t (&set)[kMmaPerWg][kStepsPerPiece][4],
                                float (&acc)[kMmaPerWg][kAccPerMma], uint2 (&raw)[kMmaPerWg][2]) {
    // The next piece's blocks now (two sets; at 128 tokens each piece loads its own: registers).
    constexpr bool kPrefetch = kSets > 1 && kPiece + 1 < kPieces;
    uint2 next[kPrefetch ? kMmaPerWg : 1][2];
    if constexpr (kPrefetch) load_piece<kPiece + 1>(a, piece_off, next);
    if constexpr (kSets == 1 && kPiece > 0) load_piece<kPiece>(a, piece_off, raw);
    const uint2 (&w)[kMmaPerWg][2] = raw;
    // Block nvfp4_piece_block(q, i) = 8 (q & 1) + 2 i + (q >> 1): byte 2 i + (q >> 1) of the 8 loaded,
    // in word i / 2. Pieces 0 and 2 convert the scales of both pieces of their word (t's halves).
    constexpr int kHalf = kPiece % 2;
    if constexpr (kHalf == 0) {
#pragma unroll
      for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
        for (int h = 0; h < 2; ++h) t[bb][h] = nvfp4_weight_scale_x2_of(kPiece < 2 ? sc[bb][h].x : sc[bb][h].y, scale_sel);
    }
    ptx::wgmma_wait<kSets - 1>();
    // The set's registers stay allocated until here: its wgmmas (kSets pieces back) read them late.
#pragma unroll
    for (int bb = 0; bb < kMmaPerWg; ++bb) ptx::wgmma_fence_operands(set[bb]);
#pragma unroll
    for (int bb = 0; bb < kMmaPerWg; ++bb) {
      // P_{2s} is the {2q, 2q+1} pair, P_{2s+1} the {2q+8, 2q+9} pair; regs 0/2 row g, 1/3 row g+8.
      // Word 0 of the block holds P_0..3 (steps 0, 1), word 1 P_4..7 (steps 2, 3).
#pragma unroll
      for (int s = 0; s < kStepsPerPiece; ++s) {
        const int j0 = (2 * s) % 4, j1 = (2 * s + 1) % 4;
        const uint32_t w0 = s < 2 ? w[bb][0].x : w[bb][0].y, w1 = s < 2 ? w[bb][1].x : w[bb][1].y;
        set[bb][s][0] = nvfp4_weight_pair_x2<kHalf>(w0, j0, t[bb][0]);
        set[bb][s][1] = nvfp4_weight_pair_x2<kHalf>(w1, j0, t[bb][1]);
        set[bb][s][2] = nvfp4_weight_pair_x2<kHalf>(w0, j1, t[bb][0]);
        set[bb][s][3] = nvfp4_weight_pair_x2<kHalf>(w1, j1, t[bb][1]);
      }
    }
    const uint64_t box = ptx::desc_advance32(boxes, kPiece * kBoxBytes);
    ptx::wgmma_fence();  // the A registers (and the accumulators) written above
#pragma unroll
    for (int s = 0; s < kStepsPerPiece; ++s)
#pragma unroll
      for (int bb = 0; bb < kMmaPerWg; ++bb) Mma::mma(acc[bb], set[bb][s], ptx::desc_advance(box, 32u * s), 1u);
    ptx::wgmma_commit();
    if constexpr (kPrefetch) {
#pragma unroll
      for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
        for (int h = 0; h < 2; ++h) raw[bb][h] = next[bb][h];
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
