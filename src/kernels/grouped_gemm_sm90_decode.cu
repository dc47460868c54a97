// Swap-AB (decode) FPROP instantiations: 256 weight rows (or 128 gate + 128 up rows for SwiGLU) on
// the wgmma M dimension, 32-token tiles on N; the GEMM streams weights at HBM speed.
#include "dist_moe/device/gemm/epilogue_swap_ab.cuh"
#include "grouped_gemm_launch.cuh"

namespace dist_moe::detail {
namespace {

using gemm::GemmKind;
using gemm::GroupedGemmKernel;
using gemm::Sm90Mainloop;
using gemm::SwapABStoreEpilogue;
using gemm::SwapABSwigluEpilogue;

// 256 x 64 weights (32 KiB) + 32 x 64 tokens (4 KiB) per stage; 5 stages = 180 KiB in flight.
using DecodeStore = GroupedGemmKernel<Sm90Mainloop<GemmKind::kFpropSwapAB, 256, 32, 5, false>,
                                      SwapABStoreEpilogue<Sm90Mainloop<GemmKind::kFpropSwapAB, 256, 32, 5, false>>,
                                      false>;
using DecodeSwiglu = GroupedGemmKernel<Sm90Mainloop<GemmKind::kFpropSwapAB, 256, 32, 5, true>,
                                       SwapABSwigluEpilogue<Sm90Mainloop<GemmKind::kFpropSwapAB, 256, 32, 5, true>>,
                                       false>;

}  // namespace

void add_decode_kernels(std::vector<GemmKernelEntry>& out) {
  out.push_back(make_gemm_entry<DecodeStore>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<DecodeSwiglu>(GemmEpilogueKind::kSwiglu));
}

}  // namespace dist_moe::detail
