// FPROP instantiations with the plain store epilogue (W2, BF16 out, optional scatter/row scale).
//   legacy: cooperative, synchronous padded-staging stores (the first version; kept for A/B and
//           as the fallback when the TMA staging does not fit next to many experts' tables)
//   tma:    cooperative, asynchronous TMA stores of whole 64-row blocks
//   pp:     ping-pong 128x128 tiles (one warpgroup per tile) with TMA stores
//   c2:     tma / pp in 2-CTA clusters sharing the weight block (TMA multicast)
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

template <int BM, int BN, int S, bool kPingPong, int kCluster = 1>
using FpropMainloop = Sm90Mainloop<GemmKind::kFprop, BM, BN, S, false, kPingPong, kCluster>;

template <int BM, int BN, int S, bool kPingPong, class Writer, bool kGather, int kCluster = 1>
using FpropStore = GroupedGemmKernel<FpropMainloop<BM, BN, S, kPingPong, kCluster>,
                                     StoreEpilogue<FpropMainloop<BM, BN, S, kPingPong, kCluster>, bf16_t, Writer>,
                                     kGather>;

}  // namespace

void add_fprop_kernels(std::vector<GemmKernelEntry>& out) {
  constexpr auto kBf16 = GemmEpilogueKind::kStoreBf16;
  out.push_back(make_gemm_entry<FpropStore<128, 256, 4, false, PaddedStagingWriter, false>>(kBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 128, 6, false, PaddedStagingWriter, false>>(kBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 256, 4, false, PaddedStagingWriter, true>>(kBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 256, 4, false, SwizzledTmaWriter, false>>(kBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 256, 4, false, SwizzledTmaWriter, true>>(kBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 128, 6, true, SwizzledTmaWriter, false>>(kBf16));
  // 2-CTA clusters: M tile pairs share the weight block through TMA multicast (docs/perf.md G15).
  out.push_back(make_gemm_entry<FpropStore<128, 256, 4, false, SwizzledTmaWriter, false, 2>>(kBf16));
  out.push_back(make_gemm_entry<FpropStore<128, 128, 6, true, SwizzledTmaWriter, false, 2>>(kBf16));
}

}  // namespace dist_moe::detail
