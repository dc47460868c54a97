// FPROP instantiations: plain store (W2, BF16 out, optional scatter/row scale) and the W13
// SwiGLU epilogue, each with the TMA producer and with the gather producer.
#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "dist_moe/device/gemm/epilogue_swiglu.cuh"
#include "grouped_gemm_launch.cuh"

namespace dist_moe::detail {
namespace {

using gemm::GemmKind;
using gemm::GroupedGemmKernel;
using gemm::Sm90Mainloop;
using gemm::StoreEpilogue;
using gemm::SwigluEpilogue;
using numeric::bf16_t;

template <int BM, int BN, int S, bool kGather>
using FpropStore = GroupedGemmKernel<Sm90Mainloop<GemmKind::kFprop, BM, BN, S, false>,
                                     StoreEpilogue<Sm90Mainloop<GemmKind::kFprop, BM, BN, S, false>, bf16_t>, kGather>;
template <int BM, int BN, int S, bool kGather>
using FpropSwiglu = GroupedGemmKernel<Sm90Mainloop<GemmKind::kFprop, BM, BN, S, true>,
                                      SwigluEpilogue<Sm90Mainloop<GemmKind::kFprop, BM, BN, S, true>>, kGather>;

}  // namespace

void add_fprop_kernels(std::vector<GemmKernelEntry>& out) {
  out.push_back(make_gemm_entry<FpropStore<128, 256, 4, false>>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 128, 6, false>>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 256, 4, true>>(GemmEpilogueKind::kStoreBf16));
  out.push_back(make_gemm_entry<FpropSwiglu<128, 256, 4, false>>(GemmEpilogueKind::kSwiglu));
  out.push_back(make_gemm_entry<FpropSwiglu<128, 256, 4, true>>(GemmEpilogueKind::kSwiglu));
}

}  // namespace dist_moe::detail
