// Prepared (block-scaled) expert weights: upstream's prepare_block_scaled_weight, in C++.
//
// A BF16 expert weight [E, N, K] (W13: [E, 2F, D]; W2: [E, D, F]) is quantized once into the
// operands the block-scaled GEMMs read. The caller owns the storage: prepared_weight_spec() (this
// header, CUDA-free, in dist_moe_core) says the dtype, shape and bytes of every field, the caller
// allocates them (the PyTorch package as tensors), and prepare_block_scaled_weight()
// (dist_moe/prepare_weight.h, on the GPU) fills them on a stream. Refilling the same buffers
// (upstream's out=) is the same call: every pointer is kept, the bytes equal a fresh preparation,
// and the call is CUDA-graph capturable (no host synchronization, no allocation).
//
//   format / mode              fprop_data          fprop_scale               dgrad_data          dgrad_scale               global_scale(_inv)
//   MXFP8 training             E4M3 [E, N, K]      E8M0 [E*N, K/32]          = fprop_data        E8M0 [E*K, N/32]          -
//   MXFP8 inference            E4M3 [E, N, K]      E8M0 [E*N, K/32]          -                   -                         -
//   NVFP4 (inference only)     E2M1x2 [E, N, K/2]  E4M3 [E, N, K/16]         -                   -                         FP32 [E] each
//   FP8 blockwise training     E4M3 [E, N, K]      FP32 [E, N/128, K/128]    E4M3 [E, K, N]      FP32 [E, K/128, N/128]    -
//   FP8 blockwise inference    E4M3 [E, N, K]      FP32 [E, N/128, K/128]    -                   -                         -
// MXFP8 training uses 32x32 tiles (one qdata serves FPROP and DGRAD), MXFP8 inference 1x32 rows;
// the byte-level rules and layouts are in docs/formats.md.
#pragma once

#include <cstdint>
#include <vector>

#include "dist_moe/config.h"
#include "dist_moe/dtype.h"

namespace dist_moe {

struct PreparedTensorSpec {
  bool present = false;
  DType dtype = DType::kFloat8E4M3;
  std::vector<int64_t> shape;
  int64_t numel() const;
  int64_t bytes() const;  // numel * element_size (E2M1x2: one byte per packed pair)
};

struct PreparedWeightSpec {
  BlockScaledFormat format = BlockScaledFormat::kMXFP8_E4M3;
  bool inference = false;
  int64_t num_experts = 0, rows = 0, cols = 0;  // the source weight [E, N, K]
  PreparedTensorSpec fprop_data, fprop_scale, dgrad_data, dgrad_scale, global_scale, global_scale_inv;
  bool dgrad_data_is_fprop_data = false;  // MXFP8 training: one qdata, two scale layouts
};

// The fields of a prepared weight of `format` for a [num_experts, rows, cols] BF16 weight.
// Throws kInvalidValue with upstream's texts: MXFP8 needs rows and cols divisible by 32, NVFP4 cols
// divisible by 16, FP8 blockwise both divisible by 128. NVFP4 is inference-only (the flag is
// irrelevant, as upstream).
PreparedWeightSpec prepared_weight_spec(BlockScaledFormat format, bool inference, int64_t num_experts, int64_t rows,
                                        int64_t cols);

// Device buffers of the fields the spec marks present (dgrad_data may equal fprop_data, and must
// for MXFP8 training); each sized and aligned (16 bytes) as the spec says.
struct PreparedWeightBuffers {
  void* fprop_data = nullptr;
  void* fprop_scale = nullptr;
  void* dgrad_data = nullptr;
  void* dgrad_scale = nullptr;
  float* global_scale = nullptr;
  float* global_scale_inv = nullptr;
};

}  // namespace dist_moe
