#include "reference/routing.h"

#include <cstddef>

#include "dist_moe/error.h"

namespace dist_moe::reference {

int64_t RankRouting::num_valid_rows() const {
  int64_t n = 0;
  for (int64_t c : expert_counts) n += c;
  return n;
}

void validate_expert_ids(const std::vector<std::vector<int32_t>>& ids_per_rank, int64_t top_k,
                         int64_t num_experts) {
  DMOE_CHECK_ARG(top_k >= 1, "top_k must be >= 1, got ", top_k);
  for (std::size_t r = 0; r < ids_per_rank.size(); ++r) {
    const auto& ids = ids_per_rank[r];
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const int64_t id = ids[i];
      if (id < -1 || id >= num_experts) {
        detail::fail(ErrorCode::kInvalidValue, "DistMoE expert ID is outside [-1, num_experts): rank ", r,
                     " token ", static_cast<int64_t>(i) / top_k, " k ", static_cast<int64_t>(i) % top_k,
                     " has id ", id, " with num_experts=", num_experts);
      }
    }
  }
}

std::vector<RankRouting> build_routing(const std::vector<std::vector<int32_t>>& ids_per_rank,
                                       int64_t top_k, int64_t num_experts, int64_t row_alignment,
                                       std::optional<int64_t> receive_capacity_rows) {
  const int64_t R = static_cast<int64_t>(ids_per_rank.size());
  DMOE_CHECK_ARG(R >= 1, "routing needs at least one rank");
  DMOE_CHECK_ARG(top_k >= 1, "top_k must be >= 1, got ", top_k);
  DMOE_CHECK_ARG(num_experts >= 1 && num_experts % R == 0, "num_experts=", num_experts,
                 " must be a positive multiple of the rank count ", R);
  DMOE_CHECK_ARG(row_alignment >= 1, "row_alignment must be >= 1, got ", row_alignment);
  if (receive_capacity_rows) {
    DMOE_CHECK_ARG(*receive_capacity_rows >= 0, "receive_capacity_rows must be >= 0, got ",
                   *receive_capacity_rows);
  }
  for (int64_t r = 0; r < R; ++r) {
    const auto n = static_cast<int64_t>(ids_per_rank[static_cast<std::size_t>(r)].size());
    DMOE_CHECK_ARG(n % top_k == 0, "topk_expert_ids_TK of rank ", r, " has ", n,
                   " entries, not a multiple of top_k=", top_k);
  }

  // 1. Publication: each rank's ids are checked as they are published (validate_expert_ids).
  validate_expert_ids(ids_per_rank, top_k, num_experts);

  // 2. Routing phase 1: every rank reads every peer's token-count header.
  const int64_t T = static_cast<int64_t>(ids_per_rank[0].size()) / top_k;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t Tr = static_cast<int64_t>(ids_per_rank[static_cast<std::size_t>(r)].size()) / top_k;
    if (Tr != T) {
      detail::fail(ErrorCode::kRuntime, "DistMoE token count mismatch: rank ", r, " has T=", Tr,
                   " but rank 0 has T=", T, " (every rank must pass the same T in one call)");
    }
  }
  DMOE_CHECK_ARG(T >= 1, "local input token count must be >= 1, got ", T);

  const int64_t E_local = num_experts / R;
  std::vector<RankRouting> out(static_cast<std::size_t>(R));

  // 3. Per-rank metadata for its own experts, from all ranks' ids.
  for (int64_t r = 0; r < R; ++r) {
    RankRouting& rt = out[static_cast<std::size_t>(r)];
    rt.rank = r;
    rt.num_ranks = R;
    rt.num_local_experts = E_local;
    rt.top_k = top_k;
    rt.tokens = T;
    rt.row_alignment = row_alignment;
    rt.expert_counts.assign(static_cast<std::size_t>(E_local), 0);
    rt.expert_padded_counts.assign(static_cast<std::size_t>(E_local), 0);
    rt.expert_offsets.assign(static_cast<std::size_t>(E_local + 1), 0);
    rt.recv_rows_from_rank.assign(static_cast<std::size_t>(R), 0);
    rt.send_rows_to_rank.assign(static_cast<std::size_t>(R), 0);
    rt.route_location_TK.assign(static_cast<std::size_t>(T * top_k), RouteLocation{});

    const int64_t first = r * E_local;
    for (int64_t le = 0; le < E_local; ++le) {
      // Expert-major: expert, then source rank, then token, then k.
      const int64_t row_begin = static_cast<int64_t>(rt.rows.size());
      for (int64_t src = 0; src < R; ++src) {
        const auto& ids = ids_per_rank[static_cast<std::size_t>(src)];
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t k = 0; k < top_k; ++k) {
            if (ids[static_cast<std::size_t>(t * top_k + k)] != first + le) continue;
            rt.rows.push_back(RouteRef{static_cast<int32_t>(le), static_cast<int32_t>(src),
                                       static_cast<int32_t>(t), static_cast<int32_t>(k)});
            rt.recv_rows_from_rank[static_cast<std::size_t>(src)] += 1;
          }
        }
      }
      const int64_t count = static_cast<int64_t>(rt.rows.size()) - row_begin;
      const int64_t padded = (count + row_alignment - 1) / row_alignment * row_alignment;
      for (int64_t i = count; i < padded; ++i) rt.rows.push_back(RouteRef{static_cast<int32_t>(le), -1, -1, -1});
      rt.expert_counts[static_cast<std::size_t>(le)] = count;
      rt.expert_padded_counts[static_cast<std::size_t>(le)] = padded;
      rt.expert_offsets[static_cast<std::size_t>(le + 1)] = row_begin + padded;
    }
    DMOE_ASSERT(static_cast<int64_t>(rt.rows.size()) == rt.num_rows());

    // 4. Capacity check once the padded counts are known (the routing-prefix trap).
    if (receive_capacity_rows && rt.required_receive_rows() > *receive_capacity_rows) {
      detail::fail(ErrorCode::kRuntime, "DistMoE scratch capacity exceeded on rank ", r,
                   ": required_receive_rows: ", rt.required_receive_rows(),
                   ", total_scratch_capacity_rows: ", *receive_capacity_rows);
    }
  }

  // Owner-side views: where each of a rank's routes is computed, and per-destination counts.
  for (int64_t dst = 0; dst < R; ++dst) {
    const RankRouting& rt = out[static_cast<std::size_t>(dst)];
    for (int64_t m = 0; m < rt.num_rows(); ++m) {
      const RouteRef& ref = rt.rows[static_cast<std::size_t>(m)];
      if (ref.is_padding()) continue;
      RankRouting& owner = out[static_cast<std::size_t>(ref.src_rank)];
      owner.route_location_TK[static_cast<std::size_t>(ref.token * top_k + ref.k)] =
          RouteLocation{static_cast<int32_t>(dst), m};
      owner.send_rows_to_rank[static_cast<std::size_t>(dst)] += 1;
    }
  }
  return out;
}

}  // namespace dist_moe::reference
