// MXFP8 operands at shared scales (numeric::mxfp8_code_at_shared_scale): the blocks of four 32-element
// E8M0 blocks (sixteen 32x32 tiles for a weight) take the largest code, so the FP8-blockwise kernels --
// one FP32 scale per 128 elements (per 128x128 for weights) -- run MXFP8's layer GEMMs (perf_history
// G149-G151). Three launches:
//   mxfp8_columns_to_fp8_blockwise  the WGRAD's column bundles: E4M3 [C, tokens] with E8M0 per (feature,
//                                   32 tokens) -> strided columns with FP32 per (feature, 128 tokens), every
//                                   group's tokens from a multiple of 128
//   mxfp8_rows_to_fp8_blockwise     the FPROPs' and DGRADs' row bundles, in place: the k-block-major code
//                                   words become the FP32 scale grid (the same bytes), the 32-byte blocks
//                                   below the shared code are re-rounded
//   mxfp8_weight_block_scales       a prepared weight's 128x128 FP32 scales from one of its E8M0 grids
//
// Columns: no transpose -- tokens are contiguous on both sides, so a thread takes one 16-byte piece (16
// tokens, half a 32-token block) of a feature at a time; eight threads cover a feature's 128-token block,
// a warp four features, a pass of the CTA 32, and the eight threads of a feature find the shared scale
// with three shuffles over their blocks' codes. Per element: 1 byte read, 1 written, 1/32 of a scale
// read and 1/32 of an FP32 scale written; codes of a block at the shared scale pass through unchanged,
// the others take an E4M3 decode, one FMUL by 2^-shift and an RNE encode. blockIdx.y is a 128-token
// block of the output, blockIdx.x a 256-feature slice; each CTA rebuilds the groups' 128-padded starts
// in shared memory (one warp scans the padded lengths) and finds its block's group by binary search;
// blocks past the last group's padded end exit.
#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kCtThreads = 256;
constexpr int kShared = numeric::kMXBlock * numeric::kMXBlocksPerSharedBlock;  // output block: 128 tokens
constexpr int kPieces = kShared / 16;                   // 16-byte pieces per feature and block (8)
constexpr int kFeaturesPerPass = kCtThreads / kPieces;  // 32
constexpr int kPasses = 8;                              // 256 features per CTA
constexpr int kCtMaxGroups = 1024;

__device__ __forceinline__ int32_t padded_length(const int32_t* offsets, int g) {
  return (offsets[g + 1] - offsets[g] + kShared - 1) / kShared * kShared;
}

__device__ __noinline__ void capacity_trap(long long padded_rows, long long capacity) {
  printf("Dist-MoE quantize: the groups' rows rounded up to 128 (%lld) exceed the capacity %lld\n", padded_rows,
         capacity);
  __trap();
}

// The first `keep` bytes of v (0 .. 16), the rest zero.
__device__ __forceinline__ uint4 first_bytes(uint4 v, int keep) {
  uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int k = keep - 4 * i;
    w[i] = k >= 4 ? w[i] : k <= 0 ? 0u : w[i] & ((1u << (8 * k)) - 1u);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void __launch_bounds__(kCtThreads)
    mxfp8_columns_to_fp8_blockwise_kernel(Mxfp8In in, RowGroups groups, int64_t C, int64_t capacity,
                                          Fp8BlockwiseOut out, int32_t* padded_counts) {
  __shared__ int32_t offsets[kCtMaxGroups + 1];
  __shared__ int32_t starts[kCtMaxGroups + 1];  // the groups' 128-padded starts in the output
  const int G = groups.num_groups;
  const int tid = static_cast<int>(threadIdx.x), lane = tid % 32;
  for (int g = tid; g <= G; g += kCtThreads) offsets[g] = groups.offsets_G1[g];
  __syncthreads();
  if (tid < 32) {  // lane l scans the padded lengths of groups [l * chunk, (l + 1) * chunk)
    const int chunk = (G + 31) / 32, g0 = min(G, lane * chunk), g1 = min(G, g0 + chunk);
    int sum = 0;
    for (int g = g0; g < g1; ++g) sum += padded_length(offsets, g);
    int inclusive = sum;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int v = __shfl_up_sync(0xffffffffu, inclusive, o);
      if (lane >= o) inclusive += v;
    }
    int run = inclusive - sum;
    for (int g = g0; g < g1; ++g) {
      starts[g] = run;
      run += padded_length(offsets, g);
    }
    if (lane == 31) starts[G] = inclusive;
  }
  __syncthreads();
  const int64_t used = offsets[G], padded_end = starts[G];
  const int64_t in_offset = in.compact && in.q_offset != nullptr ? __ldg(in.q_offset) : 0;
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    for (int g = tid; g <= G; g += kCtThreads)
      if (offsets[g] % numeric::kMXBlock != 0) layout_trap("an expert's first row", offsets[g], numeric::kMXBlock);
    if (tid == 0 && in_offset % 128 != 0) layout_trap("the compact columns' q_offset", in_offset, 128);
    if (tid == 0 && padded_end > capacity) capacity_trap(padded_end, capacity);
    for (int g = tid; g < G; g += kCtThreads) padded_counts[g] = starts[g + 1] - starts[g];
  }
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * kShared;
  if (t0 >= padded_end) return;  // CTA-uniform
  if (in.compact) {  // the bundle's base and strides follow from R = used (quantize.h)
    in.q += in_offset;
    in.q_row_stride = used;
    in.scales = in.q + mxfp8_compact_columns_scales_offset(C, used);
    in.scale_row_stride = 1;
    in.scale_block_stride = C;
  }
  // The block's group: the last g with starts[g] <= t0 (a nonempty one: t0 < padded_end).
  int lo = 0, hi = G - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (starts[mid] <= t0) lo = mid;
    else hi = mid - 1;
  }
  const int64_t src = offsets[lo] + (t0 - starts[lo]);  // the block's first input token
  const int subs = static_cast<int>(min(int64_t{numeric::kMXBlocksPerSharedBlock}, (offsets[lo + 1] - src) / numeric::kMXBlock));
  const int64_t real_end = offsets[lo] + __ldg(groups.counts_G + lo);
  const int piece = tid % kPieces, sub = piece / 2;
  const int64_t tok = src + 16 * piece;
  const bool present = sub < subs;  // the piece's 32-token block exists (else: zero padding to 128)
  const int keep = present ? static_cast<int>(max(int64_t{0}, min(int64_t{16}, real_end - tok))) : 0;
  const int64_t f_first = static_cast<int64_t>(blockIdx.x) * (kPasses * kFeaturesPerPass) + tid / kPieces;

  uint4 v[kPasses];
  uint32_t code[kPasses];
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {  // every load first: eight 16-byte loads in flight per thread
    const int64_t f = f_first + i * kFeaturesPerPass;
    v[i] = make_uint4(0, 0, 0, 0);
    code[i] = 0;
    if (f < C && present) {
      v[i] = __ldg(reinterpret_cast<const uint4*>(in.q + f * in.q_row_stride + tok));
      code[i] = __ldg(in.scales + f * in.scale_row_stride + (src / numeric::kMXBlock + sub) * in.scale_block_stride);
    }
  }
  const int64_t block = t0 / kShared;
#pragma unroll
  for (int i = 0; i < kPasses; ++i) {
    const int64_t f = f_first + i * kFeaturesPerPass;
    uint32_t shared = code[i];  // the largest code over the feature's eight lanes (absent blocks: 0)
#pragma unroll
    for (int o = 1; o < kPieces; o <<= 1) shared = max(shared, __shfl_xor_sync(0xffffffffu, shared, o));
    if (f >= C) continue;
    uint4 w = v[i];
    if (code[i] < shared) {
      const uint32_t shift = shared - code[i];
      w = e4m3x16_scaled(w, shared_scale_factor(shift));
    }
    if (keep < 16) w = first_bytes(w, keep);  // padding rows and tokens past the group are +0
    *reinterpret_cast<uint4*>(out.q + f * out.q_row_stride + t0 + 16 * piece) = w;
    if (piece == 0)
      out.scales[f * out.scale_row_stride + block * out.scale_block_stride] =
          numeric::e8m0_to_float(static_cast<uint8_t>(shared));
  }
}

// Rows: a thread per (row, 128-feature block) -- consecutive threads take consecutive rows, so the code
// words load and store as whole lines; each 32-byte block below the shared code is loaded, re-rounded
// and stored back, the others are not touched.
__global__ void __launch_bounds__(kCtThreads)
    mxfp8_rows_to_fp8_blockwise_kernel(uint8_t* q, int64_t C, uint32_t* words, int64_t word_ld, const int32_t* used_rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kCtThreads + threadIdx.x;
  const int64_t j = blockIdx.y;
  if (r >= __ldg(used_rows)) return;
  uint32_t* word = words + j * word_ld + r;
  const uint32_t codes = *word;
  const uint32_t shared = max_code4(codes);
  uint8_t* row = q + r * C + j * kShared;
#pragma unroll
  for (int i = 0; i < numeric::kMXBlocksPerSharedBlock; ++i) {
    const uint32_t code = (codes >> (8 * i)) & 0xffu;
    if (code == shared) continue;
    const float factor = shared_scale_factor(shared - code);
    uint4* p = reinterpret_cast<uint4*>(row + i * numeric::kMXBlock);
    const uint4 a = p[0], b = p[1];
    p[0] = e4m3x16_scaled(a, factor);
    p[1] = e4m3x16_scaled(b, factor);
  }
  *reinterpret_cast<float*>(word) = numeric::e8m0_to_float(static_cast<uint8_t>(shared));
}

// A weight's 128x128 FP32 scales [E, R/128, C/128] from an E8M0 grid [E R, C/32] (each 32x32 tile's code
// repeated on its 32 rows): a thread per block reads four rows' four codes.
__global__ void __launch_bounds__(kCtThreads)
    mxfp8_weight_block_scales_kernel(const uint8_t* scales, int64_t blocks, int64_t rows, int64_t cols, float* out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kCtThreads + threadIdx.x;
  if (idx >= blocks) return;
  const int64_t cb = cols / kShared, rb = rows / kShared;
  const int64_t e = idx / (rb * cb), br = idx / cb % rb, bc = idx % cb;
  uint32_t m = 0;
#pragma unroll
  for (int i = 0; i < numeric::kMXBlocksPerSharedBlock; ++i) {
    const uint32_t w = __ldg(reinterpret_cast<const uint32_t*>(
        scales + (e * rows + br * kShared + i * numeric::kMXBlock) * (cols / numeric::kMXBlock) + bc * 4));
    m = max(m, max_code4(w));
  }
  out[idx] = numeric::e8m0_to_float(static_cast<uint8_t>(m));
}

}  // namespace

void mxfp8_columns_to_fp8_blockwise(const Mxfp8In& cols, const RowGroups& groups, int64_t C, int64_t capacity,
                                    const Fp8BlockwiseOut& out, int32_t* padded_counts_G, cudaStream_t stream) {
  const char* name = "mxfp8_columns_to_fp8_blockwise";
  DMOE_CHECK_ARG(C > 0 && C % numeric::kMXBlock == 0, name, ": C=", C, " must be a positive multiple of 32");
  DMOE_CHECK_ARG(capacity >= 0 && capacity % kShared == 0, name, ": the capacity ", capacity,
                 " must be a multiple of 128");
  DMOE_CHECK_ARG((cols.compact || (cols.q_row_stride % 16 == 0 && cols.q_row_stride > 0)) &&
                     reinterpret_cast<uintptr_t>(cols.q) % 16 == 0,
                 name, ": the MXFP8 columns need a row stride that is a multiple of 16 bytes, and 16-byte alignment");
  DMOE_CHECK_ARG(cols.compact || cols.q_offset == nullptr, name, ": q_offset is set but compact is not");
  DMOE_CHECK_ARG(!out.compact && out.q != nullptr && out.scales != nullptr && out.q_row_stride >= capacity &&
                     out.q_row_stride % 16 == 0 && reinterpret_cast<uintptr_t>(out.q) % 16 == 0,
                 name, ": the output needs strided columns with a row stride >= the capacity, a multiple of 16 bytes, "
                 "16-byte aligned, and FP32 scales");
  DMOE_CHECK_ARG(padded_counts_G != nullptr, name, ": padded_counts_G is required (the WGRAD's counts)");
  check_group_counts(name, groups);
  DMOE_CHECK_ARG(groups.num_groups >= 1 && groups.num_groups <= kCtMaxGroups, name, ": ", groups.num_groups,
                 " groups (1 .. ", kCtMaxGroups, " supported)");
  const int64_t blocks = capacity / kShared;
  DMOE_CHECK_ARG(blocks <= 65535, name, ": capacity ", capacity, " exceeds one launch");
  // Even with no rows the first CTA writes the padded counts (zeros).
  const dim3 grid(static_cast<unsigned>((C + kPasses * kFeaturesPerPass - 1) / (kPasses * kFeaturesPerPass)),
                  static_cast<unsigned>(blocks > 0 ? blocks : 1));
  mxfp8_columns_to_fp8_blockwise_kernel<<<grid, kCtThreads, 0, stream>>>(cols, groups, C, capacity, out,
                                                                          padded_counts_G);
  DMOE_CUDA_CHECK_LAUNCH();
}

void mxfp8_rows_to_fp8_blockwise(uint8_t* q, int64_t C, uint32_t* code_words, int64_t word_ld, int64_t capacity,
                                 const int32_t* used_rows, cudaStream_t stream) {
  const char* name = "mxfp8_rows_to_fp8_blockwise";
  DMOE_CHECK_ARG(C > 0 && C % kShared == 0, name, ": C=", C, " must be a positive multiple of 128");
  DMOE_CHECK_ARG(q != nullptr && code_words != nullptr && used_rows != nullptr && reinterpret_cast<uintptr_t>(q) % 16 == 0,
                 name, ": the row bundle (16-byte aligned), its code words and the used-row count are required");
  DMOE_CHECK_ARG(word_ld >= capacity && capacity >= 0, name, ": the code words' row stride ", word_ld,
                 " must cover the capacity ", capacity);
  if (capacity == 0) return;
  const dim3 grid(static_cast<unsigned>((capacity + kCtThreads - 1) / kCtThreads), static_cast<unsigned>(C / kShared));
  mxfp8_rows_to_fp8_blockwise_kernel<<<grid, kCtThreads, 0, stream>>>(q, C, code_words, word_ld, used_rows);
  DMOE_CUDA_CHECK_LAUNCH();
}

void mxfp8_weight_block_scales(const uint8_t* scales, int64_t num_experts, int64_t rows, int64_t cols, float* out,
                               cudaStream_t stream) {
  const char* name = "mxfp8_weight_block_scales";
  DMOE_CHECK_ARG(rows > 0 && cols > 0 && rows % kShared == 0 && cols % kShared == 0, name, ": the grid's rows=", rows,
                 " and columns=", cols, " must be positive multiples of 128");
  DMOE_CHECK_ARG(scales != nullptr && out != nullptr && reinterpret_cast<uintptr_t>(scales) % 4 == 0, name,
                 ": the E8M0 scales (4-byte aligned) and the output are required");
  const int64_t blocks = num_experts * (rows / kShared) * (cols / kShared);
  if (blocks == 0) return;
  mxfp8_weight_block_scales_kernel<<<static_cast<unsigned>((blocks + kCtThreads - 1) / kCtThreads), kCtThreads, 0,
                                     stream>>>(scales, blocks, rows, cols, out);
  DMOE_CUDA_CHECK_LAUNCH();
}


}  // namespace dist_moe::quant
