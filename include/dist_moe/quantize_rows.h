// Token-row quantizers exposed for callers that build their own packed rows (the PyTorch package,
// tests): the same kernels the block-scaled inference path runs at the source. Enqueued on
// `stream`, no synchronization, graph-capturable. Implemented by dist_moe_quant (src/quant).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dist_moe {

// Bytes of one packed NVFP4 token row of D elements: [D/2 E2M1x2 | D/16 E4M3 | 4 B FP32 inverse
// token scale], rounded up to 16 bytes (docs/formats.md).
int64_t nvfp4_packed_row_bytes(int64_t hidden);

// x [T, D] BF16 (row stride in elements) -> T packed NVFP4 rows, row t at packed + t * out_row_stride
// (bytes, >= nvfp4_packed_row_bytes(D), a multiple of 16). D % 64 == 0 (the inverse scale sits
// 4-byte aligned after D/2 + D/16 bytes), D <= 16384; x and the rows 16-byte aligned.
void quantize_nvfp4_token_rows(const void* x_TD, int64_t tokens, int64_t hidden, int64_t x_row_stride, void* packed,
                               int64_t out_row_stride, cudaStream_t stream);

}  // namespace dist_moe
