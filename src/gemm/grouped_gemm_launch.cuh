// Internal: turns a GemmLaunch into one kernel's Params (TMA boxes from the kernel's own constants,
// so host and device can never disagree) and launches it, and derives each kernel type from its
// list entry (kGemmKernelSpecs). Included only by the instantiation files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "dist_moe/check.h"
#include "dist_moe/device/gemm/kernel.cuh"
#include "dist_moe/device/gemm/mainloop_fp8_blockwise.cuh"
#include "dist_moe/device/gemm/mainloop_mxfp8.cuh"
#include "dist_moe/device/gemm/mainloop_mxfp8_dequant.cuh"
#include "dist_moe/device/gemm/mainloop_block_scaled_swap_ab.cuh"
#include "dist_moe/device/gemm/mainloop_nvfp4_swap_ab.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"
#include "gemm/grouped_gemm_launch.h"

namespace dist_moe::gemm {

inline int32_t ceil_div_i32(int64_t a, int64_t b) { return static_cast<int32_t>((a + b - 1) / b); }

// Slot i of the operand table: where the tensor lives and, for row buffers, its device offset.
inline void set_operand(gemm::OperandMaps& m, int i, const void* base, const int64_t* offset) {
  m.base[i] = reinterpret_cast<uint64_t>(base);
  m.offset[i] = base != nullptr ? offset : nullptr;
}

inline void set_map(gemm::OperandMaps& m, int i, const CUtensorMap& map) {
  m.map[i] = map;
  m.encoded_mask |= 1u << i;
}

// Whether a mainloop is the NVFP4 one (its kNvfp4 member).
template <class Mainloop, class = void>
struct IsNvfp4 : std::false_type {};
template <class Mainloop>
struct IsNvfp4<Mainloop, std::void_t<decltype(Mainloop::kNvfp4)>> : std::bool_constant<Mainloop::kNvfp4> {};

// Once per device for `kernel` (`configured_devices`: the kernel's own bit mask of devices done):
// raise its dynamic shared memory limit to the device's opt-in maximum (the largest size any launch
// can need, the E_local bound), then `extra(device, optin)` (cudaError_t). Relaxed capture mode: the
// first call may come inside a CUDA graph capture, and neither is a stream operation. Returns the
// current device.
template <class KernelFn, class Extra>
int configure_kernel_once(KernelFn* kernel, std::atomic<uint64_t>& configured_devices, Extra&& extra) {
  int dev = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&dev));
  const uint64_t bit = uint64_t(1) << (dev & 63);
  if ((configured_devices.load(std::memory_order_acquire) & bit) == 0) {
    int optin = 0;
    DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    DMOE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    if (err == cudaSuccess) err = extra(dev, optin);
    DMOE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
    DMOE_CUDA_CHECK(err);
    configured_devices.fetch_or(bit, std::memory_order_acq_rel);
  }
  return dev;
}

// A launch's kernel parameters (maps, mainloop, epilogue, scheduler) and, in *tiles_upper_bound, a
// host-side bound on its tile count (which sizes the grid).
template <class Kernel>
typename Kernel::Params grouped_gemm_params(const GemmLaunch& L, int64_t* tiles_upper_bound_out) {
  using Mainloop = typename Kernel::Mainloop;
  using Epilogue = typename Kernel::Epilogue;
  using gemm::GemmKind;
  constexpr GemmKind kKind = Mainloop::kKind;
  constexpr int BM = Mainloop::kBlockM;
  constexpr int BN = Mainloop::kBlockN;
  constexpr bool kTmaStore = Kernel::Writer::kTma;
  constexpr int kOutBytes = Epilogue::kOutBytes;
  constexpr int kCluster = Kernel::kClusterM;
  constexpr int kIn = Mainloop::kMapElemBytes;  // bytes per A / B element in memory
  DMOE_ASSERT(L.kind == kKind);

  typename Kernel::Params p{};
  gemm::OperandMaps& om = p.maps;
  gemm::MainloopParams& ml = p.mainloop;
  gemm::SchedulerParams& sc = p.scheduler;
  p.epilogue = L.epilogue;
  ml.weight_rows = L.n;

  // The A rows come from the gathered copy when the gather producer runs; its offset is a_offset.
  const void* rows_a = Kernel::kGather ? L.gathered : L.a;
  const int64_t weight_total_rows = static_cast<int64_t>(L.e_local) * L.n;
  int64_t tiles_upper_bound = 0;  // host-side bound on the tile count (sizes the grid)
  const int64_t m_tiles_bound = (L.m_capacity + BM - 1) / BM + L.e_local;

  if constexpr (kKind == GemmKind::kFprop) {
    set_operand(om, gemm::kMapA, rows_a, L.a_offset);
    set_map(om, gemm::kMapA, make_tma_2d(rows_a, kIn, L.m_capacity, L.k, L.k, Mainloop::kBoxAOuter, "A rows"));
    set_operand(om, gemm::kMapB, L.b, nullptr);
    set_map(om, gemm::kMapB, make_tma_2d(L.b, kIn, weight_total_rows, L.k, L.k, Mainloop::kBoxBOuter, "weights"));
    ml.num_k_blocks = L.k / Mainloop::kBlockK;
    ml.split_offset = L.n / 2;
    ml.a_scales = L.a_scales;
    ml.a_scale_ld = L.a_scale_ld;
    ml.a_scale_kblock_words = L.a_scale_kblock_words;
    ml.a_scale_rows = L.m_capacity;
    ml.b_scales = L.b_scales;
    ml.narrow_split = L.narrow_split;
    // Split (SwiGLU): each N tile covers BN/2 gate and the matching BN/2 up columns.
    sc.fixed_n_blocks = Mainloop::kSplit ? (L.n / 2) / (BN / 2) : ceil_div_i32(L.n, BN);
    sc.group_m = 8;
    tiles_upper_bound = m_tiles_bound * sc.fixed_n_blocks;
  } else if constexpr (kKind == GemmKind::kDgrad) {
    set_operand(om, gemm::kMapA, rows_a, L.a_offset);
    set_map(om, gemm::kMapA, make_tma_2d(rows_a, kIn, L.m_capacity, L.n, L.n, Mainloop::kBoxAOuter, "grad_out rows"));
    set_operand(om, gemm::kMapB, L.b, nullptr);
    set_map(om, gemm::kMapB, make_tma_2d(L.b, kIn, weight_total_rows, L.k, L.k, Mainloop::kBoxBOuter, "weights"));
    ml.num_k_blocks = L.n / Mainloop::kBlockK;
    sc.fixed_n_blocks = ceil_div_i32(L.k, BN);
    sc.group_m = 8;
    tiles_upper_bound = m_tiles_bound * sc.fixed_n_blocks;
  } else if constexpr (kKind == GemmKind::kWgrad && !Mainloop::kAMnMajor) {
    // E4M3 WGRAD: the transposed copies grad_out^T [n, m_capacity] and x^T [k, m_capacity].
    set_operand(om, gemm::kMapA, L.a, nullptr);
    set_map(om, gemm::kMapA, make_tma_2d(L.a, kIn, L.n, L.m_capacity, L.m_capacity, Mainloop::kBoxAOuter, "grad_out^T"));
    // x^T may be a compact bundle [k, R] (R known on the device: the map's row length is patched,
    // the scales follow the data) at a device offset.
    set_operand(om, gemm::kMapB, L.b, L.b_offset);
    set_map(om, gemm::kMapB, make_tma_2d(L.b, kIn, L.k, L.m_capacity, L.m_capacity, Mainloop::kBoxBOuter, "x^T"));
    om.row_length[gemm::kMapB] = L.b_compact_rows;
    ml.a_scales = L.a_scales;
    ml.a_scale_ld = L.n;
    ml.b_scales = L.b_scales;
    ml.b_scale_ld = L.k;
    ml.b_compact_rows = L.b_compact_rows;
    sc.m_blocks = L.n / BM;
    sc.fixed_m_blocks = sc.m_blocks;
    sc.fixed_n_blocks = ceil_div_i32(L.k, BN);
    sc.group_m = 8;
    sc.tiles_for_empty_experts = L.tiles_for_empty_experts ? 1 : 0;
    tiles_upper_bound = static_cast<int64_t>(L.e_local) * sc.fixed_m_blocks * sc.fixed_n_blocks;
  } else if constexpr (kKind == GemmKind::kWgrad) {
    set_operand(om, gemm::kMapA, L.a, L.a_offset);
    set_map(om, gemm::kMapA, make_tma_2d(L.a, kIn, L.m_capacity, L.n, L.n, Mainloop::kBoxAOuter, "grad_out rows"));
    set_operand(om, gemm::kMapB, L.b, L.b_offset);
    set_map(om, gemm::kMapB, make_tma_2d(L.b, kIn, L.m_capacity, L.k, L.k, Mainloop::kBoxBOuter, "x rows"));
    // Clusters schedule pairs of M tiles (scheduler.cuh); m_blocks marks a missing second tile.
    sc.m_blocks = L.n / BM;
    sc.fixed_m_blocks = ceil_div_i32(sc.m_blocks, kCluster);
    sc.fixed_n_blocks = ceil_div_i32(L.k, BN);
    sc.group_m = 8;
    sc.tiles_for_empty_experts = L.tiles_for_empty_experts ? 1 : 0;
    tiles_upper_bound = static_cast<int64_t>(L.e_local) * sc.fixed_m_blocks * kCluster * sc.fixed_n_blocks;
  } else if constexpr (IsNvfp4<Mainloop>::value) {
    // NVFP4 swap-AB: TMA brings the packed weight rows [E*N, K/2] bytes and either the codes of the
    // packed token rows [m_capacity, K/2] (rows nvfp4_packed_row_bytes apart; the producer warps read
    // the rows' E4M3 scales, the epilogue their FP32 token_scale_inv) or the expanded FP16 rows
    // [m_capacity, K] with the token_scale_inv array [m_capacity] in scales.a.
    set_operand(om, gemm::kMapA, L.b, nullptr);
    set_map(om, gemm::kMapA, make_tma_2d(L.b, 1, weight_total_rows, L.k / 2, L.k / 2, Mainloop::kBoxAOuter,
                                         "NVFP4 weights"));
    set_operand(om, gemm::kMapB, rows_a, nullptr);
    ml.num_k_blocks = L.k / Mainloop::kBlockK;
    ml.split_offset = L.n / 2;
    ml.b_scales = L.b_scales;
    if constexpr (Mainloop::kScalesInStage) {  // each stage's [rows, 16] scale bytes, by TMA
      set_operand(om, gemm::kMapScales, L.b_scales, nullptr);
      set_map(om, gemm::kMapScales,
              make_tma_2d_bytes(L.b_scales, weight_total_rows, L.k / 16, L.k / 16, gemm::kNvfp4StageBlocks,
                                Mainloop::kBoxAOuter, "NVFP4 weight scales"));
    }
    if constexpr (Mainloop::kExpandedTokens) {
      set_map(om, gemm::kMapB, make_tma_2d(rows_a, 2, L.m_capacity, L.k, L.k, BN, "NVFP4 expanded token rows"));
      p.epilogue.token_scale_inv = static_cast<const float*>(L.a_scales);
      p.epilogue.token_scale_stride = 1;
    } else {
      const int64_t packed = numeric::nvfp4_packed_row_bytes(L.k);
      set_map(om, gemm::kMapB, make_tma_2d(rows_a, 1, L.m_capacity, L.k / 2, packed, BN, "NVFP4 token rows"));
      ml.packed_rows = static_cast<const uint8_t*>(rows_a);
      ml.packed_row_bytes = packed;
      p.epilogue.token_scale_inv = reinterpret_cast<const float*>(static_cast<const uint8_t*>(rows_a) +
                                                                  numeric::nvfp4_packed_row_token_scale_offset(L.k));
      p.epilogue.token_scale_stride = packed / 4;
    }
    p.epilogue.expert_scale_inv = L.b_global;
    p.epilogue.acc_scale = kNvfp4AccScale;
    sc.fixed_m_blocks = Mainloop::kSplit ? (L.n / 2) / (BM / 2) : ceil_div_i32(L.n, BM);
    sc.group_m = 1;
    tiles_upper_bound = static_cast<int64_t>(sc.fixed_m_blocks) * ((L.m_capacity + BN - 1) / BN + L.e_local);
  } else {  // kFpropSwapAB: A = weights, B = the token rows
    set_operand(om, gemm::kMapA, L.b, nullptr);
    set_map(om, gemm::kMapA, make_tma_2d(L.b, kIn, weight_total_rows, L.k, L.k, Mainloop::kBoxAOuter, "weights"));
    set_operand(om, gemm::kMapB, rows_a, L.a_offset);
    set_map(om, gemm::kMapB, make_tma_2d(rows_a, kIn, L.m_capacity, L.k, L.a_ld > 0 ? L.a_ld : L.k, Mainloop::kBoxBOuter,
                                         "A rows"));
    ml.num_k_blocks = L.k / Mainloop::kBlockK;
    ml.split_offset = L.n / 2;
    ml.a_scales = L.a_scales;  // block-scaled: the token rows' scales (the op's A), then the weights'
    ml.a_scale_ld = L.a_scale_ld;
    ml.a_scale_kblock_words = L.a_scale_kblock_words;
    ml.a_scale_rows = L.m_capacity;
    ml.b_scales = L.b_scales;
    sc.fixed_m_blocks = Mainloop::kSplit ? (L.n / 2) / (BM / 2) : ceil_div_i32(L.n, BM);
    sc.group_m = 1;  // token tiles of one weight tile back to back: the weight tile stays in L2
    tiles_upper_bound = static_cast<int64_t>(sc.fixed_m_blocks) * ((L.m_capacity + BN - 1) / BN + L.e_local);
  }

  // Outputs: generic stores use the (moved) bases; the TMA writer also needs their maps. Its
  // boxes are 64 rows x 128 bytes (one staging buffer).
  set_operand(om, gemm::kMapOut, L.out, L.out_offset);
  set_operand(om, gemm::kMapH1, L.h1, L.h1_offset);
  set_operand(om, gemm::kMapH2, L.h2, L.h2_offset);
  if constexpr (Epilogue::kPrefetchL2 && kKind == GemmKind::kFprop) {
    // The SwiGLU backward's h1 [m_capacity, 2F], whose boxes the producer pulls into L2 per tile.
    const int64_t two_f = 2 * static_cast<int64_t>(L.epilogue.f);
    set_map(om, gemm::kMapH1, make_tma_2d(L.h1, 2, L.m_capacity, two_f, two_f, 64, "h1"));
  }
  if constexpr (kTmaStore) {
    const int f = L.n / 2;
    if (Epilogue::kClipStats) {  // the SwiGLU epilogue: h1 [m_cap, 2F] (optional), h2 [m_cap, F]
      if (L.h1 != nullptr) set_map(om, gemm::kMapH1, make_tma_2d(L.h1, 2, L.m_capacity, 2 * f, 2 * f, 64, "h1"));
      set_map(om, gemm::kMapH2, make_tma_2d(L.h2, 2, L.m_capacity, f, f, 64, "h2"));
    } else if (L.out != nullptr && L.epilogue.scatter_rows == nullptr) {
      if constexpr (kKind == GemmKind::kWgrad) {
        set_map(om, gemm::kMapOut, make_tma_3d(L.out, kOutBytes, L.e_local, L.n, L.k, 64, "grad_w"));
      } else {
        const int64_t cols = L.epilogue.out_cols;
        set_map(om, gemm::kMapOut, make_tma_2d(L.out, kOutBytes, L.m_capacity, cols, L.epilogue.ld_out, 64, "out"));
      }
    }
  }
  if (L.has_offsets()) {
    DMOE_ASSERT(L.tensormap_workspace != nullptr);
    om.patched = L.tensormap_workspace;
  }
  if constexpr (Kernel::kGather) {
    ml.gather_rows = L.gather_rows;
    ml.ready = L.ready;
    ml.gather_row_elems = kKind == GemmKind::kDgrad ? L.n : L.k;
  }
  sc.counts = L.counts;
  sc.tile_rows = L.tile_rows;
  sc.num_experts = L.e_local;
  sc.m_capacity = L.m_capacity;
  sc.tile_counter = L.tile_counter;
  *tiles_upper_bound_out = tiles_upper_bound;
  return p;
}

template <class Kernel>
void launch_grouped_gemm(const GemmLaunch& L) {
  constexpr int kCluster = Kernel::kClusterM;
  int64_t tiles_upper_bound = 0;
  const typename Kernel::Params p = grouped_gemm_params<Kernel>(L, &tiles_upper_bound);

  // Persistent grid: at most one CTA per SM, and no more CTAs than tiles can exist. The gather
  // variants keep every CTA: each one also gathers its share of the rows. Clusters: whole clusters,
  // no more than fit on the device at once (a 2-CTA cluster needs two free SMs of one GPC).
  int grid = L.num_sms;
  if (!Kernel::kGather) grid = static_cast<int>(std::min<int64_t>(grid, std::max<int64_t>(tiles_upper_bound, 1)));
  const int smem = Kernel::smem_bytes(L.e_local);
  const auto kernel = gemm::sm90_grouped_gemm<Kernel>;
  cudaLaunchConfig_t config{};
  cudaLaunchAttribute attr[1];
  config.blockDim = dim3(Kernel::kThreads);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  config.stream = L.stream;
  if constexpr (kCluster > 1) {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  // For clusters, how many fit at once at the largest shared memory size (counted once per device).
  static std::atomic<uint64_t> configured_devices{0};
  static std::atomic<int> max_clusters[64];
  const int dev = configure_kernel_once(kernel, configured_devices, [&](int device, int optin) {
    cudaError_t err = cudaSuccess;
    if constexpr (kCluster > 1) {
      cudaLaunchConfig_t probe = config;
      probe.gridDim = dim3(kCluster);
      probe.dynamicSmemBytes = static_cast<size_t>(optin);
      int n = 0;
      err = cudaOccupancyMaxActiveClusters(&n, kernel, &probe);
      max_clusters[device & 63].store(n, std::memory_order_relaxed);
    }
    return err;
  });
  if constexpr (kCluster > 1) {
    const int resident = max_clusters[dev & 63].load(std::memory_order_relaxed);
    DMOE_CHECK_ARG(resident >= 1, "grouped_gemm: no ", kCluster,
                   "-CTA cluster of this kernel fits on the device (shared memory)");
    grid = std::min(grid / kCluster, resident) * kCluster;
    grid = std::max(grid, kCluster);
  }
  config.gridDim = dim3(static_cast<unsigned>(grid));
  DMOE_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, p));
}

template <class Kernel>
int grouped_gemm_smem_bytes(int num_experts) {
  return Kernel::smem_bytes(num_experts);
}

// ---- from a list entry (grouped_gemm_launch.h: kGemmKernelSpecs[I]) to its types ------------------
template <size_t I>
inline constexpr GemmKernelSpec kSpec = kGemmKernelSpecs[I];

// Whether entry I is an FP8-blockwise kernel (its mainloop promotes per 128 of K).
template <size_t I>
inline constexpr bool kSpecFp8Blockwise = (kSpec<I>.a == kFp8BlockwiseRows && kSpec<I>.b == kFp8BlockwiseWeight) ||
                                          (kSpec<I>.a == kFp8BlockwiseRowsT && kSpec<I>.b == kFp8BlockwiseRowsT);

// Whether entry I is an MXFP8 kernel (its mainloop promotes per 32 of K), or the MXFP8 baseline
// that dequantizes both operands to BF16 (dequant_bf16).
template <size_t I>
inline constexpr bool kSpecMxfp8 = kSpec<I>.a == kMxfp8Rows && kSpec<I>.b == kMxfp8Weight && !kSpec<I>.dequant_bf16;
template <size_t I>
inline constexpr bool kSpecMxfp8Dequant = kSpec<I>.a == kMxfp8Rows && kSpec<I>.b == kMxfp8Weight && kSpec<I>.dequant_bf16;

// Whether entry I is an NVFP4 kernel (packed or expanded token rows x NVFP4 weights, FP16 RS wgmma).
template <size_t I>
inline constexpr bool kSpecNvfp4 =
    (kSpec<I>.a == kNvfp4Rows || kSpec<I>.a == kNvfp4ExpandedRows) && kSpec<I>.b == kNvfp4Weight;

// The operand type of an entry's wgmma: BF16 without scales, an E4M3 pair, or NVFP4's FP16.
template <size_t I>
struct SpecOperands {
  static_assert((kSpec<I>.a == OperandFormat{} && kSpec<I>.b == OperandFormat{}) || kSpecFp8Blockwise<I> ||
                    kSpecMxfp8<I> || kSpecMxfp8Dequant<I> || kSpecNvfp4<I>,
                "only BF16 operands without scales, FP8-blockwise, MXFP8 and NVFP4 operands have a mainloop");
  static_assert(!kSpec<I>.dequant_bf16 || kSpecMxfp8Dequant<I>, "dequant_bf16 is an MXFP8 mainloop");
  using type = std::conditional_t<kSpecNvfp4<I>, ptx::WgmmaTypeF16Rs,
                                  std::conditional_t<kSpecFp8Blockwise<I> || kSpecMxfp8<I>, ptx::WgmmaTypeE4m3,
                                                     ptx::WgmmaTypeBf16>>;
};

template <size_t I>
using SpecMainloopConfig = gemm::MainloopConfig<
    kSpec<I>.kind, kSpec<I>.block_m, kSpec<I>.block_n, kSpec<I>.stages,
    kSpec<I>.pingpong ? gemm::ConsumerSchedule::kPingPong : gemm::ConsumerSchedule::kCooperative,
    kSpec<I>.epilogue == GemmEpilogueKind::kSwiglu ? gemm::WeightSplit::kGateUp : gemm::WeightSplit::kNone,
    kSpec<I>.cluster_m, typename SpecOperands<I>::type>;

template <size_t I>
using SpecMxfp8Mainloop =
    std::conditional_t<kSpec<I>.kind == gemm::GemmKind::kFpropSwapAB, gemm::Sm90Mxfp8SwapABMainloop<SpecMainloopConfig<I>>,
                       gemm::Sm90Mxfp8Mainloop<SpecMainloopConfig<I>>>;

template <size_t I>
using SpecFp8BlockwiseMainloop =
    std::conditional_t<kSpec<I>.kind == gemm::GemmKind::kFpropSwapAB,
                       gemm::Sm90Fp8BlockwiseSwapABMainloop<SpecMainloopConfig<I>>,
                       gemm::Sm90Fp8BlockwiseMainloop<SpecMainloopConfig<I>, kSpec<I>.promote_k>>;

template <size_t I>
using SpecMainloop = std::conditional_t<
    kSpecNvfp4<I>, gemm::Sm90Nvfp4SwapABMainloop<SpecMainloopConfig<I>, kSpec<I>.a == kNvfp4ExpandedRows>,
    std::conditional_t<
        kSpecMxfp8<I>, SpecMxfp8Mainloop<I>,
        std::conditional_t<kSpecMxfp8Dequant<I>, gemm::Sm90Mxfp8DequantMainloop<SpecMainloopConfig<I>>,
                           std::conditional_t<kSpecFp8Blockwise<I>, SpecFp8BlockwiseMainloop<I>,
                                              gemm::Sm90Mainloop<SpecMainloopConfig<I>>>>>>;

// The MXFP8 128x128 tile (the entries fprop_kernel / w13_kernel(128, 128, 5).tma().mxfp8()), for the
// kernels built outside the list on it: the Mega rows form, the W2 DGRAD with SwiGLU backward.
template <gemm::WeightSplit kSplit>
using Mxfp8RowsMainloop = gemm::Sm90Mxfp8Mainloop<gemm::MainloopConfig<
    gemm::GemmKind::kFprop, 128, 128, 5, gemm::ConsumerSchedule::kCooperative, kSplit, 1, ptx::WgmmaTypeE4m3>>;

template <GemmWriter kWriter>
struct WriterOf;
template <>
struct WriterOf<GemmWriter::kPadded> {
  using type = gemm::PaddedStagingWriter;
};
template <>
struct WriterOf<GemmWriter::kTma> {
  using type = gemm::SwizzledTmaWriter;
};
template <>
struct WriterOf<GemmWriter::kTmaDeep> {
  using type = gemm::SwizzledTmaWriter4;
};
template <size_t I>
using SpecWriter = typename WriterOf<kSpec<I>.writer>::type;

// Output element of the store epilogues.
template <size_t I>
using SpecOut = std::conditional_t<kSpec<I>.epilogue == GemmEpilogueKind::kStoreFp32, float, numeric::bf16_t>;

template <size_t I>
inline constexpr gemm::RowSource kSpecRows = kSpec<I>.gather ? gemm::RowSource::kGather : gemm::RowSource::kTma;

// Entry I's functions, when it belongs to kFile: KernelOf<I>::type is its kernel (each
// instantiation file maps its family's epilogue); other entries are not instantiated here.
template <GemmKernelFile kFile, template <size_t> class KernelOf, size_t I>
void add_kernel_if_in_file(GemmKernelFns* fns) {
  if constexpr (kSpec<I>.file() == kFile) {
    using Kernel = typename KernelOf<I>::type;
    static_assert(Kernel::Writer::kTma == kSpec<I>.tma_store() && Kernel::kGather == kSpec<I>.gather,
                  "the kernel type matches its list entry");
    fns[I] = GemmKernelFns{&launch_grouped_gemm<Kernel>, &grouped_gemm_smem_bytes<Kernel>};
  }
}

template <GemmKernelFile kFile, template <size_t> class KernelOf, size_t... I>
void add_kernels_of_file(GemmKernelFns* fns, std::index_sequence<I...>) {
  (add_kernel_if_in_file<kFile, KernelOf, I>(fns), ...);
}

// Instantiates every list entry of kFile and fills its slot of fns.
template <GemmKernelFile kFile, template <size_t> class KernelOf>
void add_kernels_of_file(GemmKernelFns* fns) {
  add_kernels_of_file<kFile, KernelOf>(fns, std::make_index_sequence<kNumGemmKernels>{});
}

}  // namespace dist_moe::gemm
