// Multi-GPU tests of the expert-parallel communication layer (one process per GPU, started by
// dmoe_launch). Every rank builds the same global problem from a seed, runs the EP ops, and
// compares its own results with the CPU oracle (reference::build_routing, reference::topk_reduce)
// bit for bit: routing tables, gather/scatter addresses, dispatched rows, combined outputs.
//
//   dmoe_launch -n 2 -- dist_moe_comm_tests                 correctness suite (PASS/FAIL per case)
//   dmoe_launch -n 2 -- dist_moe_comm_tests --case overflow  a failure scenario (expected to trap)
// Failure scenarios: unequal_t, overflow, bad_id, timeout, and unequal_t_fused, overflow_fused,
// bad_id_fused (the same through the fused publish_route_dispatch kernel), scores_mismatch (one rank
// pushes its scores with the ids, the other does not, then a rank-partials combine). Each prints a marker
// before the call that must trap; scripts/gpu_check.sh (stage comm) runs them with launcher expectations.
//
// Every correctness case runs twice: as written (separate publish/route/dispatch, combine v1) and
// as "<name>+v2f" (fused publish_route_dispatch where the group supports it, combine v2). Cases
// "reduce_*" scatter the route results with a plain kernel through scatter_dst (the W2 epilogue's
// pattern) and call reduce(); cases "grad_gather_*" check grad_gather_src (owners write route rows
// into their dispatch window, EP barrier, gather) against the oracle's gather_route_rows.
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "testing/routing_patterns.h"
#include "dist_moe/check.h"
#include "dist_moe/comm.h"
#include "dist_moe/device/comm/memory.cuh"
#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/device/routing/routing_layout.cuh"
#include "testing/dist_env.h"
#include "reference/routing.h"
#include "reference/stages.h"

namespace {

using namespace dist_moe;
using namespace dist_moe::comm;
using dist_moe::testing::RoutingPattern;

int g_rank = 0;
int g_world = 1;

// dmoe_launch prefixes every line with "[rank r] "; the program itself does not.
#define LOG(...)              \
  do {                        \
    std::printf(__VA_ARGS__); \
    std::printf("\n");        \
    std::fflush(stdout);      \
  } while (0)

// ---- values -----------------------------------------------------------------------------------

DMOE_HOST_DEVICE uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

// Expert output of route (src, t, k), column col: a BF16 value in [-7.8, 7.8].
DMOE_HOST_DEVICE uint16_t y_value_bits(uint32_t seed, int src, int64_t t, int k, int64_t col) {
  uint32_t h = mix32(seed ^ 0xA5A5A5A5u);
  h = mix32(h ^ (static_cast<uint32_t>(src) * 0x9E3779B1u));
  h = mix32(h ^ (static_cast<uint32_t>(t) * 0x85EBCA77u));
  h = mix32(h ^ (static_cast<uint32_t>(k) * 0xC2B2AE3Du));
  h = mix32(h ^ static_cast<uint32_t>(col));
  const float v = static_cast<float>(static_cast<int>(h % 2001u) - 1000) / 128.0f;
  return numeric::float_to_bf16(v).bits;
}

constexpr uint16_t kNanBits = 0x7FC1;
constexpr uint8_t kSentinelByte = 0x5A;  // BF16 0x5A5A: a finite value never produced by the tests

// y[m] = the route's expert output for routed rows, NaN for padding rows (must never be read).
__global__ void fill_y_kernel(const RoutingTables tab, uint16_t* y, int D, int K, uint32_t seed) {
  const int32_t rows = *tab.total_rows;
  const int64_t n = static_cast<int64_t>(rows) * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / D, col = i - m * D;
    const int32_t code = tab.row_route[m];
    if (code < 0) {
      y[i] = kNanBits;
    } else {
      const int s = routing::decode_route_src(code);
      const int64_t ri = routing::decode_route_index(code);
      y[i] = y_value_bits(seed, s, ri / K, static_cast<int>(ri % K), col);
    }
  }
}

// The W2 epilogue's pattern: row m of y goes to scatter_dst[m] with plain 16-byte stores, then a
// system-scope release fence. Padding rows (null) are skipped.
__global__ void external_scatter_kernel(const RoutingTables tab, const int4* y, int D) {
  const int32_t rows = *tab.total_rows;
  const int vecs = D / 8;
  const int64_t n = static_cast<int64_t>(rows) * vecs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / vecs, v = i - m * vecs;
    int4* dst = static_cast<int4*>(tab.scatter_dst[m]);
    if (dst != nullptr) dst[v] = y[i];
  }
  __threadfence_system();
}

// Backward gradient of route (src, t, k), column col (the owner's grad_h3 slot values).
DMOE_HOST_DEVICE uint16_t grad_value_bits(uint32_t seed, int src, int64_t t, int k, int64_t col) {
  return y_value_bits(seed ^ 0x5EEDu, src + 101, t, k, col);
}

// Owner side: slot (t*K + k) of this rank's dispatch window = grad_value_bits(me, t, k, :) for every
// t < T and k < K (disabled routes too: they must never be gathered).
__global__ void fill_grad_slots_kernel(uint16_t* slots, int64_t T, int K, int D, int me, uint32_t seed) {
  const int64_t n = T * K * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t slot = i / D, col = i - slot * D;
    slots[i] = grad_value_bits(seed, me, slot / K, static_cast<int>(slot % K), col);
  }
}

// Expert side: out[m] = the row at grad_gather_src[m] (peer or local dispatch window), zero for
// padding rows; rows >= total_rows untouched.
__global__ void grad_gather_kernel(const RoutingTables tab, int4* out, int D) {
  const int32_t rows = *tab.total_rows;
  const int vecs = D / 8;
  const int64_t n = static_cast<int64_t>(rows) * vecs;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t m = i / vecs, v = i - m * vecs;
    const int4* src = static_cast<const int4*>(tab.grad_gather_src[m]);
    out[i] = src != nullptr ? ld_cg_v4(src + v) : make_int4(0, 0, 0, 0);
  }
}

// ---- the global problem of one call --------------------------------------------------------------

struct CallData {
  int64_t T = 0;
  std::vector<std::vector<int32_t>> ids;     // [R][T*K]
  std::vector<std::vector<uint16_t>> x;      // [R][T*D] BF16 bits
  std::vector<std::vector<float>> scores;    // [R][T*K] (BF16-representable when score_bf16)
  uint32_t y_seed = 0;
};

CallData make_call(RoutingPattern pat, int64_t T, int D, int K, int E, bool score_bf16, uint64_t seed) {
  CallData c;
  c.T = T;
  c.ids = dist_moe::testing::make_routing_ids(pat, g_world, T, K, E, seed);
  std::mt19937_64 rng(seed * 7919u + 17u);
  std::uniform_real_distribution<float> xv(-4.0f, 4.0f), sv(0.0f, 1.0f);
  c.x.resize(g_world);
  c.scores.resize(g_world);
  for (int r = 0; r < g_world; ++r) {
    c.x[r].resize(static_cast<size_t>(T * D));
    for (auto& b : c.x[r]) b = numeric::float_to_bf16(xv(rng)).bits;
    c.scores[r].resize(static_cast<size_t>(T * K));
    for (int64_t i = 0; i < T * K; ++i) {
      float s = c.ids[r][i] >= 0 ? sv(rng) : 0.0f;
      if (score_bf16) s = numeric::round_bf16(s);
      c.scores[r][i] = s;
    }
  }
  c.y_seed = static_cast<uint32_t>(mix32(static_cast<uint32_t>(seed) ^ 0x1234567u));
  return c;
}

// ---- one test case ----------------------------------------------------------------------------

struct CaseSpec {
  std::string name;
  int64_t T_max = 64;
  int D = 256;
  int K = 8;
  int L = 4;
  int align = 1;
  std::vector<RoutingPattern> patterns = {RoutingPattern::kUniform};  // per call (cycled)
  std::vector<int64_t> Ts = {64};                                     // per call
  std::vector<DispatchMode> dispatch_modes = {DispatchMode::kTokenOnce};  // per call (cycled)
  std::vector<CombineSync> combine_syncs = {CombineSync::kBarrier};       // per call (cycled)
  bool zero_fill = true;
  bool score_bf16 = false;
  bool ids_int64 = false;
  bool graph = false;  // capture one call and replay it for every entry of Ts (all equal)
  int num_sms = 0;
  // Op path per call (cycled; graphs use the first): fused publish_route_dispatch (only where the
  // group supports it) and the combine algorithm.
  std::vector<bool> fused = {false};
  std::vector<CombineAlgorithm> algos = {CombineAlgorithm::kV1};
  bool fused_dispatch_separately = false;  // fused publish + route, then dispatch() on its own
  bool push_scores = false;  // fused calls pass the scores (DispatchOptions::scores_TK) for the combine
  // Rank-partials combine in barrier mode: own partials summed in the reduction
  // (DMOE_COMBINE_OWN_PARTIALS=late, set around this case's combine calls).
  bool own_partials_late = false;
  bool external_scatter = false;           // scatter through scatter_dst + reduce() instead of combine()
  int reduce_warps = 0, signal_batch = 0, k_group = 0;  // CombineOptions v2 tuning (0: auto)
  int reduce_ctas = 0;                                   // CombineOptions::reduce_ctas (0: warp split)
};

struct Buffers {
  void* x = nullptr;
  void* ids = nullptr;
  void* scores = nullptr;
  void* xg = nullptr;
  void* y = nullptr;
  void* out = nullptr;
  // external_scatter cases: reduce() keeps the route rows at keep + keep_ctl[0] unless keep_ctl[1]
  // (device int64s, changed between graph replays); keep_skip is the host copy of this call's flag.
  void* keep = nullptr;
  int64_t* keep_ctl = nullptr;
  int64_t keep_skip = 0;
  ~Buffers() {
    for (void* p : {x, ids, scores, xg, y, out, keep, static_cast<void*>(keep_ctl)})
      if (p) cudaFree(p);
  }
};

// Byte offset of the kept route rows inside Buffers::keep (exercises KeepRoutes::offset).
constexpr int64_t kKeepOffset = 4096;

struct Checker {
  std::string where;
  int errors = 0;
  template <typename... A>
  void fail(const char* fmt, A... a) {
    if (errors < 8) {
      std::printf("FAIL %s: ", where.c_str());
      std::printf(fmt, a...);
      std::printf("\n");
    }
    ++errors;
  }
};

template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  if (n) DMOE_CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

void upload_inputs(const CaseSpec& cs, const CallData& c, Buffers& b) {
  const int me = g_rank;
  const int64_t T = c.T;
  DMOE_CUDA_CHECK(cudaMemcpy(b.x, c.x[me].data(), c.x[me].size() * 2, cudaMemcpyHostToDevice));
  if (cs.ids_int64) {
    std::vector<int64_t> v(c.ids[me].begin(), c.ids[me].end());
    DMOE_CUDA_CHECK(cudaMemcpy(b.ids, v.data(), v.size() * 8, cudaMemcpyHostToDevice));
  } else {
    DMOE_CUDA_CHECK(cudaMemcpy(b.ids, c.ids[me].data(), c.ids[me].size() * 4, cudaMemcpyHostToDevice));
  }
  if (cs.score_bf16) {
    std::vector<uint16_t> v(static_cast<size_t>(T * cs.K));
    for (size_t i = 0; i < v.size(); ++i) v[i] = numeric::float_to_bf16(c.scores[me][i]).bits;
    DMOE_CUDA_CHECK(cudaMemcpy(b.scores, v.data(), v.size() * 2, cudaMemcpyHostToDevice));
  } else {
    DMOE_CUDA_CHECK(cudaMemcpy(b.scores, c.scores[me].data(), c.scores[me].size() * 4, cudaMemcpyHostToDevice));
  }
}

// Checks the routing tables, x_gathered and out of one call against the oracle.
void check_call(const CaseSpec& cs, const EpGroup& ep, const CallData& c, const Buffers& b, CombineAlgorithm algo,
                Checker& ck) {
  const int me = g_rank, R = g_world, K = cs.K, D = cs.D, L = cs.L, E = L * R;
  const int64_t T = c.T, Tmax = cs.T_max;
  const auto routing = reference::build_routing(c.ids, K, E, cs.align);
  const reference::RankRouting& rt = routing[static_cast<size_t>(me)];
  const RoutingTables& tab = ep.tables();
  const int64_t M = rt.num_rows();

  // ---- counts and offsets ----
  const int32_t total = download(tab.total_rows, 1)[0];
  if (total != M) {
    ck.fail("total_rows %d, oracle %lld", total, static_cast<long long>(M));
    return;
  }
  const auto rows_p = download(tab.expert_rows, L), rows_u = download(tab.expert_rows_unpadded, L);
  const auto offs = download(tab.expert_offsets, L + 1);
  for (int e = 0; e < L; ++e) {
    if (rows_u[e] != rt.expert_counts[e]) ck.fail("expert %d rows %d, oracle %lld", e, rows_u[e], (long long)rt.expert_counts[e]);
    if (rows_p[e] != rt.expert_padded_counts[e]) ck.fail("expert %d padded rows %d, oracle %lld", e, rows_p[e], (long long)rt.expert_padded_counts[e]);
    if (offs[e] != rt.expert_offsets[e]) ck.fail("expert %d offset %d, oracle %lld", e, offs[e], (long long)rt.expert_offsets[e]);
  }
  if (offs[L] != M) ck.fail("expert_offsets[L] %d, oracle %lld", offs[L], (long long)M);
  const auto recv = download(tab.recv_rows_from_rank, R), send = download(tab.send_rows_to_rank, R);
  for (int s = 0; s < R; ++s) {
    if (recv[s] != rt.recv_rows_from_rank[s]) ck.fail("recv_rows_from_rank[%d] %d, oracle %lld", s, recv[s], (long long)rt.recv_rows_from_rank[s]);
    if (send[s] != rt.send_rows_to_rank[s]) ck.fail("send_rows_to_rank[%d] %d, oracle %lld", s, send[s], (long long)rt.send_rows_to_rank[s]);
  }

  // ---- per-row tables ----
  const auto row_route = download(tab.row_route, static_cast<size_t>(M));
  const auto gsrc = download(reinterpret_cast<const uintptr_t*>(tab.gather_src), static_cast<size_t>(M));
  const auto sdst = download(reinterpret_cast<const uintptr_t*>(tab.scatter_dst), static_cast<size_t>(M));
  const auto ggsrc = download(reinterpret_cast<const uintptr_t*>(tab.grad_gather_src), static_cast<size_t>(M));
  const auto route_row = download(tab.route_row, static_cast<size_t>(R) * Tmax * K);
  std::vector<int32_t> want_route_row(static_cast<size_t>(R) * Tmax * K, -1);
  const int64_t row_bytes = int64_t{D} * 2;
  for (int64_t m = 0; m < M; ++m) {
    const auto& rr = rt.rows[static_cast<size_t>(m)];
    if (rr.is_padding()) {
      if (row_route[m] != -1 || gsrc[m] != 0 || sdst[m] != 0 || ggsrc[m] != 0)
        ck.fail("padding row %lld has route %d", (long long)m, row_route[m]);
      continue;
    }
    const int64_t i = int64_t{rr.token} * K + rr.k;
    const int32_t want = routing::encode_route(rr.src_rank, i);
    if (row_route[m] != want) ck.fail("row %lld route 0x%x, oracle 0x%x", (long long)m, row_route[m], want);
    const uintptr_t ws = ep.dispatch_window_bases()[rr.src_rank] + static_cast<uintptr_t>(routing::dispatch_row_offset(rr.token, row_bytes));
    const uintptr_t wd = ep.combine_window_bases()[rr.src_rank] + static_cast<uintptr_t>(routing::combine_slot_offset(rr.token, rr.k, K, row_bytes));
    if (gsrc[m] != ws) ck.fail("row %lld gather_src wrong", (long long)m);
    if (sdst[m] != wd) ck.fail("row %lld scatter_dst wrong", (long long)m);
    const uintptr_t wg = ep.dispatch_window_bases()[rr.src_rank] +
                         static_cast<uintptr_t>(routing::dispatch_route_offset(rr.token, rr.k, K, row_bytes));
    if (ggsrc[m] != wg) ck.fail("row %lld grad_gather_src wrong", (long long)m);
    want_route_row[static_cast<size_t>(routing::route_row_index(rr.src_rank, i, Tmax, K))] = static_cast<int32_t>(m);
  }
  for (int s = 0; s < R; ++s)
    for (int64_t i = 0; i < T * K; ++i) {
      const size_t j = static_cast<size_t>(routing::route_row_index(s, i, Tmax, K));
      if (route_row[j] != want_route_row[j]) ck.fail("route_row[%d][%lld] %d, oracle %d", s, (long long)i, route_row[j], want_route_row[j]);
    }

  // ---- dispatched rows ----
  const int64_t cap = ep.capacity_rows();
  const int64_t check_rows = std::min<int64_t>(cap, M + 4);
  const auto xg = download(static_cast<const uint16_t*>(b.xg), static_cast<size_t>(check_rows * D));
  const uint16_t sentinel = static_cast<uint16_t>(kSentinelByte | (kSentinelByte << 8));
  for (int64_t m = 0; m < check_rows; ++m) {
    const uint16_t* got = xg.data() + m * D;
    if (m >= M) {
      for (int d = 0; d < D; ++d)
        if (got[d] != sentinel) {
          ck.fail("row %lld beyond total_rows %lld was written", (long long)m, (long long)M);
          break;
        }
      continue;
    }
    const auto& rr = rt.rows[static_cast<size_t>(m)];
    if (rr.is_padding()) {
      const uint16_t want = cs.zero_fill ? 0 : sentinel;
      for (int d = 0; d < D; ++d)
        if (got[d] != want) {
          ck.fail("padding row %lld col %d = 0x%04x, want 0x%04x", (long long)m, d, got[d], want);
          break;
        }
      continue;
    }
    const uint16_t* want = c.x[rr.src_rank].data() + int64_t{rr.token} * D;
    if (std::memcmp(got, want, static_cast<size_t>(D) * 2) != 0)
      ck.fail("x_gathered row %lld (src %d token %d k %d) differs from the source row", (long long)m, rr.src_rank, rr.token, rr.k);
  }

  // ---- combined output ----
  reference::Tensor<float> comb({T * K, int64_t{D}});
  reference::Tensor<float> scores({T, int64_t{K}});
  for (int64_t t = 0; t < T; ++t)
    for (int k = 0; k < K; ++k) {
      scores(t, k) = c.scores[me][static_cast<size_t>(t * K + k)];
      if (c.ids[me][static_cast<size_t>(t * K + k)] < 0) continue;
      float* row = comb.row(t * K + k);
      for (int d = 0; d < D; ++d) row[d] = numeric::bf16_to_float(numeric::bf16_t{y_value_bits(c.y_seed, me, t, k, d)});
    }
  // kRankPartials reduces per owner rank first (its own order); every other path in k order.
  const reference::Tensor<float> ref = algo == CombineAlgorithm::kRankPartials && !cs.external_scatter
                                           ? reference::topk_reduce_rank_partials(comb, c.ids[me], scores, cs.L)
                                           : reference::topk_reduce(comb, c.ids[me], scores);
  const auto out = download(static_cast<const uint16_t*>(b.out), static_cast<size_t>(T * D));
  for (int64_t t = 0; t < T; ++t)
    for (int d = 0; d < D; ++d) {
      const uint16_t want = numeric::float_to_bf16(ref(t, d)).bits;
      const uint16_t got = out[static_cast<size_t>(t * D + d)];
      if (got != want) {
        ck.fail("out[%lld][%d] = 0x%04x, oracle 0x%04x", (long long)t, d, got, want);
        break;
      }
    }

  // ---- kept route rows (reduce's KeepRoutes): routed slots hold their row, nothing else written ----
  if (b.keep != nullptr) {
    const int64_t n = kKeepOffset / 2 + Tmax * K * D;
    const auto kept = download(static_cast<const uint16_t*>(b.keep), static_cast<size_t>(n));
    for (int64_t i = 0; i < kKeepOffset / 2; ++i)
      if (kept[static_cast<size_t>(i)] != sentinel) {
        ck.fail("kept rows: byte %lld before the offset was written", (long long)(2 * i));
        break;
      }
    for (int64_t t = 0; t < Tmax; ++t)
      for (int k = 0; k < K; ++k) {
        const bool routed = !b.keep_skip && t < T && c.ids[me][static_cast<size_t>(t * K + k)] >= 0;
        const uint16_t* got = kept.data() + kKeepOffset / 2 + (t * K + k) * D;
        for (int d = 0; d < D; ++d) {
          const uint16_t want = routed ? y_value_bits(c.y_seed, me, t, k, d) : sentinel;
          if (got[d] != want) {
            ck.fail("kept slot (t=%lld, k=%d) col %d = 0x%04x, want 0x%04x (%s)", (long long)t, k, d, got[d], want,
                    b.keep_skip ? "skipped call" : (routed ? "routed" : "not routed"));
            t = Tmax;
            k = K;
            break;
          }
        }
      }
  }
}

struct CallVariant {
  DispatchMode dm;
  CombineSync sync;
  bool fused;
  CombineAlgorithm algo;
};

// Runs one call's ops on `stream` (capturable: no host synchronization inside).
void run_ops(const CaseSpec& cs, EpGroup& ep, const Buffers& b, int64_t T, const CallVariant& v, uint32_t y_seed,
             cudaStream_t stream) {
  const DType idt = cs.ids_int64 ? DType::kInt64 : DType::kInt32;
  DispatchOptions dopt;
  dopt.mode = v.dm;
  dopt.zero_fill_padding = cs.zero_fill;
  dopt.num_sms = cs.num_sms;
  if (v.fused) {
    dopt.fused = FusedRoute::kOn;
    if (cs.push_scores) {
      dopt.scores_TK = b.scores;
      dopt.score_dtype = cs.score_bf16 ? DType::kBFloat16 : DType::kFloat32;
    }
    if (cs.fused_dispatch_separately) {
      ep.publish_route_dispatch(b.x, b.ids, idt, T, nullptr, stream, dopt);
      ep.dispatch(b.xg, T, stream, dopt);
    } else {
      ep.publish_route_dispatch(b.x, b.ids, idt, T, b.xg, stream, dopt);
    }
  } else {
    ep.publish(b.x, b.ids, idt, T, stream);
    ep.route(T, stream);
    ep.dispatch(b.xg, T, stream, dopt);
  }
  fill_y_kernel<<<264, 256, 0, stream>>>(ep.tables(), static_cast<uint16_t*>(b.y), cs.D, cs.K, y_seed);
  DMOE_CUDA_CHECK_LAUNCH();
  CombineOptions copt;
  copt.sync = v.sync;
  copt.num_sms = cs.num_sms;
  copt.algorithm = v.algo;
  copt.reduce_warps = cs.reduce_warps;
  copt.signal_batch = cs.signal_batch;
  copt.k_group = cs.k_group;
  copt.reduce_ctas = cs.reduce_ctas;
  const DType sdt = cs.score_bf16 ? DType::kBFloat16 : DType::kFloat32;
  if (cs.external_scatter) {
    external_scatter_kernel<<<264, 256, 0, stream>>>(ep.tables(), static_cast<const int4*>(b.y), cs.D);
    DMOE_CUDA_CHECK_LAUNCH();
    ep.reduce(b.scores, sdt, b.out, T, stream, copt, KeepRoutes{b.keep, b.keep_ctl, b.keep_ctl + 1});
  } else {
    if (cs.own_partials_late) setenv("DMOE_COMBINE_OWN_PARTIALS", "late", 1);
    ep.combine(b.y, b.scores, sdt, b.out, T, stream, copt);
    if (cs.own_partials_late) unsetenv("DMOE_COMBINE_OWN_PARTIALS");
  }
}

const char* mode_name(DispatchMode m) { return m == DispatchMode::kTokenOnce ? "token_once" : "per_route"; }
const char* sync_name(CombineSync s) { return s == CombineSync::kBarrier ? "barrier" : "signal"; }
const char* algo_name(CombineAlgorithm a) {
  if (a == CombineAlgorithm::kRankPartials) return "combine rank partials";
  return a == CombineAlgorithm::kV1 ? "combine v1" : (a == CombineAlgorithm::kV2 ? "combine v2" : "combine auto");
}

int run_case(const Communicator& comm, const CaseSpec& cs, uint64_t case_seed) {
  const int R = g_world;
  if (cs.K > cs.L * R) {  // top-k needs K distinct experts
    if (g_rank == 0) LOG("skip %s: K=%d > E=%d on %d rank(s)", cs.name.c_str(), cs.K, cs.L * R, R);
    return 0;
  }
  EpConfig cfg;
  cfg.max_tokens = cs.T_max;
  cfg.hidden = cs.D;
  cfg.top_k = cs.K;
  cfg.num_experts = int64_t{cs.L} * R;
  cfg.row_alignment = cs.align;
  EpGroup ep(comm, cfg);
  const int64_t cap = ep.capacity_rows();
  const bool fused_ok = ep.fused_route_supported();
  auto variant_of = [&](size_t call) {
    CallVariant v;
    v.dm = cs.dispatch_modes[call % cs.dispatch_modes.size()];
    v.sync = cs.combine_syncs[call % cs.combine_syncs.size()];
    v.fused = fused_ok && cs.fused[call % cs.fused.size()];
    v.algo = cs.algos[call % cs.algos.size()];
    return v;
  };
  Buffers b;
  DMOE_CUDA_CHECK(cudaMalloc(&b.x, static_cast<size_t>(cs.T_max) * cs.D * 2));
  DMOE_CUDA_CHECK(cudaMalloc(&b.ids, static_cast<size_t>(cs.T_max) * cs.K * 8));
  DMOE_CUDA_CHECK(cudaMalloc(&b.scores, static_cast<size_t>(cs.T_max) * cs.K * 4));
  DMOE_CUDA_CHECK(cudaMalloc(&b.xg, static_cast<size_t>(cap) * cs.D * 2));
  DMOE_CUDA_CHECK(cudaMalloc(&b.y, static_cast<size_t>(cap) * cs.D * 2));
  DMOE_CUDA_CHECK(cudaMalloc(&b.out, static_cast<size_t>(cs.T_max) * cs.D * 2));
  const size_t keep_bytes = static_cast<size_t>(kKeepOffset + cs.T_max * cs.K * cs.D * 2);
  if (cs.external_scatter) {
    DMOE_CUDA_CHECK(cudaMalloc(&b.keep, keep_bytes));
    DMOE_CUDA_CHECK(cudaMalloc(&b.keep_ctl, 2 * sizeof(int64_t)));
    const int64_t ctl[2] = {kKeepOffset, 0};
    DMOE_CUDA_CHECK(cudaMemcpy(b.keep_ctl, ctl, sizeof(ctl), cudaMemcpyHostToDevice));
  }
  cudaStream_t stream;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int errors = 0;

  cudaGraphExec_t graph_exec = nullptr;
  if (cs.graph) {
    // One eager call first (module loading, first launches), then capture one call.
    const CallData warm = make_call(RoutingPattern::kUniform, cs.Ts[0], cs.D, cs.K, cs.L * R, cs.score_bf16, case_seed ^ 0xABCDEFu);
    upload_inputs(cs, warm, b);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    run_ops(cs, ep, b, warm.T, variant_of(0), warm.y_seed, stream);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  for (size_t call = 0; call < cs.Ts.size(); ++call) {
    const int64_t T = cs.Ts[call];
    const RoutingPattern pat = cs.patterns[call % cs.patterns.size()];
    const CallVariant var = variant_of(cs.graph ? 0 : call);
    CallData c = make_call(pat, T, cs.D, cs.K, cs.L * R, cs.score_bf16, case_seed * 1000 + call);
    if (cs.graph) c.y_seed = mix32(static_cast<uint32_t>(case_seed) ^ 0x77u);  // baked into the graph
    upload_inputs(cs, c, b);
    DMOE_CUDA_CHECK(cudaMemset(b.xg, kSentinelByte, static_cast<size_t>(cap) * cs.D * 2));
    DMOE_CUDA_CHECK(cudaMemset(b.out, 0xFF, static_cast<size_t>(cs.T_max) * cs.D * 2));
    if (b.keep != nullptr) {  // every third call skips keeping (the flag is read on the device)
      b.keep_skip = call % 3 == 2 ? 1 : 0;
      const int64_t ctl[2] = {kKeepOffset, b.keep_skip};
      DMOE_CUDA_CHECK(cudaMemcpy(b.keep_ctl, ctl, sizeof(ctl), cudaMemcpyHostToDevice));
      DMOE_CUDA_CHECK(cudaMemset(b.keep, kSentinelByte, keep_bytes));
    }
    // Copies and memsets above run on the legacy stream, which `stream` (non-blocking) does not
    // wait for: finish them before launching.
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    if (cs.graph) {
      if (graph_exec == nullptr) {
        cudaGraph_t g;
        DMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        run_ops(cs, ep, b, T, var, c.y_seed, stream);
        DMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        DMOE_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, g, 0));
        DMOE_CUDA_CHECK(cudaGraphDestroy(g));
      }
      DMOE_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream));
    } else {
      run_ops(cs, ep, b, T, var, c.y_seed, stream);
    }
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
    Checker ck;
    ck.where = cs.name + " call " + std::to_string(call) + " (T=" + std::to_string(T) + ", " +
               dist_moe::testing::to_string(pat) + ", " + (var.fused ? "fused route" : mode_name(var.dm)) + ", " +
               (cs.external_scatter ? "external scatter + reduce" : algo_name(var.algo)) + ", " + sync_name(var.sync) +
               (cs.graph ? ", graph replay" : "") + ")";
    check_call(cs, ep, c, b, var.algo, ck);
    errors += ck.errors;
  }
  if (graph_exec) DMOE_CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
  DMOE_CUDA_CHECK(cudaStreamDestroy(stream));
  return errors;
}

std::vector<CaseSpec> correctness_cases() {
  using P = RoutingPattern;
  using DM = DispatchMode;
  using CS = CombineSync;
  std::vector<CaseSpec> v;
  auto add = [&](const std::string& name, const std::function<void(CaseSpec&)>& set) {
    CaseSpec c;
    c.name = name;
    set(c);
    v.push_back(std::move(c));
  };
  add("uniform_K8_L4", [](CaseSpec&) {});
  add("uniform_signal_per_route", [](CaseSpec& c) {
    c.dispatch_modes = {DM::kPerRoute};
    c.combine_syncs = {CS::kSignal};
  });
  add("zipf_L128_align16", [](CaseSpec& c) {
    c.L = 128;
    c.align = 16;
    c.patterns = {P::kZipf};
    c.Ts = {64, 1, 33};
    c.dispatch_modes = {DM::kTokenOnce, DM::kPerRoute};
    c.combine_syncs = {CS::kBarrier, CS::kSignal};
  });
  add("one_expert_K1_align8", [](CaseSpec& c) {
    c.K = 1;
    c.align = 8;
    c.patterns = {P::kOneExpert};
    c.combine_syncs = {CS::kSignal};
  });
  add("one_expert_K6_align64", [](CaseSpec& c) {
    c.K = 6;
    c.align = 64;
    c.patterns = {P::kOneExpert};
  });
  add("masked_K6_align128_bf16_i64", [](CaseSpec& c) {
    c.K = 6;
    c.align = 128;
    c.patterns = {P::kMasked};
    c.Ts = {64, 20};
    c.combine_syncs = {CS::kSignal, CS::kBarrier};
    c.score_bf16 = true;
    c.ids_int64 = true;
  });
  add("padded_rank_K2_L1", [](CaseSpec& c) {
    c.K = 2;
    c.L = 1;
    c.patterns = {P::kPaddedRank};
    c.Ts = {64, 64};
    c.combine_syncs = {CS::kBarrier, CS::kSignal};
  });
  add("T1_K8_L128", [](CaseSpec& c) {
    c.L = 128;
    c.Ts = {1, 1};
    c.combine_syncs = {CS::kBarrier, CS::kSignal};
  });
  add("T_varies_one_group", [](CaseSpec& c) {
    c.align = 8;
    c.patterns = {P::kUniform, P::kZipf, P::kMasked, P::kOneExpert, P::kPaddedRank};
    c.Ts = {64, 1, 17, 64, 3, 50};
    c.dispatch_modes = {DM::kTokenOnce, DM::kPerRoute};
    c.combine_syncs = {CS::kBarrier, CS::kSignal, CS::kSignal};
  });
  add("no_zero_fill_align64", [](CaseSpec& c) {
    c.K = 2;
    c.align = 64;
    c.Ts = {64, 64};
    c.dispatch_modes = {DM::kTokenOnce, DM::kPerRoute};
    c.zero_fill = false;
  });
  // K x E_local matrix.
  for (int L : {1, 4, 128})
    for (int K : {1, 2, 6, 8}) {
      if (K > L * g_world) continue;
      const int align = (L * 7 + K) % 3 == 0 ? 1 : ((L + K) % 2 ? 16 : 128);
      add("matrix_L" + std::to_string(L) + "_K" + std::to_string(K), [=](CaseSpec& c) {
        c.T_max = 32;
        c.K = K;
        c.L = L;
        c.align = align;
        c.patterns = {P::kUniform, P::kZipf};
        c.Ts = {32, 7};
        c.combine_syncs = {CS::kBarrier, CS::kSignal};
      });
    }
  add("hidden7168_K8_L128", [](CaseSpec& c) {
    c.T_max = 16;
    c.D = 7168;
    c.L = 128;
    c.Ts = {16, 5};
    c.dispatch_modes = {DM::kTokenOnce, DM::kPerRoute};
    c.combine_syncs = {CS::kBarrier, CS::kSignal};
  });
  add("hidden200_K6", [](CaseSpec& c) {
    c.D = 200;
    c.K = 6;
    c.align = 16;
    c.patterns = {P::kMasked};
    c.Ts = {64, 9};
  });
  // D = 1200: a rank-partials slot half of 75 vectors, two full groups of 32 and a last group of 11
  // (routing::partial_half_offset); the other partials cases have halves of 4, 16 and 448 vectors.
  add("hidden1200_K8_L16", [](CaseSpec& c) {
    c.D = 1200;
    c.L = 16;
    c.align = 8;
    c.patterns = {P::kUniform, P::kZipf};
    c.Ts = {48, 13};
    c.combine_syncs = {CS::kBarrier, CS::kSignal};
  });
  add("few_sms", [](CaseSpec& c) {
    c.Ts = {64, 64};
    c.combine_syncs = {CS::kBarrier, CS::kSignal};
    c.num_sms = 3;
  });
  add("T_max_large_routing_chunks", [](CaseSpec& c) {
    c.T_max = 1024;
    c.D = 64;
    c.L = 128;
    c.align = 16;
    c.patterns = {P::kZipf, P::kUniform};
    c.Ts = {1024, 700};
    c.combine_syncs = {CS::kSignal, CS::kBarrier};
  });
  // CUDA graphs: one capture, replays with different routing every time.
  add("graph_barrier", [](CaseSpec& c) {
    c.align = 8;
    c.patterns = {P::kUniform, P::kZipf, P::kMasked, P::kOneExpert, P::kPaddedRank};
    c.Ts = {64, 64, 64, 64, 64};
    c.graph = true;
  });
  add("graph_signal_per_route", [](CaseSpec& c) {
    c.K = 6;
    c.L = 128;
    c.align = 16;
    c.patterns = {P::kZipf, P::kUniform, P::kMasked, P::kOneExpert};
    c.Ts = {48, 48, 48, 48};
    c.dispatch_modes = {DM::kPerRoute};
    c.combine_syncs = {CS::kSignal};
    c.graph = true;
  });

  // Every case above again through the fused route kernel (where the group supports it; calls
  // alternate with the separate ops so both arrival protocols interleave) and combine v2.
  const size_t n_base = v.size();
  for (size_t i = 0; i < n_base; ++i) {
    CaseSpec c = v[i];
    c.name += "+v2f";
    c.fused = c.graph ? std::vector<bool>{true} : std::vector<bool>{true, true, false};
    c.algos = {CombineAlgorithm::kV2};
    v.push_back(std::move(c));
  }

  // Every case above again with the rank-partials combine (hidden % 16 == 0 only), against the
  // oracle's rank-partials order, four ways by case index (graphs capture the first call's path):
  //   0: separate ops + barrier, fused route + signal (scores exchanged in the combine);
  //   1: fused route pushing the scores (DispatchOptions::scores_TK), signal, then barrier;
  //   2: separate ops + signal, fused route + barrier summing the own partials late (_late);
  //   3: fused route pushing the scores + barrier _late, then separate ops + signal.
  for (size_t i = 0; i < n_base; ++i) {
    if (v[i].D % 16 != 0) continue;
    CaseSpec c = v[i];
    const size_t way = i % 4;
    using CS = CombineSync;
    c.push_scores = way % 2 == 1;
    c.own_partials_late = way >= 2;
    c.name += std::string(c.push_scores ? "+partials_pushed" : "+partials") + (c.own_partials_late ? "_late" : "");
    c.algos = {CombineAlgorithm::kRankPartials};
    c.combine_syncs = way == 0 || way == 3 ? std::vector<CS>{CS::kBarrier, CS::kSignal} : std::vector<CS>{CS::kSignal, CS::kBarrier};
    if (c.graph || way == 1) c.fused = {true};
    else c.fused = way == 3 ? std::vector<bool>{true, false} : std::vector<bool>{false, true};
    v.push_back(std::move(c));
  }

  // v2 tuning knobs: few reduce warps, batched signals, k groups that split K unevenly.
  add("v2_signal_rw1_batch3_kg3", [](CaseSpec& c) {
    c.L = 128;
    c.align = 16;
    c.patterns = {P::kZipf, P::kMasked, P::kUniform};
    c.Ts = {64, 37, 64};
    c.combine_syncs = {CS::kSignal};
    c.algos = {CombineAlgorithm::kV2};
    c.reduce_warps = 1;
    c.signal_batch = 3;
    c.k_group = 3;
  });
  add("v2_signal_rw15_batch32_kgK", [](CaseSpec& c) {
    c.K = 6;
    c.D = 7168;
    c.T_max = 16;
    c.Ts = {16, 3};
    c.patterns = {P::kUniform, P::kOneExpert};
    c.combine_syncs = {CS::kSignal, CS::kBarrier};
    c.algos = {CombineAlgorithm::kV2};
    c.reduce_warps = 15;
    c.signal_batch = 32;
    c.k_group = 6;
  });
  // C6: CTA-specialized signal mode (reduce CTAs wait per token for scatter CTAs).
  add("v2_signal_rc1_kg1", [](CaseSpec& c) {
    c.L = 128;
    c.align = 16;
    c.patterns = {P::kZipf, P::kMasked, P::kUniform};
    c.Ts = {64, 37, 64};
    c.combine_syncs = {CS::kSignal};
    c.algos = {CombineAlgorithm::kV2};
    c.reduce_ctas = 1;
    c.k_group = 1;
  });
  add("v2_signal_rc_half_D7168_batch4", [](CaseSpec& c) {
    c.K = 8;
    c.D = 7168;
    c.L = 128;
    c.T_max = 128;
    c.Ts = {128, 5};
    c.patterns = {P::kUniform, P::kOneExpert, P::kMasked};
    c.combine_syncs = {CS::kSignal};
    c.algos = {CombineAlgorithm::kV2};
    c.reduce_ctas = 132;
    c.signal_batch = 4;
  });
  add("v2_signal_rc_huge_graph", [](CaseSpec& c) {
    c.graph = true;
    c.D = 7168;
    c.combine_syncs = {CS::kSignal};
    c.algos = {CombineAlgorithm::kV2};
    c.reduce_ctas = 100000;  // clamped to CTAs - 1: one scatter CTA
    c.patterns = {P::kUniform, P::kZipf, P::kMasked, P::kOneExpert};
    c.Ts = {64, 64, 64, 64};
    c.fused = {true};
  });
  add("v2_signal_rc_few_sms_fused", [](CaseSpec& c) {
    c.num_sms = 3;
    c.L = 128;
    c.patterns = {P::kZipf, P::kPaddedRank, P::kUniform};
    c.Ts = {64, 17, 64};
    c.combine_syncs = {CS::kSignal, CS::kBarrier};  // reduce_ctas only affects signal mode
    c.algos = {CombineAlgorithm::kV2};
    c.fused = {true, false};
    c.reduce_ctas = 2;
  });
  add("fused_then_dispatch", [](CaseSpec& c) {
    c.align = 8;
    c.patterns = {P::kZipf, P::kPaddedRank};
    c.Ts = {64, 20};
    c.fused = {true};
    c.fused_dispatch_separately = true;
    c.dispatch_modes = {DM::kPerRoute, DM::kTokenOnce};
    c.algos = {CombineAlgorithm::kV2, CombineAlgorithm::kV1};
  });
  add("fused_few_sms_align128", [](CaseSpec& c) {
    c.K = 6;
    c.align = 128;
    c.patterns = {P::kMasked, P::kOneExpert};
    c.Ts = {64, 64};
    c.fused = {true};
    c.algos = {CombineAlgorithm::kV2};
    c.combine_syncs = {CS::kSignal, CS::kBarrier};
    c.num_sms = 3;
  });
  // reduce() after an external scatter through scatter_dst (the W2 epilogue's pattern).
  add("reduce_external_scatter", [](CaseSpec& c) {
    c.align = 8;
    c.patterns = {P::kUniform, P::kZipf, P::kMasked, P::kOneExpert, P::kPaddedRank};
    c.Ts = {64, 1, 33, 64, 17};
    c.fused = {false, true};
    c.external_scatter = true;
  });
  add("reduce_external_scatter_bf16_i64_D7168", [](CaseSpec& c) {
    c.T_max = 16;
    c.D = 7168;
    c.L = 128;
    c.K = 6;
    c.Ts = {16, 5};
    c.patterns = {P::kMasked, P::kZipf};
    c.score_bf16 = true;
    c.ids_int64 = true;
    c.external_scatter = true;
  });
  add("reduce_external_scatter_graph", [](CaseSpec& c) {
    c.K = 6;
    c.L = 128;
    c.align = 16;
    c.patterns = {P::kZipf, P::kUniform, P::kMasked, P::kOneExpert};
    c.Ts = {48, 48, 48, 48};
    c.fused = {true};
    c.external_scatter = true;
    c.graph = true;
  });
  // The rank-partials signal counters are zeroed by each call's publish: signal calls of either
  // parity between calls of other algorithms and syncs (none of which touch those counters), with
  // T changing, on one group.
  add("partials_signal_mixed_algorithms", [](CaseSpec& c) {
    using A = CombineAlgorithm;
    c.L = 16;
    c.align = 8;
    c.patterns = {P::kUniform, P::kZipf, P::kMasked};
    c.Ts = {64, 40, 64, 17, 64, 33, 1};
    c.algos = {A::kRankPartials, A::kV2, A::kRankPartials, A::kRankPartials, A::kV1, A::kRankPartials, A::kRankPartials};
    c.combine_syncs = {CS::kSignal, CS::kSignal, CS::kBarrier, CS::kSignal, CS::kSignal, CS::kSignal, CS::kSignal};
    c.fused = {false, true, true};
    c.push_scores = true;
  });
  return v;
}

// ---- grad_gather_src: owners write route rows into their dispatch window, expert ranks gather ---

struct GradGatherSpec {
  std::string name;
  int64_t T_max = 64;
  int D = 256;
  int K = 8;
  int L = 4;
  int align = 1;
  std::vector<RoutingPattern> patterns = {RoutingPattern::kUniform};
  std::vector<int64_t> Ts = {64};
  bool fused = false;
  bool graph = false;
};

int run_grad_gather_case(const Communicator& comm, const GradGatherSpec& gs, uint64_t case_seed) {
  const int R = g_world, me = g_rank;
  if (gs.K > gs.L * R) {
    if (g_rank == 0) LOG("skip %s: K=%d > E=%d on %d rank(s)", gs.name.c_str(), gs.K, gs.L * R, R);
    return 0;
  }
  EpConfig cfg;
  cfg.max_tokens = gs.T_max;
  cfg.hidden = gs.D;
  cfg.top_k = gs.K;
  cfg.num_experts = int64_t{gs.L} * R;
  cfg.row_alignment = gs.align;
  EpGroup ep(comm, cfg);
  const int64_t cap = ep.capacity_rows();
  const bool fused = gs.fused && ep.fused_route_supported();
  Buffers b;
  DMOE_CUDA_CHECK(cudaMalloc(&b.x, static_cast<size_t>(gs.T_max) * gs.D * 2));
  DMOE_CUDA_CHECK(cudaMalloc(&b.ids, static_cast<size_t>(gs.T_max) * gs.K * 4));
  DMOE_CUDA_CHECK(cudaMalloc(&b.y, static_cast<size_t>(cap) * gs.D * 2));  // gathered rows
  DMOE_CUDA_CHECK(cudaMemset(b.x, 0, static_cast<size_t>(gs.T_max) * gs.D * 2));
  cudaStream_t stream;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const uint32_t seed = mix32(static_cast<uint32_t>(case_seed) ^ 0x9999u);
  auto ops = [&](int64_t T) {
    if (fused) {
      DispatchOptions o;
      o.fused = FusedRoute::kOn;
      ep.publish_route_dispatch(b.x, b.ids, DType::kInt32, T, nullptr, stream, o);
    } else {
      ep.publish(b.x, b.ids, DType::kInt32, T, stream);
      ep.route(T, stream);
    }
    // Backward: every peer finished its forward reads of this rank's dispatch window (nothing read
    // it here), the owner writes grad_h3 slots, EP barrier, expert ranks gather, EP barrier (the next
    // call's publish overwrites the window).
    fill_grad_slots_kernel<<<132, 256, 0, stream>>>(static_cast<uint16_t*>(ep.local_dispatch_routes()), T, gs.K,
                                                    gs.D, me, seed);
    DMOE_CUDA_CHECK_LAUNCH();
    ep.barrier(stream);
    grad_gather_kernel<<<264, 256, 0, stream>>>(ep.tables(), static_cast<int4*>(b.y), gs.D);
    DMOE_CUDA_CHECK_LAUNCH();
    ep.barrier(stream);
  };
  cudaGraphExec_t graph_exec = nullptr;
  int errors = 0;
  for (size_t call = 0; call < gs.Ts.size(); ++call) {
    const int64_t T = gs.Ts[call];
    const RoutingPattern pat = gs.patterns[call % gs.patterns.size()];
    const auto ids = dist_moe::testing::make_routing_ids(pat, R, T, gs.K, gs.L * R, case_seed * 1000 + call);
    DMOE_CUDA_CHECK(cudaMemcpy(b.ids, ids[me].data(), ids[me].size() * 4, cudaMemcpyHostToDevice));
    DMOE_CUDA_CHECK(cudaMemset(b.y, kSentinelByte, static_cast<size_t>(cap) * gs.D * 2));
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    if (gs.graph) {
      if (graph_exec == nullptr) {
        ops(T);  // eager once (module loading), then capture
        DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));
        DMOE_CUDA_CHECK(cudaMemset(b.y, kSentinelByte, static_cast<size_t>(cap) * gs.D * 2));
        DMOE_CUDA_CHECK(cudaDeviceSynchronize());
        cudaGraph_t g;
        DMOE_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        ops(T);
        DMOE_CUDA_CHECK(cudaStreamEndCapture(stream, &g));
        DMOE_CUDA_CHECK(cudaGraphInstantiate(&graph_exec, g, 0));
        DMOE_CUDA_CHECK(cudaGraphDestroy(g));
      }
      DMOE_CUDA_CHECK(cudaGraphLaunch(graph_exec, stream));
    } else {
      ops(T);
    }
    DMOE_CUDA_CHECK(cudaStreamSynchronize(stream));

    Checker ck;
    ck.where = gs.name + " call " + std::to_string(call) + " (T=" + std::to_string(T) + ", " +
               dist_moe::testing::to_string(pat) + (fused ? ", fused route" : "") + (gs.graph ? ", graph replay" : "") +
               ")";
    const auto routing = reference::build_routing(ids, gs.K, int64_t{gs.L} * R, gs.align);
    const reference::RankRouting& rt = routing[static_cast<size_t>(me)];
    std::vector<reference::Tensor<float>> bufs;
    for (int r = 0; r < R; ++r) {
      reference::Tensor<float> t({T * gs.K, int64_t{gs.D}});
      for (int64_t i = 0; i < T * gs.K; ++i)
        for (int d = 0; d < gs.D; ++d)
          t.row(i)[d] = numeric::bf16_to_float(numeric::bf16_t{grad_value_bits(seed, r, i / gs.K, static_cast<int>(i % gs.K), d)});
      bufs.push_back(std::move(t));
    }
    const reference::Tensor<float> want = reference::gather_route_rows(rt, bufs);
    const int64_t M = rt.num_rows();
    const int32_t total = download(ep.tables().total_rows, 1)[0];
    if (total != M) ck.fail("total_rows %d, oracle %lld", total, static_cast<long long>(M));
    const int64_t check_rows = std::min<int64_t>(cap, M + 4);
    const auto got = download(static_cast<const uint16_t*>(b.y), static_cast<size_t>(check_rows * gs.D));
    const uint16_t sentinel = static_cast<uint16_t>(kSentinelByte | (kSentinelByte << 8));
    for (int64_t m = 0; m < check_rows && ck.errors < 8; ++m)
      for (int d = 0; d < gs.D; ++d) {
        const uint16_t g = got[static_cast<size_t>(m * gs.D + d)];
        const uint16_t w = m < M ? numeric::float_to_bf16(want(m, d)).bits : sentinel;
        if (g != w) {
          ck.fail("gathered row %lld col %d = 0x%04x, want 0x%04x%s", (long long)m, d, g, w, m < M ? "" : " (untouched)");
          break;
        }
      }
    errors += ck.errors;
  }
  if (graph_exec) DMOE_CUDA_CHECK(cudaGraphExecDestroy(graph_exec));
  DMOE_CUDA_CHECK(cudaStreamDestroy(stream));
  return errors;
}

std::vector<GradGatherSpec> grad_gather_cases() {
  using P = RoutingPattern;
  std::vector<GradGatherSpec> v;
  GradGatherSpec a;
  a.name = "grad_gather";
  a.align = 8;
  a.patterns = {P::kUniform, P::kZipf, P::kMasked, P::kOneExpert, P::kPaddedRank};
  a.Ts = {64, 1, 33, 64, 20};
  v.push_back(a);
  GradGatherSpec f = a;
  f.name = "grad_gather_fused";
  f.fused = true;
  v.push_back(f);
  GradGatherSpec h;
  h.name = "grad_gather_D7168_L128_K6";
  h.T_max = 16;
  h.D = 7168;
  h.L = 128;
  h.K = 6;
  h.align = 16;
  h.patterns = {P::kZipf, P::kMasked};
  h.Ts = {16, 5};
  v.push_back(h);
  GradGatherSpec g = a;
  g.name = "grad_gather_graph";
  g.Ts = {64, 64, 64, 64, 64};
  g.graph = true;
  v.push_back(g);
  GradGatherSpec gf = g;
  gf.name = "grad_gather_graph_fused";
  gf.fused = true;
  v.push_back(gf);
  return v;
}

// Both barriers many times in a row (EP barrier slot 0, NCCL LSA barrier 0), then a sync.
int run_barrier_case(const Communicator& comm) {
  EpConfig cfg;
  cfg.max_tokens = 8;
  cfg.hidden = 64;
  cfg.top_k = 1;
  cfg.num_experts = g_world;
  EpGroup ep(comm, cfg);
  cudaStream_t s;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int i = 0; i < 200; ++i) ep.barrier(s);
  for (int i = 0; i < 200; ++i) comm.nccl_lsa_barrier(s, 0);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  DMOE_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}

// A communicator the caller owns, wrapped with from_nccl_comm (not destroyed by the wrapper).
int run_borrowed_comm_case(const dist_moe::testing::DistEnv& env, int64_t timeout_ms) {
  const ncclUniqueId id = dist_moe::testing::exchange_unique_id(env, "borrowed");
  ncclComm_t raw = nullptr;
  DMOE_NCCL_CHECK(ncclCommInitRank(&raw, env.world, id, env.rank));
  int errors = 0;
  {
    CommunicatorOptions opts;
    opts.timeout_ms = timeout_ms;
    auto comm = Communicator::from_nccl_comm(raw, opts);
    CaseSpec cs;
    cs.name = "borrowed_comm";
    cs.K = 2;
    cs.Ts = {64, 30};
    cs.combine_syncs = {CombineSync::kSignal, CombineSync::kBarrier};
    errors = run_case(*comm, cs, 777);
  }
  DMOE_NCCL_CHECK(ncclCommFinalize(raw));
  DMOE_NCCL_CHECK(ncclCommDestroy(raw));
  return errors;
}

int all_reduce_sum(const Communicator& comm, int v) {
  int* d = nullptr;
  DMOE_CUDA_CHECK(cudaMalloc(&d, sizeof(int)));
  DMOE_CUDA_CHECK(cudaMemcpy(d, &v, sizeof(int), cudaMemcpyHostToDevice));
  DMOE_NCCL_CHECK(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, comm.nccl_comm(), nullptr));
  DMOE_CUDA_CHECK(cudaMemcpy(&v, d, sizeof(int), cudaMemcpyDeviceToHost));
  DMOE_CUDA_CHECK(cudaFree(d));
  return v;
}

int run_suite(const Communicator& comm, const dist_moe::testing::DistEnv& env, const std::string& filter) {
  struct Row {
    std::string name;
    int errors;
    double ms;
  };
  std::vector<Row> rows;
  auto timed = [&](const std::string& name, const std::function<int()>& fn) {
    if (!filter.empty() && name.find(filter) == std::string::npos) return;
    const auto t0 = std::chrono::steady_clock::now();
    int e = fn();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const int total = all_reduce_sum(comm, e);  // every rank agrees on the verdict
    if (g_rank == 0) std::printf("%s %s (%.0f ms)\n", total == 0 ? "PASS" : "FAIL", name.c_str(), ms);
    std::fflush(stdout);
    rows.push_back({name, total, ms});
  };
  timed("barriers", [&] { return run_barrier_case(comm); });
  timed("borrowed_comm", [&] { return run_borrowed_comm_case(env, comm.timeout_ms()); });
  uint64_t seed = 1000;
  for (const CaseSpec& cs : correctness_cases()) {
    const uint64_t s = seed++;
    timed(cs.name, [&] { return run_case(comm, cs, s); });
  }
  for (const GradGatherSpec& gs : grad_gather_cases()) {
    const uint64_t s = seed++;
    timed(gs.name, [&] { return run_grad_gather_case(comm, gs, s); });
  }
  int failed = 0;
  if (g_rank == 0) {
    std::printf("\n==== comm multi-GPU tests (%d ranks) ====\n%-34s %-6s %8s %s\n", g_world, "case", "result", "ms", "errors");
    for (const Row& r : rows) {
      std::printf("%-34s %-6s %8.0f %d\n", r.name.c_str(), r.errors == 0 ? "PASS" : "FAIL", r.ms, r.errors);
      if (r.errors) ++failed;
    }
    std::printf("%s: %zu cases, %d failed\n", failed == 0 ? "ALL PASS" : "SOME FAILED", rows.size(), failed);
  }
  for (const Row& r : rows)
    if (r.errors) failed = 1;
  return failed ? 1 : 0;
}

// ---- failure scenarios (each must end in a device trap with its diagnostic) -----------------------

int run_scenario(const Communicator& comm, const std::string& full_name) {
  const int me = g_rank, R = g_world;
  // "<scenario>_fused": the same through publish_route_dispatch (one kernel).
  const std::string suffix = "_fused";
  const bool fused = full_name.size() > suffix.size() &&
                     full_name.compare(full_name.size() - suffix.size(), suffix.size(), suffix) == 0;
  const std::string name = fused ? full_name.substr(0, full_name.size() - suffix.size()) : full_name;
  EpConfig cfg;
  cfg.max_tokens = 64;
  cfg.hidden = 128;
  // scores_mismatch: rank 0 pushes its scores with the ids (fused route), the others do not; the
  // rank-partials combine on rank 0 finds no scores of this call from rank 1.
  const bool scores_mismatch = name == "scores_mismatch";
  cfg.top_k = scores_mismatch ? 2 : 1;
  cfg.num_experts = 2 * R;
  if (name == "overflow") cfg.capacity_rows = 16;
  if (name == "bad_id") cfg.validate_expert_ids = true;
  EpGroup ep(comm, cfg);
  Buffers b;
  const int64_t cap = ep.capacity_rows();
  DMOE_CUDA_CHECK(cudaMalloc(&b.x, 64 * 128 * 2));
  DMOE_CUDA_CHECK(cudaMalloc(&b.ids, 64 * 2 * 4));
  DMOE_CUDA_CHECK(cudaMalloc(&b.scores, 64 * 2 * 4));
  DMOE_CUDA_CHECK(cudaMalloc(&b.xg, static_cast<size_t>(cap) * 128 * 2));
  DMOE_CUDA_CHECK(cudaMalloc(&b.y, static_cast<size_t>(cap) * 128 * 2));
  DMOE_CUDA_CHECK(cudaMalloc(&b.out, 64 * 128 * 2));
  DMOE_CUDA_CHECK(cudaMemset(b.x, 0, 64 * 128 * 2));
  DMOE_CUDA_CHECK(cudaMemset(b.y, 0, static_cast<size_t>(cap) * 128 * 2));
  const int K = static_cast<int>(cfg.top_k);
  std::vector<int32_t> ids(static_cast<size_t>(64 * K), 0);  // every token to expert 0 (rank 0)
  for (int t = 0; t < 64; ++t)
    for (int k = 0; k < K; ++k) ids[static_cast<size_t>(t * K + k)] = k;  // experts 0 .. K-1 (rank 0)
  std::vector<float> scores(static_cast<size_t>(64 * K), 1.0f);
  if (name == "bad_id" && me == 0) ids[5] = static_cast<int32_t>(cfg.num_experts);  // outside [-1, E)
  DMOE_CUDA_CHECK(cudaMemcpy(b.ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  DMOE_CUDA_CHECK(cudaMemcpy(b.scores, scores.data(), scores.size() * 4, cudaMemcpyHostToDevice));
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  cudaStream_t s;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  if (name == "timeout") {
    if (me == R - 1) {
      LOG("scenario timeout: this rank skips the barrier and waits");
      std::this_thread::sleep_for(std::chrono::seconds(20));
      LOG("scenario timeout: leaving without teardown");
      std::fflush(stdout);
      _exit(0);
    }
    LOG("EXPECTED_TRAP scenario timeout: entering a barrier the last rank never joins");
    ep.barrier(s);
    DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
    LOG("UNEXPECTED: barrier returned");
    return 1;
  }
  const int64_t T = (name == "unequal_t" && me == R - 1) ? 63 : 64;
  LOG("EXPECTED_TRAP scenario %s: T=%lld", full_name.c_str(), static_cast<long long>(T));
  CombineOptions copt;
  if (fused || scores_mismatch) {
    DispatchOptions o;
    o.fused = FusedRoute::kOn;
    if (scores_mismatch && me == 0) o.scores_TK = b.scores;
    ep.publish_route_dispatch(b.x, b.ids, DType::kInt32, T, b.xg, s, o);
    if (scores_mismatch) copt.algorithm = CombineAlgorithm::kRankPartials;
  } else {
    ep.publish(b.x, b.ids, DType::kInt32, T, s);
    ep.route(T, s);
    ep.dispatch(b.xg, T, s);
  }
  ep.combine(b.y, b.scores, DType::kFloat32, b.out, T, s, copt);
  DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  LOG("scenario %s: this rank completed without a trap", full_name.c_str());
  // The affected rank never gets here; unaffected ranks wait in the combine barrier for it and
  // time out, so reaching this point on every rank is a failure of the scenario.
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scenario, filter;
  int64_t timeout_ms = 20000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--case" && i + 1 < argc) scenario = argv[++i];
    else if (a == "--filter" && i + 1 < argc) filter = argv[++i];
    else if (a == "--timeout-ms" && i + 1 < argc) timeout_ms = std::atoll(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--case unequal_t|overflow|bad_id|timeout|unequal_t_fused|overflow_fused|bad_id_fused] "
                   "[--filter NAME] [--timeout-ms MS]\n",
                   argv[0]);
      return 2;
    }
  }
  try {
    const auto env = dist_moe::testing::dist_env_from_environment();
    g_rank = env.rank;
    g_world = env.world;
    int ndev = 0;
    const cudaError_t dev_err = cudaGetDeviceCount(&ndev);
    if (dev_err != cudaSuccess || ndev < 1) {
      LOG("SKIP: no usable CUDA device (%s)", dev_err != cudaSuccess ? cudaGetErrorString(dev_err) : "0 devices");
      return 0;
    }
    int cc_major = 0;
    DMOE_CUDA_CHECK(cudaSetDevice(env.local_rank % ndev));
    DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, env.local_rank % ndev));
    if (cc_major != 9) {
      LOG("SKIP: needs an SM90 GPU (found compute capability %d.x)", cc_major);
      return 0;
    }
    if (env.world > ndev) LOG("warning: %d ranks share %d GPUs", env.world, ndev);
    const ncclUniqueId id = dist_moe::testing::exchange_unique_id(env, "comm_tests");
    CommunicatorOptions opts;
    opts.timeout_ms = scenario.empty() ? timeout_ms : std::min<int64_t>(timeout_ms, 5000);
    auto comm = Communicator::from_unique_id(id, env.rank, env.world, opts);
    LOG("communicator up: %d ranks, device %d, %d SMs, timeout %lld ms", comm->world_size(), comm->device(),
        comm->num_sms(), static_cast<long long>(comm->timeout_ms()));
    int rc = scenario.empty() ? run_suite(*comm, env, filter) : run_scenario(*comm, scenario);
    comm.reset();
    return rc;
  } catch (const std::exception& e) {
    std::printf("ERROR (rank %d): %s\n", g_rank, e.what());
    std::fflush(stdout);
    _exit(3);  // no teardown: after a device trap NCCL and CUDA teardown can hang
  }
}
