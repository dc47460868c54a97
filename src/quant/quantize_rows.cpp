// The public token-row quantizers (include/dist_moe/quantize_rows.h) over this component's kernels.
#include "dist_moe/quantize_rows.h"

#include "dist_moe/error.h"
#include "quant/quantize.h"

namespace dist_moe {

int64_t nvfp4_packed_row_bytes(int64_t hidden) { return quant::nvfp4_packed_row_bytes(hidden); }

void quantize_nvfp4_token_rows(const void* x_TD, int64_t tokens, int64_t hidden, int64_t x_row_stride, void* packed,
                               int64_t out_row_stride, cudaStream_t stream) {
  DMOE_CHECK_ARG(hidden > 0 && hidden % 64 == 0, "quantize_nvfp4_token_rows: D=", hidden,
                 " must be a positive multiple of 64 (the inverse scale is 4-byte aligned in the packed row)");
  DMOE_CHECK_ARG(out_row_stride >= quant::nvfp4_packed_row_bytes(hidden) && out_row_stride % 16 == 0,
                 "quantize_nvfp4_token_rows: the packed row stride ", out_row_stride, " must be a multiple of 16 and >= ",
                 quant::nvfp4_packed_row_bytes(hidden), " bytes for D=", hidden);
  DMOE_CHECK_ARG(reinterpret_cast<uintptr_t>(packed) % 16 == 0 && reinterpret_cast<uintptr_t>(x_TD) % 16 == 0,
                 "quantize_nvfp4_token_rows: x and the packed rows must be 16-byte aligned");
  auto* base = static_cast<uint8_t*>(packed);
  quant::nvfp4_quantize_rows({x_TD, tokens, hidden, x_row_stride},
                             {base, out_row_stride, base + hidden / 2, out_row_stride, base + hidden / 2 + hidden / 16,
                              out_row_stride},
                             stream);
}

}  // namespace dist_moe
