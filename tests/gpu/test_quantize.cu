// The GPU block quantizers (src/quant) against the CPU oracle's block rules
// (include/dist_moe/device/numeric, run here on the host), bit for bit: every data byte and every
// scale, on fresh random BF16 inputs at several shapes (rows that are not multiples of 128, strided
// and packed outputs) and on crafted blocks: all zeros, NaN and Inf, E4M3 rounding ties,
// saturation, subnormal results, and the extreme E8M0 codes. Outputs are poisoned first, so an
// unwritten byte fails, and bytes a quantizer must not touch are checked still poisoned.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/error.h"
#include "dist_moe/prepare_weight.h"
#include "dist_moe/quantize_rows.h"
#include "gpu_test_util.h"
#include "quant/quantize.h"
#include "reference/random.h"

namespace dist_moe {
namespace {

namespace nm = numeric;
using testing::DeviceBuffer;
using testing::first_difference;
using testing::kPoison;


// A BF16 matrix kept both as bits (uploaded) and as the floats those bits mean (the oracle's input).
struct HostBf16 {
  int64_t rows = 0, cols = 0;
  std::vector<uint16_t> bits;
  std::vector<float> f;
  HostBf16(int64_t r, int64_t c) : rows(r), cols(c), bits(r * c), f(r * c) {}
  void set(int64_t i, float v) {
    bits[i] = nm::float_to_bf16(v).bits;
    f[i] = nm::bf16_to_float(nm::bf16_t{bits[i]});
  }
};

// Random values with a per-row exponent spread (2^-30 .. 2^30), so blocks see very different scales.
HostBf16 random_bf16(int64_t rows, int64_t cols, uint64_t seed) {
  reference::Rng rng(seed);
  HostBf16 h(rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    const int e = static_cast<int>(rng.below(61)) - 30;
    for (int64_t c = 0; c < cols; ++c) h.set(r * cols + c, std::ldexp(static_cast<float>(rng.uniform(-1, 1)), e));
  }
  return h;
}

// Crafted blocks written over rows 0..9 of a matrix with cols >= 256 (each row: one kind).
void add_crafted_rows(HostBf16& h) {
  const int64_t C = h.cols;
  const float nan = std::nanf(""), inf = INFINITY;
  for (int64_t c = 0; c < C; ++c) h.set(0 * C + c, c % 2 ? -0.0f : 0.0f);                     // all zeros, both signs
  h.set(1 * C + 5, nan);                                                                     // NaN in block 0
  h.set(1 * C + 200, -inf);                                                                  // -Inf in another block
  for (int64_t c = 0; c < C; ++c) {
    // E4M3 rounding ties: the block max is 448 (scale 1 / multiplier 1), the rest sit on midpoints
    // between E4M3 codes (1.0625 between 1 and 1.125; 2.125; 0.00390625*1.5 in the subnormal steps).
    static const float ties[] = {448.0f, 1.0625f, -1.1875f, 2.125f, 0.005859375f, -0.009765625f, 13.0f, 240.0f};
    h.set(2 * C + c, ties[c % 8]);
  }
  for (int64_t c = 0; c < C; ++c) h.set(3 * C + c, (c % 2 ? -1.0f : 1.0f) * 3.0e38f);       // near BF16 max: top E8M0 codes
  for (int64_t c = 0; c < C; ++c) h.set(4 * C + c, std::ldexp(static_cast<float>(c % 7 + 1), -133));  // BF16 subnormals: E8M0 byte 0
  for (int64_t c = 0; c < C; ++c) h.set(5 * C + c, c % 32 == 0 ? 1000.0f : std::ldexp(1.0f, -12));     // subnormal E4M3 results
  for (int64_t c = 0; c < C; ++c) h.set(6 * C + c, c % 128 == 0 ? 65504.0f : -(c % 3) * 3.5f);        // big spread
  for (int64_t c = 0; c < C; ++c) h.set(7 * C + c, std::ldexp(1.0f, static_cast<int>(c % 64) - 32));   // powers of two
  for (int64_t c = 0; c < C; ++c) h.set(8 * C + c, 448.0f * (1 + (c % 5) * 0.0078125f));             // at and above 448
  for (int64_t c = 0; c < C; ++c) h.set(9 * C + c, (c % 2 ? 1 : -1) * 6.0f * std::ldexp(1.0f, (int)(c / 16) % 9 - 4));
}

template <class T>
std::vector<T> download_all(const DeviceBuffer<T>& b) { return b.download(); }

// Float comparison that accepts any NaN for a NaN (the device's NaN payload may differ).
bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || nm::float_bits(a) == nm::float_bits(b); }

// ---- the hardware E4M3 conversion equals the portable rule ------------------------------------------

__global__ void e4m3_convert_kernel(const float* x, int64_t n, uint8_t* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = nm::float_to_e4m3(x[i]);
}

TEST(QuantizeE4M3, HardwareConversionEqualsPortableRule) {
  DMOE_REQUIRE_SM90();
  std::vector<float> x;
  for (int code = 0; code < 256; ++code) x.push_back(nm::e4m3_to_float(static_cast<uint8_t>(code)));
  // Every midpoint between neighbouring codes, +-8 ulps, both signs; then random floats of any exponent.
  for (int code = 0; code < 0x7e; ++code) {
    const float a = nm::e4m3_to_float(static_cast<uint8_t>(code)), b = nm::e4m3_to_float(static_cast<uint8_t>(code + 1));
    float m = (a + b) / 2;  // exact: E4M3 values have few bits
    for (int d = 0; d < 8; ++d) m = std::nextafter(m, 0.0f);
    for (int d = -8; d <= 8; ++d, m = std::nextafter(m, INFINITY)) {
      x.push_back(m);
      x.push_back(-m);
    }
  }
  reference::Rng rng(5);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng.next_u64());
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (float s : {448.0f, 464.0f, 480.0f, 1e30f, INFINITY, -INFINITY, std::nanf(""), 1e-40f, -0.0f}) x.push_back(s);
  DeviceBuffer<float> dx(x);
  DeviceBuffer<uint8_t> dq(x.size());
  e4m3_convert_kernel<<<static_cast<unsigned>((x.size() + 255) / 256), 256>>>(dx.get(), static_cast<int64_t>(x.size()), dq.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q = dq.download();
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(q[i], nm::float_to_e4m3_portable(x[i])) << "x=" << x[i];
}

// Every float bit pattern: the branch-free E2M1 rounding equals the portable rule.
__global__ void e2m1_mismatch_kernel(uint32_t first, uint32_t count, unsigned long long* mismatches) {
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(first + static_cast<uint32_t>(i));
    if (nm::float_to_e2m1(x) != nm::float_to_e2m1_portable(x)) atomicAdd(mismatches, 1ull);
  }
}

TEST(QuantizeE2M1, BranchFreeRoundingEqualsPortableRuleOnEveryFloat) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<unsigned long long> bad(std::vector<unsigned long long>{0});
  for (uint64_t first = 0; first < (1ull << 32); first += (1ull << 30))
    e2m1_mismatch_kernel<<<1056, 256>>>(static_cast<uint32_t>(first), 1u << 30, bad.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bad.download()[0], 0ull);
}

// Every float in [0, 7): the clampless magnitude code (the NVFP4 quantizers' path when a warp's
// block scales are all normal) equals the clamped one, bit for bit.
__global__ void e2m1_below7_mismatch_kernel(uint32_t count, unsigned long long* mismatches) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
    const float x = __uint_as_float(i);
    if (nm::e2m1_magnitude_code_bits_below7(x) != nm::e2m1_magnitude_code_bits(x)) atomicAdd(mismatches, 1ull);
  }
}

TEST(QuantizeE2M1, ClamplessCodeEqualsClampedCodeOnEveryFloatBelowSeven) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<unsigned long long> bad(std::vector<unsigned long long>{0});
  e2m1_below7_mismatch_kernel<<<1056, 256>>>(0x40e00000u, bad.get());  // bits of +0 .. the float below 7
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bad.download()[0], 0ull);
}

// a / s through the reciprocal (div_rn_by_reciprocal) equals the IEEE division for every E4M3
// block scale s and every significand of a with |a| >= 2^-100 (the behaviour depends only on the
// significands until the FMA's residual underflows); at smaller |a| only the E2M1 codes must agree
// (the NVFP4 weight quantizer's use).
__global__ void division_mismatch_kernel(int exponent, unsigned long long* float_mismatches,
                                         unsigned long long* code_mismatches) {
  const float s = nm::e4m3_to_float(static_cast<uint8_t>(blockIdx.y + 1));  // codes 0x01 .. 0x7E
  const float r = nm::div_rn(1.0f, s);
  for (uint32_t m = blockIdx.x * blockDim.x + threadIdx.x; m < (1u << 23); m += gridDim.x * blockDim.x) {
    const float a = __uint_as_float(((127u + exponent) << 23) | m) * (m & 1 ? -1.0f : 1.0f);
    const float want = nm::div_rn(a, s), got = nm::div_rn_by_reciprocal(a, s, r);
    if (exponent >= -100 && __float_as_uint(want) != __float_as_uint(got)) atomicAdd(float_mismatches, 1ull);
    if (nm::float_to_e2m1(want) != nm::float_to_e2m1(got)) atomicAdd(code_mismatches, 1ull);
  }
}

TEST(QuantizeNvfp4, DivisionThroughTheReciprocalEqualsIeeeDivision) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<unsigned long long> bad(std::vector<unsigned long long>{0, 0});
  for (int exponent : {-126, -120, -110, -100, -30, -1, 0, 1, 11, 20}) {
    division_mismatch_kernel<<<dim3(256, 126), 256>>>(exponent, bad.get(), bad.get() + 1);
  }
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto b = bad.download();
  EXPECT_EQ(b[0], 0ull) << "quotients differing from div.rn";
  EXPECT_EQ(b[1], 0ull) << "E2M1 codes differing";
}

// The hardware E4M3 decode equals the portable one on every code (NaN codes: any NaN).
__global__ void e4m3_decode_kernel(float* out) { out[threadIdx.x] = nm::e4m3_to_float_fast(static_cast<uint8_t>(threadIdx.x)); }

TEST(QuantizeE4M3, HardwareDecodeEqualsPortableDecodeOnEveryCode) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<float> d(256);
  e4m3_decode_kernel<<<1, 256>>>(d.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto f = d.download();
  for (int c = 0; c < 256; ++c)
    ASSERT_TRUE(same_float(f[c], nm::e4m3_to_float(static_cast<uint8_t>(c)))) << "code " << c << " gave " << f[c];
}

// The NVFP4 token-row quantizer's multiplier from the row's eight quotients (lane l holding
// fl(r / (1 + (l % 8) / 8)), a shuffle on s's significand, an exact exponent step: the kernel's
// own sequence, r uniform across the warp as a row scale is) equals fl(r / s) for every E4M3
// block scale s and every significand of r, at the binades that bound the row scales the
// quantizer can produce (2^-117 .. 2^37) and some in between. A warp takes one r, its lanes the
// 126 finite positive scales.
__global__ void multiplier_table_mismatch_kernel(int exponent, unsigned long long* mismatches) {
  const int lane = threadIdx.x % 32;
  const uint32_t warps = gridDim.x * blockDim.x / 32;
  for (uint32_t m = (blockIdx.x * blockDim.x + threadIdx.x) / 32; m < (1u << 23); m += warps) {
    const float r = __uint_as_float(((127u + exponent) << 23) | m);
    const float quotient = nm::div_rn(r, nm::e4m3_significand(lane % 8));
    for (int c = lane + 1; c < 128 + 1; c += 32) {  // codes 0x01 .. 0x7E (beyond: computed, not checked)
      const float sf = nm::e4m3_to_float_fast(static_cast<uint8_t>(c <= 0x7e ? c : 0x7e));
      const float qi = __shfl_sync(0xffffffffu, quotient, static_cast<int>(__float_as_uint(sf) >> 20));
      if (c <= 0x7e &&
          __float_as_uint(nm::nvfp4_activation_multiplier_from_quotient(qi, sf)) != __float_as_uint(nm::div_rn(r, sf)))
        atomicAdd(mismatches, 1ull);
    }
  }
}

TEST(QuantizeNvfp4, MultiplierFromTheRowQuotientTableEqualsIeeeDivision) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<unsigned long long> bad(std::vector<unsigned long long>{0});
  for (int exponent : {-117, -116, -100, -60, -27, -1, 0, 1, 11, 26, 36, 37})
    multiplier_table_mismatch_kernel<<<1056, 256>>>(exponent, bad.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(bad.download()[0], 0ull);
}

// ---- MXFP8 and FP8-blockwise rows ----------------------------------------------------------------

struct RowsCase {
  int64_t rows, cols, row_pad;  // row_pad: extra input elements per row (strided input)
};

TEST(QuantizeMxfp8, RowsMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  for (const RowsCase& rc : {RowsCase{1, 32, 0}, RowsCase{100, 2048, 8}, RowsCase{333, 7168, 0}, RowsCase{10, 256, 64}}) {
    SCOPED_TRACE("rows=" + std::to_string(rc.rows) + " cols=" + std::to_string(rc.cols));
    HostBf16 h = random_bf16(rc.rows, rc.cols, 11 + rc.rows);
    if (rc.rows >= 10 && rc.cols >= 256) add_crafted_rows(h);
    const int64_t stride = rc.cols + rc.row_pad, nb = rc.cols / 32;
    std::vector<uint16_t> strided(rc.rows * stride, 0x7fc0);  // NaN in the gaps: reading them would show
    for (int64_t r = 0; r < rc.rows; ++r) std::memcpy(&strided[r * stride], &h.bits[r * rc.cols], rc.cols * 2);
    // Packed output rows [q | scales | pad] as an inference dispatch row would hold them.
    const int64_t out_stride = (rc.cols + nb + 15) / 16 * 16;
    DeviceBuffer<uint16_t> dx(strided);
    DeviceBuffer<uint8_t> dout(rc.rows * out_stride);
    dout.poison(kPoison);
    quant::mxfp8_quantize_rows({dx.get(), rc.rows, rc.cols, stride},
                               {dout.get(), out_stride, dout.get() + rc.cols, out_stride, 1}, nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto out = dout.download();
    std::vector<uint8_t> q(rc.rows * rc.cols), s(rc.rows * nb);
    nm::mxfp8_quantize_rows(h.f.data(), rc.rows, rc.cols, q.data(), s.data());
    for (int64_t r = 0; r < rc.rows; ++r) {
      for (int64_t c = 0; c < rc.cols; ++c) ASSERT_EQ(out[r * out_stride + c], q[r * rc.cols + c]) << r << "," << c;
      for (int64_t b = 0; b < nb; ++b) ASSERT_EQ(out[r * out_stride + rc.cols + b], s[r * nb + b]) << r << ", block " << b;
      for (int64_t p = rc.cols + nb; p < out_stride; ++p) ASSERT_EQ(out[r * out_stride + p], kPoison) << "pad " << r;
    }
    if (rc.rows >= 10 && rc.cols >= 256) {
      EXPECT_EQ(s[1 * nb + 0], 0xff);  // NaN block
      EXPECT_EQ(s[0], 0x00);           // all-zero block
      EXPECT_GE(s[3 * nb], 0xf0);      // near the top of E8M0
      EXPECT_EQ(s[4 * nb], 0x00);      // the bottom of E8M0
    }
  }
}

TEST(QuantizeFp8Blockwise, RowsMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  for (const RowsCase& rc : {RowsCase{1, 128, 0}, RowsCase{100, 2048, 8}, RowsCase{333, 7168, 0}, RowsCase{10, 256, 128}}) {
    SCOPED_TRACE("rows=" + std::to_string(rc.rows) + " cols=" + std::to_string(rc.cols));
    HostBf16 h = random_bf16(rc.rows, rc.cols, 21 + rc.rows);
    if (rc.rows >= 10 && rc.cols >= 256) add_crafted_rows(h);
    const int64_t stride = rc.cols + rc.row_pad, nb = rc.cols / 128, scale_stride = (rc.rows + 3) / 4 * 4;
    std::vector<uint16_t> strided(rc.rows * stride, 0x7fc0);
    for (int64_t r = 0; r < rc.rows; ++r) std::memcpy(&strided[r * stride], &h.bits[r * rc.cols], rc.cols * 2);
    DeviceBuffer<uint16_t> dx(strided);
    DeviceBuffer<uint8_t> dq(rc.rows * rc.cols);
    DeviceBuffer<float> ds(nb * scale_stride);
    dq.poison(kPoison);
    ds.poison(kPoison);
    // Scales k-block-major [D/128, rows] (docs/formats.md).
    quant::fp8_blockwise_quantize_rows({dx.get(), rc.rows, rc.cols, stride}, {dq.get(), rc.cols, ds.get(), 1, scale_stride},
                                       nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto gq = dq.download();
    const auto gs = ds.download();
    std::vector<uint8_t> q(rc.rows * rc.cols);
    std::vector<float> s(rc.rows * nb);
    nm::fp8_blockwise_quantize_act(h.f.data(), rc.rows, rc.cols, q.data(), s.data());
    for (int64_t i = 0; i < rc.rows * rc.cols; ++i) ASSERT_EQ(gq[i], q[i]) << "element " << i;
    for (int64_t r = 0; r < rc.rows; ++r)
      for (int64_t b = 0; b < nb; ++b) ASSERT_TRUE(same_float(gs[b * scale_stride + r], s[r * nb + b])) << r << "," << b;
  }
}

// ---- both orientations over expert-major rows ---------------------------------------------------------

struct Groups {
  std::vector<int32_t> counts, offsets;  // offsets: padded starts, size G + 1
};

Groups make_groups(const std::vector<int32_t>& counts, int32_t align) {
  Groups g{counts, {0}};
  for (int32_t c : counts) g.offsets.push_back(g.offsets.back() + (c + align - 1) / align * align);
  return g;
}

// The oracle's view of a grouped buffer: padding rows are zeros; blocks along tokens restart at
// every group (quant.h). Returns the row-quantized and the column-quantized (then transposed) data.
template <class Scale>
struct Oriented {
  std::vector<uint8_t> q_rows, q_cols_t;
  std::vector<Scale> s_rows, s_cols;  // natural: [used, D/B] and [used/B, D]
};

template <int kBlock, class Scale, class QuantRows, class QuantCols>
Oriented<Scale> oracle_rows_cols(const HostBf16& h, const Groups& g, QuantRows quant_rows, QuantCols quant_cols) {
  const int64_t used = g.offsets.back(), D = h.cols;
  std::vector<float> x(used * D, 0.0f);
  for (size_t e = 0; e < g.counts.size(); ++e)
    for (int64_t r = 0; r < g.counts[e]; ++r)
      std::memcpy(&x[(g.offsets[e] + r) * D], &h.f[(g.offsets[e] + r) * D], D * sizeof(float));
  Oriented<Scale> o;
  o.q_rows.resize(used * D);
  o.s_rows.resize(used * D / kBlock);
  quant_rows(x.data(), used, D, o.q_rows.data(), o.s_rows.data());
  std::vector<uint8_t> qc(used * D);
  o.s_cols.resize(used / kBlock * D);
  for (size_t e = 0; e + 1 < g.offsets.size(); ++e) {
    const int64_t m0 = g.offsets[e], m1 = g.offsets[e + 1];
    if (m1 > m0) quant_cols(x.data() + m0 * D, m1 - m0, D, qc.data() + m0 * D, o.s_cols.data() + m0 / kBlock * D);
  }
  o.q_cols_t.resize(D * used);
  for (int64_t m = 0; m < used; ++m)
    for (int64_t d = 0; d < D; ++d) o.q_cols_t[d * used + m] = qc[m * D + d];
  return o;
}

// 128-token column blocks of FP8 blockwise as the oracle defines them (quant.cpp: 128x1 per column).
void fp8_blockwise_quantize_cols(const float* x, int64_t rows, int64_t cols, uint8_t* q, float* s_BC) {
  for (int64_t b = 0; b * 128 < rows; ++b)
    for (int64_t c = 0; c < cols; ++c) {
      float amax = 0;
      const int64_t r1 = std::min<int64_t>(rows, b * 128 + 128);
      for (int64_t r = b * 128; r < r1; ++r) amax = nm::amax_nan(amax, x[r * cols + c]);
      s_BC[b * cols + c] = nm::fp8_blockwise_scale(amax);
      const float m = nm::fp8_blockwise_multiplier(amax);
      for (int64_t r = b * 128; r < r1; ++r) q[r * cols + c] = nm::fp8_blockwise_quantize_value(x[r * cols + c], m);
    }
}

template <class Scale, int kBlock, class Launch, class Oracle>
void check_rows_cols(const std::vector<int32_t>& counts, int64_t D, int64_t spare_rows, uint64_t seed, Launch launch,
                     Oracle oracle, bool scales_kblock_major) {
  const Groups g = make_groups(counts, kBlock);
  const int64_t used = g.offsets.back(), cap = used + spare_rows;
  HostBf16 h = random_bf16(cap, D, seed);
  if (counts[0] >= 10 && D >= 256) add_crafted_rows(h);
  // Padding rows hold garbage (NaN): the kernel must not read them.
  for (size_t e = 0; e < counts.size(); ++e)
    for (int64_t r = g.offsets[e] + counts[e]; r < g.offsets[e + 1]; ++r)
      for (int64_t d = 0; d < D; ++d) h.set(r * D + d, std::nanf(""));
  const Oriented<Scale> o = oracle(h, g);
  DeviceBuffer<uint16_t> dx(h.bits);
  DeviceBuffer<int32_t> dcounts(g.counts), doffsets(g.offsets);
  DeviceBuffer<uint8_t> dq(cap * D), dqt(D * cap);
  DeviceBuffer<Scale> ds(cap * D / kBlock), dst(cap / kBlock * D);
  dq.poison(kPoison);
  dqt.poison(kPoison);
  ds.poison(kPoison);
  dst.poison(kPoison);
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(counts.size())};
  // Row scales: natural [cap, D/B] or k-block-major [D/B, cap] (FP8 blockwise's); transposed
  // scales: feature-major [D, cap/B] or token-block-major [cap/B, D] (FP8 blockwise's, and every
  // compact bundle's).
  const quant::QuantizedOut<Scale> rows_out =
      scales_kblock_major ? quant::QuantizedOut<Scale>{dq.get(), D, ds.get(), 1, cap}
                          : quant::QuantizedOut<Scale>{dq.get(), D, ds.get(), D / kBlock, 1};
  const quant::QuantizedOut<Scale> cols_out =
      scales_kblock_major ? quant::QuantizedOut<Scale>{dqt.get(), cap, dst.get(), 1, D}
                          : quant::QuantizedOut<Scale>{dqt.get(), cap, dst.get(), cap / kBlock, 1};
  launch(quant::Bf16Matrix{dx.get(), cap, D, D}, groups, rows_out, cols_out);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q = dq.download(), qt = dqt.download();
  const auto s = ds.download(), st = dst.download();
  const int64_t nb = D / kBlock;
  for (int64_t m = 0; m < cap; ++m) {
    for (int64_t d = 0; d < D; ++d) {
      if (m < used) {
        ASSERT_EQ(q[m * D + d], o.q_rows[m * D + d]) << "row " << m << " col " << d;
        ASSERT_EQ(qt[d * cap + m], o.q_cols_t[d * used + m]) << "transposed: feature " << d << " token " << m;
      } else {
        ASSERT_EQ(q[m * D + d], kPoison) << "row " << m << " past the groups was written";
        ASSERT_EQ(qt[d * cap + m], kPoison) << "token " << m << " past the groups was written";
      }
    }
    if (m < used)
      for (int64_t b = 0; b < nb; ++b) {
        const Scale got = scales_kblock_major ? s[b * cap + m] : s[m * nb + b];
        ASSERT_TRUE(same_float(static_cast<float>(got), static_cast<float>(o.s_rows[m * nb + b])) || got == o.s_rows[m * nb + b])
            << "row scale " << m << "," << b;
      }
  }
  for (int64_t b = 0; b < used / kBlock; ++b)
    for (int64_t d = 0; d < D; ++d) {
      const Scale got = scales_kblock_major ? st[b * D + d] : st[d * (cap / kBlock) + b];
      const Scale want = o.s_cols[b * D + d];
      ASSERT_TRUE(got == want || same_float(static_cast<float>(got), static_cast<float>(want)))
          << "column scale: token block " << b << " feature " << d;
    }
}

TEST(QuantizeMxfp8, RowsAndColumnsFromOneReadMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  auto launch = [](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Mxfp8Out& r,
                   const quant::Mxfp8Out& c) { quant::mxfp8_quantize_rows_cols(x, g, r, c, nullptr); };
  auto oracle = [](const HostBf16& h, const Groups& g) {
    return oracle_rows_cols<32, uint8_t>(h, g, nm::mxfp8_quantize_rows, nm::mxfp8_quantize_cols);
  };
  // Ragged and empty experts, one row, rows not multiples of 128, spare capacity past the groups.
  check_rows_cols<uint8_t, 32>({37, 0, 64, 1, 100}, 256, 96, 31, launch, oracle, false);
  check_rows_cols<uint8_t, 32>({300, 5, 0, 129}, 2048, 32, 32, launch, oracle, false);
  check_rows_cols<uint8_t, 32>({1}, 128, 0, 33, launch, oracle, false);
  // The largest group table (1024 groups: 4 KiB, in a ring stage while the first tiles load).
  std::vector<int32_t> many(1024);
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 7 % 41);
  check_rows_cols<uint8_t, 32>(many, 128, 32, 35, launch, oracle, false);
  // Token-block-major scales (the compact bundles' column layout; rows likewise): 4-byte words of
  // four features, D = 160 ending mid-tile.
  check_rows_cols<uint8_t, 32>({37, 0, 64, 1, 100}, 256, 96, 36, launch, oracle, true);
  check_rows_cols<uint8_t, 32>({300, 5, 0, 129}, 160, 32, 37, launch, oracle, true);
}

TEST(QuantizeFp8Blockwise, RowsAndColumnsFromOneReadMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  auto launch = [](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Fp8BlockwiseOut& r,
                   const quant::Fp8BlockwiseOut& c) { quant::fp8_blockwise_quantize_rows_cols(x, g, r, c, nullptr); };
  auto oracle = [](const HostBf16& h, const Groups& g) {
    return oracle_rows_cols<128, float>(h, g, nm::fp8_blockwise_quantize_act, fp8_blockwise_quantize_cols);
  };
  check_rows_cols<float, 128>({37, 0, 200, 1, 100}, 256, 128, 41, launch, oracle, true);
  check_rows_cols<float, 128>({300, 5, 0, 129}, 2048, 0, 42, launch, oracle, true);
}

// MXFP8's scale rule in the FP8-blockwise layouts (the MXFP8 training layer's operands, perf_history
// G152): the oracle quantizes each 1x128 / 128x1 block once at the E8M0 RCEIL code of its amax
// (numeric::mxfp8_quantize_rows_shared / _cols_shared); the crafted rows hold the E8M0 extremes, NaN /
// Inf blocks, E4M3 ties and subnormal results. Every region shape.
TEST(QuantizeMxfp8Shared, RowsAndColumnsFromOneReadMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  auto oracle = [](const HostBf16& h, const Groups& g) {
    return oracle_rows_cols<128, float>(h, g, nm::mxfp8_quantize_rows_shared, nm::mxfp8_quantize_cols_shared);
  };
  for (int lt = -1; lt <= 3; ++lt)
    for (int lf = 0; lt + lf <= 3; ++lf) {
      if (lt < 0 && lf > 0) break;
      SCOPED_TRACE(lt < 0 ? std::string("the launcher's region") : "region 2^" + std::to_string(lt) + " x 2^" + std::to_string(lf));
      auto launch = [&](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Fp8BlockwiseOut& r,
                        const quant::Fp8BlockwiseOut& c) {
        if (lt < 0) quant::fp8_blockwise_quantize_rows_cols(x, g, r, c, nullptr, quant::Fp8BlockScale::kMxfp8Shared);
        else
          quant::fp8_blockwise_quantize_rows_cols_in_regions(x, g, r, c, lt, lf, nullptr,
                                                             quant::Fp8BlockScale::kMxfp8Shared);
      };
      if (lt < 0) {
        check_rows_cols<float, 128>({37, 0, 200, 1, 100}, 256, 128, 601, launch, oracle, true);
        check_rows_cols<float, 128>({300, 5, 0, 129}, 2048, 0, 602, launch, oracle, true);
      } else {
        check_rows_cols<float, 128>({37, 0, 300, 1, 100, 129}, 1152, 128, 603 + lt * 4 + lf, launch, oracle, true);
      }
      if (HasFatalFailure()) return;
    }
}

// ---- MXFP8 columns back to BF16 rows (the BF16 WGRAD's operand) --------------------------------------

bool bf16_is_nan(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

// mxfp8_dequantize_columns of column data qt [D, q_stride] (tokens contiguous) with scales at
// st[d * srs + (m / 32) * sbs] against the host: a real row's element is
// float_to_bf16(mxfp8_dequantize_value(q, s)) bit for bit (any NaN for a NaN), a padding row +0,
// rows past the groups and the output rows' padding columns untouched. exact: the BF16 values must
// also equal the FP32 products (docs/formats.md: every code the quantizer writes from BF16 input).
struct DequantizedKinds {
  int64_t nans = 0, infs = 0, zeros = 0;  // real elements that are NaN, +-Inf, +-0
};

DequantizedKinds check_dequantize_columns(const Groups& g, int64_t cap, int64_t D, const std::vector<uint8_t>& qt,
                                          int64_t q_stride, const std::vector<uint8_t>& st, int64_t srs, int64_t sbs,
                                          bool exact) {
  const int64_t used = g.offsets.back(), y_stride = D + 8;
  DeviceBuffer<uint8_t> dqt(qt), dst(st);
  DeviceBuffer<int32_t> dcounts(g.counts), doffsets(g.offsets);
  DeviceBuffer<uint16_t> dy(cap * y_stride);
  dy.poison(kPoison);
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(g.counts.size())};
  quant::mxfp8_dequantize_columns({dqt.get(), q_stride, dst.get(), srs, sbs}, groups, {dy.get(), cap, D, y_stride}, nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto y = dy.download();
  std::vector<bool> real(cap, false);
  for (size_t e = 0; e < g.counts.size(); ++e)
    for (int64_t r = 0; r < g.counts[e]; ++r) real[g.offsets[e] + r] = true;
  const uint16_t poison16 = kPoison * 0x0101;
  DequantizedKinds kinds;
  for (int64_t m = 0; m < cap; ++m)
    for (int64_t d = 0; d < y_stride; ++d) {
      const uint16_t got = y[m * y_stride + d];
      if (m >= used || d >= D) {
        EXPECT_EQ(got, poison16) << "token " << m << " feature " << d << " was written";
        if (got != poison16) return kinds;
        continue;
      }
      if (!real[m]) {
        EXPECT_EQ(got, 0u) << "padding token " << m << " feature " << d;
        if (got != 0u) return kinds;
        continue;
      }
      const uint8_t q = qt[d * q_stride + m], sc = st[d * srs + (m / 32) * sbs];
      const float v = nm::mxfp8_dequantize_value(q, sc);
      const uint16_t want = nm::float_to_bf16(v).bits;
      const bool same = got == want || (std::isnan(v) && bf16_is_nan(got));
      EXPECT_TRUE(same) << "token " << m << " feature " << d << ": q 0x" << std::hex << int(q) << " scale 0x" << int(sc)
                        << " gave 0x" << got << ", want 0x" << want;
      if (!same) return kinds;
      if (exact && !std::isnan(v)) {
        EXPECT_EQ(nm::float_bits(nm::bf16_to_float(nm::bf16_t{got})), nm::float_bits(v)) << "inexact: " << m << "," << d;
        if (nm::float_bits(nm::bf16_to_float(nm::bf16_t{got})) != nm::float_bits(v)) return kinds;
      }
      kinds.nans += std::isnan(v);
      kinds.infs += std::isinf(v);
      kinds.zeros += (got & 0x7fffu) == 0;
    }
  return kinds;
}

// The quantizer's own column output (ragged groups, padding rows holding NaN that the quantizer
// zeroes, spare capacity past the groups, capacities that are not multiples of 128) dequantized,
// bit for bit against the host, and every value exact. Crafted: a NaN block that holds padding rows
// (its real rows NaN, its padding +0); rows of BF16's maximum, whose blocks get scale 2^120 and whose
// top elements quantize to 256: 2^128, +-Inf in FP32 and in BF16 both (the one inexact case from
// BF16 input); and where the first expert has 64 rows, feature blocks along tokens 32..63 that are
// all zero, all BF16 subnormals (E8M0 byte 0: products down to 2^-133), E4M3 subnormal codes.
TEST(QuantizeMxfp8, DequantizedColumnsMatchTheHostBitForBit) {
  DMOE_REQUIRE_SM90();
  struct Case {
    std::vector<int32_t> counts;
    int64_t D, spare;
  };
  std::vector<int32_t> many(1024);
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 7 % 41);
  for (const Case& c : {Case{{37, 0, 64, 1, 100}, 256, 32}, Case{{300, 5, 0, 129}, 2080, 64}, Case{{1}, 160, 0},
                        Case{{40, 96, 33}, 1184, 96}, Case{many, 128, 32}}) {
    const Groups g = make_groups(c.counts, 32);
    const int64_t used = g.offsets.back(), cap = used + c.spare, D = c.D;
    SCOPED_TRACE("D=" + std::to_string(D) + " capacity=" + std::to_string(cap) + " groups=" + std::to_string(c.counts.size()));
    HostBf16 h = random_bf16(cap, D, 131 + D + cap);
    const bool crafted = c.counts[0] >= 37 && D >= 256;
    if (crafted) {
      add_crafted_rows(h);
      for (int64_t d = 0; d < D; ++d) h.set(10 * D + d, nm::bf16_to_float(nm::bf16_t{static_cast<uint16_t>(d % 2 ? 0xff7f : 0x7f7f)}));
      h.set(33 * D + 7, std::nanf(""));  // block (feature 7, tokens 32..63): with 37 rows, 37..63 are padding
    }
    if (c.counts[0] >= 64 && D >= 256)
      for (int64_t m = 32; m < 64; ++m) {
        h.set(m * D + 100, 0.0f);
        h.set(m * D + 101, std::ldexp(static_cast<float>(m % 7 + 1), -133));
        h.set(m * D + 102, m == 32 ? 1000.0f : std::ldexp(1.0f, -12));
      }
    for (size_t e = 0; e < c.counts.size(); ++e)
      for (int64_t r = g.offsets[e] + c.counts[e]; r < g.offsets[e + 1]; ++r)
        for (int64_t d = 0; d < D; ++d) h.set(r * D + d, std::nanf(""));
    DeviceBuffer<uint16_t> dx(h.bits);
    DeviceBuffer<int32_t> dcounts(g.counts), doffsets(g.offsets);
    const int64_t q_stride = (cap + 15) / 16 * 16 + 16, nb = cap / 32;
    DeviceBuffer<uint8_t> dqt(D * q_stride), dst(D * nb);
    dqt.poison(0);  // bytes the quantizer does not write are read by nobody
    dst.poison(0);
    quant::mxfp8_quantize_rows_cols({dx.get(), cap, D, D}, {dcounts.get(), doffsets.get(), static_cast<int32_t>(c.counts.size())},
                                    quant::Mxfp8Out{}, {dqt.get(), q_stride, dst.get(), nb, 1}, nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto qt = dqt.download(), st = dst.download();
    if (crafted) {
      EXPECT_EQ(st[7 * nb + 1], 0xff) << "the NaN block";
      EXPECT_EQ(st[0 * nb + 0], 0xf7) << "feature 0's first block holds BF16's maximum: scale 2^120";
      EXPECT_EQ(qt[0 * q_stride + 10], 0x78) << "BF16's maximum quantizes to 256";
    }
    if (c.counts[0] >= 64 && D >= 256) {
      EXPECT_EQ(st[100 * nb + 1], 0x00) << "all zero";
      EXPECT_EQ(st[101 * nb + 1], 0x00) << "BF16 subnormals";
    }
    const DequantizedKinds kinds = check_dequantize_columns(g, cap, D, qt, q_stride, st, nb, 1, true);
    if (HasFailure()) return;
    if (crafted) {
      EXPECT_GT(kinds.nans, 0);
      EXPECT_GT(kinds.infs, 0);
    }
  }
}

// Any bytes: every E4M3 code (NaN codes, -0, subnormals) under every E8M0 code (0x00: products down
// to 2^-136, BF16-subnormal and rounded; 0xFE: products up to 448 * 2^127, +-Inf; 0xFF: NaN), plus an
// all-zero block under scale 0x00 and a NaN-scale block over padding rows; natural scales and a
// block-major layout (one scale per lane), data rows longer than the capacity.
TEST(QuantizeMxfp8, DequantizedColumnsOfAnyBytesMatchTheHost) {
  DMOE_REQUIRE_SM90();
  const Groups g = make_groups({45, 0, 128, 7, 61}, 32);
  const int64_t used = g.offsets.back(), cap = used + 64, D = 288, q_stride = cap + 48, nb = cap / 32;
  reference::Rng rng(141);
  std::vector<uint8_t> qt(D * q_stride);
  for (auto& b : qt) b = static_cast<uint8_t>(rng.below(256));
  std::vector<uint8_t> natural(D * nb);
  for (auto& b : natural) b = static_cast<uint8_t>(rng.below(256));
  for (int64_t d = 0; d < 8; ++d) natural[d * nb + 0] = static_cast<uint8_t>(d < 4 ? d : 0xfa + d);  // 0, 1, 2, 3, 0xFE, 0xFF, ...
  for (int64_t m = 0; m < 32; ++m) qt[0 * q_stride + m] = m % 2 ? 0x80 : 0x00;                        // zeros under scale 0x00
  natural[9 * nb + 1] = 0xff;  // tokens 32..63: rows 45..63 are padding (+0), 32..44 real (NaN)
  SCOPED_TRACE("natural scales");
  const DequantizedKinds kinds = check_dequantize_columns(g, cap, D, qt, q_stride, natural, nb, 1, false);
  if (HasFailure()) return;
  EXPECT_GT(kinds.nans, 0);
  EXPECT_GT(kinds.infs, 0);
  EXPECT_GT(kinds.zeros, 0);
  std::vector<uint8_t> block_major(nb * D);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t b = 0; b < nb; ++b) block_major[b * D + d] = natural[d * nb + b];
  SCOPED_TRACE("block-major scales");
  check_dequantize_columns(g, cap, D, qt, q_stride, block_major, 1, D, false);
}

// Every CTA region shape (up to 8 tiles, tokens x features), over ragged groups whose tile grid the
// regions cover partly, with MXFP8 scale rows that are (36 bytes) and are not (37) whole words.
TEST(QuantizeMxfp8, RowsAndColumnsMatchTheOracleInEveryRegionShape) {
  DMOE_REQUIRE_SM90();
  auto oracle = [](const HostBf16& h, const Groups& g) {
    return oracle_rows_cols<32, uint8_t>(h, g, nm::mxfp8_quantize_rows, nm::mxfp8_quantize_cols);
  };
  for (int64_t D : {1184, 1152})
    for (int lt = 0; lt <= 3; ++lt)
      for (int lf = 0; lt + lf <= 3; ++lf) {
        SCOPED_TRACE("D=" + std::to_string(D) + " region 2^" + std::to_string(lt) + " x 2^" + std::to_string(lf));
        auto launch = [&](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Mxfp8Out& r,
                          const quant::Mxfp8Out& c) { quant::mxfp8_quantize_rows_cols_in_regions(x, g, r, c, lt, lf, nullptr); };
        check_rows_cols<uint8_t, 32>({37, 0, 300, 1, 100, 129}, D, 64, 34 + lt * 4 + lf, launch, oracle, false);
        if (HasFatalFailure()) return;
      }
}

TEST(QuantizeFp8Blockwise, RowsAndColumnsMatchTheOracleInEveryRegionShape) {
  DMOE_REQUIRE_SM90();
  auto oracle = [](const HostBf16& h, const Groups& g) {
    return oracle_rows_cols<128, float>(h, g, nm::fp8_blockwise_quantize_act, fp8_blockwise_quantize_cols);
  };
  for (int lt = 0; lt <= 3; ++lt)
    for (int lf = 0; lt + lf <= 3; ++lf) {
      SCOPED_TRACE("region 2^" + std::to_string(lt) + " x 2^" + std::to_string(lf));
      auto launch = [&](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Fp8BlockwiseOut& r,
                        const quant::Fp8BlockwiseOut& c) {
        quant::fp8_blockwise_quantize_rows_cols_in_regions(x, g, r, c, lt, lf, nullptr);
      };
      check_rows_cols<float, 128>({37, 0, 300, 1, 100, 129}, 1152, 128, 43 + lt * 4 + lf, launch, oracle, true);
      if (HasFatalFailure()) return;
    }
}

// ---- gathered rows, compact column bundles -------------------------------------------------------------

// Expert-major rows x [cap, D] twice: as a contiguous buffer, whose padding rows and capacity past
// the groups hold random nonzero garbage (the quantizer masks the one and leaves the other alone),
// and as a row-pointer table (Bf16Matrix::row_ptrs) into a second buffer that holds the real rows
// in a shuffled order, with a wider row stride and NaN rows and gaps nobody points at. Padding rows
// point nowhere (nullptr); the entries past the groups hold an unmapped address: a read of one faults.
struct GatheredInput {
  Groups g;
  int64_t cap = 0, D = 0;
  DeviceBuffer<uint16_t> contiguous, shuffled;
  DeviceBuffer<uint64_t> table;  // const void* per row
  quant::Bf16Matrix x() const { return {contiguous.get(), cap, D, D}; }
  quant::Bf16Matrix gathered() const {
    return {nullptr, cap, D, 0, reinterpret_cast<const void* const*>(table.get())};
  }
  quant::RowGroups groups(const DeviceBuffer<int32_t>& counts, const DeviceBuffer<int32_t>& offsets) const {
    return {counts.get(), offsets.get(), static_cast<int32_t>(g.counts.size())};
  }
};

GatheredInput make_gathered_input(const std::vector<int32_t>& counts, int32_t align, int64_t D, int64_t spare,
                                  uint64_t seed) {
  GatheredInput in;
  in.g = make_groups(counts, align);
  const int64_t used = in.g.offsets.back();
  in.cap = used + spare;
  in.D = D;
  HostBf16 h = random_bf16(in.cap, D, seed);
  if (!counts.empty() && counts[0] >= 10 && D >= 256) add_crafted_rows(h);
  const int64_t stride = D + 24, src_rows = used + 5;  // rows stay 16-byte aligned (D % 32 == 0)
  std::vector<int64_t> slot(src_rows);
  for (int64_t i = 0; i < src_rows; ++i) slot[i] = i;
  reference::Rng rng(seed + 1);
  for (int64_t i = src_rows - 1; i > 0; --i) std::swap(slot[i], slot[rng.below(i + 1)]);
  std::vector<uint16_t> src(src_rows * stride, 0x7fc0);
  in.contiguous = DeviceBuffer<uint16_t>(h.bits);
  in.shuffled = DeviceBuffer<uint16_t>(src.size());
  std::vector<uint64_t> table(in.cap, 0);
  for (size_t e = 0; e < counts.size(); ++e)
    for (int64_t m = in.g.offsets[e]; m < in.g.offsets[e] + counts[e]; ++m) {
      std::memcpy(&src[slot[m] * stride], &h.bits[m * D], D * sizeof(uint16_t));
      table[m] = reinterpret_cast<uint64_t>(in.shuffled.get() + slot[m] * stride);
    }
  for (int64_t m = used; m < in.cap; ++m) table[m] = 0x10;  // unmapped
  in.shuffled.upload(src);
  in.table = DeviceBuffer<uint64_t>(table);
  return in;
}

// Scaled rows (Bf16Matrix::row_scales, the block-scaled backward's grad_h3 = score * grad_out): a
// score per row -- random, with NaN (a -1 route's row: +0), 0 and -1 among them; garbage (NaN, 3e38)
// on padding rows, which the masking must never let through -- and the contiguous rows scaled on the
// host to what the quantizer must read, bf16_rne(score * value). Returns the scores.
std::vector<float> scale_contiguous_rows(GatheredInput& in, uint64_t seed) {
  std::vector<uint16_t> bits = in.contiguous.download();
  std::vector<float> scores(in.cap);
  reference::Rng rng(seed);
  std::vector<bool> real(in.cap, false);
  for (size_t e = 0; e < in.g.counts.size(); ++e)
    for (int64_t m = in.g.offsets[e]; m < in.g.offsets[e] + in.g.counts[e]; ++m) real[m] = true;
  for (int64_t m = 0; m < in.cap; ++m) {
    if (!real[m]) {
      scores[m] = m % 2 ? std::nanf("") : 3e38f;
      continue;
    }
    const uint64_t kind = rng.below(16);
    scores[m] = kind == 0 ? std::nanf("") : kind == 1 ? 0.0f : kind == 2 ? -1.0f
              : static_cast<float>(rng.uniform(-2, 2)) * std::ldexp(1.0f, static_cast<int>(rng.below(9)) - 4);
    for (int64_t c = 0; c < in.D; ++c) {
      uint16_t& b = bits[m * in.D + c];
      b = scores[m] != scores[m] ? uint16_t{0} : nm::float_to_bf16(scores[m] * nm::bf16_to_float(nm::bf16_t{b})).bits;
    }
  }
  in.contiguous.upload(bits);
  return scores;
}

// launch(x, groups, rows, cols) on the contiguous x and on its gathered twin (`scaled`: the twin with
// row scores, the contiguous rows scaled on the host: scale_contiguous_rows), into outputs poisoned
// alike (the layouts of check_rows_cols): every byte of every output, the untouched ones included,
// must agree.
template <class Scale, int kBlock, class Launch>
void check_gathered_equals_contiguous(const std::vector<int32_t>& counts, int64_t D, int64_t spare, uint64_t seed,
                                      bool scales_kblock_major, Launch launch, bool scaled = false) {
  GatheredInput in = make_gathered_input(counts, kBlock, D, spare, seed);
  const int64_t cap = in.cap;
  SCOPED_TRACE("D=" + std::to_string(D) + " capacity=" + std::to_string(cap) + " groups=" +
               std::to_string(counts.size()) + (scaled ? " scaled" : ""));
  DeviceBuffer<int32_t> dcounts(in.g.counts), doffsets(in.g.offsets);
  quant::Bf16Matrix gathered = in.gathered();
  DeviceBuffer<float> dscores(scaled ? scale_contiguous_rows(in, seed + 7) : std::vector<float>(1));
  if (scaled) gathered.row_scales = dscores.get();
  struct Outputs {
    std::vector<uint8_t> q, qt;
    std::vector<Scale> s, st;
  };
  auto run = [&](const quant::Bf16Matrix& x) {
    DeviceBuffer<uint8_t> dq(cap * D), dqt(D * cap);
    DeviceBuffer<Scale> ds(cap * D / kBlock), dst(cap / kBlock * D);
    dq.poison(kPoison);
    dqt.poison(kPoison);
    ds.poison(kPoison);
    dst.poison(kPoison);
    const quant::QuantizedOut<Scale> rows_out =
        scales_kblock_major ? quant::QuantizedOut<Scale>{dq.get(), D, ds.get(), 1, cap}
                            : quant::QuantizedOut<Scale>{dq.get(), D, ds.get(), D / kBlock, 1};
    const quant::QuantizedOut<Scale> cols_out =
        scales_kblock_major ? quant::QuantizedOut<Scale>{dqt.get(), cap, dst.get(), 1, D}
                            : quant::QuantizedOut<Scale>{dqt.get(), cap, dst.get(), cap / kBlock, 1};
    launch(x, in.groups(dcounts, doffsets), rows_out, cols_out);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    return Outputs{dq.download(), dqt.download(), ds.download(), dst.download()};
  };
  const Outputs want = run(in.x()), got = run(gathered);
  EXPECT_EQ(first_difference(got.q, want.q), -1) << "row data";
  EXPECT_EQ(first_difference(got.s, want.s), -1) << "row scales";
  EXPECT_EQ(first_difference(got.qt, want.qt), -1) << "transposed data";
  EXPECT_EQ(first_difference(got.st, want.st), -1) << "column scales";
}

// Ragged and empty experts, capacities that are not multiples of 128 (320, 544), spare capacity
// past the groups (table entries that fault if read), one row, an all-empty batch, 1024 groups.
TEST(QuantizeMxfp8Gathered, RowsAndColumnsEqualTheContiguousRowsBitForBit) {
  DMOE_REQUIRE_SM90();
  auto launch = [](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Mxfp8Out& r,
                   const quant::Mxfp8Out& c) { quant::mxfp8_quantize_rows_cols(x, g, r, c, nullptr); };
  check_gathered_equals_contiguous<uint8_t, 32>({37, 0, 64, 1, 100}, 256, 32, 201, false, launch);
  check_gathered_equals_contiguous<uint8_t, 32>({300, 5, 0, 129}, 2080, 32, 202, false, launch);
  check_gathered_equals_contiguous<uint8_t, 32>({1}, 128, 0, 203, false, launch);
  check_gathered_equals_contiguous<uint8_t, 32>({0, 0}, 160, 64, 204, false, launch);
  std::vector<int32_t> many(1024);
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 7 % 41);
  check_gathered_equals_contiguous<uint8_t, 32>(many, 128, 32, 205, false, launch);
}

// Every CTA region shape: the row pointers of a region's later token tiles.
TEST(QuantizeMxfp8Gathered, RowsAndColumnsEqualTheContiguousRowsInEveryRegionShape) {
  DMOE_REQUIRE_SM90();
  for (int lt = 0; lt <= 3; ++lt)
    for (int lf = 0; lt + lf <= 3; ++lf) {
      SCOPED_TRACE("region 2^" + std::to_string(lt) + " x 2^" + std::to_string(lf));
      auto launch = [&](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Mxfp8Out& r,
                        const quant::Mxfp8Out& c) { quant::mxfp8_quantize_rows_cols_in_regions(x, g, r, c, lt, lf, nullptr); };
      check_gathered_equals_contiguous<uint8_t, 32>({37, 0, 300, 1, 100, 129}, 1184, 64, 211 + lt * 4 + lf, false, launch);
      if (HasFailure()) return;
    }
}

// Inference's source quantization: every source row quantized once into a packed row ([D codes |
// D / block scales] at a 2D-byte stride, as in a dispatch window), then the routed rows gathered
// from the packed rows into the row bundle. The bundle equals, byte for byte, the rows output of the
// rows+cols quantizer on the contiguous expert-major rows (groups padded to 32 rows, no column
// output), padding rows included; rows past the groups keep their poison in both, and their table
// entries (unmapped addresses) are never read. The real rows also equal the plain row quantizer's.
struct Mxfp8Packed {
  using Scale = uint8_t;
  static constexpr int kBlock = 32;
  static constexpr bool kBlockMajor = false;  // row-major scales [cap, D / 32]
  static quant::Mxfp8Out packed(void* base, int64_t stride, int64_t D) {
    return quant::mxfp8_packed_rows_out(base, stride, D);
  }
  static void rows(const quant::Bf16Matrix& x, const quant::Mxfp8Out& o) { quant::mxfp8_quantize_rows(x, o, nullptr); }
  static void rows_cols(const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Mxfp8Out& o) {
    quant::mxfp8_quantize_rows_cols(x, g, o, {}, nullptr);
  }
  static void gather(const void* const* t, const quant::RowGroups& g, int64_t cap, int64_t D, const quant::Mxfp8Out& o) {
    quant::mxfp8_gather_packed_rows(t, g, cap, D, o, nullptr);
  }
};
struct Fp8BlockwisePacked {
  using Scale = float;
  static constexpr int kBlock = 128;
  static constexpr bool kBlockMajor = true;  // the GEMMs' k-block-major grid [D / 128, cap]
  static quant::Fp8BlockwiseOut packed(void* base, int64_t stride, int64_t D) {
    return quant::fp8_blockwise_packed_rows_out(base, stride, D);
  }
  static void rows(const quant::Bf16Matrix& x, const quant::Fp8BlockwiseOut& o) {
    quant::fp8_blockwise_quantize_rows(x, o, nullptr);
  }
  static void rows_cols(const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Fp8BlockwiseOut& o) {
    quant::fp8_blockwise_quantize_rows_cols(x, g, o, {}, nullptr);
  }
  static void gather(const void* const* t, const quant::RowGroups& g, int64_t cap, int64_t D,
                     const quant::Fp8BlockwiseOut& o) {
    quant::fp8_blockwise_gather_packed_rows(t, g, cap, D, o, nullptr);
  }
};

// Scales compare bitwise, except that any two FP32 NaNs are the same scale: the row and rows+cols
// quantizers write a NaN block's scale with different payloads.
bool same_scale(uint8_t a, uint8_t b) { return a == b; }
bool same_scale(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0 || (std::isnan(a) && std::isnan(b)); }
template <class Scale>
int64_t first_scale_difference(const std::vector<Scale>& a, const std::vector<Scale>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (!same_scale(a[i], b[i])) return static_cast<int64_t>(i);
  return -1;
}

template <class Fmt>
void check_gather_packed_rows(const std::vector<int32_t>& counts, int64_t D, int64_t spare, uint64_t seed) {
  using Scale = typename Fmt::Scale;
  const GatheredInput in = make_gathered_input(counts, 32, D, spare, seed);
  const int64_t cap = in.cap, used = in.g.offsets.back(), nb = D / Fmt::kBlock;
  SCOPED_TRACE("D=" + std::to_string(D) + " capacity=" + std::to_string(cap) + " groups=" + std::to_string(counts.size()));
  // The shuffled source rows (stride D + 24 elements, used + 5 rows) -> packed rows.
  const int64_t src_stride = D + 24, src_rows = used + 5, packed_stride = 2 * D;
  DeviceBuffer<uint8_t> packed(src_rows * packed_stride);
  packed.poison(kPoison);
  Fmt::rows({in.shuffled.get(), src_rows, D, src_stride}, Fmt::packed(packed.get(), packed_stride, D));
  // The same table, pointing at the packed twin of each source row.
  std::vector<uint64_t> table = in.table.download();
  const auto src_base = reinterpret_cast<uint64_t>(in.shuffled.get());
  for (int64_t m = 0; m < used; ++m)
    if (table[m] != 0) {
      const uint64_t slot = (table[m] - src_base) / (src_stride * sizeof(uint16_t));
      table[m] = reinterpret_cast<uint64_t>(packed.get() + slot * packed_stride);
    }
  DeviceBuffer<uint64_t> dtable(table);
  DeviceBuffer<int32_t> dcounts(in.g.counts), doffsets(in.g.offsets);
  auto bundle = [&](DeviceBuffer<uint8_t>& q, DeviceBuffer<Scale>& sc) {
    q.poison(kPoison);
    sc.poison(kPoison);
    return Fmt::kBlockMajor ? quant::QuantizedOut<Scale>{q.get(), D, sc.get(), 1, cap}
                            : quant::QuantizedOut<Scale>{q.get(), D, sc.get(), nb, 1};
  };
  DeviceBuffer<uint8_t> q(cap * D), q_want(cap * D), q_plain(cap * D);
  DeviceBuffer<Scale> sc(cap * nb), sc_want(cap * nb), sc_plain(cap * nb);
  Fmt::gather(reinterpret_cast<const void* const*>(dtable.get()), in.groups(dcounts, doffsets), cap, D,
              bundle(q, sc));
  Fmt::rows_cols(in.x(), in.groups(dcounts, doffsets), bundle(q_want, sc_want));
  Fmt::rows(in.x(), bundle(q_plain, sc_plain));
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(first_difference(q.download(), q_want.download()), -1) << "codes";
  EXPECT_EQ(first_scale_difference(sc.download(), sc_want.download()), -1) << "scales";
  const auto got_q = q.download(), plain_q = q_plain.download();
  const auto got_s = sc.download(), plain_s = sc_plain.download();
  auto scale_at = [&](int64_t m, int64_t b) { return Fmt::kBlockMajor ? b * cap + m : m * nb + b; };
  for (size_t e = 0; e < counts.size(); ++e)
    for (int64_t m = in.g.offsets[e]; m < in.g.offsets[e] + counts[e]; ++m) {
      for (int64_t c = 0; c < D; ++c) ASSERT_EQ(got_q[m * D + c], plain_q[m * D + c]) << "row " << m << " code " << c;
      for (int64_t b = 0; b < nb; ++b)
        ASSERT_TRUE(same_scale(got_s[scale_at(m, b)], plain_s[scale_at(m, b)])) << "row " << m << " scale " << b;
    }
  for (int64_t i = used * D; i < cap * D; ++i) ASSERT_EQ(got_q[i], kPoison) << "code past the groups at " << i;
}

template <class Fmt>
void check_gather_packed_rows_cases(uint64_t seed) {
  check_gather_packed_rows<Fmt>({37, 0, 64, 1, 100}, 256, 32, seed);  // crafted rows (NaN, zero, extreme blocks)
  check_gather_packed_rows<Fmt>({300, 5, 0, 129}, 2048, 64, seed + 1);
  check_gather_packed_rows<Fmt>({1}, 7168, 0, seed + 2);
  check_gather_packed_rows<Fmt>({0, 0}, 128, 64, seed + 3);
  std::vector<int32_t> many(1024);
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 5 % 37);
  check_gather_packed_rows<Fmt>(many, 128, 32, seed + 4);
}

TEST(QuantizeMxfp8Gathered, PackedSourceRowsGatherIntoTheRowBundleBitForBit) {
  DMOE_REQUIRE_SM90();
  check_gather_packed_rows_cases<Mxfp8Packed>(231);
}

// FP8 blockwise: FP32 scales into the GEMMs' k-block-major grid; the want side is the rows+cols
// quantizer without columns on 32-row groups.
TEST(QuantizeFp8BlockwiseGathered, PackedSourceRowsGatherIntoTheRowBundleBitForBit) {
  DMOE_REQUIRE_SM90();
  check_gather_packed_rows_cases<Fp8BlockwisePacked>(241);
}

// The FP8-blockwise rows+cols quantizer shares the kernel, and the gather with it.
TEST(QuantizeFp8BlockwiseGathered, RowsAndColumnsEqualTheContiguousRowsBitForBit) {
  DMOE_REQUIRE_SM90();
  auto launch = [](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Fp8BlockwiseOut& r,
                   const quant::Fp8BlockwiseOut& c) { quant::fp8_blockwise_quantize_rows_cols(x, g, r, c, nullptr); };
  check_gathered_equals_contiguous<float, 128>({37, 0, 200, 1, 100}, 256, 128, 221, true, launch);
  check_gathered_equals_contiguous<float, 128>({300, 5, 0, 129}, 1152, 0, 222, true, launch);
  auto shared = [](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Fp8BlockwiseOut& r,
                   const quant::Fp8BlockwiseOut& c) {
    quant::fp8_blockwise_quantize_rows_cols(x, g, r, c, nullptr, quant::Fp8BlockScale::kMxfp8Shared);
  };
  check_gathered_equals_contiguous<float, 128>({300, 5, 0, 129}, 1152, 0, 223, true, shared);
  check_gathered_equals_contiguous<float, 128>({37, 0, 200, 1, 100}, 256, 128, 224, true, shared, /*scaled=*/true);
}

TEST(QuantizeFp8BlockwiseGathered, ScaledRowsEqualTheRowsScaledOnTheHost) {
  DMOE_REQUIRE_SM90();
  auto launch = [](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Fp8BlockwiseOut& r,
                   const quant::Fp8BlockwiseOut& c) { quant::fp8_blockwise_quantize_rows_cols(x, g, r, c, nullptr); };
  check_gathered_equals_contiguous<float, 128>({37, 0, 200, 1, 100}, 256, 128, 231, true, launch, /*scaled=*/true);
  check_gathered_equals_contiguous<float, 128>({300, 5, 0, 129}, 1152, 0, 232, true, launch, /*scaled=*/true);
}

TEST(QuantizeMxfp8Gathered, ScaledRowsEqualTheRowsScaledOnTheHost) {
  DMOE_REQUIRE_SM90();
  auto launch = [](const quant::Bf16Matrix& x, const quant::RowGroups& g, const quant::Mxfp8Out& r,
                   const quant::Mxfp8Out& c) { quant::mxfp8_quantize_rows_cols(x, g, r, c, nullptr); };
  check_gathered_equals_contiguous<uint8_t, 32>({37, 0, 64, 1, 100}, 256, 32, 233, false, launch, /*scaled=*/true);
  check_gathered_equals_contiguous<uint8_t, 32>({300, 5, 0, 129}, 2080, 32, 234, false, launch, /*scaled=*/true);
}

// One rows + columns call, synchronized: the launcher's region pick (log2_rt < 0) or the region
// 2^log2_rt x 2^log2_rf tiles.
void rows_cols_call(const quant::Bf16Matrix& x, const quant::RowGroups& groups, const quant::Mxfp8Out& rows,
                    const quant::Mxfp8Out& cols, int log2_rt, int log2_rf) {
  if (log2_rt < 0) quant::mxfp8_quantize_rows_cols(x, groups, rows, cols, nullptr);
  else quant::mxfp8_quantize_rows_cols_in_regions(x, groups, rows, cols, log2_rt, log2_rf, nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
}
void rows_cols_call(const quant::Bf16Matrix& x, const quant::RowGroups& groups, const quant::Fp8BlockwiseOut& rows,
                    const quant::Fp8BlockwiseOut& cols, int log2_rt, int log2_rf,
                    quant::Fp8BlockScale rule = quant::Fp8BlockScale::kAmaxOver448) {
  if (log2_rt < 0) quant::fp8_blockwise_quantize_rows_cols(x, groups, rows, cols, nullptr, rule);
  else quant::fp8_blockwise_quantize_rows_cols_in_regions(x, groups, rows, cols, log2_rt, log2_rf, nullptr, rule);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
}

// The compact column bundle (C = D features, R = offsets_G1[G] tokens) at a device offset inside a
// sentinel-filled buffer, against the strided columns of the same input (one rows+cols call each,
// the rows output present in both; the compact call reads the gathered twin when `gathered`): q
// [D, R] and scales [R / 32, D] hold the strided bytes of tokens < R, every other byte of the
// buffer -- before the offset, the gap up to the scales' 128-byte boundary, past the bundle -- keeps
// its sentinel, and the rows output equals the strided call's. Then both bundles dequantize
// (mxfp8_dequantize_columns) to the same BF16 rows.
void check_compact_columns(const std::vector<int32_t>& counts, int64_t D, int64_t spare, uint64_t seed, bool gathered,
                           int log2_rt = -1, int log2_rf = -1) {
  const GatheredInput in = make_gathered_input(counts, 32, D, spare, seed);
  const int64_t cap = in.cap, R = in.g.offsets.back(), nb = cap / 32;
  SCOPED_TRACE("D=" + std::to_string(D) + " capacity=" + std::to_string(cap) + " R=" + std::to_string(R) +
               (gathered ? " gathered" : ""));
  DeviceBuffer<int32_t> dcounts(in.g.counts), doffsets(in.g.offsets);
  const quant::RowGroups groups = in.groups(dcounts, doffsets);
  auto quantize = [&](const quant::Bf16Matrix& x, const quant::Mxfp8Out& rows, const quant::Mxfp8Out& cols) {
    rows_cols_call(x, groups, rows, cols, log2_rt, log2_rf);
  };
  // Strided reference.
  DeviceBuffer<uint8_t> dq(cap * D), ds(cap * D / 32), dqt(D * cap), dst(D * nb);
  for (auto* b : {&dq, &ds, &dqt, &dst}) b->poison(kPoison);
  const quant::Mxfp8In strided_in{dqt.get(), cap, dst.get(), nb, 1};
  quantize(in.x(), {dq.get(), D, ds.get(), D / 32, 1}, {dqt.get(), cap, dst.get(), nb, 1});
  // Compact, 384 bytes into the buffer, 256 sentinel bytes past the bundle.
  const int64_t offset = 384, bundle = quant::mxfp8_compact_columns_bytes(D, R);
  const int64_t scales_at = offset + quant::mxfp8_compact_columns_scales_offset(D, R);
  EXPECT_EQ(bundle, (D * R + 127) / 128 * 128 + (D * R / 32 + 127) / 128 * 128) << "Bundles::col(R, D) of MXFP8";
  DeviceBuffer<uint8_t> dbuf(offset + bundle + 256), dq2(cap * D), ds2(cap * D / 32);
  for (auto* b : {&dbuf, &dq2, &ds2}) b->poison(kPoison);
  DeviceBuffer<int64_t> doffset(std::vector<int64_t>{offset});
  quant::Mxfp8Out compact_out;
  compact_out.q = dbuf.get();
  compact_out.compact = true;
  compact_out.q_offset = doffset.get();
  quantize(gathered ? in.gathered() : in.x(), {dq2.get(), D, ds2.get(), D / 32, 1}, compact_out);

  const auto qt = dqt.download(), st = dst.download(), buf = dbuf.download();
  std::vector<uint8_t> want(buf.size(), kPoison);
  for (int64_t d = 0; d < D; ++d) {
    for (int64_t m = 0; m < R; ++m) want[offset + d * R + m] = qt[d * cap + m];
    for (int64_t b = 0; b < R / 32; ++b) want[scales_at + b * D + d] = st[d * nb + b];
  }
  const int64_t at = first_difference(buf, want);
  EXPECT_EQ(at, -1) << "compact bundle byte " << at - offset << " (data: [0, " << D * R << "), scales: from "
                    << scales_at - offset << ", bundle " << bundle << " bytes)";
  EXPECT_EQ(first_difference(dq2.download(), dq.download()), -1) << "row data beside compact columns";
  EXPECT_EQ(first_difference(ds2.download(), ds.download()), -1) << "row scales beside compact columns";
  if (::testing::Test::HasFailure()) return;

  const int64_t y_stride = D + 8;
  DeviceBuffer<uint16_t> y(cap * y_stride), y2(cap * y_stride);
  y.poison(kPoison);
  y2.poison(kPoison);
  quant::Mxfp8In compact_in;
  compact_in.q = dbuf.get();
  compact_in.compact = true;
  compact_in.q_offset = doffset.get();
  quant::mxfp8_dequantize_columns(strided_in, groups, {y.get(), cap, D, y_stride}, nullptr);
  quant::mxfp8_dequantize_columns(compact_in, groups, {y2.get(), cap, D, y_stride}, nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(first_difference(y2.download(), y.download()), -1) << "dequantized from the compact bundle";
}

// R = 288 (a last 128-token tile of one scale block) and 512 / 1024, D not a multiple of 128 (a
// last feature tile of 32 features: scale rows of D bytes end mid-tile), one row, 1024 groups, and
// R = 0 (all experts empty: nothing written anywhere).
TEST(QuantizeMxfp8Compact, ColumnsEqualTheStridedColumnsRelaidOut) {
  DMOE_REQUIRE_SM90();
  check_compact_columns({37, 0, 64, 1, 100}, 256, 32, 301, false);
  check_compact_columns({300, 5, 0, 129}, 2080, 64, 302, false);
  check_compact_columns({1}, 160, 0, 303, false);
  check_compact_columns({0, 0, 0}, 128, 64, 304, false);
  std::vector<int32_t> many(1024);
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 7 % 41);
  check_compact_columns(many, 128, 32, 305, false);
}

TEST(QuantizeMxfp8Compact, ColumnsEqualTheStridedColumnsInEveryRegionShape) {
  DMOE_REQUIRE_SM90();
  for (int lt = 0; lt <= 3; ++lt)
    for (int lf = 0; lt + lf <= 3; ++lf) {
      SCOPED_TRACE("region 2^" + std::to_string(lt) + " x 2^" + std::to_string(lf));
      check_compact_columns({37, 0, 300, 1, 100, 129}, 1184, 64, 311 + lt * 4 + lf, false, lt, lf);
      if (HasFailure()) return;
    }
}

// The MXFP8 row output with k-block-major scale words (QuantizedOut::scale_word_ld: the layer's row
// bundles, which the MXFP8 GEMMs read as OperandScales::a_kblock_words; G86), against the natural
// [cap, D/32] grid of the same call: the same data bytes (rows and columns), each row's code of block
// b at 4 ((b / 4) ld + r) + b % 4 with ld past the capacity, and nothing else written (the partial
// last word when D % 128 != 0, the rows past the groups, the gap up to ld). Regions whose blocks are
// whole 128-column blocks store words, the others bytes (D = 160; D = 2080's last tile).
void check_row_scale_words(const std::vector<int32_t>& counts, int64_t D, int64_t spare, uint64_t seed, bool gathered,
                           int log2_rt = -1, int log2_rf = -1) {
  const GatheredInput in = make_gathered_input(counts, 32, D, spare, seed);
  const int64_t cap = in.cap, nb = D / 32, ld = cap + 32, words = (nb + 3) / 4;
  SCOPED_TRACE("D=" + std::to_string(D) + " capacity=" + std::to_string(cap) + (gathered ? " gathered" : ""));
  DeviceBuffer<int32_t> dcounts(in.g.counts), doffsets(in.g.offsets);
  const quant::RowGroups groups = in.groups(dcounts, doffsets);
  auto quantize = [&](const quant::Mxfp8Out& rows, const quant::Mxfp8Out& cols) {
    rows_cols_call(gathered ? in.gathered() : in.x(), groups, rows, cols, log2_rt, log2_rf);
  };
  DeviceBuffer<uint8_t> dq(cap * D), ds(cap * nb), dqt(D * cap), dst(D * cap / 32);
  DeviceBuffer<uint8_t> dq2(cap * D), dw(words * ld * 4), dqt2(D * cap), dst2(D * cap / 32);
  for (auto* b : {&dq, &ds, &dqt, &dst, &dq2, &dw, &dqt2, &dst2}) b->poison(kPoison);
  quantize({dq.get(), D, ds.get(), nb, 1}, {dqt.get(), cap, dst.get(), 1, D});
  quant::Mxfp8Out word_rows{dq2.get(), D, dw.get(), 0, 0};
  word_rows.scale_word_ld = ld;
  quantize(word_rows, {dqt2.get(), cap, dst2.get(), 1, D});
  EXPECT_EQ(first_difference(dq2.download(), dq.download()), -1) << "row data";
  EXPECT_EQ(first_difference(dqt2.download(), dqt.download()), -1) << "column data";
  EXPECT_EQ(first_difference(dst2.download(), dst.download()), -1) << "column scales";
  const auto natural = ds.download();
  std::vector<uint8_t> want(dw.size(), kPoison);
  const int64_t used = in.g.offsets.back();
  for (int64_t r = 0; r < used; ++r)
    for (int64_t b = 0; b < nb; ++b) want[4 * ((b / 4) * ld + r) + b % 4] = natural[r * nb + b];
  const int64_t at = first_difference(dw.download(), want);
  EXPECT_EQ(at, -1) << "scale word byte " << at << ": k block " << at / 4 / ld << ", row " << at / 4 % ld
                    << ", code " << at % 4;
}

TEST(QuantizeMxfp8, RowScaleWordsEqualTheNaturalGridRelaidOut) {
  DMOE_REQUIRE_SM90();
  check_row_scale_words({37, 0, 64, 1, 100}, 256, 32, 351, false);
  check_row_scale_words({300, 5, 0, 129}, 2080, 64, 352, false);
  check_row_scale_words({45, 96, 33}, 160, 0, 353, true);
  check_row_scale_words({300, 5, 0, 129}, 2080, 64, 354, true);
  for (int lt = 0; lt <= 3; ++lt)
    for (int lf = 0; lt + lf <= 3; ++lf) {
      SCOPED_TRACE("region 2^" + std::to_string(lt) + " x 2^" + std::to_string(lf));
      check_row_scale_words({37, 0, 300, 1, 100, 129}, 1184, 64, 361 + lt * 4 + lf, lt % 2 == 1, lt, lf);
      if (HasFailure()) return;
    }
}

// Any bytes (every E4M3 and E8M0 code, NaN scales over padding rows) dequantize from a compact
// bundle (token-block-major scales: the dequantizer's 16-byte scale copies) as from the strided
// feature-major columns they were laid out from (its plain scale loads), R = 256 and R = 288 (a
// last tile of 32 tokens).
TEST(QuantizeMxfp8Compact, DequantizedAnyBytesEqualTheStridedColumns) {
  DMOE_REQUIRE_SM90();
  for (const std::vector<int32_t>& counts : {std::vector<int32_t>{45, 0, 128, 7, 61}, std::vector<int32_t>{128, 96, 32}}) {
    const Groups g = make_groups(counts, 32);
    const int64_t R = g.offsets.back(), cap = R + 64, D = 288, nb = cap / 32;
    SCOPED_TRACE("R=" + std::to_string(R));
    reference::Rng rng(321 + R);
    std::vector<uint8_t> qt(D * cap), st(D * nb);
    for (auto& b : qt) b = static_cast<uint8_t>(rng.below(256));
    for (auto& b : st) b = static_cast<uint8_t>(rng.below(256));
    const int64_t offset = 128, scales_at = offset + quant::mxfp8_compact_columns_scales_offset(D, R);
    std::vector<uint8_t> buf(offset + quant::mxfp8_compact_columns_bytes(D, R), kPoison);
    for (int64_t d = 0; d < D; ++d) {
      for (int64_t m = 0; m < R; ++m) buf[offset + d * R + m] = qt[d * cap + m];
      for (int64_t b = 0; b < R / 32; ++b) buf[scales_at + b * D + d] = st[d * nb + b];
    }
    DeviceBuffer<uint8_t> dqt(qt), dst(st), dbuf(buf);
    DeviceBuffer<int64_t> doffset(std::vector<int64_t>{offset});
    DeviceBuffer<int32_t> dcounts(g.counts), doffsets(g.offsets);
    const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(counts.size())};
    DeviceBuffer<uint16_t> y(cap * D), y2(cap * D);
    y.poison(kPoison);
    y2.poison(kPoison);
    quant::Mxfp8In compact_in;
    compact_in.q = dbuf.get();
    compact_in.compact = true;
    compact_in.q_offset = doffset.get();
    quant::mxfp8_dequantize_columns({dqt.get(), cap, dst.get(), nb, 1}, groups, {y.get(), cap, D, D}, nullptr);
    quant::mxfp8_dequantize_columns(compact_in, groups, {y2.get(), cap, D, D}, nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto want = y.download();
    EXPECT_EQ(first_difference(y2.download(), want), -1);
    size_t written = 0;
    for (uint16_t v : want) written += v != kPoison * 0x0101;
    EXPECT_GT(written, 0u);
  }
}

// Gathered rows in, compact columns out, in one call (the staged layer's x and grad_h3 quantization).
TEST(QuantizeMxfp8GatheredCompact, RowsAndCompactColumnsOfGatheredRowsInOneCall) {
  DMOE_REQUIRE_SM90();
  check_compact_columns({37, 0, 64, 1, 100}, 256, 32, 401, true);
  check_compact_columns({300, 5, 0, 129}, 2080, 64, 402, true);
  check_compact_columns({0, 0}, 128, 32, 403, true);
  for (int lt = 0; lt <= 3; lt += 3) {
    check_compact_columns({37, 0, 300, 1, 100, 129}, 1184, 64, 404 + lt, true, lt, 0);
    if (HasFailure()) return;
  }
}

// FP8 blockwise's compact bundle, as check_compact_columns (offset 384 into a sentinel buffer,
// against the strided columns of the same input: q [D, R], then the FP32 scales [R / 128, D] at the
// 128-byte boundary, every other byte its sentinel, the rows output unchanged). The FP8-blockwise
// WGRAD reads this bundle where it lies (perf_history G71).
void check_fp8_blockwise_compact_columns(const std::vector<int32_t>& counts, int64_t D, int64_t spare, uint64_t seed,
                                         bool gathered, int log2_rt = -1, int log2_rf = -1,
                                         quant::Fp8BlockScale rule = quant::Fp8BlockScale::kAmaxOver448) {
  const GatheredInput in = make_gathered_input(counts, 128, D, spare, seed);
  const int64_t cap = in.cap, R = in.g.offsets.back(), nb = cap / 128;
  SCOPED_TRACE("D=" + std::to_string(D) + " capacity=" + std::to_string(cap) + " R=" + std::to_string(R) +
               (gathered ? " gathered" : ""));
  DeviceBuffer<int32_t> dcounts(in.g.counts), doffsets(in.g.offsets);
  const quant::RowGroups groups = in.groups(dcounts, doffsets);
  auto quantize = [&](const quant::Bf16Matrix& x, const quant::Fp8BlockwiseOut& rows,
                      const quant::Fp8BlockwiseOut& cols) { rows_cols_call(x, groups, rows, cols, log2_rt, log2_rf, rule); };
  DeviceBuffer<uint8_t> dq(cap * D), dqt(D * cap);
  DeviceBuffer<float> ds(D / 128 * cap), dst(nb * D);
  dq.poison(kPoison);
  dqt.poison(kPoison);
  ds.poison(kPoison);
  dst.poison(kPoison);
  quantize(in.x(), {dq.get(), D, ds.get(), 1, cap}, {dqt.get(), cap, dst.get(), 1, D});
  const int64_t offset = 384, bundle = nm::fp8_blockwise_compact_columns_bytes(D, R);
  const int64_t scales_at = offset + nm::fp8_blockwise_compact_columns_scales_offset(D, R);
  EXPECT_EQ(bundle, quant::mxfp8_compact_columns_bytes(D, R)) << "the planner sizes both formats' bundles alike";
  DeviceBuffer<uint8_t> dbuf(offset + bundle + 256), dq2(cap * D);
  DeviceBuffer<float> ds2(D / 128 * cap);
  dbuf.poison(kPoison);
  dq2.poison(kPoison);
  ds2.poison(kPoison);
  DeviceBuffer<int64_t> doffset(std::vector<int64_t>{offset});
  quant::Fp8BlockwiseOut compact_out;
  compact_out.q = dbuf.get();
  compact_out.compact = true;
  compact_out.q_offset = doffset.get();
  quantize(gathered ? in.gathered() : in.x(), {dq2.get(), D, ds2.get(), 1, cap}, compact_out);

  const auto qt = dqt.download();
  const auto st = dst.download();
  const auto buf = dbuf.download();
  std::vector<uint8_t> want(buf.size(), kPoison);
  for (int64_t d = 0; d < D; ++d)
    for (int64_t m = 0; m < R; ++m) want[offset + d * R + m] = qt[d * cap + m];
  std::memcpy(&want[scales_at], st.data(), R / 128 * D * sizeof(float));
  const int64_t at = first_difference(buf, want);
  EXPECT_EQ(at, -1) << "compact bundle byte " << at - offset << " (data: [0, " << D * R << "), scales: from "
                    << scales_at - offset << ", bundle " << bundle << " bytes)";
  EXPECT_EQ(first_difference(dq2.download(), dq.download()), -1) << "row data beside compact columns";
  EXPECT_EQ(first_difference(ds2.download(), ds.download()), -1) << "row scales beside compact columns";
}

// Ragged and empty experts, spare capacity, one 128-row group, R = 0, 200 groups; every region shape.
TEST(QuantizeFp8BlockwiseCompact, ColumnsEqualTheStridedColumns) {
  DMOE_REQUIRE_SM90();
  check_fp8_blockwise_compact_columns({37, 0, 200, 1, 100}, 256, 128, 501, false);
  check_fp8_blockwise_compact_columns({300, 5, 0, 129}, 1152, 256, 502, true);
  check_fp8_blockwise_compact_columns({1}, 128, 0, 503, false);
  check_fp8_blockwise_compact_columns({0, 0, 0}, 128, 128, 504, true);
  std::vector<int32_t> many(200);
  for (size_t g = 0; g < many.size(); ++g) many[g] = static_cast<int32_t>(g * 7 % 41);
  check_fp8_blockwise_compact_columns(many, 128, 128, 505, true);
  for (int lt = 0; lt <= 3; ++lt)
    for (int lf = 0; lt + lf <= 3; ++lf) {
      SCOPED_TRACE("region 2^" + std::to_string(lt) + " x 2^" + std::to_string(lf));
      check_fp8_blockwise_compact_columns({37, 0, 300, 1, 100, 129}, 1152, 128, 511 + lt * 4 + lf, lt % 2 == 1, lt,
                                          lf);
      if (HasFailure()) return;
    }
  // MXFP8's scale rule (the MXFP8 training layer's saved bundles, G152).
  check_fp8_blockwise_compact_columns({37, 0, 200, 1, 100}, 256, 128, 531, true, -1, -1,
                                      quant::Fp8BlockScale::kMxfp8Shared);
  check_fp8_blockwise_compact_columns({300, 5, 0, 129}, 1152, 256, 532, false, 1, 2,
                                      quant::Fp8BlockScale::kMxfp8Shared);
}

// Where gathered rows and compact bundles are not supported, the launchers say so (host checks,
// before any device work: no GPU needed).
void expect_invalid(const std::function<void()>& f, const std::string& fragment) {
  testing::expect_invalid_argument(f, fragment);
}

// The kernels that zero the padding rows need each group's count: a null counts_G is an argument
// error of the rows + columns quantizers (both formats), the fused SwiGLU backward and the column
// dequantizer, raised before any launch (until session 49 the kernels read through it: an illegal
// address, perf_history G110).
TEST(QuantizeMxfp8, GroupsWithoutCountsAreArgumentErrors) {
  DMOE_REQUIRE_SM90();
  const GatheredInput in = make_gathered_input({64, 32}, 128, 256, 0, 371);
  const int64_t cap = in.cap, D = in.D;
  DeviceBuffer<int32_t> doffsets(in.g.offsets);
  const quant::RowGroups no_counts{nullptr, doffsets.get(), static_cast<int32_t>(in.g.counts.size())};
  DeviceBuffer<uint8_t> q(cap * D), s(cap * D / 32), qt(D * cap), st(D * cap / 32);
  DeviceBuffer<float> sf(cap * D / 128), stf(cap * D / 128);
  DeviceBuffer<uint16_t> y(cap * D), h1(cap * 2 * D), gh2(cap * D);
  const quant::Mxfp8Out mx_rows{q.get(), D, s.get(), D / 32, 1}, mx_cols{qt.get(), cap, st.get(), 1, D};
  expect_invalid([&] { quant::mxfp8_quantize_rows_cols(in.x(), no_counts, mx_rows, mx_cols, nullptr); },
                 "mxfp8_quantize_rows_cols: groups need counts_G");
  expect_invalid(
      [&] {
        quant::fp8_blockwise_quantize_rows_cols(in.x(), no_counts, {q.get(), D, sf.get(), 1, cap},
                                                {qt.get(), cap, stf.get(), 1, D}, nullptr);
      },
      "fp8_blockwise_quantize_rows_cols: groups need counts_G");
  expect_invalid(
      [&] {
        const quant::SwigluBackwardSource src{h1.get(), gh2.get(), cap, D, activation::SwigluParams{}};
        quant::mxfp8_swiglu_backward_quantize(src, no_counts, quant::Mxfp8Out{q.get(), 2 * D, s.get(), 2 * D / 32, 1},
                                              quant::Mxfp8Out{qt.get(), cap, st.get(), 1, 2 * D}, nullptr);
      },
      "mxfp8_swiglu_backward_quantize: groups need counts_G");
  expect_invalid(
      [&] { quant::mxfp8_dequantize_columns({qt.get(), cap, st.get(), 1, D}, no_counts, {y.get(), cap, D, D}, nullptr); },
      "mxfp8_dequantize_columns: groups need counts_G");
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());  // and nothing was launched that faults
}

// Where k-block-major row scale words are not taken, the launchers say so.
TEST(QuantizeMxfp8, RowScaleWordsAreArgumentErrorsElsewhere) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<uint16_t> x(128 * 128);
  DeviceBuffer<uint8_t> q(128 * 128), s(128 * 128);
  DeviceBuffer<int32_t> counts(std::vector<int32_t>{128}), offsets(std::vector<int32_t>{0, 128});
  const quant::RowGroups groups{counts.get(), offsets.get(), 1};
  quant::Mxfp8Out words{q.get(), 128, s.get(), 0, 0};
  words.scale_word_ld = 128;
  expect_invalid([&] { quant::mxfp8_quantize_rows({x.get(), 128, 128, 128}, words, nullptr); },
                 "mxfp8_quantize_rows: k-block-major scale words");
  quant::Mxfp8Out short_ld = words;
  short_ld.scale_word_ld = 64;
  expect_invalid([&] { quant::mxfp8_quantize_rows_cols({x.get(), 128, 128, 128}, groups, short_ld, {}, nullptr); },
                 "scale_word_ld >= the row capacity 128");
  expect_invalid([&] { quant::mxfp8_quantize_rows_cols({x.get(), 128, 128, 128}, groups, {}, words, nullptr); },
                 "scale_word_ld is for the row output");
}

TEST(QuantizeMxfp8Compact, UnsupportedOperandsAreArgumentErrors) {
  auto* p = reinterpret_cast<uint8_t*>(uintptr_t{0x1000});  // never dereferenced: the checks come first
  const void* const* table = reinterpret_cast<const void* const*>(p);
  const int64_t offset_value = 0;
  const int64_t* q_offset = &offset_value;
  const quant::Bf16Matrix x{p, 128, 256, 256}, gathered{nullptr, 128, 256, 0, table};
  const quant::RowGroups groups{reinterpret_cast<const int32_t*>(p), reinterpret_cast<const int32_t*>(p), 2};
  const quant::Mxfp8Out rows{p, 256, p, 8, 1}, cols{p, 128, p, 4, 1};
  quant::Mxfp8Out compact{p};
  compact.compact = true;
  quant::Mxfp8Out rows_compact = rows, cols_offset_only = cols;
  rows_compact.compact = true;
  cols_offset_only.q_offset = q_offset;
  expect_invalid([&] { quant::mxfp8_quantize_rows(gathered, rows, nullptr); }, "mxfp8_quantize_rows: gathered rows");
  expect_invalid([&] { quant::mxfp8_quantize_rows(x, compact, nullptr); }, "mxfp8_quantize_rows: compact");
  expect_invalid([&] { quant::fp8_blockwise_quantize_rows(gathered, {p, 256, nullptr, 1, 128}, nullptr); },
                 "fp8_blockwise_quantize_rows: gathered rows");
  expect_invalid([&] { quant::nvfp4_quantize_rows(gathered, {p, 128, p, 16, p, 4}, nullptr); },
                 "nvfp4_quantize_rows: gathered rows");
  expect_invalid([&] { quant::mxfp8_quantize_rows_cols(x, groups, rows_compact, cols, nullptr); },
                 "mxfp8_quantize_rows_cols: the row output cannot be compact");
  expect_invalid([&] { quant::mxfp8_quantize_rows_cols(x, groups, rows, cols_offset_only, nullptr); },
                 "mxfp8_quantize_rows_cols: q_offset is set but compact is not");
  quant::Fp8BlockwiseOut fp8_compact{p};
  fp8_compact.compact = true;
  expect_invalid([&] { quant::fp8_blockwise_quantize_rows_cols(x, groups, fp8_compact, {}, nullptr); },
                 "fp8_blockwise_quantize_rows_cols: the row output cannot be compact");
  quant::Mxfp8In in_offset_only{p, 128, p, 4, 1};
  in_offset_only.q_offset = q_offset;
  expect_invalid([&] { quant::mxfp8_dequantize_columns(in_offset_only, groups, {p, 128, 256, 256}, nullptr); },
                 "mxfp8_dequantize_columns: q_offset is set but compact is not");
}

// Scaled rows are the rows + columns quantizers' only.
TEST(QuantizeMxfp8, ScaledRowsAreArgumentErrorsElsewhere) {
  DMOE_REQUIRE_SM90();
  DeviceBuffer<uint16_t> x(64 * 128);
  DeviceBuffer<float> scores(64);
  DeviceBuffer<uint8_t> q(64 * 128), s(64 * 4);
  quant::Bf16Matrix m{x.get(), 64, 128, 128};
  m.row_scales = scores.get();
  expect_invalid([&] { quant::mxfp8_quantize_rows(m, quant::Mxfp8Out{q.get(), 128, s.get(), 4, 1}, nullptr); },
                 "mxfp8_quantize_rows: gathered rows (row_ptrs) and scaled rows (row_scales) are not supported");
  expect_invalid([&] { quant::nvfp4_quantize_rows(m, {q.get(), 128, q.get(), 16, q.get(), 4}, nullptr); },
                 "scaled rows (row_scales) are not supported");
}

// ---- weights ---------------------------------------------------------------------------------------

HostBf16 random_weight(int64_t E, int64_t N, int64_t K, uint64_t seed, bool crafted) {
  HostBf16 w = random_bf16(E * N, K, seed);
  if (crafted && N >= 10 && K >= 256) add_crafted_rows(w);  // expert 0's first rows
  return w;
}

// The sixteen 32x32 tile codes of every 128x128 block replaced by their largest (tiles_BB as
// numeric::mxfp8_quantize_tiles writes them; N, K multiples of 128).
std::vector<uint8_t> shared_tile_codes(const std::vector<uint8_t>& tiles_BB, int64_t N, int64_t K) {
  const int64_t nbr = N / 32, nbc = K / 32;
  std::vector<uint8_t> out(tiles_BB.size());
  for (int64_t i = 0; i < nbr; ++i)
    for (int64_t j = 0; j < nbc; ++j) {
      uint8_t top = 0;
      for (int64_t a = i / 4 * 4; a < i / 4 * 4 + 4; ++a)
        for (int64_t b = j / 4 * 4; b < j / 4 * 4 + 4; ++b) top = std::max(top, tiles_BB[a * nbc + b]);
      out[i * nbc + j] = top;
    }
  return out;
}

// MXFP8 training weight tiles by `launch(w, q, fprop_scales, q_t, dgrad_scales)` against the
// oracle's tiles -- with `shared`, the tiles at shared scales per 128x128 block (G151: the codes
// re-rounded by numeric::mxfp8_tiles_at_shared_scales, both grids holding each block's largest code);
// with_t: q_t (else nullptr) must be transpose(q) per expert, byte for byte, and dequantize with the
// DGRAD scales to the transpose of what q does with the FPROP scales.
template <class Launch>
void check_mxfp8_weight_tiles(int64_t E, int64_t N, int64_t K, const HostBf16& w, Launch launch, bool with_t = false,
                              bool shared = false) {
  const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, false, E, N, K);
  DeviceBuffer<uint16_t> dw(w.bits);
  DeviceBuffer<uint8_t> dq(spec.fprop_data.bytes()), dfs(spec.fprop_scale.bytes()), dds(spec.dgrad_scale.bytes());
  DeviceBuffer<uint8_t> dqt(with_t ? spec.dgrad_data.bytes() : 0);
  dq.poison(kPoison);
  dfs.poison(kPoison);
  dds.poison(kPoison);
  if (with_t) dqt.poison(kPoison);
  launch(dw.get(), dq.get(), dfs.get(), with_t ? dqt.get() : nullptr, dds.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto q = dq.download(), fs = dfs.download(), ds = dds.download();
  const int64_t per = N * K, nbr = N / 32, nbc = K / 32;
  for (int64_t e = 0; e < E; ++e) {
    std::vector<uint8_t> rq(per), tiles(nbr * nbc), rows(N * nbc), cols(K * nbr);
    nm::mxfp8_quantize_tiles(w.f.data() + e * per, N, K, rq.data(), tiles.data());
    if (shared) {
      std::vector<uint8_t> sq(per);
      std::vector<float> block_scales((N / 128) * (K / 128));
      nm::mxfp8_tiles_at_shared_scales(rq.data(), tiles.data(), N, K, sq.data(), block_scales.data());
      rq = sq;
      tiles = shared_tile_codes(tiles, N, K);
    }
    nm::mxfp8_tile_scales_to_rows(tiles.data(), N, K, rows.data());
    nm::mxfp8_tile_scales_to_cols(tiles.data(), N, K, cols.data());
    for (int64_t i = 0; i < per; ++i) ASSERT_EQ(q[e * per + i], rq[i]) << "expert " << e << " element " << i;
    for (int64_t i = 0; i < N * nbc; ++i) ASSERT_EQ(fs[e * N * nbc + i], rows[i]) << "FPROP scale " << i;
    for (int64_t i = 0; i < K * nbr; ++i) ASSERT_EQ(ds[e * K * nbr + i], cols[i]) << "DGRAD scale " << i;
  }
  if (!with_t) return;
  const auto qt = dqt.download();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n)
        ASSERT_EQ(qt[(e * K + k) * N + n], q[(e * N + n) * K + k]) << "q_t: expert " << e << " k " << k << " n " << n;
  // The copy with the DGRAD scales dequantizes to transpose of the FPROP view's values (what the
  // DGRAD kernel will read): checked on expert E - 1 through the oracle's row dequantization.
  const int64_t e = E - 1;
  std::vector<float> fwd(per), bwd(per);
  nm::mxfp8_dequantize_rows(q.data() + e * per, fs.data() + e * N * nbc, N, K, fwd.data());
  nm::mxfp8_dequantize_rows(qt.data() + e * per, ds.data() + e * K * nbr, K, N, bwd.data());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) ASSERT_TRUE(same_float(bwd[k * N + n], fwd[n * K + k])) << n << "," << k;
}

// The prepared MXFP8 training weight: the oracle's tiles in fprop_data and both scale layouts -- for
// dims that are multiples of 128 (every layer weight) at shared scales per 128x128 block (the
// FP8-blockwise FPROP's and DGRAD's operands, G151) -- and its own dgrad_data [E, K, N] (upstream shares
// one qdata), fprop_data's bytes transposed; bit for bit. Twice into the same buffers: a refill gives
// the same bytes.
TEST(QuantizeMxfp8, TrainingWeightTilesMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  struct Shape { int64_t E, N, K; };
  for (const Shape& sh : {Shape{2, 96, 160}, Shape{3, 256, 384}, Shape{2, 128, 256}}) {
    SCOPED_TRACE("E=" + std::to_string(sh.E) + " N=" + std::to_string(sh.N) + " K=" + std::to_string(sh.K));
    const HostBf16 w = random_weight(sh.E, sh.N, sh.K, 51 + sh.N, true);
    const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, false, sh.E, sh.N, sh.K);
    ASSERT_TRUE(spec.dgrad_data.present);
    ASSERT_EQ(spec.dgrad_data.shape, (std::vector<int64_t>{sh.E, sh.K, sh.N}));
    check_mxfp8_weight_tiles(
        sh.E, sh.N, sh.K, w,
        [&](const uint16_t* dw, uint8_t* dq, uint8_t* dfs, uint8_t* dqt, uint8_t* dds) {
          for (int rep = 0; rep < 2; ++rep)
            prepare_block_scaled_weight(dw, spec, {dq, dfs, dqt, dds, nullptr, nullptr}, nullptr);
        },
        true, sh.N % 128 == 0 && sh.K % 128 == 0);
    if (HasFatalFailure()) return;
  }
}

// dgrad_data must be a buffer of its own: fprop_data itself, or one overlapping it, is an argument
// error before anything is enqueued.
TEST(QuantizeMxfp8, TrainingWeightRejectsDgradDataSharingFpropData) {
  DMOE_REQUIRE_SM90();
  const int64_t E = 2, N = 64, K = 96;
  const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, false, E, N, K);
  DeviceBuffer<uint16_t> dw(E * N * K);
  dw.poison(0);  // zeros
  DeviceBuffer<uint8_t> dq(spec.fprop_data.bytes() + spec.dgrad_data.bytes()), dfs(spec.fprop_scale.bytes()), dds(spec.dgrad_scale.bytes());
  for (uint8_t* dgrad : {dq.get(), dq.get() + 16 * K, dq.get() + spec.fprop_data.bytes() - 16}) {
    try {
      prepare_block_scaled_weight(dw.get(), spec, {dq.get(), dfs.get(), dgrad, dds.get(), nullptr, nullptr}, nullptr);
      ADD_FAILURE() << "dgrad_data at fprop_data + " << (dgrad - dq.get()) << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidValue);
      EXPECT_NE(std::string(e.what()).find("dgrad_data must be its own buffer"), std::string::npos) << e.what();
    }
  }
  // Right after fprop_data is fine.
  prepare_block_scaled_weight(dw.get(), spec, {dq.get(), dfs.get(), dq.get() + spec.fprop_data.bytes(), dds.get(),
                                               nullptr, nullptr},
                              nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
}

// The transposed copy for DGRAD: odd multiples of 32 (partial 128x128 tiles at both edges) and of
// 128, square and not, a NaN block and the crafted rows in expert 0, through the launcher's region.
TEST(QuantizeMxfp8, TrainingWeightTransposedCopyIsTheSameBytesTransposed) {
  DMOE_REQUIRE_SM90();
  struct Shape { int64_t E, N, K; };
  for (const Shape& sh : {Shape{2, 96, 160}, Shape{3, 384, 640}, Shape{2, 1056, 352}, Shape{4, 288, 288},
                          Shape{2, 32, 1152}, Shape{3, 1152, 32}}) {
    SCOPED_TRACE("E=" + std::to_string(sh.E) + " N=" + std::to_string(sh.N) + " K=" + std::to_string(sh.K));
    HostBf16 w = random_weight(sh.E, sh.N, sh.K, 57 + sh.N + sh.K, true);
    w.set((sh.E - 1) * sh.N * sh.K + (sh.N - 1) * sh.K + sh.K - 3, std::nanf(""));  // the last expert's last tile
    check_mxfp8_weight_tiles(
        sh.E, sh.N, sh.K, w,
        [&](const uint16_t* dw, uint8_t* dq, uint8_t* dfs, uint8_t* dqt, uint8_t* dds) {
          quant::mxfp8_quantize_weight_tiles(dw, sh.E, sh.N, sh.K, dq, dfs, dqt, dds, nullptr);
        },
        true);
    if (HasFatalFailure()) return;
  }
}

// The weight at shared scales per 128x128 block through the launcher (multiples of 128, square and
// not, a NaN block in the last expert's last tile, the crafted rows in expert 0) and in four region
// shapes: both copies and both scale grids.
TEST(QuantizeMxfp8, TrainingWeightAtSharedScalesFollowsTheBlockRule) {
  DMOE_REQUIRE_SM90();
  struct Shape { int64_t E, N, K; };
  for (const Shape& sh : {Shape{2, 256, 384}, Shape{3, 1152, 640}, Shape{2, 128, 1152}}) {
    SCOPED_TRACE("E=" + std::to_string(sh.E) + " N=" + std::to_string(sh.N) + " K=" + std::to_string(sh.K));
    HostBf16 w = random_weight(sh.E, sh.N, sh.K, 61 + sh.N + sh.K, true);
    w.set((sh.E - 1) * sh.N * sh.K + (sh.N - 1) * sh.K + sh.K - 3, std::nanf(""));
    check_mxfp8_weight_tiles(
        sh.E, sh.N, sh.K, w,
        [&](const uint16_t* dw, uint8_t* dq, uint8_t* dfs, uint8_t* dqt, uint8_t* dds) {
          quant::mxfp8_quantize_weight_tiles(dw, sh.E, sh.N, sh.K, dq, dfs, dqt, dds, nullptr, true);
        },
        true, true);
    if (HasFatalFailure()) return;
    for (const std::pair<int, int>& region : {std::pair{0, 0}, std::pair{1, 2}, std::pair{3, 0}, std::pair{2, 3}}) {
      const int ln = region.first, lk = region.second;
      SCOPED_TRACE("region 2^" + std::to_string(ln) + " x 2^" + std::to_string(lk));
      check_mxfp8_weight_tiles(
          sh.E, sh.N, sh.K, w,
          [&](const uint16_t* dw, uint8_t* dq, uint8_t* dfs, uint8_t* dqt, uint8_t* dds) {
            quant::mxfp8_quantize_weight_tiles_in_regions(dw, sh.E, sh.N, sh.K, dq, dfs, dqt, dds, ln, lk, nullptr, true);
          },
          true, true);
      if (HasFatalFailure()) return;
    }
  }
}

// Every CTA region shape (1 .. 8 tiles per side), on weights whose tile grid the regions cover
// partly at the edges, with scale rows that are (40 and 36 bytes) and are not (35 and 33 bytes)
// whole 4-byte words; with and without the transposed copy.
TEST(QuantizeMxfp8, TrainingWeightTilesMatchTheOracleInEveryRegionShape) {
  DMOE_REQUIRE_SM90();
  struct Shape { int64_t E, N, K; };
  for (const Shape& sh : {Shape{1, 1152, 1280}, Shape{2, 1056, 1120}}) {
    const HostBf16 w = random_weight(sh.E, sh.N, sh.K, 71 + sh.N, true);
    for (int log2_rn = 0; log2_rn <= 3; ++log2_rn)
      for (int log2_rk = 0; log2_rk <= 3; ++log2_rk)
        for (bool with_t : {false, true}) {
          SCOPED_TRACE("E=" + std::to_string(sh.E) + " N=" + std::to_string(sh.N) + " K=" + std::to_string(sh.K) +
                       " region 2^" + std::to_string(log2_rn) + " x 2^" + std::to_string(log2_rk) +
                       (with_t ? " with q_t" : ""));
          check_mxfp8_weight_tiles(
              sh.E, sh.N, sh.K, w,
              [&](const uint16_t* dw, uint8_t* dq, uint8_t* dfs, uint8_t* dqt, uint8_t* dds) {
                if (with_t)
                  quant::mxfp8_quantize_weight_tiles_in_regions(dw, sh.E, sh.N, sh.K, dq, dfs, dqt, dds, log2_rn,
                                                                log2_rk, nullptr);
                else
                  quant::mxfp8_quantize_weight_tiles_in_regions(dw, sh.E, sh.N, sh.K, dq, dfs, dds, log2_rn, log2_rk,
                                                                nullptr);
              },
              with_t);
          if (HasFatalFailure()) return;
        }
  }
}

TEST(QuantizeMxfp8, InferenceWeightRowsMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  const int64_t E = 3, N = 96, K = 256;
  const HostBf16 w = random_weight(E, N, K, 61, true);
  const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, true, E, N, K);
  EXPECT_FALSE(spec.dgrad_data.present);
  DeviceBuffer<uint16_t> dw(w.bits);
  DeviceBuffer<uint8_t> dq(spec.fprop_data.bytes()), ds(spec.fprop_scale.bytes());
  dq.poison(kPoison);
  ds.poison(kPoison);
  prepare_block_scaled_weight(dw.get(), spec, {dq.get(), ds.get(), nullptr, nullptr, nullptr, nullptr}, nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint8_t> q(E * N * K), s(E * N * K / 32);
  nm::mxfp8_quantize_rows(w.f.data(), E * N, K, q.data(), s.data());
  EXPECT_EQ(dq.download(), q);
  EXPECT_EQ(ds.download(), s);
}

TEST(QuantizeFp8Blockwise, WeightsAndTransposedCopyMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  const int64_t E = 3, N = 256, K = 384;
  HostBf16 w = random_weight(E, N, K, 71, true);
  w.set(2 * N * K + 130 * K + 300, std::nanf(""));  // one NaN block in expert 2
  for (bool inference : {false, true}) {
    const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kFP8Blockwise, inference, E, N, K);
    DeviceBuffer<uint16_t> dw(w.bits);
    DeviceBuffer<uint8_t> dq(spec.fprop_data.bytes()), dqt(inference ? 0 : spec.dgrad_data.bytes());
    DeviceBuffer<float> ds(spec.fprop_scale.numel()), dst(inference ? 0 : spec.dgrad_scale.numel());
    dq.poison(kPoison);
    ds.poison(kPoison);
    if (!inference) {
      dqt.poison(kPoison);
      dst.poison(kPoison);
    }
    prepare_block_scaled_weight(dw.get(), spec, {dq.get(), ds.get(), dqt.get(), dst.get(), nullptr, nullptr}, nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto q = dq.download();
    const auto s = ds.download();
    const int64_t per = N * K, tn = N / 128, tk = K / 128;
    for (int64_t e = 0; e < E; ++e) {
      std::vector<uint8_t> rq(per);
      std::vector<float> rs(tn * tk);
      nm::fp8_blockwise_quantize_weight(w.f.data() + e * per, N, K, rq.data(), rs.data());
      for (int64_t i = 0; i < per; ++i) ASSERT_EQ(q[e * per + i], rq[i]) << "expert " << e << " element " << i;
      for (int64_t i = 0; i < tn * tk; ++i) ASSERT_TRUE(same_float(s[e * tn * tk + i], rs[i])) << "scale " << i;
    }
    if (inference) continue;
    const auto qt = dqt.download();
    const auto st = dst.download();
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) ASSERT_EQ(qt[e * per + k * N + n], q[e * per + n * K + k]) << e << "," << n << "," << k;
      for (int64_t i = 0; i < tn; ++i)
        for (int64_t j = 0; j < tk; ++j)
          ASSERT_TRUE(same_float(st[(e * tk + j) * tn + i], s[(e * tn + i) * tk + j]));
    }
    EXPECT_TRUE(std::isnan(s[2 * tn * tk + 1 * tk + 2]));
  }
}

TEST(QuantizeFp8Blockwise, CheckpointWeightsArePreparedAsTheyAre) {
  DMOE_REQUIRE_SM90();
  const int64_t E = 2, N = 256, K = 128;
  reference::Rng rng(81);
  std::vector<uint8_t> data(E * N * K);
  for (auto& b : data) b = static_cast<uint8_t>(rng.below(256));
  std::vector<float> scale_inv(E * (N / 128) * (K / 128));
  for (auto& s : scale_inv) s = static_cast<float>(rng.uniform(1e-4, 1.0));
  const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kFP8Blockwise, false, E, N, K);
  DeviceBuffer<uint8_t> ddata(data), dq(spec.fprop_data.bytes()), dqt(spec.dgrad_data.bytes());
  DeviceBuffer<float> dsi(scale_inv), ds(spec.fprop_scale.numel()), dst(spec.dgrad_scale.numel());
  prepare_fp8_blockwise_weight_from_checkpoint(ddata.get(), dsi.get(), spec,
                                               {dq.get(), ds.get(), dqt.get(), dst.get(), nullptr, nullptr}, nullptr);
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  EXPECT_EQ(dq.download(), data);
  EXPECT_EQ(ds.download(), scale_inv);
  const auto qt = dqt.download();
  const auto st = dst.download();
  for (int64_t e = 0; e < E; ++e)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) ASSERT_EQ(qt[(e * K + k) * N + n], data[(e * N + n) * K + k]);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < N / 128; ++i) EXPECT_EQ(st[e * (N / 128) + i], scale_inv[e * (N / 128) + i]);  // K/128 == 1
}

TEST(QuantizeNvfp4, WeightsMatchTheOracleAndOwnTheirInverseGlobalScale) {
  DMOE_REQUIRE_SM90();
  struct Shape { int64_t E, N, K; };
  // The last shape has 128 chunks of 8192 elements per expert: the quantize CTAs of one expert run
  // beside the amax CTAs of the next ones.
  for (const Shape& sh : {Shape{2, 128, 256}, Shape{3, 96, 528}, Shape{5, 256, 4096}}) {
    HostBf16 w = random_weight(sh.E, sh.N, sh.K, 91 + sh.K, true);
    for (int64_t i = 0; i < sh.N * sh.K; ++i) w.set(1 * sh.N * sh.K + i, 0.0f);  // an all-zero expert
    if (sh.E > 2) w.set(2 * sh.N * sh.K + 17, INFINITY);                           // a poisoned expert
    const PreparedWeightSpec spec = prepared_weight_spec(BlockScaledFormat::kNVFP4, false, sh.E, sh.N, sh.K);
    EXPECT_TRUE(spec.inference);
    DeviceBuffer<uint16_t> dw(w.bits);
    DeviceBuffer<uint8_t> dq(spec.fprop_data.bytes()), ds(spec.fprop_scale.bytes());
    DeviceBuffer<float> dgs(sh.E), dgi(sh.E);
    dq.poison(kPoison);
    ds.poison(kPoison);
    for (int rep = 0; rep < 2; ++rep) {  // a refill of the same buffers gives the same bytes
      prepare_block_scaled_weight(dw.get(), spec, {dq.get(), ds.get(), nullptr, nullptr, dgs.get(), dgi.get()}, nullptr);
      DMOE_CUDA_CHECK(cudaDeviceSynchronize());
      const auto q = dq.download(), s = ds.download();
      const auto gs = dgs.download(), gi = dgi.download();
      const int64_t per = sh.N * sh.K;
      for (int64_t e = 0; e < sh.E; ++e) {
        std::vector<uint8_t> rq(per / 2), rs(per / 16);
        float rgs = 0, rgi = 0;
        nm::nvfp4_quantize_weight(w.f.data() + e * per, sh.N, sh.K, rq.data(), rs.data(), &rgs, &rgi);
        nm::nvfp4_weight_bytes_encode(rq.data(), per / 2);  // the GEMMs' word order
        for (int64_t i = 0; i < per / 2; ++i) ASSERT_EQ(q[e * per / 2 + i], rq[i]) << "expert " << e << " byte " << i;
        for (int64_t i = 0; i < per / 16; ++i) ASSERT_EQ(s[e * per / 16 + i], rs[i]) << "expert " << e << " scale " << i;
        ASSERT_TRUE(same_float(gs[e], rgs)) << e;
        ASSERT_TRUE(same_float(gi[e], rgi)) << e;
        if (!std::isnan(gs[e])) ASSERT_EQ(gi[e], 1.0f / gs[e]) << "the inverse is the exact FP32 reciprocal";
      }
      if (sh.E > 2) EXPECT_TRUE(std::isnan(gs[2]));
    }
  }
}

TEST(QuantizeNvfp4, TokenRowsIntoStridedPackedRowsMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  for (int64_t D : {256, 1024, 2048, 4096, 7168, 16384}) {  // every (blocks, threads) variant
    const int64_t T = D == 16384 ? 40 : 133;
    SCOPED_TRACE("D=" + std::to_string(D));
    HostBf16 x = random_bf16(T, D, 101 + D);
    add_crafted_rows(x);
    const int64_t row_bytes = nvfp4_packed_row_bytes(D), stride = row_bytes + 32;
    EXPECT_EQ(row_bytes, (D / 2 + D / 16 + 4 + 15) / 16 * 16);
    DeviceBuffer<uint16_t> dx(x.bits);
    DeviceBuffer<uint8_t> dout(T * stride);
    dout.poison(kPoison);
    quantize_nvfp4_token_rows(dx.get(), T, D, D, dout.get(), stride, nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto out = dout.download();
    std::vector<uint8_t> q(T * D / 2), s(T * D / 16);
    std::vector<float> inv(T);
    nm::nvfp4_quantize_activation(x.f.data(), T, D, q.data(), s.data(), inv.data());
    for (int64_t t = 0; t < T; ++t) {
      const uint8_t* row = out.data() + t * stride;
      for (int64_t i = 0; i < D / 2; ++i) ASSERT_EQ(row[i], q[t * D / 2 + i]) << "token " << t << " byte " << i;
      for (int64_t i = 0; i < D / 16; ++i) ASSERT_EQ(row[D / 2 + i], s[t * D / 16 + i]) << "token " << t << " scale " << i;
      float got;
      std::memcpy(&got, row + D / 2 + D / 16, 4);
      ASSERT_TRUE(same_float(got, inv[t])) << "token " << t;
      for (int64_t p = D / 2 + D / 16 + 4; p < stride; ++p) ASSERT_EQ(row[p], kPoison) << "token " << t << " pad " << p;
    }
  }
}

// The quantizer itself on separate data / scale / inverse-scale arrays: block counts that leave part of a
// warp's lanes (or whole warps) without a block, and data rows only 4-byte aligned (their blocks stored as
// two words instead of one 8-byte store), in every (blocks, threads) variant but the largest.
TEST(QuantizeNvfp4, TokenRowsOfAnyBlockCountIntoFourByteAlignedRowsMatchTheOracle) {
  DMOE_REQUIRE_SM90();
  for (int64_t D : {16, 272, 1040, 2064, 4112}) {  // 1, 17, 65, 129 and 257 blocks
    SCOPED_TRACE("D=" + std::to_string(D));
    const int64_t T = 37;
    HostBf16 x = random_bf16(T, D, 303 + D);
    if (D >= 256) add_crafted_rows(x);
    const int64_t q_stride = D / 2 + 4, s_stride = D / 16 + 3, inv_stride = 8;  // bytes; q_stride % 8 == 4
    DeviceBuffer<uint16_t> dx(x.bits);
    DeviceBuffer<uint8_t> dq(T * q_stride), ds(T * s_stride), dinv(T * inv_stride);
    dq.poison(kPoison);
    ds.poison(kPoison);
    dinv.poison(kPoison);
    quant::nvfp4_quantize_rows({dx.get(), T, D, D}, {dq.get(), q_stride, ds.get(), s_stride, dinv.get(), inv_stride},
                               nullptr);
    DMOE_CUDA_CHECK(cudaDeviceSynchronize());
    const auto q_got = dq.download(), s_got = ds.download(), inv_got = dinv.download();
    std::vector<uint8_t> q(T * D / 2), s(T * D / 16);
    std::vector<float> inv(T);
    nm::nvfp4_quantize_activation(x.f.data(), T, D, q.data(), s.data(), inv.data());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t i = 0; i < q_stride; ++i)
        ASSERT_EQ(q_got[t * q_stride + i], i < D / 2 ? q[t * D / 2 + i] : kPoison) << "token " << t << " byte " << i;
      for (int64_t i = 0; i < s_stride; ++i)
        ASSERT_EQ(s_got[t * s_stride + i], i < D / 16 ? s[t * D / 16 + i] : kPoison) << "token " << t << " scale " << i;
      float got;
      std::memcpy(&got, inv_got.data() + t * inv_stride, 4);
      ASSERT_TRUE(same_float(got, inv[t])) << "token " << t;
      for (int64_t i = 4; i < inv_stride; ++i) ASSERT_EQ(inv_got[t * inv_stride + i], kPoison) << "token " << t;
    }
  }
}

// The layer's h2 quantization bounds the rows by the groups' end on the device: rows below the bound
// are the unbounded call's bytes, rows at or past it untouched.
TEST(QuantizeNvfp4, RowsBoundOnTheDeviceLeavesLaterRowsUntouched) {
  DMOE_REQUIRE_SM90();
  const int64_t T = 133, D = 2048, bound = 77;
  HostBf16 x = random_bf16(T, D, 977);
  const int64_t stride = nvfp4_packed_row_bytes(D);
  DeviceBuffer<uint16_t> dx(x.bits);
  DeviceBuffer<uint8_t> all(T * stride), bounded(T * stride);
  DeviceBuffer<int32_t> dbound(std::vector<int32_t>{static_cast<int32_t>(bound)});
  all.poison(kPoison);
  bounded.poison(kPoison);
  const quant::Bf16Matrix in{dx.get(), T, D, D};
  quant::nvfp4_quantize_rows(in, quant::nvfp4_packed_rows_out(all.get(), stride, D), nullptr);
  quant::nvfp4_quantize_rows(in, quant::nvfp4_packed_rows_out(bounded.get(), stride, D), nullptr, dbound.get());
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto want = all.download(), got = bounded.download();
  for (int64_t i = 0; i < T * stride; ++i)
    ASSERT_EQ(got[i], i / stride < bound ? want[i] : kPoison) << "row " << i / stride << " byte " << i % stride;
}

// With token_rows, only the first counts_G[g] rows of each group's segment are quantized (the layer's
// h2 at decode: 32-row segments, a few token rows each): those rows are the plain call's bytes, the
// segments' padding rows and the rows past the groups untouched.
TEST(QuantizeNvfp4, TokenRowsLeavePaddingRowsUntouched) {
  DMOE_REQUIRE_SM90();
  const int64_t T = 133, D = 768;
  const std::vector<int32_t> segments = {32, 0, 32, 45}, tokens = {5, 0, 32, 1};  // 109 rows in groups
  std::vector<int32_t> offsets(segments.size() + 1, 0);
  for (size_t g = 0; g < segments.size(); ++g) offsets[g + 1] = offsets[g] + segments[g];
  std::vector<bool> token_row(static_cast<size_t>(T), false);
  for (size_t g = 0; g < segments.size(); ++g)
    for (int32_t r = 0; r < tokens[g]; ++r) token_row[offsets[g] + r] = true;
  HostBf16 x = random_bf16(T, D, 978);
  const int64_t stride = nvfp4_packed_row_bytes(D);
  DeviceBuffer<uint16_t> dx(x.bits);
  DeviceBuffer<uint8_t> all(T * stride), only(T * stride);
  DeviceBuffer<int32_t> d_offsets(offsets), d_tokens(tokens);
  all.poison(kPoison);
  only.poison(kPoison);
  const quant::Bf16Matrix in{dx.get(), T, D, D};
  quant::nvfp4_quantize_rows(in, quant::nvfp4_packed_rows_out(all.get(), stride, D), nullptr);
  quant::nvfp4_quantize_rows(in, quant::nvfp4_packed_rows_out(only.get(), stride, D), nullptr, nullptr,
                             quant::RowGroups{d_tokens.get(), d_offsets.get(), static_cast<int32_t>(segments.size())});
  DMOE_CUDA_CHECK(cudaDeviceSynchronize());
  const auto want = all.download(), got = only.download();
  for (int64_t i = 0; i < T * stride; ++i)
    ASSERT_EQ(got[i], token_row[i / stride] ? want[i] : kPoison) << "row " << i / stride << " byte " << i % stride;
}

}  // namespace
}  // namespace dist_moe
