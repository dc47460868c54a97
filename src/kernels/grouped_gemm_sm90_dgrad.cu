// DGRAD instantiations: grad_a = grad_out . W[e] (B operand N-major: the wgmma transpose bit),
// BF16 or FP32 output, optional accumulation, gather of grad_out, scatter of grad_a.
#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "grouped_gemm_launch.cuh"

namespace dist_moe::detail {
namespace {

using gemm::GemmKind;
using gemm::GroupedGemmKernel;
using gemm::Sm90Mainloop;
using gemm::StoreEpilogue;
using numeric::bf16_t;

template <int BM, int BN, int S, class Out, bool kGather>
using Dgrad = GroupedGemmKernel<Sm90Mainloop<GemmKind::kDgrad, BM, BN, S, false>,
                                StoreEpilogue<Sm90Mainloop<GemmKind::kDgrad, BM, BN, S, false>, Out>, kGather>;

}  // namespace

void add_dgrad_kernels(std::vector<GemmKernelEntry>& out) {
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, bf16_t, false>>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 128, 6, bf16_t, false>>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, bf16_t, true>>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, float, false>>(GemmEpilogueKind::kStoreFp32));
}

}  // namespace dist_moe::detail
