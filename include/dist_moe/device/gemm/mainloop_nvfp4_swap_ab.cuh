// SM90 swap-AB mainloop for NVFP4 inference: packed E2M1 weights [E, N, K/2] with E4M3 scales per
// 16 on the wgmma M side (256 rows per tile, or 128 gate + 128 up rows with the SwiGLU split), the
// tokens' packed NVFP4 rows on N (32 or 64 per tile). Hopper has no FP4 MMA: both operands are
// made exact FP16 in the kernel and multiplied by FP16 wgmma with A from registers
// (nvfp4_operands.cuh has the numerics and the K order). Decode streams the weights: 4.5 bits
// per weight instead of BF16's 16.
//
// Roles (kernel.cuh):
//   TMA thread       the weight rows of a stage: 256 rows x 128 packed bytes (256 K values), 32 KiB
//   producer warps   warp s % 3 of 1-3 fills stage s's token boxes: its lanes take the (token,
//   1-3 (the MXFP8  piece) pairs of the tile's existing tokens, read their packed codes and scales
//   scale warps'    from the gathered rows, write 4 boxes [tokens][64 FP16] in the 128B swizzle,
//   slot)           fence them for the async proxy, and the warp arrives (two arrivals per slot:
//                    the TMA thread's and its own)
//   consumers        per 64-deep piece of a stage: one ld.shared.v2 per weight row (8 bytes = one
//                    scale block), FP16 A fragments in registers, four m64nNk16 RS wgmmas per m64
//                    block; the A registers are double-buffered by piece, so a piece's conversion
//                    runs while the previous piece's wgmmas execute
// The weights' E4M3 scales come straight from global memory (8 bytes per row and stage, one stage
// ahead); the epilogue applies the FP32 token and expert scales (params.cuh EpilogueParams).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/gemm/nvfp4_operands.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"

namespace dist_moe::gemm {

template <class Config>
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
  static constexpr int kBlockK = kNvfp4StageK;  // K values per stage (Base's is 64 FP16)
  static constexpr int kPieces = kNvfp4Pieces;
  static constexpr int kStepsPerPiece = 4;        // k16 steps of a 64-deep piece
  static constexpr uint32_t kABytes = kBlockM * kNvfp4StageBytes;
  static constexpr uint32_t kBoxBytes = kBlockN * 128;  // one token box: kBlockN rows x 64 FP16
  static constexpr uint32_t kBBytes = kPieces * kBoxBytes;
  static constexpr uint32_t kStageBytes = kABytes + kBBytes;
  static constexpr int kBoxAOuter = kSplit ? kBlockM / 2 : kBlockM;  // weight rows per TMA box
  static constexpr int kScaleWarps = 3;  // the producer warps that fill the token boxes
  static constexpr int kStageWarpRegs = 104;  // their registers: a token's codes, scales and addresses
  static constexpr int kTokenSlots = kBlockN / 32;  // tokens per producer lane
  using Mma = ptx::WgmmaF16Rs<kBlockN>;

  static_assert(kKind == GemmKind::kFpropSwapAB && kBlockM == 256 && kMmaPerWg == 2,
                "256 weight rows (two m64 blocks per warpgroup) per tile");
  static_assert(kBlockN == 32 || kBlockN == 64, "32 or 64 tokens per tile");
  static_assert(kABytes % 1024 == 0 && kBoxBytes % 1024 == 0, "stage buffers keep 1024-byte alignment");

  static constexpr int smem_bytes() { return kStages * static_cast<int>(kStageBytes); }
  DMOE_DEVICE static uint32_t smem_a(uint32_t base, int stage) { return base + stage * kABytes; }
  DMOE_DEVICE static uint32_t smem_b(uint32_t base, int stage) { return base + kStages * kABytes + stage * kBBytes; }

#if defined(__CUDACC__)

  // ---- the TMA thread: weight rows ------------------------------------------------------------
  DMOE_DEVICE static void load_tile(const MainloopParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                    int32_t num_k_blocks, const Pipeline& pipe, PipelineState<kStages>& st,
                                    uint32_t smem) {
    const int32_t w_row0 = t.expert * p.weight_rows;
    const CUtensorMap* map_a = ops.map[kMapA];
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      pipe.producer_acquire(st);
      const uint32_t bar = pipe.producer_expect(st, kABytes);
      const uint32_t a = smem_a(smem, st.stage);
      const int32_t k0 = kb * kNvfp4StageBytes;  // packed bytes
      if constexpr (kSplit) {
        const int32_t n0 = t.m_block * (kBlockM / 2);
        ptx::tma_load_2d(a, map_a, bar, k0, w_row0 + n0);
        ptx::tma_load_2d(a + kABytes / 2, map_a, bar, k0, w_row0 + p.split_offset + n0);
      } else {
        ptx::tma_load_2d(a, map_a, bar, k0, w_row0 + t.m_block * kBlockM);
      }
      st.advance();
    }
  }

  // ---- producer warps 1-3: the tokens' FP16 boxes ---------------------------------------------------
  // A stage's work is (token, piece) pairs of the tile's tokens that exist (decode tiles hold a few):
  // pair p is piece p / valid of token p % valid (consecutive lanes write the rows of one box, whose
  // swizzle spreads them over the banks). A lane loads its pairs' 16 + 16 code bytes and 4 scale
  // bytes in rounds of kRound, the first round before waiting for the slot.
  struct ScaleProducer {
    static constexpr int kRound = 2;  // pairs per lane whose loads are in flight together
    struct Pair {
      uint4 lo, hi;   // blocks 2i, 2i + 1 and 8 + 2i, 9 + 2i of the piece (q = 0, 2 and 1, 3)
      uint32_t s02, s13;  // their scale bytes: q = 0, 2 and q = 1, 3
    };
    const MainloopParams& p;
    uint32_t smem;
    int which;
    PipelineState<kStages> st;
    int32_t seq = 0;  // stages walked so far (every producer warp walks all of them)

    DMOE_DEVICE ScaleProducer(const MainloopParams& params, uint32_t smem_base, int warp_index)
        : p(params), smem(smem_base), which(warp_index) {}

    DMOE_DEVICE void tile(const WorkTile& t, int32_t num_k_blocks, const Pipeline& pipe) {
      const int lane = static_cast<int>(threadIdx.x % 32);
      const int32_t first = t.n_block * kBlockN;
      const int valid = max(0, min(kBlockN, t.num_rows - first));  // tokens of the tile that exist
      const int pairs = valid * kPieces;
      const int64_t scales_at = numeric::nvfp4_packed_row_scales_offset(static_cast<int64_t>(num_k_blocks) * kNvfp4StageK);
      const uint8_t* rows = p.packed_rows + (static_cast<int64_t>(t.row_begin) + first) * p.packed_row_bytes;
      for (int32_t kb = 0; kb < num_k_blocks; ++kb, ++seq, st.advance()) {
        if (seq % kScaleWarps != which) continue;
        const uint32_t b = smem_b(smem, st.stage);
        bool acquired = false;
        for (int p0 = 0; p0 < pairs; p0 += 32 * kRound) {
          Pair ld[kRound];
#pragma unroll
          for (int r = 0; r < kRound; ++r) {
            const int pair = p0 + 32 * r + lane;
            if (pair < pairs) load(rows, scales_at, kb, pair % valid, pair / valid, ld[r]);
          }
          if (!acquired) pipe.producer_acquire(st), acquired = true;
#pragma unroll
          for (int r = 0; r < kRound; ++r) {
            const int pair = p0 + 32 * r + lane;
            if (pair < pairs) store(b, pair % valid, pair / valid, ld[r]);
          }
        }
        // Tokens past the expert get no values: their columns are never stored (the epilogue), and
        // a column of the product depends on its own token only.
        if (!acquired) pipe.producer_acquire(st);
        ptx::fence_proxy_async_shared();  // the generic stores, before the wgmmas (async proxy) read them
        __syncwarp();
        if (lane == 0) pipe.producer_arrive(st);
      }
    }

   private:
    DMOE_DEVICE void load(const uint8_t* rows, int64_t scales_at, int32_t kb, int n, int i, Pair& o) const {
      const uint8_t* row = rows + n * p.packed_row_bytes;
      const uint8_t* codes = row + kb * kNvfp4StageBytes;
      o.lo = __ldg(reinterpret_cast<const uint4*>(codes + 16 * i));
      o.hi = __ldg(reinterpret_cast<const uint4*>(codes + 64 + 16 * i));
      const uint8_t* sc = row + scales_at + kb * kNvfp4StageBlocks;
      o.s02 = __ldg(reinterpret_cast<const uint16_t*>(sc + 2 * i));
      o.s13 = __ldg(reinterpret_cast<const uint16_t*>(sc + 8 + 2 * i));
    }

    // Box i, token row n: unit r = the FP16 pairs P_r of blocks q = 0..3 (nvfp4_operands.cuh).
    DMOE_DEVICE static void store(uint32_t b, int n, int i, const Pair& o) {
      const uint32_t t0 = nvfp4_scale_x2(o.s02 & 0xFFu), t2 = nvfp4_scale_x2(o.s02 >> 8);
      const uint32_t t1 = nvfp4_scale_x2(o.s13 & 0xFFu), t3 = nvfp4_scale_x2(o.s13 >> 8);
      const uint32_t box = b + i * kBoxBytes + n * 128;
#pragma unroll
      for (int r = 0; r < 8; ++r) {
        uint4 unit;
        unit.x = nvfp4_values_x2(r < 4 ? o.lo.x : o.lo.y, r % 4, t0);
        unit.y = nvfp4_values_x2(r < 4 ? o.hi.x : o.hi.y, r % 4, t1);
        unit.z = nvfp4_values_x2(r < 4 ? o.lo.z : o.lo.w, r % 4, t2);
        unit.w = nvfp4_values_x2(r < 4 ? o.hi.z : o.hi.w, r % 4, t3);
        ptx::st_shared_v4(box + 16 * (r ^ (n % 8)), unit);
      }
    }
  };

  // ---- consumers ------------------------------------------------------------------------------------
  // The interface of Sm90Mainloop::mma_tile; acc holds the products times 2^-14 (kAccScale).
  template <class Hook = typename Base::NoHook>
  DMOE_DEVICE static void mma_tile(const MainloopParams& p, const WorkTile& t, int32_t num_k_blocks,
                                   int /*rows_in_last*/, const Pipeline& pipe, PipelineState<kStages>& st,
                                   uint32_t smem, int wg, float (&acc)[kMmaPerWg][kAccPerMma], Hook&& hook = Hook{}) {
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
#pragma unroll
      for (int i = 0; i < kAccPerMma; ++i) acc[b][i] = 0.0f;
    if (num_k_blocks == 0) return;

    // This thread's four weight rows: tile rows tile_row(wg, b) + 16 warp + g + 8 h. Every tile row
    // is g modulo 8, so g is the swizzle of all of them; the thread reads 8-byte half q >> 1 of the
    // 16-byte unit 4 (q & 1) + i of each.
    const int lane = static_cast<int>(threadIdx.x % 32), g = lane / 4, q = lane % 4;
    const int frag_row = static_cast<int>((threadIdx.x / 32) % 4) * 16 + g;
    const int32_t scale_ld = num_k_blocks * kNvfp4StageBlocks;  // K / 16
    const uint8_t* w_scales = static_cast<const uint8_t*>(p.b_scales);
    uint32_t row_off[kMmaPerWg][2];
    const uint8_t* scale_row[kMmaPerWg][2];
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int tile_row = Base::tile_row(wg, b) + frag_row + 8 * h;
        row_off[b][h] = static_cast<uint32_t>(tile_row * kNvfp4StageBytes + 8 * (q >> 1));
        const int32_t row = Base::swap_ab_weight_row(p, t.m_block, tile_row);
        scale_row[b][h] = w_scales + static_cast<int64_t>(t.expert * p.weight_rows + row) * scale_ld + 8 * (q & 1);
      }

    uint32_t set0[kMmaPerWg][kStepsPerPiece][4] = {}, set1[kMmaPerWg][kStepsPerPiece][4] = {};
    uint2 sc_now[kMmaPerWg][2];
    load_scales(scale_row, 0, sc_now);
    int32_t prev_stage = 0;
    for (int32_t kb = 0; kb < num_k_blocks; ++kb) {
      uint2 sc_next[kMmaPerWg][2];
      load_scales(scale_row, min(kb + 1, num_k_blocks - 1), sc_next);
      pipe.consumer_wait(st);
      const uint32_t a = smem_a(smem, st.stage), b = smem_b(smem, st.stage);
      uint2 raw[kMmaPerWg][2];
      load_piece<0>(a, row_off, g, q, raw);
      piece<0>(a, b, row_off, g, q, sc_now, set0, acc, raw);
      piece<1>(a, b, row_off, g, q, sc_now, set1, acc, raw);
      if (kb > 0) pipe.consumer_release(prev_stage);  // its last piece finished in piece<1>'s wait
      piece<2>(a, b, row_off, g, q, sc_now, set0, acc, raw);
      piece<3>(a, b, row_off, g, q, sc_now, set1, acc, raw);
      hook(kb);
      prev_stage = st.stage;
      st.advance();
#pragma unroll
      for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
        for (int h = 0; h < 2; ++h) sc_now[bb][h] = sc_next[bb][h];
    }
    ptx::wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < kMmaPerWg; ++b) {
      ptx::wgmma_fence_operands(set0[b]);
      ptx::wgmma_fence_operands(set1[b]);
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

  // The rows' blocks of piece i: one ld.shared.v2 per row (16-byte unit 4 (q & 1) + i, half q >> 1).
  template <int kPiece>
  DMOE_DEVICE static void load_piece(uint32_t a, const uint32_t (&row_off)[kMmaPerWg][2], int g, int q,
                                     uint2 (&raw)[kMmaPerWg][2]) {
    const uint32_t unit = 16u * static_cast<uint32_t>((4 * (q & 1) + kPiece) ^ g);
#pragma unroll
    for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
      for (int h = 0; h < 2; ++h) raw[bb][h] = ptx::ld_shared_v2(a + row_off[bb][h] + unit);
  }

  // Piece i of the stage (its blocks in `raw`): read the next piece's blocks, wait until the set's
  // previous wgmmas (two pieces back) are done, convert into the set, issue its four k16 steps per
  // m64 block as one group; `raw` then holds the next piece's blocks.
  template <int kPiece>
  DMOE_DEVICE static void piece(uint32_t a, uint32_t b, const uint32_t (&row_off)[kMmaPerWg][2], int g, int q,
                                const uint2 (&sc)[kMmaPerWg][2], uint32_t (&set)[kMmaPerWg][kStepsPerPiece][4],
                                float (&acc)[kMmaPerWg][kAccPerMma], uint2 (&raw)[kMmaPerWg][2]) {
    uint2 next[kMmaPerWg][2];
    if constexpr (kPiece + 1 < kPieces) load_piece<kPiece + 1>(a, row_off, g, q, next);
    const uint2 (&w)[kMmaPerWg][2] = raw;
    // Block nvfp4_piece_block(q, i) = 8 (q & 1) + 2 i + (q >> 1): byte 2 i + (q >> 1) of the 8 loaded.
    const int byte = 2 * kPiece + (q >> 1);
    uint32_t t[kMmaPerWg][2];
#pragma unroll
    for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const uint32_t word = byte < 4 ? sc[bb][h].x : sc[bb][h].y;
        t[bb][h] = nvfp4_scale_x2((word >> (8 * (byte % 4))) & 0xFFu);
      }
    ptx::wgmma_wait<1>();
    // The set's registers stay allocated until here: its wgmmas (two pieces back) read them late.
#pragma unroll
    for (int bb = 0; bb < kMmaPerWg; ++bb) ptx::wgmma_fence_operands(set[bb]);
#pragma unroll
    for (int bb = 0; bb < kMmaPerWg; ++bb) {
#pragma unroll
      for (int s = 0; s < kStepsPerPiece; ++s) {
        // P_{2s} is the {2q, 2q+1} pair, P_{2s+1} the {2q+8, 2q+9} pair; regs 0/2 row g, 1/3 row g+8.
        const int r0 = 2 * s, r1 = 2 * s + 1;
        set[bb][s][0] = nvfp4_values_x2(r0 < 4 ? w[bb][0].x : w[bb][0].y, r0 % 4, t[bb][0]);
        set[bb][s][1] = nvfp4_values_x2(r0 < 4 ? w[bb][1].x : w[bb][1].y, r0 % 4, t[bb][1]);
        set[bb][s][2] = nvfp4_values_x2(r1 < 4 ? w[bb][0].x : w[bb][0].y, r1 % 4, t[bb][0]);
        set[bb][s][3] = nvfp4_values_x2(r1 < 4 ? w[bb][1].x : w[bb][1].y, r1 % 4, t[bb][1]);
      }
    }
    const uint64_t box = ptx::make_kmajor_desc(b + kPiece * kBoxBytes);
    ptx::wgmma_fence();  // the A registers (and the accumulators) written above
#pragma unroll
    for (int s = 0; s < kStepsPerPiece; ++s)
#pragma unroll
      for (int bb = 0; bb < kMmaPerWg; ++bb) Mma::mma(acc[bb], set[bb][s], ptx::desc_advance(box, 32u * s), 1u);
    ptx::wgmma_commit();
    if constexpr (kPiece + 1 < kPieces) {
#pragma unroll
      for (int bb = 0; bb < kMmaPerWg; ++bb)
#pragma unroll
        for (int h = 0; h < 2; ++h) raw[bb][h] = next[bb][h];
    }
  }

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
