// NVFP4 quantizers (E2M1 data packed two per byte, E4M3 scale per 16 elements, FP32 global scale;
// weights with each word in the prepared order of numeric/nvfp4_weight_order.cuh):
//   nvfp4_weight_pipelined_kernel  amax CTAs and quantize CTAs in one grid, the quantize CTAs of an
//                                  expert after all its amax CTAs, its bytes still in L2 where it fits
//   nvfp4_global_scales_kernel     global_scale and global_scale_inv from the amax
//   nvfp4_rows_kernel              per-token rows: one CTA per token, the row held in registers, a
//                                  lane per NVFP4 block
// Hopper has no FP4 conversion instruction: E2M1 rounding is the shared portable rule. The per-word,
// per-vector and per-block pieces live in device/quant/nvfp4_rows.cuh (shared with the Mega h2 hand-off).
#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/device/numeric/nvfp4_weight_order.cuh"
#include "dist_moe/device/quant/nvfp4_rows.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kThreads = 256;
constexpr int kLanesPerBlock = kNvfp4LanesPerBlock;  // 2
constexpr int kLoads = 4;  // 16-byte loads per thread, issued together (bytes in flight)

// A chunk of an expert: 4 x 256 vectors, slice j = vectors base + j * 256 (base = the chunk's first
// vector + threadIdx.x), zeros past the expert's `vecs`.
constexpr int64_t kChunkVecs = kThreads * kLoads;

__device__ __forceinline__ void load_chunk(uint4 (&raw)[kLoads], const uint16_t* src, int64_t base, int64_t vecs) {
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int64_t i = base + j * kThreads;
    raw[j] = i < vecs ? __ldg(reinterpret_cast<const uint4*>(src + i * kVec)) : make_uint4(0, 0, 0, 0);
  }
}

// Quantizes a loaded chunk of expert e with the expert's gs.
// Per block no IEEE division or software decode: with gs finite (an expert-uniform test), the block
// scale fl(fl(bamax * gs) / 6) is finite and >= 0, so it needs only the lower clamp before the
// satfinite conversion; it is decoded by the hardware cvt, and its reciprocal fl(1 / s) comes from
// the eight fl(1 / (1 + i/8)) (lane l holding i = l % 8) by a shuffle on s's significand and an
// exact exponent step (e4m3_reciprocal_from_table).
__device__ __forceinline__ void quantize_chunk(const uint4 (&raw)[kLoads], int64_t e, int64_t per_expert, int64_t base,
                                               float gs, uint8_t* q, uint8_t* scales) {
  const int64_t vecs = per_expert / kVec;
  const bool expert_nan = numeric::is_nan(gs);  // NaN or Inf in the expert: scales 0x7F, data 0x7
  const float reciprocal = numeric::rcp_rn(numeric::e4m3_significand(threadIdx.x % 8));
#pragma unroll
  for (int j = 0; j < kLoads; ++j) {
    const int64_t i = base + j * kThreads;  // lanes 2b, 2b+1 hold block b's halves
    if (i - (threadIdx.x & 31) >= vecs) break;  // warp-uniform; per_expert % 16 == 0 keeps pairs whole
    const float bamax = group_amax<kLanesPerBlock>(amax_bf16x8(raw[j]));
    // s = nvfp4_weight_block_scale_by_reciprocal(bamax, gs) for a finite gs (bamax * gs >= 0).
    const float v = numeric::div_rn_by_reciprocal_abs(numeric::mul_rn(bamax, gs), 6.0f, numeric::kE2M1MaxReciprocal);
    const uint8_t s = expert_nan ? numeric::kE4M3NaN : numeric::float_to_e4m3(fmaxf(v, numeric::kNVFP4ScaleFloor));
    const float sf = numeric::e4m3_to_float_fast(s);
    const float ri = __shfl_sync(0xffffffffu, reciprocal, static_cast<int>(__float_as_uint(sf) >> 20));
    const bool below7 = __all_sync(0xffffffffu, s >= kE4M3MinNormalCode);  // warp-uniform
    if (i >= vecs) continue;
    const float sr = numeric::e4m3_reciprocal_from_table(ri, sf);
    // q = e2m1(fl(fl(x * gs) / s)) with one reciprocal per block and no division at all
    // (nvfp4_weight_quantize_value_by_reciprocal, with the sign taken from x).
    const auto quotient = [&](float abs_x) {
      return numeric::div_rn_by_reciprocal_abs(numeric::mul_rn(abs_x, gs), sf, sr);
    };
    const uint64_t elem = static_cast<uint64_t>(e * per_expert + i * kVec);  // unsigned: shifts, not divisions
    // The word in the GEMMs' prepared order (nvfp4_weight_order.cuh).
    *reinterpret_cast<uint32_t*>(q + elem / 2) = numeric::nvfp4_weight_word_encode(
        expert_nan ? kE2M1NaNx8
                   : (below7 ? e2m1x8_signed<true>(raw[j], quotient) : e2m1x8_signed<false>(raw[j], quotient)));
    if (i % kLanesPerBlock == 0) scales[elem / numeric::kNVFP4Block] = s;
  }
}

__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ uint32_t ld_relaxed_gpu(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Both passes in one kernel, so the quantize pass reads an expert while it is still in L2 (where it
// fits) and the memory-bound amax CTAs share the SMs with the issue-bound quantize CTAs instead of
// running in a kernel of their own. The weight is a sequence of chunks (expert major); CTA b is an
// amax CTA of chunk b / 2 (even b) or a quantize CTA of chunk b / 2 - lag (odd b). An amax CTA
// folds its chunk's amax into amax_bits_E[e] and then counts itself in done_E[e] (release); a
// quantize CTA issues its loads, waits until done_E[e] holds all `chunks` of its expert (acquire)
// and quantizes with that expert's gs. lag >= chunks: a quantize CTA waits only for amax CTAs of
// smaller index, which the hardware starts first (CTAs start in index order; the same assumption as
// CUB's single-pass scan), so the wait always ends; the launcher adds about half a wave to the lag,
// so that the expert's last amax CTAs have usually finished by then.
__global__ void __launch_bounds__(kThreads) nvfp4_weight_pipelined_kernel(const uint16_t* w, int64_t per_expert,
                                                                          int64_t chunks, int64_t total_chunks,
                                                                          int64_t lag, uint32_t* amax_bits_E,
                                                                          uint32_t* done_E, uint8_t* q,
                                                                          uint8_t* scales) {
  __shared__ uint32_t bits[kThreads / 32];
  const bool amax_cta = (blockIdx.x & 1) == 0;
  const int64_t chunk = static_cast<int64_t>(blockIdx.x >> 1) - (amax_cta ? 0 : lag);
  if (chunk < 0 || chunk >= total_chunks) return;  // CTA-uniform: the ends of the two streams
  const int64_t e = chunk / chunks;
  const int64_t base = (chunk - e * chunks) * kChunkVecs + threadIdx.x;
  uint4 raw[kLoads];
  load_chunk(raw, w + e * per_expert, base, per_expert / kVec);
  if (amax_cta) {
    float a = 0.0f;
#pragma unroll
    for (int j = 0; j < kLoads; ++j) a = numeric::amax_nan(a, amax_bf16x8(raw[j]));
    a = group_amax<32>(a);
    if (threadIdx.x % 32 == 0) bits[threadIdx.x / 32] = __float_as_uint(a);
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t m = 0;  // |x| bits: integer max is amax_nan's order
#pragma unroll
      for (int i = 0; i < kThreads / 32; ++i) m = max(m, bits[i]);
      atomicMax(amax_bits_E + e, m);
      __threadfence();  // the amax before the count (release)
      atomicAdd(done_E + e, 1u);
    }
    return;
  }
  if (threadIdx.x == 0) {
    while (ld_acquire_gpu(done_E + e) < static_cast<uint32_t>(chunks)) __nanosleep(128);
    bits[0] = ld_relaxed_gpu(amax_bits_E + e);
  }
  __syncthreads();
  quantize_chunk(raw, e, per_expert, base, numeric::nvfp4_weight_global_scale(__uint_as_float(bits[0])), q, scales);
}

// The last step: gs and fl(1 / gs) from the amax bits (which sit in global_scale_inv's storage;
// global_scale's held the counts).
__global__ void nvfp4_global_scales_kernel(float* global_scale, float* global_scale_inv, int64_t num_experts) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= num_experts) return;
  const float gs = numeric::nvfp4_weight_global_scale(__uint_as_float(reinterpret_cast<const uint32_t*>(global_scale_inv)[e]));
  global_scale[e] = gs;
  global_scale_inv[e] = numeric::div_rn(1.0f, gs);
}

// Per-token rows: one CTA of kRowThreads (64 or 128) threads per token, each thread holding kB whole
// NVFP4 blocks of the row (block j of thread i: block i + j * kRowThreads, its two 16-byte vectors
// adjacent): one read, the row amax through warp shuffles and one barrier, then the blocks from
// registers. A lane per block (G160) instead of a lane per vector halves the per-block scale work (the
// conversions, the reciprocal shuffle and vote) and drops the block amax shuffle; the pair of loads
// reads each 32-byte sector whole. Rows of up to 2048 elements take 64 threads (at least 2 blocks
// each from D > 1024): a thread's fixed work per row (the row amax reduction, two IEEE divisions) was
// a third of its instructions with 2 vectors.
// The blocks: nvfp4_row_block (device/quant/nvfp4_rows.cuh), one IEEE division per thread and row.
template <int kB, int kRowThreads>
__global__ void __launch_bounds__(kRowThreads) nvfp4_rows_kernel(Bf16Matrix x, Nvfp4RowsOut out,
                                                                  const int32_t* rows_bound, RowGroups token_rows) {
  __shared__ float warp_amax[kRowThreads / 32];
  const int64_t t = blockIdx.x;
  if (rows_bound != nullptr && t >= *rows_bound) return;  // CTA-uniform
  if (token_rows.offsets_G1 != nullptr && !is_token_row(token_rows, t)) return;
  const int blocks = static_cast<int>(x.cols / numeric::kNVFP4Block);
  const uint4* src = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x.data) + t * x.row_stride);
  constexpr int kBlockVecs = numeric::kNVFP4Block / kVec;  // 2
  uint4 raw[kB][kBlockVecs];
  float bamax[kB];  // amax of each block, kept for its scale
  float a = 0.0f;
#pragma unroll
  for (int j = 0; j < kB; ++j) {
    const int idx = threadIdx.x + j * kRowThreads;
#pragma unroll
    for (int h = 0; h < kBlockVecs; ++h)
      raw[j][h] = idx < blocks ? __ldg(src + kBlockVecs * idx + h) : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int j = 0; j < kB; ++j) {
    bamax[j] = amax_bf16x16(raw[j][0], raw[j][1]);
    a = numeric::amax_nan(a, bamax[j]);
  }
  a = group_amax<32>(a);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = a;
  __syncthreads();
#pragma unroll
  for (int w = 0; w < kRowThreads / 32; ++w) a = numeric::amax_nan(a, warp_amax[w]);
  const float row_scale = numeric::nvfp4_activation_row_scale(a);
  const bool row_nan = numeric::is_nan(row_scale);  // NaN or Inf in the row: every scale 0x7F, data 0x7
  if (threadIdx.x == 0)
    *reinterpret_cast<float*>(out.token_scale_inv + t * out.inv_row_stride) =
        numeric::nvfp4_activation_token_scale_inv(row_scale);
  const float quotient = numeric::div_rn(row_scale, numeric::e4m3_significand(threadIdx.x % 8));
  uint8_t* q_row = out.q + t * out.q_row_stride;
  uint8_t* s_row = out.scales + t * out.scale_row_stride;
  // A block's 8 bytes of data in one store where every row's data starts 8-byte aligned (the packed rows
  // do; the API asks only 4).
  const bool whole = ((reinterpret_cast<uintptr_t>(out.q) | static_cast<uintptr_t>(out.q_row_stride)) & 7) == 0;
#pragma unroll
  for (int j = 0; j < kB; ++j) {
    const int idx = threadIdx.x + j * kRowThreads;
    if (j * kRowThreads + static_cast<int>(threadIdx.x & ~31u) >= blocks) break;  // warp-uniform
    uint8_t s;
    const uint2 words = nvfp4_row_block(raw[j][0], raw[j][1], bamax[j], row_scale, row_nan, quotient, idx < blocks, s);
    if (idx >= blocks) continue;
    uint8_t* q = q_row + idx * (numeric::kNVFP4Block / 2);
    if (whole) {
      *reinterpret_cast<uint2*>(q) = words;
    } else {
      reinterpret_cast<uint32_t*>(q)[0] = words.x;
      reinterpret_cast<uint32_t*>(q)[1] = words.y;
    }
    s_row[idx] = s;
  }
}

template <int kB, int kRowThreads>
void launch_nvfp4_rows(const Bf16Matrix& x, const Nvfp4RowsOut& out, const int32_t* rows_bound,
                       const RowGroups& token_rows, cudaStream_t stream) {
  nvfp4_rows_kernel<kB, kRowThreads>
      <<<static_cast<unsigned>(x.rows), kRowThreads, 0, stream>>>(x, out, rows_bound, token_rows);
}

}  // namespace

void nvfp4_quantize_weight(const void* w_ENK, int64_t num_experts, int64_t n, int64_t k, uint8_t* q_ENH,
                           uint8_t* scales, float* global_scale, float* global_scale_inv, cudaStream_t stream) {
  DMOE_CHECK_ARG(num_experts >= 1 && num_experts <= 65535, "nvfp4_quantize_weight: num_experts=", num_experts,
                 " must be in [1, 65535]");
  DMOE_CHECK_ARG(n > 0 && k > 0 && k % numeric::kNVFP4Block == 0, "nvfp4_quantize_weight: weight dims [", n, ", ", k,
                 "] must be positive with K a multiple of ", numeric::kNVFP4Block);
  const auto* w = static_cast<const uint16_t*>(w_ENK);
  // The amax accumulates in global_scale_inv's storage (as |x| bits), which the last kernel overwrites.
  auto* amax_bits = reinterpret_cast<uint32_t*>(global_scale_inv);
  DMOE_CUDA_CHECK(cudaMemsetAsync(amax_bits, 0, num_experts * sizeof(uint32_t), stream));
  const int64_t per_expert = n * k;
  const int64_t chunks = (per_expert / kVec + kChunkVecs - 1) / kChunkVecs;
  // The amax CTAs' counts go in global_scale's storage, which the last kernel overwrites too.
  auto* done = reinterpret_cast<uint32_t*>(global_scale);
  DMOE_CUDA_CHECK(cudaMemsetAsync(done, 0, num_experts * sizeof(uint32_t), stream));
  const int64_t slots = resident_ctas(reinterpret_cast<const void*>(&nvfp4_weight_pipelined_kernel), kThreads, 0);
  const int64_t total = num_experts * chunks, lag = chunks + std::max<int64_t>(chunks, slots / 2);
  DMOE_CHECK_ARG(2 * (total + lag) < (int64_t{1} << 31), "nvfp4_quantize_weight: ", num_experts, " x [", n, ", ", k,
                 "] exceeds one launch");
  nvfp4_weight_pipelined_kernel<<<static_cast<unsigned>(2 * (total + lag)), kThreads, 0, stream>>>(
      w, per_expert, chunks, total, lag, amax_bits, done, q_ENH, scales);
  DMOE_CUDA_CHECK_LAUNCH();
  nvfp4_global_scales_kernel<<<static_cast<unsigned>((num_experts + 127) / 128), 128, 0, stream>>>(
      global_scale, global_scale_inv, num_experts);
  DMOE_CUDA_CHECK_LAUNCH();
}

void nvfp4_quantize_rows(const Bf16Matrix& x, const Nvfp4RowsOut& out, cudaStream_t stream, const int32_t* rows_bound,
                         const RowGroups& token_rows) {
  DMOE_CHECK_ARG(x.cols > 0 && x.cols % numeric::kNVFP4Block == 0 && x.cols <= 16384,
                 "nvfp4_quantize_rows: D=", x.cols, " must be a positive multiple of 16 up to 16384");
  DMOE_CHECK_ARG(x.row_ptrs == nullptr && x.row_scales == nullptr,
                 "nvfp4_quantize_rows: gathered rows (row_ptrs) and scaled rows (row_scales) are not supported");
  DMOE_CHECK_ARG(x.row_stride % kVec == 0 && out.q_row_stride % 4 == 0 && out.inv_row_stride % 4 == 0,
                 "nvfp4_quantize_rows: strides must keep 16-byte input, 4-byte data and 4-byte scale alignment");
  if (x.rows == 0) return;
  DMOE_CHECK_ARG(x.rows <= 0x7fffffff, "nvfp4_quantize_rows: too many rows (", x.rows, ")");
  DMOE_CHECK_ARG(token_rows.offsets_G1 == nullptr || (token_rows.counts_G != nullptr && token_rows.num_groups >= 1),
                 "nvfp4_quantize_rows: token_rows needs offsets_G1, counts_G and at least one group");
  const int64_t blocks = x.cols / numeric::kNVFP4Block;  // 1 .. 1024
  if (blocks <= 64) launch_nvfp4_rows<1, 64>(x, out, rows_bound, token_rows, stream);
  else if (blocks <= 128) launch_nvfp4_rows<2, 64>(x, out, rows_bound, token_rows, stream);
  else if (blocks <= 256) launch_nvfp4_rows<2, 128>(x, out, rows_bound, token_rows, stream);
  else if (blocks <= 512) launch_nvfp4_rows<4, 128>(x, out, rows_bound, token_rows, stream);
  else launch_nvfp4_rows<8, 128>(x, out, rows_bound, token_rows, stream);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
