// Device-side random fills for benchmarks and large tests (weights of gigabytes are not worth
// generating on the host): a counter-based hash, so the same (seed, index) gives the same value.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dist_moe::testing {

// out[i] = BF16(scale * u), u uniform in [-1, 1) from hash(seed, i). n elements.
void fill_uniform_bf16(void* out, int64_t n, uint64_t seed, float scale, cudaStream_t stream);

}  // namespace dist_moe::testing
