// The device activation planner (BF16): where each layer's activations live, decided on the
// device from every rank's received-row counts, so all ranks agree and no host read is needed.
//
// The activation buffer of one context (bytes, 128-aligned offsets):
//
//   [ slot 0 | slot 1 | ... | slot N-1 | ............ scratch ............ ]
//   0                                  N*slot_bytes                        buffer_bytes
//   each slot grows up (LIFO by layer)                  scratch grows down from the top
//
// Forward, per layer, in slot s = selector % N (upstream reference §2.3):
//   alloc[r]        = A(recv[r]*D*2) + A(recv[r]*2F*2) + A(T*K*D*2)      x_gathered, h1, h3
//   layers_after    = (depth - 1) - layer_id[s]
//   need_recompute  = max_r(saved[s][r] + alloc[r]) + layers_after * A(T*D*2) > slot_bytes
//   recompute       : slot gets x (A(T*D*2)); scratch holds h2, h1, x_gathered (top down)
//   saved           : slot gets x_gathered, h1, h3 contiguously; scratch holds h2
// The decision reads every rank's counts with identical accounting, so it is the same on every
// rank: the conditional barriers in backward match. Backward pops the layer using the snapshot
// the forward emitted (never the live selector), so a later slot selection cannot redirect it.
// A forward whose saved state autograd discards (the first forward of an activation checkpoint,
// whose recompute runs the layer again and pushes the entry backward pops) plans scratch-only: it
// takes no slot space, so checkpointed layers leave no entry behind. Should such a state reach a
// backward anyway, it recomputes from the caller's x (no slot x save exists).
//
// These functions run on one device thread (the plan kernel) and on the host (tests, oracle).
#pragma once

#include <cstdint>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::planner {

inline constexpr int64_t kAlign = 128;
DMOE_HOST_DEVICE int64_t align128(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// Static geometry of the activation buffer (host-chosen, from the memory plan).
struct BufferGeometry {
  int64_t num_slots = 0;     // N; 0 for inference contexts
  int64_t slot_bytes = 0;
  int64_t buffer_bytes = 0;  // slots + device scratch (+ VMM host scratch)
};

// Shape of one call. T may differ between calls; D, F, K, R are fixed per context.
struct CallShape {
  int64_t T = 0, D = 0, F = 0, K = 0;
  int64_t ep_size = 1;  // R
  int64_t rank = 0;
};

// Mutable planner state in device memory (identical on all ranks by construction).
struct PlannerState {
  int64_t* saved_bytes_NR;    // [N*R] bytes rank r keeps in slot s
  int64_t* layer_id_N;        // [N] layers saved in slot s and not yet popped
  int64_t* peak_min_free_N1;  // [N+1] lowest free bytes seen: per slot, then scratch
};

// What the forward emits for backward: the layer's snapshot (an int64 array of kLayerStateFixed + R).
enum LayerStateField : int {
  kX = 0,           // saved layer input (recompute) or -1
  kXGathered = 1,   // offsets into the activation buffer; -1 when absent
  kH1 = 2,
  kH2 = 3,
  kH3 = 4,
  kSlot = 5,        // slot the layer was pushed to, -1 for a scratch-only call
  kNeedRecompute = 6,
  kTokens = 7,      // T of the forward call
  kRecvRows = 8,    // then R entries: received rows of every rank
};
inline constexpr int kLayerStateFixed = 8;
DMOE_HOST_DEVICE int layer_state_size(int64_t ep_size) { return kLayerStateFixed + static_cast<int>(ep_size); }

enum class PlanStatus : int {
  kOk = 0,
  kSlotOverflow,      // "OOM: activation slot overflow" (second live forward beyond the slot depth)
  kScratchOverflow,   // "OOM: scratch overflow into activation slots"
  kLayerOrder,        // backward popped a layer that is not the top of its slot
};

DMOE_HOST_DEVICE int64_t x_bytes(const CallShape& c) { return align128(c.T * c.D * 2); }
DMOE_HOST_DEVICE int64_t xg_bytes(const CallShape& c, int64_t rows) { return align128(rows * c.D * 2); }
DMOE_HOST_DEVICE int64_t h1_bytes(const CallShape& c, int64_t rows) { return align128(rows * 2 * c.F * 2); }
DMOE_HOST_DEVICE int64_t h2_bytes(const CallShape& c, int64_t rows) { return align128(rows * c.F * 2); }
DMOE_HOST_DEVICE int64_t h3_bytes(const CallShape& c) { return align128(c.T * c.K * c.D * 2); }
DMOE_HOST_DEVICE int64_t saved_full_bytes(const CallShape& c, int64_t rows) {
  return xg_bytes(c, rows) + h1_bytes(c, rows) + h3_bytes(c);
}

DMOE_HOST_DEVICE void note_peak(int64_t* peak, int64_t free_bytes) {
  if (free_bytes < *peak) *peak = free_bytes;
}

// Plans the forward of one layer. `recv_R` holds every rank's received rows for this call.
// `scratch_only` (inference, or a training context under no-grad) puts everything in scratch,
// reports need_recompute and leaves slot state untouched. Writes the snapshot to `layer_out`.
DMOE_HOST_DEVICE PlanStatus plan_bf16_forward(const BufferGeometry& g, const CallShape& c, PlannerState st,
                                              int64_t slot_selector, int64_t depth, const int32_t* recv_R,
                                              bool scratch_only, int64_t* layer_out) {
  const int64_t R = c.ep_size;
  const int64_t rows = recv_R[c.rank];
  const int64_t scratch_floor = g.num_slots * g.slot_bytes;
  const int64_t top = g.buffer_bytes;
  for (int i = 0; i < kLayerStateFixed; ++i) layer_out[i] = -1;
  layer_out[kTokens] = c.T;
  for (int64_t r = 0; r < R; ++r) layer_out[kRecvRows + r] = recv_R[r];

  const bool train = !scratch_only && g.num_slots > 0;
  const int64_t s = train ? slot_selector % g.num_slots : -1;
  bool recompute = true;
  if (train) {
    const int64_t layers_after = (depth - 1) - st.layer_id_N[s];
    if (layers_after < 0) return PlanStatus::kSlotOverflow;
    int64_t need = 0;
    for (int64_t r = 0; r < R; ++r) {
      const int64_t v = st.saved_bytes_NR[s * R + r] + saved_full_bytes(c, recv_R[r]);
      need = v > need ? v : need;
    }
    recompute = need + layers_after * x_bytes(c) > g.slot_bytes;
  }

  // Scratch, top down: h2 always; h1 and x_gathered too when they are not saved in the slot.
  int64_t low = top - h2_bytes(c, rows);
  layer_out[kH2] = low;
  if (recompute) {
    low -= h1_bytes(c, rows);
    layer_out[kH1] = low;
    low -= xg_bytes(c, rows);
    layer_out[kXGathered] = low;
  }
  if (low < scratch_floor) return PlanStatus::kScratchOverflow;
  note_peak(&st.peak_min_free_N1[g.num_slots], low - scratch_floor);
  layer_out[kNeedRecompute] = recompute ? 1 : 0;
  if (!train) return PlanStatus::kOk;

  // Push onto slot s (the same accounting for every rank; this rank's bytes give the offsets).
  const int64_t slot_start = s * g.slot_bytes;
  const int64_t free_start = slot_start + st.saved_bytes_NR[s * R + c.rank];
  if (recompute) {
    layer_out[kX] = free_start;
  } else {
    layer_out[kXGathered] = free_start;
    layer_out[kH1] = free_start + xg_bytes(c, rows);
    layer_out[kH3] = layer_out[kH1] + h1_bytes(c, rows);
  }
  int64_t fullest = 0;
  for (int64_t r = 0; r < R; ++r) {
    int64_t& saved = st.saved_bytes_NR[s * R + r];
    saved += recompute ? x_bytes(c) : saved_full_bytes(c, recv_R[r]);
    fullest = saved > fullest ? saved : fullest;
  }
  if (fullest > g.slot_bytes) return PlanStatus::kSlotOverflow;
  note_peak(&st.peak_min_free_N1[s], g.slot_bytes - fullest);
  st.layer_id_N[s] += 1;
  layer_out[kSlot] = s;
  return PlanStatus::kOk;
}

// Offsets of the backward temporaries of one layer (all in scratch).
struct Bf16BackwardOffsets {
  int64_t grad_h1, h2, grad_h2, grad_h3_gathered;
  int64_t h1, x_gathered;  // recomputed into scratch, or the forward's slot offsets
  int64_t x;               // where the recompute reads the layer input: the slot's x save, or the caller's x
};

// Plans the backward of the layer whose forward snapshot is `layer`, then pops it from its slot.
// `caller_x` is the offset (from the buffer base; may be negative) of the backward caller's x_TD: a
// recomputing layer whose forward kept no x save (a scratch-only plan with saved state, see
// ExecutionOptions::recompute_from_inputs) recomputes from it.
DMOE_HOST_DEVICE PlanStatus plan_bf16_backward(const BufferGeometry& g, const CallShape& c, PlannerState st,
                                               const int64_t* layer, int64_t caller_x, Bf16BackwardOffsets* out) {
  const int64_t R = c.ep_size;
  const int64_t rows = layer[kRecvRows + c.rank];
  CallShape fc = c;
  fc.T = layer[kTokens];
  const bool recompute = layer[kNeedRecompute] != 0;
  const int64_t top = g.buffer_bytes;
  const int64_t scratch_floor = g.num_slots * g.slot_bytes;

  // grad_h1 at the top; h2 shares its upper part (h2 is dead once W2 WGRAD has run, before
  // SwiGLU backward writes grad_h1); grad_h2 below; grad_h3_gathered in grad_h1's lower part when
  // it fits (D <= F), else below grad_h2.
  out->grad_h1 = top - h1_bytes(fc, rows);
  out->h2 = top - h2_bytes(fc, rows);
  out->grad_h2 = out->grad_h1 - h2_bytes(fc, rows);
  int64_t low = out->grad_h2;
  if (xg_bytes(fc, rows) <= out->h2 - out->grad_h1) {
    out->grad_h3_gathered = out->grad_h1;
  } else {
    low -= xg_bytes(fc, rows);
    out->grad_h3_gathered = low;
  }
  if (recompute) {
    low -= h1_bytes(fc, rows);
    out->h1 = low;
    low -= xg_bytes(fc, rows);
    out->x_gathered = low;
  } else {
    out->h1 = layer[kH1];
    out->x_gathered = layer[kXGathered];
  }
  out->x = layer[kX] >= 0 ? layer[kX] : caller_x;
  if (low < scratch_floor) return PlanStatus::kScratchOverflow;
  note_peak(&st.peak_min_free_N1[g.num_slots], low - scratch_floor);

  const int64_t s = layer[kSlot];
  if (s < 0) return PlanStatus::kOk;  // scratch-only forward: nothing to pop
  for (int64_t r = 0; r < R; ++r)
    st.saved_bytes_NR[s * R + r] -= recompute ? x_bytes(fc) : saved_full_bytes(fc, layer[kRecvRows + r]);
  const int64_t first = recompute ? layer[kX] : layer[kXGathered];
  if (st.layer_id_N[s] <= 0 || st.saved_bytes_NR[s * R + c.rank] != first - s * g.slot_bytes)
    return PlanStatus::kLayerOrder;
  st.layer_id_N[s] -= 1;
  return PlanStatus::kOk;
}

// Initial state: empty slots, all free.
DMOE_HOST_DEVICE void reset_planner(const BufferGeometry& g, int64_t ep_size, PlannerState st) {
  for (int64_t i = 0; i < g.num_slots * ep_size; ++i) st.saved_bytes_NR[i] = 0;
  for (int64_t s = 0; s < g.num_slots; ++s) {
    st.layer_id_N[s] = 0;
    st.peak_min_free_N1[s] = g.slot_bytes;
  }
  st.peak_min_free_N1[g.num_slots] = g.buffer_bytes - g.num_slots * g.slot_bytes;
}

}  // namespace dist_moe::planner
