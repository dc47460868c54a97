// WGRAD instantiations: grad_w[e] = grad_out[rows_e]^T . x[rows_e] (both operands M/N-major, the
// contraction runs over the expert's rows), BF16 or FP32 output, overwrite or accumulate.
//   legacy (synchronous padded-staging stores), tma (cooperative, TMA stores / FP32 TMA
//   reduce-add), pp (ping-pong 128x128 with TMA stores; s4: deep staging, 4 buffers); see grouped_gemm_sm90_fprop.cu. At the
//   reference shapes WGRAD is bound by writing its output, which the TMA writer overlaps with the
//   next tile's mainloop. c2: the cooperative tma kernel in 2-CTA clusters (TMA multicast of x).
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
using gemm::SwizzledTmaWriter4;
using numeric::bf16_t;

template <int BM, int BN, int S, bool kPingPong, class Out, class Writer, int kCluster = 1>
using WgradMainloop = Sm90Mainloop<GemmKind::kWgrad, BM, BN, S, false, kPingPong, kCluster>;

template <int BM, int BN, int S, bool kPingPong, class Out, class Writer, int kCluster = 1>
using Wgrad = GroupedGemmKernel<WgradMainloop<BM, BN, S, kPingPong, Out, Writer, kCluster>,
                                StoreEpilogue<WgradMainloop<BM, BN, S, kPingPong, Out, Writer, kCluster>, Out, Writer>,
                                false>;

}  // namespace

void add_wgrad_kernels(std::vector<GemmKernelEntry>& out) {
  constexpr auto kBf16 = GemmEpilogueKind::kStoreBf16;
  constexpr auto kFp32 = GemmEpilogueKind::kStoreFp32;
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, false, bf16_t, PaddedStagingWriter>>(kBf16));
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, false, bf16_t, SwizzledTmaWriter>>(kBf16));
  out.push_back(make_gemm_entry<Wgrad<128, 128, 6, true, bf16_t, SwizzledTmaWriter>>(kBf16));
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, false, float, PaddedStagingWriter>>(kFp32));
  out.push_back(make_gemm_entry<Wgrad<128, 128, 6, false, float, PaddedStagingWriter>>(kFp32));
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, false, float, SwizzledTmaWriter>>(kFp32));
  out.push_back(make_gemm_entry<Wgrad<128, 128, 6, true, float, SwizzledTmaWriter>>(kFp32));
  // Deep staging (docs/perf.md G10): 4 stages (one 4-k-block dsv3 tile in flight) buy 4 staging
  // buffers per warpgroup, so a ping-pong tile's epilogue never waits for its own TMA stores.
  // Identified by s4 + pp + tma (no other WGRAD kernel has that combination).
  out.push_back(make_gemm_entry<Wgrad<128, 128, 4, true, bf16_t, SwizzledTmaWriter4>>(kBf16));
  out.push_back(make_gemm_entry<Wgrad<128, 128, 4, true, float, SwizzledTmaWriter4>>(kFp32));
  // 2-CTA clusters sharing each x (B) block through TMA multicast (docs/perf.md G15); name `_c2`.
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, false, bf16_t, SwizzledTmaWriter, 2>>(kBf16));
  out.push_back(make_gemm_entry<Wgrad<128, 256, 4, false, float, SwizzledTmaWriter, 2>>(kFp32));
}

}  // namespace dist_moe::detail
