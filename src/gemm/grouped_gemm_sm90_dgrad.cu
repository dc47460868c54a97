// DGRAD instantiations: grad_a = grad_out . W[e] (B operand N-major: the wgmma transpose bit),
// BF16 or FP32 output, optional accumulation, gather of grad_out, scatter of grad_a: the
// dgrad_kernel entries of kGemmKernelSpecs (grouped_gemm_launch.h).
//   legacy (synchronous padded-staging stores), tma (cooperative, TMA stores), pp (ping-pong
//   128x128 with TMA stores); see grouped_gemm_sm90_fprop.cu.
#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

template <size_t I>
struct DgradKernel {
  using Mainloop = SpecMainloop<I>;
  using Epilogue = gemm::StoreEpilogue<Mainloop, SpecOut<I>, SpecWriter<I>>;
  using type = gemm::GroupedGemmKernel<Mainloop, Epilogue, kSpecRows<I>>;
};

}  // namespace

void add_dgrad_kernels(GemmKernelFns* fns) { add_kernels_of_file<GemmKernelFile::kDgrad, DgradKernel>(fns); }

}  // namespace dist_moe::gemm
