// Benchmark of the SM90 grouped GEMMs on the reference shapes, per EP rank at EP = 2 (--ep N: at EP N,
// i.e. E / N local experts sharing the T * K routed rows a rank receives; --tokens T: T tokens per
// rank instead of the shape's, the shape then printed as "<shape>@T<T>" so that its rows never join
// another run's at the shape's own T).
//
// A shape is decode-sized when its routed rows per local expert are at most 64 (T * K <= 64 * E_local,
// the heuristic's is_decode): dsv3_decode at EP <= 16; every other reference shape is prefill-sized
// unless --tokens makes it small. Decode shapes run the forward only.
//
// For every (shape, routing, op) it prints, in one run:
//   our time and TFLOP/s, cuBLAS dense BF16 TFLOP/s for the same FLOPs (one M x N x K GEMM with
//   M = all routed rows), and the ratio ours / cuBLAS (target >= 0.80);
//   decode shapes: weight bytes streamed per second against the device-to-device copy bandwidth
//   measured in the same run (target >= 0.80), for the BF16 FPROPs and for the block-scaled decode
//   GEMMs (the swap-AB kernels; "bs" lines, below);
//   gather / scatter variants against the contiguous kernel on local rows (target >= 0.90).
// A CSV (--csv FILE) carries the same rows; bench/grouped_mm_peer.py writes the torch._grouped_mm
// numbers for the same shapes and counts, and the gemm stage of scripts/gpu_check.sh joins both.
//
// Routing: "balanced" (rows / E_local per expert), "random" (the per-expert rows of real random
// top-k routing: ~rows/E_local +- sqrt, random_topk_counts) and "zipf" (expert e gets a share
// proportional to 1 / (e + 1)); the counts are repeated exactly in grouped_mm_peer.py. Each op also
// prints its row count histogram summary (tail tiles: experts whose last 128-row tile is partial).
//
// --sweep: after each op's row (the heuristic's configuration), every other compiled configuration
// of that op runs too (kind "sweep" in the CSV, "  sweep" lines in the log; swap-AB only at decode
// shapes, configurations whose shared memory does not fit are skipped), so one run shows which
// configuration wins where (the gemm stage of scripts/gpu_check.sh tabulates them).
//
// --sms N,M: the heuristic's configuration also on N and M persistent CTAs (rows "<config>@Nsm"):
// how an op's time scales when a kernel running beside it holds the other SMs.
// --backward-pair D1,D2 (ops w13_bwd_pair_fp8, w2_bwd_pair_fp8): the FP8-blockwise DGRAD and WGRAD of one
// weight at once on two streams, DGRAD on D persistent CTAs and WGRAD on the rest, against the two in
// sequence on every SM (and each half alone on its SMs), alternated over --rounds; take the layer's
// WGRAD form with --fp8-wgrad-bf16 --wgrad-accumulate (perf_history G148).
// --sweep-match S: with --sweep, only the configurations whose name contains S (e.g. "_dyn"); it also
// trims the list of FP8 / MXFP8 configurations the prefill "fp8" lines time (the pick always runs).
// --mxfp8-row-major-scales: the MXFP8 FPROP / DGRAD A scales as [rows, K/32] bytes (the Mega and
// inference layout) instead of the training layer's k-block-major words (the default since s49).
// --rounds R: every configuration of an op (the heuristic's and, with --sweep, the others) is timed
// R times, interleaved (config 1, 2, ..., 1, 2, ...), and reports the median of its R medians:
// clock and thermal drift over a sweep then hit every configuration alike (one-shot sweeps showed
// up to 30% between identical kernels timed a minute apart).
// --ops a,b: only these ops (names as printed: w13_fprop, w13_fprop_noh1, w2_fprop, w13_gather,
// w2_scatter, w13_dgrad, w2_dgrad, w13_wgrad, w2_wgrad, w13_wgrad_fp32, w2_wgrad_fp32,
// w13_fprop_fp8, w2_fprop_fp8, w13_dgrad_fp8, w2_dgrad_fp8, w13_wgrad_fp8, w2_wgrad_fp8, w13_fprop_mxfp8,
// w2_fprop_mxfp8, w13_dgrad_mxfp8, w2_dgrad_mxfp8, w13_fprop_mxfp8s, w2_fprop_mxfp8s, w13_dgrad_mxfp8s,
// w2_dgrad_mxfp8s (the layer's MXFP8 FPROPs and DGRADs since session 72: the operands at shared scales on
// the FP8-blockwise kernels), w13_fprop_nvfp4, w2_fprop_nvfp4, w13_fprop_nvfp4x,
// w2_fprop_nvfp4x; FP8 WGRAD: the pick and with --sweep every compiled configuration, FP32 output
// unless --fp8-wgrad-bf16, tokens padded to 128 per expert, target >= 1.3x). At prefill shapes the FP8 and MXFP8 FPROP / DGRAD ops ("fp8"
// lines) time every compiled configuration of their format against our BF16 kernel's pick of the
// same op on the same rows, interleaved over --rounds, and print the ratio x bf16 (target: FP8
// blockwise >= 1.6, MXFP8 >= 0.95) and x cuBLAS dense BF16.
// At decode shapes w13_fprop_{mxfp8,nvfp4,nvfp4x,fp8} and w2_fprop_{...} ("bs" lines, CSV kind
// "bs_decode", with --sweep "bs_decode_sweep") are the block-scaled decode GEMMs as the inference
// layers call them: tokens quantized on the GPU (MXFP8 1x32 rows, NVFP4 packed rows -- nvfp4x: then
// expanded to FP16 rows, the expansion timed on its own --, FP8 1x128 rows), inference weights from
// prepare_block_scaled_weight, tiles over the real rows (tile_rows) with m_bound = routed_rows_bound = the routed rows, h1 dropped, W2 without scatter. Each is timed
// in interleaved rounds with our BF16 pick of the same op (h1 dropped too) and, with --sweep, every
// compiled swap-AB configuration of its formats; a line gives the format's weight bytes (data +
// scales) per second, x HBM copy (target >= 0.80, in the final table), the BF16 pick's ms and weight
// GB/s, and x bf16.
// --sustain-ms MS: before timing any call (ours, cuBLAS, the HBM copy), run it MS milliseconds
// untimed, so that every measurement starts from the same power-limited state; the torch peer
// (bench/grouped_mm_peer.py) takes the same flag. Without it, the first calls after a pause run at
// boost clocks (a 1.4 ms GEMM measured 1.42 ms cold and 1.65-1.7 ms sustained).
// --wgrad-accumulate: WGRAD adds into its output instead of writing it (the fused layer's case when
// the caller accumulates gradients; the output's old values are read as well).
// --fp8-wgrad-bf16: the FP8 WGRAD and its BF16 peer write (or add into) BF16 gradients, the training
// layer's output, instead of FP32.
// --device-offsets: the row operands carry device-side offsets (value 0), as in the fused layer:
// the kernels then patch a per-CTA copy of each moved tensor map (grouped_gemm.h).
// WGRAD rows also print cuBLAS strided-batched BF16 at the same per-expert GEMMs (balanced rows:
// E_local GEMMs of [N, rows] x [rows, K]), the like-for-like dense rate of a short contraction
// whose output is as large as its inputs.
//
//   bench_grouped_gemm [--shapes dsv3_prefill,qwen3_30b,mixtral,dsv3_decode] [--iters 10] [--ep 2]
//                      [--tokens T] [--routing balanced,random,zipf] [--csv FILE] [--sweep] [--rounds R]
//                      [--ops a,b]
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "testing/bench_args.h"
#include "testing/event_timing.h"
#include "testing/main_guard.h"
#include "core/env_knobs.h"
#include "dist_moe/error.h"
#include "dist_moe/grouped_gemm.h"
#include "dist_moe/prepare_weight.h"
#include "dist_moe/workloads.h"
#include "quant/quantize.h"

namespace {


using namespace dist_moe;

// A benchmarked call: `args` (read when called, so later edits count) with the configuration under
// test (nullptr: the heuristic's pick), on the default stream.
template <class Args>
auto with_config(const Args& args, void (*gemm)(const Args&, cudaStream_t)) {
  return [&args, gemm](const GroupedGemmConfig* cfg) {
    Args a = args;
    a.common.config = cfg;
    // A configuration run by name promotes as its own kernel does (GroupedGemmCommon::promote_k): the
    // sweep times the _p64 / _p32 kernels beside the others whatever the op's call asks.
    if (cfg != nullptr) a.common.promote_k = cfg->promote_k;
    gemm(a, nullptr);
  };
}

#define BENCH_CUDA(expr)                                                                            \
  do {                                                                                              \
    cudaError_t e_ = (expr);                                                                        \
    if (e_ != cudaSuccess) {                                                                        \
      std::fprintf(stderr, "%s failed: %s (%s:%d)\n", #expr, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

#define BENCH_CUBLAS(expr)                                                                          \
  do {                                                                                              \
    cublasStatus_t s_ = (expr);                                                                     \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                              \
      std::fprintf(stderr, "%s failed: status %d (%s:%d)\n", #expr, static_cast<int>(s_), __FILE__, __LINE__); \
      std::exit(1);                                                                                 \
    }                                                                                               \
  } while (0)

int64_t g_ep = 2;      // per-rank sizes of an EP = g_ep run (--ep)
int64_t g_tokens = 0;  // --tokens T: every shape's tokens per rank (0: the shape's own)

// splitmix64 (identical in grouped_mm_peer.py).
uint64_t splitmix64(uint64_t& state) {
  state += 0x9E3779B97F4A7C15ull;
  uint64_t z = state;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// "random": the per-expert rows of real top-k routing. Tokens pick top_k distinct experts uniformly
// among the E * g_ep global experts (splitmix64, seed 0x5EED); this rank owns experts [0, E) and
// keeps receiving routes until it has exactly `rows` (the last token's routes may be cut): the same
// total as the other modes, each expert ~rows/E +- sqrt(rows/E) (dsv3: 256 +- 16).
std::vector<int32_t> random_topk_counts(int64_t rows, int64_t E, int64_t top_k) {
  const uint64_t eg = static_cast<uint64_t>(E * g_ep);
  uint64_t state = 0x5EED;
  std::vector<int32_t> c(static_cast<size_t>(E), 0);
  int64_t got = 0;
  std::vector<uint64_t> chosen;
  while (got < rows) {
    chosen.clear();
    while (static_cast<int64_t>(chosen.size()) < top_k) {
      const uint64_t e = splitmix64(state) % eg;
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (uint64_t e : chosen)
      if (e < static_cast<uint64_t>(E) && got < rows) ++c[e], ++got;
  }
  return c;
}

// Rows per expert; identical to counts_for() in grouped_mm_peer.py.
std::vector<int32_t> counts_for(int64_t rows, int64_t E, const std::string& routing, int64_t top_k = 8) {
  if (routing == "random") return random_topk_counts(rows, E, top_k);
  std::vector<double> w(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) w[e] = routing == "zipf" ? 1.0 / static_cast<double>(e + 1) : 1.0;
  double total = 0.0;
  for (double x : w) total += x;
  std::vector<int32_t> c(static_cast<size_t>(E));
  int64_t sum = 0;
  for (int64_t e = 0; e < E; ++e) {
    c[e] = static_cast<int32_t>(static_cast<double>(rows) * w[e] / total);
    sum += c[e];
  }
  for (int64_t i = 0; i < rows - sum; ++i) c[i % E] += 1;
  return c;
}

int64_t checksum(const std::vector<int32_t>& c) {
  int64_t s = 0;
  for (size_t e = 0; e < c.size(); ++e) s += static_cast<int64_t>(e + 1) * c[e];
  return s;
}

// Device buffer filled with small pseudo-random BF16 values (zeros would flatter the power draw).
__global__ void fill_bf16_kernel(uint16_t* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float v = (static_cast<float>(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f) * scale;
    p[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
  }
}

__global__ void identity_rows_kernel(const void** rows, const char* base, int64_t n, int64_t row_bytes) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    rows[i] = base + i * row_bytes;
}

struct Buffer {
  void* p = nullptr;
  size_t bytes = 0;
  Buffer() = default;
  explicit Buffer(size_t n) : bytes(n) { BENCH_CUDA(cudaMalloc(&p, std::max<size_t>(n, 16))); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr, o.bytes = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  void fill(uint32_t seed, float scale) {
    fill_bf16_kernel<<<1024, 256>>>(static_cast<uint16_t*>(p), bytes / 2, seed, scale);
    BENCH_CUDA(cudaGetLastError());
  }
};

// Token rows [rows, cols] of BF16 `src` quantized on the GPU into fresh buffers q (E4M3 rows) and sc:
// MXFP8 E8M0 scales [rows, cols / 32] (scales.a_ld = cols / 32, not k-block-major words); FP8
// blockwise FP32 scales k-block-major [cols / 128, ld], ld = fp8_scale_ld(rows) (scales.a_ld).
int64_t fp8_scale_ld(int64_t rows) { return (rows + 3) / 4 * 4; }  // >= the rows, a multiple of 4

void quantize_mxfp8_rows(const Buffer& src, int64_t rows, int64_t cols, Buffer& q, Buffer& sc) {
  q = Buffer(static_cast<size_t>(rows * cols));
  sc = Buffer(static_cast<size_t>(rows * (cols / 32)));
  quant::mxfp8_quantize_rows(quant::Bf16Matrix{src.p, rows, cols, cols},
                             quant::Mxfp8Out{static_cast<uint8_t*>(q.p), cols, static_cast<uint8_t*>(sc.p), cols / 32, 1},
                             nullptr);
}

// The same rows with the scales as the training layer's row bundles hold them: k-block-major words
// of four codes [cols / 128, rows] (OperandScales::a_kblock_words, a_ld = rows), written by the rows +
// columns quantizer with no column output over one group of `rows` rows (the same codes and bytes).
void quantize_mxfp8_row_words(const Buffer& src, int64_t rows, int64_t cols, Buffer& q, Buffer& sc) {
  q = Buffer(static_cast<size_t>(rows * cols));
  sc = Buffer(static_cast<size_t>(cols / 128 * rows) * 4);
  const int32_t counts_offsets[3] = {static_cast<int32_t>(rows), 0, static_cast<int32_t>(rows)};  // count, offsets
  Buffer d_groups(sizeof counts_offsets);
  BENCH_CUDA(cudaMemcpy(d_groups.p, counts_offsets, sizeof counts_offsets, cudaMemcpyHostToDevice));
  const auto* g = static_cast<const int32_t*>(d_groups.p);
  quant::Mxfp8Out out{static_cast<uint8_t*>(q.p), cols, static_cast<uint8_t*>(sc.p), 0, 0};
  out.scale_word_ld = rows;
  quant::mxfp8_quantize_rows_cols(quant::Bf16Matrix{src.p, rows, cols, cols}, quant::RowGroups{g, g + 1, 1}, out,
                                  quant::Mxfp8Out{}, nullptr);
  BENCH_CUDA(cudaDeviceSynchronize());  // before d_groups goes
}

void quantize_fp8_blockwise_rows(const Buffer& src, int64_t rows, int64_t cols, Buffer& q, Buffer& sc) {
  const int64_t ld = fp8_scale_ld(rows);
  q = Buffer(static_cast<size_t>(rows * cols));
  sc = Buffer(static_cast<size_t>(cols / 128 * ld) * 4);
  quant::fp8_blockwise_quantize_rows(
      quant::Bf16Matrix{src.p, rows, cols, cols},
      quant::Fp8BlockwiseOut{static_cast<uint8_t*>(q.p), cols, static_cast<float*>(sc.p), 1, ld}, nullptr);
}

// Median milliseconds of `iters` timed calls after `warmup` untimed ones.
int g_sustain_ms = 0;  // --sustain-ms: run each measured call this long untimed first

double time_ms(const std::function<void()>& fn, int iters, int warmup = 3) {
  for (int i = 0; i < warmup; ++i) fn();
  BENCH_CUDA(cudaDeviceSynchronize());
  dist_moe::testing::run_for_ms(fn, g_sustain_ms, /*stream=*/nullptr, /*batch=*/4);
  return dist_moe::testing::median_event_ms(fn, iters, /*stream=*/nullptr).ms;
}

struct Row {
  std::string shape, routing, op, config;
  double ms = 0, tflops = 0, cublas_tflops = 0, gbps = 0, ceiling_gbps = 0, baseline_ms = 0;
  // "compute", "decode", "variant"; "sweep" for --sweep rows (any of the three); "bs_decode" (a
  // block-scaled decode GEMM's pick, against the copy bandwidth and our BF16 pick in baseline_ms)
  // and "bs_decode_sweep" (its other configurations)
  std::string kind;
  double batched_tflops = 0;  // WGRAD: cuBLAS strided-batched at the same per-expert GEMMs
  double baseline_gbps = 0;   // bs_decode: our BF16 pick's weight bytes per second
};

std::vector<Row> g_rows;
FILE* g_csv = nullptr;

void report(const Row& r) {
  if (r.kind != "sweep" && r.kind != "bs_decode_sweep") g_rows.push_back(r);
  if (r.kind == "bs_decode" || r.kind == "bs_decode_sweep") {
    const double ratio = r.gbps / r.ceiling_gbps;
    std::printf("bs  %-13s %-8s %-15s %-30s %8.3f ms  weights %6.0f GB/s  x HBM copy %.2f %-14s  bf16 %8.3f ms %6.0f GB/s"
                "  x bf16 %.2f\n",
                r.shape.c_str(), r.routing.c_str(), r.op.c_str(), r.config.c_str(), r.ms, r.gbps, ratio,
                ratio >= 0.80 ? "MET(>=0.80)" : "MISSED(>=0.80)", r.baseline_ms, r.baseline_gbps, r.baseline_ms / r.ms);
  } else if (r.kind == "sweep") {
    std::printf("  sweep %-13s %-8s %-14s %-27s %8.3f ms %7.1f TFLOP/s", r.shape.c_str(), r.routing.c_str(),
                r.op.c_str(), r.config.c_str(), r.ms, r.tflops);
    if (r.cublas_tflops > 0) std::printf("  x cuBLAS %.2f", r.tflops / r.cublas_tflops);
    if (r.batched_tflops > 0) std::printf("  x batched %.2f", r.tflops / r.batched_tflops);
    if (r.ceiling_gbps > 0) std::printf("  x HBM copy %.2f", r.gbps / r.ceiling_gbps);
    if (r.baseline_ms > 0) std::printf("  vs contiguous %.2f", r.baseline_ms / r.ms);
    std::printf("\n");
  } else if (r.kind == "compute") {
    const double ratio = r.tflops / r.cublas_tflops;
    std::printf("%-13s %-8s %-14s %-27s %8.3f ms %7.1f TFLOP/s  cuBLAS %7.1f  ratio %.2f  %s", r.shape.c_str(),
                r.routing.c_str(), r.op.c_str(), r.config.c_str(), r.ms, r.tflops, r.cublas_tflops, ratio,
                ratio >= 0.80 ? "MET(>=0.80)" : "MISSED(>=0.80)");
    if (r.batched_tflops > 0)
      std::printf("  cuBLAS batched %7.1f  ratio %.2f", r.batched_tflops, r.tflops / r.batched_tflops);
    std::printf("\n");
  } else if (r.kind == "decode") {
    const double ratio = r.gbps / r.ceiling_gbps;
    std::printf("%-13s %-8s %-14s %-27s %8.3f ms %7.1f TFLOP/s  weights %6.0f GB/s of copy %6.0f  ratio %.2f  %s\n",
                r.shape.c_str(), r.routing.c_str(), r.op.c_str(), r.config.c_str(), r.ms, r.tflops, r.gbps,
                r.ceiling_gbps, ratio, ratio >= 0.80 ? "MET(>=0.80)" : "MISSED(>=0.80)");
  } else {
    const double ratio = r.baseline_ms / r.ms;
    std::printf("%-13s %-8s %-14s %-27s %8.3f ms %7.1f TFLOP/s  contiguous %8.3f ms  ratio %.2f  %s\n",
                r.shape.c_str(), r.routing.c_str(), r.op.c_str(), r.config.c_str(), r.ms, r.tflops, r.baseline_ms,
                ratio, ratio >= 0.90 ? "MET(>=0.90)" : "MISSED(>=0.90)");
  }
  if (g_csv)
    std::fprintf(g_csv, "%s,%s,%s,%s,%s,%.5f,%.2f,%.2f,%.1f,%.1f,%.5f,%.2f\n", r.shape.c_str(), r.routing.c_str(),
                 r.op.c_str(), r.kind.c_str(), r.config.c_str(), r.ms, r.tflops, r.cublas_tflops, r.gbps,
                 r.ceiling_gbps, r.baseline_ms, r.batched_tflops);
  std::fflush(stdout);
}

// cuBLAS dense BF16 GEMM with the same FLOPs: out[M, N] = a[M, K] . w[N, K]^T (TN, FP32 compute).
double cublas_tflops(cublasHandle_t h, int64_t M, int64_t N, int64_t K, int iters) {
  Buffer a(static_cast<size_t>(M * K) * 2), w(static_cast<size_t>(N * K) * 2), c(static_cast<size_t>(M * N) * 2);
  a.fill(1, 1.0f);
  w.fill(2, 0.05f);
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = time_ms(
      [&] {
        BENCH_CUBLAS(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(M),
                                  static_cast<int>(K), &alpha, w.p, CUDA_R_16BF, static_cast<int>(K), a.p, CUDA_R_16BF,
                                  static_cast<int>(K), &beta, c.p, CUDA_R_16BF, static_cast<int>(N),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      iters);
  return 2.0 * M * N * K / (ms * 1e9);
}

// cuBLAS strided-batched BF16 with WGRAD's per-expert shape: for each of `batch` experts,
// out[N, K] = g[rows, N]^T . a[rows, K] (row-major; column-major: out^T = a^T . g).
double cublas_batched_wgrad_tflops(cublasHandle_t h, int64_t batch, int64_t rows, int64_t N, int64_t K, int iters) {
  Buffer a(static_cast<size_t>(batch * rows * K) * 2), g(static_cast<size_t>(batch * rows * N) * 2),
      c(static_cast<size_t>(batch * N * K) * 2);
  a.fill(1, 1.0f);
  g.fill(2, 1.0f);
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = time_ms(
      [&] {
        BENCH_CUBLAS(cublasGemmStridedBatchedEx(
            h, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(K), static_cast<int>(N), static_cast<int>(rows), &alpha, a.p,
            CUDA_R_16BF, static_cast<int>(K), rows * K, g.p, CUDA_R_16BF, static_cast<int>(N), rows * N, &beta, c.p,
            CUDA_R_16BF, static_cast<int>(K), N * K, static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      iters);
  return 2.0 * batch * rows * N * K / (ms * 1e9);
}

double copy_gbps(int iters) {
  const size_t bytes = size_t(2) << 30;
  Buffer a(bytes), b(bytes);
  const double ms = time_ms([&] { BENCH_CUDA(cudaMemcpyAsync(b.p, a.p, bytes, cudaMemcpyDeviceToDevice)); }, iters);
  return 2.0 * bytes / (ms * 1e6);  // read + write
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(',', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

bool g_sweep = false;
std::string g_sweep_match;  // --sweep-match S: sweep only configurations whose name contains S
int g_rounds = 1;
bool g_wgrad_accumulate = false;  // --wgrad-accumulate: WGRAD adds into its output (the layer's case)
bool g_device_offsets = false;    // --device-offsets: row operands through device offsets (the layer's case)
bool g_fp8_wgrad_bf16 = false;    // --fp8-wgrad-bf16: FP8 WGRAD (and its BF16 peer) into BF16 gradients
bool g_mxfp8_row_major_scales = false;  // --mxfp8-row-major-scales: MXFP8 A scales [rows, K/32], not words
std::vector<int> g_sms;        // --sms N,M: the pick also on N, M persistent CTAs (rows "<config>@Nsm")
std::set<std::string> g_ops;  // empty: every op
bool want(const std::string& op) { return g_ops.empty() || g_ops.count(op) != 0; }

// The configurations an op is timed with besides the heuristic's pick (`chosen`): with --sweep
// every other compiled configuration of (op, out, gather, formats). Swap-AB runs only at decode
// shapes (a 32-token tile at prefill sizes is just slow).
std::vector<GroupedGemmConfig> sweep_configs(GroupedGemmOp op, DType out, bool gather, bool decode,
                                             const std::string& chosen, const OperandFormat& a_format = {},
                                             const OperandFormat& b_format = {}) {
  std::vector<GroupedGemmConfig> cfgs;
  for (const GroupedGemmConfig& cfg : grouped_gemm_configs(op, out, gather, a_format, b_format))
    if (g_sweep && cfg.name() != chosen && (!cfg.swap_ab || decode) && cfg.name().find(g_sweep_match) != std::string::npos)
      cfgs.push_back(cfg);
  for (const int sms : g_sms)
    for (GroupedGemmConfig cfg : grouped_gemm_configs(op, out, gather))
      if (cfg.name() == chosen) {
        cfg.num_sms = sms;  // how the pick scales with fewer SMs (what a kernel run beside it leaves)
        cfgs.push_back(cfg);
      }
  return cfgs;
}

// Median milliseconds of each run, over g_rounds interleaved rounds (see --rounds). A run past the
// first `required` that cannot run here (a configuration's shared memory for this many experts) is
// reported under its name and gets a negative time; one of the first `required` rethrows.
std::vector<double> time_runs(const std::vector<std::function<void()>>& runs, const std::vector<std::string>& names,
                              size_t required, int iters) {
  std::vector<std::vector<double>> per(runs.size());
  std::vector<bool> skip(runs.size(), false);
  for (int round = 0; round < g_rounds; ++round) {
    for (size_t i = 0; i < runs.size(); ++i) {
      if (skip[i]) continue;
      try {
        per[i].push_back(time_ms(runs[i], iters));
      } catch (const dist_moe::Error& e) {
        if (i < required) throw;
        std::printf("  sweep %-27s skipped: %s\n", names[i].c_str(), e.what());
        skip[i] = true;
      }
    }
  }
  std::vector<double> ms(runs.size(), -1.0);
  for (size_t i = 0; i < runs.size(); ++i) {
    if (skip[i]) continue;
    std::sort(per[i].begin(), per[i].end());
    ms[i] = per[i][per[i].size() / 2];
  }
  return ms;
}

// time_runs over configurations (nullptr: the heuristic's pick, which must run).
std::vector<double> time_configs(const std::vector<const GroupedGemmConfig*>& cfgs, int iters,
                                 const std::function<void(const GroupedGemmConfig*)>& run) {
  std::vector<std::function<void()>> runs;
  std::vector<std::string> names;
  for (const GroupedGemmConfig* cfg : cfgs) {
    runs.push_back([&run, cfg] { run(cfg); });
    names.push_back(cfg != nullptr ? cfg->name() : "pick");
  }
  return time_runs(runs, names, cfgs.empty() || cfgs[0] != nullptr ? 0 : 1, iters);
}

// Times an op with its heuristic's configuration and (--sweep) every other one, reports the
// heuristic's row (make_row) and one "sweep" row per other configuration; returns the heuristic's
// time.
double time_and_report(GroupedGemmOp op, DType out, bool gather, bool decode, const std::string& chosen, int iters,
                       const std::function<void(const GroupedGemmConfig*)>& run,
                       const std::function<Row(double)>& make_row) {
  const std::vector<GroupedGemmConfig> sweep = sweep_configs(op, out, gather, decode, chosen);
  std::vector<const GroupedGemmConfig*> cfgs{nullptr};  // nullptr: the heuristic's pick
  for (const GroupedGemmConfig& cfg : sweep) cfgs.push_back(&cfg);
  const auto ms = time_configs(cfgs, iters, run);
  report(make_row(ms[0]));
  for (size_t i = 1; i < cfgs.size(); ++i) {
    if (ms[i] < 0) continue;
    Row r = make_row(ms[i]);
    r.config = cfgs[i]->name();
    if (cfgs[i]->num_sms > 0) r.config += "@" + std::to_string(cfgs[i]->num_sms) + "sm";
    r.kind = "sweep";
    report(r);
  }
  return ms[0];
}

int device_sms() {
  int dev = 0, sms = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return sms;
}

// The block-scaled decode GEMMs (swap-AB kernels) of the inference layers: op name suffix, the
// prepared weight's format, the operand formats of the call.
struct BlockScaledDecode {
  const char* suffix;
  BlockScaledFormat format;
  OperandFormat a, b;
};
const BlockScaledDecode kBlockScaledDecodes[] = {
    {"mxfp8", BlockScaledFormat::kMXFP8_E4M3, kMxfp8Rows, kMxfp8Weight},
    {"nvfp4", BlockScaledFormat::kNVFP4, kNvfp4Rows, kNvfp4Weight},
    // NVFP4 on the token rows expanded to FP16 once per call (nvfp4_expand_rows; its own time is
    // printed beside the GEMM's, the layer pays it once per operand).
    {"nvfp4x", BlockScaledFormat::kNVFP4, kNvfp4ExpandedRows, kNvfp4Weight},
    {"fp8", BlockScaledFormat::kFP8Blockwise, kFp8BlockwiseRows, kFp8BlockwiseWeight},
};

// An inference weight prepared on the GPU from BF16 [E, n, k] (prepare_block_scaled_weight), in
// buffers of its own that go when it does.
struct PreparedWeight {
  Buffer data, scale, global_scale, global_scale_inv;
  PreparedWeightBuffers fields;
  double gemm_bytes = 0;  // what a GEMM streams: data + scales (+ NVFP4's FP32 global_scale_inv)

  PreparedWeight(const void* bf16, const PreparedWeightSpec& spec) {
    auto alloc = [](const PreparedTensorSpec& t, Buffer& b) -> void* {
      if (!t.present) return nullptr;
      b = Buffer(static_cast<size_t>(t.bytes()));
      return b.p;
    };
    fields.fprop_data = alloc(spec.fprop_data, data);
    fields.fprop_scale = alloc(spec.fprop_scale, scale);
    fields.global_scale = static_cast<float*>(alloc(spec.global_scale, global_scale));
    fields.global_scale_inv = static_cast<float*>(alloc(spec.global_scale_inv, global_scale_inv));
    prepare_block_scaled_weight(bf16, spec, fields, nullptr);
    BENCH_CUDA(cudaGetLastError());
    gemm_bytes = static_cast<double>(spec.fprop_data.bytes() + spec.fprop_scale.bytes() +
                                     (spec.global_scale_inv.present ? spec.global_scale_inv.bytes() : 0));
  }
};

// Token rows [rows, k] of BF16 `src` quantized on the GPU as the inference layers hand them to the
// decode GEMMs, with the A half of the call's scales (the weight's are the caller's): MXFP8 1x32
// rows with [rows, k/32] E8M0 bytes, NVFP4 packed rows carrying their own scales, FP8 1x128 rows
// with k-block-major FP32 scales.
struct TokenRows {
  Buffer q, sc, packed;
  OperandScales scales;
  double expand_ms = 0;  // expanded NVFP4 rows: nvfp4_expand_rows' time for these rows
};
TokenRows quantize_token_rows(BlockScaledFormat format, const OperandFormat& a, const Buffer& src, int64_t rows,
                              int64_t k, const int32_t* offsets_G1, int32_t groups, int iters) {
  TokenRows t;
  if (a == kNvfp4ExpandedRows) {  // packed rows, then FP16 rows [rows, k] and token_scale_inv [rows]
    const int64_t row_bytes = quant::nvfp4_packed_row_bytes(k);
    t.packed = Buffer(static_cast<size_t>(rows * row_bytes));
    t.q = Buffer(static_cast<size_t>(rows * k) * 2);
    t.sc = Buffer(static_cast<size_t>(rows) * 4);
    quant::nvfp4_quantize_rows(quant::Bf16Matrix{src.p, rows, k, k},
                               quant::nvfp4_packed_rows_out(t.packed.p, row_bytes, k), nullptr);
    const quant::RowGroups g{nullptr, offsets_G1, groups};
    auto expand = [&] {
      quant::nvfp4_expand_rows(nullptr, t.packed.p, row_bytes, g, rows, k, t.q.p, static_cast<float*>(t.sc.p), nullptr);
    };
    expand();
    BENCH_CUDA(cudaGetLastError());
    t.expand_ms = time_ms(expand, iters);
    t.scales = OperandScales{t.sc.p, 0, nullptr};
    return t;
  }
  switch (format) {
    case BlockScaledFormat::kMXFP8_E4M3:
      quantize_mxfp8_rows(src, rows, k, t.q, t.sc);
      t.scales = OperandScales{t.sc.p, k / 32, nullptr};
      break;
    case BlockScaledFormat::kNVFP4: {
      const int64_t row_bytes = quant::nvfp4_packed_row_bytes(k);
      t.q = Buffer(static_cast<size_t>(rows * row_bytes));
      quant::nvfp4_quantize_rows(quant::Bf16Matrix{src.p, rows, k, k}, quant::nvfp4_packed_rows_out(t.q.p, row_bytes, k),
                                 nullptr);
      break;  // scales.a stays nullptr: the packed rows carry theirs
    }
    case BlockScaledFormat::kFP8Blockwise:
      quantize_fp8_blockwise_rows(src, rows, k, t.q, t.sc);
      t.scales = OperandScales{t.sc.p, fp8_scale_ld(rows), nullptr};
      break;
  }
  BENCH_CUDA(cudaGetLastError());
  return t;
}

// --backward-pair D1,D2: a DGRAD and the WGRAD of the same weight (the layer runs them one after the
// other, each on every SM) at once on two streams -- DGRAD on D persistent CTAs, WGRAD on the other
// SMs -- against the two in sequence, alternated over --rounds. DGRAD is bound by its math, the
// accumulating WGRAD by its gradient bytes (perf_history G146), so beside each other they could
// take less than the sum. Each split also times the two alone on their SMs.
std::vector<int> g_pair_splits;

void time_backward_pair(const std::string& shape, const std::string& routing, const std::string& op_name,
                        const DgradArgs& dgrad, const WgradArgs& wgrad, int iters) {
  const int dev = device_sms();
  const GroupedGemmConfig dpick = select_grouped_gemm_config(grouped_gemm_problem(GroupedGemmOp::kDgrad, dgrad.common), dev);
  const GroupedGemmConfig wpick = select_grouped_gemm_config(
      grouped_gemm_problem(GroupedGemmOp::kWgrad, wgrad.common, wgrad.out_dtype, false, false, wgrad.accumulate), dev);
  cudaStream_t s1 = nullptr, s2 = nullptr;
  cudaEvent_t fork = nullptr, j1 = nullptr, j2 = nullptr;
  BENCH_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  BENCH_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  for (cudaEvent_t* e : {&fork, &j1, &j2}) BENCH_CUDA(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  auto run_dgrad = [&](const GroupedGemmConfig* cfg, cudaStream_t s) {
    DgradArgs a = dgrad;
    a.common.config = cfg;
    grouped_gemm_dgrad(a, s);
  };
  auto run_wgrad = [&](const GroupedGemmConfig* cfg, cudaStream_t s) {
    WgradArgs a = wgrad;
    a.common.config = cfg;
    grouped_gemm_wgrad(a, s);
  };
  // Forked from and joined into the default stream, which the timing events sit on.
  auto run_pair = [&](const GroupedGemmConfig* dc, const GroupedGemmConfig* wc) {
    BENCH_CUDA(cudaEventRecord(fork, nullptr));
    BENCH_CUDA(cudaStreamWaitEvent(s1, fork));
    BENCH_CUDA(cudaStreamWaitEvent(s2, fork));
    run_wgrad(wc, s2);
    run_dgrad(dc, s1);
    BENCH_CUDA(cudaEventRecord(j1, s1));
    BENCH_CUDA(cudaEventRecord(j2, s2));
    BENCH_CUDA(cudaStreamWaitEvent(nullptr, j1));
    BENCH_CUDA(cudaStreamWaitEvent(nullptr, j2));
  };
  std::vector<GroupedGemmConfig> dcfg, wcfg;  // per split (stable addresses: reserved)
  dcfg.reserve(g_pair_splits.size());
  wcfg.reserve(g_pair_splits.size());
  std::vector<std::function<void()>> runs = {[&] { run_dgrad(nullptr, nullptr); },
                                             [&] { run_wgrad(nullptr, nullptr); },
                                             [&] {
                                               run_dgrad(nullptr, nullptr);
                                               run_wgrad(nullptr, nullptr);
                                             }};
  std::vector<std::string> names = {"dgrad alone", "wgrad alone", "serial"};
  for (const int d : g_pair_splits) {
    if (d <= 0 || d >= dev) continue;
    dcfg.push_back(dpick);
    dcfg.back().num_sms = d;
    wcfg.push_back(wpick);
    wcfg.back().num_sms = dev - d;
    const GroupedGemmConfig* dc = &dcfg.back();
    const GroupedGemmConfig* wc = &wcfg.back();
    runs.push_back([&, dc] { run_dgrad(dc, nullptr); });
    runs.push_back([&, wc] { run_wgrad(wc, nullptr); });
    runs.push_back([&, dc, wc] { run_pair(dc, wc); });
    names.push_back("dgrad @" + std::to_string(d));
    names.push_back("wgrad @" + std::to_string(dev - d));
    names.push_back("pair " + std::to_string(d) + "+" + std::to_string(dev - d));
  }
  const std::vector<double> ms = time_runs(runs, names, runs.size(), iters);
  std::printf("pair %-13s %-8s %-18s dgrad %s %.3f ms + wgrad %s %.3f ms, in sequence %.3f ms\n", shape.c_str(),
              routing.c_str(), op_name.c_str(), dpick.name().c_str(), ms[0], wpick.name().c_str(), ms[1], ms[2]);
  for (size_t i = 3; i + 2 < ms.size(); i += 3)
    std::printf("pair %-13s %-8s %-18s %-12s dgrad alone %.3f ms, wgrad alone %.3f ms, at once %.3f ms  x sequence %.3f\n",
                shape.c_str(), routing.c_str(), op_name.c_str(), names[i + 2].substr(5).c_str(), ms[i], ms[i + 1],
                ms[i + 2], ms[2] / ms[i + 2]);
  std::fflush(stdout);
  BENCH_CUDA(cudaDeviceSynchronize());
  for (cudaEvent_t e : {fork, j1, j2}) BENCH_CUDA(cudaEventDestroy(e));
  BENCH_CUDA(cudaStreamDestroy(s1));
  BENCH_CUDA(cudaStreamDestroy(s2));
}

void bench_shape(const Workload& w, const std::string& routing, int iters, cublasHandle_t cublas, double copy_bw) {
  if (w.experts % g_ep != 0) {
    std::printf("\n== %s: %lld experts do not split over EP %lld, skipped\n", w.name.c_str(),
                static_cast<long long>(w.experts), static_cast<long long>(g_ep));
    return;
  }
  const int64_t E = w.experts / g_ep, D = w.hidden, F = w.intermediate;
  const int64_t M = w.tokens * w.top_k;  // balanced EP: each rank receives T*K routed rows
  // Decode-sized: at most 64 routed rows per local expert (the heuristic's is_decode).
  const bool decode = M <= 64 * E;
  const std::string name = w.name;
  const auto counts = counts_for(M, E, routing, w.top_k);
  std::printf("\n== %s routing=%s  E_local=%lld rows=%lld D=%lld F=%lld  counts: max %d min %d checksum %lld\n",
              name.c_str(), routing.c_str(), static_cast<long long>(E), static_cast<long long>(M),
              static_cast<long long>(D), static_cast<long long>(F), *std::max_element(counts.begin(), counts.end()),
              *std::min_element(counts.begin(), counts.end()), static_cast<long long>(checksum(counts)));

  Buffer d_counts(counts.size() * 4);
  BENCH_CUDA(cudaMemcpy(d_counts.p, counts.data(), counts.size() * 4, cudaMemcpyHostToDevice));
  std::vector<int32_t> offsets(counts.size() + 1, 0);  // exclusive prefix sums [E + 1] (quant::RowGroups)
  for (size_t e = 0; e < counts.size(); ++e) offsets[e + 1] = offsets[e] + counts[e];
  Buffer d_offsets(offsets.size() * 4);
  BENCH_CUDA(cudaMemcpy(d_offsets.p, offsets.data(), offsets.size() * 4, cudaMemcpyHostToDevice));
  // --device-offsets: every row operand gets a device offset of 0 (the kernels then patch their
  // tensor maps per CTA, as in the fused layer, where the planner's offsets live on the device).
  Buffer d_zero(8);
  BENCH_CUDA(cudaMemset(d_zero.p, 0, 8));
  const int64_t* zoff = g_device_offsets ? static_cast<const int64_t*>(d_zero.p) : nullptr;
  Buffer x(static_cast<size_t>(M * D) * 2), w13(static_cast<size_t>(E * 2 * F * D) * 2),
      w2(static_cast<size_t>(E * D * F) * 2), h1(static_cast<size_t>(M * 2 * F) * 2), h2(static_cast<size_t>(M * F) * 2),
      h3(static_cast<size_t>(M * D) * 2), gx(static_cast<size_t>(M * D) * 2);
  x.fill(3, 1.0f);
  w13.fill(4, 0.02f);
  w2.fill(5, 0.02f);
  h1.fill(6, 1.0f);
  h2.fill(7, 1.0f);
  h3.fill(8, 1.0f);

  auto common = [&](int64_t n, int64_t k) {
    GroupedGemmCommon c;
    c.counts = static_cast<const int32_t*>(d_counts.p);
    c.e_local = E;
    c.m_capacity = M;
    c.n = n;
    c.k = k;
    c.validate_counts = false;  // benchmark the GEMM alone
    return c;
  };
  auto config_name = [&](GroupedGemmOp op, int64_t n, int64_t k, DType out, bool gather, bool scatter = false) {
    const bool accumulate = op == GroupedGemmOp::kWgrad && g_wgrad_accumulate;
    return select_grouped_gemm_config(grouped_gemm_problem(op, common(n, k), out, gather, scatter, accumulate),
                                      device_sms())
        .name();
  };
  const double w13_flops = 2.0 * M * 2 * F * D;
  const double w2_flops = 2.0 * M * D * F;
  const double w13_bytes = 2.0 * E * 2 * F * D, w2_bytes = 2.0 * E * D * F;

  // One op: its heuristic row, then (--sweep) every other configuration. Compute ops are compared
  // with cuBLAS, decode ops with the copy bandwidth (weight bytes streamed per second).
  // (n, k) of the weights: W13 ops (2F, D), W2 ops (D, F).
  auto measure = [&](const std::string& op_name, GroupedGemmOp op, DType out, double flops, double weight_bytes,
                     double cublas_tf, const std::function<void(const GroupedGemmConfig*)>& run,
                     double batched_tf = 0) {
    if (!want(op_name)) return 0.0;
    const bool is_w13 = op_name.rfind("w13", 0) == 0;
    const std::string chosen = config_name(op, is_w13 ? 2 * F : D, is_w13 ? D : F, out, false);
    auto make_row = [&](double ms) {
      Row r{name, routing, op_name, chosen, ms, flops / (ms * 1e9), 0, 0, 0, 0, decode ? "decode" : "compute"};
      if (decode) {
        r.gbps = weight_bytes / (ms * 1e6);
        r.ceiling_gbps = copy_bw;
      } else {
        r.cublas_tflops = cublas_tf;
        r.batched_tflops = batched_tf;
      }
      return r;
    };
    return time_and_report(op, out, false, decode, chosen, iters, run, make_row);
  };

  // ---- forward ----
  W13FpropArgs w13a;
  w13a.common = common(2 * F, D);
  w13a.a = x.p;
  w13a.w13 = w13.p;
  w13a.h1 = h1.p;
  w13a.h2 = h2.p;
  w13a.a_offset = w13a.h1_offset = w13a.h2_offset = zoff;
  auto run_w13 = with_config(w13a, grouped_gemm_w13_fprop);
  auto run_w13_drop = [&](const GroupedGemmConfig* cfg) {
    W13FpropArgs a = w13a;
    a.common.config = cfg;
    a.h1 = nullptr;
    grouped_gemm_w13_fprop(a, nullptr);
  };
  FpropArgs w2a;
  w2a.common = common(D, F);
  w2a.a = h2.p;
  w2a.w = w2.p;
  w2a.out = h3.p;
  w2a.a_offset = w2a.out_offset = zoff;
  auto run_w2 = with_config(w2a, grouped_gemm_fprop);

  if (decode) {
    measure("w13_fprop", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, w13_flops, w13_bytes, 0, run_w13);
    measure("w2_fprop", GroupedGemmOp::kFprop, DType::kBFloat16, w2_flops, w2_bytes, 0, run_w2);
    // The block-scaled decode GEMMs, each beside our BF16 pick of the same op on the same rows (h1
    // dropped in both, as the inference layers drop it). One op's quantized operands at a time: they
    // go before the next are made (dsv3 at EP1: the BF16 weights alone are ~22.5 GB).
    for (const BlockScaledDecode& f : kBlockScaledDecodes) {
      for (const bool is_w13 : {true, false}) {
        const std::string op_name = std::string(is_w13 ? "w13_fprop_" : "w2_fprop_") + f.suffix;
        if (!want(op_name)) continue;
        const GroupedGemmOp op = is_w13 ? GroupedGemmOp::kFpropSwiglu : GroupedGemmOp::kFprop;
        const int64_t n = is_w13 ? 2 * F : D, k = is_w13 ? D : F;
        const PreparedWeight wq(is_w13 ? w13.p : w2.p, prepared_weight_spec(f.format, /*inference=*/true, E, n, k));
        const TokenRows rows = quantize_token_rows(f.format, f.a, is_w13 ? x : h2, M, k,
                                                   static_cast<const int32_t*>(d_offsets.p), static_cast<int32_t>(E),
                                                   iters);
        if (rows.expand_ms > 0)
          std::printf("bs  %-13s %-8s %-15s nvfp4_expand_rows (the call's operand) %8.3f ms\n", name.c_str(),
                      routing.c_str(), op_name.c_str(), rows.expand_ms);
        BENCH_CUDA(cudaDeviceSynchronize());
        // The inference layers' call (layer_gemm_common + use_*_operands): tiles over each expert's
        // real rows (tile_rows: here the counts, which have no padding), and the row bounds that size
        // the decode tile (no padding either: both are the routed rows).
        GroupedGemmCommon c = common(n, k);
        c.a_format = f.a;
        c.b_format = f.b;
        c.scales = rows.scales;
        c.scales.b = wq.fields.fprop_scale;
        c.scales.b_global = wq.fields.global_scale_inv;
        c.tile_rows = c.counts;
        c.m_bound = c.routed_rows_bound = M;
        W13FpropArgs a13;  // h1 dropped; no device offsets (block-scaled A takes none)
        a13.common = c;
        a13.a = rows.q.p;
        a13.w13 = wq.fields.fprop_data;
        a13.h2 = h2.p;
        FpropArgs a2;  // h3 in place of the layer's scatter into the combine windows
        a2.common = c;
        a2.a = rows.q.p;
        a2.w = wq.fields.fprop_data;
        a2.out = h3.p;
        std::function<void(const GroupedGemmConfig*)> run_bs = with_config(a2, grouped_gemm_fprop), run_bf16 = run_w2;
        if (is_w13) run_bs = with_config(a13, grouped_gemm_w13_fprop), run_bf16 = run_w13_drop;

        // Slot 0: our BF16 pick; slot 1: the block-scaled pick; with --sweep every other compiled
        // swap-AB configuration of the formats (their other tiles are prefill tiles), and with
        // --sweep-match also the other tiles the match names (e.g. "_nosplit": the MXFP8 128x128
        // pick beyond 12 rows per expert, narrow tiles on one warpgroup).
        const std::string pick = select_grouped_gemm_config(grouped_gemm_problem(op, c), device_sms()).name();
        const std::vector<GroupedGemmConfig> all = grouped_gemm_configs(op, DType::kBFloat16, false, f.a, f.b);
        std::vector<std::function<void()>> runs = {[&] { run_bf16(nullptr); }, [&] { run_bs(nullptr); }};
        std::vector<std::string> names = {"bf16 pick", pick + " (pick)"};
        for (const GroupedGemmConfig& cfg : all)
          if (g_sweep && (cfg.swap_ab || !g_sweep_match.empty()) && cfg.name() != pick &&
              cfg.name().find(g_sweep_match) != std::string::npos) {
            runs.push_back([&run_bs, &cfg] { run_bs(&cfg); });
            names.push_back(cfg.name());
          }
        // Only the BF16 pick must run: a block-scaled configuration that cannot run here (the pick
        // included) is reported skipped, and the other shapes still run.
        const std::vector<double> ms = time_runs(runs, names, 1, iters);
        const double flops = is_w13 ? w13_flops : w2_flops, bf16_bytes = is_w13 ? w13_bytes : w2_bytes;
        for (size_t i = 1; i < runs.size(); ++i) {
          if (ms[i] < 0) continue;  // skipped
          Row r{name, routing, op_name, names[i], ms[i], flops / (ms[i] * 1e9), 0, wq.gemm_bytes / (ms[i] * 1e6),
                copy_bw, ms[0], i == 1 ? "bs_decode" : "bs_decode_sweep"};
          r.baseline_gbps = bf16_bytes / (ms[0] * 1e6);
          report(r);
        }
      }
    }
    return;  // decode is inference: no backward
  }
  const double cb13 = cublas_tflops(cublas, M, 2 * F, D, iters);
  const double cb2 = cublas_tflops(cublas, M, D, F, iters);
  const double ms_w13 = measure("w13_fprop", GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, w13_flops, 0, cb13, run_w13);
  if (want("w13_fprop_noh1")) {  // h1 dropped: same configurations, no sweep (it tracks w13_fprop)
    const std::string cfg13 = config_name(GroupedGemmOp::kFpropSwiglu, 2 * F, D, DType::kBFloat16, false);
    const double ms = time_ms([&] { run_w13_drop(nullptr); }, iters);
    report({name, routing, "w13_fprop_noh1", cfg13, ms, w13_flops / (ms * 1e9), cb13, 0, 0, 0, "compute"});
  }
  const double ms_w2 = measure("w2_fprop", GroupedGemmOp::kFprop, DType::kBFloat16, w2_flops, 0, cb2, run_w2);

  // ---- fused-pipeline variants on local rows: gather (W13) and scatter (W2) ----
  // (Their ratio is against the contiguous kernel's time: they run when that op ran too.)
  if (want("w13_gather") && ms_w13 > 0) {
    Buffer rows(static_cast<size_t>(M) * 8), gathered(static_cast<size_t>(M * D) * 2),
        ws(grouped_gemm_gather_workspace_bytes(M, E));
    identity_rows_kernel<<<256, 256>>>(static_cast<const void**>(rows.p), static_cast<const char*>(x.p), M, D * 2);
    auto run_gather = [&](const GroupedGemmConfig* cfg) {
      W13FpropArgs g = w13a;
      g.common.config = cfg;
      g.a = nullptr;
      g.gather.row_ptrs = static_cast<const void* const*>(rows.p);
      g.gather.gathered = gathered.p;
      g.gather.workspace = static_cast<int32_t*>(ws.p);
      grouped_gemm_w13_fprop(g, nullptr);
    };
    const std::string cfg_g = config_name(GroupedGemmOp::kFpropSwiglu, 2 * F, D, DType::kBFloat16, true);
    time_and_report(GroupedGemmOp::kFpropSwiglu, DType::kBFloat16, true, decode, cfg_g, iters, run_gather,
                    [&](double ms) {
                      return Row{name, routing, "w13_gather", cfg_g, ms, w13_flops / (ms * 1e9), 0, 0, 0, ms_w13,
                                 "variant"};
                    });
  }
  if (want("w2_scatter") && ms_w2 > 0) {
    Buffer dests(static_cast<size_t>(M) * 8);
    identity_rows_kernel<<<256, 256>>>(static_cast<const void**>(dests.p), static_cast<const char*>(h3.p), M, D * 2);
    FpropArgs sc = w2a;
    sc.scatter.row_ptrs = static_cast<void* const*>(dests.p);
    const double ms_s = time_ms([&] { grouped_gemm_fprop(sc, nullptr); }, iters);
    report({name, routing, "w2_scatter", config_name(GroupedGemmOp::kFprop, D, F, DType::kBFloat16, false, true), ms_s,
            w2_flops / (ms_s * 1e9), 0, 0, 0, ms_w2, "variant"});
  }

  // ---- backward: DGRAD ----
  DgradArgs d13;  // grad_x[M, D] = grad_h1[M, 2F] . W13[e]
  d13.common = common(2 * F, D);
  d13.grad_out = h1.p;
  d13.w = w13.p;
  d13.grad_a = gx.p;
  d13.grad_out_offset = d13.grad_a_offset = zoff;
  auto run_d13 = with_config(d13, grouped_gemm_dgrad);
  measure("w13_dgrad", GroupedGemmOp::kDgrad, DType::kBFloat16, w13_flops, 0, cb13, run_d13);
  DgradArgs d2;  // grad_h2[M, F] = grad_h3[M, D] . W2[e]
  d2.common = common(D, F);
  d2.grad_out = h3.p;
  d2.w = w2.p;
  d2.grad_a = h2.p;
  d2.grad_out_offset = d2.grad_a_offset = zoff;
  auto run_d2 = with_config(d2, grouped_gemm_dgrad);
  measure("w2_dgrad", GroupedGemmOp::kDgrad, DType::kBFloat16, w2_flops, 0, cb2, run_d2);

  // ---- FP8 blockwise FPROP and DGRAD next to our BF16 kernels on the same rows (issue: >= 1.6x) ----
  // Operands quantized by the GPU quantizers (x, h2, grad_h1, grad_h3 in 1x128 rows; W13, W2 in
  // 128x128 blocks with the transposed copies DGRAD reads). Every compiled FP8 configuration and the
  // BF16 pick are timed in interleaved rounds (--rounds). DGRAD's picks and configurations come
  // from the library as for any op (they are the FPROP kernels', n and k swapped).
  if (want("w13_fprop_fp8") || want("w2_fprop_fp8") || want("w13_dgrad_fp8") || want("w2_dgrad_fp8") ||
      want("w13_fprop_mxfp8") || want("w2_fprop_mxfp8") || want("w13_dgrad_mxfp8") || want("w2_dgrad_mxfp8") ||
      want("w13_dgrad_mxfp8s") || want("w2_dgrad_mxfp8s") || want("w13_fprop_mxfp8s") || want("w2_fprop_mxfp8s")) {
    const int64_t ld = fp8_scale_ld(M);
    Buffer w13q(static_cast<size_t>(E * 2 * F * D)), w13s(static_cast<size_t>(E * 2 * F / 128 * (D / 128)) * 4),
        w2q(static_cast<size_t>(E * D * F)), w2s(static_cast<size_t>(E * D / 128 * (F / 128)) * 4), w13t(w13q.bytes),
        w13ts(w13s.bytes), w2t(w2q.bytes), w2ts(w2s.bytes);
    Buffer xq, xs, h2q, h2s, h1q, h1s, h3q, h3s;
    quantize_fp8_blockwise_rows(x, M, D, xq, xs);
    quantize_fp8_blockwise_rows(h2, M, F, h2q, h2s);
    quantize_fp8_blockwise_rows(h1, M, 2 * F, h1q, h1s);
    quantize_fp8_blockwise_rows(h3, M, D, h3q, h3s);
    quant::fp8_blockwise_quantize_weight(w13.p, E, 2 * F, D, static_cast<uint8_t*>(w13q.p),
                                         static_cast<float*>(w13s.p), static_cast<uint8_t*>(w13t.p),
                                         static_cast<float*>(w13ts.p), nullptr);
    quant::fp8_blockwise_quantize_weight(w2.p, E, D, F, static_cast<uint8_t*>(w2q.p), static_cast<float*>(w2s.p),
                                         static_cast<uint8_t*>(w2t.p), static_cast<float*>(w2ts.p), nullptr);
    BENCH_CUDA(cudaDeviceSynchronize());
    auto fp8_common = [&](int64_t n, int64_t k, const Buffer& as, const Buffer& bs) {
      GroupedGemmCommon c = common(n, k);
      c.a_format = kFp8BlockwiseRows;
      c.b_format = kFp8BlockwiseWeight;
      c.scales.a = static_cast<const float*>(as.p);
      c.scales.a_ld = ld;
      c.scales.b = static_cast<const float*>(bs.p);
      return c;
    };
    struct Fp8Op {
      std::string name;
      GroupedGemmOp op;
      double flops, cublas_tf;
      std::function<void(const GroupedGemmConfig*)> bf16, fp8;
      int64_t n, k;  // the weight's [n, k], as the op's arguments name them
      OperandFormat b = kFp8BlockwiseWeight;  // DGRAD: the transposed copy
      OperandFormat a = kFp8BlockwiseRows;
      double target = 1.6;  // x our BF16 kernel (FP8 blockwise: issue #27; MXFP8: issue #25)
      int promote_k = 128;  // what its call asks (GroupedGemmCommon::promote_k), so the pick's name shows it
    };
    W13FpropArgs f13 = w13a;
    f13.common = fp8_common(2 * F, D, xs, w13s);
    f13.a = xq.p;
    f13.w13 = w13q.p;
    f13.a_offset = nullptr;
    FpropArgs f2 = w2a;
    f2.common = fp8_common(D, F, h2s, w2s);
    f2.a = h2q.p;
    f2.w = w2q.p;
    f2.a_offset = nullptr;
    DgradArgs fd13 = d13;  // grad_x = grad_h1 . W13[e] through W13's transposed copy
    fd13.common = fp8_common(2 * F, D, h1s, w13ts);
    fd13.common.b_format = kFp8BlockwiseWeightT;
    fd13.grad_out = h1q.p;
    fd13.w = w13t.p;
    fd13.grad_out_offset = nullptr;
    DgradArgs fd2 = d2;  // grad_h2 = grad_h3 . W2[e]
    fd2.common = fp8_common(D, F, h3s, w2ts);
    fd2.common.b_format = kFp8BlockwiseWeightT;
    fd2.grad_out = h3q.p;
    fd2.w = w2t.p;
    fd2.grad_out_offset = nullptr;
    const std::vector<Fp8Op> fp8_ops = {
        {"w13_fprop_fp8", GroupedGemmOp::kFpropSwiglu, w13_flops, cb13, run_w13,
         with_config(f13, grouped_gemm_w13_fprop),
         2 * F, D},
        {"w2_fprop_fp8", GroupedGemmOp::kFprop, w2_flops, cb2, run_w2,
         with_config(f2, grouped_gemm_fprop),
         D, F},
        {"w13_dgrad_fp8", GroupedGemmOp::kDgrad, w13_flops, cb13, run_d13,
         with_config(fd13, grouped_gemm_dgrad),
         2 * F, D, kFp8BlockwiseWeightT},
        {"w2_dgrad_fp8", GroupedGemmOp::kDgrad, w2_flops, cb2, run_d2,
         with_config(fd2, grouped_gemm_dgrad),
         D, F, kFp8BlockwiseWeightT},
    };
    // MXFP8 (per-32 promotion): x, h2, grad_h1 and grad_h3 in 1x32 rows, W13 and W2 in 32x32 tiles
    // with the transposed copies DGRAD reads.
    std::vector<Fp8Op> ops = fp8_ops;
    Buffer mxq, mxs, mh2q, mh2s, mh1q, mh1s, mh3q, mh3s, mw13q, mw13s, mw13t, mw13d, mw2q, mw2s, mw2t, mw2d;
    // The layer's MXFP8 FPROPs and DGRADs since session 72 (G150-G151): the row bundles at shared scales
    // (converted in place once, before timing) and the weight prepared at shared 128x128 scales with its
    // derived block scales, on the FP8-blockwise kernels ("_mxfp8s" ops; the conversions' own time is in
    // the layer's stage table).
    Buffer sxq, sxs, sh2q, sh2s, sh1q, sh1s, sh3q, sh3s, sw13q, sw13t, sw13fb, sw13b, sw2q, sw2t, sw2fb, sw2b;
    DgradArgs sd13 = d13, sd2 = d2;
    W13FpropArgs s13 = w13a;
    FpropArgs s2 = w2a;
    W13FpropArgs m13 = w13a;
    FpropArgs m2 = w2a;
    DgradArgs md13 = d13, md2 = d2;
    if (want("w13_fprop_mxfp8") || want("w2_fprop_mxfp8") || want("w13_dgrad_mxfp8") || want("w2_dgrad_mxfp8") ||
        want("w13_dgrad_mxfp8s") || want("w2_dgrad_mxfp8s") || want("w13_fprop_mxfp8s") || want("w2_fprop_mxfp8s")) {
      auto tiles = [&](const Buffer& src, int64_t n, int64_t k, Buffer& q, Buffer& sc, Buffer& qt, Buffer& dg) {
        q = Buffer(static_cast<size_t>(E * n * k));
        sc = Buffer(static_cast<size_t>(E * n * (k / 32)));
        qt = Buffer(q.bytes);
        dg = Buffer(static_cast<size_t>(E * k * (n / 32)));
        quant::mxfp8_quantize_weight_tiles(src.p, E, n, k, static_cast<uint8_t*>(q.p), static_cast<uint8_t*>(sc.p),
                                           static_cast<uint8_t*>(qt.p), static_cast<uint8_t*>(dg.p), nullptr);
      };
      // A scales as the training layer's row bundles (k-block-major words) unless
      // --mxfp8-row-major-scales ([rows, K/32]: the layout the Mega and inference paths read).
      const auto rows_q = g_mxfp8_row_major_scales ? quantize_mxfp8_rows : quantize_mxfp8_row_words;
      rows_q(x, M, D, mxq, mxs);
      rows_q(h2, M, F, mh2q, mh2s);
      rows_q(h1, M, 2 * F, mh1q, mh1s);
      rows_q(h3, M, D, mh3q, mh3s);
      tiles(w13, 2 * F, D, mw13q, mw13s, mw13t, mw13d);
      tiles(w2, D, F, mw2q, mw2s, mw2t, mw2d);
      BENCH_CUDA(cudaDeviceSynchronize());
      auto mx_common = [&](int64_t n, int64_t k, const Buffer& as, const Buffer& bs) {
        GroupedGemmCommon c = common(n, k);
        c.a_format = kMxfp8Rows;
        c.b_format = kMxfp8Weight;
        c.scales = OperandScales{as.p, g_mxfp8_row_major_scales ? k / 32 : M, bs.p};
        c.scales.a_kblock_words = !g_mxfp8_row_major_scales;
        return c;
      };
      m13.common = mx_common(2 * F, D, mxs, mw13s);
      m13.a = mxq.p;
      m13.w13 = mw13q.p;
      m13.a_offset = nullptr;
      m2.common = mx_common(D, F, mh2s, mw2s);
      m2.a = mh2q.p;
      m2.w = mw2q.p;
      m2.a_offset = nullptr;
      ops.push_back({"w13_fprop_mxfp8", GroupedGemmOp::kFpropSwiglu, w13_flops, cb13, run_w13,
                     with_config(m13, grouped_gemm_w13_fprop),
                     2 * F, D, kMxfp8Weight, kMxfp8Rows, 0.95});
      ops.push_back({"w2_fprop_mxfp8", GroupedGemmOp::kFprop, w2_flops, cb2, run_w2,
                     with_config(m2, grouped_gemm_fprop),
                     D, F, kMxfp8Weight, kMxfp8Rows, 0.95});
      // DGRAD through the transposed copies (grad_x = grad_h1 . W13[e], grad_h2 = grad_h3 . W2[e]).
      md13.common = mx_common(2 * F, D, mh1s, mw13d);
      if (g_mxfp8_row_major_scales) md13.common.scales.a_ld = 2 * F / 32;
      md13.common.b_format = kMxfp8WeightT;
      md13.grad_out = mh1q.p;
      md13.w = mw13t.p;
      md13.grad_out_offset = nullptr;
      md2.common = mx_common(D, F, mh3s, mw2d);
      if (g_mxfp8_row_major_scales) md2.common.scales.a_ld = D / 32;
      md2.common.b_format = kMxfp8WeightT;
      md2.grad_out = mh3q.p;
      md2.w = mw2t.p;
      md2.grad_out_offset = nullptr;
      ops.push_back({"w13_dgrad_mxfp8", GroupedGemmOp::kDgrad, w13_flops, cb13, run_d13,
                     with_config(md13, grouped_gemm_dgrad),
                     2 * F, D, kMxfp8WeightT, kMxfp8Rows, 0.95});
      ops.push_back({"w2_dgrad_mxfp8", GroupedGemmOp::kDgrad, w2_flops, cb2, run_d2,
                     with_config(md2, grouped_gemm_dgrad),
                     D, F, kMxfp8WeightT, kMxfp8Rows, 0.95});
      if (!g_mxfp8_row_major_scales && (want("w13_dgrad_mxfp8s") || want("w2_dgrad_mxfp8s") ||
                                        want("w13_fprop_mxfp8s") || want("w2_fprop_mxfp8s"))) {
        // rows: a copy of each MXFP8 row bundle (codes as k-block-major words, ld M) converted in place
        auto shared_rows = [&](const Buffer& q, const Buffer& sc, int64_t C, Buffer& sq, Buffer& ss) {
          sq = Buffer(q.bytes);
          ss = Buffer(sc.bytes);
          BENCH_CUDA(cudaMemcpy(sq.p, q.p, q.bytes, cudaMemcpyDeviceToDevice));
          BENCH_CUDA(cudaMemcpy(ss.p, sc.p, sc.bytes, cudaMemcpyDeviceToDevice));
          quant::mxfp8_rows_to_fp8_blockwise(static_cast<uint8_t*>(sq.p), C, static_cast<uint32_t*>(ss.p), M, M,
                                             static_cast<const int32_t*>(d_offsets.p) + E, nullptr);
        };
        // weights: the training preparation at shared scales (both copies) and the 128x128 scales of each
        auto shared_weight = [&](const Buffer& src, int64_t n, int64_t k, Buffer& q, Buffer& qt, Buffer& fb, Buffer& bs) {
          Buffer fs(static_cast<size_t>(E * n * (k / 32))), dg(static_cast<size_t>(E * k * (n / 32)));
          q = Buffer(static_cast<size_t>(E * n * k));
          qt = Buffer(q.bytes);
          fb = Buffer(static_cast<size_t>(E * (n / 128) * (k / 128)) * 4);
          bs = Buffer(fb.bytes);
          quant::mxfp8_quantize_weight_tiles(src.p, E, n, k, static_cast<uint8_t*>(q.p), static_cast<uint8_t*>(fs.p),
                                             static_cast<uint8_t*>(qt.p), static_cast<uint8_t*>(dg.p), nullptr, true);
          quant::mxfp8_weight_block_scales(static_cast<const uint8_t*>(fs.p), E, n, k, static_cast<float*>(fb.p), nullptr);
          quant::mxfp8_weight_block_scales(static_cast<const uint8_t*>(dg.p), E, k, n, static_cast<float*>(bs.p), nullptr);
          BENCH_CUDA(cudaDeviceSynchronize());
        };
        shared_rows(mxq, mxs, D, sxq, sxs);
        shared_rows(mh2q, mh2s, F, sh2q, sh2s);
        shared_rows(mh1q, mh1s, 2 * F, sh1q, sh1s);
        shared_rows(mh3q, mh3s, D, sh3q, sh3s);
        shared_weight(w13, 2 * F, D, sw13q, sw13t, sw13fb, sw13b);
        shared_weight(w2, D, F, sw2q, sw2t, sw2fb, sw2b);
        s13.common = fp8_common(2 * F, D, sxs, sw13fb);
        s13.common.scales.a_ld = M;
        // The MXFP8 layer's W13 promotion interval (Context::Impl::w13_promote_k; G158).
        s13.common.promote_k = static_cast<int>(core::env_int64_or("DMOE_W13_PROMOTE_K", 64));
        const int s13_promote_k = s13.common.promote_k;
        s13.a = sxq.p;
        s13.w13 = sw13q.p;
        s13.a_offset = nullptr;
        s2.common = fp8_common(D, F, sh2s, sw2fb);
        s2.common.scales.a_ld = M;
        s2.a = sh2q.p;
        s2.w = sw2q.p;
        s2.a_offset = nullptr;
        sd13.common = fp8_common(2 * F, D, sh1s, sw13b);
        sd13.common.scales.a_ld = M;
        sd13.common.b_format = kFp8BlockwiseWeightT;
        sd13.grad_out = sh1q.p;
        sd13.w = sw13t.p;
        sd13.grad_out_offset = nullptr;
        sd2.common = fp8_common(D, F, sh3s, sw2b);
        sd2.common.scales.a_ld = M;
        sd2.common.b_format = kFp8BlockwiseWeightT;
        sd2.grad_out = sh3q.p;
        sd2.w = sw2t.p;
        sd2.grad_out_offset = nullptr;
        ops.push_back({"w13_fprop_mxfp8s", GroupedGemmOp::kFpropSwiglu, w13_flops, cb13, run_w13,
                       with_config(s13, grouped_gemm_w13_fprop), 2 * F, D, kFp8BlockwiseWeight, kFp8BlockwiseRows, 0.95,
                       s13_promote_k});
        ops.push_back({"w2_fprop_mxfp8s", GroupedGemmOp::kFprop, w2_flops, cb2, run_w2,
                       with_config(s2, grouped_gemm_fprop), D, F, kFp8BlockwiseWeight, kFp8BlockwiseRows, 0.95});
        ops.push_back({"w13_dgrad_mxfp8s", GroupedGemmOp::kDgrad, w13_flops, cb13, run_d13,
                       with_config(sd13, grouped_gemm_dgrad), 2 * F, D, kFp8BlockwiseWeightT, kFp8BlockwiseRows, 0.95});
        ops.push_back({"w2_dgrad_mxfp8s", GroupedGemmOp::kDgrad, w2_flops, cb2, run_d2,
                       with_config(sd2, grouped_gemm_dgrad), D, F, kFp8BlockwiseWeightT, kFp8BlockwiseRows, 0.95});
      }
    }
    for (const Fp8Op& op : ops) {
      if (!want(op.name)) continue;
      GroupedGemmCommon fc = common(op.n, op.k);
      fc.a_format = op.a;
      fc.b_format = op.b;
      fc.promote_k = op.promote_k;
      const std::string pick = select_grouped_gemm_config(grouped_gemm_problem(op.op, fc), device_sms()).name();
      const std::vector<GroupedGemmConfig> all =
          grouped_gemm_configs(op.op, DType::kBFloat16, false, op.a, op.b);
      // Slot 0: our BF16 kernel (heuristic pick); slot 1: the FP8 pick; then every FP8 configuration.
      std::vector<std::function<void()>> runs = {[&] { op.bf16(nullptr); }, [&] { op.fp8(nullptr); }};
      std::vector<std::string> names = {"bf16 pick", pick + " (pick)"};
      for (const GroupedGemmConfig& c : all) {
        if (c.name().find(g_sweep_match) == std::string::npos) continue;  // --sweep-match trims the list
        runs.push_back([&op, &c] { op.fp8(&c); });
        names.push_back(c.name());
      }
      const std::vector<double> ms = time_runs(runs, names, 2, iters);  // both picks must run
      for (size_t i = 1; i < runs.size(); ++i) {
        if (ms[i] < 0) continue;  // skipped
        const double tf = op.flops / (ms[i] * 1e9), x_bf16 = ms[0] / ms[i];
        char verdict[32];
        std::snprintf(verdict, sizeof verdict, "%s(>=%.2g)", x_bf16 >= op.target ? "MET" : "MISSED", op.target);
        std::printf("fp8 %-13s %-8s %-15s %-30s %8.3f ms %7.1f TFLOP/s  bf16 %8.3f ms  x bf16 %.2f  %s  x cuBLAS bf16 %.2f\n",
                    name.c_str(), routing.c_str(), op.name.c_str(), names[i].c_str(), ms[i], tf, ms[0], x_bf16,
                    verdict, tf / op.cublas_tf);
        if (g_csv)
          std::fprintf(g_csv, "%s,%s,%s,%s,%s,%.5f,%.2f,%.2f,%.1f,%.1f,%.5f,%.2f\n", name.c_str(), routing.c_str(),
                       op.name.c_str(), i == 1 ? "fp8" : "fp8_sweep", names[i].c_str(), ms[i], tf, op.cublas_tf, 0.0,
                       0.0, ms[0], 0.0);
      }
      std::fflush(stdout);
    }
  }

  // ---- backward: WGRAD (BF16 output, comparable with torch; FP32 output) ----
  Buffer gw(static_cast<size_t>(E * 2 * F * D) * 4);
  const bool any_wgrad = want("w13_wgrad") || want("w2_wgrad") || want("w13_wgrad_fp32") || want("w2_wgrad_fp32");
  const double bb13 = any_wgrad ? cublas_batched_wgrad_tflops(cublas, E, M / E, 2 * F, D, iters) : 0;
  const double bb2 = any_wgrad ? cublas_batched_wgrad_tflops(cublas, E, M / E, D, F, iters) : 0;
  for (DType out : {DType::kBFloat16, DType::kFloat32}) {
    const std::string suffix = out == DType::kFloat32 ? "_fp32" : "";
    WgradArgs g13;  // grad_W13[e] = grad_h1^T . x
    g13.common = common(2 * F, D);
    g13.grad_out = h1.p;
    g13.a = x.p;
    g13.grad_w = gw.p;
    g13.out_dtype = out;
    g13.accumulate = g_wgrad_accumulate;
    g13.grad_out_offset = g13.a_offset = zoff;
    measure("w13_wgrad" + suffix, GroupedGemmOp::kWgrad, out, w13_flops, 0, cb13,
            with_config(g13, grouped_gemm_wgrad), bb13);
    WgradArgs g2;  // grad_W2[e] = grad_h3^T . h2
    g2.common = common(D, F);
    g2.grad_out = h3.p;
    g2.a = h2.p;
    g2.grad_w = gw.p;
    g2.out_dtype = out;
    g2.accumulate = g_wgrad_accumulate;
    g2.grad_out_offset = g2.a_offset = zoff;
    measure("w2_wgrad" + suffix, GroupedGemmOp::kWgrad, out, w2_flops, 0, cb2,
            with_config(g2, grouped_gemm_wgrad), bb2);
  }

  // ---- FP8-blockwise WGRAD next to our BF16 WGRAD (FP32 output, the layer's) ----
  // Operands in the padded column layout the rows+columns quantizer writes: every expert's tokens
  // padded to 128, grad_out^T and x^T [features, Mp] E4M3 with scales [Mp / 128, features].
  if (want("w13_wgrad_fp8") || want("w2_wgrad_fp8") || want("w13_bwd_pair_fp8") || want("w2_bwd_pair_fp8")) {
    std::vector<int32_t> padded(counts.size()), offs(counts.size() + 1, 0);
    for (size_t e = 0; e < counts.size(); ++e) {
      padded[e] = (counts[e] + 127) / 128 * 128;
      offs[e + 1] = offs[e] + padded[e];
    }
    const int64_t Mp = offs.back();
    Buffer d_padded(padded.size() * 4), d_offs(offs.size() * 4);
    BENCH_CUDA(cudaMemcpy(d_padded.p, padded.data(), padded.size() * 4, cudaMemcpyHostToDevice));
    BENCH_CUDA(cudaMemcpy(d_offs.p, offs.data(), offs.size() * 4, cudaMemcpyHostToDevice));
    const quant::RowGroups groups{static_cast<const int32_t*>(d_counts.p), static_cast<const int32_t*>(d_offs.p),
                                  static_cast<int32_t>(E)};
    // Random BF16 rows [Mp, C] quantized into q [C, Mp] and scales [Mp / 128, C].
    auto columns = [&](int64_t C, uint32_t seed, Buffer& q, Buffer& sc) {
      Buffer rows(static_cast<size_t>(Mp * C) * 2);
      rows.fill(seed, 1.0f);
      quant::fp8_blockwise_quantize_rows_cols(
          quant::Bf16Matrix{rows.p, Mp, C, C}, groups, quant::Fp8BlockwiseOut{},
          quant::Fp8BlockwiseOut{static_cast<uint8_t*>(q.p), Mp, static_cast<float*>(sc.p), 1, C}, nullptr);
      BENCH_CUDA(cudaDeviceSynchronize());
    };
    const Buffer& w13_weight = w13;  // (the loop's flag below shadows the name)
    for (const bool w13 : {true, false}) {
      const std::string op_name = w13 ? "w13_wgrad_fp8" : "w2_wgrad_fp8";
      const std::string pair_name = w13 ? "w13_bwd_pair_fp8" : "w2_bwd_pair_fp8";
      const bool pair = want(pair_name) && !g_pair_splits.empty();
      if (!want(op_name) && !pair) continue;
      const int64_t n = w13 ? 2 * F : D, k = w13 ? D : F;
      Buffer gq(static_cast<size_t>(n * Mp)), gs(static_cast<size_t>(Mp / 128 * n) * 4);
      Buffer xq(static_cast<size_t>(k * Mp)), xs(static_cast<size_t>(Mp / 128 * k) * 4);
      columns(n, w13 ? 11 : 12, gq, gs);
      columns(k, w13 ? 13 : 14, xq, xs);
      WgradArgs f;
      f.common = common(n, k);
      f.common.counts = static_cast<const int32_t*>(d_padded.p);
      f.common.m_capacity = Mp;
      f.common.a_format = kFp8BlockwiseRowsT;
      f.common.b_format = kFp8BlockwiseRowsT;
      f.common.scales = OperandScales{static_cast<const float*>(gs.p), n, static_cast<const float*>(xs.p)};
      f.grad_out = gq.p;
      f.a = xq.p;
      f.grad_w = gw.p;
      const DType wgrad_out = g_fp8_wgrad_bf16 ? DType::kBFloat16 : DType::kFloat32;
      f.out_dtype = wgrad_out;
      f.accumulate = g_wgrad_accumulate;
      WgradArgs b;  // our BF16 WGRAD on the unpadded rows
      b.common = common(n, k);
      b.grad_out = w13 ? h1.p : h3.p;
      b.a = w13 ? x.p : h2.p;
      b.grad_w = gw.p;
      b.out_dtype = wgrad_out;
      b.accumulate = g_wgrad_accumulate;
      if (pair) {
        // The DGRAD of the same weight on 1x128 rows of the same gradient (the BF16 rows the WGRAD's
        // columns came from are not kept: any rows do for timing) through the weight's transposed copy.
        const Buffer& wsrc = w13 ? w13_weight : w2;
        Buffer gr, grs, wq(static_cast<size_t>(E * n * k)), ws(static_cast<size_t>(E * n / 128 * (k / 128)) * 4),
            wt(wq.bytes), wts(ws.bytes);
        quantize_fp8_blockwise_rows(w13 ? h1 : h3, M, n, gr, grs);
        quant::fp8_blockwise_quantize_weight(wsrc.p, E, n, k, static_cast<uint8_t*>(wq.p), static_cast<float*>(ws.p),
                                             static_cast<uint8_t*>(wt.p), static_cast<float*>(wts.p), nullptr);
        BENCH_CUDA(cudaDeviceSynchronize());
        DgradArgs d;
        d.common = common(n, k);
        d.common.a_format = kFp8BlockwiseRows;
        d.common.b_format = kFp8BlockwiseWeightT;
        d.common.scales = OperandScales{static_cast<const float*>(grs.p), fp8_scale_ld(M), static_cast<const float*>(wts.p)};
        d.grad_out = gr.p;
        d.w = wt.p;
        d.grad_a = gx.p;  // [M, k]: k <= D
        time_backward_pair(name, routing, pair_name, d, f, iters);
        if (!want(op_name)) continue;
      }
      const double ms_bf16 = time_ms([&] { grouped_gemm_wgrad(b, nullptr); }, iters);
      // The pick, and with --sweep every compiled FP8 WGRAD configuration (the pick's too: its name
      // is not known here), in interleaved rounds.
      const std::vector<GroupedGemmConfig> sweep = sweep_configs(GroupedGemmOp::kWgrad, wgrad_out, false, false,
                                                                 "", kFp8BlockwiseRowsT, kFp8BlockwiseRowsT);
      std::vector<const GroupedGemmConfig*> cfgs{nullptr};
      for (const GroupedGemmConfig& cfg : sweep) cfgs.push_back(&cfg);
      const std::vector<double> ms = time_configs(cfgs, iters, with_config(f, grouped_gemm_wgrad));
      const double ms_fp8 = ms[0];
      const double flops = w13 ? w13_flops : w2_flops, tf = flops / (ms_fp8 * 1e9);
      std::printf("fp8 %-13s %-8s %-14s %-30s %8.3f ms %7.1f TFLOP/s  bf16 %8.3f ms  x bf16 %.2f  %s\n", name.c_str(),
                  routing.c_str(), op_name.c_str(),
                  g_fp8_wgrad_bf16 ? "pick (bf16 out, padded tokens)" : "pick (fp32 out, padded tokens)", ms_fp8, tf,
                  ms_bf16, ms_bf16 / ms_fp8, ms_bf16 / ms_fp8 >= 1.3 ? "MET(>=1.3)" : "MISSED(>=1.3)");
      for (size_t i = 1; i < cfgs.size(); ++i)
        if (ms[i] > 0)
          std::printf("fp8 %-13s %-8s %-14s sweep %-24s %8.3f ms %7.1f TFLOP/s  bf16 %8.3f ms  x bf16 %.2f\n",
                      name.c_str(), routing.c_str(), op_name.c_str(), cfgs[i]->name().c_str(), ms[i],
                      flops / (ms[i] * 1e9), ms_bf16, ms_bf16 / ms[i]);
      if (g_csv)
        std::fprintf(g_csv, "%s,%s,%s,fp8,pick,%.5f,%.2f,0,0,0,%.5f,0\n", name.c_str(), routing.c_str(), op_name.c_str(),
                     ms_fp8, tf, ms_bf16);
      std::fflush(stdout);
    }
  }
}

}  // namespace

int bench_main(int argc, char** argv) {
  std::vector<std::string> shapes;
  for (const Workload& w : reference_workloads()) shapes.push_back(w.name);
  std::vector<std::string> routings = {"balanced", "random", "zipf"};
  int iters = 10;
  std::string csv;
  const int rc = testing::walk_bench_args(
      argc, argv,
      "[--shapes a,b] [--tokens T] [--routing balanced,random,zipf] [--iters N] [--csv FILE] [--sweep] [--ep N] "
      "[--sweep-match S] [--rounds R] [--ops a,b] [--wgrad-accumulate] [--fp8-wgrad-bf16] [--mxfp8-row-major-scales] [--device-offsets] "
      "[--sustain-ms MS] [--sms N,M] [--backward-pair D1,D2]",
      [&](const std::string& a, auto value) {
        if (a == "--shapes") shapes = split(value());
        else if (a == "--routing") routings = split(value());
        else if (a == "--iters") iters = std::atoi(value().c_str());
        else if (a == "--ep") g_ep = std::max(1, std::atoi(value().c_str()));
        else if (a == "--tokens") g_tokens = std::max(1, std::atoi(value().c_str()));
        else if (a == "--csv") csv = value();
        else if (a == "--sweep") g_sweep = true;
        else if (a == "--sweep-match") g_sweep_match = value();
        else if (a == "--mxfp8-row-major-scales") g_mxfp8_row_major_scales = true;
        else if (a == "--rounds") g_rounds = std::max(1, std::atoi(value().c_str()));
        else if (a == "--wgrad-accumulate") g_wgrad_accumulate = true;
        else if (a == "--device-offsets") g_device_offsets = true;
        else if (a == "--fp8-wgrad-bf16") g_fp8_wgrad_bf16 = true;
        else if (a == "--backward-pair") {
          for (const std::string& v : split(value())) g_pair_splits.push_back(std::atoi(v.c_str()));
        } else if (a == "--sms") {
          for (const std::string& v : split(value())) g_sms.push_back(std::atoi(v.c_str()));
        } else if (a == "--sustain-ms") g_sustain_ms = std::max(0, std::atoi(value().c_str()));
        else if (a == "--ops") {
          for (const std::string& op : split(value())) g_ops.insert(op);
        } else {
          return false;
        }
        return true;
      });
  if (rc >= 0) return rc;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("SKIP: %s is not an SM90 GPU\n", prop.name);
    return 0;
  }
  if (!csv.empty()) {
    g_csv = std::fopen(csv.c_str(), "w");
    if (!g_csv) {
      std::fprintf(stderr, "cannot write %s\n", csv.c_str());
      return 2;
    }
    std::fprintf(g_csv, "shape,routing,op,kind,config,ms,tflops,cublas_tflops,gbps,copy_gbps,contiguous_ms,batched_tflops\n");
  }
  cublasHandle_t cublas;
  BENCH_CUBLAS(cublasCreate(&cublas));
  const double copy_bw = copy_gbps(iters);
  std::printf("device %s, %d SMs; device-to-device copy %.0f GB/s (read + write)\n", prop.name,
              prop.multiProcessorCount, copy_bw);
  try {
    for (const std::string& name : shapes) {
      Workload w = find_workload(name);
      if (g_tokens > 0 && g_tokens != w.tokens) {  // a batch size of its own: a name of its own
        w.tokens = g_tokens;
        w.name += "@T" + std::to_string(g_tokens);
      }
      for (const std::string& r : routings) bench_shape(w, r, iters, cublas, copy_bw);
    }
  } catch (const dist_moe::Error& e) {
    std::fprintf(stderr, "FAIL: %s\n", e.what());
    return 1;
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  cublasDestroy(cublas);
  if (g_csv) std::fclose(g_csv);

  // Final table: one line per row, the ratio that matters for its kind.
  std::printf("\n%-13s %-8s %-15s %9s %9s %7s  %s\n", "shape", "routing", "op", "ms", "TFLOP/s", "ratio", "vs");
  int met = 0, total = 0;
  for (const Row& r : g_rows) {
    double ratio;
    const char* vs;
    double target;
    if (r.kind == "compute") ratio = r.tflops / r.cublas_tflops, vs = "cuBLAS dense", target = 0.80;
    else if (r.kind == "decode" || r.kind == "bs_decode") ratio = r.gbps / r.ceiling_gbps, vs = "HBM copy", target = 0.80;
    else ratio = r.baseline_ms / r.ms, vs = "contiguous", target = 0.90;
    ++total;
    met += ratio >= target;
    std::printf("%-13s %-8s %-15s %9.3f %9.1f %7.2f  %s (target %.2f) %s", r.shape.c_str(), r.routing.c_str(),
                r.op.c_str(), r.ms, r.tflops, ratio, vs, target, ratio >= target ? "MET" : "MISSED");
    if (r.batched_tflops > 0) std::printf("  | x cuBLAS batched %.2f", r.tflops / r.batched_tflops);
    std::printf("\n");
  }
  std::printf("targets met: %d of %d\n", met, total);
  return 0;
}

int main(int argc, char** argv) {
  return dist_moe::testing::guarded_main("bench_grouped_gemm", [&] { return bench_main(argc, argv); });
}
