// SwiGLU forward and backward for one (gate, up) pair, identical on host and device.
//
// Upstream §2.5; the operation order matches the CPU oracle (src/reference/stages.h) so that the
// GPU and the oracle differ only by the exp implementation:
//   plain:   z = (g * s) * u,               s = sigmoid(g)
//   clamped: z = (gc * s) * (uc + 1),       gc = min(g, L), uc = clamp(u, -L, L), s = sigmoid(alpha * gc)
// Backward with upstream gradient dz:
//   plain:   dg = (dz * u) * (s + (g * s) * (1 - s)),   du = (dz * g) * s
//   clamped: dg = g <= L ? (dz * (uc + 1)) * (s + ((alpha * gc) * s) * (1 - s)) : 0
//            du = -L <= u <= L ? (dz * gc) * s : 0
#pragma once

#include <cmath>

#include "dist_moe/device/common/macros.cuh"

namespace dist_moe::activation {

struct SwigluParams {
  bool clamped = false;
  float alpha = 1.702f;
  float limit = 7.0f;
};

DMOE_HOST_DEVICE float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

DMOE_HOST_DEVICE float swiglu_forward(float g, float u, const SwigluParams& p) {
  if (!p.clamped) {
    const float s = sigmoid(g);
    return (g * s) * u;
  }
  const float gc = fminf(g, p.limit);
  const float uc = fminf(fmaxf(u, -p.limit), p.limit);
  const float s = sigmoid(p.alpha * gc);
  return (gc * s) * (uc + 1.0f);
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
