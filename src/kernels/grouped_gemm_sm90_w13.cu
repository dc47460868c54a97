// W13 FPROP instantiations with the SwiGLU epilogue (h1 optional, h2, clip statistics), with the
// TMA producer and with the gather producer.
//   legacy: cooperative 128x256 (128 gate + 128 up columns), synchronous padded-staging stores
//   tma:    cooperative 128x256, asynchronous TMA stores
//   pp:     ping-pong 128x128 (64 gate + 64 up columns per tile, one warpgroup per tile) with TMA
//           stores: the SwiGLU math and the stores of one warpgroup overlap the other's wgmmas
//   c2:     tma / pp in 2-CTA clusters sharing the weight block (TMA multicast)
#include "dist_moe/device/gemm/epilogue_swiglu.cuh"
#include "grouped_gemm_launch.cuh"

namespace dist_moe::detail {
namespace {

using gemm::GemmKind;
using gemm::GroupedGemmKernel;
using gemm::PaddedStagingWriter;
using gemm::Sm90Mainloop;
using gemm::SwigluEpilogue;
using gemm::SwizzledTmaWriter;

template <int BM, int BN, int S, bool kPingPong, int kCluster = 1>
using SplitMainloop = Sm90Mainloop<GemmKind::kFprop, BM, BN, S, true, kPingPong, kCluster>;

template <int BM, int BN, int S, bool kPingPong, class Writer, bool kGather, int kCluster = 1>
using FpropSwiglu = GroupedGemmKernel<SplitMainloop<BM, BN, S, kPingPong, kCluster>,
                                      SwigluEpilogue<SplitMainloop<BM, BN, S, kPingPong, kCluster>, Writer>, kGather>;

}  // namespace

void add_w13_kernels(std::vector<GemmKernelEntry>& out) {
  constexpr auto kSwiglu = GemmEpilogueKind::kSwiglu;
  out.push_back(make_gemm_entry<FpropSwiglu<128, 256, 4, false, PaddedStagingWriter, false>>(kSwiglu));
  out.push_back(make_gemm_entry<FpropSwiglu<128, 256, 4, false, PaddedStagingWriter, true>>(kSwiglu));
  out.push_back(make_gemm_entry<FpropSwiglu<128, 256, 4, false, SwizzledTmaWriter, false>>(kSwiglu));
  out.push_back(make_gemm_entry<FpropSwiglu<128, 128, 6, true, SwizzledTmaWriter, false>>(kSwiglu));
  out.push_back(make_gemm_entry<FpropSwiglu<128, 128, 6, true, SwizzledTmaWriter, true>>(kSwiglu));
  // 2-CTA clusters: M tile pairs share the weight block (CTA 0 multicasts the gate half, CTA 1 the up
  // half; docs/perf.md G15).
  out.push_back(make_gemm_entry<FpropSwiglu<128, 256, 4, false, SwizzledTmaWriter, false, 2>>(kSwiglu));
  out.push_back(make_gemm_entry<FpropSwiglu<128, 128, 6, true, SwizzledTmaWriter, false, 2>>(kSwiglu));
}

}  // namespace dist_moe::detail
