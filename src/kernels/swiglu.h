// Standalone SwiGLU kernels over the expert-major row buffer: the forward (recompute of h2, the
// unfused path, clip statistics) and the backward (grad_h1 from h1 and grad_h2).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "dist_moe/device/activation/swiglu.cuh"
#include "dist_moe/device/common/device_address.h"
#include "kernels/expert_rows.h"

namespace dist_moe::kernels {

// h2[m, f] = BF16(swiglu(h1[m, f], h1[m, F + f])) for valid rows; padding rows get zeros; rows
// past the last expert are not touched. When `clip_stats_3` is set it is rewritten (zeroed, then
// accumulated) with upstream's counters over valid rows: [0] #gate > limit, [1] #|up| > limit,
// [2] valid rows * F. F must be a multiple of 8. The kernel does nothing unless the device predicate
// `enable` equals `when` (nullptr: always runs).
void swiglu_forward(common::DeviceAddress h1_M2F, common::DeviceAddress h2_MF, int64_t F, const ExpertRowsView& rows,
                    const activation::SwigluParams& p, float* clip_stats_3, float clip_limit, cudaStream_t stream,
                    const int64_t* enable = nullptr, bool when = true);

// grad_h1[m] = BF16([dg | du]) from BF16 h1 and grad_h2 for valid rows; padding rows get zeros.
// grad_h1 may be h1 (in place).
void swiglu_backward(common::DeviceAddress h1_M2F, common::DeviceAddress grad_h2_MF,
                     common::DeviceAddress grad_h1_M2F, int64_t F, const ExpertRowsView& rows,
                     const activation::SwigluParams& p, cudaStream_t stream);

}  // namespace dist_moe::kernels
