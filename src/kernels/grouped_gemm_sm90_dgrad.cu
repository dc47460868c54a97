// DGRAD instantiations: grad_a = grad_out . W[e] (B operand N-major: the wgmma transpose bit),
// BF16 or FP32 output, optional accumulation, gather of grad_out, scatter of grad_a.
//   legacy (synchronous padded-staging stores), tma (cooperative, TMA stores), pp (ping-pong
//   128x128 with TMA stores); see grouped_gemm_sm90_fprop.cu.
#include "dist_moe/device/gemm/epilogue_store.cuh"
#include "grouped_gemm_launch.cuh"

namespace dist_moe::detail {
namespace {

using gemm::GemmKind;
using gemm::GroupedGemmKernel;
using gemm::PaddedStagingWriter;
using gemm::Sm90Mainloop;
using gemm::StoreEpilogue;
using gemm::SwizzledTmaWriter;
using numeric::bf16_t;

template <int BM, int BN, int S, bool kPingPong, class Out, class Writer, bool kGather>
using Dgrad = GroupedGemmKernel<Sm90Mainloop<GemmKind::kDgrad, BM, BN, S, false, kPingPong>,
                                StoreEpilogue<Sm90Mainloop<GemmKind::kDgrad, BM, BN, S, false, kPingPong>, Out, Writer>,
                                kGather>;

}  // namespace

void add_dgrad_kernels(std::vector<GemmKernelEntry>& out) {
  constexpr auto kBf16 = GemmEpilogueKind::kStoreBf16;
  constexpr auto kFp32 = GemmEpilogueKind::kStoreFp32;
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, false, bf16_t, PaddedStagingWriter, false>>(kBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 128, 6, false, bf16_t, PaddedStagingWriter, false>>(kBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, false, bf16_t, PaddedStagingWriter, true>>(kBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, false, bf16_t, SwizzledTmaWriter, false>>(kBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, false, bf16_t, SwizzledTmaWriter, true>>(kBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 128, 6, true, bf16_t, SwizzledTmaWriter, false>>(kBf16));
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, false, float, PaddedStagingWriter, false>>(kFp32));
  out.push_back(make_gemm_entry<Dgrad<128, 256, 4, false, float, SwizzledTmaWriter, false>>(kFp32));
  out.push_back(make_gemm_entry<Dgrad<128, 128, 6, true, float, SwizzledTmaWriter, false>>(kFp32));
}

}  // namespace dist_moe::detail
