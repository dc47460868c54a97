// GPU tests of the grouped GEMMs' device-side operand offsets (grouped_gemm.h: a_offset, out_offset,
// h1_offset, h2_offset, gathered_offset, grad_out_offset, grad_a_offset; WGRAD's a_offset).
//
// Every row-buffer operand lives inside one big "activation" allocation at a byte offset that is a
// multiple of 128 but not of any row pitch, read by the kernel from a device int64; the API gets
// the allocation's base pointer. The whole allocation is poisoned (0xFF) first, so each case checks
//   * every output element due is within tolerance of a host reference (double products, one
//     rounding to FP32, then BF16 where the GPU stores BF16) -- NaN means never written;
//   * every other byte of the allocation (inputs, rows past sum(counts), gaps) is unchanged.
// Each op runs with every compiled configuration (legacy, TMA-store, ping-pong, swap-AB; one test
// per configuration, named by it), so every tensor-map patching path is covered. A CUDA graph
// holding all four ops is then captured once and replayed with different offset values (and the
// data moved accordingly).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dist_moe/grouped_gemm.h"
#include "gpu/grouped_gemm_test_util.h"
#include "reference/stages.h"

namespace dist_moe {
namespace {

// The shared helpers (grouped_gemm_test_util.h) and testing::DeviceBuffer.
using namespace testing;

// Ragged counts with an empty expert, a single row, a partial 64-row block and a full 128-row tile.
const std::vector<int32_t> kCounts = {130, 0, 1, 200, 64, 77};
constexpr int64_t kSlack = 21;  // rows past sum(counts) in every row buffer

// ---- the activation arena -------------------------------------------------------------------------
// One poisoned allocation; regions are carved at offsets that are multiples of 128 and never of a
// row pitch (an odd multiple of 128 plus a gap), so a kernel that ignored an offset, or applied it
// in rows instead of bytes, reads or writes the wrong place.
struct Region {
  int64_t offset = 0;
  size_t bytes = 0;
};

class Arena {
 public:
  explicit Arena(size_t bytes) : mem_(bytes), image_(bytes, 0xFF) { mem_.poison(); }

  // A region of `bytes`, starting 128 * (2 j + 1) bytes past the previous region's end.
  Region carve(size_t bytes) {
    cursor_ += 128 * (2 * (regions_ % 5) + 1);
    Region r{static_cast<int64_t>(cursor_), bytes};
    cursor_ = (cursor_ + bytes + 127) / 128 * 128;
    ++regions_;
    if (cursor_ > image_.size()) throw std::runtime_error("arena too small");
    return r;
  }

  // Input data: copied to the device and remembered as what these bytes must still hold.
  template <class T>
  void put(const Region& r, const std::vector<T>& v) {
    std::memcpy(image_.data() + r.offset, v.data(), v.size() * sizeof(T));
    DMOE_CUDA_CHECK(cudaMemcpy(base() + r.offset, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  }

  // Bytes [offset, offset + bytes) are an output the kernel writes: exempt from the unchanged check.
  void expect_written(int64_t offset, size_t bytes) { written_.push_back({offset, bytes}); }

  // Restores the poison everywhere except the inputs (between configurations of one case).
  void reset_outputs() {
    DMOE_CUDA_CHECK(cudaMemcpy(base(), image_.data(), image_.size(), cudaMemcpyHostToDevice));
  }

  std::vector<uint8_t> download() const {
    std::vector<uint8_t> v(image_.size());
    DMOE_CUDA_CHECK(cudaMemcpy(v.data(), base(), v.size(), cudaMemcpyDeviceToHost));
    return v;
  }

  // Every byte outside the declared outputs still holds its input or poison value.
  void expect_untouched(const std::string& what, const std::vector<uint8_t>& got) const {
    std::vector<uint8_t> exempt(image_.size(), 0);
    for (const Region& w : written_) std::fill(exempt.begin() + w.offset, exempt.begin() + w.offset + w.bytes, 1);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
      if (!exempt[i] && got[i] != image_[i]) {
        if (bad++ == 0) first = i;
      }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " bytes outside the outputs changed (first at byte " << first << ")";
  }

  uint8_t* base() const { return mem_.get(); }
  void clear_written() { written_.clear(); }

 private:
  DeviceBuffer<uint8_t> mem_;
  std::vector<uint8_t> image_;
  std::vector<Region> written_;
  size_t cursor_ = 0;
  int regions_ = 0;
};

// Device int64 offsets the kernels read.
class Offsets {
 public:
  explicit Offsets(size_t n) : mem_(n) {}
  void set(const std::vector<int64_t>& v) { mem_.upload(v); }
  const int64_t* at(size_t i) const { return mem_.get() + i; }

 private:
  DeviceBuffer<int64_t> mem_;
};

// The gather producer's arguments: rows through the table `rows`, the gathered copy in the arena.
GatherArgs arena_gather(const DeviceBuffer<const void*>& rows, const Arena& arena, const int64_t* gathered_offset,
                        const DeviceBuffer<int32_t>& workspace) {
  GatherArgs g;
  g.row_ptrs = rows.get();
  g.gathered = arena.base();
  g.gathered_offset = gathered_offset;
  g.workspace = workspace.get();
  return g;
}

GroupedGemmCommon common_of(const int32_t* counts, int64_t cap, int64_t n, int64_t k, const GroupedGemmConfig* cfg) {
  GroupedGemmCommon c;
  c.counts = counts;
  c.e_local = static_cast<int64_t>(kCounts.size());
  c.m_capacity = cap;
  c.n = n;
  c.k = k;
  c.config = cfg;
  return c;
}

// Each op's suite runs once per compiled configuration (the parameter; the test name is
// gemm_param_name(): op, operand formats, output type, configuration).
class GroupedGemmOffsetsFprop : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmOffsetsW13 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmOffsetsW13Gather : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmOffsetsDgradBf16 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmOffsetsDgradFp32 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmOffsetsDgradGather : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmOffsetsWgradFp32 : public ::testing::TestWithParam<GemmParam> {};
class GroupedGemmOffsetsWgradBf16 : public ::testing::TestWithParam<GemmParam> {};

INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsFprop,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kFprop, DType::kBFloat16, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsW13,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsW13Gather,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, true)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsDgradBf16,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kDgrad, DType::kBFloat16, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsDgradFp32,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kDgrad, DType::kFloat32, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsDgradGather,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kDgrad, DType::kBFloat16, true)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsWgradFp32,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kWgrad, DType::kFloat32, false)),
                         GemmParamName());
INSTANTIATE_TEST_SUITE_P(, GroupedGemmOffsetsWgradBf16,
                         ::testing::ValuesIn(gemm_params(GroupedGemmOp::kWgrad, DType::kBFloat16, false)),
                         GemmParamName());

// ---- FPROP: a and out inside the arena --------------------------------------------------------------
TEST_P(GroupedGemmOffsetsFprop, AOutMoved) {
  DMOE_REQUIRE_SM90();
  const GroupedGemmConfig& cfg = GetParam().config;
  std::mt19937 rng(101);
  const int64_t N = 384, K = 256, M = total_rows(kCounts), cap = M + kSlack;
  const HostBf16 a = random_bf16(static_cast<size_t>(cap * K), 1.0f, rng);
  const HostBf16 w = random_bf16(static_cast<size_t>(kCounts.size() * N * K), 1.0f / 16, rng);
  const std::vector<float> ref = rounded_bf16(ref_fprop(a.vals, w.vals, kCounts, N, K));

  Arena arena(size_t(8) << 20);
  const Region ra = arena.carve(a.bits.size() * 2), rout = arena.carve(static_cast<size_t>(cap * N) * 2);
  arena.put(ra, a.bits);
  arena.expect_written(rout.offset, static_cast<size_t>(M * N) * 2);
  Offsets off(2);
  off.set({ra.offset, rout.offset});
  DeviceBuffer<int32_t> d_counts(kCounts);
  DeviceBuffer<uint16_t> d_w(w.bits);

  {
    arena.reset_outputs();
    FpropArgs args;
    args.common = common_of(d_counts.get(), cap, N, K, &cfg);
    args.a = arena.base();
    args.a_offset = off.at(0);
    args.w = d_w.get();
    args.out = arena.base();
    args.out_offset = off.at(1);
    grouped_gemm_fprop(args, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = arena.download();
    const std::string what = "fprop offsets " + cfg.name();
    expect_close(what, [&](int64_t i) { return bf16_at(got, rout.offset, i); }, ref);
    arena.expect_untouched(what, got);
  }
}

// ---- W13 FPROP + SwiGLU: a, h1, h2 inside the arena (and h1 dropped) -------------------------------
void run_w13_offsets(bool gather, const GroupedGemmConfig& cfg) {
  std::mt19937 rng(gather ? 203 : 202);
  const int64_t F = 256, N = 2 * F, D = 256, M = total_rows(kCounts), cap = M + kSlack;
  HostBf16 a = random_bf16(static_cast<size_t>(cap * D), 1.0f, rng);
  const HostBf16 w = random_bf16(static_cast<size_t>(kCounts.size() * N * D), 1.0f / 16, rng);
  // Gather: row m comes from source row perm[m] of a separate allocation (nullptr for every 9th).
  const HostBf16 src = random_bf16(static_cast<size_t>(cap * D), 1.0f, rng);
  const std::vector<int64_t> perm = shuffled_rows(cap, rng);
  if (gather) {
    for (int64_t m = 0; m < M; ++m)
      for (int64_t d = 0; d < D; ++d) {
        const bool zero = m % 9 == 4;
        a.bits[m * D + d] = zero ? 0 : src.bits[perm[m] * D + d];
        a.vals[m * D + d] = zero ? 0.0f : src.vals[perm[m] * D + d];
      }
  }
  const std::vector<float> ref_h1 = rounded_bf16(ref_fprop(a.vals, w.vals, kCounts, N, D));
  const std::vector<float> ref_h2 = ref_swiglu_h2(ref_h1, F, reference::SwigluParams{});

  Arena arena(size_t(8) << 20);
  const Region ra = arena.carve(a.bits.size() * 2);
  const Region rh1 = arena.carve(static_cast<size_t>(cap * N) * 2);
  const Region rh2 = arena.carve(static_cast<size_t>(cap * F) * 2);
  if (!gather) arena.put(ra, a.bits);
  Offsets off(3);
  off.set({ra.offset, rh1.offset, rh2.offset});
  DeviceBuffer<int32_t> d_counts(kCounts);
  DeviceBuffer<uint16_t> d_w(w.bits), d_src(src.bits);
  DeviceBuffer<int32_t> d_ws = gather_workspace(cap, static_cast<int64_t>(kCounts.size()));
  std::vector<const void*> rows(static_cast<size_t>(cap), nullptr);
  for (int64_t m = 0; m < M; ++m)
    if (m % 9 != 4) rows[m] = d_src.get() + perm[m] * D;
  DeviceBuffer<const void*> d_rows(rows);

  for (bool keep_h1 : {true, false}) {
    {
      arena.reset_outputs();
      arena.clear_written();
      if (keep_h1) arena.expect_written(rh1.offset, static_cast<size_t>(M * N) * 2);
      arena.expect_written(rh2.offset, static_cast<size_t>(M * F) * 2);
      if (gather) arena.expect_written(ra.offset, static_cast<size_t>(M * D) * 2);
      W13FpropArgs args;
      args.common = common_of(d_counts.get(), cap, N, D, &cfg);
      args.w13 = d_w.get();
      args.h1 = keep_h1 ? arena.base() : nullptr;
      args.h1_offset = off.at(1);  // ignored when h1 is dropped
      args.h2 = arena.base();
      args.h2_offset = off.at(2);
      if (gather) {
        args.gather = arena_gather(d_rows, arena, off.at(0), d_ws);
      } else {
        args.a = arena.base();
        args.a_offset = off.at(0);
      }
      grouped_gemm_w13_fprop(args, nullptr);
      CUDA_OK(cudaDeviceSynchronize());
      const auto got = arena.download();
      const std::string what = std::string("w13 offsets ") + (gather ? "gather " : "") + (keep_h1 ? "" : "noh1 ") +
                               cfg.name();
      expect_close(what + " h2", [&](int64_t i) { return bf16_at(got, rh2.offset, i); }, ref_h2);
      if (keep_h1) expect_close(what + " h1", [&](int64_t i) { return bf16_at(got, rh1.offset, i); }, ref_h1);
      if (gather) {  // the gathered copy, bitwise
        int64_t diff = 0;
        for (int64_t i = 0; i < M * D; ++i) {
          uint16_t b;
          std::memcpy(&b, got.data() + ra.offset + 2 * i, 2);
          diff += b != a.bits[i];
        }
        EXPECT_EQ(diff, 0) << what << ": gathered rows differ from their sources";
      }
      arena.expect_untouched(what, got);
    }
  }
}

TEST_P(GroupedGemmOffsetsW13, AH1H2Moved) {
  DMOE_REQUIRE_SM90();
  run_w13_offsets(false, GetParam().config);
}

TEST_P(GroupedGemmOffsetsW13Gather, GatheredH1H2Moved) {
  DMOE_REQUIRE_SM90();
  run_w13_offsets(true, GetParam().config);
}

// ---- DGRAD: grad_out and grad_a inside the arena (BF16, FP32, FP32 accumulate; gather) ------------
void run_dgrad_offsets(DType out, bool accumulate, bool gather, const GroupedGemmConfig& cfg) {
  std::mt19937 rng(300 + (out == DType::kFloat32 ? 1 : 0) + (accumulate ? 2 : 0) + (gather ? 4 : 0));
  const bool fp32 = out == DType::kFloat32;
  const size_t es = fp32 ? 4 : 2;
  const int64_t N = 256, K = 384, M = total_rows(kCounts), cap = M + kSlack;
  HostBf16 g = random_bf16(static_cast<size_t>(cap * N), 1.0f, rng);
  const HostBf16 w = random_bf16(static_cast<size_t>(kCounts.size() * N * K), 1.0f / 16, rng);
  const HostBf16 src = random_bf16(static_cast<size_t>(cap * N), 1.0f, rng);
  const std::vector<int64_t> perm = shuffled_rows(cap, rng);
  if (gather)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < N; ++j) {
        g.bits[m * N + j] = src.bits[perm[m] * N + j];
        g.vals[m * N + j] = src.vals[perm[m] * N + j];
      }
  std::vector<float> ref = ref_dgrad(g.vals, w.vals, kCounts, N, K);
  const HostBf16 prev = random_bf16(static_cast<size_t>(cap * K), 1.0f, rng);  // accumulation source
  apply_output_store(ref, prev.vals, accumulate, fp32);

  Arena arena(size_t(8) << 20);
  const Region rg = arena.carve(g.bits.size() * 2), rout = arena.carve(static_cast<size_t>(cap * K) * es);
  if (!gather) arena.put(rg, g.bits);
  if (accumulate) {  // the previous grad_a is an input of the call
    if (fp32) arena.put(rout, prev.vals); else arena.put(rout, prev.bits);
  }
  arena.expect_written(rout.offset, static_cast<size_t>(M * K) * es);
  if (gather) arena.expect_written(rg.offset, static_cast<size_t>(M * N) * 2);
  Offsets off(2);
  off.set({rg.offset, rout.offset});
  DeviceBuffer<int32_t> d_counts(kCounts);
  DeviceBuffer<uint16_t> d_w(w.bits), d_src(src.bits);
  DeviceBuffer<int32_t> d_ws = gather_workspace(cap, static_cast<int64_t>(kCounts.size()));
  std::vector<const void*> rows(static_cast<size_t>(cap), nullptr);
  for (int64_t m = 0; m < M; ++m) rows[m] = d_src.get() + perm[m] * N;
  DeviceBuffer<const void*> d_rows(rows);

  {
    arena.reset_outputs();
    DgradArgs args;
    args.common = common_of(d_counts.get(), cap, N, K, &cfg);
    args.w = d_w.get();
    args.grad_a = arena.base();
    args.grad_a_offset = off.at(1);
    args.out_dtype = out;
    args.accumulate = accumulate;
    if (gather) {
      args.gather = arena_gather(d_rows, arena, off.at(0), d_ws);
    } else {
      args.grad_out = arena.base();
      args.grad_out_offset = off.at(0);
    }
    grouped_gemm_dgrad(args, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = arena.download();
    const std::string what = std::string("dgrad offsets ") + (fp32 ? "fp32 " : "bf16 ") + (accumulate ? "acc " : "") +
                             (gather ? "gather " : "") + cfg.name();
    expect_close(what, [&](int64_t i) { return out_at(got, rout.offset, i, fp32); }, ref);
    arena.expect_untouched(what, got);
  }
}

TEST_P(GroupedGemmOffsetsDgradBf16, GradOutGradAMoved) {
  DMOE_REQUIRE_SM90();
  run_dgrad_offsets(DType::kBFloat16, false, false, GetParam().config);
  run_dgrad_offsets(DType::kBFloat16, true, false, GetParam().config);
}

TEST_P(GroupedGemmOffsetsDgradFp32, GradOutGradAMoved) {
  DMOE_REQUIRE_SM90();
  run_dgrad_offsets(DType::kFloat32, false, false, GetParam().config);
  run_dgrad_offsets(DType::kFloat32, true, false, GetParam().config);
}

TEST_P(GroupedGemmOffsetsDgradGather, GatheredGradAMoved) {
  DMOE_REQUIRE_SM90();
  run_dgrad_offsets(DType::kBFloat16, false, true, GetParam().config);
}

// ---- WGRAD: grad_out and x inside the arena; grad_w is a weight-shaped output elsewhere ------------
void run_wgrad_offsets(DType out, bool accumulate, const GroupedGemmConfig& cfg) {
  std::mt19937 rng(400 + (out == DType::kFloat32 ? 1 : 0) + (accumulate ? 2 : 0));
  const bool fp32 = out == DType::kFloat32;
  const int64_t N = 256, K = 384, E = static_cast<int64_t>(kCounts.size()), M = total_rows(kCounts),
                cap = M + kSlack;
  const HostBf16 g = random_bf16(static_cast<size_t>(cap * N), 1.0f, rng);
  const HostBf16 x = random_bf16(static_cast<size_t>(cap * K), 1.0f, rng);
  std::vector<float> ref = ref_wgrad(g.vals, x.vals, kCounts, N, K);
  const HostBf16 prev = random_bf16(ref.size(), 4.0f, rng);
  apply_output_store(ref, prev.vals, accumulate, fp32);
  const std::vector<uint16_t> gb = nan_past_rows(g.bits, M, N), xb = nan_past_rows(x.bits, M, K);

  Arena arena(size_t(8) << 20);
  const Region rg = arena.carve(gb.size() * 2), rx = arena.carve(xb.size() * 2);
  arena.put(rg, gb);
  arena.put(rx, xb);
  Offsets off(2);
  off.set({rg.offset, rx.offset});
  DeviceBuffer<int32_t> d_counts(kCounts);
  DeviceBuffer<uint8_t> d_out(ref.size() * (fp32 ? 4 : 2));
  const Tolerance tol = wgrad_tolerance(fp32);
  {
    arena.reset_outputs();
    if (accumulate) {
      if (fp32) DMOE_CUDA_CHECK(cudaMemcpy(d_out.get(), prev.vals.data(), d_out.size(), cudaMemcpyHostToDevice));
      else DMOE_CUDA_CHECK(cudaMemcpy(d_out.get(), prev.bits.data(), d_out.size(), cudaMemcpyHostToDevice));
    } else {
      d_out.poison();
    }
    WgradArgs args;
    args.common = common_of(d_counts.get(), cap, N, K, &cfg);
    args.grad_out = arena.base();
    args.grad_out_offset = off.at(0);
    args.a = arena.base();
    args.a_offset = off.at(1);
    args.grad_w = d_out.get();
    args.out_dtype = out;
    args.accumulate = accumulate;
    grouped_gemm_wgrad(args, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    const auto got = d_out.download();
    const std::string what = std::string("wgrad offsets ") + (fp32 ? "fp32 " : "bf16 ") + (accumulate ? "acc " : "") +
                             cfg.name();
    expect_close(what, [&](int64_t i) { return out_at(got, 0, i, fp32); }, ref, tol);
    arena.expect_untouched(what, arena.download());
  }
}

TEST_P(GroupedGemmOffsetsWgradFp32, GradOutXMoved) {
  DMOE_REQUIRE_SM90();
  run_wgrad_offsets(DType::kFloat32, false, GetParam().config);
  run_wgrad_offsets(DType::kFloat32, true, GetParam().config);
}

TEST_P(GroupedGemmOffsetsWgradBf16, GradOutXMoved) {
  DMOE_REQUIRE_SM90();
  run_wgrad_offsets(DType::kBFloat16, false, GetParam().config);
}

// ---- CUDA graph: captured once, replayed with different offsets -------------------------------------
// The forward and backward GEMMs of one layer (heuristic configurations, count validation on) with
// every row buffer in the arena: W13 (x -> h1, h2), W2 (h2 -> h3), W2 DGRAD (h3 as grad_out ->
// grad_h2), W13 WGRAD (h1 as grad_out, x -> grad_w13). Replay 1 uses one set of offsets, replay 2
// moves every buffer (inputs uploaded at the new places, the old places re-poisoned): the second
// replay must read and write only the new places.
TEST(GroupedGemmOffsets, GraphReplayWithNewOffsets) {
  DMOE_REQUIRE_SM90();
  std::mt19937 rng(500);
  const int64_t D = 256, F = 256, M = total_rows(kCounts), cap = M + kSlack, E = static_cast<int64_t>(kCounts.size());
  const HostBf16 x = random_bf16(static_cast<size_t>(cap * D), 1.0f, rng);
  const HostBf16 w13 = random_bf16(static_cast<size_t>(E * 2 * F * D), 1.0f / 16, rng);
  const HostBf16 w2 = random_bf16(static_cast<size_t>(E * D * F), 1.0f / 16, rng);
  // References: h1, h2 from x; h3 from the reference h2; grad_h2 from the reference h3; WGRAD of
  // (h1, x). Each stage's reference uses the previous stage's reference BF16 values, which the GPU
  // reproduces up to one BF16 rounding step (covered by the tolerance).
  const std::vector<float> h1 = rounded_bf16(ref_fprop(x.vals, w13.vals, kCounts, 2 * F, D));
  const std::vector<float> h2 = ref_swiglu_h2(h1, F, reference::SwigluParams{});
  std::vector<float> h2_cap(static_cast<size_t>(cap * F), 0.0f), h1_cap(static_cast<size_t>(cap * 2 * F), 0.0f);
  std::copy(h2.begin(), h2.end(), h2_cap.begin());
  std::copy(h1.begin(), h1.end(), h1_cap.begin());
  const std::vector<float> h3 = rounded_bf16(ref_fprop(h2_cap, w2.vals, kCounts, D, F));
  std::vector<float> h3_cap(static_cast<size_t>(cap * D), 0.0f);
  std::copy(h3.begin(), h3.end(), h3_cap.begin());
  const std::vector<float> gh2 = rounded_bf16(ref_dgrad(h3_cap, w2.vals, kCounts, D, F));
  const std::vector<float> gw13 = ref_wgrad(h1_cap, x.vals, kCounts, 2 * F, D);  // FP32 output
  // The GEMMs chain: tolerances account for the BF16 intermediates the GPU computed itself.
  const Tolerance chained{4e-2, 4e-2, 1e-2};

  Arena arena(size_t(16) << 20);
  // Two placements of the five row buffers (x, h1, h2, h3, grad_h2).
  const size_t bytes[5] = {static_cast<size_t>(cap * D) * 2, static_cast<size_t>(cap * 2 * F) * 2,
                           static_cast<size_t>(cap * F) * 2, static_cast<size_t>(cap * D) * 2,
                           static_cast<size_t>(cap * F) * 2};
  Region place[2][5];
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 5; ++i) place[p][i] = arena.carve(bytes[i]);
  Offsets off(5);
  DeviceBuffer<int32_t> d_counts(kCounts);
  DeviceBuffer<uint16_t> d_w13(w13.bits), d_w2(w2.bits);
  DeviceBuffer<float> d_gw13(static_cast<size_t>(E * 2 * F * D));
  auto common = [&](int64_t n, int64_t k) {
    GroupedGemmCommon c = common_of(d_counts.get(), cap, n, k, nullptr);
    c.validate_counts = true;
    return c;
  };

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  {
    W13FpropArgs a13;
    a13.common = common(2 * F, D);
    a13.a = arena.base();
    a13.a_offset = off.at(0);
    a13.w13 = d_w13.get();
    a13.h1 = arena.base();
    a13.h1_offset = off.at(1);
    a13.h2 = arena.base();
    a13.h2_offset = off.at(2);
    grouped_gemm_w13_fprop(a13, stream);
    FpropArgs a2;
    a2.common = common(D, F);
    a2.a = arena.base();
    a2.a_offset = off.at(2);
    a2.w = d_w2.get();
    a2.out = arena.base();
    a2.out_offset = off.at(3);
    grouped_gemm_fprop(a2, stream);
    DgradArgs d2;
    d2.common = common(D, F);
    d2.grad_out = arena.base();
    d2.grad_out_offset = off.at(3);
    d2.w = d_w2.get();
    d2.grad_a = arena.base();
    d2.grad_a_offset = off.at(4);
    grouped_gemm_dgrad(d2, stream);
    WgradArgs g13;
    g13.common = common(2 * F, D);
    g13.grad_out = arena.base();
    g13.grad_out_offset = off.at(1);
    g13.a = arena.base();
    g13.a_offset = off.at(0);
    g13.grad_w = d_gw13.get();
    g13.out_dtype = DType::kFloat32;
    grouped_gemm_wgrad(g13, stream);
  }
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  for (int p = 0; p < 2; ++p) {
    // x at this placement (the arena image keeps placement 0's x in replay 1: stale input that
    // must stay untouched); every other byte poison, then the graph writes this placement's
    // h1, h2, h3 and grad_h2 rows [0, M) and nothing else.
    arena.clear_written();
    arena.put(place[p][0], x.bits);
    arena.reset_outputs();
    for (int i = 1; i < 5; ++i) arena.expect_written(place[p][i].offset, bytes[i] / cap * M);
    off.set({place[p][0].offset, place[p][1].offset, place[p][2].offset, place[p][3].offset, place[p][4].offset});
    d_gw13.poison();
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    const auto got = arena.download();
    const std::string what = "graph replay " + std::to_string(p);
    const Region* r = place[p];
    expect_close(what + " h1", [&](int64_t i) { return bf16_at(got, r[1].offset, i); }, h1);
    expect_close(what + " h2", [&](int64_t i) { return bf16_at(got, r[2].offset, i); }, h2);
    expect_close(what + " h3", [&](int64_t i) { return bf16_at(got, r[3].offset, i); }, h3, chained);
    expect_close(what + " grad_h2", [&](int64_t i) { return bf16_at(got, r[4].offset, i); }, gh2, chained);
    const auto gw = d_gw13.download();
    expect_close(what + " grad_w13 (fp32)", [&](int64_t i) { return gw[i]; }, gw13, chained);
    arena.expect_untouched(what, got);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace dist_moe
