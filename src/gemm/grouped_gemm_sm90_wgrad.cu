// WGRAD instantiations: grad_w[e] = grad_out[rows_e]^T . x[rows_e] (both operands M/N-major, the
// contraction runs over the expert's rows), BF16 or FP32 output, overwrite or accumulate: the
// wgrad_kernel entries of kGemmKernelSpecs (grouped_gemm_launch.h).
//   legacy (synchronous padded-staging stores), tma (cooperative, TMA stores / FP32 TMA
//   reduce-add), pp (ping-pong 128x128 with TMA stores; s4: deep staging, 4 buffers); see grouped_gemm_sm90_fprop.cu. At the
//   reference shapes WGRAD is bound by writing its output, which the TMA writer overlaps with the
//   next tile's mainloop. c2: the cooperative tma kernel in 2-CTA clusters (TMA multicast of x).
#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

template <size_t I>
struct WgradKernel {
  static_assert(!kSpec<I>.gather, "WGRAD reads both row buffers by TMA");
  using Mainloop = SpecMainloop<I>;
  using type = gemm::GroupedGemmKernel<Mainloop, gemm::StoreEpilogue<Mainloop, SpecOut<I>, SpecWriter<I>>>;
};

}  // namespace

void add_wgrad_kernels(GemmKernelFns* fns) { add_kernels_of_file<GemmKernelFile::kWgrad, WgradKernel>(fns); }

}  // namespace dist_moe::gemm
