// mxfp8_dequantize_columns: the MXFP8 WGRAD column operand (E4M3 [D, capacity], tokens contiguous,
// E8M0 scales per (feature, 32 tokens)) back to BF16 rows [capacity, D], for the BF16 WGRAD.
//
// A transpose that widens each byte to two: per element 1 byte read, 2 written, 1/32 of a scale.
// A CTA takes 128 tokens x up to kFeatureTiles tiles of 128 features and walks the feature tiles
// through two shared-memory stages filled by cp.async (no registers hold the next tile):
//   copy    4 x 16-byte copies per thread (whole 128-byte runs of tokens per feature row) into
//           [feature][token], 16-byte pieces XOR-swizzled by the row's 8-row group (conflict-free
//           both ways, see dq_piece), and the tile's scales as [token block][feature]: with the
//           token-block-major scales the layer saves (compact bundles) 32 16-byte copies, in any
//           other layout plain loads
//   convert a thread takes 8 features x 4 tokens (eight 4-byte shared loads, one 8-byte load of
//           the eight features' scales), transposes the bytes with byte permutes and writes
//           each token's 8 BF16 features as one 16-byte store: eight lanes cover 128 contiguous
//           bytes of a row
// Per element: half an E4M3x2 -> F16x2 conversion, one F16 -> F32 widening, one FMUL (the oracle's
// mul_rn, FP32 subnormals kept), half an F32x2 -> BF16x2 RNE pack.
#include "dist_moe/check.h"
#include "dist_moe/device/numeric/numeric.cuh"
#include "quant/quant_common.cuh"
#include "quant/quantize.h"

namespace dist_moe::quant {
namespace {

constexpr int kDqThreads = 256;
constexpr int kFeatureTiles = 4;                            // 128-feature tiles per CTA
constexpr int kDqStages = 2;
constexpr int kDqPieces = kTile * kTile / 16 / kDqThreads;  // 16-byte copies per thread per tile (4)
constexpr int kTokenBlocks = kTile / numeric::kMXBlock;     // scale blocks per tile row (4)
constexpr int kMaxGroups = 1024;

// Shared-memory piece of 16-byte piece p (tokens 16p .. 16p + 15) of feature row f: XOR with the
// row's 8-row group. The converting warp's lanes read rows 8g + j (g = lane / 4, j fixed per load)
// at piece q, word lane % 4: pieces q ^ g are eight different ones, so the 32 words fill the 32
// banks; the staging copies of eight lanes (one row, pieces 0 .. 7) fill them as well.
__device__ __forceinline__ int dq_piece(int f, int p) { return p ^ ((f >> 3) & 7); }

struct DqStage {
  uint8_t q[kTile][kTile];                // [feature][token], swizzled pieces
  uint8_t scales[kTokenBlocks][kTile];    // [token block][feature]
};

__global__ void __launch_bounds__(kDqThreads, 4)
    mxfp8_dequantize_columns_kernel(Mxfp8In in, RowGroups groups, Bf16MatrixOut y) {
  __shared__ __align__(kRingAlign) DqStage stages[kDqStages];  // 128-byte rows on whole lines (G109)
  __shared__ int32_t offsets[kMaxGroups + 1];
  __shared__ uint32_t real_bits[kTile / 32];  // bit k of word i: token m0 + 32 i + k is a real row

  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * kTile;
  const int64_t used = __ldg(groups.offsets_G1 + groups.num_groups);
  const int64_t end = used < y.rows ? used : y.rows;
  if (m0 >= end) return;  // CTA-uniform: past the groups nothing is read or written
  // Compact columns: the bundle's base and strides follow from R = used (quantize.h).
  const int64_t in_offset = in.compact && in.q_offset != nullptr ? __ldg(in.q_offset) : 0;
  if (in.compact) {
    in.q += in_offset;
    in.q_row_stride = used;
    in.scales = in.q + mxfp8_compact_columns_scales_offset(y.cols, used);
    in.scale_row_stride = 1;
    in.scale_block_stride = y.cols;
  }
  const int tokens = static_cast<int>(end - m0 < kTile ? end - m0 : kTile);  // a multiple of 32
  const int64_t D = y.cols;
  const int64_t d_first = static_cast<int64_t>(blockIdx.x) * (kFeatureTiles * kTile);
  const int64_t f_left = (D - d_first + kTile - 1) / kTile;
  const int tiles = static_cast<int>(f_left < kFeatureTiles ? f_left : kFeatureTiles);
  // Token-block-major scales (the compact bundle's): a token block's 128 feature scales as eight
  // aligned 16-byte copies.
  const bool scale_pieces = in.scale_row_stride == 1 && in.scale_block_stride % 16 == 0 &&
                            reinterpret_cast<uintptr_t>(in.scales) % 16 == 0;

  // Tile t's copies into `stage`; what lies past D or the last row is not copied (never read back:
  // those rows and tokens are not stored).
  auto issue = [&](int t, DqStage& stage) {
    const int64_t d0 = d_first + int64_t{t} * kTile;
#pragma unroll
    for (int j = 0; j < kDqPieces; ++j) {
      const int idx = threadIdx.x + j * kDqThreads;
      const int f = idx / (kTile / 16), p = idx % (kTile / 16);
      if (d0 + f < D && p * 16 < tokens)
        ptx::cp_async_16_zfill(&stage.q[f][dq_piece(f, p) * 16], in.q + (d0 + f) * in.q_row_stride + m0 + p * 16, true);
    }
    if (scale_pieces) {
      const int b = threadIdx.x / 8, p = threadIdx.x % 8;  // threads 0..31: block b, features 16p ..
      if (threadIdx.x < kTokenBlocks * 8 && b * numeric::kMXBlock < tokens && d0 + p * 16 < D)
        ptx::cp_async_16_zfill(&stage.scales[b][p * 16],
                               in.scales + (m0 / numeric::kMXBlock + b) * in.scale_block_stride + d0 + p * 16, true);
    } else if (threadIdx.x < kTile && d0 + threadIdx.x < D) {  // plain loads (published by the same barrier)
      const uint8_t* s =
          in.scales + (m0 / numeric::kMXBlock) * in.scale_block_stride + (d0 + threadIdx.x) * in.scale_row_stride;
      for (int b = 0; b < kTokenBlocks && b * numeric::kMXBlock < tokens; ++b)
        stage.scales[b][threadIdx.x] = s[b * in.scale_block_stride];
    }
  };

  issue(0, stages[0]);  // in flight while the group table and the real-row bits are made
  ptx::cp_async_commit();

  for (int g = threadIdx.x; g <= groups.num_groups; g += kDqThreads) offsets[g] = groups.offsets_G1[g];
  __syncthreads();
  if (blockIdx.x == 0 && blockIdx.y == 0) {
    for (int g = threadIdx.x; g <= groups.num_groups; g += kDqThreads)
      if (offsets[g] % numeric::kMXBlock != 0) layout_trap("an expert's first row", offsets[g], numeric::kMXBlock);
    if (threadIdx.x == 0 && in_offset % 128 != 0) layout_trap("the compact columns' q_offset", in_offset, 128);
  }
  if (threadIdx.x < kTile) {  // warps 0..3, whole
    const bool is_real = row_is_real(offsets, groups, m0 + threadIdx.x, end);
    const uint32_t bits = __ballot_sync(0xffffffffu, is_real);
    if (threadIdx.x % 32 == 0) real_bits[threadIdx.x / 32] = bits;
  }

  // The converting thread's place: warp-unit U = warp + 8u (u = 0, 1) covers features
  // 64 (U % 2) .. + 63 and token piece U / 2 (16 tokens, half a 32-token scale block); lane:
  // features f0 .. f0 + 7 (f0 = 64 (U % 2) + 8 (lane / 4)), tokens 16 (U / 2) + 4 (lane % 4) .. + 3.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int fg = lane / 4, tw = lane % 4;

  for (int t = 0; t < tiles; ++t) {
    DqStage& stage = stages[t % kDqStages];
    ptx::cp_async_wait<0>();  // tile t has landed (this thread's copies)
    // Publishes tile t (and, at t = 0, real_bits); every thread has left the conversion of tile
    // t - 1, so its stage takes tile t + 1's copies from here on.
    __syncthreads();
    if (t + 1 < tiles) issue(t + 1, stages[(t + 1) % kDqStages]);
    ptx::cp_async_commit();
    const int64_t d0 = d_first + int64_t{t} * kTile;
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int unit = warp + 8 * u;
      const int f0 = 64 * (unit % 2) + 8 * fg, piece = unit / 2;
      const int tok = 16 * piece + 4 * tw;  // the thread's first token in the tile
      if (d0 + f0 >= D || tok >= tokens) continue;  // D % 32 == 0, tokens % 32 == 0: all 4 x 8 in or out
      uint32_t w[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        w[j] = *reinterpret_cast<const uint32_t*>(&stage.q[f0 + j][dq_piece(f0 + j, piece) * 16 + 4 * tw]);
      const uint2 sw = *reinterpret_cast<const uint2*>(&stage.scales[piece / 2][f0]);  // the unit's token block
      float s[8];
#pragma unroll
      for (int j = 0; j < 8; ++j)
        s[j] = numeric::e8m0_to_float(static_cast<uint8_t>((j < 4 ? sw.x : sw.y) >> (8 * (j % 4))));
      const uint32_t real = real_bits[tok / 32] >> (tok % 32);  // bits 0..3: the thread's tokens
      uint16_t* out = static_cast<uint16_t*>(y.data) + (m0 + tok) * y.row_stride + d0 + f0;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        if (tok + k >= tokens) break;
        // Token k: feature pair i's codes (2i in the low byte) from byte k of words 2i and 2i + 1.
        uint32_t v[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          float a, b;
          e4m3x2_to_float2(__byte_perm(w[2 * i], w[2 * i + 1], static_cast<uint32_t>(k | ((k + 4) << 4))), a, b);
          v[i] = ptx::pack_bf16x2(numeric::mul_rn(a, s[2 * i]), numeric::mul_rn(b, s[2 * i + 1]));
        }
        const bool keep = (real >> k) & 1u;  // a padding row is +0 whatever its block holds
        *reinterpret_cast<uint4*>(out + k * y.row_stride) =
            keep ? make_uint4(v[0], v[1], v[2], v[3]) : make_uint4(0, 0, 0, 0);
      }
    }
  }
}

}  // namespace

void mxfp8_dequantize_columns(const Mxfp8In& cols, const RowGroups& groups, const Bf16MatrixOut& y,
                              cudaStream_t stream) {
  const char* name = "mxfp8_dequantize_columns";
  DMOE_CHECK_ARG(y.cols % numeric::kMXBlock == 0, name, ": D=", y.cols, " must be a multiple of 32");
  DMOE_CHECK_ARG(y.rows % numeric::kMXBlock == 0, name, ": the row capacity ", y.rows, " must be a multiple of 32");
  DMOE_CHECK_ARG(y.row_stride >= y.cols && y.row_stride % 8 == 0 && reinterpret_cast<uintptr_t>(y.data) % 16 == 0,
                 name, ": the BF16 rows need a row stride >= D, a multiple of 8 elements, and 16-byte alignment");
  DMOE_CHECK_ARG((cols.compact || (cols.q_row_stride >= y.rows && cols.q_row_stride % 16 == 0)) &&
                     reinterpret_cast<uintptr_t>(cols.q) % 16 == 0,
                 name, ": the transposed data need a row stride >= capacity, a multiple of 16 bytes, and 16-byte alignment");
  DMOE_CHECK_ARG(cols.compact || cols.q_offset == nullptr, name, ": q_offset is set but compact is not");
  check_group_counts(name, groups);
  DMOE_CHECK_ARG(groups.num_groups >= 1 && groups.num_groups <= kMaxGroups, name, ": ", groups.num_groups,
                 " groups (1 .. ", kMaxGroups, " supported)");
  if (y.rows == 0 || y.cols == 0) return;
  const int64_t tiles_t = (y.rows + kTile - 1) / kTile;
  const int64_t tiles_f = (y.cols + kTile - 1) / kTile;
  DMOE_CHECK_ARG(tiles_t <= 65535, name, ": capacity ", y.rows, " exceeds one launch");
  allow_dynamic_smem<mxfp8_dequantize_columns_kernel>(0);  // the carveout: four ~37 KiB CTAs per SM
  const dim3 grid(static_cast<unsigned>((tiles_f + kFeatureTiles - 1) / kFeatureTiles), static_cast<unsigned>(tiles_t));
  mxfp8_dequantize_columns_kernel<<<grid, kDqThreads, 0, stream>>>(cols, groups, y);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::quant
