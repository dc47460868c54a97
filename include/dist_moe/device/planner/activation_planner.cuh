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
#include "dist_moe/device/numeric/mxfp8.cuh"
#include "dist_moe/device/numeric/nvfp4.cuh"

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

// ---- the slot stack, shared by the BF16 and MXFP8 layers: `Saved` is the format's saved_full(c, rows) ----

struct Bf16Saved {
  DMOE_HOST_DEVICE int64_t operator()(const CallShape& c, int64_t rows) const { return saved_full_bytes(c, rows); }
};

// The snapshot's fixed fields unset, T and every rank's rows recorded.
DMOE_HOST_DEVICE void begin_layer_state(const CallShape& c, const int32_t* recv_R, int64_t* layer_out) {
  for (int i = 0; i < kLayerStateFixed; ++i) layer_out[i] = -1;
  layer_out[kTokens] = c.T;
  for (int64_t r = 0; r < c.ep_size; ++r) layer_out[kRecvRows + r] = recv_R[r];
}

// Whether a layer pushed to slot s recomputes: the fullest rank's saved bytes plus this layer's full
// save, plus an x save for every layer still to come in the slot, exceed the slot.
template <class Saved>
DMOE_HOST_DEVICE PlanStatus decide_recompute(const BufferGeometry& g, const CallShape& c, PlannerState st, int64_t s,
                                             int64_t depth, const int32_t* recv_R, Saved saved_full, bool* recompute) {
  const int64_t R = c.ep_size;
  const int64_t layers_after = (depth - 1) - st.layer_id_N[s];
  if (layers_after < 0) return PlanStatus::kSlotOverflow;
  int64_t need = 0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t v = st.saved_bytes_NR[s * R + r] + saved_full(c, recv_R[r]);
    need = v > need ? v : need;
  }
  *recompute = need + layers_after * x_bytes(c) > g.slot_bytes;
  return PlanStatus::kOk;
}

// Pushes the layer onto slot s (the same accounting for every rank).
template <class Saved>
DMOE_HOST_DEVICE PlanStatus push_layer(const BufferGeometry& g, const CallShape& c, PlannerState st, int64_t s,
                                       bool recompute, const int32_t* recv_R, Saved saved_full, int64_t* layer_out) {
  const int64_t R = c.ep_size;
  int64_t fullest = 0;
  for (int64_t r = 0; r < R; ++r) {
    int64_t& saved = st.saved_bytes_NR[s * R + r];
    saved += recompute ? x_bytes(c) : saved_full(c, recv_R[r]);
    fullest = saved > fullest ? saved : fullest;
  }
  if (fullest > g.slot_bytes) return PlanStatus::kSlotOverflow;
  note_peak(&st.peak_min_free_N1[s], g.slot_bytes - fullest);
  st.layer_id_N[s] += 1;
  layer_out[kSlot] = s;
  return PlanStatus::kOk;
}

// Pops the layer whose snapshot is `layer` from its slot; `first` is its first saved byte (its x
// save, or its first saved operand). A layer that is not the slot's top is a kLayerOrder error.
template <class Saved>
DMOE_HOST_DEVICE PlanStatus pop_layer(const BufferGeometry& g, const CallShape& c, PlannerState st,
                                      const int64_t* layer, int64_t first, Saved saved_full) {
  const int64_t R = c.ep_size;
  const int64_t s = layer[kSlot];
  if (s < 0) return PlanStatus::kOk;  // scratch-only forward: nothing to pop
  CallShape fc = c;
  fc.T = layer[kTokens];
  const bool recompute = layer[kNeedRecompute] != 0;
  for (int64_t r = 0; r < R; ++r)
    st.saved_bytes_NR[s * R + r] -= recompute ? x_bytes(fc) : saved_full(fc, layer[kRecvRows + r]);
  if (st.layer_id_N[s] <= 0 || st.saved_bytes_NR[s * R + c.rank] != first - s * g.slot_bytes)
    return PlanStatus::kLayerOrder;
  st.layer_id_N[s] -= 1;
  return PlanStatus::kOk;
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
  begin_layer_state(c, recv_R, layer_out);
  const bool train = !scratch_only && g.num_slots > 0;
  const int64_t s = train ? slot_selector % g.num_slots : -1;
  bool recompute = true;
  if (train) {
    const PlanStatus d = decide_recompute(g, c, st, s, depth, recv_R, Bf16Saved{}, &recompute);
    if (d != PlanStatus::kOk) return d;
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
  return push_layer(g, c, st, s, recompute, recv_R, Bf16Saved{}, layer_out);
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
  return pop_layer(g, c, st, layer, recompute ? layer[kX] : layer[kXGathered], Bf16Saved{});
}

// ---- block-scaled (MXFP8) layers ------------------------------------------------------------------
// The slot keeps what upstream's staged MXFP8 layer keeps (memory_plan.cpp saved_full): the WGRAD
// column bundles of x_gathered and h2, BF16 h1 and h3, contiguously:
//   alloc[r] = col(recv[r], D) + A(recv[r]*2F*2) + col(recv[r], F) + A(T*K*D*2)
// with the compact column bundle col(R, C) = A(C*R) + A(C*R/32) (E4M3 [C, R], then E8M0 [C, R/32]:
// numeric::mxfp8_compact_columns_bytes).
// Scratch has a static layout sized at the receive capacity (Mxfp8Scratch, host-computed): a layer
// that recomputes keeps its x_col, h1 and h2_col at their scratch homes, which the forward writes
// into the snapshot in place of slot offsets; the backward then reads the operands from wherever
// the snapshot says, on both paths. The snapshot fields: kXGathered holds x_col, kH2 holds h2_col.
inline constexpr int kXCol = kXGathered;
inline constexpr int kH2Col = kH2;

DMOE_HOST_DEVICE int64_t mxfp8_saved_full_bytes(const CallShape& c, int64_t rows) {
  return numeric::mxfp8_compact_columns_bytes(c.D, rows) + h1_bytes(c, rows) +
         numeric::mxfp8_compact_columns_bytes(c.F, rows) + h3_bytes(c);
}
struct Mxfp8Saved {
  DMOE_HOST_DEVICE int64_t operator()(const CallShape& c, int64_t rows) const { return mxfp8_saved_full_bytes(c, rows); }
};

// Scratch homes of a recomputing layer's forward operands (offsets into the activation buffer), and
// the static scratch layout's lowest byte: every call of the layer addresses the layout down to it
// (the row bundle region lies there), which is what the scratch peak records.
struct Mxfp8Homes {
  int64_t x_col = -1, h1 = -1, h2_col = -1;
  int64_t bottom = -1;
};

// Row bundle of [rows, C] (1x32 blocks along C: the FPROP / DGRAD A operand): E4M3 [rows, C], then
// its E8M0 scales [rows, C/32] at align128(rows * C); upstream reserves 4x the scale bytes.
DMOE_HOST_DEVICE int64_t mxfp8_row_bytes(int64_t rows, int64_t C) {
  return align128(rows * C) + align128(rows * 4 * (C / 32));
}

// FP8 blockwise's row bundle of [rows, C] (the FP8-blockwise layer's FPROP / DGRAD A operand):
// E4M3 [rows, C], then its FP32 scales k-block-major [C/128, ld] (ld = rows rounded up to 4: the
// GEMMs' layout) at align128(rows * C). About a quarter of MXFP8's reserved scale bytes, so the
// MXFP8 layouts hold it (the context checks; tests/cpu/test_activation_planner.cpp too).
DMOE_HOST_DEVICE int64_t fp8_blockwise_scale_ld(int64_t rows) { return (rows + 3) / 4 * 4; }
DMOE_HOST_DEVICE int64_t fp8_blockwise_row_bytes(int64_t rows, int64_t C) {
  return align128(rows * C) + align128(C / 128 * fp8_blockwise_scale_ld(rows) * 4);
}

// The static scratch of an MXFP8 context at `cap` received rows (the routing capacity), as offsets
// into the activation buffer, top down from `top`. Training (upstream's staged recompute peak,
// memory_plan.cpp training_scratch_peak, term for term), low to high:
//   row | h1 | grad_h2 | h2_col | grad_h3_col | dxy_col | x_col
// row: one row bundle at a time (x, h2, grad_h3, dxy); h1 / h2_col / x_col: a recomputing layer's
// homes. Transients with no term of their own reuse dead regions: BF16 h2 (forward) in grad_h2;
// BF16 dxy (SwiGLU backward) in h1's home; the WGRAD operands dequantized to BF16 rows from the
// column bundles, [grad_h3 | h2] over row..grad_h2 (after W13 DGRAD, when all three are dead) and
// [dxy | x] over row..grad_h3_col. Inference: row | h1 (BF16 h2 in h1's region; h1 is not kept).
struct Mxfp8Scratch {
  bool inference = false;
  int64_t bottom = 0;  // lowest byte used: top - bottom is the scratch plan_memory sizes
  int64_t row = 0, h1 = 0, grad_h2 = 0, h2_col = 0, grad_h3_col = 0, dxy_col = 0, x_col = 0;
  int64_t w2_views_end = 0, w13_views_end = 0;  // where the dequantized WGRAD operands must end
  // NVFP4 with expanded tokens (memory_plan.h nvfp4_expands_token_rows): FP16 token rows
  // [cap, max(D, F)] (x, then h2), then their FP32 token_scale_inv [cap] at expanded_scales; 0: none.
  int64_t expanded = 0, expanded_scales = 0;
  // Where the forward's BF16 h2 goes: grad_h2's region (training), h1's (inference: h1 not kept).
  DMOE_HOST_DEVICE int64_t h2_bf16() const { return inference ? h1 : grad_h2; }
  // A recomputing layer's homes for its x_col, h1 and h2_col, and the layout's bottom.
  DMOE_HOST_DEVICE Mxfp8Homes homes() const { return {x_col, h1, h2_col, bottom}; }
  // The Mega backward's dxy row bundle, written by the W2 DGRAD epilogue while grad_h3's row bundle
  // (in the row region) is still read: E4M3 [cap, 2F] over grad_h2's region (2 cap F bytes: exactly
  // it), the code words [2F/128, cap] in the row region's reserved scale bytes after grad_h3's codes
  // (fused_dxy_fits checks; no byte beyond the staged plan).
  DMOE_HOST_DEVICE int64_t fused_dxy_codes(int64_t cap, int64_t D) const {
    return row + align128(cap * D) + align128(cap * D / 32);
  }
  DMOE_HOST_DEVICE bool fused_dxy_fits(int64_t cap, int64_t D, int64_t F) const {
    return !inference && fused_dxy_codes(cap, D) + align128(cap * 2 * F / 32) <= h1;
  }
};
// The tokens of the MXFP8 WGRAD's operands at shared scales (quant::mxfp8_columns_to_fp8_blockwise):
// every expert's rows rounded up to 128 where routing rounded them up to 32 within a capacity `cap`
// (a multiple of 128) -- at most 96 more rows per local expert, so cap + 96 L, whole 128s.
DMOE_HOST_DEVICE constexpr int64_t mxfp8_wgrad_capacity(int64_t cap, int64_t local_experts) {
  return cap + 96 * local_experts / 128 * 128;
}
DMOE_HOST_DEVICE Mxfp8Scratch mxfp8_scratch(int64_t cap, int64_t D, int64_t F, bool inference, int64_t top) {
  const int64_t r_x = mxfp8_row_bytes(cap, D), r_h2 = mxfp8_row_bytes(cap, F), r_dxy = mxfp8_row_bytes(cap, 2 * F);
  const int64_t h1 = align128(cap * 2 * F * 2);
  Mxfp8Scratch s;
  s.inference = inference;
  int64_t low = top;
  if (inference) {
    s.h1 = low -= h1;
    s.row = low -= (r_x > r_h2 ? r_x : r_h2);
    s.bottom = low;
    return s;
  }
  s.x_col = low -= numeric::mxfp8_compact_columns_bytes(D, cap);
  s.dxy_col = low -= numeric::mxfp8_compact_columns_bytes(2 * F, cap);
  s.grad_h3_col = low -= numeric::mxfp8_compact_columns_bytes(D, cap);
  s.h2_col = low -= numeric::mxfp8_compact_columns_bytes(F, cap);
  s.grad_h2 = low -= align128(cap * F * 2);
  s.h1 = low -= h1;
  const int64_t row = r_x > r_h2 ? r_x : r_h2;
  s.row = low -= (row > r_dxy ? row : r_dxy);
  s.bottom = low;
  s.w2_views_end = s.h2_col;
  s.w13_views_end = s.dxy_col;
  return s;
}

// NVFP4 (inference only) in the same struct: the packed rows (x, then h2: nvfp4_pipeline.cpp) under
// BF16 h1's region, which holds the BF16 h2 -- within upstream's NVFP4 plan (its row bundle is at
// least the packed rows). `expand`: the FP16 token rows and their scales below (plan_memory's
// expanded term, beyond upstream's plan).
DMOE_HOST_DEVICE Mxfp8Scratch nvfp4_scratch(int64_t cap, int64_t D, int64_t F, int64_t top, bool expand) {
  Mxfp8Scratch s;
  s.inference = true;
  s.h1 = top - align128(cap * 2 * F * 2);
  s.row = s.h1 - align128(cap * numeric::nvfp4_packed_row_bytes(D > F ? D : F));
  s.bottom = s.row;
  if (expand) {
    s.expanded_scales = s.row - align128(cap * 4);
    s.expanded = s.expanded_scales - align128(cap * (D > F ? D : F) * 2);
    s.bottom = s.expanded;
  }
  return s;
}

// The scratch peak of a block-scaled call: its static layout, down to homes.bottom (check_overflow
// reports it, the host-overflow part included when the layout reaches into a VMM host section).
DMOE_HOST_DEVICE void note_static_scratch(const BufferGeometry& g, PlannerState st, const Mxfp8Homes& homes) {
  note_peak(&st.peak_min_free_N1[g.num_slots], homes.bottom - g.num_slots * g.slot_bytes);
}

// Plans the forward of one MXFP8 layer (every block-scaled format's): plan_bf16_forward's decision
// with the MXFP8 accounting. Scratch is static (checked against the buffer when the context is
// built), so only the slot can overflow; the scratch peak records the static layout.
DMOE_HOST_DEVICE PlanStatus plan_mxfp8_forward(const BufferGeometry& g, const CallShape& c, PlannerState st,
                                               int64_t slot_selector, int64_t depth, const int32_t* recv_R,
                                               bool scratch_only, const Mxfp8Homes& homes, int64_t* layer_out) {
  begin_layer_state(c, recv_R, layer_out);
  note_static_scratch(g, st, homes);
  const bool train = !scratch_only && g.num_slots > 0;
  const int64_t s = train ? slot_selector % g.num_slots : -1;
  bool recompute = true;
  if (train) {
    const PlanStatus d = decide_recompute(g, c, st, s, depth, recv_R, Mxfp8Saved{}, &recompute);
    if (d != PlanStatus::kOk) return d;
  }
  layer_out[kNeedRecompute] = recompute ? 1 : 0;
  layer_out[kXCol] = homes.x_col;
  layer_out[kH1] = homes.h1;
  layer_out[kH2Col] = homes.h2_col;
  if (!train) return PlanStatus::kOk;

  const int64_t rows = recv_R[c.rank];
  const int64_t free_start = s * g.slot_bytes + st.saved_bytes_NR[s * c.ep_size + c.rank];
  if (recompute) {
    layer_out[kX] = free_start;
  } else {
    layer_out[kXCol] = free_start;
    layer_out[kH1] = layer_out[kXCol] + numeric::mxfp8_compact_columns_bytes(c.D, rows);
    layer_out[kH2Col] = layer_out[kH1] + h1_bytes(c, rows);
    layer_out[kH3] = layer_out[kH2Col] + numeric::mxfp8_compact_columns_bytes(c.F, rows);
  }
  return push_layer(g, c, st, s, recompute, recv_R, Mxfp8Saved{}, layer_out);
}

// Pops an MXFP8 layer from its slot (its operands stay where the snapshot says until the backward
// ends). Returns where the recompute reads the layer input: the slot's x save, or the caller's x.
// The backward's temporaries use the same static scratch (`homes`: its layout), noted as the forward's.
DMOE_HOST_DEVICE PlanStatus plan_mxfp8_backward(const BufferGeometry& g, const CallShape& c, PlannerState st,
                                                const int64_t* layer, int64_t caller_x, const Mxfp8Homes& homes,
                                                int64_t* x_out) {
  note_static_scratch(g, st, homes);
  *x_out = layer[kX] >= 0 ? layer[kX] : caller_x;
  return pop_layer(g, c, st, layer, layer[kNeedRecompute] != 0 ? layer[kX] : layer[kXCol], Mxfp8Saved{});
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
