// Tile-shape heuristics of the SM90 grouped GEMMs: one function per op, a reason on every branch.
//
// The facts every branch leans on (H100/H200, one CTA per SM, 227 KiB of shared memory):
//  * Two consumer warpgroups of a 128-row tile each hold an m64 x BN FP32 fragment: BN = 256 is
//    128 accumulator registers per thread, the most that fits next to the epilogue's working set.
//    Ping-pong gives one warpgroup a whole 128 x 128 tile (two m64 x 128 fragments, also 128).
//  * A stage holds (BM + BN) x 64 BF16: 48 KiB at 128x256 (4 stages = 192 KiB), 32 KiB at 128x128
//    (6 stages = 192 KiB). Both keep the same bytes in flight; 128x256 does 4/3 the math per byte
//    loaded, so it is the default whenever the epilogue does not dominate.
//  * The epilogue of a cooperative tile stalls the tensor cores: with synchronous stores ~2-4 us
//    per 128x256 tile, with the first SwiGLU math ~10 us (measured: W13 ran 10 us/tile slower than W2
//    at equal K). TMA stores leave only the staging on the critical path (~1 us, plus SwiGLU's math,
//    which since G35 is two special-function-unit instructions per output); ping-pong hides the
//    whole epilogue behind the other warpgroup's mainloop as long as the epilogue is shorter than a
//    128x128 mainloop, at the price of 4/3 the operand bytes per FLOP.
//  * Only host-known sizes are used: m_capacity bounds the rows, the counts stay on the device.
//  * The TMA staging (32 KiB) next to 192 KiB of stages leaves room for the scheduler tables of
//    about 220 experts (WGRAD, whose tables also hold the visiting order: about 150); beyond that
//    the heuristic falls back to the padded-staging kernels, or for WGRAD to the deep-staging
//    ping-pong kernel (4 stages).
// DMOE_GEMM_LEGACY=1 restores the first version's choices (synchronous epilogues), for A/B runs
// and as an escape hatch.
#include <algorithm>
#include <cstdlib>
#include <string>

#include "dist_moe/dtype.h"
#include "dist_moe/grouped_gemm_config.h"
#include "env_knobs.h"

namespace dist_moe {
namespace {

constexpr int kSmemOptin = 232448;  // H100/H200 dynamic shared memory per block (227 KiB)

int block_k_of(const GroupedGemmProblem& p) { return grouped_gemm_block_k(p.a_format, p.b_format); }

GroupedGemmConfig tile(int bm, int bn, int stages, const GroupedGemmProblem& p, int sms, bool pingpong = false,
                       bool tma_store = false) {
  GroupedGemmConfig c;
  c.block_m = bm;
  c.block_n = bn;
  c.block_k = block_k_of(p);
  c.stages = stages;
  c.num_sms = sms;
  c.gather = p.gather;
  c.pingpong = pingpong;
  c.tma_store = tma_store;
  return c;
}

// WGRAD's ping-pong TMA-store kernel with 4 stages is the deep-staging one: 4 TMA staging buffers
// per warpgroup (grouped_gemm_sm90_wgrad.cu; no other kernel has that combination).
bool deep_staging(const GroupedGemmConfig& c, GroupedGemmOp op) {
  return op == GroupedGemmOp::kWgrad && c.tma_store && c.pingpong && c.stages == 4;
}

// Shared memory of a configuration (device/gemm/kernel.cuh layout; the host API checks the exact
// number against the device before launching).
int smem_estimate(const GroupedGemmConfig& c, const GroupedGemmProblem& p) {
  const int stages = c.stages * (c.block_m + c.block_n) * 128;
  const int staging = 2 * (deep_staging(c, p.op) ? 32768 : c.tma_store ? 16384 : 10240);
  const int e = static_cast<int>(p.e_local);
  const int tables = (2 * (e + 1) + (p.op == GroupedGemmOp::kWgrad ? e : 0)) * 4;
  // + the stages' mbarriers, the resolved operands (16 bytes per map slot: params.cuh kNumMaps = 6),
  // the clip counters and the tile ring.
  return 1024 + stages + staging + 16 * c.stages + 16 * 6 + 16 + 80 + tables;
}

bool legacy_requested() {
  static const bool legacy = core::env_flag("DMOE_GEMM_LEGACY");
  return legacy;
}

// Whether a configuration's shared memory fits next to this many experts' scheduler tables.
bool fits(const GroupedGemmConfig& c, const GroupedGemmProblem& p) { return smem_estimate(c, p) <= kSmemOptin; }

// The preferred configuration when it fits, else the fallback (always the fallback under
// DMOE_GEMM_LEGACY: BF16's padded-staging A/B).
GroupedGemmConfig fitting(const GroupedGemmConfig& preferred, const GroupedGemmConfig& fallback,
                          const GroupedGemmProblem& p) {
  if (legacy_requested() || !fits(preferred, p)) return fallback;
  return preferred;
}

// Cooperative 128x256 with TMA stores, or the same tile with padded staging when the TMA staging
// does not fit next to the experts' tables.
GroupedGemmConfig cooperative_tma(const GroupedGemmProblem& p, int sms) {
  return fitting(tile(128, 256, 4, p, sms, false, true), tile(128, 256, 4, p, sms), p);
}

// Cooperative 128x256 with TMA stores, or ping-pong 128x128 with TMA stores when the contraction
// is short: with few 64-deep k blocks per tile even the asynchronous epilogue's staging (~1 us per
// 128x256 tile) is a large share of the tile, and ping-pong hides it completely, at the price of
// 4/3 the operand bytes per FLOP of the smaller tile. `k_blocks`: contraction / 64.
GroupedGemmConfig async_epilogue(int64_t k_blocks, const GroupedGemmProblem& p, int sms, const GroupedGemmConfig& fallback) {
  if (k_blocks <= 16) return fitting(tile(128, 128, 6, p, sms, true, true), fallback, p);
  return fitting(tile(128, 256, 4, p, sms, false, true), fallback, p);
}

// Number of 128 x bn output tiles if the rows were spread evenly (m_capacity is an upper bound).
int64_t tiles_estimate(int64_t rows, int64_t cols, int64_t bn) { return ((rows + 127) / 128) * ((cols + bn - 1) / bn); }

// Swap-AB decode: with at most 64 rows per expert on average, a 128-row M tile would be mostly
// padding and the GEMM is bound by streaming weights from HBM. Putting the weight rows on M and
// the few tokens on N (32-wide token tiles) wastes no tensor-core work and keeps 32 KiB of weights
// per stage in flight. Not for the gather producer (decode dispatch is tiny; gather first), nor for
// an output that accumulates: the swap-AB epilogue only stores (E4M3 DGRAD reaches the heuristic as
// an FPROP on the transposed weight, so the op alone does not say it; the host API rejects the pair).
// The rows the GEMM can see: m_bound when the caller knows it, else the buffer's capacity.
int64_t usable_rows(const GroupedGemmProblem& p) {
  return p.m_bound > 0 ? std::min(p.m_bound, p.m_capacity) : p.m_capacity;
}

bool is_decode(const GroupedGemmProblem& p) {
  return !p.gather && !p.accumulate && p.e_local > 0 && usable_rows(p) <= 64 * p.e_local;
}

// 256 weight rows x `tokens` tokens (BF16 and E4M3 default: 32 tokens, 5 x 36 KiB stages).
GroupedGemmConfig swap_ab_tile(const GroupedGemmProblem& p, int sms, int tokens = 32, int stages = 5) {
  GroupedGemmConfig c = tile(256, tokens, stages, p, sms);
  c.swap_ab = true;
  return c;
}

// Token rows per local expert on average, routing's padding left out: the caller's bound of routed
// rows when it gives one (block-scaled layers do, tile_rows or not), else the usable rows.
double token_rows_per_expert(const GroupedGemmProblem& p) {
  const int64_t rows = p.routed_rows_bound > 0 ? std::min(p.routed_rows_bound, usable_rows(p)) : usable_rows(p);
  return static_cast<double>(rows) / static_cast<double>(p.e_local);
}

// Rows per local expert a decode tile covers, on average: with tile_rows the token rows, else the
// usable rows (padded segments).
double routed_rows_per_expert(const GroupedGemmProblem& p) {
  return p.tile_rows ? token_rows_per_expert(p) : static_cast<double>(usable_rows(p)) / static_cast<double>(p.e_local);
}

// The most token rows per local expert for which FP8-blockwise decode-sized W13 takes the swap-AB
// tile (select_fp8_blockwise); DMOE_FP8_SWAPAB_MAX_ROWS for A/B runs.
int64_t fp8_swap_ab_max_rows() {
  static const int64_t rows = core::env_int64_or("DMOE_FP8_SWAPAB_MAX_ROWS", kFp8SwapAbMaxRowsPerExpert);
  return rows;
}

// FP8-blockwise plain FPROP (W2) takes the swap-AB tile at decode sizes only with DMOE_FP8_W2_SWAPAB=1
// (A/B runs; select_fp8_blockwise).
bool fp8_w2_swap_ab() {
  static const bool on = core::env_flag("DMOE_FP8_W2_SWAPAB");
  return on;
}

// kNarrowDecodeRowsPerExpert (grouped_gemm_config.h): block-scaled decode tiles over the real rows
// take 16 tokens up to that average per expert, a wider tile above it (NVFP4 32 tokens, MXFP8
// 128x128: select_*). A
// stage of the block-scaled swap-AB kernels costs about the same SM time whatever the tokens (they
// are bound by their per-stage work, not the tensor cores or the bytes), so an expert needing a
// second tile costs a second pass over its weights. s27 r2,
// dsv3 dims at EP1 (16 / 32 tokens): 8 rows per expert MXFP8 2.986 / 3.619 ms, NVFP4 2.637 /
// 2.819; 16 rows MXFP8 4.084 / 3.625, NVFP4 3.519 / 2.831; 32 rows MXFP8 6.747 / 5.245, NVFP4 5.791 /
// 3.938. With Poisson counts, at 12 per expert ~10% of the experts need a second 16-token tile,
// about what the wider tile costs per pass (1.07x NVFP4, 1.21x MXFP8).

// FPROP (W2) and DGRAD with BF16 output: the M-grouped GEMMs, `width` output columns and
// `k_blocks` 64-deep contraction steps.
GroupedGemmConfig m_grouped_tile(int64_t width, int64_t k_blocks, const GroupedGemmProblem& p, int sms) {
  // The gather producer is compiled for 128x256 only: fewer N tiles wait on each gathered M tile.
  if (p.gather) return cooperative_tma(p, sms);
  // Width an odd multiple of 128: a 256-wide tile would compute a half-empty last column block. With
  // enough tiles, ping-pong 128x128 hides the epilogue; otherwise the smaller cooperative tile
  // finishes each tile sooner.
  if (width % 256 != 0) {
    if (tiles_estimate(p.m_capacity, width, 128) >= 4 * sms)
      return fitting(tile(128, 128, 6, p, sms, true, true), tile(128, 128, 6, p, sms), p);
    return tile(128, 128, 6, p, sms);
  }
  // Fewer 128x256 tiles than SMs: halve the tile so every SM gets work (latency-bound anyway).
  if (tiles_estimate(p.m_capacity, width, 256) < sms) return tile(128, 128, 6, p, sms);
  // Scatter (fused combine: W2 FPROP, W13 DGRAD) takes the same tile: the TMA-store kernels store
  // scattered rows with ordinary (often remote) stores from their staging buffers. Ping-pong, which
  // would overlap those stores with the other warpgroup's wgmmas, measured slower in the dsv3 layer:
  // its 128x128 tile costs more than the stores it hides (docs/perf.md G27: W13 DGRAD 1.08-1.09x
  // its GEMM-only twin with ping-pong, 0.96-0.97x with 128x256).
  // Asynchronous TMA stores take the epilogue off the tensor cores' critical path.
  return async_epilogue(k_blocks, p, sms, tile(128, 256, 4, p, sms));
}

GroupedGemmConfig select_fprop(const GroupedGemmProblem& p, int sms) {
  if (is_decode(p)) return swap_ab_tile(p, sms);
  return m_grouped_tile(p.n, p.k / 64, p, sms);
}

GroupedGemmConfig select_fprop_swiglu(const GroupedGemmProblem& p, int sms) {
  if (is_decode(p)) return swap_ab_tile(p, sms);  // 128 gate + 128 up weight rows per tile
  // The SwiGLU epilogue needs gate column j and up column F + j in the same thread: a tile is
  // BN/2 gate + BN/2 up columns (F % 128 == 0, which the API requires, allows both 64 and 128).
  // Cooperative 128x256 at every D (TMA stores; with the gather producer the padded kernel: its
  // TMA-store twin spills, G31). Ping-pong 128x128 hides the epilogue behind the other warpgroup's
  // wgmmas but loads 4/3 the operand bytes per FLOP; since the epilogue's SwiGLU math went to the
  // special-function unit (G35) the cooperative tile wins or ties everywhere measured:
  // qwen3_30b (D = 2048, 32 k blocks per tile; ping-pong's tensor pipe was 54% busy there) 0.854 vs
  // 0.897 ms even before G35 (G34); dsv3_prefill random rows 3.84-3.93 vs 4.24 ms, balanced 3.26 vs
  // 3.19; mixtral within 1%; in the layer (gather W13, 3 interleaved rounds) dsv3 forward 0.933x,
  // mixtral 0.988x (docs/perf.md G35).
  if (p.gather) return tile(128, 256, 4, p, sms);
  return cooperative_tma(p, sms);
}

GroupedGemmConfig select_dgrad(const GroupedGemmProblem& p, int sms) {
  // Output columns are k, the contraction runs over n.
  if (p.out_dtype == DType::kFloat32 && !p.gather) {
    // k an odd multiple of 128: ping-pong 128x128 avoids the half-empty last column block.
    if (p.k % 256 != 0) return fitting(tile(128, 128, 6, p, sms, true, true), tile(128, 256, 4, p, sms), p);
    return cooperative_tma(p, sms);
  }
  return m_grouped_tile(p.k, p.n / 64, p, sms);
}

GroupedGemmConfig select_wgrad(const GroupedGemmProblem& p, int sms) {
  // Output [n, k] per expert, contraction over the expert's rows: few k blocks per tile at dsv3
  // (256 rows: 4), where writing the output dominates and must overlap the next tile's math.
  // k an odd multiple of 128: ping-pong 128x128 tiles avoid a half-empty column block.
  const bool fp32 = p.out_dtype == DType::kFloat32;
  const GroupedGemmConfig padded = fp32 && p.k % 256 != 0 ? tile(128, 128, 6, p, sms) : tile(128, 256, 4, p, sms);
  // Beyond ~150 local experts the scheduler tables crowd the TMA staging of both preferred tiles out
  // of shared memory; the deep-staging ping-pong kernel (4 stages, ~193 KiB) still fits next to the
  // tables of ~2800 experts. At dsv3_prefill EP1 (256 experts x 128 rows) it measured 3.3x faster
  // than the padded kernel when accumulating (W13 11.1 vs 36.2 ms, W2 5.4 vs 18.1: the padded
  // epilogue reads the old gradient synchronously) and 1.2x when writing (docs/perf.md G36).
  const GroupedGemmConfig fallback = fitting(tile(128, 128, 4, p, sms, true, true), padded, p);
  if (p.k % 256 != 0) return fitting(tile(128, 128, 6, p, sms, true, true), fallback, p);
  // Cooperative 128x256 with TMA stores even for short contractions (unlike FPROP/DGRAD): measured
  // fastest for every dsv3_prefill WGRAD in the A/B run (docs/perf.md G12; W13 BF16 4.50 vs 5.92 ms
  // for ping-pong 128x128, W2 2.20 vs 2.44, FP32 likewise) and within 3% at qwen3: with ~1.4 us of
  // math per 4-k-block tile, half as many tiles amortize their load latency and epilogue switch.
  return fitting(tile(128, 256, 4, p, sms, false, true), fallback, p);
}

// FP8 blockwise (FPROP, W13 FPROP, and DGRAD, which runs as FPROP on the transposed weight): only
// cooperative TMA-store tiles are compiled (the promotion after every k block needs the other
// warpgroup's wgmmas to hide it). 128x256 wherever the width is a multiple of 256: measured faster
// than 128x128 in every case of session 17 runs 3-4 (dsv3_prefill, qwen3_30b, mixtral at EP2,
// balanced and random rows; W13 1.26-1.44x our BF16 kernel against 1.19-1.34x, W2 1.21-1.37x
// against 1.10-1.27x; docs/perf_history.md G39). 128x128 when the width is an odd multiple of
// 128 (no half-empty last tile). Decode-sized FPROP (is_decode): the swap-AB tile.
GroupedGemmConfig select_fp8_blockwise(const GroupedGemmProblem& p, int sms) {
  // WGRAD over the transposed columns: 128x256 (two 128-column slices, three stages: the stages'
  // scale copies and the staging leave no room for a fourth) where the output width k is a
  // multiple of 256 (the stage's B scale copy is 256 columns; G69) and the experts' contractions
  // are long, else 128x128 (five stages). Short contractions -- at most
  // kFp8WgradNarrowRowsPerExpert token rows per expert on average, one or two 128-deep k blocks
  // per tile, where the reduce-adds into the gradients dominate -- take 128x128: 6-8% faster there
  // (perf_history G140: s66, an H100, BF16 gradients accumulated, dsv3_prefill EP1 / EP2 sizes, 128
  // / 256 rows per expert, both tiles in one sweep; the dsv3_prefill EP1 layer 7.1% faster on an
  // H100, s68, 0.9% on an H200, s69); from 512 rows (qwen3_30b, mixtral: 512-2048) 128x256 is 0-16%
  // ahead.
  if (p.op == GroupedGemmOp::kWgrad) {
    const bool wide = p.k % 256 == 0 && token_rows_per_expert(p) > kFp8WgradNarrowRowsPerExpert;
    return wide ? tile(128, 256, 3, p, sms, false, true) : tile(128, 128, 5, p, sms, false, true);
  }
  // Decode-sized W13: the swap-AB tile streaming the E4M3 weights (as MXFP8's), while the token rows
  // per expert (without routing's 32-row padding, which is_decode counts) fit about one
  // 32-token pass. Above that, 128x256 runs one M tile per expert where swap-AB runs its per-stage
  // work once per 32 tokens: s46 r2, qwen3_30b dims, random rows, tiles over the real rows, 32 rows
  // per expert W13 0.132 vs 0.153 ms, W2 0.083 vs 0.098; 64 rows W13 0.138 vs 0.228, W2 0.086 vs
  // 0.143 (perf_history G101). DMOE_FP8_SWAPAB_MAX_ROWS moves the bound (A/B runs; 64: every
  // decode-sized call, the old pick). Plain FPROP (W2, K = F) keeps the 128x256 tile even below the
  // bound: the swap-AB tile's per-stage work is paid on few k blocks there. s46 r3, qwen3_30b dims, 8
  // and 16 rows per expert: 128x256 4-6% ahead; s47 r5, dsv3 dims at EP2 sizes, 8 rows per expert
  // (T = 128): W2 0.494 (128x256 s4 dyn) against 0.544 ms, where W13 keeps swap-AB (0.977 against
  // 1.018); perf_history G106. DMOE_FP8_W2_SWAPAB=1: the swap-AB tile for W2 too (A/B runs).
  const bool swap_ab_op = p.op == GroupedGemmOp::kFpropSwiglu || (p.op == GroupedGemmOp::kFprop && fp8_w2_swap_ab());
  if (swap_ab_op && is_decode(p) && token_rows_per_expert(p) <= fp8_swap_ab_max_rows()) return swap_ab_tile(p, sms);
  // Beyond ~220 local experts the scheduler tables push both picks past the shared memory (by 280
  // bytes at 256): the same tile with one stage fewer.
  const int64_t width = p.op == GroupedGemmOp::kDgrad ? p.k : p.n;  // output columns
  const int bn = width % 256 != 0 ? 128 : 256;
  const GroupedGemmConfig preferred = tile(128, bn, bn == 256 ? 4 : 6, p, sms, false, true);
  if (fits(preferred, p)) return preferred;
  return tile(128, bn, preferred.stages - 1, p, sms, false, true);
}

// MXFP8 (FPROP, W13 FPROP, and DGRAD on the transposed weight; per-32 promotion): 128x128 with five
// stages (two scratch buffers leave no registers for 128x256's accumulators; the stages' FP32 scales
// take the sixth stage's shared memory); decode-sized FPROP (is_decode) the swap-AB tile, which
// streams the E4M3 weights as the BF16 one streams BF16 (DGRAD keeps 128x128: not measured there).
GroupedGemmConfig select_mxfp8(const GroupedGemmProblem& p, int sms) {
  const GroupedGemmConfig regular = tile(128, 128, 5, p, sms, false, true);
  if (p.op == GroupedGemmOp::kDgrad || !is_decode(p)) return regular;
  // Training layers' decode-sized FPROPs: padded segments (no tile_rows), the 32-token tile.
  if (!p.tile_rows) return swap_ab_tile(p, sms);
  // Inference, tiles over the real rows: 16 tokens while few experts need a second tile
  // (kNarrowDecodeRowsPerExpert; half the wgmma and fold work of 32, G60), then the 128x128 tile,
  // which runs one M tile per expert up to 128 rows where the swap-AB kernel runs its per-stage work
  // once per 32 tokens. s27 r3-r4, dsv3 dims at EP1, layer ms with the 32-token tile / 128x128: 14
  // rows per expert 3.787 / 3.781, 16 rows 3.783 and 3.778 / 3.773 and 3.675, 24 rows 4.262 and
  // 4.143 / 3.792 and 3.895, 32 rows 5.818 and 5.673 / 3.966 and 3.960 (BF16 layer 5.34-5.53).
  if (routed_rows_per_expert(p) > kNarrowDecodeRowsPerExpert) return regular;
  return swap_ab_tile(p, sms, 16);
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

const char* to_string(ScaleKind scale) {
  switch (scale) {
    case ScaleKind::kNone: return "none";
    case ScaleKind::kE8M0_1x32: return "e8m0_1x32";
    case ScaleKind::kE8M0_32x32: return "e8m0_32x32";
    case ScaleKind::kFP32_1x128: return "fp32_1x128";
    case ScaleKind::kFP32_128x128: return "fp32_128x128";
    case ScaleKind::kE4M3_1x16_FP32Global: return "e4m3_1x16_fp32g";
  }
  return "?";
}

namespace {

// Short element names for format names (to_string(DType) spells torch's names, which are longer
// than a test name wants).
const char* short_name(DType d) {
  switch (d) {
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "f16";
    case DType::kFloat32: return "f32";
    case DType::kInt16: return "i16";
    case DType::kInt32: return "i32";
    case DType::kInt64: return "i64";
    case DType::kFloat8E4M3: return "e4m3";
    case DType::kFloat8E8M0: return "e8m0";
    case DType::kFloat4E2M1x2: return "e2m1x2";
  }
  return "unknown";
}

}  // namespace

std::string OperandFormat::name() const {
  std::string s = short_name(data);
  if (scale != ScaleKind::kNone) s += std::string("_") + to_string(scale);
  if (layout == OperandLayout::kColumnMajor) s += "_col";
  if (layout == OperandLayout::kPackedRows) s += "_packed";
  if (layout == OperandLayout::kExpandedRows) s += "_expanded";
  return s;
}

std::string GroupedGemmConfig::name() const {
  std::string s = std::to_string(block_m) + "x" + std::to_string(block_n) + "x" + std::to_string(block_k) + "_s" +
                  std::to_string(stages);
  if (cluster_m != 1) s += "_c" + std::to_string(cluster_m);
  if (pingpong) s += "_pp";
  if (tma_store) s += "_tma";
  if (dynamic_schedule) s += "_dyn";
  if (!narrow_split) s += "_nosplit";
  if (swap_ab) s += "_swapab";
  if (gather) s += "_gather";
  if (mxfp8_dequant) s += "_dq";
  if (promote_k != 128) s += "_p" + std::to_string(promote_k);
  return s;
}

namespace {

// NVFP4 (inference FPROP and W13 FPROP): always the swap-AB kernels (weights dequantized in the
// consumers' registers); 16- or 32-token tiles when decode-sized (by the routed rows per expert),
// 64 otherwise (half the weight conversions per token). The 128-token tile (a quarter) is picked
// from 128 rows per expert only with DMOE_GEMM_EXPERIMENTAL: one A register set and spilling
// consumers made it slower (G54). Expanded token rows (contexts from 64 routed rows per expert or
// at most 12, memory_plan.h nvfp4_expands_token_rows): the 128-token tile, or the 16-token one at
// decode sizes, whose consumers have the registers the producer warps no longer need and share
// the schedulers with no token-converting warp (G91); its four stages carry the weight scales
// (G131, by TMA since G133).
constexpr int64_t kNvfp4NarrowTileMaxExperts = 717;  // the 256x16 s5 kernel's smem (grouped_gemm_smem_bytes)

GroupedGemmConfig select_nvfp4(const GroupedGemmProblem& p, int sms) {
  const bool narrow = is_decode(p) && routed_rows_per_expert(p) <= kNarrowDecodeRowsPerExpert &&
                      p.e_local <= kNvfp4NarrowTileMaxExperts;
  if (p.a_format == kNvfp4ExpandedRows)  // no token conversion
    return narrow ? swap_ab_tile(p, sms, 16, 4) : swap_ab_tile(p, sms, 128, 2);
  const bool experimental = grouped_gemm_experimental_requested();
  const bool wide = experimental && usable_rows(p) >= 128 * p.e_local;
  // Decode: 16 tokens per tile (the layer's tiles cover each expert's real rows, GroupedGemmCommon::
  // tile_rows; s25 r4) while few experts need a second one (kNarrowDecodeRowsPerExpert), then 32
  // up to the decode bound: the 64-token tile measured slower at 24 rows per expert (s27 r3, layer
  // 3.856 / 3.835 vs 3.154 / 3.181 ms) and 2-3% faster at 32 (4.211 / 4.170 vs 4.282 / 4.308).
  if (!is_decode(p)) return wide ? swap_ab_tile(p, sms, 128, 2) : swap_ab_tile(p, sms, 64, 3);
  // The 16-token tile's five 40 KiB stages leave room for the scheduler tables of at most 717 local
  // experts (8 bytes each); past them the 32-token tile (four 48 KiB stages; fits every e_local the
  // API takes).
  if (narrow) return swap_ab_tile(p, sms, 16, 5);
  return swap_ab_tile(p, sms, 32, 4);
}

GroupedGemmConfig select_default(const GroupedGemmProblem& p, int device_num_sms) {
  if (p.a_format == kNvfp4Rows || p.a_format == kNvfp4ExpandedRows) return select_nvfp4(p, device_num_sms);
  if (p.a_format == kFp8BlockwiseRows || p.a_format == kFp8BlockwiseRowsT) {
    GroupedGemmConfig c = select_fp8_blockwise(p, device_num_sms);
    if (!c.swap_ab) c.promote_k = p.promote_k;  // (swap-AB promotes every 32)
    return c;
  }
  if (p.a_format == kMxfp8Rows) return select_mxfp8(p, device_num_sms);
  switch (p.op) {
    case GroupedGemmOp::kFprop: return select_fprop(p, device_num_sms);
    case GroupedGemmOp::kFpropSwiglu: return select_fprop_swiglu(p, device_num_sms);
    case GroupedGemmOp::kDgrad: return select_dgrad(p, device_num_sms);
    case GroupedGemmOp::kWgrad: return select_wgrad(p, device_num_sms);
  }
  return tile(128, 256, 4, p, device_num_sms);
}

}  // namespace

// A stage row is one 128-byte swizzle row of the contraction, so the k block holds 1024 bits /
// value bits of A: 64 BF16, 128 FP8, 256 FP4. NVFP4 kernels stage 128 packed weight bytes (256
// values) whatever form the tokens take (expanded FP16 rows included).
int grouped_gemm_block_k(const OperandFormat& a, const OperandFormat& b) {
  if (b == kNvfp4Weight) return 256;
  const int bits = a.data == DType::kFloat4E2M1x2 ? 4 : 8 * static_cast<int>(element_size(a.data));
  return 1024 / bits;
}

bool grouped_gemm_experimental_requested() {
  static const bool on = core::env_flag("DMOE_GEMM_EXPERIMENTAL");
  return on;
}

bool mxfp8_narrow_split_enabled() {
  static const bool on = core::env_int64_or("DMOE_MXFP8_NARROW_SPLIT", 1) != 0;
  return on;
}

// DMOE_GEMM_EXPERIMENTAL=1 (and not DMOE_GEMM_LEGACY): the schemes still waiting for their
// first measurement -- the dynamic tile schedule (G9) for every M- and K-grouped op (swap-AB decode
// keeps the static one: its tiles all cost the same), and for short-K WGRAD the deep-staging
// ping-pong kernel (G10) -- and the NVFP4 128-token tile, measured slower than the 64-token one
// (select_nvfp4, G54), kept for A/B runs. Without the variable the picks are exactly the measured
// ones. The 2-CTA
// cluster kernels (`_c2`, G15) are never picked: measured slower than or equal to the unclustered
// ones at dsv3_prefill (FPROP and WGRAD); they stay compiled for A/B runs and overrides.
GroupedGemmConfig select_grouped_gemm_config(const GroupedGemmProblem& p, int device_num_sms) {
  GroupedGemmConfig c = select_default(p, device_num_sms);
  // The knob's A/B switch reaches the MXFP8 128x128 picks only (the other kernels ignore the flag, and
  // a "_nosplit" name on them would misname the kernel that runs).
  c.narrow_split = mxfp8_narrow_split_enabled() || p.a_format != kMxfp8Rows || c.swap_ab;
  // G9 measured (2026-11-30 A/B, dsv3_prefill, same run): the dynamic schedule makes FPROP faster
  // on every routing (W13 1.07-1.33x, W2 1.05-1.34x; random top-k rows 1.33x) with balanced rows
  // unchanged. DGRAD: 1.01-1.73x in five of six A/B cases (0.89 once, where the same run's sweep
  // measured 1.20x), geometric mean 1.15x (G13). WGRAD (G17, three interleaved 5-round A/B runs
  // of the cooperative 128x256 TMA-store kernel at dsv3_prefill): FP32 output 1.00-1.18x in all 14
  // cases -> dynamic; BF16 output written 0.92-1.14x, the sign changing between runs -> static.
  // BF16 output accumulated (BF16 TMA reduce-add; session 5, 3 interleaved rounds, G21): dynamic
  // 0.87-0.91x at dsv3_prefill (W13 5.75 vs 6.57 ms, W2 2.85 vs 3.28, balanced and random), 0.96-1.00x
  // at qwen3_30b, and the dsv3 layer's forward+backward 0.975x -> dynamic. The other WGRAD picks
  // (ping-pong for odd widths, padded fallbacks) keep the static schedule (unmeasured).
  // The deep-staging ping-pong fallback for many experts (select_wgrad) likewise: accumulating at
  // dsv3_prefill EP1, dynamic 11.1 vs 12.3 ms (W13) and 5.4 vs 6.3 (W2), G36.
  const bool wgrad_tma_dyn = p.op == GroupedGemmOp::kWgrad && c.tma_store && (!c.pingpong || deep_staging(c, p.op)) &&
                             (p.out_dtype == DType::kFloat32 || p.accumulate);
  if (!legacy_requested() && !c.swap_ab &&
      (p.op == GroupedGemmOp::kFprop || p.op == GroupedGemmOp::kFpropSwiglu || p.op == GroupedGemmOp::kDgrad ||
       wgrad_tma_dyn))
    c.dynamic_schedule = true;
  if (!grouped_gemm_experimental_requested() || legacy_requested()) return c;
  // G10: short-K WGRAD ping-pong -> the deep-staging kernel (s4, 4 staging buffers per warpgroup).
  if (p.op == GroupedGemmOp::kWgrad && c.pingpong && c.tma_store && c.block_n == 128) {
    GroupedGemmConfig deep = c;
    deep.stages = 4;
    if (fits(deep, p)) c = deep;
  }
  // G9: the dynamic tile schedule.
  if (!c.swap_ab) c.dynamic_schedule = true;
  return c;
}

}  // namespace dist_moe
