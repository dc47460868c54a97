// The routed-experts layer on one expert-parallel rank (collective over the context's ranks):
//
//   out[t] = sum_k score[t,k] * W2_e(SwiGLU(W13_e x_t)),   e = ids[t,k], -1 routes excluded
//
// reduced in FP32 in k order, returned in BF16; optionally every route row is RMS-normalized first
// (ExecutionOptions::experts_output_postprocess). Every call launches one fixed sequence of kernels
// that depends only on the host-visible shapes (never on routing counts), so a call can be captured
// in a CUDA graph and replayed. All ranks must pass the same T in one call.
//
//   Context::create(...)                        once, collectively
//   SavedState state(ctx);                      once per layer in flight (reused across steps)
//   routed_experts_forward(ctx, in, out, &state, opts, stream);     training forward
//   routed_experts_backward(ctx, in, state, grad_out, grads, opts, stream);
//   routed_experts_inference(ctx, in, out, opts, stream);           no saved state
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "dist_moe/config.h"
#include "dist_moe/context.h"
#include "dist_moe/dtype.h"
#include "dist_moe/prepared_weight.h"

namespace dist_moe {

// A prepared block-scaled weight as the layer reads it: the spec it was prepared with
// (prepared_weight_spec) and its device buffers (filled by prepare_block_scaled_weight).
struct PreparedExpertWeight {
  PreparedWeightSpec spec;
  PreparedWeightBuffers buffers;
};

// One layer's inputs (device pointers, contiguous, row-major).
struct RoutedExpertsInputs {
  const void* x_TD = nullptr;          // BF16 [T, D]
  int64_t num_tokens = 0;              // T, in [1, max_num_local_input_tokens], equal on all ranks
  const void* topk_ids_TK = nullptr;   // [T, K] int32 or int64, in [-1, E); -1 = disabled route
  DType id_dtype = DType::kInt32;
  const void* topk_scores_TK = nullptr;  // [T, K] FP32 or BF16; 0 for -1 routes
  DType score_dtype = DType::kFloat32;
  // W13 as [E_local, 2F, D], [E_local, 2, F, D] or flat [E_local*2F, D] (rows: gate F, then up F);
  // W2 as [E_local, D, F] or flat [E_local*D, F]. BF16. The three W13 layouts share one memory order.
  const void* w13 = nullptr;
  std::vector<int64_t> w13_shape;
  const void* w2 = nullptr;
  std::vector<int64_t> w2_shape;
  // Block-scaled contexts (Config::block_scaled, MXFP8): the weights prepared for the context's
  // format, [E_local, 2F, D] and [E_local, D, F], as training preparations (32x32 tiles, with the
  // DGRAD fields the backward reads; inference contexts read only their FPROP fields). The BF16
  // w13 / w2 fields are then unused; a block-scaled call without them is an argument error.
  const PreparedExpertWeight* w13_prepared = nullptr;
  const PreparedExpertWeight* w2_prepared = nullptr;
};

// Where the backward writes. grad_w13 / grad_w2 take the logical weight shapes of the inputs.
struct RoutedExpertsGradients {
  void* grad_x_TD = nullptr;        // BF16 [T, D] (written)
  void* grad_scores_TK = nullptr;   // [T, K] in the scores' dtype (written; 0 for -1 routes)
  void* grad_w13 = nullptr;         // wgrad_dtype, same element count as w13
  void* grad_w2 = nullptr;
  DType wgrad_dtype = DType::kBFloat16;  // kBFloat16 or kFloat32 (Config::wgrad_dtype when set)
  bool accumulate = false;          // grad_w += this call's WGRAD (FP32: one rounding; BF16: the WGRAD
                                    // rounded to BF16, then added by the TMA reduce-add, rounded again)
};

// What a training forward keeps for its backward, in device memory owned by this object: the
// routing tables of the call (the next layer's forward overwrites the context's), the activation
// planner's snapshot (offsets, slot, recompute decision, T, every rank's rows) and the RMSNorm rstd.
// Create it once per layer in flight and reuse it (its addresses are stable for CUDA graphs). A
// backward consumes the state of the matching forward; saved activations themselves live in the
// context's activation slot.
class SavedState {
 public:
  // Allocates and zeroes its memory and synchronizes the device (set-up, not a call: do not
  // construct one inside a stream capture).
  explicit SavedState(const Context& ctx);
  // A view over caller-owned device memory of storage_bytes(ctx) bytes (kMemoryAlignment-aligned),
  // which must stay alive and unmoved while a forward fills it and its backward reads it. The
  // PyTorch ops keep the state in a tensor this way; a backward trusts that a forward filled it.
  SavedState(const Context& ctx, void* device_storage);
  static size_t storage_bytes(const Context& ctx);
  ~SavedState();
  SavedState(const SavedState&) = delete;
  SavedState& operator=(const SavedState&) = delete;

  struct Buffers;
  Buffers& buffers() const { return *buffers_; }

 private:
  Buffers* buffers_;
};

// Training forward. With `saved` = nullptr the call is forward-only ("scratch only": nothing is
// saved, the activation slots are untouched), as for a training context under no-grad.
void routed_experts_forward(Context& ctx, const RoutedExpertsInputs& in, void* out_TD, SavedState* saved,
                            const ExecutionOptions& options, cudaStream_t stream);

// Backward of the forward that filled `saved` (same inputs: x, ids, scores, weights).
void routed_experts_backward(Context& ctx, const RoutedExpertsInputs& in, const SavedState& saved,
                             const void* grad_out_TD, const RoutedExpertsGradients& grads,
                             const ExecutionOptions& options, cudaStream_t stream);

// Inference forward (Config::inference contexts, or any context: nothing is saved).
void routed_experts_inference(Context& ctx, const RoutedExpertsInputs& in, void* out_TD,
                              const ExecutionOptions& options, cudaStream_t stream);

// ---- the GEMM-only twin (benchmarks) --------------------------------------------------------------
// The layer's grouped GEMMs alone, built by the same code the layer's are (tile configurations,
// activation, WGRAD dtype and accumulation), on local contiguous row buffers of
// ctx.capacity_rows() rows with the given rows per expert: what the layer would take if its
// communication and its other kernels were free. Each GEMM is reported to the context's stage hook
// under the layer's stage name ("w13", "w2", "w2_dgrad", "w2_wgrad", "w13_dgrad", "w13_wgrad").
// The weights come from `weights` (its w13/w2 fields; the token fields are unused). For timing the
// buffers may alias (grad_h3 = h3, grad_h2 = h2, grad_x = x): the times are the same, the values
// then are not the layer's.
struct RoutedExpertsGemmBuffers {
  const int32_t* rows_per_expert = nullptr;  // device int32 [local_experts]
  void* x = nullptr;        // [capacity, D] BF16
  void* h1 = nullptr;       // [capacity, 2F] BF16; nullptr: the forward drops h1
  void* h2 = nullptr;       // [capacity, F] BF16
  void* h3 = nullptr;       // [capacity, D] BF16
  void* grad_h3 = nullptr;  // [capacity, D] BF16 (backward input)
  void* grad_h2 = nullptr;  // [capacity, F] BF16
  void* grad_h1 = nullptr;  // [capacity, 2F] BF16 (backward input)
  void* grad_x = nullptr;   // [capacity, D] BF16
};
void routed_experts_gemms_forward(Context& ctx, const RoutedExpertsInputs& weights,
                                  const RoutedExpertsGemmBuffers& buffers, cudaStream_t stream);
// W2 DGRAD, W2 WGRAD (into grads.grad_w2), W13 DGRAD, W13 WGRAD (grads.grad_w13), with grads'
// WGRAD dtype and accumulation (Config::wgrad_dtype when set); grads' other fields are unused.
void routed_experts_gemms_backward(Context& ctx, const RoutedExpertsInputs& weights,
                                   const RoutedExpertsGemmBuffers& buffers, const RoutedExpertsGradients& grads,
                                   cudaStream_t stream);

}  // namespace dist_moe
