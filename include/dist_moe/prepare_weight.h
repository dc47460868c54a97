// Filling prepared block-scaled weights on the GPU (the layouts: dist_moe/prepared_weight.h).
// Both calls enqueue on `stream`, allocate nothing and never synchronize: refilling the same
// buffers keeps every pointer, gives the bytes of a fresh preparation and can be captured in a
// CUDA graph. Implemented by dist_moe_quant (src/quant).
#pragma once

#include <cuda_runtime.h>

#include "dist_moe/prepared_weight.h"

namespace dist_moe {

// Quantizes the contiguous BF16 device weight [E, N, K] into `out` (fields as `spec` says).
void prepare_block_scaled_weight(const void* weight_bf16, const PreparedWeightSpec& spec,
                                 const PreparedWeightBuffers& out, cudaStream_t stream);

// FP8 blockwise from a pre-quantized checkpoint: E4M3 data [E, N, K] and its FP32 128x128
// `scale_inv` [E, N/128, K/128] (the dequantization factors) become the prepared weight as they
// are (copied into `out`), plus the transposed copy DGRAD reads when the spec is for training.
void prepare_fp8_blockwise_weight_from_checkpoint(const void* data_e4m3, const float* scale_inv,
                                                  const PreparedWeightSpec& spec, const PreparedWeightBuffers& out,
                                                  cudaStream_t stream);

}  // namespace dist_moe
