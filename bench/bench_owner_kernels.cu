// The layer's memory-bound owner-side kernels against the HBM ceiling for the same bytes:
//   reduce_from_topk      grad_x[t] = sum_k grad_x_routes[t, k]       (backward's last stage)
//   topk_reduce_backward  grad_h3 = s * g, grad_scores = <g, h3>      (backward's first stage)
//   swiglu_forward        h2 from h1                                  (saved path: h2_from_saved_h1)
//   swiglu_backward       grad_h1 from h1 and grad_h2
// at the per-rank sizes of the reference workloads (EP2, balanced rows), on random inputs.
//
//   bench_owner_kernels [--shapes dsv3_prefill,qwen3_30b] [--iters N] [--sustain-ms MS]
//
// Ceiling: a device-to-device cudaMemcpyAsync moving the same number of bytes (half read, half
// written), timed in the same run; "x copy" = copy time / kernel time (1.0 = at the copy's rate).
// Every call runs --sustain-ms of itself untimed first (clocks of a busy GPU), then the median
// of --iters timed calls.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "testing/bench_args.h"
#include "testing/event_timing.h"
#include "testing/main_guard.h"
#include "testing/device_buffer.h"
#include "dist_moe/check.h"
#include "dist_moe/workloads.h"
#include "testing/random_fill.h"
#include "kernels/swiglu.h"
#include "kernels/topk.h"

namespace {

using namespace dist_moe;

int g_iters = 20;
double g_sustain_ms = 100;

using testing::DeviceBuffer;
using Bf16Buffer = DeviceBuffer<__nv_bfloat16>;

double time_ms(const std::function<void()>& fn, cudaStream_t s) {
  testing::run_for_ms(fn, g_sustain_ms, s);
  return testing::median_event_ms(fn, g_iters, s).ms;
}

void run_shape(const Workload& w, cudaStream_t s) {
  const int64_t T = w.tokens, D = w.hidden, F = w.intermediate, K = w.top_k, L = w.experts / 2;
  const int64_t M = T * K;  // rows per rank at EP2 with balanced routing
  // Routes: K distinct experts per token, one in 16 tokens with a padded (-1) last route.
  std::mt19937 rng(7);
  std::vector<int32_t> ids(T * K);
  std::vector<float> scores(T * K);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < K; ++k) {
      ids[t * K + k] = (k == K - 1 && t % 16 == 0) ? -1 : static_cast<int32_t>((t * 7 + k * 13) % w.experts);
      scores[t * K + k] = std::uniform_real_distribution<float>(0.05f, 0.5f)(rng);
    }
  DeviceBuffer<int32_t> d_ids(ids);
  DeviceBuffer<float> d_scores(scores);
  kernels::TopkRoutes r;
  r.ids_TK = d_ids.get();
  r.scores_TK = d_scores.get();
  r.T = T;
  r.K = K;
  r.D = D;

  // Expert rows: M / L per expert, contiguous.
  std::vector<int32_t> counts(L, static_cast<int32_t>(M / L)), offsets(L + 1, 0);
  for (int64_t e = 0; e < L; ++e) offsets[e + 1] = offsets[e] + counts[e];
  DeviceBuffer<int32_t> d_counts(counts), d_offsets(offsets);
  const kernels::ExpertRowsView rows{d_counts.get(), d_offsets.get(), static_cast<int32_t>(L), M};
  const activation::SwigluParams sp{};

  Bf16Buffer routes_a(T * K * D), routes_b(T * K * D), tok_a(T * D), tok_b(T * D);
  Bf16Buffer h1(M * 2 * F), h2(M * F), gh1(M * 2 * F);
  DeviceBuffer<float> gs(T * K);
  testing::fill_uniform_bf16(routes_a.get(), T * K * D, 1, 1.0f, s);
  testing::fill_uniform_bf16(tok_a.get(), T * D, 2, 1.0f, s);
  testing::fill_uniform_bf16(h1.get(), M * 2 * F, 3, 2.0f, s);
  testing::fill_uniform_bf16(h2.get(), M * F, 4, 1.0f, s);
  DeviceBuffer<uint8_t> copy_src(M * 2 * F * 2 + T * K * D * 2), copy_dst(copy_src.size());
  DMOE_CUDA_CHECK(cudaMemsetAsync(copy_src.get(), 1, copy_src.size(), s));

  struct Case {
    const char* name;
    double read_bytes, write_bytes;
    std::function<void()> fn;
  };
  const double route_b = double(T * K * D * 2), tok_bytes = double(T * D * 2);
  const std::vector<Case> cases = {
      {"reduce_from_topk", route_b, tok_bytes,
       [&] { kernels::reduce_from_topk(r, routes_a.get(), tok_b.get(), s); }},
      {"topk_reduce_backward", route_b + tok_bytes, route_b,
       [&] {
         kernels::topk_reduce_backward(r, routes_a.get(), tok_a.get(), routes_b.get(), gs.get(), s);
       }},
      {"swiglu_forward", double(M * 2 * F * 2), double(M * F * 2),
       [&] { kernels::swiglu_forward(h1.get(), h2.get(), F, rows, sp, nullptr, 0.f, s); }},
      {"swiglu_backward", double(M * 3 * F * 2), double(M * 2 * F * 2),
       [&] { kernels::swiglu_backward(h1.get(), h2.get(), gh1.get(), F, rows, sp, s); }},
  };
  std::printf("\n%s (per rank at EP2: T=%lld K=%lld D=%lld, M=%lld rows, F=%lld)\n", w.name.c_str(), (long long)T,
              (long long)K, (long long)D, (long long)M, (long long)F);
  std::printf("%-22s %10s %10s %10s %10s %8s\n", "kernel", "MB moved", "ms", "GB/s", "copy ms", "x copy");
  for (const Case& c : cases) {
    const double moved = c.read_bytes + c.write_bytes;
    const double ms = time_ms(c.fn, s);
    const size_t half = static_cast<size_t>(moved / 2) & ~size_t{15};
    const double copy_ms = time_ms(
        [&] { DMOE_CUDA_CHECK(cudaMemcpyAsync(copy_dst.get(), copy_src.get(), half, cudaMemcpyDeviceToDevice, s)); }, s);
    std::printf("%-22s %10.1f %10.4f %10.1f %10.4f %7.2fx\n", c.name, moved / 1e6, ms, moved / ms / 1e6, copy_ms,
                copy_ms / ms);
  }
  DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace

int bench_main(int argc, char** argv) {
  std::string shapes = "dsv3_prefill,qwen3_30b";
  const int rc = testing::walk_bench_args(argc, argv, "[--shapes a,b] [--iters N] [--sustain-ms MS]",
                                          [&](const std::string& a, auto value) {
                                            if (a == "--shapes") shapes = value();
                                            else if (a == "--iters") g_iters = std::max(1, std::atoi(value().c_str()));
                                            else if (a == "--sustain-ms") g_sustain_ms = std::max(0.0, std::atof(value().c_str()));
                                            else return false;
                                            return true;
                                          });
  if (rc >= 0) return rc;
  cudaStream_t s;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  DMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench_owner_kernels on %s, %d iterations after %.0f ms of each call\n", prop.name, g_iters,
              g_sustain_ms);
  std::istringstream is(shapes);
  for (std::string name; std::getline(is, name, ',');) run_shape(find_workload(name), s);
  DMOE_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}

int main(int argc, char** argv) {
  return dist_moe::testing::guarded_main("bench_owner_kernels", [&] { return bench_main(argc, argv); });
}
