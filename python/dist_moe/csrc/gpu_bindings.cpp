// dist_moe._C: the GPU runtime for the PyTorch front end (dist_moe/_ops.py).
//
// Tensors cross as raw device pointers plus dtype names and the caller's CUDA stream, so this module
// builds without torch headers; torch owns every tensor, this module owns the Context (windows,
// activation buffer, planner state). Every call only enqueues work on the given stream: nothing
// here synchronizes, except close() and the planner snapshot used by tests.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <memory>

#include "dict_convert.h"
#include "dist_moe/check.h"
#include "dist_moe/context.h"
#include "dist_moe/prepare_weight.h"
#include "dist_moe/quantize_rows.h"
#include "dist_moe/routed_experts.h"
#include "platform/device_guard.h"

namespace py = pybind11;
using namespace dist_moe;
using namespace dist_moe::python;

namespace dist_moe::python {
namespace {

using platform::DeviceGuard;

cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }
const void* as_ptr(uintptr_t p) { return reinterpret_cast<const void*>(p); }

// The prepared weight's device buffers (0 = absent), in PreparedWeightBuffers' field order.
PreparedWeightBuffers prepared_buffers(uintptr_t fprop_data, uintptr_t fprop_scale, uintptr_t dgrad_data,
                                       uintptr_t dgrad_scale, uintptr_t global_scale, uintptr_t global_scale_inv) {
  PreparedWeightBuffers b;
  b.fprop_data = reinterpret_cast<void*>(fprop_data);
  b.fprop_scale = reinterpret_cast<void*>(fprop_scale);
  b.dgrad_data = reinterpret_cast<void*>(dgrad_data);
  b.dgrad_scale = reinterpret_cast<void*>(dgrad_scale);
  b.global_scale = reinterpret_cast<float*>(global_scale);
  b.global_scale_inv = reinterpret_cast<float*>(global_scale_inv);
  return b;
}

// {"format": name, "inference": bool, "shape": [E, N, K] (the source weight's), "fprop_data",
//  "fprop_scale", "dgrad_data", "dgrad_scale": ptrs (0 = absent), optional "global_scale",
//  "global_scale_inv": ptrs (absent, None or 0 = absent; NVFP4 needs global_scale_inv)} -> the
// layer's prepared weight; the spec is prepared_weight_spec's for that format, mode and shape (the
// layer checks it against the context: format, local experts, N and K, training preparation, the
// NVFP4 expert scale).
PreparedExpertWeight prepared_from_dict(const py::dict& d) {
  const auto shape = d["shape"].cast<std::vector<int64_t>>();
  DMOE_CHECK_ARG(shape.size() == 3, "a prepared weight's shape must be [E, N, K], got ", shape.size(), " dims");
  PreparedExpertWeight w;
  w.spec = prepared_weight_spec(parse_block_scaled_format(d["format"].cast<std::string>()), d["inference"].cast<bool>(),
                                shape[0], shape[1], shape[2]);
  w.buffers = prepared_buffers(d["fprop_data"].cast<uintptr_t>(), d["fprop_scale"].cast<uintptr_t>(),
                               d["dgrad_data"].cast<uintptr_t>(), d["dgrad_scale"].cast<uintptr_t>(),
                               opt<uintptr_t>(d, "global_scale").value_or(0),
                               opt<uintptr_t>(d, "global_scale_inv").value_or(0));
  return w;
}

// One call's inputs: {"x": ptr, "num_tokens": T, "ids": ptr, "id_dtype": name, "scores": ptr,
// "score_dtype": name, "w13": ptr, "w13_shape": [...], "w2": ptr, "w2_shape": [...], and for
// block-scaled contexts "w13_prepared" / "w2_prepared" (prepared_from_dict; w13 / w2 are then 0)}.
// RoutedExpertsInputs points at the prepared weights held here, so this object is not copied.
struct CallInputs {
  RoutedExpertsInputs in;
  PreparedExpertWeight w13_prepared, w2_prepared;

  explicit CallInputs(const py::dict& d) {
    in.x_TD = as_ptr(d["x"].cast<uintptr_t>());
    in.num_tokens = d["num_tokens"].cast<int64_t>();
    in.topk_ids_TK = as_ptr(d["ids"].cast<uintptr_t>());
    in.id_dtype = parse_dtype(d["id_dtype"].cast<std::string>());
    in.topk_scores_TK = as_ptr(d["scores"].cast<uintptr_t>());
    in.score_dtype = parse_dtype(d["score_dtype"].cast<std::string>());
    in.w13 = as_ptr(d["w13"].cast<uintptr_t>());
    in.w13_shape = d["w13_shape"].cast<std::vector<int64_t>>();
    in.w2 = as_ptr(d["w2"].cast<uintptr_t>());
    in.w2_shape = d["w2_shape"].cast<std::vector<int64_t>>();
    if (auto p = opt<py::dict>(d, "w13_prepared")) {
      w13_prepared = prepared_from_dict(*p);
      in.w13_prepared = &w13_prepared;
    }
    if (auto p = opt<py::dict>(d, "w2_prepared")) {
      w2_prepared = prepared_from_dict(*p);
      in.w2_prepared = &w2_prepared;
    }
  }
  CallInputs(const CallInputs&) = delete;
  CallInputs& operator=(const CallInputs&) = delete;
};

// {"clip_stats": ptr or 0, "clip_limit": float, "validate_expert_ids": bool, "rmsnorm": None or
//  {"eps", "norm_output_dtype", "output_dtype", "require_bitwise", "weight" (ptr or 0),
//   "weight_dtype", "gain_center", "use_kahan", "recompute_rstd"},
//  optional "expert_output" / "grad_expert_output" / "grad_expert_output_out": route-row I/O
//  pointers (0 = off), optional "recompute_from_inputs": bool}
ExecutionOptions options_from_dict(const py::dict& d) {
  ExecutionOptions o;
  o.swiglu_clip_stats_out_3 = reinterpret_cast<float*>(d["clip_stats"].cast<uintptr_t>());
  o.swiglu_clip_limit = d["clip_limit"].cast<double>();
  o.validate_expert_ids = d["validate_expert_ids"].cast<bool>();
  if (auto p = opt<uintptr_t>(d, "expert_output")) o.expert_output_TKD = reinterpret_cast<void*>(*p);
  if (auto p = opt<uintptr_t>(d, "grad_expert_output")) o.grad_expert_output_TKD = as_ptr(*p);
  if (auto p = opt<uintptr_t>(d, "grad_expert_output_out")) o.grad_expert_output_out_TKD = reinterpret_cast<void*>(*p);
  if (auto v = opt<bool>(d, "recompute_from_inputs")) o.recompute_from_inputs = *v;
  if (auto r = opt<py::dict>(d, "rmsnorm")) {
    RMSNormPostprocess p;
    p.eps = (*r)["eps"].cast<double>();
    p.norm_output_dtype = parse_dtype((*r)["norm_output_dtype"].cast<std::string>());
    p.output_dtype = parse_dtype((*r)["output_dtype"].cast<std::string>());
    p.require_bitwise = (*r)["require_bitwise"].cast<bool>();
    p.weight = as_ptr((*r)["weight"].cast<uintptr_t>());
    p.weight_dtype = parse_dtype((*r)["weight_dtype"].cast<std::string>());
    p.gain_center = (*r)["gain_center"].cast<double>();
    p.use_kahan = (*r)["use_kahan"].cast<bool>();
    p.recompute_rstd = (*r)["recompute_rstd"].cast<bool>();
    o.experts_output_postprocess = p;
  }
  return o;
}

// One rank's context as Python sees it.
class GpuContext {
 public:
  // emulate_peer_buffers: Context::create_emulated (unique_id unused, not collective).
  GpuContext(const py::dict& config, const py::bytes& unique_id, int rank, int world_size, int device,
             int64_t comm_timeout_ms, bool emulate_peer_buffers) {
    const Config c = config_from_dict(config);
    DeviceGuard guard(device);
    ContextOptions options;
    options.comm_timeout_ms = comm_timeout_ms;
    if (emulate_peer_buffers) {
      py::gil_scoped_release release;
      ctx_ = Context::create_emulated(c, rank, world_size, options);
      return;
    }
    const std::string id = unique_id;
    DMOE_CHECK_ARG(id.size() == sizeof(ncclUniqueId), "unique_id must hold ", sizeof(ncclUniqueId), " bytes");
    ncclUniqueId uid;
    std::memcpy(uid.internal, id.data(), sizeof uid.internal);
    py::gil_scoped_release release;  // NCCL bootstrap waits for every rank
    ctx_ = Context::create(c, uid, rank, world_size, options);
  }

  Context& ctx() const {
    if (!ctx_ || ctx_->closed()) throw Error(ErrorCode::kRuntime, "distributed MoE context is closed");
    return *ctx_;
  }
  int device() const { return ctx().device(); }

  // Local device memory the context owns, by name: (pointer, bytes). The ops take these as their
  // mutable storage arguments so graphs and tracers see what a call writes.
  py::dict storages() const {
    const Context& c = ctx();
    auto region = [](const Context::DeviceRegion& r) {
      return py::make_tuple(reinterpret_cast<uintptr_t>(r.ptr), r.bytes);
    };
    py::dict d;
    d["activation"] = region(c.activation_buffer());
    d["routing"] = region(c.routing_window());
    d["dispatch"] = region(c.dispatch_window());
    d["combine"] = region(c.combine_window());
    return d;
  }

  // The device planner's state and geometry: {"saved_bytes": (ptr, bytes) of int64 [N*R],
  // "layer_ids": int64 [N], "peak_min_free": int64 [N+1], "slot_ids": int64 [max(N, 1)],
  // "num_slots", "slot_bytes", "buffer_bytes", "rank", "world"} -- live device memory the
  // context owns (Context.activation_buffer views it without a host read).
  py::dict planner_storage() const {
    const Context& c = ctx();
    const Context::PlannerView v = c.planner_view();
    const int64_t N = v.num_slots, R = c.ep_size();
    auto piece = [](const void* p, int64_t n) { return py::make_tuple(reinterpret_cast<uintptr_t>(p), n * 8); };
    py::dict d;
    d["saved_bytes"] = piece(v.saved_bytes_NR, N * R);
    d["layer_ids"] = piece(v.layer_id_N, N);
    d["peak_min_free"] = piece(v.peak_min_free_N1, N + 1);
    d["slot_ids"] = piece(v.slot_ids, N > 0 ? N : 1);
    d["num_slots"] = N;
    d["slot_bytes"] = v.slot_bytes;
    d["buffer_bytes"] = v.buffer_bytes;
    d["rank"] = c.rank();
    d["world"] = R;
    return d;
  }

  // Synchronizing copy of the planner state (tests and debugging only).
  py::dict planner_snapshot() const {
    const Context& c = ctx();
    const Context::PlannerView v = c.planner_view();
    DeviceGuard guard(c.device());
    const int64_t N = v.num_slots, R = c.ep_size();
    std::vector<int64_t> saved(N * R), layers(N);
    if (N > 0) {
      DMOE_CUDA_CHECK(cudaDeviceSynchronize());
      DMOE_CUDA_CHECK(cudaMemcpy(saved.data(), v.saved_bytes_NR, N * R * 8, cudaMemcpyDeviceToHost));
      DMOE_CUDA_CHECK(cudaMemcpy(layers.data(), v.layer_id_N, N * 8, cudaMemcpyDeviceToHost));
    }
    py::dict d;
    d["saved_bytes"] = saved;
    d["layer_ids"] = layers;
    return d;
  }

  void forward(const py::dict& inputs, uintptr_t out, uintptr_t state, const py::dict& options, uintptr_t stream) {
    Context& c = ctx();
    DeviceGuard guard(c.device());
    const CallInputs call(inputs);
    const ExecutionOptions o = options_from_dict(options);
    if (state == 0) {
      routed_experts_forward(c, call.in, reinterpret_cast<void*>(out), nullptr, o, as_stream(stream));
      return;
    }
    SavedState saved(c, reinterpret_cast<void*>(state));
    routed_experts_forward(c, call.in, reinterpret_cast<void*>(out), &saved, o, as_stream(stream));
  }

  void inference(const py::dict& inputs, uintptr_t out, const py::dict& options, uintptr_t stream) {
    Context& c = ctx();
    DeviceGuard guard(c.device());
    const CallInputs call(inputs);
    routed_experts_inference(c, call.in, reinterpret_cast<void*>(out), options_from_dict(options), as_stream(stream));
  }

  // grads: {"grad_x", "grad_scores", "grad_w13", "grad_w2": ptrs, "wgrad_dtype": name, "accumulate": bool}
  void backward(const py::dict& inputs, uintptr_t state, uintptr_t grad_out, const py::dict& grads,
                const py::dict& options, uintptr_t stream) {
    Context& c = ctx();
    DeviceGuard guard(c.device());
    RoutedExpertsGradients g;
    g.grad_x_TD = reinterpret_cast<void*>(grads["grad_x"].cast<uintptr_t>());
    g.grad_scores_TK = reinterpret_cast<void*>(grads["grad_scores"].cast<uintptr_t>());
    g.grad_w13 = reinterpret_cast<void*>(grads["grad_w13"].cast<uintptr_t>());
    g.grad_w2 = reinterpret_cast<void*>(grads["grad_w2"].cast<uintptr_t>());
    g.wgrad_dtype = parse_dtype(grads["wgrad_dtype"].cast<std::string>());
    g.accumulate = grads["accumulate"].cast<bool>();
    const SavedState saved(c, reinterpret_cast<void*>(state));
    const CallInputs call(inputs);
    routed_experts_backward(c, call.in, saved, as_ptr(grad_out), g, options_from_dict(options), as_stream(stream));
  }

  void reset(uintptr_t stream) {
    DeviceGuard guard(device());
    ctx().reset(as_stream(stream));
  }
  void select_activation_slot(int64_t slot, int64_t depth) { ctx().select_activation_slot(slot, depth); }
  void close() {
    if (!ctx_ || ctx_->closed()) return;
    DeviceGuard guard(ctx_->device());
    py::gil_scoped_release release;
    ctx_->close();
  }
  bool closed() const { return !ctx_ || ctx_->closed(); }

 private:
  std::unique_ptr<Context> ctx_;
};

}  // namespace
}  // namespace dist_moe::python

PYBIND11_MODULE(_C, m) {
  m.doc() = "Dist-MoE GPU runtime: contexts, the BF16, MXFP8 and FP8-blockwise routed-experts pipelines and block-scaled weight preparation (raw pointers, no torch)";
  register_error_translator();
  m.def("unique_id", [] {
    ncclUniqueId id;
    DMOE_NCCL_CHECK(ncclGetUniqueId(&id));
    return py::bytes(id.internal, sizeof id.internal);
  });
  m.def("nccl_version", [] {
    int v = 0;
    DMOE_NCCL_CHECK(ncclGetVersion(&v));
    return v;
  });
  // Prepared block-scaled weights (dist_moe/prepare_weight.h): the BF16 weight [E, N, K] at
  // weight_ptr is quantized into caller-owned buffers laid out as _native.prepared_weight_spec
  // says, each its own (training: dgrad_data is the transposed copy [E, K, N], MXFP8 included; one
  // overlapping fprop_data is a ValueError). Enqueued on `stream` (on `device`), no allocation and no
  // synchronization, so a refill of the same buffers can be captured in a CUDA graph.
  m.def("prepare_block_scaled_weight",
        [](uintptr_t weight, const std::string& format, bool inference, int64_t num_experts, int64_t rows,
           int64_t cols, uintptr_t fprop_data, uintptr_t fprop_scale, uintptr_t dgrad_data, uintptr_t dgrad_scale,
           uintptr_t global_scale, uintptr_t global_scale_inv, uintptr_t stream, int device) {
          const PreparedWeightSpec spec =
              prepared_weight_spec(parse_block_scaled_format(format), inference, num_experts, rows, cols);
          DeviceGuard guard(device);
          prepare_block_scaled_weight(
              as_ptr(weight), spec,
              prepared_buffers(fprop_data, fprop_scale, dgrad_data, dgrad_scale, global_scale, global_scale_inv),
              as_stream(stream));
        },
        py::arg("weight"), py::arg("format"), py::arg("inference"), py::arg("num_experts"), py::arg("rows"),
        py::arg("cols"), py::arg("fprop_data"), py::arg("fprop_scale"), py::arg("dgrad_data"),
        py::arg("dgrad_scale"), py::arg("global_scale"), py::arg("global_scale_inv"), py::arg("stream"),
        py::arg("device"));
  // FP8 blockwise from a checkpoint: E4M3 data [E, N, K] + FP32 scale_inv [E, N/128, K/128].
  m.def("prepare_fp8_blockwise_weight_from_checkpoint",
        [](uintptr_t data, uintptr_t scale_inv, bool inference, int64_t num_experts, int64_t rows, int64_t cols,
           uintptr_t fprop_data, uintptr_t fprop_scale, uintptr_t dgrad_data, uintptr_t dgrad_scale, uintptr_t stream,
           int device) {
          const PreparedWeightSpec spec =
              prepared_weight_spec(BlockScaledFormat::kFP8Blockwise, inference, num_experts, rows, cols);
          DeviceGuard guard(device);
          prepare_fp8_blockwise_weight_from_checkpoint(as_ptr(data), reinterpret_cast<const float*>(scale_inv), spec,
                                                       prepared_buffers(fprop_data, fprop_scale, dgrad_data,
                                                                        dgrad_scale, 0, 0),
                                                       as_stream(stream));
        },
        py::arg("data"), py::arg("scale_inv"), py::arg("inference"), py::arg("num_experts"), py::arg("rows"),
        py::arg("cols"), py::arg("fprop_data"), py::arg("fprop_scale"), py::arg("dgrad_data"),
        py::arg("dgrad_scale"), py::arg("stream"), py::arg("device"));
  // Per-token NVFP4 rows (dist_moe/quantize_rows.h): x [T, D] BF16 (row stride in elements) into
  // packed rows [D/2 | D/16 | 4 B inverse scale | pad] at out + t * out_row_stride (bytes).
  m.def("quantize_nvfp4_token_rows",
        [](uintptr_t x, int64_t tokens, int64_t hidden, int64_t x_row_stride, uintptr_t out, int64_t out_row_stride,
           uintptr_t stream, int device) {
          DeviceGuard guard(device);
          quantize_nvfp4_token_rows(as_ptr(x), tokens, hidden, x_row_stride, reinterpret_cast<void*>(out),
                                    out_row_stride, as_stream(stream));
        },
        py::arg("x"), py::arg("tokens"), py::arg("hidden"), py::arg("x_row_stride"), py::arg("out"),
        py::arg("out_row_stride"), py::arg("stream"), py::arg("device"));
  m.def("nvfp4_packed_row_bytes", [](int64_t hidden) { return nvfp4_packed_row_bytes(hidden); }, py::arg("hidden"));
  py::class_<GpuContext>(m, "Context")
      .def(py::init<const py::dict&, const py::bytes&, int, int, int, int64_t, bool>(), py::arg("config"),
           py::arg("unique_id"), py::arg("rank"), py::arg("world_size"), py::arg("device"),
           py::arg("comm_timeout_ms") = 0, py::arg("emulate_peer_buffers") = false)
      .def_property_readonly("rank", [](const GpuContext& g) { return g.ctx().rank(); })
      .def_property_readonly("ep_size", [](const GpuContext& g) { return g.ctx().ep_size(); })
      .def_property_readonly("local_experts", [](const GpuContext& g) { return g.ctx().local_experts(); })
      .def_property_readonly("device", &GpuContext::device)
      .def_property_readonly("closed", &GpuContext::closed)
      .def_property_readonly("saved_state_bytes",
                             [](const GpuContext& g) { return static_cast<int64_t>(SavedState::storage_bytes(g.ctx())); })
      .def("storages", &GpuContext::storages)
      .def("planner_snapshot", &GpuContext::planner_snapshot)
      .def("planner_storage", &GpuContext::planner_storage)
      .def("memory_plan", [](const GpuContext& g) { return plan_to_dict(g.ctx().memory_plan()); })
      .def("forward", &GpuContext::forward)
      .def("inference", &GpuContext::inference)
      .def("backward", &GpuContext::backward)
      .def("reset", &GpuContext::reset)
      .def("select_activation_slot", &GpuContext::select_activation_slot)
      .def("close", &GpuContext::close);
}
