#include "kernels/planner.h"

#include <cstdio>

#include "dist_moe/check.h"

namespace dist_moe::kernels {
namespace {

__device__ void report_and_trap(planner::PlanStatus s, const planner::CallShape& c, const char* phase) {
  const char* what = s == planner::PlanStatus::kSlotOverflow      ? "OOM: activation slot overflow"
                     : s == planner::PlanStatus::kScratchOverflow ? "OOM: scratch overflow into activation slots"
                                                                  : "backward popped a layer out of LIFO order";
  printf("DistMoE activation planner (%s) on rank %lld: %s\n", phase, static_cast<long long>(c.rank), what);
  __trap();
}

constexpr int kMaxPlannerRanks = 1024;

__global__ void plan_forward_kernel(planner::BufferGeometry g, planner::CallShape c, planner::PlannerState st,
                                    const int64_t* slot_id_1, int64_t depth, const int32_t* recv_rows_R,
                                    const int32_t* own_rows_1, bool scratch_only, bool mxfp8,
                                    planner::Mxfp8Homes homes, int64_t* out) {
  int32_t rows[kMaxPlannerRanks];  // every rank's rows; a scratch-only call knows only its own
  for (int64_t r = 0; r < c.ep_size; ++r) rows[r] = recv_rows_R ? recv_rows_R[r] : 0;
  if (!recv_rows_R) rows[c.rank] = *own_rows_1;
  const int64_t selector = slot_id_1 ? *slot_id_1 : 0;
  const planner::PlanStatus s =
      mxfp8 ? planner::plan_mxfp8_forward(g, c, st, selector, depth, rows, scratch_only, homes, out)
            : planner::plan_bf16_forward(g, c, st, selector, depth, rows, scratch_only, out);
  if (s == planner::PlanStatus::kSlotOverflow) {  // say which slot, how full, and why
    const int64_t slot = selector % g.num_slots;
    printf("DistMoE activation planner (forward) on rank %lld: OOM: activation slot overflow: slot %lld holds %lld "
           "live layer(s) (num_moe_layers_in_slot=%lld) and %lld of its %lld bytes; this layer's input alone needs "
           "%lld more (a training forward whose backward never ran, or more layers than the slot was selected for)\n",
           static_cast<long long>(c.rank), static_cast<long long>(slot), static_cast<long long>(st.layer_id_N[slot]),
           static_cast<long long>(depth), static_cast<long long>(st.saved_bytes_NR[slot * c.ep_size + c.rank]),
           static_cast<long long>(g.slot_bytes), static_cast<long long>(planner::x_bytes(c)));
    __trap();
  }
  if (s != planner::PlanStatus::kOk) report_and_trap(s, c, "forward");
}

__global__ void plan_backward_kernel(planner::BufferGeometry g, planner::CallShape c, planner::PlannerState st,
                                     const int64_t* layer, int64_t caller_x, int64_t* out7) {
  planner::Bf16BackwardOffsets o{};
  const planner::PlanStatus s = planner::plan_bf16_backward(g, c, st, layer, caller_x, &o);
  if (s != planner::PlanStatus::kOk) report_and_trap(s, c, "backward");
  out7[0] = o.grad_h1;
  out7[1] = o.h2;
  out7[2] = o.grad_h2;
  out7[3] = o.grad_h3_gathered;
  out7[4] = o.h1;
  out7[5] = o.x_gathered;
  out7[6] = o.x;
}

__global__ void plan_mxfp8_backward_kernel(planner::BufferGeometry g, planner::CallShape c, planner::PlannerState st,
                                           const int64_t* layer, int64_t caller_x, planner::Mxfp8Homes homes,
                                           int64_t* x_out) {
  const planner::PlanStatus s = planner::plan_mxfp8_backward(g, c, st, layer, caller_x, homes, x_out);
  if (s != planner::PlanStatus::kOk) report_and_trap(s, c, "backward");
}

__global__ void reset_planner_kernel(planner::BufferGeometry g, int64_t ep_size, planner::PlannerState st) {
  planner::reset_planner(g, ep_size, st);
}

}  // namespace

void plan_forward(const planner::BufferGeometry& g, const planner::CallShape& c, planner::PlannerState state,
                  const int64_t* slot_id_1, int64_t depth, const int32_t* recv_rows_R, const int32_t* own_rows_1,
                  bool scratch_only, int64_t* layer_state_out, cudaStream_t stream, const planner::Mxfp8Homes* mxfp8) {
  DMOE_CHECK_ARG(c.ep_size >= 1 && c.ep_size <= kMaxPlannerRanks, "planner supports 1..", kMaxPlannerRanks,
                 " ranks, got ", c.ep_size);
  DMOE_CHECK_ARG(recv_rows_R || (scratch_only && own_rows_1), "a saving forward plan needs every rank's rows");
  plan_forward_kernel<<<1, 1, 0, stream>>>(g, c, state, slot_id_1, depth, recv_rows_R, own_rows_1, scratch_only,
                                           mxfp8 != nullptr, mxfp8 ? *mxfp8 : planner::Mxfp8Homes{}, layer_state_out);
  DMOE_CUDA_CHECK_LAUNCH();
}

void plan_backward(const planner::BufferGeometry& g, const planner::CallShape& c, planner::PlannerState state,
                   const int64_t* layer_state, int64_t caller_x, int64_t* backward_offsets_7, cudaStream_t stream) {
  plan_backward_kernel<<<1, 1, 0, stream>>>(g, c, state, layer_state, caller_x, backward_offsets_7);
  DMOE_CUDA_CHECK_LAUNCH();
}

void plan_mxfp8_backward(const planner::BufferGeometry& g, const planner::CallShape& c, planner::PlannerState state,
                         const int64_t* layer_state, int64_t caller_x, const planner::Mxfp8Homes& homes,
                         int64_t* x_offset_1, cudaStream_t stream) {
  plan_mxfp8_backward_kernel<<<1, 1, 0, stream>>>(g, c, state, layer_state, caller_x, homes, x_offset_1);
  DMOE_CUDA_CHECK_LAUNCH();
}

void reset_planner(const planner::BufferGeometry& g, int64_t ep_size, planner::PlannerState state,
                   cudaStream_t stream) {
  reset_planner_kernel<<<1, 1, 0, stream>>>(g, ep_size, state);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::kernels
