// Quantize-dequantize of the expert GEMM operands for the oracle's block-scaled paths.
//
// Every function quantizes with the shared formats of include/dist_moe/device/numeric/ (the same
// functions the kernels use) and returns the DEQUANTIZED values as floats: the oracle's quantized
// GEMMs then run on those values with the usual double-sum, FP32-result convention (stages.h).
// Where each operand is quantized (upstream §4.6) is decided by forward()/backward() in oracle.cpp.
//
//   mode          activations, rows (FPROP/DGRAD A)   activations, columns (WGRAD)       weights (per expert [N, K])
//   kMXFP8        1x32 E8M0 blocks along cols          32x1 blocks along rows              32x32 tiles at shared scales per 128x128 (one qdata for FPROP and DGRAD)
//   kFP8Blockwise 1x128 FP32 scales along cols         128x1 blocks along rows             128x128 blocks
//   kNVFP4        per-row FP32 scale + 1x16 E4M3       (inference only: rejected)          per-expert FP32 global scale + 1x16 E4M3
//
// Column blocks restart at every expert's first row (each expert's padded segment is quantized
// on its own, so a block never mixes experts; with the GPU's 128-row alignment this is the same
// as quantizing the whole buffer). Padding rows are zero and stay zero. Partial blocks (a
// dimension that is not a block multiple) cover what exists, as in numeric.cuh.
#pragma once

#include "reference/problem.h"
#include "reference/routing.h"
#include "reference/tensor.h"

namespace dist_moe::reference {

// a [rows, cols] -> dequant(quant(a)) with blocks along cols. kNone returns a copy.
TensorF quantize_activation_rows(const TensorF& a_RC, Quantization q);
// a [M, cols] of rank rt's expert-major rows -> dequant(quant(a)) with blocks along rows,
// restarting at each expert. kNVFP4 throws kInvalidValue. kNone returns a copy.
TensorF quantize_activation_columns(const RankRouting& rt, const TensorF& a_MC, Quantization q);
// a [M, cols] of rank rt's expert-major rows -> the MXFP8 WGRAD operand as the Hopper layer runs it:
// the kMXFP8 column blocks above, then every 128 rows of an expert at the largest of their four
// scales (numeric::mxfp8_cols_at_shared_scales), dequantized.
TensorF mxfp8_wgrad_operand(const RankRouting& rt, const TensorF& a_MC);
// The MXFP8 row operand as the Hopper training layer's FPROPs and DGRADs run it (perf_history G150,
// G151): a [rows, cols] -> the kMXFP8 row blocks at shared scales per 128 columns
// (numeric::mxfp8_rows_at_shared_scales), dequantized.
TensorF mxfp8_shared_rows(const TensorF& a_RC);
// The same two operands quantized once at the shared scales (perf_history G152): every 1x128 row block
// (128x1 column block along an expert's rows) at the E8M0 code of its own amax, each element rounded
// once there (numeric::mxfp8_quantize_rows_shared / mxfp8_quantize_cols_shared), dequantized. They
// differ from the two above only where the exact block's rounding lands on a midpoint of E4M3's
// subnormal grid at the shared scale.
TensorF mxfp8_shared_rows_once(const TensorF& a_RC);
TensorF mxfp8_wgrad_operand_once(const RankRouting& rt, const TensorF& a_MC);
// w [E_local, N, K] -> per expert dequant(quant(w[e])). kNone returns a copy. kMXFP8: the 32x32 tiles at
// shared scales per 128x128 block (numeric::mxfp8_tiles_at_shared_scales), as prepare_block_scaled_weight
// writes MXFP8 training weights (perf_history G151) -- the weights of every MXFP8 layer, training and
// inference (both read 32x32-tile preparations).
TensorF quantize_weights(const TensorF& w_ENK, Quantization q);

}  // namespace dist_moe::reference
