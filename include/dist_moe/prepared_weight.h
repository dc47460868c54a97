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
//   MXFP8 training             E4M3 [E, N, K]      E8M0 [E*N, K/32]          E4M3 [E, K, N]      E8M0 [E*K, N/32]          -
//   MXFP8 inference            E4M3 [E, N, K]      E8M0 [E*N, K/32]          -                   -                         -
//   NVFP4 (inference only)     E2M1x2 [E, N, K/2]  E4M3 [E, N, K/16]         -                   -                         FP32 [E] each
//   FP8 blockwise training     E4M3 [E, N, K]      FP32 [E, N/128, K/128]    E4M3 [E, K, N]      FP32 [E, K/128, N/128]    -
//   FP8 blockwise inference    E4M3 [E, N, K]      FP32 [E, N/128, K/128]    -                   -                         -
// MXFP8 training uses 32x32 tiles, MXFP8 inference 1x32 rows; the byte-level rules and layouts are
// in docs/formats.md. MXFP8 training's dgrad_data is the fprop_data bytes transposed per expert (the
// same E4M3 codes; the DGRAD scales are the tiles' as they are): a Hopper departure from upstream,
// whose Blackwell kernels read one qdata for FPROP and DGRAD. Hopper's E4M3 wgmma reads K-major
// operands only and DGRAD contracts over the weight's N, so the DGRAD GEMM reads this copy (+1 byte
// per weight element, training preparations only; docs/block_scaled_layer.md, decision 1). NVFP4's
// fprop_data stores each 32-bit word of eight E2M1 codes in the Hopper GEMMs' bit order, an
// invertible mix of the plain packing (numeric::nvfp4_weight_word_encode / _decode; docs/formats.md
// "NVFP4", perf_history G126): its bytes are two codes each only once decoded.
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
};

// The fields of a prepared weight of `format` for a [num_experts, rows, cols] BF16 weight.
// Throws kInvalidValue with upstream's texts: MXFP8 needs rows and cols divisible by 32, NVFP4 cols
// divisible by 16, FP8 blockwise both divisible by 128. NVFP4 is inference-only (the flag is
// irrelevant, as upstream).
PreparedWeightSpec prepared_weight_spec(BlockScaledFormat format, bool inference, int64_t num_experts, int64_t rows,
                                        int64_t cols);

// Device buffers of the fields the spec marks present, each its own (dgrad_data is never
// fprop_data), sized and aligned (16 bytes) as the spec says.
struct PreparedWeightBuffers {
  void* fprop_data = nullptr;
  void* fprop_scale = nullptr;
  void* dgrad_data = nullptr;
  void* dgrad_scale = nullptr;
  float* global_scale = nullptr;
  float* global_scale_inv = nullptr;
};

}  // namespace dist_moe
