// FPROP instantiations with the plain store epilogue (W2, BF16 out, optional scatter/row scale):
// the fprop_kernel entries of kGemmKernelSpecs (grouped_gemm_launch.h).
//   legacy: cooperative, synchronous padded-staging stores (the first version; kept for A/B and
//           as the fallback when the TMA staging does not fit next to many experts' tables)
//   tma:    cooperative, asynchronous TMA stores of whole 64-row blocks
//   pp:     ping-pong 128x128 tiles (one warpgroup per tile) with TMA stores
//   c2:     tma / pp in 2-CTA clusters sharing the weight block (TMA multicast)
#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

template <size_t I>
struct FpropKernel {
  using Mainloop = SpecMainloop<I>;
  using Epilogue = gemm::StoreEpilogue<Mainloop, SpecOut<I>, SpecWriter<I>>;
  using type = gemm::GroupedGemmKernel<Mainloop, Epilogue, kSpecRows<I>>;
};

}  // namespace

void add_fprop_kernels(GemmKernelFns* fns) { add_kernels_of_file<GemmKernelFile::kFprop, FpropKernel>(fns); }

}  // namespace dist_moe::gemm
