// The FP8-blockwise staged routed-experts pipeline (DeepSeek-V3's recipe, beyond upstream;
// docs/block_scaled_layer.md): the BF16 pipeline's communication, planner and reductions
// (pipeline_common.h) around FP8-blockwise expert GEMMs -- 1x128 activation blocks and 128x128
// weight blocks with FP32 scales, FP8 wgmma promoted into FP32 every 128 of K -- with the MXFP8
// pipeline's quantization points and saved state (the column bundles of x and h2, BF16 h1 and h3),
// the columns in 1x128 blocks along tokens.
#pragma once

#include <cuda_runtime.h>

#include "dist_moe/routed_experts.h"
#include "runtime/context_impl.h"

namespace dist_moe::runtime {

void fp8_blockwise_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                           const ExecutionOptions& o, cudaStream_t stream);
void fp8_blockwise_backward(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
                            const void* grad_out_TD, const RoutedExpertsGradients& g, const ExecutionOptions& o,
                            cudaStream_t stream);

}  // namespace dist_moe::runtime
