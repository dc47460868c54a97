// WGRAD instantiations: grad_w[e] = grad_out[rows_e]^T . x[rows_e] (both operands M/N-major, the
// contraction runs over the expert's rows), BF16 or FP32 output, overwrite or accumulate.
#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "grouped_gemm_launch.cuh"

namespace dist_moe::detail {
namespace {

using gemm::GemmKind;
using gemm::GroupedGemmKernel;
using gemm::Sm90Mainloop;
using gemm::StoreEpilogue;
using numeric::bf16_t;

template <int BM, int BN, int S, class Out>
using Wgrad = GroupedGemmKernel<Sm90Mainloop<GemmKind::kWgrad, BM, BN, S, false>,
                                StoreEpilogue<Sm90Mainloop<GemmKind::kWgrad, BM, BN, S, false>, Out>, false>;

}  // namespace

void add_wgrad_kernels(std::vector<GemmKernelEntry>& out) {
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, bf16_t>>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, float>>(GemmEpilogueKind::kStoreFp32));
  out.push_back(make_gemm_entry<Wgrad<128, 128, 6, float>>(GemmEpilogueKind::kStoreFp32));
}

}  // namespace dist_moe::detail
