// Dispatch / combine benchmark on the NCCL device API, one process per GPU (dmoe_launch).
//
//   dmoe_launch -n 2 -- bench_dispatch_combine [--shape dsv3_prefill,dsv3_decode|all] [--iters N]
//                                              [--routing uniform|zipf] [--align A] [--no-sweep]
//
// Prints, in one run and per shape: our publish / route / dispatch / combine times (eager and
// CUDA-graphed), their GB/s, the NVLink ceiling measured in the same run for the same bytes (LSA
// remote loads, LSA remote stores, copy engine from the peer mapping: the best of the three is the
// ceiling), NCCL's all-to-all (grouped ncclSend/ncclRecv with host-known counts) of the same rows,
// ratios, bandwidth against the number of SMs, and the issue's targets as PASS/FAIL lines.
//
// Bytes. routed remote bytes = rows this rank gathers from other ranks, one per route (what a
// per-route all-to-all such as NCCL's moves over NVLink); unique remote bytes = distinct (rank,
// token) rows it needs from other ranks (what token-once dispatch moves). eff GB/s = routed remote
// bytes / time; link GB/s = bytes that actually crossed NVLink / time. %ceil = eff GB/s / ceiling.
// Times are the slowest rank's; bytes are averaged over ranks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "testing/routing_patterns.h"
#include "testing/main_guard.h"
#include "dist_moe/check.h"
#include "dist_moe/comm.h"
#include "dist_moe/device/comm/memory.cuh"
#include "dist_moe/device/numeric/bf16.cuh"
#include "testing/dist_env.h"

namespace {

using namespace dist_moe;
using namespace dist_moe::comm;

int g_rank = 0, g_world = 1;

// The floor of the graphed timing: a kernel that does nothing, launched like the EP kernels.
__global__ void empty_kernel() {}

void launch_empty(cudaStream_t s, int ctas, int threads, bool cooperative) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(ctas);
  cfg.blockDim = dim3(threads);
  cfg.stream = s;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cfg.attrs = cooperative ? &attr : nullptr;
  cfg.numAttrs = cooperative ? 1 : 0;
  DMOE_CUDA_CHECK(cudaLaunchKernelEx(&cfg, empty_kernel));
}

struct Shape {
  std::string name;
  int64_t T, D, E, K;
  int iters, warmup;
};

const std::vector<Shape>& all_shapes() {
  static const std::vector<Shape> v = {{"dsv3_prefill", 4096, 7168, 256, 8, 20, 3},
                                       {"dsv3_decode", 128, 7168, 256, 8, 300, 30},
                                       {"qwen3_30b", 8192, 2048, 128, 8, 20, 3},
                                       {"mixtral", 4096, 4096, 8, 2, 20, 3}};
  return v;
}

// ---- NVLink ceiling kernels ------------------------------------------------------------------------

template <bool kCgLoad>
__global__ void __launch_bounds__(512) copy_kernel(const int4* __restrict__ src, int4* __restrict__ dst, int64_t n) {
  constexpr int kU = 8;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t nt = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = tid; base < n; base += nt * kU) {
    int4 v[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (base + u * nt < n) v[u] = kCgLoad ? ld_cg_v4(src + base + u * nt) : ld_nc_v4(src + base + u * nt);
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (base + u * nt < n) st_v4(dst + base + u * nt, v[u]);
  }
}

// ---- helpers ---------------------------------------------------------------------------------------

double all_reduce(const Communicator& comm, double v, ncclRedOp_t op) {
  double* d = nullptr;
  DMOE_CUDA_CHECK(cudaMalloc(&d, sizeof(double)));
  DMOE_CUDA_CHECK(cudaMemcpy(d, &v, sizeof(double), cudaMemcpyHostToDevice));
  DMOE_NCCL_CHECK(ncclAllReduce(d, d, 1, ncclFloat64, op, comm.nccl_comm(), nullptr));
  DMOE_CUDA_CHECK(cudaMemcpy(&v, d, sizeof(double), cudaMemcpyDeviceToHost));
  DMOE_CUDA_CHECK(cudaFree(d));
  return v;
}
double max_over_ranks(const Communicator& c, double v) { return all_reduce(c, v, ncclMax); }
double mean_over_ranks(const Communicator& c, double v) { return all_reduce(c, v, ncclSum) / g_world; }

void sync_all(const Communicator& comm) {
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  comm.host_barrier();
}

// Times `body` (enqueues one iteration on `s`) over iters iterations after warmup; microseconds per
// iteration on this rank, all ranks starting together.
template <typename F>
double time_loop(const Communicator& comm, cudaStream_t s, int warmup, int iters, F&& body) {
  for (int i = 0; i < warmup; ++i) body();
  sync_all(comm);
  cudaEvent_t a, b;
  DMOE_CUDA_CHECK(cudaEventCreate(&a));
  DMOE_CUDA_CHECK(cudaEventCreate(&b));
  DMOE_CUDA_CHECK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) body();
  DMOE_CUDA_CHECK(cudaEventRecord(b, s));
  DMOE_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  DMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  DMOE_CUDA_CHECK(cudaEventDestroy(a));
  DMOE_CUDA_CHECK(cudaEventDestroy(b));
  return 1000.0 * ms / iters;
}

// A decode step captured the way a caller graphs a layer: kStepReps x (op_a, op_b) in one graph, with
// event-record nodes (cudaEventRecordExternal) around each op. Returns {op_a us, op_b us, step us
// without the event nodes, op_a alone per step us}, each the mean over steps and replays, max over
// ranks; empty when this driver cannot time events in graphs.
constexpr int kStepReps = 16;
template <typename A, typename B>
std::vector<double> in_graph_step_us(const Communicator& comm, cudaStream_t s, A&& op_a, B&& op_b) {
  std::vector<cudaEvent_t> ev(2 * kStepReps + 1);
  for (auto& e : ev) DMOE_CUDA_CHECK(cudaEventCreate(&e));
  bool ok = true;
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  DMOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kStepReps && ok; ++i) {
    ok = cudaEventRecordWithFlags(ev[2 * i], s, cudaEventRecordExternal) == cudaSuccess;
    op_a();
    ok = ok && cudaEventRecordWithFlags(ev[2 * i + 1], s, cudaEventRecordExternal) == cudaSuccess;
    op_b();
  }
  ok = ok && cudaEventRecordWithFlags(ev[2 * kStepReps], s, cudaEventRecordExternal) == cudaSuccess;
  const cudaError_t end = cudaStreamEndCapture(s, &g);
  const bool captured = ok && end == cudaSuccess && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess;
  ok = captured;
  (void)cudaGetLastError();
  std::vector<double> us(4, 0.0);  // op_a, op_b, step without event nodes, op_a alone per step
  constexpr int kWarm = 3, kReplays = 10;
  // Replays depend only on `captured` (the same on every rank): a rank that stopped replaying
  // would leave its peers waiting at the ops' EP barriers.
  for (int r = 0; r < kWarm + kReplays && captured; ++r) {
    if (r == kWarm) sync_all(comm);
    DMOE_CUDA_CHECK(cudaGraphLaunch(ge, s));
    DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < kStepReps && r >= kWarm; ++i)
      for (int k = 0; k < 2; ++k) {
        float ms = 0;
        ok = ok && cudaEventElapsedTime(&ms, ev[2 * i + k], ev[2 * i + k + 1]) == cudaSuccess;
        us[static_cast<size_t>(k)] += 1000.0 * ms / (kStepReps * kReplays);
      }
  }
  (void)cudaGetLastError();
  if (ge) DMOE_CUDA_CHECK(cudaGraphExecDestroy(ge));
  if (g) DMOE_CUDA_CHECK(cudaGraphDestroy(g));
  ge = nullptr;
  g = nullptr;
  // The same steps without the event nodes between the ops: the step time as a caller's graph has
  // it (us[2]), to tell what the per-op event nodes add; then op_a alone kStepReps times (us[3]):
  // us[2] - us[3] is what op_b adds to a graphed step.
  for (int only_a = 0; only_a < 2 && captured; ++only_a) {
    DMOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kStepReps; ++i) {
      op_a();
      if (!only_a) op_b();
    }
    DMOE_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    DMOE_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    for (int r = 0; r < kWarm + kReplays; ++r) {
      if (r == kWarm) sync_all(comm);
      DMOE_CUDA_CHECK(cudaEventRecord(ev[0], s));
      DMOE_CUDA_CHECK(cudaGraphLaunch(ge, s));
      DMOE_CUDA_CHECK(cudaEventRecord(ev[1], s));
      DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
      float ms = 0;
      DMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[0], ev[1]));
      if (r >= kWarm) us[static_cast<size_t>(2 + only_a)] += 1000.0 * ms / (kStepReps * kReplays);
    }
    DMOE_CUDA_CHECK(cudaGraphExecDestroy(ge));
    DMOE_CUDA_CHECK(cudaGraphDestroy(g));
  }
  for (auto& e : ev) DMOE_CUDA_CHECK(cudaEventDestroy(e));
  // Every rank must take the same branch (the max below is collective).
  const bool all_ok = max_over_ranks(comm, ok ? 0.0 : 1.0) == 0.0;
  if (!all_ok) return {};
  for (auto& v : us) v = max_over_ranks(comm, v);
  return us;
}

// Runs `iters` iterations of a sequence of `nseg` stages and returns the mean time of each stage
// (events between stages, no host synchronization inside the loop).
template <typename F>
std::vector<double> time_stages(const Communicator& comm, cudaStream_t s, int nseg, int warmup, int iters, F&& stage) {
  for (int i = 0; i < warmup; ++i)
    for (int k = 0; k < nseg; ++k) stage(k);
  sync_all(comm);
  std::vector<cudaEvent_t> ev(static_cast<size_t>(iters) * (nseg + 1));
  for (auto& e : ev) DMOE_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < iters; ++i) {
    for (int k = 0; k < nseg; ++k) {
      DMOE_CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(i) * (nseg + 1) + k], s));
      stage(k);
    }
    DMOE_CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(i) * (nseg + 1) + nseg], s));
  }
  DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  std::vector<double> us(static_cast<size_t>(nseg), 0.0);
  for (int i = 0; i < iters; ++i)
    for (int k = 0; k < nseg; ++k) {
      float ms = 0;
      DMOE_CUDA_CHECK(cudaEventElapsedTime(&ms, ev[static_cast<size_t>(i) * (nseg + 1) + k],
                                           ev[static_cast<size_t>(i) * (nseg + 1) + k + 1]));
      us[static_cast<size_t>(k)] += 1000.0 * ms / iters;
    }
  for (auto& e : ev) DMOE_CUDA_CHECK(cudaEventDestroy(e));
  return us;
}

struct Row {
  std::string shape, op;
  double us = 0, remote_mb = 0, eff = 0, link = 0, ceil = 0, nccl_us = 0;
};
std::vector<Row> g_rows;
std::vector<std::string> g_targets;
std::vector<std::string> g_sweep;
std::vector<std::pair<std::string, std::vector<double>>> g_in_graph;  // decode step in one graph

void target(const std::string& what, bool pass, const std::string& detail) {
  g_targets.push_back(std::string(pass ? "PASS " : "FAIL ") + what + "  (" + detail + ")");
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), f, a, b, c);
  return buf;
}

void bench_shape(const Communicator& comm, const Shape& sh, testing::RoutingPattern pattern, int align, bool sweep) {
  const int R = g_world, me = g_rank;
  const int64_t T = sh.T, D = sh.D, K = sh.K, E = sh.E, row_bytes = D * 2;
  EpConfig cfg;
  cfg.max_tokens = T;
  cfg.hidden = D;
  cfg.top_k = K;
  cfg.num_experts = E;
  cfg.row_alignment = align;
  EpGroup ep(comm, cfg);
  const int64_t L = E / R, cap = ep.capacity_rows();

  // ---- inputs (every rank builds all ranks' ids for the byte counts) ----
  const auto ids = testing::make_routing_ids(pattern, R, T, static_cast<int>(K), static_cast<int>(E), 4242);
  std::vector<std::vector<int64_t>> routed(R, std::vector<int64_t>(R, 0)), unique(R, std::vector<int64_t>(R, 0));
  for (int s = 0; s < R; ++s)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<char> hit(static_cast<size_t>(R), 0);
      for (int64_t k = 0; k < K; ++k) {
        const int32_t id = ids[s][static_cast<size_t>(t * K + k)];
        if (id < 0) continue;
        const int d = static_cast<int>(id / L);
        routed[s][d] += 1;
        hit[static_cast<size_t>(d)] = 1;
      }
      for (int d = 0; d < R; ++d) unique[s][d] += hit[static_cast<size_t>(d)];
    }
  int64_t routed_remote_rows = 0, unique_remote_rows = 0, recv_rows = 0, send_rows = 0;
  for (int s = 0; s < R; ++s) {
    recv_rows += routed[s][me];
    send_rows += routed[me][s];
    if (s == me) continue;
    routed_remote_rows += routed[s][me];
    unique_remote_rows += unique[s][me];
  }
  const double routed_remote_bytes = mean_over_ranks(comm, static_cast<double>(routed_remote_rows * row_bytes));
  const double unique_remote_bytes = mean_over_ranks(comm, static_cast<double>(unique_remote_rows * row_bytes));
  const double remote_mb = routed_remote_bytes / 1e6;

  void *x, *idsd, *scores, *xg, *out;
  DMOE_CUDA_CHECK(cudaMalloc(&x, static_cast<size_t>(T * row_bytes)));
  DMOE_CUDA_CHECK(cudaMalloc(&idsd, static_cast<size_t>(T * K * 4)));
  DMOE_CUDA_CHECK(cudaMalloc(&scores, static_cast<size_t>(T * K * 4)));
  DMOE_CUDA_CHECK(cudaMalloc(&xg, static_cast<size_t>(cap * row_bytes)));
  DMOE_CUDA_CHECK(cudaMalloc(&out, static_cast<size_t>(T * row_bytes)));
  {
    std::mt19937 rng(static_cast<unsigned>(me) + 1u);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    std::vector<uint16_t> hx(static_cast<size_t>(T * D));
    for (auto& v : hx) v = numeric::float_to_bf16(u(rng)).bits;
    std::vector<float> hs(static_cast<size_t>(T * K));
    for (size_t i = 0; i < hs.size(); ++i) hs[i] = ids[me][i] >= 0 ? 0.5f * (u(rng) + 1.f) : 0.f;
    DMOE_CUDA_CHECK(cudaMemcpy(x, hx.data(), hx.size() * 2, cudaMemcpyHostToDevice));
    DMOE_CUDA_CHECK(cudaMemcpy(idsd, ids[me].data(), ids[me].size() * 4, cudaMemcpyHostToDevice));
    DMOE_CUDA_CHECK(cudaMemcpy(scores, hs.data(), hs.size() * 4, cudaMemcpyHostToDevice));
    DMOE_CUDA_CHECK(cudaMemset(xg, 0, static_cast<size_t>(cap * row_bytes)));
  }
  cudaStream_t s;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int iters = sh.iters, warmup = sh.warmup;
  const int peer = (me + 1) % R;

  // ---- NVLink ceilings for this rank's routed remote bytes (all ranks at once) ----
  const int64_t ceil_bytes = std::min<int64_t>(static_cast<int64_t>(ep.combine_window().bytes()),
                                               std::max<int64_t>(16, routed_remote_rows * row_bytes / 16 * 16));
  const int64_t ceil_vec = ceil_bytes / 16;
  void* local_buf = nullptr;
  DMOE_CUDA_CHECK(cudaMalloc(&local_buf, static_cast<size_t>(ceil_bytes)));
  DMOE_CUDA_CHECK(cudaMemset(local_buf, 0, static_cast<size_t>(ceil_bytes)));
  // The uploads and memsets above ran on the legacy stream, which `s` (non-blocking) does not wait for.
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  int4* peer_buf = reinterpret_cast<int4*>(ep.combine_window_bases()[peer]);  // [T, K, D] >= routed rows
  const int grid = 2 * comm.num_sms();
  double t_load = 0, t_store = 0, t_ce = -1;
  if (R > 1) {
    t_load = time_loop(comm, s, warmup, iters, [&] {
      copy_kernel<true><<<grid, 512, 0, s>>>(peer_buf, static_cast<int4*>(local_buf), ceil_vec);
    });
    t_store = time_loop(comm, s, warmup, iters, [&] {
      copy_kernel<false><<<grid, 512, 0, s>>>(static_cast<const int4*>(local_buf), peer_buf, ceil_vec);
    });
    const cudaError_t e = cudaMemcpyAsync(local_buf, peer_buf, static_cast<size_t>(ceil_bytes), cudaMemcpyDeviceToDevice, s);
    if (e == cudaSuccess) {
      t_ce = time_loop(comm, s, warmup, iters, [&] {
        DMOE_CUDA_CHECK(cudaMemcpyAsync(local_buf, peer_buf, static_cast<size_t>(ceil_bytes), cudaMemcpyDeviceToDevice, s));
      });
    } else {
      (void)cudaGetLastError();
      if (me == 0) std::printf("note: copy engine from the peer mapping unavailable: %s\n", cudaGetErrorString(e));
      sync_all(comm);
    }
    DMOE_CUDA_CHECK(cudaGetLastError());
  }
  t_load = max_over_ranks(comm, t_load);
  t_store = max_over_ranks(comm, t_store);
  const double t_ce_all = max_over_ranks(comm, t_ce);
  const bool ce_ok = all_reduce(comm, t_ce < 0 ? 1.0 : 0.0, ncclSum) == 0.0;
  auto gbs = [](double bytes, double us) { return us > 0 ? bytes / (us * 1e3) : 0.0; };
  const double bw_load = gbs(routed_remote_bytes, t_load), bw_store = gbs(routed_remote_bytes, t_store);
  const double bw_ce = ce_ok ? gbs(routed_remote_bytes, t_ce_all) : 0.0;
  const double ceiling = std::max({bw_load, bw_store, bw_ce});
  g_rows.push_back({sh.name, "ceiling: LSA remote loads", t_load, remote_mb, bw_load, bw_load, ceiling, 0});
  g_rows.push_back({sh.name, "ceiling: LSA remote stores", t_store, remote_mb, bw_store, bw_store, ceiling, 0});
  g_rows.push_back({sh.name, "ceiling: copy engine (peer map)", ce_ok ? t_ce_all : 0, remote_mb, bw_ce, bw_ce, ceiling, 0});
  DMOE_CUDA_CHECK(cudaFree(local_buf));

  // ---- NCCL all-to-all of the same rows (grouped send/recv, host-known counts) ----
  double t_nccl = 0;
  {
    void *sendb, *recvb;
    DMOE_CUDA_CHECK(cudaMalloc(&sendb, static_cast<size_t>(std::max<int64_t>(1, send_rows) * row_bytes)));
    DMOE_CUDA_CHECK(cudaMalloc(&recvb, static_cast<size_t>(std::max<int64_t>(1, recv_rows) * row_bytes)));
    auto a2a = [&] {
      DMOE_NCCL_CHECK(ncclGroupStart());
      int64_t so = 0, ro = 0;
      for (int p = 0; p < R; ++p) {
        const int64_t sn = routed[me][p], rn = routed[p][me];
        DMOE_NCCL_CHECK(ncclSend(static_cast<char*>(sendb) + so * row_bytes, static_cast<size_t>(sn * D), ncclBfloat16, p,
                                 comm.nccl_comm(), s));
        DMOE_NCCL_CHECK(ncclRecv(static_cast<char*>(recvb) + ro * row_bytes, static_cast<size_t>(rn * D), ncclBfloat16, p,
                                 comm.nccl_comm(), s));
        so += sn;
        ro += rn;
      }
      DMOE_NCCL_CHECK(ncclGroupEnd());
    };
    t_nccl = max_over_ranks(comm, time_loop(comm, s, warmup, iters, a2a));
    DMOE_CUDA_CHECK(cudaFree(sendb));
    DMOE_CUDA_CHECK(cudaFree(recvb));
  }
  g_rows.push_back({sh.name, "NCCL all-to-all (send/recv)", t_nccl, remote_mb, gbs(routed_remote_bytes, t_nccl),
                    gbs(routed_remote_bytes, t_nccl), ceiling, t_nccl});

  // ---- our ops, eager, in their natural sequence ----
  // Stages: 0 publish, 1 route, 2 dispatch, 3 combine (separate ops); a fused call replaces 0-2 by one
  // publish_route_dispatch and reports it as stage 0 (stages 1 and 2 are empty).
  struct Variant {
    DispatchMode dm = DispatchMode::kTokenOnce;
    bool fused = false;
    CombineOptions c;
  };
  auto combine_opts = [](CombineAlgorithm algo, CombineSync sync, int rw = 0, int batch = 0, int kg = 0,
                         int rc = 0) {
    CombineOptions c;
    c.reduce_ctas = rc;
    c.algorithm = algo;
    c.sync = sync;
    c.reduce_warps = rw;
    c.signal_batch = batch;
    c.k_group = kg;
    return c;
  };
  auto run_eager = [&](const Variant& v, int sms) {
    DispatchOptions d;
    d.mode = v.dm;
    d.num_sms = sms;
    d.fused = v.fused ? FusedRoute::kOn : FusedRoute::kOff;
    CombineOptions c = v.c;
    c.num_sms = sms;
    auto us = time_stages(comm, s, 4, warmup, iters, [&](int k) {
      if (v.fused) {
        if (k == 0) ep.publish_route_dispatch(x, idsd, DType::kInt32, T, xg, s, d);
        if (k == 3) ep.combine(xg, scores, DType::kFloat32, out, T, s, c);
        return;
      }
      switch (k) {
        case 0: ep.publish(x, idsd, DType::kInt32, T, s); break;
        case 1: ep.route(T, s); break;
        case 2: ep.dispatch(xg, T, s, d); break;
        default: ep.combine(xg, scores, DType::kFloat32, out, T, s, c); break;
      }
    });
    for (auto& v2 : us) v2 = max_over_ranks(comm, v2);
    return us;
  };
  const bool fused_ok = ep.fused_route_supported();
  Variant v_tok_bar1{DispatchMode::kTokenOnce, false, combine_opts(CombineAlgorithm::kV1, CombineSync::kBarrier)};
  Variant v_rte_sig1{DispatchMode::kPerRoute, false, combine_opts(CombineAlgorithm::kV1, CombineSync::kSignal)};
  Variant v_tok_bar2{DispatchMode::kTokenOnce, false, combine_opts(CombineAlgorithm::kV2, CombineSync::kBarrier)};
  Variant v_tok_sig2{DispatchMode::kTokenOnce, false, combine_opts(CombineAlgorithm::kV2, CombineSync::kSignal)};
  const auto tok_bar = run_eager(v_tok_bar1, 0);
  const auto rte_sig = run_eager(v_rte_sig1, 0);
  const auto tok_bar2 = run_eager(v_tok_bar2, 0);
  const auto tok_sig2 = run_eager(v_tok_sig2, 0);
  // Owners pre-reduce their routes of a token (fewer bytes cross; rank-partials rounding order).
  Variant v_tok_part{DispatchMode::kTokenOnce, false, combine_opts(CombineAlgorithm::kRankPartials, CombineSync::kBarrier)};
  const auto tok_part = run_eager(v_tok_part, 0);
  Variant v_tok_part_sig{DispatchMode::kTokenOnce, false, combine_opts(CombineAlgorithm::kRankPartials, CombineSync::kSignal)};
  const auto tok_part_sig = run_eager(v_tok_part_sig, 0);
  std::vector<double> fused_sig2;
  if (fused_ok) fused_sig2 = run_eager({DispatchMode::kTokenOnce, true, v_tok_sig2.c}, 0);
  auto add_op = [&](const std::string& op, double us, double link_bytes) {
    if (link_bytes <= 0)  // local-only or metadata step: time only
      g_rows.push_back({sh.name, op, us, 0, 0, 0, 0, 0});
    else
      g_rows.push_back({sh.name, op, us, remote_mb, gbs(routed_remote_bytes, us), gbs(link_bytes, us), ceiling, t_nccl});
  };
  add_op("publish (local copy of x, ids)", tok_bar[0], 0);
  add_op("route (EP barrier + metadata)", tok_bar[1], 0);
  add_op("dispatch token_once", tok_bar[2], unique_remote_bytes);
  add_op("dispatch per_route", rte_sig[2], routed_remote_bytes);
  add_op("route + dispatch token_once", tok_bar[1] + tok_bar[2], unique_remote_bytes);
  if (fused_ok) add_op("publish+route+dispatch fused", fused_sig2[0], unique_remote_bytes);
  add_op("combine v1 barrier", tok_bar[3], routed_remote_bytes);
  add_op("combine v1 signal", rte_sig[3], routed_remote_bytes);
  add_op("combine v2 barrier", tok_bar2[3], routed_remote_bytes);
  add_op("combine v2 signal", tok_sig2[3], routed_remote_bytes);
  add_op("combine rank partials", tok_part[3], routed_remote_bytes);
  add_op("combine rank partials signal", tok_part_sig[3], routed_remote_bytes);

  // v2 signal tuning (reduce warps per 16, units per fence, k per unit): eager, after separate ops.
  double comb_best = std::min({tok_bar[3], rte_sig[3], tok_bar2[3], tok_sig2[3], tok_part[3], tok_part_sig[3]});
  std::string comb_best_name = tok_bar[3] <= comb_best ? "v1 barrier"
                               : rte_sig[3] <= comb_best ? "v1 signal"
                               : tok_bar2[3] <= comb_best ? "v2 barrier"
                               : tok_sig2[3] <= comb_best ? "v2 signal"
                               : tok_part[3] <= comb_best ? "rank partials" : "rank partials signal";
  struct Tune {
    int rw, batch, kg, rc = 0;  // rc > 0: CTA-specialized signal mode (C6), rw unused
  };
  std::vector<Tune> tunes;
  if (sh.name == "dsv3_prefill" || sh.name == "dsv3_decode")
    tunes = {{2, 1, 0}, {8, 1, 0}, {4, 4, 0}, {4, 1, 1}, {4, 1, static_cast<int>(K)}, {6, 2, 0}};
  // C6: the last rc CTAs (of 2 per SM) reduce, the others scatter (DMOE_COMBINE_REDUCE_CTAS).
  if (sh.name == "dsv3_prefill")
    tunes.insert(tunes.end(), {{0, 1, 0, 66}, {0, 1, 0, 88}, {0, 1, 0, 132}, {0, 4, 0, 88}});
  if (sh.name == "dsv3_decode")
    tunes.insert(tunes.end(), {{0, 1, 0, 32}, {0, 1, 0, 66}, {0, 1, 0, 132}});
  std::vector<std::pair<std::string, CombineOptions>> graph_tunes;
  for (const Tune& tn : tunes) {
    const CombineOptions c = combine_opts(CombineAlgorithm::kV2, CombineSync::kSignal, tn.rw, tn.batch, tn.kg, tn.rc);
    const auto us = run_eager({DispatchMode::kTokenOnce, false, c}, 0);
    char name[96];
    if (tn.rc > 0)
      std::snprintf(name, sizeof(name), "combine v2 signal rc%d b%d kg%s", tn.rc, tn.batch,
                    tn.kg == 0 ? "auto" : std::to_string(tn.kg).c_str());
    else
      std::snprintf(name, sizeof(name), "combine v2 signal rw%d b%d kg%s", tn.rw, tn.batch,
                    tn.kg == 0 ? "auto" : std::to_string(tn.kg).c_str());
    add_op(name, us[3], routed_remote_bytes);
    if (us[3] < comb_best) {
      comb_best = us[3];
      comb_best_name = name + 8;  // without "combine "
    }
    graph_tunes.push_back({name, c});
  }

  // ---- CUDA graphs ----
  auto capture = [&](auto&& body) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    DMOE_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    body();
    DMOE_CUDA_CHECK(cudaStreamEndCapture(s, &g));
    DMOE_CUDA_CHECK(cudaGraphInstantiate(&ge, g, 0));
    DMOE_CUDA_CHECK(cudaGraphDestroy(g));
    return ge;
  };
  // Per-stage times of a sequence of graphs replayed in a loop (max over ranks).
  auto graph_times = [&](const std::vector<cudaGraphExec_t>& seq) {
    auto us = time_stages(comm, s, static_cast<int>(seq.size()), warmup, iters,
                          [&](int k) { DMOE_CUDA_CHECK(cudaGraphLaunch(seq[static_cast<size_t>(k)], s)); });
    for (auto& v : us) v = max_over_ranks(comm, v);
    return us;
  };
  // A rank-partials combine in barrier sync that sums the own partials in its reduction
  // (DMOE_COMBINE_OWN_PARTIALS=late, read when the call is enqueued or captured).
  auto combine_own_late = [&](const CombineOptions& c) {
    setenv("DMOE_COMBINE_OWN_PARTIALS", "late", 1);
    ep.combine(xg, scores, DType::kFloat32, out, T, s, c);
    unsetenv("DMOE_COMBINE_OWN_PARTIALS");
  };
  // The fused route, and the same pushing the scores with the ids (for the rank-partials combine).
  DispatchOptions d_fused;
  d_fused.fused = FusedRoute::kOn;
  DispatchOptions d_push = d_fused;
  d_push.scores_TK = scores;
  d_push.score_dtype = DType::kFloat32;
  double g_md = 0, g_fused = -1, g_reduce = 0;
  struct Floor {
    double coop = -1, plain = -1, tiny = -1;  // graphed empty kernel: SMs x 512 cooperative / not, 1 x 32
  } g_comb_floor;
  std::vector<std::pair<std::string, double>> g_comb;  // graphed combine variants (after separate ops)
  {
    DispatchOptions d_sep;
    d_sep.fused = FusedRoute::kOff;
    cudaGraphExec_t gp = capture([&] { ep.publish(x, idsd, DType::kInt32, T, s); });
    cudaGraphExec_t gmd = capture([&] {
      ep.route(T, s);
      ep.dispatch(xg, T, s, d_sep);
    });
    std::vector<std::pair<std::string, CombineOptions>> cvars = {
        {"graph: combine v1 barrier", combine_opts(CombineAlgorithm::kV1, CombineSync::kBarrier)},
        {"graph: combine v1 signal", combine_opts(CombineAlgorithm::kV1, CombineSync::kSignal)},
        {"graph: combine v2 barrier", combine_opts(CombineAlgorithm::kV2, CombineSync::kBarrier)},
        {"graph: combine v2 signal", combine_opts(CombineAlgorithm::kV2, CombineSync::kSignal)},
        {"graph: combine rank partials", combine_opts(CombineAlgorithm::kRankPartials, CombineSync::kBarrier)},
        {"graph: combine rank partials signal", combine_opts(CombineAlgorithm::kRankPartials, CombineSync::kSignal)}};
    if (sh.name == "dsv3_decode")
      for (const auto& gt : graph_tunes) cvars.push_back({"graph: " + gt.first, gt.second});
    for (const auto& cv : cvars) {
      cudaGraphExec_t gc = capture([&] { ep.combine(xg, scores, DType::kFloat32, out, T, s, cv.second); });
      const auto us = graph_times({gp, gmd, gc});
      if (g_comb.empty()) g_md = us[1];
      g_comb.push_back({cv.first, us[2]});
      DMOE_CUDA_CHECK(cudaGraphExecDestroy(gc));
    }
    if (fused_ok) {
      cudaGraphExec_t gf = capture([&] { ep.publish_route_dispatch(x, idsd, DType::kInt32, T, xg, s, d_fused); });
      cudaGraphExec_t gc = capture([&] { ep.combine(xg, scores, DType::kFloat32, out, T, s, cvars[3].second); });
      g_fused = graph_times({gf, gc})[0];
      DMOE_CUDA_CHECK(cudaGraphExecDestroy(gf));
      DMOE_CUDA_CHECK(cudaGraphExecDestroy(gc));
      // The rank-partials combine after a fused route that pushed the scores with the ids (no
      // scores exchange in the combine; docs/perf.md C12).
      cudaGraphExec_t gfp = capture([&] { ep.publish_route_dispatch(x, idsd, DType::kInt32, T, xg, s, d_push); });
      cudaGraphExec_t gcp = capture([&] { ep.combine(xg, scores, DType::kFloat32, out, T, s, cvars[4].second); });
      g_comb.push_back({"graph: combine rank partials, scores pushed", graph_times({gfp, gcp})[1]});
      DMOE_CUDA_CHECK(cudaGraphExecDestroy(gcp));
      // The same, own partials summed in the reduction (docs/perf.md C13; an environment A/B switch
      // read when the combine is captured), and in signal mode.
      gcp = capture([&] { combine_own_late(cvars[4].second); });
      g_comb.push_back({"graph: combine rank partials late, scores pushed", graph_times({gfp, gcp})[1]});
      DMOE_CUDA_CHECK(cudaGraphExecDestroy(gcp));
      gcp = capture([&] { ep.combine(xg, scores, DType::kFloat32, out, T, s, cvars[5].second); });
      g_comb.push_back({"graph: combine rank partials signal, scores pushed", graph_times({gfp, gcp})[1]});
      DMOE_CUDA_CHECK(cudaGraphExecDestroy(gfp));
      DMOE_CUDA_CHECK(cudaGraphExecDestroy(gcp));
    }
    // Decode: the graphed fused route and the combine on fewer SMs -- at T = 128 a 132 x 1024-thread
    // grid mostly launches, drains and contends for the same id lines (docs/perf.md C5, C9).
    if (fused_ok && sh.name == "dsv3_decode") {
      for (int sms : {16, 32, 48, 66, 96, 132}) {
        if (sms > comm.num_sms()) continue;
        DispatchOptions d = d_fused;
        d.num_sms = sms;
        CombineOptions cb = cvars[2].second;  // v2 barrier
        cb.num_sms = sms;
        CombineOptions cs = combine_opts(CombineAlgorithm::kV2, CombineSync::kSignal, 8, 1, 0);  // rw8
        cs.num_sms = sms;
        cudaGraphExec_t gf = capture([&] { ep.publish_route_dispatch(x, idsd, DType::kInt32, T, xg, s, d); });
        cudaGraphExec_t gb = capture([&] { ep.combine(xg, scores, DType::kFloat32, out, T, s, cb); });
        cudaGraphExec_t gs = capture([&] { ep.combine(xg, scores, DType::kFloat32, out, T, s, cs); });
        const auto tb = graph_times({gf, gb});
        const auto ts = graph_times({gf, gs});
        char line[256];
        std::snprintf(line, sizeof(line),
                      "%-14s %4d SMs  graphed: publish+route+dispatch fused %6.1f us | combine v2 barrier %6.1f us | "
                      "combine v2 signal rw8 %6.1f us",
                      sh.name.c_str(), sms, std::min(tb[0], ts[0]), tb[1], ts[1]);
        g_sweep.push_back(line);
        for (auto ge : {gf, gb, gs}) DMOE_CUDA_CHECK(cudaGraphExecDestroy(ge));
      }
      // A decode step as a real caller graphs it: kStepReps x (fused route+dispatch, combine) in ONE
      // graph, per-op times from event-record nodes between them. The rows above launch each op as
      // its own graph with host events around it, which adds a graph launch per op (docs/perf.md C10).
      struct StepVariant {
        std::string first;  // the combine's name
        CombineOptions second;
        bool push_scores;   // the fused route pushes the scores with the ids
      };
      for (const auto& cv : {StepVariant{"combine v2 barrier", cvars[2].second, false},
                             StepVariant{"combine v2 signal rw8",
                                         combine_opts(CombineAlgorithm::kV2, CombineSync::kSignal, 8, 1, 0), false},
                             StepVariant{"combine rank partials", cvars[4].second, false},
                             StepVariant{"rank partials, pushed", cvars[4].second, true},
                             StepVariant{"rank partials signal, pushed", cvars[5].second, true}}) {
        const DispatchOptions& dr = cv.push_scores ? d_push : d_fused;
        const auto us = in_graph_step_us(comm, s, [&] { ep.publish_route_dispatch(x, idsd, DType::kInt32, T, xg, s, dr); },
                                         [&] { ep.combine(xg, scores, DType::kFloat32, out, T, s, cv.second); });
        char line[256];
        if (us.empty())
          std::snprintf(line, sizeof(line), "%-14s in one graph: event timing inside graphs unsupported here", sh.name.c_str());
        else
          std::snprintf(line, sizeof(line),
                        "%-14s in one graph (%d steps): publish+route+dispatch fused %6.1f us | %-22s %6.1f us | step %6.1f us"
                        " (%.1f us without the event nodes; the fused op alone %.1f us, so the combine adds %.1f us)",
                        sh.name.c_str(), kStepReps, us[0], cv.first.c_str(), us[1], us[0] + us[1], us[2], us[3],
                        us[2] - us[3]);
        g_sweep.push_back(line);
        if (!us.empty()) g_in_graph.push_back({cv.first, us});
      }
    }
    // reduce() alone (EP barrier + reduction of the combine window; the fused pipeline's hook).
    cudaGraphExec_t gr = capture([&] { ep.reduce(scores, DType::kFloat32, out, T, s); });
    g_reduce = graph_times({gr})[0];
    for (auto ge : {gp, gmd, gr}) DMOE_CUDA_CHECK(cudaGraphExecDestroy(ge));
    if (sh.name == "dsv3_decode") {  // what one graphed op costs when its kernel does nothing
      cudaGraphExec_t e0 = capture([&] { launch_empty(s, comm.num_sms(), 512, true); });
      cudaGraphExec_t e1 = capture([&] { launch_empty(s, comm.num_sms(), 512, false); });
      cudaGraphExec_t e2 = capture([&] { launch_empty(s, 1, 32, false); });
      g_comb_floor = {graph_times({e0})[0], graph_times({e1})[0], graph_times({e2})[0]};
      for (auto ge : {e0, e1, e2}) DMOE_CUDA_CHECK(cudaGraphExecDestroy(ge));
    }
  }
  add_op("graph: route + dispatch", g_md, unique_remote_bytes);
  if (g_fused >= 0) add_op("graph: publish+route+dispatch fused", g_fused, unique_remote_bytes);
  for (const auto& gc : g_comb) add_op(gc.first, gc.second, routed_remote_bytes);
  add_op("graph: reduce (EP barrier + top-k)", g_reduce, 0);
  if (g_comb_floor.coop >= 0) {
    add_op("graph: empty kernel, SMs x 512 cooperative", g_comb_floor.coop, 0);
    add_op("graph: empty kernel, SMs x 512", g_comb_floor.plain, 0);
    add_op("graph: empty kernel, 1 x 32", g_comb_floor.tiny, 0);
  }

  // ---- targets ----
  const double disp_best = std::min(tok_bar[2], rte_sig[2]);
  if (sh.name == "dsv3_prefill" && R > 1) {
    const double d_ratio = gbs(routed_remote_bytes, disp_best) / ceiling;
    const double c_ratio = gbs(routed_remote_bytes, comb_best) / ceiling;
    target("dsv3_prefill dispatch >= 85% of NVLink ceiling", d_ratio >= 0.85,
           fmt("%.0f%% of %.0f GB/s; token_once link utilization %.0f%%", 100 * d_ratio, ceiling,
               100 * gbs(unique_remote_bytes, tok_bar[2]) / ceiling));
    target("dsv3_prefill dispatch >= 1.2x NCCL all-to-all", t_nccl / disp_best >= 1.2,
           fmt("%.2fx (route + dispatch: %.2fx)", t_nccl / disp_best, t_nccl / (tok_bar[1] + tok_bar[2])));
    target("dsv3_prefill combine >= 85% of NVLink ceiling", c_ratio >= 0.85,
           fmt("%.0f%% of %.0f GB/s", 100 * c_ratio, ceiling) + ", best: " + comb_best_name);
    target("dsv3_prefill combine >= 1.2x NCCL all-to-all", t_nccl / comb_best >= 1.2,
           fmt("%.2fx", t_nccl / comb_best) + ", best: " + comb_best_name);
  }
  if (sh.name == "dsv3_decode") {
    const double rd = g_fused >= 0 ? std::min(g_md, g_fused) : g_md;
    // The same ops inside one decode-step graph (in_graph_step_us): reported beside, not in, the verdict.
    double ig_fused = 1e30, ig_comb = 1e30, ig_step = 1e30, ig_fused_only = 1e30;
    double ig_comb_adds = 1e30, ig_adds_step = 0, ig_adds_fused = 0;  // the variant whose combine adds least
    std::string ig_adds_name;
    std::string ig_comb_name = "n/a";
    for (const auto& ig : g_in_graph) {
      ig_fused = std::min(ig_fused, ig.second[0]);
      ig_fused_only = std::min(ig_fused_only, ig.second[3]);
      if (ig.second[2] - ig.second[3] < ig_comb_adds) {
        ig_comb_adds = ig.second[2] - ig.second[3];
        ig_adds_step = ig.second[2];
        ig_adds_fused = ig.second[3];
        ig_adds_name = ig.first;
      }
      if (ig.second[1] < ig_comb) {
        ig_comb = ig.second[1];
        ig_comb_name = ig.first;
        ig_step = ig.second[2];
      }
    }
    const std::string ig_fused_s = g_in_graph.empty() ? "n/a" : fmt("%.1f us", ig_fused);
    const std::string ig_comb_s =
        g_in_graph.empty() ? "n/a"
                           : fmt("%.1f us, ", ig_comb) + ig_comb_name +
                                 fmt("; route + this combine per step without per-op event nodes %.1f us, what the best "
                                     "combine adds to such a step %.1f us", ig_step, ig_comb_adds);
    target("dsv3_decode graphed routing metadata + dispatch <= 25 us", rd <= 25.0,
           fmt("route + dispatch %.1f us; publish + route + dispatch fused %.1f us", g_md, g_fused) +
               "; in one step graph: fused " + ig_fused_s +
               (g_in_graph.empty() ? "" : fmt(", the fused op alone per step without event nodes %.1f us", ig_fused_only)));
    double cb = 1e30;
    std::string cb_name;
    for (const auto& gc : g_comb)
      if (gc.second < cb) {
        cb = gc.second;
        cb_name = gc.first.substr(7);  // without "graph: "
      }
    target("dsv3_decode graphed combine <= 25 us", cb <= 25.0,
           fmt("best %.1f us (", cb) + cb_name + fmt("); v1 barrier %.1f us, v1 signal %.1f us", g_comb[0].second,
                                                      g_comb[1].second) +
               "; in one step graph: " + ig_comb_s +
               (g_comb_floor.coop >= 0 ? fmt("; an empty kernel of this grid graphed: %.1f us cooperative, %.1f us not",
                                             g_comb_floor.coop, g_comb_floor.plain) : ""));
    // The same two targets measured as a caller graphs a decode step (kStepReps steps in one graph, no
    // event nodes): the fused op alone per step, and what the best combine adds to a step. The per-op
    // rows above each carry a graph launch and two event records (the empty-kernel rows: ~4.3 us).
    if (!g_in_graph.empty()) {
      target("dsv3_decode step graph: routing metadata + dispatch <= 25 us", ig_fused_only <= 25.0,
             fmt("publish + route + dispatch fused %.1f us per step, %.0f steps in one graph", ig_fused_only, kStepReps));
      target("dsv3_decode step graph: combine <= 25 us", ig_comb_adds <= 25.0,
             "best: " + ig_adds_name +
                 fmt(" adds %.1f us per step (step %.1f us - the fused op alone %.1f us)", ig_comb_adds, ig_adds_step,
                     ig_adds_fused));
    }
  }

  // ---- phase trace of one call per op (dsv3_decode and dsv3_prefill; %globaltimer, this rank) ----
  if (sh.name == "dsv3_decode" || sh.name == "dsv3_prefill") {
    ep.enable_trace(true);
    auto traced = [&](const char* what, auto&& body) {
      std::vector<unsigned long long> tr(kTraceSlots, 0);
      for (int rep = 0; rep < 3; ++rep) {  // the last of three calls is printed
        sync_all(comm);
        DMOE_CUDA_CHECK(cudaMemset(ep.trace_buffer(), 0, kTraceSlots * sizeof(unsigned long long)));
        DMOE_CUDA_CHECK(cudaDeviceSynchronize());
        comm.host_barrier();
        body();
        DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
        DMOE_CUDA_CHECK(cudaMemcpy(tr.data(), ep.trace_buffer(), kTraceSlots * sizeof(unsigned long long),
                                   cudaMemcpyDeviceToHost));
      }
      unsigned long long t0 = 0;
      for (auto v : tr)
        if (v != 0 && (t0 == 0 || v < t0)) t0 = v;
      static const char* names[kTraceSlots] = {
          "route.start", "route.barrier_done", "route.ids_counted", "route.offsets", "route.end(last)", nullptr,
          "dispatch.start", "dispatch.end(last)", "fused.start", "fused.published(last)", "fused.ids_arrival_sent",
          "fused.arrived", "fused.routed", "fused.tables(last)", "fused.end(last)", "fused.rows_arrived", "combine.start",
          "combine.scatter_done(last)", "combine.barrier_done", "combine.first_reduce", "combine.end(last)", nullptr,
          nullptr, nullptr, "publish.start", "publish.end(last)", "fused.headers_ok", "fused.ids_loaded",
          "fused.counted", "fused.arrived(last)", "fused.routed(last)", "combine.scatter_warps_done(last)",
          "fused.recv_counted", "fused.warp_counted", "combine.scores_done", "combine.set_up"};
      std::string line = std::string("trace ") + sh.name + " " + what + ":";
      for (int i = 0; i < kTraceSlots; ++i)
        if (tr[static_cast<size_t>(i)] != 0 && names[i] != nullptr)
          line += std::string(" ") + names[i] + "=" + fmt("%.1f", (tr[static_cast<size_t>(i)] - t0) / 1000.0);
      std::printf("%s (us from the first event)\n", line.c_str());
      std::fflush(stdout);
    };
    DispatchOptions d_sep;
    d_sep.fused = FusedRoute::kOff;
    const CombineOptions cb2 = combine_opts(CombineAlgorithm::kV2, CombineSync::kBarrier);
    const CombineOptions cs2 = combine_opts(CombineAlgorithm::kV2, CombineSync::kSignal);
    const CombineOptions cb1 = combine_opts(CombineAlgorithm::kV1, CombineSync::kBarrier);
    traced("publish,route,dispatch,combine v1 barrier", [&] {
      ep.publish(x, idsd, DType::kInt32, T, s);
      ep.route(T, s);
      ep.dispatch(xg, T, s, d_sep);
      ep.combine(xg, scores, DType::kFloat32, out, T, s, cb1);
    });
    traced("combine v2 barrier (after separate ops)", [&] {
      ep.publish(x, idsd, DType::kInt32, T, s);
      ep.route(T, s);
      ep.dispatch(xg, T, s, d_sep);
      DMOE_CUDA_CHECK(cudaMemsetAsync(ep.trace_buffer(), 0, kTraceSlots * sizeof(unsigned long long), s));
      ep.combine(xg, scores, DType::kFloat32, out, T, s, cb2);
    });
    traced("combine rank partials (after separate ops)", [&] {
      ep.publish(x, idsd, DType::kInt32, T, s);
      ep.route(T, s);
      ep.dispatch(xg, T, s, d_sep);
      DMOE_CUDA_CHECK(cudaMemsetAsync(ep.trace_buffer(), 0, kTraceSlots * sizeof(unsigned long long), s));
      ep.combine(xg, scores, DType::kFloat32, out, T, s, combine_opts(CombineAlgorithm::kRankPartials, CombineSync::kBarrier));
    });
    traced("combine v2 signal (after separate ops)", [&] {
      ep.publish(x, idsd, DType::kInt32, T, s);
      ep.route(T, s);
      ep.dispatch(xg, T, s, d_sep);
      DMOE_CUDA_CHECK(cudaMemsetAsync(ep.trace_buffer(), 0, kTraceSlots * sizeof(unsigned long long), s));
      ep.combine(xg, scores, DType::kFloat32, out, T, s, cs2);
    });
    {
      const CombineOptions cs2c = combine_opts(CombineAlgorithm::kV2, CombineSync::kSignal, 0, 1, 0,
                                               sh.name == "dsv3_prefill" ? 88 : 66);
      traced(sh.name == "dsv3_prefill" ? "combine v2 signal rc88 (after separate ops)"
                                       : "combine v2 signal rc66 (after separate ops)",
             [&] {
               ep.publish(x, idsd, DType::kInt32, T, s);
               ep.route(T, s);
               ep.dispatch(xg, T, s, d_sep);
               DMOE_CUDA_CHECK(cudaMemsetAsync(ep.trace_buffer(), 0, kTraceSlots * sizeof(unsigned long long), s));
               ep.combine(xg, scores, DType::kFloat32, out, T, s, cs2c);
             });
    }
    if (fused_ok) {
      traced("publish+route+dispatch fused, combine v2 signal", [&] {
        ep.publish_route_dispatch(x, idsd, DType::kInt32, T, xg, s, d_fused);
        ep.combine(xg, scores, DType::kFloat32, out, T, s, cs2);
      });
      for (const char* way : {"", "late", "signal"}) {
        const std::string w = way;
        traced(("combine rank partials" + (w.empty() ? "" : " " + w) + ", scores pushed (after fused)").c_str(), [&] {
          ep.publish_route_dispatch(x, idsd, DType::kInt32, T, xg, s, d_push);
          DMOE_CUDA_CHECK(cudaMemsetAsync(ep.trace_buffer(), 0, kTraceSlots * sizeof(unsigned long long), s));
          const CombineOptions c =
              combine_opts(CombineAlgorithm::kRankPartials, w == "signal" ? CombineSync::kSignal : CombineSync::kBarrier);
          if (w == "late") combine_own_late(c);
          else ep.combine(xg, scores, DType::kFloat32, out, T, s, c);
        });
      }
    }
    traced("reduce", [&] { ep.reduce(scores, DType::kFloat32, out, T, s); });
    ep.enable_trace(false);
  }

  // ---- bandwidth against SMs ----
  if (sweep) {
    for (int sms : {8, 16, 32, 48, 64, 96, 132}) {
      if (sms > comm.num_sms()) continue;
      const auto a = run_eager(v_tok_bar1, sms);
      const auto b = run_eager(v_rte_sig1, sms);
      const auto c2 = run_eager(v_tok_sig2, sms);
      char line[320];
      std::snprintf(line, sizeof(line), "%-14s %4d SMs  dispatch token_once %8.1f us %7.0f GB/s | per_route %8.1f us %7.0f GB/s | "
                    "combine v1 barrier %8.1f us %7.0f GB/s | v1 signal %8.1f us %7.0f GB/s | v2 signal %8.1f us %7.0f GB/s",
                    sh.name.c_str(), sms, a[2], gbs(routed_remote_bytes, a[2]), b[2], gbs(routed_remote_bytes, b[2]), a[3],
                    gbs(routed_remote_bytes, a[3]), b[3], gbs(routed_remote_bytes, b[3]), c2[3],
                    gbs(routed_remote_bytes, c2[3]));
      g_sweep.push_back(line);
    }
  }
  sync_all(comm);
  DMOE_CUDA_CHECK(cudaStreamDestroy(s));
  for (void* p : {x, idsd, scores, xg, out}) DMOE_CUDA_CHECK(cudaFree(p));
}

}  // namespace

int bench_main(int argc, char** argv) {
  std::string shapes = "dsv3_prefill,dsv3_decode", routing = "uniform";
  int align = 1, iters_override = 0;
  bool sweep = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shape" && i + 1 < argc) shapes = argv[++i];
    else if (a == "--routing" && i + 1 < argc) routing = argv[++i];
    else if (a == "--align" && i + 1 < argc) align = std::atoi(argv[++i]);
    else if (a == "--iters" && i + 1 < argc) iters_override = std::atoi(argv[++i]);
    else if (a == "--no-sweep") sweep = false;
    else {
      const bool help = a == "-h" || a == "--help";
      std::fprintf(help ? stdout : stderr,
                   "usage: %s [--shape a,b|all] [--routing uniform|zipf] [--align A] [--iters N] [--no-sweep]\n", argv[0]);
      return help ? 0 : 2;
    }
  }
  try {
    const auto env = testing::dist_env_from_environment();
    g_rank = env.rank;
    g_world = env.world;
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
      std::printf("SKIP: no usable CUDA device\n");
      return 0;
    }
    DMOE_CUDA_CHECK(cudaSetDevice(env.local_rank % ndev));
    const ncclUniqueId id = testing::exchange_unique_id(env, "bench");
    auto comm = Communicator::from_unique_id(id, env.rank, env.world);
    const auto pattern = routing == "zipf" ? testing::RoutingPattern::kZipf : testing::RoutingPattern::kUniform;
    bool first = true;
    for (const Shape& base : all_shapes()) {
      if (shapes != "all" && ("," + shapes + ",").find("," + base.name + ",") == std::string::npos) continue;
      Shape sh = base;
      if (iters_override > 0) sh.iters = iters_override;
      if (g_rank == 0) std::printf("bench: %s (T=%lld D=%lld E=%lld K=%lld, %s routing, align %d) ...\n", sh.name.c_str(),
                                   (long long)sh.T, (long long)sh.D, (long long)sh.E, (long long)sh.K, routing.c_str(), align);
      std::fflush(stdout);
      bench_shape(*comm, sh, pattern, align, sweep && first);
      first = false;
    }
    if (g_rank == 0) {
      std::printf("\n==== bench_dispatch_combine: %d ranks, %d SMs; ceilings measured in this run ====\n", g_world,
                  comm->num_sms());
      std::printf("%-13s %-42s %10s %10s %9s %9s %9s %6s %8s\n", "shape", "op", "time_us", "remote_MB", "eff_GB/s",
                  "link_GB/s", "ceil_GB/s", "%ceil", "x_NCCL");
      for (const Row& r : g_rows) {
        const double pct = r.ceil > 0 ? 100.0 * r.eff / r.ceil : 0.0;
        const double xn = r.us > 0 && r.nccl_us > 0 ? r.nccl_us / r.us : 0.0;
        std::printf("%-13s %-42s %10.1f %10.1f %9.1f %9.1f %9.1f %6.0f %8.2f\n", r.shape.c_str(), r.op.c_str(), r.us,
                    r.remote_mb, r.eff, r.link, r.ceil, pct, xn);
      }
      if (!g_sweep.empty()) {
        std::printf("\n---- bandwidth against SMs (eff GB/s = routed remote bytes / time) ----\n");
        for (const auto& l : g_sweep) std::printf("%s\n", l.c_str());
      }
      std::printf("\n---- targets ----\n");
      for (const auto& t : g_targets) std::printf("%s\n", t.c_str());
    }
    comm.reset();
    return 0;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "bench_dispatch_combine: error (rank %d): %s\n", g_rank, e.what());
    _exit(3);  // no teardown: after a device trap NCCL and CUDA teardown can hang
  }
}

int main(int argc, char** argv) {
  return dist_moe::testing::guarded_main("bench_dispatch_combine", [&] { return bench_main(argc, argv); });
}
