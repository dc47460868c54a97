// The accumulating WGRAD epilogue's memory side alone (perf_history G146): 128 x 256 BF16 tiles leave
// shared memory by TMA, in the writer's 64-column boxes, into a gradient [R, C] of a WGRAD's size --
// plain stores (a written gradient), reduce-adds (an accumulated one), reduce-adds with each tile's
// old values pulled into L2 one tile ahead (the kernels' prefetch, G72), and the accumulation done by
// the CTA (old values loaded, added in registers, stored; G147). One persistent CTA per
// SM walks the tiles with nothing else to do, at most two tiles' boxes still reading shared memory (the
// writer's buffers). Against the device-to-device copy of the same bytes in the same run: what a
// WGRAD's gradient traffic costs at best, and whether the L2's BF16 reductions are slower than its
// plain stores (perf_history G142 (c)).
//
//   bench_gradient_stores [--shapes qwen3_30b,dsv3_prefill] [--iters N] [--rounds N]
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/device/ptx/fence.cuh"
#include "dist_moe/device/ptx/mbarrier.cuh"
#include "dist_moe/device/ptx/tma.cuh"
#include "dist_moe/workloads.h"
#include "gemm/grouped_gemm_launch.h"
#include "testing/bench_args.h"
#include "testing/device_buffer.h"
#include "testing/event_timing.h"
#include "testing/main_guard.h"

namespace {

using namespace dist_moe;

constexpr int kTileRows = 128, kTileCols = 256, kBoxCols = 64;
constexpr int kBoxes = kTileCols / kBoxCols;
constexpr int kTileBytes = kTileRows * kTileCols * 2;  // 64 KiB: four 16 KiB boxes
constexpr int kInFlight = 2;                           // tiles whose boxes may still read shared memory

enum class Mode { kStore, kReduce, kReducePrefetched, kLoadAddStore };
const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kStore: return "TMA store (written)";
    case Mode::kReduce: return "TMA reduce-add (accumulated)";
    case Mode::kReducePrefetched: return "reduce-add, old tile prefetched to L2";
    case Mode::kLoadAddStore: return "load old, add in registers, store";
  }
  return "";
}

template <Mode kMode>
__global__ void __launch_bounds__(128, 1) gradient_store_kernel(const __grid_constant__ CUtensorMap map, int tiles_m,
                                                                int tiles_n) {
  extern __shared__ __align__(1024) uint8_t smem[];
  // A small BF16 value (2^-12) in every element: sums stay finite however often a run adds them.
  for (int i = threadIdx.x; i < kTileBytes / 4; i += blockDim.x) reinterpret_cast<uint32_t*>(smem)[i] = 0x39803980u;
  ptx::fence_proxy_async_shared();  // the generic stores, before the TMA (async proxy) reads them
  __syncthreads();
  if (threadIdx.x != 0) return;
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tiles = tiles_m * tiles_n;
  auto prefetch = [&](int tile) {
    if (tile >= tiles) return;
    for (int b = 0; b < kBoxes; ++b)
      ptx::tma_prefetch_l2_2d(&map, (tile % tiles_n) * kTileCols + b * kBoxCols, (tile / tiles_n) * kTileRows);
  };
  if constexpr (kMode == Mode::kReducePrefetched) prefetch(blockIdx.x);
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    if constexpr (kMode == Mode::kReducePrefetched) prefetch(tile + gridDim.x);
    const int c1 = (tile / tiles_n) * kTileRows, c0 = (tile % tiles_n) * kTileCols;
    for (int b = 0; b < kBoxes; ++b) {
      const uint32_t src = base + b * (kTileBytes / kBoxes);
      if constexpr (kMode == Mode::kStore) ptx::tma_store_2d(&map, src, c0 + b * kBoxCols, c1);
      else ptx::tma_reduce_add_2d(&map, src, c0 + b * kBoxCols, c1);
    }
    ptx::bulk_commit_group();
    ptx::bulk_wait_group_read<kInFlight - 1>();
  }
  ptx::bulk_wait_group<0>();
}

// kLoadAddStore (perf_history G147): the accumulation done by the CTA instead of the L2 -- each 64-column
// box's old values loaded by TMA into a ring of kRing 16 KiB slots, the new BF16 value added in FP32 and
// rounded to BF16 in place by the CTA's threads (for two BF16 inputs the same bits as the L2's BF16 add),
// the box stored back by TMA; the next tile's old values prefetched into L2 as in the prefetched mode. A
// slot is loaded again once the store of its previous box has read it.
constexpr int kRing = 4;
constexpr int kBoxBytes = kTileBytes / kBoxes;  // 16 KiB: 64 columns x 128 rows
constexpr int kLoadAddStoreSmem = kRing * kBoxBytes + 8 * kRing;

__global__ void __launch_bounds__(128, 1)
    gradient_load_add_store_kernel(const __grid_constant__ CUtensorMap map, int tiles_m, int tiles_n) {
  extern __shared__ __align__(1024) uint8_t smem[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t full = base + kRing * kBoxBytes;
  const int tiles = tiles_m * tiles_n;
  const int my_tiles = blockIdx.x < tiles ? (tiles - 1 - static_cast<int>(blockIdx.x)) / static_cast<int>(gridDim.x) + 1 : 0;
  const int boxes = my_tiles * kBoxes;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kRing; ++s) ptx::mbarrier_init(full + 8 * s, 1);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  // Box i of this CTA: tile blockIdx.x + (i / kBoxes) gridDim.x, columns (i % kBoxes) * 64.
  auto tile_of = [&](int i) { return static_cast<int>(blockIdx.x) + (i / kBoxes) * static_cast<int>(gridDim.x); };
  auto col_of = [&](int i) { return (tile_of(i) % tiles_n) * kTileCols + (i % kBoxes) * kBoxCols; };
  auto row_of = [&](int i) { return (tile_of(i) / tiles_n) * kTileRows; };
  auto load = [&](int i) {  // thread 0
    const uint32_t slot = static_cast<uint32_t>(i % kRing);
    ptx::mbarrier_arrive_expect_tx(full + 8 * slot, kBoxBytes);
    ptx::tma_load_2d(base + slot * kBoxBytes, &map, full + 8 * slot, col_of(i), row_of(i));
  };
  auto prefetch_tile = [&](int i) {  // the tile of box i, into L2
    if (i >= boxes) return;
    for (int b = 0; b < kBoxes; ++b) ptx::tma_prefetch_l2_2d(&map, col_of(i) + b * kBoxCols, row_of(i));
  };
  if (threadIdx.x == 0) {
    prefetch_tile(kBoxes);
    for (int i = 0; i < kRing && i < boxes; ++i) load(i);
  }
  const __nv_bfloat162 add = __floats2bfloat162_rn(1.0f / 4096, 1.0f / 4096);  // the other modes' value
  for (int i = 0; i < boxes; ++i) {
    const uint32_t slot = static_cast<uint32_t>(i % kRing);
    if (threadIdx.x == 0 && i % kBoxes == 0) prefetch_tile(i + 2 * kBoxes);  // one tile ahead of the loads
    while (!ptx::mbarrier_try_wait_parity(full + 8 * slot, static_cast<uint32_t>(i / kRing) & 1u)) {
    }
    __nv_bfloat162* words = reinterpret_cast<__nv_bfloat162*>(smem + slot * kBoxBytes);
    for (int w = threadIdx.x; w < kBoxBytes / 4; w += blockDim.x) {
      const float2 old = __bfloat1622float2(words[w]), inc = __bfloat1622float2(add);
      words[w] = __floats2bfloat162_rn(old.x + inc.x, old.y + inc.y);
    }
    ptx::fence_proxy_async_shared();  // the generic stores, before the TMA store reads them
    __syncthreads();
    if (threadIdx.x == 0) {
      ptx::tma_store_2d(&map, base + slot * kBoxBytes, col_of(i), row_of(i));
      ptx::bulk_commit_group();
      // The previous box's slot is free once its store has read it: load the box kRing after it.
      ptx::bulk_wait_group_read<1>();
      if (i >= 1 && i - 1 + kRing < boxes) load(i - 1 + kRing);
    }
  }
  if (threadIdx.x == 0) ptx::bulk_wait_group<0>();
}

struct Gradient {
  const char* name;
  int64_t rows, cols;  // all local experts' gradients stacked along the rows
};

// The WGRAD outputs of a shape at EP1: W13 [E, 2F, D] and W2 [E, D, F].
std::vector<Gradient> gradients_of(const Workload& w) {
  return {{"W13", w.experts * 2 * w.intermediate, w.hidden}, {"W2", w.experts * w.hidden, w.intermediate}};
}

int g_iters = 10, g_rounds = 2;

int bench_main(int argc, char** argv) {
  std::string shapes = "qwen3_30b,dsv3_prefill";
  const int rc = testing::walk_bench_args(argc, argv, "[--shapes a,b] [--iters N] [--rounds N]",
                                          [&](const std::string& a, auto value) {
                                            if (a == "--shapes") shapes = value();
                                            else if (a == "--iters") g_iters = std::max(1, std::atoi(value().c_str()));
                                            else if (a == "--rounds") g_rounds = std::max(1, std::atoi(value().c_str()));
                                            else return false;
                                            return true;
                                          });
  if (rc >= 0) return rc;
  cudaDeviceProp prop{};
  DMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t s = nullptr;
  DMOE_CUDA_CHECK(cudaStreamCreate(&s));
  std::printf("bench_gradient_stores on %s (%d SMs): 128x256 BF16 tiles, %d tiles in flight per CTA, %d iters, %d rounds\n",
              prop.name, prop.multiProcessorCount, kInFlight, g_iters, g_rounds);
  std::printf("\n%-12s %-4s %-38s %5s %10s %10s %9s\n", "shape", "grad", "epilogue", "round", "ms", "GB/s", "x copy");
  std::istringstream shape_list(shapes);
  for (std::string name; std::getline(shape_list, name, ',');) {
    const Workload& w = find_workload(name);
    for (const Gradient& g : gradients_of(w)) {
      const size_t bytes = static_cast<size_t>(g.rows * g.cols) * 2;
      testing::DeviceBuffer<uint16_t> grad(bytes / 2), copy_dst(bytes / 2);
      DMOE_CUDA_CHECK(cudaMemsetAsync(grad.get(), 0, bytes, s));  // BF16 zeros; the reduce-adds make them nonzero
      const CUtensorMap map = gemm::make_tma_2d(grad.get(), 2, g.rows, g.cols, g.cols, kTileRows, "gradient");
      const int tiles_m = static_cast<int>(g.rows / kTileRows), tiles_n = static_cast<int>(g.cols / kTileCols);
      auto launch = [&](Mode m) {
        auto kernel = m == Mode::kStore             ? gradient_store_kernel<Mode::kStore>
                      : m == Mode::kReduce          ? gradient_store_kernel<Mode::kReduce>
                      : m == Mode::kReducePrefetched ? gradient_store_kernel<Mode::kReducePrefetched>
                                                     : gradient_load_add_store_kernel;
        const int smem = m == Mode::kLoadAddStore ? kLoadAddStoreSmem : kTileBytes;
        DMOE_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        kernel<<<prop.multiProcessorCount, 128, smem, s>>>(map, tiles_m, tiles_n);
        DMOE_CUDA_CHECK_LAUNCH();
      };
      auto copy = [&] {
        DMOE_CUDA_CHECK(cudaMemcpyAsync(copy_dst.get(), grad.get(), bytes, cudaMemcpyDeviceToDevice, s));
      };
      // Rates in the copy's terms: the copy and the reduce-add read and write `bytes`, the store
      // only writes them.
      for (int r = 0; r < g_rounds; ++r) {
        const double copy_ms = testing::median_event_ms(copy, g_iters, s).ms;
        const double copy_gbs = 2.0 * bytes / copy_ms * 1e-6;
        std::printf("%-12s %-4s %-38s %5d %10.4f %10.1f %8.2fx\n", name.c_str(), g.name, "device copy (read + write)",
                    r + 1, copy_ms, copy_gbs, 1.0);
        for (Mode m : {Mode::kStore, Mode::kReduce, Mode::kReducePrefetched, Mode::kLoadAddStore}) {
          const double ms = testing::median_event_ms([&] { launch(m); }, g_iters, s).ms;
          const double moved = (m == Mode::kStore ? 1.0 : 2.0) * bytes;
          std::printf("%-12s %-4s %-38s %5d %10.4f %10.1f %8.2fx\n", name.c_str(), g.name, mode_name(m), r + 1, ms,
                      moved / ms * 1e-6, moved / ms * 1e-6 / copy_gbs);
        }
        std::fflush(stdout);
      }
    }
  }
  DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  DMOE_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return dist_moe::testing::guarded_main("bench_gradient_stores", [&] { return bench_main(argc, argv); });
}
