// WGRAD instantiations: grad_w[e] = grad_out[rows_e]^T . x[rows_e] (both operands M/N-major, the
// contraction runs over the expert's rows), BF16 or FP32 output, overwrite or accumulate.
//   legacy (synchronous padded-staging stores), tma (cooperative, TMA stores / FP32 TMA
//   reduce-add), pp (ping-pong 128x128 with TMA stores; s4: deep staging, 4 buffers); see grouped_gemm_sm90_fprop.cu. At the
//   reference shapes WGRAD is bound by writing its output, which the TMA writer overlaps with the
//   next tile's mainloop.
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

template <int BM, int BN, int S, bool kPingPong, class Out, class Writer>
using Wgrad = GroupedGemmKernel<Sm90Mainloop<GemmKind::kWgrad, BM, BN, S, false, kPingPong>,
                                StoreEpilogue<Sm90Mainloop<GemmKind::kWgrad, BM, BN, S, false, kPingPong>, Out, Writer>,
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
}

}  // namespace dist_moe::detail
