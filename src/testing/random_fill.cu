#include "testing/random_fill.h"

#include <cuda_bf16.h>

#include "dist_moe/check.h"

namespace dist_moe::testing {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // SplitMix64 finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_uniform_bf16_kernel(__nv_bfloat16* out, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;  // 24 bits in [-1, 1)
    out[i] = __float2bfloat16_rn(scale * u);
  }
}

}  // namespace

void fill_uniform_bf16(void* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream) {
  if (n <= 0) return;
  const int64_t blocks = (n + 255) / 256;
  fill_uniform_bf16_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(
      static_cast<__nv_bfloat16*>(out), n, seed, scale);
  DMOE_CUDA_CHECK_LAUNCH();
}

}  // namespace dist_moe::testing
