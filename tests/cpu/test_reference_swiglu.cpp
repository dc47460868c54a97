// The oracle's scalar SwiGLU (plain and clamped) against its definition, and its backward
// against central finite differences in double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "reference/oracle.h"

namespace ref = dist_moe::reference;
using dist_moe::Activation;

namespace {

double definition(double g, double u, const ref::SwigluParams& p) {
  if (p.activation == Activation::kSwiGLU) return g / (1.0 + std::exp(-g)) * u;
  const double gc = g < p.limit ? g : p.limit;
  const double uc = u < -p.limit ? -p.limit : (u > p.limit ? p.limit : u);
  return gc / (1.0 + std::exp(-p.alpha * gc)) * (uc + 1.0);
}

ref::SwigluParams clamped(double alpha, double limit) {
  ref::SwigluParams p;
  p.activation = Activation::kSwiGLUClamped;
  p.alpha = alpha;
  p.limit = limit;
  return p;
}

}  // namespace

TEST(ReferenceSwiglu, ForwardMatchesDefinition) {
  ref::Rng rng(7);
  for (const ref::SwigluParams& p : {ref::SwigluParams{}, clamped(1.702, 7.0), clamped(1.0, 0.5)}) {
    for (int i = 0; i < 2000; ++i) {
      const double g = rng.uniform(-12, 12), u = rng.uniform(-12, 12);
      const double want = definition(g, u, p);
      EXPECT_NEAR(ref::swiglu<double>(g, u, p), want, 1e-13 * (1 + std::abs(want)));
      // The FP32 pipeline formula: a few FP32 roundings away from the exact value.
      const float gf = static_cast<float>(g), uf = static_cast<float>(u);
      const double want_f = definition(gf, uf, p);
      EXPECT_NEAR(ref::swiglu<float>(gf, uf, p), want_f, 4e-7 * (1 + std::abs(want_f)));
    }
  }
}

TEST(ReferenceSwiglu, ClampedEdges) {
  const ref::SwigluParams p = clamped(1.702, 7.0);
  // Gate above the limit is clamped to the limit; up is clamped on both sides.
  EXPECT_EQ(ref::swiglu<double>(9.0, 2.0, p), ref::swiglu<double>(7.0, 2.0, p));
  EXPECT_EQ(ref::swiglu<double>(3.0, 50.0, p), ref::swiglu<double>(3.0, 7.0, p));
  EXPECT_EQ(ref::swiglu<double>(3.0, -50.0, p), ref::swiglu<double>(3.0, -7.0, p));
  // u = -1 is a zero of (u + 1); g very negative is not clamped.
  EXPECT_EQ(ref::swiglu<double>(2.0, -1.0, p), 0.0);
  EXPECT_NEAR(ref::swiglu<double>(-30.0, 1.0, p), definition(-30.0, 1.0, p), 1e-30);
  // Zero gradient strictly outside the clamp, pass-through on the boundary.
  double dg, du;
  ref::swiglu_backward<double>(7.5, 8.0, 1.0, p, dg, du);
  EXPECT_EQ(dg, 0.0);
  EXPECT_EQ(du, 0.0);
  ref::swiglu_backward<double>(7.0, 7.0, 1.0, p, dg, du);
  EXPECT_NE(dg, 0.0);
  EXPECT_NE(du, 0.0);
  ref::swiglu_backward<double>(1.0, -7.0, 1.0, p, dg, du);
  EXPECT_NE(du, 0.0);
  ref::swiglu_backward<double>(1.0, -7.5, 1.0, p, dg, du);
  EXPECT_EQ(du, 0.0);
  EXPECT_NE(dg, 0.0);
  // Plain SwiGLU has no clamp.
  ref::swiglu_backward<double>(9.0, 9.0, 1.0, ref::SwigluParams{}, dg, du);
  EXPECT_NE(dg, 0.0);
  EXPECT_NE(du, 0.0);
}

TEST(ReferenceSwiglu, BackwardMatchesFiniteDifferences) {
  ref::Rng rng(11);
  const double h = 1e-6;
  for (const ref::SwigluParams& p : {ref::SwigluParams{}, clamped(1.702, 7.0), clamped(0.8, 1.5)}) {
    int checked = 0;
    while (checked < 500) {
      const double g = rng.uniform(-9, 9), u = rng.uniform(-9, 9), dz = rng.uniform(-2, 2);
      if (p.activation == Activation::kSwiGLUClamped &&
          (std::abs(g - p.limit) < 1e-3 || std::abs(std::abs(u) - p.limit) < 1e-3)) {
        continue;  // a kink of the clamp: no derivative
      }
      double dg, du;
      ref::swiglu_backward<double>(g, u, dz, p, dg, du);
      const double fd_g = dz * (definition(g + h, u, p) - definition(g - h, u, p)) / (2 * h);
      const double fd_u = dz * (definition(g, u + h, p) - definition(g, u - h, p)) / (2 * h);
      EXPECT_NEAR(dg, fd_g, 1e-7 * (1 + std::abs(fd_g))) << "g=" << g << " u=" << u;
      EXPECT_NEAR(du, fd_u, 1e-7 * (1 + std::abs(fd_u))) << "g=" << g << " u=" << u;
      // The FP32 pipeline backward stays within FP32 rounding of the exact one.
      float dgf, duf;
      ref::swiglu_backward<float>(static_cast<float>(g), static_cast<float>(u), static_cast<float>(dz), p, dgf, duf);
      double dg2, du2;
      ref::swiglu_backward<double>(static_cast<float>(g), static_cast<float>(u), static_cast<float>(dz), p, dg2, du2);
      EXPECT_NEAR(dgf, dg2, 1e-5 * (1 + std::abs(dg2)));
      EXPECT_NEAR(duf, du2, 1e-5 * (1 + std::abs(du2)));
      ++checked;
    }
  }
}
