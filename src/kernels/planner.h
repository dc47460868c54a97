// Launchers of the device activation planner (include/dist_moe/device/planner/): one thread
// decides saved vs recompute and emits offsets, with no host read. A violated hard limit prints
// one diagnostic line (rank, what, required, available) and traps.
#pragma once

#include <cuda_runtime.h>

#include "dist_moe/device/planner/activation_planner.cuh"

namespace dist_moe::kernels {

// Forward of one layer. `slot_id_1` is the selected slot (device, one int64); `recv_rows_R` every
// rank's received rows (device), or nullptr for a scratch-only call, which needs only this rank's
// `own_rows_1`; writes layer_state_size(R) int64 to `layer_state_out`. `mxfp8` (the scratch homes of
// a block-scaled layer) selects plan_mxfp8_forward; nullptr plans a BF16 layer.
void plan_forward(const planner::BufferGeometry& g, const planner::CallShape& c, planner::PlannerState state,
                  const int64_t* slot_id_1, int64_t depth, const int32_t* recv_rows_R, const int32_t* own_rows_1,
                  bool scratch_only, int64_t* layer_state_out, cudaStream_t stream,
                  const planner::Mxfp8Homes* mxfp8 = nullptr);

// Backward of the layer whose forward snapshot is `layer_state`; writes 7 int64 offsets
// (grad_h1, h2, grad_h2, grad_h3_gathered, h1, x_gathered, x) and pops the layer from its slot.
// `caller_x` is the offset of the caller's x_TD from the activation buffer base (the recompute's
// input when the forward kept no x save).
void plan_backward(const planner::BufferGeometry& g, const planner::CallShape& c, planner::PlannerState state,
                   const int64_t* layer_state, int64_t caller_x, int64_t* backward_offsets_7, cudaStream_t stream);
// The same for an MXFP8 layer (plan_mxfp8_backward): writes only the recompute's input offset (x)
// to `x_offset_1`; the operands stay where the forward's snapshot says; `homes`: the context's static
// scratch (its bottom is the scratch peak noted).
void plan_mxfp8_backward(const planner::BufferGeometry& g, const planner::CallShape& c, planner::PlannerState state,
                         const int64_t* layer_state, int64_t caller_x, const planner::Mxfp8Homes& homes,
                         int64_t* x_offset_1, cudaStream_t stream);

// Empty slots, peaks reset: the context's initial state (graph-capturable: a kernel, no copies).
void reset_planner(const planner::BufferGeometry& g, int64_t ep_size, planner::PlannerState state,
                   cudaStream_t stream);

}  // namespace dist_moe::kernels
