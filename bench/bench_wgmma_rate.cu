// The tensor cores' ceiling per wgmma shape: one CTA per SM whose warpgroups issue nothing but
// wgmmas on resident operands (shared-memory tiles and A registers written once, nonzero), groups of
// 8 committed and waited with one group in flight -- the pattern of our mainloops. Per instruction
// family (BF16 and E4M3 with both operands in shared memory, FP16 with A from registers), N, the
// warpgroups issuing and the independent accumulator chains each interleaves, it prints the SM
// cycles per wgmma (clock64 around the loop, so independent of the clock), the MACs per cycle and
// the fraction of the family's best row in the same run (the measured peak). The decode GEMMs issue
// small-N wgmmas: this says what one costs (docs/perf_history.md G61).
//
//   bench_wgmma_rate [--iters N]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/wgmma.cuh"
#include "testing/bench_args.h"
#include "testing/main_guard.h"

namespace {

using namespace dist_moe;

constexpr int kGroup = 8;                 // wgmmas per commit group
constexpr int kSmemBytes = 64 * 1024;     // the A and B tiles (a 64 x 16 K-major tile is 2 KiB; 256 x 16 8 KiB)
constexpr int kBOffset = 32 * 1024;

// The three families; each runs m64 x kN x (32 bytes of K).
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

template <template <int> class Op, int kN, int kChains>
__global__ void __launch_bounds__(kN >= 128 ? 256 : 512, 1) wgmma_rate_kernel(int iters, long long* cycles, float* sink) {
  extern __shared__ __align__(1024) uint8_t smem[];
  for (int i = threadIdx.x; i < kSmemBytes / 4; i += blockDim.x)
    reinterpret_cast<uint32_t*>(smem)[i] = operand_word(static_cast<uint32_t>(i) * 2654435761u + blockIdx.x);
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

struct Row {
  std::string family;
  int n, wgs, chains;
  double cycles_per_wgmma, macs_per_cycle;
};

int g_iters = 4000;

template <template <int> class Op, int kN, int kChains>
Row measure(int wgs, int sms, long long* cycles_d, float* sink_d) {
  auto kernel = wgmma_rate_kernel<Op, kN, kChains>;
  DMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  for (int warm = 0; warm < 2; ++warm) {  // the first launch warms the clock; the second is kept
    kernel<<<sms, 128 * wgs, kSmemBytes>>>(g_iters, cycles_d, sink_d);
    DMOE_CUDA_CHECK_LAUNCH();
  }
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<long long> cycles(sms);
  DMOE_CUDA_CHECK(cudaMemcpy(cycles.data(), cycles_d, sizeof(long long) * sms, cudaMemcpyDeviceToHost));
  std::sort(cycles.begin(), cycles.end());
  const double per_sm = static_cast<double>(cycles[sms / 2]);  // the median SM
  const double wgmmas = static_cast<double>(g_iters) * kGroup * wgs;
  return {Op<kN>::kName, kN, wgs, kChains, per_sm / wgmmas, Op<kN>::kMacs * wgmmas / per_sm};
}

int bench_main(int argc, char** argv) {
  const int rc = testing::walk_bench_args(argc, argv, "[--iters N]", [&](const std::string& a, auto value) {
    if (a == "--iters") g_iters = std::max(1, std::atoi(value().c_str()));
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
    const std::string key = family == "e4m3 SS" ? "e4m3 SS" : "bf16 SS";
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
