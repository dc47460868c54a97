// The MXFP8 operands at shared scales (src/quant/mxfp8_shared_scales.cu; perf_history G149-G151) against
// the host rule numeric::mxfp8_code_at_shared_scale, bit for bit:
//   quant::mxfp8_columns_to_fp8_blockwise (the WGRAD's column bundles at shared scales per 128 tokens):
//     every data byte and FP32 scale of the output (poisoned first: an unwritten byte fails, and bytes past
//     the last group's rounded end must keep the poison) and the padded counts, on column bundles of any
//     bytes (every E4M3 code, E8M0 codes 0, 254 and 255, shifts of 0 to 40 inside a 128-token block) and
//     on the bundles the MXFP8 rows + columns quantizer writes from random BF16 rows, whose conversion
//     must equal the oracle's path (numeric::mxfp8_quantize_cols on each expert's rows, then
//     numeric::mxfp8_cols_at_shared_scales; reference::mxfp8_wgrad_operand dequantizes that);
//   quant::mxfp8_rows_to_fp8_blockwise (the DGRAD's row bundles, in place): any bytes and code words, rows
//     past the used count untouched; and the quantizer's row bundle of random rows against
//     numeric::mxfp8_rows_at_shared_scales;
//   quant::mxfp8_weight_block_scales: a prepared weight's 128x128 scales against the largest tile code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/error.h"
#include "gpu_test_util.h"
#include "quant/quantize.h"
#include "reference/random.h"

namespace dist_moe {
namespace {

namespace nm = numeric;
using testing::DeviceBuffer;
using testing::first_difference;
using testing::kPoison;

constexpr int64_t kShared = 128;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

struct Layout {
  std::vector<int32_t> counts, offsets;  // offsets: starts padded to 32, G + 1
  std::vector<int32_t> padded;           // rows rounded up to 128 (the expected padded counts)
  std::vector<int64_t> starts;           // output starts, G + 1
  int64_t used = 0;                      // offsets[G]
};

Layout make_layout(const std::vector<int32_t>& counts) {
  Layout l{counts, {0}, {}, {0}};
  for (int32_t c : counts) {
    l.offsets.push_back(l.offsets.back() + static_cast<int32_t>(round_up(c, 32)));
    l.padded.push_back(static_cast<int32_t>(round_up(round_up(c, 32), kShared)));
    l.starts.push_back(l.starts.back() + l.padded.back());
  }
  l.used = l.offsets.back();
  return l;
}

// A compact bundle's two parts on the host: q [C, R] and codes [R / 32, C] (R = used).
struct Bundle {
  std::vector<uint8_t> q, codes;
};

// The expected output (strided: q [C, cap], scales [cap / 128, C]), poison where nothing is written.
struct Expected {
  std::vector<uint8_t> q;
  std::vector<float> scales;
};

Expected expected_output(const Layout& l, const Bundle& b, int64_t C, int64_t cap) {
  Expected e{std::vector<uint8_t>(C * cap, kPoison), {}};
  float poison_f;
  const uint32_t pw = 0x01010101u * kPoison;
  std::memcpy(&poison_f, &pw, 4);
  e.scales.assign(cap / kShared * C, poison_f);
  const int64_t R = l.used;
  for (size_t g = 0; g < l.counts.size(); ++g) {
    const int64_t len = l.offsets[g + 1] - l.offsets[g];
    for (int64_t j = 0; j * kShared < len; ++j) {
      const int64_t first = l.offsets[g] + j * kShared;  // input token
      const int64_t subs = std::min<int64_t>(4, (len - j * kShared) / 32);
      for (int64_t c = 0; c < C; ++c) {
        uint8_t shared = 0;
        for (int64_t i = 0; i < subs; ++i) shared = std::max(shared, b.codes[(first / 32 + i) * C + c]);
        e.scales[(l.starts[g] / kShared + j) * C + c] = nm::e8m0_to_float(shared);
        for (int64_t t = 0; t < kShared; ++t) {
          const int64_t token = j * kShared + t;  // within the group
          uint8_t v = 0;
          if (token < l.counts[g])
            v = nm::mxfp8_code_at_shared_scale(b.q[c * R + first + t], b.codes[((first + t) / 32) * C + c], shared);
          e.q[c * cap + l.starts[g] + token] = v;
        }
      }
    }
  }
  return e;
}

// Runs the conversion of `b` (compact, 256 bytes into a buffer at a device offset) into poisoned
// strided outputs of `cap` tokens and compares everything with the host rule.
void check_conversion(const Layout& l, const Bundle& b, int64_t C, int64_t cap) {
  SCOPED_TRACE("C=" + std::to_string(C) + " R=" + std::to_string(l.used) + " capacity=" + std::to_string(cap) +
               " groups=" + std::to_string(l.counts.size()));
  const int64_t R = l.used, offset = 256;
  std::vector<uint8_t> buf(offset + nm::mxfp8_compact_columns_bytes(C, R), 0x5A);
  std::copy(b.q.begin(), b.q.end(), buf.begin() + offset);
  std::copy(b.codes.begin(), b.codes.end(), buf.begin() + offset + nm::mxfp8_compact_columns_scales_offset(C, R));
  DeviceBuffer<uint8_t> dbuf(buf);
  DeviceBuffer<int64_t> doffset(std::vector<int64_t>{offset});
  DeviceBuffer<int32_t> dcounts(l.counts), doffsets(l.offsets), dpadded(l.counts.size());
  DeviceBuffer<uint8_t> dq(C * cap);
  DeviceBuffer<float> ds(cap / kShared * C);
  dq.poison(kPoison);
  ds.poison(kPoison);
  dpadded.poison(kPoison);
  quant::Mxfp8In in;
  in.q = dbuf.get();
  in.compact = true;
  in.q_offset = doffset.get();
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(l.counts.size())};
  quant::mxfp8_columns_to_fp8_blockwise(in, groups, C, cap, {dq.get(), cap, ds.get(), 1, C}, dpadded.get(), nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const Expected e = expected_output(l, b, C, cap);
  const auto q = dq.download();
  const int64_t at = first_difference(q, e.q);
  EXPECT_EQ(at, -1) << "data byte of feature " << at / cap << ", token " << at % cap << ": got " << int(q[at])
                    << ", want " << int(e.q[at]);
  const int64_t sat = first_difference(ds.download(), e.scales);
  EXPECT_EQ(sat, -1) << "scale of 128-token block " << sat / 4 / C << ", feature " << sat / 4 % C;
  EXPECT_EQ(dpadded.download(), l.padded);
}

// Any bytes: codes drawn so that the blocks of a 128-token block sit 0 .. 40 binades apart, with
// codes 0, 254 and 255 (NaN) among them; data bytes uniform over all 256 E4M3 codes.
Bundle any_bytes(const Layout& l, int64_t C, uint64_t seed) {
  reference::Rng rng(seed);
  const int64_t R = l.used;
  Bundle b{std::vector<uint8_t>(C * R), std::vector<uint8_t>(R / 32 * C)};
  for (auto& v : b.q) v = static_cast<uint8_t>(rng.below(256));
  for (int64_t blk = 0; blk < R / 32; ++blk)
    for (int64_t c = 0; c < C; ++c) {
      const int64_t kind = rng.below(64);
      uint8_t code = static_cast<uint8_t>(100 + rng.below(41));  // spread: shifts up to 40
      if (kind == 0) code = 0;
      if (kind == 1) code = 254;
      if (kind == 2) code = 255;
      if (kind == 3) code = 127;
      b.codes[blk * C + c] = code;
    }
  return b;
}

TEST(Mxfp8WgradColumns, AnyBytesAtSharedScalesMatchTheHostRule) {
  DMOE_REQUIRE_SM90();
  {
    const Layout l = make_layout({37, 0, 64, 1, 100, 300, 129, 128});
    check_conversion(l, any_bytes(l, 256, 11), 256, round_up(l.starts.back(), kShared) + 256);
  }
  {
    const Layout l = make_layout({500, 3});  // C = 288: a last 256-feature slice of 32 features
    check_conversion(l, any_bytes(l, 288, 12), 288, l.starts.back());
  }
  {
    std::vector<int32_t> many(1024);
    for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 7 % 41);
    const Layout l = make_layout(many);
    check_conversion(l, any_bytes(l, 64, 13), 64, l.starts.back());
  }
  {
    const Layout l = make_layout({0, 0, 0});  // nothing routed: only the padded counts (zeros)
    check_conversion(l, Bundle{}, 128, 256);
  }
}

// The quantizer's bundles of random BF16 rows (each row's exponent spread over 2^-30 .. 2^30, so
// neighbouring 32-token blocks take very different scales) against the oracle's path on each
// expert's real rows.
TEST(Mxfp8WgradColumns, QuantizedColumnsAtSharedScalesMatchTheOraclePath) {
  DMOE_REQUIRE_SM90();
  const std::vector<int32_t> counts = {37, 0, 300, 1, 129, 256, 64};
  const int64_t C = 384;
  const Layout l = make_layout(counts);
  const int64_t cap = round_up(l.starts.back(), kShared);
  reference::Rng rng(21);
  std::vector<uint16_t> bits(l.used * C, 0);
  std::vector<float> x(l.used * C, 0.0f);
  for (size_t g = 0; g < counts.size(); ++g)
    for (int64_t m = l.offsets[g]; m < l.offsets[g] + counts[g]; ++m) {
      const int e = static_cast<int>(rng.below(61)) - 30;
      for (int64_t c = 0; c < C; ++c) {
        bits[m * C + c] = nm::float_to_bf16(std::ldexp(static_cast<float>(rng.uniform(-1, 1)), e)).bits;
        x[m * C + c] = nm::bf16_to_float(nm::bf16_t{bits[m * C + c]});
      }
    }
  DeviceBuffer<uint16_t> dx(bits);
  DeviceBuffer<int32_t> dcounts(l.counts), doffsets(l.offsets);
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(counts.size())};
  DeviceBuffer<uint8_t> dcols(nm::mxfp8_compact_columns_bytes(C, l.used));
  quant::Mxfp8Out cols;
  cols.q = dcols.get();
  cols.compact = true;
  quant::mxfp8_quantize_rows_cols({dx.get(), l.used, C, C}, groups, quant::Mxfp8Out{}, cols, nullptr);
  DeviceBuffer<uint8_t> dq(C * cap);
  DeviceBuffer<float> ds(cap / kShared * C);
  DeviceBuffer<int32_t> dpadded(counts.size());
  dq.poison(kPoison);
  ds.poison(kPoison);
  quant::Mxfp8In in;
  in.q = dcols.get();
  in.compact = true;
  quant::mxfp8_columns_to_fp8_blockwise(in, groups, C, cap, {dq.get(), cap, ds.get(), 1, C}, dpadded.get(), nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q = dq.download();
  const auto s = ds.download();
  for (size_t g = 0; g < counts.size(); ++g) {
    const int64_t rows = counts[g];
    if (rows == 0) continue;
    std::vector<uint8_t> gq(rows * C), gcodes(round_up(rows, 32) / 32 * C), sq(rows * C);
    std::vector<float> ss(round_up(rows, kShared) / kShared * C);
    nm::mxfp8_quantize_cols(&x[l.offsets[g] * C], rows, C, gq.data(), gcodes.data());
    nm::mxfp8_cols_at_shared_scales(gq.data(), gcodes.data(), rows, C, sq.data(), ss.data());
    for (int64_t c = 0; c < C; ++c) {
      for (int64_t t = 0; t < l.padded[g]; ++t) {
        const uint8_t want = t < rows ? sq[t * C + c] : 0;
        ASSERT_EQ(q[c * cap + l.starts[g] + t], want) << "group " << g << " feature " << c << " token " << t;
      }
      for (int64_t j = 0; j * kShared < rows; ++j) {
        float got = s[(l.starts[g] / kShared + j) * C + c], want = ss[j * C + c];
        ASSERT_EQ(0, std::memcmp(&got, &want, 4)) << "group " << g << " feature " << c << " block " << j;
      }
    }
  }
}

// ---- rows in place (the DGRAD's A operand) ---------------------------------------------------------

// Any bytes: rows [cap, C] of random codes, code words of random codes (spread over 0 .. 40 binades,
// with 0, 254 and 255 among them); rows at or past `used` keep their bytes and words.
TEST(Mxfp8DgradRows, AnyBytesAtSharedScalesMatchTheHostRule) {
  DMOE_REQUIRE_SM90();
  for (const auto& [cap, C, used] : {std::tuple<int64_t, int64_t, int32_t>{256, 384, 200}, {512, 128, 512},
                                     {384, 1024, 0}, {1280, 256, 1057}}) {
    SCOPED_TRACE("capacity=" + std::to_string(cap) + " C=" + std::to_string(C) + " used=" + std::to_string(used));
    reference::Rng rng(static_cast<uint64_t>(cap + C + used));
    const int64_t ld = cap + 64;  // a word stride above the capacity
    std::vector<uint8_t> q(cap * C);
    std::vector<uint32_t> words(C / kShared * ld);
    for (auto& v : q) v = static_cast<uint8_t>(rng.below(256));
    for (auto& w : words) {
      w = 0;
      for (int i = 0; i < 4; ++i) {
        const int64_t kind = rng.below(64);
        uint32_t code = static_cast<uint32_t>(100 + rng.below(41));
        if (kind == 0) code = 0;
        if (kind == 1) code = 254;
        if (kind == 2) code = 255;
        w |= code << (8 * i);
      }
    }
    DeviceBuffer<uint8_t> dq(q);
    DeviceBuffer<uint32_t> dw(words);
    DeviceBuffer<int32_t> dused(std::vector<int32_t>{used});
    quant::mxfp8_rows_to_fp8_blockwise(dq.get(), C, dw.get(), ld, cap, dused.get(), nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto gq = dq.download();
    const auto gw = dw.download();
    for (int64_t r = 0; r < cap; ++r)
      for (int64_t j = 0; j < C / kShared; ++j) {
        const uint32_t w = words[j * ld + r];
        if (r >= used) {
          ASSERT_EQ(gw[j * ld + r], w) << "row " << r << " past the used rows";
          for (int64_t c = 0; c < kShared; ++c) ASSERT_EQ(gq[r * C + j * kShared + c], q[r * C + j * kShared + c]);
          continue;
        }
        uint8_t codes[4], top = 0;
        for (int i = 0; i < 4; ++i) top = std::max(top, codes[i] = static_cast<uint8_t>(w >> (8 * i)));
        const float want_scale = nm::e8m0_to_float(top);
        ASSERT_EQ(0, std::memcmp(&gw[j * ld + r], &want_scale, 4)) << "scale of row " << r << " block " << j;
        for (int64_t c = 0; c < kShared; ++c) {
          const uint8_t want = nm::mxfp8_code_at_shared_scale(q[r * C + j * kShared + c], codes[c / 32], top);
          ASSERT_EQ(gq[r * C + j * kShared + c], want) << "row " << r << " column " << j * kShared + c;
        }
      }
  }
}

// The row bundle the rows + columns quantizer writes (k-block-major code words) from random BF16 rows,
// converted, against numeric::mxfp8_rows_at_shared_scales on the host's MXFP8 rows of the same values.
TEST(Mxfp8DgradRows, QuantizedRowsAtSharedScalesMatchTheOraclePath) {
  DMOE_REQUIRE_SM90();
  const std::vector<int32_t> counts = {37, 0, 300, 1, 129};
  const int64_t C = 512;
  const Layout l = make_layout(counts);
  const int64_t cap = round_up(l.used, kShared);
  reference::Rng rng(33);
  std::vector<uint16_t> bits(cap * C, 0);
  std::vector<float> x(cap * C, 0.0f);
  for (size_t g = 0; g < counts.size(); ++g)
    for (int64_t m = l.offsets[g]; m < l.offsets[g] + counts[g]; ++m)
      for (int64_t c = 0; c < C; ++c) {
        const int e = static_cast<int>((c / 32) * 3 % 25) - 12;  // neighbouring 32-blocks far apart
        bits[m * C + c] = nm::float_to_bf16(std::ldexp(static_cast<float>(rng.uniform(-1, 1)), e)).bits;
        x[m * C + c] = nm::bf16_to_float(nm::bf16_t{bits[m * C + c]});
      }
  DeviceBuffer<uint16_t> dx(bits);
  DeviceBuffer<int32_t> dcounts(l.counts), doffsets(l.offsets);
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(counts.size())};
  DeviceBuffer<uint8_t> dq(cap * C);
  DeviceBuffer<uint32_t> dw(C / kShared * cap);
  quant::Mxfp8Out rows{dq.get(), C, reinterpret_cast<uint8_t*>(dw.get()), 0, 0};
  rows.scale_word_ld = cap;
  quant::mxfp8_quantize_rows_cols({dx.get(), cap, C, C}, groups, rows, quant::Mxfp8Out{}, nullptr);
  quant::mxfp8_rows_to_fp8_blockwise(dq.get(), C, dw.get(), cap, cap, doffsets.get() + counts.size(), nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto gq = dq.download();
  const auto gw = dw.download();
  std::vector<uint8_t> hq(l.used * C), hs(l.used * C / 32), sq(l.used * C);
  std::vector<float> ss(l.used * C / kShared);
  nm::mxfp8_quantize_rows(x.data(), l.used, C, hq.data(), hs.data());  // padding rows: zeros, as on the GPU
  nm::mxfp8_rows_at_shared_scales(hq.data(), hs.data(), l.used, C, sq.data(), ss.data());
  for (int64_t r = 0; r < l.used; ++r)
    for (int64_t j = 0; j < C / kShared; ++j) {
      ASSERT_EQ(0, std::memcmp(&gw[j * cap + r], &ss[r * (C / kShared) + j], 4)) << "scale of row " << r << " block " << j;
      for (int64_t c = j * kShared; c < (j + 1) * kShared; ++c) ASSERT_EQ(gq[r * C + c], sq[r * C + c]) << r << "," << c;
    }
}

// A prepared weight's 128x128 scales from an E8M0 grid [E*R, C/32] (each tile code on its 32 rows; here
// the DGRAD grid, R = K and C = N, not square: the orientation counts).
TEST(Mxfp8DgradRows, WeightBlockScalesAreTheLargestTileCode) {
  DMOE_REQUIRE_SM90();
  const int64_t E = 3, N = 384, K = 256;
  reference::Rng rng(44);
  std::vector<uint8_t> tiles(E * (K / 32) * (N / 32)), rows(E * K * (N / 32));
  for (auto& t : tiles) t = static_cast<uint8_t>(rng.below(64) == 0 ? 255 : 90 + rng.below(60));
  for (int64_t e = 0; e < E; ++e)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t b = 0; b < N / 32; ++b) rows[(e * K + k) * (N / 32) + b] = tiles[(e * (K / 32) + k / 32) * (N / 32) + b];
  DeviceBuffer<uint8_t> drows(rows);
  DeviceBuffer<float> dout(E * (K / kShared) * (N / kShared));
  dout.poison(kPoison);
  quant::mxfp8_weight_block_scales(drows.get(), E, K, N, dout.get(), nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto out = dout.download();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t kb = 0; kb < K / kShared; ++kb)
      for (int64_t nb = 0; nb < N / kShared; ++nb) {
        uint8_t top = 0;
        for (int64_t i = 0; i < 4; ++i)
          for (int64_t j = 0; j < 4; ++j) top = std::max(top, tiles[(e * (K / 32) + kb * 4 + i) * (N / 32) + nb * 4 + j]);
        const float want = nm::e8m0_to_float(top);
        ASSERT_EQ(0, std::memcmp(&out[(e * (K / kShared) + kb) * (N / kShared) + nb], &want, 4)) << e << "," << kb << "," << nb;
      }
}

TEST(Mxfp8WgradColumns, UnsupportedArgumentsAreArgumentErrors) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<uint8_t> b(1 << 16);
  DeviceBuffer<float> s(1024);
  DeviceBuffer<int32_t> counts(std::vector<int32_t>{1}), offsets(std::vector<int32_t>{0, 32}), padded(1);
  const quant::RowGroups groups{counts.get(), offsets.get(), 1};
  quant::Mxfp8In in{b.get(), 128, b.get(), 1, 128};
  auto expect_invalid = [](auto f, const std::string& fragment) { testing::expect_invalid_argument(f, fragment); };
  const quant::Fp8BlockwiseOut out{b.get(), 128, s.get(), 1, 64};
  expect_invalid([&] { quant::mxfp8_columns_to_fp8_blockwise(in, groups, 48, 128, out, padded.get(), nullptr); },
                 "C=48 must be a positive multiple of 32");
  expect_invalid([&] { quant::mxfp8_columns_to_fp8_blockwise(in, groups, 64, 96, out, padded.get(), nullptr); },
                 "must be a multiple of 128");
  expect_invalid([&] { quant::mxfp8_columns_to_fp8_blockwise(in, groups, 64, 128, out, nullptr, nullptr); },
                 "padded_counts_G is required");
  expect_invalid([&] { quant::mxfp8_columns_to_fp8_blockwise(in, groups, 64, 256, out, padded.get(), nullptr); },
                 "row stride >= the capacity");
}

}  // namespace
}  // namespace dist_moe
