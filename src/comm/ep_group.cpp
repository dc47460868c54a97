// EpGroup: symmetric windows, routing tables and the standalone EP ops (publish, route, dispatch,
// combine, barrier). Host side only: validation, sizes, launch shapes; kernels in src/kernels/.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "comm/ep_kernels.h"
#include "core/env_knobs.h"
#include "dist_moe/check.h"
#include "dist_moe/comm.h"
#include "dist_moe/device/routing/routing_layout.cuh"

namespace dist_moe::comm {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align128(int64_t x) { return (x + 127) / 128 * 128; }
int64_t align16(int64_t x) { return (x + 15) / 16 * 16; }
bool is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T>
T* device_alloc(size_t count, int fill_byte) {
  T* p = nullptr;
  const size_t bytes = std::max<size_t>(count, 1) * sizeof(T);
  DMOE_CUDA_CHECK(cudaMalloc(&p, bytes));
  DMOE_CUDA_CHECK(cudaMemset(p, fill_byte, bytes));
  // The memset runs on the legacy stream, which a caller's non-blocking stream does not wait for.
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  return p;
}

void free_quietly(const void* p) {
  if (p == nullptr) return;
  const cudaError_t e = cudaFree(const_cast<void*>(p));
  if (e != cudaSuccess) std::fprintf(stderr, "dist_moe: cudaFree failed during teardown: %s\n", cudaGetErrorString(e));
}

// DMOE_DISABLE_PDL=1 turns programmatic dependent launch off everywhere (a diagnostic switch).
bool pdl_disabled() {
  static const bool disabled = [] {
    return core::env_flag("DMOE_DISABLE_PDL");
  }();
  return disabled;
}

// DMOE_COMBINE_ALGO=v1|v2|partials (kAuto only); default v2.
CombineAlgorithm resolve_algorithm(CombineAlgorithm a) {
  if (a != CombineAlgorithm::kAuto) return a;
  static const CombineAlgorithm from_env = [] {
    const char* v = core::env_get("DMOE_COMBINE_ALGO");
    if (v != nullptr && std::string(v) == "v1") return CombineAlgorithm::kV1;
    if (v != nullptr && std::string(v) == "partials") return CombineAlgorithm::kRankPartials;
    return CombineAlgorithm::kV2;
  }();
  return from_env;
}

// DMOE_COMBINE_OWN_PARTIALS=late: the rank-partials combine in barrier mode sums this rank's own
// partials in its reduction instead of storing and re-reading them (A/B switch, docs/perf.md C13).
bool own_partials_late() {
  const char* v = core::env_get("DMOE_COMBINE_OWN_PARTIALS");
  return v != nullptr && std::string(v) == "late";
}

int ep_sms(const Communicator& comm, int requested) {
  return requested > 0 ? std::min(requested, comm.num_sms()) : comm.num_sms();
}

// CTAs of a cooperative combine grid: as many per SM as fit (max_ctas co-resident on the device),
// on the SMs the caller allows.
int combine_grid(const Communicator& comm, int max_ctas, int requested_sms) {
  const int per_sm = std::max(1, max_ctas / comm.num_sms());
  return std::min(max_ctas, per_sm * ep_sms(comm, requested_sms));
}

}  // namespace

EpConfig EpConfig::from(const Config& config, const MemoryPlan& plan, int row_alignment, bool validate_expert_ids) {
  EpConfig c;
  c.max_tokens = config.max_num_local_input_tokens;
  c.hidden = config.hidden_dim;
  c.top_k = config.top_k;
  c.num_experts = config.num_experts;
  c.row_alignment = row_alignment;
  c.capacity_rows = plan.total_scratch_capacity_rows;
  c.validate_expert_ids = validate_expert_ids;
  return c;
}

EpWindowSizes ep_window_sizes(const EpConfig& c, int world_size) {
  EpWindowSizes s;
  const int64_t id_bytes = c.num_experts <= 32767 ? 2 : 4;  // memory_plan.h: routing_id_dtype
  s.routing_slot = align128(kRoutingHeaderBytes + c.max_tokens * c.top_k * id_bytes);
  s.routing = s.routing_slot * kRoutingSlots;
  s.dispatch = align128(c.max_tokens * c.top_k * c.hidden * 2);  // BF16 [T_max, K, D]
  if (static_cast<int64_t>(world_size) * c.max_tokens * c.top_k <= kFusedMaxRoutes) {
    // The fused route kernel pushes header + ids (+ FP32 scores) into every peer's [parity][source] slots.
    s.push_scores_offset = align16(kRoutingHeaderBytes + c.max_tokens * c.top_k * id_bytes);
    s.routing_push_slot = align128(s.push_scores_offset + c.max_tokens * c.top_k * 4);
    s.routing_push_offset = s.routing;
    s.routing += s.routing_push_slot * kRoutingSlots * world_size;
  }
  s.combine = align128(c.max_tokens * c.top_k * c.hidden * 2);
  s.barrier_inbox_offset = 0;
  s.token_counter_offset = align128(static_cast<int64_t>(kNumBarrierSlots) * kMaxEpRanks * 4);
  s.partial_counter_offset = align128(s.token_counter_offset + c.max_tokens * 4);
  s.signal = align128(s.partial_counter_offset + 2 * c.max_tokens * 4);
  s.extra_symmetric = s.routing - s.routing_slot + s.signal;  // beyond MemoryPlan's three windows
  return s;
}

int64_t ep_default_capacity_rows(const EpConfig& c, int world_size) {
  const int64_t L = c.num_experts / world_size;
  return static_cast<int64_t>(world_size) * c.max_tokens * std::min<int64_t>(c.top_k, L) +
         L * (c.row_alignment - 1);
}

EpGroup::EpGroup(const Communicator& comm, const EpConfig& config) : comm_(comm), config_(config) {
  const int R = comm.world_size();
  const EpConfig& c = config_;
  // ---- validation: every bound the kernels rely on ----
  DMOE_CHECK_ARG(c.max_tokens >= 1, "max_tokens (max_num_local_input_tokens) must be positive, got ", c.max_tokens);
  DMOE_CHECK_ARG(c.hidden >= 8 && c.hidden % 8 == 0,
                 "hidden must be a positive multiple of 8 (16-byte BF16 rows), got ", c.hidden);
  DMOE_CHECK_ARG(c.top_k >= 1 && c.top_k <= 32, "top_k must be in [1, 32], got ", c.top_k);
  DMOE_CHECK_ARG(c.num_experts >= 1 && c.num_experts % R == 0, "num_experts=", c.num_experts,
                 " must be a positive multiple of the EP size ", R);
  DMOE_CHECK_ARG(c.num_experts < (int64_t{1} << 30), "num_experts=", c.num_experts, " is too large");
  DMOE_CHECK_ARG(is_pow2(c.row_alignment) && c.row_alignment <= 1024,
                 "row_alignment must be a power of two in [1, 1024], got ", c.row_alignment);
  DMOE_CHECK_ARG(c.max_tokens * c.top_k < (int64_t{1} << routing::kRouteIndexBits), "max_tokens * top_k = ",
                 c.max_tokens * c.top_k, " must be below 2^", routing::kRouteIndexBits);
  DMOE_CHECK_ARG(R <= routing::kMaxWorldForRouteCode && R <= kMaxEpRanks, "EP size ", R, " is not supported");
  const int64_t L = c.num_experts / R;
  DMOE_CHECK_ARG(L <= 32767, "local experts per rank (", L, ") must be at most 32767");
  {  // the v2 combine kernel indexes its work units with 32 bits
    const int64_t nseg = comm::row_segments(static_cast<int>(c.hidden / 8));
    DMOE_CHECK_ARG(R * c.max_tokens * c.top_k * nseg < (int64_t{1} << 31) &&
                       c.max_tokens * (c.hidden / 8 + 31) / 32 < (int64_t{1} << 31),
                   "EP size * max_tokens * top_k * hidden is too large for the combine kernels");
  }
  if (config_.capacity_rows <= 0) config_.capacity_rows = ep_default_capacity_rows(c, R);
  DMOE_CHECK_ARG(c.capacity_rows < (int64_t{1} << 31) - 1, "capacity_rows=", c.capacity_rows, " is too large");

  // ---- routing kernel shape: the largest chunk that fits in shared memory bounds co-residency ----
  int optin = 0;
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, comm.device()));
  const int id_bytes = c.num_experts <= 32767 ? 2 : 4;
  int64_t chunk_limit = comm::kRoutingMaxChunk;
  while (chunk_limit >= comm::kRoutingMinChunk &&
         comm::routing_smem_bytes(static_cast<int>(L), chunk_limit) > static_cast<size_t>(optin))
    chunk_limit -= comm::kRoutingChunkStep;
  DMOE_CHECK_ARG(chunk_limit >= comm::kRoutingMinChunk, "the routing kernel does not fit in shared memory with ", L,
                 " local experts");
  max_routing_ctas_ = comm::routing_max_coresident_ctas(
      id_bytes, comm::routing_smem_bytes(static_cast<int>(L), chunk_limit), comm.num_sms());
  DMOE_CHECK_ARG(max_routing_ctas_ >= 1, "the routing kernel cannot be resident on this device");
  max_routing_ctas_ = std::min(max_routing_ctas_, 1024);
  int64_t chunk_max = 0;
  int ctas_max = 0;
  routing_launch_shape(c.max_tokens, &chunk_max, &ctas_max);
  DMOE_CHECK_ARG(chunk_max <= chunk_limit, "max_tokens * top_k * EP size = ", c.max_tokens * c.top_k * R,
                 " routes exceed what the routing kernel handles in one co-resident grid (",
                 static_cast<int64_t>(max_routing_ctas_) * chunk_limit, ")");

  // ---- symmetric windows (collective; same order on every rank) ----
  const EpWindowSizes sizes = ep_window_sizes(c, R);
  routing_win_ = comm.alloc_window(static_cast<size_t>(sizes.routing));
  dispatch_win_ = comm.alloc_window(static_cast<size_t>(sizes.dispatch));
  combine_win_ = comm.alloc_window(static_cast<size_t>(sizes.combine));
  signal_win_ = comm.alloc_window(static_cast<size_t>(sizes.signal));

  // ---- local state, tables, workspace ----
  state_ = device_alloc<EpLocalState>(1, 0);
  tables_.capacity_rows = c.capacity_rows;
  tables_.expert_rows = device_alloc<int32_t>(L, 0);
  tables_.expert_rows_unpadded = device_alloc<int32_t>(L, 0);
  tables_.expert_offsets = device_alloc<int32_t>(L + 1, 0);
  tables_.total_rows = device_alloc<int32_t>(1, 0);
  tables_.recv_rows_from_rank = device_alloc<int32_t>(R, 0);
  tables_.send_rows_to_rank = device_alloc<int32_t>(R, 0);
  tables_.gather_src = const_cast<const void**>(device_alloc<void*>(c.capacity_rows, 0));
  tables_.scatter_dst = device_alloc<void*>(c.capacity_rows, 0);
  tables_.grad_gather_src = const_cast<const void**>(device_alloc<void*>(c.capacity_rows, 0));
  tables_.row_route = device_alloc<int32_t>(c.capacity_rows, 0xff);
  tables_.route_row = device_alloc<int32_t>(static_cast<size_t>(R) * c.max_tokens * c.top_k, 0xff);
  cta_expert_counts_ = device_alloc<int32_t>(static_cast<size_t>(max_routing_ctas_) * L, 0);
  cta_rank_counts_ = device_alloc<int32_t>(static_cast<size_t>(max_routing_ctas_) * 2 * R, 0);

  // Every rank's base of each window (this process's mapping), and the linear layout the kernels
  // address them by (EpWindow); dispatch and combine bases also serve the host (window bases).
  // Emulated peers: every base is this rank's copy (stride 0).
  {
    const SymmetricWindow* wins[4] = {routing_win_.get(), dispatch_win_.get(), combine_win_.get(), signal_win_.get()};
    EpWindow* dst[4] = {&layout_.routing_win, &layout_.dispatch_win, &layout_.combine_win, &layout_.signal_win};
    for (int w = 0; w < 4; ++w) {
      const std::vector<uintptr_t> b = comm.peer_bases(*wins[w]);
      EpWindow& ew = *dst[w];
      ew.handle = wins[w]->handle();
      ew.base = reinterpret_cast<char*>(b[0]);
      ew.stride = R > 1 ? static_cast<int64_t>(b[1] - b[0]) : 0;
      ew.local = reinterpret_cast<char*>(b[comm.rank()]);
      for (int p = 0; p < R; ++p)
        if (b[p] != b[0] + static_cast<uintptr_t>(p * ew.stride))
          detail::fail(ErrorCode::kInternal, "symmetric window ", w, ": rank ", p,
                       "'s copy is not at base + rank * stride (NCCL LSA layout changed?)");
      if (w == 1) dispatch_bases_ = b;
      if (w == 2) combine_bases_ = b;
    }
  }
  layout_.rank = comm.rank();
  layout_.world = R;
  layout_.emulated = comm.emulated() ? 1 : 0;
  layout_.local_experts = static_cast<int>(L);
  layout_.num_experts = static_cast<int>(c.num_experts);
  layout_.top_k = static_cast<int>(c.top_k);
  layout_.hidden = static_cast<int>(c.hidden);
  layout_.max_tokens = static_cast<int>(c.max_tokens);
  layout_.id_bytes = id_bytes;
  layout_.routing_slot_bytes = sizes.routing_slot;
  layout_.row_bytes = c.hidden * 2;
  layout_.barrier_inbox_offset = sizes.barrier_inbox_offset;
  layout_.token_counter_offset = sizes.token_counter_offset;
  layout_.partial_counter_offset = sizes.partial_counter_offset;
  layout_.routing_push_offset = sizes.routing_push_offset;
  layout_.routing_push_slot_bytes = sizes.routing_push_slot;
  layout_.push_scores_offset = sizes.push_scores_offset;
  layout_.state = state_;
  layout_.timeout_cycles = comm.timeout_cycles();
  layout_.trace = nullptr;

  combine_ctas_f32_ = comm::combine_every_route_max_coresident_ctas(id_bytes, false, comm.num_sms());
  combine_ctas_bf16_ = comm::combine_every_route_max_coresident_ctas(id_bytes, true, comm.num_sms());
  DMOE_CHECK_ARG(combine_ctas_f32_ >= 1 && combine_ctas_bf16_ >= 1, "the combine kernel cannot be resident");
  for (int b = 0; b < 2; ++b)
    for (int m = 0; m < 3; ++m) {
      remote_routes_ctas_[b][m] = comm::combine_remote_routes_max_coresident_ctas(id_bytes, b != 0, m, comm.num_sms());
      DMOE_CHECK_ARG(remote_routes_ctas_[b][m] >= 1, "the v2 combine kernel cannot be resident");
    }
  for (int b = 0; b < 2; ++b) {
    rank_partials_ctas_[b] = comm::combine_rank_partials_max_coresident_ctas(id_bytes, b != 0, comm.num_sms());
    DMOE_CHECK_ARG(rank_partials_ctas_[b] >= 1, "the rank-partials combine kernel cannot be resident");
  }

  // ---- fused publish + route + dispatch: one CTA per SM, all routes in shared memory ----
  // The pushed routing slots exist up to kFusedMaxRoutes (ep_window_sizes); the variable may only lower it.
  fused_max_routes_ = std::clamp<int64_t>(core::env_int64_or("DMOE_FUSED_MAX_ROUTES", kFusedMaxRoutes), 0, kFusedMaxRoutes);
  const int64_t routes_at_tmax = static_cast<int64_t>(R) * c.max_tokens * c.top_k;
  if (routes_at_tmax <= fused_max_routes_ && layout_.routing_push_offset > 0) {
    const size_t smem = comm::fused_smem_bytes(static_cast<int>(L), routes_at_tmax);
    constexpr size_t kStaticSmemMargin = 4096;  // the kernel's static shared memory, rounded up
    if (smem + kStaticSmemMargin <= static_cast<size_t>(optin) &&
        comm::fused_max_coresident_per_sm(id_bytes, smem) >= 1)
      fused_ctas_ = comm.num_sms();
  }

  DMOE_CUDA_CHECK(cudaDeviceSynchronize());

  // No rank may touch a peer's window before the peer has zeroed it.
  comm.host_barrier();
}

EpGroup::~EpGroup() {
  const cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess) {
    // Peers must be done with this rank's windows before they are deregistered.
    try {
      comm_.host_barrier();
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "dist_moe: EpGroup teardown barrier failed: %s\n", ex.what());
    }
  } else {
    std::fprintf(stderr, "dist_moe: EpGroup teardown after a device error (%s): windows are leaked\n",
                 cudaGetErrorString(e));
    (void)routing_win_.release();
    (void)dispatch_win_.release();
    (void)combine_win_.release();
    (void)signal_win_.release();
    return;
  }
  free_quietly(state_);
  free_quietly(tables_.expert_rows);
  free_quietly(tables_.expert_rows_unpadded);
  free_quietly(tables_.expert_offsets);
  free_quietly(tables_.total_rows);
  free_quietly(tables_.recv_rows_from_rank);
  free_quietly(tables_.send_rows_to_rank);
  free_quietly(tables_.gather_src);
  free_quietly(tables_.scatter_dst);
  free_quietly(tables_.grad_gather_src);
  free_quietly(trace_);
  free_quietly(tables_.row_route);
  free_quietly(tables_.route_row);
  free_quietly(cta_expert_counts_);
  free_quietly(cta_rank_counts_);
  signal_win_.reset();
  combine_win_.reset();
  dispatch_win_.reset();
  routing_win_.reset();
}

void EpGroup::routing_launch_shape(int64_t num_tokens, int64_t* chunk_routes, int* num_ctas) const {
  const int64_t total = static_cast<int64_t>(comm_.world_size()) * num_tokens * config_.top_k;
  int64_t chunk = comm::kRoutingMinChunk;
  if (ceil_div(total, chunk) > max_routing_ctas_)
    chunk = ceil_div(ceil_div(total, max_routing_ctas_), comm::kRoutingChunkStep) * comm::kRoutingChunkStep;
  *chunk_routes = chunk;
  *num_ctas = static_cast<int>(std::max<int64_t>(1, ceil_div(total, chunk)));
}

// The publish arguments of publish() and publish_route_dispatch(); x_TD is nullptr exactly when the
// rows are in the dispatch window already.
void EpGroup::check_publish(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens,
                            bool rows_in_window) const {
  DMOE_CHECK_ARG(num_tokens >= 1 && num_tokens <= config_.max_tokens, "num_tokens=", num_tokens, " must be in [1, ",
                 config_.max_tokens, "] (max_num_local_input_tokens)");
  if (rows_in_window)
    DMOE_CHECK_ARG(x_TD == nullptr, "x_TD must be nullptr with rows_in_window (the rows are in the dispatch window)");
  else
    DMOE_CHECK_ARG(x_TD != nullptr && aligned16(x_TD), "x_TD must be a non-null 16-byte aligned BF16 [T, D] pointer");
  DMOE_CHECK_ARG(ids_TK != nullptr, "topk_expert_ids_TK must not be null");
  if (ids_dtype != DType::kInt32 && ids_dtype != DType::kInt64)
    detail::fail(ErrorCode::kInvalidType, "topk_expert_ids_TK must be int32 or int64, got ", to_string(ids_dtype));
}

void EpGroup::publish(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens, cudaStream_t stream) {
  check_publish(x_TD, ids_TK, ids_dtype, num_tokens, /*rows_in_window=*/false);
  launch_publish_rows(x_TD, ids_TK, ids_dtype, num_tokens, stream);
}

void EpGroup::launch_publish_rows(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens,
                                  cudaStream_t stream) {
  const int64_t n_vec = num_tokens * layout_.row_bytes / 16;
  const int ctas = static_cast<int>(
      std::clamp<int64_t>(ceil_div(n_vec, int64_t{comm::kPublishThreads} * 4), 1, 2 * comm_.num_sms()));
  comm::launch_publish(layout_, x_TD, ids_TK, ids_dtype, static_cast<int>(num_tokens),
                          config_.validate_expert_ids, ctas, stream);
  scores_pushed_ = false;
}

void EpGroup::route(int64_t num_tokens, cudaStream_t stream) {
  DMOE_CHECK_ARG(num_tokens >= 1 && num_tokens <= config_.max_tokens, "num_tokens=", num_tokens, " must be in [1, ",
                 config_.max_tokens, "]");
  comm::RoutingArgs a{};
  a.num_tokens = static_cast<int>(num_tokens);
  a.alignment = config_.row_alignment;
  a.capacity_rows = config_.capacity_rows;
  routing_launch_shape(num_tokens, &a.chunk_routes, &a.num_ctas);
  a.do_barrier = 1;
  a.cta_expert_counts = cta_expert_counts_;
  a.cta_rank_counts = cta_rank_counts_;
  comm::launch_routing(layout_, tables_, a, stream);
}

void EpGroup::dispatch(void* x_gathered_MD, int64_t num_tokens, cudaStream_t stream, const DispatchOptions& options) {
  DMOE_CHECK_ARG(num_tokens >= 1 && num_tokens <= config_.max_tokens, "num_tokens=", num_tokens, " must be in [1, ",
                 config_.max_tokens, "]");
  DMOE_CHECK_ARG(x_gathered_MD != nullptr && aligned16(x_gathered_MD),
                 "x_gathered must be a non-null 16-byte aligned BF16 [capacity_rows, D] pointer");
  const int ctas = 2 * ep_sms(comm_, options.num_sms);  // 2 x 512 threads per SM
  comm::launch_dispatch(layout_, tables_, x_gathered_MD, static_cast<int>(num_tokens), config_.row_alignment,
                           options.mode == DispatchMode::kPerRoute, options.zero_fill_padding, ctas,
                           options.programmatic_launch && !pdl_disabled(), stream);
}

void EpGroup::combine(const void* y_MD, const void* scores_TK, DType score_dtype, void* out_TD, int64_t num_tokens,
                      cudaStream_t stream, const CombineOptions& options) {
  DMOE_CHECK_ARG(num_tokens >= 1 && num_tokens <= config_.max_tokens, "num_tokens=", num_tokens, " must be in [1, ",
                 config_.max_tokens, "]");
  DMOE_CHECK_ARG(y_MD != nullptr && aligned16(y_MD), "y must be a non-null 16-byte aligned BF16 [capacity_rows, D] pointer");
  DMOE_CHECK_ARG(out_TD != nullptr && aligned16(out_TD), "out_TD must be a non-null 16-byte aligned BF16 [T, D] pointer");
  DMOE_CHECK_ARG(scores_TK != nullptr, "topk_scores_TK must not be null");
  if (score_dtype != DType::kFloat32 && score_dtype != DType::kBFloat16)
    detail::fail(ErrorCode::kInvalidType, "topk_scores_TK must be float32 or bfloat16, got ", to_string(score_dtype));
  const bool bf16 = score_dtype == DType::kBFloat16;
  const CombineAlgorithm algo = resolve_algorithm(options.algorithm);
  // Emulated peers: the route slots absent owners would fill read as zeros, and only the barrier
  // sync completes (signal mode counts arrivals from every owner of a token's routes).
  prepare_scatter(num_tokens, stream);
  const CombineSync sync = layout_.emulated ? CombineSync::kBarrier : options.sync;
  if (algo == CombineAlgorithm::kRankPartials) {
    DMOE_CHECK_ARG(config_.hidden % 16 == 0, "CombineAlgorithm::kRankPartials needs hidden % 16 == 0 (got ",
                   config_.hidden, "): an FP32 partial row is split into halves of whole 16-byte vectors");
    comm::CombineArgs a{};
    a.y = static_cast<const char*>(y_MD);
    a.scores = scores_TK;
    a.out = static_cast<char*>(out_TD);
    a.num_tokens = static_cast<int>(num_tokens);
    a.scores_pushed = scores_pushed_ ? 1 : 0;
    a.partials_sync = sync == CombineSync::kSignal ? comm::kPartialsSignal
                      : own_partials_late()               ? comm::kPartialsBarrierOwnLate
                                                          : comm::kPartialsBarrier;
    const int ctas = combine_grid(comm_, rank_partials_ctas_[bf16 ? 1 : 0], options.num_sms);
    comm::launch_combine_rank_partials(layout_, tables_, a, bf16, ctas, stream);
    return;
  }
  if (algo == CombineAlgorithm::kV2) {
    combine_v2(y_MD, scores_TK, bf16, out_TD, num_tokens,
               sync == CombineSync::kSignal ? comm::kRemoteSignal : comm::kRemoteBarrier, options, stream);
    return;
  }
  const int ctas = combine_grid(comm_, bf16 ? combine_ctas_bf16_ : combine_ctas_f32_, options.num_sms);
  comm::launch_combine_every_route(layout_, tables_, y_MD, scores_TK, bf16, out_TD, static_cast<int>(num_tokens),
                          sync == CombineSync::kSignal, ctas, stream);
}

void EpGroup::reduce(const void* scores_TK, DType score_dtype, void* out_TD, int64_t num_tokens, cudaStream_t stream,
                     const CombineOptions& options, const KeepRoutes& keep) {
  DMOE_CHECK_ARG(num_tokens >= 1 && num_tokens <= config_.max_tokens, "num_tokens=", num_tokens, " must be in [1, ",
                 config_.max_tokens, "]");
  DMOE_CHECK_ARG(out_TD != nullptr && aligned16(out_TD), "out_TD must be a non-null 16-byte aligned BF16 [T, D] pointer");
  DMOE_CHECK_ARG(scores_TK != nullptr, "topk_scores_TK must not be null");
  if (score_dtype != DType::kFloat32 && score_dtype != DType::kBFloat16)
    detail::fail(ErrorCode::kInvalidType, "topk_scores_TK must be float32 or bfloat16, got ", to_string(score_dtype));
  DMOE_CHECK_ARG(keep.base == nullptr || aligned16(keep.base), "KeepRoutes::base must be 16-byte aligned");
  combine_v2(nullptr, scores_TK, score_dtype == DType::kBFloat16, out_TD, num_tokens, comm::kRemoteReduceOnly, options,
             stream, keep);
}

void EpGroup::combine_v2(const void* y_MD, const void* scores_TK, bool score_bf16, void* out_TD, int64_t num_tokens,
                         int mode, const CombineOptions& options, cudaStream_t stream, const KeepRoutes& keep) {
  constexpr int kWarpsPerCta = comm::kCombineThreads / 32;
  const int ctas = combine_grid(comm_, remote_routes_ctas_[score_bf16 ? 1 : 0][mode], options.num_sms);
  comm::CombineArgs a{};
  a.y = static_cast<const char*>(y_MD);
  a.scores = scores_TK;
  a.out = static_cast<char*>(out_TD);
  a.num_tokens = static_cast<int>(num_tokens);
  a.keep = {keep.base, keep.offset};
  a.keep_skip = keep.skip;
  int rw = options.reduce_warps > 0 ? options.reduce_warps
                                    : static_cast<int>(core::env_int64_or("DMOE_COMBINE_REDUCE_WARPS", 4));
  a.reduce_warps = std::clamp(rw, 1, kWarpsPerCta - 1);
  int sb = options.signal_batch > 0 ? options.signal_batch
                                    : static_cast<int>(core::env_int64_or("DMOE_COMBINE_SIGNAL_BATCH", 1));
  a.signal_batch = std::clamp(sb, 1, 32);
  int rc = options.reduce_ctas > 0 ? options.reduce_ctas
                                   : static_cast<int>(core::env_int64_or("DMOE_COMBINE_REDUCE_CTAS", 0));
  a.reduce_ctas = (mode == comm::kRemoteSignal && rc > 0 && ctas >= 2) ? std::clamp(rc, 1, ctas - 1) : 0;
  const int K = static_cast<int>(config_.top_k);
  int kg = options.k_group > 0 ? options.k_group : static_cast<int>(core::env_int64_or("DMOE_COMBINE_K_GROUP", 0));
  if (kg <= 0) {  // automatic: one route per unit while the coarse units do not fill the scatter warps
    const int nseg = comm::row_segments(static_cast<int>(layout_.row_bytes / 16));
    const int64_t coarse_units = num_tokens * (comm_.world_size() - 1) * nseg;
    const int64_t scatter_warps =
        a.reduce_ctas > 0 ? static_cast<int64_t>(ctas - a.reduce_ctas) * kWarpsPerCta
        : static_cast<int64_t>(ctas) * (mode == comm::kRemoteSignal ? kWarpsPerCta - a.reduce_warps : kWarpsPerCta);
    kg = coarse_units < scatter_warps ? 1 : K;
  }
  a.k_group = std::clamp(kg, 1, K);
  comm::launch_combine_remote_routes(layout_, tables_, a, score_bf16, mode, ctas, stream);
}

void EpGroup::publish_route_dispatch(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens,
                                     void* x_gathered_MD, cudaStream_t stream, const DispatchOptions& options) {
  bool fused = fused_route_supported();
  if (options.fused == FusedRoute::kOff) fused = false;
  if (options.fused == FusedRoute::kAuto && fused) {
    static const int64_t env = core::env_int64_or("DMOE_FUSED_ROUTE", 1);
    fused = env != 0;
  }
  if (options.fused == FusedRoute::kOn)
    DMOE_CHECK_ARG(fused, "the fused route kernel does not support this group: EP size * max_tokens * top_k = ",
                   comm_.world_size() * config_.max_tokens * config_.top_k, " routes (limit ", fused_max_routes_,
                   ", DMOE_FUSED_MAX_ROUTES) or its shared memory does not fit");
  check_publish(x_TD, ids_TK, ids_dtype, num_tokens, options.rows_in_window);
  if (!fused) {
    launch_publish_rows(x_TD, ids_TK, ids_dtype, num_tokens, stream);  // no scores pushed
    route(num_tokens, stream);
    if (x_gathered_MD != nullptr) dispatch(x_gathered_MD, num_tokens, stream, options);
    return;
  }
  DMOE_CHECK_ARG(x_gathered_MD == nullptr || aligned16(x_gathered_MD),
                 "x_gathered must be a 16-byte aligned BF16 [capacity_rows, D] pointer");
  comm::FusedArgs a{};
  a.x = x_TD;
  a.ids = ids_TK;
  a.x_gathered = static_cast<char*>(x_gathered_MD);
  a.num_tokens = static_cast<int>(num_tokens);
  a.alignment = config_.row_alignment;
  a.validate = config_.validate_expert_ids ? 1 : 0;
  a.zero_fill = options.zero_fill_padding ? 1 : 0;
  a.capacity_rows = config_.capacity_rows;
  if (options.scores_TK != nullptr) {
    if (options.score_dtype != DType::kFloat32 && options.score_dtype != DType::kBFloat16)
      detail::fail(ErrorCode::kInvalidType, "DispatchOptions::scores_TK must be float32 or bfloat16, got ",
                   to_string(options.score_dtype));
    a.scores = options.scores_TK;
    a.score_bf16 = options.score_dtype == DType::kBFloat16 ? 1 : 0;
  }
  // One CTA per SM (or num_sms). C9 had taken fewer CTAs (>= 32) while every CTA read the ids from the
  // peers' windows; with the ids pushed here the routing reads local memory and more CTAs move the
  // dispatch faster (docs/perf.md C10: 32.6 us graphed on 32 SMs, 30.5 on 132 at dsv3_decode).
  const int ctas = std::min(fused_ctas_, ep_sms(comm_, options.num_sms));
  comm::launch_fused_route(layout_, tables_, a, ids_dtype == DType::kInt64, ctas, stream);
  scores_pushed_ = a.scores != nullptr;
}

void EpGroup::enable_trace(bool on) {
  if (on && trace_ == nullptr) trace_ = device_alloc<unsigned long long>(kTraceSlots, 0);
  layout_.trace = on ? trace_ : nullptr;
}

void EpGroup::barrier(cudaStream_t stream, const int64_t* run_if) {
  comm::launch_ep_barrier(layout_, 0, stream, run_if);
}

void EpGroup::gather_route_scores(const void* const* grad_gather_src, const int32_t* rows, float* row_scores_M,
                                  cudaStream_t stream) const {
  DMOE_CHECK_ARG(grad_gather_src != nullptr && rows != nullptr && row_scores_M != nullptr,
                 "gather_route_scores needs the route slot table, the row count and the output");
  DMOE_CHECK_ARG(routing::dispatch_window_holds_scores(config_.top_k, layout_.row_bytes),
                 "gather_route_scores: the dispatch window holds no route scores at top_k=", config_.top_k);
  launch_gather_route_scores(layout_, grad_gather_src, rows, tables_.capacity_rows, row_scores_M, comm_.num_sms(),
                             stream);
}

void EpGroup::prepare_scatter(int64_t num_tokens, cudaStream_t stream) {
  if (!layout_.emulated) return;
  DMOE_CHECK_ARG(num_tokens >= 1 && num_tokens <= config_.max_tokens, "num_tokens=", num_tokens, " must be in [1, ",
                 config_.max_tokens, "]");
  DMOE_CUDA_CHECK(cudaMemsetAsync(combine_win_->local_ptr(), 0, num_tokens * config_.top_k * layout_.row_bytes,
                                  stream));
}

}  // namespace dist_moe::comm
