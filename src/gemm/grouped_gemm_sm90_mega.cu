// The Mega pipeline's NVFP4 decode kernel (device/gemm/mega_swap_ab.cuh): the 16-token swap-AB tile
// on expanded token rows for both GEMMs -- the same mainloop as kGemmKernelSpecs' decode_kernel(...,
// 256, 16, 5).nvfp4_expanded() entries, W13 with the gate / up split -- and the NVFP4 h2 hand-off.
// Each GEMM's parameters come from grouped_gemm_params of its staged kernel type, so the Mega kernel
// reads its operands exactly as those kernels do.
#include <atomic>

#include "dist_moe/device/gemm/mega_swap_ab.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

template <WeightSplit kSplit>
using Nvfp4DecodeMainloop =
    Sm90Nvfp4SwapABMainloop<MainloopConfig<GemmKind::kFpropSwapAB, 256, 16, 5, ConsumerSchedule::kCooperative, kSplit,
                                           1, ptx::WgmmaTypeF16Rs>,
                            /*kExpanded=*/true>;
using Mainloop13 = Nvfp4DecodeMainloop<WeightSplit::kGateUp>;
using Mainloop2 = Nvfp4DecodeMainloop<WeightSplit::kNone>;
using Kernel13 = GroupedGemmKernel<Mainloop13, SwapABSwigluEpilogue<Mainloop13>>;  // the staged twins
using Kernel2 = GroupedGemmKernel<Mainloop2, SwapABStoreEpilogue<Mainloop2>>;
using Mega = MegaSwapABKernel<Mainloop13, Mainloop2, Nvfp4ExpandedHandoff>;

}  // namespace

int mega_nvfp4_decode_smem_bytes(int num_experts) { return Mega::smem_bytes(num_experts); }

void launch_mega_nvfp4_decode(const GemmLaunch& L13, const GemmLaunch& L2, const MegaParams& m) {
  DMOE_ASSERT(!L13.has_offsets() && !L2.has_offsets() && m.tile_counter != nullptr);
  int64_t bound13 = 0, bound2 = 0;
  const Kernel13::Params p13 = grouped_gemm_params<Kernel13>(L13, &bound13);
  const Kernel2::Params p2 = grouped_gemm_params<Kernel2>(L2, &bound2);
  Mega::Params p{};
  p.maps13 = p13.maps;
  p.maps2 = p2.maps;
  p.ml13 = p13.mainloop;
  p.ml2 = p2.mainloop;
  p.ep13 = p13.epilogue;
  p.ep2 = p2.epilogue;
  p.sc13 = p13.scheduler;
  p.sc2 = p2.scheduler;
  p.mega = m;
  const auto kernel = sm90_mega_swap_ab<Mega>;
  const int smem = Mega::smem_bytes(L13.e_local);
  static std::atomic<uint64_t> configured_devices{0};
  configure_kernel_once(kernel, configured_devices, [](int, int) { return cudaSuccess; });
  // Persistent: one CTA per SM, no more CTAs than both GEMMs can have tiles.
  const int grid = static_cast<int>(std::min<int64_t>(L13.num_sms, std::max<int64_t>(bound13 + bound2, 1)));
  kernel<<<grid, Mega::kThreads, smem, L13.stream>>>(p);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::gemm
