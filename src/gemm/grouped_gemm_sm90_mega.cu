// The Mega pipeline's kernels (device/gemm/mega.cuh): the decode form -- NVFP4 (the 16-token swap-AB
// tile on expanded token rows, the NVFP4 h2 hand-off) and MXFP8 (the 16-token swap-AB tile on E4M3
// rows, h2 quantized in place) -- and the rows form, MXFP8 on the 128x128 tile with h2 quantized by
// the W13 epilogue. Each GEMM's parameters come from grouped_gemm_params of its staged kernel type,
// so the Mega kernel reads its operands exactly as those kernels do.
#include <atomic>

#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "dist_moe/device/gemm/epilogue_swiglu_mxfp8.cuh"
#include "dist_moe/device/gemm/mega.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

// The decode tile of each format (the kGemmKernelSpecs entries decode_kernel(..., 256, 16, 4)
// .nvfp4_expanded() and decode_kernel(..., 256, 16, 5).mxfp8()), W13 with the gate / up split. NVFP4
// keeps its descriptors per lane here (kUniformStage off: 2-4% slower on an H100 with it in both
// loops, G128, or in W13's only, G129); its stages carry the weight scales as the staged tile's do
// (G133), so four of them fit.
template <WeightSplit kSplit>
using Nvfp4DecodeMainloop =
    Sm90Nvfp4SwapABMainloop<MainloopConfig<GemmKind::kFpropSwapAB, 256, 16, 4, ConsumerSchedule::kCooperative, kSplit,
                                           1, ptx::WgmmaTypeF16Rs>,
                            /*kExpanded=*/true, /*kUniformStage=*/false>;
template <WeightSplit kSplit>
using Mxfp8DecodeMainloop = Sm90Mxfp8SwapABMainloop<
    MainloopConfig<GemmKind::kFpropSwapAB, 256, 16, 5, ConsumerSchedule::kCooperative, kSplit, 1, ptx::WgmmaTypeE4m3>>;
// A Mega kernel and its staged twins (whose parameters it takes): Kernel13 / Kernel2 are the
// GroupedGemmKernel types of the two GEMMs with the Mega kernel's epilogues.
template <class Mainloop13, class Mainloop2, class Epilogue13, class Epilogue2, class Handoff>
struct MegaOf {
  using Kernel13 = GroupedGemmKernel<Mainloop13, Epilogue13>;
  using Kernel2 = GroupedGemmKernel<Mainloop2, Epilogue2>;
  using Mega = MegaKernel<Mainloop13, Mainloop2, Epilogue13, Epilogue2, Handoff>;

  static void launch(const GemmLaunch& L13, const GemmLaunch& L2, const MegaParams& m) {
    // Device offsets only where no tensor map reads (h1's ordinary stores, resolved per CTA): the two
    // GEMMs' patched maps would share one workspace slot per CTA.
    DMOE_ASSERT(!L13.a_offset && !L13.b_offset && !L13.out_offset && !L13.h2_offset && !L13.b_compact_rows &&
                !L2.has_offsets() && m.tile_counter != nullptr);
    int64_t bound13 = 0, bound2 = 0;
    const typename Kernel13::Params p13 = grouped_gemm_params<Kernel13>(L13, &bound13);
    const typename Kernel2::Params p2 = grouped_gemm_params<Kernel2>(L2, &bound2);
    typename Mega::Params p{};
    p.maps13 = p13.maps;
    p.maps2 = p2.maps;
    p.ml13 = p13.mainloop;
    p.ml2 = p2.mainloop;
    // W2's token rows (h2) are always written in the launch; W13's (x) only when the launch gathers them.
    p.ml13.token_scales_after_first_stage = m.x_rows != nullptr;
    p.ml2.token_scales_after_first_stage = true;
    p.ep13 = p13.epilogue;
    p.ep2 = p2.epilogue;
    p.sc13 = p13.scheduler;
    p.sc2 = p2.scheduler;
    p.mega = m;
    const auto kernel = sm90_mega<Mega>;
    static std::atomic<uint64_t> configured_devices{0};
    configure_kernel_once(kernel, configured_devices, [](int, int) { return cudaSuccess; });
    // Persistent: one CTA per SM, no more CTAs than both GEMMs can have tiles.
    const int grid = static_cast<int>(std::min<int64_t>(L13.num_sms, std::max<int64_t>(bound13 + bound2, 1)));
    kernel<<<grid, Mega::kThreads, Mega::smem_bytes(L13.e_local), L13.stream>>>(p);
    DMOE_CUDA_CHECK_LAUNCH();
  }
};
template <template <WeightSplit> class DecodeMainloop, class Handoff>
using MegaDecodeOf = MegaOf<DecodeMainloop<WeightSplit::kGateUp>, DecodeMainloop<WeightSplit::kNone>,
                            SwapABSwigluEpilogue<DecodeMainloop<WeightSplit::kGateUp>>,
                            SwapABStoreEpilogue<DecodeMainloop<WeightSplit::kNone>>, Handoff>;
using MegaNvfp4 = MegaDecodeOf<Nvfp4DecodeMainloop, Nvfp4ExpandedHandoff>;
using MegaMxfp8 = MegaDecodeOf<Mxfp8DecodeMainloop, Mxfp8InPlaceHandoff>;
using MegaMxfp8Rows =
    MegaOf<Mxfp8RowsMainloop<WeightSplit::kGateUp>, Mxfp8RowsMainloop<WeightSplit::kNone>,
           SwigluMxfp8RowsEpilogue<Mxfp8RowsMainloop<WeightSplit::kGateUp>>,
           StoreEpilogue<Mxfp8RowsMainloop<WeightSplit::kNone>, numeric::bf16_t, SwizzledTmaWriter>, Mxfp8EpilogueRows>;

}  // namespace

int mega_nvfp4_decode_smem_bytes(int num_experts) { return MegaNvfp4::Mega::smem_bytes(num_experts); }
void launch_mega_nvfp4_decode(const GemmLaunch& L13, const GemmLaunch& L2, const MegaParams& m) {
  MegaNvfp4::launch(L13, L2, m);
}
int mega_mxfp8_decode_smem_bytes(int num_experts) { return MegaMxfp8::Mega::smem_bytes(num_experts); }
void launch_mega_mxfp8_decode(const GemmLaunch& L13, const GemmLaunch& L2, const MegaParams& m) {
  MegaMxfp8::launch(L13, L2, m);
}
int mega_mxfp8_rows_smem_bytes(int num_experts) { return MegaMxfp8Rows::Mega::smem_bytes(num_experts); }
void launch_mega_mxfp8_rows(const GemmLaunch& L13, const GemmLaunch& L2, const MegaParams& m) {
  MegaMxfp8Rows::launch(L13, L2, m);
}

}  // namespace dist_moe::gemm
