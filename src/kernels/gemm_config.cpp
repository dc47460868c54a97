// Tile-shape heuristics of the SM90 grouped GEMMs: one function per op, a reason on every branch.
//
// The facts every branch leans on (H100/H200, one CTA per SM, 227 KiB of shared memory):
//  * Two consumer warpgroups of a 128-row tile each hold an m64 x BN FP32 fragment: BN = 256 is
//    128 accumulator registers per thread, the most that fits next to the epilogue's working set.
//  * A stage holds (BM + BN) x 64 BF16: 48 KiB at 128x256 (4 stages = 192 KiB), 32 KiB at 128x128
//    (6 stages = 192 KiB). Both keep the same bytes in flight; 128x256 does twice the math per byte
//    of shared memory read, so it is the default whenever it is not wasteful.
//  * Only host-known sizes are used: m_capacity bounds the rows, the counts stay on the device.
#include <string>

#include "dist_moe/grouped_gemm.h"

namespace dist_moe {
namespace {

GroupedGemmConfig tile(int bm, int bn, int stages, const GroupedGemmProblem& p, int sms) {
  GroupedGemmConfig c;
  c.block_m = bm;
  c.block_n = bn;
  c.stages = stages;
  c.num_sms = sms;
  c.gather = p.gather;
  return c;
}

// Number of 128 x bn output tiles if the rows were spread evenly (m_capacity is an upper bound).
int64_t tiles_estimate(int64_t rows, int64_t cols, int64_t bn) { return ((rows + 127) / 128) * ((cols + bn - 1) / bn); }

// Swap-AB decode: with at most 64 rows per expert on average, a 128-row M tile would be mostly
// padding and the GEMM is bound by streaming weights from HBM. Putting the weight rows on M and
// the few tokens on N (32-wide token tiles) wastes no tensor-core work and keeps 32 KiB of weights
// per stage in flight. Not for the gather producer (decode dispatch is tiny; gather first).
bool is_decode(const GroupedGemmProblem& p) {
  return !p.gather && p.e_local > 0 && p.m_capacity <= 64 * p.e_local;
}

GroupedGemmConfig select_fprop(const GroupedGemmProblem& p, int sms) {
  if (is_decode(p)) {
    GroupedGemmConfig c = tile(256, 32, 5, p, sms);  // 256 weight rows x 32 tokens, 36 KiB stages
    c.swap_ab = true;
    return c;
  }
  // The gather producer is compiled for 128x256 only: fewer N tiles wait on each gathered M tile.
  if (p.gather) return tile(128, 256, 4, p, sms);
  // N an odd multiple of 128: a 256-wide tile would compute a half-empty last column block.
  if (p.n % 256 != 0) return tile(128, 128, 6, p, sms);
  // Fewer 128x256 tiles than SMs: halve the tile so every SM gets work (latency-bound anyway).
  if (tiles_estimate(p.m_capacity, p.n, 256) < sms) return tile(128, 128, 6, p, sms);
  return tile(128, 256, 4, p, sms);
}

GroupedGemmConfig select_fprop_swiglu(const GroupedGemmProblem& p, int sms) {
  if (is_decode(p)) {
    GroupedGemmConfig c = tile(256, 32, 5, p, sms);  // 128 gate + 128 up weight rows x 32 tokens
    c.swap_ab = true;
    return c;
  }
  // The SwiGLU epilogue needs gate column j and up column F + j in the same thread: the tile is
  // 128 gate + 128 up columns, the widest split (needs F % 128 == 0, which the API requires).
  return tile(128, 256, 4, p, sms);
}

GroupedGemmConfig select_dgrad(const GroupedGemmProblem& p, int sms) {
  // Output columns are k. FP32 output and the gather producer are compiled for 128x256 only;
  // a half-empty last column block costs less than a missing configuration.
  if (p.gather || p.out_dtype == DType::kFloat32) return tile(128, 256, 4, p, sms);
  // k an odd multiple of 128: a 256-wide tile would waste half of its last column block.
  if (p.k % 256 != 0) return tile(128, 128, 6, p, sms);
  // Fewer 128x256 tiles than SMs: smaller tiles keep every SM busy.
  if (tiles_estimate(p.m_capacity, p.k, 256) < sms) return tile(128, 128, 6, p, sms);
  return tile(128, 256, 4, p, sms);
}

GroupedGemmConfig select_wgrad(const GroupedGemmProblem& p, int sms) {
  // Output [n, k] per expert, contraction over the expert's rows. FP32 output with k an odd
  // multiple of 128: 128-wide tiles avoid a half-empty last column block (compiled for FP32 only;
  // BF16 WGRAD takes 128x256 and masks the last half block).
  if (p.out_dtype == DType::kFloat32 && p.k % 256 != 0) return tile(128, 128, 6, p, sms);
  return tile(128, 256, 4, p, sms);
}

}  // namespace

const char* to_string(GroupedGemmOp op) {
  switch (op) {
    case GroupedGemmOp::kFprop: return "fprop";
    case GroupedGemmOp::kFpropSwiglu: return "w13_fprop_swiglu";
    case GroupedGemmOp::kDgrad: return "dgrad";
    case GroupedGemmOp::kWgrad: return "wgrad";
  }
  return "?";
}

std::string GroupedGemmConfig::name() const {
  std::string s = std::to_string(block_m) + "x" + std::to_string(block_n) + "x" + std::to_string(block_k) + "_s" +
                  std::to_string(stages);
  if (cluster_m != 1) s += "_c" + std::to_string(cluster_m);
  if (swap_ab) s += "_swapab";
  if (gather) s += "_gather";
  return s;
}

GroupedGemmConfig select_grouped_gemm_config(const GroupedGemmProblem& p, int device_num_sms) {
  switch (p.op) {
    case GroupedGemmOp::kFprop: return select_fprop(p, device_num_sms);
    case GroupedGemmOp::kFpropSwiglu: return select_fprop_swiglu(p, device_num_sms);
    case GroupedGemmOp::kDgrad: return select_dgrad(p, device_num_sms);
    case GroupedGemmOp::kWgrad: return select_wgrad(p, device_num_sms);
  }
  return tile(128, 256, 4, p, device_num_sms);
}

}  // namespace dist_moe
