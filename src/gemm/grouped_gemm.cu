// Host side of the SM90 grouped GEMMs: argument validation, configuration choice (heuristic or
// override), the count-validation kernel, and dispatch to a compiled kernel.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/env_knobs.h"
#include "dist_moe/check.h"
#include "dist_moe/device/numeric/nvfp4.cuh"
#include "dist_moe/device/ptx/special_registers.cuh"
#include "dist_moe/error.h"
#include "dist_moe/grouped_gemm.h"
#include "gemm/grouped_gemm_launch.h"

namespace dist_moe {
namespace {

using gemm::GemmEpilogueKind;
using gemm::GemmKernelEntry;
using gemm::GemmLaunch;
using gemm::GemmKind;

constexpr int64_t kMaxExperts = 1024;
constexpr int64_t kInt32Max = 2147483647;

// ---- device facts (never hard-coded) ----------------------------------------------------------
struct DeviceFacts {
  int num_sms = 0;
  int smem_optin = 0;
};

DeviceFacts device_facts() {
  int dev = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&dev));
  DeviceFacts f;
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&f.num_sms, cudaDevAttrMultiProcessorCount, dev));
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&f.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  int major = 0, minor = 0;
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major != 9 || minor != 0)
    detail::fail(ErrorCode::kRuntime, "the grouped GEMM kernels need an SM90 GPU (H100/H200); device ", dev,
                 " has compute capability ", major, ".", minor);
  return f;
}

// ---- count and offset validation (prints, then traps) -------------------------------------------
// One warp. The GEMM kernels check the same conditions but can only trap (a printf in a wgmma
// kernel serializes its wgmmas), so this kernel gives the readable message first.
// The offset fields of the API, by name (the device prints the name; host strings are not
// addressable there).
enum OffsetName : int {
  kOffA, kOffOut, kOffH1, kOffH2, kOffGathered, kOffGradOut, kOffGradA, kOffWgradA, kOffColumns, kNumOffsetNames
};

struct OffsetChecks {
  const int64_t* ptr[gemm::kNumMaps] = {};
  int name[gemm::kNumMaps] = {};
};

// The offset fields a call uses, one per validation lane in the order given.
struct NamedOffset {
  const int64_t* ptr;
  OffsetName name;
};

OffsetChecks offset_checks(std::initializer_list<NamedOffset> used) {
  OffsetChecks oc;
  int lane = 0;
  for (const NamedOffset& o : used) {
    oc.ptr[lane] = o.ptr;
    oc.name[lane] = o.name;
    ++lane;
  }
  return oc;
}

__global__ void validate_counts_kernel(const int32_t* counts, int32_t num_experts, long long m_capacity, int op,
                                       OffsetChecks offsets, int32_t count_multiple) {
  const char* const names[] = {"fprop", "w13_fprop_swiglu", "dgrad", "wgrad"};
  const char* const offset_names[kNumOffsetNames] = {"a_offset",        "out_offset",      "h1_offset",
                                                     "h2_offset",       "gather.gathered_offset",
                                                     "grad_out_offset", "grad_a_offset",   "a_offset",
                                                     "the column bundle's offset"};
  const char* name = names[op];
  const int lane = static_cast<int>(threadIdx.x);
  if (lane < gemm::kNumMaps && offsets.ptr[lane] != nullptr) {
    const long long off = static_cast<long long>(*offsets.ptr[lane]);
    if (off % 128 != 0) {
      printf("dist_moe grouped_gemm %s: %s = %lld bytes is not a multiple of 128 (device-side operand offsets must "
             "keep TMA's alignment)\n",
             name, offset_names[offsets.name[lane]], off);
      ptx::trap();
    }
  }
  long long total = 0;
  for (int base = 0; base < num_experts; base += 32) {
    const int i = base + lane;
    const int32_t c = i < num_experts ? counts[i] : 0;
    if (c < 0) {
      printf("dist_moe grouped_gemm %s: counts[%d] = %d is negative (row counts per expert must be >= 0)\n", name, i, c);
      ptx::trap();
    }
    if (c % count_multiple != 0) {
      printf("dist_moe grouped_gemm %s: counts[%d] = %d is not a multiple of %d (the operands' token blocks)\n", name,
             i, c, count_multiple);
      ptx::trap();
    }
    long long s = c;
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    total += s;
  }
  if (total > m_capacity) {
    if (lane == 0)
      printf("dist_moe grouped_gemm %s: the %d expert row counts sum to %lld rows, more than m_capacity = %lld "
             "(rows the row buffers hold)\n",
             name, num_experts, total, m_capacity);
    __syncwarp();
    ptx::trap();
  }
}

// ---- kernel table -----------------------------------------------------------------------------
GemmKind kind_of(GroupedGemmOp op, bool swap_ab) {
  switch (op) {
    case GroupedGemmOp::kFprop:
    case GroupedGemmOp::kFpropSwiglu: return swap_ab ? GemmKind::kFpropSwapAB : GemmKind::kFprop;
    case GroupedGemmOp::kDgrad: return GemmKind::kDgrad;
    case GroupedGemmOp::kWgrad: return GemmKind::kWgrad;
  }
  return GemmKind::kFprop;
}

GemmEpilogueKind epilogue_of(GroupedGemmOp op, DType out) {
  if (op == GroupedGemmOp::kFpropSwiglu) return GemmEpilogueKind::kSwiglu;
  return out == DType::kFloat32 ? GemmEpilogueKind::kStoreFp32 : GemmEpilogueKind::kStoreBf16;
}

GroupedGemmConfig config_of(const GemmKernelEntry& e, int sms) {
  GroupedGemmConfig c;
  c.block_m = e.block_m;
  c.block_n = e.block_n;
  c.block_k = grouped_gemm_block_k(e.a, e.b);
  c.stages = e.stages;
  c.num_sms = sms;
  c.swap_ab = e.kind == GemmKind::kFpropSwapAB;
  c.gather = e.gather;
  c.cluster_m = e.cluster_m;
  c.pingpong = e.pingpong;
  c.tma_store = e.tma_store();
  c.mxfp8_dequant = e.dequant_bf16;
  c.promote_k = e.promote_k;
  return c;
}

// The kernels of one op, output type and pair of operand formats (any tile).
bool entry_computes(const GemmKernelEntry& e, GroupedGemmOp op, DType out, const OperandFormat& a,
                    const OperandFormat& b) {
  const bool kind_ok = e.kind == kind_of(op, false) || e.kind == kind_of(op, true);
  return kind_ok && e.epilogue == epilogue_of(op, out) && e.a == a && e.b == b;
}

bool entry_matches(const GemmKernelEntry& e, GroupedGemmOp op, DType out, bool gather, const OperandFormat& a,
                   const OperandFormat& b) {
  return entry_computes(e, op, out, a, b) && e.gather == gather;
}

// The block scales a call's formats need are given (and only those). b_in_bundle: B is a compact
// FP8-blockwise column bundle, whose scales follow its data (WgradArgs::a_compact_rows).
void check_scales(const GroupedGemmCommon& c, const char* op, bool b_in_bundle) {
  const OperandScales& s = c.scales;
  if (c.a_format == kNvfp4Rows || c.a_format == kNvfp4ExpandedRows) {
    // The packed token rows carry their E4M3 scales and FP32 token_scale_inv; expanded rows have
    // their scales folded in and the FP32 token_scale_inv [m_capacity] in scales.a. The weight's
    // E4M3 scales [e_local * n, k/16] and FP32 global_scale_inv [e_local] come separately.
    if (c.a_format == kNvfp4Rows)
      DMOE_CHECK_ARG(s.a == nullptr, op, ": scales.a must be nullptr for A=", c.a_format.name(),
                     " (the packed rows carry their scales)");
    else
      DMOE_CHECK_ARG(s.a != nullptr && reinterpret_cast<uintptr_t>(s.a) % 4 == 0, op, ": A=", c.a_format.name(),
                     " needs its FP32 token_scale_inv [m_capacity] in scales.a (4-byte aligned)");
    DMOE_CHECK_ARG(s.b != nullptr && s.b_global != nullptr, op, ": B (", c.b_format.name(),
                   ") needs its E4M3 scales in scales.b and its global_scale_inv in scales.b_global");
    DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(s.b) % 16 == 0, op, ": scales.b must be 16-byte aligned");
    DMOE_CHECK_ARG(c.k % 256 == 0, op, ": NVFP4 needs k to be a multiple of 256 (the kernels' stage), got ", c.k);
    DMOE_CHECK_ARG(c.e_local * c.n * (c.k / 16) <= kInt32Max, op,
                   ": the B scale grid exceeds 2^31 bytes (the kernels index it in int32)");
    return;
  }
  DMOE_CHECK_ARG(s.b_global == nullptr, op, ": scales.b_global is for NVFP4 weights only");
  DMOE_CHECK_ARG(!s.a_kblock_words || c.a_format == kMxfp8Rows, op, ": scales.a_kblock_words is for MXFP8 rows only");
  if (c.a_format.scale == ScaleKind::kNone) {
    DMOE_CHECK_ARG(s.a == nullptr, op, ": scales.a is set but A (", c.a_format.name(), ") has no block scales");
  } else if (c.a_format == kMxfp8Rows) {
    // E8M0 bytes: A [m_capacity, k/32] (a_ld = k/32), B the weight's FPROP view [e_local * n, k/32];
    // the kernels read four codes (one 128-deep k block) as one 32-bit word.
    DMOE_CHECK_ARG(s.a != nullptr && s.b != nullptr, op, ": A and B (", c.a_format.name(), ", ", c.b_format.name(),
                   ") need their E8M0 scales in scales.a and scales.b");
    DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(s.a) % 16 == 0 && reinterpret_cast<uintptr_t>(s.b) % 16 == 0, op,
                   ": scales.a and scales.b must be 16-byte aligned");
    if (s.a_kblock_words) {
      DMOE_CHECK_ARG(c.k % 128 == 0 && s.a_ld >= c.m_capacity, op,
                     ": k-block-major A scale words need k % 128 == 0 and scales.a_ld >= m_capacity = ", c.m_capacity,
                     " (k = ", c.k, ", a_ld = ", s.a_ld, ")");
    } else {
      DMOE_CHECK_ARG(s.a_ld >= c.k / 32 && s.a_ld % 4 == 0, op, ": scales.a_ld must be at least k/32 = ", c.k / 32,
                     " and a multiple of 4 (the A scale grid is [m_capacity, k/32] bytes, rows a_ld apart), got ",
                     s.a_ld);
    }
    // (k-block words: [k/128, a_ld] words, a_ld the rows; bytes: [m_capacity, a_ld] bytes)
    const int64_t a_grid_bytes = s.a_kblock_words ? (c.k / 128) * s.a_ld * 4 : c.m_capacity * s.a_ld;
    DMOE_CHECK_ARG(a_grid_bytes <= kInt32Max && c.e_local * c.n * (c.k / 32) <= kInt32Max, op,
                   ": the scale grids exceed 2^31 bytes (the kernels index them in int32)");
    return;
  } else if (c.a_format == kFp8BlockwiseRowsT) {
    // WGRAD's transposed columns: A scales [m_capacity / 128, n], B scales [m_capacity / 128, k]
    // (a compact B bundle: after its data).
    if (b_in_bundle) {
      DMOE_CHECK_ARG(s.a != nullptr && s.b == nullptr, op, ": A (", c.a_format.name(),
                     ") needs its block scales in scales.a; a compact B bundle holds its own (scales.b must be nullptr)");
    } else {
      DMOE_CHECK_ARG(s.a != nullptr && s.b != nullptr, op, ": A and B (", c.a_format.name(),
                     ") need their block scales in scales.a and scales.b");
    }
    DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(s.a) % 16 == 0 && reinterpret_cast<uintptr_t>(s.b) % 16 == 0, op,
                   ": scales.a and scales.b must be 16-byte aligned");
    DMOE_CHECK_ARG(s.a_ld == c.n, op, ": scales.a_ld must be n = ", c.n, " (the A scale grid is [m_capacity / 128, n]), got ",
                   s.a_ld);
    DMOE_CHECK_ARG(c.m_capacity % 128 == 0, op, ": m_capacity must be a multiple of 128 (tokens in 128-blocks), got ",
                   c.m_capacity);
    DMOE_CHECK_ARG((c.m_capacity / 128) * std::max(c.n, c.k) <= kInt32Max, op,
                   ": the scale grids exceed 2^31 elements (the kernels index them in int32)");
    return;
  } else {
    DMOE_CHECK_ARG(s.a != nullptr, op, ": A (", c.a_format.name(), ") needs its block scales in scales.a");
    DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(s.a) % 16 == 0, op, ": scales.a must be 16-byte aligned");
    DMOE_CHECK_ARG(s.a_ld >= c.m_capacity && s.a_ld % 4 == 0, op,
                   ": scales.a_ld must be a multiple of 4 and >= m_capacity = ", c.m_capacity, ", got ", s.a_ld);
    DMOE_CHECK_ARG((c.k / 128) * s.a_ld <= kInt32Max, op, ": the A scale grid (", c.k / 128, " x ", s.a_ld,
                   ") exceeds 2^31 elements (the kernels index it in int32)");
  }
  if (c.b_format.scale == ScaleKind::kNone) {
    DMOE_CHECK_ARG(s.b == nullptr, op, ": scales.b is set but B (", c.b_format.name(), ") has no block scales");
  } else {
    DMOE_CHECK_ARG(s.b != nullptr, op, ": B (", c.b_format.name(), ") needs its block scales in scales.b");
    DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(s.b) % 16 == 0, op, ": scales.b must be 16-byte aligned");
    DMOE_CHECK_ARG(c.e_local * (c.n / 128) * (c.k / 128) <= kInt32Max, op, ": the B scale grid (", c.e_local,
                   " x ", c.n / 128, " x ", c.k / 128, ") exceeds 2^31 elements (the kernels index it in int32)");
  }
}

// Block-scaled A rows come from a plain buffer (no gather producer reads them) at their own
// address: a device-side offset would move the rows but not scales.a.
void check_block_scaled_rows(const GroupedGemmCommon& c, const GatherArgs& g, const int64_t* rows_offset,
                             const char* op, const char* offset_name) {
  if (c.a_format.scale == ScaleKind::kNone) return;
  DMOE_CHECK_ARG(g.row_ptrs == nullptr, op, ": A=", c.a_format.name(), " has no gather producer (gather.row_ptrs must be nullptr)");
  DMOE_CHECK_ARG(rows_offset == nullptr, op, ": ", offset_name, " would move the A rows (", c.a_format.name(),
                 ") but not scales.a; block-scaled A takes no device offset");
}

// Fails unless some kernel computes `op` on these operand formats: checked before any heuristic
// or launch, so an unsupported format is never run by a kernel of another one.
void check_formats(GroupedGemmOp op, DType out, const GroupedGemmCommon& c, const char* op_name,
                   bool b_in_bundle = false) {
  std::set<std::string> compiled;
  for (const GemmKernelEntry& e : gemm::gemm_kernels()) {
    if (entry_computes(e, op, out, c.a_format, c.b_format)) return check_scales(c, op_name, b_in_bundle);
    if (entry_computes(e, op, out, e.a, e.b)) compiled.insert("A=" + e.a.name() + ", B=" + e.b.name());
  }
  std::ostringstream have;
  for (const std::string& f : compiled) have << " (" << f << ")";
  detail::fail(ErrorCode::kInvalidValue, op_name, ": no grouped GEMM kernel for A=", c.a_format.name(),
               ", B=", c.b_format.name(), " (", to_string(op), ", ", to_string(out), " output); compiled formats:",
               have.str());
}

const GemmKernelEntry& find_kernel(GroupedGemmOp op, DType out, const GroupedGemmCommon& c,
                                   const GroupedGemmConfig& cfg) {
  const GemmKind kind = kind_of(op, cfg.swap_ab);
  for (const GemmKernelEntry& e : gemm::gemm_kernels()) {
    if (e.kind == kind && e.epilogue == epilogue_of(op, out) && e.a == c.a_format && e.b == c.b_format &&
        e.gather == cfg.gather && e.block_m == cfg.block_m && e.block_n == cfg.block_n && e.stages == cfg.stages &&
        e.cluster_m == cfg.cluster_m && e.pingpong == cfg.pingpong && e.tma_store() == cfg.tma_store &&
        e.dequant_bf16 == cfg.mxfp8_dequant && e.promote_k == cfg.promote_k)
      return e;
  }
  std::ostringstream avail;
  for (const GroupedGemmConfig& g : grouped_gemm_configs(op, out, cfg.gather, c.a_format, c.b_format))
    avail << " " << g.name();
  detail::fail(ErrorCode::kInvalidValue, "grouped_gemm ", to_string(op), ": no compiled kernel for config ", cfg.name(),
               " with ", to_string(out), " output; available:", avail.str());
}

// ---- argument checks --------------------------------------------------------------------------
void check_common(const GroupedGemmCommon& c, const char* op) {
  DMOE_CHECK_ARG(c.counts != nullptr, op, ": counts must be a device int32 [e_local] array, got nullptr");
  DMOE_CHECK_ARG(c.e_local >= 1 && c.e_local <= kMaxExperts, op, ": e_local must be in [1, ", kMaxExperts, "], got ",
                 c.e_local);
  DMOE_CHECK_ARG(c.m_capacity >= 0 && c.m_capacity <= kInt32Max, op, ": m_capacity must be in [0, ", kInt32Max,
                 "], got ", c.m_capacity);
  DMOE_CHECK_ARG(c.n >= 128 && c.n % 128 == 0, op, ": n (weight rows) must be a positive multiple of 128, got ", c.n);
  DMOE_CHECK_ARG(c.k >= 128 && c.k % 128 == 0, op, ": k (weight columns) must be a positive multiple of 128, got ",
                 c.k);
  DMOE_CHECK_ARG(c.e_local * c.n <= kInt32Max, op, ": e_local * n = ", c.e_local * c.n,
                 " weight rows exceed the int32 TMA coordinate range");
  DMOE_CHECK_ARG(c.promote_k == 128 || c.promote_k == 64 || c.promote_k == 32, op,
                 ": promote_k must be 128, 64 or 32, got ", c.promote_k);
  if (c.config != nullptr) {
    const int block_k = grouped_gemm_block_k(c.a_format, c.b_format);  // one stage row of k
    DMOE_CHECK_ARG(c.config->block_k == block_k, op, ": config.block_k must be ", block_k, ", got ",
                   c.config->block_k);
    DMOE_CHECK_ARG(c.config->cluster_m == 1 || c.config->cluster_m == 2, op, ": config.cluster_m must be 1 or 2, got ",
                   c.config->cluster_m);
    DMOE_CHECK_ARG(c.config->cluster_m == 1 || !c.config->dynamic_schedule, op,
                   ": config.dynamic_schedule needs cluster_m = 1 (a cluster's CTAs share one static schedule)");
    DMOE_CHECK_ARG(c.config->num_sms >= 0, op, ": config.num_sms must be >= 0, got ", c.config->num_sms);
  }
}

void check_ptr(const void* p, const char* op, const char* name) {
  DMOE_CHECK_ARG(p != nullptr, op, ": ", name, " is nullptr");
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(p) % 16 == 0, op, ": ", name, " must be 16-byte aligned");
}

void check_gather(const GatherArgs& g, const char* op) {
  DMOE_CHECK_ARG(g.gathered != nullptr && g.workspace != nullptr, op,
                 ": gather.row_ptrs is set, so gather.gathered and gather.workspace must be too");
  check_ptr(g.gathered, op, "gather.gathered");
}

// The A rows come from the gather producer when it is set, else from the plain buffer `rows`.
void check_row_input(const GatherArgs& g, const void* rows, const char* op, const char* rows_name) {
  if (g.row_ptrs != nullptr) check_gather(g, op); else check_ptr(rows, op, rows_name);
}

// With scatter the rows go to the row table, so the plain output buffer may be absent.
void check_row_output(const ScatterArgs& s, const void* out, const char* op, const char* out_name) {
  if (s.row_ptrs == nullptr) check_ptr(out, op, out_name);
}

void check_out_dtype(DType out, const char* op) {
  DMOE_CHECK_ARG(out == DType::kBFloat16 || out == DType::kFloat32, op, ": out_dtype must be bfloat16 or float32, got ",
                 to_string(out));
}

// ---- launch fields shared by the ops ----------------------------------------------------------------
// The gather producer's ready counters must start at zero on every call. `a` is the op's
// arguments (any with .gather and .common), so a failure reads as it did inline.
template <class OpArgs>
void zero_gather_workspace(const OpArgs& a, cudaStream_t stream) {
  if (a.gather.row_ptrs == nullptr) return;
  DMOE_CUDA_CHECK(cudaMemsetAsync(a.gather.workspace, 0,
                                  grouped_gemm_gather_workspace_bytes(a.common.m_capacity, a.common.e_local), stream));
}

// The A row operand: the plain buffer, or (with gather) the gathered copy, whose offset then
// replaces the plain one.
void set_row_input(GemmLaunch& L, const void* rows, const int64_t* rows_offset, const GatherArgs& g) {
  L.a = rows;
  L.gather_rows = g.row_ptrs;
  L.gathered = g.gathered;
  L.ready = g.workspace;
  L.a_offset = g.row_ptrs != nullptr ? g.gathered_offset : rows_offset;
}

// The [m_capacity, out_cols] row output: the plain buffer, or (with scatter) the row table.
void set_row_output(GemmLaunch& L, void* out, const int64_t* out_offset, const ScatterArgs& s, int64_t out_cols) {
  const bool scatter = s.row_ptrs != nullptr;
  L.out = scatter ? nullptr : out;
  L.out_offset = scatter ? nullptr : out_offset;
  L.epilogue.ld_out = out_cols;
  L.epilogue.out_cols = static_cast<int32_t>(out_cols);
  L.epilogue.scatter_rows = s.row_ptrs;
  L.epilogue.row_scale = s.row_scale;
}

// ---- per-stream state ------------------------------------------------------------------------------
// The GEMMs' per-stream buffers are kept per (device, stream, host thread): cudaStreamPerThread names a
// different stream in every host thread.
using StreamKey = std::tuple<int, uintptr_t, std::thread::id>;
StreamKey stream_key(cudaStream_t stream) {
  int dev = 0;
  DMOE_CUDA_CHECK(cudaGetDevice(&dev));
  const std::thread::id tid = stream == cudaStreamPerThread ? std::this_thread::get_id() : std::thread::id();
  return std::make_tuple(dev, reinterpret_cast<uintptr_t>(stream), tid);
}

// `call()` (a cudaError_t) in relaxed capture mode: the first use may come inside a graph capture, and
// allocations and symbol lookups are no stream operations.
template <class Call>
void outside_capture(Call&& call) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  DMOE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t err = call();
  DMOE_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  DMOE_CUDA_CHECK(err);
}

// ---- tensor-map workspace for device-side offsets -----------------------------------------------
// Kernels whose operands move at run time patch their tensor maps in global memory, one slot per
// (CTA, map) (device/gemm/operands.cuh). A buffer per stream (stream_key) keeps kernels that may run
// concurrently apart; kernels on one stream run one after another, so they can share it. Allocated
// on first use (outside_capture); never freed: 5 x 128 bytes per SM (82 KiB) per stream.
CUtensorMap* tensormap_workspace(cudaStream_t stream, int num_sms) {
  const StreamKey key = stream_key(stream);
  static std::mutex mu;
  static std::map<StreamKey, CUtensorMap*> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  void* p = nullptr;
  outside_capture([&] { return cudaMalloc(&p, static_cast<size_t>(num_sms) * gemm::kNumMaps * sizeof(CUtensorMap)); });
  cache.emplace(key, static_cast<CUtensorMap*>(p));
  return static_cast<CUtensorMap*>(p);
}

// ---- dynamic tile schedule counters ----------------------------------------------------------------
// One [next, done] pair per (device, stream, host thread for cudaStreamPerThread), 128 bytes apart.
// A __device__ array is zero when the module loads, and every launch leaves its pair at zero
// (scheduler.cuh), so nothing is allocated or memset and the first call may be inside a capture.
constexpr int kTileCounterSlots = 256;
__device__ int32_t g_tile_counters[kTileCounterSlots * 32];

int32_t* tile_counter_slot(cudaStream_t stream) {
  const StreamKey key = stream_key(stream);
  static std::mutex mu;
  static std::map<StreamKey, int32_t*> cache;
  static std::map<int, int> used;  // slots handed out per device
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  int& n = used[std::get<0>(key)];
  DMOE_CHECK_ARG(n < kTileCounterSlots, "grouped_gemm: config.dynamic_schedule supports at most ", kTileCounterSlots,
                 " streams per device");
  void* base = nullptr;
  outside_capture([&] { return cudaGetSymbolAddress(&base, g_tile_counters); });
  int32_t* slot = static_cast<int32_t*>(base) + 32 * n++;
  cache.emplace(key, slot);
  return slot;
}

// Prints "op problem -> config" once per distinct line when DMOE_PRINT_GEMM_CONFIG is set.
void maybe_print_config(const GroupedGemmProblem& p, const GroupedGemmConfig& c, bool overridden) {
  static const bool enabled = core::env_get("DMOE_PRINT_GEMM_CONFIG") != nullptr;
  if (!enabled) return;
  std::ostringstream os;
  os << "dist_moe grouped_gemm " << to_string(p.op) << " m_capacity=" << p.m_capacity << " n=" << p.n << " k=" << p.k
     << " e_local=" << p.e_local << " a=" << p.a_format.name() << " b=" << p.b_format.name()
     << " out=" << to_string(p.out_dtype) << " -> " << c.name() << " on " << c.num_sms
     << " SMs" << (overridden ? " (override)" : "");
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(os.str()).second) std::fprintf(stderr, "%s\n", os.str().c_str());
}

}  // namespace

GroupedGemmProblem grouped_gemm_problem(GroupedGemmOp op, const GroupedGemmCommon& c, DType out_dtype, bool gather,
                                        bool scatter, bool accumulate) {
  GroupedGemmProblem p;
  p.op = op;
  p.m_capacity = c.m_capacity;
  p.m_bound = c.m_bound;
  p.routed_rows_bound = c.routed_rows_bound;
  p.n = c.n;
  p.k = c.k;
  p.e_local = c.e_local;
  p.out_dtype = out_dtype;
  p.gather = gather;
  p.scatter = scatter;
  p.accumulate = accumulate;
  p.a_format = c.a_format;
  p.b_format = c.b_format;
  p.tile_rows = c.tile_rows != nullptr;
  p.promote_k = c.promote_k;
  return p;
}

namespace {

// The launch fields every op takes from its common arguments.
void fill_launch(GemmLaunch& L, const GroupedGemmCommon& c, int num_sms, int device_sms, cudaStream_t stream) {
  L.counts = c.counts;
  L.tile_rows = c.tile_rows;
  L.e_local = static_cast<int32_t>(c.e_local);
  L.m_capacity = static_cast<int32_t>(c.m_capacity);
  L.n = static_cast<int32_t>(c.n);
  L.k = static_cast<int32_t>(c.k);
  L.narrow_split = mxfp8_narrow_split_enabled();  // (run() takes its configuration's instead)
  L.num_sms = num_sms;
  L.stream = stream;
  L.a_scales = c.scales.a;
  L.a_scale_ld = c.scales.a_ld;
  L.a_scale_kblock_words = c.scales.a_kblock_words;
  L.b_scales = c.scales.b;
  L.b_global = c.scales.b_global;
  if (L.has_offsets()) L.tensormap_workspace = tensormap_workspace(stream, device_sms);
}

// Fills the launch's common fields, picks the kernel, validates the counts (and offsets) and
// launches. `offsets` names the offset fields the call uses, for the validation message.
// `shown`: the op the caller called, for messages (FP8-blockwise DGRAD runs as kFprop).
void run(GroupedGemmOp op, const GroupedGemmCommon& c, DType out, bool gather, GemmLaunch& L,
         const OffsetChecks& offsets, cudaStream_t stream, std::optional<GroupedGemmOp> shown = std::nullopt,
         int32_t count_multiple = 1) {
  const GroupedGemmOp named = shown.value_or(op);
  const DeviceFacts dev = device_facts();
  const GroupedGemmProblem problem =
      grouped_gemm_problem(op, c, out, gather, L.epilogue.scatter_rows != nullptr, L.epilogue.accumulate != 0);
  GroupedGemmConfig cfg = c.config != nullptr ? *c.config : select_grouped_gemm_config(problem, dev.num_sms);
  // An override must promote at least as often as the call asks (the heuristic's pick does; swap-AB: every 32).
  if (c.config != nullptr && c.a_format == kFp8BlockwiseRows && !cfg.swap_ab)
    DMOE_CHECK_ARG(cfg.promote_k <= c.promote_k, to_string(named), ": configuration ", cfg.name(), " promotes every ",
                   cfg.promote_k, " of K; the call asks for at most ", c.promote_k);
  cfg.gather = gather;
  cfg.num_sms = cfg.num_sms > 0 ? std::min(cfg.num_sms, dev.num_sms) : dev.num_sms;
  DMOE_CHECK_ARG(!(cfg.swap_ab && problem.accumulate), to_string(named), ": configuration ", cfg.name(),
                 " (swap-AB) stores its output and cannot accumulate into it");
  const GemmKernelEntry& e = find_kernel(op, out, c, cfg);
  const int smem = e.smem_bytes(static_cast<int>(c.e_local));
  DMOE_CHECK_ARG(smem <= dev.smem_optin, to_string(named), ": e_local = ", c.e_local, " needs ", smem,
                 " bytes of shared memory with tile ", cfg.name(), "; the device allows ", dev.smem_optin);
  maybe_print_config(problem, cfg, c.config != nullptr);

  L.kind = e.kind;
  fill_launch(L, c, cfg.num_sms, dev.num_sms, stream);
  if (cfg.dynamic_schedule) L.tile_counter = tile_counter_slot(stream);
  L.narrow_split = cfg.narrow_split;
  if (c.validate_counts) {
    validate_counts_kernel<<<1, 32, 0, stream>>>(c.counts, L.e_local, c.m_capacity, static_cast<int>(named), offsets,
                                                 count_multiple);
    DMOE_CUDA_CHECK_LAUNCH();
  }
  e.launch(L);
}

// The E4M3 recipes whose DGRAD runs the FPROP kernel on the weight's transposed copy (E4M3 wgmma
// takes K-major operands only, and DGRAD contracts over the weight's rows).
struct TransposedWeightRecipe {
  const char* name;
  OperandFormat rows;      // grad_out
  OperandFormat weight;    // the row-major weight FPROP reads
  OperandFormat weight_t;  // its transposed copy, DGRAD's B
  const char* weight_t_constant;
  const char* weight_t_layout;
};
constexpr TransposedWeightRecipe kTransposedWeightRecipes[] = {
    {"FP8-blockwise", kFp8BlockwiseRows, kFp8BlockwiseWeight, kFp8BlockwiseWeightT, "kFp8BlockwiseWeightT",
     "E4M3 [e_local, k, n], scales [e_local, k/128, n/128]"},
    {"MXFP8", kMxfp8Rows, kMxfp8Weight, kMxfp8WeightT, "kMxfp8WeightT",
     "E4M3 [e_local, k, n], E8M0 scales [e_local * k, n/32]"},
};

// The recipe whose transposed weight format is `b`, or nullptr.
const TransposedWeightRecipe* transposed_weight_recipe(const OperandFormat& b) {
  for (const TransposedWeightRecipe& r : kTransposedWeightRecipes)
    if (b == r.weight_t) return &r;
  return nullptr;
}

// The op and weight format whose kernels a call runs: E4M3 DGRAD (B = a transposed weight format)
// runs the FPROP kernels on the row-major copy; everything else itself.
struct KernelForm {
  GroupedGemmOp op;
  OperandFormat b;
  bool transposed_dgrad;
};
KernelForm kernel_form(GroupedGemmOp op, const OperandFormat& b) {
  if (const TransposedWeightRecipe* r = transposed_weight_recipe(b); op == GroupedGemmOp::kDgrad && r)
    return {GroupedGemmOp::kFprop, r->weight, true};
  return {op, b, false};
}

}  // namespace

// ---- kernel registry ----------------------------------------------------------------------------
namespace gemm {
// kGemmKernelSpecs in its order, each entry with the functions its instantiation file compiled.
const std::vector<GemmKernelEntry>& gemm_kernels() {
  static const std::vector<GemmKernelEntry> all = [] {
    std::vector<GemmKernelFns> fns(kNumGemmKernels);
    add_fprop_kernels(fns.data());
    add_w13_kernels(fns.data());
    add_dgrad_kernels(fns.data());
    add_wgrad_kernels(fns.data());
    add_decode_kernels(fns.data());
    std::vector<GemmKernelEntry> v;
    for (size_t i = 0; i < kNumGemmKernels; ++i) {
      DMOE_ASSERT(fns[i].launch != nullptr && fns[i].smem_bytes != nullptr);  // every entry has a file
      GemmKernelEntry e;
      static_cast<GemmKernelSpec&>(e) = kGemmKernelSpecs[i];
      e.launch = fns[i].launch;
      e.smem_bytes = fns[i].smem_bytes;
      v.push_back(e);
    }
    return v;
  }();
  return all;
}
}  // namespace gemm

std::vector<GroupedGemmConfig> grouped_gemm_configs(GroupedGemmOp op, DType out_dtype, bool gather,
                                                    const OperandFormat& a_format, const OperandFormat& b_format) {
  // E4M3 DGRAD runs the FPROP kernels on the weight's transposed copy: their configurations, but
  // not the swap-AB (decode) ones, whose epilogue cannot accumulate (the heuristic takes them only
  // for a decode-sized DGRAD that writes its output).
  if (const KernelForm f = kernel_form(op, b_format); f.transposed_dgrad) {
    std::vector<GroupedGemmConfig> v = grouped_gemm_configs(f.op, out_dtype, gather, a_format, f.b);
    v.erase(std::remove_if(v.begin(), v.end(), [](const GroupedGemmConfig& c) { return c.swap_ab; }), v.end());
    return v;
  }
  std::vector<GroupedGemmConfig> v;
  for (const GemmKernelEntry& e : gemm::gemm_kernels())
    if (entry_matches(e, op, out_dtype, gather, a_format, b_format)) v.push_back(config_of(e, 0));
  const size_t compiled = v.size();
  for (size_t i = 0; i < compiled; ++i) {
    if (v[i].swap_ab || v[i].cluster_m != 1) continue;
    GroupedGemmConfig d = v[i];
    d.dynamic_schedule = true;
    v.push_back(d);
  }
  // MXFP8 128x128: each schedule also with narrow tiles on warpgroup 0 alone (the A/B twin).
  if (a_format == kMxfp8Rows && b_format == kMxfp8Weight) {
    const size_t scheduled = v.size();
    for (size_t i = 0; i < scheduled; ++i) {
      if (v[i].swap_ab || v[i].mxfp8_dequant) continue;  // (no narrow split to switch off)
      GroupedGemmConfig w = v[i];
      w.narrow_split = false;
      v.push_back(w);
    }
  }
  return v;
}

int grouped_gemm_smem_bytes(GroupedGemmOp op, DType out_dtype, bool gather, const OperandFormat& a_format,
                            const OperandFormat& b_format, const GroupedGemmConfig& config, int64_t e_local) {
  const KernelForm f = kernel_form(op, b_format);
  GroupedGemmCommon c;
  c.a_format = a_format;
  c.b_format = f.b;
  GroupedGemmConfig cfg = config;
  cfg.gather = gather;
  return find_kernel(f.op, out_dtype, c, cfg).smem_bytes(static_cast<int>(e_local));
}

size_t grouped_gemm_gather_workspace_bytes(int64_t m_capacity, int64_t e_local) {
  // One int32 ready counter per possible 128-row M tile: every expert may end in a partial tile.
  return static_cast<size_t>((m_capacity + 127) / 128 + e_local) * sizeof(int32_t);
}

// ---- the four operations --------------------------------------------------------------------------
namespace {

// Checks an FPROP call and fills its launch's operands and epilogue; false: no rows, nothing to run.
bool prepare_fprop(const FpropArgs& a, GemmLaunch& L, cudaStream_t stream, const char* op) {
  check_common(a.common, op);
  check_formats(GroupedGemmOp::kFprop, DType::kBFloat16, a.common, op);
  check_block_scaled_rows(a.common, a.gather, a.a_offset, op, "a_offset");
  check_ptr(a.w, op, "w");
  check_row_input(a.gather, a.a, op, "a");
  check_row_output(a.scatter, a.out, op, "out");
  if (a.common.m_capacity == 0) return false;  // no rows: nothing to compute or store
  zero_gather_workspace(a, stream);
  set_row_input(L, a.a, a.a_offset, a.gather);
  L.b = a.w;
  set_row_output(L, a.out, a.out_offset, a.scatter, a.common.n);
  return true;
}

// The same for W13 FPROP + SwiGLU (the clip statistics are zeroed first unless they accumulate).
bool prepare_w13_fprop(const W13FpropArgs& a, GemmLaunch& L, cudaStream_t stream, const char* op) {
  check_common(a.common, op);
  check_formats(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, a.common, op);
  check_block_scaled_rows(a.common, a.gather, a.a_offset, op, "a_offset");
  DMOE_CHECK_ARG(a.common.n % 256 == 0, op, ": n = 2F must have F a multiple of 128, got n = ", a.common.n);
  check_ptr(a.w13, op, "w13");
  check_ptr(a.h2, op, "h2");
  if (a.h1 != nullptr) check_ptr(a.h1, op, "h1");
  check_row_input(a.gather, a.a, op, "a");
  DMOE_CHECK_ARG(a.activation == Activation::kSwiGLU || a.swiglu_limit > 0.0f, op,
                 ": swiglu_limit must be > 0 for the clamped SwiGLU, got ", a.swiglu_limit);
  if (a.clip_stats != nullptr && !a.accumulate_clip_stats)
    DMOE_CUDA_CHECK(cudaMemsetAsync(a.clip_stats, 0, 3 * sizeof(float), stream));
  if (a.common.m_capacity == 0) return false;
  zero_gather_workspace(a, stream);
  set_row_input(L, a.a, a.a_offset, a.gather);
  L.b = a.w13;
  L.h1 = a.h1;
  L.h2 = a.h2;
  L.h1_offset = a.h1 != nullptr ? a.h1_offset : nullptr;
  L.h2_offset = a.h2_offset;
  L.epilogue.f = static_cast<int32_t>(a.common.n / 2);
  L.epilogue.clamped = a.activation == Activation::kSwiGLUClamped ? 1 : 0;
  L.epilogue.alpha = a.swiglu_alpha;
  L.epilogue.limit = a.swiglu_limit;
  L.epilogue.clip_stats = a.clip_stats;
  L.epilogue.clip_limit = a.clip_limit;
  L.epilogue.real_rows = a.clip_rows;
  return true;
}

}  // namespace

void grouped_gemm_fprop(const FpropArgs& a, cudaStream_t stream) {
  GemmLaunch L;
  if (!prepare_fprop(a, L, stream, "grouped_gemm_fprop")) return;
  const bool gather = a.gather.row_ptrs != nullptr;
  const OffsetChecks oc = offset_checks({{L.a_offset, gather ? kOffGathered : kOffA}, {L.out_offset, kOffOut}});
  run(GroupedGemmOp::kFprop, a.common, DType::kBFloat16, gather, L, oc, stream);
}

void grouped_gemm_w13_fprop(const W13FpropArgs& a, cudaStream_t stream) {
  GemmLaunch L;
  if (!prepare_w13_fprop(a, L, stream, "grouped_gemm_w13_fprop")) return;
  const bool gather = a.gather.row_ptrs != nullptr;
  const OffsetChecks oc = offset_checks(
      {{L.a_offset, gather ? kOffGathered : kOffA}, {L.h1_offset, kOffH1}, {L.h2_offset, kOffH2}});
  run(GroupedGemmOp::kFpropSwiglu, a.common, DType::kBFloat16, gather, L, oc, stream);
}

namespace {

// ---- the Mega decode kernel's chunk counters -------------------------------------------------------
// [chunk_done | chunk_ready | x_ready] int32 arrays per stream (stream_key), zeroed on the stream
// before every launch (one memset node in a graph). Grown by a new allocation when a launch needs more
// chunks; the old one stays (a captured graph may still use it). Allocated outside_capture.
int32_t* mega_chunk_workspace(cudaStream_t stream, int64_t chunks) {
  const StreamKey key = stream_key(stream);
  static std::mutex mu;
  static std::map<StreamKey, std::pair<int32_t*, int64_t>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end() && it->second.second >= chunks) return it->second.first;
  void* p = nullptr;
  outside_capture([&] { return cudaMalloc(&p, static_cast<size_t>(3 * chunks) * sizeof(int32_t)); });
  cache[key] = {static_cast<int32_t*>(p), chunks};
  return static_cast<int32_t*>(p);
}

// The Mega kernel forms (device/gemm/mega.cuh): the decode form's swap-AB tiles (chunks of 16 token
// rows, tile_rows required) or the rows form's 128x128 tiles (chunks of 128 rows; h1 may be stored,
// at a device offset too: ordinary stores through a resolved base, no tensor map).
struct MegaForm {
  gemm::GemmKind kind;
  int64_t chunk_rows;
  bool needs_tile_rows;
  bool takes_h1;
  int64_t dim_multiple;  // of D and F: the decode hand-off's row quantizers take 256 values per warp step
};
constexpr MegaForm kMegaDecode{gemm::GemmKind::kFpropSwapAB, 16, true, false, 256};
constexpr MegaForm kMegaRows{gemm::GemmKind::kFprop, 128, false, true, 128};

// A Mega call's checks common to the formats, both launches filled (false: no rows) and the kernel
// state: counters zeroed on the stream, f. `a` / `b`: the format's operands (both GEMMs).
// h2_columns (the rows form in training): its offset is validated, and the segments must be whole
// 32-row column blocks.
bool prepare_mega(const W13FpropArgs& w13, const FpropArgs& w2, const OperandFormat& a, const OperandFormat& b,
                  const MegaForm& form, const void* const* x_rows, int smem, const char* op, GemmLaunch& L13,
                  GemmLaunch& L2, gemm::MegaParams& m, cudaStream_t stream, const Mxfp8Columns& h2_columns = {}) {
  const GroupedGemmCommon& c13 = w13.common;
  const GroupedGemmCommon& c2 = w2.common;
  for (const GroupedGemmCommon* c : {&c13, &c2})
    DMOE_CHECK_ARG(c->a_format == a && c->b_format == b, op, ": both GEMMs take A=", a.name(), " and B=", b.name(),
                   ", got A=", c->a_format.name(), " B=", c->b_format.name());
  DMOE_CHECK_ARG(c13.counts == c2.counts && c13.tile_rows == c2.tile_rows &&
                     (c13.tile_rows != nullptr || !form.needs_tile_rows) && c13.e_local == c2.e_local &&
                     c13.m_capacity == c2.m_capacity,
                 op, ": both GEMMs need the same counts, tile_rows", form.needs_tile_rows ? " (set)" : "",
                 ", e_local and m_capacity");
  DMOE_CHECK_ARG(c13.n == 2 * c2.k && c2.n == c13.k, op, ": W13 [2F, D] and W2 [D, F] do not match: W13 n=", c13.n,
                 " k=", c13.k, ", W2 n=", c2.n, " k=", c2.k);
  DMOE_CHECK_ARG(c13.k % form.dim_multiple == 0 && c2.k % form.dim_multiple == 0, op, ": D and F must be multiples of ",
                 form.dim_multiple, ", got D=", c13.k, " F=", c2.k);
  DMOE_CHECK_ARG(c13.config == nullptr && c2.config == nullptr, op, ": no configuration override (one fixed tile)");
  DMOE_CHECK_ARG((w13.h1 == nullptr || form.takes_h1) && w13.h2_offset == nullptr && w13.a_offset == nullptr &&
                     w2.a_offset == nullptr && w2.out_offset == nullptr && w13.gather.row_ptrs == nullptr &&
                     w2.gather.row_ptrs == nullptr,
                 op, form.takes_h1 ? ": no device offsets but h1's, no gather producer"
                                   : ": no h1, device offsets or gather producer");
  DMOE_CHECK_ARG(w2.a == w13.h2, op, ": w2.a must be w13.h2 (the hand-off writes W2's rows in place of h2's)");
  const bool run13 = prepare_w13_fprop(w13, L13, stream, op);
  const bool run2 = prepare_fprop(w2, L2, stream, op);
  if (!run13 || !run2) return false;  // no rows
  const DeviceFacts dev = device_facts();
  DMOE_CHECK_ARG(smem <= dev.smem_optin, op, ": e_local = ", c13.e_local, " needs ", smem,
                 " bytes of shared memory; the device allows ", dev.smem_optin);
  fill_launch(L13, c13, dev.num_sms, dev.num_sms, stream);
  fill_launch(L2, c2, dev.num_sms, dev.num_sms, stream);
  L13.kind = L2.kind = form.kind;
  if (c13.validate_counts) {
    // (h1 and the columns: the rows form's; with columns, segments of whole 32-row column blocks)
    validate_counts_kernel<<<1, 32, 0, stream>>>(c13.counts, L13.e_local, c13.m_capacity,
                                                 static_cast<int>(GroupedGemmOp::kFpropSwiglu),
                                                 offset_checks({{L13.h1_offset, kOffH1}, {h2_columns.offset, kOffColumns}}),
                                                 h2_columns.base != nullptr ? 32 : 1);
    DMOE_CUDA_CHECK_LAUNCH();
  }
  // Chunks: the token tiles of all experts, at most m_capacity / chunk_rows + e_local; three counters each.
  const int64_t chunks = c13.m_capacity / form.chunk_rows + c13.e_local + 1;
  int32_t* counters = mega_chunk_workspace(stream, chunks);
  DMOE_CUDA_CHECK(cudaMemsetAsync(counters, 0, static_cast<size_t>(3 * chunks) * sizeof(int32_t), stream));
  m.tile_counter = tile_counter_slot(stream);
  m.chunk_done = counters;
  m.chunk_ready = counters + chunks;
  m.x_ready = counters + 2 * chunks;
  m.x_rows = x_rows;
  m.d = static_cast<int32_t>(c13.k);
  m.f = static_cast<int32_t>(c2.k);
  return true;
}

// The MXFP8 Mega calls' x gather (x_rows) writes x's scales as [m_capacity, D/32] bytes.
void check_mxfp8_x_gather(const W13FpropArgs& w13, const void* const* x_rows, const char* op) {
  const OperandScales& s13 = w13.common.scales;
  DMOE_CHECK_ARG(x_rows == nullptr || (s13.a_ld == w13.common.k / 32 && !s13.a_kblock_words), op,
                 ": gathering x in the launch writes its scales as [m_capacity, D/32] bytes: w13.common.scales.a_ld "
                 "must be D/32 and a_kblock_words false");
}

// The column bundle an MXFP8 epilogue writes beside its rows (optional: base == nullptr skips it).
void check_mxfp8_columns(const Mxfp8Columns& cols, const char* op, const char* name) {
  DMOE_CHECK_ARG(cols.base == nullptr || (cols.rows != nullptr && reinterpret_cast<uintptr_t>(cols.base) % 16 == 0),
                 op, ": ", name, " needs rows (the device count R) and a 16-byte aligned base");
}

void set_mxfp8_columns(gemm::EpilogueParams& e, const Mxfp8Columns& cols) {
  e.mx_col = cols.base;
  e.mx_col_offset = cols.offset;
  e.mx_col_rows = cols.rows;
}

}  // namespace

void grouped_gemm_mega_nvfp4_decode(const W13FpropArgs& w13, const FpropArgs& w2, const MegaNvfp4Handoff& h,
                                    cudaStream_t stream) {
  constexpr const char* op = "grouped_gemm_mega_nvfp4_decode";
  const int64_t F = w2.common.k;
  DMOE_CHECK_ARG(w2.common.scales.a == w13.common.scales.a && w13.common.scales.a != nullptr, op,
                 ": both token_scale_inv arrays must be the same (the hand-off writes h2's over x's)");
  DMOE_CHECK_ARG(h.packed_h2 != nullptr && reinterpret_cast<uintptr_t>(h.packed_h2) % 16 == 0 &&
                     h.packed_stride % 16 == 0 && h.packed_stride >= numeric::nvfp4_packed_row_bytes(F),
                 op, ": handoff.packed_h2 needs 16-byte alignment and a stride of at least ",
                 numeric::nvfp4_packed_row_bytes(F), " bytes, a multiple of 16");
  GemmLaunch L13, L2;
  gemm::MegaParams m;
  if (!prepare_mega(w13, w2, kNvfp4ExpandedRows, kNvfp4Weight, kMegaDecode, h.x_rows,
                    gemm::mega_nvfp4_decode_smem_bytes(static_cast<int>(w13.common.e_local)), op, L13, L2, m, stream))
    return;
  m.packed_h2 = h.packed_h2;
  m.packed_stride = h.packed_stride;
  m.token_scale_inv = static_cast<float*>(const_cast<void*>(w13.common.scales.a));
  gemm::launch_mega_nvfp4_decode(L13, L2, m);
}

void grouped_gemm_mega_mxfp8_decode(const W13FpropArgs& w13, const FpropArgs& w2, cudaStream_t stream,
                                    const void* const* x_rows) {
  constexpr const char* op = "grouped_gemm_mega_mxfp8_decode";
  const int64_t F = w2.common.k;
  const OperandScales& s2 = w2.common.scales;
  DMOE_CHECK_ARG(s2.a == static_cast<const uint8_t*>(w13.h2) + F && s2.a_ld == 2 * F && !s2.a_kblock_words, op,
                 ": w2.common.scales must name h2's codes in place: a = (uint8_t*)w13.h2 + F, a_ld = 2F, "
                 "a_kblock_words = false");
  check_mxfp8_x_gather(w13, x_rows, op);
  // The finisher's four warps keep a row's F / 32 codes each in its staging buffer (mega.cuh).
  DMOE_CHECK_ARG(F <= 65536, op, ": F = ", F, " is more than the decode hand-off holds (65536)");
  GemmLaunch L13, L2;
  gemm::MegaParams m;
  if (!prepare_mega(w13, w2, kMxfp8Rows, kMxfp8Weight, kMegaDecode, x_rows,
                    gemm::mega_mxfp8_decode_smem_bytes(static_cast<int>(w13.common.e_local)), op, L13, L2, m, stream))
    return;
  L2.a_ld = 2 * F;  // h2's E4M3 rows in place of its BF16 rows
  gemm::launch_mega_mxfp8_decode(L13, L2, m);
}

void grouped_gemm_mega_mxfp8(const W13FpropArgs& w13, const FpropArgs& w2, cudaStream_t stream,
                             const void* const* x_rows, const Mxfp8Columns& h2_columns) {
  constexpr const char* op = "grouped_gemm_mega_mxfp8";
  const OperandScales& s2 = w2.common.scales;
  DMOE_CHECK_ARG(w13.h2 != nullptr && w2.a == w13.h2 && s2.a != nullptr, op,
                 ": w13.h2 must be w2.a (the W13 epilogue writes h2's E4M3 rows there) and w2.common.scales.a "
                 "must name their codes");
  check_mxfp8_columns(h2_columns, op, "h2_columns");
  check_mxfp8_x_gather(w13, x_rows, op);
  GemmLaunch L13, L2;
  gemm::MegaParams m;
  if (!prepare_mega(w13, w2, kMxfp8Rows, kMxfp8Weight, kMegaRows, x_rows,
                    gemm::mega_mxfp8_rows_smem_bytes(static_cast<int>(w13.common.e_local)), op, L13, L2, m, stream,
                    h2_columns))
    return;
  // h2's codes where W2's scale warps read them (the same strides).
  L13.epilogue.mx_scales = static_cast<uint8_t*>(const_cast<void*>(L2.a_scales));
  L13.epilogue.mx_scale_strides = gemm::mxfp8_a_scale_strides(L2.a_scale_ld, L2.a_scale_kblock_words);
  set_mxfp8_columns(L13.epilogue, h2_columns);
  gemm::launch_mega_mxfp8_rows(L13, L2, m);
}

void grouped_gemm_dgrad_swiglu_mxfp8(const DgradArgs& d, const SwigluBackwardMxfp8Args& s, cudaStream_t stream) {
  constexpr const char* op = "grouped_gemm_dgrad_swiglu_mxfp8";
  check_common(d.common, op);  // n = D, k = F
  DMOE_CHECK_ARG(d.common.a_format == kMxfp8Rows && d.common.b_format == kMxfp8WeightT, op,
                 ": A must be kMxfp8Rows (grad_h3) and B kMxfp8WeightT (W2's transposed copy), got A=",
                 d.common.a_format.name(), " B=", d.common.b_format.name());
  DMOE_CHECK_ARG(d.grad_a == nullptr && d.scatter.row_ptrs == nullptr && d.gather.row_ptrs == nullptr && !d.accumulate &&
                     d.grad_out_offset == nullptr && d.grad_a_offset == nullptr && d.common.config == nullptr,
                 op, ": grad_h2 is not stored: no grad_a, scatter, gather, accumulate, device offsets or config");
  const int64_t F = d.common.k, cap = d.common.m_capacity;
  check_ptr(d.grad_out, op, "grad_out");
  check_ptr(d.w, op, "w");
  check_ptr(s.h1, op, "swiglu.h1");
  check_ptr(s.dxy, op, "swiglu.dxy");
  check_ptr(s.dxy_scales, op, "swiglu.dxy_scales");
  DMOE_CHECK_ARG(s.activation == Activation::kSwiGLU || s.swiglu_limit > 0.0f, op,
                 ": swiglu_limit must be > 0 for the clamped SwiGLU, got ", s.swiglu_limit);
  if (s.scale_kblock_words)
    DMOE_CHECK_ARG(s.scale_ld >= cap && (2 * F / 128) * s.scale_ld * 4 <= kInt32Max, op,
                   ": k-block-major dxy code words need scale_ld >= m_capacity = ", cap, " (and fewer than 2^31 bytes), got ",
                   s.scale_ld);
  else
    DMOE_CHECK_ARG(s.scale_ld >= 2 * F / 32 && s.scale_ld % 4 == 0, op,
                   ": dxy code rows need scale_ld >= 2F/32 = ", 2 * F / 32, " bytes, a multiple of 4, got ", s.scale_ld);
  check_mxfp8_columns(s.columns, op, "swiglu.columns");
  GroupedGemmCommon c = d.common;  // the FPROP problem on the transposed copy
  c.n = F;
  c.k = d.common.n;
  c.b_format = kMxfp8Weight;
  check_formats(GroupedGemmOp::kFprop, DType::kBFloat16, c, op);
  if (cap == 0) return;
  const DeviceFacts dev = device_facts();
  const int smem = gemm::dgrad_swiglu_mxfp8_smem_bytes(static_cast<int>(c.e_local));
  DMOE_CHECK_ARG(smem <= dev.smem_optin, op, ": e_local = ", c.e_local, " needs ", smem,
                 " bytes of shared memory; the device allows ", dev.smem_optin);
  GemmLaunch L;
  L.kind = GemmKind::kFprop;
  L.a = d.grad_out;
  L.b = d.w;
  L.out = s.dxy;
  L.h1 = const_cast<void*>(s.h1);  // (read only: the prefetch map and the epilogue's loads)
  L.h1_offset = s.h1_offset;
  L.epilogue.ld_out = 2 * F;
  L.epilogue.out_cols = static_cast<int32_t>(2 * F);
  L.epilogue.f = static_cast<int32_t>(F);
  L.epilogue.clamped = s.activation == Activation::kSwiGLUClamped ? 1 : 0;
  L.epilogue.alpha = s.swiglu_alpha;
  L.epilogue.limit = s.swiglu_limit;
  L.epilogue.real_rows = s.real_rows;
  L.epilogue.mx_scales = s.dxy_scales;
  L.epilogue.mx_scale_strides = gemm::mxfp8_a_scale_strides(s.scale_ld, s.scale_kblock_words);
  set_mxfp8_columns(L.epilogue, s.columns);
  fill_launch(L, c, dev.num_sms, dev.num_sms, stream);  // (the static schedule, as select_mxfp8's DGRAD pick)
  if (c.validate_counts) {
    validate_counts_kernel<<<1, 32, 0, stream>>>(c.counts, L.e_local, c.m_capacity,
                                                 static_cast<int>(GroupedGemmOp::kDgrad),
                                                 offset_checks({{L.h1_offset, kOffH1}, {s.columns.offset, kOffColumns}}),
                                                 s.columns.base != nullptr ? 32 : 1);  // (whole column blocks)
    DMOE_CUDA_CHECK_LAUNCH();
  }
  gemm::launch_dgrad_swiglu_mxfp8(L);
}

namespace {

// E4M3 DGRAD (FP8 blockwise, MXFP8) is the FPROP kernel on the weight's transposed copy:
// grad_a[m, :] = grad_out[m, :] . wt[e(m)]^T with wt = [e_local, k, n] K-major over the contraction
// n, so the FPROP problem has n and k swapped (weight rows k, contraction n) and reads the weight's
// DGRAD scales as the FPROP scales of wt.
void dgrad_transposed_weight(const DgradArgs& a, const TransposedWeightRecipe& r, cudaStream_t stream) {
  constexpr const char* op = "grouped_gemm_dgrad";
  check_common(a.common, op);  // the call's own n, k
  DMOE_CHECK_ARG(a.common.a_format == r.rows, op, ": B=", a.common.b_format.name(), " (the ", r.name,
                 " transposed weight) needs A=", r.rows.name(), ", got A=", a.common.a_format.name());
  DMOE_CHECK_ARG(a.out_dtype == DType::kBFloat16, op, ": ", r.name, " DGRAD writes bfloat16 output, got ",
                 to_string(a.out_dtype));
  DMOE_CHECK_ARG(a.common.e_local * a.common.k <= kInt32Max, op, ": e_local * k = ", a.common.e_local * a.common.k,
                 " rows of the transposed weight exceed the int32 TMA coordinate range");
  check_block_scaled_rows(a.common, a.gather, a.grad_out_offset, op, "grad_out_offset");
  DMOE_CHECK_ARG(a.common.config == nullptr || !a.common.config->swap_ab, op, ": ", r.name,
                 " DGRAD has no swap-AB (decode) kernel; config ", a.common.config ? a.common.config->name() : "",
                 " is an FPROP decode tile");
  GroupedGemmCommon c = a.common;
  c.n = a.common.k;
  c.k = a.common.n;
  c.b_format = r.weight;  // the transposed copy is a row-major [e, k, n] weight
  check_formats(GroupedGemmOp::kFprop, DType::kBFloat16, c, op);
  check_ptr(a.w, op, "w");
  check_ptr(a.grad_out, op, "grad_out");
  check_row_output(a.scatter, a.grad_a, op, "grad_a");
  if (c.m_capacity == 0) return;
  GemmLaunch L;
  set_row_input(L, a.grad_out, a.grad_out_offset, a.gather);
  L.b = a.w;
  set_row_output(L, a.grad_a, a.grad_a_offset, a.scatter, c.n);
  L.epilogue.accumulate = a.accumulate ? 1 : 0;
  const OffsetChecks oc = offset_checks({{L.a_offset, kOffGradOut}, {L.out_offset, kOffGradA}});
  run(GroupedGemmOp::kFprop, c, DType::kBFloat16, false, L, oc, stream, GroupedGemmOp::kDgrad);
}

}  // namespace

void grouped_gemm_dgrad(const DgradArgs& a, cudaStream_t stream) {
  constexpr const char* op = "grouped_gemm_dgrad";
  if (const TransposedWeightRecipe* r = transposed_weight_recipe(a.common.b_format))
    return dgrad_transposed_weight(a, *r, stream);
  for (const TransposedWeightRecipe& r : kTransposedWeightRecipes)
    DMOE_CHECK_ARG(!(a.common.a_format == r.rows && a.common.b_format == r.weight), op, ": ", r.name,
                   " DGRAD reads the weight's transposed copy: B must be ", r.weight_t_constant, " (", r.weight_t.name(),
                   ": ", r.weight_t_layout, "), got B=", a.common.b_format.name());
  check_common(a.common, op);
  check_out_dtype(a.out_dtype, op);
  check_formats(GroupedGemmOp::kDgrad, a.out_dtype, a.common, op);
  check_ptr(a.w, op, "w");
  check_row_input(a.gather, a.grad_out, op, "grad_out");
  check_row_output(a.scatter, a.grad_a, op, "grad_a");
  if (a.common.m_capacity == 0) return;
  zero_gather_workspace(a, stream);
  const bool gather = a.gather.row_ptrs != nullptr;
  GemmLaunch L;
  set_row_input(L, a.grad_out, a.grad_out_offset, a.gather);
  L.b = a.w;
  set_row_output(L, a.grad_a, a.grad_a_offset, a.scatter, a.common.k);
  L.epilogue.accumulate = a.accumulate ? 1 : 0;
  const OffsetChecks oc =
      offset_checks({{L.a_offset, gather ? kOffGathered : kOffGradOut}, {L.out_offset, kOffGradA}});
  run(GroupedGemmOp::kDgrad, a.common, a.out_dtype, gather, L, oc, stream);
}

void grouped_gemm_wgrad(const WgradArgs& a, cudaStream_t stream) {
  constexpr const char* op = "grouped_gemm_wgrad";
  check_common(a.common, op);
  check_out_dtype(a.out_dtype, op);
  const bool fp8 = a.common.a_format == kFp8BlockwiseRowsT;
  DMOE_CHECK_ARG(a.a_compact_rows == nullptr || fp8, op, ": a_compact_rows is for FP8-blockwise column bundles (A=",
                 a.common.a_format.name(), ")");
  check_formats(GroupedGemmOp::kWgrad, a.out_dtype, a.common, op, a.a_compact_rows != nullptr);
  check_ptr(a.grad_w, op, "grad_w");
  if (a.common.m_capacity == 0) {  // no rows at all: every expert's gradient is zero
    if (!a.accumulate)
      DMOE_CUDA_CHECK(cudaMemsetAsync(a.grad_w, 0,
                                      static_cast<size_t>(a.common.e_local * a.common.n * a.common.k) *
                                          element_size(a.out_dtype),
                                      stream));
    return;
  }
  check_ptr(a.grad_out, op, "grad_out");
  check_ptr(a.a, op, "a");
  if (fp8)  // a compact bundle's scales move with it; strided columns' scales would not
    DMOE_CHECK_ARG(a.grad_out_offset == nullptr && (a.a_offset == nullptr || a.a_compact_rows != nullptr), op,
                   ": device offsets would move the FP8 columns but not their scales; block-scaled operands take none "
                   "(except a compact bundle: a_compact_rows)");
  DMOE_CHECK_ARG(a.a_compact_rows == nullptr || reinterpret_cast<uintptr_t>(a.a) % 16 == 0, op,
                 ": a compact bundle needs a 16-byte aligned");
  GemmLaunch L;
  L.a = a.grad_out;
  L.b = a.a;
  L.b_compact_rows = a.a_compact_rows;
  L.out = a.grad_w;
  L.a_offset = a.grad_out_offset;
  L.b_offset = a.a_offset;
  L.epilogue.ld_out = a.common.k;
  L.epilogue.expert_stride = a.common.n * a.common.k;
  L.epilogue.out_cols = static_cast<int32_t>(a.common.k);
  L.epilogue.accumulate = a.accumulate ? 1 : 0;
  L.tiles_for_empty_experts = !a.accumulate;
  const OffsetChecks oc = offset_checks({{L.a_offset, kOffGradOut}, {L.b_offset, kOffWgradA}});
  // FP8: every expert's token segment is whole 128-token blocks (the padded column layout).
  run(GroupedGemmOp::kWgrad, a.common, a.out_dtype, false, L, oc, stream, std::nullopt, fp8 ? 128 : 1);
}

}  // namespace dist_moe
