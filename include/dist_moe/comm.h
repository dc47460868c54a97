// Expert-parallel communication on the NCCL 2.28 device API (framework-free host API).
//
//   Communicator   an NCCL communicator (borrowed from the caller, or created from an
//                  ncclUniqueId the torch layer broadcasts) plus an ncclDevComm with LSA barriers,
//                  the device timeout budget and symmetric-window allocation.
//   SymmetricWindow ncclMemAlloc + ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC), zero-filled.
//   EpGroup        the routing / dispatch / combine windows of one MoE configuration, the routing
//                  tables, and the standalone, CUDA-graph-capturable ops built on them:
//                    publish   ids (+ header with T) and x rows into this rank's windows
//                    route     EP barrier + routing metadata on the device (no host read)
//                    dispatch  gather routed rows into an expert-major local buffer
//                    combine   route results to their owners, then FP32 top-k reduction
//                    publish_route_dispatch  the three above in one kernel (small problems)
//                    reduce    the second half of combine, after an external scatter (pipeline hook)
//
// One forward call on every rank (same T everywhere, same order of calls):
//   ep.publish(x_TD, ids_TK, DType::kInt32, T, stream);
//   ep.route(T, stream);
//   ep.dispatch(x_gathered_MD, T, stream);          // rows ordered (expert, src rank, token, k)
//   ... experts compute y_MD from x_gathered_MD (rows of ep.tables()) ...
//   ep.combine(y_MD, scores_TK, DType::kFloat32, out_TD, T, stream);
// or, the same in one kernel (decode-sized problems; larger ones fall back to the three launches):
//   ep.publish_route_dispatch(x_TD, ids_TK, DType::kInt32, T, x_gathered_MD, stream);
// Fused pipeline (the W2 epilogue stores row m to tables().scatter_dst[m], then fences at system
// scope): ep.reduce(scores_TK, DType::kFloat32, out_TD, T, stream) instead of combine().
// Calls through one EpGroup must not overlap (one stream, or stream-ordered). Every op is a fixed
// sequence of kernel launches that depends on T only, so it can be captured in a CUDA graph.
//
// Collective host calls (create, window allocation, destruction) must be made by every rank in the
// same order. Destroy EpGroups before their Communicator. Docs: docs/communication.md.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>
#include <nccl_device.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "dist_moe/config.h"
#include "dist_moe/device/comm/ep_layout.h"
#include "dist_moe/dtype.h"
#include "dist_moe/memory_plan.h"

namespace dist_moe::comm {

struct CommunicatorOptions {
  // Limit of every device spin-wait (barriers, signals), in milliseconds. <= 0: the environment
  // variable DMOE_COMM_TIMEOUT_MS, else 60000.
  int64_t timeout_ms = 0;
  // NCCL LSA barriers requested in the ncclDevComm (Communicator::nccl_lsa_barrier index range).
  int lsa_barrier_count = 1;
};

class Communicator;

// One symmetric window. Collective to create and to destroy; the memory is zero-filled when the
// constructor returns (peers may still be zeroing theirs: synchronize with host_barrier() before
// any peer access).
class SymmetricWindow {
 public:
  SymmetricWindow(const Communicator& comm, size_t bytes);
  ~SymmetricWindow();
  SymmetricWindow(const SymmetricWindow&) = delete;
  SymmetricWindow& operator=(const SymmetricWindow&) = delete;

  void* local_ptr() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  ncclWindow_t handle() const { return win_; }

 private:
  ncclComm_t comm_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  ncclWindow_t win_ = nullptr;
};

class Communicator {
 public:
  // Wraps a caller-owned communicator (not destroyed here). Collective. The current CUDA device
  // must be the communicator's device.
  static std::unique_ptr<Communicator> from_nccl_comm(ncclComm_t comm, const CommunicatorOptions& options = {});
  // Creates and owns a communicator of `world_size` ranks on the current CUDA device. Collective.
  static std::unique_ptr<Communicator> from_unique_id(const ncclUniqueId& id, int rank, int world_size,
                                                      const CommunicatorOptions& options = {});
  static ncclUniqueId make_unique_id();
  // Emulated peers (upstream's emulate_peer_buffers): rank `rank` of `world_size` in this process
  // alone, on a one-rank NCCL communicator it owns. Not collective. Every peer's window copy
  // aliases this rank's, and EP groups on it wait only for this rank; routes owned by absent ranks
  // read as exact zeros (EpGroup::prepare_scatter). It validates shapes, memory and the kernels of
  // an EP size on one GPU, not the numerics of other ranks' experts (docs/communication.md §9).
  static std::unique_ptr<Communicator> emulated(int rank, int world_size, const CommunicatorOptions& options = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_; }
  int device() const { return device_; }
  int num_sms() const { return num_sms_; }
  ncclComm_t nccl_comm() const { return comm_; }
  const ncclDevComm& dev_comm() const { return dev_comm_; }
  int64_t timeout_ms() const { return timeout_ms_; }
  uint64_t timeout_cycles() const { return timeout_cycles_; }
  bool emulated() const { return emulated_; }

  // Collective: allocates and registers one symmetric window of at least `bytes` bytes.
  std::unique_ptr<SymmetricWindow> alloc_window(size_t bytes) const;
  // This process's address of byte 0 of every rank's copy of `window` (index: rank); with emulated
  // peers, this rank's copy for every rank.
  std::vector<uintptr_t> peer_bases(const SymmetricWindow& window) const;
  // Collective host-side barrier (an NCCL all-reduce of one int, then a stream sync). Setup only.
  void host_barrier() const;
  // Device-side NCCL LSA barrier (ncclDevComm's lsaBarrier[index]) with the timeout, on `stream`.
  void nccl_lsa_barrier(cudaStream_t stream, uint32_t index = 0) const;

 private:
  Communicator(ncclComm_t comm, bool owned, const CommunicatorOptions& options);
  ncclComm_t comm_ = nullptr;
  bool owned_ = false;
  bool emulated_ = false;
  int rank_ = 0;
  int world_ = 1;
  int device_ = 0;
  int num_sms_ = 0;
  int lsa_barrier_count_ = 0;
  int64_t timeout_ms_ = 0;
  uint64_t timeout_cycles_ = 0;
  ncclDevComm dev_comm_{};
  bool dev_comm_created_ = false;
  cudaStream_t setup_stream_ = nullptr;
  int* setup_buf_ = nullptr;
};

// ---- EP group ---------------------------------------------------------------------------------

enum class DispatchMode {
  kTokenOnce,  // each (source rank, token) row crosses NVLink once and is copied to all its rows
  kPerRoute,   // each row is gathered from gather_src[row] (the fused GEMM producer's pattern)
};

enum class CombineSync {
  kBarrier,  // scatter, EP barrier, reduce (one cooperative kernel)
  kSignal,   // scatter with a per-token signal, reduce each token once its routes (or, for
             // kRankPartials, its owners' rows) arrived
};

// Which combine kernel. Results are bitwise identical; only speed differs.
enum class CombineAlgorithm {
  kAuto,  // environment DMOE_COMBINE_ALGO=v1|v2|partials, else kV2
  kV1,    // every route (src/comm/combine_every_route.cu): every route (local owners too) is copied
          // into its owner's combine window, then reduced; barrier mode uses grid barriers + a
          // one-CTA EP barrier
  kV2,    // remote routes only (src/comm/combine_remote_routes.cu): only routes of other owners are
          // stored (NVLink); routes of this rank's own tokens are
          // reduced straight from y; barrier mode uses the split EP barrier (no grid barrier),
          // signal mode has dedicated reduce warps and batched release fences
  // Each owner rank first sums the routes of a token it computed (FP32, k order, the token's
  // scores) and sends one row per (token, owner): the BF16 route row when it holds one route, the
  // FP32 partial when it holds several (at EP2, K = 8: about half of kV2's NVLink bytes). Different
  // reduction order, so different bits from kV1/kV2: per token, the owners' partials are added in
  // rank order (reference::topk_reduce_rank_partials, bit for bit; with one rank it is kV1's
  // result). Barrier sync: one split EP barrier between the owners' stores and the reduction;
  // signal sync: no barrier, every owner's store of a row piece is released with a per-token counter
  // and each token is reduced once its pieces arrived (same bits). Needs D % 16 == 0; uses the dispatch window past the published x
  // rows for the scores (T x K FP32) unless the fused route pushed them (DispatchOptions::scores_TK),
  // so it must not overlap a use of the dispatch window's route slots (grad_h3 publish). The
  // fastest measured at dsv3_prefill (barrier sync) and dsv3_decode (signal sync), EP2 (docs/perf.md
  // C13); kAuto keeps kV2 for its k-order bits.
  kRankPartials,
};

// Whether publish_route_dispatch runs as one kernel.
enum class FusedRoute {
  kAuto,  // environment DMOE_FUSED_ROUTE=0|1, else one kernel when the group supports it
  kOff,   // always publish + route + dispatch (three launches)
  kOn,    // one kernel; an error if the group does not support it (fused_route_supported())
};

struct EpConfig {
  int64_t max_tokens = 0;   // T_max per rank (max_num_local_input_tokens)
  int64_t hidden = 0;       // D, a multiple of 8 (16-byte rows)
  int64_t top_k = 0;        // K, 1..32
  int64_t num_experts = 0;  // E, divisible by the EP size
  int row_alignment = 1;    // each local expert's rows padded to this power of two (1..1024)
  int64_t capacity_rows = 0;  // rows of the expert-major buffers; 0: topology maximum
  bool validate_expert_ids = false;  // publish traps on ids outside [-1, E)

  // T_max, D, K, E and validate from the library Config; capacity from the plan's hard limit
  // (total_scratch_capacity_rows).
  static EpConfig from(const Config& config, const MemoryPlan& plan, int row_alignment = 1,
                       bool validate_expert_ids = false);
};

struct DispatchOptions {
  DispatchMode mode = DispatchMode::kTokenOnce;
  bool zero_fill_padding = true;  // padding rows of each expert are written with zeros
  int num_sms = 0;  // SMs to use (0: all)
  // PDL: overlap the launch with the routing kernel (environment DMOE_DISABLE_PDL=1 turns it off).
  bool programmatic_launch = true;
  // publish_route_dispatch only: one kernel or three launches. The fused kernel always moves rows
  // token-once (`mode` is ignored there; the result is the same bit for bit).
  FusedRoute fused = FusedRoute::kAuto;
  // publish_route_dispatch only, when it runs as one kernel: the top-k scores [T, K] (FP32 or BF16)
  // of the call, pushed as FP32 with the ids into every peer's routing window, so that the next
  // CombineAlgorithm::kRankPartials combine skips its scores exchange (a split EP barrier). The
  // combine must get the same scores; every rank passes scores or none (else the combine ends with a
  // protocol-error line). Ignored when the three separate ops run.
  const void* scores_TK = nullptr;
  DType score_dtype = DType::kFloat32;
  // publish_route_dispatch only: this rank's rows are in local_dispatch_routes() already (row t at
  // t * route_slot_bytes(), written earlier on the stream, e.g. quantized at the source into packed
  // rows); x_TD must then be nullptr and the publish moves only the ids. The rows' bytes are opaque
  // to the routing: tables().gather_src points at them as at BF16 rows, and a dispatch into
  // x_gathered_MD copies route_slot_bytes() of each.
  bool rows_in_window = false;
};

struct CombineOptions {
  CombineSync sync = CombineSync::kBarrier;
  int num_sms = 0;  // SMs to use (0: all)
  CombineAlgorithm algorithm = CombineAlgorithm::kAuto;
  // v2 tuning (0: environment DMOE_COMBINE_REDUCE_WARPS / _SIGNAL_BATCH / _K_GROUP, else automatic):
  int reduce_warps = 0;  // signal mode: warps of each 16-warp CTA that reduce (1..15; auto 4)
  int signal_batch = 0;  // signal mode: scatter units per release fence (1..32; auto 1)
  int k_group = 0;       // consecutive k per scatter unit (1..K; auto: 1 when the units (token, owner,
                         // segment) are fewer than the scatter warps, else K)
  // Signal mode, CTA specialization (C6): when > 0 (or DMOE_COMBINE_REDUCE_CTAS > 0 with this left
  // 0), the last `reduce_ctas` CTAs of the grid reduce with all their warps and every other CTA
  // scatters with all its warps (reduce_warps is then unused). Clamped to [1, CTAs - 1]; 0 (default)
  // keeps today's warp split inside every CTA. Same output bits.
  int reduce_ctas = 0;
};

// EpGroup::reduce() can also keep the route rows it reads: when base is set, every routed row is
// stored to base + *offset bytes, route-major [T, K, D] like the combine window (slots of -1 routes
// are not written), unless *skip != 0. Both are device int64s (nullptr offset: 0; nullptr skip:
// always keep), so a device-side planner can choose them without a host read -- the fused layer's
// saved h3 in one pass over the rows instead of a second copy. base: 16-byte aligned.
struct KeepRoutes {
  void* base = nullptr;
  const int64_t* offset = nullptr;
  const int64_t* skip = nullptr;
};

class EpGroup {
 public:
  // Collective: allocates the four symmetric windows and the routing tables.
  EpGroup(const Communicator& comm, const EpConfig& config);
  ~EpGroup();
  EpGroup(const EpGroup&) = delete;
  EpGroup& operator=(const EpGroup&) = delete;

  // x_TD: BF16 [T, D] (16-byte aligned); ids_TK: [T, K] int32 or int64 in [-1, E).
  void publish(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens, cudaStream_t stream);
  // EP barrier (publishes of all ranks visible), then the routing metadata. Traps with one line on
  // unequal T across ranks or when the padded rows exceed capacity_rows.
  void route(int64_t num_tokens, cudaStream_t stream);
  // Fills rows [0, total_rows) of x_gathered_MD (BF16 [capacity_rows, D], 16-byte aligned).
  void dispatch(void* x_gathered_MD, int64_t num_tokens, cudaStream_t stream, const DispatchOptions& options = {});
  // y_MD: BF16 [capacity_rows, D], row m = result of route row m (rows of tables()); padding rows
  // are never read. scores_TK: FP32 or BF16 [T, K]. out_TD: BF16 [T, D]:
  // out[t] = bf16(fmaf(s_K-1, y_K-1, ... fmaf(s_0, y_0, 0.0f))) over routed ids in k order (FP32).
  // options.algorithm picks the kernel (default v2: only routes of other owners cross NVLink);
  // every algorithm and sync gives the same bits.
  void combine(const void* y_MD, const void* scores_TK, DType score_dtype, void* out_TD, int64_t num_tokens,
               cudaStream_t stream, const CombineOptions& options = {});
  // EP barrier (slot 0) on `stream`. run_if (a device int64, optional): the barrier runs only where
  // *run_if != 0 -- every rank must see the same value at this barrier (e.g. a plan all ranks
  // computed from the same inputs), or the ranks that run it wait for the others until the timeout.
  void barrier(cudaStream_t stream, const int64_t* run_if = nullptr);
  // Call before kernels that store route rows into their owners' combine windows (scatter_dst), after
  // the last read of this rank's combine window. Emulated peers: zeroes this rank's route slots of
  // num_tokens tokens, so the routes absent ranks own read as exact zeros (upstream's fake process
  // groups zero them likewise). A no-op with real peers. combine() calls it itself.
  void prepare_scatter(int64_t num_tokens, cudaStream_t stream);
  // After an EP barrier that follows every owner's store of its route scores in its dispatch window
  // (routing::dispatch_score_offset): row_scores_M[m] (FP32, [capacity_rows]) = the score of row m's
  // route, found from grad_gather_src[m] (tables().grad_gather_src or a saved copy of it); 0 for a
  // padding row (nullptr); rows m >= *rows (a device int32, e.g. expert_offsets[L]) untouched.
  void gather_route_scores(const void* const* grad_gather_src, const int32_t* rows, float* row_scores_M,
                           cudaStream_t stream) const;

  // publish + route (+ dispatch when x_gathered_MD is not null) with the same results as the three
  // calls (x_TD nullptr with options.rows_in_window). When fused_route_supported() (R * T_max * K <= fused_route_max_routes()), one cooperative
  // kernel: CTA 0 pushes this rank's ids into every peer's routing window and sends a one-way ids
  // arrival; every CTA publishes a slice of the x rows (the last one sends a rows arrival); every CTA
  // waits for all ids arrivals, builds the whole routing in shared memory (redundantly) from local
  // memory, writes its slice of tables(), waits for all rows arrivals and moves rows token-once. Each
  // arrival is a full EP barrier for every earlier op on the stream (same reuse guarantees as
  // route()'s barrier). Otherwise publish(),
  // route(), dispatch(). Traps like publish/route (bad id with validation, unequal T, overflow).
  void publish_route_dispatch(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens,
                              void* x_gathered_MD, cudaStream_t stream, const DispatchOptions& options = {});
  bool fused_route_supported() const { return fused_ctas_ > 0; }
  int64_t fused_route_max_routes() const { return fused_max_routes_; }

  // The second half of combine() for a fused pipeline. Precondition: every route row of this call
  // was stored into its owner's combine window by a kernel earlier on `stream` on every rank (row m
  // of tables() to tables().scatter_dst[m], plain st.global, then a system-scope release fence,
  // e.g. fence.acq_rel.sys / __threadfence_system()). Runs the EP barrier (so every peer's stores
  // are visible), then out[t] = bf16(fmaf(s_K-1, v_K-1, ... fmaf(s_0, v_0, 0.0f))) over routed ids
  // in k order, reading every route from this rank's combine window: bitwise identical to
  // combine(). -1 (and out-of-range) routes are skipped; their slots are never read. One
  // cooperative kernel (split EP barrier on slot 0, no grid barrier). scores_TK: FP32 or BF16
  // [T, K]; out_TD: BF16 [T, D]. options: num_sms only. keep: see KeepRoutes.
  void reduce(const void* scores_TK, DType score_dtype, void* out_TD, int64_t num_tokens, cudaStream_t stream,
              const CombineOptions& options = {}, const KeepRoutes& keep = {});

  // This rank's route slots, BF16 [T_max, K, D]: route (t, k) of this rank's token t at byte offset
  // (t*K + k) * D * 2 (routing::combine_slot_offset).
  //  - local_dispatch_routes(): this rank's dispatch window. Forward: x rows [T, D] at t*D*2 (written
  //    by publish; peers read them in dispatch). Backward: the owner writes grad_h3 route rows here
  //    (after an EP barrier that follows every peer's last forward read), EP barrier, then expert
  //    ranks gather row m from tables().grad_gather_src[m]. Or, in the block-scaled pipelines'
  //    backward (K >= 2), grad_out's token rows at t*D*2 and FP32 route scores at
  //    routing::dispatch_score_offset, which expert ranks read through tables().gather_src[m] and
  //    gather_route_scores().
  //  - local_combine_routes(): this rank's combine window. Forward: h3 route rows arrive here
  //    (combine, or a W2 epilogue through scatter_dst). Backward: grad_x route rows arrive here
  //    (W13 DGRAD epilogue through scatter_dst); read them after an EP barrier.
  void* local_dispatch_routes() const { return dispatch_win_->local_ptr(); }
  void* local_combine_routes() const { return combine_win_->local_ptr(); }
  int64_t route_slot_bytes() const { return layout_.row_bytes; }  // D * 2, the stride of a route slot

  // Phase trace of the EP kernels (off by default): while enabled, launches record %globaltimer
  // (ns) into trace_buffer() [kTraceSlots] (EpDeviceLayout::trace, TraceSlot). Graphs captured while
  // enabled keep tracing. Benchmarks only.
  void enable_trace(bool on);
  unsigned long long* trace_buffer() const { return trace_; }

  const EpConfig& config() const { return config_; }
  int rank() const { return layout_.rank; }
  int world_size() const { return layout_.world; }
  int local_experts() const { return layout_.local_experts; }
  int64_t capacity_rows() const { return tables_.capacity_rows; }
  DType id_dtype() const { return layout_.id_bytes == 2 ? DType::kInt16 : DType::kInt32; }
  const RoutingTables& tables() const { return tables_; }
  const EpDeviceLayout& layout() const { return layout_; }
  const SymmetricWindow& routing_window() const { return *routing_win_; }
  const SymmetricWindow& dispatch_window() const { return *dispatch_win_; }
  const SymmetricWindow& combine_window() const { return *combine_win_; }
  const SymmetricWindow& signal_window() const { return *signal_win_; }
  // This process's addresses of every rank's dispatch / combine window (index: rank).
  const std::vector<uintptr_t>& dispatch_window_bases() const { return dispatch_bases_; }
  const std::vector<uintptr_t>& combine_window_bases() const { return combine_bases_; }
  // Chunking of the routing kernel for T tokens: routes per CTA and number of CTAs.
  void routing_launch_shape(int64_t num_tokens, int64_t* chunk_routes, int* num_ctas) const;

 private:
  void check_publish(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens,
                     bool rows_in_window) const;
  // The publish kernel (x_TD nullptr: ids only), after check_publish.
  void launch_publish_rows(const void* x_TD, const void* ids_TK, DType ids_dtype, int64_t num_tokens,
                           cudaStream_t stream);

  const Communicator& comm_;
  EpConfig config_;
  EpDeviceLayout layout_{};
  RoutingTables tables_{};
  std::unique_ptr<SymmetricWindow> routing_win_, dispatch_win_, combine_win_, signal_win_;
  EpLocalState* state_ = nullptr;
  int32_t* cta_expert_counts_ = nullptr;  // [max_routing_ctas, L]
  int32_t* cta_rank_counts_ = nullptr;    // [max_routing_ctas, 2, R]
  int max_routing_ctas_ = 0;
  int combine_ctas_f32_ = 0;   // co-resident combine CTAs (FP32 scores)
  int combine_ctas_bf16_ = 0;  // co-resident combine CTAs (BF16 scores)
  int remote_routes_ctas_[2][3] = {};  // co-resident v2 CTAs [bf16 scores][mode]
  int rank_partials_ctas_[2] = {};     // co-resident kRankPartials CTAs [bf16 scores]
  bool scores_pushed_ = false;    // the latest publish was the fused kernel with scores
  int fused_ctas_ = 0;            // CTAs of the fused route kernel (0: not supported)
  int64_t fused_max_routes_ = 0;  // R * T * K limit of the fused route kernel
  unsigned long long* trace_ = nullptr;
  std::vector<uintptr_t> dispatch_bases_, combine_bases_;
  void combine_v2(const void* y_MD, const void* scores_TK, bool score_bf16, void* out_TD, int64_t num_tokens,
                  int mode, const CombineOptions& options, cudaStream_t stream, const KeepRoutes& keep = {});
};

// Bytes of each window an EpGroup allocates for `config` on `world_size` ranks (per rank).
struct EpWindowSizes {
  int64_t routing_slot = 0;  // one parity slot
  int64_t routing = 0;       // kRoutingSlots slots (+ kRoutingSlots * R pushed slots, see below)
  // Fused-route groups (R * T_max * K <= kFusedMaxRoutes): offset of the pushed routing slots
  // [parity][source] in the routing window (0: none), their stride (header, ids, FP32 scores) and
  // the scores' offset in a slot.
  int64_t routing_push_offset = 0;
  int64_t routing_push_slot = 0;
  int64_t push_scores_offset = 0;
  int64_t dispatch = 0;
  int64_t combine = 0;
  int64_t signal = 0;
  int64_t barrier_inbox_offset = 0;
  int64_t token_counter_offset = 0;
  int64_t partial_counter_offset = 0;  // rank-partials signal mode: uint32 [2 parities][T_max]
  // Symmetric bytes beyond MemoryPlan's routing/dispatch/combine windows: the second routing parity
  // slot, the pushed routing slots of fused-route groups and the signal window,
  //   routing - routing_slot + signal, routing_slot = align128(128 + T_max*K*id_bytes),
  //   push slot = align128(align16(128 + T_max*K*id_bytes) + 4*T_max*K),
  //   signal = align128(align128(1024 + 4*T_max) + 8*T_max)   (id_bytes 2 if E <= 32767, else 4)
  int64_t extra_symmetric = 0;
};
EpWindowSizes ep_window_sizes(const EpConfig& config, int world_size);

// Default capacity: topology maximum R * T_max * min(K, L) rows plus L * (alignment - 1) padding.
int64_t ep_default_capacity_rows(const EpConfig& config, int world_size);

}  // namespace dist_moe::comm
