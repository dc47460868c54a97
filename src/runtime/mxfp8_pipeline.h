// The MXFP8 E4M3 staged routed-experts pipeline (docs/block_scaled_layer.md): the BF16 pipeline's
// communication, planner and reductions (pipeline_common.h) around MXFP8 expert GEMMs, with
// upstream's quantization points (x, h2, grad_h3 and dxy in 1x32 rows and 32x1 columns, weights in
// 32x32 tiles) and upstream's saved state (the column bundles of x and h2, BF16 h1 and h3).
#pragma once

#include <cuda_runtime.h>

#include "dist_moe/routed_experts.h"
#include "runtime/context_impl.h"

namespace dist_moe::runtime {

void mxfp8_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                   const ExecutionOptions& o, cudaStream_t stream);
void mxfp8_backward(Context::Impl& c, const RoutedExpertsInputs& in, const SavedState::Buffers& s,
                    const void* grad_out_TD, const RoutedExpertsGradients& g, const ExecutionOptions& o,
                    cudaStream_t stream);

}  // namespace dist_moe::runtime
