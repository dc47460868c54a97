// GPU tests of the SM90 grouped GEMMs against a host reference.
//
// Every case: fresh random BF16 inputs, ragged expert counts (empty experts, single rows, sizes
// that are not multiples of any tile), outputs poisoned with NaN first, then
//   * every element that must be written is finite and within rtol/atol of the reference,
//     relative L2 error below the bound (BF16: 2e-2 / 2e-2, relL2 < 5e-3; FP32 WGRAD relL2 < 1e-2);
//   * every element that must not be written (rows past sum(counts), unused scatter rows) still
//     holds the poison bits.
// The host references and the comparison are shared with the offsets suite
// (grouped_gemm_test_util.h says their numeric model).
// Each case runs with every compiled tile configuration of its op (config override), so the
// heuristic's choice and every alternative are covered.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "dist_moe/device/numeric/bf16.cuh"
#include "dist_moe/error.h"
#include "dist_moe/grouped_gemm.h"
#include "gpu/grouped_gemm_test_util.h"
#include "reference/stages.h"

namespace dist_moe {
namespace {

using numeric::round_bf16;
// The shared helpers (grouped_gemm_test_util.h) and testing::DeviceBuffer.
using namespace testing;

// Expects f to throw dist_moe::Error whose message contains `fragment`.
void expect_error(const std::function<void()>& f, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

// Elements [begin, end) of a BF16 or FP32 buffer must still hold the 0xff poison bytes.
void expect_poison(const std::string& what, const std::vector<uint8_t>& bytes, size_t begin, size_t end) {
  size_t touched = 0;
  for (size_t i = begin; i < end; ++i) touched += bytes[i] != 0xff;
  EXPECT_EQ(touched, 0u) << what << ": " << touched << " bytes written that must stay untouched";
}

// ---- counts ---------------------------------------------------------------------------------------
// Ragged counts. Eight or more experts: a prefix of awkward sizes (empty, 1 row, tile size +-1,
// ...) then random sizes in [0, max_rows] with about a quarter of the experts empty. Fewer experts:
// the first gets max_rows (not a tile multiple in any case below), the second (if E >= 3) none.
std::vector<int32_t> ragged_counts(int64_t e_local, int max_rows, std::mt19937& rng) {
  static const int32_t kAwkward[] = {0, 1, 127, 128, 129, 0, 255, 300, 64, 33};
  std::vector<int32_t> c(static_cast<size_t>(e_local));
  std::uniform_int_distribution<int> size(1, max_rows);
  std::uniform_int_distribution<int> coin(0, 3);
  for (int64_t e = 0; e < e_local; ++e) c[e] = coin(rng) == 0 ? 0 : size(rng);
  if (e_local >= 8) {
    for (int64_t e = 0; e < 10 && e < e_local; ++e)
      if (kAwkward[e] <= max_rows) c[e] = kAwkward[e];
  } else {
    c[0] = max_rows;
    if (e_local >= 3) c[1] = 0;
  }
  return c;
}

std::string counts_summary(const std::vector<int32_t>& c) {
  const int64_t total = total_rows(c);
  const int64_t empty = std::count(c.begin(), c.end(), 0);
  return "E=" + std::to_string(c.size()) + " rows=" + std::to_string(total) + " empty=" + std::to_string(empty);
}

// ---- the op runners ------------------------------------------------------------------------------
struct Case {
  int64_t e_local;
  int64_t n;  // weight rows (W13: 2F)
  int64_t k;  // weight columns
  int max_rows;
  uint32_t seed;
  const std::vector<int32_t>* counts = nullptr;  // fixed counts ([e_local]) instead of ragged_counts
};

std::string case_name(const Case& c) {
  return "E" + std::to_string(c.e_local) + "_n" + std::to_string(c.n) + "_k" + std::to_string(c.k);
}

constexpr int64_t kSlackRows = 37;  // rows past sum(counts) in every row buffer: must stay untouched

// A case's rows: its counts, their sum M and the row buffers' capacity.
struct CaseRows {
  std::vector<int32_t> counts;
  int64_t M = 0;
  int64_t cap = 0;
};

// The case's counts: fixed ones, or ragged_counts (which draws from rng either way, so the inputs
// that follow stay the same random stream). Prints the case line.
CaseRows case_rows(const Case& cs, std::mt19937& rng) {
  CaseRows r;
  r.counts = ragged_counts(cs.e_local, cs.max_rows, rng);
  if (cs.counts != nullptr) r.counts = *cs.counts;
  r.M = total_rows(r.counts);
  r.cap = r.M + kSlackRows;
  std::printf("case %s %s m_capacity=%lld\n", case_name(cs).c_str(), counts_summary(r.counts).c_str(),
              static_cast<long long>(r.cap));
  return r;
}

// A configuration a case runs: a compiled one (the test's parameter), or none -- the API's own pick
// (many-expert cases: most compiled tiles do not fit next to their scheduler tables and the API
// refuses them; its pick must fit and be right).
struct CaseConfig {
  std::optional<GroupedGemmConfig> config;
  const GroupedGemmConfig* get() const { return config ? &*config : nullptr; }
  std::string name() const { return config ? config->name() : "heuristic pick"; }
};
const CaseConfig kHeuristicPick{};

// The host reference of a case, computed once: the parameterized suites run each case once per
// configuration, and the host GEMM is their slow part. `key` names the runner, the case and every
// option that changes the inputs.
const std::vector<float>& memo_ref(const std::string& key, const std::function<std::vector<float>()>& compute) {
  static std::map<std::string, std::vector<float>> done;
  auto it = done.find(key);
  if (it == done.end()) it = done.emplace(key, compute()).first;
  return it->second;
}

std::string case_key(const Case& c) {
  return case_name(c) + "_seed" + std::to_string(c.seed) + (c.counts != nullptr ? "_fixed" : "");
}

// FPROP (plain store), one compiled config (or the heuristic's pick), optionally with scatter + row scale.
void run_fprop_case(const Case& cs, bool scatter, const CaseConfig& cfg) {
  std::mt19937 rng(cs.seed);
  const CaseRows rows = case_rows(cs, rng);
  const auto& counts = rows.counts;
  const int64_t M = rows.M, cap = rows.cap;
  const HostBf16 a = random_bf16(static_cast<size_t>(cap * cs.k), 1.0f, rng);
  const HostBf16 w = random_bf16(static_cast<size_t>(cs.e_local * cs.n * cs.k), 1.0f / std::sqrt(float(cs.k)), rng);
  std::vector<float> ref =
      memo_ref("fprop " + case_key(cs), [&] { return ref_fprop(a.vals, w.vals, counts, cs.n, cs.k); });

  std::vector<float> scale(static_cast<size_t>(cap), 1.0f);
  std::vector<int64_t> dest_row(static_cast<size_t>(cap), -1);  // scatter: destination row or -1 (skipped)
  const int64_t dest_rows = cap + 11;
  if (scatter) {
    std::uniform_real_distribution<float> sd(0.25f, 2.0f);
    const std::vector<int64_t> perm = shuffled_rows(dest_rows, rng);
    for (int64_t m = 0; m < M; ++m) {
      scale[m] = sd(rng);
      dest_row[m] = (m % 7 == 3) ? -1 : perm[m];  // every 7th row has no destination
    }
  }
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < cs.n; ++n) ref[m * cs.n + n] = round_bf16(ref[m * cs.n + n] * scale[m]);
  }

  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_a(a.bits), d_w(w.bits);
  DeviceBuffer<uint16_t> d_out(static_cast<size_t>(cap * cs.n));
  DeviceBuffer<uint16_t> d_dest(scatter ? static_cast<size_t>(dest_rows * cs.n) : 0);
  DeviceBuffer<void*> d_ptrs(scatter ? static_cast<size_t>(cap) : 0);
  DeviceBuffer<float> d_scale(scatter ? static_cast<size_t>(cap) : 0);
  if (scatter) {
    std::vector<void*> ptrs(static_cast<size_t>(cap), nullptr);
    for (int64_t m = 0; m < cap; ++m)
      if (dest_row[m] >= 0) ptrs[m] = d_dest.get() + dest_row[m] * cs.n;
    d_ptrs.upload(ptrs);
    d_scale.upload(scale);
  }

  {
    SCOPED_TRACE(cfg.name());
    d_out.poison();
    if (scatter) d_dest.poison();
    FpropArgs args;
    args.common = {d_counts.get(), cs.e_local, cap, cs.n, cs.k, cfg.get()};
    args.a = d_a.get();
    args.w = d_w.get();
    args.out = d_out.get();
    if (scatter) {
      args.scatter.row_ptrs = d_ptrs.get();
      args.scatter.row_scale = d_scale.get();
    }
    grouped_gemm_fprop(args, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const std::string what = std::string(scatter ? "fprop+scatter " : "fprop ") + case_name(cs) + " " + cfg.name();
    if (!scatter) {
      const auto out = d_out.download();
      expect_close(what, from_bf16_bits(out), ref);
      expect_poison(what + " tail rows", raw_bytes(out), static_cast<size_t>(M * cs.n) * 2,
                    static_cast<size_t>(cap * cs.n) * 2);
    } else {
      const auto dest_bits = d_dest.download();
      const auto dest = from_bf16_bits(dest_bits);
      // Reference restricted to the rows with a destination; where each landed.
      std::vector<float> ref_sel;
      std::vector<int64_t> idx;
      std::vector<bool> used(static_cast<size_t>(dest_rows), false);
      for (int64_t m = 0; m < M; ++m) {
        if (dest_row[m] < 0) continue;
        used[dest_row[m]] = true;
        for (int64_t n = 0; n < cs.n; ++n) {
          ref_sel.push_back(ref[m * cs.n + n]);
          idx.push_back(dest_row[m] * cs.n + n);
        }
      }
      expect_close(what, [&](int64_t i) { return static_cast<double>(dest[idx[i]]); }, ref_sel);
      const auto raw = raw_bytes(dest_bits);
      for (int64_t r = 0; r < dest_rows; ++r)
        if (!used[r])
          expect_poison(what + " unused destination row", raw, static_cast<size_t>(r * cs.n) * 2,
                        static_cast<size_t>((r + 1) * cs.n) * 2);
      expect_poison(what + " (plain out untouched)", raw_bytes(d_out.download()), 0,
                    static_cast<size_t>(cap * cs.n) * 2);
    }
  }
}

// W13 FPROP with the SwiGLU epilogue: h1 (saved or dropped), h2, clip statistics; optionally with
// the gather producer reading A through a row-address table from two "remote" allocations.
struct SwigluOptions {
  bool clamped = false;
  bool save_h1 = true;
  bool gather = false;
};

void run_w13_case(const Case& cs, const SwigluOptions& opt, const GroupedGemmConfig& cfg) {
  std::mt19937 rng(cs.seed);
  const CaseRows rows = case_rows(cs, rng);
  const auto& counts = rows.counts;
  const int64_t M = rows.M, cap = rows.cap;
  const int64_t D = cs.k, F = cs.n / 2;
  const float alpha = 1.702f, limit = 0.6f, clip_limit = 0.45f;  // small limits: clamping and clipping both happen
  reference::SwigluParams act;
  act.activation = opt.clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
  act.alpha = alpha;
  act.limit = limit;

  // A rows: either a plain [cap, D] buffer, or gathered from two source allocations (nullptr = zero row).
  HostBf16 a = random_bf16(static_cast<size_t>(cap * D), 1.0f, rng);
  const int64_t src_rows = cap / 2 + 8;
  HostBf16 src0, src1;
  std::vector<int> src_of(static_cast<size_t>(cap), -1);
  std::vector<int64_t> src_row(static_cast<size_t>(cap), 0);
  if (opt.gather) {
    src0 = random_bf16(static_cast<size_t>(src_rows * D), 1.0f, rng);
    src1 = random_bf16(static_cast<size_t>(src_rows * D), 1.0f, rng);
    std::uniform_int_distribution<int64_t> pick(0, src_rows - 1);
    for (int64_t m = 0; m < M; ++m) {
      src_of[m] = (m % 11 == 5) ? -1 : static_cast<int>(m % 2);
      src_row[m] = pick(rng);
      for (int64_t d = 0; d < D; ++d) {
        const HostBf16& s = src_of[m] == 0 ? src0 : src1;
        a.vals[m * D + d] = src_of[m] < 0 ? 0.0f : s.vals[src_row[m] * D + d];
        a.bits[m * D + d] = src_of[m] < 0 ? 0 : s.bits[src_row[m] * D + d];
      }
    }
  }
  const HostBf16 w = random_bf16(static_cast<size_t>(cs.e_local * cs.n * D), 1.0f / std::sqrt(float(D)), rng);
  const std::vector<float>& ref_h1 = memo_ref("w13 " + case_key(cs) + (opt.gather ? "_gather" : ""), [&] {
    return rounded_bf16(ref_fprop(a.vals, w.vals, counts, cs.n, D));
  });
  const std::vector<float> ref_h2 = ref_swiglu_h2(ref_h1, F, act);

  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_a(a.bits.size()), d_w(w.bits);
  DeviceBuffer<uint16_t> d_h1(static_cast<size_t>(cap * cs.n)), d_h2(static_cast<size_t>(cap * F));
  DeviceBuffer<float> d_stats(3);
  // The statistics count the first clip_rows[e] rows of each expert (a block-scaled layer's real
  // rows, its padding rows after them): here up to two rows fewer than the expert's count.
  std::vector<int32_t> clip_rows(counts.size());
  for (size_t e = 0; e < counts.size(); ++e) clip_rows[e] = std::max(0, counts[e] - static_cast<int32_t>(e % 3));
  DeviceBuffer<int32_t> d_clip_rows(clip_rows);
  DeviceBuffer<uint16_t> d_src0(opt.gather ? src0.bits.size() : 0), d_src1(opt.gather ? src1.bits.size() : 0);
  DeviceBuffer<const void*> d_rows(opt.gather ? static_cast<size_t>(cap) : 0);
  DeviceBuffer<int32_t> d_ws = opt.gather ? gather_workspace(cap, cs.e_local) : DeviceBuffer<int32_t>();
  if (opt.gather) {
    d_src0.upload(src0.bits);
    d_src1.upload(src1.bits);
    std::vector<const void*> row_ptrs(static_cast<size_t>(cap), nullptr);
    for (int64_t m = 0; m < M; ++m)
      if (src_of[m] >= 0) row_ptrs[m] = (src_of[m] == 0 ? d_src0 : d_src1).get() + src_row[m] * D;
    d_rows.upload(row_ptrs);
  } else {
    d_a.upload(a.bits);
  }

  {
    SCOPED_TRACE(cfg.name());
    d_h1.poison();
    d_h2.poison();
    if (opt.gather) d_a.poison();
    W13FpropArgs args;
    args.common = {d_counts.get(), cs.e_local, cap, cs.n, D, &cfg};
    args.a = opt.gather ? nullptr : d_a.get();
    args.w13 = d_w.get();
    args.h1 = opt.save_h1 ? d_h1.get() : nullptr;
    args.h2 = d_h2.get();
    args.activation = opt.clamped ? Activation::kSwiGLUClamped : Activation::kSwiGLU;
    args.swiglu_alpha = alpha;
    args.swiglu_limit = limit;
    args.clip_stats = d_stats.get();
    args.clip_limit = clip_limit;
    args.clip_rows = d_clip_rows.get();
    if (opt.gather) {
      args.gather.row_ptrs = d_rows.get();
      args.gather.gathered = d_a.get();
      args.gather.workspace = d_ws.get();
    }
    grouped_gemm_w13_fprop(args, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const std::string what = std::string("w13 ") + (opt.clamped ? "clamped " : "plain ") +
                             (opt.gather ? "gather " : "") + case_name(cs) + " " + cfg.name();
    const auto h2 = d_h2.download();
    expect_close(what + " h2", from_bf16_bits(h2), ref_h2);
    expect_poison(what + " h2 tail rows", raw_bytes(h2), static_cast<size_t>(M * F) * 2, static_cast<size_t>(cap * F) * 2);
    const auto h1 = d_h1.download();
    if (opt.save_h1) {
      expect_close(what + " h1", from_bf16_bits(h1), ref_h1);
      expect_poison(what + " h1 tail rows", raw_bytes(h1), static_cast<size_t>(M * cs.n) * 2,
                    static_cast<size_t>(cap * cs.n) * 2);
      // Clip statistics: exactly the counts over the h1 the GPU stored, in each expert's first
      // clip_rows[e] rows.
      const auto h1v = from_bf16_bits(h1);
      double gate_over = 0, up_over = 0, elems = 0;
      for (int64_t e = 0, m0 = 0; e < static_cast<int64_t>(counts.size()); m0 += counts[e], ++e)
        for (int64_t m = m0; m < m0 + clip_rows[e]; ++m)
          for (int64_t f = 0; f < F; ++f) {
            gate_over += h1v[m * cs.n + f] > clip_limit;
            up_over += std::fabs(h1v[m * cs.n + F + f]) > clip_limit;
            elems += 1;
          }
      const auto stats = d_stats.download();
      EXPECT_EQ(stats[0], gate_over) << what << " clip stats: gate > limit";
      EXPECT_EQ(stats[1], up_over) << what << " clip stats: |up| > limit";
      EXPECT_EQ(stats[2], elems) << what << " clip stats: rows * F";
      std::printf("  %-58s clip stats %.0f %.0f %.0f (expected %.0f %.0f %.0f) %s\n", (what + " stats").c_str(),
                  stats[0], stats[1], stats[2], gate_over, up_over, elems,
                  (stats[0] == gate_over && stats[1] == up_over && stats[2] == elems) ? "PASS" : "FAIL");
    } else {
      expect_poison(what + " h1 dropped: untouched", raw_bytes(h1), 0, static_cast<size_t>(cap * cs.n) * 2);
    }
    if (opt.gather) {  // the gathered copy of A must equal the rows it was gathered from, bitwise
      const auto g = d_a.download();
      int64_t diff = 0;
      for (int64_t i = 0; i < M * D; ++i) diff += g[i] != a.bits[i];
      EXPECT_EQ(diff, 0) << what << ": gathered rows differ from their sources";
      std::printf("  %-58s %s\n", (what + " gathered copy bitwise").c_str(), diff == 0 ? "PASS" : "FAIL");
    }
  }
}

// DGRAD: grad_a = grad_out . W[e], BF16 or FP32, overwrite or accumulate; gather / scatter.
struct DgradOptions {
  DType out = DType::kBFloat16;
  bool accumulate = false;
  bool gather = false;
  bool scatter = false;
};

void run_dgrad_case(const Case& cs, const DgradOptions& opt, const GroupedGemmConfig& cfg) {
  std::mt19937 rng(cs.seed);
  const CaseRows rows = case_rows(cs, rng);
  const auto& counts = rows.counts;
  const int64_t M = rows.M, cap = rows.cap;
  const bool fp32 = opt.out == DType::kFloat32;
  HostBf16 g = random_bf16(static_cast<size_t>(cap * cs.n), 1.0f, rng);
  const HostBf16 w = random_bf16(static_cast<size_t>(cs.e_local * cs.n * cs.k), 1.0f / std::sqrt(float(cs.n)), rng);
  // Gather: grad_out rows come from one source allocation in shuffled order.
  HostBf16 src;
  std::vector<int64_t> src_row(static_cast<size_t>(cap), -1);
  if (opt.gather) {
    src = random_bf16(static_cast<size_t>(cap * cs.n), 1.0f, rng);
    const std::vector<int64_t> perm = shuffled_rows(cap, rng);
    for (int64_t m = 0; m < M; ++m) {
      src_row[m] = perm[m];
      for (int64_t j = 0; j < cs.n; ++j) {
        g.vals[m * cs.n + j] = src.vals[perm[m] * cs.n + j];
        g.bits[m * cs.n + j] = src.bits[perm[m] * cs.n + j];
      }
    }
  }
  std::vector<float> ref = memo_ref("dgrad " + case_key(cs) + (opt.gather ? "_gather" : ""),
                                    [&] { return ref_dgrad(g.vals, w.vals, counts, cs.n, cs.k); });
  // Accumulation source: random values in the output's dtype.
  const HostBf16 prev = random_bf16(static_cast<size_t>(cap * cs.k), 1.0f, rng);
  apply_output_store(ref, prev.vals, opt.accumulate, fp32);
  std::vector<int64_t> dest_row(static_cast<size_t>(cap), -1);
  const int64_t dest_rows = cap + 5;
  if (opt.scatter) {
    const std::vector<int64_t> perm = shuffled_rows(dest_rows, rng);
    for (int64_t m = 0; m < M; ++m) dest_row[m] = perm[m];
  }

  // Outputs as bytes: BF16 or FP32 by opt.out.
  const size_t out_elem = fp32 ? 4 : 2;
  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_g(g.bits.size()), d_w(w.bits);
  DeviceBuffer<uint8_t> d_out(static_cast<size_t>(cap * cs.k) * out_elem);
  DeviceBuffer<uint16_t> d_src(opt.gather ? src.bits.size() : 0);
  DeviceBuffer<const void*> d_rows(opt.gather ? static_cast<size_t>(cap) : 0);
  DeviceBuffer<int32_t> d_ws = opt.gather ? gather_workspace(cap, cs.e_local) : DeviceBuffer<int32_t>();
  DeviceBuffer<uint8_t> d_dest(opt.scatter ? static_cast<size_t>(dest_rows * cs.k) * out_elem : 0);
  DeviceBuffer<void*> d_dptrs(opt.scatter ? static_cast<size_t>(cap) : 0);
  if (opt.gather) {
    d_src.upload(src.bits);
    std::vector<const void*> row_ptrs(static_cast<size_t>(cap), nullptr);
    for (int64_t m = 0; m < M; ++m) row_ptrs[m] = d_src.get() + src_row[m] * cs.n;
    d_rows.upload(row_ptrs);
  } else {
    d_g.upload(g.bits);
  }
  if (opt.scatter) {
    std::vector<void*> ptrs(static_cast<size_t>(cap), nullptr);
    for (int64_t m = 0; m < M; ++m) ptrs[m] = d_dest.get() + dest_row[m] * cs.k * out_elem;
    d_dptrs.upload(ptrs);
  }

  {
    SCOPED_TRACE(cfg.name());
    DeviceBuffer<uint8_t>& target = opt.scatter ? d_dest : d_out;
    const size_t elems = target.size() / out_elem;
    target.poison();
    if (opt.accumulate) {  // previous contents: prev (rows of the scatter destinations for scatter)
      std::vector<float> pf(elems, 0.0f);
      std::vector<uint16_t> pb(elems, 0);
      for (int64_t m = 0; m < M; ++m) {
        const int64_t r = opt.scatter ? dest_row[m] : m;
        for (int64_t j = 0; j < cs.k; ++j) {
          pf[r * cs.k + j] = prev.vals[m * cs.k + j];
          pb[r * cs.k + j] = prev.bits[m * cs.k + j];
        }
      }
      target.upload(fp32 ? raw_bytes(pf) : raw_bytes(pb));
    }
    if (opt.gather) d_g.poison();
    DgradArgs args;
    args.common = {d_counts.get(), cs.e_local, cap, cs.n, cs.k, &cfg};
    args.grad_out = opt.gather ? nullptr : d_g.get();
    args.w = d_w.get();
    args.grad_a = opt.scatter ? nullptr : d_out.get();
    args.out_dtype = opt.out;
    args.accumulate = opt.accumulate;
    if (opt.gather) {
      args.gather.row_ptrs = d_rows.get();
      args.gather.gathered = d_g.get();
      args.gather.workspace = d_ws.get();
    }
    if (opt.scatter) args.scatter.row_ptrs = d_dptrs.get();
    grouped_gemm_dgrad(args, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const std::string what = std::string("dgrad ") + (fp32 ? "fp32 " : "bf16 ") + (opt.accumulate ? "acc " : "") +
                             (opt.gather ? "gather " : "") + (opt.scatter ? "scatter " : "") + case_name(cs) + " " +
                             cfg.name();
    const std::vector<uint8_t> raw = target.download();
    if (!opt.scatter) {
      expect_close(what, [&](int64_t i) { return out_at(raw, 0, i, fp32); }, ref);
      if (!opt.accumulate)
        expect_poison(what + " tail rows", raw, static_cast<size_t>(M * cs.k) * out_elem, raw.size());
    } else {
      expect_close(what, [&](int64_t i) { return out_at(raw, 0, dest_row[i / cs.k] * cs.k + i % cs.k, fp32); }, ref);
    }
  }
}

// WGRAD: grad_w[e] = grad_out[rows_e]^T . x[rows_e], FP32 or BF16, overwrite (empty experts -> 0)
// or accumulate (empty experts untouched).
void run_wgrad_case(const Case& cs, DType out, bool accumulate, const CaseConfig& cfg) {
  std::mt19937 rng(cs.seed);
  const CaseRows rows = case_rows(cs, rng);
  const auto& counts = rows.counts;
  const int64_t M = rows.M, cap = rows.cap;
  const bool fp32 = out == DType::kFloat32;
  const HostBf16 g = random_bf16(static_cast<size_t>(cap * cs.n), 1.0f, rng);
  const HostBf16 x = random_bf16(static_cast<size_t>(cap * cs.k), 1.0f, rng);
  std::vector<float> ref =
      memo_ref("wgrad " + case_key(cs), [&] { return ref_wgrad(g.vals, x.vals, counts, cs.n, cs.k); });
  const HostBf16 prev = random_bf16(ref.size(), 4.0f, rng);
  apply_output_store(ref, prev.vals, accumulate, fp32);

  const size_t out_elem = fp32 ? 4 : 2;
  DeviceBuffer<int32_t> d_counts(counts);
  DeviceBuffer<uint16_t> d_g(nan_past_rows(g.bits, M, cs.n)), d_x(nan_past_rows(x.bits, M, cs.k));
  DeviceBuffer<uint8_t> d_out(ref.size() * out_elem);  // BF16 or FP32 by `out`
  const Tolerance tol = wgrad_tolerance(fp32);
  {
    SCOPED_TRACE(cfg.name());
    if (accumulate) {
      d_out.upload(fp32 ? raw_bytes(prev.vals) : raw_bytes(prev.bits));
    } else {
      d_out.poison();
    }
    WgradArgs args;
    args.common = {d_counts.get(), cs.e_local, cap, cs.n, cs.k, cfg.get()};
    args.grad_out = d_g.get();
    args.a = d_x.get();
    args.grad_w = d_out.get();
    args.out_dtype = out;
    args.accumulate = accumulate;
    grouped_gemm_wgrad(args, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const std::string what = std::string("wgrad ") + (fp32 ? "fp32 " : "bf16 ") + (accumulate ? "acc " : "") +
                             case_name(cs) + " " + cfg.name();
    const std::vector<uint8_t> raw = d_out.download();
    expect_close(what, [&](int64_t i) { return out_at(raw, 0, i, fp32); }, ref, tol);
  }
}

// ---- tests ----------------------------------------------------------------------------------------
// Shapes: D and F multiples of 128 from 256 to 7168, E_local from 1 to 128 (256 for the heuristic's
// many-expert picks; the reference is a host GEMM, so the biggest shapes get few rows).
const Case kFpropCases[] = {
    {1, 256, 256, 300, 11},      // one expert, rows not a multiple of any tile
    {8, 384, 512, 260, 12},      // N an odd multiple of 128 (masked last column block)
    {128, 256, 384, 40, 13},     // many small experts, a quarter empty
    {4, 7168, 256, 130, 14},     // wide N (W2 at D = 7168)
    {3, 512, 7168, 140, 15},     // deep K
};

// Each suite below runs its cases once per compiled configuration of its op (the parameter; the
// test name is gemm_param_name(): op, operand formats, output type, configuration).
class GroupedGemmFprop : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmW13Swiglu : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmW13SwigluGather : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmDgradBf16 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmDgradFp32 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmDgradGather : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmWgradFp32 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmWgradBf16 : public ::testing::TestWithParam<GemmParam> {};

INSTANTIATE_TEST_SUITE_P(, GroupedGemmFprop,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kFprop, DType::kBFloat16, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmW13Swiglu,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmW13SwigluGather,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, true)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmDgradBf16,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kDgrad, DType::kBFloat16, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmDgradFp32,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kDgrad, DType::kFloat32, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmDgradGather,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kDgrad, DType::kBFloat16, true)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmWgradFp32,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kWgrad, DType::kFloat32, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmWgradBf16,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kWgrad, DType::kBFloat16, false)),
                         GemmParamName());

TEST_P(GroupedGemmFprop, Ragged) {
  DMOE_REQUIRE_SM90();
  for (const Case& c : kFpropCases) run_fprop_case(c, false, {GetParam().config});
}

TEST_P(GroupedGemmFprop, ScatterWithRowScale) {
  DMOE_REQUIRE_SM90();
  run_fprop_case({8, 384, 512, 260, 21}, true, {GetParam().config});
  run_fprop_case({64, 256, 256, 50, 22}, true, {GetParam().config});
}

const Case kW13Cases[] = {
    {1, 512, 256, 300, 31},      // F = 256, D = 256
    {8, 1280, 384, 260, 32},     // F = 640
    {128, 512, 256, 40, 33},     // E_local = 128
    {4, 512, 7168, 150, 34},     // D = 7168
    {2, 14336, 256, 90, 35},     // F = 7168
    {16, 1536, 2048, 100, 36},   // qwen3-like F = 768, D = 2048
};

TEST_P(GroupedGemmW13Swiglu, Plain) {
  DMOE_REQUIRE_SM90();
  for (const Case& c : kW13Cases) run_w13_case(c, {false, true, false}, GetParam().config);
}

TEST_P(GroupedGemmW13Swiglu, ClampedDropH1) {
  DMOE_REQUIRE_SM90();
  run_w13_case(kW13Cases[1], {true, false, false}, GetParam().config);
  run_w13_case(kW13Cases[2], {true, true, false}, GetParam().config);
}

TEST_P(GroupedGemmW13SwigluGather, FromTwoAllocations) {
  DMOE_REQUIRE_SM90();
  run_w13_case(kW13Cases[1], {false, true, true}, GetParam().config);
  run_w13_case(kW13Cases[2], {true, true, true}, GetParam().config);
  run_w13_case(kW13Cases[3], {false, true, true}, GetParam().config);
}

TEST_P(GroupedGemmDgradBf16, Plain) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({8, 512, 384, 260, 41}, {DType::kBFloat16, false, false, false}, GetParam().config);
  run_dgrad_case({128, 256, 256, 40, 42}, {DType::kBFloat16, false, false, false}, GetParam().config);
  run_dgrad_case({3, 7168, 256, 140, 43}, {DType::kBFloat16, false, false, false}, GetParam().config);  // W2: n = D
}

TEST_P(GroupedGemmDgradFp32, Plain) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({2, 256, 7168, 140, 44}, {DType::kFloat32, false, false, false}, GetParam().config);  // W13: k = D
  run_dgrad_case({8, 512, 384, 260, 45}, {DType::kFloat32, false, false, false}, GetParam().config);
}

TEST_P(GroupedGemmDgradBf16, Accumulate) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({8, 512, 384, 260, 51}, {DType::kBFloat16, true, false, false}, GetParam().config);
}

TEST_P(GroupedGemmDgradFp32, Accumulate) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({8, 512, 384, 260, 52}, {DType::kFloat32, true, false, false}, GetParam().config);
}

TEST_P(GroupedGemmDgradGather, Gather) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({8, 512, 384, 260, 61}, {DType::kBFloat16, false, true, false}, GetParam().config);
}

TEST_P(GroupedGemmDgradBf16, Scatter) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({8, 512, 384, 260, 62}, {DType::kBFloat16, false, false, true}, GetParam().config);
}

TEST_P(GroupedGemmDgradGather, GatherAndScatter) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({32, 256, 512, 80, 63}, {DType::kBFloat16, false, true, true}, GetParam().config);
}

const Case kWgradCases[] = {
    {1, 256, 256, 300, 71},
    {8, 384, 512, 260, 72},      // k an even multiple of 256, n odd multiple of 128
    {16, 512, 384, 130, 73},     // k an odd multiple of 128
    {128, 256, 256, 40, 74},     // many experts, a quarter empty
    {2, 512, 7168, 100, 75},     // W13 WGRAD-like: k = D = 7168
};

TEST_P(GroupedGemmWgradFp32, Overwrite) {
  DMOE_REQUIRE_SM90();
  for (const Case& c : kWgradCases) run_wgrad_case(c, DType::kFloat32, false, {GetParam().config});
}

TEST_P(GroupedGemmWgradBf16, Overwrite) {
  DMOE_REQUIRE_SM90();
  run_wgrad_case(kWgradCases[1], DType::kBFloat16, false, {GetParam().config});
  run_wgrad_case(kWgradCases[3], DType::kBFloat16, false, {GetParam().config});
}

TEST_P(GroupedGemmWgradFp32, Accumulate) {
  DMOE_REQUIRE_SM90();
  run_wgrad_case(kWgradCases[1], DType::kFloat32, true, {GetParam().config});
}

TEST_P(GroupedGemmWgradBf16, Accumulate) {
  DMOE_REQUIRE_SM90();
  run_wgrad_case(kWgradCases[3], DType::kBFloat16, true, {GetParam().config});
}

// 256 local experts (dsv3_prefill at EP1): the scheduler tables crowd out the preferred tiles'
// TMA staging, so the heuristic falls back (WGRAD: deep-staging ping-pong, docs/perf.md G36;
// FPROP: padded staging); its pick, overwriting and accumulating.
TEST(GroupedGemmWgrad, ManyExpertsHeuristicPick) {
  DMOE_REQUIRE_SM90();
  const Case many = {256, 256, 512, 24, 76};
  run_wgrad_case(many, DType::kBFloat16, false, kHeuristicPick);
  run_wgrad_case(many, DType::kBFloat16, true, kHeuristicPick);
  run_wgrad_case(many, DType::kFloat32, false, kHeuristicPick);
  run_fprop_case({256, 512, 256, 24, 77}, false, kHeuristicPick);
}

// ---- ragged tails and the dynamic tile schedule (docs/perf.md G8/G9) ------------------------------
// Every expert's last M tile (FPROP/DGRAD) or last k block (WGRAD) partial in each way that
// matters: tails of 1, 63, 64, 65, 127 rows past a full tile, exact tile multiples, empty experts
// between full ones, tails of 129+ (two tiles, the second a tail). Every configuration runs,
// static and `_dyn`; outputs are poisoned first and rows past sum(counts) must stay untouched.
const std::vector<int32_t> kTailCounts = {0, 1, 63, 64, 65, 127, 128, 129, 0, 191, 192, 193, 255, 257, 0, 383, 1, 0};
const int64_t kTailExperts = static_cast<int64_t>(kTailCounts.size());

TEST_P(GroupedGemmFprop, TailRows) {
  DMOE_REQUIRE_SM90();
  run_fprop_case({kTailExperts, 256, 256, 383, 81, &kTailCounts}, false, {GetParam().config});
  // scatter + row scale, N an odd multiple of 128
  run_fprop_case({kTailExperts, 384, 512, 383, 82, &kTailCounts}, true, {GetParam().config});
}

TEST_P(GroupedGemmW13Swiglu, TailRows) {
  DMOE_REQUIRE_SM90();
  run_w13_case({kTailExperts, 512, 256, 383, 83, &kTailCounts}, {false, true, false}, GetParam().config);
}

TEST_P(GroupedGemmW13SwigluGather, TailRowsClampedDropH1) {
  DMOE_REQUIRE_SM90();
  run_w13_case({kTailExperts, 512, 384, 383, 84, &kTailCounts}, {true, false, true}, GetParam().config);
}

TEST_P(GroupedGemmDgradBf16, TailRows) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({kTailExperts, 256, 512, 383, 85, &kTailCounts}, {DType::kBFloat16, false, false, false},
                 GetParam().config);
}

TEST_P(GroupedGemmDgradFp32, TailRowsAccumulate) {
  DMOE_REQUIRE_SM90();
  run_dgrad_case({kTailExperts, 512, 256, 383, 86, &kTailCounts}, {DType::kFloat32, true, false, false},
                 GetParam().config);
}

TEST_P(GroupedGemmWgradBf16, TailRows) {
  DMOE_REQUIRE_SM90();
  run_wgrad_case({kTailExperts, 256, 256, 383, 87, &kTailCounts}, DType::kBFloat16, false, {GetParam().config});
}

TEST_P(GroupedGemmWgradFp32, TailRowsAccumulate) {
  DMOE_REQUIRE_SM90();
  run_wgrad_case({kTailExperts, 256, 384, 383, 88, &kTailCounts}, DType::kFloat32, true, {GetParam().config});
}

// Decode shapes (few rows per expert, where the heuristic picks swap-AB) with every configuration;
// GroupedGemmDecode checks the pick.
TEST_P(GroupedGemmFprop, DecodeShapes) {
  DMOE_REQUIRE_SM90();
  run_fprop_case({16, 384, 512, 70, 83}, false, {GetParam().config});
  run_fprop_case({16, 512, 256, 70, 84}, true, {GetParam().config});
}

TEST_P(GroupedGemmW13Swiglu, DecodeShapes) {
  DMOE_REQUIRE_SM90();
  run_w13_case({16, 512, 512, 70, 81}, {false, true, false}, GetParam().config);
  run_w13_case({16, 512, 512, 70, 82}, {true, true, false}, GetParam().config);
}

// The heuristic's picks (select_grouped_gemm_config, host logic) are tested on the CPU:
// tests/cpu/test_gemm_config.cpp.

// The dynamic schedule's global counter resets itself at the end of every launch: back-to-back
// launches with different grids (3 CTAs, all SMs, 7 CTAs), the same call inside a CUDA graph
// replayed three times, and a static launch in between must all give the static result bitwise.
TEST(GroupedGemmSchedule, DynamicCounterResetsAcrossLaunchesAndGraphs) {
  DMOE_REQUIRE_SM90();
  std::mt19937 rng(91);
  const int64_t E = static_cast<int64_t>(kTailCounts.size()), N = 256, K = 512;
  const int64_t M = total_rows(kTailCounts);
  const int64_t cap = M + kSlackRows;
  const HostBf16 a = random_bf16(static_cast<size_t>(cap * K), 1.0f, rng);
  const HostBf16 w = random_bf16(static_cast<size_t>(E * N * K), 1.0f / std::sqrt(float(K)), rng);
  DeviceBuffer<int32_t> d_counts(kTailCounts);
  DeviceBuffer<uint16_t> d_a(a.bits), d_w(w.bits), d_out(static_cast<size_t>(cap * N));
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  auto call = [&](const GroupedGemmConfig& cfg) {
    FpropArgs args;
    args.common = {d_counts.get(), E, cap, N, K, &cfg};
    args.a = d_a.get();
    args.w = d_w.get();
    args.out = d_out.get();
    grouped_gemm_fprop(args, stream);
  };
  for (const GroupedGemmConfig& base : grouped_gemm_configs(GroupedGemmOp::kFprop, DType::kBFloat16, false)) {
    if (!base.dynamic_schedule) continue;
    SCOPED_TRACE(base.name());
    GroupedGemmConfig st = base;
    st.dynamic_schedule = false;
    d_out.poison();  // cudaMemset runs on the legacy stream: finish it before `stream` writes
    CUDA_OK(cudaDeviceSynchronize());
    call(st);
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto want = d_out.download();
    for (int sms : {3, 0, 7}) {
      GroupedGemmConfig c = base;
      c.num_sms = sms;
      d_out.poison();
      CUDA_OK(cudaDeviceSynchronize());
      call(c);
      CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_TRUE(d_out.download() == want) << "num_sms " << sms;
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    call(base);
    call(base);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < 3; ++r) {
      d_out.poison();
      CUDA_OK(cudaDeviceSynchronize());
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_TRUE(d_out.download() == want) << "graph replay " << r;
      call(st);  // a static launch in between must not disturb the counter
      CUDA_OK(cudaStreamSynchronize(stream));
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  }
  CUDA_OK(cudaStreamDestroy(stream));
}

// 2-CTA clusters (WGRAD `_c2`, docs/perf.md G15): each tile runs the same wgmma sequence as the
// unclustered cooperative kernel, so the results must match it bitwise -- for grids the launch
// rounds to whole clusters (1 and 3 SMs -> 2 CTAs, 7 -> 6, all), an odd number of M tiles (n = 384:
// the last pair's second CTA computes a phantom tile and must store nothing), tail rows and empty
// experts, FP32 accumulate and BF16 overwrite, and replays of a CUDA graph.
TEST(GroupedGemmCluster, WgradMatchesCooperativeBitwise) {
  DMOE_REQUIRE_SM90();
  struct Shape { int64_t n, k; DType out; bool accumulate; };
  const Shape shapes[] = {{384, 512, DType::kBFloat16, false}, {512, 256, DType::kFloat32, true},
                          {256, 768, DType::kBFloat16, true}};
  const int64_t E = static_cast<int64_t>(kTailCounts.size());
  const int64_t M = total_rows(kTailCounts), cap = M + kSlackRows;
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint32_t seed = 95;
  for (const Shape& sh : shapes) {
    std::mt19937 rng(seed++);
    const bool fp32 = sh.out == DType::kFloat32;
    const HostBf16 g = random_bf16(static_cast<size_t>(cap * sh.n), 1.0f, rng);
    const HostBf16 x = random_bf16(static_cast<size_t>(cap * sh.k), 1.0f, rng);
    const size_t out_elems = static_cast<size_t>(E * sh.n * sh.k);
    const HostBf16 prev = random_bf16(out_elems, 4.0f, rng);
    DeviceBuffer<int32_t> d_counts(kTailCounts);
    DeviceBuffer<uint16_t> d_g(nan_past_rows(g.bits, M, sh.n)), d_x(nan_past_rows(x.bits, M, sh.k));
    DeviceBuffer<uint8_t> d_out(out_elems * (fp32 ? 4 : 2));
    auto reset = [&] {
      if (sh.accumulate) d_out.upload(fp32 ? raw_bytes(prev.vals) : raw_bytes(prev.bits));
      else d_out.poison();
      CUDA_OK(cudaDeviceSynchronize());
    };
    auto call = [&](const GroupedGemmConfig& cfg) {
      WgradArgs args;
      args.common = {d_counts.get(), E, cap, sh.n, sh.k, &cfg};
      args.grad_out = d_g.get();
      args.a = d_x.get();
      args.grad_w = d_out.get();
      args.out_dtype = sh.out;
      args.accumulate = sh.accumulate;
      grouped_gemm_wgrad(args, stream);
    };
    GroupedGemmConfig coop;
    coop.block_m = 128;
    coop.block_n = 256;
    coop.stages = 4;
    coop.tma_store = true;
    GroupedGemmConfig c2 = coop;
    c2.cluster_m = 2;
    const std::string what = "n " + std::to_string(sh.n) + " k " + std::to_string(sh.k) + (fp32 ? " fp32" : " bf16") +
                             (sh.accumulate ? " acc" : "");
    SCOPED_TRACE(what);
    reset();
    call(coop);
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto want = d_out.download();
    for (int sms : {1, 3, 7, 0}) {
      GroupedGemmConfig c = c2;
      c.num_sms = sms;
      reset();
      call(c);
      CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_TRUE(d_out.download() == want) << c.name() << " num_sms " << sms;
    }
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    call(c2);
    CUDA_OK(cudaStreamEndCapture(stream, &graph));
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    for (int r = 0; r < 2; ++r) {
      reset();
      CUDA_OK(cudaGraphLaunch(exec, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_TRUE(d_out.download() == want) << "graph replay " << r;
    }
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
  }
  CUDA_OK(cudaStreamDestroy(stream));
  // A cluster cannot share a dynamic schedule: rejected before launch.
  GroupedGemmConfig bad;
  bad.tma_store = true;
  bad.cluster_m = 2;
  bad.dynamic_schedule = true;
  WgradArgs a;
  a.common = {reinterpret_cast<const int32_t*>(16), 8, 1024, 256, 256, &bad};
  a.grad_out = reinterpret_cast<const void*>(256);
  a.a = reinterpret_cast<const void*>(256);
  a.grad_w = reinterpret_cast<void*>(256);
  expect_error([&] { grouped_gemm_wgrad(a, nullptr); }, "dynamic_schedule needs cluster_m = 1");
}

// FPROP in 2-CTA clusters: pairs of M tiles share the weight block. Ragged counts give experts an
// odd number of M tiles (the phantom CTA of the last pair must issue no wgmma and store nothing) and
// tails; each clustered kernel must match its unclustered twin bitwise (same wgmma sequence per
// tile), plain (cooperative and ping-pong) and with the SwiGLU split (gate half from CTA 0, up half
// from CTA 1), for grids rounded to whole clusters.
TEST(GroupedGemmCluster, FpropMatchesUnclusteredBitwise) {
  DMOE_REQUIRE_SM90();
  const int64_t E = static_cast<int64_t>(kTailCounts.size());
  const int64_t M = total_rows(kTailCounts), cap = M + kSlackRows;
  const int64_t N = 512, K = 384;  // W13: 2F = 512 (F = 256), D = 384
  std::mt19937 rng(97);
  const HostBf16 a = random_bf16(static_cast<size_t>(cap * K), 1.0f, rng);
  const HostBf16 w = random_bf16(static_cast<size_t>(E * N * K), 1.0f / std::sqrt(float(K)), rng);
  DeviceBuffer<int32_t> d_counts(kTailCounts);
  DeviceBuffer<uint16_t> d_a(a.bits), d_w(w.bits), d_out(static_cast<size_t>(cap * N)), d_h2(static_cast<size_t>(cap * N / 2));
  auto plain = [&](const GroupedGemmConfig& cfg) {
    FpropArgs args;
    args.common = {d_counts.get(), E, cap, N, K, &cfg};
    args.a = d_a.get();
    args.w = d_w.get();
    args.out = d_out.get();
    d_out.poison();
    grouped_gemm_fprop(args, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // (CUDA_OK returns: not in a value lambda)
    return d_out.download();
  };
  auto swiglu = [&](const GroupedGemmConfig& cfg) {
    W13FpropArgs args;
    args.common = {d_counts.get(), E, cap, N, K, &cfg};
    args.a = d_a.get();
    args.w13 = d_w.get();
    args.h1 = d_out.get();
    args.h2 = d_h2.get();
    d_out.poison();
    d_h2.poison();
    grouped_gemm_w13_fprop(args, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<uint16_t> both = d_out.download();
    const std::vector<uint16_t> h2 = d_h2.download();
    both.insert(both.end(), h2.begin(), h2.end());
    return both;
  };
  for (bool split : {false, true}) {
    for (bool pp : {false, true}) {
      GroupedGemmConfig base;
      base.block_n = pp ? 128 : 256;
      base.stages = pp ? 6 : 4;
      base.pingpong = pp;
      base.tma_store = true;
      const auto want = split ? swiglu(base) : plain(base);
      for (int sms : {1, 7, 0}) {
        GroupedGemmConfig c2 = base;
        c2.cluster_m = 2;
        c2.num_sms = sms;
        EXPECT_TRUE((split ? swiglu(c2) : plain(c2)) == want)
            << (split ? "w13 " : "fprop ") << c2.name() << " num_sms " << sms;
      }
    }
  }
}

// Decode shapes: few rows per expert, so the heuristic picks swap-AB, and its pick is right (the
// DecodeShapes tests run every configuration on the same shapes; the sweeps above also run the
// swap-AB kernels on large counts).
TEST(GroupedGemmDecode, SwapABPickedAndCorrect) {
  DMOE_REQUIRE_SM90();
  GroupedGemmProblem p;
  p.op = GroupedGemmOp::kFpropSwiglu;
  p.m_capacity = 1024;
  p.n = 4096;
  p.k = 7168;
  p.e_local = 128;
  EXPECT_TRUE(select_grouped_gemm_config(p, 132).swap_ab) << "decode W13 should use swap-AB";
  p.op = GroupedGemmOp::kFprop;
  EXPECT_TRUE(select_grouped_gemm_config(p, 132).swap_ab) << "decode W2 should use swap-AB";
  run_fprop_case({16, 384, 512, 70, 83}, false, kHeuristicPick);
}

// Host-side argument validation: clear errors, nothing launched.
TEST(GroupedGemmArgs, RejectsBadArguments) {
  FpropArgs a;
  a.common = {reinterpret_cast<const int32_t*>(16), 8, 1024, 384, 512, nullptr};
  a.a = reinterpret_cast<const void*>(256);
  a.w = reinterpret_cast<const void*>(256);
  a.out = reinterpret_cast<void*>(256);
  FpropArgs b = a;
  b.common.n = 300;
  expect_error([&] { grouped_gemm_fprop(b, nullptr); }, "multiple of 128");
  b = a;
  b.common.e_local = 0;
  expect_error([&] { grouped_gemm_fprop(b, nullptr); }, "e_local must be in");
  b = a;
  b.common.counts = nullptr;
  expect_error([&] { grouped_gemm_fprop(b, nullptr); }, "counts");
  b = a;
  b.w = reinterpret_cast<const void*>(258);
  expect_error([&] { grouped_gemm_fprop(b, nullptr); }, "16-byte aligned");
  W13FpropArgs w;
  w.common = a.common;
  w.common.n = 384;
  w.a = a.a;
  w.w13 = a.w;
  w.h2 = a.out;
  expect_error([&] { grouped_gemm_w13_fprop(w, nullptr); }, "F a multiple of 128");
}

// Operand formats without kernels (MXFP8 rows against 1x32 inference weights, NVFP4, a transposed BF16 operand) are
// refused by name before anything runs; no BF16 kernel runs in their place.
TEST(GroupedGemmArgs, RejectsFormatsWithoutKernels) {
  FpropArgs a;
  a.common = {reinterpret_cast<const int32_t*>(16), 8, 1024, 384, 512, nullptr};
  a.a = reinterpret_cast<const void*>(256);
  a.w = reinterpret_cast<const void*>(256);
  a.out = reinterpret_cast<void*>(256);
  // MXFP8 rows against a 1x32-row (inference) weight: the MXFP8 kernels read 32x32 tiles only.
  a.common.a_format = kMxfp8Rows;
  a.common.b_format = {DType::kFloat8E4M3, ScaleKind::kE8M0_1x32, OperandLayout::kRowMajor};
  expect_error([&] { grouped_gemm_fprop(a, nullptr); },
               "no grouped GEMM kernel for A=e4m3_e8m0_1x32, B=e4m3_e8m0_1x32 (fprop, bfloat16 output)");
  WgradArgs w;
  w.common = a.common;
  w.common.a_format = {};
  w.common.b_format = {DType::kFloat4E2M1x2, ScaleKind::kE4M3_1x16_FP32Global, OperandLayout::kRowMajor};
  w.grad_out = a.a;
  w.a = a.a;
  w.grad_w = a.out;
  expect_error([&] { grouped_gemm_wgrad(w, nullptr); }, "B=e2m1x2_e4m3_1x16_fp32g (wgrad, float32 output)");
  DgradArgs d;
  d.common = a.common;
  d.common.a_format = {};
  d.common.b_format = {DType::kBFloat16, ScaleKind::kNone, OperandLayout::kColumnMajor};
  d.grad_out = a.a;
  d.w = a.w;
  d.grad_a = a.out;
  expect_error([&] { grouped_gemm_dgrad(d, nullptr); }, "B=bf16_col");
  EXPECT_TRUE(grouped_gemm_configs(GroupedGemmOp::kFprop, DType::kBFloat16, false, a.common.a_format,
                                   a.common.b_format)
                  .empty());
}

TEST(GroupedGemmArgs, OverrideMustExist) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<int32_t> counts(2);
  DeviceBuffer<uint16_t> x(1024 * 256), wt(2 * 256 * 256), out(1024 * 256);
  cudaMemset(counts.get(), 0, 8);
  GroupedGemmConfig bogus;
  bogus.block_n = 96;
  FpropArgs a;
  a.common = {counts.get(), 2, 1024, 256, 256, &bogus};
  a.a = x.get();
  a.w = wt.get();
  a.out = out.get();
  expect_error([&] { grouped_gemm_fprop(a, nullptr); }, "available");  // no compiled kernel for it
}

// All counts zero: nothing is written (FPROP), WGRAD overwrite writes zeros.
TEST(GroupedGemmEdge, AllExpertsEmpty) {
  DMOE_REQUIRE_SM90();
  const int64_t E = 4, N = 256, K = 256, cap = 200;
  DeviceBuffer<int32_t> counts(E);
  DeviceBuffer<uint16_t> x(cap * K), wt(E * N * K), out(cap * N);
  DeviceBuffer<float> gw(E * N * K);
  cudaMemset(counts.get(), 0, E * 4);
  cudaMemset(x.get(), 0, x.size() * 2);
  cudaMemset(wt.get(), 0, wt.size() * 2);
  out.poison();
  gw.poison();
  FpropArgs f;
  f.common = {counts.get(), E, cap, N, K, nullptr};
  f.a = x.get();
  f.w = wt.get();
  f.out = out.get();
  grouped_gemm_fprop(f, nullptr);
  WgradArgs g;
  g.common = {counts.get(), E, cap, N, K, nullptr};
  g.grad_out = out.get();
  g.a = x.get();
  g.grad_w = gw.get();
  grouped_gemm_wgrad(g, nullptr);
  CUDA_OK(cudaDeviceSynchronize());
  expect_poison("fprop with no rows", raw_bytes(out.download()), 0, cap * N * 2);
  const auto w = gw.download();
  EXPECT_EQ(std::count(w.begin(), w.end(), 0.0f), static_cast<long>(E * N * K)) << "WGRAD of empty experts must be 0";
}

}  // namespace
}  // namespace dist_moe
