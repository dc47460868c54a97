// A CPU model of how far the block-scaled training forward lands from the oracle when W13 runs on FP8
// tensor cores with FP32 promotion every P of K (perf_history G158's question, before any GPU run).
//
// The oracle (src/reference) sums every GEMM exactly (double) and rounds once to FP32, then to BF16.
// This tool re-runs one suite case's forward with W13 through a tensor-core accumulation model and
// prints relL2(out_model, out_oracle) for P = 128, 64, 32, and the share of h1 / h2 elements that moved:
//   each k32 wgmma step adds its 32 products to the running sum C; all 33 terms are aligned to the
//   largest one's exponent e and truncated toward zero to multiples of 2^(e - 13) (the accumulator's
//   ~14 significant bits, DeepSeek-V3 report 3.3.2; a model, not a bit-exact description of the
//   hardware); C starts at 0 at each promotion group, and each group's C is added to the FP32
//   accumulator (one rounding; the operands are the dequantized values, so the block scales are in
//   the products: exact for MXFP8's powers of two, an approximation for FP8 blockwise's FP32 scales).
// W2 and everything after it run as the oracle runs them, so the tool isolates W13's share; the GPU's
// own W2 accumulation adds the exact-h1 cases' ~1e-3 on top (s75 r2, s76 r1).
//
// Build (from a configured build/ of the repository root; CPU only):
//   g++ -O2 -std=c++17 -fopenmp -I include -I src docs/gpu_runs/2026-12-07-s77/sim/tc_accumulation_sim.cpp \
//     build/libdist_moe_reference.a build/libdist_moe_core.a -o /tmp/tc_sim
//   /tmp/tc_sim [mxfp8|fp8_blockwise]
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "dist_moe/device/numeric/fp8_e4m3.cuh"
#include "reference/oracle.h"
#include "reference/quant.h"
#include "reference/random.h"
#include "reference/stages.h"

using namespace dist_moe;
using namespace dist_moe::reference;

namespace {

// x truncated toward zero to a multiple of 2^q.
double trunc_to(double x, int q) { return std::trunc(std::ldexp(x, -q)) * std::ldexp(1.0, q); }

// One k32 step of the model: C + sum(p), every term truncated at the largest term's exponent - 13.
double tc_step(double c, const double* p, int n) {
  double big = std::fabs(c);
  for (int i = 0; i < n; ++i) big = std::fmax(big, std::fabs(p[i]));
  if (big == 0.0) return 0.0;
  const int q = std::ilogb(big) - 13;
  double s = trunc_to(c, q);
  for (int i = 0; i < n; ++i) s += trunc_to(p[i], q);
  return static_cast<double>(static_cast<float>(s));  // the register holds FP32 (exact here)
}

// An operand split back into E4M3 values and FP32 scales per 128-element block of a row (weights: per
// 128x128 block, the same scale for the block's 128 rows): scale = the block's largest |value| / 448
// (an FP8-blockwise block's amax element quantizes to 448 exactly), value = round_e4m3(deq / scale).
// MXFP8's dequantized values are used as they are (scale 1): their powers of two scale every product
// exactly, so the model's truncation is the same either way.
struct Split {
  TensorF raw, scale;  // raw [rows, K]; scale [rows, K / 128]
};
Split split_rows(const TensorF& deq, bool fp8_blockwise, int64_t block_rows) {
  const int64_t R = deq.rows(), K = deq.row_size(), KB = (K + 127) / 128;
  Split s{deq, TensorF({R, KB}, 1.0f)};
  if (!fp8_blockwise) return s;
  for (int64_t r0 = 0; r0 < R; r0 += block_rows)
    for (int64_t kb = 0; kb < KB; ++kb) {
      float amax = 0.0f;
      for (int64_t r = r0; r < std::min(R, r0 + block_rows); ++r)
        for (int64_t k = kb * 128; k < std::min(K, kb * 128 + 128); ++k) amax = std::fmax(amax, std::fabs(deq.row(r)[k]));
      const float sc = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (int64_t r = r0; r < std::min(R, r0 + block_rows); ++r) {
        s.scale.row(r)[kb] = sc;
        for (int64_t k = kb * 128; k < std::min(K, kb * 128 + 128); ++k)
          s.raw.row(r)[k] = numeric::round_e4m3(deq.row(r)[k] / sc);
      }
    }
  return s;
}

// grouped_gemm_nt with W13's tensor-core model at promotion interval `promote`, on split operands
// (the weight's rows expert-major: expert e's row n is row e * N + n).
TensorF tc_gemm_nt(const RankRouting& rt, const Split& a_MK, const Split& w_ENK, int64_t N, int promote) {
  const int64_t K = a_MK.raw.row_size();
  TensorF c({rt.num_rows(), N});
#pragma omp parallel for schedule(dynamic, 4)
  for (int64_t m = 0; m < rt.num_rows(); ++m) {
    const RouteRef& ref = rt.rows[static_cast<size_t>(m)];
    if (ref.is_padding()) continue;
    const float* a = a_MK.raw.row(m);
    const float* sa = a_MK.scale.row(m);
    double p[32];
    for (int64_t n = 0; n < N; ++n) {
      const int64_t wr = ref.local_expert * N + n;
      const float* w = w_ENK.raw.row(wr);
      const float* sw = w_ENK.scale.row(wr);
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < K; k0 += promote) {
        double cacc = 0.0;
        for (int64_t k1 = k0; k1 < std::min(K, k0 + promote); k1 += 32) {
          const int len = static_cast<int>(std::min<int64_t>(32, K - k1));
          for (int i = 0; i < len; ++i) p[i] = static_cast<double>(a[k1 + i]) * static_cast<double>(w[k1 + i]);
          cacc = tc_step(cacc, p, len);
        }
        const float scale = sa[k0 / 128] * sw[k0 / 128];  // the fold: acc += group * (a scale x w scale)
        acc = std::fmaf(static_cast<float>(cacc), scale, acc);
      }
      c(m, n) = numeric::round_bf16(acc);
    }
  }
  return c;
}

double rel_l2(const TensorF& a, const TensorF& b) {
  double e = 0, r = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    const double d = double(a.data[i]) - double(b.data[i]);
    e += d * d;
    r += double(b.data[i]) * double(b.data[i]);
  }
  return r > 0 ? std::sqrt(e / r) : std::sqrt(e);
}

int64_t differ(const TensorF& a, const TensorF& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.data.size(); ++i) n += a.data[i] != b.data[i];
  return n;
}

struct Case {
  const char* name;
  int64_t T, D, F, K, E;
  bool rmsnorm;
  uint64_t seed;
  bool cyclic = false;  // the suite's cyclic_ids: route k of token t to expert (t K + k) % E
};

}  // namespace

int main(int argc, char** argv) {
  const std::string fmt = argc > 1 ? argv[1] : "mxfp8";
  const Quantization q = fmt == "mxfp8" ? Quantization::kMXFP8 : Quantization::kFP8Blockwise;
  // Random cases of the MXFP8 / FP8-blockwise training suites (tests/gpu/multi/test_block_scaled_pipeline_multi.cu:
  // their shapes and seeds, world 1), and qwen3_30b's D and F at 256 tokens.
  const Case cases[] = {{"basic", 96, 256, 256, 2, 8, false, 1},
                        {"bounded_T", 40, 256, 256, 2, 8, false, 1},
                        {"k6_e8", 96, 256, 256, 6, 8, false, 1},
                        {"rmsnorm_k2_seed2", 96, 256, 256, 2, 8, true, 2},
                        {"rmsnorm_k8_seed3", 96, 256, 256, 8, 8, true, 3},
                        {"t8_of_32_e4_cyclic", 8, 256, 256, 2, 4, false, 108, true},
                        {"wide_e64_d384_f640", 64, 384, 640, 8, 64, false, 1},
                        {"e256_k8", 256, 256, 256, 8, 256, false, 1},
                        {"qwen3_dims_t256", 256, 2048, 768, 8, 16, false, 5}};
  std::printf("%s: relL2(out) of the W13 tensor-core model against the oracle, and h1 / h2 elements moved\n",
              fmt.c_str());
  std::printf("%-22s %8s %12s %10s %10s\n", "case", "promote", "relL2(out)", "h1 moved", "h2 moved");
  for (const Case& c : cases) {
    RandomProblemSpec s;
    s.num_ranks = 1;
    s.tokens_per_rank = c.T;
    s.hidden_dim = c.D;
    s.intermediate_dim = c.F;
    s.top_k = c.K;
    s.num_experts = c.E;
    s.padding_route_probability = 0.05;
    s.seed = c.seed;
    Problem p = make_random_problem(s);
    if (c.cyclic)
      for (auto& ids : p.ids_TK)
        for (int64_t i = 0; i < static_cast<int64_t>(ids.size()); ++i) ids[i] = static_cast<int32_t>(i % c.E);
    ForwardOptions fo;
    if (c.rmsnorm) fo.rmsnorm = RMSNormSpec{1e-6, {}, 0.0};
    fo.row_alignment = 128;
    fo.quantization = q;
    fo.mxfp8_training_operands = Mxfp8TrainingOperands::kSharedOnce;
    const ForwardResult oracle = forward(p, fo);
    const RankForward<float>& rf = oracle.ranks[0];
    const RankRouting& rt = rf.routing;
    const auto rows = [&](const TensorF& a) {
      return q == Quantization::kMXFP8 ? mxfp8_shared_rows_once(a) : quantize_activation_rows(a, q);
    };
    const TensorF h2_oracle_row = rows(rf.h2_MF);
    const bool bw = q == Quantization::kFP8Blockwise;
    const TensorF& w13 = rf.quantized.w13_EFD;  // [E_local, 2F, D] as [E_local * 2F, D] rows
    TensorF w13_rows({w13.size(0) * w13.size(1), w13.size(2)});
    w13_rows.data = w13.data;
    const Split xs = split_rows(rf.quantized.x_row_MD, bw, 1), ws = split_rows(w13_rows, bw, 128);
    for (int promote : {128, 64, 32}) {
      const TensorF h1 = tc_gemm_nt(rt, xs, ws, w13.size(1), promote);
      const TensorF h2 = swiglu_rows(rt, h1, p.swiglu);
      const TensorF h2_row = rows(h2);
      const TensorF h3 = grouped_gemm_nt(rt, h2_row, rf.quantized.w2_EDF);
      const std::vector<TensorF> combine = scatter_route_rows(oracle.routing(), std::vector<TensorF>{h3}, c.D);
      TensorF rstd;
      const TensorF out = c.rmsnorm ? rmsnorm_topk_reduce(combine[0], p.ids_TK[0], p.scores_TK[0], *fo.rmsnorm, rstd)
                                    : topk_reduce(combine[0], p.ids_TK[0], p.scores_TK[0]);
      std::printf("%-22s %8d %12.3e %9.4f%% %9.4f%%\n", c.name, promote, rel_l2(out, rf.out_TD),
                  100.0 * differ(h1, rf.h1_M2F) / double(h1.numel()),
                  100.0 * differ(h2_row, h2_oracle_row) / double(h2_row.numel()));
    }
  }
  return 0;
}
