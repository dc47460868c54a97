// W13 FPROP instantiations with the SwiGLU epilogue (h1 optional, h2, clip statistics), with the
// TMA producer and with the gather producer: the w13_kernel entries of kGemmKernelSpecs
// (grouped_gemm_launch.h).
//   legacy: cooperative 128x256 (128 gate + 128 up columns), synchronous padded-staging stores
//   tma:    cooperative 128x256, asynchronous TMA stores
//   pp:     ping-pong 128x128 (64 gate + 64 up columns per tile, one warpgroup per tile) with TMA
//           stores: the SwiGLU math and the stores of one warpgroup overlap the other's wgmmas
//   c2:     tma / pp in 2-CTA clusters sharing the weight block (TMA multicast)
#include "dist_moe/device/gemm/epilogue_swiglu.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

template <size_t I>
struct W13Kernel {
  using Mainloop = SpecMainloop<I>;
  using type = gemm::GroupedGemmKernel<Mainloop, gemm::SwigluEpilogue<Mainloop, SpecWriter<I>>, kSpecRows<I>>;
};

}  // namespace

void add_w13_kernels(GemmKernelFns* fns) { add_kernels_of_file<GemmKernelFile::kW13, W13Kernel>(fns); }

}  // namespace dist_moe::gemm
