// SwiGLU forward and backward for one (gate, up) pair, identical on host and device.
//
// Upstream §2.5; the operation order matches the CPU oracle (src/reference/stages.h) so that the
// GPU and the oracle differ only by the exp and reciprocal implementations (sigmoid below):
//   plain:   z = (g * s) * u,               s = sigmoid(g)
//   clamped: z = (gc * s) * (uc + 1),       gc = min(g, L), uc = clamp(u, -L, L), s = sigmoid(alpha * gc)
// Backward with upstream gradient dz:
//   plain:   dg = (dz * u) * (s + (g * s) * (1 - s)),   du = (dz * g) * s
//   clamped: dg = g <= L ? (dz * (uc + 1)) * (s + ((alpha * gc) * s) * (1 - s)) : 0
//            du = -L <= u <= L ? (dz * gc) * s : 0
#pragma once

#include <cmath>

#include "dist_moe/device/common/macros.cuh"
#include "dist_moe/device/ptx/sfu.cuh"

namespace dist_moe::activation {

struct SwigluParams {
  bool clamped = false;
  float alpha = 1.702f;
  float limit = 7.0f;
};

// On the device exp(-x) = 2^(-x log2 e) and the reciprocal come from the special-function unit
// (ex2.approx, rcp.approx: two instructions, a few FP32 ulp) instead of expf's range reduction and
// an IEEE division's refinement steps with their slow-path branches (~25 instructions): the W13
// epilogue runs this on every output while the tensor cores of a cooperative tile wait (docs/perf.md
// G35). x < -88: 1 + e = inf, s = 0; x > 88: e flushes to 0, s = 1 -- as the exact formula.
DMOE_HOST_DEVICE float sigmoid(float x) {
#if defined(__CUDA_ARCH__)
  return ptx::rcp_approx(1.0f + ptx::ex2_approx(x * -1.4426950408889634f));
#else
  return 1.0f / (1.0f + expf(-x));
#endif
}

DMOE_HOST_DEVICE float swiglu_plain(float g, float u) {
  const float s = sigmoid(g);
  return (g * s) * u;
}

DMOE_HOST_DEVICE float swiglu_clamped(float g, float u, float alpha, float limit) {
  const float gc = fminf(g, limit);
  const float uc = fminf(fmaxf(u, -limit), limit);
  const float s = sigmoid(alpha * gc);
  return (gc * s) * (uc + 1.0f);
}

DMOE_HOST_DEVICE float swiglu_forward(float g, float u, const SwigluParams& p) {
  return p.clamped ? swiglu_clamped(g, u, p.alpha, p.limit) : swiglu_plain(g, u);
}

DMOE_HOST_DEVICE void swiglu_backward(float g, float u, float dz, const SwigluParams& p, float* dg, float* du) {
  if (!p.clamped) {
    const float s = sigmoid(g);
    *dg = (dz * u) * (s + (g * s) * (1.0f - s));
    *du = (dz * g) * s;
    return;
  }
  const float gc = fminf(g, p.limit);
  const float uc = fminf(fmaxf(u, -p.limit), p.limit);
  const float s = sigmoid(p.alpha * gc);
  *dg = g <= p.limit ? (dz * (uc + 1.0f)) * (s + ((p.alpha * gc) * s) * (1.0f - s)) : 0.0f;
  *du = (u >= -p.limit && u <= p.limit) ? (dz * gc) * s : 0.0f;
}

}  // namespace dist_moe::activation
