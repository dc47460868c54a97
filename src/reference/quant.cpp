#include "reference/quant.h"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dist_moe/device/numeric/numeric.cuh"
#include "dist_moe/error.h"

namespace dist_moe::reference {
namespace {

std::size_t at(int64_t i) { return static_cast<std::size_t>(i); }

// Quantize-dequantize one row-major [rows, cols] block with blocks along cols (x -> y).
void qdq_rows(const float* x, int64_t rows, int64_t cols, Quantization q, float* y) {
  if (rows == 0 || cols == 0) return;
  std::vector<uint8_t> data(at(rows * cols));
  switch (q) {
    case Quantization::kMXFP8: {
      std::vector<uint8_t> scales(at(rows * numeric::detail::ceil_div(cols, numeric::kMXBlock)));
      numeric::mxfp8_quantize_rows(x, rows, cols, data.data(), scales.data());
      numeric::mxfp8_dequantize_rows(data.data(), scales.data(), rows, cols, y);
      return;
    }
    case Quantization::kFP8Blockwise: {
      std::vector<float> scales(at(rows * numeric::detail::ceil_div(cols, numeric::kFP8BlockwiseBlock)));
      numeric::fp8_blockwise_quantize_act(x, rows, cols, data.data(), scales.data());
      numeric::fp8_blockwise_dequantize_act(data.data(), scales.data(), rows, cols, y);
      return;
    }
    case Quantization::kNVFP4: {
      std::vector<uint8_t> packed(at(rows * numeric::detail::ceil_div(cols, 2)));
      std::vector<uint8_t> scales(at(rows * numeric::detail::ceil_div(cols, numeric::kNVFP4Block)));
      std::vector<float> token_scale_inv(at(rows));
      numeric::nvfp4_quantize_activation(x, rows, cols, packed.data(), scales.data(), token_scale_inv.data());
      numeric::nvfp4_dequantize_activation(packed.data(), scales.data(), token_scale_inv.data(), rows, cols, y);
      return;
    }
    case Quantization::kNone:
      for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i];
      return;
  }
}

// Quantize-dequantize [rows, cols] with blocks along rows (x -> y).
void qdq_cols(const float* x, int64_t rows, int64_t cols, Quantization q, float* y) {
  if (rows == 0 || cols == 0) return;
  std::vector<uint8_t> data(at(rows * cols));
  switch (q) {
    case Quantization::kMXFP8: {
      std::vector<uint8_t> scales(at(numeric::detail::ceil_div(rows, numeric::kMXBlock) * cols));
      numeric::mxfp8_quantize_cols(x, rows, cols, data.data(), scales.data());
      numeric::mxfp8_dequantize_cols(data.data(), scales.data(), rows, cols, y);
      return;
    }
    case Quantization::kFP8Blockwise: {
      // 128x1 blocks = the 1x128 activation recipe on the transpose.
      std::vector<float> xt(at(rows * cols)), yt(at(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) xt[at(c * rows + r)] = x[r * cols + c];
      qdq_rows(xt.data(), cols, rows, q, yt.data());
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = yt[at(c * rows + r)];
      return;
    }
    case Quantization::kNVFP4:
      detail::fail(ErrorCode::kInvalidValue, "NVFP4 is inference-only: there are no column-quantized WGRAD operands");
    case Quantization::kNone:
      for (int64_t i = 0; i < rows * cols; ++i) y[i] = x[i];
      return;
  }
}

// Quantize-dequantize one expert's [rows, cols] weight.
void qdq_weight(const float* w, int64_t rows, int64_t cols, Quantization q, float* y) {
  if (rows == 0 || cols == 0) return;
  switch (q) {
    case Quantization::kMXFP8: {  // the Hopper preparation: the tiles at shared scales per 128x128 block
      std::vector<uint8_t> data(at(rows * cols)), shared(at(rows * cols));
      std::vector<uint8_t> scales(at(numeric::detail::ceil_div(rows, numeric::kMXBlock) *
                                     numeric::detail::ceil_div(cols, numeric::kMXBlock)));
      std::vector<float> shared_scales(at(numeric::detail::ceil_div(rows, int64_t{numeric::kFP8BlockwiseBlock}) *
                                          numeric::detail::ceil_div(cols, int64_t{numeric::kFP8BlockwiseBlock})));
      numeric::mxfp8_quantize_tiles(w, rows, cols, data.data(), scales.data());
      numeric::mxfp8_tiles_at_shared_scales(data.data(), scales.data(), rows, cols, shared.data(), shared_scales.data());
      numeric::fp8_blockwise_dequantize_weight(shared.data(), shared_scales.data(), rows, cols, y);
      return;
    }
    case Quantization::kFP8Blockwise: {
      std::vector<uint8_t> data(at(rows * cols));
      std::vector<float> scales(at(numeric::detail::ceil_div(rows, numeric::kFP8BlockwiseBlock) *
                                   numeric::detail::ceil_div(cols, numeric::kFP8BlockwiseBlock)));
      numeric::fp8_blockwise_quantize_weight(w, rows, cols, data.data(), scales.data());
      numeric::fp8_blockwise_dequantize_weight(data.data(), scales.data(), rows, cols, y);
      return;
    }
    case Quantization::kNVFP4: {
      std::vector<uint8_t> packed(at(rows * numeric::detail::ceil_div(cols, 2)));
      std::vector<uint8_t> scales(at(rows * numeric::detail::ceil_div(cols, numeric::kNVFP4Block)));
      float gs = 0.0f;
      numeric::nvfp4_quantize_weight(w, rows, cols, packed.data(), scales.data(), &gs, nullptr);
      numeric::nvfp4_dequantize_weight(packed.data(), scales.data(), gs, rows, cols, y);
      return;
    }
    case Quantization::kNone:
      for (int64_t i = 0; i < rows * cols; ++i) y[i] = w[i];
      return;
  }
}

// The MXFP8 training operands at shared scales per 128 (FP32 scales, the FP8-blockwise GEMMs' form).
// `quantize(x, rows, cols, q, scales)` writes one rule's codes and scales, per 128 columns of a row
// (scales [rows, ceil(cols / 128)]) or per 128 rows of a column (scales [ceil(rows / 128), cols]).
template <class Quantize>
TensorF shared_rows(const TensorF& a_RC, Quantize&& quantize) {
  TensorF out(a_RC.shape);
  const int64_t rows = a_RC.rows(), C = a_RC.row_size();
  if (rows == 0 || C == 0) return out;
  std::vector<uint8_t> q(at(rows * C));
  std::vector<float> scales(at(rows * numeric::detail::ceil_div(C, int64_t{numeric::kMXSharedBlock})));
  quantize(a_RC.data.data(), rows, C, q.data(), scales.data());
  numeric::fp8_blockwise_dequantize_act(q.data(), scales.data(), rows, C, out.data.data());
  return out;
}

// Column blocks restart at each expert: every expert's segment of a_MC is quantized on its own.
template <class Quantize>
TensorF shared_columns_per_expert(const RankRouting& rt, const TensorF& a_MC, Quantize&& quantize) {
  DMOE_CHECK_ARG(a_MC.rows() == rt.num_rows(), "MXFP8 WGRAD operand: ", a_MC.rows(), " rows but rank ", rt.rank,
                 "'s routing has M=", rt.num_rows());
  TensorF out(a_MC.shape);
  const int64_t C = a_MC.row_size();
  for (int64_t e = 0; e < rt.num_local_experts; ++e) {
    const int64_t m0 = rt.expert_offsets[at(e)], rows = rt.expert_offsets[at(e + 1)] - m0;
    if (rows == 0 || C == 0) continue;
    std::vector<uint8_t> q(at(rows * C));
    std::vector<float> scales(at(numeric::detail::ceil_div(rows, int64_t{numeric::kMXSharedBlock}) * C));
    quantize(a_MC.row(m0), rows, C, q.data(), scales.data());
    float* y = out.row(m0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < C; ++c)
        y[r * C + c] = numeric::fp8_blockwise_dequantize_value(q[at(r * C + c)],
                                                               scales[at((r / numeric::kMXSharedBlock) * C + c)]);
  }
  return out;
}

}  // namespace

TensorF quantize_activation_rows(const TensorF& a_RC, Quantization q) {
  TensorF out(a_RC.shape);
  qdq_rows(a_RC.data.data(), a_RC.rows(), a_RC.row_size(), q, out.data.data());
  return out;
}

TensorF quantize_activation_columns(const RankRouting& rt, const TensorF& a_MC, Quantization q) {
  DMOE_CHECK_ARG(a_MC.rows() == rt.num_rows(), "column quantization: ", a_MC.rows(), " rows but rank ", rt.rank,
                 "'s routing has M=", rt.num_rows());
  if (q == Quantization::kNVFP4) {
    detail::fail(ErrorCode::kInvalidValue, "NVFP4 is inference-only: there are no column-quantized WGRAD operands");
  }
  TensorF out(a_MC.shape);
  const int64_t C = a_MC.row_size();
  for (int64_t e = 0; e < rt.num_local_experts; ++e) {
    const int64_t m0 = rt.expert_offsets[at(e)], m1 = rt.expert_offsets[at(e + 1)];
    qdq_cols(a_MC.row(m0), m1 - m0, C, q, out.row(m0));
  }
  return out;
}

TensorF mxfp8_wgrad_operand(const RankRouting& rt, const TensorF& a_MC) {
  return shared_columns_per_expert(rt, a_MC, [](const float* x, int64_t rows, int64_t C, uint8_t* q_shared,
                                                float* shared_scales) {
    std::vector<uint8_t> q(at(rows * C)), scales(at(numeric::detail::ceil_div(rows, numeric::kMXBlock) * C));
    numeric::mxfp8_quantize_cols(x, rows, C, q.data(), scales.data());
    numeric::mxfp8_cols_at_shared_scales(q.data(), scales.data(), rows, C, q_shared, shared_scales);
  });
}

TensorF mxfp8_wgrad_operand_once(const RankRouting& rt, const TensorF& a_MC) {
  return shared_columns_per_expert(rt, a_MC, numeric::mxfp8_quantize_cols_shared);
}

TensorF mxfp8_shared_rows(const TensorF& a_RC) {
  return shared_rows(a_RC, [](const float* x, int64_t rows, int64_t C, uint8_t* q_shared, float* shared_scales) {
    std::vector<uint8_t> q(at(rows * C)), scales(at(rows * numeric::detail::ceil_div(C, numeric::kMXBlock)));
    numeric::mxfp8_quantize_rows(x, rows, C, q.data(), scales.data());
    numeric::mxfp8_rows_at_shared_scales(q.data(), scales.data(), rows, C, q_shared, shared_scales);
  });
}

TensorF mxfp8_shared_rows_once(const TensorF& a_RC) { return shared_rows(a_RC, numeric::mxfp8_quantize_rows_shared); }

TensorF quantize_weights(const TensorF& w_ENK, Quantization q) {
  DMOE_CHECK_ARG(w_ENK.dims() == 3, "quantize_weights expects [E_local, N, K]");
  TensorF out(w_ENK.shape);
  for (int64_t e = 0; e < w_ENK.size(0); ++e) {
    qdq_weight(w_ENK.row(e), w_ENK.size(1), w_ENK.size(2), q, out.row(e));
  }
  return out;
}

}  // namespace dist_moe::reference
