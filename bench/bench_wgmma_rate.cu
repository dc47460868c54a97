// The tensor cores' ceiling per wgmma shape: one CTA per SM whose warpgroups issue nothing but
// wgmmas on resident operands (shared-memory tiles and A registers written once, nonzero), groups of
// 8 committed and waited with one group in flight -- the pattern of our mainloops. Per instruction
// family (BF16 and E4M3 with both operands in shared memory, FP16 and E4M3 with A from registers), N, the
// warpgroups issuing and the independent accumulator chains each interleaves, it prints the SM
// cycles per wgmma (clock64 around the loop, so independent of the clock), the MACs per cycle and
// the fraction of the family's best row in the same run (the measured peak). The decode GEMMs issue
// small-N wgmmas: this says what one costs (docs/perf_history.md G61).
//
// --promotion measures the FP8-blockwise consumers' pattern instead (G66): per 128-deep k block a
// warpgroup contracts its m64 x kTileN tile in slices of kSliceN columns, each slice four k32 E4M3
// wgmmas into a scratch accumulator, waits for them and folds the scratch into the FP32 tile
// accumulator (one FFMA per element); one or two warpgroups, the second optionally started a few
// hundred cycles late, A from shared memory or registers, and the mainloop's other pieces added one
// at a time (kMode below). It prints SM cycles per k block and the fraction of the E4M3 peak (4096
// MACs per cycle): what a mainloop of that shape can reach, so the rest of a kernel's gap is elsewhere.
//
// --wgrad measures the FP8 WGRAD's k loop (per-element scales from the stage's copy; G145): main's
// serial slice patterns against folding each slice while the next runs, in alternated rounds.
//
//   bench_wgmma_rate [--iters N] [--promotion] [--wgrad [--rounds N]]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/device/gemm/pipeline.cuh"
#include "dist_moe/device/ptx/barrier.cuh"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/ld_st.cuh"
#include "dist_moe/device/ptx/mbarrier.cuh"
#include "dist_moe/device/ptx/setmaxnreg.cuh"
#include "dist_moe/device/ptx/tma.cuh"
#include "dist_moe/device/ptx/wgmma.cuh"
#include "testing/bench_args.h"
#include "testing/main_guard.h"

namespace {

using namespace dist_moe;

constexpr int kGroup = 8;                 // wgmmas per commit group
constexpr int kSmemBytes = 64 * 1024;     // the A and B tiles (a 64 x 16 K-major tile is 2 KiB; 256 x 16 8 KiB)
constexpr int kBOffset = 32 * 1024;

// The families; each runs m64 x kN x (32 bytes of K).
template <int kN>
struct SsBf16 {
  static constexpr const char* kName = "bf16 SS";
  static constexpr int kMacs = 64 * kN * 16;
  DMOE_DEVICE static void mma(float (&d)[kN / 2], const uint32_t (&)[4], uint64_t da, uint64_t db) {
    ptx::WgmmaBf16<kN, 0, 0>::mma(d, da, db, 1u);
  }
};
template <int kN>
struct SsE4m3 {
  static constexpr const char* kName = "e4m3 SS";
  static constexpr int kMacs = 64 * kN * 32;
  DMOE_DEVICE static void mma(float (&d)[kN / 2], const uint32_t (&)[4], uint64_t da, uint64_t db) {
    ptx::WgmmaE4m3<kN>::mma(d, da, db, 1u);
  }
};
template <int kN>
struct RsE4m3 {
  static constexpr const char* kName = "e4m3 RS";
  static constexpr int kMacs = 64 * kN * 32;
  DMOE_DEVICE static void mma(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t, uint64_t db) {
    ptx::WgmmaE4m3Rs<kN>::mma(d, a, db, 1u);
  }
};
template <int kN>
struct RsF16 {
  static constexpr const char* kName = "f16 RS";
  static constexpr int kMacs = 64 * kN * 16;
  DMOE_DEVICE static void mma(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t, uint64_t db) {
    ptx::WgmmaF16Rs<kN>::mma(d, a, db, 1u);
  }
};

DMOE_DEVICE uint32_t hash32(uint32_t x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}

// Two 16-bit values of modest magnitude (sign, exponent 14..15, random mantissa); read as E4M3 each
// byte is a finite value too. Nonzero: the tensor cores' power, and so the clock, depends on data.
DMOE_DEVICE uint32_t operand_word(uint32_t seed) {
  const uint32_t h = hash32(seed);
  return (h & 0x83FF83FFu) | 0x38003800u;
}

// The first `bytes` of the CTA's shared memory as operand words (every thread of the CTA).
DMOE_DEVICE void fill_operands(uint8_t* smem, int bytes) {
  for (int i = threadIdx.x; i < bytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = operand_word(static_cast<uint32_t>(i) * 2654435761u + blockIdx.x);
}

// The end of a timed loop: thread 0 records the SM cycles since t0, and every thread stores the sum
// of its accumulators (keeps the products live).
template <int kN>
DMOE_DEVICE void finish_timed(long long t0, const float (&acc)[kN], long long* cycles, float* sink) {
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kN; ++i) sum += acc[i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

template <template <int> class Op, int kN, int kChains>
__global__ void __launch_bounds__(kN >= 128 ? 256 : 512, 1) wgmma_rate_kernel(int iters, long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  fill_operands(smem, kSmemBytes);
  ptx::fence_proxy_async_shared();  // the generic stores, before the wgmmas (async proxy) read them
  __syncthreads();
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint64_t da = ptx::make_kmajor_desc(base), db = ptx::make_kmajor_desc(base + kBOffset);
  uint32_t a[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) a[j] = operand_word(threadIdx.x * 4 + j + 77);
  float acc[kChains][kN / 2];
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[c][i] = 0.0f;
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < iters; ++it) {
    ptx::wgmma_fence();
#pragma unroll
    for (int j = 0; j < kGroup; ++j) Op<kN>::mma(acc[j % kChains], a, da, db);
    ptx::wgmma_commit();
    ptx::wgmma_wait<1>();
  }
  ptx::wgmma_wait<0>();
#pragma unroll
  for (int c = 0; c < kChains; ++c) ptx::wgmma_fence_operands(acc[c]);
  __syncthreads();
  const long long t1 = clock64();
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < kChains; ++c)
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) s += acc[c][i];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the products live
}

int g_iters = 4000;

// Launches twice (the first warms the clock; the second is kept) and returns the median SM's cycles.
template <class Launch>
double median_sm_cycles(int sms, const long long* cycles_d, Launch launch) {
  for (int warm = 0; warm < 2; ++warm) {
    launch();
    DMOE_CUDA_CHECK_LAUNCH();
  }
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<long long> cycles(sms);
  DMOE_CUDA_CHECK(cudaMemcpy(cycles.data(), cycles_d, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  std::sort(cycles.begin(), cycles.end());
  return static_cast<double>(cycles[sms / 2]);
}

// ---- promotion patterns (--promotion) ---------------------------------------------------------------
// One k block of a warpgroup's m64 x kTileN tile: kTileN / kSliceN slices of four m64 x kSliceN x k32
// E4M3 wgmmas into scratch (the first overwriting), each waited for and folded into acc with a scale
// read from shared memory (as the mainloop reads its scales). kRs: A from registers (the n64 RS form).
template <int kSliceN, bool kRs>
DMOE_DEVICE void issue_slice(float (&scratch)[kSliceN / 2], const uint32_t (&a)[4][4], uint64_t da, uint64_t db) {
  static_assert(!kRs || kSliceN == 64, "the E4M3 RS wrapper is m64n64k32");
  ptx::wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    if constexpr (kRs) ptx::WgmmaE4m3Rs<64>::mma(scratch, a[kk], ptx::desc_advance(db, kk * 32), kk > 0 ? 1u : 0u);
    else
      ptx::WgmmaE4m3<kSliceN>::mma(scratch, ptx::desc_advance(da, kk * 32), ptx::desc_advance(db, kk * 32),
                                   kk > 0 ? 1u : 0u);
  }
  ptx::wgmma_commit();
}

template <int kTileN, int kSliceN>
DMOE_DEVICE void fold_slice(float (&acc)[kTileN / 2], const float (&scratch)[kSliceN / 2], int s, float lo, float hi) {
#pragma unroll
  for (int i = 0; i < kSliceN / 2; ++i)
    acc[s * kSliceN / 2 + i] = fmaf(scratch[i], (i / 2) % 2 == 0 ? lo : hi, acc[s * kSliceN / 2 + i]);
}

// kMode (the mainloop's per-k-block work, added one piece at a time): 0 resident operands and
// scales in shared memory; 1 a ring of four 128x256 E4M3 stages (48 KiB each) whose index is a
// run-time value, A fragments loaded from the stage by ldmatrix each k block (RS) and the B
// descriptors built from the stage's address; 2 as 1 with the scales read from global memory one k
// block ahead (two A rows and four B groups per thread, as the mainloop's load_scales); 3 as 2 with
// the mainloop's pipeline: a third warpgroup's thread fills each stage from global memory (three
// 16 KiB bulk copies, completing on the stage's full barrier) once the consumers' warps have
// released it (empty barrier), and the consumers wait for the full barrier before reading it.
constexpr int kRingStages = 4, kRingStageBytes = 48 * 1024;
constexpr int promotion_smem_bytes(int mode) {
  return mode == 0 ? kSmemBytes : kRingStages * kRingStageBytes + (mode == 3 ? 1024 : 0);
}
constexpr int promotion_threads(int mode, int wgs) { return 128 * wgs + (mode == 3 ? 128 : 0); }

template <int kTileN, int kSliceN, bool kRs, int kMode>
__global__ void __launch_bounds__(kMode == 3 ? 384 : 256, 1)
    promotion_kernel(int iters, int delay, const float* __restrict__ g_data, long long* cycles, float* sink) {
  constexpr int kSlices = kTileN / kSliceN;
  static_assert(kMode == 0 || kRs || kSliceN >= 128, "ring modes: RS n64 slices or SS n128 slices");
  // Ring stage: A (128 rows) then B (kTileN rows), 128 bytes of K each; kRingStageBytes apart.
  constexpr int kStageUsed = (128 + kTileN) * 128;
  extern __shared__ __align__(1024) uint8_t smem[];
  fill_operands(smem, kMode == 0 ? kSmemBytes : kRingStages * kRingStageBytes);  // not the barriers
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = base + kRingStages * kRingStageBytes, empty = full + 8 * kRingStages;  // kMode 3
  const int consumer_wgs = kMode == 3 ? static_cast<int>(blockDim.x / 128) - 1 : static_cast<int>(blockDim.x / 128);
  if (kMode == 3 && threadIdx.x == 0) {
    for (int st = 0; st < kRingStages; ++st) {
      ptx::mbarrier_init(full + 8 * st, 1);
      ptx::mbarrier_init(empty + 8 * st, 4 * consumer_wgs);  // one arrival per consumer warp
    }
    ptx::fence_mbarrier_init();
  }
  ptx::fence_proxy_async_shared();
  __syncthreads();
  if (kMode == 3 && threadIdx.x >= 128 * consumer_wgs) {  // the producer warpgroup
    ptx::setmaxnreg_dec<40>();
    if (threadIdx.x == 128 * consumer_wgs) {
      for (int it = 0; it < iters; ++it) {
        const uint32_t st = static_cast<uint32_t>(it % kRingStages), round = static_cast<uint32_t>(it / kRingStages);
        while (!ptx::mbarrier_try_wait_parity(empty + 8 * st, (round & 1u) ^ 1u)) {
        }
        ptx::mbarrier_arrive_expect_tx(full + 8 * st, kStageUsed);
        const uint8_t* src = reinterpret_cast<const uint8_t*>(g_data) + (it % 64) * kRingStageBytes;
        for (int part = 0; part < kStageUsed / 16384; ++part)
          ptx::bulk_load_1d(base + st * kRingStageBytes + part * 16384, src + part * 16384, 16384, full + 8 * st);
      }
    }
    return;  // the roles never meet again (setmaxnreg: the producer keeps 40 registers)
  }
  // The GEMM kernel's split (kernel.cuh): 384 threads launch at 168 registers.
  if constexpr (kMode == 3) ptx::setmaxnreg_inc<232>();
  const uint64_t da = ptx::make_kmajor_desc(base), db = ptx::make_kmajor_desc(base + kBOffset);
  const float* scales = reinterpret_cast<const float*>(smem + kBOffset - 1024);  // 256 finite values
  uint32_t a[4][4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int j = 0; j < 4; ++j) a[kk][j] = operand_word(threadIdx.x * 16 + kk * 4 + j + 77);
  float acc[kTileN / 2];
#pragma unroll
  for (int i = 0; i < kTileN / 2; ++i) acc[i] = 0.0f;
  if constexpr (kMode == 3) ptx::named_barrier_sync(1, 128 * consumer_wgs);  // the producer has left: not bar 0
  else __syncthreads();
  const long long t0 = clock64();
  if (threadIdx.x >= 128)  // the second warpgroup starts `delay` cycles late
    while (clock64() - t0 < delay) {
    }
  const int lane_row = (threadIdx.x % 128) / 4;
  if constexpr (kMode == 0) {
    float scratch[kSliceN / 2];
    for (int it = 0; it < iters; ++it) {
      const float lo = scales[(it + lane_row) & 127], hi = scales[(it + lane_row + 8) & 127];
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        issue_slice<kSliceN, kRs>(scratch, a, da, ptx::desc_advance(db, s * kSliceN * 128));
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_operands(scratch);
        fold_slice<kTileN, kSliceN>(acc, scratch, s, lo, hi);
      }
    }
  } else {
    float scratch[kSliceN / 2];
    const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, wg = threadIdx.x / 128;
    const uint32_t j = lane / 8, i8 = lane % 8;
    const uint32_t a_row = wg * 64 + 16 * warp + i8 + 8 * (j % 2);
    // Global scale offsets as the mainloop's (k-block-major A rows, B rows per 64-column group).
    const int32_t row0 = static_cast<int32_t>(blockIdx.x * 128 + wg * 64 + warp * 16 + lane / 4);
    float nlo = 1.0f, nhi = 1.0f, nb[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    auto load = [&](int it) {
      if constexpr (kMode >= 2) {
        const int32_t off = (it % 16) * 32768;
        nlo = __ldg(g_data + off + row0);
        nhi = __ldg(g_data + off + row0 + 8);
#pragma unroll
        for (int g = 0; g < 4; ++g) nb[g] = __ldg(g_data + 524288 + (blockIdx.x * 4 + g) * 16 + it % 16);
      }
    };
    load(0);
    for (int it = 0; it < iters; ++it) {
      const float lo = nlo, hi = nhi;
      float b[4];
#pragma unroll
      for (int g = 0; g < 4; ++g) b[g] = nb[g];
      load(it + 1);
      const uint32_t stage = base + static_cast<uint32_t>(it % kRingStages) * kRingStageBytes;
      if constexpr (kMode == 3) {
        const uint32_t bar = full + 8 * static_cast<uint32_t>(it % kRingStages);
        while (!ptx::mbarrier_try_wait_parity(bar, static_cast<uint32_t>(it / kRingStages) & 1u)) {
        }
      }
      if constexpr (kRs) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) ptx::ldmatrix_x4(stage + a_row * 128 + (((2 * kk + j / 2) ^ i8) << 4), a[kk]);
      }
      const uint64_t da_stage = ptx::make_kmajor_desc(stage + wg * 64 * 128);
      const uint64_t db_stage = ptx::make_kmajor_desc(stage + 16 * 1024);
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        issue_slice<kSliceN, kRs>(scratch, a, da_stage, ptx::desc_advance(db_stage, s * kSliceN * 128));
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_operands(scratch);
        if (kMode == 3 && s == kSlices - 1 && lane == 0)
          ptx::mbarrier_arrive(empty + 8 * static_cast<uint32_t>(it % kRingStages));  // the stage is read
        fold_slice<kTileN, kSliceN>(acc, scratch, s, lo * b[s % 4], hi * b[s % 4]);
      }
      if constexpr (kRs) ptx::wgmma_fence_operands(a);
    }
  }
  ptx::wgmma_fence_operands(acc);
  if constexpr (kMode == 3) ptx::named_barrier_sync(1, 128 * consumer_wgs);  // the consumers only
  else __syncthreads();
  finish_timed(t0, acc, cycles, sink);
}

struct PromotionRow {
  int tile_n, slice_n, wgs, delay, mode;
  bool rs;
  double cycles_per_kblock, x_peak;
};

// 1M FP32 values 0x3F3F3F3F (0.747): the scales of modes 2-3, and as E4M3 bytes (1.875) the stages
// mode 3's producer copies in.
const float* g_data_d = nullptr;

template <int kTileN, int kSliceN, bool kRs, int kMode = 0>
PromotionRow measure_promotion(int wgs, int delay, int sms, long long* cycles_d, float* sink_d) {
  auto kernel = promotion_kernel<kTileN, kSliceN, kRs, kMode>;
  constexpr int kBytes = promotion_smem_bytes(kMode);
  DMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  const int iters = std::max(1, g_iters / 4);
  const double per_kblock = median_sm_cycles(sms, cycles_d, [&] {
    kernel<<<sms, promotion_threads(kMode, wgs), kBytes>>>(iters, delay, g_data_d, cycles_d, sink_d);
  }) / iters;
  const double macs = 64.0 * kTileN * 128 * wgs;  // per k block, all warpgroups
  return {kTileN, kSliceN, wgs, delay, kMode, kRs, per_kblock, macs / per_kblock / 4096.0};
}

int promotion_main(int sms, long long* cycles_d, float* sink_d) {
  float* scales = nullptr;
  DMOE_CUDA_CHECK(cudaMalloc(&scales, sizeof(float) << 20));
  DMOE_CUDA_CHECK(cudaMemset(scales, 0x3F, sizeof(float) << 20));  // 0x3F3F3F3F = 0.747; as E4M3 bytes 1.875
  g_data_d = scales;
  std::printf("\n%-7s %-7s %-3s %4s %6s %4s %16s %8s\n", "tile_n", "slice_n", "A", "wgs", "delay", "mode",
              "cycles/k block", "x peak");
  auto print = [](const PromotionRow& r) {  // each row as it is measured
    std::printf("%-7d %-7d %-3s %4d %6d %4d %16.1f %7.2fx\n", r.tile_n, r.slice_n, r.rs ? "RS" : "SS", r.wgs, r.delay,
                r.mode, r.cycles_per_kblock, r.x_peak);
    std::fflush(stdout);
  };
  for (int wgs : {1, 2}) {
    for (int delay : wgs == 1 ? std::vector<int>{0} : std::vector<int>{0, 100, 300}) {
      print(measure_promotion<256, 64, true>(wgs, delay, sms, cycles_d, sink_d));   // main's 128x256
      print(measure_promotion<256, 64, false>(wgs, delay, sms, cycles_d, sink_d));
      print(measure_promotion<256, 128, false>(wgs, delay, sms, cycles_d, sink_d));
      print(measure_promotion<128, 128, false>(wgs, delay, sms, cycles_d, sink_d));  // DeepGEMM's shape
    }
  }
  for (int wgs : {1, 2}) {
    print(measure_promotion<256, 64, true, 1>(wgs, 0, sms, cycles_d, sink_d));
    print(measure_promotion<256, 64, true, 2>(wgs, 0, sms, cycles_d, sink_d));
    print(measure_promotion<256, 64, true, 3>(wgs, 0, sms, cycles_d, sink_d));
  }
  // The candidates of G66 with the pipeline: 128x256 as two 128-column SS slices, 128x128 as one.
  for (int delay : {0, 100, 300}) {
    print(measure_promotion<256, 64, true, 3>(2, delay, sms, cycles_d, sink_d));
    print(measure_promotion<256, 128, false, 3>(2, delay, sms, cycles_d, sink_d));
    print(measure_promotion<128, 128, false, 3>(2, delay, sms, cycles_d, sink_d));
  }
  DMOE_CUDA_CHECK(cudaFree(scales));
  return 0;
}

// ---- the FP8 WGRAD's k loop (--wgrad) ------------------------------------------------------------
// The WGRAD tile's consumers (mainloop_fp8_blockwise.cuh) on mode 3's pipeline: per 128-deep k block
// each of two warpgroups contracts its m64 x kTileN block in slices of kSliceN columns (four k32 E4M3
// wgmmas each) and folds each slice into its FP32 accumulators with a per-element scale
// a_scale[row] * b_scale[column] read from the stage's scale copy (one FMUL and one FFMA per element).
// kLoop: kSerial waits for each slice and folds it before the next is issued (main's 128x256 loop;
// kSerialNoFold the same without the fold: what the waits alone cost); kFoldUnderNext issues slice
// s + 1 once slice s is done and folds s under it, from two scratch slices (perf_history G145; with
// slice s + 1 issued before the wait, wait_group 1, ptxas serializes the wgmmas, C7514). kRs: A from
// registers, loaded once per k block by ldmatrix (only B read from shared memory per wgmma).
// Block `it` of a ring of kStages slots as the GEMMs' pipeline state (gemm::TmaPipeline, whose
// barriers the WGRAD loop kernels use): its slot and the parity of its turn.
template <int kStages>
DMOE_DEVICE gemm::PipelineState<kStages> ring_state(int it) {
  return {it % kStages, static_cast<uint32_t>(it / kStages) & 1u};
}

constexpr int kWgradStages = 4;
constexpr int kWgradStageBytes = 50 * 1024;  // A 128 x 128 B, B up to 256 x 128 B, scales (128 + 256) x 4 B
constexpr int kWgradScaleOffset = 48 * 1024;
constexpr int kWgradSmemBytes = kWgradStages * kWgradStageBytes + 1024;  // + the ring's barriers
using WgradRing = gemm::TmaPipeline<kWgradStages>;

enum class WgradLoop { kSerial, kSerialNoFold, kFoldUnderNext };

template <int kTileN, int kSliceN, bool kRs, WgradLoop kLoop>
__global__ void __launch_bounds__(384, 1)
    wgrad_kloop_kernel(int iters, int span_blocks, const float* __restrict__ g_data, long long* cycles, float* sink) {
  constexpr int kSlices = kTileN / kSliceN, kSliceAcc = kSliceN / 2;
  constexpr uint32_t kDataBytes = (128 + kTileN) * 128, kScaleBytes = (128 + kTileN) * 4;
  constexpr bool kAhead = kLoop == WgradLoop::kFoldUnderNext;  // the next block's first slice issued ahead
  static_assert(!kAhead || kSlices % 2 == 0, "slices alternate between two scratch buffers, slice 0 in the first");
  static_assert(kRs || kSliceN >= 64, "SS slices narrower than 64 columns are shared-memory bound");
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto& ring_storage = *reinterpret_cast<WgradRing::SharedStorage*>(smem + kWgradStages * kWgradStageBytes);
  // The consumers run one block more than they time when the next block's first slices are issued
  // ahead: the producer fills exactly the blocks they wait for.
  const int blocks = iters + (kAhead ? 1 : 0);
  if (threadIdx.x == 0) WgradRing::init(ring_storage, 8);  // one release per consumer warp
  __syncthreads();
  const WgradRing ring(ring_storage);
  auto stage_of = [&](int it) { return base + static_cast<uint32_t>(it % kWgradStages) * kWgradStageBytes; };
  if (threadIdx.x >= 256) {  // the producer warpgroup: one thread copies each block in
    ptx::setmaxnreg_dec<24>();
    if (threadIdx.x == 256) {
      for (int it = 0; it < blocks; ++it) {
        ring.producer_acquire(ring_state<kWgradStages>(it));
        const uint32_t bar = ring.producer_expect(ring_state<kWgradStages>(it), kDataBytes + kScaleBytes);
        const int64_t block = (static_cast<int64_t>(it) * gridDim.x + blockIdx.x) % span_blocks;
        const uint8_t* src = reinterpret_cast<const uint8_t*>(g_data) + block * kWgradStageBytes;
        ptx::bulk_load_1d(stage_of(it), src, kDataBytes, bar);
        ptx::bulk_load_1d(stage_of(it) + kWgradScaleOffset, src + kWgradScaleOffset, kScaleBytes, bar);
      }
    }
    return;
  }
  ptx::setmaxnreg_inc<240>();
  const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, wg = threadIdx.x / 128;
  const uint32_t frag_row = wg * 64 + 16 * warp + lane / 4;  // the fold's A scale rows: this and + 8
  const uint32_t b_off = kWgradScaleOffset + (128 + 2 * (lane % 4)) * 4;
  const uint32_t j = lane / 8, i8 = lane % 8, ld_row = wg * 64 + 16 * warp + i8 + 8 * (j % 2);
  auto wait_full = [&](int it) { ring.consumer_wait(ring_state<kWgradStages>(it)); };
  uint32_t a[4][4];
  auto load_frags = [&](uint32_t stage) {
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) ptx::ldmatrix_x4(stage + ld_row * 128 + (((2 * kk + j / 2) ^ i8) << 4), a[kk]);
  };
  auto issue = [&](uint32_t stage, int s, float(&scratch)[kSliceAcc]) {
    const uint64_t db = ptx::make_kmajor_desc(stage + 128 * 128 + s * kSliceN * 128);
    const uint64_t da = ptx::make_kmajor_desc(stage + wg * 64 * 128);
    ptx::wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      if constexpr (kRs) ptx::WgmmaE4m3Rs<kSliceN>::mma(scratch, a[kk], ptx::desc_advance(db, kk * 32), kk > 0 ? 1u : 0u);
      else
        ptx::WgmmaE4m3<kSliceN>::mma(scratch, ptx::desc_advance(da, kk * 32), ptx::desc_advance(db, kk * 32),
                                     kk > 0 ? 1u : 0u);
    }
    ptx::wgmma_commit();
  };
  float acc[kTileN / 2];
#pragma unroll
  for (int i = 0; i < kTileN / 2; ++i) acc[i] = 0.0f;
  auto fold = [&](uint32_t stage, int s, const float(&scratch)[kSliceAcc]) {
    const float sa_lo = ptx::ld_shared_f32(stage + kWgradScaleOffset + frag_row * 4);
    const float sa_hi = ptx::ld_shared_f32(stage + kWgradScaleOffset + (frag_row + 8) * 4);
#pragma unroll
    for (int c = 0; c < kSliceN / 8; ++c) {
      const float2 sb = ptx::ld_shared_f32x2(stage + b_off + (s * kSliceN + 8 * c) * 4);
#pragma unroll
      for (int q = 0; q < 4; ++q)
        acc[s * kSliceAcc + 4 * c + q] = fmaf(scratch[4 * c + q], (q / 2 == 0 ? sa_lo : sa_hi) * (q % 2 == 0 ? sb.x : sb.y),
                                              acc[s * kSliceAcc + 4 * c + q]);
    }
  };
  auto release = [&](int it) { ring.consumer_release(it % kWgradStages); };
  ptx::named_barrier_sync(1, 256);  // the consumers only: the producer has left
  const long long t0 = clock64();
  if constexpr (kLoop == WgradLoop::kFoldUnderNext) {
    // Slice s + 1 is issued once slice s is done (wait_group 0), then slice s is folded under it.
    float buf[2][kSliceAcc];
    wait_full(0);
    if constexpr (kRs) load_frags(stage_of(0));
    issue(stage_of(0), 0, buf[0]);
    for (int it = 0; it < iters; ++it) {
      const uint32_t stage = stage_of(it);
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_operands(buf[s % 2]);
        if (s + 1 < kSlices) {
          issue(stage, s + 1, buf[(s + 1) % 2]);
          fold(stage, s, buf[s % 2]);
        } else {  // the next block's first slice runs under this block's last fold
          if constexpr (kRs) ptx::wgmma_fence_operands(a);
          wait_full(it + 1);
          if constexpr (kRs) load_frags(stage_of(it + 1));
          issue(stage_of(it + 1), 0, buf[0]);
          fold(stage, s, buf[s % 2]);
          release(it);
        }
      }
    }
    ptx::wgmma_wait<0>();
    ptx::wgmma_fence_operands(buf[0]);
    release(iters);
  } else {
    float scratch[kSliceAcc];
    for (int it = 0; it < iters; ++it) {
      const uint32_t stage = stage_of(it);
      wait_full(it);
      if constexpr (kRs) load_frags(stage);
#pragma unroll
      for (int s = 0; s < kSlices; ++s) {
        issue(stage, s, scratch);
        ptx::wgmma_wait<0>();
        ptx::wgmma_fence_operands(scratch);
        if constexpr (kLoop == WgradLoop::kSerial) fold(stage, s, scratch);
      }
      if constexpr (kRs) ptx::wgmma_fence_operands(a);
      release(it);
    }
  }
  ptx::wgmma_fence_operands(acc);
  ptx::named_barrier_sync(1, 256);
  finish_timed(t0, acc, cycles, sink);
}

// kSpanMiB: the distinct operand bytes the producers cycle through (CTA c's block i is block
// (i * CTAs + c) of the span): 0 for 16 blocks (800 KiB, L2-hot), else that many MiB -- spread over the
// L2 as a GEMM's operands are, or larger than it (every block from HBM).
template <int kTileN, int kSliceN, bool kRs, WgradLoop kLoop, int kSpanMiB = 0>
double measure_wgrad_kloop(int sms, const float* g_data, long long* cycles_d, float* sink_d) {
  auto kernel = wgrad_kloop_kernel<kTileN, kSliceN, kRs, kLoop>;
  DMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kWgradSmemBytes));
  const int iters = std::max(1, g_iters / 4);
  const int span_blocks = kSpanMiB == 0 ? 16 : static_cast<int>((int64_t{kSpanMiB} << 20) / kWgradStageBytes);
  return median_sm_cycles(sms, cycles_d,
                          [&] { kernel<<<sms, 384, kWgradSmemBytes>>>(iters, span_blocks, g_data, cycles_d, sink_d); }) /
         iters;
}

// One 128x128 tile per warpgroup (perf_history G142 (a)): each consumer warpgroup contracts its own
// tile from its own three-stage ring (A 128 rows, B 128 columns, their 256 scales), filled by its own
// producer thread, as two m64 x n128 SS slices per k block, each waited for and folded (main's serial
// loop). Nothing ties the two warpgroups to the same stage, so one can fold while the other's wgmmas
// run; `delay` starts warpgroup 1 that many cycles late.
constexpr int kPerWgStages = 3;
constexpr int kPerWgStageBytes = 33 * 1024;  // A 16 KiB, B 16 KiB, scales 1 KiB
constexpr int kPerWgScaleOffset = 32 * 1024;
constexpr int kPerWgSmemBytes = 2 * kPerWgStages * kPerWgStageBytes + 1024;
using PerWgRing = gemm::TmaPipeline<kPerWgStages>;

__global__ void __launch_bounds__(384, 1)
    wgrad_per_warpgroup_kernel(int iters, int delay, const float* __restrict__ g_data, long long* cycles, float* sink) {
  constexpr uint32_t kDataBytes = 256 * 128, kScaleBytes = 256 * 4;
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  auto* ring_storage = reinterpret_cast<PerWgRing::SharedStorage*>(smem + 2 * kPerWgStages * kPerWgStageBytes);
  auto stage_of = [&](uint32_t w, int it) {
    return base + (w * kPerWgStages + static_cast<uint32_t>(it % kPerWgStages)) * kPerWgStageBytes;
  };
  if (threadIdx.x == 0)
    for (int w = 0; w < 2; ++w) PerWgRing::init(ring_storage[w], 4);  // one release per warp of its warpgroup
  __syncthreads();
  if (threadIdx.x >= 256) {  // lane 0 of warps 8 and 9 fill rings 0 and 1
    ptx::setmaxnreg_dec<24>();
    if (threadIdx.x == 256 || threadIdx.x == 288) {
      const uint32_t w = (threadIdx.x - 256) / 32;
      const PerWgRing ring(ring_storage[w]);
      for (int it = 0; it < iters; ++it) {
        ring.producer_acquire(ring_state<kPerWgStages>(it));
        const uint32_t bar = ring.producer_expect(ring_state<kPerWgStages>(it), kDataBytes + kScaleBytes);
        const uint8_t* src = reinterpret_cast<const uint8_t*>(g_data) + ((it + 7 * w) % 16) * kPerWgStageBytes;
        ptx::bulk_load_1d(stage_of(w, it), src, kDataBytes, bar);
        ptx::bulk_load_1d(stage_of(w, it) + kPerWgScaleOffset, src + kPerWgScaleOffset, kScaleBytes, bar);
      }
    }
    return;
  }
  ptx::setmaxnreg_inc<240>();
  const uint32_t lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4, wg = threadIdx.x / 128;
  const uint32_t frag_row = 16 * warp + lane / 4;  // the fold's A scale rows (+ 64 m, + 8)
  const uint32_t b_off = kPerWgScaleOffset + (128 + 2 * (lane % 4)) * 4;
  float acc[2][64], scratch[64];
#pragma unroll
  for (int m = 0; m < 2; ++m)
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[m][i] = 0.0f;
  ptx::named_barrier_sync(1, 256);
  const long long t0 = clock64();
  if (wg == 1)
    while (clock64() - t0 < delay) {
    }
  const PerWgRing ring(ring_storage[wg]);
  for (int it = 0; it < iters; ++it) {
    const uint32_t stage = stage_of(wg, it);
    ring.consumer_wait(ring_state<kPerWgStages>(it));
    const uint64_t db = ptx::make_kmajor_desc(stage + 128 * 128);
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const uint64_t da = ptx::make_kmajor_desc(stage + m * 64 * 128);
      ptx::wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
        ptx::WgmmaE4m3<128>::mma(scratch, ptx::desc_advance(da, kk * 32), ptx::desc_advance(db, kk * 32), kk > 0 ? 1u : 0u);
      ptx::wgmma_commit();
      ptx::wgmma_wait<0>();
      ptx::wgmma_fence_operands(scratch);
      const float sa_lo = ptx::ld_shared_f32(stage + kPerWgScaleOffset + (64 * m + frag_row) * 4);
      const float sa_hi = ptx::ld_shared_f32(stage + kPerWgScaleOffset + (64 * m + frag_row + 8) * 4);
#pragma unroll
      for (int c = 0; c < 16; ++c) {
        const float2 sb = ptx::ld_shared_f32x2(stage + b_off + 8 * c * 4);
#pragma unroll
        for (int q = 0; q < 4; ++q)
          acc[m][4 * c + q] = fmaf(scratch[4 * c + q], (q / 2 == 0 ? sa_lo : sa_hi) * (q % 2 == 0 ? sb.x : sb.y),
                                   acc[m][4 * c + q]);
      }
    }
    ring.consumer_release(it % kPerWgStages);
  }
  ptx::wgmma_fence_operands(acc[0]);
  ptx::wgmma_fence_operands(acc[1]);
  ptx::named_barrier_sync(1, 256);
  finish_timed(t0, reinterpret_cast<const float(&)[128]>(acc), cycles, sink);
}

template <int kDelay>
double measure_wgrad_per_warpgroup(int sms, const float* g_data, long long* cycles_d, float* sink_d) {
  DMOE_CUDA_CHECK(cudaFuncSetAttribute(wgrad_per_warpgroup_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kPerWgSmemBytes));
  const int iters = std::max(1, g_iters / 4);
  return median_sm_cycles(sms, cycles_d, [&] {
    wgrad_per_warpgroup_kernel<<<sms, 384, kPerWgSmemBytes>>>(iters, kDelay, g_data, cycles_d, sink_d);
  }) / iters;
}

// The candidates, alternated over `rounds` so clock drift falls on all alike: cycles per k block (both
// warpgroups) and the fraction of the E4M3 peak (4096 MACs per cycle and SM).
constexpr int kMaxSpanMiB = 256;

int wgrad_main(int sms, long long* cycles_d, float* sink_d, int rounds) {
  float* data = nullptr;
  const size_t floats = (size_t{kMaxSpanMiB} << 20) / 4 + kWgradStageBytes;
  DMOE_CUDA_CHECK(cudaMalloc(&data, sizeof(float) * floats));
  DMOE_CUDA_CHECK(cudaMemset(data, 0x3F, sizeof(float) * floats));  // scales 0.747, E4M3 bytes 1.875
  struct Candidate {
    const char* name;
    int tile_n;
    double (*run)(int, const float*, long long*, float*);
  };
  constexpr WgradLoop kSerial = WgradLoop::kSerial, kNoFold = WgradLoop::kSerialNoFold, kUnder = WgradLoop::kFoldUnderNext;
  const Candidate candidates[] = {
      {"64x256: 2 x n128 SS, serial (main's 128x256 WGRAD)", 256, measure_wgrad_kloop<256, 128, false, kSerial>},
      {"64x256: 2 x n128 SS, serial, no fold (the waits alone)", 256, measure_wgrad_kloop<256, 128, false, kNoFold>},
      {"64x256: 2 x n128 SS, serial, operands over 24 MiB (L2)", 256, measure_wgrad_kloop<256, 128, false, kSerial, 24>},
      {"64x256: 2 x n128 SS, serial, operands over 256 MiB (HBM)", 256,
       measure_wgrad_kloop<256, 128, false, kSerial, kMaxSpanMiB>},
      {"64x256: 4 x n64 RS, serial", 256, measure_wgrad_kloop<256, 64, true, kSerial>},
      {"64x256: 8 x n32 RS, serial", 256, measure_wgrad_kloop<256, 32, true, kSerial>},
      {"64x256: 4 x n64 RS, fold under the next slice", 256, measure_wgrad_kloop<256, 64, true, kUnder>},
      {"64x256: 8 x n32 RS, fold under the next slice (G145)", 256, measure_wgrad_kloop<256, 32, true, kUnder>},
      {"64x256: 8 x n32 RS, fold under the next slice, over 24 MiB", 256, measure_wgrad_kloop<256, 32, true, kUnder, 24>},
      {"64x128: 2 x n64 RS, fold under the next slice (~ main's 128x128 WGRAD)", 128,
       measure_wgrad_kloop<128, 64, true, kUnder>},
      // Per k block each warpgroup contracts 128 x 128 here: the same MACs as 64 x 256.
      {"128x128 per warpgroup, own ring: 2 x m64n128 SS, serial (G142 a)", 256, measure_wgrad_per_warpgroup<0>},
      {"128x128 per warpgroup, own ring, warpgroup 1 300 cycles late", 256, measure_wgrad_per_warpgroup<300>},
  };
  std::printf("\n%-70s %5s %16s %8s\n", "pattern (per warpgroup, two warpgroups)", "round", "cycles/k block", "x peak");
  for (int r = 0; r < rounds; ++r) {
    for (const Candidate& c : candidates) {
      const double per_kblock = c.run(sms, data, cycles_d, sink_d);
      const double macs = 2.0 * 64 * c.tile_n * 128;
      std::printf("%-70s %5d %16.1f %7.2fx\n", c.name, r + 1, per_kblock, macs / per_kblock / 4096.0);
      std::fflush(stdout);
    }
  }
  DMOE_CUDA_CHECK(cudaFree(data));
  return 0;
}

struct Row {
  std::string family;
  int n, wgs, chains;
  double cycles_per_wgmma, macs_per_cycle;
};


template <template <int> class Op, int kN, int kChains>
Row measure(int wgs, int sms, long long* cycles_d, float* sink_d) {
  auto kernel = wgmma_rate_kernel<Op, kN, kChains>;
  DMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  const double per_sm =
      median_sm_cycles(sms, cycles_d, [&] { kernel<<<sms, 128 * wgs, kSmemBytes>>>(g_iters, cycles_d, sink_d); });
  const double wgmmas = static_cast<double>(g_iters) * kGroup * wgs;
  return {Op<kN>::kName, kN, wgs, kChains, per_sm / wgmmas, Op<kN>::kMacs * wgmmas / per_sm};
}

int bench_main(int argc, char** argv) {
  bool promotion = false, wgrad = false;
  int rounds = 2;
  const int rc = testing::walk_bench_args(argc, argv, "[--iters N] [--promotion] [--wgrad [--rounds N]]",
                                          [&](const std::string& a, auto value) {
    if (a == "--iters") g_iters = std::max(1, std::atoi(value().c_str()));
    else if (a == "--promotion") promotion = true;
    else if (a == "--wgrad") wgrad = true;
    else if (a == "--rounds") rounds = std::max(1, std::atoi(value().c_str()));
    else return false;
    return true;
  });
  if (rc >= 0) return rc;
  cudaDeviceProp prop{};
  DMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  const int sms = prop.multiProcessorCount;
  long long* cycles_d = nullptr;
  float* sink_d = nullptr;
  DMOE_CUDA_CHECK(cudaMalloc(&cycles_d, sizeof(long long) * sms));
  DMOE_CUDA_CHECK(cudaMalloc(&sink_d, sizeof(float) * sms * 512));
  if (wgrad) {
    std::printf("bench_wgmma_rate --wgrad on %s (%d SMs): %d k blocks per warpgroup, %d rounds\n", prop.name, sms,
                std::max(1, g_iters / 4), rounds);
    const int wrc = wgrad_main(sms, cycles_d, sink_d, rounds);
    DMOE_CUDA_CHECK(cudaFree(cycles_d));
    DMOE_CUDA_CHECK(cudaFree(sink_d));
    return wrc;
  }
  if (promotion) {
    std::printf("bench_wgmma_rate --promotion on %s (%d SMs): %d k blocks per warpgroup\n", prop.name, sms,
                std::max(1, g_iters / 4));
    const int prc = promotion_main(sms, cycles_d, sink_d);
    DMOE_CUDA_CHECK(cudaFree(cycles_d));
    DMOE_CUDA_CHECK(cudaFree(sink_d));
    return prc;
  }
  std::printf("bench_wgmma_rate on %s (%d SMs): %d groups of %d wgmmas per warpgroup\n", prop.name, sms, g_iters,
              kGroup);
  std::vector<Row> rows;
  auto small_n = [&](auto n_tag) {
    constexpr int kN = decltype(n_tag)::value;
    for (int wgs : {1, 2, 4}) {
      rows.push_back(measure<SsBf16, kN, 1>(wgs, sms, cycles_d, sink_d));
      rows.push_back(measure<SsBf16, kN, 2>(wgs, sms, cycles_d, sink_d));
      rows.push_back(measure<SsE4m3, kN, 1>(wgs, sms, cycles_d, sink_d));
      rows.push_back(measure<SsE4m3, kN, 2>(wgs, sms, cycles_d, sink_d));
      rows.push_back(measure<RsF16, kN, 1>(wgs, sms, cycles_d, sink_d));
      rows.push_back(measure<RsF16, kN, 2>(wgs, sms, cycles_d, sink_d));
      if constexpr (kN >= 32) {  // the E4M3 RS wrappers: n32 and n64
        rows.push_back(measure<RsE4m3, kN, 1>(wgs, sms, cycles_d, sink_d));
        rows.push_back(measure<RsE4m3, kN, 2>(wgs, sms, cycles_d, sink_d));
      }
    }
  };
  small_n(std::integral_constant<int, 16>{});
  small_n(std::integral_constant<int, 32>{});
  small_n(std::integral_constant<int, 64>{});
  for (int wgs : {1, 2}) {
    rows.push_back(measure<SsBf16, 128, 1>(wgs, sms, cycles_d, sink_d));
    rows.push_back(measure<SsE4m3, 128, 1>(wgs, sms, cycles_d, sink_d));
    rows.push_back(measure<RsF16, 128, 1>(wgs, sms, cycles_d, sink_d));
    rows.push_back(measure<SsBf16, 256, 1>(wgs, sms, cycles_d, sink_d));
    rows.push_back(measure<SsE4m3, 256, 1>(wgs, sms, cycles_d, sink_d));
  }
  DMOE_CUDA_CHECK(cudaFree(cycles_d));
  DMOE_CUDA_CHECK(cudaFree(sink_d));
  // The measured peak of a family: its best MACs per cycle (RS F16 shares the 16-bit peak of BF16 SS).
  auto peak = [&](const std::string& family) {
    const std::string key = family.rfind("e4m3", 0) == 0 ? "e4m3 SS" : "bf16 SS";
    double best = 0;
    for (const Row& r : rows)
      if (r.family == key) best = std::max(best, r.macs_per_cycle);
    return best;
  };
  std::printf("\n%-8s %4s %4s %6s %14s %12s %9s\n", "family", "N", "wgs", "chains", "cycles/wgmma", "MACs/cycle",
              "x peak");
  for (const Row& r : rows)
    std::printf("%-8s %4d %4d %6d %14.1f %12.0f %8.2fx\n", r.family.c_str(), r.n, r.wgs, r.chains, r.cycles_per_wgmma,
                r.macs_per_cycle, r.macs_per_cycle / peak(r.family));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return dist_moe::testing::guarded_main("bench_wgmma_rate", [&] { return bench_main(argc, argv); });
}
