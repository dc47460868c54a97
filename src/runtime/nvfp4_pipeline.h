// The NVFP4 staged routed-experts pipeline (inference only; docs/block_scaled_layer.md): the BF16
// pipeline's communication, planner and reductions (pipeline_common.h) around NVFP4 expert GEMMs
// that dequantize both operands exactly in the kernel (mainloop_nvfp4_swap_ab.cuh), with upstream's
// quantization points: every token at the source into a packed row of the dispatch window, h2
// re-quantized per token after SwiGLU.
#pragma once

#include <cuda_runtime.h>

#include "dist_moe/routed_experts.h"
#include "runtime/context_impl.h"

namespace dist_moe::runtime {

void nvfp4_forward(Context::Impl& c, const RoutedExpertsInputs& in, void* out_TD, SavedState::Buffers* saved,
                   const ExecutionOptions& o, cudaStream_t stream);

}  // namespace dist_moe::runtime
