// Context creation and lifetime: plan, communicator, EP group, activation buffer, planner state.
#include "dist_moe/context.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "core/env_knobs.h"
#include "dist_moe/check.h"
#include "comm/ep_kernels.h"
#include "dist_moe/device/numeric/fp8_blockwise.cuh"
#include "dist_moe/grouped_gemm_config.h"
#include "dist_moe/memory_plan.h"
#include "kernels/planner.h"
#include "platform/vmm_prefetch.h"
#include "quant/quantize.h"
#include "runtime/context_impl.h"
#include "runtime/fp8_blockwise_pipeline.h"
#include "runtime/mxfp8_pipeline.h"

namespace dist_moe::runtime {

// ---- DeviceArena ------------------------------------------------------------------------------

DeviceArena::~DeviceArena() {
  if (base_ && owned_) cudaFree(base_);
}

size_t DeviceArena::reserve(size_t bytes) {
  DMOE_ASSERT(base_ == nullptr);
  const size_t offset = size_;
  size_ += static_cast<size_t>(align_up(static_cast<int64_t>(bytes)));
  return offset;
}

void DeviceArena::allocate() {
  DMOE_ASSERT(base_ == nullptr);
  if (size_ == 0) return;
  DMOE_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), size_));
  owned_ = true;
  DMOE_CUDA_CHECK(cudaMemset(base_, 0, size_));
  // The memset runs on the legacy stream, which a caller's non-blocking stream does not wait for:
  // without this, a SavedState's zeroing could land after (or amid) the forward that fills it.
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
}

void DeviceArena::release() {
  if (base_ && owned_) DMOE_CUDA_CHECK(cudaFree(base_));
  base_ = nullptr;
  owned_ = false;
}

void DeviceArena::adopt(void* base) {
  DMOE_ASSERT(base_ == nullptr);
  DMOE_CHECK_ARG(base != nullptr || size_ == 0, "DeviceArena::adopt needs device memory");
  base_ = static_cast<char*>(base);
}

bool mxfp8_training_on_fp8_blockwise(const Config& config) {
  if (!config.block_scaled || config.block_scaled->format != BlockScaledFormat::kMXFP8_E4M3 || config.inference ||
      config.block_scaled->pipeline != BlockScaledPipeline::kStaged)
    return false;
  for (const char* knob : {"DMOE_MXFP8_EXACT", "DMOE_MXFP8_FPROP_PER32", "DMOE_MXFP8_REROUND", "DMOE_MXFP8_WGRAD_BF16"})
    if (core::env_flag(knob)) return false;
  return true;
}

int w13_promote_k(const Config& config) {
  const bool mxfp8 = config.block_scaled && config.block_scaled->format == BlockScaledFormat::kMXFP8_E4M3;
  const int64_t k = core::env_int64_or("DMOE_W13_PROMOTE_K", mxfp8 ? 64 : 128);
  DMOE_CHECK_ARG(k == 128 || k == 64 || k == 32, "DMOE_W13_PROMOTE_K must be 128, 64 or 32, got ", k);
  return static_cast<int>(k);
}

}  // namespace dist_moe::runtime

namespace dist_moe {

// ---- Context ----------------------------------------------------------------------------------

namespace {

// The MXFP8 static scratch (planner::mxfp8_scratch) at the receive capacity, top down from the
// buffer's end: it must fit above the slots (plan_memory sizes the scratch by the same terms), and
// the WGRAD operands dequantized to BF16 rows must fit in the regions dead by then.
// NVFP4 (inference only) lays out its own regions the same way (planner::nvfp4_scratch), with the
// expanded FP16 token rows when its calls are prefill- or decode-sized (nvfp4_expands_token_rows).
void lay_out_mxfp8_scratch(Context::Impl& c) {
  const int64_t cap = c.capacity_rows(), D = c.config.hidden_dim, F = c.config.intermediate_dim;
  const bool nvfp4 = c.config.block_scaled->format == BlockScaledFormat::kNVFP4;
  const bool expand = nvfp4_expands_token_rows(c.config, c.world, c.plan.total_scratch_capacity_factor);
  if (c.config.block_scaled->pipeline == BlockScaledPipeline::kMega) {
    // Mega's Hopper kernels so far (config.cpp: NVFP4 inference, MXFP8 inference and training): the
    // staged tiles in one launch -- the decode form (16 tokens over the real rows; NVFP4 on expanded
    // token rows) at decode-sized inference, and for MXFP8 the rows form (128x128) at every other size
    // and in training, whose backward fuses W2 DGRAD with the SwiGLU backward.
    const bool decode = runs_decode_tiles(c.config, c.world, c.plan.total_scratch_capacity_factor);
    if (nvfp4 && !(decode && expand)) {
      const int64_t L = c.local_experts;
      const int64_t rows = plan_max_routed_rows(c.config, c.world, c.plan.total_scratch_capacity_factor);
      detail::fail(ErrorCode::kInvalidValue, "BlockScaledConfig.pipeline='mega' runs NVFP4 at decode sizes on "
                   "Hopper so far (at most ", kNarrowDecodeRowsPerExpert, " routed rows per local expert); this "
                   "context can route ", rows, " rows to its ", L, " local experts; use pipeline='staged'");
    }
    if (decode && (D % 256 != 0 || F % 256 != 0))  // the hand-off's row quantizers take 256 values per warp step
      detail::fail(ErrorCode::kInvalidValue, "BlockScaledConfig.pipeline='mega' needs hidden_dim and intermediate_dim "
                   "to be multiples of 256 at decode sizes on Hopper, got hidden_dim=", D, " and intermediate_dim=", F);
  }
  const planner::Mxfp8Scratch s = nvfp4 ? planner::nvfp4_scratch(cap, D, F, c.geometry.buffer_bytes, expand)
                                        : planner::mxfp8_scratch(cap, D, F, c.config.inference, c.geometry.buffer_bytes);
  const int64_t floor = c.geometry.num_slots * c.geometry.slot_bytes;
  if (s.bottom < floor)
    detail::fail(ErrorCode::kInternal, to_string(c.config.block_scaled->format), " scratch layout needs ",
                 c.geometry.buffer_bytes - s.bottom,
                 " bytes, the plan gives ", c.geometry.buffer_bytes - floor);
  if (runtime::runs_fp8_blockwise_pipeline(c.config, c.mxfp8_on_fp8_blockwise)) {
    // Its row bundles share the row region (the WGRADs read the saved column bundles where they lie).
    int64_t need = std::max(planner::fp8_blockwise_row_bytes(cap, D), planner::fp8_blockwise_row_bytes(cap, F));
    if (!c.config.inference) need = std::max(need, planner::fp8_blockwise_row_bytes(cap, 2 * F));
    if (need > s.h1 - s.row)
      detail::fail(ErrorCode::kInternal, "FP8-blockwise row bundle needs ", need, " bytes, the scratch row region has ",
                   s.h1 - s.row);
  } else if (!nvfp4 && !c.config.inference) {
    const int64_t w2_views = s.row + planner::align128(cap * D * 2) + planner::align128(cap * F * 2);
    const int64_t w13_views = s.row + planner::align128(cap * 2 * F * 2) + planner::align128(cap * D * 2);
    if (w2_views > s.w2_views_end || w13_views > s.w13_views_end)
      detail::fail(ErrorCode::kInvalidValue, "MXFP8 training on Hopper runs the WGRADs on BF16 copies of the column "
                   "bundles, placed in scratch regions dead by then; at hidden_dim=", D, " and intermediate_dim=", F,
                   " they do not fit (hidden_dim larger than about 4.5 x intermediate_dim)");
    // The FP8-blockwise WGRAD's operands (perf_history G149) take fewer bytes than those BF16 copies
    // but more rows (every expert rounded up to 128): where they would not fit, the BF16 WGRAD runs.
    const int64_t wcap = planner::mxfp8_wgrad_capacity(cap, c.local_experts);
    auto fp8_views = [&](int64_t n, int64_t k) {
      return s.row + numeric::fp8_blockwise_compact_columns_bytes(n, wcap) + numeric::fp8_blockwise_compact_columns_bytes(k, wcap);
    };
    c.mxfp8_wgrad_fp8 = fp8_views(D, F) <= s.w2_views_end && fp8_views(2 * F, D) <= s.w13_views_end &&
                        !core::env_flag("DMOE_MXFP8_WGRAD_BF16");
    // The FPROPs and DGRADs on the prepared weights at shared 128x128 scales (perf_history G150-G151): the
    // preparation reads the same knob, so a process runs one path.
    c.mxfp8_dgrad_fp8 = !core::env_flag("DMOE_MXFP8_EXACT");
    c.mxfp8_fprop_fp8 = c.mxfp8_dgrad_fp8 && !core::env_flag("DMOE_MXFP8_FPROP_PER32");
    // Mega's backward writes dxy's rows beside grad_h3's (Mxfp8Scratch::fused_dxy_codes).
    if (c.config.block_scaled->pipeline == BlockScaledPipeline::kMega && !s.fused_dxy_fits(cap, D, F))
      detail::fail(ErrorCode::kInternal, "the Mega backward's dxy codes do not fit the scratch row region at hidden_dim=",
                   D, " and intermediate_dim=", F);
  }
  c.mxfp8_scratch = s;
}

// The communication windows, the activation buffer and the small device state of `c`.
void build_buffers(Context::Impl* c, const Config& config, int64_t guard, platform::VmmPrefetch* prefetch) {
  // Symmetric windows and routing tables (collective).
  // Block-scaled layouts pad every local expert to whole column blocks (the WGRAD operands' blocks
  // run along tokens and restart at each expert). Upstream pads to 128 (kBlockScaledRowMultiple, its
  // tile height), and the plan's capacity keeps that bound; MXFP8's Hopper kernels need only 32,
  // which computes the same blocks on fewer padding rows (at qwen3_30b about 6% padding instead of
  // 25%); FP8-blockwise training needs 128 (its token blocks).
  c->mxfp8_on_fp8_blockwise = runtime::mxfp8_training_on_fp8_blockwise(config);
  c->w13_promote_k = runtime::w13_promote_k(config);
  const int row_alignment = runtime::routing_row_alignment(config, c->mxfp8_on_fp8_blockwise);
  comm::EpConfig ep = comm::EpConfig::from(config, c->plan, row_alignment, /*validate_expert_ids=*/false);
  c->ep = std::make_unique<comm::EpGroup>(*c->comm, ep);
  c->rows_window = c->comm->alloc_window(static_cast<size_t>(c->world) * sizeof(int32_t));

  // Activation buffer: slots then scratch (host overflow through VMM when the plan has it).
  c->activations = runtime::ActivationBuffer::create(c->plan, config.vmm.has_value(), c->device, guard, prefetch);
  const int64_t N = c->plan.num_activation_slots;
  c->geometry = {N, c->plan.activation_slot_bytes, c->activations->size()};
  if (config.block_scaled) lay_out_mxfp8_scratch(*c);

  // Small device state, one allocation.
  const int64_t R = c->world, L = c->local_experts, TK = config.max_num_local_input_tokens * config.top_k;
  runtime::DeviceArena& a = c->arena;
  const size_t o_saved = a.reserve(sizeof(int64_t) * N * R), o_layer = a.reserve(sizeof(int64_t) * N),
               o_peak = a.reserve(sizeof(int64_t) * (N + 1)), o_slots = a.reserve(sizeof(int64_t) * (N > 0 ? N : 1)),
               o_bases = a.reserve(sizeof(int32_t*) * R), o_call = a.reserve(sizeof(int64_t) * planner::layer_state_size(R)),
               o_bwd = a.reserve(sizeof(int64_t) * 8), o_counts = a.reserve(sizeof(int32_t) * L),
               o_gs = a.reserve(sizeof(float) * TK), o_rstd = a.reserve(sizeof(float) * TK),
               o_ws = a.reserve(grouped_gemm_gather_workspace_bytes(c->ep->capacity_rows(), L)),
               o_offs = a.reserve(sizeof(int32_t) * (L + 1)),
               o_rs = a.reserve(config.block_scaled ? sizeof(float) * c->ep->capacity_rows() : 0),
               o_wpc = a.reserve(config.block_scaled ? sizeof(int32_t) * L : 0),
               o_dbs = a.reserve(config.block_scaled && !config.inference
                                     ? sizeof(float) * L * (config.hidden_dim / 128) * (2 * config.intermediate_dim / 128)
                                     : 0);
  a.allocate();
  c->planner_state = {a.at<int64_t>(o_saved), a.at<int64_t>(o_layer), a.at<int64_t>(o_peak)};
  c->slot_ids = a.at<int64_t>(o_slots);
  c->rows_peer_bases = a.at<int32_t*>(o_bases);
  c->call_layer_state = a.at<int64_t>(o_call);
  c->backward_offsets = a.at<int64_t>(o_bwd);
  c->counts_gated = a.at<int32_t>(o_counts);
  c->grad_scores_f32 = a.at<float>(o_gs);
  c->rstd_scratch = a.at<float>(o_rstd);
  c->gather_workspace = a.at<int32_t>(o_ws);
  c->offsets_gated = a.at<int32_t>(o_offs);
  if (config.block_scaled) {
    c->grad_h3_row_scores = a.at<float>(o_rs);
    c->wgrad_padded_counts = a.at<int32_t>(o_wpc);
    if (!config.inference) c->weight_block_scales = a.at<float>(o_dbs);
  }

  std::vector<int64_t> ids(N > 0 ? N : 1);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  DMOE_CUDA_CHECK(cudaMemcpy(const_cast<int64_t*>(c->slot_ids), ids.data(), ids.size() * sizeof(int64_t),
                             cudaMemcpyHostToDevice));
  const std::vector<uintptr_t> rows_bases = c->comm->peer_bases(*c->rows_window);
  DMOE_CUDA_CHECK(cudaMemcpy(c->rows_peer_bases, rows_bases.data(), rows_bases.size() * sizeof(uintptr_t),
                             cudaMemcpyHostToDevice));
  kernels::reset_planner(c->geometry, R, c->planner_state, nullptr);
  c->slot_depth = config.max_moe_layers_per_activation_slot;
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  c->comm->host_barrier();  // every rank's windows are zeroed and registered before any peer access
}

std::unique_ptr<Context::Impl> build(const Config& config, std::unique_ptr<comm::Communicator> comm,
                                     const ContextOptions& options) {
  auto c = std::make_unique<Context::Impl>();
  c->config = config;
  c->options = options;
  c->rank = comm->rank();
  c->world = comm->world_size();
  c->stage_delays = core::parse_stage_delays(core::env_get("DMOE_DEBUG_STAGE_DELAY"), c->rank);
  c->device = comm->device();
  if (config.num_experts % c->world != 0)
    detail::fail(ErrorCode::kInvalidValue, "num_experts=", config.num_experts, " must be divisible by world_size=",
                 c->world);
  c->local_experts = config.num_experts / c->world;
  if (config.block_scaled) validate_block_scaled_execution(config, c->world);
  PlanOptions plan_options;
  if (config.vmm) {
    const MemoryPlan logical = plan_memory(config, c->world);
    if (logical.uses_host_scratch()) plan_options.vmm_granularity_bytes = runtime::vmm_allocation_granularity(c->device);
  }
  c->plan = plan_memory(config, c->world, plan_options);
  c->comm = std::move(comm);

  // Activation buffer guard: one GEMM tile of rows (128) at the widest row pitch, read (never used)
  // past the top buffer.
  const int64_t guard = 128 * std::max(config.hidden_dim, 2 * config.intermediate_dim) * 2;
  // The VMM host section is mapped (and its pages pinned) on a background thread while the
  // collective setup below runs; it claims the device now (upstream's prefetch, before the
  // communication buffers).
  std::unique_ptr<platform::VmmPrefetch> prefetch;
  if (config.vmm && config.vmm->prefetch)
    prefetch = runtime::ActivationBuffer::prefetch(c->plan, /*use_vmm=*/true, c->device, guard);
  try {
    build_buffers(c.get(), config, guard, prefetch.get());
  } catch (...) {
    // Upstream's cleanup: the prefetch closed with one retry; if that fails too, its error replaces
    // this one and the device stays claimed.
    if (prefetch) prefetch->close_retrying_once();
    throw;
  }
  return c;
}

comm::CommunicatorOptions comm_options(const ContextOptions& o) {
  comm::CommunicatorOptions c;
  c.timeout_ms = o.comm_timeout_ms;
  return c;
}

}  // namespace

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::unique_ptr<Context> Context::create(const Config& config, ncclComm_t comm, const ContextOptions& options) {
  config.validate();
  return std::unique_ptr<Context>(
      new Context(build(config, comm::Communicator::from_nccl_comm(comm, comm_options(options)), options)));
}

std::unique_ptr<Context> Context::create(const Config& config, const ncclUniqueId& id, int rank, int world_size,
                                         const ContextOptions& options) {
  config.validate();
  return std::unique_ptr<Context>(new Context(
      build(config, comm::Communicator::from_unique_id(id, rank, world_size, comm_options(options)), options)));
}

std::unique_ptr<Context> Context::create_emulated(const Config& config, int rank, int world_size,
                                                  const ContextOptions& options) {
  config.validate();
  return std::unique_ptr<Context>(
      new Context(build(config, comm::Communicator::emulated(rank, world_size, comm_options(options)), options)));
}

Context::~Context() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist-moe: warning: context close failed: %s\n", e.what());
  }
}

Context::Impl& context_impl(const Context& ctx) {
  if (!ctx.impl_ || ctx.impl_->closed) throw Error(ErrorCode::kRuntime, "distributed MoE context is closed");
  return *ctx.impl_;
}

void Context::reset(cudaStream_t stream) {
  Impl& c = context_impl(*this);
  kernels::reset_planner(c.geometry, c.world, c.planner_state, stream);
  c.selected_slot = 0;
  c.slot_depth = c.config.max_moe_layers_per_activation_slot;
}

void Context::select_activation_slot(int64_t activation_slot, int64_t num_moe_layers_in_slot) {
  Impl& c = context_impl(*this);
  const int64_t N = c.plan.num_activation_slots;
  if (N == 0) return;  // inference contexts have no slots
  if (activation_slot < 0 || activation_slot >= N)
    detail::fail(ErrorCode::kInvalidValue, "activation slot must be in [0, ", N, "), got ", activation_slot);
  const int64_t L = c.config.max_moe_layers_per_activation_slot;
  if (num_moe_layers_in_slot < 1 || num_moe_layers_in_slot > L)
    detail::fail(ErrorCode::kInvalidValue, "num_moe_layers_in_slot must be in [1, ", L, "], got ",
                 num_moe_layers_in_slot);
  c.selected_slot = activation_slot;
  c.slot_depth = num_moe_layers_in_slot;
}

void Context::close() {
  if (!impl_ || impl_->closed) return;
  Impl& c = *impl_;
  DMOE_CUDA_CHECK(cudaSetDevice(c.device));
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  c.closed = true;
  c.activations->close();
  c.arena.release();
  c.rows_window.reset();  // collective window deregistration, then the group's windows
  c.ep.reset();
  c.comm.reset();
}

bool Context::closed() const { return !impl_ || impl_->closed; }
const Config& Context::config() const { return context_impl(*this).config; }
const MemoryPlan& Context::memory_plan() const { return context_impl(*this).plan; }
int Context::rank() const { return context_impl(*this).rank; }
int Context::ep_size() const { return context_impl(*this).world; }
int64_t Context::local_experts() const { return context_impl(*this).local_experts; }
int Context::device() const { return context_impl(*this).device; }

void Context::set_stage_hook(StageHook hook) { context_impl(*this).stage_hook = std::move(hook); }
int64_t Context::capacity_rows() const { return context_impl(*this).capacity_rows(); }
const int32_t* Context::routed_rows_per_expert() const { return context_impl(*this).ep->tables().expert_rows; }

namespace {
Context::DeviceRegion region_of(const comm::SymmetricWindow& w) { return {w.local_ptr(), w.bytes()}; }
}  // namespace

Context::DeviceRegion Context::activation_buffer() const {
  const Impl& c = context_impl(*this);
  return {c.activations->data(), static_cast<size_t>(c.activations->size())};
}
Context::DeviceRegion Context::routing_window() const { return region_of(context_impl(*this).ep->routing_window()); }
Context::DeviceRegion Context::dispatch_window() const { return region_of(context_impl(*this).ep->dispatch_window()); }
Context::DeviceRegion Context::combine_window() const { return region_of(context_impl(*this).ep->combine_window()); }

Context::PlannerView Context::planner_view() const {
  const Impl& c = context_impl(*this);
  PlannerView v;
  v.saved_bytes_NR = c.planner_state.saved_bytes_NR;
  v.layer_id_N = c.planner_state.layer_id_N;
  v.peak_min_free_N1 = c.planner_state.peak_min_free_N1;
  v.slot_ids = c.slot_ids;
  v.num_slots = c.geometry.num_slots;
  v.slot_bytes = c.geometry.slot_bytes;
  v.buffer_bytes = c.geometry.buffer_bytes;
  return v;
}

}  // namespace dist_moe
