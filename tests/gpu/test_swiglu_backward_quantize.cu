// SwiGLU backward fused with the rows + columns quantization (quant::*_swiglu_backward_quantize)
// against the two passes it replaces, kernels::swiglu_backward then *_quantize_rows_cols (each
// tested against the CPU oracle in test_elementwise.cu / test_quantize.cu), byte for byte: every
// output buffer is poisoned alike for both, so a byte written by one and not the other fails too.
// Fresh random inputs with per-row exponent spreads; ragged and empty experts; padding and spare
// rows holding NaN (never read as values); plain and clamped SwiGLU (inputs past the limit);
// F an odd multiple of 128 and, for MXFP8, not a multiple of 128; strided and compact columns;
// h1 at a device-chosen address.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/error.h"
#include "gpu_test_util.h"
#include "kernels/swiglu.h"
#include "quant/quantize.h"
#include "reference/random.h"

namespace dist_moe {
namespace {

namespace nm = numeric;
using testing::DeviceBuffer;
using testing::first_difference;
using testing::kPoison;


// Random BF16 bits: values in [-range, range) times 2^e with e per row in [-spread, spread].
std::vector<uint16_t> random_rows(int64_t rows, int64_t cols, float range, int spread, reference::Rng& rng) {
  std::vector<uint16_t> bits(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int e = static_cast<int>(rng.below(2 * spread + 1)) - spread;
    for (int64_t c = 0; c < cols; ++c)
      bits[r * cols + c] = nm::float_to_bf16(std::ldexp(static_cast<float>(rng.uniform(-range, range)), e)).bits;
  }
  return bits;
}

enum class Columns { kStrided, kCompact };

// Format traits for the two formats: block, scale type, the launchers, and the row / column output
// layouts the layers use (FP8 blockwise: k-block-major scales; MXFP8: natural).
struct Fp8Blockwise {
  using Scale = float;
  static constexpr int kBlock = 128;
  static quant::QuantizedOut<Scale> rows(uint8_t* q, Scale* s, int64_t cap, int64_t C) { return {q, C, s, 1, cap}; }
  static quant::QuantizedOut<Scale> cols(uint8_t* q, Scale* s, int64_t cap, int64_t C) { return {q, cap, s, 1, C}; }
  static void fused(const quant::SwigluBackwardSource& src, const quant::RowGroups& g, const quant::QuantizedOut<Scale>& r,
                    const quant::QuantizedOut<Scale>& c, int lt, int lf) {
    if (lt < 0) quant::fp8_blockwise_swiglu_backward_quantize(src, g, r, c, nullptr);
    else quant::fp8_blockwise_swiglu_backward_quantize_in_regions(src, g, r, c, lt, lf, nullptr);
  }
  static void two_passes(const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::QuantizedOut<Scale>& r,
                         const quant::QuantizedOut<Scale>& c) {
    quant::fp8_blockwise_quantize_rows_cols(x, g, r, c, nullptr);
  }
};
// MXFP8's scale rule in FP8 blockwise's layouts (the MXFP8 training layer's dxy, perf_history G152).
struct Mxfp8Shared : Fp8Blockwise {
  static constexpr quant::Fp8BlockScale kRule = quant::Fp8BlockScale::kMxfp8Shared;
  static void fused(const quant::SwigluBackwardSource& src, const quant::RowGroups& g, const quant::QuantizedOut<Scale>& r,
                    const quant::QuantizedOut<Scale>& c, int lt, int lf) {
    if (lt < 0) quant::fp8_blockwise_swiglu_backward_quantize(src, g, r, c, nullptr, kRule);
    else quant::fp8_blockwise_swiglu_backward_quantize_in_regions(src, g, r, c, lt, lf, nullptr, kRule);
  }
  static void two_passes(const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::QuantizedOut<Scale>& r,
                         const quant::QuantizedOut<Scale>& c) {
    quant::fp8_blockwise_quantize_rows_cols(x, g, r, c, nullptr, kRule);
  }
};
struct Mxfp8 {
  using Scale = uint8_t;
  static constexpr int kBlock = 32;
  static quant::QuantizedOut<Scale> rows(uint8_t* q, Scale* s, int64_t, int64_t C) { return {q, C, s, C / 32, 1}; }
  static quant::QuantizedOut<Scale> cols(uint8_t* q, Scale* s, int64_t cap, int64_t) { return {q, cap, s, cap / 32, 1}; }
  static void fused(const quant::SwigluBackwardSource& src, const quant::RowGroups& g, const quant::QuantizedOut<Scale>& r,
                    const quant::QuantizedOut<Scale>& c, int lt, int lf) {
    if (lt < 0) quant::mxfp8_swiglu_backward_quantize(src, g, r, c, nullptr);
    else quant::mxfp8_swiglu_backward_quantize_in_regions(src, g, r, c, lt, lf, nullptr);
  }
  static void two_passes(const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::QuantizedOut<Scale>& r,
                         const quant::QuantizedOut<Scale>& c) {
    quant::mxfp8_quantize_rows_cols(x, g, r, c, nullptr);
  }
};

// The outputs of one run: row data and scales, column data and scales (strided) or the compact
// bundle's buffer.
template <class Fmt>
struct Outputs {
  using Scale = typename Fmt::Scale;
  static constexpr int64_t kCompactOffset = 384;  // the bundle's device offset in `bundle`
  DeviceBuffer<uint8_t> q, qt, bundle;
  DeviceBuffer<Scale> s, st;
  DeviceBuffer<int64_t> offset;
  quant::QuantizedOut<Scale> rows_out, cols_out;
  Outputs(int64_t cap, int64_t C, Columns columns)
      : q(cap * C), qt(C * cap), bundle(kCompactOffset + nm::mxfp8_compact_columns_bytes(C, cap) + 256),
        s(cap * C / Fmt::kBlock), st(cap / Fmt::kBlock * C), offset(std::vector<int64_t>{kCompactOffset}) {
    q.poison(kPoison);
    qt.poison(kPoison);
    bundle.poison(kPoison);
    s.poison(kPoison);
    st.poison(kPoison);
    rows_out = Fmt::rows(q.get(), s.get(), cap, C);
    if (columns == Columns::kStrided) {
      cols_out = Fmt::cols(qt.get(), st.get(), cap, C);
    } else {
      cols_out.q = bundle.get();
      cols_out.compact = true;
      cols_out.q_offset = offset.get();
    }
  }
};

template <class Fmt>
void check_fused(const std::vector<int32_t>& counts, int64_t F, int64_t spare, bool clamped, Columns columns,
                 uint64_t seed, int log2_rt = -1, int log2_rf = -1) {
  const int64_t C = 2 * F;
  std::vector<int32_t> offsets{0};
  for (int32_t c : counts) offsets.push_back(offsets.back() + (c + Fmt::kBlock - 1) / Fmt::kBlock * Fmt::kBlock);
  const int64_t used = offsets.back(), cap = used + spare;
  SCOPED_TRACE("F=" + std::to_string(F) + " capacity=" + std::to_string(cap) + " used=" + std::to_string(used) +
               (clamped ? " clamped" : " plain") + (columns == Columns::kCompact ? " compact" : " strided") +
               (log2_rt < 0 ? "" : " region " + std::to_string(1 << log2_rt) + "x" + std::to_string(1 << log2_rf)));
  reference::Rng rng(seed);
  // Gate and up spread around the clamp limit (7): some past it on both sides.
  std::vector<uint16_t> h1 = random_rows(cap, C, 10.0f, 1, rng), gh2 = random_rows(cap, F, 1.0f, 20, rng);
  const uint16_t nan = nm::float_to_bf16(std::nanf("")).bits;
  for (size_t e = 0; e < counts.size(); ++e)  // padding rows: garbage
    for (int64_t r = offsets[e] + counts[e]; r < offsets[e + 1]; ++r) {
      for (int64_t c = 0; c < C; ++c) h1[r * C + c] = nan;
      for (int64_t c = 0; c < F; ++c) gh2[r * F + c] = nan;
    }
  for (int64_t r = used; r < cap; ++r)  // spare capacity: garbage
    for (int64_t c = 0; c < F; ++c) gh2[r * F + c] = nan;
  // h1 behind a device offset, as the layer's saved h1.
  constexpr int64_t kH1Offset = 4096;
  std::vector<uint16_t> h1_buffer(kH1Offset / 2, nan);
  h1_buffer.insert(h1_buffer.end(), h1.begin(), h1.end());
  DeviceBuffer<uint16_t> dh1(h1_buffer), dgh2(gh2), ddxy(cap * C);
  DeviceBuffer<int64_t> dh1_offset(std::vector<int64_t>{kH1Offset});
  DeviceBuffer<int32_t> dcounts(counts), doffsets(offsets);
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(counts.size())};
  activation::SwigluParams p;
  p.clamped = clamped;
  const common::DeviceAddress h1_at{dh1.get(), dh1_offset.get()};

  Outputs<Fmt> want(cap, C, columns), got(cap, C, columns);
  ddxy.poison(kPoison);
  kernels::swiglu_backward(h1_at, dgh2.get(), ddxy.get(), F,
                           kernels::ExpertRowsView{dcounts.get(), doffsets.get(), static_cast<int32_t>(counts.size()), cap},
                           p, nullptr);
  Fmt::two_passes(quant::Bf16Matrix{ddxy.get(), cap, C, C}, groups, want.rows_out, want.cols_out);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  Fmt::fused(quant::SwigluBackwardSource{h1_at, dgh2.get(), cap, F, p}, groups, got.rows_out, got.cols_out, log2_rt,
             log2_rf);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());

  EXPECT_EQ(first_difference(got.q.download(), want.q.download()), -1) << "row data";
  EXPECT_EQ(first_difference(got.s.download(), want.s.download()), -1) << "row scales";
  if (columns == Columns::kStrided) {
    EXPECT_EQ(first_difference(got.qt.download(), want.qt.download()), -1) << "column data";
    EXPECT_EQ(first_difference(got.st.download(), want.st.download()), -1) << "column scales";
  } else {
    EXPECT_EQ(first_difference(got.bundle.download(), want.bundle.download()), -1) << "compact column bundle";
  }
  // Not vacuous: the reference wrote real rows' codes.
  const auto q = want.q.download();
  int64_t nonzero = 0, real = 0;
  for (int64_t i = 0; i < used * C; ++i) nonzero += q[i] != 0 && q[i] != kPoison;
  for (int32_t c : counts) real += c;
  EXPECT_GT(nonzero, real * C / 4) << "the reference's real rows are mostly zero or unwritten";
}

TEST(SwigluBackwardQuantize, Fp8BlockwiseEqualsTheTwoPassesBitForBit) {
  DMOE_REQUIRE_SM90();
  check_fused<Fp8Blockwise>({37, 0, 200, 1, 100}, 384, 128, false, Columns::kStrided, 71);
  check_fused<Fp8Blockwise>({300, 5, 0, 129}, 128, 0, true, Columns::kStrided, 72);
  check_fused<Fp8Blockwise>({1}, 1536, 256, true, Columns::kStrided, 73);
  check_fused<Fp8Blockwise>({37, 0, 200, 1, 100}, 384, 128, true, Columns::kCompact, 74);
  std::vector<int32_t> many(40);  // more regions than SMs along tokens
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 37 % 300);
  check_fused<Fp8Blockwise>(many, 768, 0, false, Columns::kStrided, 75);
}

TEST(SwigluBackwardQuantize, Mxfp8SharedEqualsTheTwoPassesBitForBit) {
  DMOE_REQUIRE_SM90();
  check_fused<Mxfp8Shared>({37, 0, 200, 1, 100}, 384, 128, false, Columns::kStrided, 171);
  check_fused<Mxfp8Shared>({300, 5, 0, 129}, 768, 0, true, Columns::kStrided, 172);
  check_fused<Mxfp8Shared>({37, 0, 200, 1, 100}, 384, 128, true, Columns::kCompact, 173);
  check_fused<Mxfp8Shared>({300, 5, 0, 129, 77}, 640, 128, false, Columns::kStrided, 174, 1, 1);
}

TEST(SwigluBackwardQuantize, Mxfp8EqualsTheTwoPassesBitForBit) {
  DMOE_REQUIRE_SM90();
  check_fused<Mxfp8>({37, 0, 64, 1, 100}, 384, 96, false, Columns::kCompact, 81);
  check_fused<Mxfp8>({300, 5, 0, 129}, 96, 32, true, Columns::kCompact, 82);
  check_fused<Mxfp8>({37, 0, 64, 1, 100}, 224, 0, true, Columns::kStrided, 83);
  std::vector<int32_t> many(1024);  // the largest group table
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 7 % 41);
  check_fused<Mxfp8>(many, 128, 32, false, Columns::kCompact, 84);
}

// Every region shape (rt x rf tiles, at most 8), regions cut by the last expert and by F.
TEST(SwigluBackwardQuantize, EveryRegionShapeEqualsTheTwoPasses) {
  DMOE_REQUIRE_SM90();
  for (int lt = 0; lt <= 3; ++lt)
    for (int lf = 0; lt + lf <= 3; ++lf) {
      check_fused<Fp8Blockwise>({300, 5, 0, 129, 77}, 640, 128, lt % 2 == 1, Columns::kStrided, 90 + 4 * lt + lf, lt, lf);
      check_fused<Mxfp8>({300, 5, 0, 129, 77}, 352, 64, lf % 2 == 1, Columns::kCompact, 110 + 4 * lt + lf, lt, lf);
      if (::testing::Test::HasFailure()) return;
    }
}

// Host checks, before any device work (no GPU needed).
TEST(SwigluBackwardQuantize, BadShapesAreArgumentErrors) {
  auto* p = reinterpret_cast<uint8_t*>(uintptr_t{0x1000});  // never dereferenced
  const quant::RowGroups groups{reinterpret_cast<const int32_t*>(p), reinterpret_cast<const int32_t*>(p), 1};
  const quant::Fp8BlockwiseOut rows{p, 512, reinterpret_cast<float*>(p), 1, 256};
  auto expect_invalid = [](auto f, const std::string& fragment) { testing::expect_invalid_argument(f, fragment); };
  expect_invalid([&] { quant::fp8_blockwise_swiglu_backward_quantize({p, p, 256, 192, {}}, groups, rows, {}, nullptr); },
                 "fp8_blockwise_swiglu_backward_quantize: intermediate_dim=192 must be a positive multiple of 128");
  expect_invalid([&] { quant::fp8_blockwise_swiglu_backward_quantize({p, p, 200, 256, {}}, groups, rows, rows, nullptr); },
                 "the row capacity 200 must be a multiple of 128");
  expect_invalid([&] { quant::mxfp8_swiglu_backward_quantize({p, nullptr, 256, 256, {}}, groups, {}, {}, nullptr); },
                 "mxfp8_swiglu_backward_quantize: h1 and grad_h2 are required");
}

}  // namespace
}  // namespace dist_moe
