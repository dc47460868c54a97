// SM90 MXFP8 FPROP baseline: both operands dequantized exactly to BF16 in the producer warpgroup,
// then our BF16 consumers (issue #25 item 4's "safe baseline"; docs/grouped_gemm.md "MXFP8"). The
// operands are the per-32-promotion kernel's (mainloop_mxfp8.cuh: E4M3 rows with 1 x 32 E8M0 scales,
// E4M3 weights with 32 x 32 tile scales read through the FPROP view [E * N, K/32]) and so are its
// TMA maps; the heuristic never picks this kernel (config suffix "_dq"): it is there to be measured.
//
// Rings. The base mainloop's BF16 stages (kStages x [A 128 x 64 | B BN x 64], 128B swizzle), which
// the consumers read unchanged, and kSlots = kStages / 2 E4M3 slots, each one 128-deep k block of
// both operands as TMA brings it ([rows][128 bytes], 128B swizzle). Slot j feeds BF16 stages 2j and
// 2j + 1 (its two k halves), so every role finds the slot from the BF16 ring state it walks:
// slot = stage / 2, same phase. A slot is free again once converted, before its BF16 stages are
// consumed, so the TMA loads run up to two slots ahead of the conversion.
//   TMA thread   per slot: wait drained[j], expect the slot's bytes on staged[j], load A and B
//                (it never touches the BF16 ring: kTmaArrivesOnFull = false)
//   warps 1-3    per slot: wait staged[j]; per half h: acquire BF16 stage 2j + h, convert the
//                half's 16-byte chunks (16 codes, one scale each) into it, fence for the async
//                proxy, arrive on its full barrier (three arrivals fill a stage); then each warp
//                arrives on drained[j]
//   consumers    Sm90Mainloop's k loop over the BF16 stages
//
// Numerics (the conversion: numeric/mxfp8.cuh, mxfp8_e4m3x16_to_bf16, tested on the host for every
// code pair): every operand element becomes the BF16 value e4m3(q) x 2^(s - 127), exact wherever
// that value is at least 2^-130 in magnitude (BF16's 8 significant bits hold E4M3's 4 down to its
// subnormals), NaN for a NaN block (s = 255), infinite where it overflows (as in FP32); products
// of two BF16 values are exact in FP32 and the wgmmas accumulate them in FP32 -- the products of
// the MXFP8 operands, as the per-32 promotion computes them. Unlike that kernel, an E4M3 NaN code
// (0x7F / 0xFF) in a block with a finite scale converts to a finite value; the quantizers never
// write one there (a NaN block gets scale 255).
//
// Cost, the reason this is a baseline: ~57 instructions per 16-code chunk (SASS), 1024 chunks per
// 64-deep BF16 stage of a 128 x 128 tile on three warps, a half's chunks loaded before any is
// converted so that several are in flight: measured 0.42-0.55x our BF16 GEMM, where the per-32
// promotion runs 0.91-1.10x (0.20-0.29x with one chunk at a time; docs/perf_history.md G120: the
// budget, the profile, both measurements).
// 128 x 128 tiles with four BF16 stages and the padded epilogue: four BF16 stages and two slots take
// 192 KiB, which leaves no room for the TMA writer's 32 KiB of staging.
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/gemm/mainloop.cuh"
#include "dist_moe/device/numeric/mxfp8.cuh"

namespace dist_moe::gemm {

template <class Config>
struct Sm90Mxfp8DequantMainloop : Sm90Mainloop<Config> {
  using Base = Sm90Mainloop<Config>;
  using typename Base::Pipeline;
  using Base::kBlockM;
  using Base::kBlockN;
  using Base::kKind;
  using Base::kSplit;
  using Base::kStages;

  static constexpr int kMapElemBytes = 1;  // E4M3 in memory; BF16 in the stages
  static constexpr int kSlots = kStages / 2;
  static constexpr int kSlotK = 128;  // K per slot: one 128-byte E4M3 row, two BF16 stages
  static constexpr uint32_t kSlotABytes = kBlockM * kSlotK;
  static constexpr uint32_t kSlotBBytes = kBlockN * kSlotK;
  static constexpr uint32_t kSlotBytes = kSlotABytes + kSlotBBytes;

  static constexpr int kScaleWarps = 3;    // the converting warps (producer warps 1-3)
  static constexpr int kFillArrivals = 3;  // all three fill every stage
  static constexpr bool kTmaArrivesOnFull = false;
  // Registers of the converting warps: eleven scale words next to a chunk in flight (at 80 the W13
  // kernel spilled 368 bytes, at 96 196 bytes; ptxas), leaving the consumers 192.
  static constexpr int kStageWarpRegs = 112;

  static_assert(kKind == GemmKind::kFprop && kBlockM == 128 && kBlockN == 128 && !Base::kPingPong &&
                    Base::kClusterM == 1 && Config::Operands::kElemBytes == 2,
                "the MXFP8 dequantizing baseline: cooperative 128x128 FPROP tiles on BF16 wgmma");
  static_assert(kStages % 2 == 0 && Base::kBlockK * 2 == kSlotK, "a slot feeds two 64-deep BF16 stages");
  static_assert(kSlotABytes % 1024 == 0 && kSlotBBytes % 1024 == 0, "slots keep the 128B swizzle's alignment");

  // BF16 stages, then the slots, then staged[kSlots] and drained[kSlots] (rounded to 1 KiB: the
  // epilogue's staging buffers follow).
  static constexpr int kSlotsOffset = Base::smem_bytes();
  static constexpr int kBarriersOffset = kSlotsOffset + kSlots * static_cast<int>(kSlotBytes);
  static constexpr int smem_bytes() { return (kBarriersOffset + 16 * kSlots + 1023) / 1024 * 1024; }
  DMOE_DEVICE static uint32_t slot_a(uint32_t smem, int slot) { return smem + kSlotsOffset + slot * kSlotBytes; }
  DMOE_DEVICE static uint32_t slot_b(uint32_t smem, int slot) { return slot_a(smem, slot) + kSlotABytes; }
  DMOE_DEVICE static uint32_t staged_bar(uint32_t smem, int slot) { return smem + kBarriersOffset + 8 * slot; }
  DMOE_DEVICE static uint32_t drained_bar(uint32_t smem, int slot) {
    return smem + kBarriersOffset + 8 * (kSlots + slot);
  }

#if defined(__CUDACC__)

  DMOE_DEVICE static void init_shared(uint32_t smem) {
#pragma unroll
    for (int j = 0; j < kSlots; ++j) {
      ptx::mbarrier_init(staged_bar(smem, j), 1);
      ptx::mbarrier_init(drained_bar(smem, j), kScaleWarps);
    }
  }

  // ---- the TMA thread: E4M3 slots -----------------------------------------------------------------
  // num_k_blocks counts BF16 stages (K / 64); `st` walks the BF16 ring two stages per slot.
  DMOE_DEVICE static void load_tile(const MainloopParams& p, const ResolvedOperands& ops, const WorkTile& t,
                                    int32_t num_k_blocks, const Pipeline& /*pipe*/, PipelineState<kStages>& st,
                                    uint32_t smem) {
    const int32_t w_row0 = t.expert * p.weight_rows;
    const CUtensorMap* map_a = ops.map[kMapA];
    const CUtensorMap* map_b = ops.map[kMapB];
    for (int32_t kb = 0; kb < num_k_blocks / 2; ++kb) {
      const int slot = st.stage / 2;
      mbarrier_wait(drained_bar(smem, slot), st.phase ^ 1u);  // its last conversion read it
      const uint32_t bar = staged_bar(smem, slot);
      ptx::mbarrier_arrive_expect_tx(bar, kSlotBytes);
      const int32_t k0 = kb * kSlotK;
      ptx::tma_load_2d(slot_a(smem, slot), map_a, bar, k0, t.row_begin + t.m_block * kBlockM);
      Base::template load_weight_block<kBlockN, kSlotBBytes>(slot_b(smem, slot), map_b, bar, k0, w_row0, t.n_block, p);
      st.advance();
      st.advance();
    }
  }

  // ---- warps 1-3: E4M3 slots into BF16 stages -------------------------------------------------------
  // Items: the 16-byte chunks of a half slot (16 codes, one scale), four per row: A's 128 rows,
  // then B's, 1024 in all; lane L (0..95) takes items L + 96 r, r = 0..10 (lanes 64-95 have ten).
  // Eight consecutive items (a quarter warp) are chunks 0-3 of rows rho and rho ^ 5: two rows whose
  // swizzles differ in bits 0 and 2, so the quarter's 16-byte reads (chunk (4h + c) ^ sw, bit 2
  // apart) and its two rounds of stores (BF16 chunks 2c ^ sw and (2c + 1) ^ sw, bit 0 apart) each
  // hit eight distinct 16-byte bank groups. Item r's row is then row0 + 24 r (B's: minus 128) with
  // the lane's own row0, chunk and swizzle, so every shared address is a lane base plus a constant.
  // Each item converts its chunk with its row's scale of that k32 step and stores the two BF16
  // chunks it becomes. The scale words (four codes: the slot's k32 steps) are loaded before the
  // slot is waited for, so their latency overlaps the wait.
  struct ScaleProducer {
    static constexpr int kLanes = 32 * kScaleWarps;
    static constexpr int kItems = (kBlockM + kBlockN) * 4;
    static constexpr int kItemsPerLane = (kItems + kLanes - 1) / kLanes;
    static_assert(kLanes == 96 && kItems == 1024 && kItemsPerLane == 11,
                  "the item layout below: rows row0 + 24 r, A for items below 512");
    const MainloopParams& p;
    uint32_t smem;
    int lane_index;  // among the kLanes
    int row0;        // the row of the lane's item 0 (A)
    uint32_t chunk;  // 0..3: its chunk in every half, for all its items
    uint32_t sw;     // row0 % 8: the swizzle of all its rows
    PipelineState<kStages> st;

    DMOE_DEVICE ScaleProducer(const MainloopParams& params, uint32_t smem_base, int warp_index)
        : p(params), smem(smem_base), lane_index(32 * warp_index + static_cast<int>(threadIdx.x % 32)) {
      const int quarter = lane_index / 8, l = lane_index % 8;
      const int rho = 8 * (quarter / 4) + quarter % 4;
      row0 = l < 4 ? rho : rho ^ 5;
      chunk = static_cast<uint32_t>(l % 4);
      sw = static_cast<uint32_t>(row0 % 8);
    }

    // Whether item r exists, and whether it is B's: known at compile time but for r = 10 (lanes 0-63)
    // and r = 5 (A on lanes 0-31), where they are warp-uniform. Written so the compiler sees that:
    // a run-time test around every item made each one a branch of its own, which kept the warp from
    // overlapping consecutive items (perf_history G120).
    DMOE_DEVICE bool exists(int r) const { return r < kItems / kLanes || lane_index + kLanes * r < kItems; }
    DMOE_DEVICE bool is_b(int r) const {
      constexpr int kFirstB = 4 * kBlockM / kLanes;  // 5: the first r whose items may be B's
      return r > kFirstB || (r == kFirstB && lane_index + kLanes * r >= 4 * kBlockM);
    }
    // The item's row of its operand's tile.
    DMOE_DEVICE int row(int r) const { return row0 + 24 * r - (is_b(r) ? kBlockM : 0); }

    DMOE_DEVICE void tile(const WorkTile& t, int32_t num_k_blocks, const Pipeline& pipe) {
      const auto* a_sc = static_cast<const uint8_t*>(p.a_scales);
      const auto* b_sc = static_cast<const uint8_t*>(p.b_scales);
      const Mxfp8AScaleStrides a_stride = mxfp8_a_scale_strides(p);
      const int32_t ld_b = num_k_blocks / 2 * 4;  // K / 32: the FPROP view's codes per weight row
      // Rows past the buffer (a tile's tail) read the last row's codes; their results are not stored.
      const int32_t a_row0 = t.row_begin + t.m_block * kBlockM, last_row = p.a_scale_rows - 1;
      for (int32_t kb = 0; kb < num_k_blocks / 2; ++kb) {
        uint32_t words[kItemsPerLane];
#pragma unroll
        for (int r = 0; r < kItemsPerLane; ++r) {
          if (!exists(r)) continue;
          if (!is_b(r)) {
            const int32_t off = min(a_row0 + row(r), last_row) * a_stride.row + a_stride.kblock * kb;
            words[r] = __ldcg(reinterpret_cast<const uint32_t*>(a_sc + off));
          } else {
            int32_t w_row;
            if constexpr (kSplit) {  // gate rows [0, F) in the first half of the tile, up rows after
              const int half = row(r) < kBlockN / 2 ? 0 : 1;
              w_row = half * p.split_offset + t.n_block * (kBlockN / 2) + row(r) - half * (kBlockN / 2);
            } else {
              w_row = min(t.n_block * kBlockN + row(r), p.weight_rows - 1);
            }
            words[r] = __ldg(reinterpret_cast<const uint32_t*>(b_sc + (t.expert * p.weight_rows + w_row) * ld_b + 4 * kb));
          }
        }
        const int slot = st.stage / 2;
        mbarrier_wait(staged_bar(smem, slot), st.phase);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          pipe.producer_acquire(st);
          const uint32_t src = slot_a(smem, slot) + row0 * 128 + 16u * ((4u * h + chunk) ^ sw);
          const uint32_t lo = 16u * ((2u * chunk) ^ sw), hi = 16u * ((2u * chunk + 1u) ^ sw);
          const uint32_t dst_a = Base::smem_a(smem, st.stage) + row0 * 128;
          const uint32_t dst_b = Base::smem_b(smem, st.stage) + (row0 - kBlockM) * 128;
          // Every chunk of the half first: the compiler keeps a shared load after an earlier shared
          // store it cannot tell apart, so loading item by item serialized the items (G120).
          uint4 q[kItemsPerLane];
#pragma unroll
          for (int r = 0; r < kItemsPerLane; ++r)
            if (exists(r)) q[r] = ptx::ld_shared_v4(src + 24u * 128u * r);
#pragma unroll
          for (int r = 0; r < kItemsPerLane; ++r) {
            if (!exists(r)) continue;
            const uint32_t code = (words[r] >> (8u * (2u * h + chunk / 2u))) & 0xFFu;
            const uint32_t dst = (is_b(r) ? dst_b : dst_a) + 24u * 128u * r;
            convert(q[r], dst + lo, dst + hi, code);
          }
          ptx::fence_proxy_async_shared();  // the generic stores, before the wgmmas (async proxy) read them
          __syncwarp();
          if (threadIdx.x % 32 == 0) pipe.producer_arrive(st);
          st.advance();
        }
        __syncwarp();  // every lane's reads of the slot are done
        if (threadIdx.x % 32 == 0) ptx::mbarrier_arrive(drained_bar(smem, slot));
      }
    }

   private:
    // The 16 codes of q times 2^(code - 127) as 16 BF16 values (numeric/mxfp8.cuh): the first 8 to
    // `lo`, the rest to `hi`.
    DMOE_DEVICE static void convert(const uint4& q, uint32_t lo, uint32_t hi, uint32_t code) {
      const uint32_t w[4] = {q.x, q.y, q.z, q.w};
      uint32_t v[8];
      numeric::mxfp8_e4m3x16_to_bf16(w, code, v);
      ptx::st_shared_v4(lo, make_uint4(v[0], v[1], v[2], v[3]));
      ptx::st_shared_v4(hi, make_uint4(v[4], v[5], v[6], v[7]));
    }
  };

#endif  // __CUDACC__
};

}  // namespace dist_moe::gemm
