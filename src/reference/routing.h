// Routing metadata of the expert-parallel pipeline, as every rank builds it from all ranks' ids.
//
// Rank r owns global experts [r*E_local, (r+1)*E_local). Its expert-major row buffer lists, for
// local expert 0, 1, ..., E_local-1 in turn: every route (src rank, token, k) whose id is that
// expert, ordered by source rank, then token, then k; then padding rows up to the next multiple
// of `row_alignment` (each expert padded independently). Routes with id -1 appear nowhere.
//
// A valid row's result (h3) goes to its owner `src_rank`, slot `token*K + k` of the owner's
// [T*K, D] combine buffer (the GPU's scatter_ptrs); the backward gathers grad_h3 from that slot
// and scatters the row's input gradient to the same slot of the owner's [T*K, D] dispatch buffer.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace dist_moe::reference {

// One row of a rank's expert-major buffer.
struct RouteRef {
  int32_t local_expert = 0;  // expert block the row belongs to (also for padding rows)
  int32_t src_rank = -1;     // -1 marks a padding row
  int32_t token = -1;
  int32_t k = -1;
  bool is_padding() const { return src_rank < 0; }
};

// Where one route (token, k) of an owner rank is computed: rank `dst_rank`, row `row` of its
// expert-major buffer; dst_rank == -1 for -1 routes.
struct RouteLocation {
  int32_t dst_rank = -1;
  int64_t row = -1;
};

struct RankRouting {
  int64_t rank = 0;
  int64_t num_ranks = 1;
  int64_t num_local_experts = 0;
  int64_t top_k = 0;
  int64_t tokens = 0;  // T (equal on all ranks)
  int64_t row_alignment = 1;

  std::vector<int64_t> expert_counts;         // [E_local] valid rows per local expert
  std::vector<int64_t> expert_padded_counts;  // [E_local] rounded up to row_alignment
  std::vector<int64_t> expert_offsets;        // [E_local + 1] exclusive prefix of padded counts
  std::vector<RouteRef> rows;                 // [M] expert-major row table, M = expert_offsets.back()
  std::vector<int64_t> recv_rows_from_rank;   // [R] valid rows this rank receives from each source
  std::vector<int64_t> send_rows_to_rank;     // [R] valid routes of this rank's tokens per expert owner
  std::vector<RouteLocation> route_location_TK;  // [T*K] owner side: where each own route is computed

  int64_t num_rows() const { return expert_offsets.empty() ? 0 : expert_offsets.back(); }  // M (padded)
  int64_t num_valid_rows() const;          // sum of expert_counts
  int64_t required_receive_rows() const { return num_rows(); }
  // Global expert id of a local expert.
  int64_t global_expert(int64_t local_expert) const { return rank * num_local_experts + local_expert; }
};

// Builds every rank's routing from all ranks' ids (ids_per_rank[r] holds T*K ids, row-major).
// Errors (dist_moe::Error), in the order the device would meet them:
//   kInvalidValue  "DistMoE expert ID is outside [-1, num_experts)..." naming rank, token, k, id
//                  (the device trap of validate_expert_ids; the oracle always checks, since it
//                  cannot define a result for such ids);
//   kRuntime       "DistMoE token count mismatch..." when T differs between ranks (device trap);
//   kInvalidValue  for T == 0, K < 1, E % R != 0, row_alignment < 1, or an ids size that is not a
//                  multiple of K.
// `receive_capacity_rows`, when set, is checked per rank after padding: kRuntime
//   "DistMoE scratch capacity exceeded on rank r: required_receive_rows: X,
//    total_scratch_capacity_rows: Y".
std::vector<RankRouting> build_routing(const std::vector<std::vector<int32_t>>& ids_per_rank,
                                       int64_t top_k, int64_t num_experts, int64_t row_alignment,
                                       std::optional<int64_t> receive_capacity_rows = std::nullopt);

// Just the ids check of build_routing (all ranks; the first offending route is reported).
void validate_expert_ids(const std::vector<std::vector<int32_t>>& ids_per_rank, int64_t top_k,
                         int64_t num_experts);

}  // namespace dist_moe::reference
