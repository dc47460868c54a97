// Every GPU block quantizer (src/quant) against the HBM ceiling for the same bytes, at the per-rank
// sizes of the reference workloads (EP2 by default, balanced rows), on random inputs:
//   activations  x_TD (T rows, the inference source) and the gathered rows x_MD (M = T*K, training)
//     mxfp8_rows, mxfp8_rows_cols (both orientations, one read), mxfp8_rows_cols_g (the same from a
//     row-pointer table to x's rows shuffled: routing's gather_src), fp8bw_rows, fp8bw_rows_cols,
//     nvfp4_token_rows (packed rows), mxfp8_dequant_cols (the columns back to BF16 rows [M, D], the
//     BF16 WGRAD's operand: reads 1 + 1/32, writes 2 bytes per element), mxfp8_cols_shared (the
//     columns at shared scales per 128 tokens, the FP8-blockwise WGRAD's operand: reads 1 + 1/32,
//     writes 1 + 1/32 bytes per element), nvfp4_expand_rows (packed
//     NVFP4 rows [M] to the FP16 rows of the prefill NVFP4 GEMMs, as h2) and nvfp4_expand_rows_g (the
//     same through a row-pointer table to the T token rows, each token K times, as x); then, not in
//     the summary, the layer's quantize_x form of both rows + columns quantizers (gathered rows,
//     compact columns: mxfp8_rows_cols_gc, fp8bw_rows_cols_gc, and mxfp8s_rows_cols_gc: FP8 blockwise's
//     kernel with MXFP8's scale rule, the MXFP8 training layer's since G152), and the last two on the
//     layer's own gather (_gk: T token rows, each read by about K routes; "moved" counts each row once)
//   weights      the rank's W13 [E/ep, 2F, D]
//     mxfp8_w_train (32x32 tiles, FPROP + DGRAD scales: the quantizer without the transposed copy),
//     mxfp8_w_train_t (the same + the transposed copy [E, K, N] DGRAD reads: the prepared training
//     weight, prepare_block_scaled_weight), mxfp8_w_infer (1x32 rows),
//     fp8bw_w (128x128 + the transposed copy), nvfp4_w (reads the weight twice: amax, then quantize)
//   the backward's dxy  SwiGLU backward fused with the rows + columns quantization (mxfp8_fused,
//     fp8bw_fused) next to the two passes it replaces and the BF16 SwiGLU backward alone, then
//     mxfp8s_fused (FP8 blockwise's fused kernel with MXFP8's scale rule: the MXFP8 training layer's dxy)
//
//   bench_quantize [--shapes dsv3_prefill,qwen3_30b] [--ep N] [--iters N] [--sustain-ms MS] [--regions]
//   (--regions: also both rows + columns quantizers and both fused dxy kernels at every region
//   shape, rows "rt x rf" tiles; --streams: plain streaming kernels of the 1:1 and 1:2 read:write
//   mixes, each mix's ceiling; --cases a,b: only the named cases, e.g. one kernel under ncu)
//
// Ceiling: a device-to-device cudaMemcpyAsync of half the bytes the kernel moves (so the copy reads
// and writes the same total), timed right after the kernel in the same run; "x copy" = copy time /
// kernel time (1.0 = at the copy's rate; the target is 0.85). "moved" counts every byte the kernel
// reads or writes (nvfp4_w: the weight twice), so a kernel at the copy's rate is at HBM speed.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "dist_moe/check.h"
#include "dist_moe/prepare_weight.h"
#include "dist_moe/quantize_rows.h"
#include "dist_moe/workloads.h"
#include "kernels/swiglu.h"
#include "quant/quantize.h"
#include "testing/bench_args.h"
#include "testing/device_buffer.h"
#include "testing/event_timing.h"
#include "testing/main_guard.h"
#include "testing/random_fill.h"

namespace {

using namespace dist_moe;
using testing::DeviceBuffer;

int g_iters = 20;
int g_ep = 2;
bool g_regions = false;  // --regions: the rows + columns quantizers at every region shape
bool g_streams = false;  // --streams: plain streaming kernels of each read:write mix (the mix's ceiling)
bool g_layouts = false;  // --layouts: the MXFP8 rows + columns quantizer's scale layouts side by side
std::set<std::string> g_cases;  // --cases a,b: only the named cases run (one kernel under a profiler)
bool selected(const char* name) { return g_cases.empty() || g_cases.count(name) != 0; }
double g_sustain_ms = 100;

double time_ms(const std::function<void()>& fn, cudaStream_t s) {
  testing::run_for_ms(fn, g_sustain_ms, s);
  return testing::median_event_ms(fn, g_iters, s).ms;
}

struct Case {
  const char* name;
  double moved_bytes;
  std::function<void()> fn;
};

struct Row {
  std::string name;
  double mb, ms, copy_ms;
};
std::vector<Row> g_rows;
struct FusedRow {
  std::string shape;
  double mxfp8, fp8bw;  // the two passes' time / the fused kernel's
};
std::vector<FusedRow> g_fused;

// summarize: the rows go into the closing summary (the region sweep's do not).
// Returns each case's row (its title's first word and the case name, MB, ms, copy ms).
std::vector<Row> run_cases(const std::string& title, const std::vector<Case>& cases, cudaStream_t s,
                           bool summarize = true) {
  std::vector<Row> rows;
  double most = 0;
  for (const Case& c : cases) most = std::max(most, c.moved_bytes);
  DeviceBuffer<uint8_t> src(static_cast<size_t>(most / 2) + 16), dst(static_cast<size_t>(most / 2) + 16);
  testing::fill_uniform_bf16(src.get(), static_cast<int64_t>(src.size() / 2), 99, 1.0f, s);
  std::printf("\n%s\n%-18s %10s %10s %10s %10s %8s\n", title.c_str(), "quantizer", "MB moved", "ms", "GB/s", "copy ms",
              "x copy");
  for (const Case& c : cases) {
    if (!selected(c.name)) continue;
    const double ms = time_ms(c.fn, s);
    const size_t half = static_cast<size_t>(c.moved_bytes / 2) & ~size_t{15};
    const double copy_ms =
        time_ms([&] { DMOE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), half, cudaMemcpyDeviceToDevice, s)); }, s);
    std::printf("%-18s %10.1f %10.4f %10.1f %10.4f %7.2fx\n", c.name, c.moved_bytes / 1e6, ms,
                c.moved_bytes / ms / 1e6, copy_ms, copy_ms / ms);
    rows.push_back({title.substr(0, title.find(' ')) + " " + c.name, c.moved_bytes / 1e6, ms, copy_ms});
    if (summarize) g_rows.push_back(rows.back());
  }
  DMOE_CUDA_CHECK(cudaStreamSynchronize(s));
  return rows;
}

// The ceiling of a read:write mix, next to the copy: a grid-stride kernel whose lanes read
// kInBytes (8 or 16) and write 16 bytes each, consecutive lanes on consecutive addresses (every
// warp access whole lines): kInBytes = 8: each byte zero-extended to 16 bits, the 1:2 mix of the
// column dequantizer and the NVFP4 row expansion; 16: a copy.
template <int kInBytes>
__global__ void __launch_bounds__(256) stream_kernel(const uint8_t* in, uint4* out, int64_t units) {
  constexpr int kLoads = 4;
  using In = std::conditional_t<kInBytes == 8, uint2, uint4>;
  const auto* src = reinterpret_cast<const In*>(in);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * 256 * kLoads + threadIdx.x; base < units;
       base += static_cast<int64_t>(gridDim.x) * 256 * kLoads) {
    In v[kLoads];
#pragma unroll
    for (int j = 0; j < kLoads; ++j) v[j] = base + j * 256 < units ? __ldg(src + base + j * 256) : In{};
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int64_t i = base + j * 256;
      if (i >= units) break;
      if constexpr (kInBytes == 16)
        out[i] = v[j];
      else
        out[i] = make_uint4(__byte_perm(v[j].x, 0, 0x4140), __byte_perm(v[j].x, 0, 0x4342),
                            __byte_perm(v[j].y, 0, 0x4140), __byte_perm(v[j].y, 0, 0x4342));
    }
  }
}

void run_streams(const Workload& w, cudaStream_t s) {
  const int64_t T = w.tokens, D = w.hidden, K = w.top_k, E = w.experts / g_ep;
  const int64_t cap = ((T * K / E + 127) / 128 * 128) * E;
  const int64_t bytes = cap * D;  // the dequantizer's input: cap x D bytes
  DeviceBuffer<uint8_t> in(bytes);
  DeviceBuffer<uint4> out(bytes / 8);  // 2 bytes out per byte in
  testing::fill_uniform_bf16(reinterpret_cast<uint16_t*>(in.get()), bytes / 2, 5, 1.0f, s);
  int sms = 0;
  DMOE_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned grid = static_cast<unsigned>(sms) * 8;
  const std::vector<Case> cases = {
      {"stream_r1_w1", 2.0 * bytes,
       [&] {
         stream_kernel<16><<<grid, 256, 0, s>>>(in.get(), out.get(), bytes / 16);
         DMOE_CUDA_CHECK(cudaGetLastError());
       }},
      {"stream_r1_w2", 3.0 * bytes,
       [&] {
         stream_kernel<8><<<grid, 256, 0, s>>>(in.get(), out.get(), bytes / 8);
         DMOE_CUDA_CHECK(cudaGetLastError());
       }},
  };
  run_cases(w.name + " streaming kernels (M x D bytes in)", cases, s, false);
}

// Every region shape 2^la x 2^lb of one tile kernel (at most 8 tiles a side and max_tiles in all),
// rows "a x b"; not in the closing summary.
void run_region_sweep(const std::string& title, int max_tiles, double moved_bytes,
                      const std::function<void(int, int)>& launch, cudaStream_t s) {
  std::vector<std::string> names;
  names.reserve(16);  // the cases keep pointers to the names
  std::vector<Case> cases;
  for (int la = 0; la <= 3; ++la)
    for (int lb = 0; lb <= 3 && (1 << (la + lb)) <= max_tiles; ++lb) {
      names.push_back(std::to_string(1 << la) + "x" + std::to_string(1 << lb));
      cases.push_back({names.back().c_str(), moved_bytes, [&launch, la, lb] { launch(la, lb); }});
    }
  run_cases(title, cases, s, false);
}

void run_activations(const Workload& w, cudaStream_t s) {
  const int64_t T = w.tokens, D = w.hidden, K = w.top_k, E = w.experts / g_ep;
  const int64_t M = T * K;  // balanced: M / E rows per local expert
  const int64_t rows_per_expert = (M / E + 127) / 128 * 128, cap = rows_per_expert * E;
  DeviceBuffer<uint16_t> x(cap * D);
  testing::fill_uniform_bf16(x.get(), cap * D, 1, 4.0f, s);
  std::vector<int32_t> counts(E, static_cast<int32_t>(M / E)), offsets(E + 1);
  for (int64_t e = 0; e <= E; ++e) offsets[e] = static_cast<int32_t>(e * rows_per_expert);
  DeviceBuffer<int32_t> dcounts(counts), doffsets(offsets);
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(E)};
  DeviceBuffer<uint8_t> q(cap * D), qt(cap * D), s8(cap * D / 32), st8(cap * D / 32);
  DeviceBuffer<float> sf(cap * D / 128), stf(cap * D / 128);
  const int64_t packed = nvfp4_packed_row_bytes(D);
  DeviceBuffer<uint8_t> rows_nv(T * packed), rows_nv_m(cap * packed);
  DeviceBuffer<float> token_scale_inv(cap);
  DeviceBuffer<uint16_t> y(cap * D);
  DeviceBuffer<int32_t> padded_counts(E);
  // The dequantizer's input: this x's columns (qt, st8), written once here; mxfp8_rows_cols rewrites
  // the same bytes.
  quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, quant::Mxfp8Out{}, {qt.get(), cap, st8.get(), 1, D}, s);
  // The gathered twin of x: a row-pointer table (as routing's gather_src) to x's rows in a shuffled
  // order, nullptr for the padding rows.
  std::vector<uint64_t> order(cap), table(cap, 0);
  for (int64_t m = 0; m < cap; ++m) order[m] = static_cast<uint64_t>(m);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(7));
  // nv_table: the same order over the T packed NVFP4 token rows (each routed K times).
  std::vector<uint64_t> nv_table(cap, 0);
  for (int64_t e = 0; e < E; ++e)
    for (int64_t r = 0; r < counts[e]; ++r) {
      const int64_t m = offsets[e] + r;
      table[m] = reinterpret_cast<uint64_t>(x.get() + static_cast<int64_t>(order[m]) * D);
      nv_table[m] = reinterpret_cast<uint64_t>(rows_nv.get() + static_cast<int64_t>(order[m] % T) * packed);
    }
  // The layer's own gather, for the quantize_x form's _gk rows: the T token rows, each read by about K
  // routes (x's dispatch-window rows, grad_out's owner rows), in token order within each expert, as the
  // layer's routing places them (routing.cu: the stable order expert, source rank, token, k). A shuffled
  // order inside each expert, until s76, hid what the quantizers' level order (G157) gains in the layer.
  std::vector<uint64_t> token_table(cap, 0);
  for (int64_t e = 0; e < E; ++e) {
    std::vector<int64_t> tokens;
    for (int64_t r = 0; r < counts[e]; ++r) tokens.push_back(static_cast<int64_t>(order[offsets[e] + r] % T));
    std::sort(tokens.begin(), tokens.end());
    for (int64_t r = 0; r < counts[e]; ++r)
      token_table[offsets[e] + r] = reinterpret_cast<uint64_t>(x.get() + tokens[r] * D);
  }
  DeviceBuffer<uint64_t> row_ptrs(table), nv_row_ptrs(nv_table), token_row_ptrs(token_table);
  // NVFP4 packed rows: the T token rows and M rows of their own (nvfp4_expand_rows' dense input).
  quantize_nvfp4_token_rows(x.get(), T, D, D, rows_nv.get(), packed, s);
  quantize_nvfp4_token_rows(x.get(), cap, D, D, rows_nv_m.get(), packed, s);
  quant::Bf16Matrix x_gathered{nullptr, cap, D, 0, reinterpret_cast<const void* const*>(row_ptrs.get())};
  quant::Bf16Matrix x_routed{nullptr, cap, D, 0, reinterpret_cast<const void* const*>(token_row_ptrs.get())};
  const double xT = double(T * D) * 2, xM = double(cap * D) * 2;
  const double mx_rows_cols = xM + 2.0 * (cap * D + cap * D / 32), bw_rows_cols = xM + 2.0 * (cap * D + cap * D / 128 * 4);
  // The layer's MXFP8 row bundles: scales as k-block-major words (G86; D % 128 == 0 at every shape).
  quant::Mxfp8Out mx_word_rows{q.get(), D, s8.get(), 0, 0};
  mx_word_rows.scale_word_ld = cap;
  const std::vector<Case> cases = {
      {"mxfp8_rows", xT + T * D + T * D / 32,
       [&] { quant::mxfp8_quantize_rows({x.get(), T, D, D}, {q.get(), D, s8.get(), D / 32, 1}, s); }},
      {"mxfp8_rows_cols", mx_rows_cols,
       [&] {
         quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, mx_word_rows, {qt.get(), cap, st8.get(), 1, D},
                                         s);
       }},
      {"mxfp8_rows_cols_g", 8.0 * cap + mx_rows_cols,
       [&] {
         quant::mxfp8_quantize_rows_cols(x_gathered, groups, mx_word_rows, {qt.get(), cap, st8.get(), 1, D}, s);
       }},
      {"fp8bw_rows", xT + T * D + T * D / 128 * 4.0,
       [&] { quant::fp8_blockwise_quantize_rows({x.get(), T, D, D}, {q.get(), D, sf.get(), 1, T}, s); }},
      {"fp8bw_rows_cols", bw_rows_cols,
       [&] {
         quant::fp8_blockwise_quantize_rows_cols({x.get(), cap, D, D}, groups, {q.get(), D, sf.get(), 1, cap},
                                                 {qt.get(), cap, stf.get(), 1, D}, s);
       }},
      {"nvfp4_token_rows", xT + double(T * packed),
       [&] { quantize_nvfp4_token_rows(x.get(), T, D, D, rows_nv.get(), packed, s); }},
      {"mxfp8_dequant_cols", double(cap * D) + cap * D / 32 + xM,
       [&] {
         quant::mxfp8_dequantize_columns({qt.get(), cap, st8.get(), 1, D}, groups, {y.get(), cap, D, D}, s);
       }},
      // The MXFP8 WGRAD's operand at shared scales (G149): the columns read (data + codes), the same
      // bytes written with FP32 scales per 128 tokens; the groups here are whole 128s already.
      {"mxfp8_cols_shared", 2.0 * cap * D + cap * D / 32 + cap * D / 128 * 4.0,
       [&] {
         quant::mxfp8_columns_to_fp8_blockwise({qt.get(), cap, st8.get(), 1, D}, groups, D, cap,
                                               {q.get(), cap, stf.get(), 1, D}, padded_counts.get(), s);
       }},
      {"nvfp4_expand_rows", double(cap * packed) + xM + 4.0 * cap,
       [&] {
         quant::nvfp4_expand_rows(nullptr, rows_nv_m.get(), packed, groups, cap, D, y.get(), token_scale_inv.get(), s);
       }},
      {"nvfp4_expand_rows_g", 8.0 * cap + double(cap * packed) + xM + 4.0 * cap,
       [&] {
         quant::nvfp4_expand_rows(reinterpret_cast<const void* const*>(nv_row_ptrs.get()), nullptr, 0, groups, cap, D,
                                  y.get(), token_scale_inv.get(), s);
       }},
  };
  char title[256];
  std::snprintf(title, sizeof title, "%s activations (per rank at EP%d: T=%lld D=%lld, M=%lld gathered rows)",
                w.name.c_str(), g_ep, (long long)T, (long long)D, (long long)cap);
  run_cases(title, cases, s);
  {
    // The layer's quantize_x: gathered rows, the columns as the saved compact bundle (a kernel
    // instantiation of its own, whose ring sat 16 bytes past a 128-byte line until G109). Not in the
    // summary, whose _g rows write strided columns.
    DeviceBuffer<uint8_t> qc(quant::mxfp8_compact_columns_bytes(D, cap));  // FP8 blockwise's size too
    quant::Mxfp8Out mx_c;
    mx_c.q = qc.get();
    mx_c.compact = true;
    quant::Fp8BlockwiseOut bw_c;
    bw_c.q = qc.get();
    bw_c.compact = true;
    // FP8 blockwise's kernel into the row bundle and bw_c: the _gc and _gk rows differ in x and the rule.
    const auto bw_compact = [&](const quant::Bf16Matrix& x, quant::Fp8BlockScale rule) {
      quant::fp8_blockwise_quantize_rows_cols(x, groups, {q.get(), D, sf.get(), 1, cap}, bw_c, s, rule);
    };
    constexpr auto kAmax = quant::Fp8BlockScale::kAmaxOver448, kShared = quant::Fp8BlockScale::kMxfp8Shared;
    const std::vector<Case> layer_form = {
        {"mxfp8_rows_cols_gc", 8.0 * cap + mx_rows_cols,
         [&] { quant::mxfp8_quantize_rows_cols(x_gathered, groups, mx_word_rows, mx_c, s); }},
        {"fp8bw_rows_cols_gc", 8.0 * cap + bw_rows_cols, [&] { bw_compact(x_gathered, kAmax); }},
        // The MXFP8 training layer's quantize_x since G152: FP8 blockwise's kernel with MXFP8's scale rule.
        {"mxfp8s_rows_cols_gc", 8.0 * cap + bw_rows_cols, [&] { bw_compact(x_gathered, kShared); }},
    };
    run_cases(w.name + " layer quantize_x (gathered rows, compact columns)", layer_form, s, false);
    // The same kernels on the layer's gather (token_table: T rows, each about K times). "moved" counts
    // each token row once -- the bytes HBM must move if the L2 serves the other reads -- so "x copy"
    // here is the kernel against its floor, not against the bytes it reads (perf_history G155).
    const double routed_floor = 8.0 * cap + xT + (bw_rows_cols - xM);
    const std::vector<Case> routed_form = {
        {"fp8bw_rows_cols_gk", routed_floor, [&] { bw_compact(x_routed, kAmax); }},
        {"mxfp8s_rows_cols_gk", routed_floor, [&] { bw_compact(x_routed, kShared); }},
    };
    run_cases(w.name + " layer quantize_x on the layer's gather (T token rows, K reads each; bytes: each row once)",
              routed_form, s, false);
  }
  if (g_layouts) {
    // MXFP8 scale layouts (G82, G86): the rows + columns quantizer's column scales feature-major
    // [D, M/32] against token-block-major [M/32, D] (the compact bundles' layout since session 37,
    // FP8 blockwise's), its row scales [M, D/32] against k-block-major words (the layer's since
    // session 37) and [D/32, M], and the column dequantizer reading either column layout (timing
    // only: the bytes are the block-major columns').
    const std::vector<Case> layouts = {
        {"cols_fm", mx_rows_cols,
         [&] {
           quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, {q.get(), D, s8.get(), D / 32, 1},
                                           {qt.get(), cap, st8.get(), cap / 32, 1}, s);
         }},
        {"cols_bm", mx_rows_cols,
         [&] {
           quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, {q.get(), D, s8.get(), D / 32, 1},
                                           {qt.get(), cap, st8.get(), 1, D}, s);
         }},
        {"cols_bm_rows_words", mx_rows_cols,
         [&] {
           quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, mx_word_rows,
                                           {qt.get(), cap, st8.get(), 1, D}, s);
         }},
        {"g_cols_bm_rows_words", 8.0 * cap + mx_rows_cols,
         [&] {
           quant::mxfp8_quantize_rows_cols(x_gathered, groups, mx_word_rows, {qt.get(), cap, st8.get(), 1, D}, s);
         }},
        {"cols_bm_rows_bm", mx_rows_cols,
         [&] {
           quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, {q.get(), D, s8.get(), 1, cap},
                                           {qt.get(), cap, st8.get(), 1, D}, s);
         }},
        {"g_cols_fm", 8.0 * cap + mx_rows_cols,
         [&] {
           quant::mxfp8_quantize_rows_cols(x_gathered, groups, {q.get(), D, s8.get(), D / 32, 1},
                                           {qt.get(), cap, st8.get(), cap / 32, 1}, s);
         }},
        {"g_cols_bm", 8.0 * cap + mx_rows_cols,
         [&] {
           quant::mxfp8_quantize_rows_cols(x_gathered, groups, {q.get(), D, s8.get(), D / 32, 1},
                                           {qt.get(), cap, st8.get(), 1, D}, s);
         }},
        {"cols_only_fm", xM + cap * D + cap * D / 32,
         [&] {
           quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, quant::Mxfp8Out{},
                                           {qt.get(), cap, st8.get(), cap / 32, 1}, s);
         }},
        {"cols_only_bm", xM + cap * D + cap * D / 32,
         [&] {
           quant::mxfp8_quantize_rows_cols({x.get(), cap, D, D}, groups, quant::Mxfp8Out{},
                                           {qt.get(), cap, st8.get(), 1, D}, s);
         }},
        {"dequant_cols_fm", double(cap * D) + cap * D / 32 + xM,
         [&] {
           quant::mxfp8_dequantize_columns({qt.get(), cap, st8.get(), cap / 32, 1}, groups, {y.get(), cap, D, D}, s);
         }},
        {"dequant_cols_bm", double(cap * D) + cap * D / 32 + xM,
         [&] {
           quant::mxfp8_dequantize_columns({qt.get(), cap, st8.get(), 1, D}, groups, {y.get(), cap, D, D}, s);
         }},
    };
    run_cases(w.name + " MXFP8 scale layouts (fm: feature-major, bm: block-major)", layouts, s, false);
    // The gathered rows at every region shape: a CTA's first copies wait for its row pointers (G83).
    run_region_sweep(w.name + " mxfp8_rows_cols_g by region (tokens x features tiles)", 8, 8.0 * cap + mx_rows_cols,
                     [&](int lt, int lf) {
                       quant::mxfp8_quantize_rows_cols_in_regions(x_gathered, groups, {q.get(), D, s8.get(), D / 32, 1},
                                                                  {qt.get(), cap, st8.get(), 1, D}, lt, lf, s);
                     },
                     s);
    run_region_sweep(w.name + " fp8bw_rows_cols_g by region (tokens x features tiles)", 8, 8.0 * cap + bw_rows_cols,
                     [&](int lt, int lf) {
                       quant::fp8_blockwise_quantize_rows_cols_in_regions(x_gathered, groups,
                                                                          {q.get(), D, sf.get(), 1, cap},
                                                                          {qt.get(), cap, stf.get(), 1, D}, lt, lf, s);
                     },
                     s);
  }
  if (!g_regions) return;
  // Both rows + columns quantizers at every region shape (rt x rf tiles, rt * rf <= 8); the shape
  // the launcher picks is the plain case above.
  run_region_sweep(w.name + " mxfp8_rows_cols by region (tokens x features tiles)", 8, mx_rows_cols,
                   [&](int lt, int lf) {
                     quant::mxfp8_quantize_rows_cols_in_regions({x.get(), cap, D, D}, groups,
                                                                {q.get(), D, s8.get(), D / 32, 1},
                                                                {qt.get(), cap, st8.get(), 1, D}, lt, lf, s);
                   },
                   s);
  run_region_sweep(w.name + " fp8bw_rows_cols by region (tokens x features tiles)", 8, bw_rows_cols,
                   [&](int lt, int lf) {
                     quant::fp8_blockwise_quantize_rows_cols_in_regions({x.get(), cap, D, D}, groups,
                                                                        {q.get(), D, sf.get(), 1, cap},
                                                                        {qt.get(), cap, stf.get(), 1, D}, lt, lf, s);
                   },
                   s);
  // One orientation at a time through the same kernel (1 x 2 regions): where the formats differ.
  const double rows_mx = xM + cap * D + cap * D / 32, rows_bw = xM + cap * D + cap * D / 128 * 4;
  const std::vector<Case> split = {
      {"mxfp8_rows_only", rows_mx,
       [&] {
         quant::mxfp8_quantize_rows_cols_in_regions({x.get(), cap, D, D}, groups, {q.get(), D, s8.get(), D / 32, 1},
                                                    quant::Mxfp8Out{}, 0, 1, s);
       }},
      {"mxfp8_cols_only", rows_mx,
       [&] {
         quant::mxfp8_quantize_rows_cols_in_regions({x.get(), cap, D, D}, groups, quant::Mxfp8Out{},
                                                    {qt.get(), cap, st8.get(), 1, D}, 0, 1, s);
       }},
      {"fp8bw_rows_only", rows_bw,
       [&] {
         quant::fp8_blockwise_quantize_rows_cols_in_regions({x.get(), cap, D, D}, groups,
                                                            {q.get(), D, sf.get(), 1, cap}, quant::Fp8BlockwiseOut{}, 0,
                                                            1, s);
       }},
      {"fp8bw_cols_only", rows_bw,
       [&] {
         quant::fp8_blockwise_quantize_rows_cols_in_regions({x.get(), cap, D, D}, groups, quant::Fp8BlockwiseOut{},
                                                            {qt.get(), cap, stf.get(), 1, D}, 0, 1, s);
       }},
  };
  run_cases(w.name + " one orientation (1 x 2 regions)", split, s, false);
}

// The backward's dxy: SwiGLU backward fused with the rows + columns quantization
// (quant::*_swiglu_backward_quantize: reads h1 [M, 2F] and grad_h2 [M, F], writes E4M3 rows and
// columns of [M, 2F]) next to the two passes it replaces (kernels::swiglu_backward writes dxy in
// BF16, then *_quantize_rows_cols reads it back), alternated in one run; "fused x two passes" =
// the two passes' time / the fused time. MXFP8 columns compact, as the layer writes them.
void run_swiglu_backward(const Workload& w, cudaStream_t s) {
  const int64_t T = w.tokens, F = w.intermediate, K = w.top_k, E = w.experts / g_ep;
  const int64_t M = T * K, rows_per_expert = (M / E + 127) / 128 * 128, cap = rows_per_expert * E, C = 2 * F;
  DeviceBuffer<uint16_t> h1(cap * C), gh2(cap * F), dxy(cap * C);
  testing::fill_uniform_bf16(h1.get(), cap * C, 11, 4.0f, s);
  testing::fill_uniform_bf16(gh2.get(), cap * F, 12, 0.01f, s);
  std::vector<int32_t> counts(E, static_cast<int32_t>(M / E)), offsets(E + 1);
  for (int64_t e = 0; e <= E; ++e) offsets[e] = static_cast<int32_t>(e * rows_per_expert);
  DeviceBuffer<int32_t> dcounts(counts), doffsets(offsets);
  const quant::RowGroups groups{dcounts.get(), doffsets.get(), static_cast<int32_t>(E)};
  const kernels::ExpertRowsView rows_view{dcounts.get(), doffsets.get(), static_cast<int32_t>(E), cap};
  DeviceBuffer<uint8_t> q(cap * C), qt(quant::mxfp8_compact_columns_bytes(C, cap)), s8(cap * C / 32);
  DeviceBuffer<float> sf(cap * C / 128), stf(cap * C / 128);
  quant::Mxfp8Out mx_cols;
  mx_cols.q = qt.get();
  mx_cols.compact = true;
  quant::Mxfp8Out mx_rows{q.get(), C, s8.get(), 0, 0};  // the layer's: k-block-major scale words
  mx_rows.scale_word_ld = cap;
  const quant::Fp8BlockwiseOut bw_rows{q.get(), C, sf.get(), 1, cap}, bw_cols{qt.get(), cap, stf.get(), 1, C};
  const activation::SwigluParams p;
  const quant::SwigluBackwardSource src{h1.get(), gh2.get(), cap, F, p};
  const double rf = double(cap) * F;
  const double swiglu = 10 * rf, out_mx = 4 * rf + 4 * rf / 32, out_bw = 4 * rf + 4 * rf / 128 * 4;
  auto swiglu_bwd = [&] { kernels::swiglu_backward(h1.get(), gh2.get(), dxy.get(), F, rows_view, p, s); };
  const std::vector<Case> cases = {
      {"mxfp8_fused", 6 * rf + out_mx, [&] { quant::mxfp8_swiglu_backward_quantize(src, groups, mx_rows, mx_cols, s); }},
      {"mxfp8_two_passes", swiglu + 4 * rf + out_mx,
       [&] {
         swiglu_bwd();
         quant::mxfp8_quantize_rows_cols({dxy.get(), cap, C, C}, groups, mx_rows, mx_cols, s);
       }},
      {"fp8bw_fused", 6 * rf + out_bw,
       [&] { quant::fp8_blockwise_swiglu_backward_quantize(src, groups, bw_rows, bw_cols, s); }},
      {"fp8bw_two_passes", swiglu + 4 * rf + out_bw,
       [&] {
         swiglu_bwd();
         quant::fp8_blockwise_quantize_rows_cols({dxy.get(), cap, C, C}, groups, bw_rows, bw_cols, s);
       }},
      {"swiglu_bwd_bf16", swiglu, swiglu_bwd},
      // The MXFP8 training layer's dxy since G152: the FP8-blockwise kernel with MXFP8's scale rule.
      {"mxfp8s_fused", 6 * rf + out_bw,
       [&] {
         quant::fp8_blockwise_swiglu_backward_quantize(src, groups, bw_rows, bw_cols, s, quant::Fp8BlockScale::kMxfp8Shared);
       }},
  };
  char title[256];
  std::snprintf(title, sizeof title, "%s dxy (per rank at EP%d: M=%lld rows, F=%lld)", w.name.c_str(), g_ep,
                (long long)cap, (long long)F);
  const std::vector<Row> r = run_cases(title, cases, s, false);
  if (r.size() != cases.size()) return;  // --cases left some out
  const double mx = r[1].ms / r[0].ms, bw = r[3].ms / r[2].ms;
  std::printf("fused x two passes: mxfp8 %.2fx, fp8bw %.2fx\n", mx, bw);
  g_rows.push_back(r[0]);  // the fused kernels are quantizers: in the summary
  g_rows.push_back(r[2]);
  g_rows.push_back(r[5]);
  g_fused.push_back({w.name, mx, bw});
  if (!g_regions) return;
  run_region_sweep(w.name + " mxfp8_fused by region (tokens x features tiles)", 8, cases[0].moved_bytes,
                   [&](int lt, int lf) {
                     quant::mxfp8_swiglu_backward_quantize_in_regions(src, groups, mx_rows, mx_cols, lt, lf, s);
                   },
                   s);
  run_region_sweep(w.name + " fp8bw_fused by region (tokens x features tiles)", 8, cases[2].moved_bytes,
                   [&](int lt, int lf) {
                     quant::fp8_blockwise_swiglu_backward_quantize_in_regions(src, groups, bw_rows, bw_cols, lt, lf, s);
                   },
                   s);
}

void run_weights(const Workload& w, cudaStream_t s) {
  const int64_t E = w.experts / g_ep, N = 2 * w.intermediate, K = w.hidden;
  const double n = double(E) * N * K;
  const double w_train_t = 2 * n + 2 * n + 2 * n / 32;  // the weight read, both copies and both scale layouts written
  DeviceBuffer<uint16_t> wt(E * N * K);
  testing::fill_uniform_bf16(wt.get(), E * N * K, 2, 0.05f, s);
  const auto spec_train = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, false, E, N, K);
  const auto spec_infer = prepared_weight_spec(BlockScaledFormat::kMXFP8_E4M3, true, E, N, K);
  const auto spec_fp8 = prepared_weight_spec(BlockScaledFormat::kFP8Blockwise, false, E, N, K);
  const auto spec_nv = prepared_weight_spec(BlockScaledFormat::kNVFP4, true, E, N, K);
  DeviceBuffer<uint8_t> q(E * N * K), qt(E * N * K), s1(spec_train.fprop_scale.bytes()),
      s2(spec_train.dgrad_scale.bytes());
  DeviceBuffer<float> f1(spec_fp8.fprop_scale.numel()), f2(spec_fp8.dgrad_scale.numel()), gs(E), gsi(E);
  DeviceBuffer<uint8_t> nv_scales(spec_nv.fprop_scale.bytes());  // 1 per 16: twice MXFP8's s1
  const std::vector<Case> cases = {
      {"mxfp8_w_train", 2 * n + n + 2 * n / 32,
       [&] { quant::mxfp8_quantize_weight_tiles(wt.get(), E, N, K, q.get(), s1.get(), s2.get(), s); }},
      {"mxfp8_w_train_t", w_train_t,
       [&] { prepare_block_scaled_weight(wt.get(), spec_train, {q.get(), s1.get(), qt.get(), s2.get()}, s); }},
      {"mxfp8_w_infer", 2 * n + n + n / 32,
       [&] { prepare_block_scaled_weight(wt.get(), spec_infer, {q.get(), s1.get()}, s); }},
      {"fp8bw_w", 2 * n + 2 * n,
       [&] { prepare_block_scaled_weight(wt.get(), spec_fp8, {q.get(), f1.get(), qt.get(), f2.get()}, s); }},
      {"nvfp4_w", 2 * n + 2 * n + n / 2 + n / 16,
       [&] {
         prepare_block_scaled_weight(wt.get(), spec_nv, {q.get(), nv_scales.get(), nullptr, nullptr, gs.get(), gsi.get()},
                                     s);
       }},
  };
  char title[256];
  std::snprintf(title, sizeof title, "%s W13 weights (per rank at EP%d: %lld experts x [%lld, %lld])", w.name.c_str(),
                g_ep, (long long)E, (long long)N, (long long)K);
  run_cases(title, cases, s);
  if (!g_regions) return;
  // The training weight with its transposed copy at every region shape (rn x rk tiles).
  run_region_sweep(w.name + " mxfp8_w_train_t by region (N x K tiles)", 64, w_train_t, [&](int ln, int lk) {
    quant::mxfp8_quantize_weight_tiles_in_regions(wt.get(), E, N, K, q.get(), s1.get(), qt.get(), s2.get(), ln, lk, s);
  }, s);
}

}  // namespace

int bench_main(int argc, char** argv) {
  std::string shapes = "dsv3_prefill,qwen3_30b";
  const int rc = testing::walk_bench_args(argc, argv, "[--shapes a,b] [--ep N] [--iters N] [--sustain-ms MS] [--regions] [--streams] [--cases a,b]",
                                          [&](const std::string& a, auto value) {
                                            if (a == "--shapes") shapes = value();
                                            else if (a == "--ep") g_ep = std::max(1, std::atoi(value().c_str()));
                                            else if (a == "--iters") g_iters = std::max(1, std::atoi(value().c_str()));
                                            else if (a == "--sustain-ms") g_sustain_ms = std::max(0.0, std::atof(value().c_str()));
                                            else if (a == "--regions") g_regions = true;
                                            else if (a == "--streams") g_streams = true;
                                            else if (a == "--layouts") g_layouts = true;
                                            else if (a == "--cases") {
                                              std::istringstream is(value());
                                              for (std::string c; std::getline(is, c, ',');) g_cases.insert(c);
                                            }
                                            else return false;
                                            return true;
                                          });
  if (rc >= 0) return rc;
  cudaStream_t s;
  DMOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaDeviceProp prop{};
  DMOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("bench_quantize on %s, %d iterations after %.0f ms of each call\n", prop.name, g_iters, g_sustain_ms);
  std::istringstream is(shapes);
  for (std::string name; std::getline(is, name, ',');) {
    run_activations(find_workload(name), s);
    run_weights(find_workload(name), s);
    run_swiglu_backward(find_workload(name), s);
    if (g_streams) run_streams(find_workload(name), s);
  }
  int below = 0;
  std::printf("\nsummary (x copy >= 0.85 is the target)\n%-36s %9s %9s %7s\n", "quantizer", "ms", "copy ms", "x copy");
  for (const Row& r : g_rows) {
    std::printf("%-36s %9.4f %9.4f %6.2fx%s\n", r.name.c_str(), r.ms, r.copy_ms, r.copy_ms / r.ms,
                r.copy_ms / r.ms >= 0.85 ? "" : "  below");
    below += r.copy_ms / r.ms < 0.85;
  }
  std::printf("%d of %zu quantizers at >= 0.85x the copy rate\n", static_cast<int>(g_rows.size()) - below, g_rows.size());
  for (const FusedRow& f : g_fused)
    std::printf("%s dxy: SwiGLU backward + rows/cols quantization fused x two passes: mxfp8 %.2fx, fp8bw %.2fx\n",
                f.shape.c_str(), f.mxfp8, f.fp8bw);
  DMOE_CUDA_CHECK(cudaStreamDestroy(s));
  return 0;
}

int main(int argc, char** argv) {
  return dist_moe::testing::guarded_main("bench_quantize", [&] { return bench_main(argc, argv); });
}
