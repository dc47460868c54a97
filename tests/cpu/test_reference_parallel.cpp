// The oracle's parallel loops (reference/parallel.h): every index once, on any thread count, and a
// body's exception back on the caller; then the three grouped GEMMs that run on them against their
// documented order of operations (stages.h: products in double, summed in ascending contraction
// index), on operands where that order decides the result -- magnitudes 2^60 apart, whose double
// sums cancel differently in any other order -- so a loop rewritten for speed or threads must keep it.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "reference/parallel.h"
#include "reference/routing.h"
#include "reference/stages.h"

namespace dist_moe::reference {
namespace {

TEST(ReferenceParallel, EveryIndexOnce) {
  EXPECT_GE(oracle_threads(), 1);
  for (int64_t n : {0, 1, 2, 3, 7, 64, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    parallel_for(n, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n " << n << " index " << i;
  }
}

TEST(ReferenceParallel, ExceptionReachesTheCaller) {
  std::atomic<int64_t> done{0};
  EXPECT_THROW(parallel_for(100,
                            [&](int64_t i) {
                              if (i == 57) throw std::runtime_error("body 57");
                              done.fetch_add(1);
                            }),
               std::runtime_error);
  EXPECT_LT(done.load(), 100);
}

// Values whose sums depend on the order: +-2^60, +-1 and small random terms, in a pattern that
// differs per position.
std::vector<float> order_sensitive(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    const float big = (x >> 8) % 2 ? 1152921504606846976.0f : -1152921504606846976.0f;  // 2^60
    v[static_cast<size_t>(i)] = (x >> 12) % 3 == 0 ? big : static_cast<float>(static_cast<int>((x >> 16) % 9) - 4);
  }
  return v;
}

TEST(ReferenceParallel, GroupedGemmsSumInTheDocumentedOrder) {
  const int64_t E = 3, N = 40, Kc = 24, K = 2, T = 37;
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i * 7 % 5) - 1;  // -1 (a padding route) .. 3
  for (int32_t& id : ids) id = id < 0 ? -1 : id % static_cast<int32_t>(E);
  const RankRouting rt = build_routing({ids}, K, E, 8)[0];
  const int64_t M = rt.num_rows();
  TensorD a_mk({M, Kc}), a_mn({M, N}), w({E, N, Kc});
  const std::vector<float> v_mk = order_sensitive(M * Kc, 1), v_mn = order_sensitive(M * N, 2),
                           v_w = order_sensitive(E * N * Kc, 3);
  a_mk.data.assign(v_mk.begin(), v_mk.end());
  a_mn.data.assign(v_mn.begin(), v_mn.end());
  w.data.assign(v_w.begin(), v_w.end());
  const TensorD nt = grouped_gemm_nt(rt, a_mk, w), nn = grouped_gemm_nn(rt, a_mn, w), wg = grouped_wgrad(rt, a_mn, a_mk);
  int64_t order_matters = 0;
  for (int64_t m = 0; m < M; ++m) {
    const bool pad = rt.rows[static_cast<size_t>(m)].is_padding();
    const int64_t e = pad ? 0 : rt.rows[static_cast<size_t>(m)].local_expert;
    for (int64_t n = 0; n < N; ++n) {
      double s = 0.0, r = 0.0;
      for (int64_t k = 0; k < Kc; ++k) s += a_mk(m, k) * w(e, n, k);
      for (int64_t k = Kc - 1; k >= 0; --k) r += a_mk(m, k) * w(e, n, k);
      order_matters += !pad && s != r;
      ASSERT_EQ(nt(m, n), pad ? 0.0 : s) << "FPROP m " << m << " n " << n;
    }
    for (int64_t k = 0; k < Kc; ++k) {
      double s = 0.0;
      for (int64_t n = 0; n < N; ++n) s += a_mn(m, n) * w(e, n, k);
      ASSERT_EQ(nn(m, k), pad ? 0.0 : s) << "DGRAD m " << m << " k " << k;
    }
  }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < Kc; ++k) {
        double s = 0.0;
        for (int64_t m = rt.expert_offsets[static_cast<size_t>(e)]; m < rt.expert_offsets[static_cast<size_t>(e + 1)]; ++m)
          if (!rt.rows[static_cast<size_t>(m)].is_padding()) s += a_mn(m, n) * a_mk(m, k);
        ASSERT_EQ(wg(e, n, k), s) << "WGRAD e " << e << " n " << n << " k " << k;
      }
  EXPECT_GT(order_matters, M * N / 10) << "the operands do not make the order visible";
}

}  // namespace
}  // namespace dist_moe::reference
