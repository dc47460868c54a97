// What the layer suites (test_pipeline_multi.cu: BF16; test_mxfp8_pipeline_multi.cu: MXFP8) share:
// the per-rank log line, a rank's results (output, input / score / weight gradients) read back from
// the device, bitwise equality of two results, and the planner's slot state.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/context.h"
#include "dist_moe/routed_experts.h"
#include "reference/oracle.h"
#include "testing/device_buffer.h"

namespace dist_moe::layer_suite {

inline int g_rank = 0;
#define LOG(...)                                                  \
  do {                                                            \
    std::printf("[rank %d] ", ::dist_moe::layer_suite::g_rank);   \
    std::printf(__VA_ARGS__);                                     \
    std::printf("\n");                                            \
    std::fflush(stdout);                                          \
  } while (0)

template <class T>
using Dev = testing::DeviceBuffer<T>;
using reference::TensorF;

inline std::vector<uint16_t> bf16_bits(const TensorF& t) { return reference::to_bf16_bits(t); }

// What one rank's GPU produced.
struct Result {
  TensorF out, grad_x, grad_scores, dw13, dw2;
};

inline bool bitwise(const Result& a, const Result& b) {
  return reference::bitwise_equal(a.out, b.out) && reference::bitwise_equal(a.grad_x, b.grad_x) &&
         reference::bitwise_equal(a.grad_scores, b.grad_scores) && reference::bitwise_equal(a.dw13, b.dw13) &&
         reference::bitwise_equal(a.dw2, b.dw2);
}

// A rank's output and gradient buffers (poisoned, so an unwritten byte shows), for a Case with T, D,
// F, K, wgrad and bf16_scores.
struct Outputs {
  Dev<uint16_t> out, gx, gs16;
  Dev<float> gs32;
  Dev<uint8_t> dw13, dw2;
  RoutedExpertsGradients g;
  int64_t T, D, F, K;
  DType wgrad;
  bool bf16_scores;
  template <class Case>
  Outputs(const Case& c, int64_t L)
      : out(c.T * c.D), gx(c.T * c.D), gs16(c.T * c.K), gs32(c.T * c.K),
        dw13(L * 2 * c.F * c.D * (c.wgrad == DType::kFloat32 ? 4 : 2)),
        dw2(L * c.D * c.F * (c.wgrad == DType::kFloat32 ? 4 : 2)), T(c.T), D(c.D), F(c.F), K(c.K), wgrad(c.wgrad),
        bf16_scores(c.bf16_scores) {
    out.poison(), gx.poison(), gs16.poison(), gs32.poison(), dw13.poison(), dw2.poison();
    g.grad_x_TD = gx.get();
    g.grad_scores_TK = c.bf16_scores ? static_cast<void*>(gs16.get()) : gs32.get();
    g.grad_w13 = dw13.get();
    g.grad_w2 = dw2.get();
    g.wgrad_dtype = c.wgrad;
  }
  Result read(int64_t L) const {
    Result r;
    r.out = testing::tensor_from_bf16(out.download(), {T, D});
    r.grad_x = testing::tensor_from_bf16(gx.download(), {T, D});
    r.grad_scores = TensorF({T, K});
    if (bf16_scores) r.grad_scores = testing::tensor_from_bf16(gs16.download(), {T, K});
    else r.grad_scores.data = gs32.download();
    auto wread = [&](const Dev<uint8_t>& d, std::vector<int64_t> shape) {
      const auto bytes = d.download();
      TensorF t(std::move(shape));
      if (wgrad == DType::kFloat32) {
        std::memcpy(t.data.data(), bytes.data(), bytes.size());
        return t;
      }
      std::vector<uint16_t> bits(bytes.size() / 2);
      std::memcpy(bits.data(), bytes.data(), bytes.size());
      return testing::tensor_from_bf16(bits, t.shape);
    };
    r.dw13 = wread(dw13, {L, 2 * F, D});
    r.dw2 = wread(dw2, {L, D, F});
    return r;
  }
  template <class Case>
  Result read(const Case&, int64_t L) const {
    return read(L);
  }
};

// The planner's saved bytes [N*R] then layers per slot [N] (the slot stacks' state).
inline std::vector<int64_t> planner_snapshot(const Context& ctx) {
  const Context::PlannerView v = ctx.planner_view();
  const int64_t N = v.num_slots, R = ctx.ep_size();
  std::vector<int64_t> h(N * R + N);
  DMOE_CUDA_CHECK(cudaMemcpy(h.data(), v.saved_bytes_NR, N * R * 8, cudaMemcpyDeviceToHost));
  DMOE_CUDA_CHECK(cudaMemcpy(h.data() + N * R, v.layer_id_N, N * 8, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace dist_moe::layer_suite
