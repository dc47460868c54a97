// Shared pieces of the grouped GEMM GPU suites (test_grouped_gemm.cu, test_grouped_gemm_offsets.cu):
// random BF16 inputs, the host reference GEMMs, output rounding and poisoning, and the comparison
// against the reference.
//
// The references form each dot product in double and round once to FP32 (the value an FP32
// accumulating tensor core approximates), then to BF16 where the GPU stores BF16 -- the numeric
// model of the CPU oracle (src/reference/stages.h), whose SwiGLU they call; the GEMMs are written
// here to run on all host cores over arbitrary expert counts.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/grouped_gemm.h"
#include "gpu_test_util.h"
#include "reference/stages.h"

// Inside a test body or a void helper: fails the test with the last CUDA error's text.
#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

namespace dist_moe::testing {

// ---- host data ----------------------------------------------------------------------------------
// BF16 tensor kept twice: the bits the GPU reads and their float values the reference uses.
struct HostBf16 {
  std::vector<uint16_t> bits;
  std::vector<float> vals;
};

inline HostBf16 random_bf16(size_t n, float scale, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  HostBf16 t;
  t.bits.resize(n);
  t.vals.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const numeric::bf16_t b = numeric::float_to_bf16(dist(rng) * scale);
    t.bits[i] = b.bits;
    t.vals[i] = numeric::bf16_to_float(b);
  }
  return t;
}

// A random permutation of [0, n): where gathered rows come from or scattered rows go.
inline std::vector<int64_t> shuffled_rows(int64_t n, std::mt19937& rng) {
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  return perm;
}

// Rows [rows, end) of a [*, cols] BF16 row buffer set to NaN: a kernel that read rows past
// sum(counts) unmasked would fail the comparison.
inline std::vector<uint16_t> nan_past_rows(std::vector<uint16_t> bits, int64_t rows, int64_t cols) {
  std::fill(bits.begin() + rows * cols, bits.end(), uint16_t{0xffff});
  return bits;
}

inline int64_t total_rows(const std::vector<int32_t>& counts) {
  return std::accumulate(counts.begin(), counts.end(), int64_t{0});
}

inline std::vector<int64_t> offsets_of(const std::vector<int32_t>& counts) {
  std::vector<int64_t> off(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) off[e + 1] = off[e] + counts[e];
  return off;
}

// e(m): the expert of each of the sum(counts) rows, in order.
inline std::vector<int32_t> expert_of_rows(const std::vector<int32_t>& counts) {
  std::vector<int32_t> expert_of;
  for (size_t e = 0; e < counts.size(); ++e)
    expert_of.insert(expert_of.end(), static_cast<size_t>(counts[e]), static_cast<int32_t>(e));
  return expert_of;
}

// Runs f(i) for i in [0, n) on all host cores.
inline void parallel_for(int64_t n, const std::function<void(int64_t)>& f) {
  const int64_t threads = std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += threads) f(i);
    });
  for (auto& th : pool) th.join();
}

// The gather producer's ready counters, sized as the API asks.
inline DeviceBuffer<int32_t> gather_workspace(int64_t m_capacity, int64_t e_local) {
  return DeviceBuffer<int32_t>(grouped_gemm_gather_workspace_bytes(m_capacity, e_local) / sizeof(int32_t));
}

// ---- host reference GEMMs (double products and sums, one rounding to FP32) -----------------------
// FPROP: out[m, n] = sum_k a[m, k] * w[e(m), n, k]       a [M, K], w [E, N, K] -> [M, N]
inline std::vector<float> ref_fprop(const std::vector<float>& a, const std::vector<float>& w,
                                    const std::vector<int32_t>& counts, int64_t N, int64_t K) {
  const std::vector<int32_t> expert_of = expert_of_rows(counts);
  const int64_t M = static_cast<int64_t>(expert_of.size());
  std::vector<float> out(static_cast<size_t>(M * N));
  parallel_for(M, [&](int64_t m) {
    const float* ar = &a[m * K];
    const float* we = &w[static_cast<size_t>(expert_of[m]) * N * K];
    for (int64_t n = 0; n < N; ++n) {
      const float* wr = we + n * K;
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(ar[k]) * wr[k];
      out[m * N + n] = static_cast<float>(acc);
    }
  });
  return out;
}

// DGRAD: out[m, k] = sum_n g[m, n] * w[e(m), n, k]       g [M, N], w [E, N, K] -> [M, K]
inline std::vector<float> ref_dgrad(const std::vector<float>& g, const std::vector<float>& w,
                                    const std::vector<int32_t>& counts, int64_t N, int64_t K) {
  const std::vector<int32_t> expert_of = expert_of_rows(counts);
  const int64_t M = static_cast<int64_t>(expert_of.size());
  std::vector<float> out(static_cast<size_t>(M * K));
  parallel_for(M, [&](int64_t m) {
    std::vector<double> acc(static_cast<size_t>(K), 0.0);
    const float* we = &w[static_cast<size_t>(expert_of[m]) * N * K];
    for (int64_t n = 0; n < N; ++n) {
      const double gv = g[m * N + n];
      const float* wr = we + n * K;
      for (int64_t k = 0; k < K; ++k) acc[k] += gv * wr[k];
    }
    for (int64_t k = 0; k < K; ++k) out[m * K + k] = static_cast<float>(acc[k]);
  });
  return out;
}

// WGRAD: out[e, n, k] = sum_{m in e} g[m, n] * x[m, k]   -> [E, N, K] (zero for empty experts)
inline std::vector<float> ref_wgrad(const std::vector<float>& g, const std::vector<float>& x,
                                    const std::vector<int32_t>& counts, int64_t N, int64_t K) {
  const auto off = offsets_of(counts);
  const int64_t E = static_cast<int64_t>(counts.size());
  std::vector<float> out(static_cast<size_t>(E * N * K));
  parallel_for(E * N, [&](int64_t en) {
    const int64_t e = en / N, n = en % N;
    std::vector<double> acc(static_cast<size_t>(K), 0.0);
    for (int64_t m = off[e]; m < off[e + 1]; ++m) {
      const double gv = g[m * N + n];
      const float* xr = &x[m * K];
      for (int64_t k = 0; k < K; ++k) acc[k] += gv * xr[k];
    }
    for (int64_t k = 0; k < K; ++k) out[en * K + k] = static_cast<float>(acc[k]);
  });
  return out;
}

// ---- stored values ------------------------------------------------------------------------------
inline std::vector<float> rounded_bf16(std::vector<float> v) {
  for (float& x : v) x = numeric::round_bf16(x);
  return v;
}

// h2[m, f] = swiglu(h1[m, f], h1[m, F + f]) in BF16, from the BF16 h1 [M, 2F] the GPU stores.
inline std::vector<float> ref_swiglu_h2(const std::vector<float>& h1_MN, int64_t F,
                                        const reference::SwigluParams& act) {
  const int64_t N = 2 * F, M = static_cast<int64_t>(h1_MN.size()) / N;
  std::vector<float> h2(static_cast<size_t>(M * F));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t f = 0; f < F; ++f)
      h2[m * F + f] = numeric::round_bf16(reference::swiglu(h1_MN[m * N + f], h1_MN[m * N + F + f], act));
  return h2;
}

// What an output element must hold after the call: the GEMM result, plus the previous contents
// when accumulating (one FP32 sum), rounded to BF16 unless the output is FP32.
inline void apply_output_store(std::vector<float>& ref, const std::vector<float>& prev, bool accumulate, bool fp32) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const float v = accumulate ? prev[i] + ref[i] : ref[i];
    ref[i] = fp32 ? v : numeric::round_bf16(v);
  }
}

// Element `elem` of a BF16 or FP32 array starting `byte_offset` bytes into downloaded bytes.
inline double bf16_at(const std::vector<uint8_t>& bytes, int64_t byte_offset, int64_t elem) {
  uint16_t b;
  std::memcpy(&b, bytes.data() + byte_offset + 2 * elem, 2);
  return numeric::bf16_to_float(numeric::bf16_t{b});
}

inline double fp32_at(const std::vector<uint8_t>& bytes, int64_t byte_offset, int64_t elem) {
  float f;
  std::memcpy(&f, bytes.data() + byte_offset + 4 * elem, 4);
  return f;
}

inline double out_at(const std::vector<uint8_t>& bytes, int64_t byte_offset, int64_t elem, bool fp32) {
  return fp32 ? fp32_at(bytes, byte_offset, elem) : bf16_at(bytes, byte_offset, elem);
}

template <class T>
std::vector<uint8_t> raw_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// ---- comparison ---------------------------------------------------------------------------------
struct Tolerance {
  double rtol = 2e-2;
  double atol = 2e-2;
  double rel_l2 = 5e-3;
};

// FP32 WGRAD sums whole experts' rows: a looser L2 bound than the BF16 outputs.
inline Tolerance wgrad_tolerance(bool fp32) { return fp32 ? Tolerance{2e-2, 2e-2, 1e-2} : Tolerance{}; }

// Compares got(i) with ref[i] for every i < ref.size(); reports the first few failures. A NaN where
// a value is due means the element was never written (outputs are poisoned first).
inline void expect_close(const std::string& what, const std::function<double(int64_t)>& got,
                         const std::vector<float>& ref, const Tolerance& tol = Tolerance{}) {
  const int64_t n = static_cast<int64_t>(ref.size());
  int64_t bad = 0, unwritten = 0;
  double err2 = 0.0, ref2 = 0.0, max_abs = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double g = got(i);
    const double r = ref[i];
    if (std::isnan(g) && !std::isnan(r)) {
      if (unwritten++ < 5) ADD_FAILURE() << what << ": element " << i << " was not written (still NaN), expected " << r;
      continue;
    }
    const double d = std::fabs(g - r);
    err2 += d * d;
    ref2 += r * r;
    max_abs = std::max(max_abs, d);
    if (!(d <= tol.atol + tol.rtol * std::fabs(r))) {
      if (bad++ < 5) ADD_FAILURE() << what << ": element " << i << " got " << g << " expected " << r;
    }
  }
  const double rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  EXPECT_EQ(unwritten, 0) << what << ": " << unwritten << " of " << n << " elements not written";
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements outside rtol/atol";
  EXPECT_LT(rel_l2, tol.rel_l2) << what << ": relative L2 error";
  std::printf("  %-62s n=%-9lld relL2=%.2e max|err|=%.2e %s\n", what.c_str(), static_cast<long long>(n), rel_l2,
              max_abs, (bad || unwritten || rel_l2 >= tol.rel_l2) ? "FAIL" : "PASS");
}

// got[i] against ref[i] (got may be longer: rows past sum(counts) are checked elsewhere).
inline void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                         const Tolerance& tol = Tolerance{}) {
  expect_close(what, [&](int64_t i) { return static_cast<double>(got[i]); }, ref, tol);
}

// ---- configurations as test parameters ---------------------------------------------------------------
// One compiled configuration of an op. Its test name says what runs: op, operand formats, output
// type and GroupedGemmConfig::name() (which carries the producer), e.g.
// "dgrad_bf16xbf16_to_f32_128x256x64_s4_tma_dyn".
struct GemmParam {
  GroupedGemmOp op = GroupedGemmOp::kFprop;
  DType out = DType::kBFloat16;
  OperandFormat a_format;
  OperandFormat b_format;
  GroupedGemmConfig config;
};

inline std::string gemm_param_name(const GemmParam& p) {
  const char* out = p.out == DType::kFloat32 ? "f32" : "bf16";
  return std::string(to_string(p.op)) + "_" + p.a_format.name() + "x" + p.b_format.name() + "_to_" + out + "_" +
         p.config.name();
}

// gtest prints parameters with this instead of their bytes.
inline void PrintTo(const GemmParam& p, std::ostream* os) { *os << gemm_param_name(p); }

struct GemmParamName {
  std::string operator()(const ::testing::TestParamInfo<GemmParam>& info) const { return gemm_param_name(info.param); }
};

// Every configuration grouped_gemm_configs() lists for the op (BF16 operands: the compiled ones).
inline std::vector<GemmParam> gemm_params(GroupedGemmOp op, DType out, bool gather) {
  std::vector<GemmParam> v;
  for (const GroupedGemmConfig& c : grouped_gemm_configs(op, out, gather)) {
    GemmParam p;
    p.op = op;
    p.out = out;
    p.config = c;
    v.push_back(p);
  }
  return v;
}

// ---- shared by the block-scaled GEMM tests (test_grouped_gemm_fp8.cu, _nvfp4.cu) --------------------

// BF16 [rows, cols] whose row r (or 128-row block of rows, `rows_per_scale`) is scaled by a random
// power of two in 2^-6 .. 2^6 on top of U(-1, 1) * base.
inline HostBf16 spread_bf16(int64_t rows, int64_t cols, int64_t rows_per_scale, float base, std::mt19937& rng) {
  HostBf16 t = random_bf16(static_cast<size_t>(rows * cols), base, rng);
  std::uniform_int_distribution<int> ex(-6, 6);
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_scale) {
    const float s = std::ldexp(1.0f, ex(rng));
    for (int64_t i = r0 * cols; i < std::min(rows, r0 + rows_per_scale) * cols; ++i) {
      const numeric::bf16_t b = numeric::float_to_bf16(t.vals[i] * s);  // exact: a power of two
      t.bits[i] = b.bits;
      t.vals[i] = numeric::bf16_to_float(b);
    }
  }
  return t;
}

// The Mega decode tests' special rows: a NaN in the first token row's x and BF16's largest finite value
// in the second (its W13 products overflow), so h2 holds NaN and +-Inf rows for the hand-offs.
inline void poke_special_rows(HostBf16& x, const std::vector<char>& token, int64_t D) {
  int found = 0;
  for (size_t m = 0; m < token.size() && found < 2; ++m)
    if (token[m]) x.bits[m * static_cast<size_t>(D) + 7] = found++ == 0 ? uint16_t{0x7FC0} : uint16_t{0x7F7F};
}

inline double bf16_value(const std::vector<uint16_t>& v, int64_t i) { return numeric::bf16_to_float(numeric::bf16_t{v[i]}); }

// GroupedGemmCommon::tile_rows below the counts (the inference layers' padded segments: the swap-AB
// tiles cover only an expert's first tile_rows[e] rows): with `drop`, expert e keeps counts[e] -
// counts[e] * (e % 3) / 4 rows; without, all of them. token_row[m]: row m of the groups is kept.
struct TileRowsCase {
  std::vector<int32_t> tiles;
  std::vector<char> token_row;
};
inline TileRowsCase tile_rows_case(const std::vector<int32_t>& counts, bool drop) {
  TileRowsCase c{counts, std::vector<char>(static_cast<size_t>(std::accumulate(counts.begin(), counts.end(), int64_t{0})), 1)};
  for (size_t e = 0, m0 = 0; e < counts.size(); m0 += static_cast<size_t>(counts[e]), ++e) {
    if (drop) c.tiles[e] -= counts[e] * static_cast<int32_t>(e % 3) / 4;
    for (int32_t r = c.tiles[e]; r < counts[e]; ++r) c.token_row[m0 + static_cast<size_t>(r)] = 0;
  }
  return c;
}

// Rows of `out` [M, cols] that tile_rows dropped must still hold the poison (0xFFFF).
inline void expect_dropped_rows_untouched(const std::vector<uint16_t>& out, const TileRowsCase& c, int64_t cols) {
  int64_t written = 0;
  for (size_t i = 0; i < c.token_row.size() * static_cast<size_t>(cols); ++i)
    written += !c.token_row[i / static_cast<size_t>(cols)] && out[i] != 0xFFFF;
  EXPECT_EQ(written, 0) << "values written to rows past an expert's tile_rows";
}

// Rows [M, cap) of a BF16 output must still hold the poison (0xFFFF).
inline void expect_rows_untouched(const std::string& what, const std::vector<uint16_t>& out, int64_t M, int64_t cols) {
  int64_t touched = 0;
  for (size_t i = static_cast<size_t>(M * cols); i < out.size(); ++i) touched += out[i] != 0xFFFF;
  EXPECT_EQ(touched, 0) << what << ": values written past sum(counts)";
}

// The inference layers' token segments (the Mega tests): expert e has tiles[e] token rows, 0 to
// max_rows (every fifth expert none), in a segment padded to a multiple of 32 rows and at least 32
// (counts); `slack` rows past the segments; token[m]: row m is a token row. max_rows 12: the decode
// layout (every segment 32 rows).
struct TokenSegments {
  std::vector<int32_t> counts, tiles, offsets;  // offsets: [E + 1] exclusive prefix sums of counts
  int64_t cap = 0;
  std::vector<char> token;
};
inline TokenSegments token_segments(int64_t E, int max_rows, int64_t slack, std::mt19937& rng) {
  TokenSegments s;
  std::uniform_int_distribution<int> real(0, max_rows);
  s.counts.resize(static_cast<size_t>(E));
  s.tiles.resize(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    s.tiles[e] = e % 5 == 1 ? 0 : real(rng);
    s.counts[e] = std::max(32, (s.tiles[e] + 31) / 32 * 32);
  }
  s.offsets.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t e = 0; e < E; ++e) s.offsets[e + 1] = s.offsets[e] + s.counts[e];
  s.cap = s.offsets.back() + slack;
  s.token.assign(static_cast<size_t>(s.cap), 0);
  for (int64_t e = 0; e < E; ++e)
    for (int32_t r = 0; r < s.tiles[e]; ++r) s.token[static_cast<size_t>(s.offsets[e] + r)] = 1;
  return s;
}
inline TokenSegments decode_segments(int64_t E, int64_t slack, std::mt19937& rng) {
  return token_segments(E, 12, slack, rng);
}

// Every compiled configuration of `op` on these operand formats, as test parameters.
inline std::vector<GemmParam> format_params(GroupedGemmOp op, DType out, const OperandFormat& a, const OperandFormat& b) {
  std::vector<GemmParam> v;
  for (const GroupedGemmConfig& c : grouped_gemm_configs(op, out, false, a, b)) {
    GemmParam p;
    p.op = op;
    p.out = out;
    p.a_format = a;
    p.b_format = b;
    p.config = c;
    v.push_back(p);
  }
  return v;
}

// The 16-token swap-AB (decode) configuration of `op` on these operand formats.
inline GroupedGemmConfig decode16_config(GroupedGemmOp op, const OperandFormat& a, const OperandFormat& b) {
  for (const GemmParam& p : format_params(op, DType::kBFloat16, a, b))
    if (p.config.swap_ab && p.config.block_n == 16) return p.config;
  ADD_FAILURE() << "no 16-token decode configuration for A=" << a.name() << " B=" << b.name();
  return {};
}

}  // namespace dist_moe::testing
