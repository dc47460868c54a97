// The MXFP8 W2 DGRAD with the SwiGLU backward and dxy's MXFP8 quantization in its epilogue
// (device/gemm/epilogue_swiglu_backward_mxfp8.cuh): the FPROP kernel on W2's transposed copy, as
// every E4M3 DGRAD (grouped_gemm.cu dgrad_transposed_weight), on the MXFP8 128x128 tile. Outside
// kGemmKernelSpecs: one fixed tile, called only by grouped_gemm_dgrad_swiglu_mxfp8.
#include "dist_moe/device/gemm/epilogue_swiglu_backward_mxfp8.cuh"
#include "gemm/grouped_gemm_launch.cuh"

namespace dist_moe::gemm {
namespace {

using Mainloop = Mxfp8RowsMainloop<WeightSplit::kNone>;
using Kernel = GroupedGemmKernel<Mainloop, SwigluBackwardMxfp8Epilogue<Mainloop>>;

}  // namespace

int dgrad_swiglu_mxfp8_smem_bytes(int num_experts) { return Kernel::smem_bytes(num_experts); }
void launch_dgrad_swiglu_mxfp8(const GemmLaunch& L) { launch_grouped_gemm<Kernel>(L); }

}  // namespace dist_moe::gemm
