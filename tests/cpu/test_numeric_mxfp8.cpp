// MXFP8 E4M3 block quantization (rows 1x32, cols 32x1, tiles 32x32) against a reference written
// here from the rules (enumerated E4M3 grid, RCEIL in double), plus crafted blocks, error bounds
// and the transpose / tile relations the GEMM operands rely on; then the blocks at shared scales per
// 128 (re-rounded, and quantized once against naive_helpers.h's loop).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "naive_helpers.h"
#include "test_helpers.h"

namespace nm = dist_moe::numeric;

namespace {

using test_helpers::cdiv;
using test_helpers::e4m3_definition;
using test_helpers::e4m3_expected;
using test_helpers::kInf;
using test_helpers::kNaN;
using test_helpers::rceil_expected;

struct RefBlock {
  int scale;
  std::vector<uint8_t> q;
};

// Block amax; NaN when any element is not finite, which RCEIL maps to the NaN byte 0xff.
float block_amax(const std::vector<float>& block) {
  float amax = 0;
  for (float v : block) {
    if (!std::isfinite(v)) return kNaN;
    amax = std::max(amax, std::fabs(v));
  }
  return amax;
}

RefBlock ref_quantize(const std::vector<float>& block) {
  RefBlock r;
  r.scale = rceil_expected(block_amax(block));
  for (float v : block)
    r.q.push_back(r.scale == 0xff ? 0x7f : e4m3_expected(std::ldexp(static_cast<double>(v), 127 - r.scale)));
  return r;
}

double ref_dequant(uint8_t q, int scale) {
  if (scale == 0xff) return std::numeric_limits<double>::quiet_NaN();
  return e4m3_definition(q) * std::ldexp(1.0, scale - 127);
}

// Random matrix: per 8x8 patch a random binade, normal values, some zeros and tiny values.
std::vector<float> random_matrix(int64_t rows, int64_t cols, uint32_t seed, int min_exp = -30, int max_exp = 30) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> ed(min_exp, max_exp);
  std::uniform_int_distribution<int> pick(0, 99);
  std::vector<int> patch_exp((rows / 8 + 1) * (cols / 8 + 1));
  for (auto& e : patch_exp) e = ed(rng);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const int e = patch_exp[(r / 8) * (cols / 8 + 1) + c / 8];
      const int p = pick(rng);
      float v = std::ldexp(nd(rng), e);
      if (p < 3) v = 0.0f;
      else if (p < 6) v = std::ldexp(nd(rng), e - 12);  // lands in E4M3 subnormals or zero
      x[r * cols + c] = v;
    }
  return x;
}

template <class T>
std::vector<T> transpose(const std::vector<T>& x, int64_t rows, int64_t cols) {
  std::vector<T> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

// x_RC quantized in 1x32 row blocks (q, s) and dequantized back (y).
struct RowsOut {
  std::vector<uint8_t> q, s;
  std::vector<float> y;
};
RowsOut run_rows(const std::vector<float>& x, int64_t rows, int64_t cols) {
  RowsOut o{std::vector<uint8_t>(rows * cols), std::vector<uint8_t>(rows * cdiv(cols, 32)),
            std::vector<float>(rows * cols)};
  nm::mxfp8_quantize_rows(x.data(), rows, cols, o.q.data(), o.s.data());
  nm::mxfp8_dequantize_rows(o.q.data(), o.s.data(), rows, cols, o.y.data());
  return o;
}

// Checks every row block of x_RC against the reference, and its dequantization.
void check_rows_against_reference(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const int64_t nb = cdiv(cols, 32);
  const auto [q, s, y] = run_rows(x, rows, cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t c0 = b * 32, c1 = std::min(cols, c0 + 32);
      const std::vector<float> blk(x.begin() + r * cols + c0, x.begin() + r * cols + c1);
      const RefBlock ref = ref_quantize(blk);
      ASSERT_EQ(s[r * nb + b], ref.scale) << "row " << r << " block " << b;
      for (int64_t c = c0; c < c1; ++c) {
        ASSERT_EQ(q[r * cols + c], ref.q[c - c0]) << "row " << r << " col " << c << " x " << x[r * cols + c];
        const double want = ref_dequant(ref.q[c - c0], ref.scale);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(y[r * cols + c]));
        } else {
          ASSERT_EQ(static_cast<double>(y[r * cols + c]), want);  // exact
        }
      }
    }
}

}  // namespace

TEST(NumericMXFP8, CraftedAllZeroBlock) {
  std::vector<float> x(64, 0.0f);
  x[40] = -0.0f;
  std::vector<uint8_t> q(64, 0xaa), s(2, 0xaa);
  std::vector<float> y(64, 1.0f);
  nm::mxfp8_quantize_rows(x.data(), 1, 64, q.data(), s.data());
  nm::mxfp8_dequantize_rows(q.data(), s.data(), 1, 64, y.data());
  EXPECT_EQ(s[0], 0x00);  // smallest scale 2^-127, never NaN
  EXPECT_EQ(s[1], 0x00);
  for (int i = 0; i < 64; ++i) {
    EXPECT_EQ(q[i] & 0x7f, 0x00) << i;
    EXPECT_EQ(y[i], 0.0f) << i;
  }
  EXPECT_EQ(q[40], 0x80);  // -0 keeps its sign
}

TEST(NumericMXFP8, CraftedOneHugeValue) {
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = 1.0f + 0.25f * i;
  x[17] = 3.0e38f;
  std::vector<uint8_t> q(32), s(1);
  std::vector<float> y(32);
  nm::mxfp8_quantize_rows(x.data(), 1, 32, q.data(), s.data());
  nm::mxfp8_dequantize_rows(q.data(), s.data(), 1, 32, y.data());
  // 3e38 / 448 = 6.7e35 -> 2^119 (6.6e35 < 6.7e35 <= 2^120 = 1.3e36).
  EXPECT_EQ(s[0], 127 + 120);
  EXPECT_LE(std::fabs(y[17] - x[17]), std::ldexp(std::fabs(x[17]), -4));
  EXPECT_FALSE(std::isinf(y[17]));
  for (int i = 0; i < 32; ++i) {
    if (i != 17) {
      EXPECT_EQ(y[i], 0.0f) << i;  // swamped: far below 2^-10 * 2^120
    }
  }
  check_rows_against_reference(x, 1, 32);
}

TEST(NumericMXFP8, CraftedBlockMaxExactlyAtPowerOfTwoBoundary) {
  // amax = 448 * 2^3 exactly -> scale 2^3, amax encodes to 0x7E (448): nothing clips.
  std::vector<float> x(32, 1.0f);
  x[5] = -448.0f * 8.0f;
  std::vector<uint8_t> q(32), s(1);
  nm::mxfp8_quantize_rows(x.data(), 1, 32, q.data(), s.data());
  EXPECT_EQ(s[0], 130);
  EXPECT_EQ(q[5], 0xfe);
  // One ulp above: the scale moves up one binade and amax encodes to 224 (0x76).
  x[5] = -std::nextafter(448.0f * 8.0f, kInf);
  nm::mxfp8_quantize_rows(x.data(), 1, 32, q.data(), s.data());
  EXPECT_EQ(s[0], 131);
  EXPECT_EQ(q[5], 0xf6);
}

TEST(NumericMXFP8, CraftedSubnormalOnlyBlock) {
  // FP32 subnormal inputs: scale 2^-127, reciprocal 2^127 brings them into E4M3 range.
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = std::ldexp(static_cast<float>(i - 16), -133);  // |x| <= 2^-129
  x[3] = std::numeric_limits<float>::denorm_min();
  std::vector<uint8_t> q(32), s(1);
  std::vector<float> y(32);
  nm::mxfp8_quantize_rows(x.data(), 1, 32, q.data(), s.data());
  nm::mxfp8_dequantize_rows(q.data(), s.data(), 1, 32, y.data());
  EXPECT_EQ(s[0], 0);
  for (int i = 0; i < 32; ++i) {
    if (i == 3) continue;
    // x * 2^127 = (i-16) * 2^-6: exactly representable (normal or subnormal E4M3) -> exact.
    EXPECT_EQ(y[i], x[i]) << i;
  }
  EXPECT_EQ(y[3], 0.0f);
  check_rows_against_reference(x, 1, 32);
}

TEST(NumericMXFP8, CraftedNaNOrInfPoisonsOnlyItsBlock) {
  for (float bad : {kNaN, kInf, -kInf}) {
    std::vector<float> x = random_matrix(2, 96, 5, -2, 2);
    x[1 * 96 + 40] = bad;  // row 1, block 1
    std::vector<uint8_t> q(2 * 96), s(2 * 3);
    std::vector<float> y(2 * 96);
    nm::mxfp8_quantize_rows(x.data(), 2, 96, q.data(), s.data());
    nm::mxfp8_dequantize_rows(q.data(), s.data(), 2, 96, y.data());
    EXPECT_EQ(s[1 * 3 + 1], 0xff);
    for (int c = 32; c < 64; ++c) {
      EXPECT_EQ(q[96 + c], 0x7f) << c;
      EXPECT_TRUE(std::isnan(y[96 + c])) << c;
    }
    for (int i = 0; i < 2 * 96; ++i) {
      if (i >= 96 + 32 && i < 96 + 64) continue;
      EXPECT_TRUE(std::isfinite(y[i])) << i;
    }
    check_rows_against_reference(x, 2, 96);
  }
}

TEST(NumericMXFP8, RandomRowsMatchReferenceAndErrorBound) {
  for (auto shape : {std::pair<int64_t, int64_t>{64, 128}, {7, 200}, {33, 45}}) {
    const int64_t rows = shape.first, cols = shape.second;
    const std::vector<float> x = random_matrix(rows, cols, static_cast<uint32_t>(rows * 1000 + cols));
    check_rows_against_reference(x, rows, cols);
    const int64_t nb = cdiv(cols, 32);
    const auto [q, s, y] = run_rows(x, rows, cols);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const double v = x[r * cols + c], err = std::fabs(y[r * cols + c] - v);
        const double unit = std::ldexp(1.0, s[r * nb + c / 32] - 127);
        // Normal E4M3 range: relative error <= 2^-4; subnormal range: absolute <= 2^-10 * scale.
        ASSERT_LE(err, std::max(std::ldexp(std::fabs(v), -4), std::ldexp(unit, -10))) << r << "," << c;
      }
  }
}

TEST(NumericMXFP8, ColumnsAreTransposedRows) {
  const int64_t rows = 70, cols = 48;  // partial last row block
  const std::vector<float> x = random_matrix(rows, cols, 11);
  const int64_t nbr = cdiv(rows, 32);
  std::vector<uint8_t> qc(rows * cols), sc(nbr * cols);
  nm::mxfp8_quantize_cols(x.data(), rows, cols, qc.data(), sc.data());
  const std::vector<float> xt = transpose(x, rows, cols);
  std::vector<uint8_t> qr(rows * cols), sr(cols * nbr);
  nm::mxfp8_quantize_rows(xt.data(), cols, rows, qr.data(), sr.data());
  EXPECT_EQ(transpose(qr, cols, rows), qc);
  EXPECT_EQ(transpose(sr, cols, nbr), sc);
  std::vector<float> yc(rows * cols), yr(rows * cols);
  nm::mxfp8_dequantize_cols(qc.data(), sc.data(), rows, cols, yc.data());
  nm::mxfp8_dequantize_rows(qr.data(), sr.data(), cols, rows, yr.data());
  EXPECT_EQ(transpose(yr, cols, rows), yc);
  check_rows_against_reference(xt, cols, rows);  // so the columns match the reference too
}

TEST(NumericMXFP8, TilesAgreeWithRowsColsAndTranspose) {
  const int64_t rows = 96, cols = 80;  // 3 x 3 tiles, the last column tile partial
  std::vector<float> x = random_matrix(rows, cols, 21);
  x[40 * cols + 70] = kNaN;  // poisons tile (1, 2) only
  const int64_t nbr = cdiv(rows, 32), nbc = cdiv(cols, 32);
  std::vector<uint8_t> qt(rows * cols), st(nbr * nbc);
  nm::mxfp8_quantize_tiles(x.data(), rows, cols, qt.data(), st.data());

  // Tile scale = max of the row-block scales inside the tile (RCEIL is monotone in amax), and the
  // data are the per-element rule with that scale.
  std::vector<uint8_t> qr(rows * cols), sr(rows * nbc);
  nm::mxfp8_quantize_rows(x.data(), rows, cols, qr.data(), sr.data());
  for (int64_t i = 0; i < nbr; ++i)
    for (int64_t j = 0; j < nbc; ++j) {
      int mx = 0;
      for (int64_t r = i * 32; r < std::min(rows, i * 32 + 32); ++r) mx = std::max<int>(mx, sr[r * nbc + j]);
      EXPECT_EQ(st[i * nbc + j], mx) << i << "," << j;
    }
  EXPECT_EQ(st[1 * nbc + 2], 0xff);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      ASSERT_EQ(qt[r * cols + c], e4m3_expected(st[(r / 32) * nbc + c / 32] == 0xff
                                                    ? std::numeric_limits<double>::quiet_NaN()
                                                    : std::ldexp(static_cast<double>(x[r * cols + c]),
                                                                 127 - st[(r / 32) * nbc + c / 32])));

  // Tiles of the transpose are the transposed tiles.
  const std::vector<float> xt = transpose(x, rows, cols);
  std::vector<uint8_t> qtt(rows * cols), stt(nbc * nbr);
  nm::mxfp8_quantize_tiles(xt.data(), cols, rows, qtt.data(), stt.data());
  EXPECT_EQ(transpose(qtt, cols, rows), qt);
  EXPECT_EQ(transpose(stt, nbc, nbr), st);

  // One qdata, two scale views: FPROP rows view and DGRAD (transposed) view dequantize alike.
  std::vector<float> yt(rows * cols);
  nm::mxfp8_dequantize_tiles(qt.data(), st.data(), rows, cols, yt.data());
  std::vector<uint8_t> fprop(rows * nbc), dgrad(cols * nbr);
  nm::mxfp8_tile_scales_to_rows(st.data(), rows, cols, fprop.data());
  nm::mxfp8_tile_scales_to_cols(st.data(), rows, cols, dgrad.data());
  std::vector<float> y_fprop(rows * cols), y_dgrad_t(rows * cols);
  nm::mxfp8_dequantize_rows(qt.data(), fprop.data(), rows, cols, y_fprop.data());
  const std::vector<uint8_t> qt_t = transpose(qt, rows, cols);
  nm::mxfp8_dequantize_rows(qt_t.data(), dgrad.data(), cols, rows, y_dgrad_t.data());
  const std::vector<float> y_dgrad = transpose(y_dgrad_t, cols, rows);
  for (int64_t i = 0; i < rows * cols; ++i) {
    if (std::isnan(yt[i])) {
      ASSERT_TRUE(std::isnan(y_fprop[i]) && std::isnan(y_dgrad[i])) << i;
    } else {
      ASSERT_EQ(yt[i], y_fprop[i]) << i;
      ASSERT_EQ(yt[i], y_dgrad[i]) << i;
    }
  }
}

TEST(NumericMXFP8, ValueHelpersMatchArrays) {
  EXPECT_EQ(nm::mxfp8_quantize_value(448.0f, 127), 0x7e);
  EXPECT_EQ(nm::mxfp8_quantize_value(449.0f, 127), 0x7e);
  EXPECT_EQ(nm::mxfp8_quantize_value(3.0f, 128), nm::float_to_e4m3(1.5f));
  EXPECT_EQ(nm::mxfp8_quantize_value(1.0f, 0xff), 0x7f);
  EXPECT_EQ(nm::mxfp8_dequantize_value(0x38, 130), 8.0f);
  EXPECT_TRUE(std::isnan(nm::mxfp8_dequantize_value(0x38, 0xff)));
  EXPECT_TRUE(std::isnan(nm::mxfp8_dequantize_value(0x7f, 127)));
}

// The BF16 bits of the exact value e4m3(code) x 2^(s - 127) rounded once to nearest even: exact at
// or above 2^-126 in magnitude (4 significant bits), in units of the BF16 subnormal step 2^-133 below.
uint16_t bf16_of_exact(int code, int s) {
  const double v = e4m3_definition(code & 0x7f) * std::ldexp(1.0, s - 127);
  const uint16_t sign = (code & 0x80) != 0 ? 0x8000 : 0;
  if (v >= std::ldexp(1.0, -126)) return sign | nm::float_to_bf16(static_cast<float>(v)).bits;
  const double n = std::nearbyint(std::ldexp(v, 133));  // the default rounding mode: half to even
  return sign | static_cast<uint16_t>(n);
}

// The dequantizing GEMM baseline's conversion (gemm/mainloop_mxfp8_dequant.cuh) for every E4M3 code
// in every byte position against every E8M0 code: the exact value rounded once to BF16 (bitwise,
// zero signs included; exact down to 2^-130), NaN for the NaN block code 255. The E4M3 NaN codes
// 0x7F / 0xFF are the one documented difference: a finite result under a finite scale.
TEST(NumericMXFP8, DequantizesToBf16ExactlyForEveryCodePair) {
  std::mt19937 rng(55);
  int checked = 0, exact = 0;
  for (int s = 0; s < 256; ++s) {
    for (int code = 0; code < 256; ++code) {
      for (int pos = 0; pos < 16; pos += 5) {  // positions 0, 5, 10, 15: every byte of a word, every word
        uint32_t w[4];
        for (uint32_t& x : w) x = rng();
        w[pos / 4] = (w[pos / 4] & ~(0xffu << (8 * (pos % 4)))) | static_cast<uint32_t>(code) << (8 * (pos % 4));
        uint32_t v[8];
        nm::mxfp8_e4m3x16_to_bf16(w, static_cast<uint32_t>(s), v);
        const uint16_t got = static_cast<uint16_t>(v[pos / 2] >> (16 * (pos % 2)));
        ++checked;
        if (s == 255) {
          ASSERT_TRUE(std::isnan(nm::bf16_to_float(nm::bf16_t{got}))) << "code " << code;
          continue;
        }
        if ((code & 0x7f) == 0x7f) {
          ASSERT_FALSE(std::isnan(nm::bf16_to_float(nm::bf16_t{got}))) << "s " << s;
          continue;
        }
        ASSERT_EQ(got, bf16_of_exact(code, s)) << "code " << code << " s " << s << " pos " << pos;
        const double v_exact = e4m3_definition(code & 0x7f) * std::ldexp(1.0, s - 127);
        if (static_cast<double>(std::fabs(nm::bf16_to_float(nm::bf16_t{got}))) == v_exact) ++exact;
      }
    }
  }
  EXPECT_EQ(checked, 256 * 256 * 4);
  // Every finite pair is exact but those below 2^-130 that BF16 cannot hold: at the smallest scales.
  EXPECT_GT(exact, 255 * 254 * 4 * 9 / 10);
}

// ---- column blocks at a shared scale (the Hopper MXFP8 WGRAD's operands, perf_history G149) ----------

// Every E4M3 code under every block scale s and shared scale M >= s: unchanged at s = M; else the code
// of the exact value q * 2^(s - M) rounded to nearest even on the E4M3 grid (the definition's grid,
// satfinite never reached), NaN codes -> 0x7F; and the value moves by at most half the subnormal step
// 2^-10 (in units of 2^(M - 127)), nothing where the shifted value stays normal.
TEST(NumericMXFP8, CodesAtASharedScaleAreTheExactValueRoundedOnce) {
  int normal = 0, rounded = 0;
  for (int s : {0, 1, 100, 126, 127, 200, 253, 254}) {
    for (int shift = 0; shift <= 40 && s + shift <= 254; ++shift) {
      const int m = s + shift;
      for (int code = 0; code < 256; ++code) {
        const uint8_t got = nm::mxfp8_code_at_shared_scale(static_cast<uint8_t>(code), static_cast<uint8_t>(s),
                                                           static_cast<uint8_t>(m));
        const double v = e4m3_definition(code);
        if (shift == 0) {
          ASSERT_EQ(got, code) << "s=" << s;
          continue;
        }
        if (std::isnan(v)) {
          ASSERT_EQ(got, 0x7f) << "s=" << s << " shift=" << shift;
          continue;
        }
        const double exact = std::ldexp(v, -shift);
        ASSERT_EQ(got, e4m3_expected(exact)) << "code " << code << " s=" << s << " shift=" << shift;
        const double err = std::fabs(e4m3_definition(got) - exact);
        ASSERT_LE(err, std::ldexp(1.0, -10)) << "code " << code << " shift=" << shift;
        if (std::fabs(exact) >= std::ldexp(1.0, -6)) {
          ASSERT_EQ(err, 0.0) << "a normal value moved: code " << code << " shift=" << shift;
          ++normal;
        } else {
          rounded += err != 0.0;
        }
      }
    }
  }
  EXPECT_GT(normal, 0);
  EXPECT_GT(rounded, 0);  // the subnormal rounding is exercised
}

// A column of 300 rows whose 32-row blocks have scales spread over 20 binades: per 128-row block the
// shared scale is the largest of its blocks' (2^(M - 127) in FP32; the last block shares over its
// two), every code follows mxfp8_code_at_shared_scale, and the dequantized values differ from the
// plain MXFP8 dequantization by at most 2^-10 * 2^(M - 127).
TEST(NumericMXFP8, ColumnsAtSharedScalesFollowTheBlockRule) {
  const int64_t rows = 300, cols = 3;
  std::mt19937 rng(77);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = std::ldexp(u(rng), static_cast<int>((r / 32) * 2 % 21) - 10);
  const int64_t nb = cdiv(rows, 32), ns = cdiv(rows, 128);
  std::vector<uint8_t> q(rows * cols), s(nb * cols), qs(rows * cols);
  std::vector<float> ss(ns * cols), y(rows * cols);
  nm::mxfp8_quantize_cols(x.data(), rows, cols, q.data(), s.data());
  nm::mxfp8_dequantize_cols(q.data(), s.data(), rows, cols, y.data());
  nm::mxfp8_cols_at_shared_scales(q.data(), s.data(), rows, cols, qs.data(), ss.data());
  for (int64_t b = 0; b < ns; ++b)
    for (int64_t c = 0; c < cols; ++c) {
      uint8_t m = 0;
      for (int64_t k = 4 * b; k < std::min(nb, 4 * b + 4); ++k) m = std::max(m, s[k * cols + c]);
      ASSERT_EQ(ss[b * cols + c], nm::e8m0_to_float(m));
      for (int64_t r = 128 * b; r < std::min(rows, 128 * b + 128); ++r) {
        const uint8_t want = nm::mxfp8_code_at_shared_scale(q[r * cols + c], s[(r / 32) * cols + c], m);
        ASSERT_EQ(qs[r * cols + c], want) << "row " << r << " col " << c;
        const double shared_value = e4m3_definition(qs[r * cols + c]) * std::ldexp(1.0, m - 127);
        ASSERT_LE(std::fabs(shared_value - y[r * cols + c]), std::ldexp(1.0, m - 127 - 10)) << "row " << r;
      }
    }
}

// ---- quantized once at a shared scale per 128 (the G152 training layer's operands) -------------------

namespace {

// x_RC through mxfp8_quantize_rows_shared and mxfp8_quantize_cols_shared against the naive loop
// (naive_helpers.h, from the format definitions): the same E4M3 codes, and per 1x128 / 128x1 block the
// FP32 scale 2^(M - 127) of the block's RCEIL code (NaN for a non-finite block). Counts into `subnormal`
// the nonzero codes on E4M3's subnormal grid, where the shared scale rounds more coarsely than a block's own.
void check_shared_once(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t* subnormal = nullptr) {
  for (bool along_cols : {true, false}) {
    SCOPED_TRACE(along_cols ? "rows_shared (1x128 along cols)" : "cols_shared (128x1 along rows)");
    const int64_t ns = cdiv(along_cols ? cols : rows, 128);
    std::vector<uint8_t> q(x.size()), want_q;
    std::vector<float> scales(along_cols ? rows * ns : ns * cols);
    std::vector<int> want_m;
    if (along_cols) {
      nm::mxfp8_quantize_rows_shared(x.data(), rows, cols, q.data(), scales.data());
      want_m = naive::mxfp8_once_codes(x, naive::row_blocks_of_128(rows, cols), want_q);
    } else {
      nm::mxfp8_quantize_cols_shared(x.data(), rows, cols, q.data(), scales.data());
      want_m = naive::mxfp8_once_codes(x, naive::col_blocks_of_128(rows, cols), want_q);
    }
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(q[i], want_q[i]) << "element " << i << " x " << x[i];
      if (subnormal) *subnormal += (q[i] & 0x78) == 0 && (q[i] & 0x07) != 0;
    }
    // The naive blocks run row-major over [rows, ns] (rows_shared's scale order) or [cols, ns] (the
    // transpose of cols_shared's [ns, cols]).
    for (std::size_t k = 0; k < want_m.size(); ++k) {
      const int64_t outer = static_cast<int64_t>(k) / ns, b = static_cast<int64_t>(k) % ns;
      const float got = scales[along_cols ? k : static_cast<std::size_t>(b * cols + outer)];
      const float want = naive::mxfp8_once_scale(want_m[k]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << "block " << k;
      } else {
        ASSERT_EQ(test_helpers::to_bits(got), test_helpers::to_bits(want)) << "block " << k << " M " << want_m[k];
      }
    }
  }
}

}  // namespace

// Rows and cols that are not multiples of 128 (partial last blocks), binades spread per 8x8 patch so a
// block's elements reach E4M3's subnormals at its scale; then a NaN and an Inf, which poison their
// 128-blocks only.
TEST(NumericMXFP8, SharedOnceRowsAndColsMatchNaiveLoop) {
  const int64_t shapes[][2] = {{1, 1}, {3, 128}, {5, 300}, {130, 7}, {257, 33}, {129, 129}};
  int64_t subnormal = 0;
  uint32_t seed = 500;
  for (const auto& [rows, cols] : shapes) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    check_shared_once(random_matrix(rows, cols, ++seed, -6, 6), rows, cols, &subnormal);
    check_shared_once(random_matrix(rows, cols, ++seed), rows, cols, &subnormal);
  }
  EXPECT_GT(subnormal, 0);
  std::vector<float> x = random_matrix(200, 150, 600, -6, 6);
  x[3 * 150 + 130] = kNaN;
  x[150 * 150 + 7] = -kInf;
  check_shared_once(x, 200, 150);
  std::vector<uint8_t> q(x.size());
  std::vector<float> scales(200 * 2);
  nm::mxfp8_quantize_rows_shared(x.data(), 200, 150, q.data(), scales.data());
  EXPECT_TRUE(std::isnan(scales[3 * 2 + 1]) && std::isnan(scales[150 * 2 + 0]));
  EXPECT_FALSE(std::isnan(scales[3 * 2 + 0]) || std::isnan(scales[150 * 2 + 1]) || std::isnan(scales[4 * 2 + 1]));
}

// The two rules for the same 128 elements (a row, and the same values as a column): quantized once
// (rows_shared / cols_shared) and the exact 1x32 / 32x1 blocks re-rounded at the shared code
// (rows_at_shared_scales / cols_at_shared_scales) share the scale, and their codes differ exactly
// where the exact block's value lands on a midpoint of E4M3's subnormal grid at that scale -- one
// rounding there, the nearer code, against two, the even one.
TEST(NumericMXFP8, SharedOnceDiffersFromReroundingOnlyAtSubnormalMidpoints) {
  const naive::Mxfp8MidpointRow row = naive::mxfp8_midpoint_row(7);
  const std::vector<float>& x = row.x;
  for (bool along_cols : {true, false}) {
    SCOPED_TRACE(along_cols ? "1x128 row" : "128x1 column");
    const int64_t rows = along_cols ? 1 : 128, cols = along_cols ? 128 : 1;
    std::vector<uint8_t> once(128), exact(128), rerounded(128), exact_scales(4);
    float once_scale = 0, rerounded_scale = 0;
    if (along_cols) {
      nm::mxfp8_quantize_rows_shared(x.data(), rows, cols, once.data(), &once_scale);
      nm::mxfp8_quantize_rows(x.data(), rows, cols, exact.data(), exact_scales.data());
      nm::mxfp8_rows_at_shared_scales(exact.data(), exact_scales.data(), rows, cols, rerounded.data(),
                                      &rerounded_scale);
    } else {
      nm::mxfp8_quantize_cols_shared(x.data(), rows, cols, once.data(), &once_scale);
      nm::mxfp8_quantize_cols(x.data(), rows, cols, exact.data(), exact_scales.data());
      nm::mxfp8_cols_at_shared_scales(exact.data(), exact_scales.data(), rows, cols, rerounded.data(),
                                      &rerounded_scale);
    }
    EXPECT_EQ(exact_scales, (std::vector<uint8_t>{127, 119, 107, 126}));
    EXPECT_EQ(once_scale, 1.0f);
    EXPECT_EQ(rerounded_scale, 1.0f);
    check_shared_once(x, rows, cols);  // (and the naive loop agrees)
    int64_t differ = 0;
    for (int64_t i = 0; i < 128; ++i) {
      const auto* at_midpoint = std::find(std::begin(row.columns), std::end(row.columns), i);
      if (at_midpoint == std::end(row.columns)) {
        EXPECT_EQ(once[i], rerounded[i]) << "element " << i << " x " << x[i];
        continue;
      }
      const std::ptrdiff_t k = at_midpoint - std::begin(row.columns);
      EXPECT_EQ(once[i], row.once[k]) << "element " << i;
      EXPECT_EQ(rerounded[i], row.rerounded[k]) << "element " << i;
      // One rounding lands nearer x than two.
      EXPECT_LT(std::fabs(e4m3_definition(once[i]) - x[i]), std::fabs(e4m3_definition(rerounded[i]) - x[i]));
      differ += once[i] != rerounded[i];
    }
    EXPECT_EQ(differ, 2);
  }
}
