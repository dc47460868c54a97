// Swap-AB (decode) FPROP instantiations: 256 weight rows (or 128 gate + 128 up rows for SwiGLU) on
// the wgmma M dimension, 32-token tiles on N; the GEMM streams weights at HBM speed. The
// decode_kernel entries of kGemmKernelSpecs (grouped_gemm_launch.h); 256 x 64 weights (32 KiB) +
// 32 x 64 tokens (4 KiB) per stage, 5 stages = 180 KiB in flight.
#include "dist_moe/device/gemm/epilogue_swap_ab.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

template <size_t I>
struct DecodeKernel {
  using Mainloop = SpecMainloop<I>;
  using Epilogue = std::conditional_t<kSpec<I>.epilogue == GemmEpilogueKind::kSwiglu,
                                      gemm::SwapABSwigluEpilogue<Mainloop>, gemm::SwapABStoreEpilogue<Mainloop>>;
  using type = gemm::GroupedGemmKernel<Mainloop, Epilogue>;
};

}  // namespace

void add_decode_kernels(GemmKernelFns* fns) { add_kernels_of_file<GemmKernelFile::kDecode, DecodeKernel>(fns); }

}  // namespace dist_moe::gemm
